/*
 * cli_modifiers.h - the score modifier and dropout options that `run`, `bench` and `plan`
 * share (--softcap, --alibi, --alibi-slopes, --bias, --window, --sinks, --dropout,
 * --dropout-seed, --dropout-offset): one option table, one check of their values, one place
 * that turns them into a problem's fields (fa_problem's softcap ... dropout_offset) and one
 * that makes the host tensors they read (ALiBi slopes, bias, sinks), from files or generated.
 *
 * The steps, in order: cli_mod_opts (the table) and cli_parse; cli_mod_validate (values:
 * usage errors); cli_mod_load (the files, once); cli_mod_apply for each problem (shapes against
 * the problem: usage errors; then the problem's fields); cli_mod_fill (the tensors of that
 * problem; the big allocation, after the caller has checked the memory).
 */
#ifndef FLASHATTN_TOOLS_CLI_MODIFIERS_H
#define FLASHATTN_TOOLS_CLI_MODIFIERS_H

#include "cli_common.h"
#include "npy.h"

#include <stddef.h>
#include <stdint.h>

/* What the options write. */
typedef struct cli_mod_args {
    float softcap;           /* --softcap C: 0 off */
    int alibi;               /* --alibi: the paper's slopes */
    const char *alibi_path;  /* --alibi-slopes FILE */
    const char *bias;        /* --bias FILE or "random" */
    const char *window;      /* --window L,R as given */
    const char *sinks;       /* --sinks FILE or "random" */
    float dropout;           /* --dropout P */
    uint64_t dropout_seed;   /* --dropout-seed S */
    int64_t dropout_offset;  /* --dropout-offset N, 0..UINT32_MAX */
    int64_t window_left, window_right; /* parsed by cli_mod_validate */
    int dropout_given, seed_given, offset_given;
} cli_mod_args;

/* The files, read once (cli_mod_load). */
typedef struct cli_mod_files {
    npy_array slopes, bias, sinks; /* count 0 and data NULL when not given */
} cli_mod_files;

/* The host tensors of one problem (cli_mod_fill): from the files or generated. */
typedef struct cli_mod_data {
    float *slopes;            /* f32 [heads_q], or [batch, heads_q] when problem.alibi is 2 */
    float *bias;              /* bias_shape, C order, when problem.bias */
    int64_t bias_shape[4];    /* [B or 1, Hq or 1, Sq or 1, Sk] */
    size_t bias_count;
    float *sinks;             /* f32 [heads_q], when problem.sinks */
    int own_slopes, own_bias, own_sinks; /* allocated here (not a file's data) */
} cli_mod_data;

/* Number of entries cli_mod_opts writes. */
#define CLI_MOD_NOPTS 9

/* Every modifier off, dropout seed and offset 0. */
void cli_mod_defaults(cli_mod_args *a);
/* Writes CLI_MOD_NOPTS option entries pointing into `a` to opts[0..]. */
void cli_mod_opts(cli_mod_args *a, cli_opt *opts);
/*
 * After cli_parse: records which options were seen (opts, nopts: the whole table) and checks
 * the values (softcap finite >= 0, dropout in [0, 1), window "L,R" with L, R >= -1, --alibi
 * and --alibi-slopes not both, --dropout-seed/--dropout-offset only with --dropout). Prints a
 * usage error naming the option and returns CLI_EXIT_USAGE, else 0.
 */
int cli_mod_validate(const cli_cmd *cmd, cli_mod_args *a, const cli_opt *opts, size_t nopts);
/* Whether any modifier or dropout is asked for. */
int cli_mod_any(const cli_mod_args *a);
/* Reads the files given (a file that cannot be read: "flashattn: FILE: why", CLI_EXIT_FAIL). */
int cli_mod_load(const cli_mod_args *a, cli_mod_files *f);
/*
 * Checks the files' shapes against the problem p (shape already set) and sets p's modifier
 * fields: bias in f32 (or f16 for a '<f2' file on an f16 run) with the stride of each size-1
 * dimension 0. A wrong shape is a usage error naming the option (CLI_EXIT_USAGE).
 */
int cli_mod_apply(const cli_cmd *cmd, const cli_mod_args *a, const cli_mod_files *f,
                  fa_problem *p);
/*
 * The tensors p's modifiers read: the files' values, or generated: ALiBi slopes
 * 2^(-8 (h + 1) / heads_q); a random bias [1, 1, Sq, Sk] and random sinks [heads_q], uniform in
 * [-1, 1) from streams derived from `seed` (the inputs' stream is left as it is).
 * Prints and returns CLI_EXIT_FAIL when out of memory.
 */
int cli_mod_fill(const cli_mod_args *a, const cli_mod_files *f, const fa_problem *p,
                 uint64_t seed, cli_mod_data *d);
/* Device (and host image) bytes of the modifier tensors of p (cli_tensor_bytes of the slopes,
 * the sinks and their gradient, the bias), saturating. */
uint64_t cli_mod_bytes(const fa_problem *p);
/* "softcap 30, alibi, bias f32 [1, 8, 256, 256], window (128, 0), sinks, dropout 0.1 (seed 0,
 * offset 0)", or "none". */
void cli_mod_describe(const fa_problem *p, char *buf, size_t size);
/* Frees what cli_mod_fill allocated; safe on a zeroed struct. */
void cli_mod_data_free(cli_mod_data *d);
/* Frees the files; safe on a zeroed struct. */
void cli_mod_files_free(cli_mod_files *f);

#endif /* FLASHATTN_TOOLS_CLI_MODIFIERS_H */
