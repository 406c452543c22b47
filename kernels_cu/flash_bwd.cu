/*
 * flash_bwd.cu - the FlashAttention backward kernels (CUDA, compiled at run time by NVRTC):
 * dO -> dQ, dK, dV with P recomputed from the forward's LSE, never stored (FlashAttention-2's
 * backward), in three launches and without atomics, so every element has one writer and a fixed
 * summation order. The same passes, steps and order as kernels_cl/flash_bwd.cl:
 *
 *   flash_bwd_pre   D[i] = rowsum(dO[i] * O[i]) into scratch (f32, at the row's LSE index;
 *                   flash_bwd_rows.cu, with flash_bwd_dsinks).
 *   flash_bwd_dkdv  one block per (key tile, K/V head, batch): for every query head of the
 *                   group and every query tile that sees the keys, in order, S^T and dP^T,
 *                   then dV += P^T dO and dK += dS^T Q in f32 registers.
 *   flash_bwd_dq    one block per (query tile, head, batch), like the forward: S and dP per key
 *                   tile, then dQ += dS K.
 *
 * with P = exp2(S * scale * log2(e) - LSE * log2(e)) and dS = P * (dP - D); dQ and dK get the
 * factor `scale` once, at the end. The score modifiers and dropout (-DFEATURES, as in the
 * forward; compiled in only when on, so a plain build is unchanged) follow docs/algorithm.md: S
 * is recomputed exactly as the forward's (score_log2: softcap, ALiBi, bias; the mask and window
 * by fa_keys_begin/fa_keys_end), P = exp2(S2 - LSE2), Z is dropout's factor (kernel_params.h's
 * Philox words), dV += P Z dO, dP = Z (dO.V) and dS = P (dP - D) dcap with dcap = 1 -
 * tanh^2(s / cap) (grad_element); tiles outside the window are skipped in both passes. The
 * sinks are carried by the LSE alone; with them a fourth launch, flash_bwd_dsinks, sums their
 * gradient per query head in a fixed order. ALiBi slopes and bias follow the dK/dV and dQ
 * launches' own tensors (src/op_launches.c). A kernel's BLOCK_R is always the rows its block owns (dK/dV
 * pass: keys, BLOCK_R = the plan's Bc) and BLOCK_C the tile it streams (there: query rows, the
 * plan's Br), so the forward's helpers and WG_SIZE rule serve both. Every block loops over its
 * grid's strides as the forward does. Varlen (-DSEQ with FA_SEQ_VARLEN): each work item takes its
 * sequence's lengths and starts (SEQ_PARAMS, fa_seq): Q, dO, dQ rows at token q_start + i, K, V,
 * dK, dV rows at k_start + j, LSE and D at fa_lse_index; the backward reads no pages.
 *
 * Two paths, chosen by the host's plan (-DMMA) as for the forward:
 * - MMA 0, CUDA cores (every architecture and dtype), the forward's thread mapping:
 *   THREADS_PER_ROW consecutive lanes share an owned row; lane t computes the score columns
 *   c = t, t + TPR, ... of that row (each a full dot product over d in order, as on OpenCL) and
 *   owns the head-dim elements x = t, t + TPR, ... of the row's gradient accumulators. A score
 *   row goes through shared memory between the two, so each output element sums its terms in
 *   the tile's column order, tile after tile, as the OpenCL kernels do. Shared memory:
 *     dK/dV: P^T, dS^T (2 Br x Bc f32); LSE, D, key count per query row (3 * Br * 4);
 *            K^T, V^T of its keys (2 Bc x d); Q^T, dO^T, Q, dO of a query tile (4 Br x d).
 *     dQ:    dS (Br x Bc f32); Q^T, dO^T (2 Br x d); K^T, V^T, K (3 Bc x d).
 *   Transposed tiles are read along the score columns, row-major ones along d: either way the
 *   lanes of a warp read consecutive words.
 * - MMA 1, tensor cores (sm_80+, f16/bf16, d a multiple of 16): one warp per 16 owned rows, the
 *   forward's fragments. The streamed tile is taken 16 columns at a time: S and dP of 16 x 16
 *   (two mma accumulator tiles each) never leave registers, P and dS are formed in place, and
 *   rounded to the storage type they are the A fragment of the 16-deep product that adds them
 *   into the f32 gradient accumulators (dQ += dS K; dV += P^T dO and dK += dS^T Q), as
 *   FlashAttention-2 does. Shared memory holds the row-major tiles only:
 *     dK/dV: LSE, D, key count per query row (3 * Br * 4); K, V of its keys; Q, dO of a tile.
 *     dQ:    Q, dO; K, V.
 *
 * This file follows flash_fwd.cu in one program and uses its types and helpers (store_t, to_f32,
 * to_store, load_tile, row_lanes, row_sum, keys_to_visit, and the mma fragment helpers); alone
 * it includes it (compile with -I kernels_cu -I src).
 */
#ifndef FA_FLASH_FWD_CU
#include "flash_fwd.cu"
#endif

#define LOG2E 1.44269504088896340736f

/* ---- shared by both paths ------------------------------------------------------------------ */

/* The log2-unit LSE a row uses: a row with no key (LSE -inf) gets 0; its columns are all masked,
 * so its P is 0 and it adds nothing. */
__device__ __forceinline__ float lse2_of(float lse)
{
    return lse == NEG_INF ? 0.0f : lse * LOG2E;
}

/* Row 0 of sequence seq in a [B, H, S, d] tensor t (offset and strides) for (b, head h): varlen,
 * the sequence's first token, q_start for the query side (Q, dO, dQ), k_start for the key side
 * (K, V, dK, dV); else row 0 of (b, h). The backward reads no pages. */
template <typename T>
__device__ __forceinline__ T *query_rows(T *t, i64 offset, i64 stride_b, i64 stride_h,
                                         i64 stride_s, const fa_seq &seq, i64 b, i64 h)
{
    return t + offset + b * stride_b + h * stride_h + seq.q_start * stride_s;
}

template <typename T>
__device__ __forceinline__ T *key_rows(T *t, i64 offset, i64 stride_b, i64 stride_h,
                                       i64 stride_s, const fa_seq &seq, i64 b, i64 h)
{
    return t + offset + b * stride_b + h * stride_h + seq.k_start * stride_s;
}

/* The first query row that sees key `key` (the mask and window rules of kernel_params.h,
 * inverted: j <= i' + window_right means i >= j - window_right - fa_diagonal). */
