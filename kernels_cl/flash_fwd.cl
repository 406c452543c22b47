/*
 * flash_fwd.cl - the FlashAttention forward kernel (OpenCL C 1.2): O = softmax(Q K^T * scale) V
 * with the online softmax of FlashAttention's Algorithm 1, never materializing Sq x Sk scores.
 *
 * One work-group per (Q tile, head, batch): NDRange (q_tiles * WG_SIZE, heads_q, batch),
 * TPR work-items (lanes) per query row: lane t computes the row's scores for keys
 * [t * Bc / TPR, (t + 1) * Bc / TPR) and owns its O for dims [t * d / TPR, (t + 1) * d / TPR);
 * the row's max and sum meet in local memory. CPUs run one lane per row (TPR 1, the kernel as
 * it was); GPUs several, so a work-group has enough items and each keeps a short O row in
 * registers. The Q, K and V tiles live in __local memory in the storage type, the S tile as
 * Br x Bc floats; O accumulates in f32 in private memory.
 *
 * Under DIRECT_KV (flash_common.cl) a work-group is one work-item that holds all Br rows of the
 * tile (ITEM_ROWS) and reads K and V rows in global memory instead of local tiles: the rows
 * take each key tile in turn, so the tile comes from memory once and from the cache after.
 *
 * Vectorization is explicit (floatN along keys for S, along head_dim for O) rather than left to
 * a work-group vectorizer: pocl keeps one work-item's loop scalar across items when it holds
 * inner loops, and GPUs simply split the vectors. K is stored transposed (d x Bc) so a row's
 * scores are contiguous vector loads; Q is stored transposed (d x Br) so work-items read
 * distinct banks on GPUs.
 *
 * The score modifiers and dropout (softcap, ALiBi, bias, sliding window, sinks, Philox dropout)
 * are compiled in only under their FEATURES bits, and sequences (varlen, per-sequence key
 * counts, paged K/V) under SEQ, split-KV's partial results under SPLIT, so a kernel without
 * them is the plain one; their helpers, the tunables and the tile helpers are in
 * flash_common.cl, which this file follows in one program. flash_merge.cl combines partials.
 */
#ifndef FA_FLASH_COMMON_CL
#include "flash_common.cl"
#endif

#if DIRECT_KV
/* S[r][c] = sum_x Q[r][x] * K[k0 + c][x] * scale * log2(e) for keys c in [0, keys) with K's rows
 * read from global memory (row j at k_head + key_row), the row's Q as q_row (d elements in the
 * local Q tile), in float_dims vectors along d; four keys at a time, so four independent chains
 * of multiply-adds share each Q vector (the last group repeats its last key). Keys from `keys`
 * to Bc get 0: the mask sets them to -inf. */
void direct_scores(__local float *s_row, __local const tile_t *q_row,
                   __global const store_t *k_head, long k0, int keys, long stride_b,
                   long stride_s, const fa_kernel_params *p, __global const int *block_table,
                   long b, float scale_log2)
{
    for (int c = 0; c < keys; c += 4) {
        __global const store_t *k_rows[4];
        float_dims s[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            k_rows[u] = k_head + key_row(k0 + c + min(u, keys - c - 1), stride_b, stride_s, p,
                                         block_table, b);
            s[u] = 0.0f;
        }
        for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++) {
            float_dims qv = LOAD_DIMS_F32(q_row + dvec * DIMS_PER_VEC);
#pragma unroll
            for (int u = 0; u < 4; u++)
                s[u] += qv * LOAD_GLOBAL_DIMS_F32(k_rows[u] + dvec * DIMS_PER_VEC);
        }
        for (int u = 0; u < min(4, keys - c); u++)
            s_row[c + u] = hsum_dims(s[u]) * scale_log2;
    }
    for (int c = max(keys, 0); c < BLOCK_C; c++)
        s_row[c] = 0.0f;
}

/* direct_scores for four rows at once (S and Q rows BLOCK_C and HEAD_DIM apart): each K vector
 * is loaded and converted once for the four rows, sixteen chains of multiply-adds (16 float16
 * registers of AVX-512's 32); the same sums in the same order as direct_scores per row. */
