/*
 * test_cuda_emu.c - the CUDA kernel (kernels_cu/flash_fwd.cu) run without a GPU: compiled as
 * host C++ through tests/cuda_emu/, one host thread per CUDA thread, and compared with the CPU
 * golden backend. It checks what NVRTC's compile tests cannot: the kernel's numbers (tile loop,
 * online softmax, masks and fully-masked rows, GQA/MQA, strides and offsets, tail tiles, LSE,
 * the grid-stride loops the host relies on past the grid limits).
 *
 * Each case's plan comes from the CUDA planner for sm_80 (tile overrides pick a small plan);
 * the test fails if the planner's NVRTC options are not one of the compiled configurations
 * (tests/CMakeLists.txt), so the emulated kernel is the one the host would build. Parameters
 * and grid are the plan's launch, as fa_plan_create built them.
 */
#include "cuda_internal.h"
#include "emu_api.h"
#include "internal.h"
#include "oracle.h"
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK

typedef struct emu_case {
    const char *name;
    fa_dtype dtype;
    fa_mask mask;
    fa_layout layout;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int32_t block_r, block_c; /* overrides (0: the planner's), so the plan is a compiled one */
    int64_t pad;              /* > 0: every row stride and offset padded by this many elements */
    bool fold;                /* a 1 x 1 x 1 grid: the kernel's grid-stride loops do the rest */
    bool poison;              /* a NaN in Q and a +inf in K: rows the golden makes NaN */
} emu_case;

static const emu_case cases[] = {
    {"gqa_bshd_f32", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16, 32, 0,
     false, false},
    {"gqa_bshd_f32_folded", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16,
     32, 0, true, false},
    {"mqa_top_left_bf16_padded", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 3, 1,
     29, 53, 40, 8, 24, 3, false, false},
    /* Sq > Sk bottom-right: the first 36 rows have no allowed key (O = 0, LSE = -inf). */
    {"masked_rows_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD, 2,
     2, 2, 53, 17, 16, 8, 16, 0, false, false},
    {"tail_tiles_top_left_f32_d128", FA_DTYPE_F32, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 1,
     1, 70, 70, 128, 16, 64, 0, true, false},
    {"d256_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BSHD, 1, 2, 1,
     9, 12, 256, 8, 8, 0, false, false},
    {"f16_d40_cuda_cores", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 1, 29, 53, 40, 8, 24,
     0, false, false},
    /* No overrides: the plans sm_80 really gets (CUDA cores 64 x 128 with 256 threads for f32;
     * tensor cores 128 x 64 with 256 threads for bf16 d 128). */
    {"default_plan_f32_d64", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 2, 300, 300, 64, 0,
     0, 0, false, false},
    {"mma_default_plan_bf16_d128_top_left", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT,
     FA_LAYOUT_BSHD, 1, 2, 1, 200, 200, 128, 0, 0, 0, false, false},
    /* Tensor cores (sm_80, f16/bf16, d a multiple of 16), planned tiles clamped to short
     * sequences: tails, GQA, masks with fully masked rows, padding, a folded grid. */
    {"mma_one_key_tile_bf16_padded", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 2, 33, 16,
     80, 16, 16, 5, false, false},
    {"mma_gqa_bshd_f16", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 0, 0, 0,
     false, false},
    {"mma_masked_rows_bottom_right_bf16", FA_DTYPE_BF16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 2, 2, 2, 53, 17, 128, 0, 0, 0, false, false},
    {"mma_top_left_f16_d16_padded_folded", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD,
     1, 3, 1, 70, 70, 16, 0, 0, 3, true, false},
    /* Non-finite inputs on both paths: NaN and +inf scores give NaN rows (O and LSE), -inf
     * scores weigh nothing, as on the golden (flashattn.h, "Non-finite values"). */
    {"poison_gqa_bshd_f32", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16,
     32, 0, false, true},
    {"mma_poison_gqa_bshd_f16", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 0,
     0, 0, false, true},
};

/* Pads one tensor's BHSD rows: stride_seq d + pad, offset pad. */
static void pad_layout(fa_tensor_layout *t, int64_t heads, int64_t seq, int64_t d, int64_t pad)
{
    t->offset = pad;
    t->stride_seq = d + pad;
    t->stride_head = seq * t->stride_seq;
    t->stride_batch = heads * t->stride_head;
}

/* Elements a tensor spans: its last element's index + 1. */
static size_t span(const fa_tensor_layout *t, int64_t b, int64_t h, int64_t s, int64_t d)
{
    return (size_t)(t->offset + (b - 1) * t->stride_batch + (h - 1) * t->stride_head +
                    (s - 1) * t->stride_seq + d);
}

static const fa_emu_kernel *kernel_for(const char *options)
{
    for (size_t i = 0; i < fa_emu_kernel_count(); i++)
        if (strcmp(fa_emu_kernel_at(i)->options, options) == 0)
            return fa_emu_kernel_at(i);
    return NULL;
}

