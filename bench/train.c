/* train.c - `hora bench train`: how close a training step is to its GEMMs.
 *
 * Runs real training steps (gather + forward/backward + the next rows'
 * prefetch + optimizer) through the same hora_trainer the training loop uses and, in the same run,
 * interleaved rep by rep, the exact sequence of sgemm calls of one step
 * (recorded by the model's GEMM trace) alone on buffers of the same shapes.
 * Reports samples/s, the step and GEMM medians and step/gemm: everything
 * above 1.0 is overhead outside GEMM. Also the peak RSS against the decoded
 * dataset size (train + test bytes).
 *
 * --device cuda: the steps run the CUDA MLP (train.device: cuda, params and
 * the optimizer on the host as in `hora train`), and the GEMMs alone are the
 * same cuBLAS calls (the model's mlp_gemms) timed with CUDA events on device
 * buffers of their shapes (gpu/hora_gpu.h hora_gpu_time_gemms).
 */
#include "bench.h"
#include "core/trainer.h"
#include "gpu/hora_gpu.h"
#include "model/nn.h"
#include "report.h"

#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* step s of the rotation, as the training loop runs it (core/train.c): the
 * next step's rows asked for between forward/backward and the update */
static void train_step(struct hora_trainer *tr, const struct hora_dataset *ds, const int64_t *idx, int s,
		       int steps, int bs, struct hora_model_stats *st)
{
	if (hora_trainer_forward_backward(tr, ds, idx + (int64_t)s * bs, bs, st, NULL, NULL))
		return; /* the first step, untimed, already ran and said why */
	hora_trainer_prefetch(tr, ds, idx + (int64_t)((s + 1) % steps) * bs, bs);
	hora_optim_step(tr->optim, tr->params, tr->grads, 1e-3);
}

struct replay {
	struct hora_gemm_trace trace;
	float *a[HORA_GEMM_TRACE_MAX], *b[HORA_GEMM_TRACE_MAX], *c[HORA_GEMM_TRACE_MAX];
};

