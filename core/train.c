/* train.c - the single-worker training loop: epochs over a seeded shuffle,
 * evaluation, a Keras-like progress bar on a terminal (one line per epoch
 * otherwise), and JSON-lines metrics.
 *
 * Determinism: the shuffle and the initial parameters come from cfg->seed
 * only, BLAS runs one thread by default, and reductions have a fixed order,
 * so the same seed gives bitwise identical parameters.
 *
 * Distributed (hora_train_run_comm): every rank shuffles with the same seed
 * and takes a contiguous share of each global batch (shares differ by at
 * most one sample; all samples are seen once per epoch); the distributed
 * optimizer averages gradients weighted by the shares, so the update is the
 * global batch's mean gradient on every rank.
 */
#include "checkpoint.h"
#include "distopt.h"
#include "hora.h"
#include "log.h"
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Fisher-Yates with an unbiased bounded draw (Lemire). */
static void shuffle(int64_t *a, int64_t n, uint64_t *s)
{
	for (int64_t i = n - 1; i > 0; i--) {
		uint64_t bound = (uint64_t)i + 1, x;
		unsigned __int128 m;
		uint64_t l;
		do {
			x = splitmix(s);
			m = (unsigned __int128)x * bound;
			l = (uint64_t)m;
		} while (l < (-bound) % bound);
		int64_t j = (int64_t)(m >> 64), t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

struct progress {
	int bar; /* draw a bar (terminal) */
	int epoch, epochs;
	int64_t steps;
	double t0, last_draw;
};

static void fmt_time(char *buf, size_t n, double s)
{
	if (s >= 3600)
		snprintf(buf, n, "%d:%02d:%02d", (int)s / 3600, ((int)s / 60) % 60, (int)s % 60);
	else if (s >= 60)
		snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
	else
		snprintf(buf, n, "%ds", (int)s);
}

static void bar_draw(struct progress *p, int64_t step, const struct hora_model_stats *st, int done)
{
	const int width = 30;
	double t = now_s();
	if (!done && t - p->last_draw < 0.1)
		return;
	p->last_draw = t;
	int filled = (int)(width * step / (p->steps ? p->steps : 1));
	char bar[64];
	for (int i = 0; i < width; i++)
		bar[i] = i < filled ? '=' : '.';
	if (!done && filled < width)
		bar[filled] = '>';
	bar[width] = 0;
	double el = t - p->t0;
	char tbuf[32];
	if (done)
		fmt_time(tbuf, sizeof(tbuf), el);
	else
		fmt_time(tbuf, sizeof(tbuf), step ? el / step * (p->steps - step) : 0);
	printf("\r%*lld/%lld [%s] - %s%s - loss: %.4f - acc: %.4f", (int)snprintf(NULL, 0, "%lld",
	       (long long)p->steps), (long long)step, (long long)p->steps, bar, done ? "" : "ETA: ",
	       tbuf, st->n ? st->loss_sum / st->n : 0.0, st->n ? (double)st->correct / st->n : 0.0);
	fflush(stdout);
}

static int write_metrics(FILE *f, const struct hora_epoch_metrics *m)
{
	fprintf(f,
		"{\"epoch\":%d,\"loss\":%.6f,\"acc\":%.6f,\"val_loss\":%.6f,\"val_acc\":%.6f,"
		"\"samples_per_s\":%.1f,\"seconds\":%.4f,\"workers\":%d}\n",
		m->epoch, m->loss, m->acc, m->val_loss, m->val_acc, m->samples_per_s, m->seconds,
		m->workers);
	errno = 0;
	return fflush(f) == 0 && !ferror(f) ? 0 : -(errno ? errno : EIO);
}

/* [lo, lo + *n) of [0, total) for rank r of size: contiguous, sizes differ by
 * at most one */
static int64_t share(int64_t total, int r, int size, int *n)
{
	int64_t base = total / size, rem = total % size;
	*n = (int)(base + (r < rem));
	return (int64_t)r * base + (r < rem ? r : rem);
}

/* stats summed over ranks (f64 so that counts stay exact) */
static int sum_stats(struct hora_comm *c, struct hora_model_stats *st)
{
	if (!c || hora_size(c) == 1)
		return 0;
	double v[3] = {st->loss_sum, (double)st->correct, (double)st->n};
	int rc = hora_allreduce(c, v, v, 3, HORA_F64, HORA_SUM);
	st->loss_sum = v[0];
	st->correct = (int64_t)v[1];
	st->n = (int64_t)v[2];
	return rc;
}

/* what a checkpoint records of the optimizer: its kind, as far as the
 * state's meaning goes (the learning rate may change on resume) */
static const char *optim_desc(const struct hora_optim_config *o)
{
	if (o->kind == HORA_OPTIM_ADAM)
		return "adam";
	return o->momentum <= 0 ? "sgd" : o->nesterov ? "nesterov" : "momentum";
}

/* Rank 0 reads and verifies the checkpoint, then every rank gets its
 * parameters, optimizer state, epoch, step and RNG state. */
static int resume(struct hora_comm *c, const struct hora_train_config *cfg, struct hora_trainer *tr,
		  int *first_epoch, int64_t *step, uint64_t *rng, char *err, size_t errlen)
{
	const int rank = hora_rank(c), size = hora_size(c);
	char cur[HORA_PATH_MAX + 32], prev[HORA_PATH_MAX + 32];
	if (!cfg->checkpoint_dir[0]) {
		snprintf(err, errlen, "train.resume needs train.checkpoint.dir");
		return HORA_ERR_CONFIG;
	}
	hora_ckpt_paths(cfg->checkpoint_dir, cur, prev, sizeof(cur));
	struct hora_ckpt_meta cm = {0};
	int64_t hdr[5] = {0}; /* status, epoch, step, rng, workers */
	int rc = 0;
	if (rank == 0) {
		const struct hora_ckpt_job job = {size, cfg->seed, tr->ops->name, cfg->batch_size,
						  optim_desc(&cfg->optim)};
		rc = hora_ckpt_resume(cfg->checkpoint_dir, &job, &cm, tr->params, tr->nparams, tr->optim,
				      err, errlen);
		hdr[0] = rc;
		hdr[1] = cm.epoch;
		hdr[2] = cm.step;
		memcpy(&hdr[3], &cm.rng, 8);
		hdr[4] = cm.workers;
	}
	if (c && size > 1) {
		int r2 = hora_broadcast(c, hdr, 5, HORA_I64, 0);
		if (!r2 && !hdr[0])
			r2 = hora_broadcast_parameters(c, tr->params, tr->nparams, 0);
		size_t ob = hora_optim_state_bytes(tr->optim);
		uint8_t *st = malloc(ob ? ob : 4);
		if (!st)
			return -ENOMEM;
		if (rank == 0)
			hora_optim_state_save(tr->optim, st);
		if (!r2 && !hdr[0] && !(r2 = hora_broadcast(c, st, ob / 4, HORA_I32, 0)) && rank)
			hora_optim_state_load(tr->optim, st, ob);
		free(st);
		if (r2) {
			snprintf(err, errlen, "resume: sharing the checkpoint: %s", hora_comm_last_error(c));
			return r2;
		}
		if (rank && hdr[0]) {
			snprintf(err, errlen, "rank 0 could not resume from %s (its log says why)", cur);
			return (int)hdr[0];
		}
	}
	if (hdr[0])
		return (int)hdr[0];
	*first_epoch = (int)hdr[1] + 1;
	*step = hdr[2];
	memcpy(rng, &hdr[3], 8);
	if (rank == 0 && !cfg->quiet)
		printf("resumed from %s: %lld epoch(s) done, step %lld\n", cur, (long long)hdr[1],
		       (long long)hdr[2]);
	return 0;
}

#define BAR_SYNC_STEPS 16 /* the bar shows loss/acc summed over ranks this often */

/* Every rank must run the same job: the same calls in the same order with
 * the same counts, the same shuffle. Rank 0's settings go to every rank,
 * each compares its own, and all of them learn whether any differed, so
 * that a worker started with another train section, another data set or
 * another HORA_FUSION_THRESHOLD fails at once, on every rank, naming what
 * differs, instead of hanging or skipping samples. v[JOB_BAR] is rank 0's
 * progress-bar choice, taken, not compared (the bar's loss sums are
 * collectives too). */
enum { JOB_SEED, JOB_EPOCHS, JOB_BATCH, JOB_TRAIN_N, JOB_TEST_N, JOB_INPUTS, JOB_CLASSES, JOB_PARAMS,
       JOB_COMM, JOB_FUSION, JOB_CYCLE_US, JOB_COMPRESSION, JOB_TIMELINE, JOB_CKPT_EVERY, JOB_RESUME,
       JOB_BAR, JOB_N };
static const char *const job_name[JOB_BAR] = {
	"train.seed", "train.epochs", "train.batch_size", "training samples", "test samples",
	"inputs per sample", "classes", "model parameters", "train.communication",
	"fusion threshold (train.fusion.threshold_bytes / HORA_FUSION_THRESHOLD)",
	"fusion cycle time in µs (train.fusion.cycle_time_ms / HORA_CYCLE_TIME_MS)",
	"train.fusion.compression", "timeline on (train.timeline / HORA_TIMELINE)",
	"train.checkpoint.every_epochs", "train.resume"};

static int agree_on_job(struct hora_comm *c, int64_t *v, char *err, size_t errlen)
{
	int64_t mine[JOB_N];
	memcpy(mine, v, sizeof(mine));
	int rc = hora_broadcast(c, v, JOB_N, HORA_I64, 0);
	if (rc) {
		snprintf(err, errlen, "agreeing on the job: %s", hora_comm_last_error(c));
		return rc;
	}
	int bad = -1;
	for (int k = 0; k < JOB_BAR && bad < 0; k++)
		if (mine[k] != v[k])
			bad = k;
	int32_t who = bad >= 0 ? hora_rank(c) + 1 : 0;
	if ((rc = hora_allreduce(c, &who, &who, 1, HORA_I32, HORA_MAX))) {
		snprintf(err, errlen, "agreeing on the job: %s", hora_comm_last_error(c));
		return rc;
	}
	if (bad >= 0)
		snprintf(err, errlen, "this worker (rank %d) runs a different job than rank 0: %s is %lld here "
				      "and %lld on rank 0; every worker needs the same train section, data and "
				      "HORA_* settings", hora_rank(c), job_name[bad], (long long)mine[bad],
			 (long long)v[bad]);
	else if (who)
		snprintf(err, errlen, "rank %d runs a different job than rank 0 (its log names the setting); "
				      "every worker needs the same train section, data and HORA_* settings",
			 (int)who - 1);
	return who ? HORA_ERR_CONFIG : 0;
}

int hora_train_run_comm(struct hora_comm *c, const struct hora_train_config *cfg,
			struct hora_train_result *res, char *err, size_t errlen)
{
	struct hora_dataset train = {0}, test = {0};
	struct hora_trainer tr = {0};
	struct hora_dist_optim *dopt = NULL;
	struct hora_timeline *tl = NULL;
	int64_t *order = NULL;
	FILE *mf = NULL;
	char msg[HORA_PATH_MAX + 512];
	int rc;
	const int rank = hora_rank(c), size = hora_size(c);
	const bool dist = c && size > 1 && cfg->communication;

	if (res)
		memset(res, 0, sizeof(*res));
	rc = hora_dataset_load_dir(&train, cfg->data, "train", 256, msg, sizeof(msg));
	if (!rc)
		rc = hora_dataset_load_dir(&test, cfg->data, "test", 256, msg, sizeof(msg));
	if (!rc && (train.rows != test.rows || train.cols != test.cols)) {
		snprintf(msg, sizeof(msg), "%s: train images are %dx%d but test images are %dx%d",
			 cfg->data, train.rows, train.cols, test.rows, test.cols);
		rc = -EINVAL;
	}
	if (!rc && train.n == 0) {
		snprintf(msg, sizeof(msg), "%s: the training set is empty", cfg->data);
		rc = -EINVAL;
	}
	if (rc) {
		snprintf(err, errlen, "data: %s", msg);
		rc = rc == -ENOMEM ? rc : HORA_ERR_DATA;
		goto out;
	}
	int classes = train.num_classes > test.num_classes ? train.num_classes : test.num_classes;
	if (classes < 2)
		classes = 2;
	rc = hora_trainer_init(&tr, cfg, train.rows * train.cols, classes, err, errlen);
	if (rc)
		goto out;
	/* a resumed job adds to the metrics of the epochs before the checkpoint */
	if (rank == 0 && cfg->metrics[0] && !(mf = fopen(cfg->metrics, cfg->resume ? "a" : "w"))) {
		snprintf(err, errlen, "metrics: cannot open %s: %s", cfg->metrics, strerror(errno));
		rc = HORA_ERR_CONFIG;
		goto out;
	}
	order = malloc((size_t)train.n * sizeof(*order));
	if (!order) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (int64_t i = 0; i < train.n; i++)
		order[i] = i;
	if (dist && (rc = hora_dist_optim_create(c, tr.optim, tr.nparams, &cfg->fusion, &dopt))) {
		snprintf(err, errlen, "distributed optimizer: %s", hora_strerror(rc));
		goto out;
	}
	int bar = cfg->progress < 0 ? isatty(STDOUT_FILENO) : cfg->progress;
	if (c && size > 1) {
		const struct hora_fusion_config *fc = dopt ? hora_dist_optim_fusion(dopt) : NULL;
		int64_t job[JOB_N] = {
			[JOB_SEED] = (int64_t)cfg->seed, [JOB_EPOCHS] = cfg->epochs, [JOB_BATCH] = cfg->batch_size,
			[JOB_TRAIN_N] = train.n, [JOB_TEST_N] = test.n, [JOB_INPUTS] = train.rows * train.cols,
			[JOB_CLASSES] = classes, [JOB_PARAMS] = (int64_t)tr.nparams,
			[JOB_COMM] = cfg->communication != 0, [JOB_FUSION] = fc ? (int64_t)fc->threshold_bytes : 0,
			[JOB_CYCLE_US] = fc ? (int64_t)(fc->cycle_time_ms * 1e3) : 0,
			[JOB_COMPRESSION] = fc ? fc->compression : 0, [JOB_TIMELINE] = cfg->timeline[0] != 0,
			[JOB_CKPT_EVERY] = cfg->checkpoint_dir[0] ? cfg->checkpoint_every : 0,
			[JOB_RESUME] = cfg->resume != 0, [JOB_BAR] = bar};
		if ((rc = agree_on_job(c, job, err, errlen)))
			goto out;
		bar = (int)job[JOB_BAR];
		/* rank 0's initial parameters everywhere (Horovod's broadcast) */
		if ((rc = hora_broadcast_parameters(c, tr.params, tr.nparams, 0))) {
			snprintf(err, errlen, "broadcasting the parameters: %s", hora_comm_last_error(c));
			goto out;
		}
	}
	hora_comm_set_stall(c, cfg->stall_warning_s, cfg->stall_abort_s);
	if (cfg->timeline[0] && c) {
		if ((rc = hora_barrier(c)) || (rc = hora_timeline_create(rank, &tl))) {
			snprintf(err, errlen, "timeline: %s", rc == -ENOMEM ? "out of memory" : hora_comm_last_error(c));
			goto out;
		}
		if (dopt)
			hora_dist_optim_set_timeline(dopt, tl);
	}

	int first_epoch = 1;
	int64_t step = 0;
	uint64_t rng = cfg->seed ^ 0x5eed5eed5eedULL; /* the same shuffle on every rank */
	if (cfg->resume && (rc = resume(c, cfg, &tr, &first_epoch, &step, &rng, err, errlen)))
		goto out;

	const int bs = cfg->batch_size;
	const int64_t global_bs = (int64_t)bs * size;
	const int64_t steps_per_epoch = (train.n + global_bs - 1) / global_bs;
	const int64_t total = steps_per_epoch * cfg->epochs;
	struct progress pg = {.epochs = cfg->epochs, .steps = steps_per_epoch};
	const bool talk = rank == 0 && !cfg->quiet;
	pg.bar = bar; /* rank 0's choice on every rank: it decides the bar's collectives */
	if (talk) {
		printf("hora %s: model %s (%zu parameters, %d layers), %lld train / %lld test "
		       "samples of %dx%d, batch %d, %lld steps/epoch",
		       hora_version(), tr.ops->name, tr.nparams, tr.nlayers, (long long)train.n,
		       (long long)test.n, train.rows, train.cols, bs, (long long)steps_per_epoch);
		if (size > 1)
			printf(", %d workers (global batch %lld, lr x %d%s)", size, (long long)global_bs,
			       cfg->optim.scale_lr_by_size ? size : 1,
			       cfg->communication ? "" : ", NO gradient averaging");
		printf("\n");
	}
	struct hora_epoch_metrics m = {0};
	for (int e = first_epoch; e <= cfg->epochs; e++) {
		struct hora_model_stats st = {0}, vs, shown = {0}, junk;
		for (int64_t i = 0; i < train.n; i++) /* each epoch's order depends on rng only */
			order[i] = i;
		shuffle(order, train.n, &rng);
		pg.epoch = e;
		pg.t0 = pg.last_draw = now_s();
		if (pg.bar && talk)
			printf("Epoch %d/%d\n", e, cfg->epochs);
		double t0 = now_s();
		for (int64_t s = 0; s < steps_per_epoch; s++, step++) {
			int64_t lo = s * global_bs;
			int64_t gn = train.n - lo < global_bs ? train.n - lo : global_bs;
			int n;
			int64_t mine = lo + share(gn, rank, size, &n);
			double lr = hora_lr_at(&cfg->optim, step, steps_per_epoch, total, size);
			if (!dopt) {
				rc = n ? hora_trainer_step(&tr, &train, order + mine, n, lr, &st) : 0;
			} else {
				/* this rank's share of the global mean; an empty share still
				 * takes part, with one sample at weight 0 */
				double w = n == global_bs / size && gn == global_bs ? 1.0 : (double)n * size / (double)gn;
				hora_dist_optim_begin(dopt, tr.grads, w);
				if (n || hora_dist_optim_replay_zero(dopt))
					rc = hora_trainer_forward_backward(&tr, &train, order + (n ? mine : lo),
									   n ? n : 1, n ? &st : &junk,
									   hora_dist_optim_grads_ready, dopt);
				if (!rc && (rc = hora_dist_optim_step(dopt, tr.params, lr))) {
					snprintf(err, errlen, "step %lld: averaging gradients: %s", (long long)step,
						 hora_dist_optim_error(dopt));
					goto out;
				}
			}
			if (rc) {
				snprintf(err, errlen, "step %lld: model %s: %s", (long long)step,
					 tr.ops->name, hora_strerror(rc));
				goto out;
			}
			/* one worker stops at once; several stop together, when the
			 * summed loss shows it (below), so that no rank waits in a
			 * collective for one that has left */
			if ((!c || size == 1) && !isfinite(st.loss_sum)) {
				snprintf(err, errlen, "epoch %d step %lld: loss is not finite; lower "
					 "the learning rate (now %g)", e, (long long)step, lr);
				rc = HORA_ERR_DIVERGED;
				goto out;
			}
			if (c && size > 1 && (s + 1) % BAR_SYNC_STEPS == 0 && pg.bar) {
				shown = st; /* every rank: the same calls in the same order */
				if ((rc = sum_stats(c, &shown))) {
					snprintf(err, errlen, "averaging the loss: %s", hora_comm_last_error(c));
					goto out;
				}
				if (!isfinite(shown.loss_sum)) {
					snprintf(err, errlen, "epoch %d step %lld: the loss summed over the %d workers "
							      "is not finite; lower the learning rate (now %g)",
						 e, (long long)step, size, lr);
					rc = HORA_ERR_DIVERGED;
					goto out;
				}
			} else if (!c || size == 1) {
				shown = st;
			}
			if (pg.bar && talk)
				bar_draw(&pg, s + 1, &shown, 0);
		}
		double t_train = now_s() - t0;
		/* validation: each rank a contiguous shard of the test set */
		int vn;
		int64_t vlo = share(test.n, rank, size, &vn);
		double tv0 = now_s();
		rc = hora_trainer_evaluate_range(&tr, &test, vlo, vlo + vn, &vs);
		if (rc) {
			snprintf(err, errlen, "evaluate: model %s: %s", tr.ops->name, hora_strerror(rc));
			goto out;
		}
		if ((rc = sum_stats(c, &st)) || (rc = sum_stats(c, &vs))) {
			snprintf(err, errlen, "averaging the epoch's metrics: %s", hora_comm_last_error(c));
			goto out;
		}
		if (!isfinite(st.loss_sum)) { /* the same sums on every rank: all stop here */
			snprintf(err, errlen, "epoch %d: the loss summed over the %d workers is not finite; "
					      "lower the learning rate (now %g)", e, size,
				 hora_lr_at(&cfg->optim, step - 1, steps_per_epoch, total, size));
			rc = HORA_ERR_DIVERGED;
			goto out;
		}
		if (tl)
			hora_timeline_span(tl, 0, "evaluate", tv0, now_s(), 0);
		m = (struct hora_epoch_metrics){
			.epoch = e,
			.loss = st.loss_sum / (double)st.n,
			.acc = (double)st.correct / (double)st.n,
			.val_loss = vs.n ? vs.loss_sum / (double)vs.n : NAN,
			.val_acc = vs.n ? (double)vs.correct / (double)vs.n : NAN,
			.samples_per_s = (double)st.n / t_train,
			.seconds = now_s() - t0,
			.workers = size,
		};
		if (talk) {
			if (pg.bar) {
				bar_draw(&pg, steps_per_epoch, &st, 1);
				printf(" - val_loss: %.4f - val_acc: %.4f - %.0f samples/s\n", m.val_loss,
				       m.val_acc, m.samples_per_s);
			} else {
				printf("epoch %d/%d loss %.4f acc %.4f val_loss %.4f val_acc %.4f "
				       "samples/s %.0f seconds %.2f\n",
				       e, cfg->epochs, m.loss, m.acc, m.val_loss, m.val_acc,
				       m.samples_per_s, m.seconds);
			}
			fflush(stdout);
		}
		/* rank 0's files: a failure there stops every rank, together */
		int32_t wrc = 0;
		if (mf && (wrc = write_metrics(mf, &m)))
			snprintf(err, errlen, "metrics: cannot write %s: %s", cfg->metrics, strerror(-wrc));
		if (!wrc && rank == 0 && cfg->checkpoint_dir[0] && cfg->checkpoint_every > 0 &&
		    (e % cfg->checkpoint_every == 0 || e == cfg->epochs)) {
			struct hora_ckpt_meta cm = {.epoch = e, .workers = size, .step = step, .rng = rng,
						    .seed = cfg->seed, .nparams = tr.nparams};
			snprintf(cm.model, sizeof(cm.model), "%s", tr.ops->name);
			cm.batch = cfg->batch_size;
			snprintf(cm.optimizer, sizeof(cm.optimizer), "%s", optim_desc(&cfg->optim));
			double tc0 = now_s();
			/* on failure the previous checkpoint is still there */
			wrc = hora_ckpt_write(cfg->checkpoint_dir, &cm, tr.params, tr.optim, err, errlen);
			if (tl && !wrc)
				hora_timeline_span(tl, 0, "checkpoint", tc0, now_s(), 0);
		}
		if (c && size > 1 && (rc = hora_broadcast(c, &wrc, 1, HORA_I32, 0))) {
			snprintf(err, errlen, "after epoch %d: %s", e, hora_comm_last_error(c));
			goto out;
		}
		if (wrc) {
			if (rank != 0)
				snprintf(err, errlen, "rank 0 stopped the job after epoch %d: it could not write its "
						      "metrics or checkpoint (its log says why)", e);
			rc = wrc;
			goto out;
		}
	}
	if (tl && (rc = hora_timeline_write(tl, c, cfg->timeline, err, errlen)))
		goto out;
	if (res) {
		res->last = m;
		res->steps = step;
		res->nparams = tr.nparams;
		if (dopt) {
			struct hora_dist_stats ds;
			hora_dist_optim_stats(dopt, &ds);
			res->allreduce_s = ds.allreduce_s;
			res->allreduce_hidden_s = ds.hidden_s;
		}
		res->params = malloc(tr.nparams * sizeof(float));
		if (!res->params) {
			rc = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		memcpy(res->params, tr.params, tr.nparams * sizeof(float));
	}
	rc = 0;
out:
	if (mf)
		fclose(mf);
	free(order);
	hora_dist_optim_destroy(dopt);
	hora_timeline_destroy(tl);
	hora_trainer_deinit(&tr);
	hora_dataset_deinit(&train);
	hora_dataset_deinit(&test);
	return rc;
}

int hora_train_run(const struct hora_train_config *cfg, struct hora_train_result *res, char *err,
		   size_t errlen)
{
	return hora_train_run_comm(NULL, cfg, res, err, errlen);
}

void hora_train_result_deinit(struct hora_train_result *res)
{
	if (!res)
		return;
	free(res->params);
	memset(res, 0, sizeof(*res));
}
