/*
 * cuda.c - the CUDA backend's ops table: contexts (the device's primary context, retained, and
 * a stream of our own), buffers (cuMemAlloc), per-launch module lookup with the checks before a
 * launch, and the launch itself. Every driver call goes through the table cuda_loader.c filled
 * with dlsym, and every result is checked and reported through the context's error, never
 * printed. A context with no state is a planning-only context (fa_context_create_planning):
 * plans work, device operations report BACKEND_UNAVAILABLE.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* Largest grid sizes every CUDA device accepts; the kernel loops over what does not fit. */
#define FA_CU_GRID_X_MAX 0x7fffffffULL
#define FA_CU_GRID_YZ_MAX 65535ULL
/* Shared memory (static and dynamic together) a block may use without opting in. */
#define FA_CU_DEFAULT_SHARED (48 * 1024)

static fa_status no_device(fa_context *ctx)
{
    return fa__error(ctx, FA_STATUS_BACKEND_UNAVAILABLE,
                     "CUDA: this context only plans for \"%s\" (--arch); it has no device",
                     ctx->props.arch);
}

fa_status fa__cu_push(fa_context *ctx, fa__cu_state *s)
{
    CUresult err = s->api.CtxPushCurrent(s->context);
    return err == CUDA_SUCCESS ? FA_STATUS_OK : fa__cu_fail(ctx, &s->api, err, "cuCtxPushCurrent");
}

void fa__cu_pop(fa__cu_state *s)
{
    CUcontext popped = NULL;
    s->api.CtxPopCurrent(&popped); /* pops what fa__cu_push pushed; nothing to recover */
}

static void cu_context_close(void *state)
{
    fa__cu_state *s = state;
    if (!s)
        return;
    if (s->context && s->api.CtxPushCurrent(s->context) == CUDA_SUCCESS) {
        fa__cu_modules_release(s);
        if (s->owns_stream && s->stream)
            s->api.StreamDestroy(s->stream);
        fa__cu_pop(s);
    }
    if (s->owns_context && s->context)
        s->api.DevicePrimaryCtxRelease(s->device);
    free(s);
}

fa_status fa__cu_load_nvrtc(fa_context *ctx, fa__cu_state *s)
{
    CUresult err = s->api.DriverGetVersion(&s->driver_version);
    if (err != CUDA_SUCCESS)
        return fa__cu_fail(ctx, &s->api, err, "cuDriverGetVersion");
    s->have_nvrtc = fa__nvrtc_load(&s->nvrtc, s->driver_version, s->nvrtc_why,
                                   sizeof s->nvrtc_why) == FA_STATUS_OK;
    return FA_STATUS_OK;
}

/* Loads the driver, reads the device's props, retains its primary context and makes a stream.
 * On failure the error is in ctx and whatever was made is in s, for cu_context_close. */
