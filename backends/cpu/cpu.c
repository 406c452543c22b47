/*
 * cpu.c - the scalar golden reference backend. It runs the same tile loop as the OpenCL and
 * CUDA kernels (Q tiles of Br rows, K/V tiles of Bc keys, the online m/l update, rescale,
 * accumulate P V, final 1/l) but accumulates in fp64, so its only error is the final rounding
 * of O to the storage type. Every other backend is checked against it.
 *
 * No SIMD, no threads: the point is to be obviously right. Its device and memory (host memory,
 * a CPU cache as the on-chip memory) are cpu_device.c's.
 */
#include "internal.h"
#include "cpu_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The golden's host scratch after the op's (the core allocates it for each run and counts it):
 * the forward's per-tile state, O(Br*d + Bc) doubles; the backward's f64 dK and dV accumulators
 * of one K/V head and one dQ row, (2 Sk + 1) d doubles; the merge's split weights. Nothing grows
 * with Sq * Sk.
 */
static uint64_t cpu_launch_scratch(fa__op op, const fa__launch *launch)
{
    const uint64_t d = (uint64_t)launch->params.head_dim;
    const uint64_t br = (uint64_t)launch->variant.block_r, bc = (uint64_t)launch->variant.block_c;
    if (op == FA__OP_BACKWARD)
        return (2 * (uint64_t)launch->params.seqlen_k + 1) * d * 8;
    if (launch->variant.kernel == FA__KERNEL_MERGE)
        return (uint64_t)launch->params.splits * 8;
    return (br * d + 2 * br + bc) * 8;
}

/* One "work-item" runs a whole tile: no work-group limit, no multiple to round to; the op's
 * on-chip formula sizes the tiles for the cache as it stands. */
static void cpu_plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                           fa__plan_rules *rules)
{
    (void)dev;
    (void)p;
    (void)op;
    rules->shape.tile_multiple = 1;
    rules->paths.backward_launches = 1; /* the golden's one f64 loop, not the kernels' three */
    rules->paths.launch_scratch = cpu_launch_scratch;
}


/* ---- the tile loop ------------------------------------------------------------------------ */

static double load(fa_dtype dt, const void *base, int64_t idx)
{
    switch (dt) {
    case FA_DTYPE_F16:
        return fa_f16_to_f32(((const uint16_t *)base)[idx]);
    case FA_DTYPE_BF16:
        return fa_bf16_to_f32(((const uint16_t *)base)[idx]);
    default:
        return ((const float *)base)[idx];
    }
}

/* Rounds through f32, as every backend does: f64 -> f32 -> storage type. */
static void store(fa_dtype dt, void *base, int64_t idx, double x)
{
    float f = (float)x;
    switch (dt) {
    case FA_DTYPE_F16:
        ((uint16_t *)base)[idx] = fa_f32_to_f16(f);
        break;
    case FA_DTYPE_BF16:
        ((uint16_t *)base)[idx] = fa_f32_to_bf16(f);
        break;
    default:
        ((float *)base)[idx] = f;
        break;
    }
}

/* Per-row running state of one Q tile, and its scratch S row; sized Br x d and Bc. */
typedef struct tile_state {
    double *acc; /* O accumulator, Br x d */
    double *m;   /* running max per row (-inf: no key seen yet) */
    double *l;   /* running sum of exp(s - m) per row */
    double *s;   /* one S row, Bc */
} tile_state;

/* Keys of row i that the mask and the window allow: [begin, end) (the rules in
 * kernel_params.h). */
static int64_t keys_begin(const fa_kernel_params *kp, int64_t i)
{
    return fa_keys_begin(kp, kp->features, i);
}

static int64_t keys_end(const fa_kernel_params *kp, int64_t i)
{
    return fa_keys_end(kp, kp->mask, kp->features, i);
}

/*
 * The GPU kernels form q.k in f32 and scale it by scale * log2(e) in f32: a score whose dot or
 * scaled value passes FLT_MAX is +-inf there. The golden keeps its fp64 value inside that
 * range and saturates outside it the same way, so every backend answers the same (a +inf score
 * gives a NaN row, a -inf one weighs nothing); see "Non-finite values" in flashattn.h.
 */
static double f32_range(double dot, double score)
{
    if (fabs(dot) > FLT_MAX || fabs(score * 1.4426950408889634) > FLT_MAX)
        return copysign(INFINITY, score);
    return score;
}

