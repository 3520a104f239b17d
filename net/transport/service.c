/* service.c - what the loop offers the layers above it (membership today):
 * calls run on the comm thread, one-shot timers and UDP sockets whose
 * datagrams arrive by callback, all as ops on the loop's ring. A UDP socket
 * can also report, by callback, the ICMP "port unreachable" a host answered
 * to one of its datagrams (IP_RECVERR, read from the error queue after each
 * receive completes): proof that nothing listens there any more.
 *
 * The loop keeps no state of its users: a timer or a datagram socket is a
 * handle with a callback and an argument. Closing one while its op is in
 * the kernel cancels the op and frees the handle when the op's CQE comes
 * back (the kernel may still write into its buffer until then); whatever is
 * still open when the loop is destroyed is freed with it.
 *
 * Not here: TCP peers (peer.c, conn.c) and the ring itself (loop.c).
 */
#include "net/transport/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct hora_net_timer {
	struct op op;
	struct hora_net_loop *loop;
	struct hora_net_timer *next; /* loop->timers */
	hora_net_timer_fn fn;        /* NULL once destroyed */
	void *arg;
	struct __kernel_timespec ts;
	int inflight; /* timeout ops in the kernel (an armed one and its removal) */
	bool armed;
};

struct hora_net_dgram {
	struct op op;
	struct hora_net_loop *loop;
	struct hora_net_dgram *next; /* loop->dgrams */
	int fd;
	hora_net_dgram_fn fn; /* NULL once closed */
	hora_net_dgram_refused_fn refused; /* NULL: errors are not read */
	void *arg;
	bool armed;
	bool in_cb; /* fn is running: a close there only marks it (on_dgram frees) */
	struct msghdr msg;
	struct iovec iov;
	struct sockaddr_in from;
	size_t cap;
	uint8_t buf[]; /* cap bytes */
};

/* ---- calls ------------------------------------------------------------------------ */

int hora_net_loop_call(struct hora_net_loop *loop, hora_net_call_fn fn, void *arg)
{
	if (hora_net_on_loop(loop)) {
		fn(arg);
		return 0;
	}
	struct cmd *c = calloc(1, sizeof(*c));
	struct hora_net_req *r = hora_net_sync_req();
	if (!c || !r) {
		free(c);
		free(r);
		return -ENOMEM;
	}
	c->kind = CMD_CALL;
	c->fn = fn;
	c->arg = arg;
	char err[128];
	return hora_net_sync_wait(loop, c, r, err, sizeof(err));
}

const uint8_t *hora_net_loop_secret(const struct hora_net_loop *loop, size_t *len)
{
	*len = loop->o.secret_len;
	return loop->o.secret;
}

/* ---- timers ------------------------------------------------------------------------ */

