/*
 * flash_common.cu - what every CUDA kernel file builds on (compiled at run time by NVRTC, first
 * in each program): the tunables with their defaults, the checks on them, the storage type and
 * its f32 conversions, the row groups' warp reductions, the tile copy, and the sequences (-DSEQ:
 * varlen rows, per-sequence key counts, paged K/V) with the buffers a launch passes for them.
 * flash_fwd.cu (and flash_bwd.cu on it), flash_bwd_rows.cu and flash_merge.cu include it when
 * compiled alone (with -I kernels_cu -I src); the host prepends kernel_params.h and this file
 * (backends/cuda/cuda_module.c).
 * No CUDA header is included: NVRTC compiles without -I; f16 goes through PTX cvt, bf16 through
 * bit shifts. FA_EMULATED is the host emulator's (tests/cuda_emu): it supplies the PTX pieces
 * (f16 conversions, mma) in software so the test suite can run the kernels without a GPU.
 */
#ifndef FA_KERNEL_PARAMS_H
#include "kernel_params.h"
#endif
#define FA_FLASH_COMMON_CU /* the other kernel files build on this one */

#ifndef HEAD_DIM
#define HEAD_DIM 64 /* d: elements per row of Q, K, V, O */
#endif
#ifndef BLOCK_R
#define BLOCK_R 64 /* Br: query rows per block */
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
#ifndef MMA
#define MMA 0 /* 1: the tensor-core path */
#endif
#ifndef TPR
#define TPR 4 /* threads per query row (CUDA cores) or lanes per fragment row group (MMA) */
#endif
#ifndef FEATURES
#define FEATURES 0 /* FA_FEATURE_* bits: the score modifiers and dropout compiled in */
#endif
#ifndef BIAS_DTYPE
#define BIAS_DTYPE 0 /* the bias's fa_dtype (FA_FEATURE_BIAS): 0 f32, else DTYPE */
#endif
#ifndef SEQ
#define SEQ 0 /* FA_SEQ_* bits: varlen, seqlens_k, paged K/V */
#endif
#ifndef PIPELINE
#define PIPELINE 0 /* 1: flash_fwd's tensor cores with double-buffered asynchronous K/V copies */
#endif
/* Elements per row of a row-major shared tile: d, or with PIPELINE d + 8 (16 bytes), so the 8
 * rows an mma fragment reads start in different banks (d 64 or 128 rows are whole multiples of
 * the 32 banks' 128 bytes, and 8 such rows hit one bank 8 times). */
#define TILE_PAD (PIPELINE ? 8 : 0)
#define TILE_LD (HEAD_DIM + TILE_PAD)
/* The host's name is TPR (its -D option); the kernel reads this one. */
#define THREADS_PER_ROW TPR
#ifndef WG_SIZE
#if MMA
#define WG_SIZE (BLOCK_R * 2) /* threads per block: one warp (32) per 16 rows */
#else
#define WG_SIZE (BLOCK_R * THREADS_PER_ROW) /* threads per block */
#endif
#endif

static_assert(sizeof(fa_kernel_params) == 568, "fa_kernel_params must match the C layout");
static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0, "TPR: a power of two <= 32");
#if MMA
static_assert(DTYPE != 0, "the tensor-core path takes f16 or bf16");
static_assert(TPR == 4, "MMA: a fragment row is shared by the 4 lanes of a quad");
static_assert(HEAD_DIM % 16 == 0 && BLOCK_R % 16 == 0 && BLOCK_C % 16 == 0,
              "MMA: d, Br and Bc must be multiples of 16");
static_assert(WG_SIZE == BLOCK_R * 2, "MMA: WG_SIZE must be one warp per 16 rows");
#else
static_assert(WG_SIZE == BLOCK_R * TPR, "WG_SIZE must be BLOCK_R * TPR");
#endif
static_assert(BIAS_DTYPE == 0 || BIAS_DTYPE == DTYPE, "BIAS_DTYPE: f32 or the storage type");
static_assert(PIPELINE == 0 || (PIPELINE == 1 && MMA), "PIPELINE: 1 on the tensor-core path");

