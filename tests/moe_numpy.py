#!/usr/bin/env python3
"""An independent Mixture-of-Experts decoder in float64 numpy, reading a megatron-c checkpoint
(its tensors at their logical shapes and its "model" spec): prints the mean loss of token ids
scored in windows of SEQ_LENGTH, as gpt2_numpy.py does, each window one micro-batch of T tokens
(mgt eval --micro-batch-size 1). The block is Llama's (tests/llama_numpy.py: RMSNorm, rotary
positions, SwiGLU or the tanh GeLU, no biases; Qwen 3's q/k norms, or OLMoE's over all heads); its MoE layers are written from Megatron-LM's
router (megatron/core/transformer/moe/moe_utils.py: topk_routing_with_score_function: softmax of
the top-k logits, or with pre-softmax the top-k of the softmax, or sigmoid scores divided by the
chosen ones' sum, chosen by score plus expert bias if there is one; times the scaling factor;
apply_router_token_dropping: capacity
ceil(T k / E x factor), the tokens of the highest weights or the first ones kept) and its
experts (each an MLP of the block's kind, outputs summed with the routing weights), plus a shared
expert's output (an MLP of the block's kind on every token, times sigmoid(x . w) with its gate).
With MICRO_BATCH B > 1, B consecutive windows are one micro-batch, routed together (mgt eval
--micro-batch-size B on one rank). Usage: moe_numpy.py CHECKPOINT.h5 IDS_FILE SEQ_LENGTH [B]"""
import json
import math
import sys

import h5py
import numpy as np

from gpt2_numpy import score
from llama_numpy import rmsnorm, rotate


def load(path):
    with h5py.File(path, "r") as f:
        spec = json.loads(f.attrs["model"])
        w = {k: v[()].astype(np.float64) for k, v in f["model"].items()}
    return spec, w


def act(s, x):
    if s["mlp"] == "swiglu":
        h = x.shape[-1] // 2
        g = x[:, :h]
        return g / (1 + np.exp(-g)) * x[:, h:]
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def mlp(s, x, first, second):
    """first: (F or 2F, C) rows [gate | up] or the GeLU's input; second: (C, F)."""
    return act(s, x @ first.T) @ second.T


