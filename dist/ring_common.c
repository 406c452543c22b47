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

/* Row where chunk c of n begins: 4 * floor(c * G / n) with G = ceil(N / 4) groups of 4 rows,
 * capped at N, so every chunk starts at a multiple of 4 (dropout draws its Philox words for 4
 * keys at once: a block's k_position must be a multiple of 4). No overflow for N < 2^62. */
static int64_t chunk_start(int64_t seqlen, int64_t n, int64_t c)
{
    int64_t groups = seqlen / 4 + (seqlen % 4 != 0);
    int64_t start = 4 * ((groups / n) * c + (groups % n) * c / n);
    return start < seqlen ? start : seqlen;
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

fa_ring_slice ring_slice(const fa_ring_options *o, int64_t seqlen, int size, int rank)
{
    fa_ring_slice s;
    if (fa_ring_slice_of(o->layout, seqlen, size, rank, &s) != FA_STATUS_OK)
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

fa_status ring_check_whole(ring_run *run, const fa_problem *w, const fa_ring_options *o)
{
    if (!w || !o)
        return ring_fail(run, FA_STATUS_NULL_POINTER, "the whole problem or options are NULL");
    if (!fa_ring_layout_name(o->layout))
        return ring_fail(run, FA_STATUS_INVALID_ARGUMENT, "unknown ring layout %d",
                         (int)o->layout);
    if (o->tensor_layout != FA_LAYOUT_BHSD && o->tensor_layout != FA_LAYOUT_BSHD)
        return ring_fail(run, FA_STATUS_INVALID_ARGUMENT, "tensor_layout must be BHSD or BSHD");
    const char *what = unsupported_feature(w);
    if (what)
        return ring_fail(run, FA_STATUS_UNSUPPORTED, "ring attention does not support %s", what);
    if (w->batch < 0 || w->seqlen_q < 0 || w->seqlen_k < 0 || w->heads_q < 1 || w->heads_kv < 1)
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
    return FA_STATUS_OK;
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

/* A window side bounded by the whole problem's lengths (-1: unbounded, as one that reaches
 * past every key), so that the sums below stay inside int64 (positions are below 2^60). */
static int64_t window_side(const fa_problem *w, int64_t side)
{
    int64_t all = w->seqlen_q + w->seqlen_k;
    return !w->window || side < 0 || side > all ? all : side;
}

/* The last key row i of the whole problem may see (causal mask and the window's right side
 * together; INT64_MAX: none bounds it). Keys j <= i + seqlen_k - seqlen_q with bottom-right,
 * j <= i with top-left; the window's i' is bottom-right aligned (kernel_params.h). */
static int64_t last_key(const fa_problem *w, int64_t i)
{
    int64_t shift = w->seqlen_k - w->seqlen_q, hi = INT64_MAX;
    if (w->mask != FA_MASK_NONE)
        hi = i + (w->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT ? shift : 0);
    if (w->window && w->window_right >= 0) {
        int64_t win = i + shift + window_side(w, w->window_right);
        hi = win < hi ? win : hi;
    }
    return hi;
}

/* The first key row i may see (the window's left side; INT64_MIN: unbounded). */
static int64_t first_key(const fa_problem *w, int64_t i)
{
    if (!w->window || w->window_left < 0)
        return INT64_MIN;
    return i + w->seqlen_k - w->seqlen_q - window_side(w, w->window_left);
}

ring_pair ring_pair_kind(const fa_problem *w, int64_t q_start, int64_t q_len, int64_t k_start,
                         int64_t k_len)
{
    if (q_len == 0 || k_len == 0)
        return RING_PAIR_SKIP;
    int64_t q_last = q_start + q_len - 1, k_last = k_start + k_len - 1;
    /* Both bounds move right one key per row and keep their distance, so the rows that see a
     * key of the chunk are one run: none when the last row's range ends before the chunk, the
     * first row's begins after it, or the ranges are empty. */
    if (last_key(w, q_last) < k_start || first_key(w, q_start) > k_last ||
        last_key(w, q_start) < first_key(w, q_start))
        return RING_PAIR_SKIP;
    if (w->mask == FA_MASK_NONE)
        return RING_PAIR_FULL;
    /* the causal mask alone leaves the first row every key of the chunk: all rows see them */
    int64_t diag = q_start + (w->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT ? w->seqlen_k - w->seqlen_q
                                                                      : 0);
    return diag >= k_last ? RING_PAIR_FULL : RING_PAIR_MASKED;
}

/* A masked pair's causal mask as a block's own, without positions: key j of the block is
 * visible to row i when j <= i + shift; top-left when shift is 0, bottom-right when it is
 * k_len - q_len; FA_MASK_NONE when neither (the block then needs its positions). */
static fa_mask local_mask(const fa_problem *w, const ring_rows *q, const ring_rows *k)
{
    int64_t shift = q->start - k->start +
                    (w->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT ? w->seqlen_k - w->seqlen_q : 0);
    if (shift == 0)
        return FA_MASK_CAUSAL_TOP_LEFT;
    return shift == k->len - q->len ? FA_MASK_CAUSAL_BOTTOM_RIGHT : FA_MASK_NONE;
}

fa_problem ring_pair_problem(const fa_problem *w, const fa_ring_options *o, ring_pair kind,
                             const ring_rows *q, const ring_rows *k)
{
    fa_problem p;
    fa_problem_init(&p, w->dtype, o->tensor_layout, w->batch, w->heads_q, w->heads_kv, q->len,
                    k->len, w->head_dim);
    p.q = ring_layout(o->tensor_layout, w->heads_q, q->rows, w->head_dim, q->first);
    p.k = ring_layout(o->tensor_layout, w->heads_kv, k->rows, w->head_dim, k->first);
    p.v = p.k;
    fa_mask local = kind == RING_PAIR_MASKED ? local_mask(w, q, k) : FA_MASK_NONE;
    /* The position-based rules see the whole problem: the block's rows and keys in it. A
     * masked pair whose diagonal is its own top-left or bottom-right one needs none. */
    int positioned = w->window || w->alibi || w->dropout_p > 0.0f ||
                     (kind == RING_PAIR_MASKED && local == FA_MASK_NONE);
    p.mask = kind != RING_PAIR_MASKED ? FA_MASK_NONE : positioned ? w->mask : local;
    if (positioned) {
        p.q_position = q->start;
        p.k_position = k->start;
        p.whole_seqlen_q = w->seqlen_q;
        p.whole_seqlen_k = w->seqlen_k;
    }
    p.scale = w->scale;
    p.softcap = w->softcap;
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
