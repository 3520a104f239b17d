/* conn.c - one TCP socket's life: connect (with retries), the handshake,
 * then the framed data path; and its orderly end.
 *
 * Life cycle: CONNECTING (client) -> HANDSHAKE -> READY -> CLOSING -> freed.
 * A conn is freed only when no op of it is in the kernel (inflight == 0):
 * shutdown(2) makes pending recv/send ops complete, their CQEs drop
 * inflight, and the last one frees. Until then the kernel may still write
 * into user buffers, which is why peers finish requests only after all their
 * conns are gone (peer.c).
 *
 * Receive path: a 64 KiB staging buffer takes headers and small payloads in
 * one recv; the rest of a large payload is received straight into the
 * user's buffer at its offset. A frame for a message whose receive is not
 * posted yet parks the socket (no recv armed), so TCP flow control holds
 * the sender back: no unbounded buffering, no allocation from a header.
 * Send path: queued frames go out with one sendmsg of up to 32 iovecs.
 */
#include "net/transport/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

static void conn_free(struct conn *c);
static void process_rx(struct conn *c);
static void pop_sent(struct conn *c);

static void fmt_addr(const struct sockaddr_storage *ss, socklen_t len, char *buf, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;
	if (len && ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		port = ntohs(a->sin_port);
		snprintf(buf, n, "%s:%d", ip, port);
	} else if (len && ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		port = ntohs(a->sin6_port);
		snprintf(buf, n, "[%s]:%d", ip, port);
	} else {
		snprintf(buf, n, "unknown peer");
	}
}

static void tune(struct conn *c)
{
	int one = 1;
	const struct hora_net_opts *o = &c->loop->o;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (o->sndbuf_bytes > 0)
		setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf_bytes, sizeof(int));
	if (o->rcvbuf_bytes > 0)
		setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf_bytes, sizeof(int));
}

static void on_hs(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe);
static void on_connect(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe);
static void on_rx(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe);
static void on_tx(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe);

struct conn *hora_net_conn_new(struct hora_net_loop *loop, int fd, bool server,
			       const struct sockaddr_storage *addr, socklen_t addrlen)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->loop = loop;
	c->fd = fd;
	c->server = server;
	c->hs_op.fn = on_hs;
	c->conn_op.fn = on_connect;
	c->rx_op.fn = on_rx;
	c->tx_op.fn = on_tx;
	if (addr && addrlen) {
		memcpy(&c->addr, addr, addrlen);
		c->addrlen = addrlen;
	}
	fmt_addr(&c->addr, c->addrlen, c->name, sizeof(c->name));
	c->next = loop->conns;
	if (loop->conns)
		loop->conns->prev = c;
	loop->conns = c;
	if (fd >= 0)
		tune(c);
	return c;
}

/* ---- closing ----------------------------------------------------------------- */

void hora_net_conn_shutdown(struct conn *c)
{
	if (c->state != C_CLOSING) {
		if (c->server && c->state == C_HANDSHAKE)
			c->loop->pending_handshakes--;
		c->state = C_CLOSING;
		if (c->fd >= 0)
			shutdown(c->fd, SHUT_RDWR);
	}
	if (c->inflight == 0)
		conn_free(c);
}

static void conn_free(struct conn *c)
{
	struct hora_net_loop *loop = c->loop;
	if (c->fd >= 0)
		close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		loop->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	for (struct frame *f = c->txq, *n; f; f = n) {
		n = f->next;
		free(f);
	}
	free(c->rxbuf);
	if (c->peer)
		hora_net_peer_conn_gone(c->peer, c); /* c is unlinked; only its identity is used */
	free(c);
}

/* Keep c alive across work that may fail its peer or run callbacks that
 * close it (shutting down frees a conn with nothing in flight). */
static void hold(struct conn *c)
{
	c->inflight++;
}

static void release(struct conn *c)
{
	if (--c->inflight == 0 && c->state == C_CLOSING)
		conn_free(c);
}

