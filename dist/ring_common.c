/*
 * ring_common.c - the ring's small shared pieces: layout names, slices of the sequence, local
 * tensor layouts, the whole problem's checks and host dtype conversions.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *fa_ring_layout_name(fa_ring_layout layout)
{
    switch (layout) {
    case FA_RING_CONTIGUOUS:
        return "contiguous";
    case FA_RING_ZIGZAG:
        return "zigzag";
    }
    return NULL;
}

fa_status fa_ring_layout_from_name(const char *name, fa_ring_layout *out)
{
    if (!name || !out)
        return FA_STATUS_NULL_POINTER;
    if (strcasecmp(name, "contiguous") == 0)
        *out = FA_RING_CONTIGUOUS;
    else if (strcasecmp(name, "zigzag") == 0)
        *out = FA_RING_ZIGZAG;
    else
        return FA_STATUS_INVALID_ARGUMENT;
    return FA_STATUS_OK;
}

/* Row where chunk c of n begins: floor(c * N / n), without overflow for N < 2^62 / n. */
static int64_t chunk_start(int64_t seqlen, int64_t n, int64_t c)
{
    return (seqlen / n) * c + (seqlen % n) * c / n;
}

fa_status fa_ring_slice_of(fa_ring_layout layout, int64_t seqlen, int size, int rank,
                           fa_ring_slice *out)
{
    if (!out)
        return FA_STATUS_NULL_POINTER;
    if (size < 1 || rank < 0 || rank >= size || seqlen < 0 || !fa_ring_layout_name(layout))
        return FA_STATUS_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int64_t n = layout == FA_RING_ZIGZAG ? 2 * (int64_t)size : size;
    int64_t chunk[2] = {rank, n - 1 - rank};
    out->chunks = layout == FA_RING_ZIGZAG ? 2 : 1;
    for (int c = 0; c < out->chunks; c++) {
        out->start[c] = chunk_start(seqlen, n, chunk[c]);
        out->len[c] = chunk_start(seqlen, n, chunk[c] + 1) - out->start[c];
        out->rows += out->len[c];
    }
    return FA_STATUS_OK;
}

fa_ring_slice ring_slice(const fa_ring_options *o, const fa_problem *whole, int size, int rank)
{
    fa_ring_slice s;
    if (fa_ring_slice_of(o->layout, whole->seqlen_q, size, rank, &s) != FA_STATUS_OK)
        memset(&s, 0, sizeof s);
    return s;
}

fa_tensor_layout ring_layout(fa_layout kind, int64_t heads, int64_t rows, int64_t head_dim,
                             int64_t first)
{
    fa_tensor_layout l;
    if (kind == FA_LAYOUT_BSHD) {
        l.stride_seq = heads * head_dim;
        l.stride_head = head_dim;
        l.stride_batch = rows * heads * head_dim;
    } else {
        l.stride_seq = head_dim;
        l.stride_head = rows * head_dim;
        l.stride_batch = heads * rows * head_dim;
    }
    l.offset = first * l.stride_seq;
    return l;
}

uint64_t ring_elems(int64_t batch, int64_t heads, int64_t rows, int64_t head_dim)
{
    return (uint64_t)batch * (uint64_t)heads * (uint64_t)rows * (uint64_t)head_dim;
}

/* The features the ring does not carry (the window, ALiBi and dropout it runs at each block's
 * absolute positions). */
static const char *unsupported_feature(const fa_problem *p)
{
    if (p->bias)
        return "an attention bias";
    if (p->varlen || p->seqlens_k || p->page_size)
        return "varlen, seqlens_k or paged K/V";
    if (p->kv_splits > 1)
        return "split-KV (the ring splits the keys itself)";
    if (p->block_sparse)
        return "block-sparse attention (its lists index the whole sequence's blocks)";
    if (p->q_position || p->k_position || p->whole_seqlen_q || p->whole_seqlen_k)
        return "positions in the whole problem (the ring sets each block's)";
    return NULL;
}

/* Dropout's words come in groups of 4 keys: every chunk must start at a multiple of 4. */
static fa_status check_dropout_chunks(ring_run *run, const fa_problem *w,
                                      const fa_ring_options *o)
{
    if (w->dropout_p == 0.0f)
        return FA_STATUS_OK;
    for (int r = 0; r < run->t->size; r++) {
        fa_ring_slice s = ring_slice(o, w, run->t->size, r);
        for (int c = 0; c < s.chunks; c++)
            if (s.start[c] % 4 != 0)
                return ring_fail(run, FA_STATUS_UNSUPPORTED,
                                 "ring attention with dropout needs every chunk to start at a "
                                 "multiple of 4 rows (rank %d's starts at %lld): make seqlen a "
                                 "multiple of 4 * %d", r, (long long)s.start[c],
                                 o->layout == FA_RING_ZIGZAG ? 2 * run->t->size : run->t->size);
    }
    return FA_STATUS_OK;
}

