/*
 * test_opencl.c - OpenCL-specific tests: interop (a context around the caller's cl_context and
 * queue, fa_buffers around the caller's cl_mem, with reference counts balanced), the wrap
 * checks (alignment, size, foreign context), the kernel-folder override and the full build log
 * on a failed build (the plan rules are test_opencl_rules.c's). The shared forward/invalid
 * suites cover the numerics; here the forward runs once through wrapped sub-buffers against the
 * fp64 oracle. Some checks need a fresh process (a
 * first initialisation, an address-space limit): they run this program again in a child mode.
 *
 *   test_opencl        (exit 77 when there is no OpenCL device and CI does not require one)
 *   test_opencl --pocl-cache-unwritable   (with POCL_CACHE_DIR unwritable: the reasons given)
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, mkfifo, fork, setrlimit */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn_opencl.h"
#include "harness.h"
#include "oracle.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* AddressSanitizer reserves terabytes of address space: an RLIMIT_AS test cannot run under it. */
#if defined(__SANITIZE_ADDRESS__)
#define FA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FA_TEST_ASAN 1
#endif
#endif

#define OK FA_STATUS_OK

#include "cl_app.h"

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

/* The files every program holds before its entry point's (backends/opencl/cl_program.c), and
 * the one the forward's holds after it (its register-blocked path). */
static const char *const shared_files[] = {
    "flash_common.cl",  "flash_storage.cl",   "flash_softmax.cl", "flash_modifiers.cl",
    "flash_dropout.cl", "flash_sequences.cl", "flash_blocks.cl",  "flash_fwd_blocked.cl"};
enum { N_SHARED = sizeof shared_files / sizeof shared_files[0] };

/* Writes the shared files into dir as comments only (so the file a test is about,
 * flash_fwd.cl, is the one that decides), or removes them. */
static void write_empty_shared(const char *dir, bool remove_them)
{
    for (int i = 0; i < N_SHARED; i++) {
        char path[192];
        snprintf(path, sizeof path, "%s/%s", dir, shared_files[i]);
        if (remove_them) {
            remove(path);
            continue;
        }
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("/* nothing shared */\n", f);
        fclose(f);
    }
}

static void test_kernel_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/fa_test_opencl_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], msg[8192];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);

    /* A missing file names its path: the first, flash_common.cl, then flash_fwd.cl. */
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, "/flash_common.cl"));
    write_empty_shared(dir, false);
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
    write_empty_shared(dir, true);
    rmdir(dir);
}

/* A kernel path that is not a usable file: refused with KERNEL_BUILD_ERROR naming it, at once
 * (a FIFO must not block, a directory must not be sized as a file). */
static void test_kernel_dir_bad_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/fa_test_opencl_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], msg[8192];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);
    write_empty_shared(dir, false);
    alarm(120); /* a plan that waits on the FIFO ends the test as a failure, not a hang */

    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, path));
    assert_non_null(strstr(msg, "directory"));
    assert_int_equal(rmdir(path), 0);

    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, "FIFO"));
    assert_int_equal(remove(path), 0);

    FILE *f = fopen(path, "w"); /* empty */
    assert_non_null(f);
    fclose(f);
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, "empty"));

    f = fopen(path, "w"); /* compiles, but has no flash_fwd */
    assert_non_null(f);
    fputs("__kernel void not_flash_fwd(__global float *o) { o[0] = 1.0f; }\n", f);
    fclose(f);
    assert_int_equal(plan_with_kernel_dir(dir, msg, sizeof msg), FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(msg, "no kernel named \"flash_fwd\""));
    alarm(0);
    remove(path);
    write_empty_shared(dir, true);
    rmdir(dir);
}

/* ---- checks in a fresh process ------------------------------------------------------------ */

static const char *self_path; /* argv[0]: this program, run again in a child mode */

/* Runs this program with one argument and returns its wait status. */
static int run_self(const char *mode)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self_path, self_path, mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    return status;
}

