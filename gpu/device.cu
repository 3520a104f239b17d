/* device.cu - libhora_gpu.so: CUDA device query and hora's first kernel
 * (saxpy), plus the NCCL version, offered to libhora as the ops struct
 * hora_gpu_plugin_v3 (hora_gpu_ops.h) together with the CUDA MLP of mlp.cu,
 * device memory and copies of mem.cu and the NCCL communicator of nccl.cu;
 * and as hora_gpu_plugin_v2 (the same library for a libhora of ABI 2).
 * These two are its only exported symbols.
 *
 * This is the only code of hora linked against the CUDA runtime and NCCL;
 * it does not know libhora (loader.c loads it, forward.c calls it).
 * Every CUDA error is turned into a negative errno with the CUDA message in
 * the caller's buffer; nothing here exits.
 */
#include "hora_gpu_ops.h"
#include "mlp_cuda.h"
#include "v3_cuda.h"

#include "hora_config.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int no_device(cudaError_t e, char *why, size_t whylen)
{
	if (why && whylen)
		snprintf(why, whylen, "no CUDA device: %s", cudaGetErrorString(e));
	return -ENODEV;
}

static int device_count(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess)
		return no_device(e, why, whylen);
	if (n == 0)
		return no_device(cudaErrorNoDevice, why, whylen);
	return n;
}

static int nccl_version(void)
{
	int v = 0;
	if (ncclGetVersion(&v) != ncclSuccess)
		return -EIO;
	return v;
}

static int describe(char *buf, size_t len)
{
	int rt = 0, drv = 0;
	cudaRuntimeGetVersion(&rt);
	cudaDriverGetVersion(&drv);
	int k = snprintf(buf, len, "CUDA runtime %d, driver %d, NCCL %d\n", rt, drv,
			 nccl_version());
	int n = device_count(buf + k, len - (size_t)k);
	if (n < 0) {
		size_t used = (size_t)k + strlen(buf + k);
		if (used + 1 < len) {
			buf[used] = '\n';
			buf[used + 1] = 0;
		}
		return n;
	}
	for (int i = 0; i < n && (size_t)k < len; i++) {
		cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
			continue;
		k += snprintf(buf + k, len - (size_t)k,
			      "device %d: %s, sm_%d%d, %.1f GiB, %d SMs\n", i, p.name, p.major,
			      p.minor, (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount);
	}
	return 0;
}

__global__ static void saxpy(int n, float a, const float *__restrict__ x, float *__restrict__ y)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
		y[i] = a * x[i] + y[i];
}

static int saxpy_check(int n, float a, double *max_abs_err)
{
	int rc = device_count(NULL, 0);
	*max_abs_err = 0;
	if (rc < 0)
		return rc;
	if (n <= 0)
		return -EINVAL;
	float *hx = (float *)malloc(sizeof(float) * (size_t)n);
	float *hy = (float *)malloc(sizeof(float) * (size_t)n);
	float *out = (float *)malloc(sizeof(float) * (size_t)n);
	float *dx = NULL, *dy = NULL;
	rc = -ENOMEM;
	if (!hx || !hy || !out)
		goto out;
	for (int i = 0; i < n; i++) {
		hx[i] = (float)(i % 1000) * 0.001f;
		hy[i] = (float)((i * 7) % 1000) * 0.002f;
	}
	rc = -EIO;
	if (cudaMalloc(&dx, sizeof(float) * (size_t)n) != cudaSuccess ||
	    cudaMalloc(&dy, sizeof(float) * (size_t)n) != cudaSuccess)
		goto out;
	if (cudaMemcpy(dx, hx, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice) != cudaSuccess ||
	    cudaMemcpy(dy, hy, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice) != cudaSuccess)
		goto out;
	saxpy<<<(n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024, 256>>>(n, a, dx, dy);
	if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
		goto out;
	if (cudaMemcpy(out, dy, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess)
		goto out;
	for (int i = 0; i < n; i++) {
		double d = fabs((double)out[i] - (double)(a * hx[i] + hy[i]));
		if (d > *max_abs_err)
			*max_abs_err = d;
	}
	rc = 0;
out:
	cudaFree(dx);
	cudaFree(dy);
	free(hx);
	free(hy);
	free(out);
	return rc;
}

/* The slots of versions 1 and 2 (hora_gpu_ops.h), after abi_version. */
#define V2_SLOTS                                                                                   \
	"CUDA " HORA_CUDA_VERSION ", NCCL " HORA_NCCL_VERSION, device_count, describe, saxpy_check, \
		nccl_version, hora_gpu_mlp_create, hora_gpu_mlp_destroy,                            \
		hora_gpu_mlp_forward_backward, hora_gpu_mlp_evaluate, hora_gpu_mlp_gemms,          \
		hora_gpu_gemm_time, hora_gpu_mlp_load_data, hora_gpu_mlp_step_idx

/* Version 3: v2's slots, then device memory and copies (mem.cu) and NCCL
 * (nccl.cu). What this hora's loader takes. */
extern "C" __attribute__((visibility("default"))) const struct hora_gpu_ops hora_gpu_plugin_v3 = {
	3,
	V2_SLOTS,
	hora_gpu_cu_mem_kind,
	hora_gpu_cu_dev_alloc,
	hora_gpu_cu_dev_free,
	hora_gpu_cu_host_alloc,
	hora_gpu_cu_host_free,
	hora_gpu_cu_copy,
	hora_gpu_cu_nccl_unique_id,
	hora_gpu_cu_nccl_init,
	hora_gpu_cu_nccl_destroy,
	hora_gpu_cu_nccl_coll,
	hora_gpu_cu_nccl_interrupt,
};

/* Version 2 as well, so that a libhora of the previous ABI (whose loader
 * knows hora_gpu_plugin_v2 and _v1 only) still loads this library and gets
 * its MLP; it reads no slot past v2's. */
extern "C" __attribute__((visibility("default"))) const struct hora_gpu_ops hora_gpu_plugin_v2 = {
	2,
	V2_SLOTS,
	NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};
