/*
 * ring_attention.c - ring attention across MPI ranks with flashattn_ring: a causal sequence of
 * N tokens split over P ranks in the zigzag layout, the ring forward and backward on each
 * rank's slice, and each rank's O compared with one device computing the whole sequence.
 *
 *   mpirun -np 4 ./ring_attention [cpu|opencl]
 *   (as root on one machine: mpirun --allow-run-as-root --oversubscribe -np 4 ...)
 */
#include "flashattn_ring_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, HQ = 4, HKV = 2, N = 96, D = 32 };

/* The same pseudo-random value on every rank for element i of tensor `which`. */
static float value(int which, size_t i)
{
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(which * 40503u + 17u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (float)(x & 0xffff) / 32768.0f - 1.0f;
}

/* Whole [B, H, N, D] tensor (BHSD) and this rank's rows of it, chunk after chunk. */
static void fill(float *whole, float *local, int which, int heads, const fa_ring_slice *s)
{
    for (size_t i = 0; i < (size_t)B * heads * N * D; i++)
        whole[i] = value(which, i);
    for (int bh = 0; bh < B * heads; bh++)
        for (int c = 0, first = 0; c < s->chunks; first += (int)s->len[c], c++)
            memcpy(local + ((size_t)bh * s->rows + first) * D,
                   whole + ((size_t)bh * N + s->start[c]) * D, (size_t)s->len[c] * D * 4);
}

static fa_buffer *buffer(fa_context *ctx, const float *data, size_t floats)
{
    fa_buffer *b = NULL;
    if (fa_buffer_create(ctx, floats * 4, &b) == FA_STATUS_OK && data)
        fa_buffer_write(b, 0, data, floats * 4);
    return b;
}

/* O of the whole sequence on one device, for comparison. */
static int whole_forward(fa_context *ctx, const float *q, const float *k, const float *v,
                         float *o)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, B, HQ, HKV, N, N, D);
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    fa_plan *plan = NULL;
    size_t nq = (size_t)B * HQ * N * D, nk = (size_t)B * HKV * N * D;
    fa_buffer *bq = buffer(ctx, q, nq), *bk = buffer(ctx, k, nk), *bv = buffer(ctx, v, nk);
    fa_buffer *bo = buffer(ctx, NULL, nq);
    int rc = fa_plan_create(ctx, &p, &plan) != FA_STATUS_OK ||
             fa_forward(ctx, plan, bq, bk, bv, bo, NULL) != FA_STATUS_OK ||
             fa_buffer_read(bo, 0, o, nq * 4) != FA_STATUS_OK;
    fa_plan_destroy(plan);
    fa_buffer_destroy(bq);
    fa_buffer_destroy(bk);
    fa_buffer_destroy(bv);
    fa_buffer_destroy(bo);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    fa_ring_transport t;
    fa_context_options co = {FA_BACKEND_CPU, 0};
    if (argc > 1)
        fa_backend_from_name(argv[1], &co.backend);
    fa_context *ctx = NULL;
    char why[512] = "";
    if (fa_ring_transport_mpi(MPI_COMM_WORLD, &t) != FA_STATUS_OK ||
        fa_context_create(&ctx, &co, why, sizeof why) != FA_STATUS_OK) {
        fprintf(stderr, "ring_attention: %s\n", why);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* 1. This rank's rows: chunks r and 2P-1-r of 2P, so causal work is balanced. */
    fa_ring_slice s;
    fa_ring_slice_of(FA_RING_ZIGZAG, N, t.size, t.rank, &s);
    size_t nq = (size_t)B * HQ * s.rows * D, nk = (size_t)B * HKV * s.rows * D;
    size_t wq = (size_t)B * HQ * N * D, wk = (size_t)B * HKV * N * D;
    float *q = malloc(wq * 4), *k = malloc(wk * 4), *v = malloc(wk * 4), *ref = malloc(wq * 4);
    float *lq = malloc(nq * 4 + 4), *lk = malloc(nk * 4 + 4), *lv = malloc(nk * 4 + 4);
    float *lo = malloc(nq * 4 + 4);
    fill(q, lq, 0, HQ, &s);
    fill(k, lk, 1, HKV, &s);
    fill(v, lv, 2, HKV, &s);

    /* 2. The local tensors on the device, the whole problem described once. */
    fa_problem whole;
    fa_problem_init(&whole, FA_DTYPE_F32, FA_LAYOUT_BHSD, B, HQ, HKV, N, N, D);
    whole.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    fa_ring_tensors x = {0};
    x.q = buffer(ctx, lq, nq);
    x.k = buffer(ctx, lk, nk);
    x.v = buffer(ctx, lv, nk);
    x.o = buffer(ctx, NULL, nq);
    x.lse = buffer(ctx, NULL, (size_t)B * HQ * s.rows);
    x.d_o = buffer(ctx, lq, nq); /* any upstream gradient: here Q's values */
    x.dq = buffer(ctx, NULL, nq);
    x.dk = buffer(ctx, NULL, nk);
    x.dv = buffer(ctx, NULL, nk);
    fa_ring_stats stats;
    fa_ring_options opts = {FA_RING_ZIGZAG, FA_LAYOUT_BHSD, 0, &stats};

    /* 3. The ring: forward, then backward from the forward's O and LSE. Collective calls. */
    fa_status st = fa_ring_forward(ctx, &t, &whole, &opts, &x, why, sizeof why);
    if (st == FA_STATUS_OK)
        st = fa_ring_backward(ctx, &t, &whole, &opts, &x, why, sizeof why);
    int rc = st != FA_STATUS_OK;
    if (rc)
        fprintf(stderr, "rank %d: %s: %s\n", t.rank, fa_status_name(st), why);

    /* 4. This rank's O against one device computing the whole sequence. */
    double err = 0.0;
    if (!rc && !(rc = whole_forward(ctx, q, k, v, ref))) {
        fa_buffer_read(x.o, 0, lo, nq * 4);
        for (int bh = 0; bh < B * HQ; bh++)
            for (int c = 0, first = 0; c < s.chunks; first += (int)s.len[c], c++)
                for (int64_t i = 0; i < s.len[c] * D; i++) {
                    double e = fabs(lo[((size_t)bh * s.rows + first) * D + i] -
                                    ref[((size_t)bh * N + s.start[c]) * D + i]);
                    err = e > err ? e : err;
                }
        printf("rank %d of %d: rows %lld (chunks at %lld and %lld), max |O - one device| %.2g, "
               "backward %.2f ms\n", t.rank, t.size, (long long)s.rows, (long long)s.start[0],
               (long long)s.start[1], err, stats.total_s * 1e3);
        rc = err > 1e-5;
    }
    fa_buffer *all[9] = {(fa_buffer *)x.q, (fa_buffer *)x.k, (fa_buffer *)x.v, x.o, x.lse,
                         (fa_buffer *)x.d_o, x.dq, x.dk, x.dv};
    for (int i = 0; i < 9; i++)
        fa_buffer_destroy(all[i]);
    float *host[8] = {q, k, v, ref, lq, lk, lv, lo};
    for (int i = 0; i < 8; i++)
        free(host[i]);
    fa_context_destroy(ctx);
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
