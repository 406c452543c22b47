/*
 * cli_bench_sparse.c - `flashattn bench --block-sparse`: the block-sparse forward (with
 * --backward the backward alone) against the dense run of the same problem on one backend. Two
 * sweeps: random block masks at each --densities value for each --seq-list length (a fixed
 * count of random key blocks per query block, one mask for every head), and the Sparse
 * Transformer's fixed pattern (fixed:STRIDE, STRIDE = sqrt(key blocks) rounded, so its blocks
 * grow as N sqrt N) over --fixed-seq, with the growth exponent of each side fitted by least
 * squares on log time against log N, and with --plot a gnuplot figure of time against N.
 * Prints the command, device and date first (docs/benchmarks.md takes them with the tables).
 * Timing is not a test: nothing here asserts a speed.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* popen */
#endif

#include "cli_bench_report.h"
#include "cli_block_mask.h"
#include "cli_commands.h"
#include "cli_common.h"
#include "cli_seq.h"
#include "cli_session.h"
#include "cli_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPARSE_MAX_LIST 16

typedef struct sparse_args {
    fa_backend backend;
    int64_t heads, dim, repeat;
    int backward, cpu_time;
    const char *size, *densities, *seqs, *fixed, *plot;
    int32_t bq, bk;
    double dens[SPARSE_MAX_LIST];
    int64_t seq[SPARSE_MAX_LIST], fix[SPARSE_MAX_LIST];
    size_t ndens, nseq, nfix;
} sparse_args;

/* One timed problem: a session with random inputs and, when sparse, the mask's lists. */
static int time_problem(const sparse_args *a, fa_problem *p, const cli_bm_data *bm, double *ms)
{
    cli_session s;
    cli_tensor q, k, v;
    int64_t qs[4], ks[4];
    uint64_t state = 1;
    double t[64];
    int rc;
    memset(&s, 0, sizeof s);
    memset(&q, 0, sizeof q);
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    cli_problem_shapes(p, qs, ks);
    rc = cli_session_open(&s, a->backend, 0, p) ||
         (a->backward && cli_session_plan_backward(&s, p)) || cli_session_buffers(&s, 1) ||
         cli_tensor_alloc(&q, "q", qs[0], qs[1], qs[2], qs[3]) ||
         cli_tensor_alloc(&k, "k", ks[0], ks[1], ks[2], ks[3]) ||
         cli_tensor_alloc(&v, "v", ks[0], ks[1], ks[2], ks[3]);
    if (rc == 0) {
        cli_tensor_fill_random(&q, &state);
        cli_tensor_fill_random(&k, &state);
        cli_tensor_fill_random(&v, &state);
        rc = cli_session_upload(&s, &q, &k, &v) || (bm && cli_session_bm_buffers(&s, bm));
    }
    if (rc == 0 && a->backward) /* dO: Q's values, any input serves a timing */
        rc = cli_session_backward_buffers(&s) || cli_session_upload_do(&s, &q);
    /* One warm-up (kernel builds), then the median of the timed runs; the backward's forward
     * (its O and LSE) runs untimed before each. */
    for (int64_t i = 0; rc == 0 && i <= a->repeat; i++) {
        rc = a->backward ? cli_session_forward(&s) : 0;
        double t0 = a->cpu_time ? cli_cpu_ms() : cli_now_ms();
        rc = rc || (a->backward ? cli_session_backward(&s) : cli_session_forward(&s));
        if (i > 0)
            t[i - 1] = (a->cpu_time ? cli_cpu_ms() : cli_now_ms()) - t0;
    }
    for (int64_t i = 1; rc == 0 && i < a->repeat; i++) /* insertion sort: a few values */
        for (int64_t j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *ms = rc == 0 ? t[a->repeat / 2] : 0.0;
    cli_tensor_free(&q);
    cli_tensor_free(&k);
    cli_tensor_free(&v);
    cli_session_close(&s);
    return rc ? CLI_EXIT_FAIL : 0;
}

static void dense_problem(const sparse_args *a, int64_t n, fa_problem *p)
{
    fa_problem_init(p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, a->heads, a->heads, n, n, a->dim);
}

/* The diagonal and `count` random key blocks per query block (BigBird's window 0 and random
 * blocks, drawn per head from seed) into bm, and p's block-sparse fields. */
static int random_mask(const sparse_args *a, fa_problem *p, int32_t count, uint64_t seed,
                       cli_bm_data *bm)
{
    cli_bm_args ba;
    cli_bm_defaults(&ba);
    ba.pattern = "bigbird";
    ba.block_q = a->bq;
    ba.block_k = a->bk;
    ba.pat = (fa_block_pattern){FA_BLOCK_PATTERN_BIGBIRD, 0, 0, 0, count, seed};
    return cli_bm_apply(&ba, p, bm);
}

/* The fixed pattern of stride `stride` into bm, and p's block-sparse fields. */
static int fixed_mask(const sparse_args *a, fa_problem *p, int32_t stride, cli_bm_data *bm)
{
    cli_bm_args ba;
    cli_bm_defaults(&ba);
    ba.pattern = "fixed";
    ba.block_q = a->bq;
    ba.block_k = a->bk;
    ba.pat = (fa_block_pattern){FA_BLOCK_PATTERN_FIXED, 0, stride, 0, 0, 0};
    return cli_bm_apply(&ba, p, bm);
}

/* The fixed pattern's stride for a length: sqrt(key blocks), rounded (at least 1). */
static int32_t fixed_stride(int64_t key_blocks)
{
    int64_t s = (int64_t)floor(sqrt((double)key_blocks) + 0.5);
    return s < 1 ? 1 : (int32_t)s;
}

/* Least-squares slope of log y against log x: the growth exponent. */
static double growth(const int64_t *x, const double *y, size_t n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        double lx = log((double)x[i]), ly = log(y[i]);
        sx += lx;
        sy += ly;
        sxx += lx * lx;
        sxy += lx * ly;
    }
    double den = (double)n * sxx - sx * sx;
    return n > 1 && den != 0.0 ? ((double)n * sxy - sx * sy) / den : 0.0;
}

