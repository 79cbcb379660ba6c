#!/usr/bin/env bash
# Hostile files, round 4 (issue #41): Hugging Face exports cut short, folders that hold more than
# a model, and crafted tokenizer.json files. Each must end in one error line naming what and why
# (exit 2), a note saying what is ignored, or the right ids: never a silent mix of two models,
# gigabytes for a tiny file, or a scan of every added token at every byte. Every command runs
# under a timeout. Usage: hostile_files.sh MGT TESTS_DIR
set -u
MGT=$(readlink -f "$1") TESTS=$2
. "$TESTS/lib.sh"
T=(timeout -k 5 60)

# ---- export: an export cut short is refused, a finished one leaves nothing of the last ----
M0=(--mock-data --tokenizer-type ByteTokenizer --num-layers 4 --hidden-size 32 --num-attention-heads 2
  --seq-length 8 --micro-batch-size 1 --train-iters 1 --eval-iters 0)
for s in 1 2; do
  "${T[@]}" "$MGT" train "${M0[@]}" --seed "$s" --save "$tmp/m$s" > "$tmp/log" 2>&1 || { fail "training $s"; tail -3 "$tmp/log"; }
done
EX=(ckpt export --format hf --max-shard-size 20000)
"${T[@]}" "$MGT" "${EX[@]}" --load "$tmp/m2" --output "$tmp/fresh2" > /dev/null 2>&1 || fail "export of model 2"
"${T[@]}" "$MGT" "${EX[@]}" --load "$tmp/m1" --output "$tmp/D" > "$tmp/out" 2>&1 || fail "export of model 1"
nf=$(ls "$tmp/D" | grep -c 'of-.*\.safetensors$')
[ "$nf" -ge 5 ] && echo "ok: model 1 exported as $nf shards" || fail "model 1 as $nf shards"
# model 2 into the same folder, failing at its third shard (a directory in the way of the file,
# as a full disk or a kill would stop it there): the first two shards are model 2's, the rest
# model 1's
mid=$(printf 'model-00003-of-%05d.safetensors.tmp' "$nf")
mkdir "$tmp/D/$mid"
"${T[@]}" "$MGT" "${EX[@]}" --load "$tmp/m2" --output "$tmp/D" > "$tmp/out" 2>&1 &&
  fail "the export with its third shard blocked succeeded"
[ ! -e "$tmp/D/config.json" ] && echo "ok: the export cut short left no config.json (transformers refuses the folder)" ||
  fail "the export cut short left a config.json"
expect_error "an export into this folder did not complete" "$MGT" ckpt import --format hf --input "$tmp/D" --save "$tmp/imp"
rmdir "$tmp/D/$mid"
"${T[@]}" "$MGT" "${EX[@]}" --load "$tmp/m2" --output "$tmp/D" > /dev/null 2>&1 || fail "the export again"
diff <(ls -A "$tmp/D") <(ls -A "$tmp/fresh2") > /dev/null && cmp -s "$tmp/D/model.safetensors.index.json" "$tmp/fresh2/model.safetensors.index.json" &&
  echo "ok: exported again, the folder holds what an export into an empty one does" ||
  { fail "after the export again"; diff <(ls -A "$tmp/D") <(ls -A "$tmp/fresh2") | head -5; }
# fewer, larger shards over more: no shard of the earlier export stays
"${T[@]}" "$MGT" ckpt export --format hf --max-shard-size 60000 --load "$tmp/m1" --output "$tmp/D" > /dev/null 2>&1 || fail "re-export"
"${T[@]}" "$MGT" ckpt export --format hf --max-shard-size 60000 --load "$tmp/m1" --output "$tmp/fresh1" > /dev/null 2>&1 || fail "export"
diff <(ls -A "$tmp/D") <(ls -A "$tmp/fresh1") > /dev/null &&
  echo "ok: a re-export in $(ls "$tmp/D" | grep -c 'of-') shards over $nf leaves none of the $nf" ||
  { fail "stale files after a re-export"; diff <(ls -A "$tmp/D") <(ls -A "$tmp/fresh1") | head -5; }
