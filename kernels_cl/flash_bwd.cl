/*
 * flash_bwd.cl - the FlashAttention backward kernels (OpenCL C 1.2): dO -> dQ, dK, dV with P
 * recomputed from the forward's LSE, never stored (FlashAttention-2's backward), in three
 * launches and without atomics, so every element has one writer and a fixed summation order:
 *
 *   flash_bwd_pre   D[i] = rowsum(dO[i] * O[i]) into scratch, one work-item per query row.
 *   flash_bwd_dkdv  one work-group per (key tile, K/V head, batch), TPR work-items per key: for
 *                   every query head of the group and every query tile that sees the keys, in
 *                   order, S^T and dP^T rows, then dV += P^T dO and dK += dS^T Q in private f32.
 *   flash_bwd_dq    one work-group per (query tile, head, batch), TPR work-items per query row,
 *                   like the forward: S and dP rows per key tile, then dQ += dS K.
 *
 * and with sinks a fourth, flash_bwd_dsinks (dsink[h] from LSE and D, one work-group per head).
 * A row's (or key's) TPR lanes (1 on CPUs; d / 32 on GPUs, so a lane keeps 32 floats of each
 * accumulator row) split the tile's scores as the forward's do, meet at a barrier once the
 * row of P and dS is written, and then each accumulates its d / TPR columns over the whole row.
 * Each pass is one kernel whose steps carry the comments of the CUDA kernels' tile functions
 * (kernels_cu/flash_bwd.cu) and the golden's bwd_row, in their order; the modifiers' and the
 * plain P and dS are chosen by a compile-time condition (grad_row_dq or plain_grad_dq,
 * grad_row_dkdv or the mask and row_grad), so a plain kernel is the plain code.
 *
 * P = exp(S - LSE) and dS = P * (dP - D). Both passes recompute S and dP; that costs about
 * 40% more multiply-adds than one pass with atomic dQ, and buys determinism. A kernel's BLOCK_R
 * is always the rows its work-group owns (dK/dV pass: keys, BLOCK_R = the plan's Bc) and BLOCK_C
 * the tile it streams (there: queries, the plan's Br), so the forward's helpers serve both.
 * Varlen batches (SEQ) run each sequence with its own lengths and rows (SEQ_SETUP); D and LSE
 * are at the row's LSE index (fa_lse_index). seqlens_k and paged K/V have no backward.
 *
 * This file follows the shared files in one program and uses their types and helpers
 * (load_tile, row_scores, the vector widths); alone it includes flash_common.cl, which brings
 * in the others (compile with -I kernels_cl -I src).
 */
#ifndef FA_FLASH_COMMON_CL
#include "flash_common.cl"
#endif
#if TPR > 1
/* A row's lanes wrote their keys of its S and dS rows; each lane then reads the whole row. */
#define ROW_WRITTEN() barrier(CLK_LOCAL_MEM_FENCE)
#else
#define ROW_WRITTEN()
#endif

/* ---- shared by both passes ---------------------------------------------------------------- */

/* Row `row` (a token of batch b) of head h of the tensor at t named T (q, do, dq, dk or dv), by
 * that tensor's offset and strides in the params p points to. A macro, as each tensor's fields
 * have their own names. */
#define HEAD_ROW(t, T, p, b, h, row)                                                            \
    ((t) + (p)->T##_offset + (b) * (p)->T##_stride_b + (h) * (p)->T##_stride_h +              \
     (row) * (p)->T##_stride_s)

/* key_head of K or V (t, named T: k or v) with that tensor's offset and strides from p. */
#define KEY_HEAD(t, T, p, b, h_kv, k_start)                                                     \
    key_head(t, (p)->T##_offset, (p)->T##_stride_b, (p)->T##_stride_h, (p)->T##_stride_s, b,  \
             h_kv, k_start)

/* One stored element of a global tensor as f32. */
float load_global(__global const store_t *p)
{
    return LOAD_ONE_F32_IN(__global, p);
}

/* Writes mul * acc (a lane's d / TPR f32 values of a row, in float_dims vectors) to a global row
 * from the lane's first element, in the storage type. Accumulators passed to a function that is
 * not inlined stay in memory: on GPUs the f16 and bf16 stores (libclc's software rounding) made
 * it too large for clang to inline, and dK, dV or dQ went to a stack frame (sm_80: 144-432
 * bytes) or scratch; hence INLINE_ON_GPU. */
INLINE_ON_GPU void store_row_scaled(const float_dims *acc, float mul, __global store_t *dst)
{
    UNROLL_ON_GPU
    for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
        store_dims(acc[dvec] * mul, dst + dvec * DIMS_PER_VEC);
}

/* acc[x] += sum_c w[c] * T[c][x] over c in [0, n) and a lane's d / TPR columns x: w is a row
 * of BLOCK_C f32 weights, T a BLOCK_C x d tile (tile_t) from the lane's first column
 * (the forward's P V step). */
void accumulate_rows(float_dims *acc, __local const float *w, __local const tile_t *t, int n)
{
    for (int c = 0; c < n; c++) {
        float w_c = w[c];
        __local const tile_t *t_row = t + c * HEAD_DIM;
#pragma unroll
        for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
            acc[dvec] += w_c * LOAD_DIMS_F32(t_row + dvec * DIMS_PER_VEC);
    }
}

/* P and dS of a lane's BLOCK_C / TPR scores of a row (pointers at its first key): s_row holds
 * S (log2 units, masked keys -inf) and becomes P = exp2(S - lse2); dp_row holds dP and becomes
 * dS = P * (dP - D). lse2 = LSE * log2(e) and D per element from lse2_v and d_v, or the scalars
 * lse2 and d when those are NULL. */
void row_grad(__local float *s_row, __local float *dp_row, __local const float *lse2_v,
              __local const float *d_v, float lse2, float d)
{
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++) {
        int at = kvec * KEYS_PER_VEC;
        float_keys l2 = lse2_v ? S_LOAD_KEYS(lse2_v + at) : (float_keys)lse2;
        float_keys dd = d_v ? S_LOAD_KEYS(d_v + at) : (float_keys)d;
        float_keys p = FLUSH_TINY(float_keys, exp2_keys(S_LOAD_KEYS(s_row + at) - l2));
        S_STORE_KEYS(p, s_row + at);
        S_STORE_KEYS(p * (S_LOAD_KEYS(dp_row + at) - dd), dp_row + at);
    }
}

