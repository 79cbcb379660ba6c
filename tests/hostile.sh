#!/usr/bin/env bash
# Input a hostile user gives: damaged and edited checkpoints and datasets (written with h5py),
# FIFOs where files belong, flags that swallow each other. Each must end in one error line
# naming what and why, exit status 2, no MPI_Abort banner, and never a hang or a crash (every
# command runs under a timeout). Usage: hostile.sh MGT MPIEXEC TESTS_DIR
set -u
MGT=$(readlink -f "$1") MPIEXEC=$2 TESTS=$3
. "$TESTS/lib.sh"
T=(timeout -k 5 120)

# h5edit FILE PYTHON: runs PYTHON with f = h5py.File(FILE, "r+")
h5edit() {
  $PY - "$1" "$2" <<'PY'
import sys, json, h5py, numpy as np
f = h5py.File(sys.argv[1], "r+")
exec(sys.argv[2])
f.close()
PY
}
# a copy of checkpoint file $1 as directory $2 (with latest)
ckcopy() { mkdir -p "$2" && cp "$1" "$2/" && basename "$1" | sed 's/iter_0*\([0-9][0-9]*\)\.h5/\1/' > "$2/latest"; }

M0=(--num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 2
  --global-batch-size 4 --log-interval 1 --eval-iters 0)
M=(--mock-data --tokenizer-type ByteTokenizer "${M0[@]}") # 257 ids, from the tokenizer
"${T[@]}" "$MGT" train "${M[@]}" --train-iters 3 --save "$tmp/good" > "$tmp/log" 2>&1 || { fail "training"; cat "$tmp/log"; }
GOOD=$tmp/good/iter_0000003.h5
OLD=$TESTS/data/ckpt-format1/iter_0000003.h5 # format 1: no checksums of config and state
R=(train "${M[@]}" --train-iters 4)
RO=(train --mock-data "${M0[@]}" --train-iters 4) # the format-1 file's model
echo "1 2 3 4 5" > "$tmp/ids.txt"

# ---- paths that are not regular files ----
mkfifo "$tmp/fifo.h5"
mkdir -p "$tmp/fifodir" && mkfifo "$tmp/fifodir/latest"
expect_error "neither a directory nor a regular file" "$MGT" ckpt verify "$tmp/fifo.h5"
expect_error "neither a directory nor a regular file" "$MGT" "${R[@]}" --load "$tmp/fifo.h5"
expect_error "neither a directory nor a regular file" "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/fifo.h5" --input-ids "$tmp/ids.txt"
expect_error "latest is not a regular file" "$MGT" ckpt info "$tmp/fifodir"
expect_error "fifo.h5: not a regular file" "$MGT" train "${M0[@]}" --data-path "$tmp/fifo" --vocab-size 128 --train-iters 1