__device__ __forceinline__ i64 first_row_seeing(i64 key, const fa_kernel_params &p)
{
    i64 first = MASK == 0 ? 0 : key - fa_diagonal(&p, MASK == 2);
#if FEATURES & FA_FEATURE_WINDOW
    if (p.window_right >= 0)
        first = max(first, key - p.window_right - fa_diagonal(&p, 1));
#endif
    return max((i64)0, min(first, p.seqlen_q));
}

/* The end of the query rows that see key `key` (the window's left side inverted: j >= i' -
 * window_left means i <= j + window_left - fa_diagonal); Sq without a window. */
__device__ __forceinline__ i64 rows_seeing_end(i64 key, const fa_kernel_params &p)
{
#if FEATURES & FA_FEATURE_WINDOW
    if (p.window_left >= 0)
        return max((i64)0, min(key + p.window_left - fa_diagonal(&p, 1) + 1, p.seqlen_q));
#endif
    (void)key;
    return p.seqlen_q;
}

/* The LSE (log2 units), D and key count of query rows [r0, r0 + BLOCK_C) of head h (of the
 * sequence whose rows start at token q_start) into shared vectors; the key count is relative to
 * the block's first key k0 and clamped to [0, BLOCK_R] (so an int holds it for any Sk): the row
 * sees the block's keys c < keys_v[i]. Rows past Sq and rows with no key see none. */
__device__ void load_row_stats(float *lse2_v, float *delta_v, int *keys_v, const float *lse,
                               const float *delta, const fa_kernel_params &p, i64 b, i64 h,
                               i64 q_start, i64 r0, i64 k0)
{
    for (int i = (int)threadIdx.x; i < BLOCK_C; i += WG_SIZE) {
        i64 row = r0 + i, at = fa_lse_index(&p, b, h, q_start, row);
        float l = row < p.seqlen_q ? lse[at] : NEG_INF;
        i64 keys = l == NEG_INF ? 0 : fa_keys_end(&p, MASK, FEATURES, row) - k0;
        lse2_v[i] = lse2_of(l);
        delta_v[i] = row < p.seqlen_q ? delta[at] : 0.0f;
        keys_v[i] = (int)max((i64)0, min(keys, (i64)BLOCK_R));
    }
}

/* The dK/dV pass's query tile, both paths: rows [r0, r0 + BLOCK_C) of Q[b][h] and dO[b][h]
 * (q_head, do_head: the sequence's row 0, at token q_start) row-major into q_tile and do_tile
 * (zeros past Sq) and their stats (load_row_stats); then the barrier before any thread reads
 * them. */
__device__ void load_query_tile(store_t *q_tile, store_t *do_tile, float *lse2_v,
                                float *delta_v, int *keys_v, const store_t *q_head,
                                const store_t *do_head, const float *lse, const float *delta,
                                const fa_kernel_params &p, i64 b, i64 h, i64 q_start, i64 r0,
                                i64 k0)
{
    load_tile(q_tile, q_head, r0, p.seqlen_q, p.q_stride_s, BLOCK_C, false);
    load_tile(do_tile, do_head, r0, p.seqlen_q, p.do_stride_s, BLOCK_C, false);
    load_row_stats(lse2_v, delta_v, keys_v, lse, delta, p, b, h, q_start, r0, k0);
    __syncthreads();
}

/* ---- the score modifiers and dropout in the backward (FEATURES), both paths ---------------- */
/* The sinks are not among them: only the LSE carries them (flash_bwd_dsinks has their
 * gradient). Without features these helpers give what the plain kernels computed, bit for bit. */

/* One element (query row `row`, key `key`) of a score tile: dot = q.k, dp = dO.V, z the dropout
 * factor (1 without dropout), lse2 and d the row's LSE (log2 units) and D. S is recomputed as
 * the forward's (score_log2: softcap, ALiBi, bias); returns P Z (dV's weight) and sets
 * *ds = P (Z dP - D) dcap, dcap = d softcap(s) / ds (dQ's and dK's weight before the scale).
 * A key the row may not see (mask, window, past Sk, a row without keys) gives 0 and reads no
 * bias. */
__device__ __forceinline__ float grad_element(float dot, float dp, float z,
                                              const fa_kernel_params &p, const head_mods &hm,
                                              i64 row, i64 key, bool visible, float lse2,
                                              float d, float *ds)
{
    float dcap = 1.0f;
    const float pr =
        visible ? flush_tiny(exp2f(score_log2(dot, p, hm, row, key, &dcap) - lse2)) : 0.0f;
    *ds = pr * (z * dp - d) * dcap;
    return pr * z;
}

/* Dropout's factor of element (b, h, row, key) from its own Philox call (the words of its group
 * of four keys; the dK/dV pass's elements of one call are spread over threads); 1 without
 * dropout. */
__device__ __forceinline__ float dropout_z(const fa_kernel_params &p, i64 b, i64 h, i64 row,
                                           i64 key)
{
#if FEATURES & FA_FEATURE_DROPOUT
    fa_kp_u32 w[4];
    fa_dropout_words(&p, b, h, row, key, w);
    return dropout_factor(p, word_at(w, key & 3));
#else
    (void)p;
    (void)b;
    (void)h;
    (void)row;
    (void)key;
    return 1.0f;
#endif
}

#if !MMA
/* ---- the CUDA-core path: THREADS_PER_ROW threads per owned row, f32 FMA ------------------- */

/* Score columns of one owned row per lane: keys (dQ pass) or query rows (dK/dV pass). */
#define COLS_PER_THREAD ((BLOCK_C + THREADS_PER_ROW - 1) / THREADS_PER_ROW)

/* Lane t's column i of a score row is c = t + i*TPR; false past BLOCK_C. */
__device__ __forceinline__ bool has_col(int t, int i)
{
    return BLOCK_C % THREADS_PER_ROW == 0 || t + i * THREADS_PER_ROW < BLOCK_C;
}

/* Lane t's element j of a head-dim row is x = t + j*TPR; false past d. */
__device__ __forceinline__ bool has_dim(int t, int j)
{
    return HEAD_DIM % THREADS_PER_ROW == 0 || t + j * THREADS_PER_ROW < HEAD_DIM;
}

/* out[i] = sum_x A[own][x] * B[c][x] for lane t's columns c = t + i*TPR, x in [0, d) in order:
 * a_col = A^T[0][own] (column `own` of a d x BLOCK_R tile, stride BLOCK_R), b_t = B^T (d x
 * BLOCK_C, stride BLOCK_C). S = Q K^T with (Q^T, K^T), dP = dO V^T with (dO^T, V^T), and their
 * transposes in the dK/dV pass with the roles swapped. */
