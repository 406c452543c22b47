/*
 * flashattn_opencl.h - OpenCL interop for flashattn: run on the caller's cl_context and command
 * queue, and use the caller's cl_mem buffers without copies.
 *
 * Include after (or instead of) <CL/cl.h>. When CL_TARGET_OPENCL_VERSION is not defined yet,
 * this header sets it to 120: the library uses the OpenCL 1.2 API only. These functions exist
 * only in a library built with the OpenCL backend (FLASHATTN_OPENCL).
 */
#ifndef FLASHATTN_OPENCL_H
#define FLASHATTN_OPENCL_H

#include "flashattn.h"

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#if defined(__APPLE__)
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Creates an OpenCL context around the caller's objects: `device` must belong to `context`, and
 * `queue` must be an in-order queue of that context and device. The three objects are retained
 * here and released by fa_context_destroy, so the caller may release its own references at any
 * time. fa_forward enqueues on `queue` and waits for it to finish (clFinish) before returning;
 * buffer reads and writes are blocking.
 * fa_context_device reports the device's index among all OpenCL devices, or -1 when it is not
 * one of them (a sub-device).
 * Returns FA_STATUS_NULL_POINTER, INVALID_ARGUMENT (an invalid object, a queue of another context
 * or device, an out-of-order queue), DEVICE_ERROR or OUT_OF_MEMORY. On failure *out is NULL and the reason is in `why`
 * (when given; truncated to why_size bytes, always NUL-terminated).
 */
FA_API fa_status fa_context_create_opencl(fa_context **out, cl_context context,
                                          cl_device_id device, cl_command_queue queue, char *why,
                                          size_t why_size);

/*
 * Wraps `bytes` of the caller's buffer `mem`, starting `offset_bytes` into it, as an fa_buffer
 * of an OpenCL context, without a copy. The buffer is retained (or, for offset_bytes != 0, a
 * sub-buffer is made) and released by fa_buffer_destroy; it is not counted in
 * fa_context_memory. offset_bytes must be a multiple of the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN
 * (given there in bits) when not 0.
 * Returns FA_STATUS_NULL_POINTER, UNSUPPORTED (not an OpenCL context), INVALID_ARGUMENT (bytes
 * == 0, a misaligned offset, an invalid cl_mem), CONTEXT_MISMATCH (mem belongs to another
 * cl_context), BUFFER_TOO_SMALL (offset_bytes + bytes past the end of mem), DEVICE_ERROR or
 * OUT_OF_MEMORY.
 */
FA_API fa_status fa_buffer_wrap_opencl(fa_context *ctx, cl_mem mem, size_t offset_bytes,
                                       size_t bytes, fa_buffer **out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_OPENCL_H */
