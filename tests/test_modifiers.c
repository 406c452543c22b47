/*
 * test_modifiers.c - the score modifiers (softcap, ALiBi, bias, sliding window, sinks) and
 * dropout on one backend, against an independent fp64 reference (mod_reference.c):
 *
 *   test_modifiers cpu|opencl|cuda [--case=SUBSTRING]
 *
 * - Philox4x32-10: Random123's known answers, for the reference's own generator and for the
 *   library's fa_philox4x32_10 (src/kernel_params.h, included for that test only).
 * - Every feature alone and all six together, with each mask, in f32, f16 and bf16, over four
 *   shapes (GQA 17x113 d64, MQA 1x37 d8, MQA 33x7 d96 where bottom-right leaves rows without a
 *   key, MHA 20x20 d8), BHSD and BSHD, half of them with 4 x 8 tiles: O and LSE, then dQ, dK,
 *   dV and d_sinks against the reference. Within rel * max|ref| + 1e-6 per tensor (rel f32
 *   1e-5, f16 2e-3, bf16 1.6e-2, test_backward's rule); LSE within 1e-5 + 1e-5 |LSE| (f32) or
 *   rel (1 + |LSE|); NaN where the reference is finite fails; every buffer element outside its
 *   tensor (offset, padding, guard) keeps its NaN; a second run is bitwise equal.
 * - Rows every modifier masks out (window (0, 0) past the diagonal, a window off the start, a
 *   window disjoint from top-left): O = 0 and dQ = 0 exactly, LSE = -inf exactly, or the sink
 *   (to f32 rounding) with sinks; keys no row sees get dK = dV = 0 exactly. Empty problems
 *   (seqlen_k 0, seqlen_q 0, batch 0) with sinks: d_sinks is still written (0).
 * - One-row GQA decodes with softcap, ALiBi, a window and sinks, which the OpenCL backend runs
 *   with the query heads as rows (GQA packing on BHSD; heads packing on BSHD, on CPUs).
 * - Dropout's keep mask bit for bit, read through the forward itself (Q = 0 so P = 1/Sk, V = the
 *   identity, so O[i][x] = keep(i, x) * scale / Sk), against the reference's Philox; and the
 *   keep rate within 5 sigma of 1 - p for p 0.1, 0.5, 0.9.
 * - Finite differences of L = sum(dO * O) through fa_forward_ex against every element of dQ,
 *   dK, dV and d_sinks, with softcap and sinks, and with all six features.
 * - The rejected values and buffers: test_modifiers_invalid.c; the buffers and calls every
 *   test runs through: test_modifiers_buffers.c.
 * An accelerator that declines a problem (UNSUPPORTED) is reported and skipped, or fails when
 * FLASHATTN_REQUIRE_BACKENDS names it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "mod_reference.h"
#include "oracle.h" /* oracle_load / oracle_store only: element access in a storage dtype */
#include "test_modifiers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *case_filter; /* --case=SUBSTRING */

/* Tensor t's elements in dense order, widened (NULL for a modifier that is off). */
static double *widen(const mt_run *r, int t)
{
    const mt_tensor *x = &r->t[t];
    if (!x->buf)
        return NULL;
    double *d = malloc(sizeof(double) * (size_t)(x->dense ? x->dense : 1));
    assert_non_null(d);
    for (int64_t i = 0; i < x->dense; i++)
        d[i] = oracle_load(x->dt, x->host, x->map[i]);
    return d;
}

/* ---- comparing ------------------------------------------------------------------------------- */

