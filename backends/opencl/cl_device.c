/*
 * cl_device.c - OpenCL error names and status mapping, platform/device discovery (every device
 * of every platform, flattened into one index list) and the fa_device_props each device reports.
 * Discovery runs on every call, so a device list never goes stale; it is cheap next to a build.
 * When no device is found, the reason says why where it can (pocl's unwritable kernel cache).
 */
#define _POSIX_C_SOURCE 200809L /* stat, access */

#include "opencl_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FA_CL_ERRORS(X)                                                                         \
    X(CL_SUCCESS) X(CL_DEVICE_NOT_FOUND) X(CL_DEVICE_NOT_AVAILABLE)                             \
    X(CL_COMPILER_NOT_AVAILABLE) X(CL_MEM_OBJECT_ALLOCATION_FAILURE) X(CL_OUT_OF_RESOURCES)     \
    X(CL_OUT_OF_HOST_MEMORY) X(CL_PROFILING_INFO_NOT_AVAILABLE) X(CL_MEM_COPY_OVERLAP)          \
    X(CL_IMAGE_FORMAT_MISMATCH) X(CL_IMAGE_FORMAT_NOT_SUPPORTED) X(CL_BUILD_PROGRAM_FAILURE)    \
    X(CL_MAP_FAILURE) X(CL_MISALIGNED_SUB_BUFFER_OFFSET)                                        \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) X(CL_COMPILE_PROGRAM_FAILURE)               \
    X(CL_LINKER_NOT_AVAILABLE) X(CL_LINK_PROGRAM_FAILURE) X(CL_DEVICE_PARTITION_FAILED)         \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) X(CL_INVALID_VALUE) X(CL_INVALID_DEVICE_TYPE)           \
    X(CL_INVALID_PLATFORM) X(CL_INVALID_DEVICE) X(CL_INVALID_CONTEXT)                           \
    X(CL_INVALID_QUEUE_PROPERTIES) X(CL_INVALID_COMMAND_QUEUE) X(CL_INVALID_HOST_PTR)           \
    X(CL_INVALID_MEM_OBJECT) X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) X(CL_INVALID_IMAGE_SIZE)     \
    X(CL_INVALID_SAMPLER) X(CL_INVALID_BINARY) X(CL_INVALID_BUILD_OPTIONS)                      \
    X(CL_INVALID_PROGRAM) X(CL_INVALID_PROGRAM_EXECUTABLE) X(CL_INVALID_KERNEL_NAME)            \
    X(CL_INVALID_KERNEL_DEFINITION) X(CL_INVALID_KERNEL) X(CL_INVALID_ARG_INDEX)                \
    X(CL_INVALID_ARG_VALUE) X(CL_INVALID_ARG_SIZE) X(CL_INVALID_KERNEL_ARGS)                    \
    X(CL_INVALID_WORK_DIMENSION) X(CL_INVALID_WORK_GROUP_SIZE) X(CL_INVALID_WORK_ITEM_SIZE)     \
    X(CL_INVALID_GLOBAL_OFFSET) X(CL_INVALID_EVENT_WAIT_LIST) X(CL_INVALID_EVENT)               \
    X(CL_INVALID_OPERATION) X(CL_INVALID_GL_OBJECT) X(CL_INVALID_BUFFER_SIZE)                   \
    X(CL_INVALID_MIP_LEVEL) X(CL_INVALID_GLOBAL_WORK_SIZE) X(CL_INVALID_PROPERTY)               \
    X(CL_INVALID_IMAGE_DESCRIPTOR) X(CL_INVALID_COMPILER_OPTIONS) X(CL_INVALID_LINKER_OPTIONS)  \
    X(CL_INVALID_DEVICE_PARTITION_COUNT)

/* The ICD loader's "no platform" code (cl_khr_icd), not in cl.h. */
#define FA_CL_PLATFORM_NOT_FOUND_KHR (-1001)

