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
#define KEYS_PER_VEC 8
#elif BLOCK_C % 4 == 0
#define KEYS_PER_VEC 4
#elif BLOCK_C % 2 == 0
#define KEYS_PER_VEC 2
#else
#define KEYS_PER_VEC 1
#endif
#if HEAD_DIM % 8 == 0
#define DIMS_PER_VEC 8
#elif HEAD_DIM % 4 == 0
#define DIMS_PER_VEC 4
#elif HEAD_DIM % 2 == 0
#define DIMS_PER_VEC 2
#else
#define DIMS_PER_VEC 1
#endif
#define VECS_PER_S_ROW (BLOCK_C / KEYS_PER_VEC)  /* vectors per S row */
#define VECS_PER_O_ROW (HEAD_DIM / DIMS_PER_VEC) /* vectors per O row */

/* ---- storage type: raw copies global -> local, f32 conversion on loads from local ---------- */
#if DTYPE == 0
typedef float store_t;
#define LOAD_ONE_F32(p) (*(p))
#define LOAD_N_F32(n, p) CAT(vload, n)(0, p)
#elif DTYPE == 1
typedef ushort store_t; /* half bits; vload_half needs no cl_khr_fp16 */
#define LOAD_ONE_F32(p) vload_half(0, (__local const half *)(p))
#define LOAD_N_F32(n, p) CAT(vload_half, n)(0, (__local const half *)(p))
#else
typedef ushort store_t; /* bf16 bits: the upper half of a binary32 */
#define LOAD_ONE_F32(p) as_float((uint)(*(p)) << 16)
#define LOAD_N_F32(n, p) CAT(as_float, n)(CAT(convert_uint, n)(CAT(vload, n)(0, p)) << 16)
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

/* float_keys: KEYS_PER_VEC keys of one S row; float_dims: DIMS_PER_VEC elements of one O row. */
#if KEYS_PER_VEC == 1
typedef float float_keys;
#define LOAD_KEYS_F32(p) LOAD_ONE_F32(p)
#define S_LOAD_KEYS(p) (*(p))
#define S_STORE_KEYS(v, p) (*(p) = (v))
#else
typedef CAT(float, KEYS_PER_VEC) float_keys;
#define LOAD_KEYS_F32(p) LOAD_N_F32(KEYS_PER_VEC, p)
#define S_LOAD_KEYS(p) CAT(vload, KEYS_PER_VEC)(0, p)
#define S_STORE_KEYS(v, p) CAT(vstore, KEYS_PER_VEC)(v, 0, p)
#endif
#if DIMS_PER_VEC == 1
typedef float float_dims;
#define LOAD_DIMS_F32(p) LOAD_ONE_F32(p)
#define STORE_DIMS_PRIVATE(v, p) (*(p) = (v))
#else
typedef CAT(float, DIMS_PER_VEC) float_dims;
#define LOAD_DIMS_F32(p) LOAD_N_F32(DIMS_PER_VEC, p)
#define STORE_DIMS_PRIVATE(v, p) CAT(vstore, DIMS_PER_VEC)(v, 0, p)
#endif

float hmax_keys(float_keys v)
{
#if KEYS_PER_VEC == 8
    float4 a = fmax(v.lo, v.hi);
    float2 b = fmax(a.lo, a.hi);
    return fmax(b.lo, b.hi);
#elif KEYS_PER_VEC == 4
    float2 b = fmax(v.lo, v.hi);
    return fmax(b.lo, b.hi);
#elif KEYS_PER_VEC == 2
    return fmax(v.lo, v.hi);
#else
    return v;
#endif
}

