/*
 * naive_cpu.c - the CPU implementation of the NAIVE benchmark attention (see naive.h): a plain
 * C loop in f32 over an fa_context of the CPU backend. Not part of the library: a baseline that
 * materializes S and P on purpose.
 *
 * The loop keeps S/P in an fa_buffer (so the context counts it) and moves it one row at a time
 * through fa_buffer_write/fa_buffer_read, the CPU analogue of a GPU kernel writing S to global
 * memory and the next kernel reading it back. Shapes, per head bh = b * heads_q + h:
 *   Q [B, Hq, Sq, d]   K, V [B, Hkv, Sk, d]   S/P [B * Hq, Sq, Sk] f32   O [B, Hq, Sq, d]
 * and for the backward dO, dQ like Q; dK, dV like K; dP/dS [B * Hq, Sq, Sk] f32, in four
 * passes as naive_attn.cl's kernels: dP = dO V^T; dS = P * (dP - rowsum(P * dP)) in place;
 * dQ = scale dS K; dK = scale dS^T Q and dV = P^T dO per K/V head, over its query heads.
 */
#include "naive_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct naive_cpu {
    naive_attn base; /* first: the dispatch sees a naive_attn */
    fa_context *ctx;
    fa_buffer *q, *k, *v, *o, *s;
    fa_buffer *d_o, *dq, *dk, *dv, *dp; /* the backward's, when the problem asks for it */
    float *qh, *kh, *vh; /* one head of Q, K, V in f32 */
    float *row, *acc;    /* one S/P row; one O row */
    float *doh, *row2;   /* backward: one head of dO; one dP/dS row */
    float *dkh, *dvh;    /* backward: one K/V head's dK and dV accumulators */
    void *img;           /* one head in the storage dtype, for the transfers */
    int64_t k_loaded;    /* index of the K/V head in kh/vh, -1 when none */
} naive_cpu;

/*
 * "naive cpu: " and the context's message for st without its leading "FA_STATUS_X: " (every
 * caller prints the status name itself); the status's generic message when there is none.
 */
static fa_status cpu_error(const naive_cpu *n, fa_status st, char *why, size_t why_size)
{
    const char *msg = fa_context_last_error(n->ctx), *name = fa_status_name(st);
    size_t len = strlen(name);
    if (!*msg)
        msg = fa_status_message(st);
    else if (strncmp(msg, name, len) == 0 && strncmp(msg + len, ": ", 2) == 0 && msg[len + 2])
        msg += len + 2;
    return naive_fail(st, why, why_size, "naive cpu: %s", msg);
}

static fa_status cpu_alloc_scratch(naive_cpu *n, char *why, size_t why_size)
{
    const naive_problem *p = &n->base.p;
    size_t seq = (size_t)(p->seq_q > p->seq_k ? p->seq_q : p->seq_k), d = (size_t)p->dim;
    n->qh = malloc((size_t)p->seq_q * d * sizeof(float) + 1);
    n->kh = malloc((size_t)p->seq_k * d * sizeof(float) + 1);
    n->vh = malloc((size_t)p->seq_k * d * sizeof(float) + 1);
    n->row = malloc((size_t)p->seq_k * sizeof(float) + 1);
    n->acc = malloc(d * sizeof(float) + 1);
    n->img = malloc(seq * d * fa_dtype_size(p->dtype) + 1);
    if (!n->qh || !n->kh || !n->vh || !n->row || !n->acc || !n->img)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "naive cpu: out of host memory for the row scratch");
    if (!p->backward)
        return FA_STATUS_OK;
    n->doh = malloc((size_t)p->seq_q * d * sizeof(float) + 1);
    n->row2 = malloc((size_t)p->seq_k * sizeof(float) + 1);
    n->dkh = malloc((size_t)p->seq_k * d * sizeof(float) + 1);
    n->dvh = malloc((size_t)p->seq_k * d * sizeof(float) + 1);
    if (!n->doh || !n->row2 || !n->dkh || !n->dvh)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "naive cpu: out of host memory for the backward's scratch");
    return FA_STATUS_OK;
}

