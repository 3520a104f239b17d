/* test_link_shm_coll.c - the collectives of net/coll over the shared-memory
 * link alone. topo.c gives every one-host communicator that link and the
 * stage too, whose paths (the gather, the stage allreduce) would take most
 * of these calls; so each communicator here is made over TCP alone
 * (transport.shm off, ranks as threads) and its link is then swapped for a
 * shared-memory one built over socketpairs (the one place outside
 * net/coll that reaches into struct hora_net_comm). Every algorithm
 * (latency, direct ring, pipelined ring with segments smaller than the
 * ring and messages larger than it), allreduce of f32 sum, f64 avg and
 * i64 max, broadcast from every root, reduce-scatter, allgather, barrier,
 * a neighbour allreduce around the ring, N = 2, 3, 4 and 8, every result
 * checked; then a call of another count on one rank fails every rank, the
 * mismatch named by both calls where a rank meets it. And in processes: a
 * rank killed with -9 in the middle of a stream of allreduces fails every
 * other rank, each naming it. */
#include "net/coll/internal.h"
#include "net/coll/link_shm.h"
#include "../helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 8
#define SECRET "test-cluster-secret-0123456789"

static int N;
static char addr[MAXR][32];
static const char *addrs[MAXR];
static int sv[MAXR][MAXR];
static pthread_barrier_t bar;

struct rank {
	int me, bad;
	char what[600];
};
static struct rank ranks[MAXR];

#define BAD(r, ...)                                                                                \
	do {                                                                                       \
		if (!(r)->bad)                                                                     \
			snprintf((r)->what, sizeof((r)->what), __VA_ARGS__);                       \
		(r)->bad = 1;                                                                      \
	} while (0)

static double val(int r, size_t i)
{
	return (double)((long)((i * 7 + (size_t)r * 3) % 11) - 5);
}

static int swap_link(struct hora_net_comm *c, int me, char *e, size_t elen)
{
	int socks[MAXR];
	for (int j = 0; j < N; j++)
		socks[j] = j == me ? -1 : sv[me][j];
	c->link->ops->destroy(c->link);
	c->link = NULL;
	struct hora_net_link_shm_cfg sc = {.rank = me, .nranks = N, .socks = socks, .queued_ring = 256 << 10,
					   .fast_ring = 64 << 10, .io_timeout_ms = 20000,
					   .connect_timeout_ms = 20000};
	return hora_net_link_shm_create(&sc, &c->link, e, elen);
}

static void allreduces(struct hora_net_comm *c, struct rank *r, size_t n)
{
	float *f = malloc(n * sizeof(float));
	double *d = malloc(n * sizeof(double));
	int64_t *q = malloc(n * sizeof(int64_t));
	for (size_t i = 0; i < n; i++)
		f[i] = (float)val(r->me, i), d[i] = val(r->me, i), q[i] = (int64_t)val(r->me, i) * (r->me + 1);
	if (hora_net_allreduce(c, f, f, n, HORA_NET_F32, HORA_NET_SUM) ||
	    hora_net_allreduce(c, d, d, n, HORA_NET_F64, HORA_NET_AVG) ||
	    hora_net_allreduce(c, q, q, n, HORA_NET_I64, HORA_NET_MAX))
		BAD(r, "allreduce of %zu: %s", n, hora_net_comm_error(c));
	for (size_t i = 0; i < n && !r->bad; i++) {
		double s = 0;
		int64_t m = INT64_MIN;
		for (int k = 0; k < N; k++) {
			s += val(k, i);
			int64_t v = (int64_t)val(k, i) * (k + 1);
			m = v > m ? v : m;
		}
		if (f[i] != (float)s || d[i] != s / N || q[i] != m)
			BAD(r, "allreduce of %zu: element %zu is %g %g %lld, not %g %g %lld", n, i, f[i], d[i],
			    (long long)q[i], s, s / N, (long long)m);
	}
	free(f), free(d), free(q);
}

static void broadcasts(struct hora_net_comm *c, struct rank *r, size_t n)
{
	uint32_t *b = malloc(n * 4);
	for (int root = 0; root < N && !r->bad; root++) {
		for (size_t i = 0; i < n; i++)
			b[i] = r->me == root ? (uint32_t)(i * 3 + (size_t)root) : 0;
		if (hora_net_broadcast(c, b, n, HORA_NET_I32, root))
			BAD(r, "broadcast of %zu from %d: %s", n, root, hora_net_comm_error(c));
		for (size_t i = 0; i < n && !r->bad; i++)
			if (b[i] != (uint32_t)(i * 3 + (size_t)root))
				BAD(r, "broadcast of %zu from %d: element %zu", n, root, i);
	}
	free(b);
}

