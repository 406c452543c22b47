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

/* Calls one kernel entry point as one CUDA thread: args are its pointer arguments in order (as
 * the host's launch passes them, src/op_launches.c), params points at an fa_kernel_params. */
typedef void (*fa_emu_entry)(void *const *args, const void *params);

/* One entry point of one compiled configuration of kernels_cu/ (flash_bwd.cu, which includes
 * flash_fwd.cu). */
typedef struct fa_emu_kernel {
    const char *name;    /* the entry point: "flash_fwd", "flash_bwd_dq", ... */
    const char *options; /* the -D options the host passes NVRTC for this configuration */
    int wg_size;         /* threads per block */
    char *smem;          /* its dynamic shared memory (shared by the configuration's entries) */
    size_t smem_bytes;
    fa_emu_entry entry; /* the kernel, run by one thread */
    int n_args;         /* pointer arguments it takes */
} fa_emu_kernel;

size_t fa_emu_kernel_count(void);
const fa_emu_kernel *fa_emu_kernel_at(size_t i);

/* The canary byte that fills a configuration's shared memory past the launch's bytes. */
#define FA_EMU_CANARY 0xA5

/*
 * Runs the kernel on grid (gx, gy, gz), wg_size host threads per block, blocks in order, with
 * shared_bytes of dynamic shared memory (the launch's, as the host would pass cuLaunchKernel).
 * The first shared_bytes start as NaN bytes, the rest of the configuration's array holds
 * FA_EMU_CANARY; after every block the canary is checked. args: the kernel's n_args pointer
 * arguments. Returns 0, or 1 + the offset past shared_bytes of the first canary byte a block
 * changed (the launch stops after that block); -1 when shared_bytes exceeds the array.
 */
long long fa_emu_launch(const fa_emu_kernel *k, unsigned gx, unsigned gy, unsigned gz,
                        void *const *args, const void *params, size_t shared_bytes);

#ifdef __cplusplus
}
#endif

#endif /* FA_EMU_API_H */
