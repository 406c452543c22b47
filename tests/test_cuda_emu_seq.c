/*
 * test_cuda_emu_seq.c - the CUDA kernels' sequences and decoding without a GPU: kernels_cu/
 * compiled as host C++ (tests/cuda_emu, one host thread per CUDA thread) against the CPU golden
 * backend run through the public API on the same host memory.
 *
 * - Split-KV forwards (flash_fwd with SPLIT writing f32 partials, then flash_merge), dense and
 *   varlen, f32 on CUDA cores and f16/bf16 on tensor cores, causal both ways, with sinks, and
 *   the planner's own chunk count; against the golden's unsplit fa_forward_seq.
 * - Varlen forwards (sequences of no rows or no keys) with every score modifier and dropout.
 * - seqlens_k (a length 0, lengths within and past a chunk) and paged K/V (page_size 1, 3, 16 in
 *   shuffled pools with spare pages).
 * - fa_merge's plan: partials in the storage type, rows without keys, a NaN partial.
 * - The varlen backward: dQ, dK, dV (and d_sinks) against the golden's fa_backward_seq.
 *
 * The emulated plan is the CUDA planner's for sm_80 on a planning-only context (tile overrides
 * pick a compiled configuration: tests/CMakeLists.txt), run launch by launch as src/run.c runs
 * it (emu_run_plan). Every K/V slot no sequence uses holds NaN, so reading one shows; outputs
 * start as 0xFF bytes and every element the golden leaves so must stay so; a second run, on a
 * 1 x 1 x 1 grid that the kernels' grid-stride loops unfold, gives the same bits.
 */
#include "emu_plan.h"
#include "harness.h"
#include "internal.h"
#include "oracle.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK
#define SQ_MAX_BATCH 3

typedef enum sq_mode {
    SQ_DENSE,      /* [B, H, S, d]: every sequence has seqlen_k keys */
    SQ_SEQLENS_K,  /* dense K/V padded to seqlen_k, lengths in seqlens_k */
    SQ_PAGED,      /* K/V in a shuffled page pool, every sequence seqlen_k keys */
    SQ_PAGED_LENS, /* paged, lengths in seqlens_k */
    SQ_VARLEN      /* packed rows, cu_seqlens_q / cu_seqlens_k */
} sq_mode;

typedef enum sq_mods {
    MODS_NONE,
    MODS_SINKS,  /* random in [-1, 2), the last head's -inf (no sink) */
    MODS_DECODE, /* those a GQA-packed decode applies per row: softcap, ALiBi, sinks, a window
                    of 70 keys */
    MODS_ALL     /* softcap, ALiBi, an f32 bias, a window, sinks and dropout */
} sq_mods;

typedef struct sq_case {
    const char *name;
    sq_mode mode;
    fa_dtype dtype;
    fa_mask mask;
    int64_t batch, hq, hkv, d;
    int32_t lq[SQ_MAX_BATCH], lk[SQ_MAX_BATCH]; /* rows and keys of each sequence */
    int64_t seqlen_k;                           /* the problem's (0: the longest lk) */
    int64_t page_size;
    int32_t kv_splits;   /* the problem's (0: the planner's choice) */
    int32_t want_splits; /* the chunks the sm_80 plan must make (1: not split) */
    int32_t block_r, block_c;
    sq_mods mods;
    int32_t first_token; /* varlen: cu_seqlens_q[0] = cu_seqlens_k[0] (rows before stay NaN) */
    bool packed;         /* the plan must GQA-pack the decode (PACKED) */
} sq_case;

