/*
 * emu_kernel.cpp - kernels_cu/flash_fwd.cu compiled as host C++ for one configuration, given by
 * the build with the same -D options NVRTC gets (HEAD_DIM, BLOCK_R, BLOCK_C, DTYPE, MASK,
 * WG_SIZE, TPR, MMA) plus FA_EMU_ID, a name for the configuration. Each configuration lives in its own
 * namespace and registers itself with the launcher (emu_launch.cpp).
 */
#include "cuda_emu.h"

#define FA_EMU_CAT2(a, b) a##b
#define FA_EMU_CAT(a, b) FA_EMU_CAT2(a, b)
#define FA_EMU_STR2(x) #x
#define FA_EMU_STR(x) FA_EMU_STR2(x)

/* The kernel's extern "C" entry point needs a name of its own per configuration. */
#define flash_fwd FA_EMU_CAT(fa_emu_flash_fwd_, FA_EMU_ID)

namespace FA_EMU_ID {
/* Dynamic shared memory: the kernel declares it `extern`; this is the definition. */
alignas(16) char smem[256 * 1024];
#include "flash_fwd.cu"
} // namespace FA_EMU_ID

void fa_emu_register(const fa_emu_kernel *k);

namespace {
void entry(const void *q, const void *k, const void *v, void *o, float *lse, const void *params)
{
    using namespace FA_EMU_ID;
    flash_fwd(static_cast<const store_t *>(q), static_cast<const store_t *>(k),
              static_cast<const store_t *>(v), static_cast<store_t *>(o), lse,
              *static_cast<const fa_kernel_params *>(params));
}

const fa_emu_kernel config = {
    /* The spelling of fa__variant_defines (src/ops.c), so the test finds this configuration. */
    "-DHEAD_DIM=" FA_EMU_STR(HEAD_DIM) " -DBLOCK_R=" FA_EMU_STR(BLOCK_R) " -DBLOCK_C=" FA_EMU_STR(
        BLOCK_C) " -DDTYPE=" FA_EMU_STR(DTYPE) " -DMASK=" FA_EMU_STR(MASK) " -DWG_SIZE=" FA_EMU_STR(
        WG_SIZE) " -DTPR=" FA_EMU_STR(TPR) " -DMMA=" FA_EMU_STR(MMA),
    WG_SIZE, FA_EMU_ID::smem, sizeof FA_EMU_ID::smem, entry};

struct registrar {
    registrar() { fa_emu_register(&config); }
} registered;
} // namespace
