/*
 * cli_seq.h - the decoding options that `run` and `plan` share (--seqlens-k, --paged,
 * --kv-splits): one option table, one check of their values, one place that turns them into a
 * problem's fields (fa_problem's seqlens_k, page_size, num_pages, pages_per_seq, kv_splits)
 * and one that makes the host data they need: the int32 lengths, a shuffled block table and
 * the K and V page pools (fa_seq_buffers, "Sequences, pages and split-KV" in flashattn.h).
 *
 * The steps, in order (as cli_modifiers.h's): cli_seq_opts and cli_parse; cli_seq_validate
 * (values: usage errors); cli_seq_apply for the problem (lengths against batch and seq_k:
 * usage errors; then the problem's fields); cli_seq_fill (the tables and pools, after the
 * caller has checked the memory).
 *
 * Paging: the logical K and V ([batch, heads_kv, seq_k, dim], the same values a contiguous
 * run with the same seed has) are scattered into a pool [num_pages, page_size, heads_kv, dim]
 * of num_pages = sum_b ceil(len_b / page_size) + CLI_SEQ_SPARE_PAGES pages, taken in a random
 * order; the pool's other slots hold random values of their own, and block table entries past
 * a sequence's pages are -1 (the library never reads them).
 */
#ifndef FLASHATTN_TOOLS_CLI_SEQ_H
#define FLASHATTN_TOOLS_CLI_SEQ_H

#include "cli_common.h"
#include "cli_tensor.h"

#include <stddef.h>
#include <stdint.h>

/* Pool pages that no sequence uses, so that a page index that is off by some is read. */
#define CLI_SEQ_SPARE_PAGES 3
/* Most key chunks --kv-splits accepts (the library's limit). */
#define CLI_SEQ_MAX_SPLITS 65536

/* What the options write. */
typedef struct cli_seq_args {
    const char *seqlens_k; /* --seqlens-k LIST as given, or NULL */
    int64_t page_size;     /* --paged PAGE_SIZE; 0: not paged */
    int64_t kv_splits;     /* --kv-splits N; 0: the planner chooses, 1: never split */
    int64_t *lens;         /* --seqlens-k parsed by cli_seq_validate (nlens values) */
    size_t nlens;
    int paged_given;
} cli_seq_args;

/* The host data of one problem (cli_seq_fill). */
typedef struct cli_seq_data {
    int32_t *lens;             /* int32 [batch], when problem.seqlens_k */
    int32_t *table;            /* int32 [batch, pages_per_seq], when paged */
    cli_tensor k_pool, v_pool; /* paged: [num_pages, heads_kv, page_size, dim], logical order */
} cli_seq_data;

/* Number of entries cli_seq_opts writes. */
#define CLI_SEQ_NOPTS 3

/* Every option off. */
void cli_seq_defaults(cli_seq_args *a);
/* Writes CLI_SEQ_NOPTS option entries pointing into `a` to opts[0..]. */
void cli_seq_opts(cli_seq_args *a, cli_opt *opts);
/*
 * After cli_parse: checks the values (--paged >= 1, --seqlens-k a list of integers in
 * [0, 2^31 - 1]) and parses the list into a->lens. Prints a usage error naming the option and
 * returns CLI_EXIT_USAGE, else 0.
 */
int cli_seq_validate(const cli_cmd *cmd, cli_seq_args *a, const cli_opt *opts, size_t nopts);
/*
 * Checks the lengths against the problem p (shape already set: one length per sequence, each
 * at most seqlen_k; usage errors naming the option) and sets p's fields: seqlens_k (also with
 * --paged alone: every sequence then has seqlen_k keys), the pool (fa_problem_set_paged) and
 * kv_splits.
 */
int cli_seq_apply(const cli_cmd *cmd, const cli_seq_args *a, fa_problem *p);
/* Whether the problem reads fa_seq_buffers (seqlens_k or paged). */
int cli_seq_used(const fa_problem *p);
/* Host bytes cli_seq_fill allocates for p, and device bytes of its int32 buffers; saturating. */
uint64_t cli_seq_host_bytes(const fa_problem *p);
uint64_t cli_seq_device_bytes(const fa_problem *p);
/*
 * The data of p: the lengths, and when paged a block table over a shuffled pool (from streams
 * derived from `seed`; the inputs' stream is left as it is) and the pools holding k and v
 * (logical [batch, heads_kv, seqlen_k, dim], already rounded to p's dtype). Prints and returns
 * CLI_EXIT_FAIL when out of memory.
 */
int cli_seq_fill(const cli_seq_args *a, const fa_problem *p, uint64_t seed, const cli_tensor *k,
                 const cli_tensor *v, cli_seq_data *d);
/* The keys the problem attends to over its batch: sum of the lengths, or batch * seqlen_k. */
double cli_seq_keys(const fa_problem *p, const cli_seq_args *a);
/* "seqlens_k [5, 0, 17], paged: 3 keys a page, 12 pages (3 spare), 6 a sequence", or "none";
 * the kv splits are the plan's (fa_plan_kv_splits), asked is p->kv_splits. */
void cli_seq_describe(const fa_problem *p, const cli_seq_args *a, int32_t plan_splits,
                      char *buf, size_t size);
/* Frees what cli_seq_fill allocated; safe on a zeroed struct. */
void cli_seq_data_free(cli_seq_data *d);
/* Frees the parsed list; safe on a zeroed struct. */
void cli_seq_args_free(cli_seq_args *a);

/*
 * A comma-separated list of integers in [min, max] (`what` names one item for messages, e.g.
 * "a key count"): *out is allocated (free it), *n the count. Prints a usage error naming the
 * option and returns CLI_EXIT_USAGE on an empty item or a bad value.
 */
int cli_parse_int_list(const cli_cmd *cmd, const char *opt, const char *list, int64_t min,
                       int64_t max, const char *what, int64_t **out, size_t *n);

#endif /* FLASHATTN_TOOLS_CLI_SEQ_H */
