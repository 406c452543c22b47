/*
 * cli_plan_svg.c - the tiles of a plan as `flashattn plan` reports them and draws them
 * (`plan --svg FILE`; see cli_plan_svg.h). Which keys a row sees is the library's own rule,
 * src/kernel_params.h's fa_keys_begin / fa_keys_end (mask and window), the one the kernels
 * compile; the block mask's is the dense mask the lists were made from.
 */
#include "cli_plan_svg.h"

#include "cli_common.h"
#include "kernel_params.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The picture: the matrix fits SVG_SIDE pixels; at most SVG_CELLS cells a side (tiles are
 * aggregated into cells beyond that). */
#define SVG_SIDE 640.0
#define SVG_CELLS 64
#define SVG_LEFT 90.0
#define SVG_TOP 40.0

static const char *const kind_class[TILE_KINDS] = {"skipped", "computed", "part-mask",
                                                   "part-block", "part-both"};
static const char *const kind_text[TILE_KINDS] = {
    "skipped", "computed", "partly masked (causal/window)", "partly masked (block edge)",
    "partly masked (causal/window and block edge)"};
static const char *const kind_fill[TILE_KINDS] = {"#eeeeee", "#2b6cb0", "#90cdf4", "#f6ad55",
                                                  "#b794f4"};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Keys of [c0, c1) that row r computes under the block mask, given its mask/window range
 * [lo, hi) already cut to [c0, c1). */
static int64_t block_keys(const fa_problem *p, const cli_bm_data *bm, int64_t r, int64_t lo,
                          int64_t hi)
{
    int64_t n = 0, qb = r / p->sparse_block_q, bk = p->sparse_block_k;
    for (int64_t k = lo; k < hi;) {
        int64_t kb = k / bk, end = min64(hi, (kb + 1) * bk);
        if (cli_bm_block_on(bm, 0, 0, qb, kb))
            n += end - k;
        k = end;
    }
    return n;
}

/* One tile's class: rows [r0, r1), keys [c0, c1). */
static int tile_kind(const fa_problem *p, const fa_kernel_params *kp, int32_t features,
                     const cli_bm_data *bm, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    int64_t all = 0, in_mask = 0, done = 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t lo = max64(c0, fa_keys_begin(kp, features, r));
        int64_t hi = min64(c1, fa_keys_end(kp, (int32_t)p->mask, features, r));
        all += c1 - c0;
        if (hi <= lo)
            continue;
        in_mask += hi - lo;
        done += p->block_sparse ? block_keys(p, bm, r, lo, hi) : hi - lo;
    }
    if (done == 0)
        return TILE_SKIPPED;
    if (done == all)
        return TILE_COMPUTED;
    if (in_mask == all)
        return TILE_PART_BLOCK;
    return done == in_mask ? TILE_PART_MASK : TILE_PART_BOTH;
}

int cli_tile_map_make(const fa_plan *plan, const cli_bm_data *bm, cli_tile_map *m)
{
    const fa_problem *p = fa_plan_problem(plan);
    fa_kernel_params kp;
    int32_t features = p->window ? (int32_t)FA_FEATURE_WINDOW : 0;
    memset(m, 0, sizeof *m);
    memset(&kp, 0, sizeof kp);
    kp.seqlen_q = p->seqlen_q;
    kp.seqlen_k = p->seqlen_k;
    kp.window_left = p->window_left;
    kp.window_right = p->window_right;
    m->br = fa_plan_block_r(plan) > 0 ? fa_plan_block_r(plan) : 1;
    m->bc = fa_plan_block_c(plan) > 0 ? fa_plan_block_c(plan) : 1;
    m->rows = (p->seqlen_q + m->br - 1) / m->br;
    m->cols = (p->seqlen_k + m->bc - 1) / m->bc;
    m->kind = malloc(m->rows * m->cols > 0 ? (size_t)(m->rows * m->cols) : 1);
    if (!m->kind)
        return cli_error("out of host memory for the plan's %" PRId64 " x %" PRId64 " tiles",
                         m->rows, m->cols);
    for (int64_t i = 0; i < m->rows; i++) {
        int64_t r0 = i * m->br, r1 = min64(p->seqlen_q, r0 + m->br);
        for (int64_t j = 0; j < m->cols; j++) {
            int64_t c0 = j * m->bc, c1 = min64(p->seqlen_k, c0 + m->bc);
            int k = tile_kind(p, &kp, features, bm, r0, r1, c0, c1);
            m->kind[i * m->cols + j] = (uint8_t)k;
            m->count[k]++;
            m->keys_read += k == TILE_SKIPPED ? 0 : (uint64_t)(c1 - c0);
        }
    }
    return 0;
}

