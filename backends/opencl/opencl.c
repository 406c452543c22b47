/*
 * opencl.c - the OpenCL backend's ops table: devices, contexts (a cl_context and an in-order
 * queue), buffers (cl_mem), the kernel's plan rules, per-plan program lookup and the launch.
 * OpenCL 1.2 through the ICD loader, loaded at run time (cl_loader.c: every call goes through
 * the fa__cl table); every call's result is checked and reported through the context's error,
 * never printed.
 */
#include "opencl_internal.h"

#include <stdlib.h>
#include <string.h>

fa_status fa__cl_no_device(fa_context *ctx)
{
    return fa__error(ctx, FA_STATUS_BACKEND_UNAVAILABLE,
                     "OpenCL: this context only plans for the \"%s\" profile; it has no device",
                     ctx->props.arch);
}

static fa_status cl_device_count(int *count, char *why, size_t why_size)
{
    fa__cl_lock();
    fa_status st = fa__cl_find_device(-1, NULL, count, why, why_size);
    fa__cl_unlock();
    return st;
}

static fa_status cl_device_props(int index, fa_device_props *out, char *why, size_t why_size)
{
    cl_device_id device = NULL;
    fa__cl_lock();
    fa_status st = fa__cl_find_device(index, &device, NULL, why, why_size);
    if (st == FA_STATUS_OK)
        st = fa__cl_device_props(device, out, why, why_size);
    fa__cl_unlock();
    return st;
}

/*
 * The backward's kernels (kernels_cl/flash_bwd.cl) hold, in one work-group of the larger pass:
 * dK/dV pass: K^T, V^T of its keys; Q^T, dO^T, Q, dO of a query tile; S^T and dP^T; LSE, D and
 * the key count per query row. dQ pass: Q^T, dO^T; K^T, V^T, K; S and dP. Their union bounds
 * both: 4 row tiles, 3 key tiles, 2 score tiles, 3 floats per row. The dK/dV pass runs one
 * work-item per key, so Bc is capped by the work-group limit as Br is. Bc is capped at 64, not
 * the forward's 128: on pocl (B1 H8 N2048 d64 f32) the backward took 445 ms at Bc 64 and 482 ms
 * at 128, and causal 283 ms against 313 (smaller tiles waste less on the diagonal).
 * On CPUs the dK/dV pass owns Br keys (dkdv_owns_br): with Br raised to 256 rows, owning 64 keys
 * it loaded four 256-row query tiles per 64 keys, and those element-wise copies (two of them
 * transposed) took a third of the pass. Owning 256 keys and streaming 64-row query tiles, the
 * backward took 260 ms against 385 (pocl, B1 H8 N2048 d64 f32; 153 against 215 causal; 275 and
 * 385 ms at Bc 128 and 256). GPUs keep the FlashAttention-2 shape: not measured there.
 */
static void backward_rules(const fa_device_props *dev, fa__plan_rules *rules)
{
    rules->onchip = (fa__onchip_formula){
        .row_tiles = 4, .col_tiles = 3, .score_tiles = 2, .row_floats = 3,
        .what = "Q^T, dO^T, Q, dO; K^T, V^T, K; S and dP; LSE, D, key count per row"};
    rules->max_block_c = 64;
    uint32_t keys = dev->max_work_group_size / (rules->items_per_row > 0 ? rules->items_per_row : 1);
    if (keys < rules->max_block_c)
        rules->max_block_c = keys; /* the dK/dV work-group: Bc keys of items_per_row lanes */
    rules->backward_launches = 3;
    rules->dkdv_owns_br = dev->gpu ? 0 : 1;
}

/*
 * Lanes per row on a GPU. A GPU item has about 256 registers (gfx1030 in wave32, sm_80 255),
 * and one lane per row kept the whole accumulator row of d floats (the backward's dK/dV pass
 * two, dK and dV): spills at d 128 and 256 in the forward, at d 32-128 in the backward
 * (tools/cl_gpu_check.sh). So d / 32 lanes (a power of two dividing d, at most 8) each keep 32
 * floats of a row. The forward's decode (few query rows, Sq = 1) has a work-group of Br = Sq
 * rows, so its lanes grow further, up to 32, until Sq * lanes reaches 32 items (one warp)
 * where d allows.
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
 * On a GPU a compute unit hides memory latency by switching between resident work-groups, and a
 * work-group narrower than a few warps or wavefronts leaves lanes idle. So the tiles get half
 * the local memory (two work-groups resident; where local memory is global memory, as on Mali,
 * it limits no residency and the whole is theirs), and the forward's work-group has at least
 * 64 items, or the device's lockstep width when wider: several lanes per row (gpu_row_lanes),
 * then Br raised and Bc shrunk to fit. The lanes share a row's max and sum through two floats
 * each in local memory. The backward splits its rows (dQ pass) and keys (dK/dV pass) between
 * lanes the same way, without the decode's extra lanes or the floor (its dK/dV work-group is
 * Bc keys); its lanes also divide Br, the dK/dV pass's query tile. CPUs (pocl) keep every rule
 * as it was: one work-group per core, all of the memory, one lane per row.
 */
