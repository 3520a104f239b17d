/* forward_mem.c - the device-memory, copy and NCCL functions of hora_gpu.h
 * (ABI version 3), each a call through the process-wide libhora_gpu.so
 * (loader.c). What the collectives on device buffers (core/, net/) are
 * built from.
 *
 * Not the CUDA code (mem.cu, nccl.cu in libhora_gpu.so) nor the loader.
 * When the library is missing every function returns the loader's code
 * with its reason in err; when it is older than version 3, -ENOTSUP.
 * hora_gpu_mem_kind never loads the library (a CPU program's collectives
 * ask it about every buffer).
 */
#include "hora_gpu.h"

#include <errno.h>
#include <stdio.h>

/* The process-wide ops if they are version 3, else the code and why. */
static int need_v3(const struct hora_gpu_ops **ops, char *err, size_t errlen)
{
	int rc = hora_gpu_get(ops, err, errlen);
	if (rc)
		return rc;
	if ((*ops)->abi_version < 3) {
		if (err && errlen)
			snprintf(err, errlen,
				 "%s: libhora_gpu.so has ABI version %d: no device-buffer "
				 "collectives (need 3)",
				 hora_gpu_loaded_path(), (*ops)->abi_version);
		return -ENOTSUP;
	}
	return 0;
}

int hora_gpu_mem_kind(const void *p, int *device)
{
	const struct hora_gpu_ops *ops;
	if (device)
		*device = -1;
	/* loaded_path is set once, by the load: no load happens below */
	if (!hora_gpu_loaded_path() || hora_gpu_get(&ops, NULL, 0) || ops->abi_version < 3)
		return 0;
	return ops->mem_kind(p, device);
}

int hora_gpu_dev_alloc(int device, size_t bytes, void **out, char *err, size_t errlen)
{
	const struct hora_gpu_ops *ops;
	*out = NULL;
	int rc = need_v3(&ops, err, errlen);
	return rc ? rc : ops->dev_alloc(device, bytes, out, err, errlen);
}

void hora_gpu_dev_free(void *p)
{
	const struct hora_gpu_ops *ops;
	if (p && !need_v3(&ops, NULL, 0))
		ops->dev_free(p);
}

int hora_gpu_host_alloc(size_t bytes, void **out, char *err, size_t errlen)
{
	const struct hora_gpu_ops *ops;
	*out = NULL;
	int rc = need_v3(&ops, err, errlen);
	return rc ? rc : ops->host_alloc(bytes, out, err, errlen);
}

void hora_gpu_host_free(void *p)
{
	const struct hora_gpu_ops *ops;
	if (p && !need_v3(&ops, NULL, 0))
		ops->host_free(p);
}

int hora_gpu_copy(int device, void *dst, const void *src, size_t bytes, int kind, char *err,
		  size_t errlen)
{
	const struct hora_gpu_ops *ops;
	int rc = need_v3(&ops, err, errlen);
	return rc ? rc : ops->copy(device, dst, src, bytes, kind, err, errlen);
}

int hora_gpu_nccl_unique_id(uint8_t *id, char *err, size_t errlen)
{
	const struct hora_gpu_ops *ops;
	int rc = need_v3(&ops, err, errlen);
	return rc ? rc : ops->nccl_unique_id(id, err, errlen);
}

int hora_gpu_nccl_init(const uint8_t *id, int nranks, int rank, int device,
		       struct hora_gpu_nccl **out, char *err, size_t errlen)
{
	const struct hora_gpu_ops *ops;
	*out = NULL;
	int rc = need_v3(&ops, err, errlen);
	return rc ? rc : ops->nccl_init(id, nranks, rank, device, out, err, errlen);
}

void hora_gpu_nccl_interrupt(struct hora_gpu_nccl *c)
{
	const struct hora_gpu_ops *ops;
	if (c && !need_v3(&ops, NULL, 0))
		ops->nccl_interrupt(c);
}

void hora_gpu_nccl_destroy(struct hora_gpu_nccl *c, int abort)
{
	const struct hora_gpu_ops *ops;
	if (c && !need_v3(&ops, NULL, 0))
		ops->nccl_destroy(c, abort);
}

int hora_gpu_nccl_coll(struct hora_gpu_nccl *c, int kind, const void *send, void *recv,
		       size_t count, int dtype, int op, int root, int timeout_ms, char *err,
		       size_t errlen)
{
	const struct hora_gpu_ops *ops;
	int rc = need_v3(&ops, err, errlen);
	return rc ? rc
		  : ops->nccl_coll(c, kind, send, recv, count, dtype, op, root, timeout_ms, err,
				   errlen);
}
