/*
 * ring_fwd.c - the ring forward: P steps, each computing the local query chunks against the K/V
 * block in hand (fa_run, with its LSE) while the next block arrives, and merging each partial
 * into the chunk's running result by LSE (fa_merge), always in the same order.
 *
 * Per query chunk a the running result lives in two ping-pong pairs of part buffers (O of
 * [B, Hq, len_a, D] compact BHSD, LSE f32 [B, Hq, len_a]): slot 0 holds the result so far, a
 * new partial goes to slot 1, and the merge of both writes slot 0 of the other pair. A forward
 * writes its LSE at byte 0 of a buffer, so a partial's LSE reaches slot 1 through the host.
 */
#include "ring_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fwd_chunk {
    fa_buffer *po[2], *pl[2]; /* ping-pong pairs: O parts (2 slots), LSE parts (2 slots) */
    fa_buffer *lse_new;       /* a new partial's LSE, before it moves to slot 1 */
    fa_plan *merge;           /* the merge of 2 parts of this chunk */
    float *lse_host;
    int cur, parts;
} fwd_chunk;

typedef struct fwd_state {
    fa_context *ctx;
    const fa_problem *w;
    const fa_ring_options *o;
    const fa_ring_tensors *x;
    ring_run *run;
    fa_ring_slice mine;  /* this rank's rows of Q (O, LSE) */
    fa_ring_slice kmine; /* and of K, V */
    fwd_chunk ch[2];
    fa_buffer *kdev, *vdev; /* a received block */
    unsigned char *stage[2];
    size_t stage_bytes;
    ring_xfer *pending; /* the step's exchange, polled between blocks (NULL: none) */
    float *sinks;       /* whole.sinks: the sink of each query head, f32 [heads_q] */
} fwd_state;

static uint64_t chunk_o_elems(const fwd_state *f, int a)
{
    return ring_elems(f->w->batch, f->w->heads_q, f->mine.len[a], f->w->head_dim);
}

static uint64_t chunk_lse_bytes(const fwd_state *f, int a)
{
    return (uint64_t)f->w->batch * (uint64_t)f->w->heads_q * (uint64_t)f->mine.len[a] * 4;
}

static fa_status make_buffer(fwd_state *f, uint64_t bytes, fa_buffer **out, const char *what)
{
    return ring_buffer(f->run, f->ctx, bytes, out, what);
}

/* The merge problem of chunk a: its rows, O compact BHSD at offset 0. */
static fa_problem merge_problem(const fwd_state *f, int a)
{
    fa_problem p;
    const fa_problem *w = f->w;
    fa_problem_init(&p, w->dtype, FA_LAYOUT_BHSD, w->batch, w->heads_q, w->heads_kv,
                    f->mine.len[a], f->mine.len[a], w->head_dim);
    p.scale = w->scale;
    return p;
}

static fa_status setup_chunk(fwd_state *f, int a)
{
    fwd_chunk *c = &f->ch[a];
    size_t elem = fa_dtype_size(f->w->dtype);
    uint64_t ob = chunk_o_elems(f, a) * elem, lb = chunk_lse_bytes(f, a);
    if (ob == 0)
        return FA_STATUS_OK;
    for (int i = 0; i < 2; i++) {
        if (make_buffer(f, 2 * ob, &c->po[i], "O parts") ||
            make_buffer(f, 2 * lb, &c->pl[i], "LSE parts"))
            return FA_STATUS_OUT_OF_MEMORY;
    }
    if (make_buffer(f, lb, &c->lse_new, "a partial's LSE"))
        return FA_STATUS_OUT_OF_MEMORY;
    c->lse_host = malloc((size_t)lb);
    if (!c->lse_host)
        return ring_fail(f->run, FA_STATUS_OUT_OF_MEMORY, "host LSE staging");
    fa_problem mp = merge_problem(f, a);
    fa_status st = fa_plan_create_merge(f->ctx, &mp, 2, &c->merge);
    return st == FA_STATUS_OK ? st : ring_lib_fail(f->run, f->ctx, st, "merge plan");
}

/* Checks the local tensors and allocates what the ring holds: part buffers, one received
 * K/V block on the device and two host staging buffers (header + K + V). */
