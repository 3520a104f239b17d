/* fake_gpu.c - a stand-in for libhora_gpu.so with no CUDA in it: the same
 * ABI (gpu/hora_gpu_ops.h), devices and kernels done on the CPU. The tests
 * build variants of it to drive the loader (gpu/loader.c) down each path:
 *   FAKE_DEVICES=N     device_count answers N (0: -ENODEV "fake: no device")
 *   FAKE_SYMBOL=name   export the ops under another name (missing symbol)
 *   FAKE_ABI=N         abi_version N (wrong ABI; default 1, a v1 library)
 *   FAKE_V2            a version 2 library (hora_gpu_plugin_v2, abi 2, the
 *                      MLP slots answering -ENODEV "fake: no MLP");
 *                      FAKE_V2_NULL_SLOT leaves its mlp_create NULL
 *   FAKE_NULL_SLOT     describe is NULL
 *   FAKE_NEEDS_ABSENT  calls into libhora_test_absent.so.1 (absent.c), a
 *                      library that is nowhere at run time, as libcudart.so.13
 *                      is nowhere on a machine without CUDA. */
#include "hora_gpu_ops.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#ifndef FAKE_DEVICES
#define FAKE_DEVICES 0
#endif
#ifndef FAKE_SYMBOL
#define FAKE_SYMBOL hora_gpu_plugin_v1
#endif
#ifndef FAKE_ABI
#define FAKE_ABI 1
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

#ifdef FAKE_V2
__attribute__((unused)) static int fake_mlp_create(const struct hora_gpu_mlp_config *cfg, struct hora_gpu_mlp **out,
			   char *err, size_t errlen)
{
	(void)cfg;
	*out = NULL;
	snprintf(err, errlen, "fake: no MLP");
	return -ENODEV;
}

static void fake_mlp_destroy(struct hora_gpu_mlp *m)
{
	(void)m;
}

static int fake_mlp_fb(struct hora_gpu_mlp *m, const float *params, float *grads, const float *x,
		       const uint8_t *y, int n, double *loss_sum, int64_t *correct,
		       hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	(void)m, (void)params, (void)grads, (void)x, (void)y, (void)n, (void)loss_sum;
	(void)correct, (void)ready, (void)arg;
	snprintf(err, errlen, "fake: no MLP");
	return -ENODEV;
}

static int fake_mlp_eval(struct hora_gpu_mlp *m, const float *params, const float *x,
			 const uint8_t *y, int n, double *loss_sum, int64_t *correct, char *err,
			 size_t errlen)
{
	return fake_mlp_fb(m, params, NULL, x, y, n, loss_sum, correct, NULL, NULL, err, errlen);
}

static int fake_mlp_gemms(const struct hora_gpu_mlp *m, int n, struct hora_gpu_gemm *out, int cap)
{
	(void)m, (void)n, (void)out, (void)cap;
	return 0;
}

static int fake_mlp_load_data(struct hora_gpu_mlp *m, int slot, const uint8_t *images,
			      const uint8_t *labels, int64_t n, char *err, size_t errlen)
{
	(void)m, (void)slot, (void)images, (void)labels, (void)n;
	snprintf(err, errlen, "fake: no MLP");
	return -ENODEV;
}

static int fake_mlp_step_idx(struct hora_gpu_mlp *m, int slot, const float *params, float *grads,
			     const int64_t *idx, int n, double *loss_sum, int64_t *correct,
			     hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	(void)slot, (void)idx;
	return fake_mlp_fb(m, params, grads, NULL, NULL, n, loss_sum, correct, ready, arg, err,
			   errlen);
}

static int fake_gemm_time(int device, const struct hora_gpu_gemm *g, int ng, int iters,
			  double *seconds, char *err, size_t errlen)
{
	(void)device, (void)g, (void)ng, (void)iters;
	*seconds = 0;
	snprintf(err, errlen, "fake: no device");
	return -ENODEV;
}
#endif

__attribute__((visibility("default"))) const struct hora_gpu_ops FAKE_SYMBOL = {
	.abi_version = FAKE_ABI,
	.build = "fake 1.0",
	.device_count = fake_device_count,
	.describe = FAKE_DESCRIBE,
	.saxpy_check = fake_saxpy_check,
	.nccl_version = fake_nccl_version,
#ifdef FAKE_V2
#ifdef FAKE_V2_NULL_SLOT
	.mlp_create = NULL,
#else
	.mlp_create = fake_mlp_create,
#endif
	.mlp_destroy = fake_mlp_destroy,
	.mlp_forward_backward = fake_mlp_fb,
	.mlp_evaluate = fake_mlp_eval,
	.mlp_gemms = fake_mlp_gemms,
	.gemm_time = fake_gemm_time,
	.mlp_load_data = fake_mlp_load_data,
	.mlp_step_idx = fake_mlp_step_idx,
#endif
};
