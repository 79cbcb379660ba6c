#!/usr/bin/env bash
# The watchdog on one node (tests/slurm_multinode.sh has the lost node): 4 ranks at tp=2 with
# --distributed-timeout-minutes 0.05 (3 s); one rank stopped with SIGSTOP once training runs.
# The job must end with status 76 within a bound (the timeout, a poll and mpiexec's teardown),
# the others saying which collective on which group they waited in; no rank may be left. The
# same run without a stopped rank finishes (the watchdog does not fire on a healthy job), and a
# negative timeout is refused. Usage: watchdog.sh MGT MPIEXEC
set -u
MGT=$1 MPIEXEC=$2
. "$(dirname "$0")/lib.sh"
export OMPI_MCA_mpi_yield_when_idle=1
A=(train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 128
  --mock-data --micro-batch-size 2 --global-batch-size 8 --eval-iters 0 --log-interval 1
  --tensor-model-parallel-size 2 --distributed-timeout-minutes 0.05)

"$MPIEXEC" -n 4 "$MGT" "${A[@]}" --train-iters 100000 --metrics-file "$tmp/m.jsonl" \
  > "$tmp/out" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  grep -q '"iteration":20,' "$tmp/m.jsonl" 2> /dev/null && break
  sleep 0.1
done
ranks=$(pgrep -P $job -x mgt | xargs) # mpiexec's children
victim=${ranks##* }
if [ -z "$victim" ]; then
  fail "no rank found to stop"
  kill $job
else
  kill -STOP "$victim"
  t0=$SECONDS
  (sleep 60 && kill -KILL $job) > /dev/null 2>&1 & # without a watchdog the job would hang
  guard=$!
  wait $job
  rc=$? took=$((SECONDS - t0))
  pkill -P $guard sleep
  kill $guard 2> /dev/null
  echo "ranks $ranks, $victim stopped: exit $rc after $took s"
  grep "watchdog" "$tmp/out" | head -3
  [ $rc = 76 ] || fail "exit $rc, wanted 76 (the watchdog's)"
  [ $took -le 30 ] || fail "the job took $took s to end, with a 3 s timeout"
  grep -Eq "watchdog: waited [0-9]+ s in .* on the ((tensor|data)-parallel group \{[0-9,]+\}|world \(4 ranks\)) in iteration [0-9]+" "$tmp/out" ||
    fail "no watchdog line naming the collective, its group and the iteration"
  sleep 1
  for p in $ranks; do
    [ -d "/proc/$p" ] && [ "$(cut -d' ' -f3 "/proc/$p/stat")" != Z ] && fail "rank $p left running"
  done
  kill -KILL "$victim" 2> /dev/null
fi

# 12 s: rank 0's start-up work (the configuration, the plan) under a sanitizer is not a lost peer
"$MPIEXEC" -n 4 "$MGT" "${A[@]}" --train-iters 40 --distributed-timeout-minutes 0.2 > "$tmp/ok" 2>&1 ||
  fail "a healthy job failed"
grep -q watchdog "$tmp/ok" && fail "the watchdog fired on a healthy job"
expect "distributed-timeout-minutes" "$MGT" "${A[@]}" --train-iters 1 --distributed-timeout-minutes -1
# a save longer than the timeout (660 MB over 1.2 s): the rank that does not write waits for the
# writer unwatched, as checkpoint I/O is not watched (it ended the job with 76)
"$MPIEXEC" -n 2 "$MGT" train --mock-data --num-layers 8 --hidden-size 768 --num-attention-heads 8 \
  --seq-length 16 --micro-batch-size 1 --global-batch-size 2 --train-iters 1 --eval-iters 0 \
  --distributed-timeout-minutes 0.02 --save "$tmp/big" > "$tmp/save" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(cat "$tmp/big/latest" 2> /dev/null)" = 1 ] && ! grep -q watchdog "$tmp/save" &&
  echo "ok: a save longer than the timeout at data-parallel 2 is not a lost peer" ||
  { fail "a long save (exit $rc)"; grep -E "watchdog|error" "$tmp/save" | head -3; }
rm -rf "$tmp/big"
echo "watchdog: $fails failures"
[ $fails = 0 ]