__device__ __forceinline__ void row_dots(float out[COLS_PER_THREAD], const store_t *a_col,
                                         const store_t *b_t, int t)
{
#pragma unroll
    for (int i = 0; i < COLS_PER_THREAD; i++)
        out[i] = 0.0f;
    for (int x = 0; x < HEAD_DIM; x++) {
        float a = to_f32(a_col[x * BLOCK_R]);          /* A^T[x][own] */
        const store_t *b_row = b_t + x * BLOCK_C + t; /* B^T[x][t ..] */
#pragma unroll
        for (int i = 0; i < COLS_PER_THREAD; i++)
            if (has_col(t, i))
                out[i] += a * to_f32(b_row[i * THREADS_PER_ROW]); /* B^T[x][c] */
    }
}

/* acc[j] += sum_c w[c] * T[c][x] for lane t's elements x = t + j*TPR, c in [0, n) in order: w is
 * a score row of BLOCK_C floats, T a BLOCK_C x d tile in the storage type (dQ += dS K,
 * dK += dS^T Q, dV += P^T dO). */
__device__ __forceinline__ void accumulate_rows(float acc[DIMS_PER_THREAD], const float *w,
                                                const store_t *tile, int n, int t)
{
    for (int c = 0; c < n; c++) {
        float w_c = w[c];
        const store_t *t_row = tile + c * HEAD_DIM + t; /* T[c][t ..] */
#pragma unroll
        for (int j = 0; j < DIMS_PER_THREAD; j++)
            if (has_dim(t, j))
                acc[j] += w_c * to_f32(t_row[j * THREADS_PER_ROW]); /* T[c][x] */
    }
}

/* Writes mul * acc (lane t's elements of one gradient row) to a global row in the storage type,
 * rounding to nearest even. */
__device__ __forceinline__ void store_row_scaled(const float acc[DIMS_PER_THREAD], float mul,
                                                 store_t *dst, int t)
{
#pragma unroll
    for (int j = 0; j < DIMS_PER_THREAD; j++)
        if (t + j * THREADS_PER_ROW < HEAD_DIM)
            dst[t + j * THREADS_PER_ROW] = to_store(acc[j] * mul);
}

/* dQ = scale * dS K for one (query tile, head, batch) work item: thread (r, t) owns query row
 * r0 + r, its key columns c = t + i*TPR of S, dP, dS and its dQ elements x = t + j*TPR. */
__device__ void tile_bwd_dq_cuda_cores(const store_t *__restrict__ q,
                                       const store_t *__restrict__ k,
                                       const store_t *__restrict__ v,
                                       const float *__restrict__ lse,
                                       const store_t *__restrict__ d_o,
                                       const float *__restrict__ delta, store_t *__restrict__ dq,
                                       const modifier_args &mods, const fa_kernel_params &p,
                                       const fa_seq &seq, i64 tile, i64 h, i64 b, char *smem)
{
    float *s_tile = (float *)smem;                             /* P, then dS: Br x Bc f32 */
    store_t *q_tile = (store_t *)(s_tile + BLOCK_R * BLOCK_C); /* Q^T:  d x Br */
    store_t *do_tile = q_tile + HEAD_DIM * BLOCK_R;            /* dO^T: d x Br */
    store_t *kt_tile = do_tile + HEAD_DIM * BLOCK_R;           /* K^T:  d x Bc */
    store_t *vt_tile = kt_tile + HEAD_DIM * BLOCK_C;           /* V^T:  d x Bc */
    store_t *k_tile = vt_tile + HEAD_DIM * BLOCK_C;            /* K:    Bc x d */

    const int r = (int)threadIdx.x / THREADS_PER_ROW, t = (int)threadIdx.x % THREADS_PER_ROW;
    const unsigned lanes = row_lanes();
    const i64 r0 = tile * BLOCK_R, row = r0 + r;
    const i64 h_kv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    const i64 sq = p.seqlen_q, sk = p.seqlen_k;
    const store_t *k_head =
        key_rows(k, p.k_offset, p.k_stride_b, p.k_stride_h, p.k_stride_s, seq, b, h_kv);
    const store_t *v_head =
        key_rows(v, p.v_offset, p.v_stride_b, p.v_stride_h, p.v_stride_s, seq, b, h_kv);
    float *s_row = s_tile + r * BLOCK_C; /* row r of Z (dropout), then dS */
    const head_mods hm = head_mods_of(mods, p, b, h);

    /* Load the Q and dO tiles (rows past Sq are zeros; their results are never written). */
    load_q_tile(q_tile, q, p, b, h, seq.q_start, r0, true);
    load_tile(do_tile,
              query_rows(d_o, p.do_offset, p.do_stride_b, p.do_stride_h, p.do_stride_s, seq, b, h),
              r0, sq, p.do_stride_s, BLOCK_R, true);
    const i64 at = fa_lse_index(&p, b, h, seq.q_start, row); /* this row in LSE and D */
    const float lse_row = row < sq ? lse[at] : NEG_INF;
    const float lse2 = lse2_of(lse_row), delta_row = row < sq ? delta[at] : 0.0f;
    /* Keys [row_begin, row_keys) of this row count (mask and window); none for a row with no
     * key or past Sq. */
    const i64 row_begin = fa_keys_begin(&p, FEATURES, row);
    const i64 row_keys = lse_row == NEG_INF ? 0 : fa_keys_end(&p, MASK, FEATURES, row);
    const i64 kv_begin = keys_to_skip(p, r0), kv_end = keys_to_visit(p, r0);

    float acc[DIMS_PER_THREAD]; /* dQ[r][t + j*TPR] / scale, f32 */
#pragma unroll
    for (int j = 0; j < DIMS_PER_THREAD; j++)
        acc[j] = 0.0f;

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc (tiles outside
     * the window skipped). */
    for (i64 k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        __syncthreads(); /* the previous tiles are no longer read */
        load_tile(kt_tile, k_head, k0, sk, p.k_stride_s, BLOCK_C, true);
        load_tile(vt_tile, v_head, k0, sk, p.v_stride_s, BLOCK_C, true);
        load_tile(k_tile, k_head, k0, sk, p.k_stride_s, BLOCK_C, false);
        __syncthreads();

        /* S = Q K^T and dP = dO V^T, of the lane's keys; with dropout, Z dP: Z of the row's
         * keys first, into s_row, the forward's draw: lane t the Philox words of the key groups
         * 4G .. 4G+3 (G = k0/4 + t, + TPR, ...) of this tile, one call per 4 keys. */
#if FEATURES & FA_FEATURE_DROPOUT
        for (i64 grp = (k0 >> 2) + t; grp * 4 < k0 + BLOCK_C; grp += THREADS_PER_ROW) {
            fa_kp_u32 w[4];
            fa_dropout_words(&p, b, h, row, grp * 4, w);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 c = grp * 4 + e - k0;
                if (c >= 0 && c < BLOCK_C)
                    s_row[c] = dropout_factor(p, w[e]);
            }
        }
        __syncwarp(lanes); /* the row's Z is visible to all its lanes */
#endif
        float s[COLS_PER_THREAD], dp[COLS_PER_THREAD];
        row_dots(s, q_tile + r, kt_tile, t);
        row_dots(dp, do_tile + r, vt_tile, t);

        /* The modifiers (softcap, ALiBi, bias), the mask (keys outside [row_begin, row_keys):
         * after the row's diagonal, outside the window, past Sk, all of a row without keys get
         * P = 0), P = exp2(S - LSE2) and dS = P (Z dP - D) dcap into s_row (each lane its own
         * columns). */
#pragma unroll
        for (int i = 0; i < COLS_PER_THREAD; i++) {
            int c = t + i * THREADS_PER_ROW;
            if (!has_col(t, i))
                continue;
            const i64 key = k0 + c;
            const float z = (FEATURES & FA_FEATURE_DROPOUT) ? s_row[c] : 1.0f;
            float ds;
            grad_element(s[i], dp[i], z, p, hm, row, key, key >= row_begin && key < row_keys,
                         lse2, delta_row, &ds);
            s_row[c] = ds;
        }
        __syncwarp(lanes); /* the row's dS is visible to all its lanes */

        /* dQ += dS K over the keys that exist. */
        accumulate_rows(acc, s_row, k_tile, (int)min((i64)BLOCK_C, sk - k0), t);
    }

    /* dQ = scale * acc in the storage type. */
    if (row < sq)
        store_row_scaled(acc, p.scale,
                         query_rows(dq, p.dq_offset, p.dq_stride_b, p.dq_stride_h,
                                    p.dq_stride_s, seq, b, h) + row * p.dq_stride_s,
                         t);
}

