#!/usr/bin/env bash
# Megatron-LM's indexed datasets (MMIDIDX .bin/.idx): files written by an independent numpy
# writer (following indexed_dataset.py's format) from an HDF5 dataset of a book, in uint16,
# int32, int64 and float64, train GPT with the very losses of the HDF5 dataset on 1 and on 2
# ranks, also blended; mgt preprocess --dataset-impl mmap writes files an independent numpy
# reader finds equal to the HDF5 dataset's tokens and documents, and with --split-sentences a
# BERT that trains as on the HDF5 sentence dataset; mgt dataset info on both formats; damaged,
# truncated and inconsistent files and a missing vocabulary refused in one line naming the file.
# Usage: megatron_data.sh MGT MPIEXEC DATA_DIR (exit 77 without DATA_DIR)
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
G=$DATA/gpt2
V=$DATA/bert/bert-base-uncased-vocab.txt
BOOK=$DATA/books/pg11-alices-adventures-in-wonderland.txt
[ -f "$G/gpt2-vocab.json" ] && [ -f "$V" ] && [ -f "$BOOK" ] || { echo "no shared data: skipped"; exit 77; }
. "$(dirname "$0")/lib.sh"

# the book as JSON documents of 20 paragraphs
$PY - "$BOOK" "$tmp/docs.jsonl" <<'PY'
import json, sys
paras = [p for p in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if p.strip()]
with open(sys.argv[2], "w") as f:
    for i in range(0, len(paras), 20):
        f.write(json.dumps({"text": "\n\n".join(paras[i:i + 20])}) + "\n")
PY
GPT2=(--vocab-file "$G/gpt2-vocab.json" --merge-file "$G/gpt2-merges.txt")
"$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/book" "${GPT2[@]}" --append-eod \
  >"$tmp/pp.log" 2>&1 || { fail "preprocess (hdf5)"; cat "$tmp/pp.log"; exit 1; }

# ---- an independent writer: the HDF5 dataset's tokens and documents in Megatron-LM's format ----
$PY - "$tmp" <<'PY' || fail "numpy writer"
import struct, sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(d + "/book.h5", "r") as f:
    tok, off = f["tokens"][:].astype(np.int64), f["document_offsets"][:]
# code 7 is float32 to Megatron-Core and float64 (np.double) to its legacy reader: both read
codes = {"uint16": (8, np.uint16), "int32": (4, np.int32), "int64": (5, np.int64), "float64": (6, np.float64),
         "float32": (7, np.float32), "double7": (7, np.float64)}
for name, (code, dt) in codes.items():
    sizes = np.diff(off).astype(np.int32)   # one sequence per document
    ptrs = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))[:-1]]) * np.dtype(dt).itemsize
    doc_idx = np.arange(len(sizes) + 1, dtype=np.int64)
    with open("%s/mm_%s.idx" % (d, name), "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes() + ptrs.astype(np.int64).tobytes() + doc_idx.tobytes())
    tok.astype(dt).tofile("%s/mm_%s.bin" % (d, name))
print("ok: numpy wrote %d documents, %d tokens in uint16, int32, int64, float64, code 7 as float32 and float64" % (len(off) - 1, len(tok)))
PY

# train NAME RANKS ARGS...: metrics in $tmp/NAME.jsonl
train() {
  local name=$1 n=$2
  shift 2
  "$MPIEXEC" -n "$n" "$MGT" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 64 --micro-batch-size 2 --global-batch-size 8 --train-iters 8 --lr 1e-3 \
    --log-interval 1 --eval-interval 4 --eval-iters 2 --split 90,10,0 "${GPT2[@]}" \
    --metrics-file "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: mgt train exited $?"; tail -3 "$tmp/$name.log"; return 1; }
}
# same A B: the same losses (training and validation) bit for bit
same() {
  $PY - "$tmp/$1.jsonl" "$tmp/$2.jsonl" <<'PY'
import json, sys
rows = lambda p: [(r["iteration"], r.get("loss", r.get("valid_loss"))) for r in map(json.loads, open(p))]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) >= 10 and a == b, (a[:3], b[:3])
PY
}
train h5 1 --data-path "$tmp/book" || exit 1
for dt in uint16 int32 int64 float64 float32 double7; do
  train "mm_$dt" 1 --data-path "$tmp/mm_$dt" && same h5 "mm_$dt" &&
    echo "ok: Megatron-LM $dt dataset: the HDF5 dataset's losses, bit for bit" || fail "Megatron-LM $dt dataset"
