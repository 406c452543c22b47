/*
 * test_forward.c - runs every case of the shared table (cases.c) on a backend and compares it
 * with the fp64 oracle (oracle.c). One cmocka test per (backend, dtype), so a skipped or failing
 * backend is visible on its own line; ctest registers one process per backend.
 *
 *   test_forward [cpu|opencl|cuda ...] [--case=SUBSTRING] [--digest=FILE]
 *
 * --digest=FILE appends one line per case run, "backend dtype case O-hash LSE-hash" (FNV-1a of
 * the bytes read back), so tools/compare_outputs.sh can prove that a change of the code left
 * every output bitwise the same.
 *
 * Pass rules (DESIGN.md "Tests"):
 *   f32:      |O - O_ref| <= 1e-5 + 1e-5 * |O_ref| elementwise, LSE likewise.
 *   f16/bf16: |O - O_ref| <= 2 * E_naive + eps * max(1, |O_ref|), where E_naive is the largest
 *             error over the case of the naive same-precision implementation (oracle_attention_
 *             lowp: S, P and O rounded to the dtype) and eps the dtype's unit roundoff
 *             (f16 2^-11, bf16 2^-8). The floor is the rounding of O itself, so a perfect
 *             kernel (the fp64 CPU backend) always passes; 2 * E_naive is what the design allows
 *             a kernel that computes at the storage precision. LSE (f32 in every dtype):
 *             2 * E_naive_lse + 1e-5 + 1e-5 * |lse|.
 *   Always:   NaN or inf where the oracle is finite fails; a row with no key must be exactly 0
 *             with LSE = -inf; two runs must be bitwise equal, and a third without LSE must
 *             give the same O bit for bit; every O element outside the tensor's rows (guard
 *             bands before and after, padding between rows) and every LSE element past the
 *             end must still hold the NaN sentinel pattern.
 * The summary prints the worst error/bound ratio per backend and dtype.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cases.h"
#include "harness.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements of sentinel before and after O, and after LSE. Odd, so nothing aligns by luck. */
#define GUARD 67
/* Failure lines printed per group before the rest are only counted. */
#define MAX_REPORTS 20

static const char *case_filter; /* --case=SUBSTRING */
static FILE *digest_file;       /* --digest=FILE */

/* One cmocka test: one backend, one dtype, every case of that dtype. */
typedef struct group {
    fa_backend backend;
    fa_dtype dtype;
    int ran, passed, failed, unsupported, reports;
    bool skipped;
    char skip_reason[600];
    double worst_o, worst_lse; /* worst error / bound over the table */
    const char *worst_o_case, *worst_lse_case;
    double seconds;
} group;

/* A case's host-side data: stored inputs, their widened copies and the oracle's outputs. */
typedef struct case_data {
    const fa_test_case *c;
    fa_problem p;                     /* the case's problem, O shifted by GUARD elements */
    size_t elem;                      /* bytes per stored element */
    int64_t n_q, n_k, n_v, n_o, n_lse; /* elements of each buffer */
    int64_t rows;                     /* batch * heads_q * seqlen_q */
    void *q, *k, *v;                  /* stored inputs; padding holds a quiet NaN */
    double *qd, *kd, *vd;             /* the stored values widened */
    double *o_ref, *lse_ref;          /* fp64 oracle, dense */
    double naive_o_err, naive_lse_err; /* error of the same-precision naive implementation */
    unsigned char *o_used;            /* 1 for O elements inside a row */
    void *o_out[3];                   /* O buffer as read back: two runs, then one without LSE */
    float *lse_out[2];                /* LSE buffer as read back, two runs */
} case_data;

/* ---- sentinels ------------------------------------------------------------------------- */

static void fill_pattern(fa_dtype dt, void *buf, int64_t n, bool sentinel)
{
    /* The sentinel is a NaN with a payload a kernel never produces; inputs get a quiet NaN. */
    uint32_t w32 = sentinel ? 0x7FC0DEADu : 0x7FC00000u;
    uint16_t w16 = dt == FA_DTYPE_F16 ? (sentinel ? 0x7E5Au : 0x7E00u)
                                      : (sentinel ? 0x7FDAu : 0x7FC0u);
    for (int64_t i = 0; i < n; i++) {
        if (dt == FA_DTYPE_F32)
            memcpy((char *)buf + i * 4, &w32, 4);
        else
            memcpy((char *)buf + i * 2, &w16, 2);
    }
}