static double rel_tolerance(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 ? 1e-5 : dt == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* Every buffer element outside tensor t is as before any call. */
static void expect_guards(const mt_run *r, int t)
{
    const mt_tensor *x = &r->t[t];
    unsigned char *inside = calloc((size_t)x->n, 1);
    assert_non_null(inside);
    for (int64_t i = 0; i < x->dense; i++)
        inside[x->map[i]] = 1;
    for (int64_t e = 0; e < x->n; e++)
        if (!inside[e] && memcmp(x->host + e * x->elem, x->fresh + e * x->elem, x->elem) != 0)
            fail_msg("%s: %s buffer element %lld, outside the tensor, was written", r->name,
                     mt_tensor_name[t], (long long)e);
    free(inside);
}

/*
 * Tensor t (dense element i) against want: within rel * max|want| + 1e-6, exactly 0 where
 * zero[i / inner]; the guards kept. Returns the worst error / tolerance.
 */
static double compare(const mt_run *r, int t, const double *want, int64_t inner,
                      const unsigned char *zero)
{
    const mt_tensor *x = &r->t[t];
    double peak = 0.0, worst = 0.0;
    for (int64_t i = 0; i < x->dense; i++)
        peak = fabs(want[i]) > peak ? fabs(want[i]) : peak;
    double tol = rel_tolerance(r->p.dtype) * peak + 1e-6;
    for (int64_t i = 0; i < x->dense; i++) {
        double got = oracle_load(x->dt, x->host, x->map[i]), err = fabs(got - want[i]);
        bool exact = zero && zero[i / inner];
        if (exact ? got != 0.0 : !(err <= tol))
            fail_msg("%s: %s[%lld][%lld] = %.9g, want %.9g%s (|err| %.3g, tol %.3g)", r->name,
                     mt_tensor_name[t], (long long)(i / inner), (long long)(i % inner), got,
                     want[i], exact ? " exactly" : "", err, tol);
        worst = err / tol > worst ? err / tol : worst;
    }
    expect_guards(r, t);
    return worst;
}

/*
 * LSE: a row with no key holds exactly -inf, or its sink to f32 rounding (1e-6 |sink|: a kernel
 * working in log2 units rounds sink * log2(e) / log2(e)); any other row within 1e-5 + 1e-5 |LSE|
 * (f32) or rel (1 + |LSE|).
 */
static double compare_lse(const mt_run *r, const mod_ref *f)
{
    const mt_tensor *x = &r->t[TLSE];
    const bool f32 = r->p.dtype == FA_DTYPE_F32;
    double worst = 0.0;
    for (int64_t i = 0; i < x->dense; i++) {
        double got = oracle_load(FA_DTYPE_F32, x->host, i), want = f->lse[i];
        double tol = f32 ? 1e-5 + 1e-5 * fabs(want)
                         : rel_tolerance(r->p.dtype) * (1 + fabs(want));
        bool empty = f->row_empty[i];
        if (empty)
            tol = want == -INFINITY ? 0.0 : 1e-6 * fmax(1.0, fabs(want));
        double err = got == want ? 0.0 : fabs(got - want); /* -inf == -inf: no error */
        if (!(err <= tol))
            fail_msg("%s: lse[%lld] = %.9g, want %.9g%s (tol %.3g)", r->name, (long long)i, got,
                     want, empty ? " (a row with no key)" : "", tol);
        worst = tol > 0.0 && err / tol > worst ? err / tol : worst;
    }
    expect_guards(r, TLSE);
    return worst;
}

static unsigned char *snapshot(const mt_run *r, int t)
{
    const mt_tensor *x = &r->t[t];
    size_t bytes = x->buf ? (size_t)x->n * x->elem : 1;
    unsigned char *c = malloc(bytes);
    assert_non_null(c);
    if (x->buf)
        memcpy(c, x->host, bytes);
    return c;
}

/* The calls twice: outputs bitwise equal (the second runs from the fresh NaN images). */
static void run_twice(mt_run *r, bool backward)
{
    const int fwd[2] = {TO, TLSE}, bwd[4] = {TDQ, TDK, TDV, TDSINKS};
    const int *outs = backward ? bwd : fwd, n = backward ? 4 : 2;
    unsigned char *first[4];
    backward ? mt_backward(r) : mt_forward(r);
    for (int i = 0; i < n; i++)
        first[i] = snapshot(r, outs[i]);
    backward ? mt_backward(r) : mt_forward(r);
    for (int i = 0; i < n; i++) {
        const mt_tensor *x = &r->t[outs[i]];
        if (x->buf && memcmp(first[i], x->host, (size_t)x->n * x->elem) != 0)
            fail_msg("%s: a second call gave different %s bits", r->name, mt_tensor_name[outs[i]]);
        free(first[i]);
    }
}

/* The reference from the inputs as stored; every output against it. */
static void expect_reference(mt_run *r, bool want_empty)
{
    mod_ref f = {.q = widen(r, TQ),        .k = widen(r, TK),         .v = widen(r, TV),
                 .dout = widen(r, TDO),    .bias = widen(r, TBIAS),   .slopes = widen(r, TSLOPES),
                 .sinks = widen(r, TSINKS)};
    mod_ref_compute(&r->p, &f);
    const int64_t d = r->p.head_dim;
    double w[6];
    w[0] = compare(r, TO, f.o, d, f.row_empty); /* first: a wrong forward is not a backward's */
    w[1] = compare_lse(r, &f);
    w[2] = compare(r, TDQ, f.dq, d, f.row_empty);
    w[3] = compare(r, TDK, f.dk, d, f.key_unseen);
    w[4] = compare(r, TDV, f.dv, d, f.key_unseen);
    w[5] = r->p.sinks ? compare(r, TDSINKS, f.dsinks, 1, NULL) : 0.0;
    int64_t empty = 0, rows = r->t[TLSE].dense;
    for (int64_t i = 0; i < rows; i++)
        empty += f.row_empty[i];
    if (want_empty && empty == 0)
        fail_msg("%s: the case was meant to have rows with no key, and has none", r->name);
    printf("  %-48s err/tol o %.3f lse %.3f dq %.3f dk %.3f dv %.3f ds %.3f; %lld/%lld empty\n",
           r->name, w[0], w[1], w[2], w[3], w[4], w[5], (long long)empty, (long long)rows);
    const double *in[7] = {f.q, f.k, f.v, f.dout, f.bias, f.slopes, f.sinks};
    for (int i = 0; i < 7; i++)
        free((void *)in[i]);
    mod_ref_free(&f);
}

/* ---- the case table -------------------------------------------------------------------------- */

enum { F_CAP = 1, F_ALIBI = 2, F_BIAS = 4, F_WIN = 8, F_SINK = 16, F_DROP = 32, F_ALL = 63 };
enum { F_ALIBI_B = 64 }; /* with F_ALIBI: slopes [batch, heads_q] (alibi 2) */

typedef struct mod_case {
    char name[96];
    fa_dtype dtype;
    fa_layout layout;
    int64_t b, hq, hkv, sq, sk, d;
    fa_mask mask;
    unsigned feat;
    int32_t br, bc;       /* tile overrides; 0: the planner's */
    int64_t wl, wr;       /* the window's bounds */
    bool bias_bcast;      /* bias stride_batch 0 */
    bool bias_in_dtype;   /* bias_dtype the problem's (else f32) */
    bool neg_inf_sink;    /* sink[0] = -inf: no sink for head 0 */
    bool want_empty;      /* some rows must see no key */
    uint64_t seed;
} mod_case;

typedef struct shape {
    const char *tag;
    int64_t b, hq, hkv, sq, sk, d, wl, wr;
} shape;

static const shape shapes[] = {
    {"GQA 17x113 d64", 2, 4, 2, 17, 113, 64, 9, 4},
    {"MQA 1x37 d8", 1, 3, 1, 1, 37, 8, 10, -1},
    {"MQA 33x7 d96", 2, 2, 1, 33, 7, 96, 2, 1},
    {"MHA 20x20 d8", 1, 2, 2, 20, 20, 8, 3, 0},
};

static const char *const feat_tag[7] = {"softcap", "alibi", "bias", "window", "sinks",
                                        "dropout", "all six"};

#define MAX_CASES 100
static mod_case cases[MAX_CASES];
static size_t n_cases;

/* Every feature alone and all six, x 3 masks x 3 dtypes; the shape, layout and tiles vary. */
static void build_cases(void)
{
    static const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    for (unsigned f = 0; f < 7; f++)
        for (int m = 0; m < 3; m++)
            for (int t = 0; t < 3; t++) {
                const shape *s = &shapes[(f + (unsigned)m + (unsigned)t) % 4];
                mod_case *c = &cases[n_cases];
                *c = (mod_case){.dtype = dts[t], .b = s->b, .hq = s->hq, .hkv = s->hkv,
                                .sq = s->sq, .sk = s->sk, .d = s->d, .mask = (fa_mask)m,
                                .feat = f < 6 ? 1u << f : F_ALL, .wl = s->wl, .wr = s->wr,
                                .seed = 0x243F6A8885A308D3ull + n_cases};
                c->layout = (m + t) % 2 ? FA_LAYOUT_BSHD : FA_LAYOUT_BHSD;
                c->br = (f + (unsigned)m) % 2 ? 4 : 0;
                c->bc = c->br ? 8 : 0;
                /* The window counts from the bottom-right diagonal: with top-left and
                   Sk > Sq, widen it so it counts from the top-left one. */
                if (m == FA_MASK_CAUSAL_TOP_LEFT && s->sk > s->sq && c->wl >= 0)
                    c->wl += s->sk - s->sq;
                c->bias_bcast = t == 1;
                c->bias_in_dtype = t == 2;
                c->neg_inf_sink = f == 6 && m == FA_MASK_NONE && t == 0;
                snprintf(c->name, sizeof c->name, "%s %s %s %s%s%s", fa_dtype_name(c->dtype),
                         feat_tag[f], fa_mask_name(c->mask), s->tag,
                         c->layout == FA_LAYOUT_BSHD ? " bshd" : "", c->br ? " tiles" : "");
                n_cases++;
            }
    /* Rows every modifier masks out: O = 0, dQ = 0, LSE = -inf or the sink. */
    static const mod_case empty[] = {
        {"f32 window (0,0) 9x5 bottom-right", FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 1, 9, 5, 8,
         FA_MASK_CAUSAL_BOTTOM_RIGHT, F_WIN, 0, 0, 0, 0, false, false, false, true, 1},
        {"f32 window (0,0) 9x5 bottom-right sinks", FA_DTYPE_F32, FA_LAYOUT_BHSD, 2, 2, 1, 9, 5,
         8, FA_MASK_CAUSAL_BOTTOM_RIGHT, F_WIN | F_SINK, 4, 8, 0, 0, false, false, false, true, 2},
        {"f32 window (3,0) off the start 20x5 all six", FA_DTYPE_F32, FA_LAYOUT_BSHD, 1, 3, 1,
         20, 5, 16, FA_MASK_NONE, F_ALL, 4, 8, 3, 0, true, false, false, true, 3},
        {"f16 window (3,0) off the start 20x5 no sinks", FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 2, 2,
         20, 5, 16, FA_MASK_NONE, F_ALL & ~F_SINK, 0, 0, 3, 0, false, true, false, true, 4},
        {"bf16 window (0,0) disjoint from top-left 4x12", FA_DTYPE_BF16, FA_LAYOUT_BHSD, 1, 2, 1,
         4, 12, 8, FA_MASK_CAUSAL_TOP_LEFT, F_WIN | F_SINK | F_CAP, 0, 0, 0, 0, false, false,
         false, true, 5},
        /* Empty problems: no key at all (O = 0, LSE = the sink), no query row (dK = dV = 0,
           d_sinks = 0), no batch (d_sinks = 0, nothing else written). */
        {"f32 seqlen_k 0 all six", FA_DTYPE_F32, FA_LAYOUT_BHSD, 2, 2, 1, 3, 0, 8,
         FA_MASK_NONE, F_ALL, 0, 0, 1, 1, false, false, false, true, 6},
        {"f16 seqlen_q 0 all six", FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, 2, 2, 0, 5, 8,
         FA_MASK_CAUSAL_BOTTOM_RIGHT, F_ALL, 0, 0, 1, 1, false, true, false, false, 7},
        {"f32 batch 0 sinks", FA_DTYPE_F32, FA_LAYOUT_BHSD, 0, 3, 1, 4, 5, 8, FA_MASK_NONE,
         F_SINK | F_CAP, 0, 0, 0, 0, false, false, false, false, 8},
    };
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
        cases[n_cases++] = empty[i];
    /* One-row decodes the OpenCL backend packs, the query heads as rows (GQA packing on BHSD,
       heads packing on BSHD at batch 2 on CPUs): each row's own slope and sink, row 0's window
       and distances; the last in four tiles of 4 rows. */
    static const mod_case packed[] = {
        {"f16 decode 12/3 1x300 packed: softcap alibi window sinks", FA_DTYPE_F16,
         FA_LAYOUT_BHSD, 1, 12, 3, 1, 300, 64, FA_MASK_CAUSAL_BOTTOM_RIGHT,
         F_CAP | F_ALIBI | F_WIN | F_SINK, 0, 0, 50, 0, false, false, false, false, 9},
        {"f32 decode 8/2 1x130 packed bshd: alibi sinks", FA_DTYPE_F32, FA_LAYOUT_BSHD, 2, 8, 2,
         1, 130, 32, FA_MASK_NONE, F_ALIBI | F_SINK, 0, 0, 0, 0, false, false, false, false, 10},
        {"bf16 decode 6/6 1x77 packed bshd: window (0,0) sinks", FA_DTYPE_BF16, FA_LAYOUT_BSHD, 2,
         6, 6, 1, 77, 16, FA_MASK_CAUSAL_BOTTOM_RIGHT, F_WIN | F_SINK, 0, 0, 0, 0, false, false,
         true, false, 11},
        {"f16 decode 16/4 1x520 packed bshd tiles: softcap alibi window sinks", FA_DTYPE_F16,
         FA_LAYOUT_BSHD, 2, 16, 4, 1, 520, 64, FA_MASK_CAUSAL_BOTTOM_RIGHT,
         F_CAP | F_ALIBI | F_WIN | F_SINK, 4, 8, 100, 0, false, false, false, false, 12},
    };
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++)
        cases[n_cases++] = packed[i];
    /* Tiles of more than 64 rows, which pocl runs on the register-blocked path (REG_BLOCKED):
       the modifiers and dropout on its S rows, rows past Sq in its last register block. */
    static const mod_case blocked[] = {
        {"f32 8/2 130x150 d64 blocked: all six", FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 8, 2, 130,
         150, 64, FA_MASK_CAUSAL_TOP_LEFT, F_ALL, 0, 0, 60, 5, false, false, false, false, 13},
        {"bf16 4/4 99x77 d32 blocked bshd: softcap alibi bias", FA_DTYPE_BF16, FA_LAYOUT_BSHD, 2,
         4, 4, 99, 77, 32, FA_MASK_CAUSAL_BOTTOM_RIGHT, F_CAP | F_ALIBI | F_BIAS, 0, 0, 0, 0,
         true, true, false, false, 14},
        {"f16 2/1 97x200 d48 blocked: window sinks dropout", FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 2,
         1, 97, 200, 48, FA_MASK_NONE, F_WIN | F_SINK | F_DROP, 0, 0, 30, 30, false, false, false,
         false, 15},
    };
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        cases[n_cases++] = blocked[i];
    /* ALiBi slopes per sequence (flash-attn's (batch, nheads)): each (b, h) its own slope,
       through the dense, tiled and packed paths. */
    static const mod_case per_batch[] = {
        {"f32 alibi per batch 3x4/2 17x45", FA_DTYPE_F32, FA_LAYOUT_BHSD, 3, 4, 2, 17, 45, 32,
         FA_MASK_NONE, F_ALIBI | F_ALIBI_B, 0, 0, 0, 0, false, false, false, false, 16},
        {"f16 alibi per batch bottom-right bshd tiles", FA_DTYPE_F16, FA_LAYOUT_BSHD, 2, 4, 4,
         20, 33, 64, FA_MASK_CAUSAL_BOTTOM_RIGHT, F_ALIBI | F_ALIBI_B | F_CAP, 4, 8, 0, 0,
         false, false, false, false, 17},
        {"bf16 alibi per batch all six", FA_DTYPE_BF16, FA_LAYOUT_BHSD, 2, 2, 1, 33, 7, 96,
         FA_MASK_NONE, F_ALL | F_ALIBI_B, 0, 0, 2, 1, false, false, false, false, 18},
        {"f32 decode 8/2 1x130 bshd, unpacked: per-batch alibi sinks", FA_DTYPE_F32,
         FA_LAYOUT_BSHD, 2, 8, 2, 1, 130, 32, FA_MASK_NONE, F_ALIBI | F_ALIBI_B | F_SINK, 0, 0, 0,
         0, false, false, false, false, 19},
    };
    for (size_t i = 0; i < sizeof per_batch / sizeof per_batch[0]; i++)
        cases[n_cases++] = per_batch[i];
}

