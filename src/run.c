/*
 * run.c - the runs of a plan (fa_forward, fa_backward, fa_merge and their _ex / _seq forms):
 * buffer checks against the problem's layout, the sequence buffers read back and checked, and
 * the dispatch of the plan's launches with its scratch.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- forward ------------------------------------------------------------------------------ */

typedef struct tensor_use {
    const char *name;
    const fa_buffer *buf;
    uint64_t begin, end; /* bytes the tensor may touch; begin == end when empty */
    bool output;
} tensor_use;

static fa_status check_buffer(fa_context *ctx, const tensor_use *t)
{
    if (t->buf->ctx != ctx)
        return fa__error(ctx, FA_STATUS_CONTEXT_MISMATCH,
                         "buffer %s belongs to another context", t->name);
    if (t->end > t->buf->bytes)
        return fa__error(ctx, FA_STATUS_BUFFER_TOO_SMALL,
                         "buffer %s has %zu bytes; the problem's layout needs %llu", t->name,
                         t->buf->bytes, (unsigned long long)t->end);
    return FA_STATUS_OK;
}

/* Compared by memory, not by handle: two wraps of one allocation overlap as one buffer. */
static bool overlaps(const tensor_use *a, const tensor_use *b)
{
    if (a->buf->space != b->buf->space || a->begin >= a->end || b->begin >= b->end)
        return false;
    uint64_t a0 = a->buf->addr + a->begin, b0 = b->buf->addr + b->begin;
    return a0 < b->buf->addr + b->end && b0 < a->buf->addr + a->end;
}

/* A tensor of Q's side (Q, O, dO, dQ) or K's side at the run's rows (varlen's packed totals). */
typedef struct run_dims {
    fa__dims q, kv;
} run_dims;

static tensor_use use_of(const char *name, const fa_buffer *buf, const fa_tensor_layout *t,
                         const fa_problem *p, const run_dims *rd, bool is_kv, bool output)
{
    size_t elem = fa_dtype_size(p->dtype);
    uint64_t extent = fa__tensor_extent(p, t, is_kv ? rd->kv : rd->q);
    tensor_use u = {name, buf, extent ? (uint64_t)t->offset * elem : 0, extent * elem, output};
    return u;
}

/* LSE: f32 [batch, heads_q, seqlen_q] (varlen: [heads_q, total_q]), contiguous from byte 0. */
static tensor_use lse_use(const fa_buffer *buf, const fa_problem *p, const run_dims *rd,
                          bool output)
{
    tensor_use u = {"lse", buf, 0,
                    (uint64_t)rd->q.batch * (uint64_t)p->heads_q * (uint64_t)rd->q.seq * 4,
                    output};
    return u;
}

/* An int32 vector of n values (the sequence buffers). */
static tensor_use int_use(const char *name, const fa_buffer *buf, int64_t n)
{
    tensor_use u = {name, buf, 0, (uint64_t)n * 4, false};
    return u;
}

/* Every buffer of this context and large enough; no output overlapping any other tensor. */
static fa_status check_uses(fa_context *ctx, const tensor_use *u, int n)
{
    for (int i = 0; i < n; i++) {
        fa_status st = check_buffer(ctx, &u[i]);
        if (st != FA_STATUS_OK)
            return st;
    }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n && u[i].output; j++) {
            if (j != i && overlaps(&u[i], &u[j]))
                return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                                 "output %s overlaps %s in the same buffer", u[i].name, u[j].name);
        }
    }
    return FA_STATUS_OK;
}

