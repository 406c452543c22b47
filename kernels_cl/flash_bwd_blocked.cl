/*
 * flash_bwd_blocked.cl - the backward's register-blocked passes (REG_BLOCKED), which the OpenCL
 * rules choose for CPU devices only (backends/opencl/cl_rules.c), in place of the staged
 * flash_bwd_dkdv and flash_bwd_dq of flash_bwd.cl (same names, arguments and grid; one
 * work-item per work-group). One work-item owns a tile (dK/dV pass: BLOCK_R keys; dQ pass:
 * BLOCK_R query rows) with its f32 gradient tiles, copies each streamed tile once as f32
 * (transposed where a product reads its columns), and runs the pass's products on REG_ROWS
 * own rows at a time (flash_blocks.cl), each loaded vector used by REG_ROWS accumulators:
 *
 *   dK/dV pass: S^T = K Q^T, dP^T = V dO^T; then P^T, dS^T; dV += P^T dO, dK += dS^T Q.
 *   dQ pass:    S = Q K^T,   dP = dO V^T;   then P, dS;     dQ += dS K.
 *
 * Between the products a block's REG_ROWS rows of S and dP pass through the staged passes' row
 * helpers (flash_bwd.cl: the modifiers, the mask, dropout, block-sparse lists, P and dS with
 * the forward's exp2_keys), so every feature of the staged backward runs here too. Each
 * gradient element has one writer and a fixed summation order: no atomics.
 *
 * Part of the backward program after flash_bwd.cl and flash_blocks.cl; its kernels begin as the
 * staged ones do, with their helpers (DKDV_SETUP and DQ_SETUP, the tiles' loads: flash_bwd.cl).
 */
#if REG_BLOCKED
#if !(DTYPE == 0 || TILE_F32) || TPR != 1 || WG_SIZE != 1 || BLOCK_C % REG_ROWS != 0
#error "REG_BLOCKED backward: f32 tiles, one work-item per tile, Bc a multiple of REG_ROWS"
#endif

/* block_values' row scales (a private array, as it takes them): a gradient tile only adds,
 * it is never rescaled. */
#define KEEP_ROWS(name) const float name[REG_ROWS] = {1.0f, 1.0f, 1.0f, 1.0f}

/* Sets the n x d f32 tile to 0. */
void zero_rows(__local float *tile, int n)
{
    for (int idx = 0; idx < n * HEAD_DIM; idx += DIMS_PER_VEC)
        O_STORE_DIMS((float_dims)0.0f, tile + idx);
}

/* Writes mul * rows [0, n) of an f32 n x d tile to global rows dst, dst + stride, ... in the
 * storage type (store_row_scaled's rounding). */
void store_rows_scaled(__local const float *tile, int n, float mul, __global store_t *dst,
                       long stride)
{
    for (int r = 0; r < n; r++) {
        float_dims row[VECS_PER_LANE_DIMS];
        for (int dvec = 0; dvec < VECS_PER_LANE_DIMS; dvec++)
            row[dvec] = O_LOAD_DIMS(tile + r * HEAD_DIM + dvec * DIMS_PER_VEC);
        store_row_scaled(row, mul, dst + r * stride);
    }
}

/* ---- the dK/dV pass ------------------------------------------------------------------------ */

/* Dropout's keep factors of one key's row (Bc floats), declared only with dropout. */
#if FEATURES & FA_FEATURE_DROPOUT
#define LOCAL_Z_ROW __local float z_row[BLOCK_C]
#else
#define LOCAL_Z_ROW __local float *z_row = 0
#endif

/* x[c] *= z[c] over a row of Bc (dropout's keep factors, 0 or dropout_scale). */
void times_row(__local float *x, __local const float *z)
{
    for (int at = 0; at < BLOCK_C; at += KEYS_PER_VEC)
        S_STORE_KEYS(S_LOAD_KEYS(x + at) * S_LOAD_KEYS(z + at), x + at);
}

/* The rows of P^T and dS^T of keys key0 + i, i < REG_ROWS (st_rows: S^T, dpt_rows: dP^T, Bc
 * apart) against the query tile at r0 of head h: dropout's Z on dP^T, the modifiers and the
 * mask, P^T and dS^T, Z on P^T, the unlisted blocks' zeros, as the staged pass does per key.
 * Z is drawn once per key into z_row (Bc floats) and serves both (the staged pass draws it
 * twice). */
