/*
 * test_decode.h - what the decoding suite's files share (test_decode.c: the forward cases and
 * the runner; test_decode_more.c: the merge, the varlen backward and the rejected inputs).
 */
#ifndef FA_TEST_DECODE_H
#define FA_TEST_DECODE_H

#include "flashattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DC_MAX_BATCH 4

typedef enum dc_mode {
    DC_DENSE,     /* [B, H, S, d]: every sequence has seqlen_k keys */
    DC_SEQLENS_K, /* dense K/V padded to seqlen_k, per-sequence lengths in seqlens_k */
    DC_PAGED,     /* K/V in a shuffled page pool, lengths in seqlens_k */
    DC_VARLEN     /* packed rows, cu_seqlens_q / cu_seqlens_k */
} dc_mode;

typedef struct dc_case {
    const char *name;
    dc_mode mode;
    fa_dtype dtype;
    int64_t batch, hq, hkv, d;
    int64_t lq[DC_MAX_BATCH]; /* rows per sequence (all equal unless varlen) */
    int64_t lk[DC_MAX_BATCH]; /* keys per sequence */
    int64_t seqlen_k;         /* the problem's seqlen_k (0: the longest lk) */
    fa_mask mask;
    int64_t page_size;
    int32_t kv_splits;
    int32_t block_c;          /* tile override (0: planned), to make several key tiles */
    bool shared_pages;        /* sequence 1's first page is sequence 0's */
    bool want_split;          /* the plan must split */
    int32_t first_token;      /* varlen: cu_seqlens_q[0] = cu_seqlens_k[0] (rows before stay NaN) */
} dc_case;

extern fa_context *dc_ctx;
extern fa_backend dc_backend;

/* A device buffer holding `bytes` of host (NULL: unspecified contents). */
fa_buffer *dc_buffer(const void *host, size_t bytes);
void dc_read(const fa_buffer *b, void *host, size_t bytes);
/* n elements of dtype, all NaN (malloc'd). */
void *dc_nan_host(fa_dtype dt, int64_t n);
/* The relative tolerance of a dtype (test_modifiers' rule). */
double dc_rel(fa_dtype dt);

typedef struct seq_data seq_data;
void dc_seq_build(const dc_case *c, seq_data **out);
void dc_seq_free(seq_data *s);
/* The case's int32 sequence buffers on the device (owned[i] to destroy; NULL where unused). */
void dc_seq_buffers(const seq_data *s, fa_seq_buffers *sb, fa_buffer *owned[4]);

/* Adds the file's tests (those whose name contains filter, when given); returns how many. */
size_t dc_add_merge_tests(struct CMUnitTest *tests, const char *filter);
size_t dc_add_backward_tests(struct CMUnitTest *tests, const char *filter);
size_t dc_add_invalid_tests(struct CMUnitTest *tests, const char *filter);

#endif /* FA_TEST_DECODE_H */
