/*
 * test_invalid.c - the invalid-argument suite: for every entry point and every tensor, one bad
 * thing at a time. Each must return its own status, name the problem in fa_context_last_error,
 * leave the outputs untouched, and leave the context usable (a valid forward right after
 * succeeds and clears the message). Runs on one backend per process:
 *
 *   test_invalid [cpu|opencl|cuda]
 *
 * Backend-independent checks (context creation, environment, names) run in the cpu process;
 * they and the device-index checks are in test_invalid_context.c.
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fa_backend iv_backend = FA_BACKEND_CPU;
char iv_skip_reason[600];
harness_decision iv_decision;

/* A valid problem with exact-size buffers and a plan: the "context still works" probe. */
typedef struct rig {
    fa_problem p;
    fa_plan *plan;
    fa_buffer *q, *k, *v, *o, *lse;
    size_t bytes[5]; /* exact sizes of q, k, v, o, lse */
} rig;

typedef struct fixture {
    fa_context *ctx;
    rig base;
} fixture;

/* Whether the context wraps host memory: the cpu backend, and OpenCL where the device is not a
 * GPU (its memory is host memory). */
static bool wraps_host(fa_context *c)
{
    fa_device_props props;
    assert_int_equal(fa_context_device_props(c, &props), OK);
    return iv_backend == FA_BACKEND_CPU || (iv_backend == FA_BACKEND_OPENCL && !props.gpu);
}

/* ---- the valid problem ------------------------------------------------------------------ */

/* f16 (so "one element" is 2 bytes), GQA, padded strides and nonzero offsets everywhere. */
static void valid_problem(fa_problem *p)
{
    fa_problem_init(p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 2, 4, 2, 5, 7, 16);
    fa_tensor_layout *t[4] = {&p->q, &p->k, &p->v, &p->o};
    const int64_t seq[4] = {5, 7, 7, 5}, heads[4] = {4, 2, 2, 4};
    for (int i = 0; i < 4; i++) {
        t[i]->offset = 3 + i;
        t[i]->stride_seq = 16 + 1 + i;
        t[i]->stride_head = seq[i] * t[i]->stride_seq + 2;
        t[i]->stride_batch = heads[i] * t[i]->stride_head + 5;
    }
}

/* The bytes a tensor spans: its last element's offset + 1, computed here on purpose rather than
 * asked of the library (fa_problem_tensor_bytes), so that the "one element too small" checks
 * test the library's sizes against an independent count; rig_open checks that both agree. */
static size_t extent_bytes(const fa_problem *p, const fa_tensor_layout *t, int64_t heads,
                           int64_t seq)
{
    int64_t e = t->offset + (p->batch - 1) * t->stride_batch + (heads - 1) * t->stride_head +
                (seq - 1) * t->stride_seq + p->head_dim;
    return (size_t)e * fa_dtype_size(p->dtype);
}

static fa_buffer *make_buffer(fa_context *ctx, size_t bytes, int fill)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, bytes, &b), OK);
    unsigned char *host = malloc(bytes);
    assert_non_null(host);
    memset(host, fill, bytes);
    assert_int_equal(fa_buffer_write(b, 0, host, bytes), OK);
    free(host);
    return b;
}

static void rig_open(fa_context *ctx, rig *r, const fa_problem *p)
{
    memset(r, 0, sizeof *r);
    r->p = *p;
    assert_int_equal(fa_plan_create(ctx, p, &r->plan), OK);
    r->bytes[0] = extent_bytes(p, &p->q, p->heads_q, p->seqlen_q);
    r->bytes[1] = extent_bytes(p, &p->k, p->heads_kv, p->seqlen_k);
    r->bytes[2] = extent_bytes(p, &p->v, p->heads_kv, p->seqlen_k);
    r->bytes[3] = extent_bytes(p, &p->o, p->heads_q, p->seqlen_q);
    r->bytes[4] = (size_t)(p->batch * p->heads_q * p->seqlen_q) * 4;
    static const fa_tensor_id ids[5] = {FA_TENSOR_Q, FA_TENSOR_K, FA_TENSOR_V, FA_TENSOR_O,
                                        FA_TENSOR_LSE};
    for (int i = 0; i < 5; i++) {
        uint64_t lib = 0;
        assert_int_equal(fa_problem_tensor_bytes(p, ids[i], 0, 0, &lib), OK);
        assert_int_equal(lib, r->bytes[i]);
    }
    /* Zero inputs are valid numbers in every dtype; outputs start as the pattern. */
    r->q = make_buffer(ctx, r->bytes[0], 0);
    r->k = make_buffer(ctx, r->bytes[1], 0);
    r->v = make_buffer(ctx, r->bytes[2], 0);
    r->o = make_buffer(ctx, r->bytes[3], OUT_PATTERN);
    r->lse = make_buffer(ctx, r->bytes[4], OUT_PATTERN);
}

