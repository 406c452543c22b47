/*
 * cli_run.c - the `flashattn run` subcommand: one attention forward pass on a chosen backend,
 * timed, with inputs either random (seeded, so runs are repeatable) or read from .npy files,
 * optional .npy outputs, and --check against the CPU golden backend on the same inputs.
 *
 * Order of work: resolve the shape (from the options or the files), let the library validate
 * and plan it, check what the run will allocate against the host's and the device's memory, and
 * only then allocate and fill the big host tensors, so that a bad problem is reported by the
 * library and a too large one by its size, in milliseconds, rather than by a failed allocation
 * or an OOM kill.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkdir */
#endif

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_memory.h"
#include "cli_session.h"
#include "cli_tensor.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#include <direct.h>
#define cli_mkdir(path) _mkdir(path)
#else
#include <sys/stat.h>
#define cli_mkdir(path) mkdir(path, 0777)
#endif

/* Longest path built for --save-inputs. */
#define CLI_PATH_MAX 4096
/* Most timed repetitions. */
#define CLI_MAX_REPEAT 100000
/* Width of the key column of the report. */
#define KEY "%-12s"

typedef struct run_args {
    cli_problem_args pa;
    fa_backend backend;
    int64_t device, repeat;
    uint64_t seed;
    const char *q_path, *k_path, *v_path, *out_path, *lse_path, *save_dir;
    int check;
} run_args;

/* Host tensors of one run: inputs, output, reference output and LSE. */
typedef struct run_data {
    cli_tensor q, k, v, o, ref;
    float *lse;
    size_t lse_count;
} run_data;

#define RUN_NOPTS (CLI_PROBLEM_NOPTS + 11)

/* The option table; entries point into *a. Returns the number of entries. */
static size_t run_table(run_args *a, cli_opt *opts)
{
    const cli_opt where[2] = {
        {"backend", CLI_BACKEND, &a->backend, 0, 0, "B", "auto, cpu, opencl or cuda (default auto)",
         0},
        {"device", CLI_INT, &a->device, 0, INT32_MAX, "N", "device index (default 0)", 0},
    };
    const cli_opt rest[RUN_NOPTS - CLI_PROBLEM_NOPTS - 2] = {
        {"seed", CLI_U64, &a->seed, 0, 0, "S", "seed of the random inputs (default 1)", 0},
        {"q", CLI_STRING, &a->q_path, 0, 0, "FILE",
         "Q from .npy [batch, heads, seq, dim], '<f4' or '<f2'", 0},
        {"k", CLI_STRING, &a->k_path, 0, 0, "FILE", "K from .npy [batch, heads_kv, seq_k, dim]", 0},
        {"v", CLI_STRING, &a->v_path, 0, 0, "FILE", "V from .npy, the shape of K", 0},
        {"save-inputs", CLI_STRING, &a->save_dir, 0, 0, "DIR",
         "write the inputs as DIR/q.npy, k.npy, v.npy", 0},
        {"out", CLI_STRING, &a->out_path, 0, 0, "FILE", "write O as .npy (float32 for bf16)", 0},
        {"lse", CLI_STRING, &a->lse_path, 0, 0, "FILE",
         "write LSE as float32 .npy [batch, heads, seq]", 0},
        {"repeat", CLI_INT, &a->repeat, 1, CLI_MAX_REPEAT, "N",
         "time the median of N runs after one warm-up (default 1)", 0},
        {"check", CLI_FLAG, &a->check, 0, 0, NULL, "compare O with the CPU golden backend", 0},
    };
    memcpy(opts, where, sizeof where);
    cli_problem_opts(&a->pa, opts + 2);
    memcpy(opts + 2 + CLI_PROBLEM_NOPTS, rest, sizeof rest);
    return RUN_NOPTS;
}

/* Options that make no sense together. */
static int run_validate(const cli_cmd *cmd, const run_args *a, const cli_opt *opts, size_t n)
{
    static const char *const shape_opts[] = {"batch", "heads", "heads-kv", "seq",
                                             "seq-k", "dim",   "seed"};
    int files = (a->q_path != NULL) + (a->k_path != NULL) + (a->v_path != NULL);
    size_t i;
    if (files != 0 && files != 3)
        return cli_usage_error(cmd, "--q, --k and --v go together");
    for (i = 0; files && i < sizeof shape_opts / sizeof shape_opts[0]; i++)
        if (cli_find(opts, n, shape_opts[i])->seen)
            return cli_usage_error(
                cmd, "--%s cannot be combined with --q (the files give the shape)", shape_opts[i]);
    return 0;
}

