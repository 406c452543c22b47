/*
 * test_precision.c - the edges of the modifiers' f32 range on one backend against the cpu
 * golden, forward (O, LSE) and backward (dQ, dK, dV), by the f32 rule 1e-5 + 1e-5 |ref|:
 * - softcap from FA_SOFTCAP_MIN to FA_SOFTCAP_MAX: a large cap makes s / cap tiny, where a
 *   tanh formed as 1 - 2 / (e^2x + 1) cancels (opencl once lost 0.22 at a cap of 1e7);
 * - ALiBi slopes past the f32 range (3e38, -1e38): the term saturates to +-inf as the golden's
 *   does (a -inf score weighs nothing, a +inf one makes the row NaN), never inf * 0 = NaN at
 *   distance 0; with seqlen_q > seqlen_k and no mask some rows have no key at distance 0.
 * Run: test_precision cpu|opencl|cuda.
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

static fa_backend the_backend;
static fa_context *dut, *golden;

enum { T_Q, T_K, T_V, T_DO, T_O, T_LSE, T_DQ, T_DK, T_DV, T_N };
static const char *const t_name[T_N] = {"q", "k", "v", "do", "o", "lse", "dq", "dk", "dv"};

/* One problem's host tensors (f32) and its ALiBi slopes. */
typedef struct prec_case {
    const char *name;
    int64_t sq, sk;
    float softcap;
    float slopes[2]; /* used when alibi */
    int alibi;
    fa_mask mask;
} prec_case;

static const prec_case cases[] = {
    {"softcap min", 37, 53, FA_SOFTCAP_MIN, {0, 0}, 0, FA_MASK_NONE},
    {"softcap 0.5", 37, 53, 0.5f, {0, 0}, 0, FA_MASK_CAUSAL_BOTTOM_RIGHT},
    {"softcap 50", 37, 53, 50.0f, {0, 0}, 0, FA_MASK_NONE},
    {"softcap 1e3", 37, 53, 1e3f, {0, 0}, 0, FA_MASK_NONE},
    {"softcap 1e5", 37, 53, 1e5f, {0, 0}, 0, FA_MASK_CAUSAL_TOP_LEFT},
    {"softcap 1e7", 37, 53, 1e7f, {0, 0}, 0, FA_MASK_NONE},
    {"softcap 1e12", 37, 53, 1e12f, {0, 0}, 0, FA_MASK_NONE},
    {"softcap max", 37, 53, FA_SOFTCAP_MAX, {0, 0}, 0, FA_MASK_NONE},
    {"alibi huge slopes causal", 37, 53, 0.0f, {3e38f, -1e38f}, 1, FA_MASK_CAUSAL_BOTTOM_RIGHT},
    {"alibi huge slopes sq > sk", 29, 11, 0.0f, {3e38f, -1e38f}, 1, FA_MASK_NONE},
    {"alibi huge slopes softcap", 17, 23, 30.0f, {3e38f, 1e-30f}, 1, FA_MASK_NONE},
};

#define HEADS 2
#define DIM 32

typedef struct prec_run {
    fa_problem p;
    size_t n[T_N];
    float *host[T_N];
    float slopes[HEADS];
} prec_run;

static void run_init(prec_run *r, const prec_case *c)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(fa_problem_init(&r->p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, HEADS, HEADS,
                                     c->sq, c->sk, DIM),
                     OK);
    r->p.mask = c->mask;
    r->p.softcap = c->softcap;
    r->p.alibi = c->alibi;
    memcpy(r->slopes, c->slopes, sizeof r->slopes);
    size_t q = (size_t)(HEADS * c->sq * DIM), kv = (size_t)(HEADS * c->sk * DIM);
    const size_t n[T_N] = {q, kv, kv, q, q, (size_t)(HEADS * c->sq), q, kv, kv};
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    for (int t = 0; t < T_N; t++) {
        r->n[t] = n[t];
        r->host[t] = calloc(n[t] + 1, sizeof(float));
        assert_non_null(r->host[t]);
        for (size_t i = 0; t <= T_DO && i < n[t]; i++)
            r->host[t][i] = (float)harness_rng_uniform(&rng, -2.0, 2.0);
    }
}

