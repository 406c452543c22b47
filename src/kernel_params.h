/*
 * kernel_params.h - the one parameter struct every backend's kernels receive by value, and the
 * rules every backend applies: the mask, the sliding window and dropout's keep mask (Philox).
 *
 * Included by the C core and, embedded as text, by the OpenCL and CUDA kernels, so the layout
 * and the rule are written once. 8-byte fields come first so no language inserts padding; the C
 * side checks the size and offsets with _Static_assert (src/kernel_params.c). All offsets and
 * strides count elements.
 */
#ifndef FA_KERNEL_PARAMS_H
#define FA_KERNEL_PARAMS_H

/* OpenCL C: a runtime's compiler defines __OPENCL_VERSION__, a plain clang -x cl (the GPU
 * compile check, tools/cl_gpu_check.sh) only __OPENCL_C_VERSION__. */
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
#define FA_KP_OPENCL 1
#endif

#if defined(FA_KP_OPENCL)
typedef long fa_kp_i64;
typedef int fa_kp_i32;
typedef ulong fa_kp_u64;
typedef uint fa_kp_u32;
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
typedef long long fa_kp_i64;
typedef int fa_kp_i32;
typedef unsigned long long fa_kp_u64;
typedef unsigned int fa_kp_u32;
#else
#include <stdint.h>
typedef int64_t fa_kp_i64;
typedef int32_t fa_kp_i32;
typedef uint64_t fa_kp_u64;
typedef uint32_t fa_kp_u32;
#endif

/* The score modifiers and dropout, as bits of `features` (and of a kernel's FEATURES define). */
#define FA_FEATURE_SOFTCAP 1u
#define FA_FEATURE_ALIBI 2u
#define FA_FEATURE_BIAS 4u
#define FA_FEATURE_WINDOW 8u
#define FA_FEATURE_SINKS 16u
#define FA_FEATURE_DROPOUT 32u
#define FA_FEATURE_BLOCK_SPARSE 64u /* only the key blocks of a query block's lists (backends
                                       opt in: not in FA_FEATURES_ALL) */
#define FA_FEATURE_POSITIONS 128u /* a block of a longer problem: the rules read the shifts
                                     and positions below (0 without the bit) */
#define FA_FEATURE_ALIBI_BATCH 256u /* ALiBi slopes per sequence [B, Hq] (fa_problem.alibi 2):
                                       the slopes' batch stride is read (0 without the bit) */
#define FA_FEATURES_ALL                                                                         \
    (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_BIAS | FA_FEATURE_WINDOW |              \
     FA_FEATURE_SINKS | FA_FEATURE_DROPOUT | FA_FEATURE_POSITIONS | FA_FEATURE_ALIBI_BATCH)

