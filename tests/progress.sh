#!/usr/bin/env bash
# Progress of long work on stderr: mgt preprocess (MB and documents over all ranks, rate, time
# left), mgt eval (windows) and checkpoint save and load (GB). In a pipe: plain lines, a few
# per interval (MGT_PROGRESS_SECONDS), never one per document or token, nothing from ranks
# other than 0, and no line when the work ends before the first is due; on a pseudo-terminal
# (Python's pty): one line rewritten in place with \r and erase-to-end, cleared at the end.
# Usage: progress.sh MGT MPIEXEC DATA_DIR (exit 77 without DATA_DIR)
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
G=$DATA/gpt2
[ -f "$G/gpt2-vocab.json" ] && [ -d "$DATA/books" ] || { echo "no shared data: skipped"; exit 77; }
. "$(dirname "$0")/lib.sh"

$PY - "$DATA/books" "$tmp/books.jsonl" <<'PY'
import glob, json, sys
with open(sys.argv[2], "w") as f:
    for p in sorted(glob.glob(sys.argv[1] + "/*.txt")):
        for para in open(p, encoding="utf-8").read().split("\n\n"):
            if para.strip():
                f.write(json.dumps({"text": para}) + "\n")
PY
PP=(preprocess --input "$tmp/books.jsonl" --vocab-file "$G/gpt2-vocab.json" --merge-file "$G/gpt2-merges.txt")

# ---- in a pipe ----
start=$($PY -c 'import time; print(time.time())')
MGT_PROGRESS_SECONDS=0.02 "$MPIEXEC" -n 2 "$MGT" "${PP[@]}" --output-prefix "$tmp/a" >"$tmp/a.out" 2>"$tmp/a.err" ||
  { fail "preprocess"; cat "$tmp/a.err"; }
$PY - "$tmp/a.err" "$start" "$tmp/a.out" <<'PY' || fail "preprocess progress in a pipe"
import re, sys, time
err = open(sys.argv[1], "rb").read().decode()
lines = [l for l in err.split("\n") if l.startswith("preprocess:")]
assert "\r" not in err and "\x1b" not in err, "terminal codes in a pipe"
pat = re.compile(r"preprocess: ([0-9.]+) of ([0-9.]+) MB \(([0-9]+)%\), [0-9.]+ MB/s, \S+ elapsed, \S+ left, ([0-9]+) documents$")
m = [pat.match(l) for l in lines]
assert lines and all(m), lines[:3]
total = float(m[0].group(2))
done = [float(x.group(1)) for x in m]
docs = int(open(sys.argv[3]).read().split("wrote")[1].split(":")[1].split()[0])
assert done == sorted(done) and abs(done[-1] - total) < 0.05, done
assert int(m[-1].group(4)) == docs, (m[-1].group(4), docs)  # over all ranks: every document
took = time.time() - float(sys.argv[2])
assert 2 <= len(lines) <= took / 0.02 + 3, (len(lines), took)
print("ok: preprocess on 2 ranks in a pipe: %d progress lines in %.1f s, to %.1f MB and all %d documents" % (len(lines), took, total, docs))
PY
# the default interval: a short job shows nothing
"$MGT" "${PP[@]}" --output-prefix "$tmp/b" >/dev/null 2>"$tmp/b.err" && [ ! -s "$tmp/b.err" ] &&
  echo "ok: a job shorter than the interval prints no progress" || { fail "quiet when short"; cat "$tmp/b.err"; }

# ---- on a pseudo-terminal ----
$PY - "$MGT" "$tmp" "${PP[@]}" <<'PY' || fail "preprocess progress on a terminal"
import os, pty, subprocess, sys
mgt, tmp, args = sys.argv[1], sys.argv[2], sys.argv[3:]
master, slave = pty.openpty()
inp = args.index("--input") + 1  # three times the input: a second or so of work
args = args[:inp + 1] + [args[inp], args[inp]] + args[inp + 1:]
p = subprocess.Popen([mgt] + args + ["--output-prefix", tmp + "/c"], stdout=subprocess.DEVNULL,
                     stderr=slave, env=dict(os.environ, MGT_PROGRESS_SECONDS="30"))
os.close(slave)
out = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
assert p.wait() == 0
text = out.decode()
shown = [s for s in text.split("\r") if s.startswith("preprocess:")]
assert "\n" not in text.replace("\r\n", ""), repr(text[:200])  # never a new line
assert len(shown) >= 2 and all(s.endswith("\x1b[K") for s in shown), repr(text[:300])
assert text.endswith("\r\x1b[K"), repr(text[-40:])  # the line cleared at the end
print("ok: on a terminal: %d updates of one line (5 per second at most, not the 30 s of a log), cleared at the end" % len(shown))
PY

# ---- mgt eval and checkpoints ----
"$MGT" train --data-path "$tmp/a" --vocab-file "$G/gpt2-vocab.json" --merge-file "$G/gpt2-merges.txt" \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 \
  --global-batch-size 4 --train-iters 2 --eval-iters 0 --save "$tmp/ck" >"$tmp/t.out" 2>"$tmp/t.err" || { fail "train"; cat "$tmp/t.err"; }
MGT_PROGRESS_SECONDS=0.000001 "$MPIEXEC" -n 2 "$MGT" eval --task lm --load "$tmp/ck" \
  --text "$DATA/books/pg11-alices-adventures-in-wonderland.txt" --micro-batch-size 4 >"$tmp/e.out" 2>"$tmp/e.err" || { fail "eval"; cat "$tmp/e.err"; }
$PY - "$tmp/e.err" <<'PY' || { fail "eval and load progress"; head -5 "$tmp/e.err"; }
import re, sys
lines = open(sys.argv[1]).read().splitlines()
ev = [l for l in lines if l.startswith("eval:")]
ld = [l for l in lines if l.startswith("checkpoint load:")]
assert ev and all(re.match(r"eval: [0-9.]+ of [0-9.]+ windows \([0-9]+%\)", l) for l in ev), ev[:2]
n = [float(l.split()[1]) for l in ev]
assert n == sorted(n) and len(set(l.split()[3] for l in ev)) == 1, ev[:3]
assert ld and all(re.match(r"checkpoint load: [0-9.]+ of [0-9.]+ GB", l) for l in ld), ld[:2]
print("ok: mgt eval on 2 ranks: %d lines of windows done (rank 0 only), %d of the checkpoint load" % (len(ev), len(ld)))
PY
MGT_PROGRESS_SECONDS=0.000001 "$MGT" train --data-path "$tmp/a" --vocab-file "$G/gpt2-vocab.json" \
  --merge-file "$G/gpt2-merges.txt" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0 --save "$tmp/ck2" \
  >/dev/null 2>"$tmp/s.err" && grep -q "^checkpoint save: .* GB" "$tmp/s.err" &&
  echo "ok: checkpoint save progress" || { fail "save progress"; head -3 "$tmp/s.err"; }
echo "progress: $fails failures"
[ $fails = 0 ]
