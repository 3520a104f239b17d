/* test_gpu.c - gpu/ through the loader: runs the saxpy kernel of
 * libhora_gpu.so against the CPU when a CUDA device exists; skips with the
 * reason otherwise (no CUDA build, libhora_gpu.so not loadable, no GPU).
 * The loader itself is tested in test_loader.c. */
#include "gpu/hora_gpu.h"

#include <criterion/criterion.h>
#include <errno.h>

static void need_gpu(void)
{
	char why[256] = "";
	int n = hora_gpu_device_count(why, sizeof(why));
	if (n == -ENOTSUP)
		cr_skip_test("gpu tests skipped: hora was built without CUDA (HORA_CUDA=OFF or nvcc/NCCL "
			     "not found)");
	if (n < 1)
		cr_skip_test("gpu tests skipped: %s", why);
}

Test(gpu, saxpy_matches_cpu)
{
	need_gpu();
	double err = -1;
	cr_assert_eq(hora_gpu_saxpy_check(1 << 20, 2.5f, &err), 0);
	cr_assert_lt(err, 1e-6, "max abs error %g", err);
}

Test(gpu, nccl_version_and_describe)
{
	need_gpu();
	cr_assert_gt(hora_gpu_nccl_version(), 20000);
	char buf[4096];
	cr_assert_eq(hora_gpu_describe(buf, sizeof(buf)), 0);
	cr_assert(strstr(buf, "device 0:"), "%s", buf);
}

Test(gpu, no_device_is_reported_not_crashed)
{
	char why[256] = "";
	int n = hora_gpu_device_count(why, sizeof(why));
	cr_assert(n >= 1 || n == -ENODEV || n == -ENOTSUP, "n = %d", n);
	if (n < 0)
		cr_assert(why[0], "no reason given for %d", n);
}
