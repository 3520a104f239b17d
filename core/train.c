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
#include "ckpt_thread.h"
#include "comm.h"
#include "distopt.h"
#include "env.h"
#include "balance.h"
#include "gossip.h"
#include "hora.h"
#include "log.h"
#include "trainer.h"
#include "run.h"

#include "net/util/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <time.h>
#include <unistd.h>

uint64_t hora_run_draw(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Fisher-Yates with an unbiased bounded draw (Lemire). */
void hora_run_shuffle(int64_t *a, int64_t n, uint64_t *s)
{
	for (int64_t i = n - 1; i > 0; i--) {
		uint64_t bound = (uint64_t)i + 1, x;
		unsigned __int128 m;
		uint64_t l;
		do {
			x = hora_run_draw(s);
			m = (unsigned __int128)x * bound;
			l = (uint64_t)m;
		} while (l < (-bound) % bound);
		int64_t j = (int64_t)(m >> 64), t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

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
	double t = hora_clock_s();
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
		"\"samples_per_s\":%.1f,\"seconds\":%.4f,\"workers\":%d,\"view\":%llu",
		m->epoch, m->loss, m->acc, m->val_loss, m->val_acc, m->samples_per_s, m->seconds,
		m->workers, (unsigned long long)m->view);
	if (m->has_consensus && isfinite(m->consensus_mean) && isfinite(m->consensus_max))
		fprintf(f, ",\"consensus\":{\"mean\":%.6g,\"max\":%.6g}", m->consensus_mean, m->consensus_max);
	else if (m->has_consensus)
		fprintf(f, ",\"consensus\":null"); /* not finite: JSON has no NaN */
	fprintf(f, "}\n");
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

/* the test hook's slow file system (HORA_TEST_CKPT_DELAY_MS) */
static void ckpt_test_delay(int ms)
{
	if (ms)
		nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000}, NULL);
}

#define CKPT_BUSY INT32_MIN /* rank 0's answer while it still writes or reads its checkpoint */
#define CKPT_ROUND_MS 200   /* a round's wait: far below any io timeout */

/* rank 0's answer for this round: the thread's result, or CKPT_BUSY after
 * up to CKPT_ROUND_MS (with a warning every stall_warning_s, and
 * HORA_ERR_STALL past stall_abort_s); doing: "writing to", "reading from" */
static int32_t ckpt_round(struct run *r, struct hora_ckpt_thread *t, const char *doing, double *warned,
			  double *tc0, double *tc1)
{
	int32_t v;
	if (hora_ckpt_thread_wait(t, CKPT_ROUND_MS, &v, r->err, r->errlen, tc0, tc1))
		return v;
	const double age = hora_ckpt_thread_age(t), warn = r->cfg->stall_warning_s, stop = r->cfg->stall_abort_s;
	if (stop > 0 && age >= stop) {
		snprintf(r->err, r->errlen, "checkpoint: still %s %s after %.0f s: the job stops "
					    "(train.stall_abort_s %g)", doing, r->cfg->checkpoint_dir, age, stop);
		return HORA_ERR_STALL;
	}
	if (warn > 0 && age >= *warned + warn) {
		*warned = age;
		HORA_LOGW("checkpoint: still %s %s after %.0f s; every rank waits for it", doing,
			  r->cfg->checkpoint_dir, age);
	}
	return CKPT_BUSY;
}

/* Rank 0's read of the checkpoint (the result, err why it failed): on a
 * thread of its own while every rank waits in rounds of one broadcast, as
 * for a write (a large model, a network file system: no rank waits longer
 * than a round in one receive, which would fail at the io timeout); alone,
 * or without a thread, here. Every rank learns the result (*res). */
static int read_checkpoint(struct run *r, const struct hora_ckpt_job *job, struct hora_ckpt_meta *cm,
			   int32_t *res)
{
	const struct hora_train_config *cfg = r->cfg;
	const bool several = r->c && hora_size(r->c) > 1, zero = hora_rank(r->c) == 0;
	const int delay_ms = hora_env_test_ckpt_delay_ms();
	struct hora_ckpt_thread *t = NULL;
	char why[256] = "";
	*res = 0;
	if (zero && several &&
	    !(t = hora_ckpt_thread_read(cfg->checkpoint_dir, job, r->tr.nparams, hora_optim_state_bytes(r->tr.optim),
					delay_ms, why, sizeof(why))))
		HORA_LOGW("%s: rank 0 reads it on its main thread", why);
	if (zero && !t) {
		ckpt_test_delay(delay_ms);
		*res = hora_ckpt_resume(cfg->checkpoint_dir, job, cm, r->tr.params, r->tr.nparams, r->tr.optim,
					r->err, r->errlen);
	}
	double warned = 0, t0, t1;
	bool ended = !t;
	int rc = 0;
	while (several) {
		int32_t v = t && !ended ? ckpt_round(r, t, "reading from", &warned, &t0, &t1) : *res;
		ended = ended || v != CKPT_BUSY;
		if ((rc = hora_broadcast(r->c, &v, 1, HORA_I32, 0))) {
			snprintf(r->err, r->errlen, "resume: waiting for rank 0's checkpoint: %s",
				 hora_comm_last_error(r->c));
			break;
		}
		if (v != CKPT_BUSY) {
			*res = v;
			break;
		}
	}
	if (t && !rc && !*res)
		hora_ckpt_thread_take(t, cm, r->tr.params, r->tr.optim);
	hora_ckpt_thread_end(t, false); /* unfinished (a stall, a failed round): it ends by itself */
	return rc;
}

/* Rank 0 reads and verifies the checkpoint, then every rank gets its
 * parameters, optimizer state, epoch, step and RNG state. */
