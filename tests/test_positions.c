/*
 * test_positions.c - a problem run in blocks with positions (fa_problem's q_position,
 * k_position, whole_seqlen_q/k) equals the whole run, on one backend: every (query block, key
 * block) pair is a forward whose partial O and LSE fa_merge combines, and a backward (from the
 * whole run's O and LSE rows) whose dQ, dK, dV shares sum to the whole backward's. The cases
 * turn on the rules that read positions: both causal alignments, the window, ALiBi, softcap
 * and dropout (its bits must match the whole run's, or O would differ by whole kept/dropped
 * terms), square and cross-attention, GQA, blocks that see no key. Then the invalid positions
 * with their status. Run: test_positions cpu|opencl|cuda.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn.h"
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK
#define MAX_CUTS 6

static fa_backend the_backend;
static fa_context *ctx;

/* One case: the whole problem and where its rows and keys are cut into blocks. */
typedef struct pos_case {
    const char *name;
    int64_t heads_q, heads_kv, sq, sk, d;
    fa_mask mask;
    int64_t window_left, window_right; /* both -2: no window */
    int alibi;
    float softcap, dropout;
    int64_t q_cuts[MAX_CUTS], k_cuts[MAX_CUTS]; /* block starts after 0, ending at -1 */
} pos_case;

static const pos_case cases[] = {
    {"causal window alibi softcap dropout", 2, 2, 37, 37, 16, FA_MASK_CAUSAL_TOP_LEFT, 5, 3, 1,
     20.0f, 0.2f, {13, 20, -1}, {12, 24, -1}},
    {"bottom-right cross window alibi", 4, 2, 29, 45, 8, FA_MASK_CAUSAL_BOTTOM_RIGHT, 7, -1, 1,
     0.0f, 0.0f, {5, 17, -1}, {8, 9, 30, -1}},
    {"top-left cross dropout gqa", 4, 1, 20, 33, 16, FA_MASK_CAUSAL_TOP_LEFT, -2, -2, 0, 0.0f,
     0.3f, {7, -1}, {4, 16, 28, -1}},
    {"no mask window right dropout", 2, 1, 31, 26, 32, FA_MASK_NONE, -1, 4, 0, 30.0f, 0.1f,
     {16, -1}, {8, 20, -1}},
    {"window only, blocks outside it", 1, 1, 40, 40, 8, FA_MASK_NONE, 2, 2, 1, 0.0f, 0.0f,
     {10, 30, -1}, {10, 20, 30, -1}},
};

/* The block starts of one side: 0, the cuts, then len (returns the number of blocks). */
static int blocks_of(const int64_t *cuts, int64_t len, int64_t *at)
{
    int n = 0;
    at[n++] = 0;
    for (int i = 0; i < MAX_CUTS && cuts[i] >= 0; i++)
        at[n++] = cuts[i];
    at[n] = len;
    return n;
}

static fa_buffer *device_copy(const void *host, size_t bytes)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, bytes ? bytes : 4, &b), OK);
    if (host && bytes)
        assert_int_equal(fa_buffer_write(b, 0, host, bytes), OK);
    return b;
}

static float *host_read(const fa_buffer *b, size_t elems)
{
    float *h = malloc(elems * sizeof *h + 4);
    assert_non_null(h);
    assert_int_equal(fa_buffer_read(b, 0, h, elems * sizeof *h), OK);
    return h;
}

/* The whole problem of a case (f32, BHSD) with its modifiers. */
static fa_problem whole_problem(const pos_case *c)
{
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, c->heads_q,
                                     c->heads_kv, c->sq, c->sk, c->d),
                     OK);
    p.mask = c->mask;
    p.window = c->window_left != -2;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.alibi = c->alibi;
    p.softcap = c->softcap;
    p.dropout_p = c->dropout;
    p.dropout_seed = 0x1234567890abcdefull;
    p.dropout_offset = 7;
    return p;
}

/* Block (rows [q0, q0 + nq), keys [k0, k0 + nk)) of the whole problem: Q, K, V, dO read in
 * place through offsets; O, dQ, dK, dV compact [1, H, n, d] at out_offset (O) or 0. */
