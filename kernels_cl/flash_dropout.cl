/*
 * flash_dropout.cl - dropout's keep factors by Philox (kernel_params.h's rule), many groups of
 * four keys per call, in key order.
 */
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
#define AS_UINT_LANES as_uint16
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
#define AS_UINT_LANES as_uint8
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
#if GPU || !defined(__ENDIAN_LITTLE__)
#define PHILOX_MULHILO_LANES(m, x, hi, lo)                                                      \
    do {                                                                                        \
        ulong_lanes p_ = CONVERT_ULONG_LANES(x) * (ulong)(m);                                   \
        hi = CONVERT_UINT_LANES(p_ >> 32);                                                      \
        lo = CONVERT_UINT_LANES(p_);                                                            \
    } while (0)
#else
/* CPUs: the lanes taken as pairs in 64-bit words (lane 2i the low half of word i), each half
 * multiplied in place (x86's vpmuludq reads a word's low 32 bits) and the products' halves
 * put back by shifts and masks, where widening every lane to 64 bits and narrowing back, as
 * above, took twice the instructions. dropout_row was a quarter of the forward's samples at
 * p = 0.1 (perf, pocl, B1 H8 N2048 d64 f32); this cut its samples by 22%. The same words. */
#define PHILOX_MULHILO_LANES(m, x, hi, lo)                                                      \
    do {                                                                                        \
        const ulong_pairs x_ = AS_PAIRS(x), low_ = (ulong_pairs)0xffffffffUL;                   \
        const ulong_pairs even_ = (x_ & low_) * (ulong)(m), odd_ = (x_ >> 32) * (ulong)(m);     \
        lo = AS_UINT_LANES((even_ & low_) | (odd_ << 32));                                      \
        hi = AS_UINT_LANES((even_ >> 32) | (odd_ & ~low_));                                     \
    } while (0)
#endif

/* P's vectors of DROPOUT_LANES keys scaled in place: on CPUs stored as one unaligned vector
 * move, as S_STORE_KEYS (pocl's vstore16 wrote 128-bit pieces that the next 512-bit loads of
 * P waited on). */
#if GPU
#define STORE_LANES(val, m, p) VSTORE_LANES(val, m, p)
#else
typedef float float_lanes_unaligned __attribute__((ext_vector_type(DROPOUT_LANES), aligned(4)));
#define STORE_LANES(val, m, p)                                                                  \
    (*(__local float_lanes_unaligned *)((p) + (m) * DROPOUT_LANES) = (val))
#endif

#if !GPU && defined(__ENDIAN_LITTLE__)
/* Philox's rounds 3 to 10 (FA_PHILOX_ROUND; rk0, rk1: round 2's keys) on CPUs, each word kept
 * through the rounds as two halves of 64-bit words: even (lane 2i in word i's low bits) and
 * odd (lane 2i + 1 shifted down to them). A word's 64-bit product with M is then at once its
 * lo (low bits) and its hi (>> 32), and the high bits left over by the XORs are never read:
 * the multiplies (x86's vpmuludq) read the low 32 bits only, and the halves are joined once,
 * not every round as PHILOX_MULHILO_LANES's pairs are: dropout_row's samples fell by another
 * 31% (perf, as above). The same words. */
#define PHILOX_HALF_ROUND(e0, e1, e2, e3, rk0, rk1)                                             \
    do {                                                                                        \
        const ulong_pairs p0_ = (e0 & low) * (ulong)FA_PHILOX_M0;                               \
        const ulong_pairs p1_ = (e2 & low) * (ulong)FA_PHILOX_M1;                               \
        e0 = (p1_ >> 32) ^ e1 ^ (ulong)(rk0);                                                   \
        e1 = p1_;                                                                               \
        e2 = (p0_ >> 32) ^ e3 ^ (ulong)(rk1);                                                   \
        e3 = p0_;                                                                               \
    } while (0)
void philox_rounds_split(uint_lanes *w0, uint_lanes *w1, uint_lanes *w2, uint_lanes *w3,
                         uint rk0, uint rk1)
{
    const ulong_pairs low = (ulong_pairs)0xffffffffUL;
    ulong_pairs e0 = AS_PAIRS(*w0), e1 = AS_PAIRS(*w1), e2 = AS_PAIRS(*w2), e3 = AS_PAIRS(*w3);
    ulong_pairs o0 = e0 >> 32, o1 = e1 >> 32, o2 = e2 >> 32, o3 = e3 >> 32;
    for (int round = 2; round < 10; round++) {
        rk0 += FA_PHILOX_W0;
        rk1 += FA_PHILOX_W1;
        PHILOX_HALF_ROUND(e0, e1, e2, e3, rk0, rk1);
        PHILOX_HALF_ROUND(o0, o1, o2, o3, rk0, rk1);
    }
    *w0 = AS_UINT_LANES((e0 & low) | (o0 << 32));
    *w1 = AS_UINT_LANES((e1 & low) | (o1 << 32));
    *w2 = AS_UINT_LANES((e2 & low) | (o2 << 32));
    *w3 = AS_UINT_LANES((e3 & low) | (o3 << 32));
}
#endif

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
        r1_c0 ^= (uint)(fa_q_position(p) + row) ^ key0; /* the row's position */
        FA_MULHILO_U32(FA_PHILOX_M0, r1_c0, r2_hi0, r2_lo0);
        for (int g0 = 0; g0 < LANE_KEYS / 4; g0 += DROPOUT_LANES) { /* keys k0 + 4 g0 .. */
            uint_lanes w0 = (uint_lanes)((uint)(((fa_k_position(p) + k0) >> 2) + g0)) + PHILOX_LANE;
            uint_lanes w1, w2, w3;
            /* round 1: it leaves words 0 and 1 at (r1_c0, r1_c1) in every lane */
            PHILOX_MULHILO_LANES(FA_PHILOX_M0, w0, w2, w3);
            w2 ^= p->dropout_offset ^ key1;
            /* round 2: its M0 * word 0 is the row's (r2_hi0, r2_lo0) */
            uint rk0 = key0 + FA_PHILOX_W0, rk1 = key1 + FA_PHILOX_W1;
            PHILOX_MULHILO_LANES(FA_PHILOX_M1, w2, w0, w1);
            w0 ^= r1_c1 ^ rk0;
            w2 = r2_hi0 ^ w3 ^ rk1;
            w3 = (uint_lanes)r2_lo0;
#if GPU || !defined(__ENDIAN_LITTLE__)
            for (int round = 2; round < 10; round++) {
                rk0 += FA_PHILOX_W0;
                rk1 += FA_PHILOX_W1;
                FA_PHILOX_ROUND(uint_lanes, PHILOX_MULHILO_LANES, w0, w1, w2, w3, rk0, rk1);
            }
#else
            philox_rounds_split(&w0, &w1, &w2, &w3, rk0, rk1);
#endif
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
                    STORE_LANES(VLOAD_LANES(m, keys) * AS_LANES(zip_pairs(z01, z23, upper)), m,
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