static int resume(struct run *r)
{
	const struct hora_train_config *cfg = r->cfg;
	struct hora_comm *c = r->c;
	struct hora_trainer *tr = &r->tr;
	const int rank = hora_rank(c), size = hora_size(c);
	char cur[HORA_PATH_MAX + 32], prev[HORA_PATH_MAX + 32];
	if (!cfg->checkpoint_dir[0]) {
		snprintf(r->err, r->errlen, "train.resume needs train.checkpoint.dir");
		return HORA_ERR_CONFIG;
	}
	hora_ckpt_paths(cfg->checkpoint_dir, cur, prev, sizeof(cur));
	struct hora_ckpt_meta cm = {0};
	const struct hora_ckpt_job job = {r->elastic ? 0 : size, cfg->seed, tr->ops->name, cfg->batch_size,
					  optim_desc(&cfg->optim)};
	int32_t res;
	int rc = read_checkpoint(r, &job, &cm, &res);
	if (rc)
		return rc;
	if (res == HORA_ERR_STALL && rank)
		snprintf(r->err, r->errlen, "rank 0 stopped the job: its read of the checkpoint in %s passed "
					    "train.stall_abort_s (its log says where)", cfg->checkpoint_dir);
	else if (res && rank)
		snprintf(r->err, r->errlen, "rank 0 could not resume from %s (its log says why)", cur);
	if (res)
		return res;
	int64_t hdr[3] = {cm.epoch, cm.step, 0}; /* epoch, step, rng */
	memcpy(&hdr[2], &cm.rng, 8);
	if (c && size > 1) {
		int r2 = hora_broadcast(c, hdr, 3, HORA_I64, 0);
		if (!r2)
			r2 = hora_broadcast_parameters(c, tr->params, tr->nparams, 0);
		size_t ob = hora_optim_state_bytes(tr->optim);
		uint8_t *st = malloc(ob ? ob : 4);
		if (!st)
			return -ENOMEM;
		if (rank == 0)
			hora_optim_state_save(tr->optim, st);
		if (!r2 && !(r2 = hora_broadcast(c, st, ob / 4, HORA_I32, 0)) && rank)
			hora_optim_state_load(tr->optim, st, ob);
		free(st);
		if (r2) {
			snprintf(r->err, r->errlen, "resume: sharing the checkpoint: %s", hora_comm_last_error(c));
			return r2;
		}
	}
	r->first_epoch = (int)hdr[0] + 1;
	r->step = hdr[1];
	memcpy(&r->rng, &hdr[2], 8);
	if (rank == 0 && !cfg->quiet)
		printf("resumed from %s: %lld epoch(s) done, step %lld\n", cur, (long long)hdr[0],
		       (long long)hdr[1]);
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
       JOB_ELASTIC, JOB_GOSSIP, JOB_GOSSIP_TOPOLOGY, JOB_GOSSIP_PERIOD, JOB_GOSSIP_SELF_WEIGHT,
       JOB_GOSSIP_CONSENSUS, JOB_GOSSIP_MODE, JOB_GOSSIP_ADAPTIVE, JOB_BALANCE, JOB_OPTIM, JOB_LR,
       JOB_MOMENTUM, JOB_NESTEROV, JOB_BETA1, JOB_BETA2, JOB_EPS, JOB_WD, JOB_WARMUP, JOB_SCHEDULE,
       JOB_SCALE_LR, JOB_EL_BATCH, JOB_EL_COMMIT, JOB_EL_MIN, JOB_EL_MAX, JOB_DATA, JOB_BAR,
       JOB_METRICS_ERRNO, JOB_N };
/* the settings compared as the bits of a double (printed as numbers) */
#define JOB_DOUBLES                                                                                    \
	((1ull << JOB_LR) | (1ull << JOB_MOMENTUM) | (1ull << JOB_BETA1) | (1ull << JOB_BETA2) |      \
	 (1ull << JOB_EPS) | (1ull << JOB_WD) | (1ull << JOB_WARMUP))
static const char *const job_name[JOB_BAR] = {
	"train.seed", "train.epochs", "train.batch_size", "training samples", "test samples",
	"inputs per sample", "classes", "model parameters", "train.communication",
	"fusion threshold (train.fusion.threshold_bytes / HORA_FUSION_THRESHOLD)",
	"fusion cycle time in µs (train.fusion.cycle_time_ms / HORA_CYCLE_TIME_MS)",
	"train.fusion.compression", "timeline on (train.timeline / HORA_TIMELINE)",
	"train.checkpoint.every_epochs", "train.resume", "train.elastic on", "train.sync gossip",
	"train.gossip.topology", "train.gossip.period", "train.gossip.self_weight (x 1e9)",
	"train.gossip.consensus_every", "train.gossip.mode (0 sync, 1 async)", "train.gossip.adaptive",
	"train.balance", "train.optimizer.name (0 sgd, 1 adam)", "train.optimizer.lr",
	"train.optimizer.momentum", "train.optimizer.nesterov", "train.optimizer.beta1",
	"train.optimizer.beta2", "train.optimizer.eps", "train.optimizer.weight_decay",
	"train.optimizer.warmup_epochs", "train.optimizer.schedule (0 constant, 1 cosine)",
	"train.optimizer.scale_lr_by_size", "train.elastic.batch (0 per_worker, 1 global)",
	"train.elastic.commit_steps", "train.elastic.min_workers", "train.elastic.max_workers",
	"the data's fingerprint (crc32 of the labels and 64 images, train << 32 | test; train.data)"};
_Static_assert(JOB_N <= 64, "JOB_DOUBLES is a 64-bit mask");

static int64_t job_double(double x)
{
	int64_t v;
	memcpy(&v, &x, sizeof(v));
	return v;
}

/* crc32 of every label and of 64 evenly spaced images: two data sets of
 * the same sizes (MNIST and Fashion-MNIST) differ, at no cost worth naming */
static uint32_t data_crc(const struct hora_dataset *d)
{
	/* crc32, not crc32_z: the zlib of Debian's package Depends (>= 1.2.6) */
	const size_t row = (size_t)d->rows * (size_t)d->cols;
	uLong c = crc32(0L, Z_NULL, 0);
	for (size_t o = 0, n = (size_t)d->n; o < n; o += 1u << 30)
		c = crc32(c, d->labels + o, (uInt)(n - o < 1u << 30 ? n - o : 1u << 30));
	for (int64_t k = 0; d->n > 0 && k < 64 && row <= 1u << 30; k++)
		c = crc32(c, d->images + (size_t)(k * d->n / 64) * row, (uInt)row);
	return (uint32_t)c;
}

/* a setting's value as the error shows it */
static void job_value(char *buf, size_t n, int k, int64_t v)
{
	double x;
	memcpy(&x, &v, sizeof(x));
	if (JOB_DOUBLES >> k & 1) { /* the shortest that reads back the same */
		snprintf(buf, n, "%.15g", x);
		if (strtod(buf, NULL) != x)
			snprintf(buf, n, "%.17g", x);
	} else
		snprintf(buf, n, "%lld", (long long)v);
}

/* Rank 0's job to every rank, which compares its own; all learn the
 * highest rank that differs and the first setting it differs in (who:
 * (rank + 1) x 64 + setting), so that every rank names it. A barrier
 * after a refusal keeps every rank until all know it: one that left at
 * once could fail another's allreduce (a comm error, and elastic ranks
 * would take it for a lost worker); its own failure changes nothing. */
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
	int32_t who = bad >= 0 ? (hora_rank(c) + 1) * 64 + bad : 0;
	if ((rc = hora_allreduce(c, &who, &who, 1, HORA_I32, HORA_MAX))) {
		snprintf(err, errlen, "agreeing on the job: %s", hora_comm_last_error(c));
		return rc;
	}
	if (bad >= 0) {
		char here[40], there[40];
		job_value(here, sizeof(here), bad, mine[bad]);
		job_value(there, sizeof(there), bad, v[bad]);
		snprintf(err, errlen, "this worker (rank %d) runs a different job than rank 0: %s is %s here "
				      "and %s on rank 0; every worker needs the same train section, data and "
				      "HORA_* settings", hora_rank(c), job_name[bad], here, there);
	} else if (who)
		snprintf(err, errlen, "rank %d runs a different job than rank 0: %s differs (its log gives "
				      "both values); every worker needs the same train section, data and HORA_* "
				      "settings", (int)(who / 64) - 1, job_name[who % 64]);
	if (who)
		hora_barrier(c);
	return who ? HORA_ERR_CONFIG : 0;
}

