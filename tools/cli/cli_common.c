/*
 * cli_common.c - option parsing, error reporting, shared problem options, clock and random
 * numbers for the `flashattn` program (see cli_common.h).
 *
 * Numbers are parsed by hand instead of with atoi/strtol alone so that "abc", "12x", "-5" for a
 * size, and values past 64 bits are all rejected with a message rather than silently becoming 0,
 * a huge unsigned value, or LLONG_MAX.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, access */
#endif

#include "cli_common.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(_WIN32)
#include <io.h>
#define cli_access(path) _access(path, 0)
#else
#include <unistd.h>
#define cli_access(path) access(path, F_OK)
#endif

/* Width of the option column in --help. */
#define CLI_HELP_COLUMN 28

/* ---- errors ------------------------------------------------------------------------------ */

int cli_usage_error(const cli_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "flashattn %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try 'flashattn %s --help')\n", cmd->name);
    return CLI_EXIT_USAGE;
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("flashattn: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_EXIT_FAIL;
}

const char *cli_status_detail(fa_status status, const char *msg)
{
    const char *name = fa_status_name(status);
    size_t len = strlen(name);
    if (!msg || !*msg)
        return fa_status_message(status);
    if (strncmp(msg, name, len) == 0 && msg[len] == ':' && msg[len + 1] == ' ' && msg[len + 2])
        return msg + len + 2;
    return msg;
}

int cli_lib_error(fa_status status, const fa_context *ctx, const char *why)
{
    const char *msg = why;
    if (!msg || !*msg)
        msg = ctx ? fa_context_last_error(ctx) : NULL;
    fprintf(stderr, "flashattn: %s: %s\n", fa_status_name(status), cli_status_detail(status, msg));
    return CLI_EXIT_FAIL;
}

/* One override as requested: the option's value, else the environment variable's when it is a
 * plain number (anything else the library's message already quotes as given). */
static void tile_request_one(int32_t value, const char *tile, const char *option,
                             const char *env, char *buf, size_t size)
{
    const char *s = getenv(env);
    size_t used = strlen(buf);
    const char *sep = used ? ", " : "requested ";
    if (value > 0)
        snprintf(buf + used, size - used, "%s%s = %d (--%s)", sep, tile, (int)value, option);
    else if (s && *s && strlen(s) <= 10 && strspn(s, "0123456789") == strlen(s))
        snprintf(buf + used, size - used, "%s%s = %s (%s)", sep, tile, s, env);
}

void cli_tile_request(const fa_problem *p, char *buf, size_t size)
{
    if (size == 0)
        return;
    buf[0] = '\0';
    tile_request_one(p->block_r, "Br", "block-r", "FLASHATTN_BLOCK_R", buf, size);
    tile_request_one(p->block_c, "Bc", "block-c", "FLASHATTN_BLOCK_C", buf, size);
}

int cli_plan_error(fa_status status, const fa_context *ctx, const fa_problem *p)
{
    char req[160] = "";
    if (status == FA_STATUS_INVALID_TILE)
        cli_tile_request(p, req, sizeof req);
    if (!*req)
        return cli_lib_error(status, ctx, NULL);
    fprintf(stderr, "flashattn: %s: %s; %s\n", fa_status_name(status),
            cli_status_detail(status, ctx ? fa_context_last_error(ctx) : NULL), req);
    return CLI_EXIT_FAIL;
}

/* ---- numbers ----------------------------------------------------------------------------- */

