/*
 * cli_run_check.c - `flashattn run --check` (see cli_run_check.h): the reference outputs on the
 * same inputs, the CPU golden's, or for a run on the golden itself the naive attention's of
 * tools/baselines (where it cannot serve, the golden's again, and the report says so), and the
 * comparison of O, and with the backward of the gradients (cli_run_bwd.c), with them.
 */
#include "cli_memory.h"
#include "cli_run.h"
#include "cli_run_bwd.h"
#include "cli_run_check.h"
#include "naive.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define KEY RUN_KEY

/* The golden session: the same problem on the CPU backend with the planner's own tiles and
 * no split of the keys (a reference independent of the split being checked), its forward run
 * on the same inputs (the same pools and block table), with LSE when the backward follows. */
static int golden_forward(cli_session *ref, const run_args *a, run_data *d, fa_problem *p)
{
    p->block_r = 0;
    p->block_c = 0;
    p->kv_splits = 1;
    if (cli_session_open(ref, FA_BACKEND_CPU, 0, p) || cli_session_buffers(ref, a->backward) ||
        run_upload_inputs(ref, d) || cli_session_mod_buffers(ref, &d->mods) ||
        cli_session_bm_buffers(ref, &d->bm) || cli_session_forward(ref) ||
        cli_tensor_alloc(&d->ref, "reference o", p->batch, p->heads_q, p->seqlen_q,
                         p->head_dim) ||
        cli_session_download(ref, &d->ref, NULL))
        return CLI_EXIT_FAIL;
    return 0;
}

static int all_finite(const cli_tensor *t)
{
    size_t i;
    for (i = 0; i < t->count; i++)
        if (!isfinite(t->data[i]))
            return 0;
    return 1;
}

/* Why the naive attention cannot be this run's reference, or NULL: it computes plain attention
 * of finite inputs (a row of NaN scores is 0 there, NaN in the library). */
static const char *naive_cannot(const run_args *a, const fa_problem *p, const run_data *d)
{
    if (cli_mod_any(&a->mods))
        return "it has no score modifiers or dropout";
    if (cli_seq_used(p))
        return "it has no seqlens_k or pages";
    if (p->block_sparse)
        return "it has no block mask";
    if (!all_finite(&d->q) || !all_finite(&d->k) || !all_finite(&d->v) ||
        (a->backward && !all_finite(&d->d_o)))
        return "the inputs hold NaN or infinity, which it does not carry as the library does";
    return NULL;
}

/* The naive attention of p, its S/P matrix bounded by the host memory only. */
static void naive_problem_of(const fa_problem *p, int backward, naive_problem *np)
{
    memset(np, 0, sizeof *np);
    np->dtype = p->dtype;
    np->mask = p->mask;
    np->batch = p->batch;
    np->heads_q = p->heads_q;
    np->heads_kv = p->heads_kv;
    np->seq_q = p->seqlen_q;
    np->seq_k = p->seqlen_k;
    np->dim = p->head_dim;
    /* The library's default scale (0 means 1/sqrt(head_dim)). */
    np->scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
    np->max_sp_bytes = UINT64_MAX;
    np->host_available = cli_host_memory_available(&np->host_source);
    np->backward = backward;
}

/* The naive attention's O into d->ref and, with the backward, its gradients into ref_dq,
 * ref_dk and ref_dv. A failure (its S/P matrix too large, say) is a reason in why. */
static fa_status naive_outputs(naive_attn *n, int backward, run_data *d, char *why,
                               size_t why_size)
{
    fa_status st = naive_upload(n, d->q.data, d->k.data, d->v.data, why, why_size);
    if (st == FA_STATUS_OK)
        st = naive_forward(n, why, why_size);
    if (st == FA_STATUS_OK)
        st = naive_download(n, d->ref.data, why, why_size);
    if (st != FA_STATUS_OK || !backward)
        return st;
    st = naive_upload_do(n, d->d_o.data, why, why_size);
    if (st == FA_STATUS_OK)
        st = naive_backward(n, why, why_size);
    return st == FA_STATUS_OK ? naive_download_grads(n, d->ref_dq.data, d->ref_dk.data,
                                                     d->ref_dv.data, why, why_size)
                              : st;
}

