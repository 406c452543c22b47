/*
 * cli_memory.c - host memory available to the process and the check of a command's allocations
 * against it and against the device (see cli_memory.h).
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* sysconf, getrlimit */
#endif

#include "cli_memory.h"

#include "cli_common.h"

#include <stdio.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
#else
#include <sys/resource.h>
#include <unistd.h>
#endif

uint64_t cli_mul_sat(uint64_t a, uint64_t b)
{
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
}

uint64_t cli_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t cli_tensor_bytes(const fa_problem *p, fa_tensor_id tensor)
{
    uint64_t bytes = 0;
    if (fa_problem_tensor_bytes(p, tensor, 0, 0, &bytes) != FA_STATUS_OK)
        return 0;
    return bytes > 0 ? bytes : 1;
}

void cli_backward_memory_of(const fa_problem *p, uint64_t scratch, cli_backward_memory *m)
{
    m->q = cli_tensor_bytes(p, FA_TENSOR_Q);
    m->k = cli_tensor_bytes(p, FA_TENSOR_K);
    m->v = cli_tensor_bytes(p, FA_TENSOR_V);
    m->o = cli_tensor_bytes(p, FA_TENSOR_O);
    m->d_o = cli_tensor_bytes(p, FA_TENSOR_DO);
    m->dq = cli_tensor_bytes(p, FA_TENSOR_DQ);
    m->dk = cli_tensor_bytes(p, FA_TENSOR_DK);
    m->dv = cli_tensor_bytes(p, FA_TENSOR_DV);
    m->lse = cli_tensor_bytes(p, FA_TENSOR_LSE); /* as cli_session_buffers makes it */
    m->tensors = cli_add_sat(cli_add_sat(cli_add_sat(m->q, m->k), cli_add_sat(m->v, m->o)),
                             cli_add_sat(cli_add_sat(m->d_o, m->dq), cli_add_sat(m->dk, m->dv)));
    m->tensors = cli_add_sat(m->tensors, m->lse);
    m->scratch = scratch;
    m->peak = cli_add_sat(m->tensors, scratch);
}

#if defined(_WIN32)

uint64_t cli_host_memory_available(const char **source)
{
    MEMORYSTATUSEX ms;
    ms.dwLength = sizeof ms;
    if (source)
        *source = "available physical memory";
    return GlobalMemoryStatusEx(&ms) ? (uint64_t)ms.ullAvailPhys : 0;
}

#else

/* MemAvailable of /proc/meminfo (Linux): what can be allocated without swapping; 0 if absent. */
static uint64_t meminfo_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return cli_mul_sat((uint64_t)kib, 1024);
}

static uint64_t physical_memory(void)
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && size > 0)
        return cli_mul_sat((uint64_t)pages, (uint64_t)size);
#endif
    return 0;
}

uint64_t cli_host_memory_available(const char **source)
{
    const char *from = "MemAvailable in /proc/meminfo";
    uint64_t bytes = meminfo_available();
    struct rlimit rl;
    if (bytes == 0) {
        bytes = physical_memory();
        from = "physical memory";
    }
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (bytes == 0 || (uint64_t)rl.rlim_cur < bytes)) {
        bytes = (uint64_t)rl.rlim_cur;
        from = "address-space limit, ulimit -v";
    }
    if (source)
        *source = from;
    return bytes;
}

#endif

/* "needs 12 B (..) of WHAT, more than the 8 B (..) HOW (WHERE)" into why. */
static int too_much(uint64_t need, uint64_t have, const char *what, const char *how,
                    const char *where, char *why, size_t why_size)
{
    char n[64], h[64];
    cli_format_bytes(need, n, sizeof n);
    cli_format_bytes(have, h, sizeof h);
    snprintf(why, why_size, "needs %s of %s, more than the %s %s (%s)", n, what, h, how, where);
    return -1;
}

int cli_memory_fits(const fa_context *ctx, cli_memory_need need, char *why, size_t why_size)
{
    const char *source = "";
    uint64_t host = need.host, have;
    fa_device_props props;
    memset(&props, 0, sizeof props);
    if (ctx && fa_context_backend(ctx) == FA_BACKEND_CPU)
        host = cli_add_sat(host, need.device); /* the cpu backend's buffers are host memory */
    else if (ctx && fa_context_device_props(ctx, &props) == FA_STATUS_OK &&
             props.global_mem_bytes != 0 && need.device > props.global_mem_bytes)
        return too_much(need.device, props.global_mem_bytes, "device memory", "the device has",
                        fa_backend_name(fa_context_backend(ctx)), why, why_size);
    have = cli_host_memory_available(&source);
    if (have != 0 && host > have)
        return too_much(host, have, "host memory", "available", source, why, why_size);
    return 0;
}
