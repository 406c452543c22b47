/*
 * flash_fwd.cu - the FlashAttention forward kernel (CUDA, compiled at run time by NVRTC):
 * O = softmax(Q K^T * scale) V with the online softmax of FlashAttention's Algorithm 1, never
 * materializing Sq x Sk scores. The same tile loop, with the same step comments in the same
 * order, as kernels_cl/flash_fwd.cl.
 *
 * One thread block per (Q tile, head, batch): grid (q_tiles, heads_q, batch); the block loops
 * over the grid's strides as well, so the host may fold dimensions past the grid limits
 * (65535 in y and z). THREADS_PER_ROW (the host's -DTPR) threads share one query row
 * (consecutive lanes of one warp): for S each owns the keys c = t, t + TPR, ...; for O the
 * head-dim elements x = t, t + TPR, ...; row maxima and sums are combined with warp shuffles.
 * The Q, K and V tiles live in dynamic shared memory in the storage type (Q and K transposed,
 * d x Br and d x Bc, so the threads of a warp read consecutive words), the S tile as Br x Bc
 * floats: exactly the planner's budget (Br*d + 2*Bc*d) * elem + Br*Bc*4, which the host passes
 * as the launch's shared memory.
 *
 * Two paths through the same loop, chosen by the host's plan (-DMMA):
 * - MMA 0, CUDA cores: the layout above, f32 accumulation, every architecture and dtype.
 * - MMA 1, tensor cores (sm_80+, f16/bf16, d a multiple of 16): one warp per 16 query rows;
 *   S = Q K^T and O += P V are mma.sync m16n8k16 with f32 accumulation, and S and P never leave
 *   registers (the accumulator fragment of S is, packed, the A fragment of P V). Q, K and V are
 *   row-major tiles in shared memory; no S tile.
 * Both paths share the tile loads, the online-softmax max step and the final 1/l and LSE rules
 * (the __device__ helpers before them).
 * The score modifiers and dropout (-DFEATURES, FA_FEATURE_* bits; -DBIAS_DTYPE) are compiled in
 * only when on, so a plain build is unchanged: softcap, ALiBi and bias change the score before
 * the mask (score_log2), the window narrows the mask and skips K tiles outside it, a sink is the
 * online softmax's initial state, and dropout scales or zeroes P after l has counted it, with
 * kernel_params.h's Philox words (one call per 4 keys) so every backend drops the same elements.
 * Their tensors follow the launch's own (ALiBi slopes, bias, sinks: src/op_launches.c).
 * Sequences (-DSEQ, FA_SEQ_* bits; their int32 buffers follow the modifiers'): each work item
 * takes its sequence's lengths (seq_of, SEQ_PARAMS), so masks and modifiers apply per sequence;
 * varlen rows and keys start at the sequence's tokens, paged keys are found through the block
 * table (load_key_tile), and LSE goes to fa_lse_index. Split-KV (-DSPLIT=1): grid x is
 * q_tiles * splits, chunk-major; each block visits one chunk of the keys (only the first starts
 * from the sink) and writes its normalised partial O (f32) and LSE into scratch for
 * flash_merge.cu.
 * Block-sparse (FEATURES & FA_FEATURE_BLOCK_SPARSE; its int32 lists follow the sequences'): the
 * K/V loop visits only the tiles of key blocks the tile's query blocks list (next_listed_tile)
 * and the mask also removes keys of blocks a row's own block does not list; a row whose blocks
 * over a tile are all in the full lists (SPARSE_FULL=1) skips the mask and window test there.
 * The tunables, the storage type and the sequences' plumbing are in flash_common.cu, the K/V
 * tile copies (paged, and PIPELINE's asynchronous double buffers) in flash_kv.cu, which the host
 * prepends (with kernel_params.h); this file includes them when compiled alone (-I src
 * -I kernels_cu).
 */
#ifndef FA_FLASH_KV_CU
#include "flash_kv.cu"
#endif
#define FA_FLASH_FWD_CU /* flash_bwd.cu builds on this file */

/* Waits until the previous work item no longer reads the tiles, then loads the Q tile: rows
 * [r0, r0 + Br) of Q[b][h] of the sequence whose rows start at token q_start (Sq x d, row stride
 * q_stride_s) into q_tile, Br x d or, transposed, d x Br. Rows past Sq are zeros; their results
 * are never written. */
__device__ __forceinline__ void load_q_tile(store_t *q_tile, const store_t *q,
                                            const fa_kernel_params &p, i64 b, i64 h,
                                            i64 q_start, i64 r0, bool transposed)
{
    __syncthreads();
    load_tile(q_tile,
              q + p.q_offset + b * p.q_stride_b + h * p.q_stride_h + q_start * p.q_stride_s, r0,
              p.seqlen_q, p.q_stride_s, BLOCK_R, transposed);
}

/* The keys [keys_to_skip, keys_to_visit) that the tile starting at row r0 visits: up to the
 * last key its last row may attend to, so causal launches skip K tiles entirely past the
 * diagonal; with a window, from the Bc-aligned tile of its first row's first key, so tiles
 * wholly left of the window are skipped too (both bounds never decrease with the row). */
__device__ __forceinline__ i64 keys_to_visit(const fa_kernel_params &p, i64 r0)
{
    return fa_keys_end(&p, MASK, FEATURES, min(r0 + BLOCK_R, p.seqlen_q) - 1);
}

