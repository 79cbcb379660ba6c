#!/usr/bin/env bash
# Hugging Face's tokenizer.json (--tokenizer-type HuggingFaceTokenizer --tokenizer-model): the
# ids of Llama 3's, Qwen 3's and Llama 2's tokenizers (../shared/data/hf-tokenizers) over books,
# WikiText-103 and generated Unicode (tests/hf_tokenizer_text.py) against Hugging Face's own
# Tokenizers.js: run live where tests/tokenizers-js has its node_modules (npm ci there), and
# always against the digests of its ids recorded in tests/data/hf-tokenizer-ids.txt (one per
# text: a changed id fails it, naming the text). Also: decoding gives the (NFC) text back; GPT-2's
# files written as a tokenizer.json give GPT2BPETokenizer's ids (the ByteLevel regex path);
# preprocess, train and eval with Llama 3's tokenizer; bad files refused with one line.
# Usage: hf_tokenizer.sh MGT MPIEXEC TESTS_DIR DATA_DIR [--record]
set -u
MGT=$(readlink -f "$1") MPIEXEC=$2 TESTS=$3 DATA=$(readlink -f "$4")
. "$TESTS/lib.sh"
H=$DATA/hf-tokenizers
need_data "$H/llama3/tokenizer.json"
REF=$TESTS/data/hf-tokenizer-ids.txt
JS=$TESTS/tokenizers-js
HF=(--tokenizer-type HuggingFaceTokenizer)

$PY "$TESTS/hf_tokenizer_text.py" "$DATA" "$tmp/texts.jsonl" 1 || { echo "no texts"; exit 1; }
live=0
if command -v node > /dev/null && [ -d "$JS/node_modules/@huggingface/tokenizers" ]; then live=1; fi
[ $live = 1 ] && echo "Tokenizers.js: $(node -p "require('$JS/node_modules/@huggingface/tokenizers/package.json').version") (live)" ||
  echo "Tokenizers.js not installed in $JS (npm ci there): comparing with its recorded ids"

[ "${5:-}" = --record ] && : > "$REF"
for n in llama3 qwen3 llama2; do
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/$n/tokenizer.json" --input "$tmp/texts.jsonl" \
    > "$tmp/$n.ids" 2> "$tmp/$n.err" || { fail "mgt tokenize with $n"; cat "$tmp/$n.err"; continue; }
  if [ $live = 1 ]; then
    node "$JS/encode.mjs" "$H/$n" "$tmp/texts.jsonl" > "$tmp/$n.js" || fail "Tokenizers.js with $n"
  fi
  $PY "$TESTS/js_ids.py" "$n" "$tmp/$n.ids" "$tmp/$n.js" "$REF" "$tmp/texts.jsonl" ${5:-} ||
    fail "$n: ids differ from Tokenizers.js's"
done
# --tokenizer-model may name the model's folder (its tokenizer.json and tokenizer_config.json)
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/qwen3" --input "$tmp/texts.jsonl" > "$tmp/dir.ids" &&
  cmp -s "$tmp/dir.ids" "$tmp/qwen3.ids" && echo "ok: --tokenizer-model of a folder reads its tokenizer.json" ||
  fail "--tokenizer-model of a folder"

# decoding gives the text back: byte-level exactly (Qwen 3: its NFC), Llama 2 with the "▁" its
# normalizer put before each piece of text between added tokens as a space
for n in llama3 qwen3; do
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/$n/tokenizer.json" --decode --input "$tmp/$n.ids" > "$tmp/$n.back" ||
    fail "decode with $n"
  $PY - "$n" "$tmp/texts.jsonl" "$tmp/$n.back" <<'PY' || fail "$n: decoding does not give the text back"
