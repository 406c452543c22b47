#!/usr/bin/env python3
"""bench_cpu.py - our OpenCL forward and backward on a CPU (pocl) against PyTorch's CPU SDPA.

For each case (B1 H8; fwd or bwd, N, d, dtype, causal or not) it times, alternated round by
round so a busy machine slows every column alike:
  new    `flashattn run --backend opencl --repeat R` (the CLI's median of R after a warm-up:
         fa_forward, or fa_backward with --backward)
  base   the same with another build's binary (--base, e.g. one copied before a change); a
         column of "-" without it
  torch  torch.nn.functional.scaled_dot_product_attention under SDPBackend.FLASH_ATTENTION
         (its CPU flash kernel) on torch.set_num_threads(--threads), median of R after a
         warm-up; the backward times out.backward(dO) alone after an untimed forward
and prints a Markdown table of the medians over --rounds rounds: ms, GFLOP/s (4*B*H*N*N*d, half
causal; the backward 2.5x that) and new/torch speed (torch ms / new ms, > 1: faster than torch),
with the host's f32 FMA peak (tools/fma_peak.c, built here with cc -O2 -march=native, on the same
number of threads), the command, the device, the versions, the load average and the date.

usage: tools/bench_cpu.py [--flashattn build/tools/flashattn] [--base OLD_BINARY]
                          [--rounds 3] [--repeat 3] [--threads 2] [--cases fwd,bwd,bf16,...]
Timing is not a test: nothing here asserts a speed.
"""
import argparse
import datetime
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

BATCH, HEADS = 1, 8
RUN_TIMEOUT_S = 600
HERE = os.path.dirname(os.path.abspath(__file__))

# (op, N, d, dtype, causal): the table (issue 35)
CASES = [
    ("fwd", 2048, 64, "f32", False),
    ("fwd", 2048, 64, "f32", True),
    ("fwd", 2048, 128, "f32", False),
    ("fwd", 2048, 128, "f32", True),
    ("fwd", 4096, 64, "f32", False),
    ("fwd", 4096, 64, "f32", True),
    ("fwd", 4096, 128, "f32", False),
    ("fwd", 4096, 128, "f32", True),
    ("fwd", 2048, 64, "bf16", False),
    ("fwd", 2048, 64, "bf16", True),
    ("fwd", 2048, 128, "bf16", False),
    ("fwd", 4096, 64, "bf16", True),
    ("bwd", 2048, 64, "f32", False),
    ("bwd", 2048, 64, "f32", True),
    ("bwd", 2048, 128, "f32", False),
    ("bwd", 4096, 64, "f32", True),
    ("bwd", 2048, 64, "bf16", False),
    ("bwd", 2048, 128, "bf16", True),
]


def case_name(c):
    op, n, d, dt, causal = c
    return f"{op} N{n} d{d} {dt}" + (" causal" if causal else "")


def flops(c):
    op, n, d, _, causal = c
    f = 4.0 * BATCH * HEADS * n * n * d * (0.5 if causal else 1.0)
    return f * 2.5 if op == "bwd" else f


def run_ours(exe, c, repeat):
    """ms of the CLI's median, or None (the reason on stderr)."""
    op, n, d, dt, causal = c
    cmd = [exe, "run", "--backend", "opencl", "--batch", str(BATCH), "--heads", str(HEADS),
           "--seq", str(n), "--dim", str(d), "--dtype", dt, "--repeat", str(repeat)]
    if causal:
        cmd += ["--causal", "top-left"]
    if op == "bwd":
        cmd.append("--backward")
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"timed out: {shlex.join(cmd)}", file=sys.stderr)
        return None
    key = "bwd time" if op == "bwd" else "time"
    for line in res.stdout.splitlines():
        m = re.match(rf"{key}\s+([0-9.]+) ms", line)
        if m:
            return float(m.group(1))
    print(f"no time from {shlex.join(cmd)}:\n{res.stdout}{res.stderr}", file=sys.stderr)
    return None


