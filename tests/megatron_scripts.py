#!/usr/bin/env python3
"""Megatron-LM's own job scripts (their argument lists in tests/data/megatron-scripts, from 2019
to 2026) run by `mgt train`, shrunk to a small model on test data: each flag is counted as
accepted (with or without a note), refused with a reason, or unknown (a failure), from mgt's
one-line answer. Then each script runs as the porting guide says: the launcher line changed
(pretrain_bert.py is `mgt train --model bert`), the renames Megatron-LM itself names applied, FP8
left out; the scripts listed in STARTS must train to their last iteration.
Usage: megatron_scripts.py MGT DATA_DIR [--table] (exit 77 without DATA_DIR's files)."""
import os, re, shlex, subprocess, sys, tempfile

MGT, DATA = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = os.path.join(HERE, "data", "megatron-scripts")
VOCAB, MERGES = DATA + "/gpt2/gpt2-vocab.json", DATA + "/gpt2/gpt2-merges.txt"
BERT_VOCAB, TEXT = DATA + "/bert/bert-base-uncased-vocab.txt", DATA + "/tinyshakespeare/input.txt"
if not all(os.path.exists(p) for p in (VOCAB, MERGES, BERT_VOCAB, TEXT)):
    print("no shared data: skipped")
    sys.exit(77)

# Megatron-LM's renames (its arguments.py names the new flag) and the FP8 flags of the recipes
RENAMES = {"--batch-size": ["--micro-batch-size"], "--warmup": ["--lr-warmup-fraction"],
           "--model-parallel-size": ["--tensor-model-parallel-size"],
           "--checkpoint-activations": ["--recompute-activations"],
           "--activations-checkpoint-method": ["--recompute-granularity", "full",
                                               "--recompute-method"],
           "--activations-checkpoint-num-layers": ["--recompute-num-layers"]}
# the scripts that must start once ported: the BERT, GPT-3 and Llama 3 recipes and the 2019-2021
# examples of the paper's era
STARTS = ["2019-pretrain_gpt2.args", "2019-pretrain_gpt2_model_parallel.args",
          "2020-pretrain_gpt2.args", "2020-pretrain_gpt2_distributed.args",
          "2020-pretrain_gpt2_distributed_with_mp.args",
          "2020-pretrain_bert_distributed.args", "2021-pretrain_gpt.args",
          "2021-pretrain_gpt_distributed.args", "2021-pretrain_gpt_distributed_with_mp.args",
          "2021-pretrain_bert.args", "2021-pretrain_bert_distributed_with_mp.args",
          "2026-bert_340m_distributed.args", "2025-llama3_8b_h100_fp8.args",
          "2021-pretrain_gpt3_175B.args", "2025-gpt3_175b_distributed.args",
          "2026-gpt3_175b_distributed.args",
          "2026-llama3_8b_h100_fp8.args"]
# sizes: a small model on one rank, two iterations (the values every script gets)
SHRINK = {"--num-layers": ["2"], "--hidden-size": ["64"], "--num-attention-heads": ["4"],
          "--ffn-hidden-size": ["128"], "--kv-channels": ["16"], "--num-query-groups": ["2"],
          "--seq-length": ["32"], "--max-position-embeddings": ["64"], "--micro-batch-size": ["1"],
          "--batch-size": ["1"], "--global-batch-size": ["2"], "--train-iters": ["2"],
          "--train-samples": ["4"], "--lr-decay-samples": ["4"], "--lr-warmup-samples": ["2"],
          "--lr-decay-iters": ["2"], "--lr-warmup-iters": ["1"], "--eval-iters": ["1"],
          "--eval-interval": ["2"], "--save-interval": ["2"], "--log-interval": ["1"],
          "--tensor-model-parallel-size": ["1"], "--model-parallel-size": ["1"],
          "--pipeline-model-parallel-size": ["1"], "--context-parallel-size": ["1"],
          "--expert-model-parallel-size": ["1"],
          "--vocab-size": ["1000"], "--distributed-timeout-minutes": ["10"],
          "--rampup-batch-size": ["1", "1", "2"], "--step-batch-size-schedule": ["0:1", "64:2"]}


def read_args(path):
    """[(flag, [values])] and the program, from an .args file."""
    prog, flags = None, []
    for line in open(path):
        if line.startswith("# program:"):
            prog = line.split(":", 1)[1].split()[0]
        if line.startswith("#") or not line.strip():
            continue
        toks = line.split()
        flags.append((toks[0], toks[1:]))
    return prog, flags


def shrink(flags, tmp, bert):
    """The flags on test data, small; paths point into tmp."""
    out = []
    for f, v in flags:
        if f in SHRINK:
            v = SHRINK[f]
        elif f in ("--save", "--load"):
            v = [tmp + "/ckpt"]
        elif f in ("--data-path", "--train-data"):
            v = [tmp + ("/bert" if bert else "/gpt")]
            f = "--data-path" if f == "--train-data" and not bert else f
        elif f == "--vocab-file":
            v = [BERT_VOCAB if bert else VOCAB]
        elif f == "--merge-file":
            v = [MERGES]
        elif f in ("--tensorboard-dir", "--data-cache-path", "--cache-dir"):
            v = [tmp + "/" + f.strip("-")]
        elif f == "--tokenizer-model":
            v = [DATA + "/hf-tokenizers/llama3"]
        out.append((f, v))
    return out