static fa_status open_device(fa_context *ctx, fa__cu_state *s, int device)
{
    char why[512] = "";
    fa_device_props props;
    memset(&props, 0, sizeof props);
    fa_status st = fa__cu_load(&s->api, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(ctx, st, "%s", why);
    CUresult err = s->api.DeviceGet(&s->device, device);
    if (err != CUDA_SUCCESS)
        return fa__cu_fail(ctx, &s->api, err, "cuDeviceGet");
    st = fa__cu_props_of(&s->api, s->device, &props, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(ctx, st, "%s", why);
    fa__format(s->arch, sizeof s->arch, "%s", props.arch);
    err = s->api.DevicePrimaryCtxRetain(&s->context, s->device);
    if (err != CUDA_SUCCESS) {
        s->context = NULL;
        return fa__cu_fail(ctx, &s->api, err, "cuDevicePrimaryCtxRetain");
    }
    s->owns_context = 1;
    st = fa__cu_push(ctx, s);
    if (st != FA_STATUS_OK)
        return st;
    err = s->api.StreamCreate(&s->stream, CU_STREAM_DEFAULT);
    fa__cu_pop(s);
    if (err != CUDA_SUCCESS) {
        s->stream = NULL;
        return fa__cu_fail(ctx, &s->api, err, "cuStreamCreate");
    }
    s->owns_stream = 1;
    return FA_STATUS_OK;
}

static fa_status cu_context_open(fa_context *ctx, int device, void **state)
{
    fa__cu_state *s = calloc(1, sizeof *s);
    if (!s)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate the CUDA state");
    fa_status st = open_device(ctx, s, device);
    if (st == FA_STATUS_OK)
        st = fa__cu_load_nvrtc(ctx, s);
    if (st != FA_STATUS_OK) {
        cu_context_close(s);
        return st;
    }
    *state = s;
    return FA_STATUS_OK;
}

/* ---- buffers ------------------------------------------------------------------------------ */

static fa_status cu_buffer_alloc(fa_context *ctx, size_t bytes, void **mem)
{
    fa__cu_state *s = ctx->state;
    if (!s)
        return no_device(ctx);
    fa__cu_mem *m = calloc(1, sizeof *m);
    if (!m)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate a buffer record");
    fa_status st = fa__cu_push(ctx, s);
    if (st == FA_STATUS_OK) {
        CUresult err = s->api.MemAlloc(&m->ptr, bytes);
        fa__cu_pop(s);
        if (err != CUDA_SUCCESS)
            st = fa__cu_fail(ctx, &s->api, err, "cuMemAlloc");
    }
    if (st != FA_STATUS_OK) {
        free(m);
        return st;
    }
    m->owned = 1;
    *mem = m;
    return FA_STATUS_OK;
}

/* Frees memory this context allocated; wrapped caller memory is only forgotten. */
static void cu_buffer_free(fa_context *ctx, void *mem)
{
    fa__cu_state *s = ctx->state;
    fa__cu_mem *m = mem;
    if (!m)
        return;
    if (m->owned && s && fa__cu_push(ctx, s) == FA_STATUS_OK) {
        s->api.MemFree(m->ptr); /* a failure cannot be reported from a destroy */
        fa__cu_pop(s);
    }
    free(m);
}

/* One synchronous copy on the context's stream: host src to the device, or to host dst. */
static fa_status copy(fa_context *ctx, const fa__cu_mem *m, size_t offset, const void *src,
                      void *dst, size_t bytes)
{
    fa__cu_state *s = ctx->state;
    if (!s)
        return no_device(ctx);
    fa_status st = fa__cu_push(ctx, s);
    if (st != FA_STATUS_OK)
        return st;
    CUdeviceptr dev = m->ptr + offset;
    CUresult err = src ? s->api.MemcpyHtoDAsync(dev, src, bytes, s->stream)
                       : s->api.MemcpyDtoHAsync(dst, dev, bytes, s->stream);
    const char *call = src ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync";
    if (err == CUDA_SUCCESS) {
        err = s->api.StreamSynchronize(s->stream);
        call = "cuStreamSynchronize";
    }
    fa__cu_pop(s);
    return err == CUDA_SUCCESS ? FA_STATUS_OK : fa__cu_fail(ctx, &s->api, err, call);
}

static fa_status cu_buffer_write(fa_context *ctx, void *mem, size_t offset, const void *src,
                                 size_t bytes)
{
    return copy(ctx, mem, offset, src, NULL, bytes);
}

static fa_status cu_buffer_read(fa_context *ctx, void *mem, size_t offset, void *dst,
                                size_t bytes)
{
    return copy(ctx, mem, offset, NULL, dst, bytes);
}

/* ---- plans and the launch ----------------------------------------------------------------- */

/* The dynamic shared memory a launch gets: the plan's on-chip bytes, which every kernel of the
 * plan fits in (the backward's two passes share one formula), except flash_bwd_pre, which reads
 * only global memory (asking for none keeps its blocks from being limited by shared memory),
 * flash_bwd_dsinks, whose tree needs one float per thread, and flash_merge, which keeps two
 * floats per row of its tile. */
uint64_t fa__cu_launch_shared(const fa__launch *launch)
{
    switch (launch->variant.kernel) {
    case FA__KERNEL_BWD_PRE:
        return 0;
    case FA__KERNEL_BWD_DSINKS:
        return (uint64_t)launch->variant.work_group_size * sizeof(float);
    case FA__KERNEL_MERGE:
        return 2 * (uint64_t)launch->variant.block_r * sizeof(float);
    default:
        return launch->onchip_bytes;
    }
}

bool fa__cu_needs_optin(uint64_t dynamic_bytes, uint64_t static_bytes)
{
    return dynamic_bytes + static_bytes > FA_CU_DEFAULT_SHARED;
}

/* Check before launch: what the compiled kernel can do, and the shared memory opt-in. */
static fa_status check_module(fa_context *ctx, fa__cu_state *s, fa__cu_module *e,
                              const fa__launch *launch)
{
    int wg = launch->variant.work_group_size;
    uint64_t dyn = fa__cu_launch_shared(launch);
    if (e->max_threads < wg) /* the dK/dV pass's block is the plan's Bc keys */
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "CUDA: the compiled kernel %s allows %d threads per block on \"%s\", "
                         "the plan needs %d (try a smaller %s)",
                         fa__kernel_entry(launch->variant.kernel), e->max_threads,
                         ctx->props.name, wg,
                         launch->variant.kernel == FA__KERNEL_BWD_DKDV ? "block_c" : "block_r");
    if (dyn + (uint64_t)e->static_shared > ctx->props.sram_bytes)
        return fa__error(ctx, FA_STATUS_SRAM_TOO_SMALL,
                         "CUDA: the kernel needs %llu bytes of shared memory, \"%s\" allows %llu "
                         "per block",
                         (unsigned long long)(dyn + (uint64_t)e->static_shared), ctx->props.name,
                         (unsigned long long)ctx->props.sram_bytes);
    if (!fa__cu_needs_optin(dyn, (uint64_t)e->static_shared) || (int)dyn <= e->dyn_shared)
        return FA_STATUS_OK;
    CUresult err =
        s->api.FuncSetAttribute(e->kernel, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)dyn);
    if (err != CUDA_SUCCESS)
        return fa__cu_fail(ctx, &s->api, err,
                           "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    e->dyn_shared = (int)dyn;
    return FA_STATUS_OK;
}

/* Finds or compiles the launch's module (its entry point and -D options are the cache key) and
 * checks it. */
static fa_status cu_launch_prepare(fa_context *ctx, const fa_plan *plan,
                                   fa__launch *launch)
{
    (void)plan;
    fa__cu_state *s = ctx->state;
    if (fa__cu_pipeline_setting() < 0) /* the rules read it as 0: say so rather than guess */
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "FLASHATTN_CUDA_PIPELINE=\"%s\": 0 or 1 (unset or empty: 0)",
                         getenv("FLASHATTN_CUDA_PIPELINE"));
    if (!s)
        return FA_STATUS_OK; /* planning only: nothing to build for a device that is not here */
    char options[256];
    fa__variant_defines(&launch->variant, "-D", options, sizeof options);
    fa_status st = fa__cu_push(ctx, s);
    if (st != FA_STATUS_OK)
        return st;
    fa__cu_module *e = NULL;
    st = fa__cu_module_get(ctx, s, launch->variant.kernel, options, &e);
    if (st == FA_STATUS_OK)
        st = check_module(ctx, s, e, launch);
    fa__cu_pop(s);
    if (st == FA_STATUS_OK)
        launch->backend_data = e;
    return st;
}

