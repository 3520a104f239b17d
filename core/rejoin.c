/* rejoin.c - elastic training's communicators: the next view's net comm
 * after a worker died, froze, left or joined, and a joiner's way into a
 * running job.
 *
 * Who takes part in a view: its members that are workers of the cluster
 * file, one per worker index (the lowest uid: the view is in uid order and
 * uids carry the index in their high bits), at most max_workers, in view
 * order; ranks follow that order. Every member computes the same list from
 * the same agreed view. A re-form waits for a view in which this worker
 * takes part, that is not paused (a minority side of a partition pauses),
 * whose other participants are all ALIVE in this member's table, and that
 * has at least min_workers participants; then it forms the net comm over it
 * (the view id in every handshake: a peer that formed over another view is
 * refused, and both try again with the newest). Below min_workers it says
 * who is missing every 10 s and fails after wait_s.
 *
 * What no wait can mend fails at once: this worker's own TCP address that
 * it cannot listen on (a port another process holds); a worker of the
 * job's first view that left gracefully before the job's first
 * communicator formed (it failed its start, or was stopped: the others
 * stop with it rather than train a job it was part of without it); and a
 * worker left alone, below min_workers, after every other worker it
 * trained with left gracefully (they finished, or were stopped: nobody
 * comes back to a job whose workers all left).
 */
#include "joining.h"
#include "log.h"

#include "net/util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rejoin {
	struct joining j; /* a copy: j.o points to o, j.no.secret to j.secret */
	struct hora_init_opts o;
	struct hora_elastic_config el;
	struct hora_net_membership *mem; /* the communicator's */
	/* the latest uid of each worker index that took part in a view this
	 * worker waited in (0: none yet); the caller's thread only */
	uint64_t last[HORA_SWIM_MAX_VIEW];
	bool formed;  /* a communicator was formed: the job started */
	bool joiner;  /* came in as a joiner of a running job */
};

/* The participants of view v (uids, rank order); returns how many. */
static int participants(const struct rejoin *rj, const struct hora_swim_view *v, uint64_t *p)
{
	const int max = rj->el.max_workers > 0 ? rj->el.max_workers : rj->j.size;
	int n = 0, last = -1;
	for (int i = 0; i < v->n && n < max; i++) {
		const int g = (int)(v->uids[i] >> 40) - 1;
		if (g < 0 || g >= rj->j.size || g == last)
			continue;
		last = g;
		p[n++] = v->uids[i];
	}
	return n;
}

static int index_of(const uint64_t *p, int n, uint64_t uid)
{
	for (int i = 0; i < n; i++)
		if (p[i] == uid)
			return i;
	return -1;
}

/* whether another member of p has this uid's worker index (a process of
 * that worker that died and is not out of the view yet, or a second one) */
static bool index_taken(const uint64_t *p, int n, uint64_t uid)
{
	for (int i = 0; i < n; i++)
		if (p[i] >> 40 == uid >> 40)
			return true;
	return false;
}

/* the file's workers that do not take part in view v, as "worker 2
 * (127.0.0.1:29503), ..." */
static void missing(const struct rejoin *rj, const uint64_t *p, int n, char *out, size_t len)
{
	size_t k = 0;
	out[0] = 0;
	for (int g = 0; g < rj->j.size && k + 64 < len; g++) {
		bool in = false;
		for (int i = 0; i < n; i++)
			in = in || (int)(p[i] >> 40) - 1 == g;
		char addr[80];
		if (in || hora_joining_name(&rj->j.cc, (uint64_t)(g + 1) << 40, addr)) /* no lookup: a message */
			continue;
		k += (size_t)snprintf(out + k, len - k, "%sworker %d (%s)", k ? ", " : "", g, addr);
	}
}

/* What a formation of view `view` over p watches (form_watch). */
struct watch {
	const struct rejoin *rj;
	uint64_t view;
	const uint64_t *p;
	int n;
};

