/* mlp.c - the reference model: multi-layer perceptron, ReLU hidden layers,
 * softmax cross-entropy output ("mnist_mlp", 784-128-10 by default).
 *
 * Layer l maps dims[l] -> dims[l+1]; its parameters are W (dims[l], dims[l+1])
 * row-major followed by b (dims[l+1]), so a batch X (B, dims[l]) goes through
 * one sgemm X.W. Activations and deltas live in scratch sized for max_batch,
 * allocated once in create: a training step allocates nothing.
 *
 * Not here: the optimizer, data, or anything about the network.
 */
#include "nn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MLP_MAX_LAYERS (HORA_MODEL_MAX_HIDDEN + 1)

struct mlp {
	struct hora_nn_common common; /* first: see nn.h */
	int nlayers;
	int max_batch;
	int dims[MLP_MAX_LAYERS + 1];
	struct hora_model_layer layers[MLP_MAX_LAYERS];
	float *act[MLP_MAX_LAYERS]; /* act[l] = output of layer l, (B, dims[l+1]) */
	float *delta[2];            /* ping-pong (B, max width) deltas */
	float *scratch;             /* one allocation behind act[] and delta[] */
};

static int mlp_create(const struct hora_model_config *cfg, void **state, char *err, size_t errlen)
{
	int rc = hora_nn_check_config(cfg, HORA_MODEL_MAX_HIDDEN, err, errlen);
	if (rc)
		return rc;
	struct mlp *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->nlayers = cfg->nhidden + 1;
	m->max_batch = cfg->max_batch;
	m->dims[0] = cfg->input_dim;
	for (int i = 0; i < cfg->nhidden; i++)
		m->dims[i + 1] = cfg->hidden[i];
	m->dims[m->nlayers] = cfg->num_classes;

	size_t off = 0, widest = 0, acts = 0;
	for (int l = 0; l < m->nlayers; l++) {
		struct hora_model_layer *ly = &m->layers[l];
		snprintf(ly->name, sizeof(ly->name), "fc%d", l + 1);
		ly->offset = off;
		ly->count = (size_t)m->dims[l] * m->dims[l + 1] + m->dims[l + 1];
		off += ly->count;
		acts += (size_t)m->dims[l + 1];
		if ((size_t)m->dims[l + 1] > widest)
			widest = m->dims[l + 1];
	}
	size_t b = (size_t)cfg->max_batch;
	m->scratch = malloc((acts + 2 * widest) * b * sizeof(float));
	if (!m->scratch) {
		free(m);
		snprintf(err, errlen, "cannot allocate activations for batch %d", cfg->max_batch);
		return -ENOMEM;
	}
	float *p = m->scratch;
	for (int l = 0; l < m->nlayers; l++) {
		m->act[l] = p;
		p += b * m->dims[l + 1];
	}
	m->delta[0] = p;
	m->delta[1] = p + b * widest;
	*state = m;
	return 0;
}

static void mlp_destroy(void *state)
{
	struct mlp *m = state;
	if (!m)
		return;
	free(m->scratch);
	free(m);
}

static int mlp_layout(void *state, struct hora_model_layer *layers, int cap)
{
	struct mlp *m = state;
	if (layers) {
		if (cap < m->nlayers)
			return -ENOSPC;
		memcpy(layers, m->layers, (size_t)m->nlayers * sizeof(*layers));
	}
	return m->nlayers;
}

static int mlp_init_params(void *state, float *params, uint64_t seed)
{
	struct mlp *m = state;
	uint64_t s = seed;
	for (int l = 0; l < m->nlayers; l++) {
		float *w = params + m->layers[l].offset;
		size_t nw = (size_t)m->dims[l] * m->dims[l + 1];
		if (l + 1 < m->nlayers) /* ReLU follows: He */
			hora_nn_init_he_normal(w, nw, m->dims[l], &s);
		else /* softmax follows: Glorot */
			hora_nn_init_glorot_uniform(w, nw, m->dims[l], m->dims[l + 1], &s);
		memset(w + nw, 0, (size_t)m->dims[l + 1] * sizeof(float));
	}
	return 0;
}

