/*
 * naive.c - NAIVE attention for `flashattn bench` (see naive.h): the sizes, limits, messages and
 * dtype conversions both implementations share, and the public calls, which convert the
 * caller's f32 arrays to and from device images and dispatch through the instance's table
 * (naive_impl.h) to naive_cpu.c or naive_cl.c. Not part of the library.
 */
#include "naive_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

uint64_t naive_q_elems(const naive_problem *p)
{
    return mul_sat(mul_sat((uint64_t)p->batch * (uint64_t)p->heads_q, (uint64_t)p->seq_q),
                   (uint64_t)p->dim);
}

uint64_t naive_kv_elems(const naive_problem *p)
{
    return mul_sat(mul_sat((uint64_t)p->batch * (uint64_t)p->heads_kv, (uint64_t)p->seq_k),
                   (uint64_t)p->dim);
}

uint64_t naive_total_bytes(const naive_problem *p)
{
    uint64_t esz = fa_dtype_size(p->dtype);
    /* Q and O (and dO, dQ) are Q-sized, K and V (and dK, dV) K-sized: two or four of each. */
    uint64_t each = p->backward ? 4 : 2, matrices = p->backward ? 2 : 1;
    uint64_t io = add_sat(mul_sat(naive_q_elems(p), each * esz),
                          mul_sat(naive_kv_elems(p), each * esz));
    return add_sat(io, mul_sat(naive_sp_bytes(p), matrices));
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

/* ---- dtype conversions ------------------------------------------------------------------- */

void naive_to_f32(const void *src, fa_dtype dtype, size_t count, float *dst)
{
    size_t i;
    if (count == 0)
        return;
    if (dtype == FA_DTYPE_F16)
        for (i = 0; i < count; i++)
            dst[i] = fa_f16_to_f32(((const uint16_t *)src)[i]);
    else if (dtype == FA_DTYPE_BF16)
        for (i = 0; i < count; i++)
            dst[i] = fa_bf16_to_f32(((const uint16_t *)src)[i]);
    else
        memcpy(dst, src, count * sizeof(float));
}

void naive_from_f32(const float *src, fa_dtype dtype, size_t count, void *dst)
{
    size_t i;
    if (count == 0)
        return;
    if (dtype == FA_DTYPE_F16)
        for (i = 0; i < count; i++)
            ((uint16_t *)dst)[i] = fa_f32_to_f16(src[i]);
    else if (dtype == FA_DTYPE_BF16)
        for (i = 0; i < count; i++)
            ((uint16_t *)dst)[i] = fa_f32_to_bf16(src[i]);
    else
        memcpy(dst, src, count * sizeof(float));
}

/* `count` f32 values converted into a malloc'ed image of the dtype. */
static fa_status pack_image(const float *values, size_t count, fa_dtype dtype, void **img,
                            char *why, size_t why_size)
{
    *img = malloc(count ? count * fa_dtype_size(dtype) : 1);
    if (!*img)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                          "out of host memory for a %zu-element transfer", count);
    naive_from_f32(values, dtype, count, *img);
    return FA_STATUS_OK;
}

/* ---- the public calls, dispatched to the instance's implementation ----------------------- */

naive_attn *naive_alloc(size_t size, const naive_ops *ops, const naive_problem *p, char *why,
                        size_t why_size)
{
    naive_attn *n = calloc(1, size);
    if (!n) {
        naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "out of host memory");
        return NULL;
    }
    n->ops = ops;
    n->p = *p;
    return n;
}

fa_status naive_upload(naive_attn *n, const float *q, const float *k, const float *v, char *why,
                       size_t why_size)
{
    const float *values[3] = {q, k, v};
    size_t count[3] = {(size_t)naive_q_elems(&n->p), (size_t)naive_kv_elems(&n->p),
                       (size_t)naive_kv_elems(&n->p)};
    void *img[3] = {NULL, NULL, NULL};
    fa_status st = FA_STATUS_OK;
    int i;
    for (i = 0; i < 3 && st == FA_STATUS_OK; i++)
        st = pack_image(values[i], count[i], n->p.dtype, &img[i], why, why_size);
    st = st ? st : n->ops->upload(n, img[0], img[1], img[2], why, why_size);
    for (i = 0; i < 3; i++)
        free(img[i]);
    return st;
}

fa_status naive_forward(naive_attn *n, char *why, size_t why_size)
{
    return n->ops->forward(n, why, why_size);
}

fa_status naive_download(naive_attn *n, float *o, char *why, size_t why_size)
{
    size_t count = (size_t)naive_q_elems(&n->p);
    void *img = malloc(count * fa_dtype_size(n->p.dtype) + 1);
    fa_status st;
    if (!img)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "out of host memory for O");
    st = n->ops->download(n, img, why, why_size);
    if (st == FA_STATUS_OK)
        naive_to_f32(img, n->p.dtype, count, o);
    free(img);
    return st;
}

fa_status naive_upload_do(naive_attn *n, const float *d_o, char *why, size_t why_size)
{
    void *img = NULL;
    fa_status st;
    if (!n->p.backward)
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size,
                          "naive: the instance was made without the backward");
    st = pack_image(d_o, (size_t)naive_q_elems(&n->p), n->p.dtype, &img, why, why_size);
    st = st ? st : n->ops->upload_do(n, img, why, why_size);
    free(img);
    return st;
}

fa_status naive_backward(naive_attn *n, char *why, size_t why_size)
{
    if (!n->p.backward)
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size,
                          "naive: the instance was made without the backward");
    return n->ops->backward(n, why, why_size);
}

fa_status naive_download_grads(naive_attn *n, float *dq, float *dk, float *dv, char *why,
                               size_t why_size)
{
    size_t nq = (size_t)naive_q_elems(&n->p), nkv = (size_t)naive_kv_elems(&n->p);
    size_t esz = fa_dtype_size(n->p.dtype);
    void *img[3];
    fa_status st = FA_STATUS_OUT_OF_MEMORY;
    if (!n->p.backward)
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size,
                          "naive: the instance was made without the backward");
    img[0] = malloc(nq * esz + 1);
    img[1] = malloc(nkv * esz + 1);
    img[2] = malloc(nkv * esz + 1);
    if (img[0] && img[1] && img[2])
        st = n->ops->download_grads(n, img[0], img[1], img[2], why, why_size);
    else
        naive_fail(st, why, why_size, "out of host memory for the gradients");
    if (st == FA_STATUS_OK) {
        naive_to_f32(img[0], n->p.dtype, nq, dq);
        naive_to_f32(img[1], n->p.dtype, nkv, dk);
        naive_to_f32(img[2], n->p.dtype, nkv, dv);
    }
    free(img[0]);
    free(img[1]);
    free(img[2]);
    return st;
}

uint64_t naive_uncounted_bytes(const naive_attn *n)
{
    return n && n->ops->uncounted_bytes ? n->ops->uncounted_bytes(n) : 0;
}

void naive_destroy(naive_attn *n)
{
    if (n)
        n->ops->destroy(n);
}
