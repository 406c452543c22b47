/*
 * flash_fwd.cu - the FlashAttention forward kernel (CUDA, compiled at run time by NVRTC):
 * O = softmax(Q K^T * scale) V with the online softmax of FlashAttention's Algorithm 1, never
 * materializing Sq x Sk scores. The same tile loop, with the same step comments in the same
 * order, as kernels_cl/flash_fwd.cl.
 *
 * One thread block per (Q tile, head, batch): grid (q_tiles, heads_q, batch); the block loops
 * over the grid's strides as well, so the host may fold dimensions past the grid limits
 * (65535 in y and z). TPR threads share one query row (consecutive lanes of one warp): for S
 * each owns the keys j = t, t + TPR, ...; for O the head-dim elements x = t, t + TPR, ...;
 * row maxima and sums are combined with warp shuffles. The Q, K and V tiles live in dynamic
 * shared memory in the storage type (Q and K transposed, d x Br and d x Bc, so the threads of a
 * warp read consecutive words), the S tile as Br x Bc floats: exactly the planner's budget
 * (Br*d + 2*Bc*d) * elem + Br*Bc*4, which the host passes as the launch's shared memory.
 *
 * Two paths through the same loop, chosen by the host's plan (-DMMA):
 * - MMA 0, CUDA cores: the layout above, f32 accumulation, every architecture and dtype.
 * - MMA 1, tensor cores (sm_80+, f16/bf16, d a multiple of 16): one warp per 16 query rows;
 *   S = Q K^T and O += P V are mma.sync m16n8k16 with f32 accumulation, and S and P never leave
 *   registers (the accumulator fragment of S is, packed, the A fragment of P V). Q, K and V are
 *   row-major tiles in shared memory; no S tile.
 * No CUDA header is included: NVRTC compiles this file without -I; f16 goes through PTX cvt,
 * bf16 through bit shifts. Every tunable has a default so the file compiles alone (with -I src
 * for kernel_params.h); the host passes the planned values with -D and prepends kernel_params.h.
 * FA_EMULATED is the host emulator's (tests/cuda_emu): it supplies the three PTX pieces (f16
 * conversions, mma) in software so the test suite can run this file without a GPU.
 */
#ifndef FA_KERNEL_PARAMS_H
#include "kernel_params.h"
#endif

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
#ifndef WG_SIZE
#if MMA
#define WG_SIZE (BLOCK_R * 2) /* threads per block: one warp per 16 rows */
#else
#define WG_SIZE (BLOCK_R * TPR) /* threads per block */
#endif
#endif

static_assert(sizeof(fa_kernel_params) == 192, "fa_kernel_params must match the C layout");
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

#define KEYS_PER_THREAD ((BLOCK_C + TPR - 1) / TPR)  /* keys of an S row per thread */
#define DIMS_PER_THREAD ((HEAD_DIM + TPR - 1) / TPR) /* elements of an O row per thread */
#define LN2 0.69314718055994530942f
#define NEG_INF __int_as_float(0xff800000)

typedef long long i64;

