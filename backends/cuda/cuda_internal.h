/*
 * cuda_internal.h - what the CUDA backend's files share: the driver API and NVRTC function
 * tables (filled with dlopen/dlsym at run time; the Toolkit's cuda.h and nvrtc.h give only the
 * types), the per-context state, the module cache, device discovery and the known-arch table.
 * Not installed; users see only include/flashattn_cuda.h.
 */
#ifndef FA_CUDA_INTERNAL_H
#define FA_CUDA_INTERNAL_H

#include <cuda.h>
#include <nvrtc.h>

#include "internal.h"
#include "kernel_build.h"

/* Threads that share one owned row in kernels_cu/flash_fwd.cu and flash_bwd.cu (their TPR). */
#define FA_CU_THREADS_PER_ROW 4
/* The tensor-core path (-DMMA=1): rows of one mma.sync tile, one warp each; largest d. */
#define FA_CU_MMA_M 16
#define FA_CU_MMA_MAX_HEAD_DIM 128
/* PIPELINE=1: elements past d in each row of the forward's tiles (kernels_cu: TILE_PAD). */
#define FA_CU_TILE_PAD 8

/*
 * The driver API entry points the backend uses, by their unversioned names. The loader fills
 * each from the ABI symbol cuda.h maps it to (cuMemAlloc -> cuMemAlloc_v2, ...).
 */
typedef struct fa__cu_api {
    CUresult (*Init)(unsigned int flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*GetErrorName)(CUresult err, const char **name);
    CUresult (*GetErrorString)(CUresult err, const char **text);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*DeviceGetAttribute)(int *value, CUdevice_attribute attr, CUdevice dev);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*CtxPushCurrent)(CUcontext ctx);
    CUresult (*CtxPopCurrent)(CUcontext *ctx);
    CUresult (*CtxGetDevice)(CUdevice *dev);
    CUresult (*StreamCreate)(CUstream *stream, unsigned int flags);
    CUresult (*StreamDestroy)(CUstream stream);
    CUresult (*StreamSynchronize)(CUstream stream);
    CUresult (*StreamGetCtx)(CUstream stream, CUcontext *ctx);
    CUresult (*MemAlloc)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr ptr);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*MemGetAddressRange)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
    CUresult (*PointerGetAttribute)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
    CUresult (*ModuleLoadData)(CUmodule *module, const void *image);
    CUresult (*ModuleUnload)(CUmodule module);
    CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name);
    CUresult (*FuncGetAttribute)(int *value, CUfunction_attribute attr, CUfunction fn);
    CUresult (*FuncSetAttribute)(CUfunction fn, CUfunction_attribute attr, int value);
    CUresult (*LaunchKernel)(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shared_bytes, CUstream stream, void **params,
                             void **extra);
} fa__cu_api;

/* The NVRTC entry points the backend uses. */
typedef struct fa__nvrtc_api {
    nvrtcResult (*Version)(int *major, int *minor);
    const char *(*GetErrorString)(nvrtcResult err);
    nvrtcResult (*GetNumSupportedArchs)(int *count);
    nvrtcResult (*GetSupportedArchs)(int *archs);
    nvrtcResult (*CreateProgram)(nvrtcProgram *prog, const char *src, const char *name,
                                 int num_headers, const char *const *headers,
                                 const char *const *include_names);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *prog);
    nvrtcResult (*CompileProgram)(nvrtcProgram prog, int num_options,
                                  const char *const *options);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char *log);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char *cubin);
    nvrtcResult (*GetPTXSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*GetPTX)(nvrtcProgram prog, char *ptx);
    int version;       /* 1000 * major + 10 * minor, as cuDriverGetVersion counts */
    bool ptx_ok;       /* the driver can JIT this NVRTC's PTX (for an arch NVRTC does not know) */
    char library[256]; /* the name or path it was loaded from */
} fa__nvrtc_api;

/*
 * Loads libcuda.so.1 and resolves every entry point, then calls cuInit(0). Each call fills its
 * own table (no global state, so no locking); the library handle stays loaded. Returns
 * BACKEND_UNAVAILABLE with the reason ("libcuda.so.1 not found: dlopen says ...") or
 * DEVICE_ERROR when cuInit fails.
 */
fa_status fa__cu_load(fa__cu_api *api, char *why, size_t why_size);
/*
 * Loads the newest NVRTC the driver can take (FLASHATTN_NVRTC alone when set, else
 * libnvrtc.so.13, .so.12, .so, then CUDA_HOME/CUDA_PATH and /usr/local/cuda's lib64), with its
 * version and whether the driver can JIT its PTX. driver_version: cuDriverGetVersion's, or 0
 * to compile only (no driver: any NVRTC). BACKEND_UNAVAILABLE with every candidate's reason
 * when none suits.
 */
fa_status fa__nvrtc_load(fa__nvrtc_api *nv, int driver_version, char *why, size_t why_size);
/* Whether a driver (cuDriverGetVersion's number; 0: none, compile only) loads what an NVRTC of
 * nvrtc_version makes: an older or equal major; *ptx_ok when it can also JIT its PTX (not a
 * newer minor). False with the reason and the fix in why. */
bool fa__cu_driver_takes(int driver_version, int nvrtc_version, bool *ptx_ok, char *why,
                         size_t why_size);

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver error, into buf. */
void fa__cu_describe(const fa__cu_api *api, CUresult err, char *buf, size_t size);
/* The status a driver error maps to: OUT_OF_MEMORY for allocation failures, else DEVICE_ERROR. */
fa_status fa__cu_status(CUresult err);
/* Records "CUDA: call failed (NAME (text), code)" as ctx's error and returns its status. */
fa_status fa__cu_fail(fa_context *ctx, const fa__cu_api *api, CUresult err, const char *call);

