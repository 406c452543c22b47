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
 * them is the plain one; their helpers, the tunables and the tile helpers are in the shared
 * files (flash_common.cl first), which this file follows in one program. flash_merge.cl
 * combines partials.
 */
#ifndef FA_FLASH_COMMON_CL
#include "flash_common.cl"
#endif

/* The tile loop's bounds (item_keys) and the paths (fwd_tile) are ALWAYS_INLINE: left to pocl's
 * choice, its causal tile loop ran 1.8x slower, its bounds no longer seen as uniform
 * (share_range says why that matters). */

/* ---- the work item: a Q tile of (head, batch), with SPLIT a key chunk --------------------- */

/* Query tile `tile` (rows [tile * Br, + Br)) of head h of sequence b (seq: where its rows and
 * keys are) and, with SPLIT, key chunk `split`: keys [split * split_keys, + split_keys). */
typedef struct fwd_item {
    long b, h, tile, split;
    fa_seq seq;
} fwd_item;

/* The work-group's item. Split-KV: the grid's x is (split, tile), split-major; without SPLIT
 * one split, 0. A bias every head shares (stride 0 over heads, no SPLIT): the work-groups taken
 * heads-first, so a tile's heads come one after another and read its bias rows while the cache
 * holds them (history.md, ch. 20). */
#define BIAS_HEADS_FIRST ((FEATURES & FA_FEATURE_BIAS) && !SPLIT)
fwd_item fwd_item_of(const fa_kernel_params *p, fa_seq seq, long b)
{
    fwd_item it = {b, (long)get_group_id(1), (long)get_group_id(0), 0, seq};
    if (SPLIT) {
        it.split = (long)get_group_id(0) / p->q_tiles;
        it.tile = (long)get_group_id(0) % p->q_tiles;
    }
    if (BIAS_HEADS_FIRST && p->bias_stride_h == 0) {
        const long heads = (long)get_num_groups(1), at = it.tile + (long)get_num_groups(0) * it.h;
        it.h = at % heads;
        it.tile = at / heads;
    }
    return it;
}

/* PACKED (flash_common.cl): a row is query head h * Sq + row of a one-row problem, whose row 0
 * every rule reads: in the packed problem's terms the last row's (i' = Sk - 1). rule_row is
 * the row the mask, window and modifier rules read, q_head the query head of the slopes and
 * sinks; rows past Sq take the last head's, so no slope or sink is read past the heads. */
long rule_row(long sq, long row) { return PACKED ? sq - 1 : row; }
long q_head_of(long h, long sq, long row) { return PACKED ? h * sq + min(row, sq - 1) : h; }

/* Load Q tile (rows past Sq are zeros; their results are never written): rows [r0, r0 + Br) of
 * Q[b][h] (Sq x d, row stride q_stride_s, from token q_start), transposed (d x Br) or as is. */
void load_q_tile(__local tile_t *q_tile, __global const store_t *q, const fa_kernel_params *p,
                 const fwd_item *it, int transposed)
{
    load_tile(q_tile,
              q + p->q_offset + it->b * p->q_stride_b + it->h * p->q_stride_h +
                  it->seq.q_start * p->q_stride_s,
              it->tile * BLOCK_R, p->seqlen_q, p->q_stride_s, BLOCK_R, transposed);
}

/* The key tiles [*begin, *end) the tile visits (rule_r0: its first rule row): through local
 * memory where SHARE_RANGES says so; with SPLIT within its chunk, [split * split_keys,
 * + split_keys) (a multiple of Bc, so the tiles stay aligned). The range may be empty: the
 * partial is then O = 0, LSE = -inf. */
ALWAYS_INLINE void item_keys(__local long *kv_range, const fa_kernel_params *p,
                             const fwd_item *it, long rule_r0, long *begin, long *end)
{
    loop_range(kv_range, keys_first_tile(p, rule_r0), keys_to_visit(p, rule_r0), begin, end);
    if (SPLIT) {
        *begin = max(*begin, it->split * p->split_keys);
        *end = min(*end, (it->split + 1) * p->split_keys);
    }
}