/* ---- storage type: raw copies global -> shared, f32 conversion on loads from shared ------- */
#if DTYPE == 0
typedef float store_t;
__device__ __forceinline__ float ld(store_t v) { return v; }
__device__ __forceinline__ store_t st(float v) { return v; }
#elif DTYPE == 1
typedef unsigned short store_t; /* IEEE half bits */
#ifdef FA_EMULATED
__device__ __forceinline__ float ld(store_t v) { return fa_emu_f16_to_f32(v); }
__device__ __forceinline__ store_t st(float v) { return fa_emu_f32_to_f16(v); }
#else
__device__ __forceinline__ float ld(store_t v)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ store_t st(float v)
{
    store_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); /* round to nearest even */
    return h;
}
#endif
#else
typedef unsigned short store_t; /* bf16 bits: the upper half of a binary32 */
__device__ __forceinline__ float ld(store_t v) { return __int_as_float((int)v << 16); }
__device__ __forceinline__ store_t st(float v)
{
    unsigned u = (unsigned)__float_as_int(v);
    if (v != v)
        return (store_t)((u >> 16) | 0x40u); /* keep NaN a (quiet) NaN, not an infinity */
    return (store_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}
#endif

/* The lanes of this thread's row group: TPR consecutive lanes of one warp. */
__device__ __forceinline__ unsigned row_lanes()
{
    unsigned lane = threadIdx.x & 31u;
    unsigned group = TPR == 32 ? 0xffffffffu : ((1u << TPR) - 1u);
    return group << (lane & ~(unsigned)(TPR - 1));
}

/* Butterfly max / sum over the TPR lanes of a row: every lane gets the same (bitwise) value. */
__device__ __forceinline__ float row_max(float v, unsigned lanes)
{
    for (int off = TPR / 2; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(lanes, v, off, TPR));
    return v;
}

__device__ __forceinline__ float row_sum(float v, unsigned lanes)
{
    for (int off = TPR / 2; off > 0; off /= 2)
        v += __shfl_xor_sync(lanes, v, off, TPR);
    return v;
}

/* Copies rows [row0, row0 + rows) of a [seq, d] slice into a shared tile, zero past `seq`.
 * transposed: tile[x * rows + r] (d x rows), else tile[r * d + x]. */
__device__ void load_tile(store_t *tile, const store_t *src, i64 row0, i64 seq, i64 stride,
                          int rows, bool transposed)
{
    for (int idx = (int)threadIdx.x; idx < rows * HEAD_DIM; idx += WG_SIZE) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        i64 row = row0 + r;
        store_t val = row < seq ? src[row * stride + x] : (store_t)0;
        tile[transposed ? x * rows + r : idx] = val;
    }
}

/* The keys [0, end) that the tile starting at row r0 visits: those its last row may attend
 * to, so causal launches skip K tiles entirely past the diagonal. */
__device__ __forceinline__ i64 keys_to_visit(const fa_kernel_params &p, i64 r0)
{
    return fa_keys_allowed(MASK, min(r0 + BLOCK_R, p.seqlen_q) - 1, p.seqlen_q, p.seqlen_k);
}

