/*
 * ring_bwd.c - the ring backward. Each step computes, for the K/V block in hand, every (query
 * chunk, key chunk) pair's gradients with fa_run (P recomputed from the forward's LSE, D from
 * the forward's O), adds dQ into this rank's f32 sums and dK/dV into the block's f32 sums, which
 * travel around the ring behind the block and reach their home rank after P steps.
 *
 * Per step: the next K/V block's transfer overlaps the compute; the block's dK/dV sums arrive
 * from the previous rank during that compute, receive this rank's part, and are sent on while
 * the next step computes. The sums are added in the ring's fixed order: no atomics.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct bwd_state {
    fa_context *ctx;
    const fa_problem *w;
    const fa_ring_options *o;
    const fa_ring_tensors *x;
    ring_run *run;
    fa_ring_slice mine;  /* this rank's rows of Q (O, LSE, dO, dQ) */
    fa_ring_slice kmine; /* and of K, V (dK, dV) */
    fa_buffer *lse[2];   /* each query chunk's LSE, f32 [B, Hq, len] */
    fa_buffer *dq_part[2];
    float *dq[2];        /* dQ sums, f32 compact [B, Hq, len, D] */
    fa_buffer *dk_part, *dv_part; /* one pair's dK, dV: compact [B, Hkv, len, D] */
    fa_buffer *kdev, *vdev;
    unsigned char *stage[2]; /* K/V: header, K, V in the storage dtype */
    unsigned char *dkv[2];   /* dK/dV sums: header, dK, dV f32 compact [B, Hkv, rows, D] */
    float *contrib;          /* this step's dK, dV of the block in hand */
    void *part_host;         /* a partial gradient read back */
    float *part_f32;
    int64_t rows_max, chunk_max; /* the most rows of a K/V block, of a Q or K chunk */
    ring_xfer *pending[2]; /* the step's K/V and sums exchanges, polled between blocks */
    float *sinks;          /* whole.sinks: f32 [heads_q] */
    double *d_sinks;       /* their gradient, summed over every rank's rows */
} bwd_state;

static uint64_t q_elems(const bwd_state *f, int64_t rows)
{
    return ring_elems(f->w->batch, f->w->heads_q, rows, f->w->head_dim);
}

static uint64_t kv_elems(const bwd_state *f, int64_t rows)
{
    return ring_elems(f->w->batch, f->w->heads_kv, rows, f->w->head_dim);
}

/* The K/V rows of `rank` (the blocks that travel). */
static fa_ring_slice slice_of(const bwd_state *f, int rank)
{
    return ring_slice(f->o, f->w->seqlen_k, f->run->t->size, rank);
}

static fa_status check_tensors(bwd_state *f)
{
    const fa_ring_tensors *x = f->x;
    size_t elem = fa_dtype_size(f->w->dtype);
    int64_t n = f->mine.rows;
    uint64_t qb = q_elems(f, n) * elem, kb = kv_elems(f, f->kmine.rows) * elem;
    uint64_t lb = (uint64_t)f->w->batch * (uint64_t)f->w->heads_q * (uint64_t)n * 4;
    if (ring_check_buffer(f->run, x->q, "Q", qb) || ring_check_buffer(f->run, x->k, "K", kb) ||
        ring_check_buffer(f->run, x->v, "V", kb) || ring_check_buffer(f->run, x->o, "O", qb) ||
        ring_check_buffer(f->run, x->lse, "LSE", lb) ||
        ring_check_buffer(f->run, x->d_o, "dO", qb) ||
        ring_check_buffer(f->run, x->dq, "dQ", qb) || ring_check_buffer(f->run, x->dk, "dK", kb) ||
        ring_check_buffer(f->run, x->dv, "dV", kb) ||
        (f->w->sinks && (ring_check_buffer(f->run, x->sinks, "sinks", f->w->heads_q * 4u) ||
                         ring_check_buffer(f->run, x->d_sinks, "dsinks", f->w->heads_q * 4u))) ||
        (f->w->alibi && ring_check_buffer(f->run, x->alibi_slopes, "ALiBi slopes",
                                          (uint64_t)f->w->heads_q * 4)))
        return (fa_status)f->run->err.status;
    return FA_STATUS_OK;
}

