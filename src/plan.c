/*
 * plan.c - fa_problem_check, the plan entry points (fa_plan_create, fa_plan_create_backward) and
 * the runs (fa_forward, fa_backward): validation, the planner's call with the backend's rules,
 * the op's launches, buffer checks against the problem's layout, and the dispatch.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The op's validation, then the backend's support check. */
static fa_status check_problem(fa_context *ctx, const fa_problem *p, fa__op op)
{
    fa_status st = op == FA__OP_BACKWARD ? fa__problem_validate_backward(ctx, p)
                                         : fa__problem_validate(ctx, p);
    if (st != FA_STATUS_OK)
        return st;
    unsigned missing = fa__problem_features(p) & ~ctx->ops->supported_features[op];
    if (missing) {
        char names[96];
        fa__features_spell(missing, names, sizeof names);
        return fa__error(ctx, FA_STATUS_UNSUPPORTED, "the %s backend's %s pass does not run %s yet",
                         fa_backend_name(ctx->ops->backend),
                         op == FA__OP_BACKWARD ? "backward" : "forward", names);
    }
    if (ctx->ops->problem_check)
        st = ctx->ops->problem_check(ctx, p);
    return st;
}

fa_status fa_problem_check(fa_context *ctx, const fa_problem *p)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    fa_status st = check_problem(ctx, p, FA__OP_FORWARD);
    if (st == FA_STATUS_OK)
        fa__error_clear(ctx);
    return st;
}

/* FLASHATTN_BLOCK_R / FLASHATTN_BLOCK_C stand in for overrides the problem leaves at 0. */
static fa_status env_override(fa_context *ctx, const char *name, int32_t *value)
{
    const char *s = getenv(name);
    if (*value != 0 || !s || !*s)
        return FA_STATUS_OK;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > 65536)
        return fa__error(ctx, FA_STATUS_INVALID_TILE, "%s = \"%s\" is not a tile size in [1, 65536]",
                         name, s);
    *value = (int32_t)v;
    return FA_STATUS_OK;
}

/* The planner's tiles for the op under the backend's rules, then the op's launches. */
static fa_status plan_launches(fa_context *ctx, fa_plan *plan)
{
    fa__plan_rules rules;
    memset(&rules, 0, sizeof rules);
    rules.onchip = fa__op_onchip(plan->op);
    ctx->ops->plan_rules(&ctx->props, &plan->problem, plan->op, &rules);
    char why[512] = "";
    fa_status st = fa__plan_tiles(&ctx->props, &rules, &plan->problem, &plan->tiles,
                                  plan->explain, sizeof plan->explain, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(ctx, st, "%s%s (device \"%s\", %s backend)",
                         plan->op == FA__OP_BACKWARD ? "backward plan: " : "", why, ctx->props.name,
                         fa_backend_name(ctx->ops->backend));
    if (rules.path_note)
        fa__append(plan->explain, sizeof plan->explain, "kernel: %s\n", rules.path_note);
    fa__op_launches(plan, &rules);
    for (int i = 0; i < plan->n_launches && ctx->ops->launch_prepare; i++) {
        st = ctx->ops->launch_prepare(ctx, plan, &plan->launches[i]);
        if (st != FA_STATUS_OK)
            return st;
    }
    return FA_STATUS_OK;
}

/* Plans `op` for a validated problem: tiles, then launches readied by the backend. */
static fa_status plan_create(fa_context *ctx, fa__op op, const fa_problem *p, fa_plan **out)
{
    if (!(ctx->ops->supported_ops & (1u << op)))
        return fa__error(ctx, FA_STATUS_UNSUPPORTED, "the %s backend has no %s pass yet",
                         fa_backend_name(ctx->ops->backend),
                         op == FA__OP_BACKWARD ? "backward" : "such");
    fa_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate a plan");
    plan->ctx = ctx;
    plan->op = op;
    plan->problem = *p;
    plan->problem.scale = fa__problem_scale(p);
    fa_status st = env_override(ctx, "FLASHATTN_BLOCK_R", &plan->problem.block_r);
    if (st == FA_STATUS_OK)
        st = env_override(ctx, "FLASHATTN_BLOCK_C", &plan->problem.block_c);
    if (st == FA_STATUS_OK)
        st = plan_launches(ctx, plan);
    if (st != FA_STATUS_OK) {
        free(plan);
        return st;
    }
    *out = plan;
    fa__error_clear(ctx);
    return FA_STATUS_OK;
}

/* The public plan entry points: arguments, the op's validation, the backend's support check. */
static fa_status plan_entry(fa_context *ctx, const fa_problem *p, fa__op op, fa_plan **out)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!out)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the output pointer is NULL");
    fa_status st = check_problem(ctx, p, op);
    return st == FA_STATUS_OK ? plan_create(ctx, op, p, out) : st;
}

fa_status fa_plan_create(fa_context *ctx, const fa_problem *p, fa_plan **out)
{
    return plan_entry(ctx, p, FA__OP_FORWARD, out);
}

fa_status fa_plan_create_backward(fa_context *ctx, const fa_problem *p, fa_plan **out)
{
    return plan_entry(ctx, p, FA__OP_BACKWARD, out);
}

/* Kernels belong to the context's cache; a plan only points at them. */
void fa_plan_destroy(fa_plan *plan)
{
    free(plan);
}

int32_t fa_plan_block_r(const fa_plan *plan)
{
    return plan ? plan->tiles.block_r : 0;
}

