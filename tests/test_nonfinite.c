/*
 * test_nonfinite.c - the promise of flashattn.h's "Non-finite values and the f32 range", on one
 * backend per process, checked by rules that do not depend on the golden and, where the rule
 * leaves values free, against the cpu golden backend:
 *
 *   test_nonfinite [cpu|opencl|cuda]
 *
 * - a NaN or +inf score makes that row's O and LSE NaN (not LSE = -inf, which means "no key");
 * - a -inf score weighs nothing: the row equals attention without that key, and a row whose
 *   every score is -inf is a row with no key (O = 0, LSE = -inf);
 * - scores whose f32 value overflows are +-inf, by the same two rules, on every backend;
 * - in range (|V| * seqlen_k and every score below FLT_MAX) large values are exact to f32;
 * - NaN in V reaches O only: LSE does not read V.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 8        /* head_dim of every case */
#define MAX_SQ 4   /* query rows */
#define MAX_SK 300 /* keys */

static fa_backend the_backend = FA_BACKEND_CPU;
static fa_context *dut;    /* the backend under test */
static fa_context *golden; /* the cpu backend */

/* One case's inputs as f32 values (stored in the case's dtype) and the outputs read back. */
typedef struct attn {
    fa_dtype dtype;
    int sq, sk;
    float softcap; /* the problem's (0: off) */
    float q[MAX_SQ * D], k[MAX_SK * D], v[MAX_SK * D];
    float o[MAX_SQ * D], lse[MAX_SQ];
} attn;

static void attn_init(attn *a, fa_dtype dt, int sq, int sk, float qv, float kv, float vv)
{
    memset(a, 0, sizeof *a);
    a->dtype = dt;
    a->sq = sq;
    a->sk = sk;
    for (int i = 0; i < sq * D; i++)
        a->q[i] = qv;
    for (int i = 0; i < sk * D; i++) {
        a->k[i] = kv;
        a->v[i] = vv * (float)(1 + i % 7) / 7.0f; /* rows differ, so which keys count shows */
    }
}

static void *to_storage(fa_dtype dt, const float *x, int n)
{
    size_t elem = fa_dtype_size(dt);
    unsigned char *out = malloc((size_t)n * elem);
    assert_non_null(out);
    for (int i = 0; i < n; i++) {
        if (dt == FA_DTYPE_F32)
            memcpy(out + i * 4, &x[i], 4);
        else {
            uint16_t h = dt == FA_DTYPE_F16 ? fa_f32_to_f16(x[i]) : fa_f32_to_bf16(x[i]);
            memcpy(out + i * 2, &h, 2);
        }
    }
    return out;
}

static float from_storage(fa_dtype dt, const unsigned char *p, int i)
{
    if (dt == FA_DTYPE_F32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    return dt == FA_DTYPE_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

static fa_buffer *upload(fa_context *ctx, fa_dtype dt, const float *x, int n)
{
    fa_buffer *b = NULL;
    size_t bytes = (size_t)n * fa_dtype_size(dt);
    assert_int_equal(fa_buffer_create(ctx, bytes, &b), FA_STATUS_OK);
    void *host = to_storage(dt, x, n);
    assert_int_equal(fa_buffer_write(b, 0, host, bytes), FA_STATUS_OK);
    free(host);
    return b;
}

/* Runs a with its first sk_used keys (the K/V buffers keep all sk rows), BHSD, one head. */
static void run_keys(fa_context *ctx, attn *a, int sk_used)
{
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, a->dtype, FA_LAYOUT_BHSD, 1, 1, 1, a->sq, sk_used, D),
                     FA_STATUS_OK);
    p.softcap = a->softcap;
    fa_buffer *q = upload(ctx, a->dtype, a->q, a->sq * D);
    fa_buffer *k = upload(ctx, a->dtype, a->k, a->sk * D);
    fa_buffer *v = upload(ctx, a->dtype, a->v, a->sk * D);
    fa_buffer *o = NULL, *lse = NULL;
    size_t o_bytes = (size_t)a->sq * D * fa_dtype_size(a->dtype);
    assert_int_equal(fa_buffer_create(ctx, o_bytes, &o), FA_STATUS_OK);
    assert_int_equal(fa_buffer_create(ctx, (size_t)a->sq * 4, &lse), FA_STATUS_OK);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(ctx, &p, &plan);
    if (st == FA_STATUS_OK)
        st = fa_forward(ctx, plan, q, k, v, o, lse);
    if (st != FA_STATUS_OK)
        fail_msg("%s: %s", fa_status_name(st), fa_context_last_error(ctx));
    unsigned char *host = malloc(o_bytes);
    assert_non_null(host);
    assert_int_equal(fa_buffer_read(o, 0, host, o_bytes), FA_STATUS_OK);
    for (int i = 0; i < a->sq * D; i++)
        a->o[i] = from_storage(a->dtype, host, i);
    assert_int_equal(fa_buffer_read(lse, 0, a->lse, (size_t)a->sq * 4), FA_STATUS_OK);
    free(host);
    fa_plan_destroy(plan);
    fa_buffer *all[5] = {q, k, v, o, lse};
    for (int i = 0; i < 5; i++)
        fa_buffer_destroy(all[i]);
}

