/* swim.c - SWIM failure detection + gossip dissemination + agreed views.
 *
 * SWIM (Das, Gupta, Motivala 2002): every protocol period T each member pings
 * one other member; without an ACK within ping_timeout it asks k others to
 * ping on its behalf (PING_REQ); without any ACK within T of the PING the
 * target becomes SUSPECT (the probe's own deadline: a period that started late
 * and is short does not cut it short); a suspect not refuted within
 * suspect_timeout becomes DEAD. A member that hears it is suspected (or dead)
 * refutes by raising its incarnation. State changes ride on every message
 * (piggyback), each sent lambda*log2(N+1) times.
 *
 * Whom to ping: periods start on multiples of T of the caller's clock, and in
 * period p the member at index i of the live members sorted by uid pings
 * index i + k(p), k(p) in 1..m-1 the same keyed hash of p at every member.
 * Members that agree on the table thus ping every live member exactly once
 * per period, so a crash is suspected within 2T (the paper's random choice
 * leaves a member unprobed for j periods with probability about e^-j: a crash
 * detected 3-4 periods late now and then), and the shift changing every
 * period still spreads gossip in O(log N) rounds.
 *
 * Views: the lowest-uid live worker proposes (id, members sorted by uid);
 * it commits once every proposed member and a majority of the previous view
 * acknowledged. A member left out of the view, or seeing no majority of its
 * view alive, reports itself paused. A member whose view lacks the
 * coordinator sends it that view (a coordinator back from a partition's
 * minority side learns the newer view). Layouts: net/MEMBERSHIP.md.
 */
#include "net/membership/swim.h"
#include "net/transport/endian.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/membership/swim_internal.h"

void hora_swim_cfg_default(struct hora_swim_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->probe_interval_ms = 200;
	c->ping_timeout_ms = 80;
	c->suspect_timeout_ms = 1000;
	c->indirect_probes = 3;
	c->retransmit_mult = 3;
	c->min_members = 1;
	c->join_retry_ms = 500;
	c->refusal_proves_death = 1;
}

static int tx_budget(const struct hora_swim *s)
{
	int lg = 1;
	while ((1 << lg) < s->n + 1)
		lg++;
	return s->cfg.retransmit_mult * lg;
}

int hora_swim_cfg_check(const struct hora_swim_cfg *c, char *err, size_t errlen)
{
	if (c->probe_interval_ms < 1)
		snprintf(err, errlen, "membership.probe_interval_ms must be at least 1 (got %d)",
			 c->probe_interval_ms);
	else if (c->ping_timeout_ms < 1 || c->ping_timeout_ms >= c->probe_interval_ms)
		snprintf(err, errlen,
			 "membership.ping_timeout_ms (%d) must be at least 1 and below "
			 "membership.probe_interval_ms (%d): the indirect probes go out between the two",
			 c->ping_timeout_ms, c->probe_interval_ms);
	else if (c->suspect_timeout_ms < c->probe_interval_ms)
		snprintf(err, errlen,
			 "membership.suspect_timeout_ms (%d) must be at least membership.probe_interval_ms (%d)",
			 c->suspect_timeout_ms, c->probe_interval_ms);
	else if (c->first_view_workers < 0 || c->first_view_workers > HORA_SWIM_MAX_VIEW)
		snprintf(err, errlen, "first_view_workers must be 0..%d (got %d)", HORA_SWIM_MAX_VIEW,
			 c->first_view_workers);
	else
		return 0;
	return -1;
}

struct hora_swim *hora_swim_create(const struct hora_swim_cfg *cfg)
{
	if (!cfg->secret || cfg->secret_len < 16 || cfg->secret_len > sizeof(((struct hora_swim *)0)->key) ||
	    hora_swim_cfg_check(cfg, NULL, 0) || sodium_init() < 0)
		return NULL;
	struct hora_swim *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->cfg = *cfg;
	memcpy(s->key, cfg->secret, cfg->secret_len);
	s->cfg.secret = s->key;
	crypto_generichash_state gh;
	static const char domain[] = "hora swim probe schedule v1";
	crypto_generichash_init(&gh, NULL, 0, sizeof(s->sched_key));
	crypto_generichash_update(&gh, (const uint8_t *)domain, sizeof(domain) - 1);
	crypto_generichash_update(&gh, s->key, cfg->secret_len);
	crypto_generichash_final(&gh, s->sched_key, sizeof(s->sched_key));
	s->mem = calloc(HORA_SWIM_MAX_MEMBERS, sizeof(*s->mem));
	s->out = calloc(HORA_SWIM_OUTBOX, sizeof(*s->out));
	if (!s->mem || !s->out) {
		hora_swim_destroy(s);
		return NULL;
	}
	s->n = 1;
	s->mem[0].m = (struct hora_swim_member){.uid = cfg->uid, .addr = cfg->self,
						.data_port = cfg->data_port, .role = cfg->role,
						.state = HORA_SWIM_ALIVE, .incarnation = 1};
	s->mem[0].tx_left = tx_budget(s);
	randombytes_buf(&s->seq, sizeof(s->seq));
	s->seq &= 0xffffffffull; /* start low but unpredictable */
	return s;
}

void hora_swim_destroy(struct hora_swim *s)
{
	if (!s)
		return;
	free(s->mem);
	free(s->out);
	free(s->seeds);
	sodium_memzero(s->key, sizeof(s->key));
	sodium_memzero(s->sched_key, sizeof(s->sched_key));
	free(s);
}

/* ---- encoding -------------------------------------------------------------- */

struct msg {
	uint8_t *b;
	size_t len;
	int nupd;
};

static void msg_begin(struct hora_swim *s, struct msg *m, uint8_t *buf, int type, uint32_t aux32,
		      uint64_t aux64)
{
	m->b = buf;
	hora_put32(buf, MAGIC);
	buf[4] = VERSION;
	buf[5] = (uint8_t)type;
	hora_put16(buf + 6, 0);
	hora_put64(buf + 8, s->cfg.uid);
	hora_put64(buf + 16, ++s->seq);
	hora_put32(buf + 24, s->mem[0].m.incarnation);
	hora_put32(buf + 28, aux32);
	hora_put64(buf + 32, aux64);
	hora_put32(buf + 40, 0); /* body length, set by msg_body */
	m->len = HDR;
	m->nupd = 0;
}

static void msg_body(struct msg *m, const void *body, size_t n)
{
	memcpy(m->b + m->len, body, n);
	m->len += n;
	hora_put32(m->b + 40, (uint32_t)n);
}

