/*
 * test_cuda_emu_bwd.c - the backward half of test_cuda_emu: the plan's flash_bwd_pre,
 * flash_bwd_dkdv and flash_bwd_dq launches (and flash_bwd_dsinks) emulated on the host, their
 * dQ, dK, dV and d_sinks against the golden's fa_backward_ex (tolerances as in test_backward.c,
 * structural zeros exact, nothing written outside the tensors, a second run bitwise equal).
 * The cases, problems and golden forward are test_cuda_emu.c's (test_cuda_emu.h).
 */
#include "cuda_internal.h"
#include "emu_api.h"
#include "emu_plan.h"
#include "internal.h"
#include "oracle.h"
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_cuda_emu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* test_backward_large_ds: dO in +-1e4, V in +-100, Q and K in +-0.25, so that |dS| passes
 * f16's 65504 while the gradients stay finite. */
static bool large_ds;

/* ---- the backward: flash_bwd_pre, flash_bwd_dkdv, flash_bwd_dq (kernels_cu/flash_bwd.cu) --- */

/*
 * Planned by fa_plan_create_backward for sm_80, mostly with tile overrides (Br, Bc), so the
 * three launches use two configurations: (d, Br, Bc) for flash_bwd_pre and flash_bwd_dq, and
 * (d, Bc, Br) for flash_bwd_dkdv, whose block owns Bc keys and streams Br query rows. f32 runs
 * on CUDA cores, f16/bf16 with d a multiple of 16 on tensor cores (MMA 1), except where an
 * override that is not a multiple of 16 keeps them on CUDA cores.
 */
static const emu_case bwd_cases[] = {
    {"bwd_gqa_bshd_f32_d64", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 12, 20, 64, 8,
     16, 0, false, false, NULL},
    {"bwd_gqa_bshd_f32_d64_folded", FA_DTYPE_F32, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 12, 20,
     64, 8, 16, 0, true, false, NULL},
    /* Sq > Sk bottom-right: rows 0..25 see no key (dQ exactly 0, nothing added to dK, dV). */
    {"bwd_mqa_bottom_right_f16_d8_padded", FA_DTYPE_F16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 2, 2, 1, 33, 7, 8, 8, 8, 3, false, false, NULL},
    /* Sq < Sk top-left: keys 5..16 are seen by no row (dK, dV exactly 0). */
    {"bwd_top_left_bf16_d96", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 2, 2, 5,
     17, 96, 8, 8, 0, false, false, NULL},
    {"bwd_gqa_bottom_right_f32_d96_tails", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BSHD, 1, 4, 2, 19, 27, 96, 8, 24, 0, false, false, NULL},
    {"bwd_mqa_top_left_f16_d64_padded", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1,
     2, 1, 37, 29, 64, 16, 8, 2, false, false, NULL},
    /* Tensor cores (sm_80, f16/bf16, d a multiple of 16): tails, GQA/MQA, rows without keys,
     * unseen keys, padding, the planner's own tiles on a folded grid. */
    {"bwd_mma_gqa_bshd_f16_d64", FA_DTYPE_F16, FA_MASK_NONE, FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64,
     16, 32, 0, false, false, NULL},
    {"bwd_mma_mqa_bottom_right_bf16_d128_padded", FA_DTYPE_BF16, FA_MASK_CAUSAL_BOTTOM_RIGHT,
     FA_LAYOUT_BHSD, 1, 2, 1, 40, 24, 128, 16, 16, 3, false, false, NULL},
    {"bwd_mma_top_left_f16_d16", FA_DTYPE_F16, FA_MASK_CAUSAL_TOP_LEFT, FA_LAYOUT_BHSD, 1, 2, 2,
     20, 50, 16, 16, 16, 0, false, false, NULL},
    {"bwd_mma_default_plan_bf16_d64_folded", FA_DTYPE_BF16, FA_MASK_NONE, FA_LAYOUT_BHSD, 1, 2,
     1, 70, 70, 64, 0, 0, 0, true, false, NULL},
};

/* Host images of a backward problem's tensors, by fa__tensor: Q, K, V, dO random; O and LSE
 * from the golden's forward; dQ, dK, dV and the scratch (D) start as 0xFF bytes (NaN). ref
 * holds the golden's dQ, dK, dV (same layouts). */
typedef struct bwd_images {
    void *t[FA__TENSOR_COUNT];
    size_t bytes[FA__TENSOR_COUNT];
    void *ref[3];
    mod_images mi;     /* the modifiers' tensors (NULL where off), also at t[FA__TENSOR_ALIBI ..] */
    float *dsinks_ref; /* the golden's d_sinks [Hq] (NULL without sinks) */
} bwd_images;