static fa_status setup(fwd_state *f)
{
    const fa_problem *w = f->w;
    const fa_ring_tensors *x = f->x;
    int P = f->run->t->size;
    f->mine = ring_slice(f->o, w->seqlen_q, P, f->run->t->rank);
    f->kmine = ring_slice(f->o, w->seqlen_k, P, f->run->t->rank);
    size_t elem = fa_dtype_size(w->dtype);
    uint64_t qb = ring_elems(w->batch, w->heads_q, f->mine.rows, w->head_dim) * elem;
    uint64_t kb = ring_kv_bytes(w, f->kmine.rows);
    uint64_t lb = (uint64_t)w->batch * (uint64_t)w->heads_q * (uint64_t)f->mine.rows * 4;
    if (ring_check_buffer(f->run, x->q, "Q", qb) || ring_check_buffer(f->run, x->k, "K", kb) ||
        ring_check_buffer(f->run, x->v, "V", kb) || ring_check_buffer(f->run, x->o, "O", qb) ||
        (x->lse && ring_check_buffer(f->run, x->lse, "LSE", lb)) ||
        (w->alibi && ring_check_buffer(f->run, x->alibi_slopes, "ALiBi slopes",
                                       (uint64_t)w->heads_q * 4)) ||
        (w->sinks && ring_check_buffer(f->run, x->sinks, "sinks", (uint64_t)w->heads_q * 4)))
        return (fa_status)f->run->err.status;
    int64_t rows_max = 0;
    for (int r = 0; r < P; r++) {
        fa_ring_slice s = ring_slice(f->o, w->seqlen_k, P, r);
        rows_max = s.rows > rows_max ? s.rows : rows_max;
    }
    uint64_t kv_max = ring_kv_bytes(w, rows_max);
    f->stage_bytes = sizeof(ring_header) + 2 * (size_t)kv_max;
    for (int i = 0; i < 2; i++)
        if (!(f->stage[i] = malloc(f->stage_bytes)))
            return ring_fail(f->run, FA_STATUS_OUT_OF_MEMORY, "host staging buffers");
    if (P > 1 && kv_max > 0 &&
        (make_buffer(f, kv_max, &f->kdev, "K block") ||
         make_buffer(f, kv_max, &f->vdev, "V block")))
        return FA_STATUS_OUT_OF_MEMORY;
    for (int a = 0; a < f->mine.chunks; a++)
        if (setup_chunk(f, a))
            return (fa_status)f->run->err.status;
    return w->sinks ? ring_read_sinks(f->run, f->ctx, w, x->sinks, &f->sinks) : FA_STATUS_OK;
}

static void release(fwd_state *f)
{
    for (int a = 0; a < 2; a++) {
        fwd_chunk *c = &f->ch[a];
        for (int i = 0; i < 2; i++) {
            fa_buffer_destroy(c->po[i]);
            fa_buffer_destroy(c->pl[i]);
        }
        fa_buffer_destroy(c->lse_new);
        fa_plan_destroy(c->merge);
        free(c->lse_host);
    }
    fa_buffer_destroy(f->kdev);
    fa_buffer_destroy(f->vdev);
    free(f->stage[0]);
    free(f->stage[1]);
    free(f->sinks);
}

/* Moves a new partial's LSE into slot 1 and merges slots 0 and 1 into the other pair. */
static fa_status merge_new(fwd_state *f, int a)
{
    fwd_chunk *c = &f->ch[a];
    uint64_t lb = chunk_lse_bytes(f, a);
    fa_status st = fa_buffer_read(c->lse_new, 0, c->lse_host, (size_t)lb);
    if (st == FA_STATUS_OK)
        st = fa_buffer_write(c->pl[c->cur], (size_t)lb, c->lse_host, (size_t)lb);
    if (st == FA_STATUS_OK)
        st = fa_merge(f->ctx, c->merge, c->po[c->cur], c->pl[c->cur], c->po[1 - c->cur],
                      c->pl[1 - c->cur]);
    if (st != FA_STATUS_OK)
        return ring_lib_fail(f->run, f->ctx, st, "merging a partial");
    c->cur = 1 - c->cur;
    return st;
}

/* Query chunk a against key chunk j of the block `blk`. */
static fa_status pair_forward(fwd_state *f, int a, ring_pair kind, const fa_buffer *k,
                              const fa_buffer *v, const fa_ring_slice *blk, int j)
{
    fwd_chunk *c = &f->ch[a];
    ring_rows qr = {f->mine.rows, a == 0 ? 0 : f->mine.len[0], f->mine.len[a],
                    f->mine.start[a]};
    ring_rows kr = {blk->rows, j == 0 ? 0 : blk->len[0], blk->len[j], blk->start[j]};
    fa_problem p = ring_pair_problem(f->w, f->o, kind, &qr, &kr);
    int first = c->parts == 0;
    p.o = ring_layout(FA_LAYOUT_BHSD, f->w->heads_q, f->mine.len[a], f->w->head_dim, 0);
    p.o.offset = first ? 0 : (int64_t)chunk_o_elems(f, a);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(f->ctx, &p, &plan);
    if (st != FA_STATUS_OK)
        return ring_lib_fail(f->run, f->ctx, st, "planning a block");
    fa_tensors t = {0};
    t.q = f->x->q;
    t.k = k;
    t.v = v;
    t.alibi_slopes = f->w->alibi ? f->x->alibi_slopes : NULL;
    t.o = c->po[c->cur];
    t.lse = first ? c->pl[c->cur] : c->lse_new;
    st = fa_run(f->ctx, plan, &t);
    fa_plan_destroy(plan);
    if (st != FA_STATUS_OK)
        return ring_lib_fail(f->run, f->ctx, st, "a block's forward");
    c->parts++;
    f->run->st.pairs++;
    ring_xfer_poll(f->run, f->pending);
    st = first ? FA_STATUS_OK : merge_new(f, a);
    ring_xfer_poll(f->run, f->pending);
    return st;
}

