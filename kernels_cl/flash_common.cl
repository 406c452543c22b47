/*
 * flash_common.cl - what the OpenCL kernels share (OpenCL C 1.2): the tunables and their
 * defaults, the storage type and vector widths, tile copies and score rows in local memory, the
 * lanes' meeting in local memory, the score modifiers and dropout (FEATURES), and the sequence
 * arguments (SEQ). flash_fwd.cl, flash_merge.cl and flash_bwd.cl each follow it in one program
 * (backends/opencl/cl_program.c); it defines no kernel.
 *
 * Every tunable has a default so each file compiles alone (with -I src -I kernels_cl); the host
 * passes the planned values with -D. The library prepends kernel_params.h to this text.
 */
#ifndef FA_KERNEL_PARAMS_H
#include "kernel_params.h"
#endif
#define FA_FLASH_COMMON_CL /* the kernel files build on this one */

#ifndef HEAD_DIM
#define HEAD_DIM 64 /* d: elements per row of Q, K, V, O */
#endif
#ifndef BLOCK_R
#define BLOCK_R 64 /* Br: query rows per work-group (TPR work-items each) */
#endif
#ifndef BLOCK_C
#define BLOCK_C 64 /* Bc: keys per K/V tile */
#endif
#ifndef DTYPE
#define DTYPE 0 /* storage: 0 f32, 1 f16, 2 bf16 */
#endif
#ifndef MASK
#define MASK 0 /* fa_mask: 0 none, 1 causal top-left, 2 causal bottom-right */
#endif
#ifndef WG_SIZE
#define WG_SIZE BLOCK_R /* work-items per work-group */
#endif
#ifndef TPR
#define TPR 1 /* lanes per query row: divides Bc and d (the planner sees to it) */
#endif
/* DIRECT_KV 1 (flash_fwd only): K and V are read where they are in global memory, not staged in
 * local tiles, and one work-item holds every row of the tile (the host picks it where local
 * memory is global memory and tiles are short, so a staged copy would be shared by few). */
#ifndef DIRECT_KV
#define DIRECT_KV 0
#endif
/* PACKED 1 (flash_fwd only): GQA or heads packing, the rows of head h are the query heads
 * h * Sq + row of a one-row problem (the host packs only where every head sees the same keys),
 * so sinks and ALiBi's slopes are per row, and the window and ALiBi's distance are row 0's. */
#ifndef PACKED
#define PACKED 0
#endif
/* HEAD_ROWS G > 0 (with DIRECT_KV): heads packing, a one-row decode's query heads as the rows
 * of one head, G rows per K/V head (row i reads K/V head i / G, k/v_stride_h apart), so one
 * work-item reads every head of a key, where they lie together (paged, BSHD). */
#ifndef HEAD_ROWS
#define HEAD_ROWS 0
#endif
#if HEAD_ROWS && !DIRECT_KV
#error "HEAD_ROWS needs DIRECT_KV"
#endif
#if DIRECT_KV
#define ITEM_ROWS BLOCK_R /* query rows per work-item */
#else
#define ITEM_ROWS 1
#endif
#if (TPR & (TPR - 1)) != 0 || BLOCK_C % TPR != 0 || HEAD_DIM % TPR != 0 ||                      \
    WG_SIZE * ITEM_ROWS != BLOCK_R * TPR || (DIRECT_KV && TPR != 1)
#error "TPR: a power of two dividing BLOCK_C and HEAD_DIM; WG_SIZE: BLOCK_R * TPR / ITEM_ROWS"
#endif
#define LANE_KEYS (BLOCK_C / TPR)  /* keys of an S row per lane */
#define LANE_DIMS (HEAD_DIM / TPR) /* elements of an O row per lane */
#ifndef VEC_MAX
#define VEC_MAX 8 /* the widest floatN the loops use: 4 (GPUs), 8 or 16 (opencl.c says why) */
#endif
#ifndef FEATURES
#define FEATURES 0 /* FA_FEATURE_* bits: the score modifiers and dropout compiled in */
#endif
#ifndef BIAS_DTYPE
#define BIAS_DTYPE 0 /* the bias's storage: 0 f32, 1 f16, 2 bf16 */
#endif
#ifndef SEQ
#define SEQ 0 /* FA_SEQ_* bits: varlen, per-sequence key counts, paged K/V */
#endif
#ifndef SPLIT
#define SPLIT 0 /* 1: flash_fwd writes split-KV's f32 partial O and LSE for flash_merge */
#endif
#ifndef GPU
#define GPU 0 /* 1: the device is a GPU (the host passes it from CL_DEVICE_TYPE) */
#endif

/* Loops over a work-item's accumulator rows, unrolled on GPUs only: a loop left rolled indexes
 * the array dynamically, which puts it in scratch (clang-15, tools/cl_gpu_check.sh: gfx90a f16
 * d128 544 bytes per work-item without, 0 with), and a fully unrolled d loop issued all its
 * loads first (gfx1030 f32 d32 Bc 48: 471 spilled registers). On pocl the same pragmas cost
 * 3-7% (B1 H8 N2048, d 64 and 128), so CPUs keep the compiler's choice. */
#if GPU
#define UNROLL_ON_GPU _Pragma("unroll")
#define UNROLL_4_ON_GPU _Pragma("unroll 4")
#else
#define UNROLL_ON_GPU
#define UNROLL_4_ON_GPU
#endif

/* The host passes the struct by value; C and OpenCL C must agree on its size (C99 check). */
typedef char fa_kernel_params_size_check[sizeof(fa_kernel_params) == 504 ? 1 : -1];

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define LN2 0.69314718055994530942f
#define LOG2E 1.44269504088896340736f

/* Widest of 16, 8 (up to VEC_MAX), 4, 2, 1 that divides n: the vector width of loops over n
 * elements (a lane's keys of an S row, n = Bc / TPR; its elements of an O row, n = d / TPR). */
