/* coll_threads.c - a ThreadSanitizer driver (deploy/test.sh builds it with
 * HORA_TSAN=ON; Criterion's runner cannot start under TSan here). Four ranks
 * as threads of one process, each with its own loop, comm thread and
 * sockets, run allreduces of 2 ... 1 Mi f32 elements (latency algorithm,
 * direct ring, sliced ring; the shared-memory stage and link when the
 * ranks share the host, as threads do) over shared memory, then TCP alone
 * with one and two sockets per peer, check every
 * result, then make one rank call another count and check that every rank
 * fails; then neighbour allreduces and pair averages (net/coll/neighbor.c);
 * last, async calls of the public API are waited for after their
 * communicator was destroyed. Exit status 0 only when all of that holds; TSan makes any data
 * race a failure of its own (exit 66). */
#include "net/coll/coll.h"
#include "net/transport/transport.h"
#include "hora.h"
#include "../helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 4
#define SECRET "test-cluster-secret-0123456789"

static char addr[N][32];
static const char *addrs[N];

struct rank {
	int rank, sockets, mismatch, rc, tcp;
	size_t count;
	struct hora_net_comm *comm;
	char err[512];
};

static void *create(void *p)
{
	struct rank *a = p;
	struct hora_net_comm_cfg cfg = {.rank = a->rank, .nranks = N, .addrs = addrs,
					.connect_timeout_ms = 20000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)SECRET;
	cfg.opts.secret_len = strlen(SECRET);
	cfg.opts.io_timeout_ms = 20000;
	cfg.opts.sockets_per_peer = a->sockets;
	cfg.segment_bytes = 64 << 10; /* several segments and slices per call */
	cfg.slice_bytes = 24 << 10;
	cfg.shm = a->tcp; /* 0: shared memory between the threads (one host), 1: TCP alone */
	a->rc = hora_net_comm_create(&cfg, &a->comm, a->err, sizeof(a->err));
	return NULL;
}

static float value(size_t i, int rank)
{
	return (float)((i + (size_t)rank) % 7);
}

