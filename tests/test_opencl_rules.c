/*
 * test_opencl_rules.c - the OpenCL backend's plan rules on the real platform: which forward
 * reads K/V in place, the register-blocked path, f32 tiles, the CPU key-block preference, GQA
 * and heads packing, vector widths (FLASHATTN_OPENCL_VECTOR_WIDTH), the device type the rules
 * plan for (FLASHATTN_OPENCL_DEVICE_TYPE) and programs shared between launches. In CI the device
 * is pocl, so the CPU-only rules really run; test_opencl.c covers interop and builds.
 *
 *   test_opencl_rules   (exit 77 when there is no OpenCL device and CI does not require one)
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "opencl_internal.h" /* the context's program cache (test_programs_shared) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK

/* A context on the default OpenCL device and its props, for the tests of the pocl-only plan
 * rules; in CI the device is pocl, whose local memory is global memory, so those rules must
 * really be exercised. */
static fa_context *rule_context(fa_device_props *props)
{
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    assert_int_equal(fa_context_device_props(ctx, props), OK);
    if (getenv("CI"))
        assert_true(props->local_mem_global && !props->gpu);
    return ctx;
}

/* Whether a forward plan of Sq query rows (heads 32/8, Sk 4096, d dim) reads K and V in place;
 * if so, its work-group must be one work-item. */
static bool plans_direct_kv(fa_context *ctx, int64_t sq, int64_t dim)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 32, 8, sq, 4096, dim);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    bool direct = strstr(fa_plan_explain(plan), "(DIRECT_KV)") != NULL;
    if (direct) {
        assert_int_equal(fa_plan_work_group_size(plan), 1);
        /* The bytes the in-place kernel declares: the Q tile and the f32 S tile, which the
         * compiled kernel's local memory holds, with its few per-row floats beside them. */
        uint64_t br = (uint64_t)fa_plan_block_r(plan), bc = (uint64_t)fa_plan_block_c(plan);
        uint64_t want = (br * (uint64_t)dim + br * bc) * 4;
        assert_int_equal(fa_plan_sram_bytes(plan), want);
        const fa__cl_program *e = plan->launches[0].backend_data;
        printf("  in place: Br %llu Bc %llu d %lld: planned %llu, compiled %llu bytes\n",
               (unsigned long long)br, (unsigned long long)bc, (long long)dim,
               (unsigned long long)want, (unsigned long long)e->kernel_local);
        assert_true(e->kernel_local >= want && e->kernel_local <= want + 2 * br * 4 + 64);
    }
    fa_plan_destroy(plan);
    return direct;
}

/* flash_fwd reads K and V in place (no local tiles), one work-item per tile, exactly where
 * local memory is global memory and a tile has at most 64 rows of one lane each
 * (backends/opencl/cl_rules.c's in-place rows, chosen by src/plan_create.c's choose_path), its
 * plan counting the bytes that kernel declares: decodes and short prefills on pocl (Sq 1 packs a
 * GQA group's 4 rows), not Sq 65 at d 128 (Br 128) nor a prefill; the decode suites check its
 * results. */
static void test_direct_kv_rule(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = rule_context(&props);
    bool direct = props.local_mem_global && !props.gpu; /* a GPU adds lanes per row */
    assert_int_equal(plans_direct_kv(ctx, 1, 128), direct);
    assert_int_equal(plans_direct_kv(ctx, 2, 64), direct);
    assert_int_equal(plans_direct_kv(ctx, 64, 32), direct);
    assert_false(plans_direct_kv(ctx, 65, 128));
    assert_false(plans_direct_kv(ctx, 2048, 64));
    fa_context_destroy(ctx);
}

/* A forward that does not run in place runs the register-blocked path (REG_BLOCKED) exactly
 * where local memory is global memory on a device that is not a GPU (cl_rules.c): one work-item
 * per tile, its plan counting what that kernel declares (Q and the f32 O tile, K^T and V, S);
 * a 64-row tile stays in place. test_forward's and test_modifiers' cases check its results. */
