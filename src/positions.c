/*
 * positions.c - a problem that is a block of a longer one (fa_problem's q_position, k_position,
 * whole_seqlen_q, whole_seqlen_k): their validation and the kernel params' shifts, so that the
 * rules of kernel_params.h (mask, window, ALiBi, dropout) see the whole problem's positions.
 */
#include "internal.h"

int64_t fa__whole_seqlen_q(const fa_problem *p)
{
    return p->whole_seqlen_q ? p->whole_seqlen_q : p->q_position + p->seqlen_q;
}

int64_t fa__whole_seqlen_k(const fa_problem *p)
{
    return p->whole_seqlen_k ? p->whole_seqlen_k : p->k_position + p->seqlen_k;
}

bool fa__positioned(const fa_problem *p)
{
    return p->q_position || p->k_position || p->whole_seqlen_q || p->whole_seqlen_k;
}

/* One side: position >= 0, whole length 0 or covering the block, all within 2^60 so that the
 * shifts and the window's sums stay inside int64. */
static fa_status check_side(fa_context *ctx, const char *side, int64_t pos, int64_t len,
                            int64_t whole)
{
    if (pos < 0 || pos > FA__MAX_ELEMS - len)
        return fa__error(ctx, FA_STATUS_INVALID_POSITION,
                         "%s_position = %lld is outside [0, 2^60 - seqlen_%s]", side,
                         (long long)pos, side);
    if (whole != 0 && (whole < pos + len || whole > FA__MAX_ELEMS))
        return fa__error(ctx, FA_STATUS_INVALID_POSITION,
                         "whole_seqlen_%s = %lld does not hold rows [%lld, %lld) (or passes 2^60)",
                         side, (long long)whole, (long long)pos, (long long)(pos + len));
    return FA_STATUS_OK;
}

fa_status fa__positions_validate(fa_context *ctx, const fa_problem *p)
{
    if (!fa__positioned(p))
        return FA_STATUS_OK;
    fa_status st = check_side(ctx, "q", p->q_position, p->seqlen_q, p->whole_seqlen_q);
    if (st == FA_STATUS_OK)
        st = check_side(ctx, "k", p->k_position, p->seqlen_k, p->whole_seqlen_k);
    if (st != FA_STATUS_OK)
        return st;
    if (p->varlen || p->seqlens_k)
        return fa__error(ctx, FA_STATUS_INVALID_POSITION,
                         "positions are not supported with %s (its sequences have their own "
                         "lengths)", p->varlen ? "varlen" : "seqlens_k");
    if (p->dropout_p > 0.0f && p->k_position % 4 != 0)
        return fa__error(ctx, FA_STATUS_INVALID_POSITION,
                         "k_position = %lld with dropout is not a multiple of 4 (dropout draws "
                         "its words for 4 keys at once)", (long long)p->k_position);
    return FA_STATUS_OK;
}

void fa__kernel_params_fill_positions(const fa_problem *p, fa_kernel_params *kp)
{
    kp->q_position = p->q_position;
    kp->k_position = p->k_position;
    kp->shift_top_left = p->q_position - p->k_position;
    /* (whole_k - whole_q) + (q_position - k_position), less the block's own seqlen_k - seqlen_q
     * that fa_diagonal adds: 0 for a problem that is not a block */
    kp->shift_bottom_right = fa__whole_seqlen_k(p) - fa__whole_seqlen_q(p) + p->q_position -
                             p->k_position - (p->seqlen_k - p->seqlen_q);
}
