/*
 * op_launches.c - what each operation is made of: its on-chip formula for the planner, its
 * tensors and its launches (the forward, split-KV's chunks and merge, the backward's passes, the
 * public merge), built once by fa_plan_create so that running a plan only binds buffers; and a
 * run's scratch and per-run params. docs/extending.md says how to add an operation.
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
                {"TPR", v->row_lanes}};
    fa__format(dst, size, "%s", "");
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        fa__append(dst, size, "%s%s%s=%d", i ? " " : "", prefix, defs[i].name,
                   (int)defs[i].value);
    if (v->mma) /* CUDA's tensor-core path; its kernels default to MMA 0 */
        fa__append(dst, size, " %sMMA=1", prefix);
    if (v->vector_width > 0)
        fa__append(dst, size, " %sVEC_MAX=%d", prefix, (int)v->vector_width);
    if (v->features != 0)
        fa__append(dst, size, " %sFEATURES=%d %sBIAS_DTYPE=%d", prefix, (int)v->features, prefix,
                   (int)v->bias_dtype);
    if (v->seq != 0)
        fa__append(dst, size, " %sSEQ=%d", prefix, (int)v->seq);
    if (v->split)
        fa__append(dst, size, " %sSPLIT=1", prefix);
    if (v->kernel == FA__KERNEL_MERGE)
        fa__append(dst, size, " %sPARTS_DTYPE=%d", prefix, (int)v->parts_dtype);
    if (v->gpu)
        fa__append(dst, size, " %sGPU=1", prefix);
    if (v->direct_kv)
        fa__append(dst, size, " %sDIRECT_KV=1", prefix);
    if (v->tile_f32)
        fa__append(dst, size, " %sTILE_F32=1", prefix);
    if (v->head_rows)
        fa__append(dst, size, " %sHEAD_ROWS=%d", prefix, (int)v->head_rows);
    if (v->packed)
        fa__append(dst, size, " %sPACKED=1", prefix);
    if (v->pipeline)
        fa__append(dst, size, " %sPIPELINE=1", prefix);
    if (v->sparse_full)
        fa__append(dst, size, " %sSPARSE_FULL=1", prefix);
    if (v->reg_blocked)
        fa__append(dst, size, " %sREG_BLOCKED=1", prefix);
}

