#!/usr/bin/env bash
# mgt plan: its memory against parameters counted by hand for two configurations (tp=1; tp=2
# with vocabulary padding and the distributed optimizer at dp=4), the activations sequence
# parallelism saves at tp=2 counted by hand, and against what mgt train --dry-run prints for
# the same layouts; its step-time model against the weak
# scaling the Megatron-LM paper measured (Figure 5: 1.2B-8.3B GPT-2 on 1-8 GPUs and on
# 64-512 GPUs, 77% and 74% stated in its text, the rest read off the figure; and the README's
# 60% for 8.3B without overlapped gradient reduction), with V100
# and DGX-2H constants; --dry-run's advice (which recomputation fits in the memory it reads,
# and the 16-bit weight copies it counts); and its refusals. Usage: plan.sh MGT MPIEXEC
set -u
MGT=$1 MPIEXEC=$2
. "$(dirname "$0")/lib.sh"

# ---- memory: parameters by hand ----
A="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --vocab-size 128
  --make-vocab-size-divisible-by 16 --global-batch-size 8"
B="--num-layers 3 --hidden-size 128 --num-attention-heads 8 --seq-length 64 --vocab-size 1000
  --make-vocab-size-divisible-by 16 --global-batch-size 32"
"$MGT" plan $A --nodes 1 --gpus-per-node 1 --micro-batch-size 2 --recompute none --json \
  --gpu-memory 1GiB >"$tmp/a.json" 2>&1 || { fail "plan A"; cat "$tmp/a.json"; }
"$MGT" plan $B --nodes 1 --gpus-per-node 8 --tensor-model-parallel-size 2 --micro-batch-size 4 \
  --recompute full --use-distributed-optimizer --json --gpu-memory 1GiB >"$tmp/b.json" 2>&1 ||
  { fail "plan B"; cat "$tmp/b.json"; }
