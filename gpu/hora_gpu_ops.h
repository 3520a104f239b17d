/* hora_gpu_ops.h - the ABI between libhora and libhora_gpu.so.
 *
 * libhora_gpu.so (built from device.cu, mlp.cu, mem.cu and nccl.cu, the only
 * part of hora linked against the CUDA runtime, cuBLAS and NCCL) exports
 *
 *	const struct hora_gpu_ops hora_gpu_plugin_v3;
 *
 * (and, for a libhora of the previous ABI, hora_gpu_plugin_v2), and libhora
 * dlopens it on demand (loader.c, hora_gpu.h), so libhora and the `hora`
 * executable need no CUDA library to start. As for NCCL's net plugins and
 * hora's model plugins, the struct starts with abi_version and a later ABI
 * is a new symbol the loader tries first. A slot is only added at the end
 * together with a new version; every slot of a version is mandatory.
 *
 * Version 2 adds the CUDA MLP (the slots after nccl_version): the loader
 * takes a v2 library (every slot mandatory) or a v1 one (then the v2 slots
 * read as NULL in the loader's copy, and the MLP answers -ENOTSUP).
 *
 * Version 3 adds device memory, copies and NCCL (the slots after
 * mlp_step_idx), what the collectives on device buffers are built from.
 * The loader takes hora_gpu_plugin_v3, else _v2, else _v1, copying only the
 * slots that version has: for an older library the newer slots read NULL
 * in the loader's copy, and hora_gpu.h's wrappers answer -ENOTSUP.
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

#define HORA_GPU_ABI_VERSION 3
#define HORA_GPU_PLUGIN_SYMBOL "hora_gpu_plugin_v3"
#define HORA_GPU_PLUGIN_SYMBOL_V2 "hora_gpu_plugin_v2"
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

/* ---- version 3: device memory, copies, NCCL ---------------------------- */

/* sizeof(ncclUniqueId): the bytes rank 0 makes and every rank passes to
 * nccl_init (hora sends them over its authenticated transport). */
#define HORA_GPU_NCCL_ID_BYTES 128

/* copy's direction. */
enum hora_gpu_copy_kind { HORA_GPU_D2H = 0, HORA_GPU_H2D = 1, HORA_GPU_D2D = 2 };

/* nccl_coll's collective. */
enum hora_gpu_coll_kind {
	HORA_GPU_ALLREDUCE = 0,
	HORA_GPU_BROADCAST = 1,
	HORA_GPU_ALLGATHER = 2,
	HORA_GPU_REDUCE_SCATTER = 3
};

