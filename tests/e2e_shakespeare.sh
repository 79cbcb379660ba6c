#!/usr/bin/env bash
# End to end on real text: preprocess Tiny Shakespeare (one JSON document per paragraph) on
# 2 ranks, train a small GPT with tensor parallelism 2 for 300 iterations, and check that the
# validation loss falls well below the unigram entropy of the data (computed here from the
# token dataset with numpy). Usage: e2e_shakespeare.sh MGT MPIEXEC DATA_DIR
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
[ -f "$DATA/tinyshakespeare/input.txt" ] || { echo "no $DATA: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$DATA/tinyshakespeare/input.txt" "$tmp/shakes.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for p in open(sys.argv[1], encoding="utf-8").read().split("\n\n"):
        f.write(json.dumps({"text": p + "\n\n"}) + "\n")
PY
V="--vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt"
"$MPIEXEC" -n 2 "$MGT" preprocess --input "$tmp/shakes.jsonl" --output-prefix "$tmp/shakes" $V --append-eod || exit 1
OMP_NUM_THREADS=1 "$MPIEXEC" -n 2 --bind-to none "$MGT" train --data-path "$tmp/shakes" $V \
  --split 90,10,0 --tensor-model-parallel-size 2 \
  --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 16 --global-batch-size 16 --train-iters 300 \
  --lr 5e-3 --min-lr 5e-4 --lr-warmup-iters 20 --lr-decay-style cosine \
  --hidden-dropout 0 --attention-dropout 0 \
  --eval-interval 100 --eval-iters 10 --log-interval 50 --metrics-file "$tmp/metrics.jsonl" || exit 1
/usr/bin/python3 - "$tmp/shakes.h5" "$tmp/metrics.jsonl" <<'PY'
import json, sys
import numpy as np, h5py
tok = h5py.File(sys.argv[1], "r")["tokens"][:]
p = np.bincount(tok) / len(tok)
p = p[p > 0]
h = float(-(p * np.log(p)).sum())
valid = [r["valid_loss"] for r in map(json.loads, open(sys.argv[2])) if "valid_loss" in r]
print("unigram entropy %.3f nats; validation loss %s" % (h, " -> ".join("%.3f" % v for v in valid)))
assert len(valid) == 3 and valid[-1] < valid[0], "validation loss did not fall"
assert valid[-1] < h - 0.5, "validation loss %.3f is not well below the unigram entropy %.3f" % (valid[-1], h)
print("ok: the model learned the text")
PY
