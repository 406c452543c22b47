/*
 * status.c - the names and messages of the status codes (one X-macro list, flashattn.h), the
 * names of the enums (backends, dtypes, masks) both ways, dtype sizes, and the version.
 */
#include "internal.h"

#include <ctype.h>
#include <string.h>

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
