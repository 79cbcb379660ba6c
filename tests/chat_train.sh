#!/usr/bin/env bash
# Chat fine-tuning data end to end (docs/chat.md): 400 generated conversations in Mistral's
# [INST] format on the [INST] tokenizer of ../shared/data/hf-tokenizers preprocessed with their
# loss masks, the same on 1 and 3 ranks and in Megatron-LM's .bin/.idx (tokens and mask); mgt
# train --sft on a small Llama: the same losses from both file formats (bit for bit), at tp=2,
# dp=2 and tp=2 x dp=2 with the distributed optimizer as on one rank (within 1e-5), the
# validation loss on held-out conversations falling, --train-on-prompt training more targets, a
# batch with no target skipping its update (no NaN, the weights kept); mistakes refused.
# Usage: chat_train.sh MGT MPIEXEC TESTS_DIR DATA_DIR
set -u
MGT=$(readlink -f "$1") MPIEXEC=$2 TESTS=$3 DATA=$(readlink -f "$4")
. "$TESTS/lib.sh"
H=$DATA/hf-tokenizers
need_data "$H/llama2/tokenizer.json"
TOK=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$H/llama2")
$PY "$TESTS/chat_reference.py" gen mistral 400 3 "$tmp/conv.jsonl"

# preprocess: 1 and 3 ranks, HDF5 and Megatron-LM's files, hold the same tokens and masks
"$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" --output-prefix "$tmp/c1" > "$tmp/pp.log" 2>&1 &&
  "$MPIEXEC" -n 3 "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" --output-prefix "$tmp/c3" > /dev/null 2>&1 &&
  "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" --output-prefix "$tmp/mm" --dataset-impl mmap > /dev/null 2>&1 ||
  { fail "preprocess"; cat "$tmp/pp.log"; exit 1; }
grep "conversations" "$tmp/pp.log"
"$MGT" dataset info "$tmp/c1" "$tmp/mm_messages_document" > "$tmp/info" 2>&1 &&
  [ "$(grep -c "^loss mask: " "$tmp/info")" = 2 ] && grep "loss mask" "$tmp/info" || { fail "mgt dataset info"; cat "$tmp/info"; }
# --seq-length: how they pack, against the same next fit over the file's document lengths
"$MPIEXEC" -n 2 "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" --output-prefix "$tmp/c2" \
  --seq-length 64 > "$tmp/pp2.log" 2>&1 || fail "preprocess --seq-length"
$PY - "$tmp/c1.h5" "$tmp/pp2.log" <<'PY' || fail "preprocess's packing report"
import re, sys, h5py, numpy as np
off = h5py.File(sys.argv[1])["document_offsets"][:]
samples, fill, placed, longer = 0, 65, 0, 0
for n in np.diff(off):
    if n == 0: continue
    longer += n > 65
    n = min(n, 65)
    if fill + n > 65: samples, fill = samples + 1, 0
    fill += n; placed += n
want = "%d samples, %.1f%% of the slots filled; %d documents longer" % (samples, 100.0 * placed / (samples * 65), longer)
log = open(sys.argv[2]).read()
assert want in log, (want, log)
print("ok: preprocess --seq-length 64: " + want)
PY
"$MGT" tokenize "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" > "$tmp/conv.out" || fail "tokenize"
$PY - "$tmp" <<'PY' || fail "the datasets differ"
import json, sys, h5py, numpy as np
t = sys.argv[1]
a, b = h5py.File(t + "/c1.h5"), h5py.File(t + "/c3.h5")
for k in ("tokens", "loss_mask", "document_offsets"):
    assert (a[k][:] == b[k][:]).all(), k + " differs between 1 and 3 ranks"
assert a.attrs["format"] == b"megatron-c tokens 2" and a.attrs["chat_template"] == b"mistral"
conv = [json.loads(l) for l in open(t + "/conv.out")]
assert (a["tokens"][:] == np.concatenate([c["ids"] for c in conv])).all(), "tokens are not mgt tokenize's"
assert (a["loss_mask"][:] == np.concatenate([c["loss_mask"] for c in conv])).all(), "masks are not mgt tokenize's"
assert a.attrs["n_trained"] == a["loss_mask"][:].sum()
tok = np.fromfile(t + "/mm_messages_document.bin", dtype=np.uint16)
mask = np.fromfile(t + "/mm_messages_document_loss_mask.bin", dtype=np.uint8)
assert (tok == a["tokens"][:]).all() and (mask == a["loss_mask"][:]).all(), "the .bin files differ"
print("ok: %d conversations, %d tokens, %d trained: the same from 1 and 3 ranks, in HDF5 and .bin/.idx"
      % (len(conv), len(tok), mask.sum()))
