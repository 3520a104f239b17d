/* test_shm.c - the shared-memory channel (net/shm/shm.h): messages of 1 B
 * to 8 MiB through a 64 KiB ring (many wrap-arounds, exact bytes, order)
 * between two threads and between two processes (fork; the child attaches
 * through the fd passed over a socketpair), both directions at once; the
 * zero-copy form across the wrap; a reader woken from its futex sleep; a
 * peer that detached, hung up its lifeline or was killed with -9, seen by
 * a blocked reader (-ECONNRESET) or writer (-EPIPE) before its deadline;
 * headers with a wrong magic, version or size refused; nothing left in
 * /dev/shm. No timing is asserted: a death that is not noticed shows as
 * -ETIMEDOUT at the (far) deadline instead of -ECONNRESET. */
#include "net/shm/shm.h"
#include "net/shm/internal.h"
#include "../helpers.h"
#include "net/util/clock.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define RING (64u << 10)
#define BIG (8u << 20)

static const size_t sizes[] = {1,     7,     8,      15,         16,          17,      48,
			       63,    64,    65,     1000,       4095,        4096,    4097,
			       16383, 65520, 65536,  65537,      100000,      1 << 20, (1 << 20) + 3,
			       0,     BIG,   12345,  (3 << 20) + 1};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int64_t in_ms(int ms)
{
	return hora_clock_ns() + (int64_t)ms * 1000000;
}

static int shm_fits(size_t len, size_t ring)
{
	return ((len + HORA_NET_SHM_FRAME_HEAD + 63) & ~(size_t)63) <= ring;
}

