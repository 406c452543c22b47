/*
 * test_ring_fake.c - the ring in one process: P ranks as threads over the callback transport
 * (fake_transport.c), on the cpu backend. The slices, forward and backward against the golden
 * for P = 1..4 in both layouts, and the failure paths: a rank with bad input, an unsupported
 * feature, a silent rank (bounded waits), every rank returning the error.
 */
#define _POSIX_C_SOURCE 200809L
#include "fake_transport.h"
#include "ring_case.h"
#include "ring_internal.h" /* the message header, to inject a failure report */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

/* ---- slices ----------------------------------------------------------------------------- */

/* Every row of the sequence belongs to exactly one chunk of one rank, every chunk starts at a
 * multiple of 4 rows (dropout's groups of 4 keys), chunk sizes differ by at most 4, zigzag
 * pairs chunk r with 2P-1-r. */
static void test_slices(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++)
        for (int P = 1; P <= 5; P++)
            for (int64_t N = 0; N <= 101; N++) {
                int seen[101] = {0};
                int64_t lo = N, hi = 0;
                for (int r = 0; r < P; r++) {
                    fa_ring_slice s;
                    assert_int_equal(fa_ring_slice_of((fa_ring_layout)layout, N, P, r, &s),
                                     FA_STATUS_OK);
                    assert_int_equal(s.chunks, layout ? 2 : 1);
                    assert_int_equal(s.rows, s.len[0] + (layout ? s.len[1] : 0));
                    for (int c = 0; c < s.chunks; c++) {
                        assert_int_equal(s.start[c] % 4, 0);
                        lo = s.len[c] < lo ? s.len[c] : lo;
                        hi = s.len[c] > hi ? s.len[c] : hi;
                        for (int64_t i = 0; i < s.len[c]; i++)
                            seen[s.start[c] + i]++;
                    }
                    if (layout && s.len[1] > 0)
                        assert_true(s.start[1] >= s.start[0] + s.len[0]);
                }
                for (int64_t i = 0; i < N; i++)
                    assert_int_equal(seen[i], 1);
                assert_true(hi - lo <= 4);
            }
    /* the rule itself: N 37 in 8 chunks (ceil(37 / 4) = 10 groups) starts at 0 4 8 12 20 24
     * 28 32, so rank 3 of 4 (zigzag) holds chunks 3 and 4: rows [12, 20) and [20, 24); rank
     * 0 chunks 0 and 7: [0, 4) and [32, 37). N 5 in 8 chunks: 0 0 0 0 4 4 4 4 (empty ones). */
    fa_ring_slice z;
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, 37, 4, 3, &z), FA_STATUS_OK);
    assert_true(z.start[0] == 12 && z.len[0] == 8 && z.start[1] == 20 && z.len[1] == 4);
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, 37, 4, 0, &z), FA_STATUS_OK);
    assert_true(z.start[0] == 0 && z.len[0] == 4 && z.start[1] == 32 && z.len[1] == 5);
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, 5, 4, 3, &z), FA_STATUS_OK);
    assert_true(z.rows == 4 && z.len[0] == 4 && z.start[1] == 4 && z.len[1] == 0);
    fa_ring_slice s;
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, 10, 0, 0, &s), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, 10, 2, 2, &s), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_ring_slice_of((fa_ring_layout)7, 10, 2, 0, &s),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, -1, 2, 0, &s), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_ring_slice_of(FA_RING_ZIGZAG, 10, 2, 0, NULL), FA_STATUS_NULL_POINTER);
    fa_ring_layout l;
    assert_int_equal(fa_ring_layout_from_name("ZigZag", &l), FA_STATUS_OK);
    assert_int_equal(l, FA_RING_ZIGZAG);
    assert_int_equal(fa_ring_layout_from_name("ring", &l), FA_STATUS_INVALID_ARGUMENT);
}

/* ---- pair classification ----------------------------------------------------------------- */

/* Whether row i of the whole problem sees key j, written out from api.md's rules: the causal
 * mask (j <= i top-left, j <= i + Sk - Sq bottom-right), the window around i' = i + Sk - Sq. */
