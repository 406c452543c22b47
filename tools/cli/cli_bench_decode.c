/*
 * cli_bench_decode.c - `flashattn bench --decode`: the decode step of a language model, one
 * query row per sequence (Sq = 1) over a KV cache of Sk keys, swept over Sk and the batch. Per
 * row: ms per call, tokens/s (one token per sequence per call), the bytes of K and V the call
 * must read per second, and that as a share of a copy bandwidth measured in the same run. With
 * --compare-splits each point runs with split-KV on (the planner's, or --kv-splits N) and off
 * (kv_splits 1); with --compare-paged contiguous K/V against a paged pool; so each of the
 * issue's two comparisons is one command.
 *
 * Decoding is bound by memory bandwidth: each call reads all of K and V once and does about
 * 4 FLOPs per element read, so bytes/s against a copy's is the figure of merit. The library
 * has no device copy API, so the copy measured is a host memcpy (one thread): the right
 * comparison on the cpu backend and on pocl (whose device is the host CPU), not on a GPU; the
 * header says which. Inputs are a random 16 MiB block repeated (the values do not change the
 * time); no check against the golden here (`run --check` does that at any size).
 */
#include "cli_commands.h"
#include "cli_common.h"
#include "cli_memory.h"
#include "cli_seq.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The cache lengths of the sweep (the issue's), filtered by --max-seqlen-k. */
static const int64_t decode_seqs[] = {1024, 4096, 16384, 32768, 65536, 131072};
#define DECODE_NSEQS (sizeof decode_seqs / sizeof decode_seqs[0])
/* Most entries of --batch and of the variants of one point. */
#define DECODE_MAX_BATCHES 16
#define DECODE_MAX_VARIANTS 4
#define DECODE_MAX_REPEAT 1000
/* The random block that fills K and V (and the copy's source once). */
#define DECODE_BLOCK_BYTES ((size_t)16 << 20)
/* The copy's size when --copy-mib does not fit, and the copies timed. */
#define DECODE_COPY_FALLBACK_MIB 256
#define DECODE_COPY_REPEAT 3
#define DECODE_NOPTS 17

typedef struct decode_args {
    fa_backend backend;
    int64_t device, max_seqlen_k, heads, heads_kv, dim, page_size, kv_splits, repeat, copy_mib;
    fa_dtype dtype;
    const char *batches;
    float max_seconds;
    int decode, compare_splits, compare_paged, quiet;
} decode_args;

/* One way of running a point: contiguous or paged, split-KV as asked. */
typedef struct decode_variant {
    int64_t page_size; /* 0: contiguous */
    int32_t kv_splits; /* problem.kv_splits: 0 the planner, 1 off, n */
} decode_variant;

typedef enum decode_state { DECODE_OK, DECODE_OOM, DECODE_SKIP, DECODE_ERROR } decode_state;

typedef struct decode_row {
    decode_state state;
    double ms;
    int32_t splits; /* fa_plan_kv_splits */
} decode_row;

typedef struct decode_run {
    decode_args a;
    int64_t batches[DECODE_MAX_BATCHES];
    size_t nbatches;
    decode_variant vars[DECODE_MAX_VARIANTS];
    int nvars;
    fa_context *ctx;
    char device[320], cmdline[1024], date[64], copy_note[160];
    double copy_gbs; /* bytes read + written per second of the copy, in GB/s */
    unsigned char *block; /* DECODE_BLOCK_BYTES of random dtype values */
} decode_run;

static const cli_cmd decode_cmd = {
    "bench --decode", "[options]",
    "The decode sweep: one query row per sequence (Sq = 1) attending to a KV cache of Sk keys\n"
    "(fa_forward_seq, bottom-right causal, seqlens_k passed), Sk in 1024, 4096, 16384,\n"
    "32768, 65536, 131072 up to --max-seqlen-k, for each --batch. Per row: ms per call (median\n"
    "after a warm-up), tokens/s (batch / s), GB/s of K and V read (batch * Sk * heads_kv * dim\n"
    "* 2 * element bytes / s) and that against a copy bandwidth measured in the same run (a\n"
    "host memcpy: the library has no device copy; the header says what that means for the\n"
    "backend). --compare-splits runs each point with split-KV as asked and with --kv-splits 1\n"
    "(off); --compare-paged with contiguous and paged K/V; speedup = the first variant's ms /\n"
    "the row's. A row that does not fit in memory says OOM, one estimated over --max-seconds\n"
    "skip (neither is a failure). Exit status 1 when a measurement failed."};