/* What the score modifiers and dropout read for one (batch, query head). */
typedef struct head_mods {
    const fa_kernel_params *kp;
    int64_t b, h;
    double slope;       /* ALiBi slope of (b, h) */
    double sink;        /* the sink logit of head h; -inf: none */
    const void *bias;   /* the bias buffer, NULL without */
    int64_t bias0;      /* element offset of bias[b][h][0][0] */
    const int32_t *lists[4]; /* block-sparse: kv_num_blocks, kv_indices and the full pair */
} head_mods;

static head_mods head_mods_of(const fa_kernel_params *kp, void *const mem[FA__TENSOR_COUNT],
                              int64_t b, int64_t h)
{
    const unsigned f = (unsigned)kp->features;
    head_mods hm = {kp, b, h, 0.0, -INFINITY, NULL, 0, {NULL, NULL, NULL, NULL}};
    if (f & FA_FEATURE_ALIBI)
        hm.slope = ((const float *)mem[FA__TENSOR_ALIBI])[b * kp->alibi_stride_b + h];
    if (f & FA_FEATURE_SINKS)
        hm.sink = ((const float *)mem[FA__TENSOR_SINKS])[h];
    if (f & FA_FEATURE_BIAS) {
        hm.bias = mem[FA__TENSOR_BIAS];
        hm.bias0 = kp->bias_offset + b * kp->bias_stride_b + h * kp->bias_stride_h;
    }
    for (int i = 0; (f & FA_FEATURE_BLOCK_SPARSE) && i < 4; i++)
        hm.lists[i] = mem[FA__TENSOR_KV_NUM_BLOCKS + i];
    return hm;
}

/* Block-sparse: whether key j's block is in the lists of row i's block (either list; a full
 * block's elements are all inside the mask, as the run checked). */
static bool key_listed(const head_mods *hm, int64_t i, int64_t j)
{
    const fa_kernel_params *kp = hm->kp;
    if (!(kp->features & FA_FEATURE_BLOCK_SPARSE))
        return true;
    int64_t row = fa_block_list_row(kp, hm->b, hm->h, i / kp->sparse_block_q, kp->sparse_q_blocks);
    fa_kp_i32 kb = (fa_kp_i32)(j / kp->sparse_block_k);
    return fa_block_listed(hm->lists[0], hm->lists[1], row, kp->sparse_k_blocks, kb) ||
           (hm->lists[2] && fa_block_listed(hm->lists[2], hm->lists[3], row, kp->sparse_k_blocks,
                                            kb));
}

/* A value the kernels hold in log2 units in f32: +-inf past FLT_MAX there (a huge ALiBi slope's
 * term, a modified score), as f32_range does for the plain score. */
static double log2_range(double x)
{
    return fabs(x * 1.4426950408889634) > FLT_MAX ? copysign(INFINITY, x) : x;
}

/*
 * The score of (i, j) after the modifiers, in the header's order: s = scale * q.k (already in
 * the f32 range) -> softcap -> + ALiBi + bias. *dcap receives d(softcap(s))/ds (1 without it),
 * for the backward.
 */
static double modified_score(const head_mods *hm, double s, int64_t i, int64_t j, double *dcap)
{
    const fa_kernel_params *kp = hm->kp;
    const unsigned f = (unsigned)kp->features;
    *dcap = 1.0;
    if (f & FA_FEATURE_SOFTCAP) {
        double cap = (double)kp->softcap, t = tanh(s / cap);
        s = cap * t;
        *dcap = 1.0 - t * t;
    }
    if (f & FA_FEATURE_ALIBI)
        s -= log2_range(hm->slope * fabs((double)(i + fa_diagonal(kp, 1) - j)));
    if (f & FA_FEATURE_BIAS)
        s += load((fa_dtype)kp->bias_dtype, hm->bias, hm->bias0 + i * kp->bias_stride_s + j);
    return f & (FA_FEATURE_ALIBI | FA_FEATURE_BIAS) ? log2_range(s) : s;
}

/* Dropout's factor for P[i][j]: dropout_scale when kept, 0 when dropped, 1 without dropout. */
static double dropout_factor(const head_mods *hm, int64_t i, int64_t j)
{
    const fa_kernel_params *kp = hm->kp;
    if (!(kp->features & FA_FEATURE_DROPOUT))
        return 1.0;
    fa_kp_u32 w[4]; /* one Philox call per key: the golden favours plain over fast */
    fa_dropout_words(kp, hm->b, hm->h, i, j, w);
    return w[j & 3] >= kp->dropout_threshold ? (double)kp->dropout_scale : 0.0;
}

/* Where one sequence's keys are: K/V head h_kv of sequence b starting at key k_start, or
 * through the block table (kernel_params.h, fa_key_row). */
