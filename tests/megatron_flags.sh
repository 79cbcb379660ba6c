#!/usr/bin/env bash
# Megatron-LM's command lines: the first run of its auto-resume idiom (--save X --load X) starts
# from scratch; its flags are answered all at once (renamed ones name their new name, missing
# features say so); the flags accepted though they change nothing here are noted, and change no
# number: the run with them gives the metrics of the run without, bit for bit.
# Usage: megatron_flags.sh MGT MPIEXEC
set -u
MGT=$1
MPIEXEC=${2:-mpiexec}
. "$(dirname "$0")/lib.sh"

G0=(--mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-interval 2
  --eval-iters 1)
G=("${G0[@]}" --train-iters 4)
# the metrics without their timings
numbers() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(sorted((k, v) for k, v in r.items() if not any(w in k for w in ("sec", "time", "flop", "ms_"))))
' "$1"; }

# ---- --save X --load X: the first run starts from scratch, the next resumes ----
"$MPIEXEC" -n 2 "$MGT" train "${G[@]}" --metrics-file "$tmp/plain.jsonl" > "$tmp/plain" 2>&1 ||
  fail "a plain run: $(tail -3 "$tmp/plain")"
"$MPIEXEC" -n 2 "$MGT" train "${G[@]}" --save "$tmp/auto" --load "$tmp/auto" \
  --metrics-file "$tmp/auto.jsonl" > "$tmp/out" 2>&1
if grep -q -F -- "--load $tmp/auto: no checkpoint there yet (no 'latest' file): starting from scratch" \
  "$tmp/out" && [ "$(numbers "$tmp/auto.jsonl")" = "$(numbers "$tmp/plain.jsonl")" ] &&
  [ -f "$tmp/auto/latest" ]; then
  echo "ok: --save X --load X on a new folder starts from scratch, says so, trains as without --load"
else
  fail "--save X --load X first run"; tail -5 "$tmp/out"
fi
"$MPIEXEC" -n 2 "$MGT" train "${G[@]}" --train-iters 6 --save "$tmp/auto" --load "$tmp/auto" \
  > "$tmp/out" 2>&1 && grep -q "loaded checkpoint $tmp/auto/iter_0000004.h5: iteration 4" "$tmp/out" &&
  grep -q "iteration        6/       6" "$tmp/out" &&
  echo "ok: the same command line resumes once a checkpoint is there" ||
  { fail "the second run of --save X --load X"; tail -5 "$tmp/out"; }
mkdir -p "$tmp/empty"
"$MGT" train "${G[@]}" --load "$tmp/empty" > "$tmp/out" 2>&1 &&
  grep -q "no checkpoint there yet" "$tmp/out" &&
  echo "ok: --load of an empty folder starts from scratch" || fail "--load of an empty folder"
expect_error "--finetune --load $tmp/empty: no checkpoint there to start from" \
  "$MGT" train "${G[@]}" --load "$tmp/empty" --finetune
expect_error "--load $tmp/nothing.h5: No such file or directory" \
  "$MGT" train "${G[@]}" --load "$tmp/nothing.h5"
expect_error "iter_0000003.h5: No such file or directory" \
  "$MGT" train "${G[@]}" --load "$tmp/empty" --ckpt-iteration 3

# ---- every refusal of a command line in one message, each with what to do ----
"$MGT" train --mock-data --batch-size 4 --checkpoint-activations --model-parallel-size 2 \
  --warmup 0.1 --pipeline-model-parallel-size 2 --context-parallel-size 2 --fp8-format hybrid \
  --rotary-percent 0.5 --data-impl lazy --foo-bar 3 --num-layer 3 --seq-length 1x \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
