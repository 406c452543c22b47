/*
 * cli_bench_bwd.c - the measurements of `flashattn bench --pass bwd` and `--pass fwd+bwd` (see
 * cli_bench_measure.h; the sweep that calls them is cli_bench.c's, --pass fwd's are
 * cli_bench_fwd.c's). Per point:
 *
 *   flash  fa_backward (bwd: after one untimed fa_forward that writes O and LSE; fwd+bwd: both,
 *          timed together) on the device's context; its peak device bytes are the context's
 *          peak over the point: Q, K, V, O, LSE, dO, dQ, dK, dV and the plan's scratch
 *          (fa_plan_scratch_bytes), and whatever the untimed forward itself held.
 *   naive  the textbook backward on the same backend (naive.h), from the P its forward left:
 *          dP = dO V^T materialized beside P, two Sq x Sk f32 matrices.
 *   check  dQ, dK and dV of both paths (and O with fwd+bwd) against the CPU golden backend's on
 *          the same inputs, each by `run --check`'s rule; err is the largest error of them.
 *
 * Nothing here names a backend: one without a backward pass reports it through
 * fa_plan_create_backward's status (an error of the flash path); one without a naive backward
 * is "n/a" in the naive columns (bench_naive_create says which).
 */
#include "cli_bench.h"
#include "cli_bench_measure.h"
#include "cli_common.h"
#include "cli_memory.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- host tensors and the memory estimate ------------------------------------------------ */

void bench_bwd_need(const fa_problem *p, uint64_t *flash_bytes, uint64_t *host)
{
    uint64_t esz = fa_dtype_size(p->dtype);
    uint64_t nq = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q),
                              cli_mul_sat((uint64_t)p->seqlen_q, (uint64_t)p->head_dim));
    uint64_t nkv = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_kv),
                               cli_mul_sat((uint64_t)p->seqlen_k, (uint64_t)p->head_dim));
    cli_backward_memory m;
    cli_backward_memory_of(p, 0, &m);
    *flash_bytes = m.tensors;
    /* dO and three sets of gradients (flash, naive, golden) in f32, and dO's image. */
    *host = cli_add_sat(*host, cli_mul_sat(cli_add_sat(cli_mul_sat(nq, 4), cli_mul_sat(nkv, 6)),
                                           sizeof(float)));
    *host = cli_add_sat(*host, cli_mul_sat(nq, esz));
}

