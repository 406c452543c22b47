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

/* Block-sparse on this path: the key blocks of a K/V tile (keys [k0, k0 + valid_keys)) that
 * one query block lists, as the span of the tile's keys [c_lo, c_hi) from its first listed
 * block to the end of its last (c_lo == c_hi: none), which alone are multiplied; a span that
 * reaches the tile's last valid key ends at Bc (mask_lane's -inf covers keys past Sk). whole:
 * every block of the tile is listed, and the tile runs as a dense one does; full: every block
 * is in the full lists (no element mask); gaps: an unlisted block lies inside the span. */
typedef struct listed_span {
    int c_lo, c_hi;
    bool whole, full, gaps;
} listed_span;

/* A dense tile's span: all of it, as without the feature. */
#define WHOLE_SPAN {0, BLOCK_C, true, false, false}

/* *span of query block qb over the tile at k0 (an out pointer, not a returned struct: an
 * inlined struct return left an intrinsic Oclgrind cannot run, flash_modifiers.cl). */
void listed_span_of(listed_span *span, const block_lists *bl, const fa_kernel_params *p, long b,
                    long h, long qb, long k0, int valid_keys)
{
    const list_view v = FORWARD_VIEW(bl, p);
    const long bk = p->sparse_block_k, kb0 = k0 / bk, kb1 = (k0 + valid_keys - 1) / bk;
    long first = -1, last = -1, listed = 0, full = 0;
    for (long kb = kb0; kb <= kb1; kb++) {
        if (!view_listed(&v, p, b, h, qb, kb, false))
            continue;
        first = first < 0 ? kb : first;
        last = kb;
        listed++;
        full += view_listed(&v, p, b, h, qb, kb, true);
    }
    span->c_lo = span->c_hi = 0;
    span->whole = span->full = span->gaps = false;
    if (first < 0)
        return;
    span->c_lo = (int)max(first * bk - k0, 0L);
    span->c_hi = (int)min((last + 1) * bk - k0, (long)valid_keys);
    span->c_hi = span->c_hi == valid_keys ? BLOCK_C : span->c_hi;
    span->whole = listed == kb1 - kb0 + 1;
    span->full = span->whole && full == listed && valid_keys == BLOCK_C;
    span->gaps = listed != last - first + 1;
}

/* The union of the spans of the query blocks of tile rows [r0, r_end) over the tile at k0
 * (only c_lo, c_hi: c_lo == c_hi, none lists a key of it). */
void tile_span_of(listed_span *tile_span, const block_lists *bl, const fa_kernel_params *p,
                  long b, long h, long r0, long r_end, long k0, int valid_keys)
{
    tile_span->c_lo = BLOCK_C;
    tile_span->c_hi = 0;
    for (long qb = r0 / p->sparse_block_q; qb <= (r_end - 1) / p->sparse_block_q; qb++) {
        listed_span span;
        listed_span_of(&span, bl, p, b, h, qb, k0, valid_keys);
        if (span.c_lo == span.c_hi)
            continue;
        tile_span->c_lo = min(tile_span->c_lo, span.c_lo);
        tile_span->c_hi = max(tile_span->c_hi, span.c_hi);
    }
    if (tile_span->c_hi == 0)
        tile_span->c_lo = 0;
}

/* Keys [k0 + c_lo, k0 + c_hi) of K or V (row 0 at `head`, key_head; paged: each key from its
 * page) into their places of a Bc-key tile as load_keys puts them, zeros past Sk: the span of
 * a tile that some query block of it lists. At 10% random 64 x 64 blocks, copying whole
 * 128-key tiles left N 8192 at 0.16 of the dense CPU time on pocl, this 0.14. */
void load_key_span(__local float *tile, __global const store_t *head, long k0, int c_lo,
                   int c_hi, long sk, long stride_b, long stride_s, int transposed,
                   const fa_kernel_params *p, __global const int *block_table, long b)
{
    for (int c = c_lo; c < c_hi; c++) {
        const long j = k0 + c;
        const long row = j < sk ? key_row(j, stride_b, stride_s, p, block_table, b) : 0;
        for (int x = 0; x < HEAD_DIM; x += TILE_LOAD_STEP)
            copy_tile_elems(tile, head + row + x, j < sk, c, x, BLOCK_C, transposed);
    }
}