static void gpu_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                      fa__plan_rules *rules)
{
    if (!dev->local_mem_global) {
        rules->sram_budget = dev->sram_bytes / 2;
        rules->budget_note = "half the local memory, so two work-groups stay resident per "
                             "compute unit";
    }
    if (op == FA__OP_MERGE)
        return;
    rules->items_per_row = gpu_row_lanes(p, op);
    if (rules->items_per_row > rules->tile_multiple)
        rules->tile_multiple = rules->items_per_row; /* Br, Bc above it: multiples of the lanes */
    if (op == FA__OP_BACKWARD) {
        rules->lanes_divide = 2;
        return;
    }
    rules->min_work_group = dev->wg_multiple > 64 ? dev->wg_multiple : 64;
    rules->lanes_divide = 1;
    if (rules->items_per_row > 1) {
        rules->onchip.row_floats = 2 * rules->items_per_row;
        rules->onchip.what = "Q, K, V tiles, the f32 S tile, each lane's row max and sum";
    }
}

/*
 * The kernel runs one work-item per query row (items_per_row 1, so a work-group is Br items)
 * and loads its tiles with the whole work-group. Key loops use float8 when Bc is a multiple
 * of 8, so Br and Bc above 8 are rounded to multiples of 8 (tile_multiple), which also matches
 * GPU SIMD widths. The on-chip budget is exactly the planner's: Q, K, V tiles in the storage
 * type and an S tile of Br x Bc floats in __local memory; O accumulates in private memory.
 * Bc is capped at 128: every work-item sweeps its S row and all of K^T once per tile, and
 * longer sweeps measured slower on pocl (d = 64: 43 GFLOP/s at Bc 64-128, 35 at the paper
 * rule's 512) while Bc 128 already amortizes the tile loads; FlashAttention's CUDA kernels use
 * 64-128 as well. Br is raised towards 256 where it fits (min_block_r): the paper's
 * Br = min(Bc, d) gives small work-groups at small d, and every K/V tile a work-group loads
 * serves Br rows. On pocl (B1 H8 N2048 f32) the forward took 151 ms at Br 256 against 219 at
 * the rule's 64 (d 64), 98 against 176 (d 32, rule 32), 430 against 487 (d 128); the backward
 * 774 against 788 ms (d 64) and 498 against 554 causal. On GPUs with 32-64 KiB of local memory
 * the tiles at the paper's Br already fill it, so nothing changes there. On CPUs a forward with
 * 96 < d <= 128 gets Bc 64 (cpu_forward_keys).
 */

/* Bc for a forward on a CPU device, by measurement on pocl (Intel Xeon, 2 cores, B1 H8 N2048
 * f32, docs/benchmarks.md): Bc 64 where 96 < d <= 128 (d 128: 150 ms at Bc 128, 107 at 64;
 * d 112: 126 and 94; also f16, bf16, causal, N 512 and 4096, 1.35-2x); d 80 and 96 ran the same
 * at either, d 256 faster at 128 (291 against 306 ms), d 32 and 64 the same at 64 and 128, and
 * Bc 32 or 96-120 slower everywhere. Why d 128 pays for 128 keys is not settled (a key tile
 * sweep of 64 KiB per row, past the 48 KiB L1, is one guess d 96 does not confirm). A
 * preference, not a limit of the kernel: an overridden Bc (up to 128) is planned as asked. */
static uint32_t cpu_forward_keys(const fa_problem *p)
{
    return p->head_dim > 96 && p->head_dim <= 128 ? 64 : 128;
}

