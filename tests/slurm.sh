#!/usr/bin/env bash
# On a real Slurm started here (munged, slurmctld, slurmd): submit the project's own job script
# jobs/gpt-small-cpu.sbatch (shrunk through EXTRA_ARGS) twice, 4 tasks at tensor-parallel 2 x
# data-parallel 2, one after the other:
#   - a job that Slurm signals in the middle of training (scancel --signal=USR1 --batch once
#     its metrics pass iteration 300: the signal --signal=B:USR1@N delivers before the time
#     limit, sent when the job is known to be training, so that the test does not depend on
#     how fast the machine is): it must save, requeue itself, resume at tensor-parallel 4
#     (TP_RESTART) and finish;
#   - a reference job with time to spare, which runs uninterrupted.
# The losses must agree within 1e-5. Every daemon started is stopped by PID at the end.
# Usage: slurm.sh MGT SOURCE_DIR   (exit 77 when Slurm or munge is missing, or not root)
set -u
MGT=$(realpath "$1") SRC=$(realpath "$2")
for c in slurmctld slurmd munged sbatch; do
  command -v $c > /dev/null || { echo "$c not installed: skipped (jobs/deps.sh --test)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "the private Slurm runs its daemons as root: skipped"; exit 77; }
tmp=$(mktemp -d)
chmod 755 "$tmp" # munged wants every directory above its socket searchable
# shellcheck source=slurm_cluster.sh
. "$SRC/tests/slurm_cluster.sh"
trap 'slurm_stop; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT
slurm_start "$tmp/slurm" || exit 1
mkdir -p "$tmp/logs"
cd "$tmp" || exit 1
ITERS=800 # the signal lands at 300: 500 iterations of margin for its delivery
# 4 ranks on 2 cores: MPI must yield the core while it waits instead of spinning
export MGT TRAIN_ITERS=$ITERS TP=2 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
SMALL="--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --log-interval 1"

wait_job() { slurm_wait_end slurm_job_state "$1"; }

job=$(EXTRA_ARGS="$SMALL --metrics-file $tmp/job.jsonl" SAVE_DIR=$tmp/job TP_RESTART=4 \
  sbatch --parsable --job-name=interrupted --time=15 "$SRC/jobs/gpt-small-cpu.sbatch") || exit 1
slurm_log "submitted job $job"
signaled=0
for _ in $(seq 1 1200); do
  if [ -f "$tmp/job.jsonl" ] && grep -q '"iteration":300,' "$tmp/job.jsonl"; then
    scancel --signal=USR1 --batch "$job" && signaled=1
    break
  fi
  sleep 0.5
done
slurm_log "job $job at iteration 300: USR1 sent to its batch shell ($signaled)"
b=$(wait_job "$job")
slurm_log "job $job: $b"
ref=$(EXTRA_ARGS="$SMALL --metrics-file $tmp/ref.jsonl" SAVE_DIR=$tmp/ref \
  sbatch --parsable --job-name=ref "$SRC/jobs/gpt-small-cpu.sbatch") || exit 1
slurm_log "submitted reference job $ref"
a=$(wait_job "$ref")
slurm_log "reference job $ref: $a"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
log=$tmp/logs/interrupted-$job.out
[ "$a" = COMPLETED ] || { fail "reference job $a"; tail -20 "$tmp/logs/ref-$ref.out"; }
[ "$b" = COMPLETED ] || fail "interrupted job $b"
echo "---- job $job log (launcher and checkpoint lines) ----"
grep -E "^\[launch|saved checkpoint|loaded checkpoint|SIGUSR1|layout:|iteration +$ITERS/" "$log"
echo "----"
grep -q "SIGUSR1 after iteration" "$log" || fail "the trainer did not stop on SIGUSR1"
grep -q "requeueing job $job" "$log" || fail "the job did not requeue itself"
grep -Eq "restart 1 on .*: 4 tasks, tensor-parallel 4, resuming" "$log" || fail "no restart at tensor-parallel 4"
grep -q "layout: 4 ranks = tensor-parallel 4 x data-parallel 1" "$log" || fail "the restart did not use tp=4"
grep -q "loaded checkpoint" "$log" || fail "the restart did not load the checkpoint"
/usr/bin/python3 - "$tmp/ref.jsonl" "$tmp/job.jsonl" "$ITERS" << 'PY' || fail "losses differ"
import json, sys
rows = lambda f: {r["iteration"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r}
ref, job, n = rows(sys.argv[1]), rows(sys.argv[2]), int(sys.argv[3])
assert n in ref and n in job, "no final iteration"
worst = max(abs(job[i] - ref[i]) / ref[i] for i in job)
print("final loss %.9f (interrupted, resumed at tp=4) vs %.9f (uninterrupted); worst over %d "
      "iterations %.1e" % (job[n], ref[n], len(job), worst))
assert worst <= 1e-5
PY
echo "slurm: $fails failures"
[ $fails = 0 ]