static void shape_text(const int64_t s[4], char *buf, size_t size)
{
    snprintf(buf, size, "[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", s[0], s[1], s[2],
             s[3]);
}

/* K and V must agree with Q (batch, head_dim, heads dividing) and with each other. */
static int check_file_shapes(const run_args *a, const run_data *d)
{
    const int64_t *q = d->q.shape, *k = d->k.shape, *v = d->v.shape;
    char s1[96], s2[96];
    if (k[0] != q[0])
        return cli_error("%s: batch %" PRId64 " does not match %s's %" PRId64, a->k_path, k[0],
                         a->q_path, q[0]);
    if (k[3] != q[3])
        return cli_error("%s: head_dim %" PRId64 " does not match %s's %" PRId64, a->k_path, k[3],
                         a->q_path, q[3]);
    if (k[1] == 0 || q[1] % k[1] != 0)
        return cli_error("%s: its %" PRId64 " heads do not divide %s's %" PRId64 " heads",
                         a->k_path, k[1], a->q_path, q[1]);
    if (memcmp(k, v, 4 * sizeof *k) != 0) {
        shape_text(v, s1, sizeof s1);
        shape_text(k, s2, sizeof s2);
        return cli_error("%s: shape %s does not match %s's %s", a->v_path, s1, a->k_path, s2);
    }
    return 0;
}

/* Loads --q/--k/--v; the problem's shape (and dtype, unless --dtype was given) come from them. */
static int load_inputs(run_args *a, int dtype_given, run_data *d)
{
    npy_dtype dq, dk, dv;
    if (cli_tensor_load(a->q_path, &d->q, &dq) || cli_tensor_load(a->k_path, &d->k, &dk) ||
        cli_tensor_load(a->v_path, &d->v, &dv))
        return CLI_EXIT_FAIL;
    if (dk != dq || dv != dq)
        return cli_error("%s: dtype '%s' does not match %s's '%s'",
                         dk != dq ? a->k_path : a->v_path, npy_dtype_descr(dk != dq ? dk : dv),
                         a->q_path, npy_dtype_descr(dq));
    if (check_file_shapes(a, d) != 0)
        return CLI_EXIT_FAIL;
    a->pa.batch = d->q.shape[0];
    a->pa.heads = d->q.shape[1];
    a->pa.seq = d->q.shape[2];
    a->pa.dim = d->q.shape[3];
    a->pa.heads_kv = d->k.shape[1];
    a->pa.seq_k = d->k.shape[2];
    if (!dtype_given)
        a->pa.dtype = dq == NPY_F16 ? FA_DTYPE_F16 : FA_DTYPE_F32;
    return 0;
}

/* Random Q, K, V from one splitmix64 stream, in that order, in logical BHSD order. */
static int random_inputs(const run_args *a, const fa_problem *p, run_data *d)
{
    int64_t qs[4], kvs[4];
    uint64_t state = a->seed;
    cli_problem_shapes(p, qs, kvs);
    if (cli_tensor_alloc(&d->q, "q", qs[0], qs[1], qs[2], qs[3]) ||
        cli_tensor_alloc(&d->k, "k", kvs[0], kvs[1], kvs[2], kvs[3]) ||
        cli_tensor_alloc(&d->v, "v", kvs[0], kvs[1], kvs[2], kvs[3]))
        return CLI_EXIT_FAIL;
    cli_tensor_fill_random(&d->q, &state);
    cli_tensor_fill_random(&d->k, &state);
    cli_tensor_fill_random(&d->v, &state);
    return 0;
}

static int join_path(char *buf, const char *dir, const char *name)
{
    int n = snprintf(buf, CLI_PATH_MAX, "%s/%s", dir, name);
    if (n < 0 || n >= CLI_PATH_MAX)
        return cli_error("%s: path too long", dir);
    return 0;
}

