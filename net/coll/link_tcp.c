/* link_tcp.c - the TCP link of a communicator (link.h): the queued path is
 * the io_uring transport (one authenticated peer per rank, net/transport/transport.h),
 * the caller-driven path one plain authenticated TCP socket per pair
 * (fast.h). Setting it up: listen, connect to every lower rank and accept
 * every higher one, check every rank's hello (its rank and the size it was
 * created with), stop listening (a formed communicator accepts nobody: a
 * rank of the next formation is refused until this rank's next one
 * listens), then the fast sockets. This file is the only one in
 * net/coll/ that knows the transport; it is not an algorithm.
 */
#include "net/coll/link_tcp.h"

#include "net/coll/fast.h"
#include "net/transport/transport.h"
#include "net/util/clock.h"
#include "net/util/hostport.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct link_tcp {
	struct hora_net_link base;
	struct hora_net_loop *loop;
	struct hora_net_peer **peer; /* peer[rank]; NULL for self and once closed */
	int *fast;                   /* fast[rank]: small-message socket; -1 for self and once closed */
	int io_timeout_ms;
	const struct hora_net_comm_cfg *cfg; /* during setup only */
	uint32_t hello[4];                   /* ours, sent to every peer during setup */
	/* setup only: the caller's check stopped the formation (its code and
	 * text, which become the error of create) */
	int check_rc;
	char check_why[512];
	int gone_rank; /* setup only: a rank whose transport connection broke during the fast setup, or -1 */
	/* tcp_interrupt (any thread) against closing peer[] and fast[] (the
	 * calling thread): both take mu */
	pthread_mutex_t mu;
};

static struct link_tcp *tcp_of(struct hora_net_link *l)
{
	return (struct link_tcp *)l;
}

/* ---- the ops --------------------------------------------------------------------- */

static int tcp_post_send(struct hora_net_link *l, int peer, const void *buf, size_t len,
			 hora_net_link_done_fn cb, void *arg, struct hora_net_link_req **req)
{
	struct hora_net_peer *p = tcp_of(l)->peer[peer];
	if (!p)
		return -ENOTCONN;
	return hora_net_isend(p, buf, len, cb, arg, (struct hora_net_req **)req);
}

static int tcp_post_recv(struct hora_net_link *l, int peer, void *buf, size_t len, hora_net_link_done_fn cb,
			 void *arg, struct hora_net_link_req **req)
{
	struct hora_net_peer *p = tcp_of(l)->peer[peer];
	if (!p)
		return -ENOTCONN;
	return hora_net_irecv(p, buf, len, cb, arg, (struct hora_net_req **)req);
}

static int tcp_wait(struct hora_net_link_req *req, char *err, size_t errlen)
{
	return hora_net_wait((struct hora_net_req *)req, err, errlen);
}

static int tcp_exchange(struct hora_net_link *l, struct hora_net_link_xchg *x)
{
	struct link_tcp *t = tcp_of(l);
	struct hora_net_fast_xchg f = {
		.out_fd = x->to >= 0 ? t->fast[x->to] : -1, .out_head = x->out_head, .out_body = x->out_body,
		.out_bytes = x->out_bytes, .in_fd = x->from >= 0 ? t->fast[x->from] : -1,
		.in_head = x->in_head, .in_body = x->in_body, .in_bytes = x->in_bytes,
		.head_bytes = x->head_bytes, .check = x->check, .check_arg = x->check_arg,
		.timeout_ms = t->io_timeout_ms, .spin_us = x->spin_us, .err = x->err, .errlen = x->errlen};
	int rc = hora_net_fast_xchg(&f);
	x->dir = f.dir;
	if (f.torn) { /* rank `to` is inside our message: nothing more may follow it */
		pthread_mutex_lock(&t->mu);
		close(t->fast[x->to]);
		t->fast[x->to] = -1;
		pthread_mutex_unlock(&t->mu);
	}
	return rc;
}

static int tcp_notify(struct hora_net_link *l, int peer, const void *buf, size_t len)
{
	const int fd = tcp_of(l)->fast[peer];
	if (fd < 0)
		return -ENOTCONN;
	ssize_t w = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	return w == (ssize_t)len ? 0 : w < 0 ? -errno : -EAGAIN;
}

