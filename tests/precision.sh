#!/usr/bin/env bash
# Mixed precision on the CPU backend, which rounds GEMM inputs exactly as a GPU's 16-bit
# GEMMs do (emulated), or under --bf16 multiplies them on the CPU's bf16 units where it has
# them (native, the default there). Usage: precision.sh MGT MPIEXEC
#  - --bf16 trains within 2e-2 of the fp32 losses, and tp=2 within 1e-3 of tp=1 (16-bit
#    rounding turns float32 reduction-order differences into larger ones);
#  - --fp16 from the default scale 2^32 overflows, skips those steps and halves the scale
#    (after the hysteresis) until it fits, then trains with at most a few more skips;
#  - with a fixed --loss-scale that fits, fp16 never skips and stays within 2e-2 of fp32;
#  - native bf16 GEMMs track the emulated ones within 1e-2 over 300 iterations, also with
#    flash attention's tiles (head dim 32, ragged tiles of 64 keys); a CPU without
#    bf16 units says so on the layout line and refuses --cpu-gemm native;
#  - fp32 GEMMs through oneDNN's matmul (--cpu-gemm-fp32 onednn) track OpenBLAS's within 1e-4
#    over 60 iterations, and a model too small to time keeps OpenBLAS, bit for bit;
#  - flags that exclude each other are refused.
set -u
MGT=$1
MPIEXEC=${2:-mpiexec}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

run() { # name ranks tp extra...
  local name=$1 n=$2 tp=$3
  shift 3
  "$MPIEXEC" -n "$n" "$MGT" train --mock-data --num-layers 2 --hidden-size 64 \
    --num-attention-heads 4 --seq-length 32 --micro-batch-size 8 --global-batch-size 16 \
    --train-iters "${ITERS:-60}" --lr 3e-3 --lr-warmup-iters 5 --log-interval 1 --eval-iters 0 \
    --tensor-model-parallel-size "$tp" --metrics-file "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { echo "FAIL: $name did not run"; tail -5 "$tmp/$name.log"; fails=$((fails + 1)); }
}

run fp32 1 1
run bf16 1 1 --bf16
run bf16_tp2 2 2 --bf16
run fp16 1 1 --fp16 --hysteresis 2
run fp16_fixed 1 1 --fp16 --loss-scale 1024
# the scale doubles every 2 clean steps: the gradients are unscaled by the scale they carry, the
# one before the doubling (clipped to 0.01, each step's gradient norm is 0.01)
ITERS=5 run fp16_grow 1 1 --fp16 --initial-loss-scale 1024 --loss-scale-window 2 --hysteresis 1 \
  --clip-grad 0.01 --save "$tmp/grow" --save-interval 1
# the loss scaler is part of the checkpoint: stop at 30, resume, and match the run above
run fp16_first 1 1 --fp16 --hysteresis 2 --save "$tmp/ckpt" --exit-interval 30
run fp16_resumed 1 1 --fp16 --hysteresis 2 --load "$tmp/ckpt"
# the 16-bit weight copies (made once per step) multiply the numbers each GEMM would round
# itself: bit for bit the runs without them, also where the parameters change other ways
# (skipped fp16 steps, a resumed checkpoint, the distributed optimizer's all-gathers)
run bf16_nc 1 1 --bf16 --no-weight-copies
run bf16_tp2_nc 2 2 --bf16 --no-weight-copies
run fp16_nc 1 1 --fp16 --hysteresis 2 --no-weight-copies
run dist 4 2 --bf16 --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce
run dist_nc 4 2 --bf16 --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce \
  --no-weight-copies
# fp32 GEMMs through oneDNN's matmul against OpenBLAS's sgemm (--cpu-gemm-fp32), where oneDNN is
# built in: the same run within float rounding
"$MGT" version | grep -q "oneDNN [0-9]" && run fp32_onednn 1 1 --cpu-gemm-fp32 onednn
run fp32_openblas 1 1 --cpu-gemm-fp32 openblas
# auto on a model big enough to time (a QKV product of 0.4 GFLOP): rank 0 times both libraries,
# both ranks take its choice, and the layout line gives the two rates
if [ -f "$tmp/fp32_onednn.log" ]; then
  "$MPIEXEC" -n 2 "$MGT" train --mock-data --num-layers 1 --hidden-size 256 --num-attention-heads 4 \
    --seq-length 256 --micro-batch-size 4 --global-batch-size 8 --train-iters 1 --eval-iters 0 \
    >"$tmp/auto.log" 2>&1 && grep -q "fp32 GEMMs \(oneDNN\|OpenBLAS\): [0-9]* GFLOP/s against" "$tmp/auto.log" &&
    echo "ok: --cpu-gemm-fp32 auto: $(grep -o 'fp32 GEMMs [^)]*' "$tmp/auto.log")" ||
    { echo "FAIL: --cpu-gemm-fp32 auto did not time the two libraries"; tail -3 "$tmp/auto.log"; fails=$((fails + 1)); }
