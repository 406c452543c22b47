/*
 * test_invalid.h - what the two files of the invalid-argument suite share (test_invalid.c: the
 * problems, strides, buffers and calls; test_invalid_context.c: contexts, names, device
 * indices): the backend under test, whether it runs, and the tests main() lists.
 * Include after <cmocka.h> and "harness.h".
 */
#ifndef FA_TEST_INVALID_H
#define FA_TEST_INVALID_H

#include "flashattn.h"

#define OK FA_STATUS_OK
#define OUT_PATTERN 0xA5 /* bytes O and LSE hold before a call that must not write them */

extern fa_backend iv_backend;          /* the backend of this process */
extern char iv_skip_reason[600];       /* why it is skipped or fails, from harness_decide */
extern harness_decision iv_decision;   /* run, skip or fail its tests */

/* test_invalid_context.c: every backend's process. */
void test_device_indices(void **state);
void test_backend_note(void **state);
/* test_invalid_context.c: the cpu process only. */
void test_context_create(void **state);
void test_names(void **state);

#endif /* FA_TEST_INVALID_H */
