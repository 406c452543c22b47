/*
 * convert.c - f32 <-> f16 and f32 <-> bf16 with round-to-nearest-even, exact infinities and
 * subnormals, and NaN kept NaN (quiet, sign and top payload bits preserved). Bit manipulation
 * only, so the result does not depend on the compiler's or the FPU's rounding mode.
 */
#include "internal.h"

#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Shifts right by n rounding to nearest, ties to even. n in [1, 31]. */
static uint32_t shift_rne(uint32_t v, unsigned n)
{
    uint32_t half = 1u << (n - 1);
    uint32_t rest = v & ((1u << n) - 1);
    uint32_t q = v >> n;
    if (rest > half || (rest == half && (q & 1u)))
        q++;
    return q;
}

uint16_t fa_f32_to_f16(float x)
{
    uint32_t u = bits_of(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xff) /* inf stays inf; NaN keeps its top payload bits and becomes quiet */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15; /* the f16 biased exponent */
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { /* an f16 subnormal or zero: value = m * 2^-24 */
        if (e < -10)
            return sign; /* below half the smallest subnormal: rounds to zero */
        uint32_t m = man | 0x800000u;
        return (uint16_t)(sign | shift_rne(m, (unsigned)(14 - e)));
    }
    /* A normal number; a carry out of the mantissa bumps the exponent, up to inf. */
    uint32_t r = shift_rne(((uint32_t)e << 23) | man, 13);
    return (uint16_t)(sign | r);
}

float fa_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return float_of(sign | 0x7f800000u | (man << 13));
    if (exp != 0)
        return float_of(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0)
        return float_of(sign);
    /* Subnormal: normalise the mantissa into an f32 normal. */
    int e = 113;
    while (!(man & 0x400u)) {
        man <<= 1;
        e--;
    }
    return float_of(sign | ((uint32_t)e << 23) | ((man & 0x3ffu) << 13));
}

uint16_t fa_f32_to_bf16(float x)
{
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet it, never let rounding make it inf */
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)shift_rne(u, 16);
}

float fa_bf16_to_f32(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}