import json, sys, unicodedata
name = sys.argv[1]
texts = [json.loads(l)["text"] for l in open(sys.argv[2])]
back = [json.loads(l)["text"] for l in open(sys.argv[3])]
# invalid UTF-8 cannot come from JSON text; NFC is Qwen 3's normalizer
want = [unicodedata.normalize("NFC", t) if name == "qwen3" else t for t in texts]
bad = [i for i, (a, b) in enumerate(zip(want, back)) if a != b]
assert len(back) == len(want) and not bad, bad[:5]
print("ok: %s: %d texts decoded back" % (name, len(back)))
PY
done

# NFC (Qwen 3's normalizer) against Python's unicodedata: combining marks of many classes in any
# order, Hangul jamo, Tibetan vowels that decompose into marks; and a run of 100000 marks (the
# canonical ordering was quadratic in a run's length: minutes for such a line)
$PY - "$tmp/marks.jsonl" <<'PY'
import json, random, sys
r = random.Random(5)
cps = (0x300, 0x301, 0x316, 0x317, 0x327, 0x328, 0x334, 0x338, 0x345, 0x5B0, 0x5B4, 0x5BC, 0x5C1,
       0x93C, 0x94D, 0xF71, 0xF72, 0xF73, 0xF74, 0xF75, 0xF80, 0xF81, 0x1100, 0x1161, 0x11A8,
       0x3099, 0x309A, 0x304B, 0x915, 0xAC00, 0x212B, 0x1E0A, 0xC5)
pool = [chr(c) for c in cps] + list("aeouAEKkx ")
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"text": "".join(r.choice(pool) for _ in range(r.randint(1, 60)))}) + "\n")
    f.write(json.dumps({"text": "a" + "\u0301\u0316" * 50000 + " b"}) + "\n")
PY
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/qwen3" --input "$tmp/marks.jsonl" > "$tmp/marks.ids" &&
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/qwen3" --decode --input "$tmp/marks.ids" > "$tmp/marks.back" &&
  $PY - "$tmp/marks.jsonl" "$tmp/marks.back" <<'PY' || fail "NFC of combining marks differs from unicodedata's"
import json, sys, unicodedata
want = [unicodedata.normalize("NFC", json.loads(l)["text"]) for l in open(sys.argv[1])]
back = [json.loads(l)["text"] for l in open(sys.argv[2])]
bad = [i for i, (a, b) in enumerate(zip(want, back)) if a != b]
assert len(back) == len(want) and not bad, bad[:5]
print("ok: NFC of %d texts of combining marks as unicodedata's" % len(back))
PY

# Llama 2: each piece of text between added tokens comes back with the space its "▁" became
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama2/tokenizer.json" --decode --input "$tmp/llama2.ids" > "$tmp/llama2.back" ||
  fail "decode with llama2"
$PY - "$tmp/texts.jsonl" "$tmp/llama2.back" <<'EOPY' || fail "llama2: decoding does not give the text back"
import json, re, sys
texts = [json.loads(l)["text"] for l in open(sys.argv[1])]
back = [json.loads(l)["text"] for l in open(sys.argv[2])]
added = re.compile("(<unk>|<s>|</s>)")
# "▁" in the text itself decodes as a space too, as Hugging Face's decoder has it
want = ["".join(p if added.fullmatch(p) else " " + p.replace("\u2581", " ") for p in added.split(t) if p)
        for t in texts]
bad = [i for i, (a, b) in enumerate(zip(want, back)) if a != b]
assert len(back) == len(want) and not bad, (bad[:5], back[bad[0]][:80] if bad else "", want[bad[0]][:80] if bad else "")
print("ok: llama2: %d texts decoded back (byte fallback pieces as their bytes)" % len(back))
EOPY

# GPT-2's vocabulary and merges as a tokenizer.json (ByteLevel with its own regex) give what
# GPT2BPETokenizer gives
G=$DATA/gpt2
$PY - "$G/gpt2-vocab.json" "$G/gpt2-merges.txt" "$tmp/gpt2" <<'PY' || fail "writing GPT-2's tokenizer.json"
import json, os, sys
vocab = json.load(open(sys.argv[1], encoding="utf-8"))
merges = [l for l in open(sys.argv[2], encoding="utf-8").read().split("\n")[1:] if l]
os.makedirs(sys.argv[3], exist_ok=True)
t = {"version": "1.0", "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False,
     "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
     "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
     "trim_offsets": True, "use_regex": True}, "post_processor": None,
     "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "dropout": None, "unk_token": None,
     "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
     "byte_fallback": False, "vocab": vocab, "merges": merges}}
