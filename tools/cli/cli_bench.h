/*
 * cli_bench.h - the `flashattn bench` subcommand's shared state: the options, the devices of a
 * sweep and one measured point (flash path and naive path), shared by the sweep (cli_bench.c)
 * and the reports: the table and the CSV (cli_bench_report.c), the gnuplot figure
 * (cli_bench_plot.c).
 */
#ifndef FLASHATTN_TOOLS_CLI_BENCH_H
#define FLASHATTN_TOOLS_CLI_BENCH_H

#include "flashattn.h"
#include "naive.h"

#include <stddef.h>
#include <stdint.h>

/* Most values in one list option (--seq-list, --dim, --dtype, --mask). */
#define BENCH_MAX_LIST 32
/* cpu, opencl, cuda. */
#define BENCH_MAX_DEVICES 3

/* What happened to one path at one point. */
typedef enum bench_state {
    BENCH_OK = 0,  /* ran; ms and peak are valid */
    BENCH_OOM,     /* did not fit: FA_STATUS_OUT_OF_MEMORY (the naive N^2 buffer) */
    BENCH_SKIPPED, /* estimated to take longer than --max-seconds */
    BENCH_FAILED,  /* any other failure; status says which */
    BENCH_NA       /* no naive attention for this backend (cuda): FA_STATUS_UNSUPPORTED */
} bench_state;

/* How the output was checked against the CPU golden backend. */
typedef enum bench_check {
    BENCH_CHECK_NONE = 0, /* not checked: above --check-max-seq, or the path did not run */
    BENCH_CHECK_DONE,     /* err is max |O - O_golden| */
    BENCH_CHECK_IS_REF    /* the path is the golden itself (flash on the cpu backend) */
} bench_check;

typedef struct bench_path {
    bench_state state;
    fa_status status; /* OOM / FAILED: the status */
    double ms;        /* median forward time */
    uint64_t peak;    /* peak device bytes of this path alone */
    uint64_t need;    /* OOM: the bytes it would have needed, when known (else 0) */
    bench_check check;
    double err; /* BENCH_CHECK_DONE: max abs error against the golden */
    int fail;   /* flash only: err above the `run --check` tolerance */
} bench_path;

typedef struct bench_point {
    int dev; /* index into bench_run.devs */
    fa_dtype dtype;
    fa_mask mask;
    int64_t dim, seq;
    double flops; /* 4 * B * H * Sq * Sk * d, halved when causal */
    bench_path flash, naive;
} bench_point;

/* One device of the sweep: the flash path's fa_context and, on OpenCL, the tool's objects. */
typedef struct bench_device {
    fa_backend backend;
    char desc[320];   /* "opencl, device 0: pthread-haswell-..." */
    fa_context *ctx;  /* flash path and, on cpu, the naive path's buffers */
    naive_cl *cl;     /* opencl: the naive path's context, device and queue; ctx lives on it */
} bench_device;

typedef struct bench_args {
    const char *backend, *seq_list, *dims, *dtypes, *masks, *csv, *plot;
    int64_t device, batch, heads, repeat, check_max_seq;
    uint64_t naive_max_bytes, seed;
    float max_seconds;
    fa_mask causal;   /* --causal ALIGN */
    int causal_given; /* --causal was given (it may say "none") */
    int quiet;
} bench_args;

typedef struct bench_run {
    bench_args a;
    int64_t seqs[BENCH_MAX_LIST], dims[BENCH_MAX_LIST];
    fa_dtype dtypes[BENCH_MAX_LIST];
    fa_mask masks[BENCH_MAX_LIST];
    size_t nseqs, ndims, ndtypes, nmasks;
    bench_device devs[BENCH_MAX_DEVICES];
    int ndevs;
    bench_point *points;
    size_t npoints, total; /* measured so far; planned in all */
    char cmdline[1024];    /* "flashattn bench --backend ..." as given */
    char date[64];         /* "2026-11-23 02:30 UTC" */
    char unavailable[1024]; /* --backend all: the backends left out, and why */
} bench_run;

/*
 * `flashattn bench`: flash vs naive attention over a sweep (cli_bench.c). Declared here rather
 * than in cli_commands.h so that the bench files stay self-contained.
 */
int cli_cmd_bench(int argc, char **argv);

/* The aligned table on stdout: header (command line, date, devices, column names). */
void bench_print_header(const bench_run *r);
/* One row of the table. */
void bench_print_row(const bench_run *r, const bench_point *pt);
/* The notes under the table. */
void bench_print_footer(const bench_run *r);
/* --csv: one header line and one line per point. Prints and returns CLI_EXIT_FAIL on error. */
int bench_write_csv(const bench_run *r, const char *path);
/* 0 when gnuplot is on PATH; prints a one-line error and returns CLI_EXIT_FAIL otherwise
 * (cli_bench_plot.c). */
int bench_find_gnuplot(void);
/* --plot: time and memory against seq length, log axes, flash and naive per series. */
int bench_write_plot(const bench_run *r, const char *path);
/* Whether --plot writes an SVG (the name ends in ".svg") rather than a PNG. */
int bench_plot_is_svg(const char *path);

#endif /* FLASHATTN_TOOLS_CLI_BENCH_H */