void fa__cl_build_options(const fa__kernel_variant *v, char *dst, size_t size)
{
    fa__format(dst, size, "%s", "-cl-std=CL1.2 ");
    size_t used = strlen(dst);
    fa__variant_defines(v, "-D ", dst + used, size - used);
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

/*
 * Appends the sequence buffers a launch reads, after the modifier tensors, in one order for
 * every kernel (cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table: those the problem uses);
 * the kernels declare the same arguments under the same SEQ bits.
 */
static void add_seq_args(fa__launch *l)
{
    const unsigned s = (unsigned)l->params.seq;
    l->variant.seq = (int32_t)s;
    if (s & FA_SEQ_VARLEN) {
        l->args[l->n_args++] = FA__TENSOR_CU_SEQLENS_Q;
        l->args[l->n_args++] = FA__TENSOR_CU_SEQLENS_K;
    }
    if (s & FA_SEQ_SEQLENS_K)
        l->args[l->n_args++] = FA__TENSOR_SEQLENS_K;
    if (s & FA_SEQ_PAGED)
        l->args[l->n_args++] = FA__TENSOR_BLOCK_TABLE;
}

/*
 * Appends a launch's block-sparse lists, after the sequence buffers: the forward's (kv_num_blocks,
 * kv_indices, then with full lists their pair; the forward and the dQ pass) or with `transposed`
 * the backward's (q_num_blocks, q_indices and their full pair; the dK/dV pass). The kernels
 * declare the same arguments under FA_FEATURE_BLOCK_SPARSE and SPARSE_FULL.
 */
static void add_block_list_args(fa__launch *l, const fa_problem *p, bool transposed)
{
    if (!(l->params.features & FA_FEATURE_BLOCK_SPARSE))
        return;
    const fa__tensor first = transposed ? FA__TENSOR_Q_NUM_BLOCKS : FA__TENSOR_KV_NUM_BLOCKS;
    const int n = p->sparse_full ? 4 : 2; /* fa__tensor order: num, indices, full num, full */
    for (int i = 0; i < n; i++)
        l->args[l->n_args++] = (fa__tensor)(first + i);
    l->variant.sparse_full = p->sparse_full ? 1 : 0;
}

const char *fa__kernel_entry(fa__kernel kernel)
{
    static const char *const names[FA__KERNEL_COUNT] = {
        [FA__KERNEL_FWD] = "flash_fwd",           [FA__KERNEL_MERGE] = "flash_merge",
        [FA__KERNEL_BWD_PRE] = "flash_bwd_pre",   [FA__KERNEL_BWD_DKDV] = "flash_bwd_dkdv",
        [FA__KERNEL_BWD_DQ] = "flash_bwd_dq",     [FA__KERNEL_BWD_DSINKS] = "flash_bwd_dsinks",
        [FA__KERNEL_BWD_GOLDEN] = "flash_bwd"};
    return (unsigned)kernel < FA__KERNEL_COUNT ? names[kernel] : "?";
}

/* A launch's grid, kernel and tensor arguments (the variant and params are set by the caller). */
static void set_launch(fa__launch *l, fa__kernel kernel, uint64_t gx, uint64_t gy, uint64_t gz,
                       const fa__tensor *args, int n_args)
{
    l->variant.kernel = kernel;
    l->grid[0] = gx;
    l->grid[1] = gy;
    l->grid[2] = gz;
    memcpy(l->args, args, (size_t)n_args * sizeof *args);
    l->n_args = n_args;
}

/* What every launch of a plan shares: its problem's params at the plan's tiles, and the
 * variant's shape, dtype, mask, work-group, lanes and the backend's build. Each op's builder
 * then names the kernel, its grid and tensors, and what only that kernel has. */
static void plan_launch(const fa_plan *plan, const fa__plan_rules *rules, fa__launch *l)
{
    const fa__tiles *t = &plan->tiles;
    memset(l, 0, sizeof *l);
    fa__kernel_params_fill(&plan->kernel_problem, t->block_r, &l->params);
    const fa_kernel_params *kp = &l->params;
    l->variant = (fa__kernel_variant){
        .head_dim = kp->head_dim,
        .block_r = t->block_r,
        .block_c = t->block_c,
        .dtype = (int32_t)plan->kernel_problem.dtype,
        .mask = kp->mask,
        .work_group_size = t->work_group_size,
        .row_lanes = rules->shape.row_lanes > 0 ? rules->shape.row_lanes : t->row_lanes,
        .mma = rules->build.mma,
        .features = kp->features,
        .bias_dtype = kp->features ? kp->bias_dtype : 0,
        .vector_width = rules->build.vector_width,
        .gpu = rules->build.gpu,
        .tile_f32 = rules->build.tile_f32,
        .pipeline = rules->build.pipeline,
    };
    l->onchip_bytes = t->sram_bytes;
}

/*
 * flash_merge: one work-group per (query tile, head, batch) combines the partials of its rows
 * (o_parts, lse_parts) into O and, when asked, LSE. It reads no modifier; parts_dtype is the
 * partial O's storage.
 */
static void merge_launch(fa__launch *l, fa__tensor o_parts, fa__tensor lse_parts,
                         int32_t parts_dtype)
{
    const fa__tensor args[] = {o_parts, lse_parts, FA__TENSOR_O, FA__TENSOR_LSE};
    const fa_kernel_params *kp = &l->params;
    set_launch(l, FA__KERNEL_MERGE, (uint64_t)kp->q_tiles, (uint64_t)kp->heads_q,
               (uint64_t)kp->batch, args, 4);
    l->variant.features = 0; /* it reads no modifier */
    l->variant.pipeline = 0; /* nor K and V */
    l->variant.sparse_full = 0; /* nor the block lists */
    l->variant.bias_dtype = 0;
    l->variant.parts_dtype = parts_dtype;
    add_seq_args(l);
}

/*
 * Split-KV: flash_fwd compiled with SPLIT writes each chunk's partial O (f32) and LSE into
 * scratch, one work-group per (query tile and chunk, head, batch), then flash_merge combines
 * them. The partials are laid out by row index (fa_lse_index): O [splits][rows][d] for BHSD
 * rows, or token-major [splits][tokens][Hq][d] with varlen, then LSE [splits][rows].
 */
/* The partials' layout for `rows` rows of the f32 scratch (split-KV). */
static void split_layout(fa_kernel_params *kp, int64_t splits, int64_t rows)
{
    kp->part_rows = rows;
    kp->parts_stride = rows * kp->head_dim;
    kp->lse_parts_offset = splits * rows * kp->head_dim;
}

static void split_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    fa__launch *l = plan->launches;
    fa_kernel_params *kp = &l[0].params;
    const int64_t d = kp->head_dim, splits = plan->kv_splits;
    const int64_t rows = kp->batch * kp->heads_q * kp->seqlen_q;
    int64_t tiles_per = ((kp->seqlen_k + plan->tiles.block_c - 1) / plan->tiles.block_c +
                         splits - 1) / splits;
    kp->splits = (fa_kp_i32)splits;
    kp->split_keys = tiles_per * plan->tiles.block_c;
    kp->parts_offset = 0;
    split_layout(kp, splits, rows);
    if (kp->seq & FA_SEQ_VARLEN) {
        kp->parts_stride_b = 0;
        kp->parts_stride_h = d;
        kp->parts_stride_s = kp->heads_q * d;
    } else {
        kp->parts_stride_s = d;
        kp->parts_stride_h = kp->seqlen_q * d;
        kp->parts_stride_b = kp->heads_q * kp->seqlen_q * d;
    }
    plan_launch(plan, rules, &l[1]);
    l[1].params = l[0].params;
    l[0].grid[0] *= (uint64_t)splits;
    l[0].args[3] = FA__TENSOR_SCRATCH; /* O and LSE: the partials */
    l[0].args[4] = FA__TENSOR_SCRATCH;
    l[0].variant.split = 1;
    merge_launch(&l[1], FA__TENSOR_SCRATCH, FA__TENSOR_SCRATCH, FA_DTYPE_F32);
    /* the merge is not the in-place or register-blocked kernel: one work-item per row */
    if (plan->in_place || plan->reg_blocked)
        l[1].variant.work_group_size = plan->tiles.block_r;
    plan->n_launches = 2;
    plan->scratch_row_bytes = (uint64_t)(splits * (d + 1)) * 4;
    plan->scratch_base = plan->scratch_bytes = plan->scratch_row_bytes * (uint64_t)rows;
}