typedef struct key_view {
    const fa_kernel_params *kp;
    const int32_t *table; /* the block table, NULL unless paged */
    int64_t b, h_kv, k_start;
} key_view;

static int64_t k_row(const key_view *kv, int64_t j)
{
    const fa_kernel_params *kp = kv->kp;
    return kp->k_offset + kv->h_kv * kp->k_stride_h +
           fa_key_row(kp, kp->seq, kv->table, kv->b, kv->k_start, j, kp->k_stride_b,
                      kp->k_stride_s);
}

static int64_t v_row(const key_view *kv, int64_t j)
{
    const fa_kernel_params *kp = kv->kp;
    return kp->v_offset + kv->h_kv * kp->v_stride_h +
           fa_key_row(kp, kp->seq, kv->table, kv->b, kv->k_start, j, kp->v_stride_b,
                      kp->v_stride_s);
}

/* Sequence b of a launch's problem, and params whose seqlen_q / seqlen_k are its own. */
static fa_seq seq_of(const fa_kernel_params *kp, void *const mem[FA__TENSOR_COUNT], int64_t b,
                     fa_kernel_params *own)
{
    fa_seq s = fa_seq_of(kp, kp->seq, mem[FA__TENSOR_CU_SEQLENS_Q], mem[FA__TENSOR_CU_SEQLENS_K],
                         mem[FA__TENSOR_SEQLENS_K], b);
    *own = *kp;
    own->seqlen_q = s.seqlen_q;
    own->seqlen_k = s.seqlen_k;
    return s;
}

typedef struct head_view {
    fa_dtype dt;
    int64_t d;
    const void *q, *k, *v; /* buffers */
    int64_t q0;            /* element offset of this (batch, head)'s row 0 */
    int64_t qs;            /* Q's seq stride */
    key_view keys;
    head_mods mods;
} head_view;

/* One row of one K/V tile: S = q k^T * scale, m/l update, rescale O, accumulate P V. */
static void row_step(const head_view *hv, const fa_kernel_params *kp, tile_state *t, int r,
                     int64_t row, int64_t c0, int64_t c1)
{
    const int64_t d = hv->d;
    int64_t lim = keys_end(kp, row), first = keys_begin(kp, row);
    if (c1 > lim)
        c1 = lim;
    if (c0 < first)
        c0 = first;
    if (c1 <= c0)
        return; /* mask: nothing of this tile is allowed for this row */
    double m_new = t->m[r];
    for (int64_t j = c0; j < c1; j++) { /* S = Q K^T * scale, then the score modifiers */
        double dot = 0.0, dcap;
        if (!key_listed(&hv->mods, row, j)) {
            t->s[j - c0] = -INFINITY; /* a block the lists leave out: never read */
            continue;
        }
        int64_t kr = k_row(&hv->keys, j);
        for (int64_t x = 0; x < d; x++)
            dot += load(hv->dt, hv->q, hv->q0 + row * hv->qs + x) * load(hv->dt, hv->k, kr + x);
        t->s[j - c0] = modified_score(&hv->mods, f32_range(dot, dot * (double)kp->scale), row, j,
                                      &dcap);
        if (t->s[j - c0] > m_new)
            m_new = t->s[j - c0];
    }
    /* m/l update; alpha rescales what was accumulated under the old max. While every score
     * so far is -inf the exponents use 0 instead of the max, so P = 0 and alpha = 0: a -inf
     * score weighs nothing, as a masked key. A NaN or +inf score makes l NaN. */
    double m_use = m_new == -INFINITY ? 0.0 : m_new;
    double alpha = exp(t->m[r] - m_use);
    double *acc = t->acc + (int64_t)r * d;
    t->l[r] *= alpha;
    for (int64_t x = 0; x < d; x++)
        acc[x] *= alpha;
    for (int64_t j = c0; j < c1; j++) { /* accumulate P V; l counts P before dropout */
        if (!key_listed(&hv->mods, row, j))
            continue;
        double pj = exp(t->s[j - c0] - m_use);
        t->l[r] += pj;
        pj *= dropout_factor(&hv->mods, row, j);
        int64_t vr = v_row(&hv->keys, j);
        for (int64_t x = 0; x < d; x++)
            acc[x] += pj * load(hv->dt, hv->v, vr + x);
    }
    t->m[r] = m_new;
}

/* Rows [r0, r0 + rows) of one (batch, head) over the keys [lo, hi) (a split-KV chunk, or all
 * of them): the K/V tile loop, leaving acc, m and l in t. `sink`: whether the rows start with
 * the head's sink (a split forward gives it to its first chunk only). */
