/*
 * oracle.c - naive reference attention for the tests (fp64, and at the storage precision).
 * Written for clarity, not speed: one query row at a time, every score materialised. It shares
 * no code with the library except the f16/bf16 conversions, which test_convert checks against
 * an independent implementation.
 */
#include "oracle.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

double oracle_load(fa_dtype dtype, const void *base, int64_t idx)
{
    switch (dtype) {
    case FA_DTYPE_F32: {
        float f;
        memcpy(&f, (const char *)base + idx * 4, 4);
        return f;
    }
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)base + idx * 2, 2);
        return dtype == FA_DTYPE_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
    }
    }
    return NAN;
}

void oracle_store(fa_dtype dtype, void *base, int64_t idx, double x)
{
    float f = (float)x;
    if (dtype == FA_DTYPE_F32) {
        memcpy((char *)base + idx * 4, &f, 4);
        return;
    }
    uint16_t h = dtype == FA_DTYPE_F16 ? fa_f32_to_f16(f) : fa_f32_to_bf16(f);
    memcpy((char *)base + idx * 2, &h, 2);
}

double oracle_round(fa_dtype dtype, double x)
{
    float f = (float)x;
    if (dtype == FA_DTYPE_F16)
        return fa_f16_to_f32(fa_f32_to_f16(f));
    if (dtype == FA_DTYPE_BF16)
        return fa_bf16_to_f32(fa_f32_to_bf16(f));
    return f;
}

float oracle_scale(const fa_problem *p)
{
    return p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
}

int64_t oracle_keys_allowed(const fa_problem *p, int64_t i)
{
    int64_t last; /* the last key row i may see */
    switch (p->mask) {
    case FA_MASK_CAUSAL_TOP_LEFT:
        last = i;
        break;
    case FA_MASK_CAUSAL_BOTTOM_RIGHT:
        last = i + (p->seqlen_k - p->seqlen_q);
        break;
    default:
        last = p->seqlen_k - 1;
        break;
    }
    if (last < 0)
        return 0;
    return last + 1 < p->seqlen_k ? last + 1 : p->seqlen_k;
}

static int64_t at(const fa_tensor_layout *t, int64_t b, int64_t h, int64_t s)
{
    return t->offset + b * t->stride_batch + h * t->stride_head + s * t->stride_seq;
}

/* Where one query row reads and writes: Q row, K/V rows of its KV head, dense O and LSE. */
typedef struct row_ref {
    const double *q, *k, *v; /* Q row; K and V row 0 of the KV head */
    int64_t k_ss, v_ss;      /* seq strides of K and V */
    double *o, *lse;         /* dense output row and LSE element */
    int64_t n;               /* keys allowed */
} row_ref;

typedef void (*row_fn)(const fa_problem *p, const row_ref *r, double *scores);

static void for_each_row(const fa_problem *p, const double *q, const double *k, const double *v,
                         double *o, double *lse, row_fn fn)
{
    double *scores = malloc(sizeof *scores * (size_t)(p->seqlen_k > 0 ? p->seqlen_k : 1));
    if (!scores)
        abort(); /* the tests cannot go on without memory */
    int64_t group = p->heads_q / p->heads_kv; /* query heads per KV head (GQA) */
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t h = 0; h < p->heads_q; h++) {
            int64_t hk = h / group;
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                int64_t row = (b * p->heads_q + h) * p->seqlen_q + i;
                row_ref r = {q + at(&p->q, b, h, i), NULL, NULL, p->k.stride_seq,
                             p->v.stride_seq, o + row * p->head_dim, lse + row,
                             oracle_keys_allowed(p, i)};
                if (r.n > 0) { /* K and V have no rows at all when seqlen_k = 0 */
                    r.k = k + at(&p->k, b, hk, 0);
                    r.v = v + at(&p->v, b, hk, 0);
                }
                fn(p, &r, scores);
            }
        }
    }
    free(scores);
}

/* A row with no key to attend to: O = 0, LSE = -inf (never NaN). */
static bool empty_row(const fa_problem *p, const row_ref *r)
{
    if (r->n > 0)
        return false;
    for (int64_t x = 0; x < p->head_dim; x++)
        r->o[x] = 0.0;
    *r->lse = -INFINITY;
    return true;
}

static void row_f64(const fa_problem *p, const row_ref *r, double *s)
{
    const int64_t d = p->head_dim;
    const double scale = oracle_scale(p);
    if (empty_row(p, r))
        return;
    /* 1. S = scale * q . k_j over the allowed keys, and its max. */
    double m = -INFINITY;
    for (int64_t j = 0; j < r->n; j++) {
        double dot = 0.0;
        for (int64_t x = 0; x < d; x++)
            dot += r->q[x] * r->k[j * r->k_ss + x];
        s[j] = scale * dot;
        m = s[j] > m ? s[j] : m;
    }
    /* 2. P = exp(S - max), l = sum P. */
    double l = 0.0;
    for (int64_t j = 0; j < r->n; j++) {
        s[j] = exp(s[j] - m);
        l += s[j];
    }
    /* 3. O = P V / l, LSE = max + log l. */
    for (int64_t x = 0; x < d; x++) {
        double acc = 0.0;
        for (int64_t j = 0; j < r->n; j++)
            acc += s[j] * r->v[j * r->v_ss + x];
        r->o[x] = acc / l;
    }
    *r->lse = m + log(l);
}

static void row_lowp(const fa_problem *p, const row_ref *r, double *s)
{
    const int64_t d = p->head_dim;
    const float scale = oracle_scale(p);
    const fa_dtype dt = p->dtype;
    if (empty_row(p, r))
        return;
    /* 1. S in float, rounded to the dtype as a kernel storing S in it would. */
    float m = -INFINITY;
    for (int64_t j = 0; j < r->n; j++) {
        float dot = 0.0f;
        for (int64_t x = 0; x < d; x++)
            dot += (float)r->q[x] * (float)r->k[j * r->k_ss + x];
        s[j] = oracle_round(dt, dot * scale);
        m = (float)s[j] > m ? (float)s[j] : m;
    }
    /* 2. P = exp(S - max) rounded to the dtype; l summed in float. */
    float l = 0.0f;
    for (int64_t j = 0; j < r->n; j++) {
        s[j] = oracle_round(dt, expf((float)s[j] - m));
        l += (float)s[j];
    }
    /* 3. O = P V / l accumulated in float, rounded to the dtype. */
    for (int64_t x = 0; x < d; x++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < r->n; j++)
            acc += (float)s[j] * (float)r->v[j * r->v_ss + x];
        r->o[x] = oracle_round(dt, acc / l);
    }
    *r->lse = m + logf(l);
}

void oracle_attention_f64(const fa_problem *p, const double *q, const double *k,
                          const double *v, double *o, double *lse)
{
    for_each_row(p, q, k, v, o, lse, row_f64);
}

void oracle_attention_lowp(const fa_problem *p, const double *q, const double *k,
                           const double *v, double *o, double *lse)
{
    for_each_row(p, q, k, v, o, lse, row_lowp);
}
