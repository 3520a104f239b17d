/* test_multiproc.c - two processes, real sockets: 1 GiB of random data
 * (16 messages of 64 MiB over 2 stripes) from a child to its parent,
 * checked bit for bit against the same generator. */
#include "net_helpers.h"

#include <errno.h>
#include <stdio.h>
#include <sys/wait.h>

#define MSG (64u << 20)
#define NMSG 16

static int child(int rfd)
{
	uint16_t port;
	if (read(rfd, &port, sizeof(port)) != sizeof(port))
		return 10;
	struct hora_net_opts o;
	hora_net_opts_default(&o);
	o.sockets_per_peer = 2;
	o.node_id = 2;
	o.secret = (const uint8_t *)TEST_SECRET;
	o.secret_len = strlen(TEST_SECRET);
	struct hora_net_loop *l;
	struct hora_net_peer *p;
	char err[256];
	if (hora_net_loop_create(&o, &l, err, sizeof(err)) ||
	    hora_net_connect(l, "127.0.0.1", port, 5000, &p, err, sizeof(err))) {
		fprintf(stderr, "child: %s\n", err);
		return 11;
	}
	uint8_t *buf[2] = {malloc(MSG), malloc(MSG)};
	struct hora_net_req *r[2] = {0};
	for (int m = 0; m < NMSG; m++) { /* double-buffered: fill one while the other flies */
		int b = m & 1;
		if (r[b] && hora_net_wait(r[b], err, sizeof(err))) {
			fprintf(stderr, "child: %s\n", err);
			return 12;
		}
		tn_fill(buf[b], MSG, 1000 + (uint64_t)m);
		if (hora_net_isend(p, buf[b], MSG, NULL, NULL, &r[b]))
			return 13;
	}
	for (int b = 0; b < 2; b++)
		if (hora_net_wait(r[b], err, sizeof(err))) {
			fprintf(stderr, "child: %s\n", err);
			return 14;
		}
	/* wait for the parent's ack so nothing is cut short */
	uint8_t ack;
	struct hora_net_req *ra;
	if (hora_net_irecv(p, &ack, 1, NULL, NULL, &ra) || hora_net_wait(ra, err, sizeof(err)))
		return 15;
	hora_net_peer_close(p);
	hora_net_loop_destroy(l);
	return ack == 0xAC ? 0 : 16;
}

Test(net_multiproc, one_gib_bit_for_bit, .timeout = 300)
{
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(pfd[1]);
		_exit(child(pfd[0]));
	}
	close(pfd[0]);
	struct hora_net_loop *l = tn_loop(2, 1, NULL);
	char err[256];
	uint16_t port;
	cr_assert_eq(hora_net_listen(l, "127.0.0.1", 0, &port, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(write(pfd[1], &port, sizeof(port)), (ssize_t)sizeof(port));
	close(pfd[1]);
	struct hora_net_peer *p;
	cr_assert_eq(hora_net_accept(l, 10000, &p, err, sizeof(err)), 0, "%s", err);
	uint8_t *got = malloc(MSG), *want = malloc(MSG);
	uint64_t total = 0;
	for (int m = 0; m < NMSG; m++) {
		struct hora_net_req *r;
		cr_assert_eq(hora_net_irecv(p, got, MSG, NULL, NULL, &r), 0);
		tn_fill(want, MSG, 1000 + (uint64_t)m); /* overlaps the transfer */
		cr_assert_eq(hora_net_wait(r, err, sizeof(err)), 0, "message %d: %s", m, err);
		cr_assert_eq(memcmp(got, want, MSG), 0, "message %d differs", m);
		total += MSG;
	}
	cr_assert_eq(total, 1ull << 30);
	uint8_t ack = 0xAC;
	struct hora_net_req *ra;
	cr_assert_eq(hora_net_isend(p, &ack, 1, NULL, NULL, &ra), 0);
	cr_assert_eq(hora_net_wait(ra, err, sizeof(err)), 0, "%s", err);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit status %d",
		  WEXITSTATUS(status));
	hora_net_peer_close(p);
	hora_net_loop_destroy(l);
	free(got);
	free(want);
}
