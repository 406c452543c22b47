#!/usr/bin/env python3
"""bench_python.py - the Python package's cost, measured three ways, as Markdown tables for
docs/benchmarks.md (with the command, device and date):

  overhead  flash_attn_func on a cached shape (B1 H1 N64 d64 f32, numpy and torch) against the
            library's own time for the same problem (`flashattn run --repeat`, which times
            fa_forward alone): the difference is the Python call's overhead
  run       flash_attn_func against `flashattn run` at B1 H8 N2048 d64 f32 (ratio of medians)
  sdpa      forward and forward+backward of flash_attn_func on torch tensors next to torch's
            CPU scaled_dot_product_attention (its flash kernel on CPU), f32 and bf16

usage: tools/bench_python.py --flashattn build/tools/flashattn [--backend opencl] [--repeat 20]
Run with the venv of scripts/python_env.sh. Timing is not a test: nothing here asserts a speed.
"""
import argparse
import datetime
import re
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np

import flashattn


def median_ms(fn, repeat):
    fn()  # warm-up: the plan, the kernels, the buffers
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def cli_ms(exe, backend, b, h, n, d, repeat):
    cmd = [exe, "run", "--backend", backend, "--batch", str(b), "--heads", str(h), "--seq",
           str(n), "--dim", str(d), "--layout", "bshd", "--repeat", str(repeat)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(re.search(r"^time\s+([0-9.]+) ms", res.stdout, re.M).group(1))


def inputs(b, h, n, d, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, n, h, d)).astype(dtype) for _ in range(3)]


def overhead(exe, backend, repeat, torch):
    rows = ["| input | flash_attn_func (us) | flashattn run (us) | overhead (us) |",
            "|---|---|---|---|"]
    c = cli_ms(exe, backend, 1, 1, 64, 64, repeat * 50) * 1e3
    q, k, v = inputs(1, 1, 64, 64)
    kinds = [("numpy", (q, k, v))]
    if torch is not None:
        kinds.append(("torch", [torch.from_numpy(x) for x in (q, k, v)]))
    for name, (tq, tk, tv) in kinds:
        py = median_ms(lambda: flashattn.flash_attn_func(tq, tk, tv, backend=backend),
                       repeat * 50) * 1e3
        rows.append("| %s | %.1f | %.1f | %.1f |" % (name, py, c, py - c))
    return rows


def versus_run(exe, backend, repeat):
    b, h, n, d = 1, 8, 2048, 64
    q, k, v = inputs(b, h, n, d)
    py = median_ms(lambda: flashattn.flash_attn_func(q, k, v, backend=backend), repeat)
    c = cli_ms(exe, backend, b, h, n, d, repeat)
    return ["| problem | flash_attn_func (ms) | flashattn run (ms) | ratio |", "|---|---|---|---|",
            "| B%d H%d N%d d%d f32 | %.2f | %.2f | %.3f |" % (b, h, n, d, py, c, py / c)]


def versus_sdpa(torch, backend, repeat, n=1024):
    rows = ["| dtype | pass | flashattn (ms) | torch SDPA (ms) | flashattn / SDPA |",
            "|---|---|---|---|---|"]
    F = torch.nn.functional
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.from_numpy(x).to(dtype).requires_grad_() for x in inputs(1, 8, n, 64))
        qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        ours = lambda: flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
        theirs = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        with torch.no_grad():
            f1, f2 = median_ms(ours, repeat), median_ms(theirs, repeat)
        b1 = median_ms(lambda: ours().sum().backward(), repeat)
        b2 = median_ms(lambda: theirs().sum().backward(), repeat)
        name = str(dtype).replace("torch.", "")
        rows.append("| %s | forward | %.2f | %.2f | %.2f |" % (name, f1, f2, f1 / f2))
        rows.append("| %s | forward+backward | %.2f | %.2f | %.2f |" % (name, b1, b2, b1 / b2))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashattn", required=True, help="the CLI, build/tools/flashattn")
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    dev = [d for d in flashattn.devices() if d["backend"] == a.backend][0]["devices"][0]
    print("command: %s" % " ".join(shlex.quote(x) for x in [sys.argv[0]] + sys.argv[1:]))
    print("device: %s backend, %s; torch %s with %s threads" % (
        a.backend, dev["name"], torch.__version__ if torch else "absent",
        torch.get_num_threads() if torch else "-"))
    print("date: %s\n" % datetime.date.today().isoformat())
    print("Per-call overhead, B1 H1 N64 d64 f32, cached shape (median of %d):\n" % (a.repeat * 50))
    print("\n".join(overhead(a.flashattn, a.backend, a.repeat, torch)) + "\n")
    print("flash_attn_func against `flashattn run` (median of %d):\n" % a.repeat)
    print("\n".join(versus_run(a.flashattn, a.backend, a.repeat)) + "\n")
    if torch is not None:
        print("Against torch's CPU SDPA, B1 H8 N1024 d64 causal (median of %d):\n" % a.repeat)
        print("\n".join(versus_sdpa(torch, a.backend, a.repeat)))


if __name__ == "__main__":
    main()