/* A child's exit: 0 passes, 77 skips, a signal or any other code fails. */
static void expect_child_passed(int status, const char *mode, int run)
{
    if (WIFSIGNALED(status))
        fail_msg("%s (run %d): killed by signal %d", mode, run, WTERMSIG(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == HARNESS_EXIT_SKIPPED)
        skip();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s (run %d): exit status %d", mode, run, WEXITSTATUS(status));
}

#define THREADS 8
#define TINY 8 /* seq_q = seq_k = head_dim of the threads' forward */

typedef struct worker {
    fa_status st;
    char msg[512];
    float o[TINY * TINY];
} worker;

/* The threads' shared input: Q = K = V, a fixed pattern. */
static float tiny_input(size_t i)
{
    return (float)((int)(i % 7) - 3) * 0.25f;
}

/* One thread's whole life of a context: create, plan, forward, read back, destroy. */
static void *thread_forward(void *arg)
{
    worker *w = arg;
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    w->st = fa_context_create(&ctx, &opts, w->msg, sizeof w->msg);
    if (w->st != OK)
        return NULL;
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, TINY, TINY, TINY);
    float in[TINY * TINY];
    for (size_t i = 0; i < TINY * TINY; i++)
        in[i] = tiny_input(i);
    fa_plan *plan = NULL;
    fa_buffer *b[4] = {NULL, NULL, NULL, NULL};
    w->st = fa_plan_create(ctx, &p, &plan);
    for (int i = 0; i < 4 && w->st == OK; i++)
        w->st = fa_buffer_create(ctx, sizeof in, &b[i]);
    for (int i = 0; i < 3 && w->st == OK; i++)
        w->st = fa_buffer_write(b[i], 0, in, sizeof in);
    if (w->st == OK)
        w->st = fa_forward(ctx, plan, b[0], b[1], b[2], b[3], NULL);
    if (w->st == OK)
        w->st = fa_buffer_read(b[3], 0, w->o, sizeof w->o);
    if (w->st != OK)
        snprintf(w->msg, sizeof w->msg, "%s", fa_context_last_error(ctx));
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(b[i]);
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
    return NULL;
}

/* Child mode: THREADS threads each make their own context at once, in a process where OpenCL
 * was never initialised; each output is checked against the fp64 oracle. */
static int child_threads(void)
{
    static worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], NULL, thread_forward, &w[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, TINY, TINY, TINY);
    double in[TINY * TINY], ref[TINY * TINY], lse[TINY];
    for (size_t i = 0; i < TINY * TINY; i++)
        in[i] = tiny_input(i);
    oracle_attention_f64(&p, in, in, in, ref, lse);
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        if (w[i].st != OK) {
            fprintf(stderr, "thread %d: %s: %s\n", i, fa_status_name(w[i].st), w[i].msg);
            bad++;
            continue;
        }
        for (size_t j = 0; j < TINY * TINY; j++)
            if (!(fabs(w[i].o[j] - ref[j]) <= 1e-5 + 1e-5 * fabs(ref[j]))) {
                fprintf(stderr, "thread %d: o[%zu] = %g, want %g\n", i, j, w[i].o[j], ref[j]);
                bad++;
                break;
            }
    }
    return bad ? 1 : 0;
}

/* pocl 3.1 crashed in 8 of 10 such processes before discovery and context creation were
 * serialised; five fresh processes miss a regression with odds of about 3 in 10000. */
