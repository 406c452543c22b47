/*
 * test_block_sparse.c - block-sparse attention through fa_run on one backend, against the fp64
 * reference of mod_reference.c reading the dense block mask directly (not the lists): random
 * masks of densities 0, 0.1, 0.5 and 1, per-head and broadcast, with causal masks, windows,
 * modifiers, dropout, GQA and odd lengths, f32/f16/bf16, forward and backward, the planner's
 * tiles and tiles across several blocks; full blocks; a density-1 mask bitwise equal to the
 * dense run; a bitwise repeatable backward; rows with no block exactly O = 0, LSE = -inf;
 * bad lists refused with outputs untouched. A backend without the feature must refuse it at
 * plan time naming it. Run: test_block_sparse cpu|opencl|cuda [--case=TEXT] (TEXT: only the
 * reference cases whose name holds it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn_block_mask.h"
#include "harness.h"
#include "mod_reference.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK

static fa_backend the_backend;
static fa_context *ctx;
/* Which ops have block-sparse kernels on the backend: every backend both (CUDA's run here only
 * with a GPU; tests/test_cuda_emu_sparse.c runs its kernels without one); test_support checks
 * each claim. */
static bool sparse_forward, sparse_backward;
static const char *case_filter; /* --case=TEXT: only the reference cases whose name holds it */

enum { T_Q, T_K, T_V, T_O, T_LSE, T_DO, T_DQ, T_DK, T_DV, T_SINKS, T_COUNT };
enum { L_KV_NUM, L_KV_IDX, L_FKV_NUM, L_FKV_IDX, L_Q_NUM, L_Q_IDX, L_FQ_NUM, L_FQ_IDX, L_COUNT };

typedef struct sparse_case {
    const char *name;
    fa_dtype dtype;
    int64_t b, hq, hkv, sq, sk, d;
    fa_mask mask;
    int64_t wl, wr;     /* window bounds; both -2: no window */
    int32_t bq, bk;     /* block sizes */
    int percent;        /* density */
    bool per_head;      /* lists [B, Hq, ...]; else broadcast [1, 1, ...] */
    bool full;          /* blocks wholly inside the masks become full (dense value 2) */
    float softcap, dropout;
    bool sinks;
    int32_t kv_splits;  /* the forward's split-KV chunks; 0: the planner's choice */
    int32_t tile_r, tile_c; /* tile overrides (0: the planner's): tiles across several blocks,
                             * whose unlisted elements the kernels mask one by one */
} sparse_case;

/* One run's host images, buffers and lists. */
typedef struct run {
    const sparse_case *c;
    fa_problem p;
    int64_t n[T_COUNT];
    void *host[T_COUNT];
    fa_buffer *buf[T_COUNT];
    uint8_t *dense;
    int32_t *lists[L_COUNT];
    int64_t list_n[L_COUNT];
    fa_buffer *lbuf[L_COUNT];
    fa_buffer *d_sinks; /* the backward's sinks gradient, with sinks (checked by test_modifiers) */
} run;

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void fill(run *r, int t, uint32_t *seed, double lo, double hi)
{
    size_t e = fa_dtype_size(t == T_LSE || t == T_SINKS ? FA_DTYPE_F32 : r->p.dtype);
    r->host[t] = malloc((size_t)r->n[t] * e + 1);
    assert_non_null(r->host[t]);
    fa_dtype dt = t == T_LSE || t == T_SINKS ? FA_DTYPE_F32 : r->p.dtype;
    for (int64_t i = 0; i < r->n[t]; i++) {
        double u = lo + (hi - lo) * (lcg(seed) % 1000000) / 1e6;
        oracle_store(dt, r->host[t], i, t >= T_O && t != T_DO && t != T_SINKS ? NAN : u);
    }
}

/* Full blocks: those the causal mask and the window keep whole (read from mod_allowed). */
static bool wholly_visible(const fa_problem *p, int64_t qb, int64_t kb)
{
    for (int64_t i = qb * p->sparse_block_q; i < (qb + 1) * p->sparse_block_q && i < p->seqlen_q;
         i++)
        for (int64_t j = kb * p->sparse_block_k;
             j < (kb + 1) * p->sparse_block_k && j < p->seqlen_k; j++)
            if (!mod_allowed(p, i, j))
                return false;
    return true;
}