/* the training and test sets, which must fit each other */
static int load_data(struct run *r)
{
	const struct hora_train_config *cfg = r->cfg;
	char msg[HORA_PATH_MAX + 512];
	const int delay_ms = hora_env_test_load_delay_ms();
	if (delay_ms)
		usleep((useconds_t)delay_ms * 1000);
	int rc = hora_dataset_load_dir(&r->train, cfg->data, "train", 256, msg, sizeof(msg));
	if (!rc)
		rc = hora_dataset_load_dir(&r->test, cfg->data, "test", 256, msg, sizeof(msg));
	if (!rc && (r->train.rows != r->test.rows || r->train.cols != r->test.cols)) {
		snprintf(msg, sizeof(msg), "%s: train images are %dx%d but test images are %dx%d", cfg->data,
			 r->train.rows, r->train.cols, r->test.rows, r->test.cols);
		rc = -EINVAL;
	}
	if (!rc && r->train.n == 0) {
		snprintf(msg, sizeof(msg), "%s: the training set is empty", cfg->data);
		rc = -EINVAL;
	}
	if (rc) {
		snprintf(r->err, r->errlen, "data: %s", msg);
		return rc == -ENOMEM ? rc : HORA_ERR_DATA;
	}
	r->classes = r->train.num_classes > r->test.num_classes ? r->train.num_classes : r->test.num_classes;
	if (r->classes < 2)
		r->classes = 2;
	return 0;
}

/* the trainer, rank 0's metrics file, the shuffle and the distributed optimizer */
static int set_up(struct run *r)
{
	const struct hora_train_config *cfg = r->cfg;
	int rc = hora_trainer_init(&r->tr, cfg, r->train.rows * r->train.cols, r->classes, r->err, r->errlen);
	if (rc)
		return rc;
	r->grads_plain = r->tr.grads; /* hora_run_dist_optim may lend a region instead */
	/* opened for appending: a resumed job adds to the metrics of the epochs
	 * before the checkpoint, and a fresh one empties the file only at its
	 * first line, once the job is agreed on (hora_run_fresh_metrics); a
	 * joiner's rank 0 opens them after the sync (elastic.c), after the
	 * lines there */
	const bool joiner = r->c && hora_comm_joined(r->c);
	if (r->rank == 0 && cfg->metrics[0] && !joiner && !(r->mf = fopen(cfg->metrics, "a")) &&
	    (r->metrics_errno = errno) && !r->several) {
		snprintf(r->err, r->errlen, "metrics: cannot open %s: %s", cfg->metrics, strerror(errno));
		return HORA_ERR_CONFIG;
	}
	if (!(r->order = malloc((size_t)r->train.n * sizeof(*r->order)))) {
		snprintf(r->err, r->errlen, "out of memory");
		return -ENOMEM;
	}
	return hora_run_dist_optim(r);
}

void hora_run_fresh_metrics(struct run *r)
{
	r->metrics_fresh = !r->cfg->resume;
}

int hora_run_agree_job(struct run *r, int *bar)
{
	const struct hora_train_config *cfg = r->cfg;
	const struct hora_fusion_config *fc = r->dopt ? hora_dist_optim_fusion(r->dopt) : NULL;
	const struct hora_optim_config *o = &cfg->optim;
	const struct hora_elastic_config *el = &cfg->elastic;
	int64_t job[JOB_N] = {
		[JOB_SEED] = (int64_t)cfg->seed, [JOB_EPOCHS] = cfg->epochs, [JOB_BATCH] = cfg->batch_size,
		[JOB_TRAIN_N] = r->train.n, [JOB_TEST_N] = r->test.n,
		[JOB_INPUTS] = r->train.rows * r->train.cols, [JOB_CLASSES] = r->classes,
		[JOB_PARAMS] = (int64_t)r->tr.nparams, [JOB_COMM] = cfg->communication != 0,
		[JOB_FUSION] = fc ? (int64_t)fc->threshold_bytes : 0,
		[JOB_CYCLE_US] = fc ? (int64_t)(fc->cycle_time_ms * 1e3) : 0,
		[JOB_COMPRESSION] = fc ? fc->compression : 0, [JOB_TIMELINE] = cfg->timeline[0] != 0,
		[JOB_CKPT_EVERY] = cfg->checkpoint_dir[0] ? cfg->checkpoint_every : 0,
		[JOB_RESUME] = cfg->resume != 0, [JOB_ELASTIC] = r->elastic,
		[JOB_GOSSIP] = cfg->gossip.on, [JOB_GOSSIP_TOPOLOGY] = cfg->gossip.topology,
		[JOB_GOSSIP_PERIOD] = cfg->gossip.period,
		[JOB_GOSSIP_SELF_WEIGHT] = (int64_t)llround(cfg->gossip.self_weight * 1e9),
		[JOB_GOSSIP_CONSENSUS] = cfg->gossip.consensus_every, [JOB_GOSSIP_MODE] = cfg->gossip.mode,
		[JOB_GOSSIP_ADAPTIVE] = cfg->gossip.mode == HORA_GOSSIP_ASYNC && cfg->gossip.adaptive,
		[JOB_BALANCE] = cfg->balance != 0, [JOB_OPTIM] = o->kind, [JOB_LR] = job_double(o->lr),
		[JOB_MOMENTUM] = job_double(o->momentum), [JOB_NESTEROV] = o->nesterov != 0,
		[JOB_BETA1] = job_double(o->beta1), [JOB_BETA2] = job_double(o->beta2),
		[JOB_EPS] = job_double(o->eps), [JOB_WD] = job_double(o->weight_decay),
		[JOB_WARMUP] = job_double(o->warmup_epochs), [JOB_SCHEDULE] = o->schedule,
		[JOB_SCALE_LR] = o->scale_lr_by_size != 0, [JOB_EL_BATCH] = r->elastic ? el->batch : 0,
		[JOB_EL_COMMIT] = r->elastic ? el->commit_steps : 0, [JOB_EL_MIN] = r->elastic ? el->min_workers : 0,
		[JOB_EL_MAX] = r->elastic ? el->max_workers : 0,
		[JOB_DATA] = (int64_t)((uint64_t)data_crc(&r->train) << 32 | data_crc(&r->test)), [JOB_BAR] = *bar,
		[JOB_METRICS_ERRNO] = r->metrics_errno};
	int rc = agree_on_job(r->c, job, r->err, r->errlen);
	if (!rc)
		*bar = (int)job[JOB_BAR];
	if (!rc && job[JOB_METRICS_ERRNO]) { /* rank 0's duty: every rank stops (not a lost worker) */
		snprintf(r->err, r->errlen, "%smetrics: cannot open %s: %s", r->rank ? "rank 0 stopped the job: " : "",
			 cfg->metrics, strerror((int)job[JOB_METRICS_ERRNO]));
		r->duty_failed = true;
		rc = HORA_ERR_CONFIG;
		hora_barrier(r->c); /* as after a refusal (agree_on_job) */
	}
	return rc;
}

