#!/usr/bin/env bash
# mgt serve's throughput: requests/s and generated tokens/s with 1, 4 and 16 clients at once,
# against mgt generate decoding the same prompts one after another (its own tokens/s, start-up
# excluded). GPT-2 124M shapes (12 layers, hidden 768, 12 heads, 1024 positions), weights from
# one training step (the speed does not depend on them), GPT-2's vocabulary where ../shared has
# it, else bytes. Usage: bench/serve.sh [BUILD_DIR] [PROMPTS] [NEW_TOKENS] [TP]
set -euo pipefail
BUILD=${1:-build}
PROMPTS=${2:-16}
NEW=${3:-32}
TP=${4:-1}
MGT=$BUILD/mgt
root=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(($(nproc) / TP > 0 ? $(nproc) / TP : 1))}
tmp=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $(pgrep -P "$server") 2>/dev/null; rm -rf "$tmp"' EXIT
V=$root/../shared/data/gpt2
tok=(--tokenizer-type ByteTokenizer)
[ -f "$V/gpt2-vocab.json" ] && tok=(--vocab-file "$V/gpt2-vocab.json" --merge-file "$V/gpt2-merges.txt")
"$MGT" train --mock-data "${tok[@]}" --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
  --seq-length 1024 --micro-batch-size 1 --train-iters 1 --eval-iters 0 --save "$tmp/ckpt" \
  >"$tmp/train.log" 2>&1 || { tail -3 "$tmp/train.log"; exit 1; }
prompt() { echo "Prompt number $1 asks the model to continue this sentence about"; }

# mgt generate, one prompt after another: its own decode rate
gen_tokens=0 gen_s=0
for i in $(seq 1 4); do
  mpiexec -n "$TP" "$MGT" generate --load "$tmp/ckpt" --prompt "$(prompt "$i")" --greedy \
    --max-new-tokens "$NEW" >/dev/null 2>"$tmp/gen.err"
  read -r n s < <(sed -n 's/.* \([0-9]*\) new tokens in \([0-9.]*\) s.*/\1 \2/p' "$tmp/gen.err")
  gen_tokens=$((gen_tokens + n)) gen_s=$(echo "$gen_s + $s" | bc -l)
done

mpiexec -n "$TP" "$MGT" serve --load "$tmp/ckpt" --port 0 --max-batch 16 >"$tmp/serve.log" 2>&1 &
server=$!
PORT=
for _ in $(seq 600); do
  PORT=$(sed -n 's/.* at http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$tmp/serve.log")
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { cat "$tmp/serve.log"; exit 1; }
echo "bench/serve.sh: $(grep -o 'on [0-9]* tensor-parallel.*' "$tmp/serve.log" | head -1); $(nproc) CPUs, OMP_NUM_THREADS=$OMP_NUM_THREADS"
echo "mgt generate, one prompt at a time: $gen_tokens tokens in $gen_s s = $(echo "$gen_tokens / $gen_s" | bc -l | cut -c1-6) tokens/s (decoding only)"
/usr/bin/python3 - "$PORT" "$PROMPTS" "$NEW" <<'PY'
import json, sys, threading, time, urllib.request
port, n, new = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def ask(i, out):
    body = json.dumps({"prompt": "Prompt number %d asks the model to continue this sentence about" % (i + 1),
                       "max_tokens": new, "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body, method="POST")
    with urllib.request.urlopen(req, timeout=3600) as r:
        out[i] = json.loads(r.read())["usage"]["completion_tokens"]
ask(0, [0])  # warm-up
print("| clients | requests | s | requests/s | tokens/s |")
print("|---|---|---|---|---|")
for clients in (1, 4, 16):
    out, nxt, lock = [0] * n, [0], threading.Lock()
    def worker():
        while True:
            with lock:
                i = nxt[0]; nxt[0] += 1
            if i >= n:
                return
            ask(i, out)
    t0 = time.time()
    ts = [threading.Thread(target=worker) for _ in range(clients)]
    [t.start() for t in ts]; [t.join() for t in ts]
    dt = time.time() - t0
    print("| %d | %d | %.2f | %.2f | %.1f |" % (clients, n, dt, n / dt, sum(out) / dt))
PY
