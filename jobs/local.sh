#!/usr/bin/env bash
# The local launcher: trains a small GPT on real text on this machine through mpiexec,
# without a scheduler. It tokenizes the text (mgt preprocess), then trains with tensor
# parallelism (mgt train), validating on held-out documents, saves an HDF5 checkpoint, and
# ends by sampling text from it (mgt generate), printing its validation perplexity and drawing
# its loss curves (mgt plot) beside the checkpoint, in WORK/loss.svg.
#
# Which text, in order:
#   DATA="a.txt b.jsonl ..."  your files (.jsonl/.json: one {"text": ...} per line; others: one
#                             document per file), with GPT-2 BPE when its vocabulary is found,
#                             else the byte tokenizer
#   ../shared/data            19 public-domain books and Tiny Shakespeare, GPT-2 BPE
#   /usr/share/games/fortunes the 14,700 English quotations of Debian's fortunes package
#                             (jobs/deps.sh installs it), one document each, byte tokenizer
#   otherwise                 the licence texts every Debian system has and this project's
#                             documentation, byte tokenizer
# It prints the unigram baseline (mgt dataset info --unigram): the validation perplexity of a
# model that knows only how often each token occurs; the trained model's must be well below it.
# Environment (all optional):
#   NP     ranks (default 2)            TP     tensor-parallel size (default: NP if it is 1, 2 or 4)
#   ITERS  training iterations (1500 on the quotations, about 2.5 minutes on 2 cores; else 200)
#   WORK   directory for the dataset (build/demo)
#   VOCAB_DIR  a directory with gpt2-vocab.json and gpt2-merges.txt
#   PROMPT the start of the generated sample ("The")
#   MGT    the mgt binary (default: build/mgt beside this script, else mgt on PATH)
# Extra arguments go to `mgt train` and override the flags below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
NP=${NP:-2}
case "$NP" in 1 | 2 | 4) TP=${TP:-$NP} ;; *) TP=${TP:-1} ;; esac
WORK=${WORK:-$root/build/demo}
MGT=${MGT:-$root/build/mgt}
[ -x "$MGT" ] || MGT=$(command -v mgt) || { echo "local.sh: no mgt binary (build first)" >&2; exit 2; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(($(nproc) / NP > 0 ? $(nproc) / NP : 1))}
run() { mpiexec -n "$NP" --oversubscribe --bind-to none "$MGT" "$@"; }
PROMPT=${PROMPT:-The}

shared=${SHARED:-$root/../shared/data}
FORTUNES=${FORTUNES:-/usr/share/games/fortunes}
quotes=false
# The quotations as JSON lines, one per quotation, in a fixed shuffled order: mgt train holds out
# the last documents for validation, which in file order would all be one topic. Backspace
# underlining and other control characters are dropped; the art files are pictures, not prose.
fortunes_jsonl() {
  local f list=()
  for f in "$FORTUNES"/*; do
    case "$f" in *.dat | *.u8 | */art | */ascii-art) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && list+=("$f")
  done
  for f in "${list[@]}"; do # a file's last quotation may lack its closing %
    LC_ALL=C sed 's/_\x08//g; s/[\x00-\x08\x0b-\x1f\x7f]//g' "$f"
    echo %
  done | LC_ALL=C awk '
    function flush() { if (doc != "") print "{\"text\": \"" doc "\"}"; doc = ""; n = 0 }
    /^%$/ { flush(); next }
    { line = $0; gsub(/\\/, "&&", line); gsub(/"/, "\\\"", line); gsub(/\t/, "\\t", line)
      doc = (n++ ? doc "\\n" : "") line }
    END { flush() }' | LC_ALL=C awk 'BEGIN { srand(1) } { printf "%.9f\t%s\n", rand(), $0 }' |
    LC_ALL=C sort -n | cut -f 2-
}
VOCAB_DIR=${VOCAB_DIR:-$shared/gpt2}
tok=(--tokenizer-type ByteTokenizer)
if [ -f "$VOCAB_DIR/gpt2-vocab.json" ] && [ -f "$VOCAB_DIR/gpt2-merges.txt" ]; then
  tok=(--vocab-file "$VOCAB_DIR/gpt2-vocab.json" --merge-file "$VOCAB_DIR/gpt2-merges.txt")
fi
if [ -n "${DATA:-}" ]; then
  read -r -a files <<< "$DATA"
  echo "local.sh: training on your files: ${files[*]}"
