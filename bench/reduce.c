/* reduce.c - `hora bench reduce`: throughput of the collectives' reduction
 * loops (net/reduce.c) against memcpy of the same output size, in one
 * process on one core.
 *
 *   hora bench reduce [--bytes 4M] [--reps 7]
 *
 * For each dtype x op: dst = a op b over `bytes` of output, the median of
 * --reps timed passes (after one warm-up), reported as output GB/s and as a
 * ratio to memcpy(dst, a, bytes) timed the same way in the same run. The
 * collectives need the f32 sum ratio >= 0.5 (the loop reads two buffers and
 * writes one, memcpy reads one and writes one, so ~0.67 is the memory-bound
 * ceiling).
 */
#include "bench.h"
#include "net/coll/reduce.h"
#include "report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hora_bench_reduce(int argc, char **argv)
{
	static const struct option lopts[] = {{"bytes", required_argument, 0, 'b'},
					      {"reps", required_argument, 0, 'r'},
					      {"help", no_argument, 0, 'h'},
					      {0, 0, 0, 0}};
	size_t bytes = 4 << 20;
	int reps = 7, c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'b': bytes = hora_bench_size(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'h': printf("usage: hora bench reduce [--bytes 4M] [--reps 7]\n"); return 0;
		default: return 2;
		}
	}
	if (bytes < 4096 || reps < 1 || reps > 1000) {
		fprintf(stderr, "hora bench reduce: need --bytes >= 4096 and 1 <= --reps <= 1000\n");
		return 2;
	}
	uint8_t *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
	double *t = malloc(sizeof(double) * (size_t)reps);
	if (!a || !b || !d || !t)
		return 1;
	for (size_t i = 0; i < bytes; i++) { /* small finite values in every dtype */
		a[i] = (uint8_t)(i * 7 % 61);
		b[i] = (uint8_t)(i * 13 % 59);
	}
	for (size_t i = 1; i < bytes; i += 2) { /* keep f16/bf16/f32 exponents tame */
		a[i] &= 0x3b;
		b[i] &= 0x3b;
	}
	/* memcpy baseline */
	memcpy(d, a, bytes);
	for (int r = 0; r < reps; r++) {
		double t0 = hora_bench_now();
		memcpy(d, a, bytes);
		t[r] = hora_bench_now() - t0;
	}
	double mc = (double)bytes / hora_bench_median(t, reps) / 1e9;
	printf("# hora bench reduce: %zu bytes of output, median of %d, one core\n", bytes, reps);
	printf("# memcpy %.2f GB/s\n%6s %6s %10s %14s\n", mc, "type", "op", "GB/s", "x memcpy");
	for (int ty = 0; ty < HORA_NET_DTYPES; ty++)
		for (int op = 0; op < HORA_NET_OPS; op++) {
			if (op == HORA_NET_AVG)
				continue; /* the same loop as sum */
			size_t n = bytes / hora_net_dtype_size((enum hora_net_dtype)ty);
			hora_net_reduce(d, a, b, n, (enum hora_net_dtype)ty, (enum hora_net_op)op);
			for (int r = 0; r < reps; r++) {
				double t0 = hora_bench_now();
				hora_net_reduce(d, a, b, n, (enum hora_net_dtype)ty, (enum hora_net_op)op);
				t[r] = hora_bench_now() - t0;
			}
			double g = (double)bytes / hora_bench_median(t, reps) / 1e9;
			printf("%6s %6s %10.2f %14.2f\n", hora_net_dtype_name((enum hora_net_dtype)ty),
			       hora_net_op_name((enum hora_net_op)op), g, g / mc);
		}
	free(a);
	free(b);
	free(d);
	free(t);
	return 0;
}
