/* comm_watch.c - the communicator's monitor thread (communicators of
 * hora_init, which own a membership): the loss watcher and the stall
 * inspector, the STATUS answers the inspector reads from the other members,
 * and what a call that failed waits for before it returns (the watcher's
 * verdict). Not the calls themselves (comm.c).
 *
 * The watcher follows the membership: when the failure detector declares a
 * rank of this communicator dead, the job stops (elastic training is off) or
 * the communicator is interrupted for a re-form (on). The inspector watches
 * the collective in progress. Either interrupts the communicator, so the
 * call in flight and every later one return HORA_ERR_LOST, HORA_ERR_VIEW or
 * HORA_ERR_STALL with the message as the error text, on the caller's thread
 * (the library never exits the process). Neither touches the data path: the
 * monitor sleeps in hora_net_membership_wait. core/README.md "The loss
 * watcher", "The stall inspector".
 */
#include "comm.h"
#include "comm_internal.h"
#include "devcoll.h"
#include "log.h"

#include "net/membership/membership.h"
#include "net/transport/endian.h"
#include "net/util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What the membership's STATUS answers carry for the stall inspector (opaque
 * to the membership): the collective this rank's communicator is in or last
 * finished, and the view it was formed over (elastic joiners look for a
 * running job by it). Wire: seq u64, kind u32, waiting u32 (1: inside it),
 * waited_ms u32, view u64, little-endian, 28 bytes; no bytes: no
 * communicator there. */
#define PROGRESS_BYTES 28
struct progress {
	uint64_t seq;
	uint32_t kind, waiting, waited_ms;
	uint64_t view;
};

static void progress_encode(const struct progress *p, struct hora_swim_status *st)
{
	hora_put64(st->data, p->seq);
	hora_put32(st->data + 8, p->kind);
	hora_put32(st->data + 12, p->waiting);
	hora_put32(st->data + 16, p->waited_ms);
	hora_put64(st->data + 20, p->view);
	st->len = PROGRESS_BYTES;
}

/* 0, or -1 when the member has no communicator (or sent something else). */
static int progress_decode(const struct hora_swim_status *st, struct progress *p)
{
	if (st->len != PROGRESS_BYTES)
		return -1;
	*p = (struct progress){.seq = hora_get64(st->data), .kind = hora_get32(st->data + 8),
			       .waiting = hora_get32(st->data + 12),
			       .waited_ms = hora_get32(st->data + 16), .view = hora_get64(st->data + 20)};
	return 0;
}

uint64_t hora_comm_status_view(const struct hora_swim_status *st)
{
	struct progress p;
	return progress_decode(st, &p) ? 0 : p.view;
}

/* STATUS answers for the other members: what our collectives are doing */
static void status_get(void *arg, struct hora_swim_status *st)
{
	struct hora_comm *c = arg;
	uint64_t seq;
	uint32_t kind;
	int inside;
	int64_t since;
	pthread_mutex_lock(&c->net_mu);
	if (!c->net) { /* between two views: no collective, the job's last view */
		const struct progress p = {.view = c->view_id};
		pthread_mutex_unlock(&c->net_mu);
		progress_encode(&p, st);
		return;
	}
	hora_net_comm_progress(c->net, &seq, &kind, &inside, &since);
	const uint64_t view = c->view_id;
	pthread_mutex_unlock(&c->net_mu);
	int64_t w = inside ? hora_clock_ms() - since : 0;
	struct progress p = {.seq = seq, .kind = kind, .waiting = (uint32_t)inside,
			     .waited_ms = w < 0 ? 0 : w > UINT32_MAX ? UINT32_MAX : (uint32_t)w,
			     .view = view};
	progress_encode(&p, st);
}

/* The ranks that have not reached collective #seq, as "rank 2 (no collective
 * yet), ..." in out ("" if none is known): ask every member (membership
 * STATUS) where it is and give the answers a moment. Blocks ~300 ms. */
