/*
 * run.c - the run of a plan (fa_run, and its shorthands fa_forward, fa_backward, fa_merge and
 * the older _ex / _seq forms): which tensors the plan's op reads and writes, each buffer checked
 * against the problem's layout, the sequence buffers read back and checked, and the dispatch of
 * the plan's launches with its scratch.
 */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

/* The context's scratch, grown to `bytes` where it is smaller (struct fa_context). */
static fa_status scratch_for_run(fa_context *ctx, uint64_t bytes)
{
    if (bytes <= ctx->scratch_bytes)
        return FA_STATUS_OK;
    if (bytes > SIZE_MAX)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "scratch of %llu bytes does not fit "
                         "this host's sizes", (unsigned long long)bytes);
    fa_context_release_scratch(ctx);
    fa_status st = ctx->ops->buffer_alloc(ctx, (size_t)bytes, &ctx->scratch);
    if (st != FA_STATUS_OK) {
        ctx->scratch = NULL;
        return st;
    }
    ctx->scratch_bytes = bytes;
    fa__mem_add(ctx, bytes);
    return FA_STATUS_OK;
}

/* Runs the plan's launches in order on the bound tensors, with the context's scratch (grown to
 * the plan's where it is smaller). A launch with an empty grid has nothing to do and is not made.
 * total_q: varlen's packed rows, the stride between LSE's heads. */
