/* mlp_model.c - the CUDA MLP as a hora model (model/hora_model.h's ops):
 * what `train.device: cuda` trains with (core/trainer.c).
 *
 * The parameters stay where the runtime keeps them, in the host's flat
 * buffer (the optimizer, the collectives and checkpoints are unchanged);
 * each step hands them to libhora_gpu.so's mlp_forward_backward, which runs
 * the step on the device and writes the gradients back layer by layer. The
 * layout and the initial parameters are the CPU mnist_mlp's own (a CPU
 * instance of it answers layout and init_params), so the same seed gives
 * the same parameters on either device and the two can be compared.
 *
 * Part of libhora, plain C: every device call goes through the loaded ops
 * (loader.c); without CUDA create fails with the loader's reason.
 */
#include "hora_gpu.h"

#include "hora_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gpu_mlp {
	const struct hora_gpu_ops *gpu;
	struct hora_gpu_mlp *dev;
	const struct hora_model_ops *cpu_ops; /* mnist_mlp: layout, init_params */
	void *cpu;
	char err[512]; /* the last device error (hora_gpu_mlp_model_error) */
	/* which host data set each device data slot holds (images pointer and
	 * size identify it: the runtime keeps its sets for the whole run) */
	const uint8_t *slot_images[HORA_GPU_MLP_DATA_SLOTS];
	int64_t slot_n[HORA_GPU_MLP_DATA_SLOTS];
	int next_slot;
	int input_dim;
};

static void gm_destroy(void *state)
{
	struct gpu_mlp *g = state;
	if (!g)
		return;
	if (g->dev)
		g->gpu->mlp_destroy(g->dev);
	if (g->cpu)
		g->cpu_ops->destroy(g->cpu);
	free(g);
}

/* The process-wide library with a v2 (MLP) ABI and a device, or why not. */
static int need_mlp(const struct hora_gpu_ops **ops, char *err, size_t errlen)
{
	char why[512];
	int rc = hora_gpu_get(ops, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "CUDA is not available: %s", why);
		return rc;
	}
	if (!(*ops)->mlp_create) {
		snprintf(err, errlen, "CUDA is not available: %s is ABI version 1 (no CUDA MLP)",
			 hora_gpu_loaded_path());
		return -ENOTSUP;
	}
	rc = (*ops)->device_count(why, sizeof(why));
	if (rc < 1) {
		snprintf(err, errlen, "CUDA is not available: %s", why);
		return rc < 0 ? rc : -ENODEV;
	}
	return 0;
}

static int gm_create(const struct hora_model_config *cfg, void **state, char *err, size_t errlen)
{
	*state = NULL;
	const struct hora_gpu_ops *ops;
	int rc = need_mlp(&ops, err, errlen);
	if (rc)
		return rc;
	struct gpu_mlp *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->gpu = ops;
	g->input_dim = cfg->input_dim;
	g->cpu_ops = hora_model_find("mnist_mlp");
	/* the CPU twin validates cfg and owns the layout; batch 1: no scratch */
	struct hora_model_config one = *cfg;
	one.max_batch = 1;
	rc = g->cpu_ops ? g->cpu_ops->create(&one, &g->cpu, err, errlen) : -ENOENT;
	if (rc)
		goto fail;
	struct hora_gpu_mlp_config mc = {.nlayers = cfg->nhidden + 1, .max_batch = cfg->max_batch};
	mc.dims[0] = cfg->input_dim;
	for (int i = 0; i < cfg->nhidden; i++)
		mc.dims[i + 1] = cfg->hidden[i];
	mc.dims[mc.nlayers] = cfg->num_classes;
	rc = ops->mlp_create(&mc, &g->dev, err, errlen);
	if (rc)
		goto fail;
	*state = g;
	return 0;
fail:
	gm_destroy(g);
	return rc;
}

static int gm_layout(void *state, struct hora_model_layer *layers, int cap)
{
	struct gpu_mlp *g = state;
	return g->cpu_ops->layout(g->cpu, layers, cap);
}

static int gm_init_params(void *state, float *params, uint64_t seed)
{
	struct gpu_mlp *g = state;
	return g->cpu_ops->init_params(g->cpu, params, seed);
}