#define GUARD_ELEMS 16 /* elements after each tensor's last one: a write past it shows */

static void bwd_alloc(const emu_case *c, const fa_problem *p, const fa_plan *plan,
                      bwd_images *im)
{
    /* The eight tensors with a layout, by their public ids (+1: 0 is none). */
    static const int public_id[FA__TENSOR_COUNT] = {
        [FA__TENSOR_Q] = FA_TENSOR_Q + 1,   [FA__TENSOR_K] = FA_TENSOR_K + 1,
        [FA__TENSOR_V] = FA_TENSOR_V + 1,   [FA__TENSOR_O] = FA_TENSOR_O + 1,
        [FA__TENSOR_DO] = FA_TENSOR_DO + 1, [FA__TENSOR_DQ] = FA_TENSOR_DQ + 1,
        [FA__TENSOR_DK] = FA_TENSOR_DK + 1, [FA__TENSOR_DV] = FA_TENSOR_DV + 1};
    size_t elem = fa_dtype_size(c->dtype), rows = (size_t)(c->batch * c->heads_q * c->seqlen_q);
    memset(im, 0, sizeof *im);
    for (int i = 0; i < FA__TENSOR_COUNT; i++)
        if (public_id[i])
            im->bytes[i] = (span(p, (fa_tensor_id)(public_id[i] - 1)) + GUARD_ELEMS) * elem;
    im->bytes[FA__TENSOR_LSE] = (rows + 1) * sizeof(float);
    im->bytes[FA__TENSOR_SCRATCH] = (size_t)plan->scratch_bytes + sizeof(float);
    if (p->sinks)
        im->bytes[FA__TENSOR_DSINKS] = ((size_t)c->heads_q + 1) * sizeof(float);
    for (int i = 0; i < FA__TENSOR_COUNT; i++) {
        if (i >= FA__TENSOR_ALIBI && i <= FA__TENSOR_SINKS)
            continue; /* mods_alloc's */
        im->t[i] = malloc(im->bytes[i]);
        assert_non_null(im->t[i]);
        memset(im->t[i], 0xFF, im->bytes[i]);
    }
    for (int i = 0; i < 3; i++) {
        im->ref[i] = malloc(im->bytes[FA__TENSOR_DQ + i]);
        assert_non_null(im->ref[i]);
        memset(im->ref[i], 0xFF, im->bytes[FA__TENSOR_DQ + i]);
    }
    fill_amp(c, im->t[FA__TENSOR_Q], im->bytes[FA__TENSOR_Q] / elem, "q", large_ds ? 0.25 : 1);
    fill_amp(c, im->t[FA__TENSOR_K], im->bytes[FA__TENSOR_K] / elem, "k", large_ds ? 0.25 : 1);
    fill_amp(c, im->t[FA__TENSOR_V], im->bytes[FA__TENSOR_V] / elem, "v", large_ds ? 100 : 1);
    fill_amp(c, im->t[FA__TENSOR_DO], im->bytes[FA__TENSOR_DO] / elem, "do",
             large_ds ? 1e4 : 1);
    mods_alloc(c, p, &im->mi);
    im->t[FA__TENSOR_ALIBI] = im->mi.alibi;
    im->t[FA__TENSOR_BIAS] = im->mi.bias;
    im->t[FA__TENSOR_SINKS] = im->mi.sinks;
    if (p->sinks) {
        im->dsinks_ref = malloc(im->bytes[FA__TENSOR_DSINKS]);
        assert_non_null(im->dsinks_ref);
        memset(im->dsinks_ref, 0xFF, im->bytes[FA__TENSOR_DSINKS]);
    }
}

static void bwd_free(bwd_images *im)
{
    for (int i = 0; i < FA__TENSOR_COUNT; i++)
        if (i < FA__TENSOR_ALIBI || i > FA__TENSOR_SINKS)
            free(im->t[i]);
    mods_free(&im->mi);
    free(im->dsinks_ref);
    for (int i = 0; i < 3; i++)
        free(im->ref[i]);
}

/* The golden on the same host memory: its forward's O and LSE into the images, then its
 * backward's dQ, dK, dV into ref (and d_sinks into dsinks_ref), with the case's modifiers. */
