/*
 * test_cuda.c - CUDA-specific tests that need no GPU:
 *   (a) NVRTC compiles kernels_cu/flash_fwd.cu for every plan the shared case table produces
 *       on the known props of sm_75, sm_80, sm_86, sm_89 and sm_90 (identical option strings
 *       compiled once; split-KV plans with flash_merge.cu) and for a few problems with the
 *       score modifiers and dropout, or with sequences (varlen, seqlens_k, paged, split,
 *       fa_merge), and the backward's entry points (kernels_cu/flash_bwd.cu,
 *       flash_bwd_rows.cu) for the plans of a few representative backward problems, of the
 *       same modifier problems (with flash_bwd_dsinks) and of varlen problems on the same
 *       archs (FLASHATTN_NVRTC_ARCHS=sm_80,... plans for every arch but compiles only those;
 *       FLASHATTN_NVRTC_SAMPLE=1 compiles one module per program and kernel path); a module
 *       planned by several archs compiles for the oldest of them (see compiled_before); a
 *       broken kernel reports KERNEL_BUILD_ERROR with the full log;
 *   (b) without a driver the backend reports BACKEND_UNAVAILABLE with a reason, contexts fail
 *       cleanly, planning-only contexts (--arch) plan but refuse device work, and the library
 *       still runs on the cpu backend (test_cuda_no_driver.c).
 * The numerics on a GPU are the shared forward/invalid suites' job (forward_cuda, invalid_cuda).
 *
 *   test_cuda   (exit 77 when NVRTC is missing, unless FLASHATTN_REQUIRE_BACKENDS names cuda or
 *                FLASHATTN_REQUIRE_NVRTC=1, in which case that is a failure)
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cases.h"
#include "cuda_internal.h"
#include "flashattn_cuda.h"
#include "harness.h"
#include "test_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_KEYS 512

/* The distinct (kernel files, options) of one arch (the dedupe set of test (a)) and their
 * results. */
typedef struct compile_jobs {
    const char *arch;
    fa__kernel kernel[MAX_KEYS];
    char keys[MAX_KEYS][256];
    const char *case_name[MAX_KEYS];
    fa_status status[MAX_KEYS];
    char *log[MAX_KEYS]; /* heap copy of the log of a failed compile */
    int count;
    int next; /* the next job to take, under lock */
    pthread_mutex_t lock;
} compile_jobs;

/* The program an entry point is compiled in (backends/cuda/cuda_module.c): 0 the forward's
 * (flash_common.cu, flash_fwd.cu), 1 the backward's passes (and flash_bwd.cu), 2 its per-row
 * kernels (flash_bwd_rows.cu), 3 the merge's (flash_merge.cu). */
static int program_of(fa__kernel kernel)
{
    switch (kernel) {
    case FA__KERNEL_BWD_PRE:
    case FA__KERNEL_BWD_DSINKS:
        return 2;
    case FA__KERNEL_BWD_DKDV:
    case FA__KERNEL_BWD_DQ:
        return 1;
    case FA__KERNEL_MERGE:
        return 3;
    default:
        return 0;
    }
}

/* Entry points compiled from the same files: an NVRTC compile checks all of a program's
 * entries, so one job per program and options does. */
static bool same_source(fa__kernel a, fa__kernel b)
{
    return program_of(a) == program_of(b);
}

static void jobs_add(compile_jobs *jobs, fa__kernel kernel, const char *options,
                     const char *case_name)
{
    for (int i = 0; i < jobs->count; i++)
        if (same_source(jobs->kernel[i], kernel) && strcmp(jobs->keys[i], options) == 0)
            return;
    assert_true(jobs->count < MAX_KEYS);
    jobs->kernel[jobs->count] = kernel;
    fa__format(jobs->keys[jobs->count], sizeof jobs->keys[0], "%s", options);
    jobs->case_name[jobs->count++] = case_name;
}

