/*
 * cli_bench_plot.c - the figure of `flashattn bench --plot` (see cli_bench_report.h): time and peak
 * device memory against sequence length, log axes, drawn by gnuplot from a temporary data file
 * into a PNG, or an SVG (text, so its words can be checked) when the name ends in ".svg".
 *
 * A figure gets read without the table next to it, so it says on its own what it shows: the
 * title names the problem, the date and every device; the legend, under both panels (a row per
 * series, a column per path: flash, naive, gemm, OOM), names each line's backend and path, and
 * what the baselines are (the cpu flash path is the fp64 golden reference, the naive OpenCL
 * kernels are untuned, gemm is the naive attention on CLBlast's SGEMM); a figure without the
 * gemm path says so and why under the legend. Each series has its colour and point shapes,
 * each path its dash. A line that others lie on (naive and gemm hold the same S/P bytes; two
 * masks the same flash bytes) is drawn wider and lighter under them, so each stays visible.
 * The axes' ranges are set from the data, so a one-point sweep draws without gnuplot warnings.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* popen, mkstemp, access */
#endif

#include "cli_bench_report.h"
#include "cli_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <unistd.h>
#endif

int bench_plot_is_svg(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".svg") == 0;
}

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

/* ---- the data ---------------------------------------------------------------------------- */

/* The paths of a series, in drawing order; a point's value in a column is one path's. */
enum { PATH_FLASH = 0, PATH_NAIVE, PATH_GEMM, PATH_OOM, NPATHS };

/* Columns of the data file; column 1 is the sequence length. Each panel's columns are its
 * paths' in PATH order (the time panel has no OOM column). */
enum {
    COL_FLASH_MS = 2,
    COL_NAIVE_MS,
    COL_GEMM_MS,
    COL_FLASH_MIB,
    COL_NAIVE_MIB,
    COL_GEMM_MIB,
    COL_NAIVE_NEED_MIB, /* the bytes a naive path that was OOM would have needed */
    COL_END
};

/* The two panels: time, then peak memory (which has every path, so the legend's). */
enum { PANEL_TIME = 0, PANEL_MEMORY, NPANELS };

static int panel_paths(int panel)
{
    return panel == PANEL_TIME ? PATH_OOM : NPATHS;
}

static int column_of(int panel, int path)
{
    return (panel == PANEL_TIME ? COL_FLASH_MS : COL_FLASH_MIB) + path;
}

/* A point's value in one column; NaN where it has none, or none > 0 (the axes are log). */
static double column_value(const bench_point *pt, int col)
{
    const double mib = 1024.0 * 1024.0;
    const bench_path *paths[3] = {&pt->flash, &pt->naive, &pt->gemm};
    double v = NAN;
    if (col >= COL_FLASH_MS && col <= COL_GEMM_MS && paths[col - COL_FLASH_MS]->state == BENCH_OK)
        v = paths[col - COL_FLASH_MS]->ms;
    else if (col >= COL_FLASH_MIB && col <= COL_GEMM_MIB &&
             paths[col - COL_FLASH_MIB]->state == BENCH_OK)
        v = (double)paths[col - COL_FLASH_MIB]->peak / mib;
    else if (col == COL_NAIVE_NEED_MIB && pt->naive.state == BENCH_OOM)
        v = (double)pt->naive.need / mib;
    return v > 0.0 ? v : NAN;
}

/* The points of series s (same device, dtype, mask, dim): consecutive, one per seq. */
static size_t series_first(const bench_run *r, size_t s)
{
    return s * r->nseqs;
}

static size_t series_end(const bench_run *r, size_t s)
{
    size_t end = (s + 1) * r->nseqs;
    return end < r->npoints ? end : r->npoints;
}

/* Whether series s has at least one value in column col. */
static int series_has(const bench_run *r, size_t s, int col)
{
    size_t i;
    for (i = series_first(r, s); i < series_end(r, s); i++)
        if (!isnan(column_value(&r->points[i], col)))
            return 1;
    return 0;
}

