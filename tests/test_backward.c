/*
 * test_backward.c - the backward pass (fa_plan_create_backward, fa_backward) on one backend:
 *
 *   test_backward cpu|opencl|cuda [--case=SUBSTRING]
 *
 * --case=SUBSTRING runs only the tests whose name contains it; the shared cases keep their
 * names from cases.c, so "gqa113_d80/f16" picks the same problem as test_forward's --case.
 *
 * - dQ, dK, dV against a naive fp64 reference (bwd_reference.c, which shares nothing with the
 *   library but the f16/bf16 conversions) for every case of the shared table (cases.c) and for
 *   a table of its own with what the shared one lacks: head dims 1 and 8, tile overrides that
 *   cross several tiles, BSHD with padding. Within rel * max|ref| + 1e-6 per tensor, rel f32
 *   1e-5, f16 2e-3, bf16 1.6e-2 (a few storage steps); rows with no key must give dQ exactly 0
 *   and keys no row sees dK = dV exactly 0; every element of the eight buffers outside its
 *   tensor (guard after the end, padding between rows, the offset) holds NaN, which must stay
 *   in the outputs and must not leak into them. O from the library's forward is checked first.
 * - Layouts of the shared cases (case_fill_problem_backward): dO and dQ like Q, dK and dV like
 *   K and V, each with a padding of its own in the padded cases. Where K and V are broadcast
 *   over the batch (stride_batch 0) dK and dV are dense: a broadcast gradient would have
 *   overlapping rows, which the library rejects, and the library then writes each batch's own
 *   contribution to that batch's rows of dK/dV (not their sum; the caller adds them up), which
 *   is what the reference computes.
 * - Empty problems: batch 0 writes nothing; seqlen_q 0 (nothing to attend from) writes
 *   dK = dV = 0; seqlen_k 0 writes dQ = 0.
 * - Two calls are bitwise equal, and the inputs (Q, K, V, O, LSE, dO) are left as they were.
 * - An accelerator may decline a problem (UNSUPPORTED, SRAM_TOO_SMALL): reported and skipped,
 *   as in test_forward; the cpu golden must run every case.
 * - Finite differences of L = sum(dO * O) through fa_forward agree with the gradients.
 * - Every rejected call leaves dQ, dK and dV untouched.
 * - The scratch of one call is O(seqlen), not O(seqlen^2).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bwd_reference.h"
#include "cases.h"
#include "harness.h"
#include "oracle.h" /* oracle_load / oracle_store only: element access in the storage dtype */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The status for "a forward plan given to fa_backward". */
#define BW_INVALID_PLAN FA_STATUS_INVALID_PLAN

/* Elements after each tensor's last one, so a write past the end shows. */
#define GUARD 13

