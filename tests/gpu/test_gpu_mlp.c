/* test_gpu_mlp.c - the CUDA MLP (gpu/mlp.cu through gpu/mlp_model.c)
 * against the CPU MLP (model/mlp.c) on the same batch and parameters:
 *   - gradients of every layer: max |cuda - cpu| / max |cpu| < 1e-4, loss
 *     within 1e-4, correct count the same or one apart (float32);
 *   - the ready callback: once per layer, last layer first, ranges right
 *     below each other and covering every parameter;
 *   - determinism: two runs give the same bits;
 *   - evaluate agrees, a batch over max_batch is refused;
 *   - a data set resident on the device (hora_gpu_mlp_model_step_ds, a
 *     CUDA graph for batches <= 256): the same gradients as the CPU MLP on
 *     the host-gathered batch, the same bits twice, the host-batch path
 *     within 1e-6, an index out of the set refused;
 *   - 20 SGD steps on both: parameters within 1e-3 (relative, max norm).
 * A plain program registered in CTest with SKIP_RETURN_CODE 77: where there
 * is no CUDA (not compiled, libhora_gpu.so not loadable, no device or
 * driver) it prints why and exits 77, which CTest shows as skipped.
 */
#include "gpu/hora_gpu.h"
#include "hora_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77
#define TOL 1e-4

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);                                \
			printf(__VA_ARGS__);                                                       \
			printf("\n");                                                              \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

struct rec {
	int n;
	int layer[16];
	size_t off[16], count[16];
};

static void record(void *arg, int layer, size_t off, size_t count)
{
	struct rec *r = arg;
	if (r->n < 16) {
		r->layer[r->n] = layer;
		r->off[r->n] = off;
		r->count[r->n] = count;
	}
	r->n++;
}

static uint64_t rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rel_diff(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]);
		d = e > d ? e : d;
		m = fabs(b[i]) > m ? fabs(b[i]) : m;
	}
	return m > 0 ? d / m : d;
}

/* correct counts: the same, or one apart (a near tie between two logits may
 * fall either way when the GEMMs sum in another order) */
static int near(int64_t a, int64_t b)
{
	return a - b <= 1 && b - a <= 1;
}

struct pair {
	const struct hora_model_ops *cpu, *gpu;
	void *c, *g;
	struct hora_model_layer layers[HORA_MODEL_MAX_HIDDEN + 1];
	int nl;
	size_t np;
};