# one file over shards, and shards over one file
"${T[@]}" "$MGT" ckpt export --format hf --load "$tmp/m2" --output "$tmp/D" > /dev/null 2>&1 &&
  [ "$(ls -A "$tmp/D")" = "$(printf 'config.json\nmodel.safetensors')" ] &&
  echo "ok: one file over shards leaves config.json and model.safetensors alone" || { fail "one file over shards"; ls -A "$tmp/D"; }
"${T[@]}" "$MGT" "${EX[@]}" --load "$tmp/m2" --output "$tmp/D" > /dev/null 2>&1 && [ ! -e "$tmp/D/model.safetensors" ] &&
  echo "ok: shards over one file remove the file" || fail "shards over one file"

# ---- import says what it ignores ----
"${T[@]}" "$MGT" ckpt export --format hf --load "$tmp/m1" --output "$tmp/one1" > /dev/null 2>&1 || fail "export"
# model.safetensors beside an index: the single file is read, as transformers does
cp -r "$tmp/one1" "$tmp/both" && cp "$tmp/fresh2"/model-* "$tmp/fresh2/model.safetensors.index.json" "$tmp/both/"
"${T[@]}" "$MGT" ckpt import --format hf --input "$tmp/both" --save "$tmp/imp_both" > "$tmp/out" 2>&1 &&
  "${T[@]}" "$MGT" ckpt export --format hf --load "$tmp/imp_both" --output "$tmp/back" > /dev/null 2>&1 &&
  cmp -s "$tmp/back/model.safetensors" "$tmp/one1/model.safetensors" &&
  grep -q "model.safetensors is read, as transformers reads it; the index is ignored" "$tmp/out" &&
  echo "ok: with model.safetensors and an index, the single file is imported and the index named as ignored" ||
  { fail "model.safetensors beside an index"; cat "$tmp/out"; }
# tensors beyond the model (a fifth layer of a four-layer config) and another class
cp -r "$tmp/one1" "$tmp/extra"
$PY - "$tmp/extra" <<'PY'
import json, struct, sys
d = sys.argv[1]
b = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), b[8 + n:]
for name in ["transformer.h.4.ln_1.weight", "transformer.h.4.ln_1.bias", "score.weight"]:
    h[name] = {"dtype": "F32", "shape": [32], "data_offsets": [len(data), len(data) + 128]}
    data += b"\0" * 128
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + data)
c = json.load(open(d + "/config.json"))
c["architectures"] = ["GPT2ForSequenceClassification"]
json.dump(c, open(d + "/config.json", "w"))
PY
"${T[@]}" "$MGT" ckpt import --format hf --input "$tmp/extra" --save "$tmp/imp_extra" > "$tmp/out" 2>&1 &&
  grep -q "3 tensors of $tmp/extra are not part of the model and are not imported: transformer.h.4.ln_1.weight, transformer.h.4.ln_1.bias, score.weight" "$tmp/out" &&
  grep -q "architecture GPT2ForSequenceClassification is imported as GPT2LMHeadModel" "$tmp/out" &&
  echo "ok: a layer beyond num_hidden_layers and another head's tensors named as not imported" ||
  { fail "extra tensors"; cat "$tmp/out"; }
