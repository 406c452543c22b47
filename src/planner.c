/*
 * planner.c - chooses the tile sizes Br x Bc of the online-softmax loop from the device's
 * on-chip memory, as FlashAttention's Algorithm 1 does (Bc = ceil(M / 4d), Br = min(Bc, d)),
 * then fits them to the problem and the backend, recording each step so a user can see why.
 * A pure function of (device props, backend rules, problem): unit-tested with invented devices.
 */
#include "internal.h"

#include <string.h>

uint64_t fa__tile_bytes(const fa__onchip_formula *f, int64_t block_r, int64_t block_c,
                        int64_t head_dim, size_t elem)
{
    uint64_t r = (uint64_t)block_r, c = (uint64_t)block_c, d = (uint64_t)head_dim + f->row_pad;
    return (f->row_tiles * r * d + f->col_tiles * c * d) * elem + f->score_tiles * r * c * 4 +
           f->row_floats * r * 4;
}

static int64_t round_down(int64_t v, int64_t multiple)
{
    return v > multiple ? v / multiple * multiple : v;
}

typedef struct plan_state {
    int64_t br, bc;
    const fa__onchip_formula *f; /* the op's on-chip bytes, as the backend's kernel holds them */
    bool override_r, override_c;
    char *explain;
    size_t explain_size;
    char *why;
    size_t why_size;
} plan_state;

static fa_status reject(plan_state *s, fa_status st, const char *what)
{
    fa__format(s->why, s->why_size, "%s", what);
    fa__append(s->explain, s->explain_size, "rejected: %s\n", what);
    return st;
}

/* Applies a cap to Br or Bc; an override above a cap is an error, not a silent change. */
static fa_status cap(plan_state *s, bool is_r, int64_t limit, const char *reason)
{
    int64_t *v = is_r ? &s->br : &s->bc;
    const char *name = is_r ? "Br" : "Bc";
    if (limit <= 0 || *v <= limit)
        return FA_STATUS_OK;
    if (is_r ? s->override_r : s->override_c) {
        char msg[256];
        fa__format(msg, sizeof msg, "override %s = %lld exceeds %s (%lld)", name,
                   (long long)*v, reason, (long long)limit);
        return reject(s, FA_STATUS_INVALID_TILE, msg);
    }
    fa__append(s->explain, s->explain_size, "%s %lld -> %lld: %s\n", name, (long long)*v,
               (long long)limit, reason);
    *v = limit;
    return FA_STATUS_OK;
}

static fa_status align(plan_state *s, bool is_r, int64_t m)
{
    int64_t *v = is_r ? &s->br : &s->bc;
    int64_t r = round_down(*v, m);
    if (r == *v)
        return FA_STATUS_OK;
    if (is_r ? s->override_r : s->override_c) {
        char msg[256];
        fa__format(msg, sizeof msg, "override %s = %lld is not a multiple of %lld",
                   is_r ? "Br" : "Bc", (long long)*v, (long long)m);
        return reject(s, FA_STATUS_INVALID_TILE, msg);
    }
    fa__append(s->explain, s->explain_size,
               "%s %lld -> %lld: the kernel needs a multiple of %lld\n", is_r ? "Br" : "Bc",
               (long long)*v, (long long)r, (long long)m);
    *v = r;
    return FA_STATUS_OK;
}

/* The largest Bc whose key-side and score tiles fit beside the row tiles (Q), or 0. */
static uint64_t bc_that_fits(const plan_state *s, uint64_t sram, int64_t d, size_t elem)
{
    const uint64_t row = (uint64_t)d + s->f->row_pad; /* a tile row's elements */
    uint64_t row_bytes = (s->f->row_tiles * row * elem + s->f->row_floats * 4) * (uint64_t)s->br;
    uint64_t per_key = s->f->col_tiles * row * elem + s->f->score_tiles * 4 * (uint64_t)s->br;
    return sram > row_bytes ? (sram - row_bytes) / per_key : 0;
}