static size_t decode_table(decode_args *a, cli_opt *o)
{
    const cli_opt t[DECODE_NOPTS] = {
        {"decode", CLI_FLAG, &a->decode, 0, 0, NULL, "the decode sweep (this help)", 0},
        {"backend", CLI_BACKEND, &a->backend, 0, 0, "B", "auto, cpu, opencl or cuda (default auto)",
         0},
        {"device", CLI_INT, &a->device, 0, INT32_MAX, "N", "device index (default 0)", 0},
        {"dtype", CLI_DTYPE, &a->dtype, 0, 0, "T", "f32, f16 or bf16 (default f16)", 0},
        {"batch", CLI_STRING, &a->batches, 0, 0, "LIST", "batch sizes (default 1,8)", 0},
        {"max-seqlen-k", CLI_INT, &a->max_seqlen_k, 1, CLI_MAX_SIZE, "N",
         "longest cache of the sweep (default 131072)", 0},
        {"heads", CLI_INT, &a->heads, 1, CLI_MAX_SIZE, "N", "query heads (default 32)", 0},
        {"heads-kv", CLI_INT, &a->heads_kv, 1, CLI_MAX_SIZE, "N",
         "key/value heads, divides --heads (default 8; --heads if 8 does not divide it)", 0},
        {"dim", CLI_INT, &a->dim, 1, FA_MAX_HEAD_DIM, "D", "head dimension (default 128)", 0},
        {"paged", CLI_INT, &a->page_size, 1, INT32_MAX, "PAGE_SIZE",
         "K and V in a shuffled pool of pages of PAGE_SIZE keys", 0},
        {"kv-splits", CLI_INT, &a->kv_splits, 0, CLI_SEQ_MAX_SPLITS, "N",
         "split-KV: N key chunks (default 0: the planner; 1: never split)", 0},
        {"compare-splits", CLI_FLAG, &a->compare_splits, 0, 0, NULL,
         "also run each point with --kv-splits 1 (split-KV off), first", 0},
        {"compare-paged", CLI_FLAG, &a->compare_paged, 0, 0, NULL,
         "run each point contiguous, then paged (--paged, default 16)", 0},
        {"repeat", CLI_INT, &a->repeat, 1, DECODE_MAX_REPEAT, "N",
         "median of N timed calls after 1 warm-up (default 5)", 0},
        {"max-seconds", CLI_FLOAT, &a->max_seconds, 0, 0, "S",
         "skip a row estimated to take longer (default 60)", 0},
        {"copy-mib", CLI_INT, &a->copy_mib, 1, 65536, "N",
         "MiB of the copy that measures the bandwidth (default 1024)", 0},
        {"quiet", CLI_FLAG, &a->quiet, 0, 0, NULL, "no progress lines on stderr", 0},
    };
    memcpy(o, t, sizeof t);
    return DECODE_NOPTS;
}

/* ---- options ----------------------------------------------------------------------------- */

static void decode_defaults(decode_args *a)
{
    memset(a, 0, sizeof *a);
    a->backend = FA_BACKEND_AUTO;
    a->dtype = FA_DTYPE_F16;
    a->max_seqlen_k = decode_seqs[DECODE_NSEQS - 1];
    a->heads = 32;
    a->heads_kv = 8;
    a->dim = 128;
    a->repeat = 5;
    a->max_seconds = 60.0f;
    a->copy_mib = 1024;
}

/* The variants of each point: layouts (contiguous, paged) times splits (off, as asked). */
static int decode_variants(decode_run *r, int paged_given)
{
    const decode_args *a = &r->a;
    int64_t layouts[2];
    int32_t splits[2];
    int nl = 0, ns = 0, i, j;
    if (a->compare_splits && a->kv_splits == 1)
        return cli_usage_error(&decode_cmd, "--compare-splits compares --kv-splits 1 with "
                               "split-KV on: give --kv-splits 0 (the planner) or N > 1");
    if (a->compare_paged)
        layouts[nl++] = 0;
    if (a->compare_paged || paged_given)
        layouts[nl++] = paged_given ? a->page_size : 16;
    else
        layouts[nl++] = 0;
    if (a->compare_splits)
        splits[ns++] = 1;
    splits[ns++] = (int32_t)a->kv_splits;
    for (i = 0; i < nl; i++)
        for (j = 0; j < ns; j++) {
            r->vars[r->nvars].page_size = layouts[i];
            r->vars[r->nvars++].kv_splits = splits[j];
        }
    return 0;
}