static void rig_close(rig *r)
{
    fa_buffer *all[5] = {r->q, r->k, r->v, r->o, r->lse};
    for (int i = 0; i < 5; i++)
        fa_buffer_destroy(all[i]);
    fa_plan_destroy(r->plan);
}

/* True when every byte of the buffer still holds OUT_PATTERN. */
static bool untouched(const fa_buffer *b)
{
    size_t n = fa_buffer_size(b);
    unsigned char *host = malloc(n);
    assert_non_null(host);
    assert_int_equal(fa_buffer_read(b, 0, host, n), OK);
    size_t i = 0;
    while (i < n && host[i] == OUT_PATTERN)
        i++;
    free(host);
    return i == n;
}

static void refill(fa_buffer *b)
{
    size_t n = fa_buffer_size(b);
    unsigned char *host = malloc(n);
    assert_non_null(host);
    memset(host, OUT_PATTERN, n);
    assert_int_equal(fa_buffer_write(b, 0, host, n), OK);
    free(host);
}

/* ---- fixture ---------------------------------------------------------------------------- */

static fixture *fixture_open(void)
{
    if (iv_decision == HARNESS_FAIL)
        fail_msg("%s", iv_skip_reason);
    if (iv_decision == HARNESS_SKIP) {
        print_message("  %s\n", iv_skip_reason);
        skip();
    }
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    fa_context_options opts = {iv_backend, 0};
    char why[512] = "";
    assert_int_equal(fa_context_create(&fx->ctx, &opts, why, sizeof why), OK);
    fa_problem p;
    valid_problem(&p);
    rig_open(fx->ctx, &fx->base, &p);
    return fx;
}

static void fixture_close(fixture *fx)
{
    rig_close(&fx->base);
    fa_context_destroy(fx->ctx);
    free(fx);
}

/* The context still works: a valid forward succeeds and clears the last error. */
static void expect_usable(fixture *fx, const char *after, int line)
{
    rig *r = &fx->base;
    fa_status st = fa_forward(fx->ctx, r->plan, r->q, r->k, r->v, r->o, r->lse);
    if (st != OK)
        fail_msg("line %d: after %s, a valid fa_forward returned %s: %s", line, after,
                 fa_status_name(st), fa_context_last_error(fx->ctx));
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    refill(r->o);
    refill(r->lse);
}

/*
 * One rejected call: its status, a message that names the problem (keyword, may be NULL), and
 * a context that still works.
 */
static void expect_status(fixture *fx, fa_status st, fa_status want, const char *keyword,
                          const char *call, int line)
{
    if (st != want)
        fail_msg("line %d: %s returned %s, want %s (last error: \"%s\")", line, call,
                 fa_status_name(st), fa_status_name(want),
                 fx ? fa_context_last_error(fx->ctx) : "");
    if (!fx || want == OK)
        return;
    const char *msg = fa_context_last_error(fx->ctx);
    if (msg[0] == '\0' || (keyword && !strstr(msg, keyword)))
        fail_msg("line %d: %s: last error \"%s\" does not name \"%s\"", line, call, msg,
                 keyword ? keyword : "anything");
    expect_usable(fx, call, line);
}

#define EXPECT(fx, call, want, keyword) expect_status(fx, (call), want, keyword, #call, __LINE__)

/* ---- NULL pointers ---------------------------------------------------------------------- */

