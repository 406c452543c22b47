/*
 * test_decode.c - sequences and decoding on one backend, against the fp64 oracle run on each
 * sequence alone:
 *
 *   test_decode cpu|opencl|cuda [--case=SUBSTRING]
 *
 * - Split-KV forwards (kv_splits 1, 3, 64 and the planner's choice) against the oracle and
 *   against each other; repeated runs bitwise equal.
 * - seqlens_k (lengths 0, 1 and not a multiple of anything), paged K/V (page_size 1, 3, 16; a
 *   shuffled pool; pages shared between sequences), varlen (sequences of 0 and 1 rows), with
 *   every mask, GQA, f32 / f16 / bf16, split and not. Every pool slot, padding key and unused
 *   row holds NaN, so reading one shows; every O element past the packed rows keeps its NaN.
 * - The public merge of partial forwards over chunks of the keys (one chunk empty, rows with no
 *   key) against one unsplit forward.
 * - The varlen backward against the fp64 reference gradients of each sequence.
 * - Invalid block tables and lengths: their own status, nothing written (test_decode_invalid.c).
 * Tolerance (test_modifiers' rule): rel * max|ref| + 1e-6 per tensor, rel f32 1e-5, f16 2e-3,
 * bf16 1.6e-2; LSE within 1e-5 + 1e-5 |LSE| (f32) or rel (1 + |LSE|); -inf exactly where the
 * oracle has no key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bwd_reference.h"
#include "harness.h"
#include "oracle.h"
#include "test_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fa_context *dc_ctx;
fa_backend dc_backend = FA_BACKEND_CPU;
static const char *case_filter; /* --case=SUBSTRING */

/* ---- device buffers ---------------------------------------------------------------------- */

fa_buffer *dc_buffer(const void *host, size_t bytes)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(dc_ctx, bytes > 0 ? bytes : 4, &b), FA_STATUS_OK);
    if (host && bytes > 0)
        assert_int_equal(fa_buffer_write(b, 0, host, bytes), FA_STATUS_OK);
    return b;
}

void dc_read(const fa_buffer *b, void *host, size_t bytes)
{
    if (bytes > 0)
        assert_int_equal(fa_buffer_read(b, 0, host, bytes), FA_STATUS_OK);
}

/* A buffer of n dtype elements, all NaN. */
void *dc_nan_host(fa_dtype dt, int64_t n)
{
    void *h = malloc((size_t)(n > 0 ? n : 1) * fa_dtype_size(dt));
    assert_non_null(h);
    for (int64_t i = 0; i < n; i++)
        oracle_store(dt, h, i, NAN);
    return h;
}

