/* lost_threads.c - a ThreadSanitizer driver (see coll_threads.c) for the
 * loss watcher: three ranks of hora_init_with as threads of one process,
 * rank 2's membership loop blocked (a frozen process); ranks 0 and 1 fail
 * with HORA_ERR_LOST from the monitor thread while their calls run, rank 2
 * thaws and its late call fails; every communicator is then destroyed.
 * The same scenario as tests/core/test_comm.c's, checked for races.
 *   lost_threads [PORT_BASE] */
#include "hora.h"
#include "comm.h"
#include "init.h"
#include "tests/helpers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rank {
	const char *file;
	int proc, rc, rc2;
	char err[1024];
	struct hora_comm *c;
	pthread_barrier_t *bar;
	atomic_int *gate;
};

static void block_loop(void *arg)
{
	atomic_int *gate = arg;
	while (!atomic_load(gate))
		usleep(10000);
}

static void *call_block(void *arg)
{
	struct rank *x = arg;
	hora_net_loop_call(hora_comm_owned_loop(x->c), block_loop, x->gate);
	return NULL;
}

static void *rank_main(void *p)
{
	struct rank *x = p;
	struct hora_init_opts o;
	hora_init_opts_defaults(&o);
	o.cluster_file = x->file;
	o.proc = x->proc;
	o.secret_env = "lost-threads-secret-0123456789abcdef";
	x->rc = hora_init_with(&o, &x->c, x->err, sizeof(x->err));
	pthread_barrier_wait(x->bar);
	if (x->rc)
		return NULL;
	int64_t v = 1, sum = 0;
	struct hora_request *req; /* the async path: the call fails on the comm worker thread */
	x->rc = hora_allreduce_async(x->c, &v, &sum, 1, HORA_I64, HORA_SUM, &req);
	if (!x->rc)
		x->rc = hora_wait(req);
	pthread_t blocker;
	if (x->proc == 2)
		pthread_create(&blocker, NULL, call_block, x);
	pthread_barrier_wait(x->bar);
	if (x->proc == 2) {
		while (!atomic_load(x->gate))
			usleep(10000);
		pthread_join(blocker, NULL);
		x->rc2 = hora_allreduce(x->c, &v, &sum, 1, HORA_I64, HORA_SUM);
	} else {
		x->rc2 = hora_allreduce_async(x->c, &v, &sum, 1, HORA_I64, HORA_SUM, &req);
		if (!x->rc2)
			x->rc2 = hora_wait(req);
		snprintf(x->err, sizeof(x->err), "%s", hora_comm_last_error(x->c));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const int port = argc > 1 ? atoi(argv[1]) : 20000 + (int)(getpid() % 10000) * 4;
	char *dir = th_tmpdir(), *file = th_path(dir, "three.yaml");
	FILE *f = fopen(file, "w");
	if (!f)
		return 1;
	fprintf(f, "cluster:\n  port_base: %d\n  seeds: [\"127.0.0.1:%d\"]\n  nodes:\n"
		   "    - {host: 127.0.0.1, workers: 3}\nmembership:\n  probe_interval_ms: 100\n"
		   "  suspect_timeout_ms: 1000\n",
		port, port + 1);
	fclose(f);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 3);
	atomic_int gate = 0;
	struct rank rk[3];
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		rk[i] = (struct rank){.file = file, .proc = i, .bar = &bar, .gate = &gate};
		pthread_create(&th[i], NULL, rank_main, &rk[i]);
	}
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	atomic_store(&gate, 1);
	pthread_join(th[2], NULL);
	int bad = 0;
	for (int i = 0; i < 3; i++) {
		if (rk[i].rc) {
			fprintf(stderr, "rank %d: %s\n", i, rk[i].err);
			bad = 1;
		}
		if (i < 2 && (rk[i].rc2 != HORA_ERR_LOST || !strstr(rk[i].err, "rank 2 (worker 2, "))) {
			fprintf(stderr, "rank %d: rc %d: %s\n", i, rk[i].rc2, rk[i].err);
			bad = 1;
		}
		if (i == 2 && !rk[i].rc2) {
			fprintf(stderr, "rank 2: the late allreduce succeeded\n");
			bad = 1;
		}
		hora_finalize(rk[i].c);
	}
	pthread_barrier_destroy(&bar);
	th_rmrf(dir);
	free(file);
	free(dir);
	printf("lost_threads: %s\n", bad ? "FAIL" : "ok");
	return bad;
}
