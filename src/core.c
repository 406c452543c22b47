/*
 * core.c - status names and messages, enum names, the version, the context's error message, its
 * memory counters and the kernel-file reader the backends share: the small pieces every other
 * file uses.
 */
#define _POSIX_C_SOURCE 200809L /* open, fstat, read, strerror_r (the XSI one) */

#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The kernel params struct is read by OpenCL C and CUDA as well: its layout must not drift. */
_Static_assert(sizeof(fa_kernel_params) ==
                   16 * 8 + 4 * 8 + 8 * 4 + 16 * 8 + 7 * 8 + 6 * 4 + 12 * 8 + 2 * 4,
               "fa_kernel_params size");
_Static_assert(offsetof(fa_kernel_params, lse_stride_b) == 400, "fa_kernel_params seq block");
_Static_assert(offsetof(fa_kernel_params, splits) == 496, "fa_kernel_params seq ints");
_Static_assert(offsetof(fa_kernel_params, bias_offset) == 320, "fa_kernel_params modifier block");
_Static_assert(offsetof(fa_kernel_params, softcap) == 376, "fa_kernel_params modifier floats");
_Static_assert(offsetof(fa_kernel_params, do_offset) == 192, "fa_kernel_params backward block");
_Static_assert(offsetof(fa_kernel_params, batch) == 128, "fa_kernel_params 64-bit block");
_Static_assert(offsetof(fa_kernel_params, heads_q) == 160, "fa_kernel_params 32-bit block");
_Static_assert(offsetof(fa_kernel_params, scale) == 180, "fa_kernel_params scale offset");

#define FA__STR2(x) #x
#define FA__STR(x) FA__STR2(x)

const char *fa_version(void)
{
    return FA__STR(FLASHATTN_VERSION_MAJOR) "." FA__STR(FLASHATTN_VERSION_MINOR) "." FA__STR(
        FLASHATTN_VERSION_PATCH);
}

const char *fa_status_name(fa_status status)
{
    switch (status) {
#define FA__STATUS_NAME(name, msg)                                                             \
    case FA_STATUS_##name:                                                                     \
        return "FA_STATUS_" #name;
        FA_STATUS_MAP(FA__STATUS_NAME)
#undef FA__STATUS_NAME
    default:
        return "FA_STATUS_UNKNOWN";
    }
}

const char *fa_status_message(fa_status status)
{
    switch (status) {
#define FA__STATUS_MSG(name, msg)                                                              \
    case FA_STATUS_##name:                                                                     \
        return msg;
        FA_STATUS_MAP(FA__STATUS_MSG)
#undef FA__STATUS_MSG
    default:
        return "unknown status code";
    }
}

/* ---- enum names --------------------------------------------------------------------------- */

static bool name_equals(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    }
    return *a == *b;
}

static const char *const backend_names[] = {"auto", "cpu", "opencl", "cuda"};
static const char *const dtype_names[] = {"f32", "f16", "bf16"};
static const char *const mask_names[] = {"none", "top-left", "bottom-right"};

#define FA__COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *name_of(const char *const *names, size_t count, int value)
{
    return value >= 0 && (size_t)value < count ? names[value] : NULL;
}

static fa_status parse_name(const char *const *names, size_t count, const char *name, int *out)
{
    if (!name)
        return FA_STATUS_NULL_POINTER;
    for (size_t i = 0; i < count; i++) {
        if (name_equals(name, names[i])) {
            *out = (int)i;
            return FA_STATUS_OK;
        }
    }
    return FA_STATUS_INVALID_ARGUMENT;
}

const char *fa_backend_name(fa_backend backend)
{
    return name_of(backend_names, FA__COUNT(backend_names), (int)backend);
}

const char *fa_dtype_name(fa_dtype dtype)
{
    return name_of(dtype_names, FA__COUNT(dtype_names), (int)dtype);
}

const char *fa_mask_name(fa_mask mask)
{
    return name_of(mask_names, FA__COUNT(mask_names), (int)mask);
}

fa_status fa_backend_from_name(const char *name, fa_backend *out)
{
    int v = 0;
    if (!out)
        return FA_STATUS_NULL_POINTER;
    fa_status st = parse_name(backend_names, FA__COUNT(backend_names), name, &v);
    if (st == FA_STATUS_OK)
        *out = (fa_backend)v;
    return st;
}

