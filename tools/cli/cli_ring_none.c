/*
 * cli_ring_none.c - `flashattn ring` in a build without MPI: flashattn_ring was not built
 * (CMake found no MPI), so the command explains that and fails.
 */
#include "cli_commands.h"
#include "cli_common.h"

#include <stdio.h>

int cli_cmd_ring(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("ring: this build has no MPI (flashattn_ring is built when CMake finds "
                     "MPI: install libopenmpi-dev and reconfigure)");
}