#if !MMA
/* One (Q tile, head, batch) work item of the block. */
__device__ void tile_fwd_cuda_cores(const store_t *__restrict__ q,
                                     const store_t *__restrict__ k,
                                     const store_t *__restrict__ v, store_t *__restrict__ o,
                                     float *__restrict__ lse, const fa_kernel_params &p,
                                     i64 tile, i64 h, i64 b, char *smem)
{
    float *s_tile = (float *)smem;                     /* S, then P: Br x Bc */
    store_t *q_tile = (store_t *)(s_tile + BLOCK_R * BLOCK_C); /* Q^T: d x Br */
    store_t *k_tile = q_tile + HEAD_DIM * BLOCK_R;     /* K^T: d x Bc */
    store_t *v_tile = k_tile + HEAD_DIM * BLOCK_C;     /* V:   Bc x d */

    const int r = (int)threadIdx.x / TPR, t = (int)threadIdx.x % TPR;
    const unsigned lanes = row_lanes();
    const i64 r0 = tile * BLOCK_R; /* first query row of the tile */
    const i64 hkv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    const i64 sq = p.seqlen_q, sk = p.seqlen_k, row = r0 + r;
    const store_t *kb = k + p.k_offset + b * p.k_stride_b + hkv * p.k_stride_h;
    const store_t *vb = v + p.v_offset + b * p.v_stride_b + hkv * p.v_stride_h;
    float *srow = s_tile + r * BLOCK_C;

    __syncthreads(); /* the previous work item no longer reads the tiles */
    /* Load Q tile (rows past Sq are zeros; their results are never written). */
    load_tile(q_tile, q + p.q_offset + b * p.q_stride_b + h * p.q_stride_h, r0, sq,
              p.q_stride_s, BLOCK_R, true);

    const i64 kv_end = keys_to_visit(p, r0);

    float m = NEG_INF, l = 0.0f;
    float acc[DIMS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < DIMS_PER_THREAD; i++)
        acc[i] = 0.0f;

    /* Loop over K/V tiles. */
    for (i64 k0 = 0; k0 < kv_end; k0 += BLOCK_C) {
        __syncthreads(); /* the previous tiles are no longer read */
        load_tile(k_tile, kb, k0, sk, p.k_stride_s, BLOCK_C, true);
        load_tile(v_tile, vb, k0, sk, p.v_stride_s, BLOCK_C, false);
        __syncthreads();

        /* S = Q K^T * scale (in log2 units, for exp2): keys j = t + i*TPR of row r. */
        float s[KEYS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < KEYS_PER_THREAD; i++)
            s[i] = 0.0f;
        for (int x = 0; x < HEAD_DIM; x++) {
            float qx = ld(q_tile[x * BLOCK_R + r]);
            const store_t *kr = k_tile + x * BLOCK_C + t;
#pragma unroll
            for (int i = 0; i < KEYS_PER_THREAD; i++)
                if (BLOCK_C % TPR == 0 || t + i * TPR < BLOCK_C)
                    s[i] += qx * ld(kr[i * TPR]);
        }

        /* Mask: keys past Sk and, causal, keys after the row's diagonal get -inf. */
        int kn = (int)min((i64)BLOCK_C, sk - k0); /* valid keys in this tile */
        i64 lim = fa_keys_allowed(MASK, row, sq, sk) - k0; /* this row's keys [0, lim) here */
        float mx = NEG_INF;
#pragma unroll
        for (int i = 0; i < KEYS_PER_THREAD; i++) {
            int j = t + i * TPR;
            s[i] = (j < BLOCK_C && j < lim) ? s[i] * p.scale_log2 : NEG_INF;
            mx = fmaxf(mx, s[i]);
        }

        /* m/l update (online softmax); S becomes P. A row with no allowed key so far keeps
         * m = -inf: exponents use 0 instead, so P = 0 and alpha = 0, never NaN. */
        float m_new = fmaxf(m, row_max(mx, lanes));
        float m_use = m_new == NEG_INF ? 0.0f : m_new;
        float ls = 0.0f;
#pragma unroll
        for (int i = 0; i < KEYS_PER_THREAD; i++) {
            int j = t + i * TPR;
            if (j < BLOCK_C) {
                float pj = exp2f(s[i] - m_use);
                srow[j] = pj;
                ls += pj;
            }
        }
        float alpha = exp2f(m - m_use);
        l = l * alpha + row_sum(ls, lanes);
        m = m_new;
        __syncwarp(lanes); /* the row's P values are visible to all its lanes */

        /* Rescale O, then accumulate P V (keys past kn have P = 0 and are skipped). */
#pragma unroll
        for (int i = 0; i < DIMS_PER_THREAD; i++)
            acc[i] *= alpha;
        for (int j = 0; j < kn; j++) {
            float pj = srow[j];
            const store_t *vr = v_tile + j * HEAD_DIM + t;
#pragma unroll
            for (int i = 0; i < DIMS_PER_THREAD; i++)
                if (HEAD_DIM % TPR == 0 || t + i * TPR < HEAD_DIM)
                    acc[i] += pj * ld(vr[i * TPR]);
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0 and LSE = -inf; a
     * NaN l (a NaN or +inf score) gives NaN in both. */
    if (row >= sq)
        return;
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    store_t *orow = o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h + row * p.o_stride_s;
#pragma unroll
    for (int i = 0; i < DIMS_PER_THREAD; i++)
        if (t + i * TPR < HEAD_DIM)
            orow[t + i * TPR] = st(acc[i] * inv);
    if (p.has_lse && t == 0)
        lse[(b * p.heads_q + h) * sq + row] = l == 0.0f ? NEG_INF : (m + log2f(l)) * LN2;
}
#else
/* ---- the tensor-core path: mma.sync m16n8k16, f16/bf16 in, f32 accumulate (sm_80+) ------- */
#define S_TILES (BLOCK_C / 8)  /* S accumulator tiles (16 x 8) per warp */
#define O_TILES (HEAD_DIM / 8) /* O accumulator tiles (16 x 8) per warp */

/* Two consecutive storage elements as one .b32 register (the lower index in the low half). */
__device__ __forceinline__ unsigned ld2(const store_t *s)
{
    return (unsigned)s[0] | ((unsigned)s[1] << 16);
}

__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    return (unsigned)st(lo) | ((unsigned)st(hi) << 16);
}

/* c += A B for one 16 x 8 tile, all 32 lanes of the warp together. Fragments (g = lane / 4,
 * t = lane % 4): a = rows g, g+8 x cols 2t, 2t+1 and 2t+8, 2t+9 (a[0] row g, a[1] row g+8,
 * a[2] row g cols +8, a[3] row g+8 cols +8); b = rows 2t, 2t+1 (b[0]) and 2t+8, 2t+9 (b[1]) x
 * col g; c = row g (c[0], c[1]) and g+8 (c[2], c[3]) x cols 2t, 2t+1. */
__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], const unsigned b[2])
{
#ifdef FA_EMULATED
    fa_emu_mma16816(c, a, b, DTYPE);
#elif DTYPE == 1
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* One (Q tile, head, batch) work item of the block: warp w owns rows 16w .. 16w+15 of the
 * tile; each lane holds rows g and g+8 of them (index i = 0, 1 below). */
__device__ void tile_fwd_mma(const store_t *__restrict__ q, const store_t *__restrict__ k,
                             const store_t *__restrict__ v, store_t *__restrict__ o,
                             float *__restrict__ lse, const fa_kernel_params &p, i64 tile,
                             i64 h, i64 b, char *smem)
{
    store_t *q_tile = (store_t *)smem;             /* Q: Br x d */
    store_t *k_tile = q_tile + BLOCK_R * HEAD_DIM; /* K: Bc x d */
    store_t *v_tile = k_tile + BLOCK_C * HEAD_DIM; /* V: Bc x d */

    const int lane = (int)threadIdx.x % 32, wr = (int)threadIdx.x / 32 * 16;
    const int g = lane / 4, t = lane % 4;
    const unsigned lanes = row_lanes(); /* the quad that shares rows g and g+8 */
    const i64 r0 = tile * BLOCK_R;
    const i64 hkv = h / (p.heads_q / p.heads_kv);
    const i64 sq = p.seqlen_q, sk = p.seqlen_k;
    const i64 rows[2] = {r0 + wr + g, r0 + wr + g + 8};
    const store_t *kb = k + p.k_offset + b * p.k_stride_b + hkv * p.k_stride_h;
    const store_t *vb = v + p.v_offset + b * p.v_stride_b + hkv * p.v_stride_h;

    __syncthreads(); /* the previous work item no longer reads the tiles */
    /* Load Q tile (rows past Sq are zeros; their results are never written). */
    load_tile(q_tile, q + p.q_offset + b * p.q_stride_b + h * p.q_stride_h, r0, sq,
              p.q_stride_s, BLOCK_R, false);

    const i64 kv_end = keys_to_visit(p, r0);

    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    float acc[O_TILES][4];
#pragma unroll
    for (int n = 0; n < O_TILES; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    /* Loop over K/V tiles. */
    for (i64 k0 = 0; k0 < kv_end; k0 += BLOCK_C) {
        __syncthreads(); /* the previous tiles are no longer read */
        load_tile(k_tile, kb, k0, sk, p.k_stride_s, BLOCK_C, false);
        load_tile(v_tile, vb, k0, sk, p.v_stride_s, BLOCK_C, false);
        __syncthreads();

        /* S = Q K^T: B[kk][n] = K[n][kk], so a K row gives a B column. */
        float s[S_TILES][4];
#pragma unroll
        for (int n = 0; n < S_TILES; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM; kk += 16) {
            const store_t *qa = q_tile + (wr + g) * HEAD_DIM + kk + 2 * t;
            unsigned a[4] = {ld2(qa), ld2(qa + 8 * HEAD_DIM), ld2(qa + 8),
                             ld2(qa + 8 * HEAD_DIM + 8)};
#pragma unroll
            for (int n = 0; n < S_TILES; n++) {
                const store_t *kr = k_tile + (n * 8 + g) * HEAD_DIM + kk + 2 * t;
                unsigned bf[2] = {ld2(kr), ld2(kr + 8)};
                mma16816(s[n], a, bf);
            }
        }

        /* Mask: keys past Sk and, causal, keys after the row's diagonal get -inf; scale. */
        i64 lim[2] = {fa_keys_allowed(MASK, rows[0], sq, sk) - k0,
                      fa_keys_allowed(MASK, rows[1], sq, sk) - k0};
        float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < S_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = e / 2, j = n * 8 + 2 * t + (e & 1);
                s[n][e] = j < lim[i] ? s[n][e] * p.scale_log2 : NEG_INF;
                mx[i] = fmaxf(mx[i], s[n][e]);
            }

        /* m/l update (online softmax); S becomes P. A row with no allowed key so far keeps
         * m = -inf: exponents use 0 instead, so P = 0 and alpha = 0, never NaN. */
        float m_use[2], alpha[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float m_new = fmaxf(m[i], row_max(mx[i], lanes));
            m_use[i] = m_new == NEG_INF ? 0.0f : m_new;
            alpha[i] = exp2f(m[i] - m_use[i]);
            m[i] = m_new;
        }
#pragma unroll
        for (int n = 0; n < S_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = exp2f(s[n][e] - m_use[e / 2]);
                ls[e / 2] += s[n][e];
            }
#pragma unroll
        for (int i = 0; i < 2; i++)
            l[i] = l[i] * alpha[i] + row_sum(ls[i], lanes);

        /* Rescale O, then accumulate P V: the S tiles 2c, 2c+1 are the A fragment of keys
         * 16c .. 16c+15; B[key][x] = V[key][x] (masked keys have P = 0, V rows past Sk are 0). */
#pragma unroll
        for (int n = 0; n < O_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[n][e] *= alpha[e / 2];
#pragma unroll
        for (int c = 0; c < BLOCK_C / 16; c++) {
            unsigned a[4] = {pack2(s[2 * c][0], s[2 * c][1]), pack2(s[2 * c][2], s[2 * c][3]),
                             pack2(s[2 * c + 1][0], s[2 * c + 1][1]),
                             pack2(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
            for (int n = 0; n < O_TILES; n++) {
                const store_t *vr = v_tile + (c * 16 + 2 * t) * HEAD_DIM + n * 8 + g;
                unsigned bf[2] = {(unsigned)vr[0] | ((unsigned)vr[HEAD_DIM] << 16),
                                  (unsigned)vr[8 * HEAD_DIM] | ((unsigned)vr[9 * HEAD_DIM] << 16)};
                mma16816(acc[n], a, bf);
            }
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0 and LSE = -inf; a
     * NaN l (a NaN or +inf score) gives NaN in both. */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (rows[i] >= sq)
            continue;
        float inv = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
        store_t *orow = o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h +
                        rows[i] * p.o_stride_s + 2 * t;
#pragma unroll
        for (int n = 0; n < O_TILES; n++) {
            orow[n * 8] = st(acc[n][2 * i] * inv);
            orow[n * 8 + 1] = st(acc[n][2 * i + 1] * inv);
        }
        if (p.has_lse && t == 0)
            lse[(b * p.heads_q + h) * sq + rows[i]] =
                l[i] == 0.0f ? NEG_INF : (m[i] + log2f(l[i])) * LN2;
    }
}
#endif

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_fwd(const store_t *__restrict__ q, const store_t *__restrict__ k,
          const store_t *__restrict__ v, store_t *__restrict__ o, float *__restrict__ lse,
          const fa_kernel_params p)
{
    extern __shared__ __align__(16) char smem[];
    /* Grid-stride loops: every thread of a block takes the same trips, so the barriers inside
     * the tile function are reached by all of them. */
    for (i64 b = blockIdx.z; b < p.batch; b += gridDim.z)
        for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y)
            for (i64 tile = blockIdx.x; tile < p.q_tiles; tile += gridDim.x)
#if MMA
                tile_fwd_mma(q, k, v, o, lse, p, tile, h, b, smem);
#else
                tile_fwd_cuda_cores(q, k, v, o, lse, p, tile, h, b, smem);
#endif
}