static void scatter_gather(struct hora_net_comm *c, struct rank *r)
{
	const size_t k = 50001;
	float *s = malloc(k * (size_t)N * 4), *o = malloc(k * 4);
	for (size_t i = 0; i < k * (size_t)N; i++)
		s[i] = (float)val(r->me, i);
	if (hora_net_reduce_scatter(c, s, o, k, HORA_NET_F32, HORA_NET_SUM))
		BAD(r, "reduce_scatter: %s", hora_net_comm_error(c));
	for (size_t i = 0; i < k && !r->bad; i++) {
		double t = 0;
		for (int q = 0; q < N; q++)
			t += val(q, (size_t)r->me * k + i);
		if (o[i] != (float)t)
			BAD(r, "reduce_scatter: element %zu", i);
	}
	for (size_t i = 0; i < k; i++)
		o[i] = (float)(r->me * 1000 + (int)(i % 100));
	if (!r->bad && hora_net_allgather(c, o, s, k, HORA_NET_F32))
		BAD(r, "allgather: %s", hora_net_comm_error(c));
	for (int q = 0; q < N && !r->bad; q++)
		for (size_t i = 0; i < k && !r->bad; i++)
			if (s[(size_t)q * k + i] != (float)(q * 1000 + (int)(i % 100)))
				BAD(r, "allgather: block %d element %zu", q, i);
	if (!r->bad && hora_net_barrier(c))
		BAD(r, "barrier: %s", hora_net_comm_error(c));
	free(s), free(o);
}

static void neighbours(struct hora_net_comm *c, struct rank *r)
{
	const size_t n = 200000;
	double *x = malloc(n * 8), *y = malloc(n * 8), w[1] = {0.5};
	for (size_t i = 0; i < n; i++)
		x[i] = r->me + (double)i;
	int src[1] = {(r->me + N - 1) % N}, dst[1] = {(r->me + 1) % N};
	struct hora_net_neighbors nb = {.self_weight = 0.5, .src = src, .src_weights = w, .nsrc = 1, .dst = dst,
					.ndst = 1};
	if (hora_net_neighbor_allreduce(c, x, y, n, HORA_NET_F64, &nb))
		BAD(r, "neighbor_allreduce: %s", hora_net_comm_error(c));
	for (size_t i = 0; i < n && !r->bad; i++)
		if (y[i] != 0.5 * (r->me + (double)i) + 0.5 * (src[0] + (double)i))
			BAD(r, "neighbor_allreduce: element %zu", i);
	free(x), free(y);
}

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	struct hora_net_comm_cfg cfg = {.rank = r->me, .nranks = N, .addrs = addrs, .connect_timeout_ms = 20000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)SECRET;
	cfg.opts.secret_len = strlen(SECRET);
	cfg.opts.io_timeout_ms = 20000;
	cfg.segment_bytes = 64 << 10; /* several segments per chunk, several ring laps per message */
	cfg.slice_bytes = 24 << 10;
	cfg.shm = 1; /* TCP, whose link we swap for the shared-memory one alone (no stage) */
	struct hora_net_comm *c;
	char e[512] = "";
	if (hora_net_comm_create(&cfg, &c, e, sizeof(e))) {
		BAD(r, "create: %s", e);
		for (int j = 0; j < N; j++) /* the others' setups then fail on their own */
			if (j != r->me)
				close(sv[r->me][j]);
		pthread_barrier_wait(&bar);
		return NULL;
	}
	pthread_barrier_wait(&bar); /* every TCP link is up before any goes */
	if (swap_link(c, r->me, e, sizeof(e))) {
		BAD(r, "the shared-memory link: %s", e);
		hora_net_comm_destroy(c);
		return NULL;
	}
	const size_t counts[] = {1, 7, 1000, 40009, 300000};
	const enum hora_net_algo algos[] = {HORA_NET_ALGO_AUTO, HORA_NET_ALGO_RING, HORA_NET_ALGO_LATENCY,
					    HORA_NET_ALGO_DIRECT_RING};
	for (int a = 0; a < 4 && !r->bad; a++)
		for (int k = 0; k < 5 && !r->bad; k++) {
			if (algos[a] == HORA_NET_ALGO_LATENCY && counts[k] > 100000)
				continue;
			hora_net_comm_set_algo(c, algos[a]);
			allreduces(c, r, counts[k]);
			broadcasts(c, r, counts[k]);
		}
	hora_net_comm_set_algo(c, HORA_NET_ALGO_AUTO);
	if (!r->bad)
		scatter_gather(c, r);
	if (!r->bad)
		neighbours(c, r);
	if (!r->bad) { /* rank 0 calls another count: every rank fails */
		float b[64] = {0};
		int rc = hora_net_allreduce(c, b, b, r->me == 0 ? 63 : 64, HORA_NET_F32, HORA_NET_SUM);
		if (!rc)
			BAD(r, "a mismatched allreduce passed");
		else if ((r->me == 1 || r->me == 0) && N == 2 &&
			 !(rc == -EBADE && strstr(hora_net_comm_error(c), "count 63") &&
			   strstr(hora_net_comm_error(c), "count 64")))
			BAD(r, "the mismatch not named: %d %s", rc, hora_net_comm_error(c));
	}
	hora_net_comm_destroy(c);
	return NULL;
}