static fa_problem block_problem(const fa_problem *w, int64_t q0, int64_t nq, int64_t k0,
                                int64_t nk, int64_t out_offset)
{
    fa_problem b = *w, compact;
    assert_int_equal(fa_problem_init(&compact, w->dtype, FA_LAYOUT_BHSD, 1, w->heads_q,
                                     w->heads_kv, nq, nk, w->head_dim),
                     OK);
    b.seqlen_q = nq;
    b.seqlen_k = nk;
    b.q.offset = q0 * w->q.stride_seq;
    b.d_o.offset = q0 * w->d_o.stride_seq;
    b.k.offset = k0 * w->k.stride_seq;
    b.v.offset = k0 * w->v.stride_seq;
    b.o = compact.o;
    b.o.offset = out_offset;
    b.dq = compact.dq;
    b.dk = compact.dk;
    b.dv = compact.dv;
    b.q_position = q0;
    b.k_position = k0;
    b.whole_seqlen_q = w->seqlen_q;
    b.whole_seqlen_k = w->seqlen_k;
    return b;
}

typedef struct whole_run {
    fa_buffer *q, *k, *v, *d_o, *slopes;
    float *o, *lse, *dq, *dk, *dv; /* host: the whole run's results */
} whole_run;

static void run_whole(const pos_case *c, const fa_problem *w, whole_run *r)
{
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    const size_t nq = (size_t)(c->heads_q * c->sq * c->d);
    const size_t nk = (size_t)(c->heads_kv * c->sk * c->d);
    float *x = malloc((2 * nq + 2 * nk + 8) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < 2 * nq + 2 * nk; i++)
        x[i] = (float)harness_rng_uniform(&rng, -1.5, 1.5);
    float slopes[8];
    for (int h = 0; h < 8; h++)
        slopes[h] = 0.5f / (float)(h + 1);
    r->q = device_copy(x, nq * 4);
    r->d_o = device_copy(x + nq, nq * 4);
    r->k = device_copy(x + 2 * nq, nk * 4);
    r->v = device_copy(x + 2 * nq + nk, nk * 4);
    r->slopes = device_copy(slopes, (size_t)c->heads_q * 4);
    free(x);
    fa_buffer *o = device_copy(NULL, nq * 4), *lse = device_copy(NULL, nq / c->d * 4);
    fa_buffer *dq = device_copy(NULL, nq * 4), *dk = device_copy(NULL, nk * 4);
    fa_buffer *dv = device_copy(NULL, nk * 4);
    fa_plan *fwd = NULL, *bwd = NULL;
    assert_int_equal(fa_plan_create(ctx, w, &fwd), OK);
    assert_int_equal(fa_plan_create_backward(ctx, w, &bwd), OK);
    const fa_buffer *sl = c->alibi ? r->slopes : NULL;
    fa_tensors t = {.q = r->q, .k = r->k, .v = r->v, .o = o, .lse = lse, .alibi_slopes = sl};
    assert_int_equal(fa_run(ctx, fwd, &t), OK);
    fa_tensors tb = {.q = r->q, .k = r->k, .v = r->v, .o = o, .lse = lse, .d_o = r->d_o,
                     .dq = dq, .dk = dk, .dv = dv, .alibi_slopes = sl};
    assert_int_equal(fa_run(ctx, bwd, &tb), OK);
    r->o = host_read(o, nq);
    r->lse = host_read(lse, nq / c->d);
    r->dq = host_read(dq, nq);
    r->dk = host_read(dk, nk);
    r->dv = host_read(dv, nk);
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    fa_buffer *all[] = {o, lse, dq, dk, dv};
    for (int i = 0; i < 5; i++)
        fa_buffer_destroy(all[i]);
}

static void expect_close(const char *what, const char *name, const float *got,
                         const float *want, size_t n, double tol)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bool both_ninf = isinf(got[i]) && isinf(want[i]) && got[i] < 0 && want[i] < 0;
        if (!both_ninf && !(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs(want[i])))) {
            if (bad++ < 3)
                fprintf(stderr, "%s %s[%zu]: %.8g, whole run %.8g\n", name, what, i,
                        (double)got[i], (double)want[i]);
        }
    }
    assert_int_equal(bad, 0);
}

/* The forward of query block [q0, q0 + nq) against every key block, merged; compared with the
 * whole run's rows. */
