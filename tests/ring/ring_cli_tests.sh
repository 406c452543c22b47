#!/usr/bin/env bash
# ring_cli_tests.sh FLASHATTN MPIRUN [MPIRUN_FLAGS...] - `flashattn ring`: --help and a bad
# option without mpirun; under mpirun (2 and 3 ranks) random inputs with --check, forward and
# backward, on cpu and (when it has a device) opencl; inputs from .npy files (written by
# `flashattn run --save-inputs`) with every output written, each output file checked to exist
# with its .npy shape; window, ALiBi and dropout with --check, dropout on any length, a rank
# with no row; cross-attention (--seq-k) with --check, random and from files.
set -u
cli=$1
shift
mpirun=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() { # expect CODE NAME CMD...: the command exits with CODE
    local want=$1 name=$2
    shift 2
    "$@" >"$tmp/out" 2>&1
    local got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL $name: exit $got, expected $want"
        sed 's/^/    /' "$tmp/out" | tail -20
        fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}
contains() { # contains NAME TEXT: the last command's output holds TEXT
    if ! grep -q -- "$2" "$tmp/out"; then
        echo "FAIL $1: output lacks '$2'"
        fails=$((fails + 1))
    fi
}

expect 0 "help without mpirun" "$cli" ring --help
contains "help names the ring layout" "--ring-layout"
expect 2 "bad ring layout without mpirun" "$cli" ring --ring-layout diagonal
contains "bad ring layout message" "zigzag or contiguous"

