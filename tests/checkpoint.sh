#!/usr/bin/env bash
# Checkpoints: resume on other layouts, a process killed in the middle of a save, damaged and
# foreign checkpoints, and Hugging Face export/import checked by an independent numpy GPT-2.
# Usage: checkpoint.sh MGT MPIEXEC TESTS_DIR
set -u
MGT=$1 MPIEXEC=$2 TESTS=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
PY=/usr/bin/python3 # Debian's, with numpy and h5py

# ---- resume on every layout: 20 iterations at (tp 2, dp 2) saving at 10 ----
A=(--mock-data --train-iters 20 --log-interval 1 --micro-batch-size 4 --global-batch-size 16
  --hidden-dropout 0.1 --attention-dropout 0.1 --lr-warmup-iters 5 --lr-decay-style cosine)
"$MPIEXEC" -n 4 "$MGT" train "${A[@]}" --tensor-model-parallel-size 2 --save "$tmp/run" \
  --save-interval 10 --metrics-file "$tmp/full.jsonl" > "$tmp/log" 2>&1 || { fail "full run"; cat "$tmp/log"; }
for layout in "4 2" "4 4" "4 1" "1 1"; do
  set -- $layout
  "$MPIEXEC" -n $1 "$MGT" train "${A[@]}" --tensor-model-parallel-size $2 --load "$tmp/run" \
    --ckpt-iteration 10 --metrics-file "$tmp/resume_$1_$2.jsonl" > "$tmp/log" 2>&1 ||
    { fail "resume on $1 ranks, tp $2"; cat "$tmp/log"; }