/* A worker: compiles jobs until none is left (NVRTC is thread-safe). */
static void *compile_worker(void *arg)
{
    compile_jobs *jobs = arg;
    static _Thread_local char log[1 << 16];
    for (;;) {
        pthread_mutex_lock(&jobs->lock);
        int i = jobs->next < jobs->count ? jobs->next++ : -1;
        pthread_mutex_unlock(&jobs->lock);
        if (i < 0)
            return NULL;
        jobs->status[i] = fa__cuda_compile_check(jobs->arch, jobs->kernel[i], jobs->keys[i], log,
                                                 sizeof log);
        if (jobs->status[i] != OK)
            jobs->log[i] = strdup(log);
    }
}

/* Runs the jobs on up to 8 threads, one per online CPU. */
static void compile_all(compile_jobs *jobs)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    pthread_t threads[8];
    jobs->next = 0;
    assert_int_equal(pthread_mutex_init(&jobs->lock, NULL), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, compile_worker, jobs), 0);
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&jobs->lock);
}

/* Every launch of a plan as a compile job: what the backend would compile. */
static void add_plan_jobs(compile_jobs *jobs, const fa_plan *plan, const char *name)
{
    for (int i = 0; i < plan->n_launches; i++) {
        char options[256];
        fa__variant_defines(&plan->launches[i].variant, "-D", options, sizeof options);
        jobs_add(jobs, plan->launches[i].variant.kernel, options, name);
    }
}

/* The launches of one case, planned by fa_plan_create on a planning-only context for the arch
 * (flash_fwd, or a split forward's flash_fwd and flash_merge). */
static void add_case_jobs(fa_context *ctx, compile_jobs *jobs, const fa_test_case *c)
{
    fa_problem p;
    fa_plan *plan = NULL;
    case_fill_problem(c, &p);
    if (fa_plan_create(ctx, &p, &plan) != OK)
        fail_msg("%s: %s", c->name, fa_context_last_error(ctx));
    assert_int_equal(plan->n_launches, plan->kv_splits > 1 ? 2 : 1);
    add_plan_jobs(jobs, plan, c->name);
    fa_plan_destroy(plan);
}

/* Representative backward problems: each dtype, d from 40 to 256 (the register-heaviest dK/dV
 * block), every mask, GQA, Sq != Sk, the planner's own tiles. */
typedef struct bwd_problem {
    const char *name;
    fa_dtype dtype;
    fa_mask mask;
    int64_t heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
} bwd_problem;

static const bwd_problem bwd_problems[] = {
    {"bwd f32 d64 none", FA_DTYPE_F32, FA_MASK_NONE, 8, 8, 1024, 1024, 64},
    {"bwd f16 d128 top-left GQA", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, 8, 2, 2048, 2048, 128},
    {"bwd bf16 d96 bottom-right", FA_DTYPE_BF16, FA_MASK_CAUSAL_BOTTOM_RIGHT, 4, 4, 300, 500, 96},
    {"bwd f16 d256 none", FA_DTYPE_F16, FA_MASK_NONE, 2, 1, 512, 512, 256},
    {"bwd f32 d40 top-left odd", FA_DTYPE_F32, FA_MASK_CAUSAL_TOP_LEFT, 3, 1, 37, 29, 40},
};

/* The backward plan's three launches as compile jobs: what the backend would compile. */
static void add_backward_jobs(fa_context *ctx, compile_jobs *jobs, const bwd_problem *b)
{
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, b->dtype, FA_LAYOUT_BHSD, 1, b->heads_q, b->heads_kv,
                                     b->seqlen_q, b->seqlen_k, b->head_dim),
                     OK);
    p.mask = b->mask;
    fa_plan *plan = NULL;
    if (fa_plan_create_backward(ctx, &p, &plan) != OK)
        fail_msg("%s: %s", b->name, fa_context_last_error(ctx));
    assert_int_equal(plan->n_launches, 3);
    add_plan_jobs(jobs, plan, b->name);
    fa_plan_destroy(plan);
}

/* Representative forward problems with the score modifiers and dropout (FEATURES, BIAS_DTYPE):
 * each dtype, both paths (f16/bf16 with d a multiple of 16 take the tensor cores on sm_80+),
 * each feature in at least two variants, all six together. */
typedef struct mod_problem {
    const char *name;
    fa_dtype dtype, bias_dtype;
    fa_mask mask;
    int64_t head_dim;
    float softcap, dropout_p;
    int32_t alibi, bias, window, sinks;
} mod_problem;

