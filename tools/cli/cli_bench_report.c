/*
 * cli_bench_report.c - the reports of `flashattn bench` (see cli_bench_report.h): the aligned
 * table on stdout (streamed row by row, so a long sweep shows its results as they come) and the
 * CSV file. The figure is in cli_bench_plot.c.
 *
 * Every number in the reports comes from a bench_point; nothing is recomputed here except the
 * derived ratios (GFLOP/s, speedup, memory ratio), so the table, the CSV and the figure agree.
 */
#include "cli_bench_report.h"
#include "cli_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table's columns: one format for the header and the rows, so they stay aligned. */
#define ROW_FMT "%-7s %-5s %-12s %4s %6s | %10s %8s %8s | %10s %8s %8s | %8s %7s | %-12s %-9s | " \
                "%10s %8s %8s %-9s\n"

static double gflops(const bench_point *pt, const bench_path *p)
{
    return p->state == BENCH_OK && p->ms > 0.0 ? pt->flops / (p->ms * 1e6) : 0.0;
}

/* ---- table ------------------------------------------------------------------------------- */

/* "512.0K", "16.0M", "2.00G", "1.50T": compact sizes for the table (the CSV has exact bytes). */
static void compact_bytes(uint64_t b, char *buf, size_t size)
{
    const double k = 1024.0;
    double v = (double)b;
    if (v < k * k)
        snprintf(buf, size, "%.1fK", v / k);
    else if (v < k * k * k)
        snprintf(buf, size, "%.1fM", v / (k * k));
    else if (v < k * k * k * k)
        snprintf(buf, size, "%.2fG", v / (k * k * k));
    else
        snprintf(buf, size, "%.2fT", v / (k * k * k * k));
}

/* The time, GFLOP/s and peak cells of one path; where it is OOM, the peak cell shows the bytes
 * it would have needed (when known). */
static void path_cells(const bench_point *pt, const bench_path *p, char ms[16], char gf[16],
                       char peak[16])
{
    static const char *const words[] = {"", "OOM", "skip", "error", "n/a"};
    snprintf(gf, 16, "-");
    snprintf(peak, 16, "-");
    if (p->state != BENCH_OK) {
        snprintf(ms, 16, "%s", words[p->state]);
        if (p->state == BENCH_OOM && p->need)
            compact_bytes(p->need, peak, 16);
        return;
    }
    snprintf(ms, 16, "%.2f", p->ms);
    if (p->ms > 0.0)
        snprintf(gf, 16, "%.2f", gflops(pt, p));
    compact_bytes(p->peak, peak, 16);
}

static void err_cell(const bench_path *p, char *buf, size_t size)
{
    if (p->check == BENCH_CHECK_IS_REF)
        snprintf(buf, size, "ref");
    else if (p->check != BENCH_CHECK_DONE)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.1e%s", p->err, p->fail ? " FAIL" : "");
}