static size_t stall_missing(struct hora_comm *c, uint64_t seq, char *out, size_t n)
{
	int64_t sent;
	size_t k = 0;
	out[0] = 0;
	const int size = hora_net_comm_size(c->net), me = hora_net_comm_rank(c->net);
	if (!c->owned_m || hora_net_membership_status_query(c->owned_m, &sent))
		return 0;
	/* the answers: every rank's, or what came within a second (a loaded
	 * host's loop thread may take longer than the 300 ms this waited once) */
	const double end = hora_clock_s() + 1.0;
	for (bool all = false; !all && hora_clock_s() < end;) {
		usleep(20000);
		struct hora_swim_status probe;
		all = true;
		for (int r = 0; r < size && all; r++)
			all = r == me || !hora_net_membership_status(c->owned_m, r, sent, &probe);
	}
	for (int r = 0; r < size && k + 96 < n; r++) {
		struct hora_swim_status blob;
		struct progress st;
		if (r == me)
			continue;
		const char *sep = k ? ", " : "";
		if (hora_net_membership_status(c->owned_m, r, sent, &blob))
			k += (size_t)snprintf(out + k, n - k, "%srank %d (no answer)", sep, r);
		else if (progress_decode(&blob, &st))
			k += (size_t)snprintf(out + k, n - k, "%srank %d (no communicator)", sep, r);
		else if (st.seq < seq && !st.seq)
			k += (size_t)snprintf(out + k, n - k, "%srank %d (no collective yet)", sep, r);
		else if (st.seq < seq)
			k += (size_t)snprintf(out + k, n - k, "%srank %d (at %s #%llu, %s)", sep, r,
					      hora_net_coll_name(st.kind), (unsigned long long)st.seq,
					      st.waiting ? "waiting in it" : "finished it");
	}
	return k;
}

/* The stop (monitor thread): msg becomes the error of the call in flight
 * and of every later call, and the communicator is interrupted so that the
 * call returns now (the ranks waiting on this one then fail too; for a
 * loss, lost_rank is the rank their errors name). */
static void monitor_stop_job(struct hora_comm *c, int code, const char *msg, int lost_rank)
{
	pthread_mutex_lock(&c->mu);
	const bool first = !atomic_load_explicit(&c->stopped, memory_order_acquire);
	if (first) { /* a joiner's keeper that gave up stopped it first (comm_keep.c) */
		snprintf(c->stop_msg, sizeof(c->stop_msg), "%s", msg);
		atomic_store_explicit(&c->stopped, code, memory_order_release);
	}
	pthread_cond_broadcast(&c->cv); /* a call that failed meanwhile waits for this */
	pthread_mutex_unlock(&c->mu);
	if (!first)
		return;
	if (code == HORA_ERR_LOST || code == HORA_ERR_VIEW)
		hora_net_comm_interrupt_lost(c->net, lost_rank,
					     "a rank was declared dead by the failure detector");
	else
		hora_net_comm_interrupt(c->net, "stopped by the stall inspector (stall_abort_s)");
	devcoll_interrupt(atomic_load(&c->dev)); /* an NCCL call waits for no one now */
}

static bool view_has(const struct hora_swim_view *v, uint64_t uid)
{
	for (int i = 0; i < v->n; i++)
		if (v->uids[i] == uid)
			return true;
	return false;
}

/* The first rank of the communicator (not this one) that is gone: DEAD in
 * the member table, or missing from an installed view newer than the
 * communicator's; with left, also one that left gracefully (or is no
 * longer in the table). -1 if none. */
static int gone_scan(struct hora_comm *c, bool left)
{
	if (!c->members || !c->owned_m || !c->net)
		return -1;
	struct hora_swim_view v;
	int myrank;
	bool paused;
	hora_net_membership_view(c->owned_m, &v, &myrank, &paused, NULL, 0);
	const int n = hora_net_comm_size(c->net), me = hora_net_comm_rank(c->net);
	for (int r = 0; r < n; r++) {
		if (r == me)
			continue;
		const int st = hora_net_membership_state(c->owned_m, c->members[r].uid);
		const bool gone = st == HORA_SWIM_LEFT || st == -ENOENT;
		if (st == HORA_SWIM_DEAD || (left && gone) ||
		    ((left || st != HORA_SWIM_LEFT) && v.id > c->view_id && !view_has(&v, c->members[r].uid)))
			return r;
	}
	return -1;
}

/* Whether the others dropped this worker while it could not answer
 * (frozen past the failure detector's time, cut off): an installed view
 * newer than the communicator's lacks it, or (elastic) holds exactly the
 * communicator's members again after this member was paused long enough to
 * be declared dead (the membership counts such pauses): the others have
 * moved on over a communicator this one never formed. A view that came and
 * went without a pause here (a stray member, a refused joiner) is none of
 * that. why: the message. */
static uint64_t long_pauses(struct hora_comm *c)
{
	struct hora_swim_stats st;
	hora_net_membership_stats(c->owned_m, &st);
	return st.long_pauses;
}