static void q_tile(const head_view *hv, const fa_kernel_params *kp, int32_t block_c,
                   tile_state *t, int64_t r0, int rows, int64_t lo, int64_t hi, bool sink)
{
    const int64_t d = hv->d;
    /* A sink starts each row as a key of score `sink` with V = 0: m = sink, l = exp(0) = 1. */
    const double m0 = sink ? hv->mods.sink : -INFINITY;
    for (int r = 0; r < rows; r++) {
        t->m[r] = m0;
        t->l[r] = m0 == -INFINITY ? 0.0 : 1.0;
        memset(t->acc + (int64_t)r * d, 0, (size_t)d * sizeof(double));
    }
    /* Causal and window: key tiles before the first row's window or past the last row's
     * diagonal are never visited. */
    int64_t kv_end = keys_end(kp, r0 + rows - 1);
    int64_t kv_begin = keys_begin(kp, r0) / block_c * block_c;
    kv_begin = kv_begin > lo ? kv_begin : lo;
    kv_end = kv_end < hi ? kv_end : hi;
    for (int64_t c0 = kv_begin; c0 < kv_end; c0 += block_c) {
        int64_t c1 = c0 + block_c < kp->seqlen_k ? c0 + block_c : kp->seqlen_k;
        for (int r = 0; r < rows; r++)
            row_step(hv, kp, t, r, r0 + r, c0, c1);
    }
}

/* Row r's O = acc / l and LSE (natural log): a row with no allowed key (l == 0) gives O = 0 and
 * LSE = -inf; a NaN l (a NaN or +inf score) gives NaN in both. */
static double row_inv_l(const tile_state *t, int r)
{
    return t->l[r] == 0.0 ? 0.0 : 1.0 / t->l[r];
}

static float row_lse(const tile_state *t, int r)
{
    return t->l[r] == 0.0 ? -INFINITY : (float)(t->m[r] + log(t->l[r]));
}

/* ---- backward ------------------------------------------------------------------------------ */

/* One (batch, query head)'s rows of Q, O, dO, dQ and its K/V head's K and V. */
typedef struct bwd_head {
    fa_dtype dt;
    int64_t d;
    const void *q, *k, *v, *o, *d_o;
    void *dq;
    int64_t q0, k0, v0, o0, do0, dq0; /* element offset of row 0 */
    int64_t qs, ks, vs, os, dos, dqs; /* seq strides */
    head_mods mods;
} bwd_head;

/* dot(A[a0 + 0..d), B[b0 + 0..d)) in f64 over two stored rows. */
static double dot_rows(fa_dtype dt, const void *a, int64_t a0, const void *b, int64_t b0,
                       int64_t d)
{
    double sum = 0.0;
    for (int64_t x = 0; x < d; x++)
        sum += load(dt, a, a0 + x) * load(dt, b, b0 + x);
    return sum;
}

/*
 * One query row: P recomputed from LSE over the row's keys in key order, dQ written, and its
 * terms added to the f64 dK and dV accumulators (Sk x d). A row with no key (LSE = -inf) gets
 * dQ = 0 and adds nothing. With dropout, Z = dropout_factor: dV += P Z dO, dP = Z (dO . V);
 * softcap's derivative joins dS.
 */
static void bwd_row(const bwd_head *bh, const fa_kernel_params *kp, int64_t row, float lse,
                    double *dq_row, double *acc_k, double *acc_v)
{
    const int64_t d = bh->d, qr = bh->q0 + row * bh->qs, dor = bh->do0 + row * bh->dos;
    const double scale = (double)kp->scale;
    int64_t first = keys_begin(kp, row), end = lse == -INFINITY ? first : keys_end(kp, row);
    memset(dq_row, 0, (size_t)d * sizeof(double));
    /* D = rowsum(dO * O): the softmax's own term of dP, from the stored O. */
    double dsum = end > first ? dot_rows(bh->dt, bh->d_o, dor, bh->o, bh->o0 + row * bh->os, d)
                              : 0.0;
    /* Loop over the row's keys [first, end) (the mask and the window), in order. */
    for (int64_t j = first; j < end; j++) {
        if (!key_listed(&bh->mods, row, j))
            continue; /* a block the lists leave out */
        /* S = Q K^T * scale and dP = dO V^T (with dropout, Z dP); the modifiers, P = exp(S -
         * LSE) and dS = P (Z dP - D) dcap, with respect to q.k: softcap's derivative and the
         * scale of S = scale * Q K^T. */
        double dot = dot_rows(bh->dt, bh->q, qr, bh->k, bh->k0 + j * bh->ks, d), dcap;
        double s = modified_score(&bh->mods, f32_range(dot, dot * scale), row, j, &dcap);
        double p = exp(s - (double)lse), z = dropout_factor(&bh->mods, row, j);
        double dp = z * dot_rows(bh->dt, bh->d_o, dor, bh->v, bh->v0 + j * bh->vs, d);
        double ds = p * (dp - dsum) * dcap * scale;
        /* dQ += dS K; dK += dS^T Q and dV += P^T Z dO, in f64 accumulators. */
        for (int64_t x = 0; x < d; x++) {
            acc_v[j * d + x] += p * z * load(bh->dt, bh->d_o, dor + x);
            acc_k[j * d + x] += ds * load(bh->dt, bh->q, qr + x);
            dq_row[x] += ds * load(bh->dt, bh->k, bh->k0 + j * bh->ks + x);
        }
    }
    /* dQ in the storage type (dK and dV once the K/V head is done: bwd_store_kv). */
    for (int64_t x = 0; x < d; x++)
        store(bh->dt, bh->dq, bh->dq0 + row * bh->dqs + x, dq_row[x]);
}

