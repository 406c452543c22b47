/*
 * cpu_internal.h - the cpu backend's device and memory functions (cpu_device.c), which its ops
 * table in cpu.c names.
 */
#ifndef FLASHATTN_CPU_INTERNAL_H
#define FLASHATTN_CPU_INTERNAL_H

#include "internal.h"

fa_status fa__cpu_device_count(int *count, char *why, size_t why_size);
fa_status fa__cpu_device_props(int index, fa_device_props *out, char *why, size_t why_size);
fa_status fa__cpu_context_open(fa_context *ctx, int device, void **state);
void fa__cpu_context_close(void *state);
fa_status fa__cpu_buffer_alloc(fa_context *ctx, size_t bytes, void **mem);
void fa__cpu_buffer_free(fa_context *ctx, void *mem);
fa_status fa__cpu_buffer_write(fa_context *ctx, void *mem, size_t offset, const void *src,
                               size_t bytes);
fa_status fa__cpu_buffer_read(fa_context *ctx, void *mem, size_t offset, void *dst,
                              size_t bytes);
/* Every buffer is host memory: one address space. */
void fa__cpu_buffer_region(fa_context *ctx, void *mem, const void **space, uint64_t *addr);

#endif /* FLASHATTN_CPU_INTERNAL_H */
