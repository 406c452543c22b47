/*
 * emu_plan.c - finding a plan's launch among the emulated kernel configurations and running a
 * plan's launches on host memory (emu_plan.h).
 */
#include "emu_plan.h"

#include "cuda_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

static const fa_emu_kernel *kernel_for(const char *entry, const char *options)
{
    for (size_t i = 0; i < fa_emu_kernel_count(); i++) {
        const fa_emu_kernel *k = fa_emu_kernel_at(i);
        if (strcmp(k->name, entry) == 0 && strcmp(k->options, options) == 0)
            return k;
    }
    return NULL;
}

const fa_emu_kernel *emu_launch_kernel(const char *name, const fa__launch *launch, char *options,
                                       size_t size)
{
    fa__variant_defines(&launch->variant, "-D", options, size);
    const fa_emu_kernel *kernel = kernel_for(fa__kernel_entry(launch->variant.kernel), options);
    if (!kernel)
        fail_msg("%s: no emulated %s for \"%s\" (add the configuration in tests/CMakeLists.txt)",
                 name, fa__kernel_entry(launch->variant.kernel), options);
    assert_int_equal(kernel->wg_size, launch->variant.work_group_size);
    assert_int_equal(kernel->n_args, launch->n_args);
    assert_true(launch->onchip_bytes <= kernel->smem_bytes);
    return kernel;
}

void emu_launch(const char *name, const fa__launch *launch, const fa_emu_kernel *kernel,
                unsigned gx, unsigned gy, unsigned gz, void *const *args,
                const fa_kernel_params *kp)
{
    uint64_t shared = fa__cu_launch_shared(launch);
    long long breach = fa_emu_launch(kernel, gx, gy, gz, args, kp, (size_t)shared);
    if (breach < 0)
        fail_msg("%s: %s needs %llu bytes of shared memory, more than the emulator's %zu", name,
                 fa__kernel_entry(launch->variant.kernel), (unsigned long long)shared,
                 kernel->smem_bytes);
    if (breach > 0)
        fail_msg("%s: %s wrote shared memory %lld bytes past the end of its %llu", name,
                 fa__kernel_entry(launch->variant.kernel), breach - 1, (unsigned long long)shared);
}

void emu_run_plan(const char *name, const fa_plan *plan, void *const mem_in[FA__TENSOR_COUNT],
                  bool has_lse, int64_t total_q, bool fold)
{
    void *mem[FA__TENSOR_COUNT];
    memcpy(mem, mem_in, sizeof mem);
    if (!has_lse && !mem[FA__TENSOR_LSE])
        mem[FA__TENSOR_LSE] = mem[FA__TENSOR_O]; /* never touched then, as in run.c */
    void *scratch = NULL;
    uint64_t scratch_bytes = fa__run_scratch_bytes(plan, total_q);
    if (!mem[FA__TENSOR_SCRATCH] && scratch_bytes > 0) {
        scratch = malloc((size_t)scratch_bytes);
        assert_non_null(scratch);
        memset(scratch, 0xFF, (size_t)scratch_bytes);
        mem[FA__TENSOR_SCRATCH] = scratch;
    }
    for (int i = 0; i < plan->n_launches; i++) {
        const fa__launch *l = &plan->launches[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0)
            continue;
        char options[256];
        const fa_emu_kernel *kernel = emu_launch_kernel(name, l, options, sizeof options);
        void *args[FA__MAX_LAUNCH_ARGS];
        for (int a = 0; a < l->n_args; a++) {
            args[a] = mem[l->args[a]];
            if (!args[a])
                fail_msg("%s: %s's argument %d (tensor %d) has no memory", name,
                         fa__kernel_entry(l->variant.kernel), a, (int)l->args[a]);
        }
        fa_kernel_params kp;
        fa__run_params(plan, l, has_lse, total_q, &kp);
        emu_launch(name, l, kernel, fold ? 1u : (unsigned)l->grid[0],
                   fold ? 1u : (unsigned)l->grid[1], fold ? 1u : (unsigned)l->grid[2], args, &kp);
    }
    free(scratch);
}