$PY - "$tmp/a.json" "$tmp/b.json" <<'PY' || fail "memory against the hand count"
import json, sys
def row(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")][0]
def floats(C, L, F, Vp, P, tp):  # GPT's flat buffers on one tensor-parallel rank
    layer = 2 * C + (3 * C // tp) * C + 3 * C // tp + C * (C // tp) + C + 2 * C \
        + (F // tp) * C + F // tp + C * (F // tp) + C
    return (Vp // tp) * C + P * C + L * layer + 2 * C
a, b = row(sys.argv[1]), row(sys.argv[2])
n = floats(64, 2, 256, 128, 16, 1)  # 128 is already a multiple of 16
assert a["params"] == 4 * n and a["grads"] == 4 * n and a["optimizer"] == 8 * n, (a, n)
print("ok: A: %d parameters, 4 bytes each of weights and gradients, 8 of Adam" % n)
n = floats(128, 3, 512, 1024, 64, 2)  # 1000 padded to a multiple of 16 x tp = 32
shard = -(-n // 4)                   # dp = 8 GPUs / tp 2
assert b["tp"] == 2 and b["dp"] == 4 and b["distributed_optimizer"], b
assert b["params"] == 4 * n and b["optimizer"] == 8 * shard and b["grads"] == 4 * n + 4 * shard, (b, n)
print("ok: B at tp=2, dp=4 with the distributed optimizer: %d parameters per rank, Adam on %d" % (n, shard))
PY

# ---- memory: sequence parallelism at tp=2 by hand: per layer the two LayerNorm outputs and
# their means and deviations, the mid-layer residual; the L+1 residual stream buffers, the final
# LayerNorm's statistics and the residual gradient hold half the rows; one block of rows and the
# LayerNorms' 2C gradient sum are added ----
"$MGT" plan $B --nodes 1 --gpus-per-node 2 --tensor-model-parallel-size 2 --micro-batch-size 4 \
  --recompute none --json --gpu-memory 1GiB >"$tmp/sp.json" 2>&1 || { fail "plan B sp"; cat "$tmp/sp.json"; }
$PY - "$tmp/sp.json" <<'PY' || fail "sequence-parallel memory against the hand count"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
on = [r for r in rows if r["sequence_parallel"] and not r["distributed_optimizer"]]
off = [r for r in rows if not r["sequence_parallel"] and not r["distributed_optimizer"]]
assert len(on) == 1 and len(off) == 1, rows
L, C, N, tp = 3, 128, 4 * 64, 2
kept = L * (3 * N * C + 4 * N) + (L + 1) * N * C + 2 * N + N * C
saved = 4 * (kept - kept // tp - (N // tp * C + 2 * C))
got = off[0]["activations"] - on[0]["activations"]
assert got == saved, (got, saved)
print("ok: --sequence-parallel at tp=2 saves %d bytes of activations, as counted by hand" % saved)
PY

# ---- memory: the same as --dry-run on GPUs (mgt plan's: their attention, their 16-bit
# copies) for five layouts ----
for spec in "1 1 2 none no" "2 2 4 selective yes" "2 4 2 full no" "2 2 4 none no sp" "1 2 2 none no bf16"; do
  set -- $spec
  both=(--tensor-model-parallel-size $1 --micro-batch-size $3)
  tflags=(--recompute-granularity $4 --device cuda)
  pflags=(--nodes 1 --gpus-per-node $(($1 * $2)) --recompute $4)
  [ "$5" = yes ] && both+=(--use-distributed-optimizer)
  [ "${6:-}" = sp ] && both+=(--sequence-parallel)
  [ "${6:-}" = bf16 ] && both+=(--bf16)
  "$MPIEXEC" -n $(($1 * $2)) "$MGT" train --mock-data $B "${both[@]}" "${tflags[@]}" --dry-run >"$tmp/dry" 2>&1 ||
    { fail "dry-run $spec"; tail -3 "$tmp/dry"; continue; }
  "$MGT" plan $B "${both[@]}" "${pflags[@]}" --json --gpu-memory 1GiB --top 1000 >"$tmp/p.json" 2>&1 ||
    { fail "plan $spec"; tail -3 "$tmp/p.json"; continue; }
  $PY - "$tmp/dry" "$tmp/p.json" "$1" "$2" "$5" "${6:-}" "$3" "$4" <<'PY' && echo "ok: plan == --dry-run at tp=$1 dp=$2, micro $3, recompute $4, distributed optimizer $5${6:+, $6}; traffic as counted by hand" || fail "plan vs --dry-run ($spec)"
import json, re, sys
total = float(re.search(r"total\s+([0-9.]+)", open(sys.argv[1]).read()).group(1))
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
r = [r for r in rows if r["tp"] == int(sys.argv[3]) and r["dp"] == int(sys.argv[4]) and
     r["distributed_optimizer"] == (sys.argv[5] == "yes") and
     r["sequence_parallel"] == (sys.argv[6] == "sp")]
assert len(r) == 1, r
assert abs(r[0]["memory"] / 1048576 - total) <= 0.05, (r[0]["memory"] / 1048576, total)
# traffic per rank and step: the collectives counted by hand (B: 3 layers, hidden 128,
# sequence 64, global batch 32), one rank's share of ring all-reduces of fp32 elements
tp, dp, mb, rec, sp = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[7]), sys.argv[8], sys.argv[6] == "sp"
ring = lambda b, n: 2 * (n - 1) / n * b
per_layer = 4 + (2 if rec == "full" else 0) + (1 if sp and tp > 1 else 0)
want_tp = 32 / (mb * dp) * (per_layer * 3 + 2) * ring(mb * 64 * 128 * 4, tp)
want_dp = ring(r[0]["params"], dp)
assert abs(r[0]["tp_bytes"] - want_tp) < 1 and abs(r[0]["dp_bytes"] - want_dp) < 1, (r[0], want_tp, want_dp)
t = re.search(r"traffic per rank and step \(fp32\): ([0-9.]+) GB inside a node, ([0-9.]+) GB across nodes; "
              r"tensor-parallel ([0-9.]+) GB .*data-parallel ([0-9.]+) GB", open(sys.argv[1]).read())
assert t, "no traffic line in --dry-run"
inside, across, tpg, dpg = map(float, t.groups())
assert across == 0 and abs(tpg - want_tp / 1e9) < 6e-4 and abs(dpg - want_dp / 1e9) < 6e-4, t.groups()
assert r[0]["inter_node_bytes"] == 0 and abs(r[0]["intra_node_bytes"] - want_tp - want_dp) < 1
PY
done
# what the GPU holds and the CPU does not: fp32 attention materialized (on CPUs in tiles), and
# 16-bit weight copies in 2 bytes (emulated CPU bf16: 4)
for prec in "" --bf16; do
  "$MGT" plan $B --nodes 1 --gpus-per-node 1 --micro-batch-size 4 --recompute none $prec --json \
    --gpu-memory 1GiB >"$tmp/g.json" 2>&1 || { fail "plan $prec"; cat "$tmp/g.json"; }
  "$MGT" train --mock-data $B --micro-batch-size 4 $prec --cpu-gemm emulated --dry-run \
    >"$tmp/cpu" 2>&1 || { fail "dry-run cpu $prec"; tail -3 "$tmp/cpu"; }
  $PY - "$tmp/g.json" "$tmp/cpu" "$prec" <<'PY' && echo "ok: mgt plan${prec:+ $prec} sizes a GPU's memory, more than the CPU's" || fail "plan on GPUs $prec"
import json, re, sys
g = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
t = open(sys.argv[2]).read()
cpu = float(re.search(r"total\s+([0-9.]+)", t).group(1))
acts = float(re.search(r"^  activations\s+([0-9.]+)", t, re.M).group(1))
# B: 3 layers, 8 heads, sequence 64, micro-batch 4: the probabilities and their dropout mask
assert g["activations"] / 2**20 > acts, (g["activations"] / 2**20, acts)
if sys.argv[3]:
    copies = float(re.search(r"^  16-bit weights +([0-9.]+)", t, re.M).group(1))
    p = g["params"] / 2**20
    assert abs(copies - p) < 0.1 and g["memory"] / 2**20 < cpu + (g["activations"] / 2**20 - acts), (copies, p)
PY
done

# ---- layouts mgt train refuses are not planned: widths tensor parallelism splits ----
W="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --global-batch-size 8
  --nodes 1 --gpus-per-node 4 --json --top 1000"
for f in "--ffn-hidden-size 254" "--num-experts 4 --moe-ffn-hidden-size 98 --disable-bias-linear" \
  "--num-experts 4 --moe-shared-expert-intermediate-size 34 --disable-bias-linear"; do
  "$MGT" plan $W $f >"$tmp/w.json" 2>&1 || { fail "plan $f"; cat "$tmp/w.json"; continue; }
  tps=$($PY -c "import json,sys; print(sorted({json.loads(l)['tp'] for l in open(sys.argv[1]) if l.startswith('{')}))" "$tmp/w.json")
  [ "$tps" = "[1, 2]" ] && echo "ok: $f: tp 1 and 2 planned, not 4" || fail "$f: planned tp $tps"
  expect "not divisible by --tensor-model-parallel-size 4" "$MGT" plan $W $f --tensor-model-parallel-size 4
done
"$MGT" plan --num-layers 2 --hidden-size 100 --num-attention-heads 8 --kv-channels 16 --seq-length 32 \
  --global-batch-size 8 --nodes 1 --gpus-per-node 1 --gpu-memory 1GiB >"$tmp/kv" 2>&1 &&
  echo "ok: a head size given (--kv-channels) where the heads do not divide the width, as mgt train" ||
  { fail "plan --kv-channels"; tail -2 "$tmp/kv"; }

# ---- expert parallelism: --dry-run's traffic is the plan's (the experts' gradients over dp / ep,
# the all-to-alls) ----
E="--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 64 --vocab-size 1000
  --global-batch-size 8 --num-experts 4 --disable-bias-linear --micro-batch-size 2"
for ep in 2 4; do
  "$MPIEXEC" -n 4 "$MGT" train --mock-data $E --expert-model-parallel-size $ep --device cuda \
    --dry-run >"$tmp/ed" 2>&1 || { fail "dry-run ep $ep"; tail -3 "$tmp/ed"; continue; }
  "$MGT" plan $E --expert-model-parallel-size $ep --nodes 1 --gpus-per-node 4 --json --top 1000 \
    --recompute none >"$tmp/ep.json" 2>&1 || { fail "plan ep $ep"; tail -3 "$tmp/ep.json"; continue; }
  $PY - "$tmp/ed" "$tmp/ep.json" $ep <<'PY' && echo "ok: ep=$ep: --dry-run's traffic is the plan's" || fail "ep=$ep traffic"
import json, re, sys
t = open(sys.argv[1]).read()
m = re.search(r"data-parallel ([0-9.]+) GB .*of which the experts' ([0-9.]+) GB over (\d+) ranks; "
              r"expert all-to-all ([0-9.]+) GB", t)
assert m, t[-600:]
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
r = [r for r in rows if r["tp"] == 1 and r["dp"] == 4 and not r["distributed_optimizer"]][0]
dp, experts, edp, a2a = float(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))
ep = int(sys.argv[3])
assert edp == 4 // ep and r["ep"] == ep, (edp, r["ep"])
assert abs(dp - r["dp_bytes"] / 1e9) < 6e-4 and abs(a2a - r["a2a_bytes"] / 1e9) < 6e-4, (m.groups(), r)
assert (experts == 0) == (ep == 4), experts  # at dp = ep each expert lives on one rank
PY
done

# ---- the step-time model against the paper's weak scaling ----
# V100: 39 TFLOP/s (the paper's own 1-GPU rate, recomputation counted), 900 GB/s HBM2; DGX-2H:
# 16 GPUs per node, NVSwitch all-reduce at 70 GB/s per GPU and 8 EDR adapters at 50 GB/s per node
# (effective rates, about half the links' nominal 150 GB/s and 100 GB/s); fp16 on the wire;
# activation checkpointing (--recompute full), batch 8 per model-parallel group. 1.2B and 2.5B
# ran with Megatron-LM's own DDP (reduction after backward), 4.2B and 8.3B with torch's
# (overlapped): --dp-overlap 0 and 1.
C="--gemm-tflops 39 --nvlink-gbps 70 --network-gbps 50 --memory-gbps 900 --comm-bytes 2
  --gpu-memory 1TB --recompute full --seq-length 1024 --vocab-size 51200 --micro-batch-size 8 --json"
for cfg in "1536 16 40 1 0" "1920 20 54 2 0" "2304 24 64 4 1" "3072 32 72 8 1" "3072 32 72 8 0"; do
  set -- $cfg
  M="--hidden-size $1 --num-attention-heads $2 --num-layers $3 --tensor-model-parallel-size $4"
  "$MGT" plan $C $M --nodes 1 --gpus-per-node $4 --global-batch-size 8 --dp-overlap $5 \
    >"$tmp/mp_$4_$5.json" 2>&1 || { fail "plan mp $cfg"; tail -2 "$tmp/mp_$4_$5.json"; }
  "$MGT" plan $C $M --nodes $((4 * $4)) --gpus-per-node 16 --global-batch-size 512 --dp-overlap $5 \
    >"$tmp/dp_$4_$5.json" 2>&1 || { fail "plan mp+dp $cfg"; tail -2 "$tmp/dp_$4_$5.json"; }
done
$PY - "$tmp" <<'PY' || fail "the paper's weak scaling"
import json, sys
d = sys.argv[1]
def eff(f):  # the paper's runs had no sequence parallelism
    rows = [json.loads(l) for l in open(d + f) if l.startswith("{")]
    return [r for r in rows if not r["sequence_parallel"]][0]["efficiency"]
base = eff("/mp_1_0.json")
paper = [("mp", 1, 0, 100), ("mp", 2, 0, 95), ("mp", 4, 1, 82), ("mp", 8, 1, 77),
         ("dp", 1, 0, 96), ("dp", 2, 0, 83), ("dp", 4, 1, 79), ("dp", 8, 1, 74), ("dp", 8, 0, 60)]
worst = 0
for kind, t, ov, want in paper:
    got = 100 * eff("/%s_%d_%d.json" % (kind, t, ov)) / base
    worst = max(worst, abs(got - want))
    print("   %-5s %d-way model parallel%s: %5.1f%% of linear scaling (paper %d%%)"
          % ("mp" if kind == "mp" else "mp+dp", t, ", reduction after backward" if kind == "dp" and not ov else "", got, want))
assert worst <= 6, worst
print("ok: the step-time model is within %.1f points of the paper's weak scaling" % worst)
PY

# ---- --dry-run's advice: what fits in the memory it reads ----
# The verdicts against the totals it prints and the memory it names, and the least
# recomputation that fits being the first that does; a model of about a trillion parameters
# fits nowhere. The 16-bit weight copies (--bf16) are counted in the plan.
for spec in "$B --micro-batch-size 4" "$B --micro-batch-size 4 --bf16" \
  "--num-layers 128 --hidden-size 25600 --num-attention-heads 160 --seq-length 2048 --micro-batch-size 1"; do
  "$MPIEXEC" -n 2 "$MGT" train --mock-data $spec --dry-run >"$tmp/fit" 2>&1 ||
    { fail "dry-run $spec"; tail -3 "$tmp/fit"; continue; }
  $PY - "$tmp/fit" <<'PY' && echo "ok: --dry-run's advice follows its numbers ($spec)" || fail "--dry-run advice ($spec)"
import re, sys
t = open(sys.argv[1]).read()
avail = float(re.search(r"memory available per rank: ([0-9.]+) MiB \(this node's available", t).group(1))
rows = re.findall(r"^  (without|selective|full) recomputation +([0-9.]+)  (fits|does not fit)$", t, re.M)
assert [r[0] for r in rows] == ["without", "selective", "full"], rows
for name, total, verdict in rows:
    assert (float(total) <= avail + 0.05) == (verdict == "fits"), (name, total, avail, verdict)
fits = [r[0] for r in rows if r[2] == "fits"]
m = re.search(r"least recomputation that fits: (\w+)", t)
if fits:
    assert m and m.group(1) == {"without": "none"}.get(fits[0], fits[0]), (fits, m and m.group(0))
else:
    assert not m and "nothing fits" in t
copies = re.search(r"^  16-bit weights +([0-9.]+)", t, re.M)
print("   available %.0f MiB; fits: %s; 16-bit weights: %s" % (avail, fits or "nothing", copies.group(1) if copies else "none"))
PY
done
grep -q "16-bit weights" "$tmp/fit" && fail "the fp32 trillion-parameter plan counts 16-bit weights"
# the copies are floats under emulated bf16 GEMMs (as many bytes as the parameters), bf16 under
# native ones (half), which the default is where the CPU has bf16 units
"$MGT" train --mock-data --num-layers 1 --hidden-size 64 --num-attention-heads 4 --train-iters 1 \
  --bf16 --eval-iters 0 >"$tmp/units" 2>&1
native=0
grep -q "bf16 GEMMs on oneDNN" "$tmp/units" && native=1
for how in "--cpu-gemm emulated:4" ":$((4 - 2 * native))"; do
  "$MPIEXEC" -n 2 "$MGT" train --mock-data $B --micro-batch-size 4 --bf16 ${how%:*} --dry-run \
    >"$tmp/fitb" 2>&1
  $PY - "$tmp/fitb" "${how#*:}" <<'PY' &&
import re, sys
t = open(sys.argv[1]).read()
w = float(re.search(r"^  16-bit weights +([0-9.]+)", t, re.M).group(1))
p = float(re.search(r"^  parameters +([0-9.]+)", t, re.M).group(1))
assert abs(w - p * int(sys.argv[2]) / 4) <= 0.1, (w, p)
PY
    echo "ok: --bf16 ${how%:*} plans ${how#*:} bytes of 16-bit weight copies per parameter on the CPU" ||
    fail "16-bit weights in the plan (${how%:*})"
done

# ---- refusals ----
expect "unknown unit" "$MGT" plan $A --gpu-memory 80Gb
expect "not a size" "$MGT" plan $A --gpu-memory lots
expect "fits in 64KiB per GPU" "$MGT" plan $A --gpu-memory 64KiB
expect "not divisible by --num-attention-heads" "$MGT" plan $A --num-attention-heads 5
# the model's flags are mgt train's own rows: every value one accepts the other does, and the
# refusals are the same line (the ranges drifted apart when they were declared twice)
same=0 cases=0
while read -r flag v; do
  cases=$((cases + 1))
  "$MGT" plan $A --top 1 --tensor-model-parallel-size 1 --micro-batch-size 1 --recompute none \
    "$flag" "$v" > "$tmp/p" 2>&1
  "$MGT" train --mock-data --dry-run --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    "$flag" "$v" > "$tmp/t" 2>&1
  pe=$(grep -o "mgt: error: $flag[:=].*" "$tmp/p") te=$(grep -o "mgt: error: $flag[:=].*" "$tmp/t")
  [ "$pe" = "$te" ] && same=$((same + 1)) || fail "$flag $v: plan says '$pe', train '$te'"
done << 'CASES'
--num-layers 65535
--num-layers 65536
--num-layers 0
--vocab-size 1073741824
--vocab-size 1073741825
--ffn-hidden-size 0
--num-attention-heads 65537
--max-position-embeddings 0
--num-query-groups -1
--rotary-base 0.5
--layernorm-epsilon 2
--normalization Foo
--position-embedding-type alibi
--model t5
--make-vocab-size-divisible-by 0
--global-batch-size 0
--seq-length 1048577
CASES
[ $same = $cases ] && echo "ok: mgt plan and mgt train accept and refuse the same model flag values ($cases cases)"
"$MPIEXEC" -n 2 "$MGT" plan $A --gpus-per-node 2 --gpu-memory 1GiB --top 3 >"$tmp/two" 2>&1 &&
  [ "$(grep -c "fastest first" "$tmp/two")" = 1 ] && echo "ok: under mpiexec one rank prints the plan" ||
  { fail "mgt plan on 2 ranks"; cat "$tmp/two"; }
echo "plan: $fails failures"
[ $fails = 0 ]
