#!/usr/bin/env bash
# mgt plot: loss curves of real metrics files (two GPT runs with different --lr, one at tp=2 on
# 2 ranks, and a BERT run; a file a resumed run appended to; fine-tuning lines with two
# validation sets) drawn overlaid, linear and --log-scale, against iterations and --x tokens.
# Every SVG is rendered by a real renderer (rsvg-convert, from librsvg2-bin: jobs/deps.sh)
# into a PNG of the requested size with the runs' colours in it, and a truncated SVG
# must make the renderer fail; each SVG is parsed as XML, has a legend entry per run with its
# label (file names with & < > and quotes), and its polylines and markers, mapped back through
# the axis ranges it carries (checked against its tick labels), give the metrics' values within
# a pixel, the last of a repeated iteration. The same input gives the same bytes. Refusals: no
# files, a missing file, a malformed line (file:line), nothing to plot, an unwritable --output.
# Usage: plot.sh MGT MPIEXEC
set -u
MGT=$1 MPIEXEC=$2
. "$(dirname "$0")/lib.sh"

if ! command -v rsvg-convert >/dev/null; then
  echo "FAIL: rsvg-convert not found: install librsvg2-bin (jobs/deps.sh does)"
  exit 1
fi

# ---- metrics from real runs ----
M="--mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --vocab-size 64 --micro-batch-size 4 --global-batch-size 8 --train-iters 40 --lr-warmup-iters 5
  --eval-interval 10 --eval-iters 2 --log-interval 2"
"$MGT" train $M --lr 1e-3 --metrics-file "$tmp/gpt-lr1e-3.jsonl" >"$tmp/a.log" 2>&1 ||
  { fail "GPT run at lr 1e-3"; tail -5 "$tmp/a.log"; }
"$MPIEXEC" -n 2 "$MGT" train $M --lr 3e-3 --tensor-model-parallel-size 2 \
  --metrics-file "$tmp/gpt-lr3e-3-tp2.jsonl" >"$tmp/b.log" 2>&1 ||
  { fail "GPT run at lr 3e-3, tp 2"; tail -5 "$tmp/b.log"; }
"$MGT" train $M --model bert --lr 1e-3 --metrics-file "$tmp/bert.jsonl" >"$tmp/c.log" 2>&1 ||
  { fail "BERT run"; tail -5 "$tmp/c.log"; }
for f in gpt-lr1e-3 gpt-lr3e-3-tp2 bert; do
  [ "$(grep -c '"valid_loss"' "$tmp/$f.jsonl")" = 4 ] && [ "$(grep -c '"lr"' "$tmp/$f.jsonl")" = 20 ] ||
    fail "$f.jsonl: expected 20 training and 4 validation lines"
done
# a name XML must escape; a run resumed from iteration 20 (its later values differ, and win);
# fine-tuning lines as mgt finetune writes them, two validation sets and their overall line
odd="$tmp/a&b<c>\"d'.jsonl"
cp "$tmp/gpt-lr1e-3.jsonl" "$odd"
$PY - "$tmp/gpt-lr1e-3.jsonl" "$tmp/resumed.jsonl" "$tmp/finetune.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for d in lines:
        f.write(json.dumps(d) + "\n")
    for d in lines:
        if d["iteration"] >= 20:
            d = dict(d)
            for k in ("loss", "valid_loss"):
                if k in d:
                    d[k] = d[k] * 0.5
            f.write(json.dumps(d) + "\n")
with open(sys.argv[3], "w") as f:
    for it in range(1, 31):
        f.write(json.dumps({"iteration": it, "consumed_samples": 32 * it, "loss": 1.4 / it ** 0.3,
                            "accuracy": 0.3, "lr": 1e-5 * min(1, it / 3), "grad_norm": 1.0,
                            "ms_per_iteration": 100.0, "tokens_per_sec": 32 * 128 / 0.1}) + "\n")
        if it % 10 == 0:
            for k, name in enumerate(["data/mnli/dev_matched.tsv", "data/mnli/dev_mismatched.tsv"]):
                f.write(json.dumps({"iteration": it, "task": "MNLI", "valid_data": name,
                                    "examples": 100, "correct": 50, "accuracy": 0.5,
                                    "loss": 1.2 / it ** 0.2 + 0.1 * k}) + "\n")
            f.write(json.dumps({"iteration": it, "task": "MNLI", "valid_data": "overall",
                                "examples": 200, "correct": 100, "accuracy": 0.5}) + "\n")
