/* comm_helpers.h - ranks as threads of one test process, each with its own
 * communicator over loopback (test_comm.c, test_dtrain.c, tests/tsan). */
#ifndef HORA_TEST_COMM_HELPERS_H
#define HORA_TEST_COMM_HELPERS_H

#include "hora.h"
#include "net/util/clock.h"
#include "init.h"
#include "comm.h"
#include "net/coll/coll.h"
#include "../helpers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
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
	uint64_t single_copy; /* allreduces that took the single-copy path */
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
	x->single_copy = hora_net_comm_single_copy_calls(hora_comm_net(c));
	hora_comm_destroy(c);
	return NULL;
}

/* ---- a frozen rank (the loss watcher: test_comm.c, tests/tsan/lost_threads.c) ---- */

/* Three workers of one cluster file, joined with hora_init_with as threads.
 * After one allreduce together, rank 2 freezes its membership loop (no ping
 * answered, no timer run: the membership of a stopped process) until *gate
 * opens; ranks 0 and 1 meanwhile enter an allreduce that rank 2 never
 * joins, which the failure detector must end. Rank 2, thawed, calls it
 * late. async: the calls of ranks 0 and 1 go through the async path. */
struct tc_frozen_rank {
	const char *file;
	int proc, rc, rc2, async;
	double waited_s; /* ranks 0, 1: in the allreduce rank 2 never joined */
	char err[1024];
	struct hora_comm *c;
	pthread_barrier_t *bar;
	atomic_int *gate; /* rank 2's membership loop is blocked while 0 */
};

static inline void tc_block_loop(void *arg)
{
	atomic_int *gate = arg;
	while (!atomic_load(gate))
		usleep(10000);
}

static inline void *tc_call_block(void *arg)
{
	struct tc_frozen_rank *x = arg;
	hora_net_loop_call(hora_comm_owned_loop(x->c), tc_block_loop, x->gate);
	return NULL;
}

static inline int tc_frozen_allreduce(struct tc_frozen_rank *x, int64_t *v, int64_t *sum, int async)
{
	if (!async)
		return hora_allreduce(x->c, v, sum, 1, HORA_I64, HORA_SUM);
	struct hora_request *req; /* the call fails on the comm worker thread */
	int rc = hora_allreduce_async(x->c, v, sum, 1, HORA_I64, HORA_SUM, &req);
	return rc ? rc : hora_wait(req);
}

static inline void *tc_frozen_main(void *p)
{
	struct tc_frozen_rank *x = p;
	struct hora_init_opts o;
	hora_init_opts_defaults(&o);
	o.cluster_file = x->file;
	o.proc = x->proc;
	o.secret_env = TC_SECRET;
	x->rc = hora_init_with(&o, &x->c, x->err, sizeof(x->err));
	pthread_barrier_wait(x->bar);
	if (x->rc)
		return NULL;
	int64_t v = 1, sum = 0;
	x->rc = tc_frozen_allreduce(x, &v, &sum, x->async);
	if (!x->rc && sum != 3)
		x->rc = -EPROTO;
	pthread_t blocker;
	if (x->proc == 2)
		pthread_create(&blocker, NULL, tc_call_block, x);
	pthread_barrier_wait(x->bar);
	if (x->proc == 2) {
		while (!atomic_load(x->gate)) /* frozen until ranks 0 and 1 have returned */
			usleep(10000);
		pthread_join(blocker, NULL);
		x->rc2 = hora_allreduce(x->c, &v, &sum, 1, HORA_I64, HORA_SUM);
	} else {
		const double t0 = hora_clock_s();
		x->rc2 = tc_frozen_allreduce(x, &v, &sum, x->async);
		x->waited_s = hora_clock_s() - t0;
		snprintf(x->err, sizeof(x->err), "%s", hora_comm_last_error(x->c));
	}
	return NULL;
}

/* The cluster file of the three (in dir, suspect_timeout 1 s, probe 100 ms,
 * worker g on port_base + 1 + g), the run, rank 2 thawed once ranks 0 and 1
 * returned. Returns the file (caller frees); rk[i].c stay for the caller to
 * finalize. */
static inline char *tc_frozen_run(const char *dir, int port_base, int async, struct tc_frozen_rank rk[3])
{
	char *file = th_path(dir, "three.yaml");
	FILE *f = fopen(file, "w");
	if (!f)
		return file;
	fprintf(f, "cluster:\n  port_base: %d\n  seeds: [\"127.0.0.1:%d\"]\n  nodes:\n"
		   "    - {host: 127.0.0.1, workers: 3}\nmembership:\n  probe_interval_ms: 100\n"
		   "  suspect_timeout_ms: 1000\n",
		port_base, port_base + 1);
	fclose(f);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 3);
	atomic_int gate = 0;
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		rk[i] = (struct tc_frozen_rank){.file = file, .proc = i, .async = async, .bar = &bar,
						.gate = &gate};
		pthread_create(&th[i], NULL, tc_frozen_main, &rk[i]);
	}
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	atomic_store(&gate, 1); /* rank 2 thaws and calls late */
	pthread_join(th[2], NULL);
	pthread_barrier_destroy(&bar);
	for (int i = 0; i < 3; i++) /* they point into this frame */
		rk[i].bar = NULL, rk[i].gate = NULL;
	return file;
}

#endif
