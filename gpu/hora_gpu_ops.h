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
 * This header is plain C and includes nothing but <stddef.h>, so that a test
 * double (tests/plugins/fake_gpu.c) can implement it without CUDA.
 */
#ifndef HORA_GPU_OPS_H
#define HORA_GPU_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HORA_GPU_ABI_VERSION 1
#define HORA_GPU_PLUGIN_SYMBOL "hora_gpu_plugin_v1"
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
};

#ifdef __cplusplus
}
#endif
#endif
