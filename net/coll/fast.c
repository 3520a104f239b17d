/* fast.c - the small-message channel (see fast.h). */
#include "net/coll/fast.h"

#include "net/transport/handshake.h"
#include "net/util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* how long a message cut short by an error may take to finish (ms) */
#define FLUSH_MS 1000
/* one connection's handshake deadline, and how many are in handshake at
 * once on the accepting side (a new one drops the oldest) */
#define FAST_HS_MS 5000
#define FAST_CHECK_MS 100 /* the caller's check, at least this often (coll.h's HORA_NET_FORM_CHECK_MS) */
#define FAST_PENDING 16

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai;
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &ai))
		return -EINVAL;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

int hora_net_fast_listen(const char *host, int *lfd, uint16_t *port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	if (resolve(host, 0, &ss, &len))
		return snprintf(err, errlen, "bad listen address '%s'", host), -EINVAL;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len)) {
		int e = errno;
		snprintf(err, errlen, "listening on %s: %s", host, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	*port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	*lfd = fd;
	return 0;
}

/* wait for fd to become ready for `ev` until deadline (ms, monotonic) */
static int wait_fd(int fd, short ev, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - hora_clock_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = ev};
		int k = poll(&p, 1, (int)left);
		if (k > 0)
			return 0;
		if (k < 0 && errno != EINTR)
			return -errno;
	}
}

