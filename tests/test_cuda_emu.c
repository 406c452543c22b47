/*
 * test_cuda_emu.c - the CUDA kernels (kernels_cu/flash_fwd.cu, flash_bwd.cu, flash_bwd_rows.cu)
 * run without a GPU (sequences and decoding: test_cuda_emu_seq.c; the backward's launches and
 * their comparison: test_cuda_emu_bwd.c):
 * compiled as host C++ through tests/cuda_emu/, one host thread per CUDA thread, and compared
 * with the CPU golden backend. It checks what NVRTC's compile tests cannot: the kernels' numbers
 * (tile loops, online softmax, masks and fully-masked rows, GQA/MQA, strides and offsets, tail
 * tiles, LSE, the grid-stride loops the host relies on past the grid limits), and for the
 * backward's three launches dQ, dK and dV against the golden's fa_backward (tolerances as in
 * test_backward.c, structural zeros exact, nothing written outside the tensors, a second run
 * bitwise equal).
 *
 * Each case's plan comes from the CUDA planner for sm_80 (tile overrides pick a small plan);
 * the test fails if a launch's entry point and NVRTC options are not one of the compiled
 * configurations (tests/CMakeLists.txt), so the emulated kernel is the one the host would build.
 * Parameters, grids and argument orders are the plan's launches, as the plan functions built
 * them.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "cuda_internal.h"
#include "emu_api.h"
#include "emu_plan.h"
#include "internal.h"
#include "oracle.h"
#include "harness.h"
#include "test_cuda_emu.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const emu_case cases[] = {
    {"gqa_bshd_f32", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16, 32, 0,
     false, false, NULL},
    {"gqa_bshd_f32_folded", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16,
     32, 0, true, false, NULL},
    {"mqa_top_left_bf16_padded", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 3, 1,
     29, 53, 40, 8, 24, 3, false, false, NULL},
    /* Sq > Sk bottom-right: the first 36 rows have no allowed key (O = 0, LSE = -inf). */
    {"masked_rows_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD, 2,
     2, 2, 53, 17, 16, 8, 16, 0, false, false, NULL},
    {"tail_tiles_top_left_f32_d128", FA_DTYPE_F32, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 1,
     1, 70, 70, 128, 16, 64, 0, true, false, NULL},
    {"d256_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BSHD, 1, 2, 1,
     9, 12, 256, 8, 8, 0, false, false, NULL},
    {"f16_d40_cuda_cores", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 1, 29, 53, 40, 8, 24,
     0, false, false, NULL},
    /* No overrides: the plans sm_80 really gets (CUDA cores 64 x 128 with 256 threads for f32;
     * tensor cores 128 x 64 with 256 threads for bf16 d 128). */
    {"default_plan_f32_d64", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 2, 300, 300, 64, 0,
     0, 0, false, false, NULL},
    {"mma_default_plan_bf16_d128_top_left", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT,
     FA_LAYOUT_BSHD, 1, 2, 1, 200, 200, 128, 0, 0, 0, false, false, NULL},
    /* Tensor cores (sm_80, f16/bf16, d a multiple of 16), planned tiles clamped to short
     * sequences: tails, GQA, masks with fully masked rows, padding, a folded grid. */
    {"mma_one_key_tile_bf16_padded", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 2, 33, 16,
     80, 16, 16, 5, false, false, NULL},
    {"mma_gqa_bshd_f16", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 0, 0, 0,
     false, false, NULL},
    {"mma_masked_rows_bottom_right_bf16", FA_DTYPE_BF16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 2, 2, 2, 53, 17, 128, 0, 0, 0, false, false, NULL},
    {"mma_top_left_f16_d16_padded_folded", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD,
     1, 3, 1, 70, 70, 16, 0, 0, 3, true, false, NULL},
    /* Non-finite inputs on both paths: NaN and +inf scores give NaN rows (O and LSE), -inf
     * scores weigh nothing, as on the golden (flashattn.h, "Non-finite values"). */
    {"poison_gqa_bshd_f32", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16,
     32, 0, false, true, NULL},
    {"mma_poison_gqa_bshd_f16", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 0,
     0, 0, false, true, NULL},
};

