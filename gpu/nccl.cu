/* nccl.cu - libhora_gpu.so's NCCL communicator and its collectives on
 * device buffers (ABI version 3: the nccl_* slots of hora_gpu_ops.h).
 *
 * A communicator is NCCL's, made non-blocking (ncclConfig_t.blocking = 0),
 * with a non-blocking CUDA stream of its own on its device. Non-blocking so
 * that nothing here can hang on a peer that is gone: NCCL calls return
 * ncclInProgress instead of waiting (a first collective connects to its
 * peers inside the call otherwise), and every wait is a poll of
 * ncclCommGetAsyncError and cudaStreamQuery: a short spin, then every
 * ~50 us, up to the caller's timeout. A broken communicator is aborted
 * (ncclCommAbort, which does not wait for peers), never destroyed.
 *
 * Not here: the bootstrap (hora sends the unique id over its own
 * authenticated transport), device memory and copies (mem.cu).
 * Every CUDA/NCCL call is checked; a failure returns -EIO (-ENOMEM, -ENODEV)
 * with "<call>: <message>" in err. Nothing here exits.
 */
#include "v3_cuda.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPIN_POLLS 200 /* queries before the first sleep */
#define POLL_NS 50000  /* then one every ~50 us */
/* Ceilings of the waits the interface gives no timeout: an init whose
 * peers never all come (a rank died before it joined) and a finalize that
 * does not end (a peer gone) are aborted instead of waiting for ever. */
#define INIT_LIMIT_MS 120000
#define FINALIZE_LIMIT_MS 10000

struct hora_gpu_nccl {
	ncclComm_t comm;
	cudaStream_t stream;
	int device, nranks, rank;
	int cancel; /* nccl_interrupt: __atomic builtins */
};

static const char *const kind_name[] = {"allreduce", "broadcast", "allgather",
					"reduce-scatter"};

static int nccl_fail(ncclResult_t r, ncclComm_t comm, const char *call, char *err,
		     size_t errlen)
{
	const char *last = ncclGetLastError(comm);
	if (err && errlen)
		snprintf(err, errlen, "%s: %s%s%s", call, ncclGetErrorString(r),
			 last && last[0] ? ": " : "", last ? last : "");
	return -EIO;
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void poll_pause(long polls)
{
	if (polls < SPIN_POLLS)
		return;
	struct timespec t = {0, POLL_NS};
	nanosleep(&t, NULL);
}

/* Wait for comm's pending NCCL call (ncclInProgress) to finish, up to
 * timeout_ms (<= 0: no limit): 0, the NCCL error, or -ETIMEDOUT. */
static int wait_nccl(ncclComm_t comm, const char *what, int timeout_ms, char *err,
		     size_t errlen)
{
	double t0 = now_ms();
	for (long polls = 0;; polls++) {
		ncclResult_t st = ncclInProgress;
		ncclResult_t r = ncclCommGetAsyncError(comm, &st);
		if (r != ncclSuccess)
			return nccl_fail(r, comm, "ncclCommGetAsyncError", err, errlen);
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress)
			return nccl_fail(st, comm, what, err, errlen);
		if (timeout_ms > 0 && now_ms() - t0 > timeout_ms) {
			snprintf(err, errlen, "%s: not done after %d ms", what, timeout_ms);
			return -ETIMEDOUT;
		}
		poll_pause(polls);
	}
}

int hora_gpu_cu_nccl_unique_id(uint8_t id[HORA_GPU_NCCL_ID_BYTES], char *err, size_t errlen)
{
	ncclUniqueId u;
	static_assert(sizeof(u) == HORA_GPU_NCCL_ID_BYTES, "ncclUniqueId size");
	ncclResult_t r = ncclGetUniqueId(&u);
	if (r != ncclSuccess)
		return nccl_fail(r, NULL, "ncclGetUniqueId", err, errlen);
	memcpy(id, &u, sizeof(u));
	return 0;
}

/* ncclCommInitRankConfig (non-blocking) on the current device, waited for. */
static int init_comm(struct hora_gpu_nccl *c, const uint8_t *id, char *err, size_t errlen)
{
	ncclUniqueId u;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	memcpy(&u, id, sizeof(u));
	ncclResult_t r = ncclCommInitRankConfig(&c->comm, c->nranks, u, c->rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		int rc = nccl_fail(r, c->comm, "ncclCommInitRank", err, errlen);
		if (c->comm)
			ncclCommAbort(c->comm);
		c->comm = NULL;
		return rc;
	}
	int rc = wait_nccl(c->comm, "ncclCommInitRank", INIT_LIMIT_MS, err, errlen);
	if (rc) {
		ncclCommAbort(c->comm);
		c->comm = NULL;
	}
	return rc;
}