static void test_reg_blocked_rule(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = rule_context(&props);
    bool cpu = props.local_mem_global && !props.gpu;
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_BF16, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    bool blocked = strstr(fa_plan_explain(plan), "(REG_BLOCKED)") != NULL;
    assert_int_equal(blocked, cpu);
    if (blocked) {
        uint64_t br = (uint64_t)fa_plan_block_r(plan), bc = (uint64_t)fa_plan_block_c(plan);
        uint64_t want = (2 * br * 64 + 2 * bc * 64) * 4 + br * bc * 4;
        assert_int_equal(fa_plan_work_group_size(plan), 1);
        assert_int_equal(fa_plan_sram_bytes(plan), want);
        const fa__cl_program *e = plan->launches[0].backend_data;
        assert_true(e->kernel_local >= want && e->kernel_local <= want + 256);
    }
    fa_plan_destroy(plan);
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 8, 8, 64, 2048, 64);
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_null(strstr(fa_plan_explain(plan), "(REG_BLOCKED)"));
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
}

/* Whether a backward plan of p runs the register-blocked passes; if so, that its dK/dV and dQ
 * launches (not D's) are built with REG_BLOCKED and one work-item, and that the on-chip bytes
 * the plan declares bound the local memory those kernels take (CL_KERNEL_LOCAL_MEM_SIZE), up
 * to the loop range and alignment, 256 bytes, as test_reg_blocked_rule allows. */
static bool backward_blocked(fa_context *ctx, const fa_problem *p)
{
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create_backward(ctx, p, &plan), OK);
    bool blocked = strstr(fa_plan_explain(plan), "flash_bwd_blocked.cl") != NULL;
    assert_int_equal(plan->launches[0].variant.reg_blocked, 0);
    for (int i = 1; i <= 2; i++) {
        const fa__launch *l = &plan->launches[i];
        assert_int_equal(l->variant.reg_blocked, blocked);
        if (!blocked)
            continue;
        assert_int_equal(l->variant.work_group_size, 1);
        const fa__cl_program *e = l->backend_data;
        assert_true(e->kernel_local <= fa_plan_sram_bytes(plan) + 256);
    }
    fa_plan_destroy(plan);
    return blocked;
}

/* The backward runs the register-blocked passes (REG_BLOCKED, flash_bwd_blocked.cl) exactly
 * where the forward's rule has it, on CPUs, and where both of its tiles are multiples of the
 * 4-row register block; else the staged passes. test_backward's cases with 4 x 8 tiles run it
 * (checked here), and its and test_modifiers' backward cases check its results. */
static void test_reg_blocked_backward_rule(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = rule_context(&props);
    bool cpu = props.local_mem_global && !props.gpu;
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_BF16, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    assert_int_equal(backward_blocked(ctx, &p), cpu);
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 2, 2, 2, 5, 17, 8); /* test_backward's */
    p.mask = FA_MASK_CAUSAL_TOP_LEFT;
    p.block_r = 4;
    p.block_c = 8;
    assert_int_equal(backward_blocked(ctx, &p), cpu);
    p.block_r = 2; /* not a multiple of the register block: staged */
    assert_false(backward_blocked(ctx, &p));
    fa_context_destroy(ctx);
}

/* Whether a plan of dtype (forward or backward, B1 H8 N2048 d64) holds its tiles in f32; if
 * so the forward's on-chip bytes count 4 per tile element: (Br d + 2 Bc d) * 4 + Br Bc * 4, and
 * on the register-blocked path (REG_BLOCKED) its f32 O tile too, Br d * 4 more. */
