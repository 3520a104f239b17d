/* elastic.c - elastic training's commits, rollbacks and re-forms (the loop
 * is core/train.c's; README "When a worker dies").
 *
 * Commit: every commit_steps steps (and at every epoch's start) each rank
 * keeps, in memory, what training needs to go on from there: parameters,
 * optimizer state, epoch, position in the epoch's sample order, step, the
 * shuffle's state and the epoch's training sums over ranks. The commit
 * after a step costs one allreduce of 4 doubles, which also carries whether
 * any rank sees a reason to re-form (a joiner waits, a rank left): then
 * every rank re-forms at that same step. Two commits are kept: a failure
 * can leave ranks one commit apart, never more (a commit needs the
 * allreduce of the step before it to have finished on every rank).
 *
 * Re-form (after a failure, or agreed at a commit): the communicator is
 * re-formed over the next view (core/rejoin.c), then every rank of it runs
 * the same sync: the job compared with rank 0's; the newest lineage (the
 * view a commit was made or adopted in: a minority's stale commits lose,
 * and the view-change line of a rank whose commit lost says "discarded its
 * stale state");
 * the earliest latest commit of that lineage (every holder of the lineage
 * has it); its holder of lowest rank broadcasts it; everyone loads it and
 * re-shards the rest of the epoch over the new size. Joiners take part with
 * no commit.
 */
#include "checkpoint.h"
#include "comm.h"
#include "env.h"
#include "log.h"
#include "run.h"

#include "net/util/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct commit {
	bool valid;
	uint64_t lineage;
	int epoch;
	int64_t pos, step;
	uint64_t rng_epoch;
	double sums[3];
	float *params;
	uint8_t *optim;
};

struct hora_elastic {
	struct commit slot[2];
	int latest;
	size_t ob; /* optimizer state bytes */
	uint64_t stale; /* the lineage of this rank's commit when the last sync discarded it, else 0 */
};

/* commits in order: the one at an epoch's start after the one at the last
 * step of the epoch before (same step) */
static int64_t seq_of(const struct commit *k)
{
	return k->step * 2 + (k->pos == 0);
}

static void take(struct run *r, struct commit *k)
{
	k->valid = true;
	k->lineage = hora_comm_view(r->c);
	k->epoch = r->epoch;
	k->pos = r->pos;
	k->step = r->step;
	k->rng_epoch = r->rng_epoch;
	k->sums[0] = r->sums.loss_sum;
	k->sums[1] = (double)r->sums.correct;
	k->sums[2] = (double)r->sums.n;
	memcpy(k->params, r->tr.params, r->tr.nparams * sizeof(float));
	hora_optim_state_save(r->tr.optim, k->optim);
}

static void load(struct run *r, const struct commit *k)
{
	memcpy(r->tr.params, k->params, r->tr.nparams * sizeof(float));
	hora_optim_state_load(r->tr.optim, k->optim, r->es->ob);
	r->epoch = k->epoch;
	r->pos = k->pos;
	r->step = k->step;
	r->rng_epoch = k->rng_epoch;
	r->sums = (struct hora_model_stats){.loss_sum = k->sums[0], .correct = (int64_t)k->sums[1],
					    .n = (int64_t)k->sums[2]};
	r->order_of = 0;
}

static void commit_now(struct run *r)
{
	struct hora_elastic *es = r->es;
	es->latest ^= 1;
	take(r, &es->slot[es->latest]);
}

void hora_elastic_log_samples(struct run *r, const int64_t *idx, int n)
{
	for (int i = 0; i < n; i++)
		fprintf(r->samples, "t %d %" PRId64 " %" PRIu64 " %" PRId64 "\n", r->epoch, r->step,
			hora_comm_view(r->c), idx[i]);
}

/* a test hook's file: <prefix>.<worker index>, appended to */
static int open_log(struct run *r, const char *what, const char *prefix, FILE **f)
{
	const struct hora_comm_member *mb = hora_comm_members(r->c);
	char path[HORA_PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s.%d", prefix, mb ? mb[r->rank].worker : r->rank);
	if (!(*f = fopen(path, "a"))) {
		snprintf(r->err, r->errlen, "%s: cannot open %s: %s", what, path, strerror(errno));
		return -errno;
	}
	return 0;
}

/* the step-log test hook: one line per step, written at once */
static void log_step(struct run *r)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	fprintf(r->steps, "%lld %" PRId64 " %" PRIu64 "\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec,
		r->step, hora_comm_view(r->c));
	fflush(r->steps);
}

