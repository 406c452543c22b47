/*
 * emu_kernel.cpp - the CUDA kernels compiled as host C++ for one configuration, given by the
 * build with the same -D options NVRTC gets (HEAD_DIM, BLOCK_R, BLOCK_C, DTYPE, MASK, WG_SIZE,
 * TPR, MMA; FEATURES with BIAS_DTYPE for the score modifiers; SEQ, SPLIT, PARTS_DTYPE for
 * sequences, split-KV and the merge; PACKED for a GQA-packed decode; PIPELINE for the
 * tensor-core forward's pipelined K/V copies; SPARSE_FULL for block-sparse's full lists, whose
 * lists FEATURES' bit 64 adds to flash_fwd, flash_bwd_dq and flash_bwd_dkdv) plus FA_EMU_ID, a name for the configuration. A
 * configuration holds every entry point a module of those options can have: flash_fwd, the
 * backward's flash_bwd_pre, flash_bwd_dkdv, flash_bwd_dq and, with sinks, flash_bwd_dsinks, and
 * flash_merge (every kernels_cu file, in one translation unit), except where the options say
 * which one it serves (FA_EMU_PROGRAMS below).
 * Each configuration lives in its own namespace and registers its entry points with the
 * launcher (emu_launch.cpp).
 */
#include "cuda_emu.h"

#define FA_EMU_CAT2(a, b) a##b
#define FA_EMU_CAT(a, b) FA_EMU_CAT2(a, b)
#define FA_EMU_STR2(x) #x
#define FA_EMU_STR(x) FA_EMU_STR2(x)

/* The score modifiers' options, spelled as fa__variant_defines does (only when on). */
#ifdef FEATURES
#define FA_EMU_FEATURE_OPTIONS                                                                 \
    " -DFEATURES=" FA_EMU_STR(FEATURES) " -DBIAS_DTYPE=" FA_EMU_STR(BIAS_DTYPE)
#else
#define FA_EMU_FEATURE_OPTIONS ""
#endif
/* The sequences', split-KV's, the merge's and packing's, in fa__variant_defines's order (each
 * only when given). */
#ifdef SEQ
#define FA_EMU_SEQ_OPTIONS " -DSEQ=" FA_EMU_STR(SEQ)
#else
#define FA_EMU_SEQ_OPTIONS ""
#endif
#ifdef SPLIT
#define FA_EMU_SPLIT_OPTIONS " -DSPLIT=" FA_EMU_STR(SPLIT)
#else
#define FA_EMU_SPLIT_OPTIONS ""
#endif
#ifdef PARTS_DTYPE
#define FA_EMU_PARTS_OPTIONS " -DPARTS_DTYPE=" FA_EMU_STR(PARTS_DTYPE)
#else
#define FA_EMU_PARTS_OPTIONS ""
#endif
#ifdef PACKED
#define FA_EMU_PACKED_OPTIONS " -DPACKED=" FA_EMU_STR(PACKED)
#else
#define FA_EMU_PACKED_OPTIONS ""
#endif
#ifdef PIPELINE
#define FA_EMU_PIPELINE_OPTIONS " -DPIPELINE=" FA_EMU_STR(PIPELINE)
#else
#define FA_EMU_PIPELINE_OPTIONS ""
#endif
#ifdef SPARSE_FULL
#define FA_EMU_SPARSE_FULL_OPTIONS " -DSPARSE_FULL=" FA_EMU_STR(SPARSE_FULL)
#else
#define FA_EMU_SPARSE_FULL_OPTIONS ""
#endif

/* The kernels' extern "C" entry points need names of their own per configuration. */
#define flash_fwd FA_EMU_CAT(fa_emu_flash_fwd_, FA_EMU_ID)
#define flash_bwd_pre FA_EMU_CAT(fa_emu_flash_bwd_pre_, FA_EMU_ID)
#define flash_bwd_dkdv FA_EMU_CAT(fa_emu_flash_bwd_dkdv_, FA_EMU_ID)
#define flash_bwd_dq FA_EMU_CAT(fa_emu_flash_bwd_dq_, FA_EMU_ID)
#define flash_bwd_dsinks FA_EMU_CAT(fa_emu_flash_bwd_dsinks_, FA_EMU_ID)
#define flash_merge FA_EMU_CAT(fa_emu_flash_merge_, FA_EMU_ID)

/* The programs a configuration holds (1 the forward, 2 the backward, 4 the merge): a split
 * forward's options (SPLIT) only ever name flash_fwd and the merge's (PARTS_DTYPE) flash_merge
 * (src/ops.c), and the forward cases' configurations (FA_EMU_FORWARD_ONLY, tests/CMakeLists.txt)
 * serve flash_fwd alone; the others hold every program. A forward alone compiles in a third of
 * the time of all of them (0.47 against 1.45 s under ASan + UBSan). */