static unsigned int grid_dim(uint64_t n, unsigned long long limit)
{
    return (unsigned int)((unsigned long long)n < limit ? (unsigned long long)n : limit);
}

/* Whether no launch with work follows this one in its plan (run.c skips empty grids). */
static bool is_last_launch(const fa_plan *plan, const fa__launch *launch)
{
    for (const fa__launch *l = launch + 1; l < plan->launches + plan->n_launches; l++)
        if (l->grid[0] && l->grid[1] && l->grid[2])
            return false;
    return true;
}

static fa_status cu_launch(fa_context *ctx, const fa_plan *plan, const fa__launch *launch,
                           const fa_kernel_params *kp, void *const mem[FA__TENSOR_COUNT])
{
    fa__cu_state *s = ctx->state;
    const fa__cu_module *e = launch->backend_data;
    if (!s || !e)
        return no_device(ctx);
    CUdeviceptr ptrs[FA__MAX_LAUNCH_ARGS];
    void *args[FA__MAX_LAUNCH_ARGS + 1];
    for (int i = 0; i < launch->n_args; i++) {
        /* A null tensor (the scratch of a run with batch 0, for flash_bwd_dsinks) binds 0. */
        const fa__cu_mem *m = mem[launch->args[i]];
        ptrs[i] = m ? m->ptr : 0;
        args[i] = &ptrs[i];
    }
    fa_kernel_params params = *kp;
    args[launch->n_args] = &params;
    /* Dimensions of the plan's grid past the launch limits are folded into the kernel's
     * grid-stride loops. */
    unsigned int gx = grid_dim(launch->grid[0], FA_CU_GRID_X_MAX);
    unsigned int gy = grid_dim(launch->grid[1], FA_CU_GRID_YZ_MAX);
    unsigned int gz = grid_dim(launch->grid[2], FA_CU_GRID_YZ_MAX);
    fa_status st = fa__cu_push(ctx, s);
    if (st != FA_STATUS_OK)
        return st;
    CUresult err = s->api.LaunchKernel(e->kernel, gx, gy, gz,
                                       (unsigned int)launch->variant.work_group_size, 1, 1,
                                       (unsigned int)fa__cu_launch_shared(launch), s->stream, args,
                                       NULL);
    char call[96];
    fa__format(call, sizeof call, "cuLaunchKernel(%s)", fa__kernel_entry(launch->variant.kernel));
    /* Runs are synchronous, once: after the plan's last launch (the stream orders the ones
     * before), so the run's errors are reported by it and timings are real. */
    if (err == CUDA_SUCCESS && is_last_launch(plan, launch)) {
        err = s->api.StreamSynchronize(s->stream);
        fa__format(call, sizeof call, "cuStreamSynchronize after %s",
                   fa__kernel_entry(launch->variant.kernel));
    }
    fa__cu_pop(s);
    return err == CUDA_SUCCESS ? FA_STATUS_OK : fa__cu_fail(ctx, &s->api, err, call);
}

