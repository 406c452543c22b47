/*
 * ring_case.c - one ring case against the golden: whole inputs from a fixed seed, the golden
 * (cpu backend) on the whole problem, this rank's slice through the ring, its rows compared.
 */
#include "ring_case.h"

#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor on the host in the case's dtype, whole or local. */
typedef struct tensor {
    unsigned char *data;
    size_t bytes;
    fa_tensor_layout l;
} tensor;

/* The arrays of one rank: whole inputs and golden outputs, local ones, ring outputs. */
typedef struct arrays {
    tensor q, k, v, d_o, o, dq, dk, dv; /* whole */
    float *lse;
    tensor lq, lk, lv, ldo, lo, ldq, ldk, ldv; /* local */
    float *llse;
    float d_sinks[16], ld_sinks[16]; /* the golden's and the ring's */
} arrays;

static int64_t keys_of(const ring_case *c)
{
    return c->seqlen_k ? c->seqlen_k : c->seqlen;
}

static fa_tensor_layout layout_of(fa_layout kind, int64_t heads, int64_t rows, int64_t d)
{
    fa_tensor_layout l = {0, 0, 0, 0};
    l.stride_seq = kind == FA_LAYOUT_BSHD ? heads * d : d;
    l.stride_head = kind == FA_LAYOUT_BSHD ? d : rows * d;
    l.stride_batch = heads * rows * d;
    return l;
}

static int tensor_alloc(tensor *t, const ring_case *c, int64_t heads, int64_t rows)
{
    t->l = layout_of(c->tensor_layout, heads, rows, c->head_dim);
    t->bytes = (size_t)(c->batch * heads * rows * c->head_dim) * fa_dtype_size(c->dtype);
    t->data = calloc(1, t->bytes + 8);
    return t->data ? 0 : 1;
}

static void fill(tensor *t, const ring_case *c, uint64_t *seed)
{
    size_t n = t->bytes / fa_dtype_size(c->dtype);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        double x = (double)(*seed >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        oracle_store(c->dtype, t->data, (int64_t)i, x);
    }
}

static int64_t at(const fa_tensor_layout *l, int64_t b, int64_t h, int64_t s)
{
    return l->offset + b * l->stride_batch + h * l->stride_head + s * l->stride_seq;
}

/* Copies this rank's rows between a whole tensor and a local one (to_local: whole -> local). */
static void move_rows(const ring_case *c, const fa_ring_slice *s, int64_t heads, tensor *whole,
                      tensor *local, int to_local)
{
    size_t row = (size_t)c->head_dim * fa_dtype_size(c->dtype);
    size_t elem = fa_dtype_size(c->dtype);
    for (int a = 0, first = 0; a < s->chunks; first += (int)s->len[a], a++)
        for (int64_t b = 0; b < c->batch; b++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t i = 0; i < s->len[a]; i++) {
                    unsigned char *w = whole->data + at(&whole->l, b, h, s->start[a] + i) * elem;
                    unsigned char *l = local->data + at(&local->l, b, h, first + i) * elem;
                    memcpy(to_local ? l : w, to_local ? w : l, row);
                }
}

static int fail(char *msg, size_t size, const char *what, fa_status st, const char *detail)
{
    snprintf(msg, size, "%s: %s %s", what, fa_status_name(st), detail);
    return 1;
}

/* The whole problem of a case, with its modifiers. */
static fa_problem whole_problem(const ring_case *c)
{
    fa_problem p;
    fa_problem_init(&p, c->dtype, c->tensor_layout, c->batch, c->heads_q, c->heads_kv,
                    c->seqlen, keys_of(c), c->head_dim);
    p.mask = c->mask;
    p.softcap = c->softcap;
    p.window = c->window;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.alibi = c->alibi;
    p.dropout_p = c->dropout;
    p.dropout_seed = 0xfeedbeef12345ull;
    p.dropout_offset = 3;
    p.sinks = c->sinks;
    return p;
}

/* The sinks, f32 [heads_q] (at most 16 heads): head 1 has none (-inf). */
static float *sinks_of(const ring_case *c)
{
    static float s[16];
    for (int h = 0; h < 16; h++)
        s[h] = h == 1 ? -INFINITY : 0.5f - 0.25f * (float)h;
    return c->heads_q <= 16 ? s : NULL;
}

