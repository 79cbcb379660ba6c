#!/usr/bin/env bash
# BERT through every command, on a WordPiece sentence dataset of a book: the per-iteration
# masked-LM and sentence-order losses of layouts (tp, dp) = (1,1), (2,1), (4,1), (1,2), (2,2)
# with dropout and masking within 1e-5 of one rank, and (4,1), (2,2) with --sequence-parallel
# (pre- and post-LN); a run saved at tp=2, dp=2 and resumed at
# tp=1, dp=4 equal to the uninterrupted run; --bf16 near fp32; a damaged samples mapping
# rebuilt; an independent numpy BERT reading the Hugging Face export (pre-LN MegatronBert and
# post-LN BERT names, with and without the binary head) computing the losses megatron-c
# reported; import back bit for bit; the paper's job scripts planned with --dry-run; and the
# refusals of a dataset without sentences, a missing WordPiece vocabulary, GPT-only commands.
# Usage: bert.sh MGT MPIEXEC DATA_DIR (exit 77 without DATA_DIR)
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
V=$DATA/bert/bert-base-uncased-vocab.txt
[ -f "$V" ] || { echo "no $V: skipped"; exit 77; }
. "$(dirname "$0")/lib.sh"

# documents of ~40 paragraphs each, so that the split has documents to give to each part
book_dataset "$DATA/books/pg11-alices-adventures-in-wonderland.txt" 40 "$tmp/alice"

T=32
BERT="--model bert --data-path $tmp/alice --tokenizer-type BertWordPieceLowerCase --vocab-file $V
  --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length $T --max-position-embeddings 40
  --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-iters 0 --split 100,0,0
  --make-vocab-size-divisible-by 8"

# train NAME RANKS TP ARGS...: metrics in $tmp/NAME.jsonl
train() {
  local name=$1 n=$2 tp=$3
  shift 3
  rm -f "$tmp/$name.jsonl"
  "$MPIEXEC" -n "$n" "$MGT" train $BERT --tensor-model-parallel-size "$tp" \
    --metrics-file "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: mgt train exited $?"; tail -5 "$tmp/$name.log"; return 1; }
}

# same A B FIRST [TOL]: iterations FIRST.. of metrics A and B have lm and sop losses within TOL
# (default 1e-5)
same() {
  $PY - "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" "${4:-1e-5}" <<'PY'
import json, sys
a = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1])) if "lm_loss" in r}
b = {r["iteration"]: r for r in map(json.loads, open(sys.argv[2])) if "lm_loss" in r}
its = [i for i in sorted(b) if i >= int(sys.argv[3])]
assert its and all(i in a for i in its), "iterations %s missing" % its
worst = 0.0
for i in its:
    for k in ("lm_loss", "sop_loss"):
        worst = max(worst, abs(a[i][k] - b[i][k]) / max(1.0, abs(a[i][k])))
assert worst <= float(sys.argv[4]), "losses differ by %.3g" % worst
print("   iterations %d-%d: lm and sop losses within %.2g" % (its[0], its[-1], worst))
PY
}

train ref 1 1 --train-iters 6 || exit 1
for layout in "2 2" "4 4" "2 1" "4 2" "4 4 sp" "4 2 sp"; do
  set -- $layout
  name=n$1tp$2${3:-}
  train "$name" "$1" "$2" --train-iters 6 ${3:+--sequence-parallel} &&
    { same ref "$name" 1 && echo "ok: $1 ranks, tp $2${3:+ (sequence parallel)} == one rank" || fail "$1 ranks at tp $2 ${3:-}"; }
done
# post-LN blocks (the residual from the LayerNorm's output) under sequence parallelism
train refpost 1 1 --train-iters 6 --apply-residual-connection-post-layernorm &&
  train postsp 4 4 --train-iters 6 --apply-residual-connection-post-layernorm --sequence-parallel &&
  { same refpost postsp 1 && echo "ok: post-LN at tp 4 with --sequence-parallel == one rank" || fail "post-LN with --sequence-parallel"; }

# mixed precision: bf16 GEMM inputs at tp=2 within 2e-2 of fp32
train bf16 2 2 --train-iters 6 --bf16 && { same ref bf16 1 2e-2 && echo "ok: --bf16 at tp 2 within 2e-2 of fp32" || fail "--bf16"; }

# a damaged samples mapping is found, rebuilt, and gives the same samples
for f in "$tmp"/mgt-cache/alice.h5.bertmap-*; do truncate -s 100 "$f"; done
train rebuilt 1 1 --train-iters 6 && grep -q "damaged or incomplete: rebuilding" "$tmp/rebuilt.log" &&
  same ref rebuilt 1 >/dev/null && echo "ok: a truncated samples mapping is rebuilt, the same samples" ||
  fail "a damaged samples mapping"

# saved at tp=2, dp=2, resumed at tp=1, dp=4
train save 4 2 --train-iters 6 --exit-interval 3 --save "$tmp/ck" &&
  train resume 4 1 --train-iters 6 --load "$tmp/ck" --save "$tmp/ck2" &&
  { same ref resume 4 && echo "ok: saved at tp=2 dp=2, resumed at tp=1 dp=4 as uninterrupted" || fail "resume at another layout"; }