want=("mgt: error: 12 problems with the flags: "
  "--batch-size is no longer valid (Megatron-LM renamed it): write --micro-batch-size; "
  "--checkpoint-activations is no longer valid (Megatron-LM renamed it): write --recompute-activations"
  "--model-parallel-size is no longer valid (Megatron-LM renamed it): write --tensor-model-parallel-size; "
  "--warmup is no longer valid (Megatron-LM renamed it): write --lr-warmup-fraction; "
  "--pipeline-model-parallel-size 2: mgt has no pipeline parallelism"
  "--context-parallel-size 2: mgt has no context parallelism"
  "--fp8-format: mgt has no FP8 training: train in --bf16; "
  "--rotary-percent 0.5: rotary positions on part of each head are not implemented"
  "--data-impl lazy: mgt reads Megatron-LM's mmap .bin/.idx format"
  "unknown flag '--foo-bar' (see mgt train --help); "
  "unknown flag '--num-layer' (did you mean --num-layers?); "
  "--seq-length: expected an integer, got '1x'")
ok=1
for w in "${want[@]}"; do grep -q -F -- "$w" "$tmp/err" || { ok=0; echo "  missing: $w"; }; done
if [ $rc = 2 ] && [ "$ok" = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ]; then
  echo "ok: 12 refusals in one line, renamed flags naming their new names"
else
  fail "the refusals of one command line (exit $rc)"; cat "$tmp/err"
fi

# ---- accepted: at the values mgt implements, and those that change nothing (noted) ----
M=(--use-mcore-models --num-workers 2 --no-mmap-bin-files --no-create-attention-mask-in-dataloader
  --log-throughput --manual-gc --empty-unused-memory-level 1 --cross-entropy-loss-fusion
  --no-masked-softmax-fusion --transformer-impl local --profile --profile-step-start 1
  --profile-step-end 2 --ckpt-format torch_dist --pipeline-model-parallel-size 1
  --context-parallel-size 1 --rotary-percent 1.0 --data-impl mmap --kv-channels 8
  --distributed-backend nccl --split "'99,1,0'")
"$MPIEXEC" -n 2 "$MGT" train "${G[@]}" --attention-backend flash --metrics-file "$tmp/a.jsonl" \
  > "$tmp/out" 2>&1 || fail "the run without Megatron's flags"
"$MPIEXEC" -n 2 "$MGT" train "${G[@]}" --attention-backend fused "${M[@]}" \
  --metrics-file "$tmp/b.jsonl" > "$tmp/out" 2> "$tmp/err"
rc=$?
notes=$(grep -c "^mgt: note: " "$tmp/err")
if [ $rc = 0 ] && [ "$(numbers "$tmp/a.jsonl")" = "$(numbers "$tmp/b.jsonl")" ] &&
  grep -q "^mgt: note: --profile, --profile-step-start, --profile-step-end: mgt has no built-in profiler" "$tmp/err" &&
  grep -q "^mgt: note: --distributed-backend nccl: no GPU in this run" "$tmp/err" &&
  grep -q "^mgt: note: --num-workers: " "$tmp/err" && [ "$notes" -ge 10 ] &&
  grep -q "attention flash (--attention-backend fused)" "$tmp/out"; then
  echo "ok: ${#M[@]} Megatron-LM flags accepted, $notes notes, the same numbers bit for bit"
else
  fail "the accepted Megatron-LM flags (exit $rc, $notes notes)"; cat "$tmp/err"
fi
"$MGT" train "${G[@]}" --position-embedding-type rope --metrics-file "$tmp/r1.jsonl" > /dev/null 2>&1
"$MGT" train "${G[@]}" --use-rotary-position-embeddings --metrics-file "$tmp/r2.jsonl" > /dev/null 2>&1
[ -s "$tmp/r1.jsonl" ] && [ "$(numbers "$tmp/r1.jsonl")" = "$(numbers "$tmp/r2.jsonl")" ] &&
  echo "ok: --use-rotary-position-embeddings is --position-embedding-type rope" ||
  fail "--use-rotary-position-embeddings"
"$MGT" train "${G[@]}" --attention-backend unfused --metrics-file "$tmp/u1.jsonl" > /dev/null 2>&1
"$MGT" train "${G[@]}" --attention-backend local --metrics-file "$tmp/u2.jsonl" > "$tmp/out" 2>&1
[ -s "$tmp/u1.jsonl" ] && [ "$(numbers "$tmp/u1.jsonl")" = "$(numbers "$tmp/u2.jsonl")" ] &&
  grep -q "attention unfused (--attention-backend local)" "$tmp/out" &&
  echo "ok: --attention-backend local is unfused" || fail "--attention-backend local"