static void make_lists(run *r, uint32_t *seed)
{
    const fa_block_mask_shape s = {r->p.sparse_batch, r->p.sparse_heads, r->p.seqlen_q,
                                   r->p.seqlen_k, r->p.sparse_block_q, r->p.sparse_block_k};
    int64_t nq = fa_block_mask_q_blocks(&s), nk = fa_block_mask_k_blocks(&s);
    int64_t bhs = s.batch * s.heads, cells = bhs * nq * nk;
    r->dense = malloc((size_t)cells + 1);
    for (int64_t x = 0; x < cells; x++) {
        bool on = (int)(lcg(seed) % 100) < r->c->percent;
        bool full = on && r->c->full && (lcg(seed) & 1) && wholly_visible(&r->p, x / nk % nq,
                                                                          x % nk);
        r->dense[x] = full ? 2 : on ? 1 : 0;
    }
    const int64_t rows[L_COUNT] = {nq, nq, nq, nq, nk, nk, nk, nk};
    const int64_t cols[L_COUNT] = {1, nk, 1, nk, 1, nq, 1, nq};
    for (int l = 0; l < L_COUNT; l++) {
        r->list_n[l] = bhs * rows[l] * cols[l];
        r->lists[l] = malloc((size_t)r->list_n[l] * 4 + 4);
    }
    fa_block_lists kv = {r->lists[0], r->lists[1], r->c->full ? r->lists[2] : NULL,
                         r->c->full ? r->lists[3] : NULL};
    fa_block_lists q = {r->lists[4], r->lists[5], r->c->full ? r->lists[6] : NULL,
                        r->c->full ? r->lists[7] : NULL};
    char why[256] = "";
    assert_int_equal(fa_block_mask_lists(&s, r->dense, &kv, &q, why, sizeof why), OK);
}

static fa_buffer *upload(const void *host, size_t bytes)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, bytes > 0 ? bytes : 4, &b), OK);
    if (bytes > 0)
        assert_int_equal(fa_buffer_write(b, 0, host, bytes), OK);
    return b;
}

static void run_open(run *r, const sparse_case *c, uint32_t seed)
{
    memset(r, 0, sizeof *r);
    r->c = c;
    assert_int_equal(fa_problem_init(&r->p, c->dtype, FA_LAYOUT_BHSD, c->b, c->hq, c->hkv, c->sq,
                                     c->sk, c->d),
                     OK);
    fa_problem *p = &r->p;
    p->mask = c->mask;
    p->window = c->wl != -2;
    p->window_left = c->wl;
    p->window_right = c->wr;
    p->softcap = c->softcap;
    p->dropout_p = c->dropout;
    p->dropout_seed = 77;
    p->sinks = c->sinks;
    p->block_sparse = 1;
    p->sparse_block_q = c->bq;
    p->sparse_block_k = c->bk;
    p->sparse_batch = c->per_head ? (int32_t)c->b : 1;
    p->sparse_heads = c->per_head ? (int32_t)c->hq : 1;
    p->sparse_full = c->full;
    p->kv_splits = c->kv_splits;
    p->block_r = c->tile_r;
    p->block_c = c->tile_c;
    const int64_t qn = c->b * c->hq * c->sq * c->d, kn = c->b * c->hkv * c->sk * c->d;
    const int64_t n[T_COUNT] = {qn, kn, kn, qn, c->b * c->hq * c->sq, qn, qn, kn, kn, c->hq};
    memcpy(r->n, n, sizeof n);
    for (int t = 0; t < T_COUNT; t++) {
        fill(r, t, &seed, t == T_SINKS ? -1.0 : -1.0, 1.0);
        size_t e = fa_dtype_size(t == T_LSE || t == T_SINKS ? FA_DTYPE_F32 : p->dtype);
        r->buf[t] = upload(r->host[t], (size_t)r->n[t] * e);
    }
    make_lists(r, &seed);
    if (c->sinks)
        assert_int_equal(fa_buffer_create(ctx, (size_t)c->hq * 4, &r->d_sinks), OK);
    for (int l = 0; l < L_COUNT; l++)
        r->lbuf[l] = upload(r->lists[l], (size_t)r->list_n[l] * 4);
}