/* --save-inputs: the rounded inputs, so that a later --q/--k/--v run sees the same bytes. */
static int save_inputs(const char *dir, const run_data *d, fa_dtype dtype)
{
    char path[CLI_PATH_MAX];
    cli_mkdir(dir); /* an existing folder is fine; other problems surface when writing */
    if (join_path(path, dir, "q.npy") || cli_tensor_save(path, &d->q, dtype) ||
        join_path(path, dir, "k.npy") || cli_tensor_save(path, &d->k, dtype) ||
        join_path(path, dir, "v.npy") || cli_tensor_save(path, &d->v, dtype))
        return CLI_EXIT_FAIL;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One warm-up forward (kernel builds, caches), then the median of `repeat` timed ones. */
static int timed_forward(cli_session *s, int64_t repeat, double *median_ms)
{
    double *t = malloc((size_t)repeat * sizeof *t);
    int64_t i;
    int rc = 0;
    if (!t)
        return cli_error("out of host memory");
    rc = cli_session_forward(s);
    for (i = 0; i < repeat && rc == 0; i++) {
        double t0 = cli_now_ms();
        rc = cli_session_forward(s);
        t[i] = cli_now_ms() - t0;
    }
    if (rc == 0) {
        qsort(t, (size_t)repeat, sizeof *t, cmp_double);
        *median_ms = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    }
    free(t);
    return rc;
}

static void print_setup(const run_args *a, const cli_session *s)
{
    char line[512], sram[64];
    cli_describe_context(s->ctx, a->backend == FA_BACKEND_AUTO, line, sizeof line);
    printf(KEY "%s\n", "backend", line);
    const char *note = fa_context_backend_note(s->ctx); /* "auto: " and why, when auto picked */
    if (strncmp(note, "auto: ", 6) == 0)
        printf(KEY "%s\n", "auto", note + 6);
    cli_describe_problem(&s->problem, a->pa.layout, line, sizeof line);
    printf(KEY "%s\n", "problem", line);
    if (a->q_path)
        printf(KEY "%s, %s, %s\n", "inputs", a->q_path, a->k_path, a->v_path);
    else
        printf(KEY "uniform [-1, 1), seed %" PRIu64 "\n", "inputs", a->seed);
    cli_format_bytes(fa_plan_sram_bytes(s->plan), sram, sizeof sram);
    printf(KEY "Br %" PRId32 ", Bc %" PRId32 ", work-group %" PRId32
               ", sram %s, work-groups %" PRIu64 "\n",
           "plan", fa_plan_block_r(s->plan), fa_plan_block_c(s->plan),
           fa_plan_work_group_size(s->plan), sram, fa_plan_work_groups(s->plan));
}

static void print_timing(const run_args *a, const cli_session *s, double ms)
{
    const fa_problem *p = &s->problem;
    double flops = 4.0 * (double)p->batch * (double)p->heads_q * (double)p->seqlen_q *
                   (double)p->seqlen_k * (double)p->head_dim;
    uint64_t peak = 0;
    char mem[64];
    if (p->mask != FA_MASK_NONE)
        flops *= 0.5;
    printf(KEY "%.3f ms (median of %" PRId64 " after 1 warm-up)\n", "time", ms, a->repeat);
    if (ms > 0.0)
        printf(KEY "%.2f GFLOP/s\n", "throughput", flops / (ms * 1e6));
    else
        printf(KEY "n/a (too fast to time)\n", "throughput");
    fa_context_memory(s->ctx, NULL, &peak);
    cli_format_bytes(peak, mem, sizeof mem);
    printf(KEY "%s\n", "peak memory", mem);
}

/* Host O (and LSE) of the problem's shape. */
static int alloc_outputs(const cli_session *s, int want_lse, run_data *d)
{
    const fa_problem *p = &s->problem;
    if (cli_tensor_alloc(&d->o, "o", p->batch, p->heads_q, p->seqlen_q, p->head_dim) != 0)
        return CLI_EXIT_FAIL;
    if (!want_lse)
        return 0;
    /* head_dim >= 1 (the plan exists), so the rows number at most o's elements. */
    d->lse_count = (size_t)(p->batch * p->heads_q * p->seqlen_q);
    d->lse = malloc(d->lse_count ? d->lse_count * sizeof(float) : 1);
    return d->lse ? 0 : cli_error("out of host memory for the LSE");
}

static int write_outputs(const run_args *a, const cli_session *s, const run_data *d)
{
    const fa_problem *p = &s->problem;
    const int64_t lse_shape[3] = {p->batch, p->heads_q, p->seqlen_q};
    char err[256];
    if (a->out_path) {
        if (cli_tensor_save(a->out_path, &d->o, p->dtype) != 0)
            return CLI_EXIT_FAIL;
        printf(KEY "%s (%s)\n", "wrote O", a->out_path, npy_dtype_descr(cli_npy_dtype(p->dtype)));
    }
    if (a->lse_path) {
        if (npy_write(a->lse_path, NPY_F32, 3, lse_shape, d->lse, err, sizeof err) != 0)
            return cli_error("%s: %s", a->lse_path, err);
        printf(KEY "%s (<f4)\n", "wrote LSE", a->lse_path);
    }
    return 0;
}

/* Compares O with the reference; prints the errors and returns CLI_EXIT_FAIL when they differ
 * on NaN or infinity or by more than the tolerance. */
static int compare(const cli_tensor *o, const cli_tensor *ref, fa_dtype dtype)
{
    cli_compare c;
    double atol, rtol, tol;
    char why[256];
    cli_tensor_compare(o, ref, &c);
    cli_check_tolerance(dtype, &atol, &rtol);
    tol = atol + rtol * c.max_ref;
    printf(KEY "%.3e\n", "max abs err", c.max_err);
    printf(KEY "%.3e\n", "NMSE", c.nmse);
    printf(KEY "%.3e = %g + %g * max|ref| %.4g (%s)\n", "tolerance", tol, atol, rtol, c.max_ref,
           fa_dtype_name(dtype));
    if (c.mismatches) {
        printf(KEY "FAIL\n", "check");
        cli_describe_mismatch(&c, ref, why, sizeof why);
        return cli_error("check failed: %s", why);
    }
    if (c.max_err > tol) {
        printf(KEY "FAIL\n", "check");
        return cli_error("check failed: max abs error %.3e exceeds the tolerance %.3e", c.max_err,
                         tol);
    }
    printf(KEY "PASS\n", "check");
    return 0;
}

/* --check: the same problem and inputs on the CPU golden backend, with the planner's own tiles. */
static int check_against_cpu(const cli_session *s, run_data *d)
{
    cli_session ref;
    fa_problem p = s->problem;
    char line[512];
    int rc;
    memset(&ref, 0, sizeof ref);
    p.block_r = 0;
    p.block_c = 0;
    rc = cli_session_open(&ref, FA_BACKEND_CPU, 0, &p);
    rc = rc ? rc : cli_session_buffers(&ref, 0);
    rc = rc ? rc : cli_session_upload(&ref, &d->q, &d->k, &d->v);
    rc = rc ? rc : cli_session_forward(&ref);
    rc = rc ? rc
            : cli_tensor_alloc(&d->ref, "reference o", p.batch, p.heads_q, p.seqlen_q, p.head_dim);
    rc = rc ? rc : cli_session_download(&ref, &d->ref, NULL);
    if (rc == 0) {
        cli_describe_context(ref.ctx, 0, line, sizeof line);
        printf(KEY "%s\n", "reference", line);
        rc = compare(&d->o, &d->ref, p.dtype);
    }
    cli_session_close(&ref);
    return rc;
}

/* Elements of a [batch, heads, seq, head_dim] shape (saturating). */
static uint64_t shape_elems(const int64_t s[4])
{
    return cli_mul_sat(cli_mul_sat((uint64_t)s[0], (uint64_t)s[1]),
                       cli_mul_sat((uint64_t)s[2], (uint64_t)s[3]));
}

/*
 * Everything the run allocates from here on, checked before the first large allocation: the
 * host tensors (f32; Q, K and V only when random, files are held already), one transfer image
 * at a time, the device buffers and, with --check, the CPU reference session's buffers (host
 * memory) and the reference O.
 */
static int check_memory(const run_args *a, const cli_session *s)
{
    const fa_problem *p = &s->problem;
    int64_t qs[4], kvs[4];
    size_t img[4];
    uint64_t nq, nkv, rows, host_floats, device = 0, staging = 0;
    cli_memory_need need;
    char why[512];
    int i;
    cli_problem_shapes(p, qs, kvs);
    if (cli_image_bytes(qs, &p->q, p->dtype, &img[0]) ||
        cli_image_bytes(kvs, &p->k, p->dtype, &img[1]) ||
        cli_image_bytes(kvs, &p->v, p->dtype, &img[2]) ||
        cli_image_bytes(qs, &p->o, p->dtype, &img[3]))
        return CLI_EXIT_FAIL;
    for (i = 0; i < 4; i++) {
        device = cli_add_sat(device, img[i]);
        staging = img[i] > staging ? img[i] : staging;
    }
    nq = shape_elems(qs);
    nkv = shape_elems(kvs);
    rows = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q),
                       (uint64_t)p->seqlen_q);
    host_floats = a->q_path ? nq : cli_add_sat(cli_mul_sat(nq, 2), cli_mul_sat(nkv, 2));
    if (a->lse_path)
        host_floats = cli_add_sat(host_floats, rows);
    if (a->check)
        host_floats = cli_add_sat(host_floats, nq);
    need.host = cli_add_sat(cli_mul_sat(host_floats, sizeof(float)), staging);
    if (a->check)
        need.host = cli_add_sat(need.host, device);
    need.device = a->lse_path ? cli_add_sat(device, cli_mul_sat(rows, sizeof(float))) : device;
    if (cli_memory_fits(s->ctx, need, why, sizeof why) != 0)
        return cli_error("the run %s", why);
    return 0;
}

