/*
 * test_cuda_emu.c - the CUDA kernels (kernels_cu/flash_fwd.cu, flash_bwd.cu, flash_bwd_rows.cu)
 * run without a GPU (sequences and decoding: test_cuda_emu_seq.c):
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

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK

/* The score modifiers and dropout of a case (flashattn.h, "The modifiers, precisely"). */
typedef struct emu_mods {
    float softcap;      /* > 0: on */
    bool alibi;         /* slopes 2^(-8(h+1)/Hq) (per_batch: 2^(-8(i+1)/(B Hq)), i = b Hq + h) */
    bool per_batch;     /* ALiBi slopes [B, Hq] (alibi 2) */
    int bias;           /* 0 off; 1 f32; 2 the storage dtype. [B, Hq, Sq, Sk], rows padded by 3,
                           offset 2 */
    bool bias_bcast;    /* the bias's batch stride 0 */
    bool window;        /* window_left / window_right below */
    int64_t window_left, window_right;
    bool sinks;         /* random in [-1, 2), the last head's -inf (no sink) */
    float dropout_p;    /* > 0: on */
    bool masked_rows;   /* the golden has rows without keys: the case checks them */
    int64_t q_position, k_position, whole_q, whole_k; /* a block of a longer problem */
} emu_mods;

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
    const emu_mods *mods;     /* NULL: none */
} emu_case;

/* test_backward_large_ds: dO in +-1e4, V in +-100, Q and K in +-0.25, so that |dS| passes
 * f16's 65504 while the gradients stay finite. */
static bool large_ds;

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