/* ALiBi's slopes, f32 [heads_q] (at most 16 heads in the cases). */
static float *slopes_of(const ring_case *c)
{
    static float s[16];
    for (int h = 0; h < 16; h++)
        s[h] = 0.3f / (float)(h + 1);
    return c->heads_q <= 16 ? s : NULL;
}

/* The golden forward and backward on the whole problem (cpu backend, host-wrapped memory). */
static int golden_run(fa_context *g, const ring_case *c, arrays *x, char *msg, size_t size)
{
    fa_problem p = whole_problem(c);
    tensor *ts[8] = {&x->q, &x->k, &x->v, &x->o, &x->d_o, &x->dq, &x->dk, &x->dv};
    fa_buffer *b[12] = {0};
    fa_status st = FA_STATUS_OK;
    for (int i = 0; i < 8 && st == FA_STATUS_OK; i++)
        st = fa_buffer_wrap_host(g, ts[i]->data, ts[i]->bytes + 8, &b[i]);
    size_t lse_bytes = (size_t)(c->batch * c->heads_q * c->seqlen) * 4 + 4;
    if (st == FA_STATUS_OK)
        st = fa_buffer_wrap_host(g, x->lse, lse_bytes, &b[8]);
    if (st == FA_STATUS_OK && c->alibi)
        st = fa_buffer_wrap_host(g, slopes_of(c), (size_t)c->heads_q * 4, &b[9]);
    if (st == FA_STATUS_OK && c->sinks)
        st = fa_buffer_wrap_host(g, sinks_of(c), (size_t)c->heads_q * 4, &b[10]);
    if (st == FA_STATUS_OK && c->sinks)
        st = fa_buffer_wrap_host(g, x->d_sinks, sizeof x->d_sinks, &b[11]);
    fa_modifier_buffers mods = {b[9], NULL, b[10], NULL};
    fa_modifier_buffers bmods = {b[9], NULL, b[10], b[11]};
    fa_plan *fwd = NULL, *bwd = NULL;
    if (st == FA_STATUS_OK)
        st = fa_plan_create(g, &p, &fwd);
    if (st == FA_STATUS_OK)
        st = fa_forward_ex(g, fwd, b[0], b[1], b[2], b[3], b[8], &mods);
    if (st == FA_STATUS_OK && c->backward)
        st = fa_plan_create_backward(g, &p, &bwd);
    if (st == FA_STATUS_OK && c->backward)
        st = fa_backward_ex(g, bwd, b[0], b[1], b[2], b[3], b[8], b[4], b[5], b[6], b[7],
                            &bmods);
    int rc = st == FA_STATUS_OK ? 0 : fail(msg, size, "golden", st, fa_context_last_error(g));
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    for (int i = 0; i < 12; i++)
        fa_buffer_destroy(b[i]);
    return rc;
}

/* f16 and bf16 partials are rounded to the dtype at each merge or gradient part: the bound
 * grows with the parts, up to 2P of them. */
static double tolerance(const ring_case *c, int P)
{
    double base = c->dtype == FA_DTYPE_F16 ? 2e-3 : c->dtype == FA_DTYPE_BF16 ? 1.6e-2 : 2e-5;
    return base * (c->dtype == FA_DTYPE_F32 ? 1.0 : (double)P);
}

/* Compares a local tensor with the whole golden's rows of this rank (s: its slice). */
static int compare(const ring_case *c, const fa_ring_slice *s, int64_t heads, tensor *whole,
                   tensor *local, double tol, const char *name, char *msg, size_t size)
{
    tensor want = *local;
    want.data = malloc(local->bytes + 8);
    if (!want.data)
        return fail(msg, size, name, FA_STATUS_OUT_OF_MEMORY, "");
    move_rows(c, s, heads, whole, &want, 1);
    size_t n = local->bytes / fa_dtype_size(c->dtype);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        double got = oracle_load(c->dtype, local->data, (int64_t)i);
        double ref = oracle_load(c->dtype, want.data, (int64_t)i);
        if (!(fabs(got - ref) <= tol + tol * fabs(ref))) {
            snprintf(msg, size, "%s[%zu] = %.8g, golden %.8g (tolerance %.3g)", name, i, got,
                     ref, tol);
            rc = 1;
        }
    }
    free(want.data);
    return rc;
}