static const sq_case fwd_cases[] = {
    /* Split-KV: 150 keys in 5 tiles of 32, 3 chunks of 64 keys; the sinks start chunk 0 only. */
    {"split_sinks_bottom_right_f32", SQ_DENSE, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2, 4, 2,
     64, {16, 16}, {150, 150}, 0, 0, 3, 3, 16, 32, MODS_SINKS, 0, false},
    /* Varlen and split on tensor cores: a sequence without rows; top-left rows 0..36 see only
     * the first chunks, so later chunks are empty (LSE -inf) for them. */
    {"varlen_split_top_left_f16_mma", SQ_VARLEN, FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, 3, 4, 1,
     64, {37, 0, 20}, {150, 9, 70}, 0, 0, 4, 3, 16, 32, MODS_NONE, 0, false},
    /* Varlen with every modifier (per-sequence lengths for ALiBi, the window and bottom-right;
     * a sequence without keys). */
    /* cu_seqlens from 300, past batch x seqlen_q rows: the partials are laid out by token. */
    {"varlen_split_first_token_f16_mma", SQ_VARLEN, FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, 3, 4,
     1, 64, {37, 0, 20}, {150, 9, 70}, 0, 0, 4, 3, 16, 32, MODS_NONE, 300, false},
    {"varlen_mods_bottom_right_f32", SQ_VARLEN, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 4,
     2, 40, {7, 1, 30}, {20, 0, 45}, 0, 0, 1, 1, 8, 24, MODS_ALL, 0, false},
    {"varlen_bottom_right_f32", SQ_VARLEN, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 4, 2, 40,
     {7, 0, 19}, {12, 5, 30}, 0, 0, 1, 1, 8, 24, MODS_NONE, 0, false},
    {"varlen_top_left_bf16_mma", SQ_VARLEN, FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, 3, 2, 2, 64,
     {17, 40, 0}, {50, 33, 16}, 0, 0, 1, 1, 16, 32, MODS_NONE, 0, false},
    /* Decoding with seqlens_k (padding keys NaN) and the planner's own split: one row per
     * sequence (Br 1, CUDA cores), 19 key tiles, 6 work-groups for 108 SMs: 4 chunks. */
    {"seqlens_k_decode_planned_split_bf16", SQ_SEQLENS_K, FA_DTYPE_BF16,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 2, 2, 64, {1, 1, 1}, {0, 17, 590}, 600, 0, 0, 4, 16, 32,
     MODS_NONE, 0, false},
    /* Decoding, GQA-packed (the query heads of a K/V head as one tile's rows, PACKED) with the
     * modifiers it applies per row: 4 heads a group on CUDA cores (8 lanes a row, a warp per
     * tile) with the planner's split; 16 heads of MQA on tensor cores. */
    {"gqa_decode_packed_mods_f16", SQ_DENSE, FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2, 8, 2,
     64, {1, 1}, {300, 300}, 0, 0, 0, 2, 0, 32, MODS_DECODE, 0, true},
    {"mqa_decode_packed_mma_mods_bf16", SQ_DENSE, FA_DTYPE_BF16, FA_MASK_NONE, 2, 16, 1, 64,
     {1, 1}, {200, 200}, 0, 0, 0, 1, 0, 0, MODS_DECODE, 0, true},
    /* A one-row decode of K/V pages (a warp a row, 16-byte chunks of each key's row). */
    {"paged_decode_f32", SQ_PAGED, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2, 2, 2, 64, {1, 1},
     {100, 100}, 0, 16, 1, 1, 0, 0, MODS_NONE, 0, false},
    /* Paged: tiles straddle pages of 3 keys, and pages of one key. */
    {"paged_p3_bottom_right_f32", SQ_PAGED, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2, 2, 1,
     40, {9, 9}, {50, 50}, 0, 3, 1, 1, 8, 24, MODS_NONE, 0, false},
    {"paged_p1_bottom_right_f32", SQ_PAGED, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2, 2, 2,
     40, {8, 8}, {30, 30}, 0, 1, 1, 1, 8, 24, MODS_NONE, 0, false},
    {"paged_p16_seqlens_k_split_f16_mma", SQ_PAGED_LENS, FA_DTYPE_F16, FA_MASK_NONE, 3, 4, 2, 64,
     {20, 20, 20}, {40, 0, 150}, 160, 16, 3, 3, 16, 32, MODS_NONE, 0, false},
};

/* The varlen backward: (d, Br, Bc) serves flash_bwd_pre, flash_bwd_dq, flash_bwd_dsinks,
 * (d, Bc, Br) flash_bwd_dkdv. */
static const sq_case bwd_cases[] = {
    {"bwd_varlen_bottom_right_f32", SQ_VARLEN, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 4, 2,
     40, {7, 0, 19}, {12, 5, 30}, 0, 0, 1, 1, 8, 24, MODS_NONE, 0, false},
    {"bwd_varlen_mods_bottom_right_f32", SQ_VARLEN, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3,
     4, 2, 40, {7, 1, 30}, {20, 0, 45}, 0, 0, 1, 1, 8, 24, MODS_ALL, 0, false},
    /* D = rowsum(dO * O) in scratch, indexed by token from cu_seqlens_q[0] = 200 */
    {"bwd_varlen_first_token_f32", SQ_VARLEN, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 4, 2,
     40, {7, 0, 19}, {12, 5, 30}, 0, 0, 1, 1, 8, 24, MODS_NONE, 200, false},
    {"bwd_varlen_top_left_bf16_mma", SQ_VARLEN, FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, 3, 2, 2,
     64, {17, 40, 0}, {50, 33, 16}, 0, 0, 1, 1, 16, 32, MODS_NONE, 0, false},
};

/* ---- a case's problem and host images ------------------------------------------------------ */

/* Host memory of a case, by fa__tensor (NULL where unused), and the golden's outputs. */
typedef struct sq_images {
    const sq_case *c;
    fa_problem p;
    int64_t sq, sk, total_q, total_k, lse_rows;
    int32_t cu_q[SQ_MAX_BATCH + 1], cu_k[SQ_MAX_BATCH + 1], lens[SQ_MAX_BATCH];
    void *t[FA__TENSOR_COUNT];
    size_t bytes[FA__TENSOR_COUNT];
    void *ref[FA__TENSOR_COUNT]; /* the golden's O, LSE (dQ, dK, dV, d_sinks) */
} sq_images;

static int64_t max_of(const int32_t *v, int64_t n)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static bool is_paged(const sq_case *c) { return c->mode == SQ_PAGED || c->mode == SQ_PAGED_LENS; }

/* Element offset of row i of (b, h) in a Q-like layout (varlen: packed tokens). */
static int64_t q_at(const sq_images *im, const fa_tensor_layout *t, int64_t b, int64_t h,
                    int64_t i)
{
    if (im->c->mode == SQ_VARLEN)
        return t->offset + (im->cu_q[b] + i) * t->stride_seq + h * t->stride_head;
    return t->offset + b * t->stride_batch + h * t->stride_head + i * t->stride_seq;
}

