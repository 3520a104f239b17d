/* comm.h - internals of the public communicator shared inside core/
 * (hora_init builds one from a cluster file; the distributed optimizer and
 * the timeline read the times of its requests). */
#ifndef HORA_CORE_COMM_H
#define HORA_CORE_COMM_H

#include "hora.h"
#include "init.h"
#include "net/coll/coll.h"

/* Create from a full transport configuration (hora_comm_create builds one
 * of these from its public config). nc->opts.secret must be set. */
int hora_comm_create_net(const struct hora_net_comm_cfg *nc, enum hora_algo algo,
			 struct hora_comm **out, char *err, size_t errlen);

struct hora_net_membership;
struct hora_swim_status;
/* One rank of the communicator as the membership knows it (for the loss
 * watcher's message): its uid, worker index (-1: unknown) and address. */
struct hora_comm_member {
	uint64_t uid;
	int worker;
	char addr[80];
};
/* The communicator owns loop and the membership running on it from now on
 * (hora_init's: it keeps gossiping while the job runs), answers the
 * membership's status queries with its collective progress, and destroys
 * the membership, then the loop, last. members (size of them, rank order,
 * copied; NULL: none) are the ranks of view `view`: with a membership and
 * size > 1 the monitor thread starts here and watches them (the loss
 * watcher: a member the failure detector declared dead stops the job with
 * HORA_ERR_LOST). */
void hora_comm_own_loop(struct hora_comm *c, struct hora_net_loop *loop,
			struct hora_net_membership *m, const struct hora_comm_member *members,
			uint64_t view);
struct hora_net_membership *hora_comm_membership(const struct hora_comm *c);
/* The loop the membership runs on (NULL: none); tests block it to freeze
 * the membership of one rank. */
struct hora_net_loop *hora_comm_owned_loop(const struct hora_comm *c);

/* How this communicator's calls on device buffers went (devcoll.h's
 * devcoll_describe); call it between calls. */
const char *hora_comm_device_path(struct hora_comm *c);

/* hora_wait that also returns when the request started and finished
 * executing (hora_clock_s() seconds). */
int hora_wait_timed(struct hora_request *req, double *start, double *end);

/* Whether the monitor thread stopped the job: the stall inspector (every
 * call fails with HORA_ERR_STALL) or the loss watcher (HORA_ERR_LOST). */
bool hora_comm_stalled(const struct hora_comm *c);
/* Its code (0: not stopped) and report ("" while not stopped). */
int hora_comm_stop_code(const struct hora_comm *c);
const char *hora_comm_stop_message(const struct hora_comm *c);

/* Form another net communicator over c's ranks, each listening on its
 * port + port_offset, with c's secret and options but no I/O timeout (for
 * hora_apair_create: a link of its own). Every rank calls it. 0 or -errno
 * (err). -EINVAL when c was not formed from addresses. */
struct hora_net_comm;
/* The net comm under c now (it changes at an elastic re-form): for tests
 * and benches that look at what the collectives did. */
struct hora_net_comm *hora_comm_net(struct hora_comm *c);
int hora_comm_open_channel(struct hora_comm *c, int port_offset, struct hora_net_comm **out, char *err,
			   size_t errlen);

/* The fusion settings of the environment (hora_init), which distributed
 * optimizers over c apply over their own. Set before any call. */
void hora_comm_set_fusion_override(struct hora_comm *c, const struct hora_fusion_override *o);
const struct hora_fusion_override *hora_comm_fusion_override(const struct hora_comm *c);

/* ---- elastic training (core/rejoin.c builds the next view's net comm) ---- */

/* The next view's communicator, as the rejoin callback returns it. */
struct hora_comm_next {
	struct hora_net_comm *net;
	struct hora_comm_member *members; /* malloc'd, net's size of them, rank order */
	uint64_t view;
};
struct hora_comm_elastic {
	/* wait for the next view after old_view (its members alive, enough of
	 * them) and form the net comm over it; 0 or a code with err */
	int (*next)(void *arg, uint64_t old_view, struct hora_comm_next *out, char *err, size_t errlen);
	void *arg;
	void (*free_arg)(void *arg); /* at hora_comm_destroy */
	/* whether the installed view's participants differ from members (n,
	 * rank order): a joiner waits to be admitted */
	bool (*pending)(void *arg, const struct hora_comm_member *members, int n);
	bool joined; /* formed by a joiner of a running job (it has no state yet) */
	double detect_s; /* how long the failure detector may take to declare a death */
};
/* A communicator around net (formed by el.next for a joiner); 0 or -ENOMEM. */
int hora_comm_from_net(struct hora_net_comm *net, enum hora_algo algo, struct hora_comm **out);
bool hora_comm_joined(const struct hora_comm *c);
/* el.detect_s (5 s when not set), and whether a rank is SUSPECT now. */
double hora_comm_detect_s(const struct hora_comm *c);
bool hora_comm_suspect(struct hora_comm *c);
/* The view a member's STATUS answer says its communicator was formed over
 * (0: none, or no answer of ours). */
uint64_t hora_comm_status_view(const struct hora_swim_status *st);
/* Make c elastic: the loss watcher interrupts with HORA_ERR_VIEW (and names
 * the lost rank in hora_comm_last_error) instead of stopping the job. */
void hora_comm_set_elastic(struct hora_comm *c, const struct hora_comm_elastic *el);
bool hora_comm_is_elastic(const struct hora_comm *c);
uint64_t hora_comm_view(const struct hora_comm *c);
/* The ranks (rank order, hora_comm_size of them; NULL: not known). */
const struct hora_comm_member *hora_comm_members(const struct hora_comm *c);
/* Whether c should be re-formed: stopped with HORA_ERR_VIEW, or one of its
 * ranks is dead, left, or missing from a newer installed view. */
bool hora_comm_view_changed(struct hora_comm *c);
/* Whether the monitor stopped c because the others had dropped this worker
 * (frozen or cut off past the failure detector's time: a newer view lacks
 * it, or re-admitted it after a view without it); reading clears it. */
bool hora_comm_dropped(struct hora_comm *c);
/* Whether a joiner waits to be admitted (el.pending). */
bool hora_comm_joiners(struct hora_comm *c);
/* Destroy the net comm and form the next view's (el.next). Every request
 * must be finished (it waits for the queue to drain). On failure c has no
 * net comm: every call fails with the code and err's message. (Public as
 * hora_elastic_reform, which first waits for the view to change.) */
int hora_comm_reform(struct hora_comm *c, char *err, size_t errlen);
/* comm_keep.c. Every rank of an elastic formation calls
 * hora_comm_await_ready before the sync that follows it (a joiner's keeper
 * has run them for it): rounds until every rank of it is ready. 0, or the
 * failed round's code (a rank died: re-form again). Once per formation. */
int hora_comm_await_ready(struct hora_comm *c);
/* A joiner, admitted: start its keeper, which answers the others' rounds
 * until a call of its own; not claimed within wait_s (<= 0: 600) it makes
 * the worker leave the job. 0 or -errno (no thread: the first call of its
 * own runs the rounds). */
int hora_comm_keep_start(struct hora_comm *c, double wait_s);

#endif
