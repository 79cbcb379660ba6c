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

# sizes that would wrap a count or an index: refused by name before anything runs
T=(train --mock-data --train-iters 2 --micro-batch-size 2 --seq-length 16 --hidden-size 32)
expect 1 "--moe-layer-freq [1,1]*4611686018427387904: not an integer, nor a list" \
  "${T[@]}" --num-experts 4 --moe-layer-freq '[1,1]*4611686018427387904'
expect 1 "--moe-layer-freq 4294967297: every N-th layer needs N in [1, 2147483647]" \
  "${T[@]}" --num-experts 4 --disable-bias-linear --num-layers 4 --moe-layer-freq 4294967297
expect 1 "make an attention activation of 2^31 elements or more" \
  "${T[@]}" --kv-channels 65536 --num-attention-heads 65536
expect 1 "more validation samples than can be counted" train --mock-data \
  --train-iters 8589934591 --eval-interval 1 --eval-iters 1073741824
expect 1 "--lr-decay-iters 9000000000000000 or --lr-warmup-iters 0 times --global-batch-size 2048" \
  "${T[@]}" --rampup-batch-size 2 2 100 --global-batch-size 2048 --lr-decay-iters 9000000000000000
expect 1 "the model has over 10^15 parameters" "${T[@]}" --num-layers 65535 --hidden-size 1048576 \
  --num-attention-heads 16 --num-experts 65536 --moe-router-topk 1 --disable-bias-linear \
  --moe-ffn-hidden-size 4194304 --dry-run
expect 1 "--min-lr 0.005, the end of --decoupled-lr 0.001's decay" \
  "${T[@]}" --lr 0.01 --min-lr 0.005 --decoupled-lr 0.001
expect 1 "--decoupled-min-lr -0.5: a learning rate, or -1" "${T[@]}" --decoupled-lr 0.01 --decoupled-min-lr -0.5
expect 1 "--gpu-memory 'inf': not a size" plan --gpu-memory inf
MGT_PROGRESS_SECONDS=abc expect 1 "MGT_PROGRESS_SECONDS=abc: not a positive number" version
MGT_CUDA_AWARE_MPI=yes expect 1 "MGT_CUDA_AWARE_MPI=yes: 0 (stage through the host) or 1" version

# flags that change nothing in this run are noted, not ignored in silence
"$MGT" "${T[@]}" --save-interval 1 --loss-scale 128 --hysteresis=3 --rotary-base 500000 \
  --moe-router-topk 1 --no-weight-copies >"$tmp/out" 2>"$tmp/err"
missing=$(for n in "--save-interval: without --save" "--loss-scale, --hysteresis: loss scaling is" \
  "--rotary-base: the model has no rotary" "--moe-router-topk: a dense model" \
  "--no-weight-copies: an fp32 run"; do grep -q -F -- "mgt: note: $n" "$tmp/err" || echo "$n"; done)
[ -z "$missing" ] && echo "ok: flags without effect here are noted" ||
  { echo "FAIL: notes missing: $missing"; fails=$((fails + 1)); }

# ranks started with other arguments, or whose files give them other configurations, stop
# together with one message (they used to hang, or train apart)
mpmd_expect() { # RC "substring": the last two-rank run
  local rc=$1 want=$2
  if [ "$rc" = 2 ] && [ "$(grep -c '^mgt: error:' "$tmp/err")" = 1 ] && grep -q -F -- "$want" "$tmp/err"; then
    echo "ok: $(grep '^mgt: error:' "$tmp/err")"
  else
    echo "FAIL: two ranks (exit $rc): wanted '$want'"
    sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  fi
}
timeout 120 "$MPIEXEC" -n 1 "$MGT" "${T[@]}" : -n 1 "$MGT" "${T[@]}" --lr 1e-3x >"$tmp/out" 2>"$tmp/err"
mpmd_expect $? "rank 1: started with other arguments than rank 0: its argument 11 is '--lr', rank 0's missing"
timeout 120 "$MPIEXEC" -n 1 "$MGT" "${T[@]}" --num-layers 2 : -n 1 "$MGT" "${T[@]}" --num-layers 3 \
  >"$tmp/out" 2>"$tmp/err"
mpmd_expect $? "its argument 12 is '3', rank 0's '2'"
# --data-args-path: a file each node reads for itself
mkdir -p "$tmp/a" "$tmp/b"
python3 -c "open('$tmp/d.txt', 'wb').write(bytes(range(32, 127)) * 64)"
"$MGT" preprocess --input "$tmp/d.txt" --output-prefix "$tmp/d" --tokenizer-type ByteTokenizer \
  >/dev/null 2>&1 || { echo "FAIL: preprocess for the data-args runs"; fails=$((fails + 1)); }
echo "$tmp/d" >"$tmp/a/args.txt"
D=(train --train-iters 2 --micro-batch-size 2 --seq-length 16 --hidden-size 32 --eval-iters 0
  --tokenizer-type ByteTokenizer --data-args-path args.txt)
timeout 120 "$MPIEXEC" -n 1 --wdir "$tmp/a" "$MGT" "${D[@]}" : -n 1 --wdir "$tmp/b" "$MGT" "${D[@]}" \
  >"$tmp/out" 2>"$tmp/err"
mpmd_expect $? "--data-args-path args.txt: cannot open"
echo "2 $tmp/d" >"$tmp/b/args.txt"
timeout 120 "$MPIEXEC" -n 1 --wdir "$tmp/a" "$MGT" "${D[@]}" : -n 1 --wdir "$tmp/b" "$MGT" "${D[@]}" \
  >"$tmp/out" 2>"$tmp/err"
mpmd_expect $? "rank 1: its configuration differs from rank 0's: \"data_path\":[\"2\","
echo "$tmp/d" >"$tmp/b/args.txt"
timeout 120 "$MPIEXEC" -n 1 --wdir "$tmp/a" "$MGT" "${D[@]}" : -n 1 --wdir "$tmp/b" "$MGT" "${D[@]}" \
  >"$tmp/out" 2>"$tmp/err" && echo "ok: the same files on both ranks train" ||
  { echo "FAIL: two ranks with the same data-args files"; head -5 "$tmp/err"; fails=$((fails + 1)); }
# a dataset one rank cannot open (a node without it): one error, not a hang
D2=(train --train-iters 2 --micro-batch-size 2 --seq-length 16 --hidden-size 32 --eval-iters 0
  --tokenizer-type ByteTokenizer --data-path d --split 100,0,0)
timeout 120 "$MPIEXEC" -n 1 --wdir "$tmp" "$MGT" "${D2[@]}" : -n 1 --wdir "$tmp/a" "$MGT" "${D2[@]}" \
  >"$tmp/out" 2>"$tmp/err"
mpmd_expect $? "--data-path d.h5: No such file or directory"
# a blend by size with a dataset too small for one sample: never drawn, not an error
printf '{"text": "tiny"}\n' >"$tmp/tiny.jsonl"
"$MGT" preprocess --input "$tmp/tiny.jsonl" --output-prefix "$tmp/tiny" --tokenizer-type ByteTokenizer >/dev/null 2>&1
"$MGT" train --train-iters 2 --micro-batch-size 2 --seq-length 16 --hidden-size 32 --eval-iters 0 \
  --tokenizer-type ByteTokenizer --data-path "$tmp/d" "$tmp/tiny" --split 100,0,0 --data-cache-path "$tmp/cache" \
  >"$tmp/out" 2>&1 && echo "ok: a blend by size with a dataset of no sample trains on the others" ||
  { echo "FAIL: a blend with a dataset of no sample"; tail -3 "$tmp/out"; fails=$((fails + 1)); }

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
