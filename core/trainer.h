/* trainer.h - one worker's training state and step (internal).
 *
 * A trainer owns what a step touches: the model instance, the flat params
 * and grads (64-byte aligned, one allocation each), the optimizer and the
 * batch buffers. hora_train_run (train.c) drives epochs over it; the
 * training bench (bench/train.c) drives steps over it directly, so both
 * measure the same code.
 */
#ifndef HORA_CORE_TRAINER_H
#define HORA_CORE_TRAINER_H

#include "hora.h"
#include "hora_model.h"

struct hora_trainer {
	const struct hora_model_ops *ops;
	struct hora_model_plugin *plugin; /* NULL for a built-in */
	void *model;
	struct hora_model_layer *layers;
	int nlayers;
	size_t nparams;
	float *params, *grads;
	struct hora_optim *optim;
	float *x;   /* (max_batch, input_dim) */
	uint8_t *y; /* (max_batch) */
	int max_batch, input_dim;
	struct hora_model_config mc; /* what the model was built with (hora_trainer_grow) */
	struct hora_train_config cfg;
};

/* Resolve the model, build it for input_dim/num_classes, allocate params,
 * grads and the optimizer, and initialise params from cfg->seed.
 * Returns 0, HORA_ERR_MODEL / HORA_ERR_CONFIG (reason in err) or -ENOMEM. */
int hora_trainer_init(struct hora_trainer *t, const struct hora_train_config *cfg, int input_dim,
		      int num_classes, char *err, size_t errlen);
void hora_trainer_deinit(struct hora_trainer *t);

/* Make room for batches of up to n samples (a worker's share of a global
 * batch that grew: train.elastic.batch: global after workers left). The
 * model is built again for the larger batch (its state is scratch: the
 * parameters are t->params) and the batch buffers grow; on failure
 * nothing changed. Returns 0, -ENOMEM or HORA_ERR_MODEL (reason in err). */
int hora_trainer_grow(struct hora_trainer *t, int n, char *err, size_t errlen);

/* One SGD step on samples idx[0..n) of ds at learning rate lr; adds the
 * batch's loss/acc to *stats. Returns 0 or -errno. */
int hora_trainer_step(struct hora_trainer *t, const struct hora_dataset *ds, const int64_t *idx,
		      int n, double lr, struct hora_model_stats *stats);

/* Ask the CPU for samples idx[0..n) of ds, a batch to come: a batch's
 * rows lie at random in the data set, and its gather otherwise waits on
 * memory for each in turn (~0.5 us a 784-byte row here: 7-10 % of a step
 * at batch 32, perf in bench/RESULTS.md session 17); issued while other
 * work runs (the averaging, the optimizer) they arrive together. Nothing
 * for train.device: cuda (the data set is on the device). */
void hora_trainer_prefetch(const struct hora_trainer *t, const struct hora_dataset *ds, const int64_t *idx, int n);

/* Forward and backward only (gradients in t->grads, ready called as they
 * become final); the caller steps the optimizer. */
int hora_trainer_forward_backward(struct hora_trainer *t, const struct hora_dataset *ds,
				  const int64_t *idx, int n, struct hora_model_stats *stats,
				  hora_grads_ready_fn ready, void *arg);

/* What the model said about its last failure: the CUDA call and message for
 * train.device: cuda (gpu/hora_gpu.h), "" otherwise. Owned by t. */
const char *hora_trainer_model_error(const struct hora_trainer *t);

/* Evaluate on samples [lo, hi) of ds (all of it: 0, ds->n); fills *stats.
 * Returns 0 or -errno. */
int hora_trainer_evaluate_range(struct hora_trainer *t, const struct hora_dataset *ds, int64_t lo,
				int64_t hi, struct hora_model_stats *stats);

#endif
