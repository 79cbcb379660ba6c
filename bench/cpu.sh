#!/usr/bin/env bash
# CPU benchmark of GPT-2 124M training steps on this machine:
#   1 rank x 2 threads (with the machine's FMA peak and sgemm rate measured in the same run),
#   tensor-parallel 2 x 1 thread, data-parallel 2 x 1 thread.
# Usage: bench/cpu.sh [build-dir]   (prints one line per configuration)
set -eu
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NCPU=$(nproc)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $NCPU CPUs"
OMP_NUM_THREADS=$NCPU "$BUILD/bench/bench_cpu" --steps 5
OMP_NUM_THREADS=$((NCPU / 2)) mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 5 --tp 2 --no-peaks
OMP_NUM_THREADS=$((NCPU / 2)) mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 5 --tp 1 --no-peaks
OMP_NUM_THREADS=$((NCPU / 2)) mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 5 --tp 1 --no-peaks --overlap-grad-reduce
