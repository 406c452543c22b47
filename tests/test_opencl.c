/*
 * test_opencl.c - OpenCL-specific tests: interop (a context around the caller's cl_context and
 * queue, fa_buffers around the caller's cl_mem, with reference counts balanced), the wrap
 * checks (alignment, size, foreign context), the kernel-folder override and the full build log
 * on a failed build. The shared forward/invalid suites cover the numerics; here the forward runs
 * once through wrapped sub-buffers against the fp64 oracle.
 *
 *   test_opencl        (exit 77 when there is no OpenCL device and CI does not require one)
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn_opencl.h"
#include "harness.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK FA_STATUS_OK

/* The caller's side: what an application that already uses OpenCL holds. */
typedef struct app {
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
} app;

/* OpenCL device 0 of the library's flattened list: the first platform that has a device. */
static void app_open(app *a)
{
    cl_platform_id platforms[16];
    cl_uint np = 0;
    assert_int_equal(clGetPlatformIDs(16, platforms, &np), CL_SUCCESS);
    a->device = NULL;
    for (cl_uint i = 0; i < np && i < 16 && !a->device; i++) {
        if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 1, &a->device, NULL) != CL_SUCCESS)
            a->device = NULL;
    }
    assert_non_null(a->device);
    cl_int err = CL_SUCCESS;
    a->context = clCreateContext(NULL, 1, &a->device, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    a->queue = clCreateCommandQueue(a->context, a->device, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
}

static void app_close(app *a)
{
    clReleaseCommandQueue(a->queue);
    clReleaseContext(a->context);
}

static cl_uint mem_refs(cl_mem m)
{
    cl_uint n = 0;
    assert_int_equal(clGetMemObjectInfo(m, CL_MEM_REFERENCE_COUNT, sizeof n, &n, NULL),
                     CL_SUCCESS);
    return n;
}

static cl_uint queue_refs(cl_command_queue q)
{
    cl_uint n = 0;
    assert_int_equal(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL),
                     CL_SUCCESS);
    return n;
}

static size_t base_align_bytes(cl_device_id d)
{
    cl_uint bits = 0;
    assert_int_equal(clGetDeviceInfo(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL),
                     CL_SUCCESS);
    return bits / 8 > 0 ? bits / 8 : 1;
}

/* ---- devices ------------------------------------------------------------------------------ */

static void test_device_props(void **state)
{
    (void)state;
    int n = 0;
    char why[256];
    assert_int_equal(fa_backend_device_count(FA_BACKEND_OPENCL, &n, why, sizeof why), OK);
    assert_true(n >= 1);
    fa_device_props props;
    assert_int_equal(fa_backend_device_props(FA_BACKEND_OPENCL, 0, &props, why, sizeof why), OK);
    assert_int_equal(props.backend, FA_BACKEND_OPENCL);
    assert_true(props.name[0] != '\0');
    assert_true(props.sram_bytes > 0);
    assert_true(props.max_work_group_size > 0);
    assert_true(props.compute_units > 0);
    assert_int_equal(props.bf16, 0);
    assert_int_equal(fa_backend_device_props(FA_BACKEND_OPENCL, n, &props, why, sizeof why),
                     FA_STATUS_DEVICE_NOT_FOUND);
    assert_non_null(strstr(why, "no OpenCL device"));
}

/* ---- fa_context_create_opencl ------------------------------------------------------------- */

