/*
 * naive_blast.c - the TUNED-GEMM naive attention for `flashattn bench` (see naive.h): the
 * standard attention as a framework runs it, S = scale * Q K^T and O = P V on CLBlast's SGEMM
 * (strided-batched) with naive_blast.cl's softmax between them, on the naive_cl's context and
 * in-order queue, so it shares one device and one queue with the flash path. It exists so the
 * "2-4x faster than standard attention" claim is measured against a tuned GEMM, not against
 * the untuned one-work-item-per-element kernels of naive_cl.c. Built only where CLBlast was
 * found; naive_blast_none.c says so elsewhere.
 *
 * f32 only: CLBlast's HGEMM would also compute S and accumulate P V in f16 (not the f32
 * arithmetic every other path uses), needs cl_khr_fp16, and there is no bf16 GEMM; f16 and
 * bf16 are FA_STATUS_UNSUPPORTED here, and the bench shows "n/a". Forward only.
 *
 * GQA: the heads_q / heads_kv query heads sharing one K/V head are consecutive in BHSD, so
 * their Q rows (and S rows, and O rows) form one contiguous [g * seq_q, ...] matrix; one
 * strided-batched GEMM over batch * heads_kv such groups covers every (batch, head).
 */
#include "naive_cl_impl.h"

#include <clblast_c.h>

#include <stdlib.h>
#include <string.h>

/* naive_blast.cl, embedded by cmake/embed_text.cmake. */
extern const unsigned char naive_blast_cl[];
extern const size_t naive_blast_cl_len;

/* Largest softmax work-group: enough lanes for a GPU row, small enough for any device. */
#define BLAST_MAX_WG 256

typedef struct naive_blast_attn {
    naive_attn base; /* first: the dispatch sees a naive_attn */
    naive_cl *cl;
    cl_mem q, k, v, o, s;
    cl_kernel softmax;
    size_t wg;      /* the softmax's work-group size, a power of two */
    uint64_t bytes; /* what the clCreateBuffer calls above hold */
} naive_blast_attn;

/* CLBlast's codes are OpenCL's where they overlap; its own (below -1000) say what CLBlast
 * refused. Either way the code goes into the message. */
static fa_status blast_fail(CLBlastStatusCode code, const char *call, char *why, size_t why_size)
{
    fa_status st = code > -1000 ? naive_cl_status((cl_int)code) : FA_STATUS_DEVICE_ERROR;
    return naive_fail(st, why, why_size, "naive clblast: %s failed (CLBlast status %d)", call,
                      (int)code);
}

static fa_status make_buffer(naive_blast_attn *a, uint64_t bytes, cl_mem *out, char *why,
                             size_t why_size)
{
    return naive_cl_buffer(a->cl, bytes, out, &a->bytes, why, why_size);
}

/* The softmax kernel (program built once per naive_cl), its arguments, its work-group size:
 * the largest power of two up to BLAST_MAX_WG that the kernel allows on this device. */
