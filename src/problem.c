/*
 * problem.c - filling and validating an fa_problem, the one place where user input is checked
 * before any backend sees it, and turning a valid problem into kernel params.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Sizes above this are rejected so that every product of sizes below stays inside int64. */
#define FA__MAX_DIM (((int64_t)1 << 31) - 1)
#define FA__MAX_TILE 65536

/* a * b for sizes >= 0, saturated at INT64_MAX: fa_problem_init takes any sizes, and a product
 * that does not fit is reported by validation (INVALID_SHAPE) instead of wrapping here. */
static int64_t mul_sat(int64_t a, int64_t b)
{
    if (a <= 0 || b <= 0)
        return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

static void layout_fill(fa_tensor_layout *t, fa_layout layout, int64_t heads, int64_t seq,
                        int64_t d)
{
    t->offset = 0;
    if (layout == FA_LAYOUT_BHSD) {
        t->stride_seq = d;
        t->stride_head = mul_sat(seq, d);
        t->stride_batch = mul_sat(heads, t->stride_head);
    } else {
        t->stride_head = d;
        t->stride_seq = mul_sat(heads, d);
        t->stride_batch = mul_sat(seq, t->stride_seq);
    }
}

fa_status fa_problem_set_layout(fa_problem *p, fa_layout layout)
{
    if (!p)
        return FA_STATUS_NULL_POINTER;
    if (layout != FA_LAYOUT_BHSD && layout != FA_LAYOUT_BSHD)
        return FA_STATUS_INVALID_ARGUMENT;
    layout_fill(&p->q, layout, p->heads_q, p->seqlen_q, p->head_dim);
    layout_fill(&p->k, layout, p->heads_kv, p->seqlen_k, p->head_dim);
    layout_fill(&p->v, layout, p->heads_kv, p->seqlen_k, p->head_dim);
    layout_fill(&p->o, layout, p->heads_q, p->seqlen_q, p->head_dim);
    p->d_o = p->o;
    p->dq = p->q;
    p->dk = p->k;
    p->dv = p->v;
    return FA_STATUS_OK;
}

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

/* (n - 1) * stride for a count n >= 1 and a stride in [0, 2^60], or UINT64_MAX when it passes
 * 2^60: the product of a count below 2^31 and such a stride would not fit in 64 bits. */
static uint64_t step_span(int64_t n, int64_t stride)
{
    if (n <= 1 || stride == 0)
        return 0;
    if ((uint64_t)stride > (uint64_t)FA__MAX_ELEMS / (uint64_t)(n - 1))
        return UINT64_MAX;
    return (uint64_t)(n - 1) * (uint64_t)stride;
}

uint64_t fa__layout_extent(const fa_tensor_layout *t, int64_t batch, int64_t heads, int64_t seq,
                           int64_t head_dim)
{
    if (batch == 0 || heads == 0 || seq == 0 || head_dim == 0)
        return 0;
    const uint64_t terms[5] = {(uint64_t)t->offset, step_span(batch, t->stride_batch),
                               step_span(heads, t->stride_head), step_span(seq, t->stride_seq),
                               (uint64_t)head_dim};
    uint64_t sum = 0;
    for (int i = 0; i < 5; i++) {
        /* Each term is at most 2^60 (or the UINT64_MAX mark), so the sum saturates, never
         * wraps. */
        if (terms[i] > (uint64_t)FA__MAX_ELEMS || sum > (uint64_t)FA__MAX_ELEMS)
            return UINT64_MAX;
        sum += terms[i];
    }
    return sum;
}

fa__dims fa__q_dims(const fa_problem *p, int64_t total_q)
{
    fa__dims d = {p->varlen ? 1 : p->batch, p->heads_q, p->varlen ? total_q : p->seqlen_q};
    return d;
}

fa__dims fa__kv_dims(const fa_problem *p, int64_t total_k)
{
    fa__dims d = {p->batch, p->heads_kv, p->seqlen_k};
    if (p->varlen) {
        d.batch = 1;
        d.seq = total_k;
    } else if (p->page_size > 0) {
        d.batch = p->num_pages;
        d.seq = p->page_size;
    }
    return d;
}

fa_tensor_layout fa__layout_used(const fa_problem *p, const fa_tensor_layout *t)
{
    fa_tensor_layout u = *t;
    if (p->varlen)
        u.stride_batch = 0; /* packed rows: the token index alone addresses a row */
    return u;
}

uint64_t fa__tensor_extent(const fa_problem *p, const fa_tensor_layout *t, fa__dims dims)
{
    fa_tensor_layout u = fa__layout_used(p, t);
    return fa__layout_extent(&u, dims.batch, dims.heads, dims.seq, p->head_dim);
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
        span += (int64_t)step_span(d[i].count, d[i].stride);
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
    return fa__modifiers_validate(ctx, p);
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

static void copy_layout(const fa_tensor_layout *t, fa_kp_i64 *offset, fa_kp_i64 *sb,
                        fa_kp_i64 *sh, fa_kp_i64 *ss)
{
    *offset = t->offset;
    *sb = t->stride_batch;
    *sh = t->stride_head;
    *ss = t->stride_seq;
}

void fa__kernel_params_fill(const fa_problem *p, int32_t block_r, fa_kernel_params *kp)
{
    memset(kp, 0, sizeof *kp);
    /* A tensor with no rows is never read or written, and validation leaves its strides free
     * up to 2^60, where b * stride_b would overflow int64: such layouts reach no backend (the
     * backward runs with seqlen_q = 0, to zero dK and dV). */
    if (p->seqlen_q > 0) {
        copy_layout(&p->q, &kp->q_offset, &kp->q_stride_b, &kp->q_stride_h, &kp->q_stride_s);
        copy_layout(&p->o, &kp->o_offset, &kp->o_stride_b, &kp->o_stride_h, &kp->o_stride_s);
    }
    if (p->seqlen_k > 0) {
        copy_layout(&p->k, &kp->k_offset, &kp->k_stride_b, &kp->k_stride_h, &kp->k_stride_s);
        copy_layout(&p->v, &kp->v_offset, &kp->v_stride_b, &kp->v_stride_h, &kp->v_stride_s);
    }
    kp->batch = p->batch;
    kp->seqlen_q = p->seqlen_q;
    kp->seqlen_k = p->seqlen_k;
    kp->q_tiles = block_r > 0 ? (p->seqlen_q + block_r - 1) / block_r : 0;
    kp->heads_q = (fa_kp_i32)p->heads_q;
    kp->heads_kv = (fa_kp_i32)p->heads_kv;
    kp->head_dim = (fa_kp_i32)p->head_dim;
    kp->mask = (fa_kp_i32)p->mask;
    kp->has_lse = 0; /* set per run */
    kp->scale = p->scale; /* resolved once, by fa_plan_create */
    kp->scale_log2 = (float)((double)kp->scale * 1.4426950408889634);
    fa__kernel_params_fill_modifiers(p, kp);
    fa__kernel_params_fill_seq(p, kp);
}

/* Q or O [b][g][0][x] of a one-row problem seen as [b][h_kv][g][x], h = h_kv * G + g. */
static fa_tensor_layout pack_layout(fa_tensor_layout t, int64_t group)
{
    t.stride_seq = t.stride_head;
    t.stride_head *= group;
    return t;
}

/* Whether the query heads of a one-row problem can be rows: dense (not varlen), seqlen_q 1, no
 * mask or causal bottom-right (row 0 sees every key either way), and no bias or dropout (they
 * address the head and row themselves); softcap, ALiBi, a window and sinks the packed kernel
 * applies per row (PACKED). */
static bool heads_alike(const fa_problem *p)
{
    const unsigned allowed =
        FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_WINDOW | FA_FEATURE_SINKS;
    return p->seqlen_q == 1 && !p->varlen &&
           (p->mask == FA_MASK_NONE || p->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT) &&
           !(fa__problem_features(p) & ~allowed);
}

bool fa__gqa_pack(const fa_problem *p, fa_problem *out)
{
    if (!heads_alike(p) || p->heads_q <= p->heads_kv)
        return false;
    const int64_t group = p->heads_q / p->heads_kv;
    *out = *p;
    out->heads_q = p->heads_kv;
    out->seqlen_q = group;
    out->mask = FA_MASK_NONE;
    out->q = pack_layout(p->q, group);
    out->o = pack_layout(p->o, group);
    return true;
}

int64_t fa__heads_pack(const fa_problem *p, int64_t max_rows, fa_problem *out)
{
    if (!heads_alike(p) || p->heads_q > max_rows)
        return 0;
    *out = *p;
    out->heads_q = out->heads_kv = 1;
    out->seqlen_q = p->heads_q;
    out->mask = FA_MASK_NONE;
    out->q.stride_seq = p->q.stride_head; /* query head h is row h */
    out->o.stride_seq = p->o.stride_head;
    return p->heads_q / p->heads_kv;
}

void fa__kernel_params_fill_backward(const fa_problem *p, fa_kernel_params *kp)
{
    if (p->seqlen_q > 0) { /* as for Q and O: no rows, no strides */
        copy_layout(&p->d_o, &kp->do_offset, &kp->do_stride_b, &kp->do_stride_h,
                    &kp->do_stride_s);
        copy_layout(&p->dq, &kp->dq_offset, &kp->dq_stride_b, &kp->dq_stride_h,
                    &kp->dq_stride_s);
    }
    if (p->seqlen_k > 0) { /* as for K and V: no rows, no strides */
        copy_layout(&p->dk, &kp->dk_offset, &kp->dk_stride_b, &kp->dk_stride_h,
                    &kp->dk_stride_s);
        copy_layout(&p->dv, &kp->dv_offset, &kp->dv_stride_b, &kp->dv_stride_h,
                    &kp->dv_stride_s);
    }
    if (p->varlen) /* packed rows: the token index alone addresses a row */
        kp->do_stride_b = kp->dq_stride_b = kp->dk_stride_b = kp->dv_stride_b = 0;
}