/* Op finished: drop the reference; returns true if the conn is closing (and
 * possibly freed), so the caller must not touch it. */
static bool op_done(struct conn *c)
{
	c->inflight--;
	if (c->state == C_CLOSING) {
		if (c->inflight == 0)
			conn_free(c);
		return true;
	}
	return false;
}

static void arm_retry(struct conn *c, int ms);

/* Client: a handshake that the server cut off (EOF, reset: it was busy, or
 * dropped us to make room) or that timed out is tried again on a fresh
 * socket after a backoff (50 ms doubling to 1 s) until the caller's
 * deadline: a replacement conn takes c's place in its peer, and c closes on
 * its own. Authentication and version refusals are final. true: retrying. */
static bool hs_retry(struct conn *c, int rc, const char *why)
{
	struct hora_net_peer *p = c->peer;
	const int ms = c->retry_ms ? (c->retry_ms >= 500 ? 1000 : 2 * c->retry_ms) : 50;
	const bool transient = rc == -ECONNRESET || rc == -EPIPE || rc == -ETIMEDOUT;
	if (!transient || c->state != C_HANDSHAKE || p->status || p->closing ||
	    hora_clock_ns() + (int64_t)ms * 1000000 >= c->connect_deadline_ns)
		return false;
	struct conn *n = hora_net_conn_new(c->loop, -1, false, &c->addr, c->addrlen);
	if (!n)
		return false;
	n->peer = p;
	n->stripe = c->stripe;
	n->state = C_CONNECTING;
	n->deadline_ns = n->connect_deadline_ns = c->connect_deadline_ns;
	n->retry_ms = ms;
	p->conns[c->stripe] = n;
	c->peer = NULL; /* no longer the peer's: it only closes */
	hora_net_refuse_log(c->loop, "handshake with %s: %s; trying again in %d ms", c->name, why, ms);
	hora_net_conn_shutdown(c);
	arm_retry(n, ms);
	return true;
}

/* Handshake failed or timed out: count, log (rate-limited), remember it for
 * the error of an accept that then times out, close. A client retries what
 * may pass next time (hs_retry) and otherwise fails its peer. */
static void hs_fail(struct conn *c, int rc, const char *why)
{
	struct hora_net_loop *loop = c->loop;
	if (c->peer && !c->server) {
		if (hs_retry(c, rc, why))
			return;
		/* shuts down every stripe, c included (c may be freed here) */
		hora_net_peer_fail(c->peer, rc, "%s: %s", c->name, why);
		return;
	}
	char line[320];
	if (rc == -EACCES) {
		loop->stats.auth_failures++;
		snprintf(line, sizeof(line), "authentication failed from %s: %s", c->name, why);
	} else if (rc == -ETIMEDOUT) {
		loop->stats.handshake_timeouts++;
		snprintf(line, sizeof(line), "handshake timeout from %s: %s", c->name, why);
	} else if (rc == -EBUSY) {
		loop->stats.refused++;
		snprintf(line, sizeof(line), "dropped %s %s", c->name, why);
	} else if (rc == -EPROTONOSUPPORT) {
		loop->stats.refused++;
		snprintf(line, sizeof(line), "protocol version %d from %s not supported (this is %d)",
			 c->hs.peer_version, c->name, HORA_NET_VERSION);
	} else {
		loop->stats.refused++;
		snprintf(line, sizeof(line), "refused %s: %s", c->name, why);
	}
	hora_net_refuse_log(loop, "%s", line);
	pthread_mutex_lock(&loop->qlock);
	snprintf(loop->last_hs_fail, sizeof(loop->last_hs_fail), "%s failed the handshake: %s%s",
		 c->name, why, rc == -EACCES ? " (wrong cluster secret?)" : "");
	loop->last_hs_fail_ns = hora_clock_ns();
	pthread_mutex_unlock(&loop->qlock);
	hora_net_conn_shutdown(c);
}