static fa_status run_launches(fa_context *ctx, const fa_plan *plan, void **mem, bool has_lse,
                              int64_t total_q)
{
    fa_status st = scratch_for_run(ctx, fa__run_scratch_bytes(plan, total_q));
    if (st != FA_STATUS_OK)
        return st;
    mem[FA__TENSOR_SCRATCH] = ctx->scratch;
    for (int i = 0; i < plan->n_launches && st == FA_STATUS_OK; i++) {
        const fa__launch *l = &plan->launches[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0)
            continue;
        fa_kernel_params kp;
        fa__run_params(plan, l, has_lse, total_q, &kp);
        st = ctx->ops->launch(ctx, plan, l, &kp, mem);
    }
    if (st == FA_STATUS_OK)
        fa__error_clear(ctx);
    return st;
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

/* ---- the tensors of a run ------------------------------------------------------------------ */

/* Whether a run's op reads or writes a tensor. */
typedef enum role {
    ROLE_UNUSED = 0, /* must be NULL */
    ROLE_IN,         /* required input */
    ROLE_OUT,        /* required output */
    ROLE_OUT_OPTIONAL
} role;

/* What a tensor of fa_tensors is: its name, where it sits, how its extent is measured. */
typedef enum extent_kind {
    EXTENT_Q,      /* a tensor like Q (Q, O, dO, dQ) in its own layout */
    EXTENT_KV,     /* a tensor like K (K, V, dK, dV) in its own layout */
    EXTENT_LSE,    /* f32 [batch, heads_q, seqlen_q] (varlen: [heads_q, total_q]) */
    EXTENT_HEADS,  /* f32 [heads_q] (ALiBi slopes, sinks, d_sinks); the slopes [batch,
                      heads_q] with alibi 2 */
    EXTENT_BIAS,   /* the bias layout in the bias dtype */
    EXTENT_INTS,   /* int32 [count] (the sequence buffers) */
    EXTENT_LISTS,  /* int32 block-sparse lists (fa__block_sparse_ints) */
    EXTENT_PARTS,  /* fa_merge's partial O */
    EXTENT_LSE_PARTS
} extent_kind;

typedef struct slot {
    const char *name;
    size_t offset; /* of the member in fa_tensors */
    fa__tensor tensor;
    extent_kind extent;
} slot;

#define SLOT(member, tensor, extent) {#member, offsetof(fa_tensors, member), tensor, extent}

/* The sequence buffers first: their values give the packed rows the others are checked at. */
static const slot slots[] = {
    SLOT(cu_seqlens_q, FA__TENSOR_CU_SEQLENS_Q, EXTENT_INTS),
    SLOT(cu_seqlens_k, FA__TENSOR_CU_SEQLENS_K, EXTENT_INTS),
    SLOT(seqlens_k, FA__TENSOR_SEQLENS_K, EXTENT_INTS),
    SLOT(block_table, FA__TENSOR_BLOCK_TABLE, EXTENT_INTS),
    SLOT(q, FA__TENSOR_Q, EXTENT_Q),
    SLOT(k, FA__TENSOR_K, EXTENT_KV),
    SLOT(v, FA__TENSOR_V, EXTENT_KV),
    SLOT(o, FA__TENSOR_O, EXTENT_Q),
    SLOT(lse, FA__TENSOR_LSE, EXTENT_LSE),
    SLOT(d_o, FA__TENSOR_DO, EXTENT_Q),
    SLOT(dq, FA__TENSOR_DQ, EXTENT_Q),
    SLOT(dk, FA__TENSOR_DK, EXTENT_KV),
    SLOT(dv, FA__TENSOR_DV, EXTENT_KV),
    SLOT(alibi_slopes, FA__TENSOR_ALIBI, EXTENT_HEADS),
    SLOT(bias, FA__TENSOR_BIAS, EXTENT_BIAS),
    SLOT(sinks, FA__TENSOR_SINKS, EXTENT_HEADS),
    SLOT(d_sinks, FA__TENSOR_DSINKS, EXTENT_HEADS),
    SLOT(o_parts, FA__TENSOR_O_PARTS, EXTENT_PARTS),
    SLOT(lse_parts, FA__TENSOR_LSE_PARTS, EXTENT_LSE_PARTS),
    SLOT(kv_num_blocks, FA__TENSOR_KV_NUM_BLOCKS, EXTENT_LISTS),
    SLOT(kv_indices, FA__TENSOR_KV_INDICES, EXTENT_LISTS),
    SLOT(full_kv_num_blocks, FA__TENSOR_FULL_KV_NUM_BLOCKS, EXTENT_LISTS),
    SLOT(full_kv_indices, FA__TENSOR_FULL_KV_INDICES, EXTENT_LISTS),
    SLOT(q_num_blocks, FA__TENSOR_Q_NUM_BLOCKS, EXTENT_LISTS),
    SLOT(q_indices, FA__TENSOR_Q_INDICES, EXTENT_LISTS),
    SLOT(full_q_num_blocks, FA__TENSOR_FULL_Q_NUM_BLOCKS, EXTENT_LISTS),
    SLOT(full_q_indices, FA__TENSOR_FULL_Q_INDICES, EXTENT_LISTS),
};
enum { N_SLOTS = sizeof slots / sizeof slots[0] };

static const fa_buffer *slot_buffer(const fa_tensors *t, const slot *s)
{
    return *(const fa_buffer *const *)((const char *)t + s->offset);
}

/* The role of a tensor in a run of plan: the op's own tensors, then those the problem's
 * modifiers and sequences turn on. */
static role role_of(const fa_plan *plan, fa__tensor tensor)
{
    const fa_problem *p = &plan->problem;
    const bool fwd = plan->op == FA__OP_FORWARD, bwd = plan->op == FA__OP_BACKWARD;
    switch (tensor) {
    case FA__TENSOR_Q:
    case FA__TENSOR_K:
    case FA__TENSOR_V:
        return fwd || bwd ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_O:
        return bwd ? ROLE_IN : ROLE_OUT;
    case FA__TENSOR_LSE:
        return bwd ? ROLE_IN : ROLE_OUT_OPTIONAL;
    case FA__TENSOR_DO:
        return bwd ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_DQ:
    case FA__TENSOR_DK:
    case FA__TENSOR_DV:
        return bwd ? ROLE_OUT : ROLE_UNUSED;
    case FA__TENSOR_ALIBI:
        return (fwd || bwd) && p->alibi ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_BIAS:
        return (fwd || bwd) && p->bias ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_SINKS:
        return (fwd || bwd) && p->sinks ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_DSINKS:
        return bwd && p->sinks ? ROLE_OUT : ROLE_UNUSED;
    case FA__TENSOR_O_PARTS:
    case FA__TENSOR_LSE_PARTS:
        return plan->op == FA__OP_MERGE ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_CU_SEQLENS_Q:
    case FA__TENSOR_CU_SEQLENS_K:
        return p->varlen ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_SEQLENS_K:
        return p->seqlens_k ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_BLOCK_TABLE:
        return p->page_size > 0 ? ROLE_IN : ROLE_UNUSED;
    case FA__TENSOR_KV_NUM_BLOCKS:
    case FA__TENSOR_KV_INDICES:
    case FA__TENSOR_FULL_KV_NUM_BLOCKS:
    case FA__TENSOR_FULL_KV_INDICES:
    case FA__TENSOR_Q_NUM_BLOCKS:
    case FA__TENSOR_Q_INDICES:
    case FA__TENSOR_FULL_Q_NUM_BLOCKS:
    case FA__TENSOR_FULL_Q_INDICES:
        return fa__block_sparse_role(p, plan->op, tensor) ? ROLE_IN : ROLE_UNUSED;
    default:
        return ROLE_UNUSED;
    }
}

/* Why a tensor the run does not use was refused, for the message. */
static const char *unused_why(const fa_plan *plan, fa__tensor tensor)
{
    if (tensor >= FA__TENSOR_ALIBI && tensor <= FA__TENSOR_SINKS)
        return plan->op == FA__OP_MERGE ? "a merge reads no modifier"
                                        : "the problem does not turn it on";
    if (tensor == FA__TENSOR_DSINKS)
        return plan->op == FA__OP_BACKWARD ? "the problem has no sinks"
                                           : "only a backward computes gradients";
    if (tensor >= FA__TENSOR_CU_SEQLENS_Q)
        return "the problem does not use it";
    return plan->op == FA__OP_FORWARD    ? "a forward plan does not use it"
           : plan->op == FA__OP_BACKWARD ? "a backward plan does not use it"
                                         : "a merge plan does not use it";
}

/* The bytes a tensor may touch at the run's dims. */
/* The bytes [*begin, *end) a tensor of the problem touches at the run's dims (not the merge's
 * parts, whose extent is the plan's). */
static void span_of(const fa_problem *p, const slot *s, const run_dims *rd, uint64_t *begin,
                    uint64_t *end)
{
    static const size_t layout_of[FA__TENSOR_COUNT] = {
        [FA__TENSOR_Q] = offsetof(fa_problem, q),   [FA__TENSOR_K] = offsetof(fa_problem, k),
        [FA__TENSOR_V] = offsetof(fa_problem, v),   [FA__TENSOR_O] = offsetof(fa_problem, o),
        [FA__TENSOR_DO] = offsetof(fa_problem, d_o), [FA__TENSOR_DQ] = offsetof(fa_problem, dq),
        [FA__TENSOR_DK] = offsetof(fa_problem, dk), [FA__TENSOR_DV] = offsetof(fa_problem, dv)};
    tensor_use u = {s->name, NULL, 0, 0, false};
    switch (s->extent) {
    case EXTENT_Q:
    case EXTENT_KV:
        u = use_of(s->name, NULL,
                   (const fa_tensor_layout *)((const char *)p + layout_of[s->tensor]), p, rd,
                   s->extent == EXTENT_KV, false);
        break;
    case EXTENT_LSE:
        u = lse_use(NULL, p, rd, false);
        break;
    case EXTENT_HEADS:
        u.end = (uint64_t)p->heads_q * 4;
        if (s->tensor == FA__TENSOR_ALIBI && p->alibi == 2)
            u.end *= (uint64_t)p->batch;
        break;
    case EXTENT_BIAS:
        u = bias_use(NULL, p);
        break;
    case EXTENT_LISTS:
        u.end = fa__block_sparse_ints(p, s->tensor) * 4;
        break;
    case EXTENT_INTS:
    default:
        u.end = (uint64_t)(s->tensor == FA__TENSOR_SEQLENS_K ? p->batch
                           : s->tensor == FA__TENSOR_BLOCK_TABLE
                               ? p->batch * p->pages_per_seq
                               : p->batch + 1) * 4;
        break;
    }
    *begin = u.begin;
    *end = u.end;
}

static tensor_use use_at(const slot *s, const fa_buffer *buf, const fa_plan *plan,
                         const run_dims *rd, bool output)
{
    const fa_kernel_params *kp = &plan->launches[0].params;
    const uint64_t parts = (uint64_t)plan->kv_splits;
    tensor_use u = {s->name, buf, 0, 0, output};
    if (s->extent == EXTENT_PARTS)
        u.end = parts * (uint64_t)kp->parts_stride * fa_dtype_size(plan->problem.dtype);
    else if (s->extent == EXTENT_LSE_PARTS)
        u.end = parts * (uint64_t)kp->part_rows * 4;
    else
        span_of(&plan->problem, s, rd, &u.begin, &u.end);
    return u;
}

/* Each tensor given exactly when the run uses it (an optional output may be NULL). */
static fa_status check_given(fa_context *ctx, const fa_plan *plan, const fa_tensors *t)
{
    for (int i = 0; i < N_SLOTS; i++) {
        const slot *s = &slots[i];
        role r = role_of(plan, s->tensor);
        const fa_buffer *buf = slot_buffer(t, s);
        if ((r == ROLE_IN || r == ROLE_OUT) && !buf)
            return fa__error(ctx, FA_STATUS_NULL_POINTER,
                             "the %s tensor is NULL (the %s buffer of fa_tensors)", s->name,
                             s->name);
        if (r == ROLE_UNUSED && buf)
            return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "%s is given but %s", s->name,
                             unused_why(plan, s->tensor));
    }
    return FA_STATUS_OK;
}

