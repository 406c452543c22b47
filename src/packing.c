/*
 * packing.c - a one-row decode as the kernels can run it faster: GQA packing (the query heads
 * of a K/V head as one tile's rows) and heads packing (every query head of a sequence as the
 * rows of one head), when the problem's rows are alike enough to allow it.
 */
#include "internal.h"

/* Q or O [b][g][0][x] of a one-row problem seen as [b][h_kv][g][x], h = h_kv * G + g. */
static fa_tensor_layout pack_layout(fa_tensor_layout t, int64_t group)
{
    t.stride_seq = t.stride_head;
    t.stride_head *= group;
    return t;
}

/* Whether the query heads of a one-row problem can be rows: dense (not varlen), seqlen_q 1, no
 * mask or causal bottom-right (row 0 sees every key either way), no bias or dropout (they
 * address the head and row themselves) and no positions (a packed row is a head); softcap,
 * ALiBi, a window and sinks the packed kernel applies per row (PACKED). Not with slopes per
 * sequence (alibi 2): the packed rows index the slopes by head alone. */
static bool heads_alike(const fa_problem *p)
{
    const unsigned allowed =
        FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_WINDOW | FA_FEATURE_SINKS;
    return p->seqlen_q == 1 && !p->varlen && p->alibi != 2 && !fa__positioned(p) &&
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
