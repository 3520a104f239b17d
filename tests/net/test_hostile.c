/* test_hostile.c - bad input on the wire while a good transfer runs.
 *
 * One server loop; a good client moves 4 x 32 MiB of random data to it and
 * checks it bit for bit, while another thread throws at the same listener:
 * random bytes, a version-3 HELLO, a forged AUTH (wrong secret), a replayed
 * handshake, an authenticated peer that sends a truncated frame, one that
 * sends a length of 2^63, a silent client (slow-loris) and 200 connections
 * at once. Each is refused or closed and logged (rate-limited); the good
 * transfer completes. stderr is captured to check the log lines.
 */
#include "net_helpers.h"
#include "../helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static void tweak(struct hora_net_opts *o)
{
	o->handshake_timeout_ms = 500;
	o->max_pending_handshakes = 64;
}

static uint16_t port;
static struct hora_net_loop *srv;

/* read until EOF/error; returns bytes read before it (the REJECT, if any) */
static ssize_t drain(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;
	for (;;) {
		ssize_t r = read(fd, buf + got, cap - got);
		if (r <= 0)
			return r < 0 && errno == EAGAIN ? -1 : (ssize_t)got;
		got += (size_t)r;
		if (got == cap)
			return (ssize_t)got;
	}
}

static void send_all(int fd, const void *p, size_t n)
{
	cr_assert_eq(write(fd, p, n), (ssize_t)n);
}

static void *attacker(void *arg)
{
	(void)arg;
	uint8_t buf[256], junk[4096];
	struct hora_net_hs hs;

	/* 1. random bytes */
	int fd = tn_raw(port);
	tn_fill(junk, sizeof(junk), 1);
	send_all(fd, junk, sizeof(junk));
	ssize_t n = drain(fd, buf, sizeof(buf));
	cr_assert(n >= 0 && n <= 8, "random bytes: connection not closed (%zd)", n);
	close(fd);

	/* 2. a client speaking protocol version 3 */
	fd = tn_raw(port);
	uint8_t hello[HORA_NET_HELLO_BYTES];
	size_t hl;
	hora_net_hs_client_start(&hs, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 5, 9, 0, 1,
				 hello, &hl);
	hello[4] = 3;
	send_all(fd, hello, hl);
	n = drain(fd, buf, sizeof(buf));
	cr_assert_eq(n, HORA_NET_RESULT_BYTES, "version: expected a REJECT");
	cr_assert_eq(buf[6], HORA_NET_REJ_VERSION);
	close(fd);

	/* 3. wrong secret: the client cannot prove itself; a forged AUTH */
	fd = tn_raw(port);
	hora_net_hs_client_start(&hs, (const uint8_t *)"not-the-secret-at-all!", 22, 5, 9, 0, 1, hello, &hl);
	send_all(fd, hello, hl);
	cr_assert_eq(tn_read_full(fd, buf, HORA_NET_CHALLENGE_BYTES), 0);
	uint8_t fake[HORA_NET_AUTH_BYTES] = {0x41, 0x52, 0x4f, 0x48, 1, 0x12};
	send_all(fd, fake, sizeof(fake));
	n = drain(fd, buf, sizeof(buf));
	cr_assert_eq(n, HORA_NET_RESULT_BYTES);
	cr_assert_eq(buf[6], HORA_NET_REJ_AUTH);
	close(fd);

	/* 4. replay: record a good handshake, replay it on a new connection */
	uint8_t rec_hello[HORA_NET_HELLO_BYTES], rec_auth[HORA_NET_AUTH_BYTES];
	fd = tn_raw(port);
	cr_assert_eq(tn_raw_handshake(fd, TEST_SECRET, &hs, rec_hello, rec_auth), 1);
	int good_fd = fd; /* authenticated; used for 5. */
	fd = tn_raw(port);
	send_all(fd, rec_hello, sizeof(rec_hello));
	cr_assert_eq(tn_read_full(fd, buf, HORA_NET_CHALLENGE_BYTES), 0);
	send_all(fd, rec_auth, sizeof(rec_auth));
	n = drain(fd, buf, sizeof(buf));
	cr_assert_eq(n, HORA_NET_RESULT_BYTES, "replay: expected a REJECT");
	cr_assert_eq(buf[6], HORA_NET_REJ_AUTH);
	close(fd);

	/* 5. authenticated, then a truncated frame: header promises 1000 bytes */
	struct hora_net_hdr h = {.magic = HORA_NET_MAGIC, .version = 1, .type = HORA_NET_T_DATA,
				 .seq = 0, .msg_len = 1000, .offset = 0, .length = 1000};
	uint8_t hb[HORA_NET_HDR_BYTES];
	hora_net_hdr_encode(&h, hb);
	send_all(good_fd, hb, sizeof(hb));
	send_all(good_fd, junk, 10);
	close(good_fd);

	/* 6. authenticated, then a length of 2^63 */
	fd = tn_raw(port);
	cr_assert_eq(tn_raw_handshake(fd, TEST_SECRET, &hs, NULL, NULL), 1);
	h.msg_len = h.length = 1ull << 63;
	hora_net_hdr_encode(&h, hb);
	send_all(fd, hb, sizeof(hb));
	n = drain(fd, buf, sizeof(buf));
	cr_assert(n >= 0, "2^63: connection not closed");
	close(fd);

	usleep(1100 * 1000); /* next log window */

	/* 7. slow-loris: connect, say nothing; closed after the deadline */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fd = tn_raw(port);
	n = drain(fd, buf, sizeof(buf));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	cr_assert_eq(n, 0, "slow-loris: not closed");
	cr_assert(waited > 0.4 && waited < 3.0, "slow-loris closed after %.2f s (deadline 0.5 s)",
		  waited);
	close(fd);

	/* 8. 200 connections at once, all silent */
	int fds[200];
	for (int i = 0; i < 200; i++)
		fds[i] = tn_raw(port);
	int closed = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 200; i++) {
		struct pollfd pfd = {.fd = fds[i], .events = POLLIN};
		if (poll(&pfd, 1, 5000) == 1 && drain(fds[i], buf, sizeof(buf)) >= 0)
			closed++;
		close(fds[i]);
	}
	cr_assert_eq(closed, 200, "only %d of 200 silent connections were closed", closed);
	return NULL;
}

