#!/usr/bin/env bash
# gpu_check.sh - the checks owed on a machine with an NVIDIA GPU, in one command:
#   1. configure and build with the CUDA backend required (FLASHATTN_CUDA=ON);
#   2. run the whole test suite with FLASHATTN_REQUIRE_BACKENDS=cpu,cuda (plus opencl when an
#      OpenCL platform exists), so a missing driver or NVRTC fails instead of skipping;
#   3. compute-sanitizer memcheck, racecheck and synccheck on a tiny subset of the forward and
#      the backward suites (both CUDA paths: f32 runs the CUDA cores, f16/bf16 tensor cores);
#   4. tools/bench_torch.py: our forward against PyTorch SDPA (flash) and a naive attention.
#
# usage: tools/gpu_check.sh [BUILD_DIR]     (default: build-gpu; BENCH=0 skips the benchmark)
# Exit status: non-zero when a build, a test or a sanitizer run fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)

step() { printf '\n==== %s\n' "$*"; }

step "GPU"
nvidia-smi -L || { echo "gpu_check.sh: nvidia-smi finds no GPU" >&2; exit 1; }

step "build ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHATTN_CUDA=ON
cmake --build "$BUILD" -j"$JOBS"
FA="$BUILD/tools/flashattn"
"$FA" devices

# OpenCL is required only where a platform exists (clinfo, else what the library sees).
REQUIRE=cpu,cuda
if command -v clinfo >/dev/null 2>&1; then
    if clinfo -l 2>/dev/null | grep -q 'Platform'; then REQUIRE=cpu,opencl,cuda; fi
elif "$FA" devices --backend opencl | grep -Eq '^opencl: [1-9]'; then
    REQUIRE=cpu,opencl,cuda
fi

step "test suite (FLASHATTN_REQUIRE_BACKENDS=$REQUIRE)"
(cd "$BUILD" && FLASHATTN_REQUIRE_BACKENDS=$REQUIRE FLASHATTN_REQUIRE_NVRTC=1 \
    ctest -j"$JOBS" --output-on-failure)

step "compute-sanitizer"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$SAN" ]; then
    echo "gpu_check.sh: compute-sanitizer not found (CUDA Toolkit bin/ not on PATH)" >&2
    exit 1
fi
for tool in memcheck racecheck synccheck; do
    for suite in test_forward test_backward; do
        for case in mha97 q113_k17_br gqa_padded; do
            echo "-- $tool: $suite cuda --case=$case"
            FLASHATTN_REQUIRE_BACKENDS=cuda "$SAN" --tool "$tool" --error-exitcode 1 \
                "$BUILD/tests/$suite" cuda --case="$case"
        done
    done
done

if [ "${BENCH:-1}" != 0 ]; then
    step "benchmark (tools/bench_torch.py)"
    python3 "$ROOT/tools/bench_torch.py" --flashattn "$FA" | tee "$BUILD/bench_torch.md"
fi
step "all GPU checks passed"
