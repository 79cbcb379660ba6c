#!/usr/bin/env python3
"""Megatron-LM's global_aux_loss in float64 numpy, written from its router
(megatron/core/transformer/moe/router.py: _apply_global_aux_loss, switch_load_balancing_loss_func):
for one training step from a megatron-c checkpoint on --mock-data, prints the load-balancing
loss mgt logs for that step. Micro-step m of the step is the samples first + m B dp ... + (m + 1)
B dp - 1 (B each on dp ranks, as mgt and Megatron-LM deal them); each MoE layer's counts of
tokens per expert over all of them are added to a sum kept over the step's micro-steps, and
the loss of micro-step m is coeff E / (k N^2) sum_e P_e c_e, N the micro-step's tokens, P_e the
sum of its tokens' softmax scores, c_e the sum of counts so far divided by m + 1; the step's is
the mean over micro-steps, averaged over the MoE layers. The mock sequences are mgt's
(Philox4x32-10 keyed by the seed, sample s's (start + stride j) mod vocab).
MODE aux (at DP 1) is Megatron-LM's aux_loss instead: each micro-step's own counts, and both
they and the scores without the expert bias (compute_routing_scores_for_aux_loss: softmax, or
sigmoids over their sum; counts of their top k), whatever experts the bias chose.
Usage: moe_global_aux.py CHECKPOINT.h5 SEED VOCAB FIRST GLOBAL_BATCH MICRO_BATCH DP SEQ COEFF [MODE]"""
import json
import sys

import numpy as np

from moe_numpy import forward, load, route

M32 = 0xFFFFFFFF


def philox(c, k):
    c, k = list(c), list(k)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k[1]) & M32, p0 & M32]
        k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
    return c


def mock(seed, vocab, sample, T):
    stream = 3 << 62  # the data stream, 0
    w = philox([sample & M32, sample >> 32, stream & M32, stream >> 32], [seed & M32, seed >> 32])
    start, stride = w[0] % vocab, 1 + w[1] % 8
    return [(start + stride * j) % vocab for j in range(T)]


def main():
    s, w = load(sys.argv[1])
    seed, vocab, first, gb, B, dp, T = map(int, sys.argv[2:9])
    coeff = float(sys.argv[9])
    mode = sys.argv[10] if len(sys.argv) > 10 else "global"
    assert mode == "aux" or s["router_score"] == 0, "softmax scores"
    assert mode == "global" or dp == 1, "aux: one rank"
    E, k, steps = s["experts"], s["topk"], gb // (B * dp)
    sums, total = {}, {}
    for m in range(steps):
        rows = {}
        for n in range(B * dp):
            taps = []
            forward(s, w, mock(seed, vocab, first + m * B * dp + n, T), taps)
            for l, h in taps:
                rows.setdefault(l, []).append(h)
        for l, hs in rows.items():
            h = np.concatenate(hs)
            z = h @ w["layers.%d.mlp.router.weight" % l].T
            if s["router_score"] == 0:
                p = np.exp(z - z.max(-1, keepdims=True))
            else:
                p = 1 / (1 + np.exp(-z))
            p /= p.sum(-1, keepdims=True)
            if mode == "aux":  # this micro-step's counts, the top k of the scores alone
                idx = np.array([sorted(range(E), key=lambda e: (-r[e], e))[:k] for r in p])
                sums[l] = np.bincount(idx.ravel(), minlength=E) * (m + 1)
            else:
                idx, _ = route(s, z)
                sums[l] = sums.get(l, 0) + np.bincount(idx.ravel(), minlength=E)
            N = h.shape[0]
            loss = coeff * E / (k * N * N) * (p.sum(0) * sums[l] / (m + 1)).sum()
            total[l] = total.get(l, 0) + loss / steps
    print(json.dumps({"load_balancing_loss": sum(total.values()) / len(total)}))


if __name__ == "__main__":
    main()
