/* loop.c - the io_uring event loop: one ring, one comm thread per loop.
 *
 * The comm thread sleeps in io_uring_submit_and_wait() and dispatches each
 * CQE to the `struct op` its user_data points at. Other threads never touch
 * the ring: they append a `struct cmd` to a mutex-guarded queue and write
 * the loop's eventfd, whose read is always armed on the ring (as gloo's
 * tcp/loop.h "deferrables"). A 100 ms timeout op drives deadlines
 * (handshakes, I/O progress). Accepts use one multishot accept op.
 *
 * Not here: socket state machines (conn.c), the peer/request API (peer.c),
 * and the timers and datagram sockets offered to the layers above
 * (service.c).
 */
#include "net/transport/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING_ENTRIES 1024
#define TICK_MS 100
#define REFUSE_LOG_PER_S 5

void hora_net_opts_default(struct hora_net_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->sockets_per_peer = 1;
	o->chunk_bytes = 1 << 20;
	o->max_frame_bytes = 64 << 20;
	o->handshake_timeout_ms = 5000;
	o->io_timeout_ms = 30000;
	o->zc_min_bytes = 64 << 10;
	o->max_pending_handshakes = 64;
	o->rcvlowat = 1;
}

void hora_net_deadline(struct timespec *ts, int timeout_ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

struct frame *hora_net_frame_get(struct hora_net_loop *loop)
{
	struct frame *f = loop->frame_cache;
	if (f) {
		loop->frame_cache = f->next;
		loop->frame_cache_n--;
		f->next = NULL;
		f->req = NULL;
		f->inlined = false;
		f->payload = NULL;
		f->len = f->sent = 0;
		return f;
	}
	return calloc(1, sizeof(*f));
}

void hora_net_frame_put(struct hora_net_loop *loop, struct frame *f)
{
	if (loop->frame_cache_n >= HORA_NET_FRAME_CACHE) {
		free(f);
		return;
	}
	f->next = loop->frame_cache;
	loop->frame_cache = f;
	loop->frame_cache_n++;
}

bool hora_net_on_loop(struct hora_net_loop *loop)
{
	return pthread_equal(pthread_self(), loop->thread);
}

struct io_uring_sqe *hora_net_sqe(struct hora_net_loop *loop)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&loop->ring);
	while (!sqe) { /* SQ full: hand what we have to the kernel */
		io_uring_submit(&loop->ring);
		sqe = io_uring_get_sqe(&loop->ring);
	}
	return sqe;
}

void hora_net_refuse_log(struct hora_net_loop *loop, const char *fmt, ...)
{
	int64_t now = hora_clock_ns();
	if (now - loop->log_window_ns > 1000000000) {
		if (loop->log_suppressed)
			fprintf(stderr, "hora net: (%llu more refusals not logged)\n",
				(unsigned long long)loop->log_suppressed);
		loop->log_window_ns = now;
		loop->log_count = 0;
		loop->log_suppressed = 0;
	}
	if (loop->log_count++ >= REFUSE_LOG_PER_S) {
		loop->log_suppressed++;
		return;
	}
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "hora net: %s\n", line);
}

/* ---- eventfd: commands from other threads --------------------------------- */

static void arm_efd(struct hora_net_loop *loop)
{
	struct io_uring_sqe *sqe = hora_net_sqe(loop);
	io_uring_prep_read(sqe, loop->efd, &loop->efd_val, sizeof(loop->efd_val), 0);
	io_uring_sqe_set_data(sqe, &loop->efd_op);
}

static void do_listen(struct hora_net_loop *loop, struct cmd *c);

