/*
 * cli_commands.h - the subcommands of the `flashattn` program. Each takes the subcommand's own
 * argv (argv[0] is its name) and returns the process exit status.
 */
#ifndef FLASHATTN_TOOLS_CLI_COMMANDS_H
#define FLASHATTN_TOOLS_CLI_COMMANDS_H

/* `flashattn devices`: every backend, its devices and their properties (cli_info.c). */
int cli_cmd_devices(int argc, char **argv);
/* `flashattn plan`: the tile plan for a problem on a device (of the forward, or with
 * --backward of the backward, with its memory formula), and why (cli_info.c). */
int cli_cmd_plan(int argc, char **argv);
/* `flashattn run`: time a forward pass (and with --backward its backward), optionally check it
 * against the CPU golden (cli_run.c and the files below it, cli_run.h). */
int cli_cmd_run(int argc, char **argv);
/* `flashattn bench`: with --decode the decode sweep (cli_bench_decode.c), else the sweep of
 * cli_bench.c (cli_cmd_bench), whose --help then names --decode. */
int cli_cmd_bench_any(int argc, char **argv);
/* `flashattn bench --block-sparse`: block-sparse against dense (cli_bench_sparse.c). */
int cli_bench_sparse(int argc, char **argv);
/* `flashattn bench` without --decode: flash vs naive attention over a sweep (cli_bench.c). */
int cli_cmd_bench(int argc, char **argv);
/* `flashattn ring`: ring attention across MPI ranks (cli_ring.c; cli_ring_none.c in a build
 * without MPI, which says so). */
int cli_cmd_ring(int argc, char **argv);

#endif /* FLASHATTN_TOOLS_CLI_COMMANDS_H */