/*
 * Whether the kernels' local tiles hold f32 for f16 and bf16 storage (TILE_F32): where local
 * memory is global memory (CPUs), so the doubled tiles cost cache, not residency. Each element
 * is then converted once, as its tile is loaded, not at every read (a K or V element is read by
 * every row of the work-group): f16 ran at 0.75x of f32's speed on pocl (B1 H8 N2048 d64,
 * docs/benchmarks.md). GPUs keep tiles in the storage type, half the bytes of a scarce memory.
 */
static bool f32_tiles(const fa_device_props *dev, fa_dtype dtype)
{
    return dev->local_mem_global && !dev->gpu && dtype != FA_DTYPE_F32;
}

/* The longest tile one work-item holds under DIRECT_KV (measured: docs/benchmarks.md). */
#define DIRECT_KV_MAX_ROWS 64

static void cl_plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                          fa__plan_rules *rules)
{
    rules->items_per_row = 1;
    rules->tile_multiple = 8;
    rules->max_block_c = 128;
    rules->max_block_r = 0;
    rules->min_block_r = 256;
    rules->split_kv = 1; /* many compute units: a short grid leaves them idle */
    rules->pow2_clamp = 1; /* each tile size is a program build (about a second on pocl) */
    rules->gqa_pack = 1;   /* a decode's K/V read once per group: 2-5x on pocl (benchmarks.md) */
    if (dev->local_mem_global && !dev->gpu) /* DIRECT_KV's devices (direct_kv) */
        rules->heads_pack_rows = DIRECT_KV_MAX_ROWS;
    if (dev->gpu)
        gpu_rules(dev, p, op, rules);
    else if (op == FA__OP_FORWARD && p->block_c == 0 && cpu_forward_keys(p) < rules->max_block_c) {
        rules->max_block_c = cpu_forward_keys(p);
        rules->max_block_c_why = "the fastest Bc measured on CPUs at 96 < d <= 128";
    }
    if (op == FA__OP_BACKWARD)
        backward_rules(dev, rules);
    if (f32_tiles(dev, p->dtype)) {
        rules->onchip.tile_bytes = 4;
        rules->path_note = "local tiles hold f32 (TILE_F32), converted once as they are "
                           "loaded: local memory is global memory here";
    }
}

/*
 * Release results are not checked: a destroy function returns nothing, and a failed release
 * leaves nothing the library could undo or retry.
 */
static void cl_context_close(void *state)
{
    fa__cl_state *s = state;
    if (!s)
        return;
    fa__cl_programs_release(s);
    fa__cl_lock();
    if (s->queue)
        fa__cl.ReleaseCommandQueue(s->queue);
    if (s->context)
        fa__cl.ReleaseContext(s->context);
    if (s->device)
        fa__cl.ReleaseDevice(s->device); /* balances the retain; a no-op for root devices */
    fa__cl_unlock();
    free(s);
}

/* The device, its cl_context and queue, and its limits; call under fa__cl_lock. */
static fa_status open_locked(fa_context *ctx, fa__cl_state *s, int device)
{
    char why[1024] = "";
    fa_status st = fa__cl_find_device(device, &s->device, NULL, why, sizeof why);
    if (st != FA_STATUS_OK) {
        s->device = NULL;
        return fa__error(ctx, st, "%s", why);
    }
    cl_int err = fa__cl.RetainDevice(s->device);
    if (err != CL_SUCCESS) {
        s->device = NULL;
        return fa__cl_fail(ctx, err, "clRetainDevice");
    }
    s->context = fa__cl.CreateContext(NULL, 1, &s->device, NULL, NULL, &err);
    if (err == CL_SUCCESS)
        s->queue = fa__cl.CreateCommandQueue(s->context, s->device, 0, &err);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, s->context ? "clCreateCommandQueue" : "clCreateContext");
    return fa__cl_state_limits(ctx, s);
}

static fa_status cl_context_open(fa_context *ctx, int device, void **state)
{
    fa__cl_state *s = calloc(1, sizeof *s);
    if (!s)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate the OpenCL state");
    fa__cl_lock();
    fa_status st = open_locked(ctx, s, device);
    fa__cl_unlock();
    if (st != FA_STATUS_OK) {
        cl_context_close(s);
        return st;
    }
    *state = s;
    return FA_STATUS_OK;
}

/* ---- buffers ------------------------------------------------------------------------------ */

/*
 * Drivers may back a buffer only when a command first uses it, and then fail where no status
 * can reach the caller. Zero-filling it at creation makes the allocation real, so a buffer the
 * library hands out is usable, or refused here with OUT_OF_MEMORY. The pattern is the largest
 * power of two up to 128 bytes that divides the size, so the fill runs in wide stores.
 */
