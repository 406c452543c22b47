/*
 * ring_case.h - one ring attention case checked against the golden (the cpu backend on the
 * whole problem): shared by the MPI test (tests/ring/test_ring_mpi.c, one process per rank) and
 * the single-process fake ring (tests/ring/test_ring_fake.c, one thread per rank).
 */
#ifndef FA_TEST_RING_CASE_H
#define FA_TEST_RING_CASE_H

#include "flashattn_ring.h"

typedef struct ring_case {
    const char *name;
    fa_ring_layout layout;
    fa_layout tensor_layout;
    fa_mask mask;
    fa_dtype dtype;
    int64_t batch, heads_q, heads_kv, seqlen, head_dim;
    float softcap;
    int backward; /* 1: also the backward against the golden's gradients */
    /* The rules that read positions (off at zero) */
    int window;
    int64_t window_left, window_right;
    int alibi;     /* 1: ALiBi with slopes 0.3 / (h + 1) */
    float dropout; /* dropout_p, a fixed seed and offset */
    int sinks;     /* 1: sinks 0.5 - 0.25 h, head 1's -inf (no sink); d_sinks checked */
    int64_t seqlen_k; /* K's and V's length (cross-attention); 0: seqlen */
} ring_case;

/*
 * Runs the case on this rank: the whole inputs made from a fixed seed (the same on every rank),
 * this rank's slice run through the ring on ctx, its rows compared with the golden's, the
 * forward run twice and compared bitwise. Returns 0 on a pass, 1 on a failure with the reason
 * in msg. Collective: every rank of the transport runs the same case.
 */
int ring_case_run(fa_context *ctx, fa_context *golden, const fa_ring_transport *t,
                  const ring_case *c, char *msg, size_t msg_size);

/* Describes a case in one line ("zigzag bhsd top-left f16 B1 H4/2 N37 D16 bwd"). */
void ring_case_describe(const ring_case *c, char *out, size_t size);

#endif /* FA_TEST_RING_CASE_H */