/* a device call's result: its error, or its batch added to stats */
static int add_stats(struct hora_model_stats *stats, int rc, double loss, int64_t correct, int n)
{
	if (rc)
		return rc;
	stats->loss_sum += loss;
	stats->correct += correct;
	stats->n += n;
	return 0;
}

static int gm_forward_backward(void *state, const float *params, float *grads,
			       const struct hora_batch *b, struct hora_model_stats *stats,
			       hora_grads_ready_fn ready, void *arg)
{
	struct gpu_mlp *g = state;
	double loss = 0;
	int64_t correct = 0;
	/* hora_grads_ready_fn and hora_gpu_ready_fn have the same type */
	int rc = g->gpu->mlp_forward_backward(g->dev, params, grads, b->x, b->y, b->n, &loss,
					      &correct, ready, arg, g->err, sizeof(g->err));
	return add_stats(stats, rc, loss, correct, b->n);
}

static int gm_evaluate(void *state, const float *params, const struct hora_batch *b,
		       struct hora_model_stats *stats)
{
	struct gpu_mlp *g = state;
	double loss = 0;
	int64_t correct = 0;
	int rc = g->gpu->mlp_evaluate(g->dev, params, b->x, b->y, b->n, &loss, &correct, g->err,
				      sizeof(g->err));
	return add_stats(stats, rc, loss, correct, b->n);
}

static const struct hora_model_ops gpu_mlp_ops = {
	.abi_version = HORA_MODEL_ABI_VERSION,
	.name = "mnist_mlp",
	.create = gm_create,
	.destroy = gm_destroy,
	.layout = gm_layout,
	.init_params = gm_init_params,
	.forward_backward = gm_forward_backward,
	.evaluate = gm_evaluate,
};

const struct hora_model_ops *hora_gpu_mlp_model(void)
{
	return &gpu_mlp_ops;
}

/* The device slot holding ds, loading it into the next slot if none does. */
static int slot_of(struct gpu_mlp *g, const struct hora_dataset *ds)
{
	for (int k = 0; k < HORA_GPU_MLP_DATA_SLOTS; k++)
		if (g->slot_images[k] == ds->images && g->slot_n[k] == ds->n)
			return k;
	if ((int64_t)ds->rows * ds->cols != g->input_dim) {
		snprintf(g->err, sizeof(g->err), "cuda mlp: the data set has %dx%d inputs, the model %d",
			 ds->rows, ds->cols, g->input_dim);
		return -EINVAL;
	}
	int k = g->next_slot;
	g->slot_images[k] = NULL;
	int rc = g->gpu->mlp_load_data(g->dev, k, ds->images, ds->labels, ds->n, g->err,
				       sizeof(g->err));
	if (rc)
		return rc;
	g->slot_images[k] = ds->images;
	g->slot_n[k] = ds->n;
	g->next_slot = (k + 1) % HORA_GPU_MLP_DATA_SLOTS;
	return k;
}

int hora_gpu_mlp_model_step_ds(void *state, const struct hora_dataset *ds, const int64_t *idx,
			       int n, const float *params, float *grads,
			       struct hora_model_stats *stats, hora_grads_ready_fn ready, void *arg)
{
	struct gpu_mlp *g = state;
	int k = slot_of(g, ds);
	if (k < 0)
		return k;
	double loss = 0;
	int64_t correct = 0;
	int rc = g->gpu->mlp_step_idx(g->dev, k, params, grads, idx, n, &loss, &correct, ready, arg,
				      g->err, sizeof(g->err));
	return add_stats(stats, rc, loss, correct, n);
}

const char *hora_gpu_mlp_model_error(void *state)
{
	return state ? ((struct gpu_mlp *)state)->err : "";
}

int hora_gpu_mlp_model_gemms(void *state, int n, struct hora_gpu_gemm *out, int cap)
{
	struct gpu_mlp *g = state;
	return g->gpu->mlp_gemms(g->dev, n, out, cap);
}

int hora_gpu_time_gemms(int device, const struct hora_gpu_gemm *calls, int ncalls, int iters,
		       double *seconds, char *err, size_t errlen)
{
	const struct hora_gpu_ops *ops;
	int rc = need_mlp(&ops, err, errlen);
	return rc ? rc : ops->gemm_time(device, calls, ncalls, iters, seconds, err, errlen);
}
