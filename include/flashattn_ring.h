/*
 * flashattn_ring.h - ring attention: one attention problem whose sequence is split across P
 * ranks (processes, devices), each holding a slice of Q, K, V and O, built on the public API of
 * flashattn.h only (fa_run for partial attention with its LSE, fa_merge to merge by LSE).
 *
 * An optional library (flashattn_ring), built when CMake finds MPI; the core library has no
 * MPI dependency. docs/distributed.md describes the algorithm and how to run it.
 *
 * The ring: for P steps every rank computes its local Q against the K/V block in hand while
 * the next block arrives from the previous rank (non-blocking transfers into two host staging
 * buffers), merging the partial results by LSE in a fixed order (step 0, 1, ... P-1, and within
 * a step the block's chunks in order), so results are bitwise repeatable for a given P and
 * layout. The backward recomputes from the forward's LSE; dK and dV travel with K and V and come
 * home after P steps; dQ stays local; gradient sums are f32 on the host (no atomics).
 *
 * Every function here is collective: all ranks of the transport call it with the same whole
 * problem and options. A rank that fails (bad input, a device error) makes every rank return
 * an error status with that rank's message; transfers wait at most the options' timeout.
 */
#ifndef FLASHATTN_RING_H
#define FLASHATTN_RING_H

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which rows of the whole sequence (length N) a rank holds. */
typedef enum fa_ring_layout {
    FA_RING_CONTIGUOUS = 0, /* rank r holds chunk r of P chunks */
    FA_RING_ZIGZAG = 1      /* rank r holds chunks r and 2P-1-r of 2P chunks, in that order:
                               with a causal mask every rank does the same work */
} fa_ring_layout;

/* "contiguous", "zigzag"; NULL for an unknown value. */
FA_API const char *fa_ring_layout_name(fa_ring_layout layout);
FA_API fa_status fa_ring_layout_from_name(const char *name, fa_ring_layout *out);

/*
 * The rows of a sequence of N rows a rank holds: chunk c of n chunks starts at row
 * 4 * floor(c * ceil(N / 4) / n), capped at N (chunk n - 1 ends at N), so every chunk starts at
 * a multiple of 4 rows (dropout draws its words for 4 keys at once) and chunks differ by at
 * most 4 rows; with N < 4n some chunks (and ranks) have none. Q's rows (and O's, LSE's) are
 * the slice of seqlen_q, K's and V's the slice of seqlen_k, by the same rule. The rank's local
 * tensors hold its chunks one after another (local row i is whole row start[0] + i, then
 * chunk 1's rows follow).
 */
typedef struct fa_ring_slice {
    int chunks;      /* 1 (contiguous) or 2 (zigzag) */
    int64_t start[2]; /* the first whole row of each chunk */
    int64_t len[2];   /* the rows of each chunk (may be 0 when N < 4 * chunks * P) */
    int64_t rows;     /* len[0] + len[1]: the local tensors' sequence length */
} fa_ring_slice;

/* The slice of `rank` of `size` ranks. INVALID_ARGUMENT for size < 1, rank outside [0, size),
 * a negative seqlen or an unknown layout; NULL_POINTER. */
FA_API fa_status fa_ring_slice_of(fa_ring_layout layout, int64_t seqlen, int size, int rank,
                                  fa_ring_slice *out);

/* What a transport's wait says. */
enum { FA_RING_WAIT_DONE = 0, FA_RING_WAIT_TIMEOUT = 1, FA_RING_WAIT_FAILED = -1 };

/*
 * How ranks exchange bytes: non-blocking send and receive that return a request, and a bounded
 * wait on one request. The MPI one is fa_ring_transport_mpi (flashattn_ring_mpi.h); a framework
 * (torch.distributed, NCCL) can supply its own. Host memory only: the ring stages device
 * buffers through the host (fa_buffer_read / fa_buffer_write).
 */
typedef struct fa_ring_transport {
    int rank; /* this rank, in [0, size) */
    int size; /* P */
    void *user;
    /* Starts sending `bytes` of `data` to `peer` with `tag`; data stays valid until the wait.
     * Returns 0 and a request, or nonzero on failure. */
    int (*send)(void *user, int peer, int tag, const void *data, size_t bytes, void **request);
    /* Starts receiving exactly `bytes` from `peer` with `tag` into `data`. 0 or nonzero. */
    int (*recv)(void *user, int peer, int tag, void *data, size_t bytes, void **request);
    /* Waits at most timeout_ms for the request: FA_RING_WAIT_DONE (the request is released),
     * FA_RING_WAIT_TIMEOUT (still pending) or FA_RING_WAIT_FAILED (released). */
    int (*wait)(void *user, void *request, int timeout_ms);
    /* Abandons a pending request after a timeout (its buffer is about to be freed). */
    void (*cancel)(void *user, void *request);
} fa_ring_transport;

