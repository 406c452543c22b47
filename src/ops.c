/*
 * ops.c - what each operation is made of: its on-chip formula for the planner, its tensors and
 * its launches, built once by fa_plan_create so that running a plan only binds buffers. The
 * forward is the first op; docs/extending.md says how to add the next.
 */
#include "internal.h"

#include <string.h>

fa__onchip_formula fa__op_onchip(fa__op op)
{
    switch (op) {
    case FA__OP_BACKWARD:
        /* FlashAttention-2's backward: Q and dO row tiles, K, V, dK and dV key tiles, and the
         * S (then P) and dP (then dS) score tiles. */
        return (fa__onchip_formula){.row_tiles = 2, .col_tiles = 4, .score_tiles = 2,
                                    .what = "Q, dO; K, V, dK, dV tiles; f32 S and dP tiles"};
    case FA__OP_FORWARD:
    default:
        /* Q stays while K and V tiles stream past it; S is one Br x Bc f32 tile. */
        return (fa__onchip_formula){.row_tiles = 1, .col_tiles = 2, .score_tiles = 1,
                                    .what = "Q, K, V tiles and the f32 S tile"};
    }
}

void fa__variant_defines(const fa__kernel_variant *v, const char *prefix, char *dst, size_t size)
{
    const struct {
        const char *name;
        int32_t value;
    } defs[] = {{"HEAD_DIM", v->head_dim}, {"BLOCK_R", v->block_r},
                {"BLOCK_C", v->block_c},   {"DTYPE", v->dtype},
                {"MASK", v->mask},         {"WG_SIZE", v->work_group_size},
                {"TPR", v->row_lanes},     {"MMA", v->mma}};
    fa__format(dst, size, "%s", "");
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        fa__append(dst, size, "%s%s%s=%d", i ? " " : "", prefix, defs[i].name,
                   (int)defs[i].value);
    if (v->vector_width > 0)
        fa__append(dst, size, " %sVEC_MAX=%d", prefix, (int)v->vector_width);
    if (v->features != 0)
        fa__append(dst, size, " %sFEATURES=%d %sBIAS_DTYPE=%d", prefix, (int)v->features, prefix,
                   (int)v->bias_dtype);
}

/*
 * Appends the modifier tensors a launch reads, in one order for every kernel (ALiBi slopes, bias,
 * sinks: those the problem turns on) after its own tensors; the kernels declare the same
 * arguments under the same FEATURES bits. `sinks`: whether this launch reads the sinks.
 */
static void add_modifier_args(fa__launch *l, bool sinks)
{
    const unsigned f = (unsigned)l->params.features;
    if (f & FA_FEATURE_ALIBI)
        l->args[l->n_args++] = FA__TENSOR_ALIBI;
    if (f & FA_FEATURE_BIAS)
        l->args[l->n_args++] = FA__TENSOR_BIAS;
    if (sinks && (f & FA_FEATURE_SINKS))
        l->args[l->n_args++] = FA__TENSOR_SINKS;
}

/* One work-group per (query tile, head, batch) reads Q, K, V and writes O and, when asked, LSE. */
static void forward_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    static const fa__tensor args[] = {FA__TENSOR_Q, FA__TENSOR_K, FA__TENSOR_V, FA__TENSOR_O,
                                      FA__TENSOR_LSE};
    const fa__tiles *t = &plan->tiles;
    fa__launch *l = &plan->launches[0];
    memset(l, 0, sizeof *l);
    fa__kernel_params_fill(&plan->problem, t->block_r, &l->params);
    const fa_kernel_params *kp = &l->params;
    int32_t items = rules->items_per_row > 0 ? (int32_t)rules->items_per_row : 1;
    l->variant = (fa__kernel_variant){
        .entry = "flash_fwd",
        .head_dim = kp->head_dim,
        .block_r = t->block_r,
        .block_c = t->block_c,
        .dtype = (int32_t)plan->problem.dtype,
        .mask = kp->mask,
        .work_group_size = t->work_group_size,
        .row_lanes = rules->row_lanes > 0 ? rules->row_lanes : items,
        .mma = rules->mma,
        .features = kp->features,
        .bias_dtype = kp->features ? kp->bias_dtype : 0,
    };
    l->grid[0] = (uint64_t)kp->q_tiles;
    l->grid[1] = (uint64_t)kp->heads_q;
    l->grid[2] = (uint64_t)kp->batch;
    l->onchip_bytes = t->sram_bytes;
    memcpy(l->args, args, sizeof args);
    l->n_args = (int)(sizeof args / sizeof args[0]);
    add_modifier_args(l, true);
    plan->n_launches = 1;
}

/* A launch's grid, entry and tensor arguments (the variant and params are set by the caller). */
static void set_launch(fa__launch *l, const char *entry, uint64_t gx, uint64_t gy, uint64_t gz,
                       const fa__tensor *args, int n_args)
{
    l->variant.entry = entry;
    l->grid[0] = gx;
    l->grid[1] = gy;
    l->grid[2] = gz;
    memcpy(l->args, args, (size_t)n_args * sizeof *args);
    l->n_args = n_args;
}

/* The CPU golden's one launch: per (batch, K/V head) every query row in order, dK and dV
 * accumulated in f64 in scratch (sized by the backend), so the order is fixed. With sinks a
 * second launch, flash_bwd_dsinks, sums their gradient per query head over the batch and rows
 * in order, D = rowsum(dO * O) recomputed in f64. */