static int compare_lse(const ring_case *c, const fa_ring_slice *s, const float *whole,
                       const float *local, char *msg, size_t size)
{
    int64_t BH = c->batch * c->heads_q;
    for (int a = 0, first = 0; a < s->chunks; first += (int)s->len[a], a++)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < s->len[a]; i++) {
                float got = local[bh * s->rows + first + i];
                float ref = whole[bh * c->seqlen + s->start[a] + i];
                /* equal: a row that sees no key is -inf in both */
                if (got != ref && !(fabsf(got - ref) <= 1e-4f + 1e-5f * fabsf(ref))) {
                    snprintf(msg, size, "LSE row %lld = %.8g, golden %.8g",
                             (long long)(s->start[a] + i), got, ref);
                    return 1;
                }
            }
    return 0;
}

/* The sinks' gradient: every rank holds the whole sum. */
static int compare_sinks(const ring_case *c, const arrays *x, double tol, char *msg,
                         size_t size)
{
    for (int64_t h = 0; c->sinks && h < c->heads_q; h++) {
        double got = x->ld_sinks[h], ref = x->d_sinks[h];
        if (!(fabs(got - ref) <= tol * (1.0 + fabs(ref)))) {
            snprintf(msg, size, "dsinks[%lld] = %.8g, golden %.8g", (long long)h, got, ref);
            return 1;
        }
    }
    return 0;
}

/* Device buffers of the local tensors on ctx. */
typedef struct devbufs {
    fa_buffer *q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv, *slopes, *sinks, *d_sinks;
} devbufs;

static fa_status upload(fa_context *ctx, const tensor *t, fa_buffer **out)
{
    fa_status st = fa_buffer_create(ctx, t->bytes + 8, out);
    return st == FA_STATUS_OK ? fa_buffer_write(*out, 0, t->data, t->bytes) : st;
}

static fa_status device_setup(fa_context *ctx, arrays *x, size_t lse_bytes, devbufs *d)
{
    fa_status st = upload(ctx, &x->lq, &d->q);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->lk, &d->k);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->lv, &d->v);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->ldo, &d->d_o);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->lo, &d->o);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->ldq, &d->dq);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->ldk, &d->dk);
    if (st == FA_STATUS_OK)
        st = upload(ctx, &x->ldv, &d->dv);
    if (st == FA_STATUS_OK)
        st = fa_buffer_create(ctx, lse_bytes + 8, &d->lse);
    return st;
}

static fa_status slopes_setup(fa_context *ctx, const ring_case *c, devbufs *d)
{
    size_t bytes = (size_t)c->heads_q * 4;
    fa_status st = FA_STATUS_OK;
    if (c->alibi && (st = fa_buffer_create(ctx, bytes, &d->slopes)) == FA_STATUS_OK)
        st = fa_buffer_write(d->slopes, 0, slopes_of(c), bytes);
    if (st == FA_STATUS_OK && c->sinks && (st = fa_buffer_create(ctx, bytes, &d->sinks)) == 0)
        st = fa_buffer_write(d->sinks, 0, sinks_of(c), bytes);
    if (st == FA_STATUS_OK && c->sinks)
        st = fa_buffer_create(ctx, bytes, &d->d_sinks);
    return st;
}

static void device_free(devbufs *d)
{
    fa_buffer *all[12] = {d->q, d->k, d->v, d->o, d->lse, d->d_o, d->dq, d->dk, d->dv,
                          d->slopes, d->sinks, d->d_sinks};
    for (int i = 0; i < 12; i++)
        fa_buffer_destroy(all[i]);
}