/* The log2-unit LSE a row uses: a row with no key (LSE -inf) gets 0, its scores are all masked
 * to -inf, so its P is 0 and it adds nothing. */
float lse2_of(float lse)
{
    return lse == -INFINITY ? 0.0f : lse * LOG2E;
}

/* ---- the score modifiers and dropout in the backward (FEATURES) ---------------------------- */

/* Dropout on the query rows i0 + c, c in [0, n), of key j (the backward's dK/dV pass, whose
 * rows of P^T and dP^T run over queries): x[c] times row i0 + c's keep factor for key j.
 * DROPOUT_LANES rows share one Philox call on uintN counters (lane m: row i0 + c + m; the
 * key's group and the other counter words the same in every lane), each lane taking word j & 3;
 * the rows past whole vectors one call each. With one scalar Philox call per (row, key) the
 * backward took 4 times as long with dropout as without (docs/benchmarks.md). */
void dropout_key_rows(__local float *x, const fa_kernel_params *p, long b, long h, long j,
                      long i0, int n)
{
    const int e = (int)(j & 3);
    int c = 0;
    for (; c + DROPOUT_LANES <= n; c += DROPOUT_LANES) {
        /* the counter of fa_dropout_words: positions (k_position + j) >> 2 and q_position + i */
        uint_lanes w0 = (uint_lanes)((uint)((fa_k_position(p) + j) >> 2));
        uint_lanes w2 = (uint_lanes)((uint)(b * p->heads_q + h));
        uint_lanes w1 = (uint_lanes)((uint)(fa_q_position(p) + i0 + c)) + PHILOX_LANE;
        uint_lanes w3 = (uint_lanes)p->dropout_offset;
        FA_PHILOX_10_ROUNDS(uint_lanes, PHILOX_MULHILO_LANES, w0, w1, w2, w3,
                            (uint)p->dropout_seed, (uint)(p->dropout_seed >> 32));
        uint_lanes w = e == 0 ? w0 : e == 1 ? w1 : e == 2 ? w2 : w3;
        VSTORE_LANES(VLOAD_LANES(0, x + c) *
                         select((float_lanes)0.0f, (float_lanes)p->dropout_scale,
                                w >= (uint_lanes)p->dropout_threshold),
                     0, x + c);
    }
    for (; c < n; c++) {
        uint w[4];
        fa_dropout_words(p, b, h, i0 + c, j, w);
        /* word e by selects: indexed at run time, w went to sm_80's stack (16 bytes) */
        uint we = e == 0 ? w[0] : e == 1 ? w[1] : e == 2 ? w[2] : w[3];
        x[c] = we >= p->dropout_threshold ? x[c] * p->dropout_scale : 0.0f;
    }
}

/* With softcap, ALiBi, a bias or a window, P and dS are computed by grad_keys, where softcap's
 * derivative joins dS and the window's mask has two sides. Without them the vector path
 * (row_grad) runs; the sinks only the LSE carries. Dropout's Z joins dP before either path and
 * the dK/dV pass's P after it, by vectors (dropout_row, dropout_key_rows): dS = P (Z dP - D),
 * dV's weight P Z. Element by element (a scalar Philox call per element, too), the backward
 * with any of them took 2.5 to 5 times as long as without (docs/benchmarks.md). The other
 * features change no score: block-sparse lists zero P and dS after either path
 * (zero_unlisted), and positions move only the mask's row ends (keys_v, row_keys) and the
 * rules above; with only those, the vector path runs (a density-1 block mask took 7% more
 * time than the dense backward on the element path). */
#define GRAD_MODS                                                                                \
    (FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS | FA_FEATURE_WINDOW))

/* P and dS of a float_keys vector of a score tile's elements (query i, key j): s = q.k *
 * SCORE_SCALE, zdp = Z dO_i . V_j (Z the dropout factor, 1 without dropout), dist = i + Sk - Sq
 * - j (ALiBi's), bias2 the bias in log2 units, lse2 and d row i's LSE (log2 units) and D.
 * Returns P and sets *ds = P (Z dP - D) dcap, dcap = d softcap(s) / ds (dQ's and dK's weight
 * before the scale); where `visible` is 0 both are 0, a NaN score's included. */
float_keys grad_keys(float_keys s, float_keys zdp, const fa_kernel_params *p, float slope,
                     float_keys dist, float_keys bias2, int_keys visible, float_keys lse2,
                     float_keys d, float_keys *ds)
{
    float_keys dcap = 1.0f;
    if (FEATURES & FA_FEATURE_SOFTCAP) {
        float_keys t = softcap_tanh_keys(s, p->softcap); /* s = cap * tanh(s / cap), log2 units */
        s = (p->softcap * LOG2E) * t;
        dcap = 1.0f - t * t;
    }
    if (FEATURES & FA_FEATURE_ALIBI)
        s -= alibi_keys(slope, fabs(dist)); /* -slope |i' - j| */
    if (FEATURES & FA_FEATURE_BIAS)
        s += bias2;
    float_keys pr = FLUSH_TINY(float_keys, exp2_keys(s - lse2)); /* P = exp(S - LSE) */
    *ds = select((float_keys)0.0f, pr * (zdp - d) * dcap, visible);
    return select((float_keys)0.0f, pr, visible);
}

