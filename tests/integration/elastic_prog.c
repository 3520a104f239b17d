/* elastic_prog.c - a program of its own on an elastic job, for
 * test_elastic_api.sh (public API only: hora.h's "elastic jobs"). Its
 * state is a step counter and a vector; step k (from 0) adds the average
 * over ranks of k + 1 to every element, so after STEPS steps every element
 * is STEPS (STEPS + 1) / 2 whatever the ranks, re-forms and roll-backs were:
 * a step lost or replayed twice shows in the result. It commits every
 * COMMIT steps, asks at each commit whether to re-form
 * (an allreduce MAX of hora_elastic_pending), and after a failed call or an
 * agreed re-form: hora_elastic_reform, then every rank agrees on the
 * earliest of the ranks' latest commits and takes it from the lowest rank
 * that holds it (a joiner holds none).
 * usage: elastic_prog STEPS COMMIT SLEEP_US
 * prints "rank R of N: ..." lines; the last one "done: step S value V". */
#include "hora.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIM 4096

static struct {
	int64_t step; /* -1: none */
	double x[DIM];
} saved = {.step = -1};

static void commit(int64_t step, const double *x)
{
	saved.step = step;
	memcpy(saved.x, x, sizeof(saved.x));
}

/* After a re-form: every rank takes the same commit from one rank. */
static int sync_state(struct hora_comm *c, int64_t *step, double *x)
{
	const int n = hora_size(c), me = hora_rank(c);
	int64_t mine = saved.step, *all = malloc((size_t)n * sizeof(*all));
	if (!all)
		return -1;
	int rc = hora_allgather(c, &mine, all, 1, HORA_I64);
	int64_t target = -1;
	for (int i = 0; !rc && i < n; i++)
		if (all[i] >= 0 && (target < 0 || all[i] < target))
			target = all[i];
	int root = -1; /* the lowest rank whose latest commit is the target */
	for (int i = 0; !rc && i < n && root < 0; i++)
		if (all[i] >= 0 && all[i] == target)
			root = i;
	free(all);
	if (rc)
		return rc;
	if (root < 0) {
		fprintf(stderr, "rank %d: no rank holds a commit\n", me);
		return -2;
	}
	*step = target;
	if (me == root)
		memcpy(x, saved.x, DIM * sizeof(*x));
	if ((rc = hora_broadcast(c, x, DIM, HORA_F64, root)))
		return rc;
	commit(*step, x);
	printf("rank %d of %d: view %llu: took the commit at step %lld from rank %d\n", me, n,
	       (unsigned long long)hora_elastic_view(c), (long long)target, root);
	fflush(stdout);
	return 0;
}

/* One step, or the commit after it. */
static int step_once(struct hora_comm *c, int64_t *step, double *x, int every)
{
	double v = (double)(*step + 1);
	int rc = hora_allreduce(c, &v, &v, 1, HORA_F64, HORA_AVG);
	if (rc)
		return rc;
	for (int i = 0; i < DIM; i++)
		x[i] += v;
	++*step;
	if (*step % every)
		return 0;
	commit(*step, x);
	int pending = hora_elastic_pending(c);
	if ((rc = hora_allreduce(c, &pending, &pending, 1, HORA_I32, HORA_MAX)))
		return rc;
	return pending ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return fprintf(stderr, "usage: elastic_prog STEPS COMMIT SLEEP_US\n"), 2;
	const int64_t steps = atoll(argv[1]);
	const int every = atoi(argv[2]);
	const unsigned sleep_us = (unsigned)atoi(argv[3]);
	char err[1024];
	struct hora_comm *c;
	int rc = hora_init(NULL, &c, err, sizeof(err));
	if (rc)
		return fprintf(stderr, "init: %s\n", err), 1;
	static double x[DIM];
	int64_t step = 0;
	if (!hora_elastic_on(c))
		return fprintf(stderr, "not elastic\n"), 1;
	if (!hora_elastic_joined(c))
		commit(0, x);
	/* a joiner that loads its data for this long before its first call */
	const char *load_ms = getenv("ELASTIC_PROG_JOIN_LOAD_MS");
	if (load_ms && hora_elastic_joined(c))
		usleep((useconds_t)atoi(load_ms) * 1000);
	printf("rank %d of %d: %s\n", hora_rank(c), hora_size(c), hora_elastic_joined(c) ? "joined" : "started");
	fflush(stdout);
	rc = sync_state(c, &step, x);
	while (step < steps || rc) {
		if (rc) { /* a failed call (< 0) or an agreed re-form (1) */
			if ((rc = hora_elastic_reform(c, rc < 0 ? rc : 0, err, sizeof(err))))
				break;
			if ((rc = sync_state(c, &step, x)))
				continue; /* the new view failed too: again */
			continue;
		}
		usleep(sleep_us);
		rc = step_once(c, &step, x, every);
	}
	if (rc) {
		fprintf(stderr, "rank %d: stopped: %s (%s)\n", hora_rank(c), err, hora_strerror(rc));
		hora_finalize(c);
		return 1;
	}
	double v = x[0];
	for (int i = 1; i < DIM; i++)
		if (x[i] != v)
			v = -1;
	rc = hora_barrier(c); /* the end: every rank did its last step (hora.h) */
	if (!rc)
		hora_barrier(c); /* no rank leaves while one is in the first */
	printf("rank %d of %d: done: step %lld value %.1f%s\n", hora_rank(c), hora_size(c), (long long)step, v,
	       rc ? " (the final barrier failed)" : "");
	hora_finalize(c);
	return 0;
}
