/*
 * test_planner.c - the tile planner (src/planner.c) as a pure function, on invented devices.
 * Every expected Br / Bc / work-group size / SRAM byte count below was worked out by hand from
 * the planner's rules (docs and src/internal.h) and is written as a literal, so a change to the
 * rules shows up here as a diff of numbers:
 *   M = sram / elem; Bc = ceil(M / 4d); Br = min(Bc, d); overrides; clamp to the sequences;
 *   kernel caps; work-group limit (Br * items_per_row); round down to the tile multiple;
 *   fit (Br*d + 2*Bc*d)*elem + Br*Bc*4 <= sram by shrinking Bc, else halving Br.
 * Then fa_plan_create through a CPU context must agree with fa__plan_tiles.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An invented device: only the fields the planner reads matter. */
typedef struct fake_device {
    const char *name;
    uint64_t sram;
    uint32_t max_wg;
} fake_device;

static const fake_device POCL = {"pocl-like cpu", 524288, 4096};
static const fake_device H100 = {"h100-like", 232448, 1024};

/* The forward's on-chip formula: Q; K, V; one f32 S tile (or none, kept in registers). */
#define FWD_ONCHIP {.row_tiles = 1, .col_tiles = 2, .score_tiles = 1, .what = "Q, K, V, S"}
#define FWD_ONCHIP_NO_S {.row_tiles = 1, .col_tiles = 2, .score_tiles = 0, .what = "Q, K, V"}
/* {items_per_row, tile_multiple, max_block_c, max_block_r}, S tile on chip */
#define RULES(items, multiple, max_c, max_r)                                                     \
    {.shape = {.items_per_row = items, .tile_multiple = multiple, .max_block_c = max_c,        \
               .max_block_r = max_r},                                                          \
     .memory = {.onchip = FWD_ONCHIP}}
static const fa__plan_rules ONE_ITEM = RULES(1, 1, 0, 0);
static const fa__plan_rules CUDA_LIKE = RULES(4, 16, 0, 0);
static const fa__plan_rules S_IN_REGISTERS = {.shape = {.items_per_row = 2, .tile_multiple = 16},
                                              .memory = {.onchip = FWD_ONCHIP_NO_S}};

typedef struct planner_case {
    const char *name;
    fake_device dev;
    fa__plan_rules rules;
    fa_dtype dtype;
    int64_t head_dim, seqlen_q, seqlen_k;
    int32_t block_r, block_c; /* overrides, 0 = none */
    fa_status want;
    int32_t br, bc, wg; /* expected when want is OK */
    uint64_t sram_bytes;
} planner_case;

#define OK FA_STATUS_OK
#define F32 FA_DTYPE_F32
#define F16 FA_DTYPE_F16
#define BF16 FA_DTYPE_BF16