static void case_problem(const mod_case *c, fa_problem *p)
{
    assert_int_equal(fa_problem_init(p, c->dtype, c->layout, c->b, c->hq, c->hkv, c->sq, c->sk,
                                     c->d),
                     FA_STATUS_OK);
    p->mask = c->mask;
    p->block_r = c->br;
    p->block_c = c->bc;
    p->softcap = c->feat & F_CAP ? 0.8f : 0.0f;
    p->alibi = (c->feat & F_ALIBI) ? (c->feat & F_ALIBI_B ? 2 : 1) : 0;
    p->sinks = (c->feat & F_SINK) != 0;
    if (c->feat & F_WIN) {
        p->window = 1;
        p->window_left = c->wl;
        p->window_right = c->wr;
    }
    if (c->feat & F_BIAS) {
        p->bias = 1;
        p->bias_dtype = c->bias_in_dtype ? c->dtype : FA_DTYPE_F32;
        fa_tensor_layout *l = &p->bias_layout; /* padded rows, gaps, an offset */
        l->offset = 3;
        l->stride_seq = c->sk + 2;
        /* The bias in the problem's dtype is shared by the heads (stride 0, which the OpenCL
           forward visits heads-first); the others have a head stride with a gap. */
        l->stride_head = c->bias_in_dtype ? 0 : c->sq * l->stride_seq + 1;
        l->stride_batch = c->bias_bcast ? 0 : c->hq * (c->sq * l->stride_seq + 1) + 4;
    }
    if (c->feat & F_DROP) {
        p->dropout_p = 0.25f;
        p->dropout_seed = c->seed;
        p->dropout_offset = (uint32_t)(c->seed * 2654435761u);
    }
}

