/* mlp.cu - the MNIST MLP of model/mlp.c on a CUDA device (libhora_gpu.so,
 * ABI version 2: the mlp_* and gemm_time slots of hora_gpu_ops.h).
 *
 * The same network, parameter layout and loss as the CPU MLP: layer l maps
 * dims[l] -> dims[l+1] with W (dims[l], dims[l+1]) row-major then b, ReLU
 * after every layer but the last, softmax cross-entropy, the MEAN gradient.
 * Params and grads are one flat device buffer each (layers as views); GEMMs
 * are cuBLAS sgemm (FP32, no TF32: CUBLAS_DEFAULT_MATH), bias+ReLU is one
 * fused kernel, softmax+cross-entropy+dlogits another. Each layer's backward
 * ends with an event; a second stream waits on it and copies that layer's
 * gradients to pinned memory while the compute stream goes on with the
 * layer below, and the host hands each layer to the ready callback as its
 * copy-done event fires. Every reduction has a fixed order (one thread per
 * column for the bias gradient, the batch's loss summed on the host in
 * double), so the same inputs give the same bits run to run.
 *
 * A data set can live on the device (mlp_load_data): a step then sends only
 * the batch's sample indices and gathers x and y with a kernel.
 *
 * Small batches (<= GRAPH_MAX_BATCH) on a resident data set run as one CUDA
 * graph per (batch, data set), captured on first use: params and indices
 * up, gather, forward, loss, backward, the gradients down, one launch. The
 * graph has the same kernels and cuBLAS calls, so the same bits; its ready
 * callbacks come after the whole step (the step is microseconds). A capture
 * that fails turns graphs off for the instance and the step runs plainly.
 *
 * Not here: the optimizer (the caller's, on host params), NCCL.
 *
 * Every CUDA and cuBLAS call is checked; a failure returns -EIO (-ENOMEM
 * for allocations) with "<call>: <message>" in err. Nothing here exits.
 */
#include "mlp_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256
#define GRAPH_MAX_BATCH 256 /* launch-bound up to here: a step is one graph */
#define GRAPHS 8
#define BLAS_WS_BYTES (32u << 20)

struct hora_gpu_mlp {
	struct hora_gpu_mlp_config cfg;
	size_t off[HORA_GPU_MLP_MAX_LAYERS];   /* first float of layer l */
	size_t count[HORA_GPU_MLP_MAX_LAYERS]; /* floats of layer l (W then b) */
	size_t nparams;
	int widest; /* max over dims[1..] */
	cudaStream_t s, copy_s;
	cudaEvent_t bwd_done[HORA_GPU_MLP_MAX_LAYERS], copy_done[HORA_GPU_MLP_MAX_LAYERS];
	cublasHandle_t blas;
	float *d_params, *d_grads;
	float *d_x, *d_act[HORA_GPU_MLP_MAX_LAYERS], *d_delta[2];
	unsigned char *d_y;
	float *d_loss; /* (max_batch) per-sample loss */
	int *d_correct; /* (max_batch) 1 when argmax == label */
	/* pinned host staging */
	float *h_params, *h_grads, *h_x, *h_loss;
	unsigned char *h_y;
	int *h_correct;
	int64_t *h_idx, *d_idx; /* (max_batch) sample indices */
	/* data sets resident on the device (mlp_load_data) */
	unsigned char *d_images[HORA_GPU_MLP_DATA_SLOTS], *d_labels[HORA_GPU_MLP_DATA_SLOTS];
	int64_t data_n[HORA_GPU_MLP_DATA_SLOTS];
	/* CUDA graphs of a whole resident-data step, one per (batch, slot) */
	struct {
		int n, slot;
		cudaGraphExec_t exec;
	} graph[GRAPHS];
	int ngraphs;
	int graphs_off; /* a capture failed once: plain launches from then on */
	void *blas_ws;  /* cuBLAS workspace: no allocation inside a capture */
};

/* ---- error helpers ------------------------------------------------------ */

static int cuda_fail(cudaError_t e, const char *call, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "%s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
	if (e == cudaErrorMemoryAllocation)
		return -ENOMEM;
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice)
		return -ENODEV;
	return -EIO;
}

static const char *blas_name(cublasStatus_t st)
{
	switch (st) {
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
	case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
	default: return "cuBLAS error";
	}
}

static int blas_fail(cublasStatus_t st, const char *call, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "%s: %s (%d)", call, blas_name(st), (int)st);
	return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