#define LN2 0.69314718055994530942f
#define LOG2E 1.44269504088896340736f
#define NEG_INF __int_as_float(0xff800000)
#define FLT_MIN_NORMAL __int_as_float(0x00800000) /* 2^-126, FLT_MIN */

typedef long long i64;

/* A probability P below FLT_MIN (2^-126) as 0, as flash_common.cl's FLUSH_TINY: such a P is a
 * denormal, which costs x86 CPUs a microcode assist per FMA (ALiBi's distant keys made pocl's
 * forward 2.3x slower); GPUs take denormals at full speed, and flushing them here too keeps the
 * backends' P the same. Neither O nor the row sum moves by more than their rounding: l is at
 * least 1 (the row's largest P) and O's f32 sum rounds at 2^-24 of its largest term. */
__device__ __forceinline__ float flush_tiny(float p) { return p < FLT_MIN_NORMAL ? 0.0f : p; }

/* ---- storage type: raw copies global -> shared, f32 conversion on loads from shared ------- */
/* to_f32: one stored element as f32; to_store: f32 to the storage type, rounding to nearest
 * even. */
#if DTYPE == 0
typedef float store_t;
__device__ __forceinline__ float to_f32(store_t v) { return v; }
__device__ __forceinline__ store_t to_store(float v) { return v; }
#elif DTYPE == 1
typedef unsigned short store_t; /* IEEE half bits */
#ifdef FA_EMULATED
__device__ __forceinline__ float to_f32(store_t v) { return fa_emu_f16_to_f32(v); }
__device__ __forceinline__ store_t to_store(float v) { return fa_emu_f32_to_f16(v); }
#else
__device__ __forceinline__ float to_f32(store_t v)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ store_t to_store(float v)
{
    store_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); /* round to nearest even */
    return h;
}
#endif
#else
typedef unsigned short store_t; /* bf16 bits: the upper half of a binary32 */
__device__ __forceinline__ float to_f32(store_t v) { return __int_as_float((int)v << 16); }
__device__ __forceinline__ store_t to_store(float v)
{
    unsigned u = (unsigned)__float_as_int(v);
    if (v != v)
        return (store_t)((u >> 16) | 0x40u); /* keep NaN a (quiet) NaN, not an infinity */
    return (store_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}
#endif

/* ---- shared by both paths ------------------------------------------------------------------ */

/* The lanes of this thread's row group: THREADS_PER_ROW consecutive lanes of one warp, as a
 * shuffle mask (lane l is bit l). */
__device__ __forceinline__ unsigned row_lanes()
{
    unsigned lane = threadIdx.x & 31u;
    unsigned group = THREADS_PER_ROW == 32 ? 0xffffffffu : ((1u << THREADS_PER_ROW) - 1u);
    return group << (lane & ~(unsigned)(THREADS_PER_ROW - 1));
}

/* Butterfly max / sum over the THREADS_PER_ROW lanes of a row (offsets TPR/2, ..., 1): every
 * lane gets the same (bitwise) value. */
__device__ __forceinline__ float row_max(float v, unsigned lanes)
{
    for (int off = THREADS_PER_ROW / 2; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(lanes, v, off, THREADS_PER_ROW));
    return v;
}

__device__ __forceinline__ float row_sum(float v, unsigned lanes)
{
    for (int off = THREADS_PER_ROW / 2; off > 0; off /= 2)
        v += __shfl_xor_sync(lanes, v, off, THREADS_PER_ROW);
    return v;
}

/* ---- tile copies global -> shared, 16 bytes a load where the rows allow it ---------------- */
/* A 16-byte chunk of a row: CHUNK_ELEMS storage elements (4 f32, 8 f16 / bf16); ROW_CHUNKS of
 * them make a d-row (0: d is not whole chunks, and every copy goes element by element). */
#define CHUNK_ELEMS (16 / (int)sizeof(store_t))
#define ROW_CHUNKS (HEAD_DIM % CHUNK_ELEMS == 0 ? HEAD_DIM / CHUNK_ELEMS : 0)

struct __align__(16) chunk16 {
    unsigned w[4]; /* element e: the low half of w[e / 2] first (2-byte types), else w[e] */
};

/* One 16-byte load (ld.global.v4 on a GPU; the emulator copies the bytes). */
__device__ __forceinline__ chunk16 load_chunk(const store_t *s)
{
#ifdef FA_EMULATED
    chunk16 c;
    memcpy(&c, s, sizeof c);
    return c;
#else
    return *(const chunk16 *)s;
#endif
}

/* Element e of a chunk. */
__device__ __forceinline__ store_t chunk_elem(const chunk16 &c, int e)
{
#if DTYPE == 0
    return __int_as_float((int)c.w[e]);
#else
    return (store_t)(c.w[e / 2] >> (16 * (e & 1)));
#endif
}

/* Whether rows at src, `stride` elements apart (and `stride2`, a page's, for paged keys), start
 * on 16-byte boundaries, so each row can be read in chunks; uniform over the block. */
__device__ __forceinline__ bool chunked_rows(const store_t *src, i64 stride, i64 stride2)
{
    return ROW_CHUNKS > 0 && ((unsigned long long)src & 15u) == 0 && stride % CHUNK_ELEMS == 0 &&
           stride2 % CHUNK_ELEMS == 0;
}

/* Writes chunk c as the elements (r, x .. x + CHUNK_ELEMS) of a rows x d tile: transposed,
 * tile[(x + e) * rows + r], else tile[r * TILE_LD + x + e] (one 16-byte store where the tile is
 * 16-byte aligned, `aligned`). */
__device__ __forceinline__ void store_chunk(store_t *tile, const chunk16 &c, int r, int x,
                                            int rows, bool transposed, bool aligned)
{
    if (!transposed && aligned) {
        *(chunk16 *)(tile + r * TILE_LD + x) = c;
        return;
    }
#pragma unroll
    for (int e = 0; e < CHUNK_ELEMS; e++)
        tile[transposed ? (x + e) * rows + r : r * TILE_LD + x + e] = chunk_elem(c, e);
}

/* Copies `rows` rows of d elements into a shared tile, zeros for rows at or past `valid`: row r
 * starts at src + at.offset(r). Element (r, x) of the rows x d block: transposed,
 * tile[x * rows + r] (d x rows), else tile[r * TILE_LD + x] (rows x d). Rows in 16-byte chunks
 * where `chunked` says they allow it (chunked_rows), else element by element. */
template <typename RowAt>
__device__ void copy_rows(store_t *tile, const store_t *src, const RowAt &at, int rows,
                          i64 valid, bool transposed, bool chunked)
{
    if (chunked) {
        const bool aligned = ((unsigned long long)tile & 15u) == 0;
        for (int idx = (int)threadIdx.x; idx < rows * ROW_CHUNKS; idx += WG_SIZE) {
            int r = idx / ROW_CHUNKS, x = (idx - r * ROW_CHUNKS) * CHUNK_ELEMS;
            chunk16 c = {{0u, 0u, 0u, 0u}};
            if (r < valid)
                c = load_chunk(src + at.offset(r) + x);
            store_chunk(tile, c, r, x, rows, transposed, aligned);
        }
        return;
    }
    for (int idx = (int)threadIdx.x; idx < rows * HEAD_DIM; idx += WG_SIZE) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        store_t val = r < valid ? src[at.offset(r) + x] : (store_t)0;
        tile[transposed ? x * rows + r : r * TILE_LD + x] = val;
    }
}

