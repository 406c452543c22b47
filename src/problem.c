/*
 * problem.c - filling and validating an fa_problem: the one place where user input is checked
 * before any backend sees it (sizes, layouts, the rows outputs write), the modifiers' and
 * sequences' own checks called from here.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Sizes above this are rejected so that every product of sizes below stays inside int64. */
#define FA__MAX_DIM (((int64_t)1 << 31) - 1)

#define FA__MAX_TILE 65536

fa_status fa_problem_init(fa_problem *p, fa_dtype dtype, fa_layout layout, int64_t batch,
                          int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_k,
                          int64_t head_dim)
{
    if (!p)
        return FA_STATUS_NULL_POINTER;
    if (layout != FA_LAYOUT_BHSD && layout != FA_LAYOUT_BSHD)
        return FA_STATUS_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    p->dtype = dtype;
    p->batch = batch;
    p->heads_q = heads_q;
    p->heads_kv = heads_kv;
    p->seqlen_q = seqlen_q;
    p->seqlen_k = seqlen_k;
    p->head_dim = head_dim;
    p->mask = FA_MASK_NONE;
    return fa_problem_set_layout(p, layout);
}

float fa__problem_scale(const fa_problem *p)
{
    return p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
}

/* Every size is checked before any product of sizes is formed. */
static fa_status check_sizes(fa_context *ctx, const fa_problem *p)
{
    if (fa_dtype_size(p->dtype) == 0)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED_DTYPE, "dtype %d is not a fa_dtype",
                         (int)p->dtype);
    const struct {
        const char *name;
        int64_t value, min;
    } sizes[] = {{"batch", p->batch, 0},       {"heads_q", p->heads_q, 1},
                 {"heads_kv", p->heads_kv, 1}, {"seqlen_q", p->seqlen_q, 0},
                 {"seqlen_k", p->seqlen_k, 0}, {"head_dim", p->head_dim, 1}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i].value < sizes[i].min || sizes[i].value > FA__MAX_DIM)
            return fa__error(ctx, FA_STATUS_INVALID_SHAPE,
                             "%s = %lld is outside [%lld, %lld]", sizes[i].name,
                             (long long)sizes[i].value, (long long)sizes[i].min,
                             (long long)FA__MAX_DIM);
    }
    if (p->head_dim > FA_MAX_HEAD_DIM)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED_HEAD_DIM,
                         "head_dim = %lld is larger than the supported %d",
                         (long long)p->head_dim, FA_MAX_HEAD_DIM);
    if (p->heads_q % p->heads_kv != 0)
        return fa__error(ctx, FA_STATUS_HEADS_MISMATCH,
                         "heads_q = %lld is not a multiple of heads_kv = %lld",
                         (long long)p->heads_q, (long long)p->heads_kv);
    int64_t seq = p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k;
    /* All values are < 2^31; divide instead of multiplying so nothing overflows. */
    if (p->batch > 0 && seq > 0 &&
        p->heads_q * p->head_dim > FA__MAX_ELEMS / p->batch / seq)
        return fa__error(ctx, FA_STATUS_INVALID_SHAPE,
                         "batch * heads * seqlen * head_dim exceeds 2^60 elements");
    return FA_STATUS_OK;
}

/* Offsets and strides in [0, 2^60], and the elements the tensor spans at most 2^60, so that
 * every index and byte count a backend forms from them fits in int64. */
static fa_status check_layout(fa_context *ctx, const fa_problem *p, const char *name,
                              const fa_tensor_layout *t, fa__dims dims)
{
    const int64_t heads = dims.heads, seq = dims.seq;
    const int64_t v[4] = {t->offset, t->stride_batch, t->stride_head, t->stride_seq};
    const char *const what[4] = {"offset", "stride_batch", "stride_head", "stride_seq"};
    for (int i = 0; i < 4; i++) {
        if (v[i] < 0 || v[i] > FA__MAX_ELEMS)
            return fa__error(ctx, FA_STATUS_INVALID_STRIDE, "%s.%s = %lld is outside [0, 2^60]",
                             name, what[i], (long long)v[i]);
    }
    if (fa__tensor_extent(p, t, dims) > (uint64_t)FA__MAX_ELEMS)
        return fa__error(ctx, FA_STATUS_INVALID_STRIDE,
                         "%s spans more than 2^60 elements: offset %lld + strides (batch %lld, "
                         "head %lld, seq %lld) times sizes (%lld, %lld, %lld)",
                         name, (long long)t->offset, (long long)t->stride_batch,
                         (long long)t->stride_head, (long long)t->stride_seq,
                         (long long)dims.batch, (long long)heads, (long long)seq);
    return FA_STATUS_OK;
}

