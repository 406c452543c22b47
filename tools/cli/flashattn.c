/*
 * flashattn.c - main() of the `flashattn` command-line program: dispatches to the subcommands
 * (devices, plan, run, bench) and prints the top-level help and version.
 *
 * Exit status: 0 success, 1 a library, data or check failure, 2 a bad command line.
 */
#include "cli_commands.h"
#include "cli_common.h"

#include <stdio.h>
#include <string.h>

typedef struct cli_subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} cli_subcommand;

static const cli_subcommand cli_subcommands[] = {
    {"devices", cli_cmd_devices, "list backends, devices and their properties"},
    {"plan", cli_cmd_plan, "show the tile plan (forward or --backward) and the planner's reasons"},
    {"run", cli_cmd_run, "run, time and optionally --check one forward pass (then --backward)"},
    {"bench", cli_cmd_bench_any,
     "sweep seq lengths: flash vs naive, time and memory (--pass); --decode: decoding"},
    {"ring", cli_cmd_ring, "ring attention across MPI ranks (mpirun -np P flashattn ring)"},
};

#define CLI_NSUB (sizeof cli_subcommands / sizeof cli_subcommands[0])

static void print_usage(FILE *f)
{
    size_t i;
    fprintf(f, "usage: flashattn <command> [options]\n"
               "FlashAttention (forward and backward) on CPU, OpenCL and CUDA through one C "
               "library.\n\n"
               "commands:\n");
    for (i = 0; i < CLI_NSUB; i++)
        fprintf(f, "  %-10s %s\n", cli_subcommands[i].name, cli_subcommands[i].summary);
    fprintf(f, "\n'flashattn <command> --help' describes a command's options.\n"
               "  -h, --help     show this help\n"
               "  --version      show the library version\n");
}

int main(int argc, char **argv)
{
    size_t i;
    if (argc < 2) {
        fprintf(stderr, "flashattn: missing command: devices, plan, run or bench "
                        "(try 'flashattn --help')\n");
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("flashattn %s\n", fa_version());
        return CLI_EXIT_OK;
    }
    for (i = 0; i < CLI_NSUB; i++)
        if (strcmp(argv[1], cli_subcommands[i].name) == 0)
            return cli_subcommands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "flashattn: unknown command '%s' (try 'flashattn --help')\n", argv[1]);
    return CLI_EXIT_USAGE;
}