double dc_rel(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 ? 1e-5 : dt == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* ---- the logical sequences and their layouts ----------------------------------------------- */

/*
 * The logical data of a case: per sequence b, Q_b [Hq, lq_b, d], K_b and V_b [Hkv, lk_b, d],
 * rounded to the dtype, then placed in the library's layout for the case's mode.
 */
typedef struct seq_data {
    const dc_case *c;
    fa_problem p;
    double *q[DC_MAX_BATCH], *k[DC_MAX_BATCH], *v[DC_MAX_BATCH];
    int32_t cu_q[DC_MAX_BATCH + 1], cu_k[DC_MAX_BATCH + 1], lens[DC_MAX_BATCH];
    int32_t *table;
    int64_t q_elems, kv_elems; /* elements of the Q / O and K / V buffers */
} seq_data;

static int64_t max_of(const int64_t *v, int64_t n)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* Element offset of (b, h, row, 0) of Q / O in the case's layout (varlen: packed). */
static int64_t q_at(const seq_data *s, int64_t b, int64_t h, int64_t i)
{
    const fa_tensor_layout *t = &s->p.q;
    if (s->c->mode == DC_VARLEN)
        return (s->cu_q[b] + i) * t->stride_seq + h * t->stride_head;
    return b * t->stride_batch + h * t->stride_head + i * t->stride_seq;
}

/* Element offset of key j of (b, h_kv) in K (and V: same layout). */
static int64_t k_at(const seq_data *s, int64_t b, int64_t h, int64_t j)
{
    const fa_tensor_layout *t = &s->p.k;
    const fa_problem *p = &s->p;
    if (s->c->mode == DC_VARLEN)
        return (s->cu_k[b] + j) * t->stride_seq + h * t->stride_head;
    if (s->c->mode == DC_PAGED)
        return s->table[b * p->pages_per_seq + j / p->page_size] * t->stride_batch +
               (j % p->page_size) * t->stride_seq + h * t->stride_head;
    return b * t->stride_batch + h * t->stride_head + j * t->stride_seq;
}

/* A shuffled pool: sequence b's pages are distinct, except that with shared pages sequence 1
 * starts with sequence 0's first page (and its keys there equal sequence 0's). */
static void build_table(seq_data *s, harness_rng *rng)
{
    fa_problem *p = &s->p;
    int64_t per = p->pages_per_seq, n = p->batch * per;
    s->table = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    int32_t *perm = malloc((size_t)(p->num_pages > 0 ? p->num_pages : 1) * sizeof(int32_t));
    assert_true(s->table && perm);
    for (int64_t i = 0; i < p->num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = p->num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)harness_rng_uniform(rng, 0, (double)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++)
        s->table[i] = perm[i % p->num_pages];
    if (s->c->shared_pages && p->batch > 1)
        s->table[per] = s->table[0];
    free(perm);
}

/* Rows of data, rounded to the dtype; sequence 1 repeats sequence 0's first page of keys when
 * they share it. */
static void fill_logical(seq_data *s, harness_rng *rng)
{
    const dc_case *c = s->c;
    const fa_problem *p = &s->p;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t nq = p->heads_q * c->lq[b] * p->head_dim, nk = p->heads_kv * c->lk[b] * p->head_dim;
        s->q[b] = malloc((size_t)(nq > 0 ? nq : 1) * sizeof(double));
        s->k[b] = malloc((size_t)(nk > 0 ? nk : 1) * sizeof(double));
        s->v[b] = malloc((size_t)(nk > 0 ? nk : 1) * sizeof(double));
        assert_true(s->q[b] && s->k[b] && s->v[b]);
        for (int64_t i = 0; i < nq; i++)
            s->q[b][i] = oracle_round(p->dtype, harness_rng_uniform(rng, -1.0, 1.0));
        for (int64_t i = 0; i < nk; i++) {
            s->k[b][i] = oracle_round(p->dtype, harness_rng_uniform(rng, -1.0, 1.0));
            s->v[b][i] = oracle_round(p->dtype, harness_rng_uniform(rng, -1.0, 1.0));
        }
    }
    if (c->shared_pages && p->batch > 1) {
        int64_t shared = p->page_size < c->lk[1] ? p->page_size : c->lk[1];
        shared = shared < c->lk[0] ? shared : c->lk[0];
        for (int64_t h = 0; h < p->heads_kv; h++) {
            for (int64_t j = 0; j < shared; j++) {
                for (int64_t x = 0; x < p->head_dim; x++) {
                    int64_t i1 = (h * c->lk[1] + j) * p->head_dim + x;
                    int64_t i0 = (h * c->lk[0] + j) * p->head_dim + x;
                    s->k[1][i1] = s->k[0][i0];
                    s->v[1][i1] = s->v[0][i0];
                }
            }
        }
    }
}

