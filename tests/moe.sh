#!/usr/bin/env bash
# Mixture-of-Experts models end to end: seven routers trained (softmax top-2 with the
# load-balancing and z-losses; pre-softmax with a capacity by position in every other layer and
# a gated shared expert; sigmoid scaled with a capacity by probability, GeLU experts and a shared
# one; top-1 of 16, so that experts get no token; Qwen3-MoE's block: q/k norms, a head size of
# its own, pre-softmax, a dense layer 0; OLMoE's: q/k norms over all heads (split at tp=2), trained at tp=1 ep=2;
# sigmoid top-2 chosen with an aux-loss-free expert bias), each scored by mgt eval at tp=1 and
# tp=2 against an independent float64 numpy model (tests/moe_numpy.py, written from
# Megatron-LM's router), a window a micro-batch and, with a capacity, two (routed together);
# resumed on another layout with the losses of the uninterrupted run, also with expert
# parallelism and the distributed optimizer (saved at ep=2, resumed at ep=4, ep=1 and tp=2); the
# all-gather dispatcher against the all-to-all; the auxiliary losses in the log line
# and the metrics file; Hugging Face's MixtralForCausalLM, Qwen3MoeForCausalLM and
# OlmoeForCausalLM both ways; the Mixtral 8x7B and Qwen3-30B-A3B jobs' parameters per rank
# against a hand count; mgt plan's expert-parallel counts; global_aux_loss against a float64
# numpy of Megatron-LM's definition (tests/moe_global_aux.py).
# Usage: moe.sh MGT MPIEXEC TESTS_DIR
set -u
MGT=$(readlink -f "$1") MPIEXEC=$2 TESTS=$3
. "$TESTS/lib.sh"

$PY -c "import random; random.seed(7); print(' '.join(str((5 + 7 * i) % 128 if i % 5 else random.randrange(128)) for i in range(129)))" > "$tmp/ids.txt"
M=(--mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --micro-batch-size 2 --global-batch-size 8 --train-iters 12 --lr 3e-3 --lr-decay-iters 14 --eval-iters 0
  --log-interval 4 --normalization RMSNorm --norm-epsilon 1e-6 --position-embedding-type rope
  --disable-bias-linear --tensor-model-parallel-size 2 --moe-ffn-hidden-size 48)
declare -A V
V[softmax]="--swiglu --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
V[pre]="--swiglu --num-experts 8 --moe-router-topk 2 --moe-router-pre-softmax --moe-layer-freq [0,1] --moe-expert-capacity-factor 0.5 --moe-token-drop-policy position --moe-aux-loss-coeff 0.01 --moe-shared-expert-intermediate-size 40 --moe-shared-expert-gate"
V[sigmoid]="--num-experts 6 --moe-router-topk 3 --moe-router-score-function sigmoid --moe-router-topk-scaling-factor 2.5 --moe-expert-capacity-factor 1 --moe-token-drop-policy probs --moe-aux-loss-coeff 0.01 --untie-embeddings-and-output-weights --moe-shared-expert-intermediate-size 24"
V[top1]="--swiglu --num-experts 16 --moe-router-topk 1 --group-query-attention --num-query-groups 2 --moe-z-loss-coeff 0.01"
V[olmoe]="--swiglu --num-experts 4 --moe-router-topk 2 --moe-router-pre-softmax --qk-layernorm --qk-layernorm-full --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --moe-aux-loss-coeff 0.01 --tensor-model-parallel-size 1 --expert-model-parallel-size 2"
V[bias]="--num-experts 8 --moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.05"
V[qmoe]="--swiglu --num-experts 4 --moe-router-topk 2 --moe-router-pre-softmax --moe-layer-freq [0,1] --qk-layernorm --kv-channels 12 --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --moe-aux-loss-coeff 0.001"

for name in softmax pre sigmoid top1 qmoe olmoe bias; do
  # shellcheck disable=SC2086
  "$MPIEXEC" -n 2 "$MGT" train "${M[@]}" ${V[$name]} --save "$tmp/$name" \
    --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1 || { fail "training $name"; tail -3 "$tmp/$name.log"; continue; }
  for tp in 1 2; do
    "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/$name" --input-ids "$tmp/ids.txt" --micro-batch-size 1 \
      --tensor-model-parallel-size $tp > "$tmp/$name.eval$tp" 2>&1 ||
      { fail "mgt eval $name tp=$tp"; tail -3 "$tmp/$name.eval$tp"; }
  done
  $PY "$TESTS/moe_numpy.py" "$tmp/$name/iter_0000012.h5" "$tmp/ids.txt" 32 > "$tmp/$name.numpy" ||
    fail "numpy MoE of $name"
  $PY - "$name" "$tmp/$name.eval1" "$tmp/$name.eval2" "$tmp/$name.numpy" <<'PY' || fail "$name: mgt eval and the numpy MoE disagree"