PY
# Megatron-LM's files of conversations: tokens never published without their loss mask (they
# would read as plain text and train on every token), nor a mask left without its tokens
for blocked in mf_messages_document_loss_mask.bin.tmp mf_messages_document.bin.tmp; do
  rm -rf "$tmp"/mf_* && mkdir "$tmp/$blocked"
  if "$MPIEXEC" -n 2 "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" \
    --output-prefix "$tmp/mf" --dataset-impl mmap > "$tmp/mf.log" 2>&1; then
    fail "preprocess with $blocked blocked succeeded"
  else
    left=$(cd "$tmp" && ls -d mf_* | grep -v "^$blocked\$")
    [ -z "$left" ] && echo "ok: $blocked blocked: $(grep -o 'cannot create[^;]*' "$tmp/mf.log" | head -1); nothing published" ||
      fail "$blocked blocked: left $left"
  fi
done

# an overwrite whose tokens fail leaves the earlier tokens beside a mask that does not fit them:
# refused when read, never trained on as plain text
rm -rf "$tmp"/mf_* &&
  "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" --output-prefix "$tmp/mf" \
    --dataset-impl mmap > /dev/null 2>&1 && mkdir "$tmp/mf_messages_document.bin.tmp" && head -50 "$tmp/conv.jsonl" > "$tmp/conv50.jsonl" &&
  ! "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv50.jsonl" --output-prefix "$tmp/mf" \
    --dataset-impl mmap > /dev/null 2>&1 || fail "the failed overwrite"
OVER=1

M=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 96 --seq-length 64
  --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear
  --untie-embeddings-and-output-weights --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --lr-warmup-iters 2 --log-interval 1 --split 90,10,0 --sft "${TOK[@]}")
# train NAME RANKS ARGS...: metrics in NAME.jsonl
train() {
  local name=$1 n=$2
  shift 2
  rm -f "$tmp/$name.jsonl"
  "$MPIEXEC" -n "$n" "$MGT" train "${M[@]}" --metrics-file "$tmp/$name.jsonl" "$@" > "$tmp/$name.log" 2>&1 ||
    { fail "train $name"; tail -5 "$tmp/$name.log"; return 1; }
}
# same A B TOL: per-iteration losses and validations of A and B within TOL
same() {
  $PY - "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" <<'PY'
import json, sys
def load(p):
    rows = list(map(json.loads, open(p)))
    return ({r["iteration"]: r["loss"] for r in rows if "consumed_samples" in r},
            {r["iteration"]: r["valid_loss"] for r in rows if "valid_loss" in r})
(a, av), (b, bv) = load(sys.argv[1]), load(sys.argv[2])
tol = float(sys.argv[3])
assert a and sorted(a) == sorted(b) and sorted(av) == sorted(bv), "iterations differ"
worst = max(abs(a[i] - b[i]) for i in a)
vworst = max([abs(av[i] - bv[i]) for i in av] + [0])
assert worst <= tol and vworst <= tol, "losses differ by %.3g, validations by %.3g" % (worst, vworst)
print("ok:   %d iterations, losses within %.2g, %d validations" % (len(a), worst, len(av)))
PY
}
V=(--eval-interval 10 --eval-iters 4)
train ref 1 --data-path "$tmp/c1" --train-iters 30 "${V[@]}" && {
  grep "data: --sft" "$tmp/ref.log"
  train mmap 1 --data-path "$tmp/mm_messages_document" --train-iters 30 "${V[@]}" &&
    { same ref mmap 0 || fail "--sft from .bin/.idx differs from HDF5"; }
  for layout in "2 2" "2 1" "4 2 --use-distributed-optimizer"; do
    set -- $layout
    n=$1 tp=$2
    shift 2
    echo "layout: $n ranks, tp=$tp $*"
    train "l$n$tp" "$n" --data-path "$tmp/c1" --train-iters 30 "${V[@]}" --tensor-model-parallel-size "$tp" "$@" &&
      { same ref "l$n$tp" 1e-5 || fail "--sft at $n ranks, tp=$tp $* differs from one rank"; }
  done
}

