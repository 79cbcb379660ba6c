#!/usr/bin/env bash
# Many nodes on a real Slurm: three nodes made of network namespaces on this machine
# (tests/slurm_nodes.sh), Open MPI over TCP between them (shared memory only inside a node).
#   1. jobs/gpt-small-cpu.sbatch submitted unchanged with --nodes=2 and --nodes=3: ranks placed
#      4 per node (seen by a wrapper around mgt: SLURM_PROCID and hostname), every
#      tensor-parallel group inside one node (mgt's placement line, checked against the
#      wrapper's), losses bit for bit those of mpiexec with the same flags on one node.
#   1b. jobs/gpt-2.5b-tp2.sbatch (the paper's layout: 2 tasks and GPUs a node, tp 2) with
#      --nodes=2 on stand-in GPUs, shrunk and on CPUs: groups inside nodes, bit for bit.
#   2. srun placements: cyclic (the grid puts the groups back inside the nodes), 4+2, and 3+1
#      (one group must span the nodes: the warning names it, --require-node-local-tp refuses);
#      the losses of every one bit for bit those of one node.
#   3. a node killed in the middle of a 3-node job: the watchdog (--distributed-timeout-minutes)
#      ends the step long before Slurm declares the node down, launch.sh requeues the job
#      without the dead node, it resumes on the other two at data-parallel 4 instead of 6 from
#      the last checkpoint and finishes; losses bit for bit the uninterrupted 3-node run's until
#      the kill, within 1e-5 after.
#   4. one rank killed (SIGKILL): requeued, resumed at the same layout, every loss (the re-run
#      iterations too) bit for bit the uninterrupted run's.
#   5. one rank stopped (SIGSTOP) with --max-restarts 0: the watchdog ends the job within its
#      bound, naming the collective, and launch.sh does not requeue.
#   6. a trainer that fails at once, twice, with no checkpoint in between: launch.sh stops after
#      the second failure, naming it.
# Usage: slurm_multinode.sh MGT SOURCE_DIR   (exit 77 where namespaces or Slurm are missing)
set -u
MGT=$(realpath "$1") SRC=$(realpath "$2")
MGT_REAL=$MGT
for c in slurmctld slurmd munged sbatch nsenter unshare ip; do
  command -v $c > /dev/null || { echo "$c not installed: skipped (jobs/deps.sh --test)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "network namespaces and the Slurm daemons need root: skipped"; exit 77; }
# shellcheck source=slurm_nodes.sh
. "$SRC/tests/slurm_nodes.sh"
why=$(nodes_usable) || { echo "$why: skipped"; exit 77; }
. "$SRC/tests/lib.sh"
chmod 755 "$tmp" # munged wants every directory above its socket searchable
trap 'nodes_down > /dev/null 2>&1; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT
# 16 CPUs and 2 stand-in GPUs a node, what gpt-2.5b-tp2.sbatch asks (2 tasks of 8 CPUs); Slurm
# takes a node for dead only after its SlurmdTimeout of 60 s, after the watchdog (15 s) and
# launch.sh have acted, as on clusters where it is 300 s and the watchdog is set below it
NODES_CPUS=16 NODES_GPUS=2 NODES_SLURMD_TIMEOUT=60 nodes_up "$tmp/cluster" 3 || exit 1
# shared memory inside a node, TCP between nodes (only the cluster's network)
export OMPI_MCA_btl_tcp_if_include=$NODES_NET.0/24 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$tmp/logs" "$tmp/place"
cd "$tmp" || exit 1

# mgt behind a wrapper: where each rank runs, and the flags rank 0 was given
cat > "$tmp/mgt" << EOF
#!/usr/bin/env bash
echo "\$SLURM_PROCID \$(hostname)" >> "$tmp/place/\$SLURM_JOB_ID-\${SLURM_RESTART_COUNT:-0}-\$SLURM_STEP_ID"
[ "\$SLURM_PROCID" = 0 ] && printf '%q ' "\$@" > "$tmp/place/\$SLURM_JOB_ID-\${SLURM_RESTART_COUNT:-0}.args"
[ -f "$tmp/fail-now" ] && exit 4
exec "$MGT" "\$@"
EOF
chmod +x "$tmp/mgt"
export MGT=$tmp/mgt OMP_NUM_THREADS=1
SMALL="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --log-interval 1
  --eval-iters 0 --save-interval 25 --lr-warmup-iters 10"

submit() { # NAME ITERS [sbatch flags...]: the job id; EXTRA flags from $MORE
  local name=$1 iters=$2
  shift 2
  EXTRA_ARGS="$SMALL --metrics-file $tmp/$name.jsonl ${MORE:-}" SAVE_DIR=$tmp/ckpt-$name \
    TRAIN_ITERS=$iters TP=2 nodes_run sbatch --parsable --job-name="$name" "$@" \
    "$SRC/jobs/gpt-small-cpu.sbatch"
}
wait_job() { slurm_wait_end nodes_job_state "$1" 400; }
wait_iteration() { # FILE N: until FILE has logged iteration N
  local deadline=$((SECONDS + 300))
  until grep -q "\"iteration\":$2," "$1" 2> /dev/null; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
# same_losses A B [FROM TO TOL]: every logged loss of B equals A's (bit for bit, or within TOL
# relative for iterations FROM..TO)
same_losses() {
  $PY - "$@" << 'EOPY'
import json, sys
def rows(f):
    out = []
    for line in open(f):
        r = json.loads(line)
        if "loss" in r: out.append((r["iteration"], r["loss"]))
    return out
ref = dict(rows(sys.argv[1]))
got = rows(sys.argv[2])
lo, hi, tol = (int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 3 else (1, 0, 0)
assert got and max(i for i, _ in got) == max(ref), "not every iteration ran: %d of %d" % (max(i for i, _ in got), max(ref))
exact = worst = 0
for i, loss in got:
    if lo <= i <= hi:
        worst = max(worst, abs(loss - ref[i]) / ref[i])
    else:
        assert loss == ref[i], "iteration %d: %r, uninterrupted %r" % (i, loss, ref[i])
        exact += 1
assert worst <= tol, worst
print("  %d losses bit for bit%s" % (exact, ", %d within %.1e of it (worst)" % (len(got) - exact, worst) if hi else ""))
EOPY
}
# placement_ok JOB RESTART LOG NODES PER: the wrapper saw PER ranks on each of NODES nodes, and
# every tensor-parallel group of mgt's placement line lives where the wrapper saw its ranks
placement_ok() {
  local f
  f=$(find "$tmp/place" -name "$1-$2-[0-9]*" | sort | head -1)
  $PY - "$f" "$3" "$4" "$5" << 'EOPY'
import collections, re, sys
seen = dict(line.split() for line in open(sys.argv[1]))
per = collections.Counter(seen.values())
assert sorted(per.values()) == [int(sys.argv[4])] * int(sys.argv[3]), per
line = [l for l in open(sys.argv[2]) if l.startswith("placement:")][-1]
groups = re.findall(r"\{([0-9,]+)\}@([a-z0-9+]+)", line)
assert len(groups) == len(seen) // 2, line
for ranks, where in groups:
    hosts = {seen[r] for r in ranks.split(",")}
    assert hosts == {where}, "group {%s} said %s, runs on %s" % (ranks, where, hosts)
print("  placement: %s" % " ".join("%s:%d" % kv for kv in sorted(per.items())))
print("  " + line.strip())
EOPY
}
# the uninterrupted reference of a job: mpiexec on one node (this namespace) with rank 0's flags
reference() { # JOB NAME RANKS
  local args
  args=$(cat "$tmp/place/$1-0.args")
  args=${args//$tmp\/$2.jsonl/$tmp/$2-mpiexec.jsonl}
  args=${args//ckpt-$2/ckpt-$2-mpiexec}
  eval "env -u OMPI_MCA_btl -u OMPI_MCA_btl_tcp_if_include mpiexec -n $3 $MGT_REAL $args" \
    > "$tmp/$2-mpiexec.log" 2>&1 || { tail -5 "$tmp/$2-mpiexec.log"; return 1; }
}
log_of() { echo "$tmp/logs/$2-$1.out"; }

echo "== 1. the job script unchanged on 2 and 3 nodes"
for n in 2 3; do
  job=$(submit "n$n" 200 --nodes=$n) || { fail "sbatch --nodes=$n"; continue; }
  s=$(wait_job "$job")
  echo "sbatch --nodes=$n: job $job $s"
  [ "$s" = COMPLETED ] || { fail "--nodes=$n ended $s"; tail -20 "$(log_of "$job" "n$n")"; continue; }
  placement_ok "$job" 0 "$(log_of "$job" "n$n")" $n 4 || fail "--nodes=$n placement"
  reference "$job" "n$n" $((4 * n)) || { fail "--nodes=$n: mpiexec reference"; continue; }
  same_losses "$tmp/n$n-mpiexec.jsonl" "$tmp/n$n.jsonl" || fail "--nodes=$n losses differ from one node's"
done

echo "== 1b. the paper's GPT 2.5B script on 2 nodes (shrunk, on CPUs): tensor parallelism in a node"
job=$(EXTRA_ARGS="$SMALL --vocab-size 1024 --micro-batch-size 2 --metrics-file $tmp/paper.jsonl" \
  SAVE_DIR=$tmp/ckpt-paper TRAIN_ITERS=30 DEVICE=cpu PRECISION="" \
  nodes_run sbatch --parsable --nodes=2 --job-name=paper "$SRC/jobs/gpt-2.5b-tp2.sbatch") ||
  fail "sbatch gpt-2.5b-tp2.sbatch"
s=$(wait_job "$job")
echo "sbatch --nodes=2 gpt-2.5b-tp2.sbatch: job $job $s"
if [ "$s" = COMPLETED ]; then
  placement_ok "$job" 0 "$(log_of "$job" paper)" 2 2 || fail "gpt-2.5b-tp2 placement"
  reference "$job" paper 4 && same_losses "$tmp/paper-mpiexec.jsonl" "$tmp/paper.jsonl" ||
    fail "gpt-2.5b-tp2: losses differ from one node's"
else
  fail "gpt-2.5b-tp2.sbatch ended $s"
  tail -20 "$(log_of "$job" paper)"
fi

echo "== 2. placements through srun: cyclic, 4+2, 3+1"
# shellcheck disable=SC2086 # SMALL is words
ref4() { # mpiexec on one node, the flags srun gets below
  mpiexec -n "$1" "$MGT_REAL" train $SMALL --mock-data --vocab-size 1024 --micro-batch-size 2 \
    --global-batch-size 24 --train-iters 30 --tensor-model-parallel-size 2 --metrics-file "$2" \
    --save-interval 0 > "$2.log" 2>&1 || { tail -5 "$2.log"; return 1; }
}
# shellcheck disable=SC2086 # SMALL is words
place() { # NAME EXPECT-RC srun flags... -- mgt flags...
  local name=$1 want=$2 a=()
  shift 2
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  local try rc ok=0
  for try in 1 2; do
    nodes_run srun --mpi=pmix "${a[@]}" "$MGT_REAL" train $SMALL --mock-data --vocab-size 1024 \
      --micro-batch-size 2 --global-batch-size 24 --train-iters 30 --tensor-model-parallel-size 2 \
      --metrics-file "$tmp/$name.jsonl" --save-interval 0 "$@" > "$tmp/$name.log" 2>&1
    rc=$?
    # Open MPI 4.1's TCP transport sometimes fails to connect at start and a rank dies inside
    # Open MPI (docs/performance.md, start-up): once, that start is run again
    grep -q "Open MPI failed to TCP connect" "$tmp/$name.log" && [ ! -s "$tmp/$name.jsonl" ] &&
      [ $try = 1 ] || break
    echo "  $name: Open MPI's TCP connect failed at start (exit $rc): run again"
  done
  if [ "$want" = fail ]; then [ $rc != 0 ] && ok=1; else [ $rc = "$want" ] && ok=1; fi
  [ $ok = 1 ] || { fail "$name: exit $rc, wanted $want"; tail -5 "$tmp/$name.log"; return 1; }
}
ref4 4 "$tmp/ref4.jsonl" || fail "mpiexec reference, 4 ranks"
ref4 6 "$tmp/ref6.jsonl" || fail "mpiexec reference, 6 ranks"
if place cyclic 0 -N2 --ntasks-per-node=2 -m cyclic --; then
  grep "placement:" "$tmp/cyclic.log" | sed 's/^/  /'
  grep -q "groups all within a node: {0,2}@node1 {1,3}@node2" "$tmp/cyclic.log" ||
    fail "cyclic: the groups are not {0,2}@node1 {1,3}@node2"
  same_losses "$tmp/ref4.jsonl" "$tmp/cyclic.jsonl" || fail "cyclic: losses"
fi
# uneven placements spelled out: Slurm's own choice for -n with --ntasks-per-node depends on the
# nodes' CPUs (5+1 here for -n6 on 16-CPU nodes)
printf 'node1\nnode1\nnode1\nnode1\nnode2\nnode2\n' > "$tmp/hosts-4-2"
printf 'node1\nnode1\nnode1\nnode2\n' > "$tmp/hosts-3-1"
if SLURM_HOSTFILE=$tmp/hosts-4-2 place four-two 0 -n6 -m arbitrary --; then
  grep "placement:" "$tmp/four-two.log" | sed 's/^/  /'
  grep -q "node1 4 ranks, node2 2 ranks; tensor-parallel groups all within a node" "$tmp/four-two.log" ||
    fail "4+2: not every group in a node"
  same_losses "$tmp/ref6.jsonl" "$tmp/four-two.jsonl" || fail "4+2: losses"
fi
if SLURM_HOSTFILE=$tmp/hosts-3-1 place three-one 0 -n4 -m arbitrary --; then
  grep "warning" "$tmp/three-one.log" | sed 's/^/  /'
  [ "$(grep -c "warning: 1 of 2 tensor-parallel groups span nodes ({2,3}@node1+node2)" "$tmp/three-one.log")" = 1 ] ||
    fail "3+1: no single warning naming {2,3}@node1+node2"
  same_losses "$tmp/ref4.jsonl" "$tmp/three-one.jsonl" || fail "3+1: losses"
fi
if SLURM_HOSTFILE=$tmp/hosts-3-1 place refused fail -n4 -m arbitrary -- --require-node-local-tp; then
  grep -q "span nodes ({2,3}@node1+node2) and --require-node-local-tp refuses it" "$tmp/refused.log" &&
    echo "  refused: $(grep -m1 error "$tmp/refused.log")" || fail "3+1 with --require-node-local-tp: no refusal"
  ! grep -q '"iteration"' "$tmp/refused.jsonl" 2> /dev/null || fail "3+1 refused but trained"
fi

echo "== 3. a node killed: the watchdog, a requeue without it, a resume at another layout"
MORE="--distributed-timeout-minutes 0.25"
job=$(submit kill-node 200 --nodes=2-3) || fail "sbatch kill-node"
# past the checkpoint of iteration 75 (--save-interval 25): the watchdog does not watch
# checkpoint I/O, so a node lost inside a save is Slurm's to notice (docs/hpc-guide.md)
wait_iteration "$tmp/kill-node.jsonl" 77 || fail "kill-node: no iteration 77"
nodes_kill 3
killed=$SECONDS
echo "node3 killed at iteration $(tail -1 "$tmp/kill-node.jsonl" | sed 's/.*"iteration":\([0-9]*\).*/\1/')"
log=$(log_of "$job" kill-node)
until grep -q "mgt train failed" "$log" || [ $((SECONDS - killed)) -gt 120 ]; do sleep 0.2; done
ended=$((SECONDS - killed))
s=$(wait_job "$job")
echo "job $job: $s; step ended $ended s after the kill; nodes $(nodes_job_field "$job" NodeList)," \
  "restarts $(nodes_job_field "$job" Restarts)"
grep -E "^\[launch|watchdog|loaded checkpoint|placement:" "$log" | sed 's/^/  /' | cut -c1-220
[ "$s" = COMPLETED ] || fail "kill-node ended $s"
grep -Eq "watchdog: waited .* in .* on the (.* group \{[0-9,]+\}|world \(12 ranks\))" "$log" || fail "kill-node: no watchdog message"
# the bound: the timeout (15 s) and a poll, well before Slurm's 60 s
[ $ended -le 35 ] || fail "kill-node: the step ended $ended s after the kill"
grep -q "nodes not answering, left out of the requeued job: node3" "$log" || fail "node3 not left out"
# a behaviour, not a count: a start that failed before the kill (and was started again or
# requeued) shifts the restart's number
grep -Eq "restart [1-9][0-9]* on 2 nodes .*8 tasks, tensor-parallel 2, resuming" "$log" || fail "no restart on 2 nodes"
grep -q "placement: 2 nodes x 4 ranks (node1, node2)" "$log" || fail "the restart is not on node1, node2"
last=$(sed -n 's/.*loaded checkpoint .*iter_0*\([0-9]*\)\.h5.*/\1/p' "$log" | tail -1)
echo "  resumed from iteration ${last:-none}"
[ -n "$last" ] && same_losses "$tmp/n3.jsonl" "$tmp/kill-node.jsonl" $((last + 1)) 200 1e-5 ||
  fail "kill-node: losses"
nodes_start 3 > /dev/null || fail "node3 did not come back"

echo "== 4. one rank killed: requeued, resumed at the same layout"
MORE=""
job=$(submit kill-rank 200 --nodes=2) || fail "sbatch kill-rank"
wait_iteration "$tmp/kill-rank.jsonl" 77 || fail "kill-rank: no iteration 77"
victim=$(for p in $(ip netns pids "$(nodes_ns 2)"); do
  [ "$(cat /proc/"$p"/comm 2> /dev/null)" = mgt ] && echo "$p"; done | head -1)
kill -KILL "$victim"
s=$(wait_job "$job")
log=$(log_of "$job" kill-rank)
echo "job $job: $s; restarts $(nodes_job_field "$job" Restarts)"
grep -E "^\[launch|loaded checkpoint" "$log" | sed 's/^/  /'
[ "$s" = COMPLETED ] || fail "kill-rank ended $s"
grep -q "requeueing job $job to resume from the last checkpoint" "$log" || fail "kill-rank: not requeued"
grep -q "loaded checkpoint" "$log" || fail "kill-rank: not resumed"
same_losses "$tmp/n2.jsonl" "$tmp/kill-rank.jsonl" || fail "kill-rank: losses"

echo "== 5. one rank stopped, --max-restarts 0"
MORE="--distributed-timeout-minutes 0.1 --max-restarts 0"
job=$(submit stop-rank 400 --nodes=2) || fail "sbatch stop-rank"
wait_iteration "$tmp/stop-rank.jsonl" 30 || fail "stop-rank: no iteration 30"
victim=$(for p in $(ip netns pids "$(nodes_ns 1)"); do
  [ "$(cat /proc/"$p"/comm 2> /dev/null)" = mgt ] && echo "$p"; done | sed -n 2p)
kill -STOP "$victim"
stopped=$SECONDS
s=$(wait_job "$job")
log=$(log_of "$job" stop-rank)
echo "job $job: $s $((SECONDS - stopped)) s after SIGSTOP"
grep -E "^\[launch|watchdog" "$log" | head -4 | sed 's/^/  /' | cut -c1-220
[ "$s" = FAILED ] || fail "stop-rank ended $s"
grep -q "watchdog: waited" "$log" || fail "stop-rank: no watchdog message"
grep -q "(--max-restarts 0): not requeueing" "$log" || fail "stop-rank: requeued past --max-restarts 0"
[ $((SECONDS - stopped)) -le 40 ] || fail "stop-rank: took $((SECONDS - stopped)) s"
kill -KILL "$victim" 2> /dev/null

echo "== 6. the same failure twice without progress"
MORE=""
touch "$tmp/fail-now"
# START_RETRIES=0: every failed start counts (tests/launch_policy.sh has the starts run again)
job=$(START_RETRIES=0 submit fail-twice 50 --nodes=1) || fail "sbatch fail-twice"
s=$(wait_job "$job")
rm -f "$tmp/fail-now"
log=$(log_of "$job" fail-twice)
echo "job $job: $s"
grep -E "^\[launch" "$log" | sed 's/^/  /'
[ "$s" = FAILED ] || fail "fail-twice ended $s"
grep -q "the same failure (status 4) twice with no newer checkpoint than none: not requeueing" "$log" ||
  fail "fail-twice: not stopped after the second failure"
[ "$(grep -c "mgt train failed with status 4 (failure" "$log")" = 2 ] || fail "fail-twice: not exactly two runs"

echo "== the cluster taken down"
nodes_down > /dev/null 2>&1
left=$(ip netns list | awk '{print $1}' | grep "^$NODES_PREFIX-")
[ -z "$left" ] || fail "namespaces left after nodes_down: $left"
cd / && pgrep -f "$tmp/cluster" && fail "processes of the cluster left after nodes_down"

echo "slurm_multinode: $fails failures"
[ $fails = 0 ]
