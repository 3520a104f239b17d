/* test_fast.c - the small-message channel's exchange (net/coll/fast.h) when the
 * receive fails while our own message is still going out: the rest goes
 * first, so that what follows (an ABORT) is not read as message bytes; when
 * it cannot go, the stream is reported torn. */
#include "net/coll/fast.h"

#include <criterion/criterion.h>
#include <errno.h>
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