static bool self_dropped(struct hora_comm *c, char *why, size_t n)
{
	if (!c->members || !c->owned_m || !c->net)
		return false;
	struct hora_swim_view v;
	int myrank;
	bool paused;
	hora_net_membership_view(c->owned_m, &v, &myrank, &paused, NULL, 0);
	if (v.id <= c->view_id)
		return false;
	const int size = hora_net_comm_size(c->net), me = hora_net_comm_rank(c->net);
	const struct hora_comm_member *mb = &c->members[me];
	const char *how = NULL;
	if (!view_has(&v, mb->uid)) {
		how = "lacks it";
	} else if (c->elastic && v.n == size && long_pauses(c) > c->long_pauses) {
		bool same = true;
		for (int r = 0; r < size && same; r++)
			same = view_has(&v, c->members[r].uid);
		if (same)
			how = "holds it again after a view without it";
	}
	if (!how)
		return false;
	snprintf(why, n, "this worker (rank %d, worker %d, %s) was declared dead by the others while it did not "
		 "answer (frozen or cut off for longer than the failure detector's time): view %llu %s",
		 me, mb->worker, mb->addr, (unsigned long long)v.id, how);
	return true;
}

/* The first rank of the communicator (not this one) that the failure
 * detector declared dead: DEAD in the member table, or missing from an
 * installed view newer than the communicator's without having left
 * gracefully. -1 if none. A member that joined changes nothing here. */
static int lost_scan(struct hora_comm *c)
{
	return gone_scan(c, false);
}

/* Rank r was declared dead: wait (up to 1 s) for the view without it, or
 * for this member to pause (no majority left to agree on one), then stop
 * the job naming it. A call that fails meanwhile waits for the message
 * (stop_pending). If r comes back first (it refuted its death and is still
 * in the installed view), nothing happens: false (true when c is being
 * destroyed: the monitor ends). */
static bool lost_decide(struct hora_comm *c, int r)
{
	const struct hora_comm_member *mb = &c->members[r];
	if (c->elastic) { /* no waiting for the view: the re-form waits for it */
		char msg[256];
		snprintf(msg, sizeof(msg), "lost rank %d (worker %d, %s): declared dead by the failure detector",
			 r, mb->worker, mb->addr);
		monitor_stop_job(c, HORA_ERR_VIEW, msg, r);
		return true;
	}
	atomic_store_explicit(&c->stop_pending, true, memory_order_release);
	const double deadline = hora_clock_s() + 1.0;
	double without_at = 0; /* when the view without it was first seen */
	char how[256] = "";
	for (;;) {
		struct hora_swim_view v;
		int myrank;
		bool paused;
		char why[128];
		hora_net_membership_view(c->owned_m, &v, &myrank, &paused, why, sizeof(why));
		const int st = hora_net_membership_state(c->owned_m, mb->uid);
		const bool in_view = view_has(&v, mb->uid);
		if ((st != HORA_SWIM_DEAD && in_view) || st == HORA_SWIM_LEFT || atomic_load(&c->monitor_stop)) {
			/* it is back (no loss), it left gracefully after all (its LEAVE
			 * read after the refusal of a later probe, which may already
			 * have brought the view without it), or c is being destroyed */
			pthread_mutex_lock(&c->mu);
			atomic_store_explicit(&c->stop_pending, false, memory_order_release);
			pthread_cond_broadcast(&c->cv);
			pthread_mutex_unlock(&c->mu);
			return atomic_load(&c->monitor_stop);
		} else if (v.id > c->view_id && !in_view) {
			/* a LEAVE that comes just after the view without it still counts
			 * as one: 200 ms of grace, well inside the detection time */
			if (!without_at)
				without_at = hora_clock_s();
			if (hora_clock_s() - without_at < 0.2) {
				hora_net_membership_wait(c->owned_m, v.id, paused, 20);
				continue;
			}
			snprintf(how, sizeof(how), "view %llu without it", (unsigned long long)v.id);
		} else if (paused) {
			snprintf(how, sizeof(how), "no view without it: %s", why);
		} else if (hora_clock_s() > deadline) {
			snprintf(how, sizeof(how), "no view without it yet");
		} else {
			hora_net_membership_wait(c->owned_m, v.id, paused, 100);
			continue;
		}
		break;
	}
	char msg[512];
	if (mb->worker >= 0)
		snprintf(msg, sizeof(msg),
			 "rank %d (worker %d, %s) was declared dead by the failure detector (%s): the job stops "
			 "(elastic training is off)", r, mb->worker, mb->addr, how);
	else
		snprintf(msg, sizeof(msg),
			 "rank %d (%s) was declared dead by the failure detector (%s): the job stops (elastic "
			 "training is off)", r, mb->addr, how);
	monitor_stop_job(c, HORA_ERR_LOST, msg, r);
	return true;
}

