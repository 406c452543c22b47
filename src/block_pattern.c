/*
 * block_pattern.c - the block-sparse patterns of include/flashattn_block_mask.h written as dense
 * block masks: a sliding window of blocks, the Sparse Transformer's fixed pattern, BigBird and
 * Longformer. Pure functions of their arguments.
 */
#include "internal.h"

#include <flashattn_block_mask.h>

#include <string.h>

typedef struct pattern_rows {
    int64_t nq, nk;          /* query and key blocks */
    int64_t offset;          /* seqlen_k - seqlen_q: row r's diagonal key is r + offset */
    int32_t block_q, block_k;
    int64_t seqlen_q;
} pattern_rows;

static int64_t clamp(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* The key block of row r's diagonal, clamped to the key blocks (a negative key is block 0). */
static int64_t diagonal_block(const pattern_rows *pr, int64_t r)
{
    int64_t key = r + pr->offset;
    return clamp(key < 0 ? 0 : key / pr->block_k, 0, pr->nk - 1);
}

/* Query block qb's diagonal key blocks: [*first, *last]. */
static void diagonal(const pattern_rows *pr, int64_t qb, int64_t *first, int64_t *last)
{
    int64_t r0 = qb * pr->block_q, r1 = clamp((qb + 1) * pr->block_q, 0, pr->seqlen_q) - 1;
    *first = diagonal_block(pr, r0);
    *last = diagonal_block(pr, r1 > r0 ? r1 : r0);
}

static void window_row(const pattern_rows *pr, int64_t qb, int32_t window, uint8_t *row)
{
    int64_t first, last;
    diagonal(pr, qb, &first, &last);
    for (int64_t kb = clamp(first - window, 0, pr->nk); kb <= last + window && kb < pr->nk; kb++)
        row[kb] = 1;
}

static void fixed_row(const pattern_rows *pr, int64_t qb, int32_t stride, uint8_t *row)
{
    int64_t first, last;
    diagonal(pr, qb, &first, &last);
    for (int64_t kb = 0; kb < pr->nk; kb++)
        if ((kb / stride >= first / stride && kb / stride <= last / stride) ||
            kb % stride == stride - 1)
            row[kb] = 1;
}

static void global_row(const pattern_rows *pr, int64_t qb, int32_t global, uint8_t *row)
{
    for (int64_t kb = 0; kb < pr->nk; kb++)
        if (kb < global || qb < global)
            row[kb] = 1;
}

/* SplitMix64 (Steele, Lea and Flood, 2014): a small, well-mixed generator for the draws. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* `count` more key blocks of the row, drawn without repeats among those not yet in it, from a
 * stream keyed by (seed, batch-head, query block); as many as there are when fewer remain. */
static void random_row(const pattern_rows *pr, int64_t bh, int64_t qb, int32_t count,
                       uint64_t seed, uint8_t *row)
{
    uint64_t state = seed ^ ((uint64_t)bh * 0x100000001b3ull + (uint64_t)qb);
    splitmix64(&state);
    int64_t free_blocks = 0;
    for (int64_t kb = 0; kb < pr->nk; kb++)
        free_blocks += row[kb] == 0;
    for (int32_t n = 0; n < count && free_blocks > 0; n++, free_blocks--) {
        int64_t pick = (int64_t)(splitmix64(&state) % (uint64_t)free_blocks);
        for (int64_t kb = 0; kb < pr->nk; kb++)
            if (row[kb] == 0 && pick-- == 0) {
                row[kb] = 1;
                break;
            }
    }
}

static fa_status check_pattern(const fa_block_pattern *pat, char *why, size_t why_size)
{
    const char *bad = NULL;
    if (pat->kind < FA_BLOCK_PATTERN_LOCAL || pat->kind > FA_BLOCK_PATTERN_LONGFORMER)
        bad = "kind is not a fa_block_pattern_kind";
    else if (pat->window < 0 || pat->global < 0 || pat->random < 0)
        bad = "window, global and random must be >= 0";
    else if (pat->kind == FA_BLOCK_PATTERN_FIXED && pat->stride < 1)
        bad = "the fixed pattern's stride must be >= 1";
    if (bad)
        fa__format(why, why_size, "block pattern: %s", bad);
    return bad ? FA_STATUS_INVALID_ARGUMENT : FA_STATUS_OK;
}

static void pattern_row(const pattern_rows *pr, const fa_block_pattern *pat, int64_t bh,
                        int64_t qb, uint8_t *row)
{
    memset(row, 0, (size_t)pr->nk);
    switch (pat->kind) {
    case FA_BLOCK_PATTERN_FIXED:
        fixed_row(pr, qb, pat->stride, row);
        break;
    case FA_BLOCK_PATTERN_BIGBIRD:
        window_row(pr, qb, pat->window, row);
        global_row(pr, qb, pat->global, row);
        random_row(pr, bh, qb, pat->random, pat->seed, row);
        break;
    case FA_BLOCK_PATTERN_LONGFORMER:
        global_row(pr, qb, pat->global, row);
        window_row(pr, qb, pat->window, row);
        break;
    case FA_BLOCK_PATTERN_LOCAL:
    default:
        window_row(pr, qb, pat->window, row);
        break;
    }
}

fa_status fa_block_mask_pattern(const fa_block_mask_shape *s, const fa_block_pattern *pat,
                                uint8_t *dense, char *why, size_t why_size)
{
    fa_status st = fa_block_mask_check_shape(s, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    if (!pat || !dense) {
        fa__format(why, why_size, "the pattern or the dense block mask is NULL");
        return FA_STATUS_NULL_POINTER;
    }
    if ((st = check_pattern(pat, why, why_size)) != FA_STATUS_OK)
        return st;
    const pattern_rows pr = {fa_block_mask_q_blocks(s), fa_block_mask_k_blocks(s),
                             s->seqlen_k - s->seqlen_q, s->block_q, s->block_k, s->seqlen_q};
    for (int64_t bh = 0; bh < s->batch * s->heads; bh++)
        for (int64_t qb = 0; qb < pr.nq; qb++)
            pattern_row(&pr, pat, bh, qb, dense + (bh * pr.nq + qb) * pr.nk);
    return FA_STATUS_OK;
}