/* The checks every run makes before its plan's launches: context, kind of plan. */
static fa_status check_run(fa_context *ctx, const fa_plan *plan, fa__op op)
{
    if (plan->ctx != ctx)
        return fa__error(ctx, FA_STATUS_CONTEXT_MISMATCH, "the plan belongs to another context");
    static const char *const maker[FA__OP_COUNT] = {
        [FA__OP_FORWARD] = "fa_plan_create", [FA__OP_BACKWARD] = "fa_plan_create_backward",
        [FA__OP_MERGE] = "fa_plan_create_merge"};
    static const char *const run_name[FA__OP_COUNT] = {
        [FA__OP_FORWARD] = "a forward", [FA__OP_BACKWARD] = "fa_backward",
        [FA__OP_MERGE] = "fa_merge"};
    if (plan->op != op)
        return fa__error(ctx, FA_STATUS_INVALID_PLAN,
                         "the plan was made by %s; %s needs a plan from %s", maker[plan->op],
                         run_name[op], maker[op]);
    return FA_STATUS_OK;
}

/* Runs the plan's launches in order on the bound tensors, with the plan's scratch allocated
 * (and counted) for the run. A launch with an empty grid has nothing to do and is not made.
 * total_q: varlen's packed rows, the stride between LSE's heads. */
static fa_status run_launches(fa_context *ctx, const fa_plan *plan, void **mem, bool has_lse,
                              int64_t total_q)
{
    fa_status st = FA_STATUS_OK;
    uint64_t scratch = fa__run_scratch_bytes(plan, total_q);
    if (scratch > SIZE_MAX)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "scratch of %llu bytes does not fit "
                         "this host's sizes", (unsigned long long)scratch);
    if (scratch && (st = ctx->ops->buffer_alloc(ctx, (size_t)scratch,
                                                &mem[FA__TENSOR_SCRATCH])) != FA_STATUS_OK)
        return st;
    if (scratch)
        fa__mem_add(ctx, scratch);
    for (int i = 0; i < plan->n_launches && st == FA_STATUS_OK; i++) {
        const fa__launch *l = &plan->launches[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0)
            continue;
        fa_kernel_params kp;
        fa__run_params(plan, l, has_lse, total_q, &kp);
        st = ctx->ops->launch(ctx, plan, l, &kp, mem);
    }
    if (scratch) {
        ctx->ops->buffer_free(ctx, mem[FA__TENSOR_SCRATCH]);
        fa__mem_sub(ctx, scratch);
    }
    if (st == FA_STATUS_OK)
        fa__error_clear(ctx);
    return st;
}

/* A per-head f32 vector [heads_q] (ALiBi slopes, sinks and their gradient). */
static tensor_use head_vector_use(const char *name, const fa_buffer *buf, const fa_problem *p,
                                  bool output)
{
    tensor_use u = {name, buf, 0, (uint64_t)p->heads_q * 4, output};
    return u;
}

/* The bias over [batch, heads_q, seqlen_q, seqlen_k], keys contiguous, in its own dtype. */
static tensor_use bias_use(const fa_buffer *buf, const fa_problem *p)
{
    size_t elem = fa_dtype_size(p->bias_dtype);
    uint64_t extent = fa__layout_extent(&p->bias_layout, p->batch, p->heads_q, p->seqlen_q,
                                        p->seqlen_k);
    tensor_use u = {"bias", buf, extent ? (uint64_t)p->bias_layout.offset * elem : 0,
                    extent * elem, false};
    return u;
}

/*
 * The modifier buffers of a run: given exactly for the features the problem turns on (d_sinks
 * only by the backward), appended to u[*n] and bound in mem.
 */