void dkdv_block_grads(__local float *st_rows, __local float *dpt_rows, __local float *z_row,
                      const fa_kernel_params *p ALIBI_ARG BIAS_ARG, const list_view *view,
                      long b, long h, long key0, long r0, bool full, __local const float *lse2_v,
                      __local const float *d_v, __local const int *keys_v)
{
    for (int i = 0; i < REG_ROWS; i++) {
        const long key = key0 + i;
        __local float *st_row = st_rows + i * BLOCK_C, *dpt_row = dpt_rows + i * BLOCK_C;
        if (FEATURES & FA_FEATURE_DROPOUT) {
            for (int at = 0; at < BLOCK_C; at += KEYS_PER_VEC)
                S_STORE_KEYS((float_keys)1.0f, z_row + at);
            dropout_key_rows(z_row, p, b, h, key, r0, BLOCK_C); /* Z: 0 or dropout_scale */
            times_row(dpt_row, z_row);
        }
        if (GRAD_MODS) {
            grad_row_dkdv(st_row, dpt_row, p ALIBI_PASS BIAS_PASS, b, h, key, r0, 0, lse2_v, d_v,
                          keys_v);
        } else {
            for (int at = 0; at < BLOCK_C; at += KEYS_PER_VEC) /* key >= the row's keys: -inf */
                S_STORE_KEYS(select((float_keys)(-INFINITY), S_LOAD_KEYS(st_row + at),
                                    (int_keys)key < VLOAD_KEYS(keys_v + at)),
                             st_row + at);
            row_grad(st_row, dpt_row, lse2_v, d_v, 0.0f, 0.0f);
        }
        if (FEATURES & FA_FEATURE_DROPOUT)
            times_row(st_row, z_row);
        if (!full && key < p->seqlen_k)
            zero_unlisted(st_row, dpt_row, 0, BLOCK_C, r0, p->seqlen_q, key, view, p, b, h);
    }
}

/* Block-sparse, for a register block of own indices [o0, o_end) (4 rows or keys, within one
 * block) over the streamed [s0, s_end): whether it lists any block pair (else it is skipped),
 * and whether no score of it needs zeroing by the lists (every pair listed, or every pair a
 * full block): *unmasked. One pass over the pairs, as the tiles span several blocks. */
bool block_pairs(const list_view *v, const fa_kernel_params *p, long b, long h, long o0,
                 long o_end, long s0, long s_end, bool *unmasked)
{
    bool any = false, all = true;
    for (long ob = o0 / v->own_block; ob <= (o_end - 1) / v->own_block; ob++)
        for (long sb = s0 / v->streamed_block; sb <= (s_end - 1) / v->streamed_block; sb++) {
            const bool listed = view_listed(v, p, b, h, ob, sb, false);
            any |= listed;
            all &= listed;
        }
    *unmasked = all;
    return any;
}