/* Whether collective #seq, entered since_ms, is due for a report now
 * (c->mu held): past stall_warn_s and not reported in the last warn_s, or
 * past stall_abort_s. */
static bool stall_due(const struct hora_comm *c, uint64_t seq, int64_t since_ms, uint64_t warned_seq,
		      double next_warn, bool *abort_now)
{
	const double now = hora_clock_s(), waited = now - (double)since_ms / 1e3;
	*abort_now = c->stall_abort_s > 0 && waited >= c->stall_abort_s;
	if (*abort_now)
		return true;
	return waited >= c->stall_warn_s && (seq != warned_seq || now >= next_warn);
}

/* The stall inspector's turn (c->mu held, returned held): when this rank
 * has been inside one collective for stall_warn_s, ask every member where
 * it is and log the ranks that have not reached it (again every
 * stall_warn_s while it lasts); after stall_abort_s, stop the job. Returns
 * true when it stopped the job. */
static bool stall_check(struct hora_comm *c, uint64_t *warned_seq, double *next_warn)
{
	uint64_t seq;
	uint32_t kind;
	int inside;
	int64_t since;
	bool abort_now;
	hora_net_comm_progress(c->net, &seq, &kind, &inside, &since);
	if (!c->stall_on || !inside || !stall_due(c, seq, since, *warned_seq, *next_warn, &abort_now))
		return false;
	if (abort_now) /* from now on a failing call is this stall (another rank's abort
			  may fail it while we ask where the others are) */
		atomic_store_explicit(&c->stop_pending, true, memory_order_release);
	pthread_mutex_unlock(&c->mu);
	char missing[1024], report[1280];
	const size_t k = stall_missing(c, seq, missing, sizeof(missing));
	const double waited = hora_clock_s() - (double)since / 1e3;
	const int me = hora_net_comm_rank(c->net);
	const char *what = hora_net_coll_name(kind);
	if (abort_now) {
		snprintf(report, sizeof(report),
			 "stall: rank %d waited %.0f s in %s #%llu (stall_abort_s %.0f); ranks that have not "
			 "reached it: %s. Stopping this worker.",
			 me, waited, what, (unsigned long long)seq, c->stall_abort_s, k ? missing : "none known");
		monitor_stop_job(c, HORA_ERR_STALL, report, -1);
		pthread_mutex_lock(&c->mu);
		return true;
	}
	HORA_LOGW("stall: rank %d has waited %.0f s in %s #%llu; ranks that have not reached it: %s",
		  me, waited, what, (unsigned long long)seq, k ? missing : "none (all are in it: slow link?)");
	pthread_mutex_lock(&c->mu);
	*warned_seq = seq;
	*next_warn = hora_clock_s() + c->stall_warn_s; /* repeat while it lasts */
	return false;
}

/* The monitor thread: sleeps in the membership's wait (woken by a view
 * change or a member's death, else every 100 ms), then the loss watcher,
 * then the stall inspector. Ends when either stopped the job (nothing left
 * to watch: every call fails now) or the communicator is destroyed. */
static void *monitor_main(void *arg)
{
	struct hora_comm *c = arg;
	c->long_pauses = long_pauses(c); /* this communicator's: a pause before it is none of its business */
	uint64_t warned_seq = 0, known = 0;
	bool known_paused = false;
	double next_warn = 0;
	while (!atomic_load(&c->monitor_stop)) {
		hora_net_membership_wait(c->owned_m, known, known_paused, 100);
		if (atomic_load(&c->monitor_stop))
			break;
		struct hora_swim_view v;
		int myrank;
		hora_net_membership_view(c->owned_m, &v, &myrank, &known_paused, NULL, 0);
		known = v.id;
		char why[384];
		if (self_dropped(c, why, sizeof(why))) {
			/* elastic: it re-forms as a joiner (its stale state discarded) */
			atomic_store_explicit(&c->dropped, true, memory_order_release);
			monitor_stop_job(c, c->elastic ? HORA_ERR_VIEW : HORA_ERR_LOST, why,
					 hora_net_comm_rank(c->net));
			break;
		}
		const int r = lost_scan(c);
		if (r >= 0 && lost_decide(c, r))
			break;
		pthread_mutex_lock(&c->mu);
		const bool stopped = stall_check(c, &warned_seq, &next_warn);
		pthread_mutex_unlock(&c->mu);
		if (stopped)
			break;
	}
	return NULL;
}

/* the monitor thread, once (c->mu held) */
void hora_comm_watch_start(struct hora_comm *c)
{
	if (c->owned_m && c->net && !c->monitor_started && hora_net_comm_size(c->net) > 1 &&
	    !pthread_create(&c->monitor, NULL, monitor_main, c))
		c->monitor_started = true;
}

