/* test_gpu_mem.c - gpu/forward_mem.c: the device-memory, copy and NCCL
 * wrappers of hora_gpu.h (ABI version 3) through the process-wide library,
 * driven with the stand-ins of tests/plugins/fake_gpu.c (FAKE_V3: device
 * memory and NCCL of one rank on the CPU), so it runs in every build:
 * mem_kind loads nothing, an older library answers -ENOTSUP with its
 * version, one that cannot load gives the loader's reason, and a v3
 * library's calls reach it with their arguments and results (the fake
 * refuses memory of the wrong kind, which is what it is there to catch).
 * Criterion runs each test in its own process: the library starts
 * unloaded in each. */
#include "gpu/hora_gpu.h"
#include "tests/plugins/fake_gpu.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[1024];

static struct hora_fake_gpu_counters counters(const char *path)
{
	struct hora_fake_gpu_counters c;
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(h, "%s is not loaded", path);
	hora_fake_gpu_counters_fn fn = (hora_fake_gpu_counters_fn)(uintptr_t)dlsym(
		h, HORA_FAKE_GPU_COUNTERS_SYMBOL);
	cr_assert_not_null(fn);
	fn(&c);
	dlclose(h);
	return c;
}

Test(gpu_mem, mem_kind_loads_nothing)
{
	/* a fresh process: nothing loaded, and asking about a buffer loads
	 * nothing (a CPU program's collectives ask about every buffer) */
	char *p = calloc(1, 64);
	int dev = 7;
	cr_assert_eq(hora_gpu_mem_kind(p, &dev), 0);
	cr_assert_eq(dev, -1);
	cr_assert_eq(hora_gpu_mem_kind(NULL, NULL), 0);
	cr_assert_null(hora_gpu_loaded_path());
	/* a library chosen but not loaded yet: still nothing loaded */
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V3), 0);
	cr_assert_eq(hora_gpu_mem_kind(p, &dev), 0);
	cr_assert_null(hora_gpu_loaded_path());
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V2), 0, "not loaded: may still be changed");
	free(p);
}

/* A v2 library (the CUDA MLP, no device buffers): every v3 wrapper says
 * which file and version, the frees are no-ops, mem_kind answers host. */
Test(gpu_mem, a_v2_library_answers_enotsup_with_its_version)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V2), 0);
	char want[1200];
	snprintf(want, sizeof(want),
		 "%s: libhora_gpu.so has ABI version 2: no device-buffer collectives (need 3)",
		 FAKE_GPU_V2);
	void *p = (void *)1;
	uint8_t id[HORA_GPU_NCCL_ID_BYTES];
	struct hora_gpu_nccl *c = (void *)1;
	char buf[16];
#define EXPECT_ENOTSUP(call)                                                                       \
	do {                                                                                       \
		err[0] = 0;                                                                        \
		cr_assert_eq((call), -ENOTSUP, "%s", #call);                                       \
		cr_assert_str_eq(err, want, "%s", #call);                                          \
	} while (0)
	EXPECT_ENOTSUP(hora_gpu_dev_alloc(0, 64, &p, err, sizeof(err)));
	cr_assert_null(p);
	EXPECT_ENOTSUP(hora_gpu_host_alloc(64, &p, err, sizeof(err)));
	EXPECT_ENOTSUP(hora_gpu_copy(0, buf, buf + 8, 8, HORA_GPU_D2D, err, sizeof(err)));
	EXPECT_ENOTSUP(hora_gpu_nccl_unique_id(id, err, sizeof(err)));
	EXPECT_ENOTSUP(hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err)));
	cr_assert_null(c);
	EXPECT_ENOTSUP(hora_gpu_nccl_coll((void *)1, HORA_GPU_ALLREDUCE, buf, buf, 2, 0, 0, 0, 0,
					  err, sizeof(err)));
#undef EXPECT_ENOTSUP
	cr_assert_str_eq(hora_gpu_loaded_path(), FAKE_GPU_V2);
	int dev = 5;
	cr_assert_eq(hora_gpu_mem_kind(buf, &dev), 0, "loaded, but v2: host");
	cr_assert_eq(dev, -1);
	/* no v3 slots to call: no-ops, not crashes */
	hora_gpu_dev_free(buf);
	hora_gpu_host_free(buf);
	hora_gpu_nccl_destroy((void *)buf, 1);
}

