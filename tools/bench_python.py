#!/usr/bin/env python3
"""bench_python.py - the Python package's cost, measured three ways, as Markdown tables for
docs/benchmarks.md (with the command, device and date):

  overhead  flash_attn_func on a cached shape (B1 H1 N64 d64 f32, numpy and torch) against the
            library called the same way from ctypes (new out and lse wrapped per call, fa_run:
            the difference is the Python layer's own), against fa_run on host arrays wrapped
            once, and against `flashattn run --repeat` (fa_forward alone on device buffers);
            the calls take turns, call by call
  layer     the Python layer alone: the same calls with fa_run replaced by a no-op
  dropout   calls with dropout (one seed, a new seed each call) next to one without
  run       flash_attn_func against `flashattn run` at B1 H8 N2048 d64 f32, in alternated
            rounds (the machine is shared: each round runs both), the median of the rounds'
            medians and their ratio; the load average before and after; and the CPU time per
            call (user + system of the process and its pocl threads, getrusage), which other
            jobs on a shared machine disturb far less than the wall time
  sdpa      forward and forward+backward of flash_attn_func on torch tensors next to torch's
            CPU scaled_dot_product_attention (its flash kernel on CPU), f32 and bf16

usage: tools/bench_python.py --flashattn build/tools/flashattn [--backend opencl] [--repeat 20]
Run with the venv of scripts/python_env.sh. Timing is not a test: nothing here asserts a speed.
"""
import argparse
import ctypes
import datetime
import os
import re
import resource
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


def cpu_s(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def cli_cpu_ms(exe, backend, b, h, n, d, repeat):
    """CPU ms of one `flashattn run` forward: the CLI's CPU time at repeat and at 1 (its start,
    plan and warm-up), the difference over the extra runs."""
    spent = []
    for r in (1, repeat + 1):
        before = cpu_s(resource.RUSAGE_CHILDREN)
        cli_ms(exe, backend, b, h, n, d, r)
        spent.append(cpu_s(resource.RUSAGE_CHILDREN) - before)
    return (spent[1] - spent[0]) / repeat * 1e3


def py_cpu_ms(fn, repeat):
    fn()
    before = cpu_s(resource.RUSAGE_SELF)
    for _ in range(repeat):
        fn()
    return (cpu_s(resource.RUSAGE_SELF) - before) / repeat * 1e3


def inputs(b, h, n, d, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, n, h, d)).astype(dtype) for _ in range(3)]


def c_calls(backend, q, k, v):
    """fa_run from ctypes on host arrays, two ways, as closures (and a cleanup):
    once  q, k, v, out and lse wrapped once, fa_run alone (a C caller keeping its buffers)
    same  what the package does in C per call: new out and lse arrays wrapped, fa_run, both
          wraps destroyed (the wraps of q, k and v kept, as the package keeps them)"""
    from flashattn import _core
    from flashattn._lib import Tensors, c_vp, lib
    flashattn.flash_attn_func(q, k, v, backend=backend)
    ctx = _core.context(backend, 0)
    out, lse = np.empty_like(q), np.empty((1, q.shape[2], q.shape[1]), np.float32)
    plan = ctx.plan("forward", _core.make_spec(
        dtype="f32", batch=1, heads_q=q.shape[2], heads_kv=k.shape[2], seqlen_q=q.shape[1],
        seqlen_k=k.shape[1], head_dim=q.shape[3], layouts=tuple(sorted(
            (n, ("bshd", tuple(s // 4 if d > 1 else 0 for s, d in zip(x.strides[:3],
                                                                      x.shape[:3]))))
            for n, x in (("q", q), ("k", k), ("v", v), ("o", out))))))
    tensors, tref, buf = Tensors(), None, c_vp()
    tref, bref, h = ctypes.byref(tensors), ctypes.byref(buf), ctx.handle

    def wrap(x):
        assert lib.fa_buffer_wrap_host(h, x.ctypes.data, x.nbytes, bref) == 0
        return buf.value
    kept = [wrap(x) for x in (q, k, v, out, lse)]
    tensors.q, tensors.k, tensors.v = kept[:3]

    def once():
        tensors.o, tensors.lse = kept[3:]
        assert lib.fa_run(h, plan.handle, tref) == 0

    def same():
        o, l = np.empty_like(q), np.empty((1, q.shape[2], q.shape[1]), np.float32)
        tensors.o, tensors.lse = wrap(o), wrap(l)
        assert lib.fa_run(h, plan.handle, tref) == 0
        lib.fa_buffer_destroy(tensors.o)
        lib.fa_buffer_destroy(tensors.lse)
    return once, same, lambda: [lib.fa_buffer_destroy(b) for b in kept]