#if VEC_MAX >= 16 && LANE_KEYS % 16 == 0
#define KEYS_PER_VEC 16
#elif VEC_MAX >= 8 && LANE_KEYS % 8 == 0
#define KEYS_PER_VEC 8
#elif LANE_KEYS % 4 == 0
#define KEYS_PER_VEC 4
#elif LANE_KEYS % 2 == 0
#define KEYS_PER_VEC 2
#else
#define KEYS_PER_VEC 1
#endif
#if VEC_MAX >= 16 && LANE_DIMS % 16 == 0
#define DIMS_PER_VEC 16
#elif VEC_MAX >= 8 && LANE_DIMS % 8 == 0
#define DIMS_PER_VEC 8
#elif LANE_DIMS % 4 == 0
#define DIMS_PER_VEC 4
#elif LANE_DIMS % 2 == 0
#define DIMS_PER_VEC 2
#else
#define DIMS_PER_VEC 1
#endif
#define VECS_PER_S_ROW (BLOCK_C / KEYS_PER_VEC)  /* float_keys vectors per S row */
#define VECS_PER_O_ROW (HEAD_DIM / DIMS_PER_VEC) /* float_dims vectors per O row */
#define VECS_PER_LANE_KEYS (LANE_KEYS / KEYS_PER_VEC) /* of them, per lane */
#define VECS_PER_LANE_DIMS (LANE_DIMS / DIMS_PER_VEC)

/* ---- storage type: raw copies global -> local, f32 conversion on loads from local ---------- */
/* LOAD_ONE_F32(p): the element at p as f32; LOAD_N_F32(n, p): elements p[0 .. n) as floatn;
 * both from __local memory, and from address space `space` as LOAD_ONE_F32_IN / LOAD_N_F32_IN. */
#if DTYPE == 0
typedef float store_t;
#define LOAD_ONE_F32_IN(space, p) (*(p))
#define LOAD_N_F32_IN(space, n, p) CAT(vload, n)(0, p)
#elif DTYPE == 1
typedef ushort store_t; /* half bits; vload_half needs no cl_khr_fp16 */
#define LOAD_ONE_F32_IN(space, p) vload_half(0, (space const half *)(p))
#define LOAD_N_F32_IN(space, n, p) CAT(vload_half, n)(0, (space const half *)(p))
#else
typedef ushort store_t; /* bf16 bits: the upper half of a binary32 */
#define LOAD_ONE_F32_IN(space, p) as_float((uint)(*(p)) << 16)
#define LOAD_N_F32_IN(space, n, p)                                                             \
    CAT(as_float, n)(CAT(convert_uint, n)(CAT(vload, n)(0, p)) << 16)
#endif

/* tile_t: an element of a local Q, K, V, dO tile; LOAD_ONE_F32 / LOAD_N_F32 read them as f32,
 * TILE_ELEM(p) is the global element at p as one. Under TILE_F32 (the host passes it for f16 and
 * bf16 storage where local memory is global memory: CPUs) tiles hold f32, converted once as a
 * tile is loaded, where each element was converted again at every read (Br rows read each K
 * and V element of a tile): the loops over tiles then run as they do for f32 storage. GPUs keep
 * the storage type, half the bytes of their scarce local memory. */
#ifndef TILE_F32
#define TILE_F32 0
#endif
#if TILE_F32 && DTYPE != 0
typedef float tile_t;
#define LOAD_ONE_F32(p) (*(p))
#define LOAD_N_F32(n, p) CAT(vload, n)(0, p)
#define TILE_ELEM(p) LOAD_ONE_F32_IN(__global, p)
#else
typedef store_t tile_t;
#define LOAD_ONE_F32(p) LOAD_ONE_F32_IN(__local, p)
#define LOAD_N_F32(n, p) LOAD_N_F32_IN(__local, n, p)
#define TILE_ELEM(p) (*(p))
#endif

