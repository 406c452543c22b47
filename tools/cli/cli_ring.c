/*
 * cli_ring.c - `flashattn ring`: ring attention across MPI ranks (flashattn_ring). Every rank
 * reads (or draws from --seed) the whole inputs, takes its slice, runs the ring forward (and
 * with --backward or --do the ring backward); rank 0 gathers the outputs, writes them in the
 * inputs' layout, compares them with the cpu golden on the whole problem (--check), and prints
 * each rank's time, transfer wait and peak device memory. --help works without mpirun: MPI is
 * started only after the command line is read.
 */
#include "cli_commands.h"
#include "cli_common.h"
#include "cli_modifiers.h"
#include "cli_tensor.h"

#include "flashattn_ring_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING_NOPTS (CLI_PROBLEM_NOPTS + 18 + CLI_MOD_NOPTS)

typedef struct ring_args {
    cli_problem_args pa;
    fa_backend backend;
    int64_t device, timeout_ms, repeat;
    fa_ring_layout ring_layout;
    const char *ring_layout_name;
    uint64_t seed;
    cli_mod_args mods; /* --softcap, --window, --alibi, --dropout ... (the ring runs some) */
    const cli_cmd *cmd;
    const char *q_path, *k_path, *v_path, *do_path;
    const char *out_path, *lse_path, *dq_path, *dk_path, *dv_path;
    int backward, check, quiet;
    int argc; /* the command line, printed with the results */
    char **argv;
} ring_args;

/* The whole problem's host tensors (logical BHSD floats) and this rank's slice. */
typedef struct ring_data {
    fa_problem whole;
    fa_ring_slice slice;  /* this rank's rows of Q (O, LSE, dO, dQ) */
    fa_ring_slice kslice; /* and of K, V (dK, dV) */
    cli_tensor q, k, v, d_o;      /* whole inputs */
    cli_tensor o, dq, dk, dv;     /* whole outputs (rank 0) */
    float *lse;                   /* whole LSE (rank 0) */
    cli_tensor lq, lk, lv, ldo;   /* local inputs */
    cli_tensor lo, ldq, ldk, ldv; /* local outputs */
    float *llse;
    cli_mod_files mod_files;
    cli_mod_data mods; /* the ALiBi slopes and the sinks (and the bias, which it refuses) */
    fa_ring_stats fwd, bwd;
    uint64_t peak;
    char device[300]; /* "opencl device 0: NAME" */
    char transfers[400]; /* how blocks cross the ring (fa_ring_mpi_explain) */
} ring_data;

static size_t ring_table(ring_args *a, cli_opt *o)
{
    const cli_opt rest[RING_NOPTS - CLI_PROBLEM_NOPTS] = {
        {"backend", CLI_BACKEND, &a->backend, 0, 0, "B", "cpu, opencl or cuda (default auto)", 0},
        {"device", CLI_INT, &a->device, 0, INT32_MAX, "N", "device index (default 0)", 0},
        {"ring-layout", CLI_STRING, &a->ring_layout_name, 0, 0, "L",
         "zigzag (rank r holds chunks r and 2P-1-r of 2P) or contiguous (default zigzag)", 0},
        {"seed", CLI_U64, &a->seed, 0, 0, "S", "seed of the random inputs (default 1)", 0},
        {"q", CLI_STRING, &a->q_path, 0, 0, "FILE", "Q from .npy in --layout", 0},
        {"k", CLI_STRING, &a->k_path, 0, 0, "FILE", "K from .npy in --layout", 0},
        {"v", CLI_STRING, &a->v_path, 0, 0, "FILE", "V from .npy, the shape of K", 0},
        {"do", CLI_STRING, &a->do_path, 0, 0, "FILE", "dO from .npy; implies --backward", 0},
        {"out", CLI_STRING, &a->out_path, 0, 0, "FILE", "rank 0 writes O as .npy", 0},
        {"lse", CLI_STRING, &a->lse_path, 0, 0, "FILE", "rank 0 writes LSE as .npy [b, h, s]",
         0},
        {"dq", CLI_STRING, &a->dq_path, 0, 0, "FILE", "rank 0 writes dQ as .npy", 0},
        {"dk", CLI_STRING, &a->dk_path, 0, 0, "FILE", "rank 0 writes dK as .npy", 0},
        {"dv", CLI_STRING, &a->dv_path, 0, 0, "FILE", "rank 0 writes dV as .npy", 0},
        {"backward", CLI_FLAG, &a->backward, 0, 0, NULL, "then the ring backward (random dO)",
         0},
        {"check", CLI_FLAG, &a->check, 0, 0, NULL,
         "rank 0 compares the outputs with the cpu golden on the whole problem", 0},
        {"timeout-ms", CLI_INT, &a->timeout_ms, 1, INT32_MAX, "MS",
         "the longest wait for one transfer (default 30000)", 0},
        {"quiet", CLI_FLAG, &a->quiet, 0, 0, NULL, "print only the summary lines", 0},
        {"repeat", CLI_INT, &a->repeat, 1, 1000, "N",
         "after one warm-up, N runs; each rank reports its median (default 1: one run)", 0},
    };
    cli_problem_opts(&a->pa, o);
    memcpy(o + CLI_PROBLEM_NOPTS, rest, sizeof rest);
    cli_mod_opts(&a->mods, o + RING_NOPTS - CLI_MOD_NOPTS);
    return RING_NOPTS;
}

