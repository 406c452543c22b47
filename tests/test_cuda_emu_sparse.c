/*
 * test_cuda_emu_sparse.c - the CUDA kernels' block-sparse attention (kernels_cu/flash_kv.cu's
 * list walk, in flash_fwd.cu and flash_bwd.cu) run without a GPU, through the host emulation of
 * tests/cuda_emu, against the CPU golden on the same inputs and lists: forward (O, LSE) and
 * backward (dQ, dK, dV), CUDA cores and tensor cores, random block masks of several densities
 * (0 to 1), per-head and broadcast lists, causal masks and a window, GQA, f32/f16/bf16, full
 * blocks (SPARSE_FULL), tiles smaller than a mask block and tiles over several blocks, the
 * pipelined tensor-core forward. Rows without a computed key must be exactly O = 0 and
 * LSE = -inf, keys no row computes exactly dK = dV = 0, nothing is written past a tensor, and a
 * second backward gives the same bits.
 *
 * Each case plans for sm_80 (tile overrides pick a compiled configuration, tests/CMakeLists.txt)
 * and emu_run_plan runs the plan's launches with the lists bound as the backend binds them.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "emu_plan.h"
#include "flashattn_block_mask.h"
#include "internal.h"
#include "oracle.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK FA_STATUS_OK
#define GUARD 16 /* elements past each output, 0xFF bytes that must stay so */

typedef struct sparse_case {
    const char *name;
    fa_dtype dtype;
    fa_mask mask;
    int64_t b, hq, hkv, sq, sk, d;
    int32_t br, bc;     /* tile overrides: a compiled configuration's */
    int32_t bq, bk;     /* mask block sizes */
    int percent;        /* block density */
    bool per_head;      /* lists [B, Hq, ...]; else broadcast [1, 1, ...] */
    bool full;          /* wholly visible blocks go to the full lists (half of them) */
    int64_t wl, wr;     /* a window when wl > -2 */
    bool pipeline;      /* FLASHATTN_CUDA_PIPELINE=1, the forward alone */
    int32_t splits;     /* the forward's split-KV chunks; 0: none (kv_splits 1) */
} sparse_case;

static const sparse_case cases[] = {
    /* CUDA cores: tiles 16 within blocks of 32 x 64, GQA, per-head lists, full blocks. */
    {"cores_f32_gqa_bottom_right_full", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 2, 4, 2, 45,
     110, 40, 16, 16, 32, 64, 50, true, true, -2, -2, false, 0},
    {"cores_f32_density_0", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 1, 2, 1, 45, 70, 40, 16,
     16, 16, 16, 0, false, false, -2, -2, false, 0},
    {"cores_f32_density_1_full", FA_DTYPE_F32, FA_MASK_CAUSAL_BOTTOM_RIGHT, 1, 2, 2, 61, 61, 40,
     16, 16, 16, 16, 100, true, true, -2, -2, false, 0},
    /* Tiles of 32 over blocks of 16: each tile the union of four blocks, masked per element. */
    {"cores_f32_tiles_over_blocks", FA_DTYPE_F32, FA_MASK_NONE, 1, 2, 1, 100, 100, 32, 32, 32,
     16, 16, 50, true, false, -2, -2, false, 0},
    /* Tensor cores: a tenth of the blocks, broadcast, full, the forward split in 3 chunks (each
     * from its first listed tile) and merged; GQA; a window with causal, per head. */
    {"mma_f16_tenth_broadcast_full_split", FA_DTYPE_F16, FA_MASK_NONE, 1, 2, 1, 96, 130, 64, 16,
     16, 16, 16, 10, false, true, -2, -2, false, 3},
    {"mma_f16_half_gqa", FA_DTYPE_F16, FA_MASK_NONE, 2, 4, 2, 70, 64, 64, 16, 16, 32, 16, 50,
     true, false, -2, -2, false, 0},
    {"mma_bf16_top_left_window", FA_DTYPE_BF16, FA_MASK_CAUSAL_TOP_LEFT, 1, 3, 1, 90, 90, 64, 16,
     16, 16, 32, 50, true, false, 40, 5, false, 0},
    {"mma_f16_pipelined_forward_full", FA_DTYPE_F16, FA_MASK_NONE, 1, 2, 1, 64, 150, 64, 16, 16,
     16, 16, 30, true, true, -2, -2, true, 0},
};

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Whether query row i sees key j under the problem's mask and window (kernel_params.h's rule). */
static bool visible(const fa_problem *p, int64_t i, int64_t j)
{
    if (j >= fa_keys_allowed((int)p->mask, i, p->seqlen_q, p->seqlen_k))
        return false;
    if (!p->window)
        return true;
    int64_t at = i + p->seqlen_k - p->seqlen_q;
    return (p->window_left < 0 || j >= at - p->window_left) &&
           (p->window_right < 0 || j <= at + p->window_right);
}

