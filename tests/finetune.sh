#!/usr/bin/env bash
# mgt finetune and mgt eval on the paper's three tasks, with data in the public formats (GLUE's
# MNLI and QQP tab-separated files, RACE's directories of JSON passages) whose labels follow a
# rule a small model can learn: a tiny BERT pretrained on a book here, then fine-tuned must
# reach >= 0.9 validation accuracy on each task (RACE at tp=2), while the same run with its
# training labels shuffled stays near chance; layouts (1,1), (2,1), (1,2), (2,2), and (4,1) with
# --sequence-parallel, give per-iteration losses within 1e-5 of one rank (--bf16 within 2e-2);
# a run saved at tp=2 dp=2 and resumed at tp=1 dp=2 equals the uninterrupted one; mgt eval of the final checkpoint
# reports what the run's last validation did; the Hugging Face export reads back bit for bit;
# malformed records, a mismatched pretrained model and misuse are refused in one line. Usage: finetune.sh MGT MPIEXEC DATA_DIR (exit 77 without DATA_DIR)
set -u
MGT=$1 MPIEXEC=$2 DATA=$3
V=$DATA/bert/bert-base-uncased-vocab.txt
BOOK=$DATA/books/pg11-alices-adventures-in-wonderland.txt
[ -f "$V" ] && [ -f "$BOOK" ] || { echo "no $V or $BOOK: skipped"; exit 77; }
. "$(dirname "$0")/lib.sh"

# gen TASK OUT N SEED SHUFFLE: N examples (RACE: questions) in the task's public format. MNLI:
# sentence2 holds one of three keywords, the gold label its class; QQP: question2 asks "why"
# (duplicate) or "where"; RACE: two questions per passage, the answer the one option that is a
# colour (the article's), the others animals. SHUFFLE=1 draws the labels at random instead.
cat >"$tmp/gen.py" <<'PY'
import json, os, random, sys
task, out, n, seed, shuffle = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
r = random.Random(seed)
words = ("the a man woman child dog cat house river tree city road car book table window "
         "garden music school friend water night morning letter money horse").split()
def phrase(k): return " ".join(r.choice(words) for _ in range(k))
def lab(y, m): return r.randrange(m) if shuffle else y
if task == "MNLI":
    names, keys = ["contradiction", "entailment", "neutral"], ["perhaps", "never", "surely"]
    with open(out, "w") as f:
        f.write("index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label\n")
        for i in range(n):
            y = r.randrange(3)
            b = phrase(r.randrange(2, 6)).split()
            b.insert(r.randrange(len(b) + 1), keys[y])
            f.write("%d\t%d\t%de\tfiction\t(\t(\t(\t(\t%s\t%s\t%s\t%s\n" % (
                i, i, i, phrase(r.randrange(3, 8)), " ".join(b), names[y], names[lab(y, 3)]))
elif task == "QQP":
    with open(out, "w") as f:
        f.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
        for i in range(n):
            y = r.randrange(2)
            q = phrase(r.randrange(3, 7)).split()
            q.insert(r.randrange(len(q) + 1), "why" if y else "where")
            f.write("%d\t%d\t%d\t%s?\t%s?\t%d\n" % (i, 2 * i, 2 * i + 1, phrase(r.randrange(3, 7)),
                                                   " ".join(q), lab(y, 2)))