/* The density sweep: for each length the dense time, then each density's. */
static int density_sweep(const sparse_args *a)
{
    printf("\n## random block masks against dense (%s)\n\n", a->backward ? "backward" : "forward");
    printf("| N | density | blocks | ms | dense ms | ratio | 1.15 s + 0.05 |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < a->nseq; i++) {
        fa_problem p;
        double dense = 0.0;
        dense_problem(a, a->seq[i], &p);
        if (time_problem(a, &p, NULL, &dense) != 0)
            return CLI_EXIT_FAIL;
        int64_t nk = (a->seq[i] + a->bk - 1) / a->bk;
        for (size_t j = 0; j < a->ndens; j++) {
            cli_bm_data bm;
            double ms = 0.0;
            int32_t count = (int32_t)floor(a->dens[j] * (double)nk + 0.5) - 1; /* + diagonal */
            dense_problem(a, a->seq[i], &p);
            int rc = random_mask(a, &p, count < 0 ? 0 : count, 7 + j, &bm);
            rc = rc ? rc : time_problem(a, &p, &bm, &ms);
            double s = bm.all ? (double)bm.computed / (double)bm.all : 0.0;
            if (rc == 0)
                printf("| %lld | %.3f | %llu / %llu | %.2f | %.2f | %.3f | %.3f |\n",
                       (long long)a->seq[i], s, (unsigned long long)bm.computed,
                       (unsigned long long)bm.all, ms, dense, ms / dense, 1.15 * s + 0.05);
            cli_bm_data_free(&bm);
            if (rc != 0)
                return rc;
            fflush(stdout);
        }
    }
    return 0;
}

/* gnuplot's figure of time against N, log axes, the fixed pattern next to dense, each with
 * its fitted exponent in the legend; PNG, or SVG when the name ends in ".svg". */
static int bench_sparse_plot(const sparse_args *a, const int64_t *n, const double *sparse,
                             const double *dense, size_t count)
{
    const char *path = a->plot;
    FILE *g;
    if (bench_find_gnuplot() != 0)
        return CLI_EXIT_FAIL;
    g = popen("gnuplot", "w");
    if (!g)
        return cli_error("--plot: cannot start gnuplot");
    fprintf(g, "set terminal %s size 800,560\nset output '%s'\n",
            bench_plot_is_svg(path) ? "svg" : "pngcairo", path);
    fprintf(g, "set logscale xy 2\nset xlabel 'N (Sq = Sk)'\nset ylabel '%s'\nset grid\n"
               "set key top left\nset title 'block-sparse fixed pattern against dense, %s "
               "(flashattn bench --block-sparse)'\n",
            a->cpu_time ? "process CPU ms" : "ms", a->backward ? "backward" : "forward");
    fprintf(g, "plot '-' using 1:2 with linespoints title 'fixed, stride sqrt(key blocks): "
               "N^{%.2f}', '-' using 1:2 with linespoints title 'dense: N^{%.2f}'\n",
            growth(n, sparse, count), growth(n, dense, count));
    for (int side = 0; side < 2; side++) {
        for (size_t i = 0; i < count; i++)
            fprintf(g, "%lld %.6g\n", (long long)n[i], side ? dense[i] : sparse[i]);
        fprintf(g, "e\n");
    }
    if (pclose(g) != 0)
        return cli_error("--plot: gnuplot failed on %s", path);
    printf("wrote plot %s\n", path);
    return 0;
}

