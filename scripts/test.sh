#!/usr/bin/env bash
# test.sh - the whole test suite: set up and build, run every ctest suite with the cpu and
# opencl backends required (a missing OpenCL device is a failure, not a skip), then build a
# second tree with AddressSanitizer + UndefinedBehaviorSanitizer and run the suites there too,
# the emulated CUDA kernel under ThreadSanitizer, and the libFuzzer harnesses (tests/fuzz/) for
# FLASHATTN_FUZZ_SECONDS each (default 20) where clang can build them. The Python package's
# tests run after the first tree's suites (scripts/python_test.sh: its venv, torch included).
set -eu
cd "$(dirname "$0")/.."
export FLASHATTN_REQUIRE_BACKENDS=${FLASHATTN_REQUIRE_BACKENDS:-cpu,opencl}
# bootstrap.sh installs clang-15 and libclc-15: the GPU compile check (cl_gpu_compile) must run.
export FLASHATTN_REQUIRE_CLANG_GPU=${FLASHATTN_REQUIRE_CLANG_GPU:-1}
unset FLASHATTN_BACKEND FLASHATTN_DEVICE FLASHATTN_BLOCK_R FLASHATTN_BLOCK_C FLASHATTN_KERNEL_DIR \
    FLASHATTN_NVRTC_ARCHS FLASHATTN_NVRTC_SAMPLE
jobs=$(nproc)

bash scripts/bootstrap.sh
# Ring attention over MPI: bootstrap.sh installs Open MPI, so its tests must have been built.
[ -x build/tests/ring/test_ring_mpi ] ||
    { echo "test.sh: flashattn_ring was not built (CMake found no MPI)"; exit 1; }
# NVRTC comes with the CUDA Toolkit: where the Toolkit is, its compile tests must run.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    export FLASHATTN_REQUIRE_NVRTC=1
fi

echo "== test suite (build/)"
(cd build && ctest -j"$jobs" --output-on-failure)

# ---- the Python package (python/flashattn, tests/python): its own venv, torch required ----
echo "== Python package (tests/python, pytest)"
bash scripts/python_test.sh

echo "== test suite under ASan + UBSan (build-asan/)"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
bash scripts/bootstrap.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$san" \
    -DCMAKE_CXX_FLAGS="$san" -DFLASHATTN_INSTALL_TEST=OFF
# Leaks are checked with suppressions for the OpenCL runtime's own one-time allocations.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Oclgrind preloads its own OpenCL runtime, which the ASan runtime refuses to follow; the GPU
# compile check runs clang, not the library, so the first tree's run covers it. NVRTC compiles
# here for sm_80 alone, one module per program and kernel path (8 of its 131; every arch is
# still planned): what this tree checks is the host code around NVRTC, the same for every
# module, and the first tree compiled them all (under ASan NVRTC's allocations go through the
# sanitizer: 90 s for the 131).
(cd build-asan && FLASHATTN_NVRTC_ARCHS=sm_80 FLASHATTN_NVRTC_SAMPLE=1 ctest -j"$jobs" \
    --output-on-failure -LE 'oclgrind|gpu_compile')

# The CUDA kernel, emulated on the host (tests/cuda_emu/), under ThreadSanitizer: a missing
# __syncthreads shows as a data race on shared memory. Only where the CUDA backend is built.
if [ -x build/tests/test_cuda_emu ]; then
    echo "== the emulated CUDA kernel under ThreadSanitizer (build-tsan/)"
    mkdir -p build-tsan
    cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-fsanitize=thread \
        -DCMAKE_CXX_FLAGS=-fsanitize=thread -DFLASHATTN_OPENCL=OFF -DFLASHATTN_INSTALL_TEST=OFF \
        >build-tsan/configure.log 2>&1 || { cat build-tsan/configure.log; exit 1; }
    cmake --build build-tsan -j"$jobs" --target test_cuda_emu test_cuda_emu_seq \
        test_cuda_emu_sparse
    (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest -j"$jobs" --no-tests=error \
        --output-on-failure -R '^cuda_emu(_seq|_sparse)?$')
fi

# The fuzz harnesses (tests/fuzz/): built with clang + libFuzzer in build-fuzz/, each run for a
# bounded time from its seed corpus; a crash or a violated property fails the suite. The ctest
# cases above already replayed the corpus with gcc. Skipped where clang cannot link libFuzzer.
echo "== fuzzing (build-fuzz/)"
fuzz_rc=0
bash tests/fuzz/fuzz.sh build-fuzz || fuzz_rc=$?
if [ "$fuzz_rc" -ne 0 ] && [ "$fuzz_rc" -ne 77 ]; then
    exit "$fuzz_rc"
fi
