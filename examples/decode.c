/*
 * decode.c - a generation loop over a paged KV cache, as an inference server runs it: two
 * sequences with prompts of different lengths, and at each step one new token per sequence
 * whose K and V are appended to the cache (a page is taken from a shuffled free list when a
 * sequence fills its last one), then one fa_run with Sq = 1 over the whole cache
 * (seqlens_k = the current lengths, bottom-right causal, the block table on the device).
 * Each step's output is checked against attention recomputed from scratch over each
 * sequence's contiguous K/V history with a plain fa_forward on the same context.
 *
 *   decode [steps [f16|f32]]    (default 40 steps, f16)
 *
 * Runs on the default backend (FA_BACKEND_AUTO: FLASHATTN_BACKEND if set). Prints one line;
 * exits 0 when every step agrees within 1e-3 (f16) or 1e-5 (f32), 1 otherwise.
 */
#include <flashattn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BATCH = 2,          /* sequences */
    HEADS_Q = 8,        /* query heads */
    HEADS_KV = 2,       /* key/value heads (GQA: 4 query heads share one) */
    DIM = 64,           /* head dimension */
    PAGE = 16,          /* keys a page */
    SPARE = 3,          /* pool pages no sequence ever takes */
    ROW = HEADS_KV * DIM /* elements of one token's K (or V): [heads_kv, dim] */
};
static const int prompt_len[BATCH] = {5, 23};

/* The cache: host mirrors of the device pools, the block table, the lengths, and each
 * sequence's contiguous history (device buffers [max_len, heads_kv, dim], BSHD with batch 1). */
typedef struct kv_cache {
    fa_dtype dtype;
    size_t esz;
    int max_len, pages_per_seq, num_pages;
    int32_t *table;      /* [BATCH, pages_per_seq]; -1 for pages not taken yet */
    int32_t len[BATCH];  /* keys of each sequence */
    int32_t *free_pages; /* the pool's pages in a random order; nfree left */
    int nfree, table_dirty;
    fa_buffer *k_pool, *v_pool;                 /* [num_pages, PAGE, heads_kv, dim] */
    fa_buffer *k_hist[BATCH], *v_hist[BATCH];   /* contiguous: [max_len, heads_kv, dim] */
    fa_buffer *d_table, *d_lens;
} kv_cache;

static uint64_t rng = 0x2545F4914F6CDD1Dull;

/* Uniform in [-1, 1) (xorshift64*). */
static float uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / 8388608.0f - 1.0f;
}

/* n random values in the dtype's storage. */
static void random_row(fa_dtype dtype, void *out, int n)
{
    for (int i = 0; i < n; i++) {
        float x = uniform();
        if (dtype == FA_DTYPE_F16)
            ((uint16_t *)out)[i] = fa_f32_to_f16(x);
        else
            ((float *)out)[i] = x;
    }
}