/* The sweep's longest cache: the last of decode_seqs within --max-seqlen-k. */
static int64_t longest_seqlen_k(const decode_args *a)
{
    size_t i;
    int64_t sk = decode_seqs[0];
    for (i = 0; i < DECODE_NSEQS && decode_seqs[i] <= a->max_seqlen_k; i++)
        sk = decode_seqs[i];
    return sk;
}

/* The paged variant's pool at the sweep's largest point: a usage error naming the options
 * when it passes the library's page count, which the user never set by name. */
static int check_pool(const decode_run *r)
{
    const decode_args *a = &r->a;
    int64_t page = 0, batch = 0, sk = longest_seqlen_k(a), pages;
    size_t i;
    for (i = 0; i < (size_t)r->nvars; i++)
        page = r->vars[i].page_size > 0 ? r->vars[i].page_size : page;
    for (i = 0; i < r->nbatches; i++)
        batch = r->batches[i] > batch ? r->batches[i] : batch;
    if (page == 0)
        return 0;
    /* batch and ceil(sk / page) are below 2^31: the product fits. */
    pages = batch * ((sk + page - 1) / page) + CLI_SEQ_SPARE_PAGES;
    if (pages <= CLI_MAX_SIZE)
        return 0;
    return cli_usage_error(&decode_cmd, "--paged %" PRId64 ": --batch %" PRId64 " at seq_k %"
                           PRId64 " (--max-seqlen-k) needs a pool of %" PRId64 " pages, more "
                           "than the %d it may hold; give a larger --paged, a smaller --batch "
                           "or --max-seqlen-k", page, batch, sk, pages, CLI_MAX_SIZE);
}

static int decode_parse(decode_run *r, const cli_opt *opts, size_t n)
{
    const decode_args *a = &r->a;
    int64_t *list = NULL;
    size_t count = 0, i;
    int rc = 0;
    if (!(a->max_seconds > 0.0f) || !isfinite(a->max_seconds))
        return cli_usage_error(&decode_cmd, "--max-seconds: must be a positive number");
    /* The default 8 is GQA for the default 32 heads; where it cannot be (--heads 4), the
     * default is plain multi-head attention rather than an error about a value not given. */
    if (!cli_find(opts, n, "heads-kv")->seen && a->heads % a->heads_kv != 0)
        r->a.heads_kv = a->heads;
    if (a->heads % a->heads_kv != 0)
        return cli_usage_error(&decode_cmd, "--heads-kv %" PRId64 " does not divide --heads %"
                               PRId64, a->heads_kv, a->heads);
    if (a->max_seqlen_k < decode_seqs[0])
        return cli_usage_error(&decode_cmd, "--max-seqlen-k: %" PRId64 " is below the sweep's "
                               "shortest cache, %" PRId64, a->max_seqlen_k, decode_seqs[0]);
    if (cli_parse_int_list(&decode_cmd, "batch", a->batches ? a->batches : "1,8", 1,
                           CLI_MAX_SIZE, "a batch size", &list, &count) != 0)
        rc = CLI_EXIT_USAGE;
    else if (count > DECODE_MAX_BATCHES)
        rc = cli_usage_error(&decode_cmd, "--batch: more than %d sizes", DECODE_MAX_BATCHES);
    for (i = 0; rc == 0 && i < count; i++)
        r->batches[i] = list[i];
    r->nbatches = count;
    free(list);
    if (rc != 0)
        return rc;
    rc = decode_variants(r, cli_find(opts, n, "paged")->seen);
    return rc != 0 ? rc : check_pool(r);
}

/* ---- the header's facts ------------------------------------------------------------------ */