/* Times and bytes one collective call measured on this rank (seconds from a monotonic clock). */
typedef struct fa_ring_stats {
    double total_s;   /* the whole call */
    double compute_s; /* partial attention, merges and gradient sums */
    double wait_s;    /* blocked in the steps' transfers (K/V, dK/dV; not the agreement
                         rounds): transfer time not hidden by compute, and any time spent
                         waiting for a slower neighbour */
    double compute_cpu_s; /* CPU time of this process (every thread) during the compute: the
                             work done, whatever else ran on the cores; not the device's time
                             on an accelerator */
    uint64_t bytes_sent;
    int32_t steps; /* P */
    int32_t pairs; /* (query chunk, key chunk) blocks computed; skipped ones not counted */
    int32_t transfers; /* the steps' exchanges with the neighbours (a send and a receive) */
    int32_t transfers_hidden; /* of those, the ones seen complete by a poll between two
                                 blocks of the step's compute: wholly hidden behind it */
} fa_ring_stats;

typedef struct fa_ring_options {
    fa_ring_layout layout;
    fa_layout tensor_layout; /* the local tensors' element layout: FA_LAYOUT_BHSD or BSHD */
    int32_t timeout_ms;      /* the longest wait for one transfer; 0: 30000 */
    fa_ring_stats *stats;    /* filled when not NULL */
} fa_ring_options;

/*
 * The local tensors of one rank, contiguous in options.tensor_layout with its slices' rows
 * (one struct serves both calls: the forward reads q, k, v and writes o and lse, ignoring the
 * others; the backward reads q, k, v, o, lse and d_o and writes dq, dk and dv):
 * q, o, d_o, dq [batch, heads_q, q_rows, head_dim]; k, v, dk, dv [batch, heads_kv, k_rows,
 * head_dim] (BHSD; BSHD swaps heads and rows), in the whole problem's dtype; lse f32
 * [batch, heads_q, q_rows]; q_rows the rows of fa_ring_slice_of(seqlen_q), k_rows of
 * fa_ring_slice_of(seqlen_k). A buffer of 0 bytes may be NULL.
 */
typedef struct fa_ring_tensors {
    const fa_buffer *q, *k, *v;
    fa_buffer *o;   /* forward: written; backward: read */
    fa_buffer *lse; /* forward: written when given; backward: read (required) */
    const fa_buffer *d_o;
    fa_buffer *dq, *dk, *dv;
    const fa_buffer *alibi_slopes; /* f32 [heads_q] on every rank, when whole.alibi */
    const fa_buffer *sinks;        /* f32 [heads_q] on every rank, when whole.sinks */
    fa_buffer *d_sinks;            /* backward, when whole.sinks: f32 [heads_q], the same sum
                                      on every rank */
} fa_ring_tensors;

/*
 * The ring forward: O (and LSE when tensors->lse is given) of this rank's rows of the whole
 * problem `whole` (its seqlen_q and seqlen_k the whole lengths, equal or not: cross-attention
 * splits Q's rows and K's rows each into the layout's chunks, rank r holding the Q and K/V
 * chunks of the same indices; its tensor layouts are not read). Supported: the three masks
 * (both alignments of the whole problem), GQA/MQA, f32/f16/bf16, scale, softcap, the sliding
 * window, ALiBi and dropout, on every length (each block runs at its absolute positions:
 * fa_problem's q_position and k_position, so the masks and dropout's bits are a single
 * device's; rows that see no key end with O = 0 and LSE = -inf, as there); sinks, joined once
 * per row after the ring (a last merge with a part of O = 0 and LSE = sink; the backward's
 * d_sinks summed around the ring in rank order). Bias, varlen and paged K/V: UNSUPPORTED.
 * O is merged in the storage dtype, one rounding per merged block (f32: exact to rounding).
 * Returns FA_STATUS_OK on every rank, or on every rank the status of the lowest failing rank
 * with "rank R: message" in why (truncated to why_size, NUL-terminated; rank R itself gets its
 * message whole, up to 4 KiB, the others its first 247 bytes, marked where cut): NULL_POINTER,
 * INVALID_ARGUMENT (a layout), INVALID_SHAPE, UNSUPPORTED_HEAD_DIM, HEADS_MISMATCH,
 * UNSUPPORTED_DTYPE, INVALID_MASK, UNSUPPORTED, BUFFER_TOO_SMALL (a local buffer), or what a
 * block's fa_plan_create, fa_run or fa_merge returned (DEVICE_ERROR, OUT_OF_MEMORY ...);
 * TRANSPORT_ERROR for a transfer that failed or timed out (then on the ranks that saw it; the
 * others time out in turn). A missing context, transport or tensors struct is NULL_POINTER on
 * that rank alone, which cannot tell the others. Outputs are written only when every rank
 * succeeded.
 */
FA_API fa_status fa_ring_forward(fa_context *ctx, const fa_ring_transport *transport,
                                 const fa_problem *whole, const fa_ring_options *options,
                                 const fa_ring_tensors *tensors, char *why, size_t why_size);

/*
 * The ring backward: dq, dk, dv of this rank's rows from q, k, v, o, lse (the ring forward's)
 * and d_o. Same problem rules and statuses as fa_ring_forward.
 */
FA_API fa_status fa_ring_backward(fa_context *ctx, const fa_ring_transport *transport,
                                  const fa_problem *whole, const fa_ring_options *options,
                                  const fa_ring_tensors *tensors, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_RING_H */
