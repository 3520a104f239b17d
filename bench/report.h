/* report.h - timing and reporting helpers shared by every bench. */
#ifndef HORA_BENCH_REPORT_H
#define HORA_BENCH_REPORT_H

#include <stddef.h>
#include <stdio.h>

double hora_bench_now(void);                     /* monotonic seconds */
double hora_bench_median(double *v, int n);      /* sorts v in place */
long hora_bench_peak_rss_bytes(void);            /* this process, so far */
/* "64K", "1M", "2G", "123" (binary units) -> bytes. */
size_t hora_bench_size(const char *s); /* "64M", "8" (up to a colon); exits 2 on a bad size */
/* The whole file in a malloc'd NUL-terminated string, or NULL (errno set). */
char *hora_bench_slurp(const char *path);
/* Open --json output ("-" = stdout); NULL with a message on failure. */
FILE *hora_bench_json_open(const char *path);
void hora_bench_json_close(FILE *f);

#endif
