/*
 * naive_attn.cl - NAIVE attention for `flashattn bench` only (not the library, not its API): the
 * textbook three-pass attention that materializes the whole Sq x Sk score matrix in global
 * memory, so the benchmark can show what FlashAttention avoids.
 *
 *   1. naive_scores   S[bh, i, j] = scale * Q[bh, i, :] . K[bkv, j, :]   (masked: -inf)
 *   2. naive_softmax  P[bh, i, :] = softmax(S[bh, i, :]), in place over S
 *   3. naive_pv       O[bh, i, x] = sum_j P[bh, i, j] * V[bkv, j, x]
 *
 * and the textbook backward from that P, with dP a second f32 Sq x Sk matrix:
 *
 *   4. naive_dp       dP[bh, i, j] = dO[bh, i, :] . V[bkv, j, :]
 *   5. naive_ds       dS[bh, i, :] = P * (dP - sum_j P * dP), in place over dP
 *   6. naive_dq       dQ[bh, i, x] = scale * sum_j dS[bh, i, j] * K[bkv, j, x]
 *   7. naive_dkv      dK[bkv, j, x] = scale * sum_{h of bkv's group, i} dS[bh, i, j] * Q[bh, i, x]
 *                     dV[bkv, j, x] = sum_{h of bkv's group, i} P[bh, i, j] * dO[bh, i, x]
 *
 * (sum_j P * dP is sum_x dO * O, the softmax's own term; masked keys have P = 0, so dS = 0.)
 *
 * Tensors are contiguous BHSD. S/P is f32 [batch * heads_q, seq_q, seq_k]: 4 * B * H * Sq * Sk
 * bytes, the O(N^2) memory. One work-item per output element, no local memory, no tiling: it is
 * meant to be the plain baseline, not a tuned kernel. Indices are 64-bit (S passes 2^31 elements
 * at B * H = 8, N = 16384).
 *
 * The host passes -D DTYPE (0 f32, 1 f16, 2 bf16) and -D MASK (fa_mask: 0 none, 1 causal
 * top-left, 2 causal bottom-right); the defaults let the file compile alone.
 */
#ifndef DTYPE
#define DTYPE 0
#endif
#ifndef MASK
#define MASK 0
#endif

#if DTYPE == 0
typedef float elem_t;
#define LOAD(p, i) ((p)[i])
#else
typedef ushort elem_t; /* f16 or bf16 bits; vload_half needs no cl_khr_fp16 */
#if DTYPE == 1
#define LOAD(p, i) vload_half((i), (__global const half *)(p))
#else
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#endif
#endif

