/*
 * flash_fwd_blocked.cl - the forward's register-blocked path (REG_BLOCKED), which the OpenCL
 * rules choose for CPU devices only (backends/opencl/cl_rules.c): one work-item per (Q tile,
 * head, batch) holds the tile's Br rows, as the in-place path does, but copies each K/V tile
 * once (K transposed, d x Bc; V as is; both f32) and lets it serve every row through two small
 * register-blocked matrix products: S = Q K^T over REG_ROWS query rows x KEY_VECS key vectors,
 * O += P V over REG_ROWS rows x DIM_VECS vectors of O, each K^T or V vector loaded once for the
 * block's rows and multiplied into REG_ROWS accumulators. Between the two a block's S rows pass
 * through the row rules every path shares (modifiers, mask, block-sparse lists, the online
 * softmax, dropout), so the path serves every feature the others do.
 *
 * Part of the forward program after flash_fwd.cl, whose fwd_tile it defines (flash_fwd.cl
 * declares it where REG_BLOCKED is set).
 */
#if REG_BLOCKED
#if !(DTYPE == 0 || TILE_F32) || DIRECT_KV || TPR != 1 || BLOCK_R % REG_ROWS != 0
#error "REG_BLOCKED: f32 tiles, one work-item per tile, Br a multiple of REG_ROWS"
#endif

/* The f32 O tile's vectors, DIMS_PER_VEC elements: loads, and stores as one unaligned vector
 * move (S_STORE_KEYS says why). */
#define O_LOAD_DIMS(p) VEC_NAME(v, load, DIMS_PER_VEC)(0, p)
#if DIMS_PER_VEC > 1
typedef float float_dims_unaligned __attribute__((ext_vector_type(DIMS_PER_VEC), aligned(4)));
#define O_STORE_DIMS(val, p) (*(__local float_dims_unaligned *)(p) = (val))
#else
#define O_STORE_DIMS(val, p) (*(p) = (val))
#endif

/* S[i][c] = sum_x Q[i][x] * K^T[x][c] * scale_log2 for the block's REG_ROWS rows (q_rows: rows of
 * the Q tile, d apart; s_rows: rows of S, Bc apart) and every key c of the tile (k_t: the d x Bc
 * K^T tile): per KEY_VECS key vectors, REG_ROWS x KEY_VECS accumulators (16 of AVX-512's 32
 * registers), each K^T vector loaded once and multiplied by the rows' Q[i][x], broadcast. */
void block_scores(__local float *s_rows, __local const float *q_rows, __local const float *k_t,
                  float scale_log2)
{
    for (int c0 = 0; c0 < BLOCK_C; c0 += KEY_VECS * KEYS_PER_VEC) {
        float_keys acc[REG_ROWS][KEY_VECS]; /* acc[i][j]: S[i][c0 + KEYS_PER_VEC * j ..] */
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < KEY_VECS; j++)
                acc[i][j] = 0.0f;
        for (int x = 0; x < HEAD_DIM; x++) {
            float_keys k_vec[KEY_VECS]; /* K^T[x][c0 + KEYS_PER_VEC * j ..] */
#pragma unroll
            for (int j = 0; j < KEY_VECS; j++)
                k_vec[j] = VLOAD_KEYS(k_t + x * BLOCK_C + c0 + j * KEYS_PER_VEC);
#pragma unroll
            for (int i = 0; i < REG_ROWS; i++) {
                float q_ix = q_rows[i * HEAD_DIM + x]; /* Q[i][x] */
#pragma unroll
                for (int j = 0; j < KEY_VECS; j++)
                    acc[i][j] += q_ix * k_vec[j];
            }
        }
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < KEY_VECS; j++)
                S_STORE_KEYS(acc[i][j] * scale_log2, s_rows + i * BLOCK_C + c0 + j * KEYS_PER_VEC);
    }
}

/* O[i][x] = O[i][x] * alpha[i] + sum_c P[i][c] * V[c][x], c in [0, keys) (keys past it have
 * P = 0 and are skipped), for the block's REG_ROWS rows (o_rows: rows of the f32 O tile, d
 * apart; p_rows: rows of P, Bc apart; v: the Bc x d V tile): per DIM_VECS vectors of an O row,
 * REG_ROWS x DIM_VECS accumulators, each V vector loaded once and multiplied by the rows'
 * P[i][c], broadcast. */