/* The largest Br whose row-side and score tiles fit beside the key tiles (K, V), or 0. */
static uint64_t br_that_fits(const plan_state *s, uint64_t sram, int64_t d, size_t elem)
{
    const uint64_t row = (uint64_t)d + s->f->row_pad; /* a tile row's elements */
    uint64_t col_bytes = s->f->col_tiles * (uint64_t)s->bc * row * elem;
    uint64_t per_row = s->f->row_tiles * row * elem + s->f->row_floats * 4 +
                       s->f->score_tiles * 4 * (uint64_t)s->bc;
    return sram > col_bytes ? (sram - col_bytes) / per_row : 0;
}

static void shrink(plan_state *s, bool is_r, uint64_t fit, int64_t m, const char *reason)
{
    int64_t *v = is_r ? &s->br : &s->bc;
    int64_t to = round_down(*v < (int64_t)fit ? *v : (int64_t)fit, m);
    fa__append(s->explain, s->explain_size, "%s %lld -> %lld: %s\n", is_r ? "Br" : "Bc",
               (long long)*v, (long long)to, reason);
    *v = to;
}

/* Shrinks the tiles that were not overridden until the Q, K, V and S tiles fit in the on-chip
 * memory: Bc first (Br keeps the work-group busy), then Br. An override is never changed: when
 * it cannot fit, the plan is rejected. */
static fa_status fit_sram(plan_state *s, uint64_t sram, int64_t d, size_t elem, int64_t m)
{
    char msg[256];
    while (fa__tile_bytes(s->f, s->br, s->bc, d, elem) > sram) {
        uint64_t fit_c = bc_that_fits(s, sram, d, elem);
        uint64_t fit_r = br_that_fits(s, sram, d, elem);
        if (!s->override_c && fit_c >= 1) {
            shrink(s, false, fit_c, m, "the tiles must fit in the on-chip memory");
        } else if (s->override_c && !s->override_r && fit_r >= 1) {
            shrink(s, true, fit_r, m, "the tiles must fit beside the overridden Bc");
        } else if (!s->override_r && !s->override_c && s->br > 1) {
            shrink(s, true, (uint64_t)(s->br / 2), m,
                   "not even one key column fits beside the row tiles");
        } else {
            break;
        }
    }
    uint64_t need = fa__tile_bytes(s->f, s->br, s->bc, d, elem);
    if (need <= sram)
        return FA_STATUS_OK;
    if (s->override_r || s->override_c) {
        fa__format(msg, sizeof msg, "override tiles need %llu bytes of on-chip memory, the "
                   "device has %llu", (unsigned long long)need, (unsigned long long)sram);
        return reject(s, FA_STATUS_INVALID_TILE, msg);
    }
    fa__format(msg, sizeof msg, "a 1 x 1 tile needs %llu bytes of on-chip memory at head_dim "
               "%lld, the device has %llu", (unsigned long long)fa__tile_bytes(s->f, 1, 1, d, elem),
               (long long)d, (unsigned long long)sram);
    return reject(s, FA_STATUS_SRAM_TOO_SMALL, msg);
}

/* Raises Br towards the kernel's preferred rows per work-group where everything still fits at
 * the fitted Bc: more rows share each K/V tile load. Overrides are never changed. */
