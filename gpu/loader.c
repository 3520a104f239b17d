/* loader.c - finds and dlopens libhora_gpu.so, checks its ABI, and keeps the
 * process-wide copy (hora_gpu.h has the search order and the codes).
 *
 * This file is part of libhora and is plain C: it links against no CUDA
 * library, which is the point of it. It is not the CUDA code (device.cu)
 * nor the calls that go through the loaded ops (forward.c).
 */
#include "hora_gpu.h"

#include "hora_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef HORA_GPU_BUILD_DIR
#define HORA_GPU_BUILD_DIR ""
#endif
#ifndef HORA_GPU_INSTALL_LIBDIR
#define HORA_GPU_INSTALL_LIBDIR ""
#endif

struct hora_gpu_lib {
	void *handle;
	const struct hora_gpu_ops *ops; /* &copy */
	struct hora_gpu_ops copy;       /* its version's slots, later ones NULL */
	char path[PATH_MAX];
};

/* The slots of versions 1 and 2: the prefix of the struct such a library
 * exports (its symbol is no bigger: read no further). */
#define V1_SIZE offsetof(struct hora_gpu_ops, mlp_create)
#define V2_SIZE offsetof(struct hora_gpu_ops, mem_kind)

/* The process-wide library; every field guarded by g_lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_tried;
static int g_rc;
static struct hora_gpu_lib *g_lib;
static char g_err[1024];
static char g_path[PATH_MAX]; /* hora_gpu_use_library, "" = search */

/* The first NULL slot of version 3's own, or NULL. */
static const char *null_slot_v3(const struct hora_gpu_ops *ops)
{
	if (!ops->mem_kind)
		return "mem_kind";
	if (!ops->dev_alloc)
		return "dev_alloc";
	if (!ops->dev_free)
		return "dev_free";
	if (!ops->host_alloc)
		return "host_alloc";
	if (!ops->host_free)
		return "host_free";
	if (!ops->copy)
		return "copy";
	if (!ops->nccl_unique_id)
		return "nccl_unique_id";
	if (!ops->nccl_init)
		return "nccl_init";
	if (!ops->nccl_destroy)
		return "nccl_destroy";
	if (!ops->nccl_coll)
		return "nccl_coll";
	if (!ops->nccl_interrupt)
		return "nccl_interrupt";
	return NULL;
}

/* The first NULL slot of ops (version `version`'s slots), or NULL. */
static const char *null_slot(const struct hora_gpu_ops *ops, int version)
{
	if (!ops->build)
		return "build";
	if (!ops->device_count)
		return "device_count";
	if (!ops->describe)
		return "describe";
	if (!ops->saxpy_check)
		return "saxpy_check";
	if (!ops->nccl_version)
		return "nccl_version";
	if (version < 2)
		return NULL;
	if (!ops->mlp_create)
		return "mlp_create";
	if (!ops->mlp_destroy)
		return "mlp_destroy";
	if (!ops->mlp_forward_backward)
		return "mlp_forward_backward";
	if (!ops->mlp_evaluate)
		return "mlp_evaluate";
	if (!ops->mlp_gemms)
		return "mlp_gemms";
	if (!ops->gemm_time)
		return "gemm_time";
	if (!ops->mlp_load_data)
		return "mlp_load_data";
	if (!ops->mlp_step_idx)
		return "mlp_step_idx";
	return version < 3 ? NULL : null_slot_v3(ops);
}

static int check_ops(const struct hora_gpu_ops *ops, int version, const char *sym,
		     const char *path, char *err, size_t errlen)
{
	if (ops->abi_version != version) {
		snprintf(err, errlen, "%s: %s has abi_version %d, this hora needs %d", path, sym,
			 ops->abi_version, version);
		return -EPROTO;
	}
	const char *null = null_slot(ops, version);
	if (null) {
		snprintf(err, errlen, "%s: %s.%s is NULL", path, sym, null);
		return -EPROTO;
	}
	return 0;
}

int hora_gpu_lib_open(const char *path, struct hora_gpu_lib **out, char *err, size_t errlen)
{
	*out = NULL;
	if (strlen(path) >= PATH_MAX) {
		snprintf(err, errlen, "%.64s...: path too long", path);
		return -ENAMETOOLONG;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s: cannot load: %s", path, dlerror());
		return -ENOENT;
	}
	/* the newest version first, as NCCL's plugin loader */
	static const char *const syms[] = {HORA_GPU_PLUGIN_SYMBOL, HORA_GPU_PLUGIN_SYMBOL_V2,
					   HORA_GPU_PLUGIN_SYMBOL_V1};
	const struct hora_gpu_ops *ops = NULL;
	int i = 0;
	dlerror();
	while (i < 3 && !(ops = dlsym(h, syms[i])))
		i++;
	if (!ops) {
		snprintf(err, errlen, "%s: missing entry symbol '%s' (or '%s', '%s')", path,
			 syms[0], syms[1], syms[2]);
		dlclose(h);
		return -ENOEXEC;
	}
	const char *sym = syms[i];
	int version = HORA_GPU_ABI_VERSION - i; /* syms[i] is version 3 - i */
	int rc = check_ops(ops, version, sym, path, err, errlen);
	struct hora_gpu_lib *lib = rc ? NULL : calloc(1, sizeof(*lib));
	if (!rc && !lib) {
		snprintf(err, errlen, "%s: out of memory", path);
		rc = -ENOMEM;
	}
	if (rc) {
		dlclose(h);
		return rc;
	}
	lib->handle = h;
	/* an older library's struct ends at its version's size: read no further */
	memcpy(&lib->copy, ops, version == 1 ? V1_SIZE : version == 2 ? V2_SIZE : sizeof(lib->copy));
	lib->ops = &lib->copy;
	snprintf(lib->path, sizeof(lib->path), "%s", path);
	*out = lib;
	return 0;
}