/* Opaque: one NCCL communicator, its device and its own stream. */
struct hora_gpu_nccl;

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

	/* ---- version 3: device memory, copies, NCCL -------------------------
	 * Every call with an err buffer returns 0 or a negative errno with the
	 * failing CUDA / NCCL call and its message in err: -EINVAL (an argument
	 * it cannot take), -ENODEV (no such device), -ENOMEM (device or pinned
	 * memory), -EIO (any other CUDA or NCCL error). Every call may be made
	 * from any thread and leaves the calling thread's current CUDA device
	 * as it found it. */

	/* 1 with *device (if device != NULL) set when p points into CUDA device
	 * (or managed) memory; 0 (and *device = -1) when p is host memory
	 * (pageable, pinned, or unknown to CUDA: cudaPointerGetAttributes type
	 * unregistered or host), NULL, or when CUDA has no device or driver
	 * (no pointer can be device memory then); -EIO on any other CUDA error.
	 * Leaves no CUDA error behind for the next call to find (the error of
	 * an unregistered pointer is cleared with cudaGetLastError). */
	int (*mem_kind)(const void *p, int *device);
	/* cudaMalloc of bytes on `device` into *out (bytes 0: *out = NULL, 0). */
	int (*dev_alloc)(int device, size_t bytes, void **out, char *err, size_t errlen);
	/* cudaFree of what dev_alloc returned; NULL is a no-op. */
	void (*dev_free)(void *p);
	/* Page-locked host memory (cudaHostAlloc, portable: pinned for every
	 * device) of bytes into *out (bytes 0: *out = NULL, 0). */
	int (*host_alloc)(size_t bytes, void **out, char *err, size_t errlen);
	/* cudaFreeHost of what host_alloc returned; NULL is a no-op. */
	void (*host_free)(void *p);
	/* Copy bytes from src to dst (kind: enum hora_gpu_copy_kind, which of
	 * them is device memory of `device`) on the library's copy stream of
	 * `device` (one non-blocking stream per device, created on first use,
	 * thread-safe), then wait for it. The caller's buffers are ready: the
	 * work that produced them has finished (the copy stream does not order
	 * against any other stream). bytes 0 is a no-op. */
	int (*copy)(int device, void *dst, const void *src, size_t bytes, int kind, char *err,
		    size_t errlen);
	/* ncclGetUniqueId into id: what every rank of one communicator passes
	 * to nccl_init. */
	int (*nccl_unique_id)(uint8_t id[HORA_GPU_NCCL_ID_BYTES], char *err, size_t errlen);
	/* Rank `rank` of `nranks` of the communicator of id on `device`
	 * (ncclCommInitRank with cudaSetDevice first; a non-blocking NCCL
	 * communicator, so no later call waits for a peer inside NCCL), with a
	 * non-blocking stream of its own; returns once all nranks have joined
	 * (-ETIMEDOUT, aborted, if they have not after 120 s). *out is freed
	 * with nccl_destroy. One thread at a time uses a communicator. */
	int (*nccl_init)(const uint8_t id[HORA_GPU_NCCL_ID_BYTES], int nranks, int rank,
			 int device, struct hora_gpu_nccl **out, char *err, size_t errlen);
	/* abort != 0: ncclCommAbort (a broken communicator: peers may be gone;
	 * it does not wait for them), else ncclCommFinalize + ncclCommDestroy
	 * (aborted instead if the finalize fails or has not ended after 10 s);
	 * then its stream and c are freed. NULL is a no-op. */
	void (*nccl_destroy)(struct hora_gpu_nccl *c, int abort);
	/* One collective on device buffers of c's device, enqueued on c's
	 * stream and waited for by polling (cudaStreamQuery and
	 * ncclCommGetAsyncError every ~50 us after a short spin) up to
	 * timeout_ms (<= 0: no limit): -ETIMEDOUT "NCCL allreduce: not done
	 * after N ms" (the caller then destroys c with abort). The buffers are
	 * ready (the work that produced them has finished: c's stream orders
	 * against no other stream) and send == recv (in place) is allowed.
	 *   kind   enum hora_gpu_coll_kind;
	 *   dtype  hora's code (core/hora.h enum hora_dtype: F32 0, F64 1,
	 *          F16 2, BF16 3, I32 4, I64 5) -> ncclFloat32, ncclFloat64,
	 *          ncclFloat16, ncclBfloat16, ncclInt32, ncclInt64;
	 *   op     hora's code (enum hora_op: SUM 0, AVG 1, MIN 2, MAX 3,
	 *          PROD 4) -> ncclSum, ncclAvg, ncclMin, ncclMax, ncclProd;
	 *          ignored by BROADCAST and ALLGATHER;
	 *   count  NCCL's: elements of the allreduce and the broadcast, the
	 *          allgather's sendcount, the reduce-scatter's recvcount;
	 *   root   the broadcast's (0..nranks-1), ignored otherwise.
	 * -EINVAL naming what NCCL lacks (a dtype, op or kind code it has no
	 * counterpart for, a root out of range) or a buffer that is not device
	 * memory of c's device (count > 0; checked with mem_kind: a host
	 * pointer in an NCCL kernel would kill the CUDA context); -EIO with
	 * the NCCL/CUDA call and its message in err otherwise; after -EIO or
	 * -ETIMEDOUT c is broken: destroy it with abort. */
	int (*nccl_coll)(struct hora_gpu_nccl *c, int kind, const void *send, void *recv,
			 size_t count, int dtype, int op, int root, int timeout_ms, char *err,
			 size_t errlen);
	/* Any thread, while or before another thread is in nccl_coll on c:
	 * that wait, and every later one on c, returns -ECANCELED ("NCCL
	 * allreduce: interrupted") at its next poll, without waiting for its
	 * peers (the job is being stopped: a peer is dead); c must then be
	 * destroyed with abort. Only sets a flag: never blocks. */
	void (*nccl_interrupt)(struct hora_gpu_nccl *c);
};

#ifdef __cplusplus
}
#endif
#endif