json.dump(t, open(sys.argv[3] + "/tokenizer.json", "w"))
json.dump({"eos_token": "<|endoftext|>"}, open(sys.argv[3] + "/tokenizer_config.json", "w"))
PY
# the texts without the end-of-text token, which GPT2BPETokenizer reads as text
$PY -c "
import json, sys
for l in open('$tmp/texts.jsonl'):
    print(json.dumps({'text': json.loads(l)['text'].replace('<|endoftext|>', '<|end|>')}))" > "$tmp/plain.jsonl"
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/gpt2/tokenizer.json" --input "$tmp/plain.jsonl" > "$tmp/gpt2.hf" || fail "tokenize with GPT-2's tokenizer.json"
"$MGT" tokenize --vocab-file "$G/gpt2-vocab.json" --merge-file "$G/gpt2-merges.txt" --input "$tmp/plain.jsonl" > "$tmp/gpt2.ids" || fail "GPT2BPETokenizer"
cmp -s "$tmp/gpt2.hf" "$tmp/gpt2.ids" && echo "ok: GPT-2's tokenizer.json gives GPT2BPETokenizer's ids" ||
  fail "GPT-2's tokenizer.json and GPT2BPETokenizer disagree"

# a dataset, training and evaluation with Llama 3's tokenizer
L3=$H/llama3/tokenizer.json
head -c 200000 "$DATA/books/pg11-alices-adventures-in-wonderland.txt" |
  $PY -c "import json, sys; [print(json.dumps({'text': p})) for p in sys.stdin.read().replace('\r\n', '\n').split('\n\n') if p.strip()]" > "$tmp/alice.jsonl"
"$MGT" preprocess "${HF[@]}" --tokenizer-model "$L3" --input "$tmp/alice.jsonl" --output-prefix "$tmp/alice" \
  --append-eod > "$tmp/pp.log" 2>&1 || { fail "preprocess with Llama 3's tokenizer"; cat "$tmp/pp.log"; }
$PY - "$tmp/alice.h5" "$tmp/alice.jsonl" "$tmp/llama3.ids" <<'PY' || fail "the dataset does not hold the tokenizer's ids"
import h5py, json, sys
with h5py.File(sys.argv[1], "r") as f:
    tokens = [int(x) for x in f["tokens"][()]]
assert tokens.count(128001) == sum(1 for _ in open(sys.argv[2])), "one <|end_of_text|> per document"
assert max(tokens) < 128256 and len(tokens) > 40000
print("ok: %d tokens, documents ended by <|end_of_text|> (128001)" % len(tokens))
PY
# Megatron-LM's format (mmap .bin/.idx) holds the same tokens as the HDF5 dataset
"$MGT" preprocess "${HF[@]}" --tokenizer-model "$L3" --input "$tmp/alice.jsonl" --output-prefix "$tmp/alicem" \
  --append-eod --dataset-impl mmap > "$tmp/ppm.log" 2>&1 || { fail "preprocess --dataset-impl mmap"; cat "$tmp/ppm.log"; }
$PY - "$tmp/alice.h5" "$tmp/alicem_text_document.bin" <<'EOPY' || fail "the mmap dataset's tokens differ from the HDF5 one's"
import sys
import h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    a = f["tokens"][()].astype(np.int64)
b = np.fromfile(sys.argv[2], dtype=np.int32).astype(np.int64)
assert np.array_equal(a, b), (len(a), len(b))
print("ok: Megatron-LM's .bin holds the same %d tokens" % len(b))
EOPY
T=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2
  --global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 2 --eval-interval 4 --eval-iters 1
  --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear)