static void decode_cmdline(decode_run *r, int argc, char **argv)
{
    size_t len = (size_t)snprintf(r->cmdline, sizeof r->cmdline, "flashattn bench");
    int i;
    for (i = 1; i < argc && len < sizeof r->cmdline; i++) {
        const char *q = strchr(argv[i], ' ') ? "'" : "";
        len += (size_t)snprintf(r->cmdline + len, sizeof r->cmdline - len, " %s%s%s", q, argv[i],
                                q);
    }
    time_t now = time(NULL);
    struct tm *tm = gmtime(&now);
    if (!tm || strftime(r->date, sizeof r->date, "%Y-%m-%d %H:%M UTC", tm) == 0)
        snprintf(r->date, sizeof r->date, "(unknown date)");
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *t, size_t n)
{
    qsort(t, n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/*
 * The copy bandwidth: a host memcpy of --copy-mib MiB (256 MiB when that does not fit in the
 * host's available memory), one warm-up and the median of three, counted as bytes read plus
 * bytes written per second (STREAM Copy's count, and CUDA bandwidthTest's for a device copy).
 */
static int measure_copy(decode_run *r)
{
    static volatile unsigned char sink;
    uint64_t avail = cli_host_memory_available(NULL);
    size_t mib = (size_t)r->a.copy_mib, bytes, i;
    double t[DECODE_COPY_REPEAT];
    unsigned char *src, *dst;
    if (avail && (uint64_t)mib << 22 > avail) /* source and destination, and room to spare */
        mib = mib < DECODE_COPY_FALLBACK_MIB ? mib : DECODE_COPY_FALLBACK_MIB;
    bytes = mib << 20;
    src = malloc(bytes);
    dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return cli_error("out of host memory for the %zu MiB copy (try --copy-mib)", mib);
    }
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    memcpy(dst, src, bytes);
    for (i = 0; i < DECODE_COPY_REPEAT; i++) {
        double t0 = cli_now_ms();
        memcpy(dst, src, bytes);
        t[i] = cli_now_ms() - t0;
        sink = (unsigned char)(sink + dst[(i * 4099) % bytes]); /* the copy is used */
    }
    double ms = median(t, DECODE_COPY_REPEAT);
    r->copy_gbs = ms > 0.0 ? 2.0 * (double)bytes / (ms * 1e6) : 0.0;
    snprintf(r->copy_note, sizeof r->copy_note, "host memcpy of %zu MiB%s, one thread", mib,
             mib < (size_t)r->a.copy_mib ? " (the host has too little memory for --copy-mib)" : "");
    free(src);
    free(dst);
    return 0;
}

/* The random block K and V are filled from: uniform [-1, 1) values in the dtype. */
static int make_block(decode_run *r)
{
    size_t esz = fa_dtype_size(r->a.dtype), n = DECODE_BLOCK_BYTES / esz, i;
    uint64_t state = 1;
    r->block = malloc(DECODE_BLOCK_BYTES);
    if (!r->block)
        return cli_error("out of host memory for the input block");
    for (i = 0; i < n; i++) {
        float x = cli_rand_uniform(&state);
        uint16_t h = r->a.dtype == FA_DTYPE_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
        if (esz == 4)
            memcpy(r->block + i * 4, &x, 4);
        else
            memcpy(r->block + i * 2, &h, 2);
    }
    return 0;
}

static void print_header(const decode_run *r)
{
    char layouts[160] = "contiguous bhsd K/V", splits[128];
    int i, paged = 0;
    const decode_args *a = &r->a;
    for (i = 0; i < r->nvars; i++)
        paged = r->vars[i].page_size > 0 ? (int)r->vars[i].page_size : paged;
    if (paged)
        snprintf(layouts, sizeof layouts,
                 "%spaged: %d keys a page, a shuffled pool of B * ceil(Sk / %d) + %d pages",
                 a->compare_paged ? "contiguous bhsd K/V, then " : "", paged, paged,
                 CLI_SEQ_SPARE_PAGES);
    if (a->kv_splits == 0)
        snprintf(splits, sizeof splits, "%sthe planner's (kv_splits 0)",
                 a->compare_splits ? "off (kv_splits 1), then " : "");
    else
        snprintf(splits, sizeof splits, "%skv_splits %" PRId64,
                 a->compare_splits ? "off (kv_splits 1), then " : "", a->kv_splits);
    printf("# %s\n# date     %s\n# device   %s\n", r->cmdline, r->date, r->device);
    printf("# problem  decode: Sq = 1, heads %" PRId64 " (kv %" PRId64 "), dim %" PRId64
           ", %s, mask bottom-right, seqlens_k passed (each sequence Sk keys), random inputs\n",
           a->heads, a->heads_kv, a->dim, fa_dtype_name(a->dtype));
    printf("# layout   %s\n# splits   %s\n", layouts, splits);
    printf("# timing   fa_forward_seq, median of %" PRId64 " after 1 warm-up; a row estimated "
           "over %g s is skipped\n", a->repeat, (double)a->max_seconds);
    printf("# copy     %s: %.2f GB/s (bytes read + written / time, median of %d after 1 "
           "warm-up)\n", r->copy_note, r->copy_gbs, DECODE_COPY_REPEAT);
    if (fa_context_backend(r->ctx) != FA_BACKEND_CPU)
        printf("# copy     the library has no device copy, so %%copy is against host memory: "
               "right for pocl (its device is the host CPU), not for a discrete GPU\n");
    printf("\n%-7s %-5s %5s %7s %-7s %-8s | %9s %10s %8s %6s | %7s\n", "backend", "dtype",
           "batch", "seq_k", "layout", "splits", "ms", "tok/s", "GB/s", "%copy", "speedup");
}

/* ---- one point --------------------------------------------------------------------------- */

/* The device buffers of one (batch, Sk, layout), shared by its split variants. */
typedef struct decode_bufs {
    fa_buffer *q, *k, *v, *o, *lens, *table;
    fa_plan *plans[DECODE_MAX_VARIANTS];
} decode_bufs;

static void free_bufs(decode_bufs *b)
{
    int i;
    for (i = 0; i < DECODE_MAX_VARIANTS; i++)
        fa_plan_destroy(b->plans[i]);
    fa_buffer_destroy(b->q);
    fa_buffer_destroy(b->k);
    fa_buffer_destroy(b->v);
    fa_buffer_destroy(b->o);
    fa_buffer_destroy(b->lens);
    fa_buffer_destroy(b->table);
    memset(b, 0, sizeof *b);
}

/* The point's problem for a layout (page_size 0: contiguous). */
static void point_problem(const decode_run *r, int64_t batch, int64_t sk, int64_t page_size,
                          fa_problem *p)
{
    fa_problem_init(p, r->a.dtype, FA_LAYOUT_BHSD, batch, r->a.heads, r->a.heads_kv, 1, sk,
                    r->a.dim);
    p->mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
    p->seqlens_k = 1;
    if (page_size > 0) {
        int64_t per = (sk + page_size - 1) / page_size;
        fa_problem_set_paged(p, page_size, batch * per + CLI_SEQ_SPARE_PAGES, per);
    }
}

/* K's (and V's) buffer bytes. */
static uint64_t kv_bytes(const fa_problem *p)
{
    uint64_t rows = p->page_size > 0 ? cli_mul_sat((uint64_t)p->num_pages, (uint64_t)p->page_size)
                                     : cli_mul_sat((uint64_t)p->batch, (uint64_t)p->seqlen_k);
    return cli_mul_sat(cli_mul_sat(rows, (uint64_t)(p->heads_kv * p->head_dim)),
                       fa_dtype_size(p->dtype));
}

/* A buffer of `bytes` filled from the random block, in block-sized writes. */
static fa_status filled_buffer(const decode_run *r, uint64_t bytes, fa_buffer **out)
{
    fa_status st = fa_buffer_create(r->ctx, (size_t)bytes, out);
    uint64_t at;
    for (at = 0; st == FA_STATUS_OK && at < bytes; at += DECODE_BLOCK_BYTES) {
        uint64_t n = bytes - at < DECODE_BLOCK_BYTES ? bytes - at : DECODE_BLOCK_BYTES;
        st = fa_buffer_write(*out, (size_t)at, r->block, (size_t)n);
    }
    return st;
}

/* An int32 buffer of n values. */
static fa_status int_buffer(const decode_run *r, const int32_t *v, int64_t n, fa_buffer **out)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int32_t);
    fa_status st = fa_buffer_create(r->ctx, bytes, out);
    return st == FA_STATUS_OK && n > 0 ? fa_buffer_write(*out, 0, v, bytes) : st;
}

