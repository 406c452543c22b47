/*
 * test_modifiers_invalid.c - the modifiers suite's rejected values and buffers (run by
 * test_modifiers, on its backend). Each bad value or buffer, one at a time, must return its own
 * status with a message naming it, leave every output untouched (the 0xA5 pattern written
 * before), and leave the context usable: a valid fa_forward_ex and fa_backward_ex right after
 * succeed and clear the message.
 *   fa_plan_create, fa_plan_create_backward, fa_problem_check: dropout_p -0.1, 1, NaN
 *   (INVALID_DROPOUT); softcap NaN, -1, inf, denormal, outside [1e-18, 1e18]
 *   (INVALID_SOFTCAP); window 2, window_left -2, window_right -5 (INVALID_WINDOW); bias 2, an f16 bias on an f32 problem, a negative bias
 *   stride, a bias spanning more than 2^60 elements (INVALID_BIAS); alibi 3, sinks 2
 *   (INVALID_ARGUMENT).
 *   fa_forward_ex, fa_backward_ex: a missing modifier buffer (NULL_POINTER), one given for a
 *   feature that is off or d_sinks given to the forward (INVALID_ARGUMENT), slopes, sinks and
 *   d_sinks of heads_q * 4 - 1 bytes, a bias one element short and slopes [heads_q] for alibi 2
 *   (BUFFER_TOO_SMALL), d_sinks overlapping dQ or the sinks in one buffer (INVALID_ARGUMENT).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_modifiers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATTERN 0xA5

/* f32 (bias elements of 4 bytes), every feature on, heads_q 12 so that d_sinks (48 bytes)
   reaches into dQ's rows when both share a buffer (mt_open puts dQ at element 8). */
static void rig_problem(fa_problem *p)
{
    assert_int_equal(fa_problem_init(p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 12, 4, 3, 5, 8),
                     FA_STATUS_OK);
    p->mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    p->softcap = 2.0f;
    p->alibi = 1;
    p->bias = 1;
    p->bias_dtype = FA_DTYPE_F32;
    p->bias_layout = (fa_tensor_layout){2, 12 * 3 * 5, 3 * 5, 5};
    p->window = 1;
    p->window_left = 2;
    p->window_right = -1;
    p->sinks = 1;
    p->dropout_p = 0.5f;
    p->dropout_seed = 7;
}

static const int outputs[6] = {TO, TLSE, TDQ, TDK, TDV, TDSINKS};

static void fill(fa_buffer *b)
{
    size_t n = fa_buffer_size(b);
    unsigned char *host = malloc(n);
    assert_non_null(host);
    memset(host, PATTERN, n);
    assert_int_equal(fa_buffer_write(b, 0, host, n), FA_STATUS_OK);
    free(host);
}

static void expect_pattern(const fa_buffer *b, const char *name, const char *what, int line)
{
    size_t n = fa_buffer_size(b);
    unsigned char *host = malloc(n);
    assert_non_null(host);
    assert_int_equal(fa_buffer_read(b, 0, host, n), FA_STATUS_OK);
    for (size_t i = 0; i < n; i++)
        if (host[i] != PATTERN)
            fail_msg("line %d: %s: output %s byte %zu changed to 0x%02x", line, what, name, i,
                     host[i]);
    free(host);
}

static void fill_outputs(mt_run *r)
{
    for (int i = 0; i < 6; i++)
        if (r->t[outputs[i]].buf) /* d_sinks only with sinks */
            fill(r->t[outputs[i]].buf);
}

/* The context still works: a valid forward and backward succeed and clear the message. */
static void expect_usable(mt_run *r, const char *after, int line)
{
    fa_modifier_buffers f = mt_mods(r, false), b = mt_mods(r, true);
    fa_status st = mt_call_forward(r, &f);
    if (st == FA_STATUS_OK)
        st = mt_call_backward(r, &b);
    if (st != FA_STATUS_OK)
        fail_msg("line %d: after %s, a valid call returned %s: %s", line, after,
                 fa_status_name(st), fa_context_last_error(mt_ctx));
    if (fa_context_last_error(mt_ctx)[0] != '\0')
        fail_msg("line %d: after %s, a valid call left the message \"%s\"", line, after,
                 fa_context_last_error(mt_ctx));
    fill_outputs(r);
}

/* One rejected call: its status, a message naming `keyword`, outputs (and `extra`, an output
   that stood in for one) untouched, the context usable. */
