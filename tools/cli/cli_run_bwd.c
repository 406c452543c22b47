/*
 * cli_run_bwd.c - the backward half of `flashattn run` (see cli_run.h): after the forward, dO
 * (random from the seed, or --do) goes through fa_backward on the same backend, timed like the
 * forward, the gradients written with --dq/--dk/--dv (in --layout), and with --check compared
 * with the reference's gradients on the same inputs (the CPU golden's, computed here, or on a
 * cpu run the naive attention's, computed by cli_run_check.c). See cli_run_bwd.h.
 *
 * Nothing here names a backend: whichever backend has a backward pass runs it, and one that has
 * none says so through fa_plan_create_backward's status, before any tensor is allocated.
 */
#include "cli_memory.h"
#include "cli_run_bwd.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY RUN_KEY

/* FlashAttention-2 counts the backward as 2.5 forwards: five matmuls of the forward's two. */
#define RUN_BWD_FLOP_FACTOR 2.5

int run_bwd_validate(const cli_cmd *cmd, const run_args *a)
{
    const char *grad = a->dq_path ? "dq" : a->dk_path ? "dk" : a->dv_path ? "dv" : NULL;
    if (a->do_path && !a->q_path)
        return cli_usage_error(cmd, "--do goes with --q, --k and --v (random inputs: "
                               "--backward draws dO from --seed)");
    if (a->backward && a->q_path && !a->do_path)
        return cli_usage_error(cmd, "--backward with --q, --k and --v needs --do FILE, the "
                               "gradient of O");
    grad = grad ? grad : a->dsinks_path ? "dsinks" : NULL;
    if (grad && !a->backward && !a->do_path)
        return cli_usage_error(cmd, "--%s needs the backward pass: --backward, or --do FILE "
                               "with --q, --k and --v", grad);
    if (a->dsinks_path && !a->mods.sinks)
        return cli_usage_error(cmd, "--dsinks needs --sinks FILE|random (it is their gradient)");
    return 0;
}

int run_bwd_load(const cli_cmd *cmd, const run_args *a, npy_dtype q_dtype, run_data *d)
{
    fa_layout l = a->pa.layout;
    char s1[96], s2[96];
    npy_dtype t;
    if (cli_tensor_load(a->do_path, l, &d->d_o, &t) != 0)
        return CLI_EXIT_FAIL;
    if (t != q_dtype)
        return cli_error("%s: dtype '%s' does not match %s's '%s'", a->do_path,
                         npy_dtype_descr(t), a->q_path, npy_dtype_descr(q_dtype));
    if (memcmp(d->d_o.shape, d->q.shape, sizeof d->q.shape) != 0) {
        run_file_shape_text(l, &d->d_o, s1, sizeof s1);
        run_file_shape_text(l, &d->q, s2, sizeof s2);
        return cli_usage_error(cmd, "%s: shape %s does not match %s's %s (dO has the shape of Q "
                               "and O; --layout %s %s)", a->do_path, s1, a->q_path, s2,
                               cli_layout_name(l), cli_layout_dims(l));
    }
    return 0;
}

void run_bwd_need(const run_args *a, const cli_session *s, uint64_t *host_floats,
                  uint64_t *device)
{
    const fa_problem *p = &s->problem;
    uint64_t rows_q = cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q);
    uint64_t rows_kv = cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_kv);
    uint64_t nq = cli_mul_sat(cli_mul_sat(rows_q, (uint64_t)p->seqlen_q), (uint64_t)p->head_dim);
    uint64_t nkv = cli_mul_sat(cli_mul_sat(rows_kv, (uint64_t)p->seqlen_k), (uint64_t)p->head_dim);
    uint64_t grads = cli_add_sat(nq, cli_mul_sat(nkv, 2)); /* dQ, dK, dV */
    cli_backward_memory m;
    cli_backward_memory_of(p, fa_plan_scratch_bytes(s->bwd_plan), &m);
    *device = m.peak; /* every tensor of the run, the forward's included, and the scratch */
    *host_floats = cli_add_sat(*host_floats, a->check ? cli_mul_sat(grads, 2) : grads);
    if (!a->do_path)
        *host_floats = cli_add_sat(*host_floats, nq); /* a file's dO is held already */
}

