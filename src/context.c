/*
 * context.c - devices and contexts: enumerating each backend's devices, FA_BACKEND_AUTO's
 * choice (and the note saying why), opening and closing a context, its settings, and the
 * memory counters of what it allocates. Each entry point checks its arguments completely
 * before a backend is called, and a rejected call changes nothing.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- devices ------------------------------------------------------------------------------ */

static const fa__backend_ops *ops_or_reason(fa_backend backend, char *why, size_t why_size,
                                            fa_status *st)
{
    if (fa_backend_name(backend) == NULL || backend == FA_BACKEND_AUTO) {
        fa__format(why, why_size, "backend %d is not a device backend (cpu, opencl, cuda)",
                   (int)backend);
        *st = FA_STATUS_INVALID_ARGUMENT;
        return NULL;
    }
    const fa__backend_ops *ops = fa__backend_ops_get(backend);
    if (!ops) {
        fa__format(why, why_size, "the %s backend is not built into this library",
                   fa_backend_name(backend));
        *st = FA_STATUS_BACKEND_UNAVAILABLE;
    }
    return ops;
}

fa_status fa_backend_device_count(fa_backend backend, int *count, char *why, size_t why_size)
{
    fa__format(why, why_size, "%s", "");
    if (!count)
        return FA_STATUS_NULL_POINTER;
    *count = 0;
    fa_status st = FA_STATUS_OK;
    const fa__backend_ops *ops = ops_or_reason(backend, why, why_size, &st);
    return ops ? ops->device_count(count, why, why_size) : st;
}

fa_status fa_backend_device_props(fa_backend backend, int index, fa_device_props *out, char *why,
                                  size_t why_size)
{
    fa__format(why, why_size, "%s", "");
    if (!out)
        return FA_STATUS_NULL_POINTER;
    fa_status st = FA_STATUS_OK;
    const fa__backend_ops *ops = ops_or_reason(backend, why, why_size, &st);
    if (!ops)
        return st;
    /* Checked here, once for every backend; each backend checks the upper end it knows. */
    if (index < 0) {
        fa__format(why, why_size, "no %s device %d: device indices start at 0",
                   fa_backend_name(backend), index);
        return FA_STATUS_DEVICE_NOT_FOUND;
    }
    fa_device_props props;
    memset(&props, 0, sizeof props);
    st = ops->device_props(index, &props, why, why_size);
    if (st == FA_STATUS_OK)
        *out = props;
    return st;
}

/* ---- context ------------------------------------------------------------------------------ */

/* Reads FLASHATTN_BACKEND / FLASHATTN_DEVICE for an AUTO context. */
static fa_status resolve_env(fa_backend *backend, int *device, char *why, size_t why_size)
{
    const char *b = getenv("FLASHATTN_BACKEND");
    if (b && *b && fa_backend_from_name(b, backend) != FA_STATUS_OK) {
        fa__format(why, why_size, "FLASHATTN_BACKEND = \"%s\" is not auto, cpu, opencl or cuda",
                   b);
        return FA_STATUS_INVALID_ARGUMENT;
    }
    const char *d = getenv("FLASHATTN_DEVICE");
    if (d && *d) {
        char *end = NULL;
        errno = 0;
        long v = strtol(d, &end, 10);
        if (errno || *end || v < 0 || v > 1000000) {
            fa__format(why, why_size, "FLASHATTN_DEVICE = \"%s\" is not a device index", d);
            return FA_STATUS_INVALID_ARGUMENT;
        }
        *device = (int)v;
    }
    return FA_STATUS_OK;
}

/*
 * AUTO without an environment choice: the first backend with a device, fastest first. Each
 * backend passed over goes into note with its status and reason, so the context can say why it
 * runs where it does (an OpenCL driver that failed to start is not silent).
 */
static fa_backend pick_backend(char *note, size_t note_size)
{
    fa_backend picked = FA_BACKEND_CPU; /* the golden is always built in and has its device */
    fa__format(note, note_size, "auto: ");
    for (int i = 0; i < fa_backend_count(); i++) {
        fa_backend b = fa_backend_at(i);
        int n = 0;
        char why[512] = "";
        fa_status st = fa_backend_device_count(b, &n, why, sizeof why);
        if (st == FA_STATUS_OK && n > 0) {
            picked = b;
            break;
        }
        fa__append(note, note_size, "%s skipped (%s: %s); ", fa_backend_name(b),
                   fa_status_name(st), why[0] ? why : "no device");
    }
    fa__append(note, note_size, "picked %s", fa_backend_name(picked));
    return picked;
}

/*
 * AUTO's device within the picked backend when FLASHATTN_DEVICE names none: the first GPU in
 * the backend's order, else its first device whose properties can be read. An OpenCL
 * installation often lists a CPU runtime (pocl, Intel's) before the GPU; taking index 0 would
 * run there. Devices whose properties fail (unavailable) are passed over. The note says why
 * when the choice is not simply device 0.
 */
int fa__auto_device(const fa__backend_ops *ops, char *note, size_t note_size)
{
    int n = 0, first = -1, gpu = -1;
    char why[256] = "", skipped[512] = "";
    if (ops->device_count(&n, why, sizeof why) != FA_STATUS_OK)
        return 0; /* opening device 0 reports the reason */
    for (int i = 0; i < n && gpu < 0; i++) {
        fa_device_props props;
        memset(&props, 0, sizeof props);
        fa_status st = ops->device_props(i, &props, why, sizeof why);
        if (st != FA_STATUS_OK) {
            fa__append(skipped, sizeof skipped, "; device %d skipped (%s: %s)", i,
                       fa_status_name(st), why);
            continue;
        }
        if (props.gpu)
            gpu = i;
        if (first < 0)
            first = i;
    }
    int pick = gpu >= 0 ? gpu : first >= 0 ? first : 0;
    if (pick == 0 && !skipped[0])
        return 0;
    fa__append(note, note_size, "%s", skipped);
    if (gpu >= 0)
        fa__append(note, note_size, "; device %d, the first GPU", gpu);
    else if (first >= 0)
        fa__append(note, note_size, "; device %d, the first usable device (no GPU)", first);
    return pick;
}