static void test_context_create_args(void **state)
{
    (void)state;
    app a;
    app_open(&a);
    static char sentinel;
    fa_context *ctx = (fa_context *)(void *)&sentinel; /* must be reset to NULL on failure */
    char why[256];
    assert_int_equal(fa_context_create_opencl(NULL, a.context, a.device, a.queue, why,
                                              sizeof why),
                     FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_context_create_opencl(&ctx, a.context, a.device, NULL, why, sizeof why),
                     FA_STATUS_NULL_POINTER);
    assert_null(ctx);
    assert_non_null(strstr(why, "cl_command_queue"));

    app b; /* a queue of another cl_context */
    app_open(&b);
    assert_int_equal(fa_context_create_opencl(&ctx, a.context, a.device, b.queue, why,
                                              sizeof why),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "another cl_context"));
    app_close(&b);

    cl_int err = CL_SUCCESS;
    cl_command_queue ooo = clCreateCommandQueue(a.context, a.device,
                                                CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err == CL_SUCCESS) { /* optional in OpenCL; test it where the device has it */
        assert_int_equal(fa_context_create_opencl(&ctx, a.context, a.device, ooo, why,
                                                  sizeof why),
                         FA_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(why, "out of order"));
        clReleaseCommandQueue(ooo);
    }
    app_close(&a);
}

/* The context retains the caller's queue and releases it on destroy. */
static void test_context_retains(void **state)
{
    (void)state;
    app a;
    app_open(&a);
    cl_uint before = queue_refs(a.queue);
    fa_context *ctx = NULL;
    char why[256];
    assert_int_equal(fa_context_create_opencl(&ctx, a.context, a.device, a.queue, why,
                                              sizeof why),
                     OK);
    assert_int_equal(fa_context_backend(ctx), FA_BACKEND_OPENCL);
    assert_int_equal(fa_context_device(ctx), 0);
    assert_int_equal(queue_refs(a.queue), before + 1);
    fa_context_destroy(ctx);
    assert_int_equal(queue_refs(a.queue), before);
    app_close(&a);
}

/* ---- fa_buffer_wrap_opencl ---------------------------------------------------------------- */

static void test_wrap_checks(void **state)
{
    (void)state;
    app a, b;
    app_open(&a);
    app_open(&b);
    fa_context *ctx = NULL;
    char why[256];
    assert_int_equal(fa_context_create_opencl(&ctx, a.context, a.device, a.queue, why,
                                              sizeof why),
                     OK);
    size_t align = base_align_bytes(a.device), size = 4 * align;
    cl_int err = CL_SUCCESS;
    cl_mem mine = clCreateBuffer(a.context, CL_MEM_READ_WRITE, size, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem theirs = clCreateBuffer(b.context, CL_MEM_READ_WRITE, size, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    fa_buffer *buf = NULL;

    assert_int_equal(fa_buffer_wrap_opencl(NULL, mine, 0, size, &buf), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, NULL, 0, size, &buf), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, mine, 0, 0, &buf), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, mine, 0, size + 1, &buf),
                     FA_STATUS_BUFFER_TOO_SMALL);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, mine, align, size - align + 1, &buf),
                     FA_STATUS_BUFFER_TOO_SMALL);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, theirs, 0, size, &buf),
                     FA_STATUS_CONTEXT_MISMATCH);
    if (align > 1) {
        assert_int_equal(fa_buffer_wrap_opencl(ctx, mine, align / 2, 4, &buf),
                         FA_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(fa_context_last_error(ctx), "CL_DEVICE_MEM_BASE_ADDR_ALIGN"));
    }
    assert_null(buf);

    /* Retained on wrap, released on destroy; a sub-buffer's own wrap cuts from the parent. */
    cl_uint refs = mem_refs(mine);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, mine, 0, size, &buf), OK);
    assert_int_equal(mem_refs(mine), refs + 1);
    assert_int_equal(fa_buffer_size(buf), size);
    fa_buffer_destroy(buf);
    assert_int_equal(mem_refs(mine), refs);
    cl_buffer_region region = {align, 2 * align};
    cl_mem sub = clCreateSubBuffer(mine, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, sub, align, align, &buf), OK);
    fa_buffer_destroy(buf);
    clReleaseMemObject(sub);

    uint64_t current = 1;
    fa_context_memory(ctx, &current, NULL);
    assert_int_equal(current, 0); /* wrapped memory is the caller's, never counted */
    clReleaseMemObject(mine);
    clReleaseMemObject(theirs);
    fa_context_destroy(ctx);
    app_close(&b);
    app_close(&a);
}