enum { TQ, TK, TV, TO, TDO, TDQ, TDK, TDV, NT };
static const char *const tensor_name[NT] = {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"};

static fa_context *ctx; /* the backend under test */
static fa_backend the_backend = FA_BACKEND_CPU;
static const char *case_filter; /* --case=SUBSTRING */

typedef struct bw_case {
    const char *name;
    fa_dtype dtype;
    fa_layout layout;
    int64_t b, hq, hkv, sq, sk, d;
    fa_mask mask;
    int32_t br, bc; /* tile overrides, so several tiles are crossed; 0 lets the planner choose */
    bool padded;    /* padded strides and nonzero offsets, different for each tensor */
} bw_case;

#define F32 FA_DTYPE_F32
#define F16 FA_DTYPE_F16
#define BF16 FA_DTYPE_BF16
#define BHSD FA_LAYOUT_BHSD
#define BSHD FA_LAYOUT_BSHD
#define NONE FA_MASK_NONE
#define TL FA_MASK_CAUSAL_TOP_LEFT
#define BR FA_MASK_CAUSAL_BOTTOM_RIGHT

/* What the shared table lacks: d 1 and 8, tile overrides (4 x 8: several tiles and tails),
   BSHD with padding. 5 x 17 top-left: keys 5..16 seen by no row. 33 x 7 bottom-right: rows
   0..25 see no key. */
static const bw_case cases[] = {
    {"f32 d1 6x9 none", F32, BHSD, 1, 1, 1, 6, 9, 1, NONE, 0, 0, false},
    {"f32 d1 33x7 bottom-right padded", F32, BHSD, 2, 1, 1, 33, 7, 1, BR, 4, 8, true},
    {"f32 d8 5x17 top-left tiles padded", F32, BHSD, 2, 2, 2, 5, 17, 8, TL, 4, 8, true},
    {"f32 d8 17x5 top-left MQA padded", F32, BHSD, 2, 4, 1, 17, 5, 8, TL, 4, 8, true},
    {"f32 d64 33x7 bottom-right tiles", F32, BHSD, 1, 2, 2, 33, 7, 64, BR, 4, 8, false},
    {"f32 d64 12x20 none GQA bshd padded", F32, BSHD, 2, 4, 2, 12, 20, 64, NONE, 4, 8, true},
    {"f32 d96 16x16 top-left padded", F32, BHSD, 1, 2, 1, 16, 16, 96, TL, 4, 8, true},
    {"f16 d8 5x17 bottom-right MQA", F16, BHSD, 2, 4, 1, 5, 17, 8, BR, 4, 8, false},
    {"f16 d64 5x17 top-left padded", F16, BHSD, 2, 2, 2, 5, 17, 64, TL, 4, 8, true},
    {"f16 d96 33x7 bottom-right GQA bshd padded", F16, BSHD, 2, 4, 2, 33, 7, 96, BR, 4, 8, true},
    {"f16 d1 9x9 none", F16, BHSD, 1, 1, 1, 9, 9, 1, NONE, 0, 0, false},
    {"bf16 d8 33x7 bottom-right padded", BF16, BHSD, 2, 2, 1, 33, 7, 8, BR, 4, 8, true},
    {"bf16 d64 12x20 none GQA bshd", BF16, BSHD, 2, 4, 2, 12, 20, 64, NONE, 4, 8, false},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* ---- one problem's buffers ------------------------------------------------------------ */

/* A problem, its host images of the eight tensors and the buffers holding them. */
typedef struct run {
    const char *name;
    fa_problem p;
    size_t elem;
    int64_t n[NT];           /* elements in each buffer */
    int64_t dense[NT];       /* elements in each tensor: B * H * S * d */
    int64_t *map[NT];        /* buffer element of dense element i ([b][h][s][x] order) */
    unsigned char *host[NT]; /* buffer contents as last written or read */
    unsigned char *fresh[NT]; /* contents before any call: NaN everywhere */
    float *lse;
    fa_buffer *buf[NT], *lse_buf;
    fa_plan *fwd, *bwd;
} run;

static fa_tensor_layout *layout_of(fa_problem *p, int t)
{
    fa_tensor_layout *all[NT] = {&p->q, &p->k, &p->v, &p->o, &p->d_o, &p->dq, &p->dk, &p->dv};
    return all[t];
}

static bool is_kv(int t)
{
    return t == TK || t == TV || t == TDK || t == TDV;
}

/* Row padding, head and batch gaps and an offset that differ per tensor, so a backend that
   mixes up two tensors' layouts reads or writes the wrong place. */
static void pad_layout(fa_tensor_layout *l, fa_layout kind, int t, int64_t heads, int64_t seq,
                       int64_t d)
{
    int64_t row = d + 1 + t % 3, gap_h = 2 + t, gap_b = 3 + 2 * t;
    l->offset = 5 + 3 * t;
    if (kind == FA_LAYOUT_BHSD) {
        l->stride_seq = row;
        l->stride_head = seq * row + gap_h;
        l->stride_batch = heads * l->stride_head + gap_b;
    } else {
        l->stride_head = row;
        l->stride_seq = heads * row + gap_h;
        l->stride_batch = seq * l->stride_seq + gap_b;
    }
}

/* The problem of one of this file's own cases. */
static void own_problem(const bw_case *c, fa_problem *p)
{
    assert_int_equal(fa_problem_init(p, c->dtype, c->layout, c->b, c->hq, c->hkv, c->sq, c->sk,
                                     c->d),
                     FA_STATUS_OK);
    p->mask = c->mask;
    p->block_r = c->br;
    p->block_c = c->bc;
    for (int t = 0; c->padded && t < NT; t++)
        pad_layout(layout_of(p, t), c->layout, t, is_kv(t) ? c->hkv : c->hq,
                   is_kv(t) ? c->sk : c->sq, c->d);
}

/* The buffer element of every dense element, and the buffer's length: the tensor's extent
   (fa_problem_tensor_bytes, which every mapped element lies inside) and a guard band. A
   broadcast K or V (stride_batch 0) maps every batch onto the same elements. */
static void build_map(run *r, int t)
{
    static const fa_tensor_id ids[NT] = {FA_TENSOR_Q,  FA_TENSOR_K,  FA_TENSOR_V,  FA_TENSOR_O,
                                         FA_TENSOR_DO, FA_TENSOR_DQ, FA_TENSOR_DK, FA_TENSOR_DV};
    const fa_problem *p = &r->p;
    const fa_tensor_layout *l = layout_of(&r->p, t);
    int64_t heads = is_kv(t) ? p->heads_kv : p->heads_q, seq = is_kv(t) ? p->seqlen_k : p->seqlen_q;
    uint64_t bytes = 0;
    assert_int_equal(fa_problem_tensor_bytes(p, ids[t], 0, 0, &bytes), FA_STATUS_OK);
    const int64_t extent = (int64_t)(bytes / r->elem);
    r->dense[t] = p->batch * heads * seq * p->head_dim;
    r->map[t] = malloc(sizeof(int64_t) * (size_t)(r->dense[t] ? r->dense[t] : 1));
    assert_non_null(r->map[t]);
    int64_t i = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t s = 0; s < seq; s++)
                for (int64_t x = 0; x < p->head_dim; x++, i++) {
                    r->map[t][i] = l->offset + b * l->stride_batch + h * l->stride_head +
                                   s * l->stride_seq + x;
                    assert_true(r->map[t][i] < extent);
                }
    r->n[t] = extent + GUARD;
}

static fa_buffer *make_buffer(size_t bytes, const void *init)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, bytes, &b), FA_STATUS_OK);
    assert_int_equal(fa_buffer_write(b, 0, init, bytes), FA_STATUS_OK);
    return b;
}

