/*
 * test_convert.c - the f16 and bf16 conversions, exhaustively where that is cheap: every 16-bit
 * pattern round-trips, and f32 -> f16 / bf16 rounding is compared with an independent reference
 * written here with double arithmetic (frexp / ldexp / nearbyint) rather than bit tricks, at
 * every halfway point between adjacent 16-bit values, just beside each, and over a stride of
 * all 2^32 float patterns. The oracle and the forward suite rely on these conversions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Mismatch lines printed per test before the rest are only counted. */
#define MAX_REPORTS 10

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

/* ---- the independent reference ---------------------------------------------------------- */

/*
 * Rounds |x| (finite, > 0) to a binary format with `digits` significand bits (implicit one
 * included) whose smallest normal exponent is emin, ties to even. Division by a power of two
 * is exact in double for every float, so nearbyint sees the exact quotient.
 */
static double ref_round(double a, int digits, int emin)
{
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int exp = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, exp - (digits - 1));
    return nearbyint(a / quantum) * quantum; /* default rounding: to nearest, ties to even */
}

/* f32 -> f16 for a non-NaN input. */
static uint16_t ref_f32_to_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000u : 0u;
    double a = fabs((double)f);
    if (isinf(a))
        return sign | 0x7c00u;
    if (a == 0.0)
        return sign;
    double r = ref_round(a, 11, -14);
    if (r >= 65536.0) /* only 65536 itself: one past the largest finite, 65504 */
        return sign | 0x7c00u;
    if (r < ldexp(1.0, -14)) /* subnormal: r = n * 2^-24 */
        return (uint16_t)(sign | (uint16_t)ldexp(r, 24));
    int e;
    double m = frexp(r, &e); /* r = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(m * 2048.0 - 1024.0));
}

/* The value of an f16 pattern that is not NaN, decoded without the library. */
static double ref_f16_value(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    if (exp == 0x1f)
        return sign * INFINITY;
    if (exp == 0)
        return sign * ldexp(man, -24);
    return sign * ldexp(1024 + man, exp - 25);
}

/* f32 -> bf16 for a non-NaN input. */
static uint16_t ref_f32_to_bf16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000u : 0u;
    double a = fabs((double)f);
    if (isinf(a))
        return sign | 0x7f80u;
    if (a == 0.0)
        return sign;
    double r = ref_round(a, 8, -126);
    if (r >= ldexp(1.0, 128))
        return sign | 0x7f80u;
    return (uint16_t)(sign | (bits_of((float)r) >> 16)); /* r is a bf16 value: exact in f32 */
}

/* ---- helpers ---------------------------------------------------------------------------- */

static bool f16_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