static const emu_case mod_cases[] = {
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
static size_t span(const fa_problem *p, fa_tensor_id tensor)
{
    uint64_t bytes = 0;
    assert_int_equal(fa_problem_tensor_bytes(p, tensor, 0, 0, &bytes), FA_STATUS_OK);
    return (size_t)bytes / fa_dtype_size(tensor == FA_TENSOR_BIAS ? p->bias_dtype : p->dtype);
}

/* The modifiers' host tensors of a case: NULL where off. */
typedef struct mod_images {
    float *alibi; /* f32 [Hq], or [B, Hq] */
    void *bias;   /* the problem's bias_layout in its bias_dtype */
    float *sinks; /* f32 [Hq] */
    size_t bias_bytes;
} mod_images;

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
static void fill_amp(const emu_case *c, void *t, size_t n, const char *salt, double amp);

/* Allocates and fills the modifiers' tensors of a problem (mods_for's). */
static void mods_alloc(const emu_case *c, const fa_problem *p, mod_images *mi)
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

static void mods_free(mod_images *mi)
{
    free(mi->alibi);
    free(mi->bias);
    free(mi->sinks);
}

static void problem_for(const emu_case *c, fa_problem *p)
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

/* The CPU golden backend on the same host memory: O into o_ref, LSE into lse_ref; mi: the
 * modifiers' tensors (NULL: none). */
static void run_golden(const fa_problem *p, void *q, void *k, void *v, void *o_ref,
                       float *lse_ref, const size_t bytes[4], size_t lse_bytes,
                       const mod_images *mi)
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
static void fill_amp(const emu_case *c, void *t, size_t n, const char *salt, double amp)
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

/* ---- the backward: flash_bwd_pre, flash_bwd_dkdv, flash_bwd_dq (kernels_cu/flash_bwd.cu) --- */

/*
 * Planned by fa_plan_create_backward for sm_80, mostly with tile overrides (Br, Bc), so the
 * three launches use two configurations: (d, Br, Bc) for flash_bwd_pre and flash_bwd_dq, and
 * (d, Bc, Br) for flash_bwd_dkdv, whose block owns Bc keys and streams Br query rows. f32 runs
 * on CUDA cores, f16/bf16 with d a multiple of 16 on tensor cores (MMA 1), except where an
 * override that is not a multiple of 16 keeps them on CUDA cores.
 */
static const emu_case bwd_cases[] = {
    {"bwd_gqa_bshd_f32_d64", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 12, 20, 64, 8,
     16, 0, false, false, NULL},
    {"bwd_gqa_bshd_f32_d64_folded", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 12, 20,
     64, 8, 16, 0, true, false, NULL},
    /* Sq > Sk bottom-right: rows 0..25 see no key (dQ exactly 0, nothing added to dK, dV). */
    {"bwd_mqa_bottom_right_f16_d8_padded", FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 2, 2, 1, 33, 7, 8, 8, 8, 3, false, false, NULL},
    /* Sq < Sk top-left: keys 5..16 are seen by no row (dK, dV exactly 0). */
    {"bwd_top_left_bf16_d96", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 2, 2, 5,
     17, 96, 8, 8, 0, false, false, NULL},
    {"bwd_gqa_bottom_right_f32_d96_tails", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BSHD, 1, 4, 2, 19, 27, 96, 8, 24, 0, false, false, NULL},
    {"bwd_mqa_top_left_f16_d64_padded", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1,
     2, 1, 37, 29, 64, 16, 8, 2, false, false, NULL},
    /* Tensor cores (sm_80, f16/bf16, d a multiple of 16): tails, GQA/MQA, rows without keys,
     * unseen keys, padding, the planner's own tiles on a folded grid. */
    {"bwd_mma_gqa_bshd_f16_d64", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64,
     16, 32, 0, false, false, NULL},
    {"bwd_mma_mqa_bottom_right_bf16_d128_padded", FA_DTYPE_BF16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 1, 2, 1, 40, 24, 128, 16, 16, 3, false, false, NULL},
    {"bwd_mma_top_left_f16_d16", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 2, 2,
     20, 50, 16, 16, 16, 0, false, false, NULL},
    {"bwd_mma_default_plan_bf16_d64_folded", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2,
     1, 70, 70, 64, 0, 0, 0, true, false, NULL},
};

/* Host images of a backward problem's tensors, by fa__tensor: Q, K, V, dO random; O and LSE
 * from the golden's forward; dQ, dK, dV and the scratch (D) start as 0xFF bytes (NaN). ref
 * holds the golden's dQ, dK, dV (same layouts). */
typedef struct bwd_images {
    void *t[FA__TENSOR_COUNT];
    size_t bytes[FA__TENSOR_COUNT];
    void *ref[3];
    mod_images mi;     /* the modifiers' tensors (NULL where off), also at t[FA__TENSOR_ALIBI ..] */
    float *dsinks_ref; /* the golden's d_sinks [Hq] (NULL without sinks) */
} bwd_images;

#define GUARD_ELEMS 16 /* elements after each tensor's last one: a write past it shows */

static void bwd_alloc(const emu_case *c, const fa_problem *p, const fa_plan *plan,
                      bwd_images *im)
{
    /* The eight tensors with a layout, by their public ids (+1: 0 is none). */
    static const int public_id[FA__TENSOR_COUNT] = {
        [FA__TENSOR_Q] = FA_TENSOR_Q + 1,   [FA__TENSOR_K] = FA_TENSOR_K + 1,
        [FA__TENSOR_V] = FA_TENSOR_V + 1,   [FA__TENSOR_O] = FA_TENSOR_O + 1,
        [FA__TENSOR_DO] = FA_TENSOR_DO + 1, [FA__TENSOR_DQ] = FA_TENSOR_DQ + 1,
        [FA__TENSOR_DK] = FA_TENSOR_DK + 1, [FA__TENSOR_DV] = FA_TENSOR_DV + 1};
    size_t elem = fa_dtype_size(c->dtype), rows = (size_t)(c->batch * c->heads_q * c->seqlen_q);
    memset(im, 0, sizeof *im);
    for (int i = 0; i < FA__TENSOR_COUNT; i++)
        if (public_id[i])
            im->bytes[i] = (span(p, (fa_tensor_id)(public_id[i] - 1)) + GUARD_ELEMS) * elem;
    im->bytes[FA__TENSOR_LSE] = (rows + 1) * sizeof(float);
    im->bytes[FA__TENSOR_SCRATCH] = (size_t)plan->scratch_bytes + sizeof(float);
    if (p->sinks)
        im->bytes[FA__TENSOR_DSINKS] = ((size_t)c->heads_q + 1) * sizeof(float);
    for (int i = 0; i < FA__TENSOR_COUNT; i++) {
        if (i >= FA__TENSOR_ALIBI && i <= FA__TENSOR_SINKS)
            continue; /* mods_alloc's */
        im->t[i] = malloc(im->bytes[i]);
        assert_non_null(im->t[i]);
        memset(im->t[i], 0xFF, im->bytes[i]);
    }
    for (int i = 0; i < 3; i++) {
        im->ref[i] = malloc(im->bytes[FA__TENSOR_DQ + i]);
        assert_non_null(im->ref[i]);
        memset(im->ref[i], 0xFF, im->bytes[FA__TENSOR_DQ + i]);
    }
    fill_amp(c, im->t[FA__TENSOR_Q], im->bytes[FA__TENSOR_Q] / elem, "q", large_ds ? 0.25 : 1);
    fill_amp(c, im->t[FA__TENSOR_K], im->bytes[FA__TENSOR_K] / elem, "k", large_ds ? 0.25 : 1);
    fill_amp(c, im->t[FA__TENSOR_V], im->bytes[FA__TENSOR_V] / elem, "v", large_ds ? 100 : 1);
    fill_amp(c, im->t[FA__TENSOR_DO], im->bytes[FA__TENSOR_DO] / elem, "do",
             large_ds ? 1e4 : 1);
    mods_alloc(c, p, &im->mi);
    im->t[FA__TENSOR_ALIBI] = im->mi.alibi;
    im->t[FA__TENSOR_BIAS] = im->mi.bias;
    im->t[FA__TENSOR_SINKS] = im->mi.sinks;
    if (p->sinks) {
        im->dsinks_ref = malloc(im->bytes[FA__TENSOR_DSINKS]);
        assert_non_null(im->dsinks_ref);
        memset(im->dsinks_ref, 0xFF, im->bytes[FA__TENSOR_DSINKS]);
    }
}

static void bwd_free(bwd_images *im)
{
    for (int i = 0; i < FA__TENSOR_COUNT; i++)
        if (i < FA__TENSOR_ALIBI || i > FA__TENSOR_SINKS)
            free(im->t[i]);
    mods_free(&im->mi);
    free(im->dsinks_ref);
    for (int i = 0; i < 3; i++)
        free(im->ref[i]);
}

/* The golden on the same host memory: its forward's O and LSE into the images, then its
 * backward's dQ, dK, dV into ref (and d_sinks into dsinks_ref), with the case's modifiers. */
static void bwd_golden(const fa_problem *p, bwd_images *im)
{
    const size_t fwd_bytes[4] = {im->bytes[FA__TENSOR_Q], im->bytes[FA__TENSOR_K],
                                 im->bytes[FA__TENSOR_V], im->bytes[FA__TENSOR_O]};
    run_golden(p, im->t[FA__TENSOR_Q], im->t[FA__TENSOR_K], im->t[FA__TENSOR_V],
               im->t[FA__TENSOR_O], im->t[FA__TENSOR_LSE], fwd_bytes,
               im->bytes[FA__TENSOR_LSE], &im->mi);
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_buffer *b[FA__TENSOR_SCRATCH] = {NULL};
    for (int i = 0; i < FA__TENSOR_SCRATCH; i++) {
        void *mem = i >= FA__TENSOR_DQ ? im->ref[i - FA__TENSOR_DQ] : im->t[i];
        assert_int_equal(fa_buffer_wrap_host(ctx, mem, im->bytes[i], &b[i]), OK);
    }
    fa_problem golden = *p;
    golden.block_r = golden.block_c = 0;
    fa_buffer *bm[4] = {NULL, NULL, NULL, NULL}; /* ALiBi, bias, sinks, d_sinks */
    void *mod_mem[4] = {im->mi.alibi, im->mi.bias, im->mi.sinks, im->dsinks_ref};
    size_t slopes = (size_t)p->heads_q * (p->alibi == 2 ? (size_t)p->batch : 1);
    size_t mod_bytes[4] = {slopes * 4, im->mi.bias_bytes, (size_t)p->heads_q * 4,
                           (size_t)p->heads_q * 4};
    for (int i = 0; i < 4; i++)
        if (mod_mem[i])
            assert_int_equal(fa_buffer_wrap_host(ctx, mod_mem[i], mod_bytes[i], &bm[i]), OK);
    fa_modifier_buffers mods = {bm[0], bm[1], bm[2], bm[3]};
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create_backward(ctx, &golden, &plan), OK);
    assert_int_equal(fa_backward_ex(ctx, plan, b[FA__TENSOR_Q], b[FA__TENSOR_K], b[FA__TENSOR_V],
                                    b[FA__TENSOR_O], b[FA__TENSOR_LSE], b[FA__TENSOR_DO],
                                    b[FA__TENSOR_DQ], b[FA__TENSOR_DK], b[FA__TENSOR_DV], &mods),
                     OK);
    fa_plan_destroy(plan);
    for (int i = 0; i < FA__TENSOR_SCRATCH; i++)
        fa_buffer_destroy(b[i]);
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(bm[i]);
    fa_context_destroy(ctx);
}

