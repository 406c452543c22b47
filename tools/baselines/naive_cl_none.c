/*
 * naive_cl_none.c - the OpenCL entry points of the NAIVE benchmark attention (see naive.h) in
 * a build without OpenCL, in place of naive_cl.c: each says so with
 * FA_STATUS_BACKEND_UNAVAILABLE, so callers need no #ifdef.
 */
#include "naive.h"

fa_status naive_cl_open(naive_cl **out, int index, char *why, size_t why_size)
{
    (void)index;
    *out = NULL;
    return naive_fail(FA_STATUS_BACKEND_UNAVAILABLE, why, why_size,
                      "naive opencl: the tool was built without OpenCL");
}

fa_status naive_cl_fa_context(naive_cl *cl, fa_context **out, char *why, size_t why_size)
{
    (void)cl;
    *out = NULL;
    return naive_fail(FA_STATUS_BACKEND_UNAVAILABLE, why, why_size, "no OpenCL in this build");
}

void naive_cl_close(naive_cl *cl)
{
    (void)cl;
}

fa_status naive_create_opencl(naive_attn **out, naive_cl *cl, const naive_problem *p, char *why,
                              size_t why_size)
{
    (void)cl;
    (void)p;
    *out = NULL;
    return naive_fail(FA_STATUS_BACKEND_UNAVAILABLE, why, why_size, "no OpenCL in this build");
}