fi
if [ -f "$tmp/fp32_onednn.log" ]; then # said, and done: oneDNN's log lists its fp32 matmuls
  grep -q "fp32 GEMMs oneDNN, as asked" "$tmp/fp32_onednn.log" ||
    { echo "FAIL: the layout line does not say the fp32 GEMMs are oneDNN's"; fails=$((fails + 1)); }
  ONEDNN_VERBOSE=1 "$MGT" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --train-iters 1 --eval-iters 0 --cpu-gemm-fp32 onednn 2>&1 | grep -q "exec,cpu,matmul,.*src[_:]f32" ||
    { echo "FAIL: --cpu-gemm-fp32 onednn ran no fp32 matmul of oneDNN's"; fails=$((fails + 1)); }
fi
# native against emulated bf16 GEMMs, where the CPU has bf16 units
ITERS=300 run long_emulated 1 1 --bf16 --cpu-gemm emulated
ITERS=300 run long_default 1 1 --bf16
ITERS=300 run long_fp32 1 1
FLASH=(--use-flash-attn --num-attention-heads 2 --seq-length 96)
ITERS=300 run long_flash_emulated 1 1 --bf16 --cpu-gemm emulated "${FLASH[@]}"
ITERS=300 run long_flash_default 1 1 --bf16 "${FLASH[@]}"
ITERS=300 run long_flash_fp32 1 1 "${FLASH[@]}"
grep -q "bf16 GEMMs emulated in fp32, as asked" "$tmp/long_emulated.log" ||
  { echo "FAIL: the layout line does not say the GEMMs are emulated as asked"; fails=$((fails + 1)); }
if grep -q "bf16 GEMMs on oneDNN" "$tmp/long_default.log"; then
  $PY - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
for kind in ("", "flash_"):
    rows = {k: [json.loads(l) for l in open(f"{d}/long_{kind}{k}.jsonl")]
            for k in ("emulated", "default", "fp32")}
    assert len(rows["default"]) == len(rows["emulated"]) == 300
    gap = max(abs(a["loss"] - b["loss"]) for a, b in zip(rows["default"], rows["emulated"]))
    assert gap <= 1e-2, (kind + "native against emulated bf16 GEMMs", gap)
    far = max(abs(a["loss"] - b["loss"]) for a, b in zip(rows["default"], rows["fp32"]))
    assert far <= 2e-2, (kind + "native bf16 GEMMs against fp32", far)
    same = sum(a["loss"] == b["loss"] for a, b in zip(rows["default"], rows["emulated"]))
    assert same < 300, kind + "native and emulated runs are the same: one is not what it says"
    print(f"ok: native bf16 GEMMs{' and flash tiles' if kind else ''} track the emulated ones "
          f"within {gap:.1e} over 300 iterations ({far:.1e} from fp32; "
          f"loss {rows['default'][0]['loss']:.3f} -> {rows['default'][-1]['loss']:.3f})")
PY
else
  grep -q "bf16 GEMMs emulated in fp32: " "$tmp/long_default.log" ||
    { echo "FAIL: the layout line says neither native nor emulated bf16 GEMMs"; fails=$((fails + 1)); }
fi
# a CPU without bf16 units (oneDNN told to use none: ONEDNN_MAX_CPU_ISA) trains emulated, says
# why on the layout line, and refuses --cpu-gemm native with the reason
export ONEDNN_MAX_CPU_ISA=AVX2
"$MGT" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --train-iters 1 \
  --bf16 >"$tmp/out" 2>&1