/* ---- the score modifiers and dropout (FEATURES), each alone and all together, both paths ---- */
static const emu_mods softcap = {.softcap = 0.4f};
static const emu_mods alibi = {.alibi = true};
static const emu_mods alibi_per_batch = {.alibi = true, .per_batch = true};
static const emu_mods bias_f32_bcast = {.bias = 1, .bias_bcast = true};
static const emu_mods bias_storage = {.bias = 2};
/* Sq 45 > Sk 33, keys [i' - 5, i' + 2], i' = i - 12: rows 0..9 see no key. */
static const emu_mods window_masked_rows = {
    .window = true, .window_left = 5, .window_right = 2, .masked_rows = true};
/* Left-bounded only (with a causal mask): whole K tiles left of the window are skipped. */
static const emu_mods window_left_only = {.window = true, .window_left = 10, .window_right = -1};
static const emu_mods window_skip = {.window = true, .window_left = 20, .window_right = 0};
/* Sq 53 > Sk 33 bottom-right: rows 0..19 without keys get O = 0 and LSE = sink (-inf: no sink). */
static const emu_mods sinks_masked_rows = {.sinks = true, .masked_rows = true};
static const emu_mods dropout = {.dropout_p = 0.3f};
static const emu_mods all_f32_bias = {.softcap = 0.5f, .alibi = true, .bias = 1, .window = true,
                                      .window_left = 9, .window_right = 4, .sinks = true,
                                      .dropout_p = 0.25f};
static const emu_mods all_storage_bias = {.softcap = 0.5f, .alibi = true, .bias = 2,
                                          .bias_bcast = true, .window = true, .window_left = 20,
                                          .window_right = 0, .sinks = true, .dropout_p = 0.1f};

/* Every modifier on a block of a longer problem: rows at 40 of 120, keys at 12 of 100, so the
 * mask, window and ALiBi align on whole-problem positions and dropout keys by them. */
static const emu_mods all_positioned = {.softcap = 0.5f, .alibi = true, .bias = 1, .window = true,
                                        .window_left = 9, .window_right = 4, .sinks = true,
                                        .dropout_p = 0.25f, .q_position = 40, .k_position = 12,
                                        .whole_q = 120, .whole_k = 100};

