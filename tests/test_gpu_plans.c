/*
 * test_gpu_plans.c - the planner's GPU rules (src/planner.c: an on-chip budget below the
 * device's memory, a smallest work-group reached by shrinking Bc) on invented devices, and the
 * OpenCL GPU profiles (backends/opencl/cl_profiles.c) through planning-only contexts, and
 * AUTO's device choice (a GPU first) and the re-plan within a compiled kernel's work-group
 * limit on fake backends. Every
 * expected number was worked out by hand from the rules and is written as a literal:
 *   on-chip bytes (Br*d + 2*Bc*d)*elem + Br*Bc*4 <= budget; Bc = ceil(budget / elem / 4d),
 *   Br = min(Bc, d); Br raised towards 256 at that Bc; then Br raised to the floor, Bc shrunk to
 *   (budget - Br*d*elem) / (2*d*elem + 4*Br), rounded down to a multiple of 8.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define OK FA_STATUS_OK
#define F32 FA_DTYPE_F32

static const fa__onchip_formula FWD_ONCHIP = {.row_tiles = 1, .col_tiles = 2, .score_tiles = 1,
                                              .what = "Q, K, V tiles and the f32 S tile"};

/* The OpenCL forward's rules on a 64 KiB GPU: half of it, at least 64 work-items. */
static fa__plan_rules gpu_rules(void)
{
    return (fa__plan_rules){
        .shape = {.items_per_row = 1, .tile_multiple = 8, .max_block_c = 128,
                  .min_block_r = 256, .min_work_group = 64},
        .memory = {.onchip = FWD_ONCHIP, .sram_budget = 32768, .budget_note = "half"}};
}

static fa_device_props gpu_device(void)
{
    fa_device_props dev;
    memset(&dev, 0, sizeof dev);
    snprintf(dev.name, sizeof dev.name, "%s", "invented 64 KiB GPU");
    dev.backend = FA_BACKEND_OPENCL;
    dev.sram_bytes = 65536;
    dev.max_work_group_size = 256;
    dev.compute_units = 100;
    dev.gpu = 1;
    dev.wg_multiple = 64;
    return dev;
}

static void plan(const fa_problem *p, const fa__plan_rules *rules, fa__tiles *t, char *explain,
                 size_t size)
{
    fa_device_props dev = gpu_device();
    char why[256] = "";
    assert_int_equal(fa__plan_tiles(&dev, rules, p, t, explain, size, why, sizeof why), OK);
}

/* d 64: budget 32768 -> Bc 32, Br 32; raised to 40 at Bc 32 ((32768 - 16384) / 384 = 42);
 * the floor: Br 64 leaves (32768 - 16384) / 768 = 21 -> Bc 16; 28672 bytes. */
static void test_floor_reached(void **state)
{
    (void)state;
    fa__plan_rules rules = gpu_rules();
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    fa__tiles t;
    char explain[2048];
    plan(&p, &rules, &t, explain, sizeof explain);
    assert_int_equal(t.block_r, 64);
    assert_int_equal(t.block_c, 16);
    assert_int_equal(t.work_group_size, 64);
    assert_int_equal(t.sram_bytes, 28672);
    assert_non_null(strstr(explain, "on-chip budget 32768 of 65536 bytes: half"));
    assert_non_null(strstr(explain, "Br 40 -> 64, Bc 32 -> 16: at least 64 work-items"));
    /* Without the floor the budget alone gives Br 40. */
    rules.shape.min_work_group = 0;
    plan(&p, &rules, &t, NULL, 0);
    assert_int_equal(t.block_r, 40);
    assert_int_equal(t.block_c, 32);
}

/* d 128: Bc 16, Br 16, raised to 24 ((32768 - 16384) / 576 = 28); 64 rows of Q alone are
 * 32768 bytes, the whole budget: Br stays, and the explanation says why. */
static void test_floor_out_of_reach(void **state)
{
    (void)state;
    fa__plan_rules rules = gpu_rules();
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 128);
    fa__tiles t;
    char explain[2048];
    plan(&p, &rules, &t, explain, sizeof explain);
    assert_int_equal(t.block_r, 24);
    assert_int_equal(t.block_c, 16);
    assert_non_null(strstr(explain, "Br stays 24: 64 work-items per work-group need Br = 64"));
    assert_true(t.sram_bytes <= 32768);
}