PY

# ---- pictures ----
# NAME|LABELS|EXPECTED X (iteration or tokens: samples x 16)|flags...|files...
G1=$tmp/gpt-lr1e-3.jsonl G2=$tmp/gpt-lr3e-3-tp2.jsonl B=$tmp/bert.jsonl
plot() {
  local name=$1
  shift
  "$MGT" plot "$@" --output "$tmp/$name.svg" >"$tmp/$name.out" 2>&1 &&
    echo "ok: $(cat "$tmp/$name.out")" || { fail "mgt plot $*"; cat "$tmp/$name.out"; }
}
plot over "$G1" "$G2" "$B"
plot log "$G1" "$G2" "$B" --log-scale --width 640 --height 480 --title 'loss & <lr> "runs"'
plot tokens "$G1" "$G2" "$B" --x tokens --labels 'lr 1e-3,lr 3e-3 tp=2,BERT'
plot tokens_log "$G1" "$B" --x tokens --log-scale --width 1000 --height 700
plot odd "$odd" "$G2" --title "l'odd & <file>"
plot lm "$B" --metric lm_loss --log-scale
plot resumed "$tmp/resumed.jsonl" "$G1" --labels 'resumed,original'
plot finetune "$tmp/finetune.jsonl" --x tokens --log-scale
"$MGT" plot "$G1" "$G2" "$B" --output "$tmp/again.svg" >/dev/null 2>&1 &&
  cmp -s "$tmp/over.svg" "$tmp/again.svg" && echo "ok: the same input gives the same bytes" ||
  fail "two plots of the same input differ"

# (1) a real renderer draws each at its size, with colours; a broken picture fails to render
for name in over log tokens tokens_log odd lm resumed finetune; do
  rsvg-convert "$tmp/$name.svg" -o "$tmp/$name.png" 2>"$tmp/r.err" || { fail "rsvg-convert $name.svg"; cat "$tmp/r.err"; }
done
head -c "$(($(wc -c <"$tmp/over.svg") / 2))" "$tmp/over.svg" >"$tmp/broken.svg"
if rsvg-convert "$tmp/broken.svg" -o "$tmp/broken.png" 2>/dev/null; then
  fail "rsvg-convert rendered a truncated SVG: the rendering check cannot fail"
else
  echo "ok: rsvg-convert refuses a truncated SVG"
fi
$PY - "$tmp" <<'PY' || fail "rendered pictures"
import struct, sys, zlib
tmp = sys.argv[1]
PALETTE = [(0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28), (0x2c, 0xa0, 0x2c)]

def png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path + ": not a PNG"
    at, idat, w = 8, b"", None
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    bpp = 4 if ctype == 6 else 3
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else: assert f == 0, "filter %d" % f
        rows.append(bytes(line))
        prev = line
    return w, h, [tuple(r[i:i + 3]) for r in rows for i in range(0, stride, bpp)]

sizes = {"log": (640, 480), "tokens_log": (1000, 700)}
runs = {"over": 3, "log": 3, "tokens": 3, "tokens_log": 2, "odd": 2, "lm": 1, "resumed": 2,
        "finetune": 1}
for name, k in runs.items():
    w, h, px = png("%s/%s.png" % (tmp, name))
    assert (w, h) == sizes.get(name, (800, 600)), (name, w, h)
    colours = set(px)
    white = sum(p == (255, 255, 255) for p in px) / len(px)
    assert len(colours) >= 20 and 0.5 < white < 0.99, (name, len(colours), white)
    for c in PALETTE[:k]:  # each run's colour is drawn (within antialiasing of it)
        near = sum(1 for p in px if sum((p[i] - c[i]) ** 2 for i in range(3)) < 30 ** 2)
        assert near >= 50, (name, c, near)
    print("ok: %s.png is %dx%d, %d colours, %.0f%% white, each run's colour drawn"
          % (name, w, h, len(colours), 100 * white))
PY

