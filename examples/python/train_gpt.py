#!/usr/bin/env python3
"""train_gpt.py - a small GPT-style model trained on CPU with flashattn.flash_attn_func inside
its attention module, and the same model (same initial weights, same batches) with PyTorch's
scaled_dot_product_attention: their losses, step by step, agree to rounding.

    python examples/python/train_gpt.py [--steps 300] [--backend auto]

The corpus is a few sentences repeated (a character-level model of them); the loss falls from
ln(vocab) toward the text's entropy. Prints both losses every 50 steps and the largest gap.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from flashattn import flash_attn_func

TEXT = ("the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins "
        "with a single step. all that glitters is not gold. ") * 40


class Attention(nn.Module):
    """Causal multi-head self-attention; x (batch, seq, dim) -> (batch, seq, dim)."""

    def __init__(self, dim, heads, use_flash, backend):
        super().__init__()
        self.heads, self.use_flash, self.backend = heads, use_flash, backend
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, s, dim = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        if self.use_flash:  # flash-attn's layout: (batch, seq, heads, head_dim)
            y = flash_attn_func(q, k, v, causal=True, backend=self.backend)
        else:  # SDPA's: (batch, heads, seq, head_dim)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True).transpose(1, 2)
        return self.proj(y.reshape(b, s, dim))


class Block(nn.Module):
    def __init__(self, dim, heads, use_flash, backend):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, use_flash, backend)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, dim=64, heads=4, layers=2, use_flash=True, backend="auto"):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, use_flash, backend) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def train(steps, backend="auto", seq=64, batch=8, log_every=50, out=print):
    """Trains both models in lockstep; returns their loss lists."""
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(c) for c in TEXT])
    torch.manual_seed(0)
    flash = GPT(len(chars), seq, use_flash=True, backend=backend)
    sdpa = GPT(len(chars), seq, use_flash=False)
    sdpa.load_state_dict(flash.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in (flash, sdpa)]
    gen = torch.Generator().manual_seed(1)
    losses = ([], [])
    for step in range(steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=gen)
        x = torch.stack([data[s:s + seq] for s in starts])
        y = torch.stack([data[s + 1:s + seq + 1] for s in starts])
        for model, opt, hist in zip((flash, sdpa), opts, losses):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            hist.append(loss.item())
        if step % log_every == 0 or step == steps - 1:
            out("step %4d  loss flashattn %.4f  sdpa %.4f" % (step, losses[0][-1],
                                                               losses[1][-1]))
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    flash, sdpa = train(a.steps, a.backend)
    gap = max(abs(x - y) for x, y in zip(flash, sdpa))
    print("initial loss %.3f (ln vocab = %.3f), final %.4f vs %.4f, largest gap %.2e"
          % (flash[0], math.log(len(set(TEXT))), flash[-1], sdpa[-1], gap))


if __name__ == "__main__":
    main()