/* Element offset of key j of (b, h_kv) in a K-like layout (varlen: packed; paged: the table). */
static int64_t k_at(const sq_images *im, const fa_tensor_layout *t, int64_t b, int64_t h,
                    int64_t j)
{
    const fa_problem *p = &im->p;
    if (im->c->mode == SQ_VARLEN)
        return t->offset + (im->cu_k[b] + j) * t->stride_seq + h * t->stride_head;
    if (is_paged(im->c)) {
        const int32_t *table = im->t[FA__TENSOR_BLOCK_TABLE];
        return t->offset + table[b * p->pages_per_seq + j / p->page_size] * t->stride_batch +
               (j % p->page_size) * t->stride_seq + h * t->stride_head;
    }
    return t->offset + b * t->stride_batch + h * t->stride_head + j * t->stride_seq;
}

static void *alloc_bytes(sq_images *im, fa__tensor i, size_t bytes, int fill)
{
    im->bytes[i] = bytes;
    im->t[i] = malloc(bytes > 0 ? bytes : 1);
    assert_non_null(im->t[i]);
    memset(im->t[i], fill, bytes);
    return im->t[i];
}

/* The modifiers' problem fields and tensors (mods_for's of test_cuda_emu.c, per sequence). */
static void mods_build(sq_images *im, harness_rng *rng)
{
    const sq_case *c = im->c;
    fa_problem *p = &im->p;
    if (c->mods == MODS_NONE)
        return;
    p->sinks = 1;
    float *sinks = alloc_bytes(im, FA__TENSOR_SINKS, (size_t)c->hq * 4, 0);
    for (int64_t h = 0; h < c->hq; h++)
        sinks[h] = (float)harness_rng_uniform(rng, -1.0, 2.0);
    sinks[c->hq - 1] = -INFINITY;
    if (c->mods == MODS_SINKS)
        return;
    p->softcap = 0.5f;
    p->alibi = 1;
    float *slopes = alloc_bytes(im, FA__TENSOR_ALIBI, (size_t)c->hq * 4, 0);
    for (int64_t h = 0; h < c->hq; h++)
        slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)c->hq);
    p->window = 1;
    p->window_left = c->mods == MODS_DECODE ? 70 : 9;
    p->window_right = 4;
    if (c->mods == MODS_DECODE)
        return;
    /* bias f32 [B, Hq, Sq, Sk] of the longest lengths, rows padded by 3, offset 2 */
    p->bias = 1;
    p->bias_dtype = FA_DTYPE_F32;
    p->bias_layout.offset = 2;
    p->bias_layout.stride_seq = im->sk + 3;
    p->bias_layout.stride_head = im->sq * p->bias_layout.stride_seq;
    p->bias_layout.stride_batch = c->hq * p->bias_layout.stride_head;
    size_t n = (size_t)(2 + c->batch * p->bias_layout.stride_batch);
    float *bias = alloc_bytes(im, FA__TENSOR_BIAS, n * 4, 0);
    for (size_t i = 0; i < n; i++)
        bias[i] = (float)harness_rng_uniform(rng, -1.0, 1.0);
    p->dropout_p = 0.25f;
    p->dropout_seed = 0x0123456789abcdefull;
    p->dropout_offset = 7;
}

