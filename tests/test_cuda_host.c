/*
 * test_cuda_host.c - the CUDA backend's host rules that need no GPU: which NVRTC a driver
 * version can take (cuDriverGetVersion's number is a parameter, so any driver can be faked),
 * PTX only where the driver can JIT it, an architecture NVRTC dropped (sm_70 under NVRTC 13)
 * said clearly, the 48 KiB shared-memory opt-in counting static memory, and the module cache
 * (one compile per program and options) on a faked driver, and the FLASHATTN_CUDA_PIPELINE
 * switch.
 *
 * usage: test_cuda_host   (exit 77 when NVRTC is missing, unless FLASHATTN_REQUIRE_NVRTC=1 or
 *                          FLASHATTN_REQUIRE_BACKENDS names cuda)
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
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

/* ---- the module cache, on a faked driver (real NVRTC) ------------------------------------- */
static int fake_loads, fake_unloads;

static CUresult fake_load(CUmodule *module, const void *image)
{
    (void)image;
    fake_loads++;
    *module = (CUmodule)(uintptr_t)(0x1000 * fake_loads);
    return CUDA_SUCCESS;
}

static CUresult fake_unload(CUmodule module)
{
    (void)module;
    fake_unloads++;
    return CUDA_SUCCESS;
}

/* A function handle that says which module and entry it came from. */
static CUresult fake_function(CUfunction *fn, CUmodule module, const char *name)
{
    *fn = (CUfunction)((uintptr_t)module + strlen(name));
    return CUDA_SUCCESS;
}

static CUresult fake_attribute(int *value, CUfunction_attribute attr, CUfunction fn)
{
    (void)fn;
    *value = attr == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
    return CUDA_SUCCESS;
}

/* Entry points of one program with the same options share one compile and module (the
 * backward's dQ and dK/dV passes at Br = Bc); other options or another program compile again;
 * the module is unloaded once, by its owner. */
static void test_module_per_program(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    char why[1024] = "";
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, "sm_80", why, sizeof why),
                     OK);
    fa__cu_state s;
    memset(&s, 0, sizeof s);
    assert_int_equal(fa__nvrtc_load(&s.nvrtc, 0, why, sizeof why), OK);
    s.have_nvrtc = 1;
    fa__format(s.arch, sizeof s.arch, "sm_80");
    s.api.ModuleLoadData = fake_load;
    s.api.ModuleUnload = fake_unload;
    s.api.ModuleGetFunction = fake_function;
    s.api.FuncGetAttribute = fake_attribute;
    const char *a = "-DHEAD_DIM=32 -DBLOCK_R=16 -DBLOCK_C=16 -DDTYPE=0 -DMASK=0 -DWG_SIZE=64 "
                    "-DTPR=4",
               *b = "-DHEAD_DIM=32 -DBLOCK_R=8 -DBLOCK_C=8 -DDTYPE=0 -DMASK=0 -DWG_SIZE=32 "
                    "-DTPR=4";
    fa__cu_module *dq = NULL, *dkdv = NULL, *again = NULL, *pre = NULL, *dq_b = NULL;
    fake_loads = fake_unloads = 0;
    assert_int_equal(fa__cu_module_get(ctx, &s, FA__KERNEL_BWD_DQ, a, &dq), OK);
    assert_int_equal(fake_loads, 1);
    assert_int_equal(fa__cu_module_get(ctx, &s, FA__KERNEL_BWD_DKDV, a, &dkdv), OK);
    assert_int_equal(fake_loads, 1); /* shared: no second compile */
    assert_ptr_equal(dkdv->module, dq->module);
    assert_true(dkdv->kernel != dq->kernel); /* each entry its own function */
    assert_int_equal(fa__cu_module_get(ctx, &s, FA__KERNEL_BWD_DQ, a, &again), OK);
    assert_ptr_equal(again, dq);
    assert_int_equal(fa__cu_module_get(ctx, &s, FA__KERNEL_BWD_PRE, a, &pre), OK);
    assert_int_equal(fake_loads, 2); /* flash_bwd_rows.cu: another program */
    assert_int_equal(fa__cu_module_get(ctx, &s, FA__KERNEL_BWD_DQ, b, &dq_b), OK);
    assert_int_equal(fake_loads, 3);
    assert_true(dq_b->module != dq->module);
    fa__cu_modules_release(&s);
    assert_int_equal(fake_unloads, 3); /* the borrowed module is not unloaded twice */
    fa_context_destroy(ctx);
}

/* The forward planned for sm_80, f16, d 64 (tensor cores) under FLASHATTN_CUDA_PIPELINE=value
 * (NULL: unset): the plan's status, and its launch's pipeline flag in *pipeline. */
static fa_status plan_with_pipeline(const char *value, int *pipeline, char *error, size_t size)
{
    fa_context *ctx = NULL;
    char why[256] = "";
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, "sm_80", why, sizeof why),
                     OK);
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 4, 4, 512, 512, 64), OK);
    if (value)
        assert_int_equal(setenv("FLASHATTN_CUDA_PIPELINE", value, 1), 0);
    else
        assert_int_equal(unsetenv("FLASHATTN_CUDA_PIPELINE"), 0);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(ctx, &p, &plan);
    assert_int_equal(unsetenv("FLASHATTN_CUDA_PIPELINE"), 0);
    *pipeline = plan ? plan->launches[0].variant.pipeline : -1;
    if (plan)
        assert_true(plan->launches[0].variant.mma);
    fa__format(error, size, "%s", st == OK ? "" : fa_context_last_error(ctx));
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
    return st;
}

/* FLASHATTN_CUDA_PIPELINE: 1 plans the pipelined tensor-core forward (with its larger shared
 * memory), 0, empty and unset today's path, anything else is refused with the variable named. */
static void test_pipeline_switch(void **state)
{
    (void)state;
    char error[512];
    int pipeline = -1;
    assert_int_equal(plan_with_pipeline(NULL, &pipeline, error, sizeof error), OK);
    assert_int_equal(pipeline, 0);
    assert_int_equal(plan_with_pipeline("0", &pipeline, error, sizeof error), OK);
    assert_int_equal(pipeline, 0);
    assert_int_equal(plan_with_pipeline("", &pipeline, error, sizeof error), OK);
    assert_int_equal(pipeline, 0);
    assert_int_equal(plan_with_pipeline("1", &pipeline, error, sizeof error), OK);
    assert_int_equal(pipeline, 1);
    assert_int_equal(plan_with_pipeline("yes", &pipeline, error, sizeof error),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(error, "FLASHATTN_CUDA_PIPELINE=\"yes\""));
}

int main(void)
{
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_shared_optin),
        cmocka_unit_test(test_driver_takes),
        cmocka_unit_test(test_pipeline_switch),
    };
    const struct CMUnitTest nvrtc_tests[] = {
        cmocka_unit_test(test_nvrtc_for_old_driver),
        cmocka_unit_test(test_arch_choice),
        cmocka_unit_test(test_module_per_program),
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
