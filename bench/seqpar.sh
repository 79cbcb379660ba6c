#!/usr/bin/env bash
# Sequence parallelism on GPT-2 124M shapes at tp=2 (one rank per core): the planned activation
# memory per rank, the measured peak RSS above the RSS before the model, and the step time, with
# and without --sequence-parallel, at B=4 T=64 and B=8 T=256.
# Usage: bench/seqpar.sh [build-dir]
set -eu
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
for config in small large; do
  for flag in "" --sequence-parallel; do
    OMP_NUM_THREADS=1 mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 3 --tp 2 \
      --no-peaks --config $config $flag
  done
done