import json, os, sys
e1, e2, ref = (json.loads([l for l in open(f).read().splitlines() if l.startswith("{")][-1]) for f in sys.argv[2:])
print("%s: mgt eval (tp=1): %.7f over %d tokens; (tp=2): %.7f; numpy float64: %.7f" %
      (sys.argv[1], e1["avg_loss"], e1["tokens"], e2["avg_loss"], ref["avg_loss"]))
assert e1["tokens"] == ref["tokens"] == 128
assert abs(e1["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
assert abs(e2["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
PY
done

# two windows a micro-batch: an expert's capacity counts their rows together, dropped position by
# position across the sequences (Megatron-LM's rows are [s, b]) or by probability, at tp=1 and 2
for name in pre sigmoid; do
  for tp in 1 2; do
    "$MPIEXEC" -n $tp "$MGT" eval --load "$tmp/$name" --input-ids "$tmp/ids.txt" --micro-batch-size 2 \
      --tensor-model-parallel-size $tp > "$tmp/$name.evalb$tp" 2>&1 ||
      { fail "mgt eval $name tp=$tp, micro-batch 2"; tail -3 "$tmp/$name.evalb$tp"; }
  done
  $PY "$TESTS/moe_numpy.py" "$tmp/$name/iter_0000012.h5" "$tmp/ids.txt" 32 2 > "$tmp/$name.numpyb" ||
    fail "numpy MoE of $name, micro-batch 2"
  $PY - "$name" "$tmp/$name.evalb1" "$tmp/$name.evalb2" "$tmp/$name.numpyb" "$tmp/$name.numpy" <<'PY' ||
import json, sys
e1, e2, ref, one = (json.loads([l for l in open(f).read().splitlines() if l.startswith("{")][-1]) for f in sys.argv[2:])
print("%s, micro-batch 2: mgt eval (tp=1): %.7f; (tp=2): %.7f; numpy float64: %.7f (one a micro-batch: %.7f)" %
      (sys.argv[1], e1["avg_loss"], e2["avg_loss"], ref["avg_loss"], one["avg_loss"]))
assert e1["tokens"] == e2["tokens"] == ref["tokens"] == 128
# closer than above: the rows in sequence order (b, s) measured 2.7e-5 away for pre; 1e-7 here
assert abs(e1["avg_loss"] - ref["avg_loss"]) <= 3e-6 * ref["avg_loss"]
assert abs(e2["avg_loss"] - ref["avg_loss"]) <= 3e-6 * ref["avg_loss"]
assert abs(ref["avg_loss"] - one["avg_loss"]) > 3e-6 * ref["avg_loss"]  # the capacity couples them
PY
    fail "$name: micro-batches of two windows: mgt eval and the numpy MoE disagree"
done

# Hugging Face: the softmax model as MixtralForCausalLM, the q/k-normed one with a dense layer 0
# as Qwen3MoeForCausalLM (decoder_sparse_step 2, norm_topk_prob false): their exports scored by
# the float64 numpy of tests/llama_numpy.py (written from transformers' modeling_mixtral and
# modeling_qwen3_moe) as mgt eval scores the checkpoint, and imported back bit for bit
for pair in softmax:mixtral qmoe:qwen3_moe olmoe:olmoe; do
  name=${pair%%:*} type=${pair#*:}
  "$MGT" ckpt export --format hf --load "$tmp/$name" --output "$tmp/$name.hf" > /dev/null || { fail "export $name"; continue; }
  $PY - "$tmp/$name.hf/config.json" "$type" <<'PY' || fail "$name: config.json"
import json, sys
c, t = json.load(open(sys.argv[1])), sys.argv[2]
want = {"mixtral": ("MixtralForCausalLM", "num_local_experts", 4), "qwen3_moe": ("Qwen3MoeForCausalLM", "num_experts", 4),
        "olmoe": ("OlmoeForCausalLM", "num_experts", 4)}[t]
assert c["architectures"] == [want[0]] and c["model_type"] == t and c[want[1]] == want[2], c
if t == "qwen3_moe":
    assert c["decoder_sparse_step"] == 2 and c["mlp_only_layers"] == [] and c["norm_topk_prob"] is False, c
    assert c["moe_intermediate_size"] == 48 and c["head_dim"] == 12, c
elif t == "olmoe":
    assert c["intermediate_size"] == 48 and c["norm_topk_prob"] is False and c["clip_qkv"] is None, c
else:
    assert c["intermediate_size"] == 48 and c["num_experts_per_tok"] == 2, c
print("ok: %s exported as %s" % (t, want[0]))
PY
  $PY "$TESTS/llama_numpy.py" "$tmp/$name.hf" "$tmp/ids.txt" 32 > "$tmp/$name.hfnumpy" || fail "numpy $type"
  $PY - "$type" "$tmp/$name.eval1" "$tmp/$name.hfnumpy" <<'PY' || fail "$type: the export scores otherwise"
import json, sys
e, ref = (json.loads([l for l in open(f).read().splitlines() if l.startswith("{")][-1]) for f in sys.argv[2:])
print("%s: mgt eval %.7f, numpy of the Hugging Face export %.7f" % (sys.argv[1], e["avg_loss"], ref["avg_loss"]))
assert e["tokens"] == ref["tokens"] == 128 and abs(e["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
PY
  "$MGT" ckpt import --format hf --input "$tmp/$name.hf" --save "$tmp/$name.imp" > /dev/null || { fail "import $type"; continue; }
  $PY - "$tmp/$name" "$tmp/$name.imp" <<'PY' || fail "$type: the import differs from the checkpoint"
import glob, sys
import h5py, numpy as np
a, b = (sorted(glob.glob(d + "/iter_*.h5"))[-1] for d in sys.argv[1:])
with h5py.File(a, "r") as p, h5py.File(b, "r") as q:
    names = sorted(p["model"].keys())
    assert names == sorted(q["model"].keys()), (names, sorted(q["model"].keys()))
    for k in names:
        x, y = p["model"][k][()], q["model"][k][()]
        assert x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32)), k
    sa, sb = p.attrs["model"], q.attrs["model"]
print("ok: %d model tensors imported bit for bit" % len(names))
PY
done
# keys a config.json leaves out default as transformers' classes do: MixtralConfig's rope_theta
# 1e6 and rms_norm_eps 1e-5 (not Llama's 10000 and 1e-6)
rm -rf "$tmp/mdef.hf" && cp -r "$tmp/softmax.hf" "$tmp/mdef.hf"
$PY -c "import json, sys; c = json.load(open(sys.argv[1])); assert c['model_type'] == 'mixtral'; del c['rope_theta'], c['rms_norm_eps']; json.dump(c, open(sys.argv[1], 'w'))" "$tmp/mdef.hf/config.json"
"$MGT" ckpt import --format hf --input "$tmp/mdef.hf" --save "$tmp/mdef" > /dev/null 2>&1 &&
  "$MGT" ckpt info "$tmp/mdef" > "$tmp/mdef.info" 2>&1 &&
  grep -q "layernorm-epsilon *1e-05$" "$tmp/mdef.info" && grep -q "rotary-base *1000000$" "$tmp/mdef.info" &&
  echo "ok: a Mixtral config.json without rope_theta and rms_norm_eps: MixtralConfig's 1e6 and 1e-5" ||
  { fail "Mixtral's defaults"; grep -E "epsilon|rotary-base" "$tmp/mdef.info"; }
# Qwen3MoeConfig's top 8 (not Mixtral's 2) of these 4 experts is refused
rm -rf "$tmp/nok.hf" && cp -r "$tmp/qmoe.hf" "$tmp/nok.hf"
$PY -c "import json, sys; c = json.load(open(sys.argv[1])); del c['num_experts_per_tok']; json.dump(c, open(sys.argv[1], 'w'))" "$tmp/nok.hf/config.json"
expect "config.json: --moe-router-topk 8 exceeds --num-experts 4" "$MGT" ckpt import --format hf --input "$tmp/nok.hf" --save "$tmp/x"
expect "Hugging Face's Mixtral has experts in every layer, their top-k renormalized" \
  "$MGT" ckpt export --format hf --load "$tmp/pre" --output "$tmp/x.hf"

# the auxiliary losses in the log line and the metrics file: the load-balancing loss near its
# coefficient (balanced experts give coeff x 1), the z-loss positive
grep -q "load_balancing_loss: [0-9.E+-]* | z_loss: [0-9.E+-]* |" "$tmp/softmax.log" ||
  fail "no auxiliary losses in the log line"
$PY - "$tmp/softmax.jsonl" <<'PY' || fail "the metrics file's auxiliary losses"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == 3, rows
for r in rows:
    assert 0.01 <= r["load_balancing_loss"] < 0.02 and 0 < r["z_loss"] < 0.01, r
    # tokens of an expert over the mean 2 x 32 x 2 / 4 = 32 of a micro-batch: counts / 32
    lo, hi = r["expert_tokens_min"] * 32, r["expert_tokens_max"] * 32
    assert 0 <= lo <= 32 <= hi <= 64 and lo == round(lo) and hi == round(hi), r
print("ok: load_balancing_loss %.6f, z_loss %.3g, an expert's tokens %d to %d of a micro-batch "
      "at iteration 12" % (rows[-1]["load_balancing_loss"], rows[-1]["z_loss"],
                           rows[-1]["expert_tokens_min"] * 32, rows[-1]["expert_tokens_max"] * 32))
PY

# global_aux_loss: the load-balancing loss of iteration 2 (two micro-steps on dp=2 ep=2, the
# counts of each over both ranks, averaged over the micro-steps so far) against Megatron-LM's
# definition in float64 numpy from the checkpoint of iteration 1 and the mock sequences 8-15
"$MPIEXEC" -n 2 "$MGT" train "${M[@]}" --swiglu --num-experts 4 --moe-router-topk 2 \
  --moe-router-load-balancing-type global_aux_loss --moe-aux-loss-coeff 0.01 --hidden-dropout 0 \
  --attention-dropout 0 --tensor-model-parallel-size 1 --expert-model-parallel-size 2 \
  --train-iters 2 --log-interval 1 --save-interval 1 --save "$tmp/gaux" \
  --metrics-file "$tmp/gaux.jsonl" > "$tmp/gaux.log" 2>&1 || { fail "global_aux_loss"; tail -3 "$tmp/gaux.log"; }
# against_numpy NAME WHAT DP [MODE]: iteration 2's load-balancing loss of run NAME against
# tests/moe_global_aux.py from its checkpoint of iteration 1
against_numpy() {
  $PY "$TESTS/moe_global_aux.py" "$tmp/$1/iter_0000001.h5" 1234 128 8 8 2 "$3" 32 0.01 ${4:-} \
    > "$tmp/$1.numpy" || { fail "numpy $2"; return; }
  $PY - "$tmp/$1.jsonl" "$tmp/$1.numpy" "$2" <<'PY' || fail "$2 differs from numpy's"
import json, sys
got = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][1]["load_balancing_loss"]
want = json.load(open(sys.argv[2]))["load_balancing_loss"]
assert abs(got - want) <= 1e-6 * want, (got, want)
print("ok: %s at iteration 2 %.12f, numpy %.12f" % (sys.argv[3], got, want))
PY
}
against_numpy gaux global_aux_loss 2

# aux_loss with an expert bias (DeepSeek-V3's recipe): the loss counts the top k of the scores
# alone, not the experts the bias chose (Megatron-LM's compute_routing_scores_for_aux_loss), at
# iteration 2 from the checkpoint of iteration 1 (its biases moved by 0.5) against numpy; and
# seq_aux_loss of one sequence per micro-batch is aux_loss, layer by layer (each MoE layer's own
# routing, not the last forwarded one's)
B1=("${M[@]}" --num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid
  --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.5 --moe-aux-loss-coeff 0.01
  --hidden-dropout 0 --attention-dropout 0 --tensor-model-parallel-size 1 --train-iters 2
  --log-interval 1 --save-interval 1)
"$MGT" train "${B1[@]}" --save "$tmp/baux" --metrics-file "$tmp/baux.jsonl" > "$tmp/baux.log" 2>&1 ||
  { fail "aux_loss with an expert bias"; tail -3 "$tmp/baux.log"; }
against_numpy baux "aux_loss with an expert bias" 1 aux
S1=("${M[@]}" --swiglu --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.1
  --tensor-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 4 --train-iters 6 --log-interval 1)
for lb in aux_loss seq_aux_loss; do
  "$MGT" train "${S1[@]}" --moe-router-load-balancing-type $lb --metrics-file "$tmp/lb_$lb.jsonl" \
    > "$tmp/lb.log" 2>&1 || { fail "$lb"; tail -3 "$tmp/lb.log"; }
done
$PY - "$tmp/lb_aux_loss.jsonl" "$tmp/lb_seq_aux_loss.jsonl" <<'PY' || fail "seq_aux_loss of one sequence is not aux_loss"
import json, sys
a, b = ([(r["loss"], r["load_balancing_loss"]) for r in map(json.loads, open(f)) if "loss" in r] for f in sys.argv[1:3])
assert len(a) == len(b) == 6, (a, b)
assert all(abs(x - y) <= 1e-6 * abs(y) for p, q in zip(a, b) for x, y in zip(p, q)), (a, b)
print("ok: seq_aux_loss of one sequence per micro-batch is aux_loss over 6 iterations, 2 MoE layers")
PY

# the expert-bias update waits for the overlapped all-gather of the parameters it changes (it
# was overwritten by the gather in flight: other routing on each replica)
O=("${M[@]}" --swiglu --num-experts 8 --moe-router-topk 2 --moe-router-score-function sigmoid
  --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.05 --tensor-model-parallel-size 1
  --hidden-dropout 0 --attention-dropout 0 --train-iters 8 --log-interval 1 --use-distributed-optimizer)
for ov in no --overlap-param-gather; do
  "$MPIEXEC" -n 2 "$MGT" train "${O[@]}" ${ov#no} --metrics-file "$tmp/ov_$ov.jsonl" > "$tmp/ov.log" 2>&1 ||
    { fail "expert bias, distributed optimizer $ov"; tail -3 "$tmp/ov.log"; }
done
$PY - "$tmp/ov_no.jsonl" "$tmp/ov_--overlap-param-gather.jsonl" <<'PY' || fail "the expert bias under --overlap-param-gather"
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(f)) if "loss" in r] for f in sys.argv[1:3])
assert len(a) == 8 and a == b, (a, b)
print("ok: an expert bias with --overlap-param-gather: the losses of the run without, bit for bit")
PY

# resumed on other layouts (the experts resharded on their inner width): the losses of the
# uninterrupted run
"$MPIEXEC" -n 2 "$MGT" train "${M[@]}" ${V[softmax]} --train-iters 14 --log-interval 1 \
  --metrics-file "$tmp/whole.jsonl" > /dev/null 2>&1 || fail "the uninterrupted softmax run"
for tp in 1 2; do
  "$MPIEXEC" -n 2 "$MGT" train "${M[@]}" ${V[softmax]} --train-iters 14 --log-interval 1 \
    --tensor-model-parallel-size $tp --load "$tmp/softmax" --metrics-file "$tmp/resume$tp.jsonl" \
    > "$tmp/resume.log" 2>&1 || { fail "resuming softmax at tp=$tp"; grep error "$tmp/resume.log"; }
done
$PY - "$tmp/whole.jsonl" "$tmp/resume2.jsonl" "$tmp/resume1.jsonl" <<'PY' || fail "the resumed runs differ from the uninterrupted one"
import json, sys
runs = [{r["iteration"]: (r["loss"], r["load_balancing_loss"]) for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:]]
ref = runs[0]
for r in runs[1:]:
    assert sorted(r) == [13, 14], r
    for k in r:
        assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(r[k], ref[k])), (k, r[k], ref[k])
print("ok: resumed at tp=2 dp=1 and tp=1 dp=2: losses %s as without a stop" % [round(ref[k][0], 6) for k in (13, 14)])
PY

# aux-loss-free balancing: the expert biases (scored above with numpy's choice by sigmoid plus
# bias) are whole steps of the update rate, and numpy without them scores otherwise
$PY - "$tmp/bias/iter_0000012.h5" "$tmp/ids.txt" "$TESTS" "$tmp/bias.numpy" <<'PY' || fail "the expert bias after 12 steps"
import json, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
import moe_numpy
from gpt2_numpy import score
s, w = moe_numpy.load(sys.argv[1])
b = np.concatenate([w["layers.%d.mlp.router.expert_bias" % l] for l in (0, 1)]) / 0.05
assert np.allclose(b, np.round(b), atol=1e-3) and np.abs(b).max() <= 12 and np.abs(b).max() >= 1, b
for l in (0, 1):
    del w["layers.%d.mlp.router.expert_bias" % l]
ids = [int(t) for t in open(sys.argv[2]).read().split()]
_, unbiased = score(lambda cfg, w, ids: moe_numpy.forward(s, w, ids), None, w, ids, 32, 32)
biased = json.loads(open(sys.argv[4]).read())["avg_loss"]
assert abs(unbiased - biased) > 1e-5 * biased, (unbiased, biased)
print("ok: the expert biases after 12 steps are whole steps of 0.05 (%d to %d); without them numpy scores %.7f, not %.7f" % (b.min(), b.max(), unbiased, biased))
PY

# expert parallelism: saved at ep=2 dp=2, resumed at ep=4 dp=4, at ep=1 dp=2 and at tp=2 ep=2: the
# losses and load-balancing losses of the uninterrupted run at ep=2; with the distributed
# optimizer (its moments in parts over the ranks that hold the same experts) saved at ep=2 dp=2
# and resumed at ep=2 dp=4, at ep=4 dp=4 without it and at tp=2 ep=2 with it, and resumed with it
# from the save without it
E=("${M[@]}" ${V[softmax]} --tensor-model-parallel-size 1 --log-interval 1 --global-batch-size 16)
"$MPIEXEC" -n 4 "$MGT" train "${E[@]}" --train-iters 14 --expert-model-parallel-size 2 \
  --metrics-file "$tmp/epwhole.jsonl" > "$tmp/ep.log" 2>&1 || { fail "the uninterrupted ep=2 run"; grep error "$tmp/ep.log"; }
"$MPIEXEC" -n 4 "$MGT" train "${E[@]}" --train-iters 12 --expert-model-parallel-size 2 \
  --save "$tmp/ep" > "$tmp/ep.log" 2>&1 || { fail "the ep=2 run to 12"; grep error "$tmp/ep.log"; }
"$MPIEXEC" -n 4 "$MGT" train "${E[@]}" --train-iters 12 --expert-model-parallel-size 2 \
  --use-distributed-optimizer --save "$tmp/epd" > "$tmp/ep.log" 2>&1 || { fail "the ep=2 run to 12, distributed optimizer"; grep error "$tmp/ep.log"; }
for layout in "ep 8 4 1 -" "ep 2 1 1 -" "ep 8 2 2 -" "epd 4 2 1 d" "epd 8 4 1 -" "epd 8 2 2 d" "ep 8 2 1 d"; do
  read -r from np ep tp dist <<< "$layout"
  opt=()
  [ "$dist" = d ] && opt=(--use-distributed-optimizer)
  "$MPIEXEC" -n $np "$MGT" train "${E[@]}" --train-iters 14 --expert-model-parallel-size $ep \
    --tensor-model-parallel-size $tp "${opt[@]}" --load "$tmp/$from" --metrics-file "$tmp/$from$np$ep$tp.jsonl" \
    > "$tmp/ep.log" 2>&1 || { fail "resuming $from at ep=$ep tp=$tp on $np ranks ($dist)"; grep error "$tmp/ep.log"; }
done
# the all-gather dispatcher: the same rows reach the same experts, and its reduce-scatter adds
# zeros only, so the run is the all-to-all one bit for bit
"$MPIEXEC" -n 4 "$MGT" train "${E[@]}" --train-iters 14 --expert-model-parallel-size 2 \
  --moe-token-dispatcher-type allgather --metrics-file "$tmp/epag.jsonl" > "$tmp/epag.log" 2>&1 || { fail "the ep=2 run, all-gather dispatcher"; grep error "$tmp/epag.log"; }
grep -q "rows by all-gather and reduce-scatter" "$tmp/epag.log" || fail "the layout does not name the all-gather dispatcher"
$PY - "$tmp/epwhole.jsonl" "$tmp/epag.jsonl" <<'PY' || fail "the all-gather dispatcher differs from the all-to-all"
import json, sys
a, b = ([{k: v for k, v in r.items() if k in ("iteration", "loss", "load_balancing_loss", "z_loss", "grad_norm")} for r in map(json.loads, open(f)) if "loss" in r] for f in sys.argv[1:])
assert len(a) == 14 and a == b, (a[:2], b[:2])
print("ok: the all-gather dispatcher's 14 losses, auxiliary losses and gradient norms are the all-to-all's, every printed digit")
PY
$PY - "$tmp/epwhole.jsonl" "$tmp"/ep841.jsonl "$tmp"/ep211.jsonl "$tmp"/ep822.jsonl "$tmp"/epd421.jsonl "$tmp"/epd841.jsonl "$tmp"/epd822.jsonl "$tmp"/ep821.jsonl <<'PY' || fail "resumed at another expert-parallel layout"
import json, sys
runs = [{r["iteration"]: (r["loss"], r["load_balancing_loss"], r["grad_norm"]) for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:]]
ref = runs[0]
for r in runs[1:]:
    assert sorted(r) == [13, 14], r
    for k in r:
        assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(r[k], ref[k])), (k, r[k], ref[k])