/* ---- what a row must be ---------------------------------------------------------------- */

static void expect_nan_row(const attn *a, int r, const char *what)
{
    for (int x = 0; x < D; x++) {
        if (!isnan(a->o[r * D + x]))
            fail_msg("%s (%s): O[%d][%d] = %g, want NaN", what, fa_dtype_name(a->dtype), r, x,
                     (double)a->o[r * D + x]);
    }
    if (!isnan(a->lse[r]))
        fail_msg("%s (%s): LSE[%d] = %g, want NaN", what, fa_dtype_name(a->dtype), r,
                 (double)a->lse[r]);
}

static void expect_empty_row(const attn *a, int r, const char *what)
{
    for (int x = 0; x < D; x++) {
        if (a->o[r * D + x] != 0.0f)
            fail_msg("%s (%s): O[%d][%d] = %g, want 0 (a row with no key)", what,
                     fa_dtype_name(a->dtype), r, x, (double)a->o[r * D + x]);
    }
    if (!(isinf(a->lse[r]) && a->lse[r] < 0.0f))
        fail_msg("%s (%s): LSE[%d] = %g, want -inf", what, fa_dtype_name(a->dtype), r,
                 (double)a->lse[r]);
}

/* Relative closeness of finite values; the bound leaves room for f16/bf16 rounding. */
static bool close_to(float x, float ref, fa_dtype dt)
{
    double tol = dt == FA_DTYPE_F32 ? 1e-5 : dt == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
    return isfinite(x) && fabs((double)x - (double)ref) <= tol * (1.0 + fabs((double)ref));
}

/* Row r of a equals row r of ref, both finite. */
static void expect_row_like(const attn *a, const attn *ref, int r, const char *what)
{
    for (int x = 0; x < D; x++) {
        if (!close_to(a->o[r * D + x], ref->o[r * D + x], a->dtype))
            fail_msg("%s (%s): O[%d][%d] = %.9g, want %.9g", what, fa_dtype_name(a->dtype), r, x,
                     (double)a->o[r * D + x], (double)ref->o[r * D + x]);
    }
    if (!close_to(a->lse[r], ref->lse[r], FA_DTYPE_F32))
        fail_msg("%s (%s): LSE[%d] = %.9g, want %.9g", what, fa_dtype_name(a->dtype), r,
                 (double)a->lse[r], (double)ref->lse[r]);
}

/* ---- the cases --------------------------------------------------------------------------- */

static const fa_dtype all_dtypes[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};

/* A NaN in one element of Q row 1: that row is NaN, the others are untouched by it. */
static void test_nan_query(void **state)
{
    (void)state;
    for (int t = 0; t < 3; t++) {
        static attn a, clean;
        attn_init(&a, all_dtypes[t], 3, 5, 0.5f, 0.25f, 1.0f);
        a.k[2 * D + 3] = -0.75f; /* keys differ, so the softmax is not uniform */
        clean = a;
        a.q[1 * D + 4] = NAN;
        run_keys(dut, &a, a.sk);
        run_keys(dut, &clean, clean.sk);
        expect_nan_row(&a, 1, "NaN in q row 1");
        expect_row_like(&a, &clean, 0, "row 0 beside a NaN row");
        expect_row_like(&a, &clean, 2, "row 2 beside a NaN row");
    }
}