void bench_print_header(const bench_run *r)
{
    int i;
    printf("# %s\n# date     %s\n", r->cmdline, r->date);
    for (i = 0; i < r->ndevs; i++)
        printf("# device   %s\n", r->devs[i].desc);
    if (r->unavailable[0])
        printf("# skipped  %s\n", r->unavailable);
    printf("# problem  batch %" PRId64 ", heads %" PRId64 ", Sq = Sk = seq, contiguous bhsd, "
           "scale 1/sqrt(dim), random inputs (seed %" PRIu64 ")\n",
           r->a.batch, r->a.heads, r->a.seed);
    printf("# timing   median of %" PRId64 " after 1 warm-up; a path estimated over %g s is "
           "skipped\n", r->a.repeat, (double)r->a.max_seconds);
    if (r->pass == BENCH_PASS_BWD)
        printf("# pass     bwd: fa_backward (dO -> dQ, dK, dV) after one untimed fa_forward "
               "that writes O and LSE; naive: its backward from the P of an untimed forward\n");
    else if (r->pass == BENCH_PASS_FWD_BWD)
        printf("# pass     fwd+bwd: fa_forward then fa_backward (dO -> dQ, dK, dV), timed "
               "together; naive: its forward then its backward\n");
    if (r->pass == BENCH_PASS_FWD)
        printf("# naive    S/P in one f32 buffer of 4*B*H*seq^2 bytes, capped at %" PRIu64
               " bytes; golden check up to seq %" PRId64 "\n",
               r->a.naive_max_bytes, r->a.check_max_seq);
    else
        printf("# naive    P and dP in two f32 buffers of 4*B*H*seq^2 bytes, each capped at "
               "%" PRIu64 " bytes; golden check up to seq %" PRId64 "\n",
               r->a.naive_max_bytes, r->a.check_max_seq);
    bench_mods_header(r);
    printf("# gemm     %s%s\n\n", bench_gemm_note(),
           !naive_clblast_info() ? ""
           : r->a.gemm_params    ? "; Xgemm parameters from --gemm-params"
                                 : "; CLBlast's own Xgemm parameters for the device");
    printf(ROW_FMT, "backend", "dtype", "mask", "dim", "seq", "flash ms", "GFLOP/s", "peak",
           "naive ms", "GFLOP/s", "peak", "speedup", "mem", "err flash", "err naive", "gemm ms",
           "GFLOP/s", "vs gemm", "err gemm");
}

/* "2.31x": baseline ms / flash ms, or "-" where either did not run. */
static void speedup_cell(const bench_path *f, const bench_path *base, char *buf, size_t size)
{
    snprintf(buf, size, "-");
    if (f->state == BENCH_OK && base->state == BENCH_OK && f->ms > 0.0)
        snprintf(buf, size, "%.2fx", base->ms / f->ms);
}

void bench_print_row(const bench_run *r, const bench_point *pt)
{
    char fms[16], fgf[16], fpk[16], nms[16], ngf[16], npk[16], gms[16], ggf[16], gpk[16];
    char dim[16], seq[24], speed[24], gspeed[24], mem[24] = "-", ferr[32], nerr[32], gerr[32];
    const bench_path *f = &pt->flash, *n = &pt->naive, *g = &pt->gemm;
    path_cells(pt, f, fms, fgf, fpk);
    path_cells(pt, n, nms, ngf, npk);
    path_cells(pt, g, gms, ggf, gpk); /* its peak is the naive one's: the CSV has it */
    speedup_cell(f, n, speed, sizeof speed);
    speedup_cell(f, g, gspeed, sizeof gspeed);
    err_cell(g, gerr, sizeof gerr);
    /* A baseline that is n/a has no memory to compare, not the bytes it would need. */
    if (f->state == BENCH_OK && f->peak > 0 &&
        (n->state == BENCH_OK || (n->state != BENCH_NA && n->need)))
        snprintf(mem, sizeof mem, "%.1fx",
                 (double)(n->state == BENCH_OK ? n->peak : n->need) / (double)f->peak);
    err_cell(f, ferr, sizeof ferr);
    err_cell(n, nerr, sizeof nerr);
    snprintf(dim, sizeof dim, "%" PRId64, pt->dim);
    snprintf(seq, sizeof seq, "%" PRId64, pt->seq);
    printf(ROW_FMT, fa_backend_name(r->devs[pt->dev].backend), fa_dtype_name(pt->dtype),
           fa_mask_name(pt->mask), dim, seq, fms, fgf, fpk, nms, ngf, npk, speed, mem, ferr,
           nerr, gms, ggf, gspeed, gerr);
}

