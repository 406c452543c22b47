/*
 * mod_reference.h - the score modifiers' and dropout's reference for test_modifiers: naive
 * attention in fp64 with softcap, ALiBi, bias, the sliding window, sinks and dropout, forward
 * (O, LSE) and backward (dQ, dK, dV, d_sinks), written from flashattn.h's "The modifiers,
 * precisely" and sharing no code with the library but the f16/bf16 conversions. Its Philox4x32-10
 * is its own, written from Salmon et al. (SC 2011) and checked against Random123's known answers,
 * so the library's keep mask is checked by an independent generator.
 *
 * Shapes (all dense, [b][h][s][x] order, whatever the library's layouts are):
 *   q, dout, o, dq   [batch, heads_q, seqlen_q, head_dim]
 *   k, v, dk, dv     [batch, heads_kv, seqlen_k, head_dim] (dK and dV: each batch's own part,
 *                    as the library writes them where K and V are broadcast over the batch)
 *   bias             [batch, heads_q, seqlen_q, seqlen_k] (the values the library reads)
 *   slopes, sinks    [heads_q] (slopes [batch, heads_q] when problem.alibi is 2)
 *   lse              [batch, heads_q, seqlen_q]
 *   dsinks           [heads_q]
 */
#ifndef FA_TEST_MOD_REFERENCE_H
#define FA_TEST_MOD_REFERENCE_H

#include "flashattn.h"

#include <stdbool.h>
#include <stdint.h>

/* Philox4x32-10 on counter ctr with key (k0, k1); ctr receives the four output words. */
void mod_philox(uint32_t ctr[4], uint32_t k0, uint32_t k1);

/* 1 when dropout keeps element (b, h, i, j) of the problem (dropout_p > 0). */
int mod_keep(const fa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);

/* Kept probabilities' factor: (float)(1 / (1 - p)). */
double mod_dropout_scale(const fa_problem *p);

/* Query row i may attend to key j: the causal mask and the sliding window together. */
bool mod_allowed(const fa_problem *p, int64_t i, int64_t j);

typedef struct mod_ref {
    /* inputs, set by the caller; bias, slopes and sinks NULL when their feature is off, dout
       NULL for the forward only */
    const double *q, *k, *v, *dout, *bias, *slopes, *sinks;
    /* block-sparse (problem.block_sparse): the dense block mask [sparse_batch, sparse_heads,
       q_blocks, k_blocks], nonzero where the block is computed; NULL otherwise */
    const unsigned char *block_mask;
    /* outputs, allocated by mod_ref_compute (the backward's only with dout) */
    double *o, *lse, *dq, *dk, *dv, *dsinks;
    unsigned char *row_empty;  /* [batch, heads_q, seqlen_q]: the row sees no key */
    unsigned char *key_unseen; /* [batch, heads_kv, seqlen_k]: no row sees the key */
} mod_ref;

/* Everything above for the problem's shapes, mask, scale, modifiers and dropout. Allocation
   failures abort. */
void mod_ref_compute(const fa_problem *p, mod_ref *r);

/* Frees what mod_ref_compute allocated (not the inputs). */
void mod_ref_free(mod_ref *r);

#endif /* FA_TEST_MOD_REFERENCE_H */