/* A shuffled pool: the table's pages are distinct; the spare ones stay NaN. */
static void table_build(sq_images *im, harness_rng *rng)
{
    const fa_problem *p = &im->p;
    int64_t n = p->batch * p->pages_per_seq;
    int32_t *perm = malloc((size_t)p->num_pages * sizeof(int32_t));
    assert_non_null(perm);
    for (int64_t i = 0; i < p->num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = p->num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)harness_rng_uniform(rng, 0, (double)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *table = alloc_bytes(im, FA__TENSOR_BLOCK_TABLE, (size_t)n * 4, 0);
    memcpy(table, perm, (size_t)n * 4);
    free(perm);
}

/* Random in [-1, 1) at n elements of t from `at` on (the dtype's rounding). */
static void fill_row(const sq_images *im, void *t, int64_t at, int64_t n, harness_rng *rng)
{
    for (int64_t x = 0; x < n; x++)
        oracle_store(im->p.dtype, t, at + x, harness_rng_uniform(rng, -1.0, 1.0));
}

/* A tensor of n elements, all NaN (0xFF bytes are NaN in every dtype). */
static void *nan_tensor(sq_images *im, fa__tensor i, int64_t n)
{
    return alloc_bytes(im, i, (size_t)n * fa_dtype_size(im->p.dtype), 0xFF);
}

/* The problem, the sequence buffers, Q, K, V (and dO) with NaN wherever no sequence reads, O
 * and LSE (with one guard element) as 0xFF bytes. */
static void images_build(const sq_case *c, sq_images *im)
{
    memset(im, 0, sizeof *im);
    im->c = c;
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    fa_problem *p = &im->p;
    im->sq = max_of(c->lq, c->batch);
    im->sk = c->seqlen_k > 0 ? c->seqlen_k : max_of(c->lk, c->batch);
    assert_int_equal(fa_problem_init(p, c->dtype, c->mode == SQ_VARLEN ? FA_LAYOUT_BSHD
                                                                       : FA_LAYOUT_BHSD,
                                     c->batch, c->hq, c->hkv, im->sq, im->sk, c->d),
                     OK);
    p->mask = c->mask;
    p->block_r = c->block_r;
    p->block_c = c->block_c;
    p->kv_splits = c->kv_splits;
    im->cu_q[0] = im->cu_k[0] = c->first_token;
    for (int64_t b = 0; b < c->batch; b++) {
        im->cu_q[b + 1] = im->cu_q[b] + c->lq[b];
        im->cu_k[b + 1] = im->cu_k[b] + c->lk[b];
        im->lens[b] = c->lk[b];
    }
    im->total_q = c->mode == SQ_VARLEN ? im->cu_q[c->batch] : c->batch * im->sq;
    im->total_k = c->mode == SQ_VARLEN ? im->cu_k[c->batch] : c->batch * im->sk;
    int64_t q_n = im->total_q * c->hq * c->d, kv_n = im->total_k * c->hkv * c->d;
    if (c->mode == SQ_VARLEN) {
        p->varlen = 1;
        memcpy(alloc_bytes(im, FA__TENSOR_CU_SEQLENS_Q, (size_t)(c->batch + 1) * 4, 0), im->cu_q,
               (size_t)(c->batch + 1) * 4);
        memcpy(alloc_bytes(im, FA__TENSOR_CU_SEQLENS_K, (size_t)(c->batch + 1) * 4, 0), im->cu_k,
               (size_t)(c->batch + 1) * 4);
    }
    if (c->mode == SQ_SEQLENS_K || c->mode == SQ_PAGED_LENS) {
        p->seqlens_k = 1;
        memcpy(alloc_bytes(im, FA__TENSOR_SEQLENS_K, (size_t)c->batch * 4, 0), im->lens,
               (size_t)c->batch * 4);
    }
    if (is_paged(c)) {
        int64_t per = (im->sk + c->page_size - 1) / c->page_size;
        assert_int_equal(fa_problem_set_paged(p, c->page_size, c->batch * per + 2, per), OK);
        kv_n = p->num_pages * c->page_size * c->hkv * c->d;
        table_build(im, &rng);
    }
    mods_build(im, &rng);
    void *q = nan_tensor(im, FA__TENSOR_Q, q_n), *d_o = nan_tensor(im, FA__TENSOR_DO, q_n);
    void *k = nan_tensor(im, FA__TENSOR_K, kv_n), *v = nan_tensor(im, FA__TENSOR_V, kv_n);
    for (int64_t b = 0; b < c->batch; b++) {
        for (int64_t h = 0; h < c->hq; h++)
            for (int64_t i = 0; i < c->lq[b]; i++) {
                fill_row(im, q, q_at(im, &p->q, b, h, i), c->d, &rng);
                fill_row(im, d_o, q_at(im, &p->d_o, b, h, i), c->d, &rng);
            }
        for (int64_t h = 0; h < c->hkv; h++)
            for (int64_t j = 0; j < c->lk[b]; j++) {
                fill_row(im, k, k_at(im, &p->k, b, h, j), c->d, &rng);
                fill_row(im, v, k_at(im, &p->v, b, h, j), c->d, &rng);
            }
    }
    im->lse_rows = c->hq * im->total_q;
    nan_tensor(im, FA__TENSOR_O, q_n);
    alloc_bytes(im, FA__TENSOR_LSE, (size_t)(im->lse_rows + 1) * 4, 0xFF);
}

static void images_free(sq_images *im)
{
    for (int i = 0; i < FA__TENSOR_COUNT; i++) {
        free(im->t[i]);
        free(im->ref[i]);
    }
}

/* A golden output buffer like the image's (0xFF bytes). */
static void *ref_like(sq_images *im, fa__tensor i)
{
    im->ref[i] = malloc(im->bytes[i] > 0 ? im->bytes[i] : 1);
    assert_non_null(im->ref[i]);
    memset(im->ref[i], 0xFF, im->bytes[i]);
    return im->ref[i];
}

/* ---- the golden ------------------------------------------------------------------------------ */

/* Every image as a host buffer of ctx (NULL where absent); the golden's outputs in place of the
 * images' where ref holds them. */
static void wrap_all(fa_context *ctx, const sq_images *im, fa_buffer *b[FA__TENSOR_COUNT])
{
    for (int i = 0; i < FA__TENSOR_COUNT; i++) {
        b[i] = NULL;
        void *mem = im->ref[i] ? im->ref[i] : im->t[i];
        if (mem)
            assert_int_equal(fa_buffer_wrap_host(ctx, mem, im->bytes[i], &b[i]), OK);
    }
}

static fa_seq_buffers seq_buffers_of(fa_buffer *const b[FA__TENSOR_COUNT])
{
    fa_seq_buffers s = {b[FA__TENSOR_CU_SEQLENS_Q], b[FA__TENSOR_CU_SEQLENS_K],
                        b[FA__TENSOR_SEQLENS_K], b[FA__TENSOR_BLOCK_TABLE]};
    return s;
}

/* The golden's unsplit forward into ref O and LSE; then, with backward, its gradients into ref
 * dQ, dK, dV (and d_sinks) from that O and LSE, which become the images' too. */
static void run_golden(sq_images *im, bool backward)
{
    ref_like(im, FA__TENSOR_O);
    ref_like(im, FA__TENSOR_LSE);
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_problem golden = im->p;
    golden.block_r = golden.block_c = 0;
    golden.kv_splits = 1;
    fa_buffer *b[FA__TENSOR_COUNT];
    wrap_all(ctx, im, b);
    fa_modifier_buffers mods = {b[FA__TENSOR_ALIBI], b[FA__TENSOR_BIAS], b[FA__TENSOR_SINKS],
                                NULL};
    fa_seq_buffers seqs = seq_buffers_of(b);
    fa_plan *plan = NULL;
    if (fa_plan_create(ctx, &golden, &plan) != OK)
        fail_msg("%s: golden plan: %s", im->c->name, fa_context_last_error(ctx));
    if (fa_forward_seq(ctx, plan, b[FA__TENSOR_Q], b[FA__TENSOR_K], b[FA__TENSOR_V],
                       b[FA__TENSOR_O], b[FA__TENSOR_LSE], &mods, &seqs) != OK)
        fail_msg("%s: golden forward: %s", im->c->name, fa_context_last_error(ctx));
    fa_plan_destroy(plan);
    if (backward) {
        memcpy(im->t[FA__TENSOR_O], im->ref[FA__TENSOR_O], im->bytes[FA__TENSOR_O]);
        memcpy(im->t[FA__TENSOR_LSE], im->ref[FA__TENSOR_LSE], im->bytes[FA__TENSOR_LSE]);
        if (fa_plan_create_backward(ctx, &golden, &plan) != OK)
            fail_msg("%s: golden backward plan: %s", im->c->name, fa_context_last_error(ctx));
        mods.d_sinks = b[FA__TENSOR_DSINKS];
        if (fa_backward_seq(ctx, plan, b[FA__TENSOR_Q], b[FA__TENSOR_K], b[FA__TENSOR_V],
                            b[FA__TENSOR_O], b[FA__TENSOR_LSE], b[FA__TENSOR_DO],
                            b[FA__TENSOR_DQ], b[FA__TENSOR_DK], b[FA__TENSOR_DV], &mods,
                            &seqs) != OK)
            fail_msg("%s: golden backward: %s", im->c->name, fa_context_last_error(ctx));
        fa_plan_destroy(plan);
    }
    for (int i = 0; i < FA__TENSOR_COUNT; i++)
        fa_buffer_destroy(b[i]);
    fa_context_destroy(ctx);
}

/* ---- comparisons ----------------------------------------------------------------------------- */

/* Marks the elements of every row of a Q-like (queries) or K-like (keys) tensor. */
static unsigned char *rows_mask(const sq_images *im, const fa_tensor_layout *t, bool keys,
                                size_t n)
{
    const sq_case *c = im->c;
    unsigned char *in = calloc(n + 1, 1);
    assert_non_null(in);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < (keys ? c->hkv : c->hq); h++)
            for (int64_t i = 0; i < (keys ? c->lk[b] : c->lq[b]); i++) {
                int64_t at = keys ? k_at(im, t, b, h, i) : q_at(im, t, b, h, i);
                memset(in + at, 1, (size_t)c->d);
            }
    return in;
}