/* The plan's three launches in order on the images, as fa_backward runs them: outputs and D
 * back to 0xFF first, launches with an empty grid skipped. scale_error multiplies the softmax
 * scale the kernels see (1: the real run). */
static void bwd_emulate(const emu_case *c, const fa_plan *plan, bwd_images *im,
                        float scale_error)
{
    for (int i = FA__TENSOR_DQ; i <= FA__TENSOR_DSINKS; i++)
        if (i <= FA__TENSOR_SCRATCH || i == FA__TENSOR_DSINKS)
            memset(im->t[i], 0xFF, im->bytes[i]);
    for (int i = 0; i < plan->n_launches; i++) {
        const fa__launch *l = &plan->launches[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0)
            continue;
        char options[256];
        const fa_emu_kernel *kernel = emu_launch_kernel(c->name, l, options, sizeof options);
        void *args[FA__MAX_LAUNCH_ARGS];
        for (int a = 0; a < l->n_args; a++)
            args[a] = im->t[l->args[a]];
        fa_kernel_params kp = l->params;
        kp.has_lse = 1;
        kp.scale_log2 *= scale_error;
        unsigned gx = c->fold ? 1u : (unsigned)l->grid[0],
                 gy = c->fold ? 1u : (unsigned)l->grid[1],
                 gz = c->fold ? 1u : (unsigned)l->grid[2];
        emu_launch(c->name, l, kernel, gx, gy, gz, args, &kp);
    }
}