static void run_close(run *r)
{
    fa_buffer_destroy(r->d_sinks);
    for (int t = 0; t < T_COUNT; t++) {
        fa_buffer_destroy(r->buf[t]);
        free(r->host[t]);
    }
    for (int l = 0; l < L_COUNT; l++) {
        fa_buffer_destroy(r->lbuf[l]);
        free(r->lists[l]);
    }
    free(r->dense);
}

static fa_tensors tensors_of(const run *r, bool backward)
{
    fa_tensors t = {.q = r->buf[T_Q], .k = r->buf[T_K], .v = r->buf[T_V], .o = r->buf[T_O],
                    .lse = r->buf[T_LSE], .kv_num_blocks = r->lbuf[L_KV_NUM],
                    .kv_indices = r->lbuf[L_KV_IDX]};
    if (r->p.sinks)
        t.sinks = r->buf[T_SINKS];
    if (r->p.sparse_full) {
        t.full_kv_num_blocks = r->lbuf[L_FKV_NUM];
        t.full_kv_indices = r->lbuf[L_FKV_IDX];
    }
    if (backward) {
        t.d_o = r->buf[T_DO];
        t.dq = r->buf[T_DQ];
        t.dk = r->buf[T_DK];
        t.dv = r->buf[T_DV];
        t.d_sinks = r->d_sinks;
        t.q_num_blocks = r->lbuf[L_Q_NUM];
        t.q_indices = r->lbuf[L_Q_IDX];
        if (r->p.sparse_full) {
            t.full_q_num_blocks = r->lbuf[L_FQ_NUM];
            t.full_q_indices = r->lbuf[L_FQ_IDX];
        }
    }
    return t;
}

static void read_back(run *r, int t)
{
    size_t e = fa_dtype_size(t == T_LSE || t == T_SINKS ? FA_DTYPE_F32 : r->p.dtype);
    assert_int_equal(fa_buffer_read(r->buf[t], 0, r->host[t], (size_t)r->n[t] * e), OK);
}

/* Forward then, where the backend has it, backward through fa_run; the outputs read back. */
static void run_both(run *r)
{
    fa_plan *fwd = NULL, *bwd = NULL;
    assert_int_equal(fa_plan_create(ctx, &r->p, &fwd), OK);
    fa_tensors t = tensors_of(r, false);
    assert_int_equal(fa_run(ctx, fwd, &t), OK);
    if (sparse_backward) {
        assert_int_equal(fa_plan_create_backward(ctx, &r->p, &bwd), OK);
        t = tensors_of(r, true);
        assert_int_equal(fa_run(ctx, bwd, &t), OK);
    }
    for (int x = T_O; x <= (sparse_backward ? T_DV : T_LSE); x++)
        if (x != T_DO)
            read_back(r, x);
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
}

static double *widen(const run *r, int t)
{
    fa_dtype dt = t == T_LSE || t == T_SINKS ? FA_DTYPE_F32 : r->p.dtype;
    double *w = malloc(sizeof(double) * (size_t)(r->n[t] + 1));
    for (int64_t i = 0; i < r->n[t]; i++)
        w[i] = oracle_load(dt, r->host[t], i);
    return w;
}

/* max |got - want| / (atol + rtol |want|) over a tensor; <= 1 passes. Empty rows (or unseen
 * keys) must be exactly 0 (LSE -inf, or with sinks the sink's value, compared). */