__device__ __forceinline__ i64 keys_to_skip(const fa_kernel_params &p, i64 r0)
{
    return fa_keys_begin(&p, FEATURES, r0) / BLOCK_C * BLOCK_C;
}

/* ---- the score modifiers and dropout (FEATURES; kernel_params.h states the rules) ---------- */
#if BIAS_DTYPE == 0
typedef float bias_t; /* the bias's element: f32 or the storage type */
__device__ __forceinline__ float bias_to_f32(bias_t v) { return v; }
#else
typedef store_t bias_t;
__device__ __forceinline__ float bias_to_f32(bias_t v) { return to_f32(v); }
#endif

/* The modifier tensors of a launch, in the host's order (src/op_launches.c add_modifier_args):
 * those of the features compiled in follow the launch's own tensors; absent ones are null here. */
struct modifier_args {
    const float *alibi;  /* ALiBi slopes f32 [Hq], or [B, Hq] (alibi_stride_b) */
    const bias_t *bias;  /* bias [B, Hq, Sq, Sk] (bias_* params), keys contiguous */
    const float *sinks;  /* sink logits f32 [Hq] */
};
#if FEATURES & FA_FEATURE_ALIBI
#define ALIBI_PARAM const float *__restrict__ alibi,
#define ALIBI_ARG alibi
#else
#define ALIBI_PARAM
#define ALIBI_ARG nullptr
#endif
#if FEATURES & FA_FEATURE_BIAS
#define BIAS_PARAM const bias_t *__restrict__ bias,
#define BIAS_ARG bias
#else
#define BIAS_PARAM
#define BIAS_ARG nullptr
#endif
#if FEATURES & FA_FEATURE_SINKS
#define SINKS_PARAM const float *__restrict__ sinks,
#define SINKS_ARG sinks
#else
#define SINKS_PARAM
#define SINKS_ARG nullptr
#endif

/* What the modifiers read for one (batch b, query head h). */
struct head_mods {
    float slope;         /* ALiBi slope of head h (natural units) */
    const bias_t *bias;  /* bias[b][h][0][0] */
    float sink_log2;     /* sink[h] * log2(e); -inf: no sink */
};

__device__ __forceinline__ head_mods head_mods_of(const modifier_args &a,
                                                  const fa_kernel_params &p, i64 b, i64 h)
{
    head_mods hm = {0.0f, nullptr, NEG_INF};
#if FEATURES & FA_FEATURE_ALIBI
    hm.slope = a.alibi[((FEATURES & FA_FEATURE_ALIBI_BATCH) ? b * p.alibi_stride_b : 0) + h];
#endif
#if FEATURES & FA_FEATURE_BIAS
    hm.bias = a.bias + p.bias_offset + b * p.bias_stride_b + h * p.bias_stride_h;
#endif
#if FEATURES & FA_FEATURE_SINKS
    if (a.sinks) /* the backward's passes get no sinks: LSE already holds them */
        hm.sink_log2 = a.sinks[h] * LOG2E;
#endif
    (void)a;
    (void)p;
    (void)b;
    (void)h;
    return hm;
}

/* The score of (row, key) in log2 units, for exp2, from dot = q.k: s = scale * dot, then, in
 * natural units, softcap (s = cap * tanh(s / cap)), ALiBi (s -= slope * |i' - key|, i' = row +
 * fa_diagonal) and bias (s += bias[b][h][row][key]). Only for rows < Sq and keys < Sk (the
 * bias is read).
 * dcap (the backward's): when not null, receives d softcap(s) / ds = 1 - tanh^2(s / cap); it is
 * left as it is without softcap. */
__device__ __forceinline__ float score_log2(float dot, const fa_kernel_params &p,
                                            const head_mods &hm, i64 row, i64 key,
                                            float *dcap = nullptr)
{
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS)
    float s = dot * p.scale;
#if FEATURES & FA_FEATURE_SOFTCAP
    const float th = tanhf(s / p.softcap);
    s = p.softcap * th;
    if (dcap)
        *dcap = 1.0f - th * th;
#endif
#if FEATURES & FA_FEATURE_ALIBI
    i64 dist = row + fa_diagonal(&p, 1) - key;
    s -= hm.slope * (float)(dist < 0 ? -dist : dist);
#endif
#if FEATURES & FA_FEATURE_BIAS
    s += bias_to_f32(hm.bias[row * p.bias_stride_s + key]);
#endif
    (void)hm;
    (void)row;
    (void)key;
    (void)dcap;
    return s * LOG2E;
#else
    (void)hm;
    (void)row;
    (void)key;
    (void)dcap;
    return dot * p.scale_log2;
#endif
}

/* The online softmax's initial state of a row: with a sink, a key of score sink and V = 0
 * (m = sink, l = exp2(0) = 1), unless the sink is -inf; else m = -inf, l = 0. */
__device__ __forceinline__ void initial_state(const head_mods &hm, float *m, float *l)
{
    *m = hm.sink_log2;
    *l = hm.sink_log2 == NEG_INF ? 0.0f : 1.0f;
}

/* Dropout's factor for one probability from its Philox word: dropout_scale when kept, 0 when
 * dropped. */
