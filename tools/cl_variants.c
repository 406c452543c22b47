/*
 * cl_variants.c - prints every distinct OpenCL kernel variant the planner produces for one GPU
 * profile over a small case table, one line each: the entry point, a tab, and the build
 * options exactly as the OpenCL backend passes them to clBuildProgram. tools/cl_gpu_check.sh
 * compiles these lines with clang + libclc for real GPU targets (no device needed), so the
 * check covers what the library would build, not a hand-written list that can drift from it.
 *
 *   cl_variants PROFILE      (amd-gfx90a, amd-gfx1030, nvidia-sm80, ...: backends/opencl/
 *                             cl_profiles.c)
 *
 * Cases: head_dim 32, 64, 96, 128, 256; f32, f16, bf16; no mask and causal bottom-right;
 * Sq = Sk = 2048 and decode (Sq 1, Sk 4096: split-KV, so flash_fwd with SPLIT=1 and
 * flash_merge); forward and backward plans; batch 1, 8 heads. Then the score modifiers and
 * dropout (their kernels are compiled in under FEATURES): at head_dim 64 and 128, f32 and f16,
 * causal bottom-right, Sq = Sk = 2048, all six (an f32 bias) and softcap, ALiBi, a window and
 * dropout without the bias and sinks; and a GQA decode (8 / 2 heads, Sq 1, Sk 4096) with sinks,
 * ALiBi and a window, which packs the query heads as rows (PACKED). Block-sparse (blocks of
 * 64, the forward and both backward passes with their lists): d 64 and 128, f32 and f16, causal
 * bottom-right, Sq = Sk = 2048, with and without full lists; and f16 d 64 with full lists and
 * softcap, ALiBi, a window and dropout. Exit 1 with the reason on stderr when a context or a
 * plan cannot be made.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define MAX_VARIANTS 512

typedef struct variant_set {
    char line[MAX_VARIANTS][FA__CL_OPTIONS_SIZE + 32]; /* "<entry>\t<options>" */
    int count;
} variant_set;

/* Adds a plan's launches as lines, spelled as cl_launch_prepare spells them
 * (fa__cl_build_options); false when full. */
static bool add_plan(variant_set *set, const fa_plan *plan)
{
    for (int i = 0; i < plan->n_launches; i++) {
        const fa__kernel_variant *v = &plan->launches[i].variant;
        char options[FA__CL_OPTIONS_SIZE];
        fa__cl_build_options(v, options, sizeof options);
        char line[sizeof set->line[0]];
        fa__format(line, sizeof line, "%s\t%s", fa__kernel_entry(v->kernel), options);
        bool seen = false;
        for (int j = 0; j < set->count && !seen; j++)
            seen = strcmp(set->line[j], line) == 0;
        if (seen)
            continue;
        if (set->count == MAX_VARIANTS)
            return false;
        fa__format(set->line[set->count++], sizeof set->line[0], "%s", line);
    }
    return true;
}

/* Turns on the modifiers of set `set` (1: all six, an f32 bias [1, 8, Sq, Sk]; 0: softcap,
 * ALiBi, a window and dropout; 2: sinks, ALiBi and a window, a decode's). */
static void add_modifiers(fa_problem *p, int set)
{
    p->alibi = 1;
    p->window = 1;
    p->window_left = 256;
    p->window_right = 0;
    if (set == 2) {
        /* a ring block's: absolute positions (FA_FEATURE_POSITIONS) shift the diagonal, the
         * window and ALiBi of a query block 64 rows into a longer sequence */
        p->sinks = 1;
        p->q_position = 64;
        p->k_position = 0;
        p->whole_seqlen_q = p->seqlen_q + 64;
        p->whole_seqlen_k = p->seqlen_k + 64;
        return;
    }
    p->softcap = 30.0f;
    p->dropout_p = 0.1f;
    p->dropout_seed = 1;
    if (!set)
        return;
    p->sinks = 1;
    p->bias = 1;
    p->bias_dtype = FA_DTYPE_F32;
    p->bias_layout.offset = 0;
    p->bias_layout.stride_seq = p->seqlen_k;
    p->bias_layout.stride_head = p->seqlen_q * p->seqlen_k;
    p->bias_layout.stride_batch = p->heads_q * p->seqlen_q * p->seqlen_k;
}

/* Block-sparse lists (FA_FEATURE_BLOCK_SPARSE) of 64 x 64 blocks, broadcast over the batch and
 * heads; with `full`, the full lists too (SPARSE_FULL). */