/*
 * One output tensor (image i) against the golden's: inside its rows within abs + rel * |want|
 * (peak: rel * max|want| instead), NaN only where the golden has NaN, and that only when the
 * case makes NaN rows (nan_rows; else the golden's NaN means it read a NaN slot, and the case
 * would check nothing); every other byte as the golden left it. Returns the mismatches (the
 * first few printed).
 */
static int compare_tensor(const sq_images *im, fa__tensor i, const char *what,
                          const fa_tensor_layout *t, bool keys, double rel, double abs_tol,
                          bool peak_rel, bool nan_rows)
{
    const fa_dtype dt = im->p.dtype;
    const size_t elem = fa_dtype_size(dt), n = im->bytes[i] / elem;
    const unsigned char *got = im->t[i], *want = im->ref[i];
    unsigned char *in = rows_mask(im, t, keys, n);
    double peak = 0.0;
    for (size_t e = 0; e < n; e++)
        if (in[e] && fabs(oracle_load(dt, want, (int64_t)e)) > peak)
            peak = fabs(oracle_load(dt, want, (int64_t)e));
    int bad = 0;
    for (size_t e = 0; e < n; e++) {
        bool ok;
        if (!in[e]) {
            ok = memcmp(got + e * elem, want + e * elem, elem) == 0;
        } else {
            double g = oracle_load(dt, got, (int64_t)e), w = oracle_load(dt, want, (int64_t)e);
            ok = (isnan(g) && isnan(w) && nan_rows) ||
                 fabs(g - w) <= abs_tol + rel * (peak_rel ? peak : fabs(w));
        }
        if (!ok && bad++ < 5)
            print_message("  %s: %s element %zu%s is %.9g, golden %.9g\n", im->c->name, what, e,
                          in[e] ? "" : " (outside the rows)", oracle_load(dt, got, (int64_t)e),
                          oracle_load(dt, want, (int64_t)e));
    }
    free(in);
    return bad;
}

/* n f32 values (LSE rows, d_sinks) and the guard after them: both -inf, both NaN, or within
 * rel * (1 + |want|); the guard untouched. */