static void backward_golden(fa_plan *plan)
{
    static const fa__tensor args[] = {FA__TENSOR_Q,  FA__TENSOR_K,  FA__TENSOR_V,
                                      FA__TENSOR_O,  FA__TENSOR_LSE, FA__TENSOR_DO,
                                      FA__TENSOR_DQ, FA__TENSOR_DK, FA__TENSOR_DV,
                                      FA__TENSOR_SCRATCH};
    fa__launch *l = &plan->launches[0];
    const fa_kernel_params *kp = &l->params;
    set_launch(l, "flash_bwd", 1, (uint64_t)kp->heads_kv, (uint64_t)kp->batch, args,
               (int)(sizeof args / sizeof args[0]));
    add_modifier_args(l, false);
    plan->n_launches = 1;
    if (kp->features & FA_FEATURE_SINKS) {
        static const fa__tensor dsinks[] = {FA__TENSOR_LSE, FA__TENSOR_O, FA__TENSOR_DO,
                                            FA__TENSOR_SINKS, FA__TENSOR_DSINKS};
        l[1] = l[0];
        set_launch(&l[1], "flash_bwd_dsinks", 1, (uint64_t)kp->heads_q, 1, dsinks, 5);
        plan->n_launches = 2;
    }
}

/*
 * The kernels' three launches. flash_bwd_pre: D = rowsum(dO * O) per query row into scratch (f32
 * [B, Hq, Sq]). flash_bwd_dkdv: one work-group per (key tile, K/V head, batch) owns dK and dV of
 * its keys and sweeps the query tiles of every query head of its group in order. flash_bwd_dq:
 * one work-group per (query tile, query head, batch) owns dQ of its rows and sweeps the key
 * tiles in order. No two work-groups write one element, so no atomics and a fixed order; S and
 * dP are recomputed in both passes. The dK/dV pass is compiled with its key tile as BLOCK_R and
 * the query tile as BLOCK_C: a kernel's BLOCK_R is always the rows its work-group owns.
 */
static void backward_kernels(fa_plan *plan, const fa__plan_rules *rules)
{
    static const fa__tensor pre[] = {FA__TENSOR_O, FA__TENSOR_DO, FA__TENSOR_SCRATCH};
    static const fa__tensor dkdv[] = {FA__TENSOR_Q,  FA__TENSOR_K,       FA__TENSOR_V,
                                      FA__TENSOR_LSE, FA__TENSOR_DO, FA__TENSOR_SCRATCH,
                                      FA__TENSOR_DK, FA__TENSOR_DV};
    static const fa__tensor dq[] = {FA__TENSOR_Q,  FA__TENSOR_K,       FA__TENSOR_V,
                                    FA__TENSOR_LSE, FA__TENSOR_DO, FA__TENSOR_SCRATCH,
                                    FA__TENSOR_DQ};
    fa__launch *l = plan->launches;
    l[1] = l[2] = l[0];
    const fa_kernel_params *kp = &l[0].params;
    uint64_t bc = (uint64_t)plan->tiles.block_c, sk = (uint64_t)kp->seqlen_k;
    uint64_t q_tiles = (uint64_t)kp->q_tiles, hq = (uint64_t)kp->heads_q, b = (uint64_t)kp->batch;
    set_launch(&l[0], "flash_bwd_pre", q_tiles, hq, b, pre, 3);
    set_launch(&l[1], "flash_bwd_dkdv", (sk + bc - 1) / bc, (uint64_t)kp->heads_kv, b, dkdv, 8);
    l[1].variant.block_r = plan->tiles.block_c;
    l[1].variant.block_c = plan->tiles.block_r;
    l[1].variant.work_group_size =
        plan->tiles.block_c * (rules->items_per_row > 0 ? (int32_t)rules->items_per_row : 1);
    set_launch(&l[2], "flash_bwd_dq", q_tiles, hq, b, dq, 7);
    add_modifier_args(&l[1], false); /* P = exp(S - LSE): LSE already holds the sinks */
    add_modifier_args(&l[2], false);
    plan->n_launches = 3;
    plan->scratch_bytes = b * hq * (uint64_t)kp->seqlen_q * 4;
    if (kp->features & FA_FEATURE_SINKS) {
        /* flash_bwd_dsinks: one work-group per query head sums -exp(sink - LSE) * D over the
         * batch and the rows in a fixed order (a tree within the work-group, no atomics). */
        static const fa__tensor dsinks[] = {FA__TENSOR_LSE, FA__TENSOR_SCRATCH, FA__TENSOR_SINKS,
                                            FA__TENSOR_DSINKS};
        l[3] = l[0];
        set_launch(&l[3], "flash_bwd_dsinks", 1, hq, 1, dsinks, 4);
        plan->n_launches = 4;
    }
}

/* The forward's variant and params, the backward's tensors, then the backend's launches. */
static void backward_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    forward_launches(plan, rules);
    fa__kernel_params_fill_backward(&plan->problem, &plan->launches[0].params);
    if (rules->backward_launches == 1)
        backward_golden(plan);
    else
        backward_kernels(plan, rules);
}

void fa__op_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    switch (plan->op) {
    case FA__OP_BACKWARD:
        backward_launches(plan, rules);
        break;
    case FA__OP_FORWARD:
    default:
        forward_launches(plan, rules);
        break;
    }
}
