/*
 * cpu_device.c - the cpu backend's device and memory: its one device, whose on-chip memory for
 * the planner is a CPU cache (L2, else L1d, else 256 KiB) read from the system, and buffers that
 * are host memory from malloc. The golden's tile loop is cpu.c.
 */
#define _POSIX_C_SOURCE 200809L /* sysconf cache queries where the C library has them */

#include "internal.h"
#include "cpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* When the system does not say how big its caches are. */
#define CPU_FALLBACK_CACHE_BYTES (256u * 1024u)

/* Reads a cache size such as "512K" from sysfs; 0 when absent. */
static uint64_t sysfs_cache_bytes(int index)
{
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    char unit = 0;
    int n = fscanf(f, "%llu%c", &v, &unit);
    fclose(f);
    if (n < 1)
        return 0;
    if (n == 2 && (unit == 'K' || unit == 'k'))
        v *= 1024;
    else if (n == 2 && (unit == 'M' || unit == 'm'))
        v *= 1024 * 1024;
    return v;
}

/* The largest per-core data cache the system reports (index 0..3 cover L1d, L1i, L2, L3; L2 is
 * the one a tile loop of one core lives in, L3 is shared and skipped). */
static uint64_t cpu_cache_bytes(void)
{
    uint64_t best = sysfs_cache_bytes(2); /* L2 on Linux */
    if (best == 0)
        best = sysfs_cache_bytes(0); /* L1d */
#ifdef _SC_LEVEL2_CACHE_SIZE
    if (best == 0) {
        long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
        best = v > 0 ? (uint64_t)v : 0;
    }
#endif
    return best > 0 ? best : CPU_FALLBACK_CACHE_BYTES;
}

fa_status fa__cpu_device_count(int *count, char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    *count = 1;
    return FA_STATUS_OK;
}

fa_status fa__cpu_device_props(int index, fa_device_props *out, char *why, size_t why_size)
{
    if (index != 0) {
        fa__format(why, why_size, "the cpu backend has one device (0), not %d", index);
        return FA_STATUS_DEVICE_NOT_FOUND;
    }
    memset(out, 0, sizeof *out);
    fa__format(out->name, sizeof out->name, "scalar fp64 reference");
    fa__format(out->vendor, sizeof out->vendor, "flashattn");
    out->backend = FA_BACKEND_CPU;
    out->sram_bytes = cpu_cache_bytes();
    out->max_work_group_size = 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->compute_units = cores > 0 ? (uint32_t)cores : 1;
    return FA_STATUS_OK;
}

/* The CPU backend keeps no state: a non-NULL token so a context always has one. */
static char cpu_state_token;

fa_status fa__cpu_context_open(fa_context *ctx, int device, void **state)
{
    (void)ctx;
    (void)device;
    *state = &cpu_state_token;
    return FA_STATUS_OK;
}

void fa__cpu_context_close(void *state)
{
    (void)state;
}

fa_status fa__cpu_buffer_alloc(fa_context *ctx, size_t bytes, void **mem)
{
    void *m = malloc(bytes);
    if (!m)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
    *mem = m;
    return FA_STATUS_OK;
}

void fa__cpu_buffer_free(fa_context *ctx, void *mem)
{
    (void)ctx;
    free(mem);
}

fa_status fa__cpu_buffer_write(fa_context *ctx, void *mem, size_t offset, const void *src,
                               size_t bytes)
{
    (void)ctx;
    memmove((unsigned char *)mem + offset, src, bytes);
    return FA_STATUS_OK;
}

fa_status fa__cpu_buffer_read(fa_context *ctx, void *mem, size_t offset, void *dst,
                              size_t bytes)
{
    (void)ctx;
    memmove(dst, (const unsigned char *)mem + offset, bytes);
    return FA_STATUS_OK;
}

void fa__cpu_buffer_region(fa_context *ctx, void *mem, const void **space, uint64_t *addr)
{
    (void)ctx;
    *space = NULL;
    *addr = (uint64_t)(uintptr_t)mem;
}