const emu_case mod_cases[] = {
    /* CUDA cores: f32 (and f16 at d 40), d 40, Br 8, Bc 24. */
    {"mod_softcap_gqa_f32", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 40, 8,
     24, 0, false, false, &softcap},
    {"mod_alibi_mqa_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD,
     1, 4, 1, 29, 53, 40, 8, 24, 0, false, false, &alibi},
    {"mod_alibi_per_batch_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BSHD, 3, 4, 1, 29, 53, 40, 8, 24, 0, false, false, &alibi_per_batch},
    {"mod_bias_bcast_f32_padded", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BHSD, 2, 2, 2, 37, 45, 40,
     8, 24, 3, false, false, &bias_f32_bcast},
    {"mod_window_masked_rows_gqa_f32", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 1, 4, 2, 45,
     33, 40, 8, 24, 0, false, false, &window_masked_rows},
    {"mod_window_left_top_left_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 1,
     1, 97, 97, 40, 8, 24, 0, false, false, &window_left_only},
    {"mod_sinks_mqa_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD,
     2, 3, 1, 53, 33, 40, 8, 24, 0, false, false, &sinks_masked_rows},
    {"mod_dropout_gqa_f32_folded", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 40,
     8, 24, 0, true, false, &dropout},
    {"mod_all_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD, 2, 4,
     2, 45, 40, 40, 8, 24, 0, false, false, &all_f32_bias},
    {"mod_all_f16_cuda_cores_padded", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 1, 29, 53,
     40, 8, 24, 2, false, false, &all_storage_bias},
    /* Tensor cores: f16/bf16, d 64, Br 16, Bc 32. */
    {"mma_mod_softcap_gqa_f16", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64,
     16, 32, 0, false, false, &softcap},
    {"mma_mod_alibi_top_left_bf16", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 4,
     4, 45, 37, 64, 16, 32, 0, false, false, &alibi},
    {"mma_mod_bias_f16_padded", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BHSD, 2, 2, 1, 37, 45, 64,
     16, 32, 3, false, false, &bias_storage},
    {"mma_mod_window_masked_rows_bf16", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BSHD, 1, 4, 2, 45,
     33, 64, 16, 32, 0, false, false, &window_masked_rows},
    {"mma_mod_sinks_bottom_right_f16", FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD,
     2, 3, 1, 53, 33, 64, 16, 32, 0, false, false, &sinks_masked_rows},
    {"mma_mod_dropout_gqa_bf16_folded", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37,
     45, 64, 16, 32, 0, true, false, &dropout},
    {"mma_mod_all_bottom_right_f16", FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_LAYOUT_BHSD, 2,
     4, 2, 45, 40, 64, 16, 32, 0, false, false, &all_f32_bias},
    {"mma_mod_all_window_skip_bf16", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 1, 100,
     100, 64, 16, 32, 0, false, false, &all_storage_bias},
    {"mma_mod_window_skip_bf16", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2, 1, 100, 100,
     64, 16, 32, 0, false, false, &window_skip},
    /* Positions, on both paths (the configurations of the all-modifier cases above). */
    {"mod_all_positioned_bottom_right_f32", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 2, 4, 2, 45, 40, 40, 8, 24, 0, false, false, &all_positioned},
    {"mma_mod_all_positioned_bottom_right_f16", FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 2, 4, 2, 45, 40, 64, 16, 32, 0, false, false, &all_positioned},
};
const size_t mod_case_count = sizeof mod_cases / sizeof mod_cases[0];

/* Pads one tensor's BHSD rows: stride_seq d + pad, offset pad. */
static void pad_layout(fa_tensor_layout *t, int64_t heads, int64_t seq, int64_t d, int64_t pad)
{
    t->offset = pad;
    t->stride_seq = d + pad;
    t->stride_head = seq * t->stride_seq;
    t->stride_batch = heads * t->stride_head;
}

/* Elements a tensor of p spans in its layout and dtype (the bias: in its own): the extent
 * fa_run checks, its last element's index + 1. */
size_t span(const fa_problem *p, fa_tensor_id tensor)
{
    uint64_t bytes = 0;
    assert_int_equal(fa_problem_tensor_bytes(p, tensor, 0, 0, &bytes), FA_STATUS_OK);
    return (size_t)bytes / fa_dtype_size(tensor == FA_TENSOR_BIAS ? p->bias_dtype : p->dtype);
}

/* Turns on the case's modifiers in the problem. */
static void mods_for(const emu_case *c, fa_problem *p)
{
    const emu_mods *m = c->mods;
    if (!m)
        return;
    p->softcap = m->softcap;
    p->alibi = m->alibi ? (m->per_batch ? 2 : 1) : 0;
    if (m->bias) {
        p->bias = 1;
        p->bias_dtype = m->bias == 1 ? FA_DTYPE_F32 : c->dtype;
        p->bias_layout.offset = 2;
        p->bias_layout.stride_seq = c->seqlen_k + 3;
        p->bias_layout.stride_head = c->seqlen_q * p->bias_layout.stride_seq;
        p->bias_layout.stride_batch = m->bias_bcast ? 0 : c->heads_q * p->bias_layout.stride_head;
    }
    p->window = m->window;
    p->window_left = m->window_left;
    p->window_right = m->window_right;
    p->sinks = m->sinks;
    p->dropout_p = m->dropout_p;
    p->dropout_seed = 0x0123456789abcdefull;
    p->dropout_offset = 7;
    p->q_position = m->q_position;
    p->k_position = m->k_position;
    p->whole_seqlen_q = m->whole_q;
    p->whole_seqlen_k = m->whole_k;
}

static void fill_random(const emu_case *c, void *t, size_t n, const char *salt);

/* Allocates and fills the modifiers' tensors of a problem (mods_for's). */
void mods_alloc(const emu_case *c, const fa_problem *p, mod_images *mi)
{
    memset(mi, 0, sizeof *mi);
    if (p->alibi) {
        const int64_t n = c->heads_q * (p->alibi == 2 ? c->batch : 1);
        mi->alibi = malloc((size_t)n * sizeof(float));
        assert_non_null(mi->alibi);
        for (int64_t i = 0; i < n; i++)
            mi->alibi[i] = exp2f(-8.0f * (float)(i + 1) / (float)n);
    }
    if (p->bias) {
        size_t n = span(p, FA_TENSOR_BIAS);
        emu_case as_bias = *c; /* fill_random writes the case's dtype */
        as_bias.dtype = p->bias_dtype;
        mi->bias_bytes = n * fa_dtype_size(p->bias_dtype);
        mi->bias = malloc(mi->bias_bytes);
        assert_non_null(mi->bias);
        fill_random(&as_bias, mi->bias, n, "bias"); /* in [-1, 1) */
    }
    if (p->sinks) {
        harness_rng rng;
        char seed[128];
        snprintf(seed, sizeof seed, "%s/sinks", c->name);
        harness_rng_seed(&rng, seed);
        mi->sinks = malloc((size_t)c->heads_q * sizeof(float));
        assert_non_null(mi->sinks);
        for (int64_t h = 0; h < c->heads_q; h++)
            mi->sinks[h] = (float)harness_rng_uniform(&rng, -1.0, 2.0);
        mi->sinks[c->heads_q - 1] = -INFINITY;
    }
}

void mods_free(mod_images *mi)
{
    free(mi->alibi);
    free(mi->bias);
    free(mi->sinks);
}

void problem_for(const emu_case *c, fa_problem *p)
{
    assert_int_equal(fa_problem_init(p, c->dtype, c->layout, c->batch, c->heads_q, c->heads_kv,
                                     c->seqlen_q, c->seqlen_k, c->head_dim),
                     OK);
    p->mask = c->mask;
    if (c->pad > 0) { /* the backward's tensors too: dO, dQ like Q; dK, dV like K */
        fa_tensor_layout *rows[] = {&p->q, &p->o, &p->d_o, &p->dq};
        fa_tensor_layout *keys[] = {&p->k, &p->v, &p->dk, &p->dv};
        for (int i = 0; i < 4; i++) {
            pad_layout(rows[i], c->heads_q, c->seqlen_q, c->head_dim, c->pad);
            pad_layout(keys[i], c->heads_kv, c->seqlen_k, c->head_dim, c->pad);
        }
    }
    mods_for(c, p);
}

fa_context *sm80_planning(const emu_case *c, fa_problem *p)
{
    problem_for(c, p);
    p->block_r = c->block_r;
    p->block_c = c->block_c;
    fa_context *arch = NULL;
    char why[256] = "";
    assert_int_equal(fa_context_create_planning(&arch, FA_BACKEND_CUDA, "sm_80", why, sizeof why),
                     OK);
    return arch;
}

/* The CPU golden backend on the same host memory: O into o_ref, LSE into lse_ref; mi: the
 * modifiers' tensors (NULL: none). */
void run_golden(const fa_problem *p, void *q, void *k, void *v, void *o_ref,
                float *lse_ref, const size_t bytes[4], size_t lse_bytes, const mod_images *mi)
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
    fa_buffer *ba = NULL, *bb = NULL, *bs = NULL;
    fa_modifier_buffers mods = {NULL, NULL, NULL, NULL};
    if (mi && mi->alibi) {
        size_t n = (size_t)p->heads_q * (p->alibi == 2 ? (size_t)p->batch : 1);
        assert_int_equal(fa_buffer_wrap_host(ctx, mi->alibi, n * 4, &ba), OK);
        mods.alibi_slopes = ba;
    }
    if (mi && mi->bias) {
        assert_int_equal(fa_buffer_wrap_host(ctx, mi->bias, mi->bias_bytes, &bb), OK);
        mods.bias = bb;
    }
    if (mi && mi->sinks) {
        assert_int_equal(fa_buffer_wrap_host(ctx, mi->sinks, (size_t)p->heads_q * 4, &bs), OK);
        mods.sinks = bs;
    }
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &golden, &plan), OK);
    assert_int_equal(fa_forward_ex(ctx, plan, bq, bk, bv, bo, bl, &mods), OK);
    fa_plan_destroy(plan);
    fa_buffer_destroy(ba);
    fa_buffer_destroy(bb);
    fa_buffer_destroy(bs);
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
    /* Dropout: the tensor-core path rounds the scaled P, so u * max|V| * dropout_scale. */
    if (mma && p->dropout_p > 0.0f)
        abs_tol = 1e-6 + u / (1.0 - (double)p->dropout_p);
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
        if (both_inf || (isnan(lse[i]) && isnan(lse_ref[i])) ||
            fabsf(lse[i] - lse_ref[i]) <= 1e-5f * (1.0f + fabsf(lse_ref[i])))
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