static void put_upd(uint8_t *p, const struct hora_swim_member *x)
{
	hora_put64(p, x->uid);
	hora_put32(p + 8, x->addr.ip);
	hora_put16(p + 12, x->addr.port);
	hora_put16(p + 14, x->data_port);
	hora_put32(p + 16, x->incarnation);
	p[20] = x->state;
	p[21] = x->role;
	p[22] = p[23] = 0;
}

static bool msg_upd(struct msg *m, const struct hora_swim_member *x)
{
	if (m->len + UPD + MAC > HORA_SWIM_MTU)
		return false;
	put_upd(m->b + m->len, x);
	m->len += UPD;
	m->nupd++;
	hora_put16(m->b + 6, (uint16_t)m->nupd);
	return true;
}

/* A member's entry as others are told it: a doubted death as a suspicion. */
static bool msg_mem(struct msg *m, const struct mem *x)
{
	struct hora_swim_member u = x->m;
	if (x->doubted && u.state == HORA_SWIM_DEAD)
		u.state = HORA_SWIM_SUSPECT;
	return msg_upd(m, &u);
}

/* Piggyback pending updates, freshest first. */
static void piggyback(struct hora_swim *s, struct msg *m)
{
	for (;;) {
		struct mem *best = NULL;
		for (int i = 0; i < s->n; i++)
			if (s->mem[i].tx_left > 0 && (!best || s->mem[i].tx_left > best->tx_left))
				best = &s->mem[i];
		if (!best || !msg_mem(m, best))
			return;
		best->tx_left--;
	}
}

static void msg_send(struct hora_swim *s, struct msg *m, struct hora_swim_addr to)
{
	crypto_auth_hmacsha256_state st;
	uint8_t full[32];
	crypto_auth_hmacsha256_init(&st, s->key, s->cfg.secret_len);
	crypto_auth_hmacsha256_update(&st, m->b, m->len);
	crypto_auth_hmacsha256_final(&st, full);
	memcpy(m->b + m->len, full, MAC);
	m->len += MAC;
	hora_swim_out_push(s, to, m->b, m->len);
}

void hora_swim_out_push(struct hora_swim *s, struct hora_swim_addr to, const uint8_t *buf, size_t len)
{
	if (s->out_n == HORA_SWIM_OUTBOX)
		return; /* driver not keeping up: drop, UDP semantics */
	struct hora_swim_out *o = &s->out[(s->out_head + s->out_n) % HORA_SWIM_OUTBOX];
	o->to = to;
	o->len = len;
	memcpy(o->buf, buf, len);
	s->out_n++;
	s->st.sent_msgs++;
	s->st.sent_bytes += len;
}

uint64_t hora_swim_send_self(struct hora_swim *s, int type, struct hora_swim_addr to)
{
	uint8_t buf[HORA_SWIM_MTU];
	struct msg m;
	msg_begin(s, &m, buf, type, 0, 0);
	msg_upd(&m, &s->mem[0].m);
	msg_send(s, &m, to);
	return s->seq;
}

static void send_simple(struct hora_swim *s, int type, uint32_t aux32, uint64_t aux64,
			const void *body, size_t blen, struct hora_swim_addr to, bool gossip)
{
	uint8_t buf[HORA_SWIM_MTU];
	struct msg m;
	msg_begin(s, &m, buf, type, aux32, aux64);
	if (blen)
		msg_body(&m, body, blen);
	if (gossip) {
		msg_upd(&m, &s->mem[0].m); /* whoever we talk to learns us directly */
		piggyback(s, &m);
	}
	msg_send(s, &m, to);
}

/* Our whole table (but departed members and doubted deaths), in as many
 * datagrams as needed. */
static void send_table(struct hora_swim *s, int type, struct hora_swim_addr to)
{
	int i = 0;
	do {
		uint8_t buf[HORA_SWIM_MTU];
		struct msg m;
		msg_begin(s, &m, buf, type, 0, 0);
		for (; i < s->n; i++)
			if (s->mem[i].m.state != HORA_SWIM_LEFT && !s->mem[i].doubted && !msg_mem(&m, &s->mem[i]))
				break;
		msg_send(s, &m, to);
	} while (i < s->n);
}

bool hora_swim_pop(struct hora_swim *s, struct hora_swim_out *out)
{
	if (!s->out_n)
		return false;
	*out = s->out[s->out_head];
	s->out_head = (s->out_head + 1) % HORA_SWIM_OUTBOX;
	s->out_n--;
	return true;
}

/* ---- member table ------------------------------------------------------------ */

/* This member's entry (a new incarnation: a refutation, a resume) to every
 * member it knows at once, the dead too (they may hold it dead), N - 1
 * datagrams: every member that took the suspicion runs its own timer, and
 * gossip, which carried the suspicion, would carry the refutation no
 * faster, only later (at 5 % loss, 128 members, most false suspicions
 * became deaths before it reached them all). */
static void announce_self(struct hora_swim *s, int type)
{
	for (int j = 1; j < s->n; j++)
		if (s->mem[j].m.state != HORA_SWIM_LEFT) {
			uint8_t buf[HORA_SWIM_MTU];
			struct msg m;
			msg_begin(s, &m, buf, type, 0, 0);
			msg_upd(&m, &s->mem[0].m);
			msg_send(s, &m, s->mem[j].m.addr);
		}
}

static void changed(struct hora_swim *s, struct mem *x, int64_t now)
{
	x->m.state_since_ms = now;
	x->tx_left = tx_budget(s);
}

/* The others took this member for dead: it was cut off or frozen, and the
 * deaths it declared itself meanwhile are likely the mirror image (the
 * members it could not reach; the first ones declared while the rest were
 * not yet suspected, with what looked like a majority). Without a proof (a
 * port that answered unreachable) they become doubted deaths
 * (declare_dead), told to nobody: gossiped as deaths, they evicted healthy
 * members once the partition healed. Deaths learned from others, or that
 * others confirmed, stay, and so do those a committed view already left out
 * (a majority agreed on them). */
static void doubt_own_deaths(struct hora_swim *s)
{
	for (int i = 1; i < s->n; i++) {
		struct mem *x = &s->mem[i];
		if (x->m.state == HORA_SWIM_DEAD && x->declared && !x->refused && !x->doubted &&
		    in_view(&s->view, x->m.uid)) {
			x->doubted = true;
			x->tx_left = 0;
		}
	}
}