fa_status fa_dtype_from_name(const char *name, fa_dtype *out)
{
    int v = 0;
    if (!out)
        return FA_STATUS_NULL_POINTER;
    fa_status st = parse_name(dtype_names, FA__COUNT(dtype_names), name, &v);
    if (st == FA_STATUS_OK)
        *out = (fa_dtype)v;
    return st;
}

fa_status fa_mask_from_name(const char *name, fa_mask *out)
{
    int v = 0;
    if (!out)
        return FA_STATUS_NULL_POINTER;
    fa_status st = parse_name(mask_names, FA__COUNT(mask_names), name, &v);
    if (st == FA_STATUS_OK)
        *out = (fa_mask)v;
    return st;
}

size_t fa_dtype_size(fa_dtype dtype)
{
    switch (dtype) {
    case FA_DTYPE_F32:
        return 4;
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16:
        return 2;
    default:
        return 0;
    }
}

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

/* ---- memory counters ---------------------------------------------------------------------- */

void fa__mem_add(fa_context *ctx, uint64_t bytes)
{
    ctx->mem_current += bytes;
    if (ctx->mem_current > ctx->mem_peak)
        ctx->mem_peak = ctx->mem_current;
}

void fa__mem_sub(fa_context *ctx, uint64_t bytes)
{
    ctx->mem_current = bytes > ctx->mem_current ? 0 : ctx->mem_current - bytes;
}

void fa_context_memory(const fa_context *ctx, uint64_t *current_bytes, uint64_t *peak_bytes)
{
    if (current_bytes)
        *current_bytes = ctx ? ctx->mem_current : 0;
    if (peak_bytes)
        *peak_bytes = ctx ? ctx->mem_peak : 0;
}

void fa_context_reset_peak(fa_context *ctx)
{
    if (ctx)
        ctx->mem_peak = ctx->mem_current;
}

/* ---- files -------------------------------------------------------------------------------- */

/* What a path that is not a regular file is, for the message. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "a special file";
}

/* errno as text; strerror_r (the XSI one) because strerror may share one buffer among threads. */
static void errno_text(int err, char *dst, size_t size)
{
    if (strerror_r(err, dst, size) != 0)
        fa__format(dst, size, "errno %d", err);
}

/* Reads exactly n bytes (fewer if the file shrank meanwhile); false on a read error. */
static bool read_all(int fd, char *dst, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, dst + *got, n - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return true;
}

/* The checks before reading: a regular, non-empty file within the limit. */
static bool check_file(const char *path, const struct stat *st, size_t max_bytes, char *why,
                       size_t why_size)
{
    if (!S_ISREG(st->st_mode))
        fa__format(why, why_size, "\"%s\" is %s, not a regular file", path,
                   file_kind(st->st_mode));
    else if (st->st_size == 0)
        fa__format(why, why_size, "\"%s\" is empty", path);
    else if ((uintmax_t)st->st_size > max_bytes)
        fa__format(why, why_size, "\"%s\" has %jd bytes, more than the %zu allowed", path,
                   (intmax_t)st->st_size, max_bytes);
    else
        return true;
    return false;
}

char *fa__read_file(const char *path, size_t max_bytes, size_t *len, char *why, size_t why_size)
{
    char err[128] = "";
    /* O_NONBLOCK: opening a FIFO to read would otherwise wait for a writer, forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        errno_text(errno, err, sizeof err);
        fa__format(why, why_size, "cannot open \"%s\": %s", path, err);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *text = NULL;
    size_t got = 0;
    if (check_file(path, &st, max_bytes, why, why_size)) {
        text = malloc((size_t)st.st_size + 1);
        if (!text)
            fa__format(why, why_size, "no memory for the %jd bytes of \"%s\"",
                       (intmax_t)st.st_size, path);
        else if (!read_all(fd, text, (size_t)st.st_size, &got)) {
            errno_text(errno, err, sizeof err);
            fa__format(why, why_size, "cannot read \"%s\": %s", path, err);
            free(text);
            text = NULL;
        }
    }
    close(fd);
    if (text) {
        text[got] = '\0';
        *len = got;
    }
    return text;
}
