/*
 * cli_run_common.c - the helpers of `flashattn run` that its files share (see cli_run.h):
 * shapes as text, the timing loop and the time lines, the forward's FLOPs, the comparison of a
 * tensor with its reference, and the upload of a run's inputs. The bottom layer of the run
 * files: it calls none of them.
 */
#include "cli_run.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define KEY RUN_KEY

/* ---- shapes ------------------------------------------------------------------------------ */

void run_shape_text(const int64_t s[4], char *buf, size_t size)
{
    snprintf(buf, size, "[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", s[0], s[1], s[2],
             s[3]);
}

void run_file_shape_text(fa_layout layout, const cli_tensor *t, char *buf, size_t size)
{
    int64_t f[4];
    cli_layout_file_shape(layout, t->shape, f);
    run_shape_text(f, buf, size);
}

/* ---- timing ------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int run_timed(int (*fn)(cli_session *), cli_session *s, int64_t repeat, double *median_ms)
{
    double *t = malloc((size_t)repeat * sizeof *t);
    int64_t i;
    int rc = 0;
    if (!t)
        return cli_error("out of host memory");
    rc = fn(s);
    for (i = 0; i < repeat && rc == 0; i++) {
        double t0 = cli_now_ms();
        rc = fn(s);
        t[i] = cli_now_ms() - t0;
    }
    if (rc == 0) {
        qsort(t, (size_t)repeat, sizeof *t, cmp_double);
        *median_ms = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    }
    free(t);
    return rc;
}

double run_forward_flops(const fa_problem *p)
{
    double flops = 4.0 * (double)p->batch * (double)p->heads_q * (double)p->seqlen_q *
                   (double)p->seqlen_k * (double)p->head_dim;
    return p->mask != FA_MASK_NONE ? 0.5 * flops : flops;
}

void run_print_time(const char *prefix, double ms, int64_t repeat, double flops,
                    const char *note)
{
    char key[32];
    snprintf(key, sizeof key, "%stime", prefix);
    printf(KEY "%.3f ms (median of %" PRId64 " after 1 warm-up)\n", key, ms, repeat);
    snprintf(key, sizeof key, "%sthroughput", prefix);
    if (ms > 0.0)
        printf(KEY "%.2f GFLOP/s%s\n", key, flops / (ms * 1e6), note);
    else
        printf(KEY "n/a (too fast to time)\n", key);
}

/* ---- the check --------------------------------------------------------------------------- */

/* One "KEY %.3e" line of a comparison's report, the key after its prefix. */
static void compare_line(const char *prefix, const char *key, double value)
{
    char k[32];
    snprintf(k, sizeof k, "%s%s", prefix, key);
    printf(KEY "%.3e\n", k, value);
}

int run_compare(const char *name, const char *prefix, const cli_tensor *x, const cli_tensor *ref,
                fa_dtype dtype, char *why, size_t why_size)
{
    cli_compare c;
    double atol, rtol, tol;
    char k[32];
    cli_tensor_compare(x, ref, &c);
    cli_check_tolerance(dtype, &atol, &rtol);
    tol = atol + rtol * c.max_ref;
    compare_line(prefix, "max abs err", c.max_err);
    compare_line(prefix, "NMSE", c.nmse);
    snprintf(k, sizeof k, "%stolerance", prefix);
    printf(KEY "%.3e = %g + %g * max|ref| %.4g (%s)\n", k, tol, atol, rtol, c.max_ref,
           fa_dtype_name(dtype));
    snprintf(k, sizeof k, "%scheck", prefix);
    if (c.mismatches)
        cli_describe_mismatch(&c, ref, name, why, why_size);
    else if (c.max_err > tol)
        snprintf(why, why_size, "%s max abs error %.3e exceeds the tolerance %.3e (%g + %g * "
                 "max|%s ref| %.4g)", name, c.max_err, tol, atol, rtol, name, c.max_ref);
    printf(KEY "%s\n", k, c.mismatches || c.max_err > tol ? "FAIL" : "PASS");
    return c.mismatches || c.max_err > tol;
}

/* ---- the device -------------------------------------------------------------------------- */

/* Q, K and V (a paged problem's K and V pools) and the sequence buffers into a session. */
int run_upload_inputs(cli_session *s, const run_data *d)
{
    int paged = s->problem.page_size > 0;
    if (cli_session_upload(s, &d->q, paged ? &d->seq.k_pool : &d->k,
                           paged ? &d->seq.v_pool : &d->v) ||
        cli_session_seq_buffers(s, d->seq.lens, d->seq.table))
        return CLI_EXIT_FAIL;
    return 0;
}
