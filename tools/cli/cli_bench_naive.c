/*
 * cli_bench_naive.c - the baselines `flashattn bench` times the flash path against (see
 * cli_bench.h): the naive attention problem of a point, the plain naive attention per backend
 * (the untuned OpenCL kernels, or the C loop on cpu), and the tuned-GEMM one (CLBlast's SGEMM
 * on the same OpenCL device and queue), which is what "standard attention" means in the
 * FlashAttention paper's speedup claim.
 */
#include "cli_bench.h"
#include "cli_memory.h"

#include <math.h>
#include <string.h>

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
