#!/usr/bin/env bash
# A full disk: checkpoints and preprocessing onto a 20 MB tmpfs, with a little space left and
# with none, at 1, 2 and 4 ranks. Every rank must stop together with one line saying the disk
# is full, exit non-zero, leave no temporary file, and keep the previous checkpoint and
# `latest` intact; nothing may hang (every command runs under a timeout). Skipped (77) where a
# tmpfs cannot be mounted. Usage: diskfull.sh MGT MPIEXEC
set -u
MGT=$(readlink -f "$1") MPIEXEC=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
mkdir "$tmp/small"
if ! mount -t tmpfs -o size=20m tmpfs "$tmp/small" 2> /dev/null; then
  rm -rf "$tmp"
  echo "cannot mount a tmpfs here: skipped"
  exit 77
fi
trap 'umount "$tmp/small"; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
T=(timeout -k 5 120)
S=$tmp/small

# full CMD...: fails with exit 1, one error line on the whole job that says the disk is full
full() {
  "${T[@]}" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$? n
  n=$(grep -c '^mgt: error' "$tmp/err")
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "$* hung"
    return 1
  elif [ $rc = 0 ] || [ "$n" != 1 ] || ! grep -q "^mgt: error: .*No space left on device" "$tmp/err" ||
    grep -q "MPI_ABORT\|\[rank" "$tmp/err"; then
    fail "$* gave exit $rc and $n error lines"
    sed 's/^/    /' "$tmp/err" | head -6
    return 1
  fi
  echo "ok: $(grep '^mgt: error' "$tmp/err")"
}
fill() { # leave about $1 KB free
  rm -f "$S/fill"
  local free
  free=$(df -k --output=avail "$S" | tail -1)
  [ "$free" -gt "$1" ] && dd if=/dev/zero of="$S/fill" bs=1K count=$((free - $1)) 2> /dev/null
  true
}

# a model whose checkpoint (with Adam's moments) takes about 10 MB: one fits, two do not
K0=(train --mock-data --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 16
  --micro-batch-size 1 --global-batch-size 4 --train-iters 2 --save-interval 1 --eval-iters 0)
K=("${K0[@]}" --tensor-model-parallel-size 2)
for np in 2 4; do
  rm -rf "$S"/*
  if full "$MPIEXEC" -n $np "$MGT" "${K[@]}" --save "$S/ck"; then
    [ "$(cat "$S/ck/latest")" = 1 ] && [ -z "$(ls "$S/ck" | grep tmp)" ] &&
      "$MGT" ckpt verify "$S/ck" > /dev/null 2>&1 &&
      echo "ok: $np ranks: the first checkpoint and latest are intact, no temporary file" ||
      { fail "$np ranks: what the failed save left"; ls -la "$S/ck"; }
  fi
done
for np in 1 2; do
  rm -rf "$S"/* && mkdir "$S/ck" && fill 0
  full "$MPIEXEC" -n $np "$MGT" "${K0[@]}" --save "$S/ck" &&
    [ -z "$(ls "$S/ck")" ] && echo "ok: $np ranks, no space at all: nothing left behind"
done

# preprocessing: a licence text every Debian system has, repeated: about 10 MB of tokens
for _ in $(seq 1 150); do cat /usr/share/common-licenses/GPL-3; done > "$tmp/text.txt"
for np in 1 2; do
  for left in 0 500; do
    rm -rf "$S"/* && fill $left
    full "$MPIEXEC" -n $np "$MGT" preprocess --input "$tmp/text.txt" --output-prefix "$S/data" --tokenizer-type ByteTokenizer &&
      [ ! -e "$S/data.h5" ] && [ ! -e "$S/data.h5.tmp" ] && echo "ok: preprocess on $np ranks, $left KB free: no file left"
  done
done

echo "diskfull: $fails failures"
[ $fails = 0 ]