/* The floor never passes the sequence: Sq 40 gives Br 40 (raised to the sequence). */
static void test_floor_and_short_sequences(void **state)
{
    (void)state;
    fa__plan_rules rules = gpu_rules();
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 40, 2048, 64);
    fa__tiles t;
    plan(&p, &rules, &t, NULL, 0);
    assert_int_equal(t.block_r, 40);
    assert_int_equal(t.block_c, 32);
    p.seqlen_q = 1; /* decode: one row */
    plan(&p, &rules, &t, NULL, 0);
    assert_int_equal(t.block_r, 1);
    assert_int_equal(t.work_group_size, 1);
}

/* Overrides may use the whole memory: Br 128 at d 64 plans Bc = (65536 - 32768) / 1024 = 32,
 * 65536 bytes, past the budget; an override of Bc keeps it and still raises Br to the floor
 * when the tiles fit (Bc 8: 64 rows need 16384 + 4096 + 2048 bytes). */
static void test_overrides_and_budget(void **state)
{
    (void)state;
    fa__plan_rules rules = gpu_rules();
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    p.block_r = 128;
    fa__tiles t;
    plan(&p, &rules, &t, NULL, 0);
    assert_int_equal(t.block_r, 128);
    assert_int_equal(t.block_c, 32);
    assert_int_equal(t.sram_bytes, 65536);
    p.block_r = 0;
    p.block_c = 8;
    plan(&p, &rules, &t, NULL, 0);
    assert_int_equal(t.block_c, 8);
    assert_true(t.block_r >= 64);
}

/* The OpenCL forward's rules with `lanes` work-items per row that split its keys and dims,
 * each sharing its row max and sum through two floats of local memory. */
static fa__plan_rules lane_rules(uint32_t lanes)
{
    fa__plan_rules rules = gpu_rules();
    rules.shape.items_per_row = lanes;
    rules.shape.lanes_divide = 1;
    rules.memory.onchip.row_floats = 2 * lanes;
    rules.shape.tile_multiple = lanes > 8 ? lanes : 8;
    return rules;
}

/* d 128, 4 lanes: Bc = ceil(8192 / 512) = 16, Br 16: (2048 + 4096) * 4 + 1024 + 512 = 26112;
 * raised to (32768 - 16384) / (512 + 32 + 64) = 26 -> 24 rows, 96 items: a wavefront and a
 * half, so back to 16 rows, 64 items. */
static void test_lanes_fill_wavefronts(void **state)
{
    (void)state;
    fa__plan_rules rules = lane_rules(4);
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 128);
    fa__tiles t;
    char explain[4096];
    plan(&p, &rules, &t, explain, sizeof explain);
    assert_int_equal(t.block_r, 16);
    assert_int_equal(t.block_c, 16);
    assert_int_equal(t.row_lanes, 4);
    assert_int_equal(t.work_group_size, 64);
    assert_int_equal(t.sram_bytes, 26112);
    assert_non_null(strstr(explain, "lanes: 4 work-items per query row, each with 4 keys"));
    assert_non_null(strstr(explain, "Br 24 -> 16: 64 work-items fill whole groups of 64"));
}

/* Decode (Sq 1), d 128, 32 lanes: Bc 16 leaves a lane half a key, so Bc goes up to 32:
 * (128 + 8192) * 4 + 128 + 256 = 33664 bytes, past the 32768 budget and within the device's
 * 65536. An overridden Bc of 24 stays, and the lanes halve to 8, which divide it. */