/* non-blocking fd, whole buffer, by deadline */
static int io_all(int fd, void *buf, size_t n, int writing, int64_t deadline)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int rc = wait_fd(fd, writing ? POLLOUT : POLLIN, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

/* drive the handshake over a non-blocking socket */
static int handshake(int fd, struct hora_net_hs *hs, const uint8_t *out, size_t outlen,
		     int64_t deadline, char *err, size_t errlen)
{
	uint8_t in[HORA_NET_CHALLENGE_BYTES], o[HORA_NET_HS_MAX_OUT];
	int rc;
	if (outlen && (rc = io_all(fd, (void *)out, outlen, 1, deadline)))
		return snprintf(err, errlen, "handshake: %s", strerror(-rc)), rc;
	for (size_t want; (want = hora_net_hs_want(hs));) {
		if ((rc = io_all(fd, in, want, 0, deadline)))
			return snprintf(err, errlen, "handshake: %s", strerror(-rc)), rc;
		size_t olen = 0;
		int r = hora_net_hs_input(hs, in, want, o, &olen);
		if (olen && (rc = io_all(fd, o, olen, 1, deadline)) && r >= 0)
			return snprintf(err, errlen, "handshake: %s", strerror(-rc)), rc;
		if (r < 0)
			return snprintf(err, errlen, "handshake: %s", hs->why), r;
		if (r == 1)
			break;
	}
	return 0;
}

static int finish(int fd, int io_timeout_ms)
{
	int one = 1, buf = 4 << 20; /* a whole small message (up to 1 MiB) fits in flight */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	struct timeval tv = {.tv_sec = io_timeout_ms / 1000, .tv_usec = (io_timeout_ms % 1000) * 1000};
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
		return -errno;
	return 0;
}

/* A client handshake the server cut off (EOF, reset: a server busy with
 * other connections) or that timed out may pass on a new connection. */
static bool fast_transient(int rc)
{
	return rc == -ECONNRESET || rc == -EPIPE || rc == -ETIMEDOUT;
}

/* One connection and handshake, this attempt's deadline hd. 0 and *fd, or -errno. */
static int connect_once(const struct sockaddr_storage *ss, socklen_t len, const uint8_t *key,
			size_t keylen, uint32_t node, int64_t hd, int io_timeout_ms, int *fd, char *err,
			size_t errlen)
{
	int s = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return snprintf(err, errlen, "socket: %s", strerror(errno)), -errno;
	int rc = 0;
	if (connect(s, (const struct sockaddr *)ss, len) && errno != EINPROGRESS)
		rc = -errno;
	else if (!(rc = wait_fd(s, POLLOUT, hd))) {
		int e = 0;
		socklen_t el = sizeof(e);
		getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
		rc = -e;
	}
	if (rc) {
		close(s);
		return snprintf(err, errlen, "connect: %s", strerror(-rc)), rc;
	}
	struct hora_net_hs hs;
	uint8_t out[HORA_NET_HS_MAX_OUT];
	size_t olen = 0;
	uint64_t session;
	if (getrandom(&session, sizeof(session), 0) != sizeof(session) ||
	    hora_net_hs_client_start(&hs, key, keylen, node, session, 0, 1, out, &olen)) {
		close(s);
		return snprintf(err, errlen, "cannot start the handshake"), -EINVAL;
	}
	rc = handshake(s, &hs, out, olen, hd, err, errlen);
	if (!rc && !(rc = finish(s, io_timeout_ms))) {
		*fd = s;
		return 0;
	}
	close(s);
	return rc;
}

/* the caller's check (fast.h): 0, or its code with err saying so */
static int ask(const struct hora_net_fast_check *check, char *err, size_t errlen)
{
	const int rc = check && check->fn ? check->fn(check->arg) : 0;
	if (rc)
		snprintf(err, errlen, "stopped by the caller's check");
	return rc;
}

int hora_net_fast_connect(const char *host, uint16_t port, const uint8_t *key, size_t keylen,
			  uint32_t node, int timeout_ms, int io_timeout_ms, int *fd, char *err,
			  size_t errlen, const struct hora_net_fast_check *check)
{
	struct sockaddr_storage ss;
	socklen_t len;
	if (resolve(host, port, &ss, &len))
		return snprintf(err, errlen, "bad address '%s'", host), -EINVAL;
	const int64_t deadline = hora_clock_ms() + timeout_ms;
	int backoff_ms = 50;
	for (;;) {
		const int64_t now = hora_clock_ms(), hd = now + FAST_HS_MS;
		int rc = connect_once(&ss, len, key, keylen, node, hd < deadline ? hd : deadline,
				      io_timeout_ms, fd, err, errlen);
		if (!rc)
			return 0;
		/* refused: not listening yet (every 20 ms); a handshake cut off
		 * or timed out: again with backoff (50 ms doubling to 1 s) */
		const bool refused = rc == -ECONNREFUSED && !strncmp(err, "connect:", 8);
		const int wait_ms = refused ? 20 : backoff_ms;
		if ((!refused && !fast_transient(rc)) || hora_clock_ms() + wait_ms >= deadline)
			return rc;
		if (!refused && backoff_ms < 1000)
			backoff_ms *= 2;
		if ((rc = ask(check, err, errlen)))
			return rc;
		usleep((useconds_t)wait_ms * 1000);
	}
}

/* ---- accepting: every connection in handshake at once, each with its own
 * deadline, so that an idle or garbage one cannot hold up the real peers ---- */

struct pend {
	int fd;
	int64_t deadline;
	char name[64];
	struct hora_net_hs hs;
	uint8_t in[HORA_NET_CHALLENGE_BYTES], out[HORA_NET_HS_MAX_OUT];
	size_t have, outlen, sent;
	int rc; /* of the last input: 0 go on, 1 done once out is sent, < 0 failed (ditto) */
};

/* Advance one server handshake as far as the socket allows: 1
 * authenticated, 0 not yet, < 0 failed (why says how). */
static int pend_step(struct pend *p, char *why, size_t whylen)
{
	for (;;) {
		if (p->sent < p->outlen) {
			ssize_t k = send(p->fd, p->out + p->sent, p->outlen - p->sent, MSG_NOSIGNAL);
			if (k < 0 && (errno == EAGAIN || errno == EINTR))
				return 0;
			if (k < 0)
				return snprintf(why, whylen, "%s: handshake send: %s", p->name, strerror(errno)),
				       -errno;
			p->sent += (size_t)k;
			continue;
		}
		if (p->rc)
			return p->rc == 1 ? 1 : (snprintf(why, whylen, "%s: %s", p->name, p->hs.why), p->rc);
		const size_t want = hora_net_hs_want(&p->hs);
		ssize_t k = recv(p->fd, p->in + p->have, want - p->have, 0);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (k <= 0)
			return snprintf(why, whylen, "%s: %s during the handshake", p->name,
					k ? strerror(errno) : "closed the connection"),
			       k ? -errno : -ECONNRESET;
		if ((p->have += (size_t)k) < want)
			continue;
		p->have = p->outlen = p->sent = 0;
		p->rc = hora_net_hs_input(&p->hs, p->in, want, p->out, &p->outlen);
	}
}

/* Take every connection waiting on lfd into pd (a full set drops its
 * oldest). 0 or -errno. */
static int pend_accept(int lfd, const uint8_t *key, size_t keylen, uint32_t node, struct pend *pd,
		       int *np, int64_t deadline)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int s = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (s < 0)
			return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? 0 : -errno;
		if (*np == FAST_PENDING) {
			int o = 0;
			for (int i = 1; i < *np; i++)
				o = pd[i].deadline < pd[o].deadline ? i : o;
			close(pd[o].fd);
			pd[o] = pd[--*np];
		}
		struct pend *p = &pd[*np];
		memset(p, 0, sizeof(*p));
		p->fd = s;
		const int64_t hd = hora_clock_ms() + FAST_HS_MS;
		p->deadline = hd < deadline ? hd : deadline;
		char host[48] = "?", serv[8] = "?";
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
			    NI_NUMERICHOST | NI_NUMERICSERV);
		snprintf(p->name, sizeof(p->name), "%s:%s", host, serv);
		if (hora_net_hs_server_start(&p->hs, key, keylen, node)) {
			close(s);
			return -EINVAL;
		}
		(*np)++;
	}
}

