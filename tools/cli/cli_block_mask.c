/*
 * cli_block_mask.c - the block-sparse options of `run`, `plan` and `bench` (see
 * cli_block_mask.h): parsing --block-size and --block-pattern, reading a --block-mask file,
 * the library's lists from either, and their device buffers.
 */
#include "cli_block_mask.h"

#include "cli_memory.h"
#include "cli_seq.h"
#include "cli_tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_bm_defaults(cli_bm_args *a)
{
    memset(a, 0, sizeof *a);
}

void cli_bm_opts(cli_bm_args *a, cli_opt *opts)
{
    const cli_opt o[CLI_BM_NOPTS] = {
        {"block-mask", CLI_STRING, &a->mask_path, 0, 0, "FILE",
         "block-sparse: uint8/bool .npy [B|1, H|1, ceil(seq/BQ), ceil(seq_k/BK)], 0 skip, 1 "
         "compute, 2 full", 0},
        {"block-size", CLI_STRING, &a->size, 0, 0, "BQ,BK",
         "the block mask's query and key block sizes (powers of two in [16, 256])", 0},
        {"block-pattern", CLI_STRING, &a->pattern, 0, 0, "SPEC",
         "a block mask built: local:W, fixed:STRIDE, bigbird:W,G,R,SEED or longformer:W,G", 0},
    };
    memcpy(opts, o, sizeof o);
}

int cli_bm_on(const cli_bm_args *a)
{
    return a->mask_path != NULL || a->pattern != NULL;
}

/* The pattern kinds by name, and how many numbers each takes. */
static const struct {
    const char *name;
    fa_block_pattern_kind kind;
    size_t args;
    const char *form;
} kinds[] = {
    {"local", FA_BLOCK_PATTERN_LOCAL, 1, "local:W"},
    {"fixed", FA_BLOCK_PATTERN_FIXED, 1, "fixed:STRIDE"},
    {"bigbird", FA_BLOCK_PATTERN_BIGBIRD, 4, "bigbird:W,G,R,SEED"},
    {"longformer", FA_BLOCK_PATTERN_LONGFORMER, 2, "longformer:W,G"},
};

/* The numbers of a pattern into a->pat (the library checks their ranges but SEED's). */
static void set_pattern(cli_bm_args *a, fa_block_pattern_kind kind, const int64_t *v)
{
    fa_block_pattern *p = &a->pat;
    memset(p, 0, sizeof *p);
    p->kind = kind;
    if (kind == FA_BLOCK_PATTERN_FIXED) {
        p->stride = (int32_t)v[0];
        return;
    }
    p->window = (int32_t)v[0];
    if (kind == FA_BLOCK_PATTERN_LOCAL)
        return;
    p->global = (int32_t)v[1];
    if (kind == FA_BLOCK_PATTERN_BIGBIRD) {
        p->random = (int32_t)v[2];
        p->seed = (uint64_t)v[3];
    }
}

static int parse_pattern(const cli_cmd *cmd, cli_bm_args *a)
{
    const char *colon = strchr(a->pattern, ':');
    size_t len = colon ? (size_t)(colon - a->pattern) : strlen(a->pattern), i, n = 0;
    int64_t *v = NULL;
    int rc;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i].name) == len && strncmp(a->pattern, kinds[i].name, len) == 0)
            break;
    if (i == sizeof kinds / sizeof kinds[0] || !colon)
        return cli_usage_error(cmd, "--block-pattern: '%s' is not local:W, fixed:STRIDE, "
                               "bigbird:W,G,R,SEED or longformer:W,G", a->pattern);
    rc = cli_parse_int_list(cmd, "block-pattern", colon + 1, 0, INT32_MAX, "a block count",
                            &v, &n);
    if (rc == 0 && n != kinds[i].args)
        rc = cli_usage_error(cmd, "--block-pattern: '%s' has %zu numbers, %s takes %zu (%s)",
                             a->pattern, n, kinds[i].name, kinds[i].args, kinds[i].form);
    if (rc == 0)
        set_pattern(a, kinds[i].kind, v);
    free(v);
    return rc;
}