static void test_wrap_on_cpu(void **state)
{
    (void)state;
    app a;
    app_open(&a);
    fa_context *cpu = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    if (fa_context_create(&cpu, &opts, NULL, 0) != OK) {
        app_close(&a);
        skip();
    }
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(a.context, CL_MEM_READ_WRITE, 64, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    fa_buffer *buf = NULL;
    assert_int_equal(fa_buffer_wrap_opencl(cpu, m, 0, 64, &buf), FA_STATUS_UNSUPPORTED);
    clReleaseMemObject(m);
    fa_context_destroy(cpu);
    app_close(&a);
}

/* ---- a forward through wrapped sub-buffers ------------------------------------------------ */

/* Rounds n up to a multiple of m. */
static size_t round_up(size_t n, size_t m)
{
    return (n + m - 1) / m * m;
}

/*
 * Q, K and V share one cl_mem at aligned offsets; O sits inside a larger cl_mem between NaN
 * guard bands. GQA, BSHD layout, causal bottom-right with Sq > Sk so some rows see no key.
 */
static void test_forward_wrapped(void **state)
{
    (void)state;
    app a;
    app_open(&a);
    fa_context *ctx = NULL;
    char why[256];
    assert_int_equal(fa_context_create_opencl(&ctx, a.context, a.device, a.queue, why,
                                              sizeof why),
                     OK);
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BSHD, 2, 4, 2, 37, 29, 40);
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    size_t nq = 2 * 37 * 4 * 40, nk = 2 * 29 * 2 * 40, nl = 2 * 4 * 37;
    size_t align = base_align_bytes(a.device);
    size_t off_k = round_up(nq * 4, align), off_v = off_k + round_up(nk * 4, align);
    size_t guard = round_up(64, align), total = off_v + nk * 4;

    float *host = calloc(total / 4 + 1, 4);
    double *dq = malloc(nq * 8), *dk = malloc(nk * 8), *dv = malloc(nk * 8);
    double *ro = malloc(nq * 8), *rl = malloc(nl * 8);
    float *out = malloc(nq * 4 + 2 * guard), *lse = malloc(nl * 4);
    assert_true(host && dq && dk && dv && ro && rl && out && lse);
    harness_rng rng;
    harness_rng_seed(&rng, "opencl_forward_wrapped");
    for (size_t i = 0; i < nq; i++)
        dq[i] = host[i] = (float)harness_rng_uniform(&rng, -2, 2);
    for (size_t i = 0; i < nk; i++) {
        dk[i] = host[off_k / 4 + i] = (float)harness_rng_uniform(&rng, -2, 2);
        dv[i] = host[off_v / 4 + i] = (float)harness_rng_uniform(&rng, -2, 2);
    }
    for (size_t i = 0; i < nq + 2 * guard / 4; i++)
        out[i] = NAN;

    cl_int err = CL_SUCCESS;
    cl_mem in = clCreateBuffer(a.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, total, host,
                               &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem om = clCreateBuffer(a.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                               nq * 4 + 2 * guard, out, &err);
    assert_int_equal(err, CL_SUCCESS);
    fa_buffer *q, *k, *v, *o, *l;
    assert_int_equal(fa_buffer_wrap_opencl(ctx, in, 0, nq * 4, &q), OK);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, in, off_k, nk * 4, &k), OK);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, in, off_v, nk * 4, &v), OK);
    assert_int_equal(fa_buffer_wrap_opencl(ctx, om, guard, nq * 4, &o), OK);
    assert_int_equal(fa_buffer_create(ctx, nl * 4, &l), OK);

    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_int_equal(fa_forward(ctx, plan, q, k, v, o, l), OK);
    assert_int_equal(clEnqueueReadBuffer(a.queue, om, CL_TRUE, 0, nq * 4 + 2 * guard, out, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
    assert_int_equal(fa_buffer_read(l, 0, lse, nl * 4), OK);

    oracle_attention_f64(&p, dq, dk, dv, ro, rl);
    for (size_t i = 0; i < guard / 4; i++) {
        assert_true(isnan(out[i]));
        assert_true(isnan(out[guard / 4 + nq + i]));
    }
    /* The oracle's O is dense BHSD; the library's is BSHD. */
    for (int64_t b = 0; b < 2; b++)
        for (int64_t h = 0; h < 4; h++)
            for (int64_t s = 0; s < 37; s++)
                for (int64_t x = 0; x < 40; x++) {
                    double want = ro[((b * 4 + h) * 37 + s) * 40 + x];
                    float got = out[guard / 4 + (size_t)(((b * 37 + s) * 4 + h) * 40 + x)];
                    assert_false(isnan(got));
                    assert_true(fabs(got - want) <= 1e-5 + 1e-5 * fabs(want));
                }
    for (size_t i = 0; i < nl; i++) {
        if (isinf(rl[i]))
            assert_true(isinf(lse[i]) && lse[i] < 0);
        else
            assert_true(fabs(lse[i] - rl[i]) <= 1e-5 + 1e-5 * fabs(rl[i]));
    }
    fa_plan_destroy(plan);
    fa_buffer *bufs[5] = {q, k, v, o, l};
    for (int i = 0; i < 5; i++)
        fa_buffer_destroy(bufs[i]);
    assert_int_equal(mem_refs(in), 1);
    clReleaseMemObject(in);
    clReleaseMemObject(om);
    fa_context_destroy(ctx);
    app_close(&a);
    void *heap[8] = {host, dq, dk, dv, ro, rl, out, lse};
    for (int i = 0; i < 8; i++)
        free(heap[i]);
}

/* ---- FLASHATTN_KERNEL_DIR and build errors ------------------------------------------------ */

/* Plans a small problem on a fresh context (the program cache is per context). */
static fa_status plan_with_kernel_dir(const char *dir, char *msg, size_t msg_size)
{
    setenv("FLASHATTN_KERNEL_DIR", dir, 1);
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, 8, 8, 8);
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create(ctx, &p, &plan);
    snprintf(msg, msg_size, "%s", fa_context_last_error(ctx));
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_KERNEL_DIR");
    return st;
}

