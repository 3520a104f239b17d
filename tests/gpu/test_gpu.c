/* test_gpu.c - gpu/ through the loader: runs the saxpy kernel of
 * libhora_gpu.so against the CPU, and its ABI version 3 (device memory,
 * copies, a size-1 NCCL communicator) when a CUDA device exists; skips with
 * the reason otherwise (no CUDA build, libhora_gpu.so not loadable, no GPU).
 * The loader itself is tested in test_loader.c. */
#include "gpu/hora_gpu.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- ABI version 3 on the device: memory, copies, NCCL of one rank ----- */

static const size_t dtype_size[] = {4, 8, 2, 2, 4, 8}; /* enum hora_dtype */

/* n finite values of hora dtype t (f16/bf16 as bit patterns of normal
 * numbers near 1), different for each base. */
static void fill_dtype(void *buf, int t, size_t n, int base)
{
	for (size_t i = 0; i < n; i++) {
		long v = base + (long)i;
		switch (t) {
		case 0: ((float *)buf)[i] = (float)v * 0.5f; break;
		case 1: ((double *)buf)[i] = (double)v * 0.25; break;
		case 2: ((uint16_t *)buf)[i] = (uint16_t)(0x3c00 + (v & 0x3ff)); break;
		case 3: ((uint16_t *)buf)[i] = (uint16_t)(0x3f80 + (v & 0x7f)); break;
		case 4: ((int32_t *)buf)[i] = (int32_t)v - 7; break;
		default: ((int64_t *)buf)[i] = v * 1000003 - 7; break;
		}
	}
}