/* Everything after option parsing; d and s are released by the caller. */
static int run_body(run_args *a, int dtype_given, run_data *d, cli_session *s)
{
    int want_lse = a->lse_path != NULL;
    double ms = 0.0;
    fa_problem p;
    if ((a->out_path && cli_check_writable(a->out_path, "the O file") != 0) ||
        (a->lse_path && cli_check_writable(a->lse_path, "the LSE file") != 0))
        return CLI_EXIT_FAIL;
    if (a->q_path && load_inputs(a, dtype_given, d) != 0)
        return CLI_EXIT_FAIL;
    if (cli_problem_build(&a->pa, &p) != 0 ||
        cli_session_open(s, a->backend, (int)a->device, &p) != 0 || check_memory(a, s) != 0)
        return CLI_EXIT_FAIL;
    if (!a->q_path && random_inputs(a, &s->problem, d) != 0)
        return CLI_EXIT_FAIL;
    cli_tensor_round(&d->q, p.dtype);
    cli_tensor_round(&d->k, p.dtype);
    cli_tensor_round(&d->v, p.dtype);
    if (a->save_dir && save_inputs(a->save_dir, d, p.dtype) != 0)
        return CLI_EXIT_FAIL;
    if (cli_session_buffers(s, want_lse) || cli_session_upload(s, &d->q, &d->k, &d->v) ||
        alloc_outputs(s, want_lse, d))
        return CLI_EXIT_FAIL;
    print_setup(a, s);
    fflush(stdout);
    if (timed_forward(s, a->repeat, &ms) || cli_session_download(s, &d->o, d->lse))
        return CLI_EXIT_FAIL;
    print_timing(a, s, ms);
    if (write_outputs(a, s, d) != 0)
        return CLI_EXIT_FAIL;
    return a->check ? check_against_cpu(s, d) : 0;
}