int hora_gpu_cu_nccl_init(const uint8_t id[HORA_GPU_NCCL_ID_BYTES], int nranks, int rank,
			  int device, struct hora_gpu_nccl **out, char *err, size_t errlen)
{
	int prev = -1, rc = 0;
	cudaError_t e;
	struct hora_gpu_nccl *c = NULL;
	*out = NULL;
	if (nranks < 1 || rank < 0 || rank >= nranks) {
		snprintf(err, errlen, "NCCL: rank %d of %d ranks", rank, nranks);
		return -EINVAL;
	}
	if ((e = cudaGetDevice(&prev)) != cudaSuccess)
		return hora_gpu_cuda_fail(e, "cudaGetDevice", err, errlen);
	c = (struct hora_gpu_nccl *)calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "NCCL: out of memory");
		return -ENOMEM;
	}
	c->device = device;
	c->nranks = nranks;
	c->rank = rank;
	if ((e = cudaSetDevice(device)) != cudaSuccess) {
		rc = hora_gpu_cuda_fail(e, "cudaSetDevice", err, errlen);
		goto fail;
	}
	if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		rc = hora_gpu_cuda_fail(e, "cudaStreamCreateWithFlags", err, errlen);
		goto fail;
	}
	rc = init_comm(c, id, err, errlen);
	if (rc)
		goto fail;
	cudaSetDevice(prev);
	*out = c;
	return 0;
fail:
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
	cudaSetDevice(prev);
	return rc;
}

void hora_gpu_cu_nccl_destroy(struct hora_gpu_nccl *c, int abort)
{
	int prev = -1;
	if (!c)
		return;
	cudaGetDevice(&prev);
	cudaSetDevice(c->device);
	ncclResult_t r = ncclSuccess;
	if (!abort) {
		/* finalize flushes c's work (nccl_coll waited for all of it),
		 * then destroy frees; a finalize that fails or does not end
		 * aborts instead */
		char why[256];
		r = ncclCommFinalize(c->comm);
		if (r == ncclInProgress)
			r = wait_nccl(c->comm, "ncclCommFinalize", FINALIZE_LIMIT_MS, why, sizeof(why))
				    ? ncclInternalError
				    : ncclSuccess;
	}
	if (!abort && r == ncclSuccess)
		ncclCommDestroy(c->comm);
	else
		ncclCommAbort(c->comm); /* does not wait for peers; frees */
	cudaStreamDestroy(c->stream);
	if (prev >= 0)
		cudaSetDevice(prev);
	free(c);
}

/* hora's dtype / op codes (core/hora.h) as NCCL's; -EINVAL naming a code
 * NCCL has no counterpart for. */
static int map_codes(int dtype, int op, ncclDataType_t *t, ncclRedOp_t *o, char *err,
		     size_t errlen)
{
	static const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclFloat16,
					       ncclBfloat16, ncclInt32, ncclInt64};
	static const ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclMin, ncclMax, ncclProd};
	if (dtype < 0 || dtype >= (int)(sizeof(types) / sizeof(types[0]))) {
		snprintf(err, errlen, "NCCL has no data type for hora's dtype code %d", dtype);
		return -EINVAL;
	}
	if (op < 0 || op >= (int)(sizeof(ops) / sizeof(ops[0]))) {
		snprintf(err, errlen, "NCCL has no reduction for hora's op code %d", op);
		return -EINVAL;
	}
	*t = types[dtype];
	*o = ops[op];
	return 0;
}

/* Enqueue one collective on c's stream (current device: c's). */
static ncclResult_t enqueue(struct hora_gpu_nccl *c, int kind, const void *send, void *recv,
			    size_t count, ncclDataType_t t, ncclRedOp_t o, int root)
{
	switch (kind) {
	case HORA_GPU_ALLREDUCE:
		return ncclAllReduce(send, recv, count, t, o, c->comm, c->stream);
	case HORA_GPU_BROADCAST:
		return ncclBroadcast(send, recv, count, t, root, c->comm, c->stream);
	case HORA_GPU_ALLGATHER:
		return ncclAllGather(send, recv, count, t, c->comm, c->stream);
	default:
		return ncclReduceScatter(send, recv, count, t, o, c->comm, c->stream);
	}
}

