/*
 * mod_reference.c - naive fp64 attention with the score modifiers and dropout, forward and
 * backward, for test_modifiers (shapes in mod_reference.h). Per query row, every key's score is
 * materialised:
 *   1. t = scale * q.k; s = softcap ? cap * tanh(t / cap) : t; s += -slope[h] * |i' - j|
 *      (i' = i + Sk - Sq) + bias[b][h][i][j]; keys outside the mask or the window are dropped
 *   2. the softmax over the row's keys and the sink: m = max(sink, max s), l = e^(sink - m) +
 *      sum e^(s - m), P = e^(s - m) / l, LSE = m + log l (the log of the denominator)
 *   3. O = sum_j P_j Z_j V_j with Z_j = keep(b, h, i, j) * scale_dropout (1 without dropout)
 *   4. backward: dP_j = Z_j dO.V_j, D = dO.O, dS_j = P_j (dP_j - D), the gradient through the
 *      score g_j = dS_j * (1 - tanh^2) * scale; dQ += g_j K_j, dK_j += g_j q, dV_j += P_j Z_j dO,
 *      dsink[h] -= e^(sink - LSE) * D
 */
#include "mod_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- Philox4x32-10 --------------------------------------------------------------------------- */

/* The round multipliers and the Weyl sequence that bumps the key (Salmon et al., table 2). */
static const uint32_t PHILOX_M[2] = {0xD2511F53u, 0xCD9E8D57u};
static const uint32_t PHILOX_W[2] = {0x9E3779B9u, 0xBB67AE85u};

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t prod = (uint64_t)a * b;
    *hi = (uint32_t)(prod >> 32);
    *lo = (uint32_t)(prod & 0xffffffffu);
}

void mod_philox(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
    uint32_t key[2] = {k0, k1};
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M[0], ctr[0], &hi0, &lo0);
        mulhilo(PHILOX_M[1], ctr[2], &hi1, &lo1);
        uint32_t out[4] = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
        for (int w = 0; w < 4; w++)
            ctr[w] = out[w];
        key[0] += PHILOX_W[0]; /* bumped after every round; the last bump goes unused */
        key[1] += PHILOX_W[1];
    }
}

int mod_keep(const fa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    uint32_t ctr[4] = {(uint32_t)(j / 4), (uint32_t)i, (uint32_t)(b * p->heads_q + h),
                       p->dropout_offset};
    mod_philox(ctr, (uint32_t)(p->dropout_seed & 0xffffffffu), (uint32_t)(p->dropout_seed >> 32));
    double threshold = floor((double)p->dropout_p * 4294967296.0);
    return (double)ctr[j % 4] >= threshold;
}

double mod_dropout_scale(const fa_problem *p)
{
    return (float)(1.0 / (1.0 - (double)p->dropout_p));
}

/* ---- masks ----------------------------------------------------------------------------------- */

bool mod_allowed(const fa_problem *p, int64_t i, int64_t j)
{
    const int64_t diag = i + p->seqlen_k - p->seqlen_q; /* i': the bottom-right diagonal */
    if (p->mask == FA_MASK_CAUSAL_TOP_LEFT && j > i)
        return false;
    if (p->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT && j > diag)
        return false;
    if (p->window && p->window_left >= 0 && j < diag - p->window_left)
        return false;
    if (p->window && p->window_right >= 0 && j > diag + p->window_right)
        return false;
    return true;
}

/* ---- one row --------------------------------------------------------------------------------- */

static void *zeros(int64_t n, size_t size)
{
    void *m = calloc((size_t)(n > 0 ? n : 1), size);
    if (!m) {
        fprintf(stderr, "mod_reference: out of memory\n");
        abort();
    }
    return m;
}

/* Where one row (b, h, i) reads and its scratch ([seqlen_k] each). */
typedef struct row_ctx {
    const fa_problem *p;
    mod_ref *r;
    int64_t b, h, i, row, kv0; /* row: dense index of (b, h, i); kv0: dense row of key 0 */
    double scale, sink;        /* sink -inf: none */
    double *s, *dcap, *z;      /* scores, d(softcap)/dt, dropout factors */
    bool *on;                  /* the key is allowed */
    unsigned char *seen;       /* [batch, heads_kv, seqlen_k] */
} row_ctx;

/* Block-sparse: key j's block is computed for the row's block (the dense mask, its batch and
 * head dimensions broadcast where they are 1). */
static bool block_on(const row_ctx *c, int64_t j)
{
    const fa_problem *p = c->p;
    if (!p->block_sparse)
        return true;
    int64_t nq = (p->seqlen_q + p->sparse_block_q - 1) / p->sparse_block_q;
    int64_t nk = (p->seqlen_k + p->sparse_block_k - 1) / p->sparse_block_k;
    int64_t b = p->sparse_batch > 1 ? c->b : 0, h = p->sparse_heads > 1 ? c->h : 0;
    int64_t at = ((b * p->sparse_heads + h) * nq + c->i / p->sparse_block_q) * nk +
                 j / p->sparse_block_k;
    return c->r->block_mask[at] != 0;
}

