/*
 * plan_create.c - making a plan: the op's validation and the backend's support check, the
 * problem as the kernels run it (packed where allowed), the planner's tiles and key chunks under
 * the backend's rules, the op's launches readied by the backend, and one re-plan within a
 * compiled kernel's work-group limit. fa_plan_destroy too; the queries are in plan_query.c.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *op_name(fa__op op)
{
    return op == FA__OP_BACKWARD ? "backward" : op == FA__OP_MERGE ? "merge" : "forward";
}

/* What an op does not run of the sequence features: the merge none, the backward varlen only. */
static fa_status check_op_seq(fa_context *ctx, const fa_problem *p, fa__op op)
{
    unsigned seq = fa__problem_seq(p);
    unsigned allowed = op == FA__OP_MERGE ? 0u : op == FA__OP_BACKWARD ? FA_SEQ_VARLEN : ~0u;
    if (!(seq & ~allowed))
        return FA_STATUS_OK;
    unsigned bad = seq & ~allowed;
    return fa__error(ctx, FA_STATUS_UNSUPPORTED, "the %s does not run %s problems",
                     op_name(op), (bad & FA_SEQ_VARLEN) ? "varlen"
                                  : (bad & FA_SEQ_PAGED) ? "paged" : "seqlens_k");
}

/* The op's validation, then the backend's support check. */
static fa_status check_problem(fa_context *ctx, const fa_problem *p, fa__op op)
{
    fa_status st = op == FA__OP_BACKWARD ? fa__problem_validate_backward(ctx, p)
                                         : fa__problem_validate(ctx, p);
    if (st == FA_STATUS_OK)
        st = check_op_seq(ctx, p, op);
    if (st != FA_STATUS_OK)
        return st;
    unsigned missing = fa__problem_features(p) & ~ctx->ops->supported_features[op];
    if (missing) {
        char names[96];
        fa__features_spell(missing, names, sizeof names);
        return fa__error(ctx, FA_STATUS_UNSUPPORTED, "the %s backend's %s pass does not run %s yet",
                         fa_backend_name(ctx->ops->backend), op_name(op), names);
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

/* FLASHATTN_BLOCK_R / FLASHATTN_BLOCK_C (tiles) and FLASHATTN_KV_SPLITS stand in for overrides
 * the problem leaves at 0. */
static fa_status env_override(fa_context *ctx, const char *name, int32_t *value)
{
    const char *s = getenv(name);
    if (*value != 0 || !s || !*s)
        return FA_STATUS_OK;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    bool splits = strcmp(name, "FLASHATTN_KV_SPLITS") == 0;
    if (errno || *end || v < 1 || v > 65536)
        return fa__error(ctx, splits ? FA_STATUS_INVALID_ARGUMENT : FA_STATUS_INVALID_TILE,
                         "%s = \"%s\" is not %s in [1, 65536]", name, s,
                         splits ? "a number of key chunks" : "a tile size");
    *value = (int32_t)v;
    return FA_STATUS_OK;
}

/* Whether split-KV's partial O and LSE, splits * B * Hq * Sq * (d + 1) f32 in scratch, stay
 * within 2^60 elements, as every tensor does (validation), so the partials' offsets and strides
 * fit in 64 bits. Divides rather than multiplies: B * Hq * Sq * d alone may be near 2^60. */
static bool split_scratch_fits(const fa_problem *p, int64_t splits)
{
    int64_t rows = p->batch * p->heads_q * p->seqlen_q;
    if (splits <= 1 || rows == 0)
        return true;
    return rows <= FA__MAX_ELEMS / splits / (p->head_dim + 1);
}

/* The backend's planning rules for problem p, from the op's on-chip formula on. */
static void backend_rules(const fa_context *ctx, const fa_device_props *dev, const fa_problem *p,
                          fa__op op, fa__plan_rules *rules)
{
    memset(rules, 0, sizeof *rules);
    rules->memory.onchip = fa__op_onchip(op);
    ctx->ops->plan_rules(dev, p, op, rules);
}

/* Whether K and V hold a key's heads together (a paged pool, BSHD): one head's keys are then
 * strided through the others', and a work-group per K/V head reads a slice of every line. */
static bool heads_together(const fa_problem *p)
{
    return p->heads_kv > 1 && llabs(p->k.stride_head) < llabs(p->k.stride_seq) &&
           llabs(p->v.stride_head) < llabs(p->v.stride_seq);
}

/* The problem as the kernels run it (kernel_problem): heads-packed where `heads` allows and the
 * rules and the problem do, else GQA-packed where they allow, else as is; its rules in *rules,
 * the packing's line of the explanation in `line` ("" unpacked). */
static void pack_problem(fa_context *ctx, fa_plan *plan, const fa_device_props *dev, bool heads,
                         fa__plan_rules *rules, char *line, size_t size)
{
    const fa_problem *p = &plan->problem;
    fa_problem *kp = &plan->kernel_problem;
    backend_rules(ctx, dev, p, plan->op, rules);
    *kp = *p;
    plan->head_rows = 0;
    plan->packed = 0;
    line[0] = '\0';
    /* Block-sparse lists name a head's query blocks: packing would make rows of heads. */
    if (plan->op != FA__OP_FORWARD || p->block_sparse)
        return;
    if (heads && rules->paths.in_place_rows > 0 && heads_together(p))
        plan->head_rows = (int32_t)fa__heads_pack(p, rules->paths.in_place_rows, kp);
    if (plan->head_rows > 0)
        fa__format(line, size,
                   "heads packing: the %lld query heads of a sequence are the rows of one "
                   "head, %d per K/V head (the kernels see heads_q %lld -> 1, seqlen_q 1 -> "
                   "%lld): K and V hold a key's heads together, so a work-group reads them in "
                   "order\n",
                   (long long)p->heads_q, (int)plan->head_rows, (long long)p->heads_q,
                   (long long)p->heads_q);
    else if (rules->paths.gqa_pack && fa__gqa_pack(p, kp))
        fa__format(line, size,
                   "GQA packing: the %lld query heads of each K/V head are one tile's rows "
                   "(the kernels see heads_q %lld -> %lld, seqlen_q 1 -> %lld), so a group "
                   "reads its K and V once, not %lld times\n",
                   (long long)kp->seqlen_q, (long long)p->heads_q, (long long)kp->heads_q,
                   (long long)kp->seqlen_q, (long long)kp->seqlen_q);
    else
        return;
    plan->packed = 1;
    backend_rules(ctx, dev, kp, plan->op, rules); /* the rules of what runs */
}

/* The backward's register-blocked passes say so: dK/dV and dQ one work-item per tile, D's
 * pass (op_launches.c) one per row still, declaring `bytes`. */
static void reg_blocked_backward(fa_plan *plan, uint64_t bytes, const char *what)
{
    fa__append(plan->explain, sizeof plan->explain,
               "kernels: flash_bwd_dkdv and flash_bwd_dq on their register-blocked path "
               "(REG_BLOCKED, flash_bwd_blocked.cl): one work-item per tile of keys or rows "
               "copies each streamed tile once and multiplies blocks of 4 of its rows or keys "
               "over it in registers, declaring %llu on-chip bytes (%s)\n",
               (unsigned long long)bytes, what);
}

/* The register-blocked path, for a forward that does not run in place: where the rules have
 * it and its tiles (Q and the f32 O, K^T and V, S) fit the device's on-chip memory, one
 * work-item per tile that multiplies register blocks of rows over the K/V tiles, and the plan
 * says so (fa_plan_work_group_size 1, fa_plan_sram_bytes those bytes). */
static void choose_reg_blocked(fa_plan *plan, const fa__plan_rules *rules,
                               const fa_device_props *dev)
{
    fa__tiles *t = &plan->tiles;
    const fa__onchip_formula *f = &rules->paths.reg_blocked_onchip;
    const fa_problem *kp = &plan->kernel_problem;
    const bool backward = plan->op == FA__OP_BACKWARD;
    if ((plan->op != FA__OP_FORWARD && !backward) || !rules->paths.reg_blocked ||
        t->row_lanes > 1 || t->work_group_size != t->block_r || t->block_r % 4 != 0 ||
        (backward && t->block_c % 4 != 0))
        return;
    size_t elem = f->tile_bytes ? f->tile_bytes : fa_dtype_size(kp->dtype);
    uint64_t bytes = fa__tile_bytes(f, t->block_r, t->block_c, kp->head_dim, elem);
    if (bytes > dev->sram_bytes) {
        fa__append(plan->explain, sizeof plan->explain,
                   "kernel: not the register-blocked path: its %llu on-chip bytes (%s) exceed "
                   "the device's %llu\n",
                   (unsigned long long)bytes, f->what, (unsigned long long)dev->sram_bytes);
        return;
    }
    plan->reg_blocked = 1;
    t->work_group_size = 1;
    t->sram_bytes = bytes;
    if (backward) {
        reg_blocked_backward(plan, bytes, f->what);
        return;
    }
    fa__append(plan->explain, sizeof plan->explain,
               "kernel: flash_fwd's register-blocked path (REG_BLOCKED): one work-item per tile "
               "of %d rows copies each K/V tile once and multiplies blocks of 4 rows over it in "
               "registers, declaring %llu on-chip bytes (%s)\n",
               (int)t->block_r, (unsigned long long)t->sram_bytes, f->what);
    if (kp->block_sparse)
        fa__append(plan->explain, sizeof plan->explain,
                   "block-sparse tiles: a tile of %d rows %s %d query block%s of %d rows, "
                   "a key tile of %d keys over key blocks of %d; each register block of 4 rows "
                   "lies within one query block and multiplies only the keys from the first to "
                   "the last key block of the tile its block lists, and a K/V tile is copied "
                   "only when some query block of the tile lists it\n",
                   (int)t->block_r, t->block_r > kp->sparse_block_q ? "holds" : "lies within",
                   t->block_r > kp->sparse_block_q ? (int)(t->block_r / kp->sparse_block_q) : 1,
                   t->block_r > kp->sparse_block_q ? "s" : "", (int)kp->sparse_block_q,
                   (int)t->block_c, (int)kp->sparse_block_k);
}

/* The kernel path, from the sized tiles: a forward whose tiles the rules' in-place path can
 * hold runs it, one work-item per tile declaring only what in_place_onchip counts, and the
 * plan says so (fa_plan_work_group_size 1, fa_plan_sram_bytes those bytes); else the
 * register-blocked path where the rules have it (choose_reg_blocked). */
static void choose_path(fa_plan *plan, const fa__plan_rules *rules, const fa_device_props *dev)
{
    fa__tiles *t = &plan->tiles;
    plan->reg_blocked = 0;
    plan->in_place = plan->op == FA__OP_FORWARD && rules->paths.in_place_rows > 0 &&
                     (uint32_t)t->block_r <= rules->paths.in_place_rows && t->row_lanes <= 1 &&
                     t->work_group_size == t->block_r;
    if (!plan->in_place) {
        choose_reg_blocked(plan, rules, dev);
        return;
    }
    const fa_problem *kp = &plan->kernel_problem;
    const fa__onchip_formula *f = &rules->paths.in_place_onchip;
    size_t elem = f->tile_bytes ? f->tile_bytes : fa_dtype_size(kp->dtype);
    t->work_group_size = 1;
    t->sram_bytes = fa__tile_bytes(f, t->block_r, t->block_c, kp->head_dim, elem);
    fa__append(plan->explain, sizeof plan->explain,
               "kernel: flash_fwd reads K and V where they are (DIRECT_KV), in place: one "
               "work-item per tile of %d row%s, declaring %llu on-chip bytes (%s): local "
               "memory is global memory here, and tiles of at most %u rows gain less from "
               "sharing a copy than the copy costs\n",
               (int)t->block_r, t->block_r == 1 ? "" : "s", (unsigned long long)t->sram_bytes,
               f->what, (unsigned)rules->paths.in_place_rows);
}

/* The planner's tiles and (forward) key chunks for the packed problem (pack_problem). */
static fa_status plan_tiles(fa_context *ctx, fa_plan *plan, const fa_device_props *dev,
                            bool heads, fa__plan_rules *rules)
{
    char pack_line[512], why[512] = "";
    pack_problem(ctx, plan, dev, heads, rules, pack_line, sizeof pack_line);
    const fa_problem *kp = &plan->kernel_problem;
    fa_status st = fa__plan_tiles(dev, rules, kp, &plan->tiles, plan->explain,
                                  sizeof plan->explain, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(ctx, st, "%s%s (device \"%s\", %s backend)",
                         plan->op == FA__OP_BACKWARD ? "backward plan: " : "", why, ctx->props.name,
                         fa_backend_name(ctx->ops->backend));
    if (pack_line[0]) { /* first: the tiles' steps speak of the packed problem */
        char tiles_steps[sizeof plan->explain];
        memcpy(tiles_steps, plan->explain, sizeof tiles_steps);
        fa__format(plan->explain, sizeof plan->explain, "%s%s", pack_line, tiles_steps);
    }
    if (rules->paths.path_note)
        fa__append(plan->explain, sizeof plan->explain, "kernel: %s\n", rules->paths.path_note);
    choose_path(plan, rules, dev);
    if (plan->op == FA__OP_FORWARD)
        plan->kv_splits = fa__plan_kv_splits(dev, rules, kp, &plan->tiles, plan->explain,
                                             sizeof plan->explain);
    return FA_STATUS_OK;
}

/* The planner's tiles for the op under the backend's rules on device props dev (for the
 * problem as the kernels run it: packed where the rules and the problem allow), then the op's
 * launches, readied by the backend. Heads packing gives a sequence one work-group per key
 * chunk: where that leaves compute units idle (a kv_splits override, a short cache), the plan
 * is made again without it. */
static fa_status plan_on(fa_context *ctx, fa_plan *plan, const fa_device_props *dev)
{
    fa__plan_rules rules;
    fa_status st = plan_tiles(ctx, plan, dev, true, &rules);
    int64_t cu = dev->compute_units > 0 ? dev->compute_units : 1;
    int32_t br = plan->tiles.block_r;
    int64_t groups = plan->problem.batch * plan->kv_splits *
                     (br > 0 ? (plan->kernel_problem.seqlen_q + br - 1) / br : 1);
    if (plan->head_rows > 0 &&
        (st != FA_STATUS_OK || groups < cu || !plan->in_place)) {
        bool planned = st == FA_STATUS_OK, in_place = plan->in_place != 0;
        fa__error_clear(ctx);
        st = plan_tiles(ctx, plan, dev, false, &rules);
        if (st == FA_STATUS_OK && planned && !in_place)
            fa__append(plan->explain, sizeof plan->explain,
                       "no heads packing: its tiles of Br %d rows do not run in place (at most "
                       "%u)\n",
                       (int)br, (unsigned)rules.paths.in_place_rows);
        else if (st == FA_STATUS_OK && planned)
            fa__append(plan->explain, sizeof plan->explain,
                       "no heads packing: its %lld work-group%s (batch x tiles x key chunks) "
                       "would leave some of the %lld compute units idle\n",
                       (long long)groups, groups == 1 ? "" : "s", (long long)cu);
    }
    if (st != FA_STATUS_OK)
        return st;
    const fa_problem *kp = &plan->kernel_problem;
    if (plan->op == FA__OP_FORWARD && !split_scratch_fits(kp, plan->kv_splits))
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "kv_splits = %d: the split-KV partials (kv_splits * batch * heads_q * "
                         "seqlen_q * (head_dim + 1) f32) exceed 2^60 elements",
                         (int)plan->kv_splits);
    fa__op_launches(plan, &rules);
    for (int i = 0; i < plan->n_launches && ctx->ops->launch_prepare; i++) {
        plan->launches[i].kernel_wg_limit = 0;
        st = ctx->ops->launch_prepare(ctx, plan, &plan->launches[i]);
        if (st != FA_STATUS_OK)
            return st;
    }
    return FA_STATUS_OK;
}

/* The smallest work-group limit a compiled kernel of the plan reported, or 0. */
static uint32_t kernel_wg_limit(const fa_plan *plan)
{
    uint32_t limit = 0;
    for (int i = 0; i < plan->n_launches; i++) {
        uint32_t l = plan->launches[i].kernel_wg_limit;
        if (l > 0 && (limit == 0 || l < limit))
            limit = l;
    }
    return limit;
}

/* Plans on the context's device; when a compiled kernel allows fewer work-items per
 * work-group than the device (registers and local memory of that kernel decide it), plans
 * once more within the kernel's limit rather than refusing a problem that fits. */
static fa_status plan_launches(fa_context *ctx, fa_plan *plan)
{
    fa_device_props dev = ctx->props;
    fa_status st = plan_on(ctx, plan, &dev);
    uint32_t limit = kernel_wg_limit(plan);
    if (st == FA_STATUS_OK || limit == 0 || limit >= dev.max_work_group_size)
        return st;
    char first[512];
    fa__format(first, sizeof first, "%s", fa_context_last_error(ctx));
    dev.max_work_group_size = limit;
    fa__error_clear(ctx);
    st = plan_on(ctx, plan, &dev);
    if (st == FA_STATUS_OK)
        fa__append(plan->explain, sizeof plan->explain,
                   "re-planned within %u work-items per work-group: %s\n", (unsigned)limit,
                   first);
    return st;
}

/* Plans `op` for a validated problem: tiles, then launches readied by the backend. parts: a
 * merge's partial results. */
static fa_status plan_create(fa_context *ctx, fa__op op, const fa_problem *p, int32_t parts,
                             fa_plan **out)
{
    if (!(ctx->ops->supported_ops & (1u << op)))
        return fa__error(ctx, FA_STATUS_UNSUPPORTED, "the %s backend has no %s pass yet",
                         fa_backend_name(ctx->ops->backend), op_name(op));
    fa_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate a plan");
    plan->ctx = ctx;
    plan->op = op;
    plan->problem = *p;
    plan->problem.scale = fa__problem_scale(p);
    plan->kv_splits = op == FA__OP_MERGE ? parts : 1;
    fa_status st = env_override(ctx, "FLASHATTN_BLOCK_R", &plan->problem.block_r);
    if (st == FA_STATUS_OK)
        st = env_override(ctx, "FLASHATTN_BLOCK_C", &plan->problem.block_c);
    if (st == FA_STATUS_OK && op == FA__OP_FORWARD)
        st = env_override(ctx, "FLASHATTN_KV_SPLITS", &plan->problem.kv_splits);
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
static fa_status plan_entry(fa_context *ctx, const fa_problem *p, fa__op op, int32_t parts,
                            fa_plan **out)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!out)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the output pointer is NULL");
    if (op == FA__OP_MERGE && (parts < 1 || parts > 65536))
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "parts = %d is outside [1, 65536]",
                         (int)parts);
    fa_status st = check_problem(ctx, p, op);
    return st == FA_STATUS_OK ? plan_create(ctx, op, p, parts, out) : st;
}