static bool wholly_visible(const fa_problem *p, int64_t qb, int64_t kb)
{
    for (int64_t i = qb * p->sparse_block_q; i < (qb + 1) * p->sparse_block_q && i < p->seqlen_q;
         i++)
        for (int64_t j = kb * p->sparse_block_k;
             j < (kb + 1) * p->sparse_block_k && j < p->seqlen_k; j++)
            if (!visible(p, i, j))
                return false;
    return true;
}

/* The images of one case: inputs, the golden's outputs (ref) and the emulated ones (out), by
 * fa__tensor; the lists in fa__tensor order from FA__TENSOR_KV_NUM_BLOCKS. */
typedef struct images {
    fa_problem p;
    void *t[FA__TENSOR_COUNT];
    size_t bytes[FA__TENSOR_COUNT];
    void *ref[FA__TENSOR_COUNT];
} images;

static const fa__tensor outputs[] = {FA__TENSOR_O, FA__TENSOR_LSE, FA__TENSOR_DQ, FA__TENSOR_DK,
                                     FA__TENSOR_DV};

static void *alloc_bytes(size_t bytes, int fill)
{
    void *m = malloc(bytes);
    assert_non_null(m);
    memset(m, fill, bytes);
    return m;
}

static void problem_of(const sparse_case *c, fa_problem *p)
{
    assert_int_equal(fa_problem_init(p, c->dtype, FA_LAYOUT_BHSD, c->b, c->hq, c->hkv, c->sq,
                                     c->sk, c->d),
                     OK);
    p->mask = c->mask;
    p->window = c->wl > -2;
    p->window_left = c->wl;
    p->window_right = c->wr;
    p->block_r = c->br;
    p->block_c = c->bc;
    p->block_sparse = 1;
    p->sparse_block_q = c->bq;
    p->sparse_block_k = c->bk;
    p->sparse_batch = c->per_head ? (int32_t)c->b : 1;
    p->sparse_heads = c->per_head ? (int32_t)c->hq : 1;
    p->sparse_full = c->full;
    p->kv_splits = c->splits > 0 ? c->splits : 1;
}

/* A random dense block mask of the case's density (full blocks value 2) and its lists. */
static void make_lists(const sparse_case *c, images *im, uint32_t *seed)
{
    const fa_problem *p = &im->p;
    const fa_block_mask_shape s = {p->sparse_batch, p->sparse_heads, p->seqlen_q,
                                   p->seqlen_k, p->sparse_block_q, p->sparse_block_k};
    const int64_t nq = fa_block_mask_q_blocks(&s), nk = fa_block_mask_k_blocks(&s);
    const int64_t bhs = s.batch * s.heads, cells = bhs * nq * nk;
    uint8_t *dense = alloc_bytes((size_t)cells + 1, 0);
    for (int64_t x = 0; x < cells; x++) {
        bool on = (int)(lcg(seed) % 100) < c->percent;
        bool full = on && c->full && (lcg(seed) & 1) && wholly_visible(p, x / nk % nq, x % nk);
        dense[x] = full ? 2 : on ? 1 : 0;
    }
    const int64_t rows[8] = {nq, nq, nq, nq, nk, nk, nk, nk};
    const int64_t cols[8] = {1, nk, 1, nk, 1, nq, 1, nq};
    int32_t *l[8];
    for (int i = 0; i < 8; i++) {
        const int t = FA__TENSOR_KV_NUM_BLOCKS + i;
        im->bytes[t] = (size_t)(bhs * rows[i] * cols[i]) * 4;
        l[i] = im->t[t] = alloc_bytes(im->bytes[t] + 4, 0);
    }
    fa_block_lists kv = {l[0], l[1], c->full ? l[2] : NULL, c->full ? l[3] : NULL};
    fa_block_lists q = {l[4], l[5], c->full ? l[6] : NULL, c->full ? l[7] : NULL};
    char why[256] = "";
    assert_int_equal(fa_block_mask_lists(&s, dense, &kv, &q, why, sizeof why), OK);
    free(dense);
}

