/*
 * cli_bench_naive.c - the devices of `flashattn bench` and the baselines it times the flash
 * path against (see cli_bench.h): the devices (on OpenCL the naive tool opens the context the
 * flash path runs on, so both share one device and queue), the naive attention problem of a
 * point, the plain naive attention per backend (the untuned OpenCL kernels, or the C loop on
 * cpu), and the tuned-GEMM one (CLBlast's SGEMM on the same OpenCL device and queue), which is
 * what "standard attention" means in the FlashAttention paper's speedup claim.
 */
#include "cli_bench.h"
#include "cli_memory.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- devices ----------------------------------------------------------------------------- */

static void close_device(bench_device *d)
{
    fa_context_destroy(d->ctx);
    naive_cl_close(d->cl);
    d->ctx = NULL;
    d->cl = NULL;
}

/* Adds "NAME: why" to the header's skipped line: why in full when `full` or --verbose, else
 * its head (a library's reason can run to a paragraph). */
static void skipped(bench_run *r, const char *name, const char *why, int full)
{
    size_t len = strlen(r->unavailable);
    char reason[1024];
    if (full || r->a.verbose)
        snprintf(reason, sizeof reason, "%s", why);
    else
        cli_short_reason(why, reason, sizeof reason);
    snprintf(r->unavailable + len, sizeof r->unavailable - len, "%s%s: %s", len ? "; " : "",
             name, reason);
}

/* Opens the flash context (and on OpenCL the naive objects it shares) on one backend. */
static int open_device(bench_run *r, fa_backend backend, int required)
{
    bench_device *d = &r->devs[r->ndevs];
    char why[1024] = "";
    fa_status st;
    memset(d, 0, sizeof *d);
    if (backend == FA_BACKEND_OPENCL) {
        st = naive_cl_open(&d->cl, (int)r->a.device, why, sizeof why);
        if (st == FA_STATUS_OK)
            st = naive_cl_fa_context(d->cl, &d->ctx, why, sizeof why);
        if (st == FA_STATUS_OK && r->a.gemm_params) /* a bad list is the user's error */
            if (naive_clblast_tune(d->cl, r->a.gemm_params, why, sizeof why) != FA_STATUS_OK) {
                close_device(d);
                return cli_error("--gemm-params: %s", why);
            }
    } else {
        fa_context_options o;
        o.backend = backend;
        o.device = (int)r->a.device;
        st = fa_context_create(&d->ctx, &o, why, sizeof why);
    }
    if (st != FA_STATUS_OK) {
        naive_cl_close(d->cl);
        d->cl = NULL;
        if (required)
            return cli_lib_error(st, NULL, why);
        skipped(r, fa_backend_name(backend), why, 0);
        return 0;
    }
    d->backend = fa_context_backend(d->ctx);
    d->modifiers = cli_mod_any(&r->a.mods);
    cli_describe_context(d->ctx, 0, d->desc, sizeof d->desc);
    r->ndevs++;
    return 0;
}

/*
 * --backend all: every backend with a device but the cpu one, which is the fp64 golden that
 * checks them (timing it would spend most of the sweep on a reference nobody runs for speed);
 * the cpu alone when there is no other. The header's skipped line says so.
 */
static int open_all(bench_run *r)
{
    int i;
    for (i = 0; i < fa_backend_count() && r->ndevs < BENCH_MAX_DEVICES; i++)
        if (fa_backend_at(i) != FA_BACKEND_CPU && open_device(r, fa_backend_at(i), 0) != 0)
            return CLI_EXIT_FAIL;
    if (r->ndevs == 0)
        return open_device(r, FA_BACKEND_CPU, 1);
    skipped(r, "cpu", "the fp64 golden that checks the others (--backend cpu times it)", 1);
    return 0;
}

int bench_open_devices(bench_run *r)
{
    const char *name = r->a.backend ? r->a.backend : "auto";
    fa_backend b;
    if (strcmp(name, "all") == 0)
        return open_all(r);
    if (fa_backend_from_name(name, &b) != FA_STATUS_OK)
        return cli_error("unknown backend '%s'", name); /* parse_lists let it through */
    if (b == FA_BACKEND_AUTO) {
        fa_context *probe = NULL;
        if (cli_context_open(b, (int)r->a.device, &probe) != 0)
            return CLI_EXIT_FAIL;
        b = fa_context_backend(probe);
        fa_context_destroy(probe);
    }
    return open_device(r, b, 1);
}

void bench_close_devices(bench_run *r)
{
    int i;
    for (i = 0; i < r->ndevs; i++)
        close_device(&r->devs[i]);
    r->ndevs = 0;
}


naive_problem bench_naive_problem(const bench_run *r, const fa_problem *p)
{
    naive_problem np;
    memset(&np, 0, sizeof np);
    np.dtype = p->dtype;
    np.mask = p->mask;
    np.batch = p->batch;
    np.heads_q = p->heads_q;
    np.heads_kv = p->heads_kv;
    np.seq_q = p->seqlen_q;
    np.seq_k = p->seqlen_k;
    np.dim = p->head_dim;
    np.scale = 1.0f / sqrtf((float)p->head_dim);
    np.max_sp_bytes = r->a.naive_max_bytes;
    return np;
}

fa_status bench_naive_create(bench_device *d, naive_problem *np, naive_attn **out, char *why,
                             size_t why_size)
{
    *out = NULL;
    if (d->modifiers)
        return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size, "the naive attention has no "
                          "score modifiers or dropout");
    if (d->backend == FA_BACKEND_OPENCL)
        return naive_create_opencl(out, d->cl, np, why, why_size);
    if (d->backend == FA_BACKEND_CPU) {
        np->host_available = cli_host_memory_available(&np->host_source);
        return naive_create_cpu(out, d->ctx, np, why, why_size);
    }
    return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size, "no naive attention%s for the %s "
                      "backend", np->backward ? " backward" : "", fa_backend_name(d->backend));
}

fa_status bench_gemm_create(bench_device *d, naive_problem *np, naive_attn **out, char *why,
                            size_t why_size)
{
    *out = NULL;
    if (d->modifiers)
        return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size, "the CLBlast attention has no "
                          "score modifiers or dropout");
    if (d->backend != FA_BACKEND_OPENCL)
        return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size, "no CLBlast attention for the %s "
                          "backend", fa_backend_name(d->backend));
    return naive_create_clblast(out, d->cl, np, why, why_size);
}

const char *bench_gemm_note(void)
{
    const char *info = naive_clblast_info();
    return info ? info : "NOT BUILT: CLBlast was not found when the tool was configured "
                         "(apt-get install libclblast-dev, then reconfigure); its columns say n/a";
}