static void add_block_sparse(fa_problem *p, bool full)
{
    p->block_sparse = 1;
    p->sparse_block_q = p->sparse_block_k = 64;
    p->sparse_batch = p->sparse_heads = 1;
    p->sparse_full = full;
}

/* Plans one problem (8 heads; with modifier set `mods`: -1 none, else add_modifiers', set 2
 * on 2 K/V heads; sparse: -1 dense, else add_block_sparse's with full = sparse) forward and
 * backward and adds both plans' launches; false with the reason on stderr when either fails. */
static bool add_problem(fa_context *ctx, variant_set *set, fa_dtype dtype, fa_mask mask,
                        int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim, int mods,
                        int sparse)
{
    fa_problem p;
    fa_status st = fa_problem_init(&p, dtype, FA_LAYOUT_BHSD, 1, 8, mods == 2 ? 2 : 8, seqlen_q,
                                   seqlen_k, head_dim);
    p.mask = mask;
    if (mods >= 0)
        add_modifiers(&p, mods);
    if (sparse >= 0)
        add_block_sparse(&p, sparse == 1);
    for (int backward = 0; backward < 2 && st == FA_STATUS_OK; backward++) {
        fa_plan *plan = NULL;
        st = backward ? fa_plan_create_backward(ctx, &p, &plan) : fa_plan_create(ctx, &p, &plan);
        if (st == FA_STATUS_OK && !add_plan(set, plan)) {
            fprintf(stderr, "cl_variants: more than %d variants\n", MAX_VARIANTS);
            fa_plan_destroy(plan);
            return false;
        }
        fa_plan_destroy(plan);
    }
    if (st != FA_STATUS_OK)
        fprintf(stderr, "cl_variants: %s d=%lld %s Sq=%lld Sk=%lld modifiers %d sparse %d: "
                        "%s: %s\n",
                fa_dtype_name(dtype), (long long)head_dim, fa_mask_name(mask),
                (long long)seqlen_q, (long long)seqlen_k, mods, sparse, fa_status_name(st),
                fa_context_last_error(ctx));
    return st == FA_STATUS_OK;
}

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: cl_variants PROFILE   (an OpenCL GPU profile: amd-gfx90a, "
                        "amd-gfx1030, intel-xe, nvidia-sm80, mali-g710, adreno-740)\n");
        return 2;
    }
    char why[512] = "";
    fa_context *ctx = NULL;
    if (fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, argv[1], why, sizeof why) !=
        FA_STATUS_OK) {
        fprintf(stderr, "cl_variants: no planning context for \"%s\": %s\n", argv[1], why);
        return 1;
    }
    static variant_set set; /* 160 KiB: not on the stack */
    static const int64_t dims[] = {32, 64, 96, 128, 256};
    static const fa_dtype dtypes[] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    static const fa_mask masks[] = {FA_MASK_NONE, FA_MASK_CAUSAL_BOTTOM_RIGHT};
    static const int64_t seqlens[][2] = {{2048, 2048}, {1, 4096}}; /* (Sq, Sk): prefill, decode */
    bool ok = true;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0] && ok; d++)
        for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0] && ok; t++)
            for (size_t m = 0; m < sizeof masks / sizeof masks[0] && ok; m++)
                for (size_t s = 0; s < sizeof seqlens / sizeof seqlens[0] && ok; s++)
                    ok = add_problem(ctx, &set, dtypes[t], masks[m], seqlens[s][0],
                                     seqlens[s][1], dims[d], -1, -1);
    for (size_t d = 1; d < 4 && ok; d += 2) /* d 64 and 128 */
        for (size_t t = 0; t < 2 && ok; t++)
            for (int mods = 0; mods < 3 && ok; mods++)
                ok = add_problem(ctx, &set, dtypes[t], FA_MASK_CAUSAL_BOTTOM_RIGHT,
                                 mods == 2 ? 1 : 2048, mods == 2 ? 4096 : 2048, dims[d], mods,
                                 -1);
    for (size_t d = 1; d < 4 && ok; d += 2) /* block-sparse: d 64 and 128, full lists or not */
        for (size_t t = 0; t < 2 && ok; t++)
            for (int full = 0; full < 2 && ok; full++)
                ok = add_problem(ctx, &set, dtypes[t], FA_MASK_CAUSAL_BOTTOM_RIGHT, 2048, 2048,
                                 dims[d], -1, full);
    if (ok) /* and with the modifiers and dropout in the passes' block-sparse code */
        ok = add_problem(ctx, &set, FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2048, 2048, 64, 0,
                         1);
    fa_context_destroy(ctx);
    if (!ok)
        return 1;
    for (int i = 0; i < set.count; i++)
        printf("%s\n", set.line[i]);
    return 0;
}
