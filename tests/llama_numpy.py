#!/usr/bin/env python3
"""An independent Llama (Hugging Face's LlamaForCausalLM, and Qwen3ForCausalLM and
Qwen2ForCausalLM, which differ from it in the attention) in float64 numpy, reading a Hugging
Face directory (config.json, model.safetensors or the files of model.safetensors.index.json):
prints the mean loss of token ids scored in windows of SEQ_LENGTH that start every SEQ_LENGTH
tokens, as gpt2_numpy.py does. Written from transformers' modeling_llama: RMSNorm, rotary
positions rotating halves (rotate_half) with rope_scaling "llama3", repeat_kv (query head h
reads key/value head h // (heads / kv_heads)), down(silu(gate) * up), tied or untied lm_head.
Qwen 3 (modeling_qwen3): head_dim of its own, RMSNorm over each head's q and k (q_norm, k_norm)
after the projection and before the rotation. Qwen 2 (modeling_qwen2): biases in q, k and v.
Mixtral (modeling_mixtral) and Qwen3-MoE (modeling_qwen3_moe): the MLP of their MoE layers is a
router (softmax over the experts, the top num_experts_per_tok, renormalized: always in Mixtral,
with norm_topk_prob in Qwen3-MoE) and the chosen experts' MLPs summed with those weights;
Qwen3-MoE's layer l has experts when l + 1 is a multiple of decoder_sparse_step and l is not in
mlp_only_layers. OLMoE (modeling_olmoe): experts in every layer (norm_topk_prob: renormalized or
not), q_norm and k_norm an RMSNorm over the whole q and the whole k projections.
Usage: llama_numpy.py HF_DIR IDS_FILE SEQ_LENGTH"""
import json
import math
import os
import sys

import numpy as np

from gpt2_numpy import read_safetensors, score  # the file format and the windows


def load(d):
    cfg = json.load(open(d + "/config.json"))
    w = {}
    index = d + "/model.safetensors.index.json"
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
        for f in files:
            read_safetensors(d + "/" + f, w)
    else:
        read_safetensors(d + "/model.safetensors", w)
    return cfg, w


def inv_freq(cfg, hd):
    f = 1.0 / cfg.get("rope_theta", 10000.0) ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling")
    if not rs:
        return f
    assert rs.get("rope_type", rs.get("type")) == "llama3"
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    llama = np.where(wavelen > old / low, f / factor, f)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, llama)


def rmsnorm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rotate(x, cos, sin):  # x (T, hd): q * cos + rotate_half(q) * sin
    h = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[:, h:], x[:, :h]], -1) * sin


def linear(x, w, p):
    return x @ w[p + ".weight"].T + (w[p + ".bias"] if p + ".bias" in w else 0)


def swiglu(w, h, gate, up, down):
    g = linear(h, w, gate)
    return linear(g / (1 + np.exp(-g)) * linear(h, w, up), w, down)


def is_moe(cfg, l):
    if cfg.get("model_type") in ("mixtral", "olmoe"):
        return True
    if cfg.get("model_type") != "qwen3_moe":
        return False
    step = cfg.get("decoder_sparse_step", 1)
    return l not in (cfg.get("mlp_only_layers") or []) and (l + 1) % step == 0


def moe(cfg, w, p, h):
    mixtral = cfg["model_type"] == "mixtral"
    blk = p + ("block_sparse_moe." if mixtral else "mlp.")
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    k = cfg["num_experts_per_tok"]
    z = linear(h, w, blk + "gate")
    prob = np.exp(z - z.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        top = np.argsort(-prob[t], kind="stable")[:k]
        wt = prob[t, top]
        if mixtral or cfg.get("norm_topk_prob"):
            wt = wt / wt.sum()
        for e, we in zip(top, wt):
            n = [blk + "experts.%d.%s" % (e, s) for s in names]
            out[t] += we * swiglu(w, h[t:t + 1], *n)[0]
    return out


def forward(cfg, w, ids):
    T, C, H = len(ids), cfg["hidden_size"], cfg["num_attention_heads"]
    G = cfg.get("num_key_value_heads") or H
    hd, eps = cfg.get("head_dim") or C // H, cfg["rms_norm_eps"]
    qk_norm = cfg.get("model_type") in ("qwen3", "qwen3_moe")
    full_qk_norm = cfg.get("model_type") == "olmoe"
    ang = np.outer(np.arange(T), inv_freq(cfg, hd))
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, w, p + "self_attn.q_proj")
        k = linear(h, w, p + "self_attn.k_proj")
        v = linear(h, w, p + "self_attn.v_proj")
        if full_qk_norm:
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        heads = []
        for i in range(H):
            g = i // (H // G)
            qi, kg = q[:, i * hd:(i + 1) * hd], k[:, g * hd:(g + 1) * hd]
            if qk_norm:
                qi = rmsnorm(qi, w[p + "self_attn.q_norm.weight"], eps)
                kg = rmsnorm(kg, w[p + "self_attn.k_norm.weight"], eps)
            qi, kg = rotate(qi, cos, sin), rotate(kg, cos, sin)
            a = qi @ kg.T / math.sqrt(hd) + mask
            a = np.exp(a - a.max(-1, keepdims=True))
            heads.append((a / a.sum(-1, keepdims=True)) @ v[:, g * hd:(g + 1) * hd])
        x = x + linear(np.concatenate(heads, -1), w, p + "self_attn.o_proj")
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        if is_moe(cfg, l):
            x = x + moe(cfg, w, p, h)
        else:
            x = x + swiglu(w, h, p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj")
    x = rmsnorm(x, w["model.norm.weight"], eps)
    out = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ out.T


def main():
    cfg, w = load(sys.argv[1])
    ids = [int(t) for t in open(sys.argv[2]).read().split()]
    T = int(sys.argv[3])
    count, loss = score(forward, cfg, w, ids, T, T)
    print(json.dumps({"tokens": count, "avg_loss": loss}))


if __name__ == "__main__":
    main()