done
$PY - "$tmp" <<'PY' || fail "resumed losses differ"
import json, sys
d = sys.argv[1]
rows = lambda f: {r["iteration"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r}
full = rows(d + "/full.jsonl")
for n, tp in [(4, 2), (4, 4), (4, 1), (1, 1)]:
    res = rows("%s/resume_%d_%d.jsonl" % (d, n, tp))
    assert sorted(res) == list(range(11, 21)), sorted(res)
    worst = max(abs(res[i] - full[i]) / full[i] for i in res)
    same = all(res[i] == full[i] for i in res)
    print("ok: resumed at tp=%d dp=%d: iterations 11-20 within %.1e of the uninterrupted run%s"
          % (tp, n // tp, worst, " (bit for bit)" if same else ""))
    assert worst <= 1e-5, worst
    if (n, tp) == (4, 2):
        assert same, "the same layout must resume bit for bit"
PY

# ---- the distributed optimizer: saved at (tp 2, dp 4) with it and resumed at (tp 1, dp 2)
# without it, at (tp 4, dp 2) with it and --sequence-parallel, and on one rank; the ordinary checkpoint above resumed
# with it at (tp 1, dp 4); every one within 1e-5 of the uninterrupted ordinary run ----
D=(--use-distributed-optimizer --ddp-bucket-size 20000)
"$MPIEXEC" -n 8 "$MGT" train "${A[@]}" "${D[@]}" --overlap-grad-reduce --overlap-param-gather \
  --tensor-model-parallel-size 2 --save "$tmp/dist" \
  --save-interval 10 --metrics-file "$tmp/dist_full.jsonl" > "$tmp/log" 2>&1 || { fail "distributed optimizer run"; tail -5 "$tmp/log"; }
grep -q "a shard of 4, --use-distributed-optimizer" "$tmp/log" || fail "the memory plan of the distributed optimizer"
# the overlapped reduce-scatter sums as the blocking one: at dp 4 (where Open MPI's blocking and
# non-blocking collectives sum in different orders) the same tensors bit for bit
for ov in "" --overlap-grad-reduce; do
  "$MPIEXEC" -n 4 "$MGT" train "${A[@]}" "${D[@]}" $ov --train-iters 6 --save "$tmp/ov$ov" \
    > "$tmp/log" 2>&1 || { fail "dp 4 $ov"; tail -3 "$tmp/log"; }
done
$PY - "$tmp/ov/iter_0000006.h5" "$tmp/ov--overlap-grad-reduce/iter_0000006.h5" <<'PY' &&
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
n = []
a.visititems(lambda k, o: n.append(k) if isinstance(o, h5py.Dataset) else None)
assert n and all(np.array_equal(a[k][()], b[k][()]) for k in n), [k for k in n if not np.array_equal(a[k][()], b[k][()])][:3]
PY
  echo "ok: --overlap-grad-reduce at dp 4 with the distributed optimizer: every tensor bit for bit" ||
  fail "--overlap-grad-reduce changes the distributed optimizer's numbers at dp 4"
"$MGT" ckpt verify "$tmp/dist" > "$tmp/out" 2>&1 && grep -q " 0 damaged" "$tmp/out" &&
  echo "ok: a distributed optimizer's checkpoint verifies" || { fail "verify of a distributed optimizer's checkpoint"; cat "$tmp/out"; }
# verify checks, and info lists, every tensor the file holds: h5py's own walk of the file counts
# them (HDF5 1.12 changed the object visitor; a mismatch there skipped every tensor)
want=$($PY -c 'import h5py, sys
n = []
h5py.File(sys.argv[1], "r").visititems(lambda k, o: n.append(k) if isinstance(o, h5py.Dataset) else None)
print(len(n))' "$tmp/dist/iter_$(printf %07d "$(cat "$tmp/dist/latest")").h5")
"$MGT" ckpt info "$tmp/dist" > "$tmp/info" 2>&1
listed=$(grep -c "^  /" "$tmp/info")
[ "$want" -gt 40 ] && grep -q "$want tensors, 0 damaged" "$tmp/out" && [ "$listed" = "$want" ] &&
  echo "ok: verify checked and info listed all $want tensors of the file" ||
  fail "verify/info against h5py's count $want: $(tail -1 "$tmp/out"), info listed $listed"
for spec in "2 1 none dist" "8 4 distsp dist" "1 1 none dist" "4 1 dist run"; do
  set -- $spec
  flags=()
  [ "$3" = dist ] && flags=("${D[@]}")
  [ "$3" = distsp ] && flags=("${D[@]}" --sequence-parallel)
  "$MPIEXEC" -n $1 "$MGT" train "${A[@]}" "${flags[@]}" --tensor-model-parallel-size $2 --load "$tmp/$4" \
    --ckpt-iteration 10 --metrics-file "$tmp/dres_$1_$2_$3_$4.jsonl" > "$tmp/log" 2>&1 ||
    { fail "resume of $4 on $1 ranks, tp $2, $3"; tail -5 "$tmp/log"; }
done
$PY - "$tmp" <<'PY' || fail "distributed optimizer resumes differ"
import json, sys
d = sys.argv[1]
rows = lambda f: {r["iteration"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r}
full, dist = rows(d + "/full.jsonl"), rows(d + "/dist_full.jsonl")
worst = max(abs(dist[i] - full[i]) / full[i] for i in full)
assert sorted(dist) == list(range(1, 21)) and worst <= 1e-5, worst
print("ok: --use-distributed-optimizer at tp=2 dp=4: 20 iterations within %.1e of tp=2 dp=2 without" % worst)
names = {"none": "without it", "dist": "with the distributed optimizer",
         "distsp": "with the distributed optimizer and sequence parallelism"}
for n, tp, fl, src in [(2, 1, "none", "dist"), (8, 4, "distsp", "dist"), (1, 1, "none", "dist"), (4, 1, "dist", "run")]:
    res = rows("%s/dres_%d_%d_%s_%s.jsonl" % (d, n, tp, fl, src))
    assert sorted(res) == list(range(11, 21)), sorted(res)
    worst = max(abs(res[i] - full[i]) / full[i] for i in res)
    print("ok: %s checkpoint resumed at tp=%d dp=%d %s: within %.1e of the uninterrupted run"
          % ("a distributed optimizer's" if src == "dist" else "an ordinary", tp, n // tp,
             names[fl], worst))
    assert worst <= 1e-5, worst
PY

# ---- damaged and foreign checkpoints ----
expect_error() { # want, then the command
  local want=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [ $rc != 2 ] || ! grep -q -F -- "$want" "$tmp/err" || grep -q MPI_ABORT "$tmp/err"; then
    fail "$* gave exit $rc, wanted an error with '$want'"; sed 's/^/    /' "$tmp/err" | head -5
  else
    echo "ok: $(grep '^mgt: error' "$tmp/err" | head -1)"
  fi
}
B=(train --mock-data --train-iters 12 --micro-batch-size 4 --global-batch-size 16)
mkdir "$tmp/trunc" "$tmp/flip" "$tmp/nolatest"
cp "$tmp/run/iter_0000010.h5" "$tmp/trunc/" && echo 10 > "$tmp/trunc/latest"
truncate -s 500000 "$tmp/trunc/iter_0000010.h5"
expect_error "trunc/iter_0000010.h5: not a readable HDF5 file" "$MGT" "${B[@]}" --load "$tmp/trunc"
cp "$tmp/run/iter_0000010.h5" "$tmp/flip/" && echo 10 > "$tmp/flip/latest"
$PY - "$tmp/flip/iter_0000010.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["model/layers.1.mlp.dense_h_to_4h.weight"].id.get_offset() + 1000
with open(sys.argv[1], "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x10]))
PY
"$MGT" ckpt verify "$tmp/flip" > "$tmp/out" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "damaged: /model/layers.1.mlp.dense_h_to_4h.weight" "$tmp/out" &&
  grep -q "1 damaged" "$tmp/out"; then
  echo "ok: mgt ckpt verify names the damaged tensor (exit $rc)"
else
  fail "verify of a flipped byte (exit $rc)"; cat "$tmp/out"
fi
expect_error "is damaged: 1 tensor(s) fail their checksum (/model/layers.1.mlp.dense_h_to_4h.weight)" \
  "$MPIEXEC" -n 2 "$MGT" "${B[@]}" --tensor-model-parallel-size 2 --load "$tmp/flip"
# a folder whose first save never completed holds no checkpoint: Megatron-LM's auto-resume starts
# afresh there (its unfinished file is no checkpoint), with a note
"$MGT" "${B[@]}" --load "$tmp/nolatest" > "$tmp/out" 2>&1 &&
  grep -q "no checkpoint there yet (no 'latest' file): starting from scratch" "$tmp/out" &&
  echo "ok: --load of a folder without 'latest' starts from scratch" ||
  { fail "--load of a folder without 'latest'"; tail -3 "$tmp/out"; }
expect_error "is of another model: --num-layers 3 (checkpoint 2), --hidden-size 32 (checkpoint 64)" \
  "$MPIEXEC" -n 2 "$MGT" "${B[@]}" --load "$tmp/run" --hidden-size 32 --num-layers 3
"$MGT" ckpt verify "$tmp/run" > "$tmp/out" 2>&1 && grep -q " 0 damaged" "$tmp/out" &&
  echo "ok: an intact checkpoint verifies" || { fail "verify of an intact checkpoint"; cat "$tmp/out"; }

# ---- SIGKILL in the middle of a save ----
K=(--mock-data --num-layers 4 --hidden-size 768 --num-attention-heads 12 --vocab-size 8192
  --seq-length 16 --micro-batch-size 1 --global-batch-size 2 --train-iters 6 --save-interval 2
  --save "$tmp/kill" --log-interval 1)
("$MPIEXEC" -n 2 "$MGT" train "${K[@]}" --tensor-model-parallel-size 2 > "$tmp/killlog" 2>&1 &
  wait) 2> /dev/null &
caught=0
for _ in $(seq 1 6000); do
  if [ -e "$tmp/kill/iter_0000004.h5.tmp" ]; then
    pkill -KILL -f -- "--save $tmp/kill" && caught=1
    break
  fi
  sleep 0.01
done
wait
if [ $caught = 1 ] && [ "$(cat "$tmp/kill/latest")" = 2 ] && [ ! -e "$tmp/kill/iter_0000004.h5" ]; then
  echo "ok: killed during the save of iteration 4; latest still says 2"
  "$MGT" ckpt verify "$tmp/kill" > "$tmp/out" 2>&1 || { fail "the previous checkpoint is damaged"; cat "$tmp/out"; }
  "$MPIEXEC" -n 2 "$MGT" train "${K[@]}" --tensor-model-parallel-size 2 --load "$tmp/kill" > "$tmp/out" 2>&1 &&
    grep -q "loaded checkpoint .*iter_0000002.h5: iteration 2" "$tmp/out" &&
    [ "$(cat "$tmp/kill/latest")" = 6 ] && echo "ok: the next start resumed from iteration 2 and finished" ||
    { fail "restart after the kill"; tail -5 "$tmp/out"; }
else
  fail "could not kill during a save (caught=$caught, latest=$(cat "$tmp/kill/latest" 2>/dev/null))"
  tail -3 "$tmp/killlog"
fi

# ---- Hugging Face export and import; an independent numpy GPT-2 agrees with mgt eval ----
"$MGT" ckpt export --format hf --load "$tmp/run" --output "$tmp/hf" > "$tmp/out" 2>&1 || { fail "export"; cat "$tmp/out"; }
"$MGT" ckpt import --format hf --input "$tmp/hf" --save "$tmp/imported" > "$tmp/out" 2>&1 || { fail "import"; cat "$tmp/out"; }
$PY - "$tmp/run/iter_0000020.h5" "$tmp/imported/iter_0000000.h5" <<'PY' || fail "export then import changed the weights"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = list(a["model"].keys())
assert sorted(names) == sorted(b["model"].keys())
for n in names:
    assert np.array_equal(a["model"][n][()].view(np.uint32), b["model"][n][()].view(np.uint32)), n
print("ok: export then import gives the same %d tensors bit for bit" % len(names))
PY
# the Hub's GPT-2 files name the tensors without "transformer." (GPT2Model's names): the same
# import; an import into a directory that holds checkpoints is refused (its iteration-0
# checkpoint would become the run's `latest`)
mkdir -p "$tmp/hub" && cp "$tmp/hf/config.json" "$tmp/hub/" && $PY - "$tmp/hf/model.safetensors" "$tmp/hub/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
hdr = {(k[12:] if k.startswith("transformer.") else k): v for k, v in hdr.items()}
t = json.dumps(hdr).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
PY
"$MGT" ckpt import --format hf --input "$tmp/hub" --save "$tmp/hub_imp" > "$tmp/out" 2>&1 &&
  cmp -s <("$MGT" ckpt info "$tmp/imported" 2>&1 | grep -v "^path\|checkpoint\|file") <("$MGT" ckpt info "$tmp/hub_imp" 2>&1 | grep -v "^path\|checkpoint\|file") &&
  $PY -c 'import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])["model"], h5py.File(sys.argv[2])["model"]
assert sorted(a) == sorted(b) and all(np.array_equal(a[k][()], b[k][()]) for k in a)' "$tmp/imported/iter_0000000.h5" "$tmp/hub_imp/iter_0000000.h5" &&
  echo "ok: the Hub's GPT-2 names (no transformer. prefix) import to the same tensors" || { fail "the Hub's GPT-2 names"; cat "$tmp/out"; }
mkdir -p "$tmp/hf_scaled" && cp "$tmp/hf/model.safetensors" "$tmp/hf_scaled/" &&
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); c["scale_attn_by_inverse_layer_idx"] = True; json.dump(c, open(sys.argv[2], "w"))' \
    "$tmp/hf/config.json" "$tmp/hf_scaled/config.json"
expect "scale_attn_by_inverse_layer_idx: attention scaled otherwise" "$MGT" ckpt import --format hf --input "$tmp/hf_scaled" --save "$tmp/x_scaled"
expect "--save $tmp/run: holds checkpoints already" "$MGT" ckpt import --format hf --input "$tmp/hf" --save "$tmp/run"
[ "$(cat "$tmp/run/latest")" = 20 ] && echo "ok: the run's latest is still 20" || fail "the import moved the run's latest"
# checkpoints without `latest` are not an empty directory: a run from scratch would overwrite
# them (Megatron-LM's own checkpoints too, which mgt does not read)
mkdir -p "$tmp/nolatest" "$tmp/megatron/iter_0000010" && cp "$tmp/run/iter_0000020.h5" "$tmp/nolatest/" &&
  echo 10 > "$tmp/megatron/latest_checkpointed_iteration.txt"
expect "--load $tmp/nolatest: iter_* checkpoints but no 'latest' file: name one with --ckpt-iteration N" \
  "$MGT" train "${A[@]}" --load "$tmp/nolatest" --save "$tmp/nolatest"
expect "--load $tmp/megatron: Megatron-LM's checkpoints (latest_checkpointed_iteration.txt)" \
  "$MGT" train "${A[@]}" --load "$tmp/megatron" --save "$tmp/megatron"
[ "$(ls "$tmp/nolatest")" = iter_0000020.h5 ] && echo "ok: nothing written beside them" || fail "files written: $(ls "$tmp/nolatest")"

# named tensors that are missing or of the wrong shape: one line naming them, no crash
mkdir -p "$tmp/deleted" && cp "$tmp/run/iter_0000020.h5" "$tmp/deleted/" && echo 20 > "$tmp/deleted/latest"
$PY - "$tmp/deleted/iter_0000020.h5" "$tmp/hf" "$tmp/hf_bad" <<'PY'
import json, os, shutil, struct, sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f["model/layers.1.attention.dense.bias"]
def rewrite(out, edit):
    raw = open(sys.argv[2] + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    edit(hdr)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(out, exist_ok=True)
    shutil.copy(sys.argv[2] + "/config.json", out)
    open(out + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
rewrite(sys.argv[3] + "_missing", lambda h: h.pop("transformer.h.0.ln_2.bias"))
rewrite(sys.argv[3] + "_shape", lambda h: h["transformer.wpe.weight"].update(shape=[16, 64]))
rewrite(sys.argv[3] + "_offsets", lambda h: h["transformer.h.1.mlp.c_fc.bias"].update(data_offsets=[-1024, 0]))
PY
expect_error "tensor /model/layers.1.attention.dense.bias is missing" "$MGT" ckpt export --format hf --load "$tmp/deleted" --output "$tmp/hf_x"
expect_error "tensor transformer.h.0.ln_2.bias is missing" "$MGT" ckpt import --format hf --input "$tmp/hf_bad_missing" --save "$tmp/imp_x"
expect_error "tensor transformer.wpe.weight does not have the shape [32, 64]" "$MGT" ckpt import --format hf --input "$tmp/hf_bad_shape" --save "$tmp/imp_x"
expect_error "tensor transformer.h.1.mlp.c_fc.bias: data_offsets do not lie inside the file" "$MGT" ckpt import --format hf --input "$tmp/hf_bad_offsets" --save "$tmp/imp_x"
[ ! -e "$tmp/imp_x/latest" ] && [ ! -e "$tmp/hf_x/model.safetensors" ] || fail "a refused export or import left a file"

$PY -c "import random; random.seed(5); print(' '.join(str((7 + 3 * i) % 128 if i % 9 else random.randrange(128)) for i in range(150)))" > "$tmp/ids.txt"
for tp in 1 2; do
  "$MPIEXEC" -n 2 "$MGT" eval --load "$tmp/run" --input-ids "$tmp/ids.txt" --tensor-model-parallel-size $tp > "$tmp/eval$tp.json" 2>&1 || { fail "mgt eval tp=$tp"; cat "$tmp/eval$tp.json"; }
done
$PY "$TESTS/gpt2_numpy.py" "$tmp/hf" "$tmp/ids.txt" 32 > "$tmp/numpy.json" || fail "numpy GPT-2"
$PY - "$tmp/eval1.json" "$tmp/eval2.json" "$tmp/numpy.json" <<'PY' || fail "mgt eval and the numpy GPT-2 disagree"
import json, sys
e1, e2, ref = (json.loads([l for l in open(f).read().splitlines() if l.startswith("{")][-1]) for f in sys.argv[1:])
print("mgt eval (tp=1 dp=2): %.7f over %d tokens; (tp=2): %.7f; numpy float64: %.7f" %
      (e1["avg_loss"], e1["tokens"], e2["avg_loss"], ref["avg_loss"]))
assert e1["tokens"] == ref["tokens"] == 149
assert abs(e1["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
assert abs(e2["avg_loss"] - ref["avg_loss"]) <= 1e-5 * ref["avg_loss"]
print("ok: the exported model's loss from numpy matches mgt eval")
PY

# ---- --async-save and --keep-last: the same checkpoints and losses as saving in the foreground ----
S=(train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16
  --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --save-interval 5 --eval-iters 0
  --log-interval 5 --tensor-model-parallel-size 2)
"$MPIEXEC" -n 4 "$MGT" "${S[@]}" --async-save --keep-last 2 --save "$tmp/async" \
  --metrics-file "$tmp/async.jsonl" > "$tmp/out" 2>&1 || { fail "--async-save"; tail -5 "$tmp/out"; }
grep -q "copied to host memory in .* writing it in the background" "$tmp/out" || fail "no background save"
"$MPIEXEC" -n 4 "$MGT" "${S[@]}" --save "$tmp/sync" --metrics-file "$tmp/sync.jsonl" > /dev/null 2>&1 || fail "sync save"
[ "$(ls "$tmp/async")" = "$(printf 'iter_0000015.h5\niter_0000020.h5\nlatest\nmgt.started')" ] &&
  echo "ok: --keep-last 2 left the newest two checkpoints" || { fail "--keep-last"; ls "$tmp/async"; }
$PY - "$tmp" <<'PY' || fail "--async-save differs from a save in the foreground"
import json, sys, h5py, numpy as np
d = sys.argv[1]
losses = lambda f: [json.loads(l)["loss"] for l in open(d + f)]
assert losses("/async.jsonl") == losses("/sync.jsonl")
for it in (15, 20):
    a, b = h5py.File(d + "/async/iter_%07d.h5" % it, "r"), h5py.File(d + "/sync/iter_%07d.h5" % it, "r")
    names = []
    a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    assert len(names) == 84
    for n in names:
        assert np.array_equal(a[n][()], b[n][()]), n
print("ok: --async-save writes the same checkpoints bit for bit and training is unchanged")
PY

# ---- a checkpoint written by an earlier version (format 1, saved by commit 7929857) ----
# tests/data/ckpt-format1: iteration 3 of a 2-layer model trained with --fp16 (loss scaler
# state) and optimizer state. It must verify, load exactly the stored numbers, and resume: on
# the same layout bit for bit across a save, on tp=2 within float tolerance. Its string
# attributes rewritten by h5py as variable-length strings must load the same.
OLD=$TESTS/data/ckpt-format1
O=(train --mock-data --num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8
  --micro-batch-size 2 --global-batch-size 4 --fp16 --initial-loss-scale 4096 --loss-scale-window 2
  --lr-warmup-iters 2 --log-interval 1 --eval-iters 0 --train-iters 6)
"$MGT" ckpt verify "$OLD" > "$tmp/out" 2>&1 && grep -q "84 tensors, 0 damaged" "$tmp/out" &&
  echo "ok: the format-1 checkpoint verifies" || { fail "verify of the format-1 checkpoint"; cat "$tmp/out"; }
"$MGT" "${O[@]}" --load "$OLD" --save "$tmp/old_a" --save-interval 5 --metrics-file "$tmp/old_a.jsonl" \
  > "$tmp/out" 2>&1 || { fail "resume from the format-1 checkpoint"; tail -3 "$tmp/out"; }
"$MGT" "${O[@]}" --load "$tmp/old_a" --ckpt-iteration 5 --metrics-file "$tmp/old_b.jsonl" \
  > "$tmp/out" 2>&1 || { fail "resume of the resumed run"; tail -3 "$tmp/out"; }
"$MPIEXEC" -n 2 "$MGT" "${O[@]}" --load "$OLD" --tensor-model-parallel-size 2 \
  --metrics-file "$tmp/old_tp2.jsonl" > "$tmp/out" 2>&1 || { fail "format-1 at tp=2"; tail -3 "$tmp/out"; }
"$MPIEXEC" -n 2 "$MGT" "${O[@]}" --load "$OLD" --use-distributed-optimizer \
  --metrics-file "$tmp/old_dist.jsonl" > "$tmp/out" 2>&1 || { fail "format-1 with the distributed optimizer"; tail -3 "$tmp/out"; }
mkdir -p "$tmp/vlen" && cp "$OLD/iter_0000003.h5" "$OLD/latest" "$tmp/vlen/"
"$MGT" "${O[@]}" --load "$tmp/vlen" --train-iters 4 --metrics-file "$tmp/fixed.jsonl" > /dev/null 2>&1
$PY - "$tmp/vlen/iter_0000003.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    for k in ("format", "config", "loss_scale"):
        f.attrs[k] = f.attrs[k].decode()  # a Python str: h5py writes a variable-length string
    assert h5py.check_string_dtype(f.attrs.get_id("config").dtype).length is None
PY
"$MGT" "${O[@]}" --load "$tmp/vlen" --train-iters 4 --metrics-file "$tmp/vlen.jsonl" > "$tmp/out" 2>&1 ||
  { fail "a checkpoint with h5py's variable-length strings"; tail -3 "$tmp/out"; }
"$MGT" ckpt export --format hf --load "$OLD" --output "$tmp/old_hf" > "$tmp/out" 2>&1 || { fail "export of format 1"; cat "$tmp/out"; }
$PY - "$tmp" "$OLD/iter_0000003.h5" <<'PY' || fail "format-1 checkpoint"
import json, struct, sys, h5py, numpy as np
d = sys.argv[1]
rows = lambda f: {r["iteration"]: (r["loss"], r["loss_scale"]) for r in map(json.loads, open(d + f)) if "loss" in r}
a, b, t2 = rows("/old_a.jsonl"), rows("/old_b.jsonl"), rows("/old_tp2.jsonl")
assert sorted(a) == [4, 5, 6] and sorted(b) == [6], (a, b)
assert b[6] == a[6], "resumed across a save: %r vs %r" % (b[6], a[6])
print("ok: the format-1 checkpoint resumes; iteration 6 after another save and load is bit for bit")
worst = max(abs(t2[i][0] - a[i][0]) / a[i][0] for i in a)
assert worst <= 1e-5 and all(t2[i][1] == a[i][1] for i in a), (worst, t2, a)
print("ok: resumed at tp=2 within %.1e of tp=1, same loss scales" % worst)
t3 = rows("/old_dist.jsonl")
worst = max(abs(t3[i][0] - a[i][0]) / a[i][0] for i in a)
assert worst <= 1e-5 and all(t3[i][1] == a[i][1] for i in a), (worst, t3, a)
print("ok: resumed at dp=2 with --use-distributed-optimizer within %.1e, same loss scales" % worst)
assert rows("/vlen.jsonl") == rows("/fixed.jsonl") and 4 in rows("/vlen.jsonl")
print("ok: variable-length string attributes (h5py's default) load the same")
# the exported tensors are exactly the file's, so the weights were read as stored
raw = open(d + "/old_hf/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
t = lambda k: np.frombuffer(raw[8 + n + hdr[k]["data_offsets"][0]:8 + n + hdr[k]["data_offsets"][1]], np.float32).reshape(hdr[k]["shape"])
f = h5py.File(sys.argv[2], "r")["model"]
assert np.array_equal(t("transformer.wte.weight"), f["embedding.word_embeddings.weight"][()])
assert np.array_equal(t("transformer.h.1.attn.c_attn.weight"), f["layers.1.attention.qkv.weight"][()].reshape(-1, 16).T)
assert np.array_equal(t("transformer.h.0.mlp.c_proj.weight"), f["layers.0.mlp.dense_4h_to_h.weight"][()].T)
assert np.array_equal(t("transformer.h.0.attn.c_attn.bias"), f["layers.0.attention.qkv.bias"][()].reshape(-1))
print("ok: the format-1 weights export exactly as stored")
PY

# ---- format 2 (saved by commit a4c36fd, before the model section): a Llama-style model ----
# tests/data/ckpt-format2: iteration 3 of RMSNorm, SwiGLU, rotary positions, 2 key/value groups,
# no biases, an untied output layer, with optimizer state. It verifies, resumes bit for bit across
# a save in format 3 (whose model section is the configuration's spec), and mgt eval scores it.
F2=$TESTS/data/ckpt-format2
L2=(train --mock-data --num-layers 2 --hidden-size 16 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --swiglu --normalization RMSNorm --position-embedding-type rope
  --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 8 --micro-batch-size 2
  --global-batch-size 4 --lr-warmup-iters 2 --log-interval 1 --eval-iters 0 --train-iters 6)
"$MGT" ckpt verify "$F2" > "$tmp/out" 2>&1 && grep -q "57 tensors, 0 damaged" "$tmp/out" &&
  echo "ok: the format-2 checkpoint verifies" || { fail "verify of the format-2 checkpoint"; cat "$tmp/out"; }
"$MGT" "${L2[@]}" --load "$F2" --save "$tmp/f2_a" --save-interval 5 --metrics-file "$tmp/f2_a.jsonl" \
  > "$tmp/out" 2>&1 || { fail "resume from the format-2 checkpoint"; tail -3 "$tmp/out"; }
"$MGT" "${L2[@]}" --load "$tmp/f2_a" --ckpt-iteration 5 --metrics-file "$tmp/f2_b.jsonl" \
  > "$tmp/out" 2>&1 || { fail "resume of the format-3 save"; tail -3 "$tmp/out"; }
"$MGT" ckpt info "$tmp/f2_a" > "$tmp/f2_info" 2>&1 || fail "ckpt info of a format-3 save"
echo "1 2 3 4 5 6 7 8 9" > "$tmp/f2_ids.txt"
for d in "$F2" "$tmp/f2_a"; do
  "$MGT" eval --task lm --load "$d" --input-ids "$tmp/f2_ids.txt" --seq-length 8 > "$tmp/out" 2>&1 ||
    { fail "mgt eval of $d"; tail -3 "$tmp/out"; }
  grep '^{' "$tmp/out" >> "$tmp/f2_eval.jsonl"
done
$PY - "$tmp" "$F2/iter_0000003.h5" <<'PY' || fail "format-2 checkpoint"
import json, sys, h5py
d = sys.argv[1]
rows = lambda f: {r["iteration"]: r["loss"] for r in map(json.loads, open(d + f)) if "loss" in r}
a, b = rows("/f2_a.jsonl"), rows("/f2_b.jsonl")
assert sorted(a) == [4, 5, 6] and sorted(b) == [6] and b[6] == a[6], (a, b)
print("ok: the format-2 checkpoint resumes; iteration 6 after a format-3 save and load is bit for bit")
assert h5py.File(sys.argv[2], "r").attrs["format"] == b"megatron-c checkpoint 2"
f = h5py.File(d + "/f2_a/iter_0000005.h5", "r")
assert f.attrs["format"] == b"megatron-c checkpoint 3", f.attrs["format"]
spec = json.loads(f.attrs["model"])
want = {"kind": "gpt", "layers": 2, "hidden": 16, "heads": 4, "head_size": 4, "groups": 2,
        "ffn": 64, "vocab": 128, "positions": 8, "norm": "RMSNorm", "pos": "rope", "mlp": "swiglu",
        "bias": 0, "untied": 1, "head": "causal_lm", "rope_base": 10000.0}
assert all(spec[k] == v for k, v in want.items()), {k: spec[k] for k in want}
info = open(d + "/f2_info").read()
assert "  model: GPT, 2 layers, hidden 16, 4 heads, ffn 64, vocabulary 128, 8 positions" in info, info
assert json.loads(info.split("  spec: ")[1].split("\n")[0]) == spec
print("ok: the format-3 save holds the spec as its model section:", ", ".join(f"{k} {spec[k]}" for k in want))
e = [json.loads(l) for l in open(d + "/f2_eval.jsonl")]
assert len(e) == 2 and e[0]["tokens"] == 8 and all(x["avg_loss"] > 0 for x in e), e
print("ok: mgt eval scores the format-2 checkpoint (%.4f) and its format-3 continuation (%.4f)"
      % (e[0]["avg_loss"], e[1]["avg_loss"]))
PY
# a format this version does not know yet: named as a later version's, not as no checkpoint
mkdir -p "$tmp/f4" && cp "$tmp/f2_a/iter_0000005.h5" "$tmp/f4/" && echo 5 > "$tmp/f4/latest"
$PY -c 'import h5py, sys; h5py.File(sys.argv[1], "r+").attrs["format"] = b"megatron-c checkpoint 4"' "$tmp/f4/iter_0000005.h5"
"$MGT" ckpt info "$tmp/f4" > "$tmp/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "iter_0000005.h5: format 4, written by a later version of mgt (this one reads formats 1-3)" "$tmp/out" &&
  echo "ok: $(cat "$tmp/out")" || { fail "a format-4 checkpoint (exit $rc)"; cat "$tmp/out"; }

echo "checkpoint: $fails failures"
[ $fails = 0 ]