static void images_open(const sparse_case *c, images *im, uint32_t seed)
{
    memset(im, 0, sizeof *im);
    problem_of(c, &im->p);
    const size_t e = fa_dtype_size(c->dtype);
    const int64_t qn = c->b * c->hq * c->sq * c->d, kn = c->b * c->hkv * c->sk * c->d;
    const struct {
        fa__tensor t;
        int64_t n;
        size_t elem;
    } all[] = {{FA__TENSOR_Q, qn, e},  {FA__TENSOR_K, kn, e},  {FA__TENSOR_V, kn, e},
               {FA__TENSOR_DO, qn, e}, {FA__TENSOR_O, qn, e},  {FA__TENSOR_DQ, qn, e},
               {FA__TENSOR_DK, kn, e}, {FA__TENSOR_DV, kn, e},
               {FA__TENSOR_LSE, c->b * c->hq * c->sq, 4}};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const fa__tensor t = all[i].t;
        im->bytes[t] = (size_t)all[i].n * all[i].elem;
        im->t[t] = alloc_bytes(im->bytes[t] + GUARD * all[i].elem, 0xFF);
        if (t <= FA__TENSOR_V || t == FA__TENSOR_DO) {
            for (int64_t x = 0; x < all[i].n; x++)
                oracle_store(c->dtype, im->t[t], x, (lcg(&seed) % 2000000) / 1e6 - 1.0);
            continue;
        }
        im->ref[t] = alloc_bytes(im->bytes[t] + GUARD * all[i].elem, 0xFF); /* an output */
    }
    make_lists(c, im, &seed);
}

static void images_close(images *im)
{
    for (int t = 0; t < FA__TENSOR_COUNT; t++) {
        free(im->t[t]);
        free(im->ref[t]);
    }
}

/* The CPU golden's forward, then (backward) its backward from that O and LSE, into ref[]. */
static void run_golden(images *im, bool backward)
{
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    assert_int_equal(fa_context_create(&ctx, &opts, NULL, 0), OK);
    fa_buffer *b[FA__TENSOR_COUNT] = {NULL};
    for (int t = 0; t < FA__TENSOR_COUNT; t++) {
        void *mem = im->ref[t] ? im->ref[t] : im->t[t];
        if (mem && im->bytes[t] > 0)
            assert_int_equal(fa_buffer_wrap_host(ctx, mem, im->bytes[t], &b[t]), OK);
    }
    fa_problem golden = im->p;
    golden.block_r = golden.block_c = 0;
    fa_tensors ts = {.q = b[FA__TENSOR_Q], .k = b[FA__TENSOR_K], .v = b[FA__TENSOR_V],
                     .o = b[FA__TENSOR_O], .lse = b[FA__TENSOR_LSE],
                     .kv_num_blocks = b[FA__TENSOR_KV_NUM_BLOCKS],
                     .kv_indices = b[FA__TENSOR_KV_INDICES]};
    if (golden.sparse_full) {
        ts.full_kv_num_blocks = b[FA__TENSOR_FULL_KV_NUM_BLOCKS];
        ts.full_kv_indices = b[FA__TENSOR_FULL_KV_INDICES];
    }
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, &golden, &plan), OK);
    assert_int_equal(fa_run(ctx, plan, &ts), OK);
    fa_plan_destroy(plan);
    if (backward) {
        ts.d_o = b[FA__TENSOR_DO];
        ts.dq = b[FA__TENSOR_DQ];
        ts.dk = b[FA__TENSOR_DK];
        ts.dv = b[FA__TENSOR_DV];
        ts.q_num_blocks = b[FA__TENSOR_Q_NUM_BLOCKS];
        ts.q_indices = b[FA__TENSOR_Q_INDICES];
        if (golden.sparse_full) {
            ts.full_q_num_blocks = b[FA__TENSOR_FULL_Q_NUM_BLOCKS];
            ts.full_q_indices = b[FA__TENSOR_FULL_Q_INDICES];
        }
        assert_int_equal(fa_plan_create_backward(ctx, &golden, &plan), OK);
        assert_int_equal(fa_run(ctx, plan, &ts), OK);
        fa_plan_destroy(plan);
    }
    for (int t = 0; t < FA__TENSOR_COUNT; t++)
        fa_buffer_destroy(b[t]);
    fa_context_destroy(ctx);
}

