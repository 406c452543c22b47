/*
 * naive_cl_impl.h - what the two OpenCL naive attentions share: the tool's own device objects
 * (struct naive_cl, opened by naive_cl.c) and the helpers that turn OpenCL results into
 * statuses and build programs. naive_cl.c runs the plain kernels on them; naive_blast.c runs
 * CLBlast's GEMM and its own softmax kernel on the same context and queue. Callers use naive.h.
 */
#ifndef FLASHATTN_TOOLS_NAIVE_CL_IMPL_H
#define FLASHATTN_TOOLS_NAIVE_CL_IMPL_H

#include "naive_impl.h"

#include "flashattn_opencl.h"

#include <stddef.h>

#define NAIVE_NDTYPES 3
#define NAIVE_NMASKS 3

struct naive_cl {
    cl_context context;
    cl_device_id device;
    cl_command_queue queue; /* in order: the flash path's fa_context uses it too */
    cl_ulong max_alloc, global_mem;
    cl_program programs[NAIVE_NDTYPES][NAIVE_NMASKS]; /* built on first use */
    cl_program blast_program; /* naive_blast.cl's softmax, built on first use */
};

/* Allocation failures are the caller's OUT_OF_MEMORY; anything else is a device error. */
fa_status naive_cl_status(cl_int err);
/* "naive opencl: CALL failed (error N)" into why, with naive_cl_status(err). */
fa_status naive_cl_fail(cl_int err, const char *call, char *why, size_t why_size);
/* Creates and builds a program from source for the naive_cl's device; on a build failure the
 * build log goes into why (KERNEL_BUILD_ERROR). */
fa_status naive_cl_build(naive_cl *cl, const char *src, size_t len, const char *opts,
                         cl_program *out, char *why, size_t why_size);

/* A read-write buffer of `bytes` (at least one float: OpenCL refuses empty ones), added to
 * *counted; the reason in why when clCreateBuffer fails. */
fa_status naive_cl_buffer(const naive_cl *cl, uint64_t bytes, cl_mem *out, uint64_t *counted,
                          char *why, size_t why_size);
/* Whether the naive buffers of p fit the device's largest allocation and its memory: OK, or
 * the reason (OUT_OF_MEMORY, ...) in why. */
fa_status naive_cl_check_memory(const naive_cl *cl, const naive_problem *p, char *why,
                                size_t why_size);

#endif /* FLASHATTN_TOOLS_NAIVE_CL_IMPL_H */
