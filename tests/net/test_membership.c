/* test_membership.c - the loop's service (posted calls, timers, datagram
 * sockets) and the membership running over it, in one process: loops on
 * 127.0.0.1, members agreeing on a view, the application's opaque status
 * bytes going from one member to another. */
#include "net/membership/membership.h"
#include "net_helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* ---- the service --------------------------------------------------------------- */

struct svc {
	struct hora_net_loop *loop;
	struct hora_net_timer *t;
	struct hora_net_dgram *d;
	struct sockaddr_in bound;
	atomic_int fired, got, calls;
	char last[64];
	int rc;
	char err[128];
};

static void on_fire(void *arg)
{
	struct svc *s = arg;
	atomic_fetch_add(&s->fired, 1);
}

static void on_dgram(void *arg, const struct sockaddr_in *from, const uint8_t *buf, size_t len)
{
	struct svc *s = arg;
	(void)from;
	snprintf(s->last, sizeof(s->last), "%.*s", (int)len, (const char *)buf);
	atomic_fetch_add(&s->got, 1);
}

static void setup(void *arg)
{
	struct svc *s = arg;
	atomic_fetch_add(&s->calls, 1);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	s->rc = hora_net_timer_create(s->loop, on_fire, s, &s->t);
	if (!s->rc)
		s->rc = hora_net_dgram_open(s->loop, &a, 256, on_dgram, s, &s->bound, &s->d, s->err,
					    sizeof(s->err));
}

static void arm(void *arg)
{
	struct svc *s = arg;
	hora_net_timer_arm(s->t, 20);
	hora_net_timer_arm(s->t, 30); /* re-armed: fires once */
}

static void send_self(void *arg)
{
	struct svc *s = arg;
	s->rc = hora_net_dgram_send(s->d, &s->bound, "hello", 5);
}

static void teardown(void *arg)
{
	struct svc *s = arg;
	hora_net_timer_arm(s->t, 10000); /* destroyed while armed: never fires */
	hora_net_timer_destroy(s->t);
	hora_net_dgram_close(s->d);
}

Test(net_service, calls_timers_and_datagrams_run_on_the_comm_thread, .timeout = 30)
{
	struct svc s = {.loop = tn_loop(1, 1, NULL)};
	cr_assert_eq(hora_net_loop_call(s.loop, setup, &s), 0);
	cr_assert_eq(atomic_load(&s.calls), 1, "the call did not run before loop_call returned");
	cr_assert_eq(s.rc, 0, "%s", s.err);
	cr_assert_neq(s.bound.sin_port, 0);
	cr_assert_eq(hora_net_loop_call(s.loop, arm, &s), 0);
	cr_assert_eq(hora_net_loop_call(s.loop, send_self, &s), 0);
	cr_assert_eq(s.rc, 0);
	for (int i = 0; i < 200 && (atomic_load(&s.fired) < 1 || atomic_load(&s.got) < 1); i++)
		sleep_ms(10);
	cr_assert_eq(atomic_load(&s.got), 1);
	cr_assert_str_eq(s.last, "hello");
	sleep_ms(100);
	cr_assert_eq(atomic_load(&s.fired), 1, "a re-armed timer fired %d times", atomic_load(&s.fired));
	cr_assert_eq(hora_net_loop_call(s.loop, teardown, &s), 0);
	hora_net_loop_destroy(s.loop); /* frees what is still in the kernel (ASan: no leak) */
}

/* A datagram callback may close its own socket (transport.h says so): the
 * socket is freed once the callback returns, not under it (ASan caught a
 * use after free here). */
static void on_dgram_close(void *arg, const struct sockaddr_in *from, const uint8_t *buf, size_t len)
{
	struct svc *s = arg;
	(void)from;
	(void)buf;
	(void)len;
	hora_net_dgram_close(s->d);
	atomic_fetch_add(&s->got, 1);
}

static void count_call(void *arg)
{
	struct svc *s = arg;
	atomic_fetch_add(&s->calls, 1);
}

static void open_closing(void *arg)
{
	struct svc *s = arg;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	s->rc = hora_net_dgram_open(s->loop, &a, 64, on_dgram_close, s, &s->bound, &s->d, s->err,
				    sizeof(s->err));
	if (!s->rc)
		s->rc = hora_net_dgram_send(s->d, &s->bound, "bye", 3);
}

