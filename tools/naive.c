/*
 * naive.c - NAIVE attention for `flashattn bench` (see naive.h): the sizes and limits, the
 * dispatch between the CPU and OpenCL implementations, and the CPU one, a plain C loop in f32.
 * Not part of the library: a baseline that materializes S and P on purpose.
 *
 * The CPU loop keeps S/P in an fa_buffer (so the context counts it) and moves it one row at a
 * time through fa_buffer_write/fa_buffer_read, the CPU analogue of a GPU kernel writing S to
 * global memory and the next kernel reading it back. Shapes, per head bh = b * heads_q + h:
 *   Q [B, Hq, Sq, d]   K, V [B, Hkv, Sk, d]   S/P [B * Hq, Sq, Sk] f32   O [B, Hq, Sq, d]
 */
#include "naive.h"

#include "cli_common.h"
#include "cli_memory.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct naive_attn {
    naive_problem p;
    /* cpu */
    fa_context *ctx;
    fa_buffer *q, *k, *v, *o, *s;
    float *qh, *kh, *vh; /* one head of Q, K, V in f32 */
    float *row, *acc;    /* one S/P row; one O row */
    void *img;           /* one head in the storage dtype, for the transfers */
    int64_t k_loaded;    /* index of the K/V head in kh/vh, -1 when none */
    /* opencl */
    naive_cl_attn *cl;
};

/* ---- sizes, limits, messages ------------------------------------------------------------- */

fa_status naive_fail(fa_status status, char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;
    if (!why || why_size == 0)
        return status;
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
    return status;
}

/* a * b, saturating at UINT64_MAX. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t naive_sp_bytes(const naive_problem *p)
{
    uint64_t rows = mul_sat((uint64_t)p->batch * (uint64_t)p->heads_q, (uint64_t)p->seq_q);
    return mul_sat(mul_sat(rows, (uint64_t)p->seq_k), sizeof(float));
}

/* Elements of Q (and O), and of K (and V). */
static uint64_t q_elems(const naive_problem *p)
{
    return mul_sat(mul_sat((uint64_t)p->batch * (uint64_t)p->heads_q, (uint64_t)p->seq_q),
                   (uint64_t)p->dim);
}

static uint64_t kv_elems(const naive_problem *p)
{
    return mul_sat(mul_sat((uint64_t)p->batch * (uint64_t)p->heads_kv, (uint64_t)p->seq_k),
                   (uint64_t)p->dim);
}

uint64_t naive_total_bytes(const naive_problem *p)
{
    uint64_t esz = fa_dtype_size(p->dtype);
    uint64_t io = add_sat(mul_sat(q_elems(p), 2 * esz), mul_sat(kv_elems(p), 2 * esz));
    return add_sat(io, naive_sp_bytes(p));
}

fa_status naive_check_size(const naive_problem *p, uint64_t device_limit, const char *limit_name,
                           char *why, size_t why_size)
{
    uint64_t sp = naive_sp_bytes(p);
    if (sp > p->max_sp_bytes)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "naive S/P needs %llu bytes, more than the cap of %llu "
                          "(--naive-max-bytes)",
                          (unsigned long long)sp, (unsigned long long)p->max_sp_bytes);
    if (device_limit != 0 && sp > device_limit)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "naive S/P needs %llu bytes, more than the device's %s of %llu",
                          (unsigned long long)sp, limit_name,
                          (unsigned long long)device_limit);
    if (sp > SIZE_MAX)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "naive S/P needs %llu bytes, more than this machine can address",
                          (unsigned long long)sp);
    return FA_STATUS_OK;
}

fa_tensor_layout naive_layout(int64_t heads, int64_t seq, int64_t dim)
{
    fa_tensor_layout l;
    l.offset = 0;
    l.stride_seq = dim;
    l.stride_head = seq * dim;
    l.stride_batch = heads * seq * dim;
    return l;
}