static void raise_br(plan_state *s, const fa__plan_rules *rules, const fa_device_props *dev,
                     const fa_problem *p, uint64_t sram, int64_t d, size_t elem, int64_t m)
{
    int64_t want = rules->shape.min_block_r, sq = p->seqlen_q > 1 ? p->seqlen_q : 1;
    if (s->override_r || want <= s->br)
        return;
    if (want > sq)
        want = sq;
    if (rules->shape.max_block_r > 0 && want > (int64_t)rules->shape.max_block_r)
        want = rules->shape.max_block_r;
    if (rules->shape.items_per_row > 0 &&
        want > (int64_t)(dev->max_work_group_size / rules->shape.items_per_row))
        want = dev->max_work_group_size / rules->shape.items_per_row;
    uint64_t fit = br_that_fits(s, sram, d, elem);
    if (want > (int64_t)fit)
        want = (int64_t)fit;
    want = round_down(want, m);
    if (want <= s->br)
        return;
    fa__append(s->explain, s->explain_size,
               "Br %lld -> %lld: the kernel prefers %u rows per work-group (each K/V tile "
               "serves more rows), as far as the sequence, the work-group limit and the "
               "on-chip memory allow\n",
               (long long)s->br, (long long)want, (unsigned)rules->shape.min_block_r);
    s->br = want;
}

/* Raises Br to the rules' smallest work-group (GPUs: a few warps or wavefronts per
 * work-group), shrinking Bc so the taller Q tile fits: fewer keys per tile cost a little
 * reuse, a work-group of 8-40 items leaves most of a GPU's lanes idle. Stops at overrides, the
 * sequence, the work-group limit and the budget; says so when the floor is out of reach. */
static void raise_to_floor(plan_state *s, const fa__plan_rules *rules, const fa_device_props *dev,
                           const fa_problem *p, uint64_t sram, int64_t d, size_t elem, int64_t m)
{
    if (rules->shape.min_work_group == 0 || rules->shape.items_per_row == 0 || s->override_r)
        return;
    const int64_t lanes = rules->shape.items_per_row;
    int64_t want = (rules->shape.min_work_group + lanes - 1) / lanes;
    want = (want + m - 1) / m * m;
    int64_t sq = p->seqlen_q > 1 ? p->seqlen_q : 1;
    if (s->br >= want || sq < want ||
        want > (int64_t)(dev->max_work_group_size / rules->shape.items_per_row))
        return;
    int64_t br = s->br, bc = s->bc;
    s->br = want;
    int64_t fit = s->override_c ? (fa__tile_bytes(s->f, want, bc, d, elem) <= sram ? bc : 0)
                                : round_down((int64_t)bc_that_fits(s, sram, d, elem), m);
    if (rules->shape.lanes_divide && !s->override_c) /* the lanes split the keys (fit_lanes) */
        fit = fit / rules->shape.items_per_row * rules->shape.items_per_row;
    if (fit < 1) {
        s->br = br;
        fa__append(s->explain, s->explain_size,
                   "Br stays %lld: %u work-items per work-group need Br = %lld, whose tiles "
                   "do not fit in %llu bytes even at Bc = %lld\n",
                   (long long)br, (unsigned)rules->shape.min_work_group, (long long)want,
                   (unsigned long long)sram, (long long)(s->override_c ? bc : m));
        return;
    }
    s->bc = fit < bc ? fit : bc;
    fa__append(s->explain, s->explain_size,
               "Br %lld -> %lld, Bc %lld -> %lld: at least %u work-items per work-group (a "
               "GPU runs %u in lockstep), Bc shrunk so the taller tiles fit\n",
               (long long)br, (long long)want, (long long)bc, (long long)s->bc,
               (unsigned)rules->shape.min_work_group, (unsigned)dev->wg_multiple);
}

/* Rounds Br down so the work-group fills whole lockstep groups (warps, wavefronts) where the
 * floor still holds: a 40-row work-group of 2 lanes on 64-wide wavefronts leaves 48 of the
 * second wavefront's lanes idle. */
static void whole_lockstep_groups(plan_state *s, const fa__plan_rules *rules,
                                  const fa_device_props *dev, int64_t lanes)
{
    int64_t w = dev->wg_multiple, items = s->br * lanes;
    if (rules->shape.min_work_group == 0 || w <= 1 || s->override_r || items % w == 0 || w % lanes)
        return;
    int64_t br = items / w * w / lanes;
    if (br * lanes < (int64_t)rules->shape.min_work_group)
        return;
    fa__append(s->explain, s->explain_size,
               "Br %lld -> %lld: %lld work-items fill whole groups of %lld run in lockstep\n",
               (long long)s->br, (long long)br, (long long)(br * lanes), (long long)w);
    s->br = br;
}