static bool is_sentinel(fa_dtype dt, const void *buf, int64_t i)
{
    unsigned char want[4];
    size_t elem = fa_dtype_size(dt);
    fill_pattern(dt, want, 1, true);
    return memcmp((const char *)buf + i * (int64_t)elem, want, elem) == 0;
}

/* ---- preparing a case ------------------------------------------------------------------ */

static void *xcalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    assert_non_null(p);
    return p;
}

static int64_t at(const fa_tensor_layout *t, int64_t b, int64_t h, int64_t s)
{
    return t->offset + b * t->stride_batch + h * t->stride_head + s * t->stride_seq;
}

/* Random values in [-1, 1) rounded to the dtype at every element of a tensor's rows. */
static void fill_input(case_data *cd, harness_rng *rng, const fa_tensor_layout *t,
                       int64_t heads, int64_t seq, void *store, double *wide, int64_t n)
{
    const fa_problem *p = &cd->p;
    fill_pattern(p->dtype, store, n, false);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t s = 0; s < seq; s++)
                for (int64_t x = 0; x < p->head_dim; x++)
                    oracle_store(p->dtype, store, at(t, b, h, s) + x,
                                 harness_rng_uniform(rng, -1.0, 1.0));
    /* Widened after all writes: a broadcast layout (stride 0) writes an element repeatedly. */
    for (int64_t i = 0; i < n; i++)
        wide[i] = oracle_load(p->dtype, store, i);
}

static void mark_output_rows(case_data *cd)
{
    const fa_problem *p = &cd->p;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t s = 0; s < p->seqlen_q; s++)
                memset(cd->o_used + at(&p->o, b, h, s), 1, (size_t)p->head_dim);
}

static double max_abs_diff(const double *a, const double *b, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(a[i]) && a[i] == b[i])
            continue; /* both -inf: an empty row's LSE */
        double e = fabs(a[i] - b[i]);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* The oracle in fp64 and, for f16/bf16, the naive same-precision error that sets the bound. */
static void run_oracles(case_data *cd)
{
    const fa_problem *p = &cd->p;
    int64_t n_o = cd->rows * p->head_dim;
    cd->o_ref = xcalloc(n_o, sizeof(double));
    cd->lse_ref = xcalloc(cd->rows, sizeof(double));
    oracle_attention_f64(p, cd->qd, cd->kd, cd->vd, cd->o_ref, cd->lse_ref);
    if (p->dtype == FA_DTYPE_F32)
        return;
    double *o = xcalloc(n_o, sizeof(double)), *lse = xcalloc(cd->rows, sizeof(double));
    oracle_attention_lowp(p, cd->qd, cd->kd, cd->vd, o, lse);
    cd->naive_o_err = max_abs_diff(o, cd->o_ref, n_o);
    cd->naive_lse_err = max_abs_diff(lse, cd->lse_ref, cd->rows);
    free(o);
    free(lse);
}

/* Elements a tensor of p spans in its layout (0 when empty): the extent fa_run checks. */
static int64_t tensor_elems(const fa_problem *p, fa_tensor_id tensor)
{
    uint64_t bytes = 0;
    assert_int_equal(fa_problem_tensor_bytes(p, tensor, 0, 0, &bytes), FA_STATUS_OK);
    return (int64_t)(bytes / fa_dtype_size(p->dtype));
}

