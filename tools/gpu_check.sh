#!/usr/bin/env bash
# gpu_check.sh - the checks owed on a machine with an NVIDIA GPU, in one command:
#   1. configure and build with the CUDA backend required (FLASHATTN_CUDA=ON);
#   2. run the whole test suite with FLASHATTN_REQUIRE_BACKENDS=cpu,cuda (plus opencl when an
#      OpenCL platform exists), so a missing driver or NVRTC fails instead of skipping;
#   3. compute-sanitizer memcheck, racecheck and synccheck on a tiny subset of the forward, the
#      backward and the decode suites (both CUDA paths: f32 runs the CUDA cores, f16/bf16
#      tensor cores; split-KV with its merge, paged K/V, varlen; block-sparse);
#   4. tools/bench_decode.sh on cuda (and opencl): split-KV and paged decoding, B 1 and 8
#      (32 query heads on 8 K/V heads: GQA-packed, a warp per row group on cuda);
#   5. the A/B of the tensor-core forward: today's path (FLASHATTN_CUDA_PIPELINE=0) against the
#      pipelined one (=1: double-buffered cp.async K/V copies into padded tiles), f16 and bf16,
#      d 64 and 128, the points of seq 256 checked against the golden;
#   6. tools/bench_torch.py: our forward against PyTorch SDPA (flash) and a naive attention;
#   7. the Python package's torch CUDA tensor tests (tests/python/test_cuda_tensors.py: zero-copy
#      on torch's current stream) with $PYTHON (default python3; it needs torch, numpy, pytest).
# A machine without cmocka, an OpenCL loader or pkg-config (and no network) gets them from the
# Debian packages tools/gpu_bundle.sh fetched into .bundle beforehand: they are unpacked into
# /tmp/fa-bundle (BUNDLE_PREFIX) and NVIDIA's OpenCL driver is registered there, so the opencl
# backend runs on the GPU too. For the device tool: carry .bundle, one command
#   bash tools/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log; cp build-gpu/bench_*.md $OUT/
#
# usage: tools/gpu_check.sh [BUILD_DIR]     (default: build-gpu)
#   SUITE=0, SANITIZE=0, DECODE=0, AB=0, BENCH=0, PYTEST=0 skip the test suite, compute-sanitizer or a
#   benchmark (to split the work between calls of at most 10 minutes); BUNDLE=DIR for another
#   bundle folder. DRY_RUN=1 (or --dry-run as the first argument) prints the build, test and
#   benchmark commands instead of running them, so the prepared command can be read and
#   checked on a machine without a GPU. Issue 38's decode and A/B alone:
#   SUITE=0 SANITIZE=0 BENCH=0 bash tools/gpu_check.sh
# Exit status: non-zero when a build, a test or a sanitizer run fails.
set -euo pipefail

if [ "${1:-}" = --dry-run ]; then
    DRY_RUN=1
    shift
fi
DRY_RUN=${DRY_RUN:-0}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
BUNDLE=${BUNDLE:-$ROOT/.bundle}

step() { printf '\n==== %s\n' "$*"; }
# Runs a command, or under DRY_RUN prints it (with the environment it is given).
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '+'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}
# Runs a command into a table file as well (tee), or prints it under DRY_RUN.
run_to() {
    local out=$1
    shift
    if [ "$DRY_RUN" = 1 ]; then
        run "$@"
        echo "  > $out"
    else
        "$@" | tee "$out"
    fi
}

step "GPU"
run nvidia-smi -L || { echo "gpu_check.sh: nvidia-smi finds no GPU" >&2; exit 1; }

if compgen -G "$BUNDLE/*.deb" >/dev/null; then
    step "bundle ($BUNDLE)"
    exports=$(bash "$ROOT/tools/gpu_bundle.sh" unpack "$BUNDLE" "${BUNDLE_PREFIX:-/tmp/fa-bundle}")
    eval "$exports"
    echo "$exports"
fi

step "build ($BUILD)"
run cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHATTN_CUDA=ON
run cmake --build "$BUILD" -j"$JOBS"
FA="$BUILD/tools/flashattn"
run "$FA" devices

# OpenCL is required only where a platform exists (clinfo, else what the library sees).
REQUIRE=cpu,cuda
if command -v clinfo >/dev/null 2>&1; then
    if clinfo -l 2>/dev/null | grep -q 'Platform'; then REQUIRE=cpu,opencl,cuda; fi