typedef struct fa_kernel_params {
    fa_kp_i64 q_offset, q_stride_b, q_stride_h, q_stride_s; /* Q [B, Hq, Sq, D] */
    fa_kp_i64 k_offset, k_stride_b, k_stride_h, k_stride_s; /* K [B, Hkv, Sk, D] */
    fa_kp_i64 v_offset, v_stride_b, v_stride_h, v_stride_s; /* V [B, Hkv, Sk, D] */
    fa_kp_i64 o_offset, o_stride_b, o_stride_h, o_stride_s; /* O [B, Hq, Sq, D] */
    fa_kp_i64 batch;    /* B */
    fa_kp_i64 seqlen_q; /* Sq */
    fa_kp_i64 seqlen_k; /* Sk */
    fa_kp_i64 q_tiles;  /* ceil(Sq / Br): work-groups per (batch, head) */
    fa_kp_i32 heads_q;  /* Hq */
    fa_kp_i32 heads_kv; /* Hkv; query head h reads K/V head h / (Hq / Hkv) */
    fa_kp_i32 head_dim; /* D */
    fa_kp_i32 mask;     /* fa_mask value */
    fa_kp_i32 has_lse;  /* 1: write LSE f32 [B, Hq, Sq] contiguous */
    float scale;        /* softmax scale, resolved (never 0) */
    float scale_log2;   /* scale * log2(e), for kernels that use exp2 */
    fa_kp_i32 num_pages; /* FA_SEQ_PAGED: the pool's pages; 0 otherwise (also keeps the size
                            a multiple of 8) */
    /* The backward's tensors (zero in a forward's params). Appended: a struct that grows keeps
     * every earlier offset, and the 32-bit block above ends on a multiple of 8. */
    fa_kp_i64 do_offset, do_stride_b, do_stride_h, do_stride_s; /* dO [B, Hq, Sq, D] */
    fa_kp_i64 dq_offset, dq_stride_b, dq_stride_h, dq_stride_s; /* dQ [B, Hq, Sq, D] */
    fa_kp_i64 dk_offset, dk_stride_b, dk_stride_h, dk_stride_s; /* dK [B, Hkv, Sk, D] */
    fa_kp_i64 dv_offset, dv_stride_b, dv_stride_h, dv_stride_s; /* dV [B, Hkv, Sk, D] */
    /* The score modifiers and dropout (fa_problem's; unused ones are 0, the window -1). */
    fa_kp_i64 bias_offset, bias_stride_b, bias_stride_h, bias_stride_s; /* bias [B, Hq, Sq, Sk],
                                                   keys contiguous, stride 0 broadcasts */
    fa_kp_i64 window_left;     /* keys j >= i' - window_left visible; -1: unbounded */
    fa_kp_i64 window_right;    /* keys j <= i' + window_right visible; -1: unbounded */
    fa_kp_u64 dropout_seed;    /* Philox key: (seed & 0xffffffff, seed >> 32) */
    float softcap;             /* s = softcap * tanh(s / softcap) when > 0 */
    fa_kp_u32 dropout_threshold; /* keep an element when its Philox word >= this */
    float dropout_scale;       /* (float)(1 / (1 - p)): kept probabilities are scaled by it */
    fa_kp_u32 dropout_offset;  /* the Philox counter's 4th word */
    fa_kp_i32 features;        /* FA_FEATURE_* bits in use */
    fa_kp_i32 bias_dtype;      /* fa_dtype of the bias */
    /* Sequences and decoding (fa_problem's varlen, seqlens_k, paged K/V, split-KV, the merge).
     * LSE element (b, h, i) is at lse_stride_b * b + lse_stride_h * h + q_start + i (fa_seq_of;
     * q_start is 0 unless varlen): [B, Hq, Sq] contiguous, or varlen's [Hq, total_q]. The
     * backward's D scratch uses the same index. */
    fa_kp_i64 lse_stride_b, lse_stride_h;
    /* Partial results (a split forward writes them, flash_merge reads them): partial s of row
     * (b, h, t = q_start + i) has O at parts_offset + s * parts_stride + b * parts_stride_b +
     * h * parts_stride_h + t * parts_stride_s (+ x), f32 for a split forward's scratch, the
     * storage type for fa_merge, and LSE (f32) at lse_parts_offset + s * part_rows + the row's
     * LSE index. */
    fa_kp_i64 parts_offset, parts_stride_b, parts_stride_h, parts_stride_s, parts_stride;
    fa_kp_i64 lse_parts_offset, part_rows;
    fa_kp_i64 split_keys;    /* split forward: split s takes keys [s * split_keys, + split_keys)
                                (a multiple of Bc); 0: no split */
    fa_kp_i64 page_size;     /* FA_SEQ_PAGED: keys per page; K/V stride_b steps over pages */
    fa_kp_i64 pages_per_seq; /* FA_SEQ_PAGED: the block table's row length */
    fa_kp_i32 splits;        /* partials per row: the split forward's (its grid's x is
                                q_tiles * splits, split-major) and flash_merge's; 1: none */
    fa_kp_i32 seq;           /* FA_SEQ_* bits in use */
    /* Block-sparse attention (FA_FEATURE_BLOCK_SPARSE; flashattn_block_mask.h): query block
     * qb = i / sparse_block_q computes the key blocks kb = j / sparse_block_k its list names
     * (fa_block_listed). The lists are int32 [sparse_batch, sparse_heads, rows, cols], a
     * dimension of 1 broadcast: the forward's rows are the q_blocks, cols the k_blocks. */
    fa_kp_i32 sparse_block_q, sparse_block_k;
    fa_kp_i32 sparse_q_blocks, sparse_k_blocks;
    fa_kp_i32 sparse_batch, sparse_heads;
    /* ALiBi: the slope of (b, h) is alibi_slopes[b * alibi_stride_b + h]: 0 for slopes shared
     * by the batch (fa_problem.alibi 1), heads_q for per-sequence slopes (alibi 2, where
     * FA_FEATURE_ALIBI_BATCH tells the kernels to read it at all). */
    fa_kp_i32 alibi_stride_b;
    fa_kp_i32 alibi_unused; /* keeps the size a multiple of 8 */
    /* Positions (fa_problem's q_position, k_position, whole_seqlen_q/k): a problem that is a
     * block of a longer one. All 0 otherwise, so every rule below is the block-relative one. */
    fa_kp_i64 q_position, k_position; /* row i is at q_position + i, key j at k_position + j */
    fa_kp_i64 shift_top_left;     /* q_position - k_position: the top-left diagonal's shift */
    fa_kp_i64 shift_bottom_right; /* added to seqlen_k - seqlen_q: the whole problem's
                                     bottom-right diagonal (mask 2, the window and ALiBi) */
} fa_kernel_params;