static const mod_problem mod_problems[] = {
    {"mods f32 d64 all", FA_DTYPE_F32, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 64, 30.0f, 0.1f,
     1, 1, 1, 1},
    {"mods f16 d128 all, f16 bias", FA_DTYPE_F16, FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, 128,
     50.0f, 0.2f, 1, 1, 1, 1},
    {"mods bf16 d64 all, f32 bias", FA_DTYPE_BF16, FA_DTYPE_F32, FA_MASK_NONE, 64, 30.0f, 0.1f, 1,
     1, 1, 1},
    {"mods bf16 d64 softcap window dropout", FA_DTYPE_BF16, FA_DTYPE_F32, FA_MASK_NONE, 64, 30.0f,
     0.3f, 0, 0, 1, 0},
    {"mods f16 d40 alibi bias sinks", FA_DTYPE_F16, FA_DTYPE_F16, FA_MASK_NONE, 40, 0.0f, 0.0f, 1,
     1, 0, 1},
    {"mods bf16 d256 sinks dropout", FA_DTYPE_BF16, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 256,
     0.0f, 0.5f, 0, 0, 0, 1},
};

/* The fa_problem of a modifier problem. */
static void modifier_problem(const mod_problem *m, fa_problem *out)
{
    fa_problem p;
    const int64_t heads = 4, sq = 300, sk = 500;
    assert_int_equal(fa_problem_init(&p, m->dtype, FA_LAYOUT_BHSD, 2, heads, 2, sq, sk,
                                     m->head_dim),
                     OK);
    p.mask = m->mask;
    p.softcap = m->softcap;
    p.alibi = m->alibi;
    if (m->bias) {
        p.bias = 1;
        p.bias_dtype = m->bias_dtype;
        p.bias_layout.stride_seq = sk;
        p.bias_layout.stride_head = sq * sk;
        p.bias_layout.stride_batch = heads * sq * sk;
    }
    if (m->window) {
        p.window = 1;
        p.window_left = 64;
        p.window_right = 0;
    }
    p.sinks = m->sinks;
    p.dropout_p = m->dropout_p;
    p.dropout_seed = 42;
    *out = p;
}

/* The forward plan of a modifier problem as compile jobs. */
static void add_modifier_job(fa_context *ctx, compile_jobs *jobs, const mod_problem *m)
{
    fa_problem p;
    modifier_problem(m, &p);
    fa_plan *plan = NULL;
    if (fa_plan_create(ctx, &p, &plan) != OK)
        fail_msg("%s: %s", m->name, fa_context_last_error(ctx));
    char options[256];
    fa__variant_defines(&plan->launches[0].variant, "-D", options, sizeof options);
    assert_non_null(strstr(options, "-DFEATURES="));
    add_plan_jobs(jobs, plan, m->name); /* and a split's flash_merge */
    fa_plan_destroy(plan);
}

/* The backward plan of a modifier problem as compile jobs: flash_bwd_pre, flash_bwd_dkdv and
 * flash_bwd_dq with the modifiers, and flash_bwd_dsinks with sinks. */
static void add_backward_modifier_jobs(fa_context *ctx, compile_jobs *jobs, const mod_problem *m)
{
    fa_problem p;
    modifier_problem(m, &p);
    fa_plan *plan = NULL;
    if (fa_plan_create_backward(ctx, &p, &plan) != OK)
        fail_msg("%s (backward): %s", m->name, fa_context_last_error(ctx));
    assert_int_equal(plan->n_launches, m->sinks ? 4 : 3);
    for (int i = 0; i < plan->n_launches; i++) {
        char options[256];
        fa__variant_defines(&plan->launches[i].variant, "-D", options, sizeof options);
        assert_non_null(strstr(options, "-DFEATURES="));
        jobs_add(jobs, plan->launches[i].variant.kernel, options, m->name);
    }
    fa_plan_destroy(plan);
}

/* Problems with sequences and decoding: every SEQ combination the forward takes (varlen 1,
 * seqlens_k 2, paged 4, paged with seqlens_k 6), split (flash_fwd with SPLIT=1, then
 * flash_merge with PARTS_DTYPE=0) or not, each dtype, both paths (decoding's one row takes the
 * CUDA cores); the varlen backward (with sinks: flash_bwd_dsinks); fa_merge (PARTS_DTYPE the
 * storage type). */