/* The case's problem and its sequence tables. */
static void build_problem(seq_data *s, harness_rng *rng)
{
    const dc_case *c = s->c;
    fa_problem *p = &s->p;
    int64_t sq = max_of(c->lq, c->batch), sk = c->seqlen_k > 0 ? c->seqlen_k : max_of(c->lk, c->batch);
    fa_layout layout = c->mode == DC_VARLEN ? FA_LAYOUT_BSHD : FA_LAYOUT_BHSD;
    assert_int_equal(fa_problem_init(p, c->dtype, layout, c->batch, c->hq, c->hkv, sq, sk, c->d),
                     FA_STATUS_OK);
    p->mask = c->mask;
    p->block_c = c->block_c;
    p->kv_splits = c->kv_splits;
    p->sinks = 0;
    s->cu_q[0] = s->cu_k[0] = c->first_token;
    for (int64_t b = 0; b < c->batch; b++) {
        s->cu_q[b + 1] = s->cu_q[b] + (int32_t)c->lq[b];
        s->cu_k[b + 1] = s->cu_k[b] + (int32_t)c->lk[b];
        s->lens[b] = (int32_t)c->lk[b];
    }
    if (c->mode == DC_VARLEN)
        p->varlen = 1;
    else if (c->mode != DC_DENSE)
        p->seqlens_k = 1;
    if (c->mode == DC_PAGED) {
        int64_t per = (sk + c->page_size - 1) / c->page_size;
        /* a pool with spare pages, which stay NaN */
        assert_int_equal(fa_problem_set_paged(p, c->page_size, c->batch * per + 3, per),
                         FA_STATUS_OK);
        build_table(s, rng);
    }
    /* The buffers' elements: the library's extents (varlen: the packed rows, the first_token
     * rows before the first sequence included; paged: K and V are the pools). */
    uint64_t qb = 0, kb = 0;
    const int64_t elem = (int64_t)fa_dtype_size(p->dtype);
    assert_int_equal(fa_problem_tensor_bytes(p, FA_TENSOR_Q, s->cu_q[c->batch], s->cu_k[c->batch],
                                             &qb),
                     FA_STATUS_OK);
    assert_int_equal(fa_problem_tensor_bytes(p, FA_TENSOR_K, s->cu_q[c->batch], s->cu_k[c->batch],
                                             &kb),
                     FA_STATUS_OK);
    s->q_elems = (int64_t)qb / elem;
    s->kv_elems = (int64_t)kb / elem;
}

void dc_seq_build(const dc_case *c, seq_data **out)
{
    seq_data *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    harness_rng rng;
    harness_rng_seed(&rng, c->name);
    build_problem(s, &rng);
    fill_logical(s, &rng);
    *out = s;
}

void dc_seq_free(seq_data *s)
{
    for (int64_t b = 0; b < s->p.batch; b++) {
        free(s->q[b]);
        free(s->k[b]);
        free(s->v[b]);
    }
    free(s->table);
    free(s);
}

/* Q, K, V in the library's layout (NaN wherever no logical element goes). */
static void place_inputs(const seq_data *s, void *q, void *k, void *v)
{
    const fa_problem *p = &s->p;
    const int64_t d = p->head_dim;
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < s->c->lq[b]; i++)
                for (int64_t x = 0; x < d; x++)
                    oracle_store(p->dtype, q, q_at(s, b, h, i) + x,
                                 s->q[b][(h * s->c->lq[b] + i) * d + x]);
        for (int64_t h = 0; h < p->heads_kv; h++)
            for (int64_t j = 0; j < s->c->lk[b]; j++)
                for (int64_t x = 0; x < d; x++) {
                    int64_t at = k_at(s, b, h, j) + x, li = (h * s->c->lk[b] + j) * d + x;
                    oracle_store(p->dtype, k, at, s->k[b][li]);
                    oracle_store(p->dtype, v, at, s->v[b][li]);
                }
    }
}

/* ---- a run and its check -------------------------------------------------------------------- */

/* The oracle for sequence b alone: dense batch-1 problem, O [Hq, lq, d], LSE [Hq, lq]. */
static void oracle_of(const seq_data *s, int64_t b, double *o, double *lse)
{
    fa_problem one;
    const fa_problem *p = &s->p;
    assert_int_equal(fa_problem_init(&one, p->dtype, FA_LAYOUT_BHSD, 1, p->heads_q, p->heads_kv,
                                     s->c->lq[b], s->c->lk[b], p->head_dim),
                     FA_STATUS_OK);
    one.mask = p->mask;
    oracle_attention_f64(&one, s->q[b], s->k[b], s->v[b], o, lse);
}

static int64_t lse_at(const seq_data *s, int64_t b, int64_t h, int64_t i)
{
    if (s->c->mode == DC_VARLEN)
        return h * s->cu_q[s->p.batch] + s->cu_q[b] + i;
    return (b * s->p.heads_q + h) * s->p.seqlen_q + i;
}

