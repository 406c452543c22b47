/*
 * test_decode_more.c - the decoding suite's merge, planner and rejection tests (the runner and
 * the forward cases are in test_decode.c):
 * - fa_merge of partial forwards over chunks of the keys (one chunk empty, so its rows have
 *   LSE = -inf) against one unsplit forward; every part empty gives O = 0, LSE = -inf.
 * - The planner splits a one-row decode on a device with several compute units (opencl, cuda)
 *   and never on its own on the cpu golden; the explanation says why.
 * - Invalid block tables (a page past the pool, a negative page, a length past the table),
 *   seqlens_k past seqlen_k, cu_seqlens decreasing or past the tensor: each its own status,
 *   O untouched; missing or extra sequence buffers; a bad kv_splits or merge parts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "oracle.h"
#include "test_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- merge ----------------------------------------------------------------------------------- */

typedef struct merge_case {
    const char *name;
    fa_dtype dtype;
    int64_t chunks[4]; /* key chunk ends; chunk s is [chunks[s-1], chunks[s]) */
    int parts;
} merge_case;

static const merge_case merge_cases[] = {
    {"merge f32 three parts, one empty", FA_DTYPE_F32, {30, 30, 70, 0}, 3},
    {"merge f16 four parts", FA_DTYPE_F16, {1, 20, 64, 70}, 4},
    {"merge bf16 two parts", FA_DTYPE_BF16, {35, 70, 0, 0}, 2},
    {"merge f32 every part empty", FA_DTYPE_F32, {0, 0, 0, 0}, 2},
};

/* Runs one forward of p (its K/V layouts may point into the full tensors) into o / lse. */
static void forward_into(const fa_problem *p, fa_buffer *q, fa_buffer *k, fa_buffer *v,
                         fa_buffer *o, fa_buffer *lse)
{
    fa_plan *plan = NULL;
    if (fa_plan_create(dc_ctx, p, &plan) != FA_STATUS_OK)
        fail_msg("plan: %s", fa_context_last_error(dc_ctx));
    if (fa_forward(dc_ctx, plan, q, k, v, o, lse) != FA_STATUS_OK)
        fail_msg("forward: %s", fa_context_last_error(dc_ctx));
    fa_plan_destroy(plan);
}

