/*
 * harness.c - backend selection, skip-or-fail policy and small utilities for the suites that
 * run once per backend (test_forward, test_invalid). A backend that is not built in or has no
 * device is skipped and reported, unless CI demands it through FLASHATTN_REQUIRE_BACKENDS.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */

#include "harness.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int harness_backends_from_args(int argc, char **argv, fa_backend *out)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0)
            continue;
        fa_backend b;
        if (fa_backend_from_name(argv[i], &b) != FA_STATUS_OK || b == FA_BACKEND_AUTO) {
            fprintf(stderr, "unknown backend \"%s\" (cpu, opencl, cuda)\n", argv[i]);
            return -1;
        }
        if (n < HARNESS_MAX_BACKENDS)
            out[n++] = b;
    }
    for (int i = 0; n == 0 && i < fa_backend_count() && i < HARNESS_MAX_BACKENDS; i++)
        out[i] = fa_backend_at(i);
    if (n == 0)
        n = fa_backend_count() < HARNESS_MAX_BACKENDS ? fa_backend_count() : HARNESS_MAX_BACKENDS;
    return n;
}

bool harness_backend_required(fa_backend backend)
{
    const char *list = getenv("FLASHATTN_REQUIRE_BACKENDS");
    const char *want = fa_backend_name(backend);
    if (!list || !want)
        return false;
    /* Comma-separated, case-insensitive, spaces around names ignored. */
    for (const char *p = list; *p;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && isspace((unsigned char)end[-1]))
            end--;
        size_t len = (size_t)(end - start);
        if (len == strlen(want)) {
            size_t i = 0;
            while (i < len && tolower((unsigned char)start[i]) == want[i])
                i++;
            if (i == len)
                return true;
        }
    }
    return false;
}

harness_decision harness_decide(fa_backend backend, char *why, size_t why_size)
{
    int count = 0;
    char reason[512] = "";
    fa_status st = fa_backend_device_count(backend, &count, reason, sizeof reason);
    if (st == FA_STATUS_OK && count > 0) {
        if (why_size)
            why[0] = '\0';
        return HARNESS_RUN;
    }
    bool required = harness_backend_required(backend);
    snprintf(why, why_size, "%s backend %s (%s: %s)%s", fa_backend_name(backend),
             required ? "is REQUIRED but unavailable" : "unavailable, skipped", fa_status_name(st),
             reason[0] ? reason : "no device", required ? " [FLASHATTN_REQUIRE_BACKENDS]" : "");
    return required ? HARNESS_FAIL : HARNESS_SKIP;
}

int harness_exit_code(int failed, int ran, int skipped)
{
    if (failed > 0)
        return 1;
    if (ran == 0 && skipped > 0)
        return HARNESS_EXIT_SKIPPED;
    return 0;
}

void harness_rng_seed(harness_rng *r, const char *name)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    r->state = h ? h : 1;
}

double harness_rng_uniform(harness_rng *r, double lo, double hi)
{
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    uint64_t x = r->state * 2685821657736338717ull;
    return lo + (hi - lo) * ((double)(x >> 11) * (1.0 / 9007199254740992.0));
}

double harness_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void harness_env_save(harness_env *e, const char *name)
{
    const char *v = getenv(name);
    e->name = name;
    e->was_set = v != NULL;
    snprintf(e->value, sizeof e->value, "%s", v ? v : "");
}

void harness_env_restore(const harness_env *e)
{
    if (e->was_set)
        setenv(e->name, e->value, 1);
    else
        unsetenv(e->name);
}

int harness_single_backend(int argc, char **argv, const char *suite, fa_backend *out)
{
    fa_backend backends[HARNESS_MAX_BACKENDS];
    if (harness_backends_from_args(argc, argv, backends) != 1) {
        fprintf(stderr, "usage: %s cpu|opencl|cuda\n", suite);
        return 2;
    }
    *out = backends[0];
    char why[600] = "";
    harness_decision d = harness_decide(*out, why, sizeof why);
    if (d == HARNESS_RUN)
        return -1;
    printf("%s: %s\n", d == HARNESS_SKIP ? "SKIPPED" : "FAILED (required)", why);
    return d == HARNESS_SKIP ? HARNESS_EXIT_SKIPPED : 1;
}
