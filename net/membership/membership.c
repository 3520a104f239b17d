/* membership.c - runs the SWIM state machine (swim.c) on a transport loop's
 * comm thread, through the loop's service only: one datagram socket (its
 * receive always armed by the loop, its port-unreachable answers passed on
 * to swim as proof of a member's death), one timer at the machine's next
 * deadline, calls posted for start, leave and status queries. After each
 * event the installed view is published, under m->lock, for other threads
 * (hora_net_membership_view/wait).
 *
 * Not here: the protocol itself (swim.c), anything about collectives.
 */
#include "net/membership/membership.h"

#include "net/util/clock.h"
#include "net/util/hostport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct hora_net_membership {
	struct hora_net_loop *loop;
	/* comm thread */
	struct hora_swim *swim;
	struct hora_net_dgram *udp;
	struct hora_net_timer *timer;
	uint64_t bad_mac_seen, refusals_seen;
	int reading_errors; /* flush is reading the error queue (its refusals flush again) */
	/* [lock] snapshot for other threads */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	bool dead;
	int waiters; /* threads inside hora_net_membership_wait (lock): destroy waits for them */
	struct hora_swim_view view;
	int rank;
	struct hora_swim_view first; /* the job's first view (hora_swim_first_view) */
	int first_rank;
	bool paused, joined;
	int alive; /* members this one believes alive, itself included */
	struct hora_swim_member members[HORA_SWIM_MAX_MEMBERS]; /* the table (loss watcher, start) */
	int nmembers;
	struct hora_swim_seed seeds[HORA_NET_MEMBERSHIP_SEEDS]; /* what joining met (messages) */
	int nseeds;
	bool secret_refused; /* every seed answered with another cluster secret */
	char why[128];
	struct hora_swim_stats stats;
	struct { /* STATUS answers of the view's members */
		uint64_t uid;
		struct hora_swim_status st;
		int64_t at; /* ms, the membership clock (now_ms); 0 = none */
	} status[HORA_SWIM_MAX_VIEW];
	int nstatus;
};

/* The swim clock (net/membership/swim.h): monotonic, offset once to the
 * wall clock so that members on hosts with synchronised clocks share
 * period boundaries. */
static int64_t clock_offset_ns;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void clock_init(void)
{
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_offset_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - hora_clock_ns();
}

static int64_t now_ms(void)
{
	pthread_once(&clock_once, clock_init);
	return (hora_clock_ns() + clock_offset_ns) / 1000000;
}

/* ---- comm thread ------------------------------------------------------------------ */

/* Send what swim queued, then publish the view for other threads. */
static void flush(struct hora_net_membership *m)
{
	struct hora_swim_out o;
	while (hora_swim_pop(m->swim, &o)) {
		struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(o.to.port),
					 .sin_addr.s_addr = o.to.ip};
		hora_net_dgram_send(m->udp, &to, o.buf, o.len); /* UDP: a drop is a loss */
	}
	if (m->reading_errors++ == 0) /* (its refusals flush again: once deep) */
		hora_net_dgram_read_errors(m->udp);
	m->reading_errors--;
	struct hora_swim_view v, first;
	int rank, first_rank;
	bool paused;
	char why[128];
	hora_swim_view_get(m->swim, &v, &rank, &paused, why, sizeof(why));
	hora_swim_first_view(m->swim, &first, &first_rank);
	struct hora_swim_member mem[HORA_SWIM_MAX_MEMBERS];
	int nm = hora_swim_members(m->swim, mem, HORA_SWIM_MAX_MEMBERS), alive = 0;
	for (int i = 0; i < nm; i++)
		alive += mem[i].state == HORA_SWIM_ALIVE || mem[i].state == HORA_SWIM_SUSPECT;
	const bool joined = hora_swim_joined(m->swim), refused = hora_swim_secret_refused(m->swim);
	pthread_mutex_lock(&m->lock);
	bool changed = v.id != m->view.id || paused != m->paused || joined != m->joined ||
		       alive != m->alive || refused != m->secret_refused;
	m->alive = alive;
	m->nmembers = nm;
	memcpy(m->members, mem, sizeof(mem[0]) * (size_t)nm);
	m->nseeds = hora_swim_seeds(m->swim, m->seeds, HORA_NET_MEMBERSHIP_SEEDS);
	m->secret_refused = refused;
	m->view = v;
	m->rank = rank;
	m->first = first;
	m->first_rank = first_rank;
	m->paused = paused;
	m->joined = joined;
	snprintf(m->why, sizeof(m->why), "%s", why);
	hora_swim_stats_get(m->swim, &m->stats);
	m->nstatus = v.n;
	for (int i = 0; i < v.n; i++) {
		m->status[i].uid = v.uids[i];
		if (hora_swim_status_of(m->swim, v.uids[i], &m->status[i].st, &m->status[i].at))
			m->status[i].at = 0;
	}
	if (changed)
		pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

