/* test_loader.c - gpu/loader.c: libhora_gpu.so is opened on demand, and
 * every way it can fail to load is an error that names the file and the
 * reason; a process whose GPU library cannot load (a machine without CUDA)
 * says so and still trains on the CPU. Driven with stand-ins built from
 * tests/plugins/fake_gpu.c, so it runs in every build, with or without CUDA.
 * Criterion runs each test in its own process: the process-wide library
 * starts unloaded in each. */
#include "gpu/hora_gpu.h"
#include "hora.h"
#include "hora_config.h"
#include "../helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

static char err[1024];

static void expect_open_fails(const char *path, int want, const char *text)
{
	struct hora_gpu_lib *lib = (void *)1;
	int rc = hora_gpu_lib_open(path, &lib, err, sizeof(err));
	cr_assert_eq(rc, want, "rc %d (want %d): %s", rc, want, err);
	cr_assert_null(lib);
	cr_assert(strstr(err, path), "the error does not name %s: %s", path, err);
	cr_assert(strstr(err, text), "the error does not say '%s': %s", text, err);
}

Test(gpu_loader, missing_file_names_the_path_and_dlerror)
{
	expect_open_fails("/nonexistent/dir/libhora_gpu.so", -ENOENT,
			  "cannot open shared object file");
}

Test(gpu_loader, missing_dependency_names_the_library_it_needs)
{
	/* what a CUDA build meets on a machine without libcudart.so.13 */
	expect_open_fails(FAKE_GPU_NEEDS_ABSENT, -ENOENT,
			  "libhora_test_absent.so.1: cannot open shared object file");
}

Test(gpu_loader, a_file_that_is_not_a_library)
{
	char *dir = th_tmpdir();
	char *path = th_path(dir, "libhora_gpu.so");
	th_write(path, "not an ELF file\n", 16, 0);
	expect_open_fails(path, -ENOENT, "cannot load: ");
	th_rmrf(dir);
	free(path);
	free(dir);
}

Test(gpu_loader, missing_symbol_wrong_abi_and_null_slot)
{
	expect_open_fails(FAKE_GPU_NOSYM, -ENOEXEC,
			  "missing entry symbol 'hora_gpu_plugin_v3' (or 'hora_gpu_plugin_v2', "
			  "'hora_gpu_plugin_v1')");
	expect_open_fails(FAKE_GPU_BADABI, -EPROTO, "abi_version 99, this hora needs 1");
	expect_open_fails(FAKE_GPU_NULLSLOT, -EPROTO, "hora_gpu_plugin_v1.describe is NULL");
}

Test(gpu_loader, a_good_library_opens_and_answers)
{
	struct hora_gpu_lib *lib = NULL;
	cr_assert_eq(hora_gpu_lib_open(FAKE_GPU, &lib, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(hora_gpu_lib_path(lib), FAKE_GPU);
	const struct hora_gpu_ops *ops = hora_gpu_lib_ops(lib);
	cr_assert_eq(ops->abi_version, 1);
	cr_assert_eq(ops->device_count(NULL, 0), 2);
	/* a v1 library: the loader's copy has no MLP slots, nor v3's */
	cr_assert_null(ops->mlp_create);
	cr_assert_null(ops->gemm_time);
	cr_assert_null(ops->mem_kind);
	cr_assert_null(ops->nccl_coll);
	hora_gpu_lib_close(lib);
	hora_gpu_lib_close(NULL);
}

Test(gpu_loader, a_v2_library_is_taken_first_with_every_slot)
{
	struct hora_gpu_lib *lib = NULL;
	cr_assert_eq(hora_gpu_lib_open(FAKE_GPU_V2, &lib, err, sizeof(err)), 0, "%s", err);
	const struct hora_gpu_ops *ops = hora_gpu_lib_ops(lib);
	cr_assert_eq(ops->abi_version, 2);
	cr_assert_not_null(ops->mlp_create);
	struct hora_gpu_mlp *m = (void *)1;
	struct hora_gpu_mlp_config mc = {.nlayers = 1, .dims = {4, 2}, .max_batch = 1};
	cr_assert_eq(ops->mlp_create(&mc, &m, err, sizeof(err)), -ENODEV);
	cr_assert_str_eq(err, "fake: no MLP");
	/* its struct ends after mlp_step_idx: the loader's copy has no v3 slots */
	cr_assert_not_null(ops->mlp_step_idx);
	cr_assert_null(ops->mem_kind);
	cr_assert_null(ops->dev_alloc);
	cr_assert_null(ops->nccl_coll);
	hora_gpu_lib_close(lib);
	/* a v2 symbol with another abi_version, or a NULL v2 slot, is refused */
	expect_open_fails(FAKE_GPU_V2_BADABI, -EPROTO,
			  "hora_gpu_plugin_v2 has abi_version 1, this hora needs 2");
	expect_open_fails(FAKE_GPU_V2_NULLSLOT, -EPROTO, "hora_gpu_plugin_v2.mlp_create is NULL");
}

Test(gpu_loader, a_v3_library_is_taken_first_with_every_slot)
{
	struct hora_gpu_lib *lib = NULL;
	cr_assert_eq(hora_gpu_lib_open(FAKE_GPU_V3, &lib, err, sizeof(err)), 0, "%s", err);
	const struct hora_gpu_ops *ops = hora_gpu_lib_ops(lib);
	cr_assert_eq(ops->abi_version, 3);
	cr_assert_not_null(ops->mlp_step_idx);
	cr_assert(ops->mem_kind && ops->dev_alloc && ops->dev_free && ops->host_alloc &&
		  ops->host_free && ops->copy && ops->nccl_unique_id && ops->nccl_init &&
		  ops->nccl_destroy && ops->nccl_coll);
	/* the slots answer: device memory of the fake is device memory */
	void *p = NULL;
	cr_assert_eq(ops->dev_alloc(0, 16, &p, err, sizeof(err)), 0, "%s", err);
	int dev = -1;
	cr_assert_eq(ops->mem_kind(p, &dev), 1);
	cr_assert_eq(dev, 0);
	cr_assert_eq(ops->mem_kind(err, &dev), 0);
	ops->dev_free(p);
	cr_assert_eq(ops->mem_kind(p, &dev), 0, "freed: no longer device memory");
	hora_gpu_lib_close(lib);
	expect_open_fails(FAKE_GPU_V3_NULLSLOT, -EPROTO, "hora_gpu_plugin_v3.nccl_coll is NULL");
}

Test(gpu_loader, the_process_wide_library_forwards_every_call)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU), 0);
	char buf[4096];
	double e = -1;
	cr_assert_eq(hora_gpu_device_count(buf, sizeof(buf)), 2);
	cr_assert_eq(hora_gpu_describe(buf, sizeof(buf)), 0);
	cr_assert(strstr(buf, "device 1: fake"), "%s", buf);
	cr_assert_eq(hora_gpu_saxpy_check(16, 1.0f, &e), 0);
	cr_assert_eq(hora_gpu_nccl_version(), 1);
	cr_assert_str_eq(hora_gpu_loaded_path(), FAKE_GPU);
	cr_assert_eq(hora_gpu_feature(buf, sizeof(buf)), 1);
	cr_assert(strstr(buf, "libfake_gpu.so loaded from "), "%s", buf);
	cr_assert(strstr(buf, "(fake 1.0), 2 devices"), "%s", buf);
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_NODEV), -EBUSY, "loaded: too late to change");
}