Test(net_service, a_datagram_callback_may_close_its_socket, .timeout = 30)
{
	struct svc s = {.loop = tn_loop(1, 1, NULL)};
	cr_assert_eq(hora_net_loop_call(s.loop, open_closing, &s), 0);
	cr_assert_eq(s.rc, 0, "%s", s.err);
	for (int i = 0; i < 200 && atomic_load(&s.got) < 1; i++)
		sleep_ms(10);
	cr_assert_eq(atomic_load(&s.got), 1);
	/* the comm thread goes on after the close: a posted call still runs */
	cr_assert_eq(hora_net_loop_call(s.loop, count_call, &s), 0);
	cr_assert_eq(atomic_load(&s.calls), 1);
	hora_net_loop_destroy(s.loop);
}

/* A datagram to a port nothing is bound to on a live host (here: loopback)
 * comes back as ICMP port unreachable, reported with that destination; one
 * to a bound port reports nothing, and receiving goes on. */
struct refusal {
	struct svc s;
	struct sockaddr_in closed, to;
	atomic_int refused;
};

static void on_refused(void *arg, const struct sockaddr_in *to)
{
	struct refusal *r = arg;
	r->to = *to;
	atomic_fetch_add(&r->refused, 1);
}

static void open_refusing(void *arg)
{
	struct refusal *r = arg;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	r->s.rc = hora_net_dgram_open(r->s.loop, &a, 256, on_dgram, &r->s, &r->s.bound, &r->s.d,
				      r->s.err, sizeof(r->s.err));
	if (!r->s.rc)
		r->s.rc = hora_net_dgram_on_refused(r->s.d, on_refused);
}

static void send_closed(void *arg)
{
	struct refusal *r = arg;
	r->s.rc = hora_net_dgram_send(r->s.d, &r->closed, "anyone?", 7);
}

static void close_refusing(void *arg)
{
	struct refusal *r = arg;
	hora_net_dgram_close(r->s.d);
}

Test(net_service, a_datagram_to_a_closed_port_is_reported_refused, .timeout = 30)
{
	struct refusal r = {.s.loop = tn_loop(1, 1, NULL)};
	/* a port that was bound a moment ago and is closed now */
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&r.closed, &al), 0);
	close(fd);
	cr_assert_eq(hora_net_loop_call(r.s.loop, open_refusing, &r), 0);
	cr_assert_eq(r.s.rc, 0, "%s", r.s.err);
	cr_assert_eq(hora_net_loop_call(r.s.loop, send_self, &r.s), 0); /* bound: no refusal */
	for (int i = 0; i < 200 && atomic_load(&r.s.got) < 1; i++)
		sleep_ms(10);
	cr_assert_eq(atomic_load(&r.s.got), 1);
	cr_assert_eq(hora_net_loop_call(r.s.loop, send_closed, &r), 0);
	for (int i = 0; i < 200 && atomic_load(&r.refused) < 1; i++)
		sleep_ms(10);
	cr_assert_eq(atomic_load(&r.refused), 1, "no port-unreachable report");
	cr_assert_eq(r.to.sin_port, r.closed.sin_port, "reported port %u, sent to %u",
		     ntohs(r.to.sin_port), ntohs(r.closed.sin_port));
	cr_assert_eq(r.to.sin_addr.s_addr, r.closed.sin_addr.s_addr);
	cr_assert_eq(hora_net_loop_call(r.s.loop, send_self, &r.s), 0); /* still receiving */
	for (int i = 0; i < 200 && atomic_load(&r.s.got) < 2; i++)
		sleep_ms(10);
	cr_assert_eq(atomic_load(&r.s.got), 2, "no datagram received after the refusal");
	cr_assert_eq(atomic_load(&r.refused), 1);
	cr_assert_eq(hora_net_loop_call(r.s.loop, close_refusing, &r), 0);
	hora_net_loop_destroy(r.s.loop);
}

/* Datagrams already queued are read before the error queue: a member's
 * LEAVE sent before its socket closed must not come after the refusal of a
 * probe sent later. One loop call queues "a", a datagram to a closed port
 * and "b" while the comm thread is busy in it; the callbacks then see a, b,
 * and only then the refusal. */
struct order {
	struct refusal r;
	char seen[8];
	atomic_int n;
};

