/*
 * naive_cl.c - the OpenCL implementation of the NAIVE benchmark attention (see naive.h): the
 * caller's own cl_context, device and queue, the kernels of naive_attn.cl (embedded at build
 * time: three for the forward, four for the backward), and their buffers. Not part of the
 * library. Built only where OpenCL is; naive_cl_none.c stands in for it elsewhere.
 *
 * The tool owns the OpenCL objects so that the library's flash path (an fa_context made with
 * fa_context_create_opencl on them) and this naive path share one device and one in-order
 * queue. Every OpenCL call's result is checked; allocation failures, which some drivers report
 * only when a kernel first touches the buffer, become FA_STATUS_OUT_OF_MEMORY.
 */
#include "naive_cl_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* naive_attn.cl, embedded by cmake/embed.cmake. */
extern const unsigned char naive_attn_cl[];
extern const size_t naive_attn_cl_len;


typedef struct naive_cl_attn {
    naive_attn base; /* first: the dispatch sees a naive_attn */
    naive_cl *cl;
    cl_mem q, k, v, o, s;
    cl_kernel scores, softmax, pv;
    cl_mem d_o, dq, dk, dv, dp;                   /* the backward's, when the problem asks */
    cl_kernel dp_kernel, ds_kernel, dq_kernel, dkv_kernel;
    uint64_t bytes; /* what the clCreateBuffer calls above hold */
} naive_cl_attn;

/* Allocation failures are the caller's OUT_OF_MEMORY; anything else is a device error. */
fa_status naive_cl_status(cl_int err)
{
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_INVALID_BUFFER_SIZE:
        return FA_STATUS_OUT_OF_MEMORY;
    default:
        return FA_STATUS_DEVICE_ERROR;
    }
}

fa_status naive_cl_fail(cl_int err, const char *call, char *why, size_t why_size)
{
    return naive_fail(naive_cl_status(err), why, why_size, "naive opencl: %s failed (error %d)",
                      call, (int)err);
}

/* ---- device ------------------------------------------------------------------------------ */

/* Device `index` counting CL_DEVICE_TYPE_ALL devices over all platforms in order, as the library
 * numbers them, so --device means the same device on both paths. */
static fa_status find_device(int index, cl_device_id *out, char *why, size_t why_size)
{
    cl_platform_id plats[16];
    cl_uint np = 0, i;
    int seen = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0)
        return naive_fail(FA_STATUS_BACKEND_UNAVAILABLE, why, why_size,
                          "naive opencl: no OpenCL platform");
    for (i = 0; i < np && i < 16; i++) {
        cl_device_id ids[64];
        cl_uint n = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 64, ids, &n) != CL_SUCCESS)
            continue; /* CL_DEVICE_NOT_FOUND: a platform without devices */
        if (n > 64)
            n = 64;
        if (index < seen + (int)n) {
            *out = ids[index - seen];
            return FA_STATUS_OK;
        }
        seen += (int)n;
    }
    return naive_fail(seen ? FA_STATUS_DEVICE_NOT_FOUND : FA_STATUS_BACKEND_UNAVAILABLE, why,
                      why_size, "naive opencl: no device %d (%d found)", index, seen);
}

static fa_status query_limits(naive_cl *cl, char *why, size_t why_size)
{
    cl_int err = clGetDeviceInfo(cl->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof cl->max_alloc,
                                 &cl->max_alloc, NULL);
    if (err != CL_SUCCESS)
        return naive_cl_fail(err, "clGetDeviceInfo(CL_DEVICE_MAX_MEM_ALLOC_SIZE)", why, why_size);
    err = clGetDeviceInfo(cl->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof cl->global_mem,
                          &cl->global_mem, NULL);
    if (err != CL_SUCCESS)
        return naive_cl_fail(err, "clGetDeviceInfo(CL_DEVICE_GLOBAL_MEM_SIZE)", why, why_size);
    return FA_STATUS_OK;
}

