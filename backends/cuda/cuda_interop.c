/*
 * cuda_interop.c - the public CUDA interop entry points (include/flashattn_cuda.h): a context
 * around the caller's CUcontext and stream, and fa_buffers around the caller's device memory.
 * Nothing of the caller's is retained or freed: CUDA has no reference counts to balance, so the
 * header asks the caller to keep both alive.
 */
#include "flashattn_cuda.h"

#include "cuda_internal.h"
#include "interop.h"

#include <stdlib.h>
#include <string.h>

/* Reads the device of `context` and checks that `stream` (when given) belongs to it. */
static fa_status check_handles(fa_context *scratch, fa__cu_state *s, CUcontext context,
                               CUstream stream)
{
    const fa__cu_api *api = &s->api;
    CUresult err = api->CtxPushCurrent(context);
    if (err != CUDA_SUCCESS)
        return fa__error(scratch, FA_STATUS_INVALID_ARGUMENT,
                         "the CUcontext is not valid (cuCtxPushCurrent failed, %d)", (int)err);
    err = api->CtxGetDevice(&s->device);
    CUcontext owner = NULL;
    CUresult serr = stream ? api->StreamGetCtx(stream, &owner) : CUDA_SUCCESS;
    CUcontext popped = NULL;
    api->CtxPopCurrent(&popped);
    if (err != CUDA_SUCCESS)
        return fa__cu_fail(scratch, api, err, "cuCtxGetDevice");
    if (serr != CUDA_SUCCESS)
        return fa__error(scratch, FA_STATUS_INVALID_ARGUMENT,
                         "the CUstream is not valid (cuStreamGetCtx failed, %d)", (int)serr);
    if (stream && owner != context)
        return fa__error(scratch, FA_STATUS_INVALID_ARGUMENT,
                         "the CUstream belongs to another CUcontext");
    return FA_STATUS_OK;
}

/* Builds the state around the caller's handles; errors go to the scratch context. */
static fa_status adopt_state(fa_context *scratch, CUcontext context, CUstream stream,
                             fa__cu_state *s, fa_device_props *props)
{
    char why[512] = "";
    fa_status st = fa__cu_load(&s->api, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(scratch, st, "%s", why);
    st = check_handles(scratch, s, context, stream);
    if (st != FA_STATUS_OK)
        return st;
    st = fa__cu_props_of(&s->api, s->device, props, why, sizeof why);
    if (st != FA_STATUS_OK)
        return fa__error(scratch, st, "%s", why);
    s->context = context;
    s->stream = stream;
    fa__format(s->arch, sizeof s->arch, "%s", props->arch);
    return fa__cu_load_nvrtc(scratch, s);
}

fa_status fa_context_create_cuda(fa_context **out, CUcontext context, CUstream stream,
                                 char *why, size_t why_size)
{
    fa__format(why, why_size, "%s", "");
    if (!out)
        return FA_STATUS_NULL_POINTER;
    *out = NULL;
    if (!context) {
        fa__format(why, why_size, "the CUcontext is NULL");
        return FA_STATUS_NULL_POINTER;
    }
    fa__cu_state *s = calloc(1, sizeof *s);
    if (!s) {
        fa__format(why, why_size, "cannot allocate the CUDA state");
        return FA_STATUS_OUT_OF_MEMORY;
    }
    fa_context scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.ops = &fa__cuda_ops;
    fa_device_props props;
    memset(&props, 0, sizeof props);
    fa_status st = adopt_state(&scratch, context, stream, s, &props);
    if (st != FA_STATUS_OK) {
        fa__format(why, why_size, "%s", fa_context_last_error(&scratch));
        fa__error_clear(&scratch);
        free(s); /* owns nothing yet */
        return st;
    }
    return fa__context_adopt(out, &fa__cuda_ops, (int)s->device, s, &props, why, why_size);
}

/* Checks that [ptr, ptr + bytes) is device memory of the context's CUcontext. */
static fa_status check_memory(fa_context *ctx, fa__cu_state *s, CUdeviceptr ptr, size_t bytes)
{
    CUcontext owner = NULL;
    CUdeviceptr base = 0;
    size_t size = 0;
    fa_status st = fa__cu_push(ctx, s);
    if (st != FA_STATUS_OK)
        return st;
    CUresult err = s->api.PointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, ptr);
    if (err == CUDA_SUCCESS)
        err = s->api.MemGetAddressRange(&base, &size, ptr);
    fa__cu_pop(s);
    if (err != CUDA_SUCCESS) {
        char desc[256];
        fa__cu_describe(&s->api, err, desc, sizeof desc);
        return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                         "ptr is not device memory the CUDA driver knows: %s", desc);
    }
    /* Memory of no particular context (stream-ordered pools, VMM) reports NULL: accepted. */
    if (owner && owner != s->context)
        return fa__error(ctx, FA_STATUS_CONTEXT_MISMATCH,
                         "ptr belongs to another CUcontext than the fa_context's");
    uint64_t room = (uint64_t)(base + size - ptr);
    if ((uint64_t)bytes > room)
        return fa__error(ctx, FA_STATUS_BUFFER_TOO_SMALL,
                         "%zu bytes from ptr run past the end of its allocation (%llu bytes "
                         "left)",
                         bytes, (unsigned long long)room);
    return FA_STATUS_OK;
}

/* A planning-only context has no device to own the memory; a context of fa_context_create runs
 * on a stream of its own, unordered against the streams that produce and consume the caller's
 * memory, so only a context on the caller's stream (fa_context_create_cuda) may use it. */
static fa_status has_device(fa_context *ctx)
{
    const fa__cu_state *s = ctx->state;
    if (!s)
        return fa__error(ctx, FA_STATUS_BACKEND_UNAVAILABLE,
                         "CUDA: this context only plans for \"%s\"; it has no device",
                         ctx->props.arch);
    if (s->owns_stream)
        return fa__error(ctx, FA_STATUS_UNSUPPORTED,
                         "CUDA: caller memory needs a context on the caller's stream "
                         "(fa_context_create_cuda): this one runs on a stream of its own, with "
                         "no ordering against the work that writes or reads that memory");
    return FA_STATUS_OK;
}

static const fa__wrap_kind device_pointers = {FA_BACKEND_CUDA, "device", "device pointers",
                                              has_device};

fa_status fa_buffer_wrap_cuda(fa_context *ctx, CUdeviceptr ptr, size_t bytes, fa_buffer **out)
{
    fa_status st = fa__wrap_check(ctx, &device_pointers, ptr != 0, out != NULL, bytes);
    if (st != FA_STATUS_OK)
        return st;
    fa__cu_state *s = ctx->state;
    st = check_memory(ctx, s, ptr, bytes);
    if (st != FA_STATUS_OK)
        return st;
    fa__cu_mem *m = calloc(1, sizeof *m);
    if (!m)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate a buffer record");
    m->ptr = ptr;
    m->owned = 0;
    st = fa__buffer_adopt(ctx, m, bytes, true, out);
    if (st != FA_STATUS_OK)
        free(m);
    return st;
}
