/* comm_helpers.h - ranks as threads of one test process, each with its own
 * communicator over loopback (test_comm.c, test_dtrain.c, tests/tsan). */
#ifndef HORA_TEST_COMM_HELPERS_H
#define HORA_TEST_COMM_HELPERS_H

#include "hora.h"
#include "../helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TC_MAXR 6
#define TC_SECRET "test-cluster-secret-0123456789"

static char tc_addr[TC_MAXR][32];
static const char *tc_addrs[TC_MAXR];

/* fresh 127.0.0.1 ports for n ranks, below the ephemeral range (32768+) so
 * that no outgoing socket holds one */
static inline void tc_pick_addrs(int n)
{
	th_rank_addrs(tc_addr, tc_addrs, n);
}

static inline void tc_config(struct hora_comm_config *cfg, int rank, int n)
{
	hora_comm_config_defaults(cfg);
	cfg->rank = rank;
	cfg->size = n;
	cfg->addrs = tc_addrs;
	cfg->secret = TC_SECRET;
	cfg->secret_len = strlen(TC_SECRET);
	cfg->connect_timeout_ms = 10000;
	cfg->io_timeout_ms = 20000;
}

/* run fn on args[0..n) (each `size` bytes apart), one thread each, and join */
static inline void tc_threads(int n, void *(*fn)(void *), void *args, size_t size)
{
	pthread_t th[TC_MAXR];
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * size);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

/* one rank of a training job run by threads: tc_threads(n, tc_train_run, rk,
 * sizeof(*rk)) with rk[i] = {.r = i, .n = n, .cfg = ...} */
struct tc_train_rank {
	int r, n, rc;
	const struct hora_train_config *cfg;
	struct hora_train_result res;
	char err[1024];
};

static inline void *tc_train_run(void *p)
{
	struct tc_train_rank *x = p;
	struct hora_comm_config cc;
	tc_config(&cc, x->r, x->n);
	struct hora_comm *c;
	if ((x->rc = hora_comm_create(&cc, &c, x->err, sizeof(x->err))))
		return NULL;
	x->rc = hora_train_run_comm(c, x->cfg, &x->res, x->err, sizeof(x->err));
	hora_comm_destroy(c);
	return NULL;
}

#endif
