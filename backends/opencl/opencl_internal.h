/*
 * opencl_internal.h - what the OpenCL backend's files share: the per-context state, the program
 * cache entries, the table of OpenCL entry points, error translation and device discovery. Not
 * installed; users see only include/flashattn_opencl.h.
 */
#ifndef FA_OPENCL_INTERNAL_H
#define FA_OPENCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "internal.h"
#include "kernel_build.h"

/*
 * The OpenCL 1.2 entry points the backend calls, one table filled at run time from the ICD
 * loader (cl_loader.c), so the library links no OpenCL and runs where none is installed. Each
 * field is the entry point without its "cl" prefix: fa__cl.GetDeviceInfo is clGetDeviceInfo.
 * FA_CL_ENTRY_POINTS lists them once, for the loader's symbol table and its prototype checks.
 */
#define FA_CL_ENTRY_POINTS(X)                                                                   \
    X(GetPlatformIDs) X(GetPlatformInfo) X(GetDeviceIDs) X(GetDeviceInfo) X(RetainDevice)       \
    X(ReleaseDevice) X(CreateContext) X(RetainContext) X(ReleaseContext) X(CreateCommandQueue)  \
    X(RetainCommandQueue) X(ReleaseCommandQueue) X(GetCommandQueueInfo) X(CreateBuffer)         \
    X(CreateSubBuffer) X(RetainMemObject) X(ReleaseMemObject) X(GetMemObjectInfo)               \
    X(CreateProgramWithSource) X(BuildProgram) X(GetProgramBuildInfo) X(RetainProgram)          \
    X(ReleaseProgram) X(CreateKernel) X(ReleaseKernel) X(SetKernelArg)                          \
    X(GetKernelWorkGroupInfo) X(EnqueueFillBuffer) X(EnqueueWriteBuffer) X(EnqueueReadBuffer)   \
    X(EnqueueNDRangeKernel) X(Finish) X(EnqueueMapBuffer) X(EnqueueUnmapMemObject)

