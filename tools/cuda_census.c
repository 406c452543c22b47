/*
 * cuda_census.c - the CUDA kernels' resource census without a GPU: plans a production grid
 * (forward prefill, decode of 16 heads and of 16 in GQA groups of 4, backward, prefill and
 * backward with the score modifiers and dropout, the tensor-core prefill's pipelined variant,
 * block-sparse prefill (also pipelined) and backward with full lists; f16, bf16, f32; several
 * head dims) on the known props of
 * each architecture, compiles each distinct module with NVRTC and ptxas --verbose, and prints
 * per launch the registers, spill stores / loads, stack frame and shared memory, with an
 * estimate of blocks per SM (the least of registers, shared memory, threads and 16 allow;
 * register allocation granularity ignored). A spill
 * or stack frame not listed in the known list (tools/cuda_known_spills.txt: one line per
 * "arch entry options", then '#' and its reason) fails the run.
 *
 * usage: cuda_census KNOWN_LIST   (CENSUS_ALL=1: every arch, dtype and head dim of the grid;
 *                                  default: a sample, sm_80 and sm_90, d 64 and 128, f16 and
 *                                  f32, which keeps CI to a few minutes; CENSUS_ARCH=sm_90: that
 *                                  arch alone)
 * FLASHATTN_NVRTC_SAMPLE=1 (the sanitizer tree): sm_80, d 64, f16 only.
 * Exit: 0 clean, 1 an unlisted spill or a failed compile, 77 without NVRTC.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-SM limits of the example parts (registers 64 Ki everywhere). */
typedef struct arch_sm {
    const char *arch;
    unsigned smem_per_sm; /* bytes */
    unsigned threads_per_sm;
} arch_sm;

static const arch_sm all_archs[] = {{"sm_75", 64 * 1024, 1024},
                                    {"sm_80", 164 * 1024, 2048},
                                    {"sm_86", 100 * 1024, 1536},
                                    {"sm_90", 228 * 1024, 2048}};

typedef struct usage {
    long regs, spill_st, spill_ld, stack;
} usage;

/* The numbers ptxas printed for one entry point, from NVRTC's log. */
static usage parse_usage(const char *log, const char *entry)
{
    usage u = {-1, 0, 0, 0};
    char key[128];
    snprintf(key, sizeof key, "Function properties for %s\n", entry);
    const char *f = strstr(log, key);
    if (f)
        sscanf(f + strlen(key), " %ld bytes stack frame, %ld bytes spill stores, %ld bytes spill "
                                "loads", &u.stack, &u.spill_st, &u.spill_ld);
    snprintf(key, sizeof key, "Compiling entry function '%s'", entry);
    const char *c = strstr(log, key), *used = c ? strstr(c, "Used ") : NULL;
    if (used)
        sscanf(used, "Used %ld registers", &u.regs);
    return u;
}

/* Whether "arch entry options" starts a line of the known list. */
static int listed(const char *known, const char *arch, const char *entry, const char *options)
{
    char line[512];
    snprintf(line, sizeof line, "%s %s %s", arch, entry, options);
    size_t n = strlen(line);
    for (const char *p = known; p && *p;) {
        if (strncmp(p, line, n) == 0 && (p[n] == ' ' || p[n] == '#'))
            return 1;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return 0;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 1 << 20);
    if (buf)
        buf[fread(buf, 1, (1 << 20) - 1, f)] = '\0';
    fclose(f);
    return buf;
}

static long blocks_per_sm(const arch_sm *a, long regs, long wg, uint64_t smem)
{
    long by_regs = regs > 0 ? 65536 / (regs * wg) : 0;
    long by_smem = smem ? (long)(a->smem_per_sm / smem) : 32;
    long by_threads = (long)a->threads_per_sm / wg, best = by_regs;
    if (by_smem < best)
        best = by_smem;
    if (by_threads < best)
        best = by_threads;
    return best < 16 ? best : 16; /* resident blocks per SM: 16 on sm_75, 32 later; 16 kept */
}