typedef enum seq_op { SEQ_FORWARD, SEQ_BACKWARD, SEQ_MERGE } seq_op;

typedef struct seq_problem {
    const char *name;
    seq_op op;
    fa_dtype dtype;
    fa_mask mask;
    int64_t seqlen_q, head_dim;
    int32_t varlen, seqlens_k, page_size, kv_splits, sinks;
} seq_problem;

static const seq_problem seq_problems[] = {
    {"seq varlen f16 d128 top-left split", SEQ_FORWARD, FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT,
     300, 128, 1, 0, 0, 4, 0},
    {"seq varlen f32 d64 bottom-right sinks", SEQ_FORWARD, FA_DTYPE_F32,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, 300, 64, 1, 0, 0, 1, 1},
    {"seq seqlens_k bf16 d128 decode, planned split", SEQ_FORWARD, FA_DTYPE_BF16,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, 1, 128, 0, 1, 0, 0, 0},
    {"seq seqlens_k bf16 d64 split sinks", SEQ_FORWARD, FA_DTYPE_BF16, FA_MASK_NONE, 64, 64, 0, 1,
     0, 8, 1},
    {"seq paged f16 d128 p16", SEQ_FORWARD, FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT, 64, 128, 0,
     0, 16, 1, 0},
    {"seq paged seqlens_k f32 d64 p1 split sinks", SEQ_FORWARD, FA_DTYPE_F32,
     FA_MASK_CAUSAL_BOTTOM_RIGHT, 4, 64, 0, 1, 1, 4, 1},
    {"seq paged seqlens_k bf16 d64 p3 split", SEQ_FORWARD, FA_DTYPE_BF16, FA_MASK_NONE, 32, 64, 0,
     1, 3, 3, 0},
    {"seq varlen backward f32 d64 sinks", SEQ_BACKWARD, FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     300, 64, 1, 0, 0, 1, 1},
    {"seq varlen backward bf16 d128", SEQ_BACKWARD, FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, 300,
     128, 1, 0, 0, 1, 0},
    {"merge f16 d128", SEQ_MERGE, FA_DTYPE_F16, FA_MASK_NONE, 300, 128, 0, 0, 0, 1, 0},
    {"merge bf16 d64", SEQ_MERGE, FA_DTYPE_BF16, FA_MASK_NONE, 300, 64, 0, 0, 0, 1, 0},
    {"merge f32 d40", SEQ_MERGE, FA_DTYPE_F32, FA_MASK_NONE, 37, 40, 0, 0, 0, 1, 0},
};

/* The plan of a sequence problem (2 sequences, 4 query heads, 2 K/V heads, up to 2048 keys) as
 * compile jobs. */
static void add_seq_jobs(fa_context *ctx, compile_jobs *jobs, const seq_problem *s)
{
    fa_problem p;
    const int64_t sk = 2048;
    assert_int_equal(fa_problem_init(&p, s->dtype, s->varlen ? FA_LAYOUT_BSHD : FA_LAYOUT_BHSD, 2,
                                     4, 2, s->seqlen_q, sk, s->head_dim),
                     OK);
    p.mask = s->mask;
    p.varlen = s->varlen;
    p.seqlens_k = s->seqlens_k;
    p.kv_splits = s->kv_splits;
    p.sinks = s->sinks;
    if (s->page_size > 0) {
        int64_t per = (sk + s->page_size - 1) / s->page_size;
        assert_int_equal(fa_problem_set_paged(&p, s->page_size, 2 * per, per), OK);
    }
    fa_plan *plan = NULL;
    fa_status st = s->op == SEQ_BACKWARD ? fa_plan_create_backward(ctx, &p, &plan)
                   : s->op == SEQ_MERGE  ? fa_plan_create_merge(ctx, &p, 3, &plan)
                                         : fa_plan_create(ctx, &p, &plan);
    if (st != OK)
        fail_msg("%s: %s", s->name, fa_context_last_error(ctx));
    if (s->op == SEQ_FORWARD && s->kv_splits != 1)
        assert_int_equal(plan->n_launches, 2); /* the split forward and its merge */
    add_plan_jobs(jobs, plan, s->name);
    fa_plan_destroy(plan);
}

