/*
 * fuzz_backward.c - the problem harness's backward half (fuzz_problem.h): fa_plan_create_backward
 * and fa_backward on the problem fuzz_problem.c decoded, on the cpu backend.
 *
 * Properties: fa_plan_create_backward returns OK with an empty last error or a status with a
 * non-empty one, and a plan exactly when OK. It validates what fa_plan_create does and the dO,
 * dQ, dK, dV layouts too, so it succeeds only where fa_problem_check does, and where the check
 * fails it returns the check's status or INVALID_STRIDE (a gradient's layout). A plan has
 * positive tiles, (2 * seqlen_k * d + d) * 8 scratch bytes (flashattn.h, cpu) and the gradients'
 * layouts as given. (Not its work-groups: flashattn.h's batch * heads_kv * ceil(seqlen_k / Bc)
 * is not what fa_plan_work_groups returns for a backward plan; the golden's one launch counts
 * batch * heads_kv.)
 * When the work is small, fa_backward runs on nine tensors in buffers sized like the forward's
 * (Q, K, V may share one; dQ, dK, dV may share one; one buffer `cut` short, or all `small`),
 * with O and LSE from fa_forward where every buffer fits (random values otherwise). A forward
 * plan is INVALID_PLAN. The call returns OK when every buffer holds its layout and no two
 * gradients' byte spans overlap, BUFFER_TOO_SMALL when a buffer is short, INVALID_ARGUMENT when
 * two gradients overlap (either when both). A rejected call leaves dQ, dK and dV untouched;
 * no call changes an input; an accepted one writes nothing outside the gradients' rows, dQ = 0
 * on a row with no key, dK = dV = 0 on a key no row sees, and, with O and LSE from the forward
 * and inputs small enough that nothing can leave the dtype's range, finite gradients within
 * (M = d max|dO| max|V|, G = heads_q / heads_kv * seqlen_q rows per K/V head, 2x for rounding)
 *   |dQ| <= 4 |scale| M max|K|,  |dK| <= 4 |scale| M max|Q| G,  |dV| <= 2 G max|dO|.
 */
#include "fuzz_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Only below this |score| bound is P = exp(S - LSE) within 1% of the exact value (the f32
 * rounding of S and LSE is then below 1e-2), so that the gradient bounds hold. */
#define FZ_BWD_SCORE_BOUND 1e4

enum { BQ, BK, BV, BO, BLSE, BDO, BDQ, BDK, BDV, BCOUNT };
static const char *const slot_name[BCOUNT] = {"q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv"};

/* Tensor t's layout, heads and sequence length (BLSE has none: NULL). */
static const fa_tensor_layout *layout_of(const fa_problem *p, int t, int64_t *heads,
                                         int64_t *seq)
{
    const fa_tensor_layout *all[BCOUNT] = {&p->q, &p->k, &p->v, &p->o, NULL, &p->d_o, &p->dq,
                                           &p->dk, &p->dv};
    int kv = t == BK || t == BV || t == BDK || t == BDV;
    *heads = kv ? p->heads_kv : p->heads_q;
    *seq = kv ? p->seqlen_k : p->seqlen_q;
    return all[t];
}

static uint64_t need_of(const fa_problem *p, int t)
{
    int64_t heads, seq;
    const fa_tensor_layout *l = layout_of(p, t, &heads, &seq);
    if (!l) /* LSE: f32 [batch, heads_q, seqlen_q] */
        return fz_mul_sat(fz_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q),
                          fz_mul_sat((uint64_t)p->seqlen_q, 4));
    return fz_span_bytes(l, p, heads, seq);
}

/* ---- plan -------------------------------------------------------------------------------- */

