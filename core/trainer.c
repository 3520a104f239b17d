/* trainer.c - model + flat params/grads + optimizer + batch buffers. */
#include "trainer.h"

#include "log.h"
#include "gpu/hora_gpu.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BATCH 512

static void *alloc_floats(size_t n)
{
	size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
	return aligned_alloc(64, bytes ? bytes : 64);
}

int hora_trainer_init(struct hora_trainer *t, const struct hora_train_config *cfg, int input_dim,
		      int num_classes, char *err, size_t errlen)
{
	char msg[512];
	int rc;
	memset(t, 0, sizeof(*t));
	t->cfg = *cfg;
	openblas_set_num_threads(cfg->blas_threads > 0 ? cfg->blas_threads : 1);

	rc = hora_model_resolve(cfg->model, &t->ops, &t->plugin, msg, sizeof(msg));
	if (rc) {
		snprintf(err, errlen, "%s", msg);
		return HORA_ERR_MODEL;
	}
	if (cfg->device == HORA_DEVICE_CUDA) {
		/* the CUDA MLP stands in for the CPU one (gpu/mlp_model.c) */
		if (t->ops != hora_model_find("mnist_mlp")) {
			snprintf(err, errlen, "train.device: cuda runs the built-in mnist_mlp only "
				 "(train.model is %s)", t->ops->name);
			hora_model_plugin_close(t->plugin);
			memset(t, 0, sizeof(*t));
			return HORA_ERR_CONFIG;
		}
		t->ops = hora_gpu_mlp_model();
	}
	/* train.balance: a share is at most 5/3 of the even one (balance.c),
	 * plus the rounding */
	const int train_max = cfg->balance ? 2 * cfg->batch_size + 2 : cfg->batch_size;
	struct hora_model_config mc = {
		.input_dim = input_dim,
		.num_classes = num_classes,
		.nhidden = cfg->nhidden,
		.max_batch = train_max > EVAL_BATCH ? train_max : EVAL_BATCH,
	};
	memcpy(mc.hidden, cfg->hidden, sizeof(int) * (size_t)cfg->nhidden);
	t->mc = mc;
	t->max_batch = mc.max_batch;
	t->input_dim = input_dim;
	rc = t->ops->create(&mc, &t->model, msg, sizeof(msg));
	if (rc) {
		snprintf(err, errlen, "model %s: %s", t->ops->name, rc == -ENOMEM ? "out of memory" : msg);
		rc = rc == -ENOMEM ? rc : HORA_ERR_MODEL;
		goto fail;
	}
	int nl = t->ops->layout(t->model, NULL, 0);
	if (nl <= 0 || !(t->layers = calloc((size_t)nl, sizeof(*t->layers))) ||
	    t->ops->layout(t->model, t->layers, nl) != nl) {
		snprintf(err, errlen, "model %s: layout failed (%d layers)", t->ops->name, nl);
		rc = HORA_ERR_MODEL;
		goto fail;
	}
	t->nlayers = nl;
	/* layers must tile [0, nparams) in order */
	size_t off = 0;
	for (int i = 0; i < nl; i++) {
		if (t->layers[i].offset != off || t->layers[i].count == 0) {
			snprintf(err, errlen, "model %s: layer %d (%s) does not follow layer %d "
				 "contiguously", t->ops->name, i, t->layers[i].name, i - 1);
			rc = HORA_ERR_MODEL;
			goto fail;
		}
		off += t->layers[i].count;
	}
	t->nparams = off;
	t->params = alloc_floats(t->nparams);
	t->grads = alloc_floats(t->nparams);
	t->x = alloc_floats((size_t)t->max_batch * input_dim);
	t->y = malloc((size_t)t->max_batch);
	if (!t->params || !t->grads || !t->x || !t->y) {
		snprintf(err, errlen, "out of memory for %zu parameters", t->nparams);
		rc = -ENOMEM;
		goto fail;
	}
	memset(t->grads, 0, t->nparams * sizeof(float));
	rc = t->ops->init_params(t->model, t->params, cfg->seed);
	if (rc) {
		snprintf(err, errlen, "model %s: init_params failed: %s", t->ops->name,
			 hora_strerror(rc));
		rc = HORA_ERR_MODEL;
		goto fail;
	}
	rc = hora_optim_create(&cfg->optim, t->nparams, &t->optim);
	if (rc) {
		snprintf(err, errlen, "optimizer: %s", rc == -EINVAL ? "invalid settings (lr > 0, "
			 "0 <= momentum < 1, nesterov needs momentum)" : hora_strerror(rc));
		rc = rc == -EINVAL ? HORA_ERR_CONFIG : rc;
		goto fail;
	}
	HORA_LOGD("trainer: model %s, %d layers, %zu parameters", t->ops->name, nl, t->nparams);
	return 0;
fail:
	hora_trainer_deinit(t);
	return rc;
}

void hora_trainer_deinit(struct hora_trainer *t)
{
	if (t->ops && t->model)
		t->ops->destroy(t->model);
	hora_optim_destroy(t->optim);
	free(t->layers);
	free(t->params);
	free(t->grads);
	free(t->x);
	free(t->y);
	hora_model_plugin_close(t->plugin);
	memset(t, 0, sizeof(*t));
}