fa_status naive_cl_open(naive_cl **out, int index, char *why, size_t why_size)
{
    naive_cl *cl = calloc(1, sizeof *cl);
    fa_status st;
    cl_int err = CL_SUCCESS;
    *out = NULL;
    if (!cl)
        return naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size, "out of host memory");
    st = find_device(index, &cl->device, why, why_size);
    if (st == FA_STATUS_OK) {
        cl->context = clCreateContext(NULL, 1, &cl->device, NULL, NULL, &err);
        if (!cl->context || err != CL_SUCCESS)
            st = naive_cl_fail(err, "clCreateContext", why, why_size);
    }
    if (st == FA_STATUS_OK) {
        cl->queue = clCreateCommandQueue(cl->context, cl->device, 0, &err);
        if (!cl->queue || err != CL_SUCCESS)
            st = naive_cl_fail(err, "clCreateCommandQueue", why, why_size);
    }
    st = st ? st : query_limits(cl, why, why_size);
    if (st != FA_STATUS_OK) {
        naive_cl_close(cl);
        return st;
    }
    *out = cl;
    return FA_STATUS_OK;
}

fa_status naive_cl_fa_context(naive_cl *cl, fa_context **out, char *why, size_t why_size)
{
    return fa_context_create_opencl(out, cl->context, cl->device, cl->queue, why, why_size);
}

void naive_cl_close(naive_cl *cl)
{
    int d, m;
    if (!cl)
        return;
    for (d = 0; d < NAIVE_NDTYPES; d++)
        for (m = 0; m < NAIVE_NMASKS; m++)
            if (cl->programs[d][m])
                clReleaseProgram(cl->programs[d][m]);
    if (cl->blast_program)
        clReleaseProgram(cl->blast_program);
    if (cl->queue)
        clReleaseCommandQueue(cl->queue);
    if (cl->context)
        clReleaseContext(cl->context);
    free(cl);
}

/* ---- program ----------------------------------------------------------------------------- */

/* The build log of a failed build, into why. */
static fa_status build_failed(naive_cl *cl, cl_program prog, cl_int err, char *why,
                              size_t why_size)
{
    char log[2048] = "";
    size_t n = 0;
    if (clGetProgramBuildInfo(prog, cl->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &n) !=
        CL_SUCCESS)
        strcpy(log, "(no build log)");
    log[sizeof log - 1] = '\0';
    return naive_fail(FA_STATUS_KERNEL_BUILD_ERROR, why, why_size,
                      "naive opencl: clBuildProgram failed (error %d): %s", (int)err, log);
}

