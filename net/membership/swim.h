/* swim.h - SWIM membership and agreed views, as an I/O-free state machine.
 *
 * The driver (membership.c) feeds it datagrams and clock ticks and sends
 * what it puts in its outbox; tests drive it directly. Message formats and
 * the view protocol: net/MEMBERSHIP.md.
 *
 * Not thread-safe: one driver thread owns a struct hora_swim.
 *
 * Clock: every now_ms is read from one monotonic clock (membership.c:
 * CLOCK_MONOTONIC plus the offset to the wall clock, taken once per
 * process). Protocol periods start on multiples of probe_interval_ms of it
 * and the probe schedule depends on the period number, so on hosts whose
 * clocks agree the members probe in step; a clock s ahead only moves that
 * member's probes s earlier (net/MEMBERSHIP.md "Failure detection").
 */
#ifndef HORA_NET_SWIM_H
#define HORA_NET_SWIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HORA_SWIM_MAX_MEMBERS 256
#define HORA_SWIM_MAX_VIEW 128
#define HORA_SWIM_MTU 1400
#define HORA_SWIM_OUTBOX 512

enum hora_swim_role { HORA_SWIM_WORKER = 0, HORA_SWIM_SEED = 1 };
enum hora_swim_state { HORA_SWIM_ALIVE, HORA_SWIM_SUSPECT, HORA_SWIM_DEAD, HORA_SWIM_LEFT };

struct hora_swim_addr {
	uint32_t ip;   /* IPv4, network byte order */
	uint16_t port; /* UDP port, host order */
};

struct hora_swim_cfg {
	uint64_t uid;              /* unique per process (random) */
	enum hora_swim_role role;
	struct hora_swim_addr self;
	uint16_t data_port;        /* TCP port for collectives, advertised */
	int probe_interval_ms;     /* protocol period T (default 200) */
	int ping_timeout_ms;       /* direct ping deadline (default 80) */
	int suspect_timeout_ms;    /* suspect -> dead (default 1000) */
	int indirect_probes;       /* k for ping-req (default 3) */
	int retransmit_mult;       /* lambda: updates sent lambda*log2(N+1) times (default 3) */
	int min_members;           /* workers needed before the first view (default 1) */
	/* The first-view rule (net/MEMBERSHIP.md "The first view"): 0 (default):
	 * any live worker may be in the first view. N > 0 (a job of N workers
	 * whose uids carry worker index + 1 in their top 24 bits, uid >> 40, as
	 * core's hora_cluster_uid makes them): the first view is exactly one
	 * member for each worker index 0..N-1 (the lowest uid on a duplicate),
	 * proposed once all N are alive (and min_members: more than N means
	 * never); this member refuses any other first
	 * view (a PROPOSE or COMMIT with no view before it). Other members (a
	 * stray process with the secret, a second claimant of an index) are
	 * admitted only by a later view, as joiners. At most HORA_SWIM_MAX_VIEW. */
	int first_view_workers;
	/* the first view may have only this many of them (>= 1, below
	 * first_view_workers: an elastic job starts short; 0: all of them).
	 * With fewer than min_members it is proposed only once every missing
	 * worker index is settled: each worker that claimed it is gone for
	 * certain (left, or dead with its port answering unreachable), or
	 * first_view_window_ms have passed since hora_swim_join (nobody
	 * claimed it, or its claimant fell silent) */
	int first_view_min;
	int first_view_window_ms;  /* 0: no window (a missing index waits for proof) */
	int join_retry_ms;         /* JOIN resend period (default 500) */
	/* a member's host answering port unreachable proves it gone (dead at
	 * once, in no majority; net/MEMBERSHIP.md "Proof of death"); 0: such
	 * answers are ignored, for networks where a firewall on the members'
	 * own hosts REJECTs (default 1) */
	int refusal_proves_death;
	const uint8_t *secret;
	size_t secret_len;
};

void hora_swim_cfg_default(struct hora_swim_cfg *c);

struct hora_swim_member {
	uint64_t uid;
	struct hora_swim_addr addr;
	uint16_t data_port;
	uint8_t role, state;
	uint8_t refused; /* hora_swim_members: DEAD, and its port answered unreachable */
	uint32_t incarnation;
	int64_t state_since_ms;
	uint64_t last_seq; /* replay guard: highest datagram sequence seen */
};

struct hora_swim_view {
	uint64_t id;   /* 0 = none yet */
	int n;
	uint64_t uids[HORA_SWIM_MAX_VIEW]; /* rank order */
};

struct hora_swim_out {
	struct hora_swim_addr to;
	size_t len;
	uint8_t buf[HORA_SWIM_MTU];
};

struct hora_swim_stats {
	uint64_t sent_bytes, recv_bytes, sent_msgs, recv_msgs, bad_mac, replays, malformed;
	uint64_t views_installed;
	uint64_t suspicions, refutations; /* raised here: suspected someone / refuted about me */
	uint64_t views_refused; /* first views refused by the first-view rule */
	uint64_t refusals;      /* port-unreachable answers about a member (hora_swim_refused) */
	uint64_t pauses;        /* this member's clock jumped a probe period between two calls:
				   it was frozen or starved, and told every member it is alive */
	uint64_t long_pauses;   /* of them, ones of suspect_timeout + 2 probe periods or more:
				   long enough for the others to have declared it dead */
	uint64_t refusals_sent;  /* REFUSEs sent: JOINs that failed our MAC (another secret) */
	uint64_t deaths;         /* members this one declared dead (a proof or a suspicion's end) */
	uint64_t refusals_heard; /* REFUSEs that came (counted per seed: hora_swim_seeds) */
};

