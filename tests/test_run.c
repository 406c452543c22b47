/*
 * test_run.c - fa_run, the one call that runs a plan, on one backend: each op (forward,
 * backward, merge) through fa_run gives bitwise what its shorthand gives (fa_forward,
 * fa_backward, fa_merge), and the tensors are bound by name: a missing one is NULL_POINTER
 * naming it, one the run does not use is INVALID_ARGUMENT naming it, outputs untouched, and
 * the context stays usable; fa_problem_tensor_bytes gives the sizes it checks; a plan given
 * another dropout seed (fa_plan_set_dropout) runs as one made with it. Run:
 * test_run cpu|opencl|cuda.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flashattn.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK
#define PATTERN 0xA5

static fa_backend the_backend;
static fa_context *ctx;

/* One small causal GQA problem's buffers (f32, BSHD), inputs random, outputs the pattern. */
typedef struct rig {
    fa_problem p;
    fa_buffer *q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv;
    size_t q_bytes, kv_bytes, lse_bytes;
} rig;

static fa_buffer *buffer_of(size_t bytes, harness_rng *rng)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, bytes, &b), OK);
    unsigned char *host = malloc(bytes);
    assert_non_null(host);
    for (size_t i = 0; i < bytes / 4; i++) {
        float x = rng ? (float)harness_rng_uniform(rng, -1.0, 1.0) : 0.0f;
        memcpy(host + 4 * i, &x, 4);
    }
    if (!rng)
        memset(host, PATTERN, bytes);
    assert_int_equal(fa_buffer_write(b, 0, host, bytes), OK);
    free(host);
    return b;
}

static void rig_open(rig *r)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(fa_problem_init(&r->p, FA_DTYPE_F32, FA_LAYOUT_BSHD, 2, 4, 2, 19, 23, 16),
                     OK);
    r->p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    r->q_bytes = 2 * 19 * 4 * 16 * 4;
    r->kv_bytes = 2 * 23 * 2 * 16 * 4;
    r->lse_bytes = 2 * 4 * 19 * 4;
    harness_rng rng;
    harness_rng_seed(&rng, "test_run");
    r->q = buffer_of(r->q_bytes, &rng);
    r->k = buffer_of(r->kv_bytes, &rng);
    r->v = buffer_of(r->kv_bytes, &rng);
    r->d_o = buffer_of(r->q_bytes, &rng);
    r->o = buffer_of(r->q_bytes, NULL);
    r->lse = buffer_of(r->lse_bytes, NULL);
    r->dq = buffer_of(r->q_bytes, NULL);
    r->dk = buffer_of(r->kv_bytes, NULL);
    r->dv = buffer_of(r->kv_bytes, NULL);
}

