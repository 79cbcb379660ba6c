#!/usr/bin/env bash
# Hugging Face import and checkpoint verification against the number of tensors: GPT-2s of
# tiny layers (hidden 4, 12 tensors a layer), so that the time is the per-tensor work (the
# safetensors header, the name plan, HDF5's datasets and attributes), not the bytes. Linear
# means a constant time per tensor down the table. Usage: bench/hfimport.sh [build-dir] [layers...]
set -eu
BUILD=${1:-build}
shift || true
LAYERS=${*:-1000 2000 4000 8000}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
PY=/usr/bin/python3
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, OMP_NUM_THREADS=1"
printf "%8s %9s %10s %10s %14s\n" layers tensors import_s verify_s us_per_tensor
for L in $LAYERS; do
  $PY "$(dirname "$0")/../tests/hf_tiny_gpt2.py" "$DIR/hf$L" "$L"
  t0=$(date +%s.%N)
  OMP_NUM_THREADS=1 "$BUILD/mgt" ckpt import --format hf --input "$DIR/hf$L" --save "$DIR/ck$L" > /dev/null
  t1=$(date +%s.%N)
  OMP_NUM_THREADS=1 "$BUILD/mgt" ckpt verify "$DIR/ck$L" > /dev/null
  t2=$(date +%s.%N)
  n=$((12 * L + 4))
  awk -v L="$L" -v n="$n" -v a="$t0" -v b="$t1" -v c="$t2" \
    'BEGIN { printf "%8d %9d %10.2f %10.2f %14.0f\n", L, n, b - a, c - b, (b - a) * 1e6 / n }'
  rm -rf "$DIR/hf$L" "$DIR/ck$L"
done
