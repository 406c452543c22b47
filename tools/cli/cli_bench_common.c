/*
 * cli_bench_common.c - the helpers of `flashattn bench` that both passes' measurements
 * (cli_bench_fwd.c, cli_bench_bwd.c), the reports and the sweep share (see cli_bench.h): the
 * pass's names and FLOP factor, the timing loop, the flash path's plan and buffers, a point's
 * label for messages, and the comparison with the golden. The bottom layer of the bench files:
 * it calls none of them.
 */
#include "cli_bench.h"
#include "cli_common.h"
#include "cli_memory.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the pass ---------------------------------------------------------------------------- */

const char *bench_pass_name(bench_pass pass)
{
    return pass == BENCH_PASS_BWD ? "bwd" : pass == BENCH_PASS_FWD_BWD ? "fwd+bwd" : "fwd";
}

double bench_pass_factor(bench_pass pass)
{
    /* FlashAttention-2 counts the backward as 2.5 forwards: five matmuls of the forward's two. */
    return pass == BENCH_PASS_BWD ? 2.5 : pass == BENCH_PASS_FWD_BWD ? 3.5 : 1.0;
}

int bench_pass_from_name(const char *name, bench_pass *out)
{
    static const bench_pass all[3] = {BENCH_PASS_FWD, BENCH_PASS_BWD, BENCH_PASS_FWD_BWD};
    int i;
    for (i = 0; i < 3; i++) {
        if (strcmp(name, bench_pass_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

/* ---- measuring --------------------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

fa_status bench_timed(bench_fn fn, void *arg, int64_t repeat, double *median, char *why,
                      size_t why_size)
{
    double t[BENCH_MAX_REPEAT];
    fa_status st = fn(arg, why, why_size);
    int64_t i;
    for (i = 0; i < repeat && st == FA_STATUS_OK; i++) {
        double t0 = cli_now_ms();
        st = fn(arg, why, why_size);
        t[i] = cli_now_ms() - t0;
    }
    if (st != FA_STATUS_OK)
        return st;
    qsort(t, (size_t)repeat, sizeof t[0], cmp_double);
    *median = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    return FA_STATUS_OK;
}

fa_status bench_buffer(const cli_session *s, fa_tensor_id tensor, fa_buffer **out)
{
    uint64_t bytes = cli_tensor_bytes(&s->problem, tensor);
    if (bytes == 0 || bytes > SIZE_MAX)
        return FA_STATUS_OUT_OF_MEMORY; /* a size this host cannot even express */
    return fa_buffer_create(s->ctx, (size_t)bytes, out);
}

fa_status bench_flash_setup(cli_session *s, fa_context *ctx, const bench_io *io, char *why,
                            size_t why_size)
{
    char req[160] = "";
    fa_status st;
    s->ctx = ctx;
    st = fa_plan_create(ctx, &io->p, &s->plan);
    if (st == FA_STATUS_OK)
        s->problem = *fa_plan_problem(s->plan);
    else if (st == FA_STATUS_INVALID_TILE)
        cli_tile_request(&io->p, req, sizeof req); /* FLASHATTN_BLOCK_R / _C */
    st = st ? st : bench_buffer(s, FA_TENSOR_Q, &s->q);
    st = st ? st : bench_buffer(s, FA_TENSOR_K, &s->k);
    st = st ? st : bench_buffer(s, FA_TENSOR_V, &s->v);
    st = st ? st : bench_buffer(s, FA_TENSOR_O, &s->o);
    if (st != FA_STATUS_OK)
        snprintf(why, why_size, "%s%s%s", cli_status_detail(st, fa_context_last_error(ctx)),
                 *req ? "; " : "", req);
    else if (cli_session_upload(s, &io->q, &io->k, &io->v) != 0 ||
             cli_session_mod_buffers(s, &io->mods) != 0)
        st = FA_STATUS_DEVICE_ERROR; /* already printed */
    return st;
}

void bench_point_label(const bench_run *r, const bench_point *pt, const char *what, char *buf,
                       size_t size)
{
    snprintf(buf, size, "%s%s%s %s %s dim %" PRId64 " seq %" PRId64, what, *what ? ", " : "",
             fa_backend_name(r->devs[pt->dev].backend), fa_dtype_name(pt->dtype),
             fa_mask_name(pt->mask), pt->dim, pt->seq);
}

/* ---- checking against the CPU golden ----------------------------------------------------- */

int bench_compare(fa_dtype dtype, const char *name, const cli_tensor *x, const cli_tensor *ref,
                  double *err, char *why, size_t why_size)
{
    cli_compare c;
    double atol, rtol;
    cli_tensor_compare(x, ref, &c);
    cli_check_tolerance(dtype, &atol, &rtol);
    *err = c.mismatches ? INFINITY : c.max_err;
    if (c.mismatches)
        cli_describe_mismatch(&c, ref, name, why, why_size);
    else if (!(c.max_err <= atol + rtol * c.max_ref))
        snprintf(why, why_size, "%s max abs error %.3e exceeds the tolerance %.3e", name,
                 c.max_err, atol + rtol * c.max_ref);
    else
        return 0;
    return 1;
}