/* Runs the op's sm_80 plan in the emulator: the forward's O and LSE, or the backward (from the
 * golden's O and LSE) into dQ, dK, dV. */
static void run_emulated(const sparse_case *c, images *im, fa__op op)
{
    fa_context *arch = NULL;
    char why[256] = "";
    assert_int_equal(fa_context_create_planning(&arch, FA_BACKEND_CUDA, "sm_80", why, sizeof why),
                     OK);
    fa_plan *plan = NULL;
    fa_status st = op == FA__OP_FORWARD ? fa_plan_create(arch, &im->p, &plan)
                                        : fa_plan_create_backward(arch, &im->p, &plan);
    if (st != OK)
        fail_msg("%s: the sm_80 plan failed: %s", c->name, fa_context_last_error(arch));
    void *mem[FA__TENSOR_COUNT];
    memcpy(mem, im->t, sizeof mem);
    if (op == FA__OP_BACKWARD) { /* the golden's forward outputs */
        mem[FA__TENSOR_O] = im->ref[FA__TENSOR_O];
        mem[FA__TENSOR_LSE] = im->ref[FA__TENSOR_LSE];
    }
    emu_run_plan(c->name, plan, mem, true, 0, false);
    fa_plan_destroy(plan);
    fa_context_destroy(arch);
}

/* Whether row r of output t is one no block computes: a query row (O, LSE, dQ) whose golden
 * LSE is -inf, a key row (dK, dV) whose golden dV row is all 0 (dO is random, so only a key no
 * row weighs has it). */
static bool structural_row(const sparse_case *c, const images *im, fa__tensor t, int64_t r)
{
    if (t == FA__TENSOR_DK || t == FA__TENSOR_DV) {
        for (int64_t x = 0; x < c->d; x++)
            if (oracle_load(c->dtype, im->ref[FA__TENSOR_DV], r * c->d + x) != 0.0)
                return false;
        return true;
    }
    return ((const float *)im->ref[FA__TENSOR_LSE])[r] == -INFINITY;
}

/* One output against the golden's: within rel * max|golden| (+ a floor), exactly the golden's
 * on rows no block computes (0, LSE -inf), NaN never, and the guard past it untouched. Returns
 * the worst error / tolerance. */
static double compare(const sparse_case *c, const images *im, fa__tensor t, const char *what)
{
    const fa_dtype dt = t == FA__TENSOR_LSE ? FA_DTYPE_F32 : c->dtype;
    const size_t e = fa_dtype_size(dt);
    const int64_t n = (int64_t)(im->bytes[t] / e);
    const double rel = dt == FA_DTYPE_F32 ? 1e-5 : dt == FA_DTYPE_F16 ? 2e-3 : 1.6e-2;
    double peak = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double w = oracle_load(dt, im->ref[t], i);
        peak = isfinite(w) && fabs(w) > peak ? fabs(w) : peak;
    }
    const double tol = rel * (t == FA__TENSOR_LSE ? 1.0 : peak) + 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double g = oracle_load(dt, im->t[t], i), w = oracle_load(dt, im->ref[t], i);
        bool structural = structural_row(c, im, t, t == FA__TENSOR_LSE ? i : i / c->d);
        bool ok = structural ? g == w : fabs(g - w) <= tol * (t == FA__TENSOR_LSE ? 1 + fabs(w)
                                                                                   : 1);
        if (!ok)
            fail_msg("%s: %s element %lld is %.9g, golden %.9g", c->name, what, (long long)i, g,
                     w);
        if (!structural)
            worst = fmax(worst, fabs(g - w) / tol);
    }
    if (memcmp((const char *)im->t[t] + im->bytes[t], (const char *)im->ref[t] + im->bytes[t],
               GUARD * e) != 0)
        fail_msg("%s: %s was written past its end", c->name, what);
    return worst;
}