/* CK(call): on failure return the code with the call's text in err. */
#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return cuda_fail(e_, #call, err, errlen);                                  \
	} while (0)
#define CKB(call)                                                                                  \
	do {                                                                                       \
		cublasStatus_t st_ = (call);                                                       \
		if (st_ != CUBLAS_STATUS_SUCCESS)                                                  \
			return blas_fail(st_, #call, err, errlen);                                 \
	} while (0)
/* a kernel launch: its configuration error, if any */
#define CKL(what) CK((what, cudaGetLastError()))

/* ---- kernels -------------------------------------------------------------- */

/* z (rows, n) += bias per row; then max(z, 0) when relu. */
__global__ static void bias_act(float *z, const float *__restrict__ bias, int rows, int n, int relu)
{
	size_t total = (size_t)rows * n;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)blockDim.x * gridDim.x) {
		float v = z[i] + bias[i % n];
		z[i] = relu && v < 0.0f ? 0.0f : v;
	}
}

/* One thread per row of logits (rows, c): the loss and whether argmax ==
 * label; with dlogits, (softmax - onehot) / rows. As model/nn.c: the max is
 * subtracted, ties go to the first index. */
__global__ static void softmax_xent(const float *__restrict__ logits, const unsigned char *y,
				    int rows, int c, float *dlogits, float *loss, int *correct)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= rows)
		return;
	const float *z = logits + (size_t)r * c;
	float mx = z[0];
	int arg = 0;
	for (int j = 1; j < c; j++)
		if (z[j] > mx) {
			mx = z[j];
			arg = j;
		}
	/* the arithmetic of model/nn.c's hora_nn_softmax_xent, in float */
	const int lab = y[r];
	float sum = 0.0f;
	for (int j = 0; j < c; j++)
		sum += expf(z[j] - mx);
	loss[r] = logf(sum) - (z[lab] - mx);
	correct[r] = arg == lab;
	if (dlogits) {
		const float inv_rows = 1.0f / (float)rows, sc = inv_rows / sum;
		float *d = dlogits + (size_t)r * c;
		for (int j = 0; j < c; j++)
			d[j] = expf(z[j] - mx) * sc;
		d[lab] -= inv_rows;
	}
}

/* db (n) = column sums of dz (rows, n): one thread per column, rows in order. */
__global__ static void bias_grad(const float *__restrict__ dz, int rows, int n, float *db)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= n)
		return;
	float s = 0.0f;
	for (int r = 0; r < rows; r++)
		s += dz[(size_t)r * n + j];
	db[j] = s;
}

/* x (n, dim) = images[idx[r]] / 255, y = labels[idx[r]]: hora_dataset_gather */
__global__ static void gather(const unsigned char *__restrict__ images,
			      const unsigned char *__restrict__ labels, const int64_t *__restrict__ idx,
			      int n, int dim, float *x, unsigned char *y)
{
	const float scale = 1.0f / 255.0f;
	size_t total = (size_t)n * dim;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)blockDim.x * gridDim.x) {
		size_t r = i / dim, j = i % dim;
		x[i] = (float)images[(size_t)idx[r] * dim + j] * scale;
		if (j == 0)
			y[r] = labels[idx[r]];
	}
}

/* d *= (h > 0) */
__global__ static void relu_backward(float *d, const float *__restrict__ h, size_t count)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)blockDim.x * gridDim.x)
		if (h[i] <= 0.0f)
			d[i] = 0.0f;
}