__device__ __forceinline__ float dropout_factor(const fa_kernel_params &p, fa_kp_u32 word)
{
    return word >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

/* Word i (0..3) of a Philox call, by selects: a register array indexed at run time would be
 * placed in local memory. */
__device__ __forceinline__ fa_kp_u32 word_at(const fa_kp_u32 w[4], i64 i)
{
    return (i & 2) ? ((i & 1) ? w[3] : w[2]) : ((i & 1) ? w[1] : w[0]);
}

#if FEATURES & FA_FEATURE_DROPOUT
/* Dropout's factors z[e] of one 8-key mma block (the tensor-core paths of the forward and the
 * dQ pass): element e is row rows[e / 2], key key0 + 2t + e % 2, key0 a multiple of 8 (k0 is
 * one of 16). Lanes t and t^1 hold the 4 keys key0 + 4(t/2) .. +3 of both rows: the even lane
 * draws row g's Philox words, the odd one row g+8's, one call per 4 keys, and each passes the
 * other the two words of its keys (word 2(t%2) + e%2 is key key0 + 2t + e%2). */
__device__ __forceinline__ void mma_dropout_factors(const fa_kernel_params &p, i64 b, i64 h,
                                                    const i64 rows[2], i64 key0, int t,
                                                    unsigned lanes, float z[4])
{
    const bool odd = (t & 1) != 0; /* draws for row g+8 (i = 1), else row g (i = 0) */
    fa_kp_u32 w[4];
    fa_dropout_words(&p, b, h, rows[odd], key0 + (t & ~1) * 2, w);
    /* Words 2(t%2), 2(t%2)+1 are this lane's keys, the other two its partner's. */
    fa_kp_u32 mine0 = odd ? w[2] : w[0], mine1 = odd ? w[3] : w[1];
    fa_kp_u32 give0 = odd ? w[0] : w[2], give1 = odd ? w[1] : w[3];
    fa_kp_u32 got0 = (fa_kp_u32)__float_as_int(
        __shfl_xor_sync(lanes, __int_as_float((int)give0), 1, THREADS_PER_ROW));
    fa_kp_u32 got1 = (fa_kp_u32)__float_as_int(
        __shfl_xor_sync(lanes, __int_as_float((int)give1), 1, THREADS_PER_ROW));
    /* Element e is row i = e / 2: its word is mine when i is the row this lane drew, else the
     * partner's (got). */
#pragma unroll
    for (int e = 0; e < 4; e++) {
        bool drawn_here = (e / 2 == 1) == odd;
        z[e] = dropout_factor(p, drawn_here ? ((e & 1) ? mine1 : mine0)
                                            : ((e & 1) ? got1 : got0));
    }
}
#endif

/* The m step of the online softmax for one row, in log2 units: *m becomes m_new = max(*m, the
 * row's max over this tile, combined over its lanes), *alpha = exp2(m_old - m_use) rescales the
 * earlier O and l, and the result m_use is what the exponents subtract. A row with no allowed
 * key so far keeps m = -inf: m_use is 0 instead, so P = 0 and alpha = 0, never NaN (the
 * FlashAttention rescale rule). */
__device__ __forceinline__ float online_max(float *m, float tile_max, unsigned lanes,
                                            float *alpha)
{
    float m_new = fmaxf(*m, row_max(tile_max, lanes));
    float m_use = m_new == NEG_INF ? 0.0f : m_new;
    *alpha = exp2f(*m - m_use);
    *m = m_new;
    return m_use;
}

/* Final 1/l and LSE of a row: a row with no allowed key (l == 0) gives O = 0 and LSE = -inf; a
 * NaN l (a NaN or +inf score) gives NaN in both. LSE is natural-log: (m + log2 l) * ln 2. */
__device__ __forceinline__ float inverse_sum(float l) { return l == 0.0f ? 0.0f : 1.0f / l; }

__device__ __forceinline__ float row_lse(float m, float l)
{
    return l == 0.0f ? NEG_INF : (m + log2f(l)) * LN2;
}

/* ---- the work item: a query tile of a sequence's head, and with SPLIT a key chunk ---------- */
#ifndef SPLIT
#define SPLIT 0 /* 1: split-KV, each block one key chunk; O and LSE are f32 partials */
#endif
static_assert(SPLIT == 0 || SPLIT == 1, "SPLIT: 0 or 1");
#ifndef PACKED
#define PACKED 0 /* 1: GQA packing, the rows of head h are the query heads h * Sq + row */
#endif
static_assert(PACKED == 0 || PACKED == 1, "PACKED: 0 or 1");

/* PACKED: a one-row decode's query heads of a K/V head as the rows of one head (the host packs
 * only where every head sees the same keys, src/packing.c), so the rules read the one row of
 * the problem unpacked: in the packed problem's terms its last row (rule_row), whose window and
 * ALiBi distance are row 0's; sinks and slopes are per row, of query head q_head_of (rows past
 * Sq take the last head's, so none is read past the heads). */
__device__ __forceinline__ i64 rule_row(i64 sq, i64 row) { return PACKED ? sq - 1 : row; }
__device__ __forceinline__ i64 q_head_of(i64 h, i64 sq, i64 row)
{
    return PACKED ? h * sq + min(row, sq - 1) : h;
}

/* Query tile `tile` of head h of sequence b (s: where its rows and keys are, seq_of) and, with
 * SPLIT, key chunk `split`: keys [split * split_keys, + split_keys), split_keys a multiple of
 * Bc (0 without). */
struct fwd_item {
    i64 b, h, tile, split;
    fa_seq s;
};

/* What O's argument holds: O in the storage type, or (SPLIT) the f32 partials in scratch. */
#if SPLIT
typedef float out_t;
__device__ __forceinline__ out_t to_out(float v) { return v; }
#else
typedef store_t out_t;
__device__ __forceinline__ out_t to_out(float v) { return to_store(v); }
#endif

/* The keys [*begin, *end) the tile starting at row r0 visits (keys_to_skip, keys_to_visit),
 * within its chunk with SPLIT; both ends stay multiples of Bc or the visible end. */
__device__ __forceinline__ void item_keys(const fa_kernel_params &p, const fwd_item &it, i64 r0,
                                          i64 *begin, i64 *end)
{
    *begin = keys_to_skip(p, rule_row(p.seqlen_q, r0));
    *end = keys_to_visit(p, rule_row(p.seqlen_q, r0));
#if SPLIT
    *begin = max(*begin, it.split * p.split_keys);
    *end = min(*end, (it.split + 1) * p.split_keys);
#else
    (void)it;
#endif
}

/* The modifiers of the item's (b, h), of query head q_head_of(h, Sq, row) when PACKED; only a
 * split forward's first chunk starts from the sink, so the merge counts it once. */
__device__ __forceinline__ head_mods item_mods(const modifier_args &a, const fa_kernel_params &p,
                                               const fwd_item &it, i64 row)
{
    head_mods hm = head_mods_of(a, p, it.b, q_head_of(it.h, p.seqlen_q, row));
    if (SPLIT && it.split > 0)
        hm.sink_log2 = NEG_INF;
    return hm;
}

/* The element offset of O's row `row` of the item (token q_start + row): in O, or (SPLIT) in
 * its chunk's partial (parts_offset + split * parts_stride + the parts layout). */
__device__ __forceinline__ i64 item_o_row(const fa_kernel_params &p, const fwd_item &it, i64 row)
{
    const i64 t = it.s.q_start + row;
#if SPLIT
    return p.parts_offset + it.split * p.parts_stride + it.b * p.parts_stride_b +
           it.h * p.parts_stride_h + t * p.parts_stride_s;
#else
    return p.o_offset + it.b * p.o_stride_b + it.h * p.o_stride_h + t * p.o_stride_s;
#endif
}

/* Writes the LSE of the item's row `row` at its LSE index (fa_lse_index): when asked, or (SPLIT)
 * always, as its chunk's partial at lse_parts_offset + split * part_rows + that index. */
__device__ __forceinline__ void item_store_lse(float *lse, const fa_kernel_params &p,
                                               const fwd_item &it, i64 row, float value)
{
    const i64 at = fa_lse_index(&p, it.b, it.h, it.s.q_start, row);
#if SPLIT
    lse[p.lse_parts_offset + it.split * p.part_rows + at] = value;
#else
    if (p.has_lse)
        lse[at] = value;
#endif
}

#if !MMA
/* ---- the CUDA-core path: THREADS_PER_ROW threads per query row, f32 FMA ------------------- */
#define KEYS_PER_THREAD ((BLOCK_C + THREADS_PER_ROW - 1) / THREADS_PER_ROW)  /* of an S row */
#define DIMS_PER_THREAD ((HEAD_DIM + THREADS_PER_ROW - 1) / THREADS_PER_ROW) /* of an O row */

/* One work item of the block (fwd_item: a Q tile of (head, batch), a key chunk with SPLIT):
 * thread (r, t) = threadIdx.x / TPR, threadIdx.x % TPR owns query row r0 + r of the tile, keys
 * c = t + i*TPR of each S row and elements x = t + i*TPR of its O row (i in
 * [0, KEYS_PER_THREAD) / [0, DIMS_PER_THREAD)). p: the sequence's (SEQ_PARAMS). */
__device__ void tile_fwd_cuda_cores(const store_t *__restrict__ q,
                                     const store_t *__restrict__ k,
                                     const store_t *__restrict__ v, out_t *__restrict__ o,
                                     float *__restrict__ lse, const modifier_args &mods,
                                     const seq_args &seqs, const block_lists &lists,
                                     const fa_kernel_params &p, const fwd_item &it, char *smem)
{
    float *s_tile = (float *)smem;                             /* S, then P: Br x Bc f32 */
    store_t *q_tile = (store_t *)(s_tile + BLOCK_R * BLOCK_C); /* Q^T: d x Br store_t */
    store_t *k_tile = q_tile + HEAD_DIM * BLOCK_R;             /* K^T: d x Bc store_t */
    store_t *v_tile = k_tile + HEAD_DIM * BLOCK_C;             /* V:   Bc x d store_t */

    const int r = (int)threadIdx.x / THREADS_PER_ROW, t = (int)threadIdx.x % THREADS_PER_ROW;
    const unsigned lanes = row_lanes();
    const i64 b = it.b, h = it.h;
    const i64 r0 = it.tile * BLOCK_R;              /* first query row of the tile */
    const i64 h_kv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    const i64 sq = p.seqlen_q, sk = p.seqlen_k, row = r0 + r;
    /* The keys of K[b][h_kv] and V[b][h_kv]: Sk x d, row strides k_stride_s, v_stride_s, or
     * paged. */
    const kv_rows kv = kv_rows_of(k, v, seqs, p, b, h_kv, it.s);
    float *s_row = s_tile + r * BLOCK_C; /* S[r][0 .. Bc) */
    const head_mods hm = item_mods(mods, p, it, row);
    const i64 rule = rule_row(sq, row); /* the row the mask, window and ALiBi read */
    /* The keys row may attend to (mask and window): [first, last); none for rows past Sq. */
    const i64 first = fa_keys_begin(&p, FEATURES, rule);
    const i64 last = row < sq ? fa_keys_end(&p, MASK, FEATURES, rule) : 0;

    /* Load Q tile (rows past Sq are zeros; their results are never written). */
    load_q_tile(q_tile, q, p, b, h, it.s.q_start, r0, true);

    i64 kv_begin, kv_end;
    item_keys(p, it, r0, &kv_begin, &kv_end);

    float m, l; /* running max (log2 units) and sum; a sink is their initial state */
    initial_state(hm, &m, &l);
    float acc[DIMS_PER_THREAD]; /* O[r][t + i*TPR], f32 */
#pragma unroll
    for (int i = 0; i < DIMS_PER_THREAD; i++)
        acc[i] = 0.0f;

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc; block-sparse,
     * only the tiles of key blocks the tile's query blocks list (next_listed_tile). */
    const list_dir dir = forward_lists(p);
    const i64 r_end = min(r0 + BLOCK_R, sq); /* the tile's rows that exist */
    for (i64 k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, kv_begin, BLOCK_C, kv_end);
         k0 < kv_end;
         k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, k0 + BLOCK_C, BLOCK_C, kv_end)) {
        load_kv_tiles(k_tile, v_tile, kv, p, k0, true);

        /* S = Q K^T * scale (in log2 units, for exp2): s[i] = S[r][c], c = t + i*TPR,
         * S[r][c] = sum_x Q[r][x] * K[c][x] = sum_x Q^T[x][r] * K^T[x][c], x in [0, d). */
        float s[KEYS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < KEYS_PER_THREAD; i++)
            s[i] = 0.0f;
        for (int x = 0; x < HEAD_DIM; x++) {
            float qx = to_f32(q_tile[x * BLOCK_R + r]);      /* Q^T[x][r] */
            const store_t *k_row = k_tile + x * BLOCK_C + t; /* K^T[x][t ..] */
#pragma unroll
            for (int i = 0; i < KEYS_PER_THREAD; i++)
                if (BLOCK_C % THREADS_PER_ROW == 0 || t + i * THREADS_PER_ROW < BLOCK_C)
                    s[i] += qx * to_f32(k_row[i * THREADS_PER_ROW]); /* K^T[x][c] */
        }

        /* Score modifiers (softcap, ALiBi, bias; score_log2), then the mask: keys past Sk,
         * causal keys after the row's diagonal, keys outside the window and keys of blocks the
         * row's query block does not list get -inf (a full block: only keys past Sk). */
        int valid_keys = (int)min((i64)BLOCK_C, sk - k0); /* keys [0, valid_keys) exist */
        const row_blocks rb = row_blocks_of(lists, p, dir, b, h, row, sq, k0, valid_keys);
        /* row r may see c in [allowed_from, allowed) */
        i64 allowed_from = rb.full ? 0 : first - k0, allowed = rb.full ? valid_keys : last - k0;
        float tile_max = NEG_INF;
#pragma unroll
        for (int i = 0; i < KEYS_PER_THREAD; i++) {
            int c = t + i * THREADS_PER_ROW;
            bool visible = c < BLOCK_C && c < allowed && c >= allowed_from &&
                           block_listed_at(rb, c);
            s[i] = visible ? score_log2(s[i], p, hm, rule, k0 + c) : NEG_INF;
            tile_max = fmaxf(tile_max, s[i]);
        }

        /* m/l update (online softmax); S becomes P: P[r][c] = exp2(S[r][c] - m_use), stored to
         * s_row[c] for the P V step, which reads every key of the row. */
        float alpha;
        float m_use = online_max(&m, tile_max, lanes, &alpha);
        float tile_sum = 0.0f;
#pragma unroll
        for (int i = 0; i < KEYS_PER_THREAD; i++) {
            int c = t + i * THREADS_PER_ROW;
            if (c < BLOCK_C) {
                float p_c = flush_tiny(exp2f(s[i] - m_use));
                s_row[c] = p_c;
                tile_sum += p_c;
            }
        }
        l = l * alpha + row_sum(tile_sum, lanes);
        __syncwarp(lanes); /* the row's P values are visible to all its lanes */

#if FEATURES & FA_FEATURE_DROPOUT
        /* Dropout (l above counts P before it): P[r][c] *= dropout_scale or 0. Lane t draws the
         * Philox words of the key groups 4G .. 4G+3 (G = k0/4 + t, + TPR, ...) of this tile,
         * one call per 4 keys, and scales their P in s_row. */
        for (i64 grp = (k0 >> 2) + t; grp * 4 < k0 + valid_keys; grp += THREADS_PER_ROW) {
            fa_kp_u32 w[4];
            fa_dropout_words(&p, b, h, row, grp * 4, w);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 c = grp * 4 + e - k0;
                if (c >= 0 && c < valid_keys)
                    s_row[c] *= dropout_factor(p, w[e]);
            }
        }
        __syncwarp(lanes); /* the dropped P values are visible to all lanes of the row */