static fa_status modifier_uses(fa_context *ctx, const fa_problem *p,
                               const fa_modifier_buffers *mods, bool backward, tensor_use *u,
                               int *n, void **mem)
{
    const fa_modifier_buffers none = {NULL, NULL, NULL, NULL};
    const fa_modifier_buffers *m = mods ? mods : &none;
    const struct {
        const char *name;
        const fa_buffer *buf;
        bool on;
        fa__tensor tensor;
    } t[4] = {{"alibi_slopes", m->alibi_slopes, p->alibi != 0, FA__TENSOR_ALIBI},
              {"bias", m->bias, p->bias != 0, FA__TENSOR_BIAS},
              {"sinks", m->sinks, p->sinks != 0, FA__TENSOR_SINKS},
              {"d_sinks", m->d_sinks, backward && p->sinks != 0, FA__TENSOR_DSINKS}};
    for (int i = 0; i < 4; i++) {
        if (t[i].on && !t[i].buf)
            return fa__error(ctx, FA_STATUS_NULL_POINTER,
                             "the problem turns %s on but its buffer (mods->%s) is NULL",
                             t[i].name, t[i].name);
        if (!t[i].on && t[i].buf)
            return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                             "mods->%s is given but the problem %s", t[i].name,
                             i == 3 && !backward ? "runs no backward (fa_forward_ex)"
                                                 : "does not turn it on");
        if (!t[i].on)
            continue;
        u[(*n)++] = i == 1 ? bias_use(t[i].buf, p) : head_vector_use(t[i].name, t[i].buf, p, i == 3);
        mem[t[i].tensor] = t[i].buf->mem;
    }
    return FA_STATUS_OK;
}

/*
 * The sequence buffers of a run: given exactly for what the problem uses, appended to u[*n] and
 * bound in mem; then read back and checked, giving the packed rows' dims (rd) for the tensors'
 * checks.
 */
static fa_status seq_uses(fa_context *ctx, const fa_problem *p, const fa_seq_buffers *seqs,
                          tensor_use *u, int *n, void **mem, run_dims *rd, int64_t *total_q)
{
    const fa_seq_buffers none = {NULL, NULL, NULL, NULL};
    const fa_seq_buffers *s = seqs ? seqs : &none;
    const struct {
        const char *name;
        const fa_buffer *buf;
        bool on;
        int64_t count;
        fa__tensor tensor;
    } t[4] = {{"cu_seqlens_q", s->cu_seqlens_q, p->varlen != 0, p->batch + 1,
               FA__TENSOR_CU_SEQLENS_Q},
              {"cu_seqlens_k", s->cu_seqlens_k, p->varlen != 0, p->batch + 1,
               FA__TENSOR_CU_SEQLENS_K},
              {"seqlens_k", s->seqlens_k, p->seqlens_k != 0, p->batch, FA__TENSOR_SEQLENS_K},
              {"block_table", s->block_table, p->page_size > 0, p->batch * p->pages_per_seq,
               FA__TENSOR_BLOCK_TABLE}};
    for (int i = 0; i < 4; i++) {
        if (t[i].on && !t[i].buf)
            return fa__error(ctx, FA_STATUS_NULL_POINTER,
                             "the problem uses %s but its buffer (seqs->%s) is NULL", t[i].name,
                             t[i].name);
        if (!t[i].on && t[i].buf)
            return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                             "seqs->%s is given but the problem does not use it", t[i].name);
        if (!t[i].on)
            continue;
        u[*n] = int_use(t[i].name, t[i].buf, t[i].count);
        fa_status st = check_uses(ctx, &u[*n], 1);
        if (st != FA_STATUS_OK)
            return st;
        (*n)++;
        mem[t[i].tensor] = t[i].buf->mem;
    }
    int64_t total_k = p->seqlen_k;
    fa_status st = fa__seq_check_run(ctx, p, s, total_q, &total_k);
    rd->q = fa__q_dims(p, *total_q);
    rd->kv = fa__kv_dims(p, total_k);
    if (st == FA_STATUS_OK && p->varlen)
        st = fa__tensors_validate(ctx, p, *total_q, total_k, false);
    return st;
}

fa_status fa_forward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q, const fa_buffer *k,
                     const fa_buffer *v, fa_buffer *o, fa_buffer *lse)
{
    return fa_forward_ex(ctx, plan, q, k, v, o, lse, NULL);
}