/* Every (query chunk, key chunk) pair of the block of rank s, in chunk order. */
static void block_forward(fwd_state *f, int s, const fa_buffer *k, const fa_buffer *v)
{
    fa_ring_slice b = ring_slice(f->o, f->w->seqlen_k, f->run->t->size, s);
    for (int a = 0; a < f->mine.chunks; a++) {
        if (chunk_o_elems(f, a) == 0)
            continue; /* no rows (or batch 0): nothing to compute */
        for (int j = 0; j < b.chunks && !ring_failed(f->run); j++) {
            ring_pair kind = ring_pair_kind(f->w, f->mine.start[a], f->mine.len[a], b.start[j],
                                            b.len[j]);
            if (kind != RING_PAIR_SKIP)
                pair_forward(f, a, kind, k, v, &b, j);
        }
    }
}

static void steps(fwd_state *f)
{
    const fa_ring_transport *t = f->run->t;
    int P = t->size;
    if (P > 1)
        ring_stage_kv(f->run, f->ctx, f->x->k, f->x->v, ring_kv_bytes(f->w, f->kmine.rows),
                      f->stage[0]);
    int64_t Sk = f->w->seqlen_k;
    for (int step = 0; step < P; step++) {
        int s = (t->rank - step + P) % P, s_next = (s + P - 1) % P;
        ring_xfer xf;
        int more = step + 1 < P;
        uint64_t kv_next = ring_kv_bytes(f->w, ring_slice(f->o, Sk, P, s_next).rows);
        if (more) {
            size_t out = sizeof(ring_header) + 2 * (size_t)ring_kv_bytes(f->w,
                             ring_slice(f->o, Sk, P, s).rows);
            size_t in = sizeof(ring_header) + 2 * (size_t)kv_next;
            ring_xfer_start(f->run, &xf, RING_TAG_KV, f->stage[step % 2], out,
                            f->stage[(step + 1) % 2], in);
        }
        f->pending = more ? &xf : NULL;
        double c0 = ring_now(), cpu0 = ring_cpu_now();
        if (!ring_failed(f->run))
            block_forward(f, s, step == 0 ? f->x->k : f->kdev, step == 0 ? f->x->v : f->vdev);
        f->run->st.compute_s += ring_now() - c0;
        f->run->st.compute_cpu_s += ring_cpu_now() - cpu0;
        f->pending = NULL;
        if (more) {
            ring_xfer_finish(f->run, &xf);
            ring_upload_kv(f->run, f->ctx, f->stage[(step + 1) % 2], kv_next, f->kdev, f->vdev);
        }
    }
}

/* Places chunk results (compact BHSD) into the local O and LSE through the host. */
static void write_outputs(fwd_state *f)
{
    const fa_problem *w = f->w;
    size_t elem = fa_dtype_size(w->dtype);
    uint64_t ob = ring_elems(w->batch, w->heads_q, f->mine.rows, w->head_dim) * elem;
    uint64_t lb = (uint64_t)w->batch * (uint64_t)w->heads_q * (uint64_t)f->mine.rows * 4;
    if (ob == 0)
        return;
    unsigned char *o = malloc((size_t)ob), *part = malloc((size_t)ob);
    float *lse = malloc((size_t)lb), *lpart = malloc((size_t)lb);
    fa_status st = o && part && lse && lpart ? FA_STATUS_OK : FA_STATUS_OUT_OF_MEMORY;
    int64_t D = w->head_dim, H = w->heads_q;
    for (int a = 0; a < f->mine.chunks && st == FA_STATUS_OK; a++) {
        fwd_chunk *c = &f->ch[a];
        int64_t n = f->mine.len[a], first = a == 0 ? 0 : f->mine.len[0];
        if (n == 0)
            continue;
        st = fa_buffer_read(c->po[c->cur], 0, part, (size_t)(chunk_o_elems(f, a) * elem));
        if (st == FA_STATUS_OK)
            st = fa_buffer_read(c->pl[c->cur], 0, lpart, (size_t)chunk_lse_bytes(f, a));
        if (st != FA_STATUS_OK)
            break;
        fa_tensor_layout l = ring_layout(f->o->tensor_layout, H, f->mine.rows, D, first);
        ring_place(&l, w->batch, H, n, D, elem, part, o);
        for (int64_t bh = 0; bh < w->batch * H; bh++)
            memcpy(lse + bh * f->mine.rows + first, lpart + bh * n, (size_t)n * 4);
    }
    if (st == FA_STATUS_OK)
        st = fa_buffer_write(f->x->o, 0, o, (size_t)ob);
    if (st == FA_STATUS_OK && f->x->lse)
        st = fa_buffer_write(f->x->lse, 0, lse, (size_t)lb);
    if (st != FA_STATUS_OK)
        ring_lib_fail(f->run, f->ctx, st, "writing O and LSE");
    free(o);
    free(part);
    free(lse);
    free(lpart);
}

