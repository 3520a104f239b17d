/* nn.h - building blocks shared by the built-in models (internal).
 *
 * Dense layers on row-major float matrices, through CBLAS. Not a tensor
 * library: just the handful of kernels an MLP needs, each one pass over
 * memory. The sgemm wrapper can record its calls (struct hora_gemm_trace) so
 * `hora bench train` can replay exactly the GEMMs of a training step alone.
 */
#ifndef HORA_MODEL_NN_H
#define HORA_MODEL_NN_H

#include "hora_model.h"

#include <stdbool.h>

#define HORA_GEMM_TRACE_MAX 64

struct hora_gemm_call {
	bool trans_a, trans_b;
	int m, n, k, lda, ldb, ldc;
	float beta;
};

struct hora_gemm_trace {
	int n;        /* calls recorded */
	bool dropped; /* more than HORA_GEMM_TRACE_MAX calls were made */
	struct hora_gemm_call calls[HORA_GEMM_TRACE_MAX];
};

/* Every built-in model's state starts with this, so the bench can attach a
 * trace to any of them (hora_model_builtin_trace). */
struct hora_nn_common {
	struct hora_gemm_trace *trace; /* optional; NULL = no recording */
};

/* C (m,n) = op(A) op(B) + beta C, row-major; records into t when set. */
void hora_nn_sgemm(struct hora_gemm_trace *t, bool trans_a, bool trans_b, int m, int n, int k,
		   const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Attach (or detach with NULL) a GEMM trace to a model built by a built-in
 * ops. Returns 0, or -ENOTSUP when ops is not a built-in. */
int hora_model_builtin_trace(const struct hora_model_ops *ops, void *state,
			     struct hora_gemm_trace *t);

/* z (rows, n) += bias (n) per row; then z = max(z, 0) when relu. */
void hora_nn_bias_act(float *z, const float *bias, int rows, int n, bool relu);

/* Softmax cross-entropy over logits (rows, c) with labels y. Adds to stats.
 * When dlogits is not NULL writes d(mean loss)/d(logits) = (p - onehot)/rows
 * (dlogits may alias logits). */
void hora_nn_softmax_xent(float *logits, const uint8_t *y, int rows, int c, float *dlogits,
			  struct hora_model_stats *stats);

/* db (n) = column sums of dz (rows, n). */
void hora_nn_bias_grad(const float *dz, int rows, int n, float *db);

/* d (count) *= (h > 0). */
void hora_nn_relu_backward(float *d, const float *h, size_t count);

/* Deterministic initialisers driven by a splitmix64 state. */
uint64_t hora_nn_rng_next(uint64_t *s);
void hora_nn_init_he_normal(float *w, size_t count, int fan_in, uint64_t *s);
void hora_nn_init_glorot_uniform(float *w, size_t count, int fan_in, int fan_out, uint64_t *s);

/* Check a config against what the built-ins support; writes a reason. */
int hora_nn_check_config(const struct hora_model_config *cfg, int max_hidden, char *err,
			 size_t errlen);

#endif