/* Host tensors for dQ (Q's shape), dK and dV (K's shape). */
static int alloc_grads(const fa_problem *p, const char *what, cli_tensor *dq, cli_tensor *dk,
                       cli_tensor *dv)
{
    if (cli_tensor_alloc(dq, what, p->batch, p->heads_q, p->seqlen_q, p->head_dim) ||
        cli_tensor_alloc(dk, what, p->batch, p->heads_kv, p->seqlen_k, p->head_dim) ||
        cli_tensor_alloc(dv, what, p->batch, p->heads_kv, p->seqlen_k, p->head_dim))
        return CLI_EXIT_FAIL;
    return 0;
}

/* Host f32 [heads_q] for the sinks' gradient, when the problem has sinks. */
static int alloc_dsinks(const fa_problem *p, float **out)
{
    if (!p->sinks)
        return 0;
    *out = calloc((size_t)p->heads_q, sizeof **out);
    return *out ? 0 : cli_error("out of host memory for the sinks' gradient");
}

int run_bwd_prepare(cli_session *s, run_data *d)
{
    if (cli_session_backward_buffers(s) || cli_session_upload_do(s, &d->d_o) ||
        alloc_grads(&s->problem, "gradients", &d->dq, &d->dk, &d->dv) ||
        alloc_dsinks(&s->problem, &d->dsinks))
        return CLI_EXIT_FAIL;
    return 0;
}

void run_bwd_print_plan(const cli_session *s)
{
    char sram[64], scratch[64];
    cli_format_bytes(fa_plan_sram_bytes(s->bwd_plan), sram, sizeof sram);
    cli_format_bytes(fa_plan_scratch_bytes(s->bwd_plan), scratch, sizeof scratch);
    printf(KEY "Br %" PRId32 ", Bc %" PRId32 ", work-group %" PRId32
               ", sram %s, work-groups %" PRIu64 ", scratch %s\n",
           "bwd plan", fa_plan_block_r(s->bwd_plan), fa_plan_block_c(s->bwd_plan),
           fa_plan_work_group_size(s->bwd_plan), sram, fa_plan_work_groups(s->bwd_plan),
           scratch);
}

int run_bwd_time(const run_args *a, cli_session *s, run_data *d)
{
    double ms = 0.0, flops = RUN_BWD_FLOP_FACTOR * run_forward_flops(&s->problem);
    if (run_timed(cli_session_backward, s, a->repeat, &ms) ||
        cli_session_download_grads(s, &d->dq, &d->dk, &d->dv) ||
        (d->dsinks && cli_session_download_dsinks(s, d->dsinks)))
        return CLI_EXIT_FAIL;
    run_print_time("bwd ", ms, a->repeat, flops, " (2.5x the forward's FLOPs)");
    return 0;
}

void run_bwd_print_memory(const cli_session *s, uint64_t measured)
{
    cli_backward_memory m;
    cli_backward_memory_of(&s->problem, fa_plan_scratch_bytes(s->bwd_plan), &m);
    printf(KEY "tensors %" PRIu64 " B + scratch %" PRIu64 " B = %" PRIu64 " B "
               "(flashattn plan --backward)",
           "bwd memory", m.tensors, m.scratch, m.peak);
    /* The forward ran on the same context: working memory of its own can set the peak. */
    if (measured > m.peak)
        printf("; the measured peak is %" PRIu64 " B more", measured - m.peak);
    putchar('\n');
}