/* softmax_update over the keys [c_lo, c_hi) of an S row only (multiples of KEYS_PER_VEC: key
 * blocks hold 16 keys or more), for a register block whose query block lists a part of the
 * tile: as lane_max and lane_exp over those keys; dropout, over the whole row, scales only
 * what the span reads. Returns the row's rescale alpha. */
float span_softmax_update(__local float *s_row, int c_lo, int c_hi, float *m, float *l,
                          const fa_kernel_params *p, long b, long h, long row, long k0,
                          int lane_keys)
{
    float_keys span_max = -INFINITY; /* lane-wise max over the span's vectors */
    for (int c = c_lo; c < c_hi; c += KEYS_PER_VEC)
        span_max = fmax(span_max, S_LOAD_KEYS(s_row + c));
    const float m_new = fmax(*m, hmax_keys(span_max));
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2(*m - m_use);
    float_keys span_sum = 0.0f; /* lane-wise sum of P over the span's vectors */
    for (int c = c_lo; c < c_hi; c += KEYS_PER_VEC) {
        float_keys pv = FLUSH_TINY(float_keys, exp2_keys(S_LOAD_KEYS(s_row + c) - m_use));
        S_STORE_KEYS(pv, s_row + c);
        span_sum += pv;
    }
    if ((FEATURES & FA_FEATURE_DROPOUT) && row < p->seqlen_q)
        dropout_row(s_row, p, b, h, row, k0, lane_keys);
    *l = *l * alpha + hsum_keys(span_sum);
    *m = m_new;
    return alpha;
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
 * quiet machine: docs/benchmarks.md, history.md ch. 27). */
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

/* The row rules on the S row of tile row r (query row r0 + r) over the tile at k0, within the
 * row's query block's span of listed keys: score modifiers, mask, the unlisted blocks inside
 * the span, then the online softmax's m/l update (S becomes P); returns the row's rescale
 * alpha. */
ALWAYS_INLINE float blocked_row_rules(__local float *s_row, int r, long k0, int lane_keys,
                                      long tile_keys, long tile_begin, blocked_rows *rows,
                                      const block_lists *lists, const fa_kernel_params *p,
                                      const fwd_item *it, long r0, const listed_span *span)
{
    const long row = r0 + r;
    row_mods tile_mods;
    const row_mods *lane_mods = lane_mods_at(&tile_mods, &rows->mods[r], k0, lane_keys);
    if ((FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)) && r % REG_ROWS == 0)
        modify_block(s_row, r, k0, lane_keys, rows, p, r0); /* block_scores made S */
    add_bias(s_row, lane_mods);
    prefetch_next_bias(rows, r, k0, p, r0);
    /* Mask: none in full blocks; the block lists only where the span has gaps (the span's
     * blocks are listed, its ends are those of listed blocks). */
    if (!span->full)
        mask_lane(s_row, 0, k0, tile_keys, rows->keys_end[r], tile_begin, rows->keys_begin[r]);
    if (span->gaps)
        mask_unlisted(s_row, span->c_lo, span->c_hi, k0, row, lists, p, it->b, it->h);
    if (span->whole)
        return softmax_update(s_row, 0, 0, r, 0, &rows->m[r], &rows->l[r], p, it->b, it->h,
                              row, k0, lane_keys);
    return span_softmax_update(s_row, span->c_lo, span->c_hi, &rows->m[r], &rows->l[r], p,
                               it->b, it->h, row, k0, lane_keys);
}

/* One register block of rows (tile rows rb .. rb + REG_ROWS) over the K/V tile at k0, on the
 * keys of its span: S = Q K^T, the row rules (S becomes P; rows past Sq: P = 0), then O's
 * rescale and P V. Its S rows stay in the cache from the first product to the second. */