Test(gpu, device_memory_and_copies)
{
	need_gpu();
	char err[512];
	enum { N = 1 << 16 };
	float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
	void *d = NULL, *d2 = NULL, *pinned = NULL;
	cr_assert(host && back);
	for (int i = 0; i < N; i++)
		host[i] = (float)i * 0.25f;
	int dev = 7;
	/* nothing device-side made yet, the library is loaded (need_gpu) */
	cr_assert_eq(hora_gpu_mem_kind(host, &dev), 0);
	cr_assert_eq(dev, -1);
	cr_assert_eq(hora_gpu_dev_alloc(0, N * sizeof(float), &d, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_dev_alloc(0, N * sizeof(float), &d2, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(hora_gpu_host_alloc(N * sizeof(float), &pinned, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(hora_gpu_mem_kind(d, &dev), 1);
	cr_assert_eq(dev, 0);
	cr_assert_eq(hora_gpu_mem_kind((char *)d + 4096, &dev), 1, "inside the allocation");
	cr_assert_eq(hora_gpu_mem_kind(pinned, &dev), 0, "pinned memory is host memory");
	cr_assert_eq(hora_gpu_mem_kind(back, &dev), 0, "pageable memory is host memory");
	/* the unregistered pointers above left no error behind for these */
	cr_assert_eq(hora_gpu_copy(0, d, host, N * sizeof(float), HORA_GPU_H2D, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(hora_gpu_copy(0, d2, d, N * sizeof(float), HORA_GPU_D2D, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(hora_gpu_copy(0, pinned, d2, N * sizeof(float), HORA_GPU_D2H, err,
				   sizeof(err)),
		     0, "%s", err);
	cr_assert_arr_eq(pinned, host, N * sizeof(float));
	cr_assert_eq(hora_gpu_copy(0, back, d2, N * sizeof(float), HORA_GPU_D2H, err,
				   sizeof(err)),
		     0, "%s", err);
	cr_assert_arr_eq(back, host, N * sizeof(float));
	cr_assert_eq(hora_gpu_copy(0, back, d, 0, HORA_GPU_D2H, err, sizeof(err)), 0);
	cr_assert_eq(hora_gpu_copy(0, back, d, 8, 3, err, sizeof(err)), -EINVAL);
	hora_gpu_dev_free(d);
	hora_gpu_dev_free(d2);
	hora_gpu_host_free(pinned);
	free(host);
	free(back);
}

/* A size-1 NCCL communicator: every collective of every dtype and op is the
 * identity (the sum, mean, min, max, product of one), in place or not. */
Test(gpu, nccl_of_one_rank_every_dtype_and_op, .timeout = 120)
{
	need_gpu();
	char err[512];
	uint8_t id[HORA_GPU_NCCL_ID_BYTES];
	struct hora_gpu_nccl *c = NULL;
	cr_assert_eq(hora_gpu_nccl_unique_id(id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err)), 0, "%s", err);
	enum { N = 1000 };
	void *send = NULL, *recv = NULL;
	char want[N * 8], got[N * 8];
	cr_assert_eq(hora_gpu_dev_alloc(0, N * 8, &send, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_dev_alloc(0, N * 8, &recv, err, sizeof(err)), 0, "%s", err);
	for (int kind = HORA_GPU_ALLREDUCE; kind <= HORA_GPU_REDUCE_SCATTER; kind++)
		for (int t = 0; t < 6; t++)
			for (int op = 0; op < 5; op++)
				for (int inplace = 0; inplace < 2; inplace++) {
					size_t bytes = N * dtype_size[t];
					void *out = inplace ? send : recv;
					fill_dtype(want, t, N, 3 * kind + op);
					cr_assert_eq(hora_gpu_copy(0, send, want, bytes, HORA_GPU_H2D,
								   err, sizeof(err)),
						     0, "%s", err);
					cr_assert_eq(hora_gpu_nccl_coll(c, kind, send, out, N, t, op, 0,
									10000, err, sizeof(err)),
						     0, "kind %d dtype %d op %d: %s", kind, t, op, err);
					cr_assert_eq(hora_gpu_copy(0, got, out, bytes, HORA_GPU_D2H,
								   err, sizeof(err)),
						     0, "%s", err);
					cr_assert_arr_eq(got, want, bytes, "kind %d dtype %d op %d",
							 kind, t, op);
				}
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_BROADCAST, send, send, N, 0, 0, 1, 1000, err,
					sizeof(err)),
		     -EINVAL, "root 1 of 1 rank");
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, send, send, N, 9, 0, 0, 1000, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "dtype code 9"), "%s", err);
	/* a host buffer would be an illegal address in NCCL's kernel */
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, want, send, 4, 0, 0, 0, 1000, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "NCCL allreduce: send buffer") && strstr(err, "is host memory"),
		  "%s", err);
	hora_gpu_nccl_destroy(c, 0);
	/* a second communicator, aborted: returns, frees */
	cr_assert_eq(hora_gpu_nccl_unique_id(id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, send, recv, N, 0, 0, 0, 0, err,
					sizeof(err)),
		     0, "%s", err);
	hora_gpu_nccl_destroy(c, 1);
	hora_gpu_dev_free(send);
	hora_gpu_dev_free(recv);
}

/* The real library loaded on a machine without a usable device (here: a
 * CUDA build, no GPU or driver): version 3 answers with a code and the
 * CUDA reason, never a crash, and host memory is host memory. */
Test(gpu, v3_without_a_device_says_why)
{
	char why[256] = "", err[512] = "";
	int n = hora_gpu_device_count(why, sizeof(why));
	if (n != -ENODEV)
		cr_skip_test("not a loaded library without a device (%d: %s)", n, why);
	char host[64] = "";
	int dev = 3;
	cr_assert_eq(hora_gpu_mem_kind(host, &dev), 0);
	cr_assert_eq(dev, -1);
	void *p = (void *)1;
	int rc = hora_gpu_dev_alloc(0, 64, &p, err, sizeof(err));
	cr_assert_eq(rc, -ENODEV, "%d: %s", rc, err);
	cr_assert(err[0], "no reason");
	cr_assert_null(p);
	err[0] = 0;
	rc = hora_gpu_host_alloc(64, &p, err, sizeof(err));
	cr_assert(rc < 0 && err[0], "%d: %s", rc, err);
	err[0] = 0;
	rc = hora_gpu_copy(0, host, host + 32, 8, HORA_GPU_D2H, err, sizeof(err));
	cr_assert(rc < 0 && err[0], "%d: %s", rc, err);
	uint8_t id[HORA_GPU_NCCL_ID_BYTES] = {0};
	struct hora_gpu_nccl *c = (void *)1;
	err[0] = 0;
	rc = hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err));
	cr_assert(rc < 0 && err[0], "%d: %s", rc, err);
	cr_assert_null(c);
	cr_assert_eq(hora_gpu_mem_kind(host, &dev), 0, "after the errors too");
}
