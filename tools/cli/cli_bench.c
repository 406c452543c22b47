/*
 * cli_bench.c - the `flashattn bench` subcommand: sweeps sequence length, head dim, dtype and
 * mask on one backend or all, and for each point times the flash path (fa_forward) against a
 * naive attention that materializes S and P on the same device (naive.h), records each path's
 * peak device bytes from the context's counters, and checks both outputs against the CPU golden
 * backend where the size allows. --pass bwd and fwd+bwd time the backward (fa_backward against
 * a naive backward that materializes P and dP).
 *
 * The top of the bench files, which call down only: this file (options, the sweep) calls the
 * measurements (cli_bench_fwd.c, cli_bench_bwd.c: cli_bench_measure.h) and the reports
 * (cli_bench_report.c, cli_bench_plot.c: cli_bench_report.h), and those call the shared helpers,
 * devices and baselines (cli_bench_common.c, cli_bench_naive.c, cli_bench_mods.c: cli_bench.h).
 *
 * Sweeps are bounded two ways, so that `bench` with its defaults finishes on a slow machine:
 * a path whose time, extrapolated from the previous point by the FLOP ratio, would exceed
 * --max-seconds is skipped (and so are the larger points after it), and a naive S/P buffer
 * above --naive-max-bytes (or the device's limits) is reported as OOM without being allocated.
 */
#include "cli_bench.h"
#include "cli_bench_measure.h"
#include "cli_bench_report.h"
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
#include <time.h>

/* Default cap on the naive S/P buffer: 1 GiB. */
#define BENCH_NAIVE_MAX_BYTES (1ull << 30)

#define BENCH_NOPTS (20 + CLI_MOD_NOPTS)

static const cli_cmd bench_cmd = {
    "bench", "[options]",
    "Times the flash path (fa_forward) against a naive attention that materializes the\n"
    "Sq x Sk scores S and probabilities P (f32) on the same backend, over a sweep of sequence\n"
    "lengths (Sq = Sk), head dims, dtypes and masks. Per point: median ms, GFLOP/s\n"
    "(4*B*H*Sq*Sk*d, half when causal), peak device bytes of each path from the context's\n"
    "counters, speedup, memory ratio and max abs error against the CPU golden backend.\n"
    "--backend all times every backend with a device except cpu, the fp64 golden the others\n"
    "are checked against (--backend cpu times it; all is cpu alone when nothing else is).\n"
    "--pass bwd times the backward instead (fa_backward, after one untimed forward, against\n"
    "a naive backward that materializes P and dP; GFLOP/s counting 2.5x the forward's FLOPs,\n"
    "as FlashAttention-2 does; err over dQ, dK and dV); --pass fwd+bwd both (3.5x).\n"
    "On opencl a second baseline, gemm, runs the same naive attention on CLBlast's SGEMM\n"
    "(f32 forward; when built with CLBlast): the paper's \"standard attention\".\n"
    "The naive path reports OOM when its S/P buffer exceeds --naive-max-bytes or the device;\n"
    "the flash path goes on. A point that does not fit in the host's or the device's memory is\n"
    "OOM without being allocated. Lists are comma-separated. Exit status 1 when a flash\n"
    "measurement failed (an error, or OOM) or its check failed.\n"
    "The score modifier and dropout options (those of `run`) apply to the flash path and its\n"
    "golden check (--bias random: [1, 1, seq, seq]); the baselines have none: they say n/a."};