/* The sequence buffers' values, read and checked, give the packed rows (rd, *total_q). */
static fa_status seq_dims(fa_context *ctx, const fa_plan *plan, const fa_tensors *t,
                          run_dims *rd, int64_t *total_q)
{
    const fa_problem *p = &plan->problem;
    const fa_seq_buffers seqs = {t->cu_seqlens_q, t->cu_seqlens_k, t->seqlens_k, t->block_table};
    int64_t total_k = p->seqlen_k;
    fa_status st = fa__seq_check_run(ctx, p, &seqs, total_q, &total_k);
    rd->q = fa__q_dims(p, *total_q);
    rd->kv = fa__kv_dims(p, total_k);
    if (st == FA_STATUS_OK && p->varlen)
        st = fa__tensors_validate(ctx, p, *total_q, total_k, plan->op == FA__OP_BACKWARD);
    return st;
}

/* Every tensor the run uses: its buffer checked (context, size; the sequence buffers before
 * their values are read, which give the others' packed rows), no output overlapping another
 * tensor, and bound in mem. */
static fa_status bind_tensors(fa_context *ctx, const fa_plan *plan, const fa_tensors *t,
                              void **mem, int64_t *total_q)
{
    const fa_problem *p = &plan->problem;
    tensor_use u[N_SLOTS];
    int n = 0;
    run_dims rd = {fa__q_dims(p, p->seqlen_q), fa__kv_dims(p, p->seqlen_k)};
    bool seqs_read = false;
    fa_status st = FA_STATUS_OK;
    for (int i = 0; i < N_SLOTS && st == FA_STATUS_OK; i++) {
        const slot *s = &slots[i];
        if (!seqs_read && s->extent != EXTENT_INTS) {
            seqs_read = true;
            if ((st = seq_dims(ctx, plan, t, &rd, total_q)) != FA_STATUS_OK)
                break;
        }
        const fa_buffer *buf = slot_buffer(t, s);
        role r = role_of(plan, s->tensor);
        if (r == ROLE_UNUSED || !buf)
            continue;
        u[n] = use_at(s, buf, plan, &rd, r != ROLE_IN);
        st = check_uses(ctx, &u[n], 1);
        mem[s->tensor] = buf->mem;
        n++;
    }
    return st == FA_STATUS_OK ? check_uses(ctx, u, n) : st;
}

