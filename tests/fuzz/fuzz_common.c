/*
 * fuzz_common.c - the byte reader and the failure report shared by the fuzz harnesses (fuzz.h).
 */
#include "fuzz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    fputs("fuzz: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

uint8_t fz_byte(fz_reader *r, uint8_t dflt)
{
    if (r->n == 0)
        return dflt;
    r->n--;
    return *r->p++;
}

/* Two's complement reinterpretation without the implementation-defined cast of values past
 * INT64_MAX. */
static int64_t u64_to_i64(uint64_t u)
{
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

int64_t fz_i64(fz_reader *r, int64_t dflt)
{
    uint64_t u = 0;
    uint8_t b;
    if (r->n == 0)
        return dflt;
    switch (fz_byte(r, 0) % 5) {
    case 1:
        return fz_byte(r, 0);
    case 2:
        b = fz_byte(r, 0);
        /* 2^k + adj with k < 64 and adj in -1..2, wrapping like the hardware would */
        return u64_to_i64(((uint64_t)1 << (b & 63)) + (uint64_t)(b >> 6) - 1u);
    case 3:
        return -1 - (int64_t)fz_byte(r, 0);
    case 4:
        for (int i = 0; i < 8; i++)
            u |= (uint64_t)fz_byte(r, 0) << (8 * i);
        return u64_to_i64(u);
    default:
        return dflt;
    }
}