int bench_bwd_alloc(bench_io *io, uint64_t *state)
{
    const fa_problem *p = &io->p;
    int i;
    if (cli_tensor_alloc(&io->d_o, "do", p->batch, p->heads_q, p->seqlen_q, p->head_dim) != 0)
        return CLI_EXIT_FAIL;
    cli_tensor_fill_random(&io->d_o, state);
    cli_tensor_round(&io->d_o, p->dtype);
    for (i = 0; i < 3; i++)
        if (cli_tensor_alloc(&io->dq[i], "dq", p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
            cli_tensor_alloc(&io->dk[i], "dk", p->batch, p->heads_kv, p->seqlen_k, p->head_dim) ||
            cli_tensor_alloc(&io->dv[i], "dv", p->batch, p->heads_kv, p->seqlen_k, p->head_dim))
            return CLI_EXIT_FAIL;
    return 0;
}

void bench_bwd_free(bench_io *io)
{
    int i;
    cli_tensor_free(&io->d_o);
    for (i = 0; i < 3; i++) {
        cli_tensor_free(&io->dq[i]);
        cli_tensor_free(&io->dk[i]);
        cli_tensor_free(&io->dv[i]);
    }
}

/* ---- the flash path ---------------------------------------------------------------------- */

/* What the timed function of the flash path needs. */
typedef struct bwd_flash {
    cli_session s; /* its ctx is the device's, not the session's */
    int with_forward;
} bwd_flash;

static fa_status flash_forward(cli_session *s, char *why, size_t why_size)
{
    fa_modifier_buffers m = cli_session_mods(s, 0);
    fa_status st = fa_forward_ex(s->ctx, s->plan, s->q, s->k, s->v, s->o, s->lse, &m);
    if (st != FA_STATUS_OK)
        snprintf(why, why_size, "%s", fa_context_last_error(s->ctx));
    return st;
}

static fa_status flash_bwd_fn(void *arg, char *why, size_t why_size)
{
    bwd_flash *f = arg;
    cli_session *s = &f->s;
    fa_modifier_buffers m = cli_session_mods(s, 1);
    fa_status st = f->with_forward ? flash_forward(s, why, why_size) : FA_STATUS_OK;
    if (st != FA_STATUS_OK)
        return st;
    st = fa_backward_ex(s->ctx, s->bwd_plan, s->q, s->k, s->v, s->o, s->lse, s->d_o, s->dq, s->dk,
                        s->dv, &m);
    if (st != FA_STATUS_OK)
        snprintf(why, why_size, "%s", fa_context_last_error(s->ctx));
    return st;
}

/* The forward's plan and buffers, then the backward's: its plan, LSE, dO (uploaded), dQ, dK
 * and dV; with --pass bwd, the untimed forward that writes O and LSE. */
static fa_status flash_bwd_setup(bwd_flash *f, fa_context *ctx, const bench_io *io, char *why,
                                 size_t why_size)
{
    cli_session *s = &f->s;
    fa_status st = bench_flash_setup(s, ctx, io, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    st = fa_plan_create_backward(ctx, &io->p, &s->bwd_plan);
    st = st ? st : bench_buffer(s, FA_TENSOR_LSE, &s->lse);
    st = st ? st : bench_buffer(s, FA_TENSOR_DO, &s->d_o);
    st = st ? st : bench_buffer(s, FA_TENSOR_DQ, &s->dq);
    st = st ? st : bench_buffer(s, FA_TENSOR_DK, &s->dk);
    st = st ? st : bench_buffer(s, FA_TENSOR_DV, &s->dv);
    if (st != FA_STATUS_OK) {
        snprintf(why, why_size, "%s", cli_status_detail(st, fa_context_last_error(ctx)));
        return st;
    }
    if (cli_session_upload_do(s, &io->d_o) != 0 || cli_session_dsinks_buffer(s) != 0)
        return FA_STATUS_DEVICE_ERROR; /* already printed */
    return f->with_forward ? FA_STATUS_OK : flash_forward(s, why, why_size);
}

fa_status bench_bwd_flash(const bench_run *r, bench_device *d, bench_io *io, bench_path *out,
                          char *why, size_t why_size)
{
    bwd_flash f;
    fa_status st;
    memset(&f, 0, sizeof f);
    f.with_forward = r->pass == BENCH_PASS_FWD_BWD;
    fa_context_reset_peak(d->ctx);
    st = flash_bwd_setup(&f, d->ctx, io, why, why_size);
    st = st ? st : bench_timed(flash_bwd_fn, &f, r->a.repeat, &out->ms, why, why_size);
    fa_context_memory(d->ctx, NULL, &out->peak);
    if (st == FA_STATUS_OK &&
        (cli_session_download_grads(&f.s, &io->dq[0], &io->dk[0], &io->dv[0]) != 0 ||
         cli_session_download(&f.s, &io->o_flash, NULL) != 0))
        st = FA_STATUS_DEVICE_ERROR; /* already printed */
    f.s.ctx = NULL; /* the device's, not the session's */
    cli_session_close(&f.s);
    return st;
}

/* ---- the naive path ---------------------------------------------------------------------- */

typedef struct bwd_naive {
    naive_attn *n;
    int with_forward;
} bwd_naive;

static fa_status naive_bwd_fn(void *arg, char *why, size_t why_size)
{
    bwd_naive *b = arg;
    fa_status st = b->with_forward ? naive_forward(b->n, why, why_size) : FA_STATUS_OK;
    return st ? st : naive_backward(b->n, why, why_size);
}

fa_status bench_bwd_naive(const bench_run *r, bench_device *d, bench_io *io, int skip_if_fits,
                          bench_path *out, char *why, size_t why_size)
{
    naive_problem np = bench_naive_problem(r, &io->p);
    bwd_naive b = {NULL, r->pass == BENCH_PASS_FWD_BWD};
    uint64_t peak = 0;
    fa_status st;
    np.backward = 1;
    out->need = naive_total_bytes(&np);
    fa_context_reset_peak(d->ctx);
    st = bench_naive_create(d, &np, &b.n, why, why_size);
    if (st == FA_STATUS_OK && skip_if_fits) {
        /* Too slow to run, but created first so that a point that cannot fit says OOM. */
        out->state = BENCH_SKIPPED;
        naive_destroy(b.n);
        return FA_STATUS_OK;
    }
    st = st ? st : naive_upload(b.n, io->q.data, io->k.data, io->v.data, why, why_size);
    st = st ? st : naive_upload_do(b.n, io->d_o.data, why, why_size);
    if (st == FA_STATUS_OK && !b.with_forward)
        st = naive_forward(b.n, why, why_size); /* P, untimed, as the flash path's forward */
    st = st ? st : bench_timed(naive_bwd_fn, &b, r->a.repeat, &out->ms, why, why_size);
    fa_context_memory(d->ctx, NULL, &peak);
    out->peak = peak + naive_uncounted_bytes(b.n);
    st = st ? st : naive_download(b.n, io->o_naive.data, why, why_size);
    st = st ? st
            : naive_download_grads(b.n, io->dq[1].data, io->dk[1].data, io->dv[1].data, why,
                                   why_size);
    naive_destroy(b.n);
    return st;
}

/* ---- checking against the CPU golden ----------------------------------------------------- */

/* The same problem, inputs and dO on the CPU golden backend: O into o_ref, gradients into
 * index 2. */
static int run_golden(bench_io *io)
{
    cli_session ref;
    int rc;
    memset(&ref, 0, sizeof ref);
    rc = cli_session_open(&ref, FA_BACKEND_CPU, 0, &io->p);
    rc = rc ? rc : cli_session_plan_backward(&ref, &io->p);
    rc = rc ? rc : cli_session_buffers(&ref, 1);
    rc = rc ? rc : cli_session_backward_buffers(&ref);
    rc = rc ? rc : cli_session_upload(&ref, &io->q, &io->k, &io->v);
    rc = rc ? rc : cli_session_upload_do(&ref, &io->d_o);
    rc = rc ? rc : cli_session_mod_buffers(&ref, &io->mods);
    rc = rc ? rc : cli_session_forward(&ref);
    rc = rc ? rc : cli_session_backward(&ref);
    rc = rc ? rc : cli_session_download(&ref, &io->o_ref, NULL);
    rc = rc ? rc : cli_session_download_grads(&ref, &io->dq[2], &io->dk[2], &io->dv[2]);
    cli_session_close(&ref);
    return rc;
}

/* err and fail of path `i` (0 flash, 1 naive): every output of the pass against the golden's;
 * err is the largest error, and the first failure is explained on stderr. */
static void check_path(const bench_run *r, const bench_point *pt, bench_io *io, int i,
                       bench_path *path)
{
    const cli_tensor *x[4] = {&io->dq[i], &io->dk[i], &io->dv[i], i ? &io->o_naive : &io->o_flash};
    const cli_tensor *ref[4] = {&io->dq[2], &io->dk[2], &io->dv[2], &io->o_ref};
    static const char *const names[4] = {"dQ", "dK", "dV", "O"};
    int n = r->pass == BENCH_PASS_FWD_BWD ? 4 : 3, t;
    char why[256], label[128];
    path->check = BENCH_CHECK_DONE;
    path->err = 0.0;
    for (t = 0; t < n; t++) {
        double err;
        int bad = bench_compare(pt->dtype, names[t], x[t], ref[t], &err, why, sizeof why);
        path->err = err > path->err || isnan(err) ? err : path->err;
        if (bad && !path->fail) {
            bench_point_label(r, pt, i ? "naive" : "flash", label, sizeof label);
            fprintf(stderr, "flashattn bench: %s: check failed: %s\n", label, why);
        }
        path->fail |= bad;
    }
}

void bench_bwd_check(const bench_run *r, const bench_device *d, bench_io *io, bench_point *pt)
{
    int flash_is_ref = d->backend == FA_BACKEND_CPU && pt->flash.state == BENCH_OK;
    if (flash_is_ref)
        pt->flash.check = BENCH_CHECK_IS_REF; /* the flash path on cpu is the golden itself */
    if (pt->seq > r->a.check_max_seq)
        return;
    if (flash_is_ref) {
        /* The golden's outputs are the flash path's: the same backend, plan and inputs. */
        cli_tensor *from[4] = {&io->dq[0], &io->dk[0], &io->dv[0], &io->o_flash};
        cli_tensor *to[4] = {&io->dq[2], &io->dk[2], &io->dv[2], &io->o_ref};
        int t;
        for (t = 0; t < 4; t++)
            if (from[t]->count)
                memcpy(to[t]->data, from[t]->data, from[t]->count * sizeof(float));
    } else if (run_golden(io) != 0) {
        return;
    }
    if (pt->flash.state == BENCH_OK && !flash_is_ref)
        check_path(r, pt, io, 0, &pt->flash);
    if (pt->naive.state == BENCH_OK)
        check_path(r, pt, io, 1, &pt->naive);
}