/* O and LSE of every sequence against the oracle. */
static void check_outputs(const seq_data *s, const void *o, const float *lse)
{
    const fa_problem *p = &s->p;
    const int64_t d = p->head_dim;
    const double rel = dc_rel(p->dtype);
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t lq = s->c->lq[b], n = p->heads_q * lq;
        double *want = calloc((size_t)(n * d + 1), sizeof(double));
        double *wl = calloc((size_t)(n + 1), sizeof(double));
        assert_true(want && wl);
        oracle_of(s, b, want, wl);
        double peak = 0.0;
        for (int64_t i = 0; i < n * d; i++)
            peak = fabs(want[i]) > peak ? fabs(want[i]) : peak;
        for (int64_t h = 0; h < p->heads_q; h++) {
            for (int64_t i = 0; i < lq; i++) {
                double gl = lse[lse_at(s, b, h, i)], el = wl[h * lq + i];
                if (el == -INFINITY) {
                    if (gl != -INFINITY)
                        fail_msg("%s: b %lld h %lld row %lld: LSE %g, want -inf", s->c->name,
                                 (long long)b, (long long)h, (long long)i, gl);
                } else if (!(fabs(gl - el) <= (p->dtype == FA_DTYPE_F32 ? 1e-5 : rel) * (1 + fabs(el)))) {
                    fail_msg("%s: b %lld h %lld row %lld: LSE %.9g, want %.9g", s->c->name,
                             (long long)b, (long long)h, (long long)i, gl, el);
                }
                for (int64_t x = 0; x < d; x++) {
                    double g = oracle_load(p->dtype, o, q_at(s, b, h, i) + x);
                    double e = want[(h * lq + i) * d + x];
                    if (!(fabs(g - e) <= rel * peak + 1e-6))
                        fail_msg("%s: b %lld h %lld row %lld x %lld: O %.9g, want %.9g",
                                 s->c->name, (long long)b, (long long)h, (long long)i,
                                 (long long)x, g, e);
                }
            }
        }
        free(want);
        free(wl);
    }
}

/* The sequence buffers of a case, on the device. */
void dc_seq_buffers(const seq_data *s, fa_seq_buffers *sb, fa_buffer *owned[4])
{
    memset(sb, 0, sizeof *sb);
    memset(owned, 0, 4 * sizeof owned[0]);
    const fa_problem *p = &s->p;
    if (p->varlen) {
        sb->cu_seqlens_q = owned[0] = dc_buffer(s->cu_q, (size_t)(p->batch + 1) * 4);
        sb->cu_seqlens_k = owned[1] = dc_buffer(s->cu_k, (size_t)(p->batch + 1) * 4);
    }
    if (p->seqlens_k)
        sb->seqlens_k = owned[2] = dc_buffer(s->lens, (size_t)p->batch * 4);
    if (p->page_size > 0)
        sb->block_table = owned[3] =
            dc_buffer(s->table, (size_t)(p->batch * p->pages_per_seq) * 4);
}

/* Runs the case's forward twice: checked against the oracle, bitwise repeatable, the NaN guard
 * past O intact. */
static void run_forward(const seq_data *s)
{
    const fa_problem *p = &s->p;
    const size_t elem = fa_dtype_size(p->dtype);
    const int64_t guard = p->head_dim, o_n = s->q_elems + guard;
    int64_t lse_n = p->varlen ? p->heads_q * s->cu_q[p->batch] : p->batch * p->heads_q * p->seqlen_q;
    void *qh = dc_nan_host(p->dtype, s->q_elems), *kh = dc_nan_host(p->dtype, s->kv_elems);
    void *vh = dc_nan_host(p->dtype, s->kv_elems), *oh = dc_nan_host(p->dtype, o_n);
    void *o2 = malloc((size_t)o_n * elem);
    float *lh = malloc((size_t)(lse_n + 1) * 4);
    assert_true(o2 && lh);
    place_inputs(s, qh, kh, vh);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(dc_ctx, p, &plan);
    if (st != FA_STATUS_OK)
        fail_msg("%s: plan: %s", s->c->name, fa_context_last_error(dc_ctx));
    if (s->c->want_split)
        assert_true(fa_plan_kv_splits(plan) > 1);
    fa_buffer *q = dc_buffer(qh, (size_t)s->q_elems * elem), *k = dc_buffer(kh, (size_t)s->kv_elems * elem);
    fa_buffer *v = dc_buffer(vh, (size_t)s->kv_elems * elem), *o = dc_buffer(oh, (size_t)o_n * elem);
    fa_buffer *lse = dc_buffer(NULL, (size_t)(lse_n + 1) * 4), *seqb[4];
    fa_seq_buffers sb;
    dc_seq_buffers(s, &sb, seqb);
    for (int run = 0; run < 2; run++) {
        st = fa_forward_seq(dc_ctx, plan, q, k, v, o, lse, NULL, &sb);
        if (st != FA_STATUS_OK)
            fail_msg("%s: forward: %s", s->c->name, fa_context_last_error(dc_ctx));
        dc_read(o, run ? o2 : oh, (size_t)o_n * elem);
    }
    dc_read(lse, lh, (size_t)lse_n * 4);
    check_outputs(s, oh, lh);
    assert_memory_equal(oh, o2, (size_t)o_n * elem);
    for (int64_t i = s->q_elems; i < o_n; i++)
        assert_true(isnan(oracle_load(p->dtype, oh, i)));
    for (int64_t i = 0; i < (int64_t)s->c->first_token * p->heads_q * p->head_dim; i++)
        assert_true(isnan(oracle_load(p->dtype, oh, i))); /* the rows before cu_seqlens_q[0] */
    fa_buffer *all[5] = {q, k, v, o, lse};
    for (int i = 0; i < 5; i++)
        fa_buffer_destroy(all[i]);
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(seqb[i]);
    fa_plan_destroy(plan);
    free(qh);
    free(kh);
    free(vh);
    free(oh);
    free(o2);
    free(lh);
}