/* Row r of a strided slice: r * stride elements on. */
struct strided_rows {
    i64 stride;
    __device__ __forceinline__ i64 offset(int r) const { return r * stride; }
};

/* Copies rows [row0, row0 + rows) of a [seq, d] slice (row stride `stride`) into a shared tile,
 * zero past `seq`: transposed, tile[x * rows + r] (d x rows), else tile[r * TILE_LD + x]
 * (rows x d). */
__device__ __forceinline__ void load_tile(store_t *tile, const store_t *src, i64 row0, i64 seq,
                                          i64 stride, int rows, bool transposed)
{
    const store_t *first = src + row0 * stride;
    copy_rows(tile, first, strided_rows{stride}, rows, seq - row0, transposed,
              chunked_rows(first, stride, 0));
}

/* ---- sequences (SEQ: FA_SEQ_* bits; kernel_params.h's fa_seq_of, fa_key_row, fa_lse_index) - */

/* The sequence buffers of a launch, in the host's order (src/op_launches.c add_seq_args) after its
 * modifier tensors: those of the SEQ bits compiled in; absent ones are null here. */
struct seq_args {
    const int *cu_seqlens_q, *cu_seqlens_k; /* FA_SEQ_VARLEN: int32 [B + 1] */
    const int *seqlens_k;                   /* FA_SEQ_SEQLENS_K: int32 [B] */
    const int *block_table;                 /* FA_SEQ_PAGED: int32 [B, pages_per_seq] */
};
#if SEQ & FA_SEQ_VARLEN
#define VARLEN_PARAM const int *__restrict__ cu_seqlens_q, const int *__restrict__ cu_seqlens_k,
#define VARLEN_ARGS cu_seqlens_q, cu_seqlens_k
#else
#define VARLEN_PARAM
#define VARLEN_ARGS nullptr, nullptr
#endif
#if SEQ & FA_SEQ_SEQLENS_K
#define SEQLENS_K_PARAM const int *__restrict__ seqlens_k,
#define SEQLENS_K_ARG seqlens_k
#else
#define SEQLENS_K_PARAM
#define SEQLENS_K_ARG nullptr
#endif
#if SEQ & FA_SEQ_PAGED
#define BLOCK_TABLE_PARAM const int *__restrict__ block_table,
#define BLOCK_TABLE_ARG block_table
#else
#define BLOCK_TABLE_PARAM
#define BLOCK_TABLE_ARG nullptr
#endif
/* An entry point's sequence parameters (before the params struct) and their seq_args. */
#define SEQ_PARAM VARLEN_PARAM SEQLENS_K_PARAM BLOCK_TABLE_PARAM
#define SEQ_ARGS {VARLEN_ARGS, SEQLENS_K_ARG, BLOCK_TABLE_ARG}

/* Sequence b of the launch: where its rows (q_start) and keys (k_start) start in the packed
 * tensors, and its own seqlen_q and seqlen_k (the params' without SEQ). */
__device__ __forceinline__ fa_seq seq_of(const seq_args &a, const fa_kernel_params &p, i64 b)
{
    return fa_seq_of(&p, SEQ, a.cu_seqlens_q, a.cu_seqlens_k, a.seqlens_k, b);
}

/* The launch's params with sequence s's own lengths, so that every mask, window, ALiBi and
 * bottom-right rule applies per sequence. */
__device__ __forceinline__ fa_kernel_params seq_params(const fa_kernel_params &p_in,
                                                       const fa_seq &s)
{
    fa_kernel_params p = p_in;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = s.seqlen_k;
    return p;
}

/* Declares p, the params of a work item of sequence s: seq_params with SEQ; without, p_in itself,
 * so a plain build is unchanged. */
#if SEQ
#define SEQ_PARAMS(p, p_in, s) const fa_kernel_params p = seq_params(p_in, s)
#else
#define SEQ_PARAMS(p, p_in, s) const fa_kernel_params &p = p_in
#endif
