#!/usr/bin/env python3
"""gpu_check_verify.py - checks that tools/gpu_check.sh still names what the project has, on a
machine without a GPU, against a built (Unix Makefiles) tree:

    tools/gpu_check_verify.py BUILD_DIR

A GPU is lent for about 15 minutes now and then; a step that names a renamed test case, an
option a tool no longer takes or a suite its build does not make fails there, or (a sanitizer
on a case filter matching nothing) passes having checked nothing. So each command of both
stages' dry runs is checked here, with BUILD_DIR standing in for the GPU machine's build:
  - `cmake --build ... --target T...`: each T is a target of BUILD_DIR;
  - `ctest -R ... -E ...`: selects at least one test, and every selected test's program is built
    by those targets; --no-tests=error, so that a GPU machine's build without them fails;
  - `compute-sanitizer ... SUITE cuda --case=C`: SUITE is built by the targets and runs case C
    on the cpu backend (a filter matching nothing fails there);
  - the flashattn CLI and python tools: every --option is in the command's --help;
  - `bash SCRIPT ARGS`: the script runs with the CLI replaced by this file's option check;
  - `python -m pytest FILES`: the files exist;
  - each FLASHATTN_* variable set is read by the library, the tests or the package.
Exit status 1 when a stage has a problem (each printed, by stage), 0 when all hold.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["src", "backends", "tests", "python/flashattn", "tools/cli"]
KINDS = {"cmake", "ctest", "compute-sanitizer", "flashattn", "python", "pytest", "bash"}
MODES = ("--decode", "--block-sparse")  # bench options that select another --help


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def dry_run_commands(stage, build):
    """The commands (argv lists) of one stage's dry run, run with build as its build folder."""
    out = sh(["bash", str(ROOT / "tools/gpu_check.sh"), "--dry-run", "--stage", str(stage),
              "--out", str(build / "gpu_check_verify"), str(build)])
    if out.returncode != 0:
        sys.exit(f"gpu_check.sh --dry-run --stage {stage} failed:\n{out.stdout}{out.stderr}")
    return [shlex.split(line[2:]) for line in out.stdout.splitlines() if line.startswith("+ ")]


def target_outputs(build, targets, problems):
    """The files the targets link (from each target's link.txt), as absolute paths."""
    outputs = set()
    for t in targets:
        links = list(build.glob(f"**/CMakeFiles/{t}.dir/link.txt"))
        if not links:
            problems.append(f"target {t}: not a target of {build}")
            continue
        words = links[0].read_text().split()
        out = words[words.index("-o") + 1] if "-o" in words else f"lib{t}.so"
        outputs.add(os.path.normpath(links[0].parent.parent.parent / out))
    return outputs