/* One block per series: seq, then the columns above. */
static void write_data(FILE *f, const bench_run *r, size_t nseries)
{
    size_t s, i;
    int col;
    for (s = 0; s < nseries; s++) {
        for (i = series_first(r, s); i < series_end(r, s); i++) {
            fprintf(f, "%" PRId64, r->points[i].seq);
            for (col = COL_FLASH_MS; col < COL_END; col++) {
                double v = column_value(&r->points[i], col);
                if (isnan(v))
                    fprintf(f, " NaN"); /* `set datafile missing 'NaN'` */
                else
                    fprintf(f, " %.6g", v);
            }
            fputc('\n', f);
        }
        fprintf(f, "\n\n");
    }
}

/* The smallest and largest value of columns [c0, c1); 0 when there is none. */
static int value_range(const bench_run *r, int c0, int c1, double *lo, double *hi)
{
    size_t i;
    int col, any = 0;
    for (i = 0; i < r->npoints; i++)
        for (col = c0; col < c1; col++) {
            double v = column_value(&r->points[i], col);
            if (isnan(v))
                continue;
            *lo = any && *lo < v ? *lo : v;
            *hi = any && *hi > v ? *hi : v;
            any = 1;
        }
    return any;
}

/* ---- the figure's plan ------------------------------------------------------------------- */

/* Most series whose lines are compared for overlaps (a larger figure has no readable legend
 * anyway); past it every line gets the plain style. */
#define PLOT_MAX_OVERLAP_SERIES 64

/* The figure's fixed pixel sizes; its width grows where the legend's columns need it. */
enum {
    FIG_WIDTH = 1600,
    FIG_MAX_WIDTH = 3200,
    FIG_TOP = 120,   /* the title's three lines and the panels' titles */
    FIG_PANEL = 460, /* each panel's height */
    FIG_AXIS = 75,   /* under the panels: the x tics and label */
    FIG_ROW = 21,    /* one row of the legend, and the note */
    FIG_BOTTOM = 16, /* under the legend and the note */
    FIG_LEFT = 110,  /* left of each panel: its y tics and label */
    FIG_RIGHT = 30,  /* right of the second panel */
    FIG_GAP = 40     /* between the first panel and the second's left margin */
};

/* What the gemm path is, in its legend entry and in the note of a figure without it. */
#define GEMM_WHAT "naive attention on CLBlast SGEMM"

/* Everything the script is written from, decided before its first line. */
typedef struct plot_fig {
    const bench_run *r;
    const char *data, *out; /* the data file; the figure's file */
    size_t nseries;
    int *covered;         /* [panel][series][path]: lines drawn later lying on this one */
    int has[NPATHS];      /* some series has the path (the legend's columns) */
    int width;            /* pixels; the height follows from the legend's rows */
    size_t height, rows;  /* the legend's rows: one per series */
    char note[256];       /* under the legend: the gemm path's absence, or "" */
} plot_fig;

static int *covered_of(const plot_fig *fig, int panel, size_t s, int path)
{
    return &fig->covered[((size_t)panel * fig->nseries + s) * NPATHS + (size_t)path];
}

/*
 * Whether two lines would lie on each other: column ca of series a and cb of series b agree
 * within 4% (a few pixels on a log axis) at every sequence length both have, and they have
 * one at least.
 */
static int lines_coincide(const bench_run *r, size_t a, int ca, size_t b, int cb)
{
    size_t k, n = series_end(r, a) - series_first(r, a), shared = 0;
    if (series_end(r, b) - series_first(r, b) < n)
        n = series_end(r, b) - series_first(r, b);
    for (k = 0; k < n; k++) {
        double va = column_value(&r->points[series_first(r, a) + k], ca);
        double vb = column_value(&r->points[series_first(r, b) + k], cb);
        if (isnan(va) || isnan(vb))
            continue;
        if (fabs(log(va / vb)) > log(1.04))
            return 0;
        shared++;
    }
    return shared > 0;
}