static size_t bench_table(bench_args *a, cli_opt *o)
{
    const cli_opt t[BENCH_NOPTS - CLI_MOD_NOPTS] = {
        {"backend", CLI_STRING, &a->backend, 0, 0, "B",
         "cpu, opencl, cuda, auto or all (each but the cpu golden; default auto)", 0},
        {"device", CLI_INT, &a->device, 0, INT32_MAX, "N",
         "device index on each backend (default 0)", 0},
        {"batch", CLI_INT, &a->batch, 1, CLI_MAX_SIZE, "N", "batch size (default 1)", 0},
        {"heads", CLI_INT, &a->heads, 1, CLI_MAX_SIZE, "N", "heads (default 8)", 0},
        {"seq-list", CLI_STRING, &a->seq_list, 0, 0, "LIST",
         "sequence lengths (default 256,512,...,16384)", 0},
        {"dim", CLI_STRING, &a->dims, 0, 0, "LIST", "head dims (default 64)", 0},
        {"dtype", CLI_STRING, &a->dtypes, 0, 0, "LIST", "f32, f16, bf16 (default f32)", 0},
        {"mask", CLI_STRING, &a->masks, 0, 0, "LIST",
         "none, top-left, bottom-right (default none)", 0},
        {"causal", CLI_MASK, &a->causal, 0, 0, "ALIGN",
         "causal mask: top-left or bottom-right; same as --mask ALIGN", 0},
        {"repeat", CLI_INT, &a->repeat, 1, BENCH_MAX_REPEAT, "N",
         "median of N timed runs after 1 warm-up (default 3)", 0},
        {"max-seconds", CLI_FLOAT, &a->max_seconds, 0, 0, "S",
         "skip a path whose point would take longer (default 60)", 0},
        {"naive-max-bytes", CLI_U64, &a->naive_max_bytes, 0, 0, "N",
         "cap on each naive S/P (dP) buffer, above it OOM (default 1 GiB)", 0},
        {"check-max-seq", CLI_INT, &a->check_max_seq, 0, CLI_MAX_SIZE, "N",
         "check against the CPU golden up to this seq (default 1024)", 0},
        {"seed", CLI_U64, &a->seed, 0, 0, "S", "seed of the random inputs (default 1)", 0},
        {"csv", CLI_STRING, &a->csv, 0, 0, "FILE", "also write the results as CSV", 0},
        {"plot", CLI_STRING, &a->plot, 0, 0, "FILE",
         "draw time and memory vs seq into a PNG, or SVG for *.svg (gnuplot)", 0},
        {"pass", CLI_STRING, &a->pass, 0, 0, "P",
         "what is timed: fwd, bwd or fwd+bwd (default fwd)", 0},
        {"gemm-params", CLI_STRING, &a->gemm_params, 0, 0, "LIST",
         "opencl gemm path: CLBlast Xgemm parameters NAME=V,... (default CLBlast's)", 0},
        {"quiet", CLI_FLAG, &a->quiet, 0, 0, NULL, "no progress lines on stderr", 0},
        {"verbose", CLI_FLAG, &a->verbose, 0, 0, NULL,
         "why a backend of all is skipped, in full (the skipped line gives its head)", 0},
    };
    memcpy(o, t, sizeof t);
    cli_mod_opts(&a->mods, o + BENCH_NOPTS - CLI_MOD_NOPTS);
    return BENCH_NOPTS;
}

/* ---- list options ------------------------------------------------------------------------ */