static int visible(const fa_problem *w, int64_t i, int64_t j)
{
    int64_t shift = w->seqlen_k - w->seqlen_q;
    if ((w->mask == FA_MASK_CAUSAL_TOP_LEFT && j > i) ||
        (w->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT && j > i + shift))
        return 0;
    if (w->window && w->window_left >= 0 && j < i + shift - w->window_left)
        return 0;
    return !(w->window && w->window_right >= 0 && j > i + shift + w->window_right);
}

/* ring_pair_kind against every (row, key) of small chunk pairs: SKIP exactly when no row sees
 * a key, FULL exactly when the causal mask hides none (the window may still), MASKED else. */
static void test_pair_kinds(void **state)
{
    (void)state;
    static const int64_t lens[][2] = {{9, 9}, {5, 12}, {12, 5}, {7, 1}};
    static const int64_t windows[][2] = {{-1, -1}, {2, 1}, {0, 0}, {3, -1}, {-1, 0}, {30, 30}};
    for (size_t l = 0; l < 4; l++)
        for (int mask = 0; mask < 3; mask++)
            for (size_t wi = 0; wi < 6; wi++) {
                fa_problem w;
                fa_problem_init(&w, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, lens[l][0],
                                lens[l][1], 8);
                w.mask = (fa_mask)mask;
                w.window = wi > 0;
                w.window_left = windows[wi][0];
                w.window_right = windows[wi][1];
                fa_problem causal = w;
                causal.window = 0;
                for (int64_t q0 = 0; q0 < w.seqlen_q; q0++)
                    for (int64_t q1 = q0 + 1; q1 <= w.seqlen_q; q1++)
                        for (int64_t k0 = 0; k0 < w.seqlen_k; k0++)
                            for (int64_t k1 = k0 + 1; k1 <= w.seqlen_k; k1++) {
                                int any = 0, all = 1;
                                for (int64_t i = q0; i < q1; i++)
                                    for (int64_t j = k0; j < k1; j++) {
                                        any |= visible(&w, i, j);
                                        all &= visible(&causal, i, j);
                                    }
                                ring_pair want = !any ? RING_PAIR_SKIP
                                                 : all ? RING_PAIR_FULL : RING_PAIR_MASKED;
                                ring_pair got = ring_pair_kind(&w, q0, q1 - q0, k0, k1 - k0);
                                if (got != want)
                                    fail_msg("Sq %lld Sk %lld mask %d window %lld,%lld rows "
                                             "[%lld,%lld) keys [%lld,%lld): %d, want %d",
                                             (long long)w.seqlen_q, (long long)w.seqlen_k, mask,
                                             (long long)w.window_left,
                                             (long long)w.window_right, (long long)q0,
                                             (long long)q1, (long long)k0, (long long)k1,
                                             (int)got, (int)want);
                            }
            }
}

/* ---- P threads ---------------------------------------------------------------------------- */

typedef enum job_kind { JOB_CASE, JOB_BAD_INPUT, JOB_BIAS, JOB_PLAIN } job_kind;

typedef struct job {
    fake_world *w;
    int rank;
    job_kind kind;
    const ring_case *c;
    int rc;
    fa_status st;
    char msg[512];
    double seconds;
    fa_ring_stats stats; /* a small forward's */
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A small forward on this rank where rank 1 may give a Q buffer one byte short (bad input)
 * or every rank a bias (unsupported). */
static fa_status small_forward(job *j, fa_context *ctx, const fa_ring_transport *t)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 24, 24, 8);
    p.mask = FA_MASK_CAUSAL_TOP_LEFT;
    p.bias = j->kind == JOB_BIAS;
    fa_ring_slice s;
    fa_ring_slice_of(FA_RING_ZIGZAG, 24, t->size, t->rank, &s);
    size_t bytes = (size_t)(2 * s.rows * 8) * 4;
    size_t q_bytes = bytes - (j->kind == JOB_BAD_INPUT && t->rank == 1 ? 4 : 0);
    fa_buffer *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    static const float zeros[2 * 24 * 8];
    fa_buffer_create(ctx, q_bytes, &q);
    fa_buffer_create(ctx, bytes, &k);
    fa_buffer_create(ctx, bytes, &v);
    fa_buffer_create(ctx, bytes, &o);
    fa_buffer_write(q, 0, zeros, q_bytes);
    fa_buffer_write(k, 0, zeros, bytes);
    fa_buffer_write(v, 0, zeros, bytes);
    float before = 7.0f, after = 0.0f;
    fa_buffer_write(o, 0, &before, 4);
    fa_ring_options opts = {FA_RING_ZIGZAG, FA_LAYOUT_BHSD, 300, &j->stats};
    fa_ring_tensors x = {q, k, v, o, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    fa_status st = fa_ring_forward(ctx, t, &p, &opts, &x, j->msg, sizeof j->msg);
    fa_buffer_read(o, 0, &after, 4);
    if (st != FA_STATUS_OK && after != before)
        snprintf(j->msg, sizeof j->msg, "O was written on a failure");
    fa_buffer_destroy(q);
    fa_buffer_destroy(k);
    fa_buffer_destroy(v);
    fa_buffer_destroy(o);
    return st;
}