/* The formation's check (hora_net_comm_cfg.check), between the short
 * slices of its waits: a formation whose view a newer one replaced, or
 * one of whose participants died or left, cannot complete (the others
 * form over the newer view, the dead never answer): it stops at once and
 * rejoin_next tries the newest view, instead of waiting out the try's
 * connect timeout. */
static int form_watch(void *arg, char *err, size_t errlen)
{
	const struct watch *w = arg;
	struct hora_swim_view v;
	int myrank;
	bool paused;
	hora_net_membership_view(w->rj->mem, &v, &myrank, &paused, NULL, 0);
	if (v.id != w->view)
		return snprintf(err, errlen, "view %llu replaced view %llu while its communicator formed",
				(unsigned long long)v.id, (unsigned long long)w->view), -ECANCELED;
	for (int i = 0; i < w->n; i++) {
		const int st = hora_net_membership_state(w->rj->mem, w->p[i]);
		char addr[80] = "?";
		if (w->p[i] == w->rj->j.uid || (st != HORA_SWIM_DEAD && st != HORA_SWIM_LEFT))
			continue;
		hora_joining_name(&w->rj->j.cc, w->p[i], addr);
		return snprintf(err, errlen, "worker %d (%s) %s while the communicator of view %llu formed",
				(int)(w->p[i] >> 40) - 1, addr, st == HORA_SWIM_DEAD ? "died" : "left",
				(unsigned long long)w->view), -ECANCELED;
	}
	return 0;
}

/* the net comm over the participants p of view id */
static int form(const struct rejoin *rj, uint64_t id, const uint64_t *p, int n, int me, int timeout_ms,
		struct hora_comm_next *out, char *err, size_t errlen)
{
	struct watch w = {.rj = rj, .view = id, .p = p, .n = n};
	char (*addr)[80] = calloc((size_t)n, 80);
	const char **addrs = calloc((size_t)n, sizeof(*addrs));
	struct hora_comm_member *mb = calloc((size_t)n, sizeof(*mb));
	int rc = addr && addrs && mb ? 0 : -ENOMEM;
	for (int i = 0; !rc && i < n; i++) {
		hora_joining_addr(&rj->j.cc, p[i], addr[i]); /* participants are workers of the file */
		addrs[i] = addr[i];
		mb[i] = (struct hora_comm_member){.uid = p[i], .worker = (int)(p[i] >> 40) - 1};
		snprintf(mb[i].addr, sizeof(mb[i].addr), "%s", addr[i]);
	}
	struct hora_net_comm_cfg nc;
	if (!rc) {
		hora_joining_net_cfg(&rj->j, me, n, addrs, id, timeout_ms, &nc);
		nc.check = form_watch;
		nc.check_arg = &w;
		rc = hora_net_comm_create(&nc, &out->net, err, errlen);
	}
	free(addr);
	free(addrs);
	if (rc) {
		free(mb);
		return rc;
	}
	out->members = mb;
	out->view = id;
	return 0;
}

/* remember the participants of a view by worker index */
static void note_seen(struct rejoin *rj, const uint64_t *p, int n)
{
	for (int i = 0; i < n; i++) {
		const int g = (int)(p[i] >> 40) - 1;
		if (g >= 0 && g < HORA_SWIM_MAX_VIEW)
			rj->last[g] = p[i];
	}
}

/* "worker 2 (127.0.0.1:29503)" appended to out at *k, comma separated */
static void name_worker(const struct rejoin *rj, int g, char *out, size_t len, size_t *k)
{
	char addr[80];
	if (*k + 100 >= len || hora_joining_name(&rj->j.cc, (uint64_t)(g + 1) << 40, addr))
		return;
	*k += (size_t)snprintf(out + *k, len - *k, "%sworker %d (%s)", *k ? ", " : "", g, addr);
}