static void test_null_pointers(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    fa_context *ctx = fx->ctx;
    rig *r = &fx->base;
    fa_buffer *buf = NULL;
    fa_plan *plan = NULL;
    unsigned char host[8] = {0};
    EXPECT(NULL, fa_buffer_create(NULL, 16, &buf), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_buffer_create(ctx, 16, NULL), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_buffer_wrap_host(NULL, host, 8, &buf), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_buffer_write(NULL, 0, host, 4), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_buffer_write(r->q, 0, NULL, 4), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_buffer_read(NULL, 0, host, 4), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_buffer_read(r->q, 0, NULL, 4), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_problem_check(NULL, &r->p), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_problem_check(ctx, NULL), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_plan_create(NULL, &r->p, &plan), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_plan_create(ctx, NULL, &plan), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_plan_create(ctx, &r->p, NULL), FA_STATUS_NULL_POINTER, NULL);
    assert_null(buf);
    assert_null(plan);
    /* fa_forward: every pointer but lse is required; outputs stay untouched. */
    EXPECT(NULL, fa_forward(NULL, r->plan, r->q, r->k, r->v, r->o, r->lse),
           FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_forward(ctx, NULL, r->q, r->k, r->v, r->o, r->lse), FA_STATUS_NULL_POINTER,
           NULL);
    EXPECT(fx, fa_forward(ctx, r->plan, NULL, r->k, r->v, r->o, r->lse),
           FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_forward(ctx, r->plan, r->q, NULL, r->v, r->o, r->lse),
           FA_STATUS_NULL_POINTER, NULL);
    EXPECT(fx, fa_forward(ctx, r->plan, r->q, r->k, NULL, r->o, r->lse),
           FA_STATUS_NULL_POINTER, NULL);
    assert_true(untouched(r->o) && untouched(r->lse));
    EXPECT(fx, fa_forward(ctx, r->plan, r->q, r->k, r->v, NULL, r->lse),
           FA_STATUS_NULL_POINTER, NULL);
    assert_true(untouched(r->lse));
    EXPECT(fx, fa_forward(ctx, r->plan, r->q, r->k, r->v, r->o, NULL), OK, NULL);
    assert_true(untouched(r->lse));
    fa_device_props props;
    EXPECT(NULL, fa_context_device_props(NULL, &props), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_context_device_props(ctx, NULL), FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_backend_device_count(iv_backend, NULL, NULL, 0), FA_STATUS_NULL_POINTER,
           NULL);
    EXPECT(NULL, fa_backend_device_props(iv_backend, 0, NULL, NULL, 0),
           FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_problem_init(NULL, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, 1, 1, 16),
           FA_STATUS_NULL_POINTER, NULL);
    EXPECT(NULL, fa_problem_set_layout(NULL, FA_LAYOUT_BSHD), FA_STATUS_NULL_POINTER, NULL);
    /* Destroying NULL is a no-op; sizes of NULL are 0. */
    fa_buffer_destroy(NULL);
    fa_plan_destroy(NULL);
    fa_context_destroy(NULL);
    assert_int_equal(fa_buffer_size(NULL), 0);
    assert_non_null(fa_context_last_error(NULL));
    fixture_close(fx);
}

/* ---- problem fields --------------------------------------------------------------------- */

typedef enum field_kind { F_I64, F_INT, F_FLOAT } field_kind;

/* One bad value for one field of the valid problem, and what it must give. */
typedef struct bad_field {
    const char *field; /* also the keyword the message must contain */
    size_t offset;
    field_kind kind;
    double value;
    fa_status want;
} bad_field;

