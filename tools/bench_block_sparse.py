#!/usr/bin/env python3
"""bench_block_sparse.py - block-sparse attention's time against the dense run on one backend,
forward and (--backward) backward, as a Markdown table for docs/benchmarks.md with the command,
device and date. Modes:

  (default)  per sequence length: the dense run, then random block masks at each --densities
             value (the diagonal always on, so no row is empty), each with its target
             1.15 * s * dense + 0.05 * dense (s: the mask's measured density);
  --window   a sliding window of blocks next to the random masks (each query block lists itself
             and the W - 1 key blocks before it);
  --full     causal: the dense causal run, the causal block mask as partial blocks only, and
             with its off-diagonal blocks in the full lists (no element-wise mask there);
  --balance  the same number of blocks with the heavy query blocks (a quarter of them, listing
             every key block; the rest their diagonal) first or last in launch order; with
             --pairs P, the two run alternately P times in one process (wall and CPU time per
             run, and last / first per pair), which a shared machine's load moves less.

usage: PYTHONPATH=python FLASHATTN_LIBRARY=build/libflashattn.so \
       tools/bench_block_sparse.py [--backend opencl] [--seq 4096,8192] [--heads 8] \
       [--block 64] [--densities 1,0.5,0.25,0.1] [--backward] [--full | --balance] [--repeat 3]
       [--cpu-time] [--pairs P]
Timing is not a test: nothing here asserts a speed. Each run of fa_run is timed with a 4-byte
read of an output that waits for it; a block-sparse run also reads its lists back and checks
them on the host (fa__block_sparse_check_run), inside the time. The lists are built here with
numpy in fa_block_lists' layout (int32 [1, 1, rows] counts, [1, 1, rows, cols] indices,
broadcast), the transposed ones from the mask's transpose.
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

MASK_CAUSAL_BOTTOM_RIGHT = 2


def lists_of(mask):
    """Counts and indices (ascending) of a [rows, cols] bool block mask."""
    rows, cols = mask.shape
    num = mask.sum(axis=1).astype(np.int32)
    idx = np.zeros((rows, cols), np.int32)
    for r in range(rows):
        on = np.nonzero(mask[r])[0]
        idx[r, :len(on)] = on
    return num, idx


def buffer(ctx, arr):
    buf = ctypes.c_void_p()
    check(lib.fa_buffer_create(ctx.handle, max(arr.nbytes, 16), ctypes.byref(buf)), ctx.handle)
    check(lib.fa_buffer_write(buf, 0, arr.ctypes.data, arr.nbytes), ctx.handle)
    return buf


def list_buffers(ctx, mask, full):
    """The eight lists of a block mask whose `full` blocks (or none) go to the full lists."""
    part = mask & ~full if full is not None else mask
    names = {"kv_num_blocks": (part, 0), "kv_indices": (part, 1),
             "q_num_blocks": (part.T, 0), "q_indices": (part.T, 1)}
    if full is not None:
        names.update({"full_kv_num_blocks": (full, 0), "full_kv_indices": (full, 1),
                      "full_q_num_blocks": (full.T, 0), "full_q_indices": (full.T, 1)})
    return {n: buffer(ctx, lists_of(np.ascontiguousarray(m))[i]) for n, (m, i) in names.items()}


def timed(ctx, plan, tensors, out, repeat, clock):
    """Median ms of fa_run over `repeat` runs after a warm-up (the kernels' build), by `clock`:
    time.perf_counter (wall) or time.process_time (the CPU time of every thread of the process,
    pocl's workers included, which waiting for a core on a shared machine does not inflate)."""
    word = ctypes.c_float()
    times = []
    for i in range(repeat + 1):
        t = clock()
        check(lib.fa_run(ctx.handle, plan, ctypes.byref(tensors)), ctx.handle)
        check(lib.fa_buffer_read(out, 0, ctypes.byref(word), 4), ctx.handle)
        if i:
            times.append((clock() - t) * 1e3)
    return statistics.median(times)


def tensors_of(bufs, backward):
    """fa_tensors of the forward (Q, K, V, O, LSE, the forward's lists) or the backward (all)."""
    t = _core.Tensors()
    for name, buf in bufs.items():
        if backward or name in ("q", "k", "v", "o", "lse") or name.startswith(("kv_", "full_kv")):
            setattr(t, name, buf.value)
    return t


def make_plan(ctx, p, backward):
    plan = ctypes.c_void_p()
    create = lib.fa_plan_create_backward if backward else lib.fa_plan_create
    check(create(ctx.handle, ctypes.byref(p), ctypes.byref(plan)), ctx.handle)
    return plan


def run_case(ctx, a, n, mask, full=None, causal=False):
    """(forward ms, backward ms or None, "Br x Bc") of one problem; mask None: dense."""
    p = Problem()
    check(lib.fa_problem_init(ctypes.byref(p), 0, 0, 1, a.heads, a.heads, n, n, a.dim))
    if causal:
        p.mask = MASK_CAUSAL_BOTTOM_RIGHT
    rng = np.random.default_rng(1)
    shape = (a.heads, n, a.dim)
    bufs = {name: buffer(ctx, rng.standard_normal(shape, np.float32))
            for name in ("q", "k", "v", "d_o")}
    for name in ("o", "dq", "dk", "dv"):
        bufs[name] = buffer(ctx, np.zeros(shape, np.float32))
    bufs["lse"] = buffer(ctx, np.zeros((a.heads, n), np.float32))
    if mask is not None:
        p.block_sparse, p.sparse_block_q, p.sparse_block_k = 1, a.block, a.block
        p.sparse_batch = p.sparse_heads = 1
        p.sparse_full = int(full is not None)
        bufs.update(list_buffers(ctx, mask, full))
    fwd = make_plan(ctx, p, False)
    tiles = "%d x %d" % (lib.fa_plan_block_r(fwd), lib.fa_plan_block_c(fwd))
    fwd_ms = timed(ctx, fwd, tensors_of(bufs, False), bufs["o"], a.repeat, a.clock)
    lib.fa_plan_destroy(fwd)
    bwd_ms = None
    if a.backward:
        bwd = make_plan(ctx, p, True)
        bwd_ms = timed(ctx, bwd, tensors_of(bufs, True), bufs["dq"], a.repeat, a.clock)
        lib.fa_plan_destroy(bwd)
    for buf in bufs.values():
        lib.fa_buffer_destroy(buf)
    return fwd_ms, bwd_ms, tiles


def random_mask(blocks, density):
    r, c = np.indices((blocks, blocks))
    return (np.random.default_rng(7).random((blocks, blocks)) < density) | (r == c)


def cases(a, blocks):
    """(name, mask, full, causal) of the mode's block-sparse runs."""
    r, c = np.indices((blocks, blocks))
    if a.full:
        lower = c <= r
        return [("causal blocks, no full lists", lower, None, True),
                ("causal blocks, off-diagonal full", lower, c < r, True)]
    if a.balance:
        heavy = blocks // 4
        first = (r < heavy) | (r == c)
        last = (r >= blocks - heavy) | (r == c)
        return [("heavy query blocks first", first, None, False),
                ("heavy query blocks last", last, None, False)]
    out = [("random %g" % s, random_mask(blocks, s), None, False) for s in a.densities]
    if a.window:
        out.append(("window %d blocks" % a.window, (c <= r) & (c > r - a.window), None, False))
    return out


def balance_pairs(ctx, a, n):
    """--balance --pairs: the heavy-first and heavy-last masks run alternately, each run timed
    by wall and CPU clock; medians, and the median and quartiles of last / first per pair."""
    blocks = (n + a.block - 1) // a.block
    runs = [(name, mask) for name, mask, _, _ in cases(a, blocks)]
    p = Problem()
    check(lib.fa_problem_init(ctypes.byref(p), 0, 0, 1, a.heads, a.heads, n, n, a.dim))
    p.block_sparse, p.sparse_block_q, p.sparse_block_k = 1, a.block, a.block
    p.sparse_batch = p.sparse_heads = 1
    rng = np.random.default_rng(1)
    shape = (a.heads, n, a.dim)
    bufs = {name: buffer(ctx, rng.standard_normal(shape, np.float32)) for name in "qkv"}
    bufs["o"] = buffer(ctx, np.zeros(shape, np.float32))
    bufs["lse"] = buffer(ctx, np.zeros((a.heads, n), np.float32))
    lists = [list_buffers(ctx, mask, None) for _, mask in runs]
    plans = [make_plan(ctx, p, False) for _ in runs]
    word = ctypes.c_float()
    wall, cpu = [[] for _ in runs], [[] for _ in runs]
    for i in range(a.pairs + 1):
        for r, (plan, lb) in enumerate(zip(plans, lists)):
            t = tensors_of({**bufs, **lb}, False)
            w0, c0 = time.perf_counter(), time.process_time()
            check(lib.fa_run(ctx.handle, plan, ctypes.byref(t)), ctx.handle)
            check(lib.fa_buffer_read(bufs["o"], 0, ctypes.byref(word), 4), ctx.handle)
            if i:  # the first pair builds the kernels
                wall[r].append((time.perf_counter() - w0) * 1e3)
                cpu[r].append((time.process_time() - c0) * 1e3)
    print("| N | mask | wall ms | CPU ms |\n|---|---|---|---|")
    for r, (name, _) in enumerate(runs):
        print("| %d | %s | %.1f | %.1f |" % (n, name, statistics.median(wall[r]),
                                             statistics.median(cpu[r])))
    ratios = [last / first for first, last in zip(wall[0], wall[1])]
    print("\nlast / first wall time per pair (%d pairs): median %.3f, quartiles %s" % (
        a.pairs, statistics.median(ratios),
        ", ".join("%.3f" % q for q in statistics.quantiles(ratios, n=4))))
    for plan in plans:
        lib.fa_plan_destroy(plan)
    for buf in [*bufs.values(), *(b for lb in lists for b in lb.values())]:
        lib.fa_buffer_destroy(buf)


def cell(ms, dense_ms, density):
    """ms, x dense, and the target's ratio 1.15 s + 0.05 (density None: no target)."""
    if ms is None:
        return "| | |"
    target = "" if density is None else " (target %.2f)" % (1.15 * density + 0.05)
    return "| %.1f | %.2f%s |" % (ms, ms / dense_ms, target)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--seq", default="4096")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--densities", default="1,0.5,0.25,0.1")
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--balance", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu-time", action="store_true",
                    help="the process's CPU time per run instead of wall time")
    ap.add_argument("--pairs", type=int, default=0,
                    help="--balance: the two masks alternately, this many times")
    a = ap.parse_args()
    a.clock = time.process_time if a.cpu_time else time.perf_counter
    a.densities = [float(x) for x in a.densities.split(",") if x]  # none: the dense run only
    ctx = _core.context(a.backend, 0)
    print("command: %s" % " ".join(shlex.quote(x) for x in sys.argv))
    print("device: %s (%s), date: %s" % (ctx.props().name.decode(), a.backend,
                                        datetime.date.today().isoformat()))
    print("B1 H%d d%d f32, blocks %dx%d, median of %d runs, %s ms\n" % (
        a.heads, a.dim, a.block, a.block, a.repeat, "CPU" if a.cpu_time else "wall"))
    if a.balance and a.pairs:
        for n in (int(x) for x in a.seq.split(",")):
            balance_pairs(ctx, a, n)
        return
    print("| N | mask | density | fwd Br x Bc | fwd ms | x dense | bwd ms | x dense |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in a.seq.split(",")):
        f_ms, b_ms, tiles = run_case(ctx, a, n, None, causal=a.full)
        dense = (f_ms, b_ms)
        print("| %d | dense%s (off) | 1 | %s %s %s" % (n, " causal" if a.full else "", tiles,
                                                      cell(f_ms, f_ms, None),
                                                      cell(b_ms, b_ms, None)[2:]))
        sys.stdout.flush()
        blocks = (n + a.block - 1) // a.block
        for name, mask, full, causal in cases(a, blocks):
            f_ms, b_ms, tiles = run_case(ctx, a, n, mask, full, causal)
            s = None if a.full or a.balance else float(mask.mean())
            print("| %d | %s | %.3f | %s %s %s" % (
                n, name, mask.mean(), tiles, cell(f_ms, dense[0], s),
                cell(b_ms, dense[1], s)[2:] if b_ms is not None else "| |"))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