/* In each panel, how many lines drawn after each one (series-major, path-minor order) lie on
 * it, at most 3: a covered line is drawn wider and lighter, so the later ones leave it seen. */
static void find_overlaps(plot_fig *fig)
{
    size_t s, t;
    int panel, p, q;
    for (panel = 0; panel < NPANELS && fig->nseries <= PLOT_MAX_OVERLAP_SERIES; panel++)
        for (s = 0; s < fig->nseries; s++)
            for (p = 0; p < panel_paths(panel); p++) {
                int n = 0, col = column_of(panel, p);
                if (!series_has(fig->r, s, col))
                    continue;
                for (t = s; t < fig->nseries; t++)
                    for (q = t == s ? p + 1 : 0; q < panel_paths(panel); q++)
                        n += lines_coincide(fig->r, s, col, t, column_of(panel, q));
                *covered_of(fig, panel, s, p) = n < 3 ? n : 3;
            }
}

/* ---- the words --------------------------------------------------------------------------- */

/* Copies s without the characters that would end or escape a gnuplot string. */
static void plain(const char *s, char *buf, size_t size)
{
    size_t n = 0;
    for (; *s && n + 1 < size; s++)
        if (*s != '"' && *s != '\'' && *s != '\\' && *s != '\n')
            buf[n++] = *s;
    buf[n] = '\0';
}

/* Appends to buf like snprintf, never past size. */
static void append(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);

static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    if (used + 1 >= size)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/*
 * The legend entry of series s's path: the backend, those of dtype, mask and dim that vary in
 * the sweep (the others are in the title), the path and, on the first entry of a backend's
 * path, what the path is there, so that a reader of the figure alone knows the baselines.
 */
static void entry_title(const plot_fig *fig, size_t s, int path, char *buf, size_t size)
{
    const bench_run *r = fig->r;
    const bench_point *pt = &r->points[series_first(r, s)];
    fa_backend b = r->devs[pt->dev].backend;
    static const char *const names[NPATHS] = {"flash", "naive", "gemm", "naive: bytes needed, OOM"};
    const char *what = path == PATH_GEMM ? " (" GEMM_WHAT ")"
                       : b != FA_BACKEND_CPU ? (path == PATH_NAIVE ? " (untuned reference kernels)"
                                                                   : "")
                       : path == PATH_FLASH ? " (fp64 golden reference, scalar)"
                       : path == PATH_NAIVE ? " (plain f32 C loop)"
                                            : "";
    size_t t;
    for (t = 0; t < s; t++) /* an earlier series of the backend said it already */
        if (r->devs[r->points[series_first(r, t)].dev].backend == b &&
            series_has(r, t, column_of(PANEL_MEMORY, path)))
            what = "";
    snprintf(buf, size, "%s", fa_backend_name(b));
    if (r->ndtypes > 1)
        append(buf, size, " %s", fa_dtype_name(pt->dtype));
    if (r->nmasks > 1)
        append(buf, size, " %s", fa_mask_name(pt->mask));
    if (r->ndims > 1)
        append(buf, size, " d%" PRId64, pt->dim);
    append(buf, size, " %s%s", names[path], what);
}

/* Why no point of the sweep has a gemm line. */
static const char *gemm_absent_why(const bench_run *r)
{
    int i, opencl = 0, f32 = 0, mods = 0;
    size_t t;
    for (i = 0; i < r->ndevs; i++) {
        opencl |= r->devs[i].backend == FA_BACKEND_OPENCL;
        mods |= r->devs[i].modifiers;
    }
    for (t = 0; t < r->ndtypes; t++)
        f32 |= r->dtypes[t] == FA_DTYPE_F32;
    if (!naive_clblast_info())
        return "not built (CLBlast was not found when the tool was configured)";
    if (r->pass != BENCH_PASS_FWD)
        return "it is forward only";
    if (!opencl)
        return "it runs on opencl only";
    if (!f32)
        return "it runs f32 only";
    if (mods)
        return "the baselines have no score modifiers or dropout";
    return "it was not measured at any point (OOM, skipped or failed: see the table)";
}

