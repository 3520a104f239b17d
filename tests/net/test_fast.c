/* test_fast.c - the small-message channel's exchange (net/coll/fast.h) when the
 * receive fails while our own message is still going out: the rest goes
 * first, so that what follows (an ABORT) is not read as message bytes; when
 * it cannot go, the stream is reported torn. Setting it up: idle
 * connections on the listener hold up no real peer, and a handshake cut off
 * is tried again. */
#include "net/coll/fast.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD 32
#define BODY (4u << 20) /* far more than a socket buffer holds */

static int refuse(void *arg, const void *h)
{
	(void)arg;
	(void)h;
	return -EBADE; /* as a mismatched fingerprint does */
}

struct reader {
	int fd, delay_ms;
	uint8_t *got;
	size_t want, have;
};

static void *read_all(void *p)
{
	struct reader *r = p;
	usleep((useconds_t)r->delay_ms * 1000);
	while (r->have < r->want) {
		ssize_t k = read(r->fd, r->got + r->have, r->want - r->have);
		if (k <= 0)
			break;
		r->have += (size_t)k;
	}
	return NULL;
}

/* out: our message goes to out[0] and is read at out[1]; in: a head that
 * fails the check waits on in[0] */
static void pairs(int out[2], int in[2])
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, out), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, in), 0);
	uint8_t other[HEAD];
	memset(other, 0x5a, sizeof(other));
	cr_assert_eq(write(in[1], other, sizeof(other)), (ssize_t)sizeof(other));
}

static int exchange(int out[2], int in[2], const uint8_t *head, const uint8_t *body, int timeout_ms,
		    int *dir, int *torn)
{
	uint8_t ihead[HEAD], ibody[8];
	char err[128];
	struct hora_net_fast_xchg x = {.out_fd = out[0], .out_head = head, .out_body = body, .out_bytes = BODY,
				       .in_fd = in[0], .in_head = ihead, .in_body = ibody,
				       .in_bytes = sizeof(ibody), .head_bytes = HEAD, .check = refuse,
				       .timeout_ms = timeout_ms, .err = err, .errlen = sizeof(err)};
	int rc = hora_net_fast_xchg(&x);
	*dir = x.dir;
	*torn = x.torn;
	return rc;
}

static void close_pairs(int out[2], int in[2])
{
	for (int k = 0; k < 2; k++) {
		close(out[k]);
		close(in[k]);
	}
}

Test(net_fast, a_receive_failing_mid_send_finishes_the_message_first, .timeout = 30)
{
	int out[2], in[2], dir = -1, torn = -1;
	uint8_t head[HEAD], *body = malloc(BODY);
	memset(head, 0x11, sizeof(head));
	for (size_t i = 0; i < BODY; i++)
		body[i] = (uint8_t)(i * 7 + 3);
	const char mark[8] = "ABORT..";
	pairs(out, in);
	/* the reader starts late: when the check fails, most of the body is
	 * still to go */
	struct reader r = {.fd = out[1], .delay_ms = 100, .want = HEAD + BODY + sizeof(mark)};
	r.got = malloc(r.want);
	pthread_t th;
	pthread_create(&th, NULL, read_all, &r);
	int rc = exchange(out, in, head, body, 5000, &dir, &torn);
	cr_assert_eq(rc, -EBADE);
	cr_assert_eq(dir, 1, "the failure was on the receive side");
	cr_assert_eq(torn, 0, "the message was not finished");
	cr_assert_eq(write(out[0], mark, sizeof(mark)), (ssize_t)sizeof(mark)); /* what fail() sends next */
	pthread_join(th, NULL);
	cr_assert_eq(r.have, r.want);
	cr_assert_eq(memcmp(r.got, head, HEAD), 0);
	cr_assert_eq(memcmp(r.got + HEAD, body, BODY), 0, "the message's body arrived changed");
	cr_assert_eq(memcmp(r.got + HEAD + BODY, mark, sizeof(mark)), 0, "what followed is not intact");
	free(r.got);
	free(body);
	close_pairs(out, in);
}