/* dK = scale * dS^T Q and dV = P^T dO for one (key tile, K/V head, batch) in one work-item:
 * K, V (as is) and the f32 dK / scale and dV tiles of its BLOCK_R keys; per query tile of
 * BLOCK_C rows of every query head of the group, in order, Q^T, dO^T, Q and dO. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_dkdv(__global const store_t *q, __global const store_t *k, __global const store_t *v,
               __global const float *lse, __global const store_t *d_o,
               __global const float *delta, __global store_t *dk,
               __global store_t *dv ALIBI_ARG BIAS_ARG SEQ_ARG Q_LISTS_ARG, PARAMS_ARG)
{
    __local float k_tile[BLOCK_R * HEAD_DIM], v_tile[BLOCK_R * HEAD_DIM]; /* own keys x d */
    __local float dk_tile[BLOCK_R * HEAD_DIM], dv_tile[BLOCK_R * HEAD_DIM];
    __local float qt_tile[HEAD_DIM * BLOCK_C], dot_tile[HEAD_DIM * BLOCK_C]; /* d x rows */
    __local float q_tile[BLOCK_C * HEAD_DIM], do_tile[BLOCK_C * HEAD_DIM];   /* rows x d */
    __local float st_rows[REG_ROWS * BLOCK_C], dpt_rows[REG_ROWS * BLOCK_C]; /* a block's */
    LOCAL_Z_ROW;
    __local float lse2_v[BLOCK_C], d_v[BLOCK_C]; /* per query row of the tile */
    __local int keys_v[BLOCK_C];
    LOCAL_RANGE(rows_range);
    KEEP_ROWS(keep);

    DKDV_SETUP; /* k0, h_kv, b; p and seq (sequence b's), view; group, sq, sk */
    if (SEQ && k0 >= sk)
        return; /* a tile past a shorter sequence's keys */
    const int own_keys = (int)min((long)BLOCK_R, sk - k0); /* keys k0 + j, j < own_keys */

    /* Load the block's K and V tiles, as is (keys past Sk are zeros, never written). */
    load_own_keys(k_tile, v_tile, k, v, &p, b, h_kv, seq.k_start, k0, 0);
    zero_rows(dk_tile, BLOCK_R);
    zero_rows(dv_tile, BLOCK_R);
    long first, last_end; /* causal and window: the rows that see any of the keys */
    rows_seeing_keys(rows_range, k0, &p, &first, &last_end);

    /* Loop over the group's query heads, then their query tiles [r0, r0 + Bc), in order. */
    for (long h = h_kv * group; h < (h_kv + 1) * group; h++) {
        __global const store_t *q_head = HEAD_ROW(q, q, &p, b, h, seq.q_start);
        __global const store_t *do_head = HEAD_ROW(d_o, do, &p, b, h, seq.q_start);
        for (long r0 = first; r0 < last_end; r0 += BLOCK_C) {
            const long r_end = min(r0 + BLOCK_C, sq);
            if (!pass_tile_listed(&view, &p, b, h, k0, k0 + own_keys, r0, r_end))
                continue; /* block-sparse: the keys' blocks list none of the tile's blocks */
            const bool full = pass_tile_full(&view, &p, b, h, k0, k0 + own_keys, r0, r_end);
            /* Load the query tile: Q and dO (transposed and as is), the rows' LSE, D and keys. */
            load_query_tile(qt_tile, dot_tile, q_tile, do_tile, q_head, do_head, &p, r0);
            load_row_stats(lse2_v, d_v, keys_v, lse, delta, &p, b, h, seq.q_start, r0);

            /* One register block of REG_ROWS keys at a time, skipping those no row of the
             * tile sees (causal, window: the rows seeing a key only move on with it). */
            for (int kb = 0; kb < own_keys; kb += REG_ROWS) {
                const long key0 = k0 + kb, key_end = min(key0 + REG_ROWS, k0 + own_keys);
                if (first_row_seeing(key0, &p) >= r_end ||
                    rows_seeing_end(key0 + REG_ROWS - 1, &p) <= r0)
                    continue;
                /* Block-sparse: the block's keys lie in one key block (16 keys or more), whose
                 * list decides for all four; the tile may span several (cl_rules.c). */
                bool unmasked = false;
                if ((FEATURES & FA_FEATURE_BLOCK_SPARSE) &&
                    !block_pairs(&view, &p, b, h, key0, key_end, r0, r_end, &unmasked))
                    continue;
                /* S^T = K Q^T (log2 units) and dP^T = V dO^T */
                block_scores(st_rows, k_tile + kb * HEAD_DIM, qt_tile, SCORE_SCALE(p), 0, BLOCK_C);
                block_scores(dpt_rows, v_tile + kb * HEAD_DIM, dot_tile, 1.0f, 0, BLOCK_C);
                /* Dropout, modifiers, mask, lists: P^T and dS^T = P^T (Z dP^T - D) dcap */
                dkdv_block_grads(st_rows, dpt_rows, z_row, &p ALIBI_PASS BIAS_PASS, &view, b, h,
                                 key0, r0, full || unmasked, lse2_v, d_v, keys_v);
                /* dK += dS^T Q and dV += P^T dO over the query rows that exist. */
                block_values(dk_tile + kb * HEAD_DIM, dpt_rows, q_tile, keep, 0,
                             (int)(r_end - r0));
                block_values(dv_tile + kb * HEAD_DIM, st_rows, do_tile, keep, 0,
                             (int)(r_end - r0));
            }
        }
    }

    /* dK = scale * dK tile and dV in the storage type (varlen: at token k_start + key). */
    const long t = seq.k_start + k0; /* the first key's row in dK and dV */
    store_rows_scaled(dk_tile, own_keys, p.scale, HEAD_ROW(dk, dk, &p, b, h_kv, t), p.dk_stride_s);
    store_rows_scaled(dv_tile, own_keys, 1.0f, HEAD_ROW(dv, dv, &p, b, h_kv, t), p.dv_stride_s);
}