/* One gradient tensor [B, heads, seq, d] against the golden's: within rel * max|golden| + 1e-6,
 * exactly 0 on rows zero_row marks (per (b * heads + h) * seq + s), and every buffer element
 * outside the tensor as the golden left it (0xFF). Returns the worst |error| / tolerance; adds
 * the mismatches to *bad. */
static double compare_grad(const emu_case *c, const char *what, const fa_tensor_layout *l,
                           int64_t heads, int64_t seq, const unsigned char *got,
                           const unsigned char *want, size_t bytes,
                           const unsigned char *zero_row, int *bad)
{
    const size_t elem = fa_dtype_size(c->dtype), n = bytes / elem;
    const int64_t d = c->head_dim;
    double rel = c->dtype == FA_DTYPE_F32 ? 1e-5 : c->dtype == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
    double peak = 0.0, worst = 0.0;
    unsigned char *inside = calloc(n, 1);
    assert_non_null(inside);
    for (int pass = 0; pass < 2; pass++) /* 0: the peak; 1: the check */
        for (int64_t row = 0; row < c->batch * heads * seq; row++) {
            int64_t b = row / (heads * seq), h = row / seq % heads, s = row % seq;
            size_t at = (size_t)(l->offset + b * l->stride_batch + h * l->stride_head +
                                 s * l->stride_seq);
            for (int64_t x = 0; x < d; x++) {
                double g = oracle_load(c->dtype, got, (int64_t)at + x);
                double w = oracle_load(c->dtype, want, (int64_t)at + x);
                double tol = rel * peak + 1e-6, err = fabs(g - w);
                inside[at + (size_t)x] = 1;
                if (pass == 0) {
                    peak = fabs(w) > peak ? fabs(w) : peak;
                    continue;
                }
                worst = err / tol > worst ? err / tol : worst;
                if (zero_row[row] ? g == 0.0 : err <= tol)
                    continue;
                if ((*bad)++ < 5)
                    print_message("  %s: %s row %lld x %lld is %.9g, golden %.9g%s\n", c->name,
                                  what, (long long)row, (long long)x, g, w,
                                  zero_row[row] ? " (must be exactly 0)" : "");
            }
        }
    for (size_t i = 0; i < n; i++)
        if (!inside[i] && memcmp(got + i * elem, want + i * elem, elem) != 0 && (*bad)++ < 5)
            print_message("  %s: %s buffer element %zu, outside the tensor, was written\n",
                          c->name, what, i);
    free(inside);
    return worst;
}