const char *fa__cl_error_name(cl_int err)
{
    switch (err) {
#define FA_CL_ERROR_CASE(name)                                                                  \
    case name:                                                                                  \
        return #name;
        FA_CL_ERRORS(FA_CL_ERROR_CASE)
#undef FA_CL_ERROR_CASE
    case FA_CL_PLATFORM_NOT_FOUND_KHR:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

fa_status fa__cl_status(cl_int err)
{
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY)
        return FA_STATUS_OUT_OF_MEMORY;
    return err == CL_SUCCESS ? FA_STATUS_OK : FA_STATUS_DEVICE_ERROR;
}

fa_status fa__cl_fail(fa_context *ctx, cl_int err, const char *call)
{
    return fa__error(ctx, fa__cl_status(err), "OpenCL: %s failed (%s, %d)", call,
                     fa__cl_error_name(err), (int)err);
}

/*
 * pocl 3.1 is not safe when threads enumerate devices or create contexts at once: eight threads
 * doing so in a fresh process crashed it (a NULL name inside clGetDeviceInfo(CL_DEVICE_NAME)) in
 * 8 of 10 runs, plain OpenCL calls as well. The library promises that different contexts may be
 * used from different threads, so every discovery and context creation or release of the
 * backend runs under this one lock.
 */
static pthread_mutex_t discovery_lock = PTHREAD_MUTEX_INITIALIZER;

/* pthread_mutex_lock of a default mutex fails only on misuse (an uninitialised mutex), which a
 * static initializer rules out; there is nothing to report. */
void fa__cl_lock(void)
{
    (void)pthread_mutex_lock(&discovery_lock);
}

void fa__cl_unlock(void)
{
    (void)pthread_mutex_unlock(&discovery_lock);
}

/* ---- why no device ------------------------------------------------------------------------ */

/* True when a folder exists and can be written, or else its nearest existing ancestor can. */
static bool folder_writable(const char *path)
{
    char p[1024];
    if (strlen(path) >= sizeof p)
        return true; /* too long to judge: claim no cause */
    fa__format(p, sizeof p, "%s", path);
    for (;;) {
        struct stat st;
        if (stat(p, &st) == 0)
            return S_ISDIR(st.st_mode) && access(p, W_OK | X_OK) == 0;
        if (errno != ENOENT)
            return false; /* ENOTDIR: a file stands in the path, as in /dev/null/x */
        char *slash = strrchr(p, '/');
        if (!slash)
            return access(".", W_OK | X_OK) == 0;
        if (slash == p)
            return access("/", W_OK | X_OK) == 0;
        *slash = '\0';
    }
}

/*
 * pocl reports no device at all when it cannot create its kernel cache folder (POCL_CACHE_DIR,
 * else $XDG_CACHE_HOME/pocl, else $HOME/.cache/pocl): a read-only HOME on a CI machine makes the
 * backend vanish. Appends the folder when it is not writable, or the hint when it cannot tell.
 */
static void pocl_cache_hint(char *why, size_t why_size)
{
    const char *env = getenv("POCL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    char dir[1024] = "";
    const char *from = "POCL_CACHE_DIR";
    if (env && *env) {
        fa__format(dir, sizeof dir, "%s", env);
    } else if (xdg && *xdg) {
        fa__format(dir, sizeof dir, "%s/pocl", xdg);
        from = "$XDG_CACHE_HOME/pocl";
    } else if (home && *home) {
        fa__format(dir, sizeof dir, "%s/.cache/pocl", home);
        from = "$HOME/.cache/pocl";
    }
    if (dir[0] && !folder_writable(dir))
        fa__append(why, why_size,
                   "; pocl's kernel cache \"%s\" (%s) cannot be created or written: pocl needs "
                   "a writable POCL_CACHE_DIR, or a writable $XDG_CACHE_HOME or $HOME/.cache",
                   dir, from);
    else
        fa__append(why, why_size,
                   "; pocl finds no device when its kernel cache (POCL_CACHE_DIR, else "
                   "$XDG_CACHE_HOME/pocl or $HOME/.cache/pocl) cannot be written");
}

/* ---- discovery ---------------------------------------------------------------------------- */

/* All platform ids, malloc'ed; BACKEND_UNAVAILABLE when there are none. */
static fa_status list_platforms(cl_platform_id **out, cl_uint *n, char *why, size_t why_size)
{
    cl_int err = fa__cl.GetPlatformIDs(0, NULL, n);
    if (err != CL_SUCCESS || *n == 0) {
        fa__format(why, why_size,
                   "no OpenCL platform found (clGetPlatformIDs returned %s, %d): no OpenCL "
                   "driver is registered with the ICD loader (/etc/OpenCL/vendors, or "
                   "OCL_ICD_VENDORS), or none could start",
                   fa__cl_error_name(err), (int)err);
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    *out = malloc(*n * sizeof **out);
    if (!*out) {
        fa__format(why, why_size, "cannot allocate the OpenCL platform list");
        return FA_STATUS_OUT_OF_MEMORY;
    }
    err = fa__cl.GetPlatformIDs(*n, *out, NULL);
    if (err != CL_SUCCESS) {
        free(*out);
        fa__format(why, why_size, "no OpenCL platform found (clGetPlatformIDs returned %s, %d)",
                   fa__cl_error_name(err), (int)err);
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    return FA_STATUS_OK;
}

/* The devices of one platform, malloc'ed (NULL with *n == 0 when it has none or fails); *err
 * is clGetDeviceIDs' result, CL_DEVICE_NOT_FOUND for a platform without devices. */
static cl_device_id *platform_devices(cl_platform_id platform, cl_uint *n, cl_int *err)
{
    *n = 0;
    cl_uint count = 0;
    *err = fa__cl.GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, NULL, &count);
    if (*err != CL_SUCCESS || !count)
        return NULL; /* a platform with no device is not an error while another has one */
    cl_device_id *ids = malloc(count * sizeof *ids);
    if (!ids) {
        *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    *err = fa__cl.GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, ids, NULL);
    if (*err != CL_SUCCESS) {
        free(ids);
        return NULL;
    }
    *n = count;
    return ids;
}

/* Why no platform offered a device: each one's name and clGetDeviceIDs result, and pocl's
 * kernel cache when one of them is pocl. */
static void explain_no_device(const cl_platform_id *platforms, const cl_int *errs, cl_uint np,
                              char *why, size_t why_size)
{
    fa__format(why, why_size, "no OpenCL device found on %u platform%s:", (unsigned)np,
               np == 1 ? "" : "s");
    bool pocl = false;
    for (cl_uint i = 0; i < np; i++) {
        char name[128] = "";
        if (fa__cl.GetPlatformInfo(platforms[i], CL_PLATFORM_NAME, sizeof name, name, NULL) !=
            CL_SUCCESS)
            fa__format(name, sizeof name, "%s", "(no name)");
        name[sizeof name - 1] = '\0';
        pocl = pocl || strstr(name, "Portable Computing Language") || strstr(name, "pocl");
        fa__append(why, why_size, "%s \"%s\" (clGetDeviceIDs returned %s, %d)", i ? "," : "",
                   name, fa__cl_error_name(errs[i]), (int)errs[i]);
    }
    if (pocl)
        pocl_cache_hint(why, why_size);
}

/* Walks every platform's devices; *out is set when index is one of them. */
static int count_devices(const cl_platform_id *platforms, cl_uint np, int index,
                         cl_device_id *out, cl_int *errs)
{
    int total = 0;
    for (cl_uint i = 0; i < np; i++) {
        cl_uint n = 0;
        cl_device_id *ids = platform_devices(platforms[i], &n, &errs[i]);
        if (index >= total && index - total < (int)n)
            *out = ids[index - total];
        total += (int)n;
        free(ids);
    }
    return total;
}

fa_status fa__cl_find_device(int index, cl_device_id *out, int *count, char *why,
                             size_t why_size)
{
    if (out && index < 0) {
        fa__format(why, why_size, "no OpenCL device %d: device indices start at 0", index);
        return FA_STATUS_DEVICE_NOT_FOUND;
    }
    if (count)
        *count = 0;
    fa_status st = fa__cl_load(why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    cl_platform_id *platforms = NULL;
    cl_uint np = 0;
    st = list_platforms(&platforms, &np, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    cl_int *errs = calloc(np, sizeof *errs);
    if (!errs) {
        free(platforms);
        fa__format(why, why_size, "cannot allocate the OpenCL platform list");
        return FA_STATUS_OUT_OF_MEMORY;
    }
    cl_device_id found = NULL;
    int total = count_devices(platforms, np, index, &found, errs);
    if (total == 0)
        explain_no_device(platforms, errs, np, why, why_size);
    free(errs);
    free(platforms);
    if (count)
        *count = total;
    if (total == 0)
        return FA_STATUS_BACKEND_UNAVAILABLE;
    if (out && !found) {
        fa__format(why, why_size, "no OpenCL device %d: there %s %d", index,
                   total == 1 ? "is" : "are", total);
        return FA_STATUS_DEVICE_NOT_FOUND;
    }
    if (out)
        *out = found;
    return FA_STATUS_OK;
}

int fa__cl_device_index(cl_device_id device)
{
    int count = 0;
    if (fa__cl_find_device(-1, NULL, &count, NULL, 0) != FA_STATUS_OK)
        return -1;
    for (int i = 0; i < count; i++) {
        cl_device_id d = NULL;
        if (fa__cl_find_device(i, &d, NULL, NULL, 0) == FA_STATUS_OK && d == device)
            return i;
    }
    return -1;
}

/* A string query, malloc'ed and terminated; NULL with *err set on failure. */
static char *device_string(cl_device_id device, cl_device_info what, cl_int *err)
{
    size_t n = 0;
    *err = fa__cl.GetDeviceInfo(device, what, 0, NULL, &n);
    if (*err != CL_SUCCESS)
        return NULL;
    char *s = malloc(n + 1);
    if (!s) {
        *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    *err = fa__cl.GetDeviceInfo(device, what, n, s, NULL);
    if (*err != CL_SUCCESS) {
        free(s);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

/* True when a space-separated extension list holds `name` as a whole word. */
static bool has_extension(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *s = strstr(list, name); s; s = strstr(s + 1, name)) {
        bool starts = s == list || s[-1] == ' ';
        bool ends = s[len] == '\0' || s[len] == ' ';
        if (starts && ends)
            return true;
    }
    return false;
}

/* One fixed-size clGetDeviceInfo query. */
typedef struct device_query {
    cl_device_info what;
    const char *name;
    size_t size;
    void *dst;
} device_query;

/* Runs queries in order; the first failure is reported with the query's name. */
static cl_int run_queries(cl_device_id device, const device_query *q, size_t n,
                          const char **failed)
{
    for (size_t i = 0; i < n; i++) {
        cl_int err = fa__cl.GetDeviceInfo(device, q[i].what, q[i].size, q[i].dst, NULL);
        if (err != CL_SUCCESS) {
            *failed = q[i].name;
            return err;
        }
    }
    return CL_SUCCESS;
}

#define FA_CL_QUERY(what, var) {what, #what, sizeof(var), &(var)}

/* FLASHATTN_OPENCL_VECTOR_WIDTH = 1, 2, 4, 8 or 16 stands for the device's preferred float
 * vector width (fa_device_props.vector_width), which picks a CPU device's kernel vectors
 * (cl_rules.c: float16 from 16 on, else float8): 8 runs on an AVX-512 machine the float8
 * kernels that machines without AVX-512 get, so the suite tests both. Unset or empty: the
 * device's. Returns false for any other value (and leaves *width). */
static bool env_vector_width(cl_uint *width)
{
    const char *v = getenv("FLASHATTN_OPENCL_VECTOR_WIDTH");
    if (!v || !*v)
        return true;
    static const char *const widths[] = {"1", "2", "4", "8", "16"};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        if (strcmp(v, widths[i]) == 0) {
            *width = 1u << i;
            return true;
        }
    }
    return false;
}

static fa_status device_numbers(cl_device_id device, fa_device_props *out, char *why,
                                size_t why_size)
{
    cl_ulong local = 0, global = 0;
    size_t wg = 0, items[3] = {0, 0, 0};
    cl_uint units = 0;
    cl_device_type type = 0;
    cl_device_local_mem_type local_type = CL_LOCAL;
    cl_uint vector_width = 0;
    const device_query q[] = {FA_CL_QUERY(CL_DEVICE_LOCAL_MEM_SIZE, local),
                              FA_CL_QUERY(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, vector_width),
                              FA_CL_QUERY(CL_DEVICE_GLOBAL_MEM_SIZE, global),
                              FA_CL_QUERY(CL_DEVICE_MAX_WORK_GROUP_SIZE, wg),
                              FA_CL_QUERY(CL_DEVICE_MAX_WORK_ITEM_SIZES, items),
                              FA_CL_QUERY(CL_DEVICE_MAX_COMPUTE_UNITS, units),
                              FA_CL_QUERY(CL_DEVICE_TYPE, type),
                              FA_CL_QUERY(CL_DEVICE_LOCAL_MEM_TYPE, local_type)};
    const char *failed = "";
    cl_int err = run_queries(device, q, sizeof q / sizeof q[0], &failed);
    if (err != CL_SUCCESS) {
        fa__format(why, why_size, "OpenCL: clGetDeviceInfo(%s) failed (%s, %d)", failed,
                   fa__cl_error_name(err), (int)err);
        return fa__cl_status(err);
    }
    /* The kernel's work-groups are 1-D in dimension 0, so that dimension's limit applies too. */
    if (items[0] > 0 && items[0] < wg)
        wg = items[0];
    out->sram_bytes = local;
    out->global_mem_bytes = global;
    out->max_work_group_size = wg > UINT32_MAX ? UINT32_MAX : (uint32_t)wg;
    out->compute_units = units;
    out->gpu = (type & CL_DEVICE_TYPE_GPU) ? 1 : 0;
    out->local_mem_global = local_type == CL_GLOBAL ? 1 : 0;
    out->vector_width = vector_width;
    env_vector_width(&out->vector_width);
    return FA_STATUS_OK;
}

/* The vendor extensions' attribute names (cl_ext.h has them only in newer headers). */
#define FA_CL_DEVICE_WARP_SIZE_NV 0x4003
#define FA_CL_DEVICE_WAVEFRONT_WIDTH_AMD 0x4043

/* The lockstep width where a vendor extension reports it (NVIDIA's warp, AMD's wavefront);
 * other devices name it only per compiled kernel (CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE),
 * so it stays 0, unknown. A failed query of an advertised extension also leaves 0: the width
 * only guides the plan. */
static uint32_t lockstep_width(cl_device_id device, const char *extensions)
{
    cl_uint width = 0;
    cl_device_info what = 0;
    if (has_extension(extensions, "cl_nv_device_attribute_query"))
        what = FA_CL_DEVICE_WARP_SIZE_NV;
    else if (has_extension(extensions, "cl_amd_device_attribute_query"))
        what = FA_CL_DEVICE_WAVEFRONT_WIDTH_AMD;
    if (what && fa__cl.GetDeviceInfo(device, what, sizeof width, &width, NULL) != CL_SUCCESS)
        width = 0;
    return width;
}

/*
 * Whether the library can run on a device at all: the driver says it is available, and its
 * OpenCL C is 1.2 or newer (the kernels are built with -cl-std=CL1.2 and the backend calls
 * clRetainDevice, both 1.2). An OpenCL 1.1 device would otherwise fail at its first build with
 * a compiler message about the option. The version string is "OpenCL C <major>.<minor> ...".
 */
static fa_status device_usable(cl_device_id device, char *why, size_t why_size)
{
    cl_bool available = CL_FALSE;
    cl_int err =
        fa__cl.GetDeviceInfo(device, CL_DEVICE_AVAILABLE, sizeof available, &available, NULL);
    if (err != CL_SUCCESS) {
        fa__format(why, why_size, "OpenCL: clGetDeviceInfo(CL_DEVICE_AVAILABLE) failed (%s, %d)",
                   fa__cl_error_name(err), (int)err);
        return fa__cl_status(err);
    }
    if (!available) {
        fa__format(why, why_size, "OpenCL: the driver reports the device unavailable "
                                  "(CL_DEVICE_AVAILABLE is false)");
        return FA_STATUS_DEVICE_ERROR;
    }
    char *version = device_string(device, CL_DEVICE_OPENCL_C_VERSION, &err);
    if (!version) {
        fa__format(why, why_size, "OpenCL: clGetDeviceInfo(CL_DEVICE_OPENCL_C_VERSION) failed "
                                  "(%s, %d)", fa__cl_error_name(err), (int)err);
        return fa__cl_status(err);
    }
    int major = 0, minor = 0;
    bool parsed = sscanf(version, "OpenCL C %d.%d", &major, &minor) == 2;
    fa_status st = FA_STATUS_OK;
    if (!parsed || major * 10 + minor < 12) {
        fa__format(why, why_size, "OpenCL: the device's compiler is \"%s\"; the kernels need "
                                  "OpenCL C 1.2 or newer", version);
        st = FA_STATUS_UNSUPPORTED;
    }
    free(version);
    return st;
}

/*
 * FLASHATTN_OPENCL_DEVICE_TYPE plans and builds for every OpenCL device as for the type it
 * names. "gpu": the GPU rules (the budget, the work-group floor, several lanes per row, the
 * unrolled loops), so the GPU kernel variants run and are tested on pocl. "cpu": the CPU rules
 * (local memory is global memory: in place, register-blocked, f32 tiles), so the CPU paths run
 * on Oclgrind, whose simulated device checks every access but calls itself a GPU. Unset or
 * empty: the device's own type. It replaced FLASHATTN_OPENCL_AS_GPU (1: the GPU rules), which
 * is refused with a message naming the new variable rather than read or ignored.
 */
static fa_status planned_type(fa_device_props *out, char *why, size_t why_size)
{
    const char *type = getenv("FLASHATTN_OPENCL_DEVICE_TYPE");
    const char *old = getenv("FLASHATTN_OPENCL_AS_GPU");
    bool typed = type && *type;
    if (old && *old) {
        fa__format(why, why_size, "FLASHATTN_OPENCL_AS_GPU is no longer read: set "
                                  "FLASHATTN_OPENCL_DEVICE_TYPE=gpu (or cpu) instead");
        return FA_STATUS_INVALID_ARGUMENT;
    }
    if (typed && strcmp(type, "cpu") != 0 && strcmp(type, "gpu") != 0) {
        fa__format(why, why_size, "FLASHATTN_OPENCL_DEVICE_TYPE = \"%s\" is not cpu or gpu",
                   type);
        return FA_STATUS_INVALID_ARGUMENT;
    }
    if (typed && strcmp(type, "gpu") == 0)
        out->gpu = 1;
    else if (typed) {
        out->gpu = 0;
        out->local_mem_global = 1;
    }
    return FA_STATUS_OK;
}

fa_status fa__cl_device_props(cl_device_id device, fa_device_props *out, char *why,
                              size_t why_size)
{
    memset(out, 0, sizeof *out);
    fa_status usable = device_usable(device, why, why_size);
    if (usable != FA_STATUS_OK)
        return usable;
    out->backend = FA_BACKEND_OPENCL;
    const cl_device_info what[3] = {CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DEVICE_EXTENSIONS};
    const char *names[3] = {"CL_DEVICE_NAME", "CL_DEVICE_VENDOR", "CL_DEVICE_EXTENSIONS"};
    for (int i = 0; i < 3; i++) {
        cl_int err = CL_SUCCESS;
        char *s = device_string(device, what[i], &err);
        if (!s) {
            fa__format(why, why_size, "OpenCL: clGetDeviceInfo(%s) failed (%s, %d)", names[i],
                       fa__cl_error_name(err), (int)err);
            return fa__cl_status(err);
        }
        if (i == 0)
            fa__format(out->name, sizeof out->name, "%s", s);
        else if (i == 1)
            fa__format(out->vendor, sizeof out->vendor, "%s", s);
        else {
            out->fp16 = has_extension(s, "cl_khr_fp16") ? 1 : 0;
            out->wg_multiple = lockstep_width(device, s);
        }
        free(s);
    }
    out->bf16 = 0; /* OpenCL 1.2 has no bf16 arithmetic; the kernel converts with bit shifts */
    fa_status st = device_numbers(device, out, why, why_size);
    return st == FA_STATUS_OK ? planned_type(out, why, why_size) : st;
}

/* A bad FLASHATTN_OPENCL_VECTOR_WIDTH refuses the context, naming it. */
static fa_status vector_width_override(fa_context *ctx, fa__cl_state *s)
{
    if (env_vector_width(&s->vector_width))
        return FA_STATUS_OK;
    return fa__error(ctx, FA_STATUS_INVALID_ARGUMENT,
                     "FLASHATTN_OPENCL_VECTOR_WIDTH = \"%s\" is not 1, 2, 4, 8 or 16",
                     getenv("FLASHATTN_OPENCL_VECTOR_WIDTH"));
}

fa_status fa__cl_state_limits(fa_context *ctx, fa__cl_state *s)
{
    cl_device_type type = 0;
    const device_query q[] = {FA_CL_QUERY(CL_DEVICE_MEM_BASE_ADDR_ALIGN, s->base_align_bits),
                              FA_CL_QUERY(CL_DEVICE_MAX_MEM_ALLOC_SIZE, s->max_alloc),
                              FA_CL_QUERY(CL_DEVICE_LOCAL_MEM_SIZE, s->local_mem),
                              FA_CL_QUERY(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT,
                                          s->vector_width),
                              FA_CL_QUERY(CL_DEVICE_COMPILER_AVAILABLE, s->compiler),
                              FA_CL_QUERY(CL_DEVICE_TYPE, type)};
    const char *failed = "";
    cl_int err = run_queries(s->device, q, sizeof q / sizeof q[0], &failed);
    if (err != CL_SUCCESS)
        return fa__error(ctx, fa__cl_status(err), "OpenCL: clGetDeviceInfo(%s) failed (%s, %d)",
                         failed, fa__cl_error_name(err), (int)err);
    fa_status st = vector_width_override(ctx, s);
    if (st != FA_STATUS_OK)
        return st;
    if (s->base_align_bits < 8)
        s->base_align_bits = 8; /* bits; a byte is the least any device can mean */
    /* A CPU device's memory is host memory: allocating it as such costs nothing and makes
     * clCreateBuffer allocate at once (pocl otherwise allocates at first use, where a failure
     * is an abort inside pocl 3.1, not an error code). */
    s->alloc_flags = (type & CL_DEVICE_TYPE_CPU) ? CL_MEM_ALLOC_HOST_PTR : 0;
    s->host_memory = (type & CL_DEVICE_TYPE_CPU) ? CL_TRUE : CL_FALSE;
    return FA_STATUS_OK;
}