# ---- stored configurations: validated like flags (format 1 has no checksum to stop an edit) ----
cfgedit() { # name, python editing the JSON object c
  ckcopy "$OLD" "$tmp/$1"
  h5edit "$tmp/$1/iter_0000003.h5" "c = json.loads(f.attrs['config']); $2; f.attrs['config'] = np.bytes_(json.dumps(c))"
}
cfgedit heads0 "c['num_attention_heads'] = 0"
expect_error "configuration key num_attention_heads is 0, out of the range [1, 65536]" "$MGT" eval --load "$tmp/heads0" --input-ids "$tmp/ids.txt"
cfgedit vdiv0 "c['make_vocab_size_divisible_by'] = 0"
expect_error "make_vocab_size_divisible_by is 0, out of the range" "$MGT" eval --load "$tmp/vdiv0" --input-ids "$tmp/ids.txt"
cfgedit eps "c['layernorm_epsilon'] = -1e-5"
expect_error "layernorm_epsilon is -1.0000000000000001e-05, out of the range" "$MGT" eval --load "$tmp/eps" --input-ids "$tmp/ids.txt"
"${T[@]}" "$MGT" train "${M[@]}" --train-iters 1 --untie-embeddings-and-output-weights --save "$tmp/untied" > "$tmp/log" 2>&1 || { fail "untied training"; cat "$tmp/log"; }
expect_error "Hugging Face's GPT-2 ties its output layer to wte" "$MGT" ckpt export --format hf --load "$tmp/untied" --output "$tmp/x"
"${T[@]}" "$MGT" train "${M[@]}" --train-iters 1 --position-embedding-type rope --save "$tmp/rope" > "$tmp/log" 2>&1 || { fail "rotary training"; cat "$tmp/log"; }
expect_error "Hugging Face's GPT-2 and BERT have learned positions" "$MGT" ckpt export --format hf --load "$tmp/rope" --output "$tmp/x"
expect_error "--rotary-base 500000 (checkpoint 10000)" "$MGT" train "${M[@]}" --train-iters 2 --position-embedding-type rope --rotary-base 500000 --load "$tmp/rope"
expect_error "--use-rope-scaling 1 (checkpoint 0), --rope-scaling-factor 8 (checkpoint 1)" "$MGT" train "${M[@]}" --train-iters 2 --position-embedding-type rope --use-rope-scaling --load "$tmp/rope"
expect_error "give --position-embedding-type rope" "$MGT" train "${M[@]}" --train-iters 1 --use-rope-scaling
expect_error "the head size 3 is odd" "$MGT" train --mock-data --num-layers 1 --hidden-size 6 --num-attention-heads 2 --position-embedding-type rope --train-iters 1
# Llama's block: a checkpoint of one block is not resumed as another, nor exported as GPT-2
L=(--num-attention-heads 4 --normalization RMSNorm --swiglu --disable-bias-linear --group-query-attention --num-query-groups 2)
"${T[@]}" "$MGT" train "${M[@]}" --train-iters 1 "${L[@]}" --save "$tmp/llama" > "$tmp/log" 2>&1 || { fail "Llama block training"; cat "$tmp/log"; }
expect_error "--normalization RMSNorm: Hugging Face's GPT-2 and BERT have LayerNorms" "$MGT" ckpt export --format hf --load "$tmp/llama" --output "$tmp/x"
expect_error "--normalization LayerNorm (checkpoint RMSNorm)" "$MGT" train "${M[@]}" --train-iters 2 "${L[@]:0:2}" "${L[@]:4}" --load "$tmp/llama"
expect_error "--group-query-attention 0 (checkpoint 1), --num-query-groups 4 (checkpoint 2)" "$MGT" train "${M[@]}" --train-iters 2 "${L[@]:0:6}" --load "$tmp/llama"
expect_error "--num-query-groups 3 does not divide --num-attention-heads 4" "$MGT" train "${M[@]}" --train-iters 1 --num-attention-heads 4 --group-query-attention --num-query-groups 3
expect_error "--num-query-groups 2 needs --group-query-attention" "$MGT" train "${M[@]}" --train-iters 1 --num-query-groups 2
expect_error "--group-query-attention needs --num-query-groups" "$MGT" train "${M[@]}" --train-iters 1 --group-query-attention
expect_error "--normalization: expected one of LayerNorm, RMSNorm, got 'BatchNorm'" "$MGT" train "${M[@]}" --train-iters 1 --normalization BatchNorm
expect_error "--num-query-groups 2 is not divisible by --tensor-model-parallel-size 4" "$MPIEXEC" -n 4 "$MGT" train "${M[@]}" --train-iters 1 --tensor-model-parallel-size 4 "${L[@]:0:2}" --group-query-attention --num-query-groups 2
expect_error "only a causal language model" "$MGT" train --model bert --mock-data "${M0[@]}" --train-iters 1 --untie-embeddings-and-output-weights
cfgedit heads3 "c['num_attention_heads'] = 3"
expect_error "hidden_size 16 is not divisible by num_attention_heads 3" "$MGT" ckpt export --format hf --load "$tmp/heads3" --output "$tmp/x"
ckcopy "$OLD" "$tmp/empty" && h5edit "$tmp/empty/iter_0000003.h5" "f.attrs['config'] = np.bytes_('{}')"
expect_error "configuration: no vocab_size" "$MGT" ckpt verify "$tmp/empty"
ckcopy "$OLD" "$tmp/brace" && h5edit "$tmp/brace/iter_0000003.h5" "f.attrs['config'] = f.attrs['config'][:-1]"
expect_error "brace/iter_0000003.h5: configuration: malformed JSON" "$MGT" "${RO[@]}" --load "$tmp/brace"
# ---- the trainer state: ranges, and integers ----
ckcopy "$OLD" "$tmp/neg" && h5edit "$tmp/neg/iter_0000003.h5" "f.attrs['iteration'] = np.int64(-5)"
expect_error "trainer state iteration is -5, outside" "$MGT" "${RO[@]}" --load "$tmp/neg"
ckcopy "$OLD" "$tmp/frac" && h5edit "$tmp/frac/iter_0000003.h5" "f.attrs['iteration'] = np.float64(2.7)"
expect_error "attribute 'iteration' is not one integer" "$MGT" "${RO[@]}" --load "$tmp/frac"
ckcopy "$OLD" "$tmp/samples" && h5edit "$tmp/samples/iter_0000003.h5" "f.attrs['consumed_samples'] = np.int64(-1)"
expect_error "trainer state consumed_samples is -1" "$MGT" "${RO[@]}" --load "$tmp/samples"
# ---- format 2: any edit of the configuration or the state is found by its checksum ----
ckcopy "$GOOD" "$tmp/it5" && h5edit "$tmp/it5/iter_0000003.h5" "f.attrs['iteration'] = np.int64(5)"
expect_error "the trainer state was changed after the save" "$MGT" "${R[@]}" --load "$tmp/it5"
ckcopy "$GOOD" "$tmp/digit" && h5edit "$tmp/digit/iter_0000003.h5" "f.attrs['config'] = np.bytes_(f.attrs['config'].replace(b'\"seed\":1234', b'\"seed\":1235'))"
expect_error "the configuration was changed after the save" "$MGT" "${R[@]}" --load "$tmp/digit"
expect_error "the configuration was changed after the save" "$MGT" ckpt verify "$tmp/digit"
# ---- format 3: the model section, checksummed and checked against the configuration ----
ckcopy "$GOOD" "$tmp/msec" && h5edit "$tmp/msec/iter_0000003.h5" "f.attrs['model'] = np.bytes_(f.attrs['model'].replace(b'\"layers\": 2', b'\"layers\": 3'))"
expect_error "the model section was changed after the save" "$MGT" "${R[@]}" --load "$tmp/msec"
expect_error "the model section was changed after the save" "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/msec" --input-ids "$tmp/ids.txt"
modelhash='
def rehash_model(f):
    h, M = 0x6d6f64656c, (1 << 64) - 1
    def fmix(x):
        x ^= x >> 33; x = (x * 0xff51afd7ed558ccd) & M
        x ^= x >> 33; x = (x * 0xc4ceb9fe1a85ec53) & M
        return x ^ (x >> 33)
    for c in bytes(f.attrs["model"]):
        h = fmix(h ^ (c + 256))
    f.attrs["model_checksum"] = np.uint64(h)
'
ckcopy "$GOOD" "$tmp/mlay" && h5edit "$tmp/mlay/iter_0000003.h5" "$modelhash
f.attrs['model'] = np.bytes_(f.attrs['model'].replace(b'\"layers\": 2', b'\"layers\": 3')); rehash_model(f)"
expect_error "its model section disagrees with its configuration (layers 3, not 2)" "$MGT" "${R[@]}" --load "$tmp/mlay"
ckcopy "$GOOD" "$tmp/mkey" && h5edit "$tmp/mkey/iter_0000003.h5" "$modelhash
f.attrs['model'] = np.bytes_(f.attrs['model'].replace(b'\"ffn\"', b'\"fnn\"')); rehash_model(f)"
expect_error "model section: unknown field \"fnn\"" "$MGT" "${R[@]}" --load "$tmp/mkey"
ckcopy "$GOOD" "$tmp/mnorm" && h5edit "$tmp/mnorm/iter_0000003.h5" "$modelhash
f.attrs['model'] = np.bytes_(f.attrs['model'].replace(b'\"LayerNorm\"', b'\"BatchNorm\"')); rehash_model(f)"
expect_error "model \"norm\": no such choice \"BatchNorm\"" "$MGT" "${R[@]}" --load "$tmp/mnorm"
ckcopy "$GOOD" "$tmp/mfrac" && h5edit "$tmp/mfrac/iter_0000003.h5" "$modelhash
f.attrs['model'] = np.bytes_(f.attrs['model'].replace(b'\"heads\": 2', b'\"heads\": 2.5')); rehash_model(f)"
expect_error "model \"heads\" is not an integer" "$MGT" "${R[@]}" --load "$tmp/mfrac"
ckcopy "$GOOD" "$tmp/mnone" && h5edit "$tmp/mnone/iter_0000003.h5" "del f.attrs['model']"
expect_error "no model attribute" "$MGT" "${R[@]}" --load "$tmp/mnone"

