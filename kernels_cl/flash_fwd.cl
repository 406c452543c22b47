/*
 * flash_fwd.cl - the FlashAttention forward kernel (OpenCL C 1.2): O = softmax(Q K^T * scale) V
 * with the online softmax of FlashAttention's Algorithm 1, never materializing Sq x Sk scores.
 *
 * One work-group per (Q tile, head, batch): NDRange (q_tiles * BLOCK_R, heads_q, batch), one
 * work-item per query row. The Q, K and V tiles live in __local memory in the storage type, the
 * S tile as Br x Bc floats; O accumulates in f32 in private memory.
 *
 * Vectorization is explicit (floatN along keys for S, along head_dim for O) rather than left to
 * a work-group vectorizer: pocl keeps one work-item's loop scalar across items when it holds
 * inner loops, and GPUs simply split the vectors. K is stored transposed (d x Bc) so a row's
 * scores are contiguous vector loads; Q is stored transposed (d x Br) so work-items read
 * distinct banks on GPUs.
 *
 * Every tunable has a default so the file compiles alone (with -I src for kernel_params.h); the
 * host passes the planned values with -D. The library prepends kernel_params.h to this text.
 */
#ifndef FA_KERNEL_PARAMS_H
#include "kernel_params.h"
#endif

#ifndef HEAD_DIM
#define HEAD_DIM 64 /* d: elements per row of Q, K, V, O */
#endif
#ifndef BLOCK_R
#define BLOCK_R 64 /* Br: query rows per work-group (one work-item each) */
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

/* The host passes the struct by value; C and OpenCL C must agree on its size (C99 check). */
typedef char fa_kernel_params_size_check[sizeof(fa_kernel_params) == 192 ? 1 : -1];

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define LN2 0.69314718055994530942f

/* Widest of 8, 4, 2, 1 that divides n: the vector width of loops over n elements. */
#if BLOCK_C % 8 == 0
#define VJ 8
#elif BLOCK_C % 4 == 0
#define VJ 4
#elif BLOCK_C % 2 == 0
#define VJ 2
#else
#define VJ 1
#endif
#if HEAD_DIM % 8 == 0
#define VD 8
#elif HEAD_DIM % 4 == 0
#define VD 4
#elif HEAD_DIM % 2 == 0
#define VD 2
#else
#define VD 1
#endif
#define NJB (BLOCK_C / VJ)  /* vectors per S row */
#define NDB (HEAD_DIM / VD) /* vectors per O row */

/* ---- storage type: raw copies global -> local, f32 conversion on loads from local ---------- */
#if DTYPE == 0
typedef float store_t;
#define LD1(p) (*(p))
#define LDN(n, p) CAT(vload, n)(0, p)
#elif DTYPE == 1
typedef ushort store_t; /* half bits; vload_half needs no cl_khr_fp16 */
#define LD1(p) vload_half(0, (__local const half *)(p))
#define LDN(n, p) CAT(vload_half, n)(0, (__local const half *)(p))
#else
typedef ushort store_t; /* bf16 bits: the upper half of a binary32 */
#define LD1(p) as_float((uint)(*(p)) << 16)
#define LDN(n, p) CAT(as_float, n)(CAT(convert_uint, n)(CAT(vload, n)(0, p)) << 16)
#endif

/* Stores one f32 value to global O in the storage type, rounding to nearest even. */
void store_out(float v, __global store_t *p)
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

/* floatj: VJ keys of one S row; floatd: VD elements of one O row. */
#if VJ == 1
typedef float floatj;
#define LOADJ(p) LD1(p)
#define SLOADJ(p) (*(p))
#define SSTOREJ(v, p) (*(p) = (v))
#else
typedef CAT(float, VJ) floatj;
#define LOADJ(p) LDN(VJ, p)
#define SLOADJ(p) CAT(vload, VJ)(0, p)
#define SSTOREJ(v, p) CAT(vstore, VJ)(v, 0, p)
#endif
#if VD == 1
typedef float floatd;
#define LOADD(p) LD1(p)
#define PSTORED(v, p) (*(p) = (v))
#else
typedef CAT(float, VD) floatd;
#define LOADD(p) LDN(VD, p)
#define PSTORED(v, p) CAT(vstore, VD)(v, 0, p)
#endif