/* The view of (b, h) of sequence sq whose K/V head is h_kv (varlen: rows from its starts). */
static bwd_head bwd_head_of(const fa__launch *launch, const fa_kernel_params *kp,
                            void *const mem[FA__TENSOR_COUNT], const fa_seq *sq, int64_t b,
                            int64_t h, int64_t h_kv)
{
    const int64_t qt = sq->q_start, kt = sq->k_start;
    bwd_head bh = {(fa_dtype)launch->variant.dtype, kp->head_dim, mem[FA__TENSOR_Q],
                   mem[FA__TENSOR_K], mem[FA__TENSOR_V], mem[FA__TENSOR_O], mem[FA__TENSOR_DO],
                   mem[FA__TENSOR_DQ],
                   kp->q_offset + b * kp->q_stride_b + h * kp->q_stride_h + qt * kp->q_stride_s,
                   kp->k_offset + b * kp->k_stride_b + h_kv * kp->k_stride_h + kt * kp->k_stride_s,
                   kp->v_offset + b * kp->v_stride_b + h_kv * kp->v_stride_h + kt * kp->v_stride_s,
                   kp->o_offset + b * kp->o_stride_b + h * kp->o_stride_h + qt * kp->o_stride_s,
                   kp->do_offset + b * kp->do_stride_b + h * kp->do_stride_h +
                       qt * kp->do_stride_s,
                   kp->dq_offset + b * kp->dq_stride_b + h * kp->dq_stride_h +
                       qt * kp->dq_stride_s,
                   kp->q_stride_s, kp->k_stride_s, kp->v_stride_s, kp->o_stride_s,
                   kp->do_stride_s, kp->dq_stride_s, head_mods_of(kp, mem, b, h)};
    return bh;
}

/* Writes one K/V head's accumulated dK and dV (Sk x d f64) of sequence sq in the storage type;
 * kp's seqlen_k is the sequence's. */
static void bwd_store_kv(const fa__launch *launch, const fa_kernel_params *kp,
                         void *const mem[FA__TENSOR_COUNT], const fa_seq *sq, int64_t b,
                         int64_t h_kv, const double *acc_k, const double *acc_v)
{
    const fa_dtype dt = (fa_dtype)launch->variant.dtype;
    const int64_t d = kp->head_dim;
    int64_t k0 = kp->dk_offset + b * kp->dk_stride_b + h_kv * kp->dk_stride_h +
                 sq->k_start * kp->dk_stride_s;
    int64_t v0 = kp->dv_offset + b * kp->dv_stride_b + h_kv * kp->dv_stride_h +
                 sq->k_start * kp->dv_stride_s;
    for (int64_t j = 0; j < kp->seqlen_k; j++) {
        for (int64_t x = 0; x < d; x++) {
            store(dt, mem[FA__TENSOR_DK], k0 + j * kp->dk_stride_s + x, acc_k[j * d + x]);
            store(dt, mem[FA__TENSOR_DV], v0 + j * kp->dv_stride_s + x, acc_v[j * d + x]);
        }
    }
}

/*
 * The backward's launch: per (batch, K/V head), the query heads of its group in order, their rows
 * in order, each over the planned key tiles; dK and dV accumulate in f64 in that fixed order
 * (deterministic, and GQA's sum over a group's heads is part of it). The plan's scratch holds
 * 2 Sk x d + d doubles, linear in the sequence.
 */
