#!/usr/bin/env python3
"""An independent GPT-2 in float64 numpy, reading a Hugging Face export (config.json,
model.safetensors): prints the mean loss of token ids scored in windows of SEQ_LENGTH
that start every STRIDE tokens (default SEQ_LENGTH); each target is scored by the first
window that reaches it.
Usage: gpt2_numpy.py HF_DIR IDS_FILE SEQ_LENGTH [STRIDE]"""
import json
import math
import sys

import numpy as np


def read_safetensors(path, w):
    """Adds the float32 tensors of one safetensors file to w, as float64."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32"
        a, b = v["data_offsets"]
        w[k] = np.frombuffer(data[a:b], dtype="<f4").reshape(v["shape"]).astype(np.float64)


def load(d):
    cfg = json.load(open(d + "/config.json"))
    w = {}
    read_safetensors(d + "/model.safetensors", w)
    return cfg, w


def layernorm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, w, ids):
    T, C, H = len(ids), cfg["n_embd"], cfg["n_head"]
    hd, eps = C // H, cfg["layer_norm_epsilon"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["n_layer"]):
        p = "transformer.h.%d." % l
        h = layernorm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        heads = []
        for i in range(H):
            s = slice(i * hd, (i + 1) * hd)
            a = q[:, s] @ k[:, s].T / math.sqrt(hd) + mask
            a = np.exp(a - a.max(-1, keepdims=True))
            heads.append((a / a.sum(-1, keepdims=True)) @ v[:, s])
        x = x + np.concatenate(heads, -1) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layernorm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layernorm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.wte.weight"].T  # tied output layer


def score(forward, cfg, w, ids, T, stride):
    """The mean loss of ids in windows of T starting every stride tokens, each target scored by
    the first window that reaches it; returns (targets, mean loss)."""
    total, count, done = 0.0, 0, 0  # targets 1..done are scored
    start = 0
    while done < len(ids) - 1:
        window = ids[start:start + T + 1]
        logits = forward(cfg, w, window[:-1])
        m = logits.max(-1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
        for t in range(len(window) - 1):
            if start + t + 1 > done:
                total -= logp[t, window[t + 1]]
                count += 1
        done = start + len(window) - 1
        start += stride
    return count, total / count


def main():
    cfg, w = load(sys.argv[1])
    ids = [int(t) for t in open(sys.argv[2]).read().split()]
    T = int(sys.argv[3])
    count, loss = score(forward, cfg, w, ids, T, int(sys.argv[4]) if len(sys.argv) > 4 else T)
    print(json.dumps({"tokens": count, "avg_loss": loss}))


if __name__ == "__main__":
    main()