if grep -q "bf16 GEMMs emulated in fp32: .*\(no bf16 units\|without oneDNN\)" "$tmp/out"; then
  echo "ok: without bf16 units: $(grep -o 'bf16 GEMMs emulated in fp32: [^)]*' "$tmp/out")"
else
  echo "FAIL: without bf16 units the layout line does not say why the GEMMs are emulated"
  fails=$((fails + 1))
fi
"$MGT" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --train-iters 1 \
  --bf16 --cpu-gemm native >"$tmp/out" 2>"$tmp/err"
if [ $? = 0 ] || ! grep -q "native bf16 GEMMs: " "$tmp/err"; then
  echo "FAIL: --cpu-gemm native without bf16 units was not refused with the reason"
  fails=$((fails + 1))
fi
unset ONEDNN_MAX_CPU_ISA
"$MGT" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --micro-batch-size 8 --global-batch-size 16 --bf16 --dry-run >"$tmp/plan.txt" 2>&1
grep -q "16-bit weights" "$tmp/plan.txt" ||
  { echo "FAIL: --dry-run does not count the 16-bit weights"; fails=$((fails + 1)); }
grep -q "bf16 GEMM inputs" "$tmp/bf16.log" || { echo "FAIL: the layout line does not name bf16"; fails=$((fails + 1)); }
grep -q "loss scale:" "$tmp/fp16.log" || { echo "FAIL: the fp16 log line has no loss scale"; fails=$((fails + 1)); }

$PY - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
ref = rows("fp32")
assert len(ref) == 60
def close(name, first=0):
    r = rows(name)
    bad = [(a["iteration"], a["loss"], b["loss"]) for a, b in zip(ref, r)
           if a["iteration"] > first and abs(a["loss"] - b["loss"]) > 2e-2]
    assert not bad, (name, bad[:3])
    print(f"ok: {name}: losses within 2e-2 of fp32 (max diff "
          f"{max(abs(a['loss'] - b['loss']) for a, b in zip(ref, r)):.2e})")
    return r
b1 = close("bf16")
b2 = rows("bf16_tp2")
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(b1, b2))
assert worst <= 1e-3, ("bf16 tp=2 against tp=1", worst)
print(f"ok: bf16 tp=2 equals tp=1 within {worst:.1e}")
f = rows("fp16")
scales = [r["loss_scale"] for r in f]
skipped = sum(r["skipped_iterations"] for r in f)
# the first overflow only spends the hysteresis: the scale is still 2^32 after it
assert scales[0] == 2.0**32 and f[0]["skipped_iterations"] == 1 and skipped >= 2, (scales[:5], skipped)
assert all(b <= a for a, b in zip(scales, scales[1:])), "the scale only falls within 60 steps"
# every skip is an overflow: the scale halves from the second one on (hysteresis 2)
assert scales[-1] == 2.0**32 / 2 ** (skipped - 1), (scales[-1], skipped)
# once the scale fits, overflows are rare (growing gradients may cause one) and the model learns
first = next(r for r in f if r["skipped_iterations"] == 0)
late = sum(r["skipped_iterations"] for r in f[f.index(first):])
assert late <= 3, f"{late} overflows after the scale fitted"
assert f[-1]["loss"] < first["loss"] - 1.0, (first["loss"], f[-1]["loss"])
print(f"ok: fp16: {skipped} overflow steps skipped, scale 2^32 -> {scales[-1]:.0f}, "
      f"then loss {first['loss']:.3f} -> {f[-1]['loss']:.3f}")
resumed = rows("fp16_first") + rows("fp16_resumed")
assert [r["iteration"] for r in resumed] == list(range(1, 61)), "the resumed run's iterations"
assert all(a["loss"] == b["loss"] and a["loss_scale"] == b["loss_scale"] for a, b in zip(f, resumed)), \
    "an fp16 run resumed from iteration 30 differs from the uninterrupted one"
print("ok: fp16 resumed at iteration 30 equals the uninterrupted run bit for bit, scale included")
# the learning rate advances on the updates, not the skipped iterations (Megatron-LM's
# scheduler steps after an update): iteration i trains at fp32's lr of i - the skips before it
lr32 = [r["lr"] for r in rows("fp32")]
skips = 0
for r in f:
    if not r["skipped_iterations"]:
        assert r["lr"] == lr32[r["iteration"] - 1 - skips], (r, skips)
    skips += r["skipped_iterations"]