/* A worker of the job that left gracefully, seen by this worker, and no
 * point in waiting for it. Before the job's first communicator (a starter,
 * not a joiner): any worker of it that left stops the job (err names it).
 * After: only when this worker is alone (n == 1 participant) below
 * min_workers and every other worker it saw left (none died: a dead one
 * may be restarted), and train.elastic.restart is off (with it, `hora
 * launch` starts a worker that stopped again: this one waits for it, as
 * for a dead one). HORA_ERR_LOST with err, or 0. */
static int gone_for_good(const struct rejoin *rj, int n, char *err, size_t errlen)
{
	char who[1024] = "";
	size_t k = 0;
	int left = 0;
	const bool start = !rj->formed && !rj->joiner;
	if (!start && (n != 1 || n >= rj->el.min_workers || rj->el.restart))
		return 0;
	for (int g = 0; g < HORA_SWIM_MAX_VIEW; g++) {
		if (!rj->last[g] || rj->last[g] == rj->j.uid)
			continue;
		const int st = hora_net_membership_state(rj->mem, rj->last[g]);
		if (st == HORA_SWIM_LEFT) {
			left++;
			name_worker(rj, g, who, sizeof(who), &k);
		} else if (!start) {
			return 0; /* alive, suspected, or dead and maybe restarted */
		}
	}
	if (!left)
		return 0;
	if (start)
		snprintf(err, errlen, "%s left the job while it started, before its first communicator "
				      "formed (its own output says why): the job stops", who);
	else
		snprintf(err, errlen, "worker %d is alone: every other worker of the job left it (%s: "
				      "finished or stopped), below train.elastic.min_workers %d: it stops rather "
				      "than wait train.elastic.wait_s %.0f s for workers that left",
			 rj->o.proc, who, rj->el.min_workers, rj->el.wait_s);
	return HORA_ERR_LOST;
}

/* a failure to form that no retry mends: this worker cannot listen on its
 * own address (a port another process holds, an address not of this host) */
static bool form_fatal(int rc)
{
	return rc == -EADDRINUSE || rc == -EADDRNOTAVAIL || rc == -EACCES;
}

/* whether every participant but this worker is ALIVE in the table */
static bool all_alive(const struct rejoin *rj, const uint64_t *p, int n)
{
	for (int i = 0; i < n; i++)
		if (p[i] != rj->j.uid && hora_net_membership_state(rj->mem, p[i]) != HORA_SWIM_ALIVE)
			return false;
	return true;
}

/* the pause message, every 10 s while it lasts */
static void say_paused(const struct rejoin *rj, const struct hora_swim_view *v, const uint64_t *p, int n,
		       bool paused, const char *why, double *next_note)
{
	if (hora_clock_s() < *next_note)
		return;
	*next_note = hora_clock_s() + 10;
	char miss[1024];
	missing(rj, p, n, miss, sizeof(miss));
	if (paused)
		HORA_LOGW("training paused: %s (a minority side of a partition waits for the majority)", why);
	else
		HORA_LOGW("training paused: view %llu has %d of train.elastic.min_workers %d workers; "
			  "missing: %s; waiting up to %.0f s", (unsigned long long)v->id, n, rj->el.min_workers,
			  miss[0] ? miss : "none", rj->el.wait_s);
}

