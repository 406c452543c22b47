#!/usr/bin/env python3
"""decode_paged.py - a decode loop over a paged KV cache with flash_attn_with_kvcache: each step
appends one token's keys and values to every sequence (written in place through the block
table) and attends over the sequence so far; checked against plain attention over the same
keys, held contiguous.

    python examples/python/decode_paged.py [--steps 64] [--backend auto]

numpy only (no torch). Pages are handed out from a shared pool as sequences grow, in no order.
"""
import argparse

import numpy as np

from flashattn import flash_attn_with_kvcache


def decode(steps, backend="auto", batch=3, heads=8, heads_kv=2, dim=64, page=16, prompt=(5, 20,
                                                                                          33)):
    rng = np.random.default_rng(0)
    pages_per_seq = (max(prompt) + steps + page - 1) // page
    pool = batch * pages_per_seq
    k_cache = np.zeros((pool, page, heads_kv, dim), np.float32)
    v_cache = np.zeros_like(k_cache)
    table = rng.permutation(pool).reshape(batch, pages_per_seq).astype(np.int32)
    lengths = np.zeros(batch, np.int32)
    dense_k = [np.zeros((0, heads_kv, dim), np.float32) for _ in range(batch)]
    dense_v = [np.zeros((0, heads_kv, dim), np.float32) for _ in range(batch)]
    # the prompts: written as one block per sequence, no attention output needed
    for b, n in enumerate(prompt):
        k, v = rng.standard_normal((2, n, heads_kv, dim)).astype(np.float32)
        for t in range(n):
            k_cache[table[b, t // page], t % page] = k[t]
            v_cache[table[b, t // page], t % page] = v[t]
        dense_k[b], dense_v[b] = k, v
        lengths[b] = n
    worst = 0.0
    for step in range(steps):
        q = rng.standard_normal((batch, 1, heads, dim)).astype(np.float32)
        k_new, v_new = rng.standard_normal((2, batch, 1, heads_kv, dim)).astype(np.float32)
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths,
                                      block_table=table, causal=True, backend=backend)
        for b in range(batch):
            dense_k[b] = np.concatenate([dense_k[b], k_new[b]])
            dense_v[b] = np.concatenate([dense_v[b], v_new[b]])
            worst = max(worst, np.abs(out[b, 0] - reference(q[b, 0], dense_k[b],
                                                             dense_v[b])).max())
        lengths += 1
    return worst, lengths


def reference(q, k, v):
    """One query row per head over all keys (float64): q (heads, dim), k, v (n, heads_kv, dim)."""
    group = q.shape[0] // k.shape[1]
    k, v = np.repeat(k, group, axis=1).astype(np.float64), np.repeat(v, group, axis=1)
    s = np.einsum("hd,nhd->hn", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("hn,nhd->hd", p / p.sum(-1, keepdims=True), v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    worst, lengths = decode(a.steps, a.backend)
    print("%d steps, final lengths %s, largest error against plain attention %.2e"
          % (a.steps, lengths.tolist(), worst))


if __name__ == "__main__":
    main()
