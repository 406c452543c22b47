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

bool fa__cu_driver_takes(int driver_version, int nvrtc_version, bool *ptx_ok, char *why,
                         size_t why_size)
{
    int dmaj = driver_version / 1000, dmin = driver_version % 1000 / 10;
    int nmaj = nvrtc_version / 1000, nmin = nvrtc_version % 1000 / 10;
    *ptx_ok = driver_version == 0 || driver_version >= nvrtc_version;
    if (driver_version == 0 || nmaj <= dmaj)
        return true; /* a newer minor's CUBIN loads (minor version compatibility); its PTX not */
    fa__format(why, why_size, "NVRTC %d.%d makes code for CUDA %d, which the driver (CUDA %d.%d, "
               "cuDriverGetVersion %d) cannot load: install a driver for CUDA %d (for CUDA 13: "
               "580 or newer) or point FLASHATTN_NVRTC at an NVRTC %d.x",
               nmaj, nmin, nmaj, dmaj, dmin, driver_version, nmaj, dmaj);
    return false;
}

/* Resolves a loaded NVRTC into nv and asks its version; false (reason in why) on failure. */
static bool resolve_nvrtc(void *lib, const char *name, fa__nvrtc_api *nv, char *why,
                          size_t why_size)
{
    memset(nv, 0, sizeof *nv);
    if (!resolve(lib, name, nvrtc_symbols, sizeof nvrtc_symbols / sizeof nvrtc_symbols[0], nv,
                 why, why_size))
        return false;
    int major = 0, minor = 0;
    nvrtcResult r = nv->Version(&major, &minor);
    if (r != NVRTC_SUCCESS) {
        fa__format(why, why_size, "%s: nvrtcVersion failed (%d)", name, (int)r);
        return false;
    }
    nv->version = 1000 * major + 10 * minor;
    fa__format(nv->library, sizeof nv->library, "%s", name);
    return true;
}

/* Opens and checks one candidate: true when it loads, resolves and suits the driver; else its
 * reason is appended to tried. */
static bool try_nvrtc(const char *name, int driver_version, fa__nvrtc_api *nv, char *tried,
                      size_t tried_size)
{
    void *lib = try_open(name, tried, tried_size);
    if (!lib)
        return false;
    char why[512] = "";
    if (resolve_nvrtc(lib, name, nv, why, sizeof why) &&
        fa__cu_driver_takes(driver_version, nv->version, &nv->ptx_ok, why, sizeof why))
        return true;
    fa__append(tried, tried_size, "%s%s", *tried ? "; " : "", why);
    return false;
}

/* A candidate under a Toolkit root: root/lib64/libnvrtc.so. */
static bool try_nvrtc_root(const char *root, int driver_version, fa__nvrtc_api *nv, char *tried,
                           size_t tried_size)
{
    if (!root || !*root)
        return false;
    char path[1024];
    fa__format(path, sizeof path, "%s/lib64/libnvrtc.so", root);
    return try_nvrtc(path, driver_version, nv, tried, tried_size);
}

fa_status fa__nvrtc_load(fa__nvrtc_api *nv, int driver_version, char *why, size_t why_size)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    char tried[1536] = "";
    const char *explicit_path = getenv("FLASHATTN_NVRTC");
    memset(nv, 0, sizeof *nv);
    if (explicit_path && *explicit_path) {
        /* A path the user named is the one they want: no silent fallback to another NVRTC. */
        if (try_nvrtc(explicit_path, driver_version, nv, tried, sizeof tried))
            return FA_STATUS_OK;
        fa__format(why, why_size, "FLASHATTN_NVRTC=%s cannot be used: %s", explicit_path,
                   tried);
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    /* The newest first: the first one the driver can load is the one used. */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (try_nvrtc(names[i], driver_version, nv, tried, sizeof tried))
            return FA_STATUS_OK;
    const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++)
        if (try_nvrtc_root(roots[i], driver_version, nv, tried, sizeof tried))
            return FA_STATUS_OK;
    fa__format(why, why_size, "no usable NVRTC (libnvrtc.so.13 / .so.12 / .so): %s", tried);
    return FA_STATUS_BACKEND_UNAVAILABLE;
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