static void test_merge(void **state)
{
    const merge_case *c = *state;
    const int64_t B = 2, H = 4, HKV = 2, SQ = 9, SK = c->chunks[c->parts - 1], D = 32;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, c->dtype, FA_LAYOUT_BHSD, B, H, HKV, SQ, SK, D),
                     FA_STATUS_OK);
    const size_t elem = fa_dtype_size(c->dtype);
    const int64_t nq = B * H * SQ * D, nk = B * HKV * (SK > 0 ? SK : 1) * D, rows = B * H * SQ;
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    void *qh = dc_nan_host(c->dtype, nq), *kh = dc_nan_host(c->dtype, nk);
    void *vh = dc_nan_host(c->dtype, nk);
    for (int64_t i = 0; i < nq; i++)
        oracle_store(c->dtype, qh, i, harness_rng_uniform(&rng, -2.0, 2.0));
    for (int64_t i = 0; i < B * HKV * SK * D; i++) {
        oracle_store(c->dtype, kh, i, harness_rng_uniform(&rng, -2.0, 2.0));
        oracle_store(c->dtype, vh, i, harness_rng_uniform(&rng, -1.0, 1.0));
    }
    fa_buffer *q = dc_buffer(qh, (size_t)nq * elem), *k = dc_buffer(kh, (size_t)nk * elem);
    fa_buffer *v = dc_buffer(vh, (size_t)nk * elem);
    fa_buffer *o_parts = dc_buffer(NULL, (size_t)(c->parts * nq) * elem);
    fa_buffer *lse_one = dc_buffer(NULL, (size_t)rows * 4);
    float *lse_host = malloc((size_t)(c->parts * rows) * 4);
    assert_non_null(lse_host);
    /* Part s: the keys [lo, hi) of the full K/V, written at part s of o_parts. */
    for (int s = 0, lo = 0; s < c->parts; lo = (int)c->chunks[s], s++) {
        fa_problem part = p;
        part.seqlen_k = c->chunks[s] - lo;
        part.k.offset = part.v.offset = lo * D;
        part.o.offset = s * nq;
        forward_into(&part, q, k, v, o_parts, lse_one);
        dc_read(lse_one, lse_host + s * rows, (size_t)rows * 4);
    }
    fa_buffer *lse_parts = dc_buffer(lse_host, (size_t)(c->parts * rows) * 4);
    fa_buffer *o = dc_buffer(NULL, (size_t)nq * elem), *lse = dc_buffer(NULL, (size_t)rows * 4);
    fa_buffer *o_ref = dc_buffer(NULL, (size_t)nq * elem);
    fa_buffer *lse_ref = dc_buffer(NULL, (size_t)rows * 4);
    fa_plan *merge = NULL;
    assert_int_equal(fa_plan_create_merge(dc_ctx, &p, c->parts, &merge), FA_STATUS_OK);
    if (fa_merge(dc_ctx, merge, o_parts, lse_parts, o, lse) != FA_STATUS_OK)
        fail_msg("merge: %s", fa_context_last_error(dc_ctx));
    forward_into(&p, q, k, v, o_ref, lse_ref);
    void *got = malloc((size_t)nq * elem), *want = malloc((size_t)nq * elem);
    float *gl = malloc((size_t)rows * 4), *wl = malloc((size_t)rows * 4);
    assert_true(got && want && gl && wl);
    dc_read(o, got, (size_t)nq * elem);
    dc_read(o_ref, want, (size_t)nq * elem);
    dc_read(lse, gl, (size_t)rows * 4);
    dc_read(lse_ref, wl, (size_t)rows * 4);
    /* The parts are rounded to the dtype before the merge: twice the forward's tolerance. */
    for (int64_t i = 0; i < nq; i++) {
        double g = oracle_load(c->dtype, got, i), e = oracle_load(c->dtype, want, i);
        if (!(fabs(g - e) <= 2 * dc_rel(c->dtype) + 1e-6)) /* |O| <= 1: |V| <= 1 */
            fail_msg("%s: O[%lld] = %.9g, the unsplit forward %.9g", c->name, (long long)i, g, e);
    }
    for (int64_t i = 0; i < rows; i++) {
        if (wl[i] == -INFINITY ? gl[i] != -INFINITY : !(fabs(gl[i] - wl[i]) <= 1e-5 * (1 + fabs(wl[i]))))
            fail_msg("%s: LSE[%lld] = %.9g, the unsplit forward %.9g", c->name, (long long)i,
                     gl[i], wl[i]);
    }
    fa_buffer *all[10] = {q, k, v, o_parts, lse_one, lse_parts, o, lse, o_ref, lse_ref};
    for (int i = 0; i < 10; i++)
        fa_buffer_destroy(all[i]);
    fa_plan_destroy(merge);
    void *hosts[8] = {qh, kh, vh, lse_host, got, want, gl, wl};
    for (int i = 0; i < 8; i++)
        free(hosts[i]);
}

/* ---- the planner's choice ---------------------------------------------------------------- */

static void test_auto_split(void **state)
{
    (void)state;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 1, 1, 1, 8192, 64),
                     FA_STATUS_OK);
    fa_device_props props;
    assert_int_equal(fa_context_device_props(dc_ctx, &props), FA_STATUS_OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(dc_ctx, &p, &plan), FA_STATUS_OK);
    int32_t splits = fa_plan_kv_splits(plan);
    if (dc_backend == FA_BACKEND_CPU || props.compute_units < 2) {
        assert_int_equal(splits, 1);
    } else {
        assert_true(splits > 1);
        assert_non_null(strstr(fa_plan_explain(plan), "split-KV"));
    }
    fa_plan_destroy(plan);
    p.kv_splits = 1; /* the override that disables splitting */
    assert_int_equal(fa_plan_create(dc_ctx, &p, &plan), FA_STATUS_OK);
    assert_int_equal(fa_plan_kv_splits(plan), 1);
    fa_plan_destroy(plan);
    p.kv_splits = -1;
    assert_int_equal(fa_plan_create(dc_ctx, &p, &plan), FA_STATUS_INVALID_ARGUMENT);
}