fa_status fa_forward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                        const fa_buffer *k, const fa_buffer *v, fa_buffer *o, fa_buffer *lse,
                        const fa_modifier_buffers *mods)
{
    return fa_forward_seq(ctx, plan, q, k, v, o, lse, mods, NULL);
}

fa_status fa_forward_seq(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                         const fa_buffer *k, const fa_buffer *v, fa_buffer *o, fa_buffer *lse,
                         const fa_modifier_buffers *mods, const fa_seq_buffers *seqs)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!plan || !q || !k || !v || !o)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the %s pointer is NULL",
                         !plan ? "plan" : !q ? "q" : !k ? "k" : !v ? "v" : "o");
    fa_status st = check_run(ctx, plan, FA__OP_FORWARD);
    if (st != FA_STATUS_OK)
        return st;
    const fa_problem *p = &plan->problem;
    void *mem[FA__TENSOR_COUNT] = {NULL};
    tensor_use u[13];
    int n = 0;
    run_dims rd;
    int64_t total_q = p->seqlen_q;
    st = seq_uses(ctx, p, seqs, u, &n, mem, &rd, &total_q);
    if (st != FA_STATUS_OK)
        return st;
    u[n++] = use_of("q", q, &p->q, p, &rd, false, false);
    u[n++] = use_of("k", k, &p->k, p, &rd, true, false);
    u[n++] = use_of("v", v, &p->v, p, &rd, true, false);
    u[n++] = use_of("o", o, &p->o, p, &rd, false, true);
    if (lse)
        u[n++] = lse_use(lse, p, &rd, true);
    st = modifier_uses(ctx, p, mods, false, u, &n, mem);
    if (st == FA_STATUS_OK)
        st = check_uses(ctx, u, n);
    if (st != FA_STATUS_OK)
        return st;
    if (p->batch == 0 || p->seqlen_q == 0) {
        fa__error_clear(ctx);
        return FA_STATUS_OK; /* documented no-op: nothing to write */
    }
    /* Without LSE the kernel never touches that argument (has_lse = 0); O stands in for it. */
    mem[FA__TENSOR_Q] = q->mem;
    mem[FA__TENSOR_K] = k->mem;
    mem[FA__TENSOR_V] = v->mem;
    mem[FA__TENSOR_O] = o->mem;
    mem[FA__TENSOR_LSE] = lse ? lse->mem : o->mem;
    return run_launches(ctx, plan, mem, lse != NULL, total_q);
}

fa_status fa_backward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                      const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                      const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq, fa_buffer *dk,
                      fa_buffer *dv)
{
    return fa_backward_ex(ctx, plan, q, k, v, o, lse, d_o, dq, dk, dv, NULL);
}

fa_status fa_backward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                         const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                         const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                         fa_buffer *dk, fa_buffer *dv, const fa_modifier_buffers *mods)
{
    return fa_backward_seq(ctx, plan, q, k, v, o, lse, d_o, dq, dk, dv, mods, NULL);
}

