/* softmax.c - "softmax_regression": one linear layer + softmax cross-entropy
 * (784-10 for MNIST). A second, independent implementation of the model
 * interface: it ignores hidden sizes, keeps its own scratch, and reports a
 * single layer, so the runtime cannot be silently MLP-specific.
 */
#include "nn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct softmax {
	struct hora_nn_common common; /* first: see nn.h */
	int in, out, max_batch;
	float *logits; /* (max_batch, out) */
};

static int sm_create(const struct hora_model_config *cfg, void **state, char *err, size_t errlen)
{
	int rc = hora_nn_check_config(cfg, HORA_MODEL_MAX_HIDDEN, err, errlen);
	if (rc)
		return rc;
	struct softmax *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->in = cfg->input_dim;
	s->out = cfg->num_classes;
	s->max_batch = cfg->max_batch;
	s->logits = malloc((size_t)s->max_batch * s->out * sizeof(float));
	if (!s->logits) {
		free(s);
		return -ENOMEM;
	}
	*state = s;
	return 0;
}

static void sm_destroy(void *state)
{
	struct softmax *s = state;
	if (!s)
		return;
	free(s->logits);
	free(s);
}

static int sm_layout(void *state, struct hora_model_layer *layers, int cap)
{
	struct softmax *s = state;
	if (layers) {
		if (cap < 1)
			return -ENOSPC;
		memset(&layers[0], 0, sizeof(layers[0]));
		snprintf(layers[0].name, sizeof(layers[0].name), "linear");
		layers[0].offset = 0;
		layers[0].count = (size_t)s->in * s->out + s->out;
	}
	return 1;
}

static int sm_init_params(void *state, float *params, uint64_t seed)
{
	struct softmax *s = state;
	uint64_t r = seed;
	size_t nw = (size_t)s->in * s->out;
	hora_nn_init_glorot_uniform(params, nw, s->in, s->out, &r);
	memset(params + nw, 0, (size_t)s->out * sizeof(float));
	return 0;
}

static void sm_logits(struct softmax *s, const float *params, const float *x, int n)
{
	const float *w = params, *bias = params + (size_t)s->in * s->out;
	hora_nn_sgemm(s->common.trace, false, false, n, s->out, s->in, x, s->in, w, s->out, 0.0f,
		      s->logits, s->out);
	hora_nn_bias_act(s->logits, bias, n, s->out, false);
}

static int sm_forward_backward(void *state, const float *params, float *grads,
			       const struct hora_batch *b, struct hora_model_stats *stats,
			       hora_grads_ready_fn ready, void *arg)
{
	struct softmax *s = state;
	if (b->n <= 0 || b->n > s->max_batch)
		return -EINVAL;
	sm_logits(s, params, b->x, b->n);
	hora_nn_softmax_xent(s->logits, b->y, b->n, s->out, s->logits, stats);
	hora_nn_sgemm(s->common.trace, true, false, s->in, s->out, b->n, b->x, s->in, s->logits,
		      s->out, 0.0f, grads, s->out);
	hora_nn_bias_grad(s->logits, b->n, s->out, grads + (size_t)s->in * s->out);
	if (ready)
		ready(arg, 0, 0, (size_t)s->in * s->out + s->out);
	return 0;
}

static int sm_evaluate(void *state, const float *params, const struct hora_batch *b,
		       struct hora_model_stats *stats)
{
	struct softmax *s = state;
	if (b->n <= 0 || b->n > s->max_batch)
		return -EINVAL;
	sm_logits(s, params, b->x, b->n);
	hora_nn_softmax_xent(s->logits, b->y, b->n, s->out, NULL, stats);
	return 0;
}

const struct hora_model_ops hora_model_softmax_ops = {
	.abi_version = HORA_MODEL_ABI_VERSION,
	.name = "softmax_regression",
	.create = sm_create,
	.destroy = sm_destroy,
	.layout = sm_layout,
	.init_params = sm_init_params,
	.forward_backward = sm_forward_backward,
	.evaluate = sm_evaluate,
};