static bool plans_f32_tiles(fa_context *ctx, fa_dtype dtype, bool backward)
{
    fa_problem p;
    fa_problem_init(&p, dtype, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    fa_plan *plan = NULL;
    assert_int_equal((backward ? fa_plan_create_backward : fa_plan_create)(ctx, &p, &plan), OK);
    bool f32 = strstr(fa_plan_explain(plan), "(TILE_F32)") != NULL;
    uint64_t br = (uint64_t)fa_plan_block_r(plan), bc = (uint64_t)fa_plan_block_c(plan);
    uint64_t o_tile = strstr(fa_plan_explain(plan), "(REG_BLOCKED)") ? br * 64 * 4 : 0;
    if (f32 && !backward)
        assert_int_equal(fa_plan_sram_bytes(plan),
                         (br * 64 + 2 * bc * 64) * 4 + br * bc * 4 + o_tile);
    fa_plan_destroy(plan);
    return f32;
}

/* f16 and bf16 tiles hold f32 exactly where local memory is global memory on a device that is
 * not a GPU (backends/opencl/opencl.c, f32_tiles), forward and backward; f32 storage needs no
 * such note. The suites' f16 and bf16 cases check the results (bitwise those of tiles in the
 * storage type: the conversion is exact). */
static void test_f32_tiles_rule(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = rule_context(&props);
    bool f32 = props.local_mem_global && !props.gpu;
    assert_int_equal(plans_f32_tiles(ctx, FA_DTYPE_F16, false), f32);
    assert_int_equal(plans_f32_tiles(ctx, FA_DTYPE_BF16, false), f32);
    assert_int_equal(plans_f32_tiles(ctx, FA_DTYPE_F16, true), f32);
    assert_false(plans_f32_tiles(ctx, FA_DTYPE_F32, false));
    fa_context_destroy(ctx);
}

/* The forward's Bc on a CPU device (opencl.c, cpu_forward_keys), f32 N 2048: 64 at d 128, 128
 * at d 64 and 96; a preference, so an override of 128 at d 128 is planned as asked. */
static int64_t forward_block_c(fa_context *ctx, int64_t dim, int32_t block_c)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, dim);
    p.block_c = block_c;
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    int64_t bc = fa_plan_block_c(plan);
    fa_plan_destroy(plan);
    return bc;
}

static void test_cpu_keys_rule(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = rule_context(&props);
    bool cpu = props.local_mem_global && !props.gpu;
    if (cpu) {
        assert_int_equal(forward_block_c(ctx, 128, 0), 64);
        assert_int_equal(forward_block_c(ctx, 96, 0), 128);
        assert_int_equal(forward_block_c(ctx, 64, 0), 128);
    }
    assert_int_equal(forward_block_c(ctx, 128, 128), 128);
    fa_context_destroy(ctx);
}

/* Whether the forward plan of p packs GQA groups; if so the kernels see heads_kv heads of
 * heads_q / heads_kv rows, so Br is that many rows (rounded up to a power of two). */
static bool plans_gqa_pack(fa_context *ctx, const fa_problem *p)
{
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, p, &plan), OK);
    bool packed = strstr(fa_plan_explain(plan), "GQA packing") != NULL;
    if (packed) {
        assert_int_equal(fa_plan_block_r(plan), p->heads_q / p->heads_kv);
        assert_int_equal(fa_plan_work_groups(plan), p->batch * p->heads_kv);
        assert_int_equal(fa_plan_problem(plan)->heads_q, p->heads_q); /* the caller's problem */
    }
    fa_plan_destroy(plan);
    return packed;
}

/* Entry points of one program built with the same options share one build: a backward plan
 * whose flash_bwd_pre and flash_bwd_dq launches have the same options holds one cl_program for
 * both, with a kernel each (cl_program.c); the context's cache is read directly. On the
 * register-blocked path (CPUs) the passes are built with REG_BLOCKED and one work-item, D's
 * pass without: there flash_bwd_dkdv and flash_bwd_dq (Br = Bc = 64) share one. */
static void test_programs_shared(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 64, 64, 64), OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create_backward(ctx, &p, &plan), OK);
    const fa__cl_state *s = ctx->state;
    const fa__kernel_cached *pre = NULL, *dq = NULL;
    const fa__kernel sibling = plan->launches[2].variant.reg_blocked ? FA__KERNEL_BWD_DKDV
                                                                      : FA__KERNEL_BWD_PRE;
    for (const fa__kernel_cached *e = s->programs.head; e; e = e->next) {
        if (e->kernel == sibling)
            pre = e;
        if (e->kernel == FA__KERNEL_BWD_DQ)
            dq = e;
    }
    assert_non_null(pre);
    assert_non_null(dq);
    assert_string_equal(pre->options, dq->options);
    const fa__cl_program *a = pre->object, *b = dq->object;
    assert_ptr_equal(a->program, b->program);
    assert_ptr_not_equal(a->kernel, b->kernel);
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
}