edit() { # dir, python editing config dict c
  $PY - "$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))
PY
}
cp -r "$tmp/one1" "$tmp/cfg"
edit "$tmp/cfg" "c['model_type'] = 'gpt2\0llama'"
expect_error "model_type must be a string: gpt2, llama" "$MGT" ckpt import --format hf --input "$tmp/cfg" --save "$tmp/imp"
edit "$tmp/cfg" "c['model_type'] = 'gpt2'; c['architectures'] = ['LlamaForCausalLM']"
expect_error "architecture LlamaForCausalLM is not a GPT2 class, as model_type gpt2 says" "$MGT" ckpt import --format hf --input "$tmp/cfg" --save "$tmp/imp"
edit "$tmp/cfg" "c['architectures'] = ['GPT2LMHeadModel\0Junk']"
expect_error "architectures must be a list of class names" "$MGT" ckpt import --format hf --input "$tmp/cfg" --save "$tmp/imp"
edit "$tmp/cfg" "c['architectures'] = ['GPT2LMHeadModel']; c['activation_function'] = 'gelu_new\0x'"
expect_error "activation_function must be \"gelu_new\"" "$MGT" ckpt import --format hf --input "$tmp/cfg" --save "$tmp/imp"

# ---- crafted tokenizer.json files ----
HF=(--tokenizer-type HuggingFaceTokenizer)
for k in big-id many-added nul-added backtrack hex u-escape word lookahead boundary; do $PY "$TESTS/hf_crafted_tokenizer.py" "$tmp/tok_$k" "$k"; done
printf '{"text": "hi"}\n' > "$tmp/hi.jsonl"
/usr/bin/time -f "%M" -o "$tmp/rss" "${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_big-id/tokenizer.json" \
  --input "$tmp/hi.jsonl" > "$tmp/out" 2> "$tmp/err"
grep -q "token id 134217728 is far beyond the 258 tokens the file has" "$tmp/err" && [ "$(tail -1 "$tmp/rss")" -lt 600000 ] &&
  echo "ok: a 4 KB tokenizer.json with an id of 2^27 refused at $(tail -1 "$tmp/rss") KB" ||
  { fail "an id of 2^27 ($(tail -1 "$tmp/rss") KB)"; cat "$tmp/err"; }
# 50,000 added tokens that all start with "a", over 200 KB of a's: a short walk of a trie at
# each byte, well within 10 s (a scan of every added token at every "a" takes minutes)
$PY - "$tmp/added.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"text": "xa12345y a7 " + "a" * 200000}) + "\n")
PY
timeout -k 5 10 "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_many-added/tokenizer.json" --input "$tmp/added.jsonl" > "$tmp/out" 2> "$tmp/err"
rc=$?
$PY - "$tmp/out" <<'PY' && [ $rc = 0 ] && echo "ok: 50,000 added tokens of one first byte over 200 KB of text: the longest at each byte, in time" || { fail "many added tokens (exit $rc)"; head -c 300 "$tmp/err"; }
import sys
ids = [int(x) for x in open(sys.argv[1]).read().split()]
want = [ord("x"), 257 + 12345, ord("y"), ord(" "), 257 + 7, ord(" ")] + [ord("a")] * 200000
assert ids == want, (ids[:10], len(ids))
PY
# an added token with a NUL inside is all of its bytes
$PY -c 'import json; print(json.dumps({"text": "xay xa\u0000by"}))' > "$tmp/nul.jsonl"
"${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_nul-added/tokenizer.json" --input "$tmp/nul.jsonl" > "$tmp/out" 2>&1
[ "$(cat "$tmp/out")" = "120 97 121 32 120 257 121" ] && echo "ok: an added token \"a\\0b\" matches a, NUL, b, and never a alone" ||
  fail "an added token with a NUL: $(cat "$tmp/out")"
# a regex that gives up on one line: that line named, and --skip-bad-lines skips it
$PY -c 'import json; print(json.dumps({"text": "ok then"})); print(json.dumps({"text": "a" * 40 + "cb"})); print(json.dumps({"text": "fine"}))' > "$tmp/bt.jsonl"
expect_error "bt.jsonl:2: $tmp/tok_backtrack/tokenizer.json: the pre-tokenizer's regex gives up on this text" \
  "$MGT" preprocess "${HF[@]}" --tokenizer-model "$tmp/tok_backtrack/tokenizer.json" --input "$tmp/bt.jsonl" --output-prefix "$tmp/bt"