/* The commit to go on from: the newest lineage's earliest latest commit,
 * from its holder of lowest rank (*root); NULL on the others. */
static int choose(struct run *r, int *root, const struct commit **from)
{
	struct hora_elastic *es = r->es;
	const struct commit *mine = es->slot[es->latest].valid ? &es->slot[es->latest] : NULL;
	int64_t lin = mine ? (int64_t)mine->lineage : 0;
	int rc = r->several ? hora_allreduce(r->c, &lin, &lin, 1, HORA_I64, HORA_MAX) : 0;
	const bool has = !rc && mine && (int64_t)mine->lineage == lin;
	es->stale = !rc && mine && !has ? mine->lineage : 0;
	int64_t v[2] = {has ? seq_of(mine) : INT64_MAX, has ? r->rank : INT64_MAX};
	if (!rc && r->several)
		rc = hora_allreduce(r->c, v, v, 2, HORA_I64, HORA_MIN);
	if (rc)
		return snprintf(r->err, r->errlen, "agreeing on the commit: %s", hora_comm_last_error(r->c)), rc;
	if (v[0] == INT64_MAX)
		return snprintf(r->err, r->errlen, "no worker of view %" PRIu64 " holds the job's state: the "
				"job had ended before this worker was admitted, or every worker that trained is "
				"gone", hora_comm_view(r->c)), HORA_ERR_NOJOB;
	*root = (int)v[1];
	*from = NULL;
	for (int i = 0; i < 2 && *root == r->rank; i++)
		if (es->slot[i].valid && (int64_t)es->slot[i].lineage == lin && seq_of(&es->slot[i]) == v[0])
			*from = &es->slot[i];
	if (*root == r->rank && !*from)
		return snprintf(r->err, r->errlen, "rank %d lost the commit at step %" PRId64, r->rank, v[0] / 2),
		       -EPROTO;
	return 0;
}

/* root's commit to every rank (bytes: what travelled) */
static int share_commit(struct run *r, int root, const struct commit *from, size_t *bytes)
{
	if (from)
		load(r, from);
	int64_t h[7] = {r->epoch, r->pos, r->step, (int64_t)r->rng_epoch, r->n0, r->bar,
			r->tl ? (int64_t)(hora_timeline_age(r->tl) * 1e6) : 0};
	double sums[3] = {r->sums.loss_sum, (double)r->sums.correct, (double)r->sums.n};
	const size_t ob = r->es->ob;
	uint8_t *st = malloc(ob ? ob : 4);
	if (!st)
		return -ENOMEM;
	hora_optim_state_save(r->tr.optim, st);
	int rc = 0;
	if (r->several && ((rc = hora_broadcast(r->c, h, 7, HORA_I64, root)) ||
			   (rc = hora_broadcast(r->c, sums, 3, HORA_F64, root)) ||
			   (rc = hora_broadcast(r->c, r->tr.params, r->tr.nparams, HORA_F32, root)) ||
			   (rc = hora_broadcast(r->c, st, ob / 4, HORA_I32, root))))
		snprintf(r->err, r->errlen, "sharing the commit: %s", hora_comm_last_error(r->c));
	if (!rc && r->rank != root) {
		struct commit k = {.epoch = (int)h[0], .pos = h[1], .step = h[2], .rng_epoch = (uint64_t)h[3],
				   .sums = {sums[0], sums[1], sums[2]}, .params = r->tr.params, .optim = st};
		load(r, &k);
		r->n0 = (int)h[4];
		r->bar = (int)h[5];
	}
	if (!rc && r->cfg->timeline[0] && !r->tl) { /* a joiner's, on the survivors' clock */
		if ((rc = hora_timeline_create(r->rank, &r->tl)))
			snprintf(r->err, r->errlen, "timeline: out of memory");
		else
			hora_timeline_align(r->tl, (double)h[6] / 1e6);
	}
	free(st);
	*bytes = sizeof(h) + sizeof(sums) + r->tr.nparams * sizeof(float) + ob;
	return rc;
}

/* the last epoch of a metrics file's lines (0: none) */
static int last_epoch(FILE *f)
{
	char line[512];
	int e = 0, k;
	rewind(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "{\"epoch\":%d", &k) == 1)
			e = k;
	return e;
}

/* rank 0's files follow rank 0 (a new one goes on after the lines there);
 * before the job agreement, which stops every rank when rank 0 cannot
 * open them (a job of one: here) */