/* One compiled module and its kernel, kept in the context's cache under its entry point and -D
 * options until the context closes. Entry points of one program with the same options share
 * the module of the first one built (cuda_module.c). */
typedef struct fa__cu_module {
    CUmodule module;
    int owns_module;   /* 1: this entry loaded the module and unloads it; 0: borrowed */
    CUfunction kernel; /* the entry point */
    int max_threads;   /* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK of the compiled kernel */
    int static_shared; /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
    int dyn_shared;    /* the dynamic shared memory limit set so far */
} fa__cu_module;

/* A buffer's memory (what buffer_alloc returns): a device pointer, owned or the caller's. */
typedef struct fa__cu_mem {
    CUdeviceptr ptr;
    int owned; /* 1: cuMemFree on release; 0: wrapped caller memory */
} fa__cu_mem;

/* The backend state of one fa_context (what context_open returns). */
typedef struct fa__cu_state {
    fa__cu_api api;
    fa__nvrtc_api nvrtc;
    int driver_version;     /* cuDriverGetVersion at context creation: 13000 for CUDA 13.0 */
    int have_nvrtc;         /* 0: no NVRTC this driver can take; nvrtc_why says why */
    char nvrtc_why[512];
    CUdevice device;
    CUcontext context;      /* the primary context (retained) or the caller's */
    CUstream stream;        /* ours (created) or the caller's */
    int owns_context;       /* 1: release the primary context on close */
    int owns_stream;        /* 1: destroy the stream on close */
    char arch[32];          /* "sm_90" */
    fa__kernel_cache modules; /* fa__cu_module, by -D options */
} fa__cu_state;

/* Reads the driver's version (cuDriverGetVersion, a failure is ctx's error) and loads the
 * newest NVRTC it can take into a state. NVRTC is needed only to build kernels: a context opens
 * without one, and launch_prepare reports why there is none. */
fa_status fa__cu_load_nvrtc(fa_context *ctx, fa__cu_state *s);
/* Makes ctx's CUDA context current on this thread / restores the previous one. */
fa_status fa__cu_push(fa_context *ctx, fa__cu_state *s);
void fa__cu_pop(fa__cu_state *s);

/* Devices: the count (BACKEND_UNAVAILABLE with a reason when none) and their props. */
fa_status fa__cu_device_count(int *count, char *why, size_t why_size);
fa_status fa__cu_device_props(int index, fa_device_props *out, char *why, size_t why_size);
/* Props of an already-opened device through a loaded API table. */
fa_status fa__cu_props_of(const fa__cu_api *api, CUdevice dev, fa_device_props *out, char *why,
                          size_t why_size);
/* FLASHATTN_CUDA_PIPELINE: 1 asks for the tensor-core forward's pipelined variant, 0 (also
 * unset or empty) for today's path; -1: another value, which plan creation refuses. */
int fa__cu_pipeline_setting(void);
/* The kernel's plan rules (the ops table's plan_rules). */
void fa__cu_plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules);

/*
 * Compiles the kernel file(s) of a kernel (FA__KERNEL_FWD, ...) with NVRTC
 * for `arch` ("sm_90") and `options` (space-separated -D options). On success *image /
 * *image_size hold a CUBIN (or PTX when NVRTC does not know the arch but an older one: the
 * driver JIT-compiles it), malloc'ed. On failure returns KERNEL_BUILD_ERROR (or OUT_OF_MEMORY)
 * with a heap message in *msg holding the full log.
 */
fa_status fa__cu_compile(const fa__nvrtc_api *nv, const char *arch, fa__kernel kernel,
                         const char *options, char **image, size_t *image_size, char **msg);
/* Finds or compiles and loads the module of an entry point for a set of -D options. */
fa_status fa__cu_module_get(fa_context *ctx, fa__cu_state *s, fa__kernel kernel,
                            const char *options, fa__cu_module **out);
/* Unloads every cached module (the context must be current). */
void fa__cu_modules_release(fa__cu_state *s);

/* Props of a known architecture ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90") for planning
 * without a device; INVALID_ARGUMENT with the list of known ones otherwise. */
fa_status fa__cuda_arch_props(const char *arch, fa_device_props *out, char *why,
                              size_t why_size);
/*
 * Compiles a kernel's file(s) with NVRTC only (no driver needed). Returns OK,
 * BACKEND_UNAVAILABLE (no NVRTC: the reason), KERNEL_BUILD_ERROR (the full log) or
 * OUT_OF_MEMORY, with the message in log (may be NULL; truncated, always terminated).
 */
fa_status fa__cuda_compile_check(const char *arch, fa__kernel kernel, const char *options,
                                 char *log, size_t log_size);

/* The dynamic shared memory a launch gets (cuLaunchKernel's sharedMemBytes): the plan's
 * on-chip bytes, or what the per-row kernels need. The host emulation bounds its blocks by it. */
uint64_t fa__cu_launch_shared(const fa__launch *launch);

/* Whether a launch must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: a block may use
 * 48 KiB without opting in, static and dynamic shared memory together. */
bool fa__cu_needs_optin(uint64_t dynamic_bytes, uint64_t static_bytes);

/* Compiles a kernel as fa__cuda_compile_check does, with ptxas verbose: *log (heap) holds
 * NVRTC's log, ptxas's registers, spills, stack and shared memory per entry, or the failure. */
fa_status fa__cuda_resource_log(const char *arch, fa__kernel kernel, const char *options,
                                char **log);

/* The backend's ops (backends/cuda/cuda.c); the interop entry points need them. */
extern const fa__backend_ops fa__cuda_ops;

#endif /* FA_CUDA_INTERNAL_H */