"${T[@]}" "$MGT" preprocess "${HF[@]}" --tokenizer-model "$tmp/tok_backtrack/tokenizer.json" --input "$tmp/bt.jsonl" \
  --output-prefix "$tmp/bt" --skip-bad-lines > "$tmp/out" 2>&1 && grep -q "2 documents, 11 tokens (uint16), max id 116, 1 bad lines skipped" "$tmp/out" &&
  echo "ok: --skip-bad-lines skips the line the regex gives up on, and keeps the others" || { fail "--skip-bad-lines"; cat "$tmp/out"; }
expect_error "bt.jsonl:2: $tmp/tok_backtrack/tokenizer.json: the pre-tokenizer's regex gives up" \
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_backtrack/tokenizer.json" --input "$tmp/bt.jsonl"
# Oniguruma's \h is a hexadecimal digit (PCRE2's a horizontal space), its \uHHHH a code point:
# "cafe 12 zz" splits as cafe | " " | 12 | " zz", so the merge of " " and "z" applies
printf '{"text": "cafe 12 zz"}\n' > "$tmp/hex.jsonl"
"${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_hex/tokenizer.json" --input "$tmp/hex.jsonl" > "$tmp/out" 2>&1
[ "$(cat "$tmp/out")" = "99 97 102 101 32 49 50 257 122" ] && echo "ok: \\h+ splits hexadecimal digits, as Oniguruma" ||
  fail "\\h: $(cat "$tmp/out")"
printf '{"text": "xAAy"}\n' > "$tmp/u.jsonl"
"${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_u-escape/tokenizer.json" --input "$tmp/u.jsonl" > "$tmp/out" 2>&1
[ "$(cat "$tmp/out")" = "120 257 121" ] && echo "ok: \\u0041+ is A+, as Oniguruma" || fail "\\u0041: $(cat "$tmp/out")"
# Oniguruma's word characters hold marks (PCRE2 10.42's do not); an empty match splits the text
# (Hugging Face's Split); each through the merge it would allow or block (ids are bytes; the ids
# Tokenizers.js gives)
for c in "word|xe\u0301y|120 257 129 121" "lookahead|ab Cd|97 98 32 67 100" \
  "boundary|a\u0301 b|97 204 129 32 98"; do
  IFS='|' read -r k text want <<< "$c"
  printf '{"text": "%s"}\n' "$text" > "$tmp/$k.jsonl"
  "${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_$k/tokenizer.json" --input "$tmp/$k.jsonl" > "$tmp/out" 2>&1
  [ "$(cat "$tmp/out")" = "$want" ] && echo "ok: $k: $want" || fail "$k: $(cat "$tmp/out"), not $want"
done

# BPE files that Hugging Face and GPT-2's encoder.py read alike only when the merges are in
# training order: each read as its reference does (the Hugging Face ids are Tokenizers.js's)
for k in order dup-merge dup-vocab prefix-split split-after no-prefix unk; do
  $PY "$TESTS/hf_crafted_tokenizer.py" "$tmp/tok_$k" "$k"
done
long=abababababababababababababababababababab # 40 bytes: merged with the heap
printf '{"text": "abab"}\n{"text": "%s"}\n{"text": "abc"}\n' $long > "$tmp/bpe.jsonl"
for k in order dup-merge dup-vocab; do
  "${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_$k/tokenizer.json" --input "$tmp/bpe.jsonl" \
    2>&1 | tr '\n' '|' > "$tmp/$k.ids"
done
[ "$(cat "$tmp/order.ids")" = "258 98|$(printf '258 98 %.0s' {1..10} | sed 's/ $//')|257 99|" ] &&
  echo "ok: merges out of training order, one at a time (Hugging Face), short and long pieces" ||
  fail "merges out of training order: $(cat "$tmp/order.ids")"