/* Rows whose golden LSE says they saw no key: -inf, or exactly their head's sink. */
static size_t count_keyless(const emu_case *c, const float *lse, const float *sinks)
{
    size_t n = 0;
    for (int64_t i = 0; i < c->batch * c->heads_q * c->seqlen_q; i++) {
        float sink = sinks ? sinks[i / c->seqlen_q % c->heads_q] : -INFINITY;
        n += lse[i] == sink || (isinf(lse[i]) && lse[i] < 0);
    }
    return n;
}

/* n elements uniform in [-amp, amp], seeded by the case and salt. */
void fill_amp(const emu_case *c, void *t, size_t n, const char *salt, double amp)
{
    char seed[128];
    harness_rng rng;
    snprintf(seed, sizeof seed, "%s/%s", c->name, salt);
    harness_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        oracle_store(c->dtype, t, (int64_t)i, harness_rng_uniform(&rng, -amp, amp));
}

static void fill_random(const emu_case *c, void *t, size_t n, const char *salt)
{
    fill_amp(c, t, n, salt, 1.0);
}

/* test_emulator_catches_overrun: the launch is told this many bytes fewer than it planned (a
 * kernel that overruns by as much), and the launcher's report lands in shared_breach. */
static size_t shared_shortfall;
static long long shared_breach;
static bool want_pipeline; /* test_pipeline_cases: the plan must be the pipelined variant */