static void run_cmd(struct hora_net_loop *loop, struct cmd *c)
{
	switch (c->kind) {
	case CMD_LISTEN:
		do_listen(loop, c);
		break;
	case CMD_CONNECT:
		hora_net_client_connect(loop, c);
		break;
	case CMD_SEND:
		hora_net_peer_do_send(c->req);
		break;
	case CMD_RECV:
		hora_net_peer_do_recv(c->req);
		break;
	case CMD_CLOSE:
		hora_net_peer_do_close(c->peer, c->req);
		break;
	case CMD_STOP:
		loop->stopping = true;
		break;
	case CMD_CALL:
		c->fn(c->arg);
		if (c->req)
			hora_net_req_finish(c->req, 0, NULL);
		break;
	case CMD_ABORT:
		hora_net_peer_do_abort(c->peer, c);
		break;
	}
	free(c);
}

static void on_efd(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	(void)op;
	(void)cqe;
	pthread_mutex_lock(&loop->qlock);
	struct cmd *c = loop->q;
	loop->q = loop->q_tail = NULL;
	pthread_mutex_unlock(&loop->qlock);
	while (c) {
		struct cmd *n = c->next;
		run_cmd(loop, c);
		c = n;
	}
	if (!loop->stopping)
		arm_efd(loop);
}

int hora_net_post(struct hora_net_loop *loop, struct cmd *c)
{
	if (hora_net_on_loop(loop)) {
		run_cmd(loop, c);
		return 0;
	}
	pthread_mutex_lock(&loop->qlock);
	if (loop->dead) {
		pthread_mutex_unlock(&loop->qlock);
		free(c);
		return -ESHUTDOWN;
	}
	c->next = NULL;
	bool wake = !loop->q;
	if (loop->q_tail)
		loop->q_tail->next = c;
	else
		loop->q = c;
	loop->q_tail = c;
	pthread_mutex_unlock(&loop->qlock);
	if (wake) {
		uint64_t one = 1;
		if (write(loop->efd, &one, sizeof(one)) < 0)
			return -errno;
	}
	return 0;
}

/* ---- tick: deadlines -------------------------------------------------------- */

static void arm_tick(struct hora_net_loop *loop)
{
	struct io_uring_sqe *sqe = hora_net_sqe(loop);
	loop->tick_ts.tv_sec = 0;
	loop->tick_ts.tv_nsec = TICK_MS * 1000000LL;
	io_uring_prep_timeout(sqe, &loop->tick_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &loop->tick_op);
}

static void on_tick(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	(void)op;
	(void)cqe;
	int64_t now = hora_clock_ns();
	if (loop->log_suppressed && now - loop->log_window_ns > 1000000000) {
		fprintf(stderr, "hora net: (%llu more refusals not logged)\n",
			(unsigned long long)loop->log_suppressed);
		loop->log_suppressed = 0;
	}
	/* Failing one conn can free others (a peer's stripes go together), so
	 * handle one expiry at a time and rescan; handled conns are CLOSING. */
	for (bool again = true; again;) {
		again = false;
		for (struct conn *c = loop->conns; c; c = c->next)
			if ((c->state == C_HANDSHAKE || c->state == C_CONNECTING) && c->deadline_ns &&
			    now > c->deadline_ns) {
				hora_net_conn_tick(c, now);
				again = true;
				break;
			}
	}
	for (int i = loop->npeers - 1; i >= 0; i--) /* backwards: a failing peer may be removed */
		if (i < loop->npeers)
			hora_net_peer_tick(loop->all_peers[i], now);
	if (!loop->stopping)
		arm_tick(loop);
}

/* ---- listen / accept ------------------------------------------------------- */

static void arm_accept(struct hora_net_loop *loop)
{
	struct io_uring_sqe *sqe = hora_net_sqe(loop);
	io_uring_prep_multishot_accept(sqe, loop->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &loop->accept_op);
}

