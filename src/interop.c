/*
 * interop.c - the argument checks of the fa_buffer_wrap_* entry points (interop.h). The CUDA and
 * OpenCL wraps made the same checks with the same messages in two places; a third wrap, or a
 * change to one message, now has one place to go.
 */
#include "interop.h"

fa_status fa__wrap_check(fa_context *ctx, const fa__wrap_kind *kind, bool has_handle,
                         bool has_out, size_t bytes)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (!has_handle || !has_out)
        return fa__error(ctx, FA_STATUS_NULL_POINTER, "the %s pointer is NULL",
                         !has_handle ? kind->handle : "output");
    if (ctx->ops->backend != kind->backend)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "%s can be wrapped only on the %s backend, not %s", kind->plural,
                         fa_backend_name(kind->backend), fa_backend_name(ctx->ops->backend));
    fa_status st = kind->usable ? kind->usable(ctx) : FA_STATUS_OK;
    if (st != FA_STATUS_OK)
        return st;
    if (bytes == 0)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "a buffer needs at least one byte");
    return FA_STATUS_OK;
}