void direct_scores4(__local float *s_rows, __local const tile_t *q_rows,
                    __global const store_t *k_head, long k0, int keys, long stride_b,
                    long stride_s, const fa_kernel_params *p, __global const int *block_table,
                    long b, float scale_log2)
{
    for (int c = 0; c < keys; c += 4) {
        __global const store_t *k_rows[4];
        float_dims s[4][4]; /* s[row][key] */
#pragma unroll
        for (int u = 0; u < 4; u++) {
            k_rows[u] = k_head + key_row(k0 + c + min(u, keys - c - 1), stride_b, stride_s, p,
                                         block_table, b);
#pragma unroll
            for (int i = 0; i < 4; i++)
                s[i][u] = 0.0f;
        }
        for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++) {
            float_dims kv[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                kv[u] = LOAD_GLOBAL_DIMS_F32(k_rows[u] + dvec * DIMS_PER_VEC);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float_dims qv = LOAD_DIMS_F32(q_rows + i * HEAD_DIM + dvec * DIMS_PER_VEC);
#pragma unroll
                for (int u = 0; u < 4; u++)
                    s[i][u] += qv * kv[u];
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
            for (int u = 0; u < min(4, keys - c); u++)
                s_rows[i * BLOCK_C + c + u] = hsum_dims(s[i][u]) * scale_log2;
    }
    for (int i = 0; i < 4; i++)
        for (int c = max(keys, 0); c < BLOCK_C; c++)
            s_rows[i * BLOCK_C + c] = 0.0f;
}

/* HEAD_ROWS (heads packing, flash_common.cl): the K or V head of the tile's row r, row
 * r0 + r of the packed problem, HEAD_ROWS rows (query heads) per K/V head, stride_h apart. */
#if HEAD_ROWS
#define ROW_HEAD(head, stride_h, r0, r) ((head) + ((r0) + (r)) / HEAD_ROWS * (stride_h))
#else
#define ROW_HEAD(head, stride_h, r0, r) (head)
#endif

/* The S rows [0, rows) of a tile (its first row r0): f16 four at a time where four rows read
 * one K head, the others one at a time. Four at a time pays for f16 storage only, whose
 * conversion it shares (pocl, Sq 4 d 128: 12.4 -> 6.1 ms); f32 ran 0.8-1.0x and bf16 0.9-1.3x
 * of row by row (docs/benchmarks.md), so they go row by row. */
void direct_scores_rows(__local float *s_tile, __local const tile_t *q_tile, long r0, int rows,
                        __global const store_t *k_head, long k0, int keys, long stride_b,
                        long stride_s, const fa_kernel_params *p,
                        __global const int *block_table, long b, float scale_log2)
{
    for (int r = 0; r < rows;) {
        __global const store_t *k_rows_head = ROW_HEAD(k_head, p->k_stride_h, r0, r);
        if (DTYPE == 1 && r + 4 <= rows &&
            k_rows_head == ROW_HEAD(k_head, p->k_stride_h, r0, r + 3)) {
            direct_scores4(s_tile + r * BLOCK_C, q_tile + r * HEAD_DIM, k_rows_head, k0, keys,
                           stride_b, stride_s, p, block_table, b, scale_log2);
            r += 4;
        } else {
            direct_scores(s_tile + r * BLOCK_C, q_tile + r * HEAD_DIM, k_rows_head, k0, keys,
                          stride_b, stride_s, p, block_table, b, scale_log2);
            r++;
        }
    }
}

#define LOAD_V_DIMS_F32(ptr) LOAD_GLOBAL_DIMS_F32(ptr)
#else
#define LOAD_V_DIMS_F32(ptr) LOAD_DIMS_F32(ptr)
#endif

/* S += bias over one lane's keys of an S row, by vectors where a whole vector of keys has one,
 * the last keys one by one (a private array for a partial vector cost pocl a third of the run:
 * 65% against 12% over no bias). A pass of its own: pocl overlaps its global loads across the
 * work-group's rows, where added in store_scores each row's waited behind its dot products
 * (+30% over no bias against +16%). */
void add_bias(__local float *s_row, const row_mods *rm)
{
#if FEATURES & FA_FEATURE_BIAS
    for (int at = 0; at + KEYS_PER_VEC <= rm->bias_keys; at += KEYS_PER_VEC)
        S_STORE_KEYS(S_LOAD_KEYS(s_row + at) + LOG2E * load_bias_keys(rm->bias_row + at),
                     s_row + at);
    for (int c = rm->bias_keys / KEYS_PER_VEC * KEYS_PER_VEC; c < rm->bias_keys; c++)
        s_row[c] += LOG2E * load_bias(rm->bias_row + c); /* the keys of a partial vector */
#endif
}

/* Softcap and ALiBi over one lane's keys of an S row made elsewhere (DIRECT_KV's). */
void modify_row(__local float *s_row, const fa_kernel_params *p, const row_mods *rm)
{
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++)
        store_scores(S_LOAD_KEYS(s_row + kvec * KEYS_PER_VEC), s_row, kvec * KEYS_PER_VEC, p, rm);
}