static void on_accept(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	(void)op;
	if (cqe->res >= 0 && loop->listen_fd < 0) {
		close(cqe->res); /* taken in before hora_net_unlisten, completed after: refused too */
	} else if (cqe->res >= 0) {
		int fd = cqe->res;
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
			len = 0;
		struct conn *c = hora_net_conn_new(loop, fd, true, &ss, len);
		loop->stats.accepted++;
		if (!c) {
			close(fd);
		} else {
			/* idle or stray connections must not lock real peers out: a
			 * full table drops its oldest, not the newcomer */
			if (loop->pending_handshakes >= loop->o.max_pending_handshakes)
				hora_net_conn_evict_handshake(loop);
			hora_net_conn_start_server(c);
		}
	} else if (cqe->res != -ECANCELED && !loop->stopping && loop->listen_fd >= 0) {
		hora_net_refuse_log(loop, "accept failed: %s", strerror(-cqe->res));
	}
	if (!(cqe->flags & IORING_CQE_F_MORE) && !loop->stopping && loop->listen_fd >= 0)
		arm_accept(loop);
}

/* on the comm thread: the armed accept ends on the shutdown (and is not
 * armed again: listen_fd < 0); the ring holds the socket until it has */
static void unlisten_on_loop(void *arg)
{
	struct hora_net_loop *loop = arg;
	const int fd = loop->listen_fd;
	if (fd < 0)
		return;
	loop->listen_fd = -1;
	shutdown(fd, SHUT_RDWR);
	close(fd);
}

int hora_net_unlisten(struct hora_net_loop *loop)
{
	return hora_net_loop_call(loop, unlisten_on_loop, loop);
}

int hora_net_parse_addr(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		*len = sizeof(*a4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		*len = sizeof(*a6);
		return 0;
	}
	return -EINVAL;
}

static void do_listen(struct hora_net_loop *loop, struct cmd *c)
{
	struct hora_net_req *r = c->req;
	int one = 1, fd = -1, rc;
	if (loop->listen_fd >= 0) {
		hora_net_req_finish(r, -EALREADY, "this loop is already listening");
		return;
	}
	fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (hora_net_bind_retry(fd, (struct sockaddr *)&c->addr, c->addrlen) || listen(fd, 1024))
		goto fail;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &len);
	*c->bound = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						  : ((struct sockaddr_in6 *)&ss)->sin6_port);
	loop->listen_fd = fd;
	arm_accept(loop);
	hora_net_req_finish(r, 0, NULL);
	return;
fail:
	rc = -errno;
	if (fd >= 0)
		close(fd);
	char msg[128];
	snprintf(msg, sizeof(msg), "listen: %s", strerror(-rc));
	hora_net_req_finish(r, rc, msg);
}

/* ---- thread ------------------------------------------------------------------ */

/* No more commands will run: release whoever waits on one (-ESHUTDOWN) and
 * wake accept/membership waiters. */
static void mark_dead(struct hora_net_loop *loop, const char *why)
{
	pthread_mutex_lock(&loop->qlock);
	loop->dead = true;
	struct cmd *q = loop->q;
	loop->q = loop->q_tail = NULL;
	pthread_cond_broadcast(&loop->qcond);
	pthread_mutex_unlock(&loop->qlock);
	while (q) {
		struct cmd *n = q->next;
		if (q->req)
			hora_net_req_finish(q->req, -ESHUTDOWN, why);
		free(q);
		q = n;
	}
}

/* creates and destroys of rings, in one order (hora_net_loop_create) */
static atomic_uint ring_order;