static void expect(mt_run *r, fa_status st, fa_status want, const char *keyword,
                   const fa_buffer *extra, const char *what, int line)
{
    if (st != want)
        fail_msg("line %d: %s returned %s, want %s (\"%s\")", line, what, fa_status_name(st),
                 fa_status_name(want), fa_context_last_error(mt_ctx));
    const char *msg = fa_context_last_error(mt_ctx);
    if (!strstr(msg, keyword))
        fail_msg("line %d: %s: the message \"%s\" does not name \"%s\"", line, what, msg,
                 keyword);
    for (int i = 0; i < 6; i++)
        if (r->t[outputs[i]].buf)
            expect_pattern(r->t[outputs[i]].buf, mt_tensor_name[outputs[i]], what, line);
    if (extra)
        expect_pattern(extra, "standing in", what, line);
    expect_usable(r, what, line);
}

static void rig_open(mt_run *r, const char *name)
{
    fa_problem p;
    rig_problem(&p);
    mt_open(r, name, &p);
    mt_plan(r);
    fill_outputs(r);
}

/* ---- values ---------------------------------------------------------------------------------- */

typedef struct bad_value {
    const char *what, *keyword;
    fa_status want;
    void (*apply)(fa_problem *p);
} bad_value;

static void p_neg(fa_problem *p) { p->dropout_p = -0.1f; }
static void p_one(fa_problem *p) { p->dropout_p = 1.0f; }
static void p_nan(fa_problem *p) { p->dropout_p = NAN; }
static void cap_nan(fa_problem *p) { p->softcap = NAN; }
static void cap_neg(fa_problem *p) { p->softcap = -1.0f; }
static void cap_inf(fa_problem *p) { p->softcap = INFINITY; }
static void cap_denormal(fa_problem *p) { p->softcap = 5e-39f; }
static void cap_tiny(fa_problem *p) { p->softcap = 0.5f * FA_SOFTCAP_MIN; }
static void cap_huge(fa_problem *p) { p->softcap = 2.0f * FA_SOFTCAP_MAX; }
static void win_2(fa_problem *p) { p->window = 2; }
static void win_left(fa_problem *p) { p->window_left = -2; }
static void win_right(fa_problem *p) { p->window_right = -5; }
static void bias_2(fa_problem *p) { p->bias = 2; }
static void bias_f16(fa_problem *p) { p->bias_dtype = FA_DTYPE_F16; }
static void bias_neg(fa_problem *p) { p->bias_layout.stride_seq = -1; }
static void bias_span(fa_problem *p) { p->bias_layout.stride_head = (int64_t)1 << 57; }
static void alibi_3(fa_problem *p) { p->alibi = 3; }
static void sinks_2(fa_problem *p) { p->sinks = 2; }

static const bad_value bad_values[] = {
    {"dropout_p -0.1", "dropout_p", FA_STATUS_INVALID_DROPOUT, p_neg},
    {"dropout_p 1", "dropout_p", FA_STATUS_INVALID_DROPOUT, p_one},
    {"dropout_p NaN", "dropout_p", FA_STATUS_INVALID_DROPOUT, p_nan},
    {"softcap NaN", "softcap", FA_STATUS_INVALID_SOFTCAP, cap_nan},
    {"softcap -1", "softcap", FA_STATUS_INVALID_SOFTCAP, cap_neg},
    {"softcap inf", "softcap", FA_STATUS_INVALID_SOFTCAP, cap_inf},
    {"softcap denormal", "softcap", FA_STATUS_INVALID_SOFTCAP, cap_denormal},
    {"softcap below its range", "softcap", FA_STATUS_INVALID_SOFTCAP, cap_tiny},
    {"softcap above its range", "softcap", FA_STATUS_INVALID_SOFTCAP, cap_huge},
    {"window 2", "window", FA_STATUS_INVALID_WINDOW, win_2},
    {"window_left -2", "window", FA_STATUS_INVALID_WINDOW, win_left},
    {"window_right -5", "window", FA_STATUS_INVALID_WINDOW, win_right},
    {"bias 2", "bias", FA_STATUS_INVALID_BIAS, bias_2},
    {"bias_dtype f16 on f32", "bias_dtype", FA_STATUS_INVALID_BIAS, bias_f16},
    {"bias stride_seq -1", "stride_seq", FA_STATUS_INVALID_BIAS, bias_neg},
    {"bias span > 2^60 (stride_head 2^57 x 11 heads)", "2^60", FA_STATUS_INVALID_BIAS,
     bias_span},
    {"alibi 3", "alibi", FA_STATUS_INVALID_ARGUMENT, alibi_3},
    {"sinks 2", "sinks", FA_STATUS_INVALID_ARGUMENT, sinks_2},
};

