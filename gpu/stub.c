/* stub.c - gpu/ when hora is built without CUDA: every entry is -ENOTSUP. */
#include "hora_gpu.h"

#include <errno.h>
#include <stdio.h>

int hora_gpu_device_count(char *why, size_t whylen)
{
	if (why && whylen)
		snprintf(why, whylen, "hora was built without CUDA");
	return -ENOTSUP;
}

int hora_gpu_describe(char *buf, size_t len)
{
	if (buf && len)
		snprintf(buf, len, "hora was built without CUDA\n");
	return -ENOTSUP;
}

int hora_gpu_saxpy_check(int n, float a, double *max_abs_err)
{
	(void)n;
	(void)a;
	*max_abs_err = 0;
	return -ENOTSUP;
}

int hora_gpu_nccl_version(void)
{
	return -ENOTSUP;
}