/* The program for (dtype, mask), built once per naive_cl. */
static fa_status get_program(naive_cl *cl, fa_dtype dtype, fa_mask mask, cl_program *out,
                             char *why, size_t why_size)
{
    const char *src = (const char *)naive_attn_cl;
    size_t len = naive_attn_cl_len;
    char opts[64];
    cl_program prog;
    fa_status st;
    if ((int)dtype < 0 || (int)dtype >= NAIVE_NDTYPES || (int)mask < 0 ||
        (int)mask >= NAIVE_NMASKS)
        return naive_fail(FA_STATUS_INVALID_ARGUMENT, why, why_size, "naive opencl: bad dtype");
    if ((*out = cl->programs[dtype][mask]) != NULL)
        return FA_STATUS_OK;
    snprintf(opts, sizeof opts, "-D DTYPE=%d -D MASK=%d", (int)dtype, (int)mask);
    st = naive_cl_build(cl, src, len, opts, &prog, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    cl->programs[dtype][mask] = prog;
    *out = prog;
    return FA_STATUS_OK;
}

fa_status naive_cl_build(naive_cl *cl, const char *src, size_t len, const char *opts,
                         cl_program *out, char *why, size_t why_size)
{
    cl_int err = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(cl->context, 1, &src, &len, &err);
    *out = NULL;
    if (!prog || err != CL_SUCCESS)
        return naive_cl_fail(err, "clCreateProgramWithSource", why, why_size);
    err = clBuildProgram(prog, 1, &cl->device, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        fa_status st = build_failed(cl, prog, err, why, why_size);
        clReleaseProgram(prog);
        return st;
    }
    *out = prog;
    return FA_STATUS_OK;
}

/* ---- buffers and kernels ----------------------------------------------------------------- */

fa_status naive_cl_buffer(const naive_cl *cl, uint64_t bytes, cl_mem *out, uint64_t *counted,
                          char *why, size_t why_size)
{
    cl_int err = CL_SUCCESS;
    if (bytes == 0)
        bytes = sizeof(float); /* OpenCL refuses empty buffers */
    *out = clCreateBuffer(cl->context, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &err);
    if (!*out || err != CL_SUCCESS) {
        *out = NULL;
        return naive_cl_fail(err, "clCreateBuffer", why, why_size);
    }
    *counted += bytes;
    return FA_STATUS_OK;
}

static fa_status make_buffer(naive_cl_attn *a, uint64_t bytes, cl_mem *out, char *why,
                             size_t why_size)
{
    return naive_cl_buffer(a->cl, bytes, out, &a->bytes, why, why_size);
}

static fa_status make_kernel(cl_program prog, const char *name, cl_kernel *out, char *why,
                             size_t why_size)
{
    cl_int err = CL_SUCCESS;
    *out = clCreateKernel(prog, name, &err);
    if (!*out || err != CL_SUCCESS) {
        *out = NULL;
        return naive_cl_fail(err, "clCreateKernel", why, why_size);
    }
    return FA_STATUS_OK;
}

/* Sets argument i of k; records the first failure in *err. */
static void set_arg(cl_kernel k, cl_uint i, size_t size, const void *value, cl_int *err)
{
    if (*err == CL_SUCCESS)
        *err = clSetKernelArg(k, i, size, value);
}

/* The arguments never change for one instance, so they are set once here. */
static fa_status set_args(naive_cl_attn *a, char *why, size_t why_size)
{
    const naive_problem *p = &a->base.p;
    cl_long sq = p->seq_q, sk = p->seq_k, d = p->dim, hq = p->heads_q, hkv = p->heads_kv;
    cl_float scale = p->scale;
    cl_int err = CL_SUCCESS;
    set_arg(a->scores, 0, sizeof(cl_mem), &a->q, &err);
    set_arg(a->scores, 1, sizeof(cl_mem), &a->k, &err);
    set_arg(a->scores, 2, sizeof(cl_mem), &a->s, &err);
    set_arg(a->scores, 3, sizeof sq, &sq, &err);
    set_arg(a->scores, 4, sizeof sk, &sk, &err);
    set_arg(a->scores, 5, sizeof d, &d, &err);
    set_arg(a->scores, 6, sizeof hq, &hq, &err);
    set_arg(a->scores, 7, sizeof hkv, &hkv, &err);
    set_arg(a->scores, 8, sizeof scale, &scale, &err);
    set_arg(a->softmax, 0, sizeof(cl_mem), &a->s, &err);
    set_arg(a->softmax, 1, sizeof sq, &sq, &err);
    set_arg(a->softmax, 2, sizeof sk, &sk, &err);
    set_arg(a->pv, 0, sizeof(cl_mem), &a->s, &err);
    set_arg(a->pv, 1, sizeof(cl_mem), &a->v, &err);
    set_arg(a->pv, 2, sizeof(cl_mem), &a->o, &err);
    set_arg(a->pv, 3, sizeof sq, &sq, &err);
    set_arg(a->pv, 4, sizeof sk, &sk, &err);
    set_arg(a->pv, 5, sizeof d, &d, &err);
    set_arg(a->pv, 6, sizeof hq, &hq, &err);
    set_arg(a->pv, 7, sizeof hkv, &hkv, &err);
    return err == CL_SUCCESS ? FA_STATUS_OK
                             : naive_cl_fail(err, "clSetKernelArg", why, why_size);
}

/* The backward kernels' arguments, set once like the forward's. */
static fa_status set_backward_args(naive_cl_attn *a, char *why, size_t why_size)
{
    const naive_problem *p = &a->base.p;
    cl_long sq = p->seq_q, sk = p->seq_k, d = p->dim, hq = p->heads_q, hkv = p->heads_kv;
    cl_float scale = p->scale;
    const cl_mem dp_in[3] = {a->d_o, a->v, a->dp}, ds_in[2] = {a->s, a->dp};
    const cl_mem dq_in[3] = {a->dp, a->k, a->dq};
    const cl_mem dkv_in[6] = {a->s, a->dp, a->q, a->d_o, a->dk, a->dv};
    const cl_long dims[5] = {sq, sk, d, hq, hkv};
    cl_int err = CL_SUCCESS;
    cl_uint i;
    for (i = 0; i < 3; i++) {
        set_arg(a->dp_kernel, i, sizeof(cl_mem), &dp_in[i], &err);
        set_arg(a->dq_kernel, i, sizeof(cl_mem), &dq_in[i], &err);
    }
    for (i = 0; i < 6; i++)
        set_arg(a->dkv_kernel, i, sizeof(cl_mem), &dkv_in[i], &err);
    for (i = 0; i < 5; i++) {
        set_arg(a->dp_kernel, 3 + i, sizeof(cl_long), &dims[i], &err);
        set_arg(a->dq_kernel, 3 + i, sizeof(cl_long), &dims[i], &err);
        set_arg(a->dkv_kernel, 6 + i, sizeof(cl_long), &dims[i], &err);
    }
    set_arg(a->dq_kernel, 8, sizeof scale, &scale, &err);
    set_arg(a->dkv_kernel, 11, sizeof scale, &scale, &err);
    set_arg(a->ds_kernel, 0, sizeof(cl_mem), &ds_in[0], &err);
    set_arg(a->ds_kernel, 1, sizeof(cl_mem), &ds_in[1], &err);
    set_arg(a->ds_kernel, 2, sizeof sq, &sq, &err);
    set_arg(a->ds_kernel, 3, sizeof sk, &sk, &err);
    return err == CL_SUCCESS ? FA_STATUS_OK
                             : naive_cl_fail(err, "clSetKernelArg", why, why_size);
}

/* dO and dQ like Q, dK and dV like K, dP like S/P, and the four backward kernels. */
static fa_status create_backward(naive_cl_attn *a, cl_program prog, uint64_t qb, uint64_t kvb,
                                 char *why, size_t why_size)
{
    fa_status st = make_buffer(a, qb, &a->d_o, why, why_size);
    st = st ? st : make_buffer(a, qb, &a->dq, why, why_size);
    st = st ? st : make_buffer(a, kvb, &a->dk, why, why_size);
    st = st ? st : make_buffer(a, kvb, &a->dv, why, why_size);
    st = st ? st : make_buffer(a, naive_sp_bytes(&a->base.p), &a->dp, why, why_size);
    st = st ? st : make_kernel(prog, "naive_dp", &a->dp_kernel, why, why_size);
    st = st ? st : make_kernel(prog, "naive_ds", &a->ds_kernel, why, why_size);
    st = st ? st : make_kernel(prog, "naive_dq", &a->dq_kernel, why, why_size);
    st = st ? st : make_kernel(prog, "naive_dkv", &a->dkv_kernel, why, why_size);
    return st ? st : set_backward_args(a, why, why_size);
}

static fa_status create_objects(naive_cl_attn *a, char *why, size_t why_size)
{
    const naive_problem *p = &a->base.p;
    uint64_t esz = fa_dtype_size(p->dtype);
    uint64_t qb = (uint64_t)(p->batch * p->heads_q * p->seq_q * p->dim) * esz;
    uint64_t kvb = (uint64_t)(p->batch * p->heads_kv * p->seq_k * p->dim) * esz;
    cl_program prog = NULL;
    fa_status st = get_program(a->cl, p->dtype, p->mask, &prog, why, why_size);
    st = st ? st : make_buffer(a, qb, &a->q, why, why_size);
    st = st ? st : make_buffer(a, kvb, &a->k, why, why_size);
    st = st ? st : make_buffer(a, kvb, &a->v, why, why_size);
    st = st ? st : make_buffer(a, qb, &a->o, why, why_size);
    st = st ? st : make_buffer(a, naive_sp_bytes(p), &a->s, why, why_size);
    st = st ? st : make_kernel(prog, "naive_scores", &a->scores, why, why_size);
    st = st ? st : make_kernel(prog, "naive_softmax", &a->softmax, why, why_size);
    st = st ? st : make_kernel(prog, "naive_pv", &a->pv, why, why_size);
    st = st ? st : set_args(a, why, why_size);
    if (st == FA_STATUS_OK && p->backward)
        st = create_backward(a, prog, qb, kvb, why, why_size);
    return st;
}

static fa_status write_one(naive_cl_attn *a, cl_mem mem, const void *src, size_t bytes,
                           char *why, size_t why_size)
{
    cl_int err;
    if (bytes == 0)
        return FA_STATUS_OK;
    err = clEnqueueWriteBuffer(a->cl->queue, mem, CL_TRUE, 0, bytes, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? FA_STATUS_OK
                             : naive_cl_fail(err, "clEnqueueWriteBuffer", why, why_size);
}

/* ---- the operations ---------------------------------------------------------------------- */

static fa_status cl_upload(naive_attn *base, const void *q, const void *k, const void *v,
                           char *why, size_t why_size)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    const naive_problem *p = &a->base.p;
    size_t esz = fa_dtype_size(p->dtype);
    size_t qb = (size_t)(p->batch * p->heads_q * p->seq_q * p->dim) * esz;
    size_t kvb = (size_t)(p->batch * p->heads_kv * p->seq_k * p->dim) * esz;
    fa_status st = write_one(a, a->q, q, qb, why, why_size);
    st = st ? st : write_one(a, a->k, k, kvb, why, why_size);
    return st ? st : write_one(a, a->v, v, kvb, why, why_size);
}

static fa_status enqueue(naive_cl_attn *a, cl_kernel k, cl_uint dims, const size_t *global,
                         const char *name, char *why, size_t why_size)
{
    cl_int err = clEnqueueNDRangeKernel(a->cl->queue, k, dims, NULL, global, NULL, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return naive_fail(naive_cl_status(err), why, why_size,
                          "naive opencl: clEnqueueNDRangeKernel(%s) failed (error %d)", name,
                          (int)err);
    return FA_STATUS_OK;
}

static fa_status cl_forward(naive_attn *base, char *why, size_t why_size)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    const naive_problem *p = &a->base.p;
    size_t bh = (size_t)(p->batch * p->heads_q);
    size_t g_scores[3] = {(size_t)p->seq_k, (size_t)p->seq_q, bh};
    size_t g_softmax[2] = {(size_t)p->seq_q, bh};
    size_t g_pv[3] = {(size_t)p->dim, (size_t)p->seq_q, bh};
    fa_status st = FA_STATUS_OK;
    cl_int err;
    if (bh == 0 || p->seq_q == 0)
        return FA_STATUS_OK; /* nothing to compute; OpenCL refuses empty NDRanges */
    if (p->seq_k > 0)
        st = enqueue(a, a->scores, 3, g_scores, "naive_scores", why, why_size);
    st = st ? st : enqueue(a, a->softmax, 2, g_softmax, "naive_softmax", why, why_size);
    st = st ? st : enqueue(a, a->pv, 3, g_pv, "naive_pv", why, why_size);
    err = clFinish(a->cl->queue);
    if (st == FA_STATUS_OK && err != CL_SUCCESS)
        st = naive_cl_fail(err, "clFinish", why, why_size);
    return st;
}

static fa_status cl_upload_do(naive_attn *base, const void *d_o, char *why, size_t why_size)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    size_t bytes = (size_t)naive_q_elems(&a->base.p) * fa_dtype_size(a->base.p.dtype);
    return write_one(a, a->d_o, d_o, bytes, why, why_size);
}

