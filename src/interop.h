/*
 * interop.h - the argument checks every fa_buffer_wrap_* entry point makes before it looks at
 * the caller's memory, written once so each backend answers the same mistakes the same way.
 */
#ifndef FA_INTEROP_H
#define FA_INTEROP_H

#include "internal.h"

/* What one wrap entry point wraps, for its checks and their messages. */
typedef struct fa__wrap_kind {
    fa_backend backend; /* the one backend whose contexts can wrap it */
    const char *handle; /* "cl_mem": "the cl_mem pointer is NULL" */
    const char *plural; /* "cl_mem buffers": "... can be wrapped only on the opencl backend" */
    /* Optional: whether this backend's context can hold memory at all (a planning-only context
     * cannot); runs after the backend check, before the size check. */
    fa_status (*usable)(fa_context *ctx);
} fa__wrap_kind;

/*
 * The checks, in this order: ctx NULL (NULL_POINTER, nothing recorded), the handle or out NULL
 * (NULL_POINTER), a context of another backend (UNSUPPORTED), kind->usable, bytes 0
 * (INVALID_ARGUMENT). Errors are recorded in ctx. Returns OK when the backend may look at the
 * caller's memory.
 */
fa_status fa__wrap_check(fa_context *ctx, const fa__wrap_kind *kind, bool has_handle,
                         bool has_out, size_t bytes);

#endif /* FA_INTEROP_H */