float hmax_j(floatj v)
{
#if VJ == 8
    float4 a = fmax(v.lo, v.hi);
    float2 b = fmax(a.lo, a.hi);
    return fmax(b.lo, b.hi);
#elif VJ == 4
    float2 b = fmax(v.lo, v.hi);
    return fmax(b.lo, b.hi);
#elif VJ == 2
    return fmax(v.lo, v.hi);
#else
    return v;
#endif
}

float hsum_j(floatj v)
{
#if VJ == 8
    float4 a = v.lo + v.hi;
    float2 b = a.lo + a.hi;
    return b.lo + b.hi;
#elif VJ == 4
    float2 b = v.lo + v.hi;
    return b.lo + b.hi;
#elif VJ == 2
    return v.lo + v.hi;
#else
    return v;
#endif
}

/* Copies rows [row0, row0 + rows) of a [seq, d] slice into a local tile, zero past `seq`.
 * transposed: tile[x * rows + r] (d x rows), else tile[r * d + x]. */
void load_tile(__local store_t *tile, __global const store_t *src, long row0, long seq,
               long stride, int rows, int transposed)
{
    for (int idx = (int)get_local_id(0); idx < rows * HEAD_DIM; idx += WG_SIZE) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        long row = row0 + r;
        store_t val = row < seq ? src[row * stride + x] : (store_t)0;
        tile[transposed ? x * rows + r : idx] = val;
    }
}

/* S row = (q K^T) * scale * log2(e), four vectors of keys at a time so each q element loaded
 * feeds four multiply-adds. */
void scores(__local float *srow, __local const store_t *qt, __local const store_t *kt,
            float scale_log2)
{
    int jb = 0;
    for (; jb + 4 <= NJB; jb += 4) {
        floatj a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        __local const store_t *kc = kt + jb * VJ;
#pragma unroll 4
        for (int x = 0; x < HEAD_DIM; x++) {
            float qx = LD1(qt + x * BLOCK_R);
            __local const store_t *kr = kc + x * BLOCK_C;
            a0 += qx * LOADJ(kr);
            a1 += qx * LOADJ(kr + VJ);
            a2 += qx * LOADJ(kr + 2 * VJ);
            a3 += qx * LOADJ(kr + 3 * VJ);
        }
        SSTOREJ(a0 * scale_log2, srow + jb * VJ);
        SSTOREJ(a1 * scale_log2, srow + (jb + 1) * VJ);
        SSTOREJ(a2 * scale_log2, srow + (jb + 2) * VJ);
        SSTOREJ(a3 * scale_log2, srow + (jb + 3) * VJ);
    }
    for (; jb < NJB; jb++) {
        floatj a0 = 0.0f;
        for (int x = 0; x < HEAD_DIM; x++)
            a0 += LD1(qt + x * BLOCK_R) * LOADJ(kt + x * BLOCK_C + jb * VJ);
        SSTOREJ(a0 * scale_log2, srow + jb * VJ);
    }
}

/* Online softmax over one S row: returns the new running max (log2 units) and replaces the
 * row by P = exp2(S - m_new); *alpha = exp2(m_old - m_new) rescales the earlier O and l.
 * A row with no allowed key so far keeps m = -inf: exponents use 0 instead, so P = 0 and
 * alpha = 0, never NaN (the FlashAttention rescale rule). fmax skips a NaN score, whose
 * exp2 then makes l NaN, as does a +inf max (exp2(inf - inf)). */
float softmax_update(__local float *srow, float m_old, float *l, float *alpha)
{
    floatj mv = -INFINITY;
    for (int jb = 0; jb < NJB; jb++)
        mv = fmax(mv, SLOADJ(srow + jb * VJ));
    float m_new = fmax(m_old, hmax_j(mv));
    float m_use = m_new == -INFINITY ? 0.0f : m_new;
    floatj ls = 0.0f;
    for (int jb = 0; jb < NJB; jb++) {
        floatj p = exp2(SLOADJ(srow + jb * VJ) - m_use);
        SSTOREJ(p, srow + jb * VJ);
        ls += p;
    }
    *alpha = exp2(m_old - m_use);
    *l = *l * *alpha + hsum_j(ls);
    return m_new;
}

/* Causal: key j is allowed for row i when j <= i + diag (diag = Sk - Sq bottom-right, 0
 * top-left), so K tiles entirely past the tile's last row are skipped: the keys [0, end) to
 * visit for the tile starting at row r0. */
