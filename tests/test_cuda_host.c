/*
 * test_cuda_host.c - the CUDA backend's host rules that need no GPU: which NVRTC a driver
 * version can take (cuDriverGetVersion's number is a parameter, so any driver can be faked),
 * PTX only where the driver can JIT it, an architecture NVRTC dropped (sm_70 under NVRTC 13)
 * said clearly, and the 48 KiB shared-memory opt-in counting static memory.
 *
 * usage: test_cuda_host   (exit 77 when NVRTC is missing, unless FLASHATTN_REQUIRE_NVRTC=1 or
 *                          FLASHATTN_REQUIRE_BACKENDS names cuda)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cuda_internal.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK

/* The opt-in is needed past 48 KiB of static and dynamic shared memory together. */
static void test_shared_optin(void **state)
{
    (void)state;
    assert_false(fa__cu_needs_optin(48 * 1024, 0));
    assert_true(fa__cu_needs_optin(48 * 1024 + 1, 0));
    assert_false(fa__cu_needs_optin(40 * 1024, 8 * 1024));
    assert_true(fa__cu_needs_optin(40 * 1024, 8 * 1024 + 16)); /* dynamic alone fits: not enough */
    assert_true(fa__cu_needs_optin(0, 48 * 1024 + 4));
}

/* CUDA 13 output on a CUDA 12.4 driver is refused with the fix; a newer minor loads as CUBIN
 * only; an equal or older NVRTC loads and JITs; no driver (compile only) takes anything. */
static void test_driver_takes(void **state)
{
    (void)state;
    char why[512] = "";
    bool ptx = true;
    assert_false(fa__cu_driver_takes(12040, 13000, &ptx, why, sizeof why));
    assert_non_null(strstr(why, "CUDA 12.4"));
    assert_non_null(strstr(why, "580"));
    assert_non_null(strstr(why, "FLASHATTN_NVRTC"));
    assert_true(fa__cu_driver_takes(13000, 13020, &ptx, why, sizeof why));
    assert_false(ptx);
    assert_true(fa__cu_driver_takes(13020, 13000, &ptx, why, sizeof why));
    assert_true(ptx);
    assert_true(fa__cu_driver_takes(13000, 12080, &ptx, why, sizeof why));
    assert_true(ptx);
    assert_true(fa__cu_driver_takes(0, 13000, &ptx, why, sizeof why));
    assert_true(ptx);
}

/* The search picks only an NVRTC the (fake) driver can take: with an 11.8 driver none of 12 or
 * 13 suits, and the reason names each candidate's problem. */
static void test_nvrtc_for_old_driver(void **state)
{
    (void)state;
    fa__nvrtc_api nv;
    char why[2048] = "";
    assert_int_equal(fa__nvrtc_load(&nv, 11080, why, sizeof why), FA_STATUS_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(why, "CUDA 11.8"));
    assert_int_equal(fa__nvrtc_load(&nv, 99000, why, sizeof why), OK);
    assert_true(nv.version >= 12000);
    assert_true(nv.ptx_ok);
    assert_true(nv.library[0] != '\0');
    int newest = nv.version;
    /* A driver one major older than the newest NVRTC here: an older NVRTC or a clear refusal. */
    int older = (newest / 1000 - 1) * 1000 + 90;
    fa_status st = fa__nvrtc_load(&nv, older, why, sizeof why);
    if (st == OK)
        assert_true(nv.version / 1000 <= older / 1000);
    else
        assert_non_null(strstr(why, "cannot load"));
}

/* The smallest kernel (the merge) for an arch; msg is the heap log or NULL. */
static fa_status compile_merge(const fa__nvrtc_api *nv, const char *arch, char **msg)
{
    char *image = NULL;
    size_t size = 0;
    fa_status st = fa__cu_compile(nv, arch, FA__KERNEL_MERGE,
                                  "-DHEAD_DIM=64 -DBLOCK_R=16 -DBLOCK_C=16 -DDTYPE=0 -DMASK=0 "
                                  "-DWG_SIZE=64 -DTPR=4 -DPARTS_DTYPE=0",
                                  &image, &size, msg);
    free(image);
    return st;
}

/* An arch newer than NVRTC knows compiles to PTX only where the driver can JIT it; an arch
 * older than NVRTC's oldest (sm_70 under NVRTC 13) names NVRTC's oldest and the way out. */
static void test_arch_choice(void **state)
{
    (void)state;
    fa__nvrtc_api nv;
    char why[1024] = "", *msg = NULL;
    assert_int_equal(fa__nvrtc_load(&nv, 0, why, sizeof why), OK);
    assert_int_equal(compile_merge(&nv, "sm_99", &msg), OK);
    free(msg);
    nv.ptx_ok = false; /* a driver older than this NVRTC */
    assert_int_equal(compile_merge(&nv, "sm_99", &msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "cannot JIT"));
    free(msg);
    nv.ptx_ok = true;
    fa_status st = compile_merge(&nv, "sm_70", &msg);
    if (nv.version >= 13000) {
        assert_int_equal(st, FA_STATUS_KERNEL_BUILD_ERROR);
        assert_non_null(msg);
        assert_non_null(strstr(msg, "sm_70 is not supported by NVRTC"));
        assert_non_null(strstr(msg, "oldest architecture is sm_75"));
    } else {
        assert_int_equal(st, OK);
    }
    free(msg);
}

int main(void)
{
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_shared_optin),
        cmocka_unit_test(test_driver_takes),
    };
    const struct CMUnitTest nvrtc_tests[] = {
        cmocka_unit_test(test_nvrtc_for_old_driver),
        cmocka_unit_test(test_arch_choice),
    };
    int failed = cmocka_run_group_tests_name("cuda host rules", host_tests, NULL, NULL);
    fa__nvrtc_api nv;
    char why[2048] = "";
    if (fa__nvrtc_load(&nv, 0, why, sizeof why) == OK)
        return failed + cmocka_run_group_tests_name("cuda NVRTC choice", nvrtc_tests, NULL, NULL);
    const char *req = getenv("FLASHATTN_REQUIRE_BACKENDS");
    const char *nvrtc = getenv("FLASHATTN_REQUIRE_NVRTC");
    if ((req && strstr(req, "cuda")) || (nvrtc && strcmp(nvrtc, "1") == 0)) {
        fprintf(stderr, "FAIL: NVRTC is required but missing: %s\n", why);
        return 1;
    }
    fprintf(stderr, "SKIP: the NVRTC choice tests: %s\n", why);
    return failed ? 1 : HARNESS_EXIT_SKIPPED;
}