[ "$(cut -d'|' -f3 "$tmp/dup-merge.ids")" = "97 258" ] && echo "ok: a merge listed twice takes its last rank" ||
  fail "a merge listed twice: $(cat "$tmp/dup-merge.ids")"
[ "$(cut -d'|' -f1 "$tmp/dup-vocab.ids")" = "258 258" ] && echo "ok: a vocabulary key listed twice is its last id" ||
  fail "a key listed twice: $(cat "$tmp/dup-vocab.ids")"
expect_error "ByteLevel with add_prefix_space after a Split" \
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_prefix-split/tokenizer.json" --input "$tmp/bpe.jsonl"
expect_error "a Split after ByteLevel" \
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_split-after/tokenizer.json" --input "$tmp/bpe.jsonl"
expect_error "a ByteLevel pre-tokenizer without add_prefix_space" \
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_no-prefix/tokenizer.json" --input "$tmp/bpe.jsonl"
# GPT-2's files with those merges: encoder.py's reading (every occurrence of a rank at once, the
# last rank of a pair listed twice), computed here by its algorithm
$PY - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:] + [256 + n for n in range(256 - len(bs))]
bs += [b for b in range(256) if b not in bs]
sp = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {sp[b]: b for b in range(256)}
vocab.update({"ab": 256, "aba": 257, "bc": 258, "<|endoftext|>": 259})
json.dump(vocab, open(d + "/g_vocab.json", "w"))
open(d + "/g_order.txt", "w").write("#version: 0.2\nab a\na b\nb c\n")
open(d + "/g_dup.txt", "w").write("#version: 0.2\na b\nb c\na b\n")
def bpe(word, ranks):  # encoder.py's loop
    word = tuple(word)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        first, second = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if (first, second) not in ranks:
            break
        new, i = [], 0
        while i < len(word):
            if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                new.append(first + second)
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = tuple(new)
    return " ".join(str(vocab[t]) for t in word)
for name in ("order", "dup"):
    lines = open(d + "/g_%s.txt" % name).read().split("\n")[1:-1]
    ranks = dict(zip([tuple(m.split()) for m in lines], range(len(lines))))
    with open(d + "/g_%s.want" % name, "w") as f:
        for t in ("abab", "ab" * 20, "abc"):
            f.write(bpe(t, ranks) + "\n")
PY
for k in order dup; do
  "${T[@]}" "$MGT" tokenize --vocab-file "$tmp/g_vocab.json" --merge-file "$tmp/g_$k.txt" --input "$tmp/bpe.jsonl" \
    > "$tmp/g_$k.ids" 2>&1
  cmp -s "$tmp/g_$k.ids" "$tmp/g_$k.want" && echo "ok: GPT-2's merges ($k) as encoder.py: $(tr '\n' '|' < "$tmp/g_$k.ids")" ||
    fail "GPT-2's merges ($k): $(tr '\n' '|' < "$tmp/g_$k.ids"), encoder.py $(tr '\n' '|' < "$tmp/g_$k.want")"
done
# where ids end after an <unk> that stands for three characters: the loss mask of the chat
# segment after it starts on its first token
printf '{"segments": [{"text": "\\u20ac\\u20ac\\u20acab"}, {"text": "cd", "loss": true}]}\n' > "$tmp/unk.jsonl"
"${T[@]}" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/tok_unk/tokenizer.json" --chat-template mistral \
  --input "$tmp/unk.jsonl" > "$tmp/out" 2>&1
$PY - "$tmp/out" <<'PY' && echo "ok: an <unk> of three characters ends where they do (the loss mask)" || fail "<unk> ends: $(cat "$tmp/out")"
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["ids"] == [0, 3, 4, 5, 6] and r["loss_mask"] == [0, 0, 0, 1, 1], r
PY

echo "hostile_files: $fails failures"
[ $fails = 0 ]