# (2) the XML: legend, ticks, and the curves mapped back to the metrics
$PY - "$tmp" "$odd" <<'PY' || fail "SVG structure and curves"
import json, math, os, re, sys
import xml.etree.ElementTree as ET
tmp, odd = sys.argv[1], sys.argv[2]
S, N = "{http://www.w3.org/2000/svg}", "{urn:x-megatron-c:plot}"
G1, G2, B = ("%s/%s.jsonl" % (tmp, n) for n in ("gpt-lr1e-3", "gpt-lr3e-3-tp2", "bert"))
R, F = tmp + "/resumed.jsonl", tmp + "/finetune.jsonl"
base = os.path.basename
cases = {  # name: files, labels, x, metric, log
    "over": ([G1, G2, B], None, "iteration", "loss", 0),
    "log": ([G1, G2, B], None, "iteration", "loss", 1),
    "tokens": ([G1, G2, B], ["lr 1e-3", "lr 3e-3 tp=2", "BERT"], "tokens", "loss", 0),
    "tokens_log": ([G1, B], None, "tokens", "loss", 1),
    "odd": ([odd, G2], None, "iteration", "loss", 0),
    "lm": ([B], None, "iteration", "lm_loss", 1),
    "resumed": ([R, G1], ["resumed", "original"], "iteration", "loss", 0),
    "finetune": ([F], None, "tokens", "loss", 1),
}

def series(path, metric, x):
    """What the picture should show: training loss, lr and validation sets, last line wins."""
    train, lr, valid = {}, {}, {}
    per = {}  # tokens per sample: 16 for our runs, 128 for the fine-tuning lines
    for line in open(path):
        d = json.loads(line)
        it = d["iteration"]
        if "task" in d:
            if "loss" in d:
                valid.setdefault(d["valid_data"], {})[it] = d["loss"]
        elif "valid_loss" in d:
            valid.setdefault("", {})[it] = d["valid_" + metric]
        else:
            if d.get(metric) is not None:
                train[it] = d[metric]
            lr[it] = d["lr"]
    tps = 128 if path == F else 16
    gb = 32 if path == F else 8
    X = (lambda it: it * gb * tps) if x == "tokens" else (lambda it: it)
    pts = lambda m: [(X(it), v) for it, v in sorted(m.items())]
    return pts(train), pts(lr), {k: pts(v) for k, v in valid.items()}

def scale(g):
    a = {k: float(g.get(N + k)) for k in ("x0", "x1", "y0", "y1", "left", "top", "width", "height")}
    log = g.get(N + "log") == "1"
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    def to_px(x, y):
        return (a["left"] + (x - a["x0"]) / (a["x1"] - a["x0"]) * a["width"],
                a["top"] + a["height"] - (f(y) - f(a["y0"])) / (f(a["y1"]) - f(a["y0"])) * a["height"])
    return to_px, a, log

def label_value(t):
    m = re.fullmatch(r"(-?[0-9.]+(?:e-?[0-9]+)?)([kMBT]?)", t)
    assert m, "tick label %r" % t
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[m.group(2)]

def check_ticks(g, to_px, a, name):
    """Tick labels are the round numbers they claim, where the axis scale puts them."""
    xs = g.find(S + "g[@class='xticks']").findall(S + "text")
    ys = g.find(S + "g[@class='yticks']").findall(S + "text")
    assert len(xs) >= 3 and len(ys) >= 3, (name, len(xs), len(ys))
    for t in xs + ys:
        v, shown = float(t.get(N + "value")), label_value(t.text)
        assert abs(shown - v) <= 1e-9 * max(1, abs(v)), (name, t.text, v)
        px, py = to_px(v, a["y0"]) if t in xs else to_px(a["x0"], v)
        if t in xs:
            assert abs(float(t.get("x")) - px) < 0.01, (name, t.text)
        else:
            assert abs(float(t.get("y")) - 4 - py) < 0.01, (name, t.text)
    assert xs[0].get(N + "value") == g.get(N + "x0") and xs[-1].get(N + "value") == g.get(N + "x1")

def same(got, want, to_px, what):
    want = [to_px(x, y) for x, y in want]
    assert len(got) == len(want), "%s: %d points, the metrics have %d" % (what, len(got), len(want))
    worst = max(math.hypot(g[0] - w[0], g[1] - w[1]) for g, w in zip(got, want))
    assert worst <= 1.0, "%s: a point %.2f pixels from the metrics" % (what, worst)
    return worst

def points(el):
    return [tuple(map(float, p.split(","))) for p in el.get("points").split()]

