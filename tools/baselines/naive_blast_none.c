/*
 * naive_blast_none.c - stands in for naive_blast.c where CLBlast (or OpenCL) was not found at
 * build time: the tuned-GEMM naive attention is FA_STATUS_UNSUPPORTED with the reason, which
 * `flashattn bench` prints, so a missing baseline is never a silent gap.
 */
#include "naive.h"

#include <stddef.h>

const char *naive_clblast_info(void)
{
    return NULL;
}

fa_status naive_create_clblast(naive_attn **out, naive_cl *cl, const naive_problem *p,
                               char *why, size_t why_size)
{
    (void)cl, (void)p;
    *out = NULL;
    return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size,
                      "built without CLBlast (install libclblast-dev and reconfigure)");
}

fa_status naive_clblast_tune(naive_cl *cl, const char *params, char *why, size_t why_size)
{
    (void)cl, (void)params;
    return naive_fail(FA_STATUS_UNSUPPORTED, why, why_size,
                      "built without CLBlast (install libclblast-dev and reconfigure)");
}