static fa_status touch(fa_context *ctx, fa__cl_state *s, cl_mem m, size_t bytes)
{
    static const unsigned char zeros[128];
    size_t pattern = 128;
    while (bytes % pattern != 0)
        pattern /= 2;
    cl_int err = fa__cl.EnqueueFillBuffer(s->queue, m, zeros, pattern, 0, bytes, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = fa__cl.Finish(s->queue);
    if (err == CL_SUCCESS)
        return FA_STATUS_OK;
    bool memory = err == CL_OUT_OF_RESOURCES || fa__cl_status(err) == FA_STATUS_OUT_OF_MEMORY;
    return fa__error(ctx, memory ? FA_STATUS_OUT_OF_MEMORY : FA_STATUS_DEVICE_ERROR,
                     "OpenCL: the device could not back a %zu-byte buffer (clEnqueueFillBuffer "
                     "at creation failed: %s, %d)",
                     bytes, fa__cl_error_name(err), (int)err);
}

static fa_status cl_buffer_alloc(fa_context *ctx, size_t bytes, void **mem)
{
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    if ((cl_ulong)bytes > s->max_alloc)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY,
                         "OpenCL: %zu bytes exceed the device's largest allocation "
                         "(CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu)",
                         bytes, (unsigned long long)s->max_alloc);
    cl_int err = CL_SUCCESS;
    cl_mem m =
        fa__cl.CreateBuffer(s->context, CL_MEM_READ_WRITE | s->alloc_flags, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, "clCreateBuffer");
    fa_status st = s->alloc_flags & CL_MEM_ALLOC_HOST_PTR ? FA_STATUS_OK : touch(ctx, s, m, bytes);
    if (st != FA_STATUS_OK) {
        fa__cl.ReleaseMemObject(m);
        return st;
    }
    *mem = m;
    return FA_STATUS_OK;
}

/* Also frees wrapped buffers: fa_buffer_wrap_opencl retained or sub-allocated them. */
static void cl_buffer_free(fa_context *ctx, void *mem)
{
    (void)ctx;
    if (mem)
        fa__cl.ReleaseMemObject((cl_mem)mem);
}

static fa_status cl_buffer_write(fa_context *ctx, void *mem, size_t offset, const void *src,
                                 size_t bytes)
{
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    cl_int err = fa__cl.EnqueueWriteBuffer(s->queue, (cl_mem)mem, CL_TRUE, offset, bytes, src, 0,
                                           NULL, NULL);
    return err == CL_SUCCESS ? FA_STATUS_OK : fa__cl_fail(ctx, err, "clEnqueueWriteBuffer");
}

static fa_status cl_buffer_read(fa_context *ctx, void *mem, size_t offset, void *dst,
                                size_t bytes)
{
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    cl_int err = fa__cl.EnqueueReadBuffer(s->queue, (cl_mem)mem, CL_TRUE, offset, bytes, dst, 0,
                                          NULL, NULL);
    return err == CL_SUCCESS ? FA_STATUS_OK : fa__cl_fail(ctx, err, "clEnqueueReadBuffer");
}

/*
 * Where a cl_mem's bytes live, for the runs' overlap check: a sub-buffer (what
 * fa_buffer_wrap_opencl makes at an offset) is its parent's bytes from its origin; a buffer over
 * the caller's host memory (CL_MEM_USE_HOST_PTR, its sub-buffers too) is that host memory. A
 * query that fails leaves the buffer its own space: never an overlap reported that is not one.
 */
static void cl_buffer_place(fa_context *ctx, void *mem, const void **space, uint64_t *addr)
{
    (void)ctx;
    cl_mem m = mem, parent = NULL;
    size_t origin = 0;
    cl_mem_flags flags = 0;
    void *host = NULL;
    cl_int err = fa__cl.GetMemObjectInfo(m, CL_MEM_FLAGS, sizeof flags, &flags, NULL);
    if (err == CL_SUCCESS && (flags & CL_MEM_USE_HOST_PTR) &&
        fa__cl.GetMemObjectInfo(m, CL_MEM_HOST_PTR, sizeof host, &host, NULL) == CL_SUCCESS &&
        host) {
        *space = NULL;
        *addr = (uint64_t)(uintptr_t)host;
        return;
    }
    err = fa__cl.GetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    if (err == CL_SUCCESS && parent)
        err = fa__cl.GetMemObjectInfo(m, CL_MEM_OFFSET, sizeof origin, &origin, NULL);
    if (err == CL_SUCCESS && parent) {
        *space = parent;
        *addr = origin;
    }
}

