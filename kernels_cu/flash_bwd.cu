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
 * Block-sparse (FEATURES & FA_FEATURE_BLOCK_SPARSE, flash_kv.cu's helpers): the dQ pass walks
 * its query tile's forward lists (kv_num_blocks, kv_indices) as the forward does; the dK/dV
 * pass walks its key tile's transposed lists (q_num_blocks, q_indices), visiting only the query
 * tiles of query blocks that list its keys; both mask elements of unlisted blocks (P = 0).
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
 * - MMA 1, tensor cores (sm_80+, f16/bf16, d a multiple of 16; flash_bwd_mma.cu, which NVRTC
 *   compiles after this file): one warp per 16 owned rows, the forward's fragments. The
 *   streamed tile is taken 16 columns at a time: S and dP of 16 x 16 (two mma accumulator
 *   tiles each) never leave registers, P and dS are formed in place, and
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
#define FA_FLASH_BWD_CU /* flash_bwd_mma.cu builds on this file */

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

/* The dK/dV pass's first query tile: from the first row that sees key k0; block-sparse, the
 * tile of BLOCK_C rows holding it, so the query tiles start on multiples of BLOCK_C as the
 * lists' blocks do (rows before the first are masked element by element). */
__device__ __forceinline__ i64 first_tile_row(i64 k0, const fa_kernel_params &p)
{
    const i64 first = first_row_seeing(k0, p);
    return BLOCK_SPARSE ? first / BLOCK_C * BLOCK_C : first;
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
                                       const modifier_args &mods, const block_lists &lists,
                                       const fa_kernel_params &p, const fa_seq &seq, i64 tile,
                                       i64 h, i64 b, char *smem)
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
     * the window skipped; block-sparse, only the tiles of listed key blocks). */
    const list_dir dir = forward_lists(p);
    const i64 r_end = min(r0 + BLOCK_R, sq); /* the tile's rows that exist */
    for (i64 k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, kv_begin, BLOCK_C, kv_end);
         k0 < kv_end;
         k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, k0 + BLOCK_C, BLOCK_C, kv_end)) {
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
         * after the row's diagonal, outside the window, past Sk, all of a row without keys,
         * and keys of unlisted blocks get P = 0; a full block tests the key count only), P =
         * exp2(S - LSE2) and dS = P (Z dP - D) dcap into s_row (each lane its own columns). */
        const row_blocks rb =
            row_blocks_of(lists, p, dir, b, h, row, sq, k0, (int)min((i64)BLOCK_C, sk - k0));
