#!/usr/bin/env bash
# Files cross between two builds of mgt linked to different HDF5 versions (1.10 and 1.14 in
# CI): each verifies (stored checksums: the bits read are those written), lists and resumes
# the other's checkpoints, and trains on the other's dataset. The two builds may differ in
# compiler too, so resumed losses are compared within 1e-5, not bit for bit.
# Usage: hdf5_versions.sh MGT_A MGT_B MPIEXEC
set -u
A=$1 B=$2 MPIEXEC=$3
. "$(dirname "$0")/lib.sh" # MPI as root, one OpenMP thread, $PY, $tmp, $fails
hv() { ldd "$1" | grep -o 'libhdf5[^ ]*' | head -1; }
echo "A: $A ($(hv "$A")); B: $B ($(hv "$B"))"
M=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --micro-batch-size 4 --global-batch-size 8 --log-interval 1 --lr-warmup-iters 2)
losses() { grep -o '"iteration": *[0-9]*, *"loss": *[0-9.e+-]*' "$1" | sed 's/[^0-9.e+ -]//g'; }
for pair in "A B" "B A"; do
  set -- $pair
  W=${!1} R=${!2} d=$tmp/$1
  "$MPIEXEC" -n 2 "$W" train "${M[@]}" --tensor-model-parallel-size 2 --train-iters 12 \
    --save "$d" --save-interval 6 --metrics-file "$d.full.jsonl" > "$d.log" 2>&1 ||
    { fail "$1 trains and saves"; tail -3 "$d.log"; continue; }
  "$R" ckpt verify "$d" --ckpt-iteration 6 > "$d.verify" 2>&1 &&
    grep -Eq ": [1-9][0-9]* tensors, 0 damaged" "$d.verify" &&
    echo "ok: $2 verifies $1's checkpoint: $(tail -1 "$d.verify" | sed 's/.*: //')" ||
    { fail "$2 verifies $1's checkpoint"; cat "$d.verify"; }
  n=$(grep -o '[0-9]* tensors' "$d.verify" | cut -d' ' -f1)
  listed=$("$R" ckpt info "$d" --ckpt-iteration 6 2>&1 | grep -c "^  /")
  [ "$listed" = "$n" ] && echo "ok: $2 lists the $n tensors of $1's checkpoint" ||
    fail "$2 lists $listed tensors of $1's checkpoint, verify counted $n"
  "$MPIEXEC" -n 2 "$R" train "${M[@]}" --tensor-model-parallel-size 1 --train-iters 12 \
    --load "$d" --ckpt-iteration 6 --metrics-file "$d.resumed.jsonl" > "$d.rlog" 2>&1 ||
    { fail "$2 resumes $1's checkpoint"; tail -3 "$d.rlog"; continue; }
  $PY - "$d.full.jsonl" "$d.resumed.jsonl" "$1" "$2" <<'PY' || fail "$2's resumed losses"
import json, sys
rows = lambda f: {r["iteration"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r}
full, res = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(res) == list(range(7, 13)), sorted(res)
worst = max(abs(res[i] - full[i]) / full[i] for i in res)
assert worst <= 1e-5, worst
print("ok: %s resumed %s's checkpoint at another layout: iterations 7-12 within %.1e" %
      (sys.argv[4], sys.argv[3], worst))
PY
  $PY -c 'import json, sys
for i, line in enumerate(open(sys.argv[1])): print(json.dumps({"text": "%d %s" % (i, line) * 8}))' \
    "$0" > "$tmp/docs.jsonl"
  "$W" preprocess --input "$tmp/docs.jsonl" --output-prefix "$d.data" --tokenizer-type ByteTokenizer \
    > "$d.plog" 2>&1 || { fail "$1 preprocesses"; tail -3 "$d.plog"; continue; }
  "$R" train --data-path "$d.data" --tokenizer-type ByteTokenizer --num-layers 1 --hidden-size 32 \
    --num-attention-heads 2 --seq-length 32 --micro-batch-size 2 --global-batch-size 2 \
    --train-iters 2 --log-interval 1 > "$d.dlog" 2>&1 &&
    echo "ok: $2 trains on $1's dataset" || { fail "$2 trains on $1's dataset"; tail -3 "$d.dlog"; }
done
[ $fails = 0 ] && echo "hdf5 versions: all passed" || echo "hdf5 versions: $fails failed"
[ $fails = 0 ]
