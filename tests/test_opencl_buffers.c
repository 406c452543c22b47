/*
 * test_opencl_buffers.c - the buffers the OpenCL backend allocates on a CPU device: from 2 MiB
 * up, host memory of the library's own in transparent huge pages, handed to the device as
 * CL_MEM_USE_HOST_PTR and freed by the buffer's destructor (backends/opencl/opencl.c). Checks
 * that such a buffer keeps its bytes, that its memory is 2 MiB aligned and (where the kernel's
 * THP setting allows it) backed by huge pages, that smaller buffers are the device's own, that
 * a forward over huge-page K and V matches the golden backend, and that creating and freeing
 * many leaves nothing behind (LeakSanitizer in the sanitizer tree). GPUs keep device memory.
 *
 *   test_opencl_buffers   (exit 77 when there is no OpenCL device and CI does not require one)
 */
#define _POSIX_C_SOURCE 200809L /* getline */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "internal.h"        /* fa_buffer's cl_mem */
#include "opencl_internal.h" /* CL types */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK
#define HUGE ((size_t)2 << 20)

static fa_context *cl_context_open(fa_device_props *props)
{
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    assert_int_equal(fa_context_device_props(ctx, props), OK);
    return ctx;
}

static void mem_info(const fa_buffer *b, cl_mem_flags *flags, void **host)
{
    cl_mem m = (cl_mem)b->mem;
    assert_int_equal(clGetMemObjectInfo(m, CL_MEM_FLAGS, sizeof *flags, flags, NULL),
                     CL_SUCCESS);
    assert_int_equal(clGetMemObjectInfo(m, CL_MEM_HOST_PTR, sizeof *host, host, NULL),
                     CL_SUCCESS);
}

/* Whether the kernel may give madvise(MADV_HUGEPAGE) memory huge pages ("[never]" says no). */
static bool thp_allowed(void)
{
    char line[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return false;
    bool ok = fgets(line, sizeof line, f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
}

/* AnonHugePages (kB) of the mapping of /proc/self/smaps that holds address p. */
static long huge_kb_at(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char *line = NULL;
    size_t cap = 0;
    long kb = -1;
    bool inside = false;
    uintptr_t a = (uintptr_t)p;
    assert_non_null(f);
    while (getline(&line, &cap, f) > 0) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = a >= lo && a < hi;
        else if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    free(line);
    fclose(f);
    return kb;
}

static void test_huge_buffer(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = cl_context_open(&props);
    size_t bytes = 3 * HUGE + 12;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    assert_true(src && back);
    for (size_t i = 0; i < bytes; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 24);
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, bytes, &b), OK);
    assert_int_equal(fa_buffer_write(b, 0, src, bytes), OK);
    assert_int_equal(fa_buffer_read(b, 0, back, bytes), OK);
    assert_memory_equal(src, back, bytes);
    cl_mem_flags flags = 0;
    void *host = NULL;
    mem_info(b, &flags, &host);
    if (!props.gpu) {
        assert_true(flags & CL_MEM_USE_HOST_PTR);
        assert_int_equal((uintptr_t)host % HUGE, 0);
        if (thp_allowed())
            assert_true(huge_kb_at(host) >= 2048);
    } else {
        assert_false(flags & CL_MEM_USE_HOST_PTR);
    }
    fa_buffer_destroy(b);
    free(src);
    free(back);
    fa_context_destroy(ctx);
}

/* Below 2 MiB the device allocates, as before; many huge buffers come and go without leaks. */
static void test_small_and_many(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *ctx = cl_context_open(&props);
    fa_buffer *b = NULL;
    cl_mem_flags flags = 0;
    void *host = NULL;
    assert_int_equal(fa_buffer_create(ctx, HUGE - 4, &b), OK);
    mem_info(b, &flags, &host);
    assert_false(flags & CL_MEM_USE_HOST_PTR);
    fa_buffer_destroy(b);
    for (int i = 0; i < 64; i++) {
        uint32_t word = (uint32_t)i, got = 0;
        assert_int_equal(fa_buffer_create(ctx, 4 * HUGE, &b), OK);
        assert_int_equal(fa_buffer_write(b, 4 * HUGE - 4, &word, 4), OK);
        assert_int_equal(fa_buffer_read(b, 4 * HUGE - 4, &got, 4), OK);
        assert_int_equal(got, word);
        fa_buffer_destroy(b);
    }
    fa_context_destroy(ctx);
}