for name, (files, labels, x, metric, log) in cases.items():
    root = ET.parse("%s/%s.svg" % (tmp, name)).getroot()
    assert root.tag == S + "svg" and root.get("version") == "1.1", root.tag
    assert root.get(N + "x") == x, name
    entries = root.find(S + "g[@id='legend']").findall(S + "g[@class='entry']")
    want = labels or [base(f) for f in files]
    got = [e.find(S + "text").text for e in entries]
    assert got == want, (name, got, want)
    loss, lrp = root.find(S + "g[@id='loss']"), root.find(S + "g[@id='lr']")
    lpx, la, llog = scale(loss)
    rpx, ra, _ = scale(lrp)
    assert llog == bool(log) and (la["x0"], la["x1"]) == (ra["x0"], ra["x1"]), name
    check_ticks(loss, lpx, la, name)
    check_ticks(lrp, rpx, ra, name)
    worst = 0
    for i, f in enumerate(files):
        train, lr, valid = series(f, metric, x)
        tl = [p for p in loss.findall(S + "polyline[@class='train']") if p.get(N + "run") == str(i)]
        assert len(tl) == 1, (name, i, len(tl))
        worst = max(worst, same(points(tl[0]), train, lpx, "%s run %d training" % (name, i)))
        ll = [p for p in lrp.findall(S + "polyline[@class='lr']") if p.get(N + "run") == str(i)]
        worst = max(worst, same(points(ll[0]), lr, rpx, "%s run %d lr" % (name, i)))
        groups = [g for g in loss.findall(S + "g[@class='valid']") if g.get(N + "run") == str(i)]
        assert sorted(g.get(N + "set") for g in groups) == sorted(valid), (name, i)
        for g in groups:
            v = valid[g.get(N + "set")]
            worst = max(worst, same(points(g.find(S + "polyline")), v, lpx, name + " valid"))
            marks = [(float(c.get("cx")), float(c.get("cy"))) for c in g.findall(S + "circle")]
            marks += [(float(r.get("x")) + 3, float(r.get("y")) + 3) for r in g.findall(S + "rect")]
            if marks:
                worst = max(worst, same(marks, v, lpx, name + " valid markers"))
        if len(groups) > 1:  # a legend row per validation set
            rows = [t.text.strip() for t in entries[i].findall(S + "text")[1:]]
            assert rows == [base(s) for s in valid], rows
    print("ok: %s.svg: %d legend entries %s, curves within %.2f px of the metrics"
          % (name, len(entries), got, worst))

# the resumed file shows the values its later run wrote, not the first ones
root = ET.parse(tmp + "/resumed.svg").getroot()
loss = root.find(S + "g[@id='loss']")
a, b = (points(p) for p in loss.findall(S + "polyline[@class='train']"))
assert a[:9] == b[:9] and all(p[1] > q[1] for p, q in zip(a[9:], b[9:])), "resumed: kept the first values"
print("ok: a resumed run's repeated iterations show their last values")
title = ET.parse(tmp + "/log.svg").getroot().find(S + "title").text
assert title == 'loss & <lr> "runs"', title
print("ok: titles and labels with & < > and quotes come back as written")
PY

# (2b) a batch ramp: --x tokens from the tokens of each line (consumed_tokens), and for files
# without them (an earlier version's) from each interval's samples, not the mean batch since
# iteration 0 (which put iteration 24 of this run at 2304 tokens, 70 samples x 16 = 1120)
"$MGT" train --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
  --micro-batch-size 2 --global-batch-size 16 --rampup-batch-size 2 2 200 --train-samples 600 \
  --log-interval 2 --eval-iters 0 --metrics-file "$tmp/ramp.jsonl" >"$tmp/ramp.log" 2>&1 ||
  { fail "ramp run"; tail -3 "$tmp/ramp.log"; }
$PY - "$tmp/ramp.jsonl" "$tmp/ramp-old.jsonl" <<'PY' || fail "consumed_tokens"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows and all(r["consumed_tokens"] == 16 * r["consumed_samples"] for r in rows), rows[:2]
assert len({r["consumed_samples"] - 2 * r["iteration"] for r in rows}) > 1  # the batch ramped
with open(sys.argv[2], "w") as f:
    for r in rows:
        del r["consumed_tokens"]
        f.write(json.dumps(r) + "\n")
