#!/usr/bin/env bash
# oclgrind_tests.sh - runs a subset of the forward and backward suites on Oclgrind, the OpenCL
# device simulator, with its data-race, API and (where the plugin holds up) uninitialised-read
# checks, and both once more with a small simulated local memory so the planners pick other
# tiles.
#
#   oclgrind_tests.sh BUILD_DIR SOURCE_DIR
#
# Oclgrind reports problems on stderr and still exits 0, so every run's output is searched for
# its report headers; a clean run must also end with cmocka's PASSED line, so a simulator that
# crashed half-way (its uninitialised-value plugin does) is not taken for a clean one. Self-tests
# first run each kernel file with one barrier removed and require the race to be reported, so a
# checker that silently stopped working cannot pass.
# Exit 77 (skipped) when oclgrind is not installed, unless CI=true or FLASHATTN_REQUIRE_OCLGRIND=1.
set -u
build=$1
src=$2
forward=$build/tests/test_forward
backward=$build/tests/test_backward
cli=$build/tools/flashattn

if ! command -v oclgrind >/dev/null 2>&1; then
    if [ "${CI:-}" = true ] || [ "${FLASHATTN_REQUIRE_OCLGRIND:-0}" = 1 ]; then
        echo "FAILED: oclgrind is not installed (the bootstrap installs the Debian package)"
        exit 1
    fi
    echo "SKIPPED: oclgrind is not installed"
    exit 77
fi

# The simulator must be the only OpenCL platform the tests see, whatever else is installed.
unset FLASHATTN_KERNEL_DIR FLASHATTN_BLOCK_R FLASHATTN_BLOCK_C
export FLASHATTN_BACKEND=opencl FLASHATTN_DEVICE=0
REPORT='data race|Uninitialized value|Invalid (read|write)|Invalid memory access|Oclgrind error|barrier divergence|Work-group divergence'
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME EXPECT(clean|report) OCLGRIND_OPTIONS... -- COMMAND...
run() {
    local name=$1 expect=$2
    shift 2
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    oclgrind "${opts[@]}" --max-errors 5 "$@" >"$tmp/out" 2>&1
    local rc=$?
    local reported=0
    grep -qE "$REPORT" "$tmp/out" && reported=1
    if [ "$expect" = clean ] && [ $rc -eq 0 ] && [ $reported -eq 0 ] &&
        grep -q "Oclgrind" "$tmp/out" && grep -q "PASSED" "$tmp/out"; then
        echo "ok   $name"
        passed=$((passed + 1))
    elif [ "$expect" = report ] && [ $reported -eq 1 ]; then
        echo "ok   $name (reported as expected)"
        passed=$((passed + 1))
    else
        echo "FAIL $name (exit $rc, oclgrind report: $reported, expected $expect)"
        sed 's/^/     /' "$tmp/out" | head -40
        failed=$((failed + 1))
    fi
}