/*
 * An output's rows must not overlap, or the result would depend on the order of writes. Sorting
 * the three (stride, count) pairs by stride, each must step over everything the smaller ones
 * span. Runs after check_layout: the output spans at most 2^60 elements, so no product or sum
 * here overflows.
 */
static fa_status check_output_rows(fa_context *ctx, const fa_problem *p, const char *name,
                                   const fa_tensor_layout *layout, fa__dims dims)
{
    const int64_t heads = dims.heads, seq = dims.seq;
    const fa_tensor_layout used = fa__layout_used(p, layout), *t = &used;
    if (dims.batch == 0 || seq == 0)
        return FA_STATUS_OK; /* no rows at all: nothing is written, whatever the strides */
    struct dim {
        int64_t stride, count;
    } d[3] = {{t->stride_batch, dims.batch}, {t->stride_head, heads}, {t->stride_seq, seq}};
    for (int i = 0; i < 3; i++) {
        for (int j = i + 1; j < 3; j++) {
            if (d[j].stride < d[i].stride) {
                struct dim swap = d[i];
                d[i] = d[j];
                d[j] = swap;
            }
        }
    }
    int64_t span = p->head_dim; /* elements covered by the dimensions seen so far */
    for (int i = 0; i < 3; i++) {
        if (d[i].count <= 1)
            continue;
        if (d[i].stride < span)
            return fa__error(ctx, FA_STATUS_INVALID_STRIDE,
                             "rows of %s overlap: a stride of %lld is smaller than the %lld "
                             "elements it must step over",
                             name, (long long)d[i].stride, (long long)span);
        span += (int64_t)fa__step_span(d[i].count, d[i].stride);
    }
    return FA_STATUS_OK;
}

fa_status fa__problem_validate(fa_context *ctx, const fa_problem *p)
{
    if (!p)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the problem is NULL");
    fa_status st = check_sizes(ctx, p);
    if (st != FA_STATUS_OK)
        return st;
    if (p->mask != FA_MASK_NONE && p->mask != FA_MASK_CAUSAL_TOP_LEFT &&
        p->mask != FA_MASK_CAUSAL_BOTTOM_RIGHT)
        return fa__error(ctx, FA_STATUS_INVALID_MASK, "mask = %d is not a fa_mask", (int)p->mask);
    if (!isfinite(p->scale))
        return fa__error(ctx, FA_STATUS_INVALID_SCALE, "scale = %g is not finite",
                         (double)p->scale);
    st = fa__seq_validate(ctx, p);
    if (st == FA_STATUS_OK)
        st = fa__tensors_validate(ctx, p, p->seqlen_q, p->seqlen_k, false);
    if (st != FA_STATUS_OK)
        return st;
    if (p->block_r < 0 || p->block_r > FA__MAX_TILE || p->block_c < 0 ||
        p->block_c > FA__MAX_TILE)
        return fa__error(ctx, FA_STATUS_INVALID_TILE,
                         "tile overrides block_r = %d, block_c = %d must be in [0, %d]",
                         (int)p->block_r, (int)p->block_c, FA__MAX_TILE);
    st = fa__modifiers_validate(ctx, p);
    return st == FA_STATUS_OK ? fa__positions_validate(ctx, p) : st;
}

fa_status fa__tensors_validate(fa_context *ctx, const fa_problem *p, int64_t total_q,
                               int64_t total_k, bool backward)
{
    const struct {
        const char *name;
        const fa_tensor_layout *t;
        bool is_kv, is_output;
    } t[8] = {{"q", &p->q, false, false},   {"k", &p->k, true, false},
              {"v", &p->v, true, false},    {"o", &p->o, false, true},
              {"d_o", &p->d_o, false, false}, {"dq", &p->dq, false, true},
              {"dk", &p->dk, true, true},   {"dv", &p->dv, true, true}};
    const fa__dims qd = fa__q_dims(p, total_q), kd = fa__kv_dims(p, total_k);
    fa_status st = FA_STATUS_OK;
    for (int i = 0; i < (backward ? 8 : 4) && st == FA_STATUS_OK; i++) {
        st = check_layout(ctx, p, t[i].name, t[i].t, t[i].is_kv ? kd : qd);
        if (st == FA_STATUS_OK && t[i].is_output)
            st = check_output_rows(ctx, p, i == 3 ? "O" : t[i].name, t[i].t,
                                   t[i].is_kv ? kd : qd);
    }
    return st;
}

fa_status fa__problem_validate_backward(fa_context *ctx, const fa_problem *p)
{
    fa_status st = fa__problem_validate(ctx, p);
    if (st == FA_STATUS_OK)
        st = fa__tensors_validate(ctx, p, p->seqlen_q, p->seqlen_k, true);
    return st;
}