static void problem_for(const emu_case *c, fa_problem *p)
{
    assert_int_equal(fa_problem_init(p, c->dtype, c->layout, c->batch, c->heads_q, c->heads_kv,
                                     c->seqlen_q, c->seqlen_k, c->head_dim),
                     OK);
    p->mask = c->mask;
    if (c->pad > 0) {
        pad_layout(&p->q, c->heads_q, c->seqlen_q, c->head_dim, c->pad);
        pad_layout(&p->k, c->heads_kv, c->seqlen_k, c->head_dim, c->pad);
        pad_layout(&p->v, c->heads_kv, c->seqlen_k, c->head_dim, c->pad);
        pad_layout(&p->o, c->heads_q, c->seqlen_q, c->head_dim, c->pad);
    }
}

/* The CPU golden backend on the same host memory: O into o_ref, LSE into lse_ref. */
static void run_golden(const fa_problem *p, void *q, void *k, void *v, void *o_ref,
                       float *lse_ref, const size_t bytes[4], size_t lse_bytes)
{
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL, *bl = NULL;
    assert_int_equal(fa_buffer_wrap_host(ctx, q, bytes[0], &bq), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, k, bytes[1], &bk), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, v, bytes[2], &bv), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, o_ref, bytes[3], &bo), OK);
    assert_int_equal(fa_buffer_wrap_host(ctx, lse_ref, lse_bytes, &bl), OK);
    fa_problem golden = *p;
    golden.block_r = golden.block_c = 0;
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &golden, &plan), OK);
    assert_int_equal(fa_forward(ctx, plan, bq, bk, bv, bo, bl), OK);
    fa_plan_destroy(plan);
    fa_buffer_destroy(bq);
    fa_buffer_destroy(bk);
    fa_buffer_destroy(bv);
    fa_buffer_destroy(bo);
    fa_buffer_destroy(bl);
    fa_context_destroy(ctx);
}

/* Every element of O and LSE against the golden; O's bytes outside its rows must be untouched
 * (they started as 0xFF, as did the golden's). Returns the number of mismatches. */
static int compare(const emu_case *c, const fa_problem *p, bool mma, const unsigned char *o,
                   const unsigned char *o_ref, size_t o_bytes, const float *lse,
                   const float *lse_ref)
{
    size_t elem = fa_dtype_size(c->dtype);
    /* u: the storage type's unit roundoff. f32 differs from the golden by accumulation order
     * only; f16/bf16 O by its final rounding (one step, 2u relative). The tensor-core path also
     * rounds P to the storage type (FlashAttention-2 does the same): that moves O by at most
     * u * max|V| = u, inputs being in [-1, 1). */
    double u = c->dtype == FA_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
    double rel = c->dtype == FA_DTYPE_F32 ? 1e-5 : 2.02 * u, abs_tol = 1e-6 + (mma ? u : 0.0);
    int bad = 0;
    for (size_t i = 0; i < o_bytes / elem; i++) {
        double got = oracle_load(c->dtype, o, (int64_t)i);
        double want = oracle_load(c->dtype, o_ref, (int64_t)i);
        bool same_bits = memcmp(o + i * elem, o_ref + i * elem, elem) == 0;
        bool both_nan = isnan(got) && isnan(want);
        if (same_bits || both_nan || fabs(got - want) <= abs_tol + rel * fabs(want))
            continue;
        if (bad++ < 5)
            print_message("  %s: O element %zu is %.9g, golden %.9g\n", c->name, i, got, want);
    }
    size_t rows = (size_t)(p->batch * p->heads_q * p->seqlen_q);
    for (size_t i = 0; i < rows; i++) {
        bool both_inf = isinf(lse[i]) && isinf(lse_ref[i]) && lse[i] < 0 && lse_ref[i] < 0;
        if (both_inf || (isnan(lse[i]) && isnan(lse_ref[i])) || fabsf(lse[i] - lse_ref[i]) <= 1e-5f * (1.0f + fabsf(lse_ref[i])))
            continue;
        if (bad++ < 10)
            print_message("  %s: LSE row %zu is %.9g, golden %.9g\n", c->name, i, lse[i],
                          lse_ref[i]);
    }
    return bad;
}

static size_t count_nan(const float *x, size_t n)
{
    size_t nan = 0;
    for (size_t i = 0; i < n; i++)
        nan += isnan(x[i]) != 0;
    return nan;
}

static void fill_random(const emu_case *c, void *t, size_t n, const char *salt)
{
    char seed[128];
    harness_rng rng;
    snprintf(seed, sizeof seed, "%s/%s", c->name, salt);
    harness_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        oracle_store(c->dtype, t, (int64_t)i, harness_rng_uniform(&rng, -1.0, 1.0));
}

/* Plans, runs and compares one case; scale_error multiplies the kernel's softmax scale (1: the
 * real run). Returns the number of mismatching elements. */