static int rejoin_next(void *arg, uint64_t old_view, struct hora_comm_next *out, char *err, size_t errlen)
{
	struct rejoin *rj = arg;
	const double t0 = hora_clock_s(), deadline = t0 + rj->el.wait_s;
	double next_note = t0 + 1.0; /* a view change that takes a moment is no pause */
	uint64_t p[HORA_SWIM_MAX_VIEW];
	char why[256], e2[512] = "";
	(void)old_view;
	for (int tries = 0;; tries++) {
		struct hora_swim_view v;
		int myrank, n;
		bool paused;
		hora_net_membership_view(rj->mem, &v, &myrank, &paused, why, sizeof(why));
		n = participants(rj, &v, p);
		const int me = index_of(p, n, rj->j.uid);
		int rc = 0;
		if (v.id && !paused)
			note_seen(rj, p, n);
		if (v.id && !paused && me >= 0 && (rc = gone_for_good(rj, n, err, errlen)))
			return rc;
		if (v.id && !paused && me >= 0 && n >= rj->el.min_workers && all_alive(rj, p, n)) {
			const double left = deadline - hora_clock_s();
			rc = form(rj, v.id, p, n, me, left < 3 ? (left > 0.2 ? (int)(left * 1e3) : 200) : 3000, out,
				  e2, sizeof(e2));
			if (!rc)
				return rj->formed = true, 0;
			if (form_fatal(rc))
				return snprintf(err, errlen, "%s", e2), rc;
			HORA_LOGD("forming the communicator of view %llu (try %d): %s", (unsigned long long)v.id,
				  tries + 1, e2);
		} else if (v.id && !paused && myrank >= 0 && me < 0 && !index_taken(p, n, rj->j.uid)) {
			snprintf(err, errlen, "worker %d is not admitted: view %llu already has %d workers "
					      "(train.elastic.max_workers %d)", rj->o.proc, (unsigned long long)v.id, n,
				 rj->el.max_workers > 0 ? rj->el.max_workers : rj->j.size);
			return HORA_ERR_CONFIG;
		} else if (paused || (v.id && n < rj->el.min_workers)) {
			say_paused(rj, &v, p, n, paused, why, &next_note);
		}
		if (hora_clock_s() > deadline) {
			char miss[1024];
			missing(rj, p, n, miss, sizeof(miss));
			if (paused) /* a minority side: the count of its view says nothing */
				snprintf(err, errlen, "no view to train in after train.elastic.wait_s %.0f s: this "
						      "worker is on a side without a majority (%s)", rj->el.wait_s, why);
			else
				snprintf(err, errlen, "no view to train in after train.elastic.wait_s %.0f s: %d of "
						      "min_workers %d workers%s%s", rj->el.wait_s, n,
					 rj->el.min_workers, miss[0] ? "; missing: " : "", miss);
			if (e2[0])
				snprintf(err + strlen(err), errlen - strlen(err), "; last try: %s", e2);
			return HORA_ERR_LOST;
		}
		hora_net_membership_wait(rj->mem, v.id, paused, 50);
	}
}

static bool rejoin_pending(void *arg, const struct hora_comm_member *m, int n)
{
	struct rejoin *rj = arg;
	struct hora_swim_view v;
	int myrank;
	bool paused;
	uint64_t p[HORA_SWIM_MAX_VIEW];
	hora_net_membership_view(rj->mem, &v, &myrank, &paused, NULL, 0);
	const int np = participants(rj, &v, p);
	if (paused || index_of(p, np, rj->j.uid) < 0 || !all_alive(rj, p, np))
		return false;
	if (np != n)
		return true;
	for (int i = 0; i < n; i++)
		if (p[i] != m[i].uid)
			return true;
	return false;
}

static void rejoin_free(void *arg)
{
	struct rejoin *rj = arg;
	if (rj)
		memset(rj->j.secret, 0, sizeof(rj->j.secret));
	free(rj);
}

/* a copy of j's job for the re-forms of the communicator that owns mem */
static struct rejoin *rejoin_new(const struct joining *j, struct hora_net_membership *mem)
{
	struct rejoin *rj = calloc(1, sizeof(*rj));
	if (!rj)
		return NULL;
	rj->j = *j;
	rj->o = *j->o;
	rj->o.cluster = NULL;
	rj->el = *j->o->elastic;
	rj->o.elastic = &rj->el;
	rj->j.o = &rj->o;
	rj->j.no.secret = rj->j.secret;
	rj->j.loop = NULL;
	rj->j.mem = NULL;
	rj->mem = mem;
	return rj;
}