/* How sequences are addressed, as bits of `seq` (and of a kernel's SEQ define). */
#define FA_SEQ_VARLEN 1u    /* packed rows: cu_seqlens_q, cu_seqlens_k int32 [B + 1] */
#define FA_SEQ_SEQLENS_K 2u /* per-sequence key counts: seqlens_k int32 [B] */
#define FA_SEQ_PAGED 4u     /* K and V in pages of a pool: block_table int32 [B, pages_per_seq] */

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FA_KP_FN static __device__ __forceinline__
#else
#define FA_KP_FN static inline
#endif

/* The FA_FEATURE_* bits a rule may test: a kernel's FEATURES (a compile-time constant, so a
 * kernel without positions never reads them), else the params' (the golden). */
#if defined(FEATURES)
#define FA_KP_FEATURES(p) (FEATURES)
#else
#define FA_KP_FEATURES(p) ((p)->features)
#endif

/* The position of row 0 and of key 0 in the whole problem: 0 without FA_FEATURE_POSITIONS. */
FA_KP_FN fa_kp_i64 fa_q_position(const fa_kernel_params *p)
{
    return (FA_KP_FEATURES(p) & FA_FEATURE_POSITIONS) ? p->q_position : 0;
}

FA_KP_FN fa_kp_i64 fa_k_position(const fa_kernel_params *p)
{
    return (FA_KP_FEATURES(p) & FA_FEATURE_POSITIONS) ? p->k_position : 0;
}

/* The positions' shift of a diagonal (top-left, or bottom-right): 0 without the bit. */
FA_KP_FN fa_kp_i64 fa_position_shift(const fa_kernel_params *p, int bottom_right)
{
    if (!(FA_KP_FEATURES(p) & FA_FEATURE_POSITIONS))
        return 0;
    return bottom_right ? p->shift_bottom_right : p->shift_top_left;
}

/*
 * Row `row`'s diagonal key: key j = row + fa_diagonal(p, bottom_right) sits at the row's
 * position. Top-left (mask 1) aligns the first row with the first key, bottom-right (mask 2,
 * the window and ALiBi) the last row with the last key (seqlen_k - seqlen_q); a block of a
 * longer problem (positions) shifts both so that they are the whole problem's diagonals.
 */
FA_KP_FN fa_kp_i64 fa_diagonal(const fa_kernel_params *p, int bottom_right)
{
    return (bottom_right ? p->seqlen_k - p->seqlen_q : 0) + fa_position_shift(p, bottom_right);
}

/*
 * The mask rule: query row `row` may attend to keys [0, fa_keys_allowed(...)), i.e. key j when
 *   mask 0 (FA_MASK_NONE):                 always
 *   mask 1 (FA_MASK_CAUSAL_TOP_LEFT):      j <= row
 *   mask 2 (FA_MASK_CAUSAL_BOTTOM_RIGHT):  j <= row + (seqlen_k - seqlen_q)
 * clamped to [0, seqlen_k]. The count never decreases with the row, so a tile's first row has
 * the fewest keys and its last row the most. A block of a longer problem passes its row
 * shifted to the whole problem's diagonal (fa_keys_end).
 */