/* Whether this run compiles for arch: FLASHATTN_NVRTC_ARCHS, a comma-separated list of the
 * archs below, limits the compiles (scripts/test.sh's sanitizer tree compiles one arch: its
 * subject is the host code, which is the same for every arch; the first tree compiles all).
 * Unset or empty: every arch. A name that is not one of them fails the test, so a typo cannot
 * quietly compile nothing. */
static bool arch_compiled(const char *arch)
{
    static const char *const known[] = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90"};
    const char *list = getenv("FLASHATTN_NVRTC_ARCHS");
    if (!list || !*list)
        return true;
    bool found = false;
    for (const char *s = list; *s;) {
        size_t n = strcspn(s, ",");
        bool valid = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            valid = valid || (strlen(known[k]) == n && strncmp(known[k], s, n) == 0);
        if (!valid)
            fail_msg("FLASHATTN_NVRTC_ARCHS=%s: \"%.*s\" is not one of sm_75, sm_80, sm_86, "
                     "sm_89, sm_90", list, (int)n, s);
        found = found || (strlen(arch) == n && strncmp(arch, s, n) == 0);
        s += n + (s[n] == ',');
    }
    return found;
}

/* The modules compiled by an earlier arch of this run: program and options. The archs compile
 * from the oldest (sm_75) up, and a module an older arch compiled is not compiled again for a
 * newer one: its source and options are the same bytes (kernels_cu has no arch-dependent code,
 * which no_arch_dependent_code checks), and every instruction the older arch accepts the newer
 * ones accept too. Halves the compiles (665 -> 311): sm_86 and sm_89 plan the same 133 modules,
 * sm_80 and sm_90 share 107. */
static struct {
    int program[1024];
    char keys[1024][256];
    int count;
} compiled;

static bool compiled_before(fa__kernel kernel, const char *keys)
{
    for (int i = 0; i < compiled.count; i++)
        if (compiled.program[i] == program_of(kernel) && strcmp(compiled.keys[i], keys) == 0)
            return true;
    return false;
}

static void remember_compiled(fa__kernel kernel, const char *keys)
{
    assert_true(compiled.count < 1024);
    compiled.program[compiled.count] = program_of(kernel);
    fa__format(compiled.keys[compiled.count++], sizeof compiled.keys[0], "%s", keys);
}

/* The premise of compiled_before: no kernel text branches on the arch, and no kernel file
 * includes a header that could (kernel_params.h includes <stdint.h> for host compilers only). */
extern const unsigned char fa__cu_embed_kernel_params[], fa__cu_embed_flash_common[],
    fa__cu_embed_flash_kv[], fa__cu_embed_flash_fwd[], fa__cu_embed_flash_bwd[],
    fa__cu_embed_flash_bwd_rows[], fa__cu_embed_flash_bwd_mma[], fa__cu_embed_flash_merge[];

static void no_arch_dependent_code(void)
{
    const unsigned char *const texts[] = {
        fa__cu_embed_kernel_params, fa__cu_embed_flash_common,   fa__cu_embed_flash_kv,
        fa__cu_embed_flash_fwd,     fa__cu_embed_flash_bwd,      fa__cu_embed_flash_bwd_rows,
        fa__cu_embed_flash_bwd_mma, fa__cu_embed_flash_merge};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const char *t = (const char *)texts[i];
        assert_null(strstr(t, "__CUDA_ARCH__"));
        if (texts[i] != fa__cu_embed_kernel_params)
            assert_null(strstr(t, "#include <"));
    }
}

/* FLASHATTN_NVRTC_SAMPLE=1: only the first module of each program and kernel path (CUDA cores,
 * tensor cores) compiles. scripts/test.sh's sanitizer tree sets it: its subject is the host
 * code around NVRTC, the same for every module, and under ASan NVRTC's own allocations run
 * through the sanitizer's allocator (~1.4 s a module there, 0.4 s in the first tree). */