static void pair(struct hora_net_shm **a, struct hora_net_shm **b, size_t ring, int spin_us)
{
	struct hora_net_shm_cfg cfg = {.ring_bytes = ring, .spin_us = spin_us, .life_fd = -1};
	char err[256] = "";
	cr_assert_eq(hora_net_shm_create(&cfg, a, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_shm_attach(hora_net_shm_fd(*a), &cfg, b, err, sizeof(err)), 0, "%s", err);
}

/* One direction's work: every size in order, message i filled from seed+i. */
struct stream {
	struct hora_net_shm *c;
	int send, rounds;
	uint64_t seed;
	int rc;
	long bad_at;
	size_t bad_msg;
	char err[256];
};

static void *stream_run(void *arg)
{
	struct stream *s = arg;
	uint8_t *buf = malloc(BIG);
	s->bad_at = -1;
	for (int r = 0; r < s->rounds && !s->rc; r++)
		for (size_t i = 0; i < NSIZES && !s->rc; i++) {
			const uint64_t seed = s->seed + (uint64_t)r * NSIZES + i;
			if (s->send) {
				th_fill_bytes(buf, sizes[i], seed);
				s->rc = hora_net_shm_send(s->c, buf, sizes[i], in_ms(20000), s->err, sizeof(s->err));
			} else {
				memset(buf, 0xee, sizes[i]);
				s->rc = hora_net_shm_recv(s->c, buf, sizes[i], in_ms(20000), s->err, sizeof(s->err));
				if (!s->rc && (s->bad_at = th_bytes_differ(buf, sizes[i], seed)) >= 0) {
					s->bad_msg = i;
					s->rc = -EILSEQ;
				}
			}
		}
	free(buf);
	return NULL;
}

static void check_stream(const struct stream *s, const char *who)
{
	cr_expect_eq(s->rc, 0, "%s: rc %d (%s), message %zu (%zu bytes) wrong at byte %ld", who, s->rc,
		     s->err, s->bad_msg, sizes[s->bad_msg], s->bad_at);
}

Test(net_shm, every_size_in_order_between_threads, .timeout = 60)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	struct stream tx = {.c = a, .send = 1, .rounds = 2, .seed = 100};
	struct stream rx = {.c = b, .send = 0, .rounds = 2, .seed = 100};
	pthread_t t;
	pthread_create(&t, NULL, stream_run, &tx);
	stream_run(&rx);
	pthread_join(t, NULL);
	check_stream(&tx, "sender");
	check_stream(&rx, "receiver");
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

Test(net_shm, both_directions_at_once_between_threads, .timeout = 60)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	struct stream s[4] = {{.c = a, .send = 1, .rounds = 2, .seed = 1},
			      {.c = b, .send = 0, .rounds = 2, .seed = 1},
			      {.c = b, .send = 1, .rounds = 2, .seed = 7777},
			      {.c = a, .send = 0, .rounds = 2, .seed = 7777}};
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, stream_run, &s[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		check_stream(&s[i], i % 2 ? "receiver" : "sender");
	}
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* ---- one thread sending and receiving at once (xchg) ------------------- */

/* Rank k of a ring of n (threads): every size, sent right and received
 * from the left in one xchg each; with n = 2 both are the same peer. */
struct ring_rank {
	struct hora_net_shm *right, *left;
	int rank, n;
	int rc, dir;
	size_t bad_msg;
	long bad_at;
	char err[256];
};

/* a 32-byte head as a fingerprint: (sender, message index) */
struct fp {
	uint64_t from, msg, pad[2];
};

static int check_fp(void *arg, const void *head)
{
	const struct fp *want = arg, *got = head;
	return got->from == want->from && got->msg == want->msg ? 0 : -EBADMSG;
}

static void *ring_run(void *arg)
{
	struct ring_rank *k = arg;
	uint8_t *out = malloc(BIG), *in = malloc(BIG);
	k->bad_at = -1;
	for (size_t i = 0; i < NSIZES && !k->rc; i++) {
		th_fill_bytes(out, sizes[i], 1000u * (uint64_t)k->rank + i);
		memset(in, 0xee, sizes[i]);
		struct fp mine = {.from = (uint64_t)k->rank, .msg = i}, theirs,
			  want = {.from = (uint64_t)((k->rank + k->n - 1) % k->n), .msg = i};
		struct hora_net_shm_xchg x = {.out = k->right, .out_head = &mine, .out_buf = out,
					      .out_bytes = sizes[i], .in = k->left, .in_head = &theirs,
					      .in_buf = in, .in_bytes = sizes[i], .head_bytes = sizeof(struct fp),
					      .check = check_fp, .check_arg = &want,
					      .deadline_ns = in_ms(20000), .err = k->err, .errlen = sizeof(k->err)};
		k->rc = hora_net_shm_xchg(&x);
		k->dir = x.dir;
		uint64_t from = (uint64_t)((k->rank + k->n - 1) % k->n);
		if (!k->rc && (k->bad_at = th_bytes_differ(in, sizes[i], 1000u * from + i)) >= 0) {
			k->bad_msg = i;
			k->rc = -EILSEQ;
		}
	}
	free(out);
	free(in);
	return NULL;
}

/* returns the futex sleeps of all endpoints, and their timeouts in *timeouts */
static uint64_t ring_of(int n, int spin_us, uint64_t *timeouts)
{
	struct hora_net_shm *to[8], *from[8]; /* to[k]: k's side 0 toward k + 1 */
	struct ring_rank k[8];
	pthread_t t[8];
	for (int i = 0; i < n; i++)
		pair(&to[i], &from[(i + 1) % n], RING, spin_us);
	for (int i = 0; i < n; i++) {
		/* with n = 2 the pair 0-1 carries both directions: one channel */
		k[i] = (struct ring_rank){.right = n == 2 && i == 1 ? from[1] : to[i],
					  .left = n == 2 && i == 0 ? to[0] : from[i], .rank = i, .n = n};
		pthread_create(&t[i], NULL, ring_run, &k[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(k[i].rc, 0, "rank %d: rc %d dir %d (%s), message %zu (%zu bytes) wrong at %ld", i,
			     k[i].rc, k[i].dir, k[i].err, k[i].bad_msg, sizes[k[i].bad_msg], k[i].bad_at);
	}
	uint64_t sleeps = 0;
	*timeouts = 0;
	for (int i = 0; i < n; i++) {
		struct hora_net_shm_stats st[2];
		hora_net_shm_stats(to[i], &st[0]);
		hora_net_shm_stats(from[(i + 1) % n], &st[1]);
		sleeps += st[0].sleeps + st[1].sleeps;
		*timeouts += st[0].timeouts + st[1].timeouts;
		hora_net_shm_detach(to[i]);
		hora_net_shm_detach(from[(i + 1) % n]);
	}
	return sleeps;
}

Test(net_shm, xchg_both_ways_on_one_thread_per_side, .timeout = 60)
{
	uint64_t timeouts;
	ring_of(2, 0, &timeouts); /* send-then-recv of 8 MiB over 64 KiB rings would deadlock */
}

Test(net_shm, xchg_around_a_ring_of_three_sleeping_on_two_words, .timeout = 60)
{
	uint64_t timeouts, sleeps = ring_of(3, -1, &timeouts); /* no spin: waits sleep in futex_waitv */
	cr_assert_gt(sleeps, 0);
	cr_log_info("ring of 3: %llu sleeps, %llu ended by their timeout", (unsigned long long)sleeps,
		    (unsigned long long)timeouts);
}

static int refuse(void *arg, const void *head)
{
	(void)arg;
	(void)head;
	return 77;
}

struct refuser {
	struct hora_net_shm *c;
	uint8_t *out, *in;
	struct hora_net_shm_xchg x;
	int rc;
	char err[256];
};

static void *refuser_run(void *arg)
{
	struct refuser *f = arg;
	struct fp h = {.from = 1};
	f->x = (struct hora_net_shm_xchg){.out = f->c, .out_head = &h, .out_buf = f->out, .out_bytes = BIG,
					  .in = f->c, .in_head = &(struct fp){0}, .in_buf = f->in,
					  .in_bytes = BIG, .head_bytes = sizeof(h), .check = refuse,
					  .deadline_ns = in_ms(20000), .err = f->err, .errlen = sizeof(f->err)};
	f->rc = hora_net_shm_xchg(&f->x);
	hora_net_shm_detach(f->c); /* as a refusing rank closes after its notice */
	return NULL;
}

Test(net_shm, a_refused_head_stops_the_exchange_after_our_message_is_out, .timeout = 60)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	struct refuser f = {.c = b, .out = malloc(BIG), .in = malloc(BIG)};
	th_fill_bytes(f.out, BIG, 4242);
	uint8_t *out = malloc(BIG), *in = malloc(BIG);
	th_fill_bytes(out, BIG, 1);
	pthread_t t;
	pthread_create(&t, NULL, refuser_run, &f);
	char err[256] = "";
	struct fp mine = {.from = 0}, theirs;
	struct hora_net_shm_xchg x = {.out = a, .out_head = &mine, .out_buf = out, .out_bytes = BIG,
				      .in = a, .in_head = &theirs, .in_buf = in, .in_bytes = BIG,
				      .head_bytes = sizeof(mine), .deadline_ns = in_ms(20000), .err = err,
				      .errlen = sizeof(err)};
	int rc = hora_net_shm_xchg(&x);
	pthread_join(t, NULL);
	/* the refuser stopped at our head, but finished its 8 MiB first */
	cr_assert_eq(f.rc, 77, "%d %s", f.rc, f.err);
	cr_assert_eq(f.x.dir, 1);
	cr_assert_eq(f.x.torn, 0);
	cr_assert_eq(theirs.from, 1);
	cr_assert_eq(th_bytes_differ(in, BIG, 4242), -1, "its whole message arrived");
	/* ours could not finish: it stopped reading and left */
	cr_assert_eq(rc, -EPIPE, "%d %s", rc, err);
	cr_assert_eq(x.dir, 0);
	cr_assert_eq(x.torn, 1);
	free(out);
	free(in);
	free(f.out);
	free(f.in);
	hora_net_shm_detach(a);
}

Test(net_shm, xchg_names_the_direction_that_failed, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	char err[256] = "";
	uint8_t buf[16];
	struct hora_net_shm_xchg x = {.out = b, .out_buf = buf, .out_bytes = 16, .in = b, .in_buf = buf,
				      .in_bytes = 16, .deadline_ns = in_ms(20000), .err = err,
				      .errlen = sizeof(err)};
	cr_assert_eq(hora_net_shm_send(a, buf, 8, in_ms(5000), NULL, 0), 0);
	cr_assert_eq(hora_net_shm_xchg(&x), -EMSGSIZE, "%s", err);
	cr_assert_eq(x.dir, 1);
	cr_assert(strstr(err, "has 8 bytes, 16 expected"), "%s", err);
	hora_net_shm_detach(a);
	x.deadline_ns = in_ms(20000);
	cr_assert_eq(hora_net_shm_xchg(&x), -EPIPE, "%s", err);
	cr_assert_eq(x.dir, 0);
	x.out = NULL;
	cr_assert_eq(hora_net_shm_recv(b, buf, 8, in_ms(5000), NULL, 0), 0, "the 8 bytes are still there");
	cr_assert_eq(hora_net_shm_xchg(&x), -ECONNRESET, "%s", err);
	cr_assert_eq(x.dir, 1);
	hora_net_shm_detach(b);
}

/* ---- processes -------------------------------------------------------- */

/* fork fn(sock, arg) as a child with one end of a socketpair; *sock: ours */
static pid_t spawn(int (*fn)(int, void *), void *arg, int *sock)
{
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(fn(sv[1], arg));
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

/* the child's side: the fd from the socket, attached (life_fd: the socket
 * when lifeline, else none) */
static int child_attach(int sock, int lifeline, int spin_us, struct hora_net_shm **c)
{
	int fd;
	char err[256];
	struct hora_net_shm_cfg cfg = {.spin_us = spin_us, .life_fd = lifeline ? sock : -1};
	if (hora_net_shm_fd_recv(sock, 10000, &fd, err, sizeof(err)) ||
	    hora_net_shm_attach(fd, &cfg, c, err, sizeof(err))) {
		fprintf(stderr, "child: %s\n", err);
		return 1;
	}
	close(fd);
	return 0;
}

static struct hora_net_shm *parent_create(int sock, int lifeline, size_t ring)
{
	struct hora_net_shm *c;
	char err[256] = "";
	struct hora_net_shm_cfg cfg = {.ring_bytes = ring, .life_fd = lifeline ? sock : -1};
	cr_assert_eq(hora_net_shm_create(&cfg, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_shm_fd_send(sock, hora_net_shm_fd(c), err, sizeof(err)), 0, "%s", err);
	return c;
}

static int wait_exit(pid_t pid)
{
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int echo_child(int sock, void *arg)
{
	(void)arg;
	struct hora_net_shm *c;
	if (child_attach(sock, 1, 0, &c))
		return 2;
	/* receive the parent's stream while sending ours, both at once */
	struct stream tx = {.c = c, .send = 1, .rounds = 1, .seed = 5000};
	struct stream rx = {.c = c, .send = 0, .rounds = 1, .seed = 9000};
	pthread_t t;
	pthread_create(&t, NULL, stream_run, &tx);
	stream_run(&rx);
	pthread_join(t, NULL);
	if (tx.rc || rx.rc) {
		fprintf(stderr, "child: send %d (%s), recv %d (%s) msg %zu at %ld\n", tx.rc, tx.err, rx.rc,
			rx.err, rx.bad_msg, rx.bad_at);
		return 3;
	}
	/* the parent's last word, so that our detach does not race its reads */
	uint8_t ack;
	if (hora_net_shm_recv(c, &ack, 1, in_ms(20000), NULL, 0) || ack != 0xAC)
		return 4;
	hora_net_shm_detach(c);
	return 0;
}

Test(net_shm, both_directions_at_once_between_processes, .timeout = 60)
{
	int sock;
	pid_t pid = spawn(echo_child, NULL, &sock);
	struct hora_net_shm *c = parent_create(sock, 1, RING);
	struct stream tx = {.c = c, .send = 1, .rounds = 1, .seed = 9000};
	struct stream rx = {.c = c, .send = 0, .rounds = 1, .seed = 5000};
	pthread_t t;
	pthread_create(&t, NULL, stream_run, &tx);
	stream_run(&rx);
	pthread_join(t, NULL);
	check_stream(&tx, "parent sender");
	check_stream(&rx, "parent receiver");
	uint8_t ack = 0xAC;
	cr_expect_eq(hora_net_shm_send(c, &ack, 1, in_ms(20000), NULL, 0), 0);
	cr_expect_eq(wait_exit(pid), 0, "the child's checks failed (its stderr says why)");
	hora_net_shm_detach(c);
	close(sock);
}

/* ---- the zero-copy form ------------------------------------------------ */

Test(net_shm, reserve_and_peek_are_contiguous_across_the_wrap, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	const size_t ring = 4096, maxlen = ring - HORA_NET_SHM_FRAME_HEAD;
	pair(&a, &b, ring, 0);
	char err[256] = "";
	uint64_t pos = 0;
	int crossed = 0;
	for (int i = 0; i < 200; i++) {
		size_t len = i == 0 ? maxlen : (size_t)(th_mix((uint64_t)i) % (maxlen + 1));
		uint64_t f = (len + HORA_NET_SHM_FRAME_HEAD + 63) & ~63ull;
		crossed += pos % ring + f > ring; /* this frame runs over the ring's end */
		pos += f;
		void *w;
		const void *r;
		cr_assert_eq(hora_net_shm_reserve(a, len, &w, in_ms(5000), err, sizeof(err)), 0, "%s", err);
		cr_assert_eq((uintptr_t)w % 16, 0, "payload 16-byte aligned");
		th_fill_bytes(w, len, (uint64_t)i);
		cr_assert_eq(hora_net_shm_commit(a, len, err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(hora_net_shm_peek(b, len, &r, in_ms(5000), err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(th_bytes_differ(r, len, (uint64_t)i), -1, "message %d (%zu bytes) as peeked", i, len);
		cr_assert_eq(hora_net_shm_release(b, err, sizeof(err)), 0, "%s", err);
	}
	cr_assert_gt(crossed, 20, "frames over the wrap: %d", crossed);
	/* commit fewer bytes than reserved; a peek of the wrong length leaves it */
	void *w;
	const void *r;
	cr_assert_eq(hora_net_shm_reserve(a, 1000, &w, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	th_fill_bytes(w, 10, 42);
	cr_assert_eq(hora_net_shm_send(a, "x", 1, in_ms(5000), NULL, 0), -EBUSY);
	cr_assert_eq(hora_net_shm_commit(a, 10, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_shm_peek(b, 11, &r, in_ms(5000), err, sizeof(err)), -EMSGSIZE);
	cr_assert(strstr(err, "has 10 bytes, 11 expected"), "%s", err);
	uint8_t got[10];
	cr_assert_eq(hora_net_shm_recv(b, got, 10, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(th_bytes_differ(got, 10, 42), -1);
	/* a message whose frame exceeds the ring cannot be reserved or peeked */
	cr_assert_eq(hora_net_shm_reserve(a, maxlen + 1, &w, in_ms(5000), err, sizeof(err)), -EMSGSIZE);
	/* a receiver that does not know the length asks for it first */
	size_t next = 1;
	cr_assert_eq(hora_net_shm_next_bytes(b, &next, in_ms(30), err, sizeof(err)), -ETIMEDOUT, "%s", err);
	cr_assert_eq(hora_net_shm_send(a, "0123456789", 10, in_ms(5000), NULL, 0), 0);
	cr_assert_eq(hora_net_shm_send(a, "", 0, in_ms(5000), NULL, 0), 0);
	cr_assert_eq(hora_net_shm_next_bytes(b, &next, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(next, 10);
	cr_assert_eq(hora_net_shm_next_bytes(b, &next, in_ms(5000), err, sizeof(err)), 0, "again: nothing consumed");
	cr_assert_eq(next, 10);
	cr_assert_eq(hora_net_shm_peek(b, next, &r, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(memcmp(r, "0123456789", 10), 0);
	cr_assert_eq(hora_net_shm_release(b, NULL, 0), 0);
	cr_assert_eq(hora_net_shm_next_bytes(b, &next, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(next, 0);
	cr_assert_eq(hora_net_shm_recv(b, NULL, 0, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_shm_commit(a, 1, NULL, 0), -EINVAL, "commit without a reserve");
	cr_assert_eq(hora_net_shm_release(b, NULL, 0), -EINVAL, "release without a peek");
	/* a message longer than the ring streams: recv takes it, peek cannot */
	struct stream tx = {.c = a, .send = 1, .rounds = 1, .seed = 3};
	pthread_t t;
	pthread_create(&t, NULL, stream_run, &tx);
	cr_assert_eq(hora_net_shm_peek(b, sizes[0], &r, in_ms(5000), NULL, 0), 0);
	cr_assert_eq(hora_net_shm_release(b, NULL, 0), 0);
	uint8_t *buf = malloc(BIG);
	for (size_t i = 1; i < NSIZES; i++) {
		if (shm_fits(sizes[i], ring)) {
			cr_assert_eq(hora_net_shm_peek(b, sizes[i], &r, in_ms(5000), err, sizeof(err)), 0, "%s", err);
			cr_assert_eq(th_bytes_differ(r, sizes[i], 3 + i), -1, "message %zu", i);
			cr_assert_eq(hora_net_shm_release(b, NULL, 0), 0);
			continue;
		}
		cr_assert_eq(hora_net_shm_peek(b, sizes[i], &r, in_ms(5000), err, sizeof(err)), -EMSGSIZE);
		cr_assert(strstr(err, "does not fit the ring whole"), "%s", err);
		cr_assert_eq(hora_net_shm_recv(b, buf, sizes[i], in_ms(5000), err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(th_bytes_differ(buf, sizes[i], 3 + i), -1, "message %zu", i);
	}
	pthread_join(t, NULL);
	check_stream(&tx, "sender");
	free(buf);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* ---- waiting, closing, dying ------------------------------------------ */

struct recv_job {
	struct hora_net_shm *c;
	size_t len;
	int ms;
	uint8_t buf[64];
	int rc;
	char err[256];
};

static void *recv_run(void *arg)
{
	struct recv_job *j = arg;
	j->rc = hora_net_shm_recv(j->c, j->buf, j->len, in_ms(j->ms), j->err, sizeof(j->err));
	return NULL;
}

/* wait (up to 10 s) until c's own receiver sleeps in the futex */
static int until_asleep(const struct hora_net_shm *c, int peer)
{
	for (int i = 0; i < 10000; i++) {
		if (hora_net_shm_sleeping(c, peer))
			return 1;
		usleep(1000);
	}
	return 0;
}

Test(net_shm, a_sleeping_reader_is_woken_by_a_message, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, -1); /* no spinning: the receiver sleeps at once */
	struct recv_job j = {.c = b, .len = 8, .ms = 20000};
	pthread_t t;
	pthread_create(&t, NULL, recv_run, &j);
	cr_assert(until_asleep(a, 1), "the receiver never went to sleep");
	cr_assert(hora_net_shm_sleeping(b, 0));
	uint64_t beats = hora_net_shm_peer_heartbeat(a);
	struct hora_net_shm_stats st0;
	hora_net_shm_stats(b, &st0);
	cr_assert_eq(hora_net_shm_send(a, "8 bytes!", 8, in_ms(5000), NULL, 0), 0);
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, 0, "%s", j.err);
	cr_assert_eq(memcmp(j.buf, "8 bytes!", 8), 0);
	cr_assert_gt(hora_net_shm_peer_heartbeat(a), beats, "the receiver's heartbeat moved");
	/* the send woke it: a lost wake-up would end the sleep by its
	 * HORA_NET_SHM_POLL_MS timeout instead, and woken would not move */
	struct hora_net_shm_stats st;
	hora_net_shm_stats(b, &st);
	cr_assert_gt(st.woken, st0.woken, "sleeps %llu, woken %llu, timed out %llu",
		     (unsigned long long)st.sleeps, (unsigned long long)st.woken,
		     (unsigned long long)st.timeouts);
	cr_assert_eq(hora_net_shm_sleeping(a, 1), 0);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

Test(net_shm, a_detach_delivers_what_was_sent_then_resets, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	char err[256] = "";
	uint8_t m[3];
	for (int i = 0; i < 3; i++)
		cr_assert_eq(hora_net_shm_send(a, &(uint8_t){(uint8_t)i}, 1, in_ms(5000), NULL, 0), 0);
	hora_net_shm_detach(a);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(hora_net_shm_recv(b, &m[i], 1, in_ms(5000), err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(m[i], i);
	}
	cr_assert_eq(hora_net_shm_recv(b, m, 1, in_ms(20000), err, sizeof(err)), -ECONNRESET, "%s", err);
	cr_assert(strstr(err, "closed the channel"), "%s", err);
	cr_assert_eq(hora_net_shm_send(b, m, 1, in_ms(20000), err, sizeof(err)), -EPIPE, "%s", err);
	cr_assert(strstr(err, "send: the peer (side 0"), "%s", err);
	hora_net_shm_detach(b);
}

Test(net_shm, a_blocked_reader_sees_the_detach_and_the_interrupt, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, -1);
	struct recv_job j = {.c = b, .len = 8, .ms = 20000};
	pthread_t t;
	pthread_create(&t, NULL, recv_run, &j);
	cr_assert(until_asleep(a, 1));
	hora_net_shm_detach(a);
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, -ECONNRESET, "%d %s", j.rc, j.err);
	hora_net_shm_detach(b);

	pair(&a, &b, RING, -1);
	j = (struct recv_job){.c = b, .len = 8, .ms = 20000};
	pthread_create(&t, NULL, recv_run, &j);
	cr_assert(until_asleep(a, 1));
	hora_net_shm_interrupt(b);
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, -ECANCELED, "%d %s", j.rc, j.err);
	cr_assert_eq(hora_net_shm_recv(b, j.buf, 8, in_ms(20000), NULL, 0), -ECANCELED, "and later");
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

Test(net_shm, a_lifeline_that_hangs_up_is_a_dead_peer, .timeout = 30)
{
	/* threads of one process: no pidfd, only the socket tells */
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	struct hora_net_shm *a, *b;
	char err[256] = "";
	struct hora_net_shm_cfg ca = {.ring_bytes = RING, .life_fd = -1};
	struct hora_net_shm_cfg cb = {.ring_bytes = RING, .life_fd = sv[1]};
	cr_assert_eq(hora_net_shm_create(&ca, &a, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_shm_attach(hora_net_shm_fd(a), &cb, &b, err, sizeof(err)), 0, "%s", err);
	struct recv_job j = {.c = b, .len = 8, .ms = 20000};
	pthread_t t;
	pthread_create(&t, NULL, recv_run, &j);
	cr_assert(until_asleep(a, 1));
	close(sv[0]); /* as the peer's process dying would */
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, -ECONNRESET, "%d %s", j.rc, j.err);
	cr_assert(strstr(j.err, "socket hung up"), "%s", j.err);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
	close(sv[1]);
}

/* a writer that sends one message, then waits to be killed */
static int doomed_writer(int sock, void *arg)
{
	struct hora_net_shm *c;
	if (child_attach(sock, *(int *)arg, 0, &c))
		return 2;
	if (hora_net_shm_send(c, "hello", 5, in_ms(20000), NULL, 0))
		return 3;
	for (;;)
		pause();
}

static void killed_writer(int lifeline)
{
	int sock;
	pid_t pid = spawn(doomed_writer, &lifeline, &sock);
	struct hora_net_shm *c = parent_create(sock, lifeline, RING);
	struct recv_job j = {.c = c, .len = 5, .ms = 20000};
	recv_run(&j);
	cr_assert_eq(j.rc, 0, "%s", j.err);
	cr_assert_eq(memcmp(j.buf, "hello", 5), 0);
	j = (struct recv_job){.c = c, .len = 5, .ms = 20000};
	pthread_t t;
	pthread_create(&t, NULL, recv_run, &j);
	cr_assert(until_asleep(c, 0), "the reader never went to sleep");
	kill(pid, SIGKILL);
	pthread_join(t, NULL);
	cr_assert_eq(wait_exit(pid), 128 + SIGKILL);
	/* not -ETIMEDOUT: noticed long before the 20 s deadline */
	cr_assert_eq(j.rc, -ECONNRESET, "%d %s", j.rc, j.err);
	char want[64];
	snprintf(want, sizeof(want), "pid %d", (int)pid);
	cr_assert(strstr(j.err, want) && (strstr(j.err, "died") || strstr(j.err, "hung up")), "%s", j.err);
	hora_net_shm_detach(c);
	close(sock);
}

Test(net_shm, a_writer_killed_by_sigkill_is_seen_by_pidfd, .timeout = 30)
{
	killed_writer(0);
}

Test(net_shm, a_writer_killed_by_sigkill_is_seen_by_its_lifeline, .timeout = 30)
{
	killed_writer(1);
}

static int idle_reader(int sock, void *arg)
{
	(void)arg;
	struct hora_net_shm *c;
	if (child_attach(sock, 0, 0, &c))
		return 2;
	char b = 'r'; /* attached: tell the parent, then never read */
	if (write(sock, &b, 1) != 1)
		return 3;
	for (;;)
		pause();
}

Test(net_shm, a_writer_blocked_on_a_killed_reader_gets_epipe, .timeout = 30)
{
	int sock;
	pid_t pid = spawn(idle_reader, NULL, &sock);
	struct hora_net_shm *c = parent_create(sock, 0, RING);
	char b, err[256] = "";
	cr_assert_eq(read(sock, &b, 1), 1);
	cr_assert_eq(hora_net_shm_send(c, "x", 1, in_ms(5000), err, sizeof(err)), 0, "%s", err);
	kill(pid, SIGKILL);
	uint8_t *big = calloc(1, 4 * RING);
	cr_assert_eq(hora_net_shm_send(c, big, 4 * RING, in_ms(20000), err, sizeof(err)), -EPIPE, "%s", err);
	cr_assert(strstr(err, "died"), "%s", err);
	free(big);
	cr_assert_eq(wait_exit(pid), 128 + SIGKILL);
	hora_net_shm_detach(c);
	close(sock);
}

Test(net_shm, a_deadline_passes_as_etimedout, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	char err[256] = "";
	uint8_t x;
	cr_assert_eq(hora_net_shm_recv(b, &x, 1, in_ms(30), err, sizeof(err)), -ETIMEDOUT, "%s", err);
	cr_assert(strstr(err, "timed out"), "%s", err);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* a ring counter the peer stored that cannot be (a stray write into the
 * mapping): the next step would have copied past the ring's mapping; the
 * call fails naming it instead, within the spin */
Test(net_shm, an_impossible_ring_counter_from_the_peer_is_named, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	char err[256] = "";
	uint8_t x[64] = {0};
	cr_assert_eq(hora_net_shm_send(a, x, sizeof(x), in_ms(1000), err, sizeof(err)), 0, "%s", err);
	/* a's head, as b reads it: 10 rings past what b has read */
	atomic_store(&b->hdr->dir[a->side].head, 10 * (uint64_t)RING);
	cr_assert_eq(hora_net_shm_recv(b, x, sizeof(x), in_ms(1000), err, sizeof(err)), -EPROTO, "%s", err);
	cr_assert(strstr(err, "its mapping is damaged"), "%s", err);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
	/* a tail past our head: the writer's room would exceed the ring */
	pair(&a, &b, RING, 0);
	atomic_store(&a->hdr->dir[a->side].tail, 5 * (uint64_t)RING);
	uint8_t *big = calloc(1, 4 * RING);
	cr_assert_eq(hora_net_shm_send(a, big, 4 * RING, in_ms(1000), err, sizeof(err)), -EPROTO, "%s", err);
	cr_assert(strstr(err, "its mapping is damaged"), "%s", err);
	free(big);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* ---- refusals ---------------------------------------------------------- */

/* a copy of a's memfd with the 8-byte (or 4-byte) field at off replaced */
static int forged(struct hora_net_shm *a, size_t off, uint64_t v, size_t vlen, int seal)
{
	const size_t total = 4096 + 2 * hora_net_shm_ring_bytes(a);
	int fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)total), 0);
	uint8_t page[4096];
	cr_assert_eq(pread(hora_net_shm_fd(a), page, sizeof(page), 0), (ssize_t)sizeof(page));
	memcpy(page + off, &v, vlen);
	cr_assert_eq(pwrite(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return fd;
}

static void refused(int fd, int want, const char *text)
{
	struct hora_net_shm *b = NULL;
	char err[256] = "";
	cr_assert_eq(hora_net_shm_attach(fd, NULL, &b, err, sizeof(err)), want, "%s", err);
	cr_assert(strstr(err, text), "'%s' lacks '%s'", err, text);
	close(fd);
}

Test(net_shm, headers_with_a_wrong_magic_version_or_size_are_refused, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	struct hora_net_shm_cfg cfg = {.ring_bytes = RING, .life_fd = -1};
	char err[256] = "";
	cr_assert_eq(hora_net_shm_create(&cfg, &a, err, sizeof(err)), 0, "%s", err);
	/* the good copy attaches (the forgery itself is sound) */
	int fd = forged(a, 0, HORA_NET_SHM_MAGIC, 8, 1);
	cr_assert_eq(hora_net_shm_attach(fd, NULL, &b, err, sizeof(err)), 0, "%s", err);
	hora_net_shm_detach(b);
	close(fd);
	refused(forged(a, 0, HORA_NET_SHM_MAGIC ^ 1, 8, 1), -EPROTO, "bad magic");
	refused(forged(a, 8, HORA_NET_SHM_VERSION + 1, 4, 1), -EPROTO, "version 2");
	refused(forged(a, 16, RING * 2, 8, 1), -EINVAL, "header says ring 131072");
	refused(forged(a, 0, HORA_NET_SHM_MAGIC, 8, 0), -EINVAL, "not a memfd with its size sealed");
	/* a second side 1 */
	cr_assert_eq(hora_net_shm_attach(hora_net_shm_fd(a), NULL, &b, err, sizeof(err)), 0, "%s", err);
	struct hora_net_shm *c2 = NULL;
	cr_assert_eq(hora_net_shm_attach(hora_net_shm_fd(a), NULL, &c2, err, sizeof(err)), -EBUSY);
	cr_assert(strstr(err, "side 1 already"), "%s", err);
	/* a ring that is not a power of two */
	cfg.ring_bytes = 5000;
	cr_assert_eq(hora_net_shm_create(&cfg, &c2, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "ring_bytes 5000"), "%s", err);
	/* a message on the socket without an fd */
	int sv[2], got;
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	cr_assert_eq(write(sv[0], "z", 1), 1);
	cr_assert_eq(hora_net_shm_fd_recv(sv[1], 1000, &got, err, sizeof(err)), -EPROTO);
	close(sv[0]);
	cr_assert_eq(hora_net_shm_fd_recv(sv[1], 1000, &got, err, sizeof(err)), -ECONNRESET);
	close(sv[1]);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* ---- nothing in /dev/shm ----------------------------------------------- */

Test(net_shm, no_file_is_left_in_dev_shm, .timeout = 60)
{
	char *before = th_dev_shm();
	/* a channel between processes whose writer is killed -9 */
	killed_writer(0);
	/* one between threads, and the memfd has no name in any file system */
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	char link[64], target[256] = "";
	snprintf(link, sizeof(link), "/proc/self/fd/%d", hora_net_shm_fd(a));
	cr_assert_gt(readlink(link, target, sizeof(target) - 1), 0);
	cr_assert_eq(strncmp(target, "/memfd:hora-shm", 15), 0, "%s", target);
	char *during = th_dev_shm();
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
	char *after = th_dev_shm();
	char name[256];
	cr_expect(!th_dev_shm_new(before, during, name, sizeof(name)), "/dev/shm/%s appeared", name);
	cr_expect(!th_dev_shm_new(before, after, name, sizeof(name)), "/dev/shm/%s appeared", name);
	free(before);
	free(during);
	free(after);
}

/* ---- one thread driving many messages (the link's progress thread) ---- */

/* One thread moves a send on channel A and a receive on channel B at once
 * by steps, sleeping on both in msg_wait, while two threads do the other
 * ends with plain send and recv: 8 MiB each way through 64 KiB rings. */
Test(net_shm, messages_moved_by_steps_on_two_channels_from_one_thread, .timeout = 60)
{
	struct hora_net_shm *a0, *a1, *b0, *b1;
	pair(&a0, &a1, RING, 0);
	pair(&b0, &b1, RING, 0);
	struct stream rx = {.c = a1, .send = 0, .rounds = 1, .seed = 31};
	struct stream tx = {.c = b0, .send = 1, .rounds = 1, .seed = 32};
	pthread_t t[2];
	pthread_create(&t[0], NULL, stream_run, &rx);
	pthread_create(&t[1], NULL, stream_run, &tx);
	uint8_t *out = malloc(BIG), *in = malloc(BIG);
	char err[256] = "";
	for (size_t i = 0; i < NSIZES; i++) {
		struct hora_net_shm_msg s, r;
		th_fill_bytes(out, sizes[i], 31 + i);
		cr_assert_eq(hora_net_shm_msg_send(&s, a0, out, sizes[i], err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(hora_net_shm_msg_recv(&r, b1, in, sizes[i], err, sizeof(err)), 0, "%s", err);
		while (!hora_net_shm_msg_done(&s) || !hora_net_shm_msg_done(&r)) {
			int moved = hora_net_shm_msg_step(&s, err, sizeof(err));
			int rc = hora_net_shm_msg_step(&r, err, sizeof(err));
			cr_assert_geq(rc, 0, "%d %s", rc, err);
			if (moved || rc)
				continue;
			struct hora_net_shm_msg *m[2];
			int n = 0, which;
			if (!hora_net_shm_msg_done(&s))
				m[n++] = &s;
			if (!hora_net_shm_msg_done(&r))
				m[n++] = &r;
			rc = hora_net_shm_msg_wait(m, n, NULL, 0, 0, in_ms(20000), &which, err, sizeof(err));
			cr_assert_eq(rc, 0, "%d %s", rc, err);
		}
		cr_assert_eq(th_bytes_differ(in, sizes[i], 32 + i), -1, "message %zu (%zu B)", i, sizes[i]);
	}
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	check_stream(&rx, "receiver");
	check_stream(&tx, "sender");
	/* a receive of another length fails its step, unread */
	cr_assert_eq(hora_net_shm_send(b0, out, 10, in_ms(20000), err, sizeof(err)), 0, "%s", err);
	struct hora_net_shm_msg r;
	cr_assert_eq(hora_net_shm_msg_recv(&r, b1, in, 11, err, sizeof(err)), 0);
	int rc;
	while ((rc = hora_net_shm_msg_step(&r, err, sizeof(err))) == 0)
		;
	cr_assert_eq(rc, -EMSGSIZE, "%d %s", rc, err);
	cr_assert_eq(hora_net_shm_recv(b1, in, 10, in_ms(20000), err, sizeof(err)), 0, "%s", err);
	free(out);
	free(in);
	hora_net_shm_detach(a0);
	hora_net_shm_detach(a1);
	hora_net_shm_detach(b0);
	hora_net_shm_detach(b1);
}

struct ringer {
	struct hora_net_shm_bell *bell;
	struct hora_net_shm *c; /* also send one byte on it afterwards, if set */
};

static void *ring_later(void *arg)
{
	struct ringer *g = arg;
	usleep(50 * 1000);
	hora_net_shm_bell_ring(g->bell);
	return NULL;
}

/* A bell ends the wait of a sleeper with no message at all, and of one
 * sleeping on a ring that stays empty; a bell rung before the wait (its
 * count moved since `seen`) ends it at once. */
Test(net_shm, a_bell_ends_a_wait_on_many, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	struct hora_net_shm_bell bell = {0};
	struct ringer g = {.bell = &bell};
	char err[256] = "";
	uint8_t in[16];
	struct hora_net_shm_msg r, *m[1] = {&r};
	cr_assert_eq(hora_net_shm_msg_recv(&r, b, in, sizeof(in), err, sizeof(err)), 0);
	for (int n = 0; n < 2; n++) {
		pthread_t t;
		uint32_t seen = hora_net_shm_bell_seq(&bell);
		pthread_create(&t, NULL, ring_later, &g);
		int which, rc = hora_net_shm_msg_wait(m, n, &bell, seen, 0, in_ms(20000), &which, err, sizeof(err));
		pthread_join(t, NULL);
		cr_assert_eq(rc, 0, "n %d: %d %s", n, rc, err);
		cr_assert_neq(hora_net_shm_bell_seq(&bell), seen);
		cr_assert_eq(hora_net_shm_msg_done(&r), 0);
	}
	uint32_t seen = hora_net_shm_bell_seq(&bell);
	hora_net_shm_bell_ring(&bell);
	int which;
	cr_assert_eq(hora_net_shm_msg_wait(m, 1, &bell, seen, 0, in_ms(20000), &which, err, sizeof(err)), 0);
	/* and the deadline without one */
	seen = hora_net_shm_bell_seq(&bell);
	cr_assert_eq(hora_net_shm_msg_wait(m, 1, &bell, seen, 0, in_ms(20), &which, err, sizeof(err)), -ETIMEDOUT);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

Test(net_shm, look_copies_a_prefix_of_the_next_message_and_consumes_nothing, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	uint8_t out[100], in[101];
	char err[256] = "";
	th_fill_bytes(out, sizeof(out), 9);
	cr_assert_eq(hora_net_shm_look(b, in, 8, in_ms(10), err, sizeof(err)), -ETIMEDOUT);
	cr_assert_eq(hora_net_shm_send(a, out, 100, in_ms(20000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_shm_look(b, in, 8, in_ms(20000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(memcmp(in, out, 8), 0);
	memset(in, 0, sizeof(in));
	cr_assert_eq(hora_net_shm_look(b, in, 100, in_ms(20000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(memcmp(in, out, 100), 0);
	cr_assert_eq(hora_net_shm_look(b, in, 101, in_ms(20000), err, sizeof(err)), -EMSGSIZE);
	memset(in, 0, sizeof(in));
	cr_assert_eq(hora_net_shm_recv(b, in, 100, in_ms(20000), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(memcmp(in, out, 100), 0);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* A receive that fails (another length) while our message is partly out
 * says torn: nothing more may be sent on that channel. */
Test(net_shm, xchg_is_torn_when_the_receive_fails_midway_through_our_send, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	uint8_t *out = malloc(4 * RING), in[20], small[10] = {0};
	char err[256] = "";
	cr_assert_eq(hora_net_shm_send(b, small, sizeof(small), in_ms(20000), err, sizeof(err)), 0);
	struct hora_net_shm_xchg x = {.out = a, .out_buf = out, .out_bytes = 4 * RING, .in = a, .in_buf = in,
				      .in_bytes = sizeof(in), .deadline_ns = in_ms(20000), .err = err,
				      .errlen = sizeof(err)};
	cr_assert_eq(hora_net_shm_xchg(&x), -EMSGSIZE, "%s", err);
	cr_assert_eq(x.dir, 1);
	cr_assert_eq(x.torn, 1);
	free(out);
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}

/* A message of another length than expected still has its head checked
 * first: the check's refusal (a mismatched call, named by the caller) wins
 * over -EMSGSIZE; a head the check accepts leaves -EMSGSIZE. */
Test(net_shm, xchg_checks_the_head_of_a_message_of_another_length, .timeout = 30)
{
	struct hora_net_shm *a, *b;
	pair(&a, &b, RING, 0);
	char err[256] = "";
	uint8_t body[300] = {0}, in[288];
	struct fp h = {.from = 1, .msg = 5}, got, want = {.from = 1, .msg = 6};
	for (int k = 0; k < 2; k++) {
		struct hora_net_shm_xchg s = {.out = b, .out_head = &h, .out_buf = body, .out_bytes = 284,
					      .head_bytes = sizeof(h), .deadline_ns = in_ms(20000)};
		cr_assert_eq(hora_net_shm_xchg(&s), 0);
		if (k)
			want.msg = 5;
		struct hora_net_shm_xchg x = {.in = a, .in_head = &got, .in_buf = in, .in_bytes = 288,
					      .head_bytes = sizeof(h), .check = check_fp, .check_arg = &want,
					      .deadline_ns = in_ms(20000), .err = err, .errlen = sizeof(err)};
		int rc = hora_net_shm_xchg(&x);
		cr_assert_eq(rc, k ? -EMSGSIZE : -EBADMSG, "%d %s", rc, err);
		cr_assert_eq(x.dir, 1);
		cr_assert_eq(got.msg, 5);
		struct fp skip;
		uint8_t rest[284];
		struct hora_net_shm_xchg y = {.in = a, .in_head = &skip, .in_buf = rest, .in_bytes = 284,
					      .head_bytes = sizeof(h), .deadline_ns = in_ms(20000)};
		cr_assert_eq(hora_net_shm_xchg(&y), 0, "the message stayed unread");
	}
	hora_net_shm_detach(a);
	hora_net_shm_detach(b);
}
