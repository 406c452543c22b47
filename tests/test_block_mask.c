/*
 * test_block_mask.c - the host side of block masks (include/flashattn_block_mask.h): lists built
 * from random dense masks against a direct reading of the mask, both directions and the full
 * pair; every malformed list refused with its status and a message naming the entry; the shape's
 * checks; the patterns' blocks counted against their definitions, written out here again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn_block_mask.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK
#define BAD_MASK FA_STATUS_INVALID_BLOCK_MASK

/* Lists of one direction with their storage. */
typedef struct owned_lists {
    fa_block_lists l;
    int64_t rows, cols; /* per (batch, head) */
} owned_lists;

static owned_lists lists_new(int64_t bhs, int64_t rows, int64_t cols, bool full)
{
    owned_lists o = {{NULL, NULL, NULL, NULL}, rows, cols};
    size_t n = (size_t)(bhs * rows), m = (size_t)(bhs * rows * cols);
    o.l.num_blocks = calloc(n + 1, 4);
    o.l.indices = calloc(m + 1, 4);
    if (full) {
        o.l.full_num_blocks = calloc(n + 1, 4);
        o.l.full_indices = calloc(m + 1, 4);
    }
    return o;
}

static void lists_free(owned_lists *o)
{
    free(o->l.num_blocks);
    free(o->l.indices);
    free(o->l.full_num_blocks);
    free(o->l.full_indices);
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* A dense mask with about `percent` % of blocks computed, a third of those full. */
static uint8_t *random_dense(int64_t n, int percent, uint32_t seed)
{
    uint8_t *d = malloc((size_t)n + 1);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = lcg(&seed) % 300;
        d[i] = r >= (uint32_t)percent * 3 ? 0 : r % 3 == 0 ? 2 : 1;
    }
    return d;
}

/* Row `row` of a list holds exactly the columns c where want(c), ascending, then -1. */
static void expect_row(const int32_t *num, const int32_t *idx, int64_t row, int64_t cols,
                       const bool *want)
{
    int32_t n = 0;
    for (int64_t c = 0; c < cols; c++)
        if (want[c])
            assert_int_equal(idx[row * cols + n++], c);
    assert_int_equal(num[row], n);
    for (int64_t c = n; c < cols; c++)
        assert_int_equal(idx[row * cols + c], -1);
}

/* Each list against the dense mask read directly: kv by rows, q by columns. */
static void check_against_dense(const fa_block_mask_shape *s, const uint8_t *dense,
                                const owned_lists *kv, const owned_lists *q)
{
    int64_t nq = fa_block_mask_q_blocks(s), nk = fa_block_mask_k_blocks(s);
    size_t most = (size_t)(nq > nk ? nq : nk) + 1;
    bool *want = calloc(most, 1), *wfull = calloc(most, 1);
    for (int64_t bh = 0; bh < s->batch * s->heads; bh++) {
        const uint8_t *m = dense + bh * nq * nk;
        for (int64_t qb = 0; qb < nq; qb++) {
            bool full = kv->l.full_indices != NULL;
            for (int64_t kb = 0; kb < nk; kb++) {
                want[kb] = m[qb * nk + kb] == 1 || (m[qb * nk + kb] == 2 && !full);
                wfull[kb] = m[qb * nk + kb] == 2;
            }
            expect_row(kv->l.num_blocks, kv->l.indices, bh * nq + qb, nk, want);
            if (full)
                expect_row(kv->l.full_num_blocks, kv->l.full_indices, bh * nq + qb, nk, wfull);
        }
        for (int64_t kb = 0; kb < nk; kb++) {
            bool full = q->l.full_indices != NULL;
            for (int64_t qb = 0; qb < nq; qb++) {
                want[qb] = m[qb * nk + kb] == 1 || (m[qb * nk + kb] == 2 && !full);
                wfull[qb] = m[qb * nk + kb] == 2;
            }
            expect_row(q->l.num_blocks, q->l.indices, bh * nk + kb, nq, want);
            if (full)
                expect_row(q->l.full_num_blocks, q->l.full_indices, bh * nk + kb, nq, wfull);
        }
    }
    free(want);
    free(wfull);
}

/* Random masks of densities 0 .. 100 % over odd lengths and broadcast shapes: the lists match
 * the mask, with and without the full pair, and fa_block_mask_check accepts them. */