static float *rand_buf(size_t n, uint64_t *s)
{
	float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
	if (!p) {
		fprintf(stderr, "hora bench train: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((hora_nn_rng_next(s) >> 40) * 0x1.0p-24) - 0.5f;
	return p;
}

static void replay_init(struct replay *r)
{
	uint64_t s = 7;
	for (int i = 0; i < r->trace.n; i++) {
		const struct hora_gemm_call *g = &r->trace.calls[i];
		/* row-major: A is (m,k) or (k,m) if transposed; lda is its row stride */
		size_t arows = g->trans_a ? (size_t)g->k : (size_t)g->m;
		size_t brows = g->trans_b ? (size_t)g->n : (size_t)g->k;
		r->a[i] = rand_buf(arows * g->lda, &s);
		r->b[i] = rand_buf(brows * g->ldb, &s);
		r->c[i] = rand_buf((size_t)g->m * g->ldc, &s);
	}
}

static void replay_free(struct replay *r)
{
	for (int i = 0; i < HORA_GEMM_TRACE_MAX; i++) {
		free(r->a[i]);
		free(r->b[i]);
		free(r->c[i]);
	}
}

static void replay_run(const struct replay *r)
{
	for (int i = 0; i < r->trace.n; i++) {
		const struct hora_gemm_call *g = &r->trace.calls[i];
		cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
			    g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, r->a[i],
			    g->lda, r->b[i], g->ldb, g->beta, r->c[i], g->ldc);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora bench train [--model NAME|PATH.so] [--hidden 128] [--batch-size N]\n"
		   "       [--data DIR] [--steps N] [--reps R] [--device cpu|cuda] [--json FILE]\n"
		   "  Interleaves R reps of N training steps with R reps of the same step's\n"
		   "  GEMMs alone; reports medians per step and step/gemm.\n");
}

int hora_bench_train(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, 0, 'm'}, {"hidden", required_argument, 0, 'H'},
		{"batch-size", required_argument, 0, 'b'}, {"data", required_argument, 0, 'd'},
		{"steps", required_argument, 0, 'n'}, {"reps", required_argument, 0, 'r'},
		{"json", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
		{"device", required_argument, 0, 'D'},
		{0, 0, 0, 0},
	};
	struct hora_train_config cfg;
	hora_train_config_defaults(&cfg);
	int steps = 0, reps = 7, c;
	const char *json = NULL;
	char err[1024];
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const char *key = NULL;
		switch (c) {
		case 'm': key = "train.model"; break;
		case 'H': key = "train.hidden"; break;
		case 'b': key = "train.batch_size"; break;
		case 'd': key = "train.data"; break;
		case 'D': key = "train.device"; break;
		case 'n': steps = atoi(optarg); continue;
		case 'r': reps = atoi(optarg); continue;
		case 'j': json = optarg; continue;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (hora_config_set(&cfg, key, optarg, err, sizeof(err))) {
			fprintf(stderr, "hora bench train: %s\n", err);
			return 2;
		}
	}
	if (reps < 1 || reps > 1000 || steps < 0) {
		fprintf(stderr, "hora bench train: --reps must be 1..1000 and --steps >= 0\n");
		return 2;
	}
	struct hora_dataset train, test;
	if (hora_dataset_load_dir(&train, cfg.data, "train", 256, err, sizeof(err)) ||
	    hora_dataset_load_dir(&test, cfg.data, "test", 256, err, sizeof(err))) {
		fprintf(stderr, "hora bench train: %s\n", err);
		return 2;
	}
	const size_t decoded = (size_t)(train.n + test.n) * (train.rows * train.cols + 1);
	struct hora_trainer tr;
	int rc = hora_trainer_init(&tr, &cfg, train.rows * train.cols,
				   train.num_classes > 2 ? train.num_classes : 2, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "hora bench train: %s\n", err);
		return 2;
	}
	const int bs = cfg.batch_size;
	if (steps == 0) /* about 0.3 s of GEMM per rep */
		steps = bs >= 256 ? 60 : 400;
	int64_t nidx = (int64_t)steps * bs;
	int64_t *idx = malloc((size_t)nidx * sizeof(*idx));
	for (int64_t i = 0; i < nidx; i++)
		idx[i] = (i * 7919) % train.n; /* spread over the set, like a shuffle */
	struct hora_model_stats st = {0};

	struct replay rp;
	memset(&rp, 0, sizeof(rp));
	const int cuda = cfg.device == HORA_DEVICE_CUDA;
	struct hora_gpu_gemm gcalls[HORA_GEMM_TRACE_MAX];
	if (cuda) {
		rp.trace.n = hora_gpu_mlp_model_gemms(tr.model, bs, gcalls, HORA_GEMM_TRACE_MAX);
		if (rp.trace.n < 1 || rp.trace.n > HORA_GEMM_TRACE_MAX) {
			fprintf(stderr, "hora bench train: %d GEMMs per step\n", rp.trace.n);
			return 2;
		}
	} else if (hora_model_builtin_trace(tr.ops, tr.model, &rp.trace)) {
		fprintf(stderr, "hora bench train: model %s is not a built-in: cannot trace its GEMMs\n",
			tr.ops->name);
		return 2;
	}
	rc = hora_trainer_step(&tr, &train, idx, bs, 1e-3, &st);
	if (rc) {
		fprintf(stderr, "hora bench train: step: %s%s%s\n", hora_strerror(rc), cuda ? ": " : "",
			cuda ? hora_gpu_mlp_model_error(tr.model) : "");
		return 1;
	}
	if (!cuda) {
		hora_model_builtin_trace(tr.ops, tr.model, NULL);
		replay_init(&rp);
	}

	for (int w = 0; w < steps / 4; w++) { /* warm-up both paths */
		train_step(&tr, &train, idx, w % steps, steps, bs, &st);
		if (!cuda)
			replay_run(&rp);
	}
	double *ts = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
	for (int r = 0; r < reps; r++) {
		double t0 = hora_bench_now();
		for (int s = 0; s < steps; s++)
			train_step(&tr, &train, idx, s, steps, bs, &st);
		double t1 = hora_bench_now();
		ts[r] = (t1 - t0) / steps;
		if (cuda) {
			rc = hora_gpu_time_gemms(0, gcalls, rp.trace.n, steps, &tg[r], err, sizeof(err));
			if (rc) {
				fprintf(stderr, "hora bench train: cuBLAS GEMMs alone: %s\n", err);
				return 1;
			}
			continue;
		}
		for (int s = 0; s < steps; s++)
			replay_run(&rp);
		double t2 = hora_bench_now();
		tg[r] = (t2 - t1) / steps;
	}
	double ratios[1000];
	for (int r = 0; r < reps; r++)
		ratios[r] = ts[r] / tg[r];
	double step_s = hora_bench_median(ts, reps), gemm_s = hora_bench_median(tg, reps);
	double ratio = hora_bench_median(ratios, reps);
	long rss = hora_bench_peak_rss_bytes();
	double rss_limit = 2.0 * (double)decoded + 64.0 * (1 << 20);

	const char *dev = cuda ? "cuda" : "cpu";
	printf("# hora bench train: model %s (%zu params) on %s, batch %d, %d steps x %d reps, "
	       "%d gemm calls/step, data %s (%lld+%lld samples)\n",
	       tr.ops->name, tr.nparams, dev, bs, steps, reps, rp.trace.n, cfg.data,
	       (long long)train.n, (long long)test.n);
	printf("%10s %12s %12s %10s %14s %12s %12s\n", "batch", "step_us", "gemm_us", "step/gemm",
	       "samples_per_s", "peak_rss_MiB", "limit_MiB");
	printf("%10d %12.1f %12.1f %10.3f %14.0f %12.1f %12.1f\n", bs, step_s * 1e6, gemm_s * 1e6,
	       ratio, bs / step_s, rss / 1048576.0, rss_limit / 1048576.0);
	if (json) {
		FILE *f = hora_bench_json_open(json);
		if (!f)
			return 1;
		fprintf(f,
			"{\"bench\":\"train\",\"device\":\"%s\",\"model\":\"%s\",\"batch_size\":%d,\"steps\":%d,"
			"\"reps\":%d,\"step_us\":%.2f,\"gemm_us\":%.2f,\"ratio\":%.4f,"
			"\"samples_per_s\":%.1f,\"peak_rss_bytes\":%ld,\"decoded_bytes\":%zu,"
			"\"rss_limit_bytes\":%.0f}\n",
			dev, tr.ops->name, bs, steps, reps, step_s * 1e6, gemm_s * 1e6, ratio, bs / step_s,
			rss, decoded, rss_limit);
		hora_bench_json_close(f);
	}
	free(ts);
	free(tg);
	free(idx);
	replay_free(&rp); /* zeroed where replay_init filled nothing (--device cuda) */
	hora_trainer_deinit(&tr);
	hora_dataset_deinit(&train);
	hora_dataset_deinit(&test);
	return 0;
}
