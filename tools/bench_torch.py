#!/usr/bin/env python3
"""bench_torch.py - our CUDA (and OpenCL) forward against PyTorch on the same GPU, side by side.

For f16 and bf16, batch 4, 16 heads, head dim 64 and 128, seq 512..16384, causal and not, it
times:
  cuda       `flashattn run --backend cuda --repeat N` (median of N after a warm-up; the CLI
             reports the time of fa_forward and the context's peak device memory)
  opencl     the same with `--backend opencl --device K`, K the first OpenCL device that
             `flashattn devices` calls a GPU (the NVIDIA OpenCL driver); a column of "-" when
             there is none
  sdpa-flash torch.nn.functional.scaled_dot_product_attention under the flash backend
  naive      softmax(Q K^T * scale) V materialized (matmul, f32 softmax, matmul)
and prints TFLOP/s (4*B*H*S*S*d, half for causal) and peak memory per implementation, and cuda's
TFLOP/s over sdpa-flash's (issue 15's target: >= 1.0 at seq >= 2048, >= 0.8 at 512), with the
device name, the command and the date: a Markdown table for docs/benchmarks.md.

With --backward it times the backward too (ours: the CLI's `bwd time`; torch: the gradients
of SDPA's output, the graph kept between runs) at 2.5x the forward's FLOPs, as FlashAttention
counts them.

usage: tools/bench_torch.py --flashattn build/tools/flashattn [--repeat 20] [--max-seq 16384]
                            [--seqs 512,2048,8192] [--dtypes f16,bf16] [--dims 64,128]
                            [--backward] [--no-naive] [--no-opencl]
(--seqs, --dtypes and --dims split the table between calls of a limited length.)
Needs PyTorch with CUDA. Timing is not a test: nothing here asserts a speed.
"""
import argparse
import datetime
import re
import shlex
import subprocess
import sys

BATCH, HEADS = 4, 16
RUN_TIMEOUT_S = 300  # one flashattn run; a hung one is reported, not waited for


def flops(seq, dim, causal):
    f = 4.0 * BATCH * HEADS * seq * seq * dim
    return f / 2 if causal else f