# Megatron-LM's --reset-position-ids and --reset-attention-mask (their scripts pass them) change
# nothing under --sft, whose documents' starts keep them apart, and say so: resetting at the
# end-of-document token (</s>, which ends every turn here) split each conversation
train resets 1 --data-path "$tmp/c1" --train-iters 30 "${V[@]}" --reset-position-ids --reset-attention-mask &&
  $PY - "$tmp/ref.jsonl" "$tmp/resets.jsonl" <<'PY' && grep -q "^mgt: note: --reset-position-ids, --reset-attention-mask: --sft keeps" "$tmp/resets.log" &&
import json, sys
a, b = ([(r.get("loss"), r.get("valid_loss")) for r in map(json.loads, open(p))] for p in sys.argv[1:3])
assert len(a) > 30 and a == b, (a[:3], b[:3])
PY
  echo "ok: --sft with --reset-position-ids --reset-attention-mask: noted, the same losses" ||
  { fail "--sft with the reset flags"; grep note "$tmp/resets.log"; }

# a --sft run saved at iteration 10 and resumed gives the uninterrupted run's losses bit for bit
train whole 1 --data-path "$tmp/c1" --train-iters 20 --eval-iters 0 &&
  train half 1 --data-path "$tmp/c1" --train-iters 20 --exit-interval 10 --save "$tmp/half" --eval-iters 0 &&
  train rest 1 --data-path "$tmp/c1" --train-iters 20 --load "$tmp/half" --eval-iters 0 &&
  $PY - "$tmp/whole.jsonl" "$tmp/half.jsonl" "$tmp/rest.jsonl" <<'PY' || fail "--sft resumed"
import json, sys
load = lambda p: {r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "consumed_samples" in r}
w, h, r = map(load, sys.argv[1:4])
assert sorted(h) == list(range(1, 11)) and sorted(r) == list(range(11, 21)), (sorted(h), sorted(r))
assert all(w[i] == {**h, **r}[i] for i in w), "resumed losses differ"
print("ok: --sft saved at iteration 10 and resumed: 20 losses bit for bit as uninterrupted")
PY

# held-out conversations: the validation loss falls
train long 1 --data-path "$tmp/c1" --train-iters 120 --eval-interval 20 --eval-iters 10 &&
  $PY - "$tmp/long.jsonl" <<'PY' || fail "the held-out loss does not fall"
import json, sys
v = [(r["iteration"], r["valid_loss"]) for r in map(json.loads, open(sys.argv[1])) if "valid_loss" in r]
assert len(v) >= 3 and v[-1][1] < 0.6 * v[0][1], v
print("ok: held-out loss %s" % " -> ".join("%.3f" % l for _, l in v))
PY

# --train-on-prompt: the prompts train too (more targets, another loss)
train prompt 1 --data-path "$tmp/c1" --train-iters 3 --train-on-prompt &&
  train masked 1 --data-path "$tmp/c1" --train-iters 3 &&
  $PY - "$tmp/prompt.jsonl" "$tmp/masked.jsonl" <<'PY' || fail "--train-on-prompt"
import json, sys
p, m = [[r["loss"] for r in map(json.loads, open(f)) if "consumed_samples" in r] for f in sys.argv[1:3]]
assert p[0] != m[0], (p, m)
print("ok: --train-on-prompt: first loss %.4f, masked %.4f" % (p[0], m[0]))
PY

# a global batch with no target (conversations without an assistant turn): no update, no NaN;
# the weights stay as a run at learning rate 0 leaves them (an update of AdamW's moments alone
# would move them by the weight decay)
$PY - "$tmp/users.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"messages": [{"role": "user", "content": "question %d, a few words long" % i}]}) + "\n")
PY
"$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/users.jsonl" --output-prefix "$tmp/users" > /dev/null 2>&1 || fail "preprocess users"
train none 1 --data-path "$tmp/users" --train-iters 3 --split 100,0,0 --eval-iters 0 --save "$tmp/none_ckpt" --save-interval 3 &&
  train none0 1 --data-path "$tmp/users" --train-iters 3 --split 100,0,0 --eval-iters 0 --save "$tmp/none0_ckpt" --save-interval 3 --lr 0 --min-lr 0 &&
  $PY - "$tmp/none.jsonl" "$tmp/none_ckpt" "$tmp/none0_ckpt" <<'PY' || fail "a batch with no target"