/* Splits a comma list into items (pointers into buf); usage error on an empty item. */
static int split_list(const char *opt, const char *list, char *buf, size_t size, char **items,
                      size_t *n)
{
    char *p;
    if (strlen(list) >= size)
        return cli_usage_error(&bench_cmd, "--%s: list too long", opt);
    strcpy(buf, list);
    *n = 0;
    for (p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (*p == '\0')
            return cli_usage_error(&bench_cmd, "--%s: empty item in '%s'", opt, list);
        if (*n == BENCH_MAX_LIST)
            return cli_usage_error(&bench_cmd, "--%s: more than %d items", opt, BENCH_MAX_LIST);
        items[(*n)++] = p;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* A list of integers in [min, max]. */
static int parse_ints(const char *opt, const char *list, int64_t min, int64_t max, int64_t *out,
                      size_t *n)
{
    char buf[1024], *items[BENCH_MAX_LIST], *end;
    size_t i;
    if (split_list(opt, list, buf, sizeof buf, items, n) != 0)
        return CLI_EXIT_USAGE;
    for (i = 0; i < *n; i++) {
        long long v;
        if (items[i][0] < '0' || items[i][0] > '9')
            return cli_usage_error(&bench_cmd, "--%s: '%s' is not a positive integer", opt,
                                   items[i]);
        v = strtoll(items[i], &end, 10);
        if (*end != '\0')
            return cli_usage_error(&bench_cmd, "--%s: '%s' is not a positive integer", opt,
                                   items[i]);
        if (v < min || v > max)
            return cli_usage_error(&bench_cmd, "--%s: %s is out of range (%" PRId64 "..%" PRId64
                                   ")", opt, items[i], min, max);
        out[i] = v;
    }
    return 0;
}

static int parse_dtypes(const char *list, fa_dtype *out, size_t *n)
{
    char buf[1024], *items[BENCH_MAX_LIST];
    size_t i;
    if (split_list("dtype", list, buf, sizeof buf, items, n) != 0)
        return CLI_EXIT_USAGE;
    for (i = 0; i < *n; i++)
        if (fa_dtype_from_name(items[i], &out[i]) != FA_STATUS_OK)
            return cli_usage_error(&bench_cmd, "--dtype: unknown dtype '%s' (f32, f16, bf16)",
                                   items[i]);
    return 0;
}

static int parse_masks(const char *list, fa_mask *out, size_t *n)
{
    char buf[1024], *items[BENCH_MAX_LIST];
    size_t i;
    if (split_list("mask", list, buf, sizeof buf, items, n) != 0)
        return CLI_EXIT_USAGE;
    for (i = 0; i < *n; i++)
        if (fa_mask_from_name(items[i], &out[i]) != FA_STATUS_OK)
            return cli_usage_error(&bench_cmd,
                                   "--mask: unknown mask '%s' (none, top-left, bottom-right)",
                                   items[i]);
    return 0;
}

/* Parses the list options into r; the defaults stand where an option was not given. */
static int parse_lists(bench_run *r)
{
    const bench_args *a = &r->a;
    fa_backend b;
    if (a->backend && strcmp(a->backend, "all") != 0 &&
        fa_backend_from_name(a->backend, &b) != FA_STATUS_OK)
        return cli_usage_error(&bench_cmd, "--backend: unknown backend '%s' (cpu, opencl, cuda, "
                               "auto, all)", a->backend);
    if (a->causal_given && a->masks)
        return cli_usage_error(&bench_cmd, "--causal and --mask go together only as --mask");
    if (bench_pass_from_name(a->pass ? a->pass : "fwd", &r->pass) != 0)
        return cli_usage_error(&bench_cmd, "--pass: unknown pass '%s' (fwd, bwd, fwd+bwd)",
                               a->pass);
    if (parse_ints("seq-list", a->seq_list ? a->seq_list : "256,512,1024,2048,4096,8192,16384",
                   1, CLI_MAX_SIZE, r->seqs, &r->nseqs) ||
        parse_ints("dim", a->dims ? a->dims : "64", 1, FA_MAX_HEAD_DIM, r->dims, &r->ndims) ||
        parse_dtypes(a->dtypes ? a->dtypes : "f32", r->dtypes, &r->ndtypes) ||
        parse_masks(a->masks ? a->masks : "none", r->masks, &r->nmasks))
        return CLI_EXIT_USAGE;
    if (a->causal_given)
        r->masks[0] = a->causal; /* --causal ALIGN is --mask ALIGN */
    if (!(a->max_seconds > 0.0f) || !isfinite(a->max_seconds))
        return cli_usage_error(&bench_cmd, "--max-seconds: must be a positive number");
    if (a->plot && (strchr(a->plot, '\'') || strchr(a->plot, '\n')))
        return cli_usage_error(&bench_cmd, "--plot: the file name cannot hold a quote or newline");
    return 0;
}

/* ---- the sweep --------------------------------------------------------------------------- */

/* The last measured point of one path in the current series, to extrapolate from. */
typedef struct bench_last {
    double flops, ms;
} bench_last;

/* Whether the path, extrapolated by the FLOP ratio, would take longer than --max-seconds. */
static int too_slow(const bench_run *r, const bench_last *last, double flops)
{
    double est;
    if (last->ms <= 0.0 || last->flops <= 0.0)
        return 0;
    est = last->ms * (flops / last->flops) * (double)(r->a.repeat + 1);
    return est > 1e3 * (double)r->a.max_seconds;
}

/*
 * Records a path's outcome. A naive OOM, or a naive path that does not exist for the backend,
 * is a result; anything else that kept a path from being measured is a failure, reported on
 * stderr and returned as 1 (a flash OOM too: the sweep asked for a number it could not give).
 */
static int record(bench_path *path, fa_status st, const char *why, const char *what,
                  const bench_run *r, const bench_point *pt)
{
    int naive = strcmp(what, "flash") != 0; /* a baseline: naive or gemm */
    char label[128];
    path->status = st;
    if (st == FA_STATUS_OK) {
        path->state = BENCH_OK;
        return 0;
    }
    path->state = st == FA_STATUS_OUT_OF_MEMORY ? BENCH_OOM : BENCH_FAILED;
    if (st == FA_STATUS_UNSUPPORTED && naive) {
        path->state = BENCH_NA; /* a baseline that does not exist here, not a failure */
        return 0;
    }
    if (path->state == BENCH_OOM && naive) {
        if (!r->a.quiet)
            fprintf(stderr, "bench: %s OOM: %s\n", what, cli_status_detail(st, why));
        return 0;
    }
    bench_point_label(r, pt, what, label, sizeof label);
    fprintf(stderr, "flashattn bench: %s: %s: %s\n", label, fa_status_name(st),
            cli_status_detail(st, why));
    return 1;
}

/* The point's problem: contiguous BHSD, Sq = Sk, the default scale. */
static int point_problem(const bench_run *r, const bench_point *pt, fa_problem *p)
{
    if (fa_problem_init(p, pt->dtype, FA_LAYOUT_BHSD, r->a.batch, r->a.heads, r->a.heads,
                        pt->seq, pt->seq, pt->dim) != FA_STATUS_OK)
        return cli_error("cannot describe the problem at seq %" PRId64, pt->seq);
    p->mask = pt->mask;
    return bench_mods_apply(r, p);
}

/*
 * Whether a point fits before anything of it is allocated: the six host tensors (f32: Q, K, V
 * and three outputs) and the transfer images, the flash path's device buffers (*flash_bytes),
 * and the CPU golden's buffers (host memory) when it runs; with the backward, its tensors too
 * (bench_bwd_need). The naive path checks its own.
 */
static int point_fits(const bench_run *r, const bench_device *d, const bench_point *pt,
                      const fa_problem *p, uint64_t *flash_bytes, char *why, size_t why_size)
{
    static const fa_tensor_id io[4] = {FA_TENSOR_Q, FA_TENSOR_K, FA_TENSOR_V, FA_TENSOR_O};
    uint64_t esz = fa_dtype_size(p->dtype), rows_q, rows_kv, nq, nkv;
    cli_memory_need need;
    int i;
    /* The host tensors' elements (f32, logical BHSD). */
    rows_q = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q),
                         (uint64_t)p->seqlen_q);
    rows_kv = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_kv),
                          (uint64_t)p->seqlen_k);
    nq = cli_mul_sat(rows_q, (uint64_t)p->head_dim);
    nkv = cli_mul_sat(rows_kv, (uint64_t)p->head_dim);
    for (*flash_bytes = 0, i = 0; i < 4; i++) /* the flash path's buffers */
        *flash_bytes = cli_add_sat(*flash_bytes, cli_tensor_bytes(p, io[i]));
    need.host = cli_mul_sat(cli_add_sat(cli_mul_sat(nq, 4), cli_mul_sat(nkv, 2)), sizeof(float));
    need.host = cli_add_sat(need.host, cli_mul_sat(cli_add_sat(nq, cli_mul_sat(nkv, 2)), esz));
    if (r->pass != BENCH_PASS_FWD)
        bench_bwd_need(p, flash_bytes, &need.host);
    *flash_bytes = cli_add_sat(*flash_bytes, cli_mod_bytes(p));
    need.host = cli_add_sat(need.host, cli_mul_sat(cli_mod_bytes(p), 2)); /* tensors, images */
    need.device = *flash_bytes;
    if (pt->seq <= r->a.check_max_seq && d->backend != FA_BACKEND_CPU)
        need.host = cli_add_sat(need.host, *flash_bytes);
    return cli_memory_fits(d->ctx, need, why, why_size);
}

