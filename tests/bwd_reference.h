/*
 * bwd_reference.h - the backward pass's reference for test_backward: naive attention and its
 * gradients in fp64, written from the math and sharing no code with the library. It
 * materialises one row of S and P at a time (a direct softmax, not LSE from the forward) and
 * states every shape:
 *   q, dout, o, dq   [batch, heads_q, seqlen_q, head_dim]   dense
 *   k, v, dk, dv     [batch, heads_kv, seqlen_k, head_dim]  dense, one copy per batch even
 *                    where the caller's K/V are broadcast over the batch (stride_batch 0): dK
 *                    and dV then hold each batch's own contribution, as the library writes them
 */
#ifndef FA_TEST_BWD_REFERENCE_H
#define FA_TEST_BWD_REFERENCE_H

#include "flashattn.h"

#include <stdint.h>

typedef struct bwd_ref {
    const double *q, *k, *v, *dout; /* inputs, set by the caller */
    double *o, *dq, *dk, *dv;       /* outputs, allocated by bwd_ref_compute */
    unsigned char *row_empty;       /* [batch, heads_q, seqlen_q]: the row sees no key */
    unsigned char *key_unseen;      /* [batch, heads_kv, seqlen_k]: no row sees the key */
} bwd_ref;

/* O, dQ, dK, dV and the two masks of the problem's shapes, mask and scale (0: 1/sqrt(d) as a
   float, as flashattn.h defines it). Allocation failures abort. */
void bwd_ref_compute(const fa_problem *p, bwd_ref *f);

/* Frees what bwd_ref_compute allocated (not the inputs). */
void bwd_ref_free(bwd_ref *f);

#endif /* FA_TEST_BWD_REFERENCE_H */