static fa_status cpu_backward(const fa__launch *launch, const fa_kernel_params *kp,
                              void *const mem[FA__TENSOR_COUNT])
{
    const int64_t d = kp->head_dim, group = kp->heads_q / kp->heads_kv;
    size_t kv = (size_t)kp->seqlen_k * (size_t)d;
    double *scratch = mem[FA__TENSOR_SCRATCH];
    double *acc_k = scratch, *acc_v = scratch + kv, *dq_row = scratch + 2 * kv;
    const float *lse = mem[FA__TENSOR_LSE];
    for (int64_t b = 0; b < kp->batch; b++) {
        fa_kernel_params own; /* the sequence's lengths */
        fa_seq sq = seq_of(kp, mem, b, &own);
        for (int64_t h_kv = 0; h_kv < kp->heads_kv; h_kv++) {
            memset(scratch, 0, 2 * kv * sizeof(double));
            for (int64_t h = h_kv * group; h < (h_kv + 1) * group; h++) {
                bwd_head bh = bwd_head_of(launch, &own, mem, &sq, b, h, h_kv);
                const float *lse_row = lse + fa_lse_index(kp, b, h, sq.q_start, 0);
                for (int64_t row = 0; row < own.seqlen_q; row++)
                    bwd_row(&bh, &own, row, lse_row[row], dq_row, acc_k, acc_v);
            }
            bwd_store_kv(launch, &own, mem, &sq, b, h_kv, acc_k, acc_v);
        }
    }
    return FA_STATUS_OK;
}

/*
 * The sinks' gradient (flash_bwd_dsinks): per query head h, dsink[h] = -sum over the batch and
 * the rows, in that order, of exp(sink[h] - LSE) * D with D = rowsum(dO * O) in f64. Rows with
 * no key and no sink (LSE = -inf) add nothing.
 */
static fa_status cpu_backward_dsinks(const fa__launch *launch, const fa_kernel_params *kp,
                                     void *const mem[FA__TENSOR_COUNT])
{
    const fa_dtype dt = (fa_dtype)launch->variant.dtype;
    const float *lse = mem[FA__TENSOR_LSE], *sinks = mem[FA__TENSOR_SINKS];
    for (int64_t h = 0; h < kp->heads_q; h++) {
        double sum = 0.0;
        for (int64_t b = 0; b < kp->batch; b++) {
            fa_kernel_params own;
            fa_seq sq = seq_of(kp, mem, b, &own);
            int64_t o0 = kp->o_offset + b * kp->o_stride_b + h * kp->o_stride_h +
                         sq.q_start * kp->o_stride_s;
            int64_t do0 = kp->do_offset + b * kp->do_stride_b + h * kp->do_stride_h +
                          sq.q_start * kp->do_stride_s;
            for (int64_t i = 0; i < sq.seqlen_q; i++) {
                double l = lse[fa_lse_index(kp, b, h, sq.q_start, i)];
                if (l == -INFINITY)
                    continue;
                double dsum = dot_rows(dt, mem[FA__TENSOR_DO], do0 + i * kp->do_stride_s,
                                       mem[FA__TENSOR_O], o0 + i * kp->o_stride_s, kp->head_dim);
                sum -= exp((double)sinks[h] - l) * dsum;
            }
        }
        ((float *)mem[FA__TENSOR_DSINKS])[h] = (float)sum;
    }
    return FA_STATUS_OK;
}

/* ---- launches ----------------------------------------------------------------------------- */

/* The forward's outputs for one (batch, head): final O and LSE, or a split's f32 partials. */
typedef struct fwd_out {
    void *o;           /* O, or the f32 partials (split) */
    int64_t o0;        /* element offset of row 0 (of split 0's partial) */
    int64_t os;        /* seq stride */
    float *lse;        /* LSE (or the partial LSEs) at index lse0 + row; NULL: not asked */
    int64_t lse0;
} fwd_out;

/* Stores rows [r0, r0 + rows) of t: in the storage type to O, or as f32 partials (split). */
static void store_rows(const head_view *hv, const tile_state *t, const fwd_out *out,
                       fa_dtype dt, int64_t r0, int rows)
{
    for (int r = 0; r < rows; r++) {
        double inv = row_inv_l(t, r);
        for (int64_t x = 0; x < hv->d; x++)
            store(dt, out->o, out->o0 + (r0 + r) * out->os + x, t->acc[(int64_t)r * hv->d + x] * inv);
        if (out->lse)
            out->lse[out->lse0 + r0 + r] = row_lse(t, r);
    }
}