/* One work-group per (query tile, head, batch) reads Q, K, V and writes O and, when asked, LSE;
 * split-KV adds a merge. */
static void forward_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    static const fa__tensor args[] = {FA__TENSOR_Q, FA__TENSOR_K, FA__TENSOR_V, FA__TENSOR_O,
                                      FA__TENSOR_LSE};
    fa__launch *l = &plan->launches[0];
    plan_launch(plan, rules, l);
    const fa_kernel_params *kp = &l->params;
    set_launch(l, FA__KERNEL_FWD, (uint64_t)kp->q_tiles, (uint64_t)kp->heads_q,
               (uint64_t)kp->batch, args, (int)(sizeof args / sizeof args[0]));
    l->variant.head_rows = plan->head_rows;
    l->variant.packed = plan->packed;
    l->variant.direct_kv = plan->in_place;
    l->variant.reg_blocked = plan->reg_blocked;
    add_modifier_args(l, true);
    add_seq_args(l);
    add_block_list_args(l, &plan->kernel_problem, false);
    plan->n_launches = 1;
    if (plan->kv_splits > 1)
        split_launches(plan, rules);
}

/* fa_merge: partials in the storage type, laid out as O one after another (flashattn.h), LSE
 * partials f32 [parts, B, Hq, Sq]. */
