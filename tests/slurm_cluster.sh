#!/usr/bin/env bash
# A private single-node Slurm (munged, slurmctld, slurmd as root, all state in one directory),
# for tests. Source it, then:
#   slurm_start BASE   start and wait until the node is idle; exports SLURM_CONF
#   slurm_stop         cancel jobs, stop the daemons by PID, wait for them to exit
# Facts behind the settings: ../shared/notes/slurm-local.md.

slurm_log() { echo "[slurm $(date +%T)] $*"; }

slurm_wait() { # seconds, then a command to retry
  local tries=$(($1 * 10)); shift
  until "$@" > /dev/null 2>&1; do
    tries=$((tries - 1))
    [ $tries -gt 0 ] || return 1
    sleep 0.1
  done
}

# The settings of both private clusters (this one and tests/slurm_nodes.sh's) under BASE $1.
slurm_conf_common() {
  cat << EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$1/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$1/state
SlurmctldPidFile=$1/run/slurmctld.pid
SlurmctldLogFile=$1/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$1/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$1/log/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
EOF
}

slurm_start() {
  SLURM_BASE=$1
  local B=$SLURM_BASE host
  host=$(hostname -s)
  mkdir -p "$B"/{etc,state,spool,log,run,tmp,munge}
  chmod 755 "$B"
  chmod 755 "$B/munge"
  chmod 700 "$B/etc"
  mungekey --create --keyfile="$B/etc/munge.key" --bits=1024 > /dev/null 2>&1 ||
    dd if=/dev/urandom of="$B/etc/munge.key" bs=1 count=1024 2> /dev/null
  chmod 600 "$B/etc/munge.key"
  munged --key-file="$B/etc/munge.key" --socket="$B/munge/munge.socket.2" \
    --pid-file="$B/munge/munged.pid" --log-file="$B/log/munged.log" --seed-file="$B/munge/munged.seed" ||
    { slurm_log "munged did not start"; return 1; }
  slurm_wait 60 sh -c "munge -n -S '$B/munge/munge.socket.2' | unmunge -S '$B/munge/munge.socket.2'" ||
    { slurm_log "munged does not answer"; return 1; }
  export SLURM_CONF=$B/etc/slurm.conf
  local port=$((16000 + RANDOM % 4000))
  { slurm_conf_common "$B"
    cat << EOF
ClusterName=mgttest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmdSpoolDir=$B/spool
SlurmdPidFile=$B/run/slurmd.pid
SlurmdLogFile=$B/log/slurmd.log
DependencyParameters=kill_invalid_depend
MinJobAge=16
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  } > "$SLURM_CONF"
  echo "PMIxCliTmpDirBase=$B/tmp" > "$B/etc/mpi.conf"
  : > "$B/etc/plugstack.conf"
  slurmctld -f "$SLURM_CONF" || { slurm_log "slurmctld did not start"; return 1; }
  slurm_wait 60 sh -c "scontrol ping | grep -q 'is UP'" || { slurm_log "slurmctld does not answer"; return 1; }
  slurmd -f "$SLURM_CONF" -N "$host" || { slurm_log "slurmd did not start"; return 1; }
  slurm_wait 60 sh -c "[ \"\$(sinfo -h -n '$host' -o %T)\" = idle ]" ||
    { slurm_log "node not idle:"; scontrol show node "$host"; return 1; }
  SLURM_PIDS="$(cat "$B/run/slurmctld.pid") $(cat "$B/run/slurmd.pid") $(cat "$B/munge/munged.pid")"
  slurm_log "ready: slurmctld, slurmd, munged = $SLURM_PIDS"
}

slurm_stop() {
  [ -n "${SLURM_BASE:-}" ] || return 0
  local pids=${SLURM_PIDS:-}
  scancel -p debug > /dev/null 2>&1
  slurm_wait 30 sh -c '[ -z "$(squeue -h)" ]'
  scontrol shutdown > /dev/null 2>&1
  local p
  for p in $pids; do
    slurm_wait 20 sh -c "[ ! -d /proc/$p ]" || kill -TERM "$p" 2> /dev/null
  done
  for p in $pids; do
    [ -d "/proc/$p" ] && kill -TERM "$p" 2> /dev/null
    slurm_wait 10 sh -c "[ ! -d /proc/$p ]" || kill -KILL "$p" 2> /dev/null
  done
  slurm_log "stopped"
  SLURM_BASE=
}

# State of a job from scontrol, or from the completion log once it has been purged.
slurm_job_state() {
  local s
  s=$(scontrol show job -o "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [ -z "$s" ] && s=$(grep "JobId=$1 " "$SLURM_BASE/log/jobcomp.log" 2> /dev/null | tail -1 |
    sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  echo "${s:-UNKNOWN}"
}

# slurm_wait_end STATE-COMMAND ID [SECONDS]: the job's final state, once it has one (a requeued
# job goes back to PENDING first); STILL-<state> after SECONDS (600)
slurm_wait_end() {
  local s deadline=$((SECONDS + ${3:-600}))
  while :; do
    s=$("$1" "$2")
    case "$s" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
    [ $SECONDS -lt $deadline ] || { s="STILL-$s"; break; }
    sleep 0.5
  done
  echo "$s"
}
