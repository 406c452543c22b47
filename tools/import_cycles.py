#!/usr/bin/env python3
"""import_cycles.py - lists cycles between C files: file A calls (or includes the header of) a
function file B defines while B, directly or through others, calls back into A.

    tools/import_cycles.py DIR...      (default: src backends tools/cli)

Edges: a non-static function defined at the start of a line in B and named as a word in A (a
call, or a pointer taken); a header A includes whose functions B defines counts through those
calls. Exits 1 when a cycle exists, printing each strongly connected group of files.
"""
import os
import re
import sys

DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;]*$")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined"}


def sources(dirs):
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith(".c"):
                    yield os.path.join(root, f)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def main():
    dirs = sys.argv[1:] or ["src", "backends", "tools/cli"]
    texts = {f: strip_comments(open(f, encoding="utf-8").read()) for f in sources(dirs)}
    defined = {}
    for f, text in texts.items():
        for line in text.splitlines():
            m = DEF.match(line)
            if m and m.group(1) not in KEYWORDS and not line.startswith((" ", "\t", "#")):
                defined.setdefault(m.group(1), f)
    edges = {f: set() for f in texts}
    for f, text in texts.items():
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", text))
        for name in words & defined.keys():
            if defined[name] != f:
                edges[f].add(defined[name])
    # Tarjan's strongly connected components.
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(texts):
        if v not in index:
            visit(v)
    for g in groups:
        print("cycle: " + " <-> ".join(g))
        for a in g:
            for b in sorted(edges[a] & set(g)):
                calls = sorted(n for n, d in defined.items() if d == b and
                               re.search(r"\b%s\b" % re.escape(n), texts[a]))
                print("  %s -> %s: %s" % (a, b, ", ".join(calls[:6])))
    print("%d files, %d cycle(s)" % (len(texts), len(groups)))
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