static void *job(void *p)
{
	struct rank *a = p;
	size_t n = a->count + (size_t)(a->mismatch && a->rank == 2);
	float *b = malloc((n + 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		b[i] = value(i, a->rank);
	a->rc = hora_net_allreduce(a->comm, b, b, n, HORA_NET_F32, HORA_NET_SUM);
	if (a->rc)
		snprintf(a->err, sizeof(a->err), "%s", hora_net_comm_error(a->comm));
	for (size_t i = 0; !a->rc && i < n; i++) {
		float want = 0;
		for (int r = 0; r < N; r++)
			want += value(i, r);
		if (b[i] != want) {
			snprintf(a->err, sizeof(a->err), "element %zu of %zu is %g, not %g", i, n, b[i], want);
			a->rc = -1;
		}
	}
	free(b);
	return NULL;
}

/* Decentralized averaging after the allreduce: a neighbour allreduce over
 * the ring (r-1, r+1; several chunks at the larger counts), then a pair
 * average with r^1; each checked against its closed form. */
static void *gossip_job(void *p)
{
	struct rank *a = p;
	const size_t n = a->count;
	const int left = (a->rank + N - 1) % N, right = (a->rank + 1) % N, nb[2] = {left, right};
	float *b = malloc((n + 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		b[i] = value(i, a->rank);
	const struct hora_net_neighbors ring = {.self_weight = 0.5, .src = nb, .nsrc = 2, .dst = nb, .ndst = 2,
						.src_weights = (const double[]){0.25, 0.25}};
	a->rc = hora_net_neighbor_allreduce(a->comm, b, b, n, HORA_NET_F32, &ring);
	for (size_t i = 0; !a->rc && i < n; i++) {
		const float want = (float)(0.5 * value(i, a->rank) + 0.25 * value(i, left) + 0.25 * value(i, right));
		if (b[i] != want)
			a->rc = -1;
	}
	float mine = 0, theirs = 0;
	if (!a->rc)
		a->rc = hora_net_pair_average(a->comm, b, n, HORA_NET_F32, a->rank ^ 1);
	for (size_t i = 0; !a->rc && i < n; i++) {
		const int o = a->rank ^ 1, lo = o < a->rank ? o : a->rank, hi = lo ^ 1;
		mine = (float)(0.5 * value(i, lo) + 0.25 * value(i, (lo + N - 1) % N) + 0.25 * value(i, lo + 1));
		theirs = (float)(0.5 * value(i, hi) + 0.25 * value(i, hi - 1) + 0.25 * value(i, (hi + 1) % N));
		if (b[i] != (float)(0.5 * mine + 0.5 * (double)theirs))
			a->rc = -2;
	}
	if (a->rc)
		snprintf(a->err, sizeof(a->err), "%s", a->rc == -1 ? "wrong neighbour average" : a->rc == -2 ? "wrong pair average"
							      : hora_net_comm_error(a->comm));
	free(b);
	return NULL;
}

static int run(int sockets, int mismatch, int tcp)
{
	th_rank_addrs(addr, addrs, N);
	struct rank a[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		a[i] = (struct rank){.rank = i, .sockets = sockets, .tcp = tcp};
		pthread_create(&t[i], NULL, create, &a[i]);
	}
	int bad = 0;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		if (a[i].rc)
			fprintf(stderr, "rank %d: %s\n", i, a[i].err), bad = 1;
	}
	static const size_t counts[] = {2, 1000, 40009, 300000, 1 << 20};
	for (int k = 0; !bad && k < 5; k++) {
		for (int i = 0; i < N; i++) {
			a[i].count = counts[k];
			a[i].mismatch = mismatch && k == 4;
			pthread_create(&t[i], NULL, job, &a[i]);
		}
		for (int i = 0; i < N; i++) {
			pthread_join(t[i], NULL);
			if (a[i].mismatch ? !a[i].rc : a[i].rc != 0) {
				fprintf(stderr, "sockets %d, count %zu, rank %d: %s\n", sockets, counts[k], i,
					a[i].mismatch ? "a mismatched call succeeded" : a[i].err);
				bad = 1;
			}
		}
	}
	for (int k = 0; !bad && !mismatch && k < 5; k++) {
		for (int i = 0; i < N; i++) {
			a[i].count = counts[k];
			pthread_create(&t[i], NULL, gossip_job, &a[i]);
		}
		for (int i = 0; i < N; i++) {
			pthread_join(t[i], NULL);
			if (a[i].rc) {
				fprintf(stderr, "gossip, count %zu, rank %d: %s\n", counts[k], i, a[i].err);
				bad = 1;
			}
		}
	}
	for (int i = 0; i < N; i++)
		hora_net_comm_destroy(a[i].comm);
	printf("%d ranks, %s, %d socket(s) per peer%s: %s\n", N, tcp ? "TCP" : "shared memory", sockets,
	       mismatch ? ", one mismatched call" : "", bad ? "FAILED" : "ok");
	return bad;
}

/* The public API's async calls: queued on a one-rank communicator, which
 * is destroyed before they are waited for (hora.h allows it). */
static int wait_after_destroy(void)
{
	const char *self[1] = {"127.0.0.1:0"};
	struct hora_comm_config cfg;
	hora_comm_config_defaults(&cfg);
	cfg.size = 1;
	cfg.addrs = self;
	cfg.secret = SECRET;
	cfg.secret_len = strlen(SECRET);
	struct hora_comm *c;
	char err[256];
	if (hora_comm_create(&cfg, &c, err, sizeof(err)))
		return fprintf(stderr, "one-rank communicator: %s\n", err), 1;
	enum { K = 6, COUNT = 1 << 18 };
	float *buf[K];
	struct hora_request *rq[K];
	int bad = 0;
	for (int k = 0; k < K; k++) {
		buf[k] = malloc(COUNT * sizeof(float));
		for (size_t i = 0; i < COUNT; i++)
			buf[k][i] = value(i, k);
		bad |= hora_allreduce_async(c, buf[k], buf[k], COUNT, HORA_F32, HORA_SUM, &rq[k]) != 0;
	}
	hora_comm_destroy(c);
	for (int k = 0; k < K; k++) {
		bad |= hora_wait(rq[k]) != 0;
		for (size_t i = 0; i < COUNT; i++)
			bad |= buf[k][i] != value(i, k);
		free(buf[k]);
	}
	printf("async calls waited for after the communicator was destroyed: %s\n", bad ? "FAILED" : "ok");
	return bad;
}

int main(void)
{
	return run(1, 0, 0) | run(1, 1, 0) | run(1, 0, 1) | run(2, 0, 1) | run(1, 1, 1) | wait_after_destroy();
}