/* ---- the varlen backward ------------------------------------------------------------------ */

/* Gradients (dq packed like Q, dk / dv like K) of every sequence against bwd_ref on it alone. */
static void check_grads(const seq_data *s, const double *dout_all[], const void *dq,
                        const void *dk, const void *dv)
{
    const fa_problem *p = &s->p;
    const int64_t d = p->head_dim;
    for (int64_t b = 0; b < p->batch; b++) {
        fa_problem one;
        assert_int_equal(fa_problem_init(&one, p->dtype, FA_LAYOUT_BHSD, 1, p->heads_q,
                                         p->heads_kv, s->c->lq[b], s->c->lk[b], d),
                         FA_STATUS_OK);
        one.mask = p->mask;
        bwd_ref f = {s->q[b], s->k[b], s->v[b], dout_all[b], NULL, NULL, NULL, NULL, NULL, NULL};
        bwd_ref_compute(&one, &f);
        const struct {
            const char *name;
            const double *want;
            const void *got;
            bool kv;
        } t[3] = {{"dq", f.dq, dq, false}, {"dk", f.dk, dk, true}, {"dv", f.dv, dv, true}};
        for (int i = 0; i < 3; i++) {
            int64_t heads = t[i].kv ? p->heads_kv : p->heads_q;
            int64_t rows = t[i].kv ? s->c->lk[b] : s->c->lq[b];
            double peak = 0.0;
            for (int64_t e = 0; e < heads * rows * d; e++)
                peak = fabs(t[i].want[e]) > peak ? fabs(t[i].want[e]) : peak;
            for (int64_t h = 0; h < heads; h++)
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t x = 0; x < d; x++) {
                        int64_t at = (t[i].kv ? k_at(s, b, h, r) : q_at(s, b, h, r)) + x;
                        double g = oracle_load(p->dtype, t[i].got, at);
                        double e = t[i].want[(h * rows + r) * d + x];
                        if (!(fabs(g - e) <= dc_rel(p->dtype) * peak + 1e-6))
                            fail_msg("%s: b %lld %s h %lld row %lld x %lld: %.9g, want %.9g",
                                     s->c->name, (long long)b, t[i].name, (long long)h,
                                     (long long)r, (long long)x, g, e);
                    }
        }
        bwd_ref_free(&f);
    }
}

/* dO per sequence (logical [Hq, lq, d]) and packed like Q. */
static void make_dout(const seq_data *s, double *dout[], void *packed)
{
    const fa_problem *p = &s->p;
    harness_rng rng;
    harness_rng_seed(&rng, "dout");
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t n = p->heads_q * s->c->lq[b] * p->head_dim;
        dout[b] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        assert_non_null(dout[b]);
        for (int64_t i = 0; i < n; i++)
            dout[b][i] = oracle_round(p->dtype, harness_rng_uniform(&rng, -1.0, 1.0));
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < s->c->lq[b]; i++)
                for (int64_t x = 0; x < p->head_dim; x++)
                    oracle_store(p->dtype, packed, q_at(s, b, h, i) + x,
                                 dout[b][(h * s->c->lq[b] + i) * p->head_dim + x]);
    }
}