int32_t fa_plan_block_c(const fa_plan *plan)
{
    return plan ? plan->tiles.block_c : 0;
}

int32_t fa_plan_work_group_size(const fa_plan *plan)
{
    return plan ? plan->tiles.work_group_size : 0;
}

uint64_t fa_plan_sram_bytes(const fa_plan *plan)
{
    return plan ? plan->tiles.sram_bytes : 0;
}

uint64_t fa_plan_work_groups(const fa_plan *plan)
{
    uint64_t n = 0;
    for (int i = 0; plan && i < plan->n_launches; i++) {
        const uint64_t *g = plan->launches[i].grid;
        n += g[0] * g[1] * g[2];
    }
    return n;
}

uint64_t fa_plan_scratch_bytes(const fa_plan *plan)
{
    return plan ? plan->scratch_bytes : 0;
}

const fa_problem *fa_plan_problem(const fa_plan *plan)
{
    return plan ? &plan->problem : NULL;
}

const char *fa_plan_explain(const fa_plan *plan)
{
    return plan ? plan->explain : "";
}

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

static bool overlaps(const tensor_use *a, const tensor_use *b)
{
    return a->buf == b->buf && a->begin < a->end && b->begin < b->end && a->begin < b->end &&
           b->begin < a->end;
}

static tensor_use use_of(const char *name, const fa_buffer *buf, const fa_tensor_layout *t,
                         const fa_problem *p, bool is_kv, bool output)
{
    size_t elem = fa_dtype_size(p->dtype);
    uint64_t extent = fa__layout_extent(t, p->batch, is_kv ? p->heads_kv : p->heads_q,
                                        is_kv ? p->seqlen_k : p->seqlen_q, p->head_dim);
    tensor_use u = {name, buf, extent ? (uint64_t)t->offset * elem : 0, extent * elem, output};
    return u;
}

/* LSE: f32 [batch, heads_q, seqlen_q], contiguous from byte 0. */
static tensor_use lse_use(const fa_buffer *buf, const fa_problem *p, bool output)
{
    tensor_use u = {"lse", buf, 0,
                    (uint64_t)p->batch * (uint64_t)p->heads_q * (uint64_t)p->seqlen_q * 4, output};
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
    if (plan->op != op)
        return fa__error(ctx, FA_STATUS_INVALID_PLAN, "the plan was made by %s",
                         plan->op == FA__OP_FORWARD ? "fa_plan_create (a forward plan)"
                                                    : "fa_plan_create_backward");
    return FA_STATUS_OK;
}

/* Runs the plan's launches in order on the bound tensors, with the plan's scratch allocated
 * (and counted) for the run. A launch with an empty grid has nothing to do and is not made. */
static fa_status run_launches(fa_context *ctx, const fa_plan *plan, void **mem, bool has_lse)
{
    fa_status st = FA_STATUS_OK;
    uint64_t scratch = plan->scratch_bytes;
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
        fa_kernel_params kp = l->params;
        kp.has_lse = has_lse;
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

fa_status fa_forward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q, const fa_buffer *k,
                     const fa_buffer *v, fa_buffer *o, fa_buffer *lse)
{
    return fa_forward_ex(ctx, plan, q, k, v, o, lse, NULL);
}

fa_status fa_forward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                        const fa_buffer *k, const fa_buffer *v, fa_buffer *o, fa_buffer *lse,
                        const fa_modifier_buffers *mods)
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
    tensor_use u[9] = {use_of("q", q, &p->q, p, false, false),
                       use_of("k", k, &p->k, p, true, false),
                       use_of("v", v, &p->v, p, true, false),
                       use_of("o", o, &p->o, p, false, true)};
    int n = 4;
    if (lse)
        u[n++] = lse_use(lse, p, true);
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
    return run_launches(ctx, plan, mem, lse != NULL);
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
    tensor_use u[13] = {use_of("q", q, &p->q, p, false, false),
                        use_of("k", k, &p->k, p, true, false),
                        use_of("v", v, &p->v, p, true, false),
                        use_of("o", o, &p->o, p, false, false),
                        lse_use(lse, p, false),
                        use_of("d_o", d_o, &p->d_o, p, false, false),
                        use_of("dq", dq, &p->dq, p, false, true),
                        use_of("dk", dk, &p->dk, p, true, true),
                        use_of("dv", dv, &p->dv, p, true, true)};
    int n = 9;
    void *mem[FA__TENSOR_COUNT] = {
        [FA__TENSOR_Q] = q->mem,    [FA__TENSOR_K] = k->mem,   [FA__TENSOR_V] = v->mem,
        [FA__TENSOR_O] = o->mem,    [FA__TENSOR_LSE] = lse->mem, [FA__TENSOR_DO] = d_o->mem,
        [FA__TENSOR_DQ] = dq->mem,  [FA__TENSOR_DK] = dk->mem, [FA__TENSOR_DV] = dv->mem};
    st = modifier_uses(ctx, p, mods, true, u, &n, mem);
    if (st == FA_STATUS_OK)
        st = check_uses(ctx, u, n);
    if (st != FA_STATUS_OK)
        return st;
    if (p->batch == 0 && !p->sinks) {
        fa__error_clear(ctx);
        return FA_STATUS_OK; /* nothing to write (with sinks, d_sinks = 0 is written) */
    }
    return run_launches(ctx, plan, mem, true);
}