/* Buffers cannot be empty, so a size-0 tensor still gets a few bytes. */
static size_t nonempty(size_t bytes)
{
    return bytes ? bytes : sizeof(float);
}

/* Reads head `index` (of `seq` rows) of buf into dst as f32. */
static fa_status read_head(naive_cpu *n, const fa_buffer *buf, int64_t index, int64_t seq,
                           float *dst)
{
    const naive_problem *p = &n->base.p;
    size_t count = (size_t)(seq * p->dim), bytes = count * fa_dtype_size(p->dtype);
    fa_status st = fa_buffer_read(buf, (size_t)index * bytes, n->img, bytes);
    if (st == FA_STATUS_OK)
        naive_to_f32(n->img, p->dtype, count, dst);
    return st;
}

/* Writes head `index` (of `seq` rows) of buf from src (f32), in the storage dtype. */
static fa_status write_head(naive_cpu *n, fa_buffer *buf, int64_t index, int64_t seq,
                            const float *src)
{
    const naive_problem *p = &n->base.p;
    size_t count = (size_t)(seq * p->dim), bytes = count * fa_dtype_size(p->dtype);
    naive_from_f32(src, p->dtype, count, n->img);
    return fa_buffer_write(buf, (size_t)index * bytes, n->img, bytes);
}

/* The K/V head that query head bh reads (GQA: heads_q / heads_kv query heads share one). */
static int64_t kv_head(const naive_problem *p, int64_t bh)
{
    int64_t b = bh / p->heads_q, h = bh % p->heads_q;
    return b * p->heads_kv + h / (p->heads_q / p->heads_kv);
}

static int is_masked(const naive_problem *p, int64_t i, int64_t j)
{
    if (p->mask == FA_MASK_CAUSAL_TOP_LEFT)
        return j > i;
    if (p->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT)
        return j > i + (p->seq_k - p->seq_q);
    return 0;
}

/* Pass 1 for one head: S[bh, i, j] = scale * Q[bh, i] . K[kv, j], or -inf where masked. */
static fa_status cpu_scores_head(naive_cpu *n, int64_t bh)
{
    const naive_problem *p = &n->base.p;
    int64_t i, j, x, kv = kv_head(p, bh);
    fa_status st = read_head(n, n->q, bh, p->seq_q, n->qh);
    if (st == FA_STATUS_OK && kv != n->k_loaded) {
        st = read_head(n, n->k, kv, p->seq_k, n->kh);
        n->k_loaded = st == FA_STATUS_OK ? kv : -1;
    }
    for (i = 0; i < p->seq_q && st == FA_STATUS_OK; i++) {
        const float *restrict q = n->qh + i * p->dim;
        for (j = 0; j < p->seq_k; j++) {
            const float *restrict k = n->kh + j * p->dim;
            float dot = 0.0f;
            if (is_masked(p, i, j)) {
                n->row[j] = -INFINITY;
                continue;
            }
            for (x = 0; x < p->dim; x++)
                dot += q[x] * k[x];
            n->row[j] = dot * p->scale;
        }
        st = fa_buffer_write(n->s, (size_t)((bh * p->seq_q + i) * p->seq_k) * sizeof(float),
                             n->row, (size_t)p->seq_k * sizeof(float));
    }
    return st;
}

/* Pass 2 for one row, in place: P = exp(S - max) / sum; a fully masked row becomes 0. */
static void softmax_row(float *row, int64_t n)
{
    float m = -INFINITY, sum = 0.0f;
    int64_t j;
    for (j = 0; j < n; j++)
        m = row[j] > m ? row[j] : m;
    if (m == -INFINITY) {
        for (j = 0; j < n; j++)
            row[j] = 0.0f;
        return;
    }
    for (j = 0; j < n; j++) {
        row[j] = expf(row[j] - m);
        sum += row[j];
    }
    for (j = 0; j < n; j++)
        row[j] /= sum;
}