/* The varlen forward, then the varlen backward from its O and LSE. */
static void run_backward(const seq_data *s)
{
    const fa_problem *p = &s->p;
    const size_t elem = fa_dtype_size(p->dtype), qb = (size_t)s->q_elems * elem;
    const size_t kb = (size_t)s->kv_elems * elem;
    void *qh = dc_nan_host(p->dtype, s->q_elems), *kh = dc_nan_host(p->dtype, s->kv_elems);
    void *vh = dc_nan_host(p->dtype, s->kv_elems), *doh = dc_nan_host(p->dtype, s->q_elems);
    void *dqh = dc_nan_host(p->dtype, s->q_elems), *dkh = dc_nan_host(p->dtype, s->kv_elems);
    void *dvh = dc_nan_host(p->dtype, s->kv_elems);
    double *dout[DC_MAX_BATCH];
    place_inputs(s, qh, kh, vh);
    make_dout(s, dout, doh);
    fa_plan *fwd = NULL, *bwd = NULL;
    assert_int_equal(fa_plan_create(dc_ctx, p, &fwd), FA_STATUS_OK);
    if (fa_plan_create_backward(dc_ctx, p, &bwd) != FA_STATUS_OK)
        fail_msg("%s: backward plan: %s", s->c->name, fa_context_last_error(dc_ctx));
    fa_buffer *q = dc_buffer(qh, qb), *k = dc_buffer(kh, kb), *v = dc_buffer(vh, kb);
    fa_buffer *o = dc_buffer(NULL, qb), *d_o = dc_buffer(doh, qb), *dq = dc_buffer(dqh, qb);
    fa_buffer *dk = dc_buffer(dkh, kb), *dv = dc_buffer(dvh, kb);
    fa_buffer *lse = dc_buffer(NULL, (size_t)(p->heads_q * s->cu_q[p->batch] + 1) * 4), *seqb[4];
    fa_seq_buffers sb;
    dc_seq_buffers(s, &sb, seqb);
    assert_int_equal(fa_forward_seq(dc_ctx, fwd, q, k, v, o, lse, NULL, &sb), FA_STATUS_OK);
    if (fa_backward_seq(dc_ctx, bwd, q, k, v, o, lse, d_o, dq, dk, dv, NULL, &sb) != FA_STATUS_OK)
        fail_msg("%s: backward: %s", s->c->name, fa_context_last_error(dc_ctx));
    dc_read(dq, dqh, qb);
    dc_read(dk, dkh, kb);
    dc_read(dv, dvh, kb);
    check_grads(s, (const double **)dout, dqh, dkh, dvh);
    fa_buffer *all[9] = {q, k, v, o, d_o, dq, dk, dv, lse};
    for (int i = 0; i < 9; i++)
        fa_buffer_destroy(all[i]);
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(seqb[i]);
    for (int64_t b = 0; b < p->batch; b++)
        free(dout[b]);
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    void *hosts[7] = {qh, kh, vh, doh, dqh, dkh, dvh};
    for (int i = 0; i < 7; i++)
        free(hosts[i]);
}

/* ---- the case table ---------------------------------------------------------------------- */