/* The lengths (all Sk) and, paged, a block table over a shuffled pool. */
static fa_status seq_buffers(const decode_run *r, const fa_problem *p, decode_bufs *b)
{
    /* The table's n entries are the first of the num_pages > n shuffled ones. */
    int64_t n = p->page_size > 0 ? p->batch * p->pages_per_seq : 0, i;
    int32_t *v = malloc((size_t)(p->batch > p->num_pages ? p->batch : p->num_pages) * sizeof *v);
    uint64_t state = 2;
    fa_status st;
    if (!v)
        return FA_STATUS_OUT_OF_MEMORY;
    for (i = 0; i < p->batch; i++)
        v[i] = (int32_t)p->seqlen_k;
    st = int_buffer(r, v, p->batch, &b->lens);
    if (st == FA_STATUS_OK && n > 0) {
        for (i = 0; i < p->num_pages; i++)
            v[i] = (int32_t)i;
        for (i = p->num_pages - 1; i > 0; i--) { /* Fisher-Yates: the pages in a random order */
            int64_t j = (int64_t)(cli_rand_next(&state) % (uint64_t)(i + 1));
            int32_t t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
        st = int_buffer(r, v, n, &b->table);
    }
    free(v);
    return st;
}

/* The memory of a point's layout: its buffers and the largest scratch of its plans. */
static int point_fits(const decode_run *r, const fa_problem *p, const decode_bufs *b,
                      char *why, size_t why_size)
{
    uint64_t qo = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q),
                              (uint64_t)p->head_dim * fa_dtype_size(p->dtype));
    uint64_t scratch = 0, ints = cli_mul_sat((uint64_t)p->batch, 4);
    cli_memory_need need;
    int i;
    for (i = 0; i < DECODE_MAX_VARIANTS; i++)
        if (b->plans[i] && fa_plan_scratch_bytes(b->plans[i]) > scratch)
            scratch = fa_plan_scratch_bytes(b->plans[i]);
    if (p->page_size > 0)
        ints = cli_add_sat(ints, cli_mul_sat(cli_mul_sat((uint64_t)p->batch,
                                                         (uint64_t)p->pages_per_seq), 4));
    need.device = cli_add_sat(cli_add_sat(cli_mul_sat(qo, 2), cli_mul_sat(kv_bytes(p), 2)),
                              cli_add_sat(scratch, ints));
    need.host = cli_add_sat(ints, cli_mul_sat((uint64_t)p->num_pages, 4));
    return cli_memory_fits(r->ctx, need, why, why_size);
}

