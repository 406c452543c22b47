/*
 * cli_seq.c - the decoding options of `run` and `plan` (see cli_seq.h): parsing and checking
 * --seqlens-k, --paged and --kv-splits, setting a problem's sequence fields, and making the
 * int32 lengths, the shuffled block table and the K and V page pools.
 *
 * The library validates every field again (fa_plan_create, and each run reads the int32
 * buffers back); the checks here exist so that a bad value on the command line is a usage
 * error naming the option (exit 2) rather than a status about a buffer the user never made.
 */
#include "cli_seq.h"

#include "cli_memory.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Streams of the page order and of the pool's unused slots: the seed mixed with a constant. */
#define CLI_SEQ_PAGE_STREAM 0x70616765ull /* "page" */
#define CLI_SEQ_POOL_STREAM 0x706f6f6cull /* "pool" */

void cli_seq_defaults(cli_seq_args *a)
{
    memset(a, 0, sizeof *a);
}

void cli_seq_opts(cli_seq_args *a, cli_opt *opts)
{
    const cli_opt t[CLI_SEQ_NOPTS] = {
        {"seqlens-k", CLI_STRING, &a->seqlens_k, 0, 0, "LIST",
         "keys of each sequence (a KV cache), one per batch entry, each <= --seq-k", 0},
        {"paged", CLI_INT, &a->page_size, INT32_MIN, INT32_MAX, "PAGE_SIZE",
         "K and V in a shuffled pool of pages of PAGE_SIZE keys (a block table)", 0},
        {"kv-splits", CLI_INT, &a->kv_splits, 0, CLI_SEQ_MAX_SPLITS, "N",
         "split-KV: N key chunks (default 0: the planner; 1: never split)", 0},
    };
    memcpy(opts, t, sizeof t);
}

/* Whether s is an optionally negative run of decimal digits. */
static int is_integer(const char *s)
{
    if (*s == '-')
        s++;
    if (*s < '0' || *s > '9')
        return 0;
    return strspn(s, "0123456789") == strlen(s);
}

int cli_parse_int_list(const cli_cmd *cmd, const char *opt, const char *list, int64_t min,
                       int64_t max, const char *what, int64_t **out, size_t *n)
{
    size_t count = 1, i = 0, len;
    const char *p = list;
    char item[32];
    for (; *p; p++)
        count += *p == ',';
    *out = malloc(count * sizeof **out);
    *n = 0;
    if (!*out)
        return cli_error("out of host memory for --%s", opt);
    for (p = list; i < count; i++) {
        const char *comma = strchr(p, ',');
        long long v;
        len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return cli_usage_error(cmd, "--%s: empty item in '%s'", opt, list);
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        if (len >= sizeof item || !is_integer(item))
            return cli_usage_error(cmd, "--%s: '%.*s' is not an integer (%s)", opt, (int)len, p,
                                   what);
        errno = 0;
        v = strtoll(item, NULL, 10);
        if (errno == ERANGE || v < min || v > max)
            return cli_usage_error(cmd, "--%s: %s is not %s (%" PRId64 "..%" PRId64 ")", opt,
                                   item, what, min, max);
        (*out)[i] = (int64_t)v;
        p = comma ? comma + 1 : p + len;
    }
    *n = count;
    return 0;
}

int cli_seq_validate(const cli_cmd *cmd, cli_seq_args *a, const cli_opt *opts, size_t nopts)
{
    const cli_opt *paged = cli_find(opts, nopts, "paged");
    a->paged_given = paged && paged->seen;
    if (a->paged_given && a->page_size < 1)
        return cli_usage_error(cmd, "--paged: a page holds %" PRId64 " keys; PAGE_SIZE must be "
                               "at least 1", a->page_size);
    if (!a->seqlens_k)
        return 0;
    return cli_parse_int_list(cmd, "seqlens-k", a->seqlens_k, 0, INT32_MAX, "a key count",
                              &a->lens, &a->nlens);
}

/* Keys of sequence b. */
static int64_t seq_len(const cli_seq_args *a, const fa_problem *p, int64_t b)
{
    return a->lens ? a->lens[b] : p->seqlen_k;
}

