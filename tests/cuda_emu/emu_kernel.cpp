/*
 * emu_kernel.cpp - the CUDA kernels compiled as host C++ for one configuration, given by the
 * build with the same -D options NVRTC gets (HEAD_DIM, BLOCK_R, BLOCK_C, DTYPE, MASK, WG_SIZE,
 * TPR, MMA) plus FA_EMU_ID, a name for the configuration. A configuration holds every entry
 * point a module of those options can have: flash_fwd and the backward's flash_bwd_pre,
 * flash_bwd_dkdv and flash_bwd_dq (flash_bwd.cu, which includes flash_fwd.cu).
 * Each configuration lives in its own namespace and registers its entry points with the
 * launcher (emu_launch.cpp).
 */
#include "cuda_emu.h"

#define FA_EMU_CAT2(a, b) a##b
#define FA_EMU_CAT(a, b) FA_EMU_CAT2(a, b)
#define FA_EMU_STR2(x) #x
#define FA_EMU_STR(x) FA_EMU_STR2(x)

/* The kernels' extern "C" entry points need names of their own per configuration. */
#define flash_fwd FA_EMU_CAT(fa_emu_flash_fwd_, FA_EMU_ID)
#define flash_bwd_pre FA_EMU_CAT(fa_emu_flash_bwd_pre_, FA_EMU_ID)
#define flash_bwd_dkdv FA_EMU_CAT(fa_emu_flash_bwd_dkdv_, FA_EMU_ID)
#define flash_bwd_dq FA_EMU_CAT(fa_emu_flash_bwd_dq_, FA_EMU_ID)

namespace FA_EMU_ID {
/* Dynamic shared memory: the kernels declare it `extern`; this is the definition. */
alignas(16) char smem[256 * 1024];
#include "flash_bwd.cu"
} // namespace FA_EMU_ID

void fa_emu_register(const fa_emu_kernel *k);

namespace {
using namespace FA_EMU_ID;

/* Pointer argument i as the kernel's type. */
const store_t *in(void *const *a, int i) { return static_cast<const store_t *>(a[i]); }
store_t *out(void *const *a, int i) { return static_cast<store_t *>(a[i]); }
float *f32(void *const *a, int i) { return static_cast<float *>(a[i]); }
const fa_kernel_params &params_of(const void *p)
{
    return *static_cast<const fa_kernel_params *>(p);
}

/* Argument orders: src/ops.c (forward_launches, backward_kernels). */
void fwd(void *const *a, const void *p)
{
    flash_fwd(in(a, 0), in(a, 1), in(a, 2), out(a, 3), f32(a, 4), params_of(p));
}
void bwd_pre(void *const *a, const void *p)
{
    flash_bwd_pre(in(a, 0), in(a, 1), f32(a, 2), params_of(p));
}
void bwd_dkdv(void *const *a, const void *p)
{
    flash_bwd_dkdv(in(a, 0), in(a, 1), in(a, 2), f32(a, 3), in(a, 4), f32(a, 5), out(a, 6),
                   out(a, 7), params_of(p));
}
void bwd_dq(void *const *a, const void *p)
{
    flash_bwd_dq(in(a, 0), in(a, 1), in(a, 2), f32(a, 3), in(a, 4), f32(a, 5), out(a, 6),
                 params_of(p));
}

/* The spelling of fa__variant_defines (src/ops.c), so the test finds this configuration. */
const char options[] = "-DHEAD_DIM=" FA_EMU_STR(HEAD_DIM) " -DBLOCK_R=" FA_EMU_STR(BLOCK_R)
                       " -DBLOCK_C=" FA_EMU_STR(BLOCK_C) " -DDTYPE=" FA_EMU_STR(DTYPE)
                       " -DMASK=" FA_EMU_STR(MASK) " -DWG_SIZE=" FA_EMU_STR(WG_SIZE)
                       " -DTPR=" FA_EMU_STR(TPR) " -DMMA=" FA_EMU_STR(MMA);

const fa_emu_kernel entries[] = {
    {"flash_fwd", options, WG_SIZE, smem, sizeof smem, fwd, 5},
    {"flash_bwd_pre", options, WG_SIZE, smem, sizeof smem, bwd_pre, 3},
    {"flash_bwd_dkdv", options, WG_SIZE, smem, sizeof smem, bwd_dkdv, 8},
    {"flash_bwd_dq", options, WG_SIZE, smem, sizeof smem, bwd_dq, 7},
};

struct registrar {
    registrar()
    {
        for (const fa_emu_kernel &k : entries)
            fa_emu_register(&k);
    }
} registered;
} // namespace