static void *rank_main(void *arg)
{
    job *j = arg;
    fa_context_options co = {FA_BACKEND_CPU, 0};
    fa_context *ctx = NULL, *golden = NULL;
    fa_ring_transport t = fake_transport(j->w, j->rank);
    double t0 = now_s();
    if (fa_context_create(&ctx, &co, NULL, 0) != FA_STATUS_OK ||
        fa_context_create(&golden, &co, NULL, 0) != FA_STATUS_OK) {
        j->rc = 1;
        snprintf(j->msg, sizeof j->msg, "no cpu context");
    } else if (j->kind == JOB_CASE) {
        j->rc = ring_case_run(ctx, golden, &t, j->c, j->msg, sizeof j->msg);
    } else {
        j->st = small_forward(j, ctx, &t);
    }
    j->seconds = now_s() - t0;
    fa_context_destroy(ctx);
    fa_context_destroy(golden);
    return NULL;
}

/* Runs P ranks of one kind to completion; silent: a rank whose messages vanish, or -1;
 * inject: a failure report rank 1 sends in its 4th message (the second K/V step for P = 3,
 * after the 2 agreement rounds), or NULL. */
static void run_ranks(int P, int silent, job_kind kind, const ring_case *c, job *jobs,
                      const ring_header *inject)
{
    fake_world *w = fake_world_create(P, silent);
    assert_non_null(w);
    if (inject)
        fake_world_inject(w, 1, 3, inject, sizeof *inject);
    pthread_t th[8];
    for (int r = 0; r < P; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].w = w;
        jobs[r].rank = r;
        jobs[r].kind = kind;
        jobs[r].c = c;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < P; r++)
        pthread_join(th[r], NULL);
    fake_world_destroy(w);
}

static const ring_case cases[] = {
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 4, 2, 37, 16,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F16, 2, 2, 1, 29,
     8, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_BF16, 1, 2, 2, 31, 32, 0.0f,
     1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 3, 1, 23,
     16, 5.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_F32, 1, 2, 2, 5, 8, 0.0f, 1, 0, 0,
     0, 0, 0.0f, 0, 0},
    /* the rules that read positions */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 2, 1, 96, 16,
     0.0f, 1, 1, 9, -1, 1, 0.25f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_NONE, FA_DTYPE_F32, 1, 2, 2, 37, 8, 0.0f, 1,
     1, 4, 2, 1, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F16, 1, 2, 2, 96,
     8, 0.0f, 1, 0, 0, 0, 0, 0.1f, 0, 0},
    /* sinks: joined once per row, their gradient summed around the ring */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 3, 1, 37, 16,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 1, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_NONE, FA_DTYPE_F16, 2, 2, 2, 29, 8, 0.0f, 1,
     1, 3, 5, 1, 0.0f, 1, 0},
    /* dropout on lengths that are not multiples of 4P (8P zigzag): refused before the chunks
     * started at multiples of 4 rows; N 6 leaves chunks and ranks empty */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 2, 1, 37, 16,
     0.0f, 1, 0, 0, 0, 0, 0.2f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F16, 1, 2, 2,
     61, 8, 0.0f, 1, 0, 0, 0, 0, 0.1f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_BF16, 1, 2, 1, 100, 8, 0.0f, 1,
     1, 5, 9, 1, 0.15f, 1, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_F32, 1, 2, 2, 100, 8, 0.0f, 1,
     0, 0, 0, 0, 0.25f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 3, 1, 6, 8,
     0.0f, 1, 0, 0, 0, 0, 0.3f, 1, 0},
    /* cross-attention: Q's and K's rows each split into the layout's chunks (the last field:
     * seqlen_k); Sq > Sk bottom-right leaves rows that see no key (O = 0, LSE = -inf) */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 4, 2, 37, 16,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 61},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 3, 1, 61,
     8, 0.0f, 1, 0, 0, 0, 0, 0.0f, 1, 23},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F16, 2, 2, 1,
     19, 16, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 45},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_BF16, 1, 2, 2, 50,
     8, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 29},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_F32, 1, 2, 2, 13, 8, 0.0f, 1, 1, 4,
     2, 1, 0.2f, 0, 40},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 3, 1,
     45, 8, 0.0f, 1, 1, 6, -1, 0, 0.1f, 1, 30},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 2, 1, 3, 8,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 50},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 2, 1, 50,
     8, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 3},
};

