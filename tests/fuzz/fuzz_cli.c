/*
 * fuzz_cli.c - fuzz harness for the command-line program's option parser
 * (tools/cli/cli_common.c) and its `plan` subcommand (tools/cli/cli_info.c), which parses,
 * builds a problem and plans it without running a kernel. The input is an argument vector:
 * strings separated by NUL bytes, as the kernel hands them to main(); argv[0] is the
 * subcommand's name.
 *
 * Properties:
 *   - cli_parse, on a table with an option of every kind, returns OK, HELP or ERROR. After OK
 *     every option it did not see keeps its value, and every one it saw holds a value its kind
 *     allows: an INT within its range, a FLAG set, a non-empty STRING inside the arguments, a
 *     known backend, dtype, mask or layout. HELP comes only when -h or --help is an argument.
 *   - after OK, the shared problem options either build a problem or say why not, and the
 *     library's check of that problem answers OK with an empty last error or a status with a
 *     message; describing the problem never overruns its buffer.
 *   - after OK, the score modifier options (cli_modifiers.c) are accepted or refused as a usage
 *     error; accepted values are ones the library accepts too (softcap finite >= 0, dropout in
 *     [0, 1), window bounds >= -1).
 *   - `flashattn plan ARGS` returns 0, 1 or 2. It runs on the cpu backend only: inputs that
 *     name another backend skip it, so replaying the corpus never opens a device; nor do
 *     inputs that name a device or process file (dev/, proc/), which --bias or --sinks would
 *     read to the end (/dev/zero has none). Its --svg pictures go to one file in a directory
 *     of the harness's own, whatever path the input names.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, mkdtemp */
#endif

#include "fuzz.h"

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_modifiers.h"

#include <ctype.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Arguments past this many are dropped: the parser's loop is the same for each. */
#define FZ_MAX_ARGS 64
/* The buffer cli_describe_problem gets; shorter than its usual output, to test truncation. */
#define FZ_DESCRIBE_CAP 48
/* Bytes of every option's destination, before and after parsing. */
#define FZ_DEST_CAP 8

/* Everything the table's options write into. */
typedef struct fz_args {
    cli_problem_args pa;
    fa_backend backend;
    int64_t device, repeat;
    uint64_t seed;
    const char *name;
    int flag;
    cli_mod_args mods;
} fz_args;

#define FZ_NOPTS (CLI_PROBLEM_NOPTS + 6 + CLI_MOD_NOPTS)

static fa_context *fz_ctx;
/* Where `plan --svg` writes: a file in a directory of our own, whatever path the input names
 * (the inputs' paths once littered the working directory with hundreds of pictures). */
static char fz_svg[64], fz_svg_opt[80];

static size_t fz_table(fz_args *a, cli_opt *opts)
{
    const cli_opt more[FZ_NOPTS - CLI_PROBLEM_NOPTS - CLI_MOD_NOPTS] = {
        {"backend", CLI_BACKEND, &a->backend, 0, 0, "B", "backend", 0},
        {"device", CLI_INT, &a->device, 0, INT32_MAX, "N", "device index", 0},
        {"repeat", CLI_INT, &a->repeat, 1, 100000, "N", "a range not starting at 0", 0},
        {"seed", CLI_U64, &a->seed, 0, 0, "S", "any unsigned 64-bit value", 0},
        {"name", CLI_STRING, &a->name, 0, 0, "FILE", "a string", 0},
        {"flag", CLI_FLAG, &a->flag, 0, 0, NULL, "a flag", 0},
    };
    cli_problem_opts(&a->pa, opts);
    memcpy(opts + CLI_PROBLEM_NOPTS, more, sizeof more);
    cli_mod_opts(&a->mods, opts + FZ_NOPTS - CLI_MOD_NOPTS);
    return FZ_NOPTS;
}

static size_t dest_size(cli_kind kind)
{
    switch (kind) {
    case CLI_FLAG:
        return sizeof(int);
    case CLI_INT:
        return sizeof(int64_t);
    case CLI_U64:
        return sizeof(uint64_t);
    case CLI_FLOAT:
        return sizeof(float);
    case CLI_STRING:
        return sizeof(const char *);
    case CLI_BACKEND:
        return sizeof(fa_backend);
    case CLI_DTYPE:
        return sizeof(fa_dtype);
    case CLI_MASK:
        return sizeof(fa_mask);
    default:
        return sizeof(fa_layout);
    }
}