/* Every rank checks its job against rank 0's and takes rank 0's bar choice
 * (*bar) and initial parameters (Horovod's broadcast). The first call is
 * one round of the shape of an elastic formation's readiness rounds
 * (comm_keep.c: an allreduce of one int32, MIN, 1: ready), so that a
 * worker without train.elastic beside elastic ones reaches the job
 * agreement with them, which refuses train.elastic by name on every
 * worker, rather than failing on mismatched collectives while the
 * elastic ones re-form without it. */
static int agree(struct run *r, int *bar)
{
	int32_t ready = 1;
	int rc = hora_allreduce(r->c, &ready, &ready, 1, HORA_I32, HORA_MIN);
	if (rc)
		return snprintf(r->err, r->errlen, "agreeing on the job: %s", hora_comm_last_error(r->c)), rc;
	rc = hora_run_agree_job(r, bar);
	if (rc)
		return rc;
	if ((rc = hora_broadcast_parameters(r->c, r->tr.params, r->tr.nparams, 0)))
		snprintf(r->err, r->errlen, "broadcasting the parameters: %s", hora_comm_last_error(r->c));
	return rc;
}

/* the timeline starts on every rank right after a barrier */
static int start_timeline(struct run *r)
{
	int rc;
	if ((rc = hora_barrier(r->c)) || (rc = hora_timeline_create(r->rank, &r->tl))) {
		snprintf(r->err, r->errlen, "timeline: %s",
			 rc == -ENOMEM ? "out of memory" : hora_comm_last_error(r->c));
		return rc;
	}
	if (r->dopt)
		hora_dist_optim_set_timeline(r->dopt, r->tl);
	return 0;
}

static void print_header(const struct run *r)
{
	const struct hora_train_config *cfg = r->cfg;
	printf("hora %s: model %s (%zu parameters, %d layers), %lld train / %lld test "
	       "samples of %dx%d, batch %d, %lld steps/epoch",
	       hora_version(), r->tr.ops->name, r->tr.nparams, r->tr.nlayers, (long long)r->train.n,
	       (long long)r->test.n, r->train.rows, r->train.cols, cfg->batch_size,
	       (long long)r->steps_per_epoch);
	if (r->size > 1)
		printf(", %d workers (global batch %lld, lr x %d%s)", r->size, (long long)r->global_bs,
		       cfg->optim.scale_lr_by_size ? r->size : 1, cfg->communication ? "" : ", NO gradient averaging");
	static const char *const topo[] = {"ring", "exponential", "one_peer_exponential", "random"};
	if (r->gasync) {
		printf("; gossip async: the even ranks ask one odd %s neighbour%s to average every %d step%s, "
		       "no barrier", topo[cfg->gossip.topology], cfg->gossip.adaptive ? " (the quicker ones more often)" : "",
		       cfg->gossip.period, cfg->gossip.period > 1 ? "s" : "");
	} else if (r->gossip) {
		printf("; gossip: parameters averaged with the %s graph's neighbours every %d step%s, no "
		       "gradient allreduce", topo[cfg->gossip.topology], cfg->gossip.period,
		       cfg->gossip.period > 1 ? "s" : "");
	}
	printf("\n");
}

/* The learning rate of the step at r->pos: by the global step count, or
 * elastic, by the position in the epoch at the current global batch (the
 * same while no view changed), at the current size (batch: per_worker) or
 * the first (global). */
double hora_run_lr(const struct run *r)
{
	if (!r->elastic)
		return hora_lr_at(&r->cfg->optim, r->step, r->steps_per_epoch, r->total, r->size);
	const int64_t vstep = (int64_t)(r->epoch - 1) * r->steps_per_epoch + r->pos / r->global_bs;
	const bool global = r->cfg->elastic.batch == HORA_ELASTIC_GLOBAL;
	return hora_lr_at(&r->cfg->optim, vstep, r->steps_per_epoch, r->total, global ? r->n0 : r->size);
}

/* train.balance: this step's forward/backward since t0, n samples */
static void record_balance(struct run *r, double t0, int n)
{
	const double fixed = r->cfg->balance_test_seconds;
	hora_balance_record(r->bal, fixed > 0 ? fixed * n : hora_clock_s() - t0, n);
}

/* This rank's share of a global batch of gn samples: its offset in it, n
 * samples (train.balance: by the agreed weights, else even) */
static int64_t my_share(const struct run *r, int64_t gn, int *n)
{
	return r->bal ? hora_balance_share(r->bal, gn, r->rank, n) : share(gn, r->rank, r->size, n);
}

/* The rows of this rank's share of the next global batch (at sample
 * next_lo of the epoch) on their way (hora_trainer_prefetch); called
 * between forward/backward and the update (the averaging, gossip's wait,
 * the optimizer), which run meanwhile. A hint: a share that the next
 * agreement of train.balance moves is only fetched in part. */
static void prefetch_next(const struct run *r, int64_t next_lo)
{
	if (next_lo >= r->train.n)
		return;
	const int64_t gn = r->train.n - next_lo < r->global_bs ? r->train.n - next_lo : r->global_bs;
	int n;
	const int64_t at = next_lo + my_share(r, gn, &n);
	hora_trainer_prefetch(&r->tr, &r->train, r->order + at, n);
}

double hora_run_grad_weight(int n, int size, int64_t gn)
{
	/* exactly 1 (no scaling pass) when the shares are even; a global batch
	 * that does not divide by size (train.elastic.batch: global after a
	 * loss) has no even share: its floor still weighs n x size / gn */
	return (int64_t)n * size == gn ? 1.0 : (double)n * size / (double)gn;
}

/* The global batch at sample lo of the epoch (gn samples): this rank's
 * share of it; with the distributed optimizer the update is the global
 * batch's mean gradient. */