#define FIELD(name, kind, value, status)                                                        \
    {#name, offsetof(fa_problem, name), kind, value, FA_STATUS_##status}

static const bad_field bad_fields[] = {
    FIELD(dtype, F_INT, 3, UNSUPPORTED_DTYPE),
    FIELD(dtype, F_INT, -1, UNSUPPORTED_DTYPE),
    FIELD(batch, F_I64, -1, INVALID_SHAPE),
    FIELD(seqlen_q, F_I64, -1, INVALID_SHAPE),
    FIELD(seqlen_k, F_I64, -1, INVALID_SHAPE),
    FIELD(heads_q, F_I64, 0, INVALID_SHAPE),
    FIELD(heads_kv, F_I64, 0, INVALID_SHAPE),
    FIELD(heads_kv, F_I64, -2, INVALID_SHAPE),
    FIELD(head_dim, F_I64, 0, INVALID_SHAPE),
    FIELD(head_dim, F_I64, -16, INVALID_SHAPE),
    FIELD(batch, F_I64, 9.2233720368547758e18, INVALID_SHAPE), /* ~INT64_MAX */
    FIELD(head_dim, F_I64, 257, UNSUPPORTED_HEAD_DIM),
    FIELD(head_dim, F_I64, 512, UNSUPPORTED_HEAD_DIM),
    FIELD(heads_kv, F_I64, 3, HEADS_MISMATCH),
    FIELD(heads_kv, F_I64, 8, HEADS_MISMATCH), /* more KV heads than query heads */
    FIELD(mask, F_INT, 3, INVALID_MASK),
    FIELD(mask, F_INT, -1, INVALID_MASK),
    FIELD(scale, F_FLOAT, NAN, INVALID_SCALE),
    FIELD(scale, F_FLOAT, INFINITY, INVALID_SCALE),
    FIELD(scale, F_FLOAT, -INFINITY, INVALID_SCALE),
    FIELD(block_r, F_INT, -1, INVALID_TILE),
    FIELD(block_c, F_INT, -1, INVALID_TILE),
    FIELD(block_r, F_INT, 65537, INVALID_TILE),
    FIELD(block_c, F_INT, 65537, INVALID_TILE),
};

static void set_field(fa_problem *p, const bad_field *f)
{
    char *at = (char *)p + f->offset;
    if (f->kind == F_I64) {
        int64_t v = f->value >= 9.2e18 ? INT64_MAX : (int64_t)f->value;
        memcpy(at, &v, sizeof v);
    } else if (f->kind == F_INT) {
        int v = (int)f->value; /* enums and int32_t fields are int-sized here */
        memcpy(at, &v, sizeof v);
    } else {
        float v = (float)f->value;
        memcpy(at, &v, sizeof v);
    }
}

/* fa_problem_check and fa_plan_create must both reject it, and create no plan. */
static void expect_rejected(fixture *fx, const fa_problem *p, fa_status want, const char *kw,
                            const char *what, int line)
{
    char call[160];
    snprintf(call, sizeof call, "fa_problem_check(%s)", what);
    expect_status(fx, fa_problem_check(fx->ctx, p), want, kw, call, line);
    fa_plan *plan = NULL;
    snprintf(call, sizeof call, "fa_plan_create(%s)", what);
    expect_status(fx, fa_plan_create(fx->ctx, p, &plan), want, kw, call, line);
    if (plan != NULL)
        fail_msg("line %d: %s made a plan although it failed", line, call);
}

static void test_problem_fields(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    for (size_t i = 0; i < sizeof bad_fields / sizeof bad_fields[0]; i++) {
        const bad_field *f = &bad_fields[i];
        fa_problem p;
        valid_problem(&p);
        set_field(&p, f);
        char what[64];
        snprintf(what, sizeof what, "%s = %g", f->field, f->value);
        /* A tile message may name block_r or Br; the shape fields must be named exactly. */
        const char *kw = f->want == FA_STATUS_INVALID_TILE ? NULL : f->field;
        if (f->want == FA_STATUS_HEADS_MISMATCH)
            kw = "heads";
        expect_rejected(fx, &p, f->want, kw, what, __LINE__);
    }
    /* Legal edge values: a negative finite scale, inputs broadcast with stride 0. */
    fa_problem p;
    valid_problem(&p);
    p.scale = -0.25f;
    EXPECT(fx, fa_problem_check(fx->ctx, &p), OK, NULL);
    p.q.stride_seq = 0;
    p.k.stride_batch = 0;
    p.v.stride_head = 0;
    EXPECT(fx, fa_problem_check(fx->ctx, &p), OK, NULL);
    fa_plan *plan = NULL;
    EXPECT(fx, fa_plan_create(fx->ctx, &p, &plan), OK, NULL);
    fa_plan_destroy(plan);
    EXPECT(NULL, fa_problem_init(&p, FA_DTYPE_F32, (fa_layout)7, 1, 1, 1, 1, 1, 16),
           FA_STATUS_INVALID_ARGUMENT, NULL);
    EXPECT(NULL, fa_problem_set_layout(&p, (fa_layout)-1), FA_STATUS_INVALID_ARGUMENT, NULL);
    fixture_close(fx);
}

/* Sizes each valid alone whose products pass int64 must be rejected, not wrapped. */
static void test_overflowing_shapes(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    const int64_t big = (int64_t)1 << 30;
    fa_problem p;
    /* fa_problem_init accepts any sizes (shapes are checked later) and must not overflow. */
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, big, big, big, big, big,
                                     64), OK);
    expect_rejected(fx, &p, FA_STATUS_INVALID_SHAPE, NULL, "2^30 everywhere, bhsd", __LINE__);
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BSHD, 1, big, 1, big, 1, 256),
                     OK);
    expect_rejected(fx, &p, FA_STATUS_INVALID_SHAPE, NULL, "2^30 heads and seq, bshd",
                    __LINE__);
    valid_problem(&p);
    p.heads_q = (int64_t)1 << 40;
    p.heads_kv = 1;
    expect_rejected(fx, &p, FA_STATUS_INVALID_SHAPE, NULL, "heads_q = 2^40", __LINE__);
    fixture_close(fx);
}

/* ---- strides and offsets ---------------------------------------------------------------- */

