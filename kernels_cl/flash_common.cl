/*
 * flash_common.cl - the first of the files the OpenCL kernels share (OpenCL C 1.2): the
 * tunables and their defaults, the params' size check, the tile shapes and vector widths every
 * other file derives. The rest follow it by topic: flash_storage.cl (the storage type and its
 * conversions), flash_softmax.cl (reductions, tile copies, the lanes of a row), flash_modifiers.cl
 * (FEATURES), flash_dropout.cl (Philox lanes) and flash_sequences.cl (tile ranges and SEQ);
 * then flash_fwd.cl, flash_merge.cl or flash_bwd.cl, in one program each
 * (backends/opencl/cl_program.c). None defines a kernel but those three.
 *
 * Every tunable has a default so each file compiles alone (with -I src -I kernels_cl); the host
 * passes the planned values with -D. The library prepends kernel_params.h to this text.
 */
#ifndef FA_KERNEL_PARAMS_H
#include "kernel_params.h"
#define FA_KERNELS_ALONE /* compiled on its own: this file brings in the other shared files */
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
/* REG_BLOCKED 1 (CPUs): one work-item holds the tile's rows and runs S = Q K^T and P V as
 * register-blocked products over local K^T and V tiles (flash_blocks.cl, flash_fwd_blocked.cl);
 * in the backward's dK/dV and dQ passes their products likewise (flash_bwd_blocked.cl). */
#ifndef REG_BLOCKED
#define REG_BLOCKED 0
#endif
#ifndef SPARSE_FULL
#define SPARSE_FULL 0 /* 1: a block-sparse kernel reads the full lists too */
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
#if DIRECT_KV || REG_BLOCKED
#define ITEM_ROWS BLOCK_R /* query rows per work-item */
#else
#define ITEM_ROWS 1
#endif
#if (TPR & (TPR - 1)) != 0 || BLOCK_C % TPR != 0 || HEAD_DIM % TPR != 0 ||                      \
    WG_SIZE * ITEM_ROWS != BLOCK_R * TPR || ((DIRECT_KV || REG_BLOCKED) && TPR != 1)
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
#ifndef PARTS_DTYPE
#define PARTS_DTYPE 0 /* flash_merge's partials' storage: 0 f32, 1 f16, 2 bf16 */
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
#ifndef TILE_F32
#define TILE_F32 0 /* 1: local tiles hold f32 for f16 and bf16 storage (flash_storage.cl) */
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
typedef char fa_kernel_params_size_check[sizeof(fa_kernel_params) == 568 ? 1 : -1];

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

/* REG_BLOCKED's register blocks (flash_blocks.cl): REG_ROWS query rows (or keys) x KEY_VECS
 * vectors of keys (S) or DIM_VECS vectors of an O row (P V), up to 4 x 4 accumulators. */
#define REG_ROWS 4
#if VECS_PER_S_ROW % 4 == 0
#define KEY_VECS 4
#elif VECS_PER_S_ROW % 2 == 0
#define KEY_VECS 2
#else
#define KEY_VECS 1
#endif
#if VECS_PER_O_ROW % 4 == 0
#define DIM_VECS 4
#elif VECS_PER_O_ROW % 2 == 0
#define DIM_VECS 2
#else
#define DIM_VECS 1
#endif


/* The shared files follow this one in every program the library assembles (cl_program.c);
 * compiled on its own, this file brings them in, in the same order. */
#ifdef FA_KERNELS_ALONE
#include "flash_storage.cl"
#include "flash_softmax.cl"
#include "flash_modifiers.cl"
#include "flash_dropout.cl"
#include "flash_sequences.cl"
#endif