import glob, json, math, sys, h5py, numpy as np
rows = [r for r in map(json.loads, open(sys.argv[1])) if "consumed_samples" in r]
# skipped, as an overflowing fp16 step is (no loss to average: null), and no NaN anywhere
assert len(rows) == 3 and all(r["loss"] is None and r["skipped_iterations"] == 1 and
                              r["nan_iterations"] == 0 for r in rows), rows
def weights(d):
    f = h5py.File(sorted(glob.glob(d + "/iter_*.h5"))[-1])
    out = {}
    f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) and "model" in k else None)
    return out
a, b = weights(sys.argv[2]), weights(sys.argv[3])
assert a and a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), "the weights moved"
print("ok: 3 iterations without a target: loss 0, the %d model tensors as initialized" % len(a))
PY
grep -q "skipped iterations: 1 | nan iterations: 0" "$tmp/none.log" && echo "ok: skipped iterations logged, no NaN" ||
  { fail "no skipped iterations logged"; grep iteration "$tmp/none.log" | tail -2; }

# the fine-tuned model served: POST /v1/chat/completions renders the conversation as the chat
# format and answers as mgt generate does on that text, stopping at the end of the turn (a model
# fine-tuned to answer four questions with long answers, so that the answer is not empty)
$PY - "$tmp/qa.jsonl" <<'PY'
import json, sys
qa = [("Hello, what do you say?", "I say hello back to you, and a good day too, my dear friend."),
      ("Count to five.", "One, two, three, four, five."),
      ("Name a colour.", "Blue, like the sky over the sea."),
      ("Where is Paris?", "Paris is in France, on the Seine.")]
with open(sys.argv[1], "w") as f:
    for i in range(200):
        q, a = qa[i % 4]
        f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n")
PY
"$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/qa.jsonl" --output-prefix "$tmp/qa" > /dev/null 2>&1 || fail "preprocess qa"
train qa 1 --data-path "$tmp/qa" --train-iters 60 --split 100,0,0 --eval-iters 0 --save "$tmp/chat_ckpt"
MSG='[{"role": "user", "content": "Hello, what do you say?"}]'
echo "{\"messages\": $MSG}" > "$tmp/ask.jsonl"
"$MGT" tokenize "${TOK[@]}" --chat-template mistral --input "$tmp/ask.jsonl" > "$tmp/ask.out" &&
  $PY -c 'import json, sys; open(sys.argv[2], "w").write(json.load(open(sys.argv[1]))["text"])' "$tmp/ask.out" "$tmp/ask.txt" &&
  "$MGT" generate --load "$tmp/chat_ckpt" --prompt-file "$tmp/ask.txt" --greedy --max-new-tokens 30 > "$tmp/ask.gen" 2> /dev/null &&
  $PY - "$tmp/ask.txt" "$tmp/ask.gen" "$tmp/want.txt" <<'PY' || fail "generate on the rendered conversation"
import sys
prompt = open(sys.argv[1], encoding="utf-8").read()
out = open(sys.argv[2], encoding="utf-8").read()[:-1]
assert out.startswith(prompt) and len(out) > len(prompt), (out, prompt)
open(sys.argv[3], "w").write(out[len(prompt):])
print("ok: mgt generate --greedy answers %r" % out[len(prompt):])
PY
if serve_start "$tmp/serve.log" "$MGT" serve --port 0 --load "$tmp/chat_ckpt" --chat-template mistral; then
  grep "chat" "$tmp/serve.log"
  curl -sf "localhost:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\": $MSG, \"max_tokens\": 30, \"temperature\": 0}" > "$tmp/chat.json" &&
    curl -sfN "localhost:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
      -d "{\"messages\": $MSG, \"max_tokens\": 30, \"temperature\": 0, \"stream\": true}" > "$tmp/chat.sse" &&
    $PY - "$tmp/chat.json" "$tmp/chat.sse" "$tmp/want.txt" <<'PY' || fail "POST /v1/chat/completions"
import json, sys
r = json.load(open(sys.argv[1]))
want = open(sys.argv[3], encoding="utf-8").read()
c = r["choices"][0]
assert r["object"] == "chat.completion" and c["message"]["role"] == "assistant", r
assert c["message"]["content"] == want, (c["message"]["content"], want)
assert c["finish_reason"] == "stop", c  # at the format's end of turn, within max_tokens
events = [json.loads(l[6:]) for l in open(sys.argv[2]) if l.startswith("data: {")]
assert open(sys.argv[2]).read().rstrip().endswith("data: [DONE]")
assert events[0]["choices"][0]["delta"]["role"] == "assistant"
assert all(e["object"] == "chat.completion.chunk" for e in events)
text = "".join(e["choices"][0]["delta"]["content"] for e in events)
assert text == want and events[-1]["choices"][0]["finish_reason"] == c["finish_reason"], (text, want)
print("ok: /v1/chat/completions answers %r (%s) as mgt generate on the rendered conversation; "
      "streamed in %d chunks" % (want, c["finish_reason"], len(events)))