float hsum_keys(float_keys v)
{
#if KEYS_PER_VEC == 8
    float4 a = v.lo + v.hi;
    float2 b = a.lo + a.hi;
    return b.lo + b.hi;
#elif KEYS_PER_VEC == 4
    float2 b = v.lo + v.hi;
    return b.lo + b.hi;
#elif KEYS_PER_VEC == 2
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

/* One S row, in log2 units: S[r][c] = sum_x Q[r][x] * K[c][x] * scale * log2(e) for the Bc keys
 * c of the tile, reading qt = Q^T[x][r] (column r of the d x Br tile, stride Br) and
 * kt = K^T[x][c] (d x Bc, stride Bc). Four vectors of keys at a time, so each Q element loaded
 * feeds four multiply-adds. */
void scores(__local float *srow, __local const store_t *qt, __local const store_t *kt,
            float scale_log2)
{
    int jb = 0;
    for (; jb + 4 <= VECS_PER_S_ROW; jb += 4) {
        float_keys a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        __local const store_t *kc = kt + jb * KEYS_PER_VEC;
#pragma unroll 4
        for (int x = 0; x < HEAD_DIM; x++) {
            float qx = LOAD_ONE_F32(qt + x * BLOCK_R);
            __local const store_t *kr = kc + x * BLOCK_C;
            a0 += qx * LOAD_KEYS_F32(kr);
            a1 += qx * LOAD_KEYS_F32(kr + KEYS_PER_VEC);
            a2 += qx * LOAD_KEYS_F32(kr + 2 * KEYS_PER_VEC);
            a3 += qx * LOAD_KEYS_F32(kr + 3 * KEYS_PER_VEC);
        }
        S_STORE_KEYS(a0 * scale_log2, srow + jb * KEYS_PER_VEC);
        S_STORE_KEYS(a1 * scale_log2, srow + (jb + 1) * KEYS_PER_VEC);
        S_STORE_KEYS(a2 * scale_log2, srow + (jb + 2) * KEYS_PER_VEC);
        S_STORE_KEYS(a3 * scale_log2, srow + (jb + 3) * KEYS_PER_VEC);
    }
    for (; jb < VECS_PER_S_ROW; jb++) {
        float_keys a0 = 0.0f;
        for (int x = 0; x < HEAD_DIM; x++)
            a0 += LOAD_ONE_F32(qt + x * BLOCK_R) *
                  LOAD_KEYS_F32(kt + x * BLOCK_C + jb * KEYS_PER_VEC);
        S_STORE_KEYS(a0 * scale_log2, srow + jb * KEYS_PER_VEC);
    }
}

/* Online softmax over one S row: returns the new running max (log2 units) and replaces the
 * row by P = exp2(S - m_new); *alpha = exp2(m_old - m_new) rescales the earlier O and l.
 * A row with no allowed key so far keeps m = -inf: exponents use 0 instead, so P = 0 and
 * alpha = 0, never NaN (the FlashAttention rescale rule). fmax skips a NaN score, whose
 * exp2 then makes l NaN, as does a +inf max (exp2(inf - inf)). */
float softmax_update(__local float *srow, float m_old, float *l, float *alpha)
{
    float_keys mv = -INFINITY;
    for (int jb = 0; jb < VECS_PER_S_ROW; jb++)
        mv = fmax(mv, S_LOAD_KEYS(srow + jb * KEYS_PER_VEC));
    float m_new = fmax(m_old, hmax_keys(mv));
    float m_use = m_new == -INFINITY ? 0.0f : m_new;
    float_keys ls = 0.0f;
    for (int jb = 0; jb < VECS_PER_S_ROW; jb++) {
        float_keys p = exp2(S_LOAD_KEYS(srow + jb * KEYS_PER_VEC) - m_use);
        S_STORE_KEYS(p, srow + jb * KEYS_PER_VEC);
        ls += p;
    }
    *alpha = exp2(m_old - m_use);
    *l = *l * *alpha + hsum_keys(ls);
    return m_new;
}

/* The keys [0, end) that the tile starting at row r0 visits: those its last row may attend
 * to, so causal launches skip K tiles entirely past the diagonal. */
long keys_to_visit(const fa_kernel_params *p, long r0)
{
    return fa_keys_allowed(MASK, min(r0 + BLOCK_R, p->seqlen_q) - 1, p->seqlen_q, p->seqlen_k);
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
    const long row_keys = fa_keys_allowed(MASK, row, sq, sk);  /* this row's keys: [0, row_keys) */
    const long tile_keys = fa_keys_allowed(MASK, r0, sq, sk); /* the fewest of any row here */

    float m = -INFINITY, l = 0.0f;
    float_dims acc[VECS_PER_O_ROW];
    for (int xb = 0; xb < VECS_PER_O_ROW; xb++)
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
        bool edge = tile_keys < k0 + BLOCK_C;
        long lim = row_keys - k0; /* this row's keys [0, lim) of the tile are allowed */
        if (edge) {
            for (int j = (int)max(lim, 0L); j < BLOCK_C; j++)
                srow[j] = -INFINITY;
        }

        /* m/l update (online softmax); S becomes P. */
        float alpha;
        m = softmax_update(srow, m, &l, &alpha);

        /* Rescale O, then accumulate P V (keys past kn have P = 0 and are skipped). */
        for (int xb = 0; xb < VECS_PER_O_ROW; xb++)
            acc[xb] *= alpha;
        for (int j = 0; j < kn; j++) {
            float pj = srow[j];
            __local const store_t *vr = v_tile + j * HEAD_DIM;
#pragma unroll
            for (int xb = 0; xb < VECS_PER_O_ROW; xb++)
                acc[xb] += pj * LOAD_DIMS_F32(vr + xb * DIMS_PER_VEC);
        }
    }

    /* Final 1/l and LSE: a row with no allowed key (l == 0) gives O = 0 and LSE = -inf; a
     * NaN l (a NaN or +inf score) gives NaN in both. */
    if (row >= sq)
        return;
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    __global store_t *orow = o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h +
                             row * p.o_stride_s;
    for (int xb = 0; xb < VECS_PER_O_ROW; xb++) {
        float tmp[DIMS_PER_VEC];
        STORE_DIMS_PRIVATE(acc[xb] * inv, tmp);
        for (int e = 0; e < DIMS_PER_VEC; e++)
            store_out(tmp[e], orow + xb * DIMS_PER_VEC + e);
    }
    if (p.has_lse)
        lse[(b * p.heads_q + h) * sq + row] = l == 0.0f ? -INFINITY : (m + log2(l)) * LN2;
}
