/*
 * cli_run.h - what the two halves of the `flashattn run` subcommand share: cli_run.c (options,
 * inputs, the forward, its outputs and the --check of O) and cli_run_bwd.c (the backward: dO
 * in; dQ, dK and dV out, timed, written and checked). Private to those two files.
 */
#ifndef FLASHATTN_TOOLS_CLI_RUN_H
#define FLASHATTN_TOOLS_CLI_RUN_H

#include "cli_common.h"
#include "cli_modifiers.h"
#include "cli_seq.h"
#include "cli_session.h"
#include "cli_tensor.h"

#include <stddef.h>
#include <stdint.h>

/* The key column of the report. */
#define RUN_KEY "%-14s " /* always a space after the key, however long */

typedef struct run_args {
    cli_problem_args pa;
    fa_backend backend;
    int64_t device, repeat;
    uint64_t seed;
    const char *q_path, *k_path, *v_path, *out_path, *lse_path, *save_dir;
    const char *do_path, *dq_path, *dk_path, *dv_path; /* the backward's files */
    const char *dsinks_path;                           /* --dsinks: the sinks' gradient */
    cli_mod_args mods;                                 /* the score modifiers and dropout */
    cli_seq_args seq;                                  /* --seqlens-k, --paged, --kv-splits */
    int check;
    int backward; /* --backward, or implied by --do */
    int verbose;  /* the AUTO note in full */
} run_args;

/* Host tensors of one run, all logical BHSD f32 (rounded to the run's dtype where inputs). */
typedef struct run_data {
    cli_tensor q, k, v, o, ref;
    cli_tensor d_o, dq, dk, dv;        /* the backward: dO in, the gradients out */
    cli_tensor ref_dq, ref_dk, ref_dv; /* --check of the backward: the reference gradients */
    float *lse;
    size_t lse_count;
    cli_mod_files mod_files;         /* --alibi-slopes, --bias, --sinks as read */
    cli_mod_data mods;               /* the modifiers' tensors of the run */
    cli_seq_data seq;                /* the lengths, block table and page pools of the run */
    float *dsinks, *ref_dsinks;      /* the backward with sinks: f32 [heads_q] */
} run_data;

/* ---- cli_run.c --------------------------------------------------------------------------- */

/* "[2, 4, 33, 24]" into buf. */
void run_shape_text(const int64_t s[4], char *buf, size_t size);
/* The shape of t's file in `layout` (cli_layout_file_shape) as run_shape_text writes it. */
void run_file_shape_text(fa_layout layout, const cli_tensor *t, char *buf, size_t size);
/* One warm-up call of fn (kernel builds, caches), then the median of `repeat` timed ones. */
int run_timed(int (*fn)(cli_session *), cli_session *s, int64_t repeat, double *median_ms);
/* FLOPs of one forward: 4 * batch * heads_q * seqlen_q * seqlen_k * head_dim, half if causal. */
double run_forward_flops(const fa_problem *p);
/*
 * The "time" and "throughput" lines of one pass, their keys after `prefix` ("" for the forward,
 * "bwd " for the backward); `note` (may be "") follows the GFLOP/s.
 */
void run_print_time(const char *prefix, double ms, int64_t repeat, double flops,
                    const char *note);
/*
 * Compares x with ref by `run --check`'s rule (max |x - ref| <= atol + rtol * max |ref|, and
 * agreement on NaN and infinity) and prints its lines, their keys after `prefix`. Returns 0 on
 * a pass; else 1 with a one-line reason that names the tensor in why.
 */
int run_compare(const char *name, const char *prefix, const cli_tensor *x, const cli_tensor *ref,
                fa_dtype dtype, char *why, size_t why_size);

/* ---- cli_run_bwd.c ----------------------------------------------------------------------- */

/* The backward's options that make no sense together (a usage error, CLI_EXIT_USAGE). */
int run_bwd_validate(const cli_cmd *cmd, const run_args *a);
/* Loads --do in the run's layout; it must have Q's shape (a usage error, CLI_EXIT_USAGE, when
 * not) and Q's file dtype (q_dtype). */
int run_bwd_load(const cli_cmd *cmd, const run_args *a, npy_dtype q_dtype, run_data *d);
/* Adds the backward's host floats and device bytes (its plan exists) to a run's estimate. */
void run_bwd_need(const run_args *a, const cli_session *s, uint64_t *host_floats,
                  uint64_t *device);
/* The backward's device buffers with dO uploaded, and the host gradients. */
int run_bwd_prepare(cli_session *s, run_data *d);
/* The line describing the backward plan, under the forward's. */
void run_bwd_print_plan(const cli_session *s);
/* Times the backward as the forward is timed, reads the gradients back and prints the time. */
int run_bwd_time(const run_args *a, cli_session *s, run_data *d);
/* The backward plan's memory formula (plan --backward's), under the measured peak, and how much
 * the measured peak passes it by, if it does. */
void run_bwd_print_memory(const cli_session *s, uint64_t measured);
/* Writes --dq, --dk and --dv. */
int run_bwd_write(const run_args *a, const cli_session *s, const run_data *d);
/* The reference gradients' host tensors (ref_dq of Q's shape, ref_dk and ref_dv of K's). */
int run_bwd_alloc_refs(const fa_problem *p, run_data *d);
void run_bwd_free_refs(run_data *d);
/*
 * --check of the backward on the golden session ref (its forward has run, with LSE): the
 * backward on the same dO, its gradients (and the sinks') into d's reference tensors.
 */
int run_bwd_golden(cli_session *ref, const fa_problem *p, run_data *d);
/*
 * Compares each gradient with its reference by run_compare. Returns the number that failed,
 * the first failure's reason in why.
 */
int run_bwd_compare(const fa_problem *p, const run_data *d, char *why, size_t why_size);
/* Frees the backward's host tensors. */
void run_bwd_free(run_data *d);

#endif /* FLASHATTN_TOOLS_CLI_RUN_H */
