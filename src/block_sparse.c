/*
 * block_sparse.c - block-sparse attention in the core: the problem's fields checked, their
 * kernel params, which op reads which list, the lists' sizes, and a run's lists read back and
 * checked before anything runs (the host-side lists themselves are src/block_mask.c's). The rule
 * every backend applies, fa_block_list_row and fa_block_listed, is in kernel_params.h.
 */
#include "internal.h"

#include <flashattn_block_mask.h>

#include <stdlib.h>

static fa_block_mask_shape shape_of(const fa_problem *p)
{
    fa_block_mask_shape s = {p->sparse_batch, p->sparse_heads, p->seqlen_q, p->seqlen_k,
                             p->sparse_block_q, p->sparse_block_k};
    return s;
}

fa_status fa__block_sparse_validate(fa_context *ctx, const fa_problem *p)
{
    if (p->block_sparse != 0 && p->block_sparse != 1)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "block_sparse = %d is not 0 (off) or 1 (on)", (int)p->block_sparse);
    if (!p->block_sparse)
        return FA_STATUS_OK;
    if (p->sparse_full != 0 && p->sparse_full != 1)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "sparse_full = %d is not 0 or 1",
                         (int)p->sparse_full);
    if ((p->sparse_batch != 1 && p->sparse_batch != p->batch) ||
        (p->sparse_heads != 1 && p->sparse_heads != p->heads_q))
        return fa__error(ctx, FA_STATUS_INVALID_SHAPE,
                         "the block lists' sparse_batch = %d and sparse_heads = %d must each be 1 "
                         "(broadcast) or the problem's (batch %lld, heads_q %lld)",
                         (int)p->sparse_batch, (int)p->sparse_heads, (long long)p->batch,
                         (long long)p->heads_q);
    char why[256];
    const fa_block_mask_shape s = shape_of(p);
    fa_status st = fa_block_mask_check_shape(&s, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(ctx, st, "%s", why);
    if (p->sparse_full && (p->varlen || p->seqlens_k || p->page_size > 0))
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "full block lists with per-sequence lengths (varlen, seqlens_k, paged): "
                         "a full block is checked against one seqlen_q x seqlen_k; give its "
                         "blocks in the other lists");
    return FA_STATUS_OK;
}

void fa__block_sparse_params(const fa_problem *p, fa_kernel_params *kp)
{
    if (!p->block_sparse)
        return;
    const fa_block_mask_shape s = shape_of(p);
    kp->sparse_block_q = p->sparse_block_q;
    kp->sparse_block_k = p->sparse_block_k;
    kp->sparse_q_blocks = (fa_kp_i32)fa_block_mask_q_blocks(&s);
    kp->sparse_k_blocks = (fa_kp_i32)fa_block_mask_k_blocks(&s);
    kp->sparse_batch = p->sparse_batch;
    kp->sparse_heads = p->sparse_heads;
}

static bool is_full(fa__tensor t)
{
    return t == FA__TENSOR_FULL_KV_NUM_BLOCKS || t == FA__TENSOR_FULL_KV_INDICES ||
           t == FA__TENSOR_FULL_Q_NUM_BLOCKS || t == FA__TENSOR_FULL_Q_INDICES;
}

static bool is_transposed(fa__tensor t)
{
    return t >= FA__TENSOR_Q_NUM_BLOCKS && t <= FA__TENSOR_FULL_Q_INDICES;
}

bool fa__block_sparse_role(const fa_problem *p, fa__op op, fa__tensor t)
{
    if (!p->block_sparse || op == FA__OP_MERGE || (is_full(t) && !p->sparse_full))
        return false;
    return op == FA__OP_BACKWARD || !is_transposed(t);
}

uint64_t fa__block_sparse_ints(const fa_problem *p, fa__tensor t)
{
    const fa_block_mask_shape s = shape_of(p);
    int64_t nq = fa_block_mask_q_blocks(&s), nk = fa_block_mask_k_blocks(&s);
    if (nq < 0 || nk < 0)
        return 0;
    bool counts = t == FA__TENSOR_KV_NUM_BLOCKS || t == FA__TENSOR_FULL_KV_NUM_BLOCKS ||
                  t == FA__TENSOR_Q_NUM_BLOCKS || t == FA__TENSOR_FULL_Q_NUM_BLOCKS;
    uint64_t rows = (uint64_t)(is_transposed(t) ? nk : nq), cols = counts ? 1 : (uint64_t)(
                                                                  is_transposed(t) ? nq : nk);
    return (uint64_t)s.batch * (uint64_t)s.heads * rows * cols;
}

