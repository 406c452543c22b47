/*
 * emu_api.h - the C side of the CUDA kernel emulator (cuda_emu.h): the compiled kernel
 * configurations and the launcher, for the test driver tests/test_cuda_emu.c.
 */
#ifndef FA_EMU_API_H
#define FA_EMU_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*fa_emu_entry)(const void *q, const void *k, const void *v, void *o, float *lse,
                             const void *params);

/* One compiled configuration of kernels_cu/flash_fwd.cu. */
typedef struct fa_emu_kernel {
    const char *options; /* the -D options the host passes NVRTC for this configuration */
    int wg_size;         /* threads per block */
    char *smem;          /* its dynamic shared memory */
    size_t smem_bytes;
    fa_emu_entry entry; /* the kernel, run by one thread */
} fa_emu_kernel;

size_t fa_emu_kernel_count(void);
const fa_emu_kernel *fa_emu_kernel_at(size_t i);

/* Runs the kernel on grid (gx, gy, gz), wg_size host threads per block, blocks in order;
 * shared memory starts as NaN bytes. params points at an fa_kernel_params. */
void fa_emu_launch(const fa_emu_kernel *k, unsigned gx, unsigned gy, unsigned gz, const void *q,
                   const void *kk, const void *v, void *o, float *lse, const void *params);

#ifdef __cplusplus
}
#endif

#endif /* FA_EMU_API_H */
