/*
 * cli_memory.h - the memory budget of the `flashattn` program: how much host memory this process
 * may still use, and a check of what a command is about to allocate against it and against the
 * device's memory, done before any large allocation.
 *
 * Why: with overcommit, calloc of a huge tensor succeeds and the process is killed minutes later
 * while filling it, with no message. Checking the sizes first turns that into a one-line error
 * with the bytes needed and available, in milliseconds.
 */
#ifndef FLASHATTN_TOOLS_CLI_MEMORY_H
#define FLASHATTN_TOOLS_CLI_MEMORY_H

#include "flashattn.h"

#include <stddef.h>
#include <stdint.h>

/* a * b and a + b, saturating at UINT64_MAX: a size past 2^64 is simply "too large". */
uint64_t cli_mul_sat(uint64_t a, uint64_t b);
uint64_t cli_add_sat(uint64_t a, uint64_t b);

/*
 * Bytes of host memory this process may still allocate: MemAvailable from /proc/meminfo, else
 * the physical memory; lowered to the address-space limit (ulimit -v) when one is set. 0 when
 * unknown. *source (when not NULL) names where the figure came from, for messages.
 */
uint64_t cli_host_memory_available(const char **source);

/*
 * Bytes of the device buffer the program makes for a tensor of p: the library's
 * fa_problem_tensor_bytes (the extent fa_run checks, in the tensor's layout and dtype; K and V
 * of a paged problem are its pools), at least 1 since a buffer cannot be empty. 0 when the
 * library refuses the problem: an estimate made before the plan then leaves it out, and the
 * plan says what is wrong.
 */
uint64_t cli_tensor_bytes(const fa_problem *p, fa_tensor_id tensor);

/*
 * The device bytes of a backward run, by tensor: what `plan --backward` prints, and what `run`
 * and `bench` allocate (and check before allocating). Saturating at UINT64_MAX.
 */
typedef struct cli_backward_memory {
    uint64_t q, k, v, o, d_o, dq, dk, dv; /* each tensor's buffer (cli_tensor_bytes) */
    uint64_t lse;                         /* f32 [batch, heads_q, seqlen_q]: 4 bytes a row */
    uint64_t tensors;                     /* the sum of the nine above */
    uint64_t scratch;                     /* fa_plan_scratch_bytes of the backward plan */
    uint64_t peak;                        /* tensors + scratch: the peak device bytes */
} cli_backward_memory;

/* Fills m for problem p with the backward plan's scratch bytes. */
void cli_backward_memory_of(const fa_problem *p, uint64_t scratch, cli_backward_memory *m);

/* What a command is about to allocate. */
typedef struct cli_memory_need {
    uint64_t host;   /* host bytes */
    uint64_t device; /* bytes of the context's device memory (host memory on the cpu backend) */
} cli_memory_need;

/*
 * 0 when the need fits: device bytes within the device's global memory (when the device reports
 * it) and host bytes (plus the device bytes on the cpu backend, whose buffers are host memory)
 * within cli_host_memory_available. Otherwise -1 with a one-line reason in why, e.g.
 * "needs 8 B (..) of host memory, more than the 4 B (..) available (MemAvailable)". ctx may be
 * NULL: then the device bytes are not checked.
 */
int cli_memory_fits(const fa_context *ctx, cli_memory_need need, char *why, size_t why_size);

#endif /* FLASHATTN_TOOLS_CLI_MEMORY_H */
