#!/usr/bin/env bash
# A private MULTI-NODE Slurm for tests: every node is a network namespace on this machine, with
# its own IP address and hostname; all nodes share the filesystem. Source it, then:
#   nodes_usable          0 if this machine can run it, else prints why (one line) and returns 1
#   nodes_up BASE N       node1..nodeN idle (all state under BASE); exports SLURM_CONF
#   nodes_run CMD...      run CMD on the head node (sbatch, srun, squeue, scontrol must run there)
#   nodes_kill I          crash node I: SIGKILL every process in its namespace
#   nodes_start I         reboot node I: empty spool and tmp, start slurmd, wait until it serves
#   nodes_down            cancel jobs, stop everything by PID, delete the namespaces (idempotent)
#   nodes_job_state ID    COMPLETED, RUNNING, ... from scontrol, or from the jobcomp log once purged
#   nodes_job_field ID F  field F (Restarts, NodeList, ...) of `scontrol show job -o ID`
#   nodes_ns [I]          namespace of node I (of the head node without I); nodes_ip I: its address
#   nodes_wait SECONDS CMD...  retry CMD (a function too) until it succeeds
# Settings (environment): NODES_CPUS (2 per node), NODES_GPUS (0 per node; stand-ins that only
# let jobs asking --gpus-per-node be scheduled), NODES_SLURMD_TIMEOUT (10 s: a dead node is DOWN
# after about 3 times that), NODES_TIMEOUT (60 s to come up), NODES_PREFIX (namespace names,
# mgt$$), NODES_NET (10.78.X, X from the PID: three octets of the /24). One cluster per shell:
# nodes_up sets NODES_PREFIX, NODES_NET, NODES_BASE and NODES_N for the other functions.
# Layout: namespace PREFIX-head holds the bridge (NET.1), munged and slurmctld (hostname ctl);
# PREFIX-nI holds eth0 = NET.(10+I) and `slurmd -N nodeI` (hostname nodeI). The root namespace
# gets no address: the cluster is reachable only from its own namespaces, hence nodes_run.
# Facts behind the settings: ../shared/notes/multinode.md; the single-node one is slurm_cluster.sh.

# shellcheck source=slurm_cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/slurm_cluster.sh" # slurm_conf_common

nodes_log() { echo "[nodes $(date +%T)] $*"; }

nodes_wait() { slurm_wait "$@"; } # seconds, then a command to retry

_nodes_names() { # fix the prefix and the network of this run (two runs differ by their PID)
  NODES_PREFIX=${NODES_PREFIX:-mgt$$}
  NODES_PREFIX=${NODES_PREFIX:0:10}
  NODES_NET=${NODES_NET:-10.78.$(($$ % 254 + 1))}
}
nodes_ns() { if [ -n "${1:-}" ]; then echo "$NODES_PREFIX-n$1"; else echo "$NODES_PREFIX-head"; fi; }
nodes_ip() { echo "$NODES_NET.$((10 + $1))"; }