/* The tensor packed into a malloc'ed image of its dtype (contiguous BHSD). */
static fa_status pack_image(const cli_tensor *t, fa_dtype dtype, void **img, char *why,
                            size_t why_size)
{
    fa_tensor_layout l = naive_layout(t->shape[1], t->shape[2], t->shape[3]);
    *img = malloc(t->count ? t->count * fa_dtype_size(dtype) : 1);
    if (!*img)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "out of host memory for a %zu-element transfer", t->count);
    cli_pack(t, &l, dtype, *img);
    return FA_STATUS_OK;
}

/* ---- the CPU implementation -------------------------------------------------------------- */

static fa_status cpu_error(naive_attn *n, fa_status st, char *why, size_t why_size)
{
    return naive_fail(st, why, why_size, "naive cpu: %s",
                      cli_status_detail(st, fa_context_last_error(n->ctx)));
}

static fa_status cpu_alloc_scratch(naive_attn *n, char *why, size_t why_size)
{
    const naive_problem *p = &n->p;
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
    return FA_STATUS_OK;
}

/* Buffers cannot be empty, so a size-0 tensor still gets a few bytes. */
static size_t nonempty(size_t bytes)
{
    return bytes ? bytes : sizeof(float);
}

fa_status naive_create_cpu(naive_attn **out, fa_context *ctx, const naive_problem *p, char *why,
                           size_t why_size)
{
    size_t esz = fa_dtype_size(p->dtype);
    const char *source = "";
    uint64_t host = cli_host_memory_available(&source);
    naive_attn *n;
    fa_status st = naive_check_size(p, 0, "", why, why_size);
    *out = NULL;
    /* The cpu backend's buffers are host memory: a size over what is available would be
     * granted by overcommit and the process killed while filling it. */
    if (st == FA_STATUS_OK && host != 0 && naive_total_bytes(p) > host)
        st = naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                        "naive buffers need %llu bytes, more than the %llu bytes of host memory "
                        "available (%s)",
                        (unsigned long long)naive_total_bytes(p), (unsigned long long)host,
                        source);
    if (st != FA_STATUS_OK)
        return st;
    n = calloc(1, sizeof *n);
    if (!n)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "out of host memory");
    n->p = *p;
    n->ctx = ctx;
    n->k_loaded = -1;
    st = fa_buffer_create(ctx, nonempty((size_t)q_elems(p) * esz), &n->q);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)kv_elems(p) * esz), &n->k);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)kv_elems(p) * esz), &n->v);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)q_elems(p) * esz), &n->o);
    st = st ? st : fa_buffer_create(ctx, nonempty((size_t)naive_sp_bytes(p)), &n->s);
    if (st != FA_STATUS_OK)
        st = cpu_error(n, st, why, why_size);
    else
        st = cpu_alloc_scratch(n, why, why_size);
    if (st != FA_STATUS_OK) {
        naive_destroy(n);
        return st;
    }
    *out = n;
    return FA_STATUS_OK;
}

/* Converts `count` values of the storage dtype to f32. */
static void to_f32(const void *src, fa_dtype dtype, size_t count, float *dst)
{
    size_t i;
    if (dtype == FA_DTYPE_F16)
        for (i = 0; i < count; i++)
            dst[i] = fa_f16_to_f32(((const uint16_t *)src)[i]);
    else if (dtype == FA_DTYPE_BF16)
        for (i = 0; i < count; i++)
            dst[i] = fa_bf16_to_f32(((const uint16_t *)src)[i]);
    else
        memcpy(dst, src, count * sizeof(float));
}

static void from_f32(const float *src, fa_dtype dtype, size_t count, void *dst)
{
    size_t i;
    if (dtype == FA_DTYPE_F16)
        for (i = 0; i < count; i++)
            ((uint16_t *)dst)[i] = fa_f32_to_f16(src[i]);
    else if (dtype == FA_DTYPE_BF16)
        for (i = 0; i < count; i++)
            ((uint16_t *)dst)[i] = fa_f32_to_bf16(src[i]);
    else
        memcpy(dst, src, count * sizeof(float));
}

