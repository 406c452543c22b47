/*
 * cl_rules.c - what the OpenCL kernels ask of a plan (the ops table's plan_rules): their
 * structural needs (work-items per row, tile multiples, the on-chip formula of each op, lanes
 * on GPUs) in code, and their measured preferences as data: one table, each row where it
 * applies, the knob, its value and where it was measured (docs/history.md).
 */
#include "opencl_internal.h"

/* Where a preference applies: CPUs (local memory is global memory and the device is no GPU:
 * pocl), GPUs, other devices (neither), and which ops. */
enum { ON_CPU = 1, ON_GPU = 2, ON_OTHER = 4, NOT_GPU = ON_CPU | ON_OTHER, ON_ANY = 7 };
enum {
    FWD = 1u << FA__OP_FORWARD,
    BWD = 1u << FA__OP_BACKWARD,
    MERGE = 1u << FA__OP_MERGE,
    ANY_OP = FWD | BWD | MERGE
};

typedef enum cl_knob {
    KNOB_MAX_BLOCK_C,   /* Bc's cap, overrides included (max_block_c) */
    KNOB_PREF_BLOCK_C,  /* Bc's cap where Bc is not overridden (pref_block_c) */
    KNOB_MIN_BLOCK_R,   /* Br raised towards it (min_block_r) */
    KNOB_IN_PLACE_ROWS, /* tiles of at most this many rows read K and V in place */
    KNOB_GQA_PACK,      /* a decode's query heads of a K/V head as one tile's rows */
    KNOB_DKDV_OWNS_BR,  /* the backward's dK/dV pass owns Br keys */
    KNOB_TILE_F32,      /* f16 and bf16 tiles held as f32 (TILE_F32) */
    KNOB_VECTOR_WIDTH,  /* VEC_MAX; 0: 16 where the device prefers 16 or more, else 8 */
    KNOB_MIN_WORK_GROUP, /* the forward's work-group floor (min_work_group) */
    KNOB_REG_BLOCKED    /* the register-blocked path (the forward's where it does not run in
                           place; the backward's dK/dV and dQ passes) */
} cl_knob;

typedef struct cl_preference {
    unsigned devices, ops;
    int32_t min_d, max_d; /* head dims it applies to, inclusive */
    cl_knob knob;
    int32_t value;
    const char *why; /* one line, with the chapter of docs/history.md that measured it */
} cl_preference;

/* Later rows win where several apply. */
static const cl_preference preferences[] = {
    {ON_ANY, FWD | MERGE, 1, 256, KNOB_MAX_BLOCK_C, 128,
     "longer key sweeps ran slower on pocl, 128 amortizes the tile loads (history.md, ch. 1)"},
    {ON_ANY, BWD, 1, 256, KNOB_MAX_BLOCK_C, 64,
     "the backward ran faster at Bc 64 than 128 on pocl, causal too (history.md, ch. 5)"},
    {NOT_GPU, FWD, 97, 128, KNOB_PREF_BLOCK_C, 64,
     "the fastest Bc measured on CPUs at 96 < d <= 128 (history.md, ch. 17)"},
    {ON_ANY, ANY_OP, 1, 256, KNOB_MIN_BLOCK_R, 256,
     "every K/V tile a work-group loads serves Br rows: 1.1-1.8x on pocl (history.md, ch. 7)"},
    {ON_CPU, ANY_OP, 1, 256, KNOB_IN_PLACE_ROWS, 64,
     "short tiles share a copied tile with few rows: 9-20x in place (history.md, ch. 11, 12)"},
    {ON_ANY, FWD, 1, 256, KNOB_GQA_PACK, 1,
     "a decode reads its K and V once per group, not per head: 2-5x (history.md, ch. 12)"},
    {NOT_GPU, BWD, 1, 256, KNOB_DKDV_OWNS_BR, 1,
     "256 keys per dK/dV work-group load each query tile once for them (history.md, ch. 15)"},
    {ON_CPU, ANY_OP, 1, 256, KNOB_TILE_F32, 1,
     "f16 tiles converted once as loaded, not at every read (history.md, ch. 16, 17)"},
    {NOT_GPU, ANY_OP, 1, 256, KNOB_VECTOR_WIDTH, 0,
     "float16 gives 512-bit FMAs on AVX-512, about 10% (history.md, ch. 7)"},
    {ON_GPU, ANY_OP, 1, 256, KNOB_VECTOR_WIDTH, 4,
     "float8 keys spilled 16-41 registers on AMD (tools/cl_gpu_check.sh, f32 d32 64 x 48)"},
    {ON_GPU, FWD, 1, 256, KNOB_MIN_WORK_GROUP, 64,
     "a work-group of a few warps hides latency where one leaves lanes idle"},
    {ON_CPU, FWD, 1, 256, KNOB_REG_BLOCKED, 1,
     "register blocks of 4 rows over K^T and V tiles: faster than staged (history.md, ch. 24)"},
    {ON_CPU, BWD, 1, 256, KNOB_REG_BLOCKED, 1,
     "the backward's products in 4-row register blocks: faster than staged (history.md, ch. 26)"},
};

