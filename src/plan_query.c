/*
 * plan_query.c - what a plan says of itself: its tiles, work-groups, on-chip and scratch bytes,
 * key chunks, each launch, the problem as planned and the explanation of every step.
 */
#include "internal.h"

int32_t fa_plan_kv_splits(const fa_plan *plan)
{
    return plan && plan->op == FA__OP_FORWARD ? plan->kv_splits : plan ? 1 : 0;
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

int32_t fa_plan_launch_count(const fa_plan *plan)
{
    return plan ? plan->n_launches : 0;
}

fa_status fa_plan_launch(const fa_plan *plan, int32_t index, fa_plan_launch_info *out)
{
    if (!plan || !out)
        return FA_STATUS_NULL_POINTER;
    if (index < 0 || index >= plan->n_launches)
        return fa__error(plan->ctx, FA_STATUS_INVALID_ARGUMENT,
                         "launch %d: the plan has launches 0 .. %d", (int)index,
                         plan->n_launches - 1);
    const fa__launch *l = &plan->launches[index];
    fa_plan_launch_info info = {fa__kernel_entry(l->variant.kernel),
                                {l->grid[0], l->grid[1], l->grid[2]},
                                l->onchip_bytes, l->variant.work_group_size,
                                l->variant.block_r, l->variant.block_c};
    *out = info;
    return FA_STATUS_OK;
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