/* The notes under the table, one array per pass; the OOM and check words are the same. */
static const char *const fwd_notes[] = {
    "GFLOP/s: 4*B*H*seq^2*dim (half when causal) / time. speedup = naive ms / flash ms.",
    "peak: device bytes of that path alone (Q, K, V, O and any scratch or S/P), from",
    "  fa_context_memory after fa_context_reset_peak; the naive OpenCL buffers are made by",
    "  the tool (the interop API cannot expose the cl_mem of fa_buffer_create) and counted",
    "  by it. mem = naive peak / flash peak; where a path is OOM, its peak column (and the",
    "  ratio) show the device bytes it would have needed.",
    "OOM: does not fit: the naive S/P buffer (--naive-max-bytes or the device's limits), or",
    "  the point in the host's or the device's memory (then neither path runs; stderr says",
    "  how many bytes it needs and how many are available).",
    "skip: estimated over --max-seconds. n/a: no naive attention for that backend (cuda),",
    "  or a score modifier or dropout is on (the baselines have none).",
    "err: max |O - O_golden| against the CPU golden backend (fp64 accumulation); '-': not",
    "  checked (above --check-max-seq); 'ref': the flash path on cpu is the golden itself;",
    "  FAIL: above the tolerance of `run --check`, or NaN/inf where the golden differs (inf).",
    "gemm: the same naive attention with S = Q K^T and O = P V on CLBlast's SGEMM and a",
    "  softmax kernel (which applies the mask) between them, on the flash path's device and",
    "  queue: the paper's \"standard attention\". vs gemm = gemm ms / flash ms. Its GEMMs",
    "  compute the masked scores too, as a framework's attention does. n/a: not opencl, not",
    "  f32 (CLBlast's HGEMM would compute in f16; there is no bf16 GEMM), or not built.",
    NULL,
};

static const char *const bwd_notes[] = {
    "GFLOP/s: 4*B*H*seq^2*dim (half when causal) times 2.5 for bwd, 3.5 for fwd+bwd, / time:",
    "  the backward counted as 2.5 forwards, as FlashAttention-2 counts it.",
    "  speedup = naive ms / flash ms.",
    "peak: device bytes of that path alone, from fa_context_memory after fa_context_reset_peak:",
    "  flash holds Q, K, V, O, LSE, dO, dQ, dK, dV and the plan's scratch",
    "  (fa_plan_scratch_bytes; `flashattn plan --backward` prints the formula), naive the",
    "  same tensors but LSE, and P and dP (the naive OpenCL buffers are counted by the tool).",
    "  mem = naive peak / flash peak; where a path is OOM, its peak column (and the ratio)",
    "  show the device bytes it would have needed.",
    "OOM: does not fit: a naive P or dP buffer (--naive-max-bytes, each, or the device's",
    "  limits), or the point in the host's or the device's memory (then neither path runs;",
    "  stderr says how many bytes it needs and how many are available).",
    "skip: estimated over --max-seconds. n/a: no naive backward for that backend (cuda),",
    "  or a score modifier or dropout is on (the baselines have none).",
    "  A backend without a backward pass is an error of the flash path (stderr says so).",
    "err: the largest max |x - x_golden| of dQ, dK and dV (and O for fwd+bwd) against the CPU",
    "  golden backend, each tensor checked by the rule of `run --check` against its own",
    "  largest magnitude; '-': not checked (above --check-max-seq); 'ref': the flash path on",
    "  cpu is the golden itself; FAIL: above the tolerance, or NaN/inf where the golden differs.",
    "gemm: the CLBlast naive attention is forward only: n/a here.",
    NULL,
};

void bench_print_footer(const bench_run *r)
{
    const char *const *notes = r->pass == BENCH_PASS_FWD ? fwd_notes : bwd_notes;
    size_t i, failed = 0;
    printf("\n");
    for (i = 0; notes[i]; i++)
        printf("# %s\n", notes[i]);
    for (i = 0; i < r->npoints; i++)
        failed += r->points[i].flash.state == BENCH_OOM ||
                  r->points[i].flash.state == BENCH_FAILED || r->points[i].flash.fail;
    if (failed)
        printf("# FAILED: the flash path was not measured or failed its check at %zu point%s "
               "(see stderr); exit status 1\n", failed, failed == 1 ? "" : "s");
}

/* ---- CSV --------------------------------------------------------------------------------- */