static void run_free(prec_run *r)
{
    for (int t = 0; t < T_N; t++)
        free(r->host[t]);
}

/* n floats of host in a buffer of n + 1 (a spare element past the tensor). */
static fa_buffer *upload(fa_context *ctx, const float *host, size_t n)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, (n + 1) * sizeof(float), &b), OK);
    assert_int_equal(fa_buffer_write(b, 0, host, n * sizeof(float)), OK);
    return b;
}

/* The forward, then the backward from its O and LSE, on ctx; outputs into r's host tensors. */
static void run_on(fa_context *ctx, prec_run *r, const char *name)
{
    fa_buffer *b[T_N], *slopes = upload(ctx, r->slopes, HEADS);
    for (int t = 0; t < T_N; t++)
        b[t] = upload(ctx, r->host[t], r->n[t]);
    fa_plan *fwd = NULL, *bwd = NULL;
    if (fa_plan_create(ctx, &r->p, &fwd) != OK || fa_plan_create_backward(ctx, &r->p, &bwd) != OK)
        fail_msg("%s on %s: plan: %s", name, fa_backend_name(fa_context_backend(ctx)),
                 fa_context_last_error(ctx));
    fa_tensors run = {.q = b[T_Q], .k = b[T_K], .v = b[T_V], .o = b[T_O], .lse = b[T_LSE],
                      .alibi_slopes = r->p.alibi ? slopes : NULL};
    fa_status st = fa_run(ctx, fwd, &run);
    run.d_o = b[T_DO];
    run.dq = b[T_DQ];
    run.dk = b[T_DK];
    run.dv = b[T_DV];
    if (st == OK)
        st = fa_run(ctx, bwd, &run);
    if (st != OK)
        fail_msg("%s on %s: %s", name, fa_backend_name(fa_context_backend(ctx)),
                 fa_context_last_error(ctx));
    for (int t = T_O; t < T_N; t++)
        assert_int_equal(fa_buffer_read(b[t], 0, r->host[t], r->n[t] * sizeof(float)), OK);
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    for (int t = 0; t < T_N; t++)
        fa_buffer_destroy(b[t]);
    fa_buffer_destroy(slopes);
}

/* NaN and infinities where the golden has them; elsewhere within 1e-5 + 1e-5 |ref|. */
static void expect_close(const prec_case *c, int t, const float *got, const float *ref,
                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = ref[i];
        bool same = isnan(w) ? isnan(g) : isinf(w) ? g == w : fabs(g - w) <= 1e-5 + 1e-5 * fabs(w);
        if (!same)
            fail_msg("%s on %s: %s[%zu] = %.9g, the golden's %.9g", c->name,
                     fa_backend_name(the_backend), t_name[t], i, g, w);
    }
}

static void test_case(void **state)
{
    const prec_case *c = *state;
    static prec_run mine, ref;
    run_init(&mine, c);
    run_init(&ref, c);
    run_on(dut, &mine, c->name);
    run_on(golden, &ref, c->name);
    for (int t = T_O; t < T_N; t++)
        expect_close(c, t, mine.host[t], ref.host[t], mine.n[t]);
    run_free(&mine);
    run_free(&ref);
}

static int open_contexts(void **state)
{
    (void)state;
    char why[600] = "";
    fa_context_options opts = {the_backend, 0}, cpu = {FA_BACKEND_CPU, 0};
    if (fa_context_create(&dut, &opts, why, sizeof why) != OK)
        return -1;
    return fa_context_create(&golden, &cpu, why, sizeof why) == OK ? 0 : -1;
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
    int rc = harness_single_backend(argc, argv, "test_precision", &the_backend);
    if (rc >= 0)
        return rc;
    enum { N = sizeof cases / sizeof cases[0] };
    struct CMUnitTest tests[N];
    for (size_t i = 0; i < N; i++) {
        struct CMUnitTest t = {cases[i].name, test_case, NULL, NULL, (void *)&cases[i]};
        tests[i] = t;
    }
    return cmocka_run_group_tests_name(fa_backend_name(the_backend), tests, open_contexts,
                                       close_contexts);
}
