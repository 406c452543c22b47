#!/usr/bin/env python3
"""bench_modifiers.py - what each score modifier and dropout costs over the plain forward.

Runs `flashattn run` on one shape (default B1 H8 N2048 d64 f32, backend opencl) plain and with
each variant: softcap 30, ALiBi, bias random [1, 1, N, N], window -1,-1, sinks random,
dropout 0.1 and window 256,0. Alone it tables one build; with --base it compares the build
against an older binary, alternated case by case and round by round so that a busy machine
slows every column alike. Two measures per run:
  wall  the CLI's own median of --repeat runs after a warm-up (ms)
  cpu   the process's CPU time (user + system) per forward: that of a run with --repeat R + 1
        minus that of a run with --repeat 1, over R; waiting for a core does not inflate it,
        so it is the measure to trust on a shared machine
Each case runs once first, untimed, so that pocl's program cache holds its kernel. Prints the
command, the device (the CLI's backend line), the date and the load average before and after,
then a Markdown table of the medians over --rounds: each variant's cost over the plain forward
of the same binary (wall and cpu) and, with --base, new's CPU time over base's. Each round's
numbers go to stderr as they come.

usage: tools/bench_modifiers.py [--flashattn build/tools/flashattn] [--base OLD_BINARY]
                                [--backend opencl] [--rounds 3] [--repeat 10] [--seq 2048]
                                [--dim 64] [--heads 8] [--dtype f32]
                                [--cases plain,softcap,alibi,bias,window,sinks,dropout,window256]
Timing is not a test: nothing here asserts a speed.
"""
import argparse
import datetime
import re
import resource
import statistics
import subprocess
import sys

# (key for --cases, label in the table, flashattn run flags)
VARIANTS = [
    ("plain", "plain", []),
    ("softcap", "softcap 30", ["--softcap", "30"]),
    ("alibi", "alibi", ["--alibi"]),
    ("bias", "bias [1,1,N,N]", ["--bias", "random"]),
    ("window", "window -1,-1", ["--window", "-1,-1"]),
    ("sinks", "sinks", ["--sinks", "random"]),
    ("dropout", "dropout 0.1", ["--dropout", "0.1"]),
    ("window256", "window 256,0", ["--window", "256,0"]),
]


def run_once(binary, common, extra, repeat):
    """(CLI median ms, CPU seconds of the process, its stdout) of one run."""
    cmd = [binary, "run", *common, "--repeat", str(repeat), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # microseconds, not clock ticks
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ms = float(re.search(r"^time\s+([0-9.]+) ms", out, re.M).group(1))
    return ms, cpu, out


def measure(binary, common, extra, repeat):
    """(wall ms, CPU ms per forward) of one case."""
    wall, cpu_many, _ = run_once(binary, common, extra, repeat + 1)
    _, cpu_one, _ = run_once(binary, common, extra, 1)
    return wall, 1000.0 * (cpu_many - cpu_one) / repeat


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashattn", default="build/tools/flashattn")
    ap.add_argument("--base", help="an older flashattn binary to compare against")
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--cases", default=",".join(v[0] for v in VARIANTS),
                    help="which variants, by key (plain always runs)")
    args = ap.parse_args()
    keys = set(args.cases.split(","))
    unknown = keys - {v[0] for v in VARIANTS}
    if unknown:
        ap.error(f"--cases: unknown {', '.join(sorted(unknown))} "
                 f"(known: {', '.join(v[0] for v in VARIANTS)})")
    args.variants = [v for v in VARIANTS if v[0] in keys | {"plain"}]
    return args


def print_table(args, binaries, res):
    """One row per variant: each binary's medians and costs, then new / base CPU time."""
    cols = [n for n, _ in binaries]
    ratio = len(cols) > 1
    print("| case | " + " | ".join(f"{n} wall ms | {n} wall cost | {n} cpu ms | {n} cpu cost"
                                   for n in cols) + (" | new / base cpu |" if ratio else " |"))
    print("|---|" + "---|---|---|---|" * len(cols) + ("---|" if ratio else ""))
    for _, label, _ in args.variants:
        cells, cpus = [], []
        for n in cols:
            wall = statistics.median(w for w, _ in res[(n, label)])
            cpu = statistics.median(c for _, c in res[(n, label)])
            plain_wall = statistics.median(w for w, _ in res[(n, "plain")])
            plain_cpu = statistics.median(c for _, c in res[(n, "plain")])
            cpus.append(cpu)
            cost = label != "plain"
            cells += [f"{wall:.1f}", f"{100.0 * (wall / plain_wall - 1):+.0f}%" if cost else "",
                      f"{cpu:.1f}", f"{100.0 * (cpu / plain_cpu - 1):+.0f}%" if cost else ""]
        if ratio:
            cells.append(f"{cpus[0] / cpus[1]:.2f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main():
    args = parse_args()
    common = ["--backend", args.backend, "--batch", "1", "--heads", str(args.heads),
              "--seq", str(args.seq), "--dim", str(args.dim), "--dtype", args.dtype]
    binaries = [("new", args.flashattn)] + ([("base", args.base)] if args.base else [])
    device = "?"
    for _, _, extra in args.variants:  # builds each program into pocl's cache before timing
        for _, binary in binaries:
            out = run_once(binary, common, extra, 1)[2]
            m = re.search(r"^backend\s+(.*)$", out, re.M)
            device = m.group(1) if m and device == "?" else device
    load0 = loadavg()
    res = {}  # (binary name, variant label) -> [(wall, cpu)]
    for rnd in range(args.rounds):
        for _, label, extra in args.variants:
            for name, binary in binaries if rnd % 2 == 0 else binaries[::-1]:
                res.setdefault((name, label), []).append(measure(binary, common, extra,
                                                                 args.repeat))
            print(f"round {rnd + 1} {label}: " + ", ".join(
                f"{n} wall {res[(n, label)][-1][0]:.1f} cpu {res[(n, label)][-1][1]:.1f}"
                for n, _ in binaries), file=sys.stderr)
    print(f"command: `{' '.join(sys.argv)}`")
    print(f"each:    `flashattn run {' '.join(common)} --repeat {args.repeat + 1} <flags>` "
          f"(cpu: minus a --repeat 1 run)")
    print(f"device:  {device}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"rounds {args.rounds}, load average {load0} -> {loadavg()}\n")
    print_table(args, binaries, res)


if __name__ == "__main__":
    main()
