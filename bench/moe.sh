#!/usr/bin/env bash
# Mixture-of-Experts on the CPU against the dense model of the same active size: 4 layers, hidden
# 512, 8 heads, SwiGLU, T=256, B=4, one rank; dense MLPs of 1408 against 8 experts of 704, top-2
# (the same active MLP width), and top-1 of 16 experts of 1408: the median step of 8 after 2, as
# tokens/s and model TFLOP/s (on the active parameters), and the fraction of this machine's FMA
# peak given as PEAK_GFLOPS (docs/performance.md, "The machine": 219 with 256-bit vectors).
# Then the memory plan against a real run, one rank and ep=2 (bench_cpu --moe).
# Usage: bench/moe.sh [build-dir]
set -eu
BUILD=${1:-build}
PEAK=${PEAK_GFLOPS:-219}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
M=(--mock-data --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 256
  --micro-batch-size 4 --global-batch-size 4 --train-iters 10 --log-interval 1 --eval-iters 0
  --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear
  --vocab-size 32000 --lr 1e-4)
run() { # name flags...
  local name=$1
  shift
  "$BUILD/mgt" train "${M[@]}" "$@" --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1
  grep -m1 "M parameters" "$tmp/$name.log" || true
  python3 - "$name" "$tmp/$name.jsonl" "$PEAK" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l][2:]
ms = statistics.median(r["ms_per_iteration"] for r in rows)
r = min(rows, key=lambda r: abs(r["ms_per_iteration"] - ms))
print("%-8s %8.1f ms  %8.0f tokens/s  %.3f TFLOP/s  %.2f of the FMA peak" %
      (sys.argv[1], ms, r["tokens_per_sec"], r["tflops"], r["tflops"] * 1e3 / float(sys.argv[3])))
PY
}
run dense --ffn-hidden-size 1408
run moe8x2 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 704 --moe-aux-loss-coeff 0.01
run moe16x1 --num-experts 16 --moe-router-topk 1 --moe-ffn-hidden-size 1408 --moe-aux-loss-coeff 0.01
# the memory plan against a real run: GPT-2 124M's shapes with 8 experts of 1536 (top-2) in every
# layer, B=4 T=64, on one rank and at ep=2 (bench_cpu: planned total against the peak RSS above
# the RSS before the model)
OMP_NUM_THREADS=2 "$BUILD/bench/bench_cpu" --no-peaks --steps 3 --config small --moe 8,2,1536
OMP_NUM_THREADS=1 mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --no-peaks --steps 3 \
  --config small --moe 8,2,1536 --ep 2
