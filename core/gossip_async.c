/* gossip_async.c - train.gossip.mode: async (AD-PSGD) in the training
 * loop: no barrier of any kind between the epochs' ends. Every worker
 * trains at its own pace on its own shuffle of the whole training set;
 * after every `period` local steps an *active* worker (an even rank) asks
 * one *passive* worker (an odd rank) to average models with it
 * (hora_apair_*), and goes on training while the exchange runs; passive
 * workers answer between their steps. Active asks passive only: the
 * bipartite split of AD-PSGD (Lian 2018), so no worker waits for one that
 * is itself waiting (net/coll/README.md "Asynchronous pairs" has the whole
 * argument).
 *
 * Epochs are the job's, counted in samples: an epoch ends when the
 * workers together have trained, since the last one ended, as many samples
 * as the training set holds, which each learns from the counters every
 * message carries (no collective); a worker that gets there first tells
 * every other at once. Then each worker finishes its exchange in flight
 * (quiesce), one allreduce of the exact counters puts every worker on the
 * same count, and the epoch ends as in sync mode (x̄ evaluated, the
 * consensus distance, the checkpoint).
 *
 * Peers: the topology's neighbours among the passive workers (ring r-1,
 * r+1; exponential and one_peer_exponential r +- (2^k - 1), one a round in
 * turn; random any passive worker; up to 64), all passive workers where
 * the graph leaves none. adaptive (the default): a neighbour is drawn with weight
 * 1 / (its replies' moving average time), so one that answers slowly (a
 * throttled worker answers only between its slow steps) is asked less
 * often; a BUSY answer counts as its average plus the other candidates'
 * mean (a lost round).
 */
#include "gossip.h"

#include "comm.h"
#include "log.h"
#include "run.h"
#include "trainer.h"

#include "net/util/clock.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EWMA_KEEP 0.8 /* a reply's weight in the moving average: 0.2 */

struct hora_gasync {
	struct hora_apair *ap; /* made at the first epoch, after the job agreement */
	int rank, size, period;
	bool active, adaptive, random;
	int ncand, rr;
	int cand[64];
	double ewma[64];      /* seconds; 0: not asked yet */
	uint64_t asked[64];
	uint64_t rng, shuf;   /* peer draws; this worker's shuffles */
	int64_t *order, pos;  /* this worker's order of the training set */
	uint64_t mine;        /* samples this worker trained (base included) */
	uint64_t base;        /* its share of the epochs before a resume */
	uint64_t *view;       /* the job's counters as this worker knows them */
	uint64_t start;       /* their exact sum when this epoch began */
	int64_t steps;
	uint64_t applied, busy, failed, served;
};

static bool passive(int r)
{
	return r & 1;
}

static void add_cand(struct hora_gasync *g, int p)
{
	p = ((p % g->size) + g->size) % g->size;
	if (p == g->rank || !passive(p) || g->ncand == 64)
		return;
	for (int i = 0; i < g->ncand; i++)
		if (g->cand[i] == p)
			return;
	g->cand[g->ncand++] = p;
}

static void candidates(struct hora_gasync *g, enum hora_gossip_topology t)
{
	const int r = g->rank;
	if (t == HORA_GOSSIP_RING) {
		add_cand(g, r - 1);
		add_cand(g, r + 1);
	} else if (t != HORA_GOSSIP_RANDOM) {
		for (int d = 1; d < g->size; d = 2 * d + 1) {
			add_cand(g, r + d);
			add_cand(g, r - d);
		}
	}
	if (!g->ncand) /* random, or a graph that leaves this rank no passive neighbour */
		for (int p = 1; p < g->size; p += 2)
			add_cand(g, p);
}

int hora_gasync_create(struct run *r, struct hora_gasync **out)
{
	const struct hora_gossip_config *gc = &r->cfg->gossip;
	struct hora_gasync *g = calloc(1, sizeof(*g));
	if (!g || !(g->order = malloc((size_t)r->train.n * sizeof(int64_t))) ||
	    !(g->view = calloc((size_t)r->size, sizeof(uint64_t)))) {
		if (g)
			free(g->order);
		free(g);
		snprintf(r->err, r->errlen, "gossip async: out of memory");
		return -ENOMEM;
	}
	g->rank = r->rank;
	g->size = r->size;
	g->period = gc->period;
	g->active = !passive(r->rank);
	g->adaptive = gc->adaptive;
	g->random = gc->topology == HORA_GOSSIP_RANDOM;
	g->rng = r->cfg->seed ^ (0xa5a5a5a5ULL * (uint64_t)(r->rank + 1));
	g->shuf = r->cfg->seed ^ (0x5eedULL << 20) ^ (uint64_t)r->rank * 0x9e3779b97f4a7c15ULL;
	if (g->active)
		candidates(g, gc->topology);
	for (int64_t i = 0; i < r->train.n; i++)
		g->order[i] = i;
	g->pos = r->train.n; /* shuffled before the first step */
	*out = g;
	return 0;
}