static double err_ratio(const run *r, int t, const double *want, const unsigned char *empty,
                        int64_t per)
{
    double tol = r->p.dtype == FA_DTYPE_F32 ? 2e-5 : r->p.dtype == FA_DTYPE_F16 ? 3e-3 : 2e-2;
    double worst = 0.0;
    fa_dtype dt = t == T_LSE ? FA_DTYPE_F32 : r->p.dtype;
    for (int64_t i = 0; i < r->n[t]; i++) {
        double got = oracle_load(dt, r->host[t], i);
        if (empty && empty[i / per] && !(t == T_LSE && r->p.sinks)) { /* LSE: the sink's */
            bool exact = t == T_LSE ? got == -INFINITY : got == 0.0;
            if (!exact)
                fail_msg("%s: tensor %d element %lld is %g where no block is computed",
                         r->c->name, t, (long long)i, got);
            continue;
        }
        double e = fabs(got - want[i]) / (tol + tol * fabs(want[i]));
        if (!(e <= worst))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static void expect_reference(run *r)
{
    double *in[T_COUNT] = {NULL};
    const int inputs[] = {T_Q, T_K, T_V, T_DO, T_SINKS};
    for (size_t i = 0; i < 5; i++)
        in[inputs[i]] = widen(r, inputs[i]);
    mod_ref f = {.q = in[T_Q], .k = in[T_K], .v = in[T_V], .dout = in[T_DO],
                 .sinks = r->p.sinks ? in[T_SINKS] : NULL, .block_mask = r->dense};
    mod_ref_compute(&r->p, &f);
    const int64_t d = r->p.head_dim;
    const bool grads = sparse_backward; /* the gradients: 0 where the backend has no backward */
    double w[5] = {err_ratio(r, T_O, f.o, f.row_empty, d),
                   err_ratio(r, T_LSE, f.lse, f.row_empty, 1),
                   grads ? err_ratio(r, T_DQ, f.dq, f.row_empty, d) : 0.0,
                   grads ? err_ratio(r, T_DK, f.dk, f.key_unseen, d) : 0.0,
                   grads ? err_ratio(r, T_DV, f.dv, f.key_unseen, d) : 0.0};
    printf("  %-44s err/tol o %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", r->c->name, w[0], w[1],
           w[2], w[3], w[4]);
    for (int i = 0; i < 5; i++)
        if (!(w[i] <= 1.0))
            fail_msg("%s: output %d off the reference by %.3f x its tolerance", r->c->name, i,
                     w[i]);
    mod_ref_free(&f);
    for (int t = 0; t < T_COUNT; t++)
        free(in[t]);
}

#define NOWIN -2, -2
static const sparse_case cases[] = {
    {"f32 256 d64 blocks 32x32 half", FA_DTYPE_F32, 1, 2, 2, 256, 256, 64, FA_MASK_NONE, NOWIN,
     32, 32, 50, false, false, 0, 0, false, 0, 0, 0},
    {"f32 odd 113x203 d40 causal 16x64 per head", FA_DTYPE_F32, 2, 4, 2, 113, 203, 40,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 16, 64, 50, true, false, 0, 0, false, 0, 0, 0},
    {"f32 300 window 64x16 tenth", FA_DTYPE_F32, 1, 3, 1, 300, 300, 32, FA_MASK_NONE, 70, 20, 64,
     16, 10, false, false, 0, 0, false, 0, 0, 0},
    {"f32 empty mask", FA_DTYPE_F32, 1, 2, 1, 100, 130, 16, FA_MASK_NONE, NOWIN, 32, 32, 0, false,
     false, 0, 0, false, 0, 0, 0},
    {"f32 full mask causal top-left full blocks", FA_DTYPE_F32, 1, 2, 2, 160, 160, 32,
     FA_MASK_CAUSAL_TOP_LEFT, NOWIN, 32, 32, 100, true, true, 0, 0, false, 0, 0, 0},
    {"f16 255x127 modifiers dropout sinks full", FA_DTYPE_F16, 2, 2, 1, 255, 127, 64,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, 90, -1, 16, 16, 50, true, true, 30.0f, 0.2f, true, 0, 0, 0},
    {"bf16 200 d128 GQA 128x32", FA_DTYPE_BF16, 1, 4, 1, 200, 200, 128, FA_MASK_NONE, NOWIN, 128,
     32, 50, false, false, 0, 0, false, 0, 0, 0},
    {"f32 small 40x70 d16 causal 16x16 per head full", FA_DTYPE_F32, 1, 2, 1, 40, 70, 16,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 16, 16, 50, true, true, 0, 0, false, 0, 0, 0},
    {"f32 1 x 700 decode 16x32 split-KV 3", FA_DTYPE_F32, 2, 4, 2, 1, 700, 64, FA_MASK_NONE,
     NOWIN, 16, 32, 30, true, false, 0, 0, false, 3, 0, 0},
    {"f16 97x500 causal split-KV 4 full", FA_DTYPE_F16, 1, 2, 1, 97, 500, 32,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 32, 64, 50, false, true, 0, 0, false, 4, 0, 0},
    {"f32 150x190 causal 16x32 tiles 64x32 per head full", FA_DTYPE_F32, 2, 2, 1, 150, 190, 32,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 16, 32, 50, true, true, 0, 0, false, 0, 64, 32},
    {"f16 130x77 window softcap dropout 16x16 tiles 32x64", FA_DTYPE_F16, 1, 4, 2, 130, 77, 48,
     FA_MASK_NONE, 40, 10, 16, 16, 30, true, false, 25.0f, 0.1f, false, 0, 32, 64},
    {"bf16 90x300 GQA tenth 32x16 tiles 64x64", FA_DTYPE_BF16, 1, 4, 1, 90, 300, 64,
     FA_MASK_CAUSAL_TOP_LEFT, NOWIN, 32, 16, 10, false, false, 0, 0, false, 0, 64, 64},
};

static void test_against_reference(void **state)
{
    (void)state;
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (case_filter && !strstr(cases[i].name, case_filter))
            continue;
        ran++;
        run r;
        run_open(&r, &cases[i], 1234u + (uint32_t)i);
        run_both(&r);
        expect_reference(&r);
        run_close(&r);
    }
    if (ran == 0)
        fail_msg("no case's name holds \"%s\"", case_filter);
}

/* The dense problem planned at the block-sparse plan's tiles and splits (the kernels' planners
 * keep a key tile within a key block, the cpu's need not, nor OpenCL's register-blocked
 * forward, whose key tiles span several key blocks here, so its whole-tile path is what runs):
 * the same keys in the same order. backward: the backward plan's tiles (its own rules). */
static void same_tiles(const fa_problem *sparse, fa_problem *dense, bool backward)
{
    fa_plan *plan = NULL;
    if (backward) {
        assert_int_equal(fa_plan_create_backward(ctx, sparse, &plan), OK);
        dense->block_r = fa_plan_block_r(plan);
        dense->block_c = fa_plan_block_c(plan);
        fa_plan_destroy(plan);
        return;
    }
    assert_int_equal(fa_plan_create(ctx, sparse, &plan), OK);
    if (the_backend != FA_BACKEND_CPU) {
        if (strstr(fa_plan_explain(plan), "REG_BLOCKED"))
            assert_true(fa_plan_block_c(plan) > sparse->sparse_block_k);
        else
            assert_true(fa_plan_block_c(plan) <= sparse->sparse_block_k);
        assert_non_null(strstr(fa_plan_explain(plan), "block-sparse"));
    }
    dense->block_r = fa_plan_block_r(plan);
    dense->block_c = fa_plan_block_c(plan);
    dense->kv_splits = fa_plan_kv_splits(plan);
    fa_plan_destroy(plan);
}

/* A mask of every block gives bitwise the dense run at the same tiles. */
static void test_density_one_is_dense(void **state)
{
    (void)state;
    const sparse_case c = {"f32 all blocks", FA_DTYPE_F32, 1, 2, 1, 150, 170, 32,
                           FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 32, 16, 100, false, false, 0,
                           0, false, 0, 0, 0};
    run s, d;
    run_open(&s, &c, 99);
    run_open(&d, &c, 99);
    d.p.block_sparse = 0;
    same_tiles(&s.p, &d.p, false);
    fa_plan *fwd = NULL, *bwd = NULL;
    run_both(&s);
    assert_int_equal(fa_plan_create(ctx, &d.p, &fwd), OK);
    fa_tensors t = {.q = d.buf[T_Q], .k = d.buf[T_K], .v = d.buf[T_V], .o = d.buf[T_O],
                    .lse = d.buf[T_LSE]};
    assert_int_equal(fa_run(ctx, fwd, &t), OK);
    t.d_o = d.buf[T_DO];
    t.dq = d.buf[T_DQ];
    t.dk = d.buf[T_DK];
    t.dv = d.buf[T_DV];
    if (sparse_backward) {
        same_tiles(&s.p, &d.p, true); /* the backward's own tiles */
        assert_int_equal(fa_plan_create_backward(ctx, &d.p, &bwd), OK);
        assert_int_equal(fa_run(ctx, bwd, &t), OK);
    }
    for (int x = T_O; x <= (sparse_backward ? T_DV : T_LSE); x++) {
        if (x == T_DO)
            continue;
        read_back(&d, x);
        if (memcmp(s.host[x], d.host[x], (size_t)s.n[x] * (x == T_LSE ? 4 : 4)) != 0)
            fail_msg("density 1: tensor %d differs from the dense run", x);
    }
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    run_close(&s);
    run_close(&d);
}

/* The backward twice on one run: every gradient bitwise the same (no atomics, a fixed order). */
static void test_backward_repeatable(void **state)
{
    (void)state;
    if (!sparse_backward)
        skip();
    const sparse_case c = {"f32 repeat", FA_DTYPE_F32, 2, 4, 2, 133, 170, 32,
                           FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 16, 32, 40, true, true, 0, 0.1f,
                           false, 0, 64, 32};
    run r;
    run_open(&r, &c, 4321);
    run_both(&r);
    void *first[T_COUNT] = {NULL};
    for (int x = T_DQ; x <= T_DV; x++) {
        size_t bytes = (size_t)r.n[x] * fa_dtype_size(r.p.dtype);
        first[x] = malloc(bytes + 1);
        memcpy(first[x], r.host[x], bytes);
        memset(r.host[x], 0, bytes);
    }
    run_both(&r);
    for (int x = T_DQ; x <= T_DV; x++) {
        if (memcmp(first[x], r.host[x], (size_t)r.n[x] * fa_dtype_size(r.p.dtype)) != 0)
            fail_msg("tensor %d differs between two backward runs", x);
        free(first[x]);
    }
    run_close(&r);
}

/* A bad list, a full block the causal mask cuts, a list for a problem without blocks: each
 * refused with its status, the outputs as they were. */
static void test_refused(void **state)
{
    (void)state;
    const sparse_case c = {"f32 refusals", FA_DTYPE_F32, 1, 1, 1, 64, 64, 16,
                           FA_MASK_CAUSAL_BOTTOM_RIGHT, NOWIN, 16, 16, 100, false, true, 0, 0,
                           false, 0, 0, 0};
    run r;
    run_open(&r, &c, 5);
    fa_plan *fwd = NULL;
    assert_int_equal(fa_plan_create(ctx, &r.p, &fwd), OK);
    /* kv_indices[0][0] past the key blocks. */
    int32_t bad = 9, keep = r.lists[L_KV_IDX][0];
    assert_int_equal(fa_buffer_write(r.lbuf[L_KV_IDX], 0, &bad, 4), OK);
    fa_tensors t = tensors_of(&r, false);
    assert_int_equal(fa_run(ctx, fwd, &t), FA_STATUS_INVALID_BLOCK_MASK);
    assert_non_null(strstr(fa_context_last_error(ctx), "outside"));
    assert_int_equal(fa_buffer_write(r.lbuf[L_KV_IDX], 0, &keep, 4), OK);
    /* Query block 0 lists key block 3 as full: rows 0..15 see keys 0..i only. */
    int32_t one = 1, none = 0, three = 3;
    assert_int_equal(fa_buffer_write(r.lbuf[L_KV_NUM], 0, &none, 4), OK);
    assert_int_equal(fa_buffer_write(r.lbuf[L_FKV_NUM], 0, &one, 4), OK);
    assert_int_equal(fa_buffer_write(r.lbuf[L_FKV_IDX], 0, &three, 4), OK);
    t = tensors_of(&r, false);
    assert_int_equal(fa_run(ctx, fwd, &t), FA_STATUS_INVALID_BLOCK_MASK);
    assert_non_null(strstr(fa_context_last_error(ctx), "partly masked"));
    read_back(&r, T_O);
    for (int64_t i = 0; i < r.n[T_O]; i++)
        assert_true(isnan(((float *)r.host[T_O])[i])); /* untouched */
    /* The backward without its transposed lists; lists for a plain problem. */
    fa_plan *bwd = NULL;
    if (sparse_backward) {
        assert_int_equal(fa_plan_create_backward(ctx, &r.p, &bwd), OK);
        t = tensors_of(&r, true);
        t.q_indices = NULL;
        assert_int_equal(fa_run(ctx, bwd, &t), FA_STATUS_NULL_POINTER);
        assert_non_null(strstr(fa_context_last_error(ctx), "q_indices"));
    }
    fa_problem plain = r.p;
    plain.block_sparse = 0;
    fa_plan *dense = NULL;
    assert_int_equal(fa_plan_create(ctx, &plain, &dense), OK);
    t = tensors_of(&r, false);
    assert_int_equal(fa_run(ctx, dense, &t), FA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fa_context_last_error(ctx), "kv_num_blocks"));
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    fa_plan_destroy(dense);
    run_close(&r);
}

