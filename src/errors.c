/*
 * errors.c - the context's last error: a status with a message (fa__error, or a long text such
 * as a build log), kept on the heap with a fixed fallback so a failure never reads as success,
 * and the bounded string helpers every message is written with.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ----------------------------------------------------------------------------- */

void fa__format(char *dst, size_t size, const char *fmt, ...)
{
    if (!dst || size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, size, fmt, ap);
    va_end(ap);
}

void fa__append(char *dst, size_t size, const char *fmt, ...)
{
    if (!dst || size == 0)
        return;
    size_t used = strlen(dst);
    if (used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + used, size - used, fmt, ap);
    va_end(ap);
}

/* Replaces the last message with msg (heap, owned from now on). A failure whose message cannot
 * be allocated (msg NULL, status not OK) still reports its code and generic message. */
static void set_message(fa_context *ctx, fa_status status, char *msg)
{
    free(ctx->error);
    ctx->error = msg;
    ctx->error_fallback[0] = '\0';
    if (!msg && status != FA_STATUS_OK)
        snprintf(ctx->error_fallback, sizeof ctx->error_fallback, "%s: %s",
                 fa_status_name(status), fa_status_message(status));
}

fa_status fa__error_text(fa_context *ctx, fa_status status, const char *text)
{
    if (!ctx)
        return status;
    const char *name = fa_status_name(status);
    size_t n = strlen(name) + strlen(text) + 3;
    char *msg = malloc(n);
    if (msg)
        snprintf(msg, n, "%s: %s", name, text);
    set_message(ctx, status, msg);
    return status;
}

fa_status fa__error(fa_context *ctx, fa_status status, const char *fmt, ...)
{
    if (!ctx)
        return status;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return fa__error_text(ctx, status, text);
}

void fa__error_clear(fa_context *ctx)
{
    if (ctx)
        set_message(ctx, FA_STATUS_OK, NULL);
}

const char *fa_context_last_error(const fa_context *ctx)
{
    if (!ctx)
        return "FA_STATUS_NULL_POINTER: the context is NULL";
    return ctx->error ? ctx->error : ctx->error_fallback;
}