/* Row i's bias (bias_t, keys contiguous) of (batch b, query head h); 0 without a bias. */
__global const bias_t *bias_row_of(const fa_kernel_params *p BIAS_ARG, long b, long h, long i)
{
    if (!(FEATURES & FA_FEATURE_BIAS))
        return 0;
    return BIAS_PTR + p->bias_offset + b * p->bias_stride_b + h * p->bias_stride_h +
           i * p->bias_stride_s;
}

/* ---- block-sparse (FA_FEATURE_BLOCK_SPARSE): each pass walks its own lists ------------------ */

/* The dQ pass reads the forward's lists (LISTS_ARG: a query block's key blocks), the dK/dV pass
 * the transposed ones (a key block's query blocks), both bound after the sequence buffers
 * (op_launches.c, add_block_list_args). A pass skips a streamed tile no block pair of it is
 * listed for; where a tile's pairs are only partly listed, the unlisted elements' P and dS are
 * set to 0 after they are computed (a modifier may make -inf scores finite: softcap). */
#if (FEATURES & FA_FEATURE_BLOCK_SPARSE) && SPARSE_FULL
#define FULL_Q_LISTS_ARG , __global const int *full_q_num_blocks, __global const int *full_q_indices
#define FULL_Q_LISTS_PTRS full_q_num_blocks, full_q_indices
#else
#define FULL_Q_LISTS_ARG
#define FULL_Q_LISTS_PTRS 0, 0
#endif
#if FEATURES & FA_FEATURE_BLOCK_SPARSE
#define Q_LISTS_ARG                                                                         \
    , __global const int *q_num_blocks, __global const int *q_indices FULL_Q_LISTS_ARG
#define Q_LISTS_SETUP const block_lists lists = {q_num_blocks, q_indices, FULL_Q_LISTS_PTRS}
#else
#define Q_LISTS_ARG
#define Q_LISTS_SETUP const block_lists lists = {0, 0, 0, 0}
#endif

/* The transposed lists (q_*): key blocks name query blocks (an initializer, as FORWARD_VIEW). */
#define TRANSPOSED_VIEW(bl, p)                                                                  \
    {*(bl), (p)->sparse_block_k, (p)->sparse_block_q, (p)->sparse_k_blocks, (p)->sparse_q_blocks}

/* Whether a pass computes the tile of own indices [o0, o_end) and streamed [s0, s_end) (any
 * block pair listed; always without the feature), and whether it is all full blocks. */
bool pass_tile_listed(const list_view *v, const fa_kernel_params *p, long b, long h, long o0,
                      long o_end, long s0, long s_end)
{
    return !(FEATURES & FA_FEATURE_BLOCK_SPARSE) ||
           view_tile(v, p, b, h, o0, o_end, s0, s_end, false);
}
bool pass_tile_full(const list_view *v, const fa_kernel_params *p, long b, long h, long o0,
                    long o_end, long s0, long s_end)
{
#if (FEATURES & FA_FEATURE_BLOCK_SPARSE) && SPARSE_FULL
    return view_tile(v, p, b, h, o0, o_end, s0, s_end, true);
#else
    return false;
#endif
}

/* P and dS (p_row, ds_row) of own index `own` (a query row, or a key) get 0 over the lane's
 * streamed entries s0 + c, c in [c0, c_end), below s_count (those that exist) whose block pair
 * is not listed: one list search per streamed block. */
void zero_unlisted(__local float *p_row, __local float *ds_row, int c0, int c_end, long s0,
                   long s_count, long own, const list_view *v, const fa_kernel_params *p, long b,
                   long h)
{
    if (!(FEATURES & FA_FEATURE_BLOCK_SPARSE))
        return;
    const long ob = own / v->own_block;
    c_end = (int)min((long)c_end, s_count - s0);
    for (int c = c0; c < c_end;) {
        const long sb = (s0 + c) / v->streamed_block;
        const int next = (int)min((sb + 1) * v->streamed_block - s0, (long)c_end);
        if (!view_listed(v, p, b, h, ob, sb, false))
            for (int x = c; x < next; x++)
                p_row[x] = ds_row[x] = 0.0f;
        c = next;
    }
}

/* ---- the dQ pass --------------------------------------------------------------------------- */

/* The dQ pass's row i with the modifiers: the lane's keys j = k0 + c, c in [c0, c0 + BLOCK_C /
 * TPR), of the tile, visible in [begin, end), by float_keys vectors (lane e: key j0 + e). s_row
 * (S) becomes P and dp_row (Z dP) dS. */
INLINE_ON_GPU void grad_row_dq(__local float *s_row, __local float *dp_row,
                               const fa_kernel_params *p, float slope,
                               __global const bias_t *bias_row, long i, long k0, int c0,
                               long begin, long end, float lse2, float d)
{
    for (int at = c0; at < c0 + LANE_KEYS; at += KEYS_PER_VEC) {
        const long j0 = k0 + at;
        const float lo = (float)clamp(begin - j0, -1L, (long)KEYS_PER_VEC);
        const float hi = (float)clamp(end - j0, -1L, (long)KEYS_PER_VEC);
        const int_keys visible = LANE_INDEX >= lo && LANE_INDEX < hi;
        const float_keys dist = (float)(i + fa_diagonal(p, 1) - j0) - LANE_INDEX;
        float_keys bias2 = 0.0f;
        if ((FEATURES & FA_FEATURE_BIAS) && bias_row && j0 + KEYS_PER_VEC <= p->seqlen_k) {
            bias2 = LOG2E * load_bias_keys(bias_row + j0);
        } else if ((FEATURES & FA_FEATURE_BIAS) && bias_row) { /* a partial vector at Sk */
            float part[KEYS_PER_VEC];
            for (int e = 0; e < KEYS_PER_VEC; e++)
                part[e] = j0 + e < p->seqlen_k ? LOG2E * load_bias(bias_row + j0 + e) : 0.0f;
            bias2 = VLOAD_KEYS(part);
        }
        float_keys ds;
        S_STORE_KEYS(grad_keys(S_LOAD_KEYS(s_row + at), S_LOAD_KEYS(dp_row + at), p, slope,
                               dist, bias2, visible, (float_keys)lse2, (float_keys)d, &ds),
                     s_row + at);
        S_STORE_KEYS(ds, dp_row + at);
    }
}

