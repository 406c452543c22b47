/*
 * cl_profiles.c - known OpenCL GPU profiles for planning without the device
 * (fa_context_create_planning): the properties those GPUs' OpenCL drivers report, so
 * `flashattn plan --backend opencl --profile NAME` and the GPU compile check
 * (tools/cl_gpu_check.sh) plan as the library would there. Typical values of one product per
 * family; a real device's own queries always win when it is present.
 */
#include "opencl_internal.h"

#include <string.h>

typedef struct cl_profile {
    const char *name;
    const char *example;
    const char *vendor;
    uint32_t local_kib;       /* CL_DEVICE_LOCAL_MEM_SIZE */
    uint32_t local_global;    /* CL_DEVICE_LOCAL_MEM_TYPE is CL_GLOBAL */
    uint32_t max_wg;          /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    uint32_t units;           /* CL_DEVICE_MAX_COMPUTE_UNITS */
    uint32_t lockstep;        /* wavefront / warp / SIMD width */
    uint32_t fp16;            /* cl_khr_fp16 */
} cl_profile;

static const cl_profile profiles[] = {
    {"amd-gfx90a", "AMD Instinct MI210/MI250X, CDNA2", "Advanced Micro Devices, Inc.", 64, 0, 256,
     104, 64, 1},
    {"amd-gfx1030", "AMD Radeon RX 6800 XT, RDNA2", "Advanced Micro Devices, Inc.", 64, 0, 256,
     36, 32, 1},
    {"intel-xe", "Intel Arc A770, Xe-HPG", "Intel(R) Corporation", 64, 0, 1024, 512, 16, 1},
    {"nvidia-sm80", "NVIDIA A100 through NVIDIA's OpenCL", "NVIDIA Corporation", 48, 0, 1024, 108,
     32, 1},
    {"mali-g710", "Arm Mali-G710 MP7, Valhall", "ARM", 32, 1, 1024, 7, 16, 1},
    {"adreno-740", "Qualcomm Adreno 740", "QUALCOMM", 32, 0, 1024, 6, 64, 1},
};

fa_status fa__cl_profile_props(const char *name, fa_device_props *out, char *why,
                               size_t why_size)
{
    const size_t n = sizeof profiles / sizeof profiles[0];
    for (size_t i = 0; name && i < n; i++) {
        const cl_profile *p = &profiles[i];
        if (strcmp(name, p->name) != 0)
            continue;
        memset(out, 0, sizeof *out);
        fa__format(out->name, sizeof out->name, "%s (%s; known props, no device)", p->name,
                   p->example);
        fa__format(out->vendor, sizeof out->vendor, "%s", p->vendor);
        fa__format(out->arch, sizeof out->arch, "%s", p->name);
        out->backend = FA_BACKEND_OPENCL;
        out->sram_bytes = (uint64_t)p->local_kib * 1024;
        out->max_work_group_size = p->max_wg;
        out->compute_units = p->units;
        out->fp16 = p->fp16;
        out->gpu = 1;
        out->local_mem_global = p->local_global;
        out->wg_multiple = p->lockstep;
        return FA_STATUS_OK;
    }
    fa__format(why, why_size, "unknown OpenCL device profile \"%s\"; known: ",
               name ? name : "(null)");
    for (size_t i = 0; i < n; i++)
        fa__append(why, why_size, "%s%s", i ? ", " : "", profiles[i].name);
    return FA_STATUS_INVALID_ARGUMENT;
}