done
train h5_2 2 --data-path "$tmp/book" --tensor-model-parallel-size 1 &&
  train mm_2 2 --data-path "$tmp/mm_int32" --tensor-model-parallel-size 1 && same h5_2 mm_2 &&
  echo "ok: read from 2 ranks (dp 2) as the HDF5 dataset" || fail "2 ranks"
# the caches go into a folder (mgt-cache), so the data folder keeps only .bin/.idx pairs and
# datasets: Megatron-LM's tools/merge_datasets.py takes every file of a folder for one of a pair;
# --data-cache-path puts them elsewhere, with the same losses
$PY - "$tmp" <<'PY' || fail "the data folder holds a file that is not a dataset"
import os, sys
d = sys.argv[1]
files = [f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f))]
for f in files:
    stem, ext = os.path.splitext(f)
    if ext in (".bin", ".idx"):
        assert os.path.isfile(os.path.join(d, stem + (".idx" if ext == ".bin" else ".bin"))), f
    assert "index-" not in f and "bertmap-" not in f, f
caches = os.listdir(os.path.join(d, "mgt-cache"))
assert any(".idx.index-" in c for c in caches) and any(".h5.index-" in c for c in caches), caches
print("ok: the sample-index caches are in %s/mgt-cache (%d), none beside the datasets" % (d, len(caches)))
PY
train mm_cached 1 --data-path "$tmp/mm_int32" --data-cache-path "$tmp/elsewhere/caches" &&
  same h5 mm_cached && ls "$tmp"/elsewhere/caches/mm_int32.idx.index-* > /dev/null &&
  echo "ok: --data-cache-path holds the caches, the same losses" || fail "--data-cache-path"
# ---- Megatron-LM's other data forms ----
# "part" (the first 40% of the documents) and "cat" (the book's documents, then part's), by the
# independent writer; the training split's samples of each counted independently
$PY - "$tmp" <<'PY' > "$tmp/weights" || fail "numpy writer (part, cat)"
import struct, sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(d + "/book.h5", "r") as f:
    tok, off = f["tokens"][:].astype(np.int64), f["document_offsets"][:]
