/*
 * cuda_emu.h - just enough of CUDA C++ for the kernels in kernels_cu/ (*.cu) to compile
 * as host C++ and run one thread block as WG_SIZE host threads, so the CUDA kernels' tile loops
 * (indexing, masks, online softmax, the backward's passes, tails, grid-stride folding) are
 * checked on machines without a GPU.
 *
 * The model, and what it does not check:
 * - every CUDA thread of a block is a host thread; __syncthreads is a barrier over the block;
 * - __syncwarp, __shfl_xor_sync and mma.sync are barriers over the calling thread's warp (32
 *   consecutive threads; the kernels call them from every lane the same number of times), so
 *   they order no other warp's accesses and ThreadSanitizer still sees a missing __syncthreads.
 *   They are stronger than the hardware's in the warp: __syncwarp's lane mask is ignored, so a
 *   missing warp barrier between lanes of different masks is not found here
 *   (compute-sanitizer's synccheck on a GPU is for that);
 * - shared memory is one array per kernel configuration: the launch's dynamic bytes are filled
 *   with NaN bytes before each launch, so a read of a shared word that no thread wrote shows in
 *   the output, and the rest with a canary checked after every block, so a write past the
 *   launch's bytes fails the launch (emu_launch.cpp);
 * - the kernel's PTX (f16 `cvt`, `mma.sync`) comes from FA_EMULATED hooks: the conversions are
 *   the library's, mma.sync gathers the warp's fragments between two warp barriers and multiplies
 *   with f32 accumulation, following the PTX ISA's m16n8k16 fragment layouts.
 */
#ifndef FA_CUDA_EMU_H
#define FA_CUDA_EMU_H

#include "emu_api.h"
#include "flashattn.h"

#include <math.h>
#include <string.h>

struct fa_emu_dim3 {
    unsigned x, y, z;
};

/* The calling host thread's coordinates, set by the launcher (emu_launch.cpp). */
extern thread_local fa_emu_dim3 threadIdx, blockIdx, gridDim;

void fa_emu_barrier();      /* __syncthreads: the whole block */
void fa_emu_warp_barrier(); /* the calling thread's warp */
float fa_emu_shfl_xor(float v, int lane_mask, int width);
/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: the 32 lanes of a warp together. */
void fa_emu_mma16816(float c[4], const unsigned a[4], const unsigned b[2], int dtype);
/* PTX cvt.f32.f16 and cvt.rn.f16.f32, through the library's own conversions. */
inline float fa_emu_f16_to_f32(unsigned short h) { return fa_f16_to_f32(h); }
inline unsigned short fa_emu_f32_to_f16(float x) { return fa_f32_to_f16(x); }

/* The kernel's hooks for the three PTX pieces (see kernels_cu/flash_fwd.cu). */
#define FA_EMULATED 1

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

inline void __syncthreads() { fa_emu_barrier(); }
inline void __syncwarp(unsigned) { fa_emu_warp_barrier(); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask, int width)
{
    return fa_emu_shfl_xor(v, lane_mask, width);
}
inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline int __float_as_int(float f)
{
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

#endif /* FA_CUDA_EMU_H */