static void bwd_golden(const fa_problem *p, bwd_images *im)
{
    const size_t fwd_bytes[4] = {im->bytes[FA__TENSOR_Q], im->bytes[FA__TENSOR_K],
                                 im->bytes[FA__TENSOR_V], im->bytes[FA__TENSOR_O]};
    run_golden(p, im->t[FA__TENSOR_Q], im->t[FA__TENSOR_K], im->t[FA__TENSOR_V],
               im->t[FA__TENSOR_O], im->t[FA__TENSOR_LSE], fwd_bytes,
               im->bytes[FA__TENSOR_LSE], &im->mi);
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_buffer *b[FA__TENSOR_SCRATCH] = {NULL};
    for (int i = 0; i < FA__TENSOR_SCRATCH; i++) {
        void *mem = i >= FA__TENSOR_DQ ? im->ref[i - FA__TENSOR_DQ] : im->t[i];
        assert_int_equal(fa_buffer_wrap_host(ctx, mem, im->bytes[i], &b[i]), OK);
    }
    fa_problem golden = *p;
    golden.block_r = golden.block_c = 0;
    fa_buffer *bm[4] = {NULL, NULL, NULL, NULL}; /* ALiBi, bias, sinks, d_sinks */
    void *mod_mem[4] = {im->mi.alibi, im->mi.bias, im->mi.sinks, im->dsinks_ref};
    size_t slopes = (size_t)p->heads_q * (p->alibi == 2 ? (size_t)p->batch : 1);
    size_t mod_bytes[4] = {slopes * 4, im->mi.bias_bytes, (size_t)p->heads_q * 4,
                           (size_t)p->heads_q * 4};
    for (int i = 0; i < 4; i++)
        if (mod_mem[i])
            assert_int_equal(fa_buffer_wrap_host(ctx, mod_mem[i], mod_bytes[i], &bm[i]), OK);
    fa_modifier_buffers mods = {bm[0], bm[1], bm[2], bm[3]};
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create_backward(ctx, &golden, &plan), OK);
    assert_int_equal(fa_backward_ex(ctx, plan, b[FA__TENSOR_Q], b[FA__TENSOR_K], b[FA__TENSOR_V],
                                    b[FA__TENSOR_O], b[FA__TENSOR_LSE], b[FA__TENSOR_DO],
                                    b[FA__TENSOR_DQ], b[FA__TENSOR_DK], b[FA__TENSOR_DV], &mods),
                     OK);
    fa_plan_destroy(plan);
    for (int i = 0; i < FA__TENSOR_SCRATCH; i++)
        fa_buffer_destroy(b[i]);
    for (int i = 0; i < 4; i++)
        fa_buffer_destroy(bm[i]);
    fa_context_destroy(ctx);
}

/* The plan's three launches in order on the images, as fa_backward runs them: outputs and D
 * back to 0xFF first, launches with an empty grid skipped. scale_error multiplies the softmax
 * scale the kernels see (1: the real run). */
static void bwd_emulate(const emu_case *c, const fa_plan *plan, bwd_images *im,
                        float scale_error)
{
    for (int i = FA__TENSOR_DQ; i <= FA__TENSOR_DSINKS; i++)
        if (i <= FA__TENSOR_SCRATCH || i == FA__TENSOR_DSINKS)
            memset(im->t[i], 0xFF, im->bytes[i]);
    for (int i = 0; i < plan->n_launches; i++) {
        const fa__launch *l = &plan->launches[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0)
            continue;
        char options[256];
        const fa_emu_kernel *kernel = emu_launch_kernel(c->name, l, options, sizeof options);
        void *args[FA__MAX_LAUNCH_ARGS];
        for (int a = 0; a < l->n_args; a++)
            args[a] = im->t[l->args[a]];
        fa_kernel_params kp = l->params;
        kp.has_lse = 1;
        kp.scale_log2 *= scale_error;
        unsigned gx = c->fold ? 1u : (unsigned)l->grid[0],
                 gy = c->fold ? 1u : (unsigned)l->grid[1],
                 gz = c->fold ? 1u : (unsigned)l->grid[2];
        emu_launch(c->name, l, kernel, gx, gy, gz, args, &kp);
    }
}

/* One gradient tensor [B, heads, seq, d] against the golden's: within rel * max|golden| + 1e-6,
 * exactly 0 on rows zero_row marks (per (b * heads + h) * seq + s), and every buffer element
 * outside the tensor as the golden left it (0xFF). Returns the worst |error| / tolerance; adds
 * the mismatches to *bad. */