/* ---- a run's lists --------------------------------------------------------------------------- */

/* The eight list tensors in fa__tensor order, and where fa_tensors holds them. */
static const fa_buffer *list_buffer(const fa_tensors *t, int i)
{
    const fa_buffer *const all[8] = {t->kv_num_blocks,      t->kv_indices,
                                     t->full_kv_num_blocks, t->full_kv_indices,
                                     t->q_num_blocks,       t->q_indices,
                                     t->full_q_num_blocks,  t->full_q_indices};
    return all[i];
}

/* Whether every element of block (qb, kb) is inside the causal mask and the window: the mask's
 * key count and the window's first key never decrease with the row (kernel_params.h), so the
 * block's first row bounds the end and its last row the beginning. */
static bool block_unmasked(const fa_kernel_params *kp, int64_t qb, int64_t kb)
{
    int64_t r0 = qb * kp->sparse_block_q, r1 = r0 + kp->sparse_block_q;
    int64_t k0 = kb * kp->sparse_block_k, k1 = k0 + kp->sparse_block_k;
    r1 = (r1 < kp->seqlen_q ? r1 : kp->seqlen_q) - 1;
    k1 = k1 < kp->seqlen_k ? k1 : kp->seqlen_k;
    return fa_keys_begin(kp, kp->features, r1) <= k0 &&
           fa_keys_end(kp, kp->mask, kp->features, r0) >= k1;
}

static fa_status check_full_blocks(fa_context *ctx, const fa_kernel_params *kp,
                                   const fa_block_lists *kv, int64_t rows_all)
{
    const int64_t nq = kp->sparse_q_blocks, nk = kp->sparse_k_blocks;
    for (int64_t row = 0; row < rows_all; row++) {
        for (int32_t e = 0; e < kv->full_num_blocks[row]; e++) {
            int32_t kb = kv->full_indices[row * nk + e];
            if (!block_unmasked(kp, row % nq, kb))
                return fa__error(ctx, FA_STATUS_INVALID_BLOCK_MASK,
                                 "full_kv_indices: block (query block %lld, key block %d) of "
                                 "list row %lld is partly masked by the causal mask or the "
                                 "window; a full block must be wholly visible (list it in "
                                 "kv_indices)",
                                 (long long)(row % nq), (int)kb, (long long)row);
        }
    }
    return FA_STATUS_OK;
}

/* The lists a run reads, on the host: each given one read back (owned[i], NULL otherwise). */
static fa_status read_lists(fa_context *ctx, const fa_plan *plan, const fa_tensors *t,
                            int32_t *owned[8])
{
    fa_status st = FA_STATUS_OK;
    for (int i = 0; i < 8 && st == FA_STATUS_OK; i++) {
        fa__tensor tensor = (fa__tensor)(FA__TENSOR_KV_NUM_BLOCKS + i);
        const fa_buffer *buf = list_buffer(t, i);
        if (!buf || !fa__block_sparse_role(&plan->problem, plan->op, tensor))
            continue;
        size_t bytes = (size_t)fa__block_sparse_ints(&plan->problem, tensor) * 4;
        owned[i] = malloc(bytes > 0 ? bytes : 4);
        if (!owned[i])
            return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
        if (bytes > 0)
            st = ctx->ops->buffer_read(ctx, buf->mem, 0, owned[i], bytes);
    }
    return st;
}

fa_status fa__block_sparse_check_run(fa_context *ctx, const fa_plan *plan, const fa_tensors *t)
{
    int32_t *l[8] = {NULL};
    fa_status st = read_lists(ctx, plan, t, l);
    const fa_block_mask_shape s = shape_of(&plan->problem);
    fa_block_lists kv = {l[0], l[1], l[2], l[3]}, q = {l[4], l[5], l[6], l[7]};
    char why[256];
    if (st == FA_STATUS_OK) {
        st = fa_block_mask_check(&s, &kv, q.num_blocks ? &q : NULL, why, sizeof why);
        if (st != FA_STATUS_OK)
            st = fa__error(ctx, st, "%s", why);
    }
    if (st == FA_STATUS_OK && kv.full_num_blocks)
        st = check_full_blocks(ctx, &plan->launches[0].params, &kv,
                               s.batch * s.heads * fa_block_mask_q_blocks(&s));
    for (int i = 0; i < 8; i++)
        free(l[i]);
    return st;
}
