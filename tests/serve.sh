#!/usr/bin/env bash
# mgt serve against real clients: curl, Python's urllib (tests/serve_client.py) and, where it is
# installed, the openai npm package (tests/openai-js), at tp=1, tp=2 and two replicas of tp=1, on a byte-level model
# trained here on the system's licence texts. Usage:
# serve.sh MGT MPIEXEC
#  - PUT /api (Megatron-LM's API) and /v1/completions at temperature 0 answer what
#    mgt generate --greedy prints; seeded sampling is mgt generate --seed's draw, and repeats;
#  - log-probabilities equal a float64 numpy forward of the exported model;
#  - concurrent requests each get their own answer; streams, stop strings, n choices;
#  - bad requests: 4xx and a one-line reason, the server still up;
#  - a client that leaves its stream frees its slot (--max-batch 1: the next request is
#    answered); SIGTERM finishes the request in flight, then the server exits 0.
set -u
MGT=$1
MPIEXEC=${2:-mpiexec}
TESTS=$(cd "$(dirname "$0")" && pwd)
. "$TESTS/lib.sh" # root-safe MPI, one OpenMP thread, $PY, $tmp, fail()
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
command -v curl >/dev/null || { echo "no curl: skipped"; exit 77; }
"$MGT" serve --load /nonexistent 2>&1 | grep -q "without libmicrohttpd" && { echo "built without libmicrohttpd: skipped"; exit 77; }

texts=()
for f in /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 \
  /usr/share/common-licenses/GPL-2 /usr/share/common-licenses/LGPL-2.1; do
  [ -f "$f" ] && texts+=("$f")
