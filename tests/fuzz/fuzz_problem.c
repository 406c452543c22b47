/*
 * fuzz_problem.c - fuzz harness for problem validation, planning, fa_forward and (in
 * fuzz_backward.c) fa_plan_create_backward and fa_backward, with their buffer checks, on the cpu
 * backend. The input describes a problem (sizes, strides, offsets of all eight tensors, dtype,
 * mask, scale, tile overrides) and how large its buffers are; when the work is small both passes
 * run.
 *
 * Input, read front to back with fz_reader (a short input takes the defaults for the rest):
 *   flags        bit 0 BSHD (else BHSD), bit 1 LSE wanted, bit 2 Q, K and V share one buffer,
 *                bit 3 buffers wrap host memory (else fa_buffer_create + write), bits 4-5 the
 *                buffer sizes: 1 one buffer `cut` bytes short, 2 every buffer `small` bytes,
 *                0 and 3 exactly what the layout needs
 *   dtype, mask  a byte each: value % 4 (3 is not an enum value); from 0xf8 up a negative value
 *   batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim: fz_i64 (1, 2, 1, 5, 7, 8)
 *   scale        tag % 3: 0 the default (0), 1 a signed byte / 8, 2 four raw bytes of a float
 *   block_r, block_c: fz_i64 clamped to int32 (0)
 *   q, k, v, o   a byte whose bits 0..3 pick which of offset, stride_batch, stride_head,
 *                stride_seq to replace, then an fz_i64 for each one picked
 *   amplitude    input values are uniform in +-2^(byte % 41 - 8), at most 2^15 for f16
 *   which, cut, small: the short buffer, by how many bytes, the size of every buffer in mode 2
 *   grads        a byte (1): bit 0 dO, dQ, dK, dV start as copies of the O, Q, K, V layouts
 *                decoded above (else contiguous, as fa_problem_init leaves them), bit 1 dQ, dK
 *                and dV share one buffer
 *   d_o, dq, dk, dv: as q, k, v, o
 * Input values come from a generator seeded with a hash of the whole input. Inputs written before
 * the backward's fields existed end before them and so test the backward with the gradients laid
 * out like their twins.
 *
 * Properties: fa_problem_check and fa_plan_create return OK with an empty last error, or a
 * status with a non-empty one (the same status from both when the check fails); a plan's tiles
 * are positive and its work-group count is batch * heads_q * ceil(seqlen_q / Br). fa_forward
 * returns OK when every buffer holds its layout and BUFFER_TOO_SMALL otherwise; a rejected call
 * leaves O and LSE untouched; an accepted one (ASan watching every read and write) writes
 * nothing between O's rows, and rows as flashattn.h promises for finite inputs: within the
 * range of V, 0 with LSE = -inf where the mask leaves no key, and finite with a finite LSE
 * unless a score can pass the f32 range (then a row may be NaN, wholly, with a NaN LSE). The
 * context's memory counter returns to 0 when everything is released.
 * The backward's properties are listed at the top of fuzz_backward.c.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#endif

#include "fuzz_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this bound on |score| no score reaches the f32 range (FLT_MAX / log2(e), where the
 * backends saturate it to +-inf), so no row may be NaN and every LSE of a row with keys is
 * finite. */
#define FZ_SCORE_BOUND 1e37

enum { SLOT_Q, SLOT_K, SLOT_V, SLOT_O, SLOT_LSE, SLOT_COUNT };

fa_context *fz_ctx;

/* ---- decoding ---------------------------------------------------------------------------- */

static int enum_value(uint8_t b)
{
    return b >= 0xf8 ? (int)b - 256 : b % 4;
}