/* Options that make no sense together, and the ring layout's name. */
static int ring_validate(const cli_cmd *cmd, ring_args *a)
{
    int files = (a->q_path != NULL) + (a->k_path != NULL) + (a->v_path != NULL);
    if (files != 0 && files != 3)
        return cli_usage_error(cmd, "--q, --k and --v go together");
    if (a->do_path && files == 0)
        return cli_usage_error(cmd, "--do needs --q, --k and --v");
    if (a->ring_layout_name &&
        fa_ring_layout_from_name(a->ring_layout_name, &a->ring_layout) != FA_STATUS_OK)
        return cli_usage_error(cmd, "--ring-layout must be zigzag or contiguous, not '%s'",
                               a->ring_layout_name);
    a->backward = a->backward || a->do_path || a->dq_path || a->dk_path || a->dv_path;
    return 0;
}

/* The whole inputs, the same on every rank: from files, or random from the seed. */
static int load_inputs(const ring_args *a, ring_data *d)
{
    const cli_problem_args *pa = &a->pa;
    npy_dtype fd;
    if (a->q_path) {
        if (cli_tensor_load(a->q_path, pa->layout, &d->q, &fd) ||
            cli_tensor_load(a->k_path, pa->layout, &d->k, &fd) ||
            cli_tensor_load(a->v_path, pa->layout, &d->v, &fd) ||
            (a->do_path && cli_tensor_load(a->do_path, pa->layout, &d->d_o, &fd)))
            return CLI_EXIT_FAIL;
    } else {
        uint64_t st = a->seed;
        if (cli_tensor_alloc(&d->q, "Q", pa->batch, pa->heads, pa->seq, pa->dim) ||
            cli_tensor_alloc(&d->k, "K", pa->batch, pa->heads_kv, pa->seq_k, pa->dim) ||
            cli_tensor_alloc(&d->v, "V", pa->batch, pa->heads_kv, pa->seq_k, pa->dim))
            return CLI_EXIT_FAIL;
        cli_tensor_fill_random(&d->q, &st);
        cli_tensor_fill_random(&d->k, &st);
        cli_tensor_fill_random(&d->v, &st);
    }
    if (a->backward && !d->d_o.data) {
        uint64_t st = a->seed ^ 0xd0d0d0d0u;
        if (cli_tensor_alloc(&d->d_o, "dO", d->q.shape[0], d->q.shape[1], d->q.shape[2],
                             d->q.shape[3]))
            return CLI_EXIT_FAIL;
        cli_tensor_fill_random(&d->d_o, &st);
    }
    cli_tensor *all[4] = {&d->q, &d->k, &d->v, &d->d_o};
    for (int i = 0; i < 4; i++)
        cli_tensor_round(all[i], pa->dtype);
    fa_problem_init(&d->whole, pa->dtype, pa->layout, d->q.shape[0], d->q.shape[1],
                    d->k.shape[1], d->q.shape[2], d->k.shape[2], d->q.shape[3]);
    d->whole.mask = pa->mask;
    d->whole.scale = pa->scale;
    d->whole.block_r = (int32_t)pa->block_r;
    d->whole.block_c = (int32_t)pa->block_c;
    if (cli_mod_load(&a->mods, &d->mod_files) != 0)
        return CLI_EXIT_FAIL;
    int rc = cli_mod_apply(a->cmd, &a->mods, &d->mod_files, &d->whole);
    if (rc == 0 && d->whole.alibi == 2) /* the ring sends each rank [heads] slopes */
        return cli_usage_error(a->cmd, "--alibi-slopes: the ring takes f32 [heads] slopes, "
                               "not [batch, heads]");
    return rc ? rc : cli_mod_fill(&a->mods, &d->mod_files, &d->whole, a->seed, &d->mods);
}

/* A per-head f32 tensor (the ALiBi slopes, the sinks) on a context when `on`; data NULL: an
 * output (the sinks' gradient). */
static fa_status upload_heads(fa_context *ctx, const ring_data *d, int on, const float *data,
                              fa_buffer **out)
{
    if (!on)
        return FA_STATUS_OK;
    size_t bytes = (size_t)d->whole.heads_q * sizeof(float);
    fa_status st = fa_buffer_create(ctx, bytes, out);
    return st == FA_STATUS_OK && data ? fa_buffer_write(*out, 0, data, bytes) : st;
}

/* Copies the slice's rows between a whole tensor and a local one (to_local: whole -> local). */
static void move_rows(const fa_ring_slice *s, cli_tensor *whole, cli_tensor *local, int to_local)
{
    int64_t D = whole->shape[3], N = whole->shape[2];
    for (int64_t bh = 0; bh < whole->shape[0] * whole->shape[1]; bh++)
        for (int c = 0, first = 0; c < s->chunks; first += (int)s->len[c], c++) {
            float *w = whole->data + (bh * N + s->start[c]) * D;
            float *l = local->data + (bh * s->rows + first) * D;
            size_t bytes = (size_t)(s->len[c] * D) * sizeof(float);
            if (bytes)
                memcpy(to_local ? l : w, to_local ? w : l, bytes);
        }
}