static void rig_close(rig *r)
{
    fa_buffer *all[] = {r->q, r->k, r->v, r->o, r->lse, r->d_o, r->dq, r->dk, r->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fa_buffer_destroy(all[i]);
}

static unsigned char *read_all(const fa_buffer *b, size_t bytes)
{
    unsigned char *host = malloc(bytes);
    assert_non_null(host);
    assert_int_equal(fa_buffer_read(b, 0, host, bytes), OK);
    return host;
}

static void expect_same(const fa_buffer *a, const fa_buffer *b, size_t bytes, const char *what)
{
    unsigned char *x = read_all(a, bytes), *y = read_all(b, bytes);
    if (memcmp(x, y, bytes) != 0)
        fail_msg("%s: the two runs differ", what);
    free(x);
    free(y);
}

static bool untouched(const fa_buffer *b, size_t bytes)
{
    unsigned char *x = read_all(b, bytes);
    bool same = true;
    for (size_t i = 0; i < bytes; i++)
        same = same && x[i] == PATTERN;
    free(x);
    return same;
}

/* The forward and the backward through fa_run, then again through their shorthands. */
static void test_same_as_shorthands(void **state)
{
    (void)state;
    rig r, s;
    rig_open(&r);
    rig_open(&s);
    fa_plan *fwd = NULL, *bwd = NULL;
    assert_int_equal(fa_plan_create(ctx, &r.p, &fwd), OK);
    assert_int_equal(fa_plan_create_backward(ctx, &r.p, &bwd), OK);
    fa_tensors t = {.q = r.q, .k = r.k, .v = r.v, .o = r.o, .lse = r.lse};
    assert_int_equal(fa_run(ctx, fwd, &t), OK);
    t.d_o = r.d_o;
    t.dq = r.dq;
    t.dk = r.dk;
    t.dv = r.dv;
    assert_int_equal(fa_run(ctx, bwd, &t), OK);
    assert_int_equal(fa_forward(ctx, fwd, s.q, s.k, s.v, s.o, s.lse), OK);
    assert_int_equal(fa_backward(ctx, bwd, s.q, s.k, s.v, s.o, s.lse, s.d_o, s.dq, s.dk, s.dv),
                     OK);
    expect_same(r.o, s.o, r.q_bytes, "o");
    expect_same(r.lse, s.lse, r.lse_bytes, "lse");
    expect_same(r.dq, s.dq, r.q_bytes, "dq");
    expect_same(r.dk, s.dk, r.kv_bytes, "dk");
    expect_same(r.dv, s.dv, r.kv_bytes, "dv");
    /* A merge of one part is that part: fa_run against fa_merge, O and LSE. */
    fa_plan *merge = NULL;
    assert_int_equal(fa_plan_create_merge(ctx, &r.p, 1, &merge), OK);
    fa_tensors m = {.o_parts = r.o, .lse_parts = r.lse, .o = s.dq, .lse = NULL};
    assert_int_equal(fa_run(ctx, merge, &m), OK);
    assert_int_equal(fa_merge(ctx, merge, r.o, r.lse, s.o, NULL), OK);
    expect_same(s.dq, s.o, r.q_bytes, "merged o");
    expect_same(s.o, r.o, r.q_bytes, "one part merged");
    fa_plan_destroy(merge);
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    rig_close(&r);
    rig_close(&s);
}

/* fa_run's status and message for t, with the forward's outputs left untouched. */
static void expect_refused(fa_plan *plan, const fa_tensors *t, const rig *r, fa_status want,
                           const char *name)
{
    fa_status st = fa_run(ctx, plan, t);
    if (st != want || !strstr(fa_context_last_error(ctx), name))
        fail_msg("fa_run (%s): %s \"%s\", want %s naming it", name, fa_status_name(st),
                 fa_context_last_error(ctx), fa_status_name(want));
    assert_true(untouched(r->o, r->q_bytes) && untouched(r->lse, r->lse_bytes));
}

static void test_tensors_by_name(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    fa_plan *fwd = NULL;
    assert_int_equal(fa_plan_create(ctx, &r.p, &fwd), OK);
    fa_tensors t = {.q = r.q, .k = r.k, .v = r.v, .o = r.o, .lse = r.lse};
    assert_int_equal(fa_run(NULL, fwd, &t), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_run(ctx, NULL, &t), FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_run(ctx, fwd, NULL), FA_STATUS_NULL_POINTER);
    fa_tensors bad = t;
    bad.v = NULL;
    expect_refused(fwd, &bad, &r, FA_STATUS_NULL_POINTER, "v");
    bad = t;
    bad.dq = r.dq;
    expect_refused(fwd, &bad, &r, FA_STATUS_INVALID_ARGUMENT, "dq");
    bad = t;
    bad.sinks = r.dq;
    expect_refused(fwd, &bad, &r, FA_STATUS_INVALID_ARGUMENT, "sinks");
    bad = t;
    bad.block_table = r.dq;
    expect_refused(fwd, &bad, &r, FA_STATUS_INVALID_ARGUMENT, "block_table");
    bad = t;
    bad.o_parts = r.dq;
    expect_refused(fwd, &bad, &r, FA_STATUS_INVALID_ARGUMENT, "o_parts");
    bad = t;
    bad.o = r.q; /* O over Q */
    expect_refused(fwd, &bad, &r, FA_STATUS_INVALID_ARGUMENT, "overlaps");
    /* The context stays usable, and an optional LSE may be left out. */
    t.lse = NULL;
    assert_int_equal(fa_run(ctx, fwd, &t), OK);
    assert_string_equal(fa_context_last_error(ctx), "");
    fa_plan_destroy(fwd);
    rig_close(&r);
}

/* fa_problem_tensor_bytes gives the sizes fa_run checks: the rig's exact buffers, one byte
 * less refused; a varlen problem's packed rows; bad arguments. */
static void test_tensor_bytes(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    const struct {
        fa_tensor_id id;
        size_t want;
    } sizes[] = {{FA_TENSOR_Q, r.q_bytes}, {FA_TENSOR_K, r.kv_bytes}, {FA_TENSOR_V, r.kv_bytes},
                 {FA_TENSOR_O, r.q_bytes}, {FA_TENSOR_LSE, r.lse_bytes},
                 {FA_TENSOR_DO, r.q_bytes}, {FA_TENSOR_DK, r.kv_bytes},
                 {FA_TENSOR_SINKS, 4 * 4}, {FA_TENSOR_CU_SEQLENS_Q, 3 * 4}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t bytes = 0;
        assert_int_equal(fa_problem_tensor_bytes(&r.p, sizes[i].id, 0, 0, &bytes), OK);
        assert_int_equal(bytes, sizes[i].want);
    }
    fa_plan *fwd = NULL;
    assert_int_equal(fa_plan_create(ctx, &r.p, &fwd), OK);
    fa_buffer *short_o = NULL;
    assert_int_equal(fa_buffer_create(ctx, r.q_bytes - 1, &short_o), OK);
    fa_tensors t = {.q = r.q, .k = r.k, .v = r.v, .o = short_o};
    assert_int_equal(fa_run(ctx, fwd, &t), FA_STATUS_BUFFER_TOO_SMALL);
    fa_buffer_destroy(short_o);
    fa_plan_destroy(fwd);
    /* varlen: Q [packed_q, heads_q, d], LSE [heads_q, packed_q] */
    fa_problem v = r.p;
    v.varlen = 1;
    v.mask = FA_MASK_NONE;
    uint64_t q = 0, lse = 0;
    assert_int_equal(fa_problem_tensor_bytes(&v, FA_TENSOR_Q, 30, 40, &q), OK);
    assert_int_equal(fa_problem_tensor_bytes(&v, FA_TENSOR_LSE, 30, 40, &lse), OK);
    assert_int_equal(q, 30 * 4 * 16 * 4);
    assert_int_equal(lse, 4 * 30 * 4);
    assert_int_equal(fa_problem_tensor_bytes(&v, FA_TENSOR_Q, -1, 40, &q),
                     FA_STATUS_INVALID_SEQLENS);
    assert_int_equal(fa_problem_tensor_bytes(&r.p, (fa_tensor_id)99, 0, 0, &q),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_problem_tensor_bytes(NULL, FA_TENSOR_Q, 0, 0, &q),
                     FA_STATUS_NULL_POINTER);
    v.head_dim = 0;
    assert_int_equal(fa_problem_tensor_bytes(&v, FA_TENSOR_Q, 30, 40, &q),
                     FA_STATUS_INVALID_SHAPE);
    rig_close(&r);
}

/* Host arrays wrapped where the backend can (cpu; OpenCL on a CPU device): the forward and the
 * backward on them give bitwise what created buffers give, the host sees the outputs without a
 * read, and a change to an input array is seen by the next run. Elsewhere (a GPU) the wrap is
 * UNSUPPORTED with a message. */
static void test_wrap_host(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    float *host[9];
    const fa_buffer *from[9] = {r.q, r.k, r.v, r.d_o, r.o, r.lse, r.dq, r.dk, r.dv};
    const size_t bytes[9] = {r.q_bytes,   r.kv_bytes,  r.kv_bytes, r.q_bytes, r.q_bytes,
                             r.lse_bytes, r.q_bytes,   r.kv_bytes, r.kv_bytes};
    fa_buffer *w[9] = {NULL};
    for (int i = 0; i < 9; i++)
        host[i] = (float *)read_all(from[i], bytes[i]);
    fa_status st = fa_buffer_wrap_host(ctx, host[0], bytes[0], &w[0]);
    fa_device_props props;
    assert_int_equal(fa_context_device_props(ctx, &props), OK);
    if (the_backend != FA_BACKEND_CUDA && !props.gpu)
        assert_int_equal(st, OK); /* host memory is the device's memory */
    if (st != OK) {
        assert_int_equal(st, FA_STATUS_UNSUPPORTED);
        assert_true(strlen(fa_context_last_error(ctx)) > 0);
    }
    for (int i = 1; i < 9 && st == OK; i++)
        assert_int_equal(fa_buffer_wrap_host(ctx, host[i], bytes[i], &w[i]), OK);
    fa_plan *fwd = NULL, *bwd = NULL;
    assert_int_equal(fa_plan_create(ctx, &r.p, &fwd), OK);
    assert_int_equal(fa_plan_create_backward(ctx, &r.p, &bwd), OK);
    for (int pass = 0; pass < 2 && st == OK; pass++) {
        if (pass == 1) { /* a new Q in the host array and in the created buffer */
            for (size_t i = 0; i < r.q_bytes / 4; i++)
                host[0][i] = 0.5f - host[0][i];
            assert_int_equal(fa_buffer_write(r.q, 0, host[0], r.q_bytes), OK);
        }
        fa_tensors t = {.q = r.q, .k = r.k, .v = r.v, .o = r.o, .lse = r.lse};
        fa_tensors h = {.q = w[0], .k = w[1], .v = w[2], .o = w[4], .lse = w[5]};
        assert_int_equal(fa_run(ctx, fwd, &t), OK);
        assert_int_equal(fa_run(ctx, fwd, &h), OK);
        /* Wrapped inputs, created outputs: the run still waits for the views (the outputs are
         * rewritten with the same bits, compared below). */
        fa_tensors m = {.q = w[0], .k = w[1], .v = w[2], .o = r.o, .lse = r.lse};
        assert_int_equal(fa_run(ctx, fwd, &m), OK);
        t = (fa_tensors){.q = r.q, .k = r.k, .v = r.v, .o = r.o, .lse = r.lse, .d_o = r.d_o,
                         .dq = r.dq, .dk = r.dk, .dv = r.dv};
        h = (fa_tensors){.q = w[0], .k = w[1], .v = w[2], .d_o = w[3], .o = w[4], .lse = w[5],
                         .dq = w[6], .dk = w[7], .dv = w[8]};
        assert_int_equal(fa_run(ctx, bwd, &t), OK);
        assert_int_equal(fa_run(ctx, bwd, &h), OK);
        for (int i = 4; i < 9; i++) {
            unsigned char *want = read_all(from[i], bytes[i]);
            if (memcmp(want, host[i], bytes[i]) != 0)
                fail_msg("pass %d: output %d on wrapped host arrays differs from created buffers",
                         pass, i);
            free(want);
        }
    }
    fa_plan_destroy(fwd);
    fa_plan_destroy(bwd);
    for (int i = 0; i < 9; i++) {
        fa_buffer_destroy(w[i]);
        free(host[i]);
    }
    rig_close(&r);
}

/* fa_plan_set_dropout: a plan given another seed and offset runs bitwise as a plan made with
 * them, forward and backward; the seed matters (other bits); a plan without dropout refuses. */
static void test_set_dropout(void **state)
{
    (void)state;
    rig r, s, u;
    rig_open(&r);
    rig_open(&s);
    rig_open(&u);
    r.p.dropout_p = 0.25f, r.p.dropout_seed = 5, r.p.dropout_offset = 3;
    s.p = r.p;
    s.p.dropout_seed = 0x900000009ull, s.p.dropout_offset = 4;
    fa_plan *fa = NULL, *fb = NULL, *ba = NULL, *bb = NULL;
    assert_int_equal(fa_plan_create(ctx, &r.p, &fa), OK);
    assert_int_equal(fa_plan_create(ctx, &s.p, &fb), OK);
    assert_int_equal(fa_plan_create_backward(ctx, &r.p, &ba), OK);
    assert_int_equal(fa_plan_create_backward(ctx, &s.p, &bb), OK);
    rig *by[3] = {&r, &s, &u};
    fa_plan *fwd[3] = {fa, fb, fa}, *bwd[3] = {ba, bb, ba};
    for (int i = 0; i < 3; i++) {
        if (i == 2) { /* u: the first plans given s's seed and offset */
            assert_int_equal(fa_plan_set_dropout(fa, s.p.dropout_seed, s.p.dropout_offset), OK);
            assert_int_equal(fa_plan_set_dropout(ba, s.p.dropout_seed, s.p.dropout_offset), OK);
        }
        rig *x = by[i];
        fa_tensors t = {.q = x->q, .k = x->k, .v = x->v, .o = x->o, .lse = x->lse,
                        .d_o = x->d_o, .dq = x->dq, .dk = x->dk, .dv = x->dv};
        assert_int_equal(fa_run(ctx, fwd[i], &(fa_tensors){.q = t.q, .k = t.k, .v = t.v,
                                                           .o = t.o, .lse = t.lse}), OK);
        assert_int_equal(fa_run(ctx, bwd[i], &t), OK);
    }
    unsigned char *o_r = read_all(r.o, r.q_bytes), *o_s = read_all(s.o, r.q_bytes);
    if (memcmp(o_r, o_s, r.q_bytes) == 0)
        fail_msg("two seeds gave the same O: the seed does not reach the run");
    free(o_r);
    free(o_s);
    expect_same(u.o, s.o, r.q_bytes, "o of the re-seeded plan");
    expect_same(u.dq, s.dq, r.q_bytes, "dq of the re-seeded plan");
    expect_same(u.dk, s.dk, r.kv_bytes, "dk of the re-seeded plan");
    expect_same(u.dv, s.dv, r.kv_bytes, "dv of the re-seeded plan");
    assert_true(fa_plan_problem(fa)->dropout_seed == s.p.dropout_seed);
    assert_int_equal(fa_plan_problem(ba)->dropout_offset, 4);
    fa_plan *plain = NULL;
    rig_close(&u);
    rig_open(&u);
    assert_int_equal(fa_plan_create(ctx, &u.p, &plain), OK);
    assert_int_equal(fa_plan_set_dropout(plain, 1, 1), FA_STATUS_INVALID_PLAN);
    assert_non_null(strstr(fa_context_last_error(ctx), "no dropout"));
    assert_int_equal(fa_plan_problem(plain)->dropout_seed, 0);
    assert_int_equal(fa_plan_set_dropout(NULL, 1, 1), FA_STATUS_NULL_POINTER);
    fa_plan *all[] = {fa, fb, ba, bb, plain};
    for (int i = 0; i < 5; i++)
        fa_plan_destroy(all[i]);
    rig_close(&r);
    rig_close(&s);
    rig_close(&u);
}

static int open_context(void **state)
{
    (void)state;
    char why[600] = "";
    fa_context_options opts = {the_backend, 0};
    return fa_context_create(&ctx, &opts, why, sizeof why) == OK ? 0 : -1;
}

static int close_context(void **state)
{
    (void)state;
    fa_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = harness_single_backend(argc, argv, "test_run", &the_backend);
    if (rc >= 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_shorthands),
        cmocka_unit_test(test_tensors_by_name),
        cmocka_unit_test(test_tensor_bytes),
        cmocka_unit_test(test_wrap_host),
        cmocka_unit_test(test_set_dropout),
    };
    return cmocka_run_group_tests_name(fa_backend_name(the_backend), tests, open_context,
                                       close_context);
}