int cli_cmd_run(int argc, char **argv)
{
    static const cli_cmd cmd = {
        "run", "[options]",
        "Runs one attention forward pass O = softmax(Q K^T * scale) V and reports its time,\n"
        "throughput and peak device memory. Inputs are random (seeded) or --q/--k/--v .npy\n"
        "files (float32 or float16, C order, [batch, heads, seq, head_dim]). --check compares O\n"
        "with the CPU golden backend and fails when max|O - ref| > atol + rtol * max|ref| or\n"
        "when they disagree on NaN or infinity (NaN where the reference has NaN agrees)."};
    run_args a;
    run_data d;
    cli_session s;
    cli_opt opts[RUN_NOPTS];
    size_t n;
    int r;

    memset(&a, 0, sizeof a);
    memset(&d, 0, sizeof d);
    memset(&s, 0, sizeof s);
    cli_problem_defaults(&a.pa);
    a.backend = FA_BACKEND_AUTO;
    a.repeat = 1;
    a.seed = 1;
    n = run_table(&a, opts);
    r = cli_parse(&cmd, argc, argv, opts, n);
    if (r == CLI_PARSE_HELP) {
        cli_print_help(&cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (r != CLI_PARSE_OK || run_validate(&cmd, &a, opts, n) != 0)
        return CLI_EXIT_USAGE;
    cli_problem_resolve(&a.pa, opts, n);
    r = run_body(&a, cli_find(opts, n, "dtype")->seen, &d, &s);
    cli_session_close(&s);
    cli_tensor_free(&d.q);
    cli_tensor_free(&d.k);
    cli_tensor_free(&d.v);
    cli_tensor_free(&d.o);
    cli_tensor_free(&d.ref);
    free(d.lse);
    return r;
}