/* ThreadSanitizer and reused rings: liburing maps and unmaps a ring by raw
 * syscalls, which TSan does not see, so a new loop's ring mapped where a
 * destroyed one was looks like memory the old loop thread wrote with no
 * order to the new thread's reads. Every loop thread releases one key when
 * it ends and acquires it when it starts: a ring is unmapped only after its
 * thread ended, so this is the real order. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char tsan_ring_key;
#define TSAN_RING_ACQUIRE() __tsan_acquire(&tsan_ring_key)
#define TSAN_RING_RELEASE() __tsan_release(&tsan_ring_key)
#else
#define TSAN_RING_ACQUIRE() ((void)0)
#define TSAN_RING_RELEASE() ((void)0)
#endif

static void *loop_main(void *arg)
{
	struct hora_net_loop *loop = arg;
	TSAN_RING_ACQUIRE();
	if (loop->ring_disabled) {
		/* io_uring_enable_rings() is declared by liburing 2.3 but not
		 * exported by its shared library: register directly. */
		if (syscall(__NR_io_uring_register, loop->ring.ring_fd,
			    IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0) {
			fprintf(stderr, "hora net: enabling the io_uring ring: %s\n", strerror(errno));
			TSAN_RING_RELEASE();
			return NULL;
		}
	}
	arm_efd(loop);
	arm_tick(loop);
	while (!loop->stopping) {
		int rc = io_uring_submit_and_wait(&loop->ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -ETIME && rc != -EAGAIN) {
			fprintf(stderr, "hora net: io_uring_submit_and_wait: %s; the transport loop "
					"stops\n", strerror(-rc));
			/* release everyone who waits on us instead of leaving them hanging */
			mark_dead(loop, "transport loop stopped");
			break;
		}
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		io_uring_for_each_cqe(&loop->ring, head, cqe)
		{
			struct op *op = io_uring_cqe_get_data(cqe);
			n++;
			if (op)
				op->fn(loop, op, cqe);
		}
		io_uring_cq_advance(&loop->ring, n);
	}
	TSAN_RING_RELEASE();
	return NULL;
}

int hora_net_loop_create(const struct hora_net_opts *o, struct hora_net_loop **out, char *err,
			 size_t errlen)
{
	*out = NULL;
	if (!o->secret || o->secret_len < HORA_NET_SECRET_MIN || o->secret_len > HORA_NET_SECRET_MAX)
		return snprintf(err, errlen, "cluster secret must be %d..%d bytes", HORA_NET_SECRET_MIN,
				HORA_NET_SECRET_MAX),
		       -EINVAL;
	if (o->sockets_per_peer < 1 || o->sockets_per_peer > 64 || o->chunk_bytes < 4096 ||
	    o->max_frame_bytes < o->chunk_bytes || o->max_frame_bytes > HORA_NET_MAX_FRAME_LIMIT ||
	    o->handshake_timeout_ms <= 0 || o->max_pending_handshakes < 1)
		return snprintf(err, errlen, "invalid transport options (sockets_per_peer 1..64, "
					     "4 KiB <= chunk <= max_frame <= 1 GiB)"),
		       -EINVAL;
	struct hora_net_loop *loop = calloc(1, sizeof(*loop));
	if (!loop)
		return -ENOMEM;
	loop->o = *o;
	memcpy(loop->secret, o->secret, o->secret_len);
	loop->o.secret = loop->secret;
	loop->listen_fd = -1;
	loop->efd_op.fn = on_efd;
	loop->tick_op.fn = on_tick;
	loop->accept_op.fn = on_accept;
	pthread_mutex_init(&loop->qlock, NULL);
	pthread_cond_init(&loop->qcond, NULL);
	/* Only the comm thread submits, and completions are reaped by it, so
	 * task work can wait until it asks for events (DEFER_TASKRUN): fewer
	 * interrupts and wake-ups per message. Fall back on older kernels. */
	/* R_DISABLED: the comm thread enables the ring and so becomes its
	 * single issuer. */
	/* a ring's memory is mapped by liburing's own syscalls, which
	 * ThreadSanitizer does not see: a new ring at the address of one that
	 * another thread tore down looks like a race. This order (every create
	 * after every destroy before it) is what the kernel guarantees anyway. */
	atomic_fetch_add_explicit(&ring_order, 1, memory_order_acq_rel);
	int rc = io_uring_queue_init(RING_ENTRIES, &loop->ring,
				     IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
					     IORING_SETUP_R_DISABLED);
	loop->ring_disabled = rc == 0;
	if (rc == -EINVAL)
		rc = io_uring_queue_init(RING_ENTRIES, &loop->ring, 0);
	if (rc < 0) {
		snprintf(err, errlen, "io_uring_queue_init: %s", strerror(-rc));
		free(loop);
		return rc;
	}
	loop->efd = eventfd(0, EFD_CLOEXEC);
	if (loop->efd < 0) {
		rc = -errno;
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		io_uring_queue_exit(&loop->ring);
		free(loop);
		return rc;
	}
	rc = pthread_create(&loop->thread, NULL, loop_main, loop);
	if (rc) {
		snprintf(err, errlen, "pthread_create: %s", strerror(rc));
		close(loop->efd);
		io_uring_queue_exit(&loop->ring);
		free(loop);
		return -rc;
	}
	*out = loop;
	return 0;
}