void hora_net_conn_tick(struct conn *c, int64_t now)
{
	if ((c->state == C_HANDSHAKE || c->state == C_CONNECTING) && c->deadline_ns &&
	    now > c->deadline_ns) {
		char why[128];
		if (c->state == C_CONNECTING)
			snprintf(why, sizeof(why), "no connection within the deadline");
		else
			snprintf(why, sizeof(why), "no complete handshake within %d ms",
				 c->loop->o.handshake_timeout_ms);
		hs_fail(c, -ETIMEDOUT, why);
	}
}

/* The one to drop: the oldest that has sent nothing yet (idle: a peer under
 * way has sent its HELLO within a round trip), else the oldest. */
void hora_net_conn_evict_handshake(struct hora_net_loop *loop)
{
	struct conn *old = NULL;
	for (struct conn *c = loop->conns; c; c = c->next) {
		if (!c->server || c->state != C_HANDSHAKE)
			continue;
		const bool idle = !c->hs_msgs && !c->hs_have, old_idle = old && !old->hs_msgs && !old->hs_have;
		if (!old || (idle && !old_idle) || (idle == old_idle && c->deadline_ns < old->deadline_ns))
			old = c;
	}
	if (!old)
		return;
	const int64_t age_ns = hora_clock_ns() - (old->deadline_ns -
						  (int64_t)loop->o.handshake_timeout_ms * 1000000);
	char why[160];
	snprintf(why, sizeof(why), "to make room for a new connection: %d were in handshake, this one "
		 "the longest (%.1f s without completing it)", loop->pending_handshakes, 1e-9 * (double)age_ns);
	hs_fail(old, -EBUSY, why);
}

/* ---- connect (client) --------------------------------------------------------- */

static void hs_send(struct conn *c);

static void arm_connect(struct conn *c)
{
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	io_uring_prep_connect(sqe, c->fd, (struct sockaddr *)&c->addr, c->addrlen);
	io_uring_sqe_set_data(sqe, &c->conn_op);
	c->inflight++;
}

/* Client: connect again (a new socket) once ms have passed; c->fd is -1. */
static void arm_retry(struct conn *c, int ms)
{
	c->retry_ts.tv_sec = ms / 1000;
	c->retry_ts.tv_nsec = (long long)(ms % 1000) * 1000000;
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	io_uring_prep_timeout(sqe, &c->retry_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &c->conn_op);
	c->inflight++;
}

void hora_net_conn_start_connect(struct conn *c)
{
	c->state = C_CONNECTING;
	arm_connect(c);
}

static void on_connect(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	struct conn *c = container_of(op, struct conn, conn_op);
	(void)loop;
	if (op_done(c))
		return;
	if (c->fd < 0) { /* the retry delay elapsed: new socket, try again */
		c->fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0) {
			hs_fail(c, -errno, "socket failed");
			return;
		}
		tune(c);
		arm_connect(c);
		return;
	}
	int res = cqe->res;
	if (res == 0) {
		struct hora_net_peer *p = c->peer;
		c->state = C_HANDSHAKE;
		/* connected: the handshake gets at least 1 s (at most its own
		 * timeout) whatever is left of the caller's connect deadline:
		 * net/coll connects in 100 ms slices, and on a busy host a
		 * challenge a little late would cut every attempt; a listener
		 * that is no hora (it never sends a challenge) costs the slice
		 * that second, not the handshake timeout. A retry may follow. */
		const int64_t now = hora_clock_ns();
		const int64_t hs_end = now + (int64_t)loop->o.handshake_timeout_ms * 1000000;
		const int64_t floor = now + (int64_t)1000 * 1000000;
		int64_t end = c->connect_deadline_ns > floor ? c->connect_deadline_ns : floor;
		c->deadline_ns = end < hs_end ? end : hs_end;
		tune(c);
		int rc = hora_net_hs_client_start(&c->hs, loop->o.secret, loop->o.secret_len,
						  loop->o.node_id, p->session, (uint16_t)c->stripe,
						  (uint16_t)p->nconns, c->hs_out, &c->hs_outlen);
		if (rc) {
			hs_fail(c, rc, "bad cluster secret");
			return;
		}
		c->hs_sent = 0;
		hs_send(c);
		return;
	}
	bool retry = res == -ECONNREFUSED || res == -ECONNRESET || res == -ETIMEDOUT ||
		     res == -EAGAIN || res == -EHOSTUNREACH || res == -ENETUNREACH;
	if (retry && hora_clock_ns() + 50000000 < c->deadline_ns) {
		close(c->fd);
		c->fd = -1;
		arm_retry(c, 50);
		return;
	}
	char why[128];
	snprintf(why, sizeof(why), "connect: %s", strerror(-res));
	hs_fail(c, res, why);
}

