/*
 * flashattn_block_mask.h - block masks for block-sparse attention, built and checked on the
 * host: the lists of key blocks each query block computes (FlexAttention's BlockMask: its
 * kv_num_blocks / kv_indices and their transposes), from a dense block mask or from a pattern
 * (sliding window of blocks, the Sparse Transformer's fixed pattern, BigBird, Longformer).
 *
 * A block mask cuts the seqlen_q x seqlen_k score matrix into blocks of block_q rows and block_k
 * keys (the last ones shorter where the lengths are not multiples). Query block qb's list names
 * the key blocks it computes; a block not listed contributes nothing. Where the attention also
 * has a causal mask or a sliding window, they apply inside the listed blocks (an AND), except
 * in a block listed as full: a full block is computed without the causal and window tests, the
 * caller's promise that they would keep every element of it.
 *
 * Every function here is pure host code: no context, no device. Errors are a status and, where
 * `why` is not NULL, a message in it; outputs are untouched on error.
 */
#ifndef FLASHATTN_BLOCK_MASK_H
#define FLASHATTN_BLOCK_MASK_H

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FA_BLOCK_MIN 16  /* the smallest block_q and block_k */
#define FA_BLOCK_MAX 256 /* the largest */

/* The dimensions of a block mask. */
typedef struct fa_block_mask_shape {
    int64_t batch;    /* >= 1: the problem's batch, or 1 for one mask every sequence shares */
    int64_t heads;    /* >= 1: the problem's heads_q, or 1 for one mask every head shares */
    int64_t seqlen_q; /* >= 0 */
    int64_t seqlen_k; /* >= 0 */
    int32_t block_q;  /* query rows per block: a power of two in [16, 256] */
    int32_t block_k;  /* keys per block: a power of two in [16, 256] */
} fa_block_mask_shape;

/*
 * Query blocks ceil(seqlen_q / block_q) and key blocks ceil(seqlen_k / block_k) of a shape; -1
 * for a shape fa_block_mask_check_shape refuses.
 */
FA_API int64_t fa_block_mask_q_blocks(const fa_block_mask_shape *shape);
FA_API int64_t fa_block_mask_k_blocks(const fa_block_mask_shape *shape);

/*
 * The shape's checks: FA_STATUS_NULL_POINTER, FA_STATUS_INVALID_BLOCK_SIZE (a block size not a
 * power of two in [16, 256]), FA_STATUS_INVALID_SHAPE (batch or heads < 1, a negative length,
 * or lists of more than 2^31 - 1 entries).
 */
FA_API fa_status fa_block_mask_check_shape(const fa_block_mask_shape *shape, char *why,
                                           size_t why_size);

/*
 * One direction's lists, int32, row-major over [batch, heads, rows, cols]. The forward lists
 * (kv) have a row per query block and a column per key block: row qb holds the key blocks
 * query block qb computes. The transposed lists (q), for the backward's dK/dV pass, have a row
 * per key block holding the query blocks that compute it. Each row's first num_blocks entries
 * are its blocks in ascending order, each once; the entries after them are not read (the
 * builder writes -1 there). The full pair, optional, lists the blocks computed without the
 * causal and window tests; a block is in at most one of a row's two lists.
 */
typedef struct fa_block_lists {
    int32_t *num_blocks;      /* [batch, heads, rows] */
    int32_t *indices;         /* [batch, heads, rows, cols] */
    int32_t *full_num_blocks; /* [batch, heads, rows]; NULL (with full_indices): none */
    int32_t *full_indices;    /* [batch, heads, rows, cols] */
} fa_block_lists;

/*
 * The lists of a dense block mask: uint8 [batch, heads, q_blocks, k_blocks], 0 for a skipped
 * block, 1 for a computed one, 2 for a full one (computed without the causal and window
 * tests). kv receives the forward lists, q the transposed ones; either may be NULL, not both.
 * Where a lists' full pair is NULL, its full blocks go to its other list (computed with the
 * tests, which is exact whatever the masks). Deterministic: the lists depend on the mask only.
 * FA_STATUS_INVALID_BLOCK_MASK for a value other than 0, 1 or 2; the shape's statuses.
 */
FA_API fa_status fa_block_mask_lists(const fa_block_mask_shape *shape, const uint8_t *dense,
                                     fa_block_lists *kv, fa_block_lists *q, char *why,
                                     size_t why_size);

/*
 * Checks lists a caller made: every count in [0, cols], every counted index in [0, cols),
 * each row ascending without repeats, no block in both lists of a row, and, when both kv and q
 * are given, q the transpose of kv (the same blocks, full or not). kv or q may be NULL.
 * FA_STATUS_INVALID_BLOCK_MASK naming the first wrong entry; the shape's statuses.
 */
FA_API fa_status fa_block_mask_check(const fa_block_mask_shape *shape, const fa_block_lists *kv,
                                     const fa_block_lists *q, char *why, size_t why_size);

typedef enum fa_block_pattern_kind {
    /* Key blocks within `window` blocks of the query block's diagonal. */
    FA_BLOCK_PATTERN_LOCAL = 1,
    /* The Sparse Transformer's fixed pattern (Child et al., 2019): the key blocks of the query
     * block's own group of `stride` blocks, and the last block of every group (the summary
     * columns). With stride near sqrt(k_blocks) its blocks grow as N sqrt N. */
    FA_BLOCK_PATTERN_FIXED = 2,
    /* BigBird (Zaheer et al., 2020): LOCAL's window, `global` blocks at the start that every
     * block attends to and that attend to every block, and `random` more key blocks per query
     * block drawn from `seed` (per batch and head). */
    FA_BLOCK_PATTERN_BIGBIRD = 3,
    /* Longformer (Beltagy et al., 2020): LOCAL's window and the `global` first blocks, as
     * BigBird's without the random ones. */
    FA_BLOCK_PATTERN_LONGFORMER = 4
} fa_block_pattern_kind;

/*
 * A pattern. The diagonal of query block qb runs from key block
 * (qb * block_q + seqlen_k - seqlen_q) / block_k to that of its last row (bottom-right
 * alignment, FlashAttention's causal convention), clamped to the key blocks; with
 * seqlen_q = seqlen_k and block_q = block_k it is key block qb.
 */
typedef struct fa_block_pattern {
    fa_block_pattern_kind kind;
    int32_t window; /* LOCAL, BIGBIRD, LONGFORMER: >= 0 key blocks each side of the diagonal */
    int32_t stride; /* FIXED: >= 1 blocks per group */
    int32_t global; /* BIGBIRD, LONGFORMER: >= 0 global blocks */
    int32_t random; /* BIGBIRD: >= 0 random key blocks per query block (at most all of them) */
    uint64_t seed;  /* BIGBIRD: the random blocks' seed */
} fa_block_pattern;

/*
 * Writes a pattern's dense block mask (uint8 [batch, heads, q_blocks, k_blocks], 1 computed,
 * 0 skipped), for fa_block_mask_lists. Without random blocks every batch and head gets the same
 * rows. FA_STATUS_INVALID_ARGUMENT for an unknown kind or a negative count, with the shape's
 * statuses.
 */
FA_API fa_status fa_block_mask_pattern(const fa_block_mask_shape *shape,
                                       const fa_block_pattern *pattern, uint8_t *dense,
                                       char *why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_BLOCK_MASK_H */