/* Stores one value in the storage type, rounding to nearest even like the library. */
void store_elem(float v, __global elem_t *p, ulong i)
{
#if DTYPE == 0
    p[i] = v;
#elif DTYPE == 1
    vstore_half_rte(v, i, (__global half *)p);
#else
    uint u = as_uint(v);
    if (isnan(v))
        p[i] = (ushort)((u >> 16) | 0x40u);
    else
        p[i] = (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
#endif
}

/* Whether key j is masked out for query row i. */
int masked(long i, long j, long seq_q, long seq_k)
{
#if MASK == 1
    return j > i;
#elif MASK == 2
    return j > i + (seq_k - seq_q);
#else
    (void)i, (void)j, (void)seq_q, (void)seq_k;
    return 0;
#endif
}

/* NDRange (seq_k, seq_q, batch * heads_q): one score per work-item. */
__kernel void naive_scores(__global const elem_t *q, __global const elem_t *k, __global float *s,
                           long seq_q, long seq_k, long dim, long heads_q, long heads_kv,
                           float scale)
{
    long j = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    long b = bh / heads_q, hkv = (bh % heads_q) / (heads_q / heads_kv);
    ulong qrow = ((ulong)bh * seq_q + i) * dim;
    ulong krow = (((ulong)b * heads_kv + hkv) * seq_k + j) * dim;
    float acc = 0.0f;
    if (masked(i, j, seq_q, seq_k)) {
        s[((ulong)bh * seq_q + i) * seq_k + j] = -INFINITY;
        return;
    }
    for (long x = 0; x < dim; x++)
        acc += LOAD(q, qrow + x) * LOAD(k, krow + x);
    s[((ulong)bh * seq_q + i) * seq_k + j] = acc * scale;
}

/* NDRange (seq_q, batch * heads_q): one row per work-item. A fully masked row becomes P = 0. */
__kernel void naive_softmax(__global float *s, long seq_q, long seq_k)
{
    __global float *row = s + ((ulong)get_global_id(1) * seq_q + get_global_id(0)) * seq_k;
    float m = -INFINITY, sum = 0.0f;
    for (long j = 0; j < seq_k; j++)
        m = fmax(m, row[j]);
    if (m == -INFINITY) {
        for (long j = 0; j < seq_k; j++)
            row[j] = 0.0f;
        return;
    }
    for (long j = 0; j < seq_k; j++) {
        float e = exp(row[j] - m);
        row[j] = e;
        sum += e;
    }
    for (long j = 0; j < seq_k; j++)
        row[j] /= sum;
}

/* NDRange (dim, seq_q, batch * heads_q): one output element per work-item. */
__kernel void naive_pv(__global const float *p, __global const elem_t *v, __global elem_t *o,
                       long seq_q, long seq_k, long dim, long heads_q, long heads_kv)
{
    long x = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    long b = bh / heads_q, hkv = (bh % heads_q) / (heads_q / heads_kv);
    __global const float *prow = p + ((ulong)bh * seq_q + i) * seq_k;
    ulong vbase = ((ulong)b * heads_kv + hkv) * seq_k * dim + x;
    float acc = 0.0f;
    for (long j = 0; j < seq_k; j++)
        acc += prow[j] * LOAD(v, vbase + (ulong)j * dim);
    store_elem(acc, o, ((ulong)bh * seq_q + i) * dim + x);
}

/* Backward 1. NDRange (seq_k, seq_q, batch * heads_q): one dP entry per work-item. */
__kernel void naive_dp(__global const elem_t *d_o, __global const elem_t *v, __global float *dp,
                       long seq_q, long seq_k, long dim, long heads_q, long heads_kv)
{
    long j = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    long b = bh / heads_q, hkv = (bh % heads_q) / (heads_q / heads_kv);
    ulong grow = ((ulong)bh * seq_q + i) * dim;
    ulong vrow = (((ulong)b * heads_kv + hkv) * seq_k + j) * dim;
    float acc = 0.0f;
    for (long x = 0; x < dim; x++)
        acc += LOAD(d_o, grow + x) * LOAD(v, vrow + x);
    dp[((ulong)bh * seq_q + i) * seq_k + j] = acc;
}

/* Backward 2. NDRange (seq_q, batch * heads_q): one row per work-item, dS over dP in place. */
__kernel void naive_ds(__global const float *p, __global float *dp, long seq_q, long seq_k)
{
    ulong row = ((ulong)get_global_id(1) * seq_q + get_global_id(0)) * seq_k;
    float dsum = 0.0f;
    for (long j = 0; j < seq_k; j++)
        dsum += p[row + j] * dp[row + j];
    for (long j = 0; j < seq_k; j++)
        dp[row + j] = p[row + j] * (dp[row + j] - dsum);
}

/* Backward 3. NDRange (dim, seq_q, batch * heads_q): one dQ element per work-item. */
__kernel void naive_dq(__global const float *ds, __global const elem_t *k, __global elem_t *dq,
                       long seq_q, long seq_k, long dim, long heads_q, long heads_kv, float scale)
{
    long x = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    long b = bh / heads_q, hkv = (bh % heads_q) / (heads_q / heads_kv);
    __global const float *dsrow = ds + ((ulong)bh * seq_q + i) * seq_k;
    ulong kbase = ((ulong)b * heads_kv + hkv) * seq_k * dim + x;
    float acc = 0.0f;
    for (long j = 0; j < seq_k; j++)
        acc += dsrow[j] * LOAD(k, kbase + (ulong)j * dim);
    store_elem(acc * scale, dq, ((ulong)bh * seq_q + i) * dim + x);
}

/* Backward 4. NDRange (dim, seq_k, batch * heads_kv): one dK and one dV element per work-item,
 * summed over the query heads of the K/V head's group in order (no atomics). */
__kernel void naive_dkv(__global const float *p, __global const float *ds,
                        __global const elem_t *q, __global const elem_t *d_o,
                        __global elem_t *dk, __global elem_t *dv, long seq_q, long seq_k,
                        long dim, long heads_q, long heads_kv, float scale)
{
    long x = get_global_id(0), j = get_global_id(1), bkv = get_global_id(2);
    long group = heads_q / heads_kv, b = bkv / heads_kv, hkv = bkv % heads_kv;
    float acc_k = 0.0f, acc_v = 0.0f;
    for (long h = hkv * group; h < (hkv + 1) * group; h++) {
        ulong bh = (ulong)b * heads_q + h;
        for (long i = 0; i < seq_q; i++) {
            ulong s = (bh * seq_q + i) * seq_k + j, r = (bh * seq_q + i) * dim + x;
            acc_k += ds[s] * LOAD(q, r);
            acc_v += p[s] * LOAD(d_o, r);
        }
    }
    store_elem(acc_k * scale, dk, ((ulong)bkv * seq_k + j) * dim + x);
    store_elem(acc_v, dv, ((ulong)bkv * seq_k + j) * dim + x);
}
