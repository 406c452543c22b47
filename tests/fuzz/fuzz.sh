#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer harnesses of tests/fuzz/ with clang, ASan and UBSan in a tree
# of their own, and runs them side by side for a bounded time: one line per harness with its
# executions.
#
#   tests/fuzz/fuzz.sh [BUILD_DIR]          (default build-fuzz/)
#   FLASHATTN_FUZZ_SECONDS=N                seconds per harness (default 20)
#   FLASHATTN_FUZZ_ONLY="npy cli"           a subset of the harnesses: npy problem cli
#   FLASHATTN_FUZZ_SEED=N                   libFuzzer's seed (default 1; 0 = a random one)
#
# Each harness starts from its seed corpus, tests/fuzz/corpus/NAME/ (read only), and what
# earlier runs found, BUILD_DIR/corpus/NAME/ (where new inputs go). A crash or a violated
# property saves the input to BUILD_DIR/crashes/NAME/ and replays it to show the report; copied
# into tests/fuzz/corpus/NAME/ it becomes a ctest case (fuzz_NAME) in every tree.
# Exit status: 0 every harness ran clean, 1 one failed, 77 skipped (no clang that links
# libFuzzer: install clang and libclang-rt-dev).
set -eu
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
secs=${FLASHATTN_FUZZ_SECONDS:-20}
# A fixed seed makes a run from a fresh tree try the same inputs in the same order on every
# machine, so what CI finds, a developer finds with the same command; longer or random-seeded
# runs are for hunting.
seed=${FLASHATTN_FUZZ_SEED:-1}
names=${FLASHATTN_FUZZ_ONLY:-npy problem cli}
cc=${FLASHATTN_FUZZ_CC:-clang}
# A halting sanitizer report is a failure; test.sh sets these too (with leak suppressions).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
unset FLASHATTN_BACKEND FLASHATTN_DEVICE FLASHATTN_BLOCK_R FLASHATTN_BLOCK_C

# libFuzzer ships with clang's compiler-rt: check that it links before building anything.
mkdir -p "$build"
probe_src='#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }'
if ! command -v "$cc" >/dev/null 2>&1 || ! echo "$probe_src" |
    "$cc" -x c -fsanitize=fuzzer,address,undefined -o "$build/fuzz_probe" - >/dev/null 2>&1; then
    echo "fuzz: skipped: $cc cannot link -fsanitize=fuzzer (install clang and libclang-rt-dev)"
    exit 77
fi

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$san" -DFLASHATTN_FUZZ=ON -DFLASHATTN_OPENCL=OFF -DFLASHATTN_CUDA=OFF \
    -DFLASHATTN_INSTALL_TEST=OFF >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
targets=()
for name in $names; do targets+=("fuzz_$name"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$build/build.log" 2>&1 ||
    { cat "$build/build.log"; exit 1; }

# Longest input per harness: a header and a few hundred elements; a problem description (all
# eight layouts spelt out in raw 64-bit values take ~400 bytes); an argument vector.
declare -A max_len=([npy]=4096 [problem]=512 [cli]=1024)

# run_one NAME: fuzzes for $secs seconds; prints the line; returns non-zero on a failure.
run_one() {
    local name=$1 bin=$build/tests/fuzz/fuzz_$1 corpus=$build/corpus/$1
    local crashes=$build/crashes/$1 log=$build/fuzz_$1.log rc=0
    local opts=(-max_total_time="$secs" -seed="$seed" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -max_len="${max_len[$name]}" -artifact_prefix="$crashes/")
    [ -f "tests/fuzz/$name.dict" ] && opts+=(-dict="tests/fuzz/$name.dict")
    # The CLI prints usage errors for almost every input; libFuzzer keeps its own report.
    [ "$name" = cli ] && opts+=(-close_fd_mask=3)
    mkdir -p "$corpus" "$crashes"
    rm -f "$crashes"/* # what an earlier run found was reported then
    "$bin" "${opts[@]}" "$corpus" "tests/fuzz/corpus/$name" >"$log" 2>&1 || rc=$?
    local execs units
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    units=$(find "$corpus" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $name: ${execs:-?} executions in ${secs} s, corpus $units inputs, no failure"
        return 0
    fi
    echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} executions; log: $log"
    tail -n 30 "$log"
    for f in "$crashes"/*; do
        [ -f "$f" ] || continue
        echo "-- replay of $f (keep it as a regression case: cp $f tests/fuzz/corpus/$name/):"
        # A timeout's input runs as long as it did before: bounded, so the report still comes.
        FLASHATTN_FUZZ_VERBOSE=1 timeout 120 "$bin" -timeout=30 "$f" 2>&1 | tail -n 40 || true
    done
    return 1
}

# The harnesses run side by side, each one process (on 2 cores three share them: 20 s of wall
# time instead of 60, fewer executions each); their reports print in order once all are done.
pids=()
for name in $names; do
    run_one "$name" >"$build/report_$name.txt" 2>&1 &
    pids+=("$!")
done
failed=0
i=0
for name in $names; do
    wait "${pids[$i]}" || failed=1
    cat "$build/report_$name.txt"
    i=$((i + 1))
done
exit "$failed"
