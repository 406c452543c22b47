/*
 * kernel_params.h - the one parameter struct every backend's forward kernel receives by value,
 * and the mask rule every backend applies.
 *
 * Included by the C core and, embedded as text, by the OpenCL and CUDA kernels, so the layout
 * and the rule are written once. 8-byte fields come first so no language inserts padding; the C
 * side checks the size and offsets with _Static_assert (src/core.c). All offsets and strides
 * count elements.
 */
#ifndef FA_KERNEL_PARAMS_H
#define FA_KERNEL_PARAMS_H

#if defined(__OPENCL_VERSION__)
typedef long fa_kp_i64;
typedef int fa_kp_i32;
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
typedef long long fa_kp_i64;
typedef int fa_kp_i32;
#else
#include <stdint.h>
typedef int64_t fa_kp_i64;
typedef int32_t fa_kp_i32;
#endif

typedef struct fa_kernel_params {
    fa_kp_i64 q_offset, q_stride_b, q_stride_h, q_stride_s; /* Q [B, Hq, Sq, D] */
    fa_kp_i64 k_offset, k_stride_b, k_stride_h, k_stride_s; /* K [B, Hkv, Sk, D] */
    fa_kp_i64 v_offset, v_stride_b, v_stride_h, v_stride_s; /* V [B, Hkv, Sk, D] */
    fa_kp_i64 o_offset, o_stride_b, o_stride_h, o_stride_s; /* O [B, Hq, Sq, D] */
    fa_kp_i64 batch;    /* B */
    fa_kp_i64 seqlen_q; /* Sq */
    fa_kp_i64 seqlen_k; /* Sk */
    fa_kp_i64 q_tiles;  /* ceil(Sq / Br): work-groups per (batch, head) */
    fa_kp_i32 heads_q;  /* Hq */
    fa_kp_i32 heads_kv; /* Hkv; query head h reads K/V head h / (Hq / Hkv) */
    fa_kp_i32 head_dim; /* D */
    fa_kp_i32 mask;     /* fa_mask value */
    fa_kp_i32 has_lse;  /* 1: write LSE f32 [B, Hq, Sq] contiguous */
    float scale;        /* softmax scale, resolved (never 0) */
    float scale_log2;   /* scale * log2(e), for kernels that use exp2 */
    fa_kp_i32 pad_;     /* keeps the size a multiple of 8 */
    /* The backward's tensors (zero in a forward's params). Appended: a struct that grows keeps
     * every earlier offset, and the 32-bit block above ends on a multiple of 8. */
    fa_kp_i64 do_offset, do_stride_b, do_stride_h, do_stride_s; /* dO [B, Hq, Sq, D] */
    fa_kp_i64 dq_offset, dq_stride_b, dq_stride_h, dq_stride_s; /* dQ [B, Hq, Sq, D] */
    fa_kp_i64 dk_offset, dk_stride_b, dk_stride_h, dk_stride_s; /* dK [B, Hkv, Sk, D] */
    fa_kp_i64 dv_offset, dv_stride_b, dv_stride_h, dv_stride_s; /* dV [B, Hkv, Sk, D] */
} fa_kernel_params;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FA_KP_FN static __device__ __forceinline__
#else
#define FA_KP_FN static inline
#endif

/*
 * The mask rule: query row `row` may attend to keys [0, fa_keys_allowed(...)), i.e. key j when
 *   mask 0 (FA_MASK_NONE):                 always
 *   mask 1 (FA_MASK_CAUSAL_TOP_LEFT):      j <= row
 *   mask 2 (FA_MASK_CAUSAL_BOTTOM_RIGHT):  j <= row + (seqlen_k - seqlen_q)
 * clamped to [0, seqlen_k]. The count never decreases with the row, so a tile's first row has
 * the fewest keys and its last row the most.
 */
FA_KP_FN fa_kp_i64 fa_keys_allowed(fa_kp_i32 mask, fa_kp_i64 row, fa_kp_i64 seqlen_q,
                                   fa_kp_i64 seqlen_k)
{
    if (mask == 0)
        return seqlen_k;
    fa_kp_i64 n = row + 1 + (mask == 2 ? seqlen_k - seqlen_q : 0);
    return n < 0 ? 0 : n > seqlen_k ? seqlen_k : n;
}

#endif /* FA_KERNEL_PARAMS_H */