def write(name, docs):
    sizes = np.array([off[i + 1] - off[i] for i in docs], np.int32)
    ptrs = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))[:-1]]) * 4
    with open("%s/%s.idx" % (d, name), "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, 4) + struct.pack("<QQ", len(docs), len(docs) + 1))
        f.write(sizes.tobytes() + ptrs.astype(np.int64).tobytes() + np.arange(len(docs) + 1, dtype=np.int64).tobytes())
    np.concatenate([tok[off[i]:off[i + 1]] for i in docs]).astype(np.int32).tofile("%s/%s.bin" % (d, name))
    return sizes
n = len(off) - 1
part = list(range(int(0.4 * n)))
write("part", part)
write("cat", list(range(n)) + part)
def train_samples(sizes):  # --split 90,10,0 over documents, windows of 64 + 1 tokens
    b1 = int(0.9 * len(sizes) + 0.5)
    return (int(sizes[:b1].sum()) - 1) // 64
print(train_samples(np.diff(off)), train_samples(np.diff(off)[:len(part)]), n, len(part))
PY
read -r w_book w_part n_book n_part < "$tmp/weights"
trainloss() { grep -v valid "$tmp/$1.jsonl" | $PY -c 'import json, sys; print([json.loads(l)["loss"] for l in sys.stdin])'; }
train size 1 --data-path "$tmp/book" "$tmp/part" && train weighted 1 --data-path "$w_book" "$tmp/book" "$w_part" "$tmp/part" &&
  [ "$(trainloss size)" = "$(trainloss weighted)" ] &&
  echo "ok: prefixes without weights blend as weighted by their samples ($w_book and $w_part, counted independently)" ||
  fail "--data-path without weights"
printf '%s %s\n  %s %s\n' "$w_book" "$tmp/book" "$w_part" "$tmp/part" > "$tmp/data_args"
train args 1 --data-args-path "$tmp/data_args" && same weighted args &&
  echo "ok: --data-args-path reads --data-path's value from its file" || fail "--data-args-path"
train persplit 1 --train-data-path "$tmp/book" --valid-data-path "$tmp/part" &&
  train catsplit 1 --data-path "$tmp/cat" --split "$n_book,$n_part,0" && same persplit catsplit &&
  echo "ok: --train-data-path and --valid-data-path: each split its whole blend, as the documents of one file split there" ||
  fail "per-split data paths"
printf '{"train": ["%s"], "valid": ["%s"], "test": null}' "$tmp/book" "$tmp/part" > "$tmp/split_args.json"
train persplit_json 1 --per-split-data-args-path "$tmp/split_args.json" && same persplit persplit_json &&
  echo "ok: --per-split-data-args-path reads each split's blend from JSON" || fail "--per-split-data-args-path"
expect_error "give --data-path (split by --split) or each split's --train-data-path" \
  "$MGT" train --data-path "$tmp/book" --train-data-path "$tmp/part" "${GPT2[@]}"
expect_error "--valid-data-path and --test-data-path need --train-data-path" \
  "$MGT" train --data-path "$tmp/book" --valid-data-path "$tmp/part" "${GPT2[@]}"
expect_error "--data-path: value 3, '$tmp/part', is not a positive weight" \
  "$MGT" train --data-path 0.5 "$tmp/book" "$tmp/part" "$tmp/book" "${GPT2[@]}"
cp "$tmp/book.h5" "$tmp/book2.h5"
train blend_h5 1 --data-path 0.3 "$tmp/book" 0.7 "$tmp/book2" &&
  train blend_mm 1 --data-path 0.3 "$tmp/book" 0.7 "$tmp/mm_uint16" && same blend_h5 blend_mm &&
  echo "ok: blended with an HDF5 dataset as two HDF5 copies" || fail "blending"

# ---- mgt preprocess --dataset-impl mmap, read back by an independent numpy reader ----
"$MPIEXEC" -n 2 "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/pp" "${GPT2[@]}" \
  --append-eod --dataset-impl mmap >"$tmp/ppm.log" 2>&1 || { fail "preprocess --dataset-impl mmap"; cat "$tmp/ppm.log"; }
grep -q "train with --data-path $tmp/pp_text_document" "$tmp/ppm.log" || fail "the summary names the prefix"
cat > "$tmp/reader.py" <<'PY'
import struct, numpy as np
DT = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float64, 8: np.uint16}
def read(prefix):
    b = open(prefix + ".idx", "rb").read()
    assert b[:9] == b"MMIDIDX\x00\x00" and struct.unpack("<Q", b[9:17])[0] == 1
    dt = DT[b[17]]
    n, m = struct.unpack("<QQ", b[18:34])
    sizes = np.frombuffer(b, np.int32, n, 34)
    ptrs = np.frombuffer(b, np.int64, n, 34 + 4 * n)
    docs = np.frombuffer(b, np.int64, m, 34 + 12 * n)
    assert len(b) == 34 + 12 * n + 8 * m
    data = np.fromfile(prefix + ".bin", dt)
    seqs = [data[p // np.dtype(dt).itemsize:p // np.dtype(dt).itemsize + s] for p, s in zip(ptrs, sizes)]
    return dt, seqs, docs
PY
$PY - "$tmp" <<'PY' || fail "preprocess --dataset-impl mmap against the HDF5 dataset"
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[1])
from reader import read
d = sys.argv[1]
dt, seqs, docs = read(d + "/pp_text_document")
with h5py.File(d + "/book.h5", "r") as f:
    tok, off = f["tokens"][:], f["document_offsets"][:]
assert dt == np.uint16 and list(docs) == list(range(len(off)))
assert len(seqs) == len(off) - 1 and all((s == tok[off[i]:off[i + 1]]).all() for i, s in enumerate(seqs))
print("ok: --dataset-impl mmap on 2 ranks: %d documents and %d tokens equal to the HDF5 dataset's" % (len(seqs), len(tok)))
PY
train pp 1 --data-path "$tmp/pp_text_document" && same h5 pp &&
  echo "ok: trains on what --dataset-impl mmap wrote as on the HDF5 dataset" || fail "training on the mmap output"
# a JSON line of empty text is an empty document, as Megatron-LM's preprocess_data.py writes it:
# no token, no end of document, no sequence, its entry in the document index repeated; trained on
$PY - "$tmp/docs.jsonl" "$tmp/holes.jsonl" <<'PY'
import json, sys
docs = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps(d) + "\n")
        if i % 5 == 0: f.write(json.dumps({"text": ""}) + "\n")