static fa_status make_softmax(naive_blast_attn *a, char *why, size_t why_size)
{
    const naive_problem *p = &a->base.p;
    cl_long sq = p->seq_q, sk = p->seq_k;
    cl_int mask = (cl_int)p->mask, err = CL_SUCCESS;
    size_t max_wg = 0;
    fa_status st = FA_STATUS_OK;
    if (!a->cl->blast_program)
        st = naive_cl_build(a->cl, (const char *)naive_blast_cl, naive_blast_cl_len, "",
                            &a->cl->blast_program, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    a->softmax = clCreateKernel(a->cl->blast_program, "blast_softmax", &err);
    if (!a->softmax || err != CL_SUCCESS) {
        a->softmax = NULL;
        return naive_cl_fail(err, "clCreateKernel(blast_softmax)", why, why_size);
    }
    err = clGetKernelWorkGroupInfo(a->softmax, a->cl->device, CL_KERNEL_WORK_GROUP_SIZE,
                                   sizeof max_wg, &max_wg, NULL);
    if (err != CL_SUCCESS)
        return naive_cl_fail(err, "clGetKernelWorkGroupInfo", why, why_size);
    for (a->wg = 1; a->wg * 2 <= max_wg && a->wg * 2 <= BLAST_MAX_WG;)
        a->wg *= 2;
    err = clSetKernelArg(a->softmax, 0, sizeof(cl_mem), &a->s);
    err = err ? err : clSetKernelArg(a->softmax, 1, sizeof sq, &sq);
    err = err ? err : clSetKernelArg(a->softmax, 2, sizeof sk, &sk);
    err = err ? err : clSetKernelArg(a->softmax, 3, sizeof mask, &mask);
    err = err ? err : clSetKernelArg(a->softmax, 4, a->wg * sizeof(float), NULL);
    return err == CL_SUCCESS ? FA_STATUS_OK : naive_cl_fail(err, "clSetKernelArg", why, why_size);
}

static fa_status create_objects(naive_blast_attn *a, char *why, size_t why_size)
{
    const naive_problem *p = &a->base.p;
    uint64_t qb = naive_q_elems(p) * sizeof(float), kvb = naive_kv_elems(p) * sizeof(float);
    fa_status st = make_buffer(a, qb, &a->q, why, why_size);
    st = st ? st : make_buffer(a, kvb, &a->k, why, why_size);
    st = st ? st : make_buffer(a, kvb, &a->v, why, why_size);
    st = st ? st : make_buffer(a, qb, &a->o, why, why_size);
    st = st ? st : make_buffer(a, naive_sp_bytes(p), &a->s, why, why_size);
    return st ? st : make_softmax(a, why, why_size);
}

/* ---- the operations ---------------------------------------------------------------------- */

static fa_status transfer(naive_blast_attn *a, int write, cl_mem mem, void *host, size_t bytes,
                          char *why, size_t why_size)
{
    cl_int err;
    if (bytes == 0)
        return FA_STATUS_OK;
    err = write ? clEnqueueWriteBuffer(a->cl->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL)
                : clEnqueueReadBuffer(a->cl->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return naive_cl_fail(err, write ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", why,
                             why_size);
    return FA_STATUS_OK;
}

static fa_status blast_upload(naive_attn *base, const void *q, const void *k, const void *v,
                              char *why, size_t why_size)
{
    naive_blast_attn *a = (naive_blast_attn *)base;
    size_t qb = (size_t)naive_q_elems(&base->p) * sizeof(float);
    size_t kvb = (size_t)naive_kv_elems(&base->p) * sizeof(float);
    fa_status st = transfer(a, 1, a->q, (void *)q, qb, why, why_size);
    st = st ? st : transfer(a, 1, a->k, (void *)k, kvb, why, why_size);
    return st ? st : transfer(a, 1, a->v, (void *)v, kvb, why, why_size);
}

/* S = scale * Q K^T and O = P V, one strided-batched SGEMM each over the batch * heads_kv
 * groups of g = heads_q / heads_kv query heads (row-major: Q [g*Sq, d], K [Sk, d] used
 * transposed, S [g*Sq, Sk], V [Sk, d], O [g*Sq, d]). */
static fa_status gemm(naive_blast_attn *a, int pv, char *why, size_t why_size)
{
    const naive_problem *p = &a->base.p;
    size_t g = (size_t)(p->heads_q / p->heads_kv), sq = (size_t)p->seq_q;
    size_t sk = (size_t)p->seq_k, d = (size_t)p->dim, m = g * sq;
    size_t groups = (size_t)(p->batch * p->heads_kv);
    cl_event ev = NULL;
    CLBlastStatusCode code;
    if (!pv)
        code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                          CLBlastTransposeYes, m, sk, d, p->scale, a->q, 0, d,
                                          m * d, a->k, 0, d, sk * d, 0.0f, a->s, 0, sk, m * sk,
                                          groups, &a->cl->queue, &ev);
    else
        code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                          CLBlastTransposeNo, m, d, sk, 1.0f, a->s, 0, sk,
                                          m * sk, a->v, 0, d, sk * d, 0.0f, a->o, 0, d, m * d,
                                          groups, &a->cl->queue, &ev);
    if (ev)
        clReleaseEvent(ev);
    if (code != CLBlastSuccess)
        return blast_fail(code, pv ? "SgemmStridedBatched (O = P V)"
                                   : "SgemmStridedBatched (S = Q K^T)", why, why_size);
    return FA_STATUS_OK;
}

/* With no keys there is nothing to multiply: O is zero, as in the library. */
static fa_status zero_output(naive_blast_attn *a, char *why, size_t why_size)
{
    const cl_float zero = 0.0f;
    size_t bytes = (size_t)naive_q_elems(&a->base.p) * sizeof(float);
    cl_int err = clEnqueueFillBuffer(a->cl->queue, a->o, &zero, sizeof zero, 0, bytes, 0, NULL,
                                     NULL);
    return err == CL_SUCCESS ? FA_STATUS_OK : naive_cl_fail(err, "clEnqueueFillBuffer", why,
                                                             why_size);
}

