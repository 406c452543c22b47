/*
 * cuda_device.c - CUDA device discovery and the fa_device_props each device reports, the
 * kernels' plan rules (forward and backward), and a table of known architectures so that
 * `flashattn plan --backend cuda --arch sm_90` (and the NVRTC tests) can plan for a GPU that is
 * not there.
 */
#include "cuda_internal.h"
#include "flashattn_cuda.h"

#include <stdlib.h>
#include <string.h>

fa_status fa__cu_device_count(int *count, char *why, size_t why_size)
{
    fa__cu_api api;
    *count = 0;
    fa_status st = fa__cu_load(&api, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    int n = 0;
    CUresult err = api.DeviceGetCount(&n);
    if (err != CUDA_SUCCESS) {
        char desc[256];
        fa__cu_describe(&api, err, desc, sizeof desc);
        fa__format(why, why_size, "cuDeviceGetCount failed: %s", desc);
        return FA_STATUS_DEVICE_ERROR;
    }
    if (n <= 0) {
        fa__format(why, why_size, "the NVIDIA driver is loaded but reports no CUDA device");
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    *count = n;
    return FA_STATUS_OK;
}

fa_status fa_cuda_compiler(char *info, size_t info_size)
{
    if (!info || info_size == 0)
        return FA_STATUS_NULL_POINTER;
    fa__cu_api api;
    fa__nvrtc_api nv;
    int driver = 0;
    fa_status st = fa__cu_load(&api, info, info_size);
    if (st != FA_STATUS_OK)
        return st;
    CUresult err = api.DriverGetVersion(&driver);
    if (err != CUDA_SUCCESS) {
        char desc[256];
        fa__cu_describe(&api, err, desc, sizeof desc);
        fa__format(info, info_size, "cuDriverGetVersion failed: %s", desc);
        return fa__cu_status(err);
    }
    char why[1024] = "";
    st = fa__nvrtc_load(&nv, driver, why, sizeof why);
    if (st != FA_STATUS_OK) {
        fa__format(info, info_size, "driver CUDA %d.%d: %s", driver / 1000, driver % 1000 / 10,
                   why);
        return st;
    }
    fa__format(info, info_size, "NVRTC %d.%d (%s) for the driver's CUDA %d.%d: CUBIN%s",
               nv.version / 1000, nv.version % 1000 / 10, nv.library, driver / 1000,
               driver % 1000 / 10,
               nv.ptx_ok ? ", or PTX the driver JIT-compiles for a GPU newer than NVRTC knows"
                         : " only (the driver cannot JIT this newer NVRTC's PTX)");
    return FA_STATUS_OK;
}

/* fp16 arithmetic from sm_53, bf16 from sm_80; every CUDA device is a GPU of 32-thread warps. */
static void arch_caps(int major, int minor, fa_device_props *out)
{
    int cc = major * 10 + minor;
    out->gpu = 1;
    out->wg_multiple = 32;
    out->fp16 = cc >= 53 ? 1 : 0;
    out->bf16 = cc >= 80 ? 1 : 0;
    fa__format(out->arch, sizeof out->arch, "sm_%d%d", major, minor);
}

/* One device attribute query, named in the reason when it fails. */
typedef struct attr_query {
    CUdevice_attribute attr;
    const char *name;
    int *dst;
} attr_query;

#define FA_CU_ATTR(a, var) {a, #a, &(var)}

fa_status fa__cu_props_of(const fa__cu_api *api, CUdevice dev, fa_device_props *out, char *why,
                          size_t why_size)
{
    int major = 0, minor = 0, optin = 0, threads = 0, sms = 0;
    const attr_query q[] = {
        FA_CU_ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major),
        FA_CU_ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor),
        FA_CU_ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, optin),
        FA_CU_ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, threads),
        FA_CU_ATTR(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, sms)};
    char desc[256];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        CUresult err = api->DeviceGetAttribute(q[i].dst, q[i].attr, dev);
        if (err != CUDA_SUCCESS) {
            fa__cu_describe(api, err, desc, sizeof desc);
            fa__format(why, why_size, "cuDeviceGetAttribute(%s) failed: %s", q[i].name, desc);
            return fa__cu_status(err);
        }
    }
    size_t total = 0;
    CUresult err = api->DeviceGetName(out->name, (int)sizeof out->name, dev);
    if (err == CUDA_SUCCESS)
        err = api->DeviceTotalMem(&total, dev);
    if (err != CUDA_SUCCESS) {
        fa__cu_describe(api, err, desc, sizeof desc);
        fa__format(why, why_size, "cuDeviceGetName / cuDeviceTotalMem failed: %s", desc);
        return fa__cu_status(err);
    }
    out->name[sizeof out->name - 1] = '\0';
    fa__format(out->vendor, sizeof out->vendor, "NVIDIA");
    out->backend = FA_BACKEND_CUDA;
    out->sram_bytes = optin > 0 ? (uint64_t)optin : 0;
    out->global_mem_bytes = total;
    out->max_work_group_size = threads > 0 ? (uint32_t)threads : 0;
    out->compute_units = sms > 0 ? (uint32_t)sms : 0;
    arch_caps(major, minor, out);
    return FA_STATUS_OK;
}