static fa_status cpu_softmax(naive_cpu *n)
{
    const naive_problem *p = &n->base.p;
    size_t bytes = (size_t)p->seq_k * sizeof(float);
    int64_t r, rows = p->batch * p->heads_q * p->seq_q;
    fa_status st = FA_STATUS_OK;
    for (r = 0; r < rows && st == FA_STATUS_OK; r++) {
        st = fa_buffer_read(n->s, (size_t)r * bytes, n->row, bytes);
        softmax_row(n->row, p->seq_k);
        st = st ? st : fa_buffer_write(n->s, (size_t)r * bytes, n->row, bytes);
    }
    return st;
}

/* Pass 3 for one head: O[bh, i] = sum_j P[bh, i, j] * V[kv, j], stored in the dtype. */
static fa_status cpu_pv_head(naive_cpu *n, int64_t bh)
{
    const naive_problem *p = &n->base.p;
    size_t esz = fa_dtype_size(p->dtype), d = (size_t)p->dim;
    float *restrict acc = n->acc;
    const float *restrict vh = n->vh, *restrict row = n->row;
    int64_t i, j, kv = kv_head(p, bh);
    size_t x;
    fa_status st = read_head(n, n->v, kv, p->seq_k, n->vh);
    for (i = 0; i < p->seq_q && st == FA_STATUS_OK; i++) {
        size_t r = (size_t)(bh * p->seq_q + i);
        st = fa_buffer_read(n->s, r * (size_t)p->seq_k * sizeof(float), n->row,
                            (size_t)p->seq_k * sizeof(float));
        memset(acc, 0, d * sizeof(float));
        for (j = 0; j < p->seq_k; j++)
            for (x = 0; x < d; x++)
                acc[x] += row[j] * vh[(size_t)j * d + x];
        naive_from_f32(acc, p->dtype, d, n->img);
        st = st ? st : fa_buffer_write(n->o, r * d * esz, n->img, d * esz);
    }
    return st;
}

/* ---- the backward's passes --------------------------------------------------------------- */

/* Row r (of B * Hq * Sq) of an Sq x Sk f32 buffer, read into or written from dst/src. */
static fa_status read_row(const fa_buffer *buf, const naive_problem *p, int64_t r, float *dst)
{
    size_t bytes = (size_t)p->seq_k * sizeof(float);
    return fa_buffer_read(buf, (size_t)r * bytes, dst, bytes);
}

static fa_status write_row(fa_buffer *buf, const naive_problem *p, int64_t r, const float *src)
{
    size_t bytes = (size_t)p->seq_k * sizeof(float);
    return fa_buffer_write(buf, (size_t)r * bytes, src, bytes);
}

/* Backward 1 for one head: dP[bh, i, j] = dO[bh, i] . V[kv, j], the whole Sq x Sk matrix. */
static fa_status cpu_dp_head(naive_cpu *n, int64_t bh)
{
    const naive_problem *p = &n->base.p;
    int64_t i, j, x;
    fa_status st = read_head(n, n->d_o, bh, p->seq_q, n->doh);
    st = st ? st : read_head(n, n->v, kv_head(p, bh), p->seq_k, n->vh);
    for (i = 0; i < p->seq_q && st == FA_STATUS_OK; i++) {
        const float *restrict g = n->doh + i * p->dim;
        for (j = 0; j < p->seq_k; j++) {
            const float *restrict v = n->vh + j * p->dim;
            float dot = 0.0f;
            for (x = 0; x < p->dim; x++)
                dot += g[x] * v[x];
            n->row2[j] = dot;
        }
        st = write_row(n->dp, p, bh * p->seq_q + i, n->row2);
    }
    return st;
}

/* Backward 2, every row in place over dP: dS = P * (dP - D) with D = rowsum(P * dP), which is
 * rowsum(dO * O), the softmax's own term. Masked keys have P = 0, so dS = 0 there. */
static fa_status cpu_ds(naive_cpu *n)
{
    const naive_problem *p = &n->base.p;
    int64_t r, j, rows = p->batch * p->heads_q * p->seq_q;
    fa_status st = FA_STATUS_OK;
    for (r = 0; r < rows && st == FA_STATUS_OK; r++) {
        float dsum = 0.0f;
        st = read_row(n->s, p, r, n->row);
        st = st ? st : read_row(n->dp, p, r, n->row2);
        for (j = 0; j < p->seq_k; j++)
            dsum += n->row[j] * n->row2[j];
        for (j = 0; j < p->seq_k; j++)
            n->row2[j] = n->row[j] * (n->row2[j] - dsum);
        st = st ? st : write_row(n->dp, p, r, n->row2);
    }
    return st;
}