static int train_step(struct run *r, int64_t lo, int64_t gn, struct hora_model_stats *st)
{
	int n, rc;
	if (hora_balance_due(r->bal, r->step) && (rc = hora_balance_agree(r->bal, r->c, r->step, r->global_bs))) {
		snprintf(r->err, r->errlen, "step %lld: balancing the batch (train.balance): %s", (long long)r->step,
			 hora_comm_last_error(r->c));
		return rc;
	}
	const int64_t mine = lo + my_share(r, gn, &n);
	if (n > r->tr.max_batch) { /* train.elastic.batch: global after workers left */
		/* with train.balance, room for the largest share it may give (at
		 * most 5/3 of the even one, rounded: 2 x + 2 holds it), so that
		 * its moves build nothing again */
		const int64_t even = (gn + r->size - 1) / r->size, want = r->bal ? 2 * even + 2 : n;
		char why[600];
		if ((rc = hora_trainer_grow(&r->tr, want > n ? (int)want : n, why, sizeof(why)))) {
			snprintf(r->err, r->errlen, "step %lld: this worker's share of the global batch grew to %d "
				 "samples: %s", (long long)r->step, n, why);
			return rc;
		}
	}
	r->samples_trained += n;
	const double lr = hora_run_lr(r);
	if (r->samples)
		hora_elastic_log_samples(r, r->order + mine, n);
	const double t_fb = hora_clock_s();
	if (r->gossip) {
		/* D-PSGD: x_t's averaging runs while its gradient is computed */
		rc = hora_gossip_begin(r->gossip, r->tr.params, r->step + 1, r->err, r->errlen);
		const int brc = rc;
		if (!rc && n)
			rc = hora_trainer_forward_backward(&r->tr, &r->train, r->order + mine, n, st, NULL, NULL);
		prefetch_next(r, lo + gn);
		const int erc = brc ? 0 : hora_gossip_end(r->gossip, r->tr.params, r->err, r->errlen);
		if (brc || erc)
			return brc ? brc : erc; /* err says why */
		if (!rc && n)
			hora_optim_step(r->tr.optim, r->tr.params, r->tr.grads, lr);
	} else if (!r->dopt) {
		rc = n ? hora_trainer_forward_backward(&r->tr, &r->train, r->order + mine, n, st, NULL, NULL) : 0;
		record_balance(r, t_fb, n);
		prefetch_next(r, lo + gn);
		const double t_opt = hora_clock_s(); /* where the distributed optimizer's span ends too */
		if (!rc && n) /* hora_trainer_step, the rows on their way meanwhile */
			hora_optim_step(r->tr.optim, r->tr.params, r->tr.grads, lr);
		if (r->tl) { /* the same spans as the distributed optimizer's */
			hora_timeline_span(r->tl, 0, "forward_backward", t_fb, t_opt, 0);
			hora_timeline_span(r->tl, 0, "optimizer_step", t_opt, hora_clock_s(), 0);
		}
	} else {
		/* this rank's share of the global mean; an empty share still takes
		 * part, with one sample at weight 0 */
		struct hora_model_stats junk;
		const double w = hora_run_grad_weight(n, r->size, gn);
		hora_dist_optim_begin(r->dopt, r->tr.grads, w);
		rc = 0;
		if (n || hora_dist_optim_replay_zero(r->dopt))
			rc = hora_trainer_forward_backward(&r->tr, &r->train, r->order + (n ? mine : lo), n ? n : 1,
							   n ? st : &junk, hora_dist_optim_ready_fn(r->dopt), r->dopt);
		record_balance(r, t_fb, n);
		prefetch_next(r, lo + gn);
		if (!rc && (rc = hora_dist_optim_step(r->dopt, r->tr.params, lr))) {
			snprintf(r->err, r->errlen, "step %lld: averaging gradients: %s", (long long)r->step,
				 r->c && hora_comm_stalled(r->c) ? hora_comm_last_error(r->c)
								 : hora_dist_optim_error(r->dopt));
			return rc;
		}
	}
	if (rc) {
		const char *why = hora_trainer_model_error(&r->tr);
		snprintf(r->err, r->errlen, "step %lld: model %s: %s%s%s", (long long)r->step,
			 r->tr.ops->name, hora_strerror(rc), why[0] ? ": " : "", why);
		return rc;
	}
	/* one worker stops at once; several stop together, when the summed loss
	 * shows it, so that no rank waits in a collective for one that has left */
	if (!r->several && !isfinite(st->loss_sum)) {
		snprintf(r->err, r->errlen, "epoch %d step %lld: loss is not finite; lower the learning rate "
					    "(now %g)", r->pg.epoch, (long long)r->step, lr);
		return HORA_ERR_DIVERGED;
	}
	return 0;
}

/* What the bar shows after step s: this rank's sums alone, or every
 * BAR_SYNC_STEPS steps the sums over ranks (then a diverged job stops). */
static int bar_stats(struct run *r, int64_t s, const struct hora_model_stats *st,
		     struct hora_model_stats *shown)
{
	if (!r->several) {
		*shown = *st;
		return 0;
	}
	if ((s + 1) % BAR_SYNC_STEPS || !r->pg.bar)
		return 0;
	*shown = *st; /* every rank: the same calls in the same order */
	int rc = sum_stats(r->c, shown);
	if (rc) {
		snprintf(r->err, r->errlen, "averaging the loss: %s", hora_comm_last_error(r->c));
		return rc;
	}
	if (!isfinite(shown->loss_sum)) {
		snprintf(r->err, r->errlen, "epoch %d step %lld: the loss summed over the %d workers is not "
					    "finite; lower the learning rate (now %g)", r->pg.epoch, (long long)r->step,
			 r->size, hora_lr_at(&r->cfg->optim, r->step, r->steps_per_epoch, r->total, r->size));
		return HORA_ERR_DIVERGED;
	}
	return 0;
}

/* Validation on each rank's contiguous shard of the test set, and the
 * epoch's sums over ranks (st: training, vs: validation). */
static int evaluate(struct run *r, struct hora_model_stats *st, struct hora_model_stats *vs)
{
	int vn;
	const int64_t vlo = share(r->test.n, r->rank, r->size, &vn);
	const double tv0 = hora_clock_s();
	int rc = hora_trainer_evaluate_range(&r->tr, &r->test, vlo, vlo + vn, vs);
	if (rc) {
		const char *why = hora_trainer_model_error(&r->tr);
		snprintf(r->err, r->errlen, "evaluate: model %s: %s%s%s", r->tr.ops->name,
			 hora_strerror(rc), why[0] ? ": " : "", why);
		return rc;
	}
	if ((rc = sum_stats(r->c, st)) || (rc = sum_stats(r->c, vs))) {
		snprintf(r->err, r->errlen, "averaging the epoch's metrics: %s", hora_comm_last_error(r->c));
		return rc;
	}
	if (!isfinite(st->loss_sum)) { /* the same sums on every rank: all stop here */
		snprintf(r->err, r->errlen, "epoch %d: the loss summed over the %d workers is not finite; "
					    "lower the learning rate (now %g)", r->pg.epoch, r->size,
			 hora_lr_at(&r->cfg->optim, r->step - 1, r->steps_per_epoch, r->total, r->size));
		return HORA_ERR_DIVERGED;
	}
	if (r->tl)
		hora_timeline_span(r->tl, 0, "evaluate", tv0, hora_clock_s(), 0);
	return 0;
}

static void print_epoch(struct run *r, const struct hora_model_stats *st)
{
	const struct hora_epoch_metrics *m = &r->m;
	if (r->pg.bar) {
		bar_draw(&r->pg, r->steps_per_epoch, st, 1);
		printf(" - val_loss: %.4f - val_acc: %.4f - %.0f samples/s\n", m->val_loss, m->val_acc,
		       m->samples_per_s);
	} else {
		printf("epoch %d/%d loss %.4f acc %.4f val_loss %.4f val_acc %.4f samples/s %.0f seconds "
		       "%.2f", m->epoch, r->cfg->epochs, m->loss, m->acc, m->val_loss, m->val_acc,
		       m->samples_per_s, m->seconds);
		if (m->has_consensus)
			printf(" consensus %.3g/%.3g", m->consensus_mean, m->consensus_max);
		printf("\n");
	}
	fflush(stdout);
}

