/*
 * ring_sinks.c - attention sinks in the backward of the ring: each rank's share of the sinks'
 * gradient over its rows, and the sum of every rank's share around the ring, in rank order so
 * that every rank writes the same f32 [heads_q]. (The forward joins the sinks in one last
 * merge, ring_fwd.c.)
 */
#include "ring_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Reads a local tensor of the storage dtype (rows rows, Hq heads) into f32. */
static float *read_f32(ring_run *run, fa_context *ctx, const fa_buffer *b, uint64_t n,
                       fa_dtype dtype)
{
    size_t elem = fa_dtype_size(dtype);
    void *raw = malloc((size_t)n * elem + 4);
    float *out = malloc((size_t)n * sizeof(float) + 4);
    fa_status st = raw && out ? fa_buffer_read(b, 0, raw, (size_t)n * elem)
                              : FA_STATUS_OUT_OF_MEMORY;
    if (st == FA_STATUS_OK)
        ring_to_f32(dtype, raw, out, n);
    free(raw);
    if (st != FA_STATUS_OK) {
        free(out);
        ring_lib_fail(run, ctx, st, "reading O or dO for the sinks' gradient");
        return NULL;
    }
    return out;
}

fa_status ring_sinks_share(ring_run *run, fa_context *ctx, const fa_problem *w,
                           const fa_ring_options *o, const fa_ring_tensors *x, int64_t rows,
                           const float *sinks, double *share)
{
    int64_t H = w->heads_q, D = w->head_dim, BH = w->batch * H;
    memset(share, 0, (size_t)H * sizeof *share);
    uint64_t n = ring_elems(w->batch, H, rows, D);
    if (n == 0)
        return FA_STATUS_OK;
    float *out = read_f32(run, ctx, x->o, n, w->dtype);
    float *dout = out ? read_f32(run, ctx, x->d_o, n, w->dtype) : NULL;
    float *lse = malloc((size_t)(BH * rows) * sizeof(float));
    fa_status st = out && dout && lse ? FA_STATUS_OK : (fa_status)run->err.status;
    if (st == FA_STATUS_OK && !lse)
        st = ring_fail(run, FA_STATUS_OUT_OF_MEMORY, "the sinks' gradient");
    if (st == FA_STATUS_OK && (st = fa_buffer_read(x->lse, 0, lse,
                                                   (size_t)(BH * rows) * sizeof(float))))
        ring_lib_fail(run, ctx, st, "reading LSE for the sinks' gradient");
    fa_tensor_layout l = ring_layout(o->tensor_layout, H, rows, D, 0);
    for (int64_t bh = 0; bh < BH && st == FA_STATUS_OK; bh++) {
        int64_t b = bh / H, h = bh % H;
        if (isinf(sinks[h]) && sinks[h] < 0)
            continue; /* no sink: no gradient */
        for (int64_t i = 0; i < rows; i++) {
            int64_t at = l.offset + b * l.stride_batch + h * l.stride_head + i * l.stride_seq;
            double d = 0.0; /* D = rowsum(dO * O) */
            for (int64_t e = 0; e < D; e++)
                d += (double)dout[at + e] * out[at + e];
            share[h] -= exp((double)sinks[h] - lse[bh * rows + i]) * d;
        }
    }
    free(out);
    free(dout);
    free(lse);
    return st;
}

void ring_sum_around(ring_run *run, const double *mine, int64_t n, double *sum)
{
    const fa_ring_transport *t = run->t;
    int P = t->size;
    size_t bytes = sizeof(ring_header) + (size_t)n * sizeof(double);
    double *all = calloc((size_t)(P * n) + 1, sizeof(double));
    unsigned char *msg[2] = {malloc(bytes), malloc(bytes)};
    if (!all || !msg[0] || !msg[1]) {
        ring_fail(run, FA_STATUS_OUT_OF_MEMORY, "summing the sinks' gradient");
        run->broken = 1; /* the neighbours time out rather than read a short message */
    }
    if (all)
        memcpy(all + (size_t)(t->rank * n), mine, (size_t)n * sizeof(double));
    /* round k sends the share of rank (rank - k + 1) and receives that of rank (rank - k) */
    for (int k = 1; k < P && !run->broken; k++) {
        int send_of = (t->rank - k + 1 + P) % P, recv_of = (t->rank - k + P) % P;
        memcpy(msg[0] + sizeof(ring_header), all + (size_t)(send_of * n),
               bytes - sizeof(ring_header));
        ring_xfer x;
        ring_xfer_start(run, &x, RING_TAG_SINKS, msg[0], bytes, msg[1], bytes);
        ring_xfer_finish(run, &x);
        if (!run->broken)
            memcpy(all + (size_t)(recv_of * n), msg[1] + sizeof(ring_header),
                   bytes - sizeof(ring_header));
    }
    for (int64_t h = 0; h < n && all; h++) {
        sum[h] = 0.0;
        for (int r = 0; r < P; r++)
            sum[h] += all[(size_t)(r * n + h)];
    }
    free(all);
    free(msg[0]);
    free(msg[1]);
}