static void test_threads_fresh_process(void **state)
{
    (void)state;
#ifdef FA_TEST_ASAN
    /* pocl's LLVM replaces a compiling thread's signal stack with one from malloc, which ASan
     * then fails to munmap when the thread exits; without ASan's own signal stacks it does not. */
    harness_env saved;
    harness_env_save(&saved, "ASAN_OPTIONS");
    char opts[sizeof saved.value + 32];
    snprintf(opts, sizeof opts, "%s%suse_sigaltstack=0", saved.value, saved.value[0] ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    print_message("ASan build: the children run with ASAN_OPTIONS=%s\n", opts);
#endif
    for (int run = 0; run < 5; run++)
        expect_child_passed(run_self("--child-threads"), "--child-threads", run);
#ifdef FA_TEST_ASAN
    harness_env_restore(&saved);
#endif
}

#define CHUNK ((size_t)256 << 20)
#define MAX_CHUNKS 16

/* The process's address space now, in bytes, from /proc (0 where there is none). */
static size_t address_space_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu", &pages) != 1)
        pages = 0;
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Creates CHUNK buffers until one is refused; each one created must take a full write. Returns
 * the number created, or -1 when a create failed with another status or a write failed. */
static int fill_address_space(fa_context *ctx, const unsigned char *host, fa_buffer **bufs)
{
    for (int i = 0; i < MAX_CHUNKS; i++) {
        fa_status st = fa_buffer_create(ctx, CHUNK, &bufs[i]);
        if (st == FA_STATUS_OUT_OF_MEMORY)
            return i;
        if (st == OK)
            st = fa_buffer_write(bufs[i], 0, host, CHUNK);
        if (st != OK) {
            fprintf(stderr, "buffer %d: %s: %s\n", i, fa_status_name(st),
                    fa_context_last_error(ctx));
            return -1;
        }
    }
    fprintf(stderr, "%d buffers of 256 MiB fit under the limit\n", MAX_CHUNKS);
    return -1;
}

/* Child mode: with 1 GiB of address space to spare, 256 MiB buffers are usable until one is
 * refused with OUT_OF_MEMORY, and the context works after that. */
static int child_alloc_limit(void)
{
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    char why[512] = "";
    unsigned char *host = calloc(1, CHUNK);
    if (!host || fa_context_create(&ctx, &opts, why, sizeof why) != OK) {
        fprintf(stderr, "setup failed: %s\n", why);
        return 1;
    }
    size_t used = address_space_bytes();
    if (used == 0) {
        printf("SKIPPED: no /proc/self/statm to measure the address space\n");
        return HARNESS_EXIT_SKIPPED;
    }
    struct rlimit lim = {used + ((size_t)1 << 30), used + ((size_t)1 << 30)};
    if (setrlimit(RLIMIT_AS, &lim) != 0) {
        fprintf(stderr, "setrlimit(RLIMIT_AS) failed\n");
        return 1;
    }
    fa_buffer *bufs[MAX_CHUNKS] = {NULL};
    int made = fill_address_space(ctx, host, bufs);
    const char *msg = fa_context_last_error(ctx);
    int rc = made >= 1 && strstr(msg, "FA_STATUS_OUT_OF_MEMORY") ? 0 : 1;
    for (int i = 0; i < MAX_CHUNKS; i++)
        fa_buffer_destroy(bufs[i]);
    fa_buffer *small = NULL;
    if (rc == 0 && (fa_buffer_create(ctx, 4096, &small) != OK ||
                    fa_buffer_write(small, 0, host, 4096) != OK)) {
        fprintf(stderr, "the context does not work after the refusal: %s\n",
                fa_context_last_error(ctx));
        rc = 1;
    }
    fa_buffer_destroy(small);
    fa_context_destroy(ctx);
    free(host);
    return rc;
}

static void test_buffer_address_limit(void **state)
{
    (void)state;
#ifdef FA_TEST_ASAN
    print_message("SKIPPED: a sanitizer build (ASan reserves terabytes of address space, so a "
                  "limit on it cannot stand in for memory exhaustion)\n");
    skip();
#else
    app a;
    app_open(&a);
    cl_device_type type = 0;
    assert_int_equal(clGetDeviceInfo(a.device, CL_DEVICE_TYPE, sizeof type, &type, NULL),
                     CL_SUCCESS);
    app_close(&a);
    if (!(type & CL_DEVICE_TYPE_CPU)) {
        print_message("SKIPPED: device 0 is not a CPU device; an address-space limit stands in "
                      "for its memory only where that memory is the host's\n");
        skip();
    }
    expect_child_passed(run_self("--child-alloc-limit"), "--child-alloc-limit", 0);
#endif
}

/* ---- POCL_CACHE_DIR unwritable (its own ctest, with the variable set) --------------------- */

static void test_unwritable_cache(void **state)
{
    (void)state;
    const char *dir = getenv("POCL_CACHE_DIR");
    assert_non_null(dir);
    char why[1024] = "";
    int n = -1;
    assert_int_equal(fa_backend_device_count(FA_BACKEND_OPENCL, &n, why, sizeof why),
                     FA_STATUS_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(why, "clGetDeviceIDs returned"));
    assert_non_null(strstr(why, "POCL_CACHE_DIR"));
    assert_non_null(strstr(why, dir));
    /* An explicit backend says so; AUTO runs elsewhere and the context says why. */
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_OPENCL, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, why, sizeof why),
                     FA_STATUS_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(why, "POCL_CACHE_DIR"));
    unsetenv("FLASHATTN_BACKEND");
    unsetenv("FLASHATTN_DEVICE");
    assert_int_equal(fa_context_create(&ctx, NULL, why, sizeof why), OK);
    assert_int_not_equal(fa_context_backend(ctx), FA_BACKEND_OPENCL);
    const char *note = fa_context_backend_note(ctx);
    assert_non_null(strstr(note, "opencl skipped (FA_STATUS_BACKEND_UNAVAILABLE"));
    assert_non_null(strstr(note, "POCL_CACHE_DIR"));
    assert_non_null(strstr(note, fa_backend_name(fa_context_backend(ctx))));
    fa_context_destroy(ctx);
}

