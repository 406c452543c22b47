/*
 * cases.c - the shared case table (DESIGN.md "Tests"): odd sizes, every head-dim class, MHA /
 * GQA / MQA, both causal alignments with seqlen_q != seqlen_k either way, BHSD / BSHD / padded /
 * broadcast layouts, the three dtypes, and the empty edge cases. The CPU golden backend is scalar
 * fp64 and the suite also runs under sanitizers and on pocl, so sizes stay small: the largest
 * cases are ~17 M multiply-adds.
 */
#include "cases.h"

#include <stdio.h>
#include <string.h>

#define NONE FA_MASK_NONE
#define TL FA_MASK_CAUSAL_TOP_LEFT
#define BR FA_MASK_CAUSAL_BOTTOM_RIGHT

#define CASE1(name, dt, b, hq, hkv, sq, sk, d, mask, lay, scale)                                \
    {name, FA_DTYPE_##dt, b, hq, hkv, sq, sk, d, mask, CASE_##lay, scale}
/* Most shapes run in all three dtypes: the f16/bf16 paths of a GPU kernel differ the most. */
#define CASE3(name, ...)                                                                        \
    CASE1(name "/f32", F32, __VA_ARGS__), CASE1(name "/f16", F16, __VA_ARGS__),                 \
        CASE1(name "/bf16", BF16, __VA_ARGS__)

/*            name            B  Hq Hkv  Sq   Sk    d  mask  layout  scale */
const fa_test_case fa_test_cases[] = {
    CASE3("one",              1, 1, 1,   1,   1,   16, NONE, BHSD,   0.0f),
    CASE3("three",            1, 2, 2,   3,   3,   32, TL,   BSHD,   0.0f),
    CASE3("odd17_d40",        2, 2, 2,   17,  17,  40, TL,   BHSD,   0.0f),
    CASE3("mha97_d64",        1, 2, 2,   97,  97,  64, NONE, BHSD,   0.0f),
    CASE3("gqa113_d80",       1, 8, 2,   113, 113, 80, BR,   BSHD,   0.0f),
    CASE3("mqa127_d96",       1, 4, 1,   127, 127, 96, TL,   PADDED, 0.0f),
    CASE3("mha257_d128",      1, 2, 2,   257, 257, 128, NONE, BHSD,  0.0f),
    CASE3("d256_q33_k97",     1, 1, 1,   33,  97,  256, NONE, BSHD,  0.0f),
    CASE3("d256_257_tl",      1, 1, 1,   257, 257, 256, TL,   BHSD,  0.0f),
    /* seqlen_q < seqlen_k: the two causal alignments differ (decoding with a KV cache). */
    CASE3("q17_k113_tl",      2, 2, 1,   17,  113, 64, TL,   BHSD,   0.0f),
    CASE3("q17_k113_br",      2, 2, 1,   17,  113, 64, BR,   PADDED, 0.0f),
    /* seqlen_q > seqlen_k: bottom-right leaves rows 0..95 with no key (O = 0, LSE = -inf). */
    CASE3("q113_k17_br",      1, 2, 2,   113, 17,  32, BR,   PADDED, 0.0f),
    CASE3("q113_k17_tl",      1, 2, 2,   113, 17,  32, TL,   BSHD,   0.0f),
    CASE3("q257_k127_br_d16", 1, 4, 4,   257, 127, 16, BR,   BHSD,   0.0f),
    CASE3("gqa_padded",       2, 8, 2,   31,  47,  40, BR,   PADDED, 0.0f),
    CASE3("decode_q1",        2, 8, 2,   1,   257, 128, BR,  BSHD,   0.0f),
    /* OpenCL packs a one-row GQA decode's query heads as one tile's rows (fa__gqa_pack):
     * through padded Q and O strides, and never under top-left causal (row 0 sees key 0). */
    CASE3("decode_q1_mqa_pad", 1, 4, 1,  1,   257, 128, NONE, PADDED, 0.0f),
    CASE3("decode_q1_tl",     2, 8, 2,   1,   257, 64, TL,   BHSD,   0.0f),
    CASE3("kv_broadcast",     3, 4, 2,   19,  23,  64, NONE, KV_BCAST, 0.0f),
    CASE3("k1",               2, 3, 3,   257, 1,   16, NONE, BSHD,   0.0f),
    /* A negative scale is legal; a large one makes the softmax peaked (scores up to ~20). */
    CASE3("scale_neg",        1, 2, 2,   17,  33,  32, NONE, BHSD,   -0.3f),
    CASE3("scale_big",        1, 2, 2,   61,  61,  64, TL,   PADDED, 2.0f),
    /* Empty problems: seqlen_k = 0 gives O = 0 / LSE = -inf; batch or seqlen_q = 0 is a no-op. */
    CASE3("k0",               2, 2, 2,   17,  0,   32, NONE, BHSD,   0.0f),
    CASE3("batch0",           0, 2, 2,   17,  17,  32, NONE, PADDED, 0.0f),
    CASE3("q0",               2, 2, 2,   0,   17,  32, NONE, BSHD,   0.0f),
};

const size_t fa_test_case_count = sizeof fa_test_cases / sizeof fa_test_cases[0];

/* Padding (in elements) after each row, head and batch, and the offset, per tensor. */
typedef struct case_pad {
    int64_t row, head, batch, offset;
} case_pad;

static void padded_layout(fa_tensor_layout *t, case_pad pad, int64_t heads, int64_t seq,
                          int64_t d)
{
    t->offset = pad.offset;
    t->stride_seq = d + pad.row;
    t->stride_head = seq * t->stride_seq + pad.head;
    t->stride_batch = heads * t->stride_head + pad.batch;
}

void case_fill_problem(const fa_test_case *c, fa_problem *p)
{
    fa_layout base = c->layout == CASE_BSHD ? FA_LAYOUT_BSHD : FA_LAYOUT_BHSD;
    fa_problem_init(p, c->dtype, base, c->batch, c->heads_q, c->heads_kv, c->seqlen_q,
                    c->seqlen_k, c->head_dim);
    p->mask = c->mask;
    p->scale = c->scale;
    if (c->layout == CASE_PADDED) {
        /* Different pads per tensor: a kernel that uses Q's strides for K reads garbage. */
        padded_layout(&p->q, (case_pad){3, 5, 7, 11}, c->heads_q, c->seqlen_q, c->head_dim);
        padded_layout(&p->k, (case_pad){5, 2, 3, 13}, c->heads_kv, c->seqlen_k, c->head_dim);
        padded_layout(&p->v, (case_pad){1, 9, 4, 6}, c->heads_kv, c->seqlen_k, c->head_dim);
        padded_layout(&p->o, (case_pad){2, 3, 5, 9}, c->heads_q, c->seqlen_q, c->head_dim);
    } else if (c->layout == CASE_KV_BCAST) {
        p->k.stride_batch = 0;
        p->v.stride_batch = 0;
    }
}

void case_fill_problem_backward(const fa_test_case *c, fa_problem *p)
{
    case_fill_problem(c, p);
    /* fa_problem_init gave dO, dQ, dK and dV the contiguous layout of their twins, with
       stride_batch > 0 for dK/dV even where K/V are broadcast. */
    if (c->layout != CASE_PADDED)
        return;
    /* Pads unlike every forward tensor's: dQ read with Q's strides (or dK with K's) misses. */
    padded_layout(&p->d_o, (case_pad){4, 1, 6, 7}, c->heads_q, c->seqlen_q, c->head_dim);
    padded_layout(&p->dq, (case_pad){1, 7, 2, 15}, c->heads_q, c->seqlen_q, c->head_dim);
    padded_layout(&p->dk, (case_pad){2, 4, 1, 10}, c->heads_kv, c->seqlen_k, c->head_dim);
    padded_layout(&p->dv, (case_pad){6, 3, 9, 5}, c->heads_kv, c->seqlen_k, c->head_dim);
}

void case_describe(const fa_test_case *c, char *buf, size_t size)
{
    static const char *const layouts[] = {"bhsd", "bshd", "padded", "kv-broadcast"};
    snprintf(buf, size, "%s B%lld H%lld/%lld S%lldx%lld D%lld %s %s scale %g",
             fa_dtype_name(c->dtype), (long long)c->batch, (long long)c->heads_q,
             (long long)c->heads_kv, (long long)c->seqlen_q, (long long)c->seqlen_k,
             (long long)c->head_dim, fa_mask_name(c->mask), layouts[c->layout],
             (double)c->scale);
}

double case_flops(const fa_test_case *c)
{
    double f = 4.0 * (double)c->batch * (double)c->heads_q * (double)c->seqlen_q *
               (double)c->seqlen_k * (double)c->head_dim;
    return c->mask == FA_MASK_NONE ? f : f / 2;
}

double case_bytes(const fa_test_case *c)
{
    double rows = (double)c->batch * (double)c->head_dim;
    double q_o = 2.0 * rows * (double)c->heads_q * (double)c->seqlen_q;
    double k_v = 2.0 * rows * (double)c->heads_kv * (double)c->seqlen_k;
    return (q_o + k_v) * (double)fa_dtype_size(c->dtype);
}