static void test_lists_from_dense(void **state)
{
    (void)state;
    const fa_block_mask_shape shapes[] = {
        {1, 1, 1000, 1000, 64, 64}, {2, 3, 113, 203, 16, 32}, {1, 2, 255, 127, 128, 16},
        {3, 1, 0, 50, 16, 16},      {1, 1, 40, 0, 32, 16},    {2, 2, 300, 300, 256, 64}};
    const int densities[] = {0, 10, 50, 100};
    uint32_t seed = 7;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < 4; j++)
            for (int full = 0; full < 2; full++) {
                const fa_block_mask_shape *s = &shapes[i];
                int64_t nq = fa_block_mask_q_blocks(s), nk = fa_block_mask_k_blocks(s);
                int64_t bhs = s->batch * s->heads;
                uint8_t *dense = random_dense(bhs * nq * nk, densities[j], seed++);
                owned_lists kv = lists_new(bhs, nq, nk, full), q = lists_new(bhs, nk, nq, full);
                char why[256] = "";
                assert_int_equal(fa_block_mask_lists(s, dense, &kv.l, &q.l, why, sizeof why), OK);
                check_against_dense(s, dense, &kv, &q);
                assert_int_equal(fa_block_mask_check(s, &kv.l, &q.l, why, sizeof why), OK);
                assert_int_equal(fa_block_mask_check(s, &kv.l, NULL, why, sizeof why), OK);
                assert_int_equal(fa_block_mask_check(s, NULL, &q.l, why, sizeof why), OK);
                lists_free(&kv);
                lists_free(&q);
                free(dense);
            }
}

/* One list corrupted one way: its status and a message naming what is wrong. */
typedef struct corruption {
    const char *what;
    int list;           /* 0: kv indices, 1: kv num_blocks, 2: kv full_indices, 3: q indices */
    int64_t at;         /* the entry changed */
    int32_t value;
    const char *message; /* a substring of the message */
} corruption;