PY
"$MGT" preprocess --input "$tmp/holes.jsonl" --output-prefix "$tmp/holes" "${GPT2[@]}" --append-eod \
  --dataset-impl mmap --workers 8 --partitions 2 --lang english > "$tmp/holes.log" 2>&1 &&
  grep -q "^mgt: note: --workers, --partitions: mgt preprocess tokenizes on its MPI ranks" "$tmp/holes.log" &&
  "$MGT" preprocess --input "$tmp/holes.jsonl" --output-prefix "$tmp/holes" "${GPT2[@]}" --append-eod \
  >> "$tmp/holes.log" 2>&1 || { fail "preprocess with empty documents"; cat "$tmp/holes.log"; }
$PY - "$tmp" <<'PY' || fail "empty documents as Megatron-LM writes them"
import json, sys, h5py, numpy as np
sys.path.insert(0, sys.argv[1])
from reader import read
d = sys.argv[1]
dt, seqs, docs = read(d + "/holes_text_document")
with h5py.File(d + "/book.h5", "r") as f:
    tok, off = f["tokens"][:], f["document_offsets"][:]
texts = [json.loads(l)["text"] for l in open(d + "/holes.jsonl")]
want_docs, want_seqs, k = [0], [], 0
for t in texts:  # Megatron-LM: a sequence for a document with tokens, none for an empty one
    if t:
        want_seqs.append(tok[off[k]:off[k + 1]]); k += 1
    want_docs.append(len(want_seqs))
assert list(docs) == want_docs and len(seqs) == len(want_seqs)
assert all((a == b).all() for a, b in zip(seqs, want_seqs))
with h5py.File(d + "/holes.h5", "r") as f:
    o = f["document_offsets"][:]
assert len(o) == len(texts) + 1 and (np.diff(o)[[i for i, t in enumerate(texts) if not t]] == 0).all()
print("ok: %d empty documents: no token, no sequence, the document index repeated (.idx and HDF5)" % texts.count(""))
PY
# their summary counts the sequences (not the documents), and mgt dataset info does not take
# the documents without one for a split into sentences
n_docs=$(wc -l < "$tmp/holes.jsonl") n_empty=$(grep -c '"text": ""' "$tmp/holes.jsonl")
grep -q "$n_docs documents, $((n_docs - n_empty)) sequences" "$tmp/holes.log" &&
  "$MGT" dataset info "$tmp/holes_text_document" > "$tmp/hinfo" 2>&1 && ! grep -q "sentences" "$tmp/hinfo" &&
  grep -q "documents: *$n_docs" "$tmp/hinfo" &&
  echo "ok: $n_docs documents, $((n_docs - n_empty)) sequences in the summary; no sentences in mgt dataset info" ||
  { fail "the counts of a dataset with empty documents"; head -3 "$tmp/holes.log"; cat "$tmp/hinfo"; }
train holes_mm 1 --data-path "$tmp/holes_text_document" && train holes_h5 1 --data-path "$tmp/holes" &&
  same holes_mm holes_h5 && echo "ok: trains on datasets with empty documents, both formats alike" ||
  fail "training with empty documents"

# ---- BERT: sentences (a sequence each) grouped into documents by the document index ----
BW=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$V")
"$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/bs" "${BW[@]}" --split-sentences >"$tmp/b1.log" 2>&1 &&
  "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/bs" "${BW[@]}" --split-sentences \
    --dataset-impl mmap >"$tmp/b2.log" 2>&1 || fail "BERT preprocess"
$PY - "$tmp" <<'PY' || fail "sentence-level mmap against the HDF5 sentence dataset"
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[1])
from reader import read
d = sys.argv[1]
dt, seqs, docs = read(d + "/bs_text_sentence")
with h5py.File(d + "/bs.h5", "r") as f:
    tok, doff, soff = f["tokens"][:], f["document_offsets"][:], f["sentence_offsets"][:]