static void on_timer(void *arg)
{
	struct hora_net_membership *m = arg;
	hora_swim_tick(m->swim, now_ms());
	flush(m);
	hora_net_timer_arm(m->timer, hora_swim_next_ms(m->swim, now_ms()));
}

static void on_datagram(void *arg, const struct sockaddr_in *src, const uint8_t *buf, size_t len)
{
	struct hora_net_membership *m = arg;
	struct hora_swim_addr from = {src->sin_addr.s_addr, ntohs(src->sin_port)};
	hora_swim_input(m->swim, now_ms(), from, buf, len);
	struct hora_swim_stats st;
	hora_swim_stats_get(m->swim, &st);
	if (st.bad_mac > m->bad_mac_seen) {
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &src->sin_addr, ip, sizeof(ip));
		hora_net_refuse_log(m->loop, "membership: datagram from %s:%u failed authentication "
				    "(wrong cluster secret?)", ip, ntohs(src->sin_port));
		m->bad_mac_seen = st.bad_mac;
	}
	if (st.refusals_heard > m->refusals_seen) {
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &src->sin_addr, ip, sizeof(ip));
		hora_net_refuse_log(m->loop, "membership: %s:%u refused our JOIN: it holds another "
				    "cluster secret", ip, ntohs(src->sin_port));
		m->refusals_seen = st.refusals_heard;
	}
	hora_swim_tick(m->swim, now_ms());
	flush(m);
}

/* A member's host answered port unreachable: the member is gone (swim
 * declares it dead at once, and it counts in no majority). */
static void on_refused(void *arg, const struct sockaddr_in *to)
{
	struct hora_net_membership *m = arg;
	hora_swim_refused(m->swim, now_ms(), (struct hora_swim_addr){to->sin_addr.s_addr, ntohs(to->sin_port)});
	flush(m);
}

struct start {
	struct hora_net_membership *m;
	struct hora_swim_cfg cfg;
	struct sockaddr_in addr;
	uint16_t bound;
	const struct hora_swim_addr *seeds;
	int nseeds;
	int rc;
	char err[256];
};

static void do_start(void *arg)
{
	struct start *s = arg;
	struct hora_net_membership *m = s->m;
	struct sockaddr_in b;
	char why[200];
	s->rc = hora_net_dgram_open(m->loop, &s->addr, HORA_SWIM_MTU + 64, on_datagram, m, &b, &m->udp,
				    why, sizeof(why));
	if (s->rc) {
		snprintf(s->err, sizeof(s->err), "membership: %s", why);
		return;
	}
	hora_net_dgram_on_refused(m->udp, on_refused); /* without it: detection by timeouts only */
	s->bound = ntohs(b.sin_port);
	s->cfg.self.ip = b.sin_addr.s_addr;
	s->cfg.self.port = s->bound;
	s->cfg.secret = hora_net_loop_secret(m->loop, &s->cfg.secret_len);
	if (hora_swim_cfg_check(&s->cfg, s->err, sizeof(s->err))) {
		s->rc = -EINVAL;
	} else if (!(m->swim = hora_swim_create(&s->cfg))) {
		s->rc = -ENOMEM;
		snprintf(s->err, sizeof(s->err), "membership: cannot create the SWIM state");
	} else if ((s->rc = hora_net_timer_create(m->loop, on_timer, m, &m->timer))) {
		snprintf(s->err, sizeof(s->err), "membership: cannot create its timer");
	}
	if (s->rc) {
		hora_net_dgram_close(m->udp);
		hora_swim_destroy(m->swim);
		m->udp = NULL;
		m->swim = NULL;
		return;
	}
	hora_swim_join(m->swim, now_ms(), s->seeds, s->nseeds);
	flush(m);
	hora_net_timer_arm(m->timer, hora_swim_next_ms(m->swim, now_ms()));
}

