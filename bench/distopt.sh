#!/usr/bin/env bash
# The distributed optimizer on GPT-2 124M shapes (B=4, T=64): optimizer state per rank, the
# planned and measured (peak RSS) memory, and the step time at data-parallel 1, 2 and 4, with
# and without --use-distributed-optimizer. dp=4 oversubscribes a 2-core machine: its step
# times measure the machine, not the method; its memory is exact.
# Usage: bench/distopt.sh [build-dir]
set -eu
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
for dp in 1 2 4; do
  for flag in "" --use-distributed-optimizer; do
    OMP_NUM_THREADS=1 mpiexec -n $dp --bind-to none "$BUILD/bench/bench_cpu" --steps 3 --tp 1 \
      --no-peaks --config small $flag
  done
done