static void case_prepare(case_data *cd, const fa_test_case *c)
{
    memset(cd, 0, sizeof *cd);
    cd->c = c;
    case_fill_problem(c, &cd->p);
    fa_problem *p = &cd->p;
    p->o.offset += GUARD;
    cd->elem = fa_dtype_size(p->dtype);
    cd->rows = p->batch * p->heads_q * p->seqlen_q;
    cd->n_q = tensor_elems(p, FA_TENSOR_Q);
    cd->n_k = tensor_elems(p, FA_TENSOR_K);
    cd->n_v = tensor_elems(p, FA_TENSOR_V);
    int64_t o_end = tensor_elems(p, FA_TENSOR_O);
    cd->n_o = (o_end > GUARD ? o_end : GUARD) + GUARD;
    cd->n_lse = cd->rows + GUARD;
    /* Buffers cannot be empty: an empty tensor still gets one (unread) element. */
    cd->n_q = cd->n_q > 0 ? cd->n_q : 1;
    cd->n_k = cd->n_k > 0 ? cd->n_k : 1;
    cd->n_v = cd->n_v > 0 ? cd->n_v : 1;
    cd->q = xcalloc(cd->n_q, cd->elem);
    cd->k = xcalloc(cd->n_k, cd->elem);
    cd->v = xcalloc(cd->n_v, cd->elem);
    cd->qd = xcalloc(cd->n_q, sizeof(double));
    cd->kd = xcalloc(cd->n_k, sizeof(double));
    cd->vd = xcalloc(cd->n_v, sizeof(double));
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    fill_input(cd, &rng, &p->q, p->heads_q, p->seqlen_q, cd->q, cd->qd, cd->n_q);
    fill_input(cd, &rng, &p->k, p->heads_kv, p->seqlen_k, cd->k, cd->kd, cd->n_k);
    fill_input(cd, &rng, &p->v, p->heads_kv, p->seqlen_k, cd->v, cd->vd, cd->n_v);
    cd->o_used = xcalloc(cd->n_o, 1);
    mark_output_rows(cd);
    for (int r = 0; r < 3; r++)
        cd->o_out[r] = xcalloc(cd->n_o, cd->elem);
    for (int r = 0; r < 2; r++)
        cd->lse_out[r] = xcalloc(cd->n_lse, sizeof(float));
    run_oracles(cd);
}