static void run_case(const sparse_case *c, uint32_t seed)
{
    images im;
    images_open(c, &im, seed);
    if (c->pipeline)
        assert_int_equal(setenv("FLASHATTN_CUDA_PIPELINE", "1", 1), 0);
    run_golden(&im, !c->pipeline);
    run_emulated(c, &im, FA__OP_FORWARD);
    double w[5] = {compare(c, &im, FA__TENSOR_O, "O"), compare(c, &im, FA__TENSOR_LSE, "LSE"),
                   0, 0, 0};
    if (!c->pipeline) {
        run_emulated(c, &im, FA__OP_BACKWARD);
        for (int i = 2; i < 5; i++)
            w[i] = compare(c, &im, outputs[i], i == 2 ? "dQ" : i == 3 ? "dK" : "dV");
        /* Determinism: a second backward from 0xFF outputs gives the same bits. */
        void *first[3];
        for (int i = 0; i < 3; i++) {
            const fa__tensor t = outputs[2 + i];
            first[i] = alloc_bytes(im.bytes[t], 0);
            memcpy(first[i], im.t[t], im.bytes[t]);
            memset(im.t[t], 0xFF, im.bytes[t]);
        }
        run_emulated(c, &im, FA__OP_BACKWARD);
        for (int i = 0; i < 3; i++) {
            if (memcmp(first[i], im.t[outputs[2 + i]], im.bytes[outputs[2 + i]]) != 0)
                fail_msg("%s: a second backward gave different bits", c->name);
            free(first[i]);
        }
    }
    if (c->pipeline)
        assert_int_equal(unsetenv("FLASHATTN_CUDA_PIPELINE"), 0);
    print_message("  %-36s err/tol o %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", c->name, w[0],
                  w[1], w[2], w[3], w[4]);
    images_close(&im);
}

static void test_sparse_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], 4321u + (uint32_t)i);
}

/* The comparison can fail: a list that names one more block than the golden's lists (the
 * emulated kernels then compute keys the golden masks) must give a mismatch. */
static void test_catches_extra_block(void **state)
{
    (void)state;
    const sparse_case *c = &cases[3]; /* per-head lists of a 50% mask */
    images im;
    images_open(c, &im, 77u);
    run_golden(&im, false);
    int32_t *num = im.t[FA__TENSOR_KV_NUM_BLOCKS], *idx = im.t[FA__TENSOR_KV_INDICES];
    const int64_t nk = (c->sk + c->bk - 1) / c->bk;
    int32_t kb = 0; /* row 0's first unlisted block, added at the end (kept ascending) */
    for (int32_t e = 0; e < num[0] && idx[e] == kb; e++)
        kb++;
    assert_true(kb < nk);
    if (num[0] > 0 && idx[num[0] - 1] > kb) { /* make row 0 hold blocks 0 .. kb */
        for (int32_t e = 0; e <= kb; e++)
            idx[e] = e;
        num[0] = kb + 1;
    } else {
        idx[num[0]++] = kb;
    }
    run_emulated(c, &im, FA__OP_FORWARD);
    const fa__tensor t = FA__TENSOR_O;
    bool differs = false;
    for (int64_t i = 0; i < c->bq * c->d && !differs; i++) /* query block 0 of (0, 0) */
        differs = oracle_load(c->dtype, im.t[t], i) != oracle_load(c->dtype, im.ref[t], i);
    assert_true(differs);
    images_close(&im);
}

/* The kernels read the full lists and skip the mask there: the causal diagonal block (0, 0),
 * moved from kv_indices into full_kv_indices (which the run's check would refuse), lets row 0
 * see the keys past its diagonal, so O differs from the golden's. */
