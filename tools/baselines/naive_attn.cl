/*
 * naive_attn.cl - NAIVE attention for `flashattn bench` only (not the library, not its API): the
 * textbook three-pass attention that materializes the whole Sq x Sk score matrix in global
 * memory, so the benchmark can show what FlashAttention avoids.
 *
 *   1. naive_scores   S[bh, i, j] = scale * Q[bh, i, :] . K[bkv, j, :]   (masked: -inf)
 *   2. naive_softmax  P[bh, i, :] = softmax(S[bh, i, :]), in place over S
 *   3. naive_pv       O[bh, i, x] = sum_j P[bh, i, j] * V[bkv, j, x]
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