/* O of one forward on ctx (f32 BHSD, heads 8/2, Sq 64, Sk 8192, d 64: K and V 4 MiB each). */
static void forward_on(fa_context *ctx, const float *q, const float *kv, float *o)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 8, 2, 64, 8192, 64);
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    size_t nq = 8 * 64 * 64, nk = 2 * 8192 * 64;
    fa_buffer *bq, *bk, *bv, *bo, *bl;
    fa_plan *plan = NULL;
    assert_int_equal(fa_buffer_create(ctx, nq * 4, &bq), OK);
    assert_int_equal(fa_buffer_create(ctx, nk * 4, &bk), OK);
    assert_int_equal(fa_buffer_create(ctx, nk * 4, &bv), OK);
    assert_int_equal(fa_buffer_create(ctx, nq * 4, &bo), OK);
    assert_int_equal(fa_buffer_create(ctx, 8 * 64 * 4, &bl), OK);
    assert_int_equal(fa_buffer_write(bq, 0, q, nq * 4), OK);
    assert_int_equal(fa_buffer_write(bk, 0, kv, nk * 4), OK);
    assert_int_equal(fa_buffer_write(bv, 0, kv + nk, nk * 4), OK);
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_int_equal(fa_forward(ctx, plan, bq, bk, bv, bo, bl), OK);
    assert_int_equal(fa_buffer_read(bo, 0, o, nq * 4), OK);
    fa_plan_destroy(plan);
    fa_buffer *all[] = {bq, bk, bv, bo, bl};
    for (int i = 0; i < 5; i++)
        fa_buffer_destroy(all[i]);
}

static void test_forward_over_huge_pages(void **state)
{
    (void)state;
    fa_device_props props;
    fa_context *cl = cl_context_open(&props), *cpu = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&cpu, &opts, NULL, 0), OK);
    size_t nq = 8 * 64 * 64, nk = 2 * 8192 * 64;
    float *q = malloc(nq * 4), *kv = malloc(2 * nk * 4), *o = malloc(nq * 4),
          *ref = malloc(nq * 4);
    assert_true(q && kv && o && ref);
    harness_rng rng;
    harness_rng_seed(&rng, "opencl_buffers_forward");
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)harness_rng_uniform(&rng, -1, 1);
    for (size_t i = 0; i < 2 * nk; i++)
        kv[i] = (float)harness_rng_uniform(&rng, -1, 1);
    forward_on(cl, q, kv, o);
    forward_on(cpu, q, kv, ref);
    double worst = 0;
    for (size_t i = 0; i < nq; i++)
        worst = fmax(worst, fabs((double)o[i] - ref[i]));
    assert_true(worst < 1e-5);
    free(q);
    free(kv);
    free(o);
    free(ref);
    fa_context_destroy(cpu);
    fa_context_destroy(cl);
}

int main(void)
{
    char why[600];
    harness_decision d = harness_decide(FA_BACKEND_OPENCL, why, sizeof why);
    if (d != HARNESS_RUN) {
        printf("%s: %s\n", d == HARNESS_SKIP ? "SKIPPED" : "FAILED", why);
        return harness_exit_code(d == HARNESS_FAIL, 0, 1);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_buffer),
        cmocka_unit_test(test_small_and_many),
        cmocka_unit_test(test_forward_over_huge_pages),
    };
    return cmocka_run_group_tests_name("opencl_buffers", tests, NULL, NULL);
}
