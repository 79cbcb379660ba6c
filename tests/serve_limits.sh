#!/usr/bin/env bash
# mgt serve against hostile clients (tests/serve_hostile.py, real sockets on 127.0.0.1), each
# case bounded in connections and time: one client's long tokenization does not stall another's
# request; idle connections are bounded per address and closed when idle; a request trickled a
# byte at a time is cut off; a client that leaves a non-streamed request frees its slot (499 in
# the log, not 200); answers are valid UTF-8 JSON whatever bytes a byte-level model gives; a
# path with %0a and %1b forges no log line; a body of tiny values past the cap on values is 413;
# a request of many sequences takes turns with a short one; SIGTERM ends within the drain time,
# answering 503.
# Usage: serve_limits.sh MGT DATA_DIR
set -u
MGT=$(readlink -f "$1") DATA=${2:-../shared/data}
TESTS=$(cd "$(dirname "$0")" && pwd)
. "$TESTS/lib.sh"
server=
cleanup() {
  [ -n "$server" ] && kill -9 "$server" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
"$MGT" serve --load /nonexistent 2>&1 | grep -q "without libmicrohttpd" && { echo "built without libmicrohttpd: skipped"; exit 77; }
T=(timeout -k 5 120)

# start NAME ARGS...: a one-rank server in the background; PORT from its start line
start() {
  local name=$1
  shift
  serve_start "$tmp/$name.log" "$MGT" serve --port 0 "$@"
}
# stop: SIGTERM; the status must be 0 and the server gone within SECONDS
stop() {
  local within=$1 t0 rc
  t0=$(date +%s.%N)
  kill -TERM "$server"
  for _ in $(seq $((within * 10))); do
    kill -0 "$server" 2> /dev/null || break
    sleep 0.1
  done
  if kill -0 "$server" 2> /dev/null; then
    fail "the server still runs $within s after SIGTERM"
    kill -9 "$server"
  fi
  wait "$server"
  rc=$?
  server=
  echo "stopped in $(echo "$(date +%s.%N) - $t0" | bc) s"
  return $rc
}
run() { "${T[@]}" $PY "$TESTS/serve_hostile.py" "$@" || fail "$1"; }

# a small byte-level model; a slow one (8 layers, 1024 positions, one sequence at a time)
"${T[@]}" "$MGT" train --mock-data --tokenizer-type ByteTokenizer --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 256 --micro-batch-size 1 --train-iters 1 --eval-iters 0 \
  --save "$tmp/small" > "$tmp/train.log" 2>&1 || { tail -3 "$tmp/train.log"; exit 1; }
"${T[@]}" "$MGT" train --mock-data --tokenizer-type ByteTokenizer --num-layers 8 --hidden-size 512 \
  --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 --train-iters 1 --eval-iters 0 \
  --save "$tmp/slow" > "$tmp/train.log" 2>&1 || { tail -3 "$tmp/train.log"; exit 1; }

if start small --load "$tmp/small" --max-connections-per-client 32 --idle-timeout 2 --request-timeout 3; then
  run idle "$PORT" 32
  run idle-timeout "$PORT" 2
  run trickle "$PORT" 3
  run utf8 "$PORT"
  run path "$PORT"
  run values "$PORT"
  grep -q "closed a connection from 127.0.0.1: no whole request within 3 s" "$tmp/small.log" &&
    echo "ok: the log says which connections were cut off" || fail "no line for the cut-off connections"
  if grep -q $'\e' "$tmp/small.log" || grep -q "^serve: forged" "$tmp/small.log" ||
    ! grep -q 'GET /x\\x0aserve: forged line\\x1b\[2J 404' "$tmp/small.log"; then
    fail "the path reached the log raw: $(grep -a forged "$tmp/small.log" | cat -v)"
  else
    echo "ok: logged as $(grep -o 'GET /x.* 404' "$tmp/small.log")"
  fi
  stop 10 || fail "the small server's exit status"
fi

if start slow --load "$tmp/slow" --max-batch 1 --drain-timeout 2 --request-timeout 60; then
  run leave "$PORT"
  grep -q "POST /v1/completions 499 the client left; its decoding was cancelled" "$tmp/slow.log" &&
    [ "$(grep -c "POST /v1/completions 200" "$tmp/slow.log")" = 1 ] &&
    echo "ok: logged as 499, not 200" || { fail "the request whose client left, in the log"; cat "$tmp/slow.log"; }
  run fair "$PORT"
  "${T[@]}" $PY "$TESTS/serve_hostile.py" drain "$PORT" "$tmp/drain" &
  client=$!
  for _ in $(seq 100); do [ -e "$tmp/drain.ready" ] && break; sleep 0.1; done
  sleep 0.5
  stop 6 && echo "ok: SIGTERM with a request decoding and a body trickling: exit 0 within 2 s + 4 s" ||
    fail "SIGTERM during the drain: exit status"
  wait "$client"
  head -1 "$tmp/drain" | grep -q '^503$' && grep -q "the server shut down before the answer was complete" "$tmp/drain" &&
    echo "ok: the request still decoding after the drain time answered 503" || { fail "the request cut off"; head -c 300 "$tmp/drain"; }
  grep -q "the drain time of 2 s is over: 2 requests cut off" "$tmp/slow.log" ||
    { fail "no drain line"; tail -4 "$tmp/slow.log"; }
fi

# one client's prompt busy in the tokenizer for seconds (GPT-2's BPE on 8 MB of letters)
V=$DATA/gpt2/gpt2-vocab.json MF=$DATA/gpt2/gpt2-merges.txt
if [ -f "$V" ]; then
  "${T[@]}" "$MGT" train --mock-data --tokenizer-type GPT2BPETokenizer --vocab-file "$V" --merge-file "$MF" \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 1 \
    --train-iters 1 --eval-iters 0 --save "$tmp/gpt" > "$tmp/train.log" 2>&1 || { tail -3 "$tmp/train.log"; exit 1; }
  if start gpt --load "$tmp/gpt" --max-request-bytes 16777216; then
    run stall "$PORT"
    stop 10 || fail "the GPT-2 server's exit status"
  fi
else
  echo "no $V: the tokenizer stall case not run"
  [ -n "${MGT_REQUIRE_DATA:-}" ] && fail "no $V"
fi

echo "serve_limits: $fails failures"
[ $fails = 0 ]
