#!/usr/bin/env bash
# Chat preprocessing: conversations/s of mgt preprocess --chat-template (render, tokenize with
# the tokens' ends, loss mask, write) at 1 and 2 ranks, beside the same conversations' rendered
# text preprocessed as plain text (the cost of the chat path), with Llama 3's and Qwen 3's
# tokenizers; then how the conversations pack into samples of 512, 2048 and 4096 tokens
# (preprocess --seq-length: mgt train --sft's packing). The conversations are made from the
# paragraphs of WikiText-103's test and validation articles and of the books in
# ../shared/data/books: a user turn asking what comes next in the article or book, the
# assistant's the paragraph, one to three such exchanges each (answers of 10-800 tokens). Median
# of 3 runs; the time includes loading the tokenizer.
# Usage: bench/chat.sh [build-dir] [data-dir]
set -eu
BUILD=$(cd "${1:-build}" && pwd)
DATA=$(cd "${2:-$(dirname "$0")/../../shared/data}" && pwd)
H=$DATA/hf-tokenizers
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(getconf _NPROCESSORS_ONLN) cores"
python3 - "$DATA" "$tmp/conv.jsonl" "$tmp/text.jsonl" <<'PY'
import glob, json, os, random, re, sys
rng = random.Random(1)
paras, title = [], "the article"
for name in ("wiki.test.tokens", "wiki.valid.tokens"):
    for line in open(sys.argv[1] + "/wikitext103/" + name, encoding="utf-8"):
        line = line.strip()
        m = re.fullmatch(r"= ([^=].*) =", line)
        if m: title = m.group(1)
        elif line and not line.startswith("="): paras.append(("the article on " + title, line))
for book in sorted(glob.glob(sys.argv[1] + "/books/*.txt")):
    name = os.path.basename(book)[:-4].split("-", 1)[1].replace("-", " ")
    for p in open(book, encoding="utf-8").read().split("\n\n"):
        p = " ".join(p.split())
        if len(p) > 40: paras.append((name, p))
n = 0
with open(sys.argv[2], "w") as conv, open(sys.argv[3], "w") as text:
    i = 0
    while i < len(paras):
        k = rng.randint(1, 3)
        msgs = [{"role": "system", "content": "You answer questions about books and articles."}]
        for t, p in paras[i:i + k]:
            msgs += [{"role": "user", "content": "What comes next in %s?" % t},
                     {"role": "assistant", "content": p}]
        conv.write(json.dumps({"messages": msgs}) + "\n")
        text.write(json.dumps({"text": " ".join(m["content"] for m in msgs)}) + "\n")
        i += k; n += 1
print("%d conversations, %.1f MB of JSON lines" % (n, os.path.getsize(sys.argv[2]) / 1e6))
PY
N=$(wc -l < "$tmp/conv.jsonl")
# best N RANKS ARGS...: median wall seconds of 3 runs of mgt preprocess
median() {
  local n=$1
  shift
  for r in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    mpiexec --oversubscribe -n "$n" "$BUILD/mgt" preprocess "$@" --output-prefix "$tmp/out" > "$tmp/log" 2>&1 ||
      { cat "$tmp/log"; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
  done | sort -n | sed -n 2p
}
for tok in llama3 qwen3; do
  T=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$H/$tok")
  for n in 1 2; do
    c=$(median "$n" "${T[@]}" --input "$tmp/conv.jsonl" --chat-template auto)
    p=$(median "$n" "${T[@]}" --input "$tmp/text.jsonl")
    printf '%-7s %d rank(s): chat %6.2f s  %8.0f conversations/s | the same text, plain: %6.2f s  %8.0f/s\n' \
      "$tok" "$n" "$c" "$(echo "$N / $c" | bc -l)" "$p" "$(echo "$N / $p" | bc -l)"
  done
done
for seq in 511 2047 4095; do
  mpiexec --oversubscribe -n 2 "$BUILD/mgt" preprocess --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$H/llama3" --input "$tmp/conv.jsonl" --chat-template auto --seq-length "$seq" \
    --output-prefix "$tmp/out" 2>&1 | grep -E "packed|trained"
done