static void forward(struct mlp *m, const float *params, const float *x, int n)
{
	const float *in = x;
	for (int l = 0; l < m->nlayers; l++) {
		const float *w = params + m->layers[l].offset;
		const float *bias = w + (size_t)m->dims[l] * m->dims[l + 1];
		hora_nn_sgemm(m->common.trace, false, false, n, m->dims[l + 1], m->dims[l], in,
			      m->dims[l], w, m->dims[l + 1], 0.0f, m->act[l], m->dims[l + 1]);
		hora_nn_bias_act(m->act[l], bias, n, m->dims[l + 1], l + 1 < m->nlayers);
		in = m->act[l];
	}
}

static int mlp_forward_backward(void *state, const float *params, float *grads,
				const struct hora_batch *b, struct hora_model_stats *stats,
				hora_grads_ready_fn ready, void *arg)
{
	struct mlp *m = state;
	const int n = b->n, L = m->nlayers;
	if (n <= 0 || n > m->max_batch)
		return -EINVAL;
	forward(m, params, b->x, n);

	float *dz = m->delta[0];
	hora_nn_softmax_xent(m->act[L - 1], b->y, n, m->dims[L], dz, stats);
	for (int l = L - 1; l >= 0; l--) {
		const int din = m->dims[l], dout = m->dims[l + 1];
		const float *in = l ? m->act[l - 1] : b->x;
		const float *w = params + m->layers[l].offset;
		float *gw = grads + m->layers[l].offset;
		const size_t off = m->layers[l].offset, wcount = (size_t)din * dout;
		if (!ready) {
			/* dW = in^T . dz ; db = colsum(dz) */
			hora_nn_sgemm(m->common.trace, true, false, din, dout, n, in, din, dz, dout, 0.0f,
				      gw, dout);
			hora_nn_bias_grad(dz, n, dout, gw + wcount);
		} else {
			/* the same in pieces that are final one after the other, highest
			 * offsets first (bias, then row blocks of dW from the last), so
			 * their averaging starts while the rest is still computing */
			hora_nn_bias_grad(dz, n, dout, gw + wcount);
			ready(arg, l, off + wcount, (size_t)dout);
			int nblk = wcount >= 16384 ? (din / 32 < 8 ? din / 32 : 8) : 1;
			if (nblk < 1)
				nblk = 1;
			for (int k = nblk - 1; k >= 0; k--) {
				int r0 = din * k / nblk, r1 = din * (k + 1) / nblk;
				hora_nn_sgemm(m->common.trace, true, false, r1 - r0, dout, n, in + r0, din, dz,
					      dout, 0.0f, gw + (size_t)r0 * dout, dout);
				ready(arg, l, off + (size_t)r0 * dout, (size_t)(r1 - r0) * dout);
			}
		}
		if (l > 0) {
			/* d(in) = dz . W^T, then through the ReLU of layer l-1 */
			float *dnext = dz == m->delta[0] ? m->delta[1] : m->delta[0];
			hora_nn_sgemm(m->common.trace, false, true, n, din, dout, dz, dout, w, dout,
				      0.0f, dnext, din);
			hora_nn_relu_backward(dnext, m->act[l - 1], (size_t)n * din);
			dz = dnext;
		}
	}
	return 0;
}

static int mlp_evaluate(void *state, const float *params, const struct hora_batch *b,
			struct hora_model_stats *stats)
{
	struct mlp *m = state;
	if (b->n <= 0 || b->n > m->max_batch)
		return -EINVAL;
	forward(m, params, b->x, b->n);
	hora_nn_softmax_xent(m->act[m->nlayers - 1], b->y, b->n, m->dims[m->nlayers], NULL, stats);
	return 0;
}

const struct hora_model_ops hora_model_mlp_ops = {
	.abi_version = HORA_MODEL_ABI_VERSION,
	.name = "mnist_mlp",
	.create = mlp_create,
	.destroy = mlp_destroy,
	.layout = mlp_layout,
	.init_params = mlp_init_params,
	.forward_backward = mlp_forward_backward,
	.evaluate = mlp_evaluate,
};