/* dK = scale * dS^T Q and dV = P^T dO for one (key tile, K/V head, batch) work item: thread
 * (c, t) owns key k0 + c, its query columns r = t + i*TPR of S^T, dP^T, P^T, dS^T and its dK,
 * dV elements x = t + j*TPR. */
__device__ void tile_bwd_dkdv_cuda_cores(const store_t *__restrict__ q,
                                         const store_t *__restrict__ k,
                                         const store_t *__restrict__ v,
                                         const float *__restrict__ lse,
                                         const store_t *__restrict__ d_o,
                                         const float *__restrict__ delta,
                                         store_t *__restrict__ dk, store_t *__restrict__ dv,
                                         const modifier_args &mods, const fa_kernel_params &p,
                                         const fa_seq &seq, i64 tile, i64 h_kv, i64 b,
                                         char *smem)
{
    float *pt_tile = (float *)smem;                /* P^T:  (own keys) x (query tile) */
    float *dst_tile = pt_tile + BLOCK_R * BLOCK_C; /* dS^T: (own keys) x (query tile) */
    float *lse2_v = dst_tile + BLOCK_R * BLOCK_C;  /* per query row of the tile */
    float *delta_v = lse2_v + BLOCK_C;
    int *keys_v = (int *)(delta_v + BLOCK_C);
    store_t *kt_tile = (store_t *)(keys_v + BLOCK_C); /* K^T:  d x (own keys) */
    store_t *vt_tile = kt_tile + HEAD_DIM * BLOCK_R;  /* V^T:  d x (own keys) */
    store_t *qt_tile = vt_tile + HEAD_DIM * BLOCK_R;  /* Q^T:  d x (query tile) */
    store_t *dot_tile = qt_tile + HEAD_DIM * BLOCK_C; /* dO^T: d x (query tile) */
    store_t *q_tile = dot_tile + HEAD_DIM * BLOCK_C;  /* Q:    (query tile) x d */
    store_t *do_tile = q_tile + BLOCK_C * HEAD_DIM;   /* dO:   (query tile) x d */

    const int c = (int)threadIdx.x / THREADS_PER_ROW, t = (int)threadIdx.x % THREADS_PER_ROW;
    const unsigned lanes = row_lanes();
    const i64 k0 = tile * BLOCK_R, key = k0 + c;
    const i64 group = p.heads_q / p.heads_kv, sq = p.seqlen_q, sk = p.seqlen_k;
    float *pt_row = pt_tile + c * BLOCK_C, *dst_row = dst_tile + c * BLOCK_C;

    /* Load the block's K and V tiles, transposed (keys past Sk are zeros, never written). */
    __syncthreads(); /* the previous work item no longer reads the tiles */
    load_tile(kt_tile, key_rows(k, p.k_offset, p.k_stride_b, p.k_stride_h, p.k_stride_s, seq, b,
                                h_kv),
              k0, sk, p.k_stride_s, BLOCK_R, true);
    load_tile(vt_tile, key_rows(v, p.v_offset, p.v_stride_b, p.v_stride_h, p.v_stride_s, seq, b,
                                h_kv),
              k0, sk, p.v_stride_s, BLOCK_R, true);
    float acc_k[DIMS_PER_THREAD], acc_v[DIMS_PER_THREAD]; /* dK / scale and dV, f32 */
#pragma unroll
    for (int j = 0; j < DIMS_PER_THREAD; j++)
        acc_k[j] = acc_v[j] = 0.0f;
    /* Causal and window: rows before `first` or from `last_end` on see none of the keys. */
    const i64 first = first_row_seeing(k0, p), last_end = rows_seeing_end(k0 + BLOCK_R - 1, p);

    /* Loop over the group's query heads, then their query tiles [r0, r0 + Br), in order. */
    for (i64 h = h_kv * group; h < (h_kv + 1) * group; h++) {
        const store_t *q_head = query_rows(q, p.q_offset, p.q_stride_b, p.q_stride_h,
                                           p.q_stride_s, seq, b, h);
        const store_t *do_head = query_rows(d_o, p.do_offset, p.do_stride_b, p.do_stride_h,
                                            p.do_stride_s, seq, b, h);
        const head_mods hm = head_mods_of(mods, p, b, h);
        for (i64 r0 = first; r0 < last_end; r0 += BLOCK_C) {
            /* Load the query tile: Q and dO (transposed and as is), the rows' LSE, D and keys. */
            __syncthreads(); /* the previous query tile is no longer read */
            load_tile(qt_tile, q_head, r0, sq, p.q_stride_s, BLOCK_C, true);
            load_tile(dot_tile, do_head, r0, sq, p.do_stride_s, BLOCK_C, true);
            load_query_tile(q_tile, do_tile, lse2_v, delta_v, keys_v, q_head, do_head, lse,
                            delta, p, b, h, seq.q_start, r0, k0);

            /* S^T = K Q^T and dP^T = V dO^T, of the lane's rows; with dropout, Z dP^T (Z from
             * one Philox call per element, in the loop below). */
            float s[COLS_PER_THREAD], dp[COLS_PER_THREAD];
            row_dots(s, kt_tile + c, qt_tile, t);
            row_dots(dp, vt_tile + c, dot_tile, t);

            /* The modifiers, the mask (key c >= the row's count, or before its window), P^T and
             * dS^T = P^T (Z dP^T - D) dcap; with dropout, P^T Z. */
#pragma unroll
            for (int i = 0; i < COLS_PER_THREAD; i++) {
                int r = t + i * THREADS_PER_ROW;
                if (!has_col(t, i))
                    continue;
                const i64 row = r0 + r;
                const bool visible = c < keys_v[r] && key >= fa_keys_begin(&p, FEATURES, row);
                const float z = visible ? dropout_z(p, b, h, row, key) : 1.0f;
                float ds;
                pt_row[r] = grad_element(s[i], dp[i], z, p, hm, row, key, visible, lse2_v[r],
                                         delta_v[r], &ds);
                dst_row[r] = ds;
            }
            __syncwarp(lanes); /* the key's P^T and dS^T rows are visible to all its lanes */

            /* dK += dS^T Q and dV += P^T dO over the query rows that exist. */
            int rows = (int)min((i64)BLOCK_C, sq - r0);
            accumulate_rows(acc_k, dst_row, q_tile, rows, t);
            accumulate_rows(acc_v, pt_row, do_tile, rows, t);
        }
    }

    /* dK = scale * acc_k and dV = acc_v in the storage type (varlen: at token k_start + key). */
    if (key >= sk)
        return;
    store_row_scaled(acc_k, p.scale,
                     key_rows(dk, p.dk_offset, p.dk_stride_b, p.dk_stride_h, p.dk_stride_s, seq,
                              b, h_kv) + key * p.dk_stride_s,
                     t);
    store_row_scaled(acc_v, 1.0f,
                     key_rows(dv, p.dv_offset, p.dv_stride_b, p.dv_stride_h, p.dv_stride_s, seq,
                              b, h_kv) + key * p.dv_stride_s,
                     t);
}