static void check_plan(const fa_plan *plan, const fa_problem *p)
{
    int32_t br = fa_plan_block_r(plan), bc = fa_plan_block_c(plan);
    const fa_problem *pp = fa_plan_problem(plan);
    FZ_CHECK(br >= 1 && bc >= 1 && fa_plan_work_group_size(plan) >= 1,
             "backward plan Br %d, Bc %d, work-group %d", br, bc, fa_plan_work_group_size(plan));
    uint64_t d = (uint64_t)p->head_dim;
    uint64_t scratch = fz_mul_sat(fz_add_sat(fz_mul_sat(2 * d, (uint64_t)p->seqlen_k), d), 8);
    FZ_CHECK(scratch == UINT64_MAX || fa_plan_scratch_bytes(plan) == scratch,
             "backward plan scratch %llu bytes, flashattn.h says (2 * %lld * %lld + %lld) * 8",
             (unsigned long long)fa_plan_scratch_bytes(plan), (long long)p->seqlen_k,
             (long long)p->head_dim, (long long)p->head_dim);
    FZ_CHECK(pp && memcmp(&pp->d_o, &p->d_o, sizeof p->d_o) == 0 &&
                 memcmp(&pp->dq, &p->dq, sizeof p->dq) == 0 &&
                 memcmp(&pp->dk, &p->dk, sizeof p->dk) == 0 &&
                 memcmp(&pp->dv, &p->dv, sizeof p->dv) == 0,
             "the backward plan's problem has other gradient layouts than the one planned");
}

/* ---- buffers ----------------------------------------------------------------------------- */

/* A backward call's buffers and what the harness expects of it. */
typedef struct bwd_run {
    const fz_case *c;
    int slot_of[BCOUNT];
    fz_buf b[BCOUNT];
    uint8_t *before[BCOUNT]; /* the inputs' contents before the call */
    int fits, overlap, from_forward;
} bwd_run;

static fa_buffer *buf_of(const bwd_run *r, int t)
{
    return r->b[r->slot_of[t]].buf;
}

/* [first byte, end) of gradient t; empty (0, 0) when it has no element. */
static void span_of(const fa_problem *p, int t, uint64_t *begin, uint64_t *end)
{
    int64_t heads, seq;
    const fa_tensor_layout *l = layout_of(p, t, &heads, &seq);
    *end = fz_span_bytes(l, p, heads, seq);
    *begin = *end ? (uint64_t)l->offset * fa_dtype_size(p->dtype) : 0;
}