/* A point that cannot be held in memory: both paths OOM, neither run; 1 (a failure). */
static int point_oom(const bench_run *r, bench_point *pt, const fa_problem *p, const char *why)
{
    naive_problem np = bench_naive_problem(r, p);
    char label[128];
    np.backward = r->pass != BENCH_PASS_FWD;
    pt->flash.state = pt->naive.state = pt->gemm.state = BENCH_OOM;
    pt->flash.status = pt->naive.status = pt->gemm.status = FA_STATUS_OUT_OF_MEMORY;
    pt->naive.need = pt->gemm.need = naive_total_bytes(&np);
    bench_point_label(r, pt, "", label, sizeof label);
    if (*why)
        fprintf(stderr, "flashattn bench: %s: the point %s; neither path was run\n", label, why);
    return 1;
}

/* The point's host tensors, Q, K and V (and dO) drawn from the seed (the same stream at every
 * point). */
static int alloc_io(const bench_run *r, const bench_point *pt, bench_io *io)
{
    const fa_problem *p = &io->p;
    uint64_t state = r->a.seed;
    if (cli_tensor_alloc(&io->q, "q", p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
        cli_tensor_alloc(&io->k, "k", p->batch, p->heads_kv, p->seqlen_k, p->head_dim) ||
        cli_tensor_alloc(&io->v, "v", p->batch, p->heads_kv, p->seqlen_k, p->head_dim) ||
        cli_tensor_alloc(&io->o_flash, "o", p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
        cli_tensor_alloc(&io->o_naive, "o", p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
        cli_tensor_alloc(&io->o_gemm, "o", p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
        cli_tensor_alloc(&io->o_ref, "o", p->batch, p->heads_q, p->seqlen_q, p->head_dim))
        return CLI_EXIT_FAIL;
    cli_tensor_fill_random(&io->q, &state);
    cli_tensor_fill_random(&io->k, &state);
    cli_tensor_fill_random(&io->v, &state);
    cli_tensor_round(&io->q, pt->dtype);
    cli_tensor_round(&io->k, pt->dtype);
    cli_tensor_round(&io->v, pt->dtype);
    if (bench_mods_fill(r, io) != 0) /* after Q, K and V: their stream is the plain one's */
        return CLI_EXIT_FAIL;
    return r->pass == BENCH_PASS_FWD ? 0 : bench_bwd_alloc(io, &state);
}

static void free_io(bench_io *io)
{
    cli_tensor_free(&io->q);
    cli_tensor_free(&io->k);
    cli_tensor_free(&io->v);
    cli_tensor_free(&io->o_flash);
    cli_tensor_free(&io->o_naive);
    cli_tensor_free(&io->o_gemm);
    cli_tensor_free(&io->o_ref);
    cli_mod_data_free(&io->mods);
    bench_bwd_free(io);
}

/* Measures the paths of one point whose tensors are ready; non-zero when something failed (a
 * naive OOM is a result). */
static int measure_paths(const bench_run *r, bench_device *d, bench_io *io, bench_point *pt,
                         const bench_last last[3])
{
    int fwd = r->pass == BENCH_PASS_FWD, rc = 0;
    char why[2048] = "";
    fa_status st;
    if (too_slow(r, &last[0], pt->flops)) {
        pt->flash.state = BENCH_SKIPPED;
    } else {
        st = fwd ? bench_fwd_flash(r, d, io, &pt->flash, why, sizeof why)
                 : bench_bwd_flash(r, d, io, &pt->flash, why, sizeof why);
        rc |= record(&pt->flash, st, why, "flash", r, pt);
    }
    why[0] = '\0';
    st = fwd ? bench_fwd_naive(r, d, io, bench_naive_create, too_slow(r, &last[1], pt->flops),
                               &pt->naive, &io->o_naive, why, sizeof why)
             : bench_bwd_naive(r, d, io, too_slow(r, &last[1], pt->flops), &pt->naive, why,
                               sizeof why);
    if (pt->naive.state != BENCH_SKIPPED)
        rc |= record(&pt->naive, st, why, "naive", r, pt);
    why[0] = '\0';
    st = fwd ? bench_fwd_naive(r, d, io, bench_gemm_create, too_slow(r, &last[2], pt->flops),
                               &pt->gemm, &io->o_gemm, why, sizeof why)
             : naive_fail(FA_STATUS_UNSUPPORTED, why, sizeof why, "forward only");
    if (pt->gemm.state != BENCH_SKIPPED)
        rc |= record(&pt->gemm, st, why, "gemm", r, pt);
    if (fwd)
        bench_fwd_check(r, d, io, pt);
    else
        bench_bwd_check(r, d, io, pt);
    return rc | pt->flash.fail;
}

/* Measures the paths of one point; non-zero when something failed (a naive OOM is a result). */
static int run_point(bench_run *r, bench_point *pt, bench_last last[3])
{
    bench_device *d = &r->devs[pt->dev];
    char why[2048] = "";
    bench_io io;
    int rc;
    memset(&io, 0, sizeof io);
    if (point_problem(r, pt, &io.p) != 0)
        return CLI_EXIT_FAIL;
    if (point_fits(r, d, pt, &io.p, &pt->flash.need, why, sizeof why) != 0)
        return point_oom(r, pt, &io.p, why);
    if (alloc_io(r, pt, &io) != 0) {
        free_io(&io);
        return point_oom(r, pt, &io.p, ""); /* cli_tensor_alloc said why */
    }
    rc = measure_paths(r, d, &io, pt, last);
    if (pt->flash.state == BENCH_OK)
        last[0].flops = pt->flops, last[0].ms = pt->flash.ms;
    if (pt->naive.state == BENCH_OK)
        last[1].flops = pt->flops, last[1].ms = pt->naive.ms;
    if (pt->gemm.state == BENCH_OK)
        last[2].flops = pt->flops, last[2].ms = pt->gemm.ms;
    free_io(&io);
    return rc;
}

/* A new point of the sweep, ready to measure. */
static bench_point *next_point(bench_run *r, int dev, size_t t, size_t m, size_t k, size_t i)
{
    bench_point *pt = &r->points[r->npoints++];
    memset(pt, 0, sizeof *pt);
    /* Failed until a path says otherwise, so a point no path reached never looks measured. */
    pt->flash.state = pt->naive.state = pt->gemm.state = BENCH_FAILED;
    pt->flash.status = pt->naive.status = pt->gemm.status = FA_STATUS_INVALID_ARGUMENT;
    pt->dev = dev;
    pt->dtype = r->dtypes[t];
    pt->mask = r->masks[m];
    pt->dim = r->dims[k];
    pt->seq = r->seqs[i];
    pt->flops = 4.0 * (double)r->a.batch * (double)r->a.heads * (double)pt->seq *
                (double)pt->seq * (double)pt->dim * (pt->mask == FA_MASK_NONE ? 1.0 : 0.5) *
                bench_pass_factor(r->pass);
    return pt;
}

static int sweep(bench_run *r)
{
    int dev, rc = 0;
    size_t t, m, k, i;
    for (dev = 0; dev < r->ndevs; dev++)
        for (t = 0; t < r->ndtypes; t++)
            for (m = 0; m < r->nmasks; m++)
                for (k = 0; k < r->ndims; k++) {
                    bench_last last[3] = {{0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}};
                    for (i = 0; i < r->nseqs; i++) {
                        bench_point *pt = next_point(r, dev, t, m, k, i);
                        if (!r->a.quiet)
                            fprintf(stderr, "bench: [%zu/%zu] %s %s %s dim %" PRId64
                                    " seq %" PRId64 "\n", r->npoints, r->total,
                                    fa_backend_name(r->devs[dev].backend),
                                    fa_dtype_name(pt->dtype), fa_mask_name(pt->mask),
                                    pt->dim, pt->seq);
                        rc |= run_point(r, pt, last);
                        bench_print_row(r, pt);
                        fflush(stdout);
                    }
                }
    return rc;
}

/* ---- the command ------------------------------------------------------------------------- */

/* The command line as given, for the report's header. */
static void join_cmdline(bench_run *r, int argc, char **argv)
{
    size_t len = (size_t)snprintf(r->cmdline, sizeof r->cmdline, "flashattn bench");
    int i;
    for (i = 1; i < argc && len < sizeof r->cmdline; i++) {
        const char *q = strchr(argv[i], ' ') ? "'" : "";
        len += (size_t)snprintf(r->cmdline + len, sizeof r->cmdline - len, " %s%s%s", q, argv[i],
                                q);
    }
}

static void set_date(bench_run *r)
{
    time_t now = time(NULL);
    struct tm *tm = gmtime(&now);
    if (!tm || strftime(r->date, sizeof r->date, "%Y-%m-%d %H:%M UTC", tm) == 0)
        snprintf(r->date, sizeof r->date, "(unknown date)");
}

static void bench_defaults(bench_args *a)
{
    memset(a, 0, sizeof *a);
    cli_mod_defaults(&a->mods);
    a->batch = 1;
    a->heads = 8;
    a->repeat = 3;
    a->max_seconds = 60.0f;
    a->naive_max_bytes = BENCH_NAIVE_MAX_BYTES;
    a->check_max_seq = 1024;
    a->seed = 1;
}

/* Everything after the command line was accepted. */
static int bench_body(bench_run *r)
{
    int rc;
    /* Problems with the outputs surface before the sweep, not after minutes of it. */
    if (r->a.plot &&
        (bench_find_gnuplot() != 0 || cli_check_writable(r->a.plot, "the plot") != 0))
        return CLI_EXIT_FAIL;
    if (r->a.csv && cli_check_writable(r->a.csv, "the CSV file") != 0)
        return CLI_EXIT_FAIL;
    if ((rc = bench_mods_prepare(r)) != 0) /* a bad file: a usage error, before the devices */
        return rc;
    if (bench_open_devices(r) != 0)
        return CLI_EXIT_FAIL;
    r->total = (size_t)r->ndevs * r->ndtypes * r->nmasks * r->ndims * r->nseqs;
    r->points = calloc(r->total, sizeof *r->points);
    if (!r->points)
        return cli_error("out of host memory");
    bench_print_header(r);
    rc = sweep(r) ? CLI_EXIT_FAIL : 0;
    bench_print_footer(r);
    if (r->a.csv && bench_write_csv(r, r->a.csv) != 0)
        rc = CLI_EXIT_FAIL;
    if (r->a.plot && bench_write_plot(r, r->a.plot) != 0)
        rc = CLI_EXIT_FAIL;
    return rc;
}

int cli_cmd_bench(int argc, char **argv)
{
    static bench_run r; /* large (the lists), and one per process */
    cli_opt opts[BENCH_NOPTS];
    size_t n;
    int rc;
    memset(&r, 0, sizeof r);
    bench_defaults(&r.a);
    n = bench_table(&r.a, opts);
    rc = cli_parse(&bench_cmd, argc, argv, opts, n);
    if (rc == CLI_PARSE_HELP) {
        cli_print_help(&bench_cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (rc != CLI_PARSE_OK || cli_mod_validate(&bench_cmd, &r.a.mods, opts, n) != 0)
        return CLI_EXIT_USAGE;
    r.a.causal_given = cli_find(opts, n, "causal")->seen;
    if (parse_lists(&r) != 0)
        return CLI_EXIT_USAGE;
    join_cmdline(&r, argc, argv);
    set_date(&r);
    rc = bench_body(&r);
    bench_close_devices(&r);
    cli_mod_files_free(&r.mod_files);
    free(r.points);
    return rc;
}
