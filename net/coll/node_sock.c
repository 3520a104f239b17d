/* node_sock.c - the checked Unix sockets between the ranks of one host
 * (node.h): abstract names derived from the secret, connect to the lower
 * local ranks, accept the higher ones, SO_PEERCRED and a tag checked.
 */
#include "net/coll/node.h"
#include "net/util/clock.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- the sockets between the ranks of one host ---------------------------------- */

/* 16 bytes of H(domain || secret || view || a || b) */
static void derive(const struct hora_net_comm_cfg *cfg, const char *domain, const void *a, size_t alen,
		   uint32_t b, uint8_t out[16])
{
	crypto_generichash_state h;
	crypto_generichash_init(&h, NULL, 0, 16);
	crypto_generichash_update(&h, (const uint8_t *)domain, strlen(domain) + 1);
	crypto_generichash_update(&h, cfg->opts.secret, cfg->opts.secret_len);
	crypto_generichash_update(&h, (const uint8_t *)&cfg->opts.view, sizeof(cfg->opts.view));
	crypto_generichash_update(&h, a, alen);
	crypto_generichash_update(&h, (const uint8_t *)&b, sizeof(b));
	crypto_generichash_final(&h, out, 16);
}

/* "\0hora-<32 hex digits>" for rank r, whose nonce this create is */
static socklen_t sock_name(const struct hora_net_comm_cfg *cfg, int r, const uint8_t *nonce, struct sockaddr_un *sa)
{
	uint8_t h[16], in[256 + NODE_NONCE];
	const size_t al = strnlen(cfg->addrs[r], 256);
	memcpy(in, cfg->addrs[r], al);
	memcpy(in + al, nonce, NODE_NONCE);
	derive(cfg, "hora shm socket v2", in, al + NODE_NONCE, (uint32_t)r, h);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	char *p = sa->sun_path + 1;
	p += sprintf(p, "hora-");
	for (int i = 0; i < 16; i++)
		p += sprintf(p, "%02x", h[i]);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sa->sun_path));
}

int node_listen(const struct hora_net_comm_cfg *cfg, const uint8_t *nonce, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t sl = sock_name(cfg, cfg->rank, nonce, &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sl) || listen(fd, 256)) {
		int e = errno;
		snprintf(err, errlen, "rank %d: listening on its shared-memory socket (@%s): %s", cfg->rank,
			 sa.sun_path + 1, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	return fd;
}

/* what a connecting rank sends: its rank and the tag of (it, the acceptor) */
struct hello {
	uint32_t rank;
	uint8_t tag[16];
};

static int io_wait(int fd, short ev, int64_t deadline_ms)
{
	for (;;) {
		int64_t left = deadline_ms - hora_clock_ms();
		struct pollfd p = {.fd = fd, .events = ev};
		int k = poll(&p, 1, left > 0 ? (int)left : 0);
		if (k > 0)
			return 0;
		if (k == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* read exactly len bytes by deadline_ms */
static int read_all(int fd, void *buf, size_t len, int64_t deadline_ms)
{
	for (size_t got = 0; got < len;) {
		int rc = io_wait(fd, POLLIN, deadline_ms);
		if (rc)
			return rc;
		ssize_t k = read(fd, (uint8_t *)buf + got, len - got);
		if (k == 0)
			return -ECONNRESET;
		if (k < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		got += k > 0 ? (size_t)k : 0;
	}
	return 0;
}

/* the process at the other end of fd is local rank l's (the pid it
 * announced over the authenticated link, our uid) */
static bool peer_is(const struct node_map *m, int fd, int l, struct ucred *cr)
{
	socklen_t cl = sizeof(*cr);
	return !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &cl) && cr->pid == m->lpid[l] && cr->uid == getuid();
}

static int connect_lower(const struct hora_net_comm_cfg *cfg, const struct node_map *m, int *socks, char *err,
			 size_t errlen)
{
	for (int l = 0; l < m->lrank; l++) {
		const int r = m->local[l];
		struct sockaddr_un sa;
		struct ucred cr;
		socklen_t sl = sock_name(cfg, r, m->lnonce + (size_t)l * NODE_NONCE, &sa);
		struct hello h = {.rank = (uint32_t)cfg->rank};
		derive(cfg, "hora shm hello v1", &h.rank, sizeof(h.rank), (uint32_t)r, h.tag);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sl) || write(fd, &h, sizeof(h)) != sizeof(h)) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			return snprintf(err, errlen, "rank %d: connecting to rank %d's shared-memory socket: %s",
					cfg->rank, r, strerror(e)),
			       -e;
		}
		if (!peer_is(m, fd, l, &cr)) { /* someone else holds the name */
			close(fd);
			return snprintf(err, errlen, "rank %d: rank %d's shared-memory socket is held by pid %d uid %d, "
						     "not by rank %d (pid %d)", cfg->rank, r, (int)cr.pid, (int)cr.uid, r,
					(int)m->lpid[l]), -EACCES;
		}
		socks[l] = fd;
	}
	return 0;
}

/* The higher local rank a connection comes from. Its credentials first,
 * before anything it sent: a connection from no process of a higher rank
 * of ours (a stranger) is dropped unread, so it can neither hold us up nor
 * fail the create (-1). Then its hello: the rank it says, whose pid must
 * be the connection's (ranks that are threads of one process share it),
 * and the tag only that rank can make; a wrong one fails the create (-2). */
static int check_hello(const struct hora_net_comm_cfg *cfg, const struct node_map *m, int fd, const int *socks,
		       int64_t deadline_ms, char *why, size_t len)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	int l = m->lrank + 1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl))
		return -1;
	while (l < m->nlocal && (cr.pid != m->lpid[l] || cr.uid != getuid()))
		l++;
	if (l == m->nlocal)
		return -1;
	struct hello h;
	if (read_all(fd, &h, sizeof(h), deadline_ms))
		return snprintf(why, len, "pid %d (a rank of this host) sent no hello", (int)cr.pid), -2;
	for (l = m->lrank + 1; l < m->nlocal && m->local[l] != (int)h.rank; l++)
		;
	uint8_t tag[16];
	derive(cfg, "hora shm hello v1", &h.rank, sizeof(h.rank), (uint32_t)cfg->rank, tag);
	if (l == m->nlocal || socks[l] >= 0 || !peer_is(m, fd, l, &cr) || sodium_memcmp(tag, h.tag, 16))
		return snprintf(why, len, "pid %d sent a hello for rank %u that is not its own, came twice, or "
					  "does not know the secret", (int)cr.pid, h.rank), -2;
	return l;
}