static const planner_case cases[] = {
    /* The worked example: M = 131072, Bc = 512, Br = 64, (4096 + 65536)*4 + 131072 fits. */
    {"pocl f32 d64", POCL, ONE_ITEM, F32, 64, 2048, 2048, 0, 0, OK, 64, 512, 64, 409600},
    /* M = 256: Bc = Br = 1, and a 1 x 1 tile needs 3076 bytes. */
    {"tiny sram", {"tiny", 1024, 256}, ONE_ITEM, F32, 256, 128, 128, 0, 0,
     FA_STATUS_SRAM_TOO_SMALL, 0, 0, 0, 0},
    /* 64 MiB: Bc = 65536 is clamped to seqlen_k = 3000; CPU-like rules give wg 1. */
    {"huge sram", {"huge", 67108864, 1}, RULES(0, 1, 0, 0), F16, 128, 1000, 3000, 0, 0, OK, 128,
     3000, 1, 3104768},
    /* Br = 32, but 32 rows * 4 items > 64: Br = 64 / 4 = 16. */
    {"work-group limit", {"small wg", 65536, 64}, RULES(4, 1, 0, 0), F32, 128, 512, 512, 0, 0, OK,
     16, 32, 64, 43008},
    {"short sequences", POCL, ONE_ITEM, F32, 64, 17, 5, 0, 0, OK, 17, 5, 17, 7252},
    {"empty sequences", POCL, ONE_ITEM, F32, 64, 0, 0, 0, 0, OK, 1, 1, 1, 772},
    {"d16", POCL, ONE_ITEM, F32, 16, 4096, 4096, 0, 0, OK, 16, 2048, 16, 394240},
    {"d256", POCL, ONE_ITEM, F32, 256, 4096, 4096, 0, 0, OK, 128, 128, 128, 458752},
    /* f16 doubles M: Bc = 1024 needs 532480 bytes; the fit gives Bc = 516096 / 512 = 1008. */
    {"pocl f16 d64", POCL, ONE_ITEM, F16, 64, 2048, 2048, 0, 0, OK, 64, 1008, 64, 524288},
    /* Bc = 227 -> 224 (multiple of 16) needs 262144 > 232448; fit 195 -> 192. */
    {"h100 f16 d128", H100, CUDA_LIKE, F16, 128, 4096, 4096, 0, 0, OK, 128, 192, 512, 229376},
    /* The same without an S tile on chip: Bc = 227 -> 224 fits, (128*128 + 2*224*128)*2. */
    {"h100 f16 d128 S in registers", H100, S_IN_REGISTERS, F16, 128, 4096, 4096, 0, 0, OK, 128,
     224, 256, 147456},
    /* M = 257: Bc = Br = 2 leaves no room for a key column beside the Q tile; Br halves to 1. */
    {"Br halving", {"halving", 1028, 1024}, ONE_ITEM, F32, 64, 100, 100, 0, 0, OK, 1, 1, 1,
     772},
    {"override valid", POCL, ONE_ITEM, F32, 64, 2048, 2048, 32, 128, OK, 32, 128, 32, 90112},
    {"override not a multiple", H100, CUDA_LIKE, F16, 128, 4096, 4096, 0, 100,
     FA_STATUS_INVALID_TILE, 0, 0, 0, 0},
    {"override too big for sram", POCL, ONE_ITEM, F32, 64, 8192, 8192, 0, 4096,
     FA_STATUS_INVALID_TILE, 0, 0, 0, 0},
    {"override above kernel cap", POCL, RULES(1, 1, 256, 0), F32, 64, 2048, 2048, 0, 512,
     FA_STATUS_INVALID_TILE, 0, 0, 0, 0},
    {"override above work-group", {"small wg", 65536, 64}, RULES(4, 1, 0, 0), F32, 128, 512, 512,
     32, 0, FA_STATUS_INVALID_TILE, 0, 0, 0, 0},
    /* Overriding one tile leaves the other to the fit: Bc = (524288 - 65536) / 1536 = 298. */
    {"override Br, Bc fitted", POCL, ONE_ITEM, F32, 64, 2048, 2048, 256, 0, OK, 256, 298, 256,
     523264},
    /* Bc = 256 fixed: Br = (232448 - 131072) / 1280 = 79 -> 64 (multiple of 16). */
    {"override Bc, Br fitted", H100, CUDA_LIKE, F16, 128, 4096, 4096, 0, 256, OK, 64, 256, 256,
     212992},
    {"overrides both too big", POCL, ONE_ITEM, F32, 64, 2048, 2048, 256, 512,
     FA_STATUS_INVALID_TILE, 0, 0, 0, 0},
    /* An override longer than the sequence is clamped like the rule's value, not an error. */
    {"override clamped to seq", POCL, ONE_ITEM, F32, 64, 17, 2048, 64, 0, OK, 17, 512, 17,
     301312},
    /* An override at or below the tile multiple is not rounded. */
    {"override below multiple", H100, CUDA_LIKE, F16, 128, 4096, 4096, 8, 0, OK, 8, 224, 32,
     123904},
    {"kernel caps", POCL, RULES(1, 1, 128, 32), F32, 64, 2048, 2048, 0, 0, OK, 32, 128, 32, 90112},
    /* Bc = ceil(25000 / 160) = 157, Br = 40; multiple 16: 32 x 144. */
    {"tile multiple", {"mult16", 100000, 1024}, RULES(1, 16, 0, 0), F32, 40, 1000, 1000, 0, 0, OK,
     32, 144, 32, 69632},
    {"mali-like f16 d96", {"mali", 32768, 384}, RULES(2, 8, 0, 0), F16, 96, 777, 333, 0, 0, OK, 40,
     40, 80, 29440},
    /* Bc = 103 needs 78720 bytes; fit (65536 - 12800) / 640 = 82. */
    {"intel-like bf16 d80", {"intel", 65536, 512}, ONE_ITEM, BF16, 80, 300, 300, 0, 0, OK, 80,
     82, 80, 65280},
    {"amd-like f32 d32", {"amd", 65536, 256}, RULES(2, 4, 0, 0), F32, 32, 4096, 4096, 0, 0, OK, 32,
     128, 64, 53248},
    {"cpu-like l1d", {"l1d", 32768, 1}, RULES(0, 1, 0, 0), F32, 64, 1000, 1000, 0, 0, OK, 32, 32, 1,
     28672},
};