/* One (batch, head) of a forward: every query tile over every chunk of keys (one chunk unless
 * split), in order. */
static void forward_head(const fa__launch *launch, const fa_kernel_params *kp, tile_state *t,
                         const head_view *hv, fwd_out out)
{
    const int32_t br = launch->variant.block_r, bc = launch->variant.block_c;
    const bool split = launch->variant.split != 0;
    const int64_t chunk = split ? kp->split_keys : kp->seqlen_k;
    const int64_t splits = split ? kp->splits : 1;
    for (int64_t r0 = 0; r0 < kp->seqlen_q; r0 += br) {
        int rows = (int)(kp->seqlen_q - r0 < br ? kp->seqlen_q - r0 : br);
        fwd_out part = out;
        for (int64_t sp = 0; sp < splits; sp++) {
            q_tile(hv, kp, bc, t, r0, rows, sp * chunk, (sp + 1) * chunk, sp == 0);
            store_rows(hv, t, &part, split ? FA_DTYPE_F32 : hv->dt, r0, rows);
            part.o0 += kp->parts_stride;
            part.lse0 += kp->part_rows;
        }
    }
}

/* The outputs of (b, h) of sequence s: O and LSE, or a split's partials in scratch. */
static fwd_out fwd_out_of(const fa__launch *launch, const fa_kernel_params *kp,
                          void *const mem[FA__TENSOR_COUNT], const fa_seq *s, int64_t b,
                          int64_t h)
{
    int64_t li = fa_lse_index(kp, b, h, s->q_start, 0);
    if (launch->variant.split) {
        float *parts = mem[FA__TENSOR_SCRATCH];
        fwd_out out = {parts,
                       kp->parts_offset + b * kp->parts_stride_b + h * kp->parts_stride_h +
                           s->q_start * kp->parts_stride_s,
                       kp->parts_stride_s, parts + kp->lse_parts_offset, li};
        return out;
    }
    fwd_out out = {mem[FA__TENSOR_O],
                   kp->o_offset + b * kp->o_stride_b + h * kp->o_stride_h +
                       s->q_start * kp->o_stride_s,
                   kp->o_stride_s, kp->has_lse ? (float *)mem[FA__TENSOR_LSE] : NULL, li};
    return out;
}

/* The forward's launch: every (batch, head, query tile) in turn, with the launch's tiles, each
 * sequence with its own lengths. `state`: the tile state's scratch (Br * d + 2 Br + Bc f64). */
static fa_status cpu_forward(const fa__launch *launch, const fa_kernel_params *kp,
                             void *const mem[FA__TENSOR_COUNT], double *state)
{
    const int32_t br = launch->variant.block_r;
    const int64_t d = kp->head_dim, group = kp->heads_q / kp->heads_kv;
    tile_state t = {state, state + (size_t)br * (size_t)d,
                    state + (size_t)br * (size_t)d + (size_t)br,
                    state + (size_t)br * (size_t)d + 2 * (size_t)br};
    for (int64_t b = 0; b < kp->batch; b++) {
        fa_kernel_params own;
        fa_seq sq = seq_of(kp, mem, b, &own);
        for (int64_t h = 0; h < kp->heads_q; h++) {
            head_view hv = {(fa_dtype)launch->variant.dtype, d, mem[FA__TENSOR_Q],
                            mem[FA__TENSOR_K], mem[FA__TENSOR_V],
                            kp->q_offset + b * kp->q_stride_b + h * kp->q_stride_h +
                                sq.q_start * kp->q_stride_s,
                            kp->q_stride_s,
                            {kp, mem[FA__TENSOR_BLOCK_TABLE], b, h / group, sq.k_start},
                            head_mods_of(&own, mem, b, h)};
            forward_head(launch, &own, &t, &hv, fwd_out_of(launch, kp, mem, &sq, b, h));
        }
    }
    return FA_STATUS_OK;
}

/* A partial O element (the merge's PARTS_DTYPE). */
static double load_part(const fa__launch *launch, const void *parts, int64_t idx)
{
    return load((fa_dtype)launch->variant.parts_dtype, parts, idx);
}

/*
 * flash_merge: per row, the partials' LSEs give weights exp(LSE_s - max) in f64, summed in s
 * order (kernel_params.h, the merge rule); a row whose partials all have LSE = -inf gives O = 0,
 * LSE = -inf.
 */