/* Apply an update about member u (SWIM precedence). */
static void apply(struct hora_swim *s, int64_t now, const struct hora_swim_member *u)
{
	if (u->uid == s->cfg.uid) {
		/* about me: refute suspicion or death */
		if ((u->state == HORA_SWIM_SUSPECT || u->state == HORA_SWIM_DEAD) &&
		    u->incarnation >= s->mem[0].m.incarnation && !s->left) {
			s->mem[0].m.incarnation = u->incarnation + 1;
			changed(s, &s->mem[0], now);
			s->st.refutations++;
			announce_self(s, T_NEWS);
		}
		if (u->state == HORA_SWIM_DEAD && u->incarnation + 1 >= s->mem[0].m.incarnation && !s->left)
			doubt_own_deaths(s); /* a current verdict, just refuted: not a stale one resent */
		return;
	}
	struct mem *x = find(s, u->uid);
	if (!x) {
		if (u->state == HORA_SWIM_LEFT || u->state == HORA_SWIM_DEAD ||
		    s->n == HORA_SWIM_MAX_MEMBERS)
			return;
		x = &s->mem[s->n++];
		memset(x, 0, sizeof(*x));
		x->m = *u;
		x->m.last_seq = 0;
		changed(s, x, now);
		return;
	}
	struct hora_swim_member *m = &x->m;
	if (m->state == HORA_SWIM_LEFT)
		return;
	bool take = false;
	switch (u->state) {
	case HORA_SWIM_ALIVE:
		take = u->incarnation > m->incarnation;
		break;
	case HORA_SWIM_SUSPECT:
		take = (m->state == HORA_SWIM_ALIVE && u->incarnation >= m->incarnation) ||
		       (m->state != HORA_SWIM_DEAD && u->incarnation > m->incarnation);
		break;
	case HORA_SWIM_DEAD:
		if (m->state == HORA_SWIM_DEAD && u->incarnation >= m->incarnation) {
			if (x->doubted) /* a member with a majority saw it too: confirmed */
				changed(s, x, now);
			x->doubted = x->declared = false; /* no longer this member's verdict alone */
			return;
		}
		take = m->state != HORA_SWIM_DEAD && u->incarnation >= m->incarnation;
		break;
	case HORA_SWIM_LEFT:
		take = true;
		break;
	}
	if (!take)
		return;
	x->doubted = x->declared = x->raised = false;
	if (u->state == HORA_SWIM_ALIVE)
		x->refused = false; /* it refuted: alive somewhere */
	m->state = u->state;
	m->incarnation = u->incarnation;
	m->addr = u->addr;
	m->data_port = u->data_port;
	changed(s, x, now);
}

static void mark(struct hora_swim *s, struct mem *x, int state, int64_t now)
{
	if (x->m.state == state)
		return;
	x->doubted = x->declared = x->raised = false;
	x->m.state = (uint8_t)state;
	changed(s, x, now);
}

/* x's death to every live member at once (NEWS) instead of waiting for
 * gossip to carry it (N-1 datagrams), a death changing the view */
static void tell_dead(struct hora_swim *s, const struct mem *x)
{
	for (int j = 1; j < s->n; j++)
		if (s->mem[j].m.state == HORA_SWIM_ALIVE) {
			uint8_t buf[HORA_SWIM_MTU];
			struct msg m;
			msg_begin(s, &m, buf, T_NEWS, 0, 0);
			msg_upd(&m, &x->m);
			msg_send(s, &m, s->mem[j].m.addr);
		}
}

/* Whether the members of the installed view this member holds ALIVE (itself
 * included when it is one of them, x aside) are a majority of those not gone
 * for certain. */
static bool alive_majority(const struct hora_swim *s, const struct mem *x)
{
	int alive = in_view(&s->view, s->cfg.uid), ngone = 0;
	for (int j = 1; j < s->n; j++)
		if (in_view(&s->view, s->mem[j].m.uid) && &s->mem[j] != x) {
			alive += s->mem[j].m.state == HORA_SWIM_ALIVE;
			ngone += gone(&s->mem[j]);
		}
	return 2 * alive > s->view.n - ngone;
}

/* x is dead: told at once, unless doubted. A death declared without an
 * ALIVE majority of the view (this member cut off, most likely: the others
 * of its side are suspects too) is doubted: kept here, told to nobody (but
 * to x itself, which refutes it if alive: hora_swim_ask_proof), and it
 * removes no one from a view (desired) until it is settled: refuted,
 * confirmed by a member that has a majority (apply), proven by a refusal,
 * or judged again once this member has a majority back (rejudge). */
static void declare_dead(struct hora_swim *s, struct mem *x, int64_t now)
{
	mark(s, x, HORA_SWIM_DEAD, now);
	x->declared = true;
	s->st.deaths++;
	x->doubted = !x->refused && s->view.id && !alive_majority(s, x);
	if (x->doubted)
		x->tx_left = 0;
	else
		tell_dead(s, x);
}

/* A doubted death once this member has an ALIVE majority of its view again
 * (a partition healed host by host: some of the others are back, not yet
 * x): alive again here, told to nobody, for this member's own probes to
 * judge anew, indirect ones included, as any member's. Taken for a death
 * (or a suspicion that x, still out of reach, cannot refute in time), it
 * evicted a healthy member. */
static void rejudge(struct mem *x, int64_t now)
{
	x->doubted = x->declared = false;
	x->m.state = HORA_SWIM_ALIVE;
	x->m.state_since_ms = now;
	x->tx_left = 0;
}

/* ---- views --------------------------------------------------------------------- */

/* Live workers and doubted deaths, plus members of the installed view we
 * have not heard of yet (gossip about them is on its way; only evidence of
 * death removes one). */
static void desired(struct hora_swim *s, struct hora_swim_view *v)
{
	v->n = 0;
	for (int i = 0; i < s->n && v->n < HORA_SWIM_MAX_VIEW; i++)
		if (s->mem[i].m.role == HORA_SWIM_WORKER && (live(&s->mem[i]) || s->mem[i].doubted))
			v->uids[v->n++] = s->mem[i].m.uid;
	for (int i = 0; i < s->view.n && v->n < HORA_SWIM_MAX_VIEW; i++)
		if (!find(s, s->view.uids[i]))
			v->uids[v->n++] = s->view.uids[i];
	qsort(v->uids, (size_t)v->n, sizeof(uint64_t), cmp_u64);
}

static bool same_members(const struct hora_swim_view *a, const struct hora_swim_view *b)
{
	return a->n == b->n && !memcmp(a->uids, b->uids, sizeof(uint64_t) * (size_t)a->n);
}

static void view_body(const struct hora_swim_view *v, uint64_t prev, uint8_t *b, size_t *len)
{
	hora_put64(b, prev);
	hora_put16(b + 8, (uint16_t)v->n);
	for (int i = 0; i < v->n; i++)
		hora_put64(b + 10 + 8 * i, v->uids[i]);
	*len = 10 + 8 * (size_t)v->n;
}