static int own_files(struct run *r)
{
	r->metrics_errno = 0;
	if (r->rank == 0 && r->cfg->metrics[0] && !r->mf) {
		if (!(r->mf = fopen(r->cfg->metrics, "a+")) && (r->metrics_errno = errno) && !r->several) {
			snprintf(r->err, r->errlen, "metrics: cannot open %s: %s", r->cfg->metrics,
				 strerror(errno));
			return HORA_ERR_CONFIG;
		}
		if (r->mf)
			r->metrics_last = last_epoch(r->mf);
	}
	if (r->rank != 0 && r->mf) {
		fclose(r->mf);
		r->mf = NULL;
	}
	return 0;
}

/* the timeline's tracks are named for workers: ranks change */
static void label_timeline(struct run *r)
{
	const struct hora_comm_member *mb = hora_comm_members(r->c);
	if (r->tl && mb)
		hora_timeline_relabel(r->tl, mb[r->rank].worker);
	if (r->tl && r->dopt)
		hora_dist_optim_set_timeline(r->dopt, r->tl);
}

/* Every rank of the new communicator: the same calls in the same order. */
static int sync_view(struct run *r, int *root, size_t *bytes)
{
	r->rank = hora_rank(r->c);
	r->size = hora_size(r->c);
	r->several = r->size > 1;
	r->talk = r->rank == 0 && !r->cfg->quiet;
	const struct commit *from;
	int rc = hora_comm_await_ready(r->c); /* a joiner may still load */
	if (rc)
		return snprintf(r->err, r->errlen, "the readiness rounds of view %llu: %s",
				(unsigned long long)hora_comm_view(r->c), hora_comm_last_error(r->c)), rc;
	rc = hora_run_dist_optim(r);
	if (!rc)
		rc = own_files(r);
	if (!rc && r->several && (rc = hora_run_agree_job(r, &r->bar)) == HORA_ERR_CONFIG &&
	    r->es->slot[r->es->latest].valid && !r->duty_failed) {
		/* a joiner of another job (no commit of its own: it stops on this
		 * error); the others re-form without it once it is gone */
		HORA_LOGW("not admitting a worker: %s", r->err);
		rc = -EAGAIN;
	}
	if (!rc)
		rc = choose(r, root, &from);
	if (!rc)
		rc = share_commit(r, *root, from, bytes);
	if (rc)
		return rc;
	for (int i = 0; i < 2; i++) /* adopted in this view: the lineage to beat */
		take(r, &r->es->slot[i]);
	label_timeline(r);
	r->pg.bar = r->bar;
	hora_run_schedule(r);
	r->pg.steps = r->steps_per_epoch;
	if (r->samples)
		fprintf(r->samples, "v %" PRIu64 " %" PRId64 "\n", hora_comm_view(r->c), r->step);
	return 0;
}

int hora_elastic_start(struct run *r)
{
	struct hora_elastic *es = r->es = calloc(1, sizeof(*es));
	if (!es)
		return -ENOMEM;
	es->ob = hora_optim_state_bytes(r->tr.optim);
	for (int i = 0; i < 2; i++)
		if (!(es->slot[i].params = malloc(r->tr.nparams * sizeof(float))) ||
		    !(es->slot[i].optim = malloc(es->ob ? es->ob : 4)))
			return snprintf(r->err, r->errlen, "out of memory"), -ENOMEM;
	int rc = 0;
	if (r->cfg->sample_log[0])
		rc = open_log(r, "sample log", r->cfg->sample_log, &r->samples);
	if (!rc && r->cfg->step_log[0])
		rc = open_log(r, "step log", r->cfg->step_log, &r->steps);
	if (rc)
		return rc;
	const bool joiner = hora_comm_joined(r->c);
	if (!joiner) { /* the job's start: lineage 0, below every re-formed view's,
			  so that a joiner taken for a starter never wins with it */
		commit_now(r);
		r->es->slot[r->es->latest].lineage = 0;
	}
	const double t0 = hora_clock_s();
	int root;
	size_t bytes;
	if (!joiner && hora_env_test_die_at_start() == r->rank) {
		fflush(NULL);
		raise(SIGKILL);
	}
	rc = sync_view(r, &root, &bytes);
	if (rc == -EAGAIN) /* at the start every worker is equal: all stop, as without elastic */
		rc = HORA_ERR_CONFIG;
	else if (rc && (rc = hora_elastic_recover(r, rc)) == -EAGAIN)
		rc = HORA_ERR_CONFIG; /* a worker died or left during the start's sync: the others go on */
	if (!rc && !joiner) /* the job is agreed on */
		hora_run_fresh_metrics(r);
	if (!rc && joiner && !r->cfg->quiet)
		printf("view %" PRIu64 ": joined at step %" PRId64 " as rank %d of %d; received the committed "
		       "state from rank %d: %zu bytes in %.3f s\n", hora_comm_view(r->c), r->step, r->rank,
		       r->size, root, bytes, hora_clock_s() - t0);
	fflush(stdout);
	return rc;
}

