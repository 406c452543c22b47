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

/*
 * Which keys a row attends to, [fa_keys_begin, fa_keys_end), only moves right as the row grows,
 * and consecutive rows' ranges leave no gap (each side moves a key a row, the window's width
 * stays), so the keys any run of rows attends to together are one range, from its first
 * non-empty row's begin to its last one's end: the run's hull. A key tile of a query tile
 * ("tile row") is skipped when it misses the tile row's hull, computed (without a block mask)
 * when it lies inside every row's range, else partly masked: `plan` costs one pass over the
 * rows, however many tiles a long sequence has.
 */
typedef struct tile_ctx {
    const fa_problem *p;
    const cli_bm_data *bm; /* the block mask, or NULL */
    fa_kernel_params kp;   /* what fa_keys_begin / fa_keys_end read */
    int32_t features;
    int64_t br, bc, cols;
} tile_ctx;

/* One tile row's key tiles: [touched_begin, touched_end) meet its hull, [full_begin, full_end)
 * lie inside every row's range; kinds (with a block mask) its row of the map. */
typedef struct tile_row {
    int64_t r0, r1;
    int64_t touched_begin, touched_end, full_begin, full_end;
    const uint8_t *kinds;
} tile_row;

static void tile_ctx_init(tile_ctx *c, const fa_plan *plan, const cli_bm_data *bm,
                          const cli_tile_map *m)
{
    const fa_problem *p = fa_plan_problem(plan);
    memset(c, 0, sizeof *c);
    c->p = p;
    c->bm = p->block_sparse ? bm : NULL;
    c->kp.seqlen_q = p->seqlen_q;
    c->kp.seqlen_k = p->seqlen_k;
    c->kp.window_left = p->window_left;
    c->kp.window_right = p->window_right;
    c->features = p->window ? (int32_t)FA_FEATURE_WINDOW : 0;
    c->br = m->br;
    c->bc = m->bc;
    c->cols = m->cols;
}

/* The keys rows [r0, r1) attend to together: [*lo, *hi), empty (lo == hi) when none. */
static void rows_hull(const tile_ctx *c, int64_t r0, int64_t r1, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = fa_keys_begin(&c->kp, c->features, r);
        int64_t e = fa_keys_end(&c->kp, (int32_t)c->p->mask, c->features, r);
        if (e <= b)
            continue;
        if (*hi <= *lo)
            *lo = b;
        *hi = e;
    }
}

static tile_row tile_row_of(const tile_ctx *c, int64_t i)
{
    tile_row t;
    int64_t lo, hi;
    memset(&t, 0, sizeof t);
    t.r0 = i * c->br;
    t.r1 = min64(c->p->seqlen_q, t.r0 + c->br);
    rows_hull(c, t.r0, t.r1, &lo, &hi);
    if (hi <= lo)
        return t;
    t.touched_begin = lo / c->bc;
    t.touched_end = (hi + c->bc - 1) / c->bc;
    /* The last row begins latest and the first ends first; when the last begins before the
     * first ends, every row between sees [last begin, first end). */
    int64_t b = fa_keys_begin(&c->kp, c->features, t.r1 - 1);
    int64_t e = fa_keys_end(&c->kp, (int32_t)c->p->mask, c->features, t.r0);
    if (b < e) {
        t.full_begin = (b + c->bc - 1) / c->bc;
        t.full_end = max64(t.full_begin, e >= c->p->seqlen_k ? c->cols : e / c->bc);
    }
    return t;
}

/* Whether any (want_all = 0) or all (1) of query block qb's mask blocks over keys [k0, k1) are
 * on. */
static int blocks_on(const tile_ctx *c, int64_t qb, int64_t k0, int64_t k1, int want_all)
{
    int64_t bk = c->p->sparse_block_k;
    for (int64_t kb = k0 / bk; kb * bk < k1; kb++)
        if (cli_bm_block_on(c->bm, 0, 0, qb, kb) != want_all)
            return !want_all;
    return want_all;
}

/* With a block mask, key tile j of tile row t: the rows of each mask block row attend to one
 * hull (hulls: [lo, hi) of each, in order, sparse_row_classify's); the tile is skipped when no
 * hull meets an on block, computed when it lies inside every row's range and all its blocks
 * are on. */