void hora_comm_watch_begin(struct hora_comm *c)
{
	/* last: the status callback reads view_id (and c->net) from now on */
	hora_net_membership_status_source(c->owned_m, status_get, c);
	pthread_mutex_lock(&c->mu);
	hora_comm_watch_start(c);
	pthread_mutex_unlock(&c->mu);
}

void hora_comm_watch_stop(struct hora_comm *c)
{
	atomic_store(&c->monitor_stop, true); /* it wakes within 100 ms */
	if (c->monitor_started)
		pthread_join(c->monitor, NULL);
	c->monitor_started = false;
}

void hora_comm_set_stall(struct hora_comm *c, double warn_s, double abort_s)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stall_warn_s = warn_s > 0 ? warn_s : 60;
	c->stall_abort_s = abort_s > 0 ? abort_s : 0;
	c->stall_on = true;
	hora_comm_watch_start(c);
	pthread_mutex_unlock(&c->mu);
}

/* Whether a rank of c is SUSPECT: the failure detector has not decided yet. */
bool hora_comm_suspect(struct hora_comm *c)
{
	if (!c->members || !c->owned_m || !c->net)
		return false;
	const int n = hora_net_comm_size(c->net);
	for (int r = 0; r < n; r++)
		if (hora_net_membership_state(c->owned_m, c->members[r].uid) == HORA_SWIM_SUSPECT)
			return true;
	return false;
}

/* Whether this communicator has a reason to be re-formed: the monitor
 * stopped it for a lost rank, or a rank of it is dead or gone (left, or
 * missing from a newer installed view). */
bool hora_comm_view_changed(struct hora_comm *c)
{
	if (atomic_load_explicit(&c->stopped, memory_order_acquire) == HORA_ERR_VIEW)
		return true;
	return gone_scan(c, true) >= 0;
}

/* ---- a failed call: the watcher's verdict ------------------------------------ */

/* Whether a failed call may be the monitor's stop that is coming: one is
 * being decided, or a rank of ours is dead in the membership while the
 * monitor has not looked yet (another rank's loss watcher interrupted its
 * communicator first, and its notice failed our call). */
static bool stop_coming(struct hora_comm *c)
{
	return atomic_load_explicit(&c->stop_pending, memory_order_acquire) || lost_scan(c) >= 0;
}

/* Whether rc is how a member's going shows on a link: its socket reset or
 * closed (TCP), its shared-memory channel or stage gone (a process that
 * died, or one that left after failing on it), or a notice that another
 * rank lost one. */
static bool broken_link(int rc)
{
	return rc == -ECONNRESET || rc == -EPIPE || rc == -ENOTCONN || rc == -ECONNABORTED ||
	       rc == -ECONNREFUSED;
}

/* Whether a rank of c left gracefully (finished, or ended on an error of
 * its own and said so) while none is dead: that explains a broken link. */
static bool only_left(struct hora_comm *c)
{
	return lost_scan(c) < 0 && gone_scan(c, true) >= 0;
}

/* The waiting, c->mu held: until the monitor stopped the job, or nothing
 * (more) is to be waited for (stop_coming: 3 s from when it was first seen;
 * a broken link: until a rank left gracefully instead, or until detect_s). */
static void verdict_wait(struct hora_comm *c, bool link)
{
	const double t0 = hora_clock_s(), link_end = t0 + hora_comm_detect_s(c);
	double stop_end = 0;
	while (!atomic_load_explicit(&c->stopped, memory_order_acquire)) {
		const double now = hora_clock_s();
		if (stop_coming(c)) {
			if (!stop_end)
				stop_end = now + 3.0;
			if (now >= stop_end)
				break;
		} else if (!link || now >= link_end || only_left(c)) {
			break;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts); /* pthread_cond_timedwait's clock */
		ts.tv_nsec += 20000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	}
}

int hora_comm_watch_verdict(struct hora_comm *c, int st)
{
	if (!st || !c->members)
		return st;
	pthread_mutex_lock(&c->mu);
	/* a broken link to a member of a plain job: a crash is proven within a
	 * probe period (its port answers unreachable), then the watcher takes
	 * up to 1 s for the view without it; elastic training re-forms instead */
	const bool link = !c->elastic && c->monitor_started && broken_link(st);
	if (link || stop_coming(c))
		verdict_wait(c, link);
	pthread_mutex_unlock(&c->mu);
	const int code = atomic_load_explicit(&c->stopped, memory_order_acquire);
	return code ? code : st;
}
