/*
 * flash_modifiers.cl - the score modifiers (FEATURES): their kernel arguments, the bias loads,
 * softcap's tanh, ALiBi's term, each row's modifier inputs, and the score rows they apply to;
 * the block-sparse lists and the tiles and keys they leave out.
 */
/* ---- score modifiers and dropout (FEATURES; flashattn.h, "The modifiers, precisely") ------- */
/* Each is compiled in only under its FA_FEATURE_* bit, so a kernel without it keeps the plain
 * arithmetic exactly. Scores stay in log2 units: the natural-unit terms are scaled by log2(e). */

/* The extra kernel arguments, in the host's order (src/op_launches.c, add_modifier_args):
 * ALiBi slopes f32 [Hq], the bias, the sinks f32 [Hq] (the forward only). */
#if FEATURES & FA_FEATURE_ALIBI
#define ALIBI_ARG , __global const float *alibi_slopes
#define ALIBI_PASS , alibi_slopes
/* the slope of (batch b, query head h), p the params' pointer; 0 without ALiBi. The batch
 * stride only with slopes per sequence: its index cost AMD's backward scalar registers. */
#if FEATURES & FA_FEATURE_ALIBI_BATCH
#define ALIBI_SLOPE(p, b, h) alibi_slopes[(b) * (p)->alibi_stride_b + (h)]
#else
#define ALIBI_SLOPE(p, b, h) alibi_slopes[h]
#endif
#else
#define ALIBI_ARG
#define ALIBI_PASS
#define ALIBI_SLOPE(p, b, h) 0.0f
#endif
#if FEATURES & FA_FEATURE_BIAS
#define BIAS_ARG , __global const bias_t *bias
#define BIAS_PASS , bias
#define BIAS_PTR bias /* the bias argument; a null pointer without a bias */
#else
#define BIAS_ARG
#define BIAS_PASS
#define BIAS_PTR ((__global const bias_t *)0)
#endif
#if FEATURES & FA_FEATURE_SINKS
#define SINKS_ARG , __global const float *sinks
#define SINKS_PASS , sinks
#else
#define SINKS_ARG
#define SINKS_PASS
#endif

/* The bias's element type (f32, or f16 or bf16 bits) and its loads as f32, by the storage rows
 * of flash_storage.cl: one element, and p[0 .. KEYS_PER_VEC). */
typedef CAT(STORE_T_, BIAS_DTYPE) bias_t;
float load_bias(__global const bias_t *p)
{
    return CAT(LOAD_N_F32_IN_, BIAS_DTYPE)(__global, 1, p);
}
float_keys load_bias_keys(__global const bias_t *p)
{
    return CAT(LOAD_N_F32_IN_, BIAS_DTYPE)(__global, KEYS_PER_VEC, p);
}