static void test_bad_values(void **state)
{
    (void)state;
    static mt_run r;
    rig_open(&r, "invalid values");
    char what[128];
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
        const bad_value *bv = &bad_values[i];
        fa_problem p = r.p;
        bv->apply(&p);
        for (int call = 0; call < 3; call++) {
            fa_plan *plan = NULL;
            static const char *const calls[3] = {"fa_plan_create", "fa_plan_create_backward",
                                                 "fa_problem_check"};
            fa_status st = call == 0   ? fa_plan_create(mt_ctx, &p, &plan)
                           : call == 1 ? fa_plan_create_backward(mt_ctx, &p, &plan)
                                       : fa_problem_check(mt_ctx, &p);
            snprintf(what, sizeof what, "%s with %s", calls[call], bv->what);
            if (plan)
                fail_msg("%s: a plan was returned", what);
            expect(&r, st, bv->want, bv->keyword, NULL, what, __LINE__);
        }
    }
    mt_close(&r);
}

/* ---- buffers --------------------------------------------------------------------------------- */

static fa_buffer *sized(size_t bytes)
{
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(mt_ctx, bytes, &b), FA_STATUS_OK);
    fill(b);
    return b;
}

#define EXPECT_FWD(r, m, want, keyword, what)                                                  \
    expect(r, mt_call_forward(r, m), want, keyword, NULL, what, __LINE__)
#define EXPECT_BWD(r, m, want, keyword, extra, what)                                           \
    expect(r, mt_call_backward(r, m), want, keyword, extra, what, __LINE__)

static void test_missing_buffers(void **state)
{
    (void)state;
    static mt_run r;
    rig_open(&r, "invalid missing buffers");
    fa_modifier_buffers m;
    expect(&r, mt_call_forward(&r, NULL), FA_STATUS_NULL_POINTER, "alibi_slopes", NULL,
           "fa_forward_ex with mods NULL", __LINE__);
    expect(&r, mt_call_backward(&r, NULL), FA_STATUS_NULL_POINTER, "alibi_slopes", NULL,
           "fa_backward_ex with mods NULL", __LINE__);
    static const char *const names[4] = {"alibi_slopes", "bias", "sinks", "d_sinks"};
    for (int i = 0; i < 4; i++) {
        char what[96];
        for (int bwd = i == 3; bwd < 2; bwd++) {
            m = mt_mods(&r, bwd);
            const fa_buffer **slot[4] = {&m.alibi_slopes, &m.bias, &m.sinks,
                                         (const fa_buffer **)&m.d_sinks};
            *slot[i] = NULL;
            snprintf(what, sizeof what, "%s with mods->%s NULL", bwd ? "fa_backward_ex"
                                                                     : "fa_forward_ex",
                     names[i]);
            if (bwd)
                EXPECT_BWD(&r, &m, FA_STATUS_NULL_POINTER, names[i], NULL, what);
            else
                EXPECT_FWD(&r, &m, FA_STATUS_NULL_POINTER, names[i], what);
        }
    }
    m = mt_mods(&r, true); /* d_sinks to the forward */
    EXPECT_FWD(&r, &m, FA_STATUS_INVALID_ARGUMENT, "d_sinks", "fa_forward_ex given d_sinks");
    mt_close(&r);
}