/* ---- the dQ pass --------------------------------------------------------------------------- */

/* Per query row of the tile: its LSE (log2 units), D, and its keys [begin, end) (mask and
 * window; none for a row with no key or past Sq). */
typedef struct dq_rows {
    float lse2[BLOCK_R], d[BLOCK_R];
    long keys_begin[BLOCK_R], keys_end[BLOCK_R];
} dq_rows;

void dq_rows_of(dq_rows *rows, __global const float *lse, __global const float *delta,
                const fa_kernel_params *p, long b, long h, long q_start, long r0)
{
    for (int r = 0; r < BLOCK_R; r++) {
        const long row = r0 + r, at = fa_lse_index(p, b, h, q_start, row);
        const float l = row < p->seqlen_q ? lse[at] : -INFINITY;
        rows->lse2[r] = lse2_of(l);
        rows->d[r] = row < p->seqlen_q ? delta[at] : 0.0f;
        rows->keys_end[r] = l == -INFINITY ? 0 : fa_keys_end(p, MASK, FEATURES, row);
        rows->keys_begin[r] = fa_keys_begin(p, FEATURES, row);
    }
}

/* Whether rows rb + i, i < REG_ROWS, see none of the keys [k0, k_end). */
bool dq_block_unseen(const dq_rows *rows, int rb, long k0, long k_end)
{
    for (int i = 0; i < REG_ROWS; i++)
        if (rows->keys_end[rb + i] > k0 && rows->keys_begin[rb + i] < k_end)
            return false;
    return true;
}

/* The rows of P and dS of query rows r0 + rb + i, i < REG_ROWS (s_rows: S, dp_rows: dP, Bc
 * apart) against the key tile at k0: dropout's Z on dP, the modifiers and the mask, P and dS,
 * the unlisted blocks' zeros, as the staged pass does per row. */
void dq_block_grads(__local float *s_rows, __local float *dp_rows, const fa_kernel_params *p,
                    float slope BIAS_ARG, const list_view *view, const dq_rows *rows, long b,
                    long h, long r0, int rb, long k0, bool full)
{
    const long sk = p->seqlen_k;
    for (int i = 0; i < REG_ROWS; i++) {
        const int r = rb + i;
        const long row = r0 + r;
        __local float *s_row = s_rows + i * BLOCK_C, *dp_row = dp_rows + i * BLOCK_C;
        if (FEATURES & FA_FEATURE_DROPOUT)
            dropout_row(dp_row, p, b, h, row, k0, (int)clamp(sk - k0, 0L, (long)BLOCK_C));
        if (GRAD_MODS) {
            __global const bias_t *bias_row =
                row < p->seqlen_q ? bias_row_of(p BIAS_PASS, b, h, row) : 0;
            grad_row_dq(s_row, dp_row, p, slope, bias_row, row, k0, 0, rows->keys_begin[r],
                        rows->keys_end[r], rows->lse2[r], rows->d[r]);
        } else {
            plain_grad_dq(s_row, dp_row, k0, 0, rows->keys_end[r], rows->lse2[r], rows->d[r]);
        }
        if (!full && row < p->seqlen_q)
            zero_unlisted(s_row, dp_row, 0, BLOCK_C, k0, sk, row, view, p, b, h);
    }
}