/* 0, 1, 2 .. : lane e of a float_keys vector is key c + e. */
__constant float lane_index[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#define LANE_INDEX VLOAD_KEYS(lane_index)

/* tanh(s / cap) by lanes as (2^a - 1) / (2^a + 1), a = 2 s / cap in log2 units: +-1 at the
 * infinities (a is clamped to [-64, 64], where tanh is +-1 in f32 already), a NaN stays NaN.
 * 2^a is made here, not by exp2 (pocl's handles every f32 at twice the instructions): a = n + f
 * with n = rint(a) (the 1.5 * 2^23 addition rounds to an integer, whose bits hold n), 2^f - 1
 * by a degree-6 fit on [-1/2, 1/2] without its constant term (relative error 1e-7), 2^n in
 * the exponent bits. 2^a - 1 is formed as (2^f - 1) 2^n + (2^n - 1), never as 2^a minus 1, so
 * near 0, where a large cap puts s / cap, tanh keeps its relative precision and cap * tanh(s /
 * cap) keeps s (1 - 2 / (2^a + 1) cancelled there: 0.22 off at a cap of 1e7). The forward and
 * the backward use the same, so the backward recomputes the forward's S. */
float_keys softcap_tanh_keys(float_keys s, float cap)
{
    float_keys a = s * (2.0f * LOG2E / cap);
    a = select(select(a, (float_keys)64.0f, a > 64.0f), (float_keys)-64.0f, a < -64.0f);
    float_keys big = a + 12582912.0f, f = a - (big - 12582912.0f);
    float_keys p = ((1.546531857e-4f * f + 1.339528593e-3f) * f + 9.618040174e-3f) * f;
    p = (((p + 5.550340563e-2f) * f + 2.402265072e-1f) * f + 6.931471825e-1f) * f;
    float_keys two_n = AS_FLOAT_KEYS((AS_INT_KEYS(big) - 0x4B400000 + 127) << 23);
    float_keys em1 = p * two_n + (two_n - 1.0f); /* 2^a - 1 */
    return em1 / (em1 + 2.0f);
}

/* The score the plain kernel's S = Q K^T * scale is multiplied by: natural units where softcap
 * needs them (tanh of the true score), else log2 units directly. */
#define SCORE_SCALE(p) ((FEATURES & FA_FEATURE_SOFTCAP) ? (p).scale : (p).scale_log2)

/* What the score modifiers read for one query row of (batch, head): the ALiBi slope, the
 * distance i' - k0 = row + Sk - Sq - k0 to the tile's first key, and the row's bias from key k0
 * on, with bias_keys of them readable. */
typedef struct row_mods {
    float slope;
    long dist0;
    __global const bias_t *bias_row;
    int bias_keys;
} row_mods;

/* ALiBi's slope * |i' - j| in log2 units, the product formed first: a huge slope makes +-inf
 * past the f32 range and 0 at distance 0, as the golden saturates (flashattn.h, "Non-finite
 * values"), where slope * log2(e) first would make inf * 0 = NaN. */
float_keys alibi_keys(float slope, float_keys dist)
{
    return (slope * dist) * LOG2E;
}

/* S = softcap(s) + ALiBi for one float_keys vector of scores s (natural units with softcap,
 * else log2 units) of keys k0 + at + e, in log2 units. Lanes are keys, so the distance |i' - j|
 * falls by one per lane. */
float_keys modify_keys(float_keys s, const fa_kernel_params *p, const row_mods *rm, int at)
{
    if (FEATURES & FA_FEATURE_SOFTCAP)
        s = (p->softcap * LOG2E) * softcap_tanh_keys(s, p->softcap); /* cap tanh(s / cap) */
    if (FEATURES & FA_FEATURE_ALIBI)
        s -= alibi_keys(rm->slope, fabs((float_keys)(float)(rm->dist0 - at) - LANE_INDEX));
    return s;
}

/* Stores one float_keys vector of scores s (keys at .. + KEYS_PER_VEC of the lane's) to s_row,
 * through softcap and ALiBi where rm is not NULL (the forward's): applied as row_scores makes
 * the scores, not in a pass of their own over S, which cost more (history.md, ch. 20). */
void store_scores(float_keys s, __local float *s_row, int at, const fa_kernel_params *p,
                  const row_mods *rm)
{
    if ((FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)) && rm)
        s = modify_keys(s, p, rm, at);
    S_STORE_KEYS(s, s_row + at);
}

/* The modifier inputs of query row `row` of (batch b, query head h), at key 0 (row_mods_at_tile
 * moves them to a tile). */
row_mods row_mods_of(const fa_kernel_params *p ALIBI_ARG BIAS_ARG, long b, long h, long row)
{
    row_mods rm = {ALIBI_SLOPE(p, b, h), row + fa_diagonal(p, 1), 0, 0};
    if ((FEATURES & FA_FEATURE_BIAS) && row < p->seqlen_q) /* rows past Sq read nothing */
        rm.bias_row = BIAS_PTR + p->bias_offset + b * p->bias_stride_b + h * p->bias_stride_h +
                      row * p->bias_stride_s;
    return rm;
}

/* Points rm at the keys from k0 on (a lane's of a tile): valid_keys of them exist. */
void row_mods_at_tile(row_mods *rm, const row_mods *base, long k0, int valid_keys)
{
    rm->slope = base->slope;
    rm->dist0 = base->dist0 - k0;
    rm->bias_row = base->bias_row ? base->bias_row + k0 : 0;
    rm->bias_keys = base->bias_row ? valid_keys : 0;
}

/* row_scores is forced inline on GPUs only with softcap or ALiBi (INLINE_ON_GPU says why); a
 * plain one keeps clang's choice: forced, gfx90a's d 32 f16 forward grew from 109 to 144 VGPRs. */
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)
#define ROW_SCORES_INLINE INLINE_ON_GPU
#else
#define ROW_SCORES_INLINE
#endif

/* One lane's keys of an S row, in log2 units: S[r][c] = sum_x Q[r][x] * K[c][x] * scale *
 * log2(e) for Bc / TPR keys c of the tile (the whole row where TPR is 1, as in the backward),
 * x in [0, d), reading q_col = Q^T[x][r] (column r of the d x Br tile, stride Br) and k_t =
 * K^T[x][c] (d x Bc, stride Bc, from the lane's first key), writing s_row[c] through softcap
 * and ALiBi where rm is not NULL (store_scores; the backward passes NULL). Four float_keys
 * vectors (keys c = KEYS_PER_VEC * kvec ..) at a time, so each Q element loaded feeds four
 * multiply-adds. */