def argv(flags):
    return [t for f, v in flags for t in [f] + v]


def run(prog, flags, tmp):
    cmd = [MGT, "train"] + (["--model", "bert"] if prog == "pretrain_bert.py" else []) + argv(flags)
    p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def problems(err):
    """The flags refused in mgt's one error line: {flag: reason}."""
    line = next((l for l in err.splitlines() if l.startswith("mgt: error: ")), "")
    text = line[len("mgt: error: "):]
    m = re.match(r"\d+ problems with the flags: (.*)", text)
    items = m.group(1).split("; ") if m else [text]
    out = {}
    for it in items:
        f = re.search(r"unknown flag '(--[^']+)'", it)
        if f:
            out[f.group(1)] = "unknown"
            continue
        f = re.match(r"(--[a-z0-9-]+)", it)
        if f:
            out[f.group(1)] = it
    return out


def data(tmp):
    """A GPT-2 dataset and a BERT sentence dataset of Tiny Shakespeare."""
    paras = [p for p in open(TEXT).read().split("\n\n") if p.strip()]
    with open(tmp + "/docs.jsonl", "w") as f:
        for i in range(0, len(paras), 20):
            f.write('{"text": %s}\n' % __import__("json").dumps("\n\n".join(paras[i:i + 20])))
    for args in (["--output-prefix", tmp + "/gpt", "--vocab-file", VOCAB, "--merge-file", MERGES,
                  "--append-eod"],
                 ["--output-prefix", tmp + "/bert", "--vocab-file", BERT_VOCAB, "--split-sentences",
                  "--tokenizer-type", "BertWordPieceLowerCase"]):
        subprocess.run([MGT, "preprocess", "--input", tmp + "/docs.jsonl"] + args, check=True,
                       capture_output=True)


fails, rows = 0, []
with tempfile.TemporaryDirectory() as base:
    data(base)
    for name in sorted(os.listdir(ARGS)):
        prog, flags = read_args(os.path.join(ARGS, name))
        bert = prog == "pretrain_bert.py"
        tmp = os.path.join(base, name)
        os.makedirs(tmp)
        for d in ("gpt", "bert"):
            os.symlink(os.path.join(base, d + ".h5"), os.path.join(tmp, d + ".h5"))
        small = shrink(flags, tmp, bert)
        rc, out, err = run(prog, small, tmp)
        refused = problems(err) if rc == 2 else {}
        unknown = sorted(f for f, why in refused.items() if why == "unknown")
        n = len({f for f, _ in flags})
        rows.append((name, n, n - len(refused), len(refused) - len(unknown), unknown))
        # ported: Megatron's renames, no FP8
        ported = []
        for f, v in small:
            if f.startswith("--fp8"):
                continue
            if f in ("--save", "--load"):
                v = [tmp + "/ported"]
            new = RENAMES.get(f, [f])
            ported += [(t, []) for t in new[:-1]] + [(new[-1], v)]
        rc2, out2, err2 = run(prog, ported, tmp)
        started = rc2 == 0 and re.search(r"iteration +(\d+)/ +\1 \|", out2) is not None
        if name in STARTS and not started:
            fails += 1
            print("FAIL: %s does not start once ported: %s" % (name, (err2.strip().splitlines() or ["?"])[-1][:400]))
        elif name in STARTS:
            print("ok: %s starts once ported (renames %s, FP8 left out) and trains to its last iteration"
                  % (name, sorted(set(f for f, _ in small) & set(RENAMES)) or "none"))
        else:
            print("note: %s %s once ported%s" % (name, "starts" if started else "does not start",
                  "" if started else ": " + (err2.strip().splitlines() or ["?"])[-1][:300]))
        if unknown:  # every flag of Megatron-LM's own scripts is answered
            fails += 1
            print("FAIL: %s: unknown to mgt: %s" % (name, " ".join(unknown)))
        # every refusal says why: a renamed flag names its new name, a missing feature says so
        for f, why in refused.items():
            if why != "unknown" and len(why) < len(f) + 20:
                fails += 1
                print("FAIL: %s: %s is refused without a reason: %r" % (name, f, why))

tot = sum(r[1] for r in rows)
acc = sum(r[2] for r in rows)
print("\n| script | flags | accepted | refused with a reason | unknown |")
print("|---|---|---|---|---|")
for name, n, a, r, u in rows:
    print("| %s | %d | %d (%.0f%%) | %d | %s |" % (name[:-5], n, a, 100.0 * a / n, r,
                                                  ", ".join("`%s`" % x for x in u) or "none"))
print("| all | %d | %d (%.0f%%) | %d | %d |" % (tot, acc, 100.0 * acc / tot,
                                               sum(r[3] for r in rows), sum(len(r[4]) for r in rows)))
print("megatron_scripts: %d failures" % fails)
sys.exit(1 if fails else 0)