/* The four backward kernels in order on the in-order queue; an empty NDRange (which OpenCL
 * refuses) is left out, which still writes every gradient: dQ needs rows, dK and dV keys. */
static fa_status cl_backward(naive_attn *base, char *why, size_t why_size)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    const naive_problem *p = &a->base.p;
    size_t bh = (size_t)(p->batch * p->heads_q), bkv = (size_t)(p->batch * p->heads_kv);
    size_t g_dp[3] = {(size_t)p->seq_k, (size_t)p->seq_q, bh};
    size_t g_ds[2] = {(size_t)p->seq_q, bh};
    size_t g_dq[3] = {(size_t)p->dim, (size_t)p->seq_q, bh};
    size_t g_dkv[3] = {(size_t)p->dim, (size_t)p->seq_k, bkv};
    int rows = bh > 0 && p->seq_q > 0, keys = bkv > 0 && p->seq_k > 0;
    fa_status st = FA_STATUS_OK;
    cl_int err;
    if (rows && keys)
        st = enqueue(a, a->dp_kernel, 3, g_dp, "naive_dp", why, why_size);
    if (rows) {
        st = st ? st : enqueue(a, a->ds_kernel, 2, g_ds, "naive_ds", why, why_size);
        st = st ? st : enqueue(a, a->dq_kernel, 3, g_dq, "naive_dq", why, why_size);
    }
    if (keys)
        st = st ? st : enqueue(a, a->dkv_kernel, 3, g_dkv, "naive_dkv", why, why_size);
    err = clFinish(a->cl->queue);
    if (st == FA_STATUS_OK && err != CL_SUCCESS)
        st = naive_cl_fail(err, "clFinish", why, why_size);
    return st;
}