fa_status fa_plan_create(fa_context *ctx, const fa_problem *p, fa_plan **out)
{
    return plan_entry(ctx, p, FA__OP_FORWARD, 1, out);
}

fa_status fa_plan_create_backward(fa_context *ctx, const fa_problem *p, fa_plan **out)
{
    return plan_entry(ctx, p, FA__OP_BACKWARD, 1, out);
}

fa_status fa_plan_create_merge(fa_context *ctx, const fa_problem *p, int32_t parts,
                               fa_plan **out)
{
    return plan_entry(ctx, p, FA__OP_MERGE, parts, out);
}

/* The seed and offset are run-time values of every launch's params (modifiers.c fills them
 * from the problem), never part of a kernel variant or of the tiles: a new seed needs no new
 * plan. */
fa_status fa_plan_set_dropout(fa_plan *plan, uint64_t seed, uint32_t offset)
{
    if (!plan)
        return FA_STATUS_NULL_POINTER;
    if (!(plan->problem.dropout_p > 0.0f))
        return fa__error(plan->ctx, FA_STATUS_INVALID_PLAN, "the plan's problem has no dropout "
                         "(dropout_p 0): there is no seed to set");
    plan->problem.dropout_seed = plan->kernel_problem.dropout_seed = seed;
    plan->problem.dropout_offset = plan->kernel_problem.dropout_offset = offset;
    for (int i = 0; i < plan->n_launches; i++) {
        plan->launches[i].params.dropout_seed = seed;
        plan->launches[i].params.dropout_offset = offset;
    }
    return FA_STATUS_OK;
}

/* Kernels belong to the context's cache; a plan only points at them. */
void fa_plan_destroy(fa_plan *plan)
{
    free(plan);
}
