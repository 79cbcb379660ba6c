#!/usr/bin/env bash
# jobs/launch.sh's decisions after a start fails, with srun and scontrol replaced by stand-ins
# that run the trainer here and record what they were asked (tests/slurm_multinode.sh runs the
# script on a real Slurm). The trainer is the real mgt behind a wrapper that fails as told:
#   A. a start that dies before the first step (status 143, as a rank lost in Open MPI's TCP
#      wire-up) is started again, said so, not counted and not requeued; the run then trains
#      to its end;
#   B. starts that always die before the first step: run 1 + START_RETRIES times, then counted
#      as one failure and requeued;
#   C. a refused configuration (status 2) is not started again;
#   D. a failure after the first step (mgt.started written) is not started again: counted and
#      requeued;
#   E. a diverged run (status 3, --max-skipped-iterations) is not requeued.
# Usage: launch_policy.sh MGT SOURCE_DIR
set -u
MGT=$(readlink -f "$1") SRC=$(readlink -f "$2")
. "$SRC/tests/lib.sh"
mkdir -p "$tmp/bin"
cat > "$tmp/bin/srun" << 'EOF'
#!/usr/bin/env bash
# srun's stand-in: its options dropped, the command run here; as srun, USR1 forwarded to the
# task and TERM taken for "forcing job termination" (the task killed)
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
"$@" &
c=$!
trap 'kill -USR1 $c' USR1
trap 'echo "srun: forcing job termination"; kill -KILL $c' TERM
while :; do
  wait $c
  rc=$?
  kill -0 $c 2> /dev/null || exit $rc
done
EOF
cat > "$tmp/bin/scontrol" << EOF
#!/usr/bin/env bash
echo "\$*" >> "$tmp/scontrol.calls"
[ "\$1 \$2" = "show hostnames" ] && echo node1
exit 0
EOF
# the trainer: fails as $tmp/plan says (one status a line, the first line used up each start;
# "after" trains, then fails with status 1), else the real mgt
cat > "$tmp/bin/trainer" << EOF
#!/usr/bin/env bash
echo start >> "$tmp/starts"
what=\$(head -n 1 "$tmp/plan" 2> /dev/null)
sed -i 1d "$tmp/plan" 2> /dev/null
case \$what in
"") exec "$MGT" "\$@" ;;
after) "$MGT" "\$@"; exit 1 ;;
*) exit "\$what" ;;
esac
EOF
chmod +x "$tmp/bin/"*
TRAIN=(--mock-data --tokenizer-type ByteTokenizer --num-layers 1 --hidden-size 16 --num-attention-heads 2
  --seq-length 8 --micro-batch-size 1 --train-iters 3 --eval-iters 0 --log-interval 1)

# scenario NAME "PLAN LINES": runs launch.sh once; its exit status in $rc, its output in $tmp/NAME.log
scenario() {
  local name=$1
  rm -rf "$tmp/save" "$tmp/starts" "$tmp/scontrol.calls"
  printf '%s' "$2" > "$tmp/plan"
  PATH=$tmp/bin:$PATH SAVE_DIR=$tmp/save MGT=$tmp/bin/trainer SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=node1 \
    SLURM_JOB_NUM_NODES=1 SLURM_NTASKS=1 timeout -k 5 120 "$SRC/jobs/launch.sh" "${TRAIN[@]}" > "$tmp/$name.log" 2>&1
  rc=$?
  starts=$(wc -l < "$tmp/starts")
  touch "$tmp/scontrol.calls"
  requeues=$(grep -c "^requeue 4242" "$tmp/scontrol.calls")
  failures=0
  [ -f "$tmp/save/launch-failures" ] && failures=$(wc -l < "$tmp/save/launch-failures")
  echo "$name: exit $rc, $starts starts, $requeues requeues, $failures failures recorded"
}

scenario A "143
"
[ $rc = 0 ] && [ "$starts" = 2 ] && [ "$requeues" = 0 ] && [ "$failures" = 0 ] &&
  [ "$(cat "$tmp/save/latest")" = 3 ] && [ "$(cat "$tmp/save/mgt.started")" = "iteration 1" ] &&
  grep -q "mgt train failed with status 143 before its first step (a start-up failure): starting it again (1 of 2 such retries; not counted as a failure)" "$tmp/A.log" &&
  echo "ok: a start that died before the first step started again, not counted; the run finished" ||
  { fail "A"; cat "$tmp/A.log"; }

scenario B "1
1
1
"
[ $rc = 0 ] && [ "$starts" = 3 ] && [ "$requeues" = 1 ] && [ "$failures" = 1 ] &&
  grep -q "mgt train failed with status 1 (failure 1 of job 4242" "$tmp/B.log" &&
  echo "ok: starts that always die before the first step: 3 starts, then one failure, requeued" ||
  { fail "B"; cat "$tmp/B.log"; }

scenario C "2
"
[ "$starts" = 1 ] && [ "$failures" = 1 ] && ! grep -q "starting it again" "$tmp/C.log" &&
  echo "ok: a refused configuration is not started again" || { fail "C"; cat "$tmp/C.log"; }

scenario D "after
"
[ $rc = 0 ] && [ "$starts" = 1 ] && [ "$requeues" = 1 ] && [ "$failures" = 1 ] && [ -e "$tmp/save/mgt.started" ] &&
  echo "ok: a failure after the first step is counted and requeued, not started again" ||
  { fail "D"; cat "$tmp/D.log"; }

scenario E "3
"
[ $rc = 3 ] && [ "$starts" = 1 ] && [ "$requeues" = 0 ] && grep -q "its loss diverged" "$tmp/E.log" &&
  echo "ok: a diverged run (status 3) is not requeued" || { fail "E"; cat "$tmp/E.log"; }

# a stop by signal while the trainer runs: USR1 (--signal's warning before the time limit)
# saves and requeues; TERM (scancel) saves, reaching the trainer as USR1 (srun kills the
# ranks on TERM), and ends the job: not requeued
for sig in USR1 TERM; do
  rm -rf "$tmp/save" "$tmp/starts" "$tmp/scontrol.calls" "$tmp/plan"
  PATH=$tmp/bin:$PATH SAVE_DIR=$tmp/save MGT=$tmp/bin/trainer SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=node1 \
    SLURM_JOB_NUM_NODES=1 SLURM_NTASKS=1 "$SRC/jobs/launch.sh" "${TRAIN[@]}" \
    --train-iters 100000 > "$tmp/$sig.log" 2>&1 &
  launcher=$!
  (sleep 120 && kill -KILL $launcher) > /dev/null 2>&1 & # off the test's output: ctest waits for it
  guard=$!
  for _ in $(seq 300); do [ -e "$tmp/save/mgt.started" ] && break; sleep 0.1; done
  kill -$sig $launcher
  wait $launcher
  rc=$?
  kill $(pgrep -P $guard) $guard 2> /dev/null
  touch "$tmp/scontrol.calls"
  requeues=$(grep -c "^requeue 4242" "$tmp/scontrol.calls")
  want=$([ $sig = USR1 ] && echo 1 || echo 0)
  [ $rc = 0 ] && [ -f "$tmp/save/latest" ] && [ "$requeues" = "$want" ] && ! grep -q "forcing job termination" "$tmp/$sig.log" &&
    echo "ok: SIG$sig while training: a checkpoint saved (iteration $(cat "$tmp/save/latest")), $requeues requeue" ||
    { fail "SIG$sig while training: exit $rc, $requeues requeues"; cat "$tmp/$sig.log"; }
done

echo "launch_policy: $fails failures"
[ $fails = 0 ]