/* Backward 3 for one head: dQ[bh, i] = scale * sum_j dS[bh, i, j] * K[kv, j]. */
static fa_status cpu_dq_head(naive_cpu *n, int64_t bh)
{
    const naive_problem *p = &n->base.p;
    size_t esz = fa_dtype_size(p->dtype), d = (size_t)p->dim, x;
    float *restrict acc = n->acc;
    const float *kh = n->kh, *ds = n->row2; /* both refilled by the reads below */
    int64_t i, j;
    fa_status st = read_head(n, n->k, kv_head(p, bh), p->seq_k, n->kh);
    for (i = 0; i < p->seq_q && st == FA_STATUS_OK; i++) {
        size_t r = (size_t)(bh * p->seq_q + i);
        st = read_row(n->dp, p, (int64_t)r, n->row2);
        memset(acc, 0, d * sizeof(float));
        for (j = 0; j < p->seq_k; j++)
            for (x = 0; x < d; x++)
                acc[x] += ds[j] * kh[(size_t)j * d + x];
        for (x = 0; x < d; x++)
            acc[x] *= p->scale;
        naive_from_f32(acc, p->dtype, d, n->img);
        st = st ? st : fa_buffer_write(n->dq, r * d * esz, n->img, d * esz);
    }
    return st;
}

/* Adds query head bh's terms to its K/V head's accumulators: dV[j] += P[i, j] * dO[i] and
 * dK[j] += dS[i, j] * Q[i], over its rows i in order (scale applied by the caller). */
static fa_status cpu_dkv_add(naive_cpu *n, int64_t bh)
{
    const naive_problem *p = &n->base.p;
    size_t d = (size_t)p->dim, x;
    int64_t i, j;
    fa_status st = read_head(n, n->q, bh, p->seq_q, n->qh);
    st = st ? st : read_head(n, n->d_o, bh, p->seq_q, n->doh);
    for (i = 0; i < p->seq_q && st == FA_STATUS_OK; i++) {
        const float *restrict q = n->qh + (size_t)i * d, *restrict g = n->doh + (size_t)i * d;
        st = read_row(n->s, p, bh * p->seq_q + i, n->row);
        st = st ? st : read_row(n->dp, p, bh * p->seq_q + i, n->row2);
        for (j = 0; j < p->seq_k && st == FA_STATUS_OK; j++) {
            float *restrict dk = n->dkh + (size_t)j * d, *restrict dv = n->dvh + (size_t)j * d;
            for (x = 0; x < d; x++) {
                dv[x] += n->row[j] * g[x];
                dk[x] += n->row2[j] * q[x];
            }
        }
    }
    return st;
}

/* Backward 4 for one K/V head (b * Hkv + hkv): dK and dV summed over the query heads of its
 * group, in head order, then stored in the dtype. */
static fa_status cpu_dkv_head(naive_cpu *n, int64_t kv)
{
    const naive_problem *p = &n->base.p;
    int64_t group = p->heads_q / p->heads_kv, b = kv / p->heads_kv, hkv = kv % p->heads_kv, g;
    size_t i, count = (size_t)p->seq_k * (size_t)p->dim;
    fa_status st = FA_STATUS_OK;
    memset(n->dkh, 0, count * sizeof(float));
    memset(n->dvh, 0, count * sizeof(float));
    for (g = 0; g < group && st == FA_STATUS_OK; g++)
        st = cpu_dkv_add(n, b * p->heads_q + hkv * group + g);
    for (i = 0; i < count; i++)
        n->dkh[i] *= p->scale;
    st = st ? st : write_head(n, n->dk, kv, p->seq_k, n->dkh);
    return st ? st : write_head(n, n->dv, kv, p->seq_k, n->dvh);
}