/* Step 1: the modified scores of the row's allowed keys; returns how many there are. */
static int64_t row_scores(row_ctx *c)
{
    const fa_problem *p = c->p;
    const int64_t d = p->head_dim, sk = p->seqlen_k;
    const double *q = c->r->q + c->row * d;
    int64_t n = 0;
    for (int64_t j = 0; j < sk; j++) {
        c->on[j] = mod_allowed(p, c->i, j) && block_on(c, j);
        if (!c->on[j])
            continue;
        n++;
        c->seen[c->kv0 + j] = 1;
        double t = 0.0;
        for (int64_t x = 0; x < d; x++)
            t += q[x] * c->r->k[(c->kv0 + j) * d + x];
        t *= c->scale;
        c->dcap[j] = 1.0;
        if (p->softcap > 0.0f) {
            double th = tanh(t / (double)p->softcap);
            t = (double)p->softcap * th;
            c->dcap[j] = 1.0 - th * th;
        }
        if (p->alibi)
            t -= c->r->slopes[(p->alibi == 2 ? c->b * p->heads_q : 0) + c->h] *
                 fabs((double)(c->i + sk - p->seqlen_q - j));
        if (p->bias)
            t += c->r->bias[c->row * sk + j];
        c->s[j] = t;
        c->z[j] = p->dropout_p > 0.0f
                      ? (mod_keep(p, c->b, c->h, c->i, j) ? mod_dropout_scale(p) : 0.0)
                      : 1.0;
    }
    return n;
}

/* Steps 2 and 3: P in place of S, O and LSE. */
static void row_forward(row_ctx *c, int64_t n)
{
    const fa_problem *p = c->p;
    const int64_t d = p->head_dim, sk = p->seqlen_k;
    double *o = c->r->o + c->row * d;
    c->r->row_empty[c->row] = n == 0;
    if (n == 0 && c->sink == -INFINITY) {
        c->r->lse[c->row] = -INFINITY; /* O stays 0 */
        return;
    }
    double m = c->sink;
    for (int64_t j = 0; j < sk; j++)
        if (c->on[j] && c->s[j] > m)
            m = c->s[j];
    double l = c->sink == -INFINITY ? 0.0 : exp(c->sink - m);
    for (int64_t j = 0; j < sk; j++)
        if (c->on[j])
            l += exp(c->s[j] - m);
    for (int64_t j = 0; j < sk; j++) {
        c->s[j] = c->on[j] ? exp(c->s[j] - m) / l : 0.0;
        for (int64_t x = 0; x < d && c->on[j]; x++)
            o[x] += c->s[j] * c->z[j] * c->r->v[(c->kv0 + j) * d + x];
    }
    c->r->lse[c->row] = m + log(l);
}

/* Step 4. */
static void row_backward(row_ctx *c)
{
    const fa_problem *p = c->p;
    const int64_t d = p->head_dim, sk = p->seqlen_k;
    mod_ref *r = c->r;
    const double *q = r->q + c->row * d, *dout = r->dout + c->row * d, *o = r->o + c->row * d;
    if (r->lse[c->row] == -INFINITY)
        return;
    double dsum = 0.0;
    for (int64_t x = 0; x < d; x++)
        dsum += dout[x] * o[x];
    if (p->sinks)
        r->dsinks[c->h] -= exp(c->sink - r->lse[c->row]) * dsum;
    for (int64_t j = 0; j < sk; j++) {
        if (!c->on[j])
            continue;
        const double *kj = r->k + (c->kv0 + j) * d, *vj = r->v + (c->kv0 + j) * d;
        double dp = 0.0;
        for (int64_t x = 0; x < d; x++)
            dp += dout[x] * vj[x];
        dp *= c->z[j];
        double g = c->s[j] * (dp - dsum) * c->dcap[j] * c->scale;
        for (int64_t x = 0; x < d; x++) {
            r->dq[c->row * d + x] += g * kj[x];
            r->dk[(c->kv0 + j) * d + x] += g * q[x];
            r->dv[(c->kv0 + j) * d + x] += c->s[j] * c->z[j] * dout[x];
        }
    }
}

void mod_ref_compute(const fa_problem *p, mod_ref *r)
{
    const int64_t rows = p->batch * p->heads_q * p->seqlen_q;
    const int64_t keys = p->batch * p->heads_kv * p->seqlen_k, d = p->head_dim;
    const int64_t sk = p->seqlen_k, group = p->heads_q / p->heads_kv;
    r->o = zeros(rows * d, sizeof(double));
    r->lse = zeros(rows, sizeof(double));
    r->dq = zeros(rows * d, sizeof(double));
    r->dk = zeros(keys * d, sizeof(double));
    r->dv = zeros(keys * d, sizeof(double));
    r->dsinks = zeros(p->heads_q, sizeof(double));
    r->row_empty = zeros(rows, 1);
    r->key_unseen = zeros(keys, 1);
    row_ctx c = {.p = p, .r = r, .s = zeros(sk, sizeof(double)),
                 .dcap = zeros(sk, sizeof(double)), .z = zeros(sk, sizeof(double)),
                 .on = zeros(sk, sizeof(bool)), .seen = zeros(keys, 1)};
    c.scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)d));
    for (c.b = 0; c.b < p->batch; c.b++)
        for (c.h = 0; c.h < p->heads_q; c.h++)
            for (c.i = 0; c.i < p->seqlen_q; c.i++) {
                c.row = (c.b * p->heads_q + c.h) * p->seqlen_q + c.i;
                c.kv0 = (c.b * p->heads_kv + c.h / group) * sk;
                c.sink = p->sinks ? r->sinks[c.h] : -INFINITY;
                row_forward(&c, row_scores(&c));
                if (r->dout)
                    row_backward(&c);
            }
    for (int64_t j = 0; j < keys; j++)
        r->key_unseen[j] = !c.seen[j];
    free(c.s);
    free(c.dcap);
    free(c.z);
    free(c.on);
    free(c.seen);
}

void mod_ref_free(mod_ref *r)
{
    double *all[] = {r->o, r->lse, r->dq, r->dk, r->dv, r->dsinks};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free(r->row_empty);
    free(r->key_unseen);
}