typedef struct decode_call {
    const decode_run *r;
    const decode_bufs *b;
    const fa_plan *plan;
} decode_call;

static fa_status decode_once(const decode_call *c)
{
    fa_seq_buffers s;
    memset(&s, 0, sizeof s);
    s.seqlens_k = c->b->lens;
    s.block_table = c->b->table;
    return fa_forward_seq(c->r->ctx, c->plan, c->b->q, c->b->k, c->b->v, c->b->o, NULL, NULL, &s);
}

/* One warm-up, then the median of --repeat calls. */
static fa_status decode_timed(const decode_call *c, int64_t repeat, double *ms)
{
    double t[DECODE_MAX_REPEAT];
    fa_status st = decode_once(c);
    int64_t i;
    for (i = 0; i < repeat && st == FA_STATUS_OK; i++) {
        double t0 = cli_now_ms();
        st = decode_once(c);
        t[i] = cli_now_ms() - t0;
    }
    if (st == FA_STATUS_OK)
        *ms = median(t, (size_t)repeat);
    return st;
}

static void print_row(const decode_run *r, int64_t batch, int64_t sk, int v,
                      const decode_row *row, const decode_row *base)
{
    static const char *const words[] = {"", "OOM", "skip", "error"};
    const decode_variant *var = &r->vars[v];
    char layout[32] = "contig", splits[24], ms[24], tok[24] = "-", gbs[24] = "-", pct[24] = "-",
         speed[24] = "-";
    double bytes = (double)batch * (double)sk * (double)r->a.heads_kv * (double)r->a.dim * 2.0 *
                   (double)fa_dtype_size(r->a.dtype);
    if (var->page_size > 0)
        snprintf(layout, sizeof layout, "paged%" PRId64, var->page_size);
    if (row->splits == 0) /* not planned */
        snprintf(splits, sizeof splits, var->kv_splits ? "%d" : "auto", (int)var->kv_splits);
    else if (var->kv_splits == 0)
        snprintf(splits, sizeof splits, "auto:%d", (int)row->splits);
    else if (row->splits != var->kv_splits)
        snprintf(splits, sizeof splits, "%d->%d", (int)var->kv_splits, (int)row->splits);
    else
        snprintf(splits, sizeof splits, "%d", (int)row->splits);
    snprintf(ms, sizeof ms, "%s", words[row->state]);
    if (row->state == DECODE_OK && row->ms > 0.0) {
        double gb = bytes / (row->ms * 1e6);
        snprintf(ms, sizeof ms, "%.3f", row->ms);
        snprintf(tok, sizeof tok, "%.1f", (double)batch * 1e3 / row->ms);
        snprintf(gbs, sizeof gbs, "%.2f", gb);
        if (r->copy_gbs > 0.0)
            snprintf(pct, sizeof pct, "%.1f%%", 100.0 * gb / r->copy_gbs);
        if (base->state == DECODE_OK)
            snprintf(speed, sizeof speed, "%.2fx", base->ms / row->ms);
    }
    printf("%-7s %-5s %5" PRId64 " %7" PRId64 " %-7s %-8s | %9s %10s %8s %6s | %7s\n",
           fa_backend_name(fa_context_backend(r->ctx)), fa_dtype_name(r->a.dtype), batch, sk,
           layout, splits, ms, tok, gbs, pct, speed);
    fflush(stdout);
}

