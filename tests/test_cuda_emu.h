/*
 * test_cuda_emu.h - what the two files of the emulated CUDA suite share (test_cuda_emu.c: the
 * cases, the forward and the golden; test_cuda_emu_bwd.c: the backward): a case and its
 * modifiers, the modifier cases both directions run, the problem and host tensors of a case,
 * and the backward's tests.
 */
#ifndef FA_TEST_CUDA_EMU_H
#define FA_TEST_CUDA_EMU_H

#include "flashattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OK FA_STATUS_OK

/* The score modifiers and dropout of a case (flashattn.h, "The modifiers, precisely"). */
typedef struct emu_mods {
    float softcap;      /* > 0: on */
    bool alibi;         /* slopes 2^(-8(h+1)/Hq) (per_batch: 2^(-8(i+1)/(B Hq)), i = b Hq + h) */
    bool per_batch;     /* ALiBi slopes [B, Hq] (alibi 2) */
    int bias;           /* 0 off; 1 f32; 2 the storage dtype. [B, Hq, Sq, Sk], rows padded by 3,
                           offset 2 */
    bool bias_bcast;    /* the bias's batch stride 0 */
    bool window;        /* window_left / window_right below */
    int64_t window_left, window_right;
    bool sinks;         /* random in [-1, 2), the last head's -inf (no sink) */
    float dropout_p;    /* > 0: on */
    bool masked_rows;   /* the golden has rows without keys: the case checks them */
    int64_t q_position, k_position, whole_q, whole_k; /* a block of a longer problem */
} emu_mods;

typedef struct emu_case {
    const char *name;
    fa_dtype dtype;
    fa_mask mask;
    fa_layout layout;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int32_t block_r, block_c; /* overrides (0: the planner's), so the plan is a compiled one */
    int64_t pad;              /* > 0: every row stride and offset padded by this many elements */
    bool fold;                /* a 1 x 1 x 1 grid: the kernel's grid-stride loops do the rest */
    bool poison;              /* a NaN in Q and a +inf in K: rows the golden makes NaN */
    const emu_mods *mods;     /* NULL: none */
} emu_case;

/* The modifiers' host tensors of a case: NULL where off. */
typedef struct mod_images {
    float *alibi; /* f32 [Hq], or [B, Hq] */
    void *bias;   /* the problem's bias_layout in its bias_dtype */
    float *sinks; /* f32 [Hq] */
    size_t bias_bytes;
} mod_images;

/* Each modifier alone and all together, on both paths (forward and backward). */
extern const emu_case mod_cases[];
extern const size_t mod_case_count;

/* Elements a tensor of p spans in its layout and dtype (the bias: in its own). */
size_t span(const fa_problem *p, fa_tensor_id tensor);
/* n elements uniform in [-amp, amp] in the case's dtype, seeded by the case and salt. */
void fill_amp(const emu_case *c, void *t, size_t n, const char *salt, double amp);
/* The case's problem: shape, mask, padding of every tensor's rows, modifiers. */
void problem_for(const emu_case *c, fa_problem *p);
/* problem_for's problem with the case's tile overrides, and a planning-only sm_80 context (the
 * caller destroys it) whose plans are the ones the emulator runs. */
fa_context *sm80_planning(const emu_case *c, fa_problem *p);
/* The modifiers' host tensors of a problem (problem_for's), and their release. */
void mods_alloc(const emu_case *c, const fa_problem *p, mod_images *mi);
void mods_free(mod_images *mi);
/* The CPU golden forward on the same host memory: O into o_ref, LSE into lse_ref. */
void run_golden(const fa_problem *p, void *q, void *k, void *v, void *o_ref, float *lse_ref,
                const size_t bytes[4], size_t lse_bytes, const mod_images *mi);

/* test_cuda_emu_bwd.c */
void test_backward_catches_errors(void **state);
void test_backward_cases(void **state);
void test_backward_modifier_cases(void **state);
void test_backward_large_ds(void **state);

#endif /* FA_TEST_CUDA_EMU_H */
