/* forward.c - the device functions of hora_gpu.h, each a call through the
 * process-wide libhora_gpu.so (loader.c), and the `hora --version` line.
 *
 * When the library is missing (not compiled, not loadable, wrong ABI) every
 * function returns the loader's code with its reason in the caller's buffer,
 * so "no CUDA here" is an answer, not a crash or a failed program start.
 */
#include "hora_gpu.h"

#include "hora_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int hora_gpu_device_count(char *why, size_t whylen)
{
	const struct hora_gpu_ops *ops;
	int rc = hora_gpu_get(&ops, why, whylen);
	return rc ? rc : ops->device_count(why, whylen);
}

int hora_gpu_describe(char *buf, size_t len)
{
	const struct hora_gpu_ops *ops;
	int rc = hora_gpu_get(&ops, buf, len);
	if (rc) {
		size_t n = strlen(buf);
		if (n + 1 < len) {
			buf[n] = '\n';
			buf[n + 1] = 0;
		}
		return rc;
	}
	return ops->describe(buf, len);
}

int hora_gpu_saxpy_check(int n, float a, double *max_abs_err)
{
	const struct hora_gpu_ops *ops;
	*max_abs_err = 0;
	int rc = hora_gpu_get(&ops, NULL, 0);
	return rc ? rc : ops->saxpy_check(n, a, max_abs_err);
}

int hora_gpu_nccl_version(void)
{
	const struct hora_gpu_ops *ops;
	int rc = hora_gpu_get(&ops, NULL, 0);
	return rc ? rc : ops->nccl_version();
}

int hora_gpu_feature(char *buf, size_t len)
{
	const struct hora_gpu_ops *ops;
	char why[1024] = "";
	int rc = hora_gpu_get(&ops, why, sizeof(why));
	if (rc == -ENOTSUP && !HORA_HAVE_CUDA) {
		snprintf(buf, len, "cuda: not compiled");
		return 0;
	}
	const char *built = HORA_HAVE_CUDA ? "compiled (CUDA " HORA_CUDA_VERSION
					     ", NCCL " HORA_NCCL_VERSION ")"
					   : "not compiled";
	if (rc) {
		snprintf(buf, len, "cuda: %s, not available: %s", built, why);
		return 0;
	}
	const char *path = hora_gpu_loaded_path();
	const char *slash = path ? strrchr(path, '/') : NULL;
	char where[1100];
	if (slash)
		snprintf(where, sizeof(where), "%s loaded from %.*s", slash + 1, (int)(slash - path),
			 path);
	else
		snprintf(where, sizeof(where), "%s loaded by the dynamic loader", path);
	int n = ops->device_count(why, sizeof(why));
	/* the library's own build line only when it is not libhora's */
	int same = HORA_HAVE_CUDA && !strcmp(ops->build, "CUDA " HORA_CUDA_VERSION
						       ", NCCL " HORA_NCCL_VERSION);
	int k = snprintf(buf, len, "cuda: %s, %s%s%s%s, %d device%s", built, where,
			 same ? "" : " (", same ? "" : ops->build, same ? "" : ")", n > 0 ? n : 0,
			 n == 1 ? "" : "s");
	if (n <= 0 && k > 0 && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, " (%s)", why);
	return n > 0;
}