#else
/* ---- the tensor-core path: mma.sync m16n8k16, f16/bf16 in, f32 accumulate (sm_80+) ------- */

/* A 16 x 16 block of A B^T, as two 16 x 8 accumulator tiles: out[j][e] = sum_x
 * A[row0 + g + 8i][x] * B[8j + 2t + e % 2][x], i = e / 2, x in [0, d) by 16-wide slices. a_tile
 * and b_rows are row-major (rows x d) tiles in shared memory, b_rows at the block's first row;
 * a B row gives a B-fragment column, as K does for S = Q K^T in the forward. S = Q K^T and
 * dP = dO V^T here; S^T = K Q^T and dP^T = V dO^T in the dK/dV pass. */
__device__ __forceinline__ void warp_scores(float out[2][4], const store_t *a_tile, int row0,
                                            const store_t *b_rows, int g, int t)
{
#pragma unroll
    for (int j = 0; j < 2; j++)
        out[j][0] = out[j][1] = out[j][2] = out[j][3] = 0.0f;
#pragma unroll
    for (int x0 = 0; x0 < HEAD_DIM; x0 += 16) {
        /* a = A rows g, g+8 x cols 2t, 2t+1, 2t+8, 2t+9 of the slice */
        const store_t *a_src = a_tile + (row0 + g) * HEAD_DIM + x0 + 2 * t;
        unsigned a_frag[4] = {load_row_pair(a_src), load_row_pair(a_src + 8 * HEAD_DIM),
                              load_row_pair(a_src + 8), load_row_pair(a_src + 8 * HEAD_DIM + 8)};
#pragma unroll
        for (int j = 0; j < 2; j++) {
            /* b = B row 8j+g x cols 2t, 2t+1 and 2t+8, 2t+9 of the slice */
            const store_t *b_src = b_rows + (8 * j + g) * HEAD_DIM + x0 + 2 * t;
            unsigned b_frag[2] = {load_row_pair(b_src), load_row_pair(b_src + 8)};
            mma_m16n8k16(out[j], a_frag, b_frag);
        }
    }
}

/* The A fragment of a 16 x 16 block held as two accumulator tiles (the forward's P V step):
 * columns 0..7 from w[0], 8..15 from w[1], rounded to the storage type. */
__device__ __forceinline__ void block_as_a(const float w[2][4], unsigned a_frag[4])
{
    a_frag[0] = pack_f32_pair(w[0][0], w[0][1]);
    a_frag[1] = pack_f32_pair(w[0][2], w[0][3]);
    a_frag[2] = pack_f32_pair(w[1][0], w[1][1]);
    a_frag[3] = pack_f32_pair(w[1][2], w[1][3]);
}

/* acc[n] += W T[c0 .. c0+15][8n .. 8n+7] for every 8-wide slice n of d: W is a 16 x 16 block as
 * an A fragment, T a row-major (rows x d) tile whose rows c0 + c are the product's k index
 * (B[c][x] = T[c0 + c][8n + x]: a column pair of T, as V in the forward's P V). */
__device__ __forceinline__ void accumulate_block(float acc[O_TILES][4], const unsigned a_frag[4],
                                                 const store_t *t_rows, int g, int t)
{
#pragma unroll
    for (int n = 0; n < O_TILES; n++) {
        /* T[2t][8n + g]: b = T rows 2t, 2t+1 and 2t+8, 2t+9 x col g */
        const store_t *src = t_rows + 2 * t * HEAD_DIM + n * 8 + g;
        unsigned b_frag[2] = {load_col_pair(src), load_col_pair(src + 8 * HEAD_DIM)};
        mma_m16n8k16(acc[n], a_frag, b_frag);
    }
}

/* acc += W T as accumulate_block, for W = dS: f16 rounds |dS| past 65504 to inf where f32 and
 * the golden stay finite (P <= 1 never gets there). When the warp's largest |W| passes 2^15,
 * W and acc are scaled by 2^-s for the product and acc back by 2^s: powers of two, so exact,
 * and the block's A fragment stays finite. bf16 has f32's range: the plain product. */
