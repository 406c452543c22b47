#!/usr/bin/env bash
# oclgrind_tests.sh - runs a subset of the forward and backward suites on Oclgrind, the OpenCL
# device simulator, with its data-race, API and (where the plugin holds up) uninitialised-read
# checks, and both once more with a small simulated local memory so the planners pick other
# tiles. Oclgrind calls its device a GPU, so those runs take the GPU rules' staged kernels; the
# CPU rules' kernels (register-blocked, in place, f32 tiles), which pocl runs, are run again
# under FLASHATTN_OPENCL_DEVICE_TYPE=cpu with pocl's 1 MiB of local memory, their plans checked.
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
unset FLASHATTN_OPENCL_DEVICE_TYPE FLASHATTN_OPENCL_AS_GPU
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

# edited_kernels FILE SED_SCRIPT: a copy of the kernel files (a program is the shared files and
# its entry point's file) with SED_SCRIPT applied to FILE; prints the copy's directory, or
# nothing (and counts a failure) when the sed changed nothing: a check and the edit it relies
# on must not both go quiet.
edited_kernels() {
    local file=$1 script=$2 dir
    dir=$(mktemp -d "$tmp/kernels.XXXX")
    cp "$src"/kernels_cl/*.cl "$dir/"
    sed "$script" "$src/kernels_cl/$file" >"$dir/$file"
    if cmp -s "$src/kernels_cl/$file" "$dir/$file"; then
        echo "FAIL could not edit kernels_cl/$file with '$script'" >&2
        return 1
    fi
    echo "$dir"
}

# self_test NAME FILE SED_SCRIPT TEST CASE [OCLGRIND_OPTIONS...]: breaks FILE with SED_SCRIPT
# (a barrier removed, a loop widened) and requires Oclgrind to report what TEST (the forward or
# backward suite) then runs into on CASE.
self_test() {
    local name=$1 file=$2 script=$3 test=$4 case=$5 dir
    shift 5
    if ! dir=$(edited_kernels "$file" "$script"); then
        echo "FAIL self-test: $name"
        failed=$((failed + 1))
    else
        FLASHATTN_KERNEL_DIR=$dir run "self-test: $name" report --data-races "$@" -- \
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
# (tile overrides) are not here: their backward tiles exceed the simulator's 32 KiB of local
# memory (INVALID_TILE); the CPU rules' runs below have them.
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

# ---- The CPU rules' kernels ----------------------------------------------------------------
# FLASHATTN_OPENCL_DEVICE_TYPE=cpu plans the simulated device as pocl plans a CPU: the forward's
# register-blocked path (flash_fwd_blocked.cl) for tiles of more than 64 rows, in place below,
# the backward's register-blocked passes (flash_bwd_blocked.cl) where both tiles are multiples
# of 4, f32 tiles (flash_blocks.cl's products in both). With pocl's 1 MiB of local memory the
# simulator plans pocl's tiles (97 x 97 d 64: 96 x 128, 160 KiB). Each run is one work-item per
# tile, so the race check finds little; what it is for is every local and global access checked
# against its buffer, which pocl's case tables cannot see.
cpu_local=1048576
FWD_BLOCKED="flash_fwd's register-blocked path (REG_BLOCKED)"
BWD_BLOCKED="on their register-blocked path (REG_BLOCKED, flash_bwd_blocked.cl)"

# cpu_run NAME OCLGRIND_OPTIONS... -- COMMAND...: run, planned with the CPU rules.
cpu_run() {
    local name=$1
    shift
    FLASHATTN_OPENCL_DEVICE_TYPE=cpu run "CPU rules: $name" clean --local-mem-size $cpu_local "$@"
}

# cpu_plan WHAT PLAN_OPTIONS...: the CPU rules' plan of a problem the runs below take must say
# WHAT, so that the coverage cannot vanish silently when the rules or Oclgrind change.
cpu_plan() {
    local want=$1 out
    shift
    out=$(FLASHATTN_OPENCL_DEVICE_TYPE=cpu oclgrind --local-mem-size $cpu_local "$cli" plan \
        --backend opencl "$@" 2>&1)
    if grep -qF "$want" <<<"$out" && grep -q "device 0: Oclgrind" <<<"$out"; then
        echo "ok   CPU rules plan the register-blocked path: $*"
        passed=$((passed + 1))
    else
        echo "FAIL CPU rules should plan \"$want\": $*"
        sed 's/^/     /' <<<"$out" | tail -12
        failed=$((failed + 1))
    fi
}

# Without the setting the simulator is a GPU, whose rules have no register-blocked path.
if oclgrind --local-mem-size $cpu_local "$cli" plan --backend opencl --heads 2 --seq 97 --dim 64 |
    grep -qF "$FWD_BLOCKED"; then
    echo "FAIL the GPU rules should not plan the register-blocked path"
    failed=$((failed + 1))
fi
# Shapes run below, planned: tiles of 96 x 128 (97 rows), 256 with a 1-row tail tile (257),
# 112 x 32 (113 x 17, causal, padded), 256 x 1 (one key); the backward's 96 x 64, its 4 x 8
# overrides; block-sparse tiles across 8 query and 4 key blocks (forward), 64 x 32 overrides
# over 16 x 32 blocks (backward).
cpu_plan "$FWD_BLOCKED" --heads 2 --seq 97 --dim 64
cpu_plan "$FWD_BLOCKED" --heads 4 --seq 257 --seq-k 127 --dim 16 --causal bottom-right
cpu_plan "$FWD_BLOCKED" --heads 2 --seq 113 --seq-k 17 --dim 32 --causal bottom-right
cpu_plan "$FWD_BLOCKED" --batch 2 --heads 3 --seq 257 --seq-k 1 --dim 16 --layout bshd
cpu_plan "$BWD_BLOCKED" --heads 2 --seq 97 --dim 64 --backward
cpu_plan "$BWD_BLOCKED" --batch 2 --heads 4 --heads-kv 2 --seq 12 --seq-k 20 --dim 64 \
    --layout bshd --block-r 4 --block-c 8 --backward
cpu_plan "a tile of 256 rows holds 8 query blocks of 32 rows, a key tile of 128 keys over" \
    --heads 2 --seq 256 --dim 64 --block-pattern local:1 --block-size 32,32
cpu_plan "$BWD_BLOCKED" --batch 2 --heads 2 --heads-kv 1 --seq 150 --seq-k 190 --dim 32 \
    --causal bottom-right --block-pattern local:1 --block-size 16,32 --block-r 64 --block-c 32 \
    --backward

# The check itself: init_rows writing one vector past the forward's f32 O tile, zero_rows one
# past the dK/dV pass's dK and dV tiles (local memory), must be reported.
FLASHATTN_OPENCL_DEVICE_TYPE=cpu self_test "the register-blocked forward writes past O" \
    flash_fwd_blocked.cl \
    's/idx < BLOCK_R \* HEAD_DIM; idx += DIMS/idx <= BLOCK_R * HEAD_DIM; idx += DIMS/' \
    "$forward" mha97_d64/f32 --local-mem-size $cpu_local
FLASHATTN_OPENCL_DEVICE_TYPE=cpu self_test "the register-blocked backward writes past dK" \
    flash_bwd_blocked.cl 's/idx < n \* HEAD_DIM; idx += DIMS/idx <= n * HEAD_DIM; idx += DIMS/' \
    "$backward" "f32 d64 12x20" --local-mem-size $cpu_local

# The forward: Q tiles of 96, 112 and 256 rows with tails, GQA 8/2, padding, causal both ways,
# one key (k1), each dtype on some (f16 and bf16 tiles held as f32).
for c in mha97_d64/f32 q113_k17_br/ q113_k17_tl/bf16 q257_k127_br_d16/f32 k1/ gqa113_d80/f16; do
    cpu_run "races $c" --data-races --check-api -- "$forward" opencl --case="$c"
done
# The backward: dK/dV and dQ passes over planned tiles and 4 x 8 overrides, every mask, GQA and
# MQA, K/V broadcast, padding, empty seqlen_q / seqlen_k, each dtype.
for c in mha97_d64/f32 q113_k17_br/ "f32 d64 12x20" gqa_padded/f16 "f32 d8 5x17 top-left tiles" \
    "bf16 d8 33x7" odd17_d40/bf16 q17_k113_br/bf16 kv_broadcast/f16 k0/ q0/; do
    cpu_run "backward races $c" --data-races --check-api -- "$backward" opencl --case="$c"
done
# The varlen backward (SEQ: each sequence's rows and keys from its token offsets; an empty
# sequence, a first token at 200), on the register-blocked passes, as pocl plans it.
cpu_run "backward varlen" --data-races --check-api -- "$build/tests/test_decode" opencl \
    --case="backward varlen"
# Block-sparse forward and backward: tiles across several query and key blocks (the spans of
# listed key blocks per register block), tile overrides across blocks, a window, GQA, a tenth
# of the blocks, a causal odd shape, full blocks.
for c in "f32 256 d64 blocks 32x32" "f32 odd 113x203" "f32 150x190" "bf16 90x300" \
    "small 40x70" "f32 300 window"; do
    cpu_run "block-sparse races $c" --data-races --check-api -- "$sparse" opencl --case="$c"
done
# Modifiers on the register-blocked forward (tiles of 96 rows and more) and backward. The bias
# prefetch (__builtin_prefetch, flash_fwd_blocked.cl) is an intrinsic Oclgrind cannot run
# ("Undefined external function: llvm.prefetch"): a hint with no effect on results, taken out
# of a copy of the kernels for these runs. Dropout runs unoptimised (-cl-opt-disable): LLVM 14
# makes dropout_key_rows's choice of Philox word (e == 0 ? w[0] : ...) a `switch i2` on
# `trunc j to i2`, and Oclgrind 21.10 does not wrap the truncation: from key 4 on, keys with
# j & 3 = 0 or 1 take the default case (word 3 or 2), so dK and dV come out wrong on both rules'
# kernels while pocl, native clang 14 and the golden agree.
if nobias=$(edited_kernels flash_fwd_blocked.cl \
    's/__builtin_prefetch((const void \*)(ulong)(bias_row + k0 + c));/;/'); then
    FLASHATTN_KERNEL_DIR=$nobias cpu_run "modifiers softcap alibi bias" --data-races \
        --check-api -- "$build/tests/test_modifiers" opencl --case="bf16 4/4 99x77 d32 blocked"
else
    echo "FAIL CPU rules: modifiers (the bias prefetch not found)"
    failed=$((failed + 1))
fi
cpu_run "modifiers window sinks dropout" --data-races --check-api \
    --build-options -cl-opt-disable -- "$build/tests/test_modifiers" opencl \
    --case="f16 2/1 97x200 d48 blocked"
cpu_run "block-sparse softcap dropout sinks window" --data-races --check-api \
    --build-options -cl-opt-disable -- "$sparse" opencl --case="f16 255x127"
# Uninitialised reads: the plugin dies (exit 255, no output) on the CPU rules' kernels but the
# one-key problem's: the register-blocked forward (Br 256), the staged CPU backward (Bc 1).
cpu_run "uninitialized k1/f32" --uninitialized --data-races -- "$forward" opencl --case=k1/f32
cpu_run "backward uninitialized k1/f32" --uninitialized --data-races -- \
    "$backward" opencl --case=k1/f32

echo "oclgrind: $passed passed, $failed failed"
[ $failed -eq 0 ]