assert len(seqs) == len(soff) - 1 and all((s == tok[soff[i]:soff[i + 1]]).all() for i, s in enumerate(seqs))
assert [soff[k] for k in docs] == list(doff), "document index"
print("ok: --split-sentences --dataset-impl mmap: %d sentences in %d documents as the HDF5 dataset" % (len(seqs), len(docs) - 1))
PY
bert() {
  local name=$1
  shift
  "$MGT" train --model bert "${BW[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
    --seq-length 32 --max-position-embeddings 40 --micro-batch-size 2 --global-batch-size 4 \
    --train-iters 6 --lr 1e-3 --log-interval 1 --eval-iters 0 --split 100,0,0 \
    --make-vocab-size-divisible-by 8 --metrics-file "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: mgt train exited $?"; tail -3 "$tmp/$name.log"; return 1; }
}
bert bh5 --data-path "$tmp/bs" && bert bmm --data-path "$tmp/bs_text_sentence" &&
  $PY - "$tmp/bh5.jsonl" "$tmp/bmm.jsonl" <<'PY' && echo "ok: BERT on the Megatron-LM sentence dataset: the HDF5 dataset's losses" || fail "BERT on Megatron-LM data"
import json, sys
a, b = ([(r["lm_loss"], r["sop_loss"]) for r in map(json.loads, open(p))] for p in sys.argv[1:3])
assert len(a) == 6 and a == b, (a, b)
PY

# ---- mgt dataset info ----
"$MGT" dataset info "$tmp/book" >"$tmp/i1" 2>&1 && "$MGT" dataset info "$tmp/pp_text_document" >"$tmp/i2" 2>&1 &&
  "$MGT" dataset info "$tmp/bs_text_sentence" >"$tmp/i3" 2>&1 &&
  $PY - "$tmp" <<'PY' || { fail "mgt dataset info"; cat "$tmp/i1" "$tmp/i2" "$tmp/i3"; }
import sys, h5py
d = sys.argv[1]
kv = lambda p: dict(l.split(":", 1) for l in open(p).read().splitlines() if ":" in l)
a, b, c = (kv("%s/%s" % (d, k)) for k in ("i1", "i2", "i3"))
with h5py.File(d + "/book.h5", "r") as f:
    n_tok, n_doc = len(f["tokens"]), len(f["document_offsets"]) - 1
for k in (a, b):
    assert int(k["tokens"]) == n_tok and int(k["documents"]) == n_doc, k
assert a["format"].strip() == "hdf5" and b["format"].strip().startswith("megatron"), (a, b)
assert "GPT2" in a["tokenizer"] and b["dtype"].strip() == "uint16" and "unknown" in b["vocabulary"], b
with h5py.File(d + "/bs.h5", "r") as f:
    assert int(c["sentences"]) == len(f["sentence_offsets"]) - 1
print("ok: mgt dataset info: format, documents, tokens, dtype, vocabulary, sentences")
PY

# ---- the unigram baseline, against numpy on the HDF5 file's tokens (the same on both formats) ----
"$MGT" dataset info "$tmp/book" --unigram --split 80,20,0 >"$tmp/u1" 2>&1 &&
  "$MGT" dataset info --unigram "$tmp/pp_text_document" --split=80,20,0 >"$tmp/u2" 2>&1 &&
  $PY - "$tmp" <<'PY' || { fail "mgt dataset info --unigram"; cat "$tmp/u1" "$tmp/u2"; }
import sys, h5py, numpy as np
d = sys.argv[1]
got = [float(l.split()[2]) for p in ("u1", "u2") for l in open("%s/%s" % (d, p)) if l.startswith("unigram")]
with h5py.File(d + "/book.h5", "r") as f:
    tok, off, V = f["tokens"][:].astype(np.int64), f["document_offsets"][:], int(f.attrs["vocab_size"])
nd = len(off) - 1
b1, b2 = int(0.8 * nd + 0.5), int(1.0 * nd + 0.5)  # Megatron-LM's document split
train, valid = tok[off[0]:off[b1]], tok[off[b1]:off[b2]]
p = (np.bincount(train, minlength=V) + 1.0) / (len(train) + V)
want = float(np.exp(-np.mean(np.log(p[valid]))))
# the Megatron-LM file records no vocabulary: its V is the largest id used + 1
Vm = int(tok.max()) + 1
pm = (np.bincount(train, minlength=Vm) + 1.0) / (len(train) + Vm)
want_mm = float(np.exp(-np.mean(np.log(pm[valid]))))
assert len(got) == 2 and abs(got[0] - want) <= 1e-3 * want and abs(got[1] - want_mm) <= 1e-3 * want_mm, (got, want, want_mm)
print("ok: mgt dataset info --unigram: %.3f and %.3f, numpy %.3f and %.3f" % (got[0], got[1], want, want_mm))
PY
expect "leaves the validation split without tokens" "$MGT" dataset info "$tmp/book" --unigram --split 100,0,0