fa_status fa__cu_device_props(int index, fa_device_props *out, char *why, size_t why_size)
{
    int count = 0;
    fa_status st = fa__cu_device_count(&count, why, why_size);
    if (st != FA_STATUS_OK)
        return st;
    if (index < 0 || index >= count) {
        fa__format(why, why_size, "no CUDA device %d: there %s %d", index,
                   count == 1 ? "is" : "are", count);
        return FA_STATUS_DEVICE_NOT_FOUND;
    }
    fa__cu_api api;
    st = fa__cu_load(&api, why, why_size);
    CUdevice dev = 0;
    CUresult err = st == FA_STATUS_OK ? api.DeviceGet(&dev, index) : CUDA_SUCCESS;
    if (st == FA_STATUS_OK && err != CUDA_SUCCESS) {
        char desc[256];
        fa__cu_describe(&api, err, desc, sizeof desc);
        fa__format(why, why_size, "cuDeviceGet(%d) failed: %s", index, desc);
        st = fa__cu_status(err);
    }
    if (st != FA_STATUS_OK)
        return st;
    memset(out, 0, sizeof *out);
    return fa__cu_props_of(&api, dev, out, why, why_size);
}

/*
 * The kernel (kernels_cu/flash_fwd.cu) runs FA_CU_THREADS_PER_ROW threads per query row (a
 * decode's few rows more: cuda_core_lanes), so a block is Br * 4 threads and the device's
 * threads-per-block limit caps Br. Br and Bc above 8
 * are rounded to multiples of 8: a block is then whole warps (8 rows x 4 threads = 32). The
 * on-chip budget is exactly the planner's: Q, K, V tiles in the storage type and the S tile in
 * f32, all in dynamic shared memory up to the opt-in limit per block (M). Bc is capped at 128:
 * each thread keeps Bc / 4 scores in registers, and 64-128 keys per tile is where
 * FlashAttention's own kernels sit; smaller tiles also leave room for more blocks per SM.
 */
/* The compute capability of "sm_XY" as XY; 0 when the tag is not one. */
static int arch_number(const char *arch)
{
    int n = 0;
    if (strncmp(arch, "sm_", 3) != 0)
        return 0;
    for (const char *c = arch + 3; *c >= '0' && *c <= '9'; c++)
        n = n * 10 + (*c - '0');
    return n;
}

/* An override must already be what the tensor-core path needs: 0 or a multiple of 16. */
static bool mma_tile(int32_t block)
{
    return block == 0 || block % FA_CU_MMA_M == 0;
}

/* The tensor-core path: sm_80 or newer, f16 or bf16, d a multiple of 16 up to 128, both
 * sequences at least 16 long and tile overrides (if any) multiples of 16. Decided here once;
 * the plan's launch carries it (MMA) to the kernel build and the explanation. */