static void test_strides(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    static const char *const tensors[4] = {"q", "k", "v", "o"};
    static const char *const fields[4] = {"offset", "stride_batch", "stride_head", "stride_seq"};
    for (int t = 0; t < 4; t++) {
        for (int f = 0; f < 4; f++) {
            fa_problem p;
            valid_problem(&p);
            fa_tensor_layout *lay[4] = {&p.q, &p.k, &p.v, &p.o};
            int64_t *field[4] = {&lay[t]->offset, &lay[t]->stride_batch, &lay[t]->stride_head,
                                 &lay[t]->stride_seq};
            char what[64];
            snprintf(what, sizeof what, "%s.%s = -1", tensors[t], fields[f]);
            *field[f] = -1;
            expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, fields[f], what, __LINE__);
            snprintf(what, sizeof what, "%s.%s = 2^62", tensors[t], fields[f]);
            *field[f] = (int64_t)1 << 62; /* the extent would pass int64 */
            expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, NULL, what, __LINE__);
        }
    }
    /* Rows of O that overlap each other: the result would depend on the order of writes. */
    fa_problem p;
    valid_problem(&p);
    p.o.stride_seq = p.head_dim - 1;
    expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, NULL, "o.stride_seq < head_dim",
                    __LINE__);
    valid_problem(&p);
    p.o.stride_head = 0;
    expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, NULL, "o.stride_head = 0", __LINE__);
    valid_problem(&p);
    p.o.stride_batch = 0;
    expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, NULL, "o.stride_batch = 0", __LINE__);
    valid_problem(&p);
    p.o.stride_head = (p.seqlen_q - 1) * p.o.stride_seq + p.head_dim - 1; /* one element */
    expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, NULL, "heads of O overlap by one",
                    __LINE__);
    /* A stride of 0 over a dimension of size 1 overlaps nothing. */
    valid_problem(&p);
    p.seqlen_q = 1;
    p.o.stride_seq = 0;
    EXPECT(fx, fa_problem_check(fx->ctx, &p), OK, NULL);
    fixture_close(fx);
}

/*
 * Offsets and strides each inside [0, 2^60] whose products with the sizes pass 2^64: the span
 * of the tensor must not wrap to a small number that a small buffer satisfies (issue 10: a
 * 32-byte q passed the buffer check with stride_batch = 2^60, then the forward read far past
 * it), and O's rows must not be judged apart by a sum that overflowed.
 */
static void test_wrapping_extents(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    const int64_t e60 = (int64_t)1 << 60;
    fa_problem p;
    for (int t = 0; t < 2; t++) { /* q: an out-of-bounds read; o: a wild write */
        fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 17, 1, 1, 1, 1, 8);
        fa_tensor_layout *lay = t == 0 ? &p.q : &p.o;
        lay->stride_batch = e60;
        expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, "spans", "batch 17, stride_batch 2^60",
                        __LINE__);
        fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 4, 1, 1, 1, 1, 8);
        lay->stride_batch = e60;
        lay->offset = e60;
        expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, "spans",
                        "batch 4, offset = stride_batch = 2^60", __LINE__);
    }
    /* Rows (h = 1, s = 0) and (h = 0, s = 1) of O are the same memory. */
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 9, 1, 2, 2, 8);
    p.o.stride_head = e60;
    p.o.stride_seq = e60;
    expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, NULL, "o.stride_head = o.stride_seq = 2^60",
                    __LINE__);
    /* The limit itself: a span of exactly 2^60 elements is a valid layout, one more is not. */
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, 1, 1, 8);
    p.k.offset = e60 - 8;
    EXPECT(fx, fa_problem_check(fx->ctx, &p), OK, NULL);
    p.k.offset = e60 - 7;
    expect_rejected(fx, &p, FA_STATUS_INVALID_STRIDE, "spans", "k spans 2^60 + 1", __LINE__);
    /* A large stride that does not wrap is planned, and then a small buffer is too small. */
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 2, 1, 1, 1, 1, 8);
    p.q.stride_batch = (int64_t)1 << 59;
    fa_plan *plan = NULL;
    EXPECT(fx, fa_plan_create(fx->ctx, &p, &plan), OK, NULL);
    fa_buffer *small = make_buffer(fx->ctx, 2 * 8 * 4, 0);
    fa_buffer *o = make_buffer(fx->ctx, 2 * 8 * 4, OUT_PATTERN);
    EXPECT(fx, fa_forward(fx->ctx, plan, small, small, small, o, NULL), FA_STATUS_BUFFER_TOO_SMALL,
           "q");
    assert_true(untouched(o));
    fa_buffer_destroy(small);
    fa_buffer_destroy(o);
    fa_plan_destroy(plan);
    fixture_close(fx);
}