static int compare_f32(const char *name, const char *what, const float *got, const float *want,
                       int64_t n, double rel)
{
    int bad = 0;
    for (int64_t i = 0; i <= n; i++) {
        bool ok = i == n ? memcmp(&got[i], &want[i], 4) == 0
                         : (isinf(got[i]) && isinf(want[i]) && got[i] == want[i]) ||
                               (isnan(got[i]) && isnan(want[i])) ||
                               fabs((double)got[i] - want[i]) <= rel * (1.0 + fabs(want[i]));
        if (!ok && bad++ < 5)
            print_message("  %s: %s %lld%s is %.9g, golden %.9g\n", name, what, (long long)i,
                          i == n ? " (the guard)" : "", got[i], want[i]);
    }
    return bad;
}

/* The storage type's unit roundoff. */
static double unit_roundoff(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 ? 0x1p-24 : dt == FA_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

/* O and LSE against the golden's (test_cuda_emu.c's rule: f32 1e-5 relative; f16/bf16 two
 * roundings, and the tensor cores' P rounding up to u * max|V| * dropout_scale). */
static int compare_forward(const sq_images *im, bool mma)
{
    const fa_problem *p = &im->p;
    double u = unit_roundoff(p->dtype);
    double rel = p->dtype == FA_DTYPE_F32 ? 1e-5 : 2.02 * u;
    double abs_tol = 1e-6 + (mma ? u / (1.0 - (double)p->dropout_p) : 0.0);
    return compare_tensor(im, FA__TENSOR_O, "O", &p->o, false, rel, abs_tol, false, false) +
           compare_f32(im->c->name, "LSE row", im->t[FA__TENSOR_LSE], im->ref[FA__TENSOR_LSE],
                       im->lse_rows, 1e-5);
}

/* ---- the emulated runs ----------------------------------------------------------------------- */

/* A planning-only CUDA context for sm_80 (the group's setup makes it). */
static fa_context *arch;

static int arch_open(void **state)
{
    (void)state;
    char why[256] = "";
    return fa_context_create_planning(&arch, FA_BACKEND_CUDA, "sm_80", why, sizeof why) == OK
               ? 0
               : -1;
}

static int arch_close(void **state)
{
    (void)state;
    fa_context_destroy(arch);
    return 0;
}

/* The sm_80 plan of an op for the case (fa_plan_create, _backward, or _merge with parts). */
static fa_plan *cuda_plan(const char *name, const fa_problem *p, fa__op op, int32_t parts)
{
    fa_plan *plan = NULL;
    fa_status st = op == FA__OP_BACKWARD ? fa_plan_create_backward(arch, p, &plan)
                   : op == FA__OP_MERGE  ? fa_plan_create_merge(arch, p, parts, &plan)
                                         : fa_plan_create(arch, p, &plan);
    if (st != OK)
        fail_msg("%s: the sm_80 plan failed: %s", name, fa_context_last_error(arch));
    return plan;
}

/* Runs the plan twice from 0xFF outputs (the tensors in `outs`), the second time on a folded
 * 1 x 1 x 1 grid (the kernels' grid-stride loops take every work item): the same bits. */
static void run_twice(const sq_images *im, const fa_plan *plan, const fa__tensor *outs, int n)
{
    void *first[FA__TENSOR_COUNT] = {NULL};
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < n; i++)
            memset(im->t[outs[i]], 0xFF, im->bytes[outs[i]]);
        emu_run_plan(im->c->name, plan, im->t, true, im->total_q, r == 1);
        for (int i = 0; i < n && r == 0; i++) {
            first[i] = malloc(im->bytes[outs[i]]);
            assert_non_null(first[i]);
            memcpy(first[i], im->t[outs[i]], im->bytes[outs[i]]);
        }
    }
    for (int i = 0; i < n; i++) {
        if (memcmp(first[i], im->t[outs[i]], im->bytes[outs[i]]) != 0)
            fail_msg("%s: a second (folded) run gave different bits (tensor %d)", im->c->name,
                     (int)outs[i]);
        free(first[i]);
    }
}

static bool plan_uses_mma(const fa_plan *plan)
{
    return plan->launches[0].variant.mma != 0;
}

static int run_forward_case(const sq_case *c)
{
    sq_images im;
    images_build(c, &im);
    run_golden(&im, false);
    fa_plan *plan = cuda_plan(c->name, &im.p, FA__OP_FORWARD, 0);
    assert_int_equal(fa_plan_kv_splits(plan), c->want_splits);
    assert_int_equal(plan->n_launches, c->want_splits > 1 ? 2 : 1);
    assert_int_equal(plan->packed, c->packed ? 1 : 0);
    const fa__tensor outs[] = {FA__TENSOR_O, FA__TENSOR_LSE};
    double t0 = harness_seconds();
    run_twice(&im, plan, outs, 2);
    int bad = compare_forward(&im, plan_uses_mma(plan));
    print_message("  %-46s Br %d Bc %d TPR %d, %d chunk(s), %.2f s: %s\n", c->name,
                  (int)plan->tiles.block_r, (int)plan->tiles.block_c,
                  (int)plan->launches[0].variant.row_lanes, (int)plan->kv_splits,
                  harness_seconds() - t0, bad ? "MISMATCH" : "matches the golden");
    fa_plan_destroy(plan);
    images_free(&im);
    return bad;
}

