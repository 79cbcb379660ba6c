#!/usr/bin/env bash
# A refactor changes no number: the same runs with two builds of mgt (the commit before the
# change, and the change) must give the same losses bit for bit (every metrics line but its
# timings) and the same checkpoints (every tensor of model and optimizer, bit for bit):
#   gpt-dropout-recompute  GPT with dropout and full recomputation, tp=2 dp=2
#   gpt-sp-distopt-flash   sequence parallelism, distributed optimizer (both overlaps) and
#                          flash attention, tp=2 dp=2, selective recomputation
#   gpt-bf16               bf16 at tp=2 (native GEMMs where the CPU has bf16 units), emulated bf16
#                          and fp16 with dynamic loss scaling at one rank
#   llama-gqa-swiglu       RMSNorm, SwiGLU, rotary positions, 2 key/value groups, no biases, an
#                          untied output layer, tp=2 dp=2; and in bf16 at tp=2, recomputed
#   moe-swiglu-ep          SwiGLU experts (top-2 of 4, a shared expert) at tp=2 dp=2 ep=2
#   moe-gelu-bf16          GeLU experts (top-1 of 8, capacity 1, experts without rows) in bf16 at
#                          dp=2, recomputed
#   bert-pre, bert-post    BERT pre-LN at tp=2 dp=2, post-LN (the original BERT) at tp=2
#   finetune               MNLI from the pre-LN BERT, tp=2
#   resume-format1/2       the stored format-1 checkpoint and a format-2 one written by the old
#                          build, each resumed by both builds for 3 more iterations
# Needs the same machine for both (BLAS and vector width decide the last bits).
# Usage: same_numbers.sh OLD_MGT NEW_MGT [DATA_DIR]   (DATA_DIR: ../shared/data, for the vocab)
set -u
OLD=$(readlink -f "$1") NEW=$(readlink -f "$2") DATA=$(readlink -f "${3:-$(dirname "$0")/../../shared/data}")
. "$(dirname "$0")/lib.sh"
TESTS=$(cd "$(dirname "$0")" && pwd)
V=$DATA/bert/bert-base-uncased-vocab.txt
G=(--num-layers 3 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
  --global-batch-size 8 --train-iters 6 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
  --eval-interval 3 --eval-iters 2 --mock-data --tokenizer-type ByteTokenizer --save-interval 6)
B=(--model bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --micro-batch-size 2 --global-batch-size 8 --train-iters 6 --lr 1e-3 --log-interval 1
  --eval-interval 3 --eval-iters 2 --mock-data --tokenizer-type ByteTokenizer --save-interval 6)

# run NAME NP ARGS...: both builds, each into $tmp/{old,new}/NAME (metrics m.jsonl, ckpt/)
run() {
  local name=$1 np=$2
  shift 2
  for side in old new; do
    local bin=$OLD
    [ $side = new ] && bin=$NEW
    mkdir -p "$tmp/$side/$name"
    (cd "$tmp/$side/$name" && timeout 600 "$MPIEXEC" -n "$np" "$bin" "$@" --metrics-file m.jsonl \
      --save ckpt > log 2>&1) || { fail "$name ($side build)"; tail -5 "$tmp/$side/$name/log"; return; }
  done
  compare "$name"
}

# compare NAME: metrics lines without timings, and every tensor of the newest checkpoint
compare() {
  $PY - "$tmp/old/$1" "$tmp/new/$1" "$1" <<'PY' || fail "$1 differs"
import glob, json, sys
import h5py, numpy as np
old, new, name = sys.argv[1:4]
drop = {"ms_per_iteration", "tokens_per_sec", "tflops", "tflops_per_rank", "seconds"}
def lines(d):
    return [{k: v for k, v in json.loads(l).items() if k not in drop} for l in open(d + "/m.jsonl")]
a, b = lines(old), lines(new)
assert len(a) == len(b) and len(a) > 0, "%d and %d metrics lines" % (len(a), len(b))
for x, y in zip(a, b):  # every value the old build wrote, the same (the new may write more)
    assert set(x) <= set(y), set(x) - set(y)
    y = {k: y[k] for k in x}
    assert json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True), (x, y)
fa, fb = sorted(glob.glob(old + "/ckpt/iter_*.h5")), sorted(glob.glob(new + "/ckpt/iter_*.h5"))
assert [f.split("/")[-1] for f in fa] == [f.split("/")[-1] for f in fb] and fa, (fa, fb)
n = 0
with h5py.File(fa[-1], "r") as p, h5py.File(fb[-1], "r") as q:
    names = []
    p.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
    qn = []
    q.visititems(lambda k, v: qn.append(k) if isinstance(v, h5py.Dataset) else None)
    assert sorted(names) == sorted(qn), set(names) ^ set(qn)
    for k in names:
        assert np.array_equal(p[k][()].view(np.uint32), q[k][()].view(np.uint32)), k
        n += 1
print("ok: %s: %d metrics lines and %d tensors bit for bit" % (name, len(a), n))
PY
}

MPIEXEC=${MPIEXEC:-mpiexec}
D=(--hidden-dropout 0.1 --attention-dropout 0.1)
run gpt-dropout-recompute 4 train "${G[@]}" "${D[@]}" --tensor-model-parallel-size 2 --recompute-activations
run gpt-sp-distopt-flash 4 train "${G[@]}" "${D[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-flash-attn \
  --recompute-granularity selective