static void test_case(void **state)
{
    const mod_case *c = *state;
    fa_problem p;
    case_problem(c, &p);
    static mt_run r;
    mt_open(&r, c->name, &p);
    if (c->neg_inf_sink) {
        oracle_store(FA_DTYPE_F32, r.t[TSINKS].host, 0, -INFINITY);
        mt_write(&r, TSINKS);
    }
    mt_plan(&r);
    run_twice(&r, false);
    run_twice(&r, true);
    expect_reference(&r, c->want_empty);
    mt_close(&r);
}

/* ---- dropout's keep mask, read through the forward ------------------------------------------- */

typedef struct mask_case {
    const char *name;
    int64_t b, hq, hkv, sq, sk;
    float p;
    uint64_t seed;
    uint32_t offset;
    bool rate; /* also the keep rate against 1 - p */
} mask_case;

static const mask_case mask_cases[] = {
    {"mask B2 H3/1 9x256 p0.5", 2, 3, 1, 9, 256, 0.5f, 0x0123456789ABCDEFull, 0, false},
    {"mask B1 H2/2 33x100 p0.1 offset ~0", 1, 2, 2, 33, 100, 0.1f, 0xDEADBEEF00000001ull,
     0xFFFFFFFFu, false},
    {"mask B3 H1/1 5x7 p0.9", 3, 1, 1, 5, 7, 0.9f, 42, 7, false},
    {"mask B2 H5/1 3x255 p0.3 seed 0", 2, 5, 1, 3, 255, 0.3f, 0, 12345, false},
    {"keep rate 64x256 x4 heads p0.1", 1, 4, 2, 64, 256, 0.1f, 0xFEEDFACECAFEBEEFull, 3, true},
    {"keep rate 64x256 x4 heads p0.5", 1, 4, 2, 64, 256, 0.5f, 0x9E3779B97F4A7C15ull, 4, true},
    {"keep rate 64x256 x4 heads p0.9", 1, 4, 2, 64, 256, 0.9f, 0x0000000100000000ull, 5, true},
};
#define N_MASK_CASES (sizeof mask_cases / sizeof mask_cases[0])