static fa_status blast_forward(naive_attn *base, char *why, size_t why_size)
{
    naive_blast_attn *a = (naive_blast_attn *)base;
    const naive_problem *p = &base->p;
    size_t rows = (size_t)naive_q_elems(p) / (size_t)(p->dim > 0 ? p->dim : 1);
    size_t global = rows * a->wg;
    fa_status st;
    cl_int err;
    if (rows == 0 || p->dim == 0)
        return FA_STATUS_OK; /* nothing to compute; OpenCL refuses empty NDRanges */
    if (p->seq_k == 0)
        st = zero_output(a, why, why_size);
    else {
        st = gemm(a, 0, why, why_size);
        if (st == FA_STATUS_OK) {
            err = clEnqueueNDRangeKernel(a->cl->queue, a->softmax, 1, NULL, &global, &a->wg, 0,
                                         NULL, NULL);
            if (err != CL_SUCCESS)
                st = naive_cl_fail(err, "clEnqueueNDRangeKernel(blast_softmax)", why, why_size);
        }
        st = st ? st : gemm(a, 1, why, why_size);
    }
    err = clFinish(a->cl->queue);
    if (st == FA_STATUS_OK && err != CL_SUCCESS)
        st = naive_cl_fail(err, "clFinish", why, why_size);
    return st;
}

static fa_status blast_download(naive_attn *base, void *o, char *why, size_t why_size)
{
    size_t bytes = (size_t)naive_q_elems(&base->p) * sizeof(float);
    return transfer((naive_blast_attn *)base, 0, ((naive_blast_attn *)base)->o, o, bytes, why,
                    why_size);
}

static uint64_t blast_uncounted_bytes(const naive_attn *base)
{
    return ((const naive_blast_attn *)base)->bytes;
}

static void blast_destroy(naive_attn *base)
{
    naive_blast_attn *a = (naive_blast_attn *)base;
    const cl_mem mems[5] = {a->q, a->k, a->v, a->o, a->s};
    int i;
    if (a->softmax)
        clReleaseKernel(a->softmax);
    for (i = 0; i < 5; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(a);
}

static const naive_ops blast_ops = {.upload = blast_upload,
                                    .forward = blast_forward,
                                    .download = blast_download,
                                    .uncounted_bytes = blast_uncounted_bytes,
                                    .destroy = blast_destroy};

/* Most parameters one kernel takes (Xgemm has 16). */
#define BLAST_MAX_PARAMS 32

/* Splits "NAME=V,..." in place (buf) into names and values; -1 when malformed. */
static int parse_params(char *buf, const char **names, size_t *values, size_t *n)
{
    char *item = buf;
    for (*n = 0; item; (*n)++) {
        char *comma = strchr(item, ','), *eq = strchr(item, '='), *end = NULL;
        if (comma)
            *comma = '\0';
        if (!eq || eq == item || *n == BLAST_MAX_PARAMS)
            return -1;
        *eq = '\0';
        values[*n] = (size_t)strtoul(eq + 1, &end, 10);
        if (end == eq + 1 || *end != '\0')
            return -1;
        names[*n] = item;
        item = comma ? comma + 1 : NULL;
    }
    return 0;
}

fa_status naive_clblast_tune(naive_cl *cl, const char *params, char *why, size_t why_size)
{
    const char *names[BLAST_MAX_PARAMS];
    size_t values[BLAST_MAX_PARAMS], n = 0;
    CLBlastStatusCode code;
    char buf[1024];
    if (strlen(params) >= sizeof buf || (strcpy(buf, params), parse_params(buf, names, values,
                                                                           &n) != 0))
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size,
                          "'%s' is not a list of NAME=VALUE", params);
    code = CLBlastOverrideParameters(cl->device, "Xgemm", CLBlastPrecisionSingle, n, names,
                                     values);
    if (code != CLBlastSuccess)
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size,
                          "CLBlast refused the Xgemm parameters (CLBlast status %d; it needs all "
                          "16: GEMMK KREG KWG KWI MDIMA MDIMC MWG NDIMB NDIMC NWG SA SB STRM STRN "
                          "VWM VWN)", (int)code);
    return FA_STATUS_OK;
}

const char *naive_clblast_info(void)
{
    return "CLBlast SGEMM (strided-batched) for S = Q K^T and O = P V, softmax kernel between";
}

fa_status naive_create_clblast(naive_attn **out, naive_cl *cl, const naive_problem *p,
                               char *why, size_t why_size)
{
    naive_blast_attn *a;
    fa_status st = FA_STATUS_OK;
    *out = NULL;
    if (p->dtype != FA_DTYPE_F32 || p->backward)
        return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size, "the CLBlast naive attention "
                          "is f32 forward only");
    if (p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0)
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size,
                          "naive clblast: heads_q is not a multiple of heads_kv");
    st = naive_cl_check_memory(cl, p, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    a = (naive_blast_attn *)naive_alloc(sizeof *a, &blast_ops, p, why, why_size);
    if (!a)
        return FA_STATUS_OUT_OF_MEMORY;
    a->cl = cl;
    st = create_objects(a, why, why_size);
    if (st != FA_STATUS_OK) {
        blast_destroy(&a->base);
        return st;
    }
    *out = &a->base;
    return FA_STATUS_OK;
}