/* The note under the legend where the gemm path is missing from some series or all. */
static void gemm_note(plot_fig *fig)
{
    size_t s, with = 0;
    for (s = 0; s < fig->nseries; s++)
        with += (size_t)series_has(fig->r, s, COL_GEMM_MIB);
    fig->note[0] = '\0';
    if (with == 0)
        snprintf(fig->note, sizeof fig->note, "no gemm line (" GEMM_WHAT "): %s",
                 gemm_absent_why(fig->r));
    else if (with < fig->nseries)
        snprintf(fig->note, sizeof fig->note, "gemm (" GEMM_WHAT ") is drawn where it ran: "
                 "opencl, f32, forward, no score modifiers or dropout");
}

/* The legend's columns (the paths some series has) and the figure's size: wide enough for
 * the columns (gnuplot's are as wide as the longest entry: about 7.5 pixels a character at
 * the legend's 10 points, and the sample), high enough for a row per series and the note. */
static void plan_figure(plot_fig *fig)
{
    size_t s, longest = 0, cols = 0, need;
    int path;
    char title[192];
    for (path = 0; path < NPATHS; path++) {
        fig->has[path] = 0;
        for (s = 0; s < fig->nseries; s++) {
            if (!series_has(fig->r, s, column_of(PANEL_MEMORY, path)))
                continue;
            fig->has[path] = 1;
            entry_title(fig, s, path, title, sizeof title);
            longest = strlen(title) > longest ? strlen(title) : longest;
        }
        cols += (size_t)fig->has[path];
    }
    need = cols * (size_t)(7.5 * (double)longest + 90.0) + 60;
    fig->width = need < FIG_WIDTH ? FIG_WIDTH : need > FIG_MAX_WIDTH ? FIG_MAX_WIDTH : (int)need;
    fig->rows = fig->nseries;
    gemm_note(fig);
    fig->height = FIG_TOP + FIG_PANEL + FIG_AXIS + FIG_ROW * (fig->rows + 1) +
                  (fig->note[0] ? FIG_ROW : 0) + FIG_BOTTOM;
}

/* Title: what is plotted, the values that do not vary, the date and every device. */
static void write_title(FILE *g, const bench_run *r)
{
    char fixed[256] = "", dev[320];
    int i;
    if (r->ndtypes == 1)
        append(fixed, sizeof fixed, ", %s", fa_dtype_name(r->dtypes[0]));
    if (r->nmasks == 1)
        append(fixed, sizeof fixed, ", mask %s", fa_mask_name(r->masks[0]));
    if (r->ndims == 1)
        append(fixed, sizeof fixed, ", head dim %" PRId64, r->dims[0]);
    fprintf(g, "set multiplot title \"flashattn bench: flash vs naive attention%s "
               "(%s materialized), time and peak device memory against sequence length\\n"
               "batch %" PRId64 ", heads %" PRId64 ", Sq = Sk%s; median of %" PRId64
               " after 1 warm-up; %s\\n",
            r->pass == BENCH_PASS_BWD ? " backward" : r->pass == BENCH_PASS_FWD_BWD
                                                         ? " forward + backward" : "",
            r->pass == BENCH_PASS_FWD ? "S and P" : "P and dP", r->a.batch, r->a.heads, fixed,
            r->a.repeat, r->date);
    for (i = 0; i < r->ndevs; i++) {
        plain(r->devs[i].desc, dev, sizeof dev);
        fprintf(g, "%s%s", i ? "  |  " : "", dev);
    }
    fprintf(g, "\" font ',12'\n");
}