bool hora_rejoin_job_running(struct hora_net_membership *m)
{
	int64_t sent;
	if (hora_net_membership_status_query(m, &sent))
		return false;
	usleep(200000);
	struct hora_swim_view v;
	int myrank;
	bool paused;
	hora_net_membership_view(m, &v, &myrank, &paused, NULL, 0);
	for (int r = 0; r < v.n; r++) {
		struct hora_swim_status st;
		if (r == myrank || hora_net_membership_status(m, r, sent, &st))
			continue;
		const uint64_t cv = hora_comm_status_view(&st);
		if (cv && cv != v.id)
			return true;
	}
	return false;
}

/* the elastic keys against the file: what could never act is refused */
static int check_elastic(const struct joining *j, char *err, size_t errlen)
{
	const struct hora_elastic_config *el = j->o->elastic;
	const int max = el->max_workers > 0 ? el->max_workers : j->size;
	if (el->max_workers > j->size)
		return snprintf(err, errlen, "train.elastic.max_workers %d is above the %d workers of %s: only "
				"the file's workers can join in this build", el->max_workers, j->size, j->cc.file),
		       HORA_ERR_CONFIG;
	if (el->min_workers > max)
		return snprintf(err, errlen, "train.elastic.min_workers %d is above the %d workers the job can "
				"have (%s)", el->min_workers, max,
				el->max_workers > 0 ? "train.elastic.max_workers" : "the file's"), HORA_ERR_CONFIG;
	return 0;
}

int hora_rejoin_join(struct joining *j, bool joiner, struct hora_comm **out, char *err, size_t errlen)
{
	int crc = check_elastic(j, err, errlen);
	if (crc)
		return crc;
	struct rejoin *rj = rejoin_new(j, j->mem);
	if (!rj)
		return -ENOMEM;
	const double t0 = hora_clock_s();
	struct hora_comm_next nx = {0};
	rj->joiner = joiner;
	if (!joiner) { /* the job's first view: who starts it */
		struct hora_swim_view first;
		int frank;
		uint64_t p[HORA_SWIM_MAX_VIEW];
		hora_net_membership_first_view(j->mem, &first, &frank);
		note_seen(rj, p, participants(rj, &first, p));
	}
	int rc = rejoin_next(rj, 0, &nx, err, errlen);
	if (!rc && (rc = hora_comm_from_net(nx.net, (enum hora_algo)j->cc.coll.algorithm, out)))
		hora_net_comm_destroy(nx.net);
	if (rc) {
		free(nx.members);
		rejoin_free(rj);
		return rc;
	}
	hora_comm_own_loop(*out, j->loop, j->mem, nx.members, nx.view);
	free(nx.members);
	j->loop = NULL;
	j->mem = NULL;
	hora_comm_set_fusion_override(*out, &j->o->fusion);
	/* a death is declared after suspect_timeout + 2 to 3 probe periods of
	 * silence; 2 s more for the view without it */
	const struct hora_swim_cfg *sw = &j->cc.membership;
	const double detect_s = (sw->suspect_timeout_ms > 0 ? sw->suspect_timeout_ms : 1000) / 1e3 +
				3 * (sw->probe_interval_ms > 0 ? sw->probe_interval_ms : 200) / 1e3 + 2.0;
	struct hora_comm_elastic el = {.next = rejoin_next, .arg = rj, .free_arg = rejoin_free,
				       .pending = rejoin_pending, .joined = joiner, .detect_s = detect_s};
	hora_comm_set_elastic(*out, &el);
	/* the others wait in readiness rounds from now on; the keeper answers
	 * them until this worker's first call (its data and model are loaded) */
	if (joiner && (rc = hora_comm_keep_start(*out, j->o->elastic->wait_s)))
		HORA_LOGW("worker %d: no thread to answer the job's readiness rounds (%s): the others wait for "
			  "this worker's first call within transport.io_timeout_ms", j->o->proc, strerror(-rc));
	if (joiner)
		HORA_LOGI("worker %d joined the running job: rank %d of %d in view %llu after %.2f s",
			  j->o->proc, hora_rank(*out), hora_size(*out), (unsigned long long)nx.view,
			  hora_clock_s() - t0);
	return 0;
}
