/*
 * cli_run_bwd.h - the backward half of `flashattn run` (cli_run_bwd.c), called by cli_run.c and
 * cli_run_check.c; it calls only cli_run_common.c (cli_run.h).
 */
#ifndef FLASHATTN_TOOLS_CLI_RUN_BWD_H
#define FLASHATTN_TOOLS_CLI_RUN_BWD_H

#include "cli_run.h"

#include <stdint.h>

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

#endif /* FLASHATTN_TOOLS_CLI_RUN_BWD_H */
