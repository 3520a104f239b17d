/* hora_gpu.h - what the GPU module offers the rest of hora (internal).
 *
 * The CUDA code lives in libhora_gpu.so (hora_gpu_ops.h), which libhora
 * loads with dlopen the first time a GPU function is called (loader.c), so
 * one build runs on machines with and without CUDA. Return values tell the
 * cases apart, and the text always says why:
 *   -ENOTSUP  hora was built without CUDA (HORA_HAVE_CUDA 0);
 *   -ENOENT   libhora_gpu.so or a library it needs (libcudart.so.13,
 *             libnccl.so.2) could not be loaded: the dlerror text;
 *   -ENOEXEC  the file loaded but has none of hora_gpu_plugin_v3, _v2, _v1;
 *   -EPROTO   its abi_version is not ours, or a slot is NULL;
 *   -ENODEV   the library is loaded but there is no usable CUDA device.
 *
 * Where libhora_gpu.so is looked for, first file that exists wins (a file
 * that exists but fails to load is reported, not skipped):
 *   1. next to the object holding libhora (libhora.so, or the executable
 *      that links libhora statically), found with dladdr;
 *   2. the build directory (HORA_GPU_BUILD_DIR, set by CMake);
 *   3. the installed library directory (HORA_GPU_INSTALL_LIBDIR);
 *   4. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
 * Nothing here reads the environment.
 *
 * Thread-safety: every function may be called from any thread; the library
 * is loaded at most once per process and never unloaded (the CUDA runtime
 * does not survive dlclose).
 */
#ifndef HORA_GPU_H
#define HORA_GPU_H

#include "hora_gpu_ops.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one library file ------------------------------------------------- */

/* One dlopen'ed libhora_gpu.so (or a test double with the same ABI). */
struct hora_gpu_lib;

/* Load the file at path (RTLD_NOW | RTLD_LOCAL), find hora_gpu_plugin_v3
 * (else _v2, else _v1), check its abi_version (that of the symbol's name)
 * and that none of that version's slots is NULL; only that version's slots
 * are copied, the later ones read NULL in the ops (ops->abi_version says
 * which version it is). On success *out is set; the
 * caller closes it with hora_gpu_lib_close. On failure err says
 * "<path>: <what>" (the dlerror text for -ENOENT). Works in every build,
 * with or without CUDA. Returns 0, -ENOENT, -ENOEXEC, -EPROTO or -ENOMEM. */
int hora_gpu_lib_open(const char *path, struct hora_gpu_lib **out, char *err, size_t errlen);

/* The ops of an open library; valid until hora_gpu_lib_close. */
const struct hora_gpu_ops *hora_gpu_lib_ops(const struct hora_gpu_lib *lib);

/* The path it was opened from (owned by lib). */
const char *hora_gpu_lib_path(const struct hora_gpu_lib *lib);

/* dlclose and free. NULL is a no-op. Not for the process-wide library. */
void hora_gpu_lib_close(struct hora_gpu_lib *lib);

/* ---- the process-wide library ----------------------------------------- */

/* Use the file at path instead of the search above, in every build (tests
 * point it at a missing or broken file to play a machine without CUDA).
 * Only before the first load: returns 0, -EBUSY after it, -ENAMETOOLONG. */
int hora_gpu_use_library(const char *path);

/* The process-wide ops, loading the library on the first call. Returns 0
 * with *ops set, or one of the codes above with the reason in err (the
 * same reason on every later call). */
int hora_gpu_get(const struct hora_gpu_ops **ops, char *err, size_t errlen);

/* The path the process-wide library was loaded from, or NULL. */
const char *hora_gpu_loaded_path(void);

/* One line for `hora --version`, without a newline, e.g.
 *   "cuda: compiled (CUDA 13.0.88, NCCL 2.28.9), libhora_gpu.so loaded
 *    from /usr/lib, 1 devices"
 *   "cuda: compiled (...), not available: <the loader's reason>"
 *   "cuda: not compiled"
 * Loads the library if it is not loaded yet. Returns 1 when at least one
 * device is usable, 0 otherwise. */
int hora_gpu_feature(char *buf, size_t len);

/* ---- the device functions, through the process-wide library ------------ */

/* Number of usable CUDA devices (>= 1); otherwise a code above with the
 * reason in why, if given. */
int hora_gpu_device_count(char *why, size_t whylen);

/* A human-readable list of devices and the CUDA/NCCL versions into buf.
 * Returns 0, or a code above with buf saying why. */
int hora_gpu_describe(char *buf, size_t len);

/* Run y = a*x + y for n floats on device 0 with hora's saxpy kernel and
 * compare with the same computation on the CPU; *max_abs_err gets the
 * largest difference. Returns 0, a code above, -EINVAL, -ENOMEM or -EIO. */