Test(net_hostile, bad_inputs_while_a_good_transfer_runs, .timeout = 120)
{
	int lfd;
	char *logpath = th_tmpfile("hora-hostile-log", &lfd); /* this test's stderr */
	fflush(stderr);
	dup2(lfd, STDERR_FILENO);

	srv = tn_loop(1, 1, tweak);
	struct hora_net_loop *cli = tn_loop(2, 2, tweak);
	char err[256];
	cr_assert_eq(hora_net_listen(srv, "127.0.0.1", 0, &port, err, sizeof(err)), 0, "%s", err);
	struct hora_net_peer *pc, *ps;
	cr_assert_eq(hora_net_connect(cli, "127.0.0.1", port, 5000, &pc, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_accept(srv, 5000, &ps, err, sizeof(err)), 0, "%s", err);

	pthread_t th;
	pthread_create(&th, NULL, attacker, NULL);

	const size_t sz = 32 << 20;
	uint8_t *src = malloc(sz), *dst = malloc(sz);
	for (int m = 0; m < 4; m++) {
		tn_fill(src, sz, 100 + (uint64_t)m);
		struct hora_net_req *rs, *rr;
		cr_assert_eq(hora_net_irecv(ps, dst, sz, NULL, NULL, &rr), 0);
		cr_assert_eq(hora_net_isend(pc, src, sz, NULL, NULL, &rs), 0);
		cr_assert_eq(hora_net_wait(rs, err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(hora_net_wait(rr, err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(memcmp(src, dst, sz), 0, "message %d corrupted", m);
		usleep(200 * 1000); /* keep the transfer alive across the attacks */
	}
	pthread_join(th, NULL);

	/* the two authenticated attackers became peers; their errors are named */
	struct hora_net_peer *bad;
	uint8_t sink[1000];
	int seen_trunc = 0, seen_len = 0;
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(hora_net_accept(srv, 2000, &bad, err, sizeof(err)), 0, "%s", err);
		struct hora_net_req *r;
		cr_assert_eq(hora_net_irecv(bad, sink, sizeof(sink), NULL, NULL, &r), 0);
		int rc = hora_net_wait(r, err, sizeof(err));
		cr_assert_lt(rc, 0);
		if (strstr(err, "closed the connection during frame 1"))
			seen_trunc = 1;
		if (strstr(err, "frame length 9223372036854775808 exceeds the limit"))
			seen_len = 1;
		hora_net_peer_close(bad);
	}
	cr_assert(seen_trunc, "no 'closed the connection during frame 1' error");
	cr_assert(seen_len, "no 'frame length ... exceeds' error");

	struct hora_net_stats st;
	hora_net_loop_stats(srv, &st);
	cr_assert_geq(st.auth_failures, 2, "auth failures %llu", (unsigned long long)st.auth_failures);
	cr_assert_geq(st.handshake_timeouts + st.refused, 200);
	hora_net_peer_close(pc);
	hora_net_peer_close(ps);
	hora_net_loop_destroy(cli);
	hora_net_loop_destroy(srv);
	free(src);
	free(dst);

	fflush(stderr);
	FILE *f = fopen(logpath, "r");
	static char log[1 << 16];
	size_t ln = fread(log, 1, sizeof(log) - 1, f);
	log[ln] = 0;
	fclose(f);
	unlink(logpath);
	free(logpath);
	cr_assert(strstr(log, "refused 127.0.0.1:") && strstr(log, "not a hora peer"), "log:\n%s", log);
	cr_assert(strstr(log, "protocol version 3 from 127.0.0.1:"), "log:\n%s", log);
	cr_assert(strstr(log, "authentication failed from 127.0.0.1:"), "log:\n%s", log);
	cr_assert(strstr(log, "handshake timeout from 127.0.0.1:"), "log:\n%s", log);
	cr_assert(strstr(log, "more refusals not logged"), "log not rate-limited:\n%s", log);
}