static int sparse_tile_kind(const tile_ctx *c, const tile_row *t, const int64_t *hulls,
                            int64_t j)
{
    int64_t c0 = j * c->bc, c1 = min64(c->p->seqlen_k, c0 + c->bc), bq = c->p->sparse_block_q;
    int any = 0, all_on = 1, mask_only = 1;
    for (int64_t a = t->r0, n = 0; a < t->r1; n++) {
        int64_t qb = a / bq, lo = max64(hulls[2 * n], c0), hi = min64(hulls[2 * n + 1], c1);
        if (lo < hi) {
            any |= blocks_on(c, qb, lo, hi, 0);
            mask_only &= blocks_on(c, qb, lo, hi, 1);
        }
        all_on &= blocks_on(c, qb, c0, c1, 1);
        a = min64(t->r1, (qb + 1) * bq);
    }
    if (!any)
        return TILE_SKIPPED;
    if (j >= t->full_begin && j < t->full_end)
        return all_on ? TILE_COMPUTED : TILE_PART_BLOCK;
    return mask_only ? TILE_PART_MASK : TILE_PART_BOTH;
}

/* Adds the classes of key tiles [j0, j1) of tile row t to count. */
static void tile_row_count(const tile_row *t, int64_t j0, int64_t j1, uint64_t *count)
{
    if (t->kinds) {
        for (int64_t j = j0; j < j1; j++)
            count[t->kinds[j]]++;
        return;
    }
    int64_t touched = max64(0, min64(j1, t->touched_end) - max64(j0, t->touched_begin));
    int64_t full = max64(0, min64(j1, t->full_end) - max64(j0, t->full_begin));
    count[TILE_SKIPPED] += (uint64_t)(j1 - j0 - touched);
    count[TILE_COMPUTED] += (uint64_t)full;
    count[TILE_PART_MASK] += (uint64_t)(touched - full);
}

/* Tile row i of the map (its classes from m->kind with a block mask). */
static tile_row tile_row_at(const tile_ctx *c, const cli_tile_map *m, int64_t i)
{
    tile_row t = tile_row_of(c, i);
    t.kinds = m->kind ? m->kind + i * m->cols : NULL;
    return t;
}

/* Keys of tile row t's tiles that are not skipped (the last key tile is short by last_short). */
static uint64_t tile_row_keys(const tile_row *t, const tile_ctx *c, uint64_t last_short)
{
    uint64_t n = 0;
    if (t->touched_end <= t->touched_begin)
        return 0;
    if (!t->kinds)
        return (uint64_t)((t->touched_end - t->touched_begin) * c->bc) -
               (t->touched_end == c->cols ? last_short : 0);
    for (int64_t j = t->touched_begin; j < t->touched_end; j++)
        if (t->kinds[j] != TILE_SKIPPED)
            n += (uint64_t)c->bc - (j == c->cols - 1 ? last_short : 0);
    return n;
}

/* With a block mask, classifies the key tiles of tile row t (row i of the map) into m->kind,
 * the hull of each of its mask block rows found once for all of them (hulls: room for
 * hulls_for's pairs). */
static void sparse_row_classify(const tile_ctx *c, cli_tile_map *m, int64_t i,
                                const tile_row *t, int64_t *hulls)
{
    int64_t bq = c->p->sparse_block_q, n = 0;
    for (int64_t a = t->r0; a < t->r1; a = min64(t->r1, (a / bq + 1) * bq), n++)
        rows_hull(c, a, min64(t->r1, (a / bq + 1) * bq), &hulls[2 * n], &hulls[2 * n + 1]);
    uint8_t *row = m->kind + i * m->cols;
    memset(row, TILE_SKIPPED, (size_t)m->cols);
    for (int64_t j = t->touched_begin; j < t->touched_end; j++)
        row[j] = (uint8_t)sparse_tile_kind(c, t, hulls, j);
}

/* The mask block rows a tile row of br rows can touch: hull pairs sparse_row_classify fills. */
static size_t hulls_for(int64_t br, int64_t bq)
{
    return (size_t)(br / bq + 2) * 2;
}

/* Beyond these, `plan` does not classify the tiles (it says so) rather than run for minutes:
 * the pass over the rows, and a block mask's walk of every tile's blocks. */
#define CLASSIFY_ROWS_MAX ((int64_t)1 << 24)
#define CLASSIFY_SPARSE_TILES_MAX ((int64_t)1 << 22)