/*
 * A run on the cpu backend is the golden itself, so its --check takes the naive attention of
 * tools/baselines (the bench's: S and P materialized, f32 arithmetic) as the reference, which
 * shares no code with it. Returns 0, -1 with the reason in why when the naive attention cannot
 * serve (the caller falls back to the golden), or CLI_EXIT_FAIL (printed).
 */
static int naive_reference(const run_args *a, const fa_problem *p, run_data *d, char *why,
                           size_t why_size)
{
    const char *cannot = naive_cannot(a, p, d);
    fa_context_options o = {FA_BACKEND_CPU, 0}; /* the golden's device: always there */
    fa_context *ctx = NULL;
    naive_attn *n = NULL;
    naive_problem np;
    fa_status st;
    if (cannot) {
        snprintf(why, why_size, "%s", cannot);
        return -1;
    }
    if (cli_tensor_alloc(&d->ref, "reference o", p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
        (a->backward && run_bwd_alloc_refs(p, d) != 0))
        return CLI_EXIT_FAIL;
    naive_problem_of(p, a->backward, &np);
    st = fa_context_create(&ctx, &o, why, why_size);
    if (st == FA_STATUS_OK)
        st = naive_create_cpu(&n, ctx, &np, why, why_size);
    if (st == FA_STATUS_OK)
        st = naive_outputs(n, a->backward, d, why, why_size);
    naive_destroy(n);
    fa_context_destroy(ctx);
    return st == FA_STATUS_OK ? 0 : -1;
}

/*
 * --check's reference outputs in d->ref (and ref_dq, ref_dk, ref_dv, ref_dsinks): the CPU
 * golden's; for a run on the golden itself the naive attention's, or where it cannot serve,
 * the golden's again (the planner's tiles, unsplit), and the report says so plainly.
 */
static int reference_outputs(const run_args *a, const cli_session *s, run_data *d, fa_problem *p)
{
    cli_session ref;
    char why[512] = "", line[512];
    int self = fa_context_backend(s->ctx) == FA_BACKEND_CPU, rc = -1;
    if (self)
        rc = naive_reference(a, p, d, why, sizeof why);
    if (rc == 0)
        printf(KEY "naive attention (tools/baselines: S and P materialized, f32 arithmetic), "
                   "independent of the golden\n", "reference");
    if (rc >= 0)
        return rc;
    cli_tensor_free(&d->ref);
    run_bwd_free_refs(d);
    memset(&ref, 0, sizeof ref);
    rc = golden_forward(&ref, a, d, p);
    if (rc == 0 && a->backward)
        rc = run_bwd_golden(&ref, p, d);
    cli_describe_context(ref.ctx, 0, line, sizeof line);
    if (rc == 0 && self)
        printf(KEY "%s, again: the golden checked against itself (with the planner's tiles, "
                   "unsplit), as the naive reference cannot serve: %s\n", "reference", line, why);
    else if (rc == 0)
        printf(KEY "%s\n", "reference", line);
    cli_session_close(&ref);
    return rc;
}

/* --check: O, and with the backward dQ, dK and dV, against the reference. Every comparison is
 * printed before the first failure's reason ends the run. */
int run_check(const run_args *a, const cli_session *s, run_data *d)
{
    fa_problem p = s->problem;
    char why[512] = "", why_o[512] = "";
    int failed = 0, rc = reference_outputs(a, s, d, &p);
    if (rc != 0)
        return rc;
    failed = run_compare("O", "", &d->o, &d->ref, p.dtype, why_o, sizeof why_o);
    if (a->backward)
        failed += run_bwd_compare(&p, d, why, sizeof why);
    if (failed == 0)
        return 0;
    if (failed > 1)
        return cli_error("check failed: %s (and %d more)", *why_o ? why_o : why, failed - 1);
    return cli_error("check failed: %s", *why_o ? why_o : why);
}
