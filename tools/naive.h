/*
 * naive.h - NAIVE attention for `flashattn bench` only. This is a benchmark baseline, NOT part
 * of the library or its API: the textbook attention that materializes the whole score matrix,
 *
 *   S = Q K^T * scale (+ mask)   P = softmax(S) row by row   O = P V
 *
 * in f32, with S/P held in one device buffer of 4 * batch * heads_q * seq_q * seq_k bytes (P
 * overwrites S in place: the least memory a materializing implementation can use, so the memory
 * comparison is, if anything, generous to the naive side).
 *
 * Two implementations with one interface:
 *   cpu     a plain C loop over an fa_context of the CPU backend. Q, K, V, O and S/P are buffers
 *           made with fa_buffer_create, so the context's memory counters see the N^2 bytes; the
 *           loop moves one row (or one head of Q/K/V) at a time through small host scratch.
 *   opencl  three small kernels (tools/naive_attn.cl) on a cl_context, device and queue the tool
 *           owns (naive_cl). fa_context_create_opencl builds the flash path's fa_context on the
 *           same objects, so both paths run on one device and one queue. The public interop API
 *           can wrap a cl_mem as an fa_buffer but cannot hand out the cl_mem of a buffer made by
 *           fa_buffer_create, so the naive OpenCL buffers are made with clCreateBuffer here and
 *           their bytes are counted here (naive_uncounted_bytes) instead of by the context.
 *
 * Both refuse, with FA_STATUS_OUT_OF_MEMORY and a reason, an S/P buffer above the caller's cap
 * (max_sp_bytes), above the device's limits, or that the allocator refuses.
 */
#ifndef FLASHATTN_TOOLS_NAIVE_H
#define FLASHATTN_TOOLS_NAIVE_H

#include "cli_tensor.h"
#include "flashattn.h"

#include <stddef.h>
#include <stdint.h>

/* One naive attention problem; tensors are contiguous [batch, heads, seq, head_dim]. */
typedef struct naive_problem {
    fa_dtype dtype; /* storage of Q, K, V and O; the arithmetic is f32 */
    fa_mask mask;
    int64_t batch, heads_q, heads_kv, seq_q, seq_k, dim;
    float scale;           /* softmax scale, already resolved (not 0) */
    uint64_t max_sp_bytes; /* cap on the S/P buffer; larger gives FA_STATUS_OUT_OF_MEMORY */
} naive_problem;

/* An OpenCL device opened by the tool: context, in-order queue, and the naive programs. */
typedef struct naive_cl naive_cl;
/* A naive attention instance: its buffers, on a CPU fa_context or a naive_cl. */
typedef struct naive_attn naive_attn;

/* Bytes of the S/P buffer: 4 * batch * heads_q * seq_q * seq_k, UINT64_MAX when it overflows. */
uint64_t naive_sp_bytes(const naive_problem *p);
/* Bytes of Q, K, V, O and S/P together (UINT64_MAX when it overflows). */
uint64_t naive_total_bytes(const naive_problem *p);

/*
 * Opens OpenCL device `index` (numbered as the library numbers them: all platforms in order,
 * CL_DEVICE_TYPE_ALL) with its own context and queue. BACKEND_UNAVAILABLE when the tool was
 * built without OpenCL or there is no such platform, DEVICE_NOT_FOUND, DEVICE_ERROR.
 */
fa_status naive_cl_open(naive_cl **out, int index, char *why, size_t why_size);
/* An fa_context of the OpenCL backend on the naive_cl's context, device and queue. */
fa_status naive_cl_fa_context(naive_cl *cl, fa_context **out, char *why, size_t why_size);
/* Releases the tool's references; an fa_context made on it keeps its own. NULL is a no-op. */
void naive_cl_close(naive_cl *cl);

/* Allocates the buffers of a CPU naive attention on ctx (a CPU-backend context). */
fa_status naive_create_cpu(naive_attn **out, fa_context *ctx, const naive_problem *p, char *why,
                           size_t why_size);
/* Allocates the buffers of an OpenCL naive attention and builds its kernels (cached). */
fa_status naive_create_opencl(naive_attn **out, naive_cl *cl, const naive_problem *p, char *why,
                              size_t why_size);
/* Copies Q [B,Hq,Sq,d], K and V [B,Hkv,Sk,d] (f32, already rounded to the dtype) in. */
fa_status naive_upload(naive_attn *n, const cli_tensor *q, const cli_tensor *k,
                       const cli_tensor *v, char *why, size_t why_size);
/* One forward pass; returns when it has finished on the device. */
fa_status naive_forward(naive_attn *n, char *why, size_t why_size);
/* Copies O out into a tensor of Q's shape. */
fa_status naive_download(naive_attn *n, cli_tensor *o, char *why, size_t why_size);
/* Device bytes this instance holds that no fa_context counts (its OpenCL buffers; 0 on cpu). */
uint64_t naive_uncounted_bytes(const naive_attn *n);
/* Releases the buffers. NULL is a no-op. */
void naive_destroy(naive_attn *n);

/* ---- shared by naive.c and naive_cl.c ---------------------------------------------------- */

/* The contiguous BHSD layout of a [batch, heads, seq, dim] tensor. */
fa_tensor_layout naive_layout(int64_t heads, int64_t seq, int64_t dim);
/*
 * Checks the S/P size against the cap and `device_limit` (0: none); OUT_OF_MEMORY with the
 * reason when over either.
 */
fa_status naive_check_size(const naive_problem *p, uint64_t device_limit, const char *limit_name,
                           char *why, size_t why_size);
/* printf into why (when not NULL); returns status. */
fa_status naive_fail(fa_status status, char *why, size_t why_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* The OpenCL half of naive_attn (naive_cl.c); NULL-safe. */
typedef struct naive_cl_attn naive_cl_attn;
fa_status naive_cl_attn_create(naive_cl_attn **out, naive_cl *cl, const naive_problem *p,
                               char *why, size_t why_size);
fa_status naive_cl_attn_upload(naive_cl_attn *a, const void *q, const void *k, const void *v,
                               char *why, size_t why_size);
fa_status naive_cl_attn_forward(naive_cl_attn *a, char *why, size_t why_size);
fa_status naive_cl_attn_download(naive_cl_attn *a, void *o, char *why, size_t why_size);
uint64_t naive_cl_attn_bytes(const naive_cl_attn *a);
void naive_cl_attn_destroy(naive_cl_attn *a);

#endif /* FLASHATTN_TOOLS_NAIVE_H */