ROW_SCORES_INLINE void row_scores(__local float *s_row, __local const tile_t *q_col,
                                  __local const tile_t *k_t, float scale_log2,
                                  const fa_kernel_params *p, const row_mods *rm)
{
    int kvec = 0; /* the vector of keys c = KEYS_PER_VEC * kvec .. +KEYS_PER_VEC of the row */
    for (; kvec + 4 <= VECS_PER_LANE_KEYS; kvec += 4) {
        float_keys s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f; /* vectors kvec .. kvec+3 */
        __local const tile_t *k_cols = k_t + kvec * KEYS_PER_VEC; /* K^T[0][c ..] */
#pragma unroll 4
        for (int x = 0; x < HEAD_DIM; x++) {
            float qx = LOAD_ONE_F32(q_col + x * BLOCK_R);         /* Q^T[x][r] */
            __local const tile_t *k_row = k_cols + x * BLOCK_C; /* K^T[x][c ..] */
            s0 += qx * LOAD_KEYS_F32(k_row);
            s1 += qx * LOAD_KEYS_F32(k_row + KEYS_PER_VEC);
            s2 += qx * LOAD_KEYS_F32(k_row + 2 * KEYS_PER_VEC);
            s3 += qx * LOAD_KEYS_F32(k_row + 3 * KEYS_PER_VEC);
        }
        store_scores(s0 * scale_log2, s_row, kvec * KEYS_PER_VEC, p, rm);
        store_scores(s1 * scale_log2, s_row, (kvec + 1) * KEYS_PER_VEC, p, rm);
        store_scores(s2 * scale_log2, s_row, (kvec + 2) * KEYS_PER_VEC, p, rm);
        store_scores(s3 * scale_log2, s_row, (kvec + 3) * KEYS_PER_VEC, p, rm);
    }
    for (; kvec < VECS_PER_LANE_KEYS; kvec++) { /* the last 0 .. 3 vectors, one at a time */
        float_keys s0 = 0.0f;
        UNROLL_4_ON_GPU
        for (int x = 0; x < HEAD_DIM; x++) /* Q^T[x][r] * K^T[x][c ..] */
            s0 += LOAD_ONE_F32(q_col + x * BLOCK_R) *
                  LOAD_KEYS_F32(k_t + x * BLOCK_C + kvec * KEYS_PER_VEC);
        store_scores(s0 * scale_log2, s_row, kvec * KEYS_PER_VEC, p, rm);
    }
}

/* ---- block-sparse attention (FA_FEATURE_BLOCK_SPARSE; kernel_params.h, fa_block_listed) ---- */

/* The forward's lists, int32, after the sequence buffers in the host's order (op_launches.c,
 * add_block_list_args): kv_num_blocks, kv_indices, then with SPARSE_FULL the full pair. */
typedef struct block_lists {
    __global const int *num, *idx;           /* the lists of blocks to compute */
    __global const int *full_num, *full_idx; /* SPARSE_FULL: the full blocks' lists */
} block_lists;
#if (FEATURES & FA_FEATURE_BLOCK_SPARSE) && SPARSE_FULL
#define FULL_LISTS_ARG , __global const int *full_kv_num_blocks, __global const int *full_kv_indices
#define FULL_LISTS_PTRS full_kv_num_blocks, full_kv_indices
#else
#define FULL_LISTS_ARG
#define FULL_LISTS_PTRS 0, 0
#endif
#if FEATURES & FA_FEATURE_BLOCK_SPARSE
#define LISTS_ARG , __global const int *kv_num_blocks, __global const int *kv_indices FULL_LISTS_ARG
#define LISTS_SETUP const block_lists lists = {kv_num_blocks, kv_indices, FULL_LISTS_PTRS}
#else
#define LISTS_ARG
#define LISTS_SETUP const block_lists lists = {0, 0, 0, 0}
#endif

/* The lists as a pass sees them: its own tiles' blocks (the forward's and the dQ pass's query
 * blocks, the dK/dV pass's key blocks) are the lists' rows, `rows` per head, of `cols` entries
 * naming the blocks of the tiles it streams (key blocks, or query blocks). */
typedef struct list_view {
    block_lists l;
    int own_block, streamed_block; /* the block sizes along the owned and the streamed axis */
    int rows, cols;
} list_view;