/* one configuration; returns SKIP when the CUDA model cannot be made here */
static int check_config(const struct hora_model_config *mc, int n, const char *name)
{
	char err[512] = "";
	struct pair p = {hora_model_find("mnist_mlp"), hora_gpu_mlp_model(), NULL, NULL, {{"", 0, 0}}, 0, 0};
	int rc = p.gpu->create(mc, &p.g, err, sizeof(err));
	if (rc == -ENODEV || rc == -ENOTSUP || rc == -ENOENT) {
		printf("SKIPPED: %s\n", err);
		return SKIP;
	}
	CHECK(rc == 0, "%s: cuda create: %d %s", name, rc, err);
	if (rc)
		return 1;
	rc = p.cpu->create(mc, &p.c, err, sizeof(err));
	CHECK(rc == 0, "%s: cpu create: %s", name, err);
	p.nl = p.cpu->layout(p.c, p.layers, HORA_MODEL_MAX_HIDDEN + 1);
	CHECK(p.gpu->layout(p.g, NULL, 0) == p.nl, "%s: layouts differ", name);
	p.np = p.layers[p.nl - 1].offset + p.layers[p.nl - 1].count;

	float *params = malloc(p.np * sizeof(float)), *params2 = malloc(p.np * sizeof(float));
	float *gc = malloc(p.np * sizeof(float)), *gg = malloc(p.np * sizeof(float));
	float *gg2 = malloc(p.np * sizeof(float));
	float *x = malloc((size_t)n * mc->input_dim * sizeof(float));
	uint8_t *y = malloc((size_t)n);
	uint64_t s = 1234;
	for (size_t i = 0; i < (size_t)n * mc->input_dim; i++)
		x[i] = (float)((rng(&s) >> 40) * 0x1.0p-24);
	for (int i = 0; i < n; i++)
		y[i] = (uint8_t)(rng(&s) % (uint64_t)mc->num_classes);
	p.cpu->init_params(p.c, params, 42);
	p.gpu->init_params(p.g, params2, 42);
	CHECK(!memcmp(params, params2, p.np * sizeof(float)), "%s: init_params differ", name);

	struct hora_batch b = {x, y, n};
	struct hora_model_stats sc = {0}, sg = {0}, sg2 = {0};
	struct rec r = {0};
	memset(gg, 0xff, p.np * sizeof(float)); /* NaN: every float must be written */
	CHECK(p.cpu->forward_backward(p.c, params, gc, &b, &sc, NULL, NULL) == 0, "cpu step");
	rc = p.gpu->forward_backward(p.g, params, gg, &b, &sg, record, &r);
	CHECK(rc == 0, "%s: cuda step: %d %s", name, rc, hora_gpu_mlp_model_error(p.g));
	for (int l = 0; l < p.nl; l++) {
		double d = rel_diff(gg + p.layers[l].offset, gc + p.layers[l].offset,
				    p.layers[l].count);
		printf("%s: layer %d (%s, %zu floats): max|cuda-cpu|/max|cpu| = %.3g (< %g)\n", name, l,
		       p.layers[l].name, p.layers[l].count, d, TOL);
		CHECK(d < TOL, "%s: layer %d gradients differ by %g", name, l, d);
	}
	double dl = fabs(sg.loss_sum - sc.loss_sum) / fabs(sc.loss_sum);
	printf("%s: loss cuda %.9g cpu %.9g (rel %.3g), correct %lld / %lld\n", name, sg.loss_sum,
	       sc.loss_sum, dl, (long long)sg.correct, (long long)sc.correct);
	CHECK(dl < TOL && near(sg.correct, sc.correct) && sg.n == n, "%s: loss/correct/n differ",
	      name);

	/* ready: each layer once, from the last, contiguous, covering all */
	CHECK(r.n == p.nl, "%s: ready called %d times for %d layers", name, r.n, p.nl);
	size_t top = p.np;
	for (int i = 0; i < r.n && i < 16; i++) {
		CHECK(r.layer[i] == p.nl - 1 - i && r.off[i] + r.count[i] == top,
		      "%s: ready %d: layer %d [%zu, +%zu) below %zu", name, i, r.layer[i], r.off[i],
		      r.count[i], top);
		top = r.off[i];
	}
	CHECK(top == 0, "%s: ready did not cover down to 0 (%zu)", name, top);

	/* same inputs, same bits */
	CHECK(p.gpu->forward_backward(p.g, params, gg2, &b, &sg2, NULL, NULL) == 0, "second step");
	CHECK(!memcmp(gg, gg2, p.np * sizeof(float)) && sg.loss_sum == sg2.loss_sum,
	      "%s: two runs of the same step differ", name);

	struct hora_model_stats ec = {0}, eg = {0};
	CHECK(p.cpu->evaluate(p.c, params, &b, &ec) == 0 && p.gpu->evaluate(p.g, params, &b, &eg) == 0,
	      "evaluate");
	CHECK(fabs(eg.loss_sum - ec.loss_sum) / fabs(ec.loss_sum) < TOL && near(eg.correct, ec.correct),
	      "%s: evaluate differs: %g vs %g", name, eg.loss_sum, ec.loss_sum);
	struct hora_batch big = {x, y, mc->max_batch + 1};
	CHECK(p.gpu->evaluate(p.g, params, &big, &eg) == -EINVAL, "%s: batch over max accepted", name);

	/* the data set on the device, gathered there */
	{
		int64_t nds = 3 * (int64_t)n + 7;
		struct hora_dataset ds = {malloc((size_t)nds * mc->input_dim), malloc((size_t)nds), nds,
					  1, mc->input_dim, mc->num_classes};
		for (size_t i = 0; i < (size_t)nds * mc->input_dim; i++)
			ds.images[i] = (uint8_t)(rng(&s) & 0xff);
		for (int64_t i = 0; i < nds; i++)
			ds.labels[i] = (uint8_t)(rng(&s) % (uint64_t)mc->num_classes);
		int64_t *idx = malloc((size_t)n * sizeof(*idx));
		for (int i = 0; i < n; i++)
			idx[i] = (int64_t)((i * 7919 + 3) % nds);
		hora_dataset_gather(&ds, idx, n, x, y);
		struct hora_model_stats c1 = {0}, g1 = {0};
		p.cpu->forward_backward(p.c, params, gc, &b, &c1, NULL, NULL);
		rc = hora_gpu_mlp_model_step_ds(p.g, &ds, idx, n, params, gg, &g1, NULL, NULL);
		CHECK(rc == 0, "%s: step_ds: %d %s", name, rc, hora_gpu_mlp_model_error(p.g));
		double d = rel_diff(gg, gc, p.np);
		printf("%s: data set on the device: max|cuda-cpu|/max|cpu| = %.3g (< %g)\n", name, d, TOL);
		CHECK(d < TOL && near(g1.correct, c1.correct), "%s: step_ds differs: %g", name, d);
		/* again (a batch <= 256 replays the CUDA graph captured above), and
		 * the host-batch path on the same gathered batch */
		struct hora_model_stats g2 = {0}, g3 = {0};
		CHECK(hora_gpu_mlp_model_step_ds(p.g, &ds, idx, n, params, gg2, &g2, NULL, NULL) == 0,
		      "%s: second step_ds", name);
		CHECK(!memcmp(gg, gg2, p.np * sizeof(float)) && g1.loss_sum == g2.loss_sum,
		      "%s: two resident-data steps differ", name);
		CHECK(p.gpu->forward_backward(p.g, params, gg2, &b, &g3, NULL, NULL) == 0, "host step");
		double dh = rel_diff(gg, gg2, p.np);
		printf("%s: resident-data step vs host-batch step: %s (max rel %.3g)\n", name,
		       memcmp(gg, gg2, p.np * sizeof(float)) ? "differ" : "bitwise equal", dh);
		CHECK(dh < 1e-6, "%s: resident-data and host-batch steps differ by %g", name, dh);
		idx[n - 1] = nds;
		CHECK(hora_gpu_mlp_model_step_ds(p.g, &ds, idx, n, params, NULL, &g1, NULL, NULL) ==
			      -EINVAL, "%s: index %lld past the set accepted", name, (long long)nds);
		free(idx);
		hora_dataset_deinit(&ds);
	}

	/* 20 SGD steps on each, from the same start */
	memcpy(params2, params, p.np * sizeof(float));
	for (int step = 0; step < 20; step++) {
		struct hora_model_stats t = {0};
		p.cpu->forward_backward(p.c, params, gc, &b, &t, NULL, NULL);
		p.gpu->forward_backward(p.g, params2, gg, &b, &t, NULL, NULL);
		for (size_t i = 0; i < p.np; i++) {
			params[i] -= 0.1f * gc[i];
			params2[i] -= 0.1f * gg[i];
		}
	}
	double dp = rel_diff(params2, params, p.np);
	printf("%s: after 20 SGD steps: max|cuda-cpu|/max|cpu| of the parameters = %.3g (< 1e-3)\n",
	       name, dp);
	CHECK(dp < 1e-3, "%s: parameters drifted apart: %g", name, dp);

	free(params);
	free(params2);
	free(gc);
	free(gg);
	free(gg2);
	free(x);
	free(y);
	p.cpu->destroy(p.c);
	p.gpu->destroy(p.g);
	return 0;
}

int main(void)
{
	char why[512] = "";
	int n = hora_gpu_device_count(why, sizeof(why));
	if (n < 1) {
		printf("SKIPPED: no CUDA device to test the CUDA MLP on: %s\n", why);
		return SKIP;
	}
	struct hora_model_config mnist = {784, 10, 1, {128}, 1024};
	struct hora_model_config deep = {784, 10, 3, {256, 64, 32}, 300};
	int rc = check_config(&mnist, 256, "784-128-10 batch 256");
	if (rc == SKIP)
		return SKIP;
	check_config(&mnist, 32, "784-128-10 batch 32");
	check_config(&mnist, 1024, "784-128-10 batch 1024");
	check_config(&deep, 300, "784-256-64-32-10 batch 300");
	check_config(&deep, 1, "784-256-64-32-10 batch 1");
	printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
	return failures ? 1 : 0;
}
