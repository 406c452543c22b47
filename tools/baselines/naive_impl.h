/*
 * naive_impl.h - the contract between the naive baseline's dispatch (naive.c) and its two
 * implementations (naive_cpu.c, naive_cl.c): the table of operations each fills in, the base
 * of every instance, and the sizes, limits and conversions they share. Callers use naive.h.
 *
 * Each implementation knows only this header and naive.c's helpers; neither calls the other,
 * and naive.c reaches them only through the table (and the two create functions the caller
 * picks from).
 */
#ifndef FLASHATTN_TOOLS_NAIVE_IMPL_H
#define FLASHATTN_TOOLS_NAIVE_IMPL_H

#include "naive.h"

#include <stddef.h>
#include <stdint.h>

/*
 * One implementation's operations. The images are the tensors' device bytes: contiguous BHSD
 * in the problem's storage dtype (naive.c converts from and to the caller's f32 arrays).
 */
typedef struct naive_ops {
    /* Copies the Q [B,Hq,Sq,d], K and V [B,Hkv,Sk,d] images into the instance's buffers. */
    fa_status (*upload)(naive_attn *n, const void *q, const void *k, const void *v, char *why,
                        size_t why_size);
    /* One forward pass; returns when it has finished on the device. */
    fa_status (*forward)(naive_attn *n, char *why, size_t why_size);
    /* Copies the O [B,Hq,Sq,d] image out. */
    fa_status (*download)(naive_attn *n, void *o, char *why, size_t why_size);
    /* Optional (NULL: 0): device bytes the instance holds that no fa_context counts. */
    uint64_t (*uncounted_bytes)(const naive_attn *n);
    /* Releases everything the instance holds, the instance included; never given NULL. */
    void (*destroy)(naive_attn *n);
    /* The backward, called only on instances made with naive_problem.backward (naive.c checks).
     * Copies the dO [B,Hq,Sq,d] image in. */
    fa_status (*upload_do)(naive_attn *n, const void *d_o, char *why, size_t why_size);
    /* dQ, dK, dV from the P of the last forward; returns when finished on the device. */
    fa_status (*backward)(naive_attn *n, char *why, size_t why_size);
    /* Copies the dQ [B,Hq,Sq,d], dK and dV [B,Hkv,Sk,d] images out. */
    fa_status (*download_grads)(naive_attn *n, void *dq, void *dk, void *dv, char *why,
                                size_t why_size);
} naive_ops;

/* The first member of every implementation's instance, so a naive_attn * converts to it. */
struct naive_attn {
    const naive_ops *ops;
    naive_problem p;
};

/*
 * A zeroed instance of `size` bytes (an implementation's struct, whose first member is the
 * naive_attn) with its table and problem set; NULL, with "out of host memory" in why, when
 * malloc fails.
 */
naive_attn *naive_alloc(size_t size, const naive_ops *ops, const naive_problem *p, char *why,
                        size_t why_size);
/* Elements of Q (and O), and of K (and V); UINT64_MAX when the count overflows. */
uint64_t naive_q_elems(const naive_problem *p);
uint64_t naive_kv_elems(const naive_problem *p);
/*
 * Checks the S/P size against the cap and `device_limit` (0: none); OUT_OF_MEMORY with the
 * reason when over either.
 */
fa_status naive_check_size(const naive_problem *p, uint64_t device_limit, const char *limit_name,
                           char *why, size_t why_size);
/* Converts `count` values between f32 and the storage dtype. */
void naive_to_f32(const void *src, fa_dtype dtype, size_t count, float *dst);
void naive_from_f32(const float *src, fa_dtype dtype, size_t count, void *dst);

#endif /* FLASHATTN_TOOLS_NAIVE_IMPL_H */
