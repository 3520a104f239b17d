/* v3_cuda.h - the ABI version 3 functions inside libhora_gpu.so (internal
 * to the library: device.cu puts them in the ops struct; hidden
 * visibility): device memory and copies (mem.cu), the NCCL communicator
 * and its collectives (nccl.cu). Their contracts are those of the slots of
 * the same names in hora_gpu_ops.h. */
#ifndef HORA_GPU_V3_CUDA_H
#define HORA_GPU_V3_CUDA_H

#include "hora_gpu_ops.h"

#include <errno.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>
/* A CUDA error as hora's code, "<call>: <message> (<name>)" in err. */
static inline int hora_gpu_cuda_fail(cudaError_t e, const char *call, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "%s: %s (%s)", call, cudaGetErrorString(e),
			 cudaGetErrorName(e));
	if (e == cudaErrorMemoryAllocation)
		return -ENOMEM;
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
	    e == cudaErrorInvalidDevice)
		return -ENODEV;
	return -EIO;
}
#endif

/* mem.cu */
int hora_gpu_cu_mem_kind(const void *p, int *device);
int hora_gpu_cu_dev_alloc(int device, size_t bytes, void **out, char *err, size_t errlen);
void hora_gpu_cu_dev_free(void *p);
int hora_gpu_cu_host_alloc(size_t bytes, void **out, char *err, size_t errlen);
void hora_gpu_cu_host_free(void *p);
int hora_gpu_cu_copy(int device, void *dst, const void *src, size_t bytes, int kind, char *err,
		     size_t errlen);

/* nccl.cu */
int hora_gpu_cu_nccl_unique_id(uint8_t id[HORA_GPU_NCCL_ID_BYTES], char *err, size_t errlen);
int hora_gpu_cu_nccl_init(const uint8_t id[HORA_GPU_NCCL_ID_BYTES], int nranks, int rank,
			  int device, struct hora_gpu_nccl **out, char *err, size_t errlen);
void hora_gpu_cu_nccl_destroy(struct hora_gpu_nccl *c, int abort);
void hora_gpu_cu_nccl_interrupt(struct hora_gpu_nccl *c);
int hora_gpu_cu_nccl_coll(struct hora_gpu_nccl *c, int kind, const void *send, void *recv,
			  size_t count, int dtype, int op, int root, int timeout_ms, char *err,
			  size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