/* Rows that must get exactly 0: dQ rows with no key (LSE -inf), into zq [B, Hq, Sq]; dK and dV
 * rows of keys no query row sees (past the last row's allowed keys), into zk [B, Hkv, Sk]. */
static void bwd_zero_rows(const emu_case *c, const float *lse, unsigned char *zq,
                          unsigned char *zk)
{
    for (int64_t i = 0; i < c->batch * c->heads_q * c->seqlen_q; i++)
        zq[i] = isinf(lse[i]) && lse[i] < 0;
    int64_t seen = c->seqlen_q > 0 ? fa_keys_allowed((int)c->mask, c->seqlen_q - 1, c->seqlen_q,
                                                     c->seqlen_k)
                                   : 0;
    for (int64_t i = 0; i < c->batch * c->heads_kv * c->seqlen_k; i++)
        zk[i] = i % c->seqlen_k >= seen;
}

/* dQ, dK and dV against the golden; returns the mismatches. */
static int bwd_compare(const emu_case *c, const fa_problem *p, const bwd_images *im)
{
    unsigned char *zq = calloc((size_t)(c->batch * c->heads_q * c->seqlen_q) + 1, 1);
    unsigned char *zk = calloc((size_t)(c->batch * c->heads_kv * c->seqlen_k) + 1, 1);
    assert_true(zq && zk);
    bwd_zero_rows(c, im->t[FA__TENSOR_LSE], zq, zk);
    int bad = 0;
    double w_dq = compare_grad(c, "dQ", &p->dq, c->heads_q, c->seqlen_q, im->t[FA__TENSOR_DQ],
                               im->ref[0], im->bytes[FA__TENSOR_DQ], zq, &bad);
    double w_dk = compare_grad(c, "dK", &p->dk, c->heads_kv, c->seqlen_k, im->t[FA__TENSOR_DK],
                               im->ref[1], im->bytes[FA__TENSOR_DK], zk, &bad);
    double w_dv = compare_grad(c, "dV", &p->dv, c->heads_kv, c->seqlen_k, im->t[FA__TENSOR_DV],
                               im->ref[2], im->bytes[FA__TENSOR_DV], zk, &bad);
    print_message("  %-36s worst err/tol: dq %.3f dk %.3f dv %.3f\n", c->name, w_dq, w_dk, w_dv);
    if (p->sinks) {
        /* d_sinks: f32 sums (a tree) against the golden's f64, D from the stored O either way;
         * the element past [Hq] untouched. */
        const float *got = im->t[FA__TENSOR_DSINKS], *want = im->dsinks_ref;
        for (int64_t h = 0; h <= c->heads_q; h++) {
            bool ok = h == c->heads_q
                          ? memcmp(&got[h], &want[h], sizeof *got) == 0
                          : fabs((double)got[h] - want[h]) <= 1e-4 * (1.0 + fabs(want[h]));
            if (!ok && bad++ < 10)
                print_message("  %s: d_sinks[%lld] is %.9g, golden %.9g\n", c->name,
                              (long long)h, got[h], want[h]);
        }
    }
    free(zq);
    free(zk);
    return bad;
}

