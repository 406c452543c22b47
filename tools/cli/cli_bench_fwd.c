/*
 * cli_bench_fwd.c - the measurements of `flashattn bench --pass fwd` (the sweep is cli_bench.c's,
 * the passes with the backward are cli_bench_bwd.c's). Per point:
 *
 *   flash  fa_forward_ex on the device's context; its peak device bytes are the context's peak
 *          from just before its buffers exist: Q, K, V, O and whatever the plan's run holds.
 *   naive  the naive attention on the same backend (naive.h: S and P materialized), or the
 *          tuned-GEMM one (CLBlast), each with the bytes the tool allocated itself added.
 *   check  O of each path against the CPU golden backend's on the same inputs, by `run
 *          --check`'s rule (up to --check-max-seq); the cpu flash path is the golden itself.
 */
#include "cli_bench.h"
#include "cli_bench_measure.h"
#include "cli_common.h"

#include <stdio.h>
#include <string.h>

/* ---- the paths --------------------------------------------------------------------------- */

static fa_status flash_fn(void *arg, char *why, size_t why_size)
{
    cli_session *s = arg;
    fa_modifier_buffers m = cli_session_mods(s, 0);
    fa_status st = fa_forward_ex(s->ctx, s->plan, s->q, s->k, s->v, s->o, NULL, &m);
    if (st != FA_STATUS_OK)
        snprintf(why, why_size, "%s", fa_context_last_error(s->ctx));
    return st;
}

static fa_status naive_fn(void *arg, char *why, size_t why_size)
{
    return naive_forward(arg, why, why_size);
}

/* The flash path: peak device bytes from the context, reset just before its buffers exist. */
fa_status bench_fwd_flash(const bench_run *r, bench_device *d, bench_io *io, bench_path *out,
                          char *why, size_t why_size)
{
    cli_session s;
    fa_status st;
    memset(&s, 0, sizeof s);
    fa_context_reset_peak(d->ctx);
    st = bench_flash_setup(&s, d->ctx, io, why, why_size);
    st = st ? st : bench_timed(flash_fn, &s, r->a.repeat, &out->ms, why, why_size);
    fa_context_memory(d->ctx, NULL, &out->peak);
    if (st == FA_STATUS_OK && cli_session_download(&s, &io->o_flash, NULL) != 0)
        st = FA_STATUS_DEVICE_ERROR;
    s.ctx = NULL; /* the device's, not the session's */
    cli_session_close(&s);
    return st;
}

/* A naive path (make: the plain kernels or the CLBlast one), its output into o: context-counted
 * bytes (cpu) plus those the tool allocated itself (opencl). */
fa_status bench_fwd_naive(const bench_run *r, bench_device *d, bench_io *io,
                          bench_naive_maker make, int skip_if_fits, bench_path *out,
                          cli_tensor *o, char *why, size_t why_size)
{
    naive_problem np = bench_naive_problem(r, &io->p);
    naive_attn *n = NULL;
    uint64_t peak = 0;
    fa_status st;
    out->need = naive_total_bytes(&np);
    fa_context_reset_peak(d->ctx);
    st = make(d, &np, &n, why, why_size);
    if (st == FA_STATUS_OK && skip_if_fits) {
        /* Too slow to run, but created first so that a point that cannot fit says OOM. */
        out->state = BENCH_SKIPPED;
        naive_destroy(n);
        return FA_STATUS_OK;
    }
    st = st ? st : naive_upload(n, io->q.data, io->k.data, io->v.data, why, why_size);
    st = st ? st : bench_timed(naive_fn, n, r->a.repeat, &out->ms, why, why_size);
    fa_context_memory(d->ctx, NULL, &peak);
    out->peak = peak + naive_uncounted_bytes(n);
    st = st ? st : naive_download(n, o->data, why, why_size);
    naive_destroy(n);
    return st;
}

/* ---- checking against the CPU golden ----------------------------------------------------- */


/* The same problem and inputs on the CPU golden backend, into io->o_ref. */
static int run_golden(bench_io *io)
{
    cli_session ref;
    int rc;
    memset(&ref, 0, sizeof ref);
    rc = cli_session_open(&ref, FA_BACKEND_CPU, 0, &io->p);
    rc = rc ? rc : cli_session_buffers(&ref, 0);
    rc = rc ? rc : cli_session_upload(&ref, &io->q, &io->k, &io->v);
    rc = rc ? rc : cli_session_mod_buffers(&ref, &io->mods);
    rc = rc ? rc : cli_session_forward(&ref);
    rc = rc ? rc : cli_session_download(&ref, &io->o_ref, NULL);
    cli_session_close(&ref);
    return rc;
}

/* err and fail of one path by `run --check`'s rule; a failure is explained on stderr. */
static void check_path(const bench_run *r, const bench_point *pt, const char *what,
                       bench_path *path, const cli_tensor *o, const cli_tensor *ref)
{
    char why[256], label[128];
    path->check = BENCH_CHECK_DONE;
    path->fail = bench_compare(pt->dtype, "O", o, ref, &path->err, why, sizeof why);
    if (!path->fail)
        return;
    bench_point_label(r, pt, what, label, sizeof label);
    fprintf(stderr, "flashattn bench: %s: check failed: %s\n", label, why);
}

void bench_fwd_check(const bench_run *r, const bench_device *d, bench_io *io, bench_point *pt)
{
    const cli_tensor *ref = &io->o_ref;
    if (d->backend == FA_BACKEND_CPU && pt->flash.state == BENCH_OK) {
        ref = &io->o_flash; /* the flash path on cpu is the golden itself */
        pt->flash.check = BENCH_CHECK_IS_REF;
    }
    if (pt->seq > r->a.check_max_seq)
        return;
    if (pt->flash.check != BENCH_CHECK_IS_REF && run_golden(io) != 0)
        return;
    if (pt->flash.state == BENCH_OK && pt->flash.check != BENCH_CHECK_IS_REF)
        check_path(r, pt, "flash", &pt->flash, &io->o_flash, ref);
    if (pt->naive.state == BENCH_OK)
        check_path(r, pt, "naive", &pt->naive, &io->o_naive, ref);
    if (pt->gemm.state == BENCH_OK)
        check_path(r, pt, "gemm", &pt->gemm, &io->o_gemm, ref);
}