static bool tensor_cores(const fa_device_props *dev, const fa_problem *p)
{
    return arch_number(dev->arch) >= 80 && p->dtype != FA_DTYPE_F32 && p->head_dim % 16 == 0 &&
           p->head_dim <= FA_CU_MMA_MAX_HEAD_DIM && p->seqlen_q >= FA_CU_MMA_M &&
           p->seqlen_k >= FA_CU_MMA_M && mma_tile(p->block_r) && mma_tile(p->block_c);
}

/*
 * The backward's kernels (kernels_cu/flash_bwd.cu) on CUDA cores (every architecture) hold in
 * shared memory, dK/dV pass: P^T and dS^T; LSE, D and the key count per query row; K^T, V^T of
 * its keys; Q^T, dO^T, Q, dO of a query tile. dQ pass: dS; Q^T, dO^T; K^T, V^T, K. The formula
 * takes each term's larger count (4 row tiles, 3 key tiles, 2 score tiles, 3 floats per row),
 * so both fit; it is the OpenCL kernels' formula too. On tensor cores (the forward's conditions)
 * the scores stay in registers and the tiles are row-major only: dK/dV holds K, V, Q, dO and
 * the row stats; dQ holds Q, dO, K, V (2 row tiles, 2 key tiles, 3 floats per row).
 * The dK/dV block is Bc * items_per_row threads, so the thread limit caps Bc as it caps Br. On
 * CUDA cores Bc 64 above d 128 keeps the two f32 gradient rows (d/2 floats per thread) and the
 * score columns within the registers of a 256-thread block; on tensor cores the two gradient
 * accumulators are d floats per lane (d <= 128), so blocks stay at 8 warps (Br, Bc <= 128).
 * Without overrides, Br is capped at the side of the largest square tile that fits: the
 * planner's fit shrinks Bc first, and beside four row tiles that could leave Bc at 1 or 2 (a
 * dK/dV block of 4 or 8 threads; e.g. sm_86, f16, d 128: Br 96, Bc 1). Each pass re-reads the
 * other side's tiles once per tile of its own, so tiles near square cost the least traffic.
 */
static uint32_t square_side(const fa_device_props *dev, const fa_problem *p,
                            const fa__plan_rules *rules)
{
    size_t elem = fa_dtype_size(p->dtype);
    uint32_t step = rules->shape.tile_multiple, side = rules->shape.max_block_c / step * step;
    while (side > step &&
           fa__tile_bytes(&rules->memory.onchip, side, side, p->head_dim, elem) > dev->sram_bytes)
        side -= step;
    return side > step ? side : step;
}

static void backward_rules(const fa_device_props *dev, const fa_problem *p,
                           fa__plan_rules *rules)
{
    bool mma = tensor_cores(dev, p);
    rules->shape.items_per_row = mma ? 32 / FA_CU_MMA_M : FA_CU_THREADS_PER_ROW;
    uint32_t threads = dev->max_work_group_size / rules->shape.items_per_row;
    if (mma)
        rules->memory.onchip = (fa__onchip_formula){
            .row_tiles = 2, .col_tiles = 2, .score_tiles = 0, .row_floats = 3,
            .what = "Q, dO; K, V; LSE, D, key count per row; the kernels keep S, dP in registers"};
    else
        rules->memory.onchip = (fa__onchip_formula){
            .row_tiles = 4, .col_tiles = 3, .score_tiles = 2, .row_floats = 3,
            .what = "Q^T, dO^T, Q, dO; K^T, V^T, K; P and dS; LSE, D, key count per row"};
    rules->shape.tile_multiple = mma ? FA_CU_MMA_M : 8;
    rules->shape.max_block_c = !mma && p->head_dim > 128 ? 64 : 128;
    if (threads > 0 && threads < rules->shape.max_block_c)
        rules->shape.max_block_c = threads;
    rules->shape.max_block_r = mma ? 128 : 0;
    if (p->block_r == 0 && p->block_c == 0) /* an override is fitted around, never capped */
        rules->shape.max_block_r = square_side(dev, p, rules);
    rules->build.mma = mma ? 1 : 0;
    rules->paths.backward_launches = 3;
    rules->paths.path_note = mma ? "tensor cores (mma.sync m16n8k16, f32 accumulation; P and dS "
                                   "rounded to the storage type for their products)"
                                 : "CUDA cores (tensor cores need sm_80+, f16 or bf16, d a "
                                   "multiple of 16 up to 128, both sequences >= 16 and tile "
                                   "overrides multiples of 16)";
}

