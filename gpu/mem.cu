/* mem.cu - libhora_gpu.so's device memory, pinned host memory and copies
 * (ABI version 3: the mem_kind, dev_alloc/free, host_alloc/free and copy
 * slots of hora_gpu_ops.h).
 *
 * A copy runs on the library's copy stream of its device: one non-blocking
 * stream per device, created on first use under a mutex, never destroyed
 * (the library is never unloaded), and is waited for before the call
 * returns. Every call leaves the calling thread's current device as it was.
 *
 * Not here: the NCCL communicator (nccl.cu), the MLP's own buffers (mlp.cu).
 * Every CUDA call is checked; a failure returns -EIO (-ENOMEM for an
 * allocation, -ENODEV without a device) with "<call>: <message>" in err.
 */
#include "v3_cuda.h"

#include <cuda_runtime.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#define MAX_DEVICES 64

/* The copy stream of each device; guarded by g_lock, set once. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t g_copy[MAX_DEVICES];

/* CK(call): on failure set rc with the call's text in err and go to out. */
#define CK(call)                                                                  \
	do {                                                                      \
		cudaError_t e_ = (call);                                          \
		if (e_ != cudaSuccess) {                                          \
			rc = hora_gpu_cuda_fail(e_, #call, err, errlen);          \
			goto out;                                                 \
		}                                                                 \
	} while (0)

int hora_gpu_cu_mem_kind(const void *p, int *device)
{
	if (device)
		*device = -1;
	if (!p)
		return 0;
	cudaPointerAttributes a;
	cudaError_t e = cudaPointerGetAttributes(&a, p);
	/* an unregistered pointer set the last error before CUDA 11 (and may
	 * still): clear it so that no later check sees it */
	if (e != cudaSuccess || a.type == cudaMemoryTypeUnregistered)
		cudaGetLastError();
	if (e == cudaErrorInvalidValue || e == cudaErrorNoDevice ||
	    e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError)
		return 0; /* not CUDA's, or no CUDA at all: host memory */
	if (e != cudaSuccess)
		return -EIO;
	if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
		return 0; /* cudaMemoryTypeHost (pinned) or Unregistered */
	if (device)
		*device = a.device;
	return 1;
}

int hora_gpu_cu_dev_alloc(int device, size_t bytes, void **out, char *err, size_t errlen)
{
	int prev = -1, rc = 0;
	*out = NULL;
	if (bytes == 0)
		return 0;
	CK(cudaGetDevice(&prev));
	CK(cudaSetDevice(device));
	CK(cudaMalloc(out, bytes));
out:
	if (prev >= 0 && prev != device)
		cudaSetDevice(prev);
	if (rc && err && errlen) {
		/* say how much on which device; keep the CUDA text after it */
		char why[256];
		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "device %d: %zu bytes: %s", device, bytes, why);
	}
	return rc;
}

void hora_gpu_cu_dev_free(void *p)
{
	if (p)
		cudaFree(p);
}

int hora_gpu_cu_host_alloc(size_t bytes, void **out, char *err, size_t errlen)
{
	int rc = 0;
	*out = NULL;
	if (bytes == 0)
		return 0;
	CK(cudaHostAlloc(out, bytes, cudaHostAllocPortable));
out:
	return rc;
}

void hora_gpu_cu_host_free(void *p)
{
	if (p)
		cudaFreeHost(p);
}

/* The copy stream of device (current already), created on first use. */
static int copy_stream(int device, cudaStream_t *s, char *err, size_t errlen)
{
	int rc = 0;
	pthread_mutex_lock(&g_lock);
	if (!g_copy[device])
		CK(cudaStreamCreateWithFlags(&g_copy[device], cudaStreamNonBlocking));
	*s = g_copy[device];
out:
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int hora_gpu_cu_copy(int device, void *dst, const void *src, size_t bytes, int kind, char *err,
		     size_t errlen)
{
	static const cudaMemcpyKind kinds[] = {cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice,
					       cudaMemcpyDeviceToDevice};
	int prev = -1, rc = 0;
	cudaStream_t s;
	if (kind < HORA_GPU_D2H || kind > HORA_GPU_D2D || device < 0 || device >= MAX_DEVICES) {
		snprintf(err, errlen, "copy: kind %d on device %d: no such %s", kind, device,
			 device < 0 || device >= MAX_DEVICES ? "device" : "kind");
		return -EINVAL;
	}
	if (bytes == 0)
		return 0;
	CK(cudaGetDevice(&prev));
	CK(cudaSetDevice(device));
	rc = copy_stream(device, &s, err, errlen);
	if (rc)
		goto out;
	CK(cudaMemcpyAsync(dst, src, bytes, kinds[kind], s));
	CK(cudaStreamSynchronize(s));
out:
	if (prev >= 0 && prev != device)
		cudaSetDevice(prev);
	return rc;
}
