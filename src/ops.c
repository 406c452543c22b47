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
    };
    l->grid[0] = (uint64_t)kp->q_tiles;
    l->grid[1] = (uint64_t)kp->heads_q;
    l->grid[2] = (uint64_t)kp->batch;
    l->onchip_bytes = t->sram_bytes;
    memcpy(l->args, args, sizeof args);
    l->n_args = (int)(sizeof args / sizeof args[0]);
    plan->n_launches = 1;
}

/* One work-group per (key tile, K/V head, batch) owns dK and dV of its keys, so no two write the
 * same element: the reduction over query heads and rows runs in one fixed order. */
static void backward_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    static const fa__tensor args[] = {FA__TENSOR_Q,  FA__TENSOR_K,  FA__TENSOR_V,
                                      FA__TENSOR_O,  FA__TENSOR_LSE, FA__TENSOR_DO,
                                      FA__TENSOR_DQ, FA__TENSOR_DK, FA__TENSOR_DV};
    forward_launches(plan, rules); /* the same variant and params, then what differs */
    fa__launch *l = &plan->launches[0];
    fa__kernel_params_fill_backward(&plan->problem, &l->params);
    l->variant.entry = "flash_bwd";
    int64_t bc = plan->tiles.block_c, sk = l->params.seqlen_k;
    l->grid[0] = (uint64_t)((sk + bc - 1) / bc);
    l->grid[1] = (uint64_t)l->params.heads_kv;
    memcpy(l->args, args, sizeof args);
    l->n_args = (int)(sizeof args / sizeof args[0]);
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