else:
    os.makedirs(out, exist_ok=True)
    colors = "red blue green black white yellow brown pink".split()
    with open(os.path.join(out, "passages.txt"), "w") as f:
        for p in range(n // 2):
            things, facts = r.sample(["car", "house", "book", "door"], 2), r.sample(colors, 2)
            qs, opts, ans = [], [], []
            for q in range(2):
                y = r.randrange(4)
                o = r.sample("dog cat horse bird fish cow".split(), 3)
                o.insert(y, facts[q])
                qs.append("what color is the %s?" % things[q] if q == 0 else "the %s is _ ." % things[q])
                opts.append(o)
                ans.append("ABCD"[lab(y, 4)])
            art = " ".join("the %s is %s." % tf for tf in zip(things, facts))
            f.write(json.dumps({"article": art, "questions": qs, "options": opts, "answers": ans,
                                "id": "p%d" % p}) + "\n")
PY
gen() { $PY "$tmp/gen.py" "$@" || { echo "cannot generate $2"; exit 1; }; }
for t in MNLI QQP; do
  gen $t "$tmp/$t.train.tsv" 512 1 0
  gen $t "$tmp/$t.dev.tsv" 128 2 0
done
gen MNLI "$tmp/MNLI.shuffled.tsv" 512 1 1
gen MNLI "$tmp/MNLI.small.tsv" 160 3 0
gen RACE "$tmp/race/train/middle" 512 1 0
gen RACE "$tmp/race/dev/middle" 64 2 0
gen RACE "$tmp/race/dev/high" 64 4 0

# the pretrained model: a tiny BERT on the book, 40 iterations
book_dataset "$BOOK" 40 "$tmp/alice" >/dev/null
ARCH="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 48
  --max-position-embeddings 64 --make-vocab-size-divisible-by 8
  --tokenizer-type BertWordPieceLowerCase --vocab-file $V"
"$MGT" train --model bert $ARCH --data-path "$tmp/alice" --micro-batch-size 8 --global-batch-size 8 \
  --lr 1e-3 --train-iters 40 --log-interval 40 --eval-iters 0 --split 100,0,0 --save "$tmp/pre" \
  >"$tmp/pre.log" 2>&1 || { tail -5 "$tmp/pre.log"; exit 1; }

# ft NAME RANKS TP TASK ARGS...: mgt finetune from the pretrained model; metrics in NAME.jsonl
ft() {
  local name=$1 n=$2 tp=$3 task=$4
  shift 4
  rm -f "$tmp/$name.jsonl"
  "$MPIEXEC" -n "$n" "$MGT" finetune $ARCH --task "$task" --tensor-model-parallel-size "$tp" \
    --log-interval 1000 --eval-interval 100000 --metrics-file "$tmp/$name.jsonl" "$@" \
    >"$tmp/$name.log" 2>&1 || { fail "$name: mgt finetune exited $?"; tail -5 "$tmp/$name.log"; return 1; }
}
# last_acc NAME [SET]: the accuracy of the last validation of SET (default: the first set)
last_acc() {
  $PY - "$tmp/$1.jsonl" "${2:-}" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "valid_data" in r and r["valid_data"] != "overall"]
want = sys.argv[2] or rows[0]["valid_data"]
print([r for r in rows if r["valid_data"].endswith(want)][-1]["accuracy"])
PY
}
# at_least X Y: X >= Y
at_least() { $PY -c "import sys; sys.exit(0 if float('$1') >= float('$2') else 1)"; }