int cli_tile_map_make(const fa_plan *plan, const cli_bm_data *bm, cli_tile_map *m)
{
    const fa_problem *p = fa_plan_problem(plan);
    tile_ctx c;
    memset(m, 0, sizeof *m);
    m->br = fa_plan_block_r(plan) > 0 ? fa_plan_block_r(plan) : 1;
    m->bc = fa_plan_block_c(plan) > 0 ? fa_plan_block_c(plan) : 1;
    m->rows = (p->seqlen_q + m->br - 1) / m->br;
    m->cols = (p->seqlen_k + m->bc - 1) / m->bc;
    if (p->seqlen_q > CLASSIFY_ROWS_MAX) {
        snprintf(m->unclassified, sizeof m->unclassified, "more than %" PRId64 " query rows",
                 CLASSIFY_ROWS_MAX);
        return 0;
    }
    if (p->block_sparse && m->rows * m->cols > CLASSIFY_SPARSE_TILES_MAX) {
        snprintf(m->unclassified, sizeof m->unclassified,
                 "a block mask over more than %" PRId64 " tiles", CLASSIFY_SPARSE_TILES_MAX);
        return 0;
    }
    size_t tiles = m->rows * m->cols > 0 ? (size_t)(m->rows * m->cols) : 1;
    int64_t *hulls = NULL;
    if (p->block_sparse && (!(m->kind = malloc(tiles)) ||
                            !(hulls = malloc(hulls_for(m->br, p->sparse_block_q) * 8)))) {
        free(m->kind);
        m->kind = NULL;
        return cli_error("out of host memory for the plan's %" PRId64 " x %" PRId64 " tiles",
                         m->rows, m->cols);
    }
    tile_ctx_init(&c, plan, bm, m);
    uint64_t last_short = (uint64_t)(m->cols * m->bc - p->seqlen_k);
    for (int64_t i = 0; i < m->rows; i++) {
        tile_row t = tile_row_at(&c, m, i);
        if (m->kind)
            sparse_row_classify(&c, m, i, &t, hulls);
        tile_row_count(&t, 0, m->cols, m->count);
        m->keys_read += tile_row_keys(&t, &c, last_short);
    }
    free(hulls);
    m->classified = 1;
    return 0;
}

void cli_tile_map_free(cli_tile_map *m)
{
    free(m->kind);
    memset(m, 0, sizeof *m);
}

/* a * b + c, or UINT64_MAX when it does not fit (a long sequence's naive bytes can exceed
 * 16 EiB). */
static uint64_t mul_add_sat(uint64_t a, uint64_t b, uint64_t c)
{
    if (a && b > (UINT64_MAX - c) / a)
        return UINT64_MAX;
    return a * b + c;
}

/* Per (batch, head): the flash loop reads Q once, K and V once for each query tile that does
 * not skip them, writes O and the f32 LSE; naive attention reads Q, K and V, writes O, and
 * writes then reads back S and P (f32 Sq x Sk each). UINT64_MAX: more than that. */
void cli_plan_bytes(const fa_plan *plan, const cli_tile_map *m, uint64_t *flash,
                    uint64_t *naive)
{
    const fa_problem *p = fa_plan_problem(plan);
    uint64_t ed = fa_dtype_size(p->dtype) * (uint64_t)p->head_dim;
    uint64_t sq = (uint64_t)p->seqlen_q, sk = (uint64_t)p->seqlen_k;
    uint64_t heads = (uint64_t)p->batch * (uint64_t)p->heads_q;
    uint64_t f = mul_add_sat(ed, mul_add_sat(2, sq + m->keys_read, 0), 0);
    uint64_t n = mul_add_sat(ed, 2 * (sq + sk), 0);
    f = mul_add_sat(heads, f == UINT64_MAX ? f : mul_add_sat(4, sq, f), 0);
    n = mul_add_sat(heads, n == UINT64_MAX ? n : mul_add_sat(16 * sq, sk, n), 0);
    *flash = f;
    *naive = n;
}

/* Bytes as cli_format_bytes writes them, or "over 16 EiB" where cli_plan_bytes saturated. */
static void format_plan_bytes(uint64_t bytes, char *buf, size_t size)
{
    if (bytes == UINT64_MAX)
        snprintf(buf, size, "over 16 EiB");
    else
        cli_format_bytes(bytes, buf, size);
}