static void test_kernel_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/fa_test_opencl_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], msg[8192];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);

    /* A missing file names its path. */
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, path));

    /* A kernel that does not compile: the status and the compiler's own log. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("__kernel void flash_fwd(__global float *o) { this_is_not_opencl_c; }\n", f);
    fclose(f);
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, "build log"));
    assert_non_null(strstr(msg, "this_is_not_opencl_c"));
    remove(path);
    rmdir(dir);
}

int main(void)
{
    unsetenv("FLASHATTN_KERNEL_DIR");
    unsetenv("FLASHATTN_BLOCK_R");
    unsetenv("FLASHATTN_BLOCK_C");
    char why[600];
    harness_decision d = harness_decide(FA_BACKEND_OPENCL, why, sizeof why);
    if (d != HARNESS_RUN) {
        printf("%s: %s\n", d == HARNESS_SKIP ? "SKIPPED" : "FAILED", why);
        return harness_exit_code(d == HARNESS_FAIL, 0, 1);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_props),    cmocka_unit_test(test_context_create_args),
        cmocka_unit_test(test_context_retains), cmocka_unit_test(test_wrap_checks),
        cmocka_unit_test(test_wrap_on_cpu),     cmocka_unit_test(test_forward_wrapped),
        cmocka_unit_test(test_kernel_dir),
    };
    return cmocka_run_group_tests_name("opencl", tests, NULL, NULL);
}
