#!/usr/bin/env bash
# GPU benchmark: training steps of the paper's 1.2B configuration and of GPT-2 350M, bf16, on
# one GPU, with flash attention and the least recomputation that fits (then the 1.2B with
# materialized attention and full recomputation, for comparison): the median of 10 steps after
# a warm-up; MFU against the GPU's bf16 GEMM rate measured on random inputs and against the
# datasheet peak (989 TFLOP/s, dense bf16 of the H100/H200 SXM; --peak-tflops P for another
# GPU).
# Usage: bench/gpu.sh [build-dir] [extra bench_gpu flags, e.g. --micro-batch-size 4]
set -eu
BUILD=${1:-build}
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BUILD/bench/bench_gpu" ] || { echo "gpu.sh: $BUILD/bench/bench_gpu not built (configure with -DMGT_CUDA=ON)" >&2; exit 2; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
# the fast path: tiled attention (tensor cores in bf16), the least recomputation that fits
"$BUILD/bench/bench_gpu" --steps 10 --use-flash-attn --recompute auto "$@"
# the baseline: materialized fp32 attention with full recomputation, the paper's 1.2B only
"$BUILD/bench/bench_gpu" --steps 10 --config 1.2b --recompute full "$@"
