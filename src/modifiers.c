/*
 * modifiers.c - the score modifiers (softcap, ALiBi, bias, sliding window, sinks) and dropout:
 * which a problem turns on, their validation, their kernel params and their names. The order in
 * which a tile applies them is in flashattn.h and docs/algorithm.md; the window and dropout
 * rules every backend shares are in kernel_params.h.
 */
#include "internal.h"

#include <math.h>

unsigned fa__problem_features(const fa_problem *p)
{
    unsigned f = 0;
    if (p->softcap > 0.0f)
        f |= FA_FEATURE_SOFTCAP;
    if (p->alibi)
        f |= FA_FEATURE_ALIBI;
    if (p->bias)
        f |= FA_FEATURE_BIAS;
    if (p->window)
        f |= FA_FEATURE_WINDOW;
    if (p->sinks)
        f |= FA_FEATURE_SINKS;
    if (p->dropout_p > 0.0f)
        f |= FA_FEATURE_DROPOUT;
    if (p->block_sparse)
        f |= FA_FEATURE_BLOCK_SPARSE;
    if (fa__positioned(p))
        f |= FA_FEATURE_POSITIONS;
    if (p->alibi == 2)
        f |= FA_FEATURE_ALIBI_BATCH;
    return f;
}

const char *fa__feature_name(unsigned bit)
{
    switch (bit) {
    case FA_FEATURE_SOFTCAP:
        return "softcap";
    case FA_FEATURE_ALIBI:
        return "alibi";
    case FA_FEATURE_BIAS:
        return "bias";
    case FA_FEATURE_WINDOW:
        return "window";
    case FA_FEATURE_SINKS:
        return "sinks";
    case FA_FEATURE_DROPOUT:
        return "dropout";
    case FA_FEATURE_BLOCK_SPARSE:
        return "block_sparse";
    case FA_FEATURE_POSITIONS:
        return "positions";
    case FA_FEATURE_ALIBI_BATCH:
        return "alibi_batch";
    default:
        return "?";
    }
}

void fa__features_spell(unsigned features, char *dst, size_t size)
{
    fa__format(dst, size, "%s", features ? "" : "none");
    for (unsigned bit = 1; bit <= FA_FEATURE_POSITIONS; bit <<= 1) {
        if (features & bit)
            fa__append(dst, size, "%s%s", dst[0] ? ", " : "", fa__feature_name(bit));
    }
}

/* The bias: its dtype, and a layout whose span over [B, Hq, Sq, Sk] stays within 2^60. */
static fa_status check_bias(fa_context *ctx, const fa_problem *p)
{
    if (p->bias_dtype != FA_DTYPE_F32 && p->bias_dtype != p->dtype)
        return fa__error(ctx, FA_STATUS_INVALID_BIAS,
                         "bias_dtype %d is neither f32 nor the problem's dtype (%s)",
                         (int)p->bias_dtype, fa_dtype_name(p->dtype));
    const fa_tensor_layout *t = &p->bias_layout;
    const int64_t v[4] = {t->offset, t->stride_batch, t->stride_head, t->stride_seq};
    const char *const what[4] = {"offset", "stride_batch", "stride_head", "stride_seq"};
    for (int i = 0; i < 4; i++) {
        if (v[i] < 0 || v[i] > FA__MAX_ELEMS)
            return fa__error(ctx, FA_STATUS_INVALID_BIAS,
                             "bias_layout.%s = %lld is outside [0, 2^60] (0 broadcasts)", what[i],
                             (long long)v[i]);
    }
    if (fa__layout_extent(t, p->batch, p->heads_q, p->seqlen_q, p->seqlen_k) >
        (uint64_t)FA__MAX_ELEMS)
        return fa__error(ctx, FA_STATUS_INVALID_BIAS,
                         "bias_layout spans more than 2^60 elements over [%lld, %lld, %lld, %lld]",
                         (long long)p->batch, (long long)p->heads_q, (long long)p->seqlen_q,
                         (long long)p->seqlen_k);
    return FA_STATUS_OK;
}