GLUE="--micro-batch-size 16 --global-batch-size 16 --lr 5e-4 --epochs 16 --pretrained-checkpoint $tmp/pre"
ft mnli 1 1 MNLI $GLUE --train-data "$tmp/MNLI.train.tsv" --valid-data "$tmp/MNLI.dev.tsv" --save "$tmp/ft_mnli" && {
  acc=$(last_acc mnli)
  at_least "$acc" 0.9 && echo "ok: MNLI validation accuracy $acc >= 0.9" || fail "MNLI accuracy $acc < 0.9"
  grep -q "loaded 31 tensors of the pretrained checkpoint" "$tmp/mnli.log" &&
    echo "ok: the pretrained trunk is loaded, the classification head starts fresh" ||
    fail "the pretrained tensors: $(grep loaded "$tmp/mnli.log")"
}
ft shuffled 1 1 MNLI $GLUE --train-data "$tmp/MNLI.shuffled.tsv" --valid-data "$tmp/MNLI.dev.tsv" && {
  acc=$(last_acc shuffled)
  at_least 0.5 "$acc" && echo "ok: with shuffled training labels MNLI accuracy $acc <= 0.5 (chance 1/3)" ||
    fail "shuffled labels reached $acc"
}
ft qqp 1 1 QQP $GLUE --epochs 6 --train-data "$tmp/QQP.train.tsv" --valid-data "$tmp/QQP.dev.tsv" && {
  acc=$(last_acc qqp)
  at_least "$acc" 0.9 && echo "ok: QQP validation accuracy $acc >= 0.9" || fail "QQP accuracy $acc < 0.9"
  grep -q '"f1":' "$tmp/qqp.jsonl" && echo "ok: QQP reports F1" || fail "QQP without F1"
}
ft race 2 2 RACE --micro-batch-size 8 --global-batch-size 8 --lr 1e-3 --epochs 6 --lr-warmup-fraction 0.1 --log-interval 1 \
  --pretrained-checkpoint "$tmp/pre" --train-data "$tmp/race/train/middle" \
  --valid-data "$tmp/race/dev/middle" "$tmp/race/dev/high" --save "$tmp/ft_race" && {
  m=$(last_acc race middle) h=$(last_acc race high)
  at_least "$m" 0.9 && at_least "$h" 0.9 && echo "ok: RACE at tp=2: middle $m, high $h >= 0.9" ||
    fail "RACE accuracy middle $m high $h"
  grep -q "RACE overall" "$tmp/race.log" && echo "ok: RACE reports each set and both together" ||
    fail "RACE overall line"
  # 6 epochs of 64 iterations: --lr-warmup-fraction 0.1 warms up over 38
  $PY - "$tmp/race.jsonl" <<'PY' && echo "ok: --lr-warmup-fraction 0.1 of 384 iterations warms up over 38" || fail "--lr-warmup-fraction"
import json, sys
lr = {r["iteration"]: r["lr"] for r in map(json.loads, open(sys.argv[1])) if "lr" in r}
assert max(lr) == 384, max(lr)
assert abs(lr[1] - 1e-3 / 38) < 1e-12 and abs(lr[38] - 1e-3) < 1e-12 and lr[39] < 1e-3, (lr[1], lr[38], lr[39])
PY
}

# same A B [FIRST]: per-iteration losses and validations of A and B within 1e-5
same() {
  $PY - "$tmp/$1.jsonl" "$tmp/$2.jsonl" "${3:-1}" <<'PY'
import json, sys
def load(p):
    rows = list(map(json.loads, open(p)))
    return ({r["iteration"]: r for r in rows if "consumed_samples" in r},
            {(r["iteration"], r["valid_data"]): r for r in rows if "valid_data" in r})
(a, av), (b, bv) = load(sys.argv[1]), load(sys.argv[2])
its = [i for i in sorted(b) if i >= int(sys.argv[3])]
assert its and all(i in a for i in its), "iterations %s missing" % its
worst = max(abs(a[i]["loss"] - b[i]["loss"]) for i in its)
assert all(a[i]["accuracy"] == b[i]["accuracy"] for i in its), "training accuracies differ"
assert worst <= 1e-5, "losses differ by %.3g" % worst
assert bv and all(k in av and abs(av[k]["loss"] - bv[k]["loss"]) <= 1e-5 and
                  av[k]["correct"] == bv[k]["correct"] for k in bv), "validations differ"
print("   iterations %d-%d: losses within %.2g, %d validations equal" % (its[0], its[-1], worst, len(bv)))
PY
}
SMALL="--micro-batch-size 4 --global-batch-size 16 --lr 5e-4 --epochs 2 --eval-interval 5 --log-interval 1
  --pretrained-checkpoint $tmp/pre --train-data $tmp/MNLI.small.tsv --valid-data $tmp/MNLI.dev.tsv"