/* Plans, runs (twice: the second must give the same bits) and compares one backward case.
 * Returns the number of mismatching elements. */
static int run_bwd_case(const emu_case *c, float scale_error)
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
    if (fa_plan_create_backward(arch, &p, &plan) != OK)
        fail_msg("%s: the sm_80 backward plan failed: %s", c->name, fa_context_last_error(arch));
    assert_int_equal(plan->n_launches, p.sinks ? 4 : 3);
    bwd_images im;
    bwd_alloc(c, &p, plan, &im);
    bwd_golden(&p, &im);
    double t0 = harness_seconds();
    bwd_emulate(c, plan, &im, scale_error);
    double secs = harness_seconds() - t0;
    int bad = bwd_compare(c, &p, &im);
    print_message("  %-36s Br %d, Bc %d, %.2f s: %s\n", c->name, (int)plan->tiles.block_r,
                  (int)plan->tiles.block_c, secs, bad ? "MISMATCH" : "matches the golden");
    /* Determinism: a second run from 0xFF outputs gives the same bits. */
    void *first[3];
    for (int i = 0; i < 3; i++) {
        first[i] = malloc(im.bytes[FA__TENSOR_DQ + i]);
        assert_non_null(first[i]);
        memcpy(first[i], im.t[FA__TENSOR_DQ + i], im.bytes[FA__TENSOR_DQ + i]);
    }
    bwd_emulate(c, plan, &im, scale_error);
    for (int i = 0; i < 3; i++) {
        if (memcmp(first[i], im.t[FA__TENSOR_DQ + i], im.bytes[FA__TENSOR_DQ + i]) != 0)
            fail_msg("%s: a second run gave different %s bits", c->name,
                     i == 0 ? "dQ" : i == 1 ? "dK" : "dV");
        free(first[i]);
    }
    bwd_free(&im);
    fa_plan_destroy(plan);
    fa_context_destroy(arch);
    return bad;
}

static void test_backward_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bwd_cases / sizeof bwd_cases[0]; i++) {
        int bad = run_bwd_case(&bwd_cases[i], 1.0f);
        if (bad)
            fail_msg("%s: %d elements differ from the golden", bwd_cases[i].name, bad);
    }
}

/* The forward's modifier cases (mod_cases: each feature alone and all together, CUDA cores and
 * tensor cores, masks, GQA, rows without keys) through the backward: dQ, dK, dV and d_sinks
 * against the golden. */
static void test_backward_modifier_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof mod_cases / sizeof mod_cases[0]; i++) {
        int bad = run_bwd_case(&mod_cases[i], 1.0f);
        if (bad)
            fail_msg("%s: %d elements differ from the golden", mod_cases[i].name, bad);
    }
}

/* f16 dS past 65504, rounded for dS K and dS^T Q on tensor cores, gives finite gradients that
 * match the golden's (it was inf). */
static void test_backward_large_ds(void **state)
{
    (void)state;
    static const emu_case c = {"bwd_mma_large_ds_f16_d64", FA_DTYPE_F16, FA_MASK_NONE,
                               FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16, 32, 0, false, false, NULL};
    large_ds = true;
    int bad = run_bwd_case(&c, 1.0f);
    large_ds = false;
    if (bad)
        fail_msg("%s: %d elements differ from the golden", c.name, bad);
}

/* As for the forward: a scale 0.1% off must give mismatches in the backward's comparison. */
static void test_backward_catches_errors(void **state)
{
    (void)state;
    assert_true(run_bwd_case(&bwd_cases[0], 1.001f) > 0);
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