int hora_elastic_step_done(struct run *r, struct hora_model_stats *st)
{
	if (r->steps)
		log_step(r);
	if (r->step % r->cfg->elastic.commit_steps)
		return 0;
	const double t0 = hora_clock_s();
	if (r->samples)
		fflush(r->samples);
	double v[4] = {st->loss_sum, (double)st->correct, (double)st->n,
		       hora_comm_view_changed(r->c) || hora_comm_joiners(r->c)};
	int rc = r->several ? hora_allreduce(r->c, v, v, 4, HORA_F64, HORA_SUM) : 0;
	if (rc)
		return snprintf(r->err, r->errlen, "step %" PRId64 ": commit: %s", r->step,
				hora_comm_last_error(r->c)), rc;
	r->sums.loss_sum += v[0];
	r->sums.correct += (int64_t)v[1];
	r->sums.n += (int64_t)v[2];
	*st = (struct hora_model_stats){0};
	commit_now(r);
	r->commits++;
	r->commit_s += hora_clock_s() - t0;
	if (v[3] > 0)
		return snprintf(r->err, r->errlen, "the view changed"), HORA_ERR_VIEW;
	return 0;
}

void hora_elastic_epoch_done(struct run *r)
{
	r->sums = (struct hora_model_stats){0};
	const double t0 = hora_clock_s();
	commit_now(r);
	r->commits++;
	r->commit_s += hora_clock_s() - t0;
}

/* codes a re-form cannot help */
static bool fatal(int rc)
{
	return rc == HORA_ERR_CONFIG || rc == HORA_ERR_DATA || rc == HORA_ERR_MODEL ||
	       rc == HORA_ERR_DIVERGED || rc == HORA_ERR_STALL || rc == -ENOMEM;
}

/* a failure that is no view change (yet): give the failure detector its
 * time to say so (the membership's timings, hora_comm_detect_s; longer
 * while a rank is suspected). A view whose participants differ from the
 * communicator's counts too: when a partition heals, the minority's stale
 * death notices make the others drop a worker that is alive, and that
 * worker, missing from no view, must re-form with them. */
static bool view_changes(struct run *r)
{
	const double deadline = hora_clock_s() + hora_comm_detect_s(r->c);
	while (!hora_comm_view_changed(r->c) && !hora_comm_joiners(r->c)) {
		if (hora_clock_s() > deadline && !hora_comm_suspect(r->c))
			return false;
		usleep(20000);
	}
	return true;
}

static bool has_uid(const struct hora_comm_member *m, int n, uint64_t uid)
{
	for (int i = 0; i < n; i++)
		if (m[i].uid == uid)
			return true;
	return false;
}

/* After a re-form of a recovery: keep the members of this formation that
 * were not among the old ones (joiners), once each (seen: *nseen of them,
 * grown here; on ENOMEM some go unnamed). */
static void note_joiners(struct run *r, const struct hora_comm_member *old, int n,
			 struct hora_comm_member **seen, int *nseen)
{
	const struct hora_comm_member *now = hora_comm_members(r->c);
	const int size = hora_size(r->c);
	for (int j = 0; now && j < size; j++) {
		if (has_uid(old, n, now[j].uid) || has_uid(*seen, *nseen, now[j].uid))
			continue;
		struct hora_comm_member *g = realloc(*seen, (size_t)(*nseen + 1) * sizeof(*g));
		if (!g)
			return;
		*seen = g;
		g[(*nseen)++] = now[j];
	}
}

/* "lost worker 2 (127.0.0.1:29503)", "worker 3 (...) joined", from the
 * members before (old, n) and now; "worker 4 (...) joined and was gone
 * again" for one of seen (joiners of an earlier formation of this
 * recovery) that is not among them now */