static fa_device_props props_of(const fake_device *f)
{
    fa_device_props d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", f->name);
    snprintf(d.vendor, sizeof d.vendor, "invented");
    d.sram_bytes = f->sram;
    d.max_work_group_size = f->max_wg;
    d.compute_units = 1;
    return d;
}

static void run_planner_case(const planner_case *c)
{
    fa_device_props dev = props_of(&c->dev);
    fa_problem p;
    assert_int_equal(fa_problem_init(&p, c->dtype, FA_LAYOUT_BHSD, 1, 1, 1, c->seqlen_q,
                                     c->seqlen_k, c->head_dim),
                     FA_STATUS_OK);
    p.block_r = c->block_r;
    p.block_c = c->block_c;
    fa__tiles tiles = {-1, -1, -1, -1, 0};
    char explain[4096] = "", why[512] = "";
    fa_status st = fa__plan_tiles(&dev, &c->rules, &p, &tiles, explain, sizeof explain, why,
                                  sizeof why);
    print_message("  %-28s %s Br %d Bc %d wg %d sram %llu %s\n", c->name, fa_status_name(st),
                  (int)tiles.block_r, (int)tiles.block_c, (int)tiles.work_group_size,
                  (unsigned long long)tiles.sram_bytes, why);
    assert_int_equal(st, c->want);
    /* Every plan, good or bad, starts from the paper's rule and says so. */
    assert_non_null(strstr(explain, "Bc = ceil"));
    if (st != FA_STATUS_OK) {
        assert_true(why[0] != '\0');
        return;
    }
    assert_int_equal(tiles.block_r, c->br);
    assert_int_equal(tiles.block_c, c->bc);
    assert_int_equal(tiles.work_group_size, c->wg);
    assert_int_equal(tiles.sram_bytes, c->sram_bytes);
    assert_true(tiles.sram_bytes <= dev.sram_bytes);
}

static void test_invented_devices(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_planner_case(&cases[i]);
}

static void test_tile_bytes(void **state)
{
    (void)state;
    const fa__onchip_formula fwd = FWD_ONCHIP, no_s = FWD_ONCHIP_NO_S;
    /* A made-up op holding 2 row tiles, 4 key tiles and 2 score tiles (a backward's shape). */
    const fa__onchip_formula bwd = {.row_tiles = 2, .col_tiles = 4, .score_tiles = 2, .what = ""};
    assert_int_equal(fa__tile_bytes(&fwd, 64, 512, 64, 4), 409600);
    assert_int_equal(fa__tile_bytes(&fwd, 1, 1, 256, 4), 3076);
    assert_int_equal(fa__tile_bytes(&fwd, 128, 192, 128, 2), 229376);
    assert_int_equal(fa__tile_bytes(&no_s, 128, 224, 128, 2), 147456);
    /* (2*64*64 + 4*32*64) * 2 + 2*64*32*4 */
    assert_int_equal(fa__tile_bytes(&bwd, 64, 32, 64, 2), 49152);
    /* Sizes whose product passes 2^32 stay exact in 64 bits. */
    assert_int_equal(fa__tile_bytes(&fwd, 65536, 65536, 256, 4), 17179869184ull + 201326592ull);
}

