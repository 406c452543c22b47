/*
 * cli_bench_mods.c - the score modifiers and dropout in `flashattn bench` (see cli_bench.h):
 * the options are `run`'s (cli_modifiers.h) and apply to the flash path and its CPU golden
 * check. The naive baselines have no modifiers, so with any of them on their columns say n/a
 * (bench_naive_create and bench_gemm_create answer FA_STATUS_UNSUPPORTED) rather than compare
 * a plain attention with a modified one.
 */
#include "cli_bench.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A point's problem without its modifiers, as the sweep makes it (cli_bench.c). */
static int plain_problem(const bench_run *r, int64_t seq, fa_problem *p)
{
    if (fa_problem_init(p, r->dtypes[0], FA_LAYOUT_BHSD, r->a.batch, r->a.heads, r->a.heads, seq,
                        seq, r->dims[0]) != FA_STATUS_OK)
        return cli_error("cannot describe the problem at seq %" PRId64, seq);
    return 0;
}

int bench_mods_prepare(bench_run *r)
{
    static const cli_cmd cmd = {"bench", "[options]", ""};
    fa_problem p;
    size_t i;
    int rc;
    if (!cli_mod_any(&r->a.mods))
        return 0;
    if (cli_mod_load(&r->a.mods, &r->mod_files) != 0)
        return CLI_EXIT_FAIL;
    /* The shapes depend on batch, heads and seq only: one check per sequence length. */
    for (i = 0; i < r->nseqs; i++) {
        if (plain_problem(r, r->seqs[i], &p) != 0)
            return CLI_EXIT_FAIL;
        rc = cli_mod_apply(&cmd, &r->a.mods, &r->mod_files, &p);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int bench_mods_apply(const bench_run *r, fa_problem *p)
{
    static const cli_cmd cmd = {"bench", "[options]", ""};
    return cli_mod_apply(&cmd, &r->a.mods, &r->mod_files, p);
}

int bench_mods_fill(const bench_run *r, bench_io *io)
{
    return cli_mod_fill(&r->a.mods, &r->mod_files, &io->p, r->a.seed, &io->mods);
}

void bench_mods_header(const bench_run *r)
{
    char line[512];
    fa_problem p;
    if (!cli_mod_any(&r->a.mods) || plain_problem(r, r->seqs[0], &p) != 0 ||
        bench_mods_apply(r, &p) != 0)
        return;
    cli_mod_describe(&p, line, sizeof line);
    printf("# modifiers %s (flash path and golden; naive and gemm: n/a)\n", line);
}