ft ref 1 1 MNLI $SMALL && {
  for layout in "2 2" "2 1" "4 2" "4 4 sp"; do
    set -- $layout
    ft "n$1tp$2${3:-}" "$1" "$2" MNLI $SMALL --eval-interval 5 ${3:+--sequence-parallel} &&
      { same ref "n$1tp$2${3:-}" && echo "ok: $1 ranks at tp $2${3:+ (sequence parallel)} == one rank" ||
        fail "$1 ranks at tp $2 ${3:-}"; }
  done
  ft bf16 2 2 MNLI $SMALL --bf16 --save "$tmp/ft_bf16" && $PY - "$tmp/ref.jsonl" "$tmp/bf16.jsonl" <<'PY' &&
import json, sys
a, b = ({r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "consumed_samples" in r} for p in sys.argv[1:3])
worst = max(abs(a[i] - b[i]) for i in b)
assert len(b) == 20 and worst <= 2e-2, worst
print("   bf16: losses within %.2g of fp32" % worst)
PY
    echo "ok: --bf16 at tp 2 within 2e-2 of fp32" || fail "--bf16 fine-tuning"
  # 20 iterations: saved at 7 (inside the first epoch) at tp=2 dp=2, resumed at tp=1 dp=2
  ft part 4 2 MNLI $SMALL --exit-interval 7 --save "$tmp/ck" &&
    ft resumed 2 1 MNLI $SMALL --load "$tmp/ck" &&
    { same ref resumed 8 && echo "ok: saved at tp=2 dp=2 mid-epoch, resumed at tp=1 dp=2 as uninterrupted" ||
      fail "resume"; }
}

# mgt eval of the final checkpoints: what the runs' last validations reported, on other layouts
# evaluate NAME RANKS TP TASK SETS...: JSON lines of mgt eval in NAME.eval
evaluate() {
  local name=$1 n=$2 tp=$3 task=$4
  shift 4
  "$MPIEXEC" -n "$n" "$MGT" eval --task "$task" --load "$tmp/ft_$name" --tensor-model-parallel-size "$tp" \
    --micro-batch-size 3 ${EVAL_ARGS:-} --valid-data "$@" >"$tmp/$name.eval" 2>&1 ||
    { fail "mgt eval --task $task exited $?"; tail -3 "$tmp/$name.eval"; return 1; }
}
# agree NAME: every set of NAME.eval has the correct count of NAME's last validation, loss 1e-5
agree() {
  $PY - "$tmp/$1.jsonl" "$tmp/$1.eval" <<'PY'
import json, sys
val = {}
for r in map(json.loads, open(sys.argv[1])):
    if "valid_data" in r and r["valid_data"] != "overall":
        val[r["valid_data"]] = r
ev = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
assert ev and len(ev) == len(val), "%d sets evaluated, %d validated" % (len(ev), len(val))
for e in ev:
    v = val[e["valid_data"]]
    assert e["correct"] == v["correct"] and e["examples"] == v["examples"], (e, v)
    assert abs(e["loss"] - v["loss"]) <= 1e-5, (e["loss"], v["loss"])
    print("   %s: %d/%d, loss %.6f" % (e["valid_data"], e["correct"], e["examples"], e["loss"]))
PY
}
evaluate mnli 2 2 MNLI "$tmp/MNLI.dev.tsv" && agree mnli &&
  echo "ok: mgt eval --task MNLI at tp=2 == the run's last validation" || fail "mgt eval MNLI"
# a checkpoint trained in bf16 scored in bf16 (mgt eval --bf16) is what its run's validation said;
# in fp32 it is not (the flag changes the arithmetic)
EVAL_ARGS=--bf16 evaluate bf16 2 2 MNLI "$tmp/MNLI.dev.tsv" && agree bf16 &&
  cp "$tmp/bf16.eval" "$tmp/bf16_16.eval" && evaluate bf16 2 2 MNLI "$tmp/MNLI.dev.tsv" &&
  $PY - "$tmp/bf16_16.eval" "$tmp/bf16.eval" "$tmp/bf16.jsonl" <<'PY' &&