/* The OpenCL backward's formula, with f32 values per row: exact at the boundary, and one byte
 * less shrinks Bc by the per-row term too. */
static void test_row_floats(void **state)
{
    (void)state;
    const fa__plan_rules rules = {
        .shape = {.items_per_row = 1, .tile_multiple = 8, .max_block_c = 64},
        .memory = {.onchip = {.row_tiles = 4, .col_tiles = 3, .score_tiles = 2, .row_floats = 3,
                              .what = "backward"}}};
    /* (4*64*64 + 3*64*64) * 4 + 2*64*64*4 + 3*64*4 */
    assert_int_equal(fa__tile_bytes(&rules.memory.onchip, 64, 64, 64, 4), 148224);
    fa_device_props dev = props_of(&POCL);
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 1, 1, 2048, 2048, 64);
    fa__tiles tiles;
    char explain[2048];
    dev.sram_bytes = 148224;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &tiles, explain, sizeof explain, NULL, 0),
                     OK);
    assert_int_equal(tiles.block_r, 64);
    assert_int_equal(tiles.block_c, 64);
    assert_non_null(strstr(explain, "+ 3*Br*4 (backward)"));
    /* Q-side bytes (4*64*4 + 3*4) * 64 = 66304; per key 3*64*4 + 2*64*4 = 1280;
     * (148223 - 66304) / 1280 = 63, rounded down to a multiple of 8. */
    dev.sram_bytes = 148223;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &tiles, NULL, 0, NULL, 0), OK);
    assert_int_equal(tiles.block_r, 64);
    assert_int_equal(tiles.block_c, 56);
}

/* min_block_r raises Br after the fit, only as far as the sequence, the work-group limit and
 * the on-chip memory allow, and never past an override. */
static void test_min_block_r(void **state)
{
    (void)state;
    fa__plan_rules rules = {
        .shape = {.items_per_row = 1, .tile_multiple = 8, .max_block_c = 128, .min_block_r = 256},
        .memory = {.onchip = FWD_ONCHIP}};
    fa_device_props dev = props_of(&POCL); /* 524288 bytes, 4096 work-items */
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 1, 1, 2048, 2048, 64);
    fa__tiles t;
    char explain[2048];
    /* d 64: the rule's Br 64 -> 256; (256*64 + 2*128*64) * 4 + 256*128*4 = 262144 fits. */
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, explain, sizeof explain, NULL, 0), OK);
    assert_int_equal(t.block_r, 256);
    assert_int_equal(t.block_c, 128);
    assert_int_equal(t.work_group_size, 256);
    assert_non_null(strstr(explain, "Br 64 -> 256: the kernel prefers 256 rows"));
    /* The sequence bounds it: Sq 100 -> Br 96 (a multiple of 8). */
    p.seqlen_q = 100;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, NULL, 0, NULL, 0), OK);
    assert_int_equal(t.block_r, 96);
    /* The on-chip memory bounds it: at 200000 bytes and Bc 128, a row costs 64*4 + 128*4 = 768
     * bytes beside 65536 of K and V: (200000 - 65536) / 768 = 175 -> 168. */
    p.seqlen_q = 2048;
    dev.sram_bytes = 200000;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, NULL, 0, NULL, 0), OK);
    assert_int_equal(t.block_c, 128);
    assert_int_equal(t.block_r, 168);
    /* The work-group limit bounds it; an override is kept. */
    dev = props_of(&POCL);
    dev.max_work_group_size = 128;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, NULL, 0, NULL, 0), OK);
    assert_int_equal(t.block_r, 128);
    dev = props_of(&POCL);
    p.block_r = 32;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, NULL, 0, NULL, 0), OK);
    assert_int_equal(t.block_r, 32);
}