/*
 * Key 4 (the last) gets +inf in element 0. Row 0 (q[0] > 0) scores it +inf: NaN. Row 1
 * (q[0] < 0) scores it -inf: as if the key were not there. Row 2 (q[0] = 0) scores 0 * inf,
 * NaN. Then every key gets the +inf: row 1 has only -inf scores, a row with no key.
 */
static void test_infinite_key(void **state)
{
    (void)state;
    for (int t = 0; t < 3; t++) {
        static attn a, without;
        attn_init(&a, all_dtypes[t], 3, 5, 0.5f, 0.25f, 1.0f);
        a.k[1 * D + 2] = -1.0f;
        a.q[1 * D + 0] = -0.5f;
        a.q[2 * D + 0] = 0.0f;
        without = a;
        run_keys(dut, &without, 4); /* the first four keys only */
        a.k[4 * D + 0] = INFINITY;
        run_keys(dut, &a, 5);
        expect_nan_row(&a, 0, "+inf score");
        expect_row_like(&a, &without, 1, "-inf score");
        expect_nan_row(&a, 2, "0 * inf score");
        for (int j = 0; j < a.sk; j++)
            a.k[j * D + 0] = INFINITY;
        run_keys(dut, &a, 5);
        expect_empty_row(&a, 1, "every score -inf");
        expect_nan_row(&a, 0, "every score +inf");
    }
}

/*
 * Softcap bounds the scores: +-inf becomes +-cap (tanh saturates) and so does any score far past
 * the cap, while NaN stays NaN. Key 4 gets +inf as in test_infinite_key: row 0 scores it +cap,
 * row 1 -cap, both finite rows equal to the golden's; row 2 (0 * inf) is NaN. Then finite scores
 * 362 caps away on both sides (the kernels' tanh saturates past 22 caps) against the golden.
 */
static void test_softcap_bounds(void **state)
{
    (void)state;
    for (int t = 0; t < 3; t++) {
        static attn a, ref;
        attn_init(&a, all_dtypes[t], 3, 5, 0.5f, 0.25f, 1.0f);
        a.softcap = 0.5f;
        a.k[1 * D + 2] = -1.0f;
        a.q[1 * D + 0] = -0.5f;
        a.q[2 * D + 0] = 0.0f;
        a.k[4 * D + 0] = INFINITY;
        ref = a;
        run_keys(dut, &a, 5);
        run_keys(golden, &ref, 5);
        expect_row_like(&a, &ref, 0, "softcap, +inf score");
        expect_row_like(&a, &ref, 1, "softcap, -inf score");
        expect_nan_row(&a, 2, "softcap, 0 * inf score");

        attn_init(&a, all_dtypes[t], 2, 5, 64.0f, 0.0f, 1.0f);
        a.softcap = 0.5f;
        for (int j = 0; j < 5; j++)
            a.k[j * D + j % D] = j % 2 ? 8.0f : -8.0f; /* scores +-181 (scale 1/sqrt(8)) */
        for (int x = 0; x < D; x++)
            a.q[1 * D + x] = 0.5f;
        ref = a;
        run_keys(dut, &a, 5);
        run_keys(golden, &ref, 5);
        expect_row_like(&a, &ref, 0, "softcap, scores +-362 caps");
        expect_row_like(&a, &ref, 1, "softcap, scores within the cap");
    }
}

/* NaN in one V row: every O row reads it, no LSE does. */
static void test_nan_value(void **state)
{
    (void)state;
    for (int t = 0; t < 3; t++) {
        static attn a, clean;
        attn_init(&a, all_dtypes[t], 2, 5, 0.5f, 0.25f, 1.0f);
        clean = a;
        a.v[3 * D + 1] = NAN;
        run_keys(dut, &a, 5);
        run_keys(dut, &clean, 5);
        for (int r = 0; r < 2; r++) {
            if (!isnan(a.o[r * D + 1]))
                fail_msg("NaN in v (%s): O[%d][1] = %g, want NaN", fa_dtype_name(a.dtype), r,
                         (double)a.o[r * D + 1]);
            if (!close_to(a.lse[r], clean.lse[r], FA_DTYPE_F32))
                fail_msg("NaN in v (%s): LSE[%d] = %g, want %g", fa_dtype_name(a.dtype), r,
                         (double)a.lse[r], (double)clean.lse[r]);
        }
    }
}

