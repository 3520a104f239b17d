/* test_models.c - the built-in models against a float64 reference.
 *
 * Gradient check: the model's analytic float32 gradients are compared with
 * central differences of a float64 re-implementation of the same network
 * (dense layers, ReLU, softmax cross-entropy, mean over the batch; the
 * parameter layout W (in,out) row-major then b). Checking in float64 keeps
 * the finite-difference error (~h^2 = 1e-10) and round-off far below the
 * tolerance, so the 1e-3 relative bound tests the backward pass itself.
 */
#include "hora_model.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define IN 20
#define CLS 5
#define B 8

static double ref_loss(const double *p, const int *dims, int nl, const float *x, const uint8_t *y,
		       int n)
{
	double total = 0;
	double a[64], z[64];
	for (int s = 0; s < n; s++) {
		for (int i = 0; i < dims[0]; i++)
			a[i] = x[s * dims[0] + i];
		size_t off = 0;
		for (int l = 0; l < nl; l++) {
			int din = dims[l], dout = dims[l + 1];
			const double *w = p + off, *b = p + off + (size_t)din * dout;
			for (int j = 0; j < dout; j++) {
				double v = b[j];
				for (int i = 0; i < din; i++)
					v += a[i] * w[i * dout + j];
				z[j] = (l + 1 < nl && v < 0) ? 0 : v;
			}
			memcpy(a, z, sizeof(double) * dout);
			off += (size_t)din * dout + dout;
		}
		double mx = a[0], sum = 0;
		for (int j = 1; j < dims[nl]; j++)
			mx = fmax(mx, a[j]);
		for (int j = 0; j < dims[nl]; j++)
			sum += exp(a[j] - mx);
		total += log(sum) - (a[y[s]] - mx);
	}
	return total / n;
}

struct ready_log {
	int n;
	int layers[256];
	size_t offsets[256], counts[256];
};

static void on_ready(void *arg, int layer, size_t offset, size_t count)
{
	struct ready_log *r = arg;
	if (r->n == 256)
		return;
	r->layers[r->n] = layer;
	r->offsets[r->n] = offset;
	r->counts[r->n] = count;
	r->n++;
}