/* The online softmax's initial state of a row (query head q_head): a sink is a first key of
 * score sink[q_head] and V = 0: m = sink (log2 units), l = exp(0) = 1; a sink of -inf is none.
 * Split-KV counts it once, in split 0. */
void initial_state(float *m, float *l, long split, long q_head SINKS_ARG)
{
#if FEATURES & FA_FEATURE_SINKS
    const float sink = split == 0 ? sinks[q_head] : -INFINITY;
    *m = sink * LOG2E;
    *l = sink == -INFINITY ? 0.0f : 1.0f;
#else
    *m = -INFINITY;
    *l = 0.0f;
#endif
}

/* The modifier inputs of a lane's keys of a tile (from key `key0`, lane_keys of them exist) in
 * *tile_mods, from the row's (row_mods_of); NULL, the plain scores, without modifiers. */
INLINE_ON_GPU const row_mods *lane_mods_at(row_mods *tile_mods, const row_mods *row, long key0,
                                           int lane_keys)
{
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS)
    row_mods_at_tile(tile_mods, row, key0, lane_keys);
    return tile_mods;
#else
    return 0;
#endif
}

/* S += bias over one lane's keys of an S row, by vectors where a whole vector of keys has one,
 * the last keys one by one (a private array for a partial vector cost pocl a third of the run:
 * 65% against 12% over no bias). A pass of its own: pocl overlaps its global loads across the
 * work-group's rows, where added in store_scores each row's waited behind its dot products
 * (+30% over no bias against +16%). */
void add_bias(__local float *s_row, const row_mods *rm)
{
    if (!(FEATURES & FA_FEATURE_BIAS))
        return;
    for (int at = 0; at + KEYS_PER_VEC <= rm->bias_keys; at += KEYS_PER_VEC)
        S_STORE_KEYS(S_LOAD_KEYS(s_row + at) + LOG2E * load_bias_keys(rm->bias_row + at),
                     s_row + at);
    for (int c = rm->bias_keys / KEYS_PER_VEC * KEYS_PER_VEC; c < rm->bias_keys; c++)
        s_row[c] += LOG2E * load_bias(rm->bias_row + c); /* the keys of a partial vector */
}

/* Softcap and ALiBi over one lane's keys of an S row made elsewhere (DIRECT_KV's). */
void modify_row(__local float *s_row, const fa_kernel_params *p, const row_mods *rm)
{
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++)
        store_scores(S_LOAD_KEYS(s_row + kvec * KEYS_PER_VEC), s_row, kvec * KEYS_PER_VEC, p, rm);
}

/* Mask: keys past Sk and, causal, keys after the row's diagonal get -inf (keys from
 * row_keys - k0 on), as do keys before the row's window (before row_begin - k0), over the
 * lane's keys [c0, c0 + Bc / TPR) of the row. Only tiles at the sequence end, crossing the
 * diagonal (tile_keys: the fewest keys of any row) or a window's edge (tile_begin: the last
 * row's first key) need it, uniform per work-group. */
INLINE_ON_GPU void mask_lane(__local float *s_row, int c0, long k0, long tile_keys,
                             long row_keys, long tile_begin, long row_begin)
{
    bool needs_mask = tile_keys < k0 + BLOCK_C;
    long allowed = row_keys - k0; /* the row's keys [0, allowed) of the tile */
    if (needs_mask) {
        for (int c = (int)max(allowed, (long)c0); c < c0 + LANE_KEYS; c++)
            s_row[c] = -INFINITY;
    }
    if ((FEATURES & FA_FEATURE_WINDOW) && k0 < tile_begin) { /* keys [0, row_begin - k0) */
        for (int c = c0; c < (int)min(row_begin - k0, (long)(c0 + LANE_KEYS)); c++)
            s_row[c] = -INFINITY;
    }
}

/* m/l update (online softmax) of row r from its lane's keys s_lane: S becomes P; l counts P
 * before dropout (P Z with Z = dropout_scale for a kept key, 0 for a dropped one, on the
 * lane's keys from key0, lane_keys of them); returns alpha, which rescales the earlier O and
 * l. The row's max and sum meet across its lanes; the sum's barrier also shows each lane the
 * others' P. */
