#!/usr/bin/env bash
# compare_outputs.sh - proves that a change of the code left every forward output bitwise the
# same: builds BASE (a git revision, default HEAD) in a temporary worktree and the working tree
# as it is, runs the shared case table (tests/test_forward) on each backend with --digest, and
# compares the fingerprints of O and LSE case by case. Exits 1 on any difference.
#
#   tools/compare_outputs.sh [BASE] [BACKEND...]     (default backends: cpu opencl)
#
# Both builds run on this machine and device, the only setting in which bitwise equality is
# promised (DESIGN.md, "Determinism").
set -eu
cd "$(dirname "$0")/.."
base=${1:-HEAD}
shift || true
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(cpu opencl)
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git worktree add -q --detach "$work/base" "$base"
digest() { # SOURCE_DIR BUILD_DIR OUT
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_INSTALL_TEST=OFF >/dev/null
    cmake --build "$2" -j"$(nproc)" --target test_forward >/dev/null
    # The base may predate --digest: then there is nothing to compare against.
    "$2/tests/test_forward" "${backends[@]}" --digest="$3" >"$3.log" 2>&1 ||
        { echo "compare_outputs: test_forward failed in $1 (log: $3.log)"; cat "$3.log"; exit 1; }
    [ -s "$3" ] || { echo "compare_outputs: $1 wrote no digest (test_forward without --digest?)"; exit 1; }
}
echo "== base $(git rev-parse --short "$base")"
digest "$work/base" "$work/build-base" "$work/base.txt"
echo "== working tree"
digest "$PWD" "$work/build-new" "$work/new.txt"
if diff "$work/base.txt" "$work/new.txt" >"$work/diff.txt"; then
    echo "compare_outputs: $(wc -l <"$work/new.txt") outputs (${backends[*]}) bitwise the same as $base"
else
    echo "compare_outputs: outputs differ from $base (< base, > working tree):"
    cat "$work/diff.txt"
    exit 1
fi