def route(s, z, bias=None):
    """Each token's experts (T, k) and weights, as Megatron-LM's router; the lower expert first
    among equal scores. An expert bias (aux-loss-free balancing) moves the sigmoid scores' choice,
    not their weights."""
    T, E = z.shape
    k = s["topk"]
    order = lambda v: np.array([sorted(range(E), key=lambda e: (-r[e], e))[:k] for r in v])
    if s["router_score"] == 0:
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        if s["router_pre"]:
            idx = order(p)
            w = np.take_along_axis(p, idx, 1)
        else:
            idx = order(z)
            c = np.take_along_axis(z, idx, 1)
            w = np.exp(c - c.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
    else:
        sg = 1 / (1 + np.exp(-z))
        idx = order(sg if bias is None else sg + bias)
        w = np.take_along_axis(sg, idx, 1)
        if k > 1:
            w = w / (w.sum(-1, keepdims=True) + 1e-20)
    if s["router_scale"]:
        w = w * s["router_scale"]
    return idx, w


def keep(s, idx, w):
    """Which (token, slot) an expert takes under its capacity."""
    T, k = idx.shape
    kept = np.ones_like(idx, dtype=bool)
    if s["capacity"] <= 0:
        return kept
    cap = min(T, math.ceil(T * k / s["experts"] * s["capacity"]))
    for e in range(s["experts"]):
        slots = [(t, j) for t in range(T) for j in range(k) if idx[t, j] == e]
        if s["drop_policy"] == 0:  # probs: the highest weights, the earlier token among equal
            slots.sort(key=lambda ts: (-w[ts], ts))
        for ts in slots[cap:]:
            kept[ts] = False
    return kept


def moe(s, w, p, x):
    z = x @ w[p + "mlp.router.weight"].T
    idx, wt = route(s, z, w.get(p + "mlp.router.expert_bias"))
    kept = keep(s, idx, wt)
    up = "mlp.experts.up.weight"
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            if not kept[t, j]:
                continue
            e = idx[t, j]
            if s["mlp"] == "swiglu":
                first = np.concatenate([w[p + "mlp.experts.gate.weight"][e], w[p + up][e]])
            else:
                first = w[p + "mlp.experts.dense_h_to_4h.weight"][e]
            out[t] += wt[t, j] * mlp(s, x[t:t + 1], first, w[p + "mlp.experts.dense_4h_to_h.weight"][e])[0]
    sh = p + "mlp.shared_expert."
    if sh + "dense_4h_to_h.weight" in w:  # Megatron-LM's SharedExpertMLP, every token
        first = (np.concatenate([w[sh + "gate.weight"], w[sh + "up.weight"]]) if s["mlp"] == "swiglu"
                 else w[sh + "dense_h_to_4h.weight"])
        y = mlp(s, x, first, w[sh + "dense_4h_to_h.weight"])
        if p + "mlp.shared_expert_gate.weight" in w:  # times sigmoid(x . w)
            y = y / (1 + np.exp(-(x @ w[p + "mlp.shared_expert_gate.weight"].T)))
        out += y
    return out


def forward(s, w, ids, taps=None):
    """The logits of ids, or of each sequence of a micro-batch (a list of lists of T ids), whose
    MoE layers route the micro-batch's rows together in Megatron-LM's order, [s, b] (position
    by position: the capacity sees them so); with taps, each MoE layer's input rows appended as
    (layer, rows)."""
    batched = isinstance(ids, list) and len(ids) > 0 and isinstance(ids[0], list)
    batch = ids if batched else [ids]
    B, T, C, H, G, hd = len(batch), len(batch[0]), s["hidden"], s["heads"], s["groups"], s["head_size"]
    eps = s["norm_eps"]
    assert s["norm"] == "RMSNorm" and s["pos"] == "rope" and not s["rope_scaling"]
    f = 1.0 / s["rope_base"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.outer(np.arange(T), f)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    xs = [w["embedding.word_embeddings.weight"][seq] for seq in batch]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(s["layers"]):
        p = "layers.%d." % l
        hs = []
        for b, x in enumerate(xs):
            h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
            if p + "attention.qkv.weight" in w:
                q, k, v = (h @ m.T for m in w[p + "attention.qkv.weight"])
            else:
                q = h @ w[p + "attention.query.weight"].T
                k, v = (h @ m.T for m in w[p + "attention.key_value.weight"])
            if s.get("qk_norm") == 2:  # OLMoE's: over all heads' q, and over all heads' k
                q = rmsnorm(q, w[p + "attention.q_layernorm.weight"], eps)
                k = rmsnorm(k, w[p + "attention.k_layernorm.weight"], eps)
            heads = []
            for i in range(H):
                g = i // (H // G)
                qi, kg = q[:, i * hd:(i + 1) * hd], k[:, g * hd:(g + 1) * hd]
                if s.get("qk_norm") == 1:  # Qwen 3's, before the rotation
                    qi = rmsnorm(qi, w[p + "attention.q_layernorm.weight"], eps)
                    kg = rmsnorm(kg, w[p + "attention.k_layernorm.weight"], eps)
                qi, kg = rotate(qi, cos, sin), rotate(kg, cos, sin)
                a = qi @ kg.T / math.sqrt(hd) + mask
                a = np.exp(a - a.max(-1, keepdims=True))
                heads.append((a / a.sum(-1, keepdims=True)) @ v[:, g * hd:(g + 1) * hd])
            xs[b] = x = x + np.concatenate(heads, -1) @ w[p + "attention.dense.weight"].T
            hs.append(rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps))
        moe_layer = s["experts"] and l >= s["moe_first"] and (l - s["moe_first"]) % s["moe_every"] == 0
        if moe_layer:
            rows = np.stack(hs, 1).reshape(T * B, C)  # [s, b]
            if taps is not None:
                taps.append((l, rows))
            y = moe(s, w, p, rows).reshape(T, B, C)
            xs = [x + y[:, b] for b, x in enumerate(xs)]
        elif s["mlp"] == "swiglu":
            first = np.concatenate([w[p + "mlp.gate.weight"], w[p + "mlp.up.weight"]])
            xs = [x + mlp(s, h, first, w[p + "mlp.dense_4h_to_h.weight"]) for x, h in zip(xs, hs)]
        else:
            xs = [x + mlp(s, h, w[p + "mlp.dense_h_to_4h.weight"], w[p + "mlp.dense_4h_to_h.weight"])
                  for x, h in zip(xs, hs)]
    out = w.get("output_layer.weight", w["embedding.word_embeddings.weight"])
    logits = [rmsnorm(x, w["final_layernorm.weight"], eps) @ out.T for x in xs]
    return logits if batched else logits[0]


def main():
    s, w = load(sys.argv[1])
    ids = [int(t) for t in open(sys.argv[2]).read().split()]
    T = int(sys.argv[3])
    B = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if B == 1:
        count, loss = score(lambda cfg, w, ids: forward(s, w, ids), None, w, ids, T, T)
    else:  # windows of T + 1 every T, B consecutive ones a micro-batch (whole ones only)
        assert (len(ids) - 1) % (T * B) == 0, "ids for whole micro-batches of whole windows"
        total, count = 0.0, 0
        for start in range(0, len(ids) - 1, T * B):
            wins = [ids[start + b * T:start + b * T + T + 1] for b in range(B)]
            for win, z in zip(wins, forward(s, w, [x[:-1] for x in wins])):
                m = z.max(-1, keepdims=True)
                logp = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
                total -= sum(logp[t, win[t + 1]] for t in range(T))
                count += T
        loss = total / count
    print(json.dumps({"tokens": count, "avg_loss": loss}))


if __name__ == "__main__":
    main()
