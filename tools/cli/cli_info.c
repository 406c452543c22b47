/*
 * cli_info.c - the `flashattn devices` and `flashattn plan` subcommands: what the library can
 * see, and which tiles it would choose for a problem and why (for the forward, or with
 * --backward for the backward pass, with the device bytes a backward run holds). Neither runs a
 * kernel.
 */
#include "cli_commands.h"
#include "cli_common.h"
#include "cli_memory.h"
#include "cli_modifiers.h"
#include "cli_plan_svg.h"
#include "cli_seq.h"
#ifdef FLASHATTN_WITH_CUDA
#include "flashattn_cuda.h"
#endif

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- devices ----------------------------------------------------------------------------- */

static void print_device(fa_backend backend, int index)
{
    char why[512] = "", sram[64], global[64];
    fa_device_props p;
    fa_status st;
    memset(&p, 0, sizeof p);
    st = fa_backend_device_props(backend, index, &p, why, sizeof why);
    if (st != FA_STATUS_OK) {
        printf("  device %d: unavailable (%s): %s\n", index, fa_status_name(st),
               *why ? why : fa_status_message(st));
        return;
    }
    p.name[sizeof p.name - 1] = '\0';
    p.vendor[sizeof p.vendor - 1] = '\0';
    p.arch[sizeof p.arch - 1] = '\0';
    cli_format_bytes(p.sram_bytes, sram, sizeof sram);
    if (p.global_mem_bytes)
        cli_format_bytes(p.global_mem_bytes, global, sizeof global);
    else
        snprintf(global, sizeof global, "unknown");
    printf("  device %d: %s\n", index, p.name);
    printf("    %-16s %s\n", "vendor", *p.vendor ? p.vendor : "-");
    printf("    %-16s %s\n", "sram", sram);
    printf("    %-16s %s\n", "global memory", global);
    printf("    %-16s %" PRIu32 "\n", "max work-group", p.max_work_group_size);
    printf("    %-16s %" PRIu32 "\n", "compute units", p.compute_units);
    /* Two separate facts, so "no" is not read as "f16 does not work": every backend stores
     * f16 and bf16 and converts them to f32 on load (docs/backends.md); fa_device_props only
     * says whether the hardware also computes in them (OpenCL: cl_khr_fp16; bf16 never). */
    printf("    %-16s yes / yes (converted to f32 on load)\n", "f16/bf16 storage");
    printf("    %-16s %s / %s (informational: the kernels compute in f32)\n", "f16/bf16 math",
           p.fp16 ? "yes" : "no", p.bf16 ? "yes" : "no");
    printf("    %-16s %s\n", "arch", *p.arch ? p.arch : "-");
    printf("    %-16s %s%s\n", "type", p.gpu ? "GPU" : "not a GPU",
           p.local_mem_global ? " (local memory is global memory)" : "");
    if (p.wg_multiple)
        printf("    %-16s %" PRIu32 " work-items\n", "lockstep width", p.wg_multiple);
    else
        printf("    %-16s unknown\n", "lockstep width");
}

/* Which NVRTC the CUDA backend compiles with for this driver, or why none suits it. */
static void print_cuda_compiler(void)
{
#ifdef FLASHATTN_WITH_CUDA
    char info[1024] = "";
    fa_status st = fa_cuda_compiler(info, sizeof info);
    printf("  compiler: %s%s\n", st == FA_STATUS_OK ? "" : "unusable: ", info);
#endif
}

/* One backend: its devices, or the reason it has none. Never an error exit. */
static void print_backend(fa_backend backend)
{
    char why[512] = "";
    int count = 0, i;
    fa_status st = fa_backend_device_count(backend, &count, why, sizeof why);
    const char *name = fa_backend_name(backend);
    if (st != FA_STATUS_OK) {
        if (st == FA_STATUS_BACKEND_UNAVAILABLE)
            printf("%s: unavailable: %s\n", name, *why ? why : fa_status_message(st));
        else
            printf("%s: unavailable (%s): %s\n", name, fa_status_name(st),
                   *why ? why : fa_status_message(st));
        return;
    }
    printf("%s: %d device%s\n", name, count, count == 1 ? "" : "s");
    if (backend == FA_BACKEND_CUDA)
        print_cuda_compiler();
    for (i = 0; i < count; i++)
        print_device(backend, i);
}