/* Stores one f32 value to global O in the storage type, rounding to nearest even. */
void store_o(float v, __global store_t *p)
{
#if DTYPE == 0
    *p = v;
#elif DTYPE == 1
    vstore_half_rte(v, 0, (__global half *)p);
#else
    uint u = as_uint(v);
    if (isnan(v))
        *p = (ushort)((u >> 16) | 0x40u); /* keep NaN a (quiet) NaN, not an infinity */
    else
        *p = (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
#endif
}

/* float_keys: KEYS_PER_VEC keys of one S row; float_dims: DIMS_PER_VEC elements of one O row.
 * LOAD_KEYS_F32 / LOAD_DIMS_F32: that many stored elements from a local tile, as f32;
 * S_LOAD_KEYS / S_STORE_KEYS: that many keys of the f32 S tile; STORE_DIMS_PRIVATE: a float_dims
 * to a private float array. */
#if KEYS_PER_VEC == 1
typedef float float_keys;
#define AS_FLOAT_KEYS as_float /* the bits of an int_keys (or float_keys) as floats, and back */
#define AS_INT_KEYS as_int
#define LOAD_KEYS_F32(p) LOAD_ONE_F32(p)
#define S_LOAD_KEYS(p) (*(p))
#define S_STORE_KEYS(v, p) (*(p) = (v))
#else
typedef CAT(float, KEYS_PER_VEC) float_keys;
#define AS_FLOAT_KEYS CAT(as_float, KEYS_PER_VEC)
#define AS_INT_KEYS CAT(as_int, KEYS_PER_VEC)
#define LOAD_KEYS_F32(p) LOAD_N_F32(KEYS_PER_VEC, p)
#define S_LOAD_KEYS(p) CAT(vload, KEYS_PER_VEC)(0, p)
#define S_STORE_KEYS(v, p) CAT(vstore, KEYS_PER_VEC)(v, 0, p)
#endif
#if DIMS_PER_VEC == 1
typedef float float_dims;
#define LOAD_DIMS_F32(p) LOAD_ONE_F32(p)
#define LOAD_GLOBAL_DIMS_F32(p) LOAD_ONE_F32_IN(__global, p)
#define STORE_DIMS_PRIVATE(v, p) (*(p) = (v))
#else
typedef CAT(float, DIMS_PER_VEC) float_dims;
#define LOAD_DIMS_F32(p) LOAD_N_F32(DIMS_PER_VEC, p)
#define LOAD_GLOBAL_DIMS_F32(p) LOAD_N_F32_IN(__global, DIMS_PER_VEC, p)
#define STORE_DIMS_PRIVATE(v, p) CAT(vstore, DIMS_PER_VEC)(v, 0, p)
#endif

/* Stores the DIMS_PER_VEC values of v to global memory from p in the storage type, rounded as
 * store_o rounds. f16 as one vstore_halfN_rte: element by element from a private array, the
 * array stayed in a stack frame around libclc's software rounding (sm_80: 48 bytes per
 * work-item, tools/cl_gpu_check.sh). */
void store_dims(float_dims v, __global store_t *p)
{
#if DTYPE == 1 && DIMS_PER_VEC > 1
    CAT(CAT(vstore_half, DIMS_PER_VEC), _rte)(v, 0, (__global half *)p);
#else
    float vals[DIMS_PER_VEC];
    STORE_DIMS_PRIVATE(v, vals);
    for (int e = 0; e < DIMS_PER_VEC; e++)
        store_o(vals[e], p + e);
#endif
}

/* Forced inline on GPUs (CPUs keep the compiler's choice): a function that takes a pointer to
 * the kernel's params, accumulators or a row's state and is not inlined makes them memory. With
 * softcap, ALiBi, a window and dropout compiled in, clang left row_scores a call, and the
 * params (536 bytes) went to sm_80's stack frame (tools/cl_gpu_check.sh). A plain row_scores
 * keeps clang's choice: forced, gfx90a's d 32 f16 forward grew from 109 to 144 VGPRs. */
#if GPU
#define INLINE_ON_GPU __attribute__((always_inline))
#else
#define INLINE_ON_GPU
#endif
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)
#define ROW_SCORES_INLINE INLINE_ON_GPU
#else
#define ROW_SCORES_INLINE
#endif

/* The max / sum of the n elements of a floatn, pairwise (halves, then quarters ...), as
 * hmax_keys / hsum_keys for a float_keys and hsum_dims for a float_dims. */
float hmax1(float v) { return v; }
float hmax2(float2 v) { return fmax(v.lo, v.hi); }
float hmax4(float4 v) { return hmax2(fmax(v.lo, v.hi)); }
float hmax8(float8 v) { return hmax4(fmax(v.lo, v.hi)); }
float hmax16(float16 v) { return hmax8(fmax(v.lo, v.hi)); }
float hsum1(float v) { return v; }
float hsum2(float2 v) { return v.lo + v.hi; }
float hsum4(float4 v) { return hsum2(v.lo + v.hi); }
float hsum8(float8 v) { return hsum4(v.lo + v.hi); }
float hsum16(float16 v) { return hsum8(v.lo + v.hi); }
#define hmax_keys CAT(hmax, KEYS_PER_VEC)
#define hsum_keys CAT(hsum, KEYS_PER_VEC)
#define hsum_dims CAT(hsum, DIMS_PER_VEC)

/* Copies rows [row0, row0 + rows) of a [seq, d] slice (row stride `stride`) into a local tile,
 * zero past `seq`. Element idx = r * d + x of the rows x d block, r in [0, rows), x in [0, d):
 * transposed, tile[x * rows + r] (d x rows), else tile[idx] (rows x d). */
/* VEC_TILE_LOADS: CPUs with f32 tiles copy eight elements of a row as one vector, loaded (and
 * converted) at once: element by element, pocl's vload_half left f16 at 0.9x of f32's speed
 * (B1 H8 N2048 d64), and the copy was a large part of f32's time too. The same values in the
 * same places. GPUs copy element by element, so that neighbouring work-items read neighbouring
 * elements. */
#define VEC_TILE_LOADS (!GPU && (DTYPE == 0 || TILE_F32) && HEAD_DIM % 8 == 0)
#if VEC_TILE_LOADS
/* Stores elements x .. x + 7 of row r into a tile of `rows` rows (transposed: d x rows). */
void store_tile8(__local float *tile, float8 val, int r, int x, int rows, int transposed)
{
    if (!transposed) {
        vstore8(val, 0, tile + r * HEAD_DIM + x);
        return;
    }
    float vals[8];
    vstore8(val, 0, vals);
    for (int e = 0; e < 8; e++)
        tile[(x + e) * rows + r] = vals[e];
}

void load_tile(__local tile_t *tile, __global const store_t *src, long row0, long seq,
               long stride, int rows, int transposed)
{
    for (int idx = (int)get_local_id(0) * 8; idx < rows * HEAD_DIM; idx += WG_SIZE * 8) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        long row = row0 + r;
        float8 val = row < seq ? LOAD_N_F32_IN(__global, 8, src + row * stride + x)
                               : (float8)0.0f;
        store_tile8(tile, val, r, x, rows, transposed);
    }
}
#else
void load_tile(__local tile_t *tile, __global const store_t *src, long row0, long seq,
               long stride, int rows, int transposed)
{
    for (int idx = (int)get_local_id(0); idx < rows * HEAD_DIM; idx += WG_SIZE) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        long row = row0 + r;
        tile_t val = row < seq ? TILE_ELEM(src + row * stride + x) : (tile_t)0;
        tile[transposed ? x * rows + r : idx] = val;
    }
}
#endif