void block_values(__local float *o_rows, __local const float *p_rows, __local const float *v,
                  const float *alpha, int keys)
{
    for (int x0 = 0; x0 < HEAD_DIM; x0 += DIM_VECS * DIMS_PER_VEC) {
        float_dims acc[REG_ROWS][DIM_VECS]; /* acc[i][j]: O[i][x0 + DIMS_PER_VEC * j ..] */
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < DIM_VECS; j++)
                acc[i][j] = alpha[i] * O_LOAD_DIMS(o_rows + i * HEAD_DIM + x0 + j * DIMS_PER_VEC);
        for (int c = 0; c < keys; c++) {
            float_dims v_vec[DIM_VECS]; /* V[c][x0 + DIMS_PER_VEC * j ..] */
#pragma unroll
            for (int j = 0; j < DIM_VECS; j++)
                v_vec[j] = O_LOAD_DIMS(v + c * HEAD_DIM + x0 + j * DIMS_PER_VEC);
#pragma unroll
            for (int i = 0; i < REG_ROWS; i++) {
                float p_ic = p_rows[i * BLOCK_C + c]; /* P[i][c] */
#pragma unroll
                for (int j = 0; j < DIM_VECS; j++)
                    acc[i][j] += p_ic * v_vec[j];
            }
        }
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < DIM_VECS; j++)
                O_STORE_DIMS(acc[i][j], o_rows + i * HEAD_DIM + x0 + j * DIMS_PER_VEC);
    }
}

/* The per-row state of the tile's rows: where each row's keys end and begin (mask, window), its
 * modifier inputs, and the online softmax's m and l. */
typedef struct blocked_rows {
    long keys_end[BLOCK_R], keys_begin[BLOCK_R];
    row_mods mods[BLOCK_R];
    float m[BLOCK_R], l[BLOCK_R];
} blocked_rows;

/* The rows' initial state (rows r0 + r of the item, r < item_rows): where each row's keys end
 * and begin, its modifier inputs, m and l (a sink is their start); and O = 0 (f32, Br x d). */
void init_rows(blocked_rows *rows, __local float *o_tile, const fa_kernel_params *p,
               const fwd_item *it, int item_rows ALIBI_ARG BIAS_ARG SINKS_ARG)
{
    const long sq = p->seqlen_q, r0 = it->tile * BLOCK_R;
    for (int r = 0; r < item_rows; r++) {
        const long rule = rule_row(sq, r0 + r), q_head = q_head_of(it->h, sq, r0 + r);
        rows->keys_end[r] = fa_keys_end(p, MASK, FEATURES, rule);
        rows->keys_begin[r] = fa_keys_begin(p, FEATURES, rule);
        rows->mods[r] = row_mods_of(p ALIBI_PASS BIAS_PASS, it->b, q_head, rule);
        initial_state(&rows->m[r], &rows->l[r], it->split, q_head SINKS_PASS);
    }
    for (int idx = 0; idx < BLOCK_R * HEAD_DIM; idx += DIMS_PER_VEC)
        O_STORE_DIMS((float_dims)0.0f, o_tile + idx);
}

/* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0; a NaN l gives NaN.
 * O[b][h][row][x] = O / l (out_row: or split-KV's f32 partial), and the row's LSE. */
void store_rows(__global out_t *o, __global float *lse, __local const float *o_tile,
                const blocked_rows *rows, const fa_kernel_params *p, const fwd_item *it,
                int item_rows)
{
    const long r0 = it->tile * BLOCK_R;
    for (int r = 0; r < item_rows; r++) {
        float inv_l = rows->l[r] == 0.0f ? 0.0f : 1.0f / rows->l[r];
        __global out_t *o_row = out_row(o, p, it, r0 + r);
        for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++)
            STORE_OUT_DIMS(inv_l * O_LOAD_DIMS(o_tile + r * HEAD_DIM + dvec * DIMS_PER_VEC),
                           o_row + dvec * DIMS_PER_VEC);
        store_lse(lse, p, it, r0 + r, rows->m[r], rows->l[r]);
    }
}

/* Bias: the row REG_ROWS on (the next register block's row i of this one's, or from the last
 * block the first block's row i at the next key tile) asked into the cache, a line at a time,
 * so that add_bias finds it in L1. The bias is read once per score from memory (4 bytes, 16
 * MiB at [1, 1, 2048, 2048] f32, read by every head), a row's 128 keys at a time, 8 KiB apart
 * from the next row's: too short a run for the hardware prefetcher, and add_bias's loads
 * waited: 18% over the plain forward, 34-45% on a busy machine; 6% with this, 8-10% busy
 * (CPU time, as modify_block's).
 * clang's __builtin_prefetch, through an integer to the private address space that pocl's CPU
 * devices share with the global one: pocl 3.1's OpenCL prefetch() emits nothing. A prefetch
 * never faults, so a row's addresses past the bias's end are harmless. */
