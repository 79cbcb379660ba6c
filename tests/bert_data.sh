#!/usr/bin/env bash
# BERT's samples against an independent rewrite of Megatron-LM's code in the test
# (tests/bert_samples.py, with numpy's own RandomState): a WordPiece sentence dataset of Tiny
# Shakespeare paragraphs, a book and a document with a sentence over 512 tokens (left out, as
# Megatron does); the samples mapping and the samples (segments, order swaps, truncation,
# whole-word n-gram masks, padding) identical for several lengths and seeds, with and without
# the binary head. Usage: bert_data.sh MGT TEST_BERT_DATA DATA_DIR (exit 77 without DATA_DIR)
set -u
MGT=$1 TBD=$2 DATA=$3
V=$DATA/bert/bert-base-uncased-vocab.txt
[ -f "$V" ] || { echo "no $V: skipped"; exit 77; }
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
$PY - "$DATA/tinyshakespeare/input.txt" "$tmp/docs.jsonl" <<'PY'
import json, sys
paras = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
with open(sys.argv[2], "w") as f:
    for p in paras[:4000]:
        f.write(json.dumps({"text": p}) + "\n")
    f.write(json.dumps({"text": "A short one. " + "word " * 700 + ". Another one."}) + "\n")
PY
"$MGT" preprocess --input "$tmp/docs.jsonl" "$DATA/books/pg11-alices-adventures-in-wonderland.txt" \
  --output-prefix "$tmp/bert" --tokenizer-type BertWordPieceLowerCase --vocab-file "$V" --split-sentences \
  > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
tail -1 "$tmp/log"
for args in "128 300 1234 1" "64 300 7 1" "512 60 1234 1" "16 500 5 1" "32 300 99 0"; do
  set -- $args
  nb=""
  [ "$4" = 0 ] && nb=no-binary-head
  echo "seq $1, $2 samples, seed $3, binary head $4:"
  "$TBD" "$tmp/bert.h5" "$V" "$1" "$2" "$3" $nb > "$tmp/out" || { echo "FAIL: test_bert_data"; fails=$((fails + 1)); continue; }
  $PY "$(dirname "$0")/bert_samples.py" "$tmp/bert.h5" "$V" "$1" "$2" "$3" "$4" < "$tmp/out" || fails=$((fails + 1))
done
echo "bert_data: $fails failures"
[ $fails = 0 ]