/* The ring forward (twice, bitwise equal) and backward on this rank's slice. */
static int ring_run(fa_context *ctx, const fa_ring_transport *t, const ring_case *c,
                    arrays *x, size_t lse_bytes, char *msg, size_t size)
{
    devbufs d;
    memset(&d, 0, sizeof d);
    fa_status st = device_setup(ctx, x, lse_bytes, &d);
    if (st == FA_STATUS_OK)
        st = slopes_setup(ctx, c, &d);
    if (st != FA_STATUS_OK) {
        device_free(&d);
        return fail(msg, size, "device buffers", st, fa_context_last_error(ctx));
    }
    fa_problem whole = whole_problem(c);
    /* 60 s: a rank compiling a new kernel variant (pocl, a loaded machine) keeps its
     * neighbours waiting */
    fa_ring_options o = {c->layout, c->tensor_layout, 60000, NULL};
    fa_ring_tensors rt = {d.q,  d.k,  d.v,      d.o,     d.lse,   d.d_o,
                          d.dq, d.dk, d.dv, d.slopes, d.sinks, d.d_sinks};
    char why[512];
    unsigned char *first = malloc(x->lo.bytes + 1);
    int rc = first ? 0 : fail(msg, size, "host", FA_STATUS_OUT_OF_MEMORY, "");
    for (int pass = 0; pass < 2 && !rc; pass++) {
        st = fa_ring_forward(ctx, t, &whole, &o, &rt, why, sizeof why);
        if (st == FA_STATUS_OK)
            st = fa_buffer_read(d.o, 0, pass ? x->lo.data : first, x->lo.bytes);
        if (st != FA_STATUS_OK)
            rc = fail(msg, size, "fa_ring_forward", st, why);
    }
    if (!rc && memcmp(first, x->lo.data, x->lo.bytes) != 0)
        rc = fail(msg, size, "repeat", FA_STATUS_OK, "two ring forwards differ bitwise");
    if (!rc)
        st = fa_buffer_read(d.lse, 0, x->llse, lse_bytes);
    if (!rc && c->backward) {
        st = fa_ring_backward(ctx, t, &whole, &o, &rt, why, sizeof why);
        if (st == FA_STATUS_OK)
            st = fa_buffer_read(d.dq, 0, x->ldq.data, x->ldq.bytes);
        if (st == FA_STATUS_OK)
            st = fa_buffer_read(d.dk, 0, x->ldk.data, x->ldk.bytes);
        if (st == FA_STATUS_OK)
            st = fa_buffer_read(d.dv, 0, x->ldv.data, x->ldv.bytes);
        if (st == FA_STATUS_OK && c->sinks)
            st = fa_buffer_read(d.d_sinks, 0, x->ld_sinks, (size_t)c->heads_q * 4);
        if (st != FA_STATUS_OK)
            rc = fail(msg, size, "fa_ring_backward", st, why);
    }
    free(first);
    device_free(&d);
    return rc;
}

static void arrays_free(arrays *x)
{
    tensor *all[16] = {&x->q, &x->k, &x->v, &x->d_o, &x->o, &x->dq, &x->dk, &x->dv,
                       &x->lq, &x->lk, &x->lv, &x->ldo, &x->lo, &x->ldq, &x->ldk, &x->ldv};
    for (int i = 0; i < 16; i++)
        free(all[i]->data);
    free(x->lse);
    free(x->llse);
}

/* s: this rank's Q rows, ks: its K rows. */
static int arrays_alloc(const ring_case *c, const fa_ring_slice *s, const fa_ring_slice *ks,
                        arrays *x)
{
    int64_t N = c->seqlen, n = s->rows, Hq = c->heads_q, Hk = c->heads_kv;
    int64_t Nk = keys_of(c), nk = ks->rows;
    int bad = tensor_alloc(&x->q, c, Hq, N) | tensor_alloc(&x->k, c, Hk, Nk) |
              tensor_alloc(&x->v, c, Hk, Nk) | tensor_alloc(&x->d_o, c, Hq, N) |
              tensor_alloc(&x->o, c, Hq, N) | tensor_alloc(&x->dq, c, Hq, N) |
              tensor_alloc(&x->dk, c, Hk, Nk) | tensor_alloc(&x->dv, c, Hk, Nk) |
              tensor_alloc(&x->lq, c, Hq, n) | tensor_alloc(&x->lk, c, Hk, nk) |
              tensor_alloc(&x->lv, c, Hk, nk) | tensor_alloc(&x->ldo, c, Hq, n) |
              tensor_alloc(&x->lo, c, Hq, n) | tensor_alloc(&x->ldq, c, Hq, n) |
              tensor_alloc(&x->ldk, c, Hk, nk) | tensor_alloc(&x->ldv, c, Hk, nk);
    x->lse = calloc((size_t)(c->batch * Hq * N) + 1, 4);
    x->llse = calloc((size_t)(c->batch * Hq * n) + 1, 4);
    return bad || !x->lse || !x->llse;
}