/* How the plan's tiles sit on the mask blocks, one direction ("Br", "block_q"); per_rows: the
 * tile's rows skip per register block of 4 (the register-blocked passes), not as a union. */
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
                 "rows (or keys) skips the tiles its own block does not list", tile, t, t / b,
                 blk, b);
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
    bool reg_blocked = strstr(fa_plan_explain(plan), "(REG_BLOCKED") != NULL;
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
    if (!m->classified) {
        printf("%-13s %" PRIu64 " (batch 0, head 0): not classified (%s)\n", "tiles",
               (uint64_t)(m->rows * m->cols), m->unclassified);
        return;
    }
    printf("%-13s %" PRIu64 " (batch 0, head 0): computed %" PRIu64 ", partly masked %" PRIu64
           " (causal/window %" PRIu64 ", block edge %" PRIu64 ", both %" PRIu64 "), skipped %"
           PRIu64 "\n", "tiles", (uint64_t)(m->rows * m->cols), m->count[TILE_COMPUTED],
           m->count[TILE_PART_MASK] + m->count[TILE_PART_BLOCK] + m->count[TILE_PART_BOTH],
           m->count[TILE_PART_MASK], m->count[TILE_PART_BLOCK], m->count[TILE_PART_BOTH],
           m->count[TILE_SKIPPED]);
    cli_plan_bytes(plan, m, &flash, &naive);
    format_plan_bytes(flash, fb, sizeof fb);
    format_plan_bytes(naive, nb, sizeof nb);
    if (flash == UINT64_MAX || naive == UINT64_MAX)
        printf("%-13s flash %s, naive %s\n", "memory bytes", fb, nb);
    else
        printf("%-13s flash %s, naive %s (%.3gx)\n", "memory bytes", fb, nb,
               flash ? (double)naive / (double)flash : 0.0);
}

/* ---- the picture --------------------------------------------------------------------------- */

/* A cell of tiles of these class counts: its tiles' class when they share one, else -1 (a
 * mixed cell) with *busy the share of its tiles not skipped. */
static int cell_kind(const uint64_t *count, double *busy)
{
    uint64_t n = 0;
    int kind = -1;
    for (int k = 0; k < TILE_KINDS; k++) {
        n += count[k];
        if (count[k])
            kind = kind == -1 ? k : -2;
    }
    *busy = n ? 1.0 - (double)count[TILE_SKIPPED] / (double)n : 0.0;
    return kind < 0 ? -1 : kind;
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

/* Work-group labels, one every label_every cells of gr query tiles. */
static void svg_label(FILE *f, double y, double hh, int64_t i0, int64_t i1, int64_t gr)
{
    if (gr == 1)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">wg %" PRId64 "</text>\n",
                SVG_LEFT - 4, y + hh / 2 + 4, i0);
    else
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">wg %" PRId64 "-%" PRId64
                   "</text>\n", SVG_LEFT - 4, y + hh / 2 + 4, i0, i1 - 1);
}

/* The tiles (or cells of gr x gc tiles) and the work-group labels of their query tiles; each
 * row of cells counts its tiles' classes in one pass over its tile rows. */
static void svg_tiles(FILE *f, const tile_ctx *c, const cli_tile_map *m, double scale,
                      int64_t gr, int64_t gc)
{
    int64_t label_every = 1;
    uint64_t cells[SVG_CELLS][TILE_KINDS];
    while (scale * (double)m->br * (double)(gr * label_every) < 12.0)
        label_every *= 2;
    for (int64_t i0 = 0; i0 < m->rows; i0 += gr) {
        int64_t i1 = min64(m->rows, i0 + gr), r0 = i0 * m->br;
        int64_t r1 = min64(c->p->seqlen_q, i1 * m->br);
        double y = SVG_TOP + scale * (double)r0, hh = scale * (double)(r1 - r0);
        memset(cells, 0, sizeof cells);
        for (int64_t i = i0; i < i1; i++) {
            tile_row t = tile_row_at(c, m, i);
            for (int64_t j0 = 0, q = 0; j0 < m->cols; j0 += gc, q++)
                tile_row_count(&t, j0, min64(m->cols, j0 + gc), cells[q]);
        }
        if ((i0 / gr) % label_every == 0)
            svg_label(f, y, hh, i0, i1, gr);
        for (int64_t j0 = 0, q = 0; j0 < m->cols; j0 += gc, q++) {
            int64_t c0 = j0 * m->bc, c1 = min64(c->p->seqlen_k, (j0 + gc) * m->bc);
            double busy;
            int k = cell_kind(cells[q], &busy);
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
    format_plan_bytes(flash, fb, sizeof fb);
    format_plan_bytes(naive, nb, sizeof nb);
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
    tile_ctx c;
    if (!m->classified)
        return cli_error("%s: no picture: the tiles are not classified (%s)", path,
                         m->unclassified);
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_error("%s: cannot create the SVG file", path);
    gr = gr > 0 ? gr : 1;
    gc = gc > 0 ? gc : 1;
    svg_head(f, plan, SVG_LEFT + SVG_SIDE + 200, bottom + 18 * (TILE_KINDS + 3) + 10);
    tile_ctx_init(&c, plan, bm, m);
    svg_tiles(f, &c, m, scale, gr, gc);
    svg_blocks(f, p, scale);
    svg_legend(f, plan, m, bottom, gr, gc);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0)
        return cli_error("%s: cannot write the SVG file", path);
    return 0;
}
