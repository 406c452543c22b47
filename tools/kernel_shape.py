#!/usr/bin/env python3
"""kernel_shape.py - the shape of kernel source files: per file, its longest function (name and
lines) and its share of conditional lines, so a kernel that folds every option into one body
shows up as a number (docs/history.md, ch. 23).

    tools/kernel_shape.py [--base REV] [PATH...]      (default: kernels_cl kernels_cu)

PATH is a file or a folder (its *.cl, *.cu, *.c and *.h files). With --base REV each file is
also read as it was at git revision REV (git show), and both columns are printed side by side.

What it counts, comments and string literals removed first:
- a function: a definition whose body opens with a `{` alone at column 0 (the project's
  clang-format style); its lines run from the first line of its signature to the `}` at column
  0 that closes it. One-line functions are not counted.
- a conditional line: one holding a preprocessor #if, #ifdef, #ifndef, #elif, #else or #endif,
  or a C `if (`, `else`, `switch (`, `case` or `default:`, or a `?` (the conditional operator).
  Each line counts once; the share is over all the file's lines (comments and blanks included).
"""
import argparse
import os
import re
import subprocess
import sys

EXTENSIONS = (".cl", ".cu", ".c", ".h")
PREPROCESSOR = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b")
C_CONDITIONAL = re.compile(r"\bif\s*\(|\belse\b|\bswitch\s*\(|\bcase\b|\bdefault\s*:|\?")
ATTRIBUTE = re.compile(r"__attribute__\s*\(\(.*?\)\)|__launch_bounds__\s*\([^)]*\)")
CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")


def strip_comments(text):
    """The text with comments and string literals blanked, line breaks kept."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    pattern = r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, blank, text, flags=re.S)


def signature_start(lines, brace):
    """The first line of the signature that ends at line `brace` - 1."""
    start = brace
    while start > 0:
        prev = lines[start - 1]
        if not prev.strip() or prev.lstrip().startswith("#") or prev.rstrip().endswith((";", "}")):
            break
        start -= 1
    return start


def functions(lines):
    """(name, lines) of each function whose body opens with `{` at column 0."""
    found = []
    for i, line in enumerate(lines):
        if line.rstrip() != "{":
            continue
        start = signature_start(lines, i)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")), None)
        if start == i or end is None:
            continue
        signature = ATTRIBUTE.sub(" ", " ".join(lines[start:i]))
        name = CALL.search(signature)
        found.append((name.group(1) if name else "?", end - start + 1))
    return found


def shape(text):
    """(longest function, its lines, #if lines, C conditional lines, all lines) of a text."""
    lines = strip_comments(text).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    pre = sum(1 for ln in lines if PREPROCESSOR.match(ln))
    c = sum(1 for ln in lines if not ln.lstrip().startswith("#") and C_CONDITIONAL.search(ln))
    longest = max(functions(lines), key=lambda f: f[1], default=("-", 0))
    return longest[0], longest[1], pre, c, len(lines)


def source_files(paths):
    for path in paths:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(path, name)
        else:
            yield path


def at_revision(rev, path):
    """The file's text at git revision rev, or None where it did not exist."""
    result = subprocess.run(["git", "show", f"{rev}:./{path}"], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


WIDTH = 50


def column(s):
    """'longest-function lines  share% (#if + C) / all' for one file's shape."""
    if s is None:
        return "(absent)".ljust(WIDTH)
    name, n, pre, c, total = s
    share = 100.0 * (pre + c) / total if total else 0.0
    return f"{name} {n:<4d}".rjust(28) + f" {share:5.1f}% ({pre:2d} + {c:2d}) / {total:<4d}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="git revision to compare with")
    ap.add_argument("paths", nargs="*", default=["kernels_cl", "kernels_cu"])
    args = ap.parse_args()
    legend = "longest function, lines; conditional share (#if lines + C lines) / lines"
    print(f"{'file':<30}{legend}")
    if args.base:
        print(f"{'':<30}{'at ' + args.base:<{WIDTH}} | now (working tree)")
    for path in source_files(args.paths):
        with open(path, encoding="utf-8") as f:
            now = shape(f.read())
        if args.base:
            old = at_revision(args.base, path)
            before = shape(old) if old is not None else None
            print(f"{path:<30}{column(before):<{WIDTH}} | {column(now)}")
        else:
            print(f"{path:<30}{column(now)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
