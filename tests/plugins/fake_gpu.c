/* fake_gpu.c - a stand-in for libhora_gpu.so with no CUDA in it: the same
 * ABI (gpu/hora_gpu_ops.h), devices and kernels done on the CPU. The tests
 * build variants of it to drive the loader (gpu/loader.c) down each path:
 *   FAKE_DEVICES=N     device_count answers N (0: -ENODEV "fake: no device")
 *   FAKE_SYMBOL=name   export the ops under another name (missing symbol)
 *   FAKE_ABI=N         abi_version N (wrong ABI)
 *   FAKE_NULL_SLOT     describe is NULL
 *   FAKE_NEEDS_ABSENT  calls into libhora_test_absent.so.1 (absent.c), a
 *                      library that is nowhere at run time, as libcudart.so.13
 *                      is nowhere on a machine without CUDA. */
#include "hora_gpu_ops.h"

#include <errno.h>
#include <stdio.h>

#ifndef FAKE_DEVICES
#define FAKE_DEVICES 0
#endif
#ifndef FAKE_SYMBOL
#define FAKE_SYMBOL hora_gpu_plugin_v1
#endif
#ifndef FAKE_ABI
#define FAKE_ABI HORA_GPU_ABI_VERSION
#endif

#ifdef FAKE_NEEDS_ABSENT
int hora_test_absent(void);
#endif
#ifdef FAKE_NULL_SLOT
#define FAKE_DESCRIBE NULL
#else
#define FAKE_DESCRIBE fake_describe
#endif

static int fake_device_count(char *why, size_t whylen)
{
#ifdef FAKE_NEEDS_ABSENT
	if (hora_test_absent() != 7)
		return -EIO;
#endif
	if (FAKE_DEVICES > 0)
		return FAKE_DEVICES;
	if (why && whylen)
		snprintf(why, whylen, "fake: no device");
	return -ENODEV;
}

__attribute__((unused)) static int fake_describe(char *buf, size_t len)
{
	int n = fake_device_count(buf, len);
	if (n < 0)
		return n;
	int k = snprintf(buf, len, "fake CUDA, NCCL 0\n");
	for (int i = 0; i < n && k > 0 && (size_t)k < len; i++)
		k += snprintf(buf + k, len - (size_t)k, "device %d: fake\n", i);
	return 0;
}

static int fake_saxpy_check(int n, float a, double *max_abs_err)
{
	(void)a;
	*max_abs_err = 0;
	int rc = fake_device_count(NULL, 0);
	return rc < 0 ? rc : n <= 0 ? -EINVAL : 0;
}

static int fake_nccl_version(void)
{
	return 1;
}

__attribute__((visibility("default"))) const struct hora_gpu_ops FAKE_SYMBOL = {
	.abi_version = FAKE_ABI,
	.build = "fake 1.0",
	.device_count = fake_device_count,
	.describe = FAKE_DESCRIBE,
	.saxpy_check = fake_saxpy_check,
	.nccl_version = fake_nccl_version,
};
