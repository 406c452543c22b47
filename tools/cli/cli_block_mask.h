/*
 * cli_block_mask.h - the block-sparse options that `run`, `plan` and `bench` share
 * (--block-mask FILE, --block-size BQ,BK, --block-pattern SPEC): one option table, one check of
 * their values, one place that reads the mask (or builds the pattern's), turns it into the
 * library's lists (fa_block_mask_lists, flashattn_block_mask.h) and sets the problem's
 * block-sparse fields, and one that uploads the lists to a context.
 *
 * The steps, in order (as cli_seq.h's): cli_bm_opts and cli_parse; cli_bm_validate (values:
 * usage errors); cli_bm_apply once the problem's shape is known (the mask file's shape against
 * it; the lists; the problem's fields); cli_bm_buffers per context; cli_bm_tensors per run.
 *
 * The mask file: uint8 ('|u1') or bool ('|b1') [B or 1, H or 1, ceil(seq / BQ),
 * ceil(seq_k / BK)], 0 skips a block, 1 computes it, 2 computes it as a full block (no causal
 * or window test inside; the library checks the promise). Other values are the library's
 * FA_STATUS_INVALID_BLOCK_MASK.
 */
#ifndef FLASHATTN_TOOLS_CLI_BLOCK_MASK_H
#define FLASHATTN_TOOLS_CLI_BLOCK_MASK_H

#include "cli_common.h"
#include "flashattn_block_mask.h"

#include <stddef.h>
#include <stdint.h>

/* What the options write (and what cli_bm_validate parses from them). */
typedef struct cli_bm_args {
    const char *mask_path; /* --block-mask FILE, or NULL */
    const char *size;      /* --block-size BQ,BK as given, or NULL */
    const char *pattern;   /* --block-pattern SPEC as given, or NULL */
    int32_t block_q, block_k;
    fa_block_pattern pat; /* the parsed pattern, when pattern */
} cli_bm_args;

/* The lists, in fa_block_lists' order: the forward's, then the transposed (backward) ones. */
enum {
    CLI_BM_KV_NUM, CLI_BM_KV_IDX, CLI_BM_FULL_KV_NUM, CLI_BM_FULL_KV_IDX,
    CLI_BM_Q_NUM, CLI_BM_Q_IDX, CLI_BM_FULL_Q_NUM, CLI_BM_FULL_Q_IDX, CLI_BM_LISTS
};

/* One problem's block mask on the host. */
typedef struct cli_bm_data {
    fa_block_mask_shape shape;
    uint8_t *dense;                /* [batch, heads, q_blocks, k_blocks] */
    int32_t *lists[CLI_BM_LISTS];  /* NULL where unused (the full pairs without full blocks) */
    size_t counts[CLI_BM_LISTS];   /* int32 entries of each */
    uint64_t computed, full, all;  /* blocks of the dense mask: non-zero, == 2, every one */
} cli_bm_data;

/* One context's buffers of the lists. */
typedef struct cli_bm_buffers {
    fa_buffer *b[CLI_BM_LISTS];
} cli_bm_buffers;

/* Number of entries cli_bm_opts writes. */
#define CLI_BM_NOPTS 3

/* Every option off. */
void cli_bm_defaults(cli_bm_args *a);
/* Writes CLI_BM_NOPTS option entries pointing into `a` to opts[0..]. */
void cli_bm_opts(cli_bm_args *a, cli_opt *opts);
/*
 * After cli_parse: --block-mask and --block-pattern exclude each other, each needs
 * --block-size (and it needs one of them); parses BQ,BK and the pattern. Prints a usage error
 * naming the option and returns CLI_EXIT_USAGE, else 0.
 */
int cli_bm_validate(const cli_cmd *cmd, cli_bm_args *a);
/* Whether a block mask was asked for. */
int cli_bm_on(const cli_bm_args *a);
/*
 * With a block mask asked for: reads the file (its dtype and shape against p's, errors naming
 * the file) or builds the pattern, makes the lists (the library's statuses and messages on a
 * bad block size or value), and sets p's block-sparse fields. Nothing without one. 0, or the
 * exit status (printed).
 */
int cli_bm_apply(const cli_bm_args *a, fa_problem *p, cli_bm_data *d);
/* Host bytes of the mask and the lists (saturating; 0 without a mask). */
uint64_t cli_bm_bytes(const cli_bm_data *d);
/* The lists on ctx (nothing when p is not block-sparse). 0, or CLI_EXIT_FAIL (printed). */
int cli_bm_buffers_create(fa_context *ctx, const fa_problem *p, const cli_bm_data *d,
                          cli_bm_buffers *b);
/* The lists a run of the op reads into t (the transposed ones only for the backward). */
void cli_bm_tensors(const cli_bm_buffers *b, const fa_problem *p, int backward, fa_tensors *t);
void cli_bm_buffers_free(cli_bm_buffers *b);
/*
 * "file M.npy [1, 1, 4, 4], blocks 64 x 64: 10 of 16 computed (density 0.625), 2 full", or
 * "none".
 */
void cli_bm_describe(const cli_bm_args *a, const cli_bm_data *d, char *buf, size_t size);
/* Whether key block kb is computed (non-zero) for query block qb of (batch b, head h). */
int cli_bm_block_on(const cli_bm_data *d, int64_t b, int64_t h, int64_t qb, int64_t kb);
void cli_bm_data_free(cli_bm_data *d);

#endif /* FLASHATTN_TOOLS_CLI_BLOCK_MASK_H */