static bool sampled_out(const compile_jobs *jobs, int kept, int i)
{
    const char *e = getenv("FLASHATTN_NVRTC_SAMPLE");
    if (!e || strcmp(e, "1") != 0)
        return false;
    const bool mma = strstr(jobs->keys[i], "-DMMA=1") != NULL;
    for (int k = 0; k < kept; k++)
        if (same_source(jobs->kernel[k], jobs->kernel[i]) &&
            (strstr(jobs->keys[k], "-DMMA=1") != NULL) == mma)
            return true;
    return false;
}

/* (a) Every distinct plan of the case table, of the modifier problems (forward and backward)
 * and of the backward problems compiles for one arch (planned always; compiled where
 * arch_compiled says so). */
static void compile_arch(const char *arch)
{
    static compile_jobs jobs; /* large: not on the stack */
    fa_context *ctx = NULL;
    char why[256] = "";
    no_arch_dependent_code();
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, arch, why, sizeof why), OK);
    memset(&jobs, 0, sizeof jobs);
    jobs.arch = arch;
    for (size_t i = 0; i < fa_test_case_count; i++)
        add_case_jobs(ctx, &jobs, &fa_test_cases[i]);
    for (size_t i = 0; i < sizeof mod_problems / sizeof mod_problems[0]; i++)
        add_modifier_job(ctx, &jobs, &mod_problems[i]);
    for (size_t i = 0; i < sizeof seq_problems / sizeof seq_problems[0]; i++)
        add_seq_jobs(ctx, &jobs, &seq_problems[i]);
    int forward = jobs.count;
    for (size_t i = 0; i < sizeof bwd_problems / sizeof bwd_problems[0]; i++)
        add_backward_jobs(ctx, &jobs, &bwd_problems[i]);
    for (size_t i = 0; i < sizeof mod_problems / sizeof mod_problems[0]; i++)
        add_backward_modifier_jobs(ctx, &jobs, &mod_problems[i]);
    fa_context_destroy(ctx);
    assert_true(forward > 0 && jobs.count > forward);
    if (!arch_compiled(arch)) {
        print_message("%s: %d distinct modules planned, not compiled in this run "
                      "(FLASHATTN_NVRTC_ARCHS=%s)\n", arch, jobs.count,
                      getenv("FLASHATTN_NVRTC_ARCHS"));
        return;
    }
    /* Only the jobs to compile stay, in order. */
    const int planned = jobs.count;
    int kept = 0, earlier = 0, sampled = 0;
    for (int i = 0; i < planned; i++) {
        if (compiled_before(jobs.kernel[i], jobs.keys[i])) {
            earlier++;
        } else if (sampled_out(&jobs, kept, i)) {
            sampled++;
        } else {
            jobs.kernel[kept] = jobs.kernel[i];
            jobs.case_name[kept] = jobs.case_name[i];
            memmove(jobs.keys[kept++], jobs.keys[i], sizeof jobs.keys[0]);
            remember_compiled(jobs.kernel[i], jobs.keys[i]);
        }
    }
    jobs.count = kept;
    double t0 = harness_seconds();
    compile_all(&jobs);
    int failed = 0;
    for (int i = 0; i < jobs.count; i++) {
        if (jobs.status[i] != OK) {
            print_error("%s %s %s (case %s): %s\n%s\n", arch, fa__kernel_entry(jobs.kernel[i]),
                        jobs.keys[i],
                        jobs.case_name[i], fa_status_name(jobs.status[i]),
                        jobs.log[i] ? jobs.log[i] : "");
            failed++;
        }
        free(jobs.log[i]);
    }
    print_message("%s: %zu cases, %d distinct forward (split, merge, sequences) modules; %zu "
                  "backward problems (and the modifier problems), %d distinct backward "
                  "modules; %d compiled in %.1f s (%d compiled for an older arch, %d left out "
                  "by FLASHATTN_NVRTC_SAMPLE)\n",
                  arch, fa_test_case_count, forward,
                  sizeof bwd_problems / sizeof bwd_problems[0], planned - forward, kept,
                  harness_seconds() - t0, earlier, sampled);
    assert_int_equal(failed, 0);
}

static void test_compile_sm75(void **state)
{
    (void)state;
    compile_arch("sm_75");
}

static void test_compile_sm80(void **state)
{
    (void)state;
    compile_arch("sm_80");
}

static void test_compile_sm86(void **state)
{
    (void)state;
    compile_arch("sm_86");
}

