#!/usr/bin/env bash
# no_opencl_test.sh - the library built with the OpenCL backend links no OpenCL: the ICD loader
# is loaded with dlopen at run time (backends/opencl/cl_loader.c). Checks that
#   - libflashattn.so has no libOpenCL among its NEEDED entries, libflashattn.a calls no cl*
#     function directly, and flashattn.pc's Libs.private has no -lOpenCL;
#   - with the loader made unavailable (FLASHATTN_OPENCL_LIBRARY=/nonexistent) a program that
#     links only the library runs a forward on the CPU backend (AUTO picks it) without libOpenCL
#     ever being loaded (LD_DEBUG=files, where the dynamic loader has it), and the opencl
#     backend says why it is unavailable: in the program, in `flashattn devices`, and to an
#     explicit --backend opencl, while `flashattn run --backend cpu --check` passes.
#
#   no_opencl_test.sh LIBFLASHATTN_SO LIBFLASHATTN_A FLASHATTN_PC CLI HELLO
set -u
so=$1
archive=$2
pc=$3
cli=$4
hello=$5
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset FLASHATTN_BACKEND FLASHATTN_DEVICE FLASHATTN_OPENCL_LIBRARY
missing=/nonexistent/libOpenCL.so.1
reason="no OpenCL ICD loader (FLASHATTN_OPENCL_LIBRARY=$missing): $missing: cannot open"

ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() {
    echo "FAIL $1"
    [ -f "$tmp/out" ] && sed 's/^/     /' "$tmp/out" | head -30
    failed=$((failed + 1))
}
# check NAME COMMAND...: passes when the command succeeds; its output is in $tmp/out.
check() {
    local name=$1
    shift
    if "$@" >"$tmp/out" 2>&1; then ok "$name"; else fail "$name"; fi
}

# ---- what the build links ----
readelf -d "$so" >"$tmp/out" 2>&1 || { fail "readelf -d $so"; exit 1; }
if grep -q NEEDED "$tmp/out" && ! grep NEEDED "$tmp/out" | grep -qi libOpenCL; then
    ok "libflashattn.so has no libOpenCL NEEDED ($(grep NEEDED "$tmp/out" |
        sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' '))"
else
    fail "libflashattn.so must not need libOpenCL"
fi
nm "$archive" >"$tmp/out" 2>&1 || { fail "nm $archive"; exit 1; }
if grep -qE '^ +U cl[A-Z]' "$tmp/out"; then
    grep -E '^ +U cl[A-Z]' "$tmp/out" >"$tmp/undefined"
    mv "$tmp/undefined" "$tmp/out"
    fail "libflashattn.a calls OpenCL directly"
else
    ok "libflashattn.a calls no cl* function directly"
fi
grep '^Libs' "$pc" >"$tmp/out"
if grep -qi opencl "$tmp/out"; then
    fail "flashattn.pc links OpenCL"
else
    ok "flashattn.pc: $(grep '^Libs.private' "$pc")"
fi

# ---- a machine without the loader ----
# The library alone (hello links only libflashattn.so): AUTO passes over OpenCL, the CPU runs.
FLASHATTN_OPENCL_LIBRARY=$missing LD_DEBUG=files "$hello" >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '^backend cpu' "$tmp/out"; then
    ok "hello without the loader: the CPU backend runs"
else
    fail "hello without the loader should run on the CPU (exit $rc)"
fi
if ! grep -q 'file=' "$tmp/out"; then
    echo "skip LD_DEBUG=files reports nothing here: libOpenCL's absence not traced"
elif grep -q 'calling init: .*libOpenCL' "$tmp/out"; then
    fail "hello without the loader still loaded libOpenCL"
else
    # The trace must see the loader when it is there, or its silence proves nothing.
    FLASHATTN_BACKEND=opencl LD_DEBUG=files "$hello" >"$tmp/out" 2>&1
    if grep -q 'calling init: .*libOpenCL' "$tmp/out"; then
        ok "libOpenCL is never loaded without the loader (and is with it, for opencl)"
    elif ldconfig -p 2>/dev/null | grep -q 'libOpenCL\.so\.1 '; then
        fail "hello on opencl did not load libOpenCL: the LD_DEBUG check cannot see it"
    else
        ok "libOpenCL is never loaded (no loader installed to compare with)"
    fi
fi
FLASHATTN_OPENCL_LIBRARY=$missing FLASHATTN_BACKEND=opencl "$hello" >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -qF "$reason" "$tmp/out"; then
    ok "an OpenCL context without the loader fails with the reason"
else
    fail "an OpenCL context without the loader should fail with \"$reason\" (exit $rc)"
fi

# The program: devices says why, a CPU run with --check passes.
FLASHATTN_OPENCL_LIBRARY=$missing "$cli" devices >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qF "opencl: unavailable: $reason" "$tmp/out" &&
    grep -q '^cpu: 1 device' "$tmp/out"; then
    ok "devices: $(grep '^opencl:' "$tmp/out")"
else
    fail "devices should list the CPU and say why opencl is unavailable (exit $rc)"
fi
check "run --backend cpu --check without the loader" env FLASHATTN_OPENCL_LIBRARY=$missing \
    "$cli" run --backend cpu --heads 2 --seq 33 --dim 16 --check
FLASHATTN_OPENCL_LIBRARY=$missing "$cli" run --backend opencl --heads 2 --seq 33 --dim 16 \
    >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -qF "$reason" "$tmp/out"; then
    ok "run --backend opencl without the loader fails with the reason"
else
    fail "run --backend opencl without the loader should fail with the reason (exit $rc)"
fi

echo "no_opencl: $passed passed, $failed failed"
[ $failed -eq 0 ]