static bool bf16_is_nan(uint16_t h)
{
    return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

typedef struct tally {
    long checked, bad;
} tally;

static void expect16(tally *t, const char *what, float in, uint16_t got, uint16_t want)
{
    t->checked++;
    if (got == want)
        return;
    if (t->bad++ < MAX_REPORTS)
        print_error("%s(%.9g = 0x%08x) = 0x%04x, want 0x%04x\n", what, (double)in,
                    (unsigned)bits_of(in), (unsigned)got, (unsigned)want);
}

/* A NaN result must be NaN with the input's sign, and quiet when the input was quiet. */
static void expect_nan16(tally *t, const char *what, float in, uint16_t got, bool is_nan,
                         uint16_t quiet_bit)
{
    uint32_t u = bits_of(in);
    bool sign_ok = ((got & 0x8000u) != 0) == ((u & 0x80000000u) != 0);
    bool quiet_ok = !(u & 0x400000u) || (got & quiet_bit);
    t->checked++;
    if (is_nan && sign_ok && quiet_ok)
        return;
    if (t->bad++ < MAX_REPORTS)
        print_error("%s(NaN 0x%08x) = 0x%04x: %s\n", what, (unsigned)u, (unsigned)got,
                    !is_nan ? "not NaN" : !sign_ok ? "sign lost" : "quiet bit lost");
}

static void check_f16(tally *t, float x)
{
    uint16_t got = fa_f32_to_f16(x);
    if (isnan(x))
        expect_nan16(t, "fa_f32_to_f16", x, got, f16_is_nan(got), 0x200u);
    else
        expect16(t, "fa_f32_to_f16", x, got, ref_f32_to_f16(x));
}

static void check_bf16(tally *t, float x)
{
    uint16_t got = fa_f32_to_bf16(x);
    if (isnan(x))
        expect_nan16(t, "fa_f32_to_bf16", x, got, bf16_is_nan(got), 0x40u);
    else
        expect16(t, "fa_f32_to_bf16", x, got, ref_f32_to_bf16(x));
}

/* x, and the floats just below and above it, both signs. */
static void check_around(tally *t, void (*check)(tally *, float), float x)
{
    const float near[3] = {x, nextafterf(x, 0.0f), nextafterf(x, INFINITY)};
    for (int i = 0; i < 3; i++) {
        check(t, near[i]);
        check(t, -near[i]);
    }
}

static void finish(const char *what, const tally *t)
{
    print_message("  %s: %ld values checked, %ld wrong\n", what, t->checked, t->bad);
    assert_int_equal(t->bad, 0);
}

/* ---- f16 -------------------------------------------------------------------------------- */

/* Every f16 pattern: decodes to its exact value, and converts back to itself (NaN stays NaN). */
static void test_f16_roundtrip_all(void **state)
{
    (void)state;
    tally t = {0, 0};
    for (uint32_t i = 0; i <= 0xffffu; i++) {
        uint16_t h = (uint16_t)i;
        float f = fa_f16_to_f32(h);
        if (f16_is_nan(h)) {
            bool quiet_kept = !(h & 0x200u) || (bits_of(f) & 0x400000u);
            bool ok = isnan(f) && (signbit(f) != 0) == ((h & 0x8000u) != 0) && quiet_kept;
            t.checked++;
            if (!ok && t.bad++ < MAX_REPORTS)
                print_error("fa_f16_to_f32(0x%04x) = 0x%08x: not the same NaN\n", (unsigned)h,
                            (unsigned)bits_of(f));
            expect_nan16(&t, "fa_f32_to_f16", f, fa_f32_to_f16(f),
                         f16_is_nan(fa_f32_to_f16(f)), 0x200u);
            continue;
        }
        double want = ref_f16_value(h);
        t.checked++;
        if (((double)f != want || !signbit(f) != !signbit(want)) && t.bad++ < MAX_REPORTS)
            print_error("fa_f16_to_f32(0x%04x) = %.9g, want %.9g\n", (unsigned)h, (double)f,
                        want);
        expect16(&t, "fa_f32_to_f16", f, fa_f32_to_f16(f), h);
    }
    finish("f16 round trip", &t);
}

/* Halfway points between adjacent f16 values (exact in f32), and the floats beside them. */
static void test_f16_halfway(void **state)
{
    (void)state;
    tally t = {0, 0};
    for (uint16_t h = 0; h < 0x7c00u; h++) {
        double lo = ref_f16_value(h);
        double hi = h == 0x7bffu ? 65536.0 : ref_f16_value((uint16_t)(h + 1));
        check_around(&t, check_f16, (float)lo);
        check_around(&t, check_f16, (float)((lo + hi) / 2)); /* 12 bits: exact in f32 */
    }
    finish("f16 halfway points", &t);
}

/* The edges the design names, as literal expectations. */
static void test_f16_edges(void **state)
{
    (void)state;
    assert_int_equal(fa_f32_to_f16(65520.0f), 0x7c00);      /* tie, rounds to even: inf */
    assert_int_equal(fa_f32_to_f16(65519.99f), 0x7bff);     /* 65504 */
    assert_int_equal(fa_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(fa_f32_to_f16(FLT_MAX), 0x7c00);
    assert_int_equal(fa_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(fa_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(fa_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(fa_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(fa_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);        /* tie to even: down */
    assert_int_equal(fa_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);    /* tie to even: up */
    assert_int_equal(fa_f32_to_f16(0x1p-24f), 0x0001);               /* smallest subnormal */
    assert_int_equal(fa_f32_to_f16(0x1p-25f), 0x0000);               /* tie with 0: even */
    assert_int_equal(fa_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(fa_f32_to_f16(3 * 0x1p-25f), 0x0002);           /* tie: to even 2 */
    assert_int_equal(fa_f32_to_f16(-0x1p-26f), 0x8000);              /* underflow keeps sign */
    assert_int_equal(fa_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);    /* rounds up to normal */
    assert_int_equal(fa_f32_to_f16(1e-40f), 0x0000);                 /* f32 subnormal */
    assert_true(f16_is_nan(fa_f32_to_f16(float_of(0x7f800001u)))); /* payload only in low bits */
    assert_true(f16_is_nan(fa_f32_to_f16(float_of(0xffc00000u))));
    assert_int_equal(fa_f32_to_f16(float_of(0xffc00000u)) & 0x8000, 0x8000);
    assert_true(fa_f16_to_f32(0x7c00) == INFINITY);
    assert_true(fa_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(signbit(fa_f16_to_f32(0x8000)));
}

/* ---- bf16 ------------------------------------------------------------------------------- */

static void test_bf16_roundtrip_all(void **state)
{
    (void)state;
    tally t = {0, 0};
    for (uint32_t i = 0; i <= 0xffffu; i++) {
        uint16_t h = (uint16_t)i;
        float f = fa_bf16_to_f32(h);
        t.checked++;
        /* bf16 is the upper half of binary32: widening is exact for every pattern, NaN too. */
        if (bits_of(f) != (uint32_t)h << 16 && t.bad++ < MAX_REPORTS)
            print_error("fa_bf16_to_f32(0x%04x) = 0x%08x\n", (unsigned)h, (unsigned)bits_of(f));
        if (bf16_is_nan(h))
            expect_nan16(&t, "fa_f32_to_bf16", f, fa_f32_to_bf16(f),
                         bf16_is_nan(fa_f32_to_bf16(f)), 0x40u);
        else
            expect16(&t, "fa_f32_to_bf16", f, fa_f32_to_bf16(f), h);
    }
    finish("bf16 round trip", &t);
}

/* Adjacent bf16 values differ by one in their patterns; the f32 in between is + 0x8000. */
static void test_bf16_halfway(void **state)
{
    (void)state;
    tally t = {0, 0};
    for (uint32_t h = 0; h < 0x7f80u; h++) {
        check_around(&t, check_bf16, float_of(h << 16));
        check_around(&t, check_bf16, float_of((h << 16) + 0x8000u));
    }
    finish("bf16 halfway points", &t);
}

static void test_bf16_edges(void **state)
{
    (void)state;
    assert_int_equal(fa_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(fa_f32_to_bf16(float_of(0x3f808000u)), 0x3f80); /* tie to even: down */
    assert_int_equal(fa_f32_to_bf16(float_of(0x3f818000u)), 0x3f82); /* tie to even: up */
    assert_int_equal(fa_f32_to_bf16(float_of(0x3f808001u)), 0x3f81);
    assert_int_equal(fa_f32_to_bf16(FLT_MAX), 0x7f80);             /* rounds up to inf */
    assert_int_equal(fa_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(fa_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(fa_f32_to_bf16(float_of(0x00008000u)), 0x0000); /* subnormal tie: even */
    assert_int_equal(fa_f32_to_bf16(float_of(0x00018000u)), 0x0002);
    /* NaN whose low bits would round it into inf, or carry into the sign, stays NaN. */
    const uint32_t nans[] = {0x7f800001u, 0x7f808000u, 0x7f80ffffu, 0x7fffffffu, 0xffffffffu,
                             0xff800001u, 0x7fc00000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = fa_f32_to_bf16(float_of(nans[i]));
        assert_true(bf16_is_nan(h));
        assert_int_equal(h & 0x8000u, (nans[i] >> 16) & 0x8000u);
    }
}

/* ---- a stride over all floats ----------------------------------------------------------- */

/* Every 4099th float pattern (a prime stride, so every exponent and many mantissas are hit). */
static void test_float_sweep(void **state)
{
    (void)state;
    tally t16 = {0, 0}, tb16 = {0, 0};
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) {
        float x = float_of((uint32_t)u);
        check_f16(&t16, x);
        check_bf16(&tb16, x);
    }
    finish("f32 -> f16 sweep", &t16);
    finish("f32 -> bf16 sweep", &tb16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_all), cmocka_unit_test(test_f16_halfway),
        cmocka_unit_test(test_f16_edges),         cmocka_unit_test(test_bf16_roundtrip_all),
        cmocka_unit_test(test_bf16_halfway),      cmocka_unit_test(test_bf16_edges),
        cmocka_unit_test(test_float_sweep),
    };
    return cmocka_run_group_tests_name("convert", tests, NULL, NULL);
}