/* Lanes per query row: items_per_row, where the kernel splits a row's Bc keys and d dims
 * between them (lanes_divide) the most lanes that divide d and Bc (and Br, lanes_divide 2: the
 * backward's dK/dV pass splits the Br rows of a query tile), Bc (and Br) rounded up to a
 * multiple of them where the larger tiles still fit in the device's memory, past the budget if
 * need be (a decode's Bc = 24 would leave 8 of 32 lanes, and a work-group of 8 items idles more
 * of a compute unit than a second resident work-group would fill; a decode's backward, Br = 1,
 * would keep the whole of a key's dK and dV rows in one item's registers, which spill at d >= 64;
 * keys and rows past the sequences are masked). */
static int64_t fit_lanes(plan_state *s, const fa__plan_rules *rules, const fa_device_props *dev,
                         int64_t d, size_t elem)
{
    int64_t want = rules->shape.items_per_row > 0 ? rules->shape.items_per_row : 1, lanes = want;
    if (!rules->shape.lanes_divide)
        return lanes;
    for (; lanes > 1; lanes /= 2) {
        int64_t up = (s->bc + lanes - 1) / lanes * lanes, br = s->br;
        if (rules->shape.lanes_divide == 2)
            br = (s->br + lanes - 1) / lanes * lanes;
        if (d % lanes != 0 || (up != s->bc && s->override_c) || (br != s->br && s->override_r))
            continue;
        if (up == s->bc && br == s->br)
            break;
        if ((rules->shape.max_block_c == 0 || up <= (int64_t)rules->shape.max_block_c) &&
            (rules->shape.max_block_r == 0 || br <= (int64_t)rules->shape.max_block_r) &&
            br * lanes <= (int64_t)dev->max_work_group_size &&
            fa__tile_bytes(s->f, br, up, d, elem) <= dev->sram_bytes) {
            if (br != s->br)
                fa__append(s->explain, s->explain_size, "Br %lld -> %lld, ", (long long)s->br,
                           (long long)br);
            fa__append(s->explain, s->explain_size, "Bc %lld -> %lld: a multiple of the %lld "
                       "lanes of a row (%llu bytes of %llu)\n", (long long)s->bc, (long long)up,
                       (long long)lanes, (unsigned long long)fa__tile_bytes(s->f, br, up, d, elem),
                       (unsigned long long)dev->sram_bytes);
            s->br = br;
            s->bc = up;
            break;
        }
    }
    if (lanes < want)
        fa__append(s->explain, s->explain_size,
                   "lanes %lld -> %lld: the lanes of a row split its Bc = %lld keys and d = %lld "
                   "dims%s\n", (long long)want, (long long)lanes, (long long)s->bc, (long long)d,
                   rules->shape.lanes_divide == 2 ? " (and the dK/dV pass's Br query rows)" : "");
    if (lanes > 1)
        fa__append(s->explain, s->explain_size,
                   "lanes: %lld work-items per query row, each with %lld keys of a tile and %lld "
                   "dims of O\n", (long long)lanes, (long long)(s->bc / lanes),
                   (long long)(d / lanes));
    return lanes;
}

static void paper_rule(plan_state *s, uint64_t sram, int64_t d, size_t elem)
{
    uint64_t m = sram / elem;
    uint64_t bc = (m + 4 * (uint64_t)d - 1) / (4 * (uint64_t)d);
    if (bc < 1)
        bc = 1; /* less than one element of memory: the fit below reports it */
    if (bc > 65536)
        bc = 65536; /* keeps later products small; any real sequence clamps it further */
    s->bc = (int64_t)bc;
    s->br = s->bc < d ? s->bc : d;
    fa__append(s->explain, s->explain_size,
               "M = %llu bytes / %zu = %llu elements; Bc = ceil(M / 4d) = %lld, "
               "Br = min(Bc, d) = %lld (d = %lld)\n",
               (unsigned long long)sram, elem, (unsigned long long)m,
               (long long)s->bc, (long long)s->br, (long long)d);
}