void cli_tile_map_free(cli_tile_map *m)
{
    free(m->kind);
    memset(m, 0, sizeof *m);
}

/* Per (batch, head): the flash loop reads Q once, K and V once for each query tile that does
 * not skip them, writes O and the f32 LSE; naive attention reads Q, K and V, writes O, and
 * writes then reads back S and P (f32 Sq x Sk each). */
void cli_plan_bytes(const fa_plan *plan, const cli_tile_map *m, uint64_t *flash,
                    uint64_t *naive)
{
    const fa_problem *p = fa_plan_problem(plan);
    uint64_t e = fa_dtype_size(p->dtype), d = (uint64_t)p->head_dim;
    uint64_t sq = (uint64_t)p->seqlen_q, sk = (uint64_t)p->seqlen_k;
    uint64_t heads = (uint64_t)p->batch * (uint64_t)p->heads_q;
    *flash = heads * (e * d * (2 * sq + 2 * m->keys_read) + 4 * sq);
    *naive = heads * (e * d * (2 * sq + 2 * sk) + 4 * 4 * sq * sk);
}

/* How the plan's tiles sit on the mask blocks, one direction ("Br", "block_q"); per_rows: the
 * tile's rows skip per register block of 4 (the register-blocked forward), not as a union. */
static void tile_vs_block(char *buf, size_t size, const char *tile, int32_t t, const char *blk,
                          int32_t b, bool per_rows)
{
    if (t == b)
        snprintf(buf, size, "%s %d = %s %d: one tile per block", tile, t, blk, b);
    else if (t < b && b % t == 0)
        snprintf(buf, size, "%s %d: %d tiles per %s %d, none straddles a block", tile, t, b / t,
                 blk, b);
    else if (t > b && t % b == 0 && per_rows)
        snprintf(buf, size, "%s %d: a tile holds %d blocks of %s %d, each register block of 4 "
                 "rows skips the key tiles its own block does not list", tile, t, t / b, blk, b);
    else if (t > b && t % b == 0)
        snprintf(buf, size, "%s %d: a tile spans %d blocks of %s %d (the union of their lists)",
                 tile, t, t / b, blk, b);
    else
        snprintf(buf, size, "%s %d: tiles straddle blocks of %s %d", tile, t, blk, b);
}

/* The block mask's lines: density, what it saves, how tiles and blocks relate. */
static void print_sparse(const fa_plan *plan, const cli_bm_args *a, const cli_bm_data *bm)
{
    const fa_problem *p = fa_plan_problem(plan);
    char line[512], r[160], c[160], kv[64], flops[64];
    uint64_t skipped = bm->all - bm->computed, e = fa_dtype_size(p->dtype);
    /* Each skipped block of a list row spares its keys' K and V for block_q query rows. */
    uint64_t reps = (uint64_t)(p->batch * p->heads_q) / (uint64_t)(bm->shape.batch *
                                                                   bm->shape.heads);
    uint64_t kv_bytes = reps * skipped * (uint64_t)p->sparse_block_k * (uint64_t)p->head_dim *
                        2 * e;
    double fl = 4.0 * (double)reps * (double)skipped * p->sparse_block_q * p->sparse_block_k *
                (double)p->head_dim;
    cli_bm_describe(a, bm, line, sizeof line);
    printf("%-13s %s\n", "block mask", line);
    cli_format_bytes(kv_bytes, kv, sizeof kv);
    snprintf(flops, sizeof flops, "%.4g", fl);
    printf("%-13s %" PRIu64 " of %" PRIu64 " blocks skipped: K and V reads %s, %s FLOPs (at "
           "most: edge blocks are shorter, and the causal mask or window may skip some too)\n",
           "mask saves", skipped, bm->all, kv, flops);
    bool reg_blocked = strstr(fa_plan_explain(plan), "(REG_BLOCKED)") != NULL;
    tile_vs_block(r, sizeof r, "Br", fa_plan_block_r(plan), "block_q", p->sparse_block_q,
                  reg_blocked);
    tile_vs_block(c, sizeof c, "Bc", fa_plan_block_c(plan), "block_k", p->sparse_block_k, false);
    printf("%-13s %s; %s\n", "tiles/blocks", r, c);
}