/* ---- fa_forward's buffers --------------------------------------------------------------- */

static void test_forward_context_mismatch(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    fa_context *other = NULL;
    fa_context_options opts = {iv_backend, 0};
    assert_int_equal(fa_context_create(&other, &opts, NULL, 0), OK);
    rig o;
    rig_open(other, &o, &fx->base.p);
    rig *r = &fx->base;
    EXPECT(fx, fa_forward(fx->ctx, o.plan, r->q, r->k, r->v, r->o, r->lse),
           FA_STATUS_CONTEXT_MISMATCH, NULL);
    EXPECT(fx, fa_forward(fx->ctx, r->plan, o.q, r->k, r->v, r->o, r->lse),
           FA_STATUS_CONTEXT_MISMATCH, NULL);
    EXPECT(fx, fa_forward(fx->ctx, r->plan, r->q, o.k, r->v, r->o, r->lse),
           FA_STATUS_CONTEXT_MISMATCH, NULL);
    EXPECT(fx, fa_forward(fx->ctx, r->plan, r->q, r->k, o.v, r->o, r->lse),
           FA_STATUS_CONTEXT_MISMATCH, NULL);
    EXPECT(fx, fa_forward(fx->ctx, r->plan, r->q, r->k, r->v, o.o, r->lse),
           FA_STATUS_CONTEXT_MISMATCH, NULL);
    EXPECT(fx, fa_forward(fx->ctx, r->plan, r->q, r->k, r->v, r->o, o.lse),
           FA_STATUS_CONTEXT_MISMATCH, NULL);
    assert_true(untouched(o.o) && untouched(o.lse) && untouched(r->o) && untouched(r->lse));
    rig_close(&o);
    fa_context_destroy(other);
    fixture_close(fx);
}

/* Each of q, k, v, o one element short, and lse one float short. */
static void test_forward_too_small(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    rig *r = &fx->base;
    static const char *const names[5] = {"q", "k", "v", "o", "lse"};
    for (int i = 0; i < 5; i++) {
        size_t elem = i == 4 ? 4 : fa_dtype_size(r->p.dtype);
        fa_buffer *small = make_buffer(fx->ctx, r->bytes[i] - elem, OUT_PATTERN);
        fa_buffer *b[5] = {r->q, r->k, r->v, r->o, r->lse};
        b[i] = small;
        char call[64];
        snprintf(call, sizeof call, "fa_forward(%s one element short)", names[i]);
        expect_status(fx, fa_forward(fx->ctx, r->plan, b[0], b[1], b[2], b[3], b[4]),
                      FA_STATUS_BUFFER_TOO_SMALL, NULL, call, __LINE__);
        assert_true(untouched(b[3]) && untouched(b[4]));
        fa_buffer_destroy(small);
    }
    fixture_close(fx);
}

/*
 * O placed in the same buffer as another tensor, once overlapping it by one element (rejected,
 * nothing written) and once just after it (allowed). `other` is 0..2 for q, k, v and 4 for lse.
 */
static void check_shared_buffer(fixture *fx, int other)
{
    static const char *const names[5] = {"q", "k", "v", "o", "lse"};
    const rig *r = &fx->base;
    size_t elem = fa_dtype_size(r->p.dtype);
    for (int overlap = 1; overlap >= 0; overlap--) {
        fa_problem p = r->p;
        int64_t end = (int64_t)(r->bytes[other] / elem); /* first element after the tensor */
        p.o.offset = end - overlap; /* the other tensor keeps its layout; O moves */
        rig s;
        rig_open(fx->ctx, &s, &p);
        fa_buffer *shared = make_buffer(fx->ctx, s.bytes[3], OUT_PATTERN);
        fa_buffer *b[5] = {s.q, s.k, s.v, shared, s.lse};
        b[other] = shared;
        char call[80];
        snprintf(call, sizeof call, "fa_forward(o %s %s in one buffer)",
                 overlap ? "overlapping" : "after", names[other]);
        fa_status st = fa_forward(fx->ctx, s.plan, b[0], b[1], b[2], b[3], b[4]);
        expect_status(fx, st, overlap ? FA_STATUS_INVALID_ARGUMENT : OK, NULL, call, __LINE__);
        if (overlap)
            assert_true(untouched(shared));
        fa_buffer_destroy(shared);
        rig_close(&s);
    }
}