#define L4(a, b, c, d) {a, b, c, d}
static const dc_case cases[] = {
    /* name, mode, dtype, batch, hq, hkv, d, lq, lk, seqlen_k, mask, page, splits, bc, shared,
     * want_split */
    {"split3 f32 causal-br", DC_DENSE, FA_DTYPE_F32, 2, 4, 2, 32, L4(5, 5, 0, 0), L4(100, 100, 0, 0),
     0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 0, 3, 16, false, true, 0},
    {"split64 f16 none", DC_DENSE, FA_DTYPE_F16, 1, 2, 1, 64, L4(1, 0, 0, 0), L4(300, 0, 0, 0), 0,
     FA_MASK_NONE, 0, 64, 8, false, true, 0},
    {"split3 bf16 top-left", DC_DENSE, FA_DTYPE_BF16, 1, 3, 3, 16, L4(40, 0, 0, 0),
     L4(37, 0, 0, 0), 0, FA_MASK_CAUSAL_TOP_LEFT, 0, 3, 8, false, true, 0},
    {"unsplit f32 none", DC_DENSE, FA_DTYPE_F32, 2, 4, 2, 32, L4(5, 5, 0, 0), L4(100, 100, 0, 0),
     0, FA_MASK_NONE, 0, 1, 16, false, false, 0},
    {"seqlens_k f32 causal-br", DC_SEQLENS_K, FA_DTYPE_F32, 3, 4, 1, 24, L4(2, 2, 2, 0),
     L4(0, 1, 37, 0), 40, FA_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 8, false, false, 0},
    {"seqlens_k f16 split", DC_SEQLENS_K, FA_DTYPE_F16, 3, 8, 2, 64, L4(1, 1, 1, 0),
     L4(61, 1, 0, 0), 64, FA_MASK_NONE, 0, 4, 8, false, false, 0},
    {"paged1 f32 none", DC_PAGED, FA_DTYPE_F32, 2, 4, 2, 16, L4(1, 1, 0, 0), L4(7, 0, 0, 0), 0,
     FA_MASK_NONE, 1, 1, 0, false, false, 0},
    {"paged3 f16 causal-br shared", DC_PAGED, FA_DTYPE_F16, 3, 8, 2, 32, L4(3, 3, 3, 0),
     L4(29, 11, 1, 0), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 0, 8, true, false, 0},
    {"paged16 bf16 split", DC_PAGED, FA_DTYPE_BF16, 2, 4, 1, 128, L4(1, 1, 0, 0),
     L4(200, 77, 0, 0), 0, FA_MASK_NONE, 16, 5, 16, true, false, 0},
    {"paged16 f32 top-left split", DC_PAGED, FA_DTYPE_F32, 2, 2, 2, 8, L4(4, 4, 0, 0),
     L4(50, 3, 0, 0), 0, FA_MASK_CAUSAL_TOP_LEFT, 16, 3, 4, false, false, 0},
    /* one-row decodes of a pool: on pocl every query head of a sequence is one tile's row
     * (heads packing), row h reading K/V head h / G: G 4, G 3 in f16 (which scores four rows
     * at once where they read one K/V head: four straddle two here), G 1, no keys, one key */
    {"paged3 bf16 heads-packed", DC_PAGED, FA_DTYPE_BF16, 1, 12, 3, 32, L4(1, 0, 0, 0),
     L4(100, 0, 0, 0), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 3, 0, 8, false, false, 0},
    {"paged5 f16 heads-packed G3 shared", DC_PAGED, FA_DTYPE_F16, 2, 6, 2, 64, L4(1, 1, 0, 0),
     L4(45, 12, 0, 0), 0, FA_MASK_NONE, 5, 1, 16, true, false, 0},
    {"paged16 f32 heads-packed G1 split", DC_PAGED, FA_DTYPE_F32, 3, 8, 8, 16, L4(1, 1, 1, 0),
     L4(0, 130, 1, 0), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 16, 3, 8, false, false, 0},
    {"varlen f32 causal-tl", DC_VARLEN, FA_DTYPE_F32, 4, 4, 2, 32, L4(0, 1, 17, 9),
     L4(3, 1, 17, 20), 0, FA_MASK_CAUSAL_TOP_LEFT, 0, 0, 8, false, false, 0},
    {"varlen f16 causal-br split", DC_VARLEN, FA_DTYPE_F16, 3, 2, 1, 64, L4(1, 5, 2, 0),
     L4(90, 0, 33, 0), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 0, 3, 8, false, false, 0},
    {"varlen bf16 none", DC_VARLEN, FA_DTYPE_BF16, 2, 3, 3, 96, L4(13, 4, 0, 0),
     L4(13, 31, 0, 0), 0, FA_MASK_NONE, 0, 0, 0, false, false, 0},
    /* one query row per sequence: Br 1, so pocl runs the one-work-item kernel (DIRECT_KV) */
    /* cu_seqlens from 300, past batch x seqlen_q rows: a split's partials are laid out by token */
    {"varlen f32 first token 300 split", DC_VARLEN, FA_DTYPE_F32, 2, 2, 1, 32, L4(3, 1, 0, 0),
     L4(70, 41, 0, 0), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 0, 4, 8, false, true, 300},
    {"varlen f32 one row each", DC_VARLEN, FA_DTYPE_F32, 3, 4, 2, 40, L4(1, 1, 1, 0),
     L4(7, 0, 33, 0), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 8, false, false, 0},
};

