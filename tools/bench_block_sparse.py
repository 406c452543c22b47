#!/usr/bin/env python3
"""bench_block_sparse.py - the block-sparse forward's time against the dense forward's on one
backend, as a Markdown table for docs/benchmarks.md (with the command, device and date): for
each sequence length, the dense run, then block masks of a sliding window of blocks (each query
block lists itself and the W - 1 key blocks before it, so the density falls as N grows) and of
random blocks at a fixed density.

usage: PYTHONPATH=python FLASHATTN_LIBRARY=build/libflashattn.so \
       tools/bench_block_sparse.py [--backend opencl] [--seq 1024,2048,4096] [--repeat 5]
Timing is not a test: nothing here asserts a speed. The lists are built here with numpy in
fa_block_lists' layout (int32 [1, 1, rows] counts, [1, 1, rows, cols] indices, broadcast).
"""
import argparse
import ctypes
import datetime
import shlex
import statistics
import sys
import time

import numpy as np

from flashattn import _core
from flashattn._lib import Problem, check, lib

BLOCK = 64  # block_q = block_k


def lists_of(dense):
    """kv_num_blocks and kv_indices of a [rows, cols] bool block mask, ascending."""
    rows, cols = dense.shape
    num = dense.sum(axis=1).astype(np.int32)
    idx = np.zeros((rows, cols), np.int32)
    for r in range(rows):
        on = np.nonzero(dense[r])[0]
        idx[r, :len(on)] = on
    return num, idx


def buffer(ctx, arr):
    buf = ctypes.c_void_p()
    check(lib.fa_buffer_create(ctx.handle, max(arr.nbytes, 16), ctypes.byref(buf)), ctx.handle)
    check(lib.fa_buffer_write(buf, 0, arr.ctypes.data, arr.nbytes), ctx.handle)
    return buf


def time_ms(ctx, n, heads, d, dense, repeat):
    """Median ms of fa_run (and a 4-byte read of O, which waits for it), and the plan's tiles
    as "Br x Bc"; dense None: block-sparse off."""
    p = Problem()
    check(lib.fa_problem_init(ctypes.byref(p), 0, 0, 1, heads, heads, n, n, d))
    rng = np.random.default_rng(1)
    qkv = [rng.standard_normal((heads, n, d), np.float32) for _ in range(3)]
    bufs = {name: buffer(ctx, a) for name, a in zip(("q", "k", "v"), qkv)}
    bufs["o"] = buffer(ctx, np.zeros((heads, n, d), np.float32))
    if dense is not None:
        p.block_sparse, p.sparse_block_q, p.sparse_block_k = 1, BLOCK, BLOCK
        p.sparse_batch = p.sparse_heads = 1
        num, idx = lists_of(dense)
        bufs["kv_num_blocks"], bufs["kv_indices"] = buffer(ctx, num), buffer(ctx, idx)
    plan = ctypes.c_void_p()
    check(lib.fa_plan_create(ctx.handle, ctypes.byref(p), ctypes.byref(plan)), ctx.handle)
    tiles = "%d x %d" % (lib.fa_plan_block_r(plan), lib.fa_plan_block_c(plan))
    tensors = _core.Tensors()
    for name, buf in bufs.items():
        setattr(tensors, name, buf.value)
    word = ctypes.c_float()
    times = []
    for i in range(repeat + 1):  # the first: the kernels' build
        t = time.perf_counter()
        check(lib.fa_run(ctx.handle, plan, ctypes.byref(tensors)), ctx.handle)
        check(lib.fa_buffer_read(bufs["o"], 0, ctypes.byref(word), 4), ctx.handle)
        if i:
            times.append((time.perf_counter() - t) * 1e3)
    lib.fa_plan_destroy(plan)
    for buf in bufs.values():
        lib.fa_buffer_destroy(buf)
    return statistics.median(times), tiles


def masks(blocks, window, density):
    """The sliding window of `window` blocks and a random mask of `density` (diagonal on)."""
    r, c = np.indices((blocks, blocks))
    rng = np.random.default_rng(7)
    rand = (rng.random((blocks, blocks)) < density) | (r == c)
    return [("window %d blocks" % window, (c <= r) & (c > r - window)),
            ("random %.0f%%" % (100 * density), rand)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--seq", default="1024,2048,4096")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--density", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    ctx = _core.context(a.backend, 0)
    print("command: %s" % " ".join(shlex.quote(x) for x in sys.argv))
    print("device: %s (%s), date: %s" % (ctx.props().name.decode(), a.backend,
                                        datetime.date.today().isoformat()))
    print("B1 H%d d%d f32, blocks %dx%d, median of %d runs\n" % (a.heads, a.dim, BLOCK, BLOCK,
                                                                 a.repeat))
    print("| N | mask | density | Br x Bc | ms | x dense time |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in a.seq.split(",")):
        dense_ms, tiles = time_ms(ctx, n, a.heads, a.dim, None, a.repeat)
        print("| %d | dense (off) | 1 | %s | %.2f | 1.00 |" % (n, tiles, dense_ms))
        blocks = (n + BLOCK - 1) // BLOCK
        for name, m in masks(blocks, a.window, a.density):
            ms, tiles = time_ms(ctx, n, a.heads, a.dim, m, a.repeat)
            print("| %d | %s | %.3f | %s | %.2f | %.2f |" % (n, name, m.mean(), tiles, ms,
                                                            ms / dense_ms))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