# ---- tensors: deleted, reshaped, resized with a recomputed checksum; verify knows the list ----
verify_damaged() { # what, dir, expected line
  "${T[@]}" "$MGT" ckpt verify "$2" > "$tmp/out" 2>&1
  local rc=$?
  if [ $rc = 1 ] && grep -q -F -- "$3" "$tmp/out"; then echo "ok: verify of $1: $3"; else
    fail "verify of $1 (exit $rc)"
    sed 's/^/    /' "$tmp/out" | head -4
  fi
}
rehash='
def recompute(d):
    a = d[()].astype(np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    M = (1 << 64) - 1
    def fmix(x):
        x = x ^ (x >> np.uint64(33)); x = (x * np.uint64(0xff51afd7ed558ccd)) & np.uint64(M)
        x = x ^ (x >> np.uint64(33)); x = (x * np.uint64(0xc4ceb9fe1a85ec53)) & np.uint64(M)
        return x ^ (x >> np.uint64(33))
    with np.errstate(over="ignore"):
        i = np.arange(1, a.size + 1, dtype=np.uint64)
        d.attrs["checksum"] = np.uint64(int(fmix(fmix(i) ^ a).sum(dtype=np.uint64)))
'
ckcopy "$GOOD" "$tmp/del" && h5edit "$tmp/del/iter_0000003.h5" "del f['model/layers.0.mlp.dense_4h_to_h.bias']"
verify_damaged "a deleted model tensor" "$tmp/del" "damaged: /model/layers.0.mlp.dense_4h_to_h.bias (missing)"
ckcopy "$GOOD" "$tmp/delopt" && h5edit "$tmp/delopt/iter_0000003.h5" "del f['optimizer/exp_avg/final_layernorm.bias']"
verify_damaged "a deleted optimizer tensor" "$tmp/delopt" "damaged: /optimizer/exp_avg/final_layernorm.bias (missing)"
ckcopy "$GOOD" "$tmp/delgrp" && h5edit "$tmp/delgrp/iter_0000003.h5" "del f['optimizer']"
verify_damaged "a deleted optimizer group" "$tmp/delgrp" "damaged: /optimizer/exp_avg_sq/layers.1.attention.qkv.weight (missing)"
expect_error "tensor /optimizer/exp_avg/embedding.word_embeddings.weight is missing" "$MGT" "${R[@]}" --load "$tmp/delgrp"
ckcopy "$GOOD" "$tmp/resize" && h5edit "$tmp/resize/iter_0000003.h5" "$rehash
w = f['model/final_layernorm.weight'][()]; del f['model/final_layernorm.weight']
f['model/final_layernorm.weight'] = np.concatenate([w, w[:4]]); recompute(f['model/final_layernorm.weight'])"
verify_damaged "a resized tensor with its checksum recomputed" "$tmp/resize" "damaged: /model/final_layernorm.weight (shape [20], the configuration implies [16])"
ckcopy "$GOOD" "$tmp/five" && h5edit "$tmp/five/iter_0000003.h5" "$rehash
w = f['model/layers.1.attention.qkv.weight'][()]; del f['model/layers.1.attention.qkv.weight']
f['model/layers.1.attention.qkv.weight'] = w.reshape(3, 4, 4, 4, 4); recompute(f['model/layers.1.attention.qkv.weight'])"
verify_damaged "a tensor reshaped to 5 dimensions" "$tmp/five" "damaged: /model/layers.1.attention.qkv.weight (shape [3, 4, 4, 4, 4]"
expect_error "tensor /model/layers.1.attention.qkv.weight has shape [3, 4, 4, 4, 4], the model wants [3, 16, 16]" "$MGT" "${R[@]}" --load "$tmp/five"
expect_error "tensor /model/layers.1.attention.qkv.weight has shape [3, 4, 4, 4, 4]" "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/five" --tensor-model-parallel-size 2 --input-ids "$tmp/ids.txt"
ckcopy "$GOOD" "$tmp/extra" && h5edit "$tmp/extra/iter_0000003.h5" "f['model/spare'] = np.zeros(4, np.float32)"
verify_damaged "an unknown tensor" "$tmp/extra" "damaged: /model/spare (not a tensor of the stored configuration)"

# ---- datasets: attributes that disagree with the data, a damaged sample-index cache ----
printf '{"text": "%s"}\n' "first document of the set" "a second one, longer than the first" "third" "and a fourth one here" > "$tmp/docs.jsonl"
for i in $(seq 1 40); do echo "{\"text\": \"line $i of some more text to train on, with words\"}"; done >> "$tmp/docs.jsonl"
"${T[@]}" "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/docs" --tokenizer-type ByteTokenizer --append-eod > /dev/null || fail "preprocess"
D0=(train --tokenizer-type ByteTokenizer --num-layers 1 --hidden-size 16 --num-attention-heads 2
  --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0)
D=("${D0[@]}" --data-path "$tmp/docs")
ndocs=$($PY -c "import h5py; print(h5py.File('$tmp/docs.h5')['document_offsets'].shape[0] - 1)")
for n in 2 $((ndocs / 2)); do
  cp "$tmp/docs.h5" "$tmp/nd$n.h5" && h5edit "$tmp/nd$n.h5" "f.attrs['n_documents'] = np.int64($n)"
  expect_error "document_offsets holds $((ndocs + 1)) entries, but the n_documents attribute says $n documents" "$MGT" "${D[@]/$tmp\/docs/$tmp/nd$n}"
done
cp "$tmp/docs.h5" "$tmp/badtok.h5" && h5edit "$tmp/badtok.h5" "t = f['tokens']; v = t[()]; v[::7] = 300; t[...] = v"
expect_error "--data-path $tmp/badtok.h5: token id 300 in sample" "$MPIEXEC" -n 2 "$MGT" "${D0[@]}" --data-path "$tmp/badtok"
# a vocabulary of 0 or 2^61 (a division by zero, a wrapped allocation), ids stored big-endian
# (read as the bytes lie), offsets whose extent is not stored (a file of kilobytes sizing GBs)
for v in 0 2305843009213693952; do
  cp "$tmp/docs.h5" "$tmp/v$v.h5" && h5edit "$tmp/v$v.h5" "f.attrs['vocab_size'] = np.int64($v); f.attrs['max_token_id'] = np.int64(min($v, 256) - 1) if $v == 0 else f.attrs['max_token_id']"
  expect_error "--data-path $tmp/v$v.h5: inconsistent attributes" "$MGT" "${D[@]/$tmp\/docs/$tmp/v$v}"
  expect_error "--data-path $tmp/v$v.h5: inconsistent attributes" "$MGT" dataset info "$tmp/v$v" --unigram
done
cp "$tmp/docs.h5" "$tmp/be.h5" && h5edit "$tmp/be.h5" "v = f['tokens'][()]; del f['tokens']; f.create_dataset('tokens', data=v.astype('>u2'))"
expect_error "tokens are stored big-endian" "$MGT" "${D[@]/$tmp\/docs/$tmp/be}"
cp "$tmp/docs.h5" "$tmp/sparse.h5" && h5edit "$tmp/sparse.h5" "n = 1 << 24; del f['document_offsets']; f.create_dataset('document_offsets', shape=(n,), dtype='<i8', chunks=(1 << 16,), compression='gzip'); f.attrs['n_documents'] = np.int64(n - 1)"
expect_error "document_offsets holds 16777216 elements but stores fewer" "$MGT" "${D[@]/$tmp\/docs/$tmp/sparse}"
# BERT: an id outside the vocabulary at a masked position is only in the labels (these seeds
# mask it in the first sample that holds it: before, it reached the model as a bad label)
$PY - "$tmp" <<'PY'
import json, random, sys
random.seed(3)
words = "the king queen of a and to my lord good sir thou art not in this is what we will be".split()
v = ["[PAD]"] + ["[unused%d]" % i for i in range(10)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + words
open(sys.argv[1] + "/bvocab.txt", "w").write("\n".join(v) + "\n")
with open(sys.argv[1] + "/bdocs.jsonl", "w") as f:
    for d in range(30):
        s = [" ".join(random.choice(words) for _ in range(random.randint(4, 9))).capitalize() + "."
             for _ in range(6)]
        f.write(json.dumps({"text": " ".join(s)}) + "\n")
PY
BT=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$tmp/bvocab.txt")
"${T[@]}" "$MGT" preprocess --input "$tmp/bdocs.jsonl" --output-prefix "$tmp/bbad" "${BT[@]}" --split-sentences > /dev/null || fail "BERT preprocess"
h5edit "$tmp/bbad.h5" "o = f['document_offsets'][()]; t = f['tokens'][()]; t[o[:-1] + 1] = 65000; f['tokens'][...] = t"
for seed in 16 23 30; do
  expect_error "--data-path $tmp/bbad.h5: token id 65000 in BERT sample" "$MGT" train --model bert --bert-no-binary-head --data-path "$tmp/bbad" "${BT[@]}" --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 32 --micro-batch-size 1 --global-batch-size 1 --train-iters 10 --eval-iters 0 --seed $seed
done
mkdir "$tmp/outdir.h5"
expect_error "--output-prefix $tmp/outdir: $tmp/outdir.h5 exists and is not a regular file" "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/outdir" --tokenizer-type ByteTokenizer
expect_error "--input $tmp/fifo.h5: not a regular file" "$MGT" preprocess --input "$tmp/fifo.h5" --output-prefix "$tmp/o" --tokenizer-type ByteTokenizer
cp "$tmp/docs.h5" "$tmp/nt.h5" && h5edit "$tmp/nt.h5" "f.attrs['n_tokens'] = np.int64(f.attrs['n_tokens'] + 1000)"
expect_error "but the n_tokens attribute says" "$MGT" "${D[@]/$tmp\/docs/$tmp/nt}"
"${T[@]}" "$MGT" "${D[@]}" > "$tmp/out" 2>&1 || { fail "training on the dataset"; cat "$tmp/out"; }
idx=$(ls "$tmp"/mgt-cache/docs.h5.index-* | head -1)
truncate -s $(($(stat -c %s "$idx") / 2)) "$idx"
"${T[@]}" "$MGT" "${D[@]}" > "$tmp/out" 2>&1 && grep -q "is damaged or incomplete: rebuilding it" "$tmp/out" &&
  [ "$(stat -c %s "$idx")" -gt 0 ] && echo "ok: a truncated sample-index cache is rebuilt" ||
  { fail "a truncated sample-index cache"; tail -3 "$tmp/out"; }
$PY - "$idx" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-3] ^= 0x40; open(sys.argv[1], "wb").write(b)
PY
"${T[@]}" "$MPIEXEC" -n 2 "$MGT" "${D[@]}" > "$tmp/out" 2>&1 && grep -q "is damaged or incomplete: rebuilding it" "$tmp/out" &&
  echo "ok: a sample-index cache with a flipped bit is rebuilt" || { fail "a flipped bit in the cache"; tail -3 "$tmp/out"; }

# hundreds of blended prefixes, every one checked
many=() && for i in $(seq 1 150); do many+=(1 "$tmp/docs"); done
"${T[@]}" "$MGT" "${D0[@]}" --data-path "${many[@]}" > "$tmp/out" 2>&1 &&
  echo "ok: 150 weighted prefixes in --data-path train" || { fail "150 prefixes"; tail -3 "$tmp/out"; }
many[129]=$tmp/typo
expect_error "--data-path $tmp/typo.h5: No such file" "$MGT" "${D0[@]}" --data-path "${many[@]}"
many[129]=$tmp/docs && many[128]=x1
expect_error "--data-path: value 129, 'x1', is not a positive weight" "$MGT" "${D0[@]}" --data-path "${many[@]}"
expect_error "--data-path: the weights sum beyond a double's range" "$MGT" "${D0[@]}" --data-path 1.5e308 "$tmp/docs" 1e308 "$tmp/docs"
expect_error "--split '1e308,1e308,1e308': the weights sum beyond a double's range" "$MGT" "${D[@]}" --split 1e308,1e308,1e308

# ---- output locations: checked before the first iteration; one job per --save directory ----
expect_error "--save /etc/passwd: not a directory" "$MGT" "${R[@]}" --save /etc/passwd
expect_error "--save /proc/none/ckpt: cannot create /proc/none" "$MGT" "${R[@]}" --save /proc/none/ckpt
"${T[@]}" "$MGT" "${R[@]}" --save "$tmp/new/parents/ckpt" > /dev/null 2>&1 && [ -f "$tmp/new/parents/ckpt/latest" ] &&
  [ ! -e "$tmp/new/parents/ckpt/mgt.lock" ] && echo "ok: --save creates missing parents; the lock is released" ||
  fail "--save with missing parents"
# the space reserved before a save (its size, 1/64 more and 1 MiB) is released when it is
# published: a checkpoint takes its own size on disk
f=$(ls "$tmp"/new/parents/ckpt/iter_*.h5 | head -1)
size=$(stat -c %s "$f") disk=$(($(stat -c '%b * %B' "$f")))
[ "$disk" -lt $((size + 262144)) ] && echo "ok: a checkpoint of $size bytes takes $disk on disk" ||
  fail "a checkpoint of $size bytes takes $disk on disk (the reservation kept)"
# a weight made NaN (or infinite) in the file: refused at load, naming the tensor, as mgt never
# saves one (a run skips its non-finite steps)
for v in nan inf; do
  rm -rf "$tmp/nanw" && cp -r "$tmp/new/parents/ckpt" "$tmp/nanw"
  $PY -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/final_layernorm.weight"]; a = d[()]; a[1] = float(sys.argv[2]); d[...] = a' "$(ls "$tmp"/nanw/iter_*.h5 | head -1)" $v
  expect_error "final_layernorm.weight holds $([ $v = nan ] && echo "a NaN" || echo "an infinity") (element 1" \
    "$MGT" "${R[@]}" --load "$tmp/nanw" --save "$tmp/nanw"
done
# a tensor rewritten as float64 (its values and checksum unchanged): refused at load, as mgt
# ckpt verify reports it, not converted
rm -rf "$tmp/f64" && cp -r "$tmp/new/parents/ckpt" "$tmp/f64"
$PY -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/final_layernorm.weight"]; a, attrs = d[()], dict(d.attrs)
    del f["model/final_layernorm.weight"]
    n = f.create_dataset("model/final_layernorm.weight", data=a.astype("float64"))
    for k, v in attrs.items(): n.attrs[k] = v' "$(ls "$tmp"/f64/iter_*.h5 | head -1)"
expect_error "tensor /model/final_layernorm.weight is not float32" "$MGT" "${R[@]}" --load "$tmp/f64" --save "$tmp/f64"
# finite weights whose logits overflow (a final norm of 3e38, its checksum as docs/checkpoint-format.md
# defines it): a NaN loss, which mgt eval's JSON line gives as null (it printed nan, no JSON)
rm -rf "$tmp/ovf" && cp -r "$tmp/new/parents/ckpt" "$tmp/ovf"
$PY - "$(ls "$tmp"/ovf/iter_*.h5 | head -1)" <<'PY'
import sys, h5py, numpy as np
M = (1 << 64) - 1
def fmix(k):
    k ^= k >> 33; k = (k * 0xff51afd7ed558ccd) & M; k ^= k >> 33
    k = (k * 0xc4ceb9fe1a85ec53) & M; return k ^ (k >> 33)
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/final_layernorm.weight"]
    a = np.full(d.shape, 3e38, dtype=np.float32)
    d[...] = a
    d.attrs["checksum"] = np.uint64(sum(fmix(fmix(i + 1) ^ int(b)) for i, b in enumerate(a.view(np.uint32).ravel())) & M)
PY
seq 1 40 > "$tmp/ovf_ids.txt"
"${T[@]}" "$MGT" eval --load "$tmp/ovf" --input-ids "$tmp/ovf_ids.txt" > "$tmp/out" 2>&1
$PY -c 'import json, sys
o = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
assert o["avg_loss"] is None and o["ppl"] is None and o["tokens"] == 39, o' "$tmp/out" &&
  echo "ok: a loss that overflowed is null in mgt eval's JSON" || { fail "a NaN eval loss"; tail -2 "$tmp/out"; }
SLURM_JOB_ID=777 "$MGT" "${R[@]}" --train-iters 100000000 --log-interval 10000000 --save "$tmp/shared" > "$tmp/first.log" 2>&1 &
first=$!
for _ in $(seq 1 400); do [ -f "$tmp/shared/mgt.lock" ] && break; sleep 0.05; done
expect_error "--save $tmp/shared is in use by another job (host $(hostname), pid $first" "$MGT" "${R[@]}" --save "$tmp/shared"
# the same Slurm job (a requeue's key) while its process lives on this host (two steps of one
# allocation): refused too
expect_error "--save $tmp/shared is in use by another job (host $(hostname), pid $first, Slurm job 777)" \
  env SLURM_JOB_ID=777 "$MGT" "${R[@]}" --save "$tmp/shared"
kill -TERM $first
wait $first
rc=$?
[ $rc = 75 ] && [ -f "$tmp/shared/latest" ] && [ ! -e "$tmp/shared/mgt.lock" ] &&
  echo "ok: the first job saved on SIGTERM (exit 75) and released its lock" ||
  { fail "the first job after SIGTERM: exit $rc"; tail -3 "$tmp/first.log"; }
# a signal while the run starts (here loading a 0.2 GB checkpoint): the run ends before its first
# step with 75 and nothing saved (the default action killed it, status 138); one in the last
# iteration (its final validation) leaves a finished run, exit 0 (was 75: a requeue for nothing)
S=(train --mock-data --num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 16
  --micro-batch-size 1 --global-batch-size 1 --eval-iters 0 --log-interval 1)
"${T[@]}" "$MGT" "${S[@]}" --train-iters 1 --save "$tmp/sig" > /dev/null 2>&1 || fail "the checkpoint to load"
MGT_PROGRESS_SECONDS=0.02 "$MGT" "${S[@]}" --train-iters 1000000 --load "$tmp/sig" --save "$tmp/sig" > "$tmp/sig.log" 2>&1 &
pid=$!
for _ in $(seq 1 400); do grep -q "checkpoint load" "$tmp/sig.log" && break; sleep 0.01; done
kill -USR1 $pid
wait $pid
rc=$?
[ $rc = 75 ] && grep -q "SIGUSR1 before the first step: exiting for a restart, nothing to save" "$tmp/sig.log" &&
  [ "$(cat "$tmp/sig/latest")" = 1 ] && echo "ok: a signal while loading ends the run before its first step (exit 75)" ||
  { fail "a signal while loading (exit $rc)"; tail -3 "$tmp/sig.log"; }
"$MGT" "${R[@]}" --train-iters 2 --log-interval 1 --eval-interval 1000 --eval-iters 20000 --save "$tmp/last" \
  > "$tmp/last.log" 2>&1 &
pid=$!
for _ in $(seq 1 400); do grep -q "iteration  *2/  *2 " "$tmp/last.log" && break; sleep 0.01; done
kill -USR1 $pid
wait $pid
rc=$?
[ $rc = 0 ] && [ "$(cat "$tmp/last/latest")" = 2 ] && ! grep -q "saving and exiting for a restart" "$tmp/last.log" &&
  echo "ok: a signal in the last iteration leaves a finished run (exit 0)" || { fail "a signal in the last iteration (exit $rc)"; tail -3 "$tmp/last.log"; }
rm -rf "$tmp/sig"
"$MGT" "${R[@]}" --train-iters 100000000 --log-interval 10000000 --save "$tmp/killed" > /dev/null 2>&1 &
victim=$!
for _ in $(seq 1 400); do [ -f "$tmp/killed/mgt.lock" ] && break; sleep 0.05; done
kill -KILL $victim
wait $victim 2> /dev/null
[ -f "$tmp/killed/mgt.lock" ] && "${T[@]}" "$MGT" "${R[@]}" --save "$tmp/killed" > "$tmp/out" 2>&1 &&
  echo "ok: the lock of a killed job is taken over" || { fail "a stale lock"; tail -3 "$tmp/out"; }
# a lock held on another host (which cannot be asked) is taken over by the same Slurm job only
# (its run before a requeue)
for held in "777 taken" "778 refused" "- refused"; do
  set -- $held
  mkdir -p "$tmp/req" && echo "elsewhere.example 4242 $1" > "$tmp/req/mgt.lock"
  SLURM_JOB_ID=777 "${T[@]}" "$MGT" "${R[@]}" --save "$tmp/req" > "$tmp/out" 2>&1
  rc=$?
  if [ $2 = taken ]; then
    [ $rc = 0 ] && [ ! -e "$tmp/req/mgt.lock" ] && echo "ok: a lock of Slurm job $1 on another host taken by job 777" ||
      { fail "the lock of job $1 elsewhere (exit $rc)"; tail -2 "$tmp/out"; }
  else
    [ $rc != 0 ] && grep -q -- "is in use by another job (host elsewhere.example, pid 4242, Slurm job $1)" "$tmp/out" &&
      echo "ok: a lock of Slurm job $1 on another host refused to job 777" ||
      { fail "the lock of job $1 elsewhere (exit $rc)"; tail -2 "$tmp/out"; }
  fi
  rm -rf "$tmp/req"
done

# ---- a run that goes non-finite: skipped, counted, and stopped with a checkpoint ----
# (a fixed loss scale of 1e30 overflows every fp16 gradient: a NaN in every step)
"${T[@]}" "$MGT" "${R[@]}" --train-iters 50 --fp16 --loss-scale 1e30 --max-skipped-iterations 3 \
  --save "$tmp/nan" --metrics-file "$tmp/nan.jsonl" > "$tmp/out" 2>&1
rc=$?
[ $rc = 3 ] && grep -q "stopping after iteration 3: 3 iterations in a row had a non-finite loss" "$tmp/out" &&
  [ "$(cat "$tmp/nan/latest")" = 3 ] && $PY - "$tmp/nan.jsonl" <<'PY' && echo "ok: a non-finite run is skipped, counted and stopped with a checkpoint (exit 3, diverged)" || { fail "a non-finite run (exit $rc)"; tail -3 "$tmp/out"; }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["nan_iterations"] for r in rows] == [1, 1, 1] and all(r["grad_norm"] is None for r in rows), rows