/* With pow2_clamp (OpenCL's rules) a decode whose cache grows key by key (Sq 1, Sk 1..128)
 * plans Bc as powers of two >= Sk: 8 distinct tiles, so 8 kernel builds, where clamping to Sk
 * itself (the "short sequences" case) made one per length. An override longer than a short
 * sequence stays a valid tile (Br 16 at Sq 9, where 9 is not a multiple of 8). */
static void test_growing_decode_tiles(void **state)
{
    (void)state;
    fa__plan_rules rules = {.shape = {.items_per_row = 1, .tile_multiple = 8, .max_block_c = 128,
                                      .min_block_r = 256, .pow2_clamp = 1},
                            .memory = {.onchip = FWD_ONCHIP}};
    fa_device_props dev = props_of(&POCL);
    fa_problem p;
    fa__tiles t;
    int distinct = 0, last = 0;
    for (int64_t sk = 1; sk <= 128; sk++) {
        fa_problem_init(&p, F16, FA_LAYOUT_BHSD, 1, 32, 8, 1, sk, 128);
        assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, NULL, 0, NULL, 0), OK);
        assert_int_equal(t.block_r, 1);
        assert_true(t.block_c >= sk && t.block_c < 2 * sk);
        assert_int_equal(t.block_c & (t.block_c - 1), 0);
        distinct += t.block_c != last;
        last = t.block_c;
    }
    assert_int_equal(distinct, 8);
    char explain[2048];
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 1, 1, 9, 9, 64);
    p.block_r = 16;
    assert_int_equal(fa__plan_tiles(&dev, &rules, &p, &t, explain, sizeof explain, NULL, 0), OK);
    assert_int_equal(t.block_r, 16);
    assert_int_equal(t.block_c, 16);
    assert_non_null(strstr(explain, "Bc 512 -> 16: seqlen_k 9, rounded up to a power of two"));
}

/* Split-KV: only when the query tiles are fewer work-groups than compute units; chunks of at
 * least FA__MIN_SPLIT_TILES key tiles, at most FA__MAX_KV_SPLITS, whole tiles; overrides. */
static void test_kv_splits(void **state)
{
    (void)state;
    fa__plan_rules rules = {.paths = {.split_kv = 1}};
    fa_device_props dev = props_of(&H100);
    dev.compute_units = 132;
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 32, 8, 1, 32768, 128);
    fa__tiles t = {.block_r = 1, .block_c = 64};
    char explain[1024] = "";
    /* 32 groups, 132 units: ceil(264 / 32) = 9 chunks of ceil(512 / 9) = 57 tiles. */
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, explain, sizeof explain), 9);
    assert_non_null(strstr(explain, "split-KV: 9 chunks of 3648 keys"));
    /* 8 sequences: 256 groups fill 132 units. */
    p.batch = 8;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 1);
    /* A short cache: 1024 keys = 16 tiles, at most 16 / 4 = 4 chunks. */
    p.batch = 1;
    p.seqlen_k = 1024;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 4);
    /* One group, many units: capped at 64 chunks; 520 tiles in 64 chunks round to whole tiles:
     * 58 chunks of 9. */
    p.heads_q = p.heads_kv = 1;
    p.seqlen_k = 65536 * 8;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 64);
    p.seqlen_k = 64 * 520;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 58);
    /* Overrides: 1 never splits, 3 splits even where the device is full; never more chunks
     * than key tiles; a backend that does not split on its own. */
    p.kv_splits = 1;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 1);
    p.kv_splits = 3;
    p.batch = 64;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 3);
    p.kv_splits = 1000;
    p.seqlen_k = 64 * 7;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 7);
    p.kv_splits = 0;
    p.batch = 1;
    rules.paths.split_kv = 0;
    p.seqlen_k = 32768;
    assert_int_equal(fa__plan_kv_splits(&dev, &rules, &p, &t, NULL, 0), 1);
}