static fa_status read_one(naive_cl_attn *a, cl_mem mem, void *dst, size_t bytes, char *why,
                          size_t why_size)
{
    cl_int err;
    if (bytes == 0)
        return FA_STATUS_OK;
    err = clEnqueueReadBuffer(a->cl->queue, mem, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? FA_STATUS_OK
                             : naive_cl_fail(err, "clEnqueueReadBuffer", why, why_size);
}

static fa_status cl_download(naive_attn *base, void *o, char *why, size_t why_size)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    size_t bytes = (size_t)naive_q_elems(&a->base.p) * fa_dtype_size(a->base.p.dtype);
    return read_one(a, a->o, o, bytes, why, why_size);
}

static fa_status cl_download_grads(naive_attn *base, void *dq, void *dk, void *dv, char *why,
                                   size_t why_size)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    size_t esz = fa_dtype_size(a->base.p.dtype);
    size_t qb = (size_t)naive_q_elems(&a->base.p) * esz;
    size_t kvb = (size_t)naive_kv_elems(&a->base.p) * esz;
    fa_status st = read_one(a, a->dq, dq, qb, why, why_size);
    st = st ? st : read_one(a, a->dk, dk, kvb, why, why_size);
    return st ? st : read_one(a, a->dv, dv, kvb, why, why_size);
}