/* A probability P below FLT_MIN (2^-126) as 0, by lanes (T: float or a float vector). Such a
 * P is a denormal, and on x86 CPUs every FMA with a denormal operand takes a microcode assist:
 * ALiBi's distant keys made about 14% of P denormal at N 2048 and the forward more than twice
 * as slow on pocl, back to no-modifier speed flushed (history.md, ch. 18). Neither O
 * nor the row sum moves by more than their rounding: l is at least 1 (the row's largest P) and
 * O's f32 accumulation rounds at 2^-24 of its largest term, far above 2^-126 of any. The CUDA
 * kernels do the same (flash_common.cu, flush_tiny). */
#define FLUSH_TINY(T, p) select((p), (T)0.0f, (p) < FLT_MIN)

/* The online softmax over one S row, in two steps around dropout: lane_max is the max of a
 * lane's keys (s_lane[c], c in [0, Bc / TPR)); lane_exp replaces them by P = exp2(S - m_use)
 * and returns their sum. The row's max and sum are the lanes' combined (across_lanes_max /
 * _sum). A row with no allowed key so far keeps m = -inf: exponents use m_use = 0 instead, so
 * P = 0 and the rescale alpha = 0, never NaN (the FlashAttention rescale rule). fmax skips a NaN
 * score, whose exp2 then makes l NaN, as does a +inf max (exp2(inf - inf)). */
float lane_max(__local const float *s_lane)
{
    float_keys tile_max = -INFINITY; /* lane-wise max over the lane's vectors */
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++)
        tile_max = fmax(tile_max, S_LOAD_KEYS(s_lane + kvec * KEYS_PER_VEC));
    return hmax_keys(tile_max);
}

float lane_exp(__local float *s_lane, float m_use)
{
    float_keys tile_sum = 0.0f; /* lane-wise sum of P over the lane's vectors */
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++) {
        float_keys p = FLUSH_TINY(float_keys, exp2(S_LOAD_KEYS(s_lane + kvec * KEYS_PER_VEC) -
                                                   m_use));
        S_STORE_KEYS(p, s_lane + kvec * KEYS_PER_VEC);
        tile_sum += p;
    }
    return hsum_keys(tile_sum);
}

/* A row's max and sum of its lanes' values v: through share[r * TPR + lane], after a barrier
 * (so every lane of the row reads every other's), in lane order, so the sum is the same on
 * every run. Call from every work-item; with one lane per row, v itself and no barrier. */
