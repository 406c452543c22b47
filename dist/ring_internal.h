/*
 * ring_internal.h - what the ring's files share: one collective call's state (the transport,
 * the first error known on this rank, the stats), the message header that carries an error
 * around the ring, and the helpers for slices, layouts and host conversions.
 */
#ifndef FLASHATTN_RING_INTERNAL_H
#define FLASHATTN_RING_INTERNAL_H

#include "flashattn_ring.h"

#include <stddef.h>
#include <stdint.h>

/* Message tags: K/V blocks, dK/dV accumulators, agreement rounds. */
enum { RING_TAG_KV = 1, RING_TAG_DKV = 2, RING_TAG_AGREE = 3, RING_TAG_SINKS = 4 };

#define RING_MSG_BYTES 248
/* This rank's own failure, whole (an OpenCL build log runs to kilobytes): its why gets all of
 * it, the other ranks' the RING_MSG_BYTES the header carries. */
#define RING_WHOLE_BYTES 4096
#define RING_DEFAULT_TIMEOUT_MS 30000

/* The head of every message: the sender's view of the first failure (status OK: none). */
typedef struct ring_header {
    int32_t status; /* fa_status */
    int32_t origin; /* the rank that failed first (lowest rank on a tie); -1: none */
    char msg[RING_MSG_BYTES];
} ring_header;

/* One collective call on this rank. */
typedef struct ring_run {
    const fa_ring_transport *t;
    int timeout_ms;
    ring_header err; /* the first failure known here */
    char whole[RING_WHOLE_BYTES]; /* this rank's failure untruncated ("" when none) */
    int broken;      /* a transfer failed or timed out: no further transfer is started */
    fa_ring_stats st;
    double started;
} ring_run;

double ring_now(void);
/* CPU seconds this process has used (all threads). */
double ring_cpu_now(void);
void ring_run_init(ring_run *run, const fa_ring_transport *t, const fa_ring_options *opts);
/* ring_run_init, then the arguments no rank can be told about checked: false (the failure
 * recorded, for ring_finish) when the context, the transport or the tensors are unusable. */
int ring_run_start(ring_run *run, fa_context *ctx, const fa_ring_transport *t,
                   const fa_ring_options *opts, const void *tensors);
