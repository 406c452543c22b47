/*
 * test_ring_mpi.c - ring attention across MPI ranks, run by mpirun (tests/ring/CMakeLists.txt):
 *
 *   test_ring_mpi BACKEND                 every case of the table on BACKEND (cpu or opencl),
 *                                         each rank's rows against the golden on the whole
 *                                         problem; forward twice (bitwise equal), backward
 *   test_ring_mpi BACKEND --fail-rank R   rank R gives bad input: every rank must return that
 *                                         rank's error, in seconds
 *
 * Exit 0 when every rank passed, 1 otherwise, 77 when the backend has no device and
 * FLASHATTN_REQUIRE_BACKENDS does not name it.
 */
#define _POSIX_C_SOURCE 200809L
#include "flashattn_ring_mpi.h"
#include "ring_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const ring_case cpu_cases[] = {
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 4, 2, 45, 16,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F16, 2, 2, 1, 38,
     8, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_BF16, 1, 2, 2, 41, 32, 0.0f, 1, 0,
     0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F16, 1, 2, 2, 43,
     16, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 6, 2,
     30, 24, 8.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_F32, 2, 2, 1, 17, 64, 0.0f,
     1, 0, 0, 0, 0, 0.0f, 0, 0},
    /* the rules that read positions */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 4, 2, 45, 16,
     0.0f, 1, 1, 7, -1, 1, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 2, 1,
     96, 16, 20.0f, 1, 0, 0, 0, 0, 0.2f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_F16, 1, 2, 2, 96, 16, 0.0f, 1, 1,
     5, 9, 1, 0.1f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_BF16, 1, 2, 1, 39, 8, 0.0f, 1,
     1, 3, 2, 1, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 4, 2, 45, 16,
     0.0f, 1, 1, 6, -1, 0, 0.0f, 1, 0},
    /* dropout on lengths that are not multiples of 4P (8P zigzag) */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 2, 1, 61,
     16, 0.0f, 1, 0, 0, 0, 0, 0.2f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F16, 1, 2, 2, 37,
     8, 0.0f, 1, 0, 0, 0, 0, 0.1f, 0, 0},
    /* cross-attention (the last field: seqlen_k), both alignments, Sq < Sk and Sq > Sk */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 4, 2, 29,
     16, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 70},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_BF16, 1, 2, 1,
     70, 16, 0.0f, 1, 0, 0, 0, 0, 0.0f, 1, 29},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F16, 1, 2, 2, 45, 8,
     0.0f, 1, 1, 5, 3, 1, 0.1f, 0, 100},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_F32, 2, 2, 2, 33, 16, 0.0f, 1,
     0, 0, 0, 0, 0.0f, 0, 17},
    /* lengths below 4 rows a chunk: empty chunks, and ranks with no Q or no K row */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 3, 1, 6, 8,
     0.0f, 1, 0, 0, 0, 0, 0.2f, 1, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 2, 1, 3, 8,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 50},
};

static const ring_case opencl_cases[] = {
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 4, 2, 45, 16,
     0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F16, 1, 2, 1, 38,
     16, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BHSD, FA_MASK_NONE, FA_DTYPE_BF16, 1, 2, 2, 33, 16, 0.0f,
     1, 0, 0, 0, 0, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F32, 1, 2, 1, 96, 16,
     0.0f, 1, 1, 11, -1, 1, 0.15f, 0, 0},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_NONE, FA_DTYPE_F32, 1, 2, 2, 41, 16, 0.0f, 1,
     1, 3, 6, 1, 0.0f, 0, 0},
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 3, 1, 40,
     16, 0.0f, 1, 0, 0, 0, 1, 0.0f, 1, 0},
    /* dropout on a length that is not a multiple of 8P; cross-attention, Sq > Sk and Sq < Sk */
    {"", FA_RING_ZIGZAG, FA_LAYOUT_BHSD, FA_MASK_CAUSAL_BOTTOM_RIGHT, FA_DTYPE_F32, 1, 2, 1, 61,
     16, 0.0f, 1, 0, 0, 0, 0, 0.2f, 0, 50},
    {"", FA_RING_CONTIGUOUS, FA_LAYOUT_BSHD, FA_MASK_CAUSAL_TOP_LEFT, FA_DTYPE_F16, 1, 2, 2, 37,
     16, 0.0f, 1, 0, 0, 0, 0, 0.0f, 0, 58},
};

