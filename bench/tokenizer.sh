#!/usr/bin/env bash
# Tokenizer throughput on one core, side by side with the npm BPE implementations of GPT-2:
# tiktoken (Rust core compiled to WASM), gpt-tokenizer and js-tiktoken (JavaScript); then BERT's
# WordPiece beside the JavaScript one of @huggingface/tokenizers.
# MB/s of whole-file encoding, median of 5 runs, single-threaded (node may run its garbage
# collector and compiler on other threads, which only favours it). The npm packages go to a temporary
# directory (npm registry access needed); set NPM_DIR to reuse an installation.
# Usage: bench/tokenizer.sh [build-dir] [data-dir]
set -eu
BUILD=${1:-build}
DATA=$(cd "${2:-$(dirname "$0")/../../shared/data}" && pwd) # node runs elsewhere
FILES=("$DATA/tinyshakespeare/input.txt" "$DATA/wikitext103/wiki.test.tokens")
V=("$DATA/gpt2/gpt2-vocab.json" "$DATA/gpt2/gpt2-merges.txt")
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$BUILD/bench/bench_tokenizer" GPT2BPETokenizer "${V[@]}" "${FILES[@]}"
NPM_DIR=${NPM_DIR:-$(mktemp -d)}
if [ ! -d "$NPM_DIR/node_modules/tiktoken" ]; then
  (cd "$NPM_DIR" && npm init -y > /dev/null && npm install --silent tiktoken gpt-tokenizer js-tiktoken) ||
    { echo "npm install failed: no side-by-side numbers"; exit 0; }
fi
cat > "$NPM_DIR/bench.js" <<'JS'
const fs = require('fs');
const impls = [
  ['tiktoken (WASM)', () => { const e = require('tiktoken').get_encoding('gpt2'); return (t) => e.encode_ordinary(t).length; }],
  ['gpt-tokenizer (JS)', () => { const g = require('gpt-tokenizer/encoding/r50k_base');
      return (t) => g.encode(t, { allowedSpecial: new Set(), disallowedSpecial: new Set() }).length; }],
  ['js-tiktoken (JS)', () => { const { Tiktoken } = require('js-tiktoken/lite'); const r = require('js-tiktoken/ranks/gpt2');
      const e = new Tiktoken(r.default || r); return (t) => e.encode(t, [], []).length; }],
];
for (const f of process.argv.slice(2)) {
  const text = fs.readFileSync(f, 'utf8'), bytes = Buffer.byteLength(text, 'utf8');
  for (const [name, make] of impls) {
    const fn = make(), times = []; let n = 0;
    for (let r = 0; r < 5; r++) { const t0 = process.hrtime.bigint(); n = fn(text); times.push(Number(process.hrtime.bigint() - t0) / 1e9); }
    times.sort((a, b) => a - b);
    console.log(`${name.padEnd(20)} ${f.padEnd(40)} ${String(n).padStart(8)} tokens ${(bytes / times[2] / 1e6).toFixed(2).padStart(7)} MB/s (median of 5, one core)`);
  }
}
JS
(cd "$NPM_DIR" && node bench.js "${FILES[@]}")

# BERT's WordPiece (uncased rules) beside the JavaScript WordPiece of @huggingface/tokenizers,
# configured as Google's tokenizer (BertNormalizer, BertPreTokenizer, WordPiece of 200 chars)
BV=$DATA/bert/bert-base-uncased-vocab.txt
BFILES=("$DATA/tinyshakespeare/input.txt" "$DATA/wikitext103/wiki.test.raw")
"$BUILD/bench/bench_tokenizer" BertWordPieceLowerCase "$BV" - "${BFILES[@]}"
if [ ! -d "$NPM_DIR/node_modules/@huggingface/tokenizers" ]; then
  (cd "$NPM_DIR" && npm install --silent @huggingface/tokenizers@0.2.0) ||
    { echo "npm install failed: no side-by-side WordPiece numbers"; exit 0; }
fi
cat > "$NPM_DIR/bert.js" <<'JS'
const fs = require('fs');
const { Tokenizer } = require('@huggingface/tokenizers');
const vocab = {};
fs.readFileSync(process.argv[2], 'utf8').split('\n').forEach((w, i) => { if (w.trim()) vocab[w.trim()] = i; });
const tok = new Tokenizer({
  model: { type: 'WordPiece', vocab, unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 200 },
  normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
  pre_tokenizer: { type: 'BertPreTokenizer' }, decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
  post_processor: null, added_tokens: [],
}, {});
for (const f of process.argv.slice(3)) {
  const text = fs.readFileSync(f, 'utf8'), bytes = Buffer.byteLength(text, 'utf8'), times = [];
  let n = 0;
  for (let r = 0; r < 5; r++) { const t0 = process.hrtime.bigint(); n = tok.encode(text, { add_special_tokens: false }).ids.length; times.push(Number(process.hrtime.bigint() - t0) / 1e9); }
  times.sort((a, b) => a - b);
  console.log(`${'@huggingface/tokenizers (JS)'.padEnd(32)} ${f.padEnd(40)} ${String(n).padStart(8)} tokens ${(bytes / times[2] / 1e6).toFixed(2).padStart(7)} MB/s (median of 5, one core)`);
}
JS
(cd "$NPM_DIR" && node bert.js "$BV" "${BFILES[@]}")

# Hugging Face's tokenizer.json (Llama 3, Qwen 3, Llama 2) beside Tokenizers.js reading the same
# files (the reference tests/hf_tokenizer.sh compares ids with)
HFT=$DATA/hf-tokenizers
for n in llama3 qwen3 llama2; do
  "$BUILD/bench/bench_tokenizer" HuggingFaceTokenizer "$HFT/$n/tokenizer.json" - "${BFILES[@]}"
done
cat > "$NPM_DIR/hf.mjs" <<'JS'
import { Tokenizer } from '@huggingface/tokenizers';
import { readFileSync } from 'node:fs';
const [dir, ...files] = process.argv.slice(2);
const tok = new Tokenizer(JSON.parse(readFileSync(dir + '/tokenizer.json', 'utf8')),
  JSON.parse(readFileSync(dir + '/tokenizer_config.json', 'utf8')));
for (const f of files) {
  const text = readFileSync(f, 'utf8'), bytes = Buffer.byteLength(text, 'utf8'), times = [];
  let n = 0;
  for (let r = 0; r < 5; r++) { const t0 = process.hrtime.bigint(); n = tok.encode(text, { add_special_tokens: false }).ids.length; times.push(Number(process.hrtime.bigint() - t0) / 1e9); }
  times.sort((a, b) => a - b);
  console.log(`${('Tokenizers.js ' + dir.split('/').pop()).padEnd(32)} ${f.padEnd(40)} ${String(n).padStart(8)} tokens ${(bytes / times[2] / 1e6).toFixed(2).padStart(7)} MB/s (median of 5, one core)`);
}
JS
for n in llama3 qwen3 llama2; do (cd "$NPM_DIR" && timeout 600 node hf.mjs "$HFT/$n" "${BFILES[@]}") || echo "Tokenizers.js $n: no number"; done