/* What --backend auto (and FLASHATTN_BACKEND / FLASHATTN_DEVICE) would run on, and why. */
static void print_auto_choice(int verbose)
{
    char why[512] = "", line[1024];
    fa_context *ctx = NULL;
    const char *note;
    fa_status st = fa_context_create(&ctx, NULL, why, sizeof why);
    if (st != FA_STATUS_OK) {
        printf("auto: no context (%s): %s\n", fa_status_name(st), *why ? why : "-");
        return;
    }
    note = fa_context_backend_note(ctx);
    cli_auto_note(strncmp(note, "auto: ", 6) == 0 ? note + 6 : note, verbose, line, sizeof line);
    printf("auto: %s device %d (%s)\n", fa_backend_name(fa_context_backend(ctx)),
           fa_context_device(ctx), line);
    fa_context_destroy(ctx);
}

int cli_cmd_devices(int argc, char **argv)
{
    static const cli_cmd cmd = {
        "devices", "[options]",
        "Lists every backend (cpu, opencl, cuda) with its devices and their properties.\n"
        "A backend that is not built in or finds no device is listed with the reason. The\n"
        "last line says which backend and device auto picks (a GPU first) and why."};
    fa_backend only = FA_BACKEND_AUTO;
    int verbose = 0;
    cli_opt opts[] = {
        {"backend", CLI_BACKEND, &only, 0, 0, "NAME", "list only this backend (default: all)", 0},
        {"verbose", CLI_FLAG, &verbose, 0, 0, NULL,
         "the auto line in full: each backend passed over and the whole reason", 0},
    };
    size_t n = sizeof opts / sizeof opts[0];
    int r = cli_parse(&cmd, argc, argv, opts, n);
    if (r == CLI_PARSE_HELP) {
        cli_print_help(&cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (r != CLI_PARSE_OK)
        return CLI_EXIT_USAGE;
    printf("flashattn %s\n", fa_version());
    for (int i = 0; i < fa_backend_count(); i++)
        if (only == FA_BACKEND_AUTO || only == fa_backend_at(i))
            print_backend(fa_backend_at(i));
    print_auto_choice(verbose);
    return CLI_EXIT_OK;
}

/* ---- plan -------------------------------------------------------------------------------- */

/* --arch (CUDA) or --profile (OpenCL): a context on a known device's props instead of a
 * device. */
static int open_arch_context(const cli_cmd *cmd, fa_backend backend, const char *arch,
                             const char *profile, fa_context **out)
{
    if (arch && profile)
        return cli_usage_error(cmd, "--arch and --profile exclude each other");
    if (arch && backend != FA_BACKEND_CUDA)
        return cli_usage_error(cmd, "--arch needs --backend cuda");
    if (profile && backend != FA_BACKEND_OPENCL)
        return cli_usage_error(cmd, "--profile needs --backend opencl");
    if (profile)
        arch = profile;
    char why[512] = "";
    fa_status st = fa_context_create_planning(out, backend, arch, why, sizeof why);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, NULL, why);
}

/*
 * The backward's memory formula with the numbers: every tensor a backward run holds (the
 * forward's Q, K, V, O and LSE, which it reads, and dO, dQ, dK, dV), plus the plan's scratch,
 * is the peak device bytes (what `run --backward` measures).
 */
static void print_backward_memory(const fa_plan *plan)
{
    cli_backward_memory m;
    char peak[64];
    cli_backward_memory_of(fa_plan_problem(plan), fa_plan_scratch_bytes(plan), &m);
    cli_format_bytes(m.peak, peak, sizeof peak);
    printf("%-13s Q %" PRIu64 " + K %" PRIu64 " + V %" PRIu64 " + O %" PRIu64 " + dO %" PRIu64
           " + dQ %" PRIu64 " + dK %" PRIu64 " + dV %" PRIu64 " + LSE %" PRIu64
           " (4*B*Hq*Sq) = %" PRIu64 " B\n",
           "tensors", m.q, m.k, m.v, m.o, m.d_o, m.dq, m.dk, m.dv, m.lse, m.tensors);
    printf("%-13s %" PRIu64 " B (fa_plan_scratch_bytes)\n", "scratch", m.scratch);
    printf("%-13s tensors %" PRIu64 " B + scratch %" PRIu64 " B = %s\n", "peak memory",
           m.tensors, m.scratch, peak);
}

/* How `plan` reports: auto's pick and its note (in full with --verbose), the layout's name,
 * and the backward's memory formula with --backward. */
typedef struct plan_print {
    int picked, backward, verbose;
    fa_layout layout;
    const char *svg;    /* --svg FILE, or NULL */
    cli_bm_args bm;     /* --block-mask, --block-pattern */
    cli_bm_data bm_data; /* the mask and its lists */
} plan_print;

static void print_plan(const fa_context *ctx, const plan_print *pp, const fa_plan *plan,
                       const cli_seq_args *seq, const cli_tile_map *m)
{
    char line[1024], sram[64];
    const char *explain = fa_plan_explain(plan);
    int backward = pp->backward;
    cli_describe_context(ctx, pp->picked, line, sizeof line);
    printf("%-13s %s\n", "backend", line);
    const char *note = fa_context_backend_note(ctx); /* "auto: " and why, when auto picked */
    if (strncmp(note, "auto: ", 6) == 0) {
        cli_auto_note(note + 6, pp->verbose, line, sizeof line);
        printf("%-13s %s\n", "auto", line);
    }
    cli_describe_problem(fa_plan_problem(plan), pp->layout, line, sizeof line);
    printf("%-13s %s\n", "problem", line);
    cli_mod_describe(fa_plan_problem(plan), line, sizeof line);
    printf("%-13s %s\n", "modifiers", line);
    cli_seq_describe(fa_plan_problem(plan), seq, fa_plan_kv_splits(plan), line, sizeof line);
    printf("%-13s %s\n", "sequences", line);
    if (backward)
        printf("%-13s backward: dO -> dQ, dK, dV\n", "pass");
    printf("%-13s %" PRId32 "\n", "Br", fa_plan_block_r(plan));
    printf("%-13s %" PRId32 "\n", "Bc", fa_plan_block_c(plan));
    printf("%-13s %" PRId32 "\n", "work-group", fa_plan_work_group_size(plan));
    cli_format_bytes(fa_plan_sram_bytes(plan), sram, sizeof sram);
    printf("%-13s %s\n", "sram", sram);
    printf("%-13s %" PRIu64 "\n", "work-groups", fa_plan_work_groups(plan));
    printf("%-13s %" PRId32 "\n", "kv splits", fa_plan_kv_splits(plan));
    if (backward)
        print_backward_memory(plan);
    cli_plan_tiles_print(plan, &pp->bm, &pp->bm_data, m);
    if (explain && *explain) {
        size_t len = strlen(explain);
        printf("\nexplanation:\n%s%s", explain, explain[len - 1] == '\n' ? "" : "\n");
    }
}

/* Plans p on ctx (the backward's plan with pp->backward) and prints the plan. */
/* Plans p on ctx (the backward's plan with pp->backward), prints the plan and its tiles, and
 * with --svg draws them. */
static int plan_and_print(fa_context *ctx, const fa_problem *p, const plan_print *pp,
                          const cli_seq_args *seq)
{
    fa_plan *plan = NULL;
    cli_tile_map m;
    fa_status st = pp->backward ? fa_plan_create_backward(ctx, p, &plan)
                                : fa_plan_create(ctx, p, &plan);
    int r = st == FA_STATUS_OK ? 0 : cli_plan_error(st, ctx, p);
    memset(&m, 0, sizeof m);
    if (r == 0)
        r = cli_tile_map_make(plan, &pp->bm_data, &m);
    if (r == 0)
        print_plan(ctx, pp, plan, seq, &m);
    if (r == 0 && pp->svg) {
        r = cli_plan_svg_write(pp->svg, plan, &pp->bm_data, &m);
        if (r == 0)
            printf("%-13s %s\n", "wrote SVG", pp->svg);
    }
    cli_tile_map_free(&m);
    fa_plan_destroy(plan);
    return r;
}

/* The problem of `plan`'s options: shape, modifiers (their files read for the shapes only) and
 * sequences; 0, or the exit status (printed). */
static int plan_problem(const cli_cmd *cmd, cli_problem_args *pa, const cli_mod_args *mods,
                        const cli_seq_args *seq, plan_print *pp, const cli_opt *opts, size_t n,
                        fa_problem *p)
{
    cli_mod_files files;
    int r;
    memset(&files, 0, sizeof files);
    cli_problem_resolve(pa, opts, n);
    if (cli_problem_build(pa, p) != 0 || cli_mod_load(mods, &files) != 0) {
        cli_mod_files_free(&files);
        return CLI_EXIT_FAIL;
    }
    r = cli_mod_apply(cmd, mods, &files, p);
    cli_mod_files_free(&files); /* the plan needs the shapes only */
    r = r ? r : cli_seq_apply(cmd, seq, p);
    return r ? r : cli_bm_apply(&pp->bm, p, &pp->bm_data);
}

int cli_cmd_plan(int argc, char **argv)
{
    static const cli_cmd cmd = {
        "plan", "[--backend B] [--seq N] [--dim D] [options]",
        "Creates a context and a tile plan for one problem and prints Br, Bc, the work-group\n"
        "size, the on-chip bytes, the number of work-groups and the planner's reasoning.\n"
        "--backward plans the backward pass instead (fa_plan_create_backward) and adds its\n"
        "memory formula: tensors (Q, K, V, O, dO, dQ, dK, dV and LSE) + scratch = peak device\n"
        "bytes. With --backend cuda --arch sm_XY, or --backend opencl --profile NAME, it\n"
        "plans for a known GPU instead of a device, so it needs no GPU. The score modifier\n"
        "and dropout options are those of `run` (see flashattn run --help); the plan prints\n"
        "which are on. So are the decoding options --seqlens-k, --paged and --kv-splits: the\n"
        "plan prints its kv splits (fa_plan_kv_splits) and the explanation says why.\n"
        "Every plan prints its tiles of batch 0, head 0 (computed, partly masked by the causal\n"
        "mask, the window or a block mask's edge, skipped) and the bytes the flash loop moves\n"
        "against naive attention's; --svg FILE draws them. --block-mask or --block-pattern\n"
        "with --block-size (those of `run`) add the mask's density, what it saves and how the\n"
        "tiles sit on its blocks."};
    cli_problem_args pa;
    fa_backend backend = FA_BACKEND_AUTO;
    int64_t device = 0;
    const char *arch = NULL, *profile = NULL;
    plan_print pp;
    cli_mod_args mods;
    cli_seq_args seq;
    cli_opt opts[CLI_PROBLEM_NOPTS + 7 + CLI_SEQ_NOPTS + CLI_MOD_NOPTS + CLI_BM_NOPTS] = {
        {"backend", CLI_BACKEND, &backend, 0, 0, "B", "auto, cpu, opencl or cuda (default auto)",
         0},
        {"device", CLI_INT, &device, 0, INT32_MAX, "N", "device index (default 0)", 0},
        {"arch", CLI_STRING, &arch, 0, 0, "SM",
         "cuda only: plan for sm_75, sm_80, sm_86, sm_89 or sm_90 without a device", 0},
        {"profile", CLI_STRING, &profile, 0, 0, "NAME",
         "opencl only: plan for amd-gfx90a, amd-gfx1030, intel-xe, nvidia-sm80, mali-g710 or "
         "adreno-740 without a device", 0},
        {"backward", CLI_FLAG, &pp.backward, 0, 0, NULL,
         "plan the backward pass (dO -> dQ, dK, dV); print its memory formula", 0},
        {"verbose", CLI_FLAG, &pp.verbose, 0, 0, NULL,
         "the auto line in full: each backend passed over and the whole reason", 0},
        {"svg", CLI_STRING, &pp.svg, 0, 0, "FILE",
         "draw the plan's tiles over the score matrix as SVG (computed, masked, skipped)", 0},
    };
    const size_t n = sizeof opts / sizeof opts[0];
    fa_context *ctx = NULL;
    fa_problem p;
    int r;

    memset(&pp, 0, sizeof pp);
    pp.layout = FA_LAYOUT_BHSD;
    cli_problem_defaults(&pa);
    cli_problem_opts(&pa, opts + 7);
    cli_bm_defaults(&pp.bm);
    cli_bm_opts(&pp.bm, opts + 7 + CLI_PROBLEM_NOPTS + CLI_SEQ_NOPTS + CLI_MOD_NOPTS);
    cli_mod_defaults(&mods);
    cli_seq_defaults(&seq);
    cli_seq_opts(&seq, opts + 7 + CLI_PROBLEM_NOPTS);
    cli_mod_opts(&mods, opts + 7 + CLI_PROBLEM_NOPTS + CLI_SEQ_NOPTS);
    r = cli_parse(&cmd, argc, argv, opts, n);
    if (r == CLI_PARSE_HELP) {
        cli_print_help(&cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (r != CLI_PARSE_OK || cli_mod_validate(&cmd, &mods, opts, n) != 0 ||
        cli_seq_validate(&cmd, &seq, opts, n) != 0 || cli_bm_validate(&cmd, &pp.bm) != 0) {
        cli_seq_args_free(&seq);
        return CLI_EXIT_USAGE;
    }
    r = plan_problem(&cmd, &pa, &mods, &seq, &pp, opts, n, &p);
    if (r == 0)
        r = arch || profile ? open_arch_context(&cmd, backend, arch, profile, &ctx)
                 : cli_context_open(backend, (int)device, &ctx);
    if (r != 0) {
        cli_seq_args_free(&seq);
        cli_bm_data_free(&pp.bm_data);
        return r;
    }
    pp.picked = backend == FA_BACKEND_AUTO;
    pp.layout = pa.layout;
    r = plan_and_print(ctx, &p, &pp, &seq);
    cli_seq_args_free(&seq);
    cli_bm_data_free(&pp.bm_data);
    fa_context_destroy(ctx);
    return r;
}