/* PROPOSE or COMMIT of v, whose previous view is prev. */
static void send_view_msg(struct hora_swim *s, int type, const struct hora_swim_view *v, uint64_t prev)
{
	uint8_t body[10 + 8 * HORA_SWIM_MAX_VIEW];
	size_t blen;
	view_body(v, prev, body, &blen);
	for (int i = 1; i < s->n; i++) {
		struct mem *x = &s->mem[i];
		bool to = in_view(v, x->m.uid) || in_view(&s->view, x->m.uid);
		if (!to || !live(x))
			continue;
		if ((type == T_PROPOSE && x->vack) || (type == T_COMMIT && x->cack))
			continue;
		send_simple(s, type, 0, v->id, body, blen, x->m.addr, false);
	}
}

/* Install v, whose previous view was prev (0: v is a first view). */
static void install(struct hora_swim *s, const struct hora_swim_view *v, uint64_t prev)
{
	if (!s->view.id && !prev && !s->first.id)
		s->first = *v;
	s->view = *v;
	if (v->id > s->highest)
		s->highest = v->id;
	s->st.views_installed++;
}

static int gone_of_view(const struct hora_swim *s)
{
	int n = 0;
	for (int i = 0; i < s->view.n; i++)
		for (int j = 1; j < s->n; j++)
			n += s->mem[j].m.uid == s->view.uids[i] && gone(&s->mem[j]);
	return n;
}

static void try_commit(struct hora_swim *s, int64_t now)
{
	if (!s->prop.id)
		return;
	for (int i = 0; i < s->prop.n; i++) {
		if (s->prop.uids[i] == s->cfg.uid)
			continue;
		struct mem *x = find(s, s->prop.uids[i]);
		if (!x || !x->vack)
			return;
	}
	int acks = 0;
	for (int i = 0; i < s->view.n; i++) {
		struct mem *x = find(s, s->view.uids[i]);
		acks += s->view.uids[i] == s->cfg.uid || (x && x->vack && !gone(x));
	}
	const int base = s->view.n - gone_of_view(s);
	if (base > 0 && 2 * acks <= base)
		return; /* no majority of the previous view (those gone for certain aside) */
	s->commit_prev = s->view.id;
	install(s, &s->prop, s->commit_prev);
	s->commit = s->prop;
	s->prop.id = 0;
	for (int i = 0; i < s->n; i++)
		s->mem[i].cack = false;
	send_view_msg(s, T_COMMIT, &s->commit, s->commit_prev);
	s->commit_sent = now;
}

/* A member whose installed view lacks the coordinator sends it that view
 * (COMMIT, once a period). A coordinator back from the minority side of a
 * partition still holds the view from before it, whose members are those of
 * its table again: it would see nothing to propose while the majority, whose
 * coordinator it is again, waits for it. Installing the newer, committed,
 * view leaves it out of it, and it proposes one with everyone. */
static void tell_coordinator(struct hora_swim *s, uint64_t coord, int64_t now)
{
	if (!s->view.id || in_view(&s->view, coord) || now - s->told_sent < s->cfg.probe_interval_ms)
		return;
	const struct mem *x = find(s, coord);
	if (!x || !live(x))
		return;
	uint8_t body[10 + 8 * HORA_SWIM_MAX_VIEW];
	size_t blen;
	view_body(&s->view, s->view.id, body, &blen);
	send_simple(s, T_COMMIT, 0, s->view.id, body, blen, x->m.addr, false);
	s->told_sent = now;
}

static void coordinate(struct hora_swim *s, int64_t now)
{
	if (s->cfg.role != HORA_SWIM_WORKER || s->left || !s->joined)
		return;
	struct hora_swim_view d;
	const bool rule = hora_swim_first_rule(s, 0); /* the first view, under the rule */
	if (rule) {
		hora_swim_first_proofs(s, now);
		hora_swim_first_members(s, &d);
	} else {
		desired(s, &d);
	}
	if (!d.n || d.uids[0] != s->cfg.uid) {
		if (d.n)
			tell_coordinator(s, d.uids[0], now);
		return; /* not the coordinator */
	}
	if (!s->view.id && (rule ? !hora_swim_first_ready(s, &d, now) : d.n < s->cfg.min_members))
		return; /* the first view waits for min_members, or under the rule for its workers */
	if (s->view.id && same_members(&d, &s->view)) {
		s->prop.id = 0;
		return;
	}
	if (!hora_swim_first_acked(s))
		return; /* no later view before every member installed the first */
	int64_t resend = s->cfg.probe_interval_ms;
	if (s->prop.id && same_members(&d, &s->prop) && now - s->prop_started < 8 * resend) {
		if (now - s->prop_sent >= resend) {
			send_view_msg(s, T_PROPOSE, &s->prop, s->view.id);
			s->prop_sent = now;
		}
		return;
	}
	/* a new proposal */
	d.id = (s->highest > s->promised ? s->highest : s->promised) + 1;
	s->prop = d;
	s->promised = d.id;
	s->promised_by = s->cfg.uid;
	if (d.id > s->highest)
		s->highest = d.id;
	for (int i = 0; i < s->n; i++)
		s->mem[i].vack = false;
	send_view_msg(s, T_PROPOSE, &s->prop, s->view.id);
	s->prop_sent = s->prop_started = now;
	try_commit(s, now); /* alone: commits at once */
}

/* ---- probing --------------------------------------------------------------------- */

/* The member to ping in period p (see the top of this file), NULL when alone. */
static struct mem *probe_target(struct hora_swim *s, int64_t p)
{
	uint64_t u[HORA_SWIM_MAX_MEMBERS];
	int m = 0;
	for (int i = 0; i < s->n; i++)
		if (i == 0 || live(&s->mem[i]))
			u[m++] = s->mem[i].m.uid;
	if (m < 2)
		return NULL;
	qsort(u, (size_t)m, sizeof(u[0]), cmp_u64);
	int me = 0;
	while (u[me] != s->cfg.uid)
		me++;
	uint8_t pb[8], h[crypto_shorthash_BYTES];
	hora_put64(pb, (uint64_t)p);
	crypto_shorthash(h, pb, sizeof(pb), s->sched_key);
	int k = 1 + (int)(hora_get64(h) % (uint64_t)(m - 1));
	return find(s, u[(me + k) % m]);
}

/* The next multiple of T. A period that starts late (a stalled process, a
 * late tick) is short, but still probes, and its probe still has a whole T
 * (probe[1] in the next period) before the target is suspected. */