fa_status fa__context_adopt(fa_context **out, const fa__backend_ops *ops, int device, void *state,
                            const fa_device_props *props, char *why, size_t why_size)
{
    fa_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        ops->context_close(state);
        fa__format(why, why_size, "cannot allocate a context");
        return FA_STATUS_OUT_OF_MEMORY;
    }
    ctx->ops = ops;
    ctx->state = state;
    ctx->device = device;
    ctx->props = *props;
    *out = ctx;
    return FA_STATUS_OK;
}

fa_status fa_context_create(fa_context **out, const fa_context_options *opts, char *why,
                            size_t why_size)
{
    fa__format(why, why_size, "%s", "");
    if (!out)
        return FA_STATUS_NULL_POINTER;
    *out = NULL;
    fa_backend backend = opts ? opts->backend : FA_BACKEND_AUTO;
    int device = opts ? opts->device : 0;
    fa_status st = FA_STATUS_OK;
    if (device < 0) {
        fa__format(why, why_size, "device index %d is negative", device);
        return FA_STATUS_INVALID_ARGUMENT;
    }
    char note[FA__BACKEND_NOTE_SIZE] = "";
    bool auto_device = false;
    if (backend == FA_BACKEND_AUTO) {
        int env_device = -1;
        st = resolve_env(&backend, &env_device, why, why_size);
        if (st != FA_STATUS_OK)
            return st;
        /* Device 0 under AUTO is "the backend's choice"; another index is taken as given. */
        auto_device = env_device < 0 && device == 0;
        if (env_device >= 0)
            device = env_device;
        if (backend == FA_BACKEND_AUTO)
            backend = pick_backend(note, sizeof note);
        else
            fa__format(note, sizeof note, "auto: FLASHATTN_BACKEND = %s", fa_backend_name(backend));
    }
    const fa__backend_ops *ops = ops_or_reason(backend, why, why_size, &st);
    if (!ops)
        return st;
    if (auto_device)
        device = fa__auto_device(ops, note, sizeof note);
    fa_device_props props;
    memset(&props, 0, sizeof props);
    st = ops->device_props(device, &props, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    /* A scratch context receives the backend's error while the device opens. */
    fa_context scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.ops = ops;
    void *state = NULL;
    st = ops->context_open(&scratch, device, &state);
    if (st != FA_STATUS_OK) {
        fa__format(why, why_size, "%s", fa_context_last_error(&scratch));
        fa__error_clear(&scratch);
        return st;
    }
    st = fa__context_adopt(out, ops, device, state, &props, why, why_size);
    if (st == FA_STATUS_OK)
        fa__format((*out)->backend_note, sizeof (*out)->backend_note, "%s", note);
    return st;
}

fa_status fa_context_create_planning(fa_context **out, fa_backend backend, const char *arch,
                                     char *why, size_t why_size)
{
    fa__format(why, why_size, "%s", "");
    if (!out)
        return FA_STATUS_NULL_POINTER;
    *out = NULL;
    if (!arch) {
        fa__format(why, why_size, "the architecture is NULL");
        return FA_STATUS_NULL_POINTER;
    }
    fa_status st = FA_STATUS_OK;
    const fa__backend_ops *ops = ops_or_reason(backend, why, why_size, &st);
    if (!ops)
        return st;
    if (!ops->arch_props) {
        fa__format(why, why_size, "the %s backend knows no architectures to plan for",
                   fa_backend_name(backend));
        return FA_STATUS_UNSUPPORTED;
    }
    fa_device_props props;
    memset(&props, 0, sizeof props);
    st = ops->arch_props(arch, &props, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    /* No backend state: every device operation of this context reports that it has no device. */
    return fa__context_adopt(out, ops, -1, NULL, &props, why, why_size);
}

void fa_context_destroy(fa_context *ctx)
{
    if (!ctx)
        return;
    fa_context_release_scratch(ctx);
    ctx->ops->context_close(ctx->state);
    free(ctx->error);
    free(ctx);
}

void fa_context_release_scratch(fa_context *ctx)
{
    if (!ctx || !ctx->scratch)
        return;
    ctx->ops->buffer_free(ctx, ctx->scratch);
    fa__mem_sub(ctx, ctx->scratch_bytes);
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
}

fa_status fa_context_set_check_sequences(fa_context *ctx, int on)
{
    if (!ctx)
        return FA_STATUS_NULL_POINTER;
    if (on != 0 && on != 1)
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT, "on = %d is not 0 or 1", on);
    ctx->check_sequences = on == 1;
    fa__error_clear(ctx);
    return FA_STATUS_OK;
}

fa_backend fa_context_backend(const fa_context *ctx)
{
    return ctx ? ctx->ops->backend : FA_BACKEND_AUTO;
}

const char *fa_context_backend_note(const fa_context *ctx)
{
    return ctx ? ctx->backend_note : "";
}

int fa_context_device(const fa_context *ctx)
{
    return ctx ? ctx->device : -1;
}

fa_status fa_context_device_props(const fa_context *ctx, fa_device_props *out)
{
    if (!ctx || !out)
        return FA_STATUS_NULL_POINTER;
    *out = ctx->props;
    return FA_STATUS_OK;
}

/* ---- memory counters ---------------------------------------------------------------------- */

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