/* A run of plan, which must be of op. */
/* Host arrays a backend wraps (fa_buffer.host_view) made coherent: before a run the inputs, so
 * the host's writes reach the device, after it the outputs, so the device's reach the host
 * (`after`: the run waits for that, after the last). Each side syncs only its own tensors: a
 * map and unmap cost pocl a few microseconds apiece. */
static fa_status sync_host_views(fa_context *ctx, const fa_plan *plan, const fa_tensors *t,
                                 bool after)
{
    fa_status st = FA_STATUS_OK;
    bool sync[N_SLOTS];
    int last = -1, last_view = -1;
    for (int i = 0; i < N_SLOTS; i++) {
        const fa_buffer *buf = slot_buffer(t, &slots[i]);
        bool input = role_of(plan, slots[i].tensor) == ROLE_IN;
        sync[i] = buf && buf->host_view && input != after;
        last = sync[i] ? i : last;
        last_view = buf && buf->host_view ? i : last_view;
    }
    if (after && last < 0 && last_view >= 0) /* no output is a view: still wait for the inputs */
        sync[last = last_view] = true;
    for (int i = 0; i <= last && st == FA_STATUS_OK; i++) {
        const fa_buffer *buf = slot_buffer(t, &slots[i]);
        if (sync[i])
            st = ctx->ops->host_view_sync(ctx, buf->mem, buf->bytes, after && i == last);
    }
    return st;
}