/* ---- handshake ------------------------------------------------------------------ */

void hora_net_conn_start_server(struct conn *c)
{
	struct hora_net_loop *loop = c->loop;
	c->state = C_HANDSHAKE;
	loop->pending_handshakes++;
	c->deadline_ns = hora_clock_ns() + (int64_t)loop->o.handshake_timeout_ms * 1000000;
	if (hora_net_hs_server_start(&c->hs, loop->o.secret, loop->o.secret_len, loop->o.node_id)) {
		hs_fail(c, -EINVAL, "bad cluster secret");
		return;
	}
	c->hs_have = 0;
	struct io_uring_sqe *sqe = hora_net_sqe(loop);
	io_uring_prep_recv(sqe, c->fd, c->hs_in, hora_net_hs_want(&c->hs), 0);
	io_uring_sqe_set_data(sqe, &c->hs_op);
	c->hs_sending = false;
	c->inflight++;
}

static void hs_send(struct conn *c)
{
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	io_uring_prep_send(sqe, c->fd, c->hs_out + c->hs_sent, c->hs_outlen - c->hs_sent, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, &c->hs_op);
	c->hs_sending = true;
	c->inflight++;
}

static void hs_recv(struct conn *c)
{
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	io_uring_prep_recv(sqe, c->fd, c->hs_in + c->hs_have, hora_net_hs_want(&c->hs) - c->hs_have, 0);
	io_uring_sqe_set_data(sqe, &c->hs_op);
	c->hs_sending = false;
	c->inflight++;
}

static void become_ready(struct conn *c)
{
	struct hora_net_loop *loop = c->loop;
	if (c->server)
		loop->pending_handshakes--;
	c->state = C_READY;
	c->deadline_ns = 0;
	c->rxbuf = malloc(HORA_NET_RXBUF);
	if (!c->rxbuf) {
		c->state = C_HANDSHAKE; /* so shutdown accounts correctly */
		if (c->server)
			loop->pending_handshakes++;
		hs_fail(c, -ENOMEM, "out of memory");
		return;
	}
	c->rx = RX_HDR;
	hold(c); /* a stripe that does not fit is shut down in there */
	hora_net_peer_conn_ready(loop, c);
	if (c->state == C_READY)
		process_rx(c);
	release(c);
}