/* The dQ pass's row without modifiers: the mask (the lane's keys from row_keys - k0 on get
 * -inf), then P and dS by row_grad. */
INLINE_ON_GPU void plain_grad_dq(__local float *s_row, __local float *dp_row, long k0, int c0,
                                 long row_keys, float lse2, float d)
{
    for (long c = max(row_keys - k0, (long)c0); c < c0 + LANE_KEYS; c++)
        s_row[c] = -INFINITY;
    row_grad(s_row + c0, dp_row + c0, 0, 0, lse2, d);
}

/* The dQ pass's work-group (here and in flash_bwd_blocked.cl): query rows [r0, r0 + BLOCK_R) of
 * head h of batch b, the last tiles first; p the sequence's params and seq its first tokens
 * (SEQ_SETUP), view the forward's lists, h_kv the K/V head, sq and sk the sequence's lengths. */
#define DQ_SETUP                                                                                \
    const long r0 = (long)(get_num_groups(0) - 1 - get_group_id(0)) * BLOCK_R;                  \
    const long h = (long)get_group_id(1), b = (long)get_group_id(2);                            \
    SEQ_SETUP(b);                                                                               \
    LISTS_SETUP;                                                                                \
    const list_view view = FORWARD_VIEW(&lists, &p);                                            \
    const long h_kv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */      \
    const long sq = p.seqlen_q, sk = p.seqlen_k

/* Loads the work-group's rows [r0, r0 + BLOCK_R) of Q and dO (head h of batch b, from token
 * q_start), transposed or as is: rows past Sq are zeros, their results never written. */
INLINE_ON_GPU void load_own_rows(__local tile_t *q_tile, __local tile_t *do_tile,
                                 __global const store_t *q, __global const store_t *d_o,
                                 const fa_kernel_params *p, long b, long h, long q_start, long r0,
                                 int transposed)
{
    load_tile(q_tile, HEAD_ROW(q, q, p, b, h, q_start), r0, p->seqlen_q, p->q_stride_s, BLOCK_R,
              transposed);
    load_tile(do_tile, HEAD_ROW(d_o, do, p, b, h, q_start), r0, p->seqlen_q, p->do_stride_s,
              BLOCK_R, transposed);
}

/* Loads the key tile [k0, k0 + BLOCK_C) of K and V (rows at k_head, v_head: key_head): K^T and
 * V^T for S and dP, K as is for dQ; keys past Sk are zeros. */
INLINE_ON_GPU void load_key_tile(__local tile_t *kt_tile, __local tile_t *vt_tile,
                                 __local tile_t *k_tile, __global const store_t *k_head,
                                 __global const store_t *v_head, const fa_kernel_params *p,
                                 long k0)
{
    load_tile(kt_tile, k_head, k0, p->seqlen_k, p->k_stride_s, BLOCK_C, 1);
    load_tile(vt_tile, v_head, k0, p->seqlen_k, p->v_stride_s, BLOCK_C, 1);
    load_tile(k_tile, k_head, k0, p->seqlen_k, p->k_stride_s, BLOCK_C, 0);
}