#endif

        /* Rescale O, then accumulate P V: O[r][x] += sum_c P[r][c] * V[c][x] for
         * x = t + i*TPR, c in [0, valid_keys) (keys past it have P = 0 and are skipped). */
#pragma unroll
        for (int i = 0; i < DIMS_PER_THREAD; i++)
            acc[i] *= alpha;
        for (int c = 0; c < valid_keys; c++) {
            float p_c = s_row[c];                             /* P[r][c] */
            const store_t *v_row = v_tile + c * HEAD_DIM + t; /* V[c][t ..] */
#pragma unroll
            for (int i = 0; i < DIMS_PER_THREAD; i++)
                if (HEAD_DIM % THREADS_PER_ROW == 0 || t + i * THREADS_PER_ROW < HEAD_DIM)
                    acc[i] += p_c * to_f32(v_row[i * THREADS_PER_ROW]); /* V[c][x] */
        }
    }

    /* Final 1/l and LSE: O[b][h][row][x] = acc / l at token q_start + row (row stride
     * o_stride_s), or with SPLIT the chunk's f32 partial; LSE at the row's LSE index (the
     * partial's always), written by lane t == 0 of the row. */
    if (row >= sq)
        return;
    float inv_l = inverse_sum(l);
    out_t *o_row = o + item_o_row(p, it, row);