int cli_bm_validate(const cli_cmd *cmd, cli_bm_args *a)
{
    int64_t *v = NULL;
    size_t n = 0;
    int rc;
    if (a->mask_path && a->pattern)
        return cli_usage_error(cmd, "--block-mask and --block-pattern exclude each other");
    if (!cli_bm_on(a))
        return a->size ? cli_usage_error(cmd, "--block-size needs --block-mask or "
                                              "--block-pattern")
                       : 0;
    if (!a->size)
        return cli_usage_error(cmd, "--%s needs --block-size BQ,BK",
                               a->mask_path ? "block-mask" : "block-pattern");
    /* The range is the library's to judge (FA_STATUS_INVALID_BLOCK_SIZE); int32 here. */
    rc = cli_parse_int_list(cmd, "block-size", a->size, 0, INT32_MAX, "a block size", &v, &n);
    if (rc == 0 && n != 2)
        rc = cli_usage_error(cmd, "--block-size: '%s' is not BQ,BK (two sizes)", a->size);
    if (rc == 0) {
        a->block_q = (int32_t)v[0];
        a->block_k = (int32_t)v[1];
    }
    free(v);
    return rc == 0 && a->pattern ? parse_pattern(cmd, a) : rc;
}

/* "1" or "1 or N" for a dimension of n. */
static void one_or(char *buf, size_t size, int64_t n)
{
    if (n == 1)
        snprintf(buf, size, "1");
    else
        snprintf(buf, size, "1 or %" PRId64, n);
}

/* The message of a mask file whose shape (`got`, as text) is not the problem's. */
static int mask_shape_error(const char *path, const char *got, const fa_problem *p,
                            const fa_block_mask_shape *s)
{
    char b[32], h[32];
    one_or(b, sizeof b, p->batch);
    one_or(h, sizeof h, p->heads_q);
    return cli_error("%s: shape %s) is not a block mask of this problem: want [%s, %s, %" PRId64
                     ", %" PRId64 "] ([batch, heads, ceil(%" PRId64 " / %" PRId32 "), ceil(%"
                     PRId64 " / %" PRId32 ")])", path, got, b, h, fa_block_mask_q_blocks(s),
                     fa_block_mask_k_blocks(s), p->seqlen_q, s->block_q, p->seqlen_k,
                     s->block_k);
}

/* The mask file into d->dense, its first two dimensions into d->shape; checks its shape. */
static int read_mask(const char *path, const fa_problem *p, cli_bm_data *d)
{
    fa_block_mask_shape *s = &d->shape;
    int64_t nq = fa_block_mask_q_blocks(s), nk = fa_block_mask_k_blocks(s);
    npy_array arr;
    size_t i;
    if (cli_npy_read_bytes(path, &arr) != 0)
        return CLI_EXIT_FAIL;
    if (arr.rank != 4 || (arr.shape[0] != 1 && arr.shape[0] != p->batch) ||
        (arr.shape[1] != 1 && arr.shape[1] != p->heads_q) || arr.shape[2] != nq ||
        arr.shape[3] != nk) {
        char got[96] = "(";
        for (int r = 0; r < arr.rank; r++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, r ? ", " : "",
                     arr.shape[r]);
        npy_free(&arr);
        return mask_shape_error(path, got, p, s);
    }
    s->batch = arr.shape[0];
    s->heads = arr.shape[1];
    d->dense = malloc(arr.count ? arr.count : 1);
    if (!d->dense) {
        npy_free(&arr);
        return cli_error("out of host memory for the block mask");
    }
    for (i = 0; i < arr.count; i++)
        d->dense[i] = (uint8_t)arr.data[i]; /* 0..255: the library judges the values */
    npy_free(&arr);
    return 0;
}

/* The pattern's dense mask: one for all batches and heads, per batch and head with random
 * blocks (BigBird's are drawn per batch and head). */