int cli_seq_apply(const cli_cmd *cmd, const cli_seq_args *a, fa_problem *p)
{
    int64_t b, pages = CLI_SEQ_SPARE_PAGES, per;
    if (a->lens && (int64_t)a->nlens != p->batch)
        return cli_usage_error(cmd, "--seqlens-k: %zu length%s for a batch of %" PRId64
                               " (one per sequence)", a->nlens, a->nlens == 1 ? "" : "s",
                               p->batch);
    for (b = 0; a->lens && b < p->batch; b++)
        if (a->lens[b] > p->seqlen_k)
            return cli_usage_error(cmd, "--seqlens-k: %" PRId64 " keys for sequence %" PRId64
                                   ", more than --seq-k %" PRId64, a->lens[b], b, p->seqlen_k);
    p->kv_splits = (int32_t)a->kv_splits;
    p->seqlens_k = a->lens != NULL || a->page_size > 0;
    if (a->page_size == 0)
        return 0;
    per = (p->seqlen_k + a->page_size - 1) / a->page_size;
    /* Without --seqlens-k every sequence has seqlen_k keys: counted at once, not per sequence
     * (a batch of 2^31 took 86 s here; the fuzzer's timeout). Both factors are below 2^31. */
    if (!a->lens)
        pages += p->batch * per;
    for (b = 0; a->lens && b < p->batch; b++)
        pages += (seq_len(a, p, b) + a->page_size - 1) / a->page_size;
    /* The library would refuse the pool by its field, num_pages, which the user never gave. */
    if (pages > CLI_MAX_SIZE)
        return cli_usage_error(cmd, "--paged %" PRId64 ": %" PRId64 " sequences (--batch) of %s"
                               "%" PRId64 " keys (%s) need %" PRId64 " pages, more than the %d "
                               "a pool may hold; give a larger --paged or fewer keys",
                               a->page_size, p->batch, a->lens ? "up to " : "", p->seqlen_k,
                               a->lens ? "--seqlens-k" : "--seq-k", pages, CLI_MAX_SIZE);
    fa_problem_set_paged(p, a->page_size, pages, per > 0 ? per : 1);
    return 0;
}

int cli_seq_used(const fa_problem *p)
{
    return p->seqlens_k || p->page_size > 0;
}

/* Elements of one pool: num_pages * page_size * heads_kv * dim, saturating. */
static uint64_t pool_elems(const fa_problem *p)
{
    return cli_mul_sat(cli_mul_sat((uint64_t)p->num_pages, (uint64_t)p->page_size),
                       cli_mul_sat((uint64_t)p->heads_kv, (uint64_t)p->head_dim));
}

uint64_t cli_seq_device_bytes(const fa_problem *p)
{
    uint64_t n = p->seqlens_k ? cli_tensor_bytes(p, FA_TENSOR_SEQLENS_K) : 0;
    return cli_add_sat(n, p->page_size > 0 ? cli_tensor_bytes(p, FA_TENSOR_BLOCK_TABLE) : 0);
}

uint64_t cli_seq_host_bytes(const fa_problem *p)
{
    uint64_t n = cli_seq_device_bytes(p);
    if (p->page_size > 0)
        n = cli_add_sat(n, cli_mul_sat(pool_elems(p), 2 * sizeof(float)));
    return n;
}

