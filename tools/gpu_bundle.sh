#!/usr/bin/env bash
# gpu_bundle.sh - what tools/gpu_check.sh needs on a GPU machine that cannot fetch packages:
# cmocka (the suites), the OpenCL ICD loader and headers (the opencl backend), pkg-config (the
# install test) and clinfo, as Debian packages (x86-64) fetched beforehand.
#
#   tools/gpu_bundle.sh fetch [DIR]            where apt works: download the .deb files into DIR
#                                              (default .bundle, which .gitignore ignores; carry
#                                              it to the GPU machine)
#   tools/gpu_bundle.sh unpack DIR PREFIX      on the GPU machine: unpack them into PREFIX (never
#                                              into /), register NVIDIA's OpenCL driver there when
#                                              the driver has one, and print the exports to eval
#
# tools/gpu_check.sh calls `unpack` itself when .bundle holds packages. The packages' libraries
# need a glibc at least as new as the fetching machine's (Debian 12: 2.36).
set -euo pipefail

PACKAGES=(libcmocka0 libcmocka-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
          opencl-clhpp-headers pkgconf pkgconf-bin libpkgconf3 clinfo)

usage() {
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

fetch() {
    local dir=$1
    mkdir -p "$dir"
    if ! (cd "$dir" && apt-get download "${PACKAGES[@]}"); then
        echo "gpu_bundle.sh: apt-get download failed (run apt-get update first?)" >&2
        exit 1
    fi
    echo "gpu_bundle.sh: $(find "$dir" -name '*.deb' | wc -l) packages," \
        "$(du -sh "$dir" | cut -f1) in $dir" >&2
}

# The first libnvidia-opencl.so.1 the dynamic loader or the usual driver folders know, or "".
nvidia_opencl() {
    local lib
    lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF; exit}')
    if [ -n "$lib" ]; then
        echo "$lib"
        return
    fi
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
             /usr/lib; do
        if [ -e "$d/libnvidia-opencl.so.1" ]; then
            echo "$d/libnvidia-opencl.so.1"
            return
        fi
    done
}

unpack() {
    local dir=$1 prefix=$2 deb
    local debs=("$dir"/*.deb)
    if [ ! -e "${debs[0]}" ]; then
        echo "gpu_bundle.sh: no .deb files in $dir" \
            "(run 'tools/gpu_bundle.sh fetch' where apt works)" >&2
        exit 1
    fi
    mkdir -p "$prefix"
    for deb in "${debs[@]}"; do
        dpkg-deb -x "$deb" "$prefix"
    done
    local lib=$prefix/usr/lib/x86_64-linux-gnu vendors=$prefix/etc/OpenCL/vendors nv
    # The loader reads this folder instead of /etc/OpenCL/vendors: the system's drivers too.
    mkdir -p "$vendors"
    if [ -d /etc/OpenCL/vendors ]; then
        find /etc/OpenCL/vendors -maxdepth 1 -name '*.icd' -exec cp {} "$vendors/" \;
    fi
    nv=$(nvidia_opencl)
    if [ -n "$nv" ]; then
        echo "$nv" >"$vendors/nvidia.icd"
        echo "gpu_bundle.sh: NVIDIA's OpenCL driver $nv registered in $vendors" >&2
    else
        echo "gpu_bundle.sh: the driver has no libnvidia-opencl.so.1: no NVIDIA OpenCL" >&2
    fi
    echo "export CMAKE_PREFIX_PATH=\"$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}\""
    echo "export LD_LIBRARY_PATH=\"$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
    echo "export PATH=\"$prefix/usr/bin:\$PATH\""
    echo "export OCL_ICD_VENDORS=\"$vendors\" OPENCL_VENDOR_PATH=\"$vendors\""
}

case "${1:-}" in
fetch) fetch "${2:-.bundle}" ;;
unpack) [ $# -eq 3 ] || usage; unpack "$2" "$3" ;;
*) usage ;;
esac