PY
  # without max_tokens the answer may fill the context (not 16 tokens, OpenAI's completions'
  # default): the same answer; a conversation that fills the context leaves no room
  curl -sf "localhost:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\": $MSG, \"temperature\": 0}" > "$tmp/chat_nocap.json" &&
    $PY - "$tmp/chat_nocap.json" "$tmp/want.txt" <<'PY' || fail "a chat completion without max_tokens"
import json, sys
r = json.load(open(sys.argv[1]))
c = r["choices"][0]
assert c["message"]["content"] == open(sys.argv[2], encoding="utf-8").read() and c["finish_reason"] == "stop", c
assert r["usage"]["completion_tokens"] > 16, r["usage"]
print("ok: without max_tokens: the same answer of %d tokens, to the end of its turn" % r["usage"]["completion_tokens"])
PY
  $PY -c 'import json; print(json.dumps({"messages": [{"role": "user", "content": "Hello " * 3000}]}))' > "$tmp/long.json"
  code=$(curl -s -o "$tmp/bad.json" -w '%{http_code}' "localhost:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d @"$tmp/long.json")
  [ "$code" = 400 ] && grep -q "exceeds the model's\|no room for an answer" "$tmp/bad.json" && echo "ok: 400: $(cut -c1-150 "$tmp/bad.json")" ||
    fail "a conversation longer than the context: $code $(cut -c1-200 "$tmp/bad.json")"
  for bad in '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}|roles that alternate' \
    '{"messages": []}|not a non-empty array' '{"prompt": "x"}|unknown field' '{"max_tokens": 3}|messages is required'; do
    code=$(curl -s -o "$tmp/bad.json" -w '%{http_code}' "localhost:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "${bad%|*}")
    [ "$code" = 400 ] && grep -q "${bad#*|}" "$tmp/bad.json" && echo "ok: 400: $(cat "$tmp/bad.json")" ||
      fail "${bad%|*}: $code $(cat "$tmp/bad.json")"
  done
  if command -v node > /dev/null && [ -d "$TESTS/openai-js/node_modules/openai" ]; then
    node "$TESTS/openai-js/chat.mjs" "$PORT" "$MSG" "$tmp/want.txt" 30 || fail "the openai chat client"
  else
    echo "the openai npm client is not installed in $TESTS/openai-js (npm ci there): not run"
  fi
  kill -TERM "$server" && wait "$server" || fail "serve did not stop on SIGTERM"
fi
# the workflow on an open checkpoint: the model in Hugging Face's format imported, fine-tuned
# with --sft (20 iterations at one rank, resumed for 10 at tp=2), exported, and imported back
# bit for bit; the held-out loss of the fine-tuning falls
"$MGT" ckpt export --format hf --load "$tmp/chat_ckpt" --output "$tmp/hf0" > /dev/null 2>&1 &&
  "$MGT" ckpt import --format hf --input "$tmp/hf0" --save "$tmp/base" > /dev/null 2>&1 || fail "export and import of the base"
train ft1 1 --data-path "$tmp/c1" --train-iters 20 --load "$tmp/base" --finetune --save "$tmp/ft" --eval-interval 10 --eval-iters 4 &&
  train ft2 2 --data-path "$tmp/c1" --train-iters 30 --load "$tmp/ft" --save "$tmp/ft" --eval-interval 10 --eval-iters 4 \
    --tensor-model-parallel-size 2 &&
  "$MGT" ckpt export --format hf --load "$tmp/ft" --output "$tmp/hf1" > /dev/null 2>&1 &&
  "$MGT" ckpt import --format hf --input "$tmp/hf1" --save "$tmp/back" > /dev/null 2>&1 &&
  $PY - "$tmp/ft" "$tmp/back" "$tmp/ft1.jsonl" "$tmp/ft2.jsonl" <<'PY' || fail "the fine-tuning workflow"
import glob, json, sys, h5py, numpy as np
def model(d):
    f = h5py.File(sorted(glob.glob(d + "/iter_*.h5"))[-1])
    return {k: f["model"][k][()] for k in f["model"]}
a, b = model(sys.argv[1]), model(sys.argv[2])
assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), "re-imported weights differ"
v = [r["valid_loss"] for f in sys.argv[3:5] for r in map(json.loads, open(f)) if "valid_loss" in r]
it = [r["iteration"] for r in map(json.loads, open(sys.argv[4])) if "consumed_samples" in r]
assert it and it[0] == 21 and it[-1] == 30, it
assert len(v) == 3 and v[-1] < v[0], v
print("ok: imported, fine-tuned (resumed at tp=2 from iteration %d), exported and re-imported: "
      "%d tensors bit for bit; held-out loss %s" % (it[0] - 1, len(a), " -> ".join("%.3f" % x for x in v)))
PY

# a server whose tokenizer names no chat format answers the chat endpoint 400, saying so
if serve_start "$tmp/serve2.log" "$MGT" serve --port 0 --load "$tmp/chat_ckpt"; then
  code=$(curl -s -o "$tmp/bad.json" -w '%{http_code}' "localhost:$PORT/v1/chat/completions" -d "{\"messages\": $MSG}")
  [ "$code" = 400 ] && grep -q "this server has no chat format" "$tmp/bad.json" && echo "ok: 400: $(cat "$tmp/bad.json")" ||
    fail "no chat format: $code $(cat "$tmp/bad.json")"
  kill -TERM "$server" && wait "$server" || fail "serve did not stop on SIGTERM"
fi

# a served ChatML model's answers end at <|im_end|>, whatever its tokenizer's eos_token (Qwen's
# base models name <|endoftext|>); the mistral one's at </s>
grep -q "as the mistral chat format, an answer ending at </s> (id 2)" "$tmp/serve.log" &&
  echo "ok: $(grep -o 'mistral chat format.*' "$tmp/serve.log")" || { fail "the mistral end of turn"; grep chat "$tmp/serve.log"; }
mkdir -p "$tmp/qbase" && cp "$H/qwen3/tokenizer.json" "$tmp/qbase/" &&
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); c["eos_token"] = "<|endoftext|>"; json.dump(c, open(sys.argv[2], "w"))' \
    "$H/qwen3/tokenizer_config.json" "$tmp/qbase/tokenizer_config.json" &&
  "$MGT" train --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$tmp/qbase" --train-iters 1 --eval-iters 0 \
    --save "$tmp/qckpt" > "$tmp/q.log" 2>&1 || { fail "a model of Qwen's base tokenizer"; tail -3 "$tmp/q.log"; }