/* dQ = scale * dS K for one (query tile, head, batch) in one work-item: Q, dO (as is) and the
 * f32 dQ / scale tile of its BLOCK_R rows; per key tile, K^T, V^T and K. The last query tiles
 * first, as the staged pass (the longest work-groups under a causal mask start first). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_dq(__global const store_t *q, __global const store_t *k, __global const store_t *v,
             __global const float *lse, __global const store_t *d_o,
             __global const float *delta,
             __global store_t *dq ALIBI_ARG BIAS_ARG SEQ_ARG LISTS_ARG, PARAMS_ARG)
{
    __local float q_tile[BLOCK_R * HEAD_DIM], do_tile[BLOCK_R * HEAD_DIM]; /* own rows x d */
    __local float dq_tile[BLOCK_R * HEAD_DIM];
    __local float kt_tile[HEAD_DIM * BLOCK_C], vt_tile[HEAD_DIM * BLOCK_C]; /* d x keys */
    __local float k_tile[BLOCK_C * HEAD_DIM];                               /* keys x d */
    __local float s_rows[REG_ROWS * BLOCK_C], dp_rows[REG_ROWS * BLOCK_C]; /* a block's */
    LOCAL_RANGE(kv_range);
    KEEP_ROWS(keep);

    DQ_SETUP; /* r0, h, b; p and seq (sequence b's), view; h_kv, sq, sk */
    if (SEQ && r0 >= sq)
        return; /* a tile past a shorter sequence's rows */
    const int own_rows = (int)min((long)BLOCK_R, sq - r0); /* rows r0 + r, r < own_rows */
    __global const store_t *k_head = KEY_HEAD(k, k, &p, b, h_kv, seq.k_start);
    __global const store_t *v_head = KEY_HEAD(v, v, &p, b, h_kv, seq.k_start);

    /* Load the Q and dO tiles, as is (rows past Sq are zeros; never written); dQ = 0. */
    load_own_rows(q_tile, do_tile, q, d_o, &p, b, h, seq.q_start, r0, 0);
    zero_rows(dq_tile, BLOCK_R);
    dq_rows rows;
    dq_rows_of(&rows, lse, delta, &p, b, h, seq.q_start, r0);
    const float slope = ALIBI_SLOPE(&p, b, h);
    long kv_begin, kv_end;
    loop_range(kv_range, keys_first_tile(&p, r0), keys_to_visit(&p, r0), &kv_begin, &kv_end);

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc. */
    for (long k0 = kv_begin; k0 < kv_end; k0 += BLOCK_C) {
        const long k_end = min(k0 + BLOCK_C, sk);
        if (!pass_tile_listed(&view, &p, b, h, r0, r0 + own_rows, k0, k_end))
            continue; /* block-sparse: the tile's query blocks list none of its key blocks */
        const bool full = pass_tile_full(&view, &p, b, h, r0, r0 + own_rows, k0, k_end);
        load_key_tile(kt_tile, vt_tile, k_tile, k_head, v_head, &p, k0);

        /* One register block of REG_ROWS rows at a time, skipping those that see no key of
         * the tile (causal, window, rows with no key or past Sq). */
        for (int rb = 0; rb < own_rows; rb += REG_ROWS) {
            if (dq_block_unseen(&rows, rb, k0, k_end))
                continue;
            /* Block-sparse: the block's rows lie in one query block, whose list decides. */
            const long row_end = r0 + min(rb + REG_ROWS, own_rows);
            bool unmasked = false;
            if ((FEATURES & FA_FEATURE_BLOCK_SPARSE) &&
                !block_pairs(&view, &p, b, h, r0 + rb, row_end, k0, k_end, &unmasked))
                continue;
            /* S = Q K^T (log2 units) and dP = dO V^T */
            block_scores(s_rows, q_tile + rb * HEAD_DIM, kt_tile, SCORE_SCALE(p), 0, BLOCK_C);
            block_scores(dp_rows, do_tile + rb * HEAD_DIM, vt_tile, 1.0f, 0, BLOCK_C);
            /* Dropout, modifiers, mask, lists: P and dS = P (Z dP - D) dcap */
            dq_block_grads(s_rows, dp_rows, &p, slope BIAS_PASS, &view, &rows, b, h, r0, rb, k0,
                           full || unmasked);
            /* dQ += dS K over the keys that exist. */
            block_values(dq_tile + rb * HEAD_DIM, dp_rows, k_tile, keep, 0, (int)(k_end - k0));
        }
    }

    /* dQ = scale * dQ tile in the storage type. */
    store_rows_scaled(dq_tile, own_rows, p.scale, HEAD_ROW(dq, dq, &p, b, h, seq.q_start + r0),
                      p.dq_stride_s);
}
#endif