static void on_hs(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	struct conn *c = container_of(op, struct conn, hs_op);
	(void)loop;
	if (op_done(c))
		return;
	int res = cqe->res;
	char why[256];
	if (c->hs_sending) {
		if (res < 0) {
			snprintf(why, sizeof(why), "handshake send: %s", strerror(-res));
			hs_fail(c, res, why);
			return;
		}
		c->hs_sent += (size_t)res;
		if (c->hs_sent < c->hs_outlen) {
			hs_send(c);
		} else if (c->hs_rc == 1) {
			become_ready(c);
		} else if (c->hs_rc < 0) {
			hs_fail(c, c->hs_rc, c->hs.why); /* the REJECT went out */
		} else {
			c->hs_have = 0;
			hs_recv(c);
		}
		return;
	}
	if (res <= 0) {
		if (res == 0)
			snprintf(why, sizeof(why), "closed the connection during the handshake "
				 "(%zu of %zu bytes)", c->hs_have, hora_net_hs_want(&c->hs));
		else
			snprintf(why, sizeof(why), "handshake recv: %s", strerror(-res));
		hs_fail(c, res == 0 ? -ECONNRESET : res, why);
		return;
	}
	c->hs_have += (size_t)res;
	if (c->hs_have < hora_net_hs_want(&c->hs)) {
		hs_recv(c);
		return;
	}
	size_t n = c->hs_have;
	c->hs_have = 0;
	c->hs_msgs++;
	c->hs_rc = hora_net_hs_input(&c->hs, c->hs_in, n, c->hs_out, &c->hs_outlen);
	/* A client that sends its AUTH now may be the server's peer before it
	 * reads the result: its handshake deadline starts again here (since
	 * the connect, the caller's connect deadline cuts no handshake: a cut
	 * would leave the server a peer that the client gave up; net/coll
	 * connects in short slices and relies on it). */
	if (!c->server && c->hs_rc == 0 && hora_net_hs_want(&c->hs) == HORA_NET_RESULT_BYTES)
		c->deadline_ns = hora_clock_ns() + (int64_t)c->loop->o.handshake_timeout_ms * 1000000;
	if (c->hs_outlen) {
		c->hs_sent = 0;
		hs_send(c);
	} else if (c->hs_rc == 1) {
		become_ready(c);
	} else if (c->hs_rc < 0) {
		hs_fail(c, c->hs_rc, c->hs.why);
	} else {
		hs_recv(c);
	}
}

/* ---- receive ------------------------------------------------------------------- */

/* SO_RCVLOWAT while a large payload is received straight into the user's
 * buffer: TCP then wakes the comm thread once the rest of the frame (up to
 * HORA_NET_LOWAT_MAX) is queued instead of at every arriving segment, so a
 * 1 MiB frame costs one wake-up and one recv instead of a dozen (measured:
 * bench/RESULTS.md "One wake-up per frame"). The recv is then a plain one
 * (no MSG_WAITALL): io_uring's internal retry after a partial read would
 * wait for the old low-water mark, more bytes than are still to come. Any
 * partial completion re-arms with the new rest. The kernel caps the mark at
 * half the receive buffer and wakes early when the window closes, so the
 * mark can delay a wake-up but never withhold one. */
static int set_lowat(struct conn *c, uint64_t want)
{
	int v = want > HORA_NET_LOWAT_MAX ? HORA_NET_LOWAT_MAX : want < 1 ? 1 : (int)want;
	if (v == c->lowat)
		return 0;
	if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)))
		return -errno;
	c->lowat = v;
	return 0;
}

static void arm_rx_staging(struct conn *c)
{
	if (c->lowat > 1) {
		int rc = set_lowat(c, 1); /* headers and small frames: wake at once */
		if (rc) { /* the next header could wait for bytes that never come */
			hora_net_peer_fail(c->peer, rc, "setsockopt(SO_RCVLOWAT, 1) on %s: %s",
					   c->peer->name, strerror(-rc));
			return;
		}
	}
	if (c->rx_off) {
		memmove(c->rxbuf, c->rxbuf + c->rx_off, c->rx_have - c->rx_off);
		c->rx_have -= c->rx_off;
		c->rx_off = 0;
	}
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	io_uring_prep_recv(sqe, c->fd, c->rxbuf + c->rx_have, HORA_NET_RXBUF - c->rx_have, 0);
	if (c->rx_have == c->rx_off) /* nothing pending: usually no data yet, arm poll first */
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data(sqe, &c->rx_op);
	c->rx_armed = true;
	c->rx_direct = false;
	c->inflight++;
}