# the model's folder, as Megatron-LM's recipes give --tokenizer-model (its tokenizer.json read)
"$MPIEXEC" -n 2 "$MGT" train "${T[@]}" "${HF[@]}" --tokenizer-model "$H/llama3" --data-path "$tmp/alice" \
  --tensor-model-parallel-size 2 --save "$tmp/ckpt" > "$tmp/train.log" 2>&1 ||
  { fail "training with Llama 3's tokenizer"; grep "error" "$tmp/train.log"; }
grep -q "validation loss" "$tmp/train.log" || fail "no validation loss"
expect "was tokenized with another vocabulary than --tokenizer-model" "$MGT" train "${T[@]}" "${HF[@]}" --tokenizer-model "$H/qwen3/tokenizer.json" --data-path "$tmp/alice"
printf 'Alice was beginning to get very tired of sitting by her sister on the bank.' > "$tmp/prompt.txt"
"$MGT" eval --load "$tmp/ckpt" --text "$tmp/prompt.txt" > "$tmp/eval.log" 2>&1 ||
  { fail "eval of a text with the checkpoint's tokenizer"; cat "$tmp/eval.log"; }

# the Llama exported with its tokenizer beside it (and its bos and eos ids in config.json); the
# import takes it as the checkpoint's tokenizer, and scores the text as the original does
"$MGT" ckpt export --format hf --load "$tmp/ckpt" --output "$tmp/hf" > /dev/null || fail "export with the tokenizer"
cmp -s "$tmp/hf/tokenizer.json" "$L3" && cmp -s "$tmp/hf/tokenizer_config.json" "$H/llama3/tokenizer_config.json" &&
  grep -q '"bos_token_id": 128000' "$tmp/hf/config.json" && grep -q '"eos_token_id": 128001' "$tmp/hf/config.json" &&
  echo "ok: the export holds Llama 3's tokenizer and its bos and eos ids" || fail "the export's tokenizer"
"$MGT" ckpt import --format hf --input "$tmp/hf" --save "$tmp/imported" > "$tmp/imp.log" 2>&1 ||
  { fail "import with the tokenizer"; cat "$tmp/imp.log"; }
"$MGT" eval --load "$tmp/imported" --text "$tmp/prompt.txt" > "$tmp/eval2.log" 2>&1 ||
  { fail "eval of the import with its tokenizer"; cat "$tmp/eval2.log"; }
$PY - "$tmp/eval.log" "$tmp/eval2.log" <<'PY' || fail "the import scores the text otherwise"
import json, sys
a, b = ([json.loads(l) for l in open(f) if l.startswith("{")][-1] for f in sys.argv[1:])
assert a["tokens"] == b["tokens"] > 10 and abs(a["avg_loss"] - b["avg_loss"]) <= 1e-6 * a["avg_loss"], (a, b)
print("ok: the imported checkpoint tokenizes and scores the text as the original (%d tokens)" % a["tokens"])
PY
"$MPIEXEC" -n 2 "$MGT" generate --load "$tmp/ckpt" --tensor-model-parallel-size 2 --prompt "Alice was" \
  --max-new-tokens 8 --top-k 1 > "$tmp/gen.log" 2>&1 || { fail "generate with the checkpoint's tokenizer"; cat "$tmp/gen.log"; }
grep -q "^Alice was" "$tmp/gen.log" || { fail "generate does not continue the prompt"; cat "$tmp/gen.log"; }

# Qwen 3's block trained on Qwen 3's tokenizer (its folder): exported as Qwen3ForCausalLM with
# the tokenizer beside it, imported back, the text scored as the original does
"$MGT" preprocess "${HF[@]}" --tokenizer-model "$H/qwen3" --input "$tmp/alice.jsonl" \
  --output-prefix "$tmp/aliceq" --append-eod > "$tmp/ppq.log" 2>&1 || { fail "preprocess with Qwen 3's tokenizer"; cat "$tmp/ppq.log"; }