print("ok: saved at ep=2 dp=2 with and without the distributed optimizer, resumed at ep=4 dp=4, ep=1 dp=2, tp=2 ep=2 dp=2 and ep=2 dp=4, with and without it: losses %s, "
      "grad norms %s as without a stop" % ([round(ref[k][0], 6) for k in (13, 14)], [round(ref[k][2], 4) for k in (13, 14)]))
PY
expect "--expert-model-parallel-size 3 does not divide the data-parallel size 2" \
  "$MPIEXEC" -n 2 "$MGT" train "${E[@]}" --num-experts 6 --expert-model-parallel-size 3
expect "--num-experts 4 is not divisible by --expert-model-parallel-size 8" \
  "$MPIEXEC" -n 8 "$MGT" train "${E[@]}" --expert-model-parallel-size 8
expect "--moe-router-enable-expert-bias chooses by sigmoid scores" \
  "$MPIEXEC" -n 2 "$MGT" train "${E[@]}" --moe-router-enable-expert-bias

# the Mixtral 8x7B and Qwen3-30B-A3B jobs: their flags are accepted and plan the parameters
# counted by hand (a launcher that runs mgt train --dry-run on their tp ranks instead of srun);
# mgt plan counts their published 46.7 B (12.9 B active) and 30.5 B (3.3 B active)
mkdir -p "$tmp/fakejobs"
printf '#!/usr/bin/env bash\nexec "%s" -n "$TP" "%s" train "$@" --tensor-model-parallel-size "$TP" --dry-run\n' \
  "$MPIEXEC" "$MGT" > "$tmp/fakejobs/launch.sh"