def opencl_gpu(exe):
    """The index of the first OpenCL device `flashattn devices` calls a GPU, or None."""
    try:
        res = subprocess.run([exe, "devices", "--backend", "opencl"], capture_output=True,
                             text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    index = None
    for line in res.stdout.splitlines():
        m = re.match(r"\s+device (\d+):", line)
        if m:
            index = int(m.group(1))
        elif index is not None and re.match(r"\s+type\s+GPU", line):
            return index
    return None


def run_ours(exe, backend, device, dtype, seq, dim, causal, repeat, backward=False):
    """(ms, peak bytes) from the CLI's output (the backward's with backward), or (None, reason).
    """
    cmd = [exe, "run", "--backend", backend, "--device", str(device), "--batch", str(BATCH),
           "--heads", str(HEADS), "--seq", str(seq), "--dim", str(dim), "--dtype", dtype,
           "--repeat", str(repeat)]
    if causal:
        cmd += ["--causal", "top-left"]  # torch's is_causal is top-left aligned
    if backward:
        cmd += ["--backward"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "timeout %d s" % RUN_TIMEOUT_S
    if res.returncode != 0:
        return None, (res.stderr.strip() or "exit %d" % res.returncode)[:60]
    t = re.search(r"^%s\s+([0-9.]+) ms" % ("bwd time" if backward else "time"), res.stdout,
                  re.M)
    m = re.search(r"^peak memory\s+([0-9]+) B", res.stdout, re.M)
    if not t:
        return None, "no time in output"
    return float(t.group(1)), int(m.group(1)) if m else 0


def time_torch(torch, fn, repeat):
    """Median ms of fn() over `repeat` runs after one warm-up, and the peak bytes allocated."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2], torch.cuda.max_memory_allocated()


def run_torch(torch, kind, dtype, seq, dim, causal, repeat):
    import torch.nn.functional as F
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    torch.cuda.empty_cache()
    try:
        q, k, v = ((torch.rand(BATCH, HEADS, seq, dim, device="cuda", dtype=dt) * 2 - 1)
                   .requires_grad_(kind == "sdpa-flash-bwd") for _ in range(3))
        scale = dim ** -0.5
        if kind == "sdpa-flash-bwd":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            dout = torch.rand_like(out)

            def fn():
                return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        elif kind == "sdpa-flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def fn():
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            mask = None
            if causal:
                mask = torch.ones(seq, seq, device="cuda", dtype=torch.bool).triu(1)

            def fn():
                s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
                if mask is not None:
                    s = s.masked_fill(mask, float("-inf"))
                return torch.matmul(torch.softmax(s, dim=-1).to(dt), v)
        return time_torch(torch, fn, repeat)
    except torch.cuda.OutOfMemoryError:
        return None, "OOM"
    except RuntimeError as e:  # e.g. no flash kernel for this dtype / GPU
        return None, str(e).splitlines()[0][:60]
    finally:
        q = k = v = out = dout = None
        torch.cuda.empty_cache()


def cell(result, f):
    ms, extra = result
    if ms is None:
        return "%s | -" % extra
    return "%.1f | %.0f MiB" % (f / (ms * 1e-3) / 1e12, extra / 2**20)


def ratio(ours, theirs):
    """ours' TFLOP/s over theirs' (their time over ours), or "-"."""
    if ours[0] is None or theirs[0] is None:
        return "-"
    return "%.2fx" % (theirs[0] / ours[0])


def header(args, cl_device, torch):
    print("# flashattn vs PyTorch on %s" % torch.cuda.get_device_name(0))
    print()
    print("- command: `%s`" % " ".join(shlex.quote(a) for a in sys.argv))
    now = datetime.datetime.now(datetime.timezone.utc)
    print("- date: %s" % now.strftime("%Y-%m-%d %H:%M UTC"))
    print("- torch %s, CUDA %s, batch %d, heads %d; TFLOP/s = 4*B*H*S*S*d (half for causal) / "
          "time, 2.5x that for the backward; peak = device memory at its highest (inputs and "
          "outputs included)" % (torch.__version__, torch.version.cuda, BATCH, HEADS))
    print("- opencl: %s" % ("device %d of `flashattn devices --backend opencl`" % cl_device
                             if cl_device is not None else "no OpenCL GPU device (or --no-opencl)"))
    print()
    cols = ["dtype", "d", "seq", "causal", "cuda TFLOP/s", "peak", "cuda / sdpa",
            "opencl TFLOP/s", "peak", "sdpa-flash TFLOP/s", "peak", "naive TFLOP/s", "peak"]
    if args.backward:
        cols += ["cuda bwd TFLOP/s", "peak", "cuda / sdpa bwd", "sdpa-flash bwd TFLOP/s", "peak"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))


def row(args, torch, cl_device, dtype, dim, seq, causal):
    f = flops(seq, dim, causal)
    ours = run_ours(args.flashattn, "cuda", 0, dtype, seq, dim, causal, args.repeat)
    cl = (None, "-") if cl_device is None else run_ours(
        args.flashattn, "opencl", cl_device, dtype, seq, dim, causal, args.repeat)
    sdpa = run_torch(torch, "sdpa-flash", dtype, seq, dim, causal, args.repeat)
    naive = (None, "-") if args.no_naive else run_torch(torch, "naive", dtype, seq, dim, causal,
                                                         args.repeat)
    cells = [dtype, str(dim), str(seq), "yes" if causal else "no", cell(ours, f),
             ratio(ours, sdpa), cell(cl, f), cell(sdpa, f), cell(naive, f)]
    if args.backward:
        ours_b = run_ours(args.flashattn, "cuda", 0, dtype, seq, dim, causal, args.repeat,
                          backward=True)
        sdpa_b = run_torch(torch, "sdpa-flash-bwd", dtype, seq, dim, causal, args.repeat)
        cells += [cell(ours_b, 2.5 * f), ratio(ours_b, sdpa_b), cell(sdpa_b, 2.5 * f)]
    print("| " + " | ".join(cells) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashattn", required=True, help="path to the flashattn program")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--max-seq", type=int, default=16384)
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--backward", action="store_true", help="time the backward too")
    ap.add_argument("--no-naive", action="store_true", help="leave the naive column out")
    ap.add_argument("--no-opencl", action="store_true", help="leave the opencl column out")
    args = ap.parse_args()
    cl_device = None if args.no_opencl else opencl_gpu(args.flashattn)
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_torch.py: PyTorch sees no CUDA device")
    header(args, cl_device, torch)
    seqs = [int(s) for s in args.seqs.split(",") if int(s) <= args.max_seq]
    for dtype in args.dtypes.split(","):
        for dim in (int(d) for d in args.dims.split(",")):
            for seq in seqs:
                for causal in (False, True):
                    row(args, torch, cl_device, dtype, dim, seq, causal)


if __name__ == "__main__":
    main()