static int tcp_peek(struct hora_net_link *l, int peer, void *buf, size_t len, int wait_ms)
{
	const int fd = tcp_of(l)->fast[peer];
	if (fd < 0)
		return -ENOTCONN;
	ssize_t got = recv(fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
	if (got != (ssize_t)len) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, wait_ms) != 1)
			return -ETIMEDOUT;
		got = recv(fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
	}
	return got == (ssize_t)len ? 0 : -EAGAIN;
}

static void tcp_interrupt(struct hora_net_link *l, const char *why)
{
	struct link_tcp *t = tcp_of(l);
	pthread_mutex_lock(&t->mu);
	for (int i = 0; t->fast && i < l->nranks; i++)
		if (t->fast[i] >= 0)
			shutdown(t->fast[i], SHUT_RD);
	for (int i = 0; t->peer && i < l->nranks; i++)
		hora_net_peer_abort(t->peer[i], why);
	pthread_mutex_unlock(&t->mu);
}

static void tcp_close(struct hora_net_link *l, int peer)
{
	struct link_tcp *t = tcp_of(l);
	pthread_mutex_lock(&t->mu);
	for (int i = peer < 0 ? 0 : peer; i < (peer < 0 ? l->nranks : peer + 1); i++) {
		if (t->peer) {
			hora_net_peer_close(t->peer[i]);
			t->peer[i] = NULL;
		}
		if (t->fast && t->fast[i] >= 0) {
			close(t->fast[i]);
			t->fast[i] = -1;
		}
	}
	pthread_mutex_unlock(&t->mu);
}

static void tcp_destroy(struct hora_net_link *l)
{
	if (!l)
		return;
	struct link_tcp *t = tcp_of(l);
	tcp_close(l, -1);
	hora_net_loop_destroy(t->loop);
	pthread_mutex_destroy(&t->mu);
	free(t->peer);
	free(t->fast);
	free(t);
}

static const struct hora_net_link_ops tcp_ops = {
	.post_send = tcp_post_send,
	.post_recv = tcp_post_recv,
	.wait = tcp_wait,
	.exchange = tcp_exchange,
	.notify = tcp_notify,
	.peek = tcp_peek,
	.interrupt = tcp_interrupt,
	.close = tcp_close,
	.destroy = tcp_destroy,
};

/* ---- setup ----------------------------------------------------------------------- */

/* The first message on every transport peer: who this rank is and the size
 * of the communicator it was created with, so that ranks created with
 * different sizes say so instead of waiting for ranks that never come. */
#define HELLO_MAGIC 0x6c6f6368u /* "hcol" */
struct hello {
	uint32_t magic, rank, size, zero;
};

static int post_hello(struct link_tcp *t, int peer, struct hora_net_req **req)
{
	return hora_net_isend(t->peer[peer], t->hello, sizeof(t->hello), NULL, NULL, req);
}

/* Receive and check the hello of rank `peer` (the send of ours is already
 * posted). */
static int check_hello(struct link_tcp *t, int peer, char *err, size_t errlen)
{
	struct hello h;
	struct hora_net_req *r;
	char e2[256] = "";
	const int me = t->base.rank, n = t->base.nranks;
	int rc = hora_net_irecv(t->peer[peer], &h, sizeof(h), NULL, NULL, &r);
	if (!rc)
		rc = hora_net_wait(r, e2, sizeof(e2));
	else
		snprintf(e2, sizeof(e2), "%s", strerror(-rc));
	if (rc)
		return snprintf(err, errlen, "rank %d: hello of rank %d: %s", me, peer, e2), rc;
	if (h.magic != HELLO_MAGIC || h.rank != (uint32_t)peer)
		return snprintf(err, errlen, "rank %d: rank %d's hello is not a communicator's", me, peer),
		       -EPROTO;
	if (h.size != (uint32_t)n)
		return snprintf(err, errlen,
				"rank %d: rank %d was created with size %u, this rank with size %d: every rank "
				"of a communicator must be created with the same size",
				me, peer, h.size, n),
		       -EINVAL;
	return 0;
}

/* The caller's check (cfg->check), between two slices of a wait: 0 goes
 * on; else its code, kept with its text for create's error. */
static int form_check(struct link_tcp *t)
{
	if (!t->cfg->check)
		return 0;
	char why[sizeof(t->check_why)] = "";
	const int rc = t->cfg->check(t->cfg->check_arg, why, sizeof(why));
	if (rc) {
		t->check_rc = rc;
		snprintf(t->check_why, sizeof(t->check_why), "%s",
			 why[0] ? why : "the formation was stopped by its caller");
	}
	return rc;
}

