/*
 * cli_bench_measure.h - the measurements of one point of `flashattn bench`, called by the sweep
 * (cli_bench.c) only: --pass fwd (cli_bench_fwd.c) and the passes with the backward
 * (cli_bench_bwd.c). The two files do not call each other; both call the bottom layer
 * (cli_bench.h).
 */
#ifndef FLASHATTN_TOOLS_CLI_BENCH_MEASURE_H
#define FLASHATTN_TOOLS_CLI_BENCH_MEASURE_H

#include "cli_bench.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the forward (cli_bench_fwd.c) --------------------------------------------------------- */

/* The flash path: fa_forward_ex timed, its peak device bytes, and O into io->o_flash. */
fa_status bench_fwd_flash(const bench_run *r, bench_device *d, bench_io *io, bench_path *out,
                          char *why, size_t why_size);
/*
 * A baseline (make: bench_naive_create or bench_gemm_create) timed, its peak device bytes
 * (counted by the context and by the tool), its output into o. With skip_if_fits it is made
 * but not run (BENCH_SKIPPED), so that a point that cannot fit still says OOM.
 */
fa_status bench_fwd_naive(const bench_run *r, bench_device *d, bench_io *io,
                          bench_naive_maker make, int skip_if_fits, bench_path *out,
                          cli_tensor *o, char *why, size_t why_size);
/* Checks every path that ran against the CPU golden (up to --check-max-seq). */
void bench_fwd_check(const bench_run *r, const bench_device *d, bench_io *io, bench_point *pt);

/* ---- the passes with the backward (cli_bench_bwd.c) ---------------------------------------- */

/* Adds the backward's tensors to a point's estimate: the flash path's device bytes (set to all
 * its tensors; scratch is not known before the plan) and the host tensors and images. */
void bench_bwd_need(const fa_problem *p, uint64_t *flash_bytes, uint64_t *host);
/* dO (drawn from the stream after Q, K and V, rounded to the dtype) and the gradients' tensors. */
int bench_bwd_alloc(bench_io *io, uint64_t *state);
void bench_bwd_free(bench_io *io);
/* The flash path of a backward pass: the time of the pass, its peak device bytes, and its
 * outputs into io (dq[0].., and O for fwd+bwd). */
fa_status bench_bwd_flash(const bench_run *r, bench_device *d, bench_io *io, bench_path *out,
                          char *why, size_t why_size);
/* The naive path likewise (P and dP materialized); skip_if_fits as in the forward's. */
fa_status bench_bwd_naive(const bench_run *r, bench_device *d, bench_io *io, int skip_if_fits,
                          bench_path *out, char *why, size_t why_size);
/* Checks both paths' outputs against the CPU golden (up to --check-max-seq). */
void bench_bwd_check(const bench_run *r, const bench_device *d, bench_io *io, bench_point *pt);

#endif /* FLASHATTN_TOOLS_CLI_BENCH_MEASURE_H */