void prefetch_next_bias(const blocked_rows *rows, int r, long k0, const fa_kernel_params *p,
                        long r0)
{
#if FEATURES & FA_FEATURE_BIAS
    const int item_rows = (int)min((long)BLOCK_R, p->seqlen_q - r0);
    int next = r + REG_ROWS;
    if (next >= item_rows) {
        next = r % REG_ROWS;
        k0 += BLOCK_C;
    }
    const int keys = (int)min((long)BLOCK_C, p->seqlen_k - k0);
    __global const bias_t *bias_row = rows->mods[next].bias_row;
    for (int c = 0; bias_row && c < keys; c += 64 / (int)sizeof(bias_t))
        __builtin_prefetch((const void *)(ulong)(bias_row + k0 + c));
#endif
}

/* Softcap and ALiBi on the S rows of the register block whose first row is r (rows r + i
 * before item_rows), one row after the other before any row's softmax. Per row, between its
 * scores and its softmax, softcap's chain (clamp, exp2's polynomial, the division: about 18
 * dependent steps a vector) was paid in latency: the row's eight vectors overlap, then its max
 * waits for the last one. Here the next rows' chains fill that wait. Softcap cost 13% over the
 * plain forward that way, 9% this way; ALiBi 4% and 1% (CPU time, B1 H8 N2048 d64 f32, pocl,
 * quiet machine: docs/benchmarks.md, history.md ch. 25). */
void modify_block(__local float *s_row, int r, long k0, int lane_keys, const blocked_rows *rows,
                  const fa_kernel_params *p, long r0)
{
    const int item_rows = (int)min((long)BLOCK_R, p->seqlen_q - r0);
    for (int i = 0; i < REG_ROWS && r + i < item_rows; i++) {
        row_mods tile_mods;
        modify_row(s_row + i * BLOCK_C, p,
                   lane_mods_at(&tile_mods, &rows->mods[r + i], k0, lane_keys));
    }
}

/* The row rules on the S row of tile row r (query row r0 + r) over the tile at k0: score
 * modifiers, mask, block-sparse lists, then the online softmax's m/l update (S becomes P);
 * returns the row's rescale alpha. */
ALWAYS_INLINE float blocked_row_rules(__local float *s_row, int r, long k0, int lane_keys,
                                      long tile_keys, long tile_begin, blocked_rows *rows,
                                      const block_lists *lists, const fa_kernel_params *p,
                                      const fwd_item *it, long r0, bool full, bool one_block)
{
    const long row = r0 + r;
    row_mods tile_mods;
    const row_mods *lane_mods = lane_mods_at(&tile_mods, &rows->mods[r], k0, lane_keys);
    if ((FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)) && r % REG_ROWS == 0)
        modify_block(s_row, r, k0, lane_keys, rows, p, r0); /* block_scores made S */
    add_bias(s_row, lane_mods);
    prefetch_next_bias(rows, r, k0, p, r0);
    /* Mask: none in full blocks; no list search where the tile's keys lie in one key block
     * that the row's query block lists (one_block: the caller looked it up once). */
    if (!full)
        mask_lane(s_row, 0, k0, tile_keys, rows->keys_end[r], tile_begin, rows->keys_begin[r]);
    if (!full && !one_block)
        mask_unlisted(s_row, 0, LANE_KEYS, k0, row, lists, p, it->b, it->h);
    return softmax_update(s_row, 0, 0, r, 0, &rows->m[r], &rows->l[r], p, it->b, it->h, row, k0,
                          lane_keys);
}

/* The work-group's item (fwd_item) in one work-item that holds all Br rows of the tile; rows
 * past Sq compute on Q = 0 in their register block, with P = 0, and are never stored. p: the
 * sequence's (SEQ_SETUP). The lanes' share is unused (one lane, TPR 1). */
