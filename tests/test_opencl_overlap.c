/*
 * test_opencl_overlap.c - outputs overlapping inputs through two handles of one OpenCL memory:
 * fa_run compares where the bytes live (a cl_mem and its sub-buffers, buffers over one host
 * array with CL_MEM_USE_HOST_PTR), not the fa_buffer handles, so O placed over Q's last element
 * through a second wrap is INVALID_ARGUMENT with O untouched, and O just past Q runs.
 */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <CL/cl.h>

#include "flashattn.h"
#include "flashattn_opencl.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK

#include "cl_app.h"

/* The application's OpenCL objects and a library context made around them. */
typedef struct interop {
    app cl;
    fa_context *ctx;
} interop;

static void interop_open(interop *a)
{
    app_open(&a->cl);
    char why[256];
    assert_int_equal(fa_context_create_opencl(&a->ctx, a->cl.context, a->cl.device,
                                              a->cl.queue, why, sizeof why),
                     OK);
}

static void interop_close(interop *a)
{
    fa_context_destroy(a->ctx);
    app_close(&a->cl);
}

/* Bytes of one tensor: Q and O of [1, 2, 16, 16] f32, a multiple of any base alignment. */
#define TENSOR_BYTES (1 * 2 * 16 * 16 * 4)

/* Q from offset 0 of `qm`, O from o_at of `om` (which may be the same memory), K and V of
 * their own; the forward's status (a refusal names the overlap), and whether O's bytes kept
 * their 0xA5 pattern. */
static fa_status forward_at(interop *a, cl_mem qm, cl_mem om, size_t o_at, bool *o_untouched)
{
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 16, 16, 16), OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(a->ctx, &p, &plan), OK);
    fa_buffer *q = NULL, *o = NULL, *k = NULL, *v = NULL;
    assert_int_equal(fa_buffer_wrap_opencl(a->ctx, qm, 0, TENSOR_BYTES, &q), OK);
    assert_int_equal(fa_buffer_wrap_opencl(a->ctx, om, o_at, TENSOR_BYTES, &o), OK);
    assert_int_equal(fa_buffer_create(a->ctx, TENSOR_BYTES, &k), OK);
    assert_int_equal(fa_buffer_create(a->ctx, TENSOR_BYTES, &v), OK);
    unsigned char pattern[TENSOR_BYTES], now[TENSOR_BYTES];
    memset(pattern, 0xA5, sizeof pattern);
    assert_int_equal(fa_buffer_write(o, 0, pattern, sizeof pattern), OK);
    fa_tensors t = {.q = q, .k = k, .v = v, .o = o};
    fa_status st = fa_run(a->ctx, plan, &t);
    if (st != OK)
        assert_non_null(strstr(fa_context_last_error(a->ctx), "overlaps"));
    assert_int_equal(fa_buffer_read(o, 0, now, sizeof now), OK);
    *o_untouched = memcmp(now, pattern, sizeof now) == 0;
    fa_buffer *all[4] = {q, o, k, v};
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(all[i]);
    fa_plan_destroy(plan);
    return st;
}

static size_t base_align(cl_device_id device)
{
    cl_uint bits = 0;
    assert_int_equal(clGetDeviceInfo(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits,
                                      NULL),
                     CL_SUCCESS);
    return bits / 8 > 4 ? bits / 8 : 4;
}

/* One cl_mem wrapped twice: O one alignment step inside Q is refused; O after Q runs. */
static void test_one_cl_mem_twice(void **state)
{
    (void)state;
    interop a;
    interop_open(&a);
    size_t align = base_align(a.cl.device), step = align < TENSOR_BYTES ? align : TENSOR_BYTES;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(a.cl.context, CL_MEM_READ_WRITE, 2 * TENSOR_BYTES, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    bool untouched = false;
    fa_status st = forward_at(&a, m, m, TENSOR_BYTES - step, &untouched);
    assert_int_equal(st, FA_STATUS_INVALID_ARGUMENT);
    assert_true(untouched);
    assert_int_equal(forward_at(&a, m, m, TENSOR_BYTES, &untouched), OK);
    assert_false(untouched);
    clReleaseMemObject(m);
    interop_close(&a);
}

/* Two cl_mem over one host array (CL_MEM_USE_HOST_PTR): the same bytes, two objects. */
static void test_two_cl_mem_one_host_array(void **state)
{
    (void)state;
    interop a;
    interop_open(&a);
    size_t align = base_align(a.cl.device);
    void *host = NULL;
    assert_int_equal(posix_memalign(&host, align > 4096 ? align : 4096, 2 * TENSOR_BYTES), 0);
    memset(host, 0, 2 * TENSOR_BYTES);
    cl_int err = CL_SUCCESS;
    cl_mem qm = clCreateBuffer(a.cl.context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, TENSOR_BYTES,
                               host, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem om = clCreateBuffer(a.cl.context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                               2 * TENSOR_BYTES, host, &err);
    assert_int_equal(err, CL_SUCCESS);
    bool untouched = false;
    assert_int_equal(forward_at(&a, qm, om, 0, &untouched), FA_STATUS_INVALID_ARGUMENT);
    assert_true(untouched);
    assert_int_equal(forward_at(&a, qm, om, TENSOR_BYTES, &untouched), OK);
    clReleaseMemObject(qm);
    clReleaseMemObject(om);
    interop_close(&a);
    free(host);
}

int main(void)
{
    fa_backend backend = FA_BACKEND_OPENCL;
    char why[256] = "";
    harness_decision d = harness_decide(backend, why, sizeof why);
    if (d != HARNESS_RUN) {
        printf("test_opencl_overlap: %s\n", why);
        return d == HARNESS_FAIL ? 1 : HARNESS_EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_cl_mem_twice),
        cmocka_unit_test(test_two_cl_mem_one_host_array),
    };
    return cmocka_run_group_tests_name("opencl overlap", tests, NULL, NULL);
}