static void arm_rx_direct(struct conn *c)
{
	struct hora_net_req *r = c->cur_req;
	uint64_t left = c->cur.length - c->cur_got;
	/* without the mark, MSG_WAITALL keeps the partial reads in the kernel */
	bool lowat = c->loop->o.rcvlowat;
	int rc = lowat ? set_lowat(c, left) : 0;
	if (rc) {
		hora_net_peer_fail(c->peer, rc, "setsockopt(SO_RCVLOWAT, %d) on %s: %s",
				   left > HORA_NET_LOWAT_MAX ? HORA_NET_LOWAT_MAX : (int)left,
				   c->peer->name, strerror(-rc));
		return;
	}
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	io_uring_prep_recv(sqe, c->fd, r->buf + c->cur.offset + c->cur_got,
			   left > (1u << 30) ? (1u << 30) : (size_t)left, lowat ? 0 : MSG_WAITALL);
	if (lowat)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data(sqe, &c->rx_op);
	c->rx_armed = true;
	c->rx_direct = true;
	c->inflight++;
}

/* Attach the parsed header c->cur to its posted receive. */
static bool bind_frame(struct conn *c, struct hora_net_req *r)
{
	struct hora_net_peer *p = c->peer;
	if (r->len != c->cur.msg_len) {
		hora_net_peer_fail(p, -EMSGSIZE,
				   "message %llu from %s is %llu bytes but the receive posted for "
				   "it is %zu bytes",
				   (unsigned long long)c->cur.seq, p->name,
				   (unsigned long long)c->cur.msg_len, r->len);
		return false;
	}
	c->cur_req = r;
	c->cur_got = 0;
	c->rx = RX_PAYLOAD;
	return true;
}

static void frame_done(struct conn *c)
{
	struct hora_net_peer *p = c->peer;
	struct hora_net_req *r = c->cur_req;
	if (c->cur.flags & HORA_NET_F_CRC) {
		uint32_t crc = hora_net_crc32c(0, r->buf + c->cur.offset, c->cur.length);
		if (crc != c->cur.crc32c) {
			c->loop->stats.protocol_errors++;
			hora_net_peer_fail(p, -EBADMSG,
					   "CRC32C mismatch in frame %llu of message %llu from %s "
					   "(0x%08x, header says 0x%08x)",
					   (unsigned long long)c->frames_rx,
					   (unsigned long long)c->cur.seq, p->name, crc, c->cur.crc32c);
			return;
		}
	}
	c->loop->stats.frames_received++;
	c->loop->stats.bytes_received += c->cur.length;
	p->progress++;
	r->done_bytes += c->cur.length;
	c->rx = RX_HDR;
	c->cur_req = NULL;
	if (r->done_bytes == r->len)
		hora_net_peer_recv_complete(p, r);
}

void hora_net_conn_resume_rx(struct conn *c)
{
	if (c->state != C_READY || c->rx != RX_PARKED)
		return;
	struct hora_net_req *r = hora_net_peer_find_recv(c->peer, c->cur.seq);
	hold(c);
	if (r && bind_frame(c, r))
		process_rx(c);
	release(c);
}

/* the caller holds c: a frame that fails (CRC) or completes a request whose
 * callback closes the peer may shut c down here */
