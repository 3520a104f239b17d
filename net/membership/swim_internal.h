/* swim_internal.h - the state of a SWIM member, shared by the files that
 * make up the state machine (internal to net/membership/, never included
 * elsewhere):
 *   swim.c        encoding, failure detection, gossip, views, input
 *   first_view.c  the first-view rule (cfg.first_view_workers)
 *   join.c        joining through the seeds, and REFUSE (a JOIN that fails
 *                 the receiver's MAC)
 * Layouts: net/MEMBERSHIP.md. Not thread-safe, as struct hora_swim.
 */
#ifndef HORA_NET_SWIM_INTERNAL_H
#define HORA_NET_SWIM_INTERNAL_H

#include "net/membership/swim.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>

#define MAGIC 0x4d575348u /* "HSWM" */
#define VERSION 1
#define HDR 44
#define MAC 16
#define UPD 24

enum { T_PING = 1, T_ACK, T_PING_REQ, T_JOIN, T_JOIN_REPLY, T_LEAVE, T_PROPOSE, T_VACK, T_COMMIT, T_CACK,
       T_VNACK, T_SYNC, T_NEWS, T_STATUS_Q, T_STATUS_R,
       T_REFUSE /* unauthenticated: a JOIN failed the receiver's MAC (join.c) */ };

struct mem {
	struct hora_swim_member m;
	int tx_left; /* piggyback transmissions still due */
	bool vack, cack;
	/* its host answered port unreachable and nothing authenticated came from
	 * it since: proven gone, unlike a silent member (net/MEMBERSHIP.md) */
	bool refused;
	int64_t proof_sent; /* last PING sent to a dead view member for that proof */
	/* DEAD here, declared while this member saw no ALIVE majority of its
	 * view (cut off, most likely): kept in its views, told to no one but
	 * its subject (as SUSPECT, which it refutes if alive), never as a death
	 * that evicts it (swim.c declare_dead) */
	bool doubted;
	bool declared; /* DEAD by this member's own verdict, not learned from others */
	bool raised;   /* SUSPECT by this member's own probe: told so once a period (a
			* suspicion learned by gossip: from half its timeout on) */
	struct hora_swim_status status; /* its last STATUS_R */
	int64_t status_at;              /* when it came, 0 = never */
};

struct hora_swim {
	struct hora_swim_cfg cfg;
	uint8_t key[1024];
	struct mem *mem; /* mem[0] is self */
	int n;
	uint64_t seq;
	struct hora_swim_stats st;
	/* probing */
	uint8_t sched_key[crypto_shorthash_KEYBYTES]; /* k(p), the same at every member */
	int64_t next_period;
	/* this period's probe and the last one's: each has a whole T from its
	 * PING, even when a period started late and is short */
	struct probe {
		uint64_t uid; /* 0 = none */
		uint32_t seq;
		bool acked, indirect_sent;
		int64_t sent;
		bool due; /* its deadline passed at an earlier tick: input read since had no ACK */
	} probe[2];
	int periods;
	/* joining (join.c) */
	struct seed {
		struct hora_swim_addr addr;
		uint64_t join_seq;     /* of the last JOIN sent to it (a REFUSE echoes it) */
		uint32_t unreachable;  /* port-unreachable answers to our JOINs */
		uint32_t wrong_secret; /* REFUSEs: it holds another cluster secret */
	} *seeds;
	int nseeds, seed_next;
	bool joined;
	bool heard_auth;     /* an authenticated datagram came (a member with our secret) */
	bool secret_refused; /* every seed refused our JOINs, none authenticated */
	int64_t next_join;
	int64_t join_start;  /* hora_swim_join's clock: the first view's start window */
	int64_t refuse_sent; /* the last REFUSE this member sent (rate limit) */
	/* views */
	struct hora_swim_view view;
	uint64_t promised, highest;
	uint64_t promised_by; /* proposer of `promised`: equal ids only from it */
	struct hora_swim_view prop; /* in flight, id 0 = none */
	int64_t prop_sent, prop_started;
	struct hora_swim_view commit; /* last committed by us, resent until acked */
	uint64_t commit_prev;         /* the view installed before it */
	int64_t commit_sent;
	struct hora_swim_view first;  /* the job's first view, as installed here (id 0: none) */
	int64_t told_sent; /* our view, last sent to a coordinator outside it */
	/* reply forwarding for PING_REQ: whom to tell when target acks */
	struct {
		uint64_t target;
		uint32_t our_seq, their_seq;
		struct hora_swim_addr requester;
		int64_t until;
	} fwd[32];
	/* application status answers (opaque bytes) */
	hora_swim_status_fn status_get;
	void *status_arg;
	/* outbox */
	struct hora_swim_out *out;
	int out_head, out_n;
	bool left;
	int64_t last_call; /* the clock at the last tick or input (pause detection) */
};