/* Compiles and reports every launch of one plan; returns the number of failures. */
static int census_plan(const arch_sm *a, const fa_plan *plan, const char *what,
                       const char *known)
{
    int bad = 0;
    for (int i = 0; i < plan->n_launches; i++) {
        const fa__launch *l = &plan->launches[i];
        char options[256], *log = NULL;
        fa__variant_defines(&l->variant, "-D", options, sizeof options);
        const char *entry = fa__kernel_entry(l->variant.kernel);
        fa_status st = fa__cuda_resource_log(a->arch, l->variant.kernel, options, &log);
        if (st != FA_STATUS_OK) {
            printf("FAIL %s %s %s: %s\n", a->arch, entry, options, log ? log : "");
            free(log);
            bad++;
            continue;
        }
        usage u = parse_usage(log, entry);
        free(log);
        long wg = l->variant.work_group_size;
        uint64_t smem = fa__cu_launch_shared(l);
        int spill = u.spill_st > 0 || u.spill_ld > 0 || u.stack > 0;
        int ok = !spill || listed(known, a->arch, entry, options);
        printf("%-5s %-16s %-28s %3ld regs  spill %4ld/%4ld B  stack %4ld B  smem %6llu B  "
               "wg %4ld  %2ld blocks/SM%s\n       %s\n",
               a->arch, entry, what, u.regs, u.spill_st, u.spill_ld, u.stack,
               (unsigned long long)smem, wg, blocks_per_sm(a, u.regs, wg, smem),
               spill ? (ok ? "  (known)" : "  UNLISTED SPILL") : "", options);
        bad += ok ? 0 : 1;
        bad += u.regs < 0 ? 1 : 0; /* the log did not name the entry */
    }
    return bad;
}

typedef struct shape {
    const char *name;
    int64_t seq_q, seq_k;
    int backward;
    int64_t heads_kv; /* of 16 query heads */
    int mods;         /* 1: softcap, ALiBi, a window, sinks and dropout (no bias: it needs a
                         tensor) */
    int pipelined;    /* 1: planned with FLASHATTN_CUDA_PIPELINE=1 */
    int sparse;       /* 1: block-sparse, blocks of 64, with full lists (SPARSE_FULL) */
} shape;

/* The score modifiers and dropout that a shape's `mods` turns on. */
static void mods_on(fa_problem *p)
{
    p->softcap = 30.0f;
    p->alibi = 1;
    p->window = 1;
    p->window_left = 256;
    p->window_right = 0;
    p->sinks = 1;
    p->dropout_p = 0.1f;
    p->dropout_seed = 42;
}

/* Block-sparse lists of 64 x 64 blocks, broadcast, with the full pair. */
static void sparse_on(fa_problem *p)
{
    p->block_sparse = 1;
    p->sparse_block_q = p->sparse_block_k = 64;
    p->sparse_batch = p->sparse_heads = 1;
    p->sparse_full = 1;
}

