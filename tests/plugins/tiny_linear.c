/* tiny_linear.c - a model plugin built outside hora: linear softmax
 * classifier with plain C loops (no BLAS, no hora internals), only
 * hora_model.h. It is what a user's libfoo.so looks like. */
#include "hora_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tiny {
	int in, out, max_batch;
	float *z;
};

static int tiny_create(const struct hora_model_config *cfg, void **state, char *err, size_t errlen)
{
	if (cfg->input_dim <= 0 || cfg->num_classes < 2) {
		snprintf(err, errlen, "tiny_linear needs input_dim > 0 and >= 2 classes");
		return -EINVAL;
	}
	struct tiny *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->in = cfg->input_dim;
	t->out = cfg->num_classes;
	t->max_batch = cfg->max_batch;
	t->z = calloc((size_t)cfg->max_batch * t->out, sizeof(float));
	if (!t->z) {
		free(t);
		return -ENOMEM;
	}
	*state = t;
	return 0;
}

static void tiny_destroy(void *state)
{
	struct tiny *t = state;
	if (t) {
		free(t->z);
		free(t);
	}
}

static int tiny_layout(void *state, struct hora_model_layer *layers, int cap)
{
	struct tiny *t = state;
	if (layers) {
		if (cap < 1)
			return -ENOSPC;
		memset(layers, 0, sizeof(*layers));
		strcpy(layers[0].name, "tiny");
		layers[0].count = (size_t)t->in * t->out + t->out;
	}
	return 1;
}

static int tiny_init(void *state, float *p, uint64_t seed)
{
	struct tiny *t = state;
	for (size_t i = 0; i < (size_t)t->in * t->out + t->out; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		p[i] = ((float)(seed >> 40) / 16777216.0f - 0.5f) * 0.01f;
	}
	return 0;
}

static void logits(struct tiny *t, const float *p, const float *x, int n)
{
	const float *b = p + (size_t)t->in * t->out;
	for (int s = 0; s < n; s++)
		for (int j = 0; j < t->out; j++) {
			float v = b[j];
			for (int i = 0; i < t->in; i++)
				v += x[(size_t)s * t->in + i] * p[(size_t)i * t->out + j];
			t->z[(size_t)s * t->out + j] = v;
		}
}

static void xent(struct tiny *t, const uint8_t *y, int n, struct hora_model_stats *st, int grad)
{
	for (int s = 0; s < n; s++) {
		float *z = t->z + (size_t)s * t->out, mx = z[0], sum = 0;
		int arg = 0;
		for (int j = 1; j < t->out; j++)
			if (z[j] > mx)
				mx = z[j], arg = j;
		for (int j = 0; j < t->out; j++)
			sum += expf(z[j] - mx);
		st->loss_sum += log(sum) - (z[y[s]] - mx);
		st->correct += arg == y[s];
		if (grad) {
			for (int j = 0; j < t->out; j++)
				z[j] = expf(z[j] - mx) / sum / n;
			z[y[s]] -= 1.0f / n;
		}
	}
	st->n += n;
}

#ifdef TINY_RECORD
/* Test hook: every training sample's id (pixels 0 and 1 hold its low and
 * high byte) is appended here, from every thread that trains. */
#include <pthread.h>
__attribute__((visibility("default"))) int tiny_seen[1 << 16];
__attribute__((visibility("default"))) int tiny_nseen;
static pthread_mutex_t tiny_mu = PTHREAD_MUTEX_INITIALIZER;
#endif

__attribute__((unused)) static int tiny_fb(void *state, const float *p, float *g, const struct hora_batch *b,
		   struct hora_model_stats *st, hora_grads_ready_fn ready, void *arg)
{
	struct tiny *t = state;
	if (b->n <= 0 || b->n > t->max_batch)
		return -EINVAL;
#ifdef TINY_RECORD
	pthread_mutex_lock(&tiny_mu);
	for (int s = 0; s < b->n && tiny_nseen < (1 << 16); s++) {
		const float *x = b->x + (size_t)s * t->in;
		tiny_seen[tiny_nseen++] = (int)lrintf(x[0] * 255.0f) + 256 * (int)lrintf(x[1] * 255.0f);
	}
	pthread_mutex_unlock(&tiny_mu);
#endif
	logits(t, p, b->x, b->n);
	xent(t, b->y, b->n, st, 1);
	memset(g, 0, ((size_t)t->in * t->out + t->out) * sizeof(float));
	float *gb = g + (size_t)t->in * t->out;
	for (int s = 0; s < b->n; s++)
		for (int j = 0; j < t->out; j++) {
			float d = t->z[(size_t)s * t->out + j];
			gb[j] += d;
			for (int i = 0; i < t->in; i++)
				g[(size_t)i * t->out + j] += b->x[(size_t)s * t->in + i] * d;
		}
	if (ready)
		ready(arg, 0, 0, (size_t)t->in * t->out + t->out);
	return 0;
}

static int tiny_eval(void *state, const float *p, const struct hora_batch *b,
		     struct hora_model_stats *st)
{
	struct tiny *t = state;
	if (b->n <= 0 || b->n > t->max_batch)
		return -EINVAL;
	logits(t, p, b->x, b->n);
	xent(t, b->y, b->n, st, 0);
	return 0;
}

#ifndef TINY_ABI
#define TINY_ABI HORA_MODEL_ABI_VERSION
#endif
#ifndef TINY_FB
#define TINY_FB tiny_fb
#endif
#ifndef TINY_SYMBOL
#define TINY_SYMBOL hora_model_plugin_v1
#endif

__attribute__((visibility("default"))) const struct hora_model_ops TINY_SYMBOL = {
	.abi_version = TINY_ABI,
	.name = "tiny_linear",
	.create = tiny_create,
	.destroy = tiny_destroy,
	.layout = tiny_layout,
	.init_params = tiny_init,
	.forward_backward = TINY_FB,
	.evaluate = tiny_eval,
};