static double compare_grad(const emu_case *c, const char *what, const fa_tensor_layout *l,
                           int64_t heads, int64_t seq, const unsigned char *got,
                           const unsigned char *want, size_t bytes,
                           const unsigned char *zero_row, int *bad)
{
    const size_t elem = fa_dtype_size(c->dtype), n = bytes / elem;
    const int64_t d = c->head_dim;
    double rel = c->dtype == FA_DTYPE_F32 ? 1e-5 : c->dtype == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
    double peak = 0.0, worst = 0.0;
    unsigned char *inside = calloc(n, 1);
    assert_non_null(inside);
    for (int pass = 0; pass < 2; pass++) /* 0: the peak; 1: the check */
        for (int64_t row = 0; row < c->batch * heads * seq; row++) {
            int64_t b = row / (heads * seq), h = row / seq % heads, s = row % seq;
            size_t at = (size_t)(l->offset + b * l->stride_batch + h * l->stride_head +
                                 s * l->stride_seq);
            for (int64_t x = 0; x < d; x++) {
                double g = oracle_load(c->dtype, got, (int64_t)at + x);
                double w = oracle_load(c->dtype, want, (int64_t)at + x);
                double tol = rel * peak + 1e-6, err = fabs(g - w);
                inside[at + (size_t)x] = 1;
                if (pass == 0) {
                    peak = fabs(w) > peak ? fabs(w) : peak;
                    continue;
                }
                worst = err / tol > worst ? err / tol : worst;
                if (zero_row[row] ? g == 0.0 : err <= tol)
                    continue;
                if ((*bad)++ < 5)
                    print_message("  %s: %s row %lld x %lld is %.9g, golden %.9g%s\n", c->name,
                                  what, (long long)row, (long long)x, g, w,
                                  zero_row[row] ? " (must be exactly 0)" : "");
            }
        }
    for (size_t i = 0; i < n; i++)
        if (!inside[i] && memcmp(got + i * elem, want + i * elem, elem) != 0 && (*bad)++ < 5)
            print_message("  %s: %s buffer element %zu, outside the tensor, was written\n",
                          c->name, what, i);
    free(inside);
    return worst;
}

/* Rows that must get exactly 0: dQ rows with no key (LSE -inf), into zq [B, Hq, Sq]; dK and dV
 * rows of keys no query row sees (past the last row's allowed keys), into zk [B, Hkv, Sk]. */
static void bwd_zero_rows(const emu_case *c, const float *lse, unsigned char *zq,
                          unsigned char *zk)
{
    for (int64_t i = 0; i < c->batch * c->heads_q * c->seqlen_q; i++)
        zq[i] = isinf(lse[i]) && lse[i] < 0;
    int64_t seen = c->seqlen_q > 0 ? fa_keys_allowed((int)c->mask, c->seqlen_q - 1, c->seqlen_q,
                                                     c->seqlen_k)
                                   : 0;
    for (int64_t i = 0; i < c->batch * c->heads_kv * c->seqlen_k; i++)
        zk[i] = i % c->seqlen_k >= seen;
}

/* dQ, dK and dV against the golden; returns the mismatches. */
static int bwd_compare(const emu_case *c, const fa_problem *p, const bwd_images *im)
{
    unsigned char *zq = calloc((size_t)(c->batch * c->heads_q * c->seqlen_q) + 1, 1);
    unsigned char *zk = calloc((size_t)(c->batch * c->heads_kv * c->seqlen_k) + 1, 1);
    assert_true(zq && zk);
    bwd_zero_rows(c, im->t[FA__TENSOR_LSE], zq, zk);
    int bad = 0;
    double w_dq = compare_grad(c, "dQ", &p->dq, c->heads_q, c->seqlen_q, im->t[FA__TENSOR_DQ],
                               im->ref[0], im->bytes[FA__TENSOR_DQ], zq, &bad);
    double w_dk = compare_grad(c, "dK", &p->dk, c->heads_kv, c->seqlen_k, im->t[FA__TENSOR_DK],
                               im->ref[1], im->bytes[FA__TENSOR_DK], zk, &bad);
    double w_dv = compare_grad(c, "dV", &p->dv, c->heads_kv, c->seqlen_k, im->t[FA__TENSOR_DV],
                               im->ref[2], im->bytes[FA__TENSOR_DV], zk, &bad);
    print_message("  %-36s worst err/tol: dq %.3f dk %.3f dv %.3f\n", c->name, w_dq, w_dk, w_dv);
    if (p->sinks) {
        /* d_sinks: f32 sums (a tree) against the golden's f64, D from the stored O either way;
         * the element past [Hq] untouched. */
        const float *got = im->t[FA__TENSOR_DSINKS], *want = im->dsinks_ref;
        for (int64_t h = 0; h <= c->heads_q; h++) {
            bool ok = h == c->heads_q
                          ? memcmp(&got[h], &want[h], sizeof *got) == 0
                          : fabs((double)got[h] - want[h]) <= 1e-4 * (1.0 + fabs(want[h]));
            if (!ok && bad++ < 10)
                print_message("  %s: d_sinks[%lld] is %.9g, golden %.9g\n", c->name,
                              (long long)h, got[h], want[h]);
        }
    }
    free(zq);
    free(zk);
    return bad;
}