fa_status ring_check_whole(ring_run *run, const fa_problem *w, const fa_ring_options *o)
{
    if (!w || !o)
        return ring_fail(run, FA_STATUS_NULL_POINTER, "the whole problem or options are NULL");
    if (!fa_ring_layout_name(o->layout))
        return ring_fail(run, FA_STATUS_INVALID_ARGUMENT, "unknown ring layout %d",
                         (int)o->layout);
    if (o->tensor_layout != FA_LAYOUT_BHSD && o->tensor_layout != FA_LAYOUT_BSHD)
        return ring_fail(run, FA_STATUS_INVALID_ARGUMENT, "tensor_layout must be BHSD or BSHD");
    if (w->seqlen_q != w->seqlen_k)
        return ring_fail(run, FA_STATUS_UNSUPPORTED,
                         "the ring splits one sequence: seqlen_q (%lld) must equal seqlen_k "
                         "(%lld)", (long long)w->seqlen_q, (long long)w->seqlen_k);
    const char *what = unsupported_feature(w);
    if (what)
        return ring_fail(run, FA_STATUS_UNSUPPORTED, "ring attention does not support %s", what);
    if (w->batch < 0 || w->seqlen_q < 0 || w->heads_q < 1 || w->heads_kv < 1)
        return ring_fail(run, FA_STATUS_INVALID_SHAPE, "a size of the whole problem is invalid");
    if (w->head_dim < 1 || w->head_dim > FA_MAX_HEAD_DIM)
        return ring_fail(run, FA_STATUS_UNSUPPORTED_HEAD_DIM, "head_dim %lld is not in 1..%d",
                         (long long)w->head_dim, FA_MAX_HEAD_DIM);
    if (w->heads_q % w->heads_kv != 0)
        return ring_fail(run, FA_STATUS_HEADS_MISMATCH, "heads_q %lld is not a multiple of "
                         "heads_kv %lld", (long long)w->heads_q, (long long)w->heads_kv);
    if (!fa_dtype_name(w->dtype))
        return ring_fail(run, FA_STATUS_UNSUPPORTED_DTYPE, "unknown dtype %d", (int)w->dtype);
    if (!fa_mask_name(w->mask))
        return ring_fail(run, FA_STATUS_INVALID_MASK, "unknown mask %d", (int)w->mask);
    return check_dropout_chunks(run, w, o);
}

fa_status ring_check_buffer(ring_run *run, const fa_buffer *b, const char *name, uint64_t bytes)
{
    if (!b && bytes == 0)
        return FA_STATUS_OK; /* a rank with no rows has nothing to hold */
    if (!b)
        return ring_fail(run, FA_STATUS_NULL_POINTER, "the local %s buffer is NULL", name);
    if (fa_buffer_size(b) < bytes)
        return ring_fail(run, FA_STATUS_BUFFER_TOO_SMALL,
                         "the local %s buffer holds %zu bytes, its slice needs %llu", name,
                         fa_buffer_size(b), (unsigned long long)bytes);
    return FA_STATUS_OK;
}

void ring_to_f32(fa_dtype dtype, const void *src, float *dst, uint64_t n)
{
    const uint16_t *h = src;
    for (uint64_t i = 0; i < n; i++)
        dst[i] = dtype == FA_DTYPE_F32   ? ((const float *)src)[i]
                 : dtype == FA_DTYPE_F16 ? fa_f16_to_f32(h[i])
                                         : fa_bf16_to_f32(h[i]);
}

void ring_from_f32(fa_dtype dtype, const float *src, void *dst, uint64_t n)
{
    uint16_t *h = dst;
    for (uint64_t i = 0; i < n; i++) {
        if (dtype == FA_DTYPE_F32)
            ((float *)dst)[i] = src[i];
        else
            h[i] = dtype == FA_DTYPE_F16 ? fa_f32_to_f16(src[i]) : fa_f32_to_bf16(src[i]);
    }
}

/* Whether the window leaves no key of [k_start, + k_len) to any row of [q_start, + q_len): the
 * keys all before the first row's window or all after the last row's (square: i' = i). */
static int outside_window(const fa_problem *w, int64_t q_start, int64_t q_len, int64_t k_start,
                          int64_t k_len)
{
    if (!w->window)
        return 0;
    return (w->window_left >= 0 && k_start + k_len - 1 < q_start - w->window_left) ||
           (w->window_right >= 0 && k_start > q_start + q_len - 1 + w->window_right);
}

ring_pair ring_pair_kind(const fa_problem *w, int64_t q_start, int64_t q_len, int64_t k_start,
                         int64_t k_len)
{
    if (q_len == 0 || k_len == 0 || outside_window(w, q_start, q_len, k_start, k_len))
        return RING_PAIR_SKIP;
    if (w->mask == FA_MASK_NONE)
        return RING_PAIR_FULL;
    if (k_start == q_start)
        return RING_PAIR_DIAG;
    /* Chunks do not overlap: a key chunk after the query chunk is all masked. */
    return k_start > q_start ? RING_PAIR_SKIP : RING_PAIR_FULL;
}