static void merge_row(const fa__launch *launch, const fa_kernel_params *kp,
                      void *const mem[FA__TENSOR_COUNT], int64_t o_part, int64_t lse_part,
                      int64_t o_row, int64_t li, double *w)
{
    const void *parts = mem[launch->args[0]];
    const float *lse_parts = (const float *)mem[launch->args[1]] + kp->lse_parts_offset;
    double m = -INFINITY, sum = 0.0;
    for (int64_t s = 0; s < kp->splits; s++) {
        double l = lse_parts[s * kp->part_rows + lse_part];
        m = l > m || isnan(l) ? l : m;
    }
    for (int64_t s = 0; s < kp->splits; s++) {
        w[s] = m == -INFINITY ? 0.0 : exp(lse_parts[s * kp->part_rows + lse_part] - m);
        sum += w[s];
    }
    for (int64_t x = 0; x < kp->head_dim; x++) {
        double acc = 0.0;
        for (int64_t s = 0; s < kp->splits && m != -INFINITY; s++)
            acc += w[s] * load_part(launch, parts, o_part + s * kp->parts_stride + x);
        store((fa_dtype)launch->variant.dtype, mem[FA__TENSOR_O], o_row + x,
              m == -INFINITY ? 0.0 : acc / sum);
    }
    if (kp->has_lse)
        ((float *)mem[FA__TENSOR_LSE])[li] = m == -INFINITY ? -INFINITY : (float)(m + log(sum));
}

/* The merge's launch: every row of every (batch, head) of every sequence; `w`: splits f64. */
static fa_status cpu_merge(const fa__launch *launch, const fa_kernel_params *kp,
                           void *const mem[FA__TENSOR_COUNT], double *w)
{
    for (int64_t b = 0; b < kp->batch; b++) {
        fa_kernel_params own;
        fa_seq sq = seq_of(kp, mem, b, &own);
        for (int64_t h = 0; h < kp->heads_q; h++) {
            for (int64_t i = 0; i < sq.seqlen_q; i++) {
                int64_t t = sq.q_start + i, li = fa_lse_index(kp, b, h, sq.q_start, i);
                merge_row(launch, kp, mem,
                          kp->parts_offset + b * kp->parts_stride_b + h * kp->parts_stride_h +
                              t * kp->parts_stride_s,
                          li, kp->o_offset + b * kp->o_stride_b + h * kp->o_stride_h +
                                  t * kp->o_stride_s,
                          li, w);
            }
        }
    }
    return FA_STATUS_OK;
}

/* The launches: the forward (or a split forward's chunks), the merge, the backward and the
 * sinks' gradient. The golden's own scratch starts after the op's, which a varlen run sizes by
 * its tokens (fa__run_own_scratch_offset). */
static fa_status cpu_launch(fa_context *ctx, const fa_plan *plan, const fa__launch *launch,
                            const fa_kernel_params *kp, void *const mem[FA__TENSOR_COUNT])
{
    (void)ctx;
    double *state =
        (double *)((char *)mem[FA__TENSOR_SCRATCH] + fa__run_own_scratch_offset(plan, kp));
    switch (launch->variant.kernel) {
    case FA__KERNEL_BWD_GOLDEN:
        return cpu_backward(launch, kp, mem);
    case FA__KERNEL_BWD_DSINKS:
        return cpu_backward_dsinks(launch, kp, mem);
    case FA__KERNEL_MERGE:
        return cpu_merge(launch, kp, mem, state);
    default:
        return cpu_forward(launch, kp, mem, state);
    }
}

const fa__backend_ops fa__cpu_ops = {
    .api_version = FA__BACKEND_API_VERSION,
    .backend = FA_BACKEND_CPU,
    .supported_ops = (1u << FA__OP_FORWARD) | (1u << FA__OP_BACKWARD) | (1u << FA__OP_MERGE),
    .device_count = fa__cpu_device_count,
    .device_props = fa__cpu_device_props,
    .plan_rules = cpu_plan_rules,
    .context_open = fa__cpu_context_open,
    .context_close = fa__cpu_context_close,
    .buffer_alloc = fa__cpu_buffer_alloc,
    .buffer_free = fa__cpu_buffer_free,
    .buffer_write = fa__cpu_buffer_write,
    .buffer_read = fa__cpu_buffer_read,
    .launch = cpu_launch,
    /* Block-sparse runs here first: the golden that the kernels will be checked against. */
    .supported_features = {[FA__OP_FORWARD] = FA_FEATURES_ALL | FA_FEATURE_BLOCK_SPARSE,
                           [FA__OP_BACKWARD] = FA_FEATURES_ALL | FA_FEATURE_BLOCK_SPARSE},
    .buffer_region = fa__cpu_buffer_region,
};