"$MGT" train "${T[@]}" "${HF[@]}" --tokenizer-model "$H/qwen3" --data-path "$tmp/aliceq" \
  --qk-layernorm --kv-channels 16 --group-query-attention --num-query-groups 2 --save "$tmp/qckpt" \
  > "$tmp/trainq.log" 2>&1 || { fail "training Qwen 3 with its tokenizer"; grep error "$tmp/trainq.log"; }
"$MGT" ckpt export --format hf --load "$tmp/qckpt" --output "$tmp/qhf" > /dev/null || fail "export of the Qwen 3"
cmp -s "$tmp/qhf/tokenizer.json" "$H/qwen3/tokenizer.json" && grep -q '"Qwen3ForCausalLM"' "$tmp/qhf/config.json" &&
  echo "ok: the Qwen 3 export holds its tokenizer" || fail "the Qwen 3 export's tokenizer"
"$MGT" ckpt import --format hf --input "$tmp/qhf" --save "$tmp/qimp" > "$tmp/qimp.log" 2>&1 ||
  { fail "import of the Qwen 3"; cat "$tmp/qimp.log"; }
for c in qckpt qimp; do
  "$MGT" eval --load "$tmp/$c" --text "$tmp/prompt.txt" > "$tmp/$c.eval" 2>&1 || { fail "eval of $c"; cat "$tmp/$c.eval"; }
done
$PY - "$tmp/qckpt.eval" "$tmp/qimp.eval" <<'PY' || fail "the Qwen 3 import scores the text otherwise"
import json, sys
a, b = ([json.loads(l) for l in open(f) if l.startswith("{")][-1] for f in sys.argv[1:])
assert a["tokens"] == b["tokens"] > 10 and a["avg_loss"] == b["avg_loss"], (a, b)
print("ok: the Qwen 3 import tokenizes and scores the text as the original (%d tokens)" % a["tokens"])
PY

# WikiText-103 and LAMBADA (slices) with the checkpoint's own tokenizer: the word count is the
# text's, the targets Llama 3's tokens, every example scored
head -n 60 "$DATA/wikitext103/wiki.test.tokens" > "$tmp/wiki.txt"
head -n 20 "$DATA/lambada/lambada_test.jsonl" > "$tmp/lambada.jsonl"
"$MPIEXEC" -n 2 "$MGT" eval --task wikitext103 --load "$tmp/ckpt" --valid-data "$tmp/wiki.txt" \
  --tensor-model-parallel-size 2 > "$tmp/wt.log" 2>&1 || { fail "wikitext103 with Llama 3's tokenizer"; cat "$tmp/wt.log"; }
"$MPIEXEC" -n 2 "$MGT" eval --task lambada --load "$tmp/ckpt" --valid-data "$tmp/lambada.jsonl" \
  > "$tmp/la.log" 2>&1 || { fail "lambada with Llama 3's tokenizer"; cat "$tmp/la.log"; }
$PY - "$tmp/wiki.txt" "$tmp/wt.log" "$tmp/la.log" <<'EOPY' || fail "WikiText-103 and LAMBADA with Llama 3's tokenizer"
import json, sys
last = lambda f: json.loads([l for l in open(f).read().splitlines() if l.startswith("{")][-1])
raw = open(sys.argv[1], encoding="utf-8").read()
wt, la = last(sys.argv[2]), last(sys.argv[3])
assert wt["T_o"] == len(raw.strip().split(" ")) and wt["T_o"] // 2 < wt["T"] < 2 * wt["T_o"], wt
assert la["examples"] == 20 and 0 <= la["correct"] <= 20, la
print("ok: wikitext103 (T %d tokens of Llama 3, T_o %d words) and lambada (%d examples)" % (wt["T"], wt["T_o"], la["examples"]))
EOPY