Test(gpu_mem, a_library_that_cannot_load_gives_the_loaders_reason)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_NEEDS_ABSENT), 0);
	void *p = (void *)1;
	cr_assert_eq(hora_gpu_dev_alloc(0, 64, &p, err, sizeof(err)), -ENOENT);
	cr_assert_null(p);
	cr_assert(strstr(err, "libhora_test_absent.so.1: cannot open shared object file"), "%s",
		  err);
	cr_assert_eq(hora_gpu_mem_kind(err, NULL), 0);
	cr_assert_null(hora_gpu_loaded_path());
}

Test(gpu_mem, device_memory_and_copies_round_trip)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V3), 0);
	float host[16], back[16];
	for (int i = 0; i < 16; i++)
		host[i] = (float)i * 1.5f;
	void *d = NULL, *d2 = NULL, *pinned = NULL;
	cr_assert_eq(hora_gpu_dev_alloc(0, sizeof(host), &d, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_dev_alloc(0, sizeof(host), &d2, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_host_alloc(sizeof(host), &pinned, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(counters(FAKE_GPU_V3).dev_live, 2);
	cr_assert_eq(counters(FAKE_GPU_V3).host_live, 1);
	/* loaded now: mem_kind asks the library */
	int dev = -1;
	cr_assert_eq(hora_gpu_mem_kind(d, &dev), 1);
	cr_assert_eq(dev, 0);
	cr_assert_eq(hora_gpu_mem_kind((char *)d + sizeof(host) - 1, &dev), 1, "inside the block");
	cr_assert_eq(hora_gpu_mem_kind(host, &dev), 0);
	cr_assert_eq(dev, -1);
	cr_assert_eq(hora_gpu_mem_kind(pinned, NULL), 0, "pinned memory is host memory");
	/* host -> device -> device -> pinned -> host */
	cr_assert_eq(hora_gpu_copy(0, d, host, sizeof(host), HORA_GPU_H2D, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(hora_gpu_copy(0, d2, d, sizeof(host), HORA_GPU_D2D, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(hora_gpu_copy(0, pinned, d2, sizeof(host), HORA_GPU_D2H, err, sizeof(err)),
		     0, "%s", err);
	memcpy(back, pinned, sizeof(back));
	cr_assert_arr_eq(back, host, sizeof(host));
	cr_assert_eq(counters(FAKE_GPU_V3).copies, 3);
	cr_assert_eq(hora_gpu_copy(0, back, host, 0, HORA_GPU_D2H, err, sizeof(err)), 0,
		     "0 bytes: nothing to check or copy");
	hora_gpu_dev_free(d);
	hora_gpu_dev_free(d2);
	hora_gpu_host_free(pinned);
	hora_gpu_dev_free(NULL);
	hora_gpu_host_free(NULL);
	struct hora_fake_gpu_counters c = counters(FAKE_GPU_V3);
	cr_assert_eq(c.dev_live, 0);
	cr_assert_eq(c.host_live, 0);
	cr_assert_eq(hora_gpu_mem_kind(d, NULL), 0, "freed");
}

/* What the fake catches: a copy whose kind does not say what its buffers
 * are, a range past the end of a block, a device it does not have. */
Test(gpu_mem, the_fake_refuses_memory_of_the_wrong_kind)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V3), 0);
	char host[64] = "";
	void *d = NULL;
	cr_assert_eq(hora_gpu_dev_alloc(0, 32, &d, err, sizeof(err)), 0, "%s", err);
	struct {
		void *dst;
		const void *src;
		size_t n;
		int kind;
		const char *want;
	} bad[] = {
		{host, host + 32, 8, HORA_GPU_D2H, "fake: D2H from host memory"},
		{d, host, 8, HORA_GPU_D2H, "fake: D2H from host memory"},
		{host, d, 8, HORA_GPU_H2D, "fake: H2D from device memory"},
		{host, host + 32, 8, HORA_GPU_H2D, "fake: H2D to host memory"},
		{host, d, 8, HORA_GPU_D2D, "fake: D2D to host memory"},
		{d, host, 8, HORA_GPU_D2D, "fake: D2D from host memory"},
		{host, d, 40, HORA_GPU_D2H, "fake: D2H of 40 bytes past the end of a device block"},
		{host, (char *)d + 30, 4, HORA_GPU_D2H, "past the end"},
		{host, d, 8, 3, "fake: copy kind 3"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		cr_assert_eq(hora_gpu_copy(0, bad[i].dst, bad[i].src, bad[i].n, bad[i].kind, err,
					   sizeof(err)),
			     -EINVAL, "case %zu", i);
		cr_assert(strstr(err, bad[i].want), "case %zu: %s", i, err);
	}
	cr_assert_eq(hora_gpu_copy(1, host, d, 8, HORA_GPU_D2H, err, sizeof(err)), -ENODEV);
	void *p = (void *)1;
	cr_assert_eq(hora_gpu_dev_alloc(1, 8, &p, err, sizeof(err)), -ENODEV);
	cr_assert_str_eq(err, "fake: no device 1");
	cr_assert_null(p);
	cr_assert_eq(counters(FAKE_GPU_V3).copies, 0);
	hora_gpu_dev_free(d);
}

static void fill(void *buf, int dtype, size_t n, int base)
{
	for (size_t i = 0; i < n; i++) {
		long v = base + (long)i;
		switch (dtype) {
		case 0: ((float *)buf)[i] = (float)v; break;
		case 1: ((double *)buf)[i] = (double)v; break;
		case 2:
		case 3: ((uint16_t *)buf)[i] = (uint16_t)v; break;
		case 4: ((int32_t *)buf)[i] = (int32_t)v; break;
		default: ((int64_t *)buf)[i] = v; break;
		}
	}
}

/* A communicator of one rank: each collective of each dtype is the
 * identity (the sum, mean, min, max or product of one), in place or not,
 * and its results come back through a device-to-host copy. */
Test(gpu_mem, nccl_of_one_rank)
{
	static const size_t size[] = {4, 8, 2, 2, 4, 8};
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V3), 0);
	uint8_t id[HORA_GPU_NCCL_ID_BYTES], id2[HORA_GPU_NCCL_ID_BYTES];
	cr_assert_eq(hora_gpu_nccl_unique_id(id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_unique_id(id2, err, sizeof(err)), 0, "%s", err);
	cr_assert(memcmp(id, id2, sizeof(id)), "two ids are not the same");
	struct hora_gpu_nccl *c = NULL;
	cr_assert_eq(hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_not_null(c);
	enum { N = 12 };
	void *send = NULL, *recv = NULL;
	cr_assert_eq(hora_gpu_dev_alloc(0, N * 8, &send, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_dev_alloc(0, N * 8, &recv, err, sizeof(err)), 0, "%s", err);
	char want[N * 8], got[N * 8];
	for (int kind = HORA_GPU_ALLREDUCE; kind <= HORA_GPU_REDUCE_SCATTER; kind++)
		for (int t = 0; t < 6; t++)
			for (int inplace = 0; inplace < 2; inplace++) {
				fill(want, t, N, 10 * kind + t);
				cr_assert_eq(hora_gpu_copy(0, send, want, N * size[t], HORA_GPU_H2D,
							   err, sizeof(err)),
					     0, "%s", err);
				void *out = inplace ? send : recv;
				cr_assert_eq(hora_gpu_nccl_coll(c, kind, send, out, N, t, kind % 5, 0,
								1000, err, sizeof(err)),
					     0, "kind %d dtype %d: %s", kind, t, err);
				memset(got, 0, sizeof(got));
				cr_assert_eq(hora_gpu_copy(0, got, out, N * size[t], HORA_GPU_D2H,
							   err, sizeof(err)),
					     0, "%s", err);
				cr_assert_arr_eq(got, want, N * size[t], "kind %d dtype %d", kind,
						 t);
			}
	cr_assert_eq(counters(FAKE_GPU_V3).colls, 4 * 6 * 2);
	hora_gpu_nccl_destroy(c, 0);
	hora_gpu_nccl_destroy(NULL, 0);
	struct hora_fake_gpu_counters k = counters(FAKE_GPU_V3);
	cr_assert_eq(k.comms_live, 0);
	cr_assert_eq(k.destroys, 1);
	cr_assert_eq(k.aborts, 0);
	hora_gpu_dev_free(send);
	hora_gpu_dev_free(recv);
}

Test(gpu_mem, nccl_refuses_what_it_cannot_do)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V3), 0);
	uint8_t id[HORA_GPU_NCCL_ID_BYTES];
	struct hora_gpu_nccl *c = (void *)1;
	cr_assert_eq(hora_gpu_nccl_unique_id(id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_init(id, 2, 0, 0, &c, err, sizeof(err)), -ENOTSUP);
	cr_assert_str_eq(err, "fake NCCL: communicators of one rank only");
	cr_assert_null(c);
	uint8_t bad[HORA_GPU_NCCL_ID_BYTES] = {0};
	cr_assert_eq(hora_gpu_nccl_init(bad, 1, 0, 0, &c, err, sizeof(err)), -EINVAL);
	cr_assert_eq(hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err)), 0, "%s", err);
	void *d = NULL;
	float host[4] = {1, 2, 3, 4};
	cr_assert_eq(hora_gpu_dev_alloc(0, sizeof(host), &d, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, host, d, 4, 0, 0, 0, 0, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "fake NCCL: host pointer"), "%s", err);
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, d, host, 4, 0, 0, 0, 0, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "fake NCCL: host pointer"), "%s", err);
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, d, d, 5, 0, 0, 0, 0, err,
					sizeof(err)),
		     -EINVAL, "5 floats in a block of 4");
	cr_assert(strstr(err, "past the end"), "%s", err);
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, d, d, 4, 6, 0, 0, 0, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert_str_eq(err, "NCCL has no data type for hora's dtype code 6");
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, d, d, 4, 0, 5, 0, 0, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert_str_eq(err, "NCCL has no reduction for hora's op code 5");
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_BROADCAST, d, d, 4, 0, 0, 1, 0, err,
					sizeof(err)),
		     -EINVAL);
	cr_assert_eq(hora_gpu_nccl_coll(c, 4, d, d, 4, 0, 0, 0, 0, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "NCCL has no collective for kind 4");
	hora_gpu_nccl_destroy(c, 0);
	hora_gpu_dev_free(d);
}

