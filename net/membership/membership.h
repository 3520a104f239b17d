/* membership.h - SWIM membership and agreed views (net/MEMBERSHIP.md) run
 * on a transport loop's comm thread (internal API of libhora; core/, bench/
 * and tests use it).
 *
 * A struct hora_net_membership owns the SWIM state, its UDP socket and its
 * timer; it uses only the loop's service (posted calls, a timer, a datagram
 * socket: net/transport/transport.h). It knows nothing of collectives: what
 * the application says about itself for the stall inspector travels as
 * opaque bytes (struct hora_swim_status).
 *
 * Every call is thread-safe unless said otherwise.
 */
#ifndef HORA_NET_MEMBERSHIP_H
#define HORA_NET_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/membership/swim.h"
#include "net/transport/transport.h"

struct hora_net_membership;

/* Bind UDP host:port (0 = any; *bound, when not NULL, gets it) and run SWIM
 * on loop's comm thread, joining through the seeds (none: start alone).
 * cfg's uid (when 0: a random one), self address and secret (the loop's)
 * are filled in here. Returns 0 and *out (free with
 * hora_net_membership_destroy, before the loop), or -errno with the reason
 * in err. */
int hora_net_membership_create(struct hora_net_loop *loop, const struct hora_swim_cfg *cfg,
			       const char *host, uint16_t port, uint16_t *bound,
			       const struct hora_swim_addr *seeds, int nseeds,
			       struct hora_net_membership **out, char *err, size_t errlen);
/* Stop SWIM (no leave announced: call hora_net_membership_leave first for a
 * graceful one), close its socket and free it; callbacks (the status
 * source) are not called after it returns. Wakes hora_net_membership_wait
 * (-ESHUTDOWN) on other threads and returns once they have left it; no
 * other call on m may start after destroy has. NULL: no-op. */
void hora_net_membership_destroy(struct hora_net_membership *m);

/* The installed view, this member's rank (-1 if not in it), paused and why
 * (why may be NULL with whylen 0). Returns 0. */
int hora_net_membership_view(struct hora_net_membership *m, struct hora_swim_view *v, int *rank,
			     bool *paused, char *why, size_t whylen);
/* The job's first view (hora_swim_first_view: id 0 while there is none)
 * and this member's rank in it (-1 if not in it). Returns 0. */
int hora_net_membership_first_view(struct hora_net_membership *m, struct hora_swim_view *v, int *rank);
/* Wait until the installed view id differs from `known`, its paused state
 * changes, or the number of live members changes; timeout_ms -1 = forever.
 * 0, -ETIMEDOUT, or -ESHUTDOWN (being destroyed). */
int hora_net_membership_wait(struct hora_net_membership *m, uint64_t known, bool known_paused,
			     int timeout_ms);
/* Members this one believes alive (itself included). */
int hora_net_membership_alive(struct hora_net_membership *m);
/* What this member believes of member uid: enum hora_swim_state
 * (HORA_SWIM_DEAD: the failure detector declared it dead; HORA_SWIM_LEFT:
 * it left gracefully), or -ENOENT when it is not in the member table. */
int hora_net_membership_state(struct hora_net_membership *m, uint64_t uid);
/* The member table as this member knows it, itself first (at most cap;
 * .refused: dead, its port answered unreachable). Returns the count. */
int hora_net_membership_members(struct hora_net_membership *m, struct hora_swim_member *out, int cap);
/* What joining through each seed met (hora_swim_seeds; at most cap, and at
 * most HORA_NET_MEMBERSHIP_SEEDS are kept). Returns the count. */
#define HORA_NET_MEMBERSHIP_SEEDS 16
int hora_net_membership_seeds(struct hora_net_membership *m, struct hora_swim_seed *out, int cap);
/* Whether every seed refused this member's JOINs, answering with another
 * cluster secret (hora_swim_secret_refused): waiting will not help. */
bool hora_net_membership_secret_refused(struct hora_net_membership *m);
/* Whether a seed (or any member) has answered. */
bool hora_net_membership_joined(struct hora_net_membership *m);
/* Announce a graceful leave to every member; returns once sent. */
void hora_net_membership_leave(struct hora_net_membership *m);
void hora_net_membership_stats(struct hora_net_membership *m, struct hora_swim_stats *st);

/* Application status (opaque, at most HORA_SWIM_STATUS_MAX bytes): where
 * this member's STATUS answers come from (get runs on the comm thread and
 * must not block; NULL: answer with no bytes); ask every live member for
 * theirs (*sent_ms: when, on the clock of the answers); read the answer of
 * the member with this rank in the installed view if it came at or after
 * since_ms (0, or -ENOENT). 0 or -errno. */
int hora_net_membership_status_source(struct hora_net_membership *m, hora_swim_status_fn get,
				      void *arg);
int hora_net_membership_status_query(struct hora_net_membership *m, int64_t *sent_ms);
int hora_net_membership_status(struct hora_net_membership *m, int rank, int64_t since_ms,
			       struct hora_swim_status *st);

/* Parse "a.b.c.d:port" (net/util/hostport.h) into a SWIM address. 0 or
 * -EINVAL. */
int hora_net_swim_addr(const char *hostport, struct hora_swim_addr *a);

#endif