/* The forward's output: the storage type, or f32 partials for flash_merge under SPLIT. */
#if SPLIT
typedef float out_t;
#define STORE_OUT_DIMS(v, ptr) STORE_DIMS_PRIVATE(v, ptr)
#else
typedef store_t out_t;
#define STORE_OUT_DIMS(v, ptr) store_dims(v, ptr)
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_fwd(__global const store_t *q, __global const store_t *k, __global const store_t *v,
          __global out_t *o, __global float *lse ALIBI_ARG BIAS_ARG SINKS_ARG SEQ_ARG,
          PARAMS_ARG)
{
    __local tile_t q_tile[HEAD_DIM * BLOCK_R]; /* Q^T: d x Br (DIRECT_KV: Q, Br x d) */
#if !DIRECT_KV
    __local tile_t k_tile[HEAD_DIM * BLOCK_C]; /* K^T: d x Bc */
    __local tile_t v_tile[BLOCK_C * HEAD_DIM]; /* V:   Bc x d */
#endif
    __local float s_tile[BLOCK_R * BLOCK_C];    /* S, then P: Br x Bc f32 */
#if TPR > 1
    __local float share_max[TPR * BLOCK_R], share_sum[TPR * BLOCK_R]; /* across_lanes_* */
#endif

    /* This work-item's first row of the tile and its lane of the row: a row's lanes are
     * neighbours (they read one Q column, and neighbouring parts of a K^T and a V row). An item
     * holds ITEM_ROWS rows: one, or under DIRECT_KV the whole tile. */
    const int r_first = (int)(get_local_id(0) / TPR) * ITEM_ROWS;
    const int lane = (int)(get_local_id(0) % TPR);
    const int c0 = lane * LANE_KEYS; /* its keys [c0, c0 + Bc / TPR) of a tile */
    const long b = (long)get_group_id(2);
    SEQ_SETUP(b); /* p: sequence b's lengths; its rows start at token seq.q_start */
    /* Split-KV: the grid's x is (split, tile), split-major; without SPLIT one split, 0. */
    const long split = SPLIT ? (long)get_group_id(0) / p.q_tiles : 0;
    long tile = SPLIT ? (long)get_group_id(0) % p.q_tiles : (long)get_group_id(0);
    long h = (long)get_group_id(1);
#if (FEATURES & FA_FEATURE_BIAS) && !SPLIT
    /* A bias every head shares (stride 0 over heads): the work-groups taken heads-first, so a
     * tile's heads come one after another and read its bias rows while the cache holds them
     * (pocl, B1 H8 N2048 d64 f32, an f32 [1, 1, N, N] bias: 78.8 -> 67.6 ms against 63 ms with
     * no bias, medians of seven alternated rounds). */
    if (p.bias_stride_h == 0) {
        const long heads = (long)get_num_groups(1), at = tile + (long)get_num_groups(0) * h;
        h = at % heads;
        tile = at / heads;
    }
#endif
    const long r0 = tile * BLOCK_R; /* first query row of the tile */
    const long h_kv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    const long sq = p.seqlen_q, sk = p.seqlen_k;
    if (SEQ && r0 >= sq)
        return; /* a tile past a shorter sequence's rows, the whole work-group */
    /* The item's rows r_first + i, i in [0, item_rows): DIRECT_KV skips those past Sq (one item,
     * no barrier to meet); staged rows past Sq compute on zeros, as their lanes meet others. */
    const int item_rows = DIRECT_KV ? (int)min((long)ITEM_ROWS, sq - r0) : ITEM_ROWS;
    /* Row 0 of K[b][h_kv] and V[b][h_kv]: Sk x d, row strides k_stride_s, v_stride_s. */
    __global const store_t *k_head = key_head(k, p.k_offset, p.k_stride_b, p.k_stride_h,
                                              p.k_stride_s, b, h_kv, seq.k_start);
    __global const store_t *v_head = key_head(v, p.v_offset, p.v_stride_b, p.v_stride_h,
                                              p.v_stride_s, b, h_kv, seq.k_start);

    /* Load Q tile (rows past Sq are zeros; their results are never written): rows [r0, r0 + Br)
     * of Q[b][h] (Sq x d, row stride q_stride_s, from token q_start), stored transposed (as
     * is, for DIRECT_KV's dot products along d). */
    load_tile(q_tile,
              q + p.q_offset + b * p.q_stride_b + h * p.q_stride_h + seq.q_start * p.q_stride_s,
              r0, sq, p.q_stride_s, BLOCK_R, !DIRECT_KV);

    /* The first row the tile's rules read: PACKED, every row reads the last one's (below). */
    const long rule_r0 = PACKED ? sq - 1 : r0;
#if SHARE_RANGES
    __local long kv_range[2]; /* the key tiles [kv_begin, kv_end), share_range says why */
    share_range(kv_range, keys_first_tile(&p, rule_r0), keys_to_visit(&p, rule_r0));
    long kv_begin = kv_range[0], kv_end = kv_range[1];
#else
    long kv_begin = 0, kv_end = keys_to_visit(&p, rule_r0);
#endif
#if SPLIT
    /* This split's keys [split * split_keys, + split_keys) of them (a multiple of Bc, so the
     * tiles stay aligned); the range may be empty, and the partial is then O = 0, LSE = -inf. */
    kv_begin = max(kv_begin, split * p.split_keys);
    kv_end = min(kv_end, (split + 1) * p.split_keys);
#endif
    const long tile_keys = fa_keys_end(&p, MASK, FEATURES, rule_r0); /* the fewest of any row */
#if FEATURES & FA_FEATURE_WINDOW
    /* the last row's */
    const long tile_begin = fa_keys_begin(&p, FEATURES, min(rule_r0 + BLOCK_R, sq) - 1);
#endif

    /* Each row's state: where its keys end (and begin, window), its modifier inputs, and the
     * online softmax's m, l and O. A sink is a first key of score sink[h] and V = 0:
     * m = sink (log2 units), l = exp(0) = 1; a sink of -inf is none. Split-KV counts it once,
     * in split 0. */
    long row_keys[ITEM_ROWS];
#if FEATURES & FA_FEATURE_WINDOW
    long row_begin[ITEM_ROWS];
#endif
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS)
    row_mods mods[ITEM_ROWS];
