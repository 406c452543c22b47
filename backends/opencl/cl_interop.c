/*
 * cl_interop.c - the public OpenCL interop entry points (include/flashattn_opencl.h): a context
 * around the caller's cl_context / device / queue, and fa_buffers around the caller's cl_mem.
 * Everything wrapped is retained here and released by the library's destroy functions, so the
 * caller's reference counting stays its own.
 */
#include "flashattn_opencl.h"

#include "opencl_internal.h"
#include "interop.h"

#include <stdlib.h>
#include <string.h>

/* The queue must be an in-order queue of this context and device: the backend relies on
 * in-order execution between its writes, launches and reads. */
static fa_status check_queue(cl_context context, cl_device_id device, cl_command_queue queue,
                             char *why, size_t why_size)
{
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_command_queue_properties props = 0;
    cl_int err = fa__cl.GetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err == CL_SUCCESS)
        err = fa__cl.GetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    if (err == CL_SUCCESS)
        err = fa__cl.GetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    if (err != CL_SUCCESS) {
        fa__format(why, why_size, "the queue is not a valid cl_command_queue "
                   "(clGetCommandQueueInfo returned %s, %d)", fa__cl_error_name(err), (int)err);
        return FA_STATUS_INVALID_ARGUMENT;
    }
    const char *bad = qctx != context ? "the queue belongs to another cl_context"
                      : qdev != device ? "the queue belongs to another device"
                      : (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
                          ? "the queue executes out of order; an in-order queue is needed"
                          : NULL;
    if (bad) {
        fa__format(why, why_size, "%s", bad);
        return FA_STATUS_INVALID_ARGUMENT;
    }
    return FA_STATUS_OK;
}

/* Retains the caller's objects into a new state and reads the device limits. */
static fa_status adopt_state(cl_context context, cl_device_id device, cl_command_queue queue,
                             fa__cl_state **out, char *why, size_t why_size)
{
    fa__cl_state *s = calloc(1, sizeof *s);
    if (!s) {
        fa__format(why, why_size, "cannot allocate the OpenCL state");
        return FA_STATUS_OUT_OF_MEMORY;
    }
    cl_int err = fa__cl.RetainContext(context);
    if (err == CL_SUCCESS) {
        s->context = context;
        err = fa__cl.RetainCommandQueue(queue);
    }
    if (err == CL_SUCCESS) {
        s->queue = queue;
        err = fa__cl.RetainDevice(device);
    }
    if (err == CL_SUCCESS)
        s->device = device;
    /* A scratch context receives the backend's error, as fa_context_create does. */
    fa_context scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.ops = &fa__opencl_ops;
    fa_status st = err == CL_SUCCESS ? fa__cl_state_limits(&scratch, s)
                                     : fa__cl_fail(&scratch, err, "clRetain*");
    if (st != FA_STATUS_OK) {
        fa__format(why, why_size, "%s", fa_context_last_error(&scratch));
        fa__error_clear(&scratch);
        fa__opencl_ops.context_close(s);
        return st;
    }
    *out = s;
    return FA_STATUS_OK;
}