/* ---- plans and the launch ----------------------------------------------------------------- */

static fa_status cl_problem_check(fa_context *ctx, const fa_problem *p)
{
    fa__cl_state *s = ctx->state;
    if (s && !s->compiler)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "OpenCL device \"%s\" has no OpenCL C compiler "
                         "(CL_DEVICE_COMPILER_AVAILABLE is false)",
                         ctx->props.name);
    /* The NDRange's first dimension is about seqlen_q work-items; it must fit a size_t. */
    if ((uint64_t)p->seqlen_q > (uint64_t)(SIZE_MAX / 2))
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "seqlen_q = %lld does not fit this host's OpenCL work sizes",
                         (long long)p->seqlen_q);
    return FA_STATUS_OK;
}

/*
 * Whether flash_fwd reads K and V where they are (DIRECT_KV), one work-item holding the whole
 * query tile, instead of copying each K/V tile into local memory first. Where local memory is
 * global memory the copy buys only the sharing of a tile among a work-group's rows (a CPU's
 * pocl; not a GPU such as Mali, whose work-group of one item would leave its SIMD lanes idle);
 * a short tile (a decode's Br = 1 on a CPU, a GQA group's rows) shares it with few, and a
 * work-item copied and transposed every K/V element to use it once or a few times. One item
 * holding the rows reads each K/V tile from memory once and again from the cache per row.
 * Measured on pocl (docs/benchmarks.md, "Decoding without local tiles"), heads 32/8,
 * bottom-right causal, Sk 8192-32768: 9-20x faster at d 32-128. One work-item, not one per row:
 * pocl 3.1 miscompiled work-groups of 2-16 items reading in place (rows past a varlen
 * sequence's end passed their `row >= sq` exit and wrote past O and LSE).
 */
static int32_t direct_kv(const fa_context *ctx, const fa__kernel_variant *v)
{
    return ctx->props.local_mem_global && !ctx->props.gpu && v->row_lanes == 1 &&
           v->block_r <= DIRECT_KV_MAX_ROWS && v->work_group_size == v->block_r &&
           v->kernel == FA__KERNEL_FWD;
}

/* Finds or builds the launch's program (its -D options are the cache key) and checks what the
 * compiled kernel allows on this device before anything runs. */
static fa_status cl_launch_prepare(fa_context *ctx, fa_plan *plan, fa__launch *launch)
{
    fa__cl_state *s = ctx->state;
    /* float16 where the device prefers it (pocl on AVX-512: 512-bit FMAs, about 10% faster
     * measured, where float8 gave only 256-bit ones); float4 on GPUs, whose items are scalar
     * (the GPU profiles report a preferred width of 1) and whose widest local load is 128 bits:
     * float8 keys left a 48-key S row as 4 + 2 vectors, and the remainder's loop spilled 16-41
     * scalar registers on AMD (tools/cl_gpu_check.sh, f32 d32 64 x 48); otherwise float8. */
    launch->variant.vector_width = ctx->props.gpu ? 4 : s && s->vector_width >= 16 ? 16 : 8;
    launch->variant.gpu = ctx->props.gpu ? 1 : 0; /* GPU-only loop unrolling (flash_fwd.cl) */
    launch->variant.tile_f32 = f32_tiles(&ctx->props, (fa_dtype)launch->variant.dtype);
    launch->variant.direct_kv = direct_kv(ctx, &launch->variant);
    if (launch->variant.head_rows && !launch->variant.direct_kv)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "a heads-packed plan (Br %d) that flash_fwd cannot run in place",
                         (int)launch->variant.block_r);
    if (launch->variant.direct_kv) {
        launch->variant.work_group_size = 1;
        plan->tiles.work_group_size = 1;
        fa__append(plan->explain, sizeof plan->explain,
                   "kernel: flash_fwd reads K and V where they are (DIRECT_KV), one work-item "
                   "per tile of %d row%s: local memory is global memory here, and tiles of at "
                   "most %d rows gain less from sharing a copy than the copy costs\n",
                   (int)launch->variant.block_r, launch->variant.block_r == 1 ? "" : "s",
                   DIRECT_KV_MAX_ROWS);
    }
    if (!s)
        return FA_STATUS_OK; /* planning only: nothing to build for a device that is not here */
    char options[FA__CL_OPTIONS_SIZE];
    fa__cl_build_options(&launch->variant, options, sizeof options);
    fa__cl_program *e = NULL;
    fa_status st = fa__cl_program_get(ctx, s, launch->variant.kernel, options, &e);
    if (st != FA_STATUS_OK)
        return st;
    int32_t wg = launch->variant.work_group_size;
    if (e->kernel_wg < (size_t)wg) {
        /* The core re-plans once within this limit (src/plan.c); an override stays refused. */
        launch->kernel_wg_limit = e->kernel_wg > UINT32_MAX ? UINT32_MAX : (uint32_t)e->kernel_wg;
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "OpenCL: the compiled %s kernel allows %zu work-items per work-group "
                         "on \"%s\", the plan needs %d (CL_KERNEL_WORK_GROUP_SIZE)",
                         fa__kernel_entry(launch->variant.kernel), e->kernel_wg,
                         ctx->props.name, (int)wg);
    }
    if (e->kernel_local > s->local_mem)
        return fa__error(ctx, FA_STATUS_SRAM_TOO_SMALL,
                         "OpenCL: the compiled kernel needs %llu bytes of local memory, \"%s\" "
                         "has %llu",
                         (unsigned long long)e->kernel_local, ctx->props.name,
                         (unsigned long long)s->local_mem);
    launch->backend_data = e;
    return FA_STATUS_OK;
}