/* Rank 0 writes the epoch's metrics line and, when due, a checkpoint;
 * returns 0 or why it could not (err says why). */
/* rank 0's metrics line for epoch e (err: what failed) */
static int32_t write_metrics_line(struct run *r, int e)
{
	int32_t wrc = 0;
	struct stat st;
	/* a fresh job's first line: the earlier lines go (a regular file's:
	 * a pipe or /dev/stdout has none to keep), and with them the last
	 * epoch that a new rank 0 read in them (elastic.c own_files) */
	if (r->mf && r->metrics_fresh) {
		if (fflush(r->mf) || fstat(fileno(r->mf), &st) || (S_ISREG(st.st_mode) && ftruncate(fileno(r->mf), 0))) {
			snprintf(r->err, r->errlen, "metrics: cannot empty %s: %s", r->cfg->metrics, strerror(errno));
			return HORA_ERR_CONFIG;
		}
		r->metrics_last = 0;
	}
	if (r->mf && e > r->metrics_last && (wrc = write_metrics(r->mf, &r->m)))
		snprintf(r->err, r->errlen, "metrics: cannot write %s: %s", r->cfg->metrics, strerror(-wrc));
	if (r->mf && !wrc && e > r->metrics_last)
		r->metrics_last = e;
	return wrc;
}

static bool checkpoint_due(const struct run *r, int e)
{
	const struct hora_train_config *cfg = r->cfg;
	return r->rank == 0 && cfg->checkpoint_dir[0] && cfg->checkpoint_every > 0 &&
	       (e % cfg->checkpoint_every == 0 || e == cfg->epochs);
}

/* rank 0's checkpoint after epoch e: on a thread of its own (*w) where
 * there are other ranks to keep answering, else here (its result) */
static int32_t start_checkpoint(struct run *r, int e, struct hora_ckpt_thread **w, double *tc0, double *tc1)
{
	const struct hora_train_config *cfg = r->cfg;
	struct hora_ckpt_meta cm = {.epoch = e, .workers = r->size, .step = r->step, .rng = r->rng,
				    .seed = cfg->seed, .nparams = r->tr.nparams, .batch = cfg->batch_size};
	snprintf(cm.model, sizeof(cm.model), "%s", r->tr.ops->name);
	snprintf(cm.optimizer, sizeof(cm.optimizer), "%s", optim_desc(&cfg->optim));
	const int delay_ms = hora_env_test_ckpt_delay_ms();
	char why[256] = "";
	if (r->several && (*w = hora_ckpt_thread_write(cfg->checkpoint_dir, &cm, r->tr.params, r->tr.optim,
							delay_ms, why, sizeof(why))))
		return 0;
	if (r->several)
		HORA_LOGW("%s: writing it without one", why);
	*tc0 = hora_clock_s();
	ckpt_test_delay(delay_ms);
	/* on failure the previous checkpoint is still there */
	const int32_t wrc = hora_ckpt_write(cfg->checkpoint_dir, &cm, r->tr.params, r->tr.optim, r->err, r->errlen);
	*tc1 = hora_clock_s();
	return wrc;
}

/* A round failed (a worker died) while the checkpoint is being written:
 * wait for it here, as a write without a thread would have been, so that
 * no later write (this process's, or a new rank 0's in the same
 * directory) meets it; up to stall_abort_s of its age, then it is left to
 * end by itself, with a warning. */
static void finish_after_failed_round(struct run *r, struct hora_ckpt_thread *w)
{
	const double stop = r->cfg->stall_abort_s;
	int32_t v;
	double t0, t1;
	char why[256];
	while (!hora_ckpt_thread_wait(w, CKPT_ROUND_MS, &v, why, sizeof(why), &t0, &t1))
		if (stop > 0 && hora_ckpt_thread_age(w) >= stop) {
			HORA_LOGW("checkpoint: still writing to %s after %.0f s (train.stall_abort_s %g): left "
				  "to end by itself", r->cfg->checkpoint_dir, hora_ckpt_thread_age(w), stop);
			hora_ckpt_thread_end(w, false);
			return;
		}
	hora_ckpt_thread_end(w, true);
}

/* Rank 0's metrics or checkpoint failed after epoch e, and every rank
 * knows it (end_epoch's rounds): every rank stops with rank 0's reason
 * (the file and the cause), and none re-forms (r->duty_failed: no worker
 * of an elastic job was lost, the job's own duty failed). The barrier
 * keeps rank 0 (whose exit would fail the others' calls) until every rank
 * has the reason; its own failure changes nothing. */
static void share_duty_error(struct run *r, int e)
{
	char why[512];
	r->duty_failed = true;
	if (!r->several)
		return;
	snprintf(why, sizeof(why), "%s", r->rank == 0 ? r->err : "");
	const int rc = hora_broadcast(r->c, why, sizeof(why) / 4, HORA_I32, 0);
	why[sizeof(why) - 1] = 0;
	if (r->rank != 0)
		snprintf(r->err, r->errlen, "rank 0 stopped the job after epoch %d: %s", e,
			 rc ? "it could not write its metrics or checkpoint (its log says why)" : why);
	if (!rc)
		hora_barrier(r->c);
}

/* rank 0's files: a failure there stops every rank, together. The
 * checkpoint (a large model, a network file system: it may take long) is
 * written on a thread while every rank waits in rounds of one broadcast
 * (rank 0: "still writing", or the result): no rank waits longer than a
 * round in one receive, which would fail at transport.io_timeout_ms. */
static int end_epoch(struct run *r, int e)
{
	struct hora_ckpt_thread *w = NULL;
	double tc0 = 0, tc1 = 0, warned = 0;
	int32_t wrc = write_metrics_line(r, e);
	if (!wrc && checkpoint_due(r, e))
		wrc = start_checkpoint(r, e, &w, &tc0, &tc1);
	int rc = 0;
	bool ended = !w;
	while (r->several) {
		int32_t v = w && !ended ? ckpt_round(r, w, "writing to", &warned, &tc0, &tc1) : wrc;
		ended = ended || v != CKPT_BUSY;
		if (w && ended)
			wrc = v;
		if ((rc = hora_broadcast(r->c, &v, 1, HORA_I32, 0))) {
			snprintf(r->err, r->errlen, "after epoch %d: %s", e, hora_comm_last_error(r->c));
			break;
		}
		if (v != CKPT_BUSY) {
			wrc = v;
			break;
		}
	}
	if (w && !ended && rc)
		finish_after_failed_round(r, w);
	else
		hora_ckpt_thread_end(w, wrc != HORA_ERR_STALL); /* given up on: it ends by itself */
	if (rc)
		return rc;
	r->metrics_fresh = false; /* a line was written (by this rank 0 or not): later ones append */
	if (r->tl && !wrc && tc1 > tc0)
		hora_timeline_span(r->tl, 0, "checkpoint", tc0, tc1, 0);
	if (wrc)
		share_duty_error(r, e);
	return wrc;
}