struct hora_swim;

/* 0 if the timings work together (1 <= ping_timeout_ms < probe_interval_ms
 * <= suspect_timeout_ms), else -1 and why, naming the fields (err may be
 * NULL with errlen 0). */
int hora_swim_cfg_check(const struct hora_swim_cfg *c, char *err, size_t errlen);
/* Returns NULL on bad config (secret < 16 bytes, hora_swim_cfg_check fails)
 * or out of memory. */
struct hora_swim *hora_swim_create(const struct hora_swim_cfg *cfg);
void hora_swim_destroy(struct hora_swim *s);

/* Start joining through these seed addresses (JOIN resent every
 * join_retry_ms, round-robin, until one answers). n = 0: start alone. */
void hora_swim_join(struct hora_swim *s, int64_t now_ms, const struct hora_swim_addr *seeds, int n);
/* Announce departure to every known member (graceful leave). */
void hora_swim_leave(struct hora_swim *s, int64_t now_ms);

/* A datagram arrived from `from`. Bad MAC, replays and malformed input are
 * counted and dropped. */
void hora_swim_input(struct hora_swim *s, int64_t now_ms, struct hora_swim_addr from,
		     const uint8_t *buf, size_t len);
/* The host at `to` answered a datagram we sent there with ICMP port
 * unreachable (the caller reads it from its socket): the members at that
 * address are gone for certain. A live one becomes DEAD at once, with no
 * suspicion (and every live member is told), and a dead one counts in no
 * majority of a view from now until something authenticated comes from it
 * or it refutes: two of four workers killed at once leave a view the other
 * two can change, which two silent ones (a 2|2 partition) do not. */
void hora_swim_refused(struct hora_swim *s, int64_t now_ms, struct hora_swim_addr to);
/* (nothing when cfg.refusal_proves_death is 0) */
/* Advance timers (probes, suspicion, proposals, joins). */
void hora_swim_tick(struct hora_swim *s, int64_t now_ms);
/* Milliseconds from now_ms until tick wants to run again (>= 1). */
int hora_swim_next_ms(const struct hora_swim *s, int64_t now_ms);

/* Take the next datagram to send; false when the outbox is empty. */
bool hora_swim_pop(struct hora_swim *s, struct hora_swim_out *out);

/* The installed view (id 0 = none), this member's rank in it (-1 if not in
 * it), and whether it is paused: it lost the majority of its view or was
 * left out of it. why says why when paused. */
void hora_swim_view_get(const struct hora_swim *s, struct hora_swim_view *v, int *rank,
			bool *paused, char *why, size_t whylen);
/* The job's first view as this member installed it (first_view_workers
 * above): the view it installed while it had none, when that view was a
 * first view of the cluster (committed with no view before it), and this
 * member's rank in it (-1 if not in it). id 0: none (none installed yet, or
 * this member came in as a joiner, its first view being a later one). Later
 * views do not change it. */
void hora_swim_first_view(const struct hora_swim *s, struct hora_swim_view *v, int *rank);
/* Snapshot of the member table; returns the count. */
int hora_swim_members(const struct hora_swim *s, struct hora_swim_member *out, int cap);
void hora_swim_stats_get(const struct hora_swim *s, struct hora_swim_stats *st);
bool hora_swim_joined(const struct hora_swim *s);

/* What joining through each seed met so far (net/MEMBERSHIP.md "Another
 * secret"): port-unreachable answers (nothing listens there) and REFUSEs
 * (a member with another cluster secret answered). Returns the count. */
struct hora_swim_seed {
	struct hora_swim_addr addr;
	uint32_t unreachable, wrong_secret;
};
int hora_swim_seeds(const struct hora_swim *s, struct hora_swim_seed *out, int cap);
/* true once every seed refused 3 of our JOINs (another cluster secret) and
 * nothing authenticated came from anyone: waiting will not help. */
bool hora_swim_secret_refused(const struct hora_swim *s);

/* Application status: up to HORA_SWIM_STATUS_MAX opaque bytes a member's
 * application says about itself when asked (STATUS_Q / STATUS_R,
 * net/MEMBERSHIP.md). SWIM neither reads nor checks them; hora's stall
 * inspector (core/comm_watch.c) puts its collective progress there. */
#define HORA_SWIM_STATUS_MAX 32
struct hora_swim_status {
	size_t len; /* 0..HORA_SWIM_STATUS_MAX; 0: the member has nothing to say */
	uint8_t data[HORA_SWIM_STATUS_MAX];
};
/* Where STATUS answers come from: get() is called on the thread that runs
 * swim and fills st (len 0 on entry); it must not block. NULL: answer with
 * no bytes. */
typedef void (*hora_swim_status_fn)(void *arg, struct hora_swim_status *st);
void hora_swim_status_source(struct hora_swim *s, hora_swim_status_fn get, void *arg);
/* Ask every live member (STATUS_Q); their STATUS_R answers are kept. */
void hora_swim_status_query(struct hora_swim *s, int64_t now_ms);
/* Member uid's last answer and when it came (now_ms clock): 0, or -1 if
 * none yet. */
int hora_swim_status_of(const struct hora_swim *s, uint64_t uid, struct hora_swim_status *st,
			int64_t *at_ms);

#endif