static void test_check_refuses(void **state)
{
    (void)state;
    /* 2 query blocks x 4 key blocks; kv rows {0, 2} + full {1}, {3}; q is the transpose. */
    const fa_block_mask_shape s = {1, 1, 64, 128, 32, 32};
    const uint8_t dense[8] = {1, 2, 1, 0, 0, 0, 0, 1};
    const corruption cases[] = {
        {"count above the row", 1, 0, 5, "num_blocks[0] = 5 is outside [0, 4]"},
        {"negative count", 1, 1, -1, "num_blocks[1] = -1"},
        {"index out of range", 0, 1, 4, "indices[0][1] = 4 is outside [0, 4)"},
        {"negative index", 0, 0, -2, "indices[0][0] = -2"},
        {"not ascending", 0, 1, 0, "entry 1 = 0 after 0"},
        {"in both lists", 2, 0, 2, "block 2 is in both its lists"},
        {"transpose differs", 3, 0, 1, "query block"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        owned_lists kv = lists_new(1, 2, 4, true), q = lists_new(1, 4, 2, true);
        char why[256] = "";
        assert_int_equal(fa_block_mask_lists(&s, dense, &kv.l, &q.l, why, sizeof why), OK);
        int32_t *targets[] = {kv.l.indices, kv.l.num_blocks, kv.l.full_indices, q.l.indices};
        targets[cases[i].list][cases[i].at] = cases[i].value;
        fa_status st = fa_block_mask_check(&s, &kv.l, &q.l, why, sizeof why);
        if (st != BAD_MASK || !strstr(why, cases[i].message))
            fail_msg("%s: status %s, message \"%s\"", cases[i].what, fa_status_name(st), why);
        lists_free(&kv);
        lists_free(&q);
    }
}

static void test_shape_and_arguments(void **state)
{
    (void)state;
    char why[256] = "";
    const int32_t bad_sizes[] = {0, 8, 24, 512, -16};
    for (size_t i = 0; i < 5; i++) {
        fa_block_mask_shape s = {1, 1, 64, 64, 64, bad_sizes[i]};
        assert_int_equal(fa_block_mask_check_shape(&s, why, sizeof why),
                         FA_STATUS_INVALID_BLOCK_SIZE);
        assert_non_null(strstr(why, "power of two"));
        assert_int_equal(fa_block_mask_q_blocks(&s), -1);
    }
    fa_block_mask_shape s = {0, 1, 64, 64, 16, 16};
    assert_int_equal(fa_block_mask_check_shape(&s, why, sizeof why), FA_STATUS_INVALID_SHAPE);
    s = (fa_block_mask_shape){1, 1, -1, 64, 16, 16};
    assert_int_equal(fa_block_mask_check_shape(&s, why, sizeof why), FA_STATUS_INVALID_SHAPE);
    s = (fa_block_mask_shape){1 << 20, 1 << 10, 1 << 20, 1 << 20, 16, 16};
    assert_int_equal(fa_block_mask_check_shape(&s, why, sizeof why), FA_STATUS_INVALID_SHAPE);
    assert_int_equal(fa_block_mask_check_shape(NULL, why, sizeof why), FA_STATUS_NULL_POINTER);

    /* A dense value other than 0, 1, 2; no lists wanted; half a full pair: outputs untouched. */
    s = (fa_block_mask_shape){1, 1, 32, 32, 16, 16};
    uint8_t dense[4] = {1, 0, 3, 1};
    owned_lists kv = lists_new(1, 2, 2, false);
    kv.l.num_blocks[0] = 77;
    assert_int_equal(fa_block_mask_lists(&s, dense, &kv.l, NULL, why, sizeof why), BAD_MASK);
    assert_non_null(strstr(why, "is 3"));
    assert_int_equal(kv.l.num_blocks[0], 77);
    assert_int_equal(fa_block_mask_lists(&s, dense, NULL, NULL, why, sizeof why),
                     FA_STATUS_NULL_POINTER);
    kv.l.full_indices = kv.l.indices;
    dense[2] = 1;
    assert_int_equal(fa_block_mask_lists(&s, dense, &kv.l, NULL, why, sizeof why),
                     FA_STATUS_NULL_POINTER);
    kv.l.full_indices = NULL;
    lists_free(&kv);
}

/* ---- patterns, against their definitions written again ------------------------------------ */

/* Row qb's diagonal key blocks (bottom-right aligned, clamped). */
static void diag_of(const fa_block_mask_shape *s, int64_t qb, int64_t *lo, int64_t *hi)
{
    int64_t nk = fa_block_mask_k_blocks(s), last = (qb + 1) * s->block_q;
    last = (last < s->seqlen_q ? last : s->seqlen_q) - 1;
    int64_t rows[2] = {qb * s->block_q, last}, out[2];
    for (int i = 0; i < 2; i++) {
        int64_t key = rows[i] + s->seqlen_k - s->seqlen_q;
        int64_t b = key < 0 ? 0 : key / s->block_k;
        out[i] = b >= nk ? nk - 1 : b;
    }
    *lo = out[0];
    *hi = out[1];
}

static bool local_has(const fa_block_mask_shape *s, int64_t qb, int64_t kb, int64_t w)
{
    int64_t lo, hi;
    diag_of(s, qb, &lo, &hi);
    return kb >= lo - w && kb <= hi + w;
}

static void test_patterns(void **state)
{
    (void)state;
    const fa_block_mask_shape shapes[] = {{1, 1, 4096, 4096, 64, 64}, {2, 2, 1000, 3000, 32, 128},
                                          {1, 1, 4096, 4096, 128, 32}};
    char why[256] = "";
    for (size_t i = 0; i < 3; i++) {
        const fa_block_mask_shape *s = &shapes[i];
        int64_t nq = fa_block_mask_q_blocks(s), nk = fa_block_mask_k_blocks(s);
        int64_t per = nq * nk, n = s->batch * s->heads * per;
        uint8_t *d = malloc((size_t)n), *e = malloc((size_t)n);
        fa_block_pattern local = {FA_BLOCK_PATTERN_LOCAL, 2, 0, 0, 0, 0};
        assert_int_equal(fa_block_mask_pattern(s, &local, d, why, sizeof why), OK);
        fa_block_pattern fixed = {FA_BLOCK_PATTERN_FIXED, 0, 8, 0, 0, 0};
        assert_int_equal(fa_block_mask_pattern(s, &fixed, e, why, sizeof why), OK);
        for (int64_t x = 0; x < n; x++) {
            int64_t qb = x % per / nk, kb = x % nk, lo, hi;
            diag_of(s, qb, &lo, &hi);
            assert_int_equal(d[x], local_has(s, qb, kb, 2));
            bool group = kb / 8 >= lo / 8 && kb / 8 <= hi / 8;
            assert_int_equal(e[x], group || kb % 8 == 7);
        }
        fa_block_pattern lf = {FA_BLOCK_PATTERN_LONGFORMER, 1, 0, 2, 0, 0};
        assert_int_equal(fa_block_mask_pattern(s, &lf, d, why, sizeof why), OK);
        for (int64_t x = 0; x < n; x++) {
            int64_t qb = x % per / nk, kb = x % nk;
            assert_int_equal(d[x], local_has(s, qb, kb, 1) || qb < 2 || kb < 2);
        }
        /* BigBird: Longformer's blocks plus exactly 3 more per row (all there are, where fewer
         * remain); the same seed gives the same mask, another seed another. */
        fa_block_pattern bb = {FA_BLOCK_PATTERN_BIGBIRD, 1, 0, 2, 3, 42};
        assert_int_equal(fa_block_mask_pattern(s, &bb, e, why, sizeof why), OK);
        for (int64_t row = 0; row < n / nk; row++) {
            int64_t base = 0, extra = 0;
            for (int64_t kb = 0; kb < nk; kb++) {
                base += d[row * nk + kb];
                assert_true(e[row * nk + kb] >= d[row * nk + kb]);
                extra += e[row * nk + kb] - d[row * nk + kb];
            }
            assert_int_equal(extra, nk - base < 3 ? nk - base : 3);
        }
        uint8_t *again = malloc((size_t)n);
        assert_int_equal(fa_block_mask_pattern(s, &bb, again, why, sizeof why), OK);
        assert_memory_equal(again, e, (size_t)n);
        bb.seed = 43;
        assert_int_equal(fa_block_mask_pattern(s, &bb, again, why, sizeof why), OK);
        assert_memory_not_equal(again, e, (size_t)n);
        free(again);
        free(d);
        free(e);
    }
}

/* The fixed pattern's blocks grow as N sqrt N with stride sqrt(k_blocks): at 4x the length
 * (2x the stride), about 8x the blocks, where dense grows 16x. */
static void test_fixed_pattern_growth(void **state)
{
    (void)state;
    char why[256] = "";
    int64_t counts[2];
    for (int i = 0; i < 2; i++) {
        int64_t len = i == 0 ? 4096 : 16384;
        fa_block_mask_shape s = {1, 1, len, len, 64, 64};
        int64_t nk = fa_block_mask_k_blocks(&s);
        fa_block_pattern fixed = {FA_BLOCK_PATTERN_FIXED, 0, i == 0 ? 8 : 16, 0, 0, 0};
        uint8_t *d = malloc((size_t)(nk * nk));
        assert_int_equal(fa_block_mask_pattern(&s, &fixed, d, why, sizeof why), OK);
        counts[i] = 0;
        for (int64_t x = 0; x < nk * nk; x++)
            counts[i] += d[x];
        free(d);
    }
    double ratio = (double)counts[1] / (double)counts[0];
    if (ratio < 7.0 || ratio > 9.0)
        fail_msg("fixed pattern: %lld then %lld blocks, ratio %.2f (N sqrt N: 8)",
                 (long long)counts[0], (long long)counts[1], ratio);
}

static void test_pattern_arguments(void **state)
{
    (void)state;
    char why[256] = "";
    fa_block_mask_shape s = {1, 1, 64, 64, 16, 16};
    uint8_t d[16];
    const fa_block_pattern bad[] = {{(fa_block_pattern_kind)0, 1, 1, 0, 0, 0},
                                    {FA_BLOCK_PATTERN_LOCAL, -1, 0, 0, 0, 0},
                                    {FA_BLOCK_PATTERN_FIXED, 0, 0, 0, 0, 0},
                                    {FA_BLOCK_PATTERN_BIGBIRD, 1, 0, 1, -3, 0}};
    for (size_t i = 0; i < 4; i++) {
        memset(d, 9, sizeof d);
        assert_int_equal(fa_block_mask_pattern(&s, &bad[i], d, why, sizeof why),
                         FA_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(why, "block pattern"));
        assert_int_equal(d[0], 9);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_from_dense),     cmocka_unit_test(test_check_refuses),
        cmocka_unit_test(test_shape_and_arguments),  cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_fixed_pattern_growth), cmocka_unit_test(test_pattern_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
