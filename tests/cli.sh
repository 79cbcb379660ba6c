#!/usr/bin/env bash
# The mgt command line: bad input gives one error line naming the flag and exit status 2,
# on rank 0 only; a good run writes the metrics file. Usage: cli.sh MGT MPIEXEC
set -u
MGT=$1
MPIEXEC=${2:-mpiexec}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NRANKS "substring" args...
expect() {
  local n=$1 want=$2
  shift 2
  if [ "$n" = 1 ]; then
    "$MGT" "$@" >"$tmp/out" 2>"$tmp/err"
  else
    "$MPIEXEC" -n "$n" "$MGT" "$@" >"$tmp/out" 2>"$tmp/err"
  fi
  local rc=$?
  local ours
  ours=$(grep -c '^mgt: error:' "$tmp/err")
  if [ "$rc" != 2 ] || [ "$ours" != 1 ] || ! grep -q -F -- "$want" "$tmp/err"; then
    echo "FAIL: mgt $* (ranks $n): exit $rc, $ours error lines, wanted '$want'"
    sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  else
    echo "ok: $(grep '^mgt: error:' "$tmp/err")"
  fi
  if [ "$n" = 1 ] && [ "$(wc -l <"$tmp/err")" != 1 ]; then
    echo "FAIL: mgt $*: stderr is not one line"
    fails=$((fails + 1))
  fi
}

expect 1 "unknown command 'trian' (did you mean mgt train?)" trian
expect 1 "unknown command 'serv' (did you mean mgt serve?)" serv
expect 1 "unknown command 'xyzzy' (see mgt --help)" xyzzy
expect 1 "unknown ckpt command 'exprt' (did you mean mgt ckpt export?)" ckpt exprt
expect 1 "unknown dataset command 'inf' (did you mean mgt dataset info?)" dataset inf x
expect 1 "mgt dataset info: --split: missing value" dataset info x --unigram --split
expect 1 "mgt dataset info: unknown flag '--unigam'" dataset info x --unigam
expect 1 "did you mean --tensor-model-parallel-size" train --mock-data --tensor-model-parallel 2
expect 1 "got 'flsh' (did you mean flash?)" train --mock-data --attention-backend flsh
expect 1 "did you mean --num-layers" train --mock-data --num-layer 2
expect 1 "--seq-length: expected an integer" train --mock-data --seq-length x
expect 1 "no training data" train
expect 2 "--tensor-model-parallel-size 4 does not divide the number of ranks 2" \
  train --mock-data --tensor-model-parallel-size 4
expect 2 "--global-batch-size 24 is not divisible" \
  train --mock-data --micro-batch-size 16 --global-batch-size 24
expect 1 "--metrics-file /nonexistent/dir/m.jsonl: cannot open" \
  train --mock-data --train-iters 1 --metrics-file /nonexistent/dir/m.jsonl

expect 1 "MiB per rank but" \
  train --mock-data --num-layers 64 --hidden-size 16384 --num-attention-heads 128

expect 1 "give --use-distributed-optimizer" train --mock-data --overlap-param-gather --dry-run
expect 1 "over --tensor-model-parallel-size 2, which does not divide them" train --mock-data \
  --sequence-parallel --micro-batch-size 1 --seq-length 15 --tensor-model-parallel-size 2 --dry-run

# recomputation choices that contradict each other
expect 1 "--recompute-activations is full recomputation" train --mock-data --recompute-activations \
  --recompute-granularity selective --dry-run
expect 1 "choose the layers of --recompute-granularity full" train --mock-data \
  --recompute-granularity selective --recompute-method block --dry-run
expect 1 "--recompute-num-layers 5 exceeds --num-layers 2" train --mock-data --num-layers 2 \
  --recompute-granularity full --recompute-num-layers 5 --dry-run
expect 1 "at least 1 layer per chunk" train --mock-data --recompute-granularity full \
  --recompute-num-layers 0 --dry-run
expect 1 "--recompute-granularity: " train --mock-data --recompute-granularity some --dry-run