INLINE_ON_GPU float softmax_update(__local float *s_lane, __local float *share_max,
                                   __local float *share_sum, int r, int lane, float *m, float *l,
                                   const fa_kernel_params *p, long b, long h, long row,
                                   long key0, int lane_keys)
{
    float m_new = fmax(*m, across_lanes_max(share_max, r, lane, lane_max(s_lane)));
    float m_use = m_new == -INFINITY ? 0.0f : m_new;
    float alpha = exp2(*m - m_use), p_sum = lane_exp(s_lane, m_use);
    if ((FEATURES & FA_FEATURE_DROPOUT) && row < p->seqlen_q)
        dropout_row(s_lane, p, b, h, row, key0, lane_keys);
    *l = *l * alpha + across_lanes_sum(share_sum, r, lane, p_sum);
    *m = m_new;
    return alpha;
}

/* The forward's output: the storage type, or f32 partials for flash_merge under SPLIT. O's row
 * `row` of the item (token q_start + row, row stride o_stride_s), or (SPLIT) its split's
 * partial's row (parts_offset + split * parts_stride + the parts layout). */
#if SPLIT
typedef float out_t;
#define STORE_OUT_DIMS(v, ptr) STORE_DIMS_PRIVATE(v, ptr)
#else
typedef store_t out_t;
#define STORE_OUT_DIMS(v, ptr) store_dims(v, ptr)
#endif
__global out_t *out_row(__global out_t *o, const fa_kernel_params *p, const fwd_item *it,
                        long row)
{
    const long t = it->seq.q_start + row;
    if (SPLIT)
        return o + p->parts_offset + it->split * p->parts_stride + it->b * p->parts_stride_b +
               it->h * p->parts_stride_h + t * p->parts_stride_s;
    return o + p->o_offset + it->b * p->o_stride_b + it->h * p->o_stride_h + t * p->o_stride_s;
}

/* The LSE of the item's row `row` at its LSE index (fa_lse_index): when asked, or (SPLIT)
 * always, as its split's partial at lse_parts_offset + split * part_rows + that index. A row
 * with no allowed key (l == 0) has LSE -inf (with a finite sink: the sink); a NaN l gives NaN. */
void store_lse(__global float *lse, const fa_kernel_params *p, const fwd_item *it, long row,
               float m, float l)
{
    const float row_lse = l == 0.0f ? -INFINITY : (m + log2(l)) * LN2;
    const long at = fa_lse_index(p, it->b, it->h, it->seq.q_start, row);
    if (SPLIT)
        lse[p->lse_parts_offset + it->split * p->part_rows + at] = row_lse;
    else if (p->has_lse)
        lse[at] = row_lse;
}

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
 * conversion it shares; f32 and bf16 gained nothing (history.md, ch. 12), so they go row by
 * row. */
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