static void test_forward_overlap(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    for (int other = 0; other < 5; other++) {
        if (other != 3)
            check_shared_buffer(fx, other);
    }
    /* Inputs may alias each other: K and V as one buffer with one layout. */
    rig *r = &fx->base;
    fa_problem p = r->p;
    p.v = p.k;
    rig s;
    rig_open(fx->ctx, &s, &p);
    EXPECT(fx, fa_forward(fx->ctx, s.plan, s.q, s.k, s.k, s.o, s.lse), OK, NULL);
    rig_close(&s);
    fixture_close(fx);
}

/*
 * Two handles of one memory: wraps of the same host array (cpu), O in one wrap overlapping Q in
 * another by one element (rejected, nothing written), then O in the array's disjoint part (run).
 */
static void test_forward_overlap_wrapped(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    if (!wraps_host(fx->ctx)) {
        fixture_close(fx);
        return; /* a GPU has no host wraps; test_opencl_overlap wraps one cl_mem twice */
    }
    const rig *r = &fx->base;
    size_t elem = fa_dtype_size(r->p.dtype), qn = r->bytes[0], on = r->bytes[3];
    unsigned char *host = calloc(1, qn + on);
    assert_non_null(host);
    for (int overlap = 1; overlap >= 0; overlap--) {
        /* O's first element lands on Q's last (or just after it) */
        size_t o_at = qn - (size_t)r->p.o.offset * elem - (overlap ? elem : 0);
        memset(host + qn, OUT_PATTERN, on);
        memset(host + o_at, OUT_PATTERN, qn - o_at);
        fa_buffer *q = NULL, *o = NULL;
        EXPECT(fx, fa_buffer_wrap_host(fx->ctx, host, qn, &q), OK, NULL);
        EXPECT(fx, fa_buffer_wrap_host(fx->ctx, host + o_at, on, &o), OK, NULL);
        fa_status st = fa_forward(fx->ctx, r->plan, q, r->k, r->v, o, r->lse);
        expect_status(fx, st, overlap ? FA_STATUS_INVALID_ARGUMENT : OK,
                      overlap ? "overlaps" : NULL, "fa_forward(o wrapping q's memory)", __LINE__);
        if (overlap) {
            for (size_t i = o_at; i < o_at + on; i++)
                assert_int_equal(host[i], OUT_PATTERN);
        }
        fa_buffer_destroy(q);
        fa_buffer_destroy(o);
    }
    free(host);
    fixture_close(fx);
}

/* ---- buffers ---------------------------------------------------------------------------- */

static void test_buffers(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    fa_context *ctx = fx->ctx;
    fa_buffer *b = NULL;
    EXPECT(fx, fa_buffer_create(ctx, 0, &b), FA_STATUS_INVALID_ARGUMENT, NULL);
    assert_null(b);
    uint64_t before = 0, after = 0;
    fa_context_memory(ctx, &before, NULL);
    b = make_buffer(ctx, 16, OUT_PATTERN);
    fa_context_memory(ctx, &after, NULL);
    assert_int_equal(after - before, 16);
    assert_int_equal(fa_buffer_size(b), 16);
    unsigned char host[32];
    memset(host, 0, sizeof host);
    const struct {
        size_t offset, bytes;
    } past[] = {{0, 17}, {16, 1}, {17, 0}, {15, 2}, {SIZE_MAX, 2}, {1, SIZE_MAX}};
    for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
        char call[96];
        snprintf(call, sizeof call, "fa_buffer_write(offset %zu, %zu bytes)", past[i].offset,
                 past[i].bytes);
        expect_status(fx, fa_buffer_write(b, past[i].offset, host, past[i].bytes),
                      FA_STATUS_BUFFER_TOO_SMALL, NULL, call, __LINE__);
        call[9] = 'r'; /* "fa_buffer_read..." is close enough for the message */
        expect_status(fx, fa_buffer_read(b, past[i].offset, host, past[i].bytes),
                      FA_STATUS_BUFFER_TOO_SMALL, NULL, call, __LINE__);
    }
    assert_true(untouched(b));
    EXPECT(fx, fa_buffer_write(b, 0, host, 16), OK, NULL);
    fa_buffer_destroy(b);
    fa_context_memory(ctx, &after, NULL);
    assert_int_equal(after, before);
    /* Wrapping host memory: where the device's memory is host memory (the cpu backend, OpenCL
     * on a CPU); never counted in the context's bytes. */
    b = NULL;
    if (wraps_host(ctx)) {
        EXPECT(fx, fa_buffer_wrap_host(ctx, NULL, 16, &b), FA_STATUS_NULL_POINTER, NULL);
        EXPECT(fx, fa_buffer_wrap_host(ctx, host, 0, &b), FA_STATUS_INVALID_ARGUMENT, NULL);
        assert_null(b);
        EXPECT(fx, fa_buffer_wrap_host(ctx, host, sizeof host, &b), OK, NULL);
        fa_context_memory(ctx, &after, NULL);
        assert_int_equal(after, before);
        fa_buffer_destroy(b);
    } else {
        EXPECT(fx, fa_buffer_wrap_host(ctx, host, sizeof host, &b), FA_STATUS_UNSUPPORTED,
               NULL);
        assert_null(b);
    }
    fixture_close(fx);
}