static unsigned grid_for(size_t n)
{
	size_t g = (n + BLOCK - 1) / BLOCK;
	return (unsigned)(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

/* ---- GEMM in row-major terms ----------------------------------------------- */

/* C (m,n) = op(A) op(B) + beta C, all row-major: cuBLAS is column-major,
 * and a row-major matrix read column-major is its transpose, so this is
 * C^T = op(B)^T op(A)^T with the operands swapped. */
static cublasStatus_t gemm(cublasHandle_t h, const struct hora_gpu_gemm *g, const float *a,
			   const float *b, float *c)
{
	const float one = 1.0f;
	return cublasSgemm(h, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
			   g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g->n, g->m, g->k, &one, b, g->ldb,
			   a, g->lda, &g->beta, c, g->ldc);
}

/* The GEMMs of a step, in order: forward l = 0..L-1, then for l = L-1..0
 * dW_l (and for l > 0 d(in)). */
static int step_gemms(const struct hora_gpu_mlp *m, int n, struct hora_gpu_gemm *out, int cap,
		      int backward)
{
	const int L = m->cfg.nlayers;
	const int *d = m->cfg.dims;
	int k = 0;
	for (int l = 0; l < L; l++) {
		struct hora_gpu_gemm g = {0, 0, n, d[l + 1], d[l], d[l], d[l + 1], d[l + 1], 0.0f};
		if (k < cap)
			out[k] = g;
		k++;
	}
	for (int l = L - 1; backward && l >= 0; l--) {
		struct hora_gpu_gemm gw = {1, 0, d[l], d[l + 1], n, d[l], d[l + 1], d[l + 1], 0.0f};
		if (k < cap)
			out[k] = gw;
		k++;
		if (l > 0) {
			struct hora_gpu_gemm gx = {0, 1, n, d[l], d[l + 1], d[l + 1], d[l + 1], d[l], 0.0f};
			if (k < cap)
				out[k] = gx;
			k++;
		}
	}
	return k;
}

int hora_gpu_mlp_gemms(const struct hora_gpu_mlp *m, int n, struct hora_gpu_gemm *out, int cap)
{
	return step_gemms(m, n, out, cap, 1);
}

/* ---- create / destroy -------------------------------------------------------- */

void hora_gpu_mlp_destroy(struct hora_gpu_mlp *m)
{
	if (!m)
		return;
	cudaSetDevice(m->cfg.device);
	if (m->s)
		cudaStreamSynchronize(m->s);
	if (m->copy_s)
		cudaStreamSynchronize(m->copy_s);
	for (int k = 0; k < m->ngraphs; k++)
		cudaGraphExecDestroy(m->graph[k].exec);
	if (m->blas)
		cublasDestroy(m->blas);
	cudaFree(m->blas_ws);
	for (int l = 0; l < HORA_GPU_MLP_MAX_LAYERS; l++) {
		if (m->bwd_done[l])
			cudaEventDestroy(m->bwd_done[l]);
		if (m->copy_done[l])
			cudaEventDestroy(m->copy_done[l]);
	}
	if (m->s)
		cudaStreamDestroy(m->s);
	if (m->copy_s)
		cudaStreamDestroy(m->copy_s);
	cudaFree(m->d_params); /* cudaFree(NULL) is a no-op */
	cudaFree(m->d_grads);
	cudaFree(m->d_x);
	cudaFree(m->d_y);
	cudaFree(m->d_loss);
	cudaFree(m->d_correct);
	cudaFree(m->d_act[0]); /* one allocation behind act[] and delta[] */
	cudaFreeHost(m->h_params);
	cudaFreeHost(m->h_grads);
	cudaFreeHost(m->h_x);
	cudaFreeHost(m->h_y);
	cudaFreeHost(m->h_loss);
	cudaFreeHost(m->h_correct);
	cudaFreeHost(m->h_idx);
	cudaFree(m->d_idx);
	for (int k = 0; k < HORA_GPU_MLP_DATA_SLOTS; k++) {
		cudaFree(m->d_images[k]);
		cudaFree(m->d_labels[k]);
	}
	free(m);
}

static int check_config(const struct hora_gpu_mlp_config *c, char *err, size_t errlen)
{
	if (c->nlayers < 1 || c->nlayers > HORA_GPU_MLP_MAX_LAYERS || c->max_batch < 1 ||
	    c->max_batch > (1 << 20) || c->device < 0) {
		snprintf(err, errlen, "cuda mlp: %d layers (1..%d), max_batch %d (1..1048576), device %d",
			 c->nlayers, HORA_GPU_MLP_MAX_LAYERS, c->max_batch, c->device);
		return -EINVAL;
	}
	for (int l = 0; l <= c->nlayers; l++)
		if (c->dims[l] < 1 || c->dims[l] > (1 << 16)) {
			snprintf(err, errlen, "cuda mlp: width %d of layer %d not in 1..65536", c->dims[l],
				 l);
			return -EINVAL;
		}
	return 0;
}

/* Everything create allocates on the device and pinned; m->cfg set. */
static int alloc_buffers(struct hora_gpu_mlp *m, char *err, size_t errlen)
{
	const int L = m->cfg.nlayers, *d = m->cfg.dims;
	const size_t B = (size_t)m->cfg.max_batch;
	size_t acts = 0;
	for (int l = 0; l < L; l++)
		acts += (size_t)d[l + 1];
	float *scratch;
	CK(cudaMalloc((void **)&m->d_params, m->nparams * sizeof(float)));
	CK(cudaMalloc((void **)&m->d_grads, m->nparams * sizeof(float)));
	CK(cudaMalloc((void **)&m->d_x, B * d[0] * sizeof(float)));
	CK(cudaMalloc((void **)&m->d_y, B));
	CK(cudaMalloc((void **)&m->d_loss, B * sizeof(float)));
	CK(cudaMalloc((void **)&m->d_correct, B * sizeof(int)));
	CK(cudaMalloc((void **)&scratch, (acts + 2 * (size_t)m->widest) * B * sizeof(float)));
	for (int l = 0; l < L; l++) {
		m->d_act[l] = scratch;
		scratch += B * d[l + 1];
	}
	m->d_delta[0] = scratch;
	m->d_delta[1] = scratch + B * m->widest;
	CK(cudaMallocHost((void **)&m->h_params, m->nparams * sizeof(float)));
	CK(cudaMallocHost((void **)&m->h_grads, m->nparams * sizeof(float)));
	CK(cudaMallocHost((void **)&m->h_x, B * d[0] * sizeof(float)));
	CK(cudaMallocHost((void **)&m->h_y, B));
	CK(cudaMallocHost((void **)&m->h_loss, B * sizeof(float)));
	CK(cudaMallocHost((void **)&m->h_correct, B * sizeof(int)));
	CK(cudaMallocHost((void **)&m->h_idx, B * sizeof(int64_t)));
	CK(cudaMalloc((void **)&m->d_idx, B * sizeof(int64_t)));
	return 0;
}

static int create_in(struct hora_gpu_mlp *m, char *err, size_t errlen)
{
	const int L = m->cfg.nlayers, *d = m->cfg.dims;
	int ndev = 0;
	CK(cudaGetDeviceCount(&ndev));
	if (m->cfg.device >= ndev) {
		snprintf(err, errlen, "cuda mlp: device %d, but this machine has %d", m->cfg.device,
			 ndev);
		return -ENODEV;
	}
	CK(cudaSetDevice(m->cfg.device));
	size_t off = 0;
	m->widest = 0;
	for (int l = 0; l < L; l++) {
		m->off[l] = off;
		m->count[l] = (size_t)d[l] * d[l + 1] + d[l + 1];
		off += m->count[l];
		if (d[l + 1] > m->widest)
			m->widest = d[l + 1];
	}
	m->nparams = off;
	CK(cudaStreamCreateWithFlags(&m->s, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&m->copy_s, cudaStreamNonBlocking));
	for (int l = 0; l < L; l++) {
		CK(cudaEventCreateWithFlags(&m->bwd_done[l], cudaEventDisableTiming));
		CK(cudaEventCreateWithFlags(&m->copy_done[l], cudaEventDisableTiming));
	}
	CKB(cublasCreate(&m->blas));
	CKB(cublasSetStream(m->blas, m->s));
	CKB(cublasSetMathMode(m->blas, CUBLAS_DEFAULT_MATH)); /* FP32, no TF32 */
	CKB(cublasSetPointerMode(m->blas, CUBLAS_POINTER_MODE_HOST));
	CK(cudaMalloc(&m->blas_ws, BLAS_WS_BYTES));
	CKB(cublasSetWorkspace(m->blas, m->blas_ws, BLAS_WS_BYTES));
	return alloc_buffers(m, err, errlen);
}

int hora_gpu_mlp_create(const struct hora_gpu_mlp_config *cfg, struct hora_gpu_mlp **out, char *err,
		      size_t errlen)
{
	*out = NULL;
	int rc = check_config(cfg, err, errlen);
	if (rc)
		return rc;
	struct hora_gpu_mlp *m = (struct hora_gpu_mlp *)calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "cuda mlp: out of host memory");
		return -ENOMEM;
	}
	m->cfg = *cfg;
	rc = create_in(m, err, errlen);
	if (rc) {
		hora_gpu_mlp_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}

/* ---- a step ------------------------------------------------------------------ */

/* params to the device through pinned staging, on m->s */
static int upload_params(struct hora_gpu_mlp *m, const float *params, char *err, size_t errlen)
{
	/* the staging may still feed the previous step's copies */
	CK(cudaStreamSynchronize(m->s));
	memcpy(m->h_params, params, m->nparams * sizeof(float));
	CK(cudaMemcpyAsync(m->d_params, m->h_params, m->nparams * sizeof(float),
			   cudaMemcpyHostToDevice, m->s));
	return 0;
}

/* a host batch x, y to the device (after upload_params) */
static int upload_xy(struct hora_gpu_mlp *m, const float *x, const unsigned char *y, int n,
		     char *err, size_t errlen)
{
	const size_t xb = (size_t)n * m->cfg.dims[0] * sizeof(float);
	memcpy(m->h_x, x, xb);
	memcpy(m->h_y, y, (size_t)n);
	CK(cudaMemcpyAsync(m->d_x, m->h_x, xb, cudaMemcpyHostToDevice, m->s));
	CK(cudaMemcpyAsync(m->d_y, m->h_y, (size_t)n, cudaMemcpyHostToDevice, m->s));
	return 0;
}

static int enqueue_gather(struct hora_gpu_mlp *m, int slot, int n, char *err, size_t errlen);

/* samples idx[0..n) of the resident data set in slot into d_x, d_y */
static int gather_idx(struct hora_gpu_mlp *m, int slot, const int64_t *idx, int n, char *err,
		      size_t errlen)
{
	if (slot < 0 || slot >= HORA_GPU_MLP_DATA_SLOTS || !m->d_images[slot]) {
		snprintf(err, errlen, "cuda mlp: no data set in slot %d", slot);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++)
		if (idx[i] < 0 || idx[i] >= m->data_n[slot]) {
			snprintf(err, errlen, "cuda mlp: sample %lld not in the %lld of slot %d",
				 (long long)idx[i], (long long)m->data_n[slot], slot);
			return -EINVAL;
		}
	memcpy(m->h_idx, idx, (size_t)n * sizeof(int64_t));
	return enqueue_gather(m, slot, n, err, errlen);
}

/* h_idx to the device and the gather kernel, on m->s (capturable) */
static int enqueue_gather(struct hora_gpu_mlp *m, int slot, int n, char *err, size_t errlen)
{
	CK(cudaMemcpyAsync(m->d_idx, m->h_idx, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice,
			   m->s));
	const int dim = m->cfg.dims[0];
	CKL((gather<<<grid_for((size_t)n * dim), BLOCK, 0, m->s>>>(
		m->d_images[slot], m->d_labels[slot], m->d_idx, n, dim, m->d_x, m->d_y)));
	return 0;
}

/* forward and the loss; with backward, dlogits into d_delta[0] */
static int forward_loss(struct hora_gpu_mlp *m, int n, int backward, char *err, size_t errlen)
{
	const int L = m->cfg.nlayers, *d = m->cfg.dims;
	struct hora_gpu_gemm g[HORA_GPU_MLP_MAX_LAYERS];
	step_gemms(m, n, g, L, 0);
	const float *in = m->d_x;
	for (int l = 0; l < L; l++) {
		const float *w = m->d_params + m->off[l];
		const float *b = w + (size_t)d[l] * d[l + 1];
		CKB(gemm(m->blas, &g[l], in, w, m->d_act[l]));
		size_t total = (size_t)n * d[l + 1];
		CKL((bias_act<<<grid_for(total), BLOCK, 0, m->s>>>(m->d_act[l], b, n, d[l + 1],
								 l + 1 < L)));
		in = m->d_act[l];
	}
	CKL((softmax_xent<<<grid_for((size_t)n), BLOCK, 0, m->s>>>(
		m->d_act[L - 1], m->d_y, n, d[L], backward ? m->d_delta[0] : NULL, m->d_loss,
		m->d_correct)));
	CK(cudaMemcpyAsync(m->h_loss, m->d_loss, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost,
			   m->s));
	CK(cudaMemcpyAsync(m->h_correct, m->d_correct, (size_t)n * sizeof(int),
			   cudaMemcpyDeviceToHost, m->s));
	return 0;
}

/* backward, l = L-1..0; each layer's grads copied on copy_s after bwd_done[l] */
static int backward(struct hora_gpu_mlp *m, int n, int per_layer, char *err, size_t errlen)
{
	const int L = m->cfg.nlayers, *d = m->cfg.dims;
	float *dz = m->d_delta[0];
	for (int l = L - 1; l >= 0; l--) {
		const int din = d[l], dout = d[l + 1];
		const float *in = l ? m->d_act[l - 1] : m->d_x;
		const float *w = m->d_params + m->off[l];
		float *gw = m->d_grads + m->off[l];
		struct hora_gpu_gemm gwc = {1, 0, din, dout, n, din, dout, dout, 0.0f};
		CKB(gemm(m->blas, &gwc, in, dz, gw));
		CKL((bias_grad<<<grid_for((size_t)dout), BLOCK, 0, m->s>>>(dz, n, dout,
									  gw + (size_t)din * dout)));
		if (per_layer) {
			CK(cudaEventRecord(m->bwd_done[l], m->s));
			CK(cudaStreamWaitEvent(m->copy_s, m->bwd_done[l], 0));
			CK(cudaMemcpyAsync(m->h_grads + m->off[l], gw, m->count[l] * sizeof(float),
					   cudaMemcpyDeviceToHost, m->copy_s));
			CK(cudaEventRecord(m->copy_done[l], m->copy_s));
		}
		if (l > 0) {
			float *dnext = dz == m->d_delta[0] ? m->d_delta[1] : m->d_delta[0];
			struct hora_gpu_gemm gx = {0, 1, n, din, dout, dout, dout, din, 0.0f};
			CKB(gemm(m->blas, &gx, dz, w, dnext));
			size_t cnt = (size_t)n * din;
			CKL((relu_backward<<<grid_for(cnt), BLOCK, 0, m->s>>>(dnext, m->d_act[l - 1],
									  cnt)));
			dz = dnext;
		}
	}
	if (!per_layer) /* all of them at once, on the compute stream */
		CK(cudaMemcpyAsync(m->h_grads, m->d_grads, m->nparams * sizeof(float),
				   cudaMemcpyDeviceToHost, m->s));
	return 0;
}

/* the batch's loss and correct count, in sample order (deterministic) */
static void add_stats(const struct hora_gpu_mlp *m, int n, double *loss_sum, int64_t *correct)
{
	double s = 0;
	int64_t c = 0;
	for (int i = 0; i < n; i++) {
		s += m->h_loss[i];
		c += m->h_correct[i];
	}
	*loss_sum += s;
	*correct += c;
}

static int check_batch(const struct hora_gpu_mlp *m, int n, char *err, size_t errlen)
{
	if (n < 1 || n > m->cfg.max_batch) {
		snprintf(err, errlen, "cuda mlp: batch of %d, not in 1..%d", n, m->cfg.max_batch);
		return -EINVAL;
	}
	return 0;
}

/* the step once params, x and y are on the device */
static int run_step(struct hora_gpu_mlp *m, float *grads, int n, double *loss_sum,
		    int64_t *correct, hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	int rc;
	if ((rc = forward_loss(m, n, grads != NULL, err, errlen)))
		return rc;
	if (grads) {
		if ((rc = backward(m, n, 1, err, errlen)))
			return rc;
		/* each layer as its copy lands, last layer first, while the
		 * layers below still compute */
		for (int l = m->cfg.nlayers - 1; l >= 0; l--) {
			CK(cudaEventSynchronize(m->copy_done[l]));
			memcpy(grads + m->off[l], m->h_grads + m->off[l], m->count[l] * sizeof(float));
			if (ready)
				ready(arg, l, m->off[l], m->count[l]);
		}
	}
	CK(cudaStreamSynchronize(m->s));
	add_stats(m, n, loss_sum, correct);
	return 0;
}

int hora_gpu_mlp_forward_backward(struct hora_gpu_mlp *m, const float *params, float *grads,
				  const float *x, const uint8_t *y, int n, double *loss_sum,
				  int64_t *correct, hora_gpu_ready_fn ready, void *arg, char *err,
				  size_t errlen)
{
	int rc = check_batch(m, n, err, errlen);
	if (rc)
		return rc;
	CK(cudaSetDevice(m->cfg.device));
	if ((rc = upload_params(m, params, err, errlen)) || (rc = upload_xy(m, x, y, n, err, errlen)))
		return rc;
	return run_step(m, grads, n, loss_sum, correct, ready, arg, err, errlen);
}

int hora_gpu_mlp_evaluate(struct hora_gpu_mlp *m, const float *params, const float *x,
			  const uint8_t *y, int n, double *loss_sum, int64_t *correct, char *err,
			  size_t errlen)
{
	return hora_gpu_mlp_forward_backward(m, params, NULL, x, y, n, loss_sum, correct, NULL,
					     NULL, err, errlen);
}

/* Capture a whole resident-data step at batch n on slot into a graph. */
static int capture(struct hora_gpu_mlp *m, int slot, int n, cudaGraphExec_t *exec, char *err,
		   size_t errlen)
{
	cudaGraph_t g = NULL;
	*exec = NULL;
	CK(cudaStreamBeginCapture(m->s, cudaStreamCaptureModeThreadLocal));
	int rc = 0;
	cudaError_t e = cudaMemcpyAsync(m->d_params, m->h_params, m->nparams * sizeof(float),
					cudaMemcpyHostToDevice, m->s);
	if (e != cudaSuccess)
		rc = cuda_fail(e, "cudaMemcpyAsync(params) in capture", err, errlen);
	if (!rc)
		rc = enqueue_gather(m, slot, n, err, errlen);
	if (!rc)
		rc = forward_loss(m, n, 1, err, errlen);
	if (!rc)
		rc = backward(m, n, 0, err, errlen);
	e = cudaStreamEndCapture(m->s, &g); /* always: the stream leaves capture mode */
	if (!rc && e != cudaSuccess)
		rc = cuda_fail(e, "cudaStreamEndCapture", err, errlen);
	if (!rc && (e = cudaGraphInstantiate(exec, g, 0)) != cudaSuccess)
		rc = cuda_fail(e, "cudaGraphInstantiate", err, errlen);
	if (g)
		cudaGraphDestroy(g);
	if (rc) {
		*exec = NULL;
		cudaGetLastError(); /* a capture error is not sticky: clear it */
	}
	return rc;
}

/* The graph for (n, slot), captured on first use; NULL when graphs are off. */
static cudaGraphExec_t graph_for(struct hora_gpu_mlp *m, int slot, int n)
{
	for (int k = 0; k < m->ngraphs; k++)
		if (m->graph[k].n == n && m->graph[k].slot == slot)
			return m->graph[k].exec;
	if (m->graphs_off || m->ngraphs == GRAPHS)
		return NULL;
	char why[256];
	cudaGraphExec_t exec;
	if (capture(m, slot, n, &exec, why, sizeof(why))) {
		m->graphs_off = 1;
		return NULL;
	}
	m->graph[m->ngraphs].n = n;
	m->graph[m->ngraphs].slot = slot;
	m->graph[m->ngraphs++].exec = exec;
	return exec;
}

/* The step as one graph launch, or 1 when it must run plainly. */
static int graph_step(struct hora_gpu_mlp *m, int slot, const float *params, float *grads,
		      const int64_t *idx, int n, double *loss_sum, int64_t *correct,
		      hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	if (!grads || n > GRAPH_MAX_BATCH || m->graphs_off)
		return 1;
	if (slot < 0 || slot >= HORA_GPU_MLP_DATA_SLOTS || !m->d_images[slot])
		return 1; /* the plain path says what is wrong */
	for (int i = 0; i < n; i++)
		if (idx[i] < 0 || idx[i] >= m->data_n[slot])
			return 1;
	CK(cudaStreamSynchronize(m->s)); /* the staging is free */
	memcpy(m->h_params, params, m->nparams * sizeof(float));
	memcpy(m->h_idx, idx, (size_t)n * sizeof(int64_t));
	cudaGraphExec_t exec = graph_for(m, slot, n);
	if (!exec)
		return 1;
	CK(cudaGraphLaunch(exec, m->s));
	CK(cudaStreamSynchronize(m->s));
	for (int l = m->cfg.nlayers - 1; l >= 0; l--) {
		memcpy(grads + m->off[l], m->h_grads + m->off[l], m->count[l] * sizeof(float));
		if (ready)
			ready(arg, l, m->off[l], m->count[l]);
	}
	add_stats(m, n, loss_sum, correct);
	return 0;
}

int hora_gpu_mlp_step_idx(struct hora_gpu_mlp *m, int slot, const float *params, float *grads,
			  const int64_t *idx, int n, double *loss_sum, int64_t *correct,
			  hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	int rc = check_batch(m, n, err, errlen);
	if (rc)
		return rc;
	CK(cudaSetDevice(m->cfg.device));
	rc = graph_step(m, slot, params, grads, idx, n, loss_sum, correct, ready, arg, err, errlen);
	if (rc <= 0)
		return rc;
	if ((rc = upload_params(m, params, err, errlen)) ||
	    (rc = gather_idx(m, slot, idx, n, err, errlen)))
		return rc;
	return run_step(m, grads, n, loss_sum, correct, ready, arg, err, errlen);
}

int hora_gpu_mlp_load_data(struct hora_gpu_mlp *m, int slot, const uint8_t *images,
			   const uint8_t *labels, int64_t n, char *err, size_t errlen)
{
	if (slot < 0 || slot >= HORA_GPU_MLP_DATA_SLOTS || n < 1) {
		snprintf(err, errlen, "cuda mlp: data slot %d (0..%d), %lld samples", slot,
			 HORA_GPU_MLP_DATA_SLOTS - 1, (long long)n);
		return -EINVAL;
	}
	CK(cudaSetDevice(m->cfg.device));
	CK(cudaStreamSynchronize(m->s)); /* no step may still read the old set */
	for (int k = 0; k < m->ngraphs; k++) /* they name the old set's memory */
		cudaGraphExecDestroy(m->graph[k].exec);
	m->ngraphs = 0;
	cudaFree(m->d_images[slot]);
	cudaFree(m->d_labels[slot]);
	m->d_images[slot] = NULL;
	m->d_labels[slot] = NULL;
	m->data_n[slot] = 0;
	const size_t bytes = (size_t)n * m->cfg.dims[0];
	CK(cudaMalloc((void **)&m->d_images[slot], bytes));
	CK(cudaMalloc((void **)&m->d_labels[slot], (size_t)n));
	CK(cudaMemcpy(m->d_images[slot], images, bytes, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(m->d_labels[slot], labels, (size_t)n, cudaMemcpyHostToDevice));
	/* a copy from pageable memory may return before its DMA is done, and
	 * m->s does not order against the legacy stream: wait for it here */
	CK(cudaDeviceSynchronize());
	m->data_n[slot] = n;
	return 0;
}

/* ---- the GEMMs alone ------------------------------------------------------- */

static int gemm_time_in(const struct hora_gpu_gemm *g, int ng, int iters, double *seconds,
			float **buf, cudaStream_t s, cublasHandle_t h, cudaEvent_t ev[2], char *err,
			size_t errlen)
{
	size_t need[3] = {0, 0, 0}; /* the largest A, B and C of the calls */
	for (int i = 0; i < ng; i++) {
		size_t ar = g[i].trans_a ? g[i].k : g[i].m, br = g[i].trans_b ? g[i].n : g[i].k;
		size_t sz[3] = {ar * g[i].lda, br * g[i].ldb, (size_t)g[i].m * g[i].ldc};
		for (int j = 0; j < 3; j++)
			if (sz[j] > need[j])
				need[j] = sz[j];
	}
	for (int j = 0; j < 3; j++) {
		CK(cudaMalloc((void **)&buf[j], need[j] * sizeof(float)));
		CK(cudaMemsetAsync(buf[j], 0, need[j] * sizeof(float), s));
	}
	CKB(cublasSetStream(h, s));
	CKB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
	for (int i = 0; i < ng; i++) /* untimed: cuBLAS picks its kernels */
		CKB(gemm(h, &g[i], buf[0], buf[1], buf[2]));
	CK(cudaEventRecord(ev[0], s));
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < ng; i++)
			CKB(gemm(h, &g[i], buf[0], buf[1], buf[2]));
	CK(cudaEventRecord(ev[1], s));
	CK(cudaEventSynchronize(ev[1]));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
	*seconds = ms * 1e-3 / iters;
	return 0;
}

int hora_gpu_gemm_time(int device, const struct hora_gpu_gemm *g, int ng, int iters,
		     double *seconds, char *err, size_t errlen)
{
	*seconds = 0;
	if (ng < 1 || iters < 1) {
		snprintf(err, errlen, "gemm_time: %d calls, %d iterations", ng, iters);
		return -EINVAL;
	}
	CK(cudaSetDevice(device));
	float *buf[3] = {NULL, NULL, NULL};
	cudaStream_t s = NULL;
	cublasHandle_t h = NULL;
	cudaEvent_t ev[2] = {NULL, NULL};
	cudaError_t e;
	cublasStatus_t st;
	int rc;
	if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
		rc = cuda_fail(e, "cudaStreamCreateWithFlags", err, errlen);
	else if ((e = cudaEventCreate(&ev[0])) != cudaSuccess ||
		 (e = cudaEventCreate(&ev[1])) != cudaSuccess)
		rc = cuda_fail(e, "cudaEventCreate", err, errlen);
	else if ((st = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS)
		rc = blas_fail(st, "cublasCreate", err, errlen);
	else
		rc = gemm_time_in(g, ng, iters, seconds, buf, s, h, ev, err, errlen);
	if (s)
		cudaStreamSynchronize(s);
	if (h)
		cublasDestroy(h);
	for (int j = 0; j < 3; j++)
		cudaFree(buf[j]);
	for (int j = 0; j < 2; j++)
		if (ev[j])
			cudaEventDestroy(ev[j]);
	if (s)
		cudaStreamDestroy(s);
	return rc;
}