/* True when a pocl platform is registered and offers no device (asked of OpenCL directly, so
 * the answer does not depend on the library under test). */
static bool pocl_without_devices(void)
{
    cl_platform_id platforms[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS)
        return false;
    for (cl_uint i = 0; i < np && i < 16; i++) {
        char name[256] = "";
        cl_uint n = 0;
        if (clGetPlatformInfo(platforms[i], CL_PLATFORM_NAME, sizeof name, name, NULL) ==
                CL_SUCCESS &&
            strstr(name, "Portable Computing Language") &&
            (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 0, NULL, &n) != CL_SUCCESS ||
             n == 0))
            return true;
    }
    return false;
}

/* The ctest that sets POCL_CACHE_DIR to an unwritable path; skipped (77) where no pocl platform
 * lost its devices to it (another OpenCL, which ignores the variable, or no pocl at all). */
static int run_unwritable_cache(void)
{
    if (!pocl_without_devices()) {
        printf("SKIPPED: no pocl platform that lost its devices to POCL_CACHE_DIR = \"%s\"\n",
               getenv("POCL_CACHE_DIR") ? getenv("POCL_CACHE_DIR") : "(unset)");
        return HARNESS_EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_unwritable_cache)};
    return cmocka_run_group_tests_name("opencl_pocl_cache", tests, NULL, NULL);
}

int main(int argc, char **argv)
{
    unsetenv("FLASHATTN_KERNEL_DIR");
    unsetenv("FLASHATTN_BLOCK_R");
    unsetenv("FLASHATTN_BLOCK_C");
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "--child-threads") == 0)
        return child_threads();
    if (argc > 1 && strcmp(argv[1], "--child-alloc-limit") == 0)
        return child_alloc_limit();
    if (argc > 1 && strcmp(argv[1], "--pocl-cache-unwritable") == 0)
        return run_unwritable_cache();
    if (argc > 1) {
        fprintf(stderr, "usage: test_opencl [--pocl-cache-unwritable]\n");
        return 2;
    }
    char why[600];
    harness_decision d = harness_decide(FA_BACKEND_OPENCL, why, sizeof why);
    if (d != HARNESS_RUN) {
        printf("%s: %s\n", d == HARNESS_SKIP ? "SKIPPED" : "FAILED", why);
        return harness_exit_code(d == HARNESS_FAIL, 0, 1);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_props),
        cmocka_unit_test(test_context_create_args),
        cmocka_unit_test(test_context_retains), cmocka_unit_test(test_wrap_checks),
        cmocka_unit_test(test_wrap_on_cpu),     cmocka_unit_test(test_forward_wrapped),
        cmocka_unit_test(test_kernel_dir),      cmocka_unit_test(test_kernel_dir_bad_files),
        cmocka_unit_test(test_threads_fresh_process),
        cmocka_unit_test(test_buffer_address_limit),
    };
    return cmocka_run_group_tests_name("opencl", tests, NULL, NULL);
}