static void unlink_timer(struct hora_net_timer *t)
{
	for (struct hora_net_timer **pp = &t->loop->timers; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	free(t);
}

static void on_timer(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	struct hora_net_timer *t = (struct hora_net_timer *)op;
	t->inflight--;
	if (!t->fn) {
		if (!t->inflight)
			unlink_timer(t);
		return;
	}
	if (t->inflight) /* a re-arm replaced this op: the newer one is pending */
		return;
	t->armed = false;
	if (cqe->res != -ECANCELED && !loop->stopping)
		t->fn(t->arg);
}

int hora_net_timer_create(struct hora_net_loop *loop, hora_net_timer_fn fn, void *arg,
			  struct hora_net_timer **out)
{
	struct hora_net_timer *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->op.fn = on_timer;
	t->loop = loop;
	t->fn = fn;
	t->arg = arg;
	t->next = loop->timers;
	loop->timers = t;
	*out = t;
	return 0;
}

/* Ask the kernel to drop t's armed timeout (its CQE then says -ECANCELED). */
static void remove_timeout(struct hora_net_timer *t)
{
	struct io_uring_sqe *sqe = hora_net_sqe(t->loop);
	io_uring_prep_timeout_remove(sqe, (__u64)(uintptr_t)&t->op, 0);
	io_uring_sqe_set_data(sqe, NULL);
	t->armed = false;
}

void hora_net_timer_arm(struct hora_net_timer *t, int ms)
{
	if (t->armed)
		remove_timeout(t);
	if (ms < 0)
		ms = 0;
	t->ts.tv_sec = ms / 1000;
	t->ts.tv_nsec = (long long)(ms % 1000) * 1000000;
	struct io_uring_sqe *sqe = hora_net_sqe(t->loop);
	io_uring_prep_timeout(sqe, &t->ts, 0, 0);
	io_uring_sqe_set_data(sqe, &t->op);
	t->armed = true;
	t->inflight++;
}

void hora_net_timer_destroy(struct hora_net_timer *t)
{
	if (!t)
		return;
	t->fn = NULL;
	if (t->armed)
		remove_timeout(t);
	if (!t->inflight)
		unlink_timer(t);
}

/* ---- datagrams ---------------------------------------------------------------------- */

static void free_dgram(struct hora_net_dgram *d)
{
	for (struct hora_net_dgram **pp = &d->loop->dgrams; *pp; pp = &(*pp)->next)
		if (*pp == d) {
			*pp = d->next;
			break;
		}
	if (d->fd >= 0)
		close(d->fd);
	free(d);
}

static void arm_recv(struct hora_net_dgram *d)
{
	struct io_uring_sqe *sqe = hora_net_sqe(d->loop);
	d->iov.iov_base = d->buf;
	d->iov.iov_len = d->cap;
	memset(&d->msg, 0, sizeof(d->msg));
	d->msg.msg_name = &d->from;
	d->msg.msg_namelen = sizeof(d->from);
	d->msg.msg_iov = &d->iov;
	d->msg.msg_iovlen = 1;
	io_uring_prep_recvmsg(sqe, d->fd, &d->msg, 0);
	io_uring_sqe_set_data(sqe, &d->op);
	d->armed = true;
}

/* Read the socket's error queue (non-blocking) and report each ICMP port
 * unreachable with the destination of the datagram that caused it. A
 * completion that leaves no datagram queued drains it, so errors neither
 * pile up nor keep the socket readable for poll (EPOLLERR) with nothing to
 * receive; while datagrams are queued they go first: a member's LEAVE
 * sent before its socket closed is read before the refusal of a probe
 * sent after. */
static void read_errors(struct hora_net_dgram *d)
{
	int queued = 0;
	if (ioctl(d->fd, FIONREAD, &queued) == 0 && queued > 0)
		return; /* the next completion comes at once */
	for (int k = 0; k < 64 && d->fn; k++) {
		struct sockaddr_in to;
		uint8_t data[64];
		union {
			struct cmsghdr align;
			char b[CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in))];
		} ctl;
		struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
		struct msghdr mh = {.msg_name = &to, .msg_namelen = sizeof(to), .msg_iov = &iov,
				    .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
		memset(&to, 0, sizeof(to));
		if (recvmsg(d->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return; /* EAGAIN: empty */
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR)
				continue;
			struct sock_extended_err ee;
			struct sockaddr_in off;
			memcpy(&ee, CMSG_DATA(c), sizeof(ee));
			memcpy(&off, SO_EE_OFFENDER((struct sock_extended_err *)CMSG_DATA(c)), sizeof(off));
			/* from the destination host itself: a router's or a middlebox's
			 * REJECT (another address) proves nothing about the process */
			if (ee.ee_origin == SO_EE_ORIGIN_ICMP && ee.ee_type == ICMP_DEST_UNREACH &&
			    ee.ee_code == ICMP_PORT_UNREACH && to.sin_family == AF_INET &&
			    off.sin_family == AF_INET && off.sin_addr.s_addr == to.sin_addr.s_addr) {
				d->in_cb = true;
				d->refused(d->arg, &to);
				d->in_cb = false;
			}
		}
	}
}