/* Reports a failure of a row on stderr; 1. */
static int row_error(const decode_run *r, int64_t batch, int64_t sk, fa_status st)
{
    fprintf(stderr, "flashattn bench: decode batch %" PRId64 " seq_k %" PRId64 ": %s: %s\n",
            batch, sk, fa_status_name(st), cli_status_detail(st, fa_context_last_error(r->ctx)));
    return 1;
}

/*
 * The variants of one layout (those with page_size) at one point: their plans, the memory
 * check, the buffers, then each timed unless estimated too slow from last[v] (the previous
 * point's ms and Sk). Non-zero when a measurement failed.
 */
static int run_layout(decode_run *r, int64_t batch, int64_t sk, int64_t page_size,
                      decode_row rows[], double last[][2])
{
    decode_bufs b;
    fa_problem p;
    char why[512];
    fa_status st = FA_STATUS_OK;
    int v, rc = 0;
    memset(&b, 0, sizeof b);
    point_problem(r, batch, sk, page_size, &p);
    for (v = 0; v < r->nvars && st == FA_STATUS_OK; v++) {
        p.kv_splits = r->vars[v].kv_splits;
        if (r->vars[v].page_size == page_size)
            st = fa_plan_create(r->ctx, &p, &b.plans[v]);
        if (b.plans[v])
            rows[v].splits = fa_plan_kv_splits(b.plans[v]);
    }
    if (st != FA_STATUS_OK) {
        for (v = 0; v < r->nvars; v++)
            rows[v].state = r->vars[v].page_size == page_size ? DECODE_ERROR : rows[v].state;
        rc = row_error(r, batch, sk, st);
    } else if (point_fits(r, &p, &b, why, sizeof why) != 0) {
        for (v = 0; v < r->nvars; v++)
            rows[v].state = r->vars[v].page_size == page_size ? DECODE_OOM : rows[v].state;
        if (!r->a.quiet)
            fprintf(stderr, "bench: decode batch %" PRId64 " seq_k %" PRId64 ": %s\n", batch, sk,
                    why);
    } else {
        uint64_t qo = (uint64_t)(batch * p.heads_q * p.head_dim) * fa_dtype_size(p.dtype);
        st = filled_buffer(r, qo, &b.q);
        st = st ? st : filled_buffer(r, kv_bytes(&p), &b.k);
        st = st ? st : filled_buffer(r, kv_bytes(&p), &b.v);
        st = st ? st : fa_buffer_create(r->ctx, (size_t)qo, &b.o);
        st = st ? st : seq_buffers(r, &p, &b);
        for (v = 0; v < r->nvars; v++) {
            decode_call c = {r, &b, b.plans[v]};
            if (!b.plans[v])
                continue;
            if (st == FA_STATUS_OK && last[v][0] > 0.0 &&
                last[v][0] * ((double)sk / last[v][1]) * (double)(r->a.repeat + 1) >
                    1e3 * (double)r->a.max_seconds) {
                rows[v].state = DECODE_SKIP;
                continue;
            }
            st = st ? st : decode_timed(&c, r->a.repeat, &rows[v].ms);
            rows[v].state = st == FA_STATUS_OK ? DECODE_OK
                            : st == FA_STATUS_OUT_OF_MEMORY ? DECODE_OOM : DECODE_ERROR;
            if (st == FA_STATUS_OK)
                last[v][0] = rows[v].ms, last[v][1] = (double)sk;
            else if (st != FA_STATUS_OUT_OF_MEMORY)
                rc = row_error(r, batch, sk, st);
        }
    }
    free_bufs(&b);
    return rc;
}

