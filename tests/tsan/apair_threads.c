/* apair_threads.c - a ThreadSanitizer driver (see coll_threads.c) for the
 * asynchronous pair averaging (hora_apair_*, net/coll/apair.c): 4 ranks as
 * threads, each with its communicator and its engine's channel (a loop and
 * comm thread each), 2,000 rounds of random delays in which even ranks ask
 * odd ones and every 25th round an odd rank asks too (requests meeting
 * busy ranks), then quiesce; the sum of the models must be kept. Exit 0
 * only when it is; TSan makes any data race a failure of its own (66). */
#include "hora.h"
#include "tests/core/comm_helpers.h"

#include <math.h>
#include <stdlib.h>

#define NR 4
#define COUNT 300
#define ROUNDS 2000

struct ar {
	int r, rc;
	double sum0, sum1;
	char err[512];
};

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	return z ^ (z >> 31);
}

static void rounds(struct ar *a, struct hora_comm *c, struct hora_apair *ap, double *x)
{
	uint64_t s = 77 + (uint64_t)a->r;
	for (int k = 0; k < ROUNDS && !a->rc; k++) {
		struct hora_apair_event ev;
		a->rc = hora_apair_poll(ap, x, &ev);
		if (!(a->r & 1) || k % 25 == 0) {
			int peer = (int)(rnd(&s) % 2) * 2 + 1;
			if (peer == a->r)
				peer = (peer + 2) % NR;
			const int rc = hora_apair_start(ap, peer, x);
			if (rc && rc != -EBUSY)
				a->rc = rc;
		}
		usleep((useconds_t)(rnd(&s) % 150));
	}
	if (!a->rc)
		a->rc = hora_apair_quiesce(ap, x, 30000, NULL);
	double one = 1;
	if (!a->rc)
		a->rc = hora_allreduce(c, &one, &one, 1, HORA_F64, HORA_SUM);
	snprintf(a->err, sizeof(a->err), "%s", hora_apair_error(ap));
}

static void *rank_main(void *p)
{
	struct ar *a = p;
	struct hora_comm_config cfg;
	tc_config(&cfg, a->r, NR);
	struct hora_comm *c;
	struct hora_apair *ap;
	if ((a->rc = hora_comm_create(&cfg, &c, a->err, sizeof(a->err))))
		return NULL;
	if ((a->rc = hora_apair_create(c, NR, COUNT, HORA_F64, &ap, a->err, sizeof(a->err)))) {
		hora_comm_destroy(c);
		return NULL;
	}
	double *x = malloc(COUNT * sizeof(double));
	for (int i = 0; i < COUNT; i++)
		a->sum0 += (x[i] = (double)((i * 7 + a->r * 13) % 101) - 50.0);
	rounds(a, c, ap, x);
	for (int i = 0; i < COUNT; i++)
		a->sum1 += x[i];
	free(x);
	hora_apair_destroy(ap);
	hora_comm_destroy(c);
	return NULL;
}

int main(void)
{
	struct ar a[NR];
	tc_pick_addrs(NR);
	for (int i = 0; i < NR; i++)
		a[i] = (struct ar){.r = i};
	tc_threads(NR, rank_main, a, sizeof(a[0]));
	double s0 = 0, s1 = 0;
	int bad = 0;
	for (int i = 0; i < NR; i++) {
		if (a[i].rc)
			fprintf(stderr, "rank %d: %d %s\n", i, a[i].rc, a[i].err), bad = 1;
		s0 += a[i].sum0;
		s1 += a[i].sum1;
	}
	if (fabs(s1 - s0) > 1e-9 * (fabs(s0) + 1))
		fprintf(stderr, "the sum moved: %.12g -> %.12g\n", s0, s1), bad = 1;
	printf("asynchronous pairs, %d ranks x %d rounds: %s\n", NR, ROUNDS, bad ? "FAILED" : "ok");
	return bad;
}
