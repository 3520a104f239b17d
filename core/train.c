/* train.c - the single-worker training loop: epochs over a seeded shuffle,
 * evaluation, a Keras-like progress bar on a terminal (one line per epoch
 * otherwise), and JSON-lines metrics.
 *
 * Determinism: the shuffle and the initial parameters come from cfg->seed
 * only, BLAS runs one thread by default, and reductions have a fixed order,
 * so the same seed gives bitwise identical parameters.
 *
 * Not here: data sharding across workers and gradient averaging (the
 * distributed optimizer issue adds them around hora_trainer_step).
 */
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
		"\"samples_per_s\":%.1f,\"seconds\":%.4f}\n",
		m->epoch, m->loss, m->acc, m->val_loss, m->val_acc, m->samples_per_s, m->seconds);
	return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

int hora_train_run(const struct hora_train_config *cfg, struct hora_train_result *res, char *err,
		   size_t errlen)
{
	struct hora_dataset train = {0}, test = {0};
	struct hora_trainer tr = {0};
	int64_t *order = NULL;
	FILE *mf = NULL;
	char msg[HORA_PATH_MAX + 512];
	int rc;

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
	if (cfg->metrics[0] && !(mf = fopen(cfg->metrics, "w"))) {
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

	const int bs = cfg->batch_size;
	const int64_t steps_per_epoch = (train.n + bs - 1) / bs;
	const int64_t total = steps_per_epoch * cfg->epochs;
	uint64_t rng = cfg->seed ^ 0x5eed5eed5eedULL;
	struct progress pg = {.epochs = cfg->epochs, .steps = steps_per_epoch};
	pg.bar = cfg->progress < 0 ? isatty(STDOUT_FILENO) : cfg->progress;
	if (!cfg->quiet)
		printf("hora %s: model %s (%zu parameters, %d layers), %lld train / %lld test "
		       "samples of %dx%d, batch %d, %lld steps/epoch\n",
		       hora_version(), tr.ops->name, tr.nparams, tr.nlayers, (long long)train.n,
		       (long long)test.n, train.rows, train.cols, bs, (long long)steps_per_epoch);
	int64_t step = 0;
	struct hora_epoch_metrics m = {0};
	for (int e = 1; e <= cfg->epochs; e++) {
		struct hora_model_stats st = {0}, vs;
		shuffle(order, train.n, &rng);
		pg.epoch = e;
		pg.t0 = pg.last_draw = now_s();
		if (pg.bar && !cfg->quiet)
			printf("Epoch %d/%d\n", e, cfg->epochs);
		double t0 = now_s();
		for (int64_t s = 0; s < steps_per_epoch; s++, step++) {
			int64_t lo = s * bs;
			int n = (int)(train.n - lo < bs ? train.n - lo : bs);
			double lr = hora_lr_at(&cfg->optim, step, steps_per_epoch, total, 1);
			rc = hora_trainer_step(&tr, &train, order + lo, n, lr, &st);
			if (rc) {
				snprintf(err, errlen, "step %lld: model %s: %s", (long long)step,
					 tr.ops->name, hora_strerror(rc));
				goto out;
			}
			if (!isfinite(st.loss_sum)) {
				snprintf(err, errlen, "epoch %d step %lld: loss is not finite; lower "
					 "the learning rate (now %g)", e, (long long)step, lr);
				rc = HORA_ERR_DIVERGED;
				goto out;
			}
			if (pg.bar && !cfg->quiet)
				bar_draw(&pg, s + 1, &st, 0);
		}
		double t_train = now_s() - t0;
		rc = hora_trainer_evaluate(&tr, &test, &vs);
		if (rc) {
			snprintf(err, errlen, "evaluate: model %s: %s", tr.ops->name, hora_strerror(rc));
			goto out;
		}
		m = (struct hora_epoch_metrics){
			.epoch = e,
			.loss = st.loss_sum / (double)st.n,
			.acc = (double)st.correct / (double)st.n,
			.val_loss = vs.n ? vs.loss_sum / (double)vs.n : NAN,
			.val_acc = vs.n ? (double)vs.correct / (double)vs.n : NAN,
			.samples_per_s = (double)st.n / t_train,
			.seconds = now_s() - t0,
		};
		if (!cfg->quiet) {
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
		if (mf && write_metrics(mf, &m)) {
			snprintf(err, errlen, "metrics: cannot write %s: %s", cfg->metrics, strerror(EIO));
			rc = -EIO;
			goto out;
		}
	}
	if (res) {
		res->last = m;
		res->steps = step;
		res->nparams = tr.nparams;
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
	hora_trainer_deinit(&tr);
	hora_dataset_deinit(&train);
	hora_dataset_deinit(&test);
	return rc;
}

void hora_train_result_deinit(struct hora_train_result *res)
{
	if (!res)
		return;
	free(res->params);
	memset(res, 0, sizeof(*res));
}