static size_t bytes_of(const run *r, int t)
{
    return (size_t)r->n[t] * r->elem;
}

static size_t lse_rows(const run *r)
{
    uint64_t bytes = 0;
    assert_int_equal(fa_problem_tensor_bytes(&r->p, FA_TENSOR_LSE, 0, 0, &bytes), FA_STATUS_OK);
    return (size_t)bytes / sizeof(float);
}

/* Layouts, NaN-filled images, random Q, K, V, dO in [-1, 1) and the buffers; an empty tensor
   still gets a buffer (of GUARD elements), which must stay untouched. */
static void run_open(run *r, const char *name, const fa_problem *p)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    r->p = *p;
    r->elem = fa_dtype_size(p->dtype);
    harness_rng rng;
    harness_rng_seed(&rng, name);
    for (int t = 0; t < NT; t++) {
        build_map(r, t);
        r->host[t] = malloc(bytes_of(r, t));
        r->fresh[t] = malloc(bytes_of(r, t));
        assert_true(r->host[t] && r->fresh[t]);
        for (int64_t i = 0; i < r->n[t]; i++)
            oracle_store(p->dtype, r->host[t], i, NAN);
        if (t == TQ || t == TK || t == TV || t == TDO)
            for (int64_t i = 0; i < r->dense[t]; i++)
                oracle_store(p->dtype, r->host[t], r->map[t][i],
                             harness_rng_uniform(&rng, -1.0, 1.0));
        memcpy(r->fresh[t], r->host[t], bytes_of(r, t));
        r->buf[t] = make_buffer(bytes_of(r, t), r->host[t]);
    }
    r->lse = calloc(lse_rows(r) + 1, sizeof(float));
    assert_non_null(r->lse);
    r->lse_buf = make_buffer((lse_rows(r) + 1) * sizeof(float), r->lse);
}

static void run_close(run *r)
{
    for (int t = 0; t < NT; t++) {
        fa_buffer_destroy(r->buf[t]);
        free(r->map[t]);
        free(r->host[t]);
        free(r->fresh[t]);
    }
    fa_buffer_destroy(r->lse_buf);
    free(r->lse);
    fa_plan_destroy(r->fwd);
    fa_plan_destroy(r->bwd);
}

static void read_back(run *r, int t)
{
    assert_int_equal(fa_buffer_read(r->buf[t], 0, r->host[t], bytes_of(r, t)), FA_STATUS_OK);
}

static void check_status(fa_status st, const char *what, const run *r)
{
    if (st != FA_STATUS_OK)
        fail_msg("%s (%s): %s: %s", what, r->name, fa_status_name(st),
                 fa_context_last_error(ctx));
}