#if defined(SPLIT) || defined(FA_EMU_FORWARD_ONLY)
#define FA_EMU_PROGRAMS 1
#elif defined(PARTS_DTYPE)
#define FA_EMU_PROGRAMS 4
#else
#define FA_EMU_PROGRAMS 7
#endif

namespace FA_EMU_ID {
/* Dynamic shared memory: the kernels declare it `extern`; this is the definition. */
alignas(16) char smem[256 * 1024];
#if FA_EMU_PROGRAMS & 2
#include "flash_bwd.cu" /* and flash_fwd.cu, whose helpers it builds on */
#include "flash_bwd_mma.cu"
#include "flash_bwd_rows.cu"
#elif FA_EMU_PROGRAMS & 1
#include "flash_fwd.cu"
#endif
#if FA_EMU_PROGRAMS & 4
#include "flash_merge.cu"
#endif
} // namespace FA_EMU_ID

void fa_emu_register(const fa_emu_kernel *k);

namespace {
using namespace FA_EMU_ID;

/* Pointer argument i as the kernel's type. */
[[maybe_unused]] const store_t *in(void *const *a, int i)
{
    return static_cast<const store_t *>(a[i]);
}
[[maybe_unused]] store_t *out(void *const *a, int i) { return static_cast<store_t *>(a[i]); }
[[maybe_unused]] float *f32(void *const *a, int i) { return static_cast<float *>(a[i]); }
[[maybe_unused]] const int *i32(void *const *a, int i)
{
    return static_cast<const int *>(a[i]);
}
const fa_kernel_params &params_of(const void *p)
{
    return *static_cast<const fa_kernel_params *>(p);
}

/* The modifier tensors after a launch's own n tensors, in the host's order (src/ops.c
 * add_modifier_args): ALiBi slopes, bias, sinks, those compiled in. */
constexpr int has_alibi = (FEATURES & FA_FEATURE_ALIBI) ? 1 : 0;
constexpr int has_bias = (FEATURES & FA_FEATURE_BIAS) ? 1 : 0;
constexpr int has_sinks = (FEATURES & FA_FEATURE_SINKS) ? 1 : 0;
#if FEATURES & FA_FEATURE_ALIBI
#define EMU_ALIBI(a, n) , f32(a, n)
#else
#define EMU_ALIBI(a, n)
#endif
#if FEATURES & FA_FEATURE_BIAS
#define EMU_BIAS(a, n) , static_cast<const bias_t *>(a[(n) + has_alibi])
#else
#define EMU_BIAS(a, n)
#endif
#if FEATURES & FA_FEATURE_SINKS
#define EMU_SINKS(a, n) , f32(a, (n) + has_alibi + has_bias)
#else
#define EMU_SINKS(a, n)
#endif

/* The sequence buffers after the modifiers' (n: the first one's index), in the host's order
 * (src/ops.c add_seq_args): cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, those of SEQ. */
constexpr int has_varlen = (SEQ & FA_SEQ_VARLEN) ? 2 : 0;
constexpr int has_seqlens_k = (SEQ & FA_SEQ_SEQLENS_K) ? 1 : 0;
constexpr int has_table = (SEQ & FA_SEQ_PAGED) ? 1 : 0;
constexpr int seq_count = has_varlen + has_seqlens_k + has_table;
#if SEQ & FA_SEQ_VARLEN
#define EMU_VARLEN(a, n) , i32(a, n), i32(a, (n) + 1)
#else
#define EMU_VARLEN(a, n)
#endif
#if SEQ & FA_SEQ_SEQLENS_K
#define EMU_SEQLENS_K(a, n) , i32(a, (n) + has_varlen)
#else
#define EMU_SEQLENS_K(a, n)
#endif
#if SEQ & FA_SEQ_PAGED
#define EMU_TABLE(a, n) , i32(a, (n) + has_varlen + has_seqlens_k)
#else
#define EMU_TABLE(a, n)
#endif
#define EMU_SEQ(a, n) EMU_VARLEN(a, n) EMU_SEQLENS_K(a, n) EMU_TABLE(a, n)

/* The block-sparse lists after the sequence buffers (n: the first one's index), in the host's
 * order (src/op_launches.c add_block_list_args): the lists, then with SPARSE_FULL the full
 * pair; flash_fwd, flash_bwd_dq and flash_bwd_dkdv read them. */
#if FEATURES & FA_FEATURE_BLOCK_SPARSE
#if SPARSE_FULL
constexpr int list_count = 4;
#define EMU_LISTS(a, n) , i32(a, n), i32(a, (n) + 1), i32(a, (n) + 2), i32(a, (n) + 3)
#else
constexpr int list_count = 2;
#define EMU_LISTS(a, n) , i32(a, n), i32(a, (n) + 1)
#endif
#else
constexpr int list_count = 0;
#define EMU_LISTS(a, n)
#endif

/* Argument orders: src/ops.c (forward_launches, backward_kernels, merge_launch). */
constexpr int fwd_mods = 5 + has_alibi + has_bias + has_sinks; /* flash_fwd's first seq arg */
#if FA_EMU_PROGRAMS & 1
void fwd(void *const *a, const void *p)
{
    flash_fwd(in(a, 0), in(a, 1), in(a, 2), static_cast<out_t *>(a[3]), f32(a, 4)
              EMU_ALIBI(a, 5) EMU_BIAS(a, 5) EMU_SINKS(a, 5) EMU_SEQ(a, fwd_mods)
                  EMU_LISTS(a, fwd_mods + seq_count),
              params_of(p));
}
#endif
#if FA_EMU_PROGRAMS & 2
void bwd_pre(void *const *a, const void *p)
{
    flash_bwd_pre(in(a, 0), in(a, 1), f32(a, 2) EMU_SEQ(a, 3), params_of(p));
}
void bwd_dkdv(void *const *a, const void *p)
{
    flash_bwd_dkdv(in(a, 0), in(a, 1), in(a, 2), f32(a, 3), in(a, 4), f32(a, 5), out(a, 6),
                   out(a, 7) EMU_ALIBI(a, 8) EMU_BIAS(a, 8)
                       EMU_SEQ(a, 8 + has_alibi + has_bias)
                           EMU_LISTS(a, 8 + has_alibi + has_bias + seq_count),
                   params_of(p));
}
void bwd_dq(void *const *a, const void *p)
{
    flash_bwd_dq(in(a, 0), in(a, 1), in(a, 2), f32(a, 3), in(a, 4), f32(a, 5), out(a, 6)
                 EMU_ALIBI(a, 7) EMU_BIAS(a, 7) EMU_SEQ(a, 7 + has_alibi + has_bias)
                     EMU_LISTS(a, 7 + has_alibi + has_bias + seq_count),
                 params_of(p));
}
#if FEATURES & FA_FEATURE_SINKS
void bwd_dsinks(void *const *a, const void *p)
{
    flash_bwd_dsinks(f32(a, 0), f32(a, 1), f32(a, 2), f32(a, 3) EMU_SEQ(a, 4), params_of(p));
}
#endif
#endif
#if FA_EMU_PROGRAMS & 4
void merge(void *const *a, const void *p)
{
    flash_merge(static_cast<const part_t *>(a[0]), f32(a, 1), out(a, 2), f32(a, 3)
                EMU_SEQ(a, 4), params_of(p));
}
#endif

/* The spelling of fa__variant_defines (src/op_launches.c), so the test finds this
 * configuration: MMA only when 1. */
#if MMA
#define FA_EMU_MMA_OPTIONS " -DMMA=1"
#else
#define FA_EMU_MMA_OPTIONS ""
#endif
const char options[] = "-DHEAD_DIM=" FA_EMU_STR(HEAD_DIM) " -DBLOCK_R=" FA_EMU_STR(BLOCK_R)
                       " -DBLOCK_C=" FA_EMU_STR(BLOCK_C) " -DDTYPE=" FA_EMU_STR(DTYPE)
                       " -DMASK=" FA_EMU_STR(MASK) " -DWG_SIZE=" FA_EMU_STR(WG_SIZE)
                       " -DTPR=" FA_EMU_STR(TPR) FA_EMU_MMA_OPTIONS
                       FA_EMU_FEATURE_OPTIONS FA_EMU_SEQ_OPTIONS FA_EMU_SPLIT_OPTIONS
                       FA_EMU_PARTS_OPTIONS FA_EMU_PACKED_OPTIONS FA_EMU_PIPELINE_OPTIONS
                       FA_EMU_SPARSE_FULL_OPTIONS;

const fa_emu_kernel entries[] = {
#if FA_EMU_PROGRAMS & 1
    {"flash_fwd", options, WG_SIZE, smem, sizeof smem, fwd, fwd_mods + seq_count + list_count},
#endif
#if FA_EMU_PROGRAMS & 2
    {"flash_bwd_pre", options, WG_SIZE, smem, sizeof smem, bwd_pre, 3 + seq_count},
    {"flash_bwd_dkdv", options, WG_SIZE, smem, sizeof smem, bwd_dkdv,
     8 + has_alibi + has_bias + seq_count + list_count},
    {"flash_bwd_dq", options, WG_SIZE, smem, sizeof smem, bwd_dq,
     7 + has_alibi + has_bias + seq_count + list_count},
#if FEATURES & FA_FEATURE_SINKS
    {"flash_bwd_dsinks", options, WG_SIZE, smem, sizeof smem, bwd_dsinks, 4 + seq_count},
#endif
#endif
#if FA_EMU_PROGRAMS & 4
    {"flash_merge", options, WG_SIZE, smem, sizeof smem, merge, 4 + seq_count},
#endif
};

struct registrar {
    registrar()
    {
        for (const fa_emu_kernel &k : entries)
            fa_emu_register(&k);
    }
} registered;
} // namespace
