/*
 * registry.c - the one place that knows which backends are built in. Each backend exports its
 * ops table; the core reaches backends only through fa__backend_ops_get.
 */
#include "internal.h"

extern const fa__backend_ops fa__cpu_ops;
#ifdef FLASHATTN_WITH_OPENCL
extern const fa__backend_ops fa__opencl_ops;
#endif
#ifdef FLASHATTN_WITH_CUDA
extern const fa__backend_ops fa__cuda_ops;
#endif

const fa__backend_ops *fa__backend_ops_get(fa_backend backend)
{
    switch (backend) {
    case FA_BACKEND_CPU:
        return &fa__cpu_ops;
#ifdef FLASHATTN_WITH_OPENCL
    case FA_BACKEND_OPENCL:
        return &fa__opencl_ops;
#endif
#ifdef FLASHATTN_WITH_CUDA
    case FA_BACKEND_CUDA:
        return &fa__cuda_ops;
#endif
    default:
        return NULL;
    }
}