#endif
    float m[ITEM_ROWS], l[ITEM_ROWS];
    /* acc[i][dvec]: O[r_first + i][lane * d / TPR + DIMS_PER_VEC * dvec ..], f32 */
    float_dims acc[ITEM_ROWS][VECS_PER_LANE_DIMS];
    for (int i = 0; i < item_rows; i++) {
        const long row = r0 + r_first + i;
        /* PACKED: the row is query head h * Sq + row of a one-row problem, whose row 0 every
         * rule reads: in the packed problem's terms the last row's (i' = Sk - 1). Staged rows
         * past Sq take the last head's, so no slope or sink is read past the heads. */
        const long rule_row = PACKED ? sq - 1 : row;
        const long q_head = PACKED ? h * sq + min(row, sq - 1) : h;
        row_keys[i] = fa_keys_end(&p, MASK, FEATURES, rule_row);
#if FEATURES & FA_FEATURE_WINDOW
        row_begin[i] = fa_keys_begin(&p, FEATURES, rule_row);
#endif
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS)
        mods[i] = row_mods_of(&p ALIBI_PASS BIAS_PASS, b, q_head, rule_row);
#endif
#if FEATURES & FA_FEATURE_SINKS
        const float sink = split == 0 ? sinks[q_head] : -INFINITY;
        m[i] = sink * LOG2E;
        l[i] = sink == -INFINITY ? 0.0f : 1.0f;