# ---- refusals ----
$PY - "$tmp" <<'PY'
import struct, sys, shutil
d = sys.argv[1]
src = open(d + "/mm_int32.idx", "rb").read()
def put(name, b, trunc_bin=False):
    open("%s/bad_%s.idx" % (d, name), "wb").write(b)
    data = open(d + "/mm_int32.bin", "rb").read()
    open("%s/bad_%s.bin" % (d, name), "wb").write(data[:len(data) // 2] if trunc_bin else data)
n = struct.unpack("<Q", src[18:26])[0]
put("magic", b"MMIDIDY" + src[7:])
put("version", src[:9] + struct.pack("<Q", 2) + src[17:])
put("dtype", src[:17] + bytes([9]) + src[18:])
put("short", src[:-5])
put("bin", src, trunc_bin=True)
p0 = 34 + 4 * n  # the second pointer off by 4 bytes
put("ptr", src[:p0 + 8] + struct.pack("<q", struct.unpack("<q", src[p0 + 8:p0 + 16])[0] + 4) + src[p0 + 16:])
put("docs", src[:-8] + struct.pack("<q", n - 1))
PY
T=(train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --train-iters 1 "${GPT2[@]}")
# documents without a token, in either format: refused, nothing written
printf '{"text": ""}\n{"text": ""}\n' > "$tmp/empty.jsonl"
for impl in "" "--dataset-impl mmap"; do
  expect "--input: no tokens (its 2 documents are empty once tokenized)" \
    "$MGT" preprocess --input "$tmp/empty.jsonl" --output-prefix "$tmp/empty" "${GPT2[@]}" $impl
done
[ -z "$(ls "$tmp" | grep '^empty[._]' | grep -v '^empty.jsonl$')" ] && echo "ok: nothing written for them" || fail "files left: $(ls "$tmp" | grep '^empty')"
# --skip-bad-lines counted in the mmap summary too
printf '{"text": "a b"}\n{"text": 3}\nnot json\n{"text": "c"}\n' > "$tmp/badl.jsonl"
"$MGT" preprocess --input "$tmp/badl.jsonl" --output-prefix "$tmp/badl" "${GPT2[@]}" --dataset-impl mmap \
  --skip-bad-lines > "$tmp/badl.log" 2>&1 && grep -q "2 documents.*; 2 bad lines skipped; train with" "$tmp/badl.log" &&
  echo "ok: --dataset-impl mmap --skip-bad-lines: 2 bad lines counted" || { fail "mmap bad lines"; cat "$tmp/badl.log"; }
expect "bad_magic.idx: not a Megatron-LM MMIDIDX index" "$MGT" "${T[@]}" --data-path "$tmp/bad_magic"
expect "bad_version.idx: index version 2" "$MGT" "${T[@]}" --data-path "$tmp/bad_version"
expect "bad_dtype.idx: unknown dtype code 9" "$MGT" "${T[@]}" --data-path "$tmp/bad_dtype"
expect "bad_short.idx: " "$MGT" "${T[@]}" --data-path "$tmp/bad_short"
expect "bad_bin.bin: " "$MGT" "${T[@]}" --data-path "$tmp/bad_bin"
expect "must lie back to back" "$MGT" "${T[@]}" --data-path "$tmp/bad_ptr"
expect "bad_docs.idx: document index entry" "$MGT" "${T[@]}" --data-path "$tmp/bad_docs"
expect "bad_short.idx" "$MGT" dataset info "$tmp/bad_short"
expect "does not record its vocabulary" "$MGT" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 64 --train-iters 1 --data-path "$tmp/mm_int32"
expect "nor is there a Megatron-LM" "$MGT" "${T[@]}" --data-path "$tmp/nothing"
echo "megatron_data: $fails failures"
[ $fails = 0 ]