PY
# dynamic fp16 scaling skips its overflows without counting them
"${T[@]}" "$MGT" "${R[@]}" --train-iters 12 --fp16 --max-skipped-iterations 1 --metrics-file "$tmp/ovf.jsonl" > "$tmp/out" 2>&1 &&
  $PY - "$tmp/ovf.jsonl" <<'PY' && echo "ok: fp16 overflow skips are not counted as non-finite" || { fail "fp16 overflows"; tail -3 "$tmp/out"; }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert sum(r["skipped_iterations"] for r in rows) > 0 and sum(r["nan_iterations"] for r in rows) == 0, rows
PY

# ---- flags ----
expect_error "--metrics-file: missing value before --fp16 (write --metrics-file=VALUE" "$MGT" "${R[@]}" --metrics-file --fp16
expect_error "--hidden-size: expected an integer, got ' 64'" "$MGT" train --mock-data --hidden-size " 64"
(cd "$tmp" && "${T[@]}" "$MGT" "${R[@]}" --train-iters 1 --metrics-file=--odd-name.jsonl > /dev/null 2>&1) &&
  [ -f "$tmp/--odd-name.jsonl" ] && echo "ok: --flag=--value takes a value that starts with --" ||
  fail "--flag=--value"
"${T[@]}" "$MGT" generate --load "$tmp/good" --tokenizer-type ByteTokenizer --max-new-tokens 2 --seed 18000000000000000000 > "$tmp/out" 2>&1 &&
  echo "ok: generate takes a --seed near the top of its range" || { fail "generate --seed 1.8e19"; tail -2 "$tmp/out"; }