Test(gpu_loader, loaded_without_a_device_says_why)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_NODEV), 0);
	char buf[1024];
	cr_assert_eq(hora_gpu_device_count(buf, sizeof(buf)), -ENODEV);
	cr_assert_str_eq(buf, "fake: no device");
	cr_assert_eq(hora_gpu_feature(buf, sizeof(buf)), 0);
	cr_assert(strstr(buf, ", 0 devices (fake: no device)"), "%s", buf);
}

/* The machine without CUDA: the library is there but cannot load. Every GPU
 * call says which file and why, the same on every call, and training on the
 * CPU is untouched. */
Test(gpu_loader, cpu_only_machine_reports_the_reason_and_still_trains, .timeout = 60)
{
	cr_assert_eq(hora_gpu_use_library(FAKE_GPU_NEEDS_ABSENT), 0);
	const char *reason = "libhora_test_absent.so.1: cannot open shared object file";
	char buf[2048];
	double e = -1;
	for (int round = 0; round < 2; round++) {
		buf[0] = 0;
		cr_assert_eq(hora_gpu_device_count(buf, sizeof(buf)), -ENOENT);
		cr_assert(strstr(buf, FAKE_GPU_NEEDS_ABSENT) && strstr(buf, reason), "%s", buf);
	}
	cr_assert_eq(hora_gpu_describe(buf, sizeof(buf)), -ENOENT);
	cr_assert(strstr(buf, reason), "%s", buf);
	cr_assert_eq(hora_gpu_saxpy_check(16, 1.0f, &e), -ENOENT);
	cr_assert_eq(hora_gpu_nccl_version(), -ENOENT);
	cr_assert_null(hora_gpu_loaded_path());
	cr_assert_eq(hora_gpu_feature(buf, sizeof(buf)), 0);
	cr_assert(strstr(buf, ", not available: ") && strstr(buf, reason), "%s", buf);

	char *dir = th_tmpdir();
	th_make_dataset(dir, 300, 100, 8, 4, 5, 0);
	struct hora_train_config cfg;
	struct hora_train_result r;
	hora_train_config_defaults(&cfg);
	snprintf(cfg.data, sizeof(cfg.data), "%s", dir);
	cfg.hidden[0] = 16;
	cfg.epochs = 4;
	cfg.batch_size = 20;
	cfg.quiet = 1;
	cr_assert_eq(hora_train_run(&cfg, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_gt(r.last.val_acc, 0.9, "val_acc %.3f", r.last.val_acc);
	hora_train_result_deinit(&r);
	th_rmrf(dir);
	free(dir);
}

/* Without an override the search of hora_gpu.h runs: in a CUDA build it
 * finds the build directory's libhora_gpu.so (this binary sits in tests/,
 * not next to it); otherwise the answer is "not compiled". */
Test(gpu_loader, default_search)
{
	const struct hora_gpu_ops *ops = NULL;
	int rc = hora_gpu_get(&ops, err, sizeof(err));
	if (!HORA_HAVE_CUDA) {
		cr_assert_eq(rc, -ENOTSUP, "%s", err);
		cr_assert(strstr(err, "built without CUDA"), "%s", err);
		cr_assert_null(ops);
		return;
	}
	const char *p = hora_gpu_loaded_path();
	if (rc == -ENOENT && !p)
		cr_skip_test("libhora_gpu.so cannot load on this machine: %s", err);
	cr_assert_eq(rc, 0, "%s", err);
#ifdef HORA_GPU_SO
	cr_assert_str_eq(p, HORA_GPU_SO);
#endif
	cr_assert_eq(ops->abi_version, HORA_GPU_ABI_VERSION);
}