import json, sys
a, b = (json.loads([l for l in open(p) if l.startswith("{")][-1])["loss"] for p in sys.argv[1:3])
v = [r for r in map(json.loads, open(sys.argv[3])) if r.get("valid_data", "overall") != "overall"][-1]["loss"]
print("   the run's validation %.9f; mgt eval --bf16 %.9f, in fp32 %.9f" % (v, a, b))
assert abs(a - v) < abs(b - v) / 4, "mgt eval --bf16 is not nearer the bf16 run than fp32 scoring"
PY
  echo "ok: mgt eval --bf16 == the bf16 run's last validation; fp32 differs" ||
  fail "mgt eval --bf16"
evaluate race 2 1 RACE "$tmp/race/dev/middle" "$tmp/race/dev/high" && agree race &&
  echo "ok: mgt eval --task RACE at tp=1 dp=2 == the run's last validation (trained at tp=2)" ||
  fail "mgt eval RACE"

# Hugging Face: the fine-tuned models with their heads and labels, read back bit for bit, and the
# imported MNLI model scores as the original
for name in mnli race; do
  "$MGT" ckpt export --format hf --load "$tmp/ft_$name" --output "$tmp/hf_$name" >"$tmp/x.log" 2>&1 &&
    "$MGT" ckpt import --format hf --input "$tmp/hf_$name" --save "$tmp/imp_$name" >>"$tmp/x.log" 2>&1 &&
    "$MGT" ckpt export --format hf --load "$tmp/imp_$name" --output "$tmp/hf2_$name" >>"$tmp/x.log" 2>&1 &&
    cmp -s "$tmp/hf_$name/model.safetensors" "$tmp/hf2_$name/model.safetensors" &&
    echo "ok: export of the $name model, imported and exported again bit for bit" ||
    { fail "export/import of the $name model"; tail -3 "$tmp/x.log"; }