/* Each case for P = 1..4 against the golden on every rank. */
static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int P = 1; P <= 4; P++) {
            job jobs[4];
            run_ranks(P, -1, JOB_CASE, &cases[i], jobs, NULL);
            for (int r = 0; r < P; r++) {
                if (jobs[r].rc) {
                    char d[160];
                    ring_case_describe(&cases[i], d, sizeof d);
                    fail_msg("P=%d rank %d, %s: %s", P, r, d, jobs[r].msg);
                }
            }
        }
}

/* One rank's Q one element short: every rank returns its BUFFER_TOO_SMALL with its message,
 * and no rank writes O. */
static void test_bad_input_on_one_rank(void **state)
{
    (void)state;
    job jobs[3];
    run_ranks(3, -1, JOB_BAD_INPUT, NULL, jobs, NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(jobs[r].st, FA_STATUS_BUFFER_TOO_SMALL);
        assert_non_null(strstr(jobs[r].msg, "rank 1: the local Q buffer"));
    }
}

static void test_unsupported_bias(void **state)
{
    (void)state;
    job jobs[2];
    run_ranks(2, -1, JOB_BIAS, NULL, jobs, NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(jobs[r].st, FA_STATUS_UNSUPPORTED);
        assert_non_null(strstr(jobs[r].msg, "an attention bias"));
    }
}

/* A plain forward's stats: P steps, P - 1 exchanges (the agreement rounds not counted), at
 * most all of them seen complete during the compute, every pair of the causal zigzag. */
static void test_stats(void **state)
{
    (void)state;
    job jobs[3];
    run_ranks(3, -1, JOB_PLAIN, NULL, jobs, NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(jobs[r].st, FA_STATUS_OK);
        assert_int_equal(jobs[r].stats.steps, 3);
        assert_int_equal(jobs[r].stats.transfers, 2);
        assert_in_range(jobs[r].stats.transfers_hidden, 0, 2);
        assert_int_equal(jobs[r].stats.pairs, 7); /* 2P - 1 whole pairs and 2 diagonal ones */
    }
}

/* A rank whose messages never arrive: every rank returns TRANSPORT_ERROR within a few of the
 * 300 ms waits, none hangs. */
static void test_silent_rank(void **state)
{
    (void)state;
    job jobs[3];
    run_ranks(3, 2, JOB_PLAIN, NULL, jobs, NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(jobs[r].st, FA_STATUS_TRANSPORT_ERROR);
        assert_non_null(strstr(jobs[r].msg, "timed out"));
        assert_true(jobs[r].seconds < 5.0);
    }
}

/* Rank 1 reports a device error in the middle of the ring (as a rank whose block failed
 * does): every rank stops computing and returns that status and message, without waiting for
 * a timeout (which would be TRANSPORT_ERROR), and writes no output. */
static void test_failure_mid_ring(void **state)
{
    (void)state;
    ring_header h;
    memset(&h, 0, sizeof h);
    h.status = FA_STATUS_DEVICE_ERROR;
    h.origin = 1;
    snprintf(h.msg, sizeof h.msg, "rank 1: injected device error");
    job jobs[3];
    run_ranks(3, -1, JOB_PLAIN, NULL, jobs, &h);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(jobs[r].st, FA_STATUS_DEVICE_ERROR);
        assert_string_equal(jobs[r].msg, "rank 1: injected device error");
        assert_true(jobs[r].seconds < 5.0); /* a timeout would have said TRANSPORT_ERROR */
    }
}