/* The x axis: a tic at each sequence length of the sweep, and room around the end ones. */
static void write_x_axis(FILE *g, const bench_run *r)
{
    int64_t lo = r->seqs[0], hi = r->seqs[0];
    size_t i;
    for (i = 0; i < r->nseqs; i++) {
        lo = r->seqs[i] < lo ? r->seqs[i] : lo;
        hi = r->seqs[i] > hi ? r->seqs[i] : hi;
    }
    fprintf(g, "set logscale x 2\nset xrange [%.6g:%.6g]\nset xtics (", (double)lo / 1.4,
            (double)hi * 1.4);
    for (i = 0; i < r->nseqs; i++)
        fprintf(g, "%s\"%" PRId64 "\" %" PRId64, i ? ", " : "", r->seqs[i], r->seqs[i]);
    fprintf(g, ")\nset xlabel 'sequence length (Sq = Sk)'\n");
}

/* ---- the figure -------------------------------------------------------------------------- */

/* Colours that stay apart on a white background (ColorBrewer's Dark2): one per series. */
static const char *const plot_colours[] = {"1b9e77", "d95f02", "7570b3", "e7298a",
                                           "66a61e", "e6ab02", "a6761d", "666666"};
/* Point shapes, one family per series: circle, square, diamond, pentagon, inverted triangle;
 * filled for flash, open for naive. gemm is an open triangle, an OOM a cross. */
static const int flash_points[] = {7, 5, 13, 15, 11};
static const int naive_points[] = {6, 4, 12, 14, 10};
static const int oom_points[] = {2, 1, 3}; /* x, +, *: stacked, each stays visible */
/* Dash of each path: flash solid, naive dashed, gemm dash-dot. */
static const char *const path_dashes[NPATHS] = {"1", "(9,5)", "(16,5,3,5)", "1"};

/* The plot command's style of one line: the series' colour (a darker shade for gemm, which
 * often lies on naive: the same S/P bytes), lighter and wider when covered; dash; point. */
static void line_style(size_t s, int path, int covered, char *buf, size_t size)
{
    unsigned rgb = (unsigned)strtoul(plot_colours[s % (sizeof plot_colours /
                                                       sizeof plot_colours[0])], NULL, 16);
    double lw = 2.0 + 3.0 * covered, ps = 1.2 + 0.6 * covered;
    int pt = path == PATH_FLASH ? flash_points[s % 5]
             : path == PATH_NAIVE ? naive_points[s % 5]
             : path == PATH_GEMM  ? 8
                                  : oom_points[s % 3];
    if (path == PATH_GEMM) /* each channel at 60% */
        rgb = ((rgb >> 16 & 0xff) * 6 / 10) << 16 | ((rgb >> 8 & 0xff) * 6 / 10) << 8 |
              (rgb & 0xff) * 6 / 10;
    /* gnuplot's "#AARRGGBB": AA is the transparency, 00 opaque. */
    snprintf(buf, size, "lc rgb '#%s%06x' lw %.1f dt %s pt %d ps %.1f", covered ? "60" : "",
             rgb, lw, path_dashes[path], pt, path == PATH_OOM ? ps + 1.0 : ps);
}

/* One panel: its y range from the data, then a line per (series, path) with values,
 * series-major, so that a line drawn later lies on the earlier ones (find_overlaps); or an
 * empty frame saying there is no point. */
