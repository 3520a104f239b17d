/* hora_gpu_ops.h - the ABI between libhora and libhora_gpu.so.
 *
 * libhora_gpu.so (built from device.cu, the only part of hora linked against
 * the CUDA runtime, cuBLAS and NCCL) exports one symbol,
 *
 *	const struct hora_gpu_ops hora_gpu_plugin_v1;
 *
 * and libhora dlopens it on demand (loader.c, hora_gpu.h), so libhora and
 * the `hora` executable need no CUDA library to start. As for NCCL's net
 * plugins and hora's model plugins, the struct starts with abi_version and
 * a later ABI is a new symbol (hora_gpu_plugin_v2) the loader tries first.
 * A slot is only added at the end together with a new version; every slot
 * of version 1 is mandatory.
 *
 * Version 2 adds the CUDA MLP (the slots after nccl_version): the loader
 * takes a v2 library (every slot mandatory) or a v1 one (then the v2 slots
 * read as NULL in the loader's copy, and the MLP answers -ENOTSUP).
 *
 * This header is plain C and includes nothing but <stddef.h> and <stdint.h>,
 * so that a test double (tests/plugins/fake_gpu.c) implements it without
 * CUDA.
 */
#ifndef HORA_GPU_OPS_H
#define HORA_GPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HORA_GPU_ABI_VERSION 2
#define HORA_GPU_PLUGIN_SYMBOL "hora_gpu_plugin_v2"
#define HORA_GPU_PLUGIN_SYMBOL_V1 "hora_gpu_plugin_v1"
#define HORA_GPU_MLP_MAX_LAYERS 9 /* HORA_MODEL_MAX_HIDDEN + 1 */
#define HORA_GPU_MLP_DATA_SLOTS 2  /* data sets resident at once (train, test) */

/* The MLP of model/mlp.c on a device: layer l maps dims[l] -> dims[l+1],
 * ReLU after every layer but the last, softmax cross-entropy at the end.
 * Its parameters are the CPU MLP's flat buffer, layer by layer W (dims[l],
 * dims[l+1]) row-major then b (dims[l+1]): the same layout, so the same
 * buffer goes to either. */
struct hora_gpu_mlp_config {
	int nlayers;                          /* 1..HORA_GPU_MLP_MAX_LAYERS */
	int dims[HORA_GPU_MLP_MAX_LAYERS + 1];
	int max_batch;                        /* largest n of a call */
	int device;                           /* CUDA device index */
};

/* One cuBLAS call in row-major terms, as model/nn.h's trace: C (m, n) =
 * op(A) op(B) + beta C. What `hora bench train --device cuda` replays. */
struct hora_gpu_gemm {
	int trans_a, trans_b, m, n, k, lda, ldb, ldc;
	float beta;
};

/* Opaque: one MLP instance with its device buffers (in the library). */
struct hora_gpu_mlp;

/* Called when layer's gradients [offset, offset + count) (in floats of the
 * flat buffer) are in the caller's grads; layers in decreasing order. */
typedef void (*hora_gpu_ready_fn)(void *arg, int layer, size_t offset, size_t count);
#define HORA_GPU_LIBRARY_NAME "libhora_gpu.so"

struct hora_gpu_ops {
	/* HORA_GPU_ABI_VERSION of the header the library was built with. */
	int abi_version;
	/* What the library was compiled against, e.g. "CUDA 13.0, NCCL 2.28.9"
	 * (static storage). */
	const char *build;
	/* Number of usable CUDA devices (>= 1), or -ENODEV with the CUDA reason
	 * in why (if given) when there is none. */
	int (*device_count)(char *why, size_t whylen);
	/* Runtime/driver/NCCL versions and one line per device into buf.
	 * Returns 0 or -ENODEV (buf says why). */
	int (*describe)(char *buf, size_t len);
	/* y = a*x + y for n floats on device 0 with hora's kernel, compared with
	 * the CPU; *max_abs_err gets the largest difference. Returns 0, -ENODEV,
	 * -EINVAL (n <= 0), -ENOMEM or -EIO. */
	int (*saxpy_check)(int n, float a, double *max_abs_err);
	/* NCCL's version code (e.g. 22809) or -EIO. */
	int (*nccl_version)(void);

	/* ---- version 2: the CUDA MLP ---------------------------------------
	 * Every call returns 0 or a negative errno with the failing CUDA /
	 * cuBLAS call and its message in err: -ENODEV (no device), -EINVAL (a
	 * config or n it cannot take), -ENOMEM (device or pinned memory), -EIO
	 * (any other CUDA or cuBLAS error). One instance is used by one thread
	 * at a time. */

	/* Allocate params, grads (one flat device buffer each), activations and
	 * pinned staging for cfg on cfg->device; a stream, a copy stream, one
	 * event per layer and a cuBLAS handle. */
	int (*mlp_create)(const struct hora_gpu_mlp_config *cfg, struct hora_gpu_mlp **out,
			  char *err, size_t errlen);
	/* Free all of it; NULL is a no-op. */
	void (*mlp_destroy)(struct hora_gpu_mlp *m);
	/* One step on n samples: params (host, the flat buffer) to the device,
	 * x (n, dims[0]) floats and y (n) labels to the device, forward,
	 * softmax cross-entropy, backward; the MEAN gradient of the batch into
	 * grads (host, every float written). Each layer's gradients are copied
	 * back on a second stream as soon as an event says its backward is
	 * done, and ready (may be NULL) is called for it, last layer first,
	 * while the earlier layers still compute. Adds the batch's summed loss
	 * and correct count to *loss_sum / *correct. */
	int (*mlp_forward_backward)(struct hora_gpu_mlp *m, const float *params, float *grads,
				    const float *x, const uint8_t *y, int n, double *loss_sum,
				    int64_t *correct, hora_gpu_ready_fn ready, void *arg, char *err,
				    size_t errlen);
	/* Forward only; adds loss and correct count. */
	int (*mlp_evaluate)(struct hora_gpu_mlp *m, const float *params, const float *x,
			    const uint8_t *y, int n, double *loss_sum, int64_t *correct, char *err,
			    size_t errlen);
	/* The cuBLAS calls of one mlp_forward_backward at batch n into
	 * out[0..cap); returns their number (> cap: out holds the first cap). */
	int (*mlp_gemms)(const struct hora_gpu_mlp *m, int n, struct hora_gpu_gemm *out, int cap);
	/* Run the calls g[0..ng) iters times back to back on device buffers of
	 * their shapes (after one untimed pass); *seconds gets the time of one
	 * pass, by CUDA events. */
	int (*gemm_time)(int device, const struct hora_gpu_gemm *g, int ng, int iters,
			 double *seconds, char *err, size_t errlen);
	/* Copy a data set to the device into slot (0..HORA_GPU_MLP_DATA_SLOTS):
	 * images (n, dims[0]) bytes, labels (n); replaces what the slot held. */
	int (*mlp_load_data)(struct hora_gpu_mlp *m, int slot, const uint8_t *images,
			     const uint8_t *labels, int64_t n, char *err, size_t errlen);
	/* mlp_forward_backward (grads != NULL) or mlp_evaluate (grads NULL) on
	 * samples idx[0..n) of the data set in slot, gathered on the device
	 * (x = byte / 255 as hora_dataset_gather): only idx crosses the bus
	 * besides params and grads. -EINVAL for an empty slot or an index out
	 * of it. */
	int (*mlp_step_idx)(struct hora_gpu_mlp *m, int slot, const float *params, float *grads,
			    const int64_t *idx, int n, double *loss_sum, int64_t *correct,
			    hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen);
};

#ifdef __cplusplus
}
#endif
#endif