long keys_to_visit(const fa_kernel_params *p, long r0)
{
#if MASK != 0
    const long diag = MASK == 2 ? p->seqlen_k - p->seqlen_q : 0;
    return clamp(min(r0 + BLOCK_R, p->seqlen_q) + diag, 0L, p->seqlen_k);
#else
    (void)r0;
    return p->seqlen_k;
#endif
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_fwd(__global const store_t *q, __global const store_t *k, __global const store_t *v,
          __global store_t *o, __global float *lse, const fa_kernel_params p)
{
    __local store_t q_tile[HEAD_DIM * BLOCK_R]; /* Q^T: d x Br */
    __local store_t k_tile[HEAD_DIM * BLOCK_C]; /* K^T: d x Bc */
    __local store_t v_tile[BLOCK_C * HEAD_DIM]; /* V:   Bc x d */
    __local float s_tile[BLOCK_R * BLOCK_C];    /* S, then P: Br x Bc */

    const int lid = (int)get_local_id(0);
    const long r0 = (long)get_group_id(0) * BLOCK_R; /* first query row of the tile */
    const long h = (long)get_group_id(1), b = (long)get_group_id(2);
    const long hkv = h / (p.heads_q / p.heads_kv); /* GQA: query heads share a K/V head */
    const long sq = p.seqlen_q, sk = p.seqlen_k, row = r0 + lid;
    __global const store_t *kb = k + p.k_offset + b * p.k_stride_b + hkv * p.k_stride_h;
    __global const store_t *vb = v + p.v_offset + b * p.v_stride_b + hkv * p.v_stride_h;
    __local float *srow = s_tile + lid * BLOCK_C;

    /* Load Q tile (rows past Sq are zeros; their results are never written). */
    load_tile(q_tile, q + p.q_offset + b * p.q_stride_b + h * p.q_stride_h, r0, sq,
              p.q_stride_s, BLOCK_R, 1);

    const long kv_end = keys_to_visit(&p, r0);
#if MASK != 0
    const long diag = MASK == 2 ? sk - sq : 0;
#endif

    float m = -INFINITY, l = 0.0f;
    floatd acc[NDB];
    for (int xb = 0; xb < NDB; xb++)
        acc[xb] = 0.0f;

    /* Loop over K/V tiles. */
    for (long k0 = 0; k0 < kv_end; k0 += BLOCK_C) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous tiles are no longer read */
        load_tile(k_tile, kb, k0, sk, p.k_stride_s, BLOCK_C, 1);
        load_tile(v_tile, vb, k0, sk, p.v_stride_s, BLOCK_C, 0);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* S = Q K^T * scale (in log2 units, for exp2). */
        scores(srow, q_tile + lid, k_tile, p.scale_log2);

        /* Mask: keys past Sk and, causal, keys after the row's diagonal get -inf. Only tiles
         * at the sequence end or crossing the diagonal need it (uniform per work-group). */
        int kn = (int)min((long)BLOCK_C, sk - k0); /* valid keys in this tile */
        bool edge = kn < BLOCK_C;
        long lim = sk - k0; /* this row's keys [0, lim) of the tile are allowed */
#if MASK != 0
        edge = edge || k0 + BLOCK_C - 1 > r0 + diag;
        lim = min(lim, row + diag - k0 + 1);
#endif
        if (edge) {
            for (int j = (int)max(lim, 0L); j < BLOCK_C; j++)
                srow[j] = -INFINITY;
        }

        /* m/l update (online softmax); S becomes P. */
        float alpha;
        m = softmax_update(srow, m, &l, &alpha);

        /* Rescale O, then accumulate P V (keys past kn have P = 0 and are skipped). */
        for (int xb = 0; xb < NDB; xb++)
            acc[xb] *= alpha;
        for (int j = 0; j < kn; j++) {
            float pj = srow[j];
            __local const store_t *vr = v_tile + j * HEAD_DIM;
#pragma unroll
            for (int xb = 0; xb < NDB; xb++)
                acc[xb] += pj * LOADD(vr + xb * VD);
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0 and LSE = -inf; a
     * NaN l (a NaN or +inf score) gives NaN in both. */
    if (row >= sq)
        return;
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    __global store_t *orow = o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h +
                             row * p.o_stride_s;
    for (int xb = 0; xb < NDB; xb++) {
        float tmp[VD];
        PSTORED(acc[xb] * inv, tmp);
        for (int e = 0; e < VD; e++)
            store_out(tmp[e], orow + xb * VD + e);
    }
    if (p.has_lse)
        lse[(b * p.heads_q + h) * sq + row] = l == 0.0f ? -INFINITY : (m + log2(l)) * LN2;
}
