/*
 * kernel_params.c - fa_kernel_params from a valid problem (its shape, layouts, scale; the
 * backward's tensors), and the checks that the struct's layout, which OpenCL C and CUDA read
 * too, cannot drift. The modifiers and the sequences fill their own fields (modifiers.c,
 * sequences.c).
 */
#include "internal.h"

#include <stddef.h>
#include <string.h>

_Static_assert(offsetof(fa_kernel_params, scale) == 180, "fa_kernel_params scale offset");
_Static_assert(offsetof(fa_kernel_params, sparse_block_q) == 504,
               "fa_kernel_params: block-sparse fields appended");
_Static_assert(offsetof(fa_kernel_params, alibi_stride_b) == 528,
               "fa_kernel_params: the slopes' batch stride appended");
_Static_assert(offsetof(fa_kernel_params, q_position) == 536,
               "fa_kernel_params q_position offset");
_Static_assert(sizeof(fa_kernel_params) == 568, "fa_kernel_params size (kernels check it too)");

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
    fa__kernel_params_fill_positions(p, kp);
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
