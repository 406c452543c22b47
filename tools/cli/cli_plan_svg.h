/*
 * cli_plan_svg.h - what `flashattn plan` shows of a plan's tiles: the Sq x Sk score matrix of
 * batch 0, head 0 cut into the plan's Br x Bc tiles, each tile computed (every element),
 * partly masked (causal or window, or a block mask's edge, cut some of its elements) or
 * skipped (none of its elements is computed); the bytes moved between memory and the chip
 * against naive attention's; with a block mask its density and what it saves. As text
 * (cli_plan_tiles_print) and as an SVG picture (cli_plan_svg_write, `plan --svg FILE`).
 */
#ifndef FLASHATTN_TOOLS_CLI_PLAN_SVG_H
#define FLASHATTN_TOOLS_CLI_PLAN_SVG_H

#include "cli_block_mask.h"
#include "flashattn.h"

#include <stdint.h>

/* Tile classes, as the SVG's class attributes name them. */
enum { TILE_SKIPPED, TILE_COMPUTED, TILE_PART_MASK, TILE_PART_BLOCK, TILE_PART_BOTH, TILE_KINDS };

/* The tiles of one plan's head 0 of batch 0, classified (counted; one class per tile only with
 * a block mask: without one a query tile's classes follow from its rows' key ranges). */
typedef struct cli_tile_map {
    int64_t rows, cols;        /* query tiles ceil(Sq / Br), key tiles ceil(Sk / Bc) */
    int32_t br, bc;
    int classified;            /* 0: too many rows or tiles; unclassified says which */
    char unclassified[64];
    uint8_t *kind;             /* with a block mask: [rows, cols] of TILE_*; else NULL */
    uint64_t count[TILE_KINDS];
    uint64_t keys_read;        /* keys of the tiles not skipped, summed over the query tiles */
} cli_tile_map;

/* Classifies the plan's tiles (bm may be NULL when the problem has no block mask). 0, or
 * CLI_EXIT_FAIL (printed) when out of memory. */
int cli_tile_map_make(const fa_plan *plan, const cli_bm_data *bm, cli_tile_map *m);
void cli_tile_map_free(cli_tile_map *m);

/* Bytes one run of the plan moves between memory and the chip (the flash loop's, from the
 * tiles it reads), and a naive attention's (S and P written and read back, f32). */
void cli_plan_bytes(const fa_plan *plan, const cli_tile_map *m, uint64_t *flash,
                    uint64_t *naive);

/* The "tiles", "bytes" lines (and with a block mask "block mask", "mask saves", "tiles/blocks")
 * of `plan`. */
void cli_plan_tiles_print(const fa_plan *plan, const cli_bm_args *a, const cli_bm_data *bm,
                          const cli_tile_map *m);

/* Writes the plan's picture as SVG to path. 0, or CLI_EXIT_FAIL (printed). */
int cli_plan_svg_write(const char *path, const fa_plan *plan, const cli_bm_data *bm,
                       const cli_tile_map *m);

#endif /* FLASHATTN_TOOLS_CLI_PLAN_SVG_H */