/* Both plans; false when an accelerator declines the problem (said so, not a failure). */
static bool plan_both(run *r)
{
    fa_status st = fa_plan_create(ctx, &r->p, &r->fwd);
    const char *what = "fa_plan_create";
    if (st == FA_STATUS_OK) {
        st = fa_plan_create_backward(ctx, &r->p, &r->bwd);
        what = "fa_plan_create_backward";
    }
    if ((st == FA_STATUS_UNSUPPORTED || st == FA_STATUS_SRAM_TOO_SMALL) &&
        the_backend != FA_BACKEND_CPU) {
        printf("  %-44s NOT SUPPORTED: %s: %s\n", r->name, what, fa_context_last_error(ctx));
        return false;
    }
    check_status(st, what, r);
    return true;
}

/* O and LSE from the library's forward pass, which the backward takes as given. */
static void run_forward(run *r)
{
    if (!r->fwd)
        check_status(fa_plan_create(ctx, &r->p, &r->fwd), "fa_plan_create", r);
    check_status(fa_forward(ctx, r->fwd, r->buf[TQ], r->buf[TK], r->buf[TV], r->buf[TO],
                            r->lse_buf),
                 "fa_forward", r);
    read_back(r, TO);
    assert_int_equal(fa_buffer_read(r->lse_buf, 0, r->lse, lse_rows(r) * sizeof(float)),
                     FA_STATUS_OK);
}

static fa_status call_backward(run *r, const fa_plan *plan)
{
    return fa_backward(ctx, plan, r->buf[TQ], r->buf[TK], r->buf[TV], r->buf[TO], r->lse_buf,
                       r->buf[TDO], r->buf[TDQ], r->buf[TDK], r->buf[TDV]);
}

/* Outputs back to their NaN image, one backward call, outputs read back. */
static void run_backward(run *r)
{
    if (!r->bwd)
        check_status(fa_plan_create_backward(ctx, &r->p, &r->bwd), "fa_plan_create_backward", r);
    for (int t = TDQ; t <= TDV; t++)
        assert_int_equal(fa_buffer_write(r->buf[t], 0, r->fresh[t], bytes_of(r, t)),
                         FA_STATUS_OK);
    check_status(call_backward(r, r->bwd), "fa_backward", r);
    for (int t = TDQ; t <= TDV; t++)
        read_back(r, t);
}

/* Tensor t's elements in dense [b][h][s][x] order, widened. */
static double *widen(const run *r, int t)
{
    double *d = malloc(sizeof(double) * (size_t)(r->dense[t] ? r->dense[t] : 1));
    assert_non_null(d);
    for (int64_t i = 0; i < r->dense[t]; i++)
        d[i] = oracle_load(r->p.dtype, r->host[t], r->map[t][i]);
    return d;
}

/* ---- comparing ------------------------------------------------------------------------- */