Test(net_fast, a_message_that_cannot_be_finished_is_reported_torn, .timeout = 30)
{
	int out[2], in[2], dir = -1, torn = -1;
	uint8_t head[HEAD] = {0}, *body = calloc(1, BODY);
	pairs(out, in);
	/* nobody reads out[1]: the rest cannot go within the 200 ms timeout */
	int rc = exchange(out, in, head, body, 200, &dir, &torn);
	cr_assert_eq(rc, -EBADE);
	cr_assert_eq(dir, 1);
	cr_assert_eq(torn, 1, "a message cut short must be reported");
	free(body);
	close_pairs(out, in);
}

/* ---- setting the channel up (issue 13, start-up): idle connections on the
 * listener and handshakes cut off ---- */

#define KEY "fast-test-cluster-secret-0123456789"

static int raw_connect(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

struct client {
	uint16_t port;
	uint32_t node;
	int fd, rc;
	char err[256];
};

static void *client_main(void *p)
{
	struct client *c = p;
	c->rc = hora_net_fast_connect("127.0.0.1", c->port, (const uint8_t *)KEY, strlen(KEY), c->node,
				      5000, 0, &c->fd, c->err, sizeof(c->err), NULL);
	return NULL;
}

Test(net_fast, idle_connections_do_not_hold_up_the_accept, .timeout = 30)
{
	int lfd, idle[20];
	uint16_t port;
	char err[512];
	cr_assert_eq(hora_net_fast_listen("127.0.0.1", &lfd, &port, err, sizeof(err)), 0, "%s", err);
	for (int i = 0; i < 20; i++) /* in the backlog before the real peers */
		idle[i] = raw_connect(port);
	struct client c[2] = {{.port = port, .node = 1}, {.port = port, .node = 2}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, client_main, &c[i]);
	int fds[2];
	uint32_t nodes[2];
	int rc = hora_net_fast_accept(lfd, (const uint8_t *)KEY, strlen(KEY), 0, 3000, 0, 2, fds, nodes,
				      err, sizeof(err), NULL);
	cr_assert_eq(rc, 0, "2 real peers behind 20 idle connections: %s", err);
	cr_assert_eq(nodes[0] + nodes[1], 3);
	cr_assert_neq(nodes[0], nodes[1]);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(c[i].rc, 0, "client %d: %s", i, c[i].err);
		close(c[i].fd);
		close(fds[i]);
	}
	for (int i = 0; i < 20; i++)
		close(idle[i]);
	close(lfd);
}

Test(net_fast, a_handshake_cut_off_is_tried_again, .timeout = 30)
{
	int lfd;
	uint16_t port;
	char err[512];
	cr_assert_eq(hora_net_fast_listen("127.0.0.1", &lfd, &port, err, sizeof(err)), 0, "%s", err);
	struct client c = {.port = port, .node = 1};
	pthread_t th;
	pthread_create(&th, NULL, client_main, &c);
	struct pollfd pf = {.fd = lfd, .events = POLLIN};
	cr_assert_eq(poll(&pf, 1, 5000), 1, "the client did not connect");
	int fd = accept(lfd, NULL, NULL); /* the HELLO, then hung up on */
	uint8_t hello[64];
	size_t got = 0;
	while (got < sizeof(hello)) {
		ssize_t k = read(fd, hello + got, sizeof(hello) - got);
		cr_assert_gt(k, 0);
		got += (size_t)k;
	}
	close(fd);
	int afd;
	uint32_t node;
	int rc = hora_net_fast_accept(lfd, (const uint8_t *)KEY, strlen(KEY), 0, 3000, 0, 1, &afd, &node,
				      err, sizeof(err), NULL);
	cr_assert_eq(rc, 0, "the client did not try again: %s", err);
	cr_assert_eq(node, 1);
	pthread_join(th, NULL);
	cr_assert_eq(c.rc, 0, "connect: %s", c.err);
	close(c.fd);
	close(afd);
	close(lfd);
}
