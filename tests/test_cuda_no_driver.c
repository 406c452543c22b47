/*
 * test_cuda_no_driver.c - test_cuda's part (b), run with or without NVRTC: without a driver
 * the backend reports BACKEND_UNAVAILABLE with a reason and contexts fail cleanly (with a GPU a
 * context opens instead), FLASHATTN_NVRTC names the only library tried, interop refuses NULL
 * and cpu contexts, planning-only contexts plan forward and backward like the arch would and
 * refuse device work, and the library still runs on the cpu backend.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cuda_internal.h"
#include "flashattn_cuda.h"
#include "harness.h"
#include "test_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (b) No driver: unavailable with a reason; with a GPU the context opens instead. */
void test_no_driver(void **state)
{
    (void)state;
    char why[512] = "";
    int count = -1;
    fa_status st = fa_backend_device_count(FA_BACKEND_CUDA, &count, why, sizeof why);
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CUDA, 0};
    fa_status cst = fa_context_create(&ctx, &opts, why, sizeof why);
    if (st == OK) {
        print_message("a CUDA device is present: checking that a context opens\n");
        assert_true(count > 0);
        assert_int_equal(cst, OK);
        fa_context_destroy(ctx);
        return;
    }
    assert_int_equal(st, FA_STATUS_BACKEND_UNAVAILABLE);
    assert_int_equal(count, 0);
    assert_int_equal(cst, FA_STATUS_BACKEND_UNAVAILABLE);
    assert_null(ctx);
    assert_true(strlen(why) > 10);
    print_message("cuda unavailable, as expected here: %s\n", why);
    fa_device_props props;
    assert_int_equal(fa_backend_device_props(FA_BACKEND_CUDA, 0, &props, why, sizeof why),
                     FA_STATUS_BACKEND_UNAVAILABLE);
    /* Interop without a driver: a clean refusal, not a crash. */
    int fake = 0;
    assert_int_equal(fa_context_create_cuda(&ctx, (CUcontext)(void *)&fake, NULL, why,
                                            sizeof why),
                     FA_STATUS_BACKEND_UNAVAILABLE);
    assert_null(ctx);
}

/* FLASHATTN_NVRTC names the library to use: when it cannot be loaded, NVRTC is unavailable
 * with that reason, never another library found on the search path. */
void test_nvrtc_explicit_path(void **state)
{
    (void)state;
    harness_env saved;
    harness_env_save(&saved, "FLASHATTN_NVRTC");
    setenv("FLASHATTN_NVRTC", "/nonexistent/libnvrtc.so", 1);
    fa__nvrtc_api nv;
    char why[1024] = "";
    fa_status st = fa__nvrtc_load(&nv, 0, why, sizeof why);
    harness_env_restore(&saved);
    assert_int_equal(st, FA_STATUS_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(why, "FLASHATTN_NVRTC=/nonexistent/libnvrtc.so"));
}

void test_interop_null(void **state)
{
    (void)state;
    char why[128] = "";
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create_cuda(NULL, NULL, NULL, why, sizeof why),
                     FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_context_create_cuda(&ctx, NULL, NULL, why, sizeof why),
                     FA_STATUS_NULL_POINTER);
    assert_null(ctx);
    assert_non_null(strstr(why, "CUcontext"));
    fa_buffer *buf = NULL;
    assert_int_equal(fa_buffer_wrap_cuda(NULL, 1, 4, &buf), FA_STATUS_NULL_POINTER);
    /* A cpu context refuses device pointers. */
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    assert_int_equal(fa_buffer_wrap_cuda(ctx, 4096, 4, &buf), FA_STATUS_UNSUPPORTED);
    assert_null(buf);
    fa_context_destroy(ctx);
}

/* A planning-only context plans like a device would, and refuses device work cleanly. */
void test_arch_context(void **state)
{
    (void)state;
    char why[256] = "";
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, "sm_70", why, sizeof why),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(why, "sm_90"));
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, "sm_90", why, sizeof why),
                     OK);
    assert_int_equal(fa_context_backend(ctx), FA_BACKEND_CUDA);
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 4, 16, 16, 4096, 4096,
                                     128),
                     OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    /* Tensor cores: M = 232448 / 2, Bc = 227 -> 64 (the accumulators' register cap at d 128),
     * Br = 128, one warp per 16 rows. */
    assert_int_equal(fa_plan_block_r(plan), 128);
    assert_int_equal(fa_plan_block_c(plan), 64);
    assert_int_equal(fa_plan_work_group_size(plan), 256);
    assert_non_null(strstr(fa_plan_explain(plan), "kernel: tensor cores"));
    fa_plan_destroy(plan);
    /* CUDA cores for f32: M = 58112, Bc = 114 -> 112 (multiple of 8), Br = 112, 4 threads per
     * row; (112*128 + 2*112*128)*4 + 112*112*4 = 222208 bytes fit. */
    p.dtype = FA_DTYPE_F32;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_int_equal(fa_plan_block_r(plan), 112);
    assert_int_equal(fa_plan_block_c(plan), 112);
    assert_int_equal(fa_plan_work_group_size(plan), 448);
    assert_non_null(strstr(fa_plan_explain(plan), "kernel: CUDA cores"));
    fa_buffer *buf = NULL;
    assert_int_equal(fa_buffer_create(ctx, 64, &buf), FA_STATUS_BACKEND_UNAVAILABLE);
    assert_null(buf);
    assert_int_equal(fa_buffer_wrap_cuda(ctx, 4096, 4, &buf), FA_STATUS_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(fa_context_last_error(ctx), "sm_90"));
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
}