/* Wait for c's enqueued work: NCCL's own progress first (a non-blocking
 * call may still be in flight), then the stream; both polled. */
static int wait_coll(struct hora_gpu_nccl *c, const char *what, int timeout_ms, char *err,
		     size_t errlen)
{
	double t0 = now_ms();
	for (long polls = 0;; polls++) {
		ncclResult_t st = ncclInProgress;
		ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
		if (r != ncclSuccess)
			return nccl_fail(r, c->comm, "ncclCommGetAsyncError", err, errlen);
		if (st != ncclSuccess && st != ncclInProgress)
			return nccl_fail(st, c->comm, what, err, errlen);
		if (st == ncclSuccess) {
			cudaError_t e = cudaStreamQuery(c->stream);
			if (e == cudaSuccess)
				return 0;
			if (e != cudaErrorNotReady) {
				char call[96];
				snprintf(call, sizeof(call), "%s: cudaStreamQuery", what);
				return hora_gpu_cuda_fail(e, call, err, errlen);
			}
		}
		if (timeout_ms > 0 && now_ms() - t0 > timeout_ms) {
			snprintf(err, errlen, "%s: not done after %d ms", what, timeout_ms);
			return -ETIMEDOUT;
		}
		if (__atomic_load_n(&c->cancel, __ATOMIC_ACQUIRE)) {
			snprintf(err, errlen, "%s: interrupted", what);
			return -ECANCELED;
		}
		poll_pause(polls);
	}
}

void hora_gpu_cu_nccl_interrupt(struct hora_gpu_nccl *c)
{
	if (c)
		__atomic_store_n(&c->cancel, 1, __ATOMIC_RELEASE);
}

/* Is p device memory of c's device? A host pointer in an NCCL kernel is an
 * illegal address, which kills the whole CUDA context: refuse it here. */
static int device_buffer(const struct hora_gpu_nccl *c, const char *what, const char *which,
			 const void *p, char *err, size_t errlen)
{
	int dev = -1;
	int k = hora_gpu_cu_mem_kind(p, &dev);
	if (k == 1 && dev == c->device)
		return 0;
	if (k < 0)
		snprintf(err, errlen, "%s: %s buffer %p: cudaPointerGetAttributes failed", what, which,
			 p);
	else if (k == 0)
		snprintf(err, errlen, "%s: %s buffer %p is host memory", what, which, p);
	else
		snprintf(err, errlen, "%s: %s buffer %p is on device %d, the communicator's on %d",
			 what, which, p, dev, c->device);
	return k < 0 ? -EIO : -EINVAL;
}

int hora_gpu_cu_nccl_coll(struct hora_gpu_nccl *c, int kind, const void *send, void *recv,
			  size_t count, int dtype, int op, int root, int timeout_ms, char *err,
			  size_t errlen)
{
	ncclDataType_t t;
	ncclRedOp_t o;
	char what[64];
	int prev = -1;
	if (!c) {
		snprintf(err, errlen, "NCCL: no communicator");
		return -EINVAL;
	}
	if (kind < HORA_GPU_ALLREDUCE || kind > HORA_GPU_REDUCE_SCATTER) {
		snprintf(err, errlen, "NCCL has no collective for kind %d", kind);
		return -EINVAL;
	}
	snprintf(what, sizeof(what), "NCCL %s", kind_name[kind]);
	int rc = map_codes(dtype, op, &t, &o, err, errlen);
	if (rc)
		return rc;
	if (kind == HORA_GPU_BROADCAST && (root < 0 || root >= c->nranks)) {
		snprintf(err, errlen, "%s: root %d of %d ranks", what, root, c->nranks);
		return -EINVAL;
	}
	if (count && ((rc = device_buffer(c, what, "send", send, err, errlen)) ||
		      (rc = device_buffer(c, what, "recv", recv, err, errlen))))
		return rc;
	cudaError_t e = cudaGetDevice(&prev);
	if (e == cudaSuccess)
		e = cudaSetDevice(c->device);
	if (e != cudaSuccess)
		return hora_gpu_cuda_fail(e, "cudaSetDevice", err, errlen);
	ncclResult_t r = enqueue(c, kind, send, recv, count, t, o, root);
	if (r != ncclSuccess && r != ncclInProgress)
		rc = nccl_fail(r, c->comm, what, err, errlen);
	else
		rc = wait_coll(c, what, timeout_ms, err, errlen);
	if (prev != c->device)
		cudaSetDevice(prev);
	return rc;
}