void hora_net_loop_destroy(struct hora_net_loop *loop)
{
	if (!loop)
		return;
	/* stop the comm thread; what it leaves open is torn down below */
	struct cmd *c = calloc(1, sizeof(*c));
	if (c) {
		c->kind = CMD_STOP;
		hora_net_post(loop, c);
	} else {
		loop->stopping = true; /* seen at the next wake-up (tick) */
	}
	pthread_join(loop->thread, NULL);
	/* stop listening now: the ring's armed accept keeps the socket open a
	 * moment after the ring is gone, and the next communicator of this
	 * process (an elastic re-form) listens on the same port */
	if (loop->listen_fd >= 0)
		shutdown(loop->listen_fd, SHUT_RDWR);
	/* the ring before anything its requests point into (conn buffers,
	 * frames, requests' user buffers, datagram buffers): closing it
	 * cancels what is still armed */
	io_uring_queue_exit(&loop->ring);
	atomic_fetch_add_explicit(&ring_order, 1, memory_order_acq_rel);
	if (loop->log_suppressed)
		fprintf(stderr, "hora net: (%llu more refusals not logged)\n",
			(unsigned long long)loop->log_suppressed);
	mark_dead(loop, "transport loop destroyed"); /* commands that raced with the stop */
	for (struct conn *k = loop->conns, *n; k; k = n) {
		n = k->next;
		if (k->fd >= 0)
			close(k->fd);
		free(k->rxbuf);
		for (struct frame *f = k->txq, *fn; f; f = fn) {
			fn = f->next;
			free(f);
		}
		free(k);
	}
	for (int i = 0; i < loop->npeers; i++) {
		struct hora_net_peer *p = loop->all_peers[i];
		for (struct hora_net_req *r = p->recvq, *n; r; r = n) {
			n = r->next;
			hora_net_req_finish(r, -ESHUTDOWN, "transport loop destroyed");
		}
		for (struct hora_net_req *r = p->sendq, *n; r; r = n) {
			n = r->next;
			hora_net_req_finish(r, -ESHUTDOWN, "transport loop destroyed");
		}
		free(p->conns);
		free(p);
	}
	free(loop->all_peers);
	while (loop->req_cache) {
		struct hora_net_req *r = loop->req_cache;
		loop->req_cache = r->next;
		free(r);
	}
	while (loop->frame_cache) {
		struct frame *f = loop->frame_cache;
		loop->frame_cache = f->next;
		free(f);
	}
	if (loop->listen_fd >= 0)
		close(loop->listen_fd);
	close(loop->efd);
	hora_net_service_free_all(loop);
	pthread_mutex_destroy(&loop->qlock);
	pthread_cond_destroy(&loop->qcond);
	free(loop);
}

void hora_net_loop_stats(struct hora_net_loop *loop, struct hora_net_stats *st)
{
	pthread_mutex_lock(&loop->qlock);
	*st = loop->stats; /* counters written by the comm thread: a racy but
			      monotone snapshot is what a stats reader wants */
	pthread_mutex_unlock(&loop->qlock);
}