def interleaved_us(calls, repeat):
    """Median microseconds of each call, the calls taking turns call by call (a shared
    machine's load drifts alike for all of them)."""
    times = {name: [] for name in calls}
    for fn in calls.values():
        for _ in range(100):
            fn()
    for _ in range(repeat):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def overhead(exe, backend, repeat, torch):
    """flash_attn_func on numpy arrays and torch tensors (each its own memory) against the
    library called the same way from ctypes (c_calls' same) and kept buffers (once)."""
    c = cli_ms(exe, backend, 1, 1, 64, 64, repeat) * 1e3
    q, k, v = inputs(1, 1, 64, 64)
    once, same, cleanup = c_calls(backend, q, k, v)
    qn, kn, vn = (x.copy() for x in (q, k, v))
    calls = {"C, out and lse wrapped once": once, "C, called as the package calls it": same,
             "numpy": lambda: flashattn.flash_attn_func(qn, kn, vn, backend=backend)}
    if torch is not None:
        qt, kt, vt = (torch.from_numpy(x.copy()) for x in (q, k, v))
        calls["torch"] = lambda: flashattn.flash_attn_func(qt, kt, vt, backend=backend)
    load = os.getloadavg()[0]
    us = interleaved_us(calls, repeat)
    cleanup()
    rows = ["| call | median (us) | over C as the package (us) | over C, wrapped once (us) | "
            "over `flashattn run` (us) |", "|---|---|---|---|---|"]
    base, kept = us["C, called as the package calls it"], us["C, out and lse wrapped once"]
    for name, t in us.items():
        rows.append("| %s | %.1f | %.1f | %.1f | %.1f |" % (name, t, t - base, t - kept, t - c))
    rows.append("| `flashattn run --repeat %d` (device buffers) | %.1f | | | |" % (repeat, c))
    rows.append("\nload average %.1f before, %.1f after (1 minute)" % (load, os.getloadavg()[0]))
    return rows


def layer(backend, torch, rounds=40, calls=500):
    """The Python layer alone: flash_attn_func on a cached shape with the library's fa_run
    replaced by a C call that does nothing (getpid), so what is timed is Python, ctypes and
    the C calls the package makes around the run (the output wraps). The fastest of many short
    rounds: other jobs on a shared machine only ever add time."""
    from flashattn import _core

    class NoRun:
        def __init__(self, lib):
            self.lib, self.getpid = lib, ctypes.CDLL(None).getpid

        def __getattr__(self, name):
            return getattr(self.lib, name)

        def fa_run(self, ctx, plan, tensors):
            return self.getpid() * 0
    q, k, v = inputs(1, 1, 64, 64)
    kinds = {"numpy": (q, k, v)}
    if torch is not None:
        kinds["torch"] = tuple(torch.from_numpy(x.copy()) for x in (q, k, v))
    for args in kinds.values():
        flashattn.flash_attn_func(*args, backend=backend)  # plan and prepare with the real run
    real, _core.lib = _core.lib, NoRun(_core.lib)
    best = {name: float("inf") for name in kinds}
    try:
        for _ in range(rounds):
            for name, args in kinds.items():
                t = time.perf_counter()
                for _ in range(calls):
                    flashattn.flash_attn_func(*args, backend=backend)
                best[name] = min(best[name], (time.perf_counter() - t) / calls * 1e6)
    finally:
        _core.lib = real
    return ["| %s | %.1f |" % (name, us) for name, us in best.items()]