void hora_run_make_order(struct run *r)
{
	for (int64_t i = 0; i < r->train.n; i++)
		r->order[i] = i;
	r->rng = r->rng_epoch;
	hora_run_shuffle(r->order, r->train.n, &r->rng);
	r->order_of = r->epoch;
}

/* gossip: every consensus_every steps the consensus distance, logged by
 * rank 0 (the averaging itself is part of the step: train_step) */
static int consensus_step(struct run *r)
{
	const int every = r->cfg->gossip.consensus_every;
	if (every <= 0 || r->step % every)
		return 0;
	double mean, max;
	int rc = hora_gossip_consensus(r->gossip, r->tr.params, &mean, &max, r->err, r->errlen);
	if (rc)
		return rc;
	if (r->talk && !r->pg.bar)
		printf("step %lld consensus %.4g/%.4g\n", (long long)r->step, mean, max);
	if (r->tl && r->rank == 0)
		hora_timeline_counter(r->tl, "consensus", hora_clock_s(), mean);
	return 0;
}

/* The steps of epoch r->epoch from sample r->pos on (0, or where a
 * rollback left it); elastic: a commit every commit_steps steps. */
static int train_steps(struct run *r, struct hora_model_stats *st)
{
	struct hora_model_stats shown = {0};
	int rc;
	for (int64_t s = 0; r->pos < r->train.n; s++) {
		const int64_t gn = r->train.n - r->pos < r->global_bs ? r->train.n - r->pos : r->global_bs;
		if ((rc = train_step(r, r->pos, gn, st)))
			return rc;
		r->pos += gn;
		r->step++;
		r->t_step = r->elastic ? hora_clock_s() : 0;
		if (r->gossip && (rc = consensus_step(r)))
			return rc;
		if ((rc = bar_stats(r, s, st, &shown)) || (r->elastic && (rc = hora_elastic_step_done(r, st))))
			return rc;
		if (r->pg.bar && r->talk)
			bar_draw(&r->pg, r->elastic ? r->pos * r->pg.steps / r->train.n : s + 1, &shown, 0);
	}
	return 0;
}

/* epoch r->epoch: its shuffle (from the RNG state only), the steps,
 * validation, the report and rank 0's files */
static int run_epoch(struct run *r)
{
	const int e = r->epoch;
	struct hora_model_stats st = {0}, vs;
	if (r->order_of != e)
		hora_run_make_order(r);
	r->pg.epoch = e;
	r->pg.steps = r->steps_per_epoch;
	r->pg.t0 = r->pg.last_draw = hora_clock_s();
	if (r->pg.bar && r->talk)
		printf("Epoch %d/%d\n", e, r->cfg->epochs);
	const double t0 = hora_clock_s();
	/* after a rollback, the samples of the commit it went back to were
	 * trained before t0: in the epoch's sums, not in its samples/s */
	const int64_t n_before = r->elastic ? r->sums.n : 0;
	int rc = r->gasync ? hora_gasync_steps(r, r->gasync, &st) : train_steps(r, &st);
	if (rc)
		return rc;
	if (r->samples) /* before the epoch's sums: a commit after them counts these */
		fflush(r->samples);
	if (r->elastic && r->rank == 0) { /* the sums before the last commit, counted once */
		st.loss_sum += r->sums.loss_sum;
		st.correct += r->sums.correct;
		st.n += r->sums.n;
	}
	const double t_train = hora_clock_s() - t0;
	double cmean = NAN, cmax = NAN; /* gossip: x̄ is evaluated, checkpointed and, at the end, kept */
	if (r->gossip && (rc = hora_gossip_average_begin(r->gossip, r->tr.params, &cmean, &cmax, r->err,
							  r->errlen)))
		return rc;
	if (r->gossip && r->tl && r->rank == 0)
		hora_timeline_counter(r->tl, "consensus", hora_clock_s(), cmean);
	if ((rc = evaluate(r, &st, &vs)))
		return rc;
	r->m = (struct hora_epoch_metrics){
		.epoch = e,
		.loss = st.loss_sum / (double)st.n,
		.acc = (double)st.correct / (double)st.n,
		.val_loss = vs.n ? vs.loss_sum / (double)vs.n : NAN,
		.val_acc = vs.n ? (double)vs.correct / (double)vs.n : NAN,
		.samples_per_s = (double)(st.n - n_before) / t_train,
		.seconds = hora_clock_s() - t0,
		.workers = r->size,
		.view = r->c ? hora_comm_view(r->c) : 0,
		.consensus_mean = cmean,
		.consensus_max = cmax,
		.has_consensus = r->gossip != NULL,
	};
	if (r->talk)
		print_epoch(r, &st);
	if ((rc = end_epoch(r, e)))
		return rc;
	if (r->gossip && e < r->cfg->epochs)
		hora_gossip_average_end(r->gossip, r->tr.params);
	r->epoch++;
	r->pos = 0;
	r->rng_epoch = r->rng;
	if (r->elastic)
		hora_elastic_epoch_done(r);
	return 0;
}

/* the final parameters and the averaging times */
static int fill_result(const struct run *r, struct hora_train_result *res)
{
	res->last = r->m;
	res->steps = r->step;
	res->samples = r->samples_trained;
	res->commits = r->commits;
	res->commit_s = r->commit_s;
	res->nparams = r->tr.nparams;
	if (r->dopt) {
		struct hora_dist_stats ds;
		hora_dist_optim_stats(r->dopt, &ds);
		res->allreduce_s = ds.allreduce_s;
		res->allreduce_hidden_s = ds.hidden_s;
	}
	if (!(res->params = malloc(r->tr.nparams * sizeof(float)))) {
		snprintf(r->err, r->errlen, "out of memory");
		return -ENOMEM;
	}
	memcpy(res->params, r->tr.params, r->tr.nparams * sizeof(float));
	return 0;
}

/* everything before the first epoch: data, trainer, agreement, stall
 * inspector, timeline, resume, schedule */
