#!/usr/bin/env bash
# Llama-style models end to end: trained at tp=2, exported as Hugging Face's LlamaForCausalLM
# (sharded into several safetensors files with their index, and as one file), scored by an
# independent float64 numpy Llama (tests/llama_numpy.py, written from transformers'
# modeling_llama) against mgt eval at tp=1 and tp=2, and imported back bit for bit. Two models:
# Llama 3's block (grouped attention, no biases, untied, rope_theta 500000 with Llama 3.1's
# scaling) and the other options (every head its own key/value, biases, tied embeddings); and
# Qwen 3's block (a head size of its own, q/k norms) and Qwen 2's (biases in q, k and v only),
# exported as Qwen3ForCausalLM and Qwen2ForCausalLM.
# Usage: llama.sh MGT MPIEXEC TESTS_DIR
set -u
MGT=$(readlink -f "$1") MPIEXEC=$2 TESTS=$3
. "$TESTS/lib.sh"

$PY -c "import random; random.seed(7); print(' '.join(str((5 + 7 * i) % 128 if i % 5 else random.randrange(128)) for i in range(129)))" > "$tmp/ids.txt"
M=(--mock-data --num-layers 2 --hidden-size 64 --seq-length 32 --micro-batch-size 2
  --global-batch-size 8 --train-iters 12 --lr 3e-3 --eval-iters 0 --log-interval 4
  --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --ffn-hidden-size 96
  --position-embedding-type rope --tensor-model-parallel-size 2)
LLAMA3=(--num-attention-heads 8 --group-query-attention --num-query-groups 2 --disable-bias-linear
  --untie-embeddings-and-output-weights --rotary-base 500000 --use-rope-scaling --rope-scaling-factor 32)
OTHER=(--num-attention-heads 4)
QWEN3=(--num-attention-heads 4 --group-query-attention --num-query-groups 2 --kv-channels 24
  --qk-layernorm --disable-bias-linear --untie-embeddings-and-output-weights --rotary-base 1000000)
QWEN2=(--num-attention-heads 4 --group-query-attention --num-query-groups 2 --disable-bias-linear
  --add-qkv-bias)