static void public_merge_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    fa__launch *l = plan->launches;
    plan_launch(plan, rules, l);
    fa_kernel_params *kp = &l->params;
    const fa_problem *p = &plan->kernel_problem;
    kp->splits = plan->kv_splits;
    kp->parts_offset = kp->o_offset;
    kp->parts_stride_b = kp->o_stride_b;
    kp->parts_stride_h = kp->o_stride_h;
    kp->parts_stride_s = kp->o_stride_s;
    kp->parts_stride = (fa_kp_i64)fa__layout_extent(&p->o, p->batch, p->heads_q, p->seqlen_q,
                                                     p->head_dim);
    kp->part_rows = kp->batch * kp->heads_q * kp->seqlen_q;
    kp->lse_parts_offset = 0;
    merge_launch(l, FA__TENSOR_O_PARTS, FA__TENSOR_LSE_PARTS, (int32_t)p->dtype);
    plan->n_launches = 1;
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
    set_launch(l, FA__KERNEL_BWD_GOLDEN, 1, (uint64_t)kp->heads_kv, (uint64_t)kp->batch, args,
               (int)(sizeof args / sizeof args[0]));
    add_modifier_args(l, false);
    add_seq_args(l);
    plan->n_launches = 1;
    if (kp->features & FA_FEATURE_SINKS) {
        static const fa__tensor dsinks[] = {FA__TENSOR_LSE, FA__TENSOR_O, FA__TENSOR_DO,
                                            FA__TENSOR_SINKS, FA__TENSOR_DSINKS};
        l[1] = l[0];
        set_launch(&l[1], FA__KERNEL_BWD_DSINKS, 1, (uint64_t)kp->heads_q, 1, dsinks, 5);
        add_seq_args(&l[1]);
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
 * the query tile as BLOCK_C: a kernel's BLOCK_R is always the rows its work-group owns. Its key
 * tile is the plan's Bc, or Br under dkdv_owns_br (the union formula bounds both when Br > Bc:
 * 2 Br d + 4 Bc d <= 4 Br d + 3 Bc d and 3 Bc <= 3 Br floats per row).
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
    if (plan->reg_blocked) /* the passes' one work-item per tile; D's pass: one per row */
        l[0].variant.work_group_size = plan->tiles.block_r;
    l[1] = l[2] = l[0];
    const fa_kernel_params *kp = &l[0].params;
    int32_t keys = plan->tiles.block_c, rows = plan->tiles.block_r; /* the dK/dV pass's tiles */
    if (rules->paths.dkdv_owns_br && rows > keys && kp->seqlen_k >= rows) {
        keys = plan->tiles.block_r;
        rows = plan->tiles.block_c;
        fa__append(plan->explain, sizeof plan->explain,
                   "dK/dV pass: each work-group owns Br = %d keys and streams query tiles of "
                   "Bc = %d rows, so every query tile it loads serves %d keys, not %d\n",
                   (int)keys, (int)rows, (int)keys, (int)rows);
    }
    uint64_t sk = (uint64_t)kp->seqlen_k, q_tiles = (uint64_t)kp->q_tiles;
    uint64_t hq = (uint64_t)kp->heads_q, b = (uint64_t)kp->batch;
    set_launch(&l[0], FA__KERNEL_BWD_PRE, q_tiles, hq, b, pre, 3);
    set_launch(&l[1], FA__KERNEL_BWD_DKDV, (sk + (uint64_t)keys - 1) / (uint64_t)keys,
               (uint64_t)kp->heads_kv, b, dkdv, 8);
    l[1].variant.block_r = keys;
    l[1].variant.block_c = rows;
    l[1].variant.work_group_size = keys * (plan->tiles.row_lanes > 0 ? plan->tiles.row_lanes : 1);
    set_launch(&l[2], FA__KERNEL_BWD_DQ, q_tiles, hq, b, dq, 7);
    if (plan->reg_blocked) /* CPUs: one work-item per tile (flash_bwd_blocked.cl) */
        for (int i = 1; i <= 2; i++) {
            l[i].variant.reg_blocked = 1;
            l[i].variant.work_group_size = 1;
        }
    add_modifier_args(&l[1], false); /* P = exp(S - LSE): LSE already holds the sinks */
    add_modifier_args(&l[2], false);
    for (int i = 0; i < 3; i++)
        add_seq_args(&l[i]);
    add_block_list_args(&l[1], &plan->kernel_problem, true); /* a key block's query blocks */
    add_block_list_args(&l[2], &plan->kernel_problem, false);
    plan->n_launches = 3;
    plan->scratch_row_bytes = 4;
    plan->scratch_base = plan->scratch_bytes = b * hq * (uint64_t)kp->seqlen_q * 4;
    if (kp->features & FA_FEATURE_SINKS) {
        /* flash_bwd_dsinks: one work-group per query head sums -exp(sink - LSE) * D over the
         * batch and the rows in a fixed order (a tree within the work-group, no atomics). */
        static const fa__tensor dsinks[] = {FA__TENSOR_LSE, FA__TENSOR_SCRATCH, FA__TENSOR_SINKS,
                                            FA__TENSOR_DSINKS};
        l[3] = l[0];
        set_launch(&l[3], FA__KERNEL_BWD_DSINKS, 1, hq, 1, dsinks, 4);
        add_seq_args(&l[3]);
        plan->n_launches = 4;
    }
}