print(f"ok: fp16's {skips} skipped iterations do not advance the learning rate")
import glob, h5py, numpy as np
g = rows("fp16_grow")
assert [r["loss_scale"] for r in g] == [1024, 2048, 2048, 4096, 4096] and not any(r["skipped_iterations"] for r in g), g
m_prev, norms = None, []
for it in range(1, 6):
    with h5py.File(f"{sys.argv[1]}/grow/iter_{it:07d}.h5", "r") as h:
        m = {k: h["optimizer/exp_avg"][k][()].astype(np.float64) for k in h["optimizer/exp_avg"]}
    step = {k: (m[k] - 0.9 * m_prev[k] if m_prev else m[k]) / 0.1 for k in m}  # each gradient
    gsq = sum((x * x).sum() for x in step.values())
    norms.append(gsq ** 0.5)
    m_prev = m
assert all(abs(n - 0.01) < 1e-4 for n in norms), norms
print("ok: fp16 loss-scale growth at iterations 2 and 4: every step's clipped gradient norm 0.01 "
      "(%s)" % ", ".join("%.5f" % n for n in norms))
for a, b in (("bf16", "bf16_nc"), ("bf16_tp2", "bf16_tp2_nc"), ("fp16", "fp16_nc"),
             ("dist", "dist_nc")):
    ra, rb = rows(a), rows(b)
    assert len(ra) == len(rb) == 60 and all(
        x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"] for x, y in zip(ra, rb)), \
        f"{a}: the 16-bit weight copies change the run"
assert all(a["loss"] == b["loss"] for a, b in zip(rows("fp16_nc"), resumed)), \
    "fp16 resumed with weight copies differs from the run without"
print("ok: 16-bit weight copies: bf16 (1 rank, tp=2, distributed optimizer with both overlaps), "
      "fp16 with skipped steps and resumed, bit for bit as without them")
ob = rows("fp32_openblas")
assert all(a["loss"] == b["loss"] for a, b in zip(ref, ob)), "--cpu-gemm-fp32 openblas is not the default"
import os
if os.path.exists(f"{d}/fp32_onednn.jsonl"):
    od = rows("fp32_onednn")
    worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(ob, od))
    assert len(od) == 60 and worst <= 1e-4, ("fp32 GEMMs through oneDNN against OpenBLAS", worst)
    print(f"ok: fp32 GEMMs through oneDNN's matmul: 60 losses within {worst:.1e} of OpenBLAS's "
          "(a model too small to time keeps OpenBLAS by default, bit for bit)")
else:
    print("skipped: fp32 GEMMs through oneDNN (this mgt has no oneDNN)")
fx = rows("fp16_fixed")
assert all(r["loss_scale"] == 1024 for r in fx) and all(r["skipped_iterations"] == 0 for r in fx)
close("fp16_fixed")
PY

expect_err() { # want args...
  local want=$1
  shift
  "$MGT" train --mock-data "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" != 2 ] || ! grep -q -F -- "$want" "$tmp/err"; then
    echo "FAIL: mgt train $*: exit $rc, wanted '$want'"
    head -3 "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: $(head -1 "$tmp/err")"
  fi
}
expect_err "--fp16 and --bf16 exclude each other" --fp16 --bf16
expect_err "--cpu-gemm native needs --bf16" --fp16 --cpu-gemm native
expect_err "--cpu-gemm native needs --bf16" --cpu-gemm native
expect_err "--cpu-gemm needs --device cpu" --device cuda --bf16 --cpu-gemm emulated
expect_err "--cpu-gemm: expected one of native, emulated" --bf16 --cpu-gemm fast
expect_err "--cpu-gemm-fp32 needs --device cpu" --device cuda --cpu-gemm-fp32 onednn
expect_err "--cpu-gemm-fp32: expected one of auto, openblas, onednn" --cpu-gemm-fp32 blis
expect_err "--min-loss-scale" --fp16 --initial-loss-scale 4 --min-loss-scale 8
if ! "$MGT" version 2>/dev/null | grep -q cuda; then
  expect_err "built without CUDA" --device cuda
elif ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  expect_err "no CUDA device is visible" --device cuda
fi
[ "$fails" = 0 ] && echo "precision: all passed" || echo "precision: $fails failures"
exit $((fails > 0))