static int local_alloc(cli_tensor *l, const char *what, const cli_tensor *whole, int64_t rows)
{
    return cli_tensor_alloc(l, what, whole->shape[0], whole->shape[1], rows, whole->shape[3]);
}

/* A device buffer holding a local tensor in the run's layout and dtype (NULL when empty). */
static fa_status upload(fa_context *ctx, const fa_problem *lp, fa_tensor_id id,
                        const cli_tensor *t, fa_buffer **out)
{
    uint64_t bytes = 0;
    fa_status st = fa_problem_tensor_bytes(lp, id, 0, 0, &bytes);
    if (st != FA_STATUS_OK || bytes == 0)
        return st;
    void *img = calloc(1, (size_t)bytes);
    if (!img)
        return FA_STATUS_OUT_OF_MEMORY;
    const fa_tensor_layout *l = id == FA_TENSOR_K || id == FA_TENSOR_V || id == FA_TENSOR_DK ||
                                        id == FA_TENSOR_DV ? &lp->k : &lp->q;
    if (t)
        cli_pack(t, l, lp->dtype, img);
    st = fa_buffer_create(ctx, (size_t)bytes, out);
    if (st == FA_STATUS_OK)
        st = fa_buffer_write(*out, 0, img, (size_t)bytes);
    free(img);
    return st;
}

static fa_status download(const fa_problem *lp, const fa_tensor_layout *l, const fa_buffer *b,
                          cli_tensor *t)
{
    uint64_t bytes = fa_buffer_size(b);
    if (!b || t->count == 0)
        return FA_STATUS_OK;
    void *img = malloc((size_t)bytes);
    fa_status st = img ? fa_buffer_read(b, 0, img, (size_t)bytes) : FA_STATUS_OUT_OF_MEMORY;
    if (st == FA_STATUS_OK)
        cli_unpack(img, l, lp->dtype, t);
    free(img);
    return st;
}

/* The local buffers of one rank. */
typedef struct ring_bufs {
    fa_buffer *q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv, *slopes, *sinks, *d_sinks;
} ring_bufs;

static void bufs_free(ring_bufs *b)
{
    fa_buffer *all[12] = {b->q,  b->k,  b->v,  b->o,      b->lse,   b->d_o,
                          b->dq, b->dk, b->dv, b->slopes, b->sinks, b->d_sinks};
    for (int i = 0; i < 12; i++)
        fa_buffer_destroy(all[i]);
}

static fa_status bufs_make(fa_context *ctx, const fa_problem *lp, ring_data *d, int backward,
                           ring_bufs *b)
{
    fa_status st = upload(ctx, lp, FA_TENSOR_Q, &d->lq, &b->q);
    if (st == FA_STATUS_OK)
        st = upload(ctx, lp, FA_TENSOR_K, &d->lk, &b->k);
    if (st == FA_STATUS_OK)
        st = upload(ctx, lp, FA_TENSOR_V, &d->lv, &b->v);
    if (st == FA_STATUS_OK)
        st = upload(ctx, lp, FA_TENSOR_O, NULL, &b->o);
    uint64_t lse = (uint64_t)lp->batch * (uint64_t)lp->heads_q * (uint64_t)lp->seqlen_q * 4;
    if (st == FA_STATUS_OK && lse > 0)
        st = fa_buffer_create(ctx, (size_t)lse, &b->lse);
    if (st == FA_STATUS_OK && backward)
        st = upload(ctx, lp, FA_TENSOR_DO, &d->ldo, &b->d_o);
    if (st == FA_STATUS_OK && backward)
        st = upload(ctx, lp, FA_TENSOR_DQ, NULL, &b->dq);
    if (st == FA_STATUS_OK && backward)
        st = upload(ctx, lp, FA_TENSOR_DK, NULL, &b->dk);
    if (st == FA_STATUS_OK && backward)
        st = upload(ctx, lp, FA_TENSOR_DV, NULL, &b->dv);
    if (st == FA_STATUS_OK)
        st = upload_heads(ctx, d, d->whole.alibi, d->mods.slopes, &b->slopes);
    if (st == FA_STATUS_OK)
        st = upload_heads(ctx, d, d->whole.sinks, d->mods.sinks, &b->sinks);
    return st == FA_STATUS_OK ? upload_heads(ctx, d, d->whole.sinks && backward, NULL,
                                             &b->d_sinks)
                              : st;
}

static int by_total(const void *x, const void *y)
{
    double a = ((const fa_ring_stats *)x)->total_s, b = ((const fa_ring_stats *)y)->total_s;
    return (a > b) - (a < b);
}

/* The ring forward (and backward) --repeat times after a warm-up (none for one run); the
 * median run's stats of each kept. */