static void do_stop(void *arg)
{
	struct hora_net_membership *m = arg;
	hora_net_timer_destroy(m->timer);
	hora_net_dgram_close(m->udp);
	hora_swim_destroy(m->swim);
	m->timer = NULL;
	m->udp = NULL;
	m->swim = NULL;
}

static void do_leave(void *arg)
{
	struct hora_net_membership *m = arg;
	hora_swim_leave(m->swim, now_ms());
	flush(m);
}

/* ---- any thread -------------------------------------------------------------------- */

static struct hora_net_membership *alloc_membership(struct hora_net_loop *loop)
{
	struct hora_net_membership *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->loop = loop;
	m->rank = -1;
	m->first_rank = -1;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

static void free_membership(struct hora_net_membership *m)
{
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->cond);
	free(m);
}

int hora_net_membership_create(struct hora_net_loop *loop, const struct hora_swim_cfg *cfg,
			       const char *host, uint16_t port, uint16_t *bound,
			       const struct hora_swim_addr *seeds, int nseeds,
			       struct hora_net_membership **out, char *err, size_t errlen)
{
	*out = NULL;
	struct start s = {.cfg = *cfg, .seeds = seeds, .nseeds = nseeds, .rc = -ESHUTDOWN};
	s.addr.sin_family = AF_INET;
	s.addr.sin_port = htons(port);
	if (inet_pton(AF_INET, host, &s.addr.sin_addr) != 1) {
		snprintf(err, errlen, "membership: '%s' is not an IPv4 address", host);
		return -EINVAL;
	}
	if (!s.cfg.uid && getrandom(&s.cfg.uid, sizeof(s.cfg.uid), 0) != sizeof(s.cfg.uid))
		s.cfg.uid = (uint64_t)hora_clock_ns() ^ ((uint64_t)getpid() << 40);
	if (!(s.m = alloc_membership(loop))) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(s.err, sizeof(s.err), "membership: the transport loop is shut down");
	int rc = hora_net_loop_call(loop, do_start, &s);
	if (rc || s.rc) {
		snprintf(err, errlen, "%s", s.err);
		free_membership(s.m);
		return rc ? rc : s.rc;
	}
	if (bound)
		*bound = s.bound;
	*out = s.m;
	return 0;
}

void hora_net_membership_destroy(struct hora_net_membership *m)
{
	if (!m)
		return;
	int rc;
	while ((rc = hora_net_loop_call(m->loop, do_stop, m)) == -ENOMEM)
		usleep(1000); /* the comm thread still runs our callbacks: it must stop them */
	if (rc) /* -ESHUTDOWN: the comm thread is gone, nothing of ours runs any more */
		hora_swim_destroy(m->swim); /* its socket and timer go with the loop */
	pthread_mutex_lock(&m->lock);
	m->dead = true;
	pthread_cond_broadcast(&m->cond);
	while (m->waiters) /* a wait on another thread leaves before m goes */
		pthread_cond_wait(&m->cond, &m->lock);
	pthread_mutex_unlock(&m->lock);
	free_membership(m);
}

void hora_net_membership_leave(struct hora_net_membership *m)
{
	hora_net_loop_call(m->loop, do_leave, m);
}

int hora_net_swim_addr(const char *hp, struct hora_swim_addr *a)
{
	char host[64];
	uint16_t port;
	struct in_addr in;
	if (hora_hostport_split(hp, host, sizeof(host), &port) || inet_pton(AF_INET, host, &in) != 1)
		return -EINVAL;
	a->ip = in.s_addr;
	a->port = port;
	return 0;
}