const struct hora_gpu_ops *hora_gpu_lib_ops(const struct hora_gpu_lib *lib)
{
	return lib->ops;
}

const char *hora_gpu_lib_path(const struct hora_gpu_lib *lib)
{
	return lib->path;
}

void hora_gpu_lib_close(struct hora_gpu_lib *lib)
{
	if (!lib)
		return;
	dlclose(lib->handle);
	free(lib);
}

/* The directory of the object this code is in: libhora.so, or the program
 * when libhora is linked statically (its link-map name is then ""). */
static int own_dir(char *dir, size_t len)
{
	Dl_info info;
	struct link_map *lm = NULL;
	char self[PATH_MAX];
	const char *name;
	if (!dladdr1((void *)own_dir, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return -ENOENT;
	name = lm->l_name;
	if (!name || !name[0]) {
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0)
			return -ENOENT;
		self[n] = 0;
		name = self;
	}
	const char *slash = strrchr(name, '/');
	if (!slash)
		return -ENOENT;
	if ((size_t)(slash - name) >= len)
		return -ENAMETOOLONG;
	memcpy(dir, name, (size_t)(slash - name));
	dir[slash - name] = 0;
	return 0;
}

/* Search order of hora_gpu.h; the first candidate file that exists decides.
 * Called with g_lock held. */
static int search_and_open(struct hora_gpu_lib **out, char *err, size_t errlen)
{
	char dirs[3][PATH_MAX] = {"", HORA_GPU_BUILD_DIR, HORA_GPU_INSTALL_LIBDIR};
	char path[PATH_MAX + sizeof(HORA_GPU_LIBRARY_NAME) + 1];
	struct stat st;
	own_dir(dirs[0], sizeof(dirs[0]));
	for (int i = 0; i < 3; i++) {
		int n = snprintf(path, sizeof(path), "%s/%s", dirs[i], HORA_GPU_LIBRARY_NAME);
		if (!dirs[i][0] || n < 0 || (size_t)n >= sizeof(path))
			continue;
		if (stat(path, &st) == 0)
			return hora_gpu_lib_open(path, out, err, errlen);
	}
	char why[256];
	int rc = hora_gpu_lib_open(HORA_GPU_LIBRARY_NAME, out, why, sizeof(why));
	if (rc == -ENOENT) {
		/* dirs cut to 150 bytes: a cut path still says where we looked */
		snprintf(err, errlen,
			 "%s is not next to libhora (%.150s), in the build (%.150s) or the "
			 "install (%.150s) directory, nor found by the dynamic loader (%s)",
			 HORA_GPU_LIBRARY_NAME, dirs[0][0] ? dirs[0] : "?", dirs[1], dirs[2], why);
	} else if (rc) {
		snprintf(err, errlen, "%s", why);
	}
	return rc;
}

int hora_gpu_use_library(const char *path)
{
	int rc = 0;
	pthread_mutex_lock(&g_lock);
	if (g_tried)
		rc = -EBUSY;
	else if (strlen(path) >= sizeof(g_path))
		rc = -ENAMETOOLONG;
	else
		snprintf(g_path, sizeof(g_path), "%s", path);
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int hora_gpu_get(const struct hora_gpu_ops **ops, char *err, size_t errlen)
{
	pthread_mutex_lock(&g_lock);
	if (!g_tried) {
		g_tried = 1;
		if (g_path[0])
			g_rc = hora_gpu_lib_open(g_path, &g_lib, g_err, sizeof(g_err));
		else if (!HORA_HAVE_CUDA) {
			snprintf(g_err, sizeof(g_err),
				 "hora was built without CUDA (HORA_CUDA=OFF or nvcc/NCCL not found)");
			g_rc = -ENOTSUP;
		} else
			g_rc = search_and_open(&g_lib, g_err, sizeof(g_err));
	}
	int rc = g_rc;
	*ops = g_lib ? g_lib->ops : NULL;
	if (rc && err && errlen)
		snprintf(err, errlen, "%s", g_err);
	pthread_mutex_unlock(&g_lock);
	return rc;
}

const char *hora_gpu_loaded_path(void)
{
	pthread_mutex_lock(&g_lock);
	const char *p = g_lib ? g_lib->path : NULL;
	pthread_mutex_unlock(&g_lock);
	return p;
}
