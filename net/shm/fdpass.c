/* fdpass.c - handing a memfd to the peer over a Unix-domain socket
 * (SCM_RIGHTS): a channel's, with one byte of data so that the message is
 * never empty, or a region's with its id and size (net/coll/stage_window.c),
 * or such data alone (a region forgotten). Not the socket's set-up: the caller's (a socketpair before a
 * fork, or a named socket after the authenticated TCP handshake).
 */
#include "net/shm/internal.h"
#include "net/util/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int hora_net_shm_fd_send_data(int sock, int fd, const void *data, size_t len, char *err, size_t errlen)
{
	struct iovec v = {.iov_base = (void *)data, .iov_len = len};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = fd < 0 ? NULL : u.buf,
			   .msg_controllen = fd < 0 ? 0 : sizeof(u.buf)};
	if (fd >= 0) { /* else data alone (hora_net_shm_fdmsg_recv) */
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	ssize_t k;
	do
		k = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	if (k != (ssize_t)len) {
		int e = k < 0 ? errno : EIO;
		shm_errf(err, errlen, "shm: passing an fd over socket %d: %s", sock, strerror(e));
		return -e;
	}
	return 0;
}

int hora_net_shm_fd_send(int sock, int fd, char *err, size_t errlen)
{
	const char byte = 'H';
	return hora_net_shm_fd_send_data(sock, fd, &byte, 1, err, errlen);
}

/* the rest of a message whose first bytes came with its fd (a stream
 * socket may split it; the sender wrote it in one go, so it is there) */
static int recv_rest(int sock, uint8_t *p, size_t left, char *err, size_t errlen)
{
	while (left) {
		ssize_t k = recv(sock, p, left, MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			shm_errf(err, errlen, "shm: a message with an fd on socket %d was cut short", sock);
			return -EPROTO;
		}
		p += k;
		left -= (size_t)k;
	}
	return 0;
}

static int recv_msg(int sock, int timeout_ms, int *fd, bool need_fd, void *data, size_t len, char *err,
		    size_t errlen)
{
	struct iovec v = {.iov_base = data, .iov_len = len};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	struct pollfd p = {.fd = sock, .events = POLLIN};
	const int64_t until = hora_clock_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
	int n, left = timeout_ms;
	/* a signal restarts the wait for what is left of it, not all of it (a
	 * profiler's SIGPROF would otherwise keep it from ever ending) */
	while ((n = poll(&p, 1, left < 0 ? -1 : left)) < 0 && errno == EINTR)
		if (timeout_ms >= 0 && (left = (int)(until - hora_clock_ms())) < 0)
			left = 0;
	if (n == 0) {
		shm_errf(err, errlen, "shm: no channel fd came over socket %d within %d ms", sock, timeout_ms);
		return -ETIMEDOUT;
	}
	if (n < 0) {
		int e = errno;
		shm_errf(err, errlen, "shm: waiting on socket %d for the channel's fd: %s", sock, strerror(e));
		return -e;
	}
	ssize_t k;
	do
		k = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (k < 0 && errno == EINTR);
	if (k <= 0) {
		int e = k < 0 ? errno : ECONNRESET;
		shm_errf(err, errlen, "shm: receiving the channel's fd over socket %d: %s", sock,
			 k < 0 ? strerror(e) : "the socket closed");
		return -e;
	}
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	*fd = -1;
	if (!need_fd && !cm) /* data alone: none sent, or one the kernel dropped (MSG_CTRUNC) */
		return recv_rest(sock, (uint8_t *)data + k, len - (size_t)k, err, errlen);
	if ((m.msg_flags & MSG_CTRUNC) || !cm || cm->cmsg_level != SOL_SOCKET ||
	    cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int))) {
		if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; CMSG_LEN((i + 1) * sizeof(int)) <= cm->cmsg_len; i++) {
				int got; /* fds that did come are ours to close */
				memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				close(got);
			}
		shm_errf(err, errlen, "shm: the message on socket %d carried no single fd", sock);
		return -EPROTO;
	}
	memcpy(fd, CMSG_DATA(cm), sizeof(int));
	int rc = recv_rest(sock, (uint8_t *)data + k, len - (size_t)k, err, errlen);
	if (rc) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

int hora_net_shm_fd_recv_data(int sock, int timeout_ms, int *fd, void *data, size_t len, char *err,
			      size_t errlen)
{
	return recv_msg(sock, timeout_ms, fd, true, data, len, err, errlen);
}

int hora_net_shm_fdmsg_recv(int sock, int timeout_ms, int *fd, void *data, size_t len, char *err, size_t errlen)
{
	return recv_msg(sock, timeout_ms, fd, false, data, len, err, errlen);
}

int hora_net_shm_fd_recv(int sock, int timeout_ms, int *fd, char *err, size_t errlen)
{
	char byte;
	return hora_net_shm_fd_recv_data(sock, timeout_ms, fd, &byte, 1, err, errlen);
}