/* The VEC_MAX a forward's program is built with on this device, FLASHATTN_OPENCL_VECTOR_WIDTH
 * set to `width` (NULL: unset); -1 where the context was not made, its status in *st. */
static int built_vec_max(const char *width, fa_status *st, char *why, size_t why_size)
{
    harness_env saved;
    harness_env_save(&saved, "FLASHATTN_OPENCL_VECTOR_WIDTH");
    if (width)
        setenv("FLASHATTN_OPENCL_VECTOR_WIDTH", width, 1);
    else
        unsetenv("FLASHATTN_OPENCL_VECTOR_WIDTH");
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    *st = fa_context_create(&ctx, &opts, why, why_size);
    harness_env_restore(&saved);
    if (*st != OK)
        return -1;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 64, 64, 64), OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    int vec_max = -1;
    const fa__cl_state *s = ctx->state;
    for (const fa__kernel_cached *e = s->programs.head; e; e = e->next) {
        const char *at = strstr(e->options, "VEC_MAX=");
        if (e->kernel == FA__KERNEL_FWD && at)
            vec_max = atoi(at + 8);
    }
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
    return vec_max;
}

/* FLASHATTN_OPENCL_VECTOR_WIDTH stands for the device's preferred width: on a CPU device 8
 * builds float8 kernels and 16 float16 ones (GPUs keep float4); a malformed value is an error
 * naming the variable, not the device's width. */
static void test_vector_width_override(void **state)
{
    (void)state;
    fa_status st = OK;
    char why[300] = "";
    fa_device_props props;
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    assert_int_equal(fa_context_device_props(ctx, &props), OK);
    fa_context_destroy(ctx);
    int own = built_vec_max(NULL, &st, why, sizeof why);
    assert_true(own == 4 || own == 8 || own == 16);
    assert_int_equal(built_vec_max("8", &st, why, sizeof why), props.gpu ? 4 : 8);
    assert_int_equal(built_vec_max("16", &st, why, sizeof why), props.gpu ? 4 : 16);
    const char *bad[] = {"7", "32", "8x", "-8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(built_vec_max(bad[i], &st, why, sizeof why), -1);
        assert_int_equal(st, FA_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(why, "FLASHATTN_OPENCL_VECTOR_WIDTH"));
    }
}

/* A context's device props with FLASHATTN_OPENCL_DEVICE_TYPE and the variable it replaced,
 * FLASHATTN_OPENCL_AS_GPU, set to `type` and `as_gpu` (NULL: unset), and whether a 97 x 97
 * d 64 forward then plans the register-blocked path (the CPU rules'); the context's status in
 * *st, the reason in why. */
static bool planned_as(const char *type, const char *as_gpu, fa_device_props *props,
                       fa_status *st, char *why, size_t why_size)
{
    harness_env saved_type, saved_gpu;
    harness_env_save(&saved_type, "FLASHATTN_OPENCL_DEVICE_TYPE");
    harness_env_save(&saved_gpu, "FLASHATTN_OPENCL_AS_GPU");
    const char *names[2] = {"FLASHATTN_OPENCL_DEVICE_TYPE", "FLASHATTN_OPENCL_AS_GPU"};
    const char *values[2] = {type, as_gpu};
    for (int i = 0; i < 2; i++) {
        if (values[i])
            setenv(names[i], values[i], 1);
        else
            unsetenv(names[i]);
    }
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    *st = fa_context_create(&ctx, &opts, why, why_size);
    harness_env_restore(&saved_gpu);
    harness_env_restore(&saved_type);
    if (*st != OK)
        return false;
    assert_int_equal(fa_context_device_props(ctx, props), OK);
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 97, 97, 64), OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    bool blocked = strstr(fa_plan_explain(plan), "(REG_BLOCKED)") != NULL;
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
    return blocked;
}