/* Whether a connect that failed may pass on a later try: the peer not
 * listening yet or not reachable yet, a handshake cut off. */
static bool connect_transient(int rc)
{
	return rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -EPIPE ||
	       rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EAGAIN;
}

/* hora_net_connect within timeout_ms, in slices of HORA_NET_FORM_CHECK_MS
 * with the check between them. Once connected, a slice's handshake gets at
 * least 1 s (net/transport/conn.c: a slow challenge on a busy host cuts no
 * attempt; a listener that is no hora costs that second), and once the
 * client sent its AUTH nothing but the handshake timeout cuts it, so the
 * other end holds no peer from an abandoned slice. */
static int connect_checked(struct link_tcp *t, const char *host, uint16_t port, int timeout_ms,
			   struct hora_net_peer **out, char *err, size_t errlen)
{
	const int64_t deadline = hora_clock_ms() + timeout_ms;
	for (;;) {
		const int64_t left = deadline - hora_clock_ms();
		const int slice = !t->cfg->check || left < HORA_NET_FORM_CHECK_MS ? (int)(left > 1 ? left : 1)
										   : HORA_NET_FORM_CHECK_MS;
		int rc = hora_net_connect(t->loop, host, port, slice, out, err, errlen);
		if (!rc || !connect_transient(rc) || hora_clock_ms() >= deadline)
			return rc;
		if ((rc = form_check(t)))
			return rc;
	}
}

/* hora_net_accept within timeout_ms, in slices with the check between. */
static int accept_checked(struct link_tcp *t, int timeout_ms, struct hora_net_peer **out, char *err,
			  size_t errlen)
{
	const int64_t deadline = hora_clock_ms() + timeout_ms;
	for (;;) {
		const int64_t left = deadline - hora_clock_ms();
		const int slice = !t->cfg->check || left < HORA_NET_FORM_CHECK_MS ? (int)(left > 0 ? left : 0)
										   : HORA_NET_FORM_CHECK_MS;
		char e2[400] = "";
		int rc = hora_net_accept(t->loop, slice, out, e2, sizeof(e2));
		if (rc != -ETIMEDOUT || hora_clock_ms() >= deadline) {
			/* the text names the slice: name the whole wait, keep the rest */
			const char *rest = rc == -ETIMEDOUT ? strchr(e2, ';') : NULL;
			if (rc == -ETIMEDOUT)
				snprintf(err, errlen, "no peer connected within %d ms%s", timeout_ms,
					 rest ? rest : "");
			else if (rc)
				snprintf(err, errlen, "%s", e2);
			return rc;
		}
		if ((rc = form_check(t)))
			return rc;
	}
}

/* Connect to every lower rank and send each our hello. */
static int connect_lower(struct link_tcp *t, struct hora_net_req **hs, char *err, size_t errlen)
{
	const struct hora_net_comm_cfg *cfg = t->cfg;
	const int me = t->base.rank;
	char host[64];
	uint16_t port;
	for (int j = 0; j < me; j++) {
		char e2[256] = "";
		hora_hostport_split(cfg->addrs[j], host, sizeof(host), &port);
		int rc = connect_checked(t, host, port, cfg->connect_timeout_ms, &t->peer[j], e2, sizeof(e2));
		if (rc)
			return snprintf(err, errlen, "rank %d: connecting to rank %d at %s: %s", me, j,
					cfg->addrs[j], e2),
			       rc;
		if (hora_net_peer_node(t->peer[j]) != (uint32_t)j)
			return snprintf(err, errlen, "rank %d: %s answered as rank %u, expected %d", me,
					cfg->addrs[j], hora_net_peer_node(t->peer[j]), j),
			       -EPROTO;
		if ((rc = post_hello(t, j, &hs[j])))
			return snprintf(err, errlen, "rank %d: cannot send to rank %d: %s", me, j, strerror(-rc)), rc;
	}
	return 0;
}

/* Accept one higher rank within timeout_ms: send our hello, check theirs.
 * -EINVAL: it was created with another size (named in err). */
