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
 * The backward (naive_problem.backward) is the textbook one too, from the P the forward left:
 *
 *   dV = P^T dO   dP = dO V^T   dS = P * (dP - rowsum(P * dP))
 *   dQ = scale dS K   dK = scale dS^T Q
 *
 * with dP a second f32 buffer of the size of S/P (dS overwrites it in place); with GQA, dK and
 * dV sum over the query heads of a group. rowsum(P * dP) is rowsum(dO * O), so O is not read.
 *
 * Three implementations behind one interface (naive.c dispatches through naive_impl.h's table):
 *   cpu     naive_cpu.c: a plain C loop over an fa_context of the CPU backend. Q, K, V, O and
 *           S/P are buffers made with fa_buffer_create, so the context's memory counters see the
 *           N^2 bytes; the loop moves one row (or one head of Q/K/V) at a time through small
 *           host scratch.
 *   opencl  naive_cl.c: three small kernels (naive_attn.cl) on a cl_context, device and queue
 *           the caller opens here (naive_cl). fa_context_create_opencl builds the flash path's
 *           fa_context on the same objects, so both paths run on one device and one queue. The
 *           public interop API can wrap a cl_mem as an fa_buffer but cannot hand out the cl_mem
 *           of a buffer made by fa_buffer_create, so the naive OpenCL buffers are made with
 *           clCreateBuffer here and their bytes are counted here (naive_uncounted_bytes) instead
 *           of by the context. Built only with OpenCL; otherwise naive_cl_none.c says so.
 *   clblast naive_blast.c: the same attention as a framework runs it, both matrix products on
 *           CLBlast's tuned SGEMM and a softmax kernel (naive_blast.cl) between them, on the
 *           same naive_cl; f32 forward only. Built only where CMake found CLBlast; otherwise
 *           naive_blast_none.c answers UNSUPPORTED with the reason.
 *
 * Both refuse, with FA_STATUS_OUT_OF_MEMORY and a reason, an S/P buffer above the caller's cap
 * (max_sp_bytes), above the device's limits (or, on cpu, the host memory the caller says is
 * available), or that the allocator refuses.
 *
 * The library (flashattn.h) is the only dependency: host tensors come in and go out as plain
 * f32 arrays, and whatever the caller knows of its own memory comes in the naive_problem.
 */
#ifndef FLASHATTN_TOOLS_NAIVE_H
#define FLASHATTN_TOOLS_NAIVE_H

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
    /* cpu only: host bytes the process may still allocate (0: unknown, no check) and where the
     * figure comes from, for the message. The cpu backend's buffers are host memory: a size
     * over what is available would be granted by overcommit and the process killed later. */
    uint64_t host_available;
    const char *host_source;
    /* Non-zero: also hold dO, dQ, dK, dV and the dP buffer, for naive_backward. The cap
     * max_sp_bytes then applies to each of the two Sq x Sk buffers. */
    int backward;
} naive_problem;

/* An OpenCL device opened by the tool: context, in-order queue, and the naive programs. */
typedef struct naive_cl naive_cl;
/* A naive attention instance: its buffers, on a CPU fa_context or a naive_cl. */
typedef struct naive_attn naive_attn;

/* Bytes of the S/P buffer: 4 * batch * heads_q * seq_q * seq_k, UINT64_MAX when it overflows. */
uint64_t naive_sp_bytes(const naive_problem *p);
/* Bytes of Q, K, V, O and S/P together, and with backward dO, dQ, dK, dV and dP too
 * (UINT64_MAX when it overflows). */
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
/*
 * The tuned-GEMM naive attention (naive_blast.c): S = scale Q K^T and O = P V on CLBlast's
 * strided-batched SGEMM, a softmax kernel (which applies the mask) between them, on the
 * naive_cl's context and queue. f32 forward only: f16, bf16 or a backward problem is
 * FA_STATUS_UNSUPPORTED, and so is every problem when the tool was built without CLBlast
 * (why says so). The instance is used through the calls below like the others.
 */
fa_status naive_create_clblast(naive_attn **out, naive_cl *cl, const naive_problem *p,
                               char *why, size_t why_size);
/*
 * Replaces CLBlast's Xgemm parameters (f32) for the naive_cl's device with "NAME=V,NAME=V,...",
 * e.g. what clblast_tuner_xgemm found on this device: CLBlast needs every parameter of the
 * kernel (GEMMK KREG KWG KWI MDIMA MDIMC MWG NDIMB NDIMC NWG SA SB STRM STRN VWM VWN).
 * INVALID_ARGUMENT with the reason for a malformed list or one CLBlast refuses; UNSUPPORTED
 * when built without CLBlast.
 */
fa_status naive_clblast_tune(naive_cl *cl, const char *params, char *why, size_t why_size);
/* What the CLBlast path runs, one line for reports; NULL when built without CLBlast. */
const char *naive_clblast_info(void);
/*
 * Copies Q [B,Hq,Sq,d], K and V [B,Hkv,Sk,d] in: contiguous f32 values in C order, already
 * rounded to the dtype, of the problem's shapes (a NULL array is allowed where it is empty).
 */
fa_status naive_upload(naive_attn *n, const float *q, const float *k, const float *v, char *why,
                       size_t why_size);
/* One forward pass; returns when it has finished on the device. */
fa_status naive_forward(naive_attn *n, char *why, size_t why_size);
/* Copies O out as contiguous f32 values of Q's shape [B,Hq,Sq,d]. */
fa_status naive_download(naive_attn *n, float *o, char *why, size_t why_size);
/*
 * The backward (instances created with naive_problem.backward only; FA_STATUS_INVALID_ARGUMENT
 * otherwise). naive_upload_do copies dO [B,Hq,Sq,d] in (f32, rounded to the dtype, as
 * naive_upload); naive_backward computes dQ, dK and dV from the P of the last naive_forward and
 * returns when it has finished on the device; naive_download_grads copies them out as f32:
 * dQ of Q's shape, dK and dV of K's.
 */
fa_status naive_upload_do(naive_attn *n, const float *d_o, char *why, size_t why_size);
fa_status naive_backward(naive_attn *n, char *why, size_t why_size);
fa_status naive_download_grads(naive_attn *n, float *dq, float *dk, float *dv, char *why,
                               size_t why_size);
/* Device bytes this instance holds that no fa_context counts (its OpenCL buffers; 0 on cpu). */
uint64_t naive_uncounted_bytes(const naive_attn *n);
/* Releases the buffers. NULL is a no-op. */
void naive_destroy(naive_attn *n);

/* printf into why (when not NULL); returns status. */
fa_status naive_fail(fa_status status, char *why, size_t why_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif /* FLASHATTN_TOOLS_NAIVE_H */
