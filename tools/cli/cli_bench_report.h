/*
 * cli_bench_report.h - the reports of `flashattn bench`, called by the sweep (cli_bench.c)
 * only: the table and the CSV (cli_bench_report.c) and the gnuplot figure (cli_bench_plot.c).
 * Every number they show comes from the bench_points; they call only the bottom layer
 * (cli_bench.h).
 */
#ifndef FLASHATTN_TOOLS_CLI_BENCH_REPORT_H
#define FLASHATTN_TOOLS_CLI_BENCH_REPORT_H

#include "cli_bench.h"

/* ---- the table and the CSV (cli_bench_report.c) -------------------------------------------- */

/* The aligned table on stdout: header (command line, date, devices, column names). */
void bench_print_header(const bench_run *r);
/* One row of the table. */
void bench_print_row(const bench_run *r, const bench_point *pt);
/* The notes under the table. */
void bench_print_footer(const bench_run *r);
/* --csv: one header line and one line per point. Prints and returns CLI_EXIT_FAIL on error. */
int bench_write_csv(const bench_run *r, const char *path);

/* ---- the figure (cli_bench_plot.c) ------------------------------------------------------- */

/* 0 when gnuplot is on PATH; prints a one-line error and returns CLI_EXIT_FAIL otherwise. */
int bench_find_gnuplot(void);
/* --plot: time and memory against seq length, log axes, each path (flash, naive, gemm) of
 * each series; a sweep without the gemm path says so under the legend. */
int bench_write_plot(const bench_run *r, const char *path);
/* Whether --plot writes an SVG (the name ends in ".svg") rather than a PNG. */
int bench_plot_is_svg(const char *path);

#endif /* FLASHATTN_TOOLS_CLI_BENCH_REPORT_H */