static int accept_one(struct link_tcp *t, int timeout_ms, struct hora_net_req **hs, char *err, size_t errlen)
{
	const int me = t->base.rank, n = t->base.nranks;
	struct hora_net_peer *p;
	char e2[256] = "";
	int rc = accept_checked(t, timeout_ms, &p, e2, sizeof(e2));
	if (rc)
		return snprintf(err, errlen, "rank %d: waiting for ranks above: %s", me, e2), rc;
	uint32_t j = hora_net_peer_node(p);
	if (j < (uint32_t)n && j > (uint32_t)me && !t->peer[j]) {
		t->peer[j] = p;
		if ((rc = post_hello(t, (int)j, &hs[j])))
			return snprintf(err, errlen, "rank %d: cannot send to rank %u: %s", me, j, strerror(-rc)), rc;
		return check_hello(t, (int)j, err, errlen);
	}
	/* a rank of another size may number itself beyond ours: its hello says */
	struct hello h;
	struct hora_net_req *r;
	rc = -EPROTO;
	if (j != (uint32_t)me && !hora_net_irecv(p, &h, sizeof(h), NULL, NULL, &r) && !hora_net_wait(r, NULL, 0) &&
	    h.magic == HELLO_MAGIC && h.size != (uint32_t)n) {
		snprintf(err, errlen, "rank %d: rank %u was created with size %u, this rank with size %d: "
				      "every rank of a communicator must be created with the same size",
			 me, j, h.size, n);
		rc = -EINVAL;
	} else {
		snprintf(err, errlen, "rank %d: unexpected peer claiming rank %u", me, j);
	}
	hora_net_peer_close(p);
	return rc;
}

/* After a size mismatch a rank goes on accepting for a while (LINGER_MS a
 * peer): our hello still reaches the ranks that wait for it, which may be
 * of our size and meet the odd rank only later. */
#define LINGER_MS 500

/* Accept every higher rank. rc: -EINVAL when a size mismatch was seen
 * already (its text in err, which stays the error). */
static int accept_higher(struct link_tcp *t, struct hora_net_req **hs, char *err, size_t errlen, int rc)
{
	for (int k = t->base.rank + 1; k < t->base.nranks; k++) {
		char e3[512];
		const int r = rc ? accept_one(t, LINGER_MS, hs, e3, sizeof(e3))
				 : accept_one(t, t->cfg->connect_timeout_ms, hs, err, errlen);
		if (r && (rc || r != -EINVAL))
			return rc ? rc : r;
		rc = r ? r : rc;
	}
	return rc;
}

/* The transport mesh with hellos: our hello goes to every lower rank before
 * we wait for any of theirs, and a size mismatch does not stop the hellos
 * (accept_higher), so that a rank created with another size is named by
 * every rank it reached. */
static int transport_setup(struct link_tcp *t, char *err, size_t errlen)
{
	const int me = t->base.rank, n = t->base.nranks;
	struct hora_net_req **hs = calloc((size_t)n, sizeof(*hs));
	if (!hs)
		return -ENOMEM;
	/* connecting fails on its own (no hello is read there): stop at once */
	int rc = connect_lower(t, hs, err, errlen);
	bool mismatch = false; /* a size mismatch seen: its text stays in err */
	for (int j = 0; !rc && j < me; j++) {
		char e3[512];
		const int r = mismatch ? check_hello(t, j, e3, sizeof(e3)) : check_hello(t, j, err, errlen);
		if (r == -EINVAL) {
			mismatch = true;
		} else if (r) {
			rc = mismatch ? 0 : r;
			break;
		}
	}
	if (!rc)
		rc = accept_higher(t, hs, err, errlen, mismatch ? -EINVAL : 0);
	/* every peer is in: a formed communicator accepts nobody. A rank of
	 * the next formation that connects before this one is destroyed (an
	 * elastic re-form: this rank still trains in the old view) is then
	 * refused and retries until the next one listens; accepted here, its
	 * hello failed on the view of its frames, it gave up its try and the
	 * ranks connected to it failed theirs in turn */
	if (!rc && (rc = hora_net_unlisten(t->loop)))
		snprintf(err, errlen, "rank %d: cannot stop listening: %s", me, strerror(-rc));
	for (int j = 0; j < n; j++)
		if (hs[j])
			hora_net_wait(hs[j], NULL, 0);
	free(hs);
	return rc;
}

/* The fast setup's check (fast.h): the caller's, and whether the
 * transport connection of each rank still awaited broke (that rank left
 * this formation: it failed, or gave it up, and will not connect). */
