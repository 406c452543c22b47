/*
 * fuzz.h - what the fuzz harnesses (tests/fuzz/) share: the libFuzzer entry point every harness
 * defines, a reader that turns fuzz bytes into values, and the failure report.
 *
 * A harness is built twice: with clang's libFuzzer (FLASHATTN_FUZZ=ON), which supplies main()
 * and mutates inputs, and with the normal compiler and replay.c's main(), which replays the
 * files of tests/fuzz/corpus/<name>/ as ctest cases. So a harness uses nothing libFuzzer-only.
 */
#ifndef FLASHATTN_TESTS_FUZZ_H
#define FLASHATTN_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FZ_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define FZ_NORETURN __attribute__((noreturn))
#else
#define FZ_PRINTF(fmt, args)
#define FZ_NORETURN
#endif

/* Runs one input; returns 0 (libFuzzer's convention; a property violation aborts instead). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * A violated property: prints "fuzz: MESSAGE" to stderr and aborts, so that libFuzzer saves the
 * input as a crash and the replay driver fails its ctest case.
 */
FZ_NORETURN void fz_fail(const char *fmt, ...) FZ_PRINTF(1, 2);

/* Checks a property; the message says which one and with what values. */
#define FZ_CHECK(cond, ...)                                                                     \
    do {                                                                                        \
        if (!(cond))                                                                            \
            fz_fail(__VA_ARGS__);                                                               \
    } while (0)

/*
 * Consumes fuzz bytes front to back. Past the end every read yields its default, so a short
 * input is a valid one: the empty input is the all-defaults case.
 */
typedef struct fz_reader {
    const uint8_t *p;
    size_t n;
} fz_reader;

/* The next byte, or dflt at the end. */
uint8_t fz_byte(fz_reader *r, uint8_t dflt);

/*
 * A tagged 64-bit integer, shaped so that mutations reach the interesting values quickly.
 * Tag byte % 5: 0 dflt; 1 a small value 0..255; 2 a power of two 2^k plus -1, 0, 1 or 2 (so
 * 1 << 60, INT64_MAX and INT64_MIN are one byte away); 3 a small negative value -1..-256;
 * 4 eight raw bytes, little-endian.
 */
int64_t fz_i64(fz_reader *r, int64_t dflt);

#endif /* FLASHATTN_TESTS_FUZZ_H */