int hora_net_fast_accept(int lfd, const uint8_t *key, size_t keylen, uint32_t node, int timeout_ms,
			 int io_timeout_ms, int n, int *fds, uint32_t *peer_nodes, char *err,
			 size_t errlen, const struct hora_net_fast_check *check)
{
	const int64_t deadline = hora_clock_ms() + timeout_ms;
	struct pend *pd = calloc(FAST_PENDING, sizeof(*pd));
	char why[256] = "no connection";
	int np = 0, got = 0, rc = pd ? 0 : -ENOMEM;
	while (!rc && got < n) {
		struct pollfd pf[FAST_PENDING + 1] = {{.fd = lfd, .events = POLLIN}};
		int64_t now = hora_clock_ms(), wake = deadline;
		for (int i = 0; i < np; i++) {
			pf[1 + i] = (struct pollfd){.fd = pd[i].fd,
						    .events = POLLIN | (pd[i].sent < pd[i].outlen ? POLLOUT : 0)};
			wake = pd[i].deadline < wake ? pd[i].deadline : wake;
		}
		if (now >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		if (check && check->fn && wake > now + FAST_CHECK_MS)
			wake = now + FAST_CHECK_MS;
		if (poll(pf, (nfds_t)np + 1, (int)(wake > now ? wake - now : 0)) < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		now = hora_clock_ms();
		for (int i = np - 1; i >= 0; i--) { /* downwards: the last one moves into a gap */
			int r = pf[1 + i].revents ? pend_step(&pd[i], why, sizeof(why)) : 0;
			if (!r && now >= pd[i].deadline) {
				snprintf(why, sizeof(why), "%s: no complete handshake within %d ms", pd[i].name,
					 FAST_HS_MS);
				r = -ETIMEDOUT;
			}
			if (!r)
				continue;
			if (r == 1 && !finish(pd[i].fd, io_timeout_ms)) {
				fds[got] = pd[i].fd;
				peer_nodes[got++] = pd[i].hs.peer_node;
			} else {
				close(pd[i].fd); /* a stranger or a wrong secret: waiting goes on */
			}
			pd[i] = pd[--np];
			if (got == n)
				break;
		}
		if (got < n && pf[0].revents)
			rc = pend_accept(lfd, key, keylen, node, pd, &np, deadline);
		if (!rc && got < n && check && check->fn && (rc = check->fn(check->arg)))
			snprintf(why, sizeof(why), "stopped by the caller's check");
	}
	for (int i = 0; i < np; i++)
		close(pd[i].fd);
	free(pd);
	if (rc) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		if (rc == -ETIMEDOUT)
			snprintf(err, errlen, "timed out (%d of %d connected; last: %s)", got, n, why);
		else if (check && check->fn && !strcmp(why, "stopped by the caller's check"))
			snprintf(err, errlen, "%s (%d of %d connected)", why, got, n);
		else
			snprintf(err, errlen, "accept: %s", strerror(-rc));
	}
	return rc;
}

static int io_error(ssize_t k, int *dir, int d, char *err, size_t errlen)
{
	int e = k == 0 ? ECONNRESET : errno == EAGAIN ? ETIMEDOUT : errno;
	*dir = d;
	snprintf(err, errlen, "%s",
		 k == 0 ? "connection closed by the peer"
		 : e == ETIMEDOUT ? "no progress within the io timeout" : strerror(e));
	return -e;
}

/* the part of {head, body} after `off` bytes, as up to two iovecs */
static int iov_at(struct iovec *v, const void *head, size_t hl, const void *body, size_t bl, size_t off)
{
	int k = 0;
	if (off < hl)
		v[k++] = (struct iovec){(uint8_t *)head + off, hl - off};
	if (bl && off < hl + bl) {
		size_t b = off > hl ? off - hl : 0;
		v[k++] = (struct iovec){(uint8_t *)body + b, bl - b};
	}
	return k;
}

static ssize_t xsend(int fd, const void *h, size_t hl, const void *b, size_t bl, size_t off)
{
	struct iovec v[2];
	struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)iov_at(v, h, hl, b, bl, off)};
	return sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The first non-blocking sends: a small message leaves in one call. */