static float load(fa_dtype dtype, const void *p, int i)
{
    return dtype == FA_DTYPE_F16 ? fa_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Every call that can fail: on failure print its status and the context's message. */
#define TRY(call)                                                                              \
    do {                                                                                       \
        fa_status st_ = (call);                                                                \
        if (st_ != FA_STATUS_OK) {                                                             \
            fprintf(stderr, "%s failed: %s: %s\n", #call, fa_status_name(st_),                  \
                    fa_context_last_error(ctx));                                               \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

static fa_status make(fa_context *ctx, size_t bytes, fa_buffer **out)
{
    return fa_buffer_create(ctx, bytes, out);
}

/* The cache's buffers and its free list: every page of the pool in a random order. */
static int cache_init(fa_context *ctx, kv_cache *c, fa_dtype dtype, int steps)
{
    c->dtype = dtype;
    c->esz = fa_dtype_size(dtype);
    c->max_len = 0;
    for (int b = 0; b < BATCH; b++)
        c->max_len = prompt_len[b] + steps > c->max_len ? prompt_len[b] + steps : c->max_len;
    c->pages_per_seq = (c->max_len + PAGE - 1) / PAGE;
    c->num_pages = BATCH * c->pages_per_seq + SPARE;
    c->table = malloc((size_t)(BATCH * c->pages_per_seq) * sizeof *c->table);
    c->free_pages = malloc((size_t)c->num_pages * sizeof *c->free_pages);
    if (!c->table || !c->free_pages)
        return -1;
    for (int i = 0; i < BATCH * c->pages_per_seq; i++)
        c->table[i] = -1;
    for (int i = 0; i < c->num_pages; i++)
        c->free_pages[i] = i;
    for (int i = c->num_pages - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)((uniform() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = c->free_pages[i];
        c->free_pages[i] = c->free_pages[j];
        c->free_pages[j] = t;
    }
    c->nfree = c->num_pages;
    size_t pool = (size_t)c->num_pages * PAGE * ROW * c->esz;
    size_t hist = (size_t)c->max_len * ROW * c->esz;
    TRY(make(ctx, pool, &c->k_pool));
    TRY(make(ctx, pool, &c->v_pool));
    for (int b = 0; b < BATCH; b++) {
        TRY(make(ctx, hist, &c->k_hist[b]));
        TRY(make(ctx, hist, &c->v_hist[b]));
    }
    TRY(make(ctx, (size_t)(BATCH * c->pages_per_seq) * sizeof(int32_t), &c->d_table));
    TRY(make(ctx, BATCH * sizeof(int32_t), &c->d_lens));
    return 0;
}

static void cache_free(kv_cache *c)
{
    fa_buffer_destroy(c->k_pool);
    fa_buffer_destroy(c->v_pool);
    for (int b = 0; b < BATCH; b++) {
        fa_buffer_destroy(c->k_hist[b]);
        fa_buffer_destroy(c->v_hist[b]);
    }
    fa_buffer_destroy(c->d_table);
    fa_buffer_destroy(c->d_lens);
    free(c->table);
    free(c->free_pages);
}

/* Appends one token's K and V rows ([heads_kv, dim] each) to sequence b: into its page (a new
 * one from the free list when the last is full) and onto its contiguous history. */
static int cache_append(fa_context *ctx, kv_cache *c, int b, const void *k_row, const void *v_row)
{
    int pos = c->len[b], slot = pos % PAGE;
    int32_t *entry = &c->table[b * c->pages_per_seq + pos / PAGE];
    size_t row_bytes = ROW * c->esz;
    if (slot == 0) {
        if (c->nfree == 0) {
            fprintf(stderr, "the pool is out of pages\n");
            return -1;
        }
        *entry = c->free_pages[--c->nfree];
        c->table_dirty = 1;
    }
    /* Pool element (page, slot, h, x) at ((page * PAGE + slot) * heads_kv + h) * dim + x. */
    size_t at = ((size_t)*entry * PAGE + (size_t)slot) * row_bytes;
    TRY(fa_buffer_write(c->k_pool, at, k_row, row_bytes));
    TRY(fa_buffer_write(c->v_pool, at, v_row, row_bytes));
    TRY(fa_buffer_write(c->k_hist[b], (size_t)pos * row_bytes, k_row, row_bytes));
    TRY(fa_buffer_write(c->v_hist[b], (size_t)pos * row_bytes, v_row, row_bytes));
    c->len[b] = pos + 1;
    return 0;
}

/* The step's tables on the device: the block table when a page was taken, the lengths. */
static int cache_sync(fa_context *ctx, kv_cache *c)
{
    if (c->table_dirty)
        TRY(fa_buffer_write(c->d_table, 0, c->table,
                            (size_t)(BATCH * c->pages_per_seq) * sizeof(int32_t)));
    c->table_dirty = 0;
    TRY(fa_buffer_write(c->d_lens, 0, c->len, sizeof c->len));
    return 0;
}

/* The reference for sequence b: a plain fa_forward over its contiguous history (BSHD,
 * batch 1, seqlen_k = its length), its O ([heads_q, dim]) into o. */
static int reference(fa_context *ctx, const kv_cache *c, int b, fa_buffer *q, fa_buffer *o,
                     void *out)
{
    fa_problem p;
    fa_plan *plan = NULL;
    fa_problem_init(&p, c->dtype, FA_LAYOUT_BSHD, 1, HEADS_Q, HEADS_KV, 1, c->len[b], DIM);
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    TRY(fa_plan_create(ctx, &p, &plan));
    fa_status st = fa_forward(ctx, plan, q, c->k_hist[b], c->v_hist[b], o, NULL);
    fa_plan_destroy(plan);
    TRY(st);
    TRY(fa_buffer_read(o, 0, out, (size_t)HEADS_Q * DIM * c->esz));
    return 0;
}

/* The generation loop; *err receives the largest difference over every step. */
static int generate(fa_context *ctx, kv_cache *c, int steps, double *err, int32_t *splits)
{
    const size_t esz = c->esz, q_bytes = (size_t)BATCH * HEADS_Q * DIM * esz;
    unsigned char k_row[ROW * 4], v_row[ROW * 4], q_host[BATCH * HEADS_Q * DIM * 4];
    unsigned char o_host[BATCH * HEADS_Q * DIM * 4], ref[HEADS_Q * DIM * 4];
    fa_buffer *q = NULL, *o = NULL, *q1 = NULL, *o1 = NULL;
    fa_plan *plan = NULL;
    fa_problem p;
    int rc = -1;

    /* One plan for the whole loop: seqlen_k is the cache's capacity, seqlens_k the lengths. */
    fa_problem_init(&p, c->dtype, FA_LAYOUT_BHSD, BATCH, HEADS_Q, HEADS_KV, 1, c->max_len, DIM);
    p.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    p.seqlens_k = 1;
    fa_problem_set_paged(&p, PAGE, c->num_pages, c->pages_per_seq);
    if (make(ctx, q_bytes, &q) || make(ctx, q_bytes, &o) || make(ctx, q_bytes / BATCH, &q1) ||
        make(ctx, q_bytes / BATCH, &o1) || fa_plan_create(ctx, &p, &plan)) {
        fprintf(stderr, "setup failed: %s\n", fa_context_last_error(ctx));
        goto done;
    }
    *splits = fa_plan_kv_splits(plan);
    for (int b = 0; b < BATCH; b++) /* the prompts */
        for (int i = 0; i < prompt_len[b]; i++) {
            random_row(c->dtype, k_row, ROW);
            random_row(c->dtype, v_row, ROW);
            if (cache_append(ctx, c, b, k_row, v_row) != 0)
                goto done;
        }
    for (int t = 0; t < steps; t++) {
        for (int b = 0; b < BATCH; b++) { /* this step's token of each sequence */
            random_row(c->dtype, k_row, ROW);
            random_row(c->dtype, v_row, ROW);
            if (cache_append(ctx, c, b, k_row, v_row) != 0)
                goto done;
        }
        random_row(c->dtype, q_host, BATCH * HEADS_Q * DIM); /* Q [batch, heads_q, 1, dim] */
        fa_tensors in = {.q = q, .k = c->k_pool, .v = c->v_pool, .o = o,
                         .seqlens_k = c->d_lens, .block_table = c->d_table};
        fa_status st = cache_sync(ctx, c) ? FA_STATUS_DEVICE_ERROR : FA_STATUS_OK;
        if (st == FA_STATUS_OK)
            st = fa_buffer_write(q, 0, q_host, q_bytes);
        if (st == FA_STATUS_OK)
            st = fa_run(ctx, plan, &in);
        if (st == FA_STATUS_OK)
            st = fa_buffer_read(o, 0, o_host, q_bytes);
        if (st != FA_STATUS_OK) {
            fprintf(stderr, "step %d: %s: %s\n", t, fa_status_name(st), fa_context_last_error(ctx));
            goto done;
        }
        for (int b = 0; b < BATCH; b++) {
            size_t off = (size_t)b * HEADS_Q * DIM; /* sequence b's rows of Q and O */
            if (fa_buffer_write(q1, 0, q_host + off * esz, q_bytes / BATCH) != FA_STATUS_OK ||
                reference(ctx, c, b, q1, o1, ref) != 0)
                goto done;
            for (int i = 0; i < HEADS_Q * DIM; i++) {
                double e = fabs((double)load(c->dtype, o_host, (int)off + i) -
                                (double)load(c->dtype, ref, i));
                *err = e > *err || isnan(e) ? e : *err; /* a NaN stays and fails the check */
            }
        }
    }
    rc = 0;
done:
    fa_plan_destroy(plan);
    fa_buffer_destroy(q);
    fa_buffer_destroy(o);
    fa_buffer_destroy(q1);
    fa_buffer_destroy(o1);
    return rc;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 40;
    fa_dtype dtype = argc > 2 && strcmp(argv[2], "f32") == 0 ? FA_DTYPE_F32 : FA_DTYPE_F16;
    double tol = dtype == FA_DTYPE_F16 ? 1e-3 : 1e-5, err = 0.0;
    int32_t splits = 0;
    char why[512];
    fa_context *ctx = NULL;
    kv_cache c;
    if (steps < 1 || steps > 100000 || (argc > 2 && strcmp(argv[2], "f32") != 0 &&
                                        strcmp(argv[2], "f16") != 0)) {
        fprintf(stderr, "usage: %s [steps (1..100000) [f16|f32]]\n", argv[0]);
        return 2;
    }
    fa_status st = fa_context_create(&ctx, NULL, why, sizeof why);
    if (st != FA_STATUS_OK) {
        fprintf(stderr, "fa_context_create failed: %s: %s\n", fa_status_name(st), why);
        return 1;
    }
    memset(&c, 0, sizeof c);
    int rc = cache_init(ctx, &c, dtype, steps) != 0 || generate(ctx, &c, steps, &err, &splits) != 0;
    if (rc == 0) {
        printf("decode: %s, %s, %d sequences (prompts %d and %d keys), %d steps, pages of %d "
               "keys (%d of %d taken), kv splits %d: max |paged - contiguous| = %.3g "
               "(tolerance %g)\n",
               fa_backend_name(fa_context_backend(ctx)), fa_dtype_name(dtype), BATCH,
               prompt_len[0], prompt_len[1], steps, PAGE, c.num_pages - c.nfree, c.num_pages,
               (int)splits, err, tol);
        rc = err <= tol ? 0 : 1;
        if (rc)
            fprintf(stderr, "decode: the paged cache's output differs from the contiguous "
                            "recomputation by %.3g, above %g\n", err, tol);
    }
    cache_free(&c);
    fa_context_destroy(ctx);
    return rc;
}