/* ---- the operations ---------------------------------------------------------------------- */

static fa_status cpu_upload(naive_attn *base, const void *q, const void *k, const void *v,
                            char *why, size_t why_size)
{
    naive_cpu *n = (naive_cpu *)base;
    size_t esz = fa_dtype_size(base->p.dtype);
    size_t bytes[3] = {(size_t)naive_q_elems(&base->p) * esz,
                       (size_t)naive_kv_elems(&base->p) * esz,
                       (size_t)naive_kv_elems(&base->p) * esz};
    const void *img[3] = {q, k, v};
    fa_buffer *buf[3] = {n->q, n->k, n->v};
    fa_status st = FA_STATUS_OK;
    int i;
    for (i = 0; i < 3 && st == FA_STATUS_OK; i++) {
        st = fa_buffer_write(buf[i], 0, img[i], bytes[i]);
        if (st != FA_STATUS_OK)
            st = cpu_error(n, st, why, why_size);
    }
    return st;
}

static fa_status cpu_forward(naive_attn *base, char *why, size_t why_size)
{
    naive_cpu *n = (naive_cpu *)base;
    const naive_problem *p = &base->p;
    int64_t bh, heads = p->batch * p->heads_q;
    fa_status st = FA_STATUS_OK;
    n->k_loaded = -1; /* the buffers may have been written since the last pass */
    for (bh = 0; bh < heads && st == FA_STATUS_OK; bh++)
        st = cpu_scores_head(n, bh);
    st = st ? st : cpu_softmax(n);
    for (bh = 0; bh < heads && st == FA_STATUS_OK; bh++)
        st = cpu_pv_head(n, bh);
    return st == FA_STATUS_OK ? st : cpu_error(n, st, why, why_size);
}

static fa_status cpu_download(naive_attn *base, void *o, char *why, size_t why_size)
{
    naive_cpu *n = (naive_cpu *)base;
    size_t bytes = (size_t)naive_q_elems(&base->p) * fa_dtype_size(base->p.dtype);
    fa_status st = fa_buffer_read(n->o, 0, o, bytes);
    return st == FA_STATUS_OK ? st : cpu_error(n, st, why, why_size);
}

static fa_status cpu_upload_do(naive_attn *base, const void *d_o, char *why, size_t why_size)
{
    naive_cpu *n = (naive_cpu *)base;
    size_t bytes = (size_t)naive_q_elems(&base->p) * fa_dtype_size(base->p.dtype);
    fa_status st = fa_buffer_write(n->d_o, 0, d_o, bytes);
    return st == FA_STATUS_OK ? st : cpu_error(n, st, why, why_size);
}

static fa_status cpu_backward(naive_attn *base, char *why, size_t why_size)
{
    naive_cpu *n = (naive_cpu *)base;
    const naive_problem *p = &base->p;
    int64_t bh, kv, heads = p->batch * p->heads_q, kv_heads = p->batch * p->heads_kv;
    fa_status st = FA_STATUS_OK;
    n->k_loaded = -1; /* kh is about to hold other heads */
    for (bh = 0; bh < heads && st == FA_STATUS_OK; bh++)
        st = cpu_dp_head(n, bh);
    st = st ? st : cpu_ds(n);
    for (bh = 0; bh < heads && st == FA_STATUS_OK; bh++)
        st = cpu_dq_head(n, bh);
    for (kv = 0; kv < kv_heads && st == FA_STATUS_OK; kv++)
        st = cpu_dkv_head(n, kv);
    n->k_loaded = -1;
    return st == FA_STATUS_OK ? st : cpu_error(n, st, why, why_size);
}

static fa_status cpu_download_grads(naive_attn *base, void *dq, void *dk, void *dv, char *why,
                                    size_t why_size)
{
    naive_cpu *n = (naive_cpu *)base;
    size_t esz = fa_dtype_size(base->p.dtype);
    size_t qb = (size_t)naive_q_elems(&base->p) * esz, kvb = (size_t)naive_kv_elems(&base->p) * esz;
    fa_status st = fa_buffer_read(n->dq, 0, dq, qb);
    st = st ? st : fa_buffer_read(n->dk, 0, dk, kvb);
    st = st ? st : fa_buffer_read(n->dv, 0, dv, kvb);
    return st == FA_STATUS_OK ? st : cpu_error(n, st, why, why_size);
}

