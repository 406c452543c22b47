/*
 * block_mask.c - block masks on the host (include/flashattn_block_mask.h): the shape's checks,
 * the lists of a dense block mask in both directions, the checks of lists a caller made, and
 * the patterns. Pure functions of their arguments: no context, no device.
 */
#include "internal.h"

#include <flashattn_block_mask.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ENTRIES (((int64_t)1 << 31) - 1)

enum { BLOCK_SKIPPED = 0, BLOCK_PARTIAL = 1, BLOCK_FULL = 2 };

static fa_status fail(fa_status st, char *why, size_t why_size, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static fa_status fail(fa_status st, char *why, size_t why_size, const char *fmt, ...)
{
    if (why && why_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return st;
}

static bool block_size_ok(int32_t b)
{
    return b >= FA_BLOCK_MIN && b <= FA_BLOCK_MAX && (b & (b - 1)) == 0;
}

static int64_t blocks(int64_t len, int32_t size)
{
    return (len + size - 1) / size;
}

fa_status fa_block_mask_check_shape(const fa_block_mask_shape *s, char *why, size_t why_size)
{
    if (!s)
        return fail(FA_STATUS_NULL_POINTER, why, why_size, "the block mask's shape is NULL");
    if (!block_size_ok(s->block_q) || !block_size_ok(s->block_k))
        return fail(FA_STATUS_INVALID_BLOCK_SIZE, why, why_size,
                    "block_q = %d, block_k = %d: each must be a power of two in [%d, %d]",
                    (int)s->block_q, (int)s->block_k, FA_BLOCK_MIN, FA_BLOCK_MAX);
    if (s->batch < 1 || s->heads < 1)
        return fail(FA_STATUS_INVALID_SHAPE, why, why_size,
                    "the block mask's batch = %lld and heads = %lld must be >= 1 (1 broadcasts)",
                    (long long)s->batch, (long long)s->heads);
    if (s->seqlen_q < 0 || s->seqlen_k < 0 || s->seqlen_q > MAX_ENTRIES ||
        s->seqlen_k > MAX_ENTRIES)
        return fail(FA_STATUS_INVALID_SHAPE, why, why_size,
                    "seqlen_q = %lld, seqlen_k = %lld: each must be in [0, 2^31 - 1]",
                    (long long)s->seqlen_q, (long long)s->seqlen_k);
    int64_t nq = blocks(s->seqlen_q, s->block_q), nk = blocks(s->seqlen_k, s->block_k);
    if (s->batch > MAX_ENTRIES / s->heads || (nq > 0 && nk > MAX_ENTRIES / nq) ||
        (nq * nk > 0 && s->batch * s->heads > MAX_ENTRIES / (nq * nk)))
        return fail(FA_STATUS_INVALID_SHAPE, why, why_size,
                    "a block mask of %lld x %lld x %lld x %lld blocks exceeds 2^31 - 1 entries",
                    (long long)s->batch, (long long)s->heads, (long long)nq, (long long)nk);
    return FA_STATUS_OK;
}

int64_t fa_block_mask_q_blocks(const fa_block_mask_shape *s)
{
    return fa_block_mask_check_shape(s, NULL, 0) == FA_STATUS_OK ? blocks(s->seqlen_q, s->block_q)
                                                                 : -1;
}

int64_t fa_block_mask_k_blocks(const fa_block_mask_shape *s)
{
    return fa_block_mask_check_shape(s, NULL, 0) == FA_STATUS_OK ? blocks(s->seqlen_k, s->block_k)
                                                                 : -1;
}

/* ---- lists from a dense mask ------------------------------------------------------------- */

/* One direction of a mask: `rows` x `cols` blocks per (batch, head); transposed, a row is a key
 * block and its entries query blocks. */
typedef struct direction {
    int64_t heads, rows, cols;
    bool transposed;
} direction;

static uint8_t dense_at(const uint8_t *dense, const direction *d, int64_t bh, int64_t r,
                        int64_t c)
{
    int64_t q_blocks = d->transposed ? d->cols : d->rows, k_blocks = d->transposed ? d->rows
                                                                                   : d->cols;
    int64_t qb = d->transposed ? c : r, kb = d->transposed ? r : c;
    return dense[(bh * q_blocks + qb) * k_blocks + kb];
}

/* Row r of (batch x head) bh: its blocks in ascending order, full ones apart where wanted. */
static void write_row(const uint8_t *dense, const direction *d, fa_block_lists *out, int64_t bh,
                      int64_t r)
{
    int64_t row = bh * d->rows + r, n = 0, n_full = 0;
    int32_t *idx = out->indices + row * d->cols;
    int32_t *full = out->full_indices ? out->full_indices + row * d->cols : NULL;
    for (int64_t c = 0; c < d->cols; c++) {
        uint8_t v = dense_at(dense, d, bh, r, c);
        if (v == BLOCK_FULL && full)
            full[n_full++] = (int32_t)c;
        else if (v != BLOCK_SKIPPED)
            idx[n++] = (int32_t)c;
    }
    out->num_blocks[row] = (int32_t)n;
    for (int64_t c = n; c < d->cols; c++)
        idx[c] = -1;
    if (full) {
        out->full_num_blocks[row] = (int32_t)n_full;
        for (int64_t c = n_full; c < d->cols; c++)
            full[c] = -1;
    }
}

static fa_status lists_given(const fa_block_lists *l, const char *name, char *why,
                             size_t why_size)
{
    if (!l)
        return FA_STATUS_OK;
    if (!l->num_blocks || !l->indices)
        return fail(FA_STATUS_NULL_POINTER, why, why_size, "%s: num_blocks or indices is NULL",
                    name);
    if (!l->full_num_blocks != !l->full_indices)
        return fail(FA_STATUS_NULL_POINTER, why, why_size,
                    "%s: full_num_blocks and full_indices must be given together", name);
    return FA_STATUS_OK;
}

/* The shape, then at least one of the lists, each whole. */
static fa_status check_args(const fa_block_mask_shape *s, const fa_block_lists *kv,
                            const fa_block_lists *q, char *why, size_t why_size)
{
    fa_status st = fa_block_mask_check_shape(s, why, why_size);
    if (st == FA_STATUS_OK && !kv && !q)
        st = fail(FA_STATUS_NULL_POINTER, why, why_size, "both lists are NULL");
    if (st == FA_STATUS_OK)
        st = lists_given(kv, "kv", why, why_size);
    return st == FA_STATUS_OK ? lists_given(q, "q", why, why_size) : st;
}

fa_status fa_block_mask_lists(const fa_block_mask_shape *s, const uint8_t *dense,
                              fa_block_lists *kv, fa_block_lists *q, char *why, size_t why_size)
{
    fa_status st = check_args(s, kv, q, why, why_size);
    if (st == FA_STATUS_OK && !dense)
        st = fail(FA_STATUS_NULL_POINTER, why, why_size, "the dense block mask is NULL");
    if (st != FA_STATUS_OK)
        return st;
    int64_t nq = blocks(s->seqlen_q, s->block_q), nk = blocks(s->seqlen_k, s->block_k);
    int64_t bhs = s->batch * s->heads;
    for (int64_t i = 0; i < bhs * nq * nk; i++)
        if (dense[i] > BLOCK_FULL)
            return fail(FA_STATUS_INVALID_BLOCK_MASK, why, why_size,
                        "dense block mask entry %lld (batch-head %lld, query block %lld, key "
                        "block %lld) is %d: must be 0 (skip), 1 (compute) or 2 (full)",
                        (long long)i, (long long)(i / (nq * nk)), (long long)(i / nk % nq),
                        (long long)(i % nk), (int)dense[i]);
    const direction fwd = {s->heads, nq, nk, false}, bwd = {s->heads, nk, nq, true};
    for (int64_t bh = 0; bh < bhs; bh++) {
        for (int64_t r = 0; kv && r < nq; r++)
            write_row(dense, &fwd, kv, bh, r);
        for (int64_t r = 0; q && r < nk; r++)
            write_row(dense, &bwd, q, bh, r);
    }
    return FA_STATUS_OK;
}

/* ---- checking a caller's lists ----------------------------------------------------------- */

/* Checks one list of row `row` (count and order), marking its blocks in `seen` (1 partial, 2
 * full; a block already marked is in both lists). */
static fa_status check_list(const int32_t *num, const int32_t *indices, const direction *d,
                            int64_t row, uint8_t mark, uint8_t *seen, const char *name,
                            char *why, size_t why_size)
{
    int32_t n = num[row];
    if (n < 0 || n > d->cols)
        return fail(FA_STATUS_INVALID_BLOCK_MASK, why, why_size,
                    "%s num_blocks[%lld] = %d is outside [0, %lld]", name, (long long)row,
                    (int)n, (long long)d->cols);
    const int32_t *idx = indices + row * d->cols;
    for (int32_t e = 0; e < n; e++) {
        int32_t c = idx[e];
        if (c < 0 || c >= d->cols)
            return fail(FA_STATUS_INVALID_BLOCK_MASK, why, why_size,
                        "%s indices[%lld][%d] = %d is outside [0, %lld)", name, (long long)row,
                        (int)e, (int)c, (long long)d->cols);
        if (e > 0 && c <= idx[e - 1])
            return fail(FA_STATUS_INVALID_BLOCK_MASK, why, why_size,
                        "%s indices[%lld]: entry %d = %d after %d (ascending, each once)", name,
                        (long long)row, (int)e, (int)c, (int)idx[e - 1]);
        if (seen[c])
            return fail(FA_STATUS_INVALID_BLOCK_MASK, why, why_size,
                        "%s row %lld: block %d is in both its lists", name, (long long)row,
                        (int)c);
        seen[c] = mark;
    }
    return FA_STATUS_OK;
}

/* Checks every row of one direction; with `grid` (batch x heads x q_blocks x k_blocks) it
 * records (kv) or compares with (q) the blocks of each row. */
static fa_status check_direction(const fa_block_lists *l, const direction *d, int64_t bhs,
                                 uint8_t *grid, const char *name, char *why, size_t why_size)
{
    uint8_t *seen = malloc((size_t)(d->cols > 0 ? d->cols : 1));
    if (!seen)
        return fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "cannot allocate %lld bytes",
                    (long long)d->cols);
    fa_status st = FA_STATUS_OK;
    for (int64_t row = 0; row < bhs * d->rows && st == FA_STATUS_OK; row++) {
        memset(seen, 0, (size_t)d->cols);
        st = check_list(l->num_blocks, l->indices, d, row, BLOCK_PARTIAL, seen, name, why,
                        why_size);
        if (st == FA_STATUS_OK && l->full_num_blocks)
            st = check_list(l->full_num_blocks, l->full_indices, d, row, BLOCK_FULL, seen, name,
                            why, why_size);
        for (int64_t c = 0; grid && st == FA_STATUS_OK && c < d->cols; c++) {
            uint8_t *g = &grid[d->transposed ? ((row / d->rows * d->cols + c) * d->rows +
                                                row % d->rows)
                                             : row * d->cols + c];
            if (!d->transposed)
                *g = seen[c];
            else if (*g != seen[c])
                st = fail(FA_STATUS_INVALID_BLOCK_MASK, why, why_size,
                          "q row %lld (key block %lld): query block %lld is %s in q, %s in kv",
                          (long long)row, (long long)(row % d->rows), (long long)c,
                          seen[c] == BLOCK_SKIPPED ? "absent" : seen[c] == BLOCK_FULL ? "full"
                                                                                      : "listed",
                          *g == BLOCK_SKIPPED ? "absent" : *g == BLOCK_FULL ? "full" : "listed");
        }
    }
    free(seen);
    return st;
}

fa_status fa_block_mask_check(const fa_block_mask_shape *s, const fa_block_lists *kv,
                              const fa_block_lists *q, char *why, size_t why_size)
{
    fa_status st = check_args(s, kv, q, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    int64_t nq = blocks(s->seqlen_q, s->block_q), nk = blocks(s->seqlen_k, s->block_k);
    int64_t bhs = s->batch * s->heads;
    uint8_t *grid = NULL;
    if (kv && q && !(grid = calloc((size_t)(bhs * nq * nk > 0 ? bhs * nq * nk : 1), 1)))
        return fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "cannot allocate %lld bytes",
                    (long long)(bhs * nq * nk));
    const direction fwd = {s->heads, nq, nk, false}, bwd = {s->heads, nk, nq, true};
    if (kv)
        st = check_direction(kv, &fwd, bhs, grid, "kv", why, why_size);
    if (st == FA_STATUS_OK && q)
        st = check_direction(q, &bwd, bhs, grid, "q", why, why_size);
    free(grid);
    return st;
}
