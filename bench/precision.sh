#!/usr/bin/env bash
# Mixed precision on the CPU, GPT-2 124M shapes at B=4 T=64 and B=8 T=256 on one rank: the step
# time in fp32, in emulated bf16 with the weights' 16-bit copies made once per step, and in
# emulated bf16 with them rounded in every GEMM (--no-weight-copies); the same losses for both
# bf16 runs. (Native bf16 GEMMs: bench/cpu.sh.)
# Usage: bench/precision.sh [build-dir]
set -eu
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
for config in small large; do
  for flags in "" "--bf16 --emulated" "--bf16 --emulated --no-weight-copies"; do
    "$BUILD/bench/bench_cpu" --steps 5 --no-peaks --config $config $flags
  done
done
