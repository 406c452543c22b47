/*
 * test_invalid_context.c - the invalid-argument suite's checks before any problem (run by
 * test_invalid): fa_context_create with bad backends, devices and environment variables, the
 * name parsers and status names (cpu process only), and on every backend's process device
 * indices out of range (DEVICE_NOT_FOUND, props untouched) and the AUTO pick's note.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "test_invalid.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- backend-independent: contexts, environment, names (cpu process only) -------------- */

/* Saves FLASHATTN_BACKEND and FLASHATTN_DEVICE (what AUTO reads) and unsets them. */
static void env_clear(harness_env saved[2])
{
    harness_env_save(&saved[0], "FLASHATTN_BACKEND");
    harness_env_save(&saved[1], "FLASHATTN_DEVICE");
    unsetenv("FLASHATTN_BACKEND");
    unsetenv("FLASHATTN_DEVICE");
}

static void env_restore(const harness_env saved[2])
{
    harness_env_restore(&saved[0]);
    harness_env_restore(&saved[1]);
}

/* fa_context_create: the status, *out NULL, and a reason in `why`. */
static void expect_create(fa_backend backend, int device, fa_status want, const char *keyword,
                          int line)
{
    fa_context *ctx = (fa_context *)&ctx; /* not NULL: the call must set it */
    fa_context_options opts = {backend, device};
    char why[512] = "";
    fa_status st = fa_context_create(&ctx, &opts, why, sizeof why);
    if (st != want)
        fail_msg("line %d: fa_context_create(%d, %d) returned %s, want %s (%s)", line,
                 (int)backend, device, fa_status_name(st), fa_status_name(want), why);
    if (want == OK) {
        assert_non_null(ctx);
        fa_context_destroy(ctx);
        return;
    }
    assert_null(ctx);
    if (why[0] == '\0' || (keyword && !strstr(why, keyword)))
        fail_msg("line %d: reason \"%s\" does not name \"%s\"", line, why,
                 keyword ? keyword : "anything");
}

void test_context_create(void **state)
{
    (void)state;
    harness_env saved[2];
    env_clear(saved);
    assert_int_equal(fa_context_create(NULL, NULL, NULL, 0), FA_STATUS_NULL_POINTER);
    expect_create((fa_backend)99, 0, FA_STATUS_INVALID_ARGUMENT, NULL, __LINE__);
    expect_create((fa_backend)-1, 0, FA_STATUS_INVALID_ARGUMENT, NULL, __LINE__);
    expect_create(FA_BACKEND_CPU, 1000, FA_STATUS_DEVICE_NOT_FOUND, NULL, __LINE__);
    /* The environment is read for AUTO only. */
    setenv("FLASHATTN_BACKEND", "bogus", 1);
    expect_create(FA_BACKEND_AUTO, 0, FA_STATUS_INVALID_ARGUMENT, "FLASHATTN_BACKEND", __LINE__);
    expect_create(FA_BACKEND_CPU, 0, OK, NULL, __LINE__);
    setenv("FLASHATTN_BACKEND", "CPU", 1);
    setenv("FLASHATTN_DEVICE", "abc", 1);
    expect_create(FA_BACKEND_AUTO, 0, FA_STATUS_INVALID_ARGUMENT, "FLASHATTN_DEVICE", __LINE__);
    setenv("FLASHATTN_DEVICE", "1000", 1);
    expect_create(FA_BACKEND_AUTO, 0, FA_STATUS_DEVICE_NOT_FOUND, NULL, __LINE__);
    setenv("FLASHATTN_DEVICE", "0", 1);
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, NULL, NULL, 0), OK);
    assert_int_equal(fa_context_backend(ctx), FA_BACKEND_CPU);
    assert_int_equal(fa_context_device(ctx), 0);
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_BACKEND");
    unsetenv("FLASHATTN_DEVICE");
    /* AUTO picks some backend, once, and says which. */
    assert_int_equal(fa_context_create(&ctx, NULL, NULL, 0), OK);
    assert_true(fa_context_backend(ctx) != FA_BACKEND_AUTO);
    fa_context_destroy(ctx);
    /* An explicit backend without a device never falls back to another. */
    const fa_backend accel[2] = {FA_BACKEND_OPENCL, FA_BACKEND_CUDA};
    for (int i = 0; i < 2; i++) {
        int count = 0;
        fa_status st = fa_backend_device_count(accel[i], &count, NULL, 0);
        if (st != OK)
            expect_create(accel[i], 0, st, NULL, __LINE__);
    }
    int count = -1;
    assert_int_equal(fa_backend_device_count(FA_BACKEND_AUTO, &count, NULL, 0),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(count, 0);
    assert_int_equal(fa_backend_device_count((fa_backend)99, &count, NULL, 0),
                     FA_STATUS_INVALID_ARGUMENT);
    fa_device_props props;
    assert_int_equal(fa_backend_device_props(FA_BACKEND_CPU, 1000, &props, NULL, 0),
                     FA_STATUS_DEVICE_NOT_FOUND);
    assert_int_equal(fa_backend_device_props(FA_BACKEND_CPU, -1, &props, NULL, 0),
                     FA_STATUS_DEVICE_NOT_FOUND);
    env_restore(saved);
}