#if !REG_BLOCKED /* the staged pass; CPUs' register-blocked one: flash_bwd_blocked.cl */
/* dQ = scale * dS K for one (query tile, head, batch): work-item (r, lane) = get_local_id(0) /
 * TPR, % TPR owns query row r0 + r, keys [c0, c0 + Bc / TPR) of each S and dP row and dims
 * [x0, x0 + d / TPR) of dQ. The last query tiles first: under a causal mask they visit the most
 * key tiles, and the longest work-groups should not be the last ones started. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_bwd_dq(__global const store_t *q, __global const store_t *k, __global const store_t *v,
             __global const float *lse, __global const store_t *d_o,
             __global const float *delta,
             __global store_t *dq ALIBI_ARG BIAS_ARG SEQ_ARG LISTS_ARG, PARAMS_ARG)
{
    __local tile_t q_tile[HEAD_DIM * BLOCK_R];  /* Q^T:  d x Br */
    __local tile_t do_tile[HEAD_DIM * BLOCK_R]; /* dO^T: d x Br */
    __local tile_t kt_tile[HEAD_DIM * BLOCK_C]; /* K^T:  d x Bc */
    __local tile_t vt_tile[HEAD_DIM * BLOCK_C]; /* V^T:  d x Bc */
    __local tile_t k_tile[BLOCK_C * HEAD_DIM];  /* K:    Bc x d */
    __local float s_tile[BLOCK_R * BLOCK_C];     /* S, then P */
    __local float dp_tile[BLOCK_R * BLOCK_C];    /* dP, then dS */
    LOCAL_RANGE(kv_range);                       /* the key tiles, loop_range says why */

    const int r = (int)get_local_id(0) / TPR, lane = (int)get_local_id(0) % TPR;
    const int c0 = lane * LANE_KEYS, x0 = lane * LANE_DIMS;
    DQ_SETUP; /* r0, h, b; p and seq (sequence b's), view; h_kv, sq, sk */
    const long row = r0 + r;
    if (SEQ && r0 >= sq)
        return; /* a tile past a shorter sequence's rows, the whole work-group */
    __global const store_t *k_head = KEY_HEAD(k, k, &p, b, h_kv, seq.k_start);
    __global const store_t *v_head = KEY_HEAD(v, v, &p, b, h_kv, seq.k_start);
    __local float *s_row = s_tile + r * BLOCK_C, *dp_row = dp_tile + r * BLOCK_C;

    /* Load the Q and dO tiles (rows past Sq are zeros; their results are never written). */
    load_own_rows(q_tile, do_tile, q, d_o, &p, b, h, seq.q_start, r0, 1);
    const long at = fa_lse_index(&p, b, h, seq.q_start, row); /* this row in LSE and D */
    const float lse_row = row < sq ? lse[at] : -INFINITY;
    const float lse2 = lse2_of(lse_row), d = row < sq ? delta[at] : 0.0f;
    /* Keys [row_begin, row_keys) of this row count (mask and window); none for a row with no
     * key or past Sq. Then the key tiles, and the row's modifier inputs: ALiBi's slope, its
     * bias row (in this order: row_begin before the range cost gfx90a 2 SGPR spills). */
    const long row_keys = lse_row == -INFINITY ? 0 : fa_keys_end(&p, MASK, FEATURES, row);
    long kv_begin, kv_end;
    loop_range(kv_range, keys_first_tile(&p, r0), keys_to_visit(&p, r0), &kv_begin, &kv_end);
    const long row_begin = fa_keys_begin(&p, FEATURES, row);
    const float slope = ALIBI_SLOPE(&p, b, h);
    __global const bias_t *bias_row = row < sq ? bias_row_of(&p BIAS_PASS, b, h, row) : 0;

    float_dims acc[VECS_PER_LANE_DIMS]; /* dQ[r][x0 ..] / scale, f32 */
    UNROLL_ON_GPU
    for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
        acc[dvec] = 0.0f;

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc (tiles outside
     * the window skipped). */
    for (long k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        if (!pass_tile_listed(&view, &p, b, h, r0, min(r0 + BLOCK_R, sq), k0,
                              min(k0 + BLOCK_C, sk)))
            continue; /* block-sparse: the tile's query blocks list none of its key blocks */
        const bool full = pass_tile_full(&view, &p, b, h, r0, min(r0 + BLOCK_R, sq), k0,
                                         min(k0 + BLOCK_C, sk));
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous tiles are no longer read */
        load_key_tile(kt_tile, vt_tile, k_tile, k_head, v_head, &p, k0);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* S = Q K^T (log2 units) and dP = dO V^T, of the lane's keys; with dropout, Z dP. */
        row_scores(s_row + c0, q_tile + r, kt_tile + c0, SCORE_SCALE(p), &p, 0);
        row_scores(dp_row + c0, do_tile + r, vt_tile + c0, 1.0f, &p, 0);
        if (FEATURES & FA_FEATURE_DROPOUT)
            dropout_row(dp_row + c0, &p, b, h, row, k0 + c0,
                        (int)clamp(sk - (k0 + c0), 0L, (long)LANE_KEYS));

        /* The modifiers (softcap, ALiBi, bias), the mask (keys outside [row_begin, row_keys)),
         * P = exp2(S - LSE2) and dS = P (Z dP - D) dcap, by vectors of keys. */
        if (GRAD_MODS)
            grad_row_dq(s_row, dp_row, &p, slope, bias_row, row, k0, c0, row_begin, row_keys,
                        lse2, d);
        else
            plain_grad_dq(s_row, dp_row, k0, c0, row_keys, lse2, d);
        if (!full && row < sq) /* block-sparse: keys in blocks the row's block leaves out */
            zero_unlisted(s_row, dp_row, c0, c0 + LANE_KEYS, k0, sk, row, &view, &p, b, h);
        ROW_WRITTEN();

        /* dQ += dS K over the keys that exist. */
        accumulate_rows(acc, dp_row, k_tile + x0, (int)min((long)BLOCK_C, sk - k0));
    }

    /* dQ = scale * acc in the storage type. */
    if (row < sq)
        store_row_scaled(acc, p.scale, HEAD_ROW(dq, dq, &p, b, h, seq.q_start + row) + x0);
}

#endif /* !REG_BLOCKED */

/* ---- the dK/dV pass ------------------------------------------------------------------------ */

/* The first query row that sees key `key` (the mask and window rules of kernel_params.h,
 * inverted: j <= i' + window_right means i >= j - window_right - fa_diagonal(p, 1)). */
long first_row_seeing(long key, const fa_kernel_params *p)
{
    long first = MASK == 0 ? 0 : key - fa_diagonal(p, MASK == 2);
    if ((FEATURES & FA_FEATURE_WINDOW) && p->window_right >= 0)
        first = max(first, key - p->window_right - fa_diagonal(p, 1));
    return clamp(first, 0L, p->seqlen_q);
}

/* The end of the query rows that see key `key` (the window's left side inverted: j >= i' -
 * window_left means i <= j + window_left - fa_diagonal(p, 1)); Sq without a window. */
long rows_seeing_end(long key, const fa_kernel_params *p)
{
    if ((FEATURES & FA_FEATURE_WINDOW) && p->window_left >= 0)
        return clamp(key + p->window_left - fa_diagonal(p, 1) + 1, 0L, p->seqlen_q);
    return p->seqlen_q;
}

