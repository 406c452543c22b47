/*
 * flash_bwd_mma.cu - the backward's tensor-core path (MMA 1: sm_80+, f16/bf16, d a multiple of
 * 16): the dQ pass's and the dK/dV pass's work items, tile_bwd_dq_mma and tile_bwd_dkdv_mma,
 * whose entry points (flash_bwd.cu) call them. NVRTC compiles it after flash_bwd.cu in the
 * backward's program; it uses that file's shared helpers (the rows' stats, grad_element,
 * dropout_z) and flash_fwd.cu's mma fragments. flash_bwd.cu describes the passes, their steps
 * and shared memory; alone this file includes it (-I kernels_cu -I src). Nothing here without
 * MMA.
 */
#ifndef FA_FLASH_BWD_CU
#include "flash_bwd.cu"
#endif

#if MMA
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
                                const block_lists &lists, const fa_kernel_params &p,
                                const fa_seq &seq, i64 tile, i64 h, i64 b, char *smem)
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
     * the window skipped; block-sparse, only the tiles of listed key blocks), then 16 keys
     * c0 .. c0+15 at a time. */
    const list_dir dir = forward_lists(p);
    const i64 r_end = min(r0 + BLOCK_R, sq); /* the tile's rows that exist */
    for (i64 k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, kv_begin, BLOCK_C, kv_end);
         k0 < kv_end;
         k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, k0 + BLOCK_C, BLOCK_C, kv_end)) {
        load_kv_tiles(k_tile, v_tile, kv, p, k0, false);
        const int valid_keys = (int)min((i64)BLOCK_C, p.seqlen_k - k0);
        const row_blocks rb[2] = {
            row_blocks_of(lists, p, dir, b, h, rows[0], sq, k0, valid_keys),
            row_blocks_of(lists, p, dir, b, h, rows[1], sq, k0, valid_keys)};
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
            /* The modifiers, the mask (keys outside [row_begin, row_keys) and keys of unlisted
             * blocks get P = 0; a full block tests the key count only), P = exp2(S - LSE2) and
             * dS = P (Z dP - D) dcap in place. */
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e / 2, c = c0 + 8 * j + 2 * t + (e & 1);
                    const i64 key = k0 + c;
                    float ds;
                    grad_element(s[j][e], dp[j][e], z[j][e], p, hm, rows[i], key,
                                 key < row_keys[i] &&
                                     (rb[i].full ||
                                      (key >= row_begin[i] && block_listed_at(rb[i], c))),
                                 lse2[i], delta_row[i], &ds);
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
                                  const block_lists &lists, const fa_kernel_params &p,
                                  const fa_seq &seq, i64 tile, i64 h_kv, i64 b, char *smem)
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
    const i64 first = first_tile_row(k0, p), last_end = rows_seeing_end(k0 + BLOCK_R - 1, p);
    /* Block-sparse: the transposed lists, own keys [k0, k_end). */
    const list_dir dir = transposed_lists(p);
    const i64 k_end = min(k0 + BLOCK_R, sk);

    /* Loop over the group's query heads, then their query tiles [r0, r0 + Br), in order, 16
     * query rows c0 .. c0+15 at a time. */
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
            /* Load the query tile: Q and dO, the rows' LSE, D and keys. */
            __syncthreads(); /* the previous query tile is no longer read */
            load_query_tile(q_tile, do_tile, lse2_v, delta_v, keys_v, q_head, do_head, lse,
                            delta, p, b, h, seq.q_start, r0, k0);
            const int valid_rows = (int)min((i64)BLOCK_C, p.seqlen_q - r0);
            const row_blocks rb[2] = { /* this lane's keys g, g+8 */
                row_blocks_of(lists, p, dir, b, h, k0 + warp_key0 + g, sk, r0, valid_rows),
                row_blocks_of(lists, p, dir, b, h, k0 + warp_key0 + g + 8, sk, r0, valid_rows)};
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
                /* The modifiers, the mask (key >= the row's count, or before its window, or a row
                 * of an unlisted block; a full block tests the count only), P^T Z =
                 * exp2(S^T - LSE2) Z in st and dS^T = P^T (Z dP^T - D) dcap in dpt. */
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int c = warp_key0 + g + 8 * (e / 2), r = c0 + 8 * j + 2 * t + (e & 1);
                        const i64 key = k0 + c, row = r0 + r;
                        const row_blocks &own = rb[e / 2]; /* key c's blocks */
                        const bool visible =
                            c < keys_v[r] &&
                            (own.full || (key >= fa_keys_begin(&p, FEATURES, row) &&
                                          block_listed_at(own, r)));
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