ALWAYS_INLINE void fwd_tile(__global const store_t *q, __global const store_t *k,
                            __global const store_t *v, __global out_t *o,
                            __global float *lse ALIBI_ARG BIAS_ARG SINKS_ARG,
                            __global const int *block_table, const block_lists *lists,
                            const fa_kernel_params *p, const fwd_item *it,
                            __local tile_t *q_tile, __local tile_t *k_tile,
                            __local tile_t *v_tile, __local float *s_tile,
                            __local float *o_tile, __local float *share_max,
                            __local float *share_sum, __local long *kv_range)
{
    const long b = it->b, h = it->h;
    const long r0 = it->tile * BLOCK_R;               /* first query row of the tile */
    const long h_kv = h / (p->heads_q / p->heads_kv); /* GQA: query heads share a K/V head */
    const long sq = p->seqlen_q, sk = p->seqlen_k;
    const int item_rows = (int)min((long)BLOCK_R, sq - r0); /* rows r0 + r, r < item_rows */
    /* Row 0 of K[b][h_kv] and V[b][h_kv]: Sk x d, row strides k_stride_s, v_stride_s. */
    __global const store_t *k_head = key_head(k, p->k_offset, p->k_stride_b, p->k_stride_h,
                                              p->k_stride_s, b, h_kv, it->seq.k_start);
    __global const store_t *v_head = key_head(v, p->v_offset, p->v_stride_b, p->v_stride_h,
                                              p->v_stride_s, b, h_kv, it->seq.k_start);

    /* Load Q tile, as is (Br x d, zeros past Sq), for the rows' broadcasts. */
    load_q_tile(q_tile, q, p, it, 0);

    /* The tile's key range, and the bounds its rows' masks share (rule_r0: PACKED, every row
     * reads the last one's): the fewest keys of any row, the last row's first key. */
    const long rule_r0 = rule_row(sq, r0);
    long kv_begin, kv_end;
    item_keys(kv_range, p, it, rule_r0, &kv_begin, &kv_end);
    const long tile_keys = fa_keys_end(p, MASK, FEATURES, rule_r0);
    const long tile_begin = fa_keys_begin(p, FEATURES, min(rule_r0 + BLOCK_R, sq) - 1);

    /* Each row's state, and O = 0 (f32, Br x d). */
    blocked_rows rows;
    init_rows(&rows, o_tile, p, it, item_rows ALIBI_PASS BIAS_PASS SINKS_PASS);

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc. */
    for (long k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        int valid_keys = (int)min((long)BLOCK_C, sk - k0); /* keys [0, valid_keys) exist */
        int lane_keys = clamp(valid_keys, 0, LANE_KEYS);
        if (!tile_listed(lists, p, b, h, r0, r0 + item_rows, k0, k0 + valid_keys))
            continue; /* block-sparse: no row of the tile lists a key block of it */
        /* The K/V tile, once for all rows: K^T (d x Bc) and V (Bc x d), f32, zeros past Sk. */
        load_keys(k_tile, k_head, k0, sk, p->k_stride_b, p->k_stride_s, 1, p, block_table, b);
        load_keys(v_tile, v_head, k0, sk, p->v_stride_b, p->v_stride_s, 0, p, block_table, b);

        /* Block-sparse: a register block's rows lie in one query block (block_q >= 16, a
         * multiple of REG_ROWS), whose list decides for all of them; looked up once per
         * query block of the tile (a tile may hold several: cl_rules.c). */
        long list_qb = -1;
        bool listed = true, full = false;
        const bool one_block = (FEATURES & FA_FEATURE_BLOCK_SPARSE) &&
                               k0 / p->sparse_block_k == (k0 + valid_keys - 1) / p->sparse_block_k;

        /* One register block of rows at a time: its S rows (in s_tile's rows) stay in the
         * cache from S = Q K^T through the row rules to P V. */
        for (int rb = 0; rb < item_rows; rb += REG_ROWS) {
            if (FEATURES & FA_FEATURE_BLOCK_SPARSE) {
                const long qb = (r0 + rb) / p->sparse_block_q;
                if (qb != list_qb) {
                    const long q_end = min((qb + 1) * p->sparse_block_q, r0 + item_rows);
                    list_qb = qb;
                    listed = tile_listed(lists, p, b, h, r0 + rb, q_end, k0, k0 + valid_keys);
                    full = tile_full(lists, p, b, h, r0 + rb, q_end, k0, k0 + valid_keys);
                }
                if (!listed)
                    continue; /* its query block lists no key of the tile: O, m, l unchanged */
            }
            __local float *s_rows = s_tile + rb * BLOCK_C; /* S[rb .. rb + REG_ROWS][0 .. Bc) */
            /* S = Q K^T * scale (in log2 units, for exp2) */
            block_scores(s_rows, q_tile + rb * HEAD_DIM, k_tile, SCORE_SCALE(*p));
            /* Modifiers, mask, m/l update (online softmax): S becomes P; rows past Sq: P = 0 */
            float alpha[REG_ROWS];
            for (int i = 0; i < REG_ROWS; i++) {
                __local float *s_row = s_rows + i * BLOCK_C;
                if (rb + i < item_rows) {
                    alpha[i] = blocked_row_rules(s_row, rb + i, k0, lane_keys, tile_keys,
                                                 tile_begin, &rows, lists, p, it, r0, full,
                                                 one_block && listed);
                } else {
                    alpha[i] = 1.0f;
                    for (int c = 0; c < BLOCK_C; c++)
                        s_row[c] = 0.0f;
                }
            }
            /* Rescale O, then accumulate P V */
            block_values(o_tile + rb * HEAD_DIM, s_rows, v_tile, alpha, valid_keys);
        }
    }

    /* Final 1/l and LSE */
    store_rows(o, lse, o_tile, &rows, p, it, item_rows);
}
#endif