int fa__cu_pipeline_setting(void)
{
    const char *e = getenv("FLASHATTN_CUDA_PIPELINE");
    if (!e || !*e || strcmp(e, "0") == 0)
        return 0;
    return strcmp(e, "1") == 0 ? 1 : -1;
}

/* The tensor-core forward's pipelined variant (PIPELINE=1, FLASHATTN_CUDA_PIPELINE=1): K and V
 * tiles in two buffers each, the next tile's copy (cp.async) in flight while this one is used,
 * and every tile row padded by 8 elements (16 bytes), so the 8 rows of an mma fragment load
 * fall in different shared-memory banks (a row of d 64 or 128 is a multiple of 32 words). */
static void pipeline_rules(fa__plan_rules *rules)
{
    rules->memory.onchip.col_tiles = 4;
    rules->memory.onchip.row_pad = FA_CU_TILE_PAD;
    rules->memory.onchip.what = "Q, two K and two V tiles, rows padded by 8 elements; the "
                                "kernel keeps S in registers";
    rules->build.pipeline = 1;
    rules->paths.path_note = "tensor cores (mma.sync m16n8k16, f32 accumulation), pipelined "
                             "(FLASHATTN_CUDA_PIPELINE=1: double-buffered cp.async K/V copies, "
                             "padded tiles)";
}

/* Lanes per query row on CUDA cores: FA_CU_THREADS_PER_ROW, and for a forward's few rows (a
 * decode, Sq < 8) more, up to a warp, until Sq * lanes fills one: a block of 4 threads per row
 * leaves 28 lanes of its warp idle and copies each K/V tile with 4 threads. */
static uint32_t cuda_core_lanes(const fa_problem *p, fa__op op)
{
    const int64_t sq = p->seqlen_q > 1 ? p->seqlen_q : 1;
    uint32_t lanes = FA_CU_THREADS_PER_ROW;
    while (op == FA__OP_FORWARD && lanes < 32 && sq * lanes < 32)
        lanes *= 2;
    return lanes;
}

/*
 * Block-sparse (forward and backward): tiles no larger than a mask block, as the OpenCL
 * planner's rule (preferences, so overrides still plan as asked). Blocks are powers of two and
 * tiles start at multiples of their size, so a tile within one block never straddles two: a
 * key tile no query block lists is skipped whole, and a query tile walks its own block's list
 * only. The dK/dV pass streams query tiles of Br rows over its Bc keys, so the same caps keep
 * its tiles within blocks too. The dense tiles' Br floor (min_block_r) is lowered to the block.
 */
static void block_sparse_rules(const fa_problem *p, fa__plan_rules *rules)
{
    const uint32_t bq = (uint32_t)p->sparse_block_q, bk = (uint32_t)p->sparse_block_k;
    if (!p->block_sparse)
        return;
    if (rules->shape.pref_block_c == 0 || rules->shape.pref_block_c > bk) {
        rules->shape.pref_block_c = bk;
        rules->shape.pref_block_c_why = "block-sparse: a key tile within one key block "
                                        "(sparse_block_k), so a tile no query block lists is "
                                        "skipped";
    }
    rules->shape.pref_block_r = bq;
    if (rules->shape.min_block_r > bq)
        rules->shape.min_block_r = bq;
    rules->shape.pref_block_r_why = "block-sparse: a query tile within one query block "
                                    "(sparse_block_q), so it walks its block's list only";
}

static void plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules);

void fa__cu_plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules)
{
    plan_rules(dev, p, op, rules);
    if (op != FA__OP_MERGE)
        block_sparse_rules(p, rules);
}

