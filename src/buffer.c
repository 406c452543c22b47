/*
 * buffer.c - device buffers: created (counted in the context's memory), wrapping host memory on
 * the cpu backend, written and read with bounds checked, destroyed; and fa__buffer_adopt, which
 * every wrap (host, cl_mem, CUDA pointer) ends in, recording where the bytes live.
 */
#include "internal.h"
#include "interop.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------------ */

fa_status fa__buffer_adopt(fa_context *ctx, void *mem, size_t bytes, bool wrapped,
                           fa_buffer **out)
{
    fa_buffer *buf = calloc(1, sizeof *buf);
    if (!buf)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate a buffer handle");
    buf->ctx = ctx;
    buf->mem = mem;
    buf->bytes = bytes;
    buf->wrapped = wrapped;
    buf->space = mem;
    if (ctx->ops->buffer_region)
        ctx->ops->buffer_region(ctx, mem, &buf->space, &buf->addr);
    if (!wrapped)
        fa__mem_add(ctx, bytes);
    *out = buf;
    fa__error_clear(ctx);
    return FA_STATUS_OK;
}

fa_status fa_buffer_create(fa_context *ctx, size_t bytes, fa_buffer **out)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!out)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the output pointer is NULL");
    if (bytes == 0)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "a buffer needs at least one byte");
    void *mem = NULL;
    fa_status st = ctx->ops->buffer_alloc(ctx, bytes, &mem);
    if (st != FA_STATUS_OK)
        return st;
    st = fa__buffer_adopt(ctx, mem, bytes, false, out);
    if (st != FA_STATUS_OK)
        ctx->ops->buffer_free(ctx, mem);
    return st;
}

/* A backend that wraps host memory in its own buffer (OpenCL on a CPU device). */
static fa_status wrap_host_view(fa_context *ctx, void *ptr, size_t bytes, fa_buffer **out)
{
    if (!ptr || !out)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the %s pointer is NULL",
                         !ptr ? "host memory" : "output");
    if (bytes == 0)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "a buffer needs at least one byte");
    void *mem = NULL;
    fa_status st = ctx->ops->buffer_wrap_host(ctx, ptr, bytes, &mem);
    if (st != FA_STATUS_OK)
        return st;
    st = fa__buffer_adopt(ctx, mem, bytes, true, out);
    if (st == FA_STATUS_OK)
        (*out)->host_view = true;
    else
        ctx->ops->buffer_free(ctx, mem);
    return st;
}

fa_status fa_buffer_wrap_host(fa_context *ctx, void *ptr, size_t bytes, fa_buffer **out)
{
    static const fa__wrap_kind host = {FA_BACKEND_CPU, "host memory", "host memory", NULL};
    if (ctx && ctx->ops->buffer_wrap_host)
        return wrap_host_view(ctx, ptr, bytes, out);
    fa_status st = fa__wrap_check(ctx, &host, ptr != NULL, out != NULL, bytes);
    if (st != FA_STATUS_OK)
        return st;
    st = fa__buffer_adopt(ctx, ptr, bytes, true, out);
    if (st == FA_STATUS_OK)
        (*out)->borrowed = true;
    return st;
}

void fa_buffer_destroy(fa_buffer *buf)
{
    if (!buf)
        return;
    if (!buf->borrowed)
        buf->ctx->ops->buffer_free(buf->ctx, buf->mem);
    if (!buf->wrapped)
        fa__mem_sub(buf->ctx, buf->bytes);
    free(buf);
}

size_t fa_buffer_size(const fa_buffer *buf)
{
    return buf ? buf->bytes : 0;
}

static fa_status check_range(const fa_buffer *buf, size_t offset, const void *host, size_t bytes)
{
    if (!buf)
        return FA_STATUS_NULL_POINTER;
    if (!host)
        return fa__error(buf->ctx, FA_STATUS_NULL_POINTER, "the host pointer is NULL");
    if (offset > buf->bytes || bytes > buf->bytes - offset)
        return fa__error(buf->ctx, FA_STATUS_BUFFER_TOO_SMALL,
                         "bytes [%zu, %zu + %zu) are outside the %zu-byte buffer", offset, offset,
                         bytes, buf->bytes);
    return FA_STATUS_OK;
}

fa_status fa_buffer_write(fa_buffer *buf, size_t offset, const void *src, size_t bytes)
{
    fa_status st = check_range(buf, offset, src, bytes);
    if (st != FA_STATUS_OK)
        return st;
    if (bytes > 0)
        st = buf->ctx->ops->buffer_write(buf->ctx, buf->mem, offset, src, bytes);
    if (st == FA_STATUS_OK)
        fa__error_clear(buf->ctx);
    return st;
}

fa_status fa_buffer_read(const fa_buffer *buf, size_t offset, void *dst, size_t bytes)
{
    fa_status st = check_range(buf, offset, dst, bytes);
    if (st != FA_STATUS_OK)
        return st;
    if (bytes > 0)
        st = buf->ctx->ops->buffer_read(buf->ctx, buf->mem, offset, dst, bytes);
    if (st == FA_STATUS_OK)
        fa__error_clear(buf->ctx);
    return st;
}
