/* link_shm.c - the shared-memory link of a communicator whose ranks are on
 * one host (link.h, link_shm.h): per pair two net/shm channels, one for the
 * queued path and one for the caller-driven path, created by the lower rank
 * and attached by the higher over the pair's Unix socket, which then stays
 * both channels' lifeline. Not the choice of the link (comm.c) nor the
 * sockets' set-up (node.c).
 *
 * - caller-driven (exchange, notify, peek): the calling thread, straight on
 *   the pair's fast channel (hora_net_shm_xchg; reserve/commit; look).
 * - queued (post_send, post_recv, wait): one progress thread per link owns
 *   every queued channel. Each peer has a FIFO of sends and one of receives;
 *   the thread moves the head of each by non-blocking steps (copying
 *   straight between the caller's buffer and the ring), so every peer
 *   progresses at once and a message larger than the ring streams. When
 *   nothing moves it polls for spin_us, then sleeps on every ring it waits
 *   for and on the link's bell (rung by a post) at once
 *   (hora_net_shm_msg_wait). Callbacks run on that thread, no lock held.
 * - failure: a peer whose step or wait fails (gone, another length, no
 *   progress for io_timeout_ms), an interrupt or a close sets the peer's
 *   status; the thread then completes its every pending and later message
 *   with it.
 */
#include "net/coll/link_shm.h"

#include "net/shm/shm.h"
#include "net/util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QUEUED_RING_DEFAULT (4u << 20) /* four of the ring allreduce's 1 MiB segments */
#define FAST_RING_DEFAULT (512u << 10)
#define CONNECT_DEFAULT_MS 30000
#define ERRLEN 256

/* A posted message. With a callback the progress thread frees it after
 * the callback; without, the caller's wait does. */
struct hora_net_link_req {
	struct hora_net_link_req *next; /* mu: in its peer's FIFO, then a done list */
	struct link_shm *s;
	int recv;
	const void *out;
	void *in;
	size_t len;
	hora_net_link_done_fn cb;
	void *arg;
	int status;
	char err[ERRLEN];
	_Atomic int done; /* set last, under mu, by the progress thread */
};

struct fifo {
	struct hora_net_link_req *head, *tail;
};

struct shm_peer {
	int sock;              /* the lifeline (-1 at our rank); closed at destroy */
	struct hora_net_shm *q; /* queued: stepped by the progress thread, which detaches it (under mu) */
	struct hora_net_shm *f; /* caller-driven: the caller's thread; detached under mu */
	/* under mu */
	struct fifo sq, rq;
	int status; /* != 0: failed; every message completes with it */
	char err[ERRLEN];
	bool closed; /* posts refused */
	/* the progress thread's */
	struct hora_net_shm_msg tx, rx;
	struct hora_net_link_req *tx_op, *rx_op; /* the heads being moved, NULL: none */
	bool busy;
	int64_t idle_since;
};

struct link_shm {
	struct hora_net_link base;
	struct shm_peer *p;
	int spin_us; /* resolved: 0 never polls */
	int io_timeout_ms;
	pthread_mutex_t mu;
	pthread_cond_t done_cv; /* a request finished */
	pthread_t thr;
	bool started;
	bool stop;              /* mu */
	_Atomic int interrupted;
	struct hora_net_shm_bell bell; /* rung by every post, close, interrupt, stop */
	struct hora_net_shm_msg **waitm; /* the progress thread's: 2 × nranks, what idle waits on */
	int *waitwho;                    /* and whose */
};

static struct link_shm *shm_of(struct hora_net_link *l)
{
	return (struct link_shm *)l;
}

static void push(struct fifo *q, struct hora_net_link_req *r)
{
	r->next = NULL;
	if (q->tail)
		q->tail->next = r;
	else
		q->head = r;
	q->tail = r;
}

static struct hora_net_link_req *pop(struct fifo *q)
{
	struct hora_net_link_req *r = q->head;
	if (r && !(q->head = r->next))
		q->tail = NULL;
	return r;
}