static int build_pattern(const cli_bm_args *a, const fa_problem *p, cli_bm_data *d)
{
    fa_block_mask_shape *s = &d->shape;
    char why[256] = "";
    int per_head = a->pat.kind == FA_BLOCK_PATTERN_BIGBIRD && a->pat.random > 0;
    s->batch = per_head ? p->batch : 1;
    s->heads = per_head ? p->heads_q : 1;
    size_t n = (size_t)(s->batch * s->heads * fa_block_mask_q_blocks(s) *
                        fa_block_mask_k_blocks(s));
    d->dense = malloc(n ? n : 1);
    if (!d->dense)
        return cli_error("out of host memory for the block mask");
    fa_status st = fa_block_mask_pattern(s, &a->pat, d->dense, why, sizeof why);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, NULL, why);
}

/* Allocates d's lists (the full pairs only where the mask has full blocks). */
static int alloc_lists(cli_bm_data *d)
{
    const fa_block_mask_shape *s = &d->shape;
    size_t bh = (size_t)(s->batch * s->heads), nq = (size_t)fa_block_mask_q_blocks(s),
           nk = (size_t)fa_block_mask_k_blocks(s);
    const size_t counts[CLI_BM_LISTS] = {bh * nq, bh * nq * nk, bh * nq, bh * nq * nk,
                                         bh * nk, bh * nk * nq, bh * nk, bh * nk * nq};
    for (int i = 0; i < CLI_BM_LISTS; i++) {
        int full = i == CLI_BM_FULL_KV_NUM || i == CLI_BM_FULL_KV_IDX ||
                   i == CLI_BM_FULL_Q_NUM || i == CLI_BM_FULL_Q_IDX;
        if (full && d->full == 0)
            continue;
        d->counts[i] = counts[i];
        d->lists[i] = malloc(counts[i] ? counts[i] * sizeof(int32_t) : 1);
        if (!d->lists[i])
            return cli_error("out of host memory for the block lists");
    }
    return 0;
}

/* Counts the computed and full blocks, then the library's lists of the dense mask. */
static int make_lists(cli_bm_data *d)
{
    const fa_block_mask_shape *s = &d->shape;
    char why[256] = "";
    uint64_t i;
    d->all = (uint64_t)(s->batch * s->heads * fa_block_mask_q_blocks(s) *
                        fa_block_mask_k_blocks(s));
    for (i = 0; i < d->all; i++) {
        d->computed += d->dense[i] != 0;
        d->full += d->dense[i] == 2;
    }
    if (alloc_lists(d) != 0)
        return CLI_EXIT_FAIL;
    fa_block_lists kv = {d->lists[CLI_BM_KV_NUM], d->lists[CLI_BM_KV_IDX],
                         d->lists[CLI_BM_FULL_KV_NUM], d->lists[CLI_BM_FULL_KV_IDX]};
    fa_block_lists q = {d->lists[CLI_BM_Q_NUM], d->lists[CLI_BM_Q_IDX],
                        d->lists[CLI_BM_FULL_Q_NUM], d->lists[CLI_BM_FULL_Q_IDX]};
    fa_status st = fa_block_mask_lists(s, d->dense, &kv, &q, why, sizeof why);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, NULL, why);
}

int cli_bm_apply(const cli_bm_args *a, fa_problem *p, cli_bm_data *d)
{
    char why[256] = "";
    memset(d, 0, sizeof *d);
    if (!cli_bm_on(a))
        return 0;
    d->shape = (fa_block_mask_shape){1, 1, p->seqlen_q, p->seqlen_k, a->block_q, a->block_k};
    fa_status st = fa_block_mask_check_shape(&d->shape, why, sizeof why);
    if (st != FA_STATUS_OK)
        return cli_lib_error(st, NULL, why);
    if ((a->mask_path ? read_mask(a->mask_path, p, d) : build_pattern(a, p, d)) != 0 ||
        make_lists(d) != 0)
        return CLI_EXIT_FAIL;
    p->block_sparse = 1;
    p->sparse_block_q = a->block_q;
    p->sparse_block_k = a->block_k;
    p->sparse_batch = (int32_t)d->shape.batch;
    p->sparse_heads = (int32_t)d->shape.heads;
    p->sparse_full = d->full > 0;
    return 0;
}