static double rel_tolerance(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 ? 1e-5 : dt == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/*
 * Tensor t of r against want (dense): within rel * max|want| + 1e-6, exactly 0 where
 * zero_row[i / d] says so, and every buffer element outside the tensor still as in `before`.
 * Returns the worst error / tolerance.
 */
static double compare(const run *r, int t, const double *want, const unsigned char *zero_row,
                      const unsigned char *before)
{
    const int64_t d = r->p.head_dim;
    double peak = 0.0, worst = 0.0;
    for (int64_t i = 0; i < r->dense[t]; i++)
        peak = fabs(want[i]) > peak ? fabs(want[i]) : peak;
    double tol = rel_tolerance(r->p.dtype) * peak + 1e-6;
    unsigned char *inside = calloc((size_t)r->n[t], 1);
    assert_non_null(inside);
    for (int64_t i = 0; i < r->dense[t]; i++) {
        int64_t at = r->map[t][i];
        inside[at] = 1;
        double got = oracle_load(r->p.dtype, r->host[t], at), err = fabs(got - want[i]);
        bool must_be_zero = zero_row && zero_row[i / d];
        if (must_be_zero ? got != 0.0 : !(err <= tol))
            fail_msg("%s: %s[b,h,s = row %lld][x %lld] = %.9g, want %.9g%s (|err| %.3g, tol %.3g)",
                     r->name, tensor_name[t], (long long)(i / d), (long long)(i % d), got,
                     want[i], must_be_zero ? " exactly" : "", err, tol);
        worst = err / tol > worst ? err / tol : worst;
    }
    for (int64_t e = 0; e < r->n[t]; e++)
        if (!inside[e] && memcmp(r->host[t] + e * r->elem, before + e * r->elem, r->elem) != 0)
            fail_msg("%s: %s buffer element %lld, outside the tensor, was written", r->name,
                     tensor_name[t], (long long)e);
    free(inside);
    return worst;
}

/* The inputs of the backward (Q, K, V, O, dO and LSE) as they were before it. */
static void expect_inputs_unchanged(run *r, const unsigned char *o_before, const float *lse)
{
    for (int t = TQ; t <= TDO; t++) {
        read_back(r, t);
        const unsigned char *want = t == TO ? o_before : r->fresh[t];
        if (memcmp(r->host[t], want, bytes_of(r, t)) != 0)
            fail_msg("%s: fa_backward changed its input %s", r->name, tensor_name[t]);
    }
    size_t rows = lse_rows(r);
    float *now = malloc((rows + 1) * sizeof(float));
    assert_non_null(now);
    assert_int_equal(fa_buffer_read(r->lse_buf, 0, now, (rows + 1) * sizeof(float)), FA_STATUS_OK);
    if (memcmp(now, lse, (rows + 1) * sizeof(float)) != 0)
        fail_msg("%s: fa_backward changed its input lse", r->name);
    free(now);
}

/* ---- the tables --------------------------------------------------------------------------- */

static unsigned char *copy_of(const void *src, size_t bytes)
{
    unsigned char *c = malloc(bytes ? bytes : 1);
    assert_non_null(c);
    memcpy(c, src, bytes);
    return c;
}

/* The reference from the inputs as stored, then O, dQ, dK and dV against it. */
static void expect_reference(run *r)
{
    bwd_ref f = {widen(r, TQ), widen(r, TK), widen(r, TV), widen(r, TDO), NULL, NULL, NULL,
                 NULL, NULL, NULL};
    bwd_ref_compute(&r->p, &f);
    /* O first: a wrong forward would otherwise look like a wrong backward. */
    double w_o = compare(r, TO, f.o, f.row_empty, r->fresh[TO]);
    double w_dq = compare(r, TDQ, f.dq, f.row_empty, r->fresh[TDQ]);
    double w_dk = compare(r, TDK, f.dk, f.key_unseen, r->fresh[TDK]);
    double w_dv = compare(r, TDV, f.dv, f.key_unseen, r->fresh[TDV]);
    printf("  %-44s worst err/tol: o %.3f dq %.3f dk %.3f dv %.3f\n", r->name, w_o, w_dq, w_dk,
           w_dv);
    free((void *)f.q);
    free((void *)f.k);
    free((void *)f.v);
    free((void *)f.dout);
    bwd_ref_free(&f);
}

/* Forward, backward twice (bitwise equal, inputs unchanged), then the reference. */
static void check_problem(const char *name, const fa_problem *p)
{
    static run r;
    run_open(&r, name, p);
    if (!plan_both(&r)) {
        run_close(&r);
        skip();
    }
    run_forward(&r);
    unsigned char *o_img = copy_of(r.host[TO], bytes_of(&r, TO)), *first[3];
    run_backward(&r);
    for (int t = TDQ; t <= TDV; t++)
        first[t - TDQ] = copy_of(r.host[t], bytes_of(&r, t));
    /* Determinism: the same call again, from NaN-filled outputs, gives the same bits. */
    run_backward(&r);
    for (int t = TDQ; t <= TDV; t++)
        if (memcmp(first[t - TDQ], r.host[t], bytes_of(&r, t)) != 0)
            fail_msg("%s: a second fa_backward gave different %s bits", name, tensor_name[t]);
    expect_inputs_unchanged(&r, o_img, r.lse);
    expect_reference(&r);
    free(o_img);
    for (int i = 0; i < 3; i++)
        free(first[i]);
    run_close(&r);
}

/* A run of one of this file's own cases (the tests below reuse the table's helpers). */
static void open_own(run *r, const bw_case *c)
{
    fa_problem p;
    own_problem(c, &p);
    run_open(r, c->name, &p);
}

static void test_own_case(void **state)
{
    const bw_case *c = *state;
    fa_problem p;
    own_problem(c, &p);
    check_problem(c->name, &p);
}

static void test_shared_case(void **state)
{
    const fa_test_case *c = *state;
    fa_problem p;
    case_fill_problem_backward(c, &p);
    check_problem(c->name, &p);
}

/* ---- finite differences ------------------------------------------------------------------ */

static const bw_case fd_case = {"fd f32 3x4 d2", F32, BHSD, 1, 1, 1, 3, 4, 2, NONE, 0, 0, false};

/* L = sum(dO * O) with O from the library's forward in f32. */
static double loss(run *r)
{
    run_forward(r);
    double l = 0.0;
    for (int64_t i = 0; i < r->dense[TO]; i++)
        l += oracle_load(F32, r->host[TDO], r->map[TDO][i]) *
             oracle_load(F32, r->host[TO], r->map[TO][i]);
    return l;
}

static double fd_worst; /* the largest |difference - gradient| seen, for the log */

/* Central difference of L in dense element i of input t, against gradient g. */
static void expect_slope(run *r, int t, int64_t i, int g)
{
    const double eps = 1e-2;
    int64_t at = r->map[t][i];
    double x = oracle_load(F32, r->host[t], at);
    oracle_store(F32, r->host[t], at, x + eps);
    double up = oracle_load(F32, r->host[t], at); /* the step as stored in f32 */
    assert_int_equal(fa_buffer_write(r->buf[t], 0, r->host[t], bytes_of(r, t)), FA_STATUS_OK);
    double l_up = loss(r);
    oracle_store(F32, r->host[t], at, x - eps);
    double down = oracle_load(F32, r->host[t], at);
    assert_int_equal(fa_buffer_write(r->buf[t], 0, r->host[t], bytes_of(r, t)), FA_STATUS_OK);
    double l_down = loss(r);
    oracle_store(F32, r->host[t], at, x);
    assert_int_equal(fa_buffer_write(r->buf[t], 0, r->host[t], bytes_of(r, t)), FA_STATUS_OK);
    double slope = (l_up - l_down) / (up - down);
    double grad = oracle_load(F32, r->host[g], r->map[g][i]);
    fd_worst = fabs(slope - grad) > fd_worst ? fabs(slope - grad) : fd_worst;
    if (!(fabs(slope - grad) <= 2e-3))
        fail_msg("finite differences: dL/d%s[%lld] = %.6g by differences, %.6g by fa_backward",
                 tensor_name[t], (long long)i, slope, grad);
}

static void test_finite_differences(void **state)
{
    (void)state;
    static run r;
    open_own(&r, &fd_case);
    run_forward(&r);
    run_backward(&r);
    const int64_t picks[] = {0, 3, 5}; /* spread over rows and columns of each tensor */
    for (size_t n = 0; n < sizeof picks / sizeof picks[0]; n++) {
        expect_slope(&r, TQ, picks[n], TDQ);
        expect_slope(&r, TK, picks[n] + 1, TDK);
        expect_slope(&r, TV, picks[n] + 2, TDV);
    }
    printf("  %-44s worst |difference - gradient| %.3g (bound 2e-3)\n", fd_case.name, fd_worst);
    run_close(&r);
}

/* ---- errors -------------------------------------------------------------------------------- */

static const bw_case err_case = {"errors f32 4x6 d8", F32, BHSD, 1, 1, 1, 4, 6, 8, NONE, 0, 0,
                                 false};

/* Every output buffer still holds the 0xA5 pattern written before the rejected call. */
static void expect_untouched(fa_buffer *const *outs, int n, const char *call)
{
    for (int i = 0; i < n; i++) {
        size_t bytes = fa_buffer_size(outs[i]);
        unsigned char *now = malloc(bytes);
        assert_non_null(now);
        assert_int_equal(fa_buffer_read(outs[i], 0, now, bytes), FA_STATUS_OK);
        for (size_t b = 0; b < bytes; b++)
            if (now[b] != 0xA5)
                fail_msg("%s: output %d byte %zu changed to 0x%02x", call, i, b, now[b]);
        free(now);
    }
}

static void fill_pattern(fa_buffer *b)
{
    size_t bytes = fa_buffer_size(b);
    unsigned char *img = malloc(bytes);
    assert_non_null(img);
    memset(img, 0xA5, bytes);
    assert_int_equal(fa_buffer_write(b, 0, img, bytes), FA_STATUS_OK);
    free(img);
}

/* fa_backward with argument `which` (0 ctx, 1 plan, 2.. the nine buffers) replaced. */
static fa_status backward_with(run *r, int which, void *arg)
{
    void *a[11] = {ctx, (void *)r->bwd, r->buf[TQ], r->buf[TK], r->buf[TV], r->buf[TO], r->lse_buf,
                   r->buf[TDO], r->buf[TDQ], r->buf[TDK], r->buf[TDV]};
    a[which] = arg;
    return fa_backward(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
}

static void expect_rejected(run *r, int which, void *arg, fa_status want, const char *what)
{
    for (int t = TDQ; t <= TDV; t++)
        fill_pattern(r->buf[t]);
    fa_buffer *outs[4] = {r->buf[TDQ], r->buf[TDK], r->buf[TDV], NULL};
    int n = 3;
    if (which >= 8 && arg && arg != outs[which - 8]) {
        outs[n] = arg; /* a replacement output must be untouched as well */
        fill_pattern(outs[n++]);
    }
    fa_status st = backward_with(r, which, arg);
    if (st != want)
        fail_msg("fa_backward with %s: %s, want %s (%s)", what, fa_status_name(st),
                 fa_status_name(want), fa_context_last_error(ctx));
    expect_untouched(outs, n, what);
}

static void test_errors(void **state)
{
    (void)state;
    static run r;
    open_own(&r, &err_case);
    run_forward(&r);
    run_backward(&r);
    static const char *const arg_name[11] = {"ctx", "plan", "q", "k", "v", "o", "lse", "d_o",
                                             "dq", "dk", "dv"};
    char what[64];
    for (int i = 0; i < 11; i++) {
        snprintf(what, sizeof what, "%s NULL", arg_name[i]);
        expect_rejected(&r, i, NULL, FA_STATUS_NULL_POINTER, what);
    }
    size_t need = (size_t)(r.n[TDQ] - GUARD) * r.elem; /* the layout's extent, without guard */
    fa_buffer *small = NULL, *foreign = NULL;
    assert_int_equal(fa_buffer_create(ctx, need - 1, &small), FA_STATUS_OK);
    expect_rejected(&r, 8, small, FA_STATUS_BUFFER_TOO_SMALL, "dq one byte short");
    fa_buffer_destroy(small);
    expect_rejected(&r, 8, r.buf[TQ], FA_STATUS_INVALID_ARGUMENT, "dq aliasing q");
    expect_rejected(&r, 10, r.buf[TV], FA_STATUS_INVALID_ARGUMENT, "dv aliasing v");
    expect_rejected(&r, 10, r.buf[TDK], FA_STATUS_INVALID_ARGUMENT, "dv aliasing dk");
    expect_rejected(&r, 1, r.fwd, BW_INVALID_PLAN, "a forward plan");
    /* the message says what to use */
    assert_int_equal(backward_with(&r, 1, r.fwd), BW_INVALID_PLAN);
    assert_non_null(
        strstr(fa_context_last_error(ctx), "needs a plan from fa_plan_create_backward"));
    fa_context *other = NULL;
    fa_context_options cpu = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&other, &cpu, NULL, 0), FA_STATUS_OK);
    assert_int_equal(fa_buffer_create(other, bytes_of(&r, TDQ), &foreign), FA_STATUS_OK);
    expect_rejected(&r, 8, foreign, FA_STATUS_CONTEXT_MISMATCH, "dq of another context");
    fa_buffer_destroy(foreign);
    fa_context_destroy(other);
    run_close(&r);
}