__device__ __forceinline__ void accumulate_ds_block(float acc[O_TILES][4], float w[2][4],
                                                    const store_t *t_rows, int g, int t)
{
    unsigned a_frag[4];
#if DTYPE == 1
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            m = fmaxf(m, fabsf(w[j][e]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) /* the warp's largest: the same s in every lane */
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off, 32));
    if (m > 32768.0f && m <= 3.0e38f) {
        int e2 = 0;
        frexpf(m, &e2); /* m < 2^e2, so m 2^(15 - e2) < 2^15 */
        const float down = ldexpf(1.0f, 15 - e2), up = ldexpf(1.0f, e2 - 15);
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                w[j][e] *= down;
#pragma unroll
        for (int n = 0; n < O_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[n][e] *= down;
        block_as_a(w, a_frag);
        accumulate_block(acc, a_frag, t_rows, g, t);
#pragma unroll
        for (int n = 0; n < O_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[n][e] *= up;
        return;
    }
#endif
    block_as_a(w, a_frag);
    accumulate_block(acc, a_frag, t_rows, g, t);
}

/* Writes mul * acc, rows i = 0, 1 (g, g+8) of a warp's 16 x d accumulators, to dst[i] (row
 * starts in global memory; NULL: the row does not exist), elements 8n + 2t, 8n + 2t + 1. */
__device__ __forceinline__ void store_block_scaled(const float acc[O_TILES][4], float mul,
                                                   store_t *const dst[2], int t)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!dst[i])
            continue;
#pragma unroll
        for (int n = 0; n < O_TILES; n++) {
            dst[i][n * 8 + 2 * t] = to_store(acc[n][2 * i] * mul);
            dst[i][n * 8 + 2 * t + 1] = to_store(acc[n][2 * i + 1] * mul);
        }
    }
}


/* One (query tile, head, batch) work item: warp w owns query rows warp_row0 = 16w .. 16w+15;
 * each lane holds rows g and g+8 of them (i = 0, 1) and, in a 16 x 8 tile, columns 2t, 2t+1. */
__device__ void tile_bwd_dq_mma(const store_t *__restrict__ q, const store_t *__restrict__ k,
                                const store_t *__restrict__ v, const float *__restrict__ lse,
                                const store_t *__restrict__ d_o, const float *__restrict__ delta,
                                store_t *__restrict__ dq, const modifier_args &mods,
                                const fa_kernel_params &p, const fa_seq &seq, i64 tile, i64 h,
                                i64 b, char *smem)
{
    store_t *q_tile = (store_t *)smem;              /* Q:  Br x d, row-major */
    store_t *do_tile = q_tile + BLOCK_R * HEAD_DIM; /* dO: Br x d */
    store_t *k_tile = do_tile + BLOCK_R * HEAD_DIM; /* K:  Bc x d */
    store_t *v_tile = k_tile + BLOCK_C * HEAD_DIM;  /* V:  Bc x d */

    const int lane = (int)threadIdx.x % 32, warp_row0 = (int)threadIdx.x / 32 * 16;
    const int g = lane / 4, t = lane % 4; /* PTX's groupID and threadID_in_group */
    const i64 r0 = tile * BLOCK_R, sq = p.seqlen_q;
    const i64 h_kv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    /* The sequence's keys of K[b][h_kv] and V[b][h_kv] (never paged here). */
    const kv_rows kv = {
        key_rows(k, p.k_offset, p.k_stride_b, p.k_stride_h, p.k_stride_s, seq, b, h_kv),
        key_rows(v, p.v_offset, p.v_stride_b, p.v_stride_h, p.v_stride_s, seq, b, h_kv),
        nullptr, b};

    /* Load the Q and dO tiles (rows past Sq are zeros; their results are never written). */
    load_q_tile(q_tile, q, p, b, h, seq.q_start, r0, false);
    load_tile(do_tile,
              query_rows(d_o, p.do_offset, p.do_stride_b, p.do_stride_h, p.do_stride_s, seq, b, h),
              r0, sq, p.do_stride_s, BLOCK_R, false);
    const head_mods hm = head_mods_of(mods, p, b, h);
    const i64 rows[2] = {r0 + warp_row0 + g, r0 + warp_row0 + g + 8}; /* this lane's rows */
    float lse2[2], delta_row[2];
    /* this lane's rows see keys [row_begin, row_keys) (mask and window): none without keys or
     * past Sq */
    i64 row_begin[2], row_keys[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const i64 row = rows[i], at = fa_lse_index(&p, b, h, seq.q_start, row);
        const float l = row < sq ? lse[at] : NEG_INF;
        lse2[i] = lse2_of(l);
        delta_row[i] = row < sq ? delta[at] : 0.0f;
        row_begin[i] = fa_keys_begin(&p, FEATURES, row);
        row_keys[i] = l == NEG_INF ? 0 : fa_keys_end(&p, MASK, FEATURES, row);
    }
    const i64 kv_begin = keys_to_skip(p, r0), kv_end = keys_to_visit(p, r0);

    float acc[O_TILES][4]; /* dQ / scale: rows g, g+8 x dims 8n+2t, 8n+2t+1, f32 */
#pragma unroll
    for (int n = 0; n < O_TILES; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc (tiles outside
     * the window skipped), then 16 keys c0 .. c0+15 at a time. */
    for (i64 k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        load_kv_tiles(k_tile, v_tile, kv, p, k0, false);
#pragma unroll 1
        for (int c0 = 0; c0 < BLOCK_C; c0 += 16) {
            /* S = Q K^T and dP = dO V^T of the warp's rows x keys c0 .. c0+15; s[j][e] is
             * key c = c0 + 8j + 2t + e % 2 of row g + 8 (e / 2). */
            float s[2][4], dp[2][4];
            warp_scores(s, q_tile, warp_row0, k_tile + c0 * HEAD_DIM, g, t);
            warp_scores(dp, do_tile, warp_row0, v_tile + c0 * HEAD_DIM, g, t);
            /* Dropout's Z of the block (1 without dropout). */
            float z[2][4] = {{1.0f, 1.0f, 1.0f, 1.0f}, {1.0f, 1.0f, 1.0f, 1.0f}};
#if FEATURES & FA_FEATURE_DROPOUT
#pragma unroll
            for (int j = 0; j < 2; j++) /* the 16 keys k0 + c0 .. +15: two 8-key blocks */
                mma_dropout_factors(p, b, h, rows, k0 + c0 + 8 * j, t, row_lanes(), z[j]);
#endif
            /* The modifiers, the mask (keys outside [row_begin, row_keys) get P = 0), P =
             * exp2(S - LSE2) and dS = P (Z dP - D) dcap in place. */
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e / 2;
                    const i64 key = k0 + c0 + 8 * j + 2 * t + (e & 1);
                    float ds;
                    grad_element(s[j][e], dp[j][e], z[j][e], p, hm, rows[i], key,
                                 key >= row_begin[i] && key < row_keys[i], lse2[i],
                                 delta_row[i], &ds);
                    s[j][e] = ds;
                }
            /* dQ += dS K[c0 .. c0+15] (K rows past Sk are zeros, their dS 0). */
            accumulate_ds_block(acc, s, k_tile + c0 * HEAD_DIM, g, t);
        }
    }

    /* dQ = scale * acc in the storage type. */
    store_t *dst[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const i64 row = rows[i];
        dst[i] = row < sq ? query_rows(dq, p.dq_offset, p.dq_stride_b, p.dq_stride_h,
                                       p.dq_stride_s, seq, b, h) +
                                row * p.dq_stride_s
                          : nullptr;
    }
    store_block_scaled(acc, p.scale, dst, t);
}

