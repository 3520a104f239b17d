/* report.c - timing and reporting helpers shared by every bench. */
#include "report.h"

#include "core/cfgkey.h"
#include "net/util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

double hora_bench_now(void)
{
	return hora_clock_s(); /* the one monotonic clock (net/util/clock.h) */
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double hora_bench_median(double *v, int n)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

long hora_bench_peak_rss_bytes(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru))
		return -1;
	return ru.ru_maxrss * 1024L;
}

FILE *hora_bench_json_open(const char *path)
{
	if (!strcmp(path, "-"))
		return stdout;
	FILE *f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "hora bench: cannot write %s: %s\n", path, strerror(errno));
	return f;
}

void hora_bench_json_close(FILE *f)
{
	if (f && f != stdout)
		fclose(f);
	else if (f)
		fflush(f);
}

size_t hora_bench_size(const char *s)
{
	/* the config's one size parser (core/cfgkey.c), on the text up to a
	 * ':' (--sizes LO:HI); a bench stops on a bad flag */
	char v[64];
	const size_t n = strcspn(s, ":");
	uint64_t b;
	if (n >= sizeof(v) || (memcpy(v, s, n), v[n] = 0, hora_cfg_size(v, &b)) || b > SIZE_MAX) {
		fprintf(stderr, "hora bench: '%.*s' is not a size (bytes, or with K/KiB, M/MiB, G/GiB)\n",
			(int)n, s);
		exit(2);
	}
	return (size_t)b;
}

char *hora_bench_slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *s = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&s, &n);
	char buf[4096];
	size_t k;
	while (m && (k = fread(buf, 1, sizeof(buf), f)))
		fwrite(buf, 1, k, m);
	if (m)
		fclose(m);
	fclose(f);
	return s;
}