static inline struct mem *find(struct hora_swim *s, uint64_t uid)
{
	for (int i = 0; i < s->n; i++)
		if (s->mem[i].m.uid == uid)
			return &s->mem[i];
	return NULL;
}

static inline bool live(const struct mem *x)
{
	return x->m.state == HORA_SWIM_ALIVE || x->m.state == HORA_SWIM_SUSPECT;
}

/* Gone for certain: left gracefully (LEFT is final), or dead with its host's
 * port-unreachable as the last word about it (no process holds its port).
 * Neither can be the other side of a partition, so they count in no
 * majority: the last workers of a job that ends one by one go on deciding,
 * and two of four crashed at once leave a view the other two can change. A
 * member that is merely silent (frozen, a partition, a host down) still
 * counts. */
static inline bool gone(const struct mem *x)
{
	return x->m.state == HORA_SWIM_LEFT || (x->m.state == HORA_SWIM_DEAD && x->refused);
}

static inline bool in_view(const struct hora_swim_view *v, uint64_t uid)
{
	for (int i = 0; i < v->n; i++)
		if (v->uids[i] == uid)
			return true;
	return false;
}

static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* swim.c */
/* Queue len bytes of buf for `to` as they are (no MAC added: REFUSE). */
void hora_swim_out_push(struct hora_swim *s, struct hora_swim_addr to, const uint8_t *buf, size_t len);
/* A message of this type carrying only this member's own update, to `to`;
 * returns the sequence number it went out with. */
uint64_t hora_swim_send_self(struct hora_swim *s, int type, struct hora_swim_addr to);
/* PING a dead member, telling it so: this member's own proof that it is
 * gone (its port answers unreachable) or its refutation. */
void hora_swim_ask_proof(struct hora_swim *s, struct mem *x, int64_t now);

/* first_view.c (cfg.first_view_workers; net/MEMBERSHIP.md "The first view") */
/* Whether a view whose previous view is prev must obey the rule here. */
bool hora_swim_first_rule(const struct hora_swim *s, uint64_t prev);
/* The first view the rule makes of the live workers (the lowest uid for
 * each worker index; v->n below first_view_workers while some has none). */
void hora_swim_first_members(struct hora_swim *s, struct hora_swim_view *v);
/* Whether v is a first view the rule allows. */
bool hora_swim_first_ok(const struct hora_swim *s, const struct hora_swim_view *v);
/* Whether the coordinator may propose d, its hora_swim_first_members, now. */
bool hora_swim_first_ready(struct hora_swim *s, const struct hora_swim_view *d, int64_t now);
/* Before the first view: a worker of the job held dead without proof is
 * asked for one, once a period. */
void hora_swim_first_proofs(struct hora_swim *s, int64_t now);
/* No later view until every live member of the first view acknowledged it. */
bool hora_swim_first_acked(struct hora_swim *s);

/* join.c */
/* The seeds to join through (ourselves left out; none: joined, alone). */
void hora_swim_join_seeds(struct hora_swim *s, int64_t now, const struct hora_swim_addr *seeds, int n);
/* The JOIN due now, if any (round-robin over the seeds, every join_retry_ms). */
void hora_swim_join_tick(struct hora_swim *s, int64_t now);
/* The earliest clock at which join_tick has something to do. */
int64_t hora_swim_join_next(const struct hora_swim *s, int64_t next);
/* A datagram with a REFUSE's shape from `from`: counted for the seed it
 * answers when it answers our last JOIN to it. true: it was one (never
 * authenticated, never more). */
bool hora_swim_join_refusal(struct hora_swim *s, const uint8_t *b, size_t len, struct hora_swim_addr from);
/* A datagram that failed our MAC: a JOIN is answered with a REFUSE
 * (rate-limited, smaller than the JOIN). */
void hora_swim_join_bad_mac(struct hora_swim *s, int64_t now, struct hora_swim_addr from,
			    const uint8_t *b, size_t len);
/* Port unreachable from `to`: counted for the seed there. */
void hora_swim_join_unreachable(struct hora_swim *s, struct hora_swim_addr to);

#endif
