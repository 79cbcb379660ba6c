#!/usr/bin/env bash
# Chat formats (include/mgt/chat.h) against Hugging Face's own rendering: 300 generated
# conversations per format (Llama 3 and Qwen 3 with the templates of their tokenizer_config.json
# in ../shared/data/hf-tokenizers; Llama 2's and Mistral's [INST] templates, kept in
# tests/data/chat-templates, on the [INST] tokenizer there) rendered by jinja2 as transformers
# sets it up; the text, and the loss mask against the template's own assistant spans
# (tests/chat_reference.py); the ids against Tokenizers.js live where tests/tokenizers-js has
# its node_modules, and always against the digests of its ids in tests/data/chat-ids.txt; and
# conversations the formats refuse, refused with one line.
# Usage: chat.sh MGT TESTS_DIR DATA_DIR [--record]
set -u
MGT=$(readlink -f "$1") TESTS=$2 DATA=$(readlink -f "$3")
. "$TESTS/lib.sh"
H=$DATA/hf-tokenizers
need_data "$H/llama3/tokenizer.json"
$PY -c "import jinja2" 2> /dev/null || { echo "no python3-jinja2 for $PY"; exit 1; }
REF=$TESTS/data/chat-ids.txt
JS=$TESTS/tokenizers-js
HF=(--tokenizer-type HuggingFaceTokenizer)
live=0
if command -v node > /dev/null && [ -d "$JS/node_modules/@huggingface/tokenizers" ]; then live=1; fi
[ "${4:-}" = --record ] && : > "$REF"

for f in llama3 qwen3 llama2 mistral; do
  case $f in
  llama3 | qwen3) cfg=$H/$f/tokenizer_config.json tok=$H/$f fmt=auto ;;
  *) cfg=$TESTS/data/chat-templates/$f.json tok=$H/llama2 fmt=$f ;;
  esac
  $PY "$TESTS/chat_reference.py" gen $f 300 1 "$tmp/$f.jsonl"
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tok" --chat-template $fmt --input "$tmp/$f.jsonl" \
    > "$tmp/$f.out" 2> "$tmp/$f.err" || { fail "mgt tokenize --chat-template $fmt ($f)"; cat "$tmp/$f.err"; continue; }
  $PY "$TESTS/chat_reference.py" check $f "$cfg" "$tok/tokenizer.json" "$tmp/$f.jsonl" "$tmp/$f.out" \
    "$tmp/$f.texts" || { fail "$f: differs from the template's rendering"; continue; }
  [ $live = 1 ] && { node "$JS/encode.mjs" "$tok" "$tmp/$f.texts" > "$tmp/$f.js" || fail "Tokenizers.js with $f"; }
  $PY -c 'import json, sys
for l in open(sys.argv[1]): print(" ".join(map(str, json.loads(l)["ids"])))' "$tmp/$f.out" > "$tmp/$f.ids"
  $PY "$TESTS/js_ids.py" $f "$tmp/$f.ids" "$tmp/$f.js" "$REF" "$tmp/$f.texts" ${4:-} ||
    fail "$f: ids differ from Tokenizers.js's"
done

# conversations the generator does not write, against the templates too: a NUL in Llama 2's
# system message (one text, byte for byte), tool_calls null and [] (no calls: the templates
# test them as false)
printf '%s\n' '{"messages": [{"role": "system", "content": "s\u0000t"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}' > "$tmp/odd_llama2.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "tool_calls": []}, {"role": "user", "content": "v"}, {"role": "assistant", "content": "b", "tool_calls": null}]}' > "$tmp/odd_qwen3.jsonl"
for f in llama2 qwen3; do
  case $f in
  qwen3) cfg=$H/$f/tokenizer_config.json tok=$H/$f fmt=auto ;;
  *) cfg=$TESTS/data/chat-templates/$f.json tok=$H/llama2 fmt=$f ;;
  esac
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tok" --chat-template $fmt --input "$tmp/odd_$f.jsonl" \
    > "$tmp/odd_$f.out" 2> "$tmp/odd.err" &&
    $PY "$TESTS/chat_reference.py" check $f "$cfg" "$tok/tokenizer.json" "$tmp/odd_$f.jsonl" "$tmp/odd_$f.out" \
      "$tmp/odd_$f.texts" || { fail "$f: odd conversations differ from the template's"; cat "$tmp/odd.err"; }
done
# OpenAI's content as a list of text parts: their texts joined by newlines (vLLM's reading)
printf '%s\n' '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b\u0000c"}]}]}' \
  '{"messages": [{"role": "user", "content": "a\nb\u0000c"}]}' > "$tmp/parts.jsonl"
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama3" --chat-template auto --input "$tmp/parts.jsonl" > "$tmp/parts.out" &&
  $PY -c 'import json, sys; a, b = [json.loads(l)["ids"] for l in open(sys.argv[1])]; assert a == b, (a, b)' "$tmp/parts.out" &&
  echo "ok: content as text parts: the ids of their texts joined by newlines" || fail "content parts"

