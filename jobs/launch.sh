#!/usr/bin/env bash
# Runs `mgt train` as a job step of a Slurm allocation, resuming from the latest checkpoint and
# requeueing the job when the trainer stops early or fails. The sbatch scripts of this
# directory exec it.
#
#   launch.sh [--max-restarts N] [mgt train flags...]
#
# Environment:
#   SAVE_DIR      checkpoint directory (required); the run resumes from it when it has `latest`
#   MGT           the mgt binary (default: mgt on PATH)
#   TP            tensor-parallel size (default 1)
#   TP_RESTART    tensor-parallel size once the job has been requeued (default: TP), to resume
#                 on another shape
#   MAX_RESTARTS  as --max-restarts (default 3)
#   START_RETRIES starts run again when they fail before the first step (default 2)
#
# Slurm delivers --signal=B:USR1@N to this shell, which forwards it to srun and so to every
# rank; the trainer finishes its iteration, saves, and exits 75. This script then runs
# `scontrol requeue` and exits 0; the requeued job starts over here and resumes. SIGTERM
# (scancel, or a time limit reached without that warning) reaches srun as USR1 too (srun would
# kill the ranks on TERM): the trainer saves, and the job ends there, not requeued: scancel
# stops a job.
#
# A start that fails before the trainer's first step (SAVE_DIR/mgt.started absent) is run again
# in the same allocation, up to START_RETRIES (default 2) times, and not counted as a failure.
#
# A run stopped by --max-skipped-iterations (status 3, diverged) is not requeued.
#
# Failure policy: when the trainer fails otherwise (a crashed rank, the watchdog's status 76
# after a lost peer, a lost node), the job is requeued too and resumes from the last complete
# checkpoint on whatever nodes Slurm gives it, up to --max-restarts failures for this job
# (counted across requeues in SAVE_DIR/launch-failures). A job that fails twice in a row with
# the same status and no newer checkpoint in between stops with that status: the failure is
# not going away by itself. Slurm requeues a job by itself on a node failure (--requeue).
set -u
: "${SAVE_DIR:?set SAVE_DIR, the checkpoint directory}"
MGT=${MGT:-mgt}
max_restarts=${MAX_RESTARTS:-3}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
  --max-restarts)
    if [ $# -lt 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
      echo "launch.sh: --max-restarts needs a count (got '${2:-}')" >&2
      exit 2
    fi
    max_restarts=$2
    shift 2
    ;;
  *)
    args+=("$1")
    shift
    ;;
  esac
done
say() { echo "[launch $(date +%T)] $*"; }
restart=${SLURM_RESTART_COUNT:-0}
tp=${TP:-1}
if [ "$restart" -gt 0 ] && [ -n "${TP_RESTART:-}" ]; then tp=$TP_RESTART; fi
load=()
[ -f "$SAVE_DIR/latest" ] && load=(--load "$SAVE_DIR")
say "job ${SLURM_JOB_ID:-?} restart $restart on ${SLURM_JOB_NUM_NODES:-?} nodes" \
  "(${SLURM_JOB_NODELIST:-?}): ${SLURM_NTASKS:-?} tasks, tensor-parallel $tp," \
  "$([ ${#load[@]} -gt 0 ] && echo "resuming from $SAVE_DIR" || echo "starting")"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
# srun no longer inherits --cpus-per-task from sbatch (Slurm 22.05): ask for it again, or every
# rank's threads share one CPU where tasks are bound
[ -n "${SLURM_CPUS_PER_TASK:-}" ] && export SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}
# mgt train writes SAVE_DIR/mgt.started after the first step of a run: a step that fails
# without it never trained. Such a start (Open MPI's TCP wire-up across nodes now and then
# fails before the first collective completes) is run again, up to START_RETRIES more times,
# and not counted as a failure; a refused configuration (status 2) is not run again.
start_retries=${START_RETRIES:-2}
if ! [[ "$start_retries" =~ ^[0-9]+$ ]]; then
  echo "launch.sh: START_RETRIES needs a count (got '$start_retries')" >&2
  exit 2
fi
# a stop asked before anything started: as after a save; usr1, terminated: which signals came;
# ran: the trainer was started by this pass (a stop before that saved nothing)
signalled=0 usr1=0 terminated=0 rc=75 ran=0
for start in $(seq 0 "$start_retries"); do
  # until srun runs, a signal is remembered (a trapped signal reaches srun as its default; an
  # ignored one would be ignored there too)
  trap 'signalled=1 usr1=1' USR1
  trap 'signalled=1 terminated=1' TERM
  [ $signalled = 0 ] || { rc=75 ran=0; break; }
  rm -f "$SAVE_DIR/mgt.started"
  ran=1
  # --kill-on-bad-exit: one rank that exits with an error (the watchdog's) ends the step, even
  # when a stopped rank never would
  srun --mpi=pmix --kill-on-bad-exit=1 "$MGT" train "${args[@]}" --tensor-model-parallel-size "$tp" \
    --save "$SAVE_DIR" "${load[@]}" &
  pid=$!
  trap 'signalled=1 usr1=1; say "SIGUSR1: asking the trainer to save and stop"; kill -USR1 $pid' USR1
  trap 'signalled=1 terminated=1; say "SIGTERM: asking the trainer to save and stop"; kill -USR1 $pid' TERM
  [ $signalled = 0 ] || kill -USR1 "$pid" # one that came as srun started
  # a trapped signal interrupts `wait`; wait again until srun has really ended
  while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2> /dev/null || break
  done
  # srun has ended: the job's own end (a requeue's SIGTERM) must not cut the steps below short
  trap '' USR1 TERM
  case $rc in 0 | 2 | 3 | 75) break ;; esac
  [ $signalled = 0 ] && [ ! -e "$SAVE_DIR/mgt.started" ] && [ "$start" -lt "$start_retries" ] ||
    break
  say "mgt train failed with status $rc before its first step (a start-up failure):" \
    "starting it again ($((start + 1)) of $start_retries such retries; not counted as a failure)"
  trap 'signalled=1 usr1=1' USR1
  trap 'signalled=1 terminated=1' TERM
  sleep 2