/* The value an option was given is one its kind allows. */
static void check_seen(const cli_opt *o, const char *args, size_t args_len)
{
    int64_t i64;
    int e;
    const char *s;
    switch (o->kind) {
    case CLI_INT:
        memcpy(&i64, o->dest, sizeof i64);
        FZ_CHECK(i64 >= o->min && i64 <= o->max, "--%s = %lld is outside [%lld, %lld]", o->name,
                 (long long)i64, (long long)o->min, (long long)o->max);
        return;
    case CLI_FLAG:
        FZ_CHECK(*(const int *)o->dest == 1, "--%s seen but not set", o->name);
        return;
    case CLI_STRING:
        s = *(const char *const *)o->dest;
        FZ_CHECK(s && *s && s >= args && s < args + args_len,
                 "--%s is not a non-empty part of the arguments", o->name);
        return;
    case CLI_BACKEND:
    case CLI_DTYPE:
    case CLI_MASK:
    case CLI_LAYOUT:
        memcpy(&e, o->dest, sizeof e);
        FZ_CHECK(e >= 0 && e <= (o->kind == CLI_BACKEND ? 3 : o->kind == CLI_LAYOUT ? 1 : 2),
                 "--%s holds %d, not a value of its enum", o->name, e);
        return;
    default: /* CLI_U64 and CLI_FLOAT: every value is one the option allows */
        return;
    }
}

static int has_arg(int argc, char **argv, const char *a, const char *b)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], a) == 0 || strcmp(argv[i], b) == 0)
            return 1;
    return 0;
}

/* A case-insensitive substring test, for the backend filter. */
static int mentions(const char *s, const char *word)
{
    size_t n = strlen(word);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && tolower((unsigned char)s[i]) == word[i])
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* The library's answer on a problem the CLI built: a status, and a message when not OK. */
static void check_problem(const cli_problem_args *pa)
{
    char text[FZ_DESCRIBE_CAP + 8];
    fa_problem p;
    if (cli_problem_build(pa, &p) != 0)
        return;
    fa_status st = fa_problem_check(fz_ctx, &p);
    const char *msg = fa_context_last_error(fz_ctx);
    FZ_CHECK(msg && (st == FA_STATUS_OK) == (*msg == '\0'),
             "fa_problem_check returned %s with last error \"%s\"", fa_status_name(st),
             msg ? msg : "(null)");
    memset(text, 0x5a, sizeof text);
    cli_describe_problem(&p, pa->layout, text, FZ_DESCRIBE_CAP);
    FZ_CHECK(memchr(text, '\0', FZ_DESCRIBE_CAP) != NULL && text[FZ_DESCRIBE_CAP] == 0x5a,
             "cli_describe_problem overran or did not terminate its buffer");
}

/* The modifier options' values: refused as a usage error, or ones the library accepts. */
static void check_modifiers(const cli_cmd *cmd, cli_mod_args *m, const cli_opt *opts, size_t n)
{
    int r = cli_mod_validate(cmd, m, opts, n);
    FZ_CHECK(r == 0 || r == CLI_EXIT_USAGE, "cli_mod_validate returned %d", r);
    if (r != 0)
        return;
    FZ_CHECK(m->softcap >= 0.0f && m->softcap <= FLT_MAX, "--softcap %g accepted",
             (double)m->softcap);
    FZ_CHECK(m->dropout >= 0.0f && m->dropout < 1.0f, "--dropout %g accepted", (double)m->dropout);
    FZ_CHECK(!m->window || (m->window_left >= -1 && m->window_right >= -1),
             "--window %s accepted as (%lld, %lld)", m->window, (long long)m->window_left,
             (long long)m->window_right);
}

