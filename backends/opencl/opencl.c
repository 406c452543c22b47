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

/* Caller host memory as a buffer, on a CPU device only: there the cl_mem is the array itself.
 * A GPU would copy it behind the caller's back or read it over the bus: the caller copies
 * with fa_buffer_write instead, where the cost is in sight. */
static fa_status cl_buffer_wrap_host(fa_context *ctx, void *ptr, size_t bytes, void **mem)
{
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    if (!s->host_memory)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "OpenCL device \"%s\" is not a CPU: its memory is not host memory, so "
                         "host arrays are copied (fa_buffer_create, fa_buffer_write)",
                         ctx->props.name);
    cl_int err = CL_SUCCESS;
    cl_mem m = fa__cl.CreateBuffer(s->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes,
                                   ptr, &err);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, "clCreateBuffer(CL_MEM_USE_HOST_PTR)");
    *mem = m;
    return FA_STATUS_OK;
}

/* Maps and unmaps a wrapped host array, OpenCL's way of making the host's writes visible to
 * the device and the device's to the host (on a CPU device it moves nothing); queued in order
 * with the launches, without waiting unless `finish`. */
static fa_status cl_host_view_sync(fa_context *ctx, void *mem, size_t bytes, bool finish)
{
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    cl_int err = CL_SUCCESS;
    void *view = fa__cl.EnqueueMapBuffer(s->queue, (cl_mem)mem, CL_FALSE,
                                         CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, "clEnqueueMapBuffer");
    err = fa__cl.EnqueueUnmapMemObject(s->queue, (cl_mem)mem, view, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, "clEnqueueUnmapMemObject");
    err = finish ? fa__cl.Finish(s->queue) : CL_SUCCESS;
    return err == CL_SUCCESS ? FA_STATUS_OK : fa__cl_fail(ctx, err, "clFinish");
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

/* Finds or builds the launch's program (its -D options are the cache key) and checks what the
 * compiled kernel allows on this device before anything runs. */
static fa_status cl_launch_prepare(fa_context *ctx, const fa_plan *plan,
                                   fa__launch *launch)
{
    (void)plan; /* the plan is final: this only builds and checks */
    fa__cl_state *s = ctx->state;
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
        /* The core re-plans once within this limit (src/plan_create.c); an override stays
         * refused. */
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
     * sinks' gradient (flash_bwd_dsinks); block-sparse lists in the forward and both
     * backward passes (the dK/dV pass walks the transposed lists). */
    .supported_features = {[FA__OP_FORWARD] = FA_FEATURES_ALL | FA_FEATURE_BLOCK_SPARSE,
                           [FA__OP_BACKWARD] = FA_FEATURES_ALL | FA_FEATURE_BLOCK_SPARSE},
    .device_count = cl_device_count,
    .device_props = cl_device_props,
    .plan_rules = fa__cl_plan_rules,
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
    .buffer_wrap_host = cl_buffer_wrap_host,
    .host_view_sync = cl_host_view_sync,
};