static void test_forward_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fwd_cases / sizeof fwd_cases[0]; i++)
        if (run_forward_case(&fwd_cases[i]))
            fail_msg("%s: the emulated kernels differ from the golden", fwd_cases[i].name);
}

/* The comparison sees a broken run: a merge that combines only the first chunk's partial (the
 * others' keys then count for nothing) must give mismatches. (Shifting the merge's LSE offset
 * instead made the last row read past the scratch: ASan.) */
static void test_catches_errors(void **state)
{
    (void)state;
    const sq_case *c = &fwd_cases[0];
    sq_images im;
    images_build(c, &im);
    run_golden(&im, false);
    fa_plan *plan = cuda_plan(c->name, &im.p, FA__OP_FORWARD, 0);
    assert_int_equal(plan->n_launches, 2);
    assert_true(plan->launches[1].params.splits > 1);
    plan->launches[1].params.splits = 1; /* the merge sees chunk 0 only */
    emu_run_plan(c->name, plan, im.t, true, im.total_q, false);
    assert_true(compare_forward(&im, false) > 0);
    fa_plan_destroy(plan);
    images_free(&im);
}

/* ---- the varlen backward ------------------------------------------------------------------- */

static int run_backward_case(const sq_case *c)
{
    sq_images im;
    images_build(c, &im);
    const fa_problem *p = &im.p;
    int64_t q_n = (int64_t)(im.bytes[FA__TENSOR_Q] / fa_dtype_size(p->dtype));
    int64_t kv_n = (int64_t)(im.bytes[FA__TENSOR_K] / fa_dtype_size(p->dtype));
    nan_tensor(&im, FA__TENSOR_DQ, q_n);
    nan_tensor(&im, FA__TENSOR_DK, kv_n);
    nan_tensor(&im, FA__TENSOR_DV, kv_n);
    for (int i = FA__TENSOR_DQ; i <= FA__TENSOR_DV; i++)
        ref_like(&im, (fa__tensor)i);
    if (p->sinks) {
        alloc_bytes(&im, FA__TENSOR_DSINKS, (size_t)(c->hq + 1) * 4, 0xFF);
        ref_like(&im, FA__TENSOR_DSINKS);
    }
    run_golden(&im, true);
    /* The golden's O and LSE are the inputs now; the ref copies must not be compared again. */
    free(im.ref[FA__TENSOR_O]);
    free(im.ref[FA__TENSOR_LSE]);
    im.ref[FA__TENSOR_O] = im.ref[FA__TENSOR_LSE] = NULL;
    fa_plan *plan = cuda_plan(c->name, p, FA__OP_BACKWARD, 0);
    assert_int_equal(plan->n_launches, p->sinks ? 4 : 3);
    const fa__tensor outs[] = {FA__TENSOR_DQ, FA__TENSOR_DK, FA__TENSOR_DV, FA__TENSOR_DSINKS};
    double t0 = harness_seconds();
    run_twice(&im, plan, outs, p->sinks ? 4 : 3);
    double rel = p->dtype == FA_DTYPE_F32 ? 1e-5 : p->dtype == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
    int bad = compare_tensor(&im, FA__TENSOR_DQ, "dQ", &p->dq, false, rel, 1e-6, true, false) +
              compare_tensor(&im, FA__TENSOR_DK, "dK", &p->dk, true, rel, 1e-6, true, false) +
              compare_tensor(&im, FA__TENSOR_DV, "dV", &p->dv, true, rel, 1e-6, true, false);
    if (p->sinks)
        bad += compare_f32(c->name, "d_sinks", im.t[FA__TENSOR_DSINKS], im.ref[FA__TENSOR_DSINKS],
                           c->hq, 1e-4);
    print_message("  %-46s Br %d Bc %d, %.2f s: %s\n", c->name, (int)plan->tiles.block_r,
                  (int)plan->tiles.block_c, harness_seconds() - t0,
                  bad ? "MISMATCH" : "matches the golden");
    fa_plan_destroy(plan);
    images_free(&im);
    return bad;
}

static void test_backward_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bwd_cases / sizeof bwd_cases[0]; i++)
        if (run_backward_case(&bwd_cases[i]))
            fail_msg("%s: the emulated kernels differ from the golden", bwd_cases[i].name);
}

/* ---- fa_merge ------------------------------------------------------------------------------ */

typedef struct merge_case {
    const char *name;
    fa_dtype dtype;
    int64_t batch, hq, sq, d;
    int32_t parts, block_r, block_c;
} merge_case;

static const merge_case merge_cases[] = {
    {"merge_f16_mma_padded", FA_DTYPE_F16, 2, 3, 20, 64, 3, 16, 32},
    {"merge_f32_padded", FA_DTYPE_F32, 1, 2, 13, 40, 5, 8, 24},
};

/* Partial LSEs in [-3, 3), and rows made on purpose: row 0 all -inf (no key: O = 0,
 * LSE = -inf), row 1 one partial -inf, row 2 a NaN partial (a NaN row), row 3 partials 160
 * apart (one weighs all), row 4 a NaN partial and the others -inf (still a NaN row). */
