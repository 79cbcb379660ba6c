#!/usr/bin/env python3
"""Our ids against Tokenizers.js's: live where its ids are at hand, and always against the
digests of its ids recorded in REF (recorded there with --record). One line of space-separated
ids per text in OURS and JS; TEXTS (JSON lines with "text") names a text that differs.
Usage: js_ids.py NAME OURS JS REF TEXTS [--record]"""
import hashlib
import json
import os
import sys

name, mine, js, ref, texts = sys.argv[1:6]
mode = sys.argv[6] if len(sys.argv) > 6 else ""
ours = open(mine).read().splitlines()
texts = [json.loads(l)["text"] for l in open(texts)]
digest = lambda line: hashlib.sha256(line.encode()).hexdigest()[:16]
assert len(ours) == len(texts), (len(ours), len(texts))
first = lambda bad: texts[bad[0]][:200] if bad else ""
if os.path.exists(js):
    theirs = open(js).read().splitlines()
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert len(theirs) == len(ours) and not bad, \
        "texts %s differ from Tokenizers.js, first: %r" % (bad[:8], first(bad))
    if mode == "--record":
        with open(ref, "a") as f:
            for i, line in enumerate(theirs):
                f.write("%s %d %s\n" % (name, i, digest(line)))
recorded = {int(l.split()[1]): l.split()[2] for l in open(ref) if l.startswith(name + " ")}
assert len(recorded) == len(ours), "%d recorded digests for %d texts" % (len(recorded), len(ours))
bad = [i for i, line in enumerate(ours) if digest(line) != recorded[i]]
assert not bad, "texts %s differ from the recorded ids, first: %r" % (bad[:8], first(bad))
print("ok: %s: %d texts, %d ids, as Tokenizers.js%s" % (
    name, len(ours), sum(len(l.split()) for l in ours),
    " (live)" if os.path.exists(js) else " (recorded)"))