static int accept_higher(const struct hora_net_comm_cfg *cfg, const struct node_map *m, int lfd, int *socks,
			 int64_t deadline_ms, char *err, size_t errlen)
{
	for (int want = m->nlocal - 1 - m->lrank; want > 0;) {
		int rc = io_wait(lfd, POLLIN, deadline_ms);
		if (rc)
			return snprintf(err, errlen, "rank %d: %d higher rank(s) of this host did not connect to its "
						     "shared-memory socket within %d ms", cfg->rank, want,
					cfg->connect_timeout_ms), rc;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		char why[200];
		int l = check_hello(cfg, m, fd, socks, deadline_ms, why, sizeof(why));
		uint8_t ack = 1;
		if (l == -1) { /* not one of our ranks: dropped, we go on waiting */
			close(fd);
			continue;
		}
		if (l < 0 || write(fd, &ack, 1) != 1) {
			close(fd);
			return snprintf(err, errlen, "rank %d: its shared-memory socket: %s", cfg->rank,
					l < 0 ? why : "the ack did not leave"), -EACCES;
		}
		socks[l] = fd;
		want--;
	}
	return 0;
}

int node_connect(const struct hora_net_comm_cfg *cfg, const struct node_map *m, int lfd, int *socks,
		 char *err, size_t errlen)
{
	const int64_t deadline = hora_clock_ms() + cfg->connect_timeout_ms;
	for (int l = 0; l < m->nlocal; l++)
		socks[l] = -1;
	int rc = connect_lower(cfg, m, socks, err, errlen);
	if (!rc)
		rc = accept_higher(cfg, m, lfd, socks, deadline, err, errlen);
	close(lfd);
	for (int l = 0; l < m->lrank && !rc; l++) { /* the lower ranks' acks */
		uint8_t ack = 0;
		if ((rc = read_all(socks[l], &ack, 1, deadline)) || ack != 1)
			rc = rc ? rc : -EACCES,
			snprintf(err, errlen, "rank %d: rank %d refused or dropped its shared-memory socket (%s; "
					      "its error says why)", cfg->rank, m->local[l], strerror(-rc));
	}
	if (rc)
		for (int l = 0; l < m->nlocal; l++)
			if (socks[l] >= 0)
				close(socks[l]), socks[l] = -1;
	return rc;
}