/* ---- rejected inputs ------------------------------------------------------------------------ */

/* A paged problem: 2 sequences, pages of 4 keys, 2 pages each, a pool of 4; or varlen. */
typedef struct bad_run {
    fa_problem p;
    fa_buffer *q, *k, *v, *o;
    void *o_host;
    size_t o_bytes;
} bad_run;

static void bad_setup(bad_run *r, bool varlen)
{
    fa_problem *p = &r->p;
    assert_int_equal(fa_problem_init(p, FA_DTYPE_F32, varlen ? FA_LAYOUT_BSHD : FA_LAYOUT_BHSD,
                                     2, 2, 1, 3, 8, 8),
                     FA_STATUS_OK);
    int64_t kv = varlen ? 15 * 8 : 4 * 4 * 8; /* varlen: 15 packed keys */
    if (varlen)
        p->varlen = 1;
    else {
        p->seqlens_k = 1;
        assert_int_equal(fa_problem_set_paged(p, 4, 4, 2), FA_STATUS_OK);
    }
    r->o_bytes = 2 * 2 * 3 * 8 * 4;
    r->o_host = dc_nan_host(FA_DTYPE_F32, 2 * 2 * 3 * 8);
    float *ones = calloc((size_t)kv, 4);
    assert_non_null(ones);
    r->q = dc_buffer(ones, r->o_bytes);
    r->k = dc_buffer(ones, (size_t)kv * 4);
    r->v = dc_buffer(ones, (size_t)kv * 4);
    r->o = dc_buffer(r->o_host, r->o_bytes);
    free(ones);
}

static void bad_teardown(bad_run *r)
{
    fa_buffer *all[4] = {r->q, r->k, r->v, r->o};
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(all[i]);
    free(r->o_host);
}

/* The run fails with `want` and a message naming `what`, and O keeps its NaNs. */
static void expect_rejected(bad_run *r, const fa_seq_buffers *sb, fa_status want,
                            const char *what)
{
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(dc_ctx, &r->p, &plan), FA_STATUS_OK);
    fa_status st = fa_forward_seq(dc_ctx, plan, r->q, r->k, r->v, r->o, NULL, NULL, sb);
    if (st != want || !strstr(fa_context_last_error(dc_ctx), what))
        fail_msg("%s: got %s \"%s\", want %s", what, fa_status_name(st),
                 fa_context_last_error(dc_ctx), fa_status_name(want));
    void *now = malloc(r->o_bytes);
    assert_non_null(now);
    dc_read(r->o, now, r->o_bytes);
    assert_memory_equal(now, r->o_host, r->o_bytes);
    free(now);
    fa_plan_destroy(plan);
}

/* The run succeeds and every O element is 1 (or 0 for a sequence clamped to no key). */
static void expect_ones(bad_run *r, const fa_seq_buffers *sb, const char *what)
{
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(dc_ctx, &r->p, &plan), FA_STATUS_OK);
    fa_status st = fa_forward_seq(dc_ctx, plan, r->q, r->k, r->v, r->o, NULL, NULL, sb);
    if (st != FA_STATUS_OK)
        fail_msg("%s unchecked: %s \"%s\"", what, fa_status_name(st),
                 fa_context_last_error(dc_ctx));
    float *now = malloc(r->o_bytes);
    assert_non_null(now);
    dc_read(r->o, now, r->o_bytes);
    for (size_t i = 0; i < r->o_bytes / 4; i++)
        if (now[i] != 1.0f && now[i] != 0.0f)
            fail_msg("%s unchecked: O[%zu] = %g, want 1 (clamped reads of ones)", what, i,
                     (double)now[i]);
    free(now);
    fa_plan_destroy(plan);
}

/* A bad block table or seqlens_k: the status a checked run returns, named in its message. */
typedef struct bad_seq {
    int32_t table[4], lens[2];
    fa_status want;
    const char *what;
} bad_seq;

/* Unchecked on an accelerator (the context's default) a bad table or length runs: the kernels
 * clamp each page into the pool and each length into [0, seqlen_k], so O is the attention
 * over ones (1, or 0 for a sequence clamped to no key) and nothing outside the tensors is read.
 * The cpu backend checks them always. */
