/*
 * layout.c - tensor layouts: fa_problem_set_layout's strides for BHSD and BSHD, the elements a
 * layout spans (its extent), and the dims of Q's and K's side of a run (varlen's packed rows),
 * which validation, the runs and the modifiers' bias check measure tensors with.
 */
#include "internal.h"

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

uint64_t fa__step_span(int64_t n, int64_t stride)
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
    const uint64_t terms[5] = {(uint64_t)t->offset, fa__step_span(batch, t->stride_batch),
                               fa__step_span(heads, t->stride_head),
                               fa__step_span(seq, t->stride_seq),
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
