/*
 * opencl_internal.h - what the OpenCL backend's files share: the per-context state, the program
 * cache entries, error translation and device discovery. Not installed; users see only
 * include/flashattn_opencl.h.
 */
#ifndef FA_OPENCL_INTERNAL_H
#define FA_OPENCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "internal.h"
#include "kernel_build.h"

/* One built program and its kernel, kept in the context's cache under its entry point and -D
 * options until the context closes. */
typedef struct fa__cl_program {
    cl_program program;
    cl_kernel kernel;       /* the entry point; arguments are set before every launch */
    size_t kernel_wg;       /* CL_KERNEL_WORK_GROUP_SIZE */
    cl_ulong kernel_local;  /* CL_KERNEL_LOCAL_MEM_SIZE */
} fa__cl_program;

/* The backend state of one fa_context (what context_open returns). */
typedef struct fa__cl_state {
    cl_context context;
    cl_device_id device;
    cl_command_queue queue;  /* in-order */
    cl_uint base_align_bits; /* CL_DEVICE_MEM_BASE_ADDR_ALIGN: sub-buffer origin alignment */
    cl_ulong max_alloc;      /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    cl_ulong local_mem;      /* CL_DEVICE_LOCAL_MEM_SIZE */
    cl_uint vector_width;    /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT */
    cl_bool compiler;        /* CL_DEVICE_COMPILER_AVAILABLE */
    cl_mem_flags alloc_flags; /* added to CL_MEM_READ_WRITE: CL_MEM_ALLOC_HOST_PTR on CPUs */
    fa__kernel_cache programs; /* fa__cl_program, by -D options */
} fa__cl_state;

/* "CL_OUT_OF_RESOURCES", ...; "CL_UNKNOWN_ERROR" for codes not in OpenCL 1.2. */
const char *fa__cl_error_name(cl_int err);
/* The status an OpenCL error maps to: OUT_OF_MEMORY for allocation failures, else DEVICE_ERROR. */
fa_status fa__cl_status(cl_int err);
/* Records "call failed (CL_NAME, code)" as ctx's error and returns its mapped status. */
fa_status fa__cl_fail(fa_context *ctx, cl_int err, const char *call);

/*
 * Serialises device discovery and context creation and release across threads (pocl 3.1 is not
 * safe there). Held around the calls below that enumerate, and around clCreateContext /
 * clReleaseContext; never while a program builds or a kernel runs.
 */
void fa__cl_lock(void);
void fa__cl_unlock(void);

/*
 * Flattens every device of every platform into one list and stores device `index` in *out (with
 * out NULL, only the count). BACKEND_UNAVAILABLE with a reason (each platform's error, and
 * pocl's kernel cache when it is the likely cause) when there is no platform or device;
 * DEVICE_NOT_FOUND for a negative index or one past the end. Call under fa__cl_lock.
 */
fa_status fa__cl_find_device(int index, cl_device_id *out, int *count, char *why,
                             size_t why_size);
/* The index of a device in that list, or -1 (a sub-device, or a device not listed). Call under
 * fa__cl_lock. */
int fa__cl_device_index(cl_device_id device);
/* Fills fa_device_props from a device's queries. Call under fa__cl_lock. */
fa_status fa__cl_device_props(cl_device_id device, fa_device_props *out, char *why,
                              size_t why_size);
/* The properties of a known GPU profile ("amd-gfx90a", ...: cl_profiles.c) for planning-only
 * contexts; INVALID_ARGUMENT with the known names for any other. */
fa_status fa__cl_profile_props(const char *name, fa_device_props *out, char *why,
                               size_t why_size);
/* BACKEND_UNAVAILABLE for a device operation of a planning-only context (no state). */
fa_status fa__cl_no_device(fa_context *ctx);
/* Reads the device limits the backend keeps in its state. */
fa_status fa__cl_state_limits(fa_context *ctx, fa__cl_state *s);

/* Finds or builds the program and kernel of an entry point for a set of -D options
 * (KERNEL_BUILD_ERROR with the log). */
fa_status fa__cl_program_get(fa_context *ctx, fa__cl_state *s, const char *entry,
                             const char *options, fa__cl_program **out);
/* Releases every cached program. */
void fa__cl_programs_release(fa__cl_state *s);

/* The backend's ops (backends/opencl/opencl.c); the interop entry points need them. */
extern const fa__backend_ops fa__opencl_ops;

#endif /* FA_OPENCL_INTERNAL_H */
