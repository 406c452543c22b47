/*
 * oracle.h - reference attention that lives only in the tests: a naive fp64 implementation (the
 * oracle every backend is compared with) and a naive implementation at the storage precision,
 * whose error against the oracle sets the f16/bf16 tolerance.
 *
 * Both read Q, K, V as arrays of doubles addressed exactly like the library's buffers
 * (offset + b*stride_batch + h*stride_head + s*stride_seq + x, from the problem's layouts), so
 * the oracle sees the same rounded inputs as the backend. Both write dense outputs:
 *   O   [batch, heads_q, seqlen_q, head_dim]
 *   LSE [batch, heads_q, seqlen_q]          (natural log; -inf for a row with no key)
 */
#ifndef FA_TEST_ORACLE_H
#define FA_TEST_ORACLE_H

#include "flashattn.h"

#include <stdint.h>

/* Element idx of a buffer stored in dtype, widened to double. */
double oracle_load(fa_dtype dtype, const void *base, int64_t idx);
/* Stores x at element idx, rounded to the dtype (through f32, as the library converts). */
void oracle_store(fa_dtype dtype, void *base, int64_t idx, double x);
/* x rounded to the dtype's precision and widened back: what storing it would keep. */
double oracle_round(fa_dtype dtype, double x);

/* The softmax scale a problem resolves to, as the library documents it (a float). */
float oracle_scale(const fa_problem *p);
/* Query row i may attend to keys 0 .. n-1; returns n (both causal masks allow a prefix). */
int64_t oracle_keys_allowed(const fa_problem *p, int64_t i);

/* Naive attention in fp64: scores, softmax and P V all in double. */
void oracle_attention_f64(const fa_problem *p, const double *q, const double *k,
                          const double *v, double *o, double *lse);

/*
 * The same naive algorithm computed in float32 with the scores S, the unnormalised
 * probabilities P = exp(S - max) and the final O each rounded to the problem's dtype: the error
 * a straightforward implementation at that precision makes.
 */
void oracle_attention_lowp(const fa_problem *p, const double *q, const double *k,
                           const double *v, double *o, double *lse);

#endif /* FA_TEST_ORACLE_H */