static void merge_lse_parts(const merge_case *c, float *lse, int64_t rows, harness_rng *rng)
{
    for (int64_t i = 0; i < c->parts * rows; i++)
        lse[i] = (float)harness_rng_uniform(rng, -3.0, 3.0);
    for (int32_t s = 0; s < c->parts; s++) {
        lse[s * rows + 0] = -INFINITY;
        lse[s * rows + 3] = s == 1 ? 80.0f : -80.0f;
        lse[s * rows + 4] = s == 0 ? NAN : -INFINITY;
    }
    lse[1 * rows + 1] = -INFINITY;
    lse[(c->parts - 1) * rows + 2] = NAN;
}

static int run_merge_case(const merge_case *c)
{
    /* seqlen_k 64: the tile overrides stay as they are (the planner clamps to the lengths) */
    sq_case sc = {c->name, SQ_DENSE, c->dtype, FA_MASK_NONE, c->batch, c->hq, c->hq, c->d,
                  {0}, {0}, 64, 0, 1, 1, c->block_r, c->block_c, MODS_NONE, 0, false};
    for (int64_t b = 0; b < c->batch; b++)
        sc.lq[b] = sc.lk[b] = (int32_t)c->sq;
    sq_images im;
    images_build(&sc, &im);
    fa_problem *p = &im.p;
    /* O padded: rows d + 3 apart, offset 2. */
    p->o.offset = 2;
    p->o.stride_seq = c->d + 3;
    p->o.stride_head = c->sq * p->o.stride_seq;
    p->o.stride_batch = c->hq * p->o.stride_head;
    int64_t extent = 2 + c->batch * p->o.stride_batch, rows = c->batch * c->hq * c->sq;
    free(im.t[FA__TENSOR_O]);
    nan_tensor(&im, FA__TENSOR_O, extent);
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    void *parts = nan_tensor(&im, FA__TENSOR_O_PARTS, c->parts * extent);
    fill_row(&im, parts, 0, c->parts * extent, &rng);
    merge_lse_parts(c, alloc_bytes(&im, FA__TENSOR_LSE_PARTS, (size_t)(c->parts * rows) * 4, 0),
                    rows, &rng);
    ref_like(&im, FA__TENSOR_O);
    ref_like(&im, FA__TENSOR_LSE);

    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_buffer *b[FA__TENSOR_COUNT];
    wrap_all(ctx, &im, b);
    fa_problem golden = *p;
    golden.block_r = golden.block_c = 0;
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create_merge(ctx, &golden, c->parts, &plan), OK);
    assert_int_equal(fa_merge(ctx, plan, b[FA__TENSOR_O_PARTS], b[FA__TENSOR_LSE_PARTS],
                              b[FA__TENSOR_O], b[FA__TENSOR_LSE]),
                     OK);
    fa_plan_destroy(plan);
    for (int i = 0; i < FA__TENSOR_COUNT; i++)
        fa_buffer_destroy(b[i]);
    fa_context_destroy(ctx);

    plan = cuda_plan(c->name, p, FA__OP_MERGE, c->parts);
    assert_int_equal(plan->n_launches, 1);
    const fa__tensor outs[] = {FA__TENSOR_O, FA__TENSOR_LSE};
    run_twice(&im, plan, outs, 2);
    /* f32 weights and sums against the golden's f64, then one rounding to the dtype */
    double u = unit_roundoff(c->dtype);
    int bad = compare_tensor(&im, FA__TENSOR_O, "O", &p->o, false,
                             c->dtype == FA_DTYPE_F32 ? 1e-5 : 2.02 * u, 1e-6, false, true) +
              compare_f32(c->name, "LSE row", im.t[FA__TENSOR_LSE], im.ref[FA__TENSOR_LSE], rows,
                          1e-5);
    const float *lse = im.t[FA__TENSOR_LSE];
    if (!(isinf(lse[0]) && lse[0] < 0) || !isnan(lse[2]) || !isnan(lse[4]))
        fail_msg("%s: the row without keys or a NaN row came out wrong", c->name);
    /* Without LSE asked for, LSE is never written. */
    memset(im.t[FA__TENSOR_LSE], 0xFF, im.bytes[FA__TENSOR_LSE]);
    emu_run_plan(c->name, plan, im.t, false, 0, false);
    for (size_t i = 0; i < im.bytes[FA__TENSOR_LSE]; i++)
        if (((unsigned char *)im.t[FA__TENSOR_LSE])[i] != 0xFF)
            fail_msg("%s: LSE written although not asked for", c->name);
    print_message("  %-46s %d parts: %s\n", c->name, (int)c->parts,
                  bad ? "MISMATCH" : "matches the golden");
    fa_plan_destroy(plan);
    images_free(&im);
    return bad;
}

static void test_merge_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof merge_cases / sizeof merge_cases[0]; i++)
        if (run_merge_case(&merge_cases[i]))
            fail_msg("%s: the emulated merge differs from the golden", merge_cases[i].name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_catches_errors),
        cmocka_unit_test(test_forward_cases),
        cmocka_unit_test(test_merge_cases),
        cmocka_unit_test(test_backward_cases),
    };
    return cmocka_run_group_tests_name("cuda kernels' sequences and decoding, emulated", tests,
                                       arch_open, arch_close);
}
