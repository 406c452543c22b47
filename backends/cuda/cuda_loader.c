/*
 * cuda_loader.c - loads the CUDA driver (libcuda.so.1) and NVRTC with dlopen/dlsym at run time,
 * so a library built with the CUDA backend links neither and still loads on a machine without
 * a GPU, a driver or the Toolkit: the backend then reports itself unavailable, with the reason.
 * Also the driver's error names and their mapping to fa_status.
 *
 * Each load fills the caller's table; nothing global is written, so concurrent loads need no
 * lock. Handles are never closed: the driver must stay resident once initialized, and a second
 * dlopen of a loaded library only bumps a reference count.
 */
#define _POSIX_C_SOURCE 200809L

#include "cuda_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* One entry point: its exported (ABI) name and its slot in a table. */
typedef struct fa__symbol {
    const char *name;
    size_t offset;
} fa__symbol;

#define CU_SYM(field, abi) {abi, offsetof(fa__cu_api, field)}
static const fa__symbol cu_symbols[] = {
    CU_SYM(Init, "cuInit"),
    CU_SYM(DriverGetVersion, "cuDriverGetVersion"),
    CU_SYM(GetErrorName, "cuGetErrorName"),
    CU_SYM(GetErrorString, "cuGetErrorString"),
    CU_SYM(DeviceGetCount, "cuDeviceGetCount"),
    CU_SYM(DeviceGet, "cuDeviceGet"),
    CU_SYM(DeviceGetName, "cuDeviceGetName"),
    CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
    CU_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2"),
    CU_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    CU_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    CU_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
    CU_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
    CU_SYM(CtxGetDevice, "cuCtxGetDevice"),
    CU_SYM(StreamCreate, "cuStreamCreate"),
    CU_SYM(StreamDestroy, "cuStreamDestroy_v2"),
    CU_SYM(StreamSynchronize, "cuStreamSynchronize"),
    CU_SYM(StreamGetCtx, "cuStreamGetCtx"),
    CU_SYM(MemAlloc, "cuMemAlloc_v2"),
    CU_SYM(MemFree, "cuMemFree_v2"),
    CU_SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    CU_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
    CU_SYM(MemGetAddressRange, "cuMemGetAddressRange_v2"),
    CU_SYM(PointerGetAttribute, "cuPointerGetAttribute"),
    CU_SYM(ModuleLoadData, "cuModuleLoadData"),
    CU_SYM(ModuleUnload, "cuModuleUnload"),
    CU_SYM(ModuleGetFunction, "cuModuleGetFunction"),
    CU_SYM(FuncGetAttribute, "cuFuncGetAttribute"),
    CU_SYM(FuncSetAttribute, "cuFuncSetAttribute"),
    CU_SYM(LaunchKernel, "cuLaunchKernel"),
};

#define NV_SYM(field, abi) {abi, offsetof(fa__nvrtc_api, field)}
static const fa__symbol nvrtc_symbols[] = {
    NV_SYM(Version, "nvrtcVersion"),
    NV_SYM(GetErrorString, "nvrtcGetErrorString"),
    NV_SYM(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs"),
    NV_SYM(GetSupportedArchs, "nvrtcGetSupportedArchs"),
    NV_SYM(CreateProgram, "nvrtcCreateProgram"),
    NV_SYM(DestroyProgram, "nvrtcDestroyProgram"),
    NV_SYM(CompileProgram, "nvrtcCompileProgram"),
    NV_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize"),
    NV_SYM(GetProgramLog, "nvrtcGetProgramLog"),
    NV_SYM(GetCUBINSize, "nvrtcGetCUBINSize"),
    NV_SYM(GetCUBIN, "nvrtcGetCUBIN"),
    NV_SYM(GetPTXSize, "nvrtcGetPTXSize"),
    NV_SYM(GetPTX, "nvrtcGetPTX"),
};

/* Resolves every symbol into `table`; on a missing one names it in `why` and returns false.
 * A function pointer is stored through memcpy: ISO C has no object-to-function conversion, and
 * POSIX guarantees the representations agree. */
static bool resolve(void *lib, const char *lib_name, const fa__symbol *syms, size_t n,
                    void *table, char *why, size_t why_size)
{
    for (size_t i = 0; i < n; i++) {
        void *fn = dlsym(lib, syms[i].name);
        if (!fn) {
            const char *e = dlerror();
            fa__format(why, why_size, "%s has no symbol %s (an older driver or library?): %s",
                       lib_name, syms[i].name, e ? e : "dlsym returned NULL");
            return false;
        }
        memcpy((char *)table + syms[i].offset, &fn, sizeof fn);
    }
    return true;
}

/* cuInit errors that mean "no usable GPU or driver here" rather than a failing device. */
static bool init_unusable(CUresult err)
{
    return err == CUDA_ERROR_NO_DEVICE || err == CUDA_ERROR_STUB_LIBRARY ||
           err == CUDA_ERROR_NOT_INITIALIZED || err == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ||
           err == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE;
}

fa_status fa__cu_load(fa__cu_api *api, char *why, size_t why_size)
{
    memset(api, 0, sizeof *api);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        fa__format(why, why_size, "libcuda.so.1 not found (no NVIDIA driver): dlopen says %s",
                   e ? e : "(no message)");
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    if (!resolve(lib, "libcuda.so.1", cu_symbols, sizeof cu_symbols / sizeof cu_symbols[0], api,
                 why, why_size))
        return FA_STATUS_BACKEND_UNAVAILABLE;
    CUresult err = api->Init(0);
    if (err != CUDA_SUCCESS) {
        char desc[256];
        fa__cu_describe(api, err, desc, sizeof desc);
        fa__format(why, why_size, "cuInit failed: %s", desc);
        return init_unusable(err) ? FA_STATUS_BACKEND_UNAVAILABLE : FA_STATUS_DEVICE_ERROR;
    }
    return FA_STATUS_OK;
}

/* Tries one name or path; appends dlopen's message to `tried` when it fails. */
static void *try_open(const char *name, char *tried, size_t tried_size)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        fa__append(tried, tried_size, "%s%s", *tried ? "; " : "", e ? e : name);
    }
    return lib;
}