static void test_dropout_mask(void **state)
{
    const mask_case *mc = *state;
    const int64_t d = 256;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, mc->b, mc->hq, mc->hkv,
                                     mc->sq, mc->sk, d),
                     FA_STATUS_OK);
    p.dropout_p = mc->p;
    p.dropout_seed = mc->seed;
    p.dropout_offset = mc->offset;
    static mt_run r;
    mt_open(&r, mc->name, &p);
    /* Q = 0: every score 0, P = 1 / Sk. V = the identity: V[j][x] = (j == x). */
    for (int t = TQ; t <= TV; t += 2) {
        mt_tensor *x = &r.t[t];
        for (int64_t i = 0; i < x->dense; i++)
            oracle_store(FA_DTYPE_F32, x->host, x->map[i],
                         t == TV && (i / d) % mc->sk == i % d ? 1.0 : 0.0);
        mt_write(&r, t);
    }
    mt_plan(&r);
    mt_forward(&r);
    const double unit = mod_dropout_scale(&r.p) / (double)mc->sk; /* O of a kept element */
    int64_t kept = 0, total = 0, wrong = 0;
    for (int64_t i = 0; i < r.t[TO].dense; i++) {
        int64_t x = i % d, row = i / d, s = row % mc->sq, h = row / mc->sq % mc->hq;
        int64_t b = row / mc->sq / mc->hq;
        double got = oracle_load(FA_DTYPE_F32, r.t[TO].host, r.t[TO].map[i]);
        if (x >= mc->sk) { /* no key has a 1 in this column */
            if (got != 0.0)
                fail_msg("%s: O[b%lld h%lld s%lld][%lld] = %g, want 0", mc->name, (long long)b,
                         (long long)h, (long long)s, (long long)x, got);
            continue;
        }
        bool keep = got > 0.5 * unit, want = mod_keep(&r.p, b, h, s, x);
        if (keep ? !(fabs(got - unit) <= 1e-6 * unit) : got != 0.0)
            fail_msg("%s: O[b%lld h%lld s%lld][%lld] = %.9g is neither 0 nor %.9g", mc->name,
                     (long long)b, (long long)h, (long long)s, (long long)x, got, unit);
        if (keep != want && wrong++ < 5)
            printf("  %s: keep(b%lld h%lld i%lld j%lld) = %d, the reference's Philox says %d\n",
                   mc->name, (long long)b, (long long)h, (long long)s, (long long)x, keep, want);
        kept += keep;
        total++;
    }
    double rate = (double)kept / (double)total, q = 1.0 - (double)mc->p;
    double sigma = sqrt(q * (1.0 - q) / (double)total);
    printf("  %-48s %lld elements, %lld kept (%.4f, want %.4f +- %.4f), %lld differ\n", mc->name,
           (long long)total, (long long)kept, rate, q, 5 * sigma, (long long)wrong);
    if (wrong)
        fail_msg("%s: %lld of %lld keep bits differ from the reference's Philox", mc->name,
                 (long long)wrong, (long long)total);
    if (mc->rate && !(fabs(rate - q) <= 5 * sigma))
        fail_msg("%s: keep rate %.5f, want %.5f within 5 sigma (%.5f)", mc->name, rate, q,
                 5 * sigma);
    expect_guards(&r, TO);
    mt_close(&r);
}

