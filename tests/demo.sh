#!/usr/bin/env bash
# The README's demo on a machine without ../shared/data (jobs/local.sh): the quotations of
# Debian's fortunes package become one JSON document each, every quotation once and intact (an
# independent Python reading of the files), the demo trains on them, prints the unigram baseline
# (as numpy computes it from the dataset) and a validation perplexity well below it, samples text
# and draws its curves. Shortened: 150 iterations. Usage: demo.sh MGT (exit 77 without fortunes)
set -u
MGT=$1
F=/usr/share/games/fortunes
[ -f "$F/literature" ] || { echo "no $F (apt-get install fortunes): skipped"; exit 77; }
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS= # local.sh shares the cores among its ranks
SHARED=/nonexistent WORK=$tmp/demo MGT=$MGT ITERS=150 "$root/jobs/local.sh" --eval-interval 75 \
  --log-interval 75 >"$tmp/log" 2>&1 || { fail "local.sh exited $?"; tail -20 "$tmp/log"; exit 1; }

$PY - "$F" "$tmp/demo" "$tmp/log" <<'PY' || fail "the demo's data or results"
import collections, glob, json, math, os, re, sys
import h5py, numpy as np
F, work, log = sys.argv[1:4]
# the quotations as the fortune files hold them: separated by lines of "%", backspace
# underlining and control characters dropped, the pictures left out
want = collections.Counter()
for p in sorted(glob.glob(F + "/*")):
    name = os.path.basename(p)
    if name.endswith((".dat", ".u8")) or name in ("art", "ascii-art") or os.path.islink(p):
        continue
    raw = open(p, "rb").read().replace(b"_\b", b"")
    raw = bytes(c for c in raw if c in (9, 10) or 32 <= c < 127 or c >= 128)
    text = raw.decode("utf-8")
    if not text.endswith("%\n"):  # a last quotation without its closing line
        text += ("" if text.endswith("\n") else "\n") + "%\n"
    for q in re.split(r"^%\n", text, flags=re.M):
        q = q[:-1] if q.endswith("\n") else q
        if q:
            want[q] += 1
got = collections.Counter(json.loads(l)["text"] for l in open(work + "/fortunes.jsonl", encoding="utf-8"))
assert got == want, ("quotations differ", len(got), len(want), list((got - want).items())[:2], list((want - got).items())[:2])
out = open(log).read()
m = re.search(r"training on the (\d+) quotations", out)
assert m and int(m.group(1)) == sum(want.values()), m
with h5py.File(work + "/text.h5", "r") as f:
    tok, off, V = f["tokens"][:].astype(np.int64), f["document_offsets"][:], int(f.attrs["vocab_size"])
assert len(off) - 1 == sum(want.values())
nd = len(off) - 1
b1, b2 = int(0.9 * nd + 0.5), nd
p = (np.bincount(tok[:off[b1]], minlength=V) + 1.0) / (off[b1] + V)
unigram = math.exp(-np.mean(np.log(p[tok[off[b1]:off[b2]]])))
m = re.search(r"validation perplexity of the trained model: ([0-9.]+); unigram baseline ([0-9.]+)", out)
assert m, "no perplexity line"
ppl, base = float(m.group(1)), float(m.group(2))
assert abs(base - unigram) <= 0.01, (base, unigram)
assert ppl < 0.75 * base, ("not learning", ppl, base)
assert re.search(r"a sample from the trained model.*\nThe", out), "no sample"
sample = open(work + "/sample.txt", encoding="utf-8", errors="replace").read()
at = out.find(sample)  # whole, and generate's status line after it, not inside
assert sample.startswith("The") and at > 0 and out[at + len(sample):].startswith("generate: "), \
    "the sample is not whole before generate's status line"
assert os.path.getsize(work + "/loss.svg") > 1000
print("ok: %d quotations intact; after 150 iterations validation perplexity %.2f, unigram baseline %.2f (numpy %.3f)"
      % (sum(want.values()), ppl, base, unigram))
PY
# extra flags override the demo's: without validation (--eval-iters 0) it says so and draws the
# curves (a grep finding no validation line ended it under pipefail)
SHARED=/nonexistent WORK=$tmp/demo2 MGT=$MGT ITERS=2 "$root/jobs/local.sh" --eval-iters 0 \
  --lr-warmup-iters 0 >"$tmp/log2" 2>&1 && grep -q "none (no validation split)" "$tmp/log2" &&
  [ -s "$tmp/demo2/loss.svg" ] && echo "ok: the demo without validation: said so, curves drawn" ||
  { fail "local.sh --eval-iters 0"; tail -5 "$tmp/log2"; }
echo "demo: $fails failures"
[ "$fails" = 0 ]