FA_KP_FN fa_kp_i64 fa_keys_allowed(fa_kp_i32 mask, fa_kp_i64 row, fa_kp_i64 seqlen_q,
                                   fa_kp_i64 seqlen_k)
{
    if (mask == 0)
        return seqlen_k;
    fa_kp_i64 n = row + 1 + (mask == 2 ? seqlen_k - seqlen_q : 0);
    return n < 0 ? 0 : n > seqlen_k ? seqlen_k : n;
}

/*
 * The sliding window (FA_FEATURE_WINDOW): row `row` sees keys [fa_window_begin, fa_window_end)
 * with i' = row + fa_diagonal(p, 1), begin = i' - window_left, end = i' + window_right + 1,
 * clamped to [0, seqlen_k]; -1 leaves that side unbounded. Both never decrease with the row.
 * The params hold bounds and shifts that keep these sums inside int64 (src/modifiers.c).
 */
FA_KP_FN fa_kp_i64 fa_window_begin(const fa_kernel_params *p, fa_kp_i64 row)
{
    if (p->window_left < 0)
        return 0;
    fa_kp_i64 n = row + fa_diagonal(p, 1) - p->window_left;
    return n < 0 ? 0 : n > p->seqlen_k ? p->seqlen_k : n;
}

FA_KP_FN fa_kp_i64 fa_window_end(const fa_kernel_params *p, fa_kp_i64 row)
{
    if (p->window_right < 0)
        return p->seqlen_k;
    fa_kp_i64 n = row + fa_diagonal(p, 1) + p->window_right + 1;
    return n < 0 ? 0 : n > p->seqlen_k ? p->seqlen_k : n;
}

/*
 * The keys row `row` may attend to, mask and window together: [fa_keys_begin, fa_keys_end).
 * `mask` and `features` are the kernel's MASK and FEATURES (compile-time constants in the GPU
 * kernels, so an unused window costs nothing). The range may be empty (end <= begin).
 */
FA_KP_FN fa_kp_i64 fa_keys_begin(const fa_kernel_params *p, fa_kp_i32 features, fa_kp_i64 row)
{
    return (features & FA_FEATURE_WINDOW) ? fa_window_begin(p, row) : 0;
}

FA_KP_FN fa_kp_i64 fa_keys_end(const fa_kernel_params *p, fa_kp_i32 mask, fa_kp_i32 features,
                               fa_kp_i64 row)
{
    fa_kp_i64 n = fa_keys_allowed(mask, row + fa_position_shift(p, mask == 2), p->seqlen_q,
                                  p->seqlen_k);
    if (features & FA_FEATURE_WINDOW) {
        fa_kp_i64 w = fa_window_end(p, row);
        n = w < n ? w : n;
    }
    return n;
}

/*
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): ten
 * rounds on the counter (c0, c1, c2, c3) with key (k0, k1), the key bumped by the Weyl constants
 * W0, W1 between rounds. A round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 (64-bit products),
 * c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0).
 */
#define FA_PHILOX_M0 0xD2511F53u
#define FA_PHILOX_M1 0xCD9E8D57u
#define FA_PHILOX_W0 0x9E3779B9u
#define FA_PHILOX_W1 0xBB67AE85u

/* One round with round key (k0, k1), written once over the counter's type T: fa_kp_u32 here, or
 * an OpenCL uintN whose N lanes are N independent counters (flash_dropout.cl, dropout_row), with
 * the same bits. MULHILO(m, x, hi, lo) sets hi and lo to the high and low 32 bits of the 64-bit
 * product m * x. */
#define FA_PHILOX_ROUND(T, MULHILO, c0, c1, c2, c3, k0, k1)                                     \
    do {                                                                                        \
        T hi0_, lo0_, hi1_, lo1_;                                                               \
        MULHILO(FA_PHILOX_M0, c0, hi0_, lo0_);                                                  \
        MULHILO(FA_PHILOX_M1, c2, hi1_, lo1_);                                                  \
        c0 = hi1_ ^ c1 ^ (k0);                                                                  \
        c1 = lo1_;                                                                              \
        c2 = hi0_ ^ c3 ^ (k1);                                                                  \
        c3 = lo0_;                                                                              \
    } while (0)

/* MULHILO for scalar counters. */
#define FA_MULHILO_U32(m, x, hi, lo)                                                            \
    do {                                                                                        \
        fa_kp_u64 p_ = (fa_kp_u64)(m) * (fa_kp_u64)(x);                                         \
        hi = (fa_kp_u32)(p_ >> 32);                                                             \
        lo = (fa_kp_u32)p_;                                                                     \
    } while (0)