/* A NULL explain / why buffer is allowed. */
static void test_null_explain(void **state)
{
    (void)state;
    fa_device_props dev = props_of(&POCL);
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 1, 1, 2048, 2048, 64);
    fa__tiles tiles;
    assert_int_equal(fa__plan_tiles(&dev, &ONE_ITEM, &p, &tiles, NULL, 0, NULL, 0), OK);
    assert_int_equal(tiles.block_c, 512);
    dev.sram_bytes = 16;
    assert_int_equal(fa__plan_tiles(&dev, &ONE_ITEM, &p, &tiles, NULL, 0, NULL, 0),
                     FA_STATUS_SRAM_TOO_SMALL);
}

/* ---- through the public API on the CPU backend ------------------------------------------ */

/* fa_plan_create on the CPU context must report what fa__plan_tiles computes for its device. */
static void check_plan_matches(fa_context *ctx, const fa_problem *p)
{
    fa_device_props props;
    assert_int_equal(fa_context_device_props(ctx, &props), OK);
    fa__plan_rules rules;
    memset(&rules, 0, sizeof rules);
    const fa__backend_ops *ops = fa__backend_ops_get(FA_BACKEND_CPU);
    assert_non_null(ops);
    rules.memory.onchip = fa__op_onchip(FA__OP_FORWARD);
    ops->plan_rules(&props, p, FA__OP_FORWARD, &rules);
    fa__tiles tiles;
    assert_int_equal(fa__plan_tiles(&props, &rules, p, &tiles, NULL, 0, NULL, 0), OK);
    fa_plan *plan = NULL;
    assert_int_equal(fa_plan_create(ctx, p, &plan), OK);
    assert_int_equal(fa_plan_block_r(plan), tiles.block_r);
    assert_int_equal(fa_plan_block_c(plan), tiles.block_c);
    assert_int_equal(fa_plan_work_group_size(plan), 1); /* documented for the CPU backend */
    assert_int_equal(fa_plan_sram_bytes(plan), tiles.sram_bytes);
    uint64_t q_tiles = (uint64_t)(p->seqlen_q + tiles.block_r - 1) / (uint64_t)tiles.block_r;
    assert_int_equal(fa_plan_work_groups(plan),
                     (uint64_t)p->batch * (uint64_t)p->heads_q * q_tiles);
    const fa_problem *pp = fa_plan_problem(plan);
    assert_non_null(pp);
    float scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
    assert_true(pp->scale == scale); /* resolved */
    assert_int_equal(pp->head_dim, p->head_dim);
    const char *explain = fa_plan_explain(plan);
    assert_non_null(explain);
    assert_non_null(strstr(explain, "Bc = ceil"));
    assert_string_equal(fa_context_last_error(ctx), "");
    fa_plan_destroy(plan);
}

static fa_context *cpu_context(void)
{
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    char why[256];
    assert_int_equal(fa_context_create(&ctx, &opts, why, sizeof why), OK);
    return ctx;
}

static void test_cpu_plan_create(void **state)
{
    (void)state;
    fa_context *ctx = cpu_context();
    const struct {
        fa_dtype dt;
        int64_t b, hq, hkv, sq, sk, d;
        float scale;
    } probs[] = {{F32, 2, 4, 2, 100, 300, 64, 0.0f}, {F16, 1, 8, 1, 257, 31, 128, 0.5f},
                 {BF16, 3, 2, 2, 17, 4096, 256, 0.0f}, {F32, 1, 1, 1, 0, 0, 16, 0.0f},
                 {F16, 0, 2, 2, 9, 9, 40, -1.0f}};
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) {
        fa_problem p;
        assert_int_equal(fa_problem_init(&p, probs[i].dt, FA_LAYOUT_BSHD, probs[i].b,
                                         probs[i].hq, probs[i].hkv, probs[i].sq, probs[i].sk,
                                         probs[i].d),
                         OK);
        p.scale = probs[i].scale;
        check_plan_matches(ctx, &p);
    }
    fa_context_destroy(ctx);
}