# duplicate JSON keys: the last wins, as in Python's json
echo '{"text": "first", "text": "zz"}' > "$tmp/dup.jsonl"
"${T[@]}" "$MGT" tokenize --tokenizer-type ByteTokenizer --input "$tmp/dup.jsonl" > "$tmp/out" 2>&1 &&
  [ "$(cat "$tmp/out")" = "122 122" ] && echo "ok: the last of duplicate JSON keys wins" ||
  { fail "duplicate JSON keys"; cat "$tmp/out"; }

# ==== round 3 (#24): the newest features ====
# ---- Hugging Face import of a BERT: architectures missing, empty or malformed ----
"${T[@]}" "$MGT" train --model bert --mock-data --tokenizer-type ByteTokenizer "${M0[@]}" --train-iters 1 \
  --save "$tmp/bck" > /dev/null 2>&1 || fail "BERT training"
"${T[@]}" "$MGT" train --model bert --mock-data --tokenizer-type ByteTokenizer "${M0[@]}" --train-iters 1 \
  --bert-no-binary-head --save "$tmp/bmlm" > /dev/null 2>&1 || fail "BERT (no binary head) training"
arch() { # dir, python editing config dict c
  $PY - "$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))
PY
}
for m in bck bmlm; do
  "${T[@]}" "$MGT" ckpt export --format hf --load "$tmp/$m" --output "$tmp/hf_$m" > /dev/null 2>&1 || fail "export $m"
  want=$($PY -c "import json; print(json.load(open('$tmp/hf_$m/config.json'))['architectures'][0])")
  for edit in "del c['architectures']" "c['architectures'] = []" "c['architectures'] = None"; do
    rm -rf "$tmp/hfa" "$tmp/hfa_imp" "$tmp/hfa_out" && cp -r "$tmp/hf_$m" "$tmp/hfa" && arch "$tmp/hfa" "$edit"
    "${T[@]}" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp" > "$tmp/out" 2>&1 &&
      "${T[@]}" "$MGT" ckpt export --format hf --load "$tmp/hfa_imp" --output "$tmp/hfa_out" >> "$tmp/out" 2>&1 &&
      cmp -s "$tmp/hf_$m/model.safetensors" "$tmp/hfa_out/model.safetensors" &&
      grep -q "\"$want\"" "$tmp/hfa_out/config.json" &&
      echo "ok: $m with $edit: the head ($want) read from the tensors, round trip bit for bit" ||
      { fail "$m import with $edit"; tail -3 "$tmp/out"; }
  done
