#!/usr/bin/env bash
# bootstrap.sh - installs what building and testing flashattn needs, with apt-get, only when it
# is missing; then configures and builds a tree. Called by run.sh and test.sh; safe to run any
# number of times.
#
#   bootstrap.sh [BUILD_DIR [CMAKE_ARGS...]]     (default build/, Release)
#
# FLASHATTN_BUILD_TARGETS: the targets to build (space-separated; default: all of them).
#
#   cmake, a C compiler, pkg-config     the build and the install test
#   ocl-icd-opencl-dev, opencl-headers  the OpenCL backend (ICD loader and headers)
#   pocl-opencl-icd                     an OpenCL device on machines without a GPU (CI)
#   libcmocka-dev                       the test suites
#   oclgrind                            the OpenCL race / uninitialised-read checks
#   gnuplot-nox                         `flashattn bench --plot`
#   libclblast-dev                      `flashattn bench`'s tuned-GEMM naive baseline (CLBlast);
#                                       the build works without it and the bench says so
#   clinfo                              to see what OpenCL finds when something is wrong
#   clang, libclang-rt-dev              the libFuzzer harnesses (tests/fuzz/fuzz.sh)
#   clang-15, libclc-15                 the OpenCL kernels compiled for AMD and NVIDIA GPUs without
#                                       a GPU (tools/cl_gpu_check.sh, ctest cl_gpu_compile)
#   openmpi-bin, libopenmpi-dev         ring attention over MPI (dist/, flashattn_ring): the
#                                       library, `flashattn ring` and the tests run by mpirun
# The CUDA Toolkit is not installed here: the build uses it when it is present (nvcc on PATH or
# /usr/local/cuda) and builds without it otherwise.
set -eu
cd "$(dirname "$0")/.."

packages=(cmake gcc make pkg-config ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
    libcmocka-dev oclgrind gnuplot-nox libclblast-dev clinfo clang libclang-rt-dev clang-15
    libclc-15)
# Ring attention over MPI (dist/, tests/ring/).
packages+=(openmpi-bin libopenmpi-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# CUDA: the Toolkit's usual home, when nvcc is not on PATH already.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi

build=${1:-build}
shift || true
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
grep "flashattn backends" "$build/configure.log" || true
targets=()
for t in ${FLASHATTN_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
echo "bootstrap: building ${FLASHATTN_BUILD_TARGETS:-every target} in $build/"
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