chmod +x "$tmp/fakejobs/launch.sh"
# job: name, tp, layers, hidden, heads, groups, head size, q/k norms, experts, expert width, vocab
for job in mixtral-8x7b-tp8:8:32:4096:32:8:128:0:8:14336:32000 qwen3-30b-a3b-tp4:4:48:2048:32:4:128:1:128:768:151936; do
  name=${job%%:*}
  MGT_JOBS=$tmp/fakejobs SLURM_JOB_NAME=$name SLURM_NNODES=1 SAVE_DIR=$tmp/none DEVICE=cpu \
    bash "$TESTS/../jobs/$name.sbatch" > "$tmp/job.log" 2>&1 || { fail "jobs/$name.sbatch"; grep error "$tmp/job.log"; }
  $PY - "$tmp/job.log" "$job" <<'EOPY' || fail "jobs/$name.sbatch: parameters per rank"
import re, sys
log = open(sys.argv[1]).read()
name, tp, L, C, H, G, hd, qk, E, F, V = sys.argv[2].split(":")
tp, L, C, H, G, hd, qk, E, F, V = map(int, (tp, L, C, H, G, hd, qk, E, F, V))
Vl = -(-V // (128 * tp)) * 128  # the vocabulary padded to 128 x tp, one rank's rows
attention = (H // tp) * hd * C + 2 * (G // tp) * hd * C + C * (H // tp) * hd + (2 * hd if qk else 0)
layer = 2 * C + attention + E * C + 3 * E * (F // tp) * C  # norms, attention, router, experts
floats = 2 * Vl * C + L * layer + C  # embeddings and the untied output layer, layers, final norm
mib = re.search(r"^\s+parameters\s+([0-9.]+)$", log, re.M)
assert mib, log[-2000:]
assert abs(float(mib.group(1)) - floats * 4 / 2**20) < 0.2, (mib.group(1), floats * 4 / 2**20)
print("ok: jobs/%s.sbatch plans %s MiB of parameters per rank, as counted" % (name, mib.group(1)))
EOPY
done
"$MGT" plan --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention \
  --num-query-groups 8 --ffn-hidden-size 14336 --num-experts 8 --moe-router-topk 2 --swiglu \
  --normalization RMSNorm --disable-bias-linear --position-embedding-type rope \
  --untie-embeddings-and-output-weights --vocab-size 32000 --seq-length 4096 --nodes 8 > "$tmp/plan.log" 2>&1 &&
  grep -q "46.7 B parameters (12.9 B active: 2 of 8 experts)" "$tmp/plan.log" &&
  echo "ok: mgt plan counts Mixtral 8x7B's 46.7 B parameters, 12.9 B active" ||
  { fail "mgt plan of Mixtral 8x7B"; head -3 "$tmp/plan.log"; }

# mgt plan with expert parallelism: a rank's experts and the all-to-all bytes against a hand count
"$MGT" plan --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --swiglu \
  --ffn-hidden-size 128 --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
  --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --vocab-size 1000 \
  --global-batch-size 8 --nodes 1 --gpus-per-node 4 --tensor-model-parallel-size 1 \
  --micro-batch-size 1 --recompute none --expert-model-parallel-size 2 --json \
  --gpu-memory 1GiB > "$tmp/plan.json" 2>&1 || { fail "mgt plan with experts"; cat "$tmp/plan.json"; }
"$MGT" plan --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --swiglu \
  --ffn-hidden-size 128 --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
  --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --vocab-size 1000 \
  --global-batch-size 8 --nodes 1 --gpus-per-node 4 --tensor-model-parallel-size 1 \
  --micro-batch-size 1 --recompute none --expert-model-parallel-size 2 --json \
  --gpu-memory 1GiB --moe-token-dispatcher-type allgather > "$tmp/plan_ag.json" 2>&1 || { fail "mgt plan, all-gather"; cat "$tmp/plan_ag.json"; }
$PY - "$tmp/plan.json" "$tmp/plan_ag.json" <<'PY' || fail "mgt plan's expert-parallel memory and all-to-all bytes"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
ag = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][0]
assert ag["a2a_bytes"] == r["a2a_bytes"] * 2, (ag["a2a_bytes"], r["a2a_bytes"])  # ep - 1 rows, not (ep - 1) / ep
C, L, T, E, k, F, ep, dp = 64, 2, 32, 4, 2, 64, 2, 4
layer = 2 * C + 4 * C * C + E * C + 3 * (E // ep) * F * C  # norms, attention, router, experts
floats = 1024 * C + L * layer + C  # the vocabulary padded to 128, layers, final norm
assert r["ep"] == ep and r["dp"] == dp, r
assert abs(r["params"] / 4 - floats) <= 0.01 * floats, (r["params"] / 4, floats)
experts = L * 3 * (E // ep) * F * C  # the distributed optimizer: the rest over dp, experts over dp / ep
shard = -(-(floats - experts) // dp) + -(-experts // (dp // ep)) if r["distributed_optimizer"] else floats
assert abs(r["optimizer"] / 8 - shard) <= 0.01 * shard, (r["optimizer"] / 8, shard)
n_micro = 8 // dp
a2a = n_micro * L * 4 * (1 * T * k) * C * 4 * (ep - 1) / ep  # out and back, forward and backward
assert abs(r["a2a_bytes"] - a2a) < 1, (r["a2a_bytes"], a2a)
print("ok: mgt plan at ep=2: %.0f parameters a rank (experts / 2), %.0f Adam moments (%s), %.0f all-to-all "
      "bytes a step, as counted" % (r["params"] / 4, r["optimizer"] / 8,
      "distributed" if r["distributed_optimizer"] else "whole", r["a2a_bytes"]))
PY

# an interval whose every step was skipped (fp16 overflow at the first loss scales) has no
# expert-token spread, as it has no loss: null, not the last interval's values (nor 0)
"$MGT" train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr 3e-3 --eval-iters 0 --log-interval 1 \
  --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --moe-ffn-hidden-size 48 \
  --swiglu --num-experts 4 --moe-router-topk 2 --fp16 --metrics-file "$tmp/skip.jsonl" > "$tmp/skip.log" 2>&1 &&
  $PY - "$tmp/skip.jsonl" <<'PY' || fail "the expert-token spread of skipped intervals"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
skipped = [o for o in lines if o["skipped_iterations"] == 1 and o["loss"] is None]
assert skipped and all(o["expert_tokens_min"] is None and o["expert_tokens_max"] is None for o in skipped), lines
print("ok: %d skipped intervals without an expert-token spread" % len(skipped))
PY

echo "moe: $fails failures"
[ "$fails" = 0 ]