#if TPR > 1
float across_lanes_max(__local float *share, int r, int lane, float v)
{
    share[r * TPR + lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float m = share[r * TPR];
    for (int t = 1; t < TPR; t++)
        m = fmax(m, share[r * TPR + t]);
    return m;
}

float across_lanes_sum(__local float *share, int r, int lane, float v)
{
    share[r * TPR + lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = share[r * TPR];
    for (int t = 1; t < TPR; t++)
        sum += share[r * TPR + t];
    return sum;
}
#else
#define across_lanes_max(share, r, lane, v) (v)
#define across_lanes_sum(share, r, lane, v) (v)
#endif

/* The keys [0, end) that the tile starting at row r0 visits: those its last row may attend
 * to, so causal and window launches skip K tiles entirely past the diagonal or the window. */
long keys_to_visit(const fa_kernel_params *p, long r0)
{
    return fa_keys_end(p, MASK, FEATURES, min(r0 + BLOCK_R, p->seqlen_q) - 1);
}

/* ---- score modifiers and dropout (FEATURES; flashattn.h, "The modifiers, precisely") ------- */
/* Each is compiled in only under its FA_FEATURE_* bit, so a kernel without it keeps the plain
 * arithmetic exactly. Scores stay in log2 units: the natural-unit terms are scaled by log2(e). */

/* The extra kernel arguments, in the host's order (src/op_launches.c, add_modifier_args): ALiBi slopes
 * f32 [Hq], the bias, the sinks f32 [Hq] (the forward only). */
#if FEATURES & FA_FEATURE_ALIBI
#define ALIBI_ARG , __global const float *alibi_slopes
#define ALIBI_PASS , alibi_slopes
#else
#define ALIBI_ARG
#define ALIBI_PASS
#endif
#if FEATURES & FA_FEATURE_BIAS
#define BIAS_ARG , __global const bias_t *bias
#define BIAS_PASS , bias
#else
#define BIAS_ARG
#define BIAS_PASS
#endif
#if FEATURES & FA_FEATURE_SINKS
#define SINKS_ARG , __global const float *sinks
#define SINKS_PASS , sinks
#else
#define SINKS_ARG
#define SINKS_PASS
#endif

#if BIAS_DTYPE == 0
typedef float bias_t;
#else
typedef ushort bias_t; /* f16 or bf16 bits */
#endif

/* One bias element as f32. */
float load_bias(__global const bias_t *p)
{
#if BIAS_DTYPE == 0
    return *p;
#elif BIAS_DTYPE == 1
    return vload_half(0, (__global const half *)p);
#else
    return as_float((uint)(*p) << 16);
#endif
}

/* bias p[0 .. KEYS_PER_VEC) as f32. */
float_keys load_bias_keys(__global const bias_t *p)
{
#if KEYS_PER_VEC == 1
    return load_bias(p);
#elif BIAS_DTYPE == 0
    return CAT(vload, KEYS_PER_VEC)(0, p);
#elif BIAS_DTYPE == 1
    return CAT(vload_half, KEYS_PER_VEC)(0, (__global const half *)p);
#else
    return CAT(as_float, KEYS_PER_VEC)(
        CAT(convert_uint, KEYS_PER_VEC)(CAT(vload, KEYS_PER_VEC)(0, p)) << 16);
#endif
}

/* 0, 1, 2 .. : lane e of a float_keys vector is key c + e. */
__constant float lane_index[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#if KEYS_PER_VEC == 1
#define LANE_INDEX 0.0f
#else
#define LANE_INDEX CAT(vload, KEYS_PER_VEC)(0, lane_index)
#endif

/* tanh(s / cap) by lanes as (2^a - 1) / (2^a + 1), a = 2 s / cap in log2 units: +-1 at the
 * infinities (a is clamped to [-64, 64], where tanh is +-1 in f32 already), a NaN stays NaN.
 * 2^a is made here, not by exp2 (pocl's handles every f32 at twice the instructions): a = n + f
 * with n = rint(a) (the 1.5 * 2^23 addition rounds to an integer, whose bits hold n), 2^f - 1
 * by a degree-6 fit on [-1/2, 1/2] without its constant term (relative error 1e-7), 2^n in
 * the exponent bits. 2^a - 1 is formed as (2^f - 1) 2^n + (2^n - 1), never as 2^a minus 1, so
 * near 0, where a large cap puts s / cap, tanh keeps its relative precision and cap * tanh(s /
 * cap) keeps s (1 - 2 / (2^a + 1) cancelled there: 0.22 off at a cap of 1e7). The forward and
 * the backward use the same, so the backward recomputes the forward's S. */
float_keys softcap_tanh_keys(float_keys s, float cap)
{
    float_keys a = s * (2.0f * LOG2E / cap);
    a = select(select(a, (float_keys)64.0f, a > 64.0f), (float_keys)-64.0f, a < -64.0f);
    float_keys big = a + 12582912.0f, f = a - (big - 12582912.0f);
    float_keys p = ((1.546531857e-4f * f + 1.339528593e-3f) * f + 9.618040174e-3f) * f;
    p = (((p + 5.550340563e-2f) * f + 2.402265072e-1f) * f + 6.931471825e-1f) * f;
    float_keys two_n = AS_FLOAT_KEYS((AS_INT_KEYS(big) - 0x4B400000 + 127) << 23);
    float_keys em1 = p * two_n + (two_n - 1.0f); /* 2^a - 1 */
    return em1 / (em1 + 2.0f);
}

/* The score the plain kernel's S = Q K^T * scale is multiplied by: natural units where softcap
 * needs them (tanh of the true score), else log2 units directly. */
#if FEATURES & FA_FEATURE_SOFTCAP
#define SCORE_SCALE(p) ((p).scale)
#else
#define SCORE_SCALE(p) ((p).scale_log2)
#endif

/* What the score modifiers read for one query row of (batch, head): the ALiBi slope, the distance i' - k0 = row + Sk - Sq - k0 to the tile's first key, and the row's bias
 * from key k0 on, with bias_keys of them readable. */
typedef struct row_mods {
    float slope;
    long dist0;
    __global const bias_t *bias_row;
    int bias_keys;
} row_mods;

/* ALiBi's slope * |i' - j| in log2 units, the product formed first: a huge slope makes +-inf
 * past the f32 range and 0 at distance 0, as the golden saturates (flashattn.h, "Non-finite
 * values"), where slope * log2(e) first would make inf * 0 = NaN. */
float_keys alibi_keys(float slope, float_keys dist)
{
    return (slope * dist) * LOG2E;
}

/* S = softcap(s) + ALiBi for one float_keys vector of scores s (natural units with softcap,
 * else log2 units) of keys k0 + at + e, in log2 units. Lanes are keys, so the distance |i' - j|
 * falls by one per lane. */
float_keys modify_keys(float_keys s, const fa_kernel_params *p, const row_mods *rm, int at)
{
#if FEATURES & FA_FEATURE_SOFTCAP
    s = (p->softcap * LOG2E) * softcap_tanh_keys(s, p->softcap); /* cap tanh(s / cap) */
#endif
#if FEATURES & FA_FEATURE_ALIBI
    s -= alibi_keys(rm->slope, fabs((float_keys)(float)(rm->dist0 - at) - LANE_INDEX));
#endif
    return s;
}

/* Stores one float_keys vector of scores s (keys at .. + KEYS_PER_VEC of the lane's) to s_row,
 * through softcap and ALiBi where rm is not NULL (the forward's): applied as row_scores makes
 * the scores, not in a pass of their own over S, which cost more (history.md, ch. 20). */
void store_scores(float_keys s, __local float *s_row, int at, const fa_kernel_params *p,
                  const row_mods *rm)
{
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)
    if (rm)
        s = modify_keys(s, p, rm, at);
#endif
    S_STORE_KEYS(s, s_row + at);
}

/* The modifier inputs of query row `row` of (batch b, query head h), at key 0 (row_mods_at_tile
 * moves them to a tile). */
row_mods row_mods_of(const fa_kernel_params *p ALIBI_ARG BIAS_ARG, long b, long h, long row)
{
    row_mods rm = {0.0f, row + p->seqlen_k - p->seqlen_q, 0, 0};
#if FEATURES & FA_FEATURE_ALIBI
    rm.slope = alibi_slopes[h];
#endif
#if FEATURES & FA_FEATURE_BIAS
    if (row < p->seqlen_q) /* rows past Sq read nothing */
        rm.bias_row = bias + p->bias_offset + b * p->bias_stride_b + h * p->bias_stride_h +
                      row * p->bias_stride_s;
#endif
    return rm;
}

/* Points rm at the keys from k0 on (a lane's of a tile): valid_keys of them exist. */
void row_mods_at_tile(row_mods *rm, const row_mods *base, long k0, int valid_keys)
{
    rm->slope = base->slope;
    rm->dist0 = base->dist0 - k0;
    rm->bias_row = base->bias_row ? base->bias_row + k0 : 0;
    rm->bias_keys = base->bias_row ? valid_keys : 0;
}

/* One lane's keys of an S row, in log2 units: S[r][c] = sum_x Q[r][x] * K[c][x] * scale *
 * log2(e) for Bc / TPR keys c of the tile (the whole row where TPR is 1, as in the backward),
 * x in [0, d), reading q_col = Q^T[x][r] (column r of the d x Br tile, stride Br) and k_t =
 * K^T[x][c] (d x Bc, stride Bc, from the lane's first key), writing s_row[c] through softcap
 * and ALiBi where rm is not NULL (store_scores; the backward passes NULL). Four float_keys
 * vectors (keys c = KEYS_PER_VEC * kvec ..) at a time, so each Q element loaded feeds four
 * multiply-adds. */
ROW_SCORES_INLINE void row_scores(__local float *s_row, __local const tile_t *q_col,
                                  __local const tile_t *k_t, float scale_log2,
                                  const fa_kernel_params *p, const row_mods *rm)
{
    int kvec = 0; /* the vector of keys c = KEYS_PER_VEC * kvec .. +KEYS_PER_VEC of the row */
    for (; kvec + 4 <= VECS_PER_LANE_KEYS; kvec += 4) {
        float_keys s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f; /* vectors kvec .. kvec+3 */
        __local const tile_t *k_cols = k_t + kvec * KEYS_PER_VEC; /* K^T[0][c ..] */
#pragma unroll 4
        for (int x = 0; x < HEAD_DIM; x++) {
            float qx = LOAD_ONE_F32(q_col + x * BLOCK_R);         /* Q^T[x][r] */
            __local const tile_t *k_row = k_cols + x * BLOCK_C; /* K^T[x][c ..] */
            s0 += qx * LOAD_KEYS_F32(k_row);
            s1 += qx * LOAD_KEYS_F32(k_row + KEYS_PER_VEC);
            s2 += qx * LOAD_KEYS_F32(k_row + 2 * KEYS_PER_VEC);
            s3 += qx * LOAD_KEYS_F32(k_row + 3 * KEYS_PER_VEC);
        }
        store_scores(s0 * scale_log2, s_row, kvec * KEYS_PER_VEC, p, rm);
        store_scores(s1 * scale_log2, s_row, (kvec + 1) * KEYS_PER_VEC, p, rm);
        store_scores(s2 * scale_log2, s_row, (kvec + 2) * KEYS_PER_VEC, p, rm);
        store_scores(s3 * scale_log2, s_row, (kvec + 3) * KEYS_PER_VEC, p, rm);
    }
    for (; kvec < VECS_PER_LANE_KEYS; kvec++) { /* the last 0 .. 3 vectors, one at a time */
        float_keys s0 = 0.0f;
        UNROLL_4_ON_GPU
        for (int x = 0; x < HEAD_DIM; x++) /* Q^T[x][r] * K^T[x][c ..] */
            s0 += LOAD_ONE_F32(q_col + x * BLOCK_R) *
                  LOAD_KEYS_F32(k_t + x * BLOCK_C + kvec * KEYS_PER_VEC);
        store_scores(s0 * scale_log2, s_row, kvec * KEYS_PER_VEC, p, rm);
    }
}

/* Dropout's Philox lanes: counters of DROPOUT_LANES groups of four keys in one call (16 where
 * the device prefers 16-wide floats, else 8). */
#if VEC_MAX >= 16
#define DROPOUT_LANES 16
typedef uint16 uint_lanes;
typedef ulong16 ulong_lanes;
typedef float16 float_lanes;
#define VSTORE_LANES vstore16
#define CONVERT_ULONG_LANES convert_ulong16
#define CONVERT_UINT_LANES convert_uint16
#define PHILOX_LANE ((uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#define VLOAD_LANES vload16
typedef ulong8 ulong_pairs; /* float_lanes as pairs of lanes */
#define AS_PAIRS as_ulong8
#define AS_LANES as_float16
float16 zip_lanes(float16 a, float16 b, int hi)
{
    return hi ? (float16)(a.s8, b.s8, a.s9, b.s9, a.sa, b.sa, a.sb, b.sb, a.sc, b.sc, a.sd, b.sd,
                          a.se, b.se, a.sf, b.sf)
              : (float16)(a.s0, b.s0, a.s1, b.s1, a.s2, b.s2, a.s3, b.s3, a.s4, b.s4, a.s5, b.s5,
                          a.s6, b.s6, a.s7, b.s7);
}
ulong8 zip_pairs(ulong8 a, ulong8 b, int hi)
{
    return hi ? (ulong8)(a.s4, b.s4, a.s5, b.s5, a.s6, b.s6, a.s7, b.s7)
              : (ulong8)(a.s0, b.s0, a.s1, b.s1, a.s2, b.s2, a.s3, b.s3);
}
#else
#define DROPOUT_LANES 8
typedef uint8 uint_lanes;
typedef ulong8 ulong_lanes;
typedef float8 float_lanes;
#define VSTORE_LANES vstore8
#define CONVERT_ULONG_LANES convert_ulong8
#define CONVERT_UINT_LANES convert_uint8
#define PHILOX_LANE ((uint8)(0, 1, 2, 3, 4, 5, 6, 7))
#define VLOAD_LANES vload8
typedef ulong4 ulong_pairs;
#define AS_PAIRS as_ulong4
#define AS_LANES as_float8
float8 zip_lanes(float8 a, float8 b, int hi)
{
    return hi ? (float8)(a.s4, b.s4, a.s5, b.s5, a.s6, b.s6, a.s7, b.s7)
              : (float8)(a.s0, b.s0, a.s1, b.s1, a.s2, b.s2, a.s3, b.s3);
}
ulong4 zip_pairs(ulong4 a, ulong4 b, int hi)
{
    return hi ? (ulong4)(a.s2, b.s2, a.s3, b.s3) : (ulong4)(a.s0, b.s0, a.s1, b.s1);
}
#endif
/* zip_lanes: lanes a0 b0 a1 b1 .. of a's and b's low halves (hi = 0) or high halves (hi = 1);
 * zip_pairs: the same by pairs of lanes. Constant shuffles: on AVX-512 one vpermt2 each. */

/* Philox's MULHILO (kernel_params.h) on uint_lanes: the lanes' products widened to 64 bits.
 * pocl's mul_hi on a vector splits it into 16-bit halves, four multiplies where this is two. */
#define PHILOX_MULHILO_LANES(m, x, hi, lo)                                                      \
    do {                                                                                        \
        ulong_lanes p_ = CONVERT_ULONG_LANES(x) * (ulong)(m);                                   \
        hi = CONVERT_UINT_LANES(p_ >> 32);                                                      \
        lo = CONVERT_UINT_LANES(p_);                                                            \
    } while (0)

/* Dropout on one lane's keys of a row of P (keys k0 + c, c in [0, valid_keys), valid_keys <=
 * Bc / TPR): kept P times dropout_scale, dropped ones 0. One Philox call per group of four keys
 * (fa_dropout_words), each key taking its word j & 3. */
INLINE_ON_GPU void dropout_row(__local float *p_row, const fa_kernel_params *p, long b, long h,
                               long row, long k0, int valid_keys)
{
#if LANE_KEYS % (4 * DROPOUT_LANES) == 0
    if (valid_keys == LANE_KEYS) {
        /* A lane's whole keys: k0 is a multiple of 4 * DROPOUT_LANES, so that many groups of
         * four keys share one Philox call on uintN counters (vector element n: group
         * (k0 >> 2) + g0 + n; the other counter words as fa_dropout_words). The scalar form
         * cost pocl 80% of the forward at p = 0.1 (one Philox per four keys, never
         * vectorized), 8 lanes 36%; the lanes give the same words. */
        const uint_lanes thr = (uint_lanes)p->dropout_threshold;
        const float_lanes kept = (float_lanes)p->dropout_scale;
        const uint key0 = (uint)p->dropout_seed, key1 = (uint)(p->dropout_seed >> 32);
        /* Counter words 1-3 (row, b * heads_q + h, offset) are the same in every lane, and so
         * are round 1's product of word 2 and round 2's of word 0: the row's, made once. */
        uint r1_c0, r1_c1, r2_hi0, r2_lo0;
        FA_MULHILO_U32(FA_PHILOX_M1, (uint)(b * p->heads_q + h), r1_c0, r1_c1);
        r1_c0 ^= (uint)row ^ key0;
        FA_MULHILO_U32(FA_PHILOX_M0, r1_c0, r2_hi0, r2_lo0);
        for (int g0 = 0; g0 < LANE_KEYS / 4; g0 += DROPOUT_LANES) { /* keys k0 + 4 g0 .. */
            uint_lanes w0 = (uint_lanes)((uint)((k0 >> 2) + g0)) + PHILOX_LANE, w1, w2, w3;
            /* round 1: it leaves words 0 and 1 at (r1_c0, r1_c1) in every lane */
            PHILOX_MULHILO_LANES(FA_PHILOX_M0, w0, w2, w3);
            w2 ^= p->dropout_offset ^ key1;
            /* round 2: its M0 * word 0 is the row's (r2_hi0, r2_lo0) */
            uint rk0 = key0 + FA_PHILOX_W0, rk1 = key1 + FA_PHILOX_W1;
            PHILOX_MULHILO_LANES(FA_PHILOX_M1, w2, w0, w1);
            w0 ^= r1_c1 ^ rk0;
            w2 = r2_hi0 ^ w3 ^ rk1;
            w3 = (uint_lanes)r2_lo0;
            for (int round = 2; round < 10; round++) {
                rk0 += FA_PHILOX_W0;
                rk1 += FA_PHILOX_W1;
                FA_PHILOX_ROUND(uint_lanes, PHILOX_MULHILO_LANES, w0, w1, w2, w3, rk0, rk1);
            }
            /* z_e: the factors of keys 4 (g0 + n) + e (lane n of word e), put in key order by
             * zipping z0 with z1 and z2 with z3 by lanes, then those by pairs of lanes: vector m
             * holds keys 4 g0 + DROPOUT_LANES m ... Through a private z[4][lanes] array read
             * key by key this took twice the instructions of the Philox rounds, and dropout
             * cost 34% of the forward against 23% (pocl, B1 H8 N2048 d64 f32, Xeon). */
            float_lanes z0 = select((float_lanes)0.0f, kept, w0 >= thr);
            float_lanes z1 = select((float_lanes)0.0f, kept, w1 >= thr);
            float_lanes z2 = select((float_lanes)0.0f, kept, w2 >= thr);
            float_lanes z3 = select((float_lanes)0.0f, kept, w3 >= thr);
            __local float *keys = p_row + 4 * g0; /* P[r][4 g0 + c], c in [0, 4 lanes) */
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                ulong_pairs z01 = AS_PAIRS(zip_lanes(z0, z1, hi));
                ulong_pairs z23 = AS_PAIRS(zip_lanes(z2, z3, hi));
#pragma unroll
                for (int upper = 0; upper < 2; upper++) {
                    int m = 2 * hi + upper;
                    VSTORE_LANES(VLOAD_LANES(m, keys) * AS_LANES(zip_pairs(z01, z23, upper)), m,
                                 keys);
                }
            }
        }
        return;
    }
#endif
    for (long g = k0 >> 2; g << 2 < k0 + valid_keys; g++) { /* keys 4g .. 4g + 3 */
        uint w[4];
        fa_dropout_words(p, b, h, row, g << 2, w);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            long c = (g << 2) + e - k0;
            if (c >= 0 && c < valid_keys)
                p_row[c] = w[e] >= p->dropout_threshold ? p_row[c] * p->dropout_scale : 0.0f;
        }
    }
}