static fa_status run_op(fa_context *ctx, const fa_plan *plan, fa__op op, const fa_tensors *t)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!plan || !t)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the %s pointer is NULL",
                         !plan ? "plan" : "tensors");
    fa_status st = check_run(ctx, plan, op);
    if (st == FA_STATUS_OK)
        st = check_given(ctx, plan, t);
    void *mem[FA__TENSOR_COUNT] = {NULL};
    int64_t total_q = plan->problem.seqlen_q;
    if (st == FA_STATUS_OK)
        st = bind_tensors(ctx, plan, t, mem, &total_q);
    if (st == FA_STATUS_OK && plan->problem.block_sparse)
        st = fa__block_sparse_check_run(ctx, plan, t);
    if (st != FA_STATUS_OK)
        return st;
    const fa_problem *p = &plan->problem;
    bool empty = op == FA__OP_BACKWARD ? p->batch == 0 && !p->sinks /* d_sinks = 0 is written */
                                       : p->batch == 0 || p->seqlen_q == 0;
    if (empty) {
        fa__error_clear(ctx);
        return FA_STATUS_OK; /* documented no-op: nothing to write */
    }
    /* Without LSE the kernels never touch that argument (has_lse = 0); O stands in for it. */
    bool has_lse = t->lse != NULL;
    if (!has_lse)
        mem[FA__TENSOR_LSE] = mem[FA__TENSOR_O];
    st = sync_host_views(ctx, plan, t, false); /* ahead of the launches in the in-order queue */
    if (st == FA_STATUS_OK)
        st = run_launches(ctx, plan, mem, has_lse, total_q);
    fa_status synced = st == FA_STATUS_OK ? sync_host_views(ctx, plan, t, true) : FA_STATUS_OK;
    return st == FA_STATUS_OK ? synced : st;
}

fa_status fa_run(fa_context *ctx, const fa_plan *plan, const fa_tensors *t)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!plan)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the plan pointer is NULL");
    return run_op(ctx, plan, plan->op, t);
}

/* ---- the shorthands: fa_run with the tensors as arguments ---------------------------------- */

fa_status fa_forward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q, const fa_buffer *k,
                     const fa_buffer *v, fa_buffer *o, fa_buffer *lse)
{
    return fa_forward_seq(ctx, plan, q, k, v, o, lse, NULL, NULL);
}

fa_status fa_forward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                        const fa_buffer *k, const fa_buffer *v, fa_buffer *o, fa_buffer *lse,
                        const fa_modifier_buffers *mods)
{
    return fa_forward_seq(ctx, plan, q, k, v, o, lse, mods, NULL);
}

/* The modifier and sequence members of fa_tensors from their older structs (NULL: none). */
static void add_mods_seqs(fa_tensors *t, const fa_modifier_buffers *mods,
                          const fa_seq_buffers *seqs)
{
    if (mods) {
        t->alibi_slopes = mods->alibi_slopes;
        t->bias = mods->bias;
        t->sinks = mods->sinks;
        t->d_sinks = mods->d_sinks;
    }
    if (seqs) {
        t->cu_seqlens_q = seqs->cu_seqlens_q;
        t->cu_seqlens_k = seqs->cu_seqlens_k;
        t->seqlens_k = seqs->seqlens_k;
        t->block_table = seqs->block_table;
    }
}

fa_status fa_forward_seq(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                         const fa_buffer *k, const fa_buffer *v, fa_buffer *o, fa_buffer *lse,
                         const fa_modifier_buffers *mods, const fa_seq_buffers *seqs)
{
    fa_tensors t = {.q = q, .k = k, .v = v, .o = o, .lse = lse};
    add_mods_seqs(&t, mods, seqs);
    return run_op(ctx, plan, FA__OP_FORWARD, &t);
}

fa_status fa_backward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                      const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                      const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq, fa_buffer *dk,
                      fa_buffer *dv)
{
    return fa_backward_seq(ctx, plan, q, k, v, o, lse, d_o, dq, dk, dv, NULL, NULL);
}

fa_status fa_backward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                         const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                         const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                         fa_buffer *dk, fa_buffer *dv, const fa_modifier_buffers *mods)
{
    return fa_backward_seq(ctx, plan, q, k, v, o, lse, d_o, dq, dk, dv, mods, NULL);
}

/* The backward reads O and LSE; fa_tensors holds them as the forward's outputs. */
fa_status fa_backward_seq(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                          const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                          const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                          fa_buffer *dk, fa_buffer *dv, const fa_modifier_buffers *mods,
                          const fa_seq_buffers *seqs)
{
    fa_tensors t = {.q = q, .k = k, .v = v, .o = (fa_buffer *)o, .lse = (fa_buffer *)lse,
                    .d_o = d_o, .dq = dq, .dk = dk, .dv = dv};
    add_mods_seqs(&t, mods, seqs);
    return run_op(ctx, plan, FA__OP_BACKWARD, &t);
}

