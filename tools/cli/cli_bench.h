/*
 * cli_bench.h - the `flashattn bench` subcommand's shared state: the options, the devices of a
 * sweep and one measured point (flash path and naive paths), and the bottom layer of the bench
 * files, which every other one may call and which calls none of them: the shared helpers
 * (cli_bench_common.c), the devices and baselines (cli_bench_naive.c), the score modifiers
 * (cli_bench_mods.c). Above it: the measurements (cli_bench_measure.h), the reports
 * (cli_bench_report.h), and the sweep that calls both (cli_bench.c, cli_cmd_bench in
 * cli_commands.h).
 */
#ifndef FLASHATTN_TOOLS_CLI_BENCH_H
#define FLASHATTN_TOOLS_CLI_BENCH_H

#include "cli_modifiers.h"
#include "cli_session.h"
#include "cli_tensor.h"
#include "flashattn.h"
#include "naive.h"

#include <stddef.h>
#include <stdint.h>

/* Most values in one list option (--seq-list, --dim, --dtype, --mask). */
#define BENCH_MAX_LIST 32
/* cpu, opencl, cuda. */
#define BENCH_MAX_DEVICES 3
/* Most timed repetitions (--repeat). */
#define BENCH_MAX_REPEAT 1000

/* What one measurement times (--pass). */
typedef enum bench_pass {
    BENCH_PASS_FWD = 0, /* fa_forward */
    BENCH_PASS_BWD,     /* fa_backward, after one untimed fa_forward for O and LSE */
    BENCH_PASS_FWD_BWD  /* fa_forward then fa_backward */
} bench_pass;

/* What happened to one path at one point. */
typedef enum bench_state {
    BENCH_OK = 0,  /* ran; ms and peak are valid */
    BENCH_OOM,     /* did not fit: FA_STATUS_OUT_OF_MEMORY (the naive N^2 buffer) */
    BENCH_SKIPPED, /* estimated to take longer than --max-seconds */
    BENCH_FAILED,  /* any other failure; status says which */
    BENCH_NA       /* no naive attention (or backward) for this backend: FA_STATUS_UNSUPPORTED */
} bench_state;

/* How the output was checked against the CPU golden backend. */
typedef enum bench_check {
    BENCH_CHECK_NONE = 0, /* not checked: above --check-max-seq, or the path did not run */
    BENCH_CHECK_DONE,     /* err is max |x - x_golden| over the pass's outputs */
    BENCH_CHECK_IS_REF    /* the path is the golden itself (flash on the cpu backend) */
} bench_check;

typedef struct bench_path {
    bench_state state;
    fa_status status; /* OOM / FAILED: the status */
    double ms;        /* median time of the pass */
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
    double flops; /* 4 * B * H * Sq * Sk * d, halved when causal, times bench_pass_factor */
    bench_path flash, naive;
    bench_path gemm; /* the naive attention on CLBlast's SGEMM (opencl f32 forward only) */
} bench_point;

/* One device of the sweep: the flash path's fa_context and, on OpenCL, the tool's objects. */
typedef struct bench_device {
    fa_backend backend;
    char desc[320];   /* "opencl, device 0: pthread-haswell-..." */
    fa_context *ctx;  /* flash path and, on cpu, the naive path's buffers */
    naive_cl *cl;     /* opencl: the naive path's context, device and queue; ctx lives on it */
    int modifiers;    /* a score modifier or dropout is on: the baselines are n/a */
} bench_device;

typedef struct bench_args {
    const char *backend, *seq_list, *dims, *dtypes, *masks, *csv, *plot, *pass;
    const char *gemm_params; /* --gemm-params: CLBlast Xgemm parameters, or NULL */
    int64_t device, batch, heads, repeat, check_max_seq;
    uint64_t naive_max_bytes, seed;
    float max_seconds;
    fa_mask causal;   /* --causal ALIGN */
    int causal_given; /* --causal was given (it may say "none") */
    int quiet;
    int verbose;       /* a skipped backend's reason in full */
    cli_mod_args mods; /* the score modifiers and dropout of the flash path */
} bench_args;

typedef struct bench_run {
    bench_args a;
    bench_pass pass;
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
    cli_mod_files mod_files; /* --alibi-slopes, --bias, --sinks as read */
} bench_run;