print("ok: consumed_tokens = consumed_samples x 16 on %d lines of a ramped run" % len(rows))
PY
for f in ramp ramp-old; do
  "$MGT" plot "$tmp/$f.jsonl" --x tokens --labels ramp --output "$tmp/$f.svg" >/dev/null 2>&1 ||
    fail "plot $f --x tokens"
done
cmp -s "$tmp/ramp.svg" "$tmp/ramp-old.svg" && grep -q 'mgt:x1="10000"' "$tmp/ramp.svg" &&
  echo "ok: a ramped run against tokens: the same picture with and without consumed_tokens, to 10000" ||
  fail "a ramped run against tokens: $(grep -o 'mgt:x1="[^"]*"' "$tmp/ramp.svg" "$tmp/ramp-old.svg")"
# values too small for the axes' powers of ten are drawn at 0
printf '{"iteration":1,"loss":1e-310}\n{"iteration":2,"loss":2.5}\n' >"$tmp/sub.jsonl"
printf '{"iteration":1,"loss":1e-320}\n{"iteration":2,"loss":2e-320}\n' >"$tmp/sub2.jsonl"
for c in "sub.jsonl --log-scale" "sub2.jsonl"; do
  set -- $c
  "$MGT" plot "$tmp/$1" ${2:-} --output "$tmp/sub.svg" >/dev/null 2>&1 && ! grep -qi nan "$tmp/sub.svg" &&
    rsvg-convert "$tmp/sub.svg" -o "$tmp/sub.png" 2>/dev/null && echo "ok: subnormal losses ($c) drawn" ||
    fail "subnormal losses ($c)"
done

# (3) refusals: one line, exit 2
printf '{"iteration":2,"loss":3.5,"lr":0.001}\n{"iteration":4,"loss":3.4,"lr"\n' >"$tmp/bad.jsonl"
printf '{"iteration":2,"lr":0.001}\n{"note":"no losses"}\n' >"$tmp/none.jsonl"
printf 'iteration loss\n2 3.5\n' >"$tmp/text.txt"
expect "no metrics files" "$MGT" plot --output "$tmp/x.svg"
expect "--output: missing" "$MGT" plot "$G1"
expect "$tmp/missing.jsonl: cannot open" "$MGT" plot "$G1" "$tmp/missing.jsonl" --output "$tmp/x.svg"
expect "$tmp/bad.jsonl:2: not a JSON line" "$MGT" plot "$G1" "$tmp/bad.jsonl" --output "$tmp/x.svg"
expect "$tmp/text.txt:1: not a JSON line" "$MGT" plot "$tmp/text.txt" --output "$tmp/x.svg"
expect "$tmp/none.jsonl: none of its 2 lines has \"loss\"" "$MGT" plot "$tmp/none.jsonl" --output "$tmp/x.svg"
expect "none of its" "$MGT" plot "$tmp/finetune.jsonl" --metric sop_loss --output "$tmp/x.svg"
expect "--output /nonexistent/dir/x.svg.tmp: cannot open for writing" "$MGT" plot "$G1" --output /nonexistent/dir/x.svg
expect "--output $tmp: is a directory" "$MGT" plot "$G1" --output "$tmp"
expect "is the metrics file" "$MGT" plot "$G1" --output "$G1"
expect "--labels: 1 labels for 2 metrics files" "$MGT" plot "$G1" "$G2" --labels one --output "$tmp/x.svg"
expect "--x: expected one of iteration, tokens" "$MGT" plot "$G1" --x time --output "$tmp/x.svg"
[ ! -e "$tmp/x.svg" ] && [ -z "$(ls "$tmp" | grep '\.tmp$')" ] && echo "ok: refusals leave no file" ||
  fail "a refused plot left a file"
"$MPIEXEC" -n 2 "$MGT" plot "$G1" --output "$tmp/two.svg" >"$tmp/two.out" 2>&1
"$MGT" plot "$G1" --output "$tmp/one.svg" >/dev/null 2>&1
cmp -s "$tmp/two.svg" "$tmp/one.svg" && [ "$(grep -c "wrote" "$tmp/two.out")" = 1 ] &&
  echo "ok: under mpiexec one rank writes the same picture" || { fail "mgt plot on 2 ranks"; cat "$tmp/two.out"; }
echo "plot: $fails failures"
[ $fails = 0 ]