void cli_plan_tiles_print(const fa_plan *plan, const cli_bm_args *a, const cli_bm_data *bm,
                          const cli_tile_map *m)
{
    uint64_t flash, naive;
    char fb[64], nb[64];
    if (bm && bm->dense)
        print_sparse(plan, a, bm);
    printf("%-13s %" PRIu64 " (batch 0, head 0): computed %" PRIu64 ", partly masked %" PRIu64
           " (causal/window %" PRIu64 ", block edge %" PRIu64 ", both %" PRIu64 "), skipped %"
           PRIu64 "\n", "tiles", (uint64_t)(m->rows * m->cols), m->count[TILE_COMPUTED],
           m->count[TILE_PART_MASK] + m->count[TILE_PART_BLOCK] + m->count[TILE_PART_BOTH],
           m->count[TILE_PART_MASK], m->count[TILE_PART_BLOCK], m->count[TILE_PART_BOTH],
           m->count[TILE_SKIPPED]);
    cli_plan_bytes(plan, m, &flash, &naive);
    cli_format_bytes(flash, fb, sizeof fb);
    cli_format_bytes(naive, nb, sizeof nb);
    printf("%-13s flash %s, naive %s (%.3gx)\n", "memory bytes", fb, nb,
           flash ? (double)naive / (double)flash : 0.0);
}

/* ---- the picture --------------------------------------------------------------------------- */

/* A cell of tiles [i0, i1) x [j0, j1): its tiles' class when they share one, else -1 (a mixed
 * cell) with *busy the share of its tiles not skipped. */
static int cell_kind(const cli_tile_map *m, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                     double *busy)
{
    int first = m->kind[i0 * m->cols + j0], same = 1;
    int64_t n = 0, on = 0;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++, n++) {
            int k = m->kind[i * m->cols + j];
            same &= k == first;
            on += k != TILE_SKIPPED;
        }
    *busy = n ? (double)on / (double)n : 0.0;
    return same ? first : -1;
}

static void svg_head(FILE *f, const fa_plan *plan, double w, double h)
{
    const fa_problem *p = fa_plan_problem(plan);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            w, h, w, h);
    fprintf(f, "<title>flashattn plan: Sq %" PRId64 " x Sk %" PRId64 ", Br %d, Bc %d</title>\n",
            p->seqlen_q, p->seqlen_k, fa_plan_block_r(plan), fa_plan_block_c(plan));
    fprintf(f, "<style>");
    for (int k = 0; k < TILE_KINDS; k++)
        fprintf(f, ".%s{fill:%s}", kind_class[k], kind_fill[k]);
    fprintf(f, ".mixed{fill:#2b6cb0}.tile{stroke:#ffffff;stroke-width:0.5}"
               ".block{fill:none;stroke:#c53030;"
               "stroke-width:0.6;stroke-dasharray:3,2}</style>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">Score matrix of batch 0, head 0: "
               "Sq %" PRId64 " rows x Sk %" PRId64 " keys in Br %d x Bc %d tiles</text>\n",
            SVG_LEFT, p->seqlen_q, p->seqlen_k, fa_plan_block_r(plan), fa_plan_block_c(plan));
}

/* The tiles (or cells of tiles) and the work-group labels of their query tiles. */
static void svg_tiles(FILE *f, const fa_plan *plan, const cli_tile_map *m, double scale,
                      int64_t gr, int64_t gc)
{
    const fa_problem *p = fa_plan_problem(plan);
    int64_t label_every = 1;
    while (scale * (double)m->br * (double)(gr * label_every) < 12.0)
        label_every *= 2;
    for (int64_t i0 = 0; i0 < m->rows; i0 += gr) {
        int64_t i1 = min64(m->rows, i0 + gr), r0 = i0 * m->br;
        int64_t r1 = min64(p->seqlen_q, i1 * m->br);
        double y = SVG_TOP + scale * (double)r0, hh = scale * (double)(r1 - r0);
        if ((i0 / gr) % label_every == 0 && gr == 1)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">wg %" PRId64
                       "</text>\n", SVG_LEFT - 4, y + hh / 2 + 4, i0);
        else if ((i0 / gr) % label_every == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">wg %" PRId64 "-%" PRId64
                       "</text>\n", SVG_LEFT - 4, y + hh / 2 + 4, i0, i1 - 1);
        for (int64_t j0 = 0; j0 < m->cols; j0 += gc) {
            int64_t j1 = min64(m->cols, j0 + gc), c0 = j0 * m->bc;
            int64_t c1 = min64(p->seqlen_k, j1 * m->bc);
            double busy;
            int k = cell_kind(m, i0, i1, j0, j1, &busy);
            char shade[48] = "";
            if (k < 0)
                snprintf(shade, sizeof shade, " fill-opacity=\"%.2f\"", 0.15 + 0.85 * busy);
            fprintf(f, "<rect class=\"tile %s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                       "height=\"%.2f\"%s><title>rows %" PRId64 "-%" PRId64 ", keys %" PRId64
                       "-%" PRId64 ": %s</title></rect>\n", k < 0 ? "mixed" : kind_class[k],
                    SVG_LEFT + scale * (double)c0, y, scale * (double)(c1 - c0), hh, shade, r0,
                    r1 - 1, c0, c1 - 1, k < 0 ? "tiles of several classes" : kind_text[k]);
        }
    }
}