def dropout(backend, repeat):
    """A cached shape (B1 H1 N64 d64 f32, numpy) with dropout 0.1 against the same call without:
    one seed every call, and a new seed every call (as a training loop draws them); the three
    calls take turns, call by call."""
    q, k, v = inputs(1, 1, 64, 64)
    step = iter(range(1 << 62))
    f = flashattn.flash_attn_func
    us = interleaved_us({
        "no dropout": lambda: f(q, k, v, backend=backend),
        "dropout 0.1, one seed": lambda: f(q, k, v, dropout_p=0.1, seed=1, backend=backend),
        "dropout 0.1, a new seed each call": lambda: f(q, k, v, dropout_p=0.1,
                                                       seed=next(step), backend=backend)},
        repeat)
    return ["| %s | %.1f |" % item for item in us.items()]


def versus_run(exe, backend, repeat, rounds):
    """Alternated rounds of `flashattn run --repeat` and flash_attn_func (each repeat times):
    every round's pair, then the medians of the rounds and their ratio."""
    b, h, n, d = 1, 8, 2048, 64
    q, k, v = inputs(b, h, n, d)
    load = os.getloadavg()[0]
    rows = ["| round | flash_attn_func (ms) | flashattn run (ms) | ratio | flash_attn_func CPU "
            "(ms) | flashattn run CPU (ms) | CPU ratio |", "|---|---|---|---|---|---|---|"]
    pys, cs, pycpu, ccpu = [], [], [], []
    call = lambda: flashattn.flash_attn_func(q, k, v, backend=backend)
    for r in range(rounds):
        cs.append(cli_ms(exe, backend, b, h, n, d, repeat))
        pys.append(median_ms(call, repeat))
        ccpu.append(cli_cpu_ms(exe, backend, b, h, n, d, repeat))
        pycpu.append(py_cpu_ms(call, repeat))
        rows.append("| %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f |"
                    % (r + 1, pys[-1], cs[-1], pys[-1] / cs[-1], pycpu[-1], ccpu[-1],
                       pycpu[-1] / ccpu[-1]))
    py, c = statistics.median(pys), statistics.median(cs)
    pc, cc = statistics.median(pycpu), statistics.median(ccpu)
    rows.append("| median | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f |"
                % (py, c, py / c, pc, cc, pc / cc))
    rows.append("\nB%d H%d N%d d%d f32; load average %.1f before, %.1f after (1 minute)"
                % (b, h, n, d, load, os.getloadavg()[0]))
    return rows


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
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds at N2048")
    ap.add_argument("--only", choices=("overhead", "layer", "dropout", "run", "sdpa"),
                    help="one table alone")
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
    if a.only in (None, "overhead"):
        print("Per-call overhead, B1 H1 N64 d64 f32, cached shape (median of %d calls each, "
              "the calls taking turns):\n" % (a.repeat * 500))
        print("\n".join(overhead(a.flashattn, a.backend, a.repeat * 500, torch)) + "\n")
    if a.only in (None, "layer"):
        print("The Python layer alone (fa_run a no-op), B1 H1 N64 d64 f32, fastest of 40 "
              "rounds of 500 calls:\n\n| input | us per call |\n|---|---|")
        print("\n".join(layer(a.backend, torch)) + "\n")
    if a.only in (None, "dropout"):
        print("Dropout calls, B1 H1 N64 d64 f32 numpy (median of %d calls each, the calls "
              "taking turns):\n\n| call | us |\n|---|---|" % (a.repeat * 100))
        print("\n".join(dropout(a.backend, a.repeat * 100)) + "\n")
    if a.only in (None, "run"):
        print("flash_attn_func against `flashattn run`, %d alternated rounds (median of %d "
              "each):\n" % (a.rounds, a.repeat))
        print("\n".join(versus_run(a.flashattn, a.backend, a.repeat, a.rounds)) + "\n")
    if torch is not None and a.only in (None, "sdpa"):
        print("Against torch's CPU SDPA, B1 H8 N1024 d64 causal (median of %d):\n" % a.repeat)
        print("\n".join(versus_sdpa(torch, a.backend, a.repeat)))


if __name__ == "__main__":
    main()