/* a connected Unix socket pair between every two of n ranks: sv[i][j] */
static void socket_mesh(int n)
{
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			int p[2];
			cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, p), 0);
			sv[i][j] = p[0], sv[j][i] = p[1];
		}
}

static void run(int n)
{
	N = n;
	th_rank_addrs(addr, addrs, n);
	socket_mesh(n);
	pthread_barrier_init(&bar, NULL, (unsigned)n);
	pthread_t t[MAXR];
	for (int i = 0; i < n; i++) {
		ranks[i] = (struct rank){.me = i};
		pthread_create(&t[i], NULL, rank_main, &ranks[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&bar);
	for (int i = 0; i < n; i++)
		cr_expect_eq(ranks[i].bad, 0, "rank %d: %s", i, ranks[i].what);
}

Test(link_shm_coll, every_algorithm_over_shared_memory_2_ranks, .timeout = 60)
{
	run(2);
}

Test(link_shm_coll, every_algorithm_over_shared_memory_3_ranks, .timeout = 60)
{
	run(3);
}

Test(link_shm_coll, every_algorithm_over_shared_memory_4_ranks, .timeout = 60)
{
	run(4);
}

Test(link_shm_coll, every_algorithm_over_shared_memory_8_ranks, .timeout = 120)
{
	run(8);
}

/* ---- a rank killed mid-allreduce ------------------------------------------------ */

struct report {
	int rc[MAXR], calls[MAXR];
	char err[MAXR][512];
};

static int proc_rank(int me, int n, struct report *rep, int ready_w)
{
	N = n;
	struct hora_net_comm_cfg cfg = {.rank = me, .nranks = n, .addrs = addrs, .connect_timeout_ms = 20000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)SECRET;
	cfg.opts.secret_len = strlen(SECRET);
	cfg.opts.io_timeout_ms = 20000;
	cfg.shm = 1; /* TCP first, then the shared-memory link alone (no stage) */
	struct hora_net_comm *c;
	char e[512] = "";
	if (hora_net_comm_create(&cfg, &c, e, sizeof(e)) || swap_link(c, me, e, sizeof(e))) {
		snprintf(rep->err[me], sizeof(rep->err[me]), "setup: %.400s", e);
		return 1;
	}
	const size_t count = 1 << 20;
	float *b = calloc(count, sizeof(float));
	int rc = 0, k;
	for (k = 0; k < 20000 && !rc; k++) {
		rc = hora_net_allreduce(c, b, b, count, HORA_NET_F32, HORA_NET_SUM);
		if (k == 2 && me == 2 && write(ready_w, "r", 1) != 1) /* the victim is well in */
			return 2;
	}
	rep->rc[me] = rc;
	rep->calls[me] = k;
	snprintf(rep->err[me], sizeof(rep->err[me]), "%s", hora_net_comm_error(c));
	free(b);
	hora_net_comm_destroy(c);
	return 0;
}

Test(link_shm_coll, a_rank_killed_mid_allreduce_fails_the_others_naming_it, .timeout = 60)
{
	const int n = 4;
	struct report *rep = mmap(NULL, sizeof(*rep), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(rep, MAP_FAILED);
	memset(rep, 0, sizeof(*rep));
	th_rank_addrs(addr, addrs, n);
	socket_mesh(n);
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t pid[MAXR];
	fflush(NULL);
	for (int r = 0; r < n; r++) {
		pid[r] = fork();
		cr_assert_geq(pid[r], 0);
		if (pid[r] == 0) {
			for (int i = 0; i < n; i++)
				for (int j = 0; j < n; j++)
					if (i != j && i != r)
						close(sv[i][j]);
			_exit(proc_rank(r, n, rep, ready[1]));
		}
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			if (i != j)
				close(sv[i][j]);
	char ch;
	cr_assert_eq(read(ready[0], &ch, 1), 1, "rank 2 ran its allreduces");
	kill(pid[2], SIGKILL);
	for (int r = 0; r < n; r++) {
		int st;
		cr_assert_eq(waitpid(pid[r], &st, 0), pid[r]);
		if (r == 2)
			cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		else
			cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: %s", r, rep->err[r]);
	}
	for (int r = 0; r < n; r++)
		if (r != 2)
			cr_expect(rep->rc[r] != 0 && strstr(rep->err[r], "rank 2"), "rank %d after %d calls: %d %s", r,
				  rep->calls[r], rep->rc[r], rep->err[r]);
	for (int r = 0; r < n; r++)
		if (r != 2)
			cr_log_info("rank %d: %s", r, rep->err[r]);
	close(ready[0]);
	close(ready[1]);
	munmap(rep, sizeof(*rep));
}
