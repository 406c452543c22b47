/*
 * test_block_sparse_plans.c - the OpenCL planner's block-sparse rule (backends/opencl/
 * cl_rules.c, block_sparse_rules: pref_block_r and pref_block_c at the mask's blocks) through
 * planning contexts of every GPU profile and the OpenCL device at hand (pocl in CI): over
 * block sizes 16..256, head dims, dtypes and lengths, a forward tile never straddles a mask
 * block (Br divides block_q or is a multiple of it, and the same for Bc and block_k), so a key
 * tile no query block of its query tile lists is skipped whole. Where only the GPU's work-group
 * floor raises Br above block_q, the explanation says so; on CPUs the register-blocked forward
 * keeps the dense plan's Br (a multiple of block_q), skipping per register block of 4 rows,
 * and runs wherever the dense forward does, with the dense Bc over several key blocks; short
 * queries, which run in place, keep Bc within a key block; the register-blocked backward keeps
 * the dense backward's tiles. Overrides are taken as asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#include <stdio.h>
#include <string.h>

static const char *const profiles[] = {"amd-gfx90a", "amd-gfx1030", "intel-xe",
                                       "nvidia-sm80", "mali-g710",   "adreno-740"};

/* Tiles of t elements start at multiples of t, blocks of b at multiples of b: no tile
 * straddles a block edge when one size divides the other. */
static bool aligned(int32_t t, int32_t b)
{
    return t > 0 && (b % t == 0 || t % b == 0);
}

static void sparse_problem(fa_problem *p, fa_dtype dtype, int64_t seq, int64_t d, int32_t bq,
                           int32_t bk)
{
    assert_int_equal(fa_problem_init(p, dtype, FA_LAYOUT_BHSD, 1, 8, 8, seq, seq, d),
                     FA_STATUS_OK);
    p->block_sparse = 1;
    p->sparse_block_q = bq;
    p->sparse_block_k = bk;
    p->sparse_batch = 1;
    p->sparse_heads = 1;
}

/* Whether the problem without its block mask plans the register-blocked forward (CPUs), and
 * its Bc (*dense_bc). */
static bool dense_reg_blocked(fa_context *ctx, const fa_problem *sparse, int32_t *dense_bc)
{
    fa_problem p = *sparse;
    fa_plan *pl = NULL;
    p.block_sparse = 0;
    assert_int_equal(fa_plan_create(ctx, &p, &pl), FA_STATUS_OK);
    bool reg = strstr(fa_plan_explain(pl), "REG_BLOCKED") != NULL;
    *dense_bc = fa_plan_block_c(pl);
    fa_plan_destroy(pl);
    return reg;
}

/* Every block size pair, head dim, dtype and length on one context; returns the plans made. */
static int check_context(fa_context *ctx, const char *name, size_t n_dims)
{
    static const int32_t blocks[] = {16, 32, 64, 128, 256};
    static const int64_t dims[] = {32, 64, 128};
    static const int64_t seqs[] = {1000, 4096};
    static const fa_dtype dtypes[] = {FA_DTYPE_F32, FA_DTYPE_F16};
    int plans = 0;
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t k = 0; k < n_dims; k++)
                for (size_t s = 0; s < 2; s++)
                    for (size_t t = 0; t < 2; t++) {
                        fa_problem p;
                        fa_plan *pl = NULL;
                        sparse_problem(&p, dtypes[t], seqs[s], dims[k], blocks[a], blocks[b]);
                        assert_int_equal(fa_plan_create(ctx, &p, &pl), FA_STATUS_OK);
                        int32_t br = fa_plan_block_r(pl), bc = fa_plan_block_c(pl);
                        if (!aligned(br, blocks[a]) || !aligned(bc, blocks[b]))
                            fail_msg("%s d%lld Sq %lld blocks %d x %d: tiles %d x %d straddle",
                                     name, (long long)dims[k], (long long)seqs[s], blocks[a],
                                     blocks[b], br, bc);
                        const bool reg = strstr(fa_plan_explain(pl), "REG_BLOCKED") != NULL;
                        /* A key tile within one key block, but on the register-blocked
                         * forward, whose register blocks multiply only their listed span */
                        if (bc > blocks[b])
                            assert_true(reg && strstr(fa_plan_explain(pl), "over key blocks"));
                        /* Only a GPU's work-group floor raises Br above block_q, or a CPU's
                         * register-blocked forward, which skips per register block and
                         * says so; there Br is a multiple of block_q (aligned). */
                        if (br > blocks[a] && reg)
                            assert_non_null(strstr(fa_plan_explain(pl), "query blocks of"));
                        else if (br > blocks[a])
                            assert_non_null(strstr(fa_plan_explain(pl), "work-items"));
                        /* Where the dense forward runs register-blocked, so does this one,
                         * with the dense key tiles */
                        int32_t dense_bc = 0;
                        if (dense_reg_blocked(ctx, &p, &dense_bc)) {
                            assert_true(reg);
                            assert_int_equal(bc, dense_bc);
                        }
                        fa_plan_destroy(pl);
                        plans++;
                    }
    return plans;
}