/* The LSE (log2 units), D and allowed-key count of query rows [r0, r0 + BLOCK_C) of head h of
 * the sequence at q_start into local vectors; rows past Sq count no key. */
void load_row_stats(__local float *lse2_v, __local float *d_v, __local int *keys_v,
                    __global const float *lse, __global const float *delta,
                    const fa_kernel_params *p, long b, long h, long q_start, long r0)
{
    for (int i = (int)get_local_id(0); i < BLOCK_C; i += WG_SIZE) {
        long row = r0 + i, at = fa_lse_index(p, b, h, q_start, row);
        float l = row < p->seqlen_q ? lse[at] : -INFINITY;
        lse2_v[i] = lse2_of(l);
        d_v[i] = row < p->seqlen_q ? delta[at] : 0.0f;
        keys_v[i] = l == -INFINITY ? 0 : (int)fa_keys_end(p, MASK, FEATURES, row);
    }
}

/* The dK/dV pass's key j with the modifiers, against the lane's query rows i = r0 + c, c in
 * [c0, c0 + BLOCK_C / TPR), of (b, h), by float_keys vectors (lane e: row i0 + e): st_row (S^T)
 * becomes P^T and dpt_row (Z dP^T) dS^T. keys_v holds each row's key end (0 for a row with no
 * key); a window's begin grows with the row, so the rows seeing j are those up to a lane. */
INLINE_ON_GPU void grad_row_dkdv(__local float *st_row, __local float *dpt_row,
                                 const fa_kernel_params *p ALIBI_ARG BIAS_ARG, long b, long h,
                                 long j, long r0, int c0, __local const float *lse2_v,
                                 __local const float *d_v, __local const int *keys_v)
{
    const float slope = ALIBI_SLOPE(p, b, h);
    for (int at = c0; at < c0 + LANE_KEYS; at += KEYS_PER_VEC) {
        const long i0 = r0 + at;
        int_keys visible = (int_keys)(int)j < VLOAD_KEYS(keys_v + at);
        if ((FEATURES & FA_FEATURE_WINDOW) && p->window_left >= 0) {
            /* j >= fa_window_begin(i) = i + fa_diagonal(p, 1) - left */
            const float last = (float)clamp(j - (i0 + fa_diagonal(p, 1) - p->window_left), -1L,
                                            (long)KEYS_PER_VEC);
            visible = visible && LANE_INDEX <= last;
        }
        const float_keys dist = (float)(i0 + fa_diagonal(p, 1) - j) + LANE_INDEX;
        float_keys bias2 = 0.0f;
        if (FEATURES & FA_FEATURE_BIAS) { /* a column here: gathered row by row where seen */
            float part[KEYS_PER_VEC];
            for (int e = 0; e < KEYS_PER_VEC; e++) {
                const long i = i0 + e;
                const bool seen = j < keys_v[at + e] && j >= fa_keys_begin(p, FEATURES, i);
                part[e] = seen ? LOG2E * load_bias(bias_row_of(p BIAS_PASS, b, h, i) + j) : 0.0f;
            }
            bias2 = VLOAD_KEYS(part);
        }
        float_keys ds;
        S_STORE_KEYS(grad_keys(S_LOAD_KEYS(st_row + at), S_LOAD_KEYS(dpt_row + at), p, slope,
                               dist, bias2, visible, S_LOAD_KEYS(lse2_v + at),
                               S_LOAD_KEYS(d_v + at), &ds),
                     st_row + at);
        S_STORE_KEYS(ds, dpt_row + at);
    }
}

/* The dK/dV pass's work-group (here and in flash_bwd_blocked.cl): keys [k0, k0 + BLOCK_R) of
 * K/V head h_kv of batch b; p the sequence's params and seq its first tokens (SEQ_SETUP), view
 * the transposed lists, group the query heads per K/V head, sq and sk the sequence's lengths. */
#define DKDV_SETUP                                                                              \
    const long k0 = (long)get_group_id(0) * BLOCK_R;                                            \
    const long h_kv = (long)get_group_id(1), b = (long)get_group_id(2);                         \
    SEQ_SETUP(b);                                                                               \
    Q_LISTS_SETUP;                                                                              \
    const list_view view = TRANSPOSED_VIEW(&lists, &p);                                         \
    const long group = p.heads_q / p.heads_kv, sq = p.seqlen_q, sk = p.seqlen_k

/* Loads the work-group's keys [k0, k0 + BLOCK_R) of K and V (head h_kv of batch b, from token
 * k_start), transposed or as is: keys past Sk are zeros, never written. */
INLINE_ON_GPU void load_own_keys(__local tile_t *k_tile, __local tile_t *v_tile,
                                 __global const store_t *k, __global const store_t *v,
                                 const fa_kernel_params *p, long b, long h_kv, long k_start,
                                 long k0, int transposed)
{
    load_tile(k_tile, KEY_HEAD(k, k, p, b, h_kv, k_start), k0, p->seqlen_k, p->k_stride_s,
              BLOCK_R, transposed);
    load_tile(v_tile, KEY_HEAD(v, v, p, b, h_kv, k_start), k0, p->seqlen_k, p->v_stride_s,
              BLOCK_R, transposed);
}

/* The query rows [*first, *end) that see any of the keys [k0, k0 + BLOCK_R) (causal and window;
 * the others see none), through `range` as loop_range shares it. */
ALWAYS_INLINE void rows_seeing_keys(__local long *range, long k0, const fa_kernel_params *p,
                                    long *first, long *end)
{
    loop_range(range, first_row_seeing(k0, p), rows_seeing_end(k0 + BLOCK_R - 1, p), first, end);
}

/* Loads the query tile [r0, r0 + BLOCK_C) of Q and dO (rows at q_head, do_head): Q^T and dO^T
 * for S^T and dP^T, Q and dO as is for dK and dV; rows past Sq are zeros. */
