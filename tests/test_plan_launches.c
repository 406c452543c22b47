/*
 * test_plan_launches.c - what a plan says of its launches (fa_plan_launch_count, fa_plan_launch)
 * against what the header documents: every launch's grid from its kernel, its tiles and the
 * problem (packed decodes and the dK/dV pass that owns Br keys included), and
 * fa_plan_work_groups as their sum. Run per backend: test_plan_launches cpu|opencl|cuda.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn.h"
#include "harness.h"

#include <stdio.h>
#include <string.h>

#define OK FA_STATUS_OK

static fa_context *the_ctx;
static fa_backend the_backend;

typedef struct launch_case {
    const char *name;
    bool backward;
    fa_dtype dtype;
    fa_layout layout;
    int64_t batch, hq, hkv, sq, sk, d;
    int64_t page_size; /* 0: not paged */
    int32_t kv_splits;
    int32_t sinks;
} launch_case;

static const launch_case cases[] = {
    {"forward", false, FA_DTYPE_F32, FA_LAYOUT_BHSD, 2, 4, 4, 200, 300, 64, 0, 0, 0},
    {"forward split in 4", false, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 8, 1000, 64, 0, 4, 0},
    {"GQA decode", false, FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 32, 8, 1, 8192, 128, 0, 0, 0},
    {"paged decode", false, FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, 32, 8, 1, 8192, 128, 16, 0, 0},
    {"paged decode split in 3", false, FA_DTYPE_F32, FA_LAYOUT_BSHD, 2, 8, 2, 1, 500, 64, 16, 3,
     0},
    {"backward d64", true, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 2, 2, 256, 256, 64, 0, 0, 0},
    {"backward d128 GQA", true, FA_DTYPE_F16, FA_LAYOUT_BSHD, 2, 8, 2, 300, 200, 128, 0, 0, 0},
    {"backward d256 sinks", true, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 3, 1, 97, 113, 256, 0, 0, 1},
};

static uint64_t ceil_div(int64_t a, int64_t b)
{
    return (uint64_t)((a + b - 1) / b);
}

/* The heads and rows per head a forward's kernel runs, as fa_plan_work_groups documents. */
static void forward_rows(const fa_plan *plan, int64_t *heads, int64_t *rows)
{
    const fa_problem *p = fa_plan_problem(plan);
    const char *explain = fa_plan_explain(plan);
    *heads = p->heads_q;
    *rows = p->seqlen_q;
    if (strstr(explain, "heads packing:")) {
        *heads = 1;
        *rows = p->heads_q;
    } else if (strstr(explain, "GQA packing:")) {
        *heads = p->heads_kv;
        *rows = p->heads_q / p->heads_kv * p->seqlen_q;
    }
}

/* The grid the header documents for one launch of the plan. */
static uint64_t documented_groups(const fa_plan *plan, const fa_plan_launch_info *l)
{
    const fa_problem *p = fa_plan_problem(plan);
    const uint64_t b = (uint64_t)p->batch;
    if (strcmp(l->kernel, "flash_fwd") == 0 || strcmp(l->kernel, "flash_merge") == 0) {
        int64_t heads, rows;
        forward_rows(plan, &heads, &rows);
        uint64_t chunks = strcmp(l->kernel, "flash_fwd") == 0 ? (uint64_t)fa_plan_kv_splits(plan)
                                                              : 1;
        return b * (uint64_t)heads * ceil_div(rows, l->block_r) * chunks;
    }
    if (strcmp(l->kernel, "flash_bwd_pre") == 0 || strcmp(l->kernel, "flash_bwd_dq") == 0)
        return b * (uint64_t)p->heads_q * ceil_div(p->seqlen_q, l->block_r);
    if (strcmp(l->kernel, "flash_bwd_dkdv") == 0)
        return b * (uint64_t)p->heads_kv * ceil_div(p->seqlen_k, l->block_r);
    if (strcmp(l->kernel, "flash_bwd_dsinks") == 0)
        return (uint64_t)p->heads_q;
    if (strcmp(l->kernel, "flash_bwd") == 0) /* the cpu golden */
        return b * (uint64_t)p->heads_kv;
    fail_msg("launch of an undocumented kernel %s", l->kernel);
    return 0;
}

static fa_plan *plan_of(const launch_case *c)
{
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, c->dtype, c->layout, c->batch, c->hq, c->hkv, c->sq,
                                     c->sk, c->d),
                     OK);
    if (c->page_size > 0) {
        int64_t per = (c->sk + c->page_size - 1) / c->page_size;
        assert_int_equal(fa_problem_set_paged(&p, c->page_size, c->batch * per, per), OK);
        p.seqlens_k = 1;
    }
    p.kv_splits = c->kv_splits;
    p.sinks = c->sinks;
    fa_plan *plan = NULL;
    fa_status st = c->backward ? fa_plan_create_backward(the_ctx, &p, &plan)
                               : fa_plan_create(the_ctx, &p, &plan);
    if (st != OK)
        fail_msg("%s: plan: %s", c->name, fa_context_last_error(the_ctx));
    return plan;
}

static void test_case(void **state)
{
    const launch_case *c = *state;
    fa_plan *plan = plan_of(c);
    int32_t n = fa_plan_launch_count(plan);
    assert_true(n >= 1);
    uint64_t sum = 0;
    for (int32_t i = 0; i < n; i++) {
        fa_plan_launch_info l;
        assert_int_equal(fa_plan_launch(plan, i, &l), OK);
        assert_non_null(l.kernel);
        assert_true(l.block_r >= 1 && l.block_c >= 1 && l.work_group_size >= 1);
        uint64_t groups = l.grid[0] * l.grid[1] * l.grid[2];
        uint64_t want = documented_groups(plan, &l);
        printf("  %-24s launch %d %-16s Br %3d Bc %3d grid %llu x %llu x %llu\n", c->name,
               (int)i, l.kernel, (int)l.block_r, (int)l.block_c,
               (unsigned long long)l.grid[0], (unsigned long long)l.grid[1],
               (unsigned long long)l.grid[2]);
        if (groups != want)
            fail_msg("%s: launch %d (%s) runs %llu work-groups, the header documents %llu",
                     c->name, (int)i, l.kernel, (unsigned long long)groups,
                     (unsigned long long)want);
        sum += groups;
    }
    assert_int_equal(fa_plan_work_groups(plan), sum);
    fa_plan_launch_info l;
    assert_int_equal(fa_plan_launch(plan, n, &l), FA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fa_context_last_error(the_ctx), "launch"));
    assert_int_equal(fa_plan_launch(plan, -1, &l), FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_plan_launch(plan, 0, NULL), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_plan_launch(NULL, 0, &l), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_plan_launch_count(NULL), 0);
    fa_plan_destroy(plan);
}

static int open_context(void **state)
{
    (void)state;
    char why[600] = "";
    fa_context_options opts = {the_backend, 0};
    return fa_context_create(&the_ctx, &opts, why, sizeof why) == OK ? 0 : -1;
}

static int close_context(void **state)
{
    (void)state;
    fa_context_destroy(the_ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_plan_launches", &the_backend);
    if (rc >= 0)
        return rc;
    enum { N = sizeof cases / sizeof cases[0] };
    struct CMUnitTest tests[N];
    for (size_t i = 0; i < N; i++) {
        struct CMUnitTest t = {cases[i].name, test_case, NULL, NULL, (void *)&cases[i]};
        tests[i] = t;
    }
    return cmocka_run_group_tests_name(fa_backend_name(the_backend), tests, open_context,
                                       close_context);
}
