/*
 * cases.h - the shared case table: every attention problem the forward suite runs on every
 * backend, kept as plain data so a benchmark can walk the same table (sizes, FLOPs, bytes).
 * No cmocka here: the table and its helpers depend only on the public API.
 */
#ifndef FA_TEST_CASES_H
#define FA_TEST_CASES_H

#include "flashattn.h"

#include <stddef.h>
#include <stdint.h>

/* How a case lays out its tensors in memory. */
typedef enum case_layout {
    CASE_BHSD = 0,    /* contiguous [batch, heads, seq, head_dim] */
    CASE_BSHD = 1,    /* contiguous [batch, seq, heads, head_dim] (PyTorch / FlashAttention) */
    CASE_PADDED = 2,  /* BHSD with padding after every row, head and batch, nonzero offsets;
                         each tensor pads differently so mixed-up strides are caught */
    CASE_KV_BCAST = 3 /* BHSD, but K and V have stride_batch 0: one K/V shared by all batches */
} case_layout;

typedef struct fa_test_case {
    const char *name;
    fa_dtype dtype;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    fa_mask mask;
    case_layout layout;
    float scale; /* 0: the library default 1/sqrt(head_dim) */
} fa_test_case;

/* The table and its length. */
extern const fa_test_case fa_test_cases[];
extern const size_t fa_test_case_count;

/* Fills a problem (shapes, strides, offsets, mask, scale; no tile overrides) from a case. */
void case_fill_problem(const fa_test_case *c, fa_problem *p);

/*
 * case_fill_problem, plus the backward's tensors: dO and dQ like Q's layout, dK and dV like K's,
 * each with padding of its own in a padded case (so a kernel that uses Q's strides for dQ
 * misses). A broadcast K/V (stride_batch 0) keeps dense dK/dV: a gradient with stride_batch 0
 * would have overlapping rows, which fa_plan_create_backward rejects; the library then writes
 * each batch's contribution to that batch's rows of dK/dV (the caller sums them).
 */
void case_fill_problem_backward(const fa_test_case *c, fa_problem *p);

/* "f16 B2 H8/2 S113x17 D64 bottom-right padded scale 0" into buf. */
void case_describe(const fa_test_case *c, char *buf, size_t size);

/* Nominal FLOPs: 4*B*Hq*Sq*Sk*d, halved for the causal masks. */
double case_flops(const fa_test_case *c);

/* Bytes the forward pass must move at least: Q, K, V read and O written once, in the dtype. */
double case_bytes(const fa_test_case *c);

#endif /* FA_TEST_CASES_H */