/* Splits the local LSE into one device buffer per query chunk. */
static fa_status setup_lse(bwd_state *f)
{
    int64_t BH = f->w->batch * f->w->heads_q, n = f->mine.rows;
    if (BH * n == 0)
        return FA_STATUS_OK;
    float *all = malloc((size_t)(BH * n) * 4), *part = malloc((size_t)(BH * n) * 4);
    fa_status st = all && part ? fa_buffer_read(f->x->lse, 0, all, (size_t)(BH * n) * 4)
                               : FA_STATUS_OUT_OF_MEMORY;
    for (int a = 0; a < f->mine.chunks && st == FA_STATUS_OK; a++) {
        int64_t len = f->mine.len[a], first = a == 0 ? 0 : f->mine.len[0];
        if (len == 0)
            continue;
        for (int64_t bh = 0; bh < BH; bh++)
            memcpy(part + bh * len, all + bh * n + first, (size_t)len * 4);
        st = fa_buffer_create(f->ctx, (size_t)(BH * len) * 4, &f->lse[a]);
        if (st == FA_STATUS_OK)
            st = fa_buffer_write(f->lse[a], 0, part, (size_t)(BH * len) * 4);
    }
    free(all);
    free(part);
    return st == FA_STATUS_OK ? st : ring_lib_fail(f->run, f->ctx, st, "the chunks' LSE");
}

static fa_status setup(bwd_state *f)
{
    int P = f->run->t->size;
    f->mine = ring_slice(f->o, f->w->seqlen_q, P, f->run->t->rank);
    f->kmine = slice_of(f, f->run->t->rank);
    if (check_tensors(f))
        return (fa_status)f->run->err.status;
    for (int r = 0; r < P; r++) {
        fa_ring_slice s = slice_of(f, r), qs = ring_slice(f->o, f->w->seqlen_q, P, r);
        f->rows_max = s.rows > f->rows_max ? s.rows : f->rows_max;
        for (int c = 0; c < s.chunks; c++) {
            f->chunk_max = s.len[c] > f->chunk_max ? s.len[c] : f->chunk_max;
            f->chunk_max = qs.len[c] > f->chunk_max ? qs.len[c] : f->chunk_max;
        }
    }
    size_t elem = fa_dtype_size(f->w->dtype);
    uint64_t kvb = kv_elems(f, f->rows_max) * elem, kvf = kv_elems(f, f->rows_max) * 4;
    uint64_t part = q_elems(f, f->chunk_max) > kv_elems(f, f->chunk_max)
                        ? q_elems(f, f->chunk_max) : kv_elems(f, f->chunk_max);
    for (int i = 0; i < 2; i++) {
        f->stage[i] = malloc(sizeof(ring_header) + 2 * (size_t)kvb);
        f->dkv[i] = calloc(1, sizeof(ring_header) + 2 * (size_t)kvf);
    }
    f->contrib = malloc(2 * (size_t)kvf + 4);
    f->part_host = malloc((size_t)(part * elem) + 4);
    f->part_f32 = malloc((size_t)(part * 4) + 4);
    if (!f->stage[0] || !f->stage[1] || !f->dkv[0] || !f->dkv[1] || !f->contrib ||
        !f->part_host || !f->part_f32)
        return ring_fail(f->run, FA_STATUS_OUT_OF_MEMORY, "host staging for the backward");
    for (int a = 0; a < f->mine.chunks; a++) {
        uint64_t n = q_elems(f, f->mine.len[a]);
        if (n == 0)
            continue;
        if (!(f->dq[a] = calloc((size_t)n, 4)))
            return ring_fail(f->run, FA_STATUS_OUT_OF_MEMORY, "dQ sums");
        if (ring_buffer(f->run, f->ctx, n * elem, &f->dq_part[a], "a partial dQ"))
            return FA_STATUS_OUT_OF_MEMORY;
    }
    uint64_t kc = kv_elems(f, f->chunk_max) * elem;
    if (kc > 0 && (ring_buffer(f->run, f->ctx, kc, &f->dk_part, "a partial dK") ||
                   ring_buffer(f->run, f->ctx, kc, &f->dv_part, "a partial dV")))
        return FA_STATUS_OUT_OF_MEMORY;
    if (P > 1 && kvb > 0 && (ring_buffer(f->run, f->ctx, kvb, &f->kdev, "K block") ||
                             ring_buffer(f->run, f->ctx, kvb, &f->vdev, "V block")))
        return FA_STATUS_OUT_OF_MEMORY;
    if (f->w->sinks && ring_read_sinks(f->run, f->ctx, f->w, f->x->sinks, &f->sinks))
        return FA_STATUS_OUT_OF_MEMORY;
    return setup_lse(f);
}