static fa_status ring_repeat(const ring_args *a, fa_context *ctx, const fa_ring_transport *t,
                             ring_data *d, fa_ring_options *o, const fa_ring_tensors *x,
                             char *why, size_t why_size)
{
    int runs = a->repeat > 1 ? (int)a->repeat + 1 : 1;
    fa_ring_stats fwd[1001], bwd[1001];
    fa_status rs = FA_STATUS_OK;
    for (int i = 0; i < runs && rs == FA_STATUS_OK; i++) {
        o->stats = &fwd[i];
        rs = fa_ring_forward(ctx, t, &d->whole, o, x, why, why_size);
        if (rs == FA_STATUS_OK && a->backward) {
            o->stats = &bwd[i];
            rs = fa_ring_backward(ctx, t, &d->whole, o, x, why, why_size);
        }
    }
    if (rs != FA_STATUS_OK)
        return rs;
    int first = runs > 1; /* the warm-up is not counted */
    qsort(fwd + first, (size_t)(runs - first), sizeof fwd[0], by_total);
    qsort(bwd + first, (size_t)(runs - first), sizeof bwd[0], by_total);
    d->fwd = fwd[first + (runs - first) / 2];
    if (a->backward)
        d->bwd = bwd[first + (runs - first) / 2];
    return rs;
}

/* This rank's ring forward (and backward) on its device; the local outputs read back. */
static int ring_device(const ring_args *a, const fa_ring_transport *t, ring_data *d)
{
    fa_context *ctx = NULL;
    if (cli_context_open(a->backend, (int)a->device, &ctx))
        return CLI_EXIT_FAIL;
    fa_problem lp;
    fa_problem_init(&lp, d->whole.dtype, a->pa.layout, d->whole.batch, d->whole.heads_q,
                    d->whole.heads_kv, d->slice.rows, d->kslice.rows, d->whole.head_dim);
    ring_bufs b;
    memset(&b, 0, sizeof b);
    cli_describe_context(ctx, a->backend == FA_BACKEND_AUTO, d->device, sizeof d->device);
    fa_ring_mpi_explain(ctx, d->transfers, sizeof d->transfers);
    fa_status st = bufs_make(ctx, &lp, d, a->backward, &b);
    fa_context_reset_peak(ctx);
    fa_ring_options o = {a->ring_layout, a->pa.layout, (int32_t)a->timeout_ms, &d->fwd};
    fa_ring_tensors x = {b.q,  b.k,  b.v,  b.o,      b.lse,   b.d_o,
                         b.dq, b.dk, b.dv, b.slopes, b.sinks, b.d_sinks};
    char why[4096] = ""; /* the failing rank prints its message whole */
    if (st != FA_STATUS_OK)
        snprintf(why, sizeof why, "rank %d: local buffers: %s", t->rank,
                 fa_context_last_error(ctx));
    /* Every rank enters the ring, so a rank that failed above is heard by the others. */
    fa_ring_tensors none = {0};
    fa_status rs = ring_repeat(a, ctx, t, d, &o, st == FA_STATUS_OK ? &x : &none, why,
                               sizeof why);
    fa_context_memory(ctx, NULL, &d->peak);
    if (rs == FA_STATUS_OK) {
        rs = download(&lp, &lp.o, b.o, &d->lo);
        if (rs == FA_STATUS_OK && b.lse)
            rs = fa_buffer_read(b.lse, 0, d->llse, fa_buffer_size(b.lse));
        if (rs == FA_STATUS_OK && a->backward)
            rs = download(&lp, &lp.q, b.dq, &d->ldq);
        if (rs == FA_STATUS_OK && a->backward)
            rs = download(&lp, &lp.k, b.dk, &d->ldk);
        if (rs == FA_STATUS_OK && a->backward)
            rs = download(&lp, &lp.k, b.dv, &d->ldv);
    }
    bufs_free(&b);
    int rc = rs == FA_STATUS_OK ? 0 : cli_lib_error(rs, ctx, why);
    fa_context_destroy(ctx);
    return rc;
}

/* Rank 0 receives every rank's rows of a local tensor (floats, [B, H, rows, E]) into whole
 * ([B, H, N, E], allocated on rank 0 only); N: seqlen_q for Q's slices, seqlen_k for K's. */