static void apply(const cl_preference *pref, const fa_device_props *dev, const fa_problem *p,
                  fa__plan_rules *rules)
{
    switch (pref->knob) {
    case KNOB_MAX_BLOCK_C:
        rules->shape.max_block_c = (uint32_t)pref->value;
        break;
    case KNOB_PREF_BLOCK_C:
        rules->shape.pref_block_c = (uint32_t)pref->value;
        rules->shape.pref_block_c_why = pref->why;
        break;
    case KNOB_MIN_BLOCK_R:
        rules->shape.min_block_r = (uint32_t)pref->value;
        break;
    case KNOB_IN_PLACE_ROWS:
        rules->paths.in_place_rows = (uint32_t)pref->value;
        break;
    case KNOB_GQA_PACK:
        rules->paths.gqa_pack = pref->value;
        break;
    case KNOB_DKDV_OWNS_BR:
        rules->paths.dkdv_owns_br = pref->value;
        break;
    case KNOB_TILE_F32:
        rules->build.tile_f32 = p->dtype != FA_DTYPE_F32 ? pref->value : 0;
        break;
    case KNOB_VECTOR_WIDTH:
        rules->build.vector_width = pref->value ? pref->value : dev->vector_width >= 16 ? 16 : 8;
        break;
    case KNOB_REG_BLOCKED:
        rules->paths.reg_blocked = pref->value;
        break;
    case KNOB_MIN_WORK_GROUP:
        rules->shape.min_work_group = (uint32_t)(dev->wg_multiple > (uint32_t)pref->value
                                               ? dev->wg_multiple
                                               : (uint32_t)pref->value);
        break;
    }
}

/* Every row of the table that applies to this device, op and head dim, in order. */
static void apply_preferences(const fa_device_props *dev, const fa_problem *p, fa__op op,
                              fa__plan_rules *rules)
{
    unsigned device = dev->gpu ? ON_GPU : dev->local_mem_global ? ON_CPU : ON_OTHER;
    for (size_t i = 0; i < sizeof preferences / sizeof preferences[0]; i++) {
        const cl_preference *pref = &preferences[i];
        if ((pref->devices & device) && (pref->ops & (1u << op)) && p->head_dim >= pref->min_d &&
            p->head_dim <= pref->max_d)
            apply(pref, dev, p, rules);
    }
}

/*
 * The backward's kernels hold, in one work-group of the larger pass: dK/dV pass: K^T, V^T of
 * its keys; Q^T, dO^T, Q, dO of a query tile; S^T and dP^T; LSE, D and the key count per query
 * row. dQ pass: Q^T, dO^T; K^T, V^T, K; S and dP. Their union bounds both. The dK/dV pass runs
 * one work-item per key, so Bc is capped by the work-group limit as Br is.
 */
static void backward_rules(const fa_device_props *dev, fa__plan_rules *rules)
{
    rules->memory.onchip = (fa__onchip_formula){
        .row_tiles = 4, .col_tiles = 3, .score_tiles = 2, .row_floats = 3,
        .what = "Q^T, dO^T, Q, dO; K^T, V^T, K; S and dP; LSE, D, key count per row"};
    uint32_t lanes = rules->shape.items_per_row > 0 ? rules->shape.items_per_row : 1;
    uint32_t keys = dev->max_work_group_size / lanes;
    if (keys < rules->shape.max_block_c)
        rules->shape.max_block_c = keys; /* the dK/dV work-group: Bc keys of items_per_row lanes */
    rules->paths.backward_launches = 3;
}

/*
 * Lanes per row on a GPU: an item has about 256 registers, and one lane per row kept the whole
 * accumulator row of d floats (the dK/dV pass two): spills at d >= 128 forward, d 32-128
 * backward (tools/cl_gpu_check.sh). So d / 32 lanes (a power of two dividing d, at most 8) keep
 * 32 floats each; a decode's few rows get more, up to 32, until Sq * lanes fills a warp.
 */