done
[ ${#texts[@]} -gt 0 ] || { echo "no licence texts: skipped"; exit 77; }
"$MGT" preprocess --input "${texts[@]}" --output-prefix "$tmp/text" --tokenizer-type ByteTokenizer \
  --append-eod >"$tmp/pre.log" 2>&1 || { cat "$tmp/pre.log"; exit 1; }
"$MPIEXEC" -n 2 "$MGT" train --data-path "$tmp/text" --tokenizer-type ByteTokenizer \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 256 --micro-batch-size 8 \
  --train-iters 300 --lr 3e-3 --lr-warmup-iters 10 --log-interval 100 --eval-iters 0 \
  --tensor-model-parallel-size 2 --save "$tmp/ckpt" >"$tmp/train.log" 2>&1 ||
  { tail -5 "$tmp/train.log"; exit 1; }
"$MGT" ckpt export --format hf --load "$tmp/ckpt" --output "$tmp/hf" >/dev/null 2>&1 ||
  fail "export for the numpy reference"

# start NAME RANKS ARGS...: a server in the background; PORT from its start line
start() {
  local name=$1 n=$2
  shift 2
  serve_start "$tmp/$name.log" "$MPIEXEC" -n "$n" "$MGT" serve --port 0 "$@"
}
# stop: SIGTERM to the ranks (as srun and scancel deliver it; Open MPI's mpiexec forwards one it
# gets but then exits 1 itself), and the exit status must be 0
stop() {
  kill -TERM $(pgrep -P "$server")
  wait "$server"
  local rc=$?
  server=
  return $rc
}

# the openai npm package's client, where tests/openai-js has its node_modules (npm ci there)
openai=0
if command -v node >/dev/null && [ -d "$TESTS/openai-js/node_modules/openai" ]; then
  openai=1
else
  echo "the openai npm client is not installed in $TESTS/openai-js (npm ci there): not run"
fi
PROMPT="This License"
for layout in "1 1" "2 2" "2 1"; do # ranks, tensor-parallel size (2 1: two replicas)
  read -r np tp <<<"$layout"
  start "tp$tp.$np" "$np" --load "$tmp/ckpt" --max-batch 4 --tensor-model-parallel-size "$tp" ||
    continue
  "$MPIEXEC" -n "$tp" "$MGT" generate --load "$tmp/ckpt" --prompt "$PROMPT" --max-new-tokens 40 \
    --greedy >"$tmp/greedy$tp" 2>/dev/null || fail "generate tp=$tp"
  "$MPIEXEC" -n "$tp" "$MGT" generate --load "$tmp/ckpt" --prompt "$PROMPT" --max-new-tokens 30 \
    --temperature 0.9 --top-k 20 --seed 11 >"$tmp/seeded$tp" 2>/dev/null || fail "generate seeded"
  # curl: greedy and seeded PUT /api against mgt generate
  curl -sf -X PUT "localhost:$PORT/api" -H 'Content-Type: application/json' \
    -d "{\"prompts\": [\"$PROMPT\"], \"tokens_to_generate\": 40, \"top_k\": 1}" >"$tmp/api$tp" ||
    fail "curl PUT /api tp=$tp"
  for k in 1 2; do
    curl -sf -X PUT "localhost:$PORT/api" -H 'Content-Type: application/json' \
      -d "{\"prompts\": [\"$PROMPT\"], \"tokens_to_generate\": 30, \"temperature\": 0.9, \"top_k\": 20, \"random_seed\": 11}" \
      >"$tmp/apiseed$tp.$k" || fail "curl seeded tp=$tp"
  done
  $PY - "$tmp/api$tp" "$tmp/greedy$tp" "$tmp/apiseed$tp.1" "$tmp/apiseed$tp.2" "$tmp/seeded$tp" <<'PY' &&
import json, sys
api, greedy, s1, s2, seeded = sys.argv[1:]
text = json.load(open(api))["text"][0]
want = open(greedy, encoding="utf-8").read()[:-1]
assert text == want, (text, want)
a, b = json.load(open(s1))["text"][0], json.load(open(s2))["text"][0]
assert a == b, (a, b)
want = open(seeded, encoding="utf-8").read()[:-1]
assert a == want, (a, want)
print("ok: curl PUT /api: greedy %r and a seeded draw equal mgt generate's" % text)
PY
    true || fail "PUT /api against mgt generate (tp=$tp)"
  $PY "$TESTS/serve_client.py" check "$PORT" "$tmp/hf" "$tmp/greedy$tp" "$PROMPT" ||
    fail "the Python client ($np ranks, tp=$tp)"
  if [ "$openai" = 1 ]; then
    node "$TESTS/openai-js/client.mjs" "$PORT" "$PROMPT" "$tmp/greedy$tp" || fail "the openai client (tp=$tp)"
  fi
  stop || fail "$np ranks, tp=$tp: SIGTERM did not exit 0"
  grep -q "requests answered; stopped" "$tmp/tp$tp.$np.log" || fail "tp=$tp: no stop line"
  echo "ok: $(grep -o 'on [0-9]* tensor-parallel ranks x [0-9]* replicas' "$tmp/tp$tp.$np.log") passed"
done

# --bf16: the server decodes in bf16, as mgt generate --bf16 does
if start bf16 1 --load "$tmp/ckpt" --max-batch 4 --bf16; then
  "$MGT" generate --load "$tmp/ckpt" --prompt "$PROMPT" --max-new-tokens 40 --greedy --bf16 \
    >"$tmp/greedy_bf16" 2>/dev/null || fail "generate --bf16"
  curl -sf -X PUT "localhost:$PORT/api" -H 'Content-Type: application/json' \
    -d "{\"prompts\": [\"$PROMPT\"], \"tokens_to_generate\": 40, \"top_k\": 1}" >"$tmp/api_bf16" ||
    fail "curl PUT /api --bf16"
  $PY - "$tmp/api_bf16" "$tmp/greedy_bf16" <<'PY' || fail "serve --bf16 against generate --bf16"
import json, sys
text = json.load(open(sys.argv[1]))["text"][0]
want = open(sys.argv[2], encoding="utf-8").read()[:-1]
assert text == want, (text, want)
print("ok: serve --bf16 answers %r, as mgt generate --bf16 --greedy" % text)
PY
  grep -q "replicas, bf16 on cpu" "$tmp/bf16.log" ||
    fail "serve --bf16 does not say bf16"
  stop || fail "serve --bf16: SIGTERM did not exit 0"
fi

# Megatron-LM's PUT /api fields with their meaning: Python's int and float as its isinstance
# checks see them, fields it does not know ignored; top_p_decay shrinks the nucleus after each
# token (from the second on, 1e-9 of it: the argmax), checked against the greedy continuation of
# the first token through /v1/completions; stop_token ends the answer; no newline after a colon
if start fields 1 --load "$tmp/ckpt" --max-batch 4; then
  api() { curl -s -o "$tmp/api.out" -w '%{http_code}' -X PUT "localhost:$PORT/api" \
    -H 'Content-Type: application/json' -d "$1"; }
  P="\"prompts\": [\"$PROMPT\"]"
  for case in "400|top_p must be a positive float|{$P, \"top_p\": 1}" \
    "400|tokens_to_generate must be an integer|{$P, \"tokens_to_generate\": 4.0}" \
    "400|top_p_decay cannot be set without top_p|{$P, \"top_p_decay\": 0.5}" \
    "400|top_p_bound must be greater than 0 and less than top_p|{$P, \"top_p\": 0.5, \"top_p_bound\": 0.7}" \
    "400|length_penalty must be a float|{$P, \"length_penalty\": 1}" \
    "400|stop_token must be an integer|{$P, \"stop_token\": \"x\"}" \
    "400|beam search is not implemented|{$P, \"beam_width\": 2}" \
    "200|\"text\"|{$P, \"tokens_to_generate\": 2, \"a_field_megatron_ignores\": 1, \"length_penalty\": 1.0}"; do
    IFS='|' read -r code want body <<<"$case"
    got=$(api "$body")
    [ "$got" = "$code" ] && grep -q -F -- "$want" "$tmp/api.out" && echo "ok: PUT /api $body: $got" ||
      fail "PUT /api $body: $got $(head -c 200 "$tmp/api.out")"
  done
  api "{$P, \"tokens_to_generate\": 12, \"top_p\": 1.0, \"top_p_decay\": 1e-9, \"top_p_bound\": 1e-12, \"random_seed\": 5}" > /dev/null
  cp "$tmp/api.out" "$tmp/decay.json"
  api "{$P, \"tokens_to_generate\": 0, \"logprobs\": true}" > /dev/null && cp "$tmp/api.out" "$tmp/prompt.json"
  $PY - "$tmp/decay.json" "$tmp/prompt.json" "$PORT" <<'PY' || fail "top_p_decay"
import json, sys, urllib.request
a, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = len(p["tokens"][0])  # the prompt's tokens
ids, segs = a["tokens"][0], a["segments"][0]
assert len(ids) > n + 2, ids
req = urllib.request.Request("http://localhost:%s/v1/completions" % sys.argv[3], method="POST",
    headers={"Content-Type": "application/json"},
    data=json.dumps({"prompt": ids[:n + 1], "max_tokens": len(ids) - n - 1, "temperature": 0}).encode())
greedy = json.load(urllib.request.urlopen(req))["choices"][0]["text"]
assert "".join(segs[n + 1:]) == greedy, (segs[n + 1:], greedy)
print("ok: top_p_decay: after the first token the nucleus is the argmax (%d tokens as greedy)" % (len(ids) - n - 1))
PY
  api "{$P, \"tokens_to_generate\": 20, \"top_k\": 1}" > /dev/null && cp "$tmp/api.out" "$tmp/full.json"
  stop_id=$($PY -c 'import json, sys; a = json.load(open(sys.argv[1])); print(a["tokens"][0][-5])' "$tmp/full.json")
  api "{$P, \"tokens_to_generate\": 20, \"top_k\": 1, \"stop_token\": $stop_id}" > /dev/null
  $PY - "$tmp/full.json" "$tmp/api.out" "$stop_id" "$tmp/prompt.json" <<'PY' || fail "stop_token"
import json, sys
full, cut, stop = json.load(open(sys.argv[1]))["tokens"][0], json.load(open(sys.argv[2]))["tokens"][0], int(sys.argv[3])
n = len(json.load(open(sys.argv[4]))["tokens"][0])
assert cut == full[:full.index(stop, n)], (cut, full, stop)
print("ok: stop_token %d ends the answer before it (%d of %d tokens)" % (stop, len(cut), len(full)))
PY
  api "{\"prompts\": [\"Note:\", \"a: b: c:\"], \"tokens_to_generate\": 40, \"temperature\": 2.0, \"random_seed\": 3, \"prevent_newline_after_colon\": true}" > /dev/null
  $PY - "$tmp/api.out" <<'PY' || fail "prevent_newline_after_colon"
import json, sys
segs = json.load(open(sys.argv[1]))["segments"]
pairs = [(s[i], s[i + 1]) for s in segs for i in range(len(s) - 1)]
assert not any(a == ":" and b == "\n" for a, b in pairs), pairs  # the tokens of ":" and "\n"
print("ok: prevent_newline_after_colon: no newline token after a colon in %d tokens" % len(pairs))
PY
  stop || fail "the fields server: SIGTERM did not exit 0"
fi

# a model slow enough to be caught in flight: 8 layers, 1024 positions, one step at a time
"$MGT" train --mock-data --tokenizer-type ByteTokenizer --num-layers 8 --hidden-size 512 \
  --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 --train-iters 1 --eval-iters 0 \
  --save "$tmp/big" >"$tmp/big.log" 2>&1 || { tail -3 "$tmp/big.log"; fail "the slow model"; }
if start slow 1 --load "$tmp/big" --max-batch 1; then
  # a client that leaves a stream waiting for its first token: its slot goes to the next request
  $PY "$TESTS/serve_client.py" leave "$PORT" || fail "leaving a stream"
  curl -sf "localhost:$PORT/v1/completions" -d '{"prompt": "a", "max_tokens": 2}' >"$tmp/next" ||
    fail "the request after the one that left"
  grep -q '"finish_reason"' "$tmp/next" && echo "ok: the request after a client left is answered"
  grep -q "ended by the client" "$tmp/slow.log" && echo "ok: the server saw the client leave" ||
    fail "the server did not see the client leave"
  # SIGTERM while a request is decoding: it is answered whole, then the server exits 0
  $PY "$TESTS/serve_client.py" inflight "$PORT" "$tmp/inflight" &
  client=$!
  sleep 1 # the request takes seconds: 600 steps of an 8-layer model
  stop && echo "ok: SIGTERM with a request in flight: exit 0" || fail "SIGTERM in flight: exit status"
  wait "$client"
  $PY - "$tmp/inflight" <<'PY' || fail "the request in flight at SIGTERM"
import json, sys
status, body = open(sys.argv[1]).read().split("\n", 1)
assert status == "200", (status, body[:200])
lp = json.loads(body)["choices"][0]["logprobs"]["token_logprobs"]
assert len(lp) == 600 and lp[0] is None and all(x is not None for x in lp[1:]), len(lp)
print("ok: the request in flight at SIGTERM got its whole answer (600 tokens scored)")
PY
  grep -q "SIGTERM: finishing" "$tmp/slow.log" || fail "no SIGTERM line in the log"
fi

# bad flags
"$MGT" serve --load "$tmp/ckpt" --host example.org >"$tmp/host" 2>&1 && fail "--host example.org accepted"
grep -q "not an IPv4 address" "$tmp/host" && echo "ok: $(grep -o 'mgt: error.*' "$tmp/host")" || fail "--host error: $(cat "$tmp/host")"
"$MPIEXEC" -n 3 "$MGT" serve --load "$tmp/ckpt" --tensor-model-parallel-size 2 >"$tmp/tp" 2>&1 &&
  fail "tp 2 of 3 ranks accepted"
grep -q "does not divide the 3 ranks into replicas" "$tmp/tp" && echo "ok: tp 2 of 3 ranks refused with the reason" || fail "tp 2 of 3 ranks: $(cat "$tmp/tp")"

echo "serve: $fails failures"
[ "$fails" = 0 ]
