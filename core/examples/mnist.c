/* mnist.c - Horovod's MNIST example, in C with hora (README.md shows
 * the two side by side). Every worker runs this same program:
 *   HORA_SECRET=... build/hora launch deploy/clusters/local.yaml ... (or by hand:)
 *   HORA_CONFIG=deploy/clusters/local.yaml HORA_PROC=g build/hora-example-mnist
 * Without HORA_CONFIG it trains alone. Linked against libhora.so, public API only. */
#include "hora.h"
#include "hora_model.h"

#include <stdio.h>
#include <stdlib.h>

#define DIE(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), exit(1))

int main(int argc, char **argv)
{
	char err[1024];
	struct hora_comm *comm; /* hvd.init() */
	if (hora_init(NULL, &comm, err, sizeof(err)))
		DIE("init: %s", err);
	const int rank = hora_rank(comm), size = hora_size(comm), bs = 32, epochs = argc > 1 ? atoi(argv[1]) : 3;

	struct hora_dataset train = {0}, test = {0};
	if (hora_dataset_load_dir(&train, "data/mnist", "train", 10, err, sizeof(err)) ||
	    hora_dataset_load_dir(&test, "data/mnist", "test", 10, err, sizeof(err)))
		DIE("data: %s (run deploy/get-data.sh)", err);

	const struct hora_model_ops *ops = hora_model_find("mnist_mlp"); /* model = Net() */
	struct hora_model_config mc = {.input_dim = 784, .num_classes = 10, .nhidden = 1,
				       .hidden = {128}, .max_batch = 512};
	void *model;
	struct hora_model_layer layers[4];
	if (ops->create(&mc, &model, err, sizeof(err)))
		DIE("model: %s", err);
	int nl = ops->layout(model, layers, 4);
	size_t np = layers[nl - 1].offset + layers[nl - 1].count;
	float *params = malloc(np * sizeof(float)), *grads = malloc(np * sizeof(float));
	ops->init_params(model, params, 42);
	hora_broadcast_parameters(comm, params, np, 0); /* hvd.broadcast_parameters(..., root_rank=0) */

	/* lr scaled by the number of workers; the optimizer wrapped so that
	 * gradients are averaged across workers: hvd.DistributedOptimizer(...) */
	struct hora_optim_config oc = {.kind = HORA_OPTIM_SGD, .lr = 0.01 * size, .momentum = 0.5};
	struct hora_optim *sgd;
	struct hora_dist_optim *opt;
	if (hora_optim_create(&oc, np, &sgd) || hora_dist_optim_create(comm, sgd, np, NULL, &opt))
		DIE("optimizer: bad settings");

	float *x = malloc((size_t)mc.max_batch * 784 * sizeof(float));
	uint8_t y[512];
	int64_t idx[512];
	const int64_t steps = train.n / ((int64_t)bs * size); /* the same count on every rank */
	for (int epoch = 1; epoch <= epochs; epoch++) {
		struct hora_model_stats st = {0}, vs = {0};
		for (int64_t s = 0; s < steps; s++) { /* DistributedSampler: rank's own batches */
			for (int j = 0; j < bs; j++)
				idx[j] = (s * size + rank) * bs + j;
			hora_dataset_gather(&train, idx, bs, x, y);
			struct hora_batch b = {x, y, bs};
			hora_dist_optim_begin(opt, grads, 1.0);
			if (ops->forward_backward(model, params, grads, &b, &st, hora_dist_optim_ready_fn(opt), opt) ||
			    hora_dist_optim_step(opt, params, oc.lr))
				DIE("rank %d: step %lld: %s", rank, (long long)s, hora_comm_last_error(comm));
		}
		for (int64_t i = rank * 512; i < test.n; i += (int64_t)size * 512) { /* test shard */
			int n = test.n - i < 512 ? (int)(test.n - i) : 512;
			for (int j = 0; j < n; j++)
				idx[j] = i + j;
			hora_dataset_gather(&test, idx, n, x, y);
			ops->evaluate(model, params, &(struct hora_batch){x, y, n}, &vs);
		}
		/* metric_average(): sums over workers */
		double m[5] = {st.loss_sum, (double)st.n, (double)vs.correct, (double)vs.n, vs.loss_sum};
		if (hora_allreduce(comm, m, m, 5, HORA_F64, HORA_SUM))
			DIE("allreduce: %s", hora_comm_last_error(comm));
		if (rank == 0)
			printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.2f%% (%d workers)\n",
			       epoch, m[0] / m[1], m[4] / m[3], 100.0 * m[2] / m[3], size);
	}
	hora_dist_optim_destroy(opt);
	hora_optim_destroy(sgd);
	ops->destroy(model);
	hora_finalize(comm);
	free(x), free(params), free(grads);
	hora_dataset_deinit(&train), hora_dataset_deinit(&test);
	return 0;
}
