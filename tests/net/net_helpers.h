/* net_helpers.h - loops, peers and raw sockets for the transport tests. */
#ifndef HORA_TEST_NET_HELPERS_H
#define HORA_TEST_NET_HELPERS_H

#include "net/transport/handshake.h"
#include "net/transport/frame.h"
#include "net/transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_SECRET "test-cluster-secret-0123456789"

static inline struct hora_net_loop *tn_loop(int sockets, uint32_t node,
					    void (*tweak)(struct hora_net_opts *))
{
	struct hora_net_opts o;
	hora_net_opts_default(&o);
	o.sockets_per_peer = sockets;
	o.node_id = node;
	o.secret = (const uint8_t *)TEST_SECRET;
	o.secret_len = strlen(TEST_SECRET);
	if (tweak)
		tweak(&o);
	struct hora_net_loop *l;
	char err[256];
	int rc = hora_net_loop_create(&o, &l, err, sizeof(err));
	cr_assert_eq(rc, 0, "loop: %s", err);
	return l;
}

/* A connected, authenticated pair of peers over loopback. */
static inline void tn_pair(struct hora_net_loop *srv, struct hora_net_loop *cli, uint16_t *port,
			   struct hora_net_peer **ps, struct hora_net_peer **pc)
{
	char err[256];
	if (*port == 0)
		cr_assert_eq(hora_net_listen(srv, "127.0.0.1", 0, port, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_connect(cli, "127.0.0.1", *port, 5000, pc, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(hora_net_accept(srv, 5000, ps, err, sizeof(err)), 0, "%s", err);
}

/* Two loops and one authenticated peer between them. */
struct tn_env {
	struct hora_net_loop *a, *b;
	struct hora_net_peer *pa, *pb; /* pa: a's view of b, pb: b's view of a */
};

static inline struct tn_env tn_up(int sockets, void (*tweak_a)(struct hora_net_opts *),
				  void (*tweak_b)(struct hora_net_opts *))
{
	struct tn_env e = {tn_loop(sockets, 1, tweak_a), tn_loop(sockets, 2, tweak_b), NULL, NULL};
	uint16_t port = 0;
	tn_pair(e.a, e.b, &port, &e.pa, &e.pb);
	return e;
}

static inline void tn_down(struct tn_env *e)
{
	hora_net_peer_close(e->pa);
	hora_net_peer_close(e->pb);
	hora_net_loop_destroy(e->a);
	hora_net_loop_destroy(e->b);
}

/* A blocking raw TCP socket to 127.0.0.1:port (for misbehaving clients). */
static inline int tn_raw(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = {5, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static inline int tn_read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* Run the client side of the handshake by hand on a raw socket with the
 * given secret, as stripe `stripe` of `nstripes` of session 0x1234. Returns
 * the state machine's final result (1 = accepted). */
static inline int tn_raw_handshake_stripe(int fd, const char *secret, struct hora_net_hs *hs,
					  uint16_t stripe, uint16_t nstripes, uint8_t *hello_out,
					  uint8_t *auth_out)
{
	uint8_t out[HORA_NET_HS_MAX_OUT], in[HORA_NET_CHALLENGE_BYTES];
	size_t n;
	cr_assert_eq(hora_net_hs_client_start(hs, (const uint8_t *)secret, strlen(secret), 99, 0x1234,
					      stripe, nstripes, out, &n),
		     0);
	if (hello_out)
		memcpy(hello_out, out, n);
	if (write(fd, out, n) != (ssize_t)n)
		return -1;
	while (hora_net_hs_want(hs)) {
		size_t want = hora_net_hs_want(hs);
		if (tn_read_full(fd, in, want))
			return -2;
		int rc = hora_net_hs_input(hs, in, want, out, &n);
		if (n && auth_out && n == HORA_NET_AUTH_BYTES)
			memcpy(auth_out, out, n);
		if (n && write(fd, out, n) != (ssize_t)n)
			return -1;
		if (rc)
			return rc;
	}
	return 1;
}

static inline int tn_raw_handshake(int fd, const char *secret, struct hora_net_hs *hs,
				   uint8_t *hello_out, uint8_t *auth_out)
{
	return tn_raw_handshake_stripe(fd, secret, hs, 0, 1, hello_out, auth_out);
}

/* A server loop's peer whose other end is a raw authenticated socket (*fd)
 * that the test writes frames to by hand. */
static inline struct hora_net_peer *tn_raw_peer(struct hora_net_loop *srv, int *fd)
{
	uint16_t port;
	char err[256];
	cr_assert_eq(hora_net_listen(srv, "127.0.0.1", 0, &port, err, sizeof(err)), 0, "%s", err);
	*fd = tn_raw(port);
	struct hora_net_hs hs;
	cr_assert_eq(tn_raw_handshake(*fd, TEST_SECRET, &hs, NULL, NULL), 1);
	struct hora_net_peer *ps;
	cr_assert_eq(hora_net_accept(srv, 5000, &ps, err, sizeof(err)), 0, "%s", err);
	return ps;
}

static inline void tn_write_all(int fd, const void *p, size_t n)
{
	for (size_t w = 0; w < n;) {
		ssize_t r = write(fd, (const uint8_t *)p + w, n - w);
		cr_assert_gt(r, 0, "write: %s", strerror(errno));
		w += (size_t)r;
	}
}

/* the header of a one-frame data message of len bytes, number seq */
static inline void tn_write_hdr(int fd, uint64_t seq, uint64_t len, uint32_t flags, uint32_t crc)
{
	struct hora_net_hdr h = {.magic = HORA_NET_MAGIC, .version = 1, .type = HORA_NET_T_DATA,
				 .flags = flags, .seq = seq, .msg_len = len, .offset = 0, .length = len,
				 .crc32c = crc};
	uint8_t hb[HORA_NET_HDR_BYTES];
	hora_net_hdr_encode(&h, hb);
	tn_write_all(fd, hb, sizeof(hb));
}

static inline void tn_fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		memcpy(p + i, &s, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)(s >> (8 * (i % 8)));
}

#endif