static int64_t next_boundary(const struct hora_swim *s, int64_t now)
{
	int64_t t = s->cfg.probe_interval_ms;
	return (now / t + 1) * t;
}

static void start_period(struct hora_swim *s, int64_t now)
{
	/* the last period's probe goes on to its own deadline (probe_timers) */
	s->probe[1] = s->probe[0];
	s->probe[0].uid = 0;
	s->next_period = next_boundary(s, now);
	s->periods++;
	/* every 5th period: ping every dead member (a healed partition comes back
	 * as soon as it can: the ping tells it it is dead, it refutes), and every
	 * 10th: JOIN to seeds nobody alive sits on (a restarted seed relearns) */
	if (s->periods % 5 == 0) {
		for (int i = 1, sent = 0; i < s->n && sent < 16; i++) {
			struct mem *x = &s->mem[i];
			if (x->m.state != HORA_SWIM_DEAD)
				continue;
			uint8_t buf[HORA_SWIM_MTU];
			struct msg m;
			msg_begin(s, &m, buf, T_PING, 0, x->m.uid);
			msg_mem(&m, x); /* tell it it is dead: it will refute */
			msg_upd(&m, &s->mem[0].m);
			msg_send(s, &m, x->m.addr);
			sent++;
		}
	}
	if (s->periods % 10 == 0) {
		for (int i = 0; i < s->nseeds; i++) {
			bool known = false;
			for (int j = 1; j < s->n; j++)
				known |= live(&s->mem[j]) && s->mem[j].m.addr.ip == s->seeds[i].addr.ip &&
					 s->mem[j].m.addr.port == s->seeds[i].addr.port;
			if (!known)
				hora_swim_send_self(s, T_JOIN, s->seeds[i].addr);
		}
	}
	/* every 10th period: push-pull our table with one random live member, so
	 * a member that missed gossip (joined early, lost datagrams) catches up */
	if (s->periods % 10 == 5) {
		int live_i[HORA_SWIM_MAX_MEMBERS], nl = 0;
		for (int i = 1; i < s->n; i++)
			if (s->mem[i].m.state == HORA_SWIM_ALIVE)
				live_i[nl++] = i;
		if (nl)
			send_table(s, T_SYNC, s->mem[live_i[randombytes_uniform((uint32_t)nl)]].m.addr);
	}
	struct mem *x = probe_target(s, now / s->cfg.probe_interval_ms);
	if (!x)
		return;
	struct probe *pr = &s->probe[0];
	pr->uid = x->m.uid;
	pr->seq = (uint32_t)s->seq + 1;
	pr->acked = false;
	pr->indirect_sent = false;
	pr->due = false;
	pr->sent = now;
	/* a suspect's PING tells it so, whatever gossip carries (Lifeguard's
	 * buddy system): in a small group the rumour's few transmissions may all
	 * go to others, and a suspect that never hears of it cannot refute */
	uint8_t buf[HORA_SWIM_MTU];
	struct msg m;
	msg_begin(s, &m, buf, T_PING, pr->seq, x->m.uid);
	if (x->m.state == HORA_SWIM_SUSPECT)
		msg_mem(&m, x);
	msg_upd(&m, &s->mem[0].m);
	piggyback(s, &m);
	msg_send(s, &m, x->m.addr);
}

/* A dead member of the installed view, once a period until its host answers
 * port unreachable (or it refutes): this member's own proof that it is gone
 * (gone()), which a death learned by gossip does not carry. */
void hora_swim_ask_proof(struct hora_swim *s, struct mem *x, int64_t now)
{
	uint8_t buf[HORA_SWIM_MTU];
	struct msg m;
	msg_begin(s, &m, buf, T_PING, 0, x->m.uid);
	msg_mem(&m, x); /* tell it it is dead: alive, it refutes */
	msg_upd(&m, &s->mem[0].m);
	msg_send(s, &m, x->m.addr);
	x->proof_sent = now;
}

static void indirect(struct hora_swim *s, struct probe *pr)
{
	pr->indirect_sent = true;
	struct mem *t = find(s, pr->uid);
	if (!t)
		return;
	uint8_t body[6];
	hora_put32(body, t->m.addr.ip);
	hora_put16(body + 4, t->m.addr.port);
	int cand[HORA_SWIM_MAX_MEMBERS], nc = 0;
	for (int i = 1; i < s->n; i++)
		if (s->mem[i].m.state == HORA_SWIM_ALIVE && s->mem[i].m.uid != t->m.uid)
			cand[nc++] = i;
	for (int k = 0; k < s->cfg.indirect_probes && nc; k++) {
		int j = (int)randombytes_uniform((uint32_t)nc);
		send_simple(s, T_PING_REQ, pr->seq, t->m.uid, body, sizeof(body),
			    s->mem[cand[j]].m.addr, true);
		cand[j] = cand[--nc];
	}
}

/* No ACK within ping_timeout: ask k others. No ACK at all within T of the
 * PING: the target becomes SUSPECT. */
static void probe_timers(struct hora_swim *s, int64_t now)
{
	for (int i = 0; i < 2; i++) {
		struct probe *pr = &s->probe[i];
		if (!pr->uid)
			continue;
		if (pr->acked) {
			pr->uid = 0;
			continue;
		}
		if (now - pr->sent >= s->cfg.probe_interval_ms && !pr->due) {
			/* a late tick may come before the datagrams that wait with it:
			 * the ACK may be among them. Suspect at the next tick. */
			pr->due = true;
		} else if (now - pr->sent >= s->cfg.probe_interval_ms) {
			struct mem *x = find(s, pr->uid);
			if (x && x->m.state == HORA_SWIM_ALIVE) {
				mark(s, x, HORA_SWIM_SUSPECT, now);
				s->st.suspicions++;
				x->raised = true;
				hora_swim_ask_proof(s, x, now); /* tell it now (and each period): it refutes */
			}
			pr->uid = 0;
		} else if (!pr->indirect_sent && now - pr->sent >= s->cfg.ping_timeout_ms) {
			indirect(s, pr);
		}
	}
}

/* This member's clock jumped: it was frozen (SIGSTOP, a swap storm, a VM
 * paused) or starved for longer than a probe period. What its timers say now
 * is about itself, not the others: its probes end without suspicion, its
 * suspicions start again (refutations may wait in its socket), and it tells
 * every member at once, with a higher incarnation, that it is alive, so a
 * suspicion the others raised meanwhile is refuted before it turns into a
 * death (Lifeguard's local health, reduced to its clock). */