/* The fixed-pattern sweep, its fitted exponents, and the plot. */
static int fixed_sweep(const sparse_args *a)
{
    double dense[SPARSE_MAX_LIST], sparse[SPARSE_MAX_LIST];
    printf("\n## fixed pattern (stride sqrt(key blocks)) against dense (%s)\n\n",
           a->backward ? "backward" : "forward");
    printf("| N | stride | density | fixed ms | dense ms | ratio |\n|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < a->nfix; i++) {
        fa_problem p;
        cli_bm_data bm;
        int64_t nk = (a->fix[i] + a->bk - 1) / a->bk;
        int32_t stride = fixed_stride(nk);
        dense_problem(a, a->fix[i], &p);
        int rc = time_problem(a, &p, NULL, &dense[i]);
        rc = rc ? rc : fixed_mask(a, &p, stride, &bm);
        rc = rc ? rc : time_problem(a, &p, &bm, &sparse[i]);
        if (rc == 0)
            printf("| %lld | %d | %.3f | %.2f | %.2f | %.3f |\n", (long long)a->fix[i], stride,
                   (double)bm.computed / (double)bm.all, sparse[i], dense[i],
                   sparse[i] / dense[i]);
        cli_bm_data_free(&bm);
        if (rc != 0)
            return rc;
        fflush(stdout);
    }
    if (a->nfix > 1)
        printf("\ngrowth (least squares on log ms / log N): fixed N^%.2f, dense N^%.2f\n",
               growth(a->fix, sparse, a->nfix), growth(a->fix, dense, a->nfix));
    return a->plot ? bench_sparse_plot(a, a->fix, sparse, dense, a->nfix) : 0;
}

/* A comma-separated list of densities in (0, 1]. */
static int parse_densities(const cli_cmd *cmd, sparse_args *a)
{
    const char *p = a->densities;
    a->ndens = 0;
    while (*p) {
        char *end;
        double x = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(x > 0.0 && x <= 1.0) ||
            a->ndens == SPARSE_MAX_LIST)
            return cli_usage_error(cmd, "--densities: '%s' is not a list of at most %d values "
                                   "in (0, 1]", a->densities, SPARSE_MAX_LIST);
        a->dens[a->ndens++] = x;
        p = *end ? end + 1 : end;
    }
    return a->ndens ? 0 : cli_usage_error(cmd, "--densities: empty");
}

/* An integer list option into out (at most SPARSE_MAX_LIST values >= 16). */
static int parse_lengths(const cli_cmd *cmd, const char *opt, const char *list, int64_t *out,
                         size_t *n)
{
    int64_t *v = NULL;
    int rc = cli_parse_int_list(cmd, opt, list, 16, 1 << 20, "a length (16..2^20)", &v, n);
    if (rc == 0 && *n > SPARSE_MAX_LIST)
        rc = cli_usage_error(cmd, "--%s: more than %d lengths", opt, SPARSE_MAX_LIST);
    if (rc == 0)
        memcpy(out, v, *n * sizeof *v);
    free(v);
    return rc;
}

static int validate(const cli_cmd *cmd, sparse_args *a)
{
    int64_t *v = NULL;
    size_t n = 0;
    int rc = cli_parse_int_list(cmd, "block-size", a->size, 16, 256, "a block size (16..256)",
                                &v, &n);
    if (rc == 0 && n != 2)
        rc = cli_usage_error(cmd, "--block-size: '%s' is not BQ,BK (two sizes)", a->size);
    if (rc == 0) {
        a->bq = (int32_t)v[0];
        a->bk = (int32_t)v[1];
    }
    free(v);
    if (rc == 0)
        rc = parse_densities(cmd, a);
    if (rc == 0)
        rc = parse_lengths(cmd, "seq-list", a->seqs, a->seq, &a->nseq);
    if (rc == 0)
        rc = parse_lengths(cmd, "fixed-seq", a->fixed, a->fix, &a->nfix);
    if (rc == 0 && a->plot && a->nfix < 2)
        rc = cli_usage_error(cmd, "--plot needs at least two --fixed-seq lengths");
    return rc;
}