static void grad_check(const char *name, int nhidden, const int *hidden)
{
	const struct hora_model_ops *ops = hora_model_find(name);
	cr_assert_not_null(ops);
	struct hora_model_config cfg = {.input_dim = IN, .num_classes = CLS, .nhidden = nhidden,
					.max_batch = B};
	memcpy(cfg.hidden, hidden, sizeof(int) * nhidden);
	void *m;
	char err[256];
	cr_assert_eq(ops->create(&cfg, &m, err, sizeof(err)), 0, "%s", err);
	struct hora_model_layer layers[8];
	int nl = ops->layout(m, layers, 8);
	cr_assert_gt(nl, 0);
	size_t np = layers[nl - 1].offset + layers[nl - 1].count;
	int dims[10] = {IN};
	int ref_nl = strcmp(name, "softmax_regression") ? nhidden + 1 : 1;
	for (int i = 0; i < ref_nl - 1; i++)
		dims[i + 1] = hidden[i];
	dims[ref_nl] = CLS;
	cr_assert_eq(nl, ref_nl);

	float *p = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
	cr_assert_eq(ops->init_params(m, p, 1234), 0);
	/* non-zero biases so that their gradients and the ReLU masks matter */
	uint64_t s = 99;
	for (int l = 0; l < nl; l++) {
		size_t nw = (size_t)dims[l] * dims[l + 1];
		for (int j = 0; j < dims[l + 1]; j++) {
			s = s * 6364136223846793005ULL + 1;
			p[layers[l].offset + nw + j] = (float)((int)(s >> 40) % 200 - 100) * 0.001f;
		}
	}
	float x[B * IN];
	uint8_t y[B];
	for (int i = 0; i < B * IN; i++) {
		s = s * 6364136223846793005ULL + 1;
		x[i] = (float)((s >> 40) % 256) / 255.0f;
	}
	for (int i = 0; i < B; i++)
		y[i] = (uint8_t)(i % CLS);
	memset(g, 0xFF, np * sizeof(float)); /* NaN: the model must write every float */
	struct hora_batch b = {x, y, B};
	struct hora_model_stats st = {0};
	struct ready_log rl = {0};
	cr_assert_eq(ops->forward_backward(m, p, g, &b, &st, on_ready, &rl), 0);
	cr_assert_eq(st.n, B);

	/* grads-ready: ranges from the top of the buffer down, each right below
	 * the previous, inside its layer, layers output to input, covering every
	 * parameter once */
	cr_assert_gt(rl.n, 0);
	cr_assert_lt(rl.n, 256);
	size_t top = np;
	for (int i = 0; i < rl.n; i++) {
		int l = rl.layers[i];
		cr_assert(l >= 0 && l < nl, "range %d: layer %d", i, l);
		cr_assert(i == 0 || l <= rl.layers[i - 1], "range %d: layer %d after %d", i, l, rl.layers[i - 1]);
		cr_assert_eq(rl.offsets[i] + rl.counts[i], top, "range %d does not end where %d began", i, i - 1);
		cr_assert(rl.offsets[i] >= layers[l].offset &&
			  rl.offsets[i] + rl.counts[i] <= layers[l].offset + layers[l].count,
			  "range %d outside layer %d", i, l);
		top = rl.offsets[i];
	}
	cr_assert_eq(top, 0, "the ranges stop at %zu, not at 0", top);

	double *pd = malloc(np * sizeof(double));
	for (size_t i = 0; i < np; i++)
		pd[i] = p[i];
	double l0 = ref_loss(pd, dims, nl, x, y, B);
	cr_assert(fabs(l0 - st.loss_sum / B) < 1e-5 * fabs(l0), "model loss %.8f vs reference %.8f",
		  st.loss_sum / B, l0);

	const double h = 1e-5;
	double max_rel = 0, max_abs_small = 0;
	size_t checked = 0;
	for (size_t i = 0; i < np; i++) {
		double keep = pd[i];
		pd[i] = keep + h;
		double lp = ref_loss(pd, dims, nl, x, y, B);
		pd[i] = keep - h;
		double lm = ref_loss(pd, dims, nl, x, y, B);
		pd[i] = keep;
		double num = (lp - lm) / (2 * h), ana = g[i];
		cr_assert(isfinite(ana), "grad %zu not written", i);
		double mag = fmax(fabs(num), fabs(ana));
		if (mag > 1e-4) {
			max_rel = fmax(max_rel, fabs(num - ana) / mag);
			checked++;
		} else {
			max_abs_small = fmax(max_abs_small, fabs(num - ana));
		}
	}
	cr_log_info("%s: %zu params, %zu checked relatively, max rel err %.3g, max abs err (tiny "
		    "grads) %.3g",
		    name, np, checked, max_rel, max_abs_small);
	cr_assert_gt(checked, np / 4);
	cr_assert_lt(max_rel, 1e-3, "%s: max relative gradient error %.3g", name, max_rel);
	cr_assert_lt(max_abs_small, 1e-6);
	free(pd);
	free(p);
	free(g);
	ops->destroy(m);
}

Test(model_builtin, mlp_gradient_check_one_hidden)
{
	int h[] = {16};
	grad_check("mnist_mlp", 1, h);
}

Test(model_builtin, mlp_gradient_check_two_hidden)
{
	int h[] = {16, 12};
	grad_check("mnist_mlp", 2, h);
}

Test(model_builtin, softmax_regression_gradient_check)
{
	int h[] = {128}; /* ignored by this model */
	grad_check("softmax_regression", 1, h);
}