static void gather_rows(const ring_args *a, const fa_ring_transport *t, cli_tensor *local,
                        cli_tensor *whole, int64_t N, int64_t row_elems)
{
    int64_t BH = local->shape[0] * local->shape[1];
    for (int r = 0; r < t->size; r++) {
        fa_ring_slice s;
        fa_ring_slice_of(a->ring_layout, N, t->size, r, &s);
        int64_t n = BH * s.rows * row_elems;
        if (n == 0)
            continue;
        if (t->rank == r && r != 0)
            MPI_Send(local->data, (int)n, MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
        if (t->rank != 0)
            continue;
        float *buf = r == 0 ? local->data : malloc((size_t)n * sizeof(float));
        if (r != 0)
            MPI_Recv(buf ? buf : local->data, buf ? (int)n : 0, MPI_FLOAT, r, 7,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!buf || !whole->data)
            continue;
        cli_tensor part = *local, w = *whole;
        part.shape[2] = s.rows;
        part.shape[3] = w.shape[3] = row_elems;
        part.data = buf;
        move_rows(&s, &w, &part, 0);
        if (r != 0)
            free(buf);
    }
}

/* upload, with a small buffer for an empty tensor (seqlen_k 0: the golden's call takes every
 * buffer, where a ring rank with no rows passes none). */
static fa_status upload_any(fa_context *ctx, const fa_problem *p, fa_tensor_id id,
                            const cli_tensor *t, fa_buffer **out)
{
    fa_status st = upload(ctx, p, id, t, out);
    return st == FA_STATUS_OK && !*out ? fa_buffer_create(ctx, 16, out) : st;
}

/* The cpu golden on the whole problem, into whole-sized tensors. */
static int golden(const ring_args *a, ring_data *d, cli_tensor *o, float *lse, cli_tensor *dq,
                  cli_tensor *dk, cli_tensor *dv)
{
    fa_context *g = NULL;
    if (cli_context_open(FA_BACKEND_CPU, 0, &g))
        return CLI_EXIT_FAIL;
    fa_problem p = d->whole;
    ring_bufs b;
    memset(&b, 0, sizeof b);
    fa_status st = upload_any(g, &p, FA_TENSOR_Q, &d->q, &b.q);
    if (st == FA_STATUS_OK)
        st = upload_any(g, &p, FA_TENSOR_K, &d->k, &b.k);
    if (st == FA_STATUS_OK)
        st = upload_any(g, &p, FA_TENSOR_V, &d->v, &b.v);
    if (st == FA_STATUS_OK)
        st = upload_any(g, &p, FA_TENSOR_O, NULL, &b.o);
    uint64_t lb = (uint64_t)(p.batch * p.heads_q * p.seqlen_q) * 4;
    if (st == FA_STATUS_OK && lb)
        st = fa_buffer_create(g, (size_t)lb, &b.lse);
    if (st == FA_STATUS_OK)
        st = upload_heads(g, d, d->whole.alibi, d->mods.slopes, &b.slopes);
    if (st == FA_STATUS_OK)
        st = upload_heads(g, d, d->whole.sinks, d->mods.sinks, &b.sinks);
    if (st == FA_STATUS_OK)
        st = upload_heads(g, d, d->whole.sinks && a->backward, NULL, &b.d_sinks);
    fa_plan *plan = NULL;
    if (st == FA_STATUS_OK)
        st = fa_plan_create(g, &p, &plan);
    fa_tensors x = {0};
    x.q = b.q, x.k = b.k, x.v = b.v, x.o = b.o, x.lse = b.lse, x.alibi_slopes = b.slopes;
    x.sinks = b.sinks;
    if (st == FA_STATUS_OK)
        st = fa_run(g, plan, &x);
    if (st == FA_STATUS_OK)
        st = download(&p, &p.o, b.o, o);
    if (st == FA_STATUS_OK && lb)
        st = fa_buffer_read(b.lse, 0, lse, (size_t)lb);
    fa_plan_destroy(plan);
    plan = NULL;
    if (st == FA_STATUS_OK && a->backward) {
        st = upload_any(g, &p, FA_TENSOR_DO, &d->d_o, &b.d_o);
        if (st == FA_STATUS_OK)
            st = upload_any(g, &p, FA_TENSOR_DQ, NULL, &b.dq);
        if (st == FA_STATUS_OK)
            st = upload_any(g, &p, FA_TENSOR_DK, NULL, &b.dk);
        if (st == FA_STATUS_OK)
            st = upload_any(g, &p, FA_TENSOR_DV, NULL, &b.dv);
        if (st == FA_STATUS_OK)
            st = fa_plan_create_backward(g, &p, &plan);
        x.d_o = b.d_o, x.dq = b.dq, x.dk = b.dk, x.dv = b.dv, x.d_sinks = b.d_sinks;
        if (st == FA_STATUS_OK)
            st = fa_run(g, plan, &x);
        if (st == FA_STATUS_OK)
            st = download(&p, &p.q, b.dq, dq);
        if (st == FA_STATUS_OK)
            st = download(&p, &p.k, b.dk, dk);
        if (st == FA_STATUS_OK)
            st = download(&p, &p.k, b.dv, dv);
        fa_plan_destroy(plan);
    }
    bufs_free(&b);
    int rc = st == FA_STATUS_OK ? 0 : cli_lib_error(st, g, NULL);
    fa_context_destroy(g);
    return rc;
}

/* One tensor against its reference: prints the line; 1 when it fails the tolerance. */
static int check_one(const char *name, const cli_tensor *x, const cli_tensor *ref, double atol,
                     double rtol)
{
    cli_compare c;
    cli_tensor_compare(x, ref, &c);
    int bad = c.mismatches > 0 || !(c.max_err <= atol + rtol * c.max_ref);
    printf("check %-3s max|x - ref| %.3g (allowed %.3g), nmse %.3g: %s\n", name, c.max_err,
           atol + rtol * c.max_ref, c.nmse, bad ? "FAIL" : "ok");
    return bad;
}

/* Rank 0: the gathered outputs against the golden. f16 and bf16 O and gradients are rounded
 * at each merge or partial, so the tolerance grows with P. */
static int check(const ring_args *a, ring_data *d, int P)
{
    cli_tensor o = {0}, dq = {0}, dk = {0}, dv = {0};
    int64_t N = d->whole.seqlen_q, Nk = d->whole.seqlen_k, B = d->whole.batch;
    int64_t H = d->whole.heads_q;
    float *lse = calloc((size_t)(B * H * N) + 1, sizeof(float));
    int rc = !lse || local_alloc(&o, "O", &d->q, N) ||
             (a->backward && (local_alloc(&dq, "dQ", &d->q, N) ||
                              local_alloc(&dk, "dK", &d->k, Nk) ||
                              local_alloc(&dv, "dV", &d->k, Nk)));
    rc = rc ? CLI_EXIT_FAIL : golden(a, d, &o, lse, &dq, &dk, &dv);
    double atol, rtol;
    cli_check_tolerance(d->whole.dtype, &atol, &rtol);
    if (d->whole.dtype != FA_DTYPE_F32) {
        atol *= P;
        rtol *= P;
    }
    if (!rc) {
        rc |= check_one("O", &d->o, &o, atol, rtol);
        cli_tensor gl = {{B, H, N, 1}, (size_t)(B * H * N), lse};
        cli_tensor rl = {{B, H, N, 1}, (size_t)(B * H * N), d->lse};
        rc |= check_one("LSE", &rl, &gl, 1e-4, 1e-5);
        rc |= a->backward ? check_one("dQ", &d->dq, &dq, 4 * atol, 4 * rtol) : 0;
        rc |= a->backward ? check_one("dK", &d->dk, &dk, 4 * atol, 4 * rtol) : 0;
        rc |= a->backward ? check_one("dV", &d->dv, &dv, 4 * atol, 4 * rtol) : 0;
    }
    cli_tensor_free(&o);
    cli_tensor_free(&dq);
    cli_tensor_free(&dk);
    cli_tensor_free(&dv);
    free(lse);
    return rc ? CLI_EXIT_FAIL : 0;
}

/* Seconds for P - 1 ring shifts of `bytes` with nothing to hide them behind: the transfer
 * time the ring's steps overlap with compute. */
static double transfer_only(const fa_ring_transport *t, size_t bytes)
{
    if (t->size < 2 || bytes == 0 || bytes > (size_t)INT32_MAX)
        return 0.0;
    char *out = calloc(1, bytes), *in = malloc(bytes);
    double took = 0.0;
    if (out && in) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = cli_now_ms();
        for (int step = 0; step + 1 < t->size; step++)
            MPI_Sendrecv(out, (int)bytes, MPI_BYTE, (t->rank + 1) % t->size, 9, in, (int)bytes,
                         MPI_BYTE, (t->rank + t->size - 1) % t->size, 9, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
        took = (cli_now_ms() - t0) * 1e-3;
    }
    free(out);
    free(in);
    return took;
}

enum { STAT_TOTAL, STAT_COMPUTE, STAT_CPU, STAT_WAIT, STAT_XFER, STAT_PEAK, STAT_ROWS,
       STAT_BTOTAL, STAT_BCOMPUTE, STAT_BCPU, STAT_BWAIT, STAT_XN, STAT_XHID, STAT_N };

/* Rank 0 prints each rank's forward (and backward) times and memory, and the summary lines:
 * the balance (max / mean rank time) and the fraction of transfer time hidden. */
static void report(const ring_args *a, const fa_ring_transport *t, ring_data *d)
{
    int64_t rows = 0; /* the largest block, the same size on every rank */
    for (int r = 0; r < t->size; r++) {
        fa_ring_slice s;
        fa_ring_slice_of(a->ring_layout, d->whole.seqlen_k, t->size, r, &s);
        rows = s.rows > rows ? s.rows : rows;
    }
    size_t kv = 2 * (size_t)(d->whole.batch * d->whole.heads_kv * d->whole.head_dim) *
                fa_dtype_size(d->whole.dtype) * (size_t)rows;
    double mine[STAT_N] = {d->fwd.total_s, d->fwd.compute_s, d->fwd.compute_cpu_s,
                           d->fwd.wait_s, transfer_only(t, kv + 256), (double)d->peak,
                           (double)d->slice.rows, d->bwd.total_s, d->bwd.compute_s,
                           d->bwd.compute_cpu_s, d->bwd.wait_s, (double)d->fwd.transfers,
                           (double)d->fwd.transfers_hidden};
    double *all = t->rank == 0 ? calloc((size_t)t->size * STAT_N, sizeof(double)) : NULL;
    MPI_Gather(mine, STAT_N, MPI_DOUBLE, all, STAT_N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (t->rank != 0 || !all)
        return;
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("command: mpirun -np %d flashattn", t->size);
    for (int i = 0; i < a->argc; i++)
        printf(" %s", a->argv[i]);
    printf("\ndevice: %s (each rank); date: %s\n%s\n", d->device, date, d->transfers);
    double max = 0, cmax = 0, csum = 0, umax = 0, usum = 0, wmin = 1e30, xfer = 0, bmax = 0,
           bsum = 0, xn = 0, xhid = 0;
    for (int r = 0; r < t->size; r++) {
        const double *s = all + r * STAT_N;
        char peak[64];
        cli_format_bytes((uint64_t)s[STAT_PEAK], peak, sizeof peak);
        if (!a->quiet)
            printf("rank %d: rows %.0f, forward %.3f ms (compute %.3f, its cpu %.3f, wait %.3f; "
                   "shifts alone %.3f; transfers done within compute %.0f/%.0f), peak device "
                   "memory %s\n", r, s[STAT_ROWS], s[STAT_TOTAL] * 1e3, s[STAT_COMPUTE] * 1e3,
                   s[STAT_CPU] * 1e3, s[STAT_WAIT] * 1e3, s[STAT_XFER] * 1e3, s[STAT_XHID],
                   s[STAT_XN], peak);
        if (!a->quiet && a->backward)
            printf("rank %d: backward %.3f ms (compute %.3f, its cpu %.3f, wait %.3f)\n", r,
                   s[STAT_BTOTAL] * 1e3, s[STAT_BCOMPUTE] * 1e3, s[STAT_BCPU] * 1e3,
                   s[STAT_BWAIT] * 1e3);
        max = s[STAT_TOTAL] > max ? s[STAT_TOTAL] : max;
        cmax = s[STAT_COMPUTE] > cmax ? s[STAT_COMPUTE] : cmax;
        csum += s[STAT_COMPUTE];
        umax = s[STAT_CPU] > umax ? s[STAT_CPU] : umax;
        usum += s[STAT_CPU];
        wmin = s[STAT_WAIT] < wmin ? s[STAT_WAIT] : wmin;
        xfer += s[STAT_XFER] / t->size;
        bmax = s[STAT_BCPU] > bmax ? s[STAT_BCPU] : bmax;
        bsum += s[STAT_BCPU];
        xn += s[STAT_XN];
        xhid += s[STAT_XHID];
    }
    /* The rank that waits least waited for its transfers alone, not for a slower neighbour. */
    double hidden = xfer > 0 ? 1.0 - (wmin < xfer ? wmin / xfer : 1.0) : 1.0;
    /* Balance: max / mean over ranks of the compute's wall time, and of its CPU time, which
     * counts the work whatever else shared the cores (oversubscribed ranks, other jobs). */
    printf("forward: slowest rank %.3f ms; compute max/mean %.3f (cpu time %.3f); shifts alone "
           "%.3f ms, least wait %.3f ms: transfer hidden %.0f%%\n", max * 1e3,
           csum > 0 ? cmax * t->size / csum : 0.0, usum > 0 ? umax * t->size / usum : 0.0,
           xfer * 1e3, wmin * 1e3, 100.0 * hidden);
    if (xn > 0) /* a poll between two blocks saw the exchange complete: wholly hidden */
        printf("forward: transfers done within the compute %.0f of %.0f (%.0f%%)\n", xhid, xn,
               100.0 * xhid / xn);
    if (a->backward)
        printf("backward: compute max/mean (cpu time) %.3f\n",
               bsum > 0 ? bmax * t->size / bsum : 0.0);
    free(all);
}

/* Rank 0 writes the gathered outputs. */
static int save(const ring_args *a, ring_data *d)
{
    fa_layout l = a->pa.layout;
    fa_dtype dt = d->whole.dtype;
    if (a->out_path && cli_tensor_save(a->out_path, l, &d->o, dt))
        return CLI_EXIT_FAIL;
    if (a->lse_path) {
        char err[256];
        int64_t shape[3] = {d->whole.batch, d->whole.heads_q, d->whole.seqlen_q};
        if (npy_write(a->lse_path, NPY_F32, 3, shape, d->lse, err, sizeof err) != 0)
            return cli_error("%s: %s", a->lse_path, err);
    }
    if ((a->dq_path && cli_tensor_save(a->dq_path, l, &d->dq, dt)) ||
        (a->dk_path && cli_tensor_save(a->dk_path, l, &d->dk, dt)) ||
        (a->dv_path && cli_tensor_save(a->dv_path, l, &d->dv, dt)))
        return CLI_EXIT_FAIL;
    return 0;
}

/* Everything after MPI_Init on one rank: inputs, slice, ring, gather, save, check, report. */
static int ring_body(const ring_args *a, const fa_ring_transport *t, ring_data *d)
{
    int rc = load_inputs(a, d);
    int bad = rc != 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any)
        return rc ? rc : CLI_EXIT_FAIL;
    fa_ring_slice_of(a->ring_layout, d->whole.seqlen_q, t->size, t->rank, &d->slice);
    fa_ring_slice_of(a->ring_layout, d->whole.seqlen_k, t->size, t->rank, &d->kslice);
    int64_t n = d->slice.rows, N = d->whole.seqlen_q;
    int64_t nk = d->kslice.rows, Nk = d->whole.seqlen_k;
    rc = local_alloc(&d->lq, "Q", &d->q, n) || local_alloc(&d->lk, "K", &d->k, nk) ||
         local_alloc(&d->lv, "V", &d->v, nk) || local_alloc(&d->lo, "O", &d->q, n);
    rc = rc || (a->backward && (local_alloc(&d->ldo, "dO", &d->q, n) ||
                                local_alloc(&d->ldq, "dQ", &d->q, n) ||
                                local_alloc(&d->ldk, "dK", &d->k, nk) ||
                                local_alloc(&d->ldv, "dV", &d->k, nk)));
    d->llse = calloc((size_t)(d->whole.batch * d->whole.heads_q * n) + 1, sizeof(float));
    if (rc || !d->llse)
        return CLI_EXIT_FAIL; /* host memory: every rank of this machine runs short alike */
    move_rows(&d->slice, &d->q, &d->lq, 1);
    move_rows(&d->kslice, &d->k, &d->lk, 1);
    move_rows(&d->kslice, &d->v, &d->lv, 1);
    if (a->backward)
        move_rows(&d->slice, &d->d_o, &d->ldo, 1);
    /* The ring tells every rank of any rank's failure, so each returns the same way here. */
    if (ring_device(a, t, d))
        return CLI_EXIT_FAIL;
    if (t->rank == 0) {
        d->lse = calloc((size_t)(d->whole.batch * d->whole.heads_q * N) + 1, sizeof(float));
        rc = !d->lse || local_alloc(&d->o, "O", &d->q, N) ||
             (a->backward && (local_alloc(&d->dq, "dQ", &d->q, N) ||
                              local_alloc(&d->dk, "dK", &d->k, Nk) ||
                              local_alloc(&d->dv, "dV", &d->k, Nk)));
    }
    gather_rows(a, t, &d->lo, &d->o, N, d->whole.head_dim);
    cli_tensor ll = {{d->whole.batch, d->whole.heads_q, n, 1}, 0, d->llse};
    cli_tensor wl = {{d->whole.batch, d->whole.heads_q, N, 1}, 0, d->lse};
    gather_rows(a, t, &ll, &wl, N, 1);
    if (a->backward) {
        gather_rows(a, t, &d->ldq, &d->dq, N, d->whole.head_dim);
        gather_rows(a, t, &d->ldk, &d->dk, Nk, d->whole.head_dim);
        gather_rows(a, t, &d->ldv, &d->dv, Nk, d->whole.head_dim);
    }
    report(a, t, d);
    if (t->rank == 0 && !rc)
        rc = save(a, d);
    if (t->rank == 0 && !rc && a->check)
        rc = check(a, d, t->size);
    return rc;
}

static void data_free(ring_data *d)
{
    cli_tensor *all[16] = {&d->q, &d->k, &d->v, &d->d_o, &d->o, &d->dq, &d->dk, &d->dv,
                           &d->lq, &d->lk, &d->lv, &d->ldo, &d->lo, &d->ldq, &d->ldk, &d->ldv};
    for (int i = 0; i < 16; i++)
        cli_tensor_free(all[i]);
    free(d->lse);
    free(d->llse);
    cli_mod_data_free(&d->mods);
    cli_mod_files_free(&d->mod_files);
}

int cli_cmd_ring(int argc, char **argv)
{
    static const cli_cmd cmd = {
        "ring", "[options]",
        "Ring attention across MPI ranks: mpirun -np P flashattn ring [options]. Each rank\n"
        "reads the whole inputs (--q/--k/--v .npy in --layout, or random from --seed; K and V\n"
        "may be longer or shorter than Q: --seq-k), takes its slices of Q's rows and K's rows\n"
        "(--ring-layout zigzag: chunks r and 2P-1-r of 2P; contiguous: chunk r of P),\n"
        "runs the ring forward on --backend (and with --backward or --do the ring backward);\n"
        "rank 0 gathers O and LSE (dQ, dK, dV), writes them in the inputs' layout, compares them\n"
        "with the cpu golden on the whole problem (--check), and prints each rank's time, the\n"
        "time it waited on transfers, the same shifts timed alone, and its peak device memory.\n"
        "On one machine as root: mpirun --allow-run-as-root --oversubscribe -np 4 flashattn ring\n"
        "(with pocl: -x POCL_CPU_MAX_CU_COUNT=1 gives each rank one core). docs/distributed.md."};
    ring_args a;
    ring_data d;
    cli_opt opts[RING_NOPTS];
    memset(&a, 0, sizeof a);
    memset(&d, 0, sizeof d);
    cli_problem_defaults(&a.pa);
    cli_mod_defaults(&a.mods);
    a.cmd = &cmd;
    a.backend = FA_BACKEND_AUTO;
    a.ring_layout = FA_RING_ZIGZAG;
    a.seed = 1;
    a.repeat = 1;
    a.argc = argc;
    a.argv = argv;
    size_t n = ring_table(&a, opts);
    int r = cli_parse(&cmd, argc, argv, opts, n);
    if (r == CLI_PARSE_HELP) {
        cli_print_help(&cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (r != CLI_PARSE_OK || ring_validate(&cmd, &a) != 0 ||
        cli_mod_validate(&cmd, &a.mods, opts, n) != 0)
        return CLI_EXIT_USAGE;
    cli_problem_resolve(&a.pa, opts, n);
    MPI_Init(&argc, &argv);
    fa_ring_transport t;
    int rc = CLI_EXIT_FAIL;
    if (fa_ring_transport_mpi(MPI_COMM_WORLD, &t) != FA_STATUS_OK)
        cli_error("no MPI transport");
    else
        rc = ring_body(&a, &t, &d);
    data_free(&d);
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
