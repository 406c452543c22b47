/*
 * cli_modifiers.c - the score modifier and dropout options of `run`, `bench` and `plan` (see
 * cli_modifiers.h): parsing and checking their values, reading their files, setting a
 * problem's fields and making the host tensors the modifiers read.
 *
 * The library validates every field again (fa_plan_create); the checks here exist so that a
 * bad value on the command line is a usage error naming the option (exit 2), before any
 * context is opened, rather than a library status about a field the user never named.
 */
#include "cli_modifiers.h"
#include "cli_memory.h"
#include "cli_tensor.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Streams of the random bias and sinks: the run's seed mixed with a constant of each. */
#define CLI_MOD_BIAS_STREAM 0x62696173ull  /* "bias" */
#define CLI_MOD_SINKS_STREAM 0x73696e6bull /* "sink" */

void cli_mod_defaults(cli_mod_args *a)
{
    memset(a, 0, sizeof *a);
    a->window_left = -1;
    a->window_right = -1;
}

void cli_mod_opts(cli_mod_args *a, cli_opt *opts)
{
    const cli_opt t[CLI_MOD_NOPTS] = {
        {"softcap", CLI_FLOAT, &a->softcap, 0, 0, "C",
         "logit softcap: s = C * tanh(s / C), C in [1e-18, 1e18] (default 0: off)", 0},
        {"alibi", CLI_FLAG, &a->alibi, 0, 0, NULL,
         "ALiBi with the paper's slopes 2^(-8 (h+1) / heads) for query head h", 0},
        {"alibi-slopes", CLI_STRING, &a->alibi_path, 0, 0, "FILE",
         "ALiBi with the slopes of a .npy f32 [heads] or [batch, heads] (one per sequence)", 0},
        {"bias", CLI_STRING, &a->bias, 0, 0, "FILE|random",
         "add a .npy bias [batch, heads, seq, seq_k] (1 broadcasts any of the first 3)", 0},
        {"window", CLI_STRING, &a->window, 0, 0, "L,R",
         "sliding window: keys i'-L..i'+R, i' = i + seq_k - seq; -1 is unbounded", 0},
        {"sinks", CLI_STRING, &a->sinks, 0, 0, "FILE|random",
         "attention sinks: .npy f32 [heads] logits in the softmax's denominator", 0},
        {"dropout", CLI_FLOAT, &a->dropout, 0, 0, "P",
         "dropout on the probabilities, P in [0, 1) (Philox; default 0: off)", 0},
        {"dropout-seed", CLI_U64, &a->dropout_seed, 0, 0, "S",
         "the dropout's Philox seed (default 0)", 0},
        {"dropout-offset", CLI_INT, &a->dropout_offset, 0, UINT32_MAX, "N",
         "the dropout's Philox counter offset (default 0)", 0},
    };
    memcpy(opts, t, sizeof t);
}

/* One bound of --window: an integer >= -1; *s advanced past it. */
static int window_bound(const char **s, int64_t *out)
{
    const char *p = *s;
    char *end = NULL;
    long long v;
    if (!((*p >= '0' && *p <= '9') || (*p == '-' && p[1] >= '0' && p[1] <= '9')))
        return -1;
    errno = 0;
    v = strtoll(p, &end, 10);
    if (errno == ERANGE || v < -1)
        return -1;
    *out = (int64_t)v;
    *s = end;
    return 0;
}

static int parse_window(const cli_cmd *cmd, cli_mod_args *a)
{
    const char *s = a->window;
    if (window_bound(&s, &a->window_left) != 0 || *s++ != ',' ||
        window_bound(&s, &a->window_right) != 0 || *s != '\0')
        return cli_usage_error(cmd, "--window: '%s' is not L,R with integers L, R >= -1 (-1: "
                               "unbounded)", a->window);
    return 0;
}

static int seen(const cli_opt *opts, size_t nopts, const char *name)
{
    const cli_opt *o = cli_find(opts, nopts, name);
    return o && o->seen;
}

int cli_mod_validate(const cli_cmd *cmd, cli_mod_args *a, const cli_opt *opts, size_t nopts)
{
    a->dropout_given = seen(opts, nopts, "dropout");
    a->seed_given = seen(opts, nopts, "dropout-seed");
    a->offset_given = seen(opts, nopts, "dropout-offset");
    if (!(a->softcap == 0.0f || (a->softcap >= FA_SOFTCAP_MIN && a->softcap <= FA_SOFTCAP_MAX)))
        return cli_usage_error(cmd, "--softcap: %g is not 0 (off) or in [%g, %g]",
                               (double)a->softcap, (double)FA_SOFTCAP_MIN,
                               (double)FA_SOFTCAP_MAX);
    if (!(a->dropout >= 0.0f && a->dropout < 1.0f))
        return cli_usage_error(cmd, "--dropout: %g is not a probability in [0, 1)",
                               (double)a->dropout);
    if ((a->seed_given || a->offset_given) && !a->dropout_given)
        return cli_usage_error(cmd, "--%s goes with --dropout P",
                               a->seed_given ? "dropout-seed" : "dropout-offset");
    if (a->alibi && a->alibi_path)
        return cli_usage_error(cmd, "--alibi and --alibi-slopes: give one (--alibi generates "
                               "the slopes, --alibi-slopes reads them)");
    return a->window ? parse_window(cmd, a) : 0;
}

