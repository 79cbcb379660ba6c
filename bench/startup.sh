#!/usr/bin/env bash
# Start-up at scale: seconds from the launch of N ranks to the end of their first training step
# (a small GPT, data-parallel N, the step seen in --metrics-file) and to the launcher's exit,
# beside the same launcher starting `python3 -c "import torch"` and `python3 -c pass` on as many
# ranks: the cost of loading a large Python stack on every rank that centres fight with
# containers and file-system caches. The median of REPEAT runs (default 3), files warm in the
# page cache (one run first, not counted).
#   - one node: mpiexec --oversubscribe;
#   - across nodes (as root, where network namespaces can be made): srun --mpi=pmix on a Slurm
#     cluster of NODES namespace nodes (default 4) built by tests/slurm_nodes.sh, the ranks
#     spread evenly (block placement).
# Usage: [WHERE=one-node|nodes] bench/startup.sh [build-dir] [ranks...]   (ranks: 1 8 32 64)
# torch comes from Debian's python3-torch (MGT_PYTHON, default /usr/bin/python3, the interpreter);
# without it that column says "no torch".
set -u
BUILD=$(cd "${1:-build}" && pwd) || exit 1
shift || true
RANKS=("$@")
[ ${#RANKS[@]} -gt 0 ] || RANKS=(1 8 32 64)
WHERE=${WHERE:-both} # one-node, nodes or both
REPEAT=${REPEAT:-3}
PY=${MGT_PYTHON:-/usr/bin/python3}
NODES=${NODES:-4}
SRC=$(cd "$(dirname "$0")/.." && pwd)
MGT=$BUILD/mgt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
chmod 755 "$tmp"
cluster=0
cleanup() {
  [ $cluster = 1 ] && nodes_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

now() { date +%s.%N; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# one run of mgt on n ranks through launcher words "$@": prints "first-step exit" seconds
mgt_once() {
  local n=$1 m=$tmp/m.jsonl t0 t1="" t2
  shift
  rm -f "$m"
  t0=$(now)
  "$@" "$MGT" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --vocab-size 128 --mock-data --micro-batch-size 1 --global-batch-size "$n" --train-iters 1 \
    --eval-iters 0 --log-interval 1 --metrics-file "$m" > "$tmp/mgt.log" 2>&1 &
  local pid=$!
  while kill -0 $pid 2> /dev/null; do
    if [ -z "$t1" ] && grep -q '"iteration"' "$m" 2> /dev/null; then t1=$(now); fi
    sleep 0.01
  done
  wait $pid || { echo "mgt failed on $n ranks:" >&2; tail -40 "$tmp/mgt.log" >&2; return 1; }
  t2=$(now)
  [ -n "$t1" ] || t1=$t2
  echo "$(echo "$t1 - $t0" | bc) $(echo "$t2 - $t0" | bc)"
}

# seconds for the launcher to run `python3 -c CODE` on n ranks
py_once() {
  local code=$1 t0
  shift
  t0=$(now)
  "$@" "$PY" -c "$code" > /dev/null 2>&1 || return 1
  echo "$(now) - $t0" | bc
}

# one table row: launcher words after n
row() {
  local n=$1 where=$2 firsts=() exits=() times=() bare=() torch r i
  shift 2
  mgt_once "$n" "$@" > /dev/null || return 1 # warm the caches
  for ((i = 0; i < REPEAT; i++)); do
    r=$(mgt_once "$n" "$@") || return 1
    firsts+=("${r% *}") exits+=("${r#* }")
    bare+=("$(py_once pass "$@")")
  done
  if "$PY" -c "import torch" 2> /dev/null; then
    py_once "import torch" "$@" > /dev/null
    for ((i = 0; i < REPEAT; i++)); do times+=("$(py_once "import torch" "$@")"); done
    torch=$(printf "%.2f" "$(median "${times[@]}")")
  else
    torch="no torch"
  fi
  printf "%6d  %-22s  %14.2f  %10.2f  %17s  %14.2f\n" "$n" "$where" "$(median "${firsts[@]}")" \
    "$(median "${exits[@]}")" "$torch" "$(median "${bare[@]}")"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "$(nproc --all) CPUs; $($MGT version | head -1); median of $REPEAT"
printf "%6s  %-22s  %14s  %10s  %17s  %14s\n" ranks launcher "first step (s)" "exit (s)" \
  "import torch (s)" "python3 (s)"
for n in "${RANKS[@]}"; do
  [ "$WHERE" = nodes ] && break
  row "$n" "mpiexec, 1 node" mpiexec --oversubscribe -n "$n" || exit 1
done

[ "$WHERE" = one-node ] && exit 0
# shellcheck source=../tests/slurm_nodes.sh
. "$SRC/tests/slurm_nodes.sh"
if [ "$(id -u)" != 0 ] || ! why=$(nodes_usable); then
  echo "# across nodes: skipped (${why:-not root})"
  exit 0
fi
cluster=1
NODES_CPUS=$((${RANKS[-1]} / NODES + 1)) nodes_up "$tmp/cluster" "$NODES" > "$tmp/cluster.log" 2>&1 ||
  { cat "$tmp/cluster.log"; exit 1; }
export OMPI_MCA_btl_tcp_if_include=$NODES_NET.0/24 # shared memory in a node, TCP across
for n in "${RANKS[@]}"; do
  k=$((n < NODES ? n : NODES))
  row "$n" "srun, $k namespace node$([ $k -gt 1 ] && echo s)" \
    nodes_run srun --mpi=pmix --kill-on-bad-exit=1 -N "$k" -n "$n" --ntasks-per-node=$((n / k)) || exit 1
done