fa_status fa__modifiers_validate(fa_context *ctx, const fa_problem *p)
{
    if (!(p->dropout_p >= 0.0f && p->dropout_p < 1.0f))
        return fa__error(ctx, FA_STATUS_INVALID_DROPOUT, "dropout_p = %g is not in [0, 1)",
                         (double)p->dropout_p);
    if (!(p->softcap == 0.0f || (p->softcap >= FA_SOFTCAP_MIN && p->softcap <= FA_SOFTCAP_MAX)))
        return fa__error(ctx, FA_STATUS_INVALID_SOFTCAP,
                         "softcap = %g is not 0 (off) or in [%g, %g]", (double)p->softcap,
                         (double)FA_SOFTCAP_MIN, (double)FA_SOFTCAP_MAX);
    if (p->window != 0 && p->window != 1)
        return fa__error(ctx, FA_STATUS_INVALID_WINDOW, "window = %d is not 0 (off) or 1 (on)",
                         (int)p->window);
    if (p->window && (p->window_left < -1 || p->window_right < -1))
        return fa__error(ctx, FA_STATUS_INVALID_WINDOW,
                         "window (%lld, %lld): each bound is >= 0, or -1 for unbounded",
                         (long long)p->window_left, (long long)p->window_right);
    if (p->bias != 0 && p->bias != 1)
        return fa__error(ctx, FA_STATUS_INVALID_BIAS, "bias = %d is not 0 (off) or 1 (on)",
                         (int)p->bias);
    if (p->alibi < 0 || p->alibi > 2)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "alibi = %d is not 0 (off), 1 (slopes [heads_q]) or 2 (slopes "
                         "[batch, heads_q])", (int)p->alibi);
    if (p->sinks != 0 && p->sinks != 1)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "sinks = %d is not 0 (off) or 1 (on)",
                         (int)p->sinks);
    fa_status st = p->bias ? check_bias(ctx, p) : FA_STATUS_OK;
    return st == FA_STATUS_OK ? fa__block_sparse_validate(ctx, p) : st;
}

/* A window bound past the whole problem's seqlen_q + seqlen_k (a block's own when it has no
 * positions) reaches every key: -1 says so, and keeps the sums of fa_window_begin /
 * fa_window_end inside int64. */
static fa_kp_i64 window_bound(const fa_problem *p, int64_t bound)
{
    return bound < 0 || bound > fa__whole_seqlen_q(p) + fa__whole_seqlen_k(p) ? -1 : bound;
}

void fa__kernel_params_fill_modifiers(const fa_problem *p, fa_kernel_params *kp)
{
    kp->features = (fa_kp_i32)fa__problem_features(p);
    kp->alibi_stride_b = p->alibi == 2 ? (fa_kp_i32)p->heads_q : 0;
    kp->window_left = kp->window_right = -1;
    if (p->window) {
        kp->window_left = window_bound(p, p->window_left);
        kp->window_right = window_bound(p, p->window_right);
    }
    if (p->bias && p->seqlen_q > 0 && p->seqlen_k > 0) { /* no element: no strides (as Q) */
        kp->bias_offset = p->bias_layout.offset;
        kp->bias_stride_b = p->bias_layout.stride_batch;
        kp->bias_stride_h = p->bias_layout.stride_head;
        kp->bias_stride_s = p->bias_layout.stride_seq;
    }
    kp->bias_dtype = (fa_kp_i32)(p->bias ? p->bias_dtype : FA_DTYPE_F32);
    kp->softcap = p->softcap;
    if (p->dropout_p > 0.0f) {
        kp->dropout_seed = p->dropout_seed;
        kp->dropout_offset = p->dropout_offset;
        kp->dropout_threshold = (fa_kp_u32)floor((double)p->dropout_p * 4294967296.0);
        kp->dropout_scale = (float)(1.0 / (1.0 - (double)p->dropout_p));
    }
    fa__block_sparse_params(p, kp);
}