/* A library under a Toolkit root: root/lib64/name. */
static void *try_root(const char *root, const char *name, char *tried, size_t tried_size)
{
    if (!root || !*root)
        return NULL;
    char path[1024];
    fa__format(path, sizeof path, "%s/lib64/%s", root, name);
    return try_open(path, tried, tried_size);
}

fa_status fa__nvrtc_load(fa__nvrtc_api *nv, char *why, size_t why_size)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    memset(nv, 0, sizeof *nv);
    char tried[1024] = "";
    void *lib = NULL;
    const char *explicit_path = getenv("FLASHATTN_NVRTC");
    if (explicit_path && *explicit_path) {
        /* A path the user named is the one they want: no silent fallback to another NVRTC. */
        lib = try_open(explicit_path, tried, sizeof tried);
        if (!lib) {
            fa__format(why, why_size, "FLASHATTN_NVRTC=%s cannot be loaded: dlopen says %s",
                       explicit_path, tried);
            return FA_STATUS_BACKEND_UNAVAILABLE;
        }
    }
    for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
        lib = try_open(names[i], tried, sizeof tried);
    if (!lib)
        lib = try_root(getenv("CUDA_HOME"), "libnvrtc.so", tried, sizeof tried);
    if (!lib)
        lib = try_root(getenv("CUDA_PATH"), "libnvrtc.so", tried, sizeof tried);
    if (!lib)
        lib = try_root("/usr/local/cuda", "libnvrtc.so", tried, sizeof tried);
    if (!lib) {
        fa__format(why, why_size, "NVRTC (libnvrtc.so.13 / .so.12 / .so) not found: dlopen says %s",
                   tried);
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    if (!resolve(lib, "libnvrtc", nvrtc_symbols, sizeof nvrtc_symbols / sizeof nvrtc_symbols[0],
                 nv, why, why_size))
        return FA_STATUS_BACKEND_UNAVAILABLE;
    return FA_STATUS_OK;
}

void fa__cu_describe(const fa__cu_api *api, CUresult err, char *buf, size_t size)
{
    const char *name = NULL, *text = NULL;
    if (!api->GetErrorName || api->GetErrorName(err, &name) != CUDA_SUCCESS)
        name = NULL;
    if (!api->GetErrorString || api->GetErrorString(err, &text) != CUDA_SUCCESS)
        text = NULL;
    fa__format(buf, size, "%s (%s), %d", name ? name : "CUDA_ERROR_UNKNOWN",
               text ? text : "no description", (int)err);
}

fa_status fa__cu_status(CUresult err)
{
    if (err == CUDA_SUCCESS)
        return FA_STATUS_OK;
    return err == CUDA_ERROR_OUT_OF_MEMORY ? FA_STATUS_OUT_OF_MEMORY : FA_STATUS_DEVICE_ERROR;
}

fa_status fa__cu_fail(fa_context *ctx, const fa__cu_api *api, CUresult err, const char *call)
{
    char desc[256];
    fa__cu_describe(api, err, desc, sizeof desc);
    return fa__error(ctx, fa__cu_status(err), "CUDA: %s failed: %s", call, desc);
}