static void changes(struct run *r, const struct hora_comm_member *old, int n, const struct hora_comm_member *seen,
		    int nseen, char *out, size_t len)
{
	const struct hora_comm_member *now = hora_comm_members(r->c);
	size_t k = 0;
	out[0] = 0;
	for (int i = 0; i < n && k + 100 < len; i++)
		if (!has_uid(now, r->size, old[i].uid))
			k += (size_t)snprintf(out + k, len - k, "%slost worker %d (%s)", k ? ", " : "",
					      old[i].worker, old[i].addr);
	for (int j = 0; j < r->size && k + 100 < len; j++)
		if (!has_uid(old, n, now[j].uid))
			k += (size_t)snprintf(out + k, len - k, "%sworker %d (%s) joined", k ? ", " : "",
					      now[j].worker, now[j].addr);
	for (int i = 0; i < nseen && k + 100 < len; i++)
		if (!has_uid(now, r->size, seen[i].uid))
			k += (size_t)snprintf(out + k, len - k, "%sworker %d (%s) joined and was gone again",
					      k ? ", " : "", seen[i].worker, seen[i].addr);
	if (!k)
		snprintf(out, len, "the same workers");
}

int hora_elastic_recover(struct run *r, int rc)
{
	const double t0 = r->t_step ? r->t_step : hora_clock_s(); /* the last step that ended */
	if (fatal(rc) || r->duty_failed || (rc != HORA_ERR_VIEW && !view_changes(r)))
		return rc;
	const bool dropped = hora_comm_dropped(r->c); /* the others moved on without this worker */
	const int64_t at = r->step;
	const int n = r->size;
	struct hora_comm_member *old = malloc((size_t)n * sizeof(*old));
	if (!old)
		return -ENOMEM;
	memcpy(old, hora_comm_members(r->c), (size_t)n * sizeof(*old));
	int root = 0, nseen = 0;
	size_t bytes = 0;
	struct hora_comm_member *seen = NULL; /* joiners of this recovery's formations */
	for (int tries = 0;; tries++) {
		if ((rc = hora_comm_reform(r->c, r->err, r->errlen)))
			break;
		note_joiners(r, old, n, &seen, &nseen);
		if (!(rc = sync_view(r, &root, &bytes)) || fatal(rc) || tries == 20 || !view_changes(r))
			break;
	}
	if (!rc) {
		char what[1024], back[160];
		if (dropped) /* its old members are no news: it is the one that was gone */
			snprintf(what, sizeof(what), "this worker was declared dead by the others while it did "
				 "not answer (frozen or cut off past the failure detector's time) and joined again");
		else
			changes(r, old, n, seen, nseen, what, sizeof(what));
		hora_timeline_span(r->tl, 0, "view_change", t0, hora_clock_s(), 0);
		if (r->es->stale) /* a minority side's: the newest lineage won */
			snprintf(back, sizeof(back), "discarded its stale state (view %" PRIu64 ") for", r->es->stale);
		else
			snprintf(back, sizeof(back), "rolled back %" PRId64 " steps to", at - r->step);
		printf("view %" PRIu64 ": %s at step %" PRId64 "; %d workers; %s the commit at step %" PRId64
		       "; lr %g; training again after %.2f s\n", hora_comm_view(r->c), what, at, r->size, back,
		       r->step, hora_run_lr(r), hora_clock_s() - t0);
		fflush(stdout);
	}
	free(old);
	free(seen);
	return rc;
}

/* The end is two barriers. Past the first (this), every rank has trained
 * its last step, so this rank's state is final whatever happens next; its
 * failure is recovered like any step's. The second (hora_elastic_release)
 * keeps every rank until every one is past the first: a rank that left as
 * soon as it was past one barrier could break it for a rank still in it
 * (its leave, a view change, stops that rank's barrier), which would then
 * re-form alone and pause below min_workers, or train the rolled-back
 * steps again by itself. Collectives of the end (the timeline's) go
 * between the two. Left: a rank that dies inside the first can let it
 * complete on some ranks and fail on others, which re-form without those
 * (gone: done) and go on from their commit (a window of one barrier). */
int hora_elastic_finish(struct run *r)
{
	int rc = r->several ? hora_barrier(r->c) : 0;
	if (rc)
		snprintf(r->err, r->errlen, "the final barrier: %s", hora_comm_last_error(r->c));
	return rc;
}

/* The second barrier: its failure is none (every rank is past the first,
 * so done). */
void hora_elastic_release(struct run *r)
{
	if (r->several && hora_barrier(r->c))
		HORA_LOGW("a worker left after every worker had trained its last step: %s (training had completed)",
			  hora_comm_last_error(r->c));
}

void hora_elastic_free(struct run *r)
{
	if (r->samples)
		fclose(r->samples);
	if (r->steps)
		fclose(r->steps);
	r->samples = r->steps = NULL;
	if (!r->es)
		return;
	for (int i = 0; i < 2; i++) {
		free(r->es->slot[i].params);
		free(r->es->slot[i].optim);
	}
	free(r->es);
	r->es = NULL;
}