fa_problem ring_pair_problem(const fa_problem *w, const fa_ring_options *o, ring_pair kind,
                             const ring_rows *q, const ring_rows *k)
{
    int64_t q_rows = q->rows, q_first = q->first, q_len = q->len;
    int64_t k_rows = k->rows, k_first = k->first, k_len = k->len;
    fa_problem p;
    fa_problem_init(&p, w->dtype, o->tensor_layout, w->batch, w->heads_q, w->heads_kv, q_len,
                    k_len, w->head_dim);
    p.q = ring_layout(o->tensor_layout, w->heads_q, q_rows, w->head_dim, q_first);
    p.k = ring_layout(o->tensor_layout, w->heads_kv, k_rows, w->head_dim, k_first);
    p.v = p.k;
    p.mask = kind == RING_PAIR_DIAG ? FA_MASK_CAUSAL_TOP_LEFT : FA_MASK_NONE;
    p.scale = w->scale;
    p.softcap = w->softcap;
    /* the position-based rules see the whole problem: the block's rows and keys in it (the
     * causal mask alone needs none: a pair is whole, skipped or its own diagonal) */
    if (w->window || w->alibi || w->dropout_p > 0.0f) {
        p.q_position = q->start;
        p.k_position = k->start;
        p.whole_seqlen_q = w->seqlen_q;
        p.whole_seqlen_k = w->seqlen_k;
    }
    p.window = w->window;
    p.window_left = w->window_left;
    p.window_right = w->window_right;
    p.alibi = w->alibi;
    p.dropout_p = w->dropout_p;
    p.dropout_seed = w->dropout_seed;
    p.dropout_offset = w->dropout_offset;
    p.block_r = w->block_r;
    p.block_c = w->block_c;
    p.kv_splits = w->kv_splits;
    return p;
}

uint64_t ring_kv_bytes(const fa_problem *w, int64_t rows)
{
    return ring_elems(w->batch, w->heads_kv, rows, w->head_dim) * fa_dtype_size(w->dtype);
}

fa_status ring_lib_fail(ring_run *run, fa_context *ctx, fa_status st, const char *what)
{
    return ring_fail(run, st, "%s: %s (%s)", what, fa_context_last_error(ctx),
                     fa_status_name(st));
}

fa_status ring_buffer(ring_run *run, fa_context *ctx, uint64_t bytes, fa_buffer **out,
                      const char *what)
{
    fa_status st = fa_buffer_create(ctx, (size_t)bytes, out);
    return st == FA_STATUS_OK ? st : ring_lib_fail(run, ctx, st, what);
}

void ring_place(const fa_tensor_layout *l, int64_t batch, int64_t heads, int64_t n,
                int64_t head_dim, size_t elem, const void *src, void *dst)
{
    const unsigned char *from = src;
    unsigned char *to = dst;
    for (int64_t bh = 0; bh < batch * heads; bh++) {
        int64_t b = bh / heads, h = bh % heads;
        for (int64_t i = 0; i < n; i++) {
            int64_t at = l->offset + b * l->stride_batch + h * l->stride_head + i * l->stride_seq;
            memcpy(to + (size_t)at * elem, from + (size_t)((bh * n + i) * head_dim) * elem,
                   (size_t)head_dim * elem);
        }
    }
}

void ring_stage_kv(ring_run *run, fa_context *ctx, const fa_buffer *k, const fa_buffer *v,
                   uint64_t kv_bytes, unsigned char *stage)
{
    if (kv_bytes == 0 || ring_failed(run))
        return;
    unsigned char *payload = stage + sizeof(ring_header);
    fa_status st = fa_buffer_read(k, 0, payload, (size_t)kv_bytes);
    if (st == FA_STATUS_OK)
        st = fa_buffer_read(v, 0, payload + kv_bytes, (size_t)kv_bytes);
    if (st != FA_STATUS_OK)
        ring_lib_fail(run, ctx, st, "staging the local K/V");
}

void ring_upload_kv(ring_run *run, fa_context *ctx, const unsigned char *stage,
                    uint64_t kv_bytes, fa_buffer *k, fa_buffer *v)
{
    if (kv_bytes == 0 || ring_failed(run))
        return;
    const unsigned char *payload = stage + sizeof(ring_header);
    fa_status st = fa_buffer_write(k, 0, payload, (size_t)kv_bytes);
    if (st == FA_STATUS_OK)
        st = fa_buffer_write(v, 0, payload + kv_bytes, (size_t)kv_bytes);
    if (st != FA_STATUS_OK)
        ring_lib_fail(run, ctx, st, "uploading a K/V block");
}

fa_status ring_read_sinks(ring_run *run, fa_context *ctx, const fa_problem *w,
                          const fa_buffer *sinks, float **out)
{
    size_t bytes = (size_t)w->heads_q * sizeof(float);
    if (!(*out = malloc(bytes)))
        return ring_fail(run, FA_STATUS_OUT_OF_MEMORY, "the sinks on the host");
    fa_status st = fa_buffer_read(sinks, 0, *out, bytes);
    return st == FA_STATUS_OK ? st : ring_lib_fail(run, ctx, st, "reading the sinks");
}
