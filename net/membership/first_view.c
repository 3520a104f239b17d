/* first_view.c - the first-view rule (cfg.first_view_workers): a job's first
 * view is its workers, one member for each worker index, and nobody else
 * (net/MEMBERSHIP.md "The first view").
 *
 * Uids carry the worker index + 1 in their top 24 bits (uid >> 40), as
 * core's hora_cluster_uid makes them. The coordinator proposes the first
 * view once every index has a live worker; an elastic job
 * (cfg.first_view_min) starts without the indices whose workers are known
 * to be gone (left, or dead with their port answering unreachable) or that
 * no live worker claimed within cfg.first_view_window_ms of the start, as a
 * later death would leave it. Not here: proposing and committing (swim.c).
 */
#include "net/membership/swim_internal.h"

#include <stdlib.h>

/* The worker index a uid carries (uid >> 40 is index + 1); -1 for none. */
static int worker_index(uint64_t uid)
{
	return (int)(uid >> 40) - 1;
}

bool hora_swim_first_rule(const struct hora_swim *s, uint64_t prev)
{
	return s->cfg.first_view_workers > 0 && !s->view.id && !prev;
}

void hora_swim_first_members(struct hora_swim *s, struct hora_swim_view *v)
{
	const int nw = s->cfg.first_view_workers;
	uint64_t best[HORA_SWIM_MAX_VIEW] = {0};
	for (int i = 0; i < s->n; i++) {
		const struct mem *x = &s->mem[i];
		const int g = worker_index(x->m.uid);
		if (x->m.role == HORA_SWIM_WORKER && live(x) && g >= 0 && g < nw &&
		    (!best[g] || x->m.uid < best[g]))
			best[g] = x->m.uid;
	}
	v->n = 0;
	for (int g = 0; g < nw; g++)
		if (best[g])
			v->uids[v->n++] = best[g];
	qsort(v->uids, (size_t)v->n, sizeof(uint64_t), cmp_u64);
}

/* How many workers a first view needs at least: every worker of the file,
 * or first_view_min of them (an elastic job may start short and be joined
 * by the others). */
static int first_size(const struct hora_swim *s)
{
	const int nw = s->cfg.first_view_workers, m = s->cfg.first_view_min;
	return m > 0 && m < nw ? m : nw;
}

bool hora_swim_first_ok(const struct hora_swim *s, const struct hora_swim_view *v)
{
	const int nw = s->cfg.first_view_workers;
	bool seen[HORA_SWIM_MAX_VIEW] = {false};
	if (v->n < first_size(s) || v->n > nw)
		return false;
	for (int i = 0; i < v->n; i++) {
		const int g = worker_index(v->uids[i]);
		if (g < 0 || g >= nw || seen[g])
			return false;
		seen[g] = true;
	}
	return true;
}

/* Worker index g has no live worker: whether the first view may go on
 * without it. Yes when every worker that claimed it is gone for certain
 * (left, or dead and its port answered unreachable), or when the start
 * window has passed and its claimants fell silent (declared dead). A worker
 * that never joined settles nothing: it may be a slow starter (a staggered
 * Kubernetes or Slurm start), and the size the job starts with is its
 * global batch and lr scale, which must not depend on start timing; the
 * start waits for it as long as without elastic training. */
static bool settled(const struct hora_swim *s, int g, int64_t now)
{
	bool any = false, all_gone = true, all_dead = true;
	for (int i = 1; i < s->n; i++) {
		const struct mem *x = &s->mem[i];
		if (x->m.role != HORA_SWIM_WORKER || worker_index(x->m.uid) != g)
			continue;
		any = true;
		all_gone &= gone(x);
		all_dead &= x->m.state == HORA_SWIM_DEAD || x->m.state == HORA_SWIM_LEFT;
	}
	if (!any)
		return false;
	if (all_gone)
		return true;
	return all_dead && s->cfg.first_view_window_ms > 0 && now - s->join_start >= s->cfg.first_view_window_ms;
}

bool hora_swim_first_ready(struct hora_swim *s, const struct hora_swim_view *d, int64_t now)
{
	const int nw = s->cfg.first_view_workers;
	if (s->cfg.min_members > nw)
		return false; /* --expect more workers than the job has: never */
	if (d->n == nw)
		return true;
	if (d->n < first_size(s))
		return false;
	if (d->n >= s->cfg.min_members)
		return true; /* min_members below the job's size: it starts short at once */
	bool has[HORA_SWIM_MAX_VIEW] = {false};
	for (int i = 0; i < d->n; i++)
		has[worker_index(d->uids[i])] = true;
	for (int g = 0; g < nw; g++)
		if (!has[g] && !settled(s, g, now))
			return false;
	return true;
}

void hora_swim_first_proofs(struct hora_swim *s, int64_t now)
{
	const int nw = s->cfg.first_view_workers;
	for (int i = 1; i < s->n; i++) {
		struct mem *x = &s->mem[i];
		const int g = worker_index(x->m.uid);
		if (x->m.state == HORA_SWIM_DEAD && !x->refused && x->m.role == HORA_SWIM_WORKER && g >= 0 &&
		    g < nw && now - x->proof_sent >= s->cfg.probe_interval_ms)
			hora_swim_ask_proof(s, x, now);
	}
}

bool hora_swim_first_acked(struct hora_swim *s)
{
	if (s->cfg.first_view_workers <= 0 || !s->first.id || s->view.id != s->first.id ||
	    s->commit.id != s->view.id)
		return true;
	for (int i = 0; i < s->view.n; i++) {
		const struct mem *x = find(s, s->view.uids[i]);
		if (x && x != &s->mem[0] && live(x) && !x->cack)
			return false;
	}
	return true;
}