def run_torch(torch, c, repeat):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    op, n, d, dt, causal = c
    dtype = torch.float32 if dt == "f32" else torch.bfloat16
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.rand(BATCH, HEADS, n, d, generator=gen, dtype=dtype) * 2 - 1
               for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    times = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for i in range(repeat + 1):
            if op == "fwd":
                t0 = time.perf_counter()
                with torch.no_grad():
                    sdpa(q, k, v, is_causal=causal)
                t = time.perf_counter() - t0
            else:
                qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                out = sdpa(qg, kg, vg, is_causal=causal)
                do = torch.ones_like(out)
                t0 = time.perf_counter()
                out.backward(do)
                t = time.perf_counter() - t0
            if i > 0:  # the first is the warm-up
                times.append(t * 1e3)
    return statistics.median(times)


def fma_peak(threads):
    exe = os.path.join("/tmp", f"fma_peak_{os.getpid()}")
    subprocess.run(["cc", "-O2", "-march=native", "-pthread", os.path.join(HERE, "fma_peak.c"),
                    "-o", exe], check=True)
    try:
        out = subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True)
        return float(out.stdout.strip())
    finally:
        os.remove(exe)


def device_line(exe):
    res = subprocess.run([exe, "devices", "--backend", "opencl"], capture_output=True, text=True)
    for line in res.stdout.splitlines():
        m = re.match(r"\s+device 0:\s*(.*)", line)
        if m:
            return m.group(1).strip()
    return platform.processor() or "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashattn", default="build/tools/flashattn")
    ap.add_argument("--base", help="another flashattn binary for a before column")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", help="substrings: a case runs when its name holds one "
                    "(e.g. 'fwd N2048,bwd')")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    cases = CASES
    if args.cases:
        wanted = args.cases.split(",")
        cases = [c for c in CASES if any(w in case_name(c) for w in wanted)]
    impls = [("new", lambda c: run_ours(args.flashattn, c, args.repeat))]
    if args.base:
        impls.append(("base", lambda c: run_ours(args.base, c, args.repeat)))
    impls.append(("torch", lambda c: run_torch(torch, c, args.repeat)))
    times = {(case_name(c), name): [] for c in cases for name, _ in impls}
    load0 = os.getloadavg()[0]
    peak = fma_peak(args.threads)
    for r in range(args.rounds):
        for c in cases:
            order = impls if r % 2 == 0 else impls[::-1]  # alternate who goes first
            for name, fn in order:
                t = fn(c)
                if t is not None:
                    times[(case_name(c), name)].append(t)
    peak_after = fma_peak(args.threads)
    load1 = os.getloadavg()[0]

    print(f"command: {shlex.join([sys.argv[0]] + sys.argv[1:])}")
    print(f"device: {device_line(args.flashattn)} ({cpu_model()}, {os.cpu_count()} cpus)")
    print(f"versions: torch {torch.__version__}, python {platform.python_version()}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(f"load average (1 min): {load0:.2f} before, {load1:.2f} after")
    print(f"f32 FMA peak ({args.threads} threads, tools/fma_peak.c): {peak:.0f} GFLOP/s before, "
          f"{peak_after:.0f} after")
    print(f"medians of {args.rounds} alternated rounds, each the median of {args.repeat} runs; "
          f"B{BATCH} H{HEADS}, ms (GFLOP/s, % of the peak)\n")
    names = [n for n, _ in impls]
    head = "| case | " + " | ".join(names) + " | new / torch speed |"
    if args.base:
        head += " new / base speed |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    best_peak = max(peak, peak_after)
    for c in cases:
        med = {}
        cells = []
        for n in names:
            ts = times[(case_name(c), n)]
            med[n] = statistics.median(ts) if ts else None
            if med[n] is None:
                cells.append("-")
            else:
                g = flops(c) / med[n] * 1e-6
                cells.append(f"{med[n]:.1f} ({g:.0f}, {100 * g / best_peak:.0f}%)")
        row = f"| {case_name(c)} | " + " | ".join(cells)
        ratio = med["torch"] / med["new"] if med["new"] and med["torch"] else None
        row += f" | {fmt(ratio, '.2f')}x |"
        if args.base:
            rb = med["base"] / med["new"] if med["new"] and med["base"] else None
            row += f" {fmt(rb, '.2f')}x |"
        print(row)


if __name__ == "__main__":
    main()