static const dc_case backward_cases[] = {
    {"backward varlen f32 causal-br", DC_VARLEN, FA_DTYPE_F32, 4, 4, 2, 16, L4(0, 1, 9, 17),
     L4(5, 1, 0, 23), 0, FA_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 8, false, false, 0},
    {"backward varlen f16 none", DC_VARLEN, FA_DTYPE_F16, 2, 2, 2, 64, L4(7, 12, 0, 0),
     L4(19, 3, 0, 0), 0, FA_MASK_NONE, 0, 0, 0, false, false, 0},
    /* D = rowsum(dO * O) in scratch, indexed by token from cu_seqlens_q[0] = 200 */
    {"backward varlen f32 first token 200", DC_VARLEN, FA_DTYPE_F32, 2, 2, 1, 16, L4(5, 3, 0, 0),
     L4(9, 20, 0, 0), 0, FA_MASK_NONE, 0, 0, 8, false, false, 200},
    {"backward varlen bf16 top-left", DC_VARLEN, FA_DTYPE_BF16, 3, 3, 1, 32, L4(4, 0, 11, 0),
     L4(4, 2, 11, 0), 0, FA_MASK_CAUSAL_TOP_LEFT, 0, 0, 4, false, false, 0},
};

static void test_case(void **state)
{
    const dc_case *c = *state;
    seq_data *s = NULL;
    dc_seq_build(c, &s);
    run_forward(s);
    dc_seq_free(s);
}

static void test_backward_case(void **state)
{
    const dc_case *c = *state;
    seq_data *s = NULL;
    dc_seq_build(c, &s);
    run_backward(s);
    dc_seq_free(s);
}

size_t dc_add_backward_tests(struct CMUnitTest *tests, const char *filter)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof backward_cases / sizeof backward_cases[0]; i++) {
        if (!filter || strstr(backward_cases[i].name, filter))
            tests[n++] = (struct CMUnitTest){backward_cases[i].name, test_backward_case, NULL,
                                             NULL, (void *)&backward_cases[i]};
    }
    return n;
}

static void add_test(struct CMUnitTest *tests, size_t *n, const char *name,
                     CMUnitTestFunction fn, void *state)
{
    if (case_filter && !strstr(name, case_filter))
        return;
    tests[(*n)++] = (struct CMUnitTest){name, fn, NULL, NULL, state};
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--case=", 7) == 0)
            case_filter = argv[i] + 7;
    }
    int rc = harness_single_backend(argc, argv, "test_decode", &dc_backend);
    if (rc >= 0)
        return rc;
    char why[512] = "";
    fa_context_options opts = {dc_backend, 0};
    if (fa_context_create(&dc_ctx, &opts, why, sizeof why) != FA_STATUS_OK) {
        fprintf(stderr, "test_decode: no %s context: %s\n", fa_backend_name(dc_backend), why);
        return 1;
    }
    fa_device_props props;
    if (fa_context_device_props(dc_ctx, &props) == FA_STATUS_OK)
        printf("device: %s (%s)\n", props.name, props.vendor); /* oclgrind_tests.sh reads it */
    static struct CMUnitTest tests[64];
    size_t n = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        add_test(tests, &n, cases[i].name, test_case, (void *)&cases[i]);
    n += dc_add_merge_tests(tests + n, case_filter);
    n += dc_add_backward_tests(tests + n, case_filter);
    n += dc_add_invalid_tests(tests + n, case_filter);
    if (case_filter && n == 0) { /* zero tests would pass: a renamed case must not */
        fprintf(stderr, "test_decode: no test name contains \"%s\"\n", case_filter);
        fa_context_destroy(dc_ctx);
        return 2;
    }
    char title[64];
    snprintf(title, sizeof title, "decode_%s", fa_backend_name(dc_backend));
    rc = _cmocka_run_group_tests(title, tests, n, NULL, NULL);
    fa_context_destroy(dc_ctx);
    return rc;
}