/* fa_plan_create_backward: NULLs, and the layout checks extended to the four new tensors. */
static void test_plan_errors(void **state)
{
    (void)state;
    fa_problem p;
    fa_plan *plan = NULL;
    assert_int_equal(fa_problem_init(&p, F32, BHSD, 1, 4, 2, 4, 6, 8), FA_STATUS_OK);
    assert_int_equal(fa_plan_create_backward(NULL, &p, &plan), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_plan_create_backward(ctx, NULL, &plan), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_plan_create_backward(ctx, &p, NULL), FA_STATUS_NULL_POINTER);
    assert_null(plan);
    for (int t = TDO; t <= TDV; t++) {
        fa_problem bad = p;
        layout_of(&bad, t)->stride_seq = -1;
        fa_status st = fa_plan_create_backward(ctx, &bad, &plan);
        if (st != FA_STATUS_INVALID_STRIDE)
            fail_msg("%s stride_seq -1: %s, want FA_STATUS_INVALID_STRIDE", tensor_name[t],
                     fa_status_name(st));
        assert_null(plan);
    }
    fa_problem bad = p; /* the shared checks answer as fa_plan_create does */
    bad.heads_q = 3;
    assert_int_equal(fa_plan_create_backward(ctx, &bad, &plan), FA_STATUS_HEADS_MISMATCH);
    assert_null(plan);
    /* K and V may be broadcast over the batch (stride_batch 0: an input read twice), but dK
       with stride_batch 0 would have two batches write one row: refused, which is why the
       kv_broadcast cases give dK and dV dense layouts of their own. */
    fa_problem bcast = p;
    bcast.batch = 2;
    bcast.k.stride_batch = bcast.v.stride_batch = 0;
    assert_int_equal(fa_plan_create_backward(ctx, &bcast, &plan), FA_STATUS_OK);
    fa_plan_destroy(plan);
    plan = NULL;
    bcast.dk.stride_batch = 0;
    assert_int_equal(fa_plan_create_backward(ctx, &bcast, &plan), FA_STATUS_INVALID_STRIDE);
    assert_null(plan);
}

