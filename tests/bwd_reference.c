/*
 * bwd_reference.c - naive fp64 attention backward for test_backward (shapes in
 * bwd_reference.h). Per query row: S = scale q K^T, P by a direct softmax, O = P V; then
 * dP = dO V^T, D = sum_j P dP, dS = P (dP - D), dQ = scale dS K, and every key of the row's
 * K/V head gets dK += scale dS^T q, dV += P^T dO (so a GQA group's query heads add up).
 */
#include "bwd_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* One row's scratch and where it reads and writes. */
typedef struct row_ctx {
    const fa_problem *p;
    const bwd_ref *f;
    double scale;
    double *pr, *dp;    /* [seqlen_k]: one row of P and dP */
    unsigned char *seen; /* [batch, heads_kv, seqlen_k]: some row attends to the key */
} row_ctx;

static void *zeros(int64_t n, size_t size)
{
    void *m = calloc((size_t)(n > 0 ? n : 1), size);
    if (!m) {
        fprintf(stderr, "bwd_reference: out of memory\n");
        abort();
    }
    return m;
}

/* Query row i may see key j: the two causal alignments of fa_mask, written out again here. */
static int allowed(const fa_problem *p, int64_t i, int64_t j)
{
    if (p->mask == FA_MASK_CAUSAL_TOP_LEFT)
        return j <= i;
    if (p->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT)
        return j <= i + (p->seqlen_k - p->seqlen_q);
    return 1;
}

/* S = scale q K^T for row `row` (query index i) against keys kv0.., -inf where masked;
   returns the row's maximum (-inf when it sees no key). */
static double scores(row_ctx *c, int64_t row, int64_t kv0)
{
    const fa_problem *p = c->p;
    const int64_t d = p->head_dim, i = row % p->seqlen_q;
    const double *q = c->f->q + row * d;
    double m = -INFINITY;
    for (int64_t j = 0; j < p->seqlen_k; j++) {
        c->pr[j] = -INFINITY;
        if (!allowed(p, i, j))
            continue;
        double s = 0.0;
        for (int64_t x = 0; x < d; x++)
            s += q[x] * c->f->k[(kv0 + j) * d + x];
        c->pr[j] = c->scale * s;
        m = c->pr[j] > m ? c->pr[j] : m;
        c->seen[kv0 + j] = 1;
    }
    return m;
}

static void ref_row(row_ctx *c, int64_t row, int64_t kv0)
{
    const bwd_ref *f = c->f;
    const int64_t d = c->p->head_dim, sk = c->p->seqlen_k;
    const double *q = f->q + row * d, *dout = f->dout + row * d;
    double m = scores(c, row, kv0), l = 0.0, dsum = 0.0;
    f->row_empty[row] = m == -INFINITY;
    if (f->row_empty[row])
        return; /* O and dQ stay 0, and no key gets anything from this row */
    for (int64_t j = 0; j < sk; j++)
        l += c->pr[j] = exp(c->pr[j] - m);
    for (int64_t j = 0; j < sk; j++) {
        c->pr[j] /= l;
        c->dp[j] = 0.0;
        for (int64_t x = 0; x < d; x++) {
            f->o[row * d + x] += c->pr[j] * f->v[(kv0 + j) * d + x];
            c->dp[j] += dout[x] * f->v[(kv0 + j) * d + x];
        }
        dsum += c->pr[j] * c->dp[j];
    }
    for (int64_t j = 0; j < sk; j++) {
        double ds = c->pr[j] * (c->dp[j] - dsum);
        for (int64_t x = 0; x < d; x++) {
            f->dq[row * d + x] += c->scale * ds * f->k[(kv0 + j) * d + x];
            f->dk[(kv0 + j) * d + x] += c->scale * ds * q[x];
            f->dv[(kv0 + j) * d + x] += c->pr[j] * dout[x];
        }
    }
}

void bwd_ref_compute(const fa_problem *p, bwd_ref *f)
{
    const int64_t rows = p->batch * p->heads_q * p->seqlen_q;
    const int64_t keys = p->batch * p->heads_kv * p->seqlen_k, d = p->head_dim;
    f->o = zeros(rows * d, sizeof(double));
    f->dq = zeros(rows * d, sizeof(double));
    f->dk = zeros(keys * d, sizeof(double));
    f->dv = zeros(keys * d, sizeof(double));
    f->row_empty = zeros(rows, 1);
    f->key_unseen = zeros(keys, 1);
    row_ctx c = {p, f, p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)d)),
                 zeros(p->seqlen_k, sizeof(double)), zeros(p->seqlen_k, sizeof(double)),
                 zeros(keys, 1)};
    const int64_t group = p->heads_q / p->heads_kv;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                int64_t row = (b * p->heads_q + h) * p->seqlen_q + i;
                int64_t kv0 = (b * p->heads_kv + h / group) * p->seqlen_k;
                ref_row(&c, row, kv0);
            }
    for (int64_t j = 0; j < keys; j++)
        f->key_unseen[j] = !c.seen[j];
    free(c.pr);
    free(c.dp);
    free(c.seen);
}

void bwd_ref_free(bwd_ref *f)
{
    free(f->o);
    free(f->dq);
    free(f->dk);
    free(f->dv);
    free(f->row_empty);
    free(f->key_unseen);
}