static void test_lanes_for_decode(void **state)
{
    (void)state;
    fa__plan_rules rules = lane_rules(32);
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 1, 4096, 128);
    fa__tiles t;
    char explain[4096];
    plan(&p, &rules, &t, explain, sizeof explain);
    assert_int_equal(t.block_r, 1);
    assert_int_equal(t.block_c, 32);
    assert_int_equal(t.row_lanes, 32);
    assert_int_equal(t.work_group_size, 32);
    assert_non_null(strstr(explain, "Bc 16 -> 32: a multiple of the 32 lanes of a row (33664 "
                                    "bytes of 65536)"));
    p.block_c = 24;
    plan(&p, &rules, &t, explain, sizeof explain);
    assert_int_equal(t.block_c, 24);
    assert_int_equal(t.row_lanes, 8);
    assert_int_equal(t.work_group_size, 8);
    assert_non_null(strstr(explain, "lanes 32 -> 8: the lanes of a row split its Bc = 24 keys"));
}

/* Every profile's forward plans, d 32..128 and every dtype: at least 64 work-items per
 * work-group at Sq 2048 and 32 at Sq 1 (decode), except f32 d 128 decode on the 32 KiB
 * devices, whose K and V tiles of 32 keys alone fill the memory (16 lanes, 16 keys); lanes
 * that divide d and Bc. */
static void test_profiles_fill_work_groups(void **state)
{
    (void)state;
    static const char *profiles[] = {"amd-gfx90a", "amd-gfx1030", "intel-xe",
                                     "nvidia-sm80", "mali-g710",   "adreno-740"};
    static const fa_dtype dtypes[] = {F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    static const int64_t dims[] = {32, 64, 96, 128};
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
        char why[512] = "";
        fa_context *ctx = NULL;
        fa_status st = fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, profiles[i], why,
                                                  sizeof why);
        if (st == FA_STATUS_BACKEND_UNAVAILABLE && !harness_backend_required(FA_BACKEND_OPENCL))
            skip();
        assert_int_equal(st, OK);
        bool small = strcmp(profiles[i], "mali-g710") == 0 ||
                     strcmp(profiles[i], "adreno-740") == 0;
        for (size_t t = 0; t < 3; t++) {
            for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
                for (int64_t sq = 1; sq <= 2048; sq += 2047) {
                    fa_problem p;
                    fa_problem_init(&p, dtypes[t], FA_LAYOUT_BHSD, 1, 8, 8, sq, 4096, dims[k]);
                    fa_plan *pl = NULL;
                    assert_int_equal(fa_plan_create(ctx, &p, &pl), OK);
                    int32_t br = fa_plan_block_r(pl), bc = fa_plan_block_c(pl);
                    int32_t wg = fa_plan_work_group_size(pl), lanes = wg / br;
                    int32_t floor = sq == 1 ? (small && t == 0 && dims[k] == 128 ? 16 : 32) : 64;
                    print_message("  %s %s d%lld Sq %lld: Br %d Bc %d wg %d\n", profiles[i],
                                  fa_dtype_name(dtypes[t]), (long long)dims[k], (long long)sq,
                                  br, bc, wg);
                    assert_true(wg >= floor);
                    assert_int_equal(wg % br, 0);
                    assert_int_equal(bc % lanes, 0);
                    assert_int_equal(dims[k] % lanes, 0);
                    fa_plan_destroy(pl);
                }
            }
        }
        fa_context_destroy(ctx);
    }
}

/* A profile: half of gfx90a's 64 KiB, its 64-wide wavefronts, 2 lanes per row at d 64;
 * Mali's local memory is global memory, so its 32 KiB are the tiles' whole budget. */
/* A decode's backward (Sq 1, d 128 f16): its one query row is rounded up to the 4 lanes, so a
 * key's dK and dV rows are split between them (one item held both, 256 floats, and spilled on
 * every GPU target), and its kernels use float4 vectors, as every GPU variant does. */
static void backward_of_one_row(fa_context *ctx)
{
    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F16, FA_LAYOUT_BHSD, 1, 8, 8, 1, 300, 128);
    fa_plan *pl = NULL;
    assert_int_equal(fa_plan_create_backward(ctx, &p, &pl), OK);
    assert_int_equal(fa_plan_block_r(pl), 4);
    assert_int_equal(fa_plan_work_group_size(pl), 16);
    assert_non_null(
        strstr(fa_plan_explain(pl), "Br 1 -> 4, Bc 32 -> 32: a multiple of the 4 lanes"));
    for (int i = 0; i < pl->n_launches; i++) {
        char options[FA__CL_OPTIONS_SIZE];
        fa__cl_build_options(&pl->launches[i].variant, options, sizeof options);
        assert_non_null(strstr(options, "-D VEC_MAX=4 "));
        assert_non_null(strstr(options, "-D TPR=4 "));
    }
    fa_plan_destroy(pl);
}