/* The plan's launch with the backward's tensors, then the backend's launches. */
static void backward_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    plan_launch(plan, rules, &plan->launches[0]);
    fa__kernel_params_fill_backward(&plan->kernel_problem, &plan->launches[0].params);
    if (rules->paths.backward_launches == 1)
        backward_golden(plan);
    else
        backward_kernels(plan, rules);
}

static uint64_t align8(uint64_t bytes)
{
    return (bytes + 7) & ~(uint64_t)7;
}

/* The backend's own scratch, after the op's: the most any launch asks (rules->paths). */
static void own_scratch(fa_plan *plan, const fa__plan_rules *rules)
{
    uint64_t own = 0;
    for (int i = 0; i < plan->n_launches && rules->paths.launch_scratch; i++) {
        uint64_t n = rules->paths.launch_scratch(plan->op, &plan->launches[i]);
        own = n > own ? n : own;
    }
    if (own > 0)
        plan->scratch_bytes = align8(plan->scratch_base) + own;
}

void fa__op_launches(fa_plan *plan, const fa__plan_rules *rules)
{
    switch (plan->op) {
    case FA__OP_BACKWARD:
        backward_launches(plan, rules);
        break;
    case FA__OP_MERGE:
        public_merge_launches(plan, rules);
        break;
    case FA__OP_FORWARD:
    default:
        forward_launches(plan, rules);
        break;
    }
    own_scratch(plan, rules);
}

/* ---- a run's scratch and params ---------------------------------------------------------- */

/* The rows of the op's scratch in one run (kp: the run's params): the plan's B x Hq x Sq, or a
 * varlen run's Hq x total_q where its tokens pass that (cu_seqlens_q[0] > 0), since the kernels
 * index scratch rows by token position, as they index the LSE. */
static int64_t run_rows(const fa_kernel_params *kp)
{
    int64_t rows = kp->batch * kp->heads_q * kp->seqlen_q;
    if ((kp->seq & FA_SEQ_VARLEN) && kp->heads_q * kp->lse_stride_h > rows)
        rows = kp->heads_q * kp->lse_stride_h;
    return rows;
}

void fa__run_params(const fa_plan *plan, const fa__launch *l, bool has_lse, int64_t total_q,
                    fa_kernel_params *kp)
{
    *kp = l->params;
    kp->has_lse = has_lse;
    if (!plan->problem.varlen)
        return;
    kp->lse_stride_h = total_q;
    if (plan->op == FA__OP_FORWARD && plan->kv_splits > 1)
        split_layout(kp, plan->kv_splits, run_rows(kp));
}

uint64_t fa__run_own_scratch_offset(const fa_plan *plan, const fa_kernel_params *kp)
{
    return align8(plan->scratch_row_bytes * (uint64_t)run_rows(kp));
}

uint64_t fa__run_scratch_bytes(const fa_plan *plan, int64_t total_q)
{
    if (plan->scratch_bytes == 0)
        return 0;
    fa_kernel_params kp;
    fa__run_params(plan, &plan->launches[0], false, total_q, &kp);
    uint64_t op_bytes = plan->scratch_row_bytes * (uint64_t)run_rows(&kp);
    if (plan->scratch_bytes <= plan->scratch_base)
        return op_bytes; /* the op's scratch only */
    return fa__run_own_scratch_offset(plan, &kp) +
           (plan->scratch_bytes - align8(plan->scratch_base));
}