static void release(bwd_state *f)
{
    for (int i = 0; i < 2; i++) {
        fa_buffer_destroy(f->lse[i]);
        fa_buffer_destroy(f->dq_part[i]);
        free(f->dq[i]);
        free(f->stage[i]);
        free(f->dkv[i]);
    }
    fa_buffer_destroy(f->dk_part);
    fa_buffer_destroy(f->dv_part);
    fa_buffer_destroy(f->kdev);
    fa_buffer_destroy(f->vdev);
    free(f->contrib);
    free(f->part_host);
    free(f->part_f32);
    free(f->sinks);
    free(f->d_sinks);
}

/* The sinks' gradient: this rank's share, summed with every other rank's around the ring. */
static void sinks_gradient(bwd_state *f)
{
    int64_t H = f->w->heads_q;
    double *share = malloc((size_t)H * sizeof(double));
    f->d_sinks = calloc((size_t)H, sizeof(double));
    if (!share || !f->d_sinks)
        ring_fail(f->run, FA_STATUS_OUT_OF_MEMORY, "the sinks' gradient");
    else if (ring_sinks_share(f->run, f->ctx, f->w, f->o, f->x, f->mine.rows, f->sinks,
                              share) != FA_STATUS_OK)
        memset(share, 0, (size_t)H * sizeof(double)); /* the failure travels in the headers */
    if (share && f->d_sinks)
        ring_sum_around(f->run, share, H, f->d_sinks);
    free(share);
}

/* Reads a partial gradient (n elements, compact) and adds it into sums laid out compact
 * [BH, rows, D], at rows [first, + len) of each (b, h). */
static fa_status add_partial(bwd_state *f, const fa_buffer *b, int64_t BH, int64_t len,
                             float *sums, int64_t rows, int64_t first)
{
    int64_t D = f->w->head_dim;
    uint64_t n = (uint64_t)(BH * len * D);
    fa_status st = fa_buffer_read(b, 0, f->part_host, (size_t)n * fa_dtype_size(f->w->dtype));
    if (st != FA_STATUS_OK)
        return st;
    ring_to_f32(f->w->dtype, f->part_host, f->part_f32, n);
    for (int64_t bh = 0; bh < BH; bh++) {
        float *to = sums + (bh * rows + first) * D;
        const float *from = f->part_f32 + bh * len * D;
        for (int64_t e = 0; e < len * D; e++)
            to[e] += from[e];
    }
    return FA_STATUS_OK;
}

/* One pair's gradients, added into the dQ sums of chunk a and the block's contribution. */
static void pair_backward(bwd_state *f, int a, ring_pair kind, const fa_buffer *k,
                          const fa_buffer *v, const fa_ring_slice *blk, int j)
{
    const fa_problem *w = f->w;
    int64_t k_first = j == 0 ? 0 : blk->len[0];
    int64_t na = f->mine.len[a], nb = blk->len[j];
    ring_rows qr = {f->mine.rows, a == 0 ? 0 : f->mine.len[0], na, f->mine.start[a]};
    ring_rows kr = {blk->rows, k_first, nb, blk->start[j]};
    fa_problem p = ring_pair_problem(w, f->o, kind, &qr, &kr);
    p.o = p.q;
    p.d_o = p.q;
    p.dq = ring_layout(FA_LAYOUT_BHSD, w->heads_q, na, w->head_dim, 0);
    p.dk = ring_layout(FA_LAYOUT_BHSD, w->heads_kv, nb, w->head_dim, 0);
    p.dv = p.dk;
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create_backward(f->ctx, &p, &plan);
    if (st != FA_STATUS_OK) {
        ring_lib_fail(f->run, f->ctx, st, "planning a block's backward");
        return;
    }
    fa_tensors t = {0};
    t.q = f->x->q;
    t.k = k;
    t.v = v;
    t.alibi_slopes = w->alibi ? f->x->alibi_slopes : NULL;
    t.o = f->x->o;
    t.lse = f->lse[a];
    t.d_o = f->x->d_o;
    t.dq = f->dq_part[a];
    t.dk = f->dk_part;
    t.dv = f->dv_part;
    st = fa_run(f->ctx, plan, &t);
    fa_plan_destroy(plan);
    int64_t BHq = w->batch * w->heads_q, BHk = w->batch * w->heads_kv;
    uint64_t half = kv_elems(f, blk->rows);
    if (st == FA_STATUS_OK)
        st = add_partial(f, f->dq_part[a], BHq, na, f->dq[a], na, 0);
    if (st == FA_STATUS_OK)
        st = add_partial(f, f->dk_part, BHk, nb, f->contrib, blk->rows, k_first);
    if (st == FA_STATUS_OK)
        st = add_partial(f, f->dv_part, BHk, nb, f->contrib + half, blk->rows, k_first);
    if (st != FA_STATUS_OK)
        ring_lib_fail(f->run, f->ctx, st, "a block's backward");
    f->run->st.pairs++;
    ring_xfer_poll(f->run, f->pending[0]);
    ring_xfer_poll(f->run, f->pending[1]);
}