typedef struct fa__cl_api {
    /* platforms and devices */
    cl_int(CL_API_CALL *GetPlatformIDs)(cl_uint n, cl_platform_id *ids, cl_uint *count);
    cl_int(CL_API_CALL *GetPlatformInfo)(cl_platform_id p, cl_platform_info what, size_t size,
                                         void *value, size_t *size_ret);
    cl_int(CL_API_CALL *GetDeviceIDs)(cl_platform_id p, cl_device_type type, cl_uint n,
                                      cl_device_id *ids, cl_uint *count);
    cl_int(CL_API_CALL *GetDeviceInfo)(cl_device_id d, cl_device_info what, size_t size,
                                       void *value, size_t *size_ret);
    cl_int(CL_API_CALL *RetainDevice)(cl_device_id d);
    cl_int(CL_API_CALL *ReleaseDevice)(cl_device_id d);
    /* contexts and queues */
    cl_context(CL_API_CALL *CreateContext)(const cl_context_properties *props, cl_uint n,
                                           const cl_device_id *devices,
                                           void(CL_CALLBACK *notify)(const char *, const void *,
                                                                     size_t, void *),
                                           void *user, cl_int *err);
    cl_int(CL_API_CALL *RetainContext)(cl_context c);
    cl_int(CL_API_CALL *ReleaseContext)(cl_context c);
    cl_command_queue(CL_API_CALL *CreateCommandQueue)(cl_context c, cl_device_id d,
                                                      cl_command_queue_properties props,
                                                      cl_int *err);
    cl_int(CL_API_CALL *RetainCommandQueue)(cl_command_queue q);
    cl_int(CL_API_CALL *ReleaseCommandQueue)(cl_command_queue q);
    cl_int(CL_API_CALL *GetCommandQueueInfo)(cl_command_queue q, cl_command_queue_info what,
                                             size_t size, void *value, size_t *size_ret);
    /* buffers */
    cl_mem(CL_API_CALL *CreateBuffer)(cl_context c, cl_mem_flags flags, size_t size, void *host,
                                      cl_int *err);
    cl_mem(CL_API_CALL *CreateSubBuffer)(cl_mem m, cl_mem_flags flags, cl_buffer_create_type t,
                                         const void *info, cl_int *err);
    cl_int(CL_API_CALL *RetainMemObject)(cl_mem m);
    cl_int(CL_API_CALL *ReleaseMemObject)(cl_mem m);
    cl_int(CL_API_CALL *GetMemObjectInfo)(cl_mem m, cl_mem_info what, size_t size, void *value,
                                          size_t *size_ret);
    /* programs and kernels */
    cl_program(CL_API_CALL *CreateProgramWithSource)(cl_context c, cl_uint n, const char **text,
                                                     const size_t *lengths, cl_int *err);
    cl_int(CL_API_CALL *BuildProgram)(cl_program p, cl_uint n, const cl_device_id *devices,
                                      const char *options,
                                      void(CL_CALLBACK *notify)(cl_program, void *), void *user);
    cl_int(CL_API_CALL *GetProgramBuildInfo)(cl_program p, cl_device_id d,
                                             cl_program_build_info what, size_t size,
                                             void *value, size_t *size_ret);
    cl_int(CL_API_CALL *RetainProgram)(cl_program p);
    cl_int(CL_API_CALL *ReleaseProgram)(cl_program p);
    cl_kernel(CL_API_CALL *CreateKernel)(cl_program p, const char *name, cl_int *err);
    cl_int(CL_API_CALL *ReleaseKernel)(cl_kernel k);
    cl_int(CL_API_CALL *SetKernelArg)(cl_kernel k, cl_uint index, size_t size, const void *value);
    cl_int(CL_API_CALL *GetKernelWorkGroupInfo)(cl_kernel k, cl_device_id d,
                                                cl_kernel_work_group_info what, size_t size,
                                                void *value, size_t *size_ret);
    /* commands */
    cl_int(CL_API_CALL *EnqueueFillBuffer)(cl_command_queue q, cl_mem m, const void *pattern,
                                           size_t pattern_size, size_t offset, size_t size,
                                           cl_uint n_wait, const cl_event *wait, cl_event *ev);
    cl_int(CL_API_CALL *EnqueueWriteBuffer)(cl_command_queue q, cl_mem m, cl_bool blocking,
                                            size_t offset, size_t size, const void *src,
                                            cl_uint n_wait, const cl_event *wait, cl_event *ev);
    cl_int(CL_API_CALL *EnqueueReadBuffer)(cl_command_queue q, cl_mem m, cl_bool blocking,
                                           size_t offset, size_t size, void *dst, cl_uint n_wait,
                                           const cl_event *wait, cl_event *ev);
    cl_int(CL_API_CALL *EnqueueNDRangeKernel)(cl_command_queue q, cl_kernel k, cl_uint dims,
                                              const size_t *offset, const size_t *global,
                                              const size_t *local, cl_uint n_wait,
                                              const cl_event *wait, cl_event *ev);
    cl_int(CL_API_CALL *Finish)(cl_command_queue q);
    void *(CL_API_CALL *EnqueueMapBuffer)(cl_command_queue q, cl_mem m, cl_bool blocking,
                                          cl_map_flags flags, size_t offset, size_t size,
                                          cl_uint n_wait, const cl_event *wait, cl_event *ev,
                                          cl_int *err);
    cl_int(CL_API_CALL *EnqueueUnmapMemObject)(cl_command_queue q, cl_mem m, void *mapped,
                                               cl_uint n_wait, const cl_event *wait,
                                               cl_event *ev);
} fa__cl_api;

/*
 * The loaded table. Filled once, by the first fa__cl_load; read only after a fa__cl_load that
 * returned OK: every way into the backend (discovery, which opening a context goes through,
 * and fa_context_create_opencl) loads first, and every cl_* object the backend holds was made
 * or retained after that.
 */
extern fa__cl_api fa__cl;

/*
 * Loads the ICD loader and resolves every entry point, once per process (pthread_once; later
 * calls return the first one's result). BACKEND_UNAVAILABLE with the reason when there is no
 * loader ("no OpenCL ICD loader (libOpenCL.so.1): <dlerror>") or it lacks an entry point.
 */
fa_status fa__cl_load(char *why, size_t why_size);

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
    cl_bool host_memory;      /* a CPU device: its memory is host memory, so fa_buffer_wrap_host
                                 wraps caller arrays (CL_MEM_USE_HOST_PTR) without a copy */
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
 * out NULL, only the count). Loads the ICD loader first (fa__cl_load). BACKEND_UNAVAILABLE with
 * a reason (no loader; each platform's error, and pocl's kernel cache when it is the likely
 * cause) when there is no loader, platform or device;
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

/* The kernels' planning rules and measured preferences (cl_rules.c; the ops table's
 * plan_rules). */
void fa__cl_plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules);

/* Finds or builds the program and kernel of an entry point for a set of -D options
 * (KERNEL_BUILD_ERROR with the log). */
fa_status fa__cl_program_get(fa_context *ctx, fa__cl_state *s, fa__kernel kernel,
                             const char *options, fa__cl_program **out);
/* Releases every cached program. */
void fa__cl_programs_release(fa__cl_state *s);

/* The backend's ops (backends/opencl/opencl.c); the interop entry points need them. */
extern const fa__backend_ops fa__opencl_ops;

#endif /* FA_OPENCL_INTERNAL_H */