/* Backward plans on a planning-only context: three launches, tensor cores where the forward
 * would take them (here sm_80+, f16, d <= 128: 2 threads per owned row) else CUDA cores (4), the
 * dK/dV pass compiled with the key tile as its BLOCK_R and Bc threads per row's worth, everything
 * within the arch's shared memory and thread limits, Bc capped at 64 above d 128 on CUDA cores,
 * and Bc no smaller than Br. */
void test_backward_plan(void **state)
{
    (void)state;
    static const char *const archs[] = {"sm_75", "sm_80", "sm_90"};
    static const int64_t dims[] = {64, 128, 256};
    for (size_t a = 0; a < 3; a++) {
        char why[256] = "";
        fa_context *ctx = NULL;
        assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, archs[a], why,
                                                    sizeof why),
                         OK);
        for (size_t i = 0; i < 3; i++) {
            fa_problem p;
            assert_int_equal(fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 2, 8, 2, 4096,
                                             3000, dims[i]),
                             OK);
            fa_plan *plan = NULL;
            assert_int_equal(fa_plan_create_backward(ctx, &p, &plan), OK);
            const fa__launch *l = plan->launches;
            const bool mma = a > 0 && dims[i] <= 128;
            const int32_t br = plan->tiles.block_r, bc = plan->tiles.block_c, per = mma ? 2 : 4;
            assert_int_equal(plan->n_launches, 3);
            assert_int_equal(l[0].variant.kernel, FA__KERNEL_BWD_PRE);
            assert_int_equal(l[1].variant.kernel, FA__KERNEL_BWD_DKDV);
            assert_int_equal(l[2].variant.kernel, FA__KERNEL_BWD_DQ);
            assert_int_equal(l[1].variant.block_r, bc);
            assert_int_equal(l[1].variant.block_c, br);
            assert_int_equal(l[1].variant.work_group_size, per * bc);
            assert_int_equal(l[2].variant.work_group_size, per * br);
            assert_int_equal(l[1].grid[0], (3000 + (uint64_t)bc - 1) / (uint64_t)bc);
            assert_int_equal(l[1].grid[1], 2);
            assert_true(per * bc <= 1024 && per * br <= 1024);
            assert_true(bc <= (!mma && dims[i] > 128 ? 64 : 128));
            assert_true(br <= bc); /* Br capped at the largest square tile: Bc is never starved */
            if (mma)
                assert_true(br % 16 == 0 && bc % 16 == 0);
            for (int k = 0; k < 3; k++) {
                assert_int_equal(l[k].variant.mma, mma ? 1 : 0);
                assert_true(l[k].onchip_bytes <= ctx->props.sram_bytes);
            }
            assert_int_equal(plan->scratch_bytes, 2 * 8 * 4096 * 4);
            assert_non_null(strstr(fa_plan_explain(plan),
                                   mma ? "kernel: tensor cores" : "kernel: CUDA cores"));
            fa_plan_destroy(plan);
        }
        fa_context_destroy(ctx);
    }
}

/* The cpu backend is unaffected by a CUDA backend without a driver. */
void test_cpu_still_works(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, 3, 5, 4), OK);
    float q[12], k[20], v[20], o[12];
    for (int i = 0; i < 20; i++) {
        k[i] = (float)(i % 7) * 0.25f;
        v[i] = 1.0f; /* softmax rows sum to 1: O is all ones */
        if (i < 12)
            q[i] = (float)(i % 5) * 0.5f;
    }
    fa_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL;
    assert_int_equal(fa_buffer_wrap_host(ctx, q, sizeof q, &bq), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, k, sizeof k, &bk), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, v, sizeof v, &bv), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, o, sizeof o, &bo), OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_int_equal(fa_forward(ctx, plan, bq, bk, bv, bo, NULL), OK);
    for (int i = 0; i < 12; i++)
        assert_float_equal(o[i], 1.0f, 1e-6f);
    fa_plan_destroy(plan);
    fa_buffer_destroy(bq);
    fa_buffer_destroy(bk);
    fa_buffer_destroy(bv);
    fa_buffer_destroy(bo);
    fa_context_destroy(ctx);
}
