/*
 * cli_bench_plot.c - the figure of `flashattn bench --plot` (see cli_bench.h): time and peak
 * device memory against sequence length, log axes, drawn by gnuplot from a temporary data file
 * into a PNG, or an SVG (text, so its words can be checked) when the name ends in ".svg".
 *
 * A figure gets read without the table next to it, so it says on its own what it shows: the
 * title names the problem, the date and every device; each legend entry names its backend and
 * path, and what the baselines are (the cpu flash path is the fp64 golden reference, the naive
 * OpenCL kernels are untuned). Series are drawn widest first, each in its own colour, width,
 * dash and point type, so a line lying on another (equal bytes on two backends) stays visible;
 * the legend stands beside the panels, where it covers nothing.
 * The axes' ranges are set from the data, so a one-point sweep draws without gnuplot warnings.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* popen, mkstemp, access */
#endif

#include "cli_bench.h"
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

/* Columns of the data file; column 1 is the sequence length. */
enum {
    COL_FLASH_MS = 2,
    COL_NAIVE_MS,
    COL_FLASH_MIB,
    COL_NAIVE_MIB,
    COL_NAIVE_NEED_MIB, /* the bytes a naive path that was OOM would have needed */
    COL_END
};

/* A point's value in one column; NaN where it has none, or none > 0 (the axes are log). */
static double column_value(const bench_point *pt, int col)
{
    const double mib = 1024.0 * 1024.0;
    const bench_path *fl = &pt->flash, *nv = &pt->naive;
    double v = NAN;
    if (col == COL_FLASH_MS && fl->state == BENCH_OK)
        v = fl->ms;
    else if (col == COL_NAIVE_MS && nv->state == BENCH_OK)
        v = nv->ms;
    else if (col == COL_FLASH_MIB && fl->state == BENCH_OK)
        v = (double)fl->peak / mib;
    else if (col == COL_NAIVE_MIB && nv->state == BENCH_OK)
        v = (double)nv->peak / mib;
    else if (col == COL_NAIVE_NEED_MIB && nv->state == BENCH_OOM)
        v = (double)nv->need / mib;
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

/* The series' name: its backend, and those of dtype, mask and dim that vary in the sweep (the
 * others are in the title). */
static void series_name(const bench_run *r, const bench_point *pt, char *buf, size_t size)
{
    snprintf(buf, size, "%s", fa_backend_name(r->devs[pt->dev].backend));
    if (r->ndtypes > 1)
        append(buf, size, " %s", fa_dtype_name(pt->dtype));
    if (r->nmasks > 1)
        append(buf, size, " %s", fa_mask_name(pt->mask));
    if (r->ndims > 1)
        append(buf, size, " d%" PRId64, pt->dim);
}

/* What each path is on a backend, so that a reader of the figure alone knows the baselines. */
static const char *flash_note(fa_backend b)
{
    return b == FA_BACKEND_CPU ? " (fp64 golden reference, scalar)" : "";
}

static const char *naive_note(fa_backend b)
{
    return b == FA_BACKEND_CPU ? " (plain f32 C loop)" : " (untuned reference kernels)";
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
    fprintf(g, "\" font ',11'\n");
}

/* ---- the figure -------------------------------------------------------------------------- */

/* Colours that stay apart on a white background (ColorBrewer's Dark2). */
static const char *const plot_colours[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a",
                                           "#66a61e", "#e6ab02", "#a6761d", "#666666"};
static const int flash_points[] = {7, 5, 9, 11, 13}; /* filled circle, square, triangles, ... */
static const int naive_points[] = {6, 4, 8, 10, 12}; /* the same shapes, open */
static const int oom_points[] = {2, 1, 3};          /* x, +, *: stacked, each stays visible */

/* One series' look: the earlier a series is drawn, the wider, so later ones lie on it. */
typedef struct series_style {
    const char *colour;
    const char *naive_dt; /* dash pattern of the naive line; flash lines are solid */
    double lw, ps;
    int flash_pt, naive_pt, oom_pt;
} series_style;

/* Naive lines: dash patterns that differ from each other and from the solid flash lines. */
static const char *const naive_dashes[] = {"(8,5)", "(3,4)", "(12,4,3,4)", "(6,3,2,3,2,3)"};

static series_style style_of(size_t s, size_t nseries)
{
    size_t under = nseries - 1 - s < 3 ? nseries - 1 - s : 3; /* series drawn after this one */
    series_style st;
    st.colour = plot_colours[s % (sizeof plot_colours / sizeof plot_colours[0])];
    st.naive_dt = naive_dashes[s % 4];
    st.lw = 2.0 + 1.0 * (double)under;
    st.ps = 1.1 + 0.4 * (double)under;
    st.flash_pt = flash_points[s % 5];
    st.naive_pt = naive_points[s % 5];
    st.oom_pt = oom_points[s % 3];
    return st;
}

/* One line of a plot command: a column of series s, or nothing when the series has none. */
static void plot_line(FILE *g, const bench_run *r, const char *data, size_t s, size_t nseries,
                      int col, const char **sep)
{
    const bench_point *pt = &r->points[series_first(r, s)];
    fa_backend b = r->devs[pt->dev].backend;
    series_style st = style_of(s, nseries);
    char name[96];
    if (!series_has(r, s, col))
        return;
    series_name(r, pt, name, sizeof name);
    fprintf(g, "%s'%s' index %zu using 1:%d ", *sep, data, s, col);
    if (col == COL_FLASH_MS || col == COL_FLASH_MIB)
        fprintf(g, "with linespoints lc rgb '%s' lw %.1f dt 1 pt %d ps %.1f title '%s flash%s'",
                st.colour, st.lw, st.flash_pt, st.ps, name, flash_note(b));
    else if (col == COL_NAIVE_MS || col == COL_NAIVE_MIB)
        fprintf(g, "with linespoints lc rgb '%s' lw %.1f dt %s pt %d ps %.1f title '%s naive%s'",
                st.colour, st.lw, st.naive_dt, st.naive_pt, st.ps, name, naive_note(b));
    else
        fprintf(g, "with points lc rgb '%s' pt %d ps %.1f lw 2 title '%s naive: bytes needed, OOM'",
                st.colour, st.oom_pt, st.ps + 1.0, name);
    *sep = ", \\\n  ";
}

/* One panel over columns [c0, c1): explicit ranges from the data, or an empty frame saying so. */
static void plot_panel(FILE *g, const bench_run *r, const char *data, size_t nseries, int c0,
                       int c1)
{
    const char *sep = "plot ";
    double lo = 0.0, hi = 0.0;
    size_t s;
    int col;
    if (!value_range(r, c0, c1, &lo, &hi)) {
        fprintf(g, "set yrange [0.1:10]\nset label 1 'no measured point' at graph 0.5, 0.5 "
                   "center\nplot NaN notitle\nunset label 1\n");
        return;
    }
    /* A factor of 2 of room on the log axis: the extreme points stay off the frame, and a
     * single value still gives a non-empty range. */
    fprintf(g, "set yrange [%.6g:%.6g]\n", lo / 2.0, hi * 2.0);
    for (s = 0; s < nseries; s++)
        for (col = c0; col < c1; col++)
            plot_line(g, r, data, s, nseries, col, &sep);
    fprintf(g, "\n");
}

/* Entries of the legend: the memory panel's lines, which include every line of the time panel
 * (a path with a time has a peak) and the OOM points. */
static size_t legend_entries(const bench_run *r, size_t nseries)
{
    size_t s, n = 0;
    int col;
    for (s = 0; s < nseries; s++)
        for (col = COL_FLASH_MIB; col < COL_END; col++)
            n += (size_t)series_has(r, s, col);
    return n;
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

static void write_script(FILE *g, const bench_run *r, const char *data, const char *out,
                         size_t nseries)
{
    /* Fixed pixels: 110 above the panels for the titles, 80 below for the x axis, and the
     * legend, one 18-pixel line per entry, beside them; the panels are at least 460 high. */
    size_t legend = 18 * legend_entries(r, nseries), height = legend > 460 ? legend : 460;
    double top, bottom;
    height += 190;
    top = 1.0 - 110.0 / (double)height;
    bottom = 80.0 / (double)height;
    fprintf(g, "set terminal %s size 1600,%zu font 'sans,11'\nset output '%s'\n"
               "set datafile missing 'NaN'\n",
            bench_plot_is_svg(out) ? "svg" : "pngcairo", height, out);
    write_title(g, r);
    write_x_axis(g, r);
    /* The legend stands to the right of both panels, so it hides no point, however the lines
     * run, and both panels get the same size. */
    fprintf(g, "set logscale y 10\nset grid\nset tmargin at screen %.4f\n"
               "set bmargin at screen %.4f\n", top, bottom);
    fprintf(g, "set lmargin at screen 0.05\nset rmargin at screen 0.33\nunset key\n"
               "set title 'time per %s (median)'\nset ylabel 'ms'\n",
            r->pass == BENCH_PASS_BWD ? "backward" : r->pass == BENCH_PASS_FWD_BWD
                                                         ? "forward + backward" : "forward");
    plot_panel(g, r, data, nseries, COL_FLASH_MS, COL_NAIVE_MS + 1);
    fprintf(g, "set lmargin at screen 0.39\nset rmargin at screen 0.67\n"
               "set key at screen 0.69, %.4f left top vertical Left reverse box font ',10'\n"
               "set title 'peak device memory of the path'\nset ylabel 'MiB'\n", top);
    plot_panel(g, r, data, nseries, COL_FLASH_MIB, COL_NAIVE_NEED_MIB + 1);
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
static int run_gnuplot(const bench_run *r, const char *data, const char *out, size_t nseries)
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
    write_script(g, r, data, out, nseries);
    status = pclose(g);
    if (status != 0) {
        last_error_line(log, msg, sizeof msg);
        remove(log);
        return cli_error("--plot: gnuplot failed (status %d) drawing %s: %s", status, out, msg);
    }
    remove(log);
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