int main(int argc, char **argv)
{
    char *known = argc > 1 ? read_all(argv[1]) : NULL;
    if (argc > 1 && !known) {
        fprintf(stderr, "cuda_census: cannot read %s\n", argv[1]);
        return 1;
    }
    fa__nvrtc_api nv;
    char why[1024] = "";
    if (fa__nvrtc_load(&nv, 0, why, sizeof why) != FA_STATUS_OK) {
        fprintf(stderr, "SKIP: cuda_census: %s\n", why);
        free(known);
        return 77;
    }
    const int all = getenv("CENSUS_ALL") && strcmp(getenv("CENSUS_ALL"), "1") == 0;
    const char *only_arch = getenv("CENSUS_ARCH"); /* one arch of the grid, e.g. sm_90 */
    /* The sanitizer tree (scripts/test.sh) checks the host code: one arch, d and dtype. */
    const char *sample = getenv("FLASHATTN_NVRTC_SAMPLE");
    const int tiny = !all && sample && strcmp(sample, "1") == 0;
    const shape shapes[] = {{"prefill", 4096, 4096, 0, 16, 0, 0, 0},
                            {"prefill+mods", 4096, 4096, 0, 16, 1, 0, 0},
                            {"prefill-pipelined", 4096, 4096, 0, 16, 0, 1, 0},
                            {"decode", 1, 4096, 0, 16, 0, 0, 0},
                            {"decode-gqa4", 1, 4096, 0, 4, 0, 0, 0},
                            {"backward", 4096, 4096, 1, 16, 0, 0, 0},
                            {"backward+mods", 4096, 4096, 1, 16, 1, 0, 0},
                            {"prefill+sparse", 4096, 4096, 0, 16, 0, 0, 1},
                            {"prefill-pipelined+sparse", 4096, 4096, 0, 16, 0, 1, 1},
                            {"backward+sparse", 4096, 4096, 1, 16, 0, 0, 1}};
    const size_t n_shapes = sizeof shapes / sizeof shapes[0];
    const int64_t dims_all[] = {32, 64, 96, 128, 160, 256}, dims_sample[] = {64, 128};
    const size_t n_dims = all ? 6u : tiny ? 1u : 2u;
    const fa_dtype dtypes_all[] = {FA_DTYPE_F16, FA_DTYPE_BF16, FA_DTYPE_F32},
                   dtypes_sample[] = {FA_DTYPE_F16, FA_DTYPE_F32};
    printf("cuda_census: NVRTC %d.%d (%s), %s grid\n", nv.version / 1000,
           nv.version % 1000 / 10, nv.library, all ? "the whole" : "a sampled");
    int bad = 0;
    for (size_t ai = 0; ai < sizeof all_archs / sizeof all_archs[0]; ai++) {
        const arch_sm *a = &all_archs[ai];
        if (!all && strcmp(a->arch, "sm_80") != 0 && (tiny || strcmp(a->arch, "sm_90") != 0))
            continue;
        if (only_arch && strcmp(a->arch, only_arch) != 0)
            continue;
        fa_context *ctx = NULL;
        if (fa_context_create_planning(&ctx, FA_BACKEND_CUDA, a->arch, why, sizeof why) != 0) {
            printf("FAIL %s: %s\n", a->arch, why);
            bad++;
            continue;
        }
        for (size_t di = 0; di < n_dims; di++)
            for (size_t ti = 0; ti < (all ? 3u : tiny ? 1u : 2u); ti++)
                for (size_t si = 0; si < n_shapes; si++) {
                    int64_t d = all ? dims_all[di] : dims_sample[di];
                    fa_dtype dt = all ? dtypes_all[ti] : dtypes_sample[ti];
                    const shape *sh = &shapes[si];
                    fa_problem p;
                    fa_plan *plan = NULL;
                    char what[64];
                    snprintf(what, sizeof what, "%s %s d%lld", sh->name, fa_dtype_name(dt),
                             (long long)d);
                    fa_status st = fa_problem_init(&p, dt, FA_LAYOUT_BHSD, 1, 16, sh->heads_kv,
                                                   sh->seq_q, sh->seq_k, d);
                    if (st == FA_STATUS_OK && sh->mods)
                        mods_on(&p);
                    if (st == FA_STATUS_OK && sh->sparse)
                        sparse_on(&p);
                    if (sh->pipelined && setenv("FLASHATTN_CUDA_PIPELINE", "1", 1) != 0)
                        st = FA_STATUS_OUT_OF_MEMORY;
                    if (st == FA_STATUS_OK)
                        st = sh->backward ? fa_plan_create_backward(ctx, &p, &plan)
                                          : fa_plan_create(ctx, &p, &plan);
                    if (sh->pipelined)
                        unsetenv("FLASHATTN_CUDA_PIPELINE");
                    if (st == FA_STATUS_OK && sh->pipelined && !plan->launches[0].variant.mma) {
                        fa_plan_destroy(plan); /* CUDA cores: the same kernels as "prefill" */
                        continue;
                    }
                    if (st != FA_STATUS_OK) {
                        printf("FAIL %s %s: %s\n", a->arch, what, fa_context_last_error(ctx));
                        bad++;
                        continue;
                    }
                    bad += census_plan(a, plan, what, known);
                    fa_plan_destroy(plan);
                }
        fa_context_destroy(ctx);
    }
    free(known);
    printf("cuda_census: %s\n", bad ? "FAILED (unlisted spills or failed compiles above)"
                                    : "no unlisted spill");
    return bad ? 1 : 0;
}
