#!/usr/bin/env python3
"""An independent float64 BERT in numpy that reads megatron-c's Hugging Face export (config.json
and model.safetensors, read as tests/gpt2_numpy.py reads them) and computes the masked-LM and sentence-order
losses of the first global batch, whose samples it rebuilds with tests/bert_samples.py (the
rewrite of Megatron-LM's data code). The pre-LN export uses MegatronBert's names, the post-LN
one plain BERT's (embedding LayerNorm, LayerNorm after each residual), so both layouts of
names are checked. The model is megatron-c's: tanh GeLU in the MLP, erf GeLU in the LM head,
keys masked past each sample's length.

Usage: bert_numpy.py HF_DIR DATASET.h5 VOCAB.txt SEQ_LENGTH GLOBAL_BATCH SEED METRICS.jsonl
Compares with the lm_loss and sop_loss of iteration 1 in METRICS.jsonl.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_samples  # noqa: E402
import gpt2_numpy  # noqa: E402


layernorm, gelu_tanh = gpt2_numpy.layernorm, gpt2_numpy.gelu


def gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def log_softmax_at(logits, target):
    m = logits.max()
    return logits[target] - m - math.log(np.exp(logits - m).sum())


class Bert:
    def __init__(self, d):
        conf, self.w = gpt2_numpy.load(d)
        self.post = conf["model_type"] == "bert"
        self.binary = conf["architectures"][0].endswith("ForPreTraining")
        self.L, self.C = conf["num_hidden_layers"], conf["hidden_size"]
        self.H, self.eps = conf["num_attention_heads"], conf["layer_norm_eps"]

    def ln(self, prefix, x):
        return layernorm(x, self.w[prefix + ".weight"], self.w[prefix + ".bias"], self.eps)

    def lin(self, prefix, x):
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def attention(self, l, h, n):
        p = "bert.encoder.layer.%d.attention." % l
        T, hd = h.shape[0], self.C // self.H
        q, k, v = (self.lin(p + "self." + s, h).reshape(T, self.H, hd) for s in ("query", "key", "value"))
        out = np.zeros((T, self.H, hd))
        for a in range(self.H):
            s = q[:, a] @ k[:n, a].T / math.sqrt(hd)  # only the first n keys are real
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, a] = (s / s.sum(-1, keepdims=True)) @ v[:n, a]
        return self.lin(p + "output.dense", out.reshape(T, self.C))

    def mlp(self, l, h):
        p = "bert.encoder.layer.%d." % l
        return self.lin(p + "output.dense", gelu_tanh(self.lin(p + "intermediate.dense", h)))

    def losses(self, tokens, types, labels, n, is_random):
        e = "bert.embeddings."
        T = len(tokens)
        x = self.w[e + "word_embeddings.weight"][tokens] + self.w[e + "position_embeddings.weight"][:T]
        x = x + self.w[e + "token_type_embeddings.weight"][types]
        if self.post:  # BERT: LayerNorm after each residual sum
            x = self.ln(e + "LayerNorm", x)
            for l in range(self.L):
                p = "bert.encoder.layer.%d." % l
                x = self.ln(p + "attention.output.LayerNorm", x + self.attention(l, x, n))
                x = self.ln(p + "output.LayerNorm", x + self.mlp(l, x))
        else:  # Megatron: LayerNorm before each sublayer, one at the end
            for l in range(self.L):
                p = "bert.encoder.layer.%d." % l
                x = x + self.attention(l, self.ln(p + "attention.ln", x), n)
                x = x + self.mlp(l, self.ln(p + "ln", x))
            x = self.ln("bert.encoder.ln", x)
        lm, count = 0.0, 0
        wte, bias = self.w[e + "word_embeddings.weight"], self.w["cls.predictions.bias"]
        for t in range(T):
            if labels[t] < 0:
                continue
            h = gelu_erf(self.lin("cls.predictions.transform.dense", x[t]))
            h = self.ln("cls.predictions.transform.LayerNorm", h)
            lm -= log_softmax_at(h @ wte.T + bias, labels[t])
            count += 1
        sop = correct = 0.0
        if self.binary:
            pooled = np.tanh(self.lin("bert.pooler.dense", x[0]))
            logits = self.lin("cls.seq_relationship", pooled)
            sop = -log_softmax_at(logits, is_random)
            correct = float(np.argmax(logits) == is_random)
        return lm, count, sop, correct


def main():
    hf, path, vocab_file = sys.argv[1], sys.argv[2], sys.argv[3]
    T, N, seed, metrics = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
    model = Bert(hf)
    corpus = bert_samples.Corpus(path, vocab_file)
    maps = corpus.mapping(N, T, seed, model.binary)
    lm = count = sop = correct = 0.0
    for idx in range(N):
        a, b, c, d = model.losses(*corpus.sample(maps[idx], idx, T, seed, model.binary))
        lm, count, sop, correct = lm + a, count + b, sop + c, correct + d
    got = [json.loads(l) for l in open(metrics)]
    got = [g for g in got if g.get("iteration") == 1 and "lm_loss" in g][0]
    want_lm, want_sop = lm / count, sop / N
    print("numpy BERT (%s, %s): lm loss %.9g over %d masked, sop loss %.9g; megatron-c: %.9g, %s" %
          ("post-LN" if model.post else "pre-LN", "binary head" if model.binary else "no binary head",
           want_lm, count, want_sop, got["lm_loss"], got["sop_loss"]))
    assert abs(got["lm_loss"] - want_lm) <= 2e-6 * abs(want_lm), "lm loss differs"
    if model.binary:
        assert abs(got["sop_loss"] - want_sop) <= 2e-6 * abs(want_sop), "sop loss differs"
        assert abs(got["sop_accuracy"] - correct / N) < 1e-9, "sop accuracy differs"
    else:
        assert got["sop_loss"] is None, "a sop loss without the binary head"


if __name__ == "__main__":
    main()
