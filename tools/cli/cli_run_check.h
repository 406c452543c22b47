/*
 * cli_run_check.h - `flashattn run --check` (cli_run_check.c), called by cli_run.c; it calls
 * cli_run_bwd.c (the gradients' references and comparisons) and cli_run_common.c.
 */
#ifndef FLASHATTN_TOOLS_CLI_RUN_CHECK_H
#define FLASHATTN_TOOLS_CLI_RUN_CHECK_H

#include "cli_run.h"

/*
 * --check after the run: the reference outputs on the same inputs (the CPU golden's; on a cpu
 * run the naive attention's where it serves, else the golden's again, the "reference" line
 * saying which), then O, and with the backward dQ, dK, dV (and dsinks), compared with them.
 * Every comparison is printed before the first failure's reason ends the run: returns 0, or
 * CLI_EXIT_FAIL (printed).
 */
int run_check(const run_args *a, const cli_session *s, run_data *d);

#endif /* FLASHATTN_TOOLS_CLI_RUN_CHECK_H */