static fa_status cl_launch(fa_context *ctx, const fa_plan *plan, const fa__launch *launch,
                           const fa_kernel_params *kp, void *const mem[FA__TENSOR_COUNT])
{
    (void)plan;
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    const fa__cl_program *e = launch->backend_data;
    cl_int err = CL_SUCCESS;
    cl_uint n = (cl_uint)launch->n_args;
    for (cl_uint i = 0; i < n && err == CL_SUCCESS; i++)
        err = fa__cl.SetKernelArg(e->kernel, i, sizeof(cl_mem), &mem[launch->args[i]]);
    if (err == CL_SUCCESS)
        err = fa__cl.SetKernelArg(e->kernel, n, sizeof *kp, kp);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, "clSetKernelArg");
    /* The plan's grid in work-groups; OpenCL counts work-items. */
    size_t wg = (size_t)launch->variant.work_group_size;
    size_t global[3] = {(size_t)launch->grid[0] * wg, (size_t)launch->grid[1],
                        (size_t)launch->grid[2]};
    size_t local[3] = {wg, 1, 1};
    err = fa__cl.EnqueueNDRangeKernel(s->queue, e->kernel, 3, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char call[96];
        fa__format(call, sizeof call, "clEnqueueNDRangeKernel(%s)",
                   fa__kernel_entry(launch->variant.kernel));
        return fa__cl_fail(ctx, err, call);
    }
    /* Runs are synchronous: errors of the run are reported here, and timings are real. */
    err = fa__cl.Finish(s->queue);
    return err == CL_SUCCESS ? FA_STATUS_OK : fa__cl_fail(ctx, err, "clFinish");
}

const fa__backend_ops fa__opencl_ops = {
    .api_version = FA__BACKEND_API_VERSION,
    .backend = FA_BACKEND_OPENCL,
    .supported_ops = (1u << FA__OP_FORWARD) | (1u << FA__OP_BACKWARD) | (1u << FA__OP_MERGE),
    /* kernels_cl/ compiles each modifier in under its FEATURES bit; the backward adds the
     * sinks' gradient (flash_bwd_dsinks). */
    .supported_features = {[FA__OP_FORWARD] = FA_FEATURES_ALL,
                           [FA__OP_BACKWARD] = FA_FEATURES_ALL},
    .device_count = cl_device_count,
    .device_props = cl_device_props,
    .plan_rules = cl_plan_rules,
    .context_open = cl_context_open,
    .context_close = cl_context_close,
    .buffer_alloc = cl_buffer_alloc,
    .buffer_free = cl_buffer_free,
    .buffer_write = cl_buffer_write,
    .buffer_read = cl_buffer_read,
    .problem_check = cl_problem_check,
    .launch_prepare = cl_launch_prepare,
    .launch = cl_launch,
    .arch_props = fa__cl_profile_props,
    .buffer_region = cl_buffer_place,
};