# self_test NAME FILE SED_SCRIPT TEST CASE: copies the kernel files (a program is
# the shared files and its entry point's file), removes one barrier from FILE with SED_SCRIPT,
# and requires Oclgrind to report the race that TEST (the forward or backward suite) then runs
# into on CASE. A sed that removed nothing fails: the checker and
# its self-test must not both go quiet.
self_test() {
    local name=$1 file=$2 script=$3 test=$4 case=$5 dir
    dir=$(mktemp -d "$tmp/racy.XXXX")
    cp "$src"/kernels_cl/*.cl "$dir/"
    sed "$script" "$src/kernels_cl/$file" >"$dir/$file"
    if cmp -s "$src/kernels_cl/$file" "$dir/$file"; then
        echo "FAIL self-test: could not remove the barrier from kernels_cl/$file ($name)"
        failed=$((failed + 1))
    else
        FLASHATTN_KERNEL_DIR=$dir run "self-test: $name" report --data-races -- \
            "$test" opencl --case="$case"
    fi
}

# The forward without the barrier that protects the K/V tiles from being overwritten
# (scale_big: 61 x 61 at d 64, two key tiles, reported in 3 s; mha97_d64 took 11).
self_test "a missing barrier is a race" flash_fwd.cl \
    '0,/barrier(CLK_LOCAL_MEM_FENCE); \/\* the previous tiles/{//d}' "$forward" scale_big/f32
# flash_bwd_dq without the barrier before it overwrites the K/V tiles; "f32 d64 12x20" (4 x 8
# tiles, no mask) loops over three key tiles.
self_test "a barrier missing in flash_bwd_dq" flash_bwd.cl \
    '0,/barrier(CLK_LOCAL_MEM_FENCE); \/\* the previous tiles/{//d}' "$backward" "f32 d64 12x20"
# Oclgrind reports a GPU device, so its runs plan the GPU rules: several lanes per query row
# (2 at d 64, 32 for decode_q1), which meet in local memory behind barriers. Without the barrier
# in across_lanes_sum the lanes read each other's sums and P before they are written.
self_test "lanes without a barrier race" flash_softmax.cl \
    '/^float across_lanes_sum/,/^}/{/barrier(CLK_LOCAL_MEM_FENCE);/d}' "$forward" scale_big/f32
# The backward's lanes (2 at d 64) each write their keys of a row's P and dS and then read the
# whole row: without the barrier between (ROW_WRITTEN) they read keys not yet written.
self_test "the backward's lanes without a barrier race" flash_bwd.cl \
    's/^#define ROW_WRITTEN() barrier(CLK_LOCAL_MEM_FENCE)$/#define ROW_WRITTEN()/' \
    "$backward" "f32 d64 12x20"

# Data races and API misuse over shapes that cover every mask, GQA, padding and tail tiles, each
# dtype on several (the storage dtype changes the tiles' element type, not the barriers).
for c in mha97_d64/f32 gqa113_d80/f16 q113_k17_br/ q17_k113_br/bf16 gqa_padded/bf16 \
    decode_q1/f32 kv_broadcast/f16 scale_big/f32; do
    run "races $c" clean --data-races --check-api -- "$forward" opencl --case="$c"
done

# Block-sparse forward and backward (flash_fwd, flash_bwd_dkdv and flash_bwd_dq with their
# lists; each case runs both): skipped tiles, per-element block masks, full lists, split-KV, a
# window, on the GPU rules' staged tiles with lanes. The cases with tiles across several blocks
# (tile overrides) are not here: their backward tiles exceed the simulator's local memory
# (INVALID_TILE); test_block_sparse runs them on pocl.
sparse=$build/tests/test_block_sparse
for c in "small 40x70" "split-KV 3" "window 64x16"; do
    run "block-sparse races $c" clean --data-races --check-api -- "$sparse" opencl --case="$c"
done

# The backward's three kernels (flash_bwd_pre, flash_bwd_dkdv, flash_bwd_dq), each case after
# the forward that gives it O and LSE. Small shapes only (gqa113_d80/f16 alone takes ~4 min,
# mha97_d64/f32 20 s): every mask, GQA 8/2 and 2/1 and K/V broadcast over the batch, padding on
# every tensor, tail tiles of the planner's tiles and of 4 x 8 overrides, f32/f16/bf16, and the
# empty seqlen_q / seqlen_k (dK, dV or dQ written as zeros). About 45 s in all.
for c in scale_neg/f32 q113_k17_br/ q17_k113_br/bf16 q113_k17_tl/f16 gqa_padded/f16 \
    kv_broadcast/f16 odd17_d40/bf16 "f32 d8 5x17 top-left tiles" "bf16 d8 33x7" k0/ q0/; do
    run "backward races $c" clean --data-races --check-api -- "$backward" opencl --case="$c"
done

# Uninitialised reads: Oclgrind 21.10's plugin crashes inside itself on the larger kernels
# (a segfault in Uninitialized::instructionExecuted), so it runs on the shapes it survives.
for c in one/ three/ k1/ k0/; do
    run "uninitialized $c" clean --uninitialized --data-races -- "$forward" opencl --case="$c"
done
for c in one/ three/ k0/ q0/; do
    run "backward uninitialized $c" clean --uninitialized --data-races -- \
        "$backward" opencl --case="$c"
done

# A small simulated local memory: the plan must change, and the results must still pass.
big=$(oclgrind "$cli" plan --backend opencl --seq 97 --dim 64 2>/dev/null | awk '$1 == "Bc" {print $2}')
small=$(oclgrind --local-mem-size 8192 "$cli" plan --backend opencl --seq 97 --dim 64 2>/dev/null |
    awk '$1 == "Bc" {print $2}')
if [ -n "$big" ] && [ -n "$small" ] && [ "$small" -lt "$big" ]; then
    echo "ok   8 KiB local memory shrinks Bc ($big -> $small)"
    passed=$((passed + 1))
else
    echo "FAIL 8 KiB local memory should shrink Bc (default '$big', 8 KiB '$small')"
    failed=$((failed + 1))
fi
for c in scale_big/f32 q17_k113_br/f16 gqa_padded/bf16; do
    run "8 KiB local memory $c" clean --local-mem-size 8192 --data-races -- \
        "$forward" opencl --case="$c"
done
# The backward's planner then picks 8 x 8 tiles for q113_k17_br/f32 (32 x 16 by default) and
# 16 x 7 for odd17_d40/f16 (16 x 16): a key tile that is not a multiple of 8.
for c in q113_k17_br/f32 odd17_d40/f16; do
    run "8 KiB local memory backward $c" clean --local-mem-size 8192 --data-races -- \
        "$backward" opencl --case="$c"
done

echo "oclgrind: $passed passed, $failed failed"
[ $failed -eq 0 ]