/* The block mask's block edges, dashed, where they are at least 3 pixels apart. */
static void svg_blocks(FILE *f, const fa_problem *p, double scale)
{
    if (!p->block_sparse || scale * p->sparse_block_q < 3.0 || scale * p->sparse_block_k < 3.0)
        return;
    for (int64_t r = p->sparse_block_q; r < p->seqlen_q; r += p->sparse_block_q)
        fprintf(f, "<line class=\"block\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n",
                SVG_LEFT, SVG_TOP + scale * (double)r, SVG_LEFT + scale * (double)p->seqlen_k,
                SVG_TOP + scale * (double)r);
    for (int64_t c = p->sparse_block_k; c < p->seqlen_k; c += p->sparse_block_k)
        fprintf(f, "<line class=\"block\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n",
                SVG_LEFT + scale * (double)c, SVG_TOP, SVG_LEFT + scale * (double)c,
                SVG_TOP + scale * (double)p->seqlen_q);
}

/* The legend: one swatch per class with its tile count, then the notes. */
static void svg_legend(FILE *f, const fa_plan *plan, const cli_tile_map *m, double y,
                       int64_t gr, int64_t gc)
{
    const fa_problem *p = fa_plan_problem(plan);
    uint64_t flash, naive;
    char fb[64], nb[64];
    for (int k = 0; k < TILE_KINDS; k++, y += 18) {
        fprintf(f, "<rect class=\"%s\" x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\"/>\n",
                kind_class[k], SVG_LEFT, y - 10);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"count\" data-kind=\"%s\" "
                   "data-tiles=\"%" PRIu64 "\">%s: %" PRIu64 " tiles</text>\n", SVG_LEFT + 18, y,
                kind_class[k], m->count[k], kind_text[k], m->count[k]);
    }
    cli_plan_bytes(plan, m, &flash, &naive);
    cli_format_bytes(flash, fb, sizeof fb);
    cli_format_bytes(naive, nb, sizeof nb);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">memory to chip and back, all heads: flash %s, "
               "naive %s (S and P written and read, f32)</text>\n", SVG_LEFT, y, fb, nb);
    y += 18;
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">wg N: the work-group (grid x index; y: head, z: "
               "batch) that owns the query tile%s%s</text>\n", SVG_LEFT, y,
            fa_plan_kv_splits(plan) > 1 ? "; its keys split among several" : "",
            p->block_sparse ? "; dashed red: the block mask's blocks" : "");
    y += 18;
    if (gr > 1 || gc > 1)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"aggregate\">each cell is %" PRId64
                   " x %" PRId64 " tiles (too many to draw): a cell is computed or skipped when "
                   "all its tiles are, else partly masked; counts are per tile</text>\n",
                SVG_LEFT, y, gr, gc);
}

int cli_plan_svg_write(const char *path, const fa_plan *plan, const cli_bm_data *bm,
                       const cli_tile_map *m)
{
    const fa_problem *p = fa_plan_problem(plan);
    int64_t big = max64(max64(p->seqlen_q, p->seqlen_k), 1);
    double scale = SVG_SIDE / (double)big;
    int64_t gr = (m->rows + SVG_CELLS - 1) / SVG_CELLS, gc = (m->cols + SVG_CELLS - 1) / SVG_CELLS;
    double bottom = SVG_TOP + scale * (double)p->seqlen_q + 30;
    FILE *f = fopen(path, "w");
    (void)bm;
    if (!f)
        return cli_error("%s: cannot create the SVG file", path);
    gr = gr > 0 ? gr : 1;
    gc = gc > 0 ? gc : 1;
    svg_head(f, plan, SVG_LEFT + SVG_SIDE + 200, bottom + 18 * (TILE_KINDS + 3) + 10);
    svg_tiles(f, plan, m, scale, gr, gc);
    svg_blocks(f, p, scale);
    svg_legend(f, plan, m, bottom, gr, gc);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0)
        return cli_error("%s: cannot write the SVG file", path);
    return 0;
}