done
for v in "[5]" '"BertForPreTraining"' "{}"; do
  rm -rf "$tmp/hfa" && cp -r "$tmp/hf_bck" "$tmp/hfa" && arch "$tmp/hfa" "c['architectures'] = json.loads('$v')"
  expect_error "architectures must be a list of class names" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
done
rm -rf "$tmp/hfa" && cp -r "$tmp/hf_bck" "$tmp/hfa" && arch "$tmp/hfa" "c['architectures'] = ['BertModel']"
expect_error "architecture BertModel is none of BERT's" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
# numbers and types of config.json, as the flags' ranges
"${T[@]}" "$MGT" ckpt export --format hf --load "$tmp/good" --output "$tmp/hf_gpt" > /dev/null 2>&1 || fail "GPT export"
for e in -1 0 1e308; do
  rm -rf "$tmp/hfa" && cp -r "$tmp/hf_gpt" "$tmp/hfa" && arch "$tmp/hfa" "c['layer_norm_epsilon'] = $e"
  expect_error "config.json: layer_norm_epsilon must be a number in [1e-12, 1]" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
  rm -rf "$tmp/hfa" && cp -r "$tmp/hf_bck" "$tmp/hfa" && arch "$tmp/hfa" "c['layer_norm_eps'] = $e"
  expect_error "config.json: layer_norm_eps must be a number in [1e-12, 1]" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