static int run_case(const emu_case *c, float scale_error)
{
    fa_problem p;
    problem_for(c, &p);
    p.block_r = c->block_r;
    p.block_c = c->block_c;
    fa_context *arch = NULL;
    char why[256] = "";
    assert_int_equal(fa_context_create_planning(&arch, FA_BACKEND_CUDA, "sm_80", why, sizeof why),
                     OK);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(arch, &p, &plan);
    if (st != OK)
        fail_msg("%s: the sm_80 plan failed: %s", c->name, fa_context_last_error(arch));
    /* What the backend would compile and launch: the plan's one launch, as built. */
    const fa__launch *launch = &plan->launches[0];
    assert_int_equal(plan->n_launches, 1);
    char options[256];
    fa__variant_defines(&launch->variant, "-D", options, sizeof options);
    const fa_emu_kernel *kernel = kernel_for(options);
    if (!kernel)
        fail_msg("%s: no emulated configuration for \"%s\" (add it in tests/CMakeLists.txt)",
                 c->name, options);
    assert_int_equal(kernel->wg_size, launch->variant.work_group_size);
    assert_true(launch->onchip_bytes <= kernel->smem_bytes);
    fa_kernel_params kp = launch->params;
    kp.has_lse = 1;
    kp.scale_log2 *= scale_error;

    size_t elem = fa_dtype_size(c->dtype), d = (size_t)c->head_dim;
    size_t n[4] = {span(&p.q, c->batch, c->heads_q, c->seqlen_q, (int64_t)d),
                   span(&p.k, c->batch, c->heads_kv, c->seqlen_k, (int64_t)d),
                   span(&p.v, c->batch, c->heads_kv, c->seqlen_k, (int64_t)d),
                   span(&p.o, c->batch, c->heads_q, c->seqlen_q, (int64_t)d)};
    size_t bytes[4], rows = (size_t)(c->batch * c->heads_q * c->seqlen_q);
    void *t[4], *o_ref = malloc(n[3] * elem);
    for (int i = 0; i < 4; i++) {
        bytes[i] = n[i] * elem;
        t[i] = malloc(bytes[i]);
        assert_non_null(t[i]);
    }
    float *lse = malloc(rows * sizeof *lse), *lse_ref = malloc(rows * sizeof *lse_ref);
    assert_non_null(o_ref);
    assert_non_null(lse);
    assert_non_null(lse_ref);
    fill_random(c, t[0], n[0], "q");
    fill_random(c, t[1], n[1], "k");
    fill_random(c, t[2], n[2], "v");
    if (c->poison) {
        /* Element 3 of Q row 5 and element 0 of K row 7, in batch 0, head 0's layout. */
        oracle_store(c->dtype, t[0], p.q.offset + 5 * p.q.stride_seq + 3, NAN);
        oracle_store(c->dtype, t[1], p.k.offset + 7 * p.k.stride_seq, INFINITY);
    }
    memset(t[3], 0xFF, bytes[3]);
    memset(o_ref, 0xFF, bytes[3]);

    unsigned gx = c->fold ? 1u : (unsigned)launch->grid[0],
             gy = c->fold ? 1u : (unsigned)launch->grid[1],
             gz = c->fold ? 1u : (unsigned)launch->grid[2];
    double t0 = harness_seconds();
    fa_emu_launch(kernel, gx, gy, gz, t[0], t[1], t[2], t[3], lse, &kp);
    double secs = harness_seconds() - t0;
    run_golden(&p, t[0], t[1], t[2], o_ref, lse_ref, bytes, rows * sizeof *lse);
    int bad = compare(c, &p, strstr(options, "-DMMA=1") != NULL, t[3], o_ref, bytes[3], lse,
                      lse_ref);
    print_message("  %-30s %s, grid %u x %u x %u, %.2f s: %s\n", c->name, options, gx, gy, gz,
                  secs, bad ? "MISMATCH" : "matches the golden");
    if (c->poison && count_nan(lse_ref, rows) == 0)
        fail_msg("%s: the golden has no NaN row, so the case checks nothing", c->name);

    for (int i = 0; i < 4; i++)
        free(t[i]);
    free(o_ref);
    free(lse);
    free(lse_ref);
    fa_plan_destroy(plan);
    fa_context_destroy(arch);
    return bad;
}

static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int bad = run_case(&cases[i], 1.0f);
        if (bad)
            fail_msg("%s: %d elements differ from the golden", cases[i].name, bad);
    }
}

/* The comparison must see a broken run: a scale 0.1% off gives mismatches, so a pass of the
 * cases means something. */
static void test_emulator_catches_errors(void **state)
{
    (void)state;
    assert_true(run_case(&cases[0], 1.001f) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulator_catches_errors),
        cmocka_unit_test(test_cases),
    };
    return cmocka_run_group_tests_name("cuda kernel, emulated on the host", tests, NULL, NULL);
}