ALWAYS_INLINE void register_block(int rb, long k0, int valid_keys, long tile_keys,
                                  long tile_begin, const listed_span *span, blocked_rows *rows,
                                  const block_lists *lists, const fa_kernel_params *p,
                                  const fwd_item *it, int item_rows, __local const float *q_tile,
                                  __local const float *k_tile, __local const float *v_tile,
                                  __local float *s_tile, __local float *o_tile)
{
    const long r0 = it->tile * BLOCK_R;
    const int lane_keys = clamp(valid_keys, 0, LANE_KEYS);
    __local float *s_rows = s_tile + rb * BLOCK_C; /* S[rb .. rb + REG_ROWS][0 .. Bc) */
    /* S = Q K^T * scale (in log2 units, for exp2) */
    block_scores(s_rows, q_tile + rb * HEAD_DIM, k_tile, SCORE_SCALE(*p), span->c_lo,
                 span->c_hi);
    /* Modifiers, mask, m/l update (online softmax): S becomes P; rows past Sq: P = 0 */
    float alpha[REG_ROWS];
    for (int i = 0; i < REG_ROWS; i++) {
        __local float *s_row = s_rows + i * BLOCK_C;
        if (rb + i < item_rows) {
            alpha[i] = blocked_row_rules(s_row, rb + i, k0, lane_keys, tile_keys, tile_begin,
                                         rows, lists, p, it, r0, span);
        } else {
            alpha[i] = 1.0f;
            for (int c = 0; c < BLOCK_C; c++)
                s_row[c] = 0.0f;
        }
    }
    /* Rescale O, then accumulate P V */
    block_values(o_tile + rb * HEAD_DIM, s_rows, v_tile, alpha, span->c_lo,
                 min(span->c_hi, valid_keys));
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
        /* The K/V tile, once for all rows: K^T (d x Bc) and V (Bc x d), f32, zeros past Sk;
         * block-sparse: the keys its query blocks list, or none */
        if (FEATURES & FA_FEATURE_BLOCK_SPARSE) {
            listed_span keys;
            tile_span_of(&keys, lists, p, b, h, r0, r0 + item_rows, k0, valid_keys);
            if (keys.c_lo == keys.c_hi)
                continue; /* no row of the tile lists a key block of it */
            load_key_span(k_tile, k_head, k0, keys.c_lo, keys.c_hi, sk, p->k_stride_b,
                          p->k_stride_s, 1, p, block_table, b);
            load_key_span(v_tile, v_head, k0, keys.c_lo, keys.c_hi, sk, p->v_stride_b,
                          p->v_stride_s, 0, p, block_table, b);
        } else {
            load_keys(k_tile, k_head, k0, sk, p->k_stride_b, p->k_stride_s, 1, p, block_table,
                      b);
            load_keys(v_tile, v_head, k0, sk, p->v_stride_b, p->v_stride_s, 0, p, block_table,
                      b);
        }

        /* Block-sparse: a register block's rows lie in one query block (block_q >= 16, a
         * multiple of REG_ROWS), whose lists decide the keys it computes; looked up once per
         * query block of the tile (a tile may hold several, and a key tile several key
         * blocks: cl_rules.c). */
        long list_qb = -1;
        listed_span span = WHOLE_SPAN;
        for (int rb = 0; rb < item_rows; rb += REG_ROWS) {
            if (FEATURES & FA_FEATURE_BLOCK_SPARSE) {
                const long qb = (r0 + rb) / p->sparse_block_q;
                if (qb != list_qb) {
                    list_qb = qb;
                    listed_span_of(&span, lists, p, b, h, qb, k0, valid_keys);
                }
                if (span.c_lo == span.c_hi)
                    continue; /* its query block lists no key of the tile: O, m, l unchanged */
            }
            register_block(rb, k0, valid_keys, tile_keys, tile_begin, &span, &rows, lists, p,
                           it, item_rows, q_tile, k_tile, v_tile, s_tile, o_tile);
        }
    }

    /* Final 1/l and LSE */
    store_rows(o, lse, o_tile, &rows, p, it, item_rows);
}
#endif