/* ---- finite differences ---------------------------------------------------------------------- */

/* L = sum(dO * O) with O from the library's forward. */
static double loss(mt_run *r)
{
    mt_forward(r);
    double l = 0.0;
    for (int64_t i = 0; i < r->t[TO].dense; i++)
        l += oracle_load(FA_DTYPE_F32, r->t[TDO].host, r->t[TDO].map[i]) *
             oracle_load(FA_DTYPE_F32, r->t[TO].host, r->t[TO].map[i]);
    return l;
}

/* Central difference of L in dense element i of input t, against gradient tensor g; returns
   |difference - gradient|. */
static double slope_error(mt_run *r, int t, int64_t i, int g)
{
    const double eps = 1e-2;
    mt_tensor *x = &r->t[t];
    int64_t at = x->map[i];
    double v = oracle_load(FA_DTYPE_F32, x->host, at), l[2], step[2];
    for (int k = 0; k < 2; k++) {
        oracle_store(FA_DTYPE_F32, x->host, at, v + (k ? -eps : eps));
        step[k] = oracle_load(FA_DTYPE_F32, x->host, at); /* the step as stored in f32 */
        mt_write(r, t);
        l[k] = loss(r);
    }
    oracle_store(FA_DTYPE_F32, x->host, at, v);
    mt_write(r, t);
    double slope = (l[0] - l[1]) / (step[0] - step[1]);
    double grad = oracle_load(FA_DTYPE_F32, r->t[g].host, r->t[g].map[i]);
    if (!(fabs(slope - grad) <= 2e-3))
        fail_msg("%s: dL/d%s[%lld] = %.6g by differences, %.6g by fa_backward_ex", r->name,
                 mt_tensor_name[t], (long long)i, slope, grad);
    return fabs(slope - grad);
}