/* The ten rounds of Philox4x32-10 on counter words c0..c3 of type T (see FA_PHILOX_ROUND) with
 * key (key0, key1), which advances by (W0, W1) after each round; c0..c3 are updated in place. */
#define FA_PHILOX_10_ROUNDS(T, MULHILO, c0, c1, c2, c3, key0, key1)                             \
    do {                                                                                        \
        fa_kp_u32 k0_ = (key0), k1_ = (key1);                                                   \
        for (int round_ = 0; round_ < 10; round_++) {                                           \
            if (round_ > 0) {                                                                   \
                k0_ += FA_PHILOX_W0;                                                            \
                k1_ += FA_PHILOX_W1;                                                            \
            }                                                                                   \
            FA_PHILOX_ROUND(T, MULHILO, c0, c1, c2, c3, k0_, k1_);                              \
        }                                                                                       \
    } while (0)

/* Philox4x32-10 on one counter c[0..3] with key (k0, k1), in place. */
FA_KP_FN void fa_philox4x32_10(fa_kp_u32 c[4], fa_kp_u32 k0, fa_kp_u32 k1)
{
    fa_kp_u32 c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    FA_PHILOX_10_ROUNDS(fa_kp_u32, FA_MULHILO_U32, c0, c1, c2, c3, k0, k1);
    c[0] = c0;
    c[1] = c1;
    c[2] = c2;
    c[3] = c3;
}

/*
 * Dropout's random words for keys 4*(j >> 2) .. +3 of row i of (batch b, query head h), at
 * positions I = q_position + i and J = k_position + j: Philox with counter (J >> 2, I,
 * b * heads_q + h, dropout_offset), each word mod 2^32, and key (seed & 0xffffffff, seed >> 32).
 * Key j's word is w[j & 3] (k_position is a multiple of 4: J & 3 == j & 3); it is kept when
 * w[j & 3] >= dropout_threshold.
 */
FA_KP_FN void fa_dropout_words(const fa_kernel_params *p, fa_kp_i64 b, fa_kp_i64 h,
                               fa_kp_i64 i, fa_kp_i64 j, fa_kp_u32 w[4])
{
    w[0] = (fa_kp_u32)((fa_k_position(p) + j) >> 2);
    w[1] = (fa_kp_u32)(fa_q_position(p) + i);
    w[2] = (fa_kp_u32)(b * p->heads_q + h);
    w[3] = p->dropout_offset;
    fa_philox4x32_10(w, (fa_kp_u32)p->dropout_seed, (fa_kp_u32)(p->dropout_seed >> 32));
}

/* The buffers the SEQ bits read are global memory in OpenCL C. */
#if defined(FA_KP_OPENCL)
#define FA_KP_GLOBAL __global
#else
#define FA_KP_GLOBAL
#endif

/*
 * Block-sparse: the row of (b, h)'s lists that holds block `block` (a query block in the
 * forward's lists, a key block in the transposed ones, which have `rows` rows per head), the
 * lists' batch and head dimensions broadcast where they are 1.
 */
FA_KP_FN fa_kp_i64 fa_block_list_row(const fa_kernel_params *p, fa_kp_i64 b, fa_kp_i64 h,
                                     fa_kp_i64 block, fa_kp_i64 rows)
{
    fa_kp_i64 bb = p->sparse_batch > 1 ? b : 0, hh = p->sparse_heads > 1 ? h : 0;
    return (bb * p->sparse_heads + hh) * rows + block;
}

/*
 * Block-sparse: whether list row `row` (cols entries, its first num[row] ascending) names
 * block `target`; a binary search.
 */
