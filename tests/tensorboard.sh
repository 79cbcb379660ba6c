#!/usr/bin/env bash
# --tensorboard-dir: the event files read back by a reader of our own (below, in Python: the
# TFRecord framing with both masked CRC32Cs of every record checked against a table-driven
# CRC32C, the protobuf wire format decoded by hand), against the --metrics-file lines of the
# same run. Usage: tensorboard.sh MGT MPIEXEC [DATA_DIR]
#  - GPT at tp=2 (30 iterations, log every 5, validation every 10): the file's name
#    (events.out.tfevents.<seconds>.<hostname>, in a directory made with its parents), the
#    first record's file_version, then one event per metrics line at step = iteration holding
#    exactly that line's values under their tags, each equal to the JSON number as float32
#    (within one float32 step where the file prints 9 digits; null: not finite); steps and
#    wall times increasing and within the run;
#  - BERT: its lm and sop losses, training and validation;
#  - fine-tuning (with DATA_DIR's BERT vocabulary): loss, accuracy, and each of two validation
#    sets' accuracy, loss and F1 and the overall accuracy;
#  - the flush: a run killed with SIGKILL as soon as its metrics file shows iteration 10 has
#    every metrics line it wrote in its event file already;
#  - a byte flipped in a record's data or in its length is caught by the reader;
#  - a --tensorboard-dir that cannot be created (under a regular file) is one error line,
#    exit 2, before training.
set -u
MGT=$1 MPIEXEC=$2
. "$(dirname "$0")/lib.sh"

cat >"$tmp/tbread.py" <<'PY'
"""A TensorBoard event file reader written from the formats' specifications."""
import json, math, re, struct

def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t
_T = _table()

def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = _T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283