# what the formats refuse
chat() { echo "$2" > "$tmp/one.jsonl"; "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama2" --chat-template "$1" --input "$tmp/one.jsonl"; }
U='{"role": "user", "content": "hi"}' A='{"role": "assistant", "content": "yo"}' S='{"role": "system", "content": "be"}'
expect "roles that alternate user/assistant" chat mistral "{\"messages\": [$U, $U]}"
expect "roles that alternate user/assistant" chat llama2 "{\"messages\": [$S, $A]}"
expect "the mistral chat format has no system role" chat mistral "{\"messages\": [$S, $U]}"
expect "the llama2 chat format has a system message only first" chat llama2 "{\"messages\": [$U, $A, $S]}"
expect "role \"tool\" is not system, user or assistant" chat chatml '{"messages": [{"role": "tool", "content": "1"}]}'
expect "tool_calls are not implemented" chat chatml '{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}]}'
expect "message 1: content part 1 is not {\"type\": \"text\"" chat chatml '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
expect "message 1 has no string \"content\"" chat llama3 '{"messages": [{"role": "user", "content": null}]}'
expect "\"messages\" is not a non-empty array" chat llama3 '{"messages": []}'
expect "no \"messages\" (a conversation) or \"segments\"" chat llama3 '{"text": "hi"}'
expect "segment 2: \"loss\" is not true or false" chat llama3 '{"segments": [{"text": "a"}, {"text": "b", "loss": 1}]}'
expect "reasoning_content is rendered by the chatml (Qwen 3) format only" chat llama3 '{"messages": [{"role": "assistant", "content": "", "reasoning_content": "x"}]}'
expect "--chat-template vicuna: not a chat format here" chat vicuna "{\"messages\": [$U]}"
mkdir -p "$tmp/other" && cp "$H/llama3/tokenizer.json" "$tmp/other/"
echo '{"chat_template": "{{ messages }}", "eos_token": "<|end_of_text|>"}' > "$tmp/other/tokenizer_config.json"
expect "is none of the formats here" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/other" --chat-template auto --input "$tmp/one.jsonl"
echo '{"eos_token": "<|end_of_text|>"}' > "$tmp/other/tokenizer_config.json"
expect "no chat_template (a string) to recognize" "$MGT" tokenize "${HF[@]}" --tokenizer-model "$tmp/other" --chat-template auto --input "$tmp/one.jsonl"
# the template-free form: the segments with "loss": true train (the prompt's ids, encoded alone,
# do not)
echo '{"segments": [{"text": "Question: 2+2?", "loss": false}, {"text": " Answer: 4", "loss": true}]}' > "$tmp/seg.jsonl"
echo '{"text": "Question: 2+2?"}' > "$tmp/prompt.jsonl"
"$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama3" --chat-template llama3 --input "$tmp/seg.jsonl" > "$tmp/seg.out" &&
  "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/llama3" --input "$tmp/prompt.jsonl" > "$tmp/prompt.ids" &&
  $PY - "$tmp/seg.out" "$tmp/prompt.ids" <<'PY' || fail "segments"
import json, sys
o = json.loads(open(sys.argv[1]).read())
k = len(open(sys.argv[2]).read().split())
assert o["text"] == "Question: 2+2? Answer: 4", o["text"]
assert k > 0 and o["loss_mask"] == [0] * k + [1] * (len(o["ids"]) - k), (o["ids"], o["loss_mask"], k)
print("ok: segments: %s trains %s" % (o["ids"], o["loss_mask"]))
PY

# the loss mask of text that NFC changes: an assistant's reply in NFD Korean trains the tokens its
# NFC twin trains (the same ids), no more; marks that compose across segments train the tokens
# they end up in; an empty trained segment trains nothing; a long run of starters that keep
# reordering with each other in linear time
$PY - "$tmp/nfd.jsonl" "$tmp/nfc.jsonl" <<'PY'
import json, sys, unicodedata
for path, form in zip(sys.argv[1:], ("NFD", "NFC")):
    t = unicodedata.normalize(form, "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8")
    m = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": t},
         {"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]
    s = [{"text": "e", "loss": False}, {"text": "\u0301\u0301\u0301", "loss": True}, {"text": "x", "loss": False}]
    e = [{"text": "hel", "loss": False}, {"text": "", "loss": True}, {"text": "lo world", "loss": False}]
    # Tibetan's vowel U+0F73, a starter whose marks reorder with the next one's: a long run
    t = [{"text": "x", "loss": False}, {"text": "\u0f73" * 60000, "loss": True}]
    objs = ({"messages": m}, {"segments": s}, {"segments": e}, {"segments": t})
    open(path, "w").write("".join(json.dumps(o) + "\n" for o in objs))
PY
for v in nfd nfc; do
  timeout 60 "$MGT" tokenize "${HF[@]}" --tokenizer-model "$H/qwen3" --chat-template chatml --input "$tmp/$v.jsonl" > "$tmp/$v.out" ||
    fail "tokenize $v"
done
$PY - "$tmp/nfd.out" "$tmp/nfc.out" <<'PY' || fail "the loss mask of NFD text"
import json, sys
(a, s, e, t), (b, _, _, _) = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
assert t["loss_mask"][-1] == 1 and len(t["ids"]) > 1000, len(t["ids"])  # in linear time
assert a["ids"] == b["ids"] and a["loss_mask"] == b["loss_mask"], (a, b)
assert s["loss_mask"] == [1] * (len(s["ids"]) - 1) + [0], s  # e+acute, acutes trained; x not
assert e["loss_mask"] == [0] * len(e["ids"]), e  # an empty trained segment: no byte, no token
print("ok: NFD text trains what its NFC twin trains: %s" % a["loss_mask"])
PY

[ $fails = 0 ] && echo "chat: all checks passed" || { echo "chat: $fails failures"; exit 1; }