static void test_full_skips_mask(void **state)
{
    (void)state;
    const sparse_case *c = &cases[2]; /* every block, causal, full lists, CUDA cores */
    images im;
    images_open(c, &im, 78u);
    run_golden(&im, false);
    int32_t *num = im.t[FA__TENSOR_KV_NUM_BLOCKS], *idx = im.t[FA__TENSOR_KV_INDICES];
    int32_t *full_num = im.t[FA__TENSOR_FULL_KV_NUM_BLOCKS];
    int32_t *full_idx = im.t[FA__TENSOR_FULL_KV_INDICES];
    assert_true(num[0] >= 1 && idx[0] == 0); /* row 0 lists the diagonal block first */
    memmove(idx, idx + 1, (size_t)(--num[0]) * sizeof *idx);
    memmove(full_idx + 1, full_idx, (size_t)full_num[0]++ * sizeof *full_idx);
    full_idx[0] = 0;
    run_emulated(c, &im, FA__OP_FORWARD);
    bool differs = false;
    for (int64_t i = 0; i < c->d && !differs; i++) /* row 0 of (0, 0) */
        differs = oracle_load(c->dtype, im.t[FA__TENSOR_O], i) !=
                  oracle_load(c->dtype, im.ref[FA__TENSOR_O], i);
    assert_true(differs);
    images_close(&im);
}

/* The CUDA planner keeps tiles within mask blocks where nothing is overridden (forward and
 * backward, both paths), and says so; the dense problem's tiles are larger, so the rule is what
 * chose them. */
static void test_plan_tiles(void **state)
{
    (void)state;
    fa_context *arch = NULL;
    char why[256] = "";
    assert_int_equal(fa_context_create_planning(&arch, FA_BACKEND_CUDA, "sm_80", why, sizeof why),
                     OK);
    const fa_dtype dtypes[] = {FA_DTYPE_F32, FA_DTYPE_F16}; /* CUDA cores, tensor cores */
    for (int i = 0; i < 4; i++) {
        fa_problem p;
        assert_int_equal(fa_problem_init(&p, dtypes[i % 2], FA_LAYOUT_BHSD, 1, 2, 2, 512, 512,
                                         64),
                         OK);
        fa_plan *dense = NULL, *sparse = NULL;
        const bool backward = i >= 2;
        assert_int_equal(backward ? fa_plan_create_backward(arch, &p, &dense)
                                  : fa_plan_create(arch, &p, &dense),
                         OK);
        p.block_sparse = 1;
        p.sparse_block_q = 32;
        p.sparse_block_k = 16;
        p.sparse_batch = p.sparse_heads = 1;
        assert_int_equal(backward ? fa_plan_create_backward(arch, &p, &sparse)
                                  : fa_plan_create(arch, &p, &sparse),
                         OK);
        print_message("  plan %s %s: dense Br %d Bc %d, blocks 32 x 16: Br %d Bc %d\n",
                      backward ? "backward" : "forward", fa_dtype_name(p.dtype),
                      (int)fa_plan_block_r(dense), (int)fa_plan_block_c(dense),
                      (int)fa_plan_block_r(sparse), (int)fa_plan_block_c(sparse));
        assert_true(fa_plan_block_r(sparse) <= 32 && 32 % fa_plan_block_r(sparse) == 0);
        assert_true(fa_plan_block_c(sparse) <= 16 && 16 % fa_plan_block_c(sparse) == 0);
        assert_true(fa_plan_block_r(dense) > 32 || fa_plan_block_c(dense) > 16);
        assert_non_null(strstr(fa_plan_explain(sparse), "block-sparse"));
        fa_plan_destroy(dense);
        fa_plan_destroy(sparse);
    }
    fa_context_destroy(arch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_tiles),
        cmocka_unit_test(test_catches_extra_block),
        cmocka_unit_test(test_full_skips_mask),
        cmocka_unit_test(test_sparse_cases),
    };
    return cmocka_run_group_tests_name("cuda kernel block-sparse, emulated on the host", tests,
                                       NULL, NULL);
}
