/*
 * cli_run.h - what the files of the `flashattn run` subcommand share: the options and host
 * tensors of a run, and the bottom layer, cli_run_common.c (shapes as text, timing, the
 * comparison with a reference, the upload of the inputs), which calls none of them. The files
 * call down only:
 *
 *   cli_run.c         options, inputs, the forward and its outputs (cli_cmd_run)
 *   cli_run_check.c   --check: the reference outputs and the comparisons (cli_run_check.h)
 *   cli_run_bwd.c     the backward: dO in; dQ, dK and dV out, timed, written, checked
 *                     (cli_run_bwd.h)
 *   cli_run_common.c  this header's functions
 *
 * cli_run.c calls the three below it, cli_run_check.c calls cli_run_bwd.c and
 * cli_run_common.c, cli_run_bwd.c calls cli_run_common.c. Private to these files.
 */
#ifndef FLASHATTN_TOOLS_CLI_RUN_H
#define FLASHATTN_TOOLS_CLI_RUN_H

#include "cli_block_mask.h"
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
    cli_bm_args bm;                                    /* --block-mask, --block-pattern */
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
    cli_bm_data bm;                  /* the block mask and its lists, when there is one */
} run_data;

/* ---- cli_run_common.c -------------------------------------------------------------------- */

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
/* Q, K and V (a paged problem's K and V pools) and the sequence buffers into a session. */
int run_upload_inputs(cli_session *s, const run_data *d);

#endif /* FLASHATTN_TOOLS_CLI_RUN_H */