/* num_pages page indices in a random order (Fisher-Yates on the page stream). */
static int32_t *shuffled_pages(const fa_problem *p, uint64_t seed)
{
    int32_t *perm = malloc((size_t)p->num_pages * sizeof *perm);
    uint64_t state = seed ^ CLI_SEQ_PAGE_STREAM;
    int64_t i;
    for (i = 0; perm && i < p->num_pages; i++)
        perm[i] = (int32_t)i;
    for (i = p->num_pages - 1; perm && i > 0; i--) {
        int64_t j = (int64_t)(cli_rand_next(&state) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return perm;
}

/* The block table: sequence b's pages taken in turn from the shuffled order, -1 past them. */
static int make_table(const cli_seq_args *a, const fa_problem *p, uint64_t seed,
                      cli_seq_data *d)
{
    size_t n = (size_t)(p->batch * p->pages_per_seq), next = 0, i;
    int32_t *perm = shuffled_pages(p, seed);
    int64_t b;
    d->table = malloc(n ? n * sizeof *d->table : 1);
    if (!perm || !d->table) {
        free(perm);
        return cli_error("out of host memory for the block table");
    }
    for (i = 0; i < n; i++)
        d->table[i] = -1;
    for (b = 0; b < p->batch; b++) {
        int64_t used = (seq_len(a, p, b) + p->page_size - 1) / p->page_size, j;
        for (j = 0; j < used; j++)
            d->table[b * p->pages_per_seq + j] = perm[next++];
    }
    free(perm);
    return 0;
}

/* Key j of sequence b of the logical tensor t into its page slot of the pool. */
static void scatter(const fa_problem *p, const int32_t *table, const cli_tensor *t,
                    cli_tensor *pool, int64_t b, int64_t j)
{
    const int64_t d = p->head_dim, ps = p->page_size;
    int64_t page = table[b * p->pages_per_seq + j / ps], h;
    for (h = 0; h < p->heads_kv; h++)
        memcpy(pool->data + ((page * p->heads_kv + h) * ps + j % ps) * d,
               t->data + ((b * p->heads_kv + h) * p->seqlen_k + j) * d, (size_t)d * sizeof(float));
}

/* The pools: random values everywhere (rounded to the dtype), then each sequence's keys. */
static int make_pools(const cli_seq_args *a, const fa_problem *p, uint64_t seed,
                      const cli_tensor *k, const cli_tensor *v, cli_seq_data *d)
{
    uint64_t state = seed ^ CLI_SEQ_POOL_STREAM;
    int64_t b, j;
    if (cli_tensor_alloc(&d->k_pool, "k pool", p->num_pages, p->heads_kv, p->page_size,
                         p->head_dim) ||
        cli_tensor_alloc(&d->v_pool, "v pool", p->num_pages, p->heads_kv, p->page_size,
                         p->head_dim))
        return CLI_EXIT_FAIL;
    cli_tensor_fill_random(&d->k_pool, &state);
    cli_tensor_fill_random(&d->v_pool, &state);
    cli_tensor_round(&d->k_pool, p->dtype);
    cli_tensor_round(&d->v_pool, p->dtype);
    for (b = 0; b < p->batch; b++)
        for (j = 0; j < seq_len(a, p, b); j++) {
            scatter(p, d->table, k, &d->k_pool, b, j);
            scatter(p, d->table, v, &d->v_pool, b, j);
        }
    return 0;
}

int cli_seq_fill(const cli_seq_args *a, const fa_problem *p, uint64_t seed, const cli_tensor *k,
                 const cli_tensor *v, cli_seq_data *d)
{
    int64_t b;
    memset(d, 0, sizeof *d);
    if (p->seqlens_k) {
        d->lens = malloc(p->batch > 0 ? (size_t)p->batch * sizeof *d->lens : 1);
        if (!d->lens)
            return cli_error("out of host memory for the sequence lengths");
        for (b = 0; b < p->batch; b++)
            d->lens[b] = (int32_t)seq_len(a, p, b);
    }
    if (p->page_size == 0)
        return 0;
    if (make_table(a, p, seed, d) != 0)
        return CLI_EXIT_FAIL;
    return make_pools(a, p, seed, k, v, d);
}

double cli_seq_keys(const fa_problem *p, const cli_seq_args *a)
{
    double keys = 0.0;
    int64_t b;
    if (!a->lens)
        return (double)p->batch * (double)p->seqlen_k;
    for (b = 0; b < p->batch; b++)
        keys += (double)a->lens[b];
    return keys;
}

/* Appends to buf. */
static void add(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);

static void add(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    if (used + 1 >= size)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* The lengths as "[5, 0, 17]", the middle ones elided past 8. */
static void add_lens(char *buf, size_t size, const cli_seq_args *a)
{
    size_t i;
    add(buf, size, "seqlens_k [");
    for (i = 0; i < a->nlens; i++) {
        if (a->nlens > 8 && i == 4) {
            add(buf, size, ", ...");
            i = a->nlens - 3;
        }
        add(buf, size, "%s%" PRId64, i ? ", " : "", a->lens[i]);
    }
    add(buf, size, "]");
}

void cli_seq_describe(const fa_problem *p, const cli_seq_args *a, int32_t plan_splits,
                      char *buf, size_t size)
{
    if (size == 0)
        return;
    buf[0] = '\0';
    if (a->lens)
        add_lens(buf, size, a);
    else if (p->seqlens_k)
        add(buf, size, "seqlens_k %" PRId64 " each", p->seqlen_k);
    if (p->page_size > 0)
        add(buf, size, "%spaged: %" PRId64 " keys a page, %" PRId64 " pages (%d spare), %" PRId64
            " a sequence", *buf ? ", " : "", p->page_size, p->num_pages, CLI_SEQ_SPARE_PAGES,
            p->pages_per_seq);
    add(buf, size, "%skv splits %d", *buf ? ", " : "", (int)plan_splits);
    if (p->kv_splits > 0)
        add(buf, size, " (asked %d)", (int)p->kv_splits);
    else
        add(buf, size, " (the planner's)");
}

void cli_seq_data_free(cli_seq_data *d)
{
    free(d->lens);
    free(d->table);
    cli_tensor_free(&d->k_pool);
    cli_tensor_free(&d->v_pool);
    memset(d, 0, sizeof *d);
}

void cli_seq_args_free(cli_seq_args *a)
{
    free(a->lens);
    a->lens = NULL;
    a->nlens = 0;
}