struct fast_wait {
	struct link_tcp *t;
	int lo, hi; /* the ranks awaited: lo..hi-1 */
};

static int fast_wait_check(void *arg)
{
	struct fast_wait *w = arg;
	struct link_tcp *t = w->t;
	int rc = form_check(t);
	for (int k = w->lo; !rc && k < w->hi; k++)
		if (k != t->base.rank && t->peer[k] && t->fast[k] < 0 && hora_net_peer_status(t->peer[k])) {
			t->gone_rank = k;
			rc = -ECONNRESET;
		}
	return rc;
}

/* err for a fast connect or accept that a check stopped (else e2's) */
static void fast_stopped(const struct link_tcp *t, const char *what, const char *e2, char *err, size_t errlen)
{
	const int me = t->base.rank;
	if (t->gone_rank >= 0)
		snprintf(err, errlen, "rank %d: %s: rank %d left this formation (its connection closed)", me,
			 what, t->gone_rank);
	else
		snprintf(err, errlen, "rank %d: %s: %s", me, what, e2);
}

/* One plain authenticated socket per pair for small messages: every rank
 * opens a listener, tells the ranks above it the port over the transport,
 * connects to the ranks below and accepts the ones above. */
static int fast_connect_lower(struct link_tcp *t, char *err, size_t errlen)
{
	const struct hora_net_comm_cfg *cfg = t->cfg;
	const int me = t->base.rank;
	char host[64], e2[256];
	uint16_t port;
	for (int j = 0; j < me; j++) {
		uint8_t in[2];
		struct hora_net_req *r;
		int rc = hora_net_irecv(t->peer[j], in, 2, NULL, NULL, &r);
		if (rc)
			return snprintf(err, errlen, "rank %d: port of rank %d's small-message channel: %s", me, j,
					strerror(-rc)),
			       rc;
		if ((rc = hora_net_wait(r, e2, sizeof(e2))))
			return snprintf(err, errlen, "rank %d: port of rank %d's small-message channel: %s", me, j,
					e2),
			       rc;
		hora_hostport_split(cfg->addrs[j], host, sizeof(host), &port);
		struct fast_wait w = {.t = t, .lo = j, .hi = j + 1};
		const struct hora_net_fast_check ck = {.fn = fast_wait_check, .arg = &w};
		rc = hora_net_fast_connect(host, (uint16_t)(in[0] << 8 | in[1]), cfg->opts.secret,
					   cfg->opts.secret_len, (uint32_t)me, cfg->connect_timeout_ms,
					   t->io_timeout_ms, &t->fast[j], e2, sizeof(e2), &ck);
		if (rc) {
			char what[64];
			snprintf(what, sizeof(what), "small-message channel to rank %d", j);
			return fast_stopped(t, what, e2, err, errlen), rc;
		}
	}
	return 0;
}

static int fast_accept_higher(struct link_tcp *t, int lfd, char *err, size_t errlen)
{
	const struct hora_net_comm_cfg *cfg = t->cfg;
	const int me = t->base.rank, n = t->base.nranks;
	int k = n - me - 1;
	char e2[256];
	if (k <= 0)
		return 0;
	int *fds = calloc((size_t)k, sizeof(*fds));
	uint32_t *who = calloc((size_t)k, sizeof(*who));
	int rc = fds && who ? 0 : -ENOMEM;
	struct fast_wait w = {.t = t, .lo = me + 1, .hi = n};
	const struct hora_net_fast_check ck = {.fn = fast_wait_check, .arg = &w};
	if (!rc && (rc = hora_net_fast_accept(lfd, cfg->opts.secret, cfg->opts.secret_len, (uint32_t)me,
					      cfg->connect_timeout_ms, t->io_timeout_ms, k, fds, who, e2,
					      sizeof(e2), &ck))) {
		fast_stopped(t, "small-message channel from the ranks above", e2, err, errlen);
		k = 0; /* none open */
	}
	for (int i = 0; i < k; i++) {
		if (!rc && (who[i] <= (uint32_t)me || who[i] >= (uint32_t)n || t->fast[who[i]] >= 0)) {
			snprintf(err, errlen, "rank %d: small-message channel: unexpected peer claiming rank %u",
				 me, who[i]);
			rc = -EPROTO;
		}
		if (rc)
			close(fds[i]);
		else
			t->fast[who[i]] = fds[i];
	}
	free(fds);
	free(who);
	return rc;
}

