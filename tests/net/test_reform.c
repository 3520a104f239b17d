/* test_reform.c - the next formation of the same ranks while the old
 * communicator still lives (an elastic re-form: a worker that came back
 * forms the new view while the others still train in the old one, and only
 * then destroy it). A formed communicator accepts nobody: a connect to a
 * rank's port is refused, so that a rank of the next formation retries
 * until that rank listens again, instead of reaching the old communicator,
 * failing its hello on the view of its frames and giving up its try (the
 * ranks connected to it then failed theirs in turn: a woken worker's return
 * cost the others 0.5-0.8 s of formation tries, against 0.1-0.2 s). Ranks
 * are threads of this process, as in test_coll.c. */
#include "net/coll/coll.h"
#include "net/util/hostport.h"
#include "net_helpers.h"
#include "../helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define N 3

static char addr[N][32];
static const char *addrs[N];

struct rank {
	int rank;
	uint32_t view;
	struct hora_net_comm *old; /* destroyed after delay_ms, before the create */
	int delay_ms;
	struct hora_net_comm *comm;
	int rc;
	char err[512];
	float sum;
};

static void *create(void *p)
{
	struct rank *a = p;
	if (a->delay_ms)
		nanosleep(&(struct timespec){a->delay_ms / 1000, (a->delay_ms % 1000) * 1000000L}, NULL);
	hora_net_comm_destroy(a->old);
	struct hora_net_comm_cfg cfg = {.rank = a->rank, .nranks = N, .addrs = addrs, .connect_timeout_ms = 5000,
					.shm = 1 /* TCP, as between hosts */};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)TEST_SECRET;
	cfg.opts.secret_len = strlen(TEST_SECRET);
	cfg.opts.view = a->view;
	a->rc = hora_net_comm_create(&cfg, &a->comm, a->err, sizeof(a->err));
	if (!a->rc) {
		a->sum = (float)(a->rank + 1);
		a->rc = hora_net_allreduce(a->comm, &a->sum, &a->sum, 1, HORA_NET_F32, HORA_NET_SUM);
		if (a->rc)
			snprintf(a->err, sizeof(a->err), "allreduce: %s", hora_net_comm_error(a->comm));
	}
	return NULL;
}

/* every rank forms view `view`, rank i after delay_ms[i] (NULL: none),
 * destroying its communicator of the previous view first */
static void form(struct rank *ra, uint32_t view, const int *delay_ms)
{
	pthread_t th[N];
	for (int i = 0; i < N; i++) {
		ra[i] = (struct rank){.rank = i, .view = view, .old = view > 1 ? ra[i].comm : NULL,
				      .delay_ms = delay_ms ? delay_ms[i] : 0};
		pthread_create(&th[i], NULL, create, &ra[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(ra[i].rc, 0, "view %u, rank %d: %s", view, i, ra[i].err);
		cr_assert_float_eq(ra[i].sum, N * (N + 1) / 2.0f, 0, "view %u, rank %d: sum %g", view, i, ra[i].sum);
	}
}

static int connect_to(const char *hostport)
{
	char host[64];
	uint16_t port;
	cr_assert_eq(hora_hostport_split(hostport, host, sizeof(host), &port), 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	const int fd = socket(AF_INET, SOCK_STREAM, 0);
	const int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	const int e = errno;
	close(fd);
	return rc ? -e : 0;
}

Test(net_reform, a_formed_communicator_refuses_connects)
{
	th_rank_addrs(addr, addrs, N);
	struct rank ra[N];
	form(ra, 1, NULL);
	for (int i = 0; i < N; i++) {
		const int rc = connect_to(addrs[i]);
		cr_assert_eq(rc, -ECONNREFUSED, "rank %d's port %s still accepts connects once formed (%s)", i,
			     addrs[i], rc ? strerror(-rc) : "connected");
	}
	for (int i = 0; i < N; i++)
		hora_net_comm_destroy(ra[i].comm);
}

/* The last rank forms the next view at once, the others 300 ms later (they
 * were busy in the old one): every rank's first try of the next view
 * succeeds. Before, the early rank reached the old communicators of the
 * others and failed ("hello of rank 0: peer closed the connection"). */
Test(net_reform, an_early_rank_of_the_next_view_waits_for_the_others)
{
	th_rank_addrs(addr, addrs, N);
	struct rank ra[N];
	form(ra, 1, NULL);
	static const int late[N] = {300, 300, 0};
	form(ra, 2, late);
	static const int later[N] = {0, 400, 150}; /* rank 0 early this time */
	form(ra, 3, later);
	for (int i = 0; i < N; i++)
		hora_net_comm_destroy(ra[i].comm);
}

/* 200 idle connections on rank 0's port before the other ranks connect
 * (strangers, a port scan, a flood at start-up), held open while it forms:
 * the formation completes and its allreduce is right. The handshake table
 * (transport.max_pending_handshakes, 64) drops its oldest idle connection
 * for each newcomer, so the real peers get through (net/README.md, "A
 * connection's life"). */
Test(net_reform, idle_connections_before_the_peers_do_not_stop_a_formation)
{
	th_rank_addrs(addr, addrs, N);
	struct rank ra[N];
	pthread_t th[N];
	static const int delay[N] = {0, 700, 700};
	for (int i = 0; i < N; i++) {
		ra[i] = (struct rank){.rank = i, .view = 1, .delay_ms = delay[i]};
		pthread_create(&th[i], NULL, create, &ra[i]);
	}
	char host[64];
	uint16_t port;
	cr_assert_eq(hora_hostport_split(addrs[0], host, sizeof(host), &port), 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	int fds[200], open = 0;
	for (int tries = 0; tries < 500 && !open; tries++) { /* until rank 0 listens */
		fds[0] = socket(AF_INET, SOCK_STREAM, 0);
		if (!connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)))
			open = 1;
		else
			close(fds[0]), nanosleep(&(struct timespec){0, 2000000}, NULL);
	}
	cr_assert_eq(open, 1, "rank 0 never listened");
	for (; open < 200; open++) {
		fds[open] = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_eq(connect(fds[open], (struct sockaddr *)&sa, sizeof(sa)), 0, "idle connection %d: %s", open,
			     strerror(errno));
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(ra[i].rc, 0, "rank %d with 200 idle connections on rank 0's port: %s", i, ra[i].err);
		cr_assert_float_eq(ra[i].sum, N * (N + 1) / 2.0f, 0, "rank %d: sum %g", i, ra[i].sum);
	}
	for (int i = 0; i < open; i++)
		close(fds[i]);
	for (int i = 0; i < N; i++)
		hora_net_comm_destroy(ra[i].comm);
}