static void forward_blocks(const pos_case *c, const fa_problem *w, const whole_run *r,
                           int64_t q0, int64_t nq, const int64_t *kat, int nkb)
{
    const size_t part = (size_t)(c->heads_q * nq * c->d), rows = (size_t)(c->heads_q * nq);
    fa_buffer *parts = device_copy(NULL, part * nkb * 4);
    float *lse_parts = malloc(rows * nkb * 4 + 4);
    assert_non_null(lse_parts);
    fa_buffer *lse = device_copy(NULL, rows * 4);
    for (int s = 0; s < nkb; s++) {
        fa_problem b = block_problem(w, q0, nq, kat[s], kat[s + 1] - kat[s], (int64_t)part * s);
        fa_plan *plan = NULL;
        assert_int_equal(fa_plan_create(ctx, &b, &plan), OK);
        fa_tensors t = {.q = r->q, .k = r->k, .v = r->v, .o = parts, .lse = lse,
                        .alibi_slopes = c->alibi ? r->slopes : NULL};
        assert_int_equal(fa_run(ctx, plan, &t), OK);
        assert_int_equal(fa_buffer_read(lse, 0, lse_parts + rows * s, rows * 4), OK);
        fa_plan_destroy(plan);
    }
    fa_buffer *lse_dev = device_copy(lse_parts, rows * nkb * 4);
    fa_buffer *o = device_copy(NULL, part * 4);
    fa_problem m; /* the merge reads only the shapes and O's layout */
    assert_int_equal(fa_problem_init(&m, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, c->heads_q,
                                     c->heads_kv, nq, c->sk, c->d),
                     OK);
    fa_plan *merge = NULL;
    assert_int_equal(fa_plan_create_merge(ctx, &m, nkb, &merge), OK);
    assert_int_equal(fa_merge(ctx, merge, parts, lse_dev, o, lse), OK);
    float *got_o = host_read(o, part), *got_lse = host_read(lse, rows);
    float *want_o = malloc(part * 4 + 4), *want_lse = malloc(rows * 4 + 4);
    assert_true(want_o && want_lse);
    for (int64_t h = 0; h < c->heads_q; h++) {
        memcpy(want_o + h * nq * c->d, r->o + (h * c->sq + q0) * c->d, (size_t)(nq * c->d) * 4);
        memcpy(want_lse + h * nq, r->lse + h * c->sq + q0, (size_t)nq * 4);
    }
    expect_close("O", c->name, got_o, want_o, part, 2e-5);
    expect_close("LSE", c->name, got_lse, want_lse, rows, 2e-5);
    fa_plan_destroy(merge);
    fa_buffer *all[] = {parts, lse_dev, o, lse};
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(all[i]);
    free(lse_parts);
    free(got_o);
    free(got_lse);
    free(want_o);
    free(want_lse);
}

/* dst[h][row0 + i][x] += src[h][i][x] for a compact [H, n, d] block into [H, len, d]. */
static void add_rows(double *dst, const float *src, int64_t heads, int64_t len, int64_t row0,
                     int64_t n, int64_t d)
{
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n * d; i++)
            dst[(h * len + row0) * d + i] += src[h * n * d + i];
}

/* The backward of block (query block qb, key block kb) from the whole run's O and LSE rows,
 * its dQ, dK and dV shares added into the sums. */
static void backward_block(const pos_case *c, const fa_problem *w, const whole_run *r,
                           fa_buffer *o_whole, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                           double *dq, double *dk, double *dv)
{
    fa_problem b = block_problem(w, q0, nq, k0, nk, 0);
    b.o = w->o; /* the whole run's O, read in place */
    b.o.offset = q0 * w->o.stride_seq;
    float *lse_rows = malloc((size_t)(c->heads_q * nq) * 4 + 4);
    assert_non_null(lse_rows);
    for (int64_t h = 0; h < c->heads_q; h++)
        memcpy(lse_rows + h * nq, r->lse + h * c->sq + q0, (size_t)nq * 4);
    const size_t nqe = (size_t)(c->heads_q * nq * c->d), nke = (size_t)(c->heads_kv * nk * c->d);
    fa_buffer *lse = device_copy(lse_rows, (size_t)(c->heads_q * nq) * 4);
    fa_buffer *gq = device_copy(NULL, nqe * 4), *gk = device_copy(NULL, nke * 4);
    fa_buffer *gv = device_copy(NULL, nke * 4);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create_backward(ctx, &b, &plan), OK);
    fa_tensors t = {.q = r->q, .k = r->k, .v = r->v, .o = o_whole, .lse = lse, .d_o = r->d_o,
                    .dq = gq, .dk = gk, .dv = gv, .alibi_slopes = c->alibi ? r->slopes : NULL};
    assert_int_equal(fa_run(ctx, plan, &t), OK);
    float *hq = host_read(gq, nqe), *hk = host_read(gk, nke), *hv = host_read(gv, nke);
    add_rows(dq, hq, c->heads_q, c->sq, q0, nq, c->d);
    add_rows(dk, hk, c->heads_kv, c->sk, k0, nk, c->d);
    add_rows(dv, hv, c->heads_kv, c->sk, k0, nk, c->d);
    fa_plan_destroy(plan);
    fa_buffer *all[] = {lse, gq, gk, gv};
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(all[i]);
    free(lse_rows);
    free(hq);
    free(hk);
    free(hv);
}