int cli_mod_any(const cli_mod_args *a)
{
    return a->softcap > 0.0f || a->alibi || a->alibi_path || a->bias || a->window || a->sinks ||
           a->dropout > 0.0f;
}

static int is_random(const char *v)
{
    return v && strcmp(v, "random") == 0;
}

static int load_one(const char *path, npy_array *out)
{
    if (!path || is_random(path))
        return 0;
    return cli_npy_read(path, out);
}

int cli_mod_load(const cli_mod_args *a, cli_mod_files *f)
{
    if (load_one(a->alibi_path, &f->slopes) || load_one(a->bias, &f->bias) ||
        load_one(a->sinks, &f->sinks))
        return CLI_EXIT_FAIL;
    return 0;
}

/* "[2, 4, 33]" of an array's shape into buf. */
static void shape_text(const npy_array *x, char *buf, size_t size)
{
    size_t used = 0;
    int r;
    used += (size_t)snprintf(buf, size, "[");
    for (r = 0; r < x->rank && used < size; r++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, r ? ", " : "",
                                 x->shape[r]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

/* A [heads_q] vector file (--sinks). */
static int check_vector(const cli_cmd *cmd, const char *opt, const char *path,
                        const npy_array *x, int64_t heads)
{
    char s[128];
    if (x->rank == 1 && x->shape[0] == heads)
        return 0;
    shape_text(x, s, sizeof s);
    return cli_usage_error(cmd, "--%s: %s has shape %s, not [%" PRId64 "] (f32 [heads])", opt,
                           path, s, heads);
}

/* The --alibi-slopes file: f32 [heads_q] (alibi 1), or [batch, heads_q] (alibi 2: a slope per
 * sequence and head, flash-attn's (batch, nheads)). */
static int check_slopes(const cli_cmd *cmd, const char *path, const npy_array *x,
                        const fa_problem *p)
{
    char s[128];
    if ((x->rank == 1 && x->shape[0] == p->heads_q) ||
        (x->rank == 2 && x->shape[0] == p->batch && x->shape[1] == p->heads_q))
        return 0;
    shape_text(x, s, sizeof s);
    return cli_usage_error(cmd, "--alibi-slopes: %s has shape %s, not [%" PRId64 "] or [%" PRId64
                           ", %" PRId64 "] (f32 [heads] or [batch, heads])", path, s, p->heads_q,
                           p->batch, p->heads_q);
}

/* The bias file's shape: [B or 1, Hq or 1, Sq or 1, Sk]. */
static int check_bias(const cli_cmd *cmd, const char *path, const npy_array *x,
                      const fa_problem *p)
{
    const int64_t want[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    char s[128];
    int r, ok = x->rank == 4 && x->shape[3] == want[3];
    for (r = 0; r < 3 && ok; r++)
        ok = x->shape[r] == want[r] || x->shape[r] == 1;
    if (ok)
        return 0;
    shape_text(x, s, sizeof s);
    return cli_usage_error(cmd, "--bias: %s has shape %s, not [%" PRId64 ", %" PRId64 ", %" PRId64
                           ", %" PRId64 "] (any of the first three may be 1)", path, s, want[0],
                           want[1], want[2], want[3]);
}

/* The bias layout of a C-order [b, h, sq, sk] tensor, a size-1 dimension broadcast. */
static void bias_layout(const int64_t shape[4], fa_tensor_layout *l)
{
    l->offset = 0;
    l->stride_seq = shape[2] == 1 ? 0 : shape[3];
    l->stride_head = shape[1] == 1 ? 0 : shape[2] * shape[3];
    l->stride_batch = shape[0] == 1 ? 0 : shape[1] * shape[2] * shape[3];
}

/* The bias tensor's shape: the file's, or [1, 1, Sq, Sk] for a random one. */
static void bias_shape(const cli_mod_files *f, const fa_problem *p, int64_t shape[4])
{
    int r;
    if (f->bias.rank == 4) {
        for (r = 0; r < 4; r++)
            shape[r] = f->bias.shape[r];
        return;
    }
    shape[0] = 1;
    shape[1] = 1;
    shape[2] = p->seqlen_q;
    shape[3] = p->seqlen_k;
}

int cli_mod_apply(const cli_cmd *cmd, const cli_mod_args *a, const cli_mod_files *f,
                  fa_problem *p)
{
    int64_t shape[4];
    if ((a->alibi_path && check_slopes(cmd, a->alibi_path, &f->slopes, p)) ||
        (a->sinks && !is_random(a->sinks) &&
         check_vector(cmd, "sinks", a->sinks, &f->sinks, p->heads_q)) ||
        (a->bias && !is_random(a->bias) && check_bias(cmd, a->bias, &f->bias, p)))
        return CLI_EXIT_USAGE;
    p->softcap = a->softcap;
    p->alibi = a->alibi_path && f->slopes.rank == 2 ? 2 : a->alibi || a->alibi_path;
    p->bias = a->bias != NULL;
    if (p->bias) {
        bias_shape(f, p, shape);
        bias_layout(shape, &p->bias_layout);
        p->bias_dtype = f->bias.rank == 4 && f->bias.dtype == NPY_F16 && p->dtype == FA_DTYPE_F16
                            ? FA_DTYPE_F16
                            : FA_DTYPE_F32;
    }
    p->window = a->window != NULL;
    p->window_left = p->window ? a->window_left : 0;
    p->window_right = p->window ? a->window_right : 0;
    p->sinks = a->sinks != NULL;
    p->dropout_p = a->dropout;
    p->dropout_seed = a->dropout_seed;
    p->dropout_offset = (uint32_t)a->dropout_offset;
    return 0;
}

/* n floats, uniform in [-1, 1) from the stream seed ^ stream; NULL when out of memory. */
static float *random_floats(size_t n, uint64_t seed, uint64_t stream)
{
    float *x = malloc(n ? n * sizeof *x : 1);
    uint64_t state = seed ^ stream;
    size_t i;
    for (i = 0; x && i < n; i++)
        x[i] = cli_rand_uniform(&state);
    return x;
}

int cli_mod_fill(const cli_mod_args *a, const cli_mod_files *f, const fa_problem *p,
                 uint64_t seed, cli_mod_data *d)
{
    size_t heads = (size_t)p->heads_q, i;
    memset(d, 0, sizeof *d);
    if (p->alibi && f->slopes.rank >= 1) { /* a file's [heads] or [batch, heads] */
        d->slopes = f->slopes.data;
    } else if (p->alibi) {
        d->slopes = malloc(heads * sizeof *d->slopes);
        d->own_slopes = 1;
        for (i = 0; d->slopes && i < heads; i++)
            d->slopes[i] = (float)exp2(-8.0 * (double)(i + 1) / (double)heads);
    }
    if (p->sinks) {
        d->own_sinks = f->sinks.rank != 1;
        d->sinks = d->own_sinks ? random_floats(heads, seed, CLI_MOD_SINKS_STREAM) : f->sinks.data;
    }
    if (p->bias) {
        bias_shape(f, p, d->bias_shape);
        d->bias_count = (size_t)(d->bias_shape[0] * d->bias_shape[1] * d->bias_shape[2] *
                                 d->bias_shape[3]);
        d->own_bias = !(a->bias && !is_random(a->bias));
        d->bias = d->own_bias ? random_floats(d->bias_count, seed, CLI_MOD_BIAS_STREAM)
                              : f->bias.data;
    }
    if ((p->alibi && !d->slopes) || (p->sinks && !d->sinks) ||
        (p->bias && !d->bias && d->bias_count > 0))
        return cli_error("out of host memory for the score modifiers' tensors");
    return 0;
}

uint64_t cli_mod_bytes(const fa_problem *p)
{
    uint64_t n = 0;
    n = cli_add_sat(n, p->alibi ? cli_tensor_bytes(p, FA_TENSOR_ALIBI_SLOPES) : 0);
    n = cli_add_sat(n, p->sinks ? cli_tensor_bytes(p, FA_TENSOR_SINKS) : 0);
    n = cli_add_sat(n, p->sinks ? cli_tensor_bytes(p, FA_TENSOR_D_SINKS) : 0); /* the gradient */
    return cli_add_sat(n, p->bias ? cli_tensor_bytes(p, FA_TENSOR_BIAS) : 0);
}

/* Appends to buf after a ", " when something is there already. */
static void add(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);

static void add(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    if (used + 2 >= size)
        return;
    if (used) {
        strcpy(buf + used, ", ");
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

void cli_mod_describe(const fa_problem *p, char *buf, size_t size)
{
    if (size == 0)
        return;
    buf[0] = '\0';
    if (p->softcap > 0.0f)
        add(buf, size, "softcap %g", (double)p->softcap);
    if (p->alibi)
        add(buf, size, p->alibi == 2 ? "alibi [batch, heads]" : "alibi");
    if (p->bias)
        add(buf, size, "bias %s", fa_dtype_name(p->bias_dtype));
    if (p->window)
        add(buf, size, "window (%" PRId64 ", %" PRId64 ")", p->window_left, p->window_right);
    if (p->sinks)
        add(buf, size, "sinks");
    if (p->dropout_p > 0.0f)
        add(buf, size, "dropout %g (seed %" PRIu64 ", offset %" PRIu32 ")", (double)p->dropout_p,
            p->dropout_seed, p->dropout_offset);
    if (!buf[0])
        snprintf(buf, size, "none");
}

void cli_mod_data_free(cli_mod_data *d)
{
    if (d->own_slopes)
        free(d->slopes);
    if (d->own_bias)
        free(d->bias);
    if (d->own_sinks)
        free(d->sinks);
    memset(d, 0, sizeof *d);
}

void cli_mod_files_free(cli_mod_files *f)
{
    npy_free(&f->slopes);
    npy_free(&f->bias);
    npy_free(&f->sinks);
}