static void expect_unchecked(bad_run *r, const bad_seq *bad)
{
    fa_buffer *t = dc_buffer(bad->table, 16), *l = dc_buffer(bad->lens, 8);
    fa_seq_buffers sb = {NULL, NULL, l, t};
    if (dc_backend == FA_BACKEND_CPU)
        expect_rejected(r, &sb, bad->want, bad->what);
    else
        expect_ones(r, &sb, bad->what);
    fa_buffer_destroy(t);
    fa_buffer_destroy(l);
}

static void test_bad_block_table(void **state)
{
    (void)state;
    bad_run r;
    bad_setup(&r, false);
    assert_int_equal(fa_context_set_check_sequences(dc_ctx, 1), FA_STATUS_OK); /* accelerators */
    const bad_seq bad[] = {
        {{0, 1, 2, 4}, {8, 8}, FA_STATUS_INVALID_BLOCK_TABLE, "block_table[1][1] = 4"},
        {{0, -1, 2, 3}, {8, 8}, FA_STATUS_INVALID_BLOCK_TABLE, "block_table[0][1] = -1"},
        {{0, 1, 2, 3}, {8, 9}, FA_STATUS_INVALID_SEQLENS, "seqlens_k[1] = 9"},
        {{0, 1, 2, 3}, {-1, 8}, FA_STATUS_INVALID_SEQLENS, "seqlens_k[0] = -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa_buffer *t = dc_buffer(bad[i].table, 16), *l = dc_buffer(bad[i].lens, 8);
        fa_seq_buffers sb = {NULL, NULL, l, t};
        expect_rejected(&r, &sb, bad[i].want, bad[i].what);
        fa_buffer_destroy(t);
        fa_buffer_destroy(l);
    }
    assert_int_equal(fa_context_set_check_sequences(dc_ctx, 0), FA_STATUS_OK);
    assert_int_equal(fa_context_set_check_sequences(dc_ctx, 2), FA_STATUS_INVALID_ARGUMENT);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_unchecked(&r, &bad[i]);
    /* A page the sequence's keys do not reach is not read: -7 past sequence 0's 4 keys. */
    int32_t table[4] = {3, -7, 2, 1}, lens[2] = {4, 8};
    fa_buffer *t = dc_buffer(table, 16), *l = dc_buffer(lens, 8);
    fa_seq_buffers sb = {NULL, NULL, l, t}, missing = {NULL, NULL, l, NULL};
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(dc_ctx, &r.p, &plan), FA_STATUS_OK);
    assert_int_equal(fa_forward_seq(dc_ctx, plan, r.q, r.k, r.v, r.o, NULL, NULL, &sb),
                     FA_STATUS_OK);
    assert_int_equal(fa_forward_seq(dc_ctx, plan, r.q, r.k, r.v, r.o, NULL, NULL, &missing),
                     FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_forward(dc_ctx, plan, r.q, r.k, r.v, r.o, NULL), FA_STATUS_NULL_POINTER);
    fa_plan_destroy(plan);
    /* A table too short for seqlen_k is rejected when planning; the backward runs no pages. */
    r.p.pages_per_seq = 1;
    assert_int_equal(fa_plan_create(dc_ctx, &r.p, &plan), FA_STATUS_INVALID_SHAPE);
    r.p.pages_per_seq = 2;
    assert_int_equal(fa_plan_create_backward(dc_ctx, &r.p, &plan), FA_STATUS_UNSUPPORTED);
    fa_buffer_destroy(t);
    fa_buffer_destroy(l);
    bad_teardown(&r);
}