/* Reads head `index` (of `seq` rows) of buf into dst as f32. */
static fa_status read_head(naive_attn *n, const fa_buffer *buf, int64_t index, int64_t seq,
                           float *dst)
{
    size_t count = (size_t)(seq * n->p.dim), bytes = count * fa_dtype_size(n->p.dtype);
    fa_status st = fa_buffer_read(buf, (size_t)index * bytes, n->img, bytes);
    if (st == FA_STATUS_OK)
        to_f32(n->img, n->p.dtype, count, dst);
    return st;
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
static fa_status cpu_scores_head(naive_attn *n, int64_t bh)
{
    const naive_problem *p = &n->p;
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

static fa_status cpu_softmax(naive_attn *n)
{
    const naive_problem *p = &n->p;
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
static fa_status cpu_pv_head(naive_attn *n, int64_t bh)
{
    const naive_problem *p = &n->p;
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
        from_f32(acc, p->dtype, d, n->img);
        st = st ? st : fa_buffer_write(n->o, r * d * esz, n->img, d * esz);
    }
    return st;
}

static fa_status cpu_forward(naive_attn *n, char *why, size_t why_size)
{
    const naive_problem *p = &n->p;
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

/* ---- the shared interface ---------------------------------------------------------------- */

fa_status naive_create_opencl(naive_attn **out, naive_cl *cl, const naive_problem *p, char *why,
                              size_t why_size)
{
    naive_attn *n = calloc(1, sizeof *n);
    fa_status st;
    *out = NULL;
    if (!n)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "out of host memory");
    n->p = *p;
    st = naive_cl_attn_create(&n->cl, cl, p, why, why_size);
    if (st != FA_STATUS_OK) {
        free(n);
        return st;
    }
    *out = n;
    return FA_STATUS_OK;
}

fa_status naive_upload(naive_attn *n, const cli_tensor *q, const cli_tensor *k,
                       const cli_tensor *v, char *why, size_t why_size)
{
    const cli_tensor *t[3] = {q, k, v};
    fa_buffer *buf[3] = {n->q, n->k, n->v};
    void *img[3] = {NULL, NULL, NULL};
    fa_status st = FA_STATUS_OK;
    int i;
    for (i = 0; i < 3 && st == FA_STATUS_OK; i++)
        st = pack_image(t[i], n->p.dtype, &img[i], why, why_size);
    if (st == FA_STATUS_OK && n->cl)
        st = naive_cl_attn_upload(n->cl, img[0], img[1], img[2], why, why_size);
    for (i = 0; i < 3 && st == FA_STATUS_OK && !n->cl; i++) {
        st = fa_buffer_write(buf[i], 0, img[i], t[i]->count * fa_dtype_size(n->p.dtype));
        if (st != FA_STATUS_OK)
            st = cpu_error(n, st, why, why_size);
    }
    for (i = 0; i < 3; i++)
        free(img[i]);
    return st;
}

fa_status naive_forward(naive_attn *n, char *why, size_t why_size)
{
    return n->cl ? naive_cl_attn_forward(n->cl, why, why_size) : cpu_forward(n, why, why_size);
}

fa_status naive_download(naive_attn *n, cli_tensor *o, char *why, size_t why_size)
{
    fa_tensor_layout l = naive_layout(o->shape[1], o->shape[2], o->shape[3]);
    size_t bytes = o->count * fa_dtype_size(n->p.dtype);
    void *img = malloc(bytes + 1);
    fa_status st;
    if (!img)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "out of host memory for O");
    if (n->cl)
        st = naive_cl_attn_download(n->cl, img, why, why_size);
    else if ((st = fa_buffer_read(n->o, 0, img, bytes)) != FA_STATUS_OK)
        st = cpu_error(n, st, why, why_size);
    if (st == FA_STATUS_OK)
        cli_unpack(img, &l, n->p.dtype, o);
    free(img);
    return st;
}

uint64_t naive_uncounted_bytes(const naive_attn *n)
{
    return n && n->cl ? naive_cl_attn_bytes(n->cl) : 0;
}

void naive_destroy(naive_attn *n)
{
    if (!n)
        return;
    naive_cl_attn_destroy(n->cl);
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
    free(n);
}