static void block_backward(bwd_state *f, int s, const fa_buffer *k, const fa_buffer *v)
{
    fa_ring_slice b = slice_of(f, s);
    memset(f->contrib, 0, 2 * (size_t)kv_elems(f, b.rows) * 4);
    if (f->w->batch == 0)
        return;
    for (int a = 0; a < f->mine.chunks; a++)
        for (int j = 0; j < b.chunks && !ring_failed(f->run); j++) {
            ring_pair kind = ring_pair_kind(f->w, f->mine.start[a], f->mine.len[a], b.start[j],
                                            b.len[j]);
            if (kind != RING_PAIR_SKIP)
                pair_backward(f, a, kind, k, v, &b, j);
        }
}

/* Adds this step's contribution into the block's sums (after their header). */
static void add_contrib(bwd_state *f, unsigned char *dkv, int64_t rows)
{
    float *sums = (float *)(dkv + sizeof(ring_header));
    uint64_t n = 2 * kv_elems(f, rows);
    for (uint64_t e = 0; e < n; e++)
        sums[e] += f->contrib[e];
}

static size_t dkv_bytes(const bwd_state *f, int rank)
{
    return sizeof(ring_header) + 2 * (size_t)kv_elems(f, slice_of(f, rank).rows) * 4;
}

static size_t kv_msg_bytes(const bwd_state *f, int rank)
{
    return sizeof(ring_header) + 2 * (size_t)ring_kv_bytes(f->w, slice_of(f, rank).rows);
}

static void steps(bwd_state *f)
{
    const fa_ring_transport *t = f->run->t;
    int P = t->size, r = t->rank;
    ring_xfer sums_xf = {0};
    if (P > 1)
        ring_stage_kv(f->run, f->ctx, f->x->k, f->x->v, ring_kv_bytes(f->w, f->kmine.rows),
                      f->stage[0]);
    for (int step = 0; step < P; step++) {
        int s = (r - step + P) % P, s_next = (s + P - 1) % P;
        ring_xfer kv_xf = {0};
        if (step + 1 < P)
            ring_xfer_start(f->run, &kv_xf, RING_TAG_KV, f->stage[step % 2], kv_msg_bytes(f, s),
                            f->stage[(step + 1) % 2], kv_msg_bytes(f, s_next));
        f->pending[0] = &kv_xf;
        f->pending[1] = step > 0 ? &sums_xf : NULL;
        double c0 = ring_now(), cpu0 = ring_cpu_now();
        if (!ring_failed(f->run))
            block_backward(f, s, step == 0 ? f->x->k : f->kdev, step == 0 ? f->x->v : f->vdev);
        f->run->st.compute_s += ring_now() - c0;
        f->run->st.compute_cpu_s += ring_cpu_now() - cpu0;
        f->pending[0] = f->pending[1] = NULL;
        if (step + 1 < P) {
            ring_xfer_finish(f->run, &kv_xf);
            ring_upload_kv(f->run, f->ctx, f->stage[(step + 1) % 2],
                           ring_kv_bytes(f->w, slice_of(f, s_next).rows), f->kdev, f->vdev);
        }
        /* The block's sums: this rank's own block starts from zero, others arrived. */
        if (step > 0)
            ring_xfer_finish(f->run, &sums_xf);
        add_contrib(f, f->dkv[step % 2], slice_of(f, s).rows);
        if (P > 1)
            ring_xfer_start(f->run, &sums_xf, RING_TAG_DKV, f->dkv[step % 2], dkv_bytes(f, s),
                            f->dkv[(step + 1) % 2], dkv_bytes(f, s_next));
    }
    if (P > 1)
        ring_xfer_finish(f->run, &sums_xf); /* this rank's own sums, home after P steps */
}

