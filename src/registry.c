/*
 * registry.c - the one list of backends: which the library knows, in the order FA_BACKEND_AUTO
 * tries them, and which are built in. Each backend exports its ops table; the core reaches
 * backends only through fa__backend_ops_get, and tools and tests iterate fa_backend_at.
 */
#include "internal.h"

extern const fa__backend_ops fa__cpu_ops;
#ifdef FLASHATTN_WITH_OPENCL
extern const fa__backend_ops fa__opencl_ops;
#endif
#ifdef FLASHATTN_WITH_CUDA
extern const fa__backend_ops fa__cuda_ops;
#endif

typedef struct registry_entry {
    fa_backend backend;
    const fa__backend_ops *ops; /* NULL: known, not built in */
} registry_entry;

/* Fastest first: AUTO picks the first with a device; the CPU golden is always there. */
static const registry_entry registry[] = {
#ifdef FLASHATTN_WITH_CUDA
    {FA_BACKEND_CUDA, &fa__cuda_ops},
#else
    {FA_BACKEND_CUDA, NULL},
#endif
#ifdef FLASHATTN_WITH_OPENCL
    {FA_BACKEND_OPENCL, &fa__opencl_ops},
#else
    {FA_BACKEND_OPENCL, NULL},
#endif
    {FA_BACKEND_CPU, &fa__cpu_ops},
};

#define REGISTRY_SIZE ((int)(sizeof registry / sizeof registry[0]))

int fa_backend_count(void)
{
    return REGISTRY_SIZE;
}

fa_backend fa_backend_at(int index)
{
    return index >= 0 && index < REGISTRY_SIZE ? registry[index].backend : FA_BACKEND_AUTO;
}

const fa__backend_ops *fa__backend_ops_get(fa_backend backend)
{
    for (int i = 0; i < REGISTRY_SIZE; i++) {
        if (registry[i].backend == backend)
            return registry[i].ops;
    }
    return NULL;
}
