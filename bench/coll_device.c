/* coll_device.c - device buffers for the collective benches (coll_device.h). */
#include "coll_device.h"

#include "hora.h"
#include "gpu/hora_gpu.h"

#include <stdio.h>

int bench_dev_open(const char *lib, char *err, size_t errlen)
{
	if (lib && hora_gpu_use_library(lib)) {
		snprintf(err, errlen, "--gpu-library %s: the GPU module is loaded already", lib);
		return -1;
	}
	char why[400] = "";
	int n = hora_cuda_init(why, sizeof(why));
	if (n < 1) {
		snprintf(err, errlen, "--device cuda: %s", why[0] ? why : "no CUDA device");
		return -1;
	}
	return 0;
}

int bench_dev_alloc(size_t bytes, void **p, char *err, size_t errlen)
{
	return hora_gpu_dev_alloc(0, bytes, p, err, errlen) ? -1 : 0;
}

void bench_dev_free(void *p)
{
	hora_gpu_dev_free(p);
}

int bench_dev_put(void *dev, const void *host, size_t bytes, char *err, size_t errlen)
{
	return bytes && hora_gpu_copy(0, dev, host, bytes, HORA_GPU_H2D, err, errlen) ? -1 : 0;
}

int bench_dev_get(void *host, const void *dev, size_t bytes, char *err, size_t errlen)
{
	return bytes && hora_gpu_copy(0, host, dev, bytes, HORA_GPU_D2H, err, errlen) ? -1 : 0;
}
