/*
 * cli_bench_report.c - the reports of `flashattn bench` (see cli_bench.h): the aligned table on
 * stdout (streamed row by row, so a long sweep shows its results as they come), the CSV file,
 * and the PNG figure drawn by gnuplot from a temporary data file.
 *
 * Every number in the reports comes from a bench_point; nothing is recomputed here except the
 * derived ratios (GFLOP/s, speedup, memory ratio), so the table, the CSV and the figure agree.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* popen, mkstemp, access */
#endif

#include "cli_bench.h"
#include "cli_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <unistd.h>
#endif

/* The table's columns: one format for the header and the rows, so they stay aligned. */
#define ROW_FMT "%-7s %-5s %-9s %4s %6s | %10s %8s %8s | %10s %8s %8s | %8s %7s | %-12s %-9s\n"

const char *bench_mask_name(fa_mask mask)
{
    return mask == FA_MASK_NONE ? "none" : mask == FA_MASK_CAUSAL_TOP_LEFT ? "causal"
                                                                            : "causal-br";
}

static double gflops(const bench_point *pt, const bench_path *p)
{
    return p->state == BENCH_OK && p->ms > 0.0 ? pt->flops / (p->ms * 1e6) : 0.0;
}

/* ---- table ------------------------------------------------------------------------------- */

/* "512.0K", "16.0M", "2.00G": compact sizes for the table (the CSV has exact bytes). */
static void compact_bytes(uint64_t b, char *buf, size_t size)
{
    double v = (double)b;
    if (v < 1024.0 * 1024.0)
        snprintf(buf, size, "%.1fK", v / 1024.0);
    else if (v < 1024.0 * 1024.0 * 1024.0)
        snprintf(buf, size, "%.1fM", v / (1024.0 * 1024.0));
    else
        snprintf(buf, size, "%.2fG", v / (1024.0 * 1024.0 * 1024.0));
}

