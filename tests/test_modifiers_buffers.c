/*
 * test_modifiers_buffers.c - the modifiers suite's runs (test_modifiers.c: the numbers;
 * test_modifiers_invalid.c: the rejected values and buffers): the backend's context, one
 * problem's buffers with an offset per tensor, NaN padding and guard bands, the plans (an
 * accelerator's UNSUPPORTED reported and skipped), and the calls with every output reset to
 * its fresh image first. Declared in test_modifiers.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "oracle.h" /* oracle_load / oracle_store only: element access in a storage dtype */
#include "test_modifiers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fa_context *mt_ctx;
fa_backend mt_backend = FA_BACKEND_CPU;
int mt_declined;
const char *const mt_tensor_name[NT] = {"q",   "k",    "v",      "o",     "d_o",
                                        "dq",  "dk",   "dv",     "lse",   "bias",
                                        "alibi_slopes", "sinks", "d_sinks"};

/* ---- one problem's buffers ------------------------------------------------------------------- */

static fa_tensor_layout *layout_of(fa_problem *p, int t)
{
    fa_tensor_layout *all[8] = {&p->q, &p->k, &p->v, &p->o, &p->d_o, &p->dq, &p->dk, &p->dv};
    return all[t];
}

static bool is_kv(int t)
{
    return t == TK || t == TV || t == TDK || t == TDV;
}

static bool is_input(int t)
{
    return t == TQ || t == TK || t == TV || t == TDO || t == TBIAS || t == TSLOPES || t == TSINKS;
}

/* The buffer element of every dense element and the buffer's length: the tensor's extent
   (fa_problem_tensor_bytes, which every mapped element lies inside) and a guard band. */
static void build_map(mt_run *r, int t)
{
    static const fa_tensor_id ids[NT] = {
        FA_TENSOR_Q,  FA_TENSOR_K,   FA_TENSOR_V,    FA_TENSOR_O,            FA_TENSOR_DO,
        FA_TENSOR_DQ, FA_TENSOR_DK,  FA_TENSOR_DV,   FA_TENSOR_LSE,          FA_TENSOR_BIAS,
        FA_TENSOR_ALIBI_SLOPES,      FA_TENSOR_SINKS, FA_TENSOR_D_SINKS};
    const fa_problem *p = &r->p;
    mt_tensor *x = &r->t[t];
    int64_t dims[4] = {p->batch, p->heads_q, p->seqlen_q, p->head_dim};
    fa_tensor_layout l = {0, 0, 0, 0};
    if (t < TLSE) {
        l = *layout_of(&r->p, t);
        dims[1] = is_kv(t) ? p->heads_kv : p->heads_q;
        dims[2] = is_kv(t) ? p->seqlen_k : p->seqlen_q;
    } else if (t == TBIAS) {
        l = p->bias_layout;
        dims[3] = p->seqlen_k;
    } else { /* LSE [B, Hq, Sq] and the head vectors [Hq] (slopes [B, Hq] with alibi 2),
                contiguous from element 0 */
        dims[0] = 1;
        dims[3] = t == TLSE ? p->batch * p->heads_q * p->seqlen_q : p->heads_q;
        if (t == TSLOPES && p->alibi == 2)
            dims[3] *= p->batch;
        dims[1] = dims[2] = 1;
    }
    x->dense = dims[0] * dims[1] * dims[2] * dims[3];
    x->map = malloc(sizeof(int64_t) * (size_t)(x->dense ? x->dense : 1));
    assert_non_null(x->map);
    uint64_t bytes = 0;
    assert_int_equal(fa_problem_tensor_bytes(p, ids[t], 0, 0, &bytes), FA_STATUS_OK);
    const int64_t extent = (int64_t)(bytes / x->elem);
    int64_t i = 0;
    for (int64_t b = 0; b < dims[0]; b++)
        for (int64_t h = 0; h < dims[1]; h++)
            for (int64_t s = 0; s < dims[2]; s++)
                for (int64_t e = 0; e < dims[3]; e++, i++) {
                    x->map[i] = l.offset + b * l.stride_batch + h * l.stride_head +
                                s * l.stride_seq + e;
                    assert_true(x->map[i] < extent);
                }
    x->n = extent + MT_GUARD;
}

static bool tensor_on(const fa_problem *p, int t)
{
    return t < TBIAS || (t == TBIAS && p->bias) || (t == TSLOPES && p->alibi) ||
           (t >= TSINKS && p->sinks);
}

static double input_value(int t, int64_t i, harness_rng *rng)
{
    if (t == TSLOPES)
        return ldexp(1.0, -(int)(i + 1));
    return harness_rng_uniform(rng, -1.0, t == TSINKS ? 2.0 : 1.0);
}