/* The work-group's item (fwd_item) in one work-item that holds all Br rows of the tile
 * (ITEM_ROWS), reading K and V rows in global memory: the rows take each key tile in turn, so
 * the tile comes from memory once and from the cache after. Rows past Sq are skipped (one
 * item, no barrier to meet). p: the sequence's (SEQ_SETUP). The local K/V tiles and the lanes'
 * share are unused (one lane, TPR 1). */
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
    const int item_rows = (int)min((long)ITEM_ROWS, sq - r0); /* rows r0 + r, r < item_rows */
    /* Row 0 of K[b][h_kv] and V[b][h_kv]: Sk x d, row strides k_stride_s, v_stride_s. */
    __global const store_t *k_head = key_head(k, p->k_offset, p->k_stride_b, p->k_stride_h,
                                              p->k_stride_s, b, h_kv, it->seq.k_start);
    __global const store_t *v_head = key_head(v, p->v_offset, p->v_stride_b, p->v_stride_h,
                                              p->v_stride_s, b, h_kv, it->seq.k_start);

    /* Load Q tile, as is (Br x d), for the dot products along d. */
    load_q_tile(q_tile, q, p, it, 0);

    /* The tile's key range, and the bounds its rows' masks share (rule_r0: PACKED, every row
     * reads the last one's): the fewest keys of any row, the last row's first key. */
    const long rule_r0 = rule_row(sq, r0);
    long kv_begin, kv_end;
    item_keys(kv_range, p, it, rule_r0, &kv_begin, &kv_end);
    const long tile_keys = fa_keys_end(p, MASK, FEATURES, rule_r0);
    const long tile_begin = fa_keys_begin(p, FEATURES, min(rule_r0 + BLOCK_R, sq) - 1);

    /* Each row's state: where its keys end and begin (mask, window), its modifier inputs, and
     * the online softmax's m, l and O. */
    long row_keys[ITEM_ROWS], row_begin[ITEM_ROWS];
    row_mods mods[ITEM_ROWS];
    float m[ITEM_ROWS], l[ITEM_ROWS];
    float_dims acc[ITEM_ROWS][VECS_PER_O_ROW]; /* acc[r][dvec]: O[r][DIMS_PER_VEC * dvec ..] */
    for (int r = 0; r < item_rows; r++) {
        const long rule = rule_row(sq, r0 + r), q_head = q_head_of(h, sq, r0 + r);
        row_keys[r] = fa_keys_end(p, MASK, FEATURES, rule);
        row_begin[r] = fa_keys_begin(p, FEATURES, rule);
        mods[r] = row_mods_of(p ALIBI_PASS BIAS_PASS, b, q_head, rule);
        initial_state(&m[r], &l[r], it->split, q_head SINKS_PASS);
        UNROLL_ON_GPU
        for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++)
            acc[r][dvec] = 0.0f;
    }

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc. */
    for (long k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        int valid_keys = (int)min((long)BLOCK_C, sk - k0); /* keys [0, valid_keys) exist */
        int lane_keys = clamp(valid_keys, 0, LANE_KEYS);     /* of them, the one lane's */
        if (!tile_listed(lists, p, b, h, r0, r0 + item_rows, k0, k0 + valid_keys))
            continue; /* block-sparse: no row of the tile lists a key block of it */
        const bool full = tile_full(lists, p, b, h, r0, r0 + item_rows, k0, k0 + valid_keys);
        /* S = Q K^T * scale (in log2 units, for exp2) for all the rows, from K in global
         * memory. */
        direct_scores_rows(s_tile, q_tile, r0, item_rows, k_head, k0, valid_keys, p->k_stride_b,
                           p->k_stride_s, p, block_table, b, SCORE_SCALE(*p));
        /* One row at a time: the rows after the first read the tile's V rows from the cache. */
        for (int r = 0; r < item_rows; r++) {
            const long row = r0 + r;
            __local float *s_row = s_tile + r * BLOCK_C; /* S[r][0 .. Bc) */
            /* The score modifiers: softcap, + ALiBi, + bias. */
            row_mods tile_mods;
            const row_mods *lane_mods = lane_mods_at(&tile_mods, &mods[r], k0, lane_keys);
            if (FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI))
                modify_row(s_row, p, lane_mods); /* direct_scores_rows made S */
            add_bias(s_row, lane_mods);

            /* Mask (none in a tile of full blocks) */
            if (!full) {
                mask_lane(s_row, 0, k0, tile_keys, row_keys[r], tile_begin, row_begin[r]);
                mask_unlisted(s_row, 0, LANE_KEYS, k0, row, lists, p, b, h);
            }

            /* m/l update (online softmax); S becomes P */
            float alpha = softmax_update(s_row, share_max, share_sum, r, 0, &m[r], &l[r], p, b,
                                         h, row, k0, lane_keys);

            /* Rescale O, then accumulate P V: O[r][x] += sum_c P[r][c] * V[c][x], c in
             * [0, valid_keys) (keys past it have P = 0 and are skipped), V from row r's V head
             * (heads packing: its K/V head's; else v_head). */
            UNROLL_ON_GPU
            for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++)
                acc[r][dvec] *= alpha;
            __global const store_t *v_row_head = ROW_HEAD(v_head, p->v_stride_h, r0, r);
            for (int c = 0; c < valid_keys; c++) {
                float p_c = s_row[c]; /* P[r][c] */
                __global const store_t *v_row = /* V[k0 + c][0 ..] in global memory */
                    v_row_head + key_row(k0 + c, p->v_stride_b, p->v_stride_s, p, block_table, b);
#pragma unroll
                for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++)
                    acc[r][dvec] += p_c * LOAD_GLOBAL_DIMS_F32(v_row + dvec * DIMS_PER_VEC);
            }
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0; a NaN l gives NaN.
     * O[b][h][row][x] = acc / l (out_row: or split-KV's f32 partial), and the row's LSE. */
    for (int r = 0; r < item_rows; r++) {
        if (r0 + r >= sq) /* never (item_rows stops first), yet kept: without it pocl 3.1 */
            return;       /* stored f16 O rows with aligned moves (a fault at odd offsets) */
        float inv_l = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
        __global out_t *o_row = out_row(o, p, it, r0 + r);
        UNROLL_ON_GPU
        for (int dvec = 0; dvec < VECS_PER_O_ROW; dvec++)
            STORE_OUT_DIMS(acc[r][dvec] * inv_l, o_row + dvec * DIMS_PER_VEC);
        store_lse(lse, p, it, r0 + r, m[r], l[r]);
    }
}
#elif REG_BLOCKED
/* The register-blocked path's fwd_tile (CPUs): flash_fwd_blocked.cl, which follows this file. */
ALWAYS_INLINE void fwd_tile(__global const store_t *q, __global const store_t *k,
                            __global const store_t *v, __global out_t *o,
                            __global float *lse ALIBI_ARG BIAS_ARG SINKS_ARG,
                            __global const int *block_table, const block_lists *lists,
                            const fa_kernel_params *p, const fwd_item *it,
                            __local tile_t *q_tile, __local tile_t *k_tile,
                            __local tile_t *v_tile, __local float *s_tile,
                            __local float *o_tile, __local float *share_max,
                            __local float *share_sum, __local long *kv_range);