/* FLASHATTN_BLOCK_R / _C stand in for overrides the problem leaves at 0, and are validated. */
static void test_env_overrides(void **state)
{
    (void)state;
    harness_env r, c;
    harness_env_save(&r, "FLASHATTN_BLOCK_R");
    harness_env_save(&c, "FLASHATTN_BLOCK_C");
    fa_context *ctx = cpu_context();
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 2, 2, 64, 64, 64);
    fa_plan *plan = NULL;
    setenv("FLASHATTN_BLOCK_R", "8", 1);
    setenv("FLASHATTN_BLOCK_C", "16", 1);
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_int_equal(fa_plan_block_r(plan), 8);
    assert_int_equal(fa_plan_block_c(plan), 16);
    fa_plan_destroy(plan);
    p.block_r = 4; /* the problem's own override wins over the environment */
    assert_int_equal(fa_plan_create(ctx, &p, &plan), OK);
    assert_int_equal(fa_plan_block_r(plan), 4);
    assert_int_equal(fa_plan_block_c(plan), 16);
    fa_plan_destroy(plan);
    p.block_r = 0;
    const char *bad[] = {"abc", "-3", "70000", "12x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FLASHATTN_BLOCK_R", bad[i], 1);
        plan = NULL;
        assert_int_equal(fa_plan_create(ctx, &p, &plan), FA_STATUS_INVALID_TILE);
        assert_null(plan);
        assert_non_null(strstr(fa_context_last_error(ctx), "FLASHATTN_BLOCK_R"));
    }
    harness_env_restore(&r);
    harness_env_restore(&c);
    fa_context_destroy(ctx);
}

/* One backend list: every known backend once, in AUTO's order, AUTO past either end. */
static void test_backend_list(void **state)
{
    (void)state;
    assert_int_equal(fa_backend_count(), 3);
    const fa_backend want[3] = {FA_BACKEND_CUDA, FA_BACKEND_OPENCL, FA_BACKEND_CPU};
    for (int i = 0; i < 3; i++)
        assert_int_equal(fa_backend_at(i), want[i]);
    assert_int_equal(fa_backend_at(-1), FA_BACKEND_AUTO);
    assert_int_equal(fa_backend_at(3), FA_BACKEND_AUTO);
}

/* Planning-only contexts: refused cleanly where a backend knows no architectures. */
static void test_planning_context_errors(void **state)
{
    (void)state;
    char why[256] = "";
    fa_context *ctx = (fa_context *)&why; /* must come back NULL */
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CPU, "sm_90", why, sizeof why),
                     FA_STATUS_UNSUPPORTED);
    assert_null(ctx);
    assert_non_null(strstr(why, "cpu"));
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_AUTO, "sm_90", why, sizeof why),
                     FA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_CUDA, NULL, why, sizeof why),
                     FA_STATUS_NULL_POINTER);
    assert_int_equal(fa_context_create_planning(NULL, FA_BACKEND_CUDA, "sm_90", why, sizeof why),
                     FA_STATUS_NULL_POINTER);
}

int main(void)
{
    /* The suite must not depend on the caller's environment. */
    unsetenv("FLASHATTN_BLOCK_R");
    unsetenv("FLASHATTN_BLOCK_C");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invented_devices), cmocka_unit_test(test_tile_bytes),
        cmocka_unit_test(test_row_floats),
        cmocka_unit_test(test_min_block_r),      cmocka_unit_test(test_growing_decode_tiles),
        cmocka_unit_test(test_kv_splits),
        cmocka_unit_test(test_null_explain),     cmocka_unit_test(test_cpu_plan_create),
        cmocka_unit_test(test_env_overrides),    cmocka_unit_test(test_backend_list),
        cmocka_unit_test(test_planning_context_errors),
    };
    return cmocka_run_group_tests_name("planner", tests, NULL, NULL);
}