static void on_dgram_order(void *arg, const struct sockaddr_in *from, const uint8_t *buf, size_t len)
{
	struct order *o = arg;
	(void)from;
	int i = atomic_fetch_add(&o->n, 1);
	if (i < 7 && len)
		o->seen[i] = (char)buf[0];
}

static void on_refused_order(void *arg, const struct sockaddr_in *to)
{
	struct order *o = arg;
	(void)to;
	int i = atomic_fetch_add(&o->n, 1);
	if (i < 7)
		o->seen[i] = 'R';
	atomic_fetch_add(&o->r.refused, 1);
}

static void open_order(void *arg)
{
	struct order *o = arg;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	o->r.s.rc = hora_net_dgram_open(o->r.s.loop, &a, 256, on_dgram_order, o, &o->r.s.bound, &o->r.s.d,
					o->r.s.err, sizeof(o->r.s.err));
	if (!o->r.s.rc)
		o->r.s.rc = hora_net_dgram_on_refused(o->r.s.d, on_refused_order);
}

static void queue_three(void *arg)
{
	struct order *o = arg;
	hora_net_dgram_send(o->r.s.d, &o->r.s.bound, "a", 1);
	hora_net_dgram_send(o->r.s.d, &o->r.closed, "?", 1);
	sleep_ms(20); /* the ICMP is on the error queue before "b" is sent */
	hora_net_dgram_send(o->r.s.d, &o->r.s.bound, "b", 1);
	sleep_ms(20);
}

static void close_order(void *arg)
{
	struct order *o = arg;
	hora_net_dgram_close(o->r.s.d);
}

Test(net_service, queued_datagrams_are_read_before_a_refusal, .timeout = 30)
{
	struct order o = {.r.s.loop = tn_loop(1, 1, NULL)};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&o.r.closed, &al), 0);
	close(fd);
	cr_assert_eq(hora_net_loop_call(o.r.s.loop, open_order, &o), 0);
	cr_assert_eq(o.r.s.rc, 0, "%s", o.r.s.err);
	cr_assert_eq(hora_net_loop_call(o.r.s.loop, queue_three, &o), 0);
	for (int i = 0; i < 200 && atomic_load(&o.n) < 3; i++)
		sleep_ms(10);
	cr_assert_eq(atomic_load(&o.n), 3, "seen '%s'", o.seen);
	cr_assert_str_eq(o.seen, "abR", "the refusal came before a queued datagram");
	cr_assert_eq(hora_net_loop_call(o.r.s.loop, close_order, &o), 0);
	hora_net_loop_destroy(o.r.s.loop);
}

/* ---- membership over loops -------------------------------------------------------- */

#define N 3

static void app_status(void *arg, struct hora_swim_status *st)
{
	const char *say = arg;
	st->len = strlen(say);
	memcpy(st->data, say, st->len);
}