static int fast_setup(struct link_tcp *t, char *err, size_t errlen)
{
	const int me = t->base.rank, n = t->base.nranks;
	char host[64], e2[256];
	uint16_t port, fport;
	int lfd = -1, rc = 0;
	hora_hostport_split(t->cfg->addrs[me], host, sizeof(host), &port);
	if ((rc = hora_net_fast_listen(host, &lfd, &fport, e2, sizeof(e2))))
		return snprintf(err, errlen, "rank %d: small-message channel: %s", me, e2), rc;
	uint8_t pb[2] = {(uint8_t)(fport >> 8), (uint8_t)fport};
	struct hora_net_req **sr = calloc((size_t)n, sizeof(*sr));
	if (!sr) {
		close(lfd);
		return -ENOMEM;
	}
	for (int k = me + 1; k < n && !rc; k++)
		if ((rc = hora_net_isend(t->peer[k], pb, 2, NULL, NULL, &sr[k])))
			snprintf(err, errlen, "rank %d: cannot send to rank %d: %s", me, k, strerror(-rc));
	if (!rc)
		rc = fast_connect_lower(t, err, errlen);
	if (!rc)
		rc = fast_accept_higher(t, lfd, err, errlen);
	for (int k = me + 1; k < n; k++)
		if (sr[k])
			hora_net_wait(sr[k], NULL, 0);
	free(sr);
	close(lfd);
	return rc;
}

/* Every address parses, the loop runs and listens on ours. */
static int listen_setup(struct link_tcp *t, char *err, size_t errlen)
{
	const struct hora_net_comm_cfg *cfg = t->cfg;
	const int me = t->base.rank;
	char host[64];
	uint16_t port;
	for (int j = 0; j < t->base.nranks; j++)
		if (hora_hostport_split(cfg->addrs[j], host, sizeof(host), &port))
			return snprintf(err, errlen, "rank %d: bad address '%s' for rank %d (want ip:port)", me,
					cfg->addrs[j], j),
			       -EINVAL;
	struct hora_net_opts o = cfg->opts;
	o.node_id = (uint32_t)me;
	if (o.chunk_bytes > cfg->segment_bytes)
		o.chunk_bytes = cfg->segment_bytes;
	int rc = hora_net_loop_create(&o, &t->loop, err, errlen);
	if (rc)
		return rc;
	hora_hostport_split(cfg->addrs[me], host, sizeof(host), &port);
	char e2[256] = "";
	if ((rc = hora_net_listen(t->loop, host, port, &port, e2, sizeof(e2))))
		snprintf(err, errlen, "rank %d: cannot listen on TCP %s: %s%s", me, cfg->addrs[me],
			 strerror(-rc), rc == -EADDRINUSE ? " (another process holds this port)" : "");
	return rc;
}

int hora_net_link_tcp_create(const struct hora_net_comm_cfg *cfg, struct hora_net_link **out, char *err,
			     size_t errlen)
{
	*out = NULL;
	struct link_tcp *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->base = (struct hora_net_link){.ops = &tcp_ops, .rank = cfg->rank, .nranks = cfg->nranks};
	t->io_timeout_ms = cfg->opts.io_timeout_ms;
	t->cfg = cfg;
	t->gone_rank = -1;
	pthread_mutex_init(&t->mu, NULL);
	memcpy(t->hello, &(struct hello){HELLO_MAGIC, (uint32_t)cfg->rank, (uint32_t)cfg->nranks, 0},
	       sizeof(t->hello));
	t->peer = calloc((size_t)cfg->nranks, sizeof(*t->peer));
	t->fast = malloc((size_t)cfg->nranks * sizeof(int));
	for (int i = 0; t->fast && i < cfg->nranks; i++) /* before any failure: tcp_close reads it */
		t->fast[i] = -1;
	int rc = -ENOMEM;
	if (!t->peer || !t->fast)
		goto fail;
	if (cfg->nranks > 1 && ((rc = listen_setup(t, err, errlen)) || (rc = transport_setup(t, err, errlen)) ||
				(rc = fast_setup(t, err, errlen))))
		goto fail;
	t->cfg = NULL;
	*out = &t->base;
	return 0;
fail:
	if (t->check_rc) /* the check stopped it: its reason, not the wait's */
		snprintf(err, errlen, "%s", t->check_why), rc = t->check_rc;
	tcp_destroy(&t->base);
	return rc;
}