static void process_rx(struct conn *c)
{
	struct hora_net_peer *p = c->peer;
	char why[192];
	while (c->state == C_READY && !p->status) {
		if (c->rx == RX_PARKED)
			return;
		if (c->rx == RX_HDR) {
			if (c->rx_have - c->rx_off < HORA_NET_HDR_BYTES) {
				arm_rx_staging(c);
				return;
			}
			int rc = hora_net_hdr_decode(c->rxbuf + c->rx_off, c->loop->o.max_frame_bytes,
						     &c->cur, why, sizeof(why));
			c->rx_off += HORA_NET_HDR_BYTES;
			c->frames_rx++;
			if (rc) {
				c->loop->stats.protocol_errors++;
				hora_net_refuse_log(c->loop, "protocol error from %s (frame %llu): %s",
						    p->name, (unsigned long long)c->frames_rx, why);
				hora_net_peer_fail(p, rc, "protocol error from %s in frame %llu: %s",
						   p->name, (unsigned long long)c->frames_rx, why);
				return;
			}
			if (c->cur.view != c->loop->o.view) {
				c->loop->stats.protocol_errors++;
				hora_net_peer_fail(p, -ESTALE,
						   "frame %llu from %s belongs to view %u, this is view %u",
						   (unsigned long long)c->frames_rx, p->name, c->cur.view,
						   c->loop->o.view);
				return;
			}
			if (c->cur.type == HORA_NET_T_CLOSE) {
				p->remote_closed = true;
				continue;
			}
			struct hora_net_req *r = hora_net_peer_find_recv(p, c->cur.seq);
			if (!r) {
				if (c->cur.seq >= p->recv_seq) {
					c->rx = RX_PARKED; /* wait for the matching irecv */
					return;
				}
				c->loop->stats.protocol_errors++;
				hora_net_peer_fail(p, -EBADMSG,
						   "frame %llu from %s is for message %llu, which is "
						   "already complete",
						   (unsigned long long)c->frames_rx, p->name,
						   (unsigned long long)c->cur.seq);
				return;
			}
			if (!bind_frame(c, r))
				return;
		}
		/* RX_PAYLOAD */
		uint64_t left = c->cur.length - c->cur_got;
		size_t staged = c->rx_have - c->rx_off;
		size_t take = left < staged ? (size_t)left : staged;
		if (take) {
			memcpy(c->cur_req->buf + c->cur.offset + c->cur_got, c->rxbuf + c->rx_off, take);
			c->rx_off += take;
			c->cur_got += take;
		}
		if (c->cur_got == c->cur.length) {
			frame_done(c);
			continue;
		}
		c->rx_have = c->rx_off = 0;
		if (c->cur.length - c->cur_got >= HORA_NET_DIRECT_MIN)
			arm_rx_direct(c);
		else
			arm_rx_staging(c);
		return;
	}
}

static void rx_result(struct conn *c, int res)
{
	struct hora_net_peer *p = c->peer;
	if (p->status)
		return;
	if (res < 0) {
		hora_net_peer_fail(p, res, "recv from %s: %s", p->name, strerror(-res));
		return;
	}
	if (res == 0) {
		bool mid = c->rx == RX_PAYLOAD || c->rx_have > c->rx_off;
		if (!mid && p->remote_closed) { /* orderly: CLOSE then EOF */
			hora_net_conn_shutdown(c);
			return;
		}
		if (mid)
			hora_net_peer_fail(p, -ECONNRESET,
					   "peer %s closed the connection during frame %llu", p->name,
					   (unsigned long long)(c->rx == RX_PAYLOAD ? c->frames_rx
										   : c->frames_rx + 1));
		else
			hora_net_peer_fail(p, -ECONNRESET, "peer %s closed the connection", p->name);
		return;
	}
	if (c->rx_direct) {
		c->cur_got += (uint64_t)res;
		if (c->cur_got < c->cur.length) {
			arm_rx_direct(c);
			return;
		}
		frame_done(c);
	} else {
		c->rx_have += (size_t)res;
	}
	process_rx(c);
}

static void on_rx(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	struct conn *c = container_of(op, struct conn, rx_op);
	(void)loop;
	c->rx_armed = false;
	if (op_done(c))
		return;
	hold(c);
	rx_result(c, cqe->res);
	release(c);
}

/* ---- send ---------------------------------------------------------------------- */