# numpy BERT on the export; import reads it back bit for bit
for variant in "pre" "post --apply-residual-connection-post-layernorm" "nobin --bert-no-binary-head"; do
  set -- $variant
  v=$1
  shift
  train "np_$v" 1 1 --train-iters 1 --lr 0 --hidden-dropout 0 --attention-dropout 0 --save "$tmp/np_$v" "$@" || continue
  "$MGT" ckpt export --format hf --load "$tmp/np_$v" --output "$tmp/hf_$v" >/dev/null 2>&1 || { fail "export ($v)"; continue; }
  $PY "$(dirname "$0")/bert_numpy.py" "$tmp/hf_$v" "$tmp/alice.h5" "$V" $T 8 1234 "$tmp/np_$v.jsonl" || fail "numpy BERT ($v)"
  "$MGT" ckpt import --format hf --input "$tmp/hf_$v" --save "$tmp/imp_$v" >/dev/null 2>&1 &&
    "$MGT" ckpt export --format hf --load "$tmp/imp_$v" --output "$tmp/hf2_$v" >/dev/null 2>&1 &&
    cmp -s "$tmp/hf_$v/model.safetensors" "$tmp/hf2_$v/model.safetensors" &&
    echo "ok: import ($v) reads the export back bit for bit" || fail "import of the export ($v)"
done
# bert-base-uncased's files name the LayerNorms' weights gamma and beta (TensorFlow's names)
mkdir -p "$tmp/hf_tf" && cp "$tmp/hf_post/config.json" "$tmp/hf_tf/" && $PY - "$tmp/hf_post/model.safetensors" "$tmp/hf_tf/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
ren = lambda k: k[:-len(".weight")] + ".gamma" if k.endswith("LayerNorm.weight") else (k[:-len(".bias")] + ".beta" if k.endswith("LayerNorm.bias") else k)
hdr = {ren(k): v for k, v in hdr.items()}
assert any(k.endswith(".gamma") for k in hdr)
t = json.dumps(hdr).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
PY
"$MGT" ckpt import --format hf --input "$tmp/hf_tf" --save "$tmp/imp_tf" >/dev/null 2>&1 &&
  "$MGT" ckpt export --format hf --load "$tmp/imp_tf" --output "$tmp/hf2_tf" >/dev/null 2>&1 &&
  cmp -s "$tmp/hf_post/model.safetensors" "$tmp/hf2_tf/model.safetensors" &&
  echo "ok: BERT's LayerNorms named gamma and beta import as weight and bias" || fail "gamma and beta"
grep -q '"MegatronBertForPreTraining"' "$tmp/hf_pre/config.json" &&
  grep -q '"BertForPreTraining"' "$tmp/hf_post/config.json" &&
  grep -q '"MegatronBertForMaskedLM"' "$tmp/hf_nobin/config.json" &&
  echo "ok: config.json names the Hugging Face classes" || fail "config.json architectures"

# the paper's BERT job scripts: their flags are accepted and plan the paper's sizes (a launcher
# that runs mgt train --dry-run on TP ranks instead of srun)
mkdir -p "$tmp/fakejobs"
printf '#!/usr/bin/env bash\nexec "%s" -n "$TP" "%s" train "$@" --tensor-model-parallel-size "$TP" --dry-run\n' \
  "$MPIEXEC" "$MGT" >"$tmp/fakejobs/launch.sh"
chmod +x "$tmp/fakejobs/launch.sh"
for job in bert-336m:1282 bert-1.3b-tp2:2461 bert-3.9b-tp4:3733; do
  name=${job%%:*} mib=${job##*:}
  MGT_JOBS=$tmp/fakejobs SLURM_JOB_NAME=$name SLURM_NNODES=1 SAVE_DIR=$tmp/none \
    bash "$(dirname "$0")/../jobs/$name.sbatch" >"$tmp/$name.log" 2>&1 &&
    grep -q "parameters  *$mib\." "$tmp/$name.log" && echo "ok: jobs/$name.sbatch plans $mib MiB of parameters per rank" ||
    { fail "jobs/$name.sbatch"; grep -E "error|parameters" "$tmp/$name.log" | head -3; }
done

# the memory plan counts the heads; GPT-only uses and a GPT dataset are refused in one line
"$MGT" train $BERT --dry-run >"$tmp/dry.log" 2>&1 && grep -q "parameters" "$tmp/dry.log" &&
  echo "ok: --dry-run plans a BERT" || fail "--dry-run"
"$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/nosent" \
  --tokenizer-type BertWordPieceLowerCase --vocab-file "$V" >/dev/null 2>&1
expect "not split into sentences" "$MGT" train $BERT --data-path "$tmp/nosent" --train-iters 1
expect "needs --tokenizer-type BertWordPieceLowerCase" "$MGT" train --model bert --data-path "$tmp/alice" --train-iters 1
echo "1 2 3" >"$tmp/ids.txt"
expect "holds a BERT" "$MGT" eval --load "$tmp/np_pre" --input-ids "$tmp/ids.txt"
expect "are BERT flags" "$MGT" train --mock-data --apply-residual-connection-post-layernorm --train-iters 1
echo "bert: $fails failures"
[ $fails = 0 ]