static void case_release(case_data *cd)
{
    void *all[] = {cd->q,        cd->k,        cd->v,          cd->qd,
                   cd->kd,       cd->vd,       cd->o_ref,      cd->lse_ref,
                   cd->o_used,   cd->o_out[0], cd->o_out[1],   cd->o_out[2],
                   cd->lse_out[0], cd->lse_out[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ---- running a case on the device ------------------------------------------------------ */

static void report(group *g, const char *fmt, ...)
{
    if (g->reports++ >= MAX_REPORTS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* Creates a device buffer holding the `n` elements of `src`. */
static fa_buffer *upload(fa_context *ctx, const void *src, int64_t n, size_t elem)
{
    fa_buffer *b = NULL;
    size_t bytes = (size_t)n * elem;
    assert_int_equal(fa_buffer_create(ctx, bytes, &b), FA_STATUS_OK);
    assert_int_equal(fa_buffer_write(b, 0, src, bytes), FA_STATUS_OK);
    return b;
}

/* One forward into freshly sentinel-filled outputs; lse_host NULL runs without LSE. */
static fa_status run_once(group *g, fa_context *ctx, const fa_plan *plan, fa_buffer *const in[3],
                          case_data *cd, void *o_host, float *lse_host)
{
    fill_pattern(cd->p.dtype, o_host, cd->n_o, true);
    fa_buffer *o = upload(ctx, o_host, cd->n_o, cd->elem), *lse = NULL;
    if (lse_host) {
        fill_pattern(FA_DTYPE_F32, lse_host, cd->n_lse, true);
        lse = upload(ctx, lse_host, cd->n_lse, sizeof(float));
    }
    fa_status st = fa_forward(ctx, plan, in[0], in[1], in[2], o, lse);
    if (st != FA_STATUS_OK) {
        report(g, "  %s: fa_forward: %s\n", cd->c->name, fa_context_last_error(ctx));
    } else {
        assert_int_equal(fa_buffer_read(o, 0, o_host, (size_t)cd->n_o * cd->elem), FA_STATUS_OK);
        if (lse)
            assert_int_equal(fa_buffer_read(lse, 0, lse_host, (size_t)cd->n_lse * 4),
                             FA_STATUS_OK);
    }
    fa_buffer_destroy(o);
    fa_buffer_destroy(lse);
    return st;
}

/* Runs the case twice with LSE and once without (O must not depend on whether LSE is asked). */
static fa_status run_device(group *g, fa_context *ctx, case_data *cd)
{
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(ctx, &cd->p, &plan);
    if (st != FA_STATUS_OK) {
        report(g, "  %s: fa_plan_create: %s\n", cd->c->name, fa_context_last_error(ctx));
        return st;
    }
    fa_buffer *in[3] = {upload(ctx, cd->q, cd->n_q, cd->elem),
                        upload(ctx, cd->k, cd->n_k, cd->elem),
                        upload(ctx, cd->v, cd->n_v, cd->elem)};
    for (int r = 0; r < 3 && st == FA_STATUS_OK; r++)
        st = run_once(g, ctx, plan, in, cd, cd->o_out[r], r < 2 ? cd->lse_out[r] : NULL);
    for (int i = 0; i < 3; i++)
        fa_buffer_destroy(in[i]);
    fa_plan_destroy(plan);
    return st;
}

/* ---- checking a case ------------------------------------------------------------------- */

/* The largest error / bound over a case, with where it happened. */
typedef struct worst {
    double ratio, err, bound, got, want;
    int64_t row, x;
    int bad; /* elements that are non-finite, not exactly 0 / -inf, or over the bound */
} worst;

static void consider(worst *w, double got, double want, double bound, int64_t row, int64_t x)
{
    double err = fabs(got - want);
    /* NaN or inf where the oracle is finite fails whatever the bound. */
    double ratio = isfinite(got) ? err / bound : INFINITY;
    int bad = w->bad + (ratio > 1.0);
    if (ratio > w->ratio || (ratio == INFINITY && w->ratio != INFINITY))
        *w = (worst){ratio, err, bound, got, want, row, x, 0};
    w->bad = bad;
}

/* O and LSE of every row against the oracle. */
static void check_values(const case_data *cd, const float *lse, const void *o, worst *wo,
                         worst *wl)
{
    const fa_problem *p = &cd->p;
    const bool f32 = p->dtype == FA_DTYPE_F32;
    const double eps = p->dtype == FA_DTYPE_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    for (int64_t row = 0; row < cd->rows; row++) {
        int64_t s = row % p->seqlen_q, bh = row / p->seqlen_q;
        int64_t base = at(&p->o, bh / p->heads_q, bh % p->heads_q, s);
        bool empty = oracle_keys_allowed(p, s) == 0;
        for (int64_t x = 0; x < p->head_dim; x++) {
            double got = oracle_load(p->dtype, o, base + x);
            double want = cd->o_ref[row * p->head_dim + x];
            double bound = f32 ? 1e-5 + 1e-5 * fabs(want)
                               : 2.0 * cd->naive_o_err + eps * fmax(1.0, fabs(want));
            if (empty) /* exactly 0: any bound smaller than the smallest subnormal */
                bound = 1e-300;
            consider(wo, got, want, bound, row, x);
        }
        double lg = lse[row], lw = cd->lse_ref[row];
        if (empty) { /* exactly -inf passes; anything else is an infinite error */
            bool exact = lg == -INFINITY;
            consider(wl, exact ? 0.0 : lg, exact ? 0.0 : -INFINITY, 1.0, row, 0);
            continue;
        }
        double lb = 1e-5 + 1e-5 * fabs(lw) + (f32 ? 0.0 : 2.0 * cd->naive_lse_err);
        consider(wl, lg, lw, lb, row, 0);
    }
}

/* Every O element outside the rows, and every LSE element past the end, is the sentinel. */
static int check_guards(const case_data *cd, const void *o, const float *lse)
{
    int bad = 0;
    for (int64_t i = 0; i < cd->n_o; i++)
        bad += !cd->o_used[i] && !is_sentinel(cd->p.dtype, o, i);
    for (int64_t i = cd->rows; i < cd->n_lse; i++)
        bad += !is_sentinel(FA_DTYPE_F32, lse, i);
    return bad;
}

static void print_worst(group *g, const case_data *cd, const char *what, const worst *w)
{
    const fa_problem *p = &cd->p; /* only called when there are rows, so seqlen_q > 0 */
    int64_t s = w->row % p->seqlen_q, bh = w->row / p->seqlen_q;
    report(g, "    %s: %d bad elements; worst at b%lld h%lld s%lld x%lld: got %.9g want %.9g, "
              "error %.3g, bound %.3g, ratio %.3g\n",
           what, w->bad, (long long)(bh / p->heads_q), (long long)(bh % p->heads_q), (long long)s,
           (long long)w->x, w->got, w->want, w->err, w->bound, w->ratio);
}

/* Checks one run-pair of a case; returns true when it passes. Updates the group's worst. */
static bool check_case(group *g, const case_data *cd)
{
    worst wo = {0}, wl = {0};
    check_values(cd, cd->lse_out[0], cd->o_out[0], &wo, &wl);
    int guards = check_guards(cd, cd->o_out[0], cd->lse_out[0]);
    size_t o_bytes = (size_t)cd->n_o * cd->elem;
    bool same = memcmp(cd->o_out[0], cd->o_out[1], o_bytes) == 0 &&
                memcmp(cd->lse_out[0], cd->lse_out[1], (size_t)cd->n_lse * 4) == 0;
    bool same_without_lse = memcmp(cd->o_out[0], cd->o_out[2], o_bytes) == 0;
    if (wo.ratio > g->worst_o) {
        g->worst_o = wo.ratio;
        g->worst_o_case = cd->c->name;
    }
    if (wl.ratio > g->worst_lse) {
        g->worst_lse = wl.ratio;
        g->worst_lse_case = cd->c->name;
    }
    bool ok = wo.bad == 0 && wl.bad == 0 && guards == 0 && same && same_without_lse;
    if (!ok) {
        char desc[160];
        case_describe(cd->c, desc, sizeof desc);
        report(g, "  FAIL %s (%s), naive error %.3g:\n", cd->c->name, desc, cd->naive_o_err);
        if (wo.bad)
            print_worst(g, cd, "O", &wo);
        if (wl.bad)
            print_worst(g, cd, "LSE", &wl);
        if (guards)
            report(g, "    %d sentinel elements overwritten outside the outputs\n", guards);
        if (!same)
            report(g, "    two runs are not bitwise identical\n");
        if (!same_without_lse)
            report(g, "    O without LSE differs from O with LSE (or a guard was hit)\n");
    }
    return ok;
}

/* FNV-1a, 64 bits: a fingerprint of the output bytes, not a checksum against attacks. */
static uint64_t fnv1a(const void *data, size_t n, uint64_t h)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void write_digest(const group *g, const case_data *cd)
{
    const uint64_t basis = 0xcbf29ce484222325ull;
    fprintf(digest_file, "%s %s %s %016llx %016llx\n", fa_backend_name(g->backend),
            fa_dtype_name(g->dtype), cd->c->name,
            (unsigned long long)fnv1a(cd->o_out[0], (size_t)cd->n_o * cd->elem, basis),
            (unsigned long long)fnv1a(cd->lse_out[0], (size_t)cd->n_lse * 4, basis));
}

/* ---- the cmocka tests ------------------------------------------------------------------ */

static bool selected(const fa_test_case *c, fa_dtype dtype)
{
    return c->dtype == dtype && (!case_filter || strstr(c->name, case_filter));
}

/* A filter that matches nothing would run no case and pass: a renamed case must not leave a
 * check (tools/gpu_check.sh's compute-sanitizer runs) checking nothing. */
static bool any_case_named(const char *filter)
{
    for (size_t i = 0; i < fa_test_case_count; i++) {
        if (strstr(fa_test_cases[i].name, filter))
            return true;
    }
    return false;
}

static void run_case(group *g, fa_context *ctx, const fa_test_case *c)
{
    case_data cd;
    case_prepare(&cd, c);
    g->ran++;
    fa_status st = run_device(g, ctx, &cd);
    /* Only an accelerator backend may decline a problem; the CPU golden runs everything. */
    if ((st == FA_STATUS_UNSUPPORTED || st == FA_STATUS_SRAM_TOO_SMALL) &&
        g->backend != FA_BACKEND_CPU) {
        g->unsupported++;
        report(g, "  NOT SUPPORTED %s\n", c->name);
    } else if (st != FA_STATUS_OK) {
        g->failed++;
    } else {
        if (digest_file)
            write_digest(g, &cd);
        if (check_case(g, &cd))
            g->passed++;
        else
            g->failed++;
    }
    case_release(&cd);
}

static void test_group(void **state)
{
    group *g = *state;
    harness_decision d = harness_decide(g->backend, g->skip_reason, sizeof g->skip_reason);
    if (d != HARNESS_RUN) {
        printf("  %s\n", g->skip_reason);
        if (d == HARNESS_FAIL)
            fail_msg("%s", g->skip_reason);
        g->skipped = true;
        skip();
    }
    fa_context *ctx = NULL;
    char why[512] = "";
    fa_context_options opts = {g->backend, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, why, sizeof why), FA_STATUS_OK);
    fa_device_props props;
    assert_int_equal(fa_context_device_props(ctx, &props), FA_STATUS_OK);
    printf("  device: %s (%s), %llu bytes on-chip\n", props.name, props.vendor,
           (unsigned long long)props.sram_bytes);
    double t0 = harness_seconds();
    for (size_t i = 0; i < fa_test_case_count; i++) {
        if (selected(&fa_test_cases[i], g->dtype))
            run_case(g, ctx, &fa_test_cases[i]);
    }
    g->seconds = harness_seconds() - t0;
    fa_context_destroy(ctx);
    printf("  %s %s: %d cases, %d passed, %d failed, %d not supported, worst ratio O %.3g "
           "(%s), LSE %.3g (%s), %.2f s\n",
           fa_backend_name(g->backend), fa_dtype_name(g->dtype), g->ran, g->passed, g->failed,
           g->unsupported, g->worst_o, g->worst_o_case ? g->worst_o_case : "-", g->worst_lse,
           g->worst_lse_case ? g->worst_lse_case : "-", g->seconds);
    if (g->failed > 0)
        fail_msg("%d of %d cases failed on %s %s", g->failed, g->ran,
                 fa_backend_name(g->backend), fa_dtype_name(g->dtype));
}

static void print_summary(const group *groups, int n)
{
    printf("\nforward summary (worst error / bound; <= 1 passes):\n");
    printf("  %-7s %-5s %6s %6s %6s %6s %10s %10s %8s\n", "backend", "dtype", "cases", "pass",
           "fail", "unsup", "worst O", "worst LSE", "seconds");
    for (int i = 0; i < n; i++) {
        const group *g = &groups[i];
        if (g->skipped) {
            printf("  %-7s %-5s SKIPPED: %s\n", fa_backend_name(g->backend),
                   fa_dtype_name(g->dtype), g->skip_reason);
            continue;
        }
        printf("  %-7s %-5s %6d %6d %6d %6d %10.3g %10.3g %8.2f\n", fa_backend_name(g->backend),
               fa_dtype_name(g->dtype), g->ran, g->passed, g->failed, g->unsupported,
               g->worst_o, g->worst_lse, g->seconds);
    }
}

int main(int argc, char **argv)
{
    fa_backend backends[HARNESS_MAX_BACKENDS];
    int nb = harness_backends_from_args(argc, argv, backends);
    if (nb < 0)
        return 2;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--case=", 7) == 0)
            case_filter = argv[i] + 7;
        if (strncmp(argv[i], "--digest=", 9) == 0 && !(digest_file = fopen(argv[i] + 9, "a"))) {
            fprintf(stderr, "test_forward: cannot open %s\n", argv[i] + 9);
            return 2;
        }
    }
    if (case_filter && !any_case_named(case_filter)) {
        fprintf(stderr, "test_forward: no test name contains \"%s\"\n", case_filter);
        return 2;
    }
    static const fa_dtype dtypes[] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    enum { ND = 3, MAXG = HARNESS_MAX_BACKENDS * ND };
    static group groups[MAXG];
    static char names[MAXG][64];
    struct CMUnitTest tests[MAXG];
    int n = 0;
    for (int b = 0; b < nb; b++) {
        for (int d = 0; d < ND; d++, n++) {
            groups[n] = (group){.backend = backends[b], .dtype = dtypes[d]};
            snprintf(names[n], sizeof names[n], "forward_%s_%s", fa_backend_name(backends[b]),
                     fa_dtype_name(dtypes[d]));
            tests[n] = (struct CMUnitTest){names[n], test_group, NULL, NULL, &groups[n]};
        }
    }
    int failed = _cmocka_run_group_tests("forward", tests, (size_t)n, NULL, NULL);
    print_summary(groups, n);
    if (digest_file)
        fclose(digest_file);
    int skipped = 0;
    for (int i = 0; i < n; i++)
        skipped += groups[i].skipped;
    return harness_exit_code(failed, n - skipped, skipped);
}