static void resumed(struct hora_swim *s, int64_t now)
{
	s->st.pauses++;
	if (now - s->last_call >= s->cfg.suspect_timeout_ms + 2 * s->cfg.probe_interval_ms)
		s->st.long_pauses++;
	s->probe[0].uid = s->probe[1].uid = 0;
	for (int i = 1; i < s->n; i++)
		if (s->mem[i].m.state == HORA_SWIM_SUSPECT)
			s->mem[i].m.state_since_ms = now;
	if (!s->joined)
		return;
	s->mem[0].m.incarnation++;
	changed(s, &s->mem[0], now);
	announce_self(s, T_NEWS);
}

/* Every tick and input first: a gap of a probe period or more since the
 * last one is a pause of this process (the tick is due every 50 ms at most). */
static void clock_check(struct hora_swim *s, int64_t now)
{
	if (s->last_call && now - s->last_call >= s->cfg.probe_interval_ms && !s->left)
		resumed(s, now);
	if (now > s->last_call)
		s->last_call = now;
}

void hora_swim_tick(struct hora_swim *s, int64_t now)
{
	if (s->left)
		return;
	clock_check(s, now);
	hora_swim_join_tick(s, now);
	probe_timers(s, now);
	if (now >= s->next_period)
		start_period(s, now);
	for (int i = 1; i < s->n; i++) {
		struct mem *x = &s->mem[i];
		if (x->m.state == HORA_SWIM_SUSPECT &&
		    now - x->m.state_since_ms >= s->cfg.suspect_timeout_ms + s->cfg.probe_interval_ms)
			declare_dead(s, x, now);
		else if (x->m.state == HORA_SWIM_DEAD && x->doubted && alive_majority(s, x))
			rejudge(x, now);
		else if (x->m.state == HORA_SWIM_SUSPECT && now - x->proof_sent >= s->cfg.probe_interval_ms &&
			 (x->raised || now - x->m.state_since_ms >= s->cfg.suspect_timeout_ms / 2))
			hora_swim_ask_proof(s, x, now); /* its ACK carries a refutation that we missed */
		else if (x->m.state == HORA_SWIM_DEAD && !x->refused && in_view(&s->view, x->m.uid) &&
			 now - x->proof_sent >= s->cfg.probe_interval_ms)
			hora_swim_ask_proof(s, x, now);
	}
	coordinate(s, now);
	if (s->commit.id && now - s->commit_sent >= s->cfg.probe_interval_ms &&
	    s->commit.id == s->view.id) {
		send_view_msg(s, T_COMMIT, &s->commit, s->commit_prev);
		s->commit_sent = now;
	}
}

int hora_swim_next_ms(const struct hora_swim *s, int64_t now)
{
	int64_t next = s->next_period;
	for (int i = 0; i < 2; i++) {
		const struct probe *pr = &s->probe[i];
		if (!pr->uid || pr->acked)
			continue;
		int64_t due = pr->sent + (pr->indirect_sent ? s->cfg.probe_interval_ms : s->cfg.ping_timeout_ms);
		if (pr->due) /* suspect after the input that waits now has been read */
			due = now + 10;
		if (due < next)
			next = due;
	}
	next = hora_swim_join_next(s, next);
	int64_t d = next - now;
	if (d > 50)
		d = 50; /* suspicion timers and resends */
	return d < 1 ? 1 : (int)d;
}

void hora_swim_join(struct hora_swim *s, int64_t now, const struct hora_swim_addr *seeds, int n)
{
	hora_swim_join_seeds(s, now, seeds, n);
	s->next_period = next_boundary(s, now);
	hora_swim_tick(s, now);
}

void hora_swim_leave(struct hora_swim *s, int64_t now)
{
	s->mem[0].m.state = HORA_SWIM_LEFT;
	s->mem[0].m.incarnation++;
	announce_self(s, T_LEAVE); /* the dead too: one that was only frozen reads it when it resumes */
	s->left = true;
	(void)now;
}

/* ---- input ---------------------------------------------------------------------- */

static void handle_ack(struct hora_swim *s, int64_t now, uint32_t seq, uint64_t about)
{
	for (int i = 0; i < 2; i++)
		if (s->probe[i].uid && about == s->probe[i].uid && seq == s->probe[i].seq)
			s->probe[i].acked = true;
	/* an ACK for someone who asked us to ping on their behalf */
	for (int i = 0; i < 32; i++)
		if (s->fwd[i].until > now && s->fwd[i].target == about && s->fwd[i].our_seq == seq) {
			send_simple(s, T_ACK, s->fwd[i].their_seq, about, NULL, 0, s->fwd[i].requester,
				    true);
			s->fwd[i].until = 0;
		}
}

/* A datagram's header, once its length, magic, version and MAC checked. */
struct in_msg {
	int type, nupd;
	uint64_t uid, seq, aux64;
	uint32_t aux32, blen;
	const uint8_t *body, *upd;
};

/* Check what a datagram must be before anything in it is believed: length,
 * magic, version, MAC, then that the lengths add up and it is not our own.
 * false: dropped (counted). */
static bool in_parse(struct hora_swim *s, const uint8_t *b, size_t len, struct in_msg *m)
{
	if (len < HDR + MAC || hora_get32(b) != MAGIC || b[4] != VERSION) {
		s->st.malformed++;
		return false;
	}
	uint8_t full[32];
	crypto_auth_hmacsha256_state hs;
	crypto_auth_hmacsha256_init(&hs, s->key, s->cfg.secret_len);
	crypto_auth_hmacsha256_update(&hs, b, len - MAC);
	crypto_auth_hmacsha256_final(&hs, full);
	if (sodium_memcmp(full, b + len - MAC, MAC) != 0) {
		s->st.bad_mac++;
		return false;
	}
	*m = (struct in_msg){.type = b[5], .nupd = hora_get16(b + 6), .uid = hora_get64(b + 8),
			     .seq = hora_get64(b + 16), .aux32 = hora_get32(b + 28),
			     .aux64 = hora_get64(b + 32), .blen = hora_get32(b + 40)};
	if (m->uid == s->cfg.uid || HDR + (size_t)m->blen + (size_t)m->nupd * UPD + MAC != len) {
		s->st.malformed++;
		return false;
	}
	m->body = b + HDR;
	m->upd = m->body + m->blen;
	return true;
}

/* Replay guard: a known sender's sequence must grow. false: a replay. */
static bool in_fresh(struct hora_swim *s, const struct in_msg *m)
{
	struct mem *snd = find(s, m->uid);
	if (!snd)
		return true;
	if (m->seq <= snd->m.last_seq) {
		s->st.replays++;
		return false;
	}
	snd->m.last_seq = m->seq;
	return true;
}

