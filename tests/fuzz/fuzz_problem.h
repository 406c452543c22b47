/*
 * fuzz_problem.h - what the problem harness's two files share: fuzz_problem.c decodes an input
 * and checks validation, fa_plan_create and fa_forward; fuzz_backward.c checks
 * fa_plan_create_backward and fa_backward on the same decoded problem. The input format and the
 * properties are listed at the top of fuzz_problem.c.
 */
#ifndef FLASHATTN_TESTS_FUZZ_PROBLEM_H
#define FLASHATTN_TESTS_FUZZ_PROBLEM_H

#include "fuzz.h"

#include "flashattn.h"

#include <stddef.h>
#include <stdint.h>

/* Buffers up to this size are allocated exactly; a layout that needs more gets `small` bytes
 * (and so must be rejected). */
#define FZ_MAX_BUFFER ((uint64_t)1 << 20)
/* The forward runs only when batch * heads_q * seqlen_q * seqlen_k * head_dim (an empty
 * sequence counted as 1) is at most this: the cpu backend is scalar, and a fuzzer wants
 * thousands of runs a second. The backward, about twice the work, gets half of it. */
#define FZ_MAX_WORK ((uint64_t)1 << 18)
/* Fill of outputs before the call: 0xffa5 per 16 bits is a NaN in f32, f16 and bf16. */
#define FZ_SENTINEL(i) ((uint8_t)((i) % 2 ? 0xff : 0xa5))

/* One fuzz input, decoded. */
typedef struct fz_case {
    fa_problem p;
    int want_lse, shared_qkv, wrap, sizing;
    int shared_grads; /* dQ, dK and dV in one buffer */
    int amp_exp;
    uint8_t which;
    uint64_t cut, small;
    uint64_t seed;
} fz_case;

enum { FZ_SIZE_EXACT = 0, FZ_SIZE_CUT = 1, FZ_SIZE_SMALL = 2 };

/* One buffer: its memory (wrapped, or a host mirror of a created one) and its handle. */
typedef struct fz_buf {
    uint8_t *host;
    size_t bytes;
    uint64_t need; /* bytes its tensors' layouts span (UINT64_MAX: more than fits) */
    fa_buffer *buf;
} fz_buf;

/* The cpu context every input runs on. */
extern fa_context *fz_ctx;

static inline uint64_t fz_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline uint64_t fz_mul_sat(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* A status with the context's last error as the API documents it. */
void fz_check_status_message(fa_status st, const char *call);
/* Bytes a tensor's layout spans from the start of its buffer; 0 when it has no element. */
uint64_t fz_span_bytes(const fa_tensor_layout *t, const fa_problem *p, int64_t heads,
                       int64_t seq);
/* Sizes b[i] for every slot i with slot_of[i] == i (the others share a slot) per the input's
 * sizing mode, the short one picked by `which` among n; returns whether every slot holds its
 * need. */
int fz_size_slots(const fz_case *c, fz_buf *b, const int *slot_of, int n);
/* Allocates the buffer: outputs get the sentinel, inputs random values in the dtype `fill`
 * (+- 2^amp_exp). */
void fz_make_buffer(const fz_case *c, fz_buf *b, int is_output, fa_dtype fill, uint64_t *rng);
/* Brings a created buffer's contents into its host mirror (a wrapped one is its mirror). */
void fz_fetch(const fz_case *c, fz_buf *b);
/* Every byte still holds the sentinel. */
void fz_untouched(const fz_buf *b, const char *name);
float fz_load_elem(fa_dtype dt, const uint8_t *base, size_t i);
/* The largest |element| of a buffer read in dtype dt. */
float fz_max_abs(const fz_buf *b, fa_dtype dt);
/* Keys query row i may attend to (fa_mask's rule). */
int64_t fz_keys_of_row(const fa_problem *p, int64_t i);
/* Multiply-adds of the forward, saturated; an empty sequence counts as one. */
uint64_t fz_work_of(const fa_problem *p);
/* With FLASHATTN_FUZZ_VERBOSE set, "  what: STATUS last error" on stderr. */
void fz_trace_status(const char *what, fa_status st);

/* fa_plan_create_backward on the case (checked against fa_problem_check's status `checked`),
 * then, when the work is small, fa_backward with O and LSE from fa_forward under `fwd` (NULL
 * when the forward could not be planned). */
void fz_backward(const fz_case *c, fa_status checked, const fa_plan *fwd);

#endif /* FLASHATTN_TESTS_FUZZ_PROBLEM_H */