int hora_trainer_grow(struct hora_trainer *t, int n, char *err, size_t errlen)
{
	if (n <= t->max_batch)
		return 0;
	struct hora_model_config mc = t->mc;
	mc.max_batch = n;
	void *model = NULL;
	char msg[512] = "";
	float *x = alloc_floats((size_t)n * (size_t)t->input_dim);
	uint8_t *y = malloc((size_t)n);
	struct hora_model_layer *layers = calloc((size_t)t->nlayers, sizeof(*layers));
	int rc = x && y && layers ? t->ops->create(&mc, &model, msg, sizeof(msg)) : -ENOMEM;
	if (!rc && t->ops->layout(model, layers, t->nlayers) != t->nlayers) { /* fills only when it fits */
		snprintf(msg, sizeof(msg), "it has another number of layers when built for batch %d", n);
		rc = HORA_ERR_MODEL;
	}
	for (int i = 0; !rc && i < t->nlayers; i++)
		if (layers[i].offset != t->layers[i].offset || layers[i].count != t->layers[i].count) {
			snprintf(msg, sizeof(msg), "its layer %d moves when built for batch %d", i, n);
			rc = HORA_ERR_MODEL;
		}
	free(layers);
	if (rc) {
		snprintf(err, errlen, "model %s: building it for batches of %d samples (was %d): %s", t->ops->name, n,
			 t->max_batch, rc == -ENOMEM ? "out of memory" : msg);
		if (model)
			t->ops->destroy(model);
		free(x);
		free(y);
		return rc == -ENOMEM ? rc : HORA_ERR_MODEL;
	}
	t->ops->destroy(t->model);
	free(t->x);
	free(t->y);
	t->model = model;
	t->x = x;
	t->y = y;
	t->mc = mc;
	t->max_batch = n;
	HORA_LOGD("trainer: model %s built again for batches of %d samples", t->ops->name, n);
	return 0;
}

/* train.device: cuda keeps the data sets on the device (gpu/hora_gpu.h) */
static int on_cuda(const struct hora_trainer *t)
{
	return t->ops == hora_gpu_mlp_model();
}

void hora_trainer_prefetch(const struct hora_trainer *t, const struct hora_dataset *ds, const int64_t *idx, int n)
{
	if (on_cuda(t))
		return;
	const size_t d = (size_t)ds->rows * ds->cols;
	for (int i = 0; i < n; i++) {
		const uint8_t *row = ds->images + (size_t)idx[i] * d;
		for (size_t o = 0; o < d; o += 64)
			__builtin_prefetch(row + o, 0, 3);
		__builtin_prefetch(row + d - 1, 0, 3);
		__builtin_prefetch(ds->labels + idx[i], 0, 3);
	}
}

int hora_trainer_step(struct hora_trainer *t, const struct hora_dataset *ds, const int64_t *idx,
		      int n, double lr, struct hora_model_stats *stats)
{
	int rc = hora_trainer_forward_backward(t, ds, idx, n, stats, NULL, NULL);
	if (rc)
		return rc;
	hora_optim_step(t->optim, t->params, t->grads, lr);
	return 0;
}

int hora_trainer_forward_backward(struct hora_trainer *t, const struct hora_dataset *ds,
				  const int64_t *idx, int n, struct hora_model_stats *stats,
				  hora_grads_ready_fn ready, void *arg)
{
	if (n < 0 || n > t->max_batch)
		return -E2BIG; /* the batch buffers' size (train.c names it first) */
	if (on_cuda(t))
		return hora_gpu_mlp_model_step_ds(t->model, ds, idx, n, t->params, t->grads, stats,
						  ready, arg);
	hora_dataset_gather(ds, idx, n, t->x, t->y);
	struct hora_batch b = {t->x, t->y, n};
	return t->ops->forward_backward(t->model, t->params, t->grads, &b, stats, ready, arg);
}

int hora_trainer_evaluate_range(struct hora_trainer *t, const struct hora_dataset *ds, int64_t lo,
				int64_t hi, struct hora_model_stats *stats)
{
	int64_t idx[EVAL_BATCH];
	memset(stats, 0, sizeof(*stats));
	int n;
	for (int64_t i = lo; i < hi; i += n) {
		n = (int)(hi - i < EVAL_BATCH ? hi - i : EVAL_BATCH); /* max_batch >= EVAL_BATCH */
		for (int j = 0; j < n; j++)
			idx[j] = i + j;
		int rc;
		if (on_cuda(t)) {
			rc = hora_gpu_mlp_model_step_ds(t->model, ds, idx, n, t->params, NULL, stats,
							NULL, NULL);
		} else {
			hora_dataset_gather(ds, idx, n, t->x, t->y);
			struct hora_batch b = {t->x, t->y, n};
			rc = t->ops->evaluate(t->model, t->params, &b, stats);
		}
		if (rc)
			return rc;
	}
	return 0;
}

const char *hora_trainer_model_error(const struct hora_trainer *t)
{
	return on_cuda(t) ? hora_gpu_mlp_model_error(t->model) : "";
}