fa_status fa_merge(fa_context *ctx, const fa_plan *plan, const fa_buffer *o_parts,
                   const fa_buffer *lse_parts, fa_buffer *o, fa_buffer *lse)
{
    fa_tensors t = {.o_parts = o_parts, .lse_parts = lse_parts, .o = o, .lse = lse};
    return run_op(ctx, plan, FA__OP_MERGE, &t);
}

/* ---- the bytes a tensor needs -------------------------------------------------------------- */

fa_status fa_problem_tensor_bytes(const fa_problem *p, fa_tensor_id tensor, int64_t packed_q,
                                  int64_t packed_k, uint64_t *bytes)
{
    static const fa__tensor internal[] = {
        [FA_TENSOR_Q] = FA__TENSOR_Q,       [FA_TENSOR_K] = FA__TENSOR_K,
        [FA_TENSOR_V] = FA__TENSOR_V,       [FA_TENSOR_O] = FA__TENSOR_O,
        [FA_TENSOR_LSE] = FA__TENSOR_LSE,   [FA_TENSOR_DO] = FA__TENSOR_DO,
        [FA_TENSOR_DQ] = FA__TENSOR_DQ,     [FA_TENSOR_DK] = FA__TENSOR_DK,
        [FA_TENSOR_DV] = FA__TENSOR_DV,     [FA_TENSOR_ALIBI_SLOPES] = FA__TENSOR_ALIBI,
        [FA_TENSOR_BIAS] = FA__TENSOR_BIAS, [FA_TENSOR_SINKS] = FA__TENSOR_SINKS,
        [FA_TENSOR_D_SINKS] = FA__TENSOR_DSINKS,
        [FA_TENSOR_CU_SEQLENS_Q] = FA__TENSOR_CU_SEQLENS_Q,
        [FA_TENSOR_CU_SEQLENS_K] = FA__TENSOR_CU_SEQLENS_K,
        [FA_TENSOR_SEQLENS_K] = FA__TENSOR_SEQLENS_K,
        [FA_TENSOR_BLOCK_TABLE] = FA__TENSOR_BLOCK_TABLE,
        [FA_TENSOR_KV_NUM_BLOCKS] = FA__TENSOR_KV_NUM_BLOCKS,
        [FA_TENSOR_KV_INDICES] = FA__TENSOR_KV_INDICES,
        [FA_TENSOR_FULL_KV_NUM_BLOCKS] = FA__TENSOR_FULL_KV_NUM_BLOCKS,
        [FA_TENSOR_FULL_KV_INDICES] = FA__TENSOR_FULL_KV_INDICES,
        [FA_TENSOR_Q_NUM_BLOCKS] = FA__TENSOR_Q_NUM_BLOCKS,
        [FA_TENSOR_Q_INDICES] = FA__TENSOR_Q_INDICES,
        [FA_TENSOR_FULL_Q_NUM_BLOCKS] = FA__TENSOR_FULL_Q_NUM_BLOCKS,
        [FA_TENSOR_FULL_Q_INDICES] = FA__TENSOR_FULL_Q_INDICES};
    if (!p || !bytes)
        return FA_STATUS_NULL_POINTER;
    if ((unsigned)tensor >= sizeof internal / sizeof internal[0])
        return FA_STATUS_INVALID_ARGUMENT;
    fa_status st = fa__problem_validate(NULL, p);
    if (st != FA_STATUS_OK)
        return st;
    if (p->varlen && (packed_q < 0 || packed_k < 0 || packed_q > FA__MAX_ELEMS ||
                      packed_k > FA__MAX_ELEMS))
        return FA_STATUS_INVALID_SEQLENS;
    run_dims rd = {fa__q_dims(p, p->varlen ? packed_q : p->seqlen_q),
                   fa__kv_dims(p, p->varlen ? packed_k : p->seqlen_k)};
    for (int i = 0; i < N_SLOTS; i++) {
        if (slots[i].tensor == internal[tensor]) {
            uint64_t begin = 0;
            span_of(p, &slots[i], &rd, &begin, bytes);
            return FA_STATUS_OK;
        }
    }
    return FA_STATUS_INVALID_ARGUMENT;
}