INLINE_ON_GPU void load_query_tile(__local tile_t *qt_tile, __local tile_t *dot_tile,
                                   __local tile_t *q_tile, __local tile_t *do_tile,
                                   __global const store_t *q_head,
                                   __global const store_t *do_head, const fa_kernel_params *p,
                                   long r0)
{
    load_tile(qt_tile, q_head, r0, p->seqlen_q, p->q_stride_s, BLOCK_C, 1);
    load_tile(dot_tile, do_head, r0, p->seqlen_q, p->do_stride_s, BLOCK_C, 1);
    load_tile(q_tile, q_head, r0, p->seqlen_q, p->q_stride_s, BLOCK_C, 0);
    load_tile(do_tile, do_head, r0, p->seqlen_q, p->do_stride_s, BLOCK_C, 0);
}

#if !REG_BLOCKED /* the staged pass; CPUs' register-blocked one: flash_bwd_blocked.cl */
/* dK = scale * dS^T Q and dV = P^T dO for one (key tile, K/V head, batch): work-item (c, lane)
 * owns key k0 + c, query rows [c0, c0 + BLOCK_C / TPR) of each S^T and dP^T row and dims
 * [x0, x0 + d / TPR) of dK and dV. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_bwd_dkdv(__global const store_t *q, __global const store_t *k, __global const store_t *v,
               __global const float *lse, __global const store_t *d_o,
               __global const float *delta, __global store_t *dk,
               __global store_t *dv ALIBI_ARG BIAS_ARG SEQ_ARG Q_LISTS_ARG, PARAMS_ARG)
{
    __local tile_t kt_tile[HEAD_DIM * BLOCK_R];  /* K^T:  d x (own keys) */
    __local tile_t vt_tile[HEAD_DIM * BLOCK_R];  /* V^T:  d x (own keys) */
    __local tile_t qt_tile[HEAD_DIM * BLOCK_C];  /* Q^T:  d x (query tile) */
    __local tile_t dot_tile[HEAD_DIM * BLOCK_C]; /* dO^T: d x (query tile) */
    __local tile_t q_tile[BLOCK_C * HEAD_DIM];   /* Q:    (query tile) x d */
    __local tile_t do_tile[BLOCK_C * HEAD_DIM];  /* dO:   (query tile) x d */
    __local float st_tile[BLOCK_R * BLOCK_C];     /* S^T, then P^T */
    __local float dpt_tile[BLOCK_R * BLOCK_C];    /* dP^T, then dS^T */
    __local float lse2_v[BLOCK_C], d_v[BLOCK_C];  /* per query row of the tile */
    __local int keys_v[BLOCK_C];
    LOCAL_RANGE(rows_range); /* the query rows, loop_range says why */

    const int c = (int)get_local_id(0) / TPR, lane = (int)get_local_id(0) % TPR;
    const int c0 = lane * LANE_KEYS, x0 = lane * LANE_DIMS;
    DKDV_SETUP; /* k0, h_kv, b; p and seq (sequence b's), view; group, sq, sk */
    const long key = k0 + c;
    if (SEQ && k0 >= sk)
        return; /* a tile past a shorter sequence's keys, the whole work-group */
    __local float *st_row = st_tile + c * BLOCK_C, *dpt_row = dpt_tile + c * BLOCK_C;

    /* Load the block's K and V tiles, transposed (keys past Sk are zeros, never written). */
    load_own_keys(kt_tile, vt_tile, k, v, &p, b, h_kv, seq.k_start, k0, 1);
    float_dims acc_k[VECS_PER_LANE_DIMS], acc_v[VECS_PER_LANE_DIMS]; /* dK / scale, dV: f32 */
    UNROLL_ON_GPU
    for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
        acc_k[dvec] = acc_v[dvec] = 0.0f;
    /* Causal and window: rows before `first` or from `last_end` on see none of the keys. */
    long first, last_end;
    rows_seeing_keys(rows_range, k0, &p, &first, &last_end);

    /* Loop over the group's query heads, then their query tiles [r0, r0 + Br), in order. */
    for (long h = h_kv * group; h < (h_kv + 1) * group; h++) {
        __global const store_t *q_head = HEAD_ROW(q, q, &p, b, h, seq.q_start);
        __global const store_t *do_head = HEAD_ROW(d_o, do, &p, b, h, seq.q_start);
        for (long r0 = first; r0 < last_end; r0 += BLOCK_C) {
            if (!pass_tile_listed(&view, &p, b, h, k0, min(k0 + BLOCK_R, sk), r0,
                                  min(r0 + BLOCK_C, sq)))
                continue; /* block-sparse: the keys' blocks list none of the tile's blocks */
            const bool full = pass_tile_full(&view, &p, b, h, k0, min(k0 + BLOCK_R, sk), r0,
                                             min(r0 + BLOCK_C, sq));
            /* Load the query tile: Q and dO (transposed and as is), the rows' LSE, D and keys. */
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous query tile is no longer read */
            load_query_tile(qt_tile, dot_tile, q_tile, do_tile, q_head, do_head, &p, r0);
            load_row_stats(lse2_v, d_v, keys_v, lse, delta, &p, b, h, seq.q_start, r0);
            barrier(CLK_LOCAL_MEM_FENCE);

            /* S^T = K Q^T and dP^T = V dO^T, of the lane's rows; with dropout, Z dP^T. */
            row_scores(st_row + c0, kt_tile + c, qt_tile + c0, SCORE_SCALE(p), &p, 0);
            row_scores(dpt_row + c0, vt_tile + c, dot_tile + c0, 1.0f, &p, 0);
            if (FEATURES & FA_FEATURE_DROPOUT)
                dropout_key_rows(dpt_row + c0, &p, b, h, key, r0 + c0, LANE_KEYS);

            /* The modifiers, the mask (key >= the row's count, or before its window), P^T and
             * dS^T = P^T (Z dP^T - D) dcap, by vectors of rows; with dropout, P^T Z. */
            if (GRAD_MODS)
                grad_row_dkdv(st_row, dpt_row, &p ALIBI_PASS BIAS_PASS, b, h, key, r0, c0,
                              lse2_v, d_v, keys_v);
            else { /* the mask in place: as a helper, gfx90a's d 32 f16 pass took 206 VGPRs */
                for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++) { /* key >= row's keys */
                    int at = c0 + kvec * KEYS_PER_VEC;
                    float_keys s = S_LOAD_KEYS(st_row + at);
                    S_STORE_KEYS(select((float_keys)(-INFINITY), s,
                                        (int_keys)key < VLOAD_KEYS(keys_v + at)),
                                 st_row + at);
                }
                row_grad(st_row + c0, dpt_row + c0, lse2_v + c0, d_v + c0, 0.0f, 0.0f);
            }
            if (FEATURES & FA_FEATURE_DROPOUT)
                dropout_key_rows(st_row + c0, &p, b, h, key, r0 + c0, LANE_KEYS);
            if (!full && key < sk) /* block-sparse: rows in blocks the key's block leaves out */
                zero_unlisted(st_row, dpt_row, c0, c0 + LANE_KEYS, r0, sq, key, &view, &p, b, h);
            ROW_WRITTEN();

            /* dK += dS^T Q and dV += P^T dO over the query rows that exist. */
            int rows = (int)min((long)BLOCK_C, sq - r0);
            accumulate_rows(acc_k, dpt_row, q_tile + x0, rows);
            accumulate_rows(acc_v, st_row, do_tile + x0, rows);
        }
    }

    /* dK = scale * acc_k and dV = acc_v in the storage type (varlen: at token k_start + key). */
    if (key >= sk)
        return;
    const long t = seq.k_start + key; /* the key's row in dK and dV */
    store_row_scaled(acc_k, p.scale, HEAD_ROW(dk, dk, &p, b, h_kv, t) + x0);
    store_row_scaled(acc_v, 1.0f, HEAD_ROW(dv, dv, &p, b, h_kv, t) + x0);
}