static uint32_t gpu_row_lanes(const fa_problem *p, fa__op op)
{
    int64_t d = p->head_dim, sq = p->seqlen_q > 1 ? p->seqlen_q : 1;
    uint32_t lanes = 1;
    while (lanes < 8 && d % (2 * lanes) == 0 && d / (2 * lanes) >= 32)
        lanes *= 2;
    while (op == FA__OP_FORWARD && lanes < 32 && sq * lanes < 32 && d % (2 * lanes) == 0)
        lanes *= 2;
    return lanes;
}

/*
 * On a GPU the tiles get half the local memory, so two work-groups stay resident and hide each
 * other's latency (where local memory is global memory, as on Mali, it limits no residency),
 * and a row's lanes share its max and sum through two floats each in local memory. The
 * backward splits its rows (dQ pass) and keys (dK/dV pass) between lanes the same way; its
 * lanes also divide Br, the dK/dV pass's query tile.
 */
static void gpu_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                      fa__plan_rules *rules)
{
    rules->build.gpu = 1; /* GPU-only loop unrolling (kernels_cl) */
    if (!dev->local_mem_global) {
        rules->memory.sram_budget = dev->sram_bytes / 2;
        rules->memory.budget_note = "half the local memory, so two work-groups stay resident "
                                    "per compute unit";
    }
    if (op == FA__OP_MERGE)
        return;
    rules->shape.items_per_row = gpu_row_lanes(p, op);
    if (rules->shape.items_per_row > rules->shape.tile_multiple)
        rules->shape.tile_multiple = rules->shape.items_per_row; /* Br, Bc: lanes' multiples */
    rules->shape.lanes_divide = op == FA__OP_BACKWARD ? 2 : 1;
    if (op == FA__OP_FORWARD && rules->shape.items_per_row > 1) {
        rules->memory.onchip.row_floats = 2 * rules->shape.items_per_row;
        rules->memory.onchip.what = "Q, K, V tiles, the f32 S tile, each lane's row max and sum";
    }
}

/*
 * Block-sparse: tiles no larger than a block (preferences, so overrides still plan as asked), so
 * a key tile that the query tile's block does not list is skipped whole and the keys computed
 * follow the listed blocks. A query tile across several query blocks computes the union of their
 * lists (each row masked to its own): at Br 256 over blocks of 64, a random 10% mask at N 4096
 * took 0.56 of the dense time on pocl, at Br 64 0.12 (docs/benchmarks.md); the register-blocked
 * forward skips per 4 rows instead, so it keeps Br 256 (0.16 of dense at 10%). The dense tiles' Br
 * floor (min_block_r) is lowered to the block; a GPU's work-group floor (min_work_group) may
 * still raise Br. The backward's dK/dV pass may own Br keys and stream Bc query rows
 * (dkdv_owns_br), so there both tiles stay within the smaller block of either axis.
 */