done
rm -rf "$tmp/hfa" && cp -r "$tmp/hf_gpt" "$tmp/hfa" && arch "$tmp/hfa" "c['model_type'] = 2"
expect_error "config.json: model_type must be a string" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
rm -rf "$tmp/hfa" && cp -r "$tmp/hf_gpt" "$tmp/hfa" && arch "$tmp/hfa" "c['n_embd'] = 1e10"
expect_error "config.json: n_embd must be an integer in [1, 1048576]" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
# safetensors whose tensors share bytes (the header edited)
rm -rf "$tmp/hfa" && cp -r "$tmp/hf_gpt" "$tmp/hfa" && $PY - "$tmp/hfa/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
a, c = h["transformer.h.0.ln_1.weight"], h["transformer.h.0.ln_1.bias"]
c["data_offsets"] = a["data_offsets"]  # the bias reads the weight's bytes; its own are a hole
t = json.dumps(h).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
expect_error "share bytes (data_offsets overlap)" "$MGT" ckpt import --format hf --input "$tmp/hfa" --save "$tmp/hfa_imp"
# a model of a thousand layers: 12,000 tensors imported, listed and verified (linear in the
# tensors: the JSON header and the model's names are hashed; HDF5 1.8 groups and attributes)
$PY "$TESTS/hf_tiny_gpt2.py" "$tmp/deep" 1000
"${T[@]}" "$MGT" ckpt import --format hf --input "$tmp/deep" --save "$tmp/deep_imp" > "$tmp/out" 2>&1 &&
  "${T[@]}" "$MGT" ckpt verify "$tmp/deep_imp" > "$tmp/out2" 2>&1 && grep -q "12004 tensors, 0 damaged" "$tmp/out2" &&
  $PY -c "
import h5py, numpy as np
f = h5py.File('$tmp/deep_imp/iter_0000000.h5', 'r')
n = 48 + 1000 * 244 + 8  # floats: embeddings, 244 a layer, the final LayerNorm
assert np.array_equal(f['model/final_layernorm.bias'][()], np.arange(n - 4, n, dtype=np.float32))" &&
  echo "ok: a GPT-2 of 1000 layers imported and verified" || { fail "1000 layers"; tail -2 "$tmp/out" "$tmp/out2"; }

# ---- FIFOs where files belong: refused or replaced, never waited on ----
"${T[@]}" "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/mm" --tokenizer-type ByteTokenizer \
  --append-eod --dataset-impl mmap > /dev/null 2>&1 || fail "preprocess --dataset-impl mmap"
mkdir -p "$tmp/ff" && cp "$tmp/mm_text_document.bin" "$tmp/ff/m.bin" && mkfifo "$tmp/ff/m.idx"
expect_error "--data-path $tmp/ff/m.idx: not a regular file" "$MGT" "${D0[@]}" --data-path "$tmp/ff/m"
rm "$tmp/ff/m.idx" "$tmp/ff/m.bin" && cp "$tmp/mm_text_document.idx" "$tmp/ff/m.idx" && mkfifo "$tmp/ff/m.bin"
expect_error "--data-path $tmp/ff/m.bin: not a regular file" "$MGT" "${D0[@]}" --data-path "$tmp/ff/m"
mkdir -p "$tmp/lockfifo" && mkfifo "$tmp/lockfifo/mgt.lock"
expect_error "--save $tmp/lockfifo: $tmp/lockfifo/mgt.lock is not a regular file" "$MGT" "${R[@]}" --save "$tmp/lockfifo"
[ -z "$(ls "$tmp/lockfifo" | grep -v '^mgt.lock$')" ] && echo "ok: the refused lock attempt leaves nothing behind" ||
  fail "left in $tmp/lockfifo: $(ls "$tmp/lockfifo")"
mkfifo "$tmp/metrics.fifo"
expect_error "--metrics-file $tmp/metrics.fifo: not a regular file" "$MGT" "${R[@]}" --metrics-file "$tmp/metrics.fifo"
mkdir -p "$tmp/stfifo" && cp "$tmp/hf_gpt/config.json" "$tmp/stfifo/" && mkfifo "$tmp/stfifo/model.safetensors"
expect_error "model.safetensors: not a readable safetensors file" "$MGT" ckpt import --format hf --input "$tmp/stfifo" --save "$tmp/hfa_imp"
# a cached sample index (a BERT samples mapping is cached by the same code) replaced by a FIFO
cp "$tmp/docs.h5" "$tmp/cf.h5"
"${T[@]}" "$MGT" "${D0[@]}" --data-path "$tmp/cf" > /dev/null 2>&1 || fail "training on cf"
idx=$(ls "$tmp"/mgt-cache/cf.h5.index-* | head -1) && rm "$idx" && mkfifo "$idx"
"${T[@]}" "$MGT" "${D0[@]}" --data-path "$tmp/cf" > "$tmp/out" 2>&1 && [ -f "$idx" ] &&
  grep -q "is damaged or incomplete: rebuilding it" "$tmp/out" && echo "ok: a FIFO in place of a cached index is rebuilt over" ||
  { fail "a FIFO as a cached index"; tail -3 "$tmp/out"; }

# ---- an index is checked before it is read: a large file that is not one costs no memory ----
truncate -s 1G "$tmp/ff/big.idx" && cp "$tmp/mm_text_document.bin" "$tmp/ff/big.bin"
/usr/bin/time -f "%M" -o "$tmp/rss" "${T[@]}" "$MGT" "${D0[@]}" --data-path "$tmp/ff/big" > "$tmp/out" 2>&1
grep -q "not a Megatron-LM MMIDIDX index (magic)" "$tmp/out" && [ "$(tail -1 "$tmp/rss")" -lt 400000 ] &&
  echo "ok: a 1 GiB file that is not an index refused at $(tail -1 "$tmp/rss") KB" ||
  { fail "a 1 GiB non-index ($(tail -1 "$tmp/rss") KB)"; tail -2 "$tmp/out"; }

# ---- mgt plot: finite but huge values are drawn at the edge, never as NaN ----
printf '{"iteration": 1, "loss": 1e308, "lr": 0.001}\n{"iteration": 2, "loss": -1e308, "lr": 1e308}\n{"iteration": 3, "loss": 2.5, "lr": 0.001}\n{"iteration": 1e308, "loss": 1.7e308}\n' > "$tmp/huge.jsonl"
"${T[@]}" "$MGT" plot "$tmp/huge.jsonl" --output "$tmp/huge.svg" > "$tmp/out" 2>&1 &&
  ! grep -q -i "nan\|inf" "$tmp/huge.svg" && rsvg-convert "$tmp/huge.svg" -o "$tmp/huge.png" &&
  echo "ok: losses of +-1e308 plotted without NaN" || { fail "plot of huge losses"; grep -i -m2 "nan" "$tmp/huge.svg"; }