static void test_profiles(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
        char why[512] = "";
        fa_context *ctx = NULL;
        fa_status st = fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, profiles[i], why,
                                                  sizeof why);
        if (st == FA_STATUS_BACKEND_UNAVAILABLE && !harness_backend_required(FA_BACKEND_OPENCL))
            skip(); /* the OpenCL backend is not built in */
        assert_int_equal(st, FA_STATUS_OK);
        assert_int_equal(check_context(ctx, profiles[i], 3), 300);
        fa_context_destroy(ctx);
    }
}

/* A context on the OpenCL device at hand (the test skips without one, unless required). */
static fa_context *device_context(void)
{
    fa_context_options o = {FA_BACKEND_OPENCL, 0};
    fa_context *ctx = NULL;
    char why[512] = "";
    fa_status st = fa_context_create(&ctx, &o, why, sizeof why);
    if (st != FA_STATUS_OK && !harness_backend_required(FA_BACKEND_OPENCL))
        skip(); /* no OpenCL device */
    assert_int_equal(st, FA_STATUS_OK);
    return ctx;
}

static void test_device(void **state)
{
    (void)state;
    fa_context *ctx = device_context();
    assert_int_equal(check_context(ctx, "device", 1), 100); /* builds its kernels: d 32 */
    fa_context_destroy(ctx);
}

/* On the device at hand: queries short enough to run in place (pocl: Br <= 64) keep a key tile
 * within one key block, as that path computes the union of a tile's blocks; from Sq 128 the
 * register-blocked forward, where it runs, keeps the dense plan's Bc over several blocks. */
static void test_short_queries(void **state)
{
    (void)state;
    fa_context *ctx = device_context();
    static const int64_t seqs_q[] = {1, 40, 100, 127, 128, 1000};
    for (size_t i = 0; i < sizeof seqs_q / sizeof seqs_q[0]; i++) {
        fa_problem p;
        fa_plan *pl = NULL;
        sparse_problem(&p, FA_DTYPE_F32, 1000, 64, 16, 16);
        p.seqlen_q = seqs_q[i];
        assert_int_equal(fa_plan_create(ctx, &p, &pl), FA_STATUS_OK);
        const char *explain = fa_plan_explain(pl);
        if (strstr(explain, "in place"))
            assert_true(fa_plan_block_c(pl) <= 16);
        if (seqs_q[i] >= 128 && strstr(explain, "REG_BLOCKED"))
            assert_true(fa_plan_block_c(pl) > 16);
        fa_plan_destroy(pl);
    }
    fa_context_destroy(ctx);
}

/* On the device at hand: a backward on the register-blocked passes (CPUs) keeps the dense
 * backward's tiles, a multiple of the blocks, skipping per register block of 4 rows or keys
 * (at tiles within one block it took 1.43x the dense time at density 1, N 8192 on pocl). */
static void test_backward_dense_tiles(void **state)
{
    (void)state;
    fa_context *ctx = device_context();
    static const int32_t blocks[] = {16, 64, 128};
    for (size_t i = 0; i < 3; i++) {
        fa_problem p;
        fa_plan *sparse = NULL, *dense = NULL;
        sparse_problem(&p, FA_DTYPE_F32, 4096, 64, blocks[i], blocks[i]);
        assert_int_equal(fa_plan_create_backward(ctx, &p, &sparse), FA_STATUS_OK);
        p.block_sparse = 0;
        assert_int_equal(fa_plan_create_backward(ctx, &p, &dense), FA_STATUS_OK);
        if (strstr(fa_plan_explain(dense), "REG_BLOCKED")) {
            assert_non_null(strstr(fa_plan_explain(sparse), "REG_BLOCKED"));
            assert_int_equal(fa_plan_block_r(sparse), fa_plan_block_r(dense));
            assert_int_equal(fa_plan_block_r(sparse) % blocks[i] == 0 ||
                                 blocks[i] % fa_plan_block_r(sparse) == 0,
                             1);
        }
        fa_plan_destroy(sparse);
        fa_plan_destroy(dense);
    }
    fa_context_destroy(ctx);
}

/* The rule is a preference: overrides plan as asked, straddling or not, and the explanation
 * of a default plan names the rule. */
static void test_overrides_and_explanation(void **state)
{
    (void)state;
    char why[512] = "";
    fa_context *ctx = NULL;
    fa_status st = fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, "intel-xe", why,
                                              sizeof why);
    if (st == FA_STATUS_BACKEND_UNAVAILABLE && !harness_backend_required(FA_BACKEND_OPENCL))
        skip();
    assert_int_equal(st, FA_STATUS_OK);
    fa_problem p;
    fa_plan *pl = NULL;
    sparse_problem(&p, FA_DTYPE_F32, 2048, 64, 16, 16);
    assert_int_equal(fa_plan_create(ctx, &p, &pl), FA_STATUS_OK);
    assert_true(fa_plan_block_c(pl) <= 16);
    assert_non_null(strstr(fa_plan_explain(pl), "block-sparse: a key tile within one key block"));
    fa_plan_destroy(pl);
    p.block_c = 24; /* straddling key blocks: a tile then computes the union of their lists */
    assert_int_equal(fa_plan_create(ctx, &p, &pl), FA_STATUS_OK);
    assert_int_equal(fa_plan_block_c(pl), 24);
    fa_plan_destroy(pl);
    fa_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_device),
        cmocka_unit_test(test_overrides_and_explanation),
        cmocka_unit_test(test_short_queries),
        cmocka_unit_test(test_backward_dense_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