void hora_gasync_destroy(struct hora_gasync *g)
{
	if (!g)
		return;
	hora_apair_destroy(g->ap);
	free(g->order);
	free(g->view);
	free(g);
}

/* ---- the peer ------------------------------------------------------------------ */

static int choose(struct hora_gasync *g)
{
	if (!g->adaptive) /* rr moves on when a request leaves (exchange) */
		return g->random ? (int)(hora_run_draw(&g->rng) % (uint64_t)g->ncand) : g->rr % g->ncand;
	double w[64], sum = 0;
	for (int i = 0; i < g->ncand; i++) {
		if (g->ewma[i] <= 0)
			return i; /* not asked yet: measure it first */
		sum += (w[i] = 1.0 / g->ewma[i]);
	}
	double u = (double)(hora_run_draw(&g->rng) >> 11) * 0x1.0p-53 * sum;
	for (int i = 0; i < g->ncand; i++)
		if ((u -= w[i]) <= 0)
			return i;
	return g->ncand - 1;
}

static void account(struct hora_gasync *g, const struct hora_apair_event *ev)
{
	if (ev->what == HORA_APAIR_SERVED) {
		g->served++;
		return;
	}
	if (ev->what == HORA_APAIR_NONE)
		return;
	int i = 0;
	while (i < g->ncand && g->cand[i] != ev->peer)
		i++;
	if (i == g->ncand)
		return;
	double s = ev->reply_s;
	if (ev->what == HORA_APAIR_APPLIED)
		g->applied++;
	else if (ev->what == HORA_APAIR_BUSY) {
		/* a lost round: its own time plus a typical exchange's (a
		 * penalty that adds up, not one that doubles: a worker busy a few
		 * times in a row is asked less, never never) */
		double m = 0;
		int k = 0;
		for (int j = 0; j < g->ncand; j++)
			if (j != i && g->ewma[j] > 0 && g->ewma[j] < 1e8)
				m += g->ewma[j], k++;
		g->busy++;
		s = (g->ewma[i] > 0 ? g->ewma[i] : s) + (k ? m / k : s);
	} else {
		g->failed++;
		s = 1e9; /* gone: never chosen again while others answer */
	}
	g->ewma[i] = g->ewma[i] > 0 ? EWMA_KEEP * g->ewma[i] + (1 - EWMA_KEEP) * s : s;
}

/* after a local step: what finished, then (active, every period steps,
 * nothing in flight) the next request */
static int exchange(struct run *r, struct hora_gasync *g)
{
	struct hora_apair_event ev;
	int rc = hora_apair_poll(g->ap, r->tr.params, &ev);
	if (rc)
		return snprintf(r->err, r->errlen, "gossip async: %s", hora_apair_error(g->ap)), rc;
	account(g, &ev);
	if (!g->active || g->steps % g->period)
		return 0;
	const int i = choose(g);
	rc = hora_apair_start(g->ap, g->cand[i], r->tr.params);
	if (!rc) {
		g->asked[i]++;
		g->rr++;
	}
	if (rc == -ENOTCONN) { /* gone: the job's loss watcher names it */
		g->ewma[i] = 1e9;
		rc = 0;
	}
	if (rc == -EBUSY)
		rc = 0; /* our last exchange is still in flight */
	if (rc)
		snprintf(r->err, r->errlen, "gossip async: asking rank %d: %s", g->cand[i],
			 rc == -EINVAL ? strerror(-rc) : hora_apair_error(g->ap));
	return rc;
}

/* ---- the epoch ----------------------------------------------------------------- */

static uint64_t known(struct hora_gasync *g)
{
	hora_apair_progress_view(g->ap, g->view);
	uint64_t s = 0;
	for (int i = 0; i < g->size; i++)
		s += g->view[i];
	return s;
}

/* the exchange in flight finished, then every worker on the exact counts */
static int epoch_end(struct run *r, struct hora_gasync *g)
{
	struct hora_apair_event ev;
	/* a partner answers without waiting for anyone; a dead or frozen one
	 * stops the job (the loss watcher), which ends the wait at once; the
	 * bound is for a communicator without a membership */
	int rc = hora_apair_quiesce(g->ap, r->tr.params, 600000, &ev);
	if (rc)
		return snprintf(r->err, r->errlen, "gossip async, end of epoch %d: %s", r->epoch,
				hora_apair_error(g->ap)),
		       rc;
	account(g, &ev);
	int64_t *v = calloc((size_t)g->size, sizeof(int64_t));
	if (!v)
		return snprintf(r->err, r->errlen, "gossip async: out of memory"), -ENOMEM;
	v[g->rank] = (int64_t)g->mine;
	rc = hora_allreduce(r->c, v, v, (size_t)g->size, HORA_I64, HORA_SUM);
	if (!rc) {
		g->start = 0;
		for (int i = 0; i < g->size; i++)
			g->start += (g->view[i] = (uint64_t)v[i]);
		hora_apair_progress_set(g->ap, g->view);
	} else
		snprintf(r->err, r->errlen, "gossip async, end of epoch %d: the counters: %s", r->epoch,
			 hora_comm_last_error(r->c));
	free(v);
	return rc;
}