#if FEATURES & FA_FEATURE_DROPOUT
/* Dropout's factors z[j][e] of the dK/dV pass's 16 keys x 16 query rows block: element (j, e)
 * is key key0 + g + 8(e / 2) of query row row0 + 8j + 2t + e % 2. The four lanes of a key group
 * (keys key0 + 4(g/4) .. +3, lanes 4g + t for g % 4 = 0..3, same t) need the words of 8
 * (row, group) pairs: lane i = g % 4 draws pairs 2i and 2i + 1 (rows row0 + 8(i % 2) + 2t + a,
 * group + 8(i / 2), a = 0, 1), one Philox call per 4 keys, and the lanes swap words by xor
 * shuffles: from lane i ^ o, word i of its pair 2(i ^ o) + a. Selects, not indexing, pick the
 * words and the elements, so nothing goes to local memory. */
__device__ __forceinline__ void dkdv_dropout_factors(const fa_kernel_params &p, i64 b, i64 h,
                                                     i64 row0, i64 key0, int g, int t,
                                                     float z[2][4])
{
    const int i = g & 3;
    const i64 group0 = key0 + (g & ~3); /* the first key of this lane's group (keys g) */
    fa_kp_u32 w[2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
        fa_dropout_words(&p, b, h, row0 + 8 * (i & 1) + 2 * t + a, group0 + 8 * (i >> 1), w[a]);
#pragma unroll
    for (int o = 0; o < 4; o++)
#pragma unroll
        for (int a = 0; a < 2; a++) {
            const fa_kp_u32 give = word_at(w[a], i ^ o); /* word (i ^ o): lane i ^ o's key */
            const fa_kp_u32 got =
                o == 0 ? give
                       : (fa_kp_u32)__float_as_int(__shfl_xor_sync(
                             0xffffffffu, __int_as_float((int)give), 4 * o, 32));
            const int src = i ^ o; /* got is word i of pair 2 src + a: j = src % 2, key half
                                      src / 2 */
            const float f = dropout_factor(p, got);
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int half = 0; half < 2; half++)
                    if (src == 2 * half + j)
                        z[j][2 * half + a] = f;
        }
}
#endif

/* One (key tile, K/V head, batch) work item: warp w owns keys warp_key0 = 16w .. 16w+15 of the
 * tile; each lane holds keys g and g+8 of them (i = 0, 1) and, in a 16 x 8 tile, query columns
 * 2t, 2t+1. */