/* The sinks' gradient, f32 [heads_q], on every rank (one with no rows too). */
static void write_d_sinks(bwd_state *f)
{
    int64_t H = f->w->heads_q;
    float *ds = malloc((size_t)H * sizeof(float));
    fa_status st = ds ? FA_STATUS_OK : FA_STATUS_OUT_OF_MEMORY;
    for (int64_t h = 0; h < H && ds; h++)
        ds[h] = (float)f->d_sinks[h];
    if (st == FA_STATUS_OK)
        st = fa_buffer_write(f->x->d_sinks, 0, ds, (size_t)H * sizeof(float));
    if (st != FA_STATUS_OK)
        ring_lib_fail(f->run, f->ctx, st, "writing the sinks' gradient");
    free(ds);
}

/* Rounds dQ's f32 sums to the dtype and writes them in the local layout (img, conv: host
 * space for the local dQ). */
static fa_status write_dq(bwd_state *f, unsigned char *img, unsigned char *conv)
{
    const fa_problem *w = f->w;
    size_t elem = fa_dtype_size(w->dtype);
    int64_t n = f->mine.rows, D = w->head_dim;
    for (int a = 0; a < f->mine.chunks; a++) {
        if (f->mine.len[a] == 0)
            continue;
        fa_tensor_layout l = ring_layout(f->o->tensor_layout, w->heads_q, n, D,
                                         a == 0 ? 0 : f->mine.len[0]);
        ring_from_f32(w->dtype, f->dq[a], conv, q_elems(f, f->mine.len[a]));
        ring_place(&l, w->batch, w->heads_q, f->mine.len[a], D, elem, conv, img);
    }
    return fa_buffer_write(f->x->dq, 0, img, (size_t)(q_elems(f, n) * elem));
}

/* Rounds the f32 sums to the dtype and writes dQ, dK, dV in the local layout. */
static void write_outputs(bwd_state *f)
{
    const fa_problem *w = f->w;
    if (f->d_sinks)
        write_d_sinks(f);
    size_t elem = fa_dtype_size(w->dtype);
    int64_t n = f->kmine.rows, D = w->head_dim;
    uint64_t qe = q_elems(f, f->mine.rows), ke = kv_elems(f, n);
    uint64_t most = qe > ke ? qe : ke;
    if (most == 0)
        return;
    unsigned char *img = malloc((size_t)most * elem), *conv = malloc((size_t)most * elem);
    fa_status st = img && conv ? FA_STATUS_OK : FA_STATUS_OUT_OF_MEMORY;
    if (st == FA_STATUS_OK && qe > 0)
        st = write_dq(f, img, conv);
    /* The own sums came home into the buffer the last exchange received (no exchange: 0). */
    int home = f->run->t->size == 1 ? 0 : f->run->t->size % 2;
    const float *sums = (const float *)(f->dkv[home] + sizeof(ring_header));
    fa_buffer *out[2] = {f->x->dk, f->x->dv};
    fa_tensor_layout l = ring_layout(f->o->tensor_layout, w->heads_kv, n, D, 0);
    for (int g = 0; g < 2 && st == FA_STATUS_OK && ke > 0; g++) {
        ring_from_f32(w->dtype, sums + g * ke, conv, ke);
        ring_place(&l, w->batch, w->heads_kv, n, D, elem, conv, img);
        st = fa_buffer_write(out[g], 0, img, (size_t)ke * elem);
    }
    if (st != FA_STATUS_OK)
        ring_lib_fail(f->run, f->ctx, st, "writing dQ, dK and dV");
    free(img);
    free(conv);
}

fa_status fa_ring_backward(fa_context *ctx, const fa_ring_transport *transport,
                           const fa_problem *whole, const fa_ring_options *options,
                           const fa_ring_tensors *tensors, char *why, size_t why_size)
{
    ring_run run;
    if (!ring_run_start(&run, ctx, transport, options, tensors))
        return ring_finish(&run, options, why, why_size);
    bwd_state f;
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    f.w = whole;
    f.o = options;
    f.x = tensors;
    f.run = &run;
    if (ring_check_whole(&run, whole, options) == FA_STATUS_OK)
        setup(&f);
    ring_agree(&run);
    if (!ring_failed(&run))
        steps(&f);
    ring_agree(&run);
    if (!ring_failed(&run) && f.sinks) { /* every rank here, or none */
        sinks_gradient(&f);
        ring_agree(&run);
    }
    if (!ring_failed(&run))
        write_outputs(&f);
    ring_agree(&run);
    release(&f);
    return ring_finish(&run, options, why, why_size);
}