# --train-samples: whole global batches (19 samples: 4 batches of 4); the decay over the 16
# samples of 4 iterations is the schedule in iterations: the same numbers, bit for bit
"$MGT" train "${G[@]}" --train-iters 4 --metrics-file "$tmp/i.jsonl" > /dev/null 2>&1
"$MGT" train "${G0[@]}" --train-samples 19 --lr-decay-samples 16 \
  --metrics-file "$tmp/s.jsonl" > "$tmp/out" 2>&1
[ -s "$tmp/i.jsonl" ] && [ "$(numbers "$tmp/i.jsonl")" = "$(numbers "$tmp/s.jsonl")" ] &&
  grep -q "iteration        4/       4" "$tmp/out" &&
  echo "ok: --train-samples 19 at a global batch of 4 trains 4 iterations, as --train-iters 4" ||
  { fail "--train-samples"; tail -3 "$tmp/out"; }
# --decoupled-lr: the word embeddings and output layer at their own rate, the rest (learned
# positions included) at --lr. AdamW's first step moves an element of gradient g by
# lr g / (|g| + eps), so by lr where g is not tiny: measured on the checkpoints, one rank and two
# data-parallel ranks with the distributed optimizer (whose shards cut the groups)
D=("${G0[@]}" --untie-embeddings-and-output-weights --weight-decay 0 --lr-decay-style constant
  --clip-grad 0 --hidden-dropout 0 --attention-dropout 0 --lr 1e-3 --decoupled-lr 4e-3)
"$MGT" train "${D[@]}" --train-iters 0 --save "$tmp/d0" > /dev/null 2>&1 || fail "--train-iters 0"
"$MGT" train "${D[@]}" --train-iters 1 --save "$tmp/d1" > /dev/null 2>&1 || fail "--decoupled-lr"
"$MPIEXEC" -n 2 "$MGT" train "${D[@]}" --train-iters 1 --use-distributed-optimizer \
  --save "$tmp/d2" > /dev/null 2>&1 || fail "--decoupled-lr at dp=2"
$PY - "$tmp/d0/iter_0000000.h5" "$tmp/d1/iter_0000001.h5" "$tmp/d2/iter_0000001.h5" <<'PY' ||
import sys, h5py, numpy as np
f0, f1, f2 = (h5py.File(p, "r") for p in sys.argv[1:4])
decoupled = {"embedding.word_embeddings.weight", "output_layer.weight"}
names = []
f0["model"].visit(lambda n: names.append(n) if isinstance(f0["model"][n], h5py.Dataset) else None)
assert decoupled < set(names) and "embedding.position_embeddings.weight" in names, names
for n in names:
    a = np.asarray(f0["model"][n], np.float64)
    for f in (f1, f2):
        d = np.abs(np.asarray(f["model"][n], np.float64) - a)
        moved = d[d > 0]
        lr = 4e-3 if n in decoupled else 1e-3
        assert moved.size > a.size // 4, (n, moved.size, a.size)
        med = np.median(moved)
        ulp = 2.0 ** -23 * np.abs(a).max()  # the float32 weight's rounding of w + step
        assert abs(med - lr) < 1e-3 * lr and d.max() <= lr * (1 + 1e-5) + ulp, (n, med, d.max(), lr)
print("ok: --decoupled-lr moves the word embeddings and output layer by it, the other %d tensors "
      "by --lr, at dp=1 and with the distributed optimizer at dp=2" % (len(names) - 2))
PY
  fail "--decoupled-lr's first step"
