#!/usr/bin/env bash
# install_test.sh - installs the build tree into a temporary prefix and builds a consumer
# project against it twice: with find_package(flashattn) (shared and static targets) and with
# pkg-config (shared, and static with --static). Every program must run and pass, and neither
# the installed library nor `pkg-config --static` may name OpenCL (it is loaded at run time).
# With MPIEXEC (the build has flashattn_ring), also find_package(flashattn COMPONENTS ring):
# examples/ring_attention.c built against the install and run on 2 ranks.
#
#   install_test.sh BUILD_DIR SOURCE_DIR C_COMPILER [MPIEXEC]
set -eu
build=$1
src=$2
cc=$3
mpiexec=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/flashattn.h bin/flashattn; do
    [ -e "$prefix/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done
"$prefix/bin/flashattn" --version

echo "-- find_package(flashattn)"
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer_shared"
"$tmp/consumer/consumer_static"

echo "-- pkg-config flashattn"
libdir=$(find "$prefix" -name flashattn.pc -printf '%h\n' | head -n 1)
[ -n "$libdir" ] || { echo "FAIL: flashattn.pc is not installed"; exit 1; }
export PKG_CONFIG_PATH=$libdir
# The OpenCL ICD loader is loaded at run time: neither the flags nor the library name it.
if pkg-config --static --libs flashattn | grep -qi opencl ||
    readelf -d "$(pkg-config --variable=libdir flashattn)/libflashattn.so" | grep NEEDED |
    grep -qi libOpenCL; then
    echo "FAIL: the installed library links OpenCL ($(pkg-config --static --libs flashattn))"
    exit 1
fi
# shellcheck disable=SC2046 # pkg-config's output is a list of flags
"$cc" -std=c11 -o "$tmp/pc_shared" "$src/tests/install/consumer/consumer.c" \
    $(pkg-config --cflags --libs flashattn) -lm -Wl,-rpath,"$(pkg-config --variable=libdir flashattn)"
"$tmp/pc_shared"
# shellcheck disable=SC2046
"$cc" -std=c11 -o "$tmp/pc_static" "$src/tests/install/consumer/consumer.c" \
    $(pkg-config --cflags flashattn) "$(pkg-config --variable=libdir flashattn)/libflashattn.a" \
    $(pkg-config --static --libs flashattn | sed 's/-lflashattn\b//')
"$tmp/pc_static"
if [ -z "$mpiexec" ]; then
    echo "install: 4 passed, 0 failed"
    exit 0
fi
echo "-- find_package(flashattn COMPONENTS ring)"
for f in include/flashattn_ring.h include/flashattn_ring_mpi.h; do
    [ -e "$prefix/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done
cmake -S "$src/tests/install/consumer_ring" -B "$tmp/consumer_ring" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" -DRING_EXAMPLE="$src/examples/ring_attention.c" >/dev/null
cmake --build "$tmp/consumer_ring" >/dev/null
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$tmp/consumer_ring/ring_consumer" cpu
echo "install: 5 passed, 0 failed"
