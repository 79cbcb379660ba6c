#!/usr/bin/env bash
# Runs `mgt train` as a job step of a Slurm allocation, resuming from the latest checkpoint and
# requeueing the job when the trainer stops early. The sbatch scripts of this directory exec it.
#
#   launch.sh [mgt train flags...]
#
# Environment:
#   SAVE_DIR    checkpoint directory (required); the run resumes from it when it has `latest`
#   MGT         the mgt binary (default: mgt on PATH)
#   TP          tensor-parallel size (default 1)
#   TP_RESTART  tensor-parallel size once the job has been requeued (default: TP), to resume
#               on another shape
#
# Slurm delivers --signal=B:USR1@N to this shell, which forwards it to srun and so to every
# rank; the trainer finishes its iteration, saves, and exits 75. This script then runs
# `scontrol requeue` and exits 0; the requeued job starts over here and resumes. SIGTERM (the
# time limit, scancel) is forwarded the same way.
set -u
: "${SAVE_DIR:?set SAVE_DIR, the checkpoint directory}"
MGT=${MGT:-mgt}
restart=${SLURM_RESTART_COUNT:-0}
tp=${TP:-1}
if [ "$restart" -gt 0 ] && [ -n "${TP_RESTART:-}" ]; then tp=$TP_RESTART; fi
load=()
[ -f "$SAVE_DIR/latest" ] && load=(--load "$SAVE_DIR")
echo "[launch $(date +%T)] job ${SLURM_JOB_ID:-?} restart $restart: ${SLURM_NTASKS:-?} tasks," \
  "tensor-parallel $tp, $([ ${#load[@]} -gt 0 ] && echo "resuming from $SAVE_DIR" || echo "starting")"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
srun --mpi=pmix "$MGT" train "$@" --tensor-model-parallel-size "$tp" --save "$SAVE_DIR" \
  "${load[@]}" &
pid=$!
trap 'echo "[launch $(date +%T)] SIGUSR1: asking the trainer to save and stop"; kill -USR1 $pid' USR1
trap 'echo "[launch $(date +%T)] SIGTERM: asking the trainer to save and stop"; kill -TERM $pid' TERM
# a trapped signal interrupts `wait`; wait again until srun has really ended
while :; do
  wait "$pid"
  rc=$?
  kill -0 "$pid" 2> /dev/null || break
done
if [ "$rc" = 75 ]; then
  echo "[launch $(date +%T)] checkpoint saved; requeueing job ${SLURM_JOB_ID:-?}"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
echo "[launch $(date +%T)] mgt train exited with status $rc"
exit "$rc"