elif [ "$DRY_RUN" != 1 ] && "$FA" devices --backend opencl | grep -Eq '^opencl: [1-9]'; then
    REQUIRE=cpu,opencl,cuda
fi

if [ "${SUITE:-1}" != 0 ]; then
    step "test suite (FLASHATTN_REQUIRE_BACKENDS=$REQUIRE)"
    run env -C "$BUILD" FLASHATTN_REQUIRE_BACKENDS=$REQUIRE FLASHATTN_REQUIRE_NVRTC=1 \
        ctest -j"$JOBS" --output-on-failure
fi

if [ "${SANITIZE:-1}" != 0 ]; then
    step "compute-sanitizer"
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ "$DRY_RUN" != 1 ] && [ ! -x "$SAN" ]; then
        echo "gpu_check.sh: compute-sanitizer not found (CUDA Toolkit bin/ not on PATH)" >&2
        exit 1
    fi
    for tool in memcheck racecheck synccheck; do
        for suite in test_forward test_backward; do
            for case in mha97 q113_k17_br gqa_padded; do
                echo "-- $tool: $suite cuda --case=$case"
                run env FLASHATTN_REQUIRE_BACKENDS=cuda "$SAN" --tool "$tool" --error-exitcode 1 \
                    "$BUILD/tests/$suite" cuda --case="$case"
            done
        done
        # the decode path: split-KV and its merge, a shuffled shared page pool, varlen split
        for case in "split3 f32" "paged3 f16" "varlen f16 causal-br split"; do
            echo "-- $tool: test_decode cuda --case=$case"
            run env FLASHATTN_REQUIRE_BACKENDS=cuda "$SAN" --tool "$tool" --error-exitcode 1 \
                "$BUILD/tests/test_decode" cuda --case="$case"
        done
        # block-sparse: CUDA cores, tensor cores with full lists, a split forward
        for case in "f32 odd 113x203" "f16 255x127" "f16 97x500"; do
            echo "-- $tool: test_block_sparse cuda --case=$case"
            run env FLASHATTN_REQUIRE_BACKENDS=cuda "$SAN" --tool "$tool" --error-exitcode 1 \
                "$BUILD/tests/test_block_sparse" cuda --case="$case"
        done
    done
fi

if [ "${DECODE:-1}" != 0 ]; then
    # issue 14's decode tables on the GPU: split-KV on / off and paged / contiguous, B 1 and 8
    for backend in cuda $([ "$REQUIRE" = cpu,opencl,cuda ] && echo opencl); do
        step "decode benchmark, $backend (tools/bench_decode.sh)"
        run_to "$BUILD/bench_decode_$backend.md" env BENCH_DECODE_ARGS=--quiet \
            bash "$ROOT/tools/bench_decode.sh" "$FA" "$backend" 131072
    done
fi

if [ "${AB:-1}" != 0 ]; then
    # issue 38's A/B: the tensor-core forward as it is, then pipelined (the same points)
    for pipeline in 0 1; do
        step "tensor-core forward, FLASHATTN_CUDA_PIPELINE=$pipeline"
        run_to "$BUILD/bench_pipeline_$pipeline.md" env FLASHATTN_CUDA_PIPELINE=$pipeline \
            "$FA" bench --backend cuda --dtype f16,bf16 --dim 64,128 --batch 4 --heads 16 \
            --seq-list 256,1024,4096,16384 --mask none,bottom-right --repeat 9 \
            --check-max-seq 256 --quiet
    done
fi

if [ "${BENCH:-1}" != 0 ]; then
    step "benchmark (tools/bench_torch.py)"
    run_to "$BUILD/bench_torch.md" python3 "$ROOT/tools/bench_torch.py" --flashattn "$FA"
fi
if [ "${PYTEST:-1}" != 0 ]; then
    step "python: torch CUDA tensors (tests/python/test_cuda_tensors.py)"
    run env FLASHATTN_LIBRARY="$BUILD/libflashattn.so" PYTHONPATH="$ROOT/python" \
        "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider -r s \
        "$ROOT/tests/python/test_cuda_tensors.py" "$ROOT/tests/python/test_cuda_interop.py"
fi
skipped=""
for v in SUITE SANITIZE DECODE AB BENCH PYTEST; do
    [ "${!v:-1}" != 0 ] || skipped="$skipped $v=0"
done
if [ "$DRY_RUN" = 1 ]; then
    step "dry run: nothing was run${skipped:+ (skipped:$skipped)}"
else
    step "all GPU checks passed${skipped:+ (skipped:$skipped)}"
fi