def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def records(data):
    """The data of every TFRecord; raises ValueError on a bad checksum or a cut record."""
    out, i = [], 0
    while i < len(data):
        if len(data) - i < 12:
            raise ValueError(f"cut header at byte {i}")
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        if hc != masked(head):
            raise ValueError(f"length checksum of the record at byte {i}")
        if len(data) - i - 12 < n + 4:
            raise ValueError(f"cut record at byte {i}")
        body = data[i + 12:i + 12 + n]
        (dc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if dc != masked(body):
            raise ValueError(f"data checksum of the record at byte {i}")
        out.append(body)
        i += 16 + n
    return out

def fields(b):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    def varint():
        nonlocal i
        v = s = 0
        while True:
            x = b[i]
            i += 1
            v |= (x & 0x7F) << s
            s += 7
            if not x & 0x80:
                return v
    while i < len(b):
        key = varint()
        f, w = key >> 3, key & 7
        if w == 0:
            v = varint()
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 2:
            n = varint()
            v, i = b[i:i + n], i + n
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {w}")
        if i > len(b):
            raise ValueError("field past the end of its message")
        yield f, w, v

def event(b):
    """tensorflow.Event: wall_time 1 (double), step 2 (int64), file_version 3 (string),
    summary 5 (Summary: repeated Value 1 {tag 1 (string), simple_value 2 (float)})."""
    e = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for f, w, v in fields(b):
        if (f, w) == (1, 1):
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif (f, w) == (2, 0):
            e["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif (f, w) == (3, 2):
            e["file_version"] = v.decode()
        elif (f, w) == (5, 2):
            for sf, sw, sv in fields(v):
                assert (sf, sw) == (1, 2), (sf, sw)
                tag = val = None
                for vf, vw, vv in fields(sv):
                    if (vf, vw) == (1, 2):
                        tag = vv.decode()
                    elif (vf, vw) == (2, 5):
                        val = struct.unpack("<f", vv)[0]
                assert tag is not None and val is not None, sv
                e["values"].append((tag, val))
        else:
            raise ValueError(f"unexpected Event field {f} (wire type {w})")
    return e

def read(path):
    return [event(r) for r in records(open(path, "rb").read())]

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def same_f32(got, v):
    """got is float32(x) for the x that the metrics file printed as v. Printed to 17 digits, v
    is x; printed to 9, x may lie on the other side of a float32 rounding boundary than v, so
    the float32 next to float32(v) is accepted too."""
    want = f32(v)
    if got == want:
        return True
    bits = lambda y: struct.unpack("<i", struct.pack("<f", y))[0]
    return float(f"{v:.9g}") == v and abs(bits(got) - bits(want)) == 1

# metrics-file key -> TensorBoard tag; training lines (GPT, BERT) and validation lines
TRAIN = {"consumed_samples": "consumed-samples", "consumed_tokens": "consumed-tokens",
         "lr": "learning-rate", "grad_norm": "grad-norm",
         "ms_per_iteration": "iteration-time-ms", "tokens_per_sec": "tokens-per-second",
         "tflops": "tflops", "tflops_per_rank": "throughput", "skipped_iterations": "skipped-iterations",
         "nan_iterations": "nan-iterations", "loss_scale": "loss-scale"}
GPT = dict(TRAIN, loss="lm loss")
BERT = dict(TRAIN, loss="loss", lm_loss="lm loss", sop_loss="sop loss",
            sop_accuracy="sop accuracy")
GPT_VALID = {"valid_loss": "lm loss validation", "valid_ppl": "lm loss validation ppl"}
BERT_VALID = {"valid_loss": "loss validation", "valid_ppl": "lm loss validation ppl",
              "valid_lm_loss": "lm loss validation", "valid_sop_loss": "sop loss validation",
              "valid_sop_accuracy": "sop accuracy validation"}
TASK = dict(TRAIN, loss="lm loss", accuracy="accuracy")

def expected(line, kind, batch, several):
    """The TensorBoard scalars of one metrics line. kind: gpt, bert or task (fine-tuning,
    whose validation lines name their set, "<key> validation <set>" with several sets; their
    example counts are not scalars)."""
    if kind == "task" and "valid_data" in line:
        at = f" {line['valid_data']}" if several else ""
        return {f"{k} validation{at}": line[k] for k in ("accuracy", "loss", "f1") if k in line}
    valid = "valid_loss" in line
    table = {"gpt": (GPT, GPT_VALID), "bert": (BERT, BERT_VALID), "task": (TASK, None)}[kind]
    want = {table[valid][k]: v for k, v in line.items() if k != "iteration"}
    if not valid:
        want["batch-size"] = batch
    return want

def compare(lines, events, kind, batch):
    """Event k holds exactly the values of metrics line k at its iteration; returns the
    number of values compared."""
    assert len(events) >= len(lines), (len(events), len(lines))
    several = any(l.get("valid_data") == "overall" for l in lines)
    n = 0
    for line, e in zip(lines, events):
        assert e["step"] == line["iteration"], (e["step"], line)
        got = dict(e["values"])
        assert len(got) == len(e["values"]), ("a tag twice in one event", e["values"])
        want = expected(line, kind, batch, several)
        assert set(got) == set(want), (line["iteration"], sorted(got), sorted(want))
        for tag, v in want.items():
            if v is None:
                assert not math.isfinite(got[tag]), (line["iteration"], tag, got[tag])
            else:
                assert same_f32(got[tag], v), (line["iteration"], tag, got[tag], v, f32(v))
            n += 1
    return n

def check_file(d, t0, t1):
    """The one event file of directory d, made between t0 and t1: its name, its first record,
    wall times and steps. Returns its events after the first."""
    import os, socket
    names = os.listdir(d)
    assert len(names) == 1, names
    m = re.fullmatch(r"events\.out\.tfevents\.(\d+)\.(.+)", names[0])
    assert m and m.group(2) == socket.gethostname(), names[0]
    assert int(t0) <= int(m.group(1)) <= t1, (names[0], t0, t1)
    ev = read(os.path.join(d, names[0]))
    assert ev[0]["file_version"] == "brain.Event:2" and not ev[0]["values"], ev[0]
    assert all(e["file_version"] is None for e in ev[1:])
    walls = [e["wall_time"] for e in ev]
    assert all(t0 - 1 <= w <= t1 + 1 for w in walls), (t0, t1, walls)
    assert walls == sorted(walls), walls
    steps = [e["step"] for e in ev]
    assert steps == sorted(steps), steps
    return ev[1:], os.path.join(d, names[0])

def lines(p):
    """The complete JSON lines of a metrics file (a killed run may have left half a line)."""
    return [json.loads(l) for l in open(p).read().split("\n")[:-1]]

def check_run(d, name, kind, batch, n_lines, t0, t1, *need):
    """Run `name` (events in d/runs/name/tb, metrics in d/name.jsonl, made between t0 and t1):
    n_lines metrics lines ("any": at least one) and as many events, each holding its line's
    values; the tags `need` among them."""
    ev, _ = check_file(f"{d}/runs/{name}/tb", float(t0), float(t1))
    ln = lines(f"{d}/{name}.jsonl")
    assert ln and (n_lines == "any" or len(ln) == int(n_lines) == len(ev)), (len(ln), len(ev))
    n = compare(ln, ev, kind, int(batch))
    tags = {t for e in ev for t, _ in e["values"]}
    assert set(need) <= tags, sorted(set(need) - tags)
    print(f"ok: {name}: {len(ln)} metrics lines (to iteration {ln[-1]['iteration']}), {len(ev)} "
          f"events; {n} values equal as float32; tags {sorted(tags)}")
PY

# check NAME KIND BATCH LINES T0 T1 [TAG...]: check_run above
check() {
  $PY - "$tmp" "$@" <<'PY' || fail "$1: its event file against its metrics file"
import sys
sys.path.insert(0, sys.argv[1])
from tbread import check_run
check_run(sys.argv[1], *sys.argv[2:])
PY
}

M=(--num-layers 2 --hidden-size 16 --num-attention-heads 2 --micro-batch-size 2
  --global-batch-size 4 --log-interval 5 --eval-interval 10 --eval-iters 2)
now() { $PY -c 'import time; print(repr(time.time()))'; }

# ---- GPT at tp=2: every metrics value at its step ----
t0=$(now)
"$MPIEXEC" -n 2 "$MGT" train --mock-data --tokenizer-type ByteTokenizer --seq-length 8 "${M[@]}" \
  --tensor-model-parallel-size 2 --train-iters 30 --metrics-file "$tmp/gpt.jsonl" \
  --tensorboard-dir "$tmp/runs/gpt/tb" >"$tmp/gpt.log" 2>&1 || { fail "GPT run"; tail -5 "$tmp/gpt.log"; }
check gpt gpt 4 9 "$t0" "$(now)" "lm loss" "lm loss validation" "lm loss validation ppl"

# ---- BERT: lm and sop losses ----
t0=$(now)
"$MPIEXEC" -n 2 "$MGT" train --model bert --mock-data --seq-length 16 "${M[@]}" \
  --tensor-model-parallel-size 2 --train-iters 10 --metrics-file "$tmp/bert.jsonl" \
  --tensorboard-dir "$tmp/runs/bert/tb" >"$tmp/bert.log" 2>&1 || { fail "BERT run"; tail -5 "$tmp/bert.log"; }
check bert bert 4 3 "$t0" "$(now)" "lm loss" "sop loss" "sop accuracy" "lm loss validation" \
  "sop loss validation"

# ---- the flush: what the metrics file shows survives SIGKILL in the event file ----
t0=$(now)
"$MGT" train --mock-data --tokenizer-type ByteTokenizer --seq-length 32 --num-layers 2 \
  --hidden-size 64 --num-attention-heads 4 --micro-batch-size 4 --global-batch-size 8 \
  --log-interval 5 --eval-interval 10 --eval-iters 2 --train-iters 1000000 \
  --metrics-file "$tmp/kill.jsonl" --tensorboard-dir "$tmp/runs/kill/tb" >"$tmp/kill.log" 2>&1 &
pid=$!
for _ in $(seq 600); do # up to 60 s
  grep -q '"iteration":10,"consumed' "$tmp/kill.jsonl" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -KILL $pid 2>/dev/null
{ wait $pid; } 2>/dev/null # not the shell's "Killed"
rc=$?
[ $rc = 137 ] || { fail "the long run was not killed (exit $rc)"; tail -5 "$tmp/kill.log"; }
grep -q '"iteration":10,"consumed' "$tmp/kill.jsonl" || fail "the long run did not reach iteration 10"
check kill gpt 8 any "$t0" "$(now)"

# ---- fine-tuning (mgt finetune, QQP from a mock-data BERT; needs DATA_DIR's vocabulary):
# its loss and accuracy, and each validation set's accuracy, loss and F1 ----
V=${3:-}/bert/bert-base-uncased-vocab.txt
if [ -f "$V" ]; then
  $PY - "$tmp" <<'PY'
import random, sys
r = random.Random(1)
w = "the a man dog cat house river tree".split()
for name, n in (("train", 64), ("dev1", 12), ("dev2", 12)):
    with open(f"{sys.argv[1]}/qqp.{name}.tsv", "w") as f:
        f.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
        for i in range(n):
            y = r.randrange(2)
            f.write("%d\t%d\t%d\t%s?\t%s %s?\t%d\n" % (i, 2 * i, 2 * i + 1, " ".join(r.sample(w, 3)),
                                                "why" if y else "where", " ".join(r.sample(w, 3)), y))
PY
  ARCH=(--num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 32
    --max-position-embeddings 32 --make-vocab-size-divisible-by 8
    --tokenizer-type BertWordPieceLowerCase --vocab-file "$V")
  "$MGT" train --model bert --mock-data "${ARCH[@]}" --micro-batch-size 4 --global-batch-size 4 \
    --train-iters 2 --eval-iters 0 --save "$tmp/pre" >"$tmp/pre.log" 2>&1 || { fail "pretraining"; tail -5 "$tmp/pre.log"; }
  t0=$(now)
  "$MPIEXEC" -n 2 "$MGT" finetune "${ARCH[@]}" --task QQP --tensor-model-parallel-size 2 \
    --micro-batch-size 8 --global-batch-size 8 --epochs 1 --log-interval 2 --eval-interval 4 \
    --pretrained-checkpoint "$tmp/pre" --train-data "$tmp/qqp.train.tsv" \
    --valid-data "$tmp/qqp.dev1.tsv" "$tmp/qqp.dev2.tsv" --metrics-file "$tmp/ft.jsonl" \
    --tensorboard-dir "$tmp/runs/ft/tb" >"$tmp/ft.log" 2>&1 || { fail "fine-tuning run"; tail -5 "$tmp/ft.log"; }
  check ft task 8 10 "$t0" "$(now)" "lm loss" "accuracy" "accuracy validation $tmp/qqp.dev2.tsv" \
    "f1 validation $tmp/qqp.dev1.tsv" "accuracy validation overall"
elif [ -n "${MGT_REQUIRE_DATA:-}" ]; then
  fail "no $V (MGT_REQUIRE_DATA: the data must be there)"
else
  echo "skipped: fine-tuning (no $V)"
fi

# ---- damage: one flipped byte in a record's data, then in a record's length ----
$PY - "$tmp" <<'PY' || fail "the reader missed a damaged record"
import glob, sys
sys.path.insert(0, sys.argv[1])
from tbread import *
path = glob.glob(f"{sys.argv[1]}/runs/gpt/tb/events.out.tfevents.*")[0]
data = bytearray(open(path, "rb").read())
n0 = len(records(bytes(data)))
first = 16 + struct.unpack("<Q", data[:8])[0] # where the second record starts
for where, at in (("data", first + 12 + 5), ("length", first + 2)):
    bad = bytearray(data)
    bad[at] ^= 0x10
    try:
        records(bytes(bad))
    except ValueError as e:
        print(f"ok: a byte flipped in the second record's {where} (of {n0}): {e}")
    else:
        raise SystemExit(f"FAIL: a byte flipped in the {where} went unnoticed")
PY

# ---- a directory that cannot be made ----
touch "$tmp/plain"
expect "--tensorboard-dir $tmp/plain/tb: cannot create: Not a directory" \
  "$MPIEXEC" -n 2 "$MGT" train --mock-data --tokenizer-type ByteTokenizer --seq-length 8 "${M[@]}" \
  --train-iters 2 --tensorboard-dir "$tmp/plain/tb" --metrics-file "$tmp/never.jsonl"
grep -q "iteration" "$tmp/never.jsonl" 2>/dev/null && fail "training ran despite the bad --tensorboard-dir"

echo "tensorboard: $fails failures"
[ $fails = 0 ]