static const char *state_word(const bench_path *p)
{
    switch (p->state) {
    case BENCH_OK:
        return "ok";
    case BENCH_OOM:
        return "oom";
    case BENCH_SKIPPED:
        return "skipped";
    case BENCH_NA:
        return "unsupported";
    default:
        return fa_status_name(p->status);
    }
}

/* A field quoted for CSV (device names may hold commas). */
static void csv_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* state, ms, GFLOP/s, peak bytes of one path; empty fields where it did not run. */
static void csv_path(FILE *f, const bench_point *pt, const bench_path *p)
{
    fprintf(f, ",%s", state_word(p));
    if (p->state == BENCH_OK)
        fprintf(f, ",%.4f,%.4f,%" PRIu64, p->ms, gflops(pt, p), p->peak);
    else
        fprintf(f, ",,,");
}

static void csv_err(FILE *f, const bench_path *p)
{
    if (p->check == BENCH_CHECK_IS_REF)
        fprintf(f, ",ref");
    else if (p->check == BENCH_CHECK_DONE)
        fprintf(f, ",%.6e", p->err);
    else
        fprintf(f, ",");
}

/* The CLBlast path's columns, appended after the older ones so their positions stay: state,
 * ms, GFLOP/s, peak bytes, speedup (gemm ms / flash ms), err. */
static void csv_gemm(FILE *f, const bench_point *pt)
{
    const bench_path *fl = &pt->flash, *g = &pt->gemm;
    csv_path(f, pt, g);
    if (fl->state == BENCH_OK && g->state == BENCH_OK && fl->ms > 0.0)
        fprintf(f, ",%.4f", g->ms / fl->ms);
    else
        fprintf(f, ",");
    csv_err(f, g);
    fprintf(f, "\n");
}

static void csv_row(FILE *f, const bench_run *r, const bench_point *pt)
{
    const bench_path *fl = &pt->flash, *nv = &pt->naive;
    fprintf(f, "%s,", fa_backend_name(r->devs[pt->dev].backend));
    csv_quoted(f, r->devs[pt->dev].desc);
    fprintf(f, ",%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%.0f",
            fa_dtype_name(pt->dtype), fa_mask_name(pt->mask), r->a.batch, r->a.heads,
            pt->dim, pt->seq, pt->flops);
    csv_path(f, pt, fl);
    csv_path(f, pt, nv);
    fprintf(f, nv->state == BENCH_OOM ? ",%" PRIu64 : ",", nv->need);
    if (fl->state == BENCH_OK && nv->state == BENCH_OK && fl->ms > 0.0 && fl->peak > 0)
        fprintf(f, ",%.4f,%.4f", nv->ms / fl->ms, (double)nv->peak / (double)fl->peak);
    else
        fprintf(f, ",,");
    csv_err(f, fl);
    csv_err(f, nv);
    fprintf(f, ",%s", fl->fail ? "fail" : fl->check == BENCH_CHECK_DONE ? "pass" : "");
    fprintf(f, ",%s", bench_pass_name(r->pass));
    csv_gemm(f, pt);
}

int bench_write_csv(const bench_run *r, const char *path)
{
    FILE *f = fopen(path, "w");
    size_t i;
    if (!f)
        return cli_error("%s: cannot create the CSV file", path);
    fprintf(f, "backend,device,dtype,mask,batch,heads,dim,seq,flops,"
               "flash_state,flash_ms,flash_gflops,flash_peak_bytes,"
               "naive_state,naive_ms,naive_gflops,naive_peak_bytes,naive_need_bytes,"
               "speedup,mem_ratio,err_flash,err_naive,check,pass,"
               "gemm_state,gemm_ms,gemm_gflops,gemm_peak_bytes,speedup_gemm,err_gemm\n");
    for (i = 0; i < r->npoints; i++)
        csv_row(f, r, &r->points[i]);
    if (fclose(f) != 0)
        return cli_error("%s: write error", path);
    return 0;
}