# check NAME: mgt eval of NAME's checkpoint at tp=1 and 2 against the numpy Llama of its export
check() {
  local name=$1
  for tp in 1 2; do
    "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/$name" --input-ids "$tmp/ids.txt" \
      --tensor-model-parallel-size $tp > "$tmp/$name.eval$tp" 2>&1 ||
      { fail "mgt eval $name tp=$tp"; cat "$tmp/$name.eval$tp"; }
  done
  $PY "$TESTS/llama_numpy.py" "$tmp/$name.hf" "$tmp/ids.txt" 32 > "$tmp/$name.numpy" ||
    fail "numpy Llama of $name"
  $PY - "$name" "$tmp/$name.eval1" "$tmp/$name.eval2" "$tmp/$name.numpy" <<'PY' || fail "$name: mgt eval and the numpy Llama disagree"
import json, sys
e1, e2, ref = (json.loads([l for l in open(f).read().splitlines() if l.startswith("{")][-1]) for f in sys.argv[2:])
print("%s: mgt eval (tp=1): %.7f over %d tokens; (tp=2): %.7f; numpy float64: %.7f" %
      (sys.argv[1], e1["avg_loss"], e1["tokens"], e2["avg_loss"], ref["avg_loss"]))
assert e1["tokens"] == ref["tokens"] == 128
assert abs(e1["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
assert abs(e2["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
PY
}

for name in llama3 other qwen3 qwen2; do
  extra=("${LLAMA3[@]}")
  [ $name = other ] && extra=("${OTHER[@]}")
  [ $name = qwen3 ] && extra=("${QWEN3[@]}")
  [ $name = qwen2 ] && extra=("${QWEN2[@]}")
  "$MPIEXEC" -n 2 "$MGT" train "${M[@]}" "${extra[@]}" --save "$tmp/$name" \
    --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1 || { fail "training $name"; cat "$tmp/$name.log"; }
done
# 16-bit GEMM inputs (bf16; fp16 with dynamic loss scaling) train Llama 3's block as fp32 does
for p in bf16 fp16; do
  "$MPIEXEC" -n 2 "$MGT" train "${M[@]}" "${LLAMA3[@]}" --$p --initial-loss-scale 4096 \
    --metrics-file "$tmp/$p.jsonl" > "$tmp/$p.log" 2>&1 ||
    { fail "training llama3 with --$p"; grep error "$tmp/$p.log"; }
done
$PY - "$tmp/llama3.jsonl" "$tmp/bf16.jsonl" "$tmp/fp16.jsonl" <<'EOPY' || fail "16-bit training of llama3 strays from fp32"
import json, sys
runs = [{r["iteration"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:]]
ref = runs[0]
assert sorted(ref) == [4, 8, 12], ref
for r in runs[1:]:
    assert sorted(r) == sorted(ref) and all(abs(r[k] - ref[k]) <= 2e-2 * ref[k] for k in ref), (ref, r)
print("ok: bf16 and fp16 losses %s within 2%% of fp32's %s" % ([round(runs[1][12], 4), round(runs[2][12], 4)], round(ref[12], 4)))
EOPY

# resumed on another layout (query, key_value, gate and up resharded): the same losses
for tp in 2 1; do
  "$MPIEXEC" -n 2 "$MGT" train "${M[@]}" "${LLAMA3[@]}" --tensor-model-parallel-size $tp --train-iters 14 \
    --log-interval 1 --load "$tmp/llama3" --metrics-file "$tmp/resume$tp.jsonl" > "$tmp/resume.log" 2>&1 ||
    { fail "resuming llama3 at tp=$tp"; grep error "$tmp/resume.log"; }
done
$PY - "$tmp/resume2.jsonl" "$tmp/resume1.jsonl" <<'PY' || fail "llama3 resumed at tp=1 differs from tp=2"
import json, sys
a, b = ({r["iteration"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:])
assert sorted(a) == sorted(b) == [13, 14], (a, b)
assert all(abs(a[k] - b[k]) <= 1e-5 * abs(a[k]) for k in a), (a, b)
print("ok: resumed at tp=1 dp=2 as at tp=2: losses %s" % [round(a[k], 6) for k in sorted(a)])
PY

# Llama 3's block, sharded: 64 KiB files, each tensor in the file the index maps it to
"$MGT" ckpt export --format hf --load "$tmp/llama3" --output "$tmp/llama3.hf" --max-shard-size 65536 ||
  fail "export llama3"
$PY - "$tmp/llama3.hf" <<'PY' || fail "the sharded export is not Hugging Face's layout"
import json, os, struct, sys
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_key_value_heads"] == 2
assert cfg["rope_scaling"]["rope_type"] == "llama3" and cfg["rope_scaling"]["factor"] == 32
assert cfg["tie_word_embeddings"] is False and cfg["attention_bias"] is False
index = json.load(open(d + "/model.safetensors.index.json"))
files = sorted(set(index["weight_map"].values()))
assert len(files) > 3 and not os.path.exists(d + "/model.safetensors"), files
total = 0
for f in files:
    raw = open(d + "/" + f, "rb").read()
    h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    for k, v in h.items():
        if k != "__metadata__":
            assert index["weight_map"][k] == f, (k, f)
            total += v["data_offsets"][1] - v["data_offsets"][0]
assert total == index["metadata"]["total_size"]
assert "lm_head.weight" in index["weight_map"]
assert "model.layers.1.self_attn.k_proj.weight" in index["weight_map"]
print("ok: %d files, %d tensors, %d bytes" % (len(files), len(index["weight_map"]), total))
PY
check llama3

# the other options in one file
"$MGT" ckpt export --format hf --load "$tmp/other" --output "$tmp/other.hf" || fail "export other"
[ -e "$tmp/other.hf/model.safetensors" ] && [ ! -e "$tmp/other.hf/model.safetensors.index.json" ] ||
  fail "a small export is not one model.safetensors"
check other

# Qwen 3 and Qwen 2, each in one file, under their own classes
for name in qwen3 qwen2; do
  "$MGT" ckpt export --format hf --load "$tmp/$name" --output "$tmp/$name.hf" || fail "export $name"
  $PY - "$tmp/$name.hf/config.json" $name <<'PY' || fail "$name: config.json"
import json, sys
c, name = json.load(open(sys.argv[1])), sys.argv[2]
want = {"qwen3": ("Qwen3ForCausalLM", 24), "qwen2": ("Qwen2ForCausalLM", 16)}[name]
assert c["architectures"] == [want[0]] and c["model_type"] == name and c["head_dim"] == want[1], c
print("ok: %s exported as %s, head_dim %d" % (name, want[0], want[1]))
PY
  check $name
done

# import back: the same tensors bit for bit, the same loss; a sharded directory exported again
# as one file leaves no index behind
for name in llama3 other qwen3 qwen2; do
  "$MGT" ckpt import --format hf --input "$tmp/$name.hf" --save "$tmp/$name.imp" > /dev/null ||
    fail "import $name"
  # the import, loaded at tp=2, scores the ids as the trained checkpoint did
  "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/$name.imp" --input-ids "$tmp/ids.txt" \
    --tensor-model-parallel-size 2 > "$tmp/$name.impeval" 2>&1 || fail "eval of the $name import at tp=2"
  [ "$(grep '^{' "$tmp/$name.impeval" | tail -1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["avg_loss"])')" = \
    "$(grep '^{' "$tmp/$name.eval2" | tail -1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["avg_loss"])')" ] &&
    echo "ok: the $name import scores as the checkpoint at tp=2" || fail "the $name import scores otherwise at tp=2"
  $PY - "$tmp/$name" "$tmp/$name.imp" <<'PY' || fail "$name: the import differs from the checkpoint"
import glob, sys
import h5py, numpy as np
a, b = (sorted(glob.glob(d + "/iter_*.h5"))[-1] for d in sys.argv[1:])
n = 0
with h5py.File(a, "r") as p, h5py.File(b, "r") as q:
    names = []
    q["model"].visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
    for k in names:
        x, y = p["model"][k][()], q["model"][k][()]
        assert x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32)), k
        n += 1
    assert n == len([1 for _ in names]) and n > 10
print("ok: %d model tensors imported bit for bit" % n)
PY
done
"$MGT" ckpt export --format hf --load "$tmp/llama3.imp" --output "$tmp/llama3.hf" > /dev/null ||
  fail "export again"
[ -e "$tmp/llama3.hf/model.safetensors" ] && [ ! -e "$tmp/llama3.hf/model.safetensors.index.json" ] ||
  fail "the stale index of the sharded export is left beside model.safetensors"

# transformers 5 writes rope_theta and rope_scaling as one object, rope_parameters: the same model
rm -rf "$tmp/v5.hf" && cp -r "$tmp/llama3.hf" "$tmp/v5.hf"
$PY - "$tmp/v5.hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_parameters"] = dict(c.pop("rope_scaling"), rope_theta=c.pop("rope_theta"))
json.dump(c, open(sys.argv[1], "w"))
PY
"$MGT" ckpt import --format hf --input "$tmp/v5.hf" --save "$tmp/v5.imp" > /dev/null 2>&1 || fail "import of rope_parameters"
$PY - "$tmp/llama3.imp" "$tmp/v5.imp" <<'PY' || fail "rope_parameters imported another rotary embedding"
import glob, h5py, json, sys
a, b = (json.loads(h5py.File(sorted(glob.glob(d + "/iter_*.h5"))[-1], "r").attrs["config"]) for d in sys.argv[1:])
keys = ("rotary_base", "use_rope_scaling", "rope_scaling_factor")
assert a["use_rope_scaling"] and all(a[k] == b[k] for k in keys), [(k, a[k], b[k]) for k in keys]
print("ok: rope_parameters (transformers 5) imports as rope_theta and rope_scaling do: %s"
      % [(k, b[k]) for k in keys])
PY

# what Llama's config.json may say that the model cannot be
mkdir -p "$tmp/bad"
cp "$tmp/other.hf/model.safetensors" "$tmp/bad/"
bad() {
  $PY - "$tmp/other.hf/config.json" "$tmp/bad/config.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
}
bad "c['hidden_act'] = 'gelu'"
expect 'hidden_act must be "silu"' "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0}"
expect 'rope_scaling is implemented for rope_type "default" and "llama3" only' "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['rope_parameters'] = {'rope_type': 'yarn', 'rope_theta': 1e4, 'factor': 4.0}; c.pop('rope_scaling', None)"
expect 'rope_parameters is implemented for rope_type "default" and "llama3" only' "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['rope_parameters'] = {'rope_type': 'default', 'rope_theta': 1e4}; c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0}"
expect "both rope_parameters and rope_scaling: give one" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['attention_bias'] = False"
expect "attention_bias false and mlp_bias true" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['model_type'] = 'qwen2'; c['architectures'] = ['Qwen2ForCausalLM']; c['head_dim'] = 32"
expect "head_dim 32: Qwen 2's head size is hidden_size / num_attention_heads" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['model_type'] = 'qwen3'; c['architectures'] = ['Qwen3ForCausalLM']; c['attention_bias'] = True"
expect "attention_bias true: Qwen 3 with biases in the attention only is not implemented" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['model_type'] = 'qwen3'; c['architectures'] = ['LlamaForCausalLM']"
expect "architecture LlamaForCausalLM is not a Qwen3 class, as model_type qwen3 says" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['use_sliding_window'] = True"
expect "use_sliding_window: sliding-window attention is not implemented" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['num_key_value_heads'] = 3"
expect "config.json: --num-query-groups 3 does not divide --num-attention-heads 4" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['num_hidden_layers'] = 65535; c['vocab_size'] = 1 << 20"
expect "config.json describes" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
bad "c['tie_word_embeddings'] = 'yes'"
expect "tie_word_embeddings must be true or false" "$MGT" ckpt import --format hf --input "$tmp/bad" --save "$tmp/x"
[ ! -e "$tmp/x" ] || fail "a refused import left a checkpoint"
mkdir -p "$tmp/badidx" && cp "$tmp/llama3.imp/../llama3.hf/config.json" "$tmp/badidx/"
echo '{"weight_map": {"model.norm.weight": "../model.safetensors"}}' > "$tmp/badidx/model.safetensors.index.json"
expect "weight_map names '../model.safetensors', not a file of the directory" "$MGT" ckpt import --format hf --input "$tmp/badidx" --save "$tmp/x"

# the Llama 3 8B, 3.2 3B and 1B jobs: their flags are accepted and plan the parameters counted by
# hand (a launcher that runs mgt train --dry-run on their tp ranks instead of srun); mgt plan
# counts Meta's 8,030,261,248 for 8B
mkdir -p "$tmp/fakejobs"
printf '#!/usr/bin/env bash\nexec "%s" -n "$TP" "%s" train "$@" --tensor-model-parallel-size "$TP" --dry-run\n' \
  "$MPIEXEC" "$MGT" > "$tmp/fakejobs/launch.sh"
chmod +x "$tmp/fakejobs/launch.sh"
# job: name, tp, layers, hidden, heads, ffn, tied
for job in llama3-8b-tp8:8:32:4096:32:14336:0 llama3.2-3b-tp2:2:28:3072:24:8192:1 llama3.2-1b:1:16:2048:32:8192:1; do
  IFS=: read -r name tp L C H F tied <<< "$job"
  MGT_JOBS=$tmp/fakejobs SLURM_JOB_NAME=$name SLURM_NNODES=1 SAVE_DIR=$tmp/none DEVICE=cpu \
    bash "$TESTS/../jobs/$name.sbatch" > "$tmp/job.log" 2>&1 || { fail "jobs/$name.sbatch"; grep error "$tmp/job.log"; }
  $PY - "$tmp/job.log" "$job" <<'EOPY' || fail "jobs/$name.sbatch: parameters per rank"
import re, sys
log = open(sys.argv[1]).read()
name, tp, L, C, H, F, tied = sys.argv[2].split(":")
tp, L, C, H, F, tied, V, G = int(tp), int(L), int(C), int(H), int(F), int(tied), 128256, 8
hd = C // H
Vl = -(-V // (128 * tp)) * 128  # the vocabulary padded to 128 x tp, one rank's rows
layer = 2 * C + (C // tp) * C + 2 * (G // tp) * hd * C + C * (C // tp) + 3 * (F // tp) * C
floats = (1 if tied else 2) * Vl * C + L * layer + C  # embeddings (and output layer), layers, norm
mib = re.search(r"^\s+parameters\s+([0-9.]+)$", log, re.M)
assert mib, log[-2000:]
assert abs(float(mib.group(1)) - floats * 4 / 2**20) < 0.06, (mib.group(1), floats * 4 / 2**20)
print("ok: jobs/%s.sbatch plans %s MiB of parameters per rank, as counted" % (name, mib.group(1)))
EOPY
done
"$MGT" plan --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention \
  --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --disable-bias-linear \
  --untie-embeddings-and-output-weights --position-embedding-type rope --seq-length 8192 \
  --vocab-size 128256 --global-batch-size 64 --nodes 2 --gpus-per-node 8 --top 40 > "$tmp/plan.log" 2>&1 ||
  { fail "mgt plan of Llama 3 8B"; cat "$tmp/plan.log"; }
grep -q "8.03 B parameters" "$tmp/plan.log" && echo "ok: mgt plan counts Llama 3 8B's 8.03 B parameters" ||
  { fail "mgt plan's parameter count of Llama 3 8B"; head -3 "$tmp/plan.log"; }
expect "--num-query-groups 3 does not divide --num-attention-heads 32" "$MGT" plan --num-attention-heads 32 --hidden-size 4096 --group-query-attention --num-query-groups 3

[ $fails = 0 ] && echo "llama: all checks passed" || { echo "llama: $fails failures"; exit 1; }