void test_names(void **state)
{
    (void)state;
    fa_backend b = FA_BACKEND_CPU;
    fa_dtype d = FA_DTYPE_F32;
    fa_mask m = FA_MASK_NONE;
    const char *bad[] = {"bogus", "", "cpux", " cpu", "f64", "causal"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(fa_backend_from_name(bad[i], &b), FA_STATUS_INVALID_ARGUMENT);
        assert_int_equal(fa_dtype_from_name(bad[i], &d), FA_STATUS_INVALID_ARGUMENT);
        assert_int_equal(fa_mask_from_name(bad[i], &m), FA_STATUS_INVALID_ARGUMENT);
    }
    /* Rejected names leave the output alone. */
    assert_int_equal(b, FA_BACKEND_CPU);
    assert_int_equal(d, FA_DTYPE_F32);
    assert_int_equal(m, FA_MASK_NONE);
    assert_int_equal(fa_backend_from_name(NULL, &b), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_backend_from_name("cpu", NULL), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_backend_from_name("OpenCL", &b), OK);
    assert_int_equal(b, FA_BACKEND_OPENCL);
    assert_int_equal(fa_dtype_from_name("BF16", &d), OK);
    assert_int_equal(d, FA_DTYPE_BF16);
    assert_int_equal(fa_mask_from_name("bottom-right", &m), OK);
    assert_int_equal(m, FA_MASK_CAUSAL_BOTTOM_RIGHT);
    assert_null(fa_backend_name((fa_backend)99));
    assert_null(fa_dtype_name((fa_dtype)3));
    assert_null(fa_mask_name((fa_mask)-1));
    assert_int_equal(fa_dtype_size((fa_dtype)3), 0);
    assert_string_equal(fa_status_name((fa_status)999), "FA_STATUS_UNKNOWN");
    /* Every status has its own name and a message. */
    for (int i = 0; i < FA_STATUS_COUNT_; i++) {
        assert_non_null(strstr(fa_status_name((fa_status)i), "FA_STATUS_"));
        assert_true(fa_status_message((fa_status)i)[0] != '\0');
        for (int j = 0; j < i; j++)
            assert_string_not_equal(fa_status_name((fa_status)i), fa_status_name((fa_status)j));
    }
}

/* ---- device indices and the AUTO note (every backend's process) ------------------------- */

/*
 * A device index below 0 or at or past the count: DEVICE_NOT_FOUND from fa_backend_device_props
 * (never a device error from querying a device that does not exist) with the props untouched,
 * and from fa_context_create for the upper end (a negative device is a bad option there).
 */
void test_device_indices(void **state)
{
    (void)state;
    if (iv_decision == HARNESS_FAIL)
        fail_msg("%s", iv_skip_reason);
    if (iv_decision == HARNESS_SKIP)
        skip();
    int count = 0;
    char why[512];
    assert_int_equal(fa_backend_device_count(iv_backend, &count, why, sizeof why), OK);
    const int bad[] = {-1, INT_MIN, count, INT_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa_device_props props, before;
        memset(&props, OUT_PATTERN, sizeof props);
        before = props;
        why[0] = '\0';
        fa_status st = fa_backend_device_props(iv_backend, bad[i], &props, why, sizeof why);
        if (st != FA_STATUS_DEVICE_NOT_FOUND)
            fail_msg("device_props(%s, %d) returned %s (%s)", fa_backend_name(iv_backend),
                     bad[i], fa_status_name(st), why);
        assert_true(why[0] != '\0');
        assert_memory_equal(&props, &before, sizeof props);
    }
    for (size_t i = 2; i < sizeof bad / sizeof bad[0]; i++)
        expect_create(iv_backend, bad[i], FA_STATUS_DEVICE_NOT_FOUND, NULL, __LINE__);
    expect_create(iv_backend, -1, FA_STATUS_INVALID_ARGUMENT, "negative", __LINE__);
}

/* fa_context_backend_note: empty for an explicit backend, and for AUTO every backend passed over
 * with its reason, then the one picked. */
void test_backend_note(void **state)
{
    (void)state;
    harness_env saved[2];
    env_clear(saved);
    assert_string_equal(fa_context_backend_note(NULL), "");
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    assert_string_equal(fa_context_backend_note(ctx), "");
    fa_context_destroy(ctx);

    assert_int_equal(fa_context_create(&ctx, NULL, NULL, 0), OK);
    const char *note = fa_context_backend_note(ctx);
    char want[160];
    snprintf(want, sizeof want, "picked %s", fa_backend_name(fa_context_backend(ctx)));
    assert_true(strncmp(note, "auto: ", 6) == 0);
    assert_non_null(strstr(note, want));
    /* Each faster backend that was not picked is named, with the status it gave. */
    const fa_backend order[] = {FA_BACKEND_CUDA, FA_BACKEND_OPENCL};
    for (size_t i = 0; i < 2 && order[i] != fa_context_backend(ctx); i++) {
        int n = 0;
        fa_status st = fa_backend_device_count(order[i], &n, NULL, 0);
        snprintf(want, sizeof want, "%s skipped (%s: ", fa_backend_name(order[i]),
                 fa_status_name(st));
        if (!strstr(note, want))
            fail_msg("note \"%s\" does not say \"%s\"", note, want);
    }
    fa_context_destroy(ctx);

    setenv("FLASHATTN_BACKEND", "cpu", 1);
    assert_int_equal(fa_context_create(&ctx, NULL, NULL, 0), OK);
    assert_string_equal(fa_context_backend_note(ctx), "auto: FLASHATTN_BACKEND = cpu");
    fa_context_destroy(ctx);
    env_restore(saved);
}