void mt_open(mt_run *r, const char *name, const fa_problem *p)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    r->p = *p;
    for (int t = 0; t < 8; t++) /* an offset of each tensor's own, so mixed-up tensors show */
        layout_of(&r->p, t)->offset += 3 + t;
    harness_rng rng;
    harness_rng_seed(&rng, name);
    for (int t = 0; t < NT; t++) {
        mt_tensor *x = &r->t[t];
        if (!tensor_on(&r->p, t))
            continue;
        x->dt = t < TLSE ? p->dtype : t == TBIAS ? p->bias_dtype : FA_DTYPE_F32;
        x->elem = fa_dtype_size(x->dt);
        build_map(r, t);
        size_t bytes = (size_t)x->n * x->elem;
        x->host = malloc(bytes);
        x->fresh = malloc(bytes);
        assert_true(x->host && x->fresh);
        for (int64_t i = 0; i < x->n; i++)
            oracle_store(x->dt, x->host, i, NAN);
        for (int64_t i = 0; is_input(t) && i < x->dense; i++)
            oracle_store(x->dt, x->host, x->map[i], input_value(t, i, &rng));
        memcpy(x->fresh, x->host, bytes);
        assert_int_equal(fa_buffer_create(mt_ctx, bytes, &x->buf), FA_STATUS_OK);
        mt_write(r, t);
    }
}

void mt_close(mt_run *r)
{
    for (int t = 0; t < NT; t++) {
        fa_buffer_destroy(r->t[t].buf);
        free(r->t[t].map);
        free(r->t[t].host);
        free(r->t[t].fresh);
    }
    fa_plan_destroy(r->fwd);
    fa_plan_destroy(r->bwd);
    memset(r, 0, sizeof *r);
}

void mt_write(mt_run *r, int t)
{
    mt_tensor *x = &r->t[t];
    assert_int_equal(fa_buffer_write(x->buf, 0, x->host, (size_t)x->n * x->elem), FA_STATUS_OK);
}

void mt_read(mt_run *r, int t)
{
    mt_tensor *x = &r->t[t];
    assert_int_equal(fa_buffer_read(x->buf, 0, x->host, (size_t)x->n * x->elem), FA_STATUS_OK);
}

void mt_plan(mt_run *r)
{
    fa_status st = fa_plan_create(mt_ctx, &r->p, &r->fwd);
    const char *what = "fa_plan_create";
    if (st == FA_STATUS_OK) {
        st = fa_plan_create_backward(mt_ctx, &r->p, &r->bwd);
        what = "fa_plan_create_backward";
    }
    if (st == FA_STATUS_OK)
        return;
    bool accel = mt_backend != FA_BACKEND_CPU, required = harness_backend_required(mt_backend);
    if (accel && (st == FA_STATUS_SRAM_TOO_SMALL || (st == FA_STATUS_UNSUPPORTED && !required))) {
        printf("  %-48s NOT SUPPORTED: %s: %s\n", r->name, what, fa_context_last_error(mt_ctx));
        mt_declined++;
        mt_close(r);
        skip();
    }
    fail_msg("%s (%s): %s: %s%s", what, r->name, fa_status_name(st),
             fa_context_last_error(mt_ctx),
             accel && required ? " [required by FLASHATTN_REQUIRE_BACKENDS]" : "");
}

fa_modifier_buffers mt_mods(const mt_run *r, bool backward)
{
    fa_modifier_buffers m = {r->t[TSLOPES].buf, r->t[TBIAS].buf, r->t[TSINKS].buf,
                             backward ? r->t[TDSINKS].buf : NULL};
    return m;
}

fa_status mt_call_forward(mt_run *r, const fa_modifier_buffers *m)
{
    return fa_forward_ex(mt_ctx, r->fwd, r->t[TQ].buf, r->t[TK].buf, r->t[TV].buf, r->t[TO].buf,
                         r->t[TLSE].buf, m);
}

fa_status mt_call_backward(mt_run *r, const fa_modifier_buffers *m)
{
    return fa_backward_ex(mt_ctx, r->bwd, r->t[TQ].buf, r->t[TK].buf, r->t[TV].buf,
                          r->t[TO].buf, r->t[TLSE].buf, r->t[TDO].buf, r->t[TDQ].buf,
                          r->t[TDK].buf, r->t[TDV].buf, m);
}

static void reset_and_check(mt_run *r, fa_status st, const char *what, const int *outs, int n)
{
    if (st != FA_STATUS_OK)
        fail_msg("%s (%s): %s: %s", what, r->name, fa_status_name(st),
                 fa_context_last_error(mt_ctx));
    for (int i = 0; i < n; i++)
        if (r->t[outs[i]].buf)
            mt_read(r, outs[i]);
}

static void reset_outputs(mt_run *r, const int *outs, int n)
{
    for (int i = 0; i < n; i++) {
        mt_tensor *x = &r->t[outs[i]];
        if (!x->buf)
            continue;
        memcpy(x->host, x->fresh, (size_t)x->n * x->elem);
        mt_write(r, outs[i]);
    }
}

void mt_forward(mt_run *r)
{
    static const int outs[2] = {TO, TLSE};
    fa_modifier_buffers m = mt_mods(r, false);
    reset_outputs(r, outs, 2);
    reset_and_check(r, mt_call_forward(r, &m), "fa_forward_ex", outs, 2);
}

void mt_backward(mt_run *r)
{
    static const int outs[4] = {TDQ, TDK, TDV, TDSINKS};
    fa_modifier_buffers m = mt_mods(r, true);
    reset_outputs(r, outs, 4);
    reset_and_check(r, mt_call_backward(r, &m), "fa_backward_ex", outs, 4);
}