static void test_opencl_profiles(void **state)
{
    (void)state;
    char why[512] = "";
    fa_context *ctx = NULL;
    fa_status st = fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, "amd-gfx90a", why,
                                              sizeof why);
    if (st == FA_STATUS_BACKEND_UNAVAILABLE && !harness_backend_required(FA_BACKEND_OPENCL))
        skip(); /* the OpenCL backend is not built in */
    assert_int_equal(st, OK);
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    fa_plan *pl = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &pl), OK);
    assert_int_equal(fa_plan_block_r(pl), 32);
    assert_int_equal(fa_plan_block_c(pl), 32);
    assert_int_equal(fa_plan_work_group_size(pl), 64);
    assert_non_null(strstr(fa_plan_explain(pl), "on-chip budget 32768 of 65536 bytes"));
    assert_non_null(strstr(fa_plan_explain(pl), "lanes: 2 work-items per query row"));
    fa_plan_destroy(pl);
    assert_int_equal(fa_plan_create_backward(ctx, &p, &pl), OK); /* budget and lanes */
    assert_true(fa_plan_sram_bytes(pl) <= 32768);
    assert_non_null(strstr(fa_plan_explain(pl), "lanes: 2 work-items per query row"));
    assert_int_equal(fa_plan_work_group_size(pl), 2 * fa_plan_block_r(pl));
    assert_int_equal(fa_plan_block_r(pl) % 2, 0); /* the dK/dV pass's lanes split Br rows */
    fa_plan_destroy(pl);
    backward_of_one_row(ctx);
    fa_buffer *b = NULL;
    assert_int_equal(fa_buffer_create(ctx, 64, &b), FA_STATUS_BACKEND_UNAVAILABLE);
    assert_null(b);
    assert_non_null(strstr(fa_context_last_error(ctx), "amd-gfx90a"));
    fa_context_destroy(ctx);

    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, "mali-g710", why,
                                                sizeof why), OK);
    assert_int_equal(fa_plan_create(ctx, &p, &pl), OK);
    assert_null(strstr(fa_plan_explain(pl), "on-chip budget"));
    assert_int_equal(fa_plan_work_group_size(pl), 2 * fa_plan_block_r(pl));
    assert_true(fa_plan_work_group_size(pl) >= 64);
    fa_plan_destroy(pl);
    fa_context_destroy(ctx);

    assert_int_equal(fa_context_create_planning(&ctx, FA_BACKEND_OPENCL, "gfx90a", why,
                                                sizeof why), FA_STATUS_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(why, "known: amd-gfx90a, amd-gfx1030"));
}

/* A fake backend's devices for fa__auto_device: 'c' a CPU, 'g' a GPU, 'x' one whose
 * properties fail (unavailable). */
static const char *fake_devices = "";

static fa_status fake_count(int *count, char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    *count = (int)strlen(fake_devices);
    return OK;
}

static fa_status fake_props(int index, fa_device_props *out, char *why, size_t why_size)
{
    if (fake_devices[index] == 'x') {
        snprintf(why, why_size, "%s", "the driver reports the device unavailable");
        return FA_STATUS_DEVICE_ERROR;
    }
    memset(out, 0, sizeof *out);
    out->gpu = fake_devices[index] == 'g';
    return OK;
}

static int auto_device_of(const char *devices, char *note, size_t size)
{
    static const fa__backend_ops fake = {.device_count = fake_count, .device_props = fake_props};
    fake_devices = devices;
    note[0] = '\0';
    return fa__auto_device(&fake, note, size);
}