class Checker:
    def __init__(self, build):
        self.build = build
        self.outputs = set()
        self.problems = []
        self.seen = set()  # the kinds of command checked

    def bad(self, what):
        if what not in self.problems:  # a case sanitized by several tools is one problem
            self.problems.append(what)

    def check(self, argv):
        argv = self.strip_env(argv)
        prog = os.path.basename(argv[0])
        self.seen.add("pytest" if "-m" in argv else
                      "python" if prog.startswith("python") else prog)
        if prog == "cmake" and "--target" in argv:
            targets = argv[argv.index("--target") + 1:]
            problems = []
            self.outputs |= target_outputs(self.build, targets, problems)
            self.bad_options(problems)
        elif prog == "ctest":
            self.check_ctest(argv)
        elif prog == "compute-sanitizer":
            self.check_sanitized(argv)
        elif prog == "flashattn":
            self.check_built(argv[0])
            self.bad_options(check_cli_options(argv[0], argv[1:]))
        elif prog.startswith("python") and "-m" in argv:
            self.check_files(argv[argv.index("-m") + 2:])
        elif prog.startswith("python"):
            self.check_python_tool(argv)
        elif prog == "bash":
            self.check_script(argv)

    def strip_env(self, argv):
        if argv[0] != "env":
            return argv
        i = 1
        while "=" in argv[i]:
            name, value = argv[i].split("=", 1)
            if name.startswith("FLASHATTN_") and not variable_is_read(name):
                self.bad(f"{name}: no source file reads it")
            if value.startswith(str(self.build)) and not Path(value).exists():
                self.bad(f"{name}={value}: no such file in the build")
            i += 1
        return argv[i:]

    def check_built(self, path):
        if os.path.normpath(path) not in self.outputs:
            self.bad(f"{path}: the build step's targets do not make it")

    def check_ctest(self, argv):
        sel = [a for i, a in enumerate(argv) if i and argv[i - 1] in ("-R", "-E")]
        flags = [w for i, a in enumerate(argv) if a in ("-R", "-E") for w in (a, argv[i + 1])]
        out = sh(["ctest", "--test-dir", str(self.build), "-N", "--show-only=json-v1"] + flags)
        tests = json.loads(out.stdout).get("tests", []) if out.returncode == 0 else []
        if not tests:
            self.bad(f"ctest {' '.join(sel)}: selects no test of {self.build}")
        if "--no-tests=error" not in argv:  # else a machine whose build lacks them passes
            self.bad(f"ctest {' '.join(sel)}: without --no-tests=error")
        for t in tests:
            if os.path.normpath(t["command"][0]) not in self.outputs:
                self.bad(f"ctest test {t['name']}: {t['command'][0]} is not made by the "
                         "build step's targets")

    def check_sanitized(self, argv):
        i = argv.index("cuda")  # SANITIZER OPTIONS... SUITE cuda --case=C
        suite, rest = argv[i - 1], argv[i + 1:]
        self.check_built(suite)
        out = sh([suite, "cpu"] + rest, env=dict(os.environ, FLASHATTN_REQUIRE_BACKENDS="cpu"))
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-1:]
            self.bad(f"{os.path.basename(suite)} cpu {' '.join(rest)}: exit "
                     f"{out.returncode} {tail}")

    def check_python_tool(self, argv):
        script = argv[1]
        out = sh([argv[0], script, "--help"])
        if out.returncode != 0:
            self.bad(f"{script} --help: exit {out.returncode}")
            return
        self.bad_options(missing_options(argv[2:], out.stdout, script))
        for i, a in enumerate(argv):
            if a == "--flashattn":
                self.check_built(argv[i + 1])

    def check_script(self, argv):
        script = Path(argv[1])
        if not script.is_file():
            self.bad(f"{script}: no such script")
            return
        if script.name == "gpu_bundle.sh":
            return  # unpacks packages; nothing of the project's to check
        fa = next((a for a in argv[2:] if os.path.basename(a) == "flashattn"), None)
        if fa is None:
            return
        self.check_built(fa)
        stand_in = self.build / "gpu_check_verify" / "flashattn"
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                            f"{shlex.quote(__file__)} --cli {shlex.quote(fa)} \"$@\"\n")
        stand_in.chmod(0o755)
        args = [str(stand_in) if a == fa else a for a in argv[2:]]
        out = sh(["bash", str(script)] + args)
        if out.returncode != 0:
            self.bad(f"{script.name}: exit {out.returncode}: {out.stderr.strip()}")

    def check_files(self, files):
        for f in files:
            if f.endswith(".py") and not Path(f).is_file():
                self.bad(f"{f}: no such test file")

    def bad_options(self, missing):
        for m in missing:
            self.bad(m)


def missing_options(args, help_text, who):
    opts = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    return [f"{who}: {o} is not among its options"
            for o in sorted(opts) if not re.search(rf"(^|[\s\[,]){re.escape(o)}\b", help_text)]


def check_cli_options(fa, args):
    """The flashattn command's options that its --help (the command's, in its mode) lacks."""
    command = [fa, args[0]] + [a for a in args[1:] if a in MODES] + ["--help"]
    out = sh(command)
    if out.returncode != 0:
        return [f"{' '.join(command)}: exit {out.returncode}"]
    return missing_options(args[1:], out.stdout + out.stderr, f"flashattn {args[0]}")


def variable_is_read(name):
    out = sh(["grep", "-rqw", name] + [str(ROOT / s) for s in SOURCES])
    return out.returncode == 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--cli":  # the stand-in CLI of check_script
        missing = check_cli_options(sys.argv[2], sys.argv[3:])
        print("\n".join(missing), file=sys.stderr)
        return 1 if missing else 0
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    build = Path(sys.argv[1]).resolve()
    rc, seen = 0, set()
    for stage in (1, 2):
        checker = Checker(build)
        commands = dry_run_commands(stage, build)
        for argv in commands:
            checker.check(argv)
        seen |= checker.seen
        print(f"stage {stage}: {len(commands)} commands, {len(checker.problems)} problems")
        for p in checker.problems:
            print(f"  {p}")
        rc |= 1 if checker.problems else 0
    # A dry run whose commands this file no longer recognises would check nothing and pass.
    unseen = sorted(KINDS - seen)
    if unseen:
        print(f"the dry runs have no {', '.join(unseen)} command: is this file still in step "
              "with gpu_check.sh?")
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
