#!/usr/bin/env python3
"""GPT-2 124M training steps in PyTorch on the CPU, the peer bench/cpu.sh sets beside
bench_cpu: the same shapes (12 layers, hidden 768, 12 heads, vocabulary 50304, no dropout),
AdamW, fp32 or bf16 autocast (oneDNN's bf16 GEMMs). Prints one line: tokens/s and ms/step.
Usage: torch_gpt2.py --batch B --seq T [--bf16] [--steps N]"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        p = F.softmax(s.masked_fill(mask[:t, :t], float("-inf")), dim=-1)
        x = x + self.proj((p @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50304, ctx=1024, c=768, layers=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(ctx, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(c)
        self.register_buffer("mask", torch.ones(ctx, ctx, dtype=torch.bool).triu(1))
        for m in self.modules():  # GPT-2's initialization, as mgt's
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    idx = torch.randint(0, 50257, (a.batch, a.seq + 1))
    times = []
    for i in range(a.steps + 1):  # the first step warms caches and oneDNN's kernels
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:
            times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"pytorch {torch.__version__} gpt2-124M B={a.batch} T={a.seq:<4} "
          f"{'bf16 autocast' if a.bf16 else 'fp32':13} threads={torch.get_num_threads()}: "
          f"{1e3 * t:8.1f} ms/step {a.batch * a.seq / t:7.1f} tokens/s, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