FA_KP_FN int fa_block_listed(FA_KP_GLOBAL const fa_kp_i32 *num,
                             FA_KP_GLOBAL const fa_kp_i32 *idx, fa_kp_i64 row, fa_kp_i64 cols,
                             fa_kp_i32 target)
{
    fa_kp_i32 lo = 0, hi = num[row];
    FA_KP_GLOBAL const fa_kp_i32 *r = idx + row * cols;
    while (lo < hi) {
        fa_kp_i32 mid = lo + (hi - lo) / 2;
        if (r[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < num[row] && r[lo] == target;
}

/* Where one sequence of the batch is: its rows start at token q_start of Q and O (varlen; else
 * 0), it has seqlen_q rows and seqlen_k keys, and its keys start at key k_start of K and V
 * (varlen; else 0). */
typedef struct fa_seq {
    fa_kp_i64 q_start, seqlen_q, k_start, seqlen_k;
} fa_seq;

/*
 * Sequence b under the `seq` bits (a kernel's SEQ, a compile-time constant there): varlen reads
 * cu_seqlens_q/k[b], [b + 1]; seqlens_k reads seqlens_k[b]; otherwise the params' lengths. The
 * core has checked cu_seqlens (every length within the params' seqlen_q / seqlen_k); seqlens_k
 * may be unchecked on an accelerator (fa_context_set_check_sequences), so its value is
 * clamped into [0, seqlen_k] here and no key past the tensors is read. Pointers a bit does not
 * use may be NULL.
 */
FA_KP_FN fa_seq fa_seq_of(const fa_kernel_params *p, fa_kp_i32 seq,
                          FA_KP_GLOBAL const fa_kp_i32 *cu_seqlens_q,
                          FA_KP_GLOBAL const fa_kp_i32 *cu_seqlens_k,
                          FA_KP_GLOBAL const fa_kp_i32 *seqlens_k, fa_kp_i64 b)
{
    fa_seq s;
    s.q_start = 0;
    s.k_start = 0;
    s.seqlen_q = p->seqlen_q;
    s.seqlen_k = p->seqlen_k;
    if (seq & FA_SEQ_VARLEN) {
        s.q_start = cu_seqlens_q[b];
        s.seqlen_q = cu_seqlens_q[b + 1] - s.q_start;
        s.k_start = cu_seqlens_k[b];
        s.seqlen_k = cu_seqlens_k[b + 1] - s.k_start;
    }
    if (seq & FA_SEQ_SEQLENS_K) {
        fa_kp_i64 n = seqlens_k[b];
        s.seqlen_k = n < 0 ? 0 : n > p->seqlen_k ? p->seqlen_k : n;
    }
    return s;
}

/*
 * The element offset of key j's row (without the head term and the tensor's offset) in K or V
 * (strides stride_b, stride_s) for sequence b starting at key k_start: paged, page
 * block_table[b][j / page_size] at slot j % page_size, the page clamped into the pool (the
 * table may be unchecked on an accelerator: fa_context_set_check_sequences); else
 * b * stride_b + (k_start + j) * stride_s (varlen tensors have stride_b 0 in the params).
 */
FA_KP_FN fa_kp_i64 fa_key_row(const fa_kernel_params *p, fa_kp_i32 seq,
                              FA_KP_GLOBAL const fa_kp_i32 *block_table, fa_kp_i64 b,
                              fa_kp_i64 k_start, fa_kp_i64 j, fa_kp_i64 stride_b,
                              fa_kp_i64 stride_s)
{
    if (seq & FA_SEQ_PAGED) {
        fa_kp_i64 page = block_table[b * p->pages_per_seq + j / p->page_size];
        page = page < 0 ? 0 : page >= p->num_pages ? p->num_pages - 1 : page;
        return page * stride_b + (j % p->page_size) * stride_s;
    }
    return b * stride_b + (k_start + j) * stride_s;
}

/* The LSE (and D scratch) index of row i of (batch b, head h) of a sequence at q_start. */
FA_KP_FN fa_kp_i64 fa_lse_index(const fa_kernel_params *p, fa_kp_i64 b, fa_kp_i64 h,
                                fa_kp_i64 q_start, fa_kp_i64 i)
{
    return p->lse_stride_b * b + p->lse_stride_h * h + q_start + i;
}

/*
 * The merge of partial results, one row: given partial LSEs lse_s (natural log, -inf for a
 * partial with no key), the weight of partial s is exp(lse_s - max) / sum_s' exp(lse_s' - max)
 * and LSE = max + log(sum). A row whose partials are all -inf has no key: O = 0, LSE = -inf;
 * a NaN partial makes the row NaN. Written out in each kernel language (flash_merge) and the
 * golden in this order: max, then the sum in s order, then O in s order.
 */

#endif /* FA_KERNEL_PARAMS_H */