/* The forward's lists (kv_*): query blocks name key blocks. An initializer, not a function
 * returning the struct: an inlined struct return left an intrinsic Oclgrind cannot run. */
#define FORWARD_VIEW(bl, p)                                                                     \
    {*(bl), (p)->sparse_block_q, (p)->sparse_block_k, (p)->sparse_q_blocks, (p)->sparse_k_blocks}

/* Whether own block `ob` of (b, h) names streamed block `sb` in either list (a full block's
 * elements all pass the masks, as the run checked, so it is computed like any other), or with
 * full_only in the full list. */
bool view_listed(const list_view *v, const fa_kernel_params *p, long b, long h, long ob, long sb,
                 bool full_only)
{
    const long row = fa_block_list_row(p, b, h, ob, v->rows);
    bool listed = !full_only && fa_block_listed(v->l.num, v->l.idx, row, v->cols, (int)sb);
#if SPARSE_FULL
    listed = listed || fa_block_listed(v->l.full_num, v->l.full_idx, row, v->cols, (int)sb);
#endif
    return listed;
}

/* Over the block pairs of own indices [o0, o_end) and streamed [s0, s_end) (both non-empty):
 * with every_full, whether every pair is a full block; else whether any pair is listed. Uniform
 * over a work-group: every item reads the same lists. */
bool view_tile(const list_view *v, const fa_kernel_params *p, long b, long h, long o0,
               long o_end, long s0, long s_end, bool every_full)
{
    for (long ob = o0 / v->own_block; ob <= (o_end - 1) / v->own_block; ob++)
        for (long sb = s0 / v->streamed_block; sb <= (s_end - 1) / v->streamed_block; sb++)
            if (view_listed(v, p, b, h, ob, sb, every_full) != every_full)
                return !every_full;
    return every_full;
}

/* Whether query block qb of (b, h) lists key block kb (the forward's lists). */
bool block_listed(const block_lists *bl, const fa_kernel_params *p, long b, long h, long qb,
                  long kb)
{
    const list_view v = FORWARD_VIEW(bl, p);
    return view_listed(&v, p, b, h, qb, kb, false);
}

/* Whether rows [r0, r_end) of (b, h) list any key block of keys [k0, k_end): a key tile that
 * none lists is skipped whole (the union over the query blocks the tile covers). Uniform over
 * a work-group. Always true without the feature. */
bool tile_listed(const block_lists *bl, const fa_kernel_params *p, long b, long h, long r0,
                 long r_end, long k0, long k_end)
{
    if (!(FEATURES & FA_FEATURE_BLOCK_SPARSE))
        return true;
    const list_view v = FORWARD_VIEW(bl, p);
    return view_tile(&v, p, b, h, r0, r_end, k0, k_end, false);
}

/* Whether every block of the tile (rows [r0, r_end), keys [k0, k0 + BLOCK_C), all of which
 * exist: k_end - k0 == BLOCK_C) is a full block, whose elements the core checked all pass the
 * causal mask and the window: such a tile skips the element-wise mask and block test. Always
 * false without full lists. */
bool tile_full(const block_lists *bl, const fa_kernel_params *p, long b, long h, long r0,
               long r_end, long k0, long k_end)
{
#if (FEATURES & FA_FEATURE_BLOCK_SPARSE) && SPARSE_FULL
    const list_view v = FORWARD_VIEW(bl, p);
    return k_end - k0 == BLOCK_C && view_tile(&v, p, b, h, r0, r_end, k0, k_end, true);
#else
    return false;
#endif
}

/* Mask: keys [c0, c_end) of row `row`'s S row (key k0 + c) in a key block its query block
 * does not list get -inf, one list search per key block. Rows past Sq are left alone: they
 * have no list row and write nothing. */
void mask_unlisted(__local float *s_row, int c0, int c_end, long k0, long row,
                   const block_lists *bl, const fa_kernel_params *p, long b, long h)
{
    if (!(FEATURES & FA_FEATURE_BLOCK_SPARSE) || row >= p->seqlen_q)
        return;
    const long qb = row / p->sparse_block_q;
    for (int c = c0; c < c_end;) {
        const long kb = (k0 + c) / p->sparse_block_k;
        const int next = (int)min((kb + 1) * p->sparse_block_k - k0, (long)c_end);
        if (!block_listed(bl, p, b, h, qb, kb))
            for (int x = c; x < next; x++)
                s_row[x] = -INFINITY;
        c = next;
    }
}