static void block_sparse_rules(const fa_problem *p, fa__op op, fa__plan_rules *rules)
{
    uint32_t bq = (uint32_t)p->sparse_block_q, bk = (uint32_t)p->sparse_block_k;
    if (op == FA__OP_MERGE || !p->block_sparse)
        return;
    if (op == FA__OP_BACKWARD)
        bq = bk = bq < bk ? bq : bk;
    /* The forward's register-blocked path (CPUs) runs a tile in one work-item and skips per
     * register block of 4 rows, each within one query block (block_q >= 16): it keeps the
     * dense plan's Br (a multiple of block_q: divide_blocks) and copies a K/V tile once for
     * every query block of it that lists it (plan_create.c, choose_reg_blocked says so in the
     * plan). Where Sq is at least twice in_place_rows, so that Br is sure to exceed them and
     * the tile not to run in place (which computes the union of a tile's key blocks), it
     * keeps the dense Bc too (a power of two): a key tile over several key blocks multiplies
     * per register block only the span of those its query block lists (flash_fwd_blocked.cl).
     * At 64-key tiles where the dense plan has 128, density 1 took 1.07x the dense CPU time,
     * at the dense tiles 0.98x (N 8192 on pocl, docs/benchmarks.md). Should that path not
     * hold the tiles, they span blocks and the other paths compute the union of their lists,
     * each row masked to its own. */
    rules->shape.block_r_divides = bq; /* after the fit and the GPU floor too */
    /* The backward's register-blocked passes skip per block of 4 rows (dQ) or keys (dK/dV)
     * by its own block's list (flash_bwd_blocked.cl), so they keep the dense tiles too: N 8192
     * on pocl at 64 x 64 blocks, density 1 took 1.43x the dense backward at tiles within one
     * block, 1.07x at the dense ones; density 0.5 0.70x -> 0.59x (docs/benchmarks.md). */
    if (op == FA__OP_BACKWARD && rules->paths.reg_blocked)
        return;
    const bool reg_blocked = op == FA__OP_FORWARD && rules->paths.reg_blocked;
    if (reg_blocked && p->seqlen_q >= 2 * (int64_t)rules->paths.in_place_rows)
        return;
    if (rules->shape.pref_block_c == 0 || rules->shape.pref_block_c > bk) {
        rules->shape.pref_block_c = bk;
        rules->shape.pref_block_c_why = "block-sparse: a key tile within one key block "
                                        "(sparse_block_k), so a tile no query block lists is "
                                        "skipped";
    }
    rules->shape.block_c_divides = bk;
    if (reg_blocked)
        return;
    rules->shape.pref_block_r = bq;
    if (rules->shape.min_block_r > bq) /* the measured floor of dense tiles: not here */
        rules->shape.min_block_r = bq;
    rules->shape.pref_block_r_why = "block-sparse: a query tile within one query block "
                                    "(sparse_block_q), so it visits its block's list only";
}

/*
 * The kernels run one work-item per query row (items_per_row 1: a work-group is Br items; more
 * lanes on GPUs) and load tiles with the whole work-group; key loops use vectors, so Br and Bc
 * above 8 are multiples of 8. The forward's on-chip bytes are the op's formula (Q, K, V tiles
 * in the storage type, or f32 under TILE_F32, and an f32 S tile); its in-place path declares
 * only Q and S. Split-KV and pow2 tiles: a short grid leaves compute units idle, and each tile
 * size is a program build (about a second on pocl).
 */
void fa__cl_plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules)
{
    rules->shape.items_per_row = 1;
    rules->shape.tile_multiple = 8;
    rules->paths.split_kv = 1;
    rules->shape.pow2_clamp = 1;
    apply_preferences(dev, p, op, rules);
    block_sparse_rules(p, op, rules);
    if (dev->gpu)
        gpu_rules(dev, p, op, rules);
    if (op == FA__OP_BACKWARD)
        backward_rules(dev, rules);
    if (rules->build.tile_f32) {
        rules->memory.onchip.tile_bytes = 4;
        rules->paths.path_note = "local tiles hold f32 (TILE_F32), converted once as they are "
                                 "loaded: local memory is global memory here";
    }
    /* In place (DIRECT_KV), one work-item holds the tile's rows and reads each K/V tile from
     * memory once, then from the cache per row; one item, not one per row: pocl 3.1
     * miscompiled work-groups of 2-16 items reading in place (history.md, ch. 11). */
    rules->paths.in_place_onchip = (fa__onchip_formula){
        .row_tiles = 1, .score_tiles = 1, .tile_bytes = rules->memory.onchip.tile_bytes,
        .what = "the Q tile and the f32 S tile"};
    /* Register-blocked: Q and O rows, K^T and V, S, all f32 (TILE_F32 where not f32). The
     * backward's passes own Br rows or keys (the dK/dV pass: K, V, dK, dV; dQ: Q, dO, dQ) and
     * stream Bc (Q^T, dO^T, Q, dO; K^T, V^T, K), S and dP only 4 rows at a time: counted as
     * one Br x Bc tile, more than they take from Br 8 on; LSE, D, keys per streamed row. */
    if (op == FA__OP_BACKWARD)
        rules->paths.reg_blocked_onchip = (fa__onchip_formula){
            .row_tiles = 4, .col_tiles = 4, .score_tiles = 1, .row_floats = 3, .tile_bytes = 4,
            .what = "K, V, f32 dK, dV (dQ pass: Q, dO, dQ); Q^T, dO^T, Q, dO; S and dP rows of "
                    "4; LSE, D, key count per row"};
    else
        rules->paths.reg_blocked_onchip = (fa__onchip_formula){
            .row_tiles = 2, .col_tiles = 2, .score_tiles = 1, .tile_bytes = 4,
            .what = "Q and the f32 O tile, K^T and V tiles, the f32 S tile"};
}