static uint64_t cl_uncounted_bytes(const naive_attn *base)
{
    return ((const naive_cl_attn *)base)->bytes;
}

static void cl_destroy(naive_attn *base)
{
    naive_cl_attn *a = (naive_cl_attn *)base;
    const cl_kernel kernels[7] = {a->scores,    a->softmax,   a->pv,       a->dp_kernel,
                                  a->ds_kernel, a->dq_kernel, a->dkv_kernel};
    const cl_mem mems[10] = {a->q,  a->k,  a->v,  a->o,  a->s,
                             a->d_o, a->dq, a->dk, a->dv, a->dp};
    int i;
    for (i = 0; i < 7; i++)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    for (i = 0; i < 10; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    free(a);
}

static const naive_ops cl_ops = {.upload = cl_upload,
                                 .forward = cl_forward,
                                 .download = cl_download,
                                 .uncounted_bytes = cl_uncounted_bytes,
                                 .destroy = cl_destroy,
                                 .upload_do = cl_upload_do,
                                 .backward = cl_backward,
                                 .download_grads = cl_download_grads};

fa_status naive_cl_check_memory(const naive_cl *cl, const naive_problem *p, char *why,
                                size_t why_size)
{
    fa_status st = naive_check_size(p, cl->max_alloc, "largest allocation "
                                    "(CL_DEVICE_MAX_MEM_ALLOC_SIZE)", why, why_size);
    if (st == FA_STATUS_OK && naive_total_bytes(p) > cl->global_mem)
        st = naive_fail(FA_STATUS_OUT_OF_MEMORY, why, why_size,
                        "naive buffers need %llu bytes, more than the device's memory of %llu "
                        "(CL_DEVICE_GLOBAL_MEM_SIZE)",
                        (unsigned long long)naive_total_bytes(p),
                        (unsigned long long)cl->global_mem);
    return st;
}

fa_status naive_create_opencl(naive_attn **out, naive_cl *cl, const naive_problem *p, char *why,
                              size_t why_size)
{
    naive_cl_attn *a;
    *out = NULL;
    fa_status st = naive_cl_check_memory(cl, p, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    a = (naive_cl_attn *)naive_alloc(sizeof *a, &cl_ops, p, why, why_size);
    if (!a)
        return FA_STATUS_OUT_OF_MEMORY;
    a->cl = cl;
    st = create_objects(a, why, why_size);
    if (st != FA_STATUS_OK) {
        cl_destroy(&a->base);
        return st;
    }
    *out = &a->base;
    return FA_STATUS_OK;
}