static int32_t clamp_i32(int64_t v)
{
    return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

static float decode_scale(fz_reader *r)
{
    uint32_t bits = 0;
    float f;
    switch (fz_byte(r, 0) % 3) {
    case 1: /* -16 .. 15.875 in steps of 1/8 */
        return (float)((int)fz_byte(r, 136) - 128) / 8.0f;
    case 2:
        for (int i = 0; i < 4; i++)
            bits |= (uint32_t)fz_byte(r, 0) << (8 * i);
        memcpy(&f, &bits, sizeof f);
        return f;
    default:
        return 0.0f;
    }
}

static void decode_layout(fz_reader *r, fa_tensor_layout *t)
{
    int64_t *field[4] = {&t->offset, &t->stride_batch, &t->stride_head, &t->stride_seq};
    uint8_t pick = fz_byte(r, 0);
    for (int i = 0; i < 4; i++)
        if (pick & (1u << i))
            *field[i] = fz_i64(r, *field[i]);
}

/* FNV-1a of the whole input: the seed of the input values. */
static uint64_t hash_input(const uint8_t *data, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}

static void decode_case(const uint8_t *data, size_t size, fz_case *c)
{
    fz_reader r = {data, size};
    uint8_t flags = fz_byte(&r, 0);
    fa_dtype dtype = (fa_dtype)enum_value(fz_byte(&r, 0));
    fa_mask mask = (fa_mask)enum_value(fz_byte(&r, 0));
    int64_t batch = fz_i64(&r, 1), hq = fz_i64(&r, 2), hkv = fz_i64(&r, 1);
    int64_t sq = fz_i64(&r, 5), sk = fz_i64(&r, 7), d = fz_i64(&r, 8);
    fa_status st = fa_problem_init(&c->p, dtype, (fa_layout)(flags & 1), batch, hq, hkv, sq, sk, d);
    FZ_CHECK(st == FA_STATUS_OK, "fa_problem_init: %s", fa_status_name(st));
    c->p.mask = mask;
    c->p.scale = decode_scale(&r);
    c->p.block_r = clamp_i32(fz_i64(&r, 0));
    c->p.block_c = clamp_i32(fz_i64(&r, 0));
    fa_tensor_layout *t[4] = {&c->p.q, &c->p.k, &c->p.v, &c->p.o};
    for (int i = 0; i < 4; i++)
        decode_layout(&r, t[i]);
    c->want_lse = flags >> 1 & 1;
    c->shared_qkv = flags >> 2 & 1;
    c->wrap = flags >> 3 & 1;
    c->sizing = flags >> 4 & 3;
    c->amp_exp = fz_byte(&r, 8) % 41 - 8;
    if (dtype == FA_DTYPE_F16 && c->amp_exp > 15)
        c->amp_exp = 15;
    c->which = fz_byte(&r, 0);
    c->cut = 1 + (uint64_t)fz_i64(&r, 0) % 256;
    c->small = 1 + (uint64_t)fz_i64(&r, 31) % 4096;
    uint8_t grads = fz_byte(&r, 1);
    if (grads & 1) { /* the backward's tensors laid out like their twins, as decoded */
        c->p.d_o = c->p.o;
        c->p.dq = c->p.q;
        c->p.dk = c->p.k;
        c->p.dv = c->p.v;
    }
    c->shared_grads = grads >> 1 & 1;
    fa_tensor_layout *g[4] = {&c->p.d_o, &c->p.dq, &c->p.dk, &c->p.dv};
    for (int i = 0; i < 4; i++)
        decode_layout(&r, g[i]);
    c->seed = hash_input(data, size);
}

/* ---- plan -------------------------------------------------------------------------------- */

void fz_check_status_message(fa_status st, const char *call)
{
    const char *msg = fa_context_last_error(fz_ctx);
    FZ_CHECK(msg != NULL, "%s: last error is NULL", call);
    if (st == FA_STATUS_OK)
        FZ_CHECK(*msg == '\0', "%s succeeded but the last error says \"%s\"", call, msg);
    else
        FZ_CHECK(*msg != '\0', "%s returned %s with an empty last error", call,
                 fa_status_name(st));
}

static void check_plan(const fa_plan *plan, const fa_problem *p)
{
    int32_t br = fa_plan_block_r(plan), bc = fa_plan_block_c(plan);
    const fa_problem *pp = fa_plan_problem(plan);
    FZ_CHECK(br >= 1 && bc >= 1 && fa_plan_work_group_size(plan) >= 1,
             "plan Br %d, Bc %d, work-group %d", br, bc, fa_plan_work_group_size(plan));
    uint64_t tiles = ((uint64_t)p->seqlen_q + (uint64_t)br - 1) / (uint64_t)br;
    uint64_t groups = (uint64_t)p->batch * (uint64_t)p->heads_q * tiles;
    FZ_CHECK(fa_plan_work_groups(plan) == groups, "plan has %llu work-groups, not %llu",
             (unsigned long long)fa_plan_work_groups(plan), (unsigned long long)groups);
    FZ_CHECK(pp && pp->batch == p->batch && pp->seqlen_q == p->seqlen_q &&
                 pp->seqlen_k == p->seqlen_k && pp->head_dim == p->head_dim &&
                 memcmp(&pp->o, &p->o, sizeof p->o) == 0 && isfinite(pp->scale),
             "the plan's problem is not the one planned");
}

/* ---- buffers ----------------------------------------------------------------------------- */

uint64_t fz_span_bytes(const fa_tensor_layout *t, const fa_problem *p, int64_t heads,
                       int64_t seq)
{
    if (p->batch == 0 || heads == 0 || seq == 0)
        return 0;
    uint64_t last = (uint64_t)t->offset;
    last = fz_add_sat(last, fz_mul_sat((uint64_t)(p->batch - 1), (uint64_t)t->stride_batch));
    last = fz_add_sat(last, fz_mul_sat((uint64_t)(heads - 1), (uint64_t)t->stride_head));
    last = fz_add_sat(last, fz_mul_sat((uint64_t)(seq - 1), (uint64_t)t->stride_seq));
    return fz_mul_sat(fz_add_sat(last, (uint64_t)p->head_dim), fa_dtype_size(p->dtype));
}

/* Which slot holds each tensor, and what each slot must hold; returns the slots in use. */
static int plan_slots(const fz_case *c, int slot_of[SLOT_COUNT], fz_buf b[SLOT_COUNT])
{
    const fa_problem *p = &c->p;
    uint64_t rows = fz_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q);
    rows = fz_mul_sat(rows, (uint64_t)p->seqlen_q);
    uint64_t need[SLOT_COUNT] = {
        fz_span_bytes(&p->q, p, p->heads_q, p->seqlen_q),
        fz_span_bytes(&p->k, p, p->heads_kv, p->seqlen_k),
        fz_span_bytes(&p->v, p, p->heads_kv, p->seqlen_k),
        fz_span_bytes(&p->o, p, p->heads_q, p->seqlen_q),
        fz_mul_sat(rows, 4)};
    memset(b, 0, sizeof(fz_buf) * SLOT_COUNT);
    for (int i = 0; i < SLOT_COUNT; i++) {
        slot_of[i] = c->shared_qkv && i <= SLOT_V ? SLOT_Q : i;
        if (need[i] > b[slot_of[i]].need)
            b[slot_of[i]].need = need[i];
    }
    return c->want_lse ? SLOT_COUNT : SLOT_LSE;
}