/* The first key tile (a multiple of Bc) any row of the tile at r0 may see: with a window, the
 * tiles wholly left of the first row's window are skipped. */
long keys_first_tile(const fa_kernel_params *p, long r0)
{
    return fa_keys_begin(p, FEATURES, r0) / BLOCK_C * BLOCK_C;
}

/* Sets range[0], range[1] to `first` and `end`, the bounds of a loop over tiles, seen by the
 * whole work-group. Loop bounds that depend on the mask or the window pass through local
 * memory: pocl did not see them as uniform and ran the tile loop (it holds barriers) about 1.5x
 * slower (history.md, ch. 14); from local memory it does. Call from every work-item. Beyond the window, only on devices
 * that are not GPUs and without sequences (SEQ): on GPUs the range held across the loop grew the
 * backward's spills (tools/cl_gpu_check.sh), and with sequences a tile past its sequence's rows
 * returns first, after which pocl 3.1 miscompiled this barrier (test_decode's paged and varlen
 * cases under GPU rules: NaN outputs, wrong LSE). */
#define SHARE_RANGES ((FEATURES & FA_FEATURE_WINDOW) || (!SEQ && !GPU))
void share_range(__local long *range, long first, long end)
{
    if (get_local_id(0) == 0) {
        range[0] = first;
        range[1] = end;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* ---- sequences and split-KV (SEQ, SPLIT; flashattn.h, "Sequences, pages and split-KV") ----- */

/* The sequence buffers (int32) after the modifier tensors, in the host's order (src/op_launches.c,
 * add_seq_args); those SEQ leaves out are null pointers for fa_seq_of and fa_key_row. */
#if SEQ & FA_SEQ_VARLEN
#define VARLEN_ARG , __global const int *cu_seqlens_q, __global const int *cu_seqlens_k
#define VARLEN_PTRS cu_seqlens_q, cu_seqlens_k
#else
#define VARLEN_ARG
#define VARLEN_PTRS 0, 0
#endif
#if SEQ & FA_SEQ_SEQLENS_K
#define SEQLENS_K_ARG , __global const int *seqlens_k
#define SEQLENS_K_PTR seqlens_k
#else
#define SEQLENS_K_ARG
#define SEQLENS_K_PTR 0
#endif
#if SEQ & FA_SEQ_PAGED
#define BLOCK_TABLE_ARG , __global const int *block_table
#define BLOCK_TABLE_PTR block_table
#else
#define BLOCK_TABLE_ARG
#define BLOCK_TABLE_PTR 0
#endif
#define SEQ_ARG VARLEN_ARG SEQLENS_K_ARG BLOCK_TABLE_ARG

/* A kernel's params argument (PARAMS_ARG) and its first step, SEQ_SETUP(b), which declares
 * `seq`, where sequence b is, and `p`, the params as that sequence sees them: under SEQ a
 * private copy with the sequence's lengths, so every mask, window, ALiBi and bottom-right rule
 * applies per sequence unchanged; without SEQ the argument itself, untouched. */
#if SEQ
#define PARAMS_ARG const fa_kernel_params p_in
#define SEQ_SETUP(b)                                                                            \
    fa_kernel_params p = p_in;                                                                  \
    const fa_seq seq = fa_seq_of(&p, SEQ, VARLEN_PTRS, SEQLENS_K_PTR, b);                       \
    p.seqlen_q = seq.seqlen_q;                                                                  \
    p.seqlen_k = seq.seqlen_k
#else
#define PARAMS_ARG const fa_kernel_params p
#define SEQ_SETUP(b) const fa_seq seq = {0, p.seqlen_q, 0, p.seqlen_k}
#endif

/* Row 0 of head h_kv of K or V (at t, with that tensor's offset and strides) for sequence b
 * starting at key k_start; paged, the head term only (load_keys adds each key's page). */
__global const store_t *key_head(__global const store_t *t, long offset, long stride_b,
                                 long stride_h, long stride_s, long b, long h_kv, long k_start)
{
    if (SEQ & FA_SEQ_PAGED)
        return t + offset + h_kv * stride_h;
    return t + offset + b * stride_b + h_kv * stride_h + k_start * stride_s;
}

/* Where key j's row of K or V starts, from `head` (key_head): paged, in the page the block
 * table gives it (fa_key_row). */
long key_row(long j, long stride_b, long stride_s, const fa_kernel_params *p,
             __global const int *block_table, long b)
{
#if SEQ & FA_SEQ_PAGED
    return fa_key_row(p, SEQ, block_table, b, 0, j, stride_b, stride_s);
#else
    return j * stride_s;
#endif
}

/* Copies keys [k0, k0 + Bc) of K or V (row 0 at `head`, key_head) into a local tile as
 * load_tile does, zero past `sk`. Paged, key j's row is at fa_key_row (its page from the block
 * table), so each element finds its own. */
void load_keys(__local tile_t *tile, __global const store_t *head, long k0, long sk,
               long stride_b, long stride_s, int transposed, const fa_kernel_params *p,
               __global const int *block_table, long b)
{
#if SEQ & FA_SEQ_PAGED
    /* A key's row is looked up once per key a work-item meets, not once per element: with one
     * work-item per work-group (a decode's Br = 1 on pocl) a lookup per element made the paged
     * forward 2.9x slower than the contiguous one (B1 Sk 32768 d128 f16); now it is one
     * division per key. */
    int row_of = -1;
    long row = 0;
    const int step = VEC_TILE_LOADS ? 8 : 1; /* elements copied at once */
    for (int idx = (int)get_local_id(0) * step; idx < BLOCK_C * HEAD_DIM;
         idx += WG_SIZE * step) {
        int c = idx / HEAD_DIM, x = idx - c * HEAD_DIM; /* key k0 + c, elements x .. */
        long j = k0 + c;
        if (c != row_of && j < sk) {
            row_of = c;
            row = key_row(j, stride_b, stride_s, p, block_table, b);
        }
#if VEC_TILE_LOADS
        float8 val = j < sk ? LOAD_N_F32_IN(__global, 8, head + row + x) : (float8)0.0f;
        store_tile8(tile, val, c, x, BLOCK_C, transposed);
#else
        tile_t val = j < sk ? TILE_ELEM(head + row + x) : (tile_t)0;
        tile[transposed ? x * BLOCK_C + c : idx] = val;
#endif
    }
#else
    load_tile(tile, head, k0, sk, stride_s, BLOCK_C, transposed);
#endif
}