int run_bwd_write(const run_args *a, const cli_session *s, const run_data *d)
{
    const char *const paths[3] = {a->dq_path, a->dk_path, a->dv_path};
    const cli_tensor *const t[3] = {&d->dq, &d->dk, &d->dv};
    static const char *const keys[3] = {"wrote dQ", "wrote dK", "wrote dV"};
    fa_dtype dtype = s->problem.dtype;
    int i;
    for (i = 0; i < 3; i++) {
        if (!paths[i])
            continue;
        if (cli_tensor_save(paths[i], a->pa.layout, t[i], dtype) != 0)
            return CLI_EXIT_FAIL;
        printf(KEY "%s (%s)\n", keys[i], paths[i], npy_dtype_descr(cli_npy_dtype(dtype)));
    }
    if (a->dsinks_path) {
        const int64_t heads = s->problem.heads_q;
        char err[256];
        if (npy_write(a->dsinks_path, NPY_F32, 1, &heads, d->dsinks, err, sizeof err) != 0)
            return cli_error("%s: %s", a->dsinks_path, err);
        printf(KEY "%s (<f4)\n", "wrote dsinks", a->dsinks_path);
    }
    return 0;
}

/* The sinks' gradients as [1, 1, 1, heads_q] tensors, for run_compare. */
static int compare_dsinks(const fa_problem *p, const run_data *d, char *why, size_t why_size)
{
    cli_tensor x, r;
    memset(&x, 0, sizeof x);
    x.shape[0] = x.shape[1] = x.shape[2] = 1;
    x.shape[3] = p->heads_q;
    x.count = (size_t)p->heads_q;
    r = x;
    x.data = d->dsinks;
    r.data = d->ref_dsinks;
    return run_compare("dsinks", "dsinks ", &x, &r, p->dtype, why, why_size);
}

int run_bwd_alloc_refs(const fa_problem *p, run_data *d)
{
    return alloc_grads(p, "reference gradients", &d->ref_dq, &d->ref_dk, &d->ref_dv);
}

void run_bwd_free_refs(run_data *d)
{
    cli_tensor_free(&d->ref_dq);
    cli_tensor_free(&d->ref_dk);
    cli_tensor_free(&d->ref_dv);
}

int run_bwd_golden(cli_session *ref, const fa_problem *p, run_data *d)
{
    if (cli_session_plan_backward(ref, p) || cli_session_backward_buffers(ref) ||
        cli_session_upload_do(ref, &d->d_o) || run_bwd_alloc_refs(p, d) ||
        alloc_dsinks(p, &d->ref_dsinks) || cli_session_backward(ref) ||
        cli_session_download_grads(ref, &d->ref_dq, &d->ref_dk, &d->ref_dv) ||
        (d->ref_dsinks && cli_session_download_dsinks(ref, d->ref_dsinks)))
        return CLI_EXIT_FAIL;
    return 0;
}

int run_bwd_compare(const fa_problem *p, const run_data *d, char *why, size_t why_size)
{
    static const char *const names[3] = {"dQ", "dK", "dV"};
    static const char *const prefixes[3] = {"dQ ", "dK ", "dV "};
    const cli_tensor *const x[3] = {&d->dq, &d->dk, &d->dv};
    const cli_tensor *const r[3] = {&d->ref_dq, &d->ref_dk, &d->ref_dv};
    int failed = 0, i;
    char one[512] = "";
    for (i = 0; i < 3; i++) {
        one[0] = '\0';
        if (run_compare(names[i], prefixes[i], x[i], r[i], p->dtype, one, sizeof one) &&
            failed++ == 0)
            snprintf(why, why_size, "%s", one);
    }
    one[0] = '\0';
    if (d->dsinks && d->ref_dsinks && compare_dsinks(p, d, one, sizeof one) && failed++ == 0)
        snprintf(why, why_size, "%s", one);
    return failed;
}

void run_bwd_free(run_data *d)
{
    cli_tensor *const t[7] = {&d->d_o, &d->dq, &d->dk, &d->dv, &d->ref_dq, &d->ref_dk,
                              &d->ref_dv};
    int i;
    for (i = 0; i < 7; i++)
        cli_tensor_free(t[i]);
    free(d->dsinks);
    free(d->ref_dsinks);
    d->dsinks = d->ref_dsinks = NULL;
}
