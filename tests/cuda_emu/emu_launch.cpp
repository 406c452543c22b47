/*
 * emu_launch.cpp - runs an emulated kernel configuration (emu_kernel.cpp) over a grid: one host
 * thread per CUDA thread of the block, the blocks one after another, a barrier between them,
 * and after each block a check that no byte past the launch's dynamic shared memory changed.
 * The C test driver (tests/test_cuda_emu.c) calls the extern "C" functions below.
 */
#include "cuda_emu.h"

#include <pthread.h>
#include <stddef.h>
#include <thread>
#include <vector>

thread_local fa_emu_dim3 threadIdx, blockIdx, gridDim;

namespace {
std::vector<const fa_emu_kernel *> &registry()
{
    static std::vector<const fa_emu_kernel *> kernels;
    return kernels;
}

/* The launch in progress: one at a time (the test driver is single-threaded). */
pthread_barrier_t block_barrier;
/* One per warp of the block (32 threads, the last one possibly fewer): what warp-synchronous
 * operations (mma.sync, __shfl_xor_sync, __syncwarp) wait on, so they order only their warp's
 * threads, as on the hardware; a missing __syncthreads stays visible to ThreadSanitizer. */
std::vector<pthread_barrier_t> warp_barriers;
std::vector<float> exchange; /* __shfl_xor_sync's values, one per thread */

struct mma_regs {
    unsigned a[4], b[2];
};
std::vector<mma_regs> fragments; /* mma.sync's operands, one per thread */

float element(unsigned bits, int half, int dtype)
{
    unsigned short h = (unsigned short)(half ? bits >> 16 : bits & 0xFFFFu);
    return dtype == FA_DTYPE_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}
} // namespace

void fa_emu_register(const fa_emu_kernel *k) { registry().push_back(k); }

void fa_emu_barrier() { pthread_barrier_wait(&block_barrier); }

void fa_emu_warp_barrier() { pthread_barrier_wait(&warp_barriers[threadIdx.x / 32]); }

/* Every thread publishes its value, then reads its partner's: lanes differ only in the bits of
 * lane_mask, which stay inside a warp's segment of `width` lanes as on the hardware. */
float fa_emu_shfl_xor(float v, int lane_mask, int width)
{
    unsigned tid = threadIdx.x;
    (void)width;
    exchange[tid] = v;
    fa_emu_warp_barrier();
    float r = exchange[tid ^ (unsigned)lane_mask];
    fa_emu_warp_barrier();
    return r;
}

/* The PTX ISA's m16n8k16 layouts (g = lane / 4, t = lane % 4): A[r][k] is half k % 2 of
 * a[(r >= 8) + 2 * (k >= 8)] of lane (r % 8) * 4 + (k % 8) / 2; B[k][n] is half k % 2 of
 * b[k >= 8] of lane n * 4 + (k % 8) / 2; c[e] is D[g + 8 * (e >= 2)][2t + e % 2]. */
void fa_emu_mma16816(float c[4], const unsigned a[4], const unsigned b[2], int dtype)
{
    unsigned tid = threadIdx.x, warp = tid & ~31u, lane = tid & 31u;
    memcpy(fragments[tid].a, a, sizeof fragments[tid].a);
    memcpy(fragments[tid].b, b, sizeof fragments[tid].b);
    fa_emu_warp_barrier();
    float d[4];
    for (int e = 0; e < 4; e++) {
        int r = (int)lane / 4 + (e >= 2 ? 8 : 0), n = (int)(lane % 4) * 2 + e % 2;
        float sum = 0.0f;
        for (int kk = 0; kk < 16; kk++) {
            const mma_regs &ra = fragments[warp + (unsigned)((r % 8) * 4 + (kk % 8) / 2)];
            const mma_regs &rb = fragments[warp + (unsigned)(n * 4 + (kk % 8) / 2)];
            sum += element(ra.a[(r >= 8) + 2 * (kk >= 8)], kk % 2, dtype) *
                   element(rb.b[kk >= 8], kk % 2, dtype);
        }
        d[e] = c[e] + sum;
    }
    fa_emu_warp_barrier();
    memcpy(c, d, sizeof d);
}

size_t fa_emu_kernel_count(void) { return registry().size(); }

const fa_emu_kernel *fa_emu_kernel_at(size_t i)
{
    return i < registry().size() ? registry()[i] : nullptr;
}

/* The first changed canary byte past `from` (1 + its offset past `from`), or 0. */
static long long canary_breach(const fa_emu_kernel *k, size_t from)
{
    for (size_t i = from; i < k->smem_bytes; i++)
        if ((unsigned char)k->smem[i] != FA_EMU_CANARY)
            return 1 + (long long)(i - from);
    return 0;
}

long long fa_emu_launch(const fa_emu_kernel *k, unsigned gx, unsigned gy, unsigned gz,
                        void *const *args, const void *params, size_t shared_bytes)
{
    if (shared_bytes > k->smem_bytes)
        return -1;
    memset(k->smem, 0xFF, shared_bytes);
    memset(k->smem + shared_bytes, FA_EMU_CANARY, k->smem_bytes - shared_bytes);
    exchange.assign((size_t)k->wg_size, 0.0f);
    fragments.assign((size_t)k->wg_size, mma_regs{});
    pthread_barrier_init(&block_barrier, nullptr, (unsigned)k->wg_size);
    warp_barriers.resize((size_t)(k->wg_size + 31) / 32);
    for (size_t w = 0; w < warp_barriers.size(); w++) {
        unsigned in_warp = (unsigned)k->wg_size - 32u * (unsigned)w;
        pthread_barrier_init(&warp_barriers[w], nullptr, in_warp < 32u ? in_warp : 32u);
    }
    /* Written by thread 0 between two block barriers, read by every thread after the second. */
    long long breach = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < k->wg_size; t++) {
        threads.emplace_back([=, &breach] {
            threadIdx = {(unsigned)t, 0, 0};
            gridDim = {gx, gy, gz};
            for (unsigned z = 0; z < gz; z++)
                for (unsigned y = 0; y < gy; y++)
                    for (unsigned x = 0; x < gx; x++) {
                        blockIdx = {x, y, z};
                        k->entry(args, params);
                        fa_emu_barrier(); /* the block is done before the next one starts */
                        if (t == 0)
                            breach = canary_breach(k, shared_bytes);
                        fa_emu_barrier(); /* every thread sees the check before going on */
                        if (breach)
                            return;
                    }
        });
    }
    for (std::thread &t : threads)
        t.join();
    pthread_barrier_destroy(&block_barrier);
    for (pthread_barrier_t &b : warp_barriers)
        pthread_barrier_destroy(&b);
    return breach;
}
