/*
 * flashattn_cuda.h - CUDA interop for flashattn: run on the caller's CUcontext and CUstream, and
 * use the caller's device memory (CUdeviceptr) without copies.
 *
 * Include after (or instead of) <cuda.h> from the CUDA Toolkit; the library itself loads the
 * driver (libcuda.so.1) at run time and does not link it. These functions exist only in a
 * library built with the CUDA backend (FLASHATTN_CUDA).
 */
#ifndef FLASHATTN_CUDA_H
#define FLASHATTN_CUDA_H

#include "flashattn.h"

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Creates a CUDA context around the caller's `context` and `stream` (NULL: the context's legacy
 * default stream). The library neither retains nor destroys them: both must stay valid until
 * fa_context_destroy. fa_forward launches on `stream` and waits for it (cuStreamSynchronize)
 * before returning, so work the caller queued on the stream earlier is ordered before it;
 * buffer reads and writes are synchronous copies on the same stream. Each call makes `context`
 * current for its duration and restores the caller's current context afterwards.
 * fa_context_device reports the context's device ordinal.
 * Returns FA_STATUS_NULL_POINTER (out or context is NULL), BACKEND_UNAVAILABLE (no driver can be
 * loaded), INVALID_ARGUMENT (an invalid context, an invalid stream, or a stream of another
 * context), DEVICE_ERROR or OUT_OF_MEMORY. On failure *out is NULL and the reason is in `why`
 * (when given; truncated to why_size bytes, always NUL-terminated).
 */
FA_API fa_status fa_context_create_cuda(fa_context **out, CUcontext context, CUstream stream,
                                        char *why, size_t why_size);

/*
 * Wraps `bytes` of the caller's device memory at `ptr` as an fa_buffer of a CUDA context made
 * by fa_context_create_cuda, without a copy. The context's runs are ordered on its stream, so
 * work queued there before a run (the memory's producer) finishes before the run reads it, and
 * the run has finished when it returns; a context of fa_context_create has a stream of its
 * own, unordered against the caller's, and refuses wrapped memory (UNSUPPORTED). The memory
 * stays the caller's: fa_buffer_destroy forgets it without freeing it, and it must stay
 * allocated until then. It is not counted in fa_context_memory. `ptr` may point anywhere
 * inside an allocation; [ptr, ptr + bytes) must lie inside that allocation.
 * Returns FA_STATUS_NULL_POINTER (ctx, ptr or out is NULL), UNSUPPORTED (not a CUDA context, or
 * one not made by fa_context_create_cuda), BACKEND_UNAVAILABLE (a planning-only context without
 * a device), INVALID_ARGUMENT (bytes == 0, or ptr is not device memory the driver knows),
 * CONTEXT_MISMATCH (the memory belongs to another CUcontext), BUFFER_TOO_SMALL (ptr + bytes
 * past the end of the allocation), DEVICE_ERROR or OUT_OF_MEMORY; the reason is in
 * fa_context_last_error.
 */
FA_API fa_status fa_buffer_wrap_cuda(fa_context *ctx, CUdeviceptr ptr, size_t bytes,
                                     fa_buffer **out);

/*
 * Describes the kernel compiler the CUDA backend would use here, into `info` (truncated to
 * info_size bytes, always NUL-terminated): the driver's CUDA version (cuDriverGetVersion), the
 * NVRTC chosen for it (the newest whose output the driver can load) and whether the driver can
 * JIT that NVRTC's PTX for a GPU newer than it knows, or why no NVRTC suits the driver. The
 * same choice is made at context creation. Returns FA_STATUS_OK, BACKEND_UNAVAILABLE (no
 * driver, or no NVRTC the driver can take: the reason in info), DEVICE_ERROR or NULL_POINTER
 * (info is NULL or info_size is 0).
 */
FA_API fa_status fa_cuda_compiler(char *info, size_t info_size);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_CUDA_H */