if serve_start "$tmp/serve3.log" "$MGT" serve --port 0 --load "$tmp/qckpt"; then
  grep -q "as the chatml chat format, an answer ending at <|im_end|> (id 151645)" "$tmp/serve3.log" &&
    echo "ok: $(grep -o 'chatml chat format.*' "$tmp/serve3.log") with eos_token <|endoftext|>" ||
    { fail "ChatML's end of turn"; grep chat "$tmp/serve3.log"; }
  kill -TERM "$server" && wait "$server" || fail "serve did not stop on SIGTERM"
fi

# mistakes
[ "${OVER:-}" = 1 ] && expect "_loss_mask.idx is not a uint8 loss mask of the same sequences" \
  "$MGT" train "${M[@]}" --data-path "$tmp/mf_messages_document" --train-iters 4
expect "holds conversations with a loss mask: train them with --sft" "$MGT" train "${M[@]:0:${#M[@]}-5}" "${TOK[@]}" --data-path "$tmp/c1" --train-iters 4
expect "--sft-long-policy and --train-on-prompt are --sft's" "$MGT" train --mock-data --train-on-prompt --train-iters 1
expect "conversations are not split into sentences" "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/conv.jsonl" --output-prefix "$tmp/x" --split-sentences
expect "conversations come as JSON lines" "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$TESTS/lib.sh" --output-prefix "$tmp/x"
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}' > "$tmp/bad.jsonl"
expect "bad.jsonl:1: the mistral chat format needs roles that alternate" "$MGT" preprocess "${TOK[@]}" --chat-template mistral --input "$tmp/bad.jsonl" --output-prefix "$tmp/x"

[ $fails = 0 ] && echo "chat_train: all checks passed" || { echo "chat_train: $fails failures"; exit 1; }
