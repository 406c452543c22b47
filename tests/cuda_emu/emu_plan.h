/*
 * emu_plan.h - the test drivers' side of the CUDA kernel emulator (tests/test_cuda_emu.c,
 * tests/test_cuda_emu_seq.c): the compiled configuration a plan's launch needs, and a whole plan
 * run on host memory as src/run.c runs it on a device.
 */
#ifndef FA_EMU_PLAN_H
#define FA_EMU_PLAN_H

#include "emu_api.h"
#include "internal.h"

#include <stdbool.h>

/* The emulated kernel of a plan's launch, as the backend would compile it: its entry point and
 * -D options (written to options) must be a compiled configuration (tests/CMakeLists.txt), with
 * the launch's block size, argument count and room for its shared memory; else the test fails,
 * naming the case. */
const fa_emu_kernel *emu_launch_kernel(const char *name, const fa__launch *launch, char *options,
                                       size_t size);

/* Runs one launch's kernel on grid (gx, gy, gz) with the launch's dynamic shared memory
 * (fa__cu_launch_shared); a block that writes past it fails the test, naming the case. */
void emu_launch(const char *name, const fa__launch *launch, const fa_emu_kernel *kernel,
                unsigned gx, unsigned gy, unsigned gz, void *const *args,
                const fa_kernel_params *kp);

/*
 * Runs a plan's launches in order on host memory mem[] (by fa__tensor), as run_launches does:
 * launches with an empty grid skipped, has_lse set, varlen's LSE head stride total_q, and the
 * plan's scratch allocated (0xFF bytes) for the run when mem[FA__TENSOR_SCRATCH] is NULL. fold:
 * a 1 x 1 x 1 grid, so the kernels' grid-stride loops do the rest.
 */
void emu_run_plan(const char *name, const fa_plan *plan, void *const mem[FA__TENSOR_COUNT],
                  bool has_lse, int64_t total_q, bool fold);

#endif /* FA_EMU_PLAN_H */