/* Device pointers share the context's unified address space. */
static void cu_buffer_region(fa_context *ctx, void *mem, const void **space, uint64_t *addr)
{
    (void)ctx;
    *space = NULL;
    *addr = (uint64_t)((const fa__cu_mem *)mem)->ptr;
}

const fa__backend_ops fa__cuda_ops = {
    .api_version = FA__BACKEND_API_VERSION,
    .backend = FA_BACKEND_CUDA,
    .supported_ops = (1u << FA__OP_FORWARD) | (1u << FA__OP_BACKWARD) | (1u << FA__OP_MERGE),
    .device_count = fa__cu_device_count,
    .device_props = fa__cu_device_props,
    .plan_rules = fa__cu_plan_rules,
    .context_open = cu_context_open,
    .context_close = cu_context_close,
    .buffer_alloc = cu_buffer_alloc,
    .buffer_free = cu_buffer_free,
    .buffer_write = cu_buffer_write,
    .buffer_read = cu_buffer_read,
    /* no problem_check: every validated problem runs (grid-stride loops, any dtype) */
    .launch_prepare = cu_launch_prepare,
    .launch = cu_launch,
    .arch_props = fa__cuda_arch_props,
    /* The forward's and the backward's kernels (both paths) run every score modifier, dropout
     * and block-sparse lists; the backward adds flash_bwd_dsinks. */
    .supported_features = {[FA__OP_FORWARD] = FA_FEATURES_ALL | FA_FEATURE_BLOCK_SPARSE,
                           [FA__OP_BACKWARD] = FA_FEATURES_ALL | FA_FEATURE_BLOCK_SPARSE},
    .buffer_region = cu_buffer_region,
};