/* Apply the piggybacked member updates. false: a malformed one (counted;
 * the ones before it stay applied). */
static bool in_updates(struct hora_swim *s, int64_t now, const struct in_msg *m)
{
	/* A sender we hold dead (a healed minority, a member that was frozen)
	 * could not tell a partition from deaths: the deaths it declared on its
	 * side are suspicions here, which a member that is alive refutes. Taken
	 * for deaths they evicted healthy members. Its news about itself (a
	 * refutation) comes first and counts whatever it is. */
	const struct mem *snd = find(s, m->uid);
	const bool doubtful = snd && snd->m.state == HORA_SWIM_DEAD;
	for (int i = 0; i < m->nupd; i++) {
		const uint8_t *p = m->upd + UPD * i;
		struct hora_swim_member u = {.uid = hora_get64(p), .addr = {hora_get32(p + 8), hora_get16(p + 12)},
					     .data_port = hora_get16(p + 14), .incarnation = hora_get32(p + 16),
					     .state = p[20], .role = p[21]};
		if (u.state > HORA_SWIM_LEFT || u.role > HORA_SWIM_SEED) {
			s->st.malformed++;
			return false;
		}
		if (doubtful && u.state == HORA_SWIM_DEAD && u.uid != m->uid)
			u.state = HORA_SWIM_SUSPECT;
		apply(s, now, &u);
	}
	return true;
}

/* STATUS_Q: answer with the application's bytes (none without a source). */
static void in_status_q(struct hora_swim *s, struct hora_swim_addr from)
{
	struct hora_swim_status st = {0};
	if (s->status_get)
		s->status_get(s->status_arg, &st);
	if (st.len > HORA_SWIM_STATUS_MAX)
		st.len = HORA_SWIM_STATUS_MAX;
	send_simple(s, T_STATUS_R, 0, 0, st.data, st.len, from, false);
}

static void in_status_r(struct hora_swim *s, int64_t now, const struct in_msg *m, struct mem *snd)
{
	if (m->blen > HORA_SWIM_STATUS_MAX || !snd) {
		s->st.malformed++;
		return;
	}
	snd->status.len = m->blen;
	memcpy(snd->status.data, m->body, m->blen);
	snd->status_at = now;
}

/* PING_REQ: ping the target for the requester and remember to forward. */
static void in_ping_req(struct hora_swim *s, int64_t now, struct hora_swim_addr from,
			const struct in_msg *m)
{
	if (m->blen < 6)
		return;
	struct hora_swim_addr t = {hora_get32(m->body), hora_get16(m->body + 4)};
	int slot = 0;
	for (int i = 0; i < 32; i++)
		if (s->fwd[i].until < s->fwd[slot].until)
			slot = i;
	s->fwd[slot].target = m->aux64;
	s->fwd[slot].our_seq = (uint32_t)s->seq + 1;
	s->fwd[slot].their_seq = m->aux32;
	s->fwd[slot].requester = from;
	s->fwd[slot].until = now + s->cfg.probe_interval_ms;
	send_simple(s, T_PING, s->fwd[slot].our_seq, m->aux64, NULL, 0, t, true);
}

/* The body of a PROPOSE or COMMIT: prev view u64, n u16, n uids. false:
 * malformed (counted). */
static bool in_view_body(struct hora_swim *s, const struct in_msg *m, struct hora_swim_view *v,
			 uint64_t *prev)
{
	int n = m->blen >= 10 ? hora_get16(m->body + 8) : -1;
	if (n < 0 || n > HORA_SWIM_MAX_VIEW || m->blen != 10 + 8u * (uint32_t)n) {
		s->st.malformed++;
		return false;
	}
	*prev = hora_get64(m->body);
	v->id = m->aux64;
	v->n = n;
	for (int i = 0; i < n; i++)
		v->uids[i] = hora_get64(m->body + 10 + 8 * i);
	return true;
}

/* PROPOSE: promise (VACK) unless we promised or installed at least as high,
 * or it is a first view the first-view rule does not allow (no answer: the
 * proposer tries again later, with whoever is alive then). */
static void in_propose(struct hora_swim *s, struct hora_swim_addr from, const struct in_msg *m)
{
	const uint64_t id = m->aux64;
	struct hora_swim_view v;
	uint64_t prev;
	if (!in_view_body(s, m, &v, &prev))
		return;
	if (hora_swim_first_rule(s, prev) && !hora_swim_first_ok(s, &v)) {
		s->st.views_refused++;
		return;
	}
	if (id <= s->view.id || id < s->promised ||
	    (id == s->promised && s->promised_by && s->promised_by != m->uid)) {
		/* tell the proposer which id to beat */
		uint64_t beat = s->promised > s->view.id ? s->promised : s->view.id;
		if (beat < id)
			beat = id; /* same id, other proposer */
		send_simple(s, T_VNACK, 0, beat, NULL, 0, from, true);
		return;
	}
	s->promised = id;
	s->promised_by = m->uid;
	if (id > s->highest)
		s->highest = id;
	send_simple(s, T_VACK, 0, id, NULL, 0, from, true);
}

/* COMMIT: install a newer view (pulling the table if it names strangers)
 * and acknowledge the installed one. */
static void in_commit(struct hora_swim *s, struct hora_swim_addr from, const struct in_msg *m)
{
	const uint64_t id = m->aux64;
	struct hora_swim_view v;
	uint64_t prev;
	if (!in_view_body(s, m, &v, &prev))
		return;
	if (hora_swim_first_rule(s, prev) && !hora_swim_first_ok(s, &v)) {
		s->st.views_refused++;
		return;
	}
	if (id > s->view.id) {
		bool unknown = false;
		for (int i = 0; i < v.n; i++)
			unknown |= !find(s, v.uids[i]);
		install(s, &v, prev);
		if (unknown) /* members we have not heard of: pull the sender's table */
			send_table(s, T_SYNC, from);
		if (s->prop.id && s->prop.id <= id)
			s->prop.id = 0;
	}
	if (id == s->view.id)
		send_simple(s, T_CACK, 0, id, NULL, 0, from, true);
}