/* Plans, runs and compares one case; scale_error multiplies the kernel's softmax scale (1: the
 * real run). Returns the number of mismatching elements. */
static int run_case(const emu_case *c, float scale_error)
{
    fa_problem p;
    fa_context *arch = sm80_planning(c, &p);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(arch, &p, &plan);
    if (st != OK)
        fail_msg("%s: the sm_80 plan failed: %s", c->name, fa_context_last_error(arch));
    /* What the backend would compile and launch: the plan's one launch, as built. */
    const fa__launch *launch = &plan->launches[0];
    assert_int_equal(plan->n_launches, 1);
    assert_int_equal(launch->variant.pipeline, want_pipeline ? 1 : 0);
    char options[256];
    const fa_emu_kernel *kernel = emu_launch_kernel(c->name, launch, options, sizeof options);
    fa_kernel_params kp = launch->params;
    kp.has_lse = 1;
    kp.scale_log2 *= scale_error;

    size_t elem = fa_dtype_size(c->dtype);
    size_t n[4] = {span(&p, FA_TENSOR_Q), span(&p, FA_TENSOR_K), span(&p, FA_TENSOR_V),
                   span(&p, FA_TENSOR_O)};
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
    mod_images mi;
    mods_alloc(c, &p, &mi);
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
    void *mem[FA__TENSOR_COUNT] = {[FA__TENSOR_Q] = t[0],         [FA__TENSOR_K] = t[1],
                                   [FA__TENSOR_V] = t[2],         [FA__TENSOR_O] = t[3],
                                   [FA__TENSOR_LSE] = lse,        [FA__TENSOR_ALIBI] = mi.alibi,
                                   [FA__TENSOR_BIAS] = mi.bias,   [FA__TENSOR_SINKS] = mi.sinks};
    void *args[FA__MAX_LAUNCH_ARGS]; /* the launch's tensors in its order (src/op_launches.c) */
    for (int a = 0; a < launch->n_args; a++) {
        args[a] = mem[launch->args[a]];
        assert_non_null(args[a]);
    }
    if (shared_shortfall)
        shared_breach = fa_emu_launch(kernel, gx, gy, gz, args, &kp,
                                      (size_t)fa__cu_launch_shared(launch) - shared_shortfall);
    else
        emu_launch(c->name, launch, kernel, gx, gy, gz, args, &kp);
    double secs = harness_seconds() - t0;
    run_golden(&p, t[0], t[1], t[2], o_ref, lse_ref, bytes, rows * sizeof *lse, &mi);
    int bad = compare(c, &p, strstr(options, "-DMMA=1") != NULL, t[3], o_ref, bytes[3], lse,
                      lse_ref);
    print_message("  %-30s %s, grid %u x %u x %u, %.2f s: %s\n", c->name, options, gx, gy, gz,
                  secs, bad ? "MISMATCH" : "matches the golden");
    if (c->poison && count_nan(lse_ref, rows) == 0)
        fail_msg("%s: the golden has no NaN row, so the case checks nothing", c->name);
    if (c->mods && c->mods->masked_rows && count_keyless(c, lse_ref, mi.sinks) == 0)
        fail_msg("%s: the golden has no row without keys, so the case checks none", c->name);
    mods_free(&mi);

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

static void test_modifier_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof mod_cases / sizeof mod_cases[0]; i++) {
        int bad = run_case(&mod_cases[i], 1.0f);
        if (bad)
            fail_msg("%s: %d elements differ from the golden", mod_cases[i].name, bad);
    }
}