int fz_size_slots(const fz_case *c, fz_buf *b, const int *slot_of, int n)
{
    int fits = 1, cut_slot = c->which % n;
    for (int i = 0; i < n; i++) {
        uint64_t need = b[i].need;
        if (slot_of[i] != i)
            continue; /* its tensor's need counts in the slot it shares */
        if (c->sizing == FZ_SIZE_SMALL || need > FZ_MAX_BUFFER)
            need = c->small;
        else if (c->sizing == FZ_SIZE_CUT && i == cut_slot)
            need = need > c->cut ? need - c->cut : 1;
        b[i].bytes = need > 0 ? (size_t)need : 1; /* a buffer has at least one byte */
        fits = fits && b[i].need <= b[i].bytes;
    }
    return fits;
}

static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float fz_load_elem(fa_dtype dt, const uint8_t *base, size_t i)
{
    uint16_t h;
    float f;
    if (dt == FA_DTYPE_F32) {
        memcpy(&f, base + 4 * i, sizeof f);
        return f;
    }
    memcpy(&h, base + 2 * i, sizeof h);
    return dt == FA_DTYPE_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

/* Finite values uniform in +-amp, rounded to the dtype, over the whole buffer. */
static void fill_inputs(fz_buf *b, fa_dtype dt, float amp, uint64_t *rng)
{
    size_t elem = fa_dtype_size(dt);
    memset(b->host, 0, b->bytes);
    for (size_t i = 0; i + elem <= b->bytes; i += elem) {
        float x = amp * ((float)(next_random(rng) >> 40) * (2.0f / 16777216.0f) - 1.0f);
        uint16_t h;
        if (dt == FA_DTYPE_F32) {
            memcpy(b->host + i, &x, sizeof x);
            continue;
        }
        h = dt == FA_DTYPE_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
        memcpy(b->host + i, &h, sizeof h);
    }
}

void fz_make_buffer(const fz_case *c, fz_buf *b, int is_output, fa_dtype fill, uint64_t *rng)
{
    b->host = malloc(b->bytes);
    FZ_CHECK(b->host != NULL, "out of host memory for %zu bytes", b->bytes);
    if (is_output) {
        for (size_t i = 0; i < b->bytes; i++)
            b->host[i] = FZ_SENTINEL(i);
    } else {
        fill_inputs(b, fill, ldexpf(1.0f, c->amp_exp), rng);
    }
    fa_status st = c->wrap ? fa_buffer_wrap_host(fz_ctx, b->host, b->bytes, &b->buf)
                           : fa_buffer_create(fz_ctx, b->bytes, &b->buf);
    FZ_CHECK(st == FA_STATUS_OK, "a %zu-byte buffer: %s", b->bytes, fa_status_name(st));
    if (!c->wrap) {
        st = fa_buffer_write(b->buf, 0, b->host, b->bytes);
        FZ_CHECK(st == FA_STATUS_OK, "fa_buffer_write: %s", fa_status_name(st));
    }
}

void fz_fetch(const fz_case *c, fz_buf *b)
{
    if (c->wrap || !b->buf)
        return;
    fa_status st = fa_buffer_read(b->buf, 0, b->host, b->bytes);
    FZ_CHECK(st == FA_STATUS_OK, "fa_buffer_read: %s", fa_status_name(st));
}

void fz_untouched(const fz_buf *b, const char *name)
{
    for (size_t i = 0; b->host && i < b->bytes; i++)
        FZ_CHECK(b->host[i] == FZ_SENTINEL(i), "a rejected call wrote byte %zu of %s", i, name);
}

/* ---- outputs ----------------------------------------------------------------------------- */

int64_t fz_keys_of_row(const fa_problem *p, int64_t i)
{
    int64_t n = p->seqlen_k;
    if (p->mask == FA_MASK_CAUSAL_TOP_LEFT)
        n = i + 1;
    else if (p->mask == FA_MASK_CAUSAL_BOTTOM_RIGHT)
        n = i + 1 + p->seqlen_k - p->seqlen_q;
    return n < 0 ? 0 : n > p->seqlen_k ? p->seqlen_k : n;
}

float fz_max_abs(const fz_buf *b, fa_dtype dt)
{
    float m = 0.0f;
    size_t elem = fa_dtype_size(dt);
    for (size_t i = 0; i < b->bytes / elem; i++)
        m = fmaxf(m, fabsf(fz_load_elem(dt, b->host, i)));
    return m;
}

/* What one row of the outputs may hold (the rules of "Non-finite values" in flashattn.h, for
 * finite inputs); marks the elements of O the row covers. */
typedef struct fz_row {
    size_t first;   /* O's element index of the row's first value */
    const float *lse; /* the row's LSE, NULL when not asked for */
    int has_keys;   /* the mask leaves it a key to attend to */
    int strict;     /* no score can pass the f32 range, so nothing may be NaN */
} fz_row;

static void check_row(const fa_problem *p, const fz_buf *o, const fz_row *row, float vmax,
                      uint8_t *covered)
{
    int64_t nans = 0, zeros = 0;
    for (int64_t x = 0; x < p->head_dim; x++) {
        size_t i = row->first + (size_t)x;
        float v = fz_load_elem(p->dtype, o->host, i);
        /* O is a convex combination of V's values, or a NaN row from a +inf score. */
        FZ_CHECK(isnan(v) || fabsf(v) <= vmax * (1.0f + 1e-6f),
                 "O element %zu is %g, outside max |V| = %g", i, (double)v, (double)vmax);
        nans += isnan(v) != 0;
        zeros += v == 0.0f;
        covered[i] = 1;
    }
    FZ_CHECK(nans == 0 || nans == p->head_dim, "a row of O (element %zu) is partly NaN",
             row->first);
    FZ_CHECK(!row->strict || nans == 0, "a row of O (element %zu) is NaN though no score can "
             "leave the f32 range", row->first);
    FZ_CHECK(row->has_keys || zeros == p->head_dim,
             "a row of O with no key to attend to (element %zu) is not 0", row->first);
    if (!row->lse)
        return;
    float l;
    memcpy(&l, row->lse, sizeof l);
    FZ_CHECK(row->has_keys || l == -INFINITY, "LSE of a row with no key is %g", (double)l);
    FZ_CHECK(!isnan(l) == !nans, "LSE %g beside a row of O with %lld NaNs", (double)l,
             (long long)nans);
    FZ_CHECK(l != INFINITY && (l != -INFINITY || zeros == p->head_dim),
             "LSE %g beside a row of O that is not 0", (double)l);
    FZ_CHECK(!row->strict || !row->has_keys || isfinite(l), "LSE of a row with keys is %g",
             (double)l);
}

static void check_outputs(const fz_case *c, const fa_problem *pp, fz_buf *b, const int *slot_of)
{
    const fa_problem *p = &c->p;
    const fz_buf *o = &b[SLOT_O];
    const float *lse = c->want_lse ? (const float *)(const void *)b[SLOT_LSE].host : NULL;
    float amp = ldexpf(1.0f, c->amp_exp), vmax = fz_max_abs(&b[slot_of[SLOT_V]], p->dtype);
    /* |score| <= d * max|q| * max|k| * |scale|: below the bound no score saturates to +-inf. */
    int strict = (double)p->head_dim * amp * amp * fabs((double)pp->scale) < FZ_SCORE_BOUND;
    size_t elem = fa_dtype_size(p->dtype), lse_row = 0;
    uint8_t *covered = calloc(o->bytes / elem + 1, 1);
    FZ_CHECK(covered != NULL, "out of host memory");
    for (int64_t bi = 0; bi < p->batch; bi++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t s = 0; s < p->seqlen_q; s++, lse_row++) {
                fz_row row = {(size_t)(p->o.offset + bi * p->o.stride_batch +
                                       h * p->o.stride_head + s * p->o.stride_seq),
                              lse ? lse + lse_row : NULL, fz_keys_of_row(p, s) > 0, strict};
                check_row(p, o, &row, vmax, covered);
            }
    for (size_t i = 0; i < o->bytes; i++)
        FZ_CHECK(covered[i / elem] || o->host[i] == FZ_SENTINEL(i),
                 "byte %zu of O, outside every row, was written", i);
    free(covered);
}

/* ---- tracing ----------------------------------------------------------------------------- */

static void print_layout(const char *name, const fa_tensor_layout *t)
{
    fprintf(stderr, " %s(off %lld, sb %lld, sh %lld, ss %lld)", name, (long long)t->offset,
            (long long)t->stride_batch, (long long)t->stride_head, (long long)t->stride_seq);
}

static int verbose(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("FLASHATTN_FUZZ_VERBOSE") != NULL;
    return on;
}

/* With FLASHATTN_FUZZ_VERBOSE set, one line per input saying what it decodes to, then one per
 * call (fz_trace_status), to read a crash input or check what a seed exercises. */
static void trace_case(const fz_case *c)
{
    const fa_problem *p = &c->p;
    if (!verbose())
        return;
    fprintf(stderr, "case: dtype %d mask %d batch %lld heads %lld/%lld seq %lld x %lld d %lld "
            "scale %g tiles %d x %d lse %d shared %d wrap %d sizing %d amp 2^%d "
            "shared grads %d:",
            (int)p->dtype, (int)p->mask, (long long)p->batch, (long long)p->heads_q,
            (long long)p->heads_kv, (long long)p->seqlen_q, (long long)p->seqlen_k,
            (long long)p->head_dim, (double)p->scale, (int)p->block_r, (int)p->block_c,
            c->want_lse, c->shared_qkv, c->wrap, c->sizing, c->amp_exp, c->shared_grads);
    const fa_tensor_layout *t[8] = {&p->q, &p->k, &p->v, &p->o, &p->d_o, &p->dq, &p->dk, &p->dv};
    static const char *const names[8] = {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"};
    for (int i = 0; i < 8; i++)
        print_layout(names[i], t[i]);
    fputc('\n', stderr);
}

void fz_trace_status(const char *what, fa_status st)
{
    if (verbose())
        fprintf(stderr, "  %s: %s %s\n", what, fa_status_name(st), fa_context_last_error(fz_ctx));
}

/* ---- one input --------------------------------------------------------------------------- */

static void run_forward(const fz_case *c, const fa_plan *plan)
{
    int slot_of[SLOT_COUNT];
    fz_buf b[SLOT_COUNT];
    uint64_t rng = c->seed;
    int nslots = plan_slots(c, slot_of, b);
    int fits = fz_size_slots(c, b, slot_of, nslots);
    for (int i = 0; i < nslots; i++)
        if (slot_of[i] == i)
            fz_make_buffer(c, &b[i], i >= SLOT_O, c->p.dtype, &rng);
    fa_status st = fa_forward(fz_ctx, plan, b[slot_of[SLOT_Q]].buf, b[slot_of[SLOT_K]].buf,
                              b[slot_of[SLOT_V]].buf, b[SLOT_O].buf, b[SLOT_LSE].buf);
    fz_trace_status(fits ? "fa_forward (buffers fit)" : "fa_forward (a buffer is short)", st);
    fz_check_status_message(st, "fa_forward");
    FZ_CHECK(st == (fits ? FA_STATUS_OK : FA_STATUS_BUFFER_TOO_SMALL),
             "fa_forward returned %s, but the buffers %s", fa_status_name(st),
             fits ? "hold every layout" : "are too small");
    fz_fetch(c, &b[SLOT_O]);
    fz_fetch(c, &b[SLOT_LSE]);
    if (st == FA_STATUS_OK) {
        check_outputs(c, fa_plan_problem(plan), b, slot_of);
    } else {
        fz_untouched(&b[SLOT_O], "O");
        fz_untouched(&b[SLOT_LSE], "LSE");
    }
    for (int i = 0; i < SLOT_COUNT; i++) {
        fa_buffer_destroy(b[i].buf);
        free(b[i].host);
    }
}

/* An empty sequence counts as one, since checking the outputs still walks batch * heads. */
uint64_t fz_work_of(const fa_problem *p)
{
    uint64_t sq = p->seqlen_q > 0 ? (uint64_t)p->seqlen_q : 1;
    uint64_t sk = p->seqlen_k > 0 ? (uint64_t)p->seqlen_k : 1;
    uint64_t w = fz_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q);
    return fz_mul_sat(fz_mul_sat(fz_mul_sat(w, sq), sk), (uint64_t)p->head_dim);
}

static void open_context(void)
{
    static const char *const env[] = {"FLASHATTN_BLOCK_R", "FLASHATTN_BLOCK_C",
                                      "FLASHATTN_BACKEND", "FLASHATTN_DEVICE"};
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    char why[256] = "";
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        unsetenv(env[i]); /* the input alone decides the tiles */
    fa_status st = fa_context_create(&fz_ctx, &opts, why, sizeof why);
    FZ_CHECK(st == FA_STATUS_OK, "cpu context: %s: %s", fa_status_name(st), why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_case c;
    fa_plan *plan = NULL;
    uint64_t current = 0;
    if (!fz_ctx)
        open_context();
    decode_case(data, size, &c);
    trace_case(&c);
    fa_status checked = fa_problem_check(fz_ctx, &c.p);
    fz_check_status_message(checked, "fa_problem_check");
    fa_status st = fa_plan_create(fz_ctx, &c.p, &plan);
    fz_trace_status("fa_plan_create", st);
    fz_check_status_message(st, "fa_plan_create");
    FZ_CHECK(checked == FA_STATUS_OK || st == checked,
             "fa_problem_check said %s, fa_plan_create %s", fa_status_name(checked),
             fa_status_name(st));
    FZ_CHECK((st == FA_STATUS_OK) == (plan != NULL), "fa_plan_create: %s with plan %p",
             fa_status_name(st), (void *)plan);
    if (st == FA_STATUS_OK) {
        check_plan(plan, &c.p);
        if (fz_work_of(&c.p) <= FZ_MAX_WORK)
            run_forward(&c, plan);
    }
    fz_backward(&c, checked, plan);
    fa_plan_destroy(plan);
    fa_context_release_scratch(fz_ctx); /* the runs' scratch, which the context keeps */
    fa_context_memory(fz_ctx, &current, NULL);
    FZ_CHECK(current == 0, "%llu device bytes still counted after everything was released",
             (unsigned long long)current);
    return 0;
}