/* "2026-11-26 14:03 UTC" */
static void today(char *buf, size_t size)
{
    time_t now = time(NULL);
    struct tm tm;
#if defined(_WIN32)
    gmtime_s(&tm, &now);
#else
    gmtime_r(&now, &tm);
#endif
    strftime(buf, size, "%Y-%m-%d %H:%M UTC", &tm);
}

/* The header: command, device, date, problem. */
static int print_header(const sparse_args *a, int argc, char **argv)
{
    fa_context *ctx = NULL;
    char line[512], date[64];
    if (cli_context_open(a->backend, 0, &ctx) != 0)
        return CLI_EXIT_FAIL;
    cli_describe_context(ctx, a->backend == FA_BACKEND_AUTO, line, sizeof line);
    fa_context_destroy(ctx);
    today(date, sizeof date);
    printf("command: flashattn");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\ndevice: %s\ndate: %s\n", line, date);
    printf("problem: batch 1, heads %lld, head_dim %lld, f32, blocks %d x %d, median of %lld "
           "after one warm-up, %s\n", (long long)a->heads, (long long)a->dim, a->bq, a->bk,
           (long long)a->repeat, a->cpu_time ? "process CPU ms" : "wall ms");
    return 0;
}

int cli_bench_sparse(int argc, char **argv)
{
    static const cli_cmd cmd = {
        "bench --block-sparse", "[options]",
        "Times the block-sparse forward (with --backward the backward alone) against the dense\n"
        "run on one backend: random block masks (the diagonal and random key blocks per query\n"
        "block, per head) at each --densities value for each --seq-list length, then the\n"
        "Sparse Transformer's fixed pattern (stride sqrt(key blocks)) over --fixed-seq, with\n"
        "the growth exponent of each side fitted on log ms / log N; --plot FILE draws time\n"
        "against N. B 1, f32, Sq = Sk. Prints Markdown tables for docs/benchmarks.md."};
    sparse_args a;
    int block_sparse = 0;
    memset(&a, 0, sizeof a);
    a.backend = FA_BACKEND_AUTO;
    a.heads = 8;
    a.dim = 64;
    a.repeat = 3;
    a.size = "64,64";
    a.densities = "1,0.5,0.25,0.1";
    a.seqs = "2048";
    a.fixed = "2048,4096,8192";
    cli_opt opts[] = {
        {"block-sparse", CLI_FLAG, &block_sparse, 0, 0, NULL, "this sweep", 0},
        {"backend", CLI_BACKEND, &a.backend, 0, 0, "B", "auto, cpu, opencl or cuda", 0},
        {"heads", CLI_INT, &a.heads, 1, 1024, "H", "heads (default 8)", 0},
        {"dim", CLI_INT, &a.dim, 1, 256, "D", "head_dim (default 64)", 0},
        {"block-size", CLI_STRING, &a.size, 0, 0, "BQ,BK", "mask blocks (default 64,64)", 0},
        {"densities", CLI_STRING, &a.densities, 0, 0, "LIST",
         "random masks' densities (default 1,0.5,0.25,0.1)", 0},
        {"seq-list", CLI_STRING, &a.seqs, 0, 0, "LIST", "their lengths (default 2048)", 0},
        {"fixed-seq", CLI_STRING, &a.fixed, 0, 0, "LIST",
         "the fixed pattern's lengths (default 2048,4096,8192)", 0},
        {"repeat", CLI_INT, &a.repeat, 1, 63, "N", "timed runs, median (default 3)", 0},
        {"backward", CLI_FLAG, &a.backward, 0, 0, NULL,
         "time the backward alone (its forward runs untimed before each)", 0},
        {"cpu-time", CLI_FLAG, &a.cpu_time, 0, 0, NULL,
         "time by the process's CPU time (every thread: a CPU device's work, whatever else runs "
         "on the cores) instead of the wall clock", 0},
        {"plot", CLI_STRING, &a.plot, 0, 0, "FILE", "time against N (gnuplot; .png or .svg)", 0},
    };
    const size_t n = sizeof opts / sizeof opts[0];
    int r = cli_parse(&cmd, argc, argv, opts, n);
    if (r == CLI_PARSE_HELP) {
        cli_print_help(&cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (r != CLI_PARSE_OK || validate(&cmd, &a) != 0)
        return CLI_EXIT_USAGE;
    if (a.plot && (bench_find_gnuplot() != 0 || cli_check_writable(a.plot, "the plot") != 0))
        return CLI_EXIT_FAIL;
    r = print_header(&a, argc, argv);
    r = r ? r : density_sweep(&a);
    return r ? r : fixed_sweep(&a);
}