static int open_engine(struct run *r, struct hora_gasync *g)
{
	/* worker g's channel: its port + the job's size (cluster files number
	 * ports port_base + 1 + g, so these follow the last worker's) */
	char err[400];
	int rc = hora_apair_create(r->c, g->size, r->tr.nparams, HORA_F32, &g->ap, err, sizeof(err));
	if (rc)
		return snprintf(r->err, r->errlen, "gossip async: %s", err), rc;
	/* the epochs before (a resumed job): counted as if every worker had
	 * trained its share, the same numbers on every rank */
	const uint64_t base = (uint64_t)(r->epoch - 1) * (uint64_t)r->train.n;
	for (int i = 0; i < g->size; i++)
		g->view[i] = base / (uint64_t)g->size + ((uint64_t)i < base % (uint64_t)g->size);
	g->mine = g->base = g->view[g->rank];
	g->start = base;
	hora_apair_progress_set(g->ap, g->view);
	return 0;
}

int hora_gasync_steps(struct run *r, struct hora_gasync *g, struct hora_model_stats *st)
{
	int rc;
	if (!g->ap && (rc = open_engine(r, g)))
		return rc;
	hora_apair_reopen(g->ap);
	const uint64_t goal = g->start + (uint64_t)r->train.n, mine0 = g->mine;
	const int b = r->cfg->batch_size < r->train.n ? r->cfg->batch_size : (int)r->train.n;
	/* our counter to every peer at each sixteenth of our share of the
	 * epoch (a head to each; so each worker's view is behind by at most that
	 * much of each other's, plus a message's time): the counters travel
	 * with the exchanges, which can be rarer than a short epoch lasts (4000
	 * samples, 4 workers: every one went on to train the epoch twice over
	 * before it knew the others had done it) */
	uint64_t tell_every = (uint64_t)r->train.n / (uint64_t)g->size / 16;
	tell_every = tell_every ? tell_every : 1;
	for (uint64_t k = known(g); k < goal; k = known(g)) {
		if ((rc = hora_comm_stop_code(r->c)))
			return snprintf(r->err, r->errlen, "%s", hora_comm_stop_message(r->c)), rc;
		if (g->pos + b > r->train.n) {
			hora_run_shuffle(g->order, r->train.n, &g->shuf);
			g->pos = 0;
		}
		/* the schedule's step: this epoch's, at the job's position in it */
		int64_t in = (int64_t)((k - g->start) / (uint64_t)r->global_bs);
		in = in < r->steps_per_epoch ? in : r->steps_per_epoch - 1;
		const double lr = hora_lr_at(&r->cfg->optim, (int64_t)(r->epoch - 1) * r->steps_per_epoch + in,
					     r->steps_per_epoch, r->total, r->size);
		if ((rc = hora_trainer_step(&r->tr, &r->train, g->order + g->pos, b, lr, st)))
			return snprintf(r->err, r->errlen, "step %lld: model %s: %s", (long long)r->step,
					r->tr.ops->name, hora_strerror(rc)),
			       rc;
		g->pos += b;
		if (g->pos + b <= r->train.n) /* the next batch's rows, while the exchange runs */
			hora_trainer_prefetch(&r->tr, &r->train, g->order + g->pos, b);
		g->mine += (uint64_t)b;
		hora_apair_progress(g->ap, g->mine);
		if ((g->mine - mine0) / tell_every != (g->mine - mine0 - (uint64_t)b) / tell_every)
			hora_apair_tell(g->ap);
		r->step++;
		g->steps++;
		if ((rc = exchange(r, g)))
			return rc;
	}
	return epoch_end(r, g);
}

void hora_gasync_report(const struct hora_gasync *g, double train_s, FILE *f)
{
	char peers[600];
	size_t at = 0;
	peers[0] = 0;
	for (int i = 0; i < g->ncand && at < sizeof(peers) - 64; i++)
		at += (size_t)snprintf(peers + at, sizeof(peers) - at, "%s%d x%llu (%.2f ms)", i ? ", " : "",
				       g->cand[i], (unsigned long long)g->asked[i], g->ewma[i] * 1e3);
	fprintf(f, "gossip async rank %d (%s): %llu steps, %llu samples in %.2f s (%.0f samples/s); %llu exchanges "
		   "applied, %llu busy, %llu failed, %llu served%s%s\n",
		g->rank, g->active ? "active" : "passive", (unsigned long long)g->steps,
		(unsigned long long)(g->mine - g->base), train_s,
		train_s > 0 ? (double)(g->mine - g->base) / train_s : 0.0,
		(unsigned long long)g->applied, (unsigned long long)g->busy, (unsigned long long)g->failed,
		(unsigned long long)g->served, g->ncand ? "; asked " : "", peers);
}