fa_status fa_backward_seq(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                          const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                          const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                          fa_buffer *dk, fa_buffer *dv, const fa_modifier_buffers *mods,
                          const fa_seq_buffers *seqs)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    const void *ptrs[10] = {plan, q, k, v, o, lse, d_o, dq, dk, dv};
    static const char *const names[10] = {"plan", "q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv"};
    for (int i = 0; i < 10; i++) {
        if (!ptrs[i])
            return fa__error(ctx, FA_STATUS_NULL_POINTER, "the %s pointer is NULL", names[i]);
    }
    fa_status st = check_run(ctx, plan, FA__OP_BACKWARD);
    if (st != FA_STATUS_OK)
        return st;
    const fa_problem *p = &plan->problem;
    void *mem[FA__TENSOR_COUNT] = {
        [FA__TENSOR_Q] = q->mem,    [FA__TENSOR_K] = k->mem,   [FA__TENSOR_V] = v->mem,
        [FA__TENSOR_O] = o->mem,    [FA__TENSOR_LSE] = lse->mem, [FA__TENSOR_DO] = d_o->mem,
        [FA__TENSOR_DQ] = dq->mem,  [FA__TENSOR_DK] = dk->mem, [FA__TENSOR_DV] = dv->mem};
    tensor_use u[17];
    int n = 0;
    run_dims rd;
    int64_t total_q = p->seqlen_q;
    st = seq_uses(ctx, p, seqs, u, &n, mem, &rd, &total_q);
    if (st == FA_STATUS_OK && p->varlen)
        st = fa__tensors_validate(ctx, p, rd.q.seq, rd.kv.seq, true);
    if (st != FA_STATUS_OK)
        return st;
    u[n++] = use_of("q", q, &p->q, p, &rd, false, false);
    u[n++] = use_of("k", k, &p->k, p, &rd, true, false);
    u[n++] = use_of("v", v, &p->v, p, &rd, true, false);
    u[n++] = use_of("o", o, &p->o, p, &rd, false, false);
    u[n++] = lse_use(lse, p, &rd, false);
    u[n++] = use_of("d_o", d_o, &p->d_o, p, &rd, false, false);
    u[n++] = use_of("dq", dq, &p->dq, p, &rd, false, true);
    u[n++] = use_of("dk", dk, &p->dk, p, &rd, true, true);
    u[n++] = use_of("dv", dv, &p->dv, p, &rd, true, true);
    st = modifier_uses(ctx, p, mods, true, u, &n, mem);
    if (st == FA_STATUS_OK)
        st = check_uses(ctx, u, n);
    if (st != FA_STATUS_OK)
        return st;
    if (p->batch == 0 && !p->sinks) {
        fa__error_clear(ctx);
        return FA_STATUS_OK; /* nothing to write (with sinks, d_sinks = 0 is written) */
    }
    return run_launches(ctx, plan, mem, true, total_q);
}

fa_status fa_merge(fa_context *ctx, const fa_plan *plan, const fa_buffer *o_parts,
                   const fa_buffer *lse_parts, fa_buffer *o, fa_buffer *lse)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!plan || !o_parts || !lse_parts || !o)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the %s pointer is NULL",
                         !plan ? "plan" : !o_parts ? "o_parts" : !lse_parts ? "lse_parts" : "o");
    fa_status st = check_run(ctx, plan, FA__OP_MERGE);
    if (st != FA_STATUS_OK)
        return st;
    const fa_problem *p = &plan->problem;
    const fa_kernel_params *kp = &plan->launches[0].params;
    const uint64_t parts = (uint64_t)plan->kv_splits, elem = fa_dtype_size(p->dtype);
    run_dims rd = {fa__q_dims(p, p->seqlen_q), fa__kv_dims(p, p->seqlen_k)};
    tensor_use u[4] = {{"o_parts", o_parts, 0, parts * (uint64_t)kp->parts_stride * elem, false},
                       {"lse_parts", lse_parts, 0, parts * (uint64_t)kp->part_rows * 4, false},
                       use_of("o", o, &p->o, p, &rd, false, true)};
    int n = 3;
    if (lse)
        u[n++] = lse_use(lse, p, &rd, true);
    st = check_uses(ctx, u, n);
    if (st != FA_STATUS_OK)
        return st;
    void *mem[FA__TENSOR_COUNT] = {[FA__TENSOR_O_PARTS] = o_parts->mem,
                                   [FA__TENSOR_LSE_PARTS] = lse_parts->mem,
                                   [FA__TENSOR_O] = o->mem,
                                   [FA__TENSOR_LSE] = lse ? lse->mem : o->mem};
    if (p->batch == 0 || p->seqlen_q == 0) {
        fa__error_clear(ctx);
        return FA_STATUS_OK;
    }
    return run_launches(ctx, plan, mem, lse != NULL, p->seqlen_q);
}