/* A query chunk that no block reached (every key masked for every row: bottom-right with
 * seqlen_q > seqlen_k, or a window): O = 0 and LSE = -inf, as a single device ends such rows. */
static void empty_results(fwd_state *f)
{
    size_t elem = fa_dtype_size(f->w->dtype);
    for (int a = 0; a < f->mine.chunks && !ring_failed(f->run); a++) {
        fwd_chunk *c = &f->ch[a];
        uint64_t ob = chunk_o_elems(f, a) * elem, lb = chunk_lse_bytes(f, a);
        if (ob == 0 || c->parts > 0)
            continue;
        for (uint64_t r = 0; r < lb / 4; r++)
            c->lse_host[r] = -INFINITY;
        void *zeros = calloc(1, (size_t)ob);
        fa_status st = zeros ? fa_buffer_write(c->po[c->cur], 0, zeros, (size_t)ob)
                             : FA_STATUS_OUT_OF_MEMORY;
        free(zeros);
        if (st == FA_STATUS_OK)
            st = fa_buffer_write(c->pl[c->cur], 0, c->lse_host, (size_t)lb);
        if (st != FA_STATUS_OK)
            ring_lib_fail(f->run, f->ctx, st, "a chunk with no visible key");
        c->parts = 1;
    }
}

/* Sinks join each row's softmax once: a last merge of every chunk's result with a part of
 * O = 0 and LSE = sink[h] (a sink of -inf weighs nothing). */
static void add_sinks(fwd_state *f)
{
    size_t elem = fa_dtype_size(f->w->dtype);
    for (int a = 0; a < f->mine.chunks && f->sinks && !ring_failed(f->run); a++) {
        fwd_chunk *c = &f->ch[a];
        uint64_t ob = chunk_o_elems(f, a) * elem, n = (uint64_t)f->mine.len[a];
        if (ob == 0 || c->parts == 0)
            continue;
        for (uint64_t r = 0; r < chunk_lse_bytes(f, a) / 4; r++)
            c->lse_host[r] = f->sinks[(r / n) % (uint64_t)f->w->heads_q];
        void *zeros = calloc(1, (size_t)ob);
        fa_status st = zeros ? fa_buffer_write(c->po[c->cur], (size_t)ob, zeros, (size_t)ob)
                             : FA_STATUS_OUT_OF_MEMORY;
        free(zeros);
        if (st == FA_STATUS_OK)
            st = fa_buffer_write(c->lse_new, 0, c->lse_host, (size_t)chunk_lse_bytes(f, a));
        if (st != FA_STATUS_OK) {
            ring_lib_fail(f->run, f->ctx, st, "the sinks' part");
            return;
        }
        merge_new(f, a);
    }
}

fa_status fa_ring_forward(fa_context *ctx, const fa_ring_transport *transport,
                          const fa_problem *whole, const fa_ring_options *options,
                          const fa_ring_tensors *tensors, char *why, size_t why_size)
{
    ring_run run;
    if (!ring_run_start(&run, ctx, transport, options, tensors))
        return ring_finish(&run, options, why, why_size);
    fwd_state f;
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    f.w = whole;
    f.o = options;
    f.x = tensors;
    f.run = &run;
    if (ring_check_whole(&run, whole, options) == FA_STATUS_OK)
        setup(&f);
    ring_agree(&run);
    if (!ring_failed(&run)) {
        steps(&f);
        empty_results(&f);
        add_sinks(&f);
    }
    ring_agree(&run);
    if (!ring_failed(&run))
        write_outputs(&f);
    ring_agree(&run);
    release(&f);
    return ring_finish(&run, options, why, why_size);
}