run gpt-bf16 2 train "${G[@]}" "${D[@]}" --tensor-model-parallel-size 2 --bf16
run gpt-bf16-emulated 1 train "${G[@]}" "${D[@]}" --bf16 --cpu-gemm emulated
run gpt-fp16 1 train "${G[@]}" --fp16 --initial-loss-scale 65536
run llama-gqa-swiglu 4 train "${G[@]}" "${D[@]}" --tensor-model-parallel-size 2 --normalization RMSNorm \
  --swiglu --disable-bias-linear --position-embedding-type rope --group-query-attention \
  --num-query-groups 2 --untie-embeddings-and-output-weights
run llama-bf16 2 train "${G[@]}" "${D[@]}" --tensor-model-parallel-size 2 --normalization RMSNorm \
  --swiglu --disable-bias-linear --position-embedding-type rope --bf16 --recompute-activations
run moe-swiglu-ep 4 train "${G[@]}" "${D[@]}" --tensor-model-parallel-size 2 --normalization RMSNorm \
  --swiglu --disable-bias-linear --position-embedding-type rope --num-experts 4 --moe-router-topk 2 \
  --moe-ffn-hidden-size 24 --expert-model-parallel-size 2 --moe-aux-loss-coeff 0.01 \
  --moe-z-loss-coeff 0.001 --moe-shared-expert-intermediate-size 16
run moe-gelu-bf16 2 train "${G[@]}" "${D[@]}" --disable-bias-linear --num-experts 8 \
  --moe-router-topk 1 --moe-ffn-hidden-size 24 --moe-expert-capacity-factor 1 --bf16 \
  --recompute-activations
run bert-pre 4 train "${B[@]}" "${D[@]}" --tensor-model-parallel-size 2
run bert-post 2 train "${B[@]}" "${D[@]}" --tensor-model-parallel-size 2 \
  --apply-residual-connection-post-layernorm

if [ -f "$V" ]; then
  $PY - "$tmp/mnli.tsv" <<'PY'
import random, sys
r = random.Random(3)
w = "the a man woman dog cat house river tree city road book".split()
with open(sys.argv[1], "w") as f:
    f.write("index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label\n")
    for i in range(96):
        y = r.randrange(3)
        s = " ".join(r.choice(w) for _ in range(5))
        t = " ".join(r.choice(w) for _ in range(4)) + " " + ["never", "surely", "perhaps"][y]
        lab = ["contradiction", "entailment", "neutral"][y]
        f.write("%d\t%d\t%de\tfiction\t(\t(\t(\t(\t%s\t%s\t%s\t%s\n" % (i, i, i, s, t, lab, lab))
PY
  for side in old new; do # the pretrained model: a BERT with the uncased vocabulary
    bin=$OLD
    [ $side = new ] && bin=$NEW
    timeout 600 "$bin" train --model bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
      --seq-length 32 --micro-batch-size 4 --global-batch-size 4 --train-iters 2 --mock-data \
      --tokenizer-type BertWordPieceLowerCase --vocab-file "$V" --save "$tmp/$side/pre" > /dev/null 2>&1 ||
      fail "pretraining for finetune ($side)"
  done
  for side in old new; do
    bin=$OLD
    [ $side = new ] && bin=$NEW
    mkdir -p "$tmp/$side/finetune"
    (cd "$tmp/$side/finetune" && timeout 600 "$MPIEXEC" -n 2 "$bin" finetune --task MNLI \
      --pretrained-checkpoint "$tmp/$side/pre" --vocab-file "$V" --train-data "$tmp/mnli.tsv" \
      --valid-data "$tmp/mnli.tsv" --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
      --seq-length 32 --micro-batch-size 4 --global-batch-size 16 --epochs 2 --lr 1e-3 \
      --hidden-dropout 0.1 --tensor-model-parallel-size 2 --log-interval 1 --eval-interval 3 \
      --metrics-file m.jsonl --save ckpt > log 2>&1) || { fail "finetune ($side)"; grep -m3 error "$tmp/$side/finetune/log"; }
  done
  compare finetune
else
  fail "no $V: fine-tuning not compared"
fi

# resuming what the old build wrote: format 1 (stored with the tests) and format 2
F1=$TESTS/data/ckpt-format1
R=(--num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 2
  --global-batch-size 4 --log-interval 1 --eval-iters 0 --mock-data --train-iters 6)
for side in old new; do
  mkdir -p "$tmp/$side/resume-format1" && cp -r "$F1" "$tmp/$side/resume-format1/ckpt"
done
run resume-format1 2 train "${R[@]}" --load ckpt --tensor-model-parallel-size 2
for side in old new; do
  mkdir -p "$tmp/$side/resume-format2" && cp -r "$tmp/old/gpt-dropout-recompute/ckpt" "$tmp/$side/resume-format2/ckpt"
done
run resume-format2 4 train "${G[@]}" "${D[@]}" --train-iters 9 --load ckpt --tensor-model-parallel-size 4

echo "same_numbers: $fails failures"
[ $fails = 0 ]