/* Plans, runs (twice: the second must give the same bits) and compares one backward case.
 * Returns the number of mismatching elements. */
static int run_bwd_case(const emu_case *c, float scale_error)
{
    fa_problem p;
    fa_context *arch = sm80_planning(c, &p);
    fa_plan *plan = NULL;
    if (fa_plan_create_backward(arch, &p, &plan) != OK)
        fail_msg("%s: the sm_80 backward plan failed: %s", c->name, fa_context_last_error(arch));
    assert_int_equal(plan->n_launches, p.sinks ? 4 : 3);
    bwd_images im;
    bwd_alloc(c, &p, plan, &im);
    bwd_golden(&p, &im);
    double t0 = harness_seconds();
    bwd_emulate(c, plan, &im, scale_error);
    double secs = harness_seconds() - t0;
    int bad = bwd_compare(c, &p, &im);
    print_message("  %-36s Br %d, Bc %d, %.2f s: %s\n", c->name, (int)plan->tiles.block_r,
                  (int)plan->tiles.block_c, secs, bad ? "MISMATCH" : "matches the golden");
    /* Determinism: a second run from 0xFF outputs gives the same bits. */
    void *first[3];
    for (int i = 0; i < 3; i++) {
        first[i] = malloc(im.bytes[FA__TENSOR_DQ + i]);
        assert_non_null(first[i]);
        memcpy(first[i], im.t[FA__TENSOR_DQ + i], im.bytes[FA__TENSOR_DQ + i]);
    }
    bwd_emulate(c, plan, &im, scale_error);
    for (int i = 0; i < 3; i++) {
        if (memcmp(first[i], im.t[FA__TENSOR_DQ + i], im.bytes[FA__TENSOR_DQ + i]) != 0)
            fail_msg("%s: a second run gave different %s bits", c->name,
                     i == 0 ? "dQ" : i == 1 ? "dK" : "dV");
        free(first[i]);
    }
    bwd_free(&im);
    fa_plan_destroy(plan);
    fa_context_destroy(arch);
    return bad;
}

void test_backward_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bwd_cases / sizeof bwd_cases[0]; i++) {
        int bad = run_bwd_case(&bwd_cases[i], 1.0f);
        if (bad)
            fail_msg("%s: %d elements differ from the golden", bwd_cases[i].name, bad);
    }
}

/* The forward's modifier cases (mod_cases: each feature alone and all together, CUDA cores and
 * tensor cores, masks, GQA, rows without keys) through the backward: dQ, dK, dV and d_sinks
 * against the golden. */
void test_backward_modifier_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < mod_case_count; i++) {
        int bad = run_bwd_case(&mod_cases[i], 1.0f);
        if (bad)
            fail_msg("%s: %d elements differ from the golden", mod_cases[i].name, bad);
    }
}

/* f16 dS past 65504, rounded for dS K and dS^T Q on tensor cores, gives finite gradients that
 * match the golden's (it was inf). */
void test_backward_large_ds(void **state)
{
    (void)state;
    static const emu_case c = {"bwd_mma_large_ds_f16_d64", FA_DTYPE_F16, FA_MASK_NONE,
                               FA_LAYOUT_BSHD, 2, 4, 2, 37, 45, 64, 16, 32, 0, false, false, NULL};
    large_ds = true;
    int bad = run_bwd_case(&c, 1.0f);
    large_ds = false;
    if (bad)
        fail_msg("%s: %d elements differ from the golden", c.name, bad);
}

/* As for the forward: a scale 0.1% off must give mismatches in the backward's comparison. */
void test_backward_catches_errors(void **state)
{
    (void)state;
    assert_true(run_bwd_case(&bwd_cases[0], 1.001f) > 0);
}