/* Bad whole problems and options on one rank: each its own status, the output untouched. */
static void test_invalid_whole(void **state)
{
    (void)state;
    fake_world *w = fake_world_create(1, -1);
    fa_ring_transport t = fake_transport(w, 0);
    fa_context_options co = {FA_BACKEND_CPU, 0};
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, &co, NULL, 0), FA_STATUS_OK);
    fa_buffer *b[4];
    float init[4 * 6 * 8] = {0};
    init[0] = 3.0f;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fa_buffer_create(ctx, sizeof init, &b[i]), FA_STATUS_OK);
        assert_int_equal(fa_buffer_write(b[i], 0, init, sizeof init), FA_STATUS_OK);
    }
    fa_ring_tensors x = {b[0], b[1], b[2], b[3], NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL};
    fa_ring_options o = {FA_RING_ZIGZAG, FA_LAYOUT_BHSD, 300, NULL};
    struct {
        int what;
        fa_status want;
    } bad[] = {{0, FA_STATUS_HEADS_MISMATCH},  {1, FA_STATUS_UNSUPPORTED_DTYPE},
                 {2, FA_STATUS_INVALID_MASK},    {3, FA_STATUS_UNSUPPORTED},
                 {4, FA_STATUS_UNSUPPORTED_HEAD_DIM}, {5, FA_STATUS_INVALID_ARGUMENT},
                 {6, FA_STATUS_NULL_POINTER}, {7, FA_STATUS_INVALID_SHAPE},
                 {8, FA_STATUS_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa_problem p;
        fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 4, 4, 6, 6, 8);
        fa_ring_options oi = o;
        const fa_ring_options *po = &oi;
        switch (bad[i].what) {
        case 0: p.heads_kv = 3; break;
        case 1: p.dtype = (fa_dtype)9; break;
        case 2: p.mask = (fa_mask)5; break;
        case 3: p.kv_splits = 2; break; /* the ring splits the keys itself */
        case 4: p.head_dim = 300; break;
        case 5: oi.layout = (fa_ring_layout)4; break;
        case 7: p.seqlen_k = -1; break;
        case 8: p.q_position = 2; break;   /* the ring sets the blocks' positions */
        default: po = NULL; break;
        }
        char why[256] = "";
        assert_int_equal(fa_ring_forward(ctx, &t, &p, po, &x, why, sizeof why), bad[i].want);
        assert_non_null(strstr(why, "rank 0: "));
        float first = 0.0f;
        assert_int_equal(fa_buffer_read(b[3], 0, &first, 4), FA_STATUS_OK);
        assert_true(first == 3.0f);
    }
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(b[i]);
    fa_context_destroy(ctx);
    fake_world_destroy(w);
}

/* A failure longer than the header carries (an OpenCL build log): its own rank's why holds it
 * whole, another rank's the head of it, marked as cut. */
static void test_long_failure(void **state)
{
    (void)state;
    char detail[1500], why[RING_WHOLE_BYTES];
    for (size_t i = 0; i < sizeof detail - 1; i++)
        detail[i] = (char)('a' + i % 26);
    detail[sizeof detail - 1] = '\0';
    fa_ring_transport t2 = {0}, t0 = {0};
    t2.rank = 2;
    t2.size = 3;
    t0.size = 3;
    ring_run failing, other;
    ring_run_init(&failing, &t2, NULL);
    ring_run_init(&other, &t0, NULL);
    ring_fail(&failing, FA_STATUS_DEVICE_ERROR, "build failed: %s", detail);
    assert_int_equal(ring_finish(&failing, NULL, why, sizeof why), FA_STATUS_DEVICE_ERROR);
    assert_int_equal(strncmp(why, "rank 2: build failed: ", 22), 0);
    assert_string_equal(why + 22, detail);
    ring_adopt(&other, &failing.err);
    assert_int_equal(ring_finish(&other, NULL, why, sizeof why), FA_STATUS_DEVICE_ERROR);
    assert_true(strlen(why) < RING_MSG_BYTES);
    assert_int_equal(strncmp(why, "rank 2: build failed: abc", 25), 0);
    assert_non_null(strstr(why, "[... cut; the failing rank's why has it all]"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_pair_kinds),
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_bad_input_on_one_rank),
        cmocka_unit_test(test_unsupported_bias),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_silent_rank),
        cmocka_unit_test(test_failure_mid_ring),
        cmocka_unit_test(test_invalid_whole),
        cmocka_unit_test(test_long_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