/* Decimal digits only: 0 on success, -1 when not a number, -2 when past UINT64_MAX. */
static int parse_digits(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s; s++) {
        unsigned d;
        if (*s < '0' || *s > '9')
            return -1;
        d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -2;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* An optionally signed decimal: 0, -1 (not an integer) or -2 (out of int64 range). */
static int parse_i64(const char *s, int64_t *out)
{
    int neg = *s == '-';
    uint64_t v;
    int r;
    if (*s == '-' || *s == '+')
        s++;
    r = parse_digits(s, &v);
    if (r != 0)
        return r;
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int set_int(const cli_cmd *cmd, cli_opt *o, const char *val)
{
    int64_t v = 0;
    int r = parse_i64(val, &v);
    if (r == -1)
        return cli_usage_error(cmd, "--%s: '%s' is not an integer", o->name, val);
    if (r == -2 || v < o->min || v > o->max)
        return cli_usage_error(cmd, "--%s: %s is out of range (%" PRId64 "..%" PRId64 ")", o->name,
                               val, o->min, o->max);
    *(int64_t *)o->dest = v;
    return 0;
}

static int set_u64(const cli_cmd *cmd, cli_opt *o, const char *val)
{
    uint64_t v = 0;
    int r = parse_digits(val, &v);
    if (r == -1)
        return cli_usage_error(cmd, "--%s: '%s' is not a non-negative integer", o->name, val);
    if (r == -2)
        return cli_usage_error(cmd, "--%s: %s is out of range (0..%" PRIu64 ")", o->name, val,
                               UINT64_MAX);
    *(uint64_t *)o->dest = v;
    return 0;
}

static int set_float(const cli_cmd *cmd, cli_opt *o, const char *val)
{
    char *end = NULL;
    double d;
    if (*val == '\0' || *val == ' ' || *val == '\t')
        return cli_usage_error(cmd, "--%s: '%s' is not a number", o->name, val);
    errno = 0;
    d = strtod(val, &end);
    if (end == val || *end != '\0')
        return cli_usage_error(cmd, "--%s: '%s' is not a number", o->name, val);
    if ((errno == ERANGE && fabs(d) > 1.0) || (isfinite(d) && fabs(d) > FLT_MAX))
        return cli_usage_error(cmd, "--%s: %s is out of range for a float", o->name, val);
    *(float *)o->dest = (float)d;
    return 0;
}

/* ---- option table ------------------------------------------------------------------------ */

static int set_named(const cli_cmd *cmd, cli_opt *o, const char *val)
{
    switch (o->kind) {
    case CLI_BACKEND:
        if (fa_backend_from_name(val, (fa_backend *)o->dest) != FA_STATUS_OK)
            return cli_usage_error(cmd, "--%s: unknown backend '%s' (auto, cpu, opencl, cuda)",
                                   o->name, val);
        return 0;
    case CLI_DTYPE:
        if (fa_dtype_from_name(val, (fa_dtype *)o->dest) != FA_STATUS_OK)
            return cli_usage_error(cmd, "--%s: unknown dtype '%s' (f32, f16, bf16)", o->name, val);
        return 0;
    case CLI_MASK:
        if (fa_mask_from_name(val, (fa_mask *)o->dest) != FA_STATUS_OK)
            return cli_usage_error(cmd, "--%s: unknown mask '%s' (none, top-left, bottom-right)",
                                   o->name, val);
        return 0;
    default: /* CLI_LAYOUT */
        if (strcmp(val, "bhsd") == 0)
            *(fa_layout *)o->dest = FA_LAYOUT_BHSD;
        else if (strcmp(val, "bshd") == 0)
            *(fa_layout *)o->dest = FA_LAYOUT_BSHD;
        else
            return cli_usage_error(cmd, "--%s: unknown layout '%s' (bhsd, bshd)", o->name, val);
        return 0;
    }
}

static int set_value(const cli_cmd *cmd, cli_opt *o, const char *val)
{
    switch (o->kind) {
    case CLI_INT:
        return set_int(cmd, o, val);
    case CLI_U64:
        return set_u64(cmd, o, val);
    case CLI_FLOAT:
        return set_float(cmd, o, val);
    case CLI_STRING:
        if (*val == '\0')
            return cli_usage_error(cmd, "--%s: empty value", o->name);
        *(const char **)o->dest = val;
        return 0;
    case CLI_FLAG:
        *(int *)o->dest = 1;
        return 0;
    default:
        return set_named(cmd, o, val);
    }
}

const cli_opt *cli_find(const cli_opt *opts, size_t nopts, const char *name)
{
    size_t i;
    for (i = 0; i < nopts; i++)
        if (strcmp(opts[i].name, name) == 0)
            return &opts[i];
    return NULL;
}

/* The entry whose name is the first len characters of name. */
static cli_opt *find_n(cli_opt *opts, size_t nopts, const char *name, size_t len)
{
    size_t i;
    for (i = 0; i < nopts; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

/* The values a named kind takes, for "needs a value"; NULL for the other kinds. A mask option
 * is --causal ALIGN, so its alignments come first and "none" last. */
static const char *kind_values(cli_kind kind)
{
    switch (kind) {
    case CLI_BACKEND:
        return "auto, cpu, opencl or cuda";
    case CLI_DTYPE:
        return "f32, f16 or bf16";
    case CLI_MASK:
        return "top-left, bottom-right or none";
    case CLI_LAYOUT:
        return "bhsd or bshd";
    default:
        return NULL;
    }
}

/* Whether arg is "--name" or "--name=..." for an option of the table, or -h/--help. */
static int is_option(cli_opt *opts, size_t nopts, const char *arg)
{
    const char *eq;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
        return 1;
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    eq = strchr(arg + 2, '=');
    return find_n(opts, nopts, arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2)) != NULL;
}

int cli_parse(const cli_cmd *cmd, int argc, char **argv, cli_opt *opts, size_t nopts)
{
    int i;
    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *name, *eq, *val;
        cli_opt *o;
        size_t len;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
            return CLI_PARSE_HELP;
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            cli_usage_error(cmd, "unexpected argument '%s'", arg);
            return CLI_PARSE_ERROR;
        }
        name = arg + 2;
        eq = strchr(name, '=');
        len = eq ? (size_t)(eq - name) : strlen(name);
        o = find_n(opts, nopts, name, len);
        if (!o) {
            cli_usage_error(cmd, "unknown option '--%.*s'", (int)len, name);
            return CLI_PARSE_ERROR;
        }
        if (o->kind == CLI_FLAG && eq) {
            cli_usage_error(cmd, "--%s takes no value", o->name);
            return CLI_PARSE_ERROR;
        }
        val = eq ? eq + 1 : NULL;
        if (o->kind != CLI_FLAG && !val) {
            /* "--causal --check": the next option is not this one's value. */
            if (i + 1 >= argc || is_option(opts, nopts, argv[i + 1])) {
                const char *values = kind_values(o->kind);
                cli_usage_error(cmd, "--%s needs a value (%s%s%s)", o->name, o->metavar,
                                values ? ": " : "", values ? values : "");
                return CLI_PARSE_ERROR;
            }
            val = argv[++i];
        }
        if (set_value(cmd, o, val ? val : "") != 0)
            return CLI_PARSE_ERROR;
        o->seen = 1;
    }
    return CLI_PARSE_OK;
}

void cli_print_help(const cli_cmd *cmd, const cli_opt *opts, size_t nopts)
{
    size_t i;
    printf("usage: flashattn %s %s\n%s\n\noptions:\n", cmd->name, cmd->synopsis, cmd->summary);
    for (i = 0; i < nopts; i++) {
        const char *mv = opts[i].kind == CLI_FLAG ? "" : opts[i].metavar;
        int w = printf("  --%s%s%s", opts[i].name, *mv ? " " : "", mv);
        printf("%*s%s\n", w < CLI_HELP_COLUMN ? CLI_HELP_COLUMN - w : 1, "", opts[i].help);
    }
    printf("  -h, --help%*sshow this help and exit\n", CLI_HELP_COLUMN - 12, "");
}

/* ---- problem options --------------------------------------------------------------------- */

void cli_problem_defaults(cli_problem_args *a)
{
    memset(a, 0, sizeof *a);
    a->batch = 1;
    a->heads = 8;
    a->heads_kv = 8;
    a->seq = 256;
    a->seq_k = 256;
    a->dim = 64;
    a->dtype = FA_DTYPE_F32;
    a->mask = FA_MASK_NONE;
    a->layout = FA_LAYOUT_BHSD;
}

void cli_problem_opts(cli_problem_args *a, cli_opt *o)
{
    const cli_opt table[CLI_PROBLEM_NOPTS] = {
        {"batch", CLI_INT, &a->batch, 0, CLI_MAX_SIZE, "N", "batch size (default 1)", 0},
        {"heads", CLI_INT, &a->heads, 1, CLI_MAX_SIZE, "N", "query heads (default 8)", 0},
        {"heads-kv", CLI_INT, &a->heads_kv, 1, CLI_MAX_SIZE, "N",
         "key/value heads, divides --heads (default: --heads)", 0},
        {"seq", CLI_INT, &a->seq, 0, CLI_MAX_SIZE, "N", "query sequence length (default 256)", 0},
        {"seq-k", CLI_INT, &a->seq_k, 0, CLI_MAX_SIZE, "N",
         "key/value sequence length (default: --seq)", 0},
        {"dim", CLI_INT, &a->dim, 1, FA_MAX_HEAD_DIM, "D",
         "head dimension, 1.." CLI_STRINGIFY(FA_MAX_HEAD_DIM) " (default 64)", 0},
        {"dtype", CLI_DTYPE, &a->dtype, 0, 0, "T", "f32, f16 or bf16 (default f32)", 0},
        {"causal", CLI_MASK, &a->mask, 0, 0, "ALIGN",
         "causal mask: top-left or bottom-right (default none)", 0},
        {"layout", CLI_LAYOUT, &a->layout, 0, 0, "L", "memory layout: bhsd or bshd (default bhsd)",
         0},
        {"scale", CLI_FLOAT, &a->scale, 0, 0, "X", "softmax scale (default 1/sqrt(dim))", 0},
        {"block-r", CLI_INT, &a->block_r, 0, INT32_MAX, "R",
         "override the query rows per tile Br (default: planner)", 0},
        {"block-c", CLI_INT, &a->block_c, 0, INT32_MAX, "C",
         "override the keys per tile Bc (default: planner)", 0},
    };
    memcpy(o, table, sizeof table);
}

void cli_problem_resolve(cli_problem_args *a, const cli_opt *opts, size_t nopts)
{
    const cli_opt *hk = cli_find(opts, nopts, "heads-kv");
    const cli_opt *sk = cli_find(opts, nopts, "seq-k");
    if (!hk || !hk->seen)
        a->heads_kv = a->heads;
    if (!sk || !sk->seen)
        a->seq_k = a->seq;
}

/* Whether the product of n non-negative sizes, zeros counted as ones, fits in int64: a zero
 * batch does not stop heads * seq * dim from being formed. */
static int product_fits(const int64_t *v, int n)
{
    int64_t acc = 1;
    int i;
    for (i = 0; i < n; i++) {
        int64_t x = v[i] ? v[i] : 1;
        if (x < 0 || acc > INT64_MAX / x)
            return 0;
        acc *= x;
    }
    return 1;
}

int cli_problem_build(const cli_problem_args *a, fa_problem *p)
{
    const int64_t qsz[4] = {a->batch, a->heads, a->seq, a->dim};
    const int64_t kvsz[4] = {a->batch, a->heads_kv, a->seq_k, a->dim};
    fa_status st;
    /* fa_problem_init multiplies the sizes into strides before anything validates them. */
    if (!product_fits(qsz, 4) || !product_fits(kvsz, 4))
        return cli_error("problem too large: batch * heads * seq * dim overflows 64 bits");
    st = fa_problem_init(p, a->dtype, a->layout, a->batch, a->heads, a->heads_kv, a->seq,
                         a->seq_k, a->dim);
    if (st != FA_STATUS_OK)
        return cli_lib_error(st, NULL, NULL);
    p->mask = a->mask;
    p->scale = a->scale;
    p->block_r = (int32_t)a->block_r;
    p->block_c = (int32_t)a->block_c;
    return 0;
}

void cli_describe_problem(const fa_problem *p, fa_layout layout, char *buf, size_t size)
{
    const char *dt = fa_dtype_name(p->dtype), *mask = fa_mask_name(p->mask);
    snprintf(buf, size,
             "batch %" PRId64 ", heads %" PRId64 " (kv %" PRId64 "), seq %" PRId64 " x %" PRId64
             ", dim %" PRId64 ", %s, layout %s, mask %s, scale %.6g",
             p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
             dt ? dt : "?", cli_layout_name(layout), mask ? mask : "?", (double)p->scale);
}

const char *cli_layout_name(fa_layout layout)
{
    return layout == FA_LAYOUT_BSHD ? "bshd" : "bhsd";
}

/* ---- contexts and formatting ------------------------------------------------------------- */

int cli_context_open(fa_backend backend, int device, fa_context **out)
{
    char why[1024] = "";
    fa_context_options opts;
    fa_status st;
    opts.backend = backend;
    opts.device = device;
    st = fa_context_create(out, &opts, why, sizeof why);
    if (st != FA_STATUS_OK) {
        *out = NULL;
        return cli_lib_error(st, NULL, why);
    }
    return 0;
}

void cli_describe_context(const fa_context *ctx, int picked_automatically, char *buf, size_t size)
{
    fa_device_props props;
    memset(&props, 0, sizeof props);
    if (fa_context_device_props(ctx, &props) != FA_STATUS_OK)
        snprintf(props.name, sizeof props.name, "(unknown device)");
    props.name[sizeof props.name - 1] = '\0';
    snprintf(buf, size, "%s%s, device %d: %s", fa_backend_name(fa_context_backend(ctx)),
             picked_automatically ? " (picked by auto)" : "", fa_context_device(ctx), props.name);
}

/* Past this many characters a reason's head is cut at its first parenthesis too. */
#define CLI_REASON_CHARS 48

void cli_short_reason(const char *why, char *buf, size_t size)
{
    const char *colon = strstr(why, ": "), *paren = strstr(why, " (");
    size_t n = colon ? (size_t)(colon - why) : strlen(why);
    if (n > CLI_REASON_CHARS && paren && (size_t)(paren - why) < n)
        n = (size_t)(paren - why);
    snprintf(buf, size, "%.*s", (int)n, why);
}

/* One "; "-separated part of the AUTO note, shortened when it is "X skipped (STATUS: why)". */
static void short_note_part(const char *part, size_t len, char *buf, size_t size)
{
    char text[1024], reason[256];
    const char *mark, *inner;
    size_t n = (size_t)snprintf(text, sizeof text, "%.*s", (int)len, part);
    mark = strstr(text, " skipped (");
    inner = mark ? strstr(mark, ": ") : NULL;
    if (!inner || n >= sizeof text || text[n - 1] != ')') {
        snprintf(buf, size, "%s", text);
        return;
    }
    text[n - 1] = '\0'; /* the closing parenthesis */
    cli_short_reason(inner + 2, reason, sizeof reason);
    snprintf(buf, size, "%.*s: %s", (int)(mark - text), text, reason);
}

void cli_auto_note(const char *note, int verbose, char *buf, size_t size)
{
    const char *start = note, *p;
    int depth = 0;
    snprintf(buf, size, "%s", verbose ? note : "");
    if (verbose)
        return;
    /* Parts end at a "; " outside parentheses (a reason may hold "; " of its own). */
    for (p = note;; p++) {
        depth += *p == '(' ? 1 : *p == ')' && depth > 0 ? -1 : 0;
        if (*p == '\0' || (depth == 0 && p[0] == ';' && p[1] == ' ')) {
            char part[1024];
            size_t n = strlen(buf);
            short_note_part(start, (size_t)(p - start), part, sizeof part);
            snprintf(buf + n, size - n, "%s%s", n ? "; " : "", part);
            if (*p == '\0')
                return;
            start = p + 2;
            p++;
        }
    }
}

void cli_format_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = -1;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    if (u < 0)
        snprintf(buf, size, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, size, "%" PRIu64 " B (%.1f %s)", bytes, v, units[u]);
}

/* ---- output paths ------------------------------------------------------------------------ */

int cli_check_writable(const char *path, const char *what)
{
    /* Appending creates a missing file and leaves an existing one's bytes alone. */
    int existed = cli_access(path) == 0;
    FILE *f = fopen(path, "ab");
    if (!f)
        return cli_error("%s: cannot create %s: %s", path, what, strerror(errno));
    fclose(f);
    if (!existed)
        remove(path);
    return 0;
}

/* ---- clock and random numbers ------------------------------------------------------------ */

double cli_now_ms(void)
{
    struct timespec ts;
#if defined(CLOCK_MONOTONIC)
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

double cli_cpu_ms(void)
{
#if defined(CLOCK_PROCESS_CPUTIME_ID)
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
#else
    return (double)clock() * 1e3 / CLOCKS_PER_SEC;
#endif
}

uint64_t cli_rand_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float cli_rand_uniform(uint64_t *state)
{
    /* The top 24 bits give k / 2^24 in [0, 1), exactly representable; map to [-1, 1). */
    uint64_t k = cli_rand_next(state) >> 40;
    return (float)k * (2.0f / 16777216.0f) - 1.0f;
}