static void apply_overrides(plan_state *s, const fa_problem *p)
{
    s->override_r = p->block_r > 0;
    s->override_c = p->block_c > 0;
    if (s->override_r) {
        fa__append(s->explain, s->explain_size, "Br %lld -> %d: override\n", (long long)s->br,
                   (int)p->block_r);
        s->br = p->block_r;
    }
    if (s->override_c) {
        fa__append(s->explain, s->explain_size, "Bc %lld -> %d: override\n", (long long)s->bc,
                   (int)p->block_c);
        s->bc = p->block_c;
    }
}

/* The smallest power of two >= n (n >= 1). */
static int64_t next_pow2(int64_t n)
{
    int64_t v = 1;
    while (v < n)
        v *= 2;
    return v;
}

/* Shrinks one tile side longer than its sequence of n (>= 1) rows or keys to n, or with
 * pow2_clamp to the next power of two at or above n: every distinct tile size is another kernel
 * build (its -D options), and a decode whose cache grows from 1 to 128 keys builds one per
 * length (about 23 after the multiple-of-8 rule) where powers of two need 8. */
static void clamp_side(plan_state *s, bool is_r, int64_t n, bool pow2)
{
    int64_t *v = is_r ? &s->br : &s->bc;
    if (*v <= n)
        return;
    int64_t to = pow2 ? next_pow2(n) : n; /* n < *v: a short sequence, no overflow */
    if (*v <= to)
        return;
    fa__append(s->explain, s->explain_size, "%s %lld -> %lld: %s %lld%s\n", is_r ? "Br" : "Bc",
               (long long)*v, (long long)to, is_r ? "seqlen_q" : "seqlen_k", (long long)n,
               pow2 ? ", rounded up to a power of two" : "");
    *v = to;
}

/* Tiles longer than the sequence only cost memory; overrides are clamped here too. */
static void clamp_to_sequences(plan_state *s, const fa__plan_rules *rules, const fa_problem *p)
{
    clamp_side(s, true, p->seqlen_q > 1 ? p->seqlen_q : 1, rules->shape.pow2_clamp);
    clamp_side(s, false, p->seqlen_k > 1 ? p->seqlen_k : 1, rules->shape.pow2_clamp);
}

/* The largest power of two at or below n (n >= 1). */
static int64_t pow2_below(int64_t n)
{
    int64_t to = 1;
    while (to * 2 <= n)
        to *= 2;
    return to;
}

/* Where a block mask's blocks (powers of two) must not be straddled and a step above left a
 * tile at another size (the GPU floor shrinks Bc to what fits, the fit may leave Br at 3/4 of
 * a block), the tile drops to the largest power of two below: it then divides the block, or a
 * multiple of it, and stays a multiple of the lanes. Overrides stay as asked. */
static void divide_blocks(plan_state *s, const fa__plan_rules *rules)
{
    int64_t bq = rules->shape.block_r_divides, bk = rules->shape.block_c_divides;
    if (bq && !s->override_r && bq % s->br && s->br % bq) {
        fa__append(s->explain, s->explain_size, "Br %lld -> %lld: no query tile straddles two "
                   "of the block mask's blocks of %lld rows\n", (long long)s->br,
                   (long long)pow2_below(s->br), (long long)bq);
        s->br = pow2_below(s->br);
    }
    if (bk && !s->override_c && bk % s->bc) {
        fa__append(s->explain, s->explain_size, "Bc %lld -> %lld: a divisor of the block mask's "
                   "%lld keys per block, so no key tile straddles two blocks\n",
                   (long long)s->bc, (long long)pow2_below(s->bc), (long long)bk);
        s->bc = pow2_below(s->bc);
    }
}