typedef struct fd_case {
    const char *name;
    fa_mask mask;
    unsigned feat;
} fd_case;

static const fd_case fd_cases[] = {
    {"finite differences softcap sinks", FA_MASK_NONE, F_CAP | F_SINK},
    {"finite differences all six", FA_MASK_CAUSAL_BOTTOM_RIGHT, F_ALL},
};

static void test_finite_differences(void **state)
{
    const fd_case *fc = *state;
    mod_case c = {.dtype = FA_DTYPE_F32, .layout = FA_LAYOUT_BHSD, .b = 1, .hq = 2, .hkv = 1,
                  .sq = 4, .sk = 5, .d = 4, .mask = fc->mask, .feat = fc->feat, .wl = 2,
                  .wr = 1, .seed = 99};
    fa_problem p;
    case_problem(&c, &p);
    static mt_run r;
    mt_open(&r, fc->name, &p);
    mt_plan(&r);
    mt_forward(&r);
    mt_backward(&r);
    static const int inputs[4][2] = {{TQ, TDQ}, {TK, TDK}, {TV, TDV}, {TSINKS, TDSINKS}};
    double worst = 0.0;
    int64_t n = 0;
    for (int k = 0; k < 4; k++)
        for (int64_t i = 0; i < r.t[inputs[k][0]].dense; i++, n++) {
            double e = slope_error(&r, inputs[k][0], i, inputs[k][1]);
            worst = e > worst ? e : worst;
        }
    printf("  %-48s %lld gradients, worst |difference - gradient| %.3g (bound 2e-3)\n",
           fc->name, (long long)n, worst);
    mt_close(&r);
}