/* Whether FLASHATTN_REQUIRE_BACKENDS names the backend (a missing device is then a failure). */
static int required(const char *name)
{
    const char *req = getenv("FLASHATTN_REQUIRE_BACKENDS");
    return req && strstr(req, name) != NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank `bad` gives a Q buffer one element short: every rank must return BUFFER_TOO_SMALL with
 * "rank <bad>:" in its message within a few seconds, and leave O untouched. */
static int failure_case(fa_context *ctx, const fa_ring_transport *t, int bad)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 24, 24, 8);
    fa_ring_slice s;
    fa_ring_slice_of(FA_RING_ZIGZAG, 24, t->size, t->rank, &s);
    size_t bytes = (size_t)(2 * s.rows * 8) * 4;
    size_t q_bytes = bytes - (t->rank == bad ? 4 : 0);
    float *host = calloc(bytes / 4, 4);
    fa_buffer *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    int rc = !host || fa_buffer_create(ctx, q_bytes, &q) || fa_buffer_create(ctx, bytes, &k) ||
             fa_buffer_create(ctx, bytes, &v) || fa_buffer_create(ctx, bytes, &o);
    if (!rc) {
        host[0] = 7.0f;
        fa_buffer_write(o, 0, host, bytes);
        fa_ring_options opts = {FA_RING_ZIGZAG, FA_LAYOUT_BHSD, 5000, NULL};
        fa_ring_tensors x = {q, k, v, o, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        char why[512], want[32];
        double t0 = now_s();
        fa_status st = fa_ring_forward(ctx, t, &p, &opts, &x, why, sizeof why);
        double took = now_s() - t0;
        float first = 0.0f;
        fa_buffer_read(o, 0, &first, 4);
        snprintf(want, sizeof want, "rank %d:", bad);
        rc = st != FA_STATUS_BUFFER_TOO_SMALL || !strstr(why, want) || took > 10.0 ||
             first != 7.0f;
        printf("rank %d: %s \"%s\" after %.3f s%s\n", t->rank, fa_status_name(st), why, took,
               rc ? " (UNEXPECTED)" : "");
    }
    fa_buffer_destroy(q);
    fa_buffer_destroy(k);
    fa_buffer_destroy(v);
    fa_buffer_destroy(o);
    free(host);
    return rc;
}

static int run_cases(fa_context *ctx, fa_context *golden, const fa_ring_transport *t,
                     const ring_case *cases, size_t n)
{
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char msg[512], d[160];
        int rc = ring_case_run(ctx, golden, t, &cases[i], msg, sizeof msg);
        int any = 0;
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        ring_case_describe(&cases[i], d, sizeof d);
        if (rc)
            printf("FAIL P=%d rank %d: %s: %s\n", t->size, t->rank, d, msg);
        else if (t->rank == 0)
            printf("%s P=%d: %s\n", any ? "FAIL" : "ok  ", t->size, d);
        failures += any;
    }
    return failures;
}

/* pocl's kernel cache, a folder per rank: ranks building the same program into one folder at
 * once failed a build in CI (CL_BUILD_PROGRAM_FAILURE, no log) while the cache was cold. */
static void own_pocl_cache(int rank)
{
    const char *base = getenv("POCL_CACHE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/flashattn-ring-rank%d", base ? base : "/tmp", rank);
    mkdir(dir, 0700); /* an existing folder is fine; pocl reports one it cannot use */
    setenv("POCL_CACHE_DIR", dir, 1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_ring_mpi cpu|opencl [--fail-rank R]\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    fa_ring_transport t;
    fa_backend backend = FA_BACKEND_CPU;
    int bad = argc >= 4 && strcmp(argv[2], "--fail-rank") == 0 ? atoi(argv[3]) : -1;
    if (fa_ring_transport_mpi(MPI_COMM_WORLD, &t) != FA_STATUS_OK ||
        fa_backend_from_name(argv[1], &backend) != FA_STATUS_OK) {
        fprintf(stderr, "test_ring_mpi: bad backend or no MPI transport\n");
        MPI_Finalize();
        return 2;
    }
    own_pocl_cache(t.rank);
    fa_context_options co = {backend, 0}, go = {FA_BACKEND_CPU, 0};
    fa_context *ctx = NULL, *golden = NULL;
    char why[256] = "";
    int missing = fa_context_create(&ctx, &co, why, sizeof why) != FA_STATUS_OK, any = 0;
    MPI_Allreduce(&missing, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int code = 0;
    if (any) {
        if (t.rank == 0)
            printf("%s: no device (%s)\n", argv[1], why);
        code = required(argv[1]) ? 1 : 77;
    } else if (fa_context_create(&golden, &go, why, sizeof why) != FA_STATUS_OK) {
        code = 1;
    } else if (bad >= 0) {
        int rc = failure_case(ctx, &t, bad);
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        code = any ? 1 : 0;
    } else {
        int opencl = backend == FA_BACKEND_OPENCL;
        int failures = run_cases(ctx, golden, &t, opencl ? opencl_cases : cpu_cases,
                                 opencl ? sizeof opencl_cases / sizeof opencl_cases[0]
                                        : sizeof cpu_cases / sizeof cpu_cases[0]);
        code = failures ? 1 : 0;
    }
    fa_context_destroy(ctx);
    fa_context_destroy(golden);
    MPI_Finalize();
    return code;
}