# ---- fine-tuning: --epochs sets the iterations ----
expect_error "give --epochs without --train-iters" "$MGT" finetune --task MNLI --train-data "$tmp/none.tsv" \
  --epochs 1 --train-iters 2 --pretrained-checkpoint "$tmp/bck" --vocab-file "$tmp/none.txt"

# ---- temporary files of interrupted runs are removed at the next run, with a note ----
echo partial > "$tmp/mm_text_document.bin.tmp" && echo partial > "$tmp/docs.h5.tmp"
"${T[@]}" "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/mm" --tokenizer-type ByteTokenizer \
  --append-eod --dataset-impl mmap > "$tmp/out" 2>&1 && [ ! -e "$tmp/mm_text_document.bin.tmp" ] &&
  grep -q "note: removed $tmp/mm_text_document.bin.tmp" "$tmp/out" &&
  echo "ok: preprocess removes the .bin.tmp of an interrupted run" || { fail "a stale .bin.tmp"; cat "$tmp/out"; }
"${T[@]}" "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/docs" --tokenizer-type ByteTokenizer \
  --append-eod > "$tmp/out" 2>&1 && [ ! -e "$tmp/docs.h5.tmp" ] && grep -q "note: removed $tmp/docs.h5.tmp" "$tmp/out" &&
  echo "ok: preprocess removes the .h5.tmp of an interrupted run" || { fail "a stale .h5.tmp"; cat "$tmp/out"; }
old="$idx.tmp.999999999" young="$idx.tmp.999999998"
head -c 100000 /dev/zero > "$old" && touch -d '2 hours ago' "$old" && echo x > "$young"
"${T[@]}" "$MGT" "${D0[@]}" --data-path "$tmp/cf" > "$tmp/out" 2>&1 && [ ! -e "$old" ] && [ -e "$young" ] &&
  grep -q "note: removed $old" "$tmp/out" &&
  echo "ok: a sample index's temporary file of a dead process is removed, a fresh one kept" ||
  { fail "stale sample-index temporaries"; tail -3 "$tmp/out"; }
echo partial > "$tmp/good/iter_0000009.h5.tmp" && echo 9 > "$tmp/good/latest.tmp" &&
  echo "h 999999999 -" > "$tmp/good/mgt.lock.999999999" && touch -d '1 hour ago' "$tmp/good/mgt.lock.999999999"
"${T[@]}" "$MGT" "${R[@]}" --load "$tmp/good" --save "$tmp/good" > "$tmp/out" 2>&1 &&
  [ -z "$(ls "$tmp/good" | grep -e tmp -e 'lock\.')" ] && [ "$(grep -c "note: removed" "$tmp/out")" = 3 ] &&
  echo "ok: a save directory's leftovers (iter_N.h5.tmp, latest.tmp, a dead lock attempt) removed under the lock" ||
  { fail "leftovers in --save"; ls "$tmp/good"; tail -3 "$tmp/out"; }

# ---- refusals come before the configuration dump ----
"${T[@]}" "$MGT" "${D0[@]}" --data-path "$tmp/none" > "$tmp/out" 2> "$tmp/err"
[ $? = 2 ] && [ ! -s "$tmp/out" ] && echo "ok: a refused run prints one line and no configuration" ||
  { fail "a refusal after the configuration dump ($(wc -l < "$tmp/out") lines)"; head -3 "$tmp/out"; }

# ---- a checkpoint that points HDF5 at other files (a FIFO: reading it would block for ever),
# a checksum stored as an array (HDF5 would write all its elements into one integer), 'latest'
# with garbage after its number, an enum stored as "" where the key needs a value ----
BN=model/final_layernorm.bias
mkfifo "$tmp/other"
ckcopy "$GOOD" "$tmp/efl" && h5edit "$tmp/efl/iter_0000003.h5" "d = f['$BN']; c = d.attrs['checksum']; s = d.shape; del f['$BN']; n = f.create_dataset('$BN', shape=s, dtype='<f4', external=[('$tmp/other', 0, 4 * s[0])]); n.attrs['checksum'] = c"
expect_error "/$BN keeps its elements in other files (external storage" "$MGT" "${R[@]}" --load "$tmp/efl"
verify_damaged "external storage" "$tmp/efl" "damaged: /$BN (stored elsewhere"
verify_damaged "external storage, counted once" "$tmp/efl" "83 tensors, 1 damaged"
ckcopy "$GOOD" "$tmp/elink" && h5edit "$tmp/elink/iter_0000003.h5" "del f['$BN']; f['$BN'] = h5py.ExternalLink('$tmp/other', '/$BN')"
expect_error "/$BN is a link to another file or name" "$MGT" "${R[@]}" --load "$tmp/elink"
ckcopy "$GOOD" "$tmp/glink" && h5edit "$tmp/glink/iter_0000003.h5" "f.move('model', 'm2'); f['model'] = h5py.ExternalLink('$tmp/other', '/model')"
expect_error "/model is a link to another file or name" "$MGT" "${R[@]}" --load "$tmp/glink"
ckcopy "$GOOD" "$tmp/sumarr" && h5edit "$tmp/sumarr/iter_0000003.h5" "d = f['$BN']; c = int(d.attrs['checksum']); del d.attrs['checksum']; a = np.full(100000, 0x4141414141414141, dtype=np.uint64); a[0] = c; d.attrs.create('checksum', a)"
expect_error "tensor /$BN: attribute 'checksum' is not one integer" "$MGT" "${R[@]}" --load "$tmp/sumarr"
verify_damaged "an array checksum" "$tmp/sumarr" "damaged: /$BN (its checksum is not one integer)"
for junk in 3garbage 3.9e5 '3 4'; do
  ckcopy "$GOOD" "$tmp/lat" && printf '%s\n' "$junk" > "$tmp/lat/latest"
  expect_error "'latest' does not hold an iteration number alone" "$MGT" ckpt info "$tmp/lat"
  rm -rf "$tmp/lat"
done
cfgedit enum_empty "c['attention_backend'] = ''"
expect_error "configuration key attention_backend has an unknown value" "$MGT" eval --load "$tmp/enum_empty" --input-ids "$tmp/ids.txt"
cfgedit enum_unset "c['cpu_gemm'] = ''; c['distributed_backend'] = ''"
"${T[@]}" "$MGT" ckpt info "$tmp/enum_unset" > "$tmp/out" 2>&1 && echo "ok: an unset --cpu-gemm stored as \"\" loads" ||
  { fail "an unset enum stored as \"\""; tail -3 "$tmp/out"; }

echo "hostile: $fails failures"
[ $fails = 0 ]