int ring_case_run(fa_context *ctx, fa_context *golden, const fa_ring_transport *t,
                  const ring_case *c, char *msg, size_t msg_size)
{
    fa_ring_slice s, ks;
    arrays x;
    memset(&x, 0, sizeof x);
    msg[0] = '\0';
    if (fa_ring_slice_of(c->layout, c->seqlen, t->size, t->rank, &s) != FA_STATUS_OK ||
        fa_ring_slice_of(c->layout, keys_of(c), t->size, t->rank, &ks) != FA_STATUS_OK)
        return fail(msg, msg_size, "slice", FA_STATUS_INVALID_ARGUMENT, "");
    int rc = arrays_alloc(c, &s, &ks, &x) ? fail(msg, msg_size, "host", FA_STATUS_OUT_OF_MEMORY,
                                                 "")
                                          : 0;
    uint64_t seed = 0x5eed0000u + (uint64_t)c->seqlen;
    if (!rc) {
        fill(&x.q, c, &seed);
        fill(&x.k, c, &seed);
        fill(&x.v, c, &seed);
        fill(&x.d_o, c, &seed);
        rc = golden_run(golden, c, &x, msg, msg_size);
    }
    if (!rc) {
        move_rows(c, &s, c->heads_q, &x.q, &x.lq, 1);
        move_rows(c, &ks, c->heads_kv, &x.k, &x.lk, 1);
        move_rows(c, &ks, c->heads_kv, &x.v, &x.lv, 1);
        move_rows(c, &s, c->heads_q, &x.d_o, &x.ldo, 1);
        size_t lse_bytes = (size_t)(c->batch * c->heads_q * s.rows) * 4;
        rc = ring_run(ctx, t, c, &x, lse_bytes, msg, msg_size);
    }
    double tol = tolerance(c, t->size);
    if (!rc)
        rc = compare(c, &s, c->heads_q, &x.o, &x.lo, tol, "O", msg, msg_size) ||
             compare_lse(c, &s, x.lse, x.llse, msg, msg_size);
    if (!rc && c->backward)
        rc = compare(c, &s, c->heads_q, &x.dq, &x.ldq, 4 * tol, "dQ", msg, msg_size) ||
             compare(c, &ks, c->heads_kv, &x.dk, &x.ldk, 4 * tol, "dK", msg, msg_size) ||
             compare(c, &ks, c->heads_kv, &x.dv, &x.ldv, 4 * tol, "dV", msg, msg_size) ||
             compare_sinks(c, &x, 4 * tol, msg, msg_size);
    arrays_free(&x);
    return rc;
}

void ring_case_describe(const ring_case *c, char *out, size_t size)
{
    char win[48] = "", keys[24] = "";
    if (c->seqlen_k)
        snprintf(keys, sizeof keys, "/%lld", (long long)c->seqlen_k);
    if (c->window)
        snprintf(win, sizeof win, " window(%lld,%lld)", (long long)c->window_left,
                 (long long)c->window_right);
    snprintf(out, size, "%s %s %s %s B%lld H%lld/%lld N%lld%s D%lld%s%s%s%s%s%s",
             fa_ring_layout_name(c->layout), c->tensor_layout == FA_LAYOUT_BSHD ? "bshd" : "bhsd",
             fa_mask_name(c->mask), fa_dtype_name(c->dtype), (long long)c->batch,
             (long long)c->heads_q, (long long)c->heads_kv, (long long)c->seqlen, keys,
             (long long)c->head_dim, c->softcap > 0 ? " softcap" : "", win,
             c->alibi ? " alibi" : "", c->dropout > 0 ? " dropout" : "",
             c->sinks ? " sinks" : "", c->backward ? " bwd" : "");
}