static void plot_panel(FILE *g, const plot_fig *fig, int panel)
{
    const char *sep = "plot ";
    double lo = 0.0, hi = 0.0;
    char style[128];
    size_t s;
    int path;
    if (!value_range(fig->r, column_of(panel, 0), column_of(panel, panel_paths(panel)), &lo,
                     &hi)) {
        fprintf(g, "set yrange [0.1:10]\nset label 1 'no measured point' at graph 0.5, 0.5 "
                   "center\nplot NaN notitle\nunset label 1\n");
        return;
    }
    /* A factor of 2 of room on the log axis: the extreme points stay off the frame, and a
     * single value still gives a non-empty range. */
    fprintf(g, "set yrange [%.6g:%.6g]\n", lo / 2.0, hi * 2.0);
    for (s = 0; s < fig->nseries; s++)
        for (path = 0; path < panel_paths(panel); path++) {
            int col = column_of(panel, path);
            if (!series_has(fig->r, s, col))
                continue;
            line_style(s, path, *covered_of(fig, panel, s, path), style, sizeof style);
            fprintf(g, "%s'%s' index %zu using 1:%d with %s %s notitle", sep, fig->data, s,
                    col, path == PATH_OOM ? "points" : "linespoints", style);
            sep = ", \\\n  ";
        }
    fprintf(g, "\n");
}

/*
 * The legend: a plot of its own across the whole width under both panels, with no axes, its
 * entries column by column (gnuplot fills a key's columns top to bottom): each path's column
 * holds every series, a gap where a series lacks the path, so each row is one series. The
 * samples have the plain style (a covered line is the same line, wider and lighter).
 */
static void write_legend(FILE *g, const plot_fig *fig, double top, double bottom)
{
    const char *sep = "plot ";
    char title[192], style[128];
    size_t s;
    int path;
    fprintf(g, "set tmargin at screen %.4f\nset bmargin at screen %.4f\n"
               "set lmargin at screen 0.01\nset rmargin at screen 0.99\n"
               "unset title\nunset xlabel\nunset ylabel\nunset tics\nunset border\n"
               "unset grid\nunset logscale\nset xrange [0:1]\nset yrange [0:1]\n",
            top, bottom);
    fprintf(g, "set key at screen 0.5, %.4f center top vertical maxrows %zu Left reverse box "
               "samplen 5 spacing 1.15 width 2 font ',10'\n", top, fig->rows);
    for (path = 0; path < NPATHS; path++)
        for (s = 0; fig->has[path] && s < fig->nseries; s++) {
            if (!series_has(fig->r, s, column_of(PANEL_MEMORY, path))) {
                fprintf(g, "%sNaN with lines lc rgb '#ffffff' title ' '", sep);
            } else {
                entry_title(fig, s, path, title, sizeof title);
                line_style(s, path, 0, style, sizeof style);
                fprintf(g, "%sNaN with %s %s title '%s'", sep,
                        path == PATH_OOM ? "points" : "linespoints", style, title);
            }
            sep = ", \\\n  ";
        }
    fprintf(g, "\n");
}

/*
 * The figure, in fixed pixels from the top: the title, the two panels side by side (each with
 * room left of it for its tic labels and y label), their x axes, the legend and the note.
 */
static void write_script(FILE *g, const plot_fig *fig)
{
    const bench_run *r = fig->r;
    double w = (double)fig->width, h = (double)fig->height;
    double panel = (w - 2.0 * FIG_LEFT - FIG_GAP - FIG_RIGHT) / 2.0;
    fprintf(g, "set terminal %s size %d,%zu font 'sans,11'\nset output '%s'\n"
               "set datafile missing 'NaN'\nunset key\n",
            bench_plot_is_svg(fig->out) ? "svg" : "pngcairo", fig->width, fig->height,
            fig->out);
    if (fig->note[0])
        fprintf(g, "set label 2 '%s' at screen 0.5, %.4f center font ',10'\n", fig->note,
                (FIG_BOTTOM + FIG_ROW / 2.0) / h);
    write_title(g, r);
    write_x_axis(g, r);
    fprintf(g, "set logscale y 10\nset grid\nset format y '%%g'\n"
               "set tmargin at screen %.4f\nset bmargin at screen %.4f\n",
            1.0 - FIG_TOP / h, 1.0 - (FIG_TOP + FIG_PANEL) / h);
    fprintf(g, "set lmargin at screen %.4f\nset rmargin at screen %.4f\n"
               "set title 'time per %s (median)'\nset ylabel 'ms'\n",
            FIG_LEFT / w, (FIG_LEFT + panel) / w,
            r->pass == BENCH_PASS_BWD ? "backward" : r->pass == BENCH_PASS_FWD_BWD
                                                         ? "forward + backward" : "forward");
    plot_panel(g, fig, PANEL_TIME);
    fprintf(g, "unset label 2\nset lmargin at screen %.4f\nset rmargin at screen %.4f\n"
               "set title 'peak device memory of the path'\nset ylabel 'MiB'\n",
            (2.0 * FIG_LEFT + FIG_GAP + panel) / w, 1.0 - FIG_RIGHT / w);
    plot_panel(g, fig, PANEL_MEMORY);
    write_legend(g, fig, 1.0 - (FIG_TOP + FIG_PANEL + FIG_AXIS) / h,
                 (FIG_BOTTOM + (fig->note[0] ? FIG_ROW : 0)) / h);
    fprintf(g, "unset multiplot\n");
}

