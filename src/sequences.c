/*
 * sequences.c - how a problem addresses its sequences: packed variable-length batches
 * (cu_seqlens), per-sequence key counts (seqlens_k) and paged K/V (a block table), their
 * validation at plan time and, since the lengths live in buffers, at a run (where they are host
 * memory, or varlen's, or the context asks; otherwise the kernels clamp them), and their kernel
 * params. The addressing rules every backend shares are in kernel_params.h.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define FA__MAX_DIM (((int64_t)1 << 31) - 1)

unsigned fa__problem_seq(const fa_problem *p)
{
    unsigned s = 0;
    if (p->varlen)
        s |= FA_SEQ_VARLEN;
    if (p->seqlens_k)
        s |= FA_SEQ_SEQLENS_K;
    if (p->page_size > 0)
        s |= FA_SEQ_PAGED;
    return s;
}

fa_status fa_problem_set_paged(fa_problem *p, int64_t page_size, int64_t num_pages,
                               int64_t pages_per_seq)
{
    if (!p)
        return FA_STATUS_NULL_POINTER;
    p->page_size = page_size;
    p->num_pages = num_pages;
    p->pages_per_seq = pages_per_seq;
    /* [num_pages, page_size, heads_kv, d]: a page is the "batch" of the K/V layouts. Sizes are
     * checked by validation; saturating products keep an absurd one from wrapping here. */
    int64_t row = p->heads_kv > 0 && p->head_dim > 0 && p->heads_kv <= FA__MAX_DIM &&
                          p->head_dim <= FA__MAX_DIM
                      ? p->heads_kv * p->head_dim
                      : 0;
    int64_t page = page_size > 0 && row > 0 && page_size <= FA__MAX_ELEMS / row ? page_size * row
                                                                                : INT64_MAX;
    fa_tensor_layout t = {0, page, p->head_dim, row};
    p->k = p->v = p->dk = p->dv = t;
    return FA_STATUS_OK;
}

/* A 0/1 switch. */
static fa_status check_switch(fa_context *ctx, const char *name, int32_t v)
{
    if (v == 0 || v == 1)
        return FA_STATUS_OK;
    return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "%s = %d is not 0 (off) or 1 (on)", name,
                     (int)v);
}

/* The pool's sizes, and a table long enough for the longest sequence. */
static fa_status check_paged(fa_context *ctx, const fa_problem *p)
{
    const struct {
        const char *name;
        int64_t v;
    } sizes[3] = {{"page_size", p->page_size},
                  {"num_pages", p->num_pages},
                  {"pages_per_seq", p->pages_per_seq}};
    for (int i = 0; i < 3; i++) {
        if (sizes[i].v < 1 || sizes[i].v > FA__MAX_DIM)
            return fa__error(ctx, FA_STATUS_INVALID_SHAPE,
                             "paged: %s = %lld is outside [1, %lld]", sizes[i].name,
                             (long long)sizes[i].v, (long long)FA__MAX_DIM);
    }
    if (p->page_size * p->pages_per_seq < p->seqlen_k)
        return fa__error(ctx, FA_STATUS_INVALID_SHAPE,
                         "paged: seqlen_k = %lld keys need %lld pages of %lld; the block table "
                         "has %lld per sequence",
                         (long long)p->seqlen_k,
                         (long long)((p->seqlen_k + p->page_size - 1) / p->page_size),
                         (long long)p->page_size, (long long)p->pages_per_seq);
    if (p->batch > 0 && p->pages_per_seq > FA__MAX_ELEMS / p->batch)
        return fa__error(ctx, FA_STATUS_INVALID_SHAPE,
                         "paged: the block table's batch * pages_per_seq passes 2^60");
    return FA_STATUS_OK;
}

fa_status fa__seq_validate(fa_context *ctx, const fa_problem *p)
{
    fa_status st = check_switch(ctx, "varlen", p->varlen);
    if (st == FA_STATUS_OK)
        st = check_switch(ctx, "seqlens_k", p->seqlens_k);
    if (st != FA_STATUS_OK)
        return st;
    if (p->kv_splits < 0 || p->kv_splits > 65536)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "kv_splits = %d is outside [0, 65536] (0: the planner chooses)",
                         (int)p->kv_splits);
    if (p->page_size < 0)
        return fa__error(ctx, FA_STATUS_INVALID_SHAPE, "page_size = %lld is negative",
                         (long long)p->page_size);
    if (p->varlen && p->seqlens_k)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "varlen and seqlens_k: cu_seqlens_k already gives each sequence's keys");
    if (p->varlen && p->page_size > 0)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "varlen with a paged cache is not supported; a paged cache takes "
                         "per-sequence lengths from seqlens_k");
    return p->page_size > 0 ? check_paged(ctx, p) : FA_STATUS_OK;
}

void fa__kernel_params_fill_seq(const fa_problem *p, fa_kernel_params *kp)
{
    kp->seq = (fa_kp_i32)fa__problem_seq(p);
    kp->splits = 1;
    kp->lse_stride_h = p->seqlen_q;
    kp->lse_stride_b = p->heads_q * p->seqlen_q;
    if (p->varlen) {
        /* LSE [Hq, total_q]: lse_stride_h is set per run, from cu_seqlens_q[batch]. */
        kp->lse_stride_b = 0;
        kp->q_stride_b = kp->o_stride_b = kp->k_stride_b = kp->v_stride_b = 0;
    }
    if (p->page_size > 0) {
        kp->page_size = p->page_size;
        kp->pages_per_seq = p->pages_per_seq;
        kp->num_pages = (fa_kp_i32)p->num_pages; /* at most 2^31 - 1 (check_paged) */
    }
}