#endif /* !REG_BLOCKED */

/* ---- D and the sinks' gradient -------------------------------------------------------------- */

/* D[i] = rowsum(dO[i] * O[i]) at row i's LSE index, one work-item per query row. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_bwd_pre(__global const store_t *o, __global const store_t *d_o,
              __global float *delta SEQ_ARG, PARAMS_ARG)
{
    const long row = (long)get_group_id(0) * BLOCK_R + get_local_id(0) / TPR;
    const long h = (long)get_group_id(1), b = (long)get_group_id(2);
    SEQ_SETUP(b);
    if (row >= p.seqlen_q || get_local_id(0) % TPR != 0)
        return; /* a row's first lane sums it: D is a small part of the backward */
    const long t = seq.q_start + row; /* the row's token */
    __global const store_t *o_row = o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h +
                                    t * p.o_stride_s;
    __global const store_t *do_row = d_o + p.do_offset + b * p.do_stride_b +
                                     h * p.do_stride_h + t * p.do_stride_s;
    float sum = 0.0f;
    for (int x = 0; x < HEAD_DIM; x++)
        sum += load_global(do_row + x) * load_global(o_row + x);
    delta[fa_lse_index(&p, b, h, seq.q_start, row)] = sum;
}

/*
 * The sinks' gradient: dsink[h] = -sum over b, then rows i (of sequence b), of exp(sink[h] -
 * LSE[b][h][i]) * D[b][h][i] (D from flash_bwd_pre), rows with LSE = -inf adding nothing. One
 * work-group per query head (NDRange (WG_SIZE, Hq, 1)): work-item t sums rows t, t + WG_SIZE, ..
 * of each batch in order, then a tree over the work-group adds the partial sums; no atomics, a
 * fixed order.
 * With batch 0, delta is never read and dsinks gets 0.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_bwd_dsinks(__global const float *lse, __global const float *delta,
                 __global const float *sinks, __global float *dsinks SEQ_ARG,
                 const fa_kernel_params p)
{
    __local float partial[WG_SIZE]; /* partial[t]: work-item t's sum */
    const int t = (int)get_local_id(0);
    const long h = (long)get_group_id(1);
    const float sink = sinks[h];
    float sum = 0.0f;
    for (long b = 0; b < p.batch; b++) {
        const fa_seq seq = fa_seq_of(&p, SEQ, VARLEN_PTRS, SEQLENS_K_PTR, b);
        for (long i = t; i < seq.seqlen_q; i += WG_SIZE) {
            long at = fa_lse_index(&p, b, h, seq.q_start, i); /* LSE and D */
            float l = lse[at];
            if (l != -INFINITY)
                sum += exp(sink - l) * delta[at];
        }
    }
    partial[t] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    int step = 1; /* the largest power of two below WG_SIZE */
    while (step * 2 < WG_SIZE)
        step *= 2;
    for (; step > 0; step /= 2) { /* partial[t] += partial[t + step], within WG_SIZE */
        if (t < step && t + step < WG_SIZE)
            partial[t] += partial[t + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0)
        dsinks[h] = -partial[0];
}

/* Compiled on its own, this file brings in the register-blocked passes after it, as the
 * library's backward program holds them (cl_program.c). */
#if defined(FA_KERNELS_ALONE) && REG_BLOCKED
#include "flash_blocks.cl"
#include "flash_bwd_blocked.cl"
#endif