# every command's --help ends with a document of the source tree to read next
src=$(cd "$(dirname "$0")/.." && pwd)
cmds=$("$MGT" --help | sed -n 's/^  \([a-z]*\)  .*/\1/p')
[ "$(echo "$cmds" | wc -w)" -ge 10 ] || { echo "FAIL: mgt --help lists: $cmds"; fails=$((fails + 1)); }
for c in "" $cmds; do
  # shellcheck disable=SC2086 # "" is mgt --help itself
  "$MGT" $c --help >"$tmp/out" 2>&1
  doc=$(tail -n 1 "$tmp/out" | sed -n 's/^Read next: \([^ ,]*\).*/\1/p')
  if [ -n "$doc" ] && [ -f "$src/$doc" ]; then
    echo "ok: mgt $c --help ends with $doc"
  else
    echo "FAIL: mgt $c --help does not end with a document to read: $(tail -n 1 "$tmp/out")"
    fails=$((fails + 1))
  fi
done

# --attention-backend: auto says what it chose and why, the alias and the choices are obeyed
for a in "" "--attention-backend auto" "--attention-backend flash" "--use-flash-attn" \
  "--attention-backend unfused"; do
  # shellcheck disable=SC2086
  "$MGT" train --mock-data --train-iters 1 $a >"$tmp/out" 2>&1
  case "$a" in *unfused) want="attention unfused (--attention-backend unfused)" ;;
  *flash*) want="attention flash (--attention-backend flash)" ;;
  *) want="attention flash (auto: tiles are at least as fast here)" ;; esac
  if grep -q -F "$want" "$tmp/out"; then
    echo "ok: ${a:-no flag}: $want"
  else
    echo "FAIL: ${a:-no flag}: wanted '$want' in $(grep '^layout' "$tmp/out")"
    fails=$((fails + 1))
  fi
done

# --dry-run prints the plan, with and without recomputation, and allocates nothing
if "$MGT" train --mock-data --num-layers 64 --hidden-size 16384 --num-attention-heads 128 \
  --dry-run >"$tmp/out" 2>&1 && grep -q "with --recompute-activations" "$tmp/out" &&
  grep -q "with --recompute-granularity selective" "$tmp/out" &&
  grep -q "without recomputation" "$tmp/out"; then
  echo "ok: --dry-run prints the memory plan"
else
  echo "FAIL: --dry-run"
  cat "$tmp/out"
  fails=$((fails + 1))
fi

# the vocabulary comes from the tokenizer when one is given; an explicit --vocab-size wins, noted
"$MGT" train --mock-data --tokenizer-type ByteTokenizer --dry-run >"$tmp/out" 2>&1
"$MGT" train --mock-data --tokenizer-type ByteTokenizer --vocab-size 200 --dry-run >"$tmp/out2" 2>&1
if grep -Eq "^  vocab-size +257$" "$tmp/out" && grep -Eq "^  vocab-size +200$" "$tmp/out2" &&
  grep -q "note: --vocab-size 200 is smaller than the tokenizer's 257 ids" "$tmp/out2"; then
  echo "ok: the vocabulary comes from the tokenizer unless --vocab-size is given"
else
  echo "FAIL: vocabulary from the tokenizer"
  grep vocab "$tmp/out" "$tmp/out2"
  fails=$((fails + 1))
fi

# a good run: exit 0, metrics lines with the documented keys
if ! "$MPIEXEC" -n 2 "$MGT" train --mock-data --train-iters 6 --log-interval 2 \
  --tensor-model-parallel-size 2 --metrics-file "$tmp/m.jsonl" >"$tmp/out" 2>&1; then
  echo "FAIL: good run failed"
  cat "$tmp/out"
  fails=$((fails + 1))
fi
if ! python3 - "$tmp/m.jsonl" <<'PY'; then
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
valid = [r for r in rows if "valid_loss" in r]
rows = [r for r in rows if "loss" in r]
assert [r["iteration"] for r in rows] == [2, 4, 6], rows
assert [r["iteration"] for r in valid] == [6] and valid[0]["valid_ppl"] > 1, valid
for r in rows:
    for k in ("iteration", "loss", "lr", "grad_norm", "tokens_per_sec"):
        assert k in r and r[k] == r[k], (k, r)
    assert r["loss"] > 0 and r["tokens_per_sec"] > 0
print("ok: metrics file has", len(rows), "rows with the documented keys and a validation row")
PY
  fails=$((fails + 1))
fi
grep -q "layout: 2 ranks = tensor-parallel 2 x data-parallel 1" "$tmp/out" ||
  { echo "FAIL: layout line missing"; fails=$((fails + 1)); }

echo "cli: $fails failures"
[ "$fails" = 0 ]