#else
        m[i] = -INFINITY;
        l[i] = 0.0f;
#endif
        UNROLL_ON_GPU
        for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
            acc[i][dvec] = 0.0f;
    }

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc. */
    for (long k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        int valid_keys = (int)min((long)BLOCK_C, sk - k0); /* keys [0, valid_keys) exist */
#if !DIRECT_KV
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous tiles are no longer read */
        /* K^T: d x Bc, V: Bc x d */
        load_keys(k_tile, k_head, k0, sk, p.k_stride_b, p.k_stride_s, 1, &p, BLOCK_TABLE_PTR, b);
        load_keys(v_tile, v_head, k0, sk, p.v_stride_b, p.v_stride_s, 0, &p, BLOCK_TABLE_PTR, b);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        /* of the lane's keys, [c0, c0 + lane_keys) */
        int lane_keys = clamp(valid_keys - c0, 0, LANE_KEYS);
#if DIRECT_KV
        /* S = Q K^T * scale (in log2 units, for exp2) for all the item's rows, from K in global
         * memory. */
        direct_scores_rows(s_tile, q_tile, r0, item_rows, k_head, k0, valid_keys, p.k_stride_b,
                           p.k_stride_s, &p, BLOCK_TABLE_PTR, b, SCORE_SCALE(p));
#endif
        /* One row at a time: under DIRECT_KV the rows after the first read the tile's V rows
         * from the cache. */
        for (int i = 0; i < item_rows; i++) {
            const int r = r_first + i;
            const long row = r0 + r;
            __local float *s_row = s_tile + r * BLOCK_C; /* S[r][0 .. Bc) */
            __local float *s_lane = s_row + c0;          /* S[r][c0 .. c0 + Bc / TPR) */
            /* S = Q K^T * scale (in log2 units, for exp2): row r, S[r][c] for the lane's c; then
             * the score modifiers: softcap, + ALiBi (both as row_scores makes S) + bias. */
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS)
            row_mods tile_mods;
            row_mods_at_tile(&tile_mods, &mods[i], k0 + c0, lane_keys);
            const row_mods *lane_mods = &tile_mods;
#else
            const row_mods *lane_mods = 0;
#endif
#if !DIRECT_KV
            row_scores(s_lane, q_tile + r, k_tile + c0, SCORE_SCALE(p), &p, lane_mods);
#elif FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)
            modify_row(s_lane, &p, lane_mods); /* direct_scores_rows made S */
#endif
#if FEATURES & FA_FEATURE_BIAS
            add_bias(s_lane, lane_mods);
#endif

            /* Mask: keys past Sk and, causal, keys after the row's diagonal get -inf, as do
             * keys outside the window. Only tiles at the sequence end, crossing the diagonal or
             * a window's edge need it (uniform per work-group). */
            bool needs_mask = tile_keys < k0 + BLOCK_C;
            long allowed = row_keys[i] - k0; /* the row's keys [0, allowed) of the tile */
            if (needs_mask) {
                for (int c = (int)max(allowed, (long)c0); c < c0 + LANE_KEYS; c++)
                    s_row[c] = -INFINITY;
            }
#if FEATURES & FA_FEATURE_WINDOW
            if (k0 < tile_begin) { /* keys before the row's window: [0, row_begin - k0) */
                for (int c = c0; c < (int)min(row_begin[i] - k0, (long)(c0 + LANE_KEYS)); c++)
                    s_row[c] = -INFINITY;
            }
#endif

            /* m/l update (online softmax); S becomes P. l counts P before dropout, alpha
             * rescales the earlier O and l. */
            float m_new = fmax(m[i], across_lanes_max(share_max, r, lane, lane_max(s_lane)));
            float m_use = m_new == -INFINITY ? 0.0f : m_new;
            float alpha = exp2(m[i] - m_use), p_sum = lane_exp(s_lane, m_use);
#if FEATURES & FA_FEATURE_DROPOUT
            /* Dropout: P Z with Z = dropout_scale for a kept key, 0 for a dropped one. */
            if (row < sq)
                dropout_row(s_lane, &p, b, h, row, k0 + c0, lane_keys);
#endif
            /* The row's sum; its barrier also shows each lane the others' P. */
            l[i] = l[i] * alpha + across_lanes_sum(share_sum, r, lane, p_sum);
            m[i] = m_new;

            /* Rescale O, then accumulate P V: O[r][x] += sum_c P[r][c] * V[c][x] for the
             * lane's x, c in [0, valid_keys) (keys past it have P = 0 and are skipped). */
            UNROLL_ON_GPU
            for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
                acc[i][dvec] *= alpha;
#if DIRECT_KV
            /* row r's V head (heads packing: its K/V head's; else v_head) */
            __global const store_t *v_row_head = ROW_HEAD(v_head, p.v_stride_h, r0, r);
#endif
            for (int c = 0; c < valid_keys; c++) {
                float p_c = s_row[c]; /* P[r][c] */
#if DIRECT_KV
                __global const store_t *v_row = /* V[k0 + c][0 ..] in global memory */
                    v_row_head +
                    key_row(k0 + c, p.v_stride_b, p.v_stride_s, &p, BLOCK_TABLE_PTR, b);
#else
                /* V[c][lane * d / TPR ..] */
                __local const tile_t *v_row = v_tile + c * HEAD_DIM + lane * LANE_DIMS;
#endif
#pragma unroll
                for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
                    acc[i][dvec] += p_c * LOAD_V_DIMS_F32(v_row + dvec * DIMS_PER_VEC);
            }
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0 and LSE = -inf (with a
     * finite sink: O = 0, LSE = sink); a NaN l (a NaN or +inf score) gives NaN in both.
     * O[b][h][row][x] = acc / l (row stride o_stride_s, from token q_start); LSE natural log,
     * (m + log2 l) * ln 2, at the row's LSE index (fa_lse_index). Split-KV writes this split's
     * partial instead: O as f32 and LSE always, both where flash_merge reads them. Written in
     * the kernel, not a function: acc passed by pointer went to scratch on GPUs (clang-15,
     * f16: 640-750 bytes per work-item, tools/cl_gpu_check.sh). */
    for (int i = 0; i < item_rows; i++) {
        const long row = r0 + r_first + i;
        if (row >= sq)
            return;
        float inv_l = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
        const float row_lse = l[i] == 0.0f ? -INFINITY : (m[i] + log2(l[i])) * LN2;
        const long lse_at = fa_lse_index(&p, b, h, seq.q_start, row), t = seq.q_start + row;
#if SPLIT
        __global out_t *o_row = o + p.parts_offset + split * p.parts_stride +
                                b * p.parts_stride_b + h * p.parts_stride_h + t * p.parts_stride_s;
#else
        __global out_t *o_row = o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h +
                                t * p.o_stride_s;
#endif
        o_row += lane * LANE_DIMS;
        UNROLL_ON_GPU
        for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
            STORE_OUT_DIMS(acc[i][dvec] * inv_l, o_row + dvec * DIMS_PER_VEC);
        if (lane != 0)
            continue; /* one lane writes the row's LSE */
#if SPLIT
        lse[p.lse_parts_offset + split * p.part_rows + lse_at] = row_lse;
#else
        if (p.has_lse)
            lse[lse_at] = row_lse;
#endif
    }
}