uint64_t cli_bm_bytes(const cli_bm_data *d)
{
    uint64_t bytes = d->all;
    for (int i = 0; i < CLI_BM_LISTS; i++)
        bytes = cli_add_sat(bytes, cli_mul_sat(d->counts[i], sizeof(int32_t)));
    return bytes;
}

int cli_bm_buffers_create(fa_context *ctx, const fa_problem *p, const cli_bm_data *d,
                          cli_bm_buffers *b)
{
    memset(b, 0, sizeof *b);
    if (!p->block_sparse)
        return 0;
    for (int i = 0; i < CLI_BM_LISTS; i++) {
        size_t bytes = d->counts[i] * sizeof(int32_t);
        fa_status st;
        if (!d->lists[i])
            continue;
        st = fa_buffer_create(ctx, bytes ? bytes : 1, &b->b[i]);
        if (st == FA_STATUS_OK && bytes)
            st = fa_buffer_write(b->b[i], 0, d->lists[i], bytes);
        if (st != FA_STATUS_OK)
            return cli_lib_error(st, ctx, NULL);
    }
    return 0;
}

void cli_bm_tensors(const cli_bm_buffers *b, const fa_problem *p, int backward, fa_tensors *t)
{
    if (!p->block_sparse)
        return;
    t->kv_num_blocks = b->b[CLI_BM_KV_NUM];
    t->kv_indices = b->b[CLI_BM_KV_IDX];
    if (p->sparse_full) {
        t->full_kv_num_blocks = b->b[CLI_BM_FULL_KV_NUM];
        t->full_kv_indices = b->b[CLI_BM_FULL_KV_IDX];
    }
    if (!backward)
        return;
    t->q_num_blocks = b->b[CLI_BM_Q_NUM];
    t->q_indices = b->b[CLI_BM_Q_IDX];
    if (p->sparse_full) {
        t->full_q_num_blocks = b->b[CLI_BM_FULL_Q_NUM];
        t->full_q_indices = b->b[CLI_BM_FULL_Q_IDX];
    }
}

void cli_bm_buffers_free(cli_bm_buffers *b)
{
    for (int i = 0; i < CLI_BM_LISTS; i++)
        fa_buffer_destroy(b->b[i]);
    memset(b, 0, sizeof *b);
}

void cli_bm_describe(const cli_bm_args *a, const cli_bm_data *d, char *buf, size_t size)
{
    const fa_block_mask_shape *s = &d->shape;
    char from[160];
    if (!d->dense) {
        snprintf(buf, size, "none");
        return;
    }
    if (a->mask_path)
        snprintf(from, sizeof from, "file %s", a->mask_path);
    else
        snprintf(from, sizeof from, "pattern %s", a->pattern);
    snprintf(buf, size, "%s [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], blocks %" PRId32
             " x %" PRId32 ": %" PRIu64 " of %" PRIu64 " computed (density %.4g), %" PRIu64
             " full", from, s->batch, s->heads, fa_block_mask_q_blocks(s),
             fa_block_mask_k_blocks(s), s->block_q, s->block_k, d->computed, d->all,
             d->all ? (double)d->computed / (double)d->all : 0.0, d->full);
}

int cli_bm_block_on(const cli_bm_data *d, int64_t b, int64_t h, int64_t qb, int64_t kb)
{
    const fa_block_mask_shape *s = &d->shape;
    int64_t nq = fa_block_mask_q_blocks(s), nk = fa_block_mask_k_blocks(s);
    int64_t bi = s->batch == 1 ? 0 : b, hi = s->heads == 1 ? 0 : h;
    return d->dense[((bi * s->heads + hi) * nq + qb) * nk + kb] != 0;
}

void cli_bm_data_free(cli_bm_data *d)
{
    free(d->dense);
    for (int i = 0; i < CLI_BM_LISTS; i++)
        free(d->lists[i]);
    memset(d, 0, sizeof *d);
}