Test(model_builtin, mlp_layout_tiles_784_128_10)
{
	const struct hora_model_ops *ops = hora_model_find("mnist_mlp");
	struct hora_model_config cfg = {784, 10, 1, {128}, 32};
	void *m;
	char err[128];
	cr_assert_eq(ops->create(&cfg, &m, err, sizeof(err)), 0);
	struct hora_model_layer l[4];
	cr_assert_eq(ops->layout(m, NULL, 0), 2);
	cr_assert_eq(ops->layout(m, l, 1), -ENOSPC);
	cr_assert_eq(ops->layout(m, l, 4), 2);
	cr_assert_eq(l[0].offset, 0);
	cr_assert_eq(l[0].count, 784 * 128 + 128);
	cr_assert_eq(l[1].offset, l[0].count);
	cr_assert_eq(l[1].count, 128 * 10 + 10);
	cr_assert_str_eq(l[0].name, "fc1");
	ops->destroy(m);
}

Test(model_builtin, init_is_deterministic_and_seeded)
{
	const struct hora_model_ops *ops = hora_model_find("mnist_mlp");
	struct hora_model_config cfg = {784, 10, 1, {128}, 32};
	void *m;
	char err[128];
	cr_assert_eq(ops->create(&cfg, &m, err, sizeof(err)), 0);
	size_t n = 784 * 128 + 128 + 128 * 10 + 10;
	float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
	ops->init_params(m, a, 42);
	ops->init_params(m, b, 42);
	ops->init_params(m, c, 43);
	cr_assert_eq(memcmp(a, b, n * 4), 0);
	cr_assert_neq(memcmp(a, c, n * 4), 0);
	/* He init: weight std of fc1 ~ sqrt(2/784) = 0.0505 */
	double ss = 0;
	for (size_t i = 0; i < 784 * 128; i++)
		ss += (double)a[i] * a[i];
	double sd = sqrt(ss / (784 * 128));
	cr_assert(fabs(sd - sqrt(2.0 / 784)) < 0.002, "fc1 std %.4f", sd);
	free(a);
	free(b);
	free(c);
	ops->destroy(m);
}

Test(model_builtin, rejects_bad_config_and_batch)
{
	const struct hora_model_ops *ops = hora_model_find("mnist_mlp");
	struct hora_model_config cfg = {784, 10, 1, {0}, 32};
	void *m = NULL;
	char err[128];
	cr_assert_eq(ops->create(&cfg, &m, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "hidden[0] = 0"), "err: %s", err);
	cfg.hidden[0] = 8;
	cfg.num_classes = 1;
	cr_assert_eq(ops->create(&cfg, &m, err, sizeof(err)), -EINVAL);
	cfg.num_classes = 10;
	cr_assert_eq(ops->create(&cfg, &m, err, sizeof(err)), 0);
	float *p = calloc(784 * 8 + 8 + 8 * 10 + 10, 4), *g = calloc(784 * 8 + 8 + 8 * 10 + 10, 4);
	float x[784 * 33] = {0};
	uint8_t y[33] = {0};
	struct hora_batch b = {x, y, 33}; /* above max_batch */
	struct hora_model_stats st = {0};
	cr_assert_eq(ops->forward_backward(m, p, g, &b, &st, NULL, NULL), -EINVAL);
	b.n = 0;
	cr_assert_eq(ops->evaluate(m, p, &b, &st), -EINVAL);
	free(p);
	free(g);
	ops->destroy(m);
}

Test(model_builtin, resolve_names_and_lists_builtins_on_error)
{
	const struct hora_model_ops *ops;
	struct hora_model_plugin *pl;
	char err[256];
	cr_assert_eq(hora_model_resolve("softmax_regression", &ops, &pl, err, sizeof(err)), 0);
	cr_assert_str_eq(ops->name, "softmax_regression");
	cr_assert_null(pl);
	cr_assert_eq(hora_model_resolve("resnet50", &ops, &pl, err, sizeof(err)), -ENOENT);
	cr_assert(strstr(err, "unknown model 'resnet50'") && strstr(err, "mnist_mlp"), "err: %s", err);
}
