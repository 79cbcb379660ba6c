#!/usr/bin/env bash
# Checkpoint save and load throughput for GPT-2 350M shapes (24 layers, hidden 1024, 16 heads,
# vocabulary 50257; with the Adam moments a 4.3 GB file) at 1, 2 and 4 ranks (tensor
# parallelism = ranks, so every rank writes its slices), beside the raw sequential write speed
# of the same disk measured in the same run, both idle and while holding as much memory as the
# training processes hold (the kernel throttles writers sooner when less memory is free).
# Usage: bench/ckpt.sh [build-dir] [scratch-dir on the disk to measure]
set -eu
BUILD=${1:-build}
DIR=${2:-$BUILD/bench-ckpt}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$DIR"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(df -h "$DIR" | tail -1 | awk '{print $1, $2}')"
M=(--mock-data --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --vocab-size 50257
  --max-position-embeddings 1024 --seq-length 32 --micro-batch-size 1 --train-iters 1 --eval-iters 0)
for np in 1 2 4; do
  rm -rf "$DIR/ckpt"
  OMP_NUM_THREADS=1 mpiexec -n $np --bind-to none "$BUILD/mgt" train "${M[@]}" \
    --tensor-model-parallel-size $np --save "$DIR/ckpt" | grep "saved checkpoint" |
    sed "s/^/save, $np rank(s): /"
  OMP_NUM_THREADS=1 mpiexec -n $np --bind-to none "$BUILD/mgt" train "${M[@]}" \
    --tensor-model-parallel-size $np --load "$DIR/ckpt" | grep "loaded checkpoint" |
    sed "s/^/load, $np rank(s): /"
  if [ $np = 1 ]; then
    size=$(stat -c %s "$DIR"/ckpt/iter_*.h5)
    # memory a rank holds, from the plan the trainer prints (MiB)
    hold=$("$BUILD/mgt" train "${M[@]}" --dry-run | awk '/total/ {printf "%.0f", $2 * 1048576}')
    "$BUILD/bench/bench_write" "$DIR/raw" "$size" 0
    "$BUILD/bench/bench_write" "$DIR/raw" "$size" "$hold"
  fi
done
# --async-save: the pause the training sees (the copy to host memory) against the write the
# background thread does while the next iterations run
for np in 1 2; do
  rm -rf "$DIR/ckpt"
  OMP_NUM_THREADS=1 mpiexec -n $np --bind-to none "$BUILD/mgt" train "${M[@]}" --train-iters 4 \
    --save-interval 2 --async-save --tensor-model-parallel-size $np --save "$DIR/ckpt" |
    grep -E "copied to host memory|saved checkpoint" | sed "s/^/async, $np rank(s): /"
done
rm -rf "$DIR"