/* The comparison must see a broken run: a scale 0.1% off gives mismatches, so a pass of the
 * cases means something. */
static void test_emulator_catches_errors(void **state)
{
    (void)state;
    assert_true(run_case(&cases[0], 1.001f) > 0);
}

/* The shared-memory canary must see a kernel that writes 128 bytes past its launch's dynamic
 * shared memory, on both paths: the forward's last tile row (V) ends at the plan's last byte. */
static void test_emulator_catches_overrun(void **state)
{
    (void)state;
    const emu_case *both[] = {&cases[0], &cases[10]}; /* CUDA cores f32, tensor cores f16 */
    shared_shortfall = 128;
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++) {
        shared_breach = 0;
        run_case(both[i], 1.0f);
        if (shared_breach <= 0 || shared_breach > 128)
            fail_msg("%s: a 128-byte overrun gave %lld", both[i]->name, shared_breach);
    }
    shared_shortfall = 0;
}

/* The tensor-core forward's pipelined variant (FLASHATTN_CUDA_PIPELINE=1: double-buffered
 * cp.async K/V copies, emulated as copies, into tiles padded by 8 elements a row) on the
 * tensor-core cases: one and several key tiles, tails, masks with keyless rows, padded (so
 * unaligned: the synchronous fallback) and folded grids, every modifier; and the canary sees a
 * write past its larger shared memory (two K/V buffers of padded rows). */
/* A modifier case by name: indices shift as cases are added. */
static const emu_case *mod_case_named(const char *name)
{
    for (size_t i = 0; i < sizeof mod_cases / sizeof mod_cases[0]; i++)
        if (strcmp(mod_cases[i].name, name) == 0)
            return &mod_cases[i];
    fail_msg("no modifier case %s", name);
    return NULL;
}

static void test_pipeline_cases(void **state)
{
    (void)state;
    const emu_case *mma[] = {&cases[8],
                             &cases[9],
                             &cases[10],
                             &cases[11],
                             &cases[12],
                             &cases[14],
                             mod_case_named("mma_mod_all_bottom_right_f16"),
                             mod_case_named("mma_mod_window_skip_bf16")};
    assert_int_equal(setenv("FLASHATTN_CUDA_PIPELINE", "1", 1), 0);
    want_pipeline = true;
    for (size_t i = 0; i < sizeof mma / sizeof mma[0]; i++) {
        int bad = run_case(mma[i], 1.0f);
        if (bad)
            fail_msg("%s (pipelined): %d elements differ from the golden", mma[i]->name, bad);
    }
    shared_shortfall = 128;
    shared_breach = 0;
    run_case(&cases[10], 1.0f);
    shared_shortfall = 0;
    want_pipeline = false;
    assert_int_equal(unsetenv("FLASHATTN_CUDA_PIPELINE"), 0);
    if (shared_breach <= 0 || shared_breach > 128)
        fail_msg("%s (pipelined): a 128-byte overrun gave %lld", cases[10].name, shared_breach);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulator_catches_errors),
        cmocka_unit_test(test_emulator_catches_overrun),
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_modifier_cases),
        cmocka_unit_test(test_pipeline_cases),
        cmocka_unit_test(test_backward_catches_errors),
        cmocka_unit_test(test_backward_cases),
        cmocka_unit_test(test_backward_modifier_cases),
        cmocka_unit_test(test_backward_large_ds),
    };
    return cmocka_run_group_tests_name("cuda kernel, emulated on the host", tests, NULL, NULL);
}