expect_error "--decoupled-min-lr needs --decoupled-lr" "$MGT" train "${G[@]}" --decoupled-min-lr 1e-5
# validation draws the next batches each time, as Megatron-LM's: the validation at iteration 4
# after one at 2 (A) scores batch 1, a first validation at 4 (B) batch 0, one of two batches at 4
# (C) both: C = (A + B) / 2; a run resumed at 2 validates at 4 as A did, bit for bit
vl() { $PY -c 'import json, sys; print(repr([json.loads(l)["valid_loss"] for l in open(sys.argv[1]) if "valid_loss" in l][-1]))' "$1"; }
"$MGT" train "${G0[@]}" --train-iters 4 --eval-interval 2 --eval-iters 1 --metrics-file "$tmp/va.jsonl" > /dev/null 2>&1
"$MGT" train "${G0[@]}" --train-iters 4 --eval-interval 4 --eval-iters 1 --metrics-file "$tmp/vb.jsonl" > /dev/null 2>&1
"$MGT" train "${G0[@]}" --train-iters 4 --eval-interval 4 --eval-iters 2 --metrics-file "$tmp/vc.jsonl" > /dev/null 2>&1
"$MGT" train "${G0[@]}" --train-iters 4 --eval-interval 2 --eval-iters 1 --save "$tmp/vd" \
  --exit-interval 2 > /dev/null 2>&1
"$MGT" train "${G0[@]}" --train-iters 4 --eval-interval 2 --eval-iters 1 --load "$tmp/vd" \
  --metrics-file "$tmp/vd.jsonl" > /dev/null 2>&1
$PY - "$(vl "$tmp/va.jsonl")" "$(vl "$tmp/vb.jsonl")" "$(vl "$tmp/vc.jsonl")" "$(vl "$tmp/vd.jsonl")" <<'PY' ||
import sys
a, b, c, d = map(float, sys.argv[1:5])
assert a != b and abs(c - (a + b) / 2) <= 2e-9 * c and d == a, (a, b, c, d)  # 9 digits logged
print("ok: each validation scores the next batches: %.9f, %.9f, their mean %.9f; resumed: the same" % (a, b, c))
PY
  fail "validation on the next batches"
# --tokenizer-type NullTokenizer --vocab-size V (Megatron-LM's mock-data recipes): ids as they
# are, V of them and the end of document, id V: a vocabulary of V + 1, as its NullTokenizer has
"$MGT" train "${G[@]}" --tokenizer-type NullTokenizer --vocab-size 100 --metrics-file "$tmp/n1.jsonl" \
  > "$tmp/out" 2>&1
"$MGT" train "${G[@]}" --vocab-size 101 --metrics-file "$tmp/n2.jsonl" > /dev/null 2>&1
[ -s "$tmp/n1.jsonl" ] && [ "$(numbers "$tmp/n1.jsonl")" = "$(numbers "$tmp/n2.jsonl")" ] &&
  grep -Eq "^  vocab-size +101$" "$tmp/out" &&
  echo "ok: NullTokenizer with --vocab-size 100 trains a vocabulary of 101" || fail "NullTokenizer"
expect_error "--tokenizer-type NullTokenizer needs --vocab-size" \
  "$MGT" train "${G[@]}" --tokenizer-type NullTokenizer
expect_error "NullTokenizer has no text" "$MGT" tokenize --tokenizer-type NullTokenizer --input "$tmp/out"
# --apply-layernorm-1p: the norms' weights w stored zero-centred (0 at start), the gain 1 + w. The
# same model as the plain one, up to rounding: the gradient of w is the gain's, so the losses
# agree to float rounding and the stored weights differ by 1; GPT at tp=1 and at tp=2 with
# sequence parallelism, and BERT (its LM head's LayerNorm too)
L=("${G0[@]}" --train-iters 6 --eval-iters 0)
"$MGT" train "${L[@]}" --apply-layernorm-1p --save "$tmp/l1" --metrics-file "$tmp/l1.jsonl" > /dev/null 2>&1
"$MGT" train "${L[@]}" --save "$tmp/l0" --metrics-file "$tmp/l0.jsonl" > /dev/null 2>&1
"$MPIEXEC" -n 2 "$MGT" train "${L[@]}" --apply-layernorm-1p --tensor-model-parallel-size 2 \
  --sequence-parallel --metrics-file "$tmp/l2.jsonl" > /dev/null 2>&1
"$MGT" train "${L[@]}" --model bert --vocab-size 200 --apply-layernorm-1p --save "$tmp/b1" \
  --metrics-file "$tmp/b1.jsonl" > /dev/null 2>&1
"$MGT" train "${L[@]}" --model bert --vocab-size 200 --save "$tmp/b0" --metrics-file "$tmp/b0.jsonl" \
  > /dev/null 2>&1