Test(net_membership, members_agree_and_carry_opaque_status_bytes, .timeout = 60)
{
	struct hora_net_loop *l[N];
	struct hora_net_membership *m[N];
	struct hora_swim_addr seed = {0};
	char err[256];
	for (int i = 0; i < N; i++) {
		l[i] = tn_loop(1, (uint32_t)i, NULL);
		struct hora_swim_cfg c;
		hora_swim_cfg_default(&c);
		c.min_members = N;
		c.probe_interval_ms = 50;
		c.ping_timeout_ms = 20;
		c.suspect_timeout_ms = 2000;
		uint16_t port;
		int rc = hora_net_membership_create(l[i], &c, "127.0.0.1", 0, &port, &seed, i ? 1 : 0, &m[i],
						    err, sizeof(err));
		cr_assert_eq(rc, 0, "member %d: %s", i, err);
		if (!i) {
			cr_assert_eq(hora_net_swim_addr("127.0.0.1:0", &seed), 0);
			seed.port = port;
		}
	}
	struct hora_swim_view v;
	int rank = -1;
	bool paused = true;
	int ok = 0;
	for (int t = 0; t < 1000 && ok < N; t++) {
		uint64_t id0 = 0;
		ok = 0;
		for (int i = 0; i < N; i++) {
			hora_net_membership_view(m[i], &v, &rank, &paused, NULL, 0);
			if (!i)
				id0 = v.id;
			ok += v.n == N && rank >= 0 && !paused && v.id == id0;
		}
		if (ok < N)
			sleep_ms(20);
	}
	cr_assert_eq(ok, N, "no view of %d members agreed", N);
	hora_net_membership_view(m[0], &v, &rank, &paused, NULL, 0);
	cr_assert(hora_net_membership_joined(m[1]));
	cr_assert_eq(hora_net_membership_alive(m[0]), N);
	/* member 1 says 32 bytes, member 2 nothing: member 0 reads them by rank */
	static char say[] = "0123456789abcdef0123456789ABCDEF";
	int r1 = -1, r2 = -1;
	for (int i = 0; i < N; i++) {
		struct hora_swim_view vi;
		int ri;
		hora_net_membership_view(m[i], &vi, &ri, &paused, NULL, 0);
		if (i == 1)
			r1 = ri;
		if (i == 2)
			r2 = ri;
	}
	cr_assert_eq(hora_net_membership_status_source(m[1], app_status, say), 0);
	int64_t sent;
	struct hora_swim_status st;
	cr_assert_eq(hora_net_membership_status(m[0], r1, 0, &st), -ENOENT, "an answer before asking");
	int got1 = -ENOENT, got2 = -ENOENT;
	struct hora_swim_status st2;
	for (int t = 0; t < 50 && (got1 || got2); t++) {
		cr_assert_eq(hora_net_membership_status_query(m[0], &sent), 0);
		sleep_ms(50);
		got1 = hora_net_membership_status(m[0], r1, sent, &st);
		got2 = hora_net_membership_status(m[0], r2, sent, &st2);
	}
	cr_assert_eq(got1, 0, "no STATUS answer from member 1");
	cr_assert_eq(st.len, HORA_SWIM_STATUS_MAX);
	cr_assert_eq(memcmp(st.data, say, HORA_SWIM_STATUS_MAX), 0);
	cr_assert_eq(got2, 0, "no STATUS answer from member 2");
	cr_assert_eq(st2.len, 0, "a member without a source answers with no bytes");
	hora_net_membership_leave(m[2]);
	for (int i = 0; i < N; i++) {
		hora_net_membership_destroy(m[i]);
		hora_net_loop_destroy(l[i]);
	}
}

/* A wait on another thread when the membership is destroyed returns
 * -ESHUTDOWN, and destroy frees nothing before it has left (it woke into
 * freed memory before; ASan shows it). */
struct waiter {
	struct hora_net_membership *m;
	uint64_t id;
	bool paused;
	atomic_int tid;
	int rc;
};

/* until thread tid sleeps (state S in /proc: inside the condition wait,
 * or, for a moment, on the lock before it) */
static void wait_until_sleeping(int tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = 0;
		const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
		if (p && p[1] == ' ' && p[2] == 'S')
			return;
		sleep_ms(1);
	}
}

static void *wait_forever(void *p)
{
	struct waiter *w = p;
	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	w->rc = hora_net_membership_wait(w->m, w->id, w->paused, -1);
	return NULL;
}

Test(net_membership, destroy_wakes_a_waiter_on_another_thread_first, .timeout = 30)
{
	struct hora_net_loop *l = tn_loop(1, 0, NULL);
	struct hora_swim_cfg c;
	hora_swim_cfg_default(&c);
	c.min_members = 2; /* never reached: the view stays as it is */
	uint16_t port;
	char err[256];
	struct waiter w = {0};
	cr_assert_eq(hora_net_membership_create(l, &c, "127.0.0.1", 0, &port, NULL, 0, &w.m, err,
						sizeof(err)),
		     0, "%s", err);
	struct hora_swim_view v;
	int rank;
	sleep_ms(300); /* let the lone member settle on its view */
	hora_net_membership_view(w.m, &v, &rank, &w.paused, NULL, 0);
	w.id = v.id;
	pthread_t th;
	pthread_create(&th, NULL, wait_forever, &w);
	while (!atomic_load(&w.tid))
		sleep_ms(1);
	wait_until_sleeping(atomic_load(&w.tid));
	sleep_ms(20); /* past the lock, if it was the lock it slept on */
	hora_net_membership_destroy(w.m);
	pthread_join(th, NULL);
	cr_assert_eq(w.rc, -ESHUTDOWN, "rc %d", w.rc);
	hora_net_loop_destroy(l);
}