/* "(Br*d + 2*Bc*d) * 2 + Br*Bc*4 (Q, K, V tiles and the f32 S tile)": coefficients of 1 and
 * terms of 0 are left out. */
static void explain_formula(const fa__onchip_formula *f, size_t elem, char *explain,
                            size_t explain_size)
{
    char rows[16] = "", cols[16] = "";
    if (f->row_tiles != 1)
        fa__format(rows, sizeof rows, "%u*", (unsigned)f->row_tiles);
    if (f->col_tiles != 1)
        fa__format(cols, sizeof cols, "%u*", (unsigned)f->col_tiles);
    fa__append(explain, explain_size, "on-chip bytes = (%sBr*d + %sBc*d) * %zu", rows, cols, elem);
    if (f->score_tiles == 1)
        fa__append(explain, explain_size, " + Br*Bc*4");
    else if (f->score_tiles > 1)
        fa__append(explain, explain_size, " + %u*Br*Bc*4", (unsigned)f->score_tiles);
    if (f->row_floats > 0)
        fa__append(explain, explain_size, " + %u*Br*4", (unsigned)f->row_floats);
    fa__append(explain, explain_size, " (%s)\n", f->what);
}

fa_status fa__plan_tiles(const fa_device_props *dev, const fa__plan_rules *rules,
                         const fa_problem *p, fa__tiles *out, char *explain, size_t explain_size,
                         char *why, size_t why_size)
{
    const fa__onchip_formula *f = &rules->memory.onchip;
    plan_state s = {0, 0, f, false, false, explain, explain_size, why, why_size};
    size_t elem = f->tile_bytes ? f->tile_bytes : fa_dtype_size(p->dtype);
    int64_t d = p->head_dim, m = rules->shape.tile_multiple > 0 ? rules->shape.tile_multiple : 1;
    /* The budget guides the planner's own choice; overrides may use the whole memory. */
    bool budget = rules->memory.sram_budget > 0 && rules->memory.sram_budget < dev->sram_bytes &&
                  p->block_r == 0 && p->block_c == 0;
    uint64_t sram = budget ? rules->memory.sram_budget : dev->sram_bytes;
    if (explain && explain_size)
        explain[0] = '\0';
    if (sram < dev->sram_bytes)
        fa__append(explain, explain_size, "on-chip budget %llu of %llu bytes: %s\n",
                   (unsigned long long)sram, (unsigned long long)dev->sram_bytes,
                   rules->memory.budget_note ? rules->memory.budget_note : "the backend's rule");
    paper_rule(&s, sram, d, elem);
    apply_overrides(&s, p);
    clamp_to_sequences(&s, rules, p);
    fa_status st = cap(&s, true, rules->shape.max_block_r, "the kernel's largest Br");
    if (st == FA_STATUS_OK)
        st = cap(&s, false, rules->shape.max_block_c, "the kernel's largest Bc");
    if (st == FA_STATUS_OK && !s.override_c) /* a preference: an override is planned as asked */
        st = cap(&s, false, rules->shape.pref_block_c, rules->shape.pref_block_c_why);
    if (st == FA_STATUS_OK && !s.override_r)
        st = cap(&s, true, rules->shape.pref_block_r, rules->shape.pref_block_r_why);
    if (st == FA_STATUS_OK && rules->shape.items_per_row > 0)
        st = cap(&s, true, dev->max_work_group_size / rules->shape.items_per_row,
                 "the work-group limit / work-items per row");
    if (st == FA_STATUS_OK && s.br < 1)
        return reject(&s, FA_STATUS_UNSUPPORTED, "the work-group limit allows no query row");
    if (st == FA_STATUS_OK)
        st = align(&s, true, m);
    if (st == FA_STATUS_OK)
        st = align(&s, false, m);
    if (st == FA_STATUS_OK)
        st = fit_sram(&s, sram, d, elem, m);
    if (st != FA_STATUS_OK)
        return st;
    raise_br(&s, rules, dev, p, sram, d, elem, m);
    raise_to_floor(&s, rules, dev, p, sram, d, elem, m);
    int64_t lanes = fit_lanes(&s, rules, dev, d, elem);
    whole_lockstep_groups(&s, rules, dev, lanes);
    divide_blocks(&s, rules);
    out->block_r = (int32_t)s.br;
    out->block_c = (int32_t)s.bc;
    out->row_lanes = (int32_t)lanes;
    out->work_group_size = rules->shape.items_per_row > 0 ? (int32_t)(s.br * lanes) : 1;
    out->sram_bytes = fa__tile_bytes(&rules->memory.onchip, s.br, s.bc, d, elem);
    explain_formula(&rules->memory.onchip, elem, explain, explain_size);
    fa__append(explain, explain_size,
               "plan: Br = %d, Bc = %d, work-group size %d, %llu of %llu on-chip bytes\n",
               (int)out->block_r, (int)out->block_c, (int)out->work_group_size,
               (unsigned long long)out->sram_bytes,
               (unsigned long long)(out->sram_bytes > sram ? dev->sram_bytes : sram));
    return FA_STATUS_OK;
}

