/* mlp_cuda.h - the CUDA MLP's functions inside libhora_gpu.so (internal to
 * the library: device.cu puts them in the ops struct; hidden visibility).
 * Their contracts are those of the slots of the same names in
 * hora_gpu_ops.h. */
#ifndef HORA_GPU_MLP_CUDA_H
#define HORA_GPU_MLP_CUDA_H

#include "hora_gpu_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

int hora_gpu_mlp_create(const struct hora_gpu_mlp_config *cfg, struct hora_gpu_mlp **out,
			char *err, size_t errlen);
void hora_gpu_mlp_destroy(struct hora_gpu_mlp *m);
int hora_gpu_mlp_forward_backward(struct hora_gpu_mlp *m, const float *params, float *grads,
				  const float *x, const uint8_t *y, int n, double *loss_sum,
				  int64_t *correct, hora_gpu_ready_fn ready, void *arg, char *err,
				  size_t errlen);
int hora_gpu_mlp_evaluate(struct hora_gpu_mlp *m, const float *params, const float *x,
			  const uint8_t *y, int n, double *loss_sum, int64_t *correct, char *err,
			  size_t errlen);
int hora_gpu_mlp_gemms(const struct hora_gpu_mlp *m, int n, struct hora_gpu_gemm *out, int cap);
int hora_gpu_gemm_time(int device, const struct hora_gpu_gemm *g, int ng, int iters,
		       double *seconds, char *err, size_t errlen);
int hora_gpu_mlp_load_data(struct hora_gpu_mlp *m, int slot, const uint8_t *images,
			   const uint8_t *labels, int64_t n, char *err, size_t errlen);
int hora_gpu_mlp_step_idx(struct hora_gpu_mlp *m, int slot, const float *params, float *grads,
			  const int64_t *idx, int n, double *loss_sum, int64_t *correct,
			  hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