void hora_net_conn_kick_tx(struct conn *c)
{
	if (c->tx_armed || c->tx_zc_wait || c->state != C_READY)
		return;
	if (!c->txq) {
		if (c->peer && c->peer->closing)
			hora_net_conn_shutdown(c); /* goodbye flushed */
		return;
	}
	struct frame *h = c->txq;
	if (h->inlined && !h->next && !c->loop->o.send_zc) {
		/* One small frame (the latency case). Try a non-blocking send(2)
		 * first: when the socket has room it completes here, with no SQE,
		 * no CQE and no extra trip through io_uring_enter. */
		if (h->sent == 0) {
			size_t total = HORA_NET_HDR_BYTES + h->len;
			ssize_t n = send(c->fd, h->hdr, total, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n > 0)
				h->sent = (size_t)n;
			if (n == (ssize_t)total) {
				c->peer->progress++;
				c->inflight++; /* callbacks below may close us: hold on */
				pop_sent(c);
				if (!op_done(c))
					hora_net_conn_kick_tx(c);
				return;
			}
			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
				int e = errno;
				hora_net_peer_fail(c->peer, -e, "send to %s: %s", c->peer->name,
						   strerror(e));
				return;
			}
		}
		struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
		io_uring_prep_send(sqe, c->fd, h->hdr + h->sent, HORA_NET_HDR_BYTES + h->len - h->sent,
				   MSG_NOSIGNAL);
		io_uring_sqe_set_data(sqe, &c->tx_op);
		c->tx_armed = true;
		c->inflight++;
		return;
	}
	int n = 0;
	size_t total = 0;
	for (struct frame *f = c->txq; f && n < HORA_NET_MAX_IOV - 1 && total < (8u << 20); f = f->next) {
		if (f->sent < HORA_NET_HDR_BYTES) {
			c->iov[n].iov_base = f->hdr + f->sent;
			c->iov[n].iov_len = HORA_NET_HDR_BYTES - f->sent;
			total += c->iov[n++].iov_len;
		}
		size_t poff = f->sent > HORA_NET_HDR_BYTES ? f->sent - HORA_NET_HDR_BYTES : 0;
		if (f->len > poff) {
			c->iov[n].iov_base = (void *)(f->payload + poff);
			c->iov[n].iov_len = f->len - poff;
			total += c->iov[n++].iov_len;
		}
	}
	memset(&c->msg, 0, sizeof(c->msg));
	c->msg.msg_iov = c->iov;
	c->msg.msg_iovlen = (size_t)n;
	struct io_uring_sqe *sqe = hora_net_sqe(c->loop);
	if (c->loop->o.send_zc && total >= c->loop->o.zc_min_bytes)
		io_uring_prep_sendmsg_zc(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	else
		io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, &c->tx_op);
	c->tx_armed = true;
	c->inflight++;
}

/* Drop fully written frames from the head of the queue. */
static void pop_sent(struct conn *c)
{
	while (c->txq && c->txq->sent == HORA_NET_HDR_BYTES + c->txq->len) {
		struct frame *f = c->txq;
		c->txq = f->next;
		if (!c->txq)
			c->txq_tail = NULL;
		c->loop->stats.frames_sent++;
		c->loop->stats.bytes_sent += f->len;
		struct hora_net_req *r = f->req;
		hora_net_frame_put(c->loop, f);
		if (r && !c->peer->status)
			hora_net_peer_send_frame_done(r);
	}
}

static void on_tx(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	struct conn *c = container_of(op, struct conn, tx_op);
	(void)loop;
	if (cqe->flags & IORING_CQE_F_NOTIF) { /* zero-copy: the kernel let go of the pages */
		c->tx_zc_wait = false;
		if (op_done(c))
			return;
		hold(c); /* a send's callback may post I/O that fails the peer */
		pop_sent(c);
		hora_net_conn_kick_tx(c);
		release(c);
		return;
	}
	bool more = cqe->flags & IORING_CQE_F_MORE; /* a NOTIF follows */
	c->tx_armed = false;
	if (more)
		c->tx_zc_wait = true;
	else if (op_done(c))
		return;
	if (c->state == C_CLOSING)
		return;
	int res = cqe->res;
	if (res < 0) {
		if (!c->peer->status)
			hora_net_peer_fail(c->peer, res, "send to %s: %s", c->peer->name, strerror(-res));
		return;
	}
	size_t left = (size_t)res;
	for (struct frame *f = c->txq; f && left; f = f->next) {
		size_t want = HORA_NET_HDR_BYTES + f->len - f->sent;
		size_t k = left < want ? left : want;
		f->sent += k;
		left -= k;
	}
	c->peer->progress++;
	if (!more) {
		hold(c);
		pop_sent(c);
		hora_net_conn_kick_tx(c);
		release(c);
	}
}