static void expect_sums(const char *what, const char *name, const double *sum, const float *want,
                        size_t n)
{
    float *got = malloc(n * 4 + 4);
    assert_non_null(got);
    for (size_t i = 0; i < n; i++)
        got[i] = (float)sum[i];
    expect_close(what, name, got, want, n, 1e-4);
    free(got);
}

static void test_blocks_equal_whole(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const pos_case *c = &cases[ci];
        fa_problem w = whole_problem(c);
        whole_run r;
        run_whole(c, &w, &r);
        int64_t qat[MAX_CUTS + 2], kat[MAX_CUTS + 2];
        int nqb = blocks_of(c->q_cuts, c->sq, qat), nkb = blocks_of(c->k_cuts, c->sk, kat);
        const size_t nq = (size_t)(c->heads_q * c->sq * c->d);
        const size_t nk = (size_t)(c->heads_kv * c->sk * c->d);
        fa_buffer *o_whole = device_copy(r.o, nq * 4);
        double *dq = calloc(nq, sizeof *dq), *dk = calloc(nk, sizeof *dk);
        double *dv = calloc(nk, sizeof *dv);
        assert_true(dq && dk && dv);
        for (int a = 0; a < nqb; a++) {
            forward_blocks(c, &w, &r, qat[a], qat[a + 1] - qat[a], kat, nkb);
            for (int s = 0; s < nkb; s++)
                backward_block(c, &w, &r, o_whole, qat[a], qat[a + 1] - qat[a], kat[s],
                               kat[s + 1] - kat[s], dq, dk, dv);
        }
        expect_sums("dQ", c->name, dq, r.dq, nq);
        expect_sums("dK", c->name, dk, r.dk, nk);
        expect_sums("dV", c->name, dv, r.dv, nk);
        fa_buffer *all[] = {r.q, r.k, r.v, r.d_o, r.slopes, o_whole};
        for (int i = 0; i < 6; i++)
            fa_buffer_destroy(all[i]);
        float *host[] = {r.o, r.lse, r.dq, r.dk, r.dv};
        for (int i = 0; i < 5; i++)
            free(host[i]);
        free(dq);
        free(dk);
        free(dv);
    }
}

/* Each invalid position is INVALID_POSITION from fa_problem_check and fa_plan_create, and the
 * context stays usable. */
static void test_invalid_positions(void **state)
{
    (void)state;
    fa_problem base;
    assert_int_equal(fa_problem_init(&base, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 8, 8, 16), OK);
    fa_problem bad[7];
    for (int i = 0; i < 7; i++)
        bad[i] = base;
    bad[0].q_position = -1;
    bad[1].k_position = -4;
    bad[2].q_position = 4;
    bad[2].whole_seqlen_q = 11; /* rows [4, 12) do not fit 11 */
    bad[3].whole_seqlen_k = 7;  /* keys [0, 8) do not fit 7 */
    bad[4].q_position = (int64_t)1 << 62; /* past 2^60 */
    bad[5].k_position = 6;                 /* dropout: not a multiple of 4 */
    bad[5].dropout_p = 0.5f;
    bad[6].q_position = 8;
    bad[6].varlen = 1;
    bad[6].batch = 1;
    for (int i = 0; i < 7; i++) {
        fa_plan *plan = NULL;
        assert_int_equal(fa_problem_check(ctx, &bad[i]), FA_STATUS_INVALID_POSITION);
        assert_int_equal(fa_plan_create(ctx, &bad[i], &plan), FA_STATUS_INVALID_POSITION);
        assert_null(plan);
        const char *why = fa_context_last_error(ctx);
        assert_true(strstr(why, "position") || strstr(why, "whole_seqlen"));
    }
    fa_problem good = base; /* a valid block right after: the context still plans */
    good.q_position = 100;
    good.k_position = 12;
    good.whole_seqlen_k = 200;
    good.dropout_p = 0.5f;
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &good, &plan), OK);
    fa_plan_destroy(plan);
}

static int open_context(void **state)
{
    (void)state;
    char why[600] = "";
    fa_context_options opts = {the_backend, 0};
    return fa_context_create(&ctx, &opts, why, sizeof why) == OK ? 0 : -1;
}

static int close_context(void **state)
{
    (void)state;
    fa_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_positions", &the_backend);
    if (rc >= 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_equal_whole),
        cmocka_unit_test(test_invalid_positions),
    };
    return cmocka_run_group_tests_name(fa_backend_name(the_backend), tests, open_context,
                                       close_context);
}