$PY - "$tmp" <<'PY' || fail "--apply-layernorm-1p"
import json, sys, h5py, numpy as np
d = sys.argv[1]
loss = lambda n: [json.loads(l)["loss"] for l in open("%s/%s.jsonl" % (d, n)) if '"loss"' in l]
for a, b in (("l1", "l0"), ("l2", "l0"), ("b1", "b0")):
    x, y = loss(a), loss(b)
    assert len(x) == len(y) == 6 and all(abs(u - v) <= 1e-5 * abs(v) for u, v in zip(x, y)), (a, x, y)
for a, b in (("l1", "l0"), ("b1", "b0")):
    f, g = h5py.File("%s/%s/iter_0000006.h5" % (d, a), "r"), h5py.File("%s/%s/iter_0000006.h5" % (d, b), "r")
    names = []
    f["model"].visit(lambda n: names.append(n) if n.endswith("layernorm.weight") else None)
    assert len(names) >= 3, names
    for n in names:
        w1, w0 = np.asarray(f["model"][n], np.float64), np.asarray(g["model"][n], np.float64)
        assert np.abs(w1).max() > 1e-4 and np.abs(w1 + 1 - w0).max() < 1e-5, (a, n, np.abs(w1 + 1 - w0).max())
print("ok: --apply-layernorm-1p trains the plain model's losses (GPT at tp 1 and 2 with sequence "
      "parallelism, BERT), its norm weights stored as gain - 1")
PY
# exported, the gains are 1 + w (Hugging Face's models store the gain): imported back as a plain
# model, it scores as the 1p model it came from
seq 3 3 120 | tr '\n' ' ' > "$tmp/ids.txt"
"$MGT" ckpt export --format hf --load "$tmp/l1" --output "$tmp/hf1" > /dev/null 2>&1 &&
  "$MGT" ckpt import --format hf --input "$tmp/hf1" --save "$tmp/l1p" > /dev/null 2>&1 &&
  "$MGT" eval --load "$tmp/l1" --input-ids "$tmp/ids.txt" > "$tmp/e1" 2>&1 &&
  "$MGT" eval --load "$tmp/l1p" --input-ids "$tmp/ids.txt" > "$tmp/e2" 2>&1 &&
  $PY - "$tmp/e1" "$tmp/e2" <<'PY' || fail "--apply-layernorm-1p's Hugging Face export"