/* ---- memory --------------------------------------------------------------------------------- */

static const bw_case mem_case = {"memory f32 512x512 d64", F32, BHSD, 1, 1, 1, 512, 512, 64,
                                 NONE, 0, 0, false};

/* Scratch beyond the buffers: O(seqlen_k * d), where an S or P matrix would be 512^2 * 4+. */
static void test_memory(void **state)
{
    (void)state;
    static run r;
    open_own(&r, &mem_case);
    run_forward(&r);
    check_status(fa_plan_create_backward(ctx, &r.p, &r.bwd), "fa_plan_create_backward", &r);
    uint64_t before = 0, after = 0, peak = 0;
    fa_context_release_scratch(ctx); /* the forward's, kept by the context */
    fa_context_memory(ctx, &before, NULL);
    fa_context_reset_peak(ctx);
    check_status(call_backward(&r, r.bwd), "fa_backward", &r);
    fa_context_memory(ctx, &after, &peak);
    uint64_t bound = (uint64_t)(mem_case.sk * mem_case.d * 2 * 8) + 64 * 1024;
    printf("  %-44s scratch %llu bytes (bound %llu)\n", mem_case.name,
           (unsigned long long)(peak - before), (unsigned long long)bound);
    if (peak - before > bound)
        fail_msg("fa_backward used %llu scratch bytes, more than O(N)'s %llu",
                 (unsigned long long)(peak - before), (unsigned long long)bound);
    /* The context keeps the run's scratch for the next run, and frees it when asked. */
    if (after - before > bound)
        fail_msg("fa_backward kept %lld bytes after returning", (long long)(after - before));
    fa_context_reset_peak(ctx);
    check_status(call_backward(&r, r.bwd), "fa_backward again", &r);
    fa_context_memory(ctx, &peak, &peak);
    if (peak != after)
        fail_msg("a second fa_backward held %llu bytes, the first kept %llu: scratch not reused",
                 (unsigned long long)peak, (unsigned long long)after);
    fa_context_release_scratch(ctx);
    fa_context_memory(ctx, &after, NULL);
    if (after != before)
        fail_msg("fa_context_release_scratch left %lld bytes", (long long)(after - before));
    run_close(&r);
}