static void on_dgram(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	struct hora_net_dgram *d = (struct hora_net_dgram *)op;
	d->armed = false;
	if (!d->fn) {
		free_dgram(d);
		return;
	}
	if (loop->stopping)
		return;
	if (cqe->res > 0 && d->from.sin_family == AF_INET) {
		d->in_cb = true;
		d->fn(d->arg, &d->from, d->buf, (size_t)cqe->res);
		d->in_cb = false;
	}
	if (d->fn && d->refused)
		read_errors(d);
	if (d->fn) /* the callback may have closed it */
		arm_recv(d);
	else
		free_dgram(d);
}

int hora_net_dgram_open(struct hora_net_loop *loop, const struct sockaddr_in *addr,
			size_t max_bytes, hora_net_dgram_fn fn, void *arg, struct sockaddr_in *bound,
			struct hora_net_dgram **out, char *err, size_t errlen)
{
	struct hora_net_dgram *d = calloc(1, sizeof(*d) + max_bytes);
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || hora_net_bind_retry(fd, (const struct sockaddr *)addr, sizeof(*addr))) {
		int e = errno;
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &addr->sin_addr, ip, sizeof(ip));
		snprintf(err, errlen, "bind UDP %s:%u: %s", ip, ntohs(addr->sin_port), strerror(e));
		if (fd >= 0)
			close(fd);
		free(d);
		return -e;
	}
	if (bound) {
		socklen_t bl = sizeof(*bound);
		getsockname(fd, (struct sockaddr *)bound, &bl);
	}
	d->op.fn = on_dgram;
	d->loop = loop;
	d->fd = fd;
	d->fn = fn;
	d->arg = arg;
	d->cap = max_bytes;
	d->next = loop->dgrams;
	loop->dgrams = d;
	arm_recv(d);
	*out = d;
	return 0;
}

int hora_net_dgram_send(struct hora_net_dgram *d, const struct sockaddr_in *to, const void *buf,
			size_t len)
{
	for (int k = 0; k < 2; k++) {
		if (sendto(d->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to,
			   sizeof(*to)) >= 0)
			return 0;
		/* with IP_RECVERR, an ICMP error that came back for an earlier
		 * datagram fails the next send once (and stays on the error
		 * queue, for read_errors): not this datagram's, so send it again */
		if (!d->refused || (errno != ECONNREFUSED && errno != EHOSTUNREACH && errno != ENETUNREACH))
			break;
	}
	return -errno;
}

void hora_net_dgram_read_errors(struct hora_net_dgram *d)
{
	if (!d || !d->fn || !d->refused || d->in_cb)
		return;
	read_errors(d);
	if (!d->fn) /* closed by its refusal callback: only marked there */
		hora_net_dgram_close(d);
}

int hora_net_dgram_on_refused(struct hora_net_dgram *d, hora_net_dgram_refused_fn fn)
{
	const int on = 1;
	if (setsockopt(d->fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)))
		return -errno;
	d->refused = fn;
	return 0;
}

void hora_net_dgram_close(struct hora_net_dgram *d)
{
	if (!d)
		return;
	d->fn = NULL;
	if (d->in_cb) /* on_dgram frees it when the callback returns */
		return;
	if (!d->armed) {
		free_dgram(d);
		return;
	}
	struct io_uring_sqe *sqe = hora_net_sqe(d->loop); /* its CQE frees d */
	io_uring_prep_cancel(sqe, &d->op, 0);
	io_uring_sqe_set_data(sqe, NULL);
}

void hora_net_service_free_all(struct hora_net_loop *loop)
{
	while (loop->timers) {
		struct hora_net_timer *t = loop->timers;
		loop->timers = t->next;
		free(t);
	}
	while (loop->dgrams) {
		struct hora_net_dgram *d = loop->dgrams;
		loop->dgrams = d->next;
		if (d->fd >= 0)
			close(d->fd);
		free(d);
	}
}