static void test_compile_sm89(void **state)
{
    (void)state;
    compile_arch("sm_89");
}

static void test_compile_sm90(void **state)
{
    (void)state;
    compile_arch("sm_90");
}

/* A kernel that does not compile: KERNEL_BUILD_ERROR with NVRTC's log naming the file. */
static void test_compile_error_log(void **state)
{
    (void)state;
    static char log[1 << 16];
    char dir[] = "/tmp/fa_cuda_kernel.XXXXXX", path[64], common[64], kv[64];
    assert_non_null(mkdtemp(dir));
    snprintf(common, sizeof common, "%s/flash_common.cu", dir); /* every program's first */
    snprintf(kv, sizeof kv, "%s/flash_kv.cu", dir);             /* the forward's second */
    FILE *f = fopen(common, "w");
    assert_non_null(f);
    fputs("/* nothing shared */\n", f);
    fclose(f);
    f = fopen(kv, "w");
    assert_non_null(f);
    fputs("/* no key tiles */\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/flash_fwd.cu", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("extern \"C\" __global__ void flash_fwd() { this_is_not_defined(); }\n", f);
    fclose(f);
    harness_env saved;
    harness_env_save(&saved, "FLASHATTN_KERNEL_DIR");
    setenv("FLASHATTN_KERNEL_DIR", dir, 1);
    fa_status st =
        fa__cuda_compile_check("sm_80", FA__KERNEL_FWD, "-DHEAD_DIM=64", log, sizeof log);
    fa_status st_missing = FA_STATUS_OK;
    unlink(path);
    if (st == FA_STATUS_KERNEL_BUILD_ERROR) /* the folder now has no kernel file */
        st_missing = fa__cuda_compile_check("sm_80", FA__KERNEL_FWD, "-DHEAD_DIM=64", NULL, 0);
    unlink(common);
    unlink(kv);
    rmdir(dir);
    harness_env_restore(&saved);
    assert_int_equal(st, FA_STATUS_KERNEL_BUILD_ERROR);
    assert_non_null(strstr(log, "this_is_not_defined"));
    assert_non_null(strstr(log, "flash_fwd.cu"));
    assert_int_equal(st_missing, FA_STATUS_KERNEL_BUILD_ERROR);
    assert_int_equal(fa__cuda_compile_check("sm_1x", FA__KERNEL_FWD, "", log, sizeof log),
                     FA_STATUS_INVALID_ARGUMENT);
}

static bool nvrtc_required(void)
{
    const char *e = getenv("FLASHATTN_REQUIRE_NVRTC");
    return harness_backend_required(FA_BACKEND_CUDA) || (e && strcmp(e, "1") == 0);
}

int main(void)
{
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_no_driver),
        cmocka_unit_test(test_nvrtc_explicit_path),
        cmocka_unit_test(test_interop_null),
        cmocka_unit_test(test_arch_context),
        cmocka_unit_test(test_backward_plan),
        cmocka_unit_test(test_cpu_still_works),
    };
    const struct CMUnitTest nvrtc_tests[] = {
        cmocka_unit_test(test_compile_error_log), cmocka_unit_test(test_compile_sm75),
        cmocka_unit_test(test_compile_sm80),      cmocka_unit_test(test_compile_sm86),
        cmocka_unit_test(test_compile_sm89),      cmocka_unit_test(test_compile_sm90),
    };
    int failed = cmocka_run_group_tests_name("cuda (no GPU needed)", host_tests, NULL, NULL);
    fa__nvrtc_api nv;
    char why[1024] = "";
    if (fa__nvrtc_load(&nv, 0, why, sizeof why) == OK)
        return failed + cmocka_run_group_tests_name("cuda NVRTC", nvrtc_tests, NULL, NULL);
    if (nvrtc_required()) {
        fprintf(stderr, "FAIL: NVRTC is required (FLASHATTN_REQUIRE_BACKENDS / "
                        "FLASHATTN_REQUIRE_NVRTC) but missing: %s\n", why);
        return 1;
    }
    fprintf(stderr, "SKIP: the NVRTC compile tests: %s\n", why);
    return failed ? 1 : HARNESS_EXIT_SKIPPED;
}