# `ip netns exec` would remount /sys privately, hiding /sys/fs/cgroup, and slurmd dies: nsenter
_nodes_in() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }
_nodes_daemon() { # NS HOSTNAME CMD...: with its own hostname and a clean environment
  local ns=$1 host=$2; shift 2
  # shellcheck disable=SC2016 # expanded by that sh
  _nodes_in "$ns" unshare --uts env -i PATH="$PATH" sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

_nodes_alive() { # PID: exists and is not a zombie
  local s
  s=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
  s=${s##*) }
  [ "${s%% *}" != Z ]
}
_nodes_ns_pids() { [ -e "/run/netns/$1" ] && ip netns pids "$1" 2> /dev/null | xargs; }
_nodes_pid() { # PROGRAM NS PIDFILE: the PID, if it is still PROGRAM and lives in NS
  local pid exe
  pid=$(cat "$3" 2> /dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && _nodes_alive "$pid" || return 1
  exe=$(readlink "/proc/$pid/exe" 2> /dev/null) # Debian: slurmd -> slurmd-wlm (alternatives)
  case ${exe##*/} in "$1" | "$1-wlm") ;; *) return 1 ;; esac
  [ "$(stat -L -c %i "/proc/$pid/ns/net" 2> /dev/null)" = "$(stat -L -c %i "/run/netns/$2" 2> /dev/null)" ] || return 1
  echo "$pid"
}
_nodes_gone() { local p; for p; do _nodes_alive "$p" && return 1; done; return 0; }
_nodes_stop() { # SECONDS PID...: wait that long for them to exit, then TERM, then KILL
  local secs=$1 sig; shift
  for sig in 0 TERM KILL; do
    [ $sig = 0 ] || kill -s $sig "$@" 2> /dev/null
    nodes_wait "$secs" _nodes_gone "$@" && return 0
    secs=5
  done
  nodes_log "WARNING: could not stop $*"
  return 1
}
# shellcheck disable=SC2086 # lists of signals and PIDs
_nodes_clear_ns() { # "SIGNAL..." NS...: signal every process in these namespaces, in turn, until none is left
  local sigs=$1 sig ns pids; shift
  for sig in $sigs; do
    pids=$(for ns; do _nodes_ns_pids "$ns"; done | xargs)
    [ -n "$pids" ] || return 0
    kill -s "$sig" $pids 2> /dev/null
    nodes_wait 5 _nodes_gone $pids
  done
  pids=$(for ns; do _nodes_ns_pids "$ns"; done | xargs)
  [ -z "$pids" ] || { nodes_log "WARNING: processes left in $*: $pids"; return 1; }
}
_nodes_namespaces() { # ours, the head node last
  ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$NODES_PREFIX-n[0-9]+\$"
  [ -e "/run/netns/$(nodes_ns)" ] && nodes_ns
  return 0
}
_nodes_rm_run_netns() { # undo the first `ip netns add`'s /run/netns if it made it and it is empty
  [ -e "$1" ] && [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ] || return 0
  while mountpoint -q /run/netns; do umount /run/netns 2> /dev/null || break; done
  rmdir /run/netns 2> /dev/null
  rm -f "$1"
}

nodes_usable() {
  local c ns err='' made=''
  [ "$(id -u)" = 0 ] || { echo "not root: network namespaces and the Slurm daemons need root"; return 1; }
  for c in slurmctld slurmd munged munge unmunge sbatch srun scontrol sinfo squeue scancel nsenter unshare ip; do
    command -v $c > /dev/null || { echo "$c is not installed"; return 1; }
  done
  _nodes_names
  ns=$NODES_PREFIX-probe
  [ -d /run/netns ] || made=$(mktemp)
  if ! err=$(ip netns add "$ns" 2>&1); then
    err="ip netns add fails: $err"
  else
    { err=$(ip -n "$ns" link add b0 type bridge 2>&1) && err=$(ip -n "$ns" link add v0 type veth peer name v1 2>&1) ||
      err="cannot create a bridge or a veth pair: $err"; } &&
      { err=$(nsenter --net="/run/netns/$ns" unshare --uts true 2>&1) || err="nsenter/unshare fails: $err"; }
    ip netns del "$ns"
  fi
  [ -z "$made" ] || { _nodes_rm_run_netns "$made"; rm -f "$made"; }
  [ -z "$err" ] && return 0
  echo "$err" | head -1
  return 1
}

_nodes_write_conf() { # BASE N
  local B=$1 n=$2 i
  { slurm_conf_common "$B"
    cat << EOF
ClusterName=$NODES_PREFIX
SlurmctldHost=ctl($NODES_NET.1)
SlurmdSpoolDir=$B/spool/%n
SlurmdPidFile=$B/run/slurmd-%n.pid
SlurmdLogFile=$B/log/slurmd-%n.log
TmpFS=$B/tmp/%n
FirstJobId=$(($$ % 10000 * 1000 + 1))
MinJobAge=10
KillWait=2
SlurmdTimeout=${NODES_SLURMD_TIMEOUT:-10}
EOF
  } > "$SLURM_CONF"
  local gres="" g=${NODES_GPUS:-0}
  if [ "$g" -gt 0 ]; then
    # stand-in GPUs: Slurm counts them from files, which need not be devices (it logs that);
    # jobs asking --gpus-per-node are accepted and get no CUDA_VISIBLE_DEVICES
    gres=" Gres=gpu:$g"
    echo "GresTypes=gpu" >> "$SLURM_CONF"
    mkdir -p "$B/dev"
    for i in $(seq 0 $((g - 1))); do : > "$B/dev/gpu$i"; done
    echo "Name=gpu File=$B/dev/gpu[0-$((g - 1))]" > "$B/etc/gres.conf"
  fi
  for i in $(seq 1 "$n"); do
    echo "NodeName=node$i NodeAddr=$(nodes_ip "$i") CPUs=${NODES_CPUS:-2} RealMemory=1000$gres State=UNKNOWN"
  done >> "$SLURM_CONF"
  echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP" >> "$SLURM_CONF"
  : > "$B/etc/plugstack.conf"
}

_nodes_slurmd() { # I
  mkdir -p "$NODES_BASE/spool/node$1" "$NODES_BASE/tmp/node$1"
  _nodes_daemon "$(nodes_ns "$1")" "node$1" slurmd -f "$SLURM_CONF" -N "node$1"
}

_nodes_fail() { # message: show the logs, tear down what was started
  local f
  nodes_log "FAILED: $*"
  for f in "$NODES_BASE"/log/*.log; do
    [ -s "$f" ] && { echo "---- tail of $f"; tail -n 15 "$f"; }
  done
  nodes_down
}

_nodes_ctld_up() { nodes_run scontrol ping | grep -q 'is UP'; }
_nodes_no_jobs() { [ -z "$(nodes_run squeue -h)" ]; }
_nodes_state() { nodes_run sinfo -h -n "node$1" -o %T 2> /dev/null; } # idle, idle* (no answer), down*, ...

nodes_up() {
  local B=$1 n=$2 h t0=$SECONDS i p st deadline idle
  [[ $n =~ ^[1-9][0-9]?$ ]] || { nodes_log "usage: nodes_up BASE N (got N='$n')"; return 1; }
  [ ${#B} -le 64 ] || { nodes_log "BASE $B is too long for the Unix socket paths under it"; return 1; }
  _nodes_names
  [[ $NODES_PREFIX =~ ^[A-Za-z0-9_]+$ ]] || { nodes_log "NODES_PREFIX must be letters and digits"; return 1; }
  [ -z "$(_nodes_namespaces)" ] || { nodes_log "namespaces $NODES_PREFIX-* exist already: nodes_down first"; return 1; }
  NODES_BASE=$B NODES_N=$n _NODES_LIVE=1
  h=$(nodes_ns)
  export SLURM_CONF=$B/etc/slurm.conf
  rm -rf "${B:?}"/{etc,state,spool,log,run,tmp,munge} # what an earlier run left there
  mkdir -p "$B"/{etc,state,spool,log,run,tmp,munge} || { _nodes_fail "cannot create $B"; return 1; }
  chmod 755 "$B" "$B/munge" # munged wants every directory above its socket searchable
  chmod 700 "$B/etc"

  # network: the head node holds the bridge; a veth from it to each node
  [ -d /run/netns ] || : > "$B/run/made-run-netns"
  { ip netns add "$h" && ip -n "$h" link set lo up && ip -n "$h" link add br0 type bridge &&
    ip -n "$h" addr add "$NODES_NET.1/24" dev br0 && ip -n "$h" link set br0 up; } ||
    { _nodes_fail "cannot create the head namespace $h"; return 1; }
  for i in $(seq 1 "$n"); do
    { ip netns add "$(nodes_ns "$i")" && ip -n "$(nodes_ns "$i")" link set lo up &&
      ip -n "$h" link add "veth$i" type veth peer name eth0 netns "$(nodes_ns "$i")" &&
      ip -n "$h" link set "veth$i" master br0 up &&
      ip -n "$(nodes_ns "$i")" addr add "$(nodes_ip "$i")/24" dev eth0 &&
      ip -n "$(nodes_ns "$i")" link set eth0 up; } || { _nodes_fail "cannot create the namespace of node$i"; return 1; }
  done

  # one munged for all nodes: its socket is a file, reachable from every namespace
  mungekey --create --keyfile="$B/etc/munge.key" --bits=1024 > /dev/null 2>&1 ||
    dd if=/dev/urandom of="$B/etc/munge.key" bs=1 count=1024 2> /dev/null
  chmod 600 "$B/etc/munge.key"
  _nodes_in "$h" env -i PATH="$PATH" munged --key-file="$B/etc/munge.key" --socket="$B/munge/munge.socket.2" \
    --pid-file="$B/munge/munged.pid" --log-file="$B/log/munged.log" --seed-file="$B/munge/munged.seed" ||
    { _nodes_fail "munged did not start"; return 1; }
  nodes_wait 20 sh -c "munge -n -S '$B/munge/munge.socket.2' | unmunge -S '$B/munge/munge.socket.2'" ||
    { _nodes_fail "munged does not answer"; return 1; }

  _nodes_write_conf "$B" "$n"
  _nodes_daemon "$h" ctl slurmctld -f "$SLURM_CONF" || { _nodes_fail "slurmctld did not start"; return 1; }
  nodes_wait "${NODES_TIMEOUT:-60}" _nodes_ctld_up ||
    { _nodes_fail "slurmctld does not answer"; return 1; }
  for i in $(seq 1 "$n"); do _nodes_slurmd "$i" || { _nodes_fail "slurmd of node$i did not start"; return 1; }; done

  deadline=$((SECONDS + ${NODES_TIMEOUT:-60}))
  while :; do
    st=$(nodes_run sinfo -h -N -o '%N %T' 2> /dev/null)
    idle=$(grep -c ' idle$' <<< "$st")
    [ "$idle" = "$n" ] && break
    for i in $(seq 1 "$n"); do # a slurmd without a pid file yet is still starting
      p=$(cat "$B/run/slurmd-node$i.pid" 2> /dev/null) || continue
      _nodes_alive "$p" || { _nodes_fail "slurmd of node$i died"; return 1; }
    done
    if [ $SECONDS -ge $deadline ]; then
      _nodes_fail "after ${NODES_TIMEOUT:-60} s only $idle of $n nodes are idle: $(xargs <<< "$st")"
      return 1
    fi
    sleep 0.2
  done
  nodes_log "up: $n nodes in namespaces $NODES_PREFIX-n1..$n on $NODES_NET.0/24 ($((SECONDS - t0)) s)"
}

nodes_run() {
  [ -n "${_NODES_LIVE:-}" ] || { echo "nodes_run: no cluster is up" >&2; return 1; }
  nsenter --net="/run/netns/$(nodes_ns)" env -u SLURM_JOB_ID -u SLURM_JOBID -u SLURM_CLUSTERS \
    SLURM_CONF="$NODES_BASE/etc/slurm.conf" "$@"
}

nodes_kill() { # I: all at once, as in a power cut; the node is DOWN after about 3 x SlurmdTimeout
  local ns
  ns=$(nodes_ns "$1")
  [ -e "/run/netns/$ns" ] || { nodes_log "nodes_kill: no node $1"; return 1; }
  nodes_log "node$1 crashes: SIGKILL to $(_nodes_ns_pids "$ns")"
  _nodes_clear_ns "KILL KILL KILL" "$ns"
}

nodes_start() { # I: a reboot. Its disk comes back empty: a crashed slurmstepd leaves its PMIx
  # socket in the spool, and a requeued job (same id) landing here again could not bind it.
  local i=$1 ns old st deadline
  ns=$(nodes_ns "$i")
  [ -e "/run/netns/$ns" ] || { nodes_log "nodes_start: no node $i"; return 1; }
  _nodes_clear_ns "KILL KILL KILL" "$ns" || return 1
  # Slurm spots a real reboot by the node's new boot time and sets it DOWN, which ends (or
  # requeues) its jobs. The namespaces share the machine's boot time, so say it here: otherwise a
  # node back before SlurmdTimeout leaves its jobs RUNNING with their tasks gone.
  case $(_nodes_state "$i") in down*) ;; *) nodes_run scontrol update NodeName="node$i" State=DOWN Reason=rebooted ;; esac
  old=$(nodes_run scontrol show node -o "node$i" | tr ' ' '\n' | sed -n 's/^SlurmdStartTime=//p')
  rm -rf "${NODES_BASE:?}/spool/node$i" "${NODES_BASE:?}/tmp/node$i"
  _nodes_slurmd "$i" || { nodes_log "slurmd of node$i did not start"; return 1; }
  deadline=$((SECONDS + ${NODES_TIMEOUT:-60}))
  while :; do # registered again (new start time), answering and in service
    st=$(nodes_run scontrol show node -o "node$i" | tr ' ' '\n' | sed -n 's/^SlurmdStartTime=//p')
    if [ "$st" != "$old" ]; then
      st=$(_nodes_state "$i")
      case $st in idle | mixed | allocated | completing) break ;; esac
    fi
    [ $SECONDS -lt $deadline ] || {
      nodes_log "node$i did not come back: $(nodes_run scontrol show node -o "node$i")"
      tail -n 15 "$NODES_BASE/log/slurmd-node$i.log"
      return 1
    }
    sleep 0.2
  done
  nodes_log "node$i is back: $st"
}

nodes_down() {
  [ -n "${_NODES_LIVE:-}" ] || return 0
  local B=$NODES_BASE h t0=$SECONDS ctld mun pids i ns wait=0
  h=$(nodes_ns)
  ctld=$(_nodes_pid slurmctld "$h" "$B/run/slurmctld.pid")
  mun=$(_nodes_pid munged "$h" "$B/munge/munged.pid")
  pids=$ctld
  for i in $(seq 1 "$NODES_N"); do pids="$pids $(_nodes_pid slurmd "$(nodes_ns "$i")" "$B/run/slurmd-node$i.pid")"; done
  if [ -n "$ctld" ]; then
    nodes_run scancel -p debug > /dev/null 2>&1
    nodes_wait 10 _nodes_no_jobs # the jobs of a dead node may stay until it is DOWN
    nodes_run scontrol shutdown > /dev/null 2>&1 && wait=10 # it stops every slurmd too
  fi
  pids=$(xargs <<< "$pids")
  # shellcheck disable=SC2086
  [ -z "$pids" ] || _nodes_stop $wait $pids
  # what is left on the nodes (slurmstepd and tasks of a crashed node), then munged and the rest
  # shellcheck disable=SC2046
  _nodes_clear_ns "TERM KILL" $(_nodes_namespaces | grep -vxF "$h")
  [ -z "$mun" ] || _nodes_stop 0 "$mun"
  _nodes_clear_ns "TERM KILL" "$h"
  for ns in $(_nodes_namespaces); do ip netns del "$ns" || nodes_log "WARNING: ip netns del $ns failed"; done
  _nodes_rm_run_netns "$B/run/made-run-netns"
  if [ -n "$(_nodes_namespaces)" ]; then
    nodes_log "WARNING: namespaces left: $(_nodes_namespaces | xargs)"
    return 1
  fi
  _NODES_LIVE=
  nodes_log "down ($((SECONDS - t0)) s)"
}

# State of a job from scontrol, or from the completion log once it has been purged.
nodes_job_state() {
  local s
  s=$(nodes_job_field "$1" JobState)
  [ -z "$s" ] && s=$(grep "JobId=$1 " "$NODES_BASE/log/jobcomp.log" 2> /dev/null | tail -1 |
    sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  echo "${s:-UNKNOWN}"
}

nodes_job_field() { # ID FIELD
  nodes_run scontrol show job -o "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