# ALiBi slopes per sequence ([batch, heads], `run`'s alibi 2): refused, a usage error naming
# the option (the ring sends each rank [heads] slopes). The file: f32 zeros of shape (2, 2).
dict="{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
pad=$(((64 - (10 + ${#dict} + 1) % 64) % 64))
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((${#dict} + pad + 1)))\\x00"
  printf '%s%*s\n' "$dict" "$pad" ''; head -c 16 /dev/zero; } >"$tmp/slopes_bh.npy"
expect 2 "alibi slopes [batch, heads] refused" "$cli" ring --backend cpu --seq 32 --batch 2 \
    --heads 2 --dim 16 --alibi-slopes "$tmp/slopes_bh.npy"
contains "alibi slopes [batch, heads] message" "the ring takes f32 \[heads\] slopes"

expect 0 "cpu P=2 zigzag causal f32 bwd --check" "${mpirun[@]}" -np 2 "$cli" ring \
    --backend cpu --seq 67 --heads 4 --heads-kv 2 --dim 16 --causal bottom-right --backward --check
contains "cpu P=2 check lines" "check dK"
contains "cpu P=2 summary" "compute max/mean"
contains "cpu P=2 transfers line" "through host staging"
contains "cpu P=2 MPI device memory" "MPI device memory: "
expect 0 "cpu P=3 contiguous bf16 bshd --check" "${mpirun[@]}" -np 3 "$cli" ring \
    --backend cpu --seq 50 --heads 2 --dim 32 --dtype bf16 --layout bshd --ring-layout contiguous \
    --causal top-left --check

# Files in, files out: the inputs of a plain run, every output of the ring written.
"$cli" run --backend cpu --seq 40 --heads 2 --dim 16 --dtype f16 --backward \
    --save-inputs "$tmp" >/dev/null 2>&1 || { echo "FAIL run --save-inputs"; fails=$((fails + 1)); }
expect 0 "cpu P=2 files" "${mpirun[@]}" -np 2 "$cli" ring --backend cpu --dtype f16 \
    --q "$tmp/q.npy" --k "$tmp/k.npy" --v "$tmp/v.npy" --do "$tmp/do.npy" --causal top-left \
    --out "$tmp/o.npy" --lse "$tmp/lse.npy" --dq "$tmp/dq.npy" --dk "$tmp/dk.npy" \
    --dv "$tmp/dv.npy" --check
for f in o lse dq dk dv; do
    if ! head -c 128 "$tmp/$f.npy" 2>/dev/null | grep -q "'shape': (1, 2, 40"; then
        echo "FAIL files: $f.npy missing or not of shape (1, 2, 40, ...)"
        fails=$((fails + 1))
    fi
done

# The rules that read positions: window, ALiBi, dropout, sinks; then dropout on lengths that
# are not a multiple of 4 * 2P (refused before the chunks started at multiples of 4 rows), and
# N 5 on 3 ranks, where rank 1 holds no row (zigzag chunks [0,0) [0,0) [0,4) [4,4) [4,4) [4,5)).
expect 0 "cpu P=3 zigzag window alibi dropout sinks bwd --check" "${mpirun[@]}" -np 3 "$cli" \
    ring --backend cpu --seq 48 --heads 2 --dim 16 --causal top-left --window 6,0 --alibi \
    --dropout 0.2 --sinks random --backward --check
contains "cpu P=3 modifiers check" "check dV"
expect 0 "cpu P=2 dropout N30 bwd --check" "${mpirun[@]}" -np 2 "$cli" ring \
    --backend cpu --seq 30 --dim 8 --dropout 0.1 --causal bottom-right --backward --check
contains "dropout N30 check" "check dV"
expect 0 "cpu P=3 N5 (a rank with no row) dropout sinks bwd --check" "${mpirun[@]}" -np 3 \
    "$cli" ring --backend cpu --seq 5 --dim 8 --dropout 0.2 --sinks random --causal top-left \
    --backward --check
contains "N5 rows line" "rank 1: rows 0"

# Cross-attention: K/V longer or shorter than Q (--seq-k), random and from files.
expect 0 "cpu P=3 zigzag Sq 29 < Sk 50 bottom-right bwd --check" "${mpirun[@]}" -np 3 "$cli" \
    ring --backend cpu --seq 29 --seq-k 50 --heads 4 --heads-kv 2 --dim 16 \
    --causal bottom-right --backward --check
contains "Sq < Sk check" "check dK"
expect 0 "cpu P=2 contiguous Sq 50 > Sk 21 bottom-right window bwd --check" "${mpirun[@]}" \
    -np 2 "$cli" ring --backend cpu --seq 50 --seq-k 21 --dim 16 --ring-layout contiguous \
    --causal bottom-right --window 8,-1 --backward --check
contains "Sq > Sk check" "check dV"
expect 0 "cpu P=2 Sk 0 (no key: O = 0, LSE = -inf) bwd --check" "${mpirun[@]}" -np 2 "$cli" \
    ring --backend cpu --seq 10 --seq-k 0 --dim 8 --backward --check
contains "Sk 0 check" "check dK"
"$cli" run --backend cpu --seq 40 --seq-k 27 --heads 2 --dim 16 --backward \
    --save-inputs "$tmp/x" >/dev/null 2>&1 ||
    { echo "FAIL run --save-inputs Sk"; fails=$((fails + 1)); }
expect 0 "cpu P=3 files Sq 40 Sk 27 top-left" "${mpirun[@]}" -np 3 "$cli" ring --backend cpu \
    --q "$tmp/x/q.npy" --k "$tmp/x/k.npy" --v "$tmp/x/v.npy" --do "$tmp/x/do.npy" \
    --causal top-left --out "$tmp/x/o.npy" --dk "$tmp/x/dk.npy" --check
for f in o:40 dk:27; do
    if ! head -c 128 "$tmp/x/${f%%:*}.npy" 2>/dev/null | grep -q "'shape': (1, 2, ${f##*:}"; then
        echo "FAIL files Sk: ${f%%:*}.npy missing or not of shape (1, 2, ${f##*:}, ...)"
        fails=$((fails + 1))
    fi
done

if "$cli" devices 2>/dev/null | grep -q "^opencl: [1-9]"; then
    expect 0 "opencl P=2 zigzag causal f16 bwd --check" "${mpirun[@]}" -np 2 "$cli" ring \
        --backend opencl --seq 45 --heads 2 --dim 16 --dtype f16 --causal top-left --backward \
        --check
fi
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ring CLI tests passed"