static void test_bad_cu_seqlens(void **state)
{
    (void)state;
    bad_run r;
    bad_setup(&r, true);
    const struct {
        int32_t cu_q[3], cu_k[3];
        fa_status want;
        const char *what;
    } bad[] = {
        {{0, 3, 2}, {0, 4, 8}, FA_STATUS_INVALID_SEQLENS, "cu_seqlens_q decreases"},
        {{0, 2, 6}, {0, 4, 8}, FA_STATUS_INVALID_SEQLENS, "seqlen_q = 3"},
        {{-1, 2, 4}, {0, 4, 8}, FA_STATUS_INVALID_SEQLENS, "cu_seqlens_q[0] = -1"},
        {{0, 3, 6}, {0, 8, 17}, FA_STATUS_INVALID_SEQLENS, "seqlen_k = 8"},
        {{0, 3, 6}, {0, 8, 16}, FA_STATUS_BUFFER_TOO_SMALL, "buffer k"},
        {{2, 5, 8}, {0, 4, 8}, FA_STATUS_BUFFER_TOO_SMALL, "buffer q"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa_buffer *cq = dc_buffer(bad[i].cu_q, 12), *ck = dc_buffer(bad[i].cu_k, 12);
        fa_seq_buffers sb = {cq, ck, NULL, NULL};
        expect_rejected(&r, &sb, bad[i].want, bad[i].what);
        fa_buffer_destroy(cq);
        fa_buffer_destroy(ck);
    }
    fa_problem p = r.p;
    p.seqlens_k = 1;
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(dc_ctx, &p, &plan), FA_STATUS_INVALID_ARGUMENT);
    p.seqlens_k = 0;
    p.page_size = 4;
    assert_int_equal(fa_plan_create(dc_ctx, &p, &plan), FA_STATUS_UNSUPPORTED);
    p.page_size = 0;
    p.varlen = 2;
    assert_int_equal(fa_plan_create(dc_ctx, &p, &plan), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_plan_create_merge(dc_ctx, &r.p, 2, &plan), FA_STATUS_UNSUPPORTED);
    bad_teardown(&r);
}

static void test_bad_merge(void **state)
{
    (void)state;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, 4, 4, 8),
                     FA_STATUS_OK);
    fa_plan *plan = NULL, *fwd = NULL;
    assert_int_equal(fa_plan_create_merge(dc_ctx, &p, 0, &plan), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_plan_create_merge(dc_ctx, &p, 2, &plan), FA_STATUS_OK);
    fa_buffer *parts = dc_buffer(NULL, 2 * 32 * 4), *lp = dc_buffer(NULL, 7 * 4);
    fa_buffer *o = dc_buffer(NULL, 32 * 4);
    assert_int_equal(fa_merge(dc_ctx, plan, parts, lp, o, NULL), FA_STATUS_BUFFER_TOO_SMALL);
    assert_non_null(strstr(fa_context_last_error(dc_ctx), "lse_parts"));
    assert_int_equal(fa_merge(dc_ctx, plan, parts, parts, parts, NULL), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_plan_create(dc_ctx, &p, &fwd), FA_STATUS_OK);
    assert_int_equal(fa_merge(dc_ctx, fwd, parts, lp, o, NULL), FA_STATUS_INVALID_PLAN);
    assert_int_equal(fa_forward(dc_ctx, plan, parts, parts, parts, o, NULL), FA_STATUS_INVALID_PLAN);
    fa_buffer_destroy(parts);
    fa_buffer_destroy(lp);
    fa_buffer_destroy(o);
    fa_plan_destroy(plan);
    fa_plan_destroy(fwd);
}

static size_t add_if(struct CMUnitTest *tests, size_t n, const char *name, CMUnitTestFunction fn,
                     void *state, const char *filter)
{
    if (filter && !strstr(name, filter))
        return n;
    tests[n] = (struct CMUnitTest){name, fn, NULL, NULL, state};
    return n + 1;
}

size_t dc_add_merge_tests(struct CMUnitTest *tests, const char *filter)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof merge_cases / sizeof merge_cases[0]; i++)
        n = add_if(tests, n, merge_cases[i].name, test_merge, (void *)&merge_cases[i], filter);
    return add_if(tests, n, "planner splits a decode", test_auto_split, NULL, filter);
}

size_t dc_add_invalid_tests(struct CMUnitTest *tests, const char *filter)
{
    size_t n = add_if(tests, 0, "invalid block table", test_bad_block_table, NULL, filter);
    n = add_if(tests, n, "invalid cu_seqlens", test_bad_cu_seqlens, NULL, filter);
    return add_if(tests, n, "invalid merge", test_bad_merge, NULL, filter);
}