static int prepare(struct run *r)
{
	const struct hora_train_config *cfg = r->cfg;
	int rc;
	if ((rc = load_data(r)) || (rc = set_up(r)))
		return rc;
	int bar = cfg->progress < 0 ? isatty(STDOUT_FILENO) : cfg->progress;
	r->first_epoch = 1;
	r->rng = cfg->seed ^ 0x5eed5eed5eedULL; /* the same shuffle on every rank */
	r->n0 = r->size;
	const bool joiner = r->c && hora_comm_joined(r->c);
	/* elastic: every worker of a new communicator, the first one's too,
	 * runs the same sync (elastic.c), which checks the job, shares rank 0's
	 * state and starts the timeline */
	if (r->several && !r->elastic && (rc = agree(r, &bar)))
		return rc;
	/* elastic: the sync compares the job after resume()'s broadcasts; a
	 * worker resuming beside one that does not (train.resume on some
	 * only) compares it first, with the same calls as the sync's, so that
	 * the job stops at once, named (the rank that differs names
	 * train.resume, rank 0 names that rank); after the readiness rounds
	 * that begin the sync (comm_keep.c: once per formation) */
	if (r->several && r->elastic && cfg->resume && !joiner) {
		if ((rc = hora_comm_await_ready(r->c)))
			return snprintf(r->err, r->errlen, "the readiness rounds of view %llu: %s",
					(unsigned long long)hora_comm_view(r->c), hora_comm_last_error(r->c)), rc;
		if ((rc = hora_run_agree_job(r, &bar)))
			return rc;
	}
	if (!r->elastic)
		hora_run_fresh_metrics(r);
	hora_comm_set_stall(r->c, cfg->stall_warning_s, cfg->stall_abort_s);
	if (cfg->timeline[0] && r->c && !r->elastic && (rc = start_timeline(r)))
		return rc;
	if (cfg->resume && !joiner &&
	    (rc = resume(r)))
		return rc;
	r->epoch = r->first_epoch;
	r->rng_epoch = r->rng;
	r->bar = bar;
	hora_run_schedule(r);
	/* rank 0's bar choice on every rank: it decides the bar's collectives */
	r->pg = (struct progress){.bar = bar, .epochs = cfg->epochs, .steps = r->steps_per_epoch};
	return r->elastic ? hora_elastic_start(r) : 0;
}

void hora_run_schedule(struct run *r)
{
	const bool global = r->elastic && r->cfg->elastic.batch == HORA_ELASTIC_GLOBAL;
	r->global_bs = (int64_t)r->cfg->batch_size * (global ? r->n0 : r->size);
	r->steps_per_epoch = (r->train.n + r->global_bs - 1) / r->global_bs;
	r->total = r->steps_per_epoch * r->cfg->epochs;
}

/* The trainer's own gradient buffer again, the region freed. */
static void grads_region_free(struct run *r)
{
	if (r->tr.grads && r->tr.grads != r->grads_plain)
		hora_comm_mem_free(r->c, r->tr.grads);
	r->tr.grads = r->grads_plain;
}

/* The gradients in memory the ranks of a host average where it lies
 * (hora_comm_mem_alloc: the stage's single-copy path, no copy in or out),
 * a fresh region for every communicator: a rank dropped in the middle of a
 * call may still write into the old one through its mapping. */
static void grads_region(struct run *r)
{
	grads_region_free(r);
	float *g = r->several && r->cfg->communication && r->cfg->fusion.single_copy && !r->cfg->gossip.on
			   ? hora_comm_mem_alloc(r->c, r->tr.nparams * sizeof(float))
			   : NULL;
	if (g)
		r->tr.grads = g; /* zeroed, as the trainer's were */
}

int hora_run_dist_optim(struct run *r)
{
	hora_dist_optim_destroy(r->dopt); /* waits for its averages: before the gradients move */
	r->dopt = NULL;
	grads_region(r);
	hora_balance_destroy(r->bal); /* even again over this communicator's ranks */
	r->bal = NULL;
	if (r->cfg->balance && r->cfg->gossip.on) {
		snprintf(r->err, r->errlen, "train.balance splits the batch of a synchronous step: it needs "
					    "train.sync: allreduce, not gossip");
		return HORA_ERR_CONFIG;
	}
	if (r->several && r->cfg->balance && hora_balance_create(r->size, r->tr.nparams * sizeof(float), &r->bal)) {
		snprintf(r->err, r->errlen, "out of memory");
		return -ENOMEM;
	}
	hora_gossip_destroy(r->gossip);
	r->gossip = NULL;
	hora_gasync_destroy(r->gasync);
	r->gasync = NULL;
	int rc = 0;
	if (r->several && r->cfg->communication && r->cfg->gossip.on) {
		rc = hora_gossip_create(r->c, &r->cfg->gossip, r->cfg->seed, r->tr.nparams, &r->gossip, r->err,
					r->errlen);
		if (!rc && r->cfg->gossip.mode == HORA_GOSSIP_ASYNC)
			rc = hora_gasync_create(r, &r->gasync);
		return rc;
	}
	if (r->several && r->cfg->communication &&
	    (rc = hora_dist_optim_create(r->c, r->tr.optim, r->tr.nparams, &r->cfg->fusion, &r->dopt)))
		snprintf(r->err, r->errlen, "distributed optimizer: %s", hora_strerror(rc));
	if (r->dopt && r->tl)
		hora_dist_optim_set_timeline(r->dopt, r->tl);
	return rc;
}

int hora_train_run_comm(struct hora_comm *c, const struct hora_train_config *cfg,
			struct hora_train_result *res, char *err, size_t errlen)
{
	if (res)
		memset(res, 0, sizeof(*res));
	struct run *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*r = (struct run){.c = c, .cfg = cfg, .err = err, .errlen = errlen, .rank = hora_rank(c),
			  .size = hora_size(c)};
	r->several = c && r->size > 1;
	r->talk = r->rank == 0 && !cfg->quiet;
	r->elastic = hora_comm_is_elastic(c);
	int rc = prepare(r);
	if (!rc && r->talk)
		print_header(r);
	const double t_train = hora_clock_s();
	for (bool done = false; !rc && !done;) {
		while (!rc && r->epoch <= cfg->epochs) {
			rc = run_epoch(r);
			if (rc && r->elastic)
				rc = hora_elastic_recover(r, rc);
		}
		/* elastic: the end is a barrier (every rank trained its last
		 * step), recovered like any step; then the end's collectives, then
		 * a second one (elastic.c: no rank leaves while one is in the first) */
		done = !r->elastic || rc || !(rc = hora_elastic_finish(r));
		if (!done)
			rc = hora_elastic_recover(r, rc);
	}
	if (!rc && r->tl && (rc = hora_timeline_write(r->tl, c, cfg->timeline, err, errlen)) && r->elastic) {
		HORA_LOGW("%s (training had completed)", err); /* a worker died meanwhile */
		rc = 0;
	}
	if (!rc && r->elastic)
		hora_elastic_release(r);
	if (!rc && res && !(rc = fill_result(r, res)))
		res->train_s = hora_clock_s() - t_train;
	if (r->mf)
		fclose(r->mf);
	hora_elastic_free(r);
	free(r->order);
	hora_dist_optim_destroy(r->dopt);
	hora_balance_destroy(r->bal);
	if (r->gasync && !rc && !cfg->quiet)
		hora_gasync_report(r->gasync, hora_clock_s() - t_train, stdout);
	hora_gasync_destroy(r->gasync);
	hora_gossip_destroy(r->gossip);
	hora_timeline_destroy(r->tl);
	grads_region_free(r);
	hora_trainer_deinit(&r->tr);
	hora_dataset_deinit(&r->train);
	hora_dataset_deinit(&r->test);
	free(r);
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