/* FLASHATTN_OPENCL_DEVICE_TYPE: "cpu" plans any device with the CPU rules (local memory taken
 * as global memory: the register-blocked forward at 97 rows), which is how the Oclgrind runs
 * reach those kernels; "gpu" with the GPU rules; unset or empty, the device's own type.
 * Anything else refuses the context with INVALID_ARGUMENT naming the variable, and so does the
 * old FLASHATTN_OPENCL_AS_GPU, whatever its value, naming the new one. */
static void test_device_type_override(void **state)
{
    (void)state;
    fa_status st = OK;
    char why[300] = "";
    fa_device_props own, props;
    bool own_blocked = planned_as(NULL, NULL, &own, &st, why, sizeof why);
    assert_int_equal(st, OK);
    assert_true(planned_as("cpu", NULL, &props, &st, why, sizeof why));
    assert_true(!props.gpu && props.local_mem_global);
    assert_int_equal(props.sram_bytes, own.sram_bytes); /* the device's memory, still */
    assert_false(planned_as("gpu", NULL, &props, &st, why, sizeof why));
    assert_true(props.gpu && props.local_mem_global == own.local_mem_global);
    assert_int_equal(planned_as("", NULL, &props, &st, why, sizeof why), own_blocked);
    assert_int_equal(props.gpu, own.gpu);
    const char *bad[] = {"CPU", "1", "cpu ", "accelerator"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(planned_as(bad[i], NULL, &props, &st, why, sizeof why));
        assert_int_equal(st, FA_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(why, "FLASHATTN_OPENCL_DEVICE_TYPE"));
    }
    const char *old[] = {"1", "0"};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
        assert_false(planned_as(i ? "cpu" : NULL, old[i], &props, &st, why, sizeof why));
        assert_int_equal(st, FA_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(why, "FLASHATTN_OPENCL_DEVICE_TYPE=gpu"));
    }
}

/* A one-row GQA decode of a BHSD cache packs (src/packing.c, fa__gqa_pack), also with softcap,
 * ALiBi, a window and sinks, which the kernel applies per packed row (PACKED); not with
 * top-left causal (row 0 sees key 0 only), a bias or dropout (they address the head and row
 * themselves), varlen, several rows or no GQA. The suites' decode cases (tests/cases.c
 * decode_q1*, test_decode, test_modifiers' "decode" cases) check the packed results. */
static void test_gqa_pack_rule(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 2, 32, 8, 1, 4096, 128);
    assert_true(plans_gqa_pack(ctx, &p));
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    p.softcap = 30.0f;
    assert_true(plans_gqa_pack(ctx, &p));
    p.mask = FA_MASK_CAUSAL_TOP_LEFT;
    assert_false(plans_gqa_pack(ctx, &p));
    p.mask = FA_MASK_NONE;
    p.alibi = p.sinks = p.window = 1;
    p.window_left = 128;
    p.window_right = 0;
    assert_true(plans_gqa_pack(ctx, &p));
    p.dropout_p = 0.1f;
    assert_false(plans_gqa_pack(ctx, &p));
    p.dropout_p = 0.0f;
    p.bias = 1;
    p.bias_layout.stride_seq = p.seqlen_k;
    p.bias_layout.stride_head = p.seqlen_k;
    p.bias_layout.stride_batch = p.heads_q * p.seqlen_k;
    assert_false(plans_gqa_pack(ctx, &p));
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 2, 32, 8, 2, 4096, 128);
    assert_false(plans_gqa_pack(ctx, &p));
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 2, 8, 8, 1, 4096, 128);
    assert_false(plans_gqa_pack(ctx, &p));
    fa_context_destroy(ctx);
}

/* The forward plan of p: "heads" if it packs a sequence's query heads (fa__heads_pack), "gqa"
 * if it packs GQA groups, else "none". Heads-packed, the kernels see one head of Hq rows (Br
 * that many, rounded up to a power of two) and a sequence runs one work-group per key chunk. */