# files it cannot read, and what it does not implement, refused with one line
mkdir -p "$tmp/bad"
cp "$H/llama3/tokenizer_config.json" "$tmp/bad/"
badtok() {
  $PY - "$H/llama3/tokenizer.json" "$tmp/bad/tokenizer.json" "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(t, open(sys.argv[2], "w"))
PY
}
enc() { "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/bad/tokenizer.json" --input "$tmp/alice.jsonl"; }
badtok "t['model']['type'] = 'WordPiece'"
expect "model WordPiece is not implemented" enc
badtok "t['normalizer'] = {'type': 'Lowercase'}"
expect "normalizer Lowercase is not implemented" enc
badtok "t['pre_tokenizer']['pretokenizers'][0]['pattern']['Regex'] = '(?<=a'"
expect "the pre-tokenizer's regex does not compile" enc
badtok "t['model']['merges'][5] = 'qq zz'"
expect "merge 5 is not of two vocabulary tokens into a third" enc
badtok "t['added_tokens'][0]['lstrip'] = True"
expect "added token <|begin_of_text|> is single_word, lstrip, rstrip or normalized" enc
echo '{"eos_token": "<|no such token|>"}' > "$tmp/bad/tokenizer_config.json"
badtok "pass"
expect "no eos_token of the vocabulary" enc
printf '{"model": ' > "$tmp/bad/tokenizer.json"
expect "not a tokenizer.json: malformed JSON at byte 10" enc
printf '[1]' > "$tmp/bad/tokenizer.json"
expect "not a tokenizer.json (a JSON object)" enc
expect "HuggingFaceTokenizer needs --tokenizer-model" "$MGT" tokenize "${HF[@]}" --input "$tmp/alice.jsonl"

# invalid UTF-8: one U+FFFD per maximal subpart (a lead byte and the continuation bytes that
# could follow it: Rust's from_utf8_lossy, TextDecoder), and a JSON lone surrogate one U+FFFD
# (Tokenizers.js): each text encodes as its replaced twin
$PY - "$tmp/bad.jsonl" "$tmp/good.jsonl" <<'PY'
import sys
bad = [b'a\xe2\x82b', b'ab\xe2\x82', b'\xf0\x9f\x98 x', b'\xed\xa0\x80y', b'\xc0\xafz', b'\xf4\x90\x80\x80!']
# (the bytes of an encoded surrogate are one U+FFFD, read as the JSON reader's "\\ud800")
good = ['a\ufffdb', 'ab\ufffd', '\ufffd x', '\ufffdy', '\ufffd\ufffdz', '\ufffd\ufffd\ufffd\ufffd!']
with open(sys.argv[1], "wb") as f:
    for b in bad:
        f.write(b'{"text": "' + b + b'"}\n')
    f.write(b'{"text": "q\\ud800r"}\n')
with open(sys.argv[2], "w") as f:
    for g in good + ['q\ufffdr']:
        f.write('{"text": "%s"}\n' % g.replace('\ufffd', '\\ufffd'))
PY
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama3" --input "$tmp/bad.jsonl" > "$tmp/bad.ids" 2>&1
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama3" --input "$tmp/good.jsonl" > "$tmp/good.ids" 2>&1
cmp -s "$tmp/bad.ids" "$tmp/good.ids" && echo "ok: invalid UTF-8 as one U+FFFD per maximal subpart, a lone surrogate as one" ||
  { fail "invalid UTF-8"; paste "$tmp/bad.ids" "$tmp/good.ids"; }
# --decode writes JSON whatever the ids (a token that is part of a character: U+FFFD), and its
# key escaped
echo 226 | "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama3" --decode --json-keys 'say "x"' > "$tmp/dec.jsonl" 2>&1
$PY -c 'import json, sys; r = json.loads(open(sys.argv[1], encoding="utf-8").read()); assert r == {"say \"x\"": "\ufffd"}, r' \
  "$tmp/dec.jsonl" && echo "ok: --decode of part of a character is JSON, U+FFFD" || fail "--decode JSON: $(cat "$tmp/dec.jsonl")"

[ $fails = 0 ] && echo "hf_tokenizer: all checks passed" || { echo "hf_tokenizer: $fails failures"; exit 1; }
