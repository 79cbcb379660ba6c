#!/usr/bin/env bash
# BERT end to end: Pride and Prejudice from ../shared/data/books, 20 paragraphs a document,
# preprocessed with --split-sentences and the uncased WordPiece, then a small BERT (2 layers,
# hidden 128, sequence 128) trained at tensor-parallel 2 for ITERS iterations (default 2000)
# with a 90/10 document split. Passes when the masked-LM training loss of the last log interval
# is well below the unigram entropy of the dataset's tokens (what a model without context can
# reach) and the validation SOP accuracy over 512 held-out samples is above chance by more than
# two standard deviations.
# Environment: ITERS, LR, SEED, BOOK_FILE (a file of ../shared/data/books) to vary the run.
# Usage: bert_e2e.sh MGT MPIEXEC DATA_DIR (exit 77 without DATA_DIR)
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
V=$DATA/bert/bert-base-uncased-vocab.txt
BOOK=$DATA/books/${BOOK_FILE:-pg1342-pride-and-prejudice.txt}
[ -f "$V" ] && [ -f "$BOOK" ] || { echo "no $V or $BOOK: skipped"; exit 77; }
ITERS=${ITERS:-2000}
. "$(dirname "$0")/lib.sh"
book_dataset "$BOOK" 20 "$tmp/book"
"$MPIEXEC" -n 2 "$MGT" train --model bert --data-path "$tmp/book" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$V" --tensor-model-parallel-size 2 --num-layers 2 --hidden-size 128 --num-attention-heads 4 \
  --seq-length 128 --micro-batch-size 16 --global-batch-size 32 --train-iters "$ITERS" --lr ${LR:-1e-3} \
  --lr-warmup-iters 100 --log-interval 100 --eval-interval "$ITERS" --eval-iters 16 --split 90,10,0 \
  --make-vocab-size-divisible-by 64 --seed "${SEED:-1234}" --metrics-file "$tmp/m.jsonl" >"$tmp/train.log" 2>&1 ||
  { tail -20 "$tmp/train.log"; exit 1; }
grep -E "iteration +[0-9]+/|validation loss" "$tmp/train.log" | sed 's/ | elapsed time.*lm loss/ | lm loss/; s/ | grad norm.*//'
$PY - "$tmp/book.h5" "$tmp/m.jsonl" <<'PY'
import json, math, sys
import h5py
import numpy as np
t = h5py.File(sys.argv[1], "r")["tokens"][()]
c = np.bincount(t).astype(np.float64)
p = c[c > 0] / c.sum()
h = float(-(p * np.log(p)).sum())
rows = [json.loads(l) for l in open(sys.argv[2])]
train = [r for r in rows if "lm_loss" in r][-1]
valid = [r for r in rows if "valid_sop_accuracy" in r][-1]
n = 16 * 32
chance = 0.5 + 2 * math.sqrt(0.25 / n)
print("unigram entropy %.3f nats; masked-LM loss %.3f; validation SOP accuracy %.4f over %d samples "
      "(chance + 2 sigma: %.4f)" % (h, train["lm_loss"], valid["valid_sop_accuracy"], n, chance))
ok = True
if not train["lm_loss"] < h - 0.3:
    print("FAIL: the masked-LM loss is not well below the unigram entropy")
    ok = False
if not valid["valid_sop_accuracy"] > chance:
    print("FAIL: the validation SOP accuracy is not above chance")
    ok = False
sys.exit(0 if ok else 1)
PY