/* ---- last error ------------------------------------------------------------------------- */

static void test_last_error(void **state)
{
    (void)state;
    fixture *fx = fixture_open();
    fa_problem p;
    valid_problem(&p);
    assert_int_equal(fa_problem_check(fx->ctx, &p), OK);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    p.head_dim = 300;
    assert_int_equal(fa_problem_check(fx->ctx, &p), FA_STATUS_UNSUPPORTED_HEAD_DIM);
    assert_non_null(strstr(fa_context_last_error(fx->ctx), "head_dim"));
    /* The message stays until the next call, which clears it on success. */
    assert_non_null(strstr(fa_context_last_error(fx->ctx), "head_dim"));
    p.head_dim = 16;
    assert_int_equal(fa_problem_check(fx->ctx, &p), OK);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    unsigned char host[4] = {0};
    assert_int_equal(fa_buffer_write(fx->base.q, fx->base.bytes[0], host, 4),
                     FA_STATUS_BUFFER_TOO_SMALL);
    assert_true(fa_context_last_error(fx->ctx)[0] != '\0');
    assert_int_equal(fa_buffer_write(fx->base.q, 0, host, 4), OK);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    /* An empty copy is a successful call too: it clears the last failure. */
    assert_int_equal(fa_buffer_read(fx->base.q, fx->base.bytes[0], host, 4),
                     FA_STATUS_BUFFER_TOO_SMALL);
    assert_int_equal(fa_buffer_read(fx->base.q, 0, host, 0), OK);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    assert_int_equal(fa_buffer_write(fx->base.q, fx->base.bytes[0], host, 4),
                     FA_STATUS_BUFFER_TOO_SMALL);
    assert_int_equal(fa_buffer_write(fx->base.q, 0, host, 0), OK);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    fixture_close(fx);
}

int main(int argc, char **argv)
{
    fa_backend backends[HARNESS_MAX_BACKENDS];
    int n = harness_backends_from_args(argc, argv, backends);
    if (n != 1 && argc > 1) {
        fprintf(stderr, "usage: test_invalid [cpu|opencl|cuda]\n");
        return 2;
    }
    iv_backend = argc > 1 ? backends[0] : FA_BACKEND_CPU;
    /* The suite sets these itself where it needs them. */
    unsetenv("FLASHATTN_BLOCK_R");
    unsetenv("FLASHATTN_BLOCK_C");
    iv_decision = harness_decide(iv_backend, iv_skip_reason, sizeof iv_skip_reason);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_pointers),
        cmocka_unit_test(test_problem_fields),
        cmocka_unit_test(test_overflowing_shapes),
        cmocka_unit_test(test_strides),
        cmocka_unit_test(test_wrapping_extents),
        cmocka_unit_test(test_forward_context_mismatch),
        cmocka_unit_test(test_forward_too_small),
        cmocka_unit_test(test_forward_overlap),
        cmocka_unit_test(test_forward_overlap_wrapped),
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_last_error),
        cmocka_unit_test(test_device_indices),
        cmocka_unit_test(test_backend_note),
        cmocka_unit_test(test_context_create), /* the last two only in the cpu process */
        cmocka_unit_test(test_names),
    };
    size_t count = sizeof tests / sizeof tests[0] - (iv_backend == FA_BACKEND_CPU ? 0 : 2);
    char name[64];
    snprintf(name, sizeof name, "invalid_%s", fa_backend_name(iv_backend));
    int failed = _cmocka_run_group_tests(name, tests, count, NULL, NULL);
    if (iv_decision == HARNESS_SKIP)
        printf("SKIPPED: %s\n", iv_skip_reason);
    return harness_exit_code(failed, iv_decision == HARNESS_SKIP ? 0 : 1,
                             iv_decision == HARNESS_SKIP ? 1 : 0);
}