int hora_net_membership_view(struct hora_net_membership *m, struct hora_swim_view *v, int *rank,
			     bool *paused, char *why, size_t whylen)
{
	pthread_mutex_lock(&m->lock);
	*v = m->view;
	*rank = m->rank;
	*paused = m->paused;
	if (why && whylen)
		snprintf(why, whylen, "%s", m->why);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int hora_net_membership_first_view(struct hora_net_membership *m, struct hora_swim_view *v, int *rank)
{
	pthread_mutex_lock(&m->lock);
	*v = m->first;
	*rank = m->first_rank;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int hora_net_membership_alive(struct hora_net_membership *m)
{
	pthread_mutex_lock(&m->lock);
	int n = m->alive;
	pthread_mutex_unlock(&m->lock);
	return n;
}

int hora_net_membership_state(struct hora_net_membership *m, uint64_t uid)
{
	int st = -ENOENT;
	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < m->nmembers; i++)
		if (m->members[i].uid == uid)
			st = m->members[i].state;
	pthread_mutex_unlock(&m->lock);
	return st;
}

int hora_net_membership_members(struct hora_net_membership *m, struct hora_swim_member *out, int cap)
{
	pthread_mutex_lock(&m->lock);
	int n = m->nmembers < cap ? m->nmembers : cap;
	memcpy(out, m->members, sizeof(out[0]) * (size_t)(n > 0 ? n : 0));
	pthread_mutex_unlock(&m->lock);
	return n;
}

int hora_net_membership_seeds(struct hora_net_membership *m, struct hora_swim_seed *out, int cap)
{
	pthread_mutex_lock(&m->lock);
	int n = m->nseeds < cap ? m->nseeds : cap;
	memcpy(out, m->seeds, sizeof(out[0]) * (size_t)(n > 0 ? n : 0));
	pthread_mutex_unlock(&m->lock);
	return n;
}

bool hora_net_membership_secret_refused(struct hora_net_membership *m)
{
	pthread_mutex_lock(&m->lock);
	bool r = m->secret_refused;
	pthread_mutex_unlock(&m->lock);
	return r;
}

bool hora_net_membership_joined(struct hora_net_membership *m)
{
	pthread_mutex_lock(&m->lock);
	bool j = m->joined;
	pthread_mutex_unlock(&m->lock);
	return j;
}

void hora_net_membership_stats(struct hora_net_membership *m, struct hora_swim_stats *st)
{
	pthread_mutex_lock(&m->lock);
	*st = m->stats;
	pthread_mutex_unlock(&m->lock);
}

int hora_net_membership_wait(struct hora_net_membership *m, uint64_t known, bool known_paused,
			     int timeout_ms)
{
	int64_t until = hora_clock_ns() + (int64_t)timeout_ms * 1000000;
	struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	m->waiters++;
	int alive0 = m->alive;
	while (m->view.id == known && m->paused == known_paused && m->alive == alive0 && !m->dead &&
	       !rc) {
		if (timeout_ms < 0)
			pthread_cond_wait(&m->cond, &m->lock);
		else if (pthread_cond_timedwait(&m->cond, &m->lock, &ts))
			rc = -ETIMEDOUT;
	}
	if (!rc && m->dead)
		rc = -ESHUTDOWN;
	if (!--m->waiters && m->dead)
		pthread_cond_broadcast(&m->cond); /* destroy waits for the last one */
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* ---- application status (opaque bytes) --------------------------------------------- */

struct status_call {
	struct hora_net_membership *m;
	hora_swim_status_fn get; /* set the source */
	void *arg;
	int64_t at; /* query: when it was sent; 0 = set the source */
};

static void do_status_source(void *arg)
{
	struct status_call *sc = arg;
	hora_swim_status_source(sc->m->swim, sc->get, sc->arg);
}

static void do_status_query(void *arg)
{
	struct status_call *sc = arg;
	sc->at = now_ms();
	hora_swim_status_query(sc->m->swim, sc->at);
	flush(sc->m);
}

int hora_net_membership_status_source(struct hora_net_membership *m, hora_swim_status_fn get,
				      void *arg)
{
	struct status_call sc = {.m = m, .get = get, .arg = arg};
	return hora_net_loop_call(m->loop, do_status_source, &sc);
}

int hora_net_membership_status_query(struct hora_net_membership *m, int64_t *sent_ms)
{
	struct status_call sc = {.m = m};
	int rc = hora_net_loop_call(m->loop, do_status_query, &sc);
	*sent_ms = sc.at;
	return rc;
}

int hora_net_membership_status(struct hora_net_membership *m, int rank, int64_t since_ms,
			       struct hora_swim_status *st)
{
	pthread_mutex_lock(&m->lock);
	int rc = -ENOENT;
	if (rank >= 0 && rank < m->nstatus && m->status[rank].at && m->status[rank].at >= since_ms) {
		*st = m->status[rank].st;
		rc = 0;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}