static void parse_table(int argc, char **argv, const char *args, size_t args_len)
{
    static const cli_cmd cmd = {"fuzz", "[options]", "every kind of option"};
    cli_opt opts[FZ_NOPTS];
    unsigned char before[FZ_NOPTS][FZ_DEST_CAP];
    fz_args a;
    memset(&a, 0, sizeof a);
    cli_problem_defaults(&a.pa);
    cli_mod_defaults(&a.mods);
    a.repeat = 1;
    size_t n = fz_table(&a, opts);
    for (size_t i = 0; i < n; i++)
        memcpy(before[i], opts[i].dest, dest_size(opts[i].kind));
    int r = cli_parse(&cmd, argc, argv, opts, n);
    FZ_CHECK(r == CLI_PARSE_OK || r == CLI_PARSE_HELP || r == CLI_PARSE_ERROR,
             "cli_parse returned %d", r);
    FZ_CHECK(r != CLI_PARSE_HELP || has_arg(argc, argv, "-h", "--help"),
             "cli_parse returned HELP without -h or --help");
    if (r != CLI_PARSE_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        if (opts[i].seen)
            check_seen(&opts[i], args, args_len);
        else
            FZ_CHECK(memcmp(before[i], opts[i].dest, dest_size(opts[i].kind)) == 0,
                     "--%s was not given but changed", opts[i].name);
    }
    cli_problem_resolve(&a.pa, opts, n);
    check_problem(&a.pa);
    check_modifiers(&cmd, &a.mods, opts, n);
}

/* Removes the pictures' directory when the fuzzer exits. */
static void remove_svg_dir(void)
{
    char dir[sizeof fz_svg];
    remove(fz_svg);
    snprintf(dir, sizeof dir, "%s", fz_svg);
    *strrchr(dir, '/') = '\0';
    remove(dir);
}

static void setup(void)
{
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    char why[256] = "";
    /* `plan --backend auto` must land on the cpu; the tiles come from the arguments alone. */
    setenv("FLASHATTN_BACKEND", "cpu", 1);
    unsetenv("FLASHATTN_DEVICE");
    unsetenv("FLASHATTN_BLOCK_R");
    unsetenv("FLASHATTN_BLOCK_C");
    FZ_CHECK(freopen("/dev/null", "w", stdout) != NULL, "cannot silence stdout");
    char dir[] = "/tmp/flashattn_fuzz_cli_XXXXXX";
    FZ_CHECK(mkdtemp(dir) != NULL, "cannot make a directory for plan's pictures");
    snprintf(fz_svg, sizeof fz_svg, "%s/plan.svg", dir);
    snprintf(fz_svg_opt, sizeof fz_svg_opt, "--svg=%s", fz_svg);
    atexit(remove_svg_dir);
    fa_status st = fa_context_create(&fz_ctx, &opts, why, sizeof why);
    FZ_CHECK(st == FA_STATUS_OK, "cpu context: %s: %s", fa_status_name(st), why);
}

/* Points every --svg of argv at fz_svg. */
static void redirect_svg(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--svg") == 0 && i + 1 < argc)
            argv[++i] = fz_svg;
        else if (strncmp(argv[i], "--svg=", 6) == 0)
            argv[i] = fz_svg_opt;
    }
}

/* Splits the input at NUL bytes into argv[1..]; returns argc. args must hold size + 1 bytes. */
static int split_args(const uint8_t *data, size_t size, char *args, char **argv)
{
    int argc = 1;
    memcpy(args, data, size);
    args[size] = '\0';
    for (size_t i = 0; i < size && argc < FZ_MAX_ARGS; i += strlen(args + i) + 1)
        argv[argc++] = args + i;
    argv[argc] = NULL;
    return argc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char name[] = "plan";
    char *argv[FZ_MAX_ARGS + 1] = {name};
    char *args = malloc(size + 1);
    int skip_plan = 0;
    FZ_CHECK(args != NULL, "out of memory");
    if (!fz_ctx)
        setup();
    int argc = split_args(data, size, args, argv);
    parse_table(argc, argv, args, size + 1);
    for (int i = 1; i < argc; i++)
        skip_plan |= mentions(argv[i], "opencl") || mentions(argv[i], "cuda") ||
                     mentions(argv[i], "dev/") || mentions(argv[i], "proc/");
    if (!skip_plan) {
        redirect_svg(argc, argv);
        int r = cli_cmd_plan(argc, argv);
        FZ_CHECK(r == CLI_EXIT_OK || r == CLI_EXIT_FAIL || r == CLI_EXIT_USAGE,
                 "flashattn plan returned %d", r);
    }
    free(args);
    return 0;
}