/* Plan-time refusals: block sizes, the lists' dimensions, full lists with varlen. */
static void test_plan_refusals(void **state)
{
    (void)state;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 2, 4, 2, 64, 64, 32), OK);
    p.block_sparse = 1;
    p.sparse_block_q = p.sparse_block_k = 32;
    p.sparse_batch = p.sparse_heads = 1;
    fa_plan *plan = NULL;
    const struct {
        int32_t bq, batch, heads, value;
        fa_status want;
    } bad[] = {{24, 1, 1, 1, FA_STATUS_INVALID_BLOCK_SIZE}, {512, 1, 1, 1,
                                                             FA_STATUS_INVALID_BLOCK_SIZE},
               {32, 3, 1, 1, FA_STATUS_INVALID_SHAPE}, {32, 1, 2, 1, FA_STATUS_INVALID_SHAPE},
               {32, 1, 1, 2, FA_STATUS_INVALID_ARGUMENT}};
    for (size_t i = 0; i < 5; i++) {
        fa_problem q = p;
        q.sparse_block_q = bad[i].bq;
        q.sparse_batch = bad[i].batch;
        q.sparse_heads = bad[i].heads;
        q.block_sparse = bad[i].value;
        assert_int_equal(fa_plan_create(ctx, &q, &plan), bad[i].want);
        assert_null(plan);
    }
}