import json, sys
a, b = ([json.loads(l) for l in open(f) if l.startswith("{")][-1] for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"] > 10 and abs(a["avg_loss"] - b["avg_loss"]) <= 1e-6 * a["avg_loss"], (a, b)
print("ok: exported to Hugging Face with gains 1 + w, imported as a plain model: the same loss %.6f" % a["avg_loss"])
PY
# a BERT job without --model bert (Megatron's pretrain_bert.py is mgt train --model bert) is said
"$MGT" train "${G[@]}" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$(dirname "$0")/../../shared/data/bert/bert-base-uncased-vocab.txt" --dry-run \
  > "$tmp/out" 2>&1
grep -q "^mgt: note: --model gpt on WordPiece ids: a BERT job (Megatron-LM's pretrain_bert.py) is --model bert" "$tmp/out" &&
  echo "ok: a GPT on WordPiece ids gets a note naming --model bert" || fail "the WordPiece GPT note"
# --rampup-batch-size START INCREMENT SAMPLES (with --train-samples): the iterations' batches,
# the samples consumed, the run's length and the learning rate stepping by the samples, against
# Megatron-LM's calculator and scheduler written out here
"$MGT" train "${G0[@]}" --micro-batch-size 1 --global-batch-size 8 --rampup-batch-size 2 2 12 \
  --train-samples 40 --lr-warmup-samples 4 --lr-decay-style linear --min-lr 1e-4 \
  --metrics-file "$tmp/ramp.jsonl" > "$tmp/out" 2>&1 || { fail "--rampup-batch-size"; tail -3 "$tmp/out"; }
# and with --train-iters (Megatron-LM 2025's GPT-3 recipe): the scheduler still steps by the
# samples, its warmup and decay lengths the iterations' full global batches
"$MGT" train "${G0[@]}" --micro-batch-size 1 --global-batch-size 8 --rampup-batch-size 2 2 12 \
  --train-iters 7 --lr-warmup-iters 1 --lr-decay-style linear --min-lr 1e-4 \
  --metrics-file "$tmp/rampi.jsonl" > "$tmp/out" 2>&1 || { fail "--rampup-batch-size with --train-iters"; tail -3 "$tmp/out"; }
for mode in samples iters; do
  f=$tmp/ramp.jsonl && [ $mode = iters ] && f=$tmp/rampi.jsonl
  $PY - "$f" $mode <<'PY' || fail "--rampup-batch-size ($mode) against Megatron-LM's rules"
import json, sys
gbs, start, incr, ramp, total, lr, min_lr, warm = 8, 2, 2, 12, 40, 1e-3, 1e-4, 4
if sys.argv[2] == "iters":
    warm, total = 1 * gbs, 7 * gbs  # its lr_warmup_steps, lr_decay_steps: iterations x batch
def batch(consumed):  # Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator
    if consumed > ramp: return gbs
    return start + int(consumed / (ramp / ((gbs - start) // incr))) * incr
def rate(step):       # its OptimizerParamScheduler, linear, stepped by the samples
    if step <= warm: return lr * step / warm
    if step > total: return min_lr
    return min_lr + (1 - (step - warm) / (total - warm)) * (lr - min_lr)
iters, consumed = 0, 0  # update_train_iters
while consumed <= ramp and consumed <= total: consumed += batch(consumed); iters += 1
iters += (total - consumed) // gbs
if sys.argv[2] == "iters": iters = 7
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == iters, (len(rows), iters)
consumed = 0
for r in rows:
    consumed += batch(consumed)
    assert r["consumed_samples"] == consumed and abs(r["lr"] - rate(consumed)) <= 1e-8 * lr, (r, consumed, rate(consumed))
print("ok: --rampup-batch-size 2 2 12 (%s): %d iterations, batches %s, the rate by samples, as Megatron-LM's"
      % (sys.argv[2], iters, [b - a for a, b in zip([0] + [r["consumed_samples"] for r in rows], [r["consumed_samples"] for r in rows])]))
PY
done
# --step-batch-size-schedule TOKENS:BATCH ... (Megatron-LM 2026's): thresholds in tokens made
# samples by --seq-length, the last batch the global batch, the run counted as Megatron counts it
"$MGT" train "${G0[@]/--global-batch-size/--eval-interval}" --micro-batch-size 1 \
  --step-batch-size-schedule 0:2 64:4 0.256K:8 --train-samples 30 --lr-decay-style linear \
  --metrics-file "$tmp/step.jsonl" > "$tmp/out" 2>&1 || { fail "--step-batch-size-schedule"; tail -3 "$tmp/out"; }
$PY - "$tmp/step.jsonl" <<'PY' || fail "--step-batch-size-schedule against Megatron-LM's rules"
import json, sys
sched = sorted((int(t) // 16, b) for t, b in ((0, 2), (64, 4), (256, 8)))  # --seq-length 16
batch = lambda c: [b for t, b in sched if c >= t][-1]
iters, consumed = 0, 0
while consumed < 30: consumed += batch(consumed); iters += 1
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == iters, (len(rows), iters)
consumed = 0
for r in rows:
    consumed += batch(consumed)
    rate = 1e-3 * (1 - consumed / 30) if consumed <= 30 else 0.0  # past the decay: --min-lr 0
    assert r["consumed_samples"] == consumed and abs(r["lr"] - rate) <= 1e-8, (r, consumed)
print("ok: --step-batch-size-schedule: %d iterations to %d samples, as Megatron-LM counts them" % (iters, consumed))
PY
expect_error "--step-batch-size-schedule ends at a global batch of 8: --global-batch-size 4 differs" \
  "$MGT" train "${G[@]}" --step-batch-size-schedule 0:2 64:8
expect_error "--step-batch-size-schedule: the first entry must be at 0" \
  "$MGT" train "${G0[@]}" --step-batch-size-schedule 32:2 64:4
expect_error "--global-batch-size 4 minus the start 3 is not a multiple of the increment 2" \
  "$MGT" train "${G[@]}" --rampup-batch-size 3 2 8
expect_error "--train-data is for mgt finetune (mgt train pretrains on --data-path)" \
  "$MGT" train "${G[@]}" --train-data "$tmp/x.tsv"
expect_error "--qk-layernorm: mgt's query/key norm is RMSNorm (Qwen 3's): give --normalization RMSNorm" \
  "$MGT" train "${G[@]}" --qk-layernorm
expect_error "--exit-on-missing-checkpoint: --load $tmp/empty holds no checkpoint (no 'latest' file)" \
  "$MGT" train "${G[@]}" --load "$tmp/empty" --exit-on-missing-checkpoint

# ---- every flag of Megatron-LM's parser (tests/data/megatron-flags.txt) is answered ----
# given bare, 25 a run: each is accepted, refused with its reason, or wants its value; none is
# unknown
mapfile -t F < <(grep -v '^#' "$(dirname "$0")/data/megatron-flags.txt")
: > "$tmp/unknown"
for ((i = 0; i < ${#F[@]}; i += 25)); do
  "$MGT" train "${F[@]:i:25}" 2>&1 | grep -oE "unknown flag '[^']+'" >> "$tmp/unknown"
done
if [ "${#F[@]}" -gt 800 ] && [ ! -s "$tmp/unknown" ]; then
  echo "ok: all ${#F[@]} flags of Megatron-LM's parser are answered"
else
  fail "Megatron-LM's flags unknown to mgt train: $(tr '\n' ' ' < "$tmp/unknown")"
fi
# answers with values: several values of a noted flag taken, a value mgt implements accepted,
# another refused, a feature mgt lacks refused with what to do
"$MGT" train "${G[@]}" --metrics-file "$tmp/one.jsonl" > /dev/null 2>&1 || fail "a plain run on one rank"
"$MGT" train "${G[@]}" --cuda-graph-scope attn mlp --optimizer adam --main-grads-dtype fp32 \
  --deterministic-mode --local_rank=0 --encoder-seq-length 16 --metrics-file "$tmp/n.jsonl" \
  > /dev/null 2> "$tmp/err" && [ "$(numbers "$tmp/n.jsonl")" = "$(numbers "$tmp/one.jsonl")" ] &&
  grep -q "^mgt: note: --cuda-graph-scope: a CUDA-graph setting" "$tmp/err" &&
  echo "ok: noted flags with their values, and values mgt implements, change no number" ||
  { fail "the noted Megatron-LM flags"; cat "$tmp/err"; }
# noted flags given all at once: each one's note is there (more than 4 KB of notes)
NOTED=(
  --use-mcore-models --use-legacy-models --num-workers 1 --local-rank 1 --no-mmap-bin-files
  --mmap-bin-files --no-create-attention-mask-in-dataloader --log-throughput --manual-gc
  --manual-gc-interval 1 --no-manual-gc-eval --empty-unused-memory-level 1
  --cross-entropy-loss-fusion --cross-entropy-fusion-impl 1 --no-masked-softmax-fusion
  --no-bias-gelu-fusion --no-bias-swiglu-fusion --no-bias-dropout-fusion --no-rope-fusion
  --no-persist-layer-norm --no-gradient-accumulation-fusion
  --no-async-tensor-model-parallel-allreduce --apply-query-key-layer-scaling
  --attention-softmax-in-fp32 --accumulate-allreduce-grads-in-fp32 --calculate-per-token-loss
  --grad-reduce-in-bf16 --tp-comm-overlap --tiktoken-pattern 1 --profile --use-pytorch-profiler
  --profile-step-start 1 --profile-step-end 1 --profile-ranks 1 --record-memory-history
  --memory-snapshot-path 1 --nvtx-ranges --timing-log-level 1 --timing-log-option 1
  --log-params-norm --log-num-zeros-in-grad --log-timers-to-tensorboard
  --log-validation-ppl-to-tensorboard --log-memory-to-tensorboard --log-world-size-to-tensorboard
  --log-loss-scale-to-tensorboard --log-batch-size-to-tensorboard --tensorboard-log-interval 1
  --tensorboard-queue-size 1 --wandb-project 1 --wandb-exp-name 1 --wandb-save-dir 1
  --ckpt-format 1 --use-dist-ckpt --auto-detect-ckpt-format --ckpt-fully-parallel-save
  --ckpt-fully-parallel-load --dist-ckpt-strictness 1 --use-cpu-initialization --lazy-loader
  --resume-dataloader --cache-dir 1 --presplit-sentences --fp32-embedding --fp32-layernorm
  --no-check-for-nan-in-loss-and-grad --logging-level 1 --init-model-with-meta-device
  --cuda-graph-impl --enable-experimental --create-all-gather-group --cp-comm-type
  --dataloader-defer-npy-index-mmap --disable-jit-fuser --delay-wgrad-compute
  --account-for-embedding-in-pipeline-split --calc-ft-timeouts --async-ckpt-cpu-priority
  --decode-only-cuda-graphs)
"$MGT" train "${G[@]}" --train-iters 1 "${NOTED[@]}" > /dev/null 2> "$tmp/err" || fail "the noted flags at once"
missing=$(for f in "${NOTED[@]}"; do
  [[ $f == --* ]] && ! grep -q -- "$f[:,]" "$tmp/err" && echo "$f"
done)
[ -z "$missing" ] && echo "ok: ${#NOTED[@]} words of noted flags at once, each noted ($(wc -c < "$tmp/err") bytes)" ||
  fail "noted flags left out of the notes: $missing"
# --device not given: the GPU where this mgt has CUDA and every rank sees one, else the CPU;
# the layout line says which and why
"$MPIEXEC" -n 2 "$MGT" train "${G[@]}" --train-iters 1 > "$tmp/out" 2>&1
grep -E -q "^layout: .*backend cpu \(BLAS: [^)]*\) \(--device not given: cpu, (not every rank sees a GPU|this mgt was built without CUDA)\)|^layout: .*backend cuda: .*\(--device not given: cuda, every rank sees a GPU\)" "$tmp/out" &&
  "$MGT" train "${G[@]}" --train-iters 1 --device cpu 2>&1 | grep -q "^layout: .*backend cpu (BLAS: [^)]*);" &&
  echo "ok: $(grep -o -- '--device not given: [^)]*' "$tmp/out")" || { fail "the device chosen"; grep -E "^layout|error" "$tmp/out"; }
# --num-microbatches-in-minibatch (Megatron-LM 2020's): micro-batch x it x dp, the run of that
# --global-batch-size bit for bit
k=0
for how in "--num-microbatches-in-minibatch 3" "--global-batch-size 12"; do
  k=$((k + 1))
  # shellcheck disable=SC2086
  "$MPIEXEC" -n 2 "$MGT" train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
    --seq-length 16 --micro-batch-size 2 --lr 1e-3 --log-interval 1 --train-iters 2 $how \
    --metrics-file "$tmp/mb$k.jsonl" > "$tmp/out" 2>&1 ||
    { fail "a run with $how"; grep error "$tmp/out"; }
done
[ "$(numbers "$tmp/mb1.jsonl")" = "$(numbers "$tmp/mb2.jsonl")" ] && grep -q '"iteration":2,"consumed_samples":24' "$tmp/mb1.jsonl" &&
  echo "ok: --num-microbatches-in-minibatch 3 at micro-batch 2 on 2 ranks is --global-batch-size 12" ||
  fail "--num-microbatches-in-minibatch: not --global-batch-size 12"
expect_error "--num-microbatches-in-minibatch 3 makes a global batch of 6" \
  "$MGT" train "${G[@]}" --num-microbatches-in-minibatch 3 --global-batch-size 4
expect_error "--optimizer sgd: mgt's optimizer is AdamW" "$MGT" train "${G[@]}" --optimizer sgd
expect_error "--multi-latent-attention: mgt has no multi-latent attention: train with --group-query-attention" \
  "$MGT" train "${G[@]}" --multi-latent-attention --q-lora-rank 8

echo "megatron_flags: $fails failures"
[ "$fails" = 0 ]