/* Two gradients in the one shared buffer whose spans overlap (what fa_backward refuses). */
static int gradients_overlap(const fz_case *c)
{
    uint64_t begin[3], end[3];
    for (int i = 0; i < 3; i++)
        span_of(&c->p, BDQ + i, &begin[i], &end[i]);
    for (int i = 0; c->shared_grads && i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (begin[i] < end[i] && begin[j] < end[j] && begin[i] < end[j] && begin[j] < end[i])
                return 1;
    return 0;
}

/* Slots, sizes and contents: inputs random, gradients the sentinel. */
static void open_buffers(bwd_run *r)
{
    const fz_case *c = r->c;
    uint64_t rng = c->seed ^ 0x5bd1e995u; /* not the forward's stream */
    for (int t = 0; t < BCOUNT; t++) {
        r->slot_of[t] = t;
        if (c->shared_qkv && (t == BK || t == BV))
            r->slot_of[t] = BQ;
        if (c->shared_grads && (t == BDK || t == BDV))
            r->slot_of[t] = BDQ;
        uint64_t need = need_of(&c->p, t);
        if (need > r->b[r->slot_of[t]].need)
            r->b[r->slot_of[t]].need = need;
    }
    r->fits = fz_size_slots(c, r->b, r->slot_of, BCOUNT);
    r->overlap = gradients_overlap(c);
    for (int t = 0; t < BCOUNT; t++)
        if (r->slot_of[t] == t)
            fz_make_buffer(c, &r->b[t], t >= BDQ, t == BLSE ? FA_DTYPE_F32 : c->p.dtype, &rng);
}

/* O and LSE as fa_forward writes them, so the gradients are those of a real forward. */
static void forward_into(bwd_run *r, const fa_plan *fwd)
{
    fa_status st = fa_forward(fz_ctx, fwd, buf_of(r, BQ), buf_of(r, BK), buf_of(r, BV),
                              buf_of(r, BO), buf_of(r, BLSE));
    fz_trace_status("fa_forward (for the backward)", st);
    FZ_CHECK(st == FA_STATUS_OK, "fa_forward into buffers that fit: %s", fa_status_name(st));
    fz_fetch(r->c, &r->b[BO]);
    fz_fetch(r->c, &r->b[BLSE]);
    r->from_forward = 1;
}

static void snapshot_inputs(bwd_run *r)
{
    for (int t = BQ; t <= BDO; t++) {
        if (r->slot_of[t] != t)
            continue;
        r->before[t] = malloc(r->b[t].bytes);
        FZ_CHECK(r->before[t] != NULL, "out of host memory");
        memcpy(r->before[t], r->b[t].host, r->b[t].bytes);
    }
}

static void inputs_unchanged(bwd_run *r)
{
    for (int t = BQ; t <= BDO; t++) {
        if (r->slot_of[t] != t)
            continue;
        fz_fetch(r->c, &r->b[t]);
        FZ_CHECK(memcmp(r->before[t], r->b[t].host, r->b[t].bytes) == 0,
                 "fa_backward changed its input %s", slot_name[t]);
    }
}

static void close_buffers(bwd_run *r)
{
    for (int t = 0; t < BCOUNT; t++) {
        fa_buffer_destroy(r->b[t].buf);
        free(r->b[t].host);
        free(r->before[t]);
    }
}

/* ---- gradients --------------------------------------------------------------------------- */

/* The bounds of dQ, dK, dV listed at the top, or -1 each where they do not apply. */
static void gradient_bounds(const bwd_run *r, const fa_problem *pp, double bound[3])
{
    const fa_problem *p = &r->c->p;
    fa_dtype dt = p->dtype;
    double aq = fz_max_abs(&r->b[r->slot_of[BQ]], dt), ak = fz_max_abs(&r->b[r->slot_of[BK]], dt);
    double av = fz_max_abs(&r->b[r->slot_of[BV]], dt), ado = fz_max_abs(&r->b[BDO], dt);
    double scale = fabs((double)pp->scale), d = (double)p->head_dim;
    double g = (double)(p->heads_q / p->heads_kv) * (double)p->seqlen_q, m = d * ado * av;
    double top = dt == FA_DTYPE_F16 ? 65504.0 : 3.4e38;
    bound[0] = 4.0 * scale * m * ak;
    bound[1] = 4.0 * scale * m * aq * g;
    bound[2] = 2.0 * g * ado;
    int usable = r->from_forward && scale * d * aq * ak <= FZ_BWD_SCORE_BOUND;
    for (int i = 0; i < 3; i++)
        if (!usable || !(bound[i] <= top))
            bound[i] = -1.0;
}

/* One row of a gradient: exactly 0 when `zero`, within `bound` unless it is < 0; marks the
 * elements it covers. */
static void check_grad_row(const fa_problem *p, const fz_buf *b, size_t first, int zero,
                           double bound, const char *name, uint8_t *covered)
{
    for (int64_t x = 0; x < p->head_dim; x++) {
        size_t i = first + (size_t)x;
        float v = fz_load_elem(p->dtype, b->host, i);
        covered[i] = 1;
        FZ_CHECK(!zero || v == 0.0f, "%s element %zu is %g where nothing contributes", name, i,
                 (double)v);
        FZ_CHECK(bound < 0 || (isfinite(v) && fabs((double)v) <= bound),
                 "%s element %zu is %g, outside the bound %g", name, i, (double)v, bound);
    }
}

/* Every row of gradient t, per the zero rules and its bound. */
static void check_gradient(const bwd_run *r, int t, double bound, uint8_t *covered)
{
    const fa_problem *p = &r->c->p;
    int64_t heads, seq;
    const fa_tensor_layout *l = layout_of(p, t, &heads, &seq);
    const fz_buf *b = &r->b[r->slot_of[t]];
    /* Both causal masks give the last query row the most keys. */
    int64_t seen = p->seqlen_q > 0 ? fz_keys_of_row(p, p->seqlen_q - 1) : 0;
    for (int64_t bi = 0; bi < p->batch; bi++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t s = 0; s < seq; s++) {
                size_t first = (size_t)(l->offset + bi * l->stride_batch + h * l->stride_head +
                                        s * l->stride_seq);
                int zero = t == BDQ ? fz_keys_of_row(p, s) == 0 : s >= seen;
                check_grad_row(p, b, first, zero, bound, slot_name[t], covered);
            }
}

/* The gradients' rows, then every byte of their buffers outside them. */
static void check_gradients(const bwd_run *r, const fa_problem *pp)
{
    double bound[3];
    gradient_bounds(r, pp, bound);
    size_t elem = fa_dtype_size(r->c->p.dtype);
    uint8_t *covered[BCOUNT] = {NULL};
    for (int t = BDQ; t <= BDV; t++)
        if (r->slot_of[t] == t) {
            covered[t] = calloc(r->b[t].bytes / elem + 1, 1);
            FZ_CHECK(covered[t] != NULL, "out of host memory");
        }
    for (int t = BDQ; t <= BDV; t++)
        check_gradient(r, t, bound[t - BDQ], covered[r->slot_of[t]]);
    for (int t = BDQ; t <= BDV; t++) {
        for (size_t i = 0; covered[t] && i < r->b[t].bytes; i++)
            FZ_CHECK(covered[t][i / elem] || r->b[t].host[i] == FZ_SENTINEL(i),
                     "byte %zu of the %s buffer, outside every gradient's rows, was written", i,
                     slot_name[t]);
        free(covered[t]);
    }
}

/* ---- one input --------------------------------------------------------------------------- */

static fa_status call_backward(const bwd_run *r, const fa_plan *plan)
{
    return fa_backward(fz_ctx, plan, buf_of(r, BQ), buf_of(r, BK), buf_of(r, BV), buf_of(r, BO),
                       buf_of(r, BLSE), buf_of(r, BDO), buf_of(r, BDQ), buf_of(r, BDK),
                       buf_of(r, BDV));
}

static void gradients_untouched(bwd_run *r)
{
    for (int t = BDQ; t <= BDV; t++) {
        if (r->slot_of[t] != t)
            continue;
        fz_fetch(r->c, &r->b[t]);
        fz_untouched(&r->b[t], slot_name[t]);
    }
}

static void run_backward(const fz_case *c, const fa_plan *fwd, const fa_plan *bwd)
{
    bwd_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    open_buffers(&r);
    if (r.fits && fwd)
        forward_into(&r, fwd);
    snapshot_inputs(&r);
    if (r.fits && !r.overlap && fwd) { /* the one wrong argument is the kind of plan */
        fa_status st = call_backward(&r, fwd);
        FZ_CHECK(st == FA_STATUS_INVALID_PLAN, "fa_backward with a forward plan: %s",
                 fa_status_name(st));
        gradients_untouched(&r);
    }
    fa_status st = call_backward(&r, bwd), want = FA_STATUS_OK;
    fz_trace_status("fa_backward", st);
    fz_check_status_message(st, "fa_backward");
    if (!r.fits || r.overlap)
        want = !r.fits ? FA_STATUS_BUFFER_TOO_SMALL : FA_STATUS_INVALID_ARGUMENT;
    FZ_CHECK(st == want || (!r.fits && r.overlap && st == FA_STATUS_INVALID_ARGUMENT),
             "fa_backward returned %s, want %s (buffers %s, gradients %s)", fa_status_name(st),
             fa_status_name(want), r.fits ? "fit" : "short",
             r.overlap ? "overlap" : "apart");
    inputs_unchanged(&r);
    if (st == FA_STATUS_OK) {
        for (int t = BDQ; t <= BDV; t++)
            fz_fetch(c, &r.b[t]);
        check_gradients(&r, fa_plan_problem(bwd));
    } else {
        gradients_untouched(&r);
    }
    close_buffers(&r);
}

void fz_backward(const fz_case *c, fa_status checked, const fa_plan *fwd)
{
    fa_plan *plan = NULL;
    fa_status st = fa_plan_create_backward(fz_ctx, &c->p, &plan);
    fz_trace_status("fa_plan_create_backward", st);
    fz_check_status_message(st, "fa_plan_create_backward");
    FZ_CHECK((st == FA_STATUS_OK) == (plan != NULL), "fa_plan_create_backward: %s with plan %p",
             fa_status_name(st), (void *)plan);
    FZ_CHECK(checked == FA_STATUS_OK || st == checked || st == FA_STATUS_INVALID_STRIDE,
             "fa_problem_check said %s, fa_plan_create_backward %s", fa_status_name(checked),
             fa_status_name(st));
    if (st == FA_STATUS_OK) {
        check_plan(plan, &c->p);
        if (fz_work_of(&c->p) <= FZ_MAX_WORK / 2)
            run_backward(c, fwd, plan);
    }
    fa_plan_destroy(plan);
}
