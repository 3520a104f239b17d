/* coll_device.h - `--device cuda` of the collective benches (coll.c): the
 * buffers in device memory, through hora's GPU module (gpu/hora_gpu.h). */
#ifndef HORA_BENCH_COLL_DEVICE_H
#define HORA_BENCH_COLL_DEVICE_H

#include <stddef.h>

/* Load the GPU module (lib: a library file instead of the usual search, as
 * --gpu-library; NULL: the search) and check a device is there. 0 or -1
 * with why in err. */
int bench_dev_open(const char *lib, char *err, size_t errlen);
/* bytes of device memory on device 0 into *p; 0 or -1 (err) */
int bench_dev_alloc(size_t bytes, void **p, char *err, size_t errlen);
void bench_dev_free(void *p);
/* copies host -> device and back; 0 or -1 (err) */
int bench_dev_put(void *dev, const void *host, size_t bytes, char *err, size_t errlen);
int bench_dev_get(void *host, const void *dev, size_t bytes, char *err, size_t errlen);

#endif