/* The time, GFLOP/s and peak cells of one path. */
static void path_cells(const bench_point *pt, const bench_path *p, char ms[16], char gf[16],
                       char peak[16])
{
    static const char *const words[] = {"", "OOM", "skip", "error", "n/a"};
    snprintf(gf, 16, "-");
    snprintf(peak, 16, "-");
    if (p->state != BENCH_OK) {
        snprintf(ms, 16, "%s", words[p->state]);
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
    printf("# naive    S/P in one f32 buffer of 4*B*H*seq^2 bytes, capped at %" PRIu64
           " bytes; golden check up to seq %" PRId64 "\n\n",
           r->a.naive_max_bytes, r->a.check_max_seq);
    printf(ROW_FMT, "backend", "dtype", "mask", "dim", "seq", "flash ms", "GFLOP/s", "peak",
           "naive ms", "GFLOP/s", "peak", "speedup", "mem", "err flash", "err naive");
}

void bench_print_row(const bench_run *r, const bench_point *pt)
{
    char fms[16], fgf[16], fpk[16], nms[16], ngf[16], npk[16], dim[16], seq[24];
    char speed[24] = "-", mem[24] = "-", ferr[32], nerr[32];
    const bench_path *f = &pt->flash, *n = &pt->naive;
    path_cells(pt, f, fms, fgf, fpk);
    path_cells(pt, n, nms, ngf, npk);
    if (n->state == BENCH_OOM && n->need)
        compact_bytes(n->need, npk, sizeof npk); /* what it would have needed */
    if (f->state == BENCH_OK && n->state == BENCH_OK && f->ms > 0.0)
        snprintf(speed, sizeof speed, "%.2fx", n->ms / f->ms);
    if (f->state == BENCH_OK && f->peak > 0 && (n->state == BENCH_OK || n->need))
        snprintf(mem, sizeof mem, "%.1fx",
                 (double)(n->state == BENCH_OK ? n->peak : n->need) / (double)f->peak);
    err_cell(f, ferr, sizeof ferr);
    err_cell(n, nerr, sizeof nerr);
    snprintf(dim, sizeof dim, "%" PRId64, pt->dim);
    snprintf(seq, sizeof seq, "%" PRId64, pt->seq);
    printf(ROW_FMT, fa_backend_name(r->devs[pt->dev].backend), fa_dtype_name(pt->dtype),
           bench_mask_name(pt->mask), dim, seq, fms, fgf, fpk, nms, ngf, npk, speed, mem, ferr,
           nerr);
}

void bench_print_footer(const bench_run *r)
{
    static const char *const notes[] = {
        "GFLOP/s: 4*B*H*seq^2*dim (half when causal) / time. speedup = naive ms / flash ms.",
        "peak: device bytes of that path alone (Q, K, V, O and any scratch or S/P), from",
        "  fa_context_memory after fa_context_reset_peak; the naive OpenCL buffers are made by",
        "  the tool (the interop API cannot expose the cl_mem of fa_buffer_create) and counted",
        "  by it. mem = naive peak / flash peak; where naive is OOM, its peak column and the",
        "  ratio show the bytes it would have needed.",
        "OOM: the naive S/P buffer does not fit (--naive-max-bytes or the device's limits).",
        "skip: estimated over --max-seconds. n/a: no naive attention for that backend (cuda).",
        "err: max |O - O_golden| against the CPU golden backend (fp64 accumulation); '-': not",
        "  checked (above --check-max-seq); 'ref': the flash path on cpu is the golden itself;",
        "  FAIL: above the tolerance of `run --check`.",
    };
    size_t i;
    (void)r;
    printf("\n");
    for (i = 0; i < sizeof notes / sizeof notes[0]; i++)
        printf("# %s\n", notes[i]);
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

static void csv_row(FILE *f, const bench_run *r, const bench_point *pt)
{
    const bench_path *fl = &pt->flash, *nv = &pt->naive;
    fprintf(f, "%s,", fa_backend_name(r->devs[pt->dev].backend));
    csv_quoted(f, r->devs[pt->dev].desc);
    fprintf(f, ",%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%.0f",
            fa_dtype_name(pt->dtype), bench_mask_name(pt->mask), r->a.batch, r->a.heads,
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
    fprintf(f, ",%s\n", fl->fail ? "fail" : fl->check == BENCH_CHECK_DONE ? "pass" : "");
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
               "speedup,mem_ratio,err_flash,err_naive,check\n");
    for (i = 0; i < r->npoints; i++)
        csv_row(f, r, &r->points[i]);
    if (fclose(f) != 0)
        return cli_error("%s: write error", path);
    return 0;
}

/* ---- plot -------------------------------------------------------------------------------- */

#if defined(_WIN32)

int bench_find_gnuplot(void)
{
    return cli_error("--plot: not supported on Windows by this tool; use --csv and plot it");
}

int bench_write_plot(const bench_run *r, const char *path)
{
    (void)r;
    (void)path;
    return bench_find_gnuplot();
}

#else

int bench_find_gnuplot(void)
{
    const char *path = getenv("PATH");
    char dir[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n + sizeof "/gnuplot" < sizeof dir) {
            memcpy(dir, path, n);
            strcpy(dir + n, "/gnuplot");
            if (access(dir, X_OK) == 0)
                return 0;
        }
        path += n + (path[n] == ':');
    }
    return cli_error("--plot: gnuplot not found on PATH (install gnuplot, e.g. gnuplot-nox, "
                     "or use --csv)");
}

/* The points of one series (same device, dtype, mask, dim) are consecutive, one per seq. */
typedef struct series_info {
    size_t first, count;
    int has_naive, has_oom;
} series_info;

static series_info series_at(const bench_run *r, size_t s)
{
    series_info si;
    size_t i;
    si.first = s * r->nseqs;
    si.count = r->nseqs;
    si.has_naive = si.has_oom = 0;
    for (i = si.first; i < si.first + si.count && i < r->npoints; i++) {
        si.has_naive |= r->points[i].naive.state == BENCH_OK;
        si.has_oom |= r->points[i].naive.state == BENCH_OOM && r->points[i].naive.need > 0;
    }
    return si;
}

static void data_value(FILE *f, int ok, double v)
{
    if (ok)
        fprintf(f, " %.6g", v);
    else
        fprintf(f, " NaN");
}

/* One block per series: seq, flash ms, naive ms, flash MiB, naive MiB, naive MiB needed (OOM). */
static void write_data(FILE *f, const bench_run *r, size_t nseries)
{
    const double mib = 1024.0 * 1024.0;
    size_t s, i;
    for (s = 0; s < nseries; s++) {
        series_info si = series_at(r, s);
        for (i = si.first; i < si.first + si.count && i < r->npoints; i++) {
            const bench_point *pt = &r->points[i];
            const bench_path *fl = &pt->flash, *nv = &pt->naive;
            fprintf(f, "%" PRId64, pt->seq);
            data_value(f, fl->state == BENCH_OK, fl->ms);
            data_value(f, nv->state == BENCH_OK, nv->ms);
            data_value(f, fl->state == BENCH_OK, (double)fl->peak / mib);
            data_value(f, nv->state == BENCH_OK, (double)nv->peak / mib);
            data_value(f, nv->state == BENCH_OOM && nv->need, (double)nv->need / mib);
            fputc('\n', f);
        }
        fprintf(f, "\n\n");
    }
}

/* Copies s without the characters that would end or escape a gnuplot string. */
static void plain(const char *s, char *buf, size_t size)
{
    size_t n = 0;
    for (; *s && n + 1 < size; s++)
        if (*s != '"' && *s != '\'' && *s != '\\' && *s != '\n')
            buf[n++] = *s;
    buf[n] = '\0';
}

/* One panel: flash and naive of every series, and the naive OOM points when `oom_col`. */
static void plot_panel(FILE *g, const bench_run *r, const char *data, size_t nseries,
                       int col_flash, int col_naive, int oom_col)
{
    const char *sep = "plot ";
    size_t s;
    for (s = 0; s < nseries; s++) {
        series_info si = series_at(r, s);
        const bench_point *pt = &r->points[si.first];
        char name[96];
        snprintf(name, sizeof name, "%s %s %s d%" PRId64, fa_backend_name(r->devs[pt->dev].backend),
                 fa_dtype_name(pt->dtype), bench_mask_name(pt->mask), pt->dim);
        /* Colours in pairs: flash and naive of one series differ in colour and dash. */
        fprintf(g, "%s'%s' index %zu using 1:%d with linespoints lc %zu dt 1 pt 7 lw 2 "
                   "title '%s flash'", sep, data, s, col_flash, 2 * s + 1, name);
        sep = ", \\\n  ";
        if (si.has_naive)
            fprintf(g, "%s'%s' index %zu using 1:%d with linespoints lc %zu dt 2 pt 6 lw 2 "
                       "title '%s naive'", sep, data, s, col_naive, 2 * s + 2, name);
        if (oom_col && si.has_oom)
            fprintf(g, "%s'%s' index %zu using 1:%d with points lc %zu pt 2 ps 2 lw 2 "
                       "title '%s naive: needed, OOM'", sep, data, s, oom_col, 2 * s + 2, name);
    }
    fprintf(g, "\n");
}

static void write_script(FILE *g, const bench_run *r, const char *data, const char *out,
                         size_t nseries)
{
    char dev[320];
    plain(r->devs[r->points[0].dev].desc, dev, sizeof dev);
    fprintf(g, "set terminal pngcairo size 1500,620 font 'sans,11'\nset output '%s'\n"
               "set datafile missing 'NaN'\nset multiplot layout 1,2 title "
               "\"flashattn bench: flash vs naive (batch %" PRId64 ", heads %" PRId64
               ", Sq = Sk)  -  %s%s  -  %s\"\n",
            out, r->a.batch, r->a.heads, dev, r->ndevs > 1 ? " and others" : "", r->date);
    fprintf(g, "set logscale x 2\nset logscale y 10\nset format x '%%.0f'\nset grid\n"
               "set xlabel 'sequence length (Sq = Sk)'\n");
    /* A little room at both ends so the first and last points are not drawn on the frame. */
    fprintf(g, "set offsets graph 0.03, graph 0.03, 0, 0\n");
    /* A few series fit in the corner; more go below the panels in small type. */
    fprintf(g, nseries <= 3 ? "set key top left box opaque\n" : "set key below font ',8'\n");
    fprintf(g, "set title 'time per forward (median)'\nset ylabel 'ms'\n");
    plot_panel(g, r, data, nseries, 2, 3, 0);
    fprintf(g, "set title 'peak device memory of the path'\nset ylabel 'MiB'\n");
    plot_panel(g, r, data, nseries, 4, 5, 6);
    fprintf(g, "unset multiplot\n");
}

/* Runs gnuplot on the script text; 0 when it exits 0. */
static int run_gnuplot(const bench_run *r, const char *data, const char *out, size_t nseries)
{
    FILE *g = popen("gnuplot", "w");
    int status;
    if (!g)
        return cli_error("--plot: cannot start gnuplot");
    write_script(g, r, data, out, nseries);
    status = pclose(g);
    if (status != 0)
        return cli_error("--plot: gnuplot failed (status %d) drawing %s", status, out);
    return 0;
}

int bench_write_plot(const bench_run *r, const char *path)
{
    char data[] = "/tmp/flashattn-bench-XXXXXX";
    size_t nseries = r->nseqs ? r->npoints / r->nseqs : 0;
    FILE *f, *check;
    int fd, rc;
    if (nseries == 0)
        return cli_error("--plot: no points to draw");
    fd = mkstemp(data);
    if (fd < 0)
        return cli_error("--plot: cannot create a temporary data file");
    if (!(f = fdopen(fd, "w"))) {
        close(fd);
        remove(data);
        return cli_error("--plot: cannot open the temporary data file %s", data);
    }
    write_data(f, r, nseries);
    if (fclose(f) != 0) {
        remove(data);
        return cli_error("--plot: cannot write the temporary data file %s", data);
    }
    rc = run_gnuplot(r, data, path, nseries);
    remove(data);
    if (rc == 0 && !(check = fopen(path, "rb")))
        return cli_error("%s: gnuplot did not create the plot", path);
    if (rc == 0)
        fclose(check);
    return rc;
}

#endif