static int send_first(struct hora_net_fast_xchg *x, size_t *sent, size_t ototal)
{
	while (*sent < ototal) {
		ssize_t k = xsend(x->out_fd, x->out_head, x->head_bytes, x->out_body, x->out_bytes, *sent);
		if (k > 0)
			*sent += (size_t)k;
		else if (k < 0 && errno == EINTR)
			continue;
		else if (k < 0 && errno == EAGAIN)
			break;
		else
			return io_error(k, &x->dir, 0, x->err, x->errlen);
	}
	return 0;
}

/* Stopped inside our own message to out_fd: its reader expects the rest
 * before anything else. When the check refused the head we got (a
 * mismatch, or a peer's notice that it stopped), the caller will tell its
 * peers why (a notice of its own): finish the message first (its reader is
 * in the same call, so it drains), so that the notice is read as a message
 * and not as our data; if that cannot be done in time, say so (torn). */
static void flush_rest(struct hora_net_fast_xchg *x, size_t sent, size_t ototal)
{
	const int tmo = x->timeout_ms;
	const int64_t until = hora_clock_ms() + (tmo > 0 && tmo < FLUSH_MS ? tmo : FLUSH_MS);
	while (sent < ototal) {
		ssize_t k = xsend(x->out_fd, x->out_head, x->head_bytes, x->out_body, x->out_bytes, sent);
		if (k > 0)
			sent += (size_t)k;
		else if (k < 0 && errno == EINTR)
			continue;
		else if (k == 0 || errno != EAGAIN || wait_fd(x->out_fd, POLLOUT, until))
			break;
	}
	x->torn = sent < ototal;
}

int hora_net_fast_xchg(struct hora_net_fast_xchg *x)
{
	const size_t hl = x->head_bytes, ototal = hl + x->out_bytes, itotal = hl + x->in_bytes;
	const int ofd = x->out_fd, ifd = x->in_fd, spin_us = x->spin_us;
	size_t sent = ofd < 0 ? ototal : 0, got = ifd < 0 ? itotal : 0;
	int rc = 0, refused = 0;
	x->torn = 0;
	int64_t spin_until = -1; /* set when the receive first finds nothing */
	if ((rc = send_first(x, &sent, ototal)))
		goto out;
	/* both directions until done; blocking receive when nothing is left to send */
	while (got < itotal || sent < ototal) {
		int flags = sent < ototal ? MSG_DONTWAIT : 0;
		if (!flags && spin_us > 0) { /* bounded spin before sleeping: a wake-up costs more */
			int64_t now = hora_clock_us();
			if (spin_until < 0)
				spin_until = now + spin_us;
			if (now < spin_until)
				flags = MSG_DONTWAIT;
		}
		if (got < itotal) {
			struct iovec v[2];
			struct msghdr m = {.msg_iov = v,
					   .msg_iovlen = (size_t)iov_at(v, x->in_head, hl, x->in_body, x->in_bytes, got)};
			ssize_t k = recvmsg(ifd, &m, flags);
			if (k > 0) {
				size_t before = got;
				got += (size_t)k;
				if (x->check && before < hl && got >= hl && (rc = x->check(x->check_arg, x->in_head))) {
					x->dir = 1;
					refused = 1;
					goto out;
				}
				continue;
			}
			if (k == 0 || (errno != EINTR && errno != EAGAIN) || (errno == EAGAIN && !flags)) {
				/* !flags: a blocking receive timed out */
				rc = io_error(k, &x->dir, 1, x->err, x->errlen);
				goto out;
			}
			if (errno == EINTR)
				continue;
			if (sent == ototal) { /* spinning: let a co-located rank run if one waits */
				sched_yield();
				continue;
			}
		}
		if (sent < ototal) {
			ssize_t k = xsend(ofd, x->out_head, hl, x->out_body, x->out_bytes, sent);
			if (k > 0) {
				sent += (size_t)k;
				continue;
			}
			if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
				rc = io_error(k, &x->dir, 0, x->err, x->errlen);
				goto out;
			}
			if (errno == EINTR)
				continue;
			struct pollfd p[2] = {{.fd = ofd, .events = POLLOUT},
					      {.fd = got < itotal ? ifd : -1, .events = POLLIN}};
			int r = poll(p, 2, x->timeout_ms > 0 ? x->timeout_ms : -1);
			if (r == 0) /* the peer has not read for that long */
				errno = EAGAIN;
			if (r == 0 || (r < 0 && errno != EINTR)) {
				rc = io_error(-1, &x->dir, 0, x->err, x->errlen);
				goto out;
			}
		}
	}
	return 0;
out:
	if (sent > 0 && sent < ototal && refused)
		flush_rest(x, sent, ototal);
	else
		x->torn = sent > 0 && sent < ototal;
	return rc;
}