static int sweep(decode_run *r)
{
    size_t bi, si;
    int v, w, rc = 0;
    for (bi = 0; bi < r->nbatches; bi++) {
        double last[DECODE_MAX_VARIANTS][2] = {{0.0, 0.0}};
        for (si = 0; si < DECODE_NSEQS && decode_seqs[si] <= r->a.max_seqlen_k; si++) {
            int64_t batch = r->batches[bi], sk = decode_seqs[si];
            decode_row rows[DECODE_MAX_VARIANTS];
            memset(rows, 0, sizeof rows);
            if (!r->a.quiet)
                fprintf(stderr, "bench: decode batch %" PRId64 " seq_k %" PRId64 "\n", batch, sk);
            for (v = 0; v < r->nvars; v++) {
                for (w = 0; w < v && r->vars[w].page_size != r->vars[v].page_size; w++)
                    ;
                if (w == v) /* the first variant of its layout runs the layout's */
                    rc |= run_layout(r, batch, sk, r->vars[v].page_size, rows, last);
            }
            for (v = 0; v < r->nvars; v++)
                print_row(r, batch, sk, v, &rows[v], &rows[0]);
        }
    }
    return rc;
}

static const char *const decode_notes[] = {
    "ms: one fa_forward_seq call over the whole batch. tok/s: batch / s (one token per",
    "  sequence per call). GB/s: K and V bytes the call must read (batch * seq_k * heads_kv *",
    "  dim * 2 * element bytes) / time; %copy: that against the copy line of the header.",
    "splits: the plan's key chunks (fa_plan_kv_splits); auto:N the planner chose N, A->N an",
    "  override A the plan clamped to N. speedup: the first row of the point's ms / the row's.",
    "OOM: the point does not fit in the device's (or the host's) memory, or the device said",
    "  so; skip: estimated over --max-seconds from the previous seq_k. Neither is a failure.",
    NULL,
};

/* ---- the command ------------------------------------------------------------------------- */

static int decode_body(decode_run *r)
{
    int rc, i;
    if (cli_context_open(r->a.backend, (int)r->a.device, &r->ctx) != 0)
        return CLI_EXIT_FAIL;
    cli_describe_context(r->ctx, r->a.backend == FA_BACKEND_AUTO, r->device, sizeof r->device);
    if (measure_copy(r) != 0 || make_block(r) != 0)
        return CLI_EXIT_FAIL;
    print_header(r);
    rc = sweep(r);
    printf("\n");
    for (i = 0; decode_notes[i]; i++)
        printf("# %s\n", decode_notes[i]);
    if (rc)
        printf("# FAILED: a measurement failed (see stderr); exit status 1\n");
    return rc ? CLI_EXIT_FAIL : 0;
}

static int bench_decode(int argc, char **argv)
{
    static decode_run r;
    cli_opt opts[DECODE_NOPTS];
    size_t n;
    int rc;
    memset(&r, 0, sizeof r);
    decode_defaults(&r.a);
    n = decode_table(&r.a, opts);
    rc = cli_parse(&decode_cmd, argc, argv, opts, n);
    if (rc == CLI_PARSE_HELP) {
        cli_print_help(&decode_cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (rc != CLI_PARSE_OK || decode_parse(&r, opts, n) != 0)
        return CLI_EXIT_USAGE;
    decode_cmdline(&r, argc, argv);
    rc = decode_body(&r);
    fa_context_destroy(r.ctx);
    free(r.block);
    return rc;
}

int cli_cmd_bench_any(int argc, char **argv)
{
    int i, help = 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--decode") == 0)
            return bench_decode(argc, argv);
        if (strcmp(argv[i], "--block-sparse") == 0)
            return cli_bench_sparse(argc, argv);
        help |= strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0;
    }
    i = cli_cmd_bench(argc, argv);
    if (help)
        printf("  --decode                  the decode sweep (Sq = 1 over a KV cache): see "
               "'flashattn bench --decode --help'\n");
    if (help)
        printf("  --block-sparse            block-sparse against dense: see "
               "'flashattn bench --block-sparse --help'\n");
    return i;
}