elif [ -d "$shared/books" ]; then
  files=("$shared"/books/*.txt "$shared/tinyshakespeare/input.txt")
  echo "local.sh: training on ${#files[@]} public-domain texts from $shared"
elif [ -f "$FORTUNES/literature" ]; then
  tok=(--tokenizer-type ByteTokenizer)
  mkdir -p "$WORK"
  fortunes_jsonl >"$WORK/fortunes.jsonl"
  files=("$WORK/fortunes.jsonl")
  quotes=true
  echo "local.sh: no ../shared/data: training on the $(wc -l <"$WORK/fortunes.jsonl") quotations of $FORTUNES, bytes"
else
  tok=(--tokenizer-type ByteTokenizer)
  files=()
  for f in /usr/share/common-licenses/* "$root"/README.md "$root"/docs/*.md; do
    [ -f "$f" ] && [ ! -L "$f" ] && files+=("$f")
  done
  echo "local.sh: no ../shared/data: training on ${#files[@]} licence and documentation texts, bytes"
fi
if $quotes; then # long enough for English words (about 2.5 minutes on 2 cores); sampled cooler, as bytes want
  ITERS=${ITERS:-1500}
  sample=(--max-new-tokens 120 --temperature 0.6 --top-k 10)
else
  ITERS=${ITERS:-200}
  sample=(--max-new-tokens 60 --top-k 40)
fi
mkdir -p "$WORK"
run preprocess --input "${files[@]}" --output-prefix "$WORK/text" "${tok[@]}" --append-eod
rm -f "$WORK"/text.h5.index-* # the sample index is rebuilt for the new file anyway
# what a model that ignores context scores on the validation documents
unigram=$("$MGT" dataset info "$WORK/text" --unigram --split 90,10,0 |
  sed -n 's/^unigram perplexity: \([0-9.]*\).*/\1/p')
metrics=$WORK/metrics.jsonl # a --metrics-file among the extra arguments wins
for a in "$@"; do
  [ "${want:-}" = 1 ] && metrics=$a
  want=0
  case "$a" in --metrics-file) want=1 ;; --metrics-file=*) metrics=${a#--metrics-file=} ;; esac
done
[ "$metrics" = "$WORK/metrics.jsonl" ] && rm -f "$metrics" # a fresh run, not appended to the last
run train --data-path "$WORK/text" "${tok[@]}" --split 90,10,0 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --micro-batch-size 8 --global-batch-size 16 --train-iters "$ITERS" \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 --lr-decay-style cosine \
  --eval-interval $((ITERS > 300 ? 250 : 100)) --eval-iters 10 --log-interval $((ITERS > 300 ? 100 : 25)) \
  --save "$WORK/ckpt" --tensor-model-parallel-size "$TP" --metrics-file "$WORK/metrics.jsonl" \
  "$@" | tee "$WORK/train.log"
# generation splits each layer over exactly the ranks it runs on: tp of them
# the sample whole, then generate's status line: mpiexec forwards a rank's standard output and
# error apart, so on a terminal the line would land inside the text
echo "local.sh: a sample from the trained model (mgt generate ${sample[*]}, tp=$TP):"
NP=$TP run generate --load "$WORK/ckpt" --prompt "$PROMPT" "${sample[@]}" \
  --seed 7 --tensor-model-parallel-size "$TP" > "$WORK/sample.txt" 2> "$WORK/generate.log" ||
  { cat "$WORK/generate.log" >&2; exit 1; }
cat "$WORK/sample.txt" "$WORK/generate.log"
ppl=$({ grep 'validation loss at iteration' "$WORK/train.log" || true; } | tail -n 1 | sed 's/.*lm loss PPL: *\([^ |]*\).*/\1/')
if [ -n "$ppl" ]; then
  ppl=$(LC_ALL=C printf '%.2f' "$ppl")
  [ -n "$unigram" ] && unigram=$(LC_ALL=C printf '%.2f' "$unigram")
  echo "local.sh: validation perplexity of the trained model: $ppl; unigram baseline ${unigram:-unknown} (a model that knows only how often each token occurs)"
else
  echo "local.sh: validation perplexity of the trained model: none (no validation split)"
fi
"$MGT" plot "$metrics" --output "$WORK/loss.svg" --title "jobs/local.sh: $ITERS iterations, tp=$TP"
echo "local.sh: loss and learning-rate curves: $WORK/loss.svg"