/* The rules of a dense problem (fa__cu_plan_rules adds block-sparse's). */
static void plan_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules)
{
    rules->shape.row_lanes = FA_CU_THREADS_PER_ROW;
    rules->paths.split_kv = 1; /* 40-132 SMs: a decode's few blocks leave most idle */
    /* A one-row decode's query heads of a K/V head as one tile's rows (src/packing.c): its K
     * and V are read once per group, and the group's rows fill the block's lanes. */
    rules->paths.gqa_pack = op == FA__OP_FORWARD ? 1 : 0;
    if (op == FA__OP_BACKWARD) {
        backward_rules(dev, p, rules);
        return;
    }
    if (tensor_cores(dev, p)) {
        /* One warp per 16 rows; Br and Bc multiples of the mma shape (sequences of at least
         * 16 keep them so after clamping); Br <= 128 (8 warps) and Bc 64: the S and O
         * accumulators (Bc/2 + d/2 floats per thread) then take at most 96 registers. Bc 128
         * at d 64 compiled to 255 registers (NVRTC 13, sm_80..sm_90; spills with modifiers),
         * Bc 64 to about 200 (tools/cuda_census). S lives in those registers, so the shared
         * memory is the Q, K and V tiles only. */
        rules->shape.items_per_row = 32 / FA_CU_MMA_M;
        rules->shape.tile_multiple = FA_CU_MMA_M;
        rules->shape.max_block_r = 128;
        rules->shape.max_block_c = 64;
        rules->memory.onchip.score_tiles = 0;
        rules->memory.onchip.what = "Q, K, V tiles; the kernel keeps S in registers";
        rules->build.mma = 1;
        rules->paths.path_note = "tensor cores (mma.sync m16n8k16, f32 accumulation)";
        if (op == FA__OP_FORWARD && fa__cu_pipeline_setting() == 1)
            pipeline_rules(rules);
        return;
    }
    rules->shape.items_per_row = cuda_core_lanes(p, op);
    rules->shape.row_lanes = (int32_t)rules->shape.items_per_row;
    rules->shape.tile_multiple = 8;
    rules->shape.max_block_c = 128;
    rules->shape.max_block_r = 0;
    rules->paths.path_note = "CUDA cores (tensor cores need sm_80+, f16 or bf16, d a multiple "
                             "of 16 up to 128, both sequences >= 16 and tile overrides "
                             "multiples of 16)";
}

/* ---- known architectures (planning without a device) -------------------------------------- */

typedef struct known_arch {
    const char *arch;
    uint64_t sram_optin; /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    uint32_t sms;        /* of the example part */
    const char *example;
} known_arch;

static const known_arch known_archs[] = {
    {"sm_75", 64 * 1024, 40, "Turing class, e.g. T4"},
    {"sm_80", 163 * 1024, 108, "Ampere class, e.g. A100"},
    {"sm_86", 99 * 1024, 82, "Ampere class, e.g. RTX 3090"},
    {"sm_89", 99 * 1024, 128, "Ada class, e.g. RTX 4090"},
    {"sm_90", 227 * 1024, 132, "Hopper class, e.g. H100 SXM"},
};

fa_status fa__cuda_arch_props(const char *arch, fa_device_props *out, char *why,
                              size_t why_size)
{
    const size_t n = sizeof known_archs / sizeof known_archs[0];
    for (size_t i = 0; arch && i < n; i++) {
        const known_arch *a = &known_archs[i];
        if (strcmp(arch, a->arch) != 0)
            continue;
        memset(out, 0, sizeof *out);
        fa__format(out->name, sizeof out->name, "%s (%s; known props, no device)", a->arch,
                   a->example);
        fa__format(out->vendor, sizeof out->vendor, "NVIDIA");
        out->backend = FA_BACKEND_CUDA;
        out->sram_bytes = a->sram_optin;
        out->max_work_group_size = 1024;
        out->compute_units = a->sms;
        arch_caps(a->arch[3] - '0', a->arch[4] - '0', out);
        return FA_STATUS_OK;
    }
    fa__format(why, why_size, "unknown CUDA architecture \"%s\"; known: ", arch ? arch : "(null)");
    for (size_t i = 0; i < n; i++)
        fa__append(why, why_size, "%s%s", i ? ", " : "", known_archs[i].arch);
    return FA_STATUS_INVALID_ARGUMENT;
}