#else
/* ---- the staged path: K and V tiles in local memory, TPR lanes per query row ---------------- */

/* Loads K/V tile rows [k0, k0 + Bc) of K and V (row 0 at k_head, v_head: key_head) into
 * k_tile (K^T: d x Bc) and v_tile (V: Bc x d), once the previous tiles are no longer read. */
INLINE_ON_GPU void load_kv_tiles(__local tile_t *k_tile, __local tile_t *v_tile,
                                 __global const store_t *k_head, __global const store_t *v_head,
                                 long k0, const fa_kernel_params *p,
                                 __global const int *block_table, long b)
{
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous tiles are no longer read */
    load_keys(k_tile, k_head, k0, p->seqlen_k, p->k_stride_b, p->k_stride_s, 1, p, block_table, b);
    load_keys(v_tile, v_head, k0, p->seqlen_k, p->v_stride_b, p->v_stride_s, 0, p, block_table, b);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The work-group's item (fwd_item) with its tiles in local memory: work-item (r, lane) =
 * get_local_id(0) / TPR, % TPR owns query row r0 + r of the tile, keys [c0, c0 + Bc / TPR) of
 * each S row (c0 = lane * Bc / TPR) and elements [lane * d / TPR, + d / TPR) of its O row; a
 * row's lanes are neighbours (they read one Q column, and neighbouring parts of a K^T and a V
 * row). Rows past Sq compute on zeros, as their lanes meet others, and write nothing. p: the
 * sequence's (SEQ_SETUP). */
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
    const int r = (int)(get_local_id(0) / TPR), lane = (int)(get_local_id(0) % TPR);
    const int c0 = lane * LANE_KEYS; /* its keys [c0, c0 + Bc / TPR) of a tile */
    const long b = it->b, h = it->h;
    const long r0 = it->tile * BLOCK_R, row = r0 + r; /* first query row of the tile; its row */
    const long h_kv = h / (p->heads_q / p->heads_kv); /* GQA: query heads share a K/V head */
    const long sq = p->seqlen_q, sk = p->seqlen_k;
    /* Row 0 of K[b][h_kv] and V[b][h_kv]: Sk x d, row strides k_stride_s, v_stride_s. */
    __global const store_t *k_head = key_head(k, p->k_offset, p->k_stride_b, p->k_stride_h,
                                              p->k_stride_s, b, h_kv, it->seq.k_start);
    __global const store_t *v_head = key_head(v, p->v_offset, p->v_stride_b, p->v_stride_h,
                                              p->v_stride_s, b, h_kv, it->seq.k_start);
    __local float *s_row = s_tile + r * BLOCK_C; /* S[r][0 .. Bc) */
    __local float *s_lane = s_row + c0;          /* S[r][c0 .. c0 + Bc / TPR) */

    /* Load Q tile, stored transposed: Q^T, d x Br. */
    load_q_tile(q_tile, q, p, it, 1);

    /* The tile's key range, and the bounds its rows' masks share (rule_r0: PACKED, every row
     * reads the last one's): the fewest keys of any row, the last row's first key. */
    const long rule_r0 = rule_row(sq, r0);
    long kv_begin, kv_end;
    item_keys(kv_range, p, it, rule_r0, &kv_begin, &kv_end);
    const long tile_keys = fa_keys_end(p, MASK, FEATURES, rule_r0);
    const long tile_begin = fa_keys_begin(p, FEATURES, min(rule_r0 + BLOCK_R, sq) - 1);

    /* The row's state: where its keys end and begin (mask, window), its modifier inputs, and
     * the online softmax's m, l and O. */
    const long rule = rule_row(sq, row), q_head = q_head_of(h, sq, row);
    const long row_keys = fa_keys_end(p, MASK, FEATURES, rule);
    const long row_begin = fa_keys_begin(p, FEATURES, rule);
    const row_mods mods = row_mods_of(p ALIBI_PASS BIAS_PASS, b, q_head, rule);
    float m, l; /* running max (log2 units) and sum; a sink is their initial state */
    initial_state(&m, &l, it->split, q_head SINKS_PASS);
    /* acc[dvec]: O[r][lane * d / TPR + DIMS_PER_VEC * dvec ..] */
    float_dims acc[VECS_PER_LANE_DIMS];
    UNROLL_ON_GPU
    for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
        acc[dvec] = 0.0f;

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc. */
    for (long k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        int valid_keys = (int)min((long)BLOCK_C, sk - k0); /* keys [0, valid_keys) exist */
        if (!tile_listed(lists, p, b, h, r0, min(r0 + BLOCK_R, sq), k0, k0 + valid_keys))
            continue; /* block-sparse: no row of the tile lists a key block of it (uniform) */
        const bool full = tile_full(lists, p, b, h, r0, min(r0 + BLOCK_R, sq), k0, k0 + valid_keys);
        load_kv_tiles(k_tile, v_tile, k_head, v_head, k0, p, block_table, b);
        int lane_keys = clamp(valid_keys - c0, 0, LANE_KEYS); /* of the lane's keys */

        /* S = Q K^T * scale (in log2 units, for exp2): S[r][c] for the lane's c; then the score
         * modifiers: softcap, + ALiBi (both as row_scores makes S) + bias. */
        row_mods tile_mods;
        const row_mods *lane_mods = lane_mods_at(&tile_mods, &mods, k0 + c0, lane_keys);
        row_scores(s_lane, q_tile + r, k_tile + c0, SCORE_SCALE(*p), p, lane_mods);
        add_bias(s_lane, lane_mods);

        /* Mask (none in a tile of full blocks) */
        if (!full) {
            mask_lane(s_row, c0, k0, tile_keys, row_keys, tile_begin, row_begin);
            mask_unlisted(s_row, c0, c0 + LANE_KEYS, k0, row, lists, p, b, h);
        }

        /* m/l update (online softmax); S becomes P */
        float alpha = softmax_update(s_lane, share_max, share_sum, r, lane, &m, &l, p, b, h, row,
                                     k0 + c0, lane_keys);

        /* Rescale O, then accumulate P V: O[r][x] += sum_c P[r][c] * V[c][x] for the lane's x,
         * c in [0, valid_keys) (keys past it have P = 0 and are skipped). */
        UNROLL_ON_GPU
        for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
            acc[dvec] *= alpha;
        for (int c = 0; c < valid_keys; c++) {
            float p_c = s_row[c];                                            /* P[r][c] */
            __local const tile_t *v_row = v_tile + c * HEAD_DIM + lane * LANE_DIMS; /* V[c][..] */
#pragma unroll
            for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
                acc[dvec] += p_c * LOAD_DIMS_F32(v_row + dvec * DIMS_PER_VEC);
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0; a NaN l gives NaN.
     * O[b][h][row][x] = acc / l (out_row: or split-KV's f32 partial); the LSE by lane 0. */
    if (row >= sq)
        return;
    float inv_l = l == 0.0f ? 0.0f : 1.0f / l;
    __global out_t *o_row = out_row(o, p, it, row) + lane * LANE_DIMS;
    UNROLL_ON_GPU
    for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
        STORE_OUT_DIMS(acc[dvec] * inv_l, o_row + dvec * DIMS_PER_VEC);
    if (lane == 0)
        store_lse(lse, p, it, row, m, l);
}
#endif

/* ---- the kernel: one work-group per (Q tile, head, batch), with SPLIT per key chunk too ----- */

/* The kernel's local memory beyond the Q and S tiles, declared at its scope (OpenCL C 1.2 has
 * no other place for it), only where used: a null pointer stands for what a kernel lacks (an
 * unused array still takes pocl's local memory, and one of a few bytes misaligned the tiles
 * after it). The staged and register-blocked paths' K^T (d x Bc) and V (Bc x d) tiles; the
 * register-blocked path's f32 O tile; the lanes' share of a row's max and sum (across_lanes_*,
 * TPR > 1); the tile loop's bounds (item_keys: LOCAL_RANGE). */
#if DIRECT_KV
#define LOCAL_KV_TILES __local tile_t *k_tile = 0, *v_tile = 0
#else
#define LOCAL_KV_TILES __local tile_t k_tile[HEAD_DIM * BLOCK_C], v_tile[BLOCK_C * HEAD_DIM]
#endif
#if REG_BLOCKED /* the f32 O tile, Br x d */
#define LOCAL_O_TILE __local float o_tile[BLOCK_R * HEAD_DIM]
#else
#define LOCAL_O_TILE __local float *o_tile = 0
#endif
#if TPR > 1
#define LOCAL_LANE_SHARES __local float share_max[TPR * BLOCK_R], share_sum[TPR * BLOCK_R]
#else
#define LOCAL_LANE_SHARES __local float *share_max = 0, *share_sum = 0
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_fwd(__global const store_t *q, __global const store_t *k, __global const store_t *v,
          __global out_t *o, __global float *lse ALIBI_ARG BIAS_ARG SINKS_ARG SEQ_ARG LISTS_ARG,
          PARAMS_ARG)
{
    __local tile_t q_tile[HEAD_DIM * BLOCK_R]; /* Q^T: d x Br (DIRECT_KV, REG_BLOCKED: Q) */
    LOCAL_KV_TILES;                            /* K^T: d x Bc, V: Bc x d */
    __local float s_tile[BLOCK_R * BLOCK_C];   /* S, then P: Br x Bc f32 */
    LOCAL_O_TILE;
    LOCAL_LANE_SHARES;
    LOCAL_RANGE(kv_range);

    const long b = (long)get_group_id(2);
    SEQ_SETUP(b); /* p: sequence b's lengths; its rows start at token seq.q_start */
    LISTS_SETUP;  /* lists: the block-sparse lists (null pointers without them) */
    const fwd_item it = fwd_item_of(&p, seq, b);
    if (SEQ && it.tile * BLOCK_R >= p.seqlen_q)
        return; /* a tile past a shorter sequence's rows, the whole work-group */
    fwd_tile(q, k, v, o, lse ALIBI_PASS BIAS_PASS SINKS_PASS, BLOCK_TABLE_PTR, &lists, &p, &it,
             q_tile, k_tile, v_tile, s_tile, o_tile, share_max, share_sum, kv_range);
}

/* Compiled on its own, this file brings in the register-blocked path after it, as the library's
 * forward program holds it (cl_program.c). */
#if defined(FA_KERNELS_ALONE) && REG_BLOCKED
#include "flash_blocks.cl"
#include "flash_fwd_blocked.cl"
#endif