#pragma unroll
    for (int i = 0; i < DIMS_PER_THREAD; i++)
        if (t + i * THREADS_PER_ROW < HEAD_DIM)
            o_row[t + i * THREADS_PER_ROW] = to_out(acc[i] * inv_l);
    if (t == 0)
        item_store_lse(lse, p, it, row, row_lse(m, l));
}
#else
/* ---- the tensor-core path: mma.sync m16n8k16, f16/bf16 in, f32 accumulate (sm_80+) ------- */
#define S_TILES (BLOCK_C / 8)  /* S accumulator tiles (16 x 8: keys 8n .. 8n+7) per warp */
#define O_TILES (HEAD_DIM / 8) /* O accumulator tiles (16 x 8: dims 8n .. 8n+7) per warp */

/* Two storage elements as one .b32 mma operand register: lo in the low half. */
__device__ __forceinline__ unsigned pack_b32(store_t lo, store_t hi)
{
    return (unsigned)lo | ((unsigned)hi << 16);
}

/* Elements s[0], s[1] of one tile row: consecutive columns of a row-major tile. */
__device__ __forceinline__ unsigned load_row_pair(const store_t *s)
{
    return pack_b32(s[0], s[1]);
}

/* Elements s[0], s[TILE_LD] of one tile column: consecutive rows of a row-major (rows x d)
 * tile. */
