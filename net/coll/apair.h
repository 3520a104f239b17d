/* apair.h - asynchronous pair averaging (AD-PSGD): any rank may, at any
 * time, ask one peer to average models with it; nobody waits for anybody
 * else. net/coll/README.md "Asynchronous pairs" has the protocol and why it
 * cannot deadlock.
 *
 * An engine runs on a communicator of its own (a channel: its link carries
 * nothing else), built by the caller, with the I/O timeout off (a pair may
 * stay quiet for as long as it likes: liveness is the membership's, and the
 * waits below take a deadline and an "is the job alive" check instead).
 * The model x stays the caller's: the engine reads and writes it only
 * inside hora_net_apair_start / _poll / _quiesce, on the caller's thread;
 * its progress thread moves copies. One exchange at a time per rank, as
 * initiator or as responder:
 *
 * - initiator: start(peer, x) copies x and asks peer; peer's progress
 *   thread answers at once, GO (then our copy goes) or BUSY (it is in an
 *   exchange of its own, or closed). A later poll applies the reply:
 *   x += avg - copy, so x ends as the average plus what the caller did to
 *   x meanwhile (exactly avg when nothing: the pair's sum is preserved).
 * - responder: a request accepted, the initiator's copy arrives; the next
 *   poll sets x = avg = (lower rank's + higher rank's) / 2, computed in
 *   double, and sends avg back: both end with the same bits.
 *
 * Only f32 and f64. Every rank also carries a vector of n counters (its
 * own: hora_net_apair_progress; the others' as last heard, merged by max
 * from every message): the trainer's samples, so that a rank learns how
 * far the job is without a collective. */
#ifndef HORA_NET_COLL_APAIR_H
#define HORA_NET_COLL_APAIR_H

#include "net/coll/coll.h"

#include <stddef.h>
#include <stdint.h>

struct hora_net_apair;

enum hora_net_apair_what {
	HORA_NET_APAIR_NONE,    /* nothing finished */
	HORA_NET_APAIR_APPLIED, /* our request: the average is in x */
	HORA_NET_APAIR_BUSY,    /* our request: the peer was busy; x unchanged */
	HORA_NET_APAIR_FAILED,  /* our request: the peer is gone; x unchanged */
	HORA_NET_APAIR_SERVED,  /* a peer's request: the average is in x, and on its way */
};

struct hora_net_apair_event {
	enum hora_net_apair_what what;
	int peer;
	double reply_s; /* our request: from start to the answer's arrival */
};

struct hora_net_apair_stats {
	uint64_t applied, busy, failed, served, refused; /* refused: requests answered BUSY */
};

/* An engine of count elements of t (f32 or f64) on chan, which must be
 * used for nothing else (the engine owns it from now on and destroys it).
 * 0, or -EINVAL / -ENOMEM (err says why; chan then is destroyed too). */
int hora_net_apair_create(struct hora_net_comm *chan, size_t count, enum hora_net_dtype t,
			  struct hora_net_apair **out, char *err, size_t errlen);
/* Closes the channel and frees everything (after hora_net_apair_quiesce:
 * nothing in flight). NULL: no-op. */
void hora_net_apair_destroy(struct hora_net_apair *a);

/* Ask peer to average with x (copied now). 0 started; -EBUSY: an exchange
 * is in flight here or the engine is closed (nothing started); -EINVAL: not
 * another rank; -ENOTCONN: the peer is gone. */
int hora_net_apair_start(struct hora_net_apair *a, int peer, const void *x);
/* Without waiting: finish what is ready (apply our reply, or serve the
 * request of a peer) into x, and say what in *ev. 0, or the engine's
 * error (a malformed message; err in hora_net_apair_error). */
int hora_net_apair_poll(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev);
/* Close (later requests are answered BUSY) and finish what is in flight,
 * into x, waiting for it: at most one exchange, whose partner answers
 * without waiting for anyone; what it finished in *ev (NULL: not wanted),
 * as poll says. Every 10 ms alive(arg) (NULL: none) may stop the wait
 * (non-zero: its code is returned); timeout_ms (> 0) bounds it
 * (-ETIMEDOUT). 0 once nothing is in flight. This rank's counters go to
 * every peer at once, to the partner of the exchange in flight once it is
 * done (a rank that waits for the others lets them know at once). */
int hora_net_apair_quiesce(struct hora_net_apair *a, void *x, int (*alive)(void *), void *arg,
			   int timeout_ms, struct hora_net_apair_event *ev);
/* Accept requests again. */
void hora_net_apair_reopen(struct hora_net_apair *a);

/* This rank's counter (sent with every later message). */
void hora_net_apair_progress(struct hora_net_apair *a, uint64_t mine);
/* The n counters as this rank knows them (its own exact). */
void hora_net_apair_progress_view(struct hora_net_apair *a, uint64_t *v);
/* Replace the view (the exact counters, e.g. after an allreduce). */
void hora_net_apair_progress_set(struct hora_net_apair *a, const uint64_t *v);
/* Our counters to every peer now (a head each, best effort), but the
 * partner of an exchange in flight. Only on the thread that calls start,
 * poll and quiesce (a VIEW from another could fall between a message and
 * its body). */
void hora_net_apair_tell(struct hora_net_apair *a);

void hora_net_apair_stats(struct hora_net_apair *a, struct hora_net_apair_stats *s);
/* The first failure seen ("" if none: a peer gone, a malformed message),
 * copied into buf. */
void hora_net_apair_error(struct hora_net_apair *a, char *buf, size_t len);

#endif