fa_status fa_context_create_opencl(fa_context **out, cl_context context, cl_device_id device,
                                   cl_command_queue queue, char *why, size_t why_size)
{
    fa__format(why, why_size, "%s", "");
    if (!out)
        return FA_STATUS_NULL_POINTER;
    *out = NULL;
    if (!context || !device || !queue) {
        fa__format(why, why_size, "the %s is NULL",
                   !context ? "cl_context" : !device ? "cl_device_id" : "cl_command_queue");
        return FA_STATUS_NULL_POINTER;
    }
    /* The caller links OpenCL itself: the table takes those entry points (cl_loader.c). */
    fa_status st = fa__cl_load(why, why_size);
    if (st == FA_STATUS_OK)
        st = check_queue(context, device, queue, why, why_size);
    fa_device_props props;
    int index = -1;
    fa__cl_lock();
    if (st == FA_STATUS_OK)
        st = fa__cl_device_props(device, &props, why, why_size);
    if (st == FA_STATUS_OK)
        index = fa__cl_device_index(device);
    fa__cl_unlock();
    fa__cl_state *s = NULL;
    if (st == FA_STATUS_OK)
        st = adopt_state(context, device, queue, &s, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    return fa__context_adopt(out, &fa__opencl_ops, index, s, &props, why, why_size);
}

/* The cl_mem a wrap hands to the core: mem itself (retained) or a sub-buffer at the offset. A
 * sub-buffer of a sub-buffer is not allowed in OpenCL 1.2, so one is cut from the parent. */
static fa_status wrap_mem(fa_context *ctx, cl_mem mem, size_t offset, size_t bytes, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    if (offset == 0) {
        err = fa__cl.RetainMemObject(mem);
        *out = mem;
        return err == CL_SUCCESS ? FA_STATUS_OK : fa__cl_fail(ctx, err, "clRetainMemObject");
    }
    cl_mem parent = NULL;
    size_t base = 0;
    err = fa__cl.GetMemObjectInfo(mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    if (err == CL_SUCCESS && parent)
        err = fa__cl.GetMemObjectInfo(mem, CL_MEM_OFFSET, sizeof base, &base, NULL);
    if (err != CL_SUCCESS)
        return fa__cl_fail(ctx, err, "clGetMemObjectInfo");
    cl_buffer_region region = {base + offset, bytes};
    *out = fa__cl.CreateSubBuffer(parent ? parent : mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region,
                                  &err);
    return err == CL_SUCCESS ? FA_STATUS_OK : fa__cl_fail(ctx, err, "clCreateSubBuffer");
}

/* Validates mem against the context: a buffer of the same cl_context, large enough. */
static fa_status check_mem(fa_context *ctx, cl_mem mem, size_t offset, size_t bytes)
{
    fa__cl_state *s = ctx->state;
    if (!s)
        return fa__cl_no_device(ctx);
    cl_context mctx = NULL;
    cl_mem_object_type type = 0;
    size_t size = 0;
    cl_int err = fa__cl.GetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof mctx, &mctx, NULL);
    if (err == CL_SUCCESS)
        err = fa__cl.GetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL);
    if (err == CL_SUCCESS)
        err = fa__cl.GetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS || type != CL_MEM_OBJECT_BUFFER)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "mem is not a valid OpenCL buffer (clGetMemObjectInfo returned %s, %d)",
                         fa__cl_error_name(err), (int)err);
    if (mctx != s->context)
        return fa__error(ctx, FA_STATUS_CONTEXT_MISMATCH,
                         "mem belongs to another cl_context than the fa_context's");
    if (offset > size || bytes > size - offset)
        return fa__error(ctx, FA_STATUS_BUFFER_TOO_SMALL,
                         "bytes [%zu, %zu + %zu) are outside the %zu-byte cl_mem", offset,
                         offset, bytes, size);
    size_t align = s->base_align_bits / 8;
    if (offset % align != 0)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "offset_bytes = %zu is not a multiple of the device's base address "
                         "alignment, %zu bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN = %u bits)",
                         offset, align, (unsigned)s->base_align_bits);
    return FA_STATUS_OK;
}

static const fa__wrap_kind cl_mem_buffers = {FA_BACKEND_OPENCL, "cl_mem", "cl_mem buffers", NULL};

fa_status fa_buffer_wrap_opencl(fa_context *ctx, cl_mem mem, size_t offset_bytes, size_t bytes,
                                fa_buffer **out)
{
    fa_status st = fa__wrap_check(ctx, &cl_mem_buffers, mem != NULL, out != NULL, bytes);
    if (st != FA_STATUS_OK)
        return st;
    st = check_mem(ctx, mem, offset_bytes, bytes);
    cl_mem wrapped = NULL;
    if (st == FA_STATUS_OK)
        st = wrap_mem(ctx, mem, offset_bytes, bytes, &wrapped);
    if (st == FA_STATUS_OK) {
        st = fa__buffer_adopt(ctx, wrapped, bytes, true, out);
        if (st != FA_STATUS_OK)
            fa__cl.ReleaseMemObject(wrapped);
    }
    return st;
}