__device__ __forceinline__ unsigned load_col_pair(const store_t *s)
{
    return pack_b32(s[0], s[TILE_LD]);
}

/* Two f32 values rounded to the storage type, as one register. */
__device__ __forceinline__ unsigned pack_f32_pair(float lo, float hi)
{
    return pack_b32(to_store(lo), to_store(hi));
}

/* c += A B for one 16 x 8 tile, all 32 lanes of the warp together. Fragments (g = lane / 4,
 * t = lane % 4): a = rows g, g+8 x cols 2t, 2t+1 and 2t+8, 2t+9 (a[0] row g, a[1] row g+8,
 * a[2] row g cols +8, a[3] row g+8 cols +8); b = rows 2t, 2t+1 (b[0]) and 2t+8, 2t+9 (b[1]) x
 * col g; c = row g (c[0], c[1]) and g+8 (c[2], c[3]) x cols 2t, 2t+1. */
#if DTYPE == 1
#define MMA_IN_TYPE "f16" /* the PTX type of the A and B elements */
#else
#define MMA_IN_TYPE "bf16"
#endif
__device__ __forceinline__ void mma_m16n8k16(float c[4], const unsigned a[4],
                                             const unsigned b[2])
{
#ifdef FA_EMULATED
    fa_emu_mma16816(c, a, b, DTYPE);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_IN_TYPE "." MMA_IN_TYPE ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* One work item of the block (fwd_item: a Q tile of (head, batch), a key chunk with SPLIT):
 * warp w owns tile rows warp_row0 = 16w .. 16w+15; each lane holds rows g and g+8 of them (index
 * i = 0, 1 below), and in each 16 x 8 accumulator tile the columns 2t, 2t+1 (element e: row
 * i = e / 2, column 2t + e % 2). p: the sequence's (SEQ_PARAMS). */
__device__ void tile_fwd_mma(const store_t *__restrict__ q, const store_t *__restrict__ k,
                             const store_t *__restrict__ v, out_t *__restrict__ o,
                             float *__restrict__ lse, const modifier_args &mods,
                             const seq_args &seqs, const block_lists &lists,
                             const fa_kernel_params &p, const fwd_item &it, char *smem)
{
    store_t *q_tile = (store_t *)smem;            /* Q: Br x d store_t, row-major, TILE_LD */
    store_t *kv_tiles = q_tile + BLOCK_R * TILE_LD; /* K and V: Bc x d each (kv_buffers) */

    const int lane = (int)threadIdx.x % 32, warp_row0 = (int)threadIdx.x / 32 * 16;
    const int g = lane / 4, t = lane % 4;          /* PTX's groupID and threadID_in_group */
    const unsigned lanes = row_lanes();            /* the quad that shares rows g and g+8 */
    const i64 b = it.b, h = it.h;
    const i64 r0 = it.tile * BLOCK_R;              /* first query row of the tile */
    const i64 h_kv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    const i64 sq = p.seqlen_q;
    const i64 rows[2] = {r0 + warp_row0 + g, r0 + warp_row0 + g + 8}; /* this lane's rows */
    /* The keys of K[b][h_kv] and V[b][h_kv]: Sk x d, row strides k_stride_s, v_stride_s, or
     * paged. */
    const kv_rows kv = kv_rows_of(k, v, seqs, p, b, h_kv, it.s);
    const head_mods hm[2] = {item_mods(mods, p, it, rows[0]), item_mods(mods, p, it, rows[1])};
    /* The rows the mask, window and ALiBi read (rule_row). */
    const i64 rule[2] = {rule_row(sq, rows[0]), rule_row(sq, rows[1])};
    /* The keys rows[i] may attend to (mask and window): [first[i], last[i]); none past Sq. */
    const i64 first[2] = {fa_keys_begin(&p, FEATURES, rule[0]),
                          fa_keys_begin(&p, FEATURES, rule[1])};
    const i64 last[2] = {rows[0] < sq ? fa_keys_end(&p, MASK, FEATURES, rule[0]) : 0,
                         rows[1] < sq ? fa_keys_end(&p, MASK, FEATURES, rule[1]) : 0};

    /* Load Q tile (rows past Sq are zeros; their results are never written). */
    load_q_tile(q_tile, q, p, b, h, it.s.q_start, r0, false);

    i64 kv_begin, kv_end;
    item_keys(p, it, r0, &kv_begin, &kv_end);

    float m[2], l[2]; /* rows g, g+8: running max (log2 units) and sum, from a sink if any */
    initial_state(hm[0], &m[0], &l[0]);
    initial_state(hm[1], &m[1], &l[1]);
    float acc[O_TILES][4]; /* O tile n: rows g, g+8 x dims 8n+2t, 8n+2t+1, f32 */
#pragma unroll
    for (int n = 0; n < O_TILES; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    /* Loop over K/V tiles: keys [k0, k0 + Bc), k0 in [kv_begin, kv_end) by Bc; block-sparse,
     * only the tiles of key blocks the tile's query blocks list (PIPELINE: the next tile's copy
     * in flight during this one's products). */
    const list_dir dir = forward_lists(p);
    const i64 r_end = min(r0 + BLOCK_R, sq); /* the tile's rows that exist */
    i64 k0 = next_listed_tile(lists, p, dir, b, h, r0, r_end, kv_begin, BLOCK_C, kv_end);
    kv_prefetch(kv_tiles, kv, p, k0, kv_end);
    for (int buf = 0; k0 < kv_end; buf ^= 1) {
        const i64 k_next =
            next_listed_tile(lists, p, dir, b, h, r0, r_end, k0 + BLOCK_C, BLOCK_C, kv_end);
        const store_t *k_tile, *v_tile;
        next_kv_tiles(kv_tiles, kv, p, k0, k_next, kv_end, buf, &k_tile, &v_tile);

        /* S = Q K^T: S[r][c] = sum_x Q[r][x] * K[c][x], 16 x Bc per warp, as S_TILES 16 x 8
         * tiles s[n] (keys 8n .. 8n+7), summed over 16-wide slices x0 .. x0+15 of d. A is
         * Q[warp_row0 ..][x0 ..] (16 x 16); B[x][c] = K[c][x], so a K row gives a B column. */
        float s[S_TILES][4];
#pragma unroll
        for (int n = 0; n < S_TILES; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int x0 = 0; x0 < HEAD_DIM; x0 += 16) {
            /* Q[warp_row0 + g][x0 + 2t]: a = Q rows g, g+8 x cols 2t, 2t+1, 2t+8, 2t+9 */
            const store_t *q_src = q_tile + (warp_row0 + g) * TILE_LD + x0 + 2 * t;
            unsigned a_frag[4] = {load_row_pair(q_src), load_row_pair(q_src + 8 * TILE_LD),
                                  load_row_pair(q_src + 8),
                                  load_row_pair(q_src + 8 * TILE_LD + 8)};
#pragma unroll
            for (int n = 0; n < S_TILES; n++) {
                /* K[8n + g][x0 + 2t]: b = K row 8n+g x cols 2t, 2t+1 and 2t+8, 2t+9 */
                const store_t *k_src = k_tile + (n * 8 + g) * TILE_LD + x0 + 2 * t;
                unsigned b_frag[2] = {load_row_pair(k_src), load_row_pair(k_src + 8)};
                mma_m16n8k16(s[n], a_frag, b_frag);
            }
        }

        /* Scale and score modifiers (softcap, ALiBi, bias; score_log2), then the mask: keys past
         * Sk, causal keys after the row's diagonal, keys outside the window and keys of blocks
         * the row's query block does not list get -inf (a full block: only keys past Sk).
         * s[n][e] is S[warp_row0 + g + 8i][c], i = e / 2, key c = 8n + 2t + e % 2 of the tile. */
        const int valid_keys = (int)min((i64)BLOCK_C, p.seqlen_k - k0); /* keys that exist */
        const row_blocks rb[2] = {
            row_blocks_of(lists, p, dir, b, h, rows[0], sq, k0, valid_keys),
            row_blocks_of(lists, p, dir, b, h, rows[1], sq, k0, valid_keys)};
        i64 allowed_from[2], allowed[2]; /* c in [allowed_from[i], allowed[i]) */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            allowed_from[i] = rb[i].full ? 0 : first[i] - k0;
            allowed[i] = rb[i].full ? valid_keys : last[i] - k0;
        }
        float tile_max[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < S_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = e / 2, c = n * 8 + 2 * t + (e & 1);
                bool visible =
                    c < allowed[i] && c >= allowed_from[i] && block_listed_at(rb[i], c);
                s[n][e] = visible ? score_log2(s[n][e], p, hm[i], rule[i], k0 + c) : NEG_INF;
                tile_max[i] = fmaxf(tile_max[i], s[n][e]);
            }

        /* m/l update (online softmax); S becomes P = exp2(S - m_use), in place. */
        float m_use[2], alpha[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++)
            m_use[i] = online_max(&m[i], tile_max[i], lanes, &alpha[i]);
#pragma unroll
        for (int n = 0; n < S_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = flush_tiny(exp2f(s[n][e] - m_use[e / 2]));
                tile_sum[e / 2] += s[n][e];
            }
#pragma unroll
        for (int i = 0; i < 2; i++)
            l[i] = l[i] * alpha[i] + row_sum(tile_sum[i], lanes);

#if FEATURES & FA_FEATURE_DROPOUT
        /* Dropout (l above counts P before it): P *= dropout_scale or 0, one Philox call per
         * 4 keys shared by the two lanes that hold them (mma_dropout_factors). */
#pragma unroll
        for (int n = 0; n < S_TILES; n++) {
            float z[4];
            mma_dropout_factors(p, b, h, rows, k0 + n * 8, t, lanes, z);
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[n][e] *= z[e];
        }
#endif

        /* Rescale O, then accumulate P V: O[r][x] += sum_c P[r][c] * V[c][x], over 16-key
         * slices c0 .. c0+15. The S tiles c0/8, c0/8 + 1 are the A fragment of those keys;
         * B[c][x] = V[c0 + c][8n + x] (masked keys have P = 0, V rows past Sk are 0). */
#pragma unroll
        for (int n = 0; n < O_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[n][e] *= alpha[e / 2];
#pragma unroll
        for (int c0 = 0; c0 < BLOCK_C; c0 += 16) {
            const int n0 = c0 / 8; /* S tiles n0 (keys c0 .. c0+7) and n0 + 1 (c0+8 .. c0+15) */
            unsigned a_frag[4] = {pack_f32_pair(s[n0][0], s[n0][1]),
                                  pack_f32_pair(s[n0][2], s[n0][3]),
                                  pack_f32_pair(s[n0 + 1][0], s[n0 + 1][1]),
                                  pack_f32_pair(s[n0 + 1][2], s[n0 + 1][3])};
#pragma unroll
            for (int n = 0; n < O_TILES; n++) {
                /* V[c0 + 2t][8n + g]: b = V rows 2t, 2t+1 and 2t+8, 2t+9 x col g */
                const store_t *v_src = v_tile + (c0 + 2 * t) * TILE_LD + n * 8 + g;
                unsigned b_frag[2] = {load_col_pair(v_src), load_col_pair(v_src + 8 * TILE_LD)};
                mma_m16n8k16(acc[n], a_frag, b_frag);
            }
        }
        k0 = k_next;
    }

    /* Final 1/l and LSE: O[b][h][rows[i]][8n + 2t + (0, 1)] = acc[n][2i + (0, 1)] / l[i] at
     * token q_start + rows[i] (row stride o_stride_s), or with SPLIT the chunk's f32 partial;
     * LSE at the row's LSE index (the partial's always), written by lane t == 0 of the quad. */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (rows[i] >= sq)
            continue;
        float inv_l = inverse_sum(l[i]);
        out_t *o_row = o + item_o_row(p, it, rows[i]) + 2 * t;
#pragma unroll
        for (int n = 0; n < O_TILES; n++) {
            o_row[n * 8] = to_out(acc[n][2 * i] * inv_l);
            o_row[n * 8 + 1] = to_out(acc[n][2 * i + 1] * inv_l);
        }
        if (t == 0)
            item_store_lse(lse, p, it, rows[i], row_lse(m[i], l[i]));
    }
}
#endif

/* The backward's program builds on this file's helpers only: NVRTC then compiles no forward
 * entry into its modules (cuda_module.c passes FWD_HELPERS_ONLY). */
#ifndef FWD_HELPERS_ONLY
extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_fwd(const store_t *__restrict__ q, const store_t *__restrict__ k,
          const store_t *__restrict__ v, out_t *__restrict__ o, float *__restrict__ lse,
          ALIBI_PARAM BIAS_PARAM SINKS_PARAM SEQ_PARAM LISTS_PARAM const fa_kernel_params p_in)
{
    extern __shared__ __align__(16) char smem[];
    const modifier_args mods = {ALIBI_ARG, BIAS_ARG, SINKS_ARG};
    const seq_args seqs = SEQ_ARGS;
    const block_lists lists = LISTS_ARGS;
    /* Grid-stride loops: every thread of a block takes the same trips, so the barriers inside
     * the tile function are reached by all of them. b in [0, B), h in [0, Hq), and x in
     * [0, q_tiles * chunks), chunk-major (chunks: the params' splits with SPLIT, else 1): query
     * tile x % q_tiles of key chunk x / q_tiles. A tile that starts past its sequence's rows has
     * nothing to do: the whole block skips it, before any barrier. */
    const i64 items = p_in.q_tiles * (SPLIT ? (i64)p_in.splits : 1);
    for (i64 b = blockIdx.z; b < p_in.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p_in, b);
        SEQ_PARAMS(p, p_in, s);
        for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y)
            for (i64 x = blockIdx.x; x < items; x += gridDim.x) {
                const fwd_item it = {b, h, x % p.q_tiles, x / p.q_tiles, s};
                if (it.tile * BLOCK_R >= p.seqlen_q)
                    continue;
#if MMA
                tile_fwd_mma(q, k, v, o, lse, mods, seqs, lists, p, it, smem);
#else
                tile_fwd_cuda_cores(q, k, v, o, lse, mods, seqs, lists, p, it, smem);
#endif
            }
    }
}
#endif /* FWD_HELPERS_ONLY */