__device__ void tile_bwd_dkdv_mma(const store_t *__restrict__ q, const store_t *__restrict__ k,
                                  const store_t *__restrict__ v, const float *__restrict__ lse,
                                  const store_t *__restrict__ d_o,
                                  const float *__restrict__ delta, store_t *__restrict__ dk,
                                  store_t *__restrict__ dv, const modifier_args &mods,
                                  const fa_kernel_params &p, const fa_seq &seq, i64 tile,
                                  i64 h_kv, i64 b, char *smem)
{
    float *lse2_v = (float *)smem; /* per query row of the tile */
    float *delta_v = lse2_v + BLOCK_C;
    int *keys_v = (int *)(delta_v + BLOCK_C);
    store_t *k_tile = (store_t *)(keys_v + BLOCK_C); /* K:  (own keys) x d, row-major */
    store_t *v_tile = k_tile + BLOCK_R * HEAD_DIM;   /* V:  (own keys) x d */
    store_t *q_tile = v_tile + BLOCK_R * HEAD_DIM;   /* Q:  (query tile) x d */
    store_t *do_tile = q_tile + BLOCK_C * HEAD_DIM;  /* dO: (query tile) x d */

    const int lane = (int)threadIdx.x % 32, warp_key0 = (int)threadIdx.x / 32 * 16;
    const int g = lane / 4, t = lane % 4; /* PTX's groupID and threadID_in_group */
    const i64 k0 = tile * BLOCK_R;
    const i64 group = p.heads_q / p.heads_kv, sk = p.seqlen_k;

    /* Load the block's K and V tiles (keys past Sk are zeros, never written). */
    __syncthreads(); /* the previous work item no longer reads the tiles */
    load_tile(k_tile, key_rows(k, p.k_offset, p.k_stride_b, p.k_stride_h, p.k_stride_s, seq, b,
                               h_kv),
              k0, sk, p.k_stride_s, BLOCK_R, false);
    load_tile(v_tile, key_rows(v, p.v_offset, p.v_stride_b, p.v_stride_h, p.v_stride_s, seq, b,
                               h_kv),
              k0, sk, p.v_stride_s, BLOCK_R, false);
    float acc_k[O_TILES][4], acc_v[O_TILES][4]; /* dK / scale and dV: keys g, g+8 x dims */
#pragma unroll
    for (int n = 0; n < O_TILES; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc_k[n][e] = acc_v[n][e] = 0.0f;
    /* Causal and window: rows before `first` or from `last_end` on see none of the keys. */
    const i64 first = first_row_seeing(k0, p), last_end = rows_seeing_end(k0 + BLOCK_R - 1, p);

    /* Loop over the group's query heads, then their query tiles [r0, r0 + Br), in order, 16
     * query rows c0 .. c0+15 at a time. */
    for (i64 h = h_kv * group; h < (h_kv + 1) * group; h++) {
        const store_t *q_head = query_rows(q, p.q_offset, p.q_stride_b, p.q_stride_h,
                                           p.q_stride_s, seq, b, h);
        const store_t *do_head = query_rows(d_o, p.do_offset, p.do_stride_b, p.do_stride_h,
                                            p.do_stride_s, seq, b, h);
        const head_mods hm = head_mods_of(mods, p, b, h);
        for (i64 r0 = first; r0 < last_end; r0 += BLOCK_C) {
            /* Load the query tile: Q and dO, the rows' LSE, D and keys. */
            __syncthreads(); /* the previous query tile is no longer read */
            load_query_tile(q_tile, do_tile, lse2_v, delta_v, keys_v, q_head, do_head, lse,
                            delta, p, b, h, seq.q_start, r0, k0);
#pragma unroll 1
            for (int c0 = 0; c0 < BLOCK_C; c0 += 16) {
                /* S^T = K Q^T and dP^T = V dO^T of the warp's keys x query rows c0 .. c0+15;
                 * st[j][e] is query row r = c0 + 8j + 2t + e % 2 of key g + 8 (e / 2). */
                float st[2][4], dpt[2][4];
                warp_scores(st, k_tile, warp_key0, q_tile + c0 * HEAD_DIM, g, t);
                warp_scores(dpt, v_tile, warp_key0, do_tile + c0 * HEAD_DIM, g, t);
                /* Dropout's Z of the block (1 without dropout). */
                float z_block[2][4] = {{1.0f, 1.0f, 1.0f, 1.0f}, {1.0f, 1.0f, 1.0f, 1.0f}};
#if FEATURES & FA_FEATURE_DROPOUT
                dkdv_dropout_factors(p, b, h, r0 + c0, k0 + warp_key0, g, t, z_block);
#endif
                /* The modifiers, the mask (key >= the row's count, or before its window), P^T Z =
                 * exp2(S^T - LSE2) Z in st and dS^T = P^T (Z dP^T - D) dcap in dpt. */
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int c = warp_key0 + g + 8 * (e / 2), r = c0 + 8 * j + 2 * t + (e & 1);
                        const i64 key = k0 + c, row = r0 + r;
                        const bool visible =
                            c < keys_v[r] && key >= fa_keys_begin(&p, FEATURES, row);
                        const float z = visible ? z_block[j][e] : 1.0f;
                        float ds;
                        st[j][e] = grad_element(st[j][e], dpt[j][e], z, p, hm, row, key, visible,
                                                lse2_v[r], delta_v[r], &ds);
                        dpt[j][e] = ds;
                    }
                /* dV += P^T dO[c0 ..] and dK += dS^T Q[c0 ..] (rows past Sq are zeros). */
                unsigned a_frag[4];
                block_as_a(st, a_frag);
                accumulate_block(acc_v, a_frag, do_tile + c0 * HEAD_DIM, g, t);
                accumulate_ds_block(acc_k, dpt, q_tile + c0 * HEAD_DIM, g, t);
            }
        }
    }

    /* dK = scale * acc_k and dV = acc_v in the storage type, keys that exist (varlen: at
     * token k_start + key). */
    store_t *dk_head = key_rows(dk, p.dk_offset, p.dk_stride_b, p.dk_stride_h, p.dk_stride_s,
                                seq, b, h_kv);
    store_t *dv_head = key_rows(dv, p.dv_offset, p.dv_stride_b, p.dv_stride_h, p.dv_stride_s,
                                seq, b, h_kv);
    store_t *dst_k[2], *dst_v[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const i64 key = k0 + warp_key0 + g + 8 * i;
        dst_k[i] = key < sk ? dk_head + key * p.dk_stride_s : nullptr;
        dst_v[i] = key < sk ? dv_head + key * p.dv_stride_s : nullptr;
    }
    store_block_scaled(acc_k, p.scale, dst_k, t);
    store_block_scaled(acc_v, 1.0f, dst_v, t);
}
#endif

/* ---- the entry points: grid-stride loops over the work items ---------------------------- */
/* Each takes its sequence's params (SEQ_PARAMS: varlen's own lengths); a tile that starts past
 * the sequence's rows (dQ) or keys (dK/dV) has nothing to do, and the whole block skips it
 * before any barrier. */

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_bwd_dq(const store_t *__restrict__ q, const store_t *__restrict__ k,
             const store_t *__restrict__ v, const float *__restrict__ lse,
             const store_t *__restrict__ d_o, const float *__restrict__ delta,
             store_t *__restrict__ dq, ALIBI_PARAM BIAS_PARAM SEQ_PARAM
             const fa_kernel_params p_in)
{
    extern __shared__ __align__(16) char smem[];
    const modifier_args mods = {ALIBI_ARG, BIAS_ARG, nullptr};
    const seq_args seqs = SEQ_ARGS;
    for (i64 b = blockIdx.z; b < p_in.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p_in, b);
        SEQ_PARAMS(p, p_in, s);
        for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y)
            for (i64 tile = blockIdx.x; tile * BLOCK_R < p.seqlen_q; tile += gridDim.x)
#if MMA
                tile_bwd_dq_mma(q, k, v, lse, d_o, delta, dq, mods, p, s, tile, h, b, smem);
#else
                tile_bwd_dq_cuda_cores(q, k, v, lse, d_o, delta, dq, mods, p, s, tile, h, b,
                                       smem);
#endif
    }
}

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_bwd_dkdv(const store_t *__restrict__ q, const store_t *__restrict__ k,
               const store_t *__restrict__ v, const float *__restrict__ lse,
               const store_t *__restrict__ d_o, const float *__restrict__ delta,
               store_t *__restrict__ dk, store_t *__restrict__ dv, ALIBI_PARAM BIAS_PARAM
               SEQ_PARAM const fa_kernel_params p_in)
{
    extern __shared__ __align__(16) char smem[];
    const modifier_args mods = {ALIBI_ARG, BIAS_ARG, nullptr};
    const seq_args seqs = SEQ_ARGS;
    for (i64 b = blockIdx.z; b < p_in.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p_in, b);
        SEQ_PARAMS(p, p_in, s);
        for (i64 h_kv = blockIdx.y; h_kv < p.heads_kv; h_kv += gridDim.y)
            for (i64 tile = blockIdx.x; tile * BLOCK_R < p.seqlen_k; tile += gridDim.x)
#if MMA
                tile_bwd_dkdv_mma(q, k, v, lse, d_o, delta, dk, dv, mods, p, s, tile, h_kv, b,
                                  smem);
#else
                tile_bwd_dkdv_cuda_cores(q, k, v, lse, d_o, delta, dk, dv, mods, p, s, tile,
                                         h_kv, b, smem);
#endif
    }
}