/* The error paths a caller must handle: FAKE_NCCL_FAIL makes every
 * collective fail (-EIO, or -ETIMEDOUT as a hung peer would), and the
 * caller then aborts the communicator. */
static void expect_coll_fails(const char *path, int want, const char *text)
{
	cr_assert_eq(hora_gpu_use_library(path), 0);
	uint8_t id[HORA_GPU_NCCL_ID_BYTES];
	struct hora_gpu_nccl *c = NULL;
	void *d = NULL;
	cr_assert_eq(hora_gpu_nccl_unique_id(id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_init(id, 1, 0, 0, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_dev_alloc(0, 16, &d, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_gpu_nccl_coll(c, HORA_GPU_ALLREDUCE, d, d, 4, 0, 0, 0, 250, err,
					sizeof(err)),
		     want);
	cr_assert_str_eq(err, text);
	hora_gpu_nccl_destroy(c, 1);
	struct hora_fake_gpu_counters k = counters(path);
	cr_assert_eq(k.aborts, 1);
	cr_assert_eq(k.comms_live, 0);
	hora_gpu_dev_free(d);
}

Test(gpu_mem, a_failing_collective_is_an_error_with_its_text)
{
	expect_coll_fails(FAKE_GPU_V3_NCCL_FAIL, -EIO,
			  "NCCL allreduce: fake NCCL failure (FAKE_NCCL_FAIL)");
}

Test(gpu_mem, a_hung_collective_times_out)
{
	expect_coll_fails(FAKE_GPU_V3_NCCL_TIMEOUT, -ETIMEDOUT,
			  "NCCL allreduce: not done after 250 ms");
}

/* Freeing what dev_alloc did not return (a host buffer taken for a device
 * one) is a libhora bug: the fake stops the process with a message. */
Test(gpu_mem, the_fake_stops_at_a_free_of_the_wrong_kind, .signal = SIGABRT)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_V3), 0);
	void *pinned = NULL;
	cr_assert_eq(hora_gpu_host_alloc(16, &pinned, err, sizeof(err)), 0, "%s", err);
	hora_gpu_dev_free(pinned);
}