/* ---- run time: the int32 buffers, read back and checked -------------------------------- */

/* n int32 values of a buffer (already checked to hold them) on the host: in place where the
 * buffer is host memory (the cpu backend's), else copied into *owned (freed by the caller). */
static fa_status host_ints(fa_context *ctx, const fa_buffer *buf, int64_t n, const int32_t **out,
                           int32_t **owned)
{
    *owned = NULL;
    if (ctx->ops->backend == FA_BACKEND_CPU) {
        *out = buf->mem;
        return FA_STATUS_OK;
    }
    *out = *owned = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!*owned)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate %lld int32 values",
                         (long long)n);
    return n > 0 ? ctx->ops->buffer_read(ctx, buf->mem, 0, *owned, (size_t)n * 4) : FA_STATUS_OK;
}

/* cu_seqlens: cu[0] >= 0, non-decreasing, each length at most `most`; *total = cu[batch]. */
static fa_status check_cu(fa_context *ctx, const char *name, const int32_t *cu, int64_t batch,
                          int64_t most, const char *most_name, int64_t *total)
{
    if (cu[0] < 0)
        return fa__error(ctx, FA_STATUS_INVALID_SEQLENS, "%s[0] = %d is negative", name,
                         (int)cu[0]);
    for (int64_t b = 0; b < batch; b++) {
        int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len < 0)
            return fa__error(ctx, FA_STATUS_INVALID_SEQLENS,
                             "%s decreases: [%lld] = %d, [%lld] = %d", name, (long long)b,
                             (int)cu[b], (long long)(b + 1), (int)cu[b + 1]);
        if (len > most)
            return fa__error(ctx, FA_STATUS_INVALID_SEQLENS,
                             "%s: sequence %lld has %lld rows, more than %s = %lld", name,
                             (long long)b, (long long)len, most_name, (long long)most);
    }
    *total = cu[batch];
    return FA_STATUS_OK;
}

/* seqlens_k[b] in [0, seqlen_k]; paged, the pages its keys use are in [0, num_pages). */
static fa_status check_lengths(fa_context *ctx, const fa_problem *p, const int32_t *lens,
                               const int32_t *table)
{
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t len = lens ? lens[b] : p->seqlen_k;
        if (len < 0 || len > p->seqlen_k)
            return fa__error(ctx, FA_STATUS_INVALID_SEQLENS,
                             "seqlens_k[%lld] = %lld is outside [0, seqlen_k = %lld]",
                             (long long)b, (long long)len, (long long)p->seqlen_k);
        for (int64_t i = 0; table && i < (len + p->page_size - 1) / p->page_size; i++) {
            int32_t page = table[b * p->pages_per_seq + i];
            if (page < 0 || page >= p->num_pages)
                return fa__error(ctx, FA_STATUS_INVALID_BLOCK_TABLE,
                                 "block_table[%lld][%lld] = %d is outside the pool's pages [0, "
                                 "%lld) (sequence %lld has %lld keys)",
                                 (long long)b, (long long)i, (int)page, (long long)p->num_pages,
                                 (long long)b, (long long)len);
        }
    }
    return FA_STATUS_OK;
}

/* Whether a run reads seqlens_k and the block table to check them: always where they are host
 * memory; on an accelerator only when the context asks (a copy that waits for the device; the
 * kernels clamp unchecked values, fa_seq_of and fa_key_row). */
static bool check_on_host(const fa_context *ctx)
{
    return ctx->ops->backend == FA_BACKEND_CPU || ctx->check_sequences;
}

fa_status fa__seq_check_run(fa_context *ctx, const fa_problem *p, const fa_seq_buffers *seqs,
                            int64_t *total_q, int64_t *total_k)
{
    const int32_t *cu_q = NULL, *cu_k = NULL, *lens = NULL, *table = NULL;
    int32_t *owned[4] = {NULL, NULL, NULL, NULL};
    fa_status st = FA_STATUS_OK;
    *total_q = p->seqlen_q;
    *total_k = p->seqlen_k;
    if (p->varlen) { /* always: the packed rows size the tensors and the LSE */
        st = host_ints(ctx, seqs->cu_seqlens_q, p->batch + 1, &cu_q, &owned[0]);
        if (st == FA_STATUS_OK)
            st = host_ints(ctx, seqs->cu_seqlens_k, p->batch + 1, &cu_k, &owned[1]);
        if (st == FA_STATUS_OK)
            st = check_cu(ctx, "cu_seqlens_q", cu_q, p->batch, p->seqlen_q, "seqlen_q", total_q);
        if (st == FA_STATUS_OK)
            st = check_cu(ctx, "cu_seqlens_k", cu_k, p->batch, p->seqlen_k, "seqlen_k", total_k);
    } else if ((p->seqlens_k || p->page_size > 0) && check_on_host(ctx)) {
        if (p->seqlens_k)
            st = host_ints(ctx, seqs->seqlens_k, p->batch, &lens, &owned[2]);
        if (st == FA_STATUS_OK && p->page_size > 0)
            st = host_ints(ctx, seqs->block_table, p->batch * p->pages_per_seq, &table,
                           &owned[3]);
        if (st == FA_STATUS_OK)
            st = check_lengths(ctx, p, lens, table);
    }
    for (int i = 0; i < 4; i++)
        free(owned[i]);
    return st;
}
