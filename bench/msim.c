/* msim.c - the simulation of msim.h: an event heap (time, then order of
 * scheduling), members' ticks when their state machine asks
 * (hora_swim_next_ms), datagrams delivered after a drawn latency or lost,
 * port unreachable sent back for a killed member's host. */
#include "msim.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EV_TICK, EV_DGRAM, EV_REFUSED };

struct ev {
	int64_t t;    /* us */
	uint64_t seq; /* ties: in the order scheduled */
	int kind, to, from;
	uint32_t gen; /* EV_TICK: the process it was for */
	uint16_t len;
	uint8_t *buf;
};

struct msim {
	struct msim_cfg cfg;
	struct ev *heap;
	size_t nheap, cap;
	uint64_t seq;
	int64_t now;
	struct hora_swim **sw;
	bool *up, *refuses;
	uint32_t *gen;     /* processes started per member */
	int64_t *tick_at;  /* when the pending tick that counts runs */
	uint64_t *tick_seq; /* and its event's seq: an older one is stale */
	uint64_t *uid;
	uint64_t sent_msgs, sent_bytes;
};

/* ---- the one random source ------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull); /* splitmix64 */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_unit(void) /* (0, 1] */
{
	return ((double)(rng64() >> 11) + 1.0) / 9007199254740992.0;
}

static const char *rb_name(void)
{
	return "hora-msim";
}

static uint32_t rb_random(void)
{
	return (uint32_t)(rng64() >> 32);
}

static void rb_buf(void *const buf, const size_t size)
{
	uint8_t *p = buf;
	for (size_t i = 0; i < size; i += 8) {
		const uint64_t r = rng64();
		memcpy(p + i, &r, size - i < 8 ? size - i : 8);
	}
}

static randombytes_implementation rb_impl = {.implementation_name = rb_name, .random = rb_random,
					     .buf = rb_buf};

/* ---- events ------------------------------------------------------------------ */

static bool before(const struct ev *a, const struct ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(struct msim *m, struct ev e)
{
	if (m->nheap == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 4096;
		struct ev *h = realloc(m->heap, m->cap * sizeof(*h));
		if (!h) {
			fprintf(stderr, "hora bench membership: out of memory (%zu events)\n", m->nheap);
			exit(1);
		}
		m->heap = h;
	}
	e.seq = m->seq++;
	size_t i = m->nheap++;
	while (i && before(&e, &m->heap[(i - 1) / 2])) {
		m->heap[i] = m->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	m->heap[i] = e;
}

static struct ev pop(struct msim *m)
{
	struct ev top = m->heap[0], last = m->heap[--m->nheap];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= m->nheap)
			break;
		if (c + 1 < m->nheap && before(&m->heap[c + 1], &m->heap[c]))
			c++;
		if (!before(&m->heap[c], &last))
			break;
		m->heap[i] = m->heap[c];
		i = c;
	}
	if (m->nheap)
		m->heap[i] = last;
	return top;
}

static struct hora_swim_addr addr_of(int i)
{
	return (struct hora_swim_addr){.ip = 0x0100007f + ((uint32_t)(i / 250) << 16),
				       .port = (uint16_t)(20000 + i % 250)};
}

static int index_of(const struct msim *m, struct hora_swim_addr a)
{
	const int i = (int)((a.ip - 0x0100007f) >> 16) * 250 + (a.port - 20000);
	return i >= 0 && i < m->cfg.n && a.port >= 20000 && a.port < 20250 ? i : -1;
}

/* half the mean fixed, the rest uniform up to the mean (integer arithmetic:
 * no libm, whose variants differ by CPU, in a deterministic run) */
static int64_t latency(const struct msim *m)
{
	const uint64_t mean_us = (uint64_t)(m->cfg.latency_ms * 1e3);
	return (int64_t)(mean_us / 2 + (mean_us ? rng64() % (mean_us + 1) : 0)) + 1;
}

/* member i's datagrams out, and its next tick */
static void flush(struct msim *m, int i)
{
	struct hora_swim_out o;
	while (hora_swim_pop(m->sw[i], &o)) {
		m->sent_msgs++;
		m->sent_bytes += o.len;
		const int to = index_of(m, o.to);
		if (to < 0 || rng_unit() <= m->cfg.loss)
			continue;
		struct ev e = {.t = m->now + latency(m), .kind = EV_DGRAM, .to = to, .from = i,
			       .len = (uint16_t)o.len, .buf = malloc(o.len)};
		if (!e.buf)
			continue;
		memcpy(e.buf, o.buf, o.len);
		push(m, e);
	}
	const int64_t t = m->now + 1000 * (int64_t)hora_swim_next_ms(m->sw[i], m->now / 1000);
	if (m->tick_at[i] < m->now || t < m->tick_at[i]) {
		m->tick_at[i] = t;
		m->tick_seq[i] = m->seq; /* the seq push gives it */
		push(m, (struct ev){.t = t, .kind = EV_TICK, .to = i, .gen = m->gen[i]});
	}
}