/* The last line of gnuplot's log that starts in column 1: its error, not the echoed script. */
static void last_error_line(const char *log, char *buf, size_t size)
{
    FILE *f = fopen(log, "r");
    char line[512];
    snprintf(buf, size, "no message");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] != '\0' && line[0] != ' ' && line[0] != '\t')
            snprintf(buf, size, "%s", line);
    }
    fclose(f);
}

/* Runs gnuplot on the script, its output kept in a log; 0 when it exits 0. */
static int run_gnuplot(const plot_fig *fig)
{
    char log[] = "/tmp/flashattn-gnuplot-XXXXXX", cmd[64], msg[512];
    int fd = mkstemp(log), status;
    FILE *g;
    if (fd < 0)
        return cli_error("--plot: cannot create a temporary log file");
    close(fd);
    /* mkstemp's name holds only safe characters, so it needs no quoting in the command. */
    snprintf(cmd, sizeof cmd, "gnuplot >%s 2>&1", log);
    g = popen(cmd, "w");
    if (!g) {
        remove(log);
        return cli_error("--plot: cannot start gnuplot");
    }
    write_script(g, fig);
    status = pclose(g);
    if (status != 0) {
        last_error_line(log, msg, sizeof msg);
        remove(log);
        return cli_error("--plot: gnuplot failed (status %d) drawing %s: %s", status, fig->out,
                         msg);
    }
    remove(log);
    return 0;
}

int bench_write_plot(const bench_run *r, const char *path)
{
    char data[] = "/tmp/flashattn-bench-XXXXXX";
    plot_fig fig;
    FILE *f, *check;
    int fd, rc;
    memset(&fig, 0, sizeof fig);
    fig.r = r;
    fig.data = data;
    fig.out = path;
    fig.nseries = r->nseqs ? (r->npoints + r->nseqs - 1) / r->nseqs : 0;
    if (fig.nseries == 0)
        return cli_error("--plot: no points to draw");
    if (!(fig.covered = calloc(NPANELS * fig.nseries * NPATHS, sizeof *fig.covered)))
        return cli_error("--plot: out of host memory");
    find_overlaps(&fig);
    plan_figure(&fig);
    fd = mkstemp(data);
    f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        if (fd >= 0)
            close(fd);
        remove(data);
        free(fig.covered);
        return cli_error("--plot: cannot create the temporary data file %s", data);
    }
    write_data(f, r, fig.nseries);
    rc = fclose(f) != 0 ? cli_error("--plot: cannot write the temporary data file %s", data)
                        : run_gnuplot(&fig);
    remove(data);
    free(fig.covered);
    if (rc == 0 && !(check = fopen(path, "rb")))
        return cli_error("%s: gnuplot did not create the plot", path);
    if (rc == 0)
        fclose(check);
    return rc;
}

#endif
