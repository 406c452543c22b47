/*
 * cli_common.h - pieces every subcommand of the `flashattn` program shares: a table-driven
 * option parser with strict number parsing, the error-reporting conventions, the problem options
 * common to `plan` and `run`, a clock and a deterministic random generator.
 *
 * Conventions: results go to stdout, errors to stderr as one line. Exit status 0 on success,
 * 1 when the library or the data fails (CLI_EXIT_FAIL), 2 for a bad command line (CLI_EXIT_USAGE).
 */
#ifndef FLASHATTN_TOOLS_CLI_COMMON_H
#define FLASHATTN_TOOLS_CLI_COMMON_H

#include "flashattn.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define CLI_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define CLI_PRINTF(fmt, args)
#endif

/* A macro's value as a string literal, for limits quoted in help text. */
#define CLI_STRINGIFY_(x) #x
#define CLI_STRINGIFY(x) CLI_STRINGIFY_(x)

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Largest size a shape option accepts; products are checked again before any allocation. */
#define CLI_MAX_SIZE INT32_MAX

/* What an option's value is parsed into (the type `dest` points to). */
typedef enum cli_kind {
    CLI_FLAG,    /* int: set to 1, takes no value */
    CLI_INT,     /* int64_t within [min, max] */
    CLI_U64,     /* uint64_t, any non-negative decimal */
    CLI_FLOAT,   /* float; "nan" and "inf" pass through for the library to judge */
    CLI_STRING,  /* const char *: the argument itself */
    CLI_BACKEND, /* fa_backend by name */
    CLI_DTYPE,   /* fa_dtype by name */
    CLI_MASK,    /* fa_mask by name: none, top-left, bottom-right */
    CLI_LAYOUT   /* fa_layout: bhsd or bshd */
} cli_kind;

typedef struct cli_opt {
    const char *name; /* long name without the leading "--" */
    cli_kind kind;
    void *dest;          /* where the parsed value goes */
    int64_t min, max;    /* CLI_INT only: the accepted range */
    const char *metavar; /* the value's name in --help; unused for flags */
    const char *help;    /* one line for --help */
    int seen;            /* set by cli_parse when the option was given */
} cli_opt;

/* A subcommand's identity for messages and --help. */
typedef struct cli_cmd {
    const char *name;     /* "run" */
    const char *synopsis; /* "[options]" */
    const char *summary;  /* one or more lines shown under the usage line */
} cli_cmd;

/* The outcome of cli_parse. */
enum { CLI_PARSE_OK = 0, CLI_PARSE_HELP = 1, CLI_PARSE_ERROR = -1 };

/*
 * Parses argv[1..argc-1] (argv[0] is the subcommand) against the table: "--name value" and
 * "--name=value"; -h/--help. On a bad argument prints one line to stderr and returns
 * CLI_PARSE_ERROR; on --help returns CLI_PARSE_HELP without printing.
 */
int cli_parse(const cli_cmd *cmd, int argc, char **argv, cli_opt *opts, size_t nopts);
/* Prints the subcommand's usage and option table to stdout. */
void cli_print_help(const cli_cmd *cmd, const cli_opt *opts, size_t nopts);
/* The table entry named `name`, or NULL. */
const cli_opt *cli_find(const cli_opt *opts, size_t nopts, const char *name);

/* "flashattn CMD: MESSAGE (try 'flashattn CMD --help')" on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_cmd *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* "flashattn: MESSAGE" on stderr; returns CLI_EXIT_FAIL. */
int cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/*
 * "flashattn: FA_STATUS_X: message" on stderr; returns CLI_EXIT_FAIL. The message is `why`
 * when not empty, else the context's last error when ctx is given and it is not empty, else the
 * status's generic message; the status name is printed once (see cli_status_detail).
 */
int cli_lib_error(fa_status status, const fa_context *ctx, const char *why);
/*
 * The library's message for `status` without a leading "FA_STATUS_X: " (the library's messages
 * may carry the name, and every caller prints the name itself); the status's generic message
 * when msg is NULL or empty.
 */
const char *cli_status_detail(fa_status status, const char *msg);