/* A buffer for a feature the problem leaves off: plans of the rig's problem less one feature. */
static void test_buffers_for_features_off(void **state)
{
    (void)state;
    static mt_run r;
    rig_open(&r, "invalid buffers for features off");
    static const char *const names[3] = {"alibi_slopes", "bias", "sinks"};
    for (int i = 0; i < 3; i++) {
        fa_problem p = r.p;
        int32_t *sw[3] = {&p.alibi, &p.bias, &p.sinks};
        *sw[i] = 0;
        fa_plan *keep_f = r.fwd, *keep_b = r.bwd, *f = NULL, *b = NULL;
        assert_int_equal(fa_plan_create(mt_ctx, &p, &f), FA_STATUS_OK);
        assert_int_equal(fa_plan_create_backward(mt_ctx, &p, &b), FA_STATUS_OK);
        char what[96];
        r.fwd = f;
        r.bwd = b;
        fa_modifier_buffers fm = mt_mods(&r, false), bm = mt_mods(&r, true);
        if (i == 2)
            bm.d_sinks = NULL; /* only sinks itself is extra */
        snprintf(what, sizeof what, "fa_forward_ex with %s, which the problem turns off",
                 names[i]);
        fa_status st = mt_call_forward(&r, &fm);
        r.fwd = keep_f;
        r.bwd = keep_b;
        expect(&r, st, FA_STATUS_INVALID_ARGUMENT, names[i], NULL, what, __LINE__);
        snprintf(what, sizeof what, "fa_backward_ex with %s, which the problem turns off",
                 names[i]);
        r.fwd = f;
        r.bwd = b;
        st = mt_call_backward(&r, &bm);
        r.fwd = keep_f;
        r.bwd = keep_b;
        expect(&r, st, FA_STATUS_INVALID_ARGUMENT, names[i], NULL, what, __LINE__);
        fa_plan_destroy(f);
        fa_plan_destroy(b);
    }
    mt_close(&r);
}

static void test_small_and_overlapping(void **state)
{
    (void)state;
    static mt_run r;
    rig_open(&r, "invalid small and overlapping buffers");
    const size_t head_bytes = (size_t)r.p.heads_q * 4;
    fa_buffer *short_head = sized(head_bytes - 1);
    fa_buffer *short_bias = sized((size_t)(r.t[TBIAS].n - MT_GUARD - 1) * 4);
    fa_modifier_buffers m = mt_mods(&r, false);
    m.alibi_slopes = short_head;
    EXPECT_FWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "alibi_slopes", "slopes heads_q * 4 - 1");
    m = mt_mods(&r, false);
    m.sinks = short_head;
    EXPECT_FWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "sinks", "sinks heads_q * 4 - 1 bytes");
    m = mt_mods(&r, false);
    m.bias = short_bias;
    EXPECT_FWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "bias", "bias one element short");
    m = mt_mods(&r, true);
    m.bias = short_bias;
    EXPECT_BWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "bias", NULL, "backward: bias short");
    m = mt_mods(&r, true);
    m.d_sinks = short_head;
    EXPECT_BWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "d_sinks", short_head,
               "d_sinks heads_q * 4 - 1 bytes");
    m = mt_mods(&r, true);
    m.d_sinks = r.t[TDQ].buf;
    EXPECT_BWD(&r, &m, FA_STATUS_INVALID_ARGUMENT, "overlaps", NULL,
               "d_sinks in dq's buffer, overlapping its rows");
    m = mt_mods(&r, true);
    m.d_sinks = (fa_buffer *)r.t[TSINKS].buf;
    EXPECT_BWD(&r, &m, FA_STATUS_INVALID_ARGUMENT, "overlaps", NULL,
               "d_sinks in the sinks' buffer");
    fa_buffer_destroy(short_head);
    fa_buffer_destroy(short_bias);
    mt_close(&r);
}

/* Slopes per sequence (alibi 2) are [batch, heads_q]: one sequence's worth is too small, and
 * the outputs stay untouched (expect checks them). */
static void test_slopes_per_sequence_short(void **state)
{
    (void)state;
    static mt_run r;
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 3, 4, 2, 3, 5, 8),
                     FA_STATUS_OK);
    p.alibi = 2;
    mt_open(&r, "invalid slopes per sequence", &p);
    mt_plan(&r);
    fill_outputs(&r);
    fa_buffer *one_sequence = sized((size_t)p.heads_q * 4);
    fa_modifier_buffers m = mt_mods(&r, false);
    m.alibi_slopes = one_sequence;
    EXPECT_FWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "alibi_slopes",
               "alibi 2 with slopes [heads_q]");
    m = mt_mods(&r, true);
    m.alibi_slopes = one_sequence;
    EXPECT_BWD(&r, &m, FA_STATUS_BUFFER_TOO_SMALL, "alibi_slopes", NULL,
               "backward: alibi 2 with slopes [heads_q]");
    fa_buffer_destroy(one_sequence);
    mt_close(&r);
}

const struct CMUnitTest mt_invalid_tests[] = {
    cmocka_unit_test(test_bad_values),
    cmocka_unit_test(test_missing_buffers),
    cmocka_unit_test(test_buffers_for_features_off),
    cmocka_unit_test(test_small_and_overlapping),
    cmocka_unit_test(test_slopes_per_sequence_short),
};
const size_t mt_invalid_count = sizeof mt_invalid_tests / sizeof mt_invalid_tests[0];
