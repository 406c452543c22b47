#!/usr/bin/env python3
"""bench_modifiers.py - the score modifiers' and dropout's cost over the plain forward (issue 35).

Runs `flashattn run --backend opencl` on one shape (default B1 H8 N2048 d64 f32) plain and with
each modifier (softcap 30, ALiBi, bias random [1, 1, N, N] f32, dropout 0.1), for the new binary
and, with --base, an older one, alternated case by case and round by round so that a busy
machine slows every column alike. Two measures per run:
  wall  the CLI's own median of --repeat runs after a warm-up (ms)
  cpu   the process's CPU time (user + system) per forward: that of a run with --repeat R + 1
        minus that of a run with --repeat 1, over R; waiting for a core does not inflate it,
        so it is the measure to trust on a shared machine
Each case runs once first, untimed, so that pocl's program cache holds its kernel. Prints a
Markdown table of the medians over --rounds, each modifier's cost over the plain forward of the
same binary and, with --base, new's CPU time over base's, with the command, the load average
before and after, and the date. tools/bench_modifiers.sh tables one build's wall times for
every modifier (window and sinks too); this compares two builds by CPU time, for a kernel change
measured on a shared machine.

usage: tools/bench_modifiers.py [--flashattn build/tools/flashattn] [--base OLD_BINARY]
                                [--rounds 3] [--repeat 10] [--seq 2048] [--dim 64]
                                [--cases plain,softcap,alibi,bias,dropout]
Timing is not a test: nothing here asserts a speed.
"""
import argparse
import datetime
import resource
import re
import statistics
import subprocess
import sys

MODS = [
    ("plain", []),
    ("softcap 30", ["--softcap", "30"]),
    ("alibi", ["--alibi"]),
    ("bias f32", ["--bias", "random"]),
    ("dropout 0.1", ["--dropout", "0.1"]),
]


def run_once(binary, shape, extra, repeat):
    """(CLI median ms, CPU seconds of the process) of one run."""
    cmd = [binary, "run", "--backend", "opencl", *shape, "--repeat", str(repeat), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # microseconds, not clock ticks
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ms = float(re.search(r"^time\s+([0-9.]+) ms", out, re.M).group(1))
    return ms, cpu


def measure(binary, shape, extra, repeat):
    """(wall ms, CPU ms per forward) of one case."""
    wall, cpu_many = run_once(binary, shape, extra, repeat + 1)
    _, cpu_one = run_once(binary, shape, extra, 1)
    return wall, 1000.0 * (cpu_many - cpu_one) / repeat


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashattn", default="build/tools/flashattn")
    ap.add_argument("--base", help="an older flashattn binary to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--cases", default="plain,softcap,alibi,bias,dropout",
                    help="which cases, by the first word of their names (plain always runs)")
    args = ap.parse_args()
    wanted = set(args.cases.split(",")) | {"plain"}
    mods = [m for m in MODS if m[0].split()[0] in wanted]
    shape = ["--batch", "1", "--heads", str(args.heads), "--seq", str(args.seq),
             "--dim", str(args.dim)]
    binaries = [("new", args.flashattn)] + ([("base", args.base)] if args.base else [])
    for mod, extra in mods:  # builds each program into pocl's cache before any timing
        for _, binary in binaries:
            run_once(binary, shape, extra, 1)
    load0 = loadavg()
    res = {}  # (binary name, mod name) -> [(wall, cpu)]
    for rnd in range(args.rounds):
        for mod, extra in mods:
            for name, binary in binaries if rnd % 2 == 0 else binaries[::-1]:
                res.setdefault((name, mod), []).append(measure(binary, shape, extra,
                                                               args.repeat))
            print(f"round {rnd + 1} {mod}: " + ", ".join(
                f"{n} wall {res[(n, mod)][-1][0]:.1f} cpu {res[(n, mod)][-1][1]:.1f}"
                for n, _ in binaries), file=sys.stderr)
    print(f"`{' '.join(sys.argv)}`, {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, "
          f"B1 H{args.heads} N{args.seq} d{args.dim} f32, repeat {args.repeat}, "
          f"{args.rounds} rounds, load average {load0} -> {loadavg()}\n")
    cols = [n for n, _ in binaries]
    ratio = len(cols) > 1
    print("| case | " + " | ".join(f"{n} wall ms | {n} cpu ms | {n} cpu cost" for n in cols)
          + (" | new / base cpu |" if ratio else " |"))
    print("|---|" + "---|---|---|" * len(cols) + ("---|" if ratio else ""))
    for mod, _ in mods:
        cells = []
        cpus = []
        for n in cols:
            wall = statistics.median(w for w, _ in res[(n, mod)])
            cpus.append(statistics.median(c for _, c in res[(n, mod)]))
            plain = statistics.median(c for _, c in res[(n, "plain")])
            cells += [f"{wall:.1f}", f"{cpus[-1]:.1f}", f"{100.0 * (cpus[-1] / plain - 1):+.0f}%"]
        if ratio:
            cells.append(f"{cpus[0] / cpus[1]:.2f}")
        print(f"| {mod} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