/* Mark the peer failed (the first cause stays). With mu held. */
static void fail_locked(struct shm_peer *p, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_locked(struct shm_peer *p, int rc, const char *fmt, ...)
{
	if (p->status)
		return;
	p->status = rc;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof(p->err), fmt, ap);
	va_end(ap);
}

/* ---- the progress thread ------------------------------------------------------- */

/* With mu held: failed peers give up their messages (into *done, with the
 * peer's status), closed ones their queued channel. */
static void sweep(struct link_shm *s, struct fifo *done)
{
	for (int i = 0; i < s->base.nranks; i++) {
		struct shm_peer *p = &s->p[i];
		if (!p->status)
			continue;
		struct hora_net_link_req *r;
		while ((r = pop(&p->sq)) || (r = pop(&p->rq))) {
			r->status = p->status;
			snprintf(r->err, sizeof(r->err), "%s", p->err);
			push(done, r);
		}
		p->tx_op = p->rx_op = NULL;
		p->busy = false;
		if (p->closed && p->q) {
			hora_net_shm_detach(p->q);
			p->q = NULL;
		}
	}
}

/* Run the callbacks and finish the requests of `done`, in order. */
static void finish(struct link_shm *s, struct fifo *done)
{
	struct hora_net_link_req *r;
	bool reqs = false;
	while ((r = pop(done))) {
		if (r->cb) {
			r->cb(r->arg, r->status, r->status ? r->err : NULL);
			free(r);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		atomic_store_explicit(&r->done, 1, memory_order_release);
		pthread_mutex_unlock(&s->mu);
		reqs = true;
	}
	if (reqs) {
		pthread_mutex_lock(&s->mu);
		pthread_cond_broadcast(&s->done_cv);
		pthread_mutex_unlock(&s->mu);
	}
}

/* With mu held: the heads of every live peer's FIFOs that are not moving
 * yet start (nothing moves in the begin). 1 when a begin failed its peer
 * (a send to a peer that closed the channel: -EPIPE): its messages then
 * wait for the sweep, and nothing of theirs is in a ring to wake us. */
static int take_heads(struct link_shm *s)
{
	int failed = 0;
	for (int i = 0; i < s->base.nranks; i++) {
		struct shm_peer *p = &s->p[i];
		char e[ERRLEN];
		int rc = 0;
		if (!p->q || p->status)
			continue;
		if (!p->tx_op && p->sq.head) {
			p->tx_op = p->sq.head;
			rc = hora_net_shm_msg_send(&p->tx, p->q, p->tx_op->out, p->tx_op->len, e, sizeof(e));
		}
		if (!rc && !p->rx_op && p->rq.head) {
			p->rx_op = p->rq.head;
			rc = hora_net_shm_msg_recv(&p->rx, p->q, p->rx_op->in, p->rx_op->len, e, sizeof(e));
		}
		if (rc) { /* the next sweep completes them: nothing to wait for */
			fail_locked(p, rc, "rank %d: %s", i, e);
			p->tx_op = p->rx_op = NULL;
			failed = 1;
		}
	}
	return failed;
}

/* A head message of p moved whole: off its FIFO into done. */
static void completed(struct link_shm *s, struct fifo *q, struct hora_net_link_req **op, struct fifo *done)
{
	pthread_mutex_lock(&s->mu);
	struct hora_net_link_req *r = pop(q); /* == *op: only this thread pops */
	pthread_mutex_unlock(&s->mu);
	r->status = 0;
	push(done, r);
	*op = NULL;
}

/* One step of every moving message; the I/O timeout. 1 when bytes moved
 * or a peer failed (the next sweep is due, not a sleep). */
static int step_all(struct link_shm *s, struct fifo *done)
{
	const int64_t now = hora_clock_ns();
	int any = 0;
	for (int i = 0; i < s->base.nranks; i++) {
		struct shm_peer *p = &s->p[i];
		char e[ERRLEN];
		int moved = 0, rc = 0;
		if (!p->tx_op && !p->rx_op) {
			p->busy = false;
			continue;
		}
		if (p->tx_op && (moved = hora_net_shm_msg_step(&p->tx, e, sizeof(e))) > 0 &&
		    hora_net_shm_msg_done(&p->tx))
			completed(s, &p->sq, &p->tx_op, done);
		if (p->rx_op && (rc = hora_net_shm_msg_step(&p->rx, e, sizeof(e))) > 0 &&
		    hora_net_shm_msg_done(&p->rx))
			completed(s, &p->rq, &p->rx_op, done);
		moved |= rc > 0;
		if (rc < 0) {
			pthread_mutex_lock(&s->mu);
			fail_locked(p, rc, "rank %d: %s", i, e);
			pthread_mutex_unlock(&s->mu);
			p->tx_op = p->rx_op = NULL;
			any = 1;
			continue;
		}
		if (moved || !p->busy) {
			p->busy = true;
			p->idle_since = now;
		} else if (s->io_timeout_ms > 0 && now - p->idle_since > (int64_t)s->io_timeout_ms * 1000000) {
			pthread_mutex_lock(&s->mu);
			fail_locked(p, -ETIMEDOUT, "rank %d: no progress on the shared-memory link for %d ms", i,
				    s->io_timeout_ms);
			pthread_mutex_unlock(&s->mu);
			p->tx_op = p->rx_op = NULL;
			moved = 1;
		}
		any |= moved;
	}
	return any;
}

/* Nothing moved: poll, then sleep on every ring a head waits for and on
 * the bell, until something can move, a post, the I/O timeout, or a peer
 * is found gone (then it fails). */
static void idle(struct link_shm *s, uint32_t seen)
{
	const int n = s->base.nranks;
	struct hora_net_shm_msg **m = s->waitm;
	int *who = s->waitwho, k = 0, which;
	int64_t deadline = HORA_NET_SHM_FOREVER;
	for (int i = 0; i < n; i++) {
		struct shm_peer *p = &s->p[i];
		if (p->tx_op)
			who[k] = i, m[k++] = &p->tx;
		if (p->rx_op)
			who[k] = i, m[k++] = &p->rx;
		if ((p->tx_op || p->rx_op) && s->io_timeout_ms > 0) {
			int64_t at = p->idle_since + (int64_t)s->io_timeout_ms * 1000000 + 1000000;
			deadline = at < deadline ? at : deadline;
		}
	}
	char e[ERRLEN];
	int rc = hora_net_shm_msg_wait(m, k, &s->bell, seen, s->spin_us, deadline, &which, e, sizeof(e));
	if (rc && rc != -ETIMEDOUT) {
		pthread_mutex_lock(&s->mu);
		fail_locked(&s->p[who[which]], rc, "rank %d: %s", who[which], e);
		pthread_mutex_unlock(&s->mu);
	}
}

static void *progress_main(void *arg)
{
	struct link_shm *s = arg;
	struct fifo done = {0};
	for (;;) {
		const uint32_t seen = hora_net_shm_bell_seq(&s->bell);
		pthread_mutex_lock(&s->mu);
		sweep(s, &done);
		const bool stop = s->stop;
		const bool failed = !stop && take_heads(s);
		pthread_mutex_unlock(&s->mu);
		finish(s, &done);
		if (stop)
			return NULL;
		if (failed) /* sweep now: idle would wait on nothing of that peer's */
			continue;
		int moved = step_all(s, &done);
		if (done.head) {
			finish(s, &done);
			continue;
		}
		if (!moved)
			idle(s, seen);
	}
}

/* ---- the queued path ----------------------------------------------------------- */

static int shm_post(struct link_shm *s, int peer, int recv, const void *out, void *in, size_t len,
		    hora_net_link_done_fn cb, void *arg, struct hora_net_link_req **req)
{
	if (peer < 0 || peer >= s->base.nranks || peer == s->base.rank || !cb == !req)
		return -EINVAL;
	struct hora_net_link_req *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = (struct hora_net_link_req){.s = s, .recv = recv, .out = out, .in = in, .len = len, .cb = cb,
					.arg = arg};
	struct shm_peer *p = &s->p[peer];
	pthread_mutex_lock(&s->mu);
	if (p->closed) {
		pthread_mutex_unlock(&s->mu);
		free(r);
		return -ENOTCONN;
	}
	push(recv ? &p->rq : &p->sq, r);
	pthread_mutex_unlock(&s->mu);
	if (req)
		*req = r;
	hora_net_shm_bell_ring(&s->bell);
	return 0;
}

static int shm_post_send(struct hora_net_link *l, int peer, const void *buf, size_t len,
			 hora_net_link_done_fn cb, void *arg, struct hora_net_link_req **req)
{
	return shm_post(shm_of(l), peer, 0, buf, NULL, len, cb, arg, req);
}

static int shm_post_recv(struct hora_net_link *l, int peer, void *buf, size_t len, hora_net_link_done_fn cb,
			 void *arg, struct hora_net_link_req **req)
{
	return shm_post(shm_of(l), peer, 1, NULL, buf, len, cb, arg, req);
}

static int shm_wait(struct hora_net_link_req *r, char *err, size_t errlen)
{
	struct link_shm *s = r->s;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load_explicit(&r->done, memory_order_acquire))
		pthread_cond_wait(&s->done_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	const int rc = r->status;
	if (rc && err && errlen)
		snprintf(err, errlen, "%s", r->err);
	free(r);
	return rc;
}

/* ---- the caller-driven path ---------------------------------------------------- */

/* The fast channel to rank `peer` for the caller's thread, or NULL with the
 * cause in err. */
static struct hora_net_shm *fast_of(struct link_shm *s, int peer, char *err, size_t errlen, int *rc)
{
	if (peer < 0 || peer >= s->base.nranks || peer == s->base.rank) {
		snprintf(err, errlen, "rank %d is not a peer of rank %d", peer, s->base.rank);
		*rc = -EINVAL;
		return NULL;
	}
	if (!s->p[peer].f) {
		snprintf(err, errlen, "the caller-driven stream with rank %d is closed", peer);
		*rc = -ECONNRESET;
	}
	return s->p[peer].f;
}

static void close_fast(struct link_shm *s, int peer)
{
	pthread_mutex_lock(&s->mu);
	hora_net_shm_detach(s->p[peer].f);
	s->p[peer].f = NULL;
	pthread_mutex_unlock(&s->mu);
}

static int shm_exchange(struct hora_net_link *l, struct hora_net_link_xchg *x)
{
	struct link_shm *s = shm_of(l);
	char dummy[ERRLEN];
	char *err = x->err && x->errlen ? x->err : dummy;
	const size_t errlen = x->err && x->errlen ? x->errlen : sizeof(dummy);
	int rc = 0;
	struct hora_net_shm_xchg sx = {
		.out_head = x->out_head, .out_buf = x->out_body, .out_bytes = x->out_bytes,
		.in_head = x->in_head, .in_buf = x->in_body, .in_bytes = x->in_bytes,
		.head_bytes = x->head_bytes, .check = x->check, .check_arg = x->check_arg,
		.deadline_ns = s->io_timeout_ms > 0 ? hora_clock_ns() + (int64_t)s->io_timeout_ms * 1000000
						    : HORA_NET_SHM_FOREVER,
		.err = err, .errlen = errlen};
	x->dir = 0;
	if (atomic_load(&s->interrupted)) {
		snprintf(err, errlen, "the link was interrupted");
		return -ECANCELED;
	}
	if (x->to >= 0 && !(sx.out = fast_of(s, x->to, err, errlen, &rc)))
		return rc;
	x->dir = 1;
	if (x->from >= 0 && !(sx.in = fast_of(s, x->from, err, errlen, &rc)))
		return rc;
	rc = hora_net_shm_xchg(&sx);
	x->dir = sx.dir;
	if (sx.torn) /* rank `to` is inside our message: nothing more may follow it */
		close_fast(s, x->to);
	return rc;
}

static int shm_notify(struct hora_net_link *l, int peer, const void *buf, size_t len)
{
	struct link_shm *s = shm_of(l);
	char e[ERRLEN];
	int rc = -ENOTCONN;
	struct hora_net_shm *f = fast_of(s, peer, e, sizeof(e), &rc);
	void *p;
	if (!f)
		return rc == -EINVAL ? rc : -ENOTCONN;
	/* whole or nothing: room for the whole frame now, or -EAGAIN */
	if ((rc = hora_net_shm_reserve(f, len, &p, 0, NULL, 0)))
		return rc == -ETIMEDOUT ? -EAGAIN : rc;
	memcpy(p, buf, len);
	return hora_net_shm_commit(f, len, NULL, 0);
}

static int shm_peek(struct hora_net_link *l, int peer, void *buf, size_t len, int wait_ms)
{
	struct link_shm *s = shm_of(l);
	char e[ERRLEN];
	int rc = -ENOTCONN;
	struct hora_net_shm *f = fast_of(s, peer, e, sizeof(e), &rc);
	if (!f)
		return rc == -EINVAL ? rc : -ENOTCONN;
	rc = hora_net_shm_look(f, buf, len, hora_clock_ns() + (int64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000,
			       NULL, 0);
	return rc == -ECONNRESET ? -ENOTCONN : rc;
}

/* ---- interrupt, close, destroy ---------------------------------------------------- */

static void shm_interrupt(struct hora_net_link *l, const char *why)
{
	struct link_shm *s = shm_of(l);
	pthread_mutex_lock(&s->mu);
	atomic_store(&s->interrupted, 1);
	for (int i = 0; s->p && i < l->nranks; i++) {
		if (i == l->rank)
			continue;
		fail_locked(&s->p[i], -ECANCELED, "%s", why ? why : "the link was interrupted");
		if (s->p[i].f)
			hora_net_shm_interrupt(s->p[i].f);
	}
	pthread_mutex_unlock(&s->mu);
	hora_net_shm_bell_ring(&s->bell);
}

/* The queued channels are detached by the progress thread (it may be
 * inside a step on one); close does not wait for it. */
static void shm_close(struct hora_net_link *l, int peer)
{
	struct link_shm *s = shm_of(l);
	pthread_mutex_lock(&s->mu);
	for (int i = peer < 0 ? 0 : peer; s->p && i < (peer < 0 ? l->nranks : peer + 1); i++) {
		struct shm_peer *p = &s->p[i];
		if (i == l->rank || i < 0 || i >= l->nranks)
			continue;
		p->closed = true;
		fail_locked(p, -ECANCELED, "rank %d: the link to it was closed", i);
		hora_net_shm_detach(p->f);
		p->f = NULL;
		if (!s->started) {
			hora_net_shm_detach(p->q);
			p->q = NULL;
		}
	}
	pthread_mutex_unlock(&s->mu);
	hora_net_shm_bell_ring(&s->bell);
}

static void shm_destroy(struct hora_net_link *l)
{
	if (!l)
		return;
	struct link_shm *s = shm_of(l);
	shm_close(l, -1);
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_mutex_unlock(&s->mu);
		hora_net_shm_bell_ring(&s->bell);
		pthread_join(s->thr, NULL);
	}
	for (int i = 0; s->p && i < l->nranks; i++) {
		hora_net_shm_detach(s->p[i].q);
		if (s->p[i].sock >= 0)
			close(s->p[i].sock);
	}
	pthread_cond_destroy(&s->done_cv);
	pthread_mutex_destroy(&s->mu);
	free(s->p);
	free(s->waitm);
	free(s->waitwho);
	free(s);
}

static const struct hora_net_link_ops shm_ops = {
	.post_send = shm_post_send,
	.post_recv = shm_post_recv,
	.wait = shm_wait,
	.exchange = shm_exchange,
	.notify = shm_notify,
	.peek = shm_peek,
	.interrupt = shm_interrupt,
	.close = shm_close,
	.destroy = shm_destroy,
};

/* ---- setup --------------------------------------------------------------------- */

/* The first message on every queued channel: who we are and the size we
 * were created with (a socket handed to the wrong rank, or ranks of other
 * sizes, are named instead of a hang). */
#define HELLO_MAGIC 0x6d687368u /* "hshm" */
struct hello {
	uint32_t magic, rank, size, zero;
};

static int ms_left(int64_t deadline)
{
	if (deadline == HORA_NET_SHM_FOREVER)
		return -1;
	int64_t left = (deadline - hora_clock_ns()) / 1000000;
	return left < 0 ? 0 : left > 1 << 30 ? 1 << 30 : (int)left;
}

/* As the lower rank of the pair: create both channels, pass their memfds. */
static int give(struct link_shm *s, const struct hora_net_link_shm_cfg *cfg, int j, char *err, size_t errlen)
{
	struct shm_peer *p = &s->p[j];
	char e[ERRLEN] = "";
	struct hora_net_shm_cfg qc = {.ring_bytes = cfg->queued_ring ? cfg->queued_ring : QUEUED_RING_DEFAULT,
				      .spin_us = cfg->spin_us, .life_fd = p->sock};
	struct hora_net_shm_cfg fc = qc;
	fc.ring_bytes = cfg->fast_ring ? cfg->fast_ring : FAST_RING_DEFAULT;
	int rc = hora_net_shm_create(&qc, &p->q, e, sizeof(e));
	if (!rc)
		rc = hora_net_shm_create(&fc, &p->f, e, sizeof(e));
	if (!rc)
		rc = hora_net_shm_fd_send(p->sock, hora_net_shm_fd(p->q), e, sizeof(e));
	if (!rc)
		rc = hora_net_shm_fd_send(p->sock, hora_net_shm_fd(p->f), e, sizeof(e));
	if (rc)
		snprintf(err, errlen, "rank %d: shared-memory channels for rank %d: %s", s->base.rank, j, e);
	return rc;
}

/* As the higher rank: attach to the two channels rank j passes. */
static int take(struct link_shm *s, const struct hora_net_link_shm_cfg *cfg, int j, int64_t deadline,
		char *err, size_t errlen)
{
	struct shm_peer *p = &s->p[j];
	char e[ERRLEN] = "";
	struct hora_net_shm_cfg c = {.spin_us = cfg->spin_us, .life_fd = p->sock};
	int rc = 0;
	for (int k = 0; k < 2 && !rc; k++) {
		int fd = -1;
		if (!(rc = hora_net_shm_fd_recv(p->sock, ms_left(deadline), &fd, e, sizeof(e)))) {
			rc = hora_net_shm_attach(fd, &c, k ? &p->f : &p->q, e, sizeof(e));
			close(fd);
		}
	}
	if (rc)
		snprintf(err, errlen, "rank %d: shared-memory channels from rank %d: %s", s->base.rank, j, e);
	return rc;
}

static int check_hello(struct link_shm *s, int j, int64_t deadline, char *err, size_t errlen)
{
	struct hello h;
	char e[ERRLEN] = "";
	const int me = s->base.rank, n = s->base.nranks;
	int rc = hora_net_shm_recv(s->p[j].q, &h, sizeof(h), deadline, e, sizeof(e));
	if (rc)
		return snprintf(err, errlen, "rank %d: hello of rank %d over shared memory: %s", me, j, e), rc;
	if (h.magic != HELLO_MAGIC || h.rank != (uint32_t)j)
		return snprintf(err, errlen, "rank %d: the shared-memory hello of the socket to rank %d is not "
				"rank %d's (rank %u)", me, j, j, h.rank),
		       -EPROTO;
	if (h.size != (uint32_t)n)
		return snprintf(err, errlen,
				"rank %d: rank %d was created with size %u, this rank with size %d: every rank "
				"of a communicator must be created with the same size",
				me, j, h.size, n),
		       -EINVAL;
	return 0;
}

/* Every pair's channels, then a hello each way. Sends never wait (the
 * fds, the hello into an empty ring), so the only waits are for ranks
 * below (their fds) and for every rank's hello: no cycle. */
static int setup(struct link_shm *s, const struct hora_net_link_shm_cfg *cfg, char *err, size_t errlen)
{
	const int me = s->base.rank, n = s->base.nranks;
	const int tmo = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : CONNECT_DEFAULT_MS;
	const int64_t deadline = tmo < 0 ? HORA_NET_SHM_FOREVER : hora_clock_ns() + (int64_t)tmo * 1000000;
	const struct hello mine = {HELLO_MAGIC, (uint32_t)me, (uint32_t)n, 0};
	char e[ERRLEN] = "";
	int rc = 0;
	for (int j = 0; j < n; j++)
		if (j != me && s->p[j].sock < 0)
			return snprintf(err, errlen, "rank %d: no socket to rank %d", me, j), -EINVAL;
	for (int j = me + 1; j < n && !rc; j++)
		rc = give(s, cfg, j, err, errlen);
	for (int j = 0; j < me && !rc; j++)
		rc = take(s, cfg, j, deadline, err, errlen);
	for (int j = 0; j < n && !rc; j++)
		if (j != me && (rc = hora_net_shm_send(s->p[j].q, &mine, sizeof(mine), deadline, e, sizeof(e))))
			snprintf(err, errlen, "rank %d: hello to rank %d over shared memory: %s", me, j, e);
	for (int j = 0; j < n && !rc; j++)
		if (j != me)
			rc = check_hello(s, j, deadline, err, errlen);
	return rc;
}

int hora_net_link_shm_create(const struct hora_net_link_shm_cfg *cfg, struct hora_net_link **out,
			     char *err, size_t errlen)
{
	*out = NULL;
	const int n = cfg->nranks;
	const bool valid = n >= 1 && n <= 65535 && cfg->rank >= 0 && cfg->rank < n && cfg->socks;
	struct link_shm *s = valid ? calloc(1, sizeof(*s)) : NULL;
	if (s) {
		s->p = calloc((size_t)n, sizeof(*s->p));
		s->waitm = calloc(2 * (size_t)n, sizeof(*s->waitm));
		s->waitwho = calloc(2 * (size_t)n, sizeof(*s->waitwho));
	}
	if (!s || !s->p || !s->waitm || !s->waitwho) {
		const int rc = valid ? -ENOMEM : -EINVAL;
		for (int i = 0; cfg->socks && i < n; i++) /* ours from here on, success or not */
			if (cfg->socks[i] >= 0)
				close(cfg->socks[i]);
		if (s)
			free(s->p), free(s->waitm), free(s->waitwho);
		free(s);
		return snprintf(err, errlen, "rank %d of %d: %s", cfg->rank, n,
				rc == -EINVAL ? "invalid arguments" : "out of memory"),
		       rc;
	}
	s->base = (struct hora_net_link){.ops = &shm_ops, .rank = cfg->rank, .nranks = n};
	s->spin_us = cfg->spin_us < 0 ? 0 : cfg->spin_us ? cfg->spin_us : HORA_NET_SHM_SPIN_DEFAULT;
	s->io_timeout_ms = cfg->io_timeout_ms;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	for (int i = 0; i < n; i++)
		s->p[i].sock = cfg->socks[i];
	if (s->p[cfg->rank].sock >= 0) { /* ours: no peer behind it */
		close(s->p[cfg->rank].sock);
		s->p[cfg->rank].sock = -1;
	}
	int rc = setup(s, cfg, err, errlen);
	if (!rc && n > 1 && (rc = -pthread_create(&s->thr, NULL, progress_main, s)))
		snprintf(err, errlen, "rank %d: the shared-memory link's thread: %s", cfg->rank, strerror(-rc));
	if (rc) {
		shm_destroy(&s->base);
		return rc;
	}
	s->started = n > 1;
	*out = &s->base;
	return 0;
}