/* Records a failure of this rank (the first one wins). Returns status. */
fa_status ring_fail(ring_run *run, fa_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Adopts a peer's failure when it is known first or comes from a lower rank. */
void ring_adopt(ring_run *run, const ring_header *h);
/* Records a library call's failure with the context's message. Returns st. */
fa_status ring_lib_fail(ring_run *run, fa_context *ctx, fa_status st, const char *what);
/* fa_buffer_create, a failure recorded. */
fa_status ring_buffer(ring_run *run, fa_context *ctx, uint64_t bytes, fa_buffer **out,
                      const char *what);
/* Whether this rank knows of any failure. */
int ring_failed(const ring_run *run);
/* The call's result: the status, the message in why, the stats copied out. */
fa_status ring_finish(ring_run *run, const fa_ring_options *opts, char *why, size_t why_size);

/* A pending exchange with the ring's neighbours: send to rank + 1, receive from rank - 1. */
typedef struct ring_xfer {
    void *send_req, *recv_req;
    void *recv_buf;
    int started, received; /* started; the receive seen complete (by a poll or the wait) */
} ring_xfer;

/* Starts sending send_buf (a ring_header then the payload) to the next rank and receiving
 * recv_bytes from the previous one; the header's error fields are set from run first. */
void ring_xfer_start(ring_run *run, ring_xfer *x, int tag, void *send_buf, size_t send_bytes,
                     void *recv_buf, size_t recv_bytes);
/* Waits for both (bounded), adopts the received header's failure; counts the exchange, and
 * whether polls during the compute had already seen it complete. */
void ring_xfer_finish(ring_run *run, ring_xfer *x);
/* Between two blocks of a step's compute: tests the pending requests of x (NULL: none) without
 * waiting, so MPI progresses a transfer that needs this rank's calls (a rendezvous). */
void ring_xfer_poll(ring_run *run, ring_xfer *x);
/* Every rank ends with the same failure (or none): P - 1 rounds around the ring. */
void ring_agree(ring_run *run);

/* The whole problem's checks shared by forward and backward (UNSUPPORTED features ...). */
fa_status ring_check_whole(ring_run *run, const fa_problem *whole, const fa_ring_options *o);
/* Contiguous local layout of `rows` rows, starting at local row `first`. */
fa_tensor_layout ring_layout(fa_layout kind, int64_t heads, int64_t rows, int64_t head_dim,
                             int64_t first);
/* Elements of a local tensor of `rows` rows. */
uint64_t ring_elems(int64_t batch, int64_t heads, int64_t rows, int64_t head_dim);
/* The slice of rank `rank` of a sequence of `seqlen` rows: the whole problem's seqlen_q for Q,
 * O, LSE, dO, dQ; its seqlen_k for K, V, dK, dV (checked by ring_check_whole: cannot fail). */
fa_ring_slice ring_slice(const fa_ring_options *o, int64_t seqlen, int size, int rank);
/* Storage dtype <-> f32 on the host. */
void ring_to_f32(fa_dtype dtype, const void *src, float *dst, uint64_t n);
void ring_from_f32(fa_dtype dtype, const float *src, void *dst, uint64_t n);
/* Checks one local buffer: given when required, at least `bytes` long. */
fa_status ring_check_buffer(ring_run *run, const fa_buffer *b, const char *name, uint64_t bytes);

/* How a query chunk (rows [q_start, + q_len) of the whole problem) meets a key chunk (keys
 * [k_start, + k_len)), from the whole problem's mask, its alignment and the window. */
typedef enum ring_pair { RING_PAIR_SKIP, RING_PAIR_FULL, RING_PAIR_MASKED } ring_pair;
/* SKIP: an empty chunk, or no row sees any key of the chunk (the causal mask and the window
 * together); FULL: the causal mask leaves every row every key (run without it; the window,
 * if any, still applies at the block's positions); MASKED: some keys are masked for some
 * rows (run with the causal mask at the block's positions, or its local equivalent). */
ring_pair ring_pair_kind(const fa_problem *w, int64_t q_start, int64_t q_len, int64_t k_start,
                         int64_t k_len);
/* One chunk's rows in a local tensor: `len` rows from local row `first` of a tensor of `rows`
 * rows, at row `start` of the whole sequence. */
typedef struct ring_rows {
    int64_t rows, first, len, start;
} ring_rows;
/* The block problem of the query chunk q of the local tensors against the key chunk k of a K/V
 * block, at their positions in the whole problem; O, dO and the gradients' layouts are left
 * to the caller. */
fa_problem ring_pair_problem(const fa_problem *w, const fa_ring_options *o, ring_pair kind,
                             const ring_rows *q, const ring_rows *k);
/* Copies rows [0, n) of each (b, h) of a compact BHSD [batch, heads, n, head_dim] array into
 * local rows [first, + n) of an array laid out as `l` (elements of elem bytes). */
void ring_place(const fa_tensor_layout *l, int64_t batch, int64_t heads, int64_t n,
                int64_t head_dim, size_t elem, const void *src, void *dst);
/* Reads a local K and V (kv_bytes each) into a stage after its header. */
void ring_stage_kv(ring_run *run, fa_context *ctx, const fa_buffer *k, const fa_buffer *v,
                   uint64_t kv_bytes, unsigned char *stage);
/* Writes a stage's K and V (kv_bytes each, after the header) into device buffers. */
void ring_upload_kv(ring_run *run, fa_context *ctx, const unsigned char *stage,
                    uint64_t kv_bytes, fa_buffer *k, fa_buffer *v);
/* Reads the sinks (f32 [heads_q]) into a new host array *out. */
fa_status ring_read_sinks(ring_run *run, fa_context *ctx, const fa_problem *w,
                          const fa_buffer *sinks, float **out);
/* This rank's share of dL/dsink[h] (share: heads_q doubles): -sum over its rows (b, i) of
 * exp(sink[h] - LSE) * D, D = rowsum(dO * O), from the local O, dO and LSE. */
fa_status ring_sinks_share(ring_run *run, fa_context *ctx, const fa_problem *w,
                           const fa_ring_options *o, const fa_ring_tensors *x, int64_t rows,
                           const float *sinks, double *share);
/* Every rank's n doubles gathered around the ring (P - 1 rounds) and summed in rank order into
 * sum: the same on every rank. Collective. */
void ring_sum_around(ring_run *run, const double *mine, int64_t n, double *sum);
/* Bytes of one local K (or V) tensor of `rows` rows. */
uint64_t ring_kv_bytes(const fa_problem *w, int64_t rows);

#endif /* FLASHATTN_RING_INTERNAL_H */