/* What the message asks of us, by type. */
static void in_dispatch(struct hora_swim *s, int64_t now, struct hora_swim_addr from,
			const struct in_msg *m, struct mem *snd)
{
	switch (m->type) {
	case T_STATUS_Q:
		in_status_q(s, from);
		break;
	case T_STATUS_R:
		in_status_r(s, now, m, snd);
		break;
	case T_PING:
		send_simple(s, T_ACK, m->aux32, s->cfg.uid, NULL, 0, from, true);
		break;
	case T_ACK:
		handle_ack(s, now, m->aux32, m->aux64); /* a suspect's refutation comes by gossip */
		break;
	case T_PING_REQ:
		in_ping_req(s, now, from, m);
		break;
	case T_JOIN:
	case T_SYNC: /* push-pull anti-entropy: they pushed, we answer with ours */
		send_table(s, T_JOIN_REPLY, from);
		break;
	case T_JOIN_REPLY:
		s->joined = true;
		break;
	case T_LEAVE:
	case T_NEWS:
		break; /* the updates were applied already */
	case T_PROPOSE:
		in_propose(s, from, m);
		break;
	case T_VACK:
		if (snd && s->prop.id == m->aux64) {
			snd->vack = true;
			try_commit(s, now);
		}
		break;
	case T_COMMIT:
		in_commit(s, from, m);
		break;
	case T_VNACK:
		if (m->aux64 > s->highest) {
			s->highest = m->aux64;
			s->prop.id = 0; /* re-propose above it at the next tick */
		}
		break;
	case T_CACK:
		if (snd && s->commit.id == m->aux64)
			snd->cack = true;
		break;
	default:
		s->st.malformed++;
	}
}

void hora_swim_input(struct hora_swim *s, int64_t now, struct hora_swim_addr from,
		     const uint8_t *b, size_t len)
{
	s->st.recv_msgs++;
	s->st.recv_bytes += len;
	clock_check(s, now);
	if (hora_swim_join_refusal(s, b, len, from))
		return; /* a REFUSE: unauthenticated, only ever counted */
	struct in_msg m;
	const uint64_t bad_mac = s->st.bad_mac;
	if (!in_parse(s, b, len, &m)) {
		if (s->st.bad_mac != bad_mac)
			hora_swim_join_bad_mac(s, now, from, b, len);
		return;
	}
	s->heard_auth = true;
	if (!in_fresh(s, &m) || s->left || !in_updates(s, now, &m))
		return;
	struct mem *snd = find(s, m.uid);
	if (snd)
		snd->refused = false; /* it speaks: whatever refused was not it */
	if (snd && !snd->m.last_seq)
		snd->m.last_seq = m.seq;
	if (snd && snd->m.state == HORA_SWIM_ALIVE)
		snd->m.addr = from; /* NAT-free clusters: the source is the address */
	if (m.type != T_JOIN)
		s->joined = true; /* any authenticated message from a member */
	in_dispatch(s, now, from, &m, snd);
}

void hora_swim_refused(struct hora_swim *s, int64_t now, struct hora_swim_addr to)
{
	hora_swim_join_unreachable(s, to);
	if (s->left || !s->cfg.refusal_proves_death)
		return;
	bool any = false;
	for (int i = 1; i < s->n; i++) {
		struct mem *x = &s->mem[i];
		if (x->m.addr.ip != to.ip || x->m.addr.port != to.port || x->m.state == HORA_SWIM_LEFT)
			continue;
		x->refused = any = true;
		s->st.refusals++;
		if (live(x)) {
			declare_dead(s, x, now); /* no suspicion: its port is closed */
		} else if (x->m.state == HORA_SWIM_DEAD && x->doubted) { /* proven now: a death to tell */
			x->doubted = false;
			x->tx_left = tx_budget(s);
			tell_dead(s, x);
		}
	}
	if (any)
		coordinate(s, now);
}

/* ---- queries ---------------------------------------------------------------------- */

void hora_swim_view_get(const struct hora_swim *s, struct hora_swim_view *v, int *rank,
			bool *paused, char *why, size_t whylen)
{
	*v = s->view;
	*rank = -1;
	for (int i = 0; i < s->view.n; i++)
		if (s->view.uids[i] == s->cfg.uid)
			*rank = i;
	int alive = 0;
	for (int i = 0; i < s->view.n; i++) {
		const struct mem *x = NULL;
		for (int j = 0; j < s->n; j++)
			if (s->mem[j].m.uid == s->view.uids[i])
				x = &s->mem[j];
		/* a member we have not heard of yet counts as reachable: only
		 * members we know to be dead or gone count against the majority */
		alive += !x || x == &s->mem[0] || live(x);
	}
	*paused = false;
	if (why && whylen)
		why[0] = 0;
	if (!s->view.id)
		return;
	if (*rank < 0) {
		*paused = true;
		if (why)
			snprintf(why, whylen, "not a member of view %llu", (unsigned long long)s->view.id);
	} else if (2 * alive <= s->view.n - gone_of_view(s)) {
		*paused = true;
		if (why)
			snprintf(why, whylen, "no majority of view %llu: %d of %d members reachable",
				 (unsigned long long)s->view.id, alive, s->view.n - gone_of_view(s));
	}
}

void hora_swim_first_view(const struct hora_swim *s, struct hora_swim_view *v, int *rank)
{
	*v = s->first;
	*rank = -1;
	for (int i = 0; i < v->n; i++)
		if (v->uids[i] == s->cfg.uid)
			*rank = i;
}

int hora_swim_members(const struct hora_swim *s, struct hora_swim_member *out, int cap)
{
	int n = s->n < cap ? s->n : cap;
	for (int i = 0; i < n; i++) {
		out[i] = s->mem[i].m;
		out[i].refused = s->mem[i].refused && s->mem[i].m.state == HORA_SWIM_DEAD;
	}
	return n;
}

void hora_swim_stats_get(const struct hora_swim *s, struct hora_swim_stats *st)
{
	*st = s->st;
}

bool hora_swim_joined(const struct hora_swim *s)
{
	return s->joined;
}

void hora_swim_status_source(struct hora_swim *s, hora_swim_status_fn get, void *arg)
{
	s->status_get = get;
	s->status_arg = arg;
}

void hora_swim_status_query(struct hora_swim *s, int64_t now_ms)
{
	(void)now_ms;
	for (int i = 1; i < s->n; i++)
		if (live(&s->mem[i]))
			send_simple(s, T_STATUS_Q, 0, 0, NULL, 0, s->mem[i].m.addr, false);
}

int hora_swim_status_of(const struct hora_swim *s, uint64_t uid, struct hora_swim_status *st,
			int64_t *at_ms)
{
	for (int i = 1; i < s->n; i++)
		if (s->mem[i].m.uid == uid && s->mem[i].status_at) {
			*st = s->mem[i].status;
			*at_ms = s->mem[i].status_at;
			return 0;
		}
	return -1;
}