static const char *planned_packing(fa_context *ctx, const fa_problem *p)
{
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, p, &plan), OK);
    const char *explain = fa_plan_explain(plan);
    const char *packing = strstr(explain, "heads packing: the") ? "heads"
                          : strstr(explain, "GQA packing") ? "gqa" : "none";
    if (strcmp(packing, "heads") == 0) {
        int32_t br = 1, splits = fa_plan_kv_splits(plan);
        while (br < p->heads_q)
            br *= 2;
        assert_int_equal(fa_plan_block_r(plan), br);
        assert_int_equal(fa_plan_work_groups(plan), p->batch * splits + (splits > 1));
        assert_int_equal(fa_plan_problem(plan)->heads_q, p->heads_q); /* the caller's problem */
    }
    fa_plan_destroy(plan);
    return packing;
}

/* Where local memory is global memory (DIRECT_KV's devices), a one-row decode whose K and V
 * hold a key's heads together (BSHD, a paged pool) packs all its query heads into one tile
 * (src/plan_create.c, heads_together), as long as its work-groups, batch x tiles x key chunks,
 * fill the compute units and there are at most 64 heads; a BHSD cache keeps GQA packing (heads packing
 * measured slower there: docs/benchmarks.md). GPUs never heads-pack. test_decode's paged cases
 * check the results. */
static void test_heads_pack_rule(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = rule_context(&props);
    const char *heads = props.local_mem_global && !props.gpu ? "heads" : "gqa";
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, 32, 8, 1, 32768, 128);
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    assert_string_equal(planned_packing(ctx, &p), heads);
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, 32, 32, 1, 32768, 128); /* no GQA */
    assert_string_equal(planned_packing(ctx, &p), props.local_mem_global && !props.gpu
                                                      ? "heads" : "none");
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 32, 8, 1, 32768, 128);
    assert_string_equal(planned_packing(ctx, &p), "gqa");
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, 128, 8, 1, 32768, 128);
    assert_string_equal(planned_packing(ctx, &p), "gqa"); /* 128 rows: past DIRECT_KV's 64 */
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, 32, 8, 1, 32768, 128);
    p.dropout_p = 0.1f; /* dropout reads the head and row itself: neither packing */
    assert_string_equal(planned_packing(ctx, &p), "none");
    p.dropout_p = 0.0f;
    p.sinks = p.alibi = 1; /* per packed row */
    assert_string_equal(planned_packing(ctx, &p), heads);
    p.sinks = p.alibi = 0;
    /* one work-group for B1 unsplit: idle compute units, so GQA packing instead */
    p.kv_splits = 1;
    assert_string_equal(planned_packing(ctx, &p), props.compute_units > 1 ? "gqa" : heads);
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BSHD, props.compute_units, 32, 8, 1, 32768, 128);
    p.kv_splits = 1; /* a work-group per sequence fills them */
    assert_string_equal(planned_packing(ctx, &p), heads);
    fa_context_destroy(ctx);
}

int main(void)
{
    unsetenv("FLASHATTN_KERNEL_DIR");
    unsetenv("FLASHATTN_BLOCK_R");
    unsetenv("FLASHATTN_BLOCK_C");
    char why[600];
    harness_decision d = harness_decide(FA_BACKEND_OPENCL, why, sizeof why);
    if (d != HARNESS_RUN) {
        printf("%s: %s\n", d == HARNESS_SKIP ? "SKIPPED" : "FAILED", why);
        return harness_exit_code(d == HARNESS_FAIL, 0, 1);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_kv_rule),  cmocka_unit_test(test_f32_tiles_rule),
        cmocka_unit_test(test_cpu_keys_rule),   cmocka_unit_test(test_reg_blocked_rule),
        cmocka_unit_test(test_reg_blocked_backward_rule),
        cmocka_unit_test(test_gqa_pack_rule),
        cmocka_unit_test(test_heads_pack_rule), cmocka_unit_test(test_programs_shared),
        cmocka_unit_test(test_vector_width_override),
        cmocka_unit_test(test_device_type_override),
    };
    return cmocka_run_group_tests_name("opencl_rules", tests, NULL, NULL);
}
