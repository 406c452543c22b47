/*
 * harness.h - what the backend-parameterised suites share: which backends to run (command
 * line), whether a backend that is missing is skipped or fails (FLASHATTN_REQUIRE_BACKENDS),
 * the exit code convention for ctest, and a seeded random generator.
 */
#ifndef FA_TEST_HARNESS_H
#define FA_TEST_HARNESS_H

#include "flashattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ctest's SKIP_RETURN_CODE: the process ran nothing because its backend is absent. */
#define HARNESS_EXIT_SKIPPED 77

#define HARNESS_MAX_BACKENDS 3

/*
 * Backends named on the command line (cpu, opencl, cuda), or all three when none is named.
 * Arguments starting with "--" are left for the caller. Returns the count, or -1 (with a
 * message on stderr) for an unknown name.
 */
int harness_backends_from_args(int argc, char **argv, fa_backend *out);

/* True when FLASHATTN_REQUIRE_BACKENDS (e.g. "cpu,opencl") names the backend. */
bool harness_backend_required(fa_backend backend);

typedef enum harness_decision {
    HARNESS_RUN,  /* the backend has a device: run */
    HARNESS_SKIP, /* absent and not required: skip, and say so */
    HARNESS_FAIL  /* absent but required: a failure */
} harness_decision;

/* Decides for one backend; `why` receives the reason when it is not HARNESS_RUN. */
harness_decision harness_decide(fa_backend backend, char *why, size_t why_size);

/*
 * For a suite that runs on the one backend named on its command line (`suite cpu|opencl|cuda`):
 * stores it in *out and returns -1 when the suite should run; otherwise prints why and returns
 * the exit status (2 for a bad command line, HARNESS_EXIT_SKIPPED, or 1 when required but absent).
 */
int harness_single_backend(int argc, char **argv, const char *suite, fa_backend *out);

/* Exit status for ctest: failures first, then "everything skipped" (77), else 0. */
int harness_exit_code(int failed, int ran, int skipped);

/* xorshift64*: small, fast and the same on every platform, so every backend sees one input. */
typedef struct harness_rng {
    uint64_t state;
} harness_rng;

/* Seeds from a string (a case name), so a case's inputs do not depend on table order. */
void harness_rng_seed(harness_rng *r, const char *name);
/* Uniform in [lo, hi). */
double harness_rng_uniform(harness_rng *r, double lo, double hi);

/* An environment variable saved so a test can change it and put it back. */
typedef struct harness_env {
    const char *name;
    char value[256];
    bool was_set;
} harness_env;

void harness_env_save(harness_env *e, const char *name);
void harness_env_restore(const harness_env *e);

/* Monotonic seconds, for the timing lines of the summary. */
double harness_seconds(void);

#endif /* FA_TEST_HARNESS_H */
