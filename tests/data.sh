#!/usr/bin/env bash
# mgt preprocess and mgt tokenize on real text (../shared/data): the token dataset is the
# same for 1, 2 and 4 ranks and agrees with mgt tokenize; bad input is refused with the file
# and line named and leaves no output behind; training refuses a dataset made with another
# vocabulary. Usage: data.sh MGT MPIEXEC DATA_DIR (exit 77 when DATA_DIR is missing).
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
[ -f "$DATA/gpt2/gpt2-vocab.json" ] || { echo "no $DATA: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
V="--vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Tiny Shakespeare as JSON lines (one paragraph each) plus a plain-text book
python3 - "$DATA/tinyshakespeare/input.txt" "$tmp/shakes.jsonl" <<'PY'
import json, sys
paras = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for p in paras[:3000]:
        f.write(json.dumps({"text": p, "id": len(p)}) + "\n")
PY
head -c 200000 "$DATA/books/pg11-alices-adventures-in-wonderland.txt" > "$tmp/alice.txt"

for n in 1 2 4; do
  if ! "$MPIEXEC" -n $n "$MGT" preprocess --input "$tmp/shakes.jsonl" "$tmp/alice.txt" \
    --output-prefix "$tmp/out$n" $V --append-eod > "$tmp/log$n" 2>&1; then
    fail "preprocess with $n ranks"; cat "$tmp/log$n"
  fi
  h5dump -d tokens -b LE -o "$tmp/tok$n.bin" "$tmp/out$n.h5" > /dev/null
  h5dump -d document_offsets -b LE -o "$tmp/off$n.bin" "$tmp/out$n.h5" > /dev/null
  h5dump -A "$tmp/out$n.h5" | grep -v "^HDF5" > "$tmp/attr$n.txt"
done
for n in 2 4; do
  cmp -s "$tmp/tok1.bin" "$tmp/tok$n.bin" || fail "tokens with $n ranks differ from 1 rank"
  cmp -s "$tmp/off1.bin" "$tmp/off$n.bin" || fail "document offsets with $n ranks differ"
  cmp -s "$tmp/attr1.txt" "$tmp/attr$n.txt" || fail "attributes with $n ranks differ"
done
grep -q "3001 documents" "$tmp/log1" || { fail "expected 3001 documents"; cat "$tmp/log1"; }
echo "ok: the token dataset is identical for 1, 2 and 4 ranks ($(stat -c %s "$tmp/tok1.bin") bytes)"

# the dataset holds what mgt tokenize says, each document ended by <|endoftext|>
"$MGT" tokenize $V --input "$tmp/shakes.jsonl" > "$tmp/ids.txt" || fail "mgt tokenize"
/usr/bin/python3 - "$tmp/ids.txt" "$tmp/tok1.bin" "$tmp/off1.bin" <<'PY' || fail "dataset and mgt tokenize disagree"
import sys, struct
ids = [list(map(int, l.split())) for l in open(sys.argv[1])]
raw = open(sys.argv[2], "rb").read(); tok = struct.unpack("<%dH" % (len(raw) // 2), raw)
raw = open(sys.argv[3], "rb").read(); off = struct.unpack("<%dq" % (len(raw) // 8), raw)
assert len(off) == len(ids) + 2, (len(off), len(ids))
for d, want in enumerate(ids):
    got = list(tok[off[d]:off[d + 1]])
    assert got == want + [50256], d
print("ok: %d documents match mgt tokenize" % len(ids))
PY
# decode gives the text back
head -3 "$tmp/ids.txt" | "$MGT" tokenize $V --decode > "$tmp/back.jsonl"
python3 - "$tmp/shakes.jsonl" "$tmp/back.jsonl" <<'PY' || fail "decode is not the inverse of encode"
import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1])][:3]
b = [json.loads(l)["text"] for l in open(sys.argv[2])]
assert a == b
print("ok: mgt tokenize --decode gives the text back")
PY

# BERT's WordPiece: the same dataset on 1 and 2 ranks, equal to mgt tokenize (no end-of-document
# token), and a GPT trained on it takes the tokenizer's 30,522 ids
BV="--tokenizer-type BertWordPieceLowerCase --vocab-file $DATA/bert/bert-base-uncased-vocab.txt"
for n in 1 2; do
  "$MPIEXEC" -n $n "$MGT" preprocess --input "$tmp/shakes.jsonl" --output-prefix "$tmp/bert$n" $BV > "$tmp/log" 2>&1 ||
    { fail "BERT preprocess with $n ranks"; cat "$tmp/log"; }
  h5dump -d tokens -b LE -o "$tmp/btok$n.bin" "$tmp/bert$n.h5" > /dev/null
  h5dump -d document_offsets -b LE -o "$tmp/boff$n.bin" "$tmp/bert$n.h5" > /dev/null
done
cmp -s "$tmp/btok1.bin" "$tmp/btok2.bin" && cmp -s "$tmp/boff1.bin" "$tmp/boff2.bin" || fail "BERT datasets differ with 2 ranks"
"$MGT" tokenize $BV --input "$tmp/shakes.jsonl" > "$tmp/bids.txt" || fail "mgt tokenize with WordPiece"
/usr/bin/python3 - "$tmp/bids.txt" "$tmp/btok1.bin" "$tmp/boff1.bin" <<'PY' || fail "BERT dataset and mgt tokenize disagree"
import sys, struct
ids = [list(map(int, l.split())) for l in open(sys.argv[1])]
raw = open(sys.argv[2], "rb").read(); tok = struct.unpack("<%dH" % (len(raw) // 2), raw)
raw = open(sys.argv[3], "rb").read(); off = struct.unpack("<%dq" % (len(raw) // 8), raw)
assert len(off) == len(ids) + 1 and all(list(tok[off[d]:off[d + 1]]) == w for d, w in enumerate(ids))
print("ok: the WordPiece dataset is the same on 1 and 2 ranks and matches mgt tokenize (%d documents)" % len(ids))
PY
# --split-sentences: the same file on 1 and 2 ranks; every document is whole sentences, none empty
for n in 1 2; do
  "$MPIEXEC" -n $n "$MGT" preprocess --input "$tmp/alice.txt" "$tmp/shakes.jsonl" --output-prefix "$tmp/sent$n" \
    $BV --split-sentences > "$tmp/log" 2>&1 || { fail "--split-sentences with $n ranks"; cat "$tmp/log"; }
done
cmp -s <(h5dump -d sentence_offsets "$tmp/sent1.h5") <(h5dump -d sentence_offsets "$tmp/sent2.h5" | sed "s/sent2/sent1/") &&
  cmp -s <(h5dump -d tokens "$tmp/sent1.h5") <(h5dump -d tokens "$tmp/sent2.h5" | sed "s/sent2/sent1/") ||
  fail "--split-sentences differs between 1 and 2 ranks"
/usr/bin/python3 - "$tmp/sent1.h5" "$tmp/bert1.h5" <<'PY' || fail "the sentence dataset"
import sys, h5py, numpy as np
f, g = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
so, do, tok = f["sentence_offsets"][()], f["document_offsets"][()], f["tokens"][()]
assert f.attrs["n_sentences"] == len(so) - 1 and so[0] == 0 and so[-1] == len(tok)
assert np.all(np.diff(so) > 0), "an empty sentence"
assert set(do) <= set(so), "a document boundary inside a sentence"
alice = np.searchsorted(so, do[1])  # the book, document 0, is many sentences
assert alice > 1000, alice
print("ok: %d sentences in %d documents (the book %d), documents made of whole sentences" % (len(so) - 1, len(do) - 1, alice))
PY
# --append-eod with --split-sentences: each document that has a sentence ends with the end of
# document, counted in its last sentence (Megatron-LM's sentence_lens[-1] += 1); the rest as
# without the flag
printf '{"text": "Hello there. This is two."}\n{"text": ""}\n{"text": "One more."}' > "$tmp/eod.jsonl"
for e in "" --append-eod; do
  "$MGT" preprocess --input "$tmp/eod.jsonl" --output-prefix "$tmp/eod$e" $V --split-sentences $e \
    > "$tmp/log" 2>&1 || { fail "--split-sentences $e"; cat "$tmp/log"; }
done
/usr/bin/python3 - "$tmp/eod.h5" "$tmp/eod--append-eod.h5" <<'PY' || fail "--split-sentences --append-eod"
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
tok, so, do = list(a["tokens"][()]), list(a["sentence_offsets"][()]), list(a["document_offsets"][()])
# the reference: an end of document after each non-empty document, its last sentence one longer
want_tok, want_so, want_do, shift = [], [0], [0], 0
for d in range(len(do) - 1):
    sents = [s for s in range(len(so) - 1) if do[d] <= so[s] < do[d + 1]]
    for s in sents:
        want_tok += tok[so[s]:so[s + 1]]
        if s == sents[-1]:
            want_tok.append(50256)
        want_so.append(len(want_tok))
    want_do.append(len(want_tok))
assert len(do) == 4 and do[0] < do[1] == do[2] < do[3] and b.attrs["append_eod"] == 1, (do, dict(b.attrs))
assert list(b["tokens"][()]) == want_tok, (list(b["tokens"][()]), want_tok)
assert list(b["sentence_offsets"][()]) == want_so and list(b["document_offsets"][()]) == want_do
print("ok: --split-sentences --append-eod ends each document's last sentence with the end of document")
PY

"$MGT" train --data-path "$tmp/bert1" $BV --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 \
  --micro-batch-size 2 --train-iters 2 --eval-iters 0 --dry-run > "$tmp/out" 2>&1 && grep -Eq "^  vocab-size +30522$" "$tmp/out" ||
  { fail "training on WordPiece tokens"; grep -i "vocab\|error" "$tmp/out"; }

# bad input
expect_error() { # want, then the command
  local want=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [ $rc != 2 ] || ! grep -q -F -- "$want" "$tmp/err"; then
    fail "$* gave exit $rc, wanted 2 and '$want'"; sed 's/^/    /' "$tmp/err" | head -5
  else
    echo "ok: $(grep '^mgt: error' "$tmp/err" | head -1)"
  fi
}
{ echo '{"text": "fine"}'; echo '{"text": "also fine"}'; echo '{"text": broken'; echo '{"other": 1}'; } > "$tmp/bad.jsonl"
expect_error "bad.jsonl:3: malformed JSON" "$MPIEXEC" -n 2 "$MGT" preprocess --input "$tmp/bad.jsonl" --output-prefix "$tmp/bad" $V
[ ! -e "$tmp/bad.h5" ] && [ ! -e "$tmp/bad.h5.tmp" ] || fail "a failed preprocess left a file"
sed -i '3d' "$tmp/bad.jsonl"
expect_error 'bad.jsonl:3: no "text" key' "$MGT" preprocess --input "$tmp/bad.jsonl" --output-prefix "$tmp/bad" $V
"$MGT" preprocess --input "$tmp/bad.jsonl" --output-prefix "$tmp/bad" $V --skip-bad-lines > "$tmp/out" 2>&1 &&
  grep -q "2 documents.*1 bad lines skipped" "$tmp/out" && echo "ok: --skip-bad-lines skips and counts" ||
  { fail "--skip-bad-lines"; cat "$tmp/out"; }
mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
  expect_error "not writable" "$MGT" preprocess --input "$tmp/alice.txt" --output-prefix "$tmp/ro/x" $V
fi
expect_error "directory $tmp/none is not writable" "$MGT" preprocess --input "$tmp/alice.txt" --output-prefix "$tmp/none/x" $V
expect_error "--input $tmp/missing.jsonl" "$MGT" preprocess --input "$tmp/missing.jsonl" --output-prefix "$tmp/m" $V
expect_error "GPT2BPETokenizer needs --vocab-file" "$MGT" preprocess --input "$tmp/alice.txt" --output-prefix "$tmp/m"
expect_error "BertWordPieceCase needs --vocab-file" "$MGT" preprocess --input "$tmp/alice.txt" --output-prefix "$tmp/m" --tokenizer-type BertWordPieceCase
expect_error "--append-eod: BERT's WordPiece has no end-of-document token" "$MGT" preprocess --input "$tmp/alice.txt" --output-prefix "$tmp/m" $BV --append-eod
expect_error "no [UNK] token: not a WordPiece vocabulary" "$MGT" tokenize --tokenizer-type BertWordPieceCase --vocab-file "$DATA/gpt2/gpt2-merges.txt" --input "$tmp/shakes.jsonl"

# training refuses a dataset of another vocabulary, or a vocabulary too small for it
"$MGT" preprocess --input "$tmp/alice.txt" "$tmp/shakes.jsonl" --output-prefix "$tmp/bytes" --tokenizer-type ByteTokenizer --append-eod > /dev/null || fail "byte preprocess"
expect_error "tokenized with another vocabulary" "$MGT" train --data-path "$tmp/bytes" $V --train-iters 1 --seq-length 16 --num-layers 1 --hidden-size 16 --num-attention-heads 2
expect_error "does not fit --vocab-size 100" "$MGT" train --data-path "$tmp/bytes" --vocab-size 100 --train-iters 1 --seq-length 16 --num-layers 1 --hidden-size 16 --num-attention-heads 2
# string attributes rewritten by h5py (variable-length strings, its default for str) are read too
cp "$tmp/bytes.h5" "$tmp/vlen.h5"
/usr/bin/python3 - "$tmp/vlen.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    for k in list(f.attrs):
        if isinstance(f.attrs[k], bytes):
            f.attrs[k] = f.attrs[k].decode()
    assert h5py.check_string_dtype(f.attrs.get_id("format").dtype).length is None
PY
"$MGT" train --data-path "$tmp/vlen" --tokenizer-type ByteTokenizer --train-iters 1 --seq-length 16 --num-layers 1 \
  --hidden-size 16 --num-attention-heads 2 --eval-iters 0 > "$tmp/out" 2>&1 &&
  echo "ok: a dataset with h5py's variable-length string attributes trains" ||
  { fail "a dataset with variable-length string attributes"; tail -3 "$tmp/out"; }
cp "$tmp/alice.txt" "$tmp/text.h5"
expect_error "text.h5: not a readable HDF5 file" "$MGT" train --data-path "$tmp/text.h5" --train-iters 1
expect_error "alice.h5: No such file" "$MGT" train --data-path "$tmp/alice" --train-iters 1

echo "data: $fails failures"
[ $fails = 0 ]
