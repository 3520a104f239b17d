/* xcpu.c - `hora bench xcpu`: the round trip of one cache line between two
 * CPUs (a counter bumped in turn by two threads, each bound to its CPU),
 * the latency every cross-core transfer of the shared-memory path pays.
 * On this project's VMs it moves between runs (the host places the vCPUs),
 * and with it what the single-copy average costs in training: scaling.sh
 * prints it beside its figures.
 *
 *   hora bench xcpu [--cpus A,B] [--rounds N]
 *
 * Default: the first two CPUs this process may run on; 200000 rounds;
 * prints the median of 5 passes in ns per round trip.
 */
#include "bench.h"
#include "report.h"

#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xcpu {
	alignas(64) _Atomic long v;
	alignas(64) _Atomic int failed; /* the other thread could not start */
	int cpu[2];
	long rounds;
	double ns;
};

static int bind_cpu(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static void *pong(void *arg)
{
	struct xcpu *x = arg;
	if (bind_cpu(x->cpu[1])) {
		atomic_store(&x->failed, 1); /* the other side stops waiting */
		return (void *)1;
	}
	for (long i = 0; i < x->rounds; i++) {
		while (atomic_load_explicit(&x->v, memory_order_acquire) != 2 * i + 1)
			;
		atomic_store_explicit(&x->v, 2 * i + 2, memory_order_release);
	}
	return NULL;
}

static int pass(struct xcpu *x)
{
	pthread_t t;
	atomic_store(&x->v, 0);
	if (pthread_create(&t, NULL, pong, x))
		return -2;
	double t0 = hora_bench_now();
	for (long i = 0; i < x->rounds && !atomic_load_explicit(&x->failed, memory_order_relaxed); i++) {
		atomic_store_explicit(&x->v, 2 * i + 1, memory_order_release);
		while (atomic_load_explicit(&x->v, memory_order_acquire) != 2 * i + 2 &&
		       !atomic_load_explicit(&x->failed, memory_order_relaxed))
			;
	}
	x->ns = (hora_bench_now() - t0) / (double)x->rounds * 1e9;
	void *rc;
	pthread_join(t, &rc);
	return rc ? -1 : 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int hora_bench_xcpu(int argc, char **argv)
{
	static const struct option lopts[] = {{"cpus", required_argument, 0, 'c'},
					      {"rounds", required_argument, 0, 'r'},
					      {"help", no_argument, 0, 'h'},
					      {0, 0, 0, 0}};
	static struct xcpu x;
	x.rounds = 200000;
	x.cpu[0] = x.cpu[1] = -1;
	int c;
	char junk;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (sscanf(optarg, "%d,%d%c", &x.cpu[0], &x.cpu[1], &junk) != 2 || x.cpu[0] < 0 || x.cpu[1] < 0 ||
			    x.cpu[0] == x.cpu[1] || x.cpu[0] >= CPU_SETSIZE || x.cpu[1] >= CPU_SETSIZE) {
				fprintf(stderr, "hora bench xcpu: --cpus wants two different CPUs, A,B (got '%s')\n",
					optarg);
				return 2;
			}
			break;
		case 'r': x.rounds = atol(optarg); break;
		case 'h': printf("usage: hora bench xcpu [--cpus A,B] [--rounds N]\n"); return 0;
		default: return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hora bench xcpu: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (x.rounds < 1000 || x.rounds > 100000000) {
		fprintf(stderr, "hora bench xcpu: need 1000 <= --rounds <= 100000000\n");
		return 2;
	}
	cpu_set_t own;
	if (sched_getaffinity(0, sizeof(own), &own))
		return 1;
	for (int i = 0, k = 0; x.cpu[1] < 0 && i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &own))
			x.cpu[k++] = i;
	if (x.cpu[1] < 0) {
		fprintf(stderr, "hora bench xcpu: this process may run on one CPU only: no pair to measure\n");
		return 2;
	}
	if (bind_cpu(x.cpu[0])) {
		fprintf(stderr, "hora bench xcpu: cannot run on CPU %d\n", x.cpu[0]);
		return 2;
	}
	double ns[5];
	for (int i = 0; i < 5; i++) {
		int rc = pass(&x);
		if (rc) {
			if (rc == -2)
				fprintf(stderr, "hora bench xcpu: cannot start a thread\n");
			else
				fprintf(stderr, "hora bench xcpu: cannot run on CPU %d\n", x.cpu[1]);
			return rc == -2 ? 1 : 2;
		}
		ns[i] = x.ns;
	}
	qsort(ns, 5, sizeof(ns[0]), cmp_d);
	printf("CPU %d <-> CPU %d: one cache line's round trip %.0f ns (median of 5 passes of %ld)\n", x.cpu[0],
	       x.cpu[1], ns[2], x.rounds);
	return 0;
}