static void cpu_destroy(naive_attn *base)
{
    naive_cpu *n = (naive_cpu *)base;
    fa_buffer_destroy(n->dp);
    fa_buffer_destroy(n->dv);
    fa_buffer_destroy(n->dk);
    fa_buffer_destroy(n->dq);
    fa_buffer_destroy(n->d_o);
    fa_buffer_destroy(n->s);
    fa_buffer_destroy(n->o);
    fa_buffer_destroy(n->v);
    fa_buffer_destroy(n->k);
    fa_buffer_destroy(n->q);
    free(n->qh);
    free(n->kh);
    free(n->vh);
    free(n->row);
    free(n->acc);
    free(n->img);
    free(n->doh);
    free(n->row2);
    free(n->dkh);
    free(n->dvh);
    free(n);
}

static const naive_ops cpu_ops = {.upload = cpu_upload,
                                  .forward = cpu_forward,
                                  .download = cpu_download,
                                  .destroy = cpu_destroy,
                                  .upload_do = cpu_upload_do,
                                  .backward = cpu_backward,
                                  .download_grads = cpu_download_grads};

/* The backward's buffers: dO and dQ like Q, dK and dV like K, and dP like S/P. */
static fa_status cpu_create_backward(naive_cpu *n, const naive_problem *p)
{
    size_t esz = fa_dtype_size(p->dtype);
    size_t qb = nonempty((size_t)naive_q_elems(p) * esz);
    size_t kvb = nonempty((size_t)naive_kv_elems(p) * esz);
    fa_status st = fa_buffer_create(n->ctx, qb, &n->d_o);
    st = st ? st : fa_buffer_create(n->ctx, qb, &n->dq);
    st = st ? st : fa_buffer_create(n->ctx, kvb, &n->dk);
    st = st ? st : fa_buffer_create(n->ctx, kvb, &n->dv);
    return st ? st : fa_buffer_create(n->ctx, nonempty((size_t)naive_sp_bytes(p)), &n->dp);
}

fa_status naive_create_cpu(naive_attn **out, fa_context *ctx, const naive_problem *p, char *why,
                           size_t why_size)
{
    size_t esz = fa_dtype_size(p->dtype);
    naive_cpu *n;
    fa_status st = naive_check_size(p, 0, "", why, why_size);
    *out = NULL;
    /* The cpu backend's buffers are host memory: a size over what is available would be
     * granted by overcommit and the process killed while filling it. */
    if (st == FA_STATUS_OK && p->host_available != 0 && naive_total_bytes(p) > p->host_available)
        st = naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                        "naive buffers need %llu bytes, more than the %llu bytes of host memory "
                        "available (%s)",
                        (unsigned long long)naive_total_bytes(p),
                        (unsigned long long)p->host_available,
                        p->host_source ? p->host_source : "");
    if (st != FA_STATUS_OK)
        return st;
    n = (naive_cpu *)naive_alloc(sizeof *n, &cpu_ops, p, why, why_size);
    if (!n)
        return FA_STATUS_OUT_OF_MEMORY;
    n->ctx = ctx;
    n->k_loaded = -1;
    st = fa_buffer_create(ctx, nonempty((size_t)naive_q_elems(p) * esz), &n->q);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)naive_kv_elems(p) * esz), &n->k);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)naive_kv_elems(p) * esz), &n->v);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)naive_q_elems(p) * esz), &n->o);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)naive_sp_bytes(p)), &n->s);
    if (st == FA_STATUS_OK && p->backward)
        st = cpu_create_backward(n, p);
    if (st != FA_STATUS_OK)
        st = cpu_error(n, st, why, why_size);
    else
        st = cpu_alloc_scratch(n, why, why_size);
    if (st != FA_STATUS_OK) {
        cpu_destroy(&n->base);
        return st;
    }
    *out = &n->base;
    return FA_STATUS_OK;
}