/* An op the backend has block-sparse kernels for plans; one it has not is refused at plan time,
 * naming the feature. */
static void expect_support(fa_status st, fa_plan *plan, bool supported)
{
    if (supported) {
        assert_int_equal(st, OK);
        fa_plan_destroy(plan);
        return;
    }
    assert_int_equal(st, FA_STATUS_UNSUPPORTED);
    assert_null(plan);
    assert_non_null(strstr(fa_context_last_error(ctx), "block_sparse"));
}

static void test_support(void **state)
{
    (void)state;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, 64, 64, 32), OK);
    p.block_sparse = 1;
    p.sparse_block_q = p.sparse_block_k = 32;
    p.sparse_batch = p.sparse_heads = 1;
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(ctx, &p, &plan); /* before reading plan */
    expect_support(st, plan, sparse_forward);
    plan = NULL;
    st = fa_plan_create_backward(ctx, &p, &plan);
    expect_support(st, plan, sparse_backward);
}

static int open_context(void **state)
{
    (void)state;
    char why[600] = "";
    fa_context_options opts = {the_backend, 0};
    if (fa_context_create(&ctx, &opts, why, sizeof why) != OK)
        return -1;
    fa_device_props props;
    if (fa_context_device_props(ctx, &props) != OK)
        return -1;
    printf("  device: %s (%s)\n", props.name, props.vendor); /* oclgrind_tests.sh reads it */
    return 0;
}

static int close_context(void **state)
{
    (void)state;
    fa_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_block_sparse", &the_backend);
    if (rc >= 0)
        return rc;
    const struct CMUnitTest runs[] = {
        cmocka_unit_test(test_against_reference), cmocka_unit_test(test_density_one_is_dense),
        cmocka_unit_test(test_backward_repeatable),
        cmocka_unit_test(test_refused),           cmocka_unit_test(test_plan_refusals),
        cmocka_unit_test(test_support),
    };
    const struct CMUnitTest refusal[] = {cmocka_unit_test(test_support)};
    const struct CMUnitTest filtered[] = {cmocka_unit_test(test_against_reference)};
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--case=", 7) == 0)
            case_filter = argv[i] + 7;
    sparse_forward = true;
    sparse_backward = true;
    /* The backends without the feature run its refusal: the rest needs a plan. */
    if (!sparse_forward)
        return cmocka_run_group_tests_name(fa_backend_name(the_backend), refusal, open_context,
                                           close_context);
    if (case_filter)
        return cmocka_run_group_tests_name(fa_backend_name(the_backend), filtered, open_context,
                                           close_context);
    return cmocka_run_group_tests_name(fa_backend_name(the_backend), runs, open_context,
                                       close_context);
}