static void deliver(struct msim *m, const struct ev *e)
{
	const int64_t ms = m->now / 1000;
	if (e->kind == EV_TICK) {
		if (m->up[e->to] && e->gen == m->gen[e->to] && e->seq == m->tick_seq[e->to]) {
			m->tick_at[e->to] = -1; /* none pending */
			hora_swim_tick(m->sw[e->to], ms);
			flush(m, e->to);
		}
	} else if (e->kind == EV_DGRAM) {
		if (m->up[e->to]) { /* as the real driver (membership.c): input, then a tick */
			hora_swim_input(m->sw[e->to], ms, addr_of(e->from), e->buf, e->len);
			hora_swim_tick(m->sw[e->to], ms);
			flush(m, e->to);
		} else if (m->refuses[e->to] && m->up[e->from] && rng_unit() > m->cfg.loss) {
			push(m, (struct ev){.t = m->now + latency(m), .kind = EV_REFUSED, .to = e->from,
					    .from = e->to});
		}
		free(e->buf);
	} else if (m->up[e->to]) { /* EV_REFUSED: the ICMP about `from` reaches `to` */
		hora_swim_refused(m->sw[e->to], ms, addr_of(e->from));
		hora_swim_tick(m->sw[e->to], ms);
		flush(m, e->to);
	}
}

/* ---- the API ------------------------------------------------------------------ */

struct msim *msim_create(const struct msim_cfg *cfg, char *err, size_t errlen)
{
	if (cfg->n < 2 || cfg->n > HORA_SWIM_MAX_VIEW || cfg->loss < 0 || cfg->loss >= 1 || cfg->latency_ms < 0) {
		snprintf(err, errlen, "need 2 <= members <= %d (a view's most members), 0 <= loss < 1, latency >= 0",
			 HORA_SWIM_MAX_VIEW);
		return NULL;
	}
	rng_state = cfg->seed;
	randombytes_set_implementation(&rb_impl);
	struct msim *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cfg = *cfg;
	const size_t n = (size_t)cfg->n;
	m->sw = calloc(n, sizeof(*m->sw));
	m->up = calloc(n, sizeof(*m->up));
	m->refuses = calloc(n, sizeof(*m->refuses));
	m->gen = calloc(n, sizeof(*m->gen));
	m->tick_at = calloc(n, sizeof(*m->tick_at));
	m->tick_seq = calloc(n, sizeof(*m->tick_seq));
	m->uid = calloc(n, sizeof(*m->uid));
	if (!m->sw || !m->up || !m->refuses || !m->gen || !m->tick_at || !m->tick_seq || !m->uid) {
		msim_destroy(m);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	return m;
}

void msim_destroy(struct msim *m)
{
	if (!m)
		return;
	for (int i = 0; m->sw && i < m->cfg.n; i++)
		hora_swim_destroy(m->sw[i]);
	while (m->nheap) {
		struct ev e = pop(m);
		free(e.buf);
	}
	free(m->heap);
	free(m->sw);
	free(m->up);
	free(m->refuses);
	free(m->gen);
	free(m->tick_at);
	free(m->tick_seq);
	free(m->uid);
	free(m);
}

void msim_start(struct msim *m, int i)
{
	hora_swim_destroy(m->sw[i]);
	struct hora_swim_cfg c = m->cfg.swim;
	m->gen[i]++;
	m->uid[i] = ((uint64_t)(i + 1) << 40) | (rng64() & ((1ull << 40) - 1));
	c.uid = m->uid[i];
	c.self = addr_of(i);
	m->sw[i] = hora_swim_create(&c);
	if (!m->sw[i]) {
		fprintf(stderr, "hora bench membership: member %d: hora_swim_create failed\n", i);
		exit(1);
	}
	m->up[i] = true;
	m->refuses[i] = false;
	struct hora_swim_addr seeds[3];
	int ns = 0;
	for (int k = 0; k < 3 && k < m->cfg.n; k++)
		if (k != i)
			seeds[ns++] = addr_of(k);
	hora_swim_join(m->sw[i], m->now / 1000, seeds, i ? ns : 0);
	m->tick_at[i] = -1;
	flush(m, i);
}

void msim_crash(struct msim *m, int i, bool refuses)
{
	m->up[i] = false;
	m->refuses[i] = refuses;
}

bool msim_up(const struct msim *m, int i)
{
	return m->up[i];
}

uint64_t msim_uid(const struct msim *m, int i)
{
	return m->uid[i];
}

void msim_run_until(struct msim *m, int64_t t_us)
{
	while (m->nheap && m->heap[0].t <= t_us) {
		struct ev e = pop(m);
		m->now = e.t;
		deliver(m, &e);
	}
	m->now = t_us;
}

int64_t msim_now_us(const struct msim *m)
{
	return m->now;
}

struct hora_swim *msim_swim(struct msim *m, int i)
{
	return m->sw[i];
}

void msim_traffic(const struct msim *m, uint64_t *msgs, uint64_t *bytes)
{
	*msgs = m->sent_msgs;
	*bytes = m->sent_bytes;
}