/* Adds a test unless --case leaves it out. */
static void add_test(struct CMUnitTest *tests, size_t *n, const char *name,
                     CMUnitTestFunction fn, const void *state)
{
    if (!case_filter || strstr(name, case_filter))
        tests[(*n)++] = (struct CMUnitTest){name, fn, NULL, NULL, (void *)state};
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_backward", &the_backend);
    if (rc >= 0)
        return rc;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--case=", 7) == 0)
            case_filter = argv[i] + 7;
    struct CMUnitTest *tests = malloc(sizeof *tests * (NCASES + fa_test_case_count + 4));
    if (!tests)
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < NCASES; i++)
        add_test(tests, &n, cases[i].name, test_own_case, &cases[i]);
    for (size_t i = 0; i < fa_test_case_count; i++)
        add_test(tests, &n, fa_test_cases[i].name, test_shared_case, &fa_test_cases[i]);
    add_test(tests, &n, "finite differences", test_finite_differences, NULL);
    add_test(tests, &n, "errors", test_errors, NULL);
    add_test(tests, &n, "plan errors", test_plan_errors, NULL);
    add_test(tests, &n, "memory", test_memory, NULL);
    if (n == 0) { /* a misspelt --case must not pass by running nothing */
        fprintf(stderr, "test_backward: no test name contains \"%s\"\n", case_filter);
        free(tests);
        return 2;
    }
    char why[600] = "";
    fa_context_options opts = {the_backend, 0};
    if (fa_context_create(&ctx, &opts, why, sizeof why) != FA_STATUS_OK) {
        printf("FAILED: cannot open the %s context: %s\n", fa_backend_name(the_backend), why);
        free(tests);
        return 1;
    }
    fa_device_props props;
    if (fa_context_device_props(ctx, &props) == FA_STATUS_OK) /* oclgrind_tests.sh reads it */
        printf("device: %s (%s)\n", props.name, props.vendor);
    char name[64];
    snprintf(name, sizeof name, "backward_%s", fa_backend_name(the_backend));
    int failed = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    fa_context_destroy(ctx);
    free(tests);
    return harness_exit_code(failed, 1, 0);
}