done
trap '' USR1 TERM
requeue() {
  if scontrol requeue "$SLURM_JOB_ID"; then exit 0; fi
  say "scontrol requeue failed"
  exit "$rc"
}
if [ "$rc" = 0 ]; then
  say "mgt train finished"
  exit 0
fi
# SIGTERM without the USR1 warning before it: a cancelled job (or a time limit reached without
# the warning) ends here, whatever the trainer's status
if [ "$terminated" = 1 ] && [ "$usr1" = 0 ] && [ "$rc" != 0 ]; then
  say "stopped by SIGTERM (scancel, or the time limit without --signal's warning):" \
    "$([ "$rc" != 75 ] && echo "status $rc" || { [ $ran = 1 ] && echo "checkpoint saved" || echo "no checkpoint saved"; }); not requeueing"
  [ "$rc" = 75 ] && exit 0
  exit "$rc"
fi
if [ "$rc" = 75 ]; then
  say "$([ $ran = 1 ] && echo "checkpoint saved" || echo "stopped with no checkpoint saved");" \
    "requeueing job ${SLURM_JOB_ID:-?}"
  requeue
fi
if [ "$rc" = 3 ]; then # diverged: a restart would diverge again, from a later checkpoint
  say "mgt train stopped: its loss diverged (--max-skipped-iterations): not requeueing"
  exit 3
fi
# a failure: the checkpoint it would resume from, and this job's earlier failures
latest=$(cat "$SAVE_DIR/latest" 2> /dev/null || echo none)
record=$SAVE_DIR/launch-failures
failures=0 last=""
if [ -f "$record" ]; then
  failures=$(awk -v j="${SLURM_JOB_ID:-?}" '$1 == j' "$record" | wc -l)
  last=$(awk -v j="${SLURM_JOB_ID:-?}" '$1 == j {s = $3 " " $4} END {print s}' "$record")
fi
say "mgt train failed with status $rc (failure $((failures + 1)) of job ${SLURM_JOB_ID:-?};" \
  "latest checkpoint: $latest)"
if ! { mkdir -p "$SAVE_DIR" && echo "${SLURM_JOB_ID:-?} $restart $rc $latest $(date +%s)" >> "$record"; }; then
  say "cannot record the failure in $record: not requeueing"
  exit "$rc"
fi
if [ "$last" = "$rc $latest" ]; then
  say "the same failure (status $rc) twice with no newer checkpoint than $latest: not requeueing"
  exit "$rc"
fi
if [ "$failures" -ge "$max_restarts" ]; then
  say "$failures restarts after failures already (--max-restarts $max_restarts): not requeueing"
  exit "$rc"
fi
# Nodes that do not answer now are left out of the requeued job: Slurm may not have noticed a
# lost node yet (SlurmdTimeout) and would give it back.
lost=() probes=()
mapfile -t nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2> /dev/null)
for n in "${nodes[@]}"; do
  timeout 20 srun --nodes=1 --ntasks=1 --nodelist="$n" --overlap true > /dev/null 2>&1 &
  probes+=("$!:$n")
done
for p in "${probes[@]}"; do wait "${p%%:*}" || lost+=("${p#*:}"); done
if [ ${#lost[@]} -gt 0 ]; then
  # Slurm keeps the task count of the first start: on fewer nodes, fewer tasks (the checkpoint
  # resumes at the data-parallel size they give)
  left=$((${#nodes[@]} - ${#lost[@]}))
  size=() per_node=${SLURM_NTASKS_PER_NODE:-}
  per_node=${per_node%%[!0-9]*}
  [ -n "$per_node" ] && [ $left -gt 0 ] && size=("NumNodes=$left" "NumTasks=$((left * per_node))")
  say "nodes not answering, left out of the requeued job: ${lost[*]} (${size[*]:-same size})"
  # held while it changes; Slurm may have requeued it already for the node's failure, and a
  # pending job takes the change as well
  held=0
  scontrol requeuehold "$SLURM_JOB_ID" 2> /dev/null && held=1
  changed=0
  scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$(IFS=,; echo "${lost[*]}")" "${size[@]}" &&
    changed=1
  [ $held = 0 ] || scontrol release "$SLURM_JOB_ID" || held=2
  [ $changed = 1 ] || say "could not leave out ${lost[*]}"
  [ $held != 2 ] || say "scontrol release failed: the job stays held"
  [ $held = 1 ] || [ $changed = 1 ] && exit 0
  say "the job could neither be requeued nor changed"
  exit "$rc"
fi
say "requeueing job ${SLURM_JOB_ID:-?} to resume from the last checkpoint"
requeue