/* ---- Philox: known answers ------------------------------------------------------------------- */

/* The library's generator, for this test only: every other test checks the library's keep mask
   against mod_reference.c's own Philox. */
#include "kernel_params.h"

static void test_philox_known_answers(void **state)
{
    (void)state;
    /* Random123's kat_vectors: philox4x32 10 rounds, counter, key, expected output. */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
         0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
         0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t mine[4], lib[4];
        memcpy(mine, kat[v], sizeof mine);
        memcpy(lib, kat[v], sizeof lib);
        mod_philox(mine, kat[v][4], kat[v][5]);
        fa_philox4x32_10(lib, kat[v][4], kat[v][5]);
        for (int w = 0; w < 4; w++) {
            if (mine[w] != kat[v][6 + w])
                fail_msg("vector %d word %d: the test's Philox gives %08x, want %08x", v, w,
                         mine[w], kat[v][6 + w]);
            if (lib[w] != kat[v][6 + w])
                fail_msg("vector %d word %d: fa_philox4x32_10 gives %08x, want %08x", v, w,
                         lib[w], kat[v][6 + w]);
        }
    }
}

/* ---- main ------------------------------------------------------------------------------------ */

static void add_test(struct CMUnitTest *tests, size_t *n, const char *name,
                     CMUnitTestFunction fn, const void *state)
{
    if (!case_filter || strstr(name, case_filter))
        tests[(*n)++] = (struct CMUnitTest){name, fn, NULL, NULL, (void *)state};
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_modifiers", &mt_backend);
    if (rc >= 0)
        return rc;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--case=", 7) == 0)
            case_filter = argv[i] + 7;
    build_cases();
    size_t cap = 1 + n_cases + N_MASK_CASES + 2 + mt_invalid_count;
    struct CMUnitTest *tests = malloc(sizeof *tests * cap);
    if (!tests)
        return 1;
    size_t n = 0;
    add_test(tests, &n, "philox known answers", test_philox_known_answers, NULL);
    for (size_t i = 0; i < n_cases; i++)
        add_test(tests, &n, cases[i].name, test_case, &cases[i]);
    for (size_t i = 0; i < N_MASK_CASES; i++)
        add_test(tests, &n, mask_cases[i].name, test_dropout_mask, &mask_cases[i]);
    for (size_t i = 0; i < 2; i++)
        add_test(tests, &n, fd_cases[i].name, test_finite_differences, &fd_cases[i]);
    for (size_t i = 0; i < mt_invalid_count; i++)
        add_test(tests, &n, mt_invalid_tests[i].name, mt_invalid_tests[i].test_func, NULL);
    if (n == 0) { /* a misspelt --case must not pass by running nothing */
        fprintf(stderr, "test_modifiers: no test name contains \"%s\"\n", case_filter);
        free(tests);
        return 2;
    }
    char why[600] = "";
    fa_context_options opts = {mt_backend, 0};
    if (fa_context_create(&mt_ctx, &opts, why, sizeof why) != FA_STATUS_OK) {
        printf("FAILED: cannot open the %s context: %s\n", fa_backend_name(mt_backend), why);
        free(tests);
        return 1;
    }
    fa_device_props props;
    if (fa_context_device_props(mt_ctx, &props) == FA_STATUS_OK)
        printf("device: %s (%s)\n", props.name, props.vendor); /* oclgrind_tests.sh reads it */
    char name[64];
    snprintf(name, sizeof name, "modifiers_%s", fa_backend_name(mt_backend));
    int failed = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    fa_context_destroy(mt_ctx);
    free(tests);
    if (mt_declined)
        printf("%d tests NOT SUPPORTED by the %s backend (skipped, not passed)\n", mt_declined,
               fa_backend_name(mt_backend));
    /* Everything but the known answers declined: the suite ran nothing on the backend. */
    int ran = (int)n - mt_declined;
    return harness_exit_code(failed, ran > 1 ? ran : 0, mt_declined);
}