/*
 * f32 scores past FLT_MAX: q = k = 1e20 gives q.k = 8e40, +inf in f32, so row 0 is NaN on every
 * backend (the golden saturates as the GPU kernels do); q = -1e20 scores -inf everywhere, a row
 * with no key. Just inside the range (q.k ~ 1e37) the softmax is exact to f32 on every backend.
 */
static void test_score_range(void **state)
{
    (void)state;
    static attn a, ref;
    attn_init(&a, FA_DTYPE_F32, 2, 5, 1e20f, 1e20f, 1.0f);
    for (int x = 0; x < D; x++)
        a.q[1 * D + x] = -1e20f;
    run_keys(dut, &a, 5);
    expect_nan_row(&a, 0, "q.k overflows f32 to +inf");
    expect_empty_row(&a, 1, "q.k overflows f32 to -inf");

    attn_init(&a, FA_DTYPE_F32, 2, 5, 1e18f, 0.0f, 1.0f);
    for (int j = 0; j < 5; j++) {
        for (int x = 0; x < D; x++)
            a.k[j * D + x] = 1e18f * (float)(j + 1) / 5.0f; /* scores 1.1e36 .. 5.7e36 apart */
    }
    for (int x = 0; x < D; x++)
        a.q[1 * D + x] = -1e18f;
    ref = a;
    run_keys(dut, &a, 5);
    run_keys(golden, &ref, 5);
    for (int r = 0; r < 2; r++)
        expect_row_like(&a, &ref, r, "scores near 1e37");
    if (!close_to(a.o[0 * D + 0], a.v[4 * D + 0], FA_DTYPE_F32))
        fail_msg("scores near 1e37: O[0][0] = %g, want the largest score's v %g",
                 (double)a.o[0], (double)a.v[4 * D]);
}

/*
 * f32 accumulation of P V: with |V| * seqlen_k below FLT_MAX the result is exact to f32 on
 * every backend; past it (V = 3e38, 300 keys) the GPU kernels may overflow, and the promise is
 * only that the result is then +inf or right, never a finite wrong value.
 */
static void test_value_range(void **state)
{
    (void)state;
    static attn a, ref;
    attn_init(&a, FA_DTYPE_F32, 2, MAX_SK, 0.0f, 0.0f, 1e34f);
    ref = a;
    run_keys(dut, &a, MAX_SK);
    run_keys(golden, &ref, MAX_SK);
    for (int r = 0; r < 2; r++)
        expect_row_like(&a, &ref, r, "|V| * seqlen_k = 3e36");
    for (int i = 0; i < MAX_SK * D; i++)
        a.v[i] = 3e38f;
    run_keys(dut, &a, MAX_SK);
    for (int x = 0; x < D; x++) {
        float o = a.o[x];
        if (!(isinf(o) && o > 0.0f) && !close_to(o, 3e38f, FA_DTYPE_F32))
            fail_msg("|V| * seqlen_k = 9e40: O[0][%d] = %g, want 3e38 or +inf", x, (double)o);
    }
}

static int open_contexts(void **state)
{
    (void)state;
    char why[600] = "";
    fa_context_options opts = {the_backend, 0};
    if (fa_context_create(&dut, &opts, why, sizeof why) != FA_STATUS_OK)
        return -1;
    fa_context_options cpu = {FA_BACKEND_CPU, 0};
    return fa_context_create(&golden, &cpu, why, sizeof why) == FA_STATUS_OK ? 0 : -1;
}

static int close_contexts(void **state)
{
    (void)state;
    fa_context_destroy(dut);
    fa_context_destroy(golden);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_nonfinite", &the_backend);
    if (rc >= 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_query),   cmocka_unit_test(test_infinite_key),
        cmocka_unit_test(test_nan_value),   cmocka_unit_test(test_score_range),
        cmocka_unit_test(test_value_range), cmocka_unit_test(test_softcap_bounds),
    };
    return cmocka_run_group_tests_name(fa_backend_name(the_backend), tests, open_contexts,
                                       close_contexts);
}