/*
 * cli_lib_error for a failed fa_plan_create. For FA_STATUS_INVALID_TILE it adds the overrides as
 * requested (--block-r / --block-c, else FLASHATTN_BLOCK_R / FLASHATTN_BLOCK_C), because the
 * library's message may name a tile already clamped to the sequence length.
 */
int cli_plan_error(fa_status status, const fa_context *ctx, const fa_problem *p);
/* "requested Br = 500 (--block-r)" and the like into buf; "" when no override was requested. */
void cli_tile_request(const fa_problem *p, char *buf, size_t size);

/* The problem description options that `plan` and `run` share. */
typedef struct cli_problem_args {
    int64_t batch, heads, heads_kv, seq, seq_k, dim;
    fa_dtype dtype;
    fa_mask mask;
    fa_layout layout;
    float scale;
    int64_t block_r, block_c;
} cli_problem_args;

/* Number of entries cli_problem_opts writes. */
#define CLI_PROBLEM_NOPTS 12

/* Sets the defaults (batch 1, heads 8, seq 256, dim 64, f32, no mask, BHSD, scale 0). */
void cli_problem_defaults(cli_problem_args *a);
/* Writes CLI_PROBLEM_NOPTS option entries pointing into `a` to opts[0..]. */
void cli_problem_opts(cli_problem_args *a, cli_opt *opts);
/* heads-kv and seq-k default to heads and seq when their options were not given. */
void cli_problem_resolve(cli_problem_args *a, const cli_opt *opts, size_t nopts);
/* Fills an fa_problem; prints and returns non-zero if fa_problem_init refuses. */
int cli_problem_build(const cli_problem_args *a, fa_problem *p);
/* "batch 1, heads 8 (kv 8), seq 256 x 256, dim 64, f32, layout bhsd, mask none, scale 0.125". */
void cli_describe_problem(const fa_problem *p, fa_layout layout, char *buf, size_t size);
/* "bhsd" or "bshd". */
const char *cli_layout_name(fa_layout layout);

/*
 * Creates a context on backend/device. Prints the library error and returns CLI_EXIT_FAIL on
 * failure, 0 on success.
 */
int cli_context_open(fa_backend backend, int device, fa_context **out);
/* "<backend> device <n>: <name>" plus "(auto)" when the backend was picked automatically. */
void cli_describe_context(const fa_context *ctx, int picked_automatically, char *buf, size_t size);
/*
 * The head of a backend's reason for a one-line report: up to its first ": " (the details that
 * follow, such as dlopen's message, are for --verbose) and, when that is still long, up to its
 * first " (". "libcuda.so.1 not found (no NVIDIA driver): dlopen says ..." gives
 * "libcuda.so.1 not found (no NVIDIA driver)".
 */
void cli_short_reason(const char *why, char *buf, size_t size);
/*
 * The AUTO note (fa_context_backend_note after its "auto: ") for a report: as it is with
 * verbose; otherwise each "X skipped (FA_STATUS_Y: reason)" becomes "X: " and the reason's
 * head (cli_short_reason), so that every run does not print a paragraph about a missing driver.
 */
void cli_auto_note(const char *note, int verbose, char *buf, size_t size);
/* A byte count as "12345 B (12.1 KiB)". */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size);

/*
 * Whether `path` can be written, checked before long work so that a bad output path fails at
 * once, not after the work. Leaves an existing file as it is and creates no file. Prints
 * "flashattn: PATH: cannot create WHAT: reason" and returns CLI_EXIT_FAIL when it cannot.
 */
int cli_check_writable(const char *path, const char *what);

/* A monotonic clock in milliseconds (arbitrary origin). */
double cli_now_ms(void);

/* This process's CPU time in milliseconds, every thread's (arbitrary origin): on a CPU device
 * the work done, which other jobs sharing the cores do not inflate. */
double cli_cpu_ms(void);

/* splitmix64: a tiny, well-mixed, seedable generator, identical on every platform. */
uint64_t cli_rand_next(uint64_t *state);
/* Uniform in [-1, 1) with 24 random bits (exact in float). */
float cli_rand_uniform(uint64_t *state);

#endif /* FLASHATTN_TOOLS_CLI_COMMON_H */