done
$PY - "$tmp/hf_mnli" "$tmp/hf_race" <<'PY' && echo "ok: the exports are ...ForSequenceClassification (3 labels) and ...ForMultipleChoice" || fail "export config and names"
import json, struct, sys
def header(d):
    with open(d + "/model.safetensors", "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
m, r = (json.load(open(d + "/config.json")) for d in sys.argv[1:3])
assert m["architectures"] == ["MegatronBertForSequenceClassification"] and m["num_labels"] == 3, m
assert m["id2label"] == {"0": "contradiction", "1": "entailment", "2": "neutral"}, m["id2label"]
assert r["architectures"] == ["MegatronBertForMultipleChoice"], r["architectures"]
hm, hr = header(sys.argv[1]), header(sys.argv[2])
assert hm["classifier.weight"]["shape"] == [3, 32] and hr["classifier.weight"]["shape"] == [1, 32]
assert "bert.pooler.dense.weight" in hm and not any(k.startswith("cls.") for k in hm), sorted(hm)
PY
expect "names no WordPiece vocabulary" "$MGT" eval --task MNLI --load "$tmp/imp_mnli" --valid-data "$tmp/MNLI.dev.tsv"
"$MGT" eval --task MNLI --load "$tmp/imp_mnli" --tokenizer-type BertWordPieceLowerCase --vocab-file "$V" --valid-data "$tmp/MNLI.dev.tsv" >"$tmp/imp.eval" 2>&1 &&
  [ "$(grep -o '"correct": [0-9]*' "$tmp/imp.eval")" = "$(grep -o '"correct": [0-9]*' "$tmp/mnli.eval")" ] &&
  echo "ok: the imported MNLI model scores as the original" || fail "the imported MNLI model"

# refusals: one error line, exit 2, nothing written
FT="$MGT finetune $ARCH --micro-batch-size 4 --epochs 1 --pretrained-checkpoint $tmp/pre"
sed '5s/\tneutral$/\tmaybe/; 5s/\tentailment$/\tmaybe/; 5s/\tcontradiction$/\tmaybe/' \
  "$tmp/MNLI.small.tsv" >"$tmp/bad.tsv"
expect "bad.tsv:5: the label is not contradiction, entailment or neutral" \
  $FT --task MNLI --train-data "$tmp/bad.tsv" --save "$tmp/never"
[ ! -e "$tmp/never" ] && echo "ok: nothing saved" || fail "a refused run wrote $tmp/never"
$FT --task MNLI --train-data "$tmp/bad.tsv" --skip-bad-records >"$tmp/skip.log" 2>&1 &&
  grep -q "159 examples, 1 records skipped" "$tmp/skip.log" &&
  echo "ok: --skip-bad-records counts and skips the record" || fail "--skip-bad-records"
mkdir -p "$tmp/badrace"
printf '{"article": "x", "questions": ["q"], "options": [["a", "b"]], "answers": ["A"]}\n' >"$tmp/badrace/1.txt"
expect "1.txt:1: a question needs a string, 4 string options" $FT --task RACE --train-data "$tmp/badrace"
expect "is of another model: --hidden-size" $FT --task QQP --train-data "$tmp/QQP.dev.tsv" --hidden-size 64
expect "is not a pretrained BERT" $FT --task QQP --train-data "$tmp/QQP.dev.tsv" \
  --pretrained-checkpoint "$tmp/ft_mnli"
expect "needs --pretrained-checkpoint" "$MGT" finetune $ARCH --task QQP --train-data "$tmp/QQP.dev.tsv" --epochs 1
expect "needs --epochs" "$MGT" finetune $ARCH --task QQP --train-data "$tmp/QQP.dev.tsv" --pretrained-checkpoint "$tmp/pre"
expect "fewer than one global batch" $FT --task QQP --train-data "$tmp/QQP.dev.tsv" --global-batch-size 256
expect "the paper scores GPT zero-shot" $FT --model gpt --task QQP --train-data "$tmp/QQP.dev.tsv"
expect "--task is for mgt finetune" "$MGT" train --model bert $ARCH --task MNLI --train-data "$tmp/MNLI.dev.tsv"
expect "not a BERT fine-tuned for QQP" "$MGT" eval --task QQP --load "$tmp/ft_mnli" --valid-data "$tmp/QQP.dev.tsv"
expect "not a BERT fine-tuned for MNLI" "$MGT" eval --task MNLI --load "$tmp/pre" --valid-data "$tmp/MNLI.dev.tsv"
expect "a fine-tuned BERT is scored with mgt eval --task" "$MGT" eval --task lm --load "$tmp/ft_mnli" --text "$BOOK"
# a GLUE test file (no labels: every row would be labelled 0) is neither trained on nor scored
cut -f1,4,5 "$tmp/QQP.dev.tsv" >"$tmp/qqp_test.tsv"
expect "qqp_test.tsv is a GLUE test file (its header has 3 columns)" $FT --task QQP --train-data "$tmp/qqp_test.tsv"
cut -f1-10 "$tmp/MNLI.dev.tsv" >"$tmp/mnli_test.tsv"
expect "mnli_test.tsv is a GLUE test file (its header has 10 columns)" "$MGT" eval --task MNLI \
  --load "$tmp/ft_mnli" --valid-data "$tmp/mnli_test.tsv"
# an MNLI row short of its header's columns would take another column as its label
awk -F'\t' 'BEGIN{OFS="\t"} NR==3{NF=NF-1} {print}' "$tmp/MNLI.dev.tsv" >"$tmp/short.tsv"
expect "short.tsv:3: the header has" "$MGT" eval --task MNLI --load "$tmp/ft_mnli" --valid-data "$tmp/short.tsv"
# a vocabulary larger than the model's, before anything is read
{ cat "$V"; seq 1 100 | sed 's/^/extra/'; } >"$tmp/big_vocab.txt"
expect "the tokenizer has 30622 ids but the model's vocabulary only 30522" "$MGT" eval --task MNLI \
  --load "$tmp/ft_mnli" --valid-data "$tmp/MNLI.dev.tsv" --vocab-file "$tmp/big_vocab.txt"
echo "finetune: $fails failures"
[ $fails = 0 ]