/* AUTO takes the first GPU, passing over CPU runtimes listed first and unavailable devices. */
static void test_auto_device(void **state)
{
    (void)state;
    char note[512];
    assert_int_equal(auto_device_of("ccg", note, sizeof note), 2);
    assert_non_null(strstr(note, "device 2, the first GPU"));
    assert_int_equal(auto_device_of("xcgg", note, sizeof note), 2);
    assert_non_null(strstr(note, "device 0 skipped (FA_STATUS_DEVICE_ERROR: the driver"));
    assert_int_equal(auto_device_of("xc", note, sizeof note), 1);
    assert_non_null(strstr(note, "device 1, the first usable device (no GPU)"));
    /* Device 0 for its own sake adds nothing to the note. */
    assert_int_equal(auto_device_of("cc", note, sizeof note), 0);
    assert_string_equal(note, "");
    assert_int_equal(auto_device_of("gc", note, sizeof note), 0);
    assert_string_equal(note, "");
    assert_int_equal(auto_device_of("xx", note, sizeof note), 0); /* opening 0 says why */
    assert_non_null(strstr(note, "device 1 skipped"));
}

/* A fake device whose compiled kernel allows 32 work-items per work-group, as OpenCL's
 * CL_KERNEL_WORK_GROUP_SIZE may (registers, local memory): the core re-plans within it. */
static void fake_rules(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules)
{
    (void)dev;
    (void)p;
    (void)op;
    rules->shape.items_per_row = 1;
    rules->shape.tile_multiple = 8;
    rules->shape.max_block_c = 128;
}

static fa_status fake_prepare(fa_context *ctx, const fa_plan *plan, fa__launch *launch)
{
    (void)plan;
    if (launch->variant.work_group_size <= 32)
        return OK;
    launch->kernel_wg_limit = 32;
    return fa__error(ctx, FA_STATUS_UNSUPPORTED, "the compiled kernel allows 32 work-items");
}

static void fake_close(void *state)
{
    (void)state;
}

static void test_replan_on_kernel_limit(void **state)
{
    (void)state;
    static const fa__backend_ops fake = {.api_version = FA__BACKEND_API_VERSION,
                                         .backend = FA_BACKEND_OPENCL,
                                         .supported_ops = 1u << FA__OP_FORWARD,
                                         .plan_rules = fake_rules,
                                         .context_close = fake_close,
                                         .launch_prepare = fake_prepare};
    fa_device_props dev = gpu_device();
    fa_context *ctx = NULL;
    char why[256] = "";
    assert_int_equal(fa__context_adopt(&ctx, &fake, 0, NULL, &dev, why, sizeof why), OK);
    fa_problem p;
    fa_problem_init(&p, F32, FA_LAYOUT_BHSD, 1, 8, 8, 2048, 2048, 64);
    fa_plan *pl = NULL;
    /* The device allows 256: Br 64 first, then 32 within the kernel's limit. */
    assert_int_equal(fa_plan_create(ctx, &p, &pl), OK);
    assert_int_equal(fa_plan_block_r(pl), 32);
    assert_int_equal(fa_plan_work_group_size(pl), 32);
    assert_non_null(strstr(fa_plan_explain(pl), "re-planned within 32 work-items per "
                                                "work-group: FA_STATUS_UNSUPPORTED: the "
                                                "compiled kernel allows 32"));
    fa_plan_destroy(pl);
    /* An override past the kernel's limit stays refused, now saying which limit. */
    p.block_r = 64;
    pl = NULL;
    assert_int_equal(fa_plan_create(ctx, &p, &pl), FA_STATUS_INVALID_TILE);
    assert_null(pl);
    assert_non_null(strstr(fa_context_last_error(ctx), "override Br = 64 exceeds"));
    fa_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_floor_reached),
        cmocka_unit_test(test_floor_out_of_reach),
        cmocka_unit_test(test_floor_and_short_sequences),
        cmocka_unit_test(test_overrides_and_budget),
        cmocka_unit_test(test_lanes_fill_wavefronts),
        cmocka_unit_test(test_lanes_for_decode),
        cmocka_unit_test(test_profiles_fill_work_groups),
        cmocka_unit_test(test_opencl_profiles),
        cmocka_unit_test(test_auto_device),
        cmocka_unit_test(test_replan_on_kernel_limit),
    };
    return cmocka_run_group_tests_name("gpu_plans", tests, NULL, NULL);
}