#pragma unroll
        for (int i = 0; i < COLS_PER_THREAD; i++) {
            int c = t + i * THREADS_PER_ROW;
            if (!has_col(t, i))
                continue;
            const i64 key = k0 + c;
            const float z = (FEATURES & FA_FEATURE_DROPOUT) ? s_row[c] : 1.0f;
            float ds;
            grad_element(s[i], dp[i], z, p, hm, row, key,
                         key < row_keys &&
                             (rb.full || (key >= row_begin && block_listed_at(rb, c))),
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
                                         const modifier_args &mods, const block_lists &lists,
                                         const fa_kernel_params &p, const fa_seq &seq, i64 tile,
                                         i64 h_kv, i64 b, char *smem)
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
    const i64 first = first_tile_row(k0, p), last_end = rows_seeing_end(k0 + BLOCK_R - 1, p);
    /* Block-sparse: the transposed lists, own keys [k0, k_end). */
    const list_dir dir = transposed_lists(p);
    const i64 k_end = min(k0 + BLOCK_R, sk);

    /* Loop over the group's query heads, then their query tiles [r0, r0 + Br), in order. */
    for (i64 h = h_kv * group; h < (h_kv + 1) * group; h++) {
        const store_t *q_head = query_rows(q, p.q_offset, p.q_stride_b, p.q_stride_h,
                                           p.q_stride_s, seq, b, h);
        const store_t *do_head = query_rows(d_o, p.do_offset, p.do_stride_b, p.do_stride_h,
                                            p.do_stride_s, seq, b, h);
        const head_mods hm = head_mods_of(mods, p, b, h);
        for (i64 r0 = next_listed_tile(lists, p, dir, b, h, k0, k_end, first, BLOCK_C, last_end);
             r0 < last_end;
             r0 = next_listed_tile(lists, p, dir, b, h, k0, k_end, r0 + BLOCK_C, BLOCK_C,
                                   last_end)) {
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

            /* The modifiers, the mask (key c >= the row's count, or before its window, or a row
             * of a query block the key's block does not list; a full block tests the count
             * only), P^T and dS^T = P^T (Z dP^T - D) dcap; with dropout, P^T Z. */
            const row_blocks rb =
                row_blocks_of(lists, p, dir, b, h, key, sk, r0, (int)min((i64)BLOCK_C, sq - r0));
#pragma unroll
            for (int i = 0; i < COLS_PER_THREAD; i++) {
                int r = t + i * THREADS_PER_ROW;
                if (!has_col(t, i))
                    continue;
                const i64 row = r0 + r;
                const bool visible =
                    c < keys_v[r] && (rb.full || (key >= fa_keys_begin(&p, FEATURES, row) &&
                                                  block_listed_at(rb, r)));
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
/* The tensor-core path's work items (flash_bwd_mma.cu, after this file in the program). */
__device__ void tile_bwd_dq_mma(const store_t *__restrict__ q, const store_t *__restrict__ k,
                                const store_t *__restrict__ v, const float *__restrict__ lse,
                                const store_t *__restrict__ d_o, const float *__restrict__ delta,
                                store_t *__restrict__ dq, const modifier_args &mods,
                                const block_lists &lists, const fa_kernel_params &p,
                                const fa_seq &seq, i64 tile, i64 h, i64 b, char *smem);
__device__ void tile_bwd_dkdv_mma(const store_t *__restrict__ q, const store_t *__restrict__ k,
                                  const store_t *__restrict__ v, const float *__restrict__ lse,
                                  const store_t *__restrict__ d_o,
                                  const float *__restrict__ delta, store_t *__restrict__ dk,
                                  store_t *__restrict__ dv, const modifier_args &mods,
                                  const block_lists &lists, const fa_kernel_params &p,
                                  const fa_seq &seq, i64 tile, i64 h_kv, i64 b, char *smem);
#endif

/* ---- the entry points: grid-stride loops over the work items ---------------------------- */
/* Each takes its sequence's params (SEQ_PARAMS: varlen's own lengths); a tile that starts past
 * the sequence's rows (dQ) or keys (dK/dV) has nothing to do, and the whole block skips it
 * before any barrier. */

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_bwd_dq(const store_t *__restrict__ q, const store_t *__restrict__ k,
             const store_t *__restrict__ v, const float *__restrict__ lse,
             const store_t *__restrict__ d_o, const float *__restrict__ delta,
             store_t *__restrict__ dq, ALIBI_PARAM BIAS_PARAM SEQ_PARAM LISTS_PARAM
             const fa_kernel_params p_in)
{
    extern __shared__ __align__(16) char smem[];
    const modifier_args mods = {ALIBI_ARG, BIAS_ARG, nullptr};
    const seq_args seqs = SEQ_ARGS;
    const block_lists lists = LISTS_ARGS; /* kv_num_blocks, kv_indices (and the full pair) */
    for (i64 b = blockIdx.z; b < p_in.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p_in, b);
        SEQ_PARAMS(p, p_in, s);
        for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y)
            for (i64 tile = blockIdx.x; tile * BLOCK_R < p.seqlen_q; tile += gridDim.x)
#if MMA
                tile_bwd_dq_mma(q, k, v, lse, d_o, delta, dq, mods, lists, p, s, tile, h, b,
                                smem);
#else
                tile_bwd_dq_cuda_cores(q, k, v, lse, d_o, delta, dq, mods, lists, p, s, tile, h,
                                       b, smem);
#endif
    }
}

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_bwd_dkdv(const store_t *__restrict__ q, const store_t *__restrict__ k,
               const store_t *__restrict__ v, const float *__restrict__ lse,
               const store_t *__restrict__ d_o, const float *__restrict__ delta,
               store_t *__restrict__ dk, store_t *__restrict__ dv, ALIBI_PARAM BIAS_PARAM
               SEQ_PARAM LISTS_PARAM const fa_kernel_params p_in)
{
    extern __shared__ __align__(16) char smem[];
    const modifier_args mods = {ALIBI_ARG, BIAS_ARG, nullptr};
    const seq_args seqs = SEQ_ARGS;
    const block_lists lists = LISTS_ARGS; /* q_num_blocks, q_indices (and the full pair) */
    for (i64 b = blockIdx.z; b < p_in.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p_in, b);
        SEQ_PARAMS(p, p_in, s);
        for (i64 h_kv = blockIdx.y; h_kv < p.heads_kv; h_kv += gridDim.y)
            for (i64 tile = blockIdx.x; tile * BLOCK_R < p.seqlen_k; tile += gridDim.x)
#if MMA
                tile_bwd_dkdv_mma(q, k, v, lse, d_o, delta, dk, dv, mods, lists, p, s, tile,
                                  h_kv, b, smem);
#else
                tile_bwd_dkdv_cuda_cores(q, k, v, lse, d_o, delta, dk, dv, mods, lists, p, s,
                                         tile, h_kv, b, smem);
#endif
    }
}