int hora_gpu_saxpy_check(int n, float a, double *max_abs_err);

/* NCCL's version code (e.g. 22809), or a code above. */
int hora_gpu_nccl_version(void);

/* ---- device memory, copies, NCCL (forward_mem.c; ABI version 3) ---------
 * Each is the slot of the same name of hora_gpu_ops.h (its contract there)
 * through the process-wide library, loaded by the first call (mem_kind
 * aside). Where the library does not load they return the loader's code
 * with its reason in err; on a library older than version 3, -ENOTSUP with
 * "<path>: libhora_gpu.so has ABI version N: no device-buffer collectives
 * (need 3)". The _free and _destroy calls are no-ops then. */

/* Where p points: 1 with *device set (CUDA device or managed memory), 0
 * host memory (*device = -1), or -EIO. Never loads the library: 0 when it
 * is not loaded yet (hora_gpu_loaded_path() == NULL; nothing can have made
 * device memory through hora then, and a CPU-only program pays no dlopen)
 * or is older than version 3. device may be NULL. */
int hora_gpu_mem_kind(const void *p, int *device);
int hora_gpu_dev_alloc(int device, size_t bytes, void **out, char *err, size_t errlen);
void hora_gpu_dev_free(void *p);
int hora_gpu_host_alloc(size_t bytes, void **out, char *err, size_t errlen);
void hora_gpu_host_free(void *p);
/* kind: enum hora_gpu_copy_kind. */
int hora_gpu_copy(int device, void *dst, const void *src, size_t bytes, int kind, char *err,
		  size_t errlen);
/* id: HORA_GPU_NCCL_ID_BYTES bytes. */
int hora_gpu_nccl_unique_id(uint8_t *id, char *err, size_t errlen);
int hora_gpu_nccl_init(const uint8_t *id, int nranks, int rank, int device,
		       struct hora_gpu_nccl **out, char *err, size_t errlen);
/* ops->nccl_interrupt (any thread; NULL or an older library: nothing) */
void hora_gpu_nccl_interrupt(struct hora_gpu_nccl *c);
void hora_gpu_nccl_destroy(struct hora_gpu_nccl *c, int abort);
/* kind: enum hora_gpu_coll_kind; dtype, op: core/hora.h's codes. */
int hora_gpu_nccl_coll(struct hora_gpu_nccl *c, int kind, const void *send, void *recv,
		       size_t count, int dtype, int op, int root, int timeout_ms, char *err,
		       size_t errlen);

/* ---- the CUDA MLP (mlp_model.c) ----------------------------------------- */

struct hora_model_ops;

/* The MNIST MLP on CUDA device 0 as a model (model/hora_model.h), named
 * "mnist_mlp" like the CPU one: the same layout and, from the same seed,
 * the same initial parameters; params and grads stay in the host's flat
 * buffers. Its create fails with "CUDA is not available: <the loader's
 * reason>" and a code above (-ENOTSUP also for a v1 libhora_gpu.so) where
 * there is no CUDA. Static storage. */
const struct hora_model_ops *hora_gpu_mlp_model(void);

/* The text of the last device error of a model instance made by
 * hora_gpu_mlp_model()'s create ("" when none); owned by the instance. */
const char *hora_gpu_mlp_model_error(void *state);

/* One step (grads != NULL; the model's forward_backward) or an evaluation
 * (grads NULL; stats only) of such an instance on samples idx[0..n) of ds,
 * with ds resident on the device: copied there the first time it is seen
 * (two data sets at once, the run's train and test sets, identified by
 * their images pointer and size; ds must not change while the instance
 * lives), gathered there by a kernel, so a step sends only idx. Returns 0
 * or -errno (hora_gpu_mlp_model_error says why). */
struct hora_dataset;
struct hora_model_stats;
int hora_gpu_mlp_model_step_ds(void *state, const struct hora_dataset *ds, const int64_t *idx,
			       int n, const float *params, float *grads,
			       struct hora_model_stats *stats,
			       void (*ready)(void *arg, int layer, size_t offset, size_t count),
			       void *arg);

/* The cuBLAS calls of one training step at batch n of such an instance
 * (hora_gpu_ops.h mlp_gemms). */
int hora_gpu_mlp_model_gemms(void *state, int n, struct hora_gpu_gemm *out, int cap);

/* Time calls[0..ncalls) alone on device `device`, iters passes; *seconds
 * per pass (hora_gpu_ops.h gemm_time). Returns 0 or a code above with the
 * reason in err. */
int hora_gpu_time_gemms(int device, const struct hora_gpu_gemm *calls, int ncalls, int iters,
			double *seconds, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
