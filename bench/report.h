/* report.h - timing and reporting helpers shared by every bench. */
#ifndef HORA_BENCH_REPORT_H
#define HORA_BENCH_REPORT_H

#include <stddef.h>
#include <stdio.h>

double hora_bench_now(void);                     /* monotonic seconds */
double hora_bench_median(double *v, int n);      /* sorts v in place */
long hora_bench_peak_rss_bytes(void);            /* this process, so far */
/* Open --json output ("-" = stdout); NULL with a message on failure. */
FILE *hora_bench_json_open(const char *path);
void hora_bench_json_close(FILE *f);

#endif
