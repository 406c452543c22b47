/*
 * test_modifiers.h - what the three files of the modifiers suite share (test_modifiers.c: the
 * numbers; test_modifiers_invalid.c: the rejected values and buffers; test_modifiers_buffers.c
 * defines these): the backend's context, one problem's buffers with guard bands, and the runs
 * of fa_forward_ex / fa_backward_ex.
 * Include after <cmocka.h>.
 */
#ifndef FA_TEST_MODIFIERS_H
#define FA_TEST_MODIFIERS_H

#include "flashattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Elements after every tensor's last one (and before it: each layout gets an offset). */
#define MT_GUARD 11

extern fa_context *mt_ctx;     /* the backend under test */
extern fa_backend mt_backend;  /* its name */
extern int mt_declined;        /* tests an accelerator declined (reported, not passed) */

/* The tensors of one problem: the eight of the backward in the storage dtype, LSE, and the
   modifiers' (bias in bias_dtype; slopes, sinks, d_sinks f32 [heads_q]). */
enum { TQ, TK, TV, TO, TDO, TDQ, TDK, TDV, TLSE, TBIAS, TSLOPES, TSINKS, TDSINKS, NT };
extern const char *const mt_tensor_name[NT];

typedef struct mt_tensor {
    fa_dtype dt;
    size_t elem;
    int64_t n;              /* elements in the buffer */
    int64_t dense;          /* elements of the tensor */
    int64_t *map;           /* buffer element of dense element i */
    unsigned char *host;    /* contents as last written or read */
    unsigned char *fresh;   /* contents before any call: NaN outside the inputs' values */
    fa_buffer *buf;         /* NULL for a modifier that is off */
} mt_tensor;

typedef struct mt_run {
    const char *name;
    fa_problem p;
    mt_tensor t[NT];
    fa_plan *fwd, *bwd;
} mt_run;

/* Layouts with offsets, NaN-filled images, inputs random in [-1, 1) (the sinks in [-1, 2),
   ALiBi slopes 2^-(h+1)), and the buffers, seeded by the name. */
void mt_open(mt_run *r, const char *name, const fa_problem *p);
void mt_close(mt_run *r);

/* Both plans. An accelerator that answers UNSUPPORTED (or SRAM_TOO_SMALL) is reported and the
   test skipped, unless FLASHATTN_REQUIRE_BACKENDS names it: then it fails. The cpu golden must
   plan everything. */
void mt_plan(mt_run *r);

/* The modifier buffers the problem needs (d_sinks only for the backward). */
fa_modifier_buffers mt_mods(const mt_run *r, bool backward);

/* One call on the current buffers; the outputs as they are. */
fa_status mt_call_forward(mt_run *r, const fa_modifier_buffers *m);
fa_status mt_call_backward(mt_run *r, const fa_modifier_buffers *m);

/* Outputs back to their fresh image, one call, the outputs read back; fails on an error. */
void mt_forward(mt_run *r);
void mt_backward(mt_run *r);

/* Uploads / reads back one tensor's whole buffer. */
void mt_write(mt_run *r, int t);
void mt_read(mt_run *r, int t);

/* The rejected-value tests of test_modifiers_invalid.c. */
extern const struct CMUnitTest mt_invalid_tests[];
extern const size_t mt_invalid_count;

#endif /* FA_TEST_MODIFIERS_H */