/* The tensors of one point. Index 0, 1, 2 of the gradients: flash, naive, the CPU golden. */
typedef struct bench_io {
    fa_problem p;
    cli_tensor q, k, v, o_flash, o_naive, o_gemm, o_ref;
    cli_tensor d_o, dq[3], dk[3], dv[3]; /* the passes with the backward only */
    cli_mod_data mods;                   /* the modifiers' tensors of the point */
} bench_io;

/* ---- the shared helpers (cli_bench_common.c) ----------------------------------------------- */

/* "fwd", "bwd", "fwd+bwd". */
const char *bench_pass_name(bench_pass pass);
/* The pass's FLOPs in forwards: 1, 2.5 (FlashAttention-2's count of the backward), 3.5. */
double bench_pass_factor(bench_pass pass);
/* --pass NAME; -1 for an unknown name. */
int bench_pass_from_name(const char *name, bench_pass *out);

/* One timed operation: returns a status and, on failure, the reason in why. */
typedef fa_status (*bench_fn)(void *arg, char *why, size_t why_size);

/* One warm-up (kernel builds, first touch of the buffers), then the median of `repeat`. */
fa_status bench_timed(bench_fn fn, void *arg, int64_t repeat, double *median, char *why,
                      size_t why_size);
/* The device buffer of one tensor of the session's planned problem, of the bytes fa_run
 * checks (cli_tensor_bytes); the status of fa_buffer_create. */
fa_status bench_buffer(const cli_session *s, fa_tensor_id tensor, fa_buffer **out);
/* The flash path's plan and Q, K, V, O buffers on ctx, Q, K and V uploaded; statuses kept
 * (an OOM is a result), the reason in why. */
fa_status bench_flash_setup(cli_session *s, fa_context *ctx, const bench_io *io, char *why,
                            size_t why_size);
/* "flash, opencl f32 top-left dim 64 seq 512": which path of which point, for messages. */
void bench_point_label(const bench_run *r, const bench_point *pt, const char *what, char *buf,
                       size_t size);
/*
 * Compares x with the golden ref by `run --check`'s rule. Returns 1 when it fails, with the
 * reason (naming the tensor) in why; *err is max |x - ref|, infinite where they disagree on NaN
 * or infinity.
 */
int bench_compare(fa_dtype dtype, const char *name, const cli_tensor *x, const cli_tensor *ref,
                  double *err, char *why, size_t why_size);

/* ---- the score modifiers and dropout (cli_bench_mods.c) ------------------------------------ */

/*
 * Before the sweep: reads the modifiers' files and checks their shapes against every point
 * (a usage error, CLI_EXIT_USAGE, naming the option), so that a bad file fails at once.
 */
int bench_mods_prepare(bench_run *r);
/* Sets a point's problem fields (the shapes were checked by bench_mods_prepare). */
int bench_mods_apply(const bench_run *r, fa_problem *p);
/* The point's modifier tensors into io->mods (after its memory was checked). */
int bench_mods_fill(const bench_run *r, bench_io *io);
/* The table header's line: the modifiers, and that the baselines do not run them. */
void bench_mods_header(const bench_run *r);

/* ---- the devices and the baselines (cli_bench_naive.c) ------------------------------------ */

/*
 * --backend: one device (auto resolved through a throwaway context), or with all every backend
 * that has a device but the cpu golden (it checks the others, and timing it would take most
 * of the sweep), the cpu alone when there is no other; the header's skipped line says why
 * each was left out (the head of the library's reason; in full with --verbose).
 */
int bench_open_devices(bench_run *r);
void bench_close_devices(bench_run *r);

/* The naive attention problem of a point's problem, with the --naive-max-bytes cap. */
naive_problem bench_naive_problem(const bench_run *r, const fa_problem *p);
/* Makes one naive attention for a device; FA_STATUS_UNSUPPORTED where it has none. */
typedef fa_status (*bench_naive_maker)(bench_device *d, naive_problem *np, naive_attn **out,
                                       char *why, size_t why_size);
/* The plain naive attention on the device's backend (naive kernels, or the C loop on cpu). */
fa_status bench_naive_create(bench_device *d, naive_problem *np, naive_attn **out, char *why,
                             size_t why_size);
/* The tuned-GEMM naive attention (CLBlast): opencl, f32, forward only; UNSUPPORTED elsewhere
 * and when the tool was built without CLBlast. */
fa_status bench_gemm_create(bench_device *d, naive_problem *np, naive_attn **out, char *why,
                            size_t why_size);
/* The table header's line about the gemm path: what it runs, or that it was not built. */
const char *bench_gemm_note(void);

#endif /* FLASHATTN_TOOLS_CLI_BENCH_H */