int32_t fa__plan_kv_splits(const fa_device_props *dev, const fa__plan_rules *rules,
                           const fa_problem *p, const fa__tiles *t, char *explain,
                           size_t explain_size)
{
    int64_t bc = t->block_c, key_tiles = (p->seqlen_k + bc - 1) / bc;
    int64_t groups = p->batch * p->heads_q * ((p->seqlen_q + t->block_r - 1) / t->block_r);
    int64_t cu = dev->compute_units > 0 ? dev->compute_units : 1, want;
    if (key_tiles < 2 || groups == 0)
        return 1; /* one key tile (or nothing to do): nothing to split */
    if (p->kv_splits > 0) {
        want = p->kv_splits;
        fa__append(explain, explain_size, "kv splits %lld: override\n", (long long)want);
    } else if (!rules->paths.split_kv) {
        return 1;
    } else if (groups >= cu) {
        fa__append(explain, explain_size,
                   "kv splits 1: the %lld work-groups of the query tiles fill the %lld compute "
                   "units\n", (long long)groups, (long long)cu);
        return 1;
    } else {
        /* Enough chunks for two work-groups per compute unit, each of at least
         * FA__MIN_SPLIT_TILES key tiles so the merge stays a small share of the work. */
        want = (2 * cu + groups - 1) / groups;
        int64_t most = key_tiles / FA__MIN_SPLIT_TILES > 1 ? key_tiles / FA__MIN_SPLIT_TILES : 1;
        if (want > most)
            want = most;
        if (want > FA__MAX_KV_SPLITS)
            want = FA__MAX_KV_SPLITS;
        fa__append(explain, explain_size,
                   "kv splits %lld: %lld work-groups of query tiles for %lld compute units; "
                   "chunks of at least %d key tiles, at most %d chunks\n", (long long)want,
                   (long long)groups, (long long)cu, FA__MIN_SPLIT_TILES, FA__MAX_KV_SPLITS);
    }
    if (want > key_tiles) {
        fa__append(explain, explain_size, "kv splits %lld -> %lld: one key tile each\n",
                   (long long)want, (long long)key_tiles);
        want = key_tiles;
    }
    /* Whole tiles per chunk, as even as whole tiles allow; the last chunk may be shorter, and
     * rounding up may leave fewer chunks than asked. */
    int64_t tiles_per = (key_tiles + want - 1) / want;
    int64_t n = (key_tiles + tiles_per - 1) / tiles_per;
    if (n > 1)
        fa__append(explain, explain_size, "split-KV: %lld chunks of %lld keys, then a merge\n",
                   (long long)n, (long long)(tiles_per * bc));
    return (int32_t)n;
}
