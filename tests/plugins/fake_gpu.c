/* fake_gpu.c - a stand-in for libhora_gpu.so with no CUDA in it: the same
 * ABI (gpu/hora_gpu_ops.h), devices and kernels done on the CPU. The tests
 * build variants of it to drive the loader (gpu/loader.c) down each path:
 *   FAKE_DEVICES=N     device_count answers N (0: -ENODEV "fake: no device")
 *   FAKE_SYMBOL=name   export the ops under another name (missing symbol)
 *   FAKE_ABI=N         abi_version N (wrong ABI; default 1, a v1 library)
 *   FAKE_V2            a version 2 library (hora_gpu_plugin_v2, abi 2, the
 *                      MLP slots answering -ENODEV "fake: no MLP");
 *                      FAKE_V2_NULL_SLOT leaves its mlp_create NULL
 *   FAKE_V3            a version 3 library (with FAKE_V2, FAKE_SYMBOL=
 *                      hora_gpu_plugin_v3, FAKE_ABI=3): device memory, copies
 *                      and NCCL done on the CPU, strict about which memory is
 *                      which (below); FAKE_V3_NULL_SLOT leaves nccl_coll NULL
 *   FAKE_NCCL_FAIL=N   (with FAKE_V3) the N-th nccl_coll call of the process
 *                      and every later one fail with -FAKE_NCCL_FAIL_CODE
 *                      (default EIO; ETIMEDOUT plays a hung peer)
 *   FAKE_NCCL_GROUP    (with FAKE_V3) NCCL communicators of several ranks
 *                      among processes of this host (fake_nccl.c); without
 *                      it nccl_init takes one rank only
 *   FAKE_NCCL_HANG_RANK=R, FAKE_NCCL_HANG_AFTER=N  (with FAKE_NCCL_GROUP) rank
 *                      R's N-th nccl_coll and later ones never come to the
 *                      group (until nccl_interrupt): a peer stuck in NCCL
 *   FAKE_NULL_SLOT     describe is NULL
 * A variant of an older version has the newer slots filled with a pointer
 * that aborts: what lies past an older library's (smaller) struct is not
 * NULL, so a loader that copies more than that version's slots is caught.
 *   FAKE_NEEDS_ABSENT  calls into libhora_test_absent.so.1 (absent.c), a
 *                      library that is nowhere at run time, as libcudart.so.13
 *                      is nowhere on a machine without CUDA. */
#include "hora_gpu_ops.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FAKE_V3
#include "fake_gpu.h"
#ifdef FAKE_NCCL_GROUP
#include "fake_nccl.h"
#endif

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#endif

#ifndef FAKE_DEVICES
#define FAKE_DEVICES 0
#endif
#ifndef FAKE_SYMBOL
#define FAKE_SYMBOL hora_gpu_plugin_v1
#endif
#ifndef FAKE_ABI
#define FAKE_ABI 1
#endif

#ifdef FAKE_NEEDS_ABSENT
int hora_test_absent(void);
#endif
#ifdef FAKE_NULL_SLOT
#define FAKE_DESCRIBE NULL
#else
#define FAKE_DESCRIBE fake_describe
#endif

static int fake_device_count(char *why, size_t whylen)
{
#ifdef FAKE_NEEDS_ABSENT
	if (hora_test_absent() != 7)
		return -EIO;
#endif
	if (FAKE_DEVICES > 0)
		return FAKE_DEVICES;
	if (why && whylen)
		snprintf(why, whylen, "fake: no device");
	return -ENODEV;
}

__attribute__((unused)) static int fake_describe(char *buf, size_t len)
{
	int n = fake_device_count(buf, len);
	if (n < 0)
		return n;
	int k = snprintf(buf, len, "fake CUDA, NCCL 0\n");
	for (int i = 0; i < n && k > 0 && (size_t)k < len; i++)
		k += snprintf(buf + k, len - (size_t)k, "device %d: fake\n", i);
	return 0;
}

static int fake_saxpy_check(int n, float a, double *max_abs_err)
{
	(void)a;
	*max_abs_err = 0;
	int rc = fake_device_count(NULL, 0);
	return rc < 0 ? rc : n <= 0 ? -EINVAL : 0;
}

static int fake_nccl_version(void)
{
	return 1;
}

#ifdef FAKE_V2
__attribute__((unused)) static int fake_mlp_create(const struct hora_gpu_mlp_config *cfg, struct hora_gpu_mlp **out,
			   char *err, size_t errlen)
{
	(void)cfg;
	*out = NULL;
	snprintf(err, errlen, "fake: no MLP");
	return -ENODEV;
}

static void fake_mlp_destroy(struct hora_gpu_mlp *m)
{
	(void)m;
}

static int fake_mlp_fb(struct hora_gpu_mlp *m, const float *params, float *grads, const float *x,
		       const uint8_t *y, int n, double *loss_sum, int64_t *correct,
		       hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	(void)m, (void)params, (void)grads, (void)x, (void)y, (void)n, (void)loss_sum;
	(void)correct, (void)ready, (void)arg;
	snprintf(err, errlen, "fake: no MLP");
	return -ENODEV;
}

static int fake_mlp_eval(struct hora_gpu_mlp *m, const float *params, const float *x,
			 const uint8_t *y, int n, double *loss_sum, int64_t *correct, char *err,
			 size_t errlen)
{
	return fake_mlp_fb(m, params, NULL, x, y, n, loss_sum, correct, NULL, NULL, err, errlen);
}

static int fake_mlp_gemms(const struct hora_gpu_mlp *m, int n, struct hora_gpu_gemm *out, int cap)
{
	(void)m, (void)n, (void)out, (void)cap;
	return 0;
}

static int fake_mlp_load_data(struct hora_gpu_mlp *m, int slot, const uint8_t *images,
			      const uint8_t *labels, int64_t n, char *err, size_t errlen)
{
	(void)m, (void)slot, (void)images, (void)labels, (void)n;
	snprintf(err, errlen, "fake: no MLP");
	return -ENODEV;
}

static int fake_mlp_step_idx(struct hora_gpu_mlp *m, int slot, const float *params, float *grads,
			     const int64_t *idx, int n, double *loss_sum, int64_t *correct,
			     hora_gpu_ready_fn ready, void *arg, char *err, size_t errlen)
{
	(void)slot, (void)idx;
	return fake_mlp_fb(m, params, grads, NULL, NULL, n, loss_sum, correct, ready, arg, err,
			   errlen);
}

static int fake_gemm_time(int device, const struct hora_gpu_gemm *g, int ng, int iters,
			  double *seconds, char *err, size_t errlen)
{
	(void)device, (void)g, (void)ng, (void)iters;
	*seconds = 0;
	snprintf(err, errlen, "fake: no device");
	return -ENODEV;
}
#endif

#ifdef FAKE_V3
/* ---- version 3 on the CPU ------------------------------------------------
 * "Device memory" is host memory from fake_dev_alloc, recorded with its
 * device in a table of blocks (mutex-protected), and so is host_alloc's
 * "pinned" memory: mem_kind answers 1 for a pointer inside a dev_alloc
 * block, copy and nccl_coll refuse a buffer that is not of the kind they
 * are told (a D2H from host memory, a collective on a host pointer, a range
 * past the end of a block), and a free of a pointer that is not a block of
 * that kind aborts the test with a message: each is a bug in libhora that
 * real CUDA would turn into garbage or a crash. NCCL communicators have
 * one rank: every collective is a copy (send == recv in place allowed). */

#ifndef FAKE_NCCL_FAIL
#define FAKE_NCCL_FAIL 0
#endif
#ifndef FAKE_NCCL_FAIL_CODE
#define FAKE_NCCL_FAIL_CODE EIO
#endif
#define FAKE_NCCL_MAGIC "hora-fake-nccl" /* the unique id's first bytes */
#define FAKE_COMM_MAGIC 0x6e63636cu

struct block {
	char *base;
	size_t size;
	int device; /* -1: host_alloc's */
};

/* Every field guarded by g_lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block *g_blocks;
static size_t g_nblocks, g_cap;
static struct hora_fake_gpu_counters g_count;

struct hora_gpu_nccl {
	unsigned magic;
	int device;
	int nranks, rank;
	int cancel; /* nccl_interrupt (__atomic builtins) */
#ifdef FAKE_NCCL_GROUP
	struct fake_nccl_group *grp; /* nranks > 1: fake_nccl.c */
#endif
};

__attribute__((visibility("default"))) void hora_fake_gpu_counters(struct hora_fake_gpu_counters *out)
{
	pthread_mutex_lock(&g_lock);
	*out = g_count;
	pthread_mutex_unlock(&g_lock);
}

static void die(const char *what, const void *p)
{
	fprintf(stderr, "fake_gpu: %s %p\n", what, p);
	abort(); /* a test double: a libhora bug stops the test here */
}

/* The block holding p (device memory when dev, host_alloc's otherwise), or
 * NULL. Called with g_lock held. */
static struct block *find(const void *p, int dev)
{
	const char *c = p;
	for (size_t i = 0; i < g_nblocks; i++) {
		struct block *b = &g_blocks[i];
		if ((b->device >= 0) == dev && c >= b->base && c < b->base + b->size)
			return b;
	}
	return NULL;
}

static int add_block(char *base, size_t size, int device)
{
	pthread_mutex_lock(&g_lock);
	if (g_nblocks == g_cap) {
		size_t cap = g_cap ? 2 * g_cap : 64;
		struct block *nb = realloc(g_blocks, cap * sizeof(*nb));
		if (!nb) {
			pthread_mutex_unlock(&g_lock);
			return -ENOMEM;
		}
		g_blocks = nb;
		g_cap = cap;
	}
	g_blocks[g_nblocks++] = (struct block){base, size, device};
	if (device >= 0)
		g_count.dev_live++;
	else
		g_count.host_live++;
	pthread_mutex_unlock(&g_lock);
	return 0;
}

static void drop_block(void *p, int dev)
{
	if (!p)
		return;
	pthread_mutex_lock(&g_lock);
	struct block *b = find(p, dev);
	if (!b || b->base != p) {
		pthread_mutex_unlock(&g_lock);
		die(dev ? "dev_free of a pointer dev_alloc did not return:"
			: "host_free of a pointer host_alloc did not return:", p);
	}
	*b = g_blocks[--g_nblocks];
	if (dev)
		g_count.dev_live--;
	else
		g_count.host_live--;
	pthread_mutex_unlock(&g_lock);
	free(p);
}

static int fake_mem_kind(const void *p, int *device)
{
	pthread_mutex_lock(&g_lock);
	struct block *b = p ? find(p, 1) : NULL;
	int d = b ? b->device : -1;
	pthread_mutex_unlock(&g_lock);
	if (device)
		*device = d;
	return b != NULL;
}

static int alloc_block(int device, size_t bytes, void **out, char *err, size_t errlen)
{
	*out = NULL;
	if (bytes == 0)
		return 0;
	char *p = malloc(bytes);
	if (!p || add_block(p, bytes, device)) {
		free(p);
		snprintf(err, errlen, "fake: out of memory (%zu bytes)", bytes);
		return -ENOMEM;
	}
	memset(p, 0xa5, bytes); /* not zeroed, as cudaMalloc's is not */
	*out = p;
	return 0;
}

static int fake_dev_alloc(int device, size_t bytes, void **out, char *err, size_t errlen)
{
	if (device < 0 || device >= FAKE_DEVICES) {
		*out = NULL;
		snprintf(err, errlen, "fake: no device %d", device);
		return -ENODEV;
	}
	return alloc_block(device, bytes, out, err, errlen);
}

static void fake_dev_free(void *p)
{
	drop_block(p, 1);
}

static int fake_host_alloc(size_t bytes, void **out, char *err, size_t errlen)
{
	return alloc_block(-1, bytes, out, err, errlen);
}

static void fake_host_free(void *p)
{
	drop_block(p, 0);
}

/* Is [p, p + bytes) device memory of `device`? 0, or -EINVAL with what is
 * wrong in err ("<what> <which> host memory" etc.). */
static int check_dev(const char *what, const char *which, const void *p, size_t bytes,
		     int device, char *err, size_t errlen)
{
	pthread_mutex_lock(&g_lock);
	struct block *b = find(p, 1);
	struct block copy = b ? *b : (struct block){0};
	pthread_mutex_unlock(&g_lock);
	if (!b)
		snprintf(err, errlen, "%s %s host memory", what, which);
	else if (copy.device != device)
		snprintf(err, errlen, "%s on device %d of memory on device %d", what, device,
			 copy.device);
	else if ((size_t)(copy.base + copy.size - (const char *)p) < bytes)
		snprintf(err, errlen, "%s of %zu bytes past the end of a device block", what, bytes);
	else
		return 0;
	return -EINVAL;
}

static int check_host(const char *what, const char *which, const void *p, char *err,
		      size_t errlen)
{
	if (!fake_mem_kind(p, NULL))
		return 0;
	snprintf(err, errlen, "%s %s device memory", what, which);
	return -EINVAL;
}

static int fake_copy(int device, void *dst, const void *src, size_t bytes, int kind, char *err,
		     size_t errlen)
{
	static const char *const names[] = {"fake: D2H", "fake: H2D", "fake: D2D"};
	if (kind < HORA_GPU_D2H || kind > HORA_GPU_D2D) {
		snprintf(err, errlen, "fake: copy kind %d", kind);
		return -EINVAL;
	}
	if (device < 0 || device >= FAKE_DEVICES) {
		snprintf(err, errlen, "fake: no device %d", device);
		return -ENODEV;
	}
	if (bytes == 0)
		return 0;
	const char *w = names[kind];
	int rc = kind == HORA_GPU_H2D ? check_host(w, "from", src, err, errlen)
				      : check_dev(w, "from", src, bytes, device, err, errlen);
	if (!rc)
		rc = kind == HORA_GPU_D2H ? check_host(w, "to", dst, err, errlen)
					  : check_dev(w, "to", dst, bytes, device, err, errlen);
	if (rc)
		return rc;
	memmove(dst, src, bytes);
	pthread_mutex_lock(&g_lock);
	g_count.copies++;
	pthread_mutex_unlock(&g_lock);
	return 0;
}

static int fake_nccl_unique_id(uint8_t id[HORA_GPU_NCCL_ID_BYTES], char *err, size_t errlen)
{
	size_t m = sizeof(FAKE_NCCL_MAGIC);
	memcpy(id, FAKE_NCCL_MAGIC, m);
	if (getrandom(id + m, HORA_GPU_NCCL_ID_BYTES - m, 0) != (ssize_t)(HORA_GPU_NCCL_ID_BYTES - m)) {
		snprintf(err, errlen, "fake NCCL: getrandom failed");
		return -EIO;
	}
	return 0;
}

static int fake_nccl_init(const uint8_t id[HORA_GPU_NCCL_ID_BYTES], int nranks, int rank,
			  int device, struct hora_gpu_nccl **out, char *err, size_t errlen)
{
	*out = NULL;
	if (memcmp(id, FAKE_NCCL_MAGIC, sizeof(FAKE_NCCL_MAGIC))) {
		snprintf(err, errlen, "fake NCCL: not an id from nccl_unique_id");
		return -EINVAL;
	}
#ifdef FAKE_NCCL_GROUP
	if (nranks < 1 || rank < 0 || rank >= nranks) {
		snprintf(err, errlen, "fake NCCL: rank %d of %d ranks", rank, nranks);
		return -EINVAL;
	}
#else
	if (nranks != 1) {
		snprintf(err, errlen, "fake NCCL: communicators of one rank only");
		return -ENOTSUP;
	}
	if (rank != 0) {
		snprintf(err, errlen, "fake NCCL: rank %d of 1 rank", rank);
		return -EINVAL;
	}
#endif
	if (device < 0 || device >= FAKE_DEVICES) {
		snprintf(err, errlen, "fake: no device %d", device);
		return -ENODEV;
	}
	struct hora_gpu_nccl *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "fake NCCL: out of memory");
		return -ENOMEM;
	}
#ifdef FAKE_NCCL_GROUP
	int rc;
	if (nranks > 1 && (rc = fake_nccl_group_open(id, HORA_GPU_NCCL_ID_BYTES, nranks, rank, 60000, &c->grp,
						     err, errlen))) {
		free(c);
		return rc;
	}
#endif
	c->magic = FAKE_COMM_MAGIC;
	c->device = device;
	c->nranks = nranks;
	c->rank = rank;
	pthread_mutex_lock(&g_lock);
	g_count.comms_live++;
	pthread_mutex_unlock(&g_lock);
	*out = c;
	return 0;
}

static void fake_nccl_destroy(struct hora_gpu_nccl *c, int abort_it)
{
	if (!c)
		return;
	if (c->magic != FAKE_COMM_MAGIC)
		die("nccl_destroy of a communicator nccl_init did not make:", c);
	c->magic = 0;
#ifdef FAKE_NCCL_GROUP
	fake_nccl_group_close(c->grp);
#endif
	pthread_mutex_lock(&g_lock);
	g_count.comms_live--;
	if (abort_it)
		g_count.aborts++;
	else
		g_count.destroys++;
	pthread_mutex_unlock(&g_lock);
	free(c);
}

/* The checks of nccl_coll's arguments; the element size into *size. */
static int coll_args(struct hora_gpu_nccl *c, int kind, int dtype, int op, int root,
		     size_t *size, char *err, size_t errlen)
{
	static const size_t sizes[] = {4, 8, 2, 2, 4, 8}; /* enum hora_dtype */
	if (!c || c->magic != FAKE_COMM_MAGIC) {
		snprintf(err, errlen, "fake NCCL: not a communicator");
		return -EINVAL;
	}
	if (kind < HORA_GPU_ALLREDUCE || kind > HORA_GPU_REDUCE_SCATTER) {
		snprintf(err, errlen, "NCCL has no collective for kind %d", kind);
		return -EINVAL;
	}
	if (dtype < 0 || dtype > 5) {
		snprintf(err, errlen, "NCCL has no data type for hora's dtype code %d", dtype);
		return -EINVAL;
	}
	if (op < 0 || op > 4) {
		snprintf(err, errlen, "NCCL has no reduction for hora's op code %d", op);
		return -EINVAL;
	}
	if (kind == HORA_GPU_BROADCAST && (root < 0 || root >= c->nranks)) {
		snprintf(err, errlen, "NCCL broadcast: root %d of %d ranks", root, c->nranks);
		return -EINVAL;
	}
	*size = sizes[dtype];
	return 0;
}

__attribute__((unused)) static int fake_nccl_coll(struct hora_gpu_nccl *c, int kind,
						  const void *send, void *recv, size_t count,
						  int dtype, int op, int root, int timeout_ms,
						  char *err, size_t errlen)
{
	static const char *const names[] = {"allreduce", "broadcast", "allgather",
					    "reduce-scatter"};
	size_t size;
	int rc = coll_args(c, kind, dtype, op, root, &size, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&g_lock);
	long n = ++g_count.colls;
	pthread_mutex_unlock(&g_lock);
	if (FAKE_NCCL_FAIL > 0 && n >= FAKE_NCCL_FAIL) {
		if (FAKE_NCCL_FAIL_CODE == ETIMEDOUT)
			snprintf(err, errlen, "NCCL %s: not done after %d ms", names[kind],
				 timeout_ms);
		else
			snprintf(err, errlen, "NCCL %s: fake NCCL failure (FAKE_NCCL_FAIL)",
				 names[kind]);
		return -FAKE_NCCL_FAIL_CODE;
	}
#ifdef FAKE_NCCL_HANG_RANK
	if (c->rank == FAKE_NCCL_HANG_RANK && n >= FAKE_NCCL_HANG_AFTER) { /* a peer stuck in NCCL */
		if (n == FAKE_NCCL_HANG_AFTER) {
			fprintf(stderr, "fake NCCL: rank %d hangs in its collective #%ld\n", c->rank, n);
			fflush(stderr);
		}
		while (!__atomic_load_n(&c->cancel, __ATOMIC_ACQUIRE)) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
		snprintf(err, errlen, "NCCL %s: interrupted", names[kind]);
		return -ECANCELED;
	}
#endif
	if (count == 0)
		return 0;
	if (!fake_mem_kind(send, NULL) || !fake_mem_kind(recv, NULL)) {
		snprintf(err, errlen, "fake NCCL: host pointer (the %s's %s)", names[kind],
			 fake_mem_kind(send, NULL) ? "recv" : "send");
		return -EINVAL;
	}
	char what[64];
	snprintf(what, sizeof(what), "fake NCCL %s", names[kind]);
	const size_t nr = (size_t)c->nranks;
	const size_t in = (kind == HORA_GPU_REDUCE_SCATTER ? nr : 1) * count * size,
		     out = (kind == HORA_GPU_ALLGATHER ? nr : 1) * count * size;
	if (check_dev(what, "send", send, in, c->device, err, errlen) ||
	    check_dev(what, "recv", recv, out, c->device, err, errlen))
		return -EINVAL;
#ifdef FAKE_NCCL_GROUP
	if (c->grp) {
		rc = fake_nccl_group_coll(c->grp, kind, send, recv, count, dtype, op, root, timeout_ms, &c->cancel,
					  err, errlen);
		if (rc == -ECANCELED)
			snprintf(err, errlen, "NCCL %s: interrupted", names[kind]);
		return rc;
	}
#endif
	if (__atomic_load_n(&c->cancel, __ATOMIC_ACQUIRE)) {
		snprintf(err, errlen, "NCCL %s: interrupted", names[kind]);
		return -ECANCELED;
	}
	if (send != recv)
		memmove(recv, send, count * size);
	return 0;
}

static void fake_nccl_interrupt(struct hora_gpu_nccl *c)
{
	if (c)
		__atomic_store_n(&c->cancel, 1, __ATOMIC_RELEASE);
}
#endif

/* The slots an older variant does not have (see the top). */
__attribute__((unused)) static void fake_past_the_end(void)
{
	fprintf(stderr, "fake_gpu: a slot past this version's struct was called\n");
	abort();
}
#define PAST_END(slot)                                                                             \
	.slot = (__typeof__(((struct hora_gpu_ops *)0)->slot))(void (*)(void))fake_past_the_end

__attribute__((visibility("default"))) const struct hora_gpu_ops FAKE_SYMBOL = {
	.abi_version = FAKE_ABI,
	.build = "fake 1.0",
	.device_count = fake_device_count,
	.describe = FAKE_DESCRIBE,
	.saxpy_check = fake_saxpy_check,
	.nccl_version = fake_nccl_version,
#ifdef FAKE_V2
#ifdef FAKE_V2_NULL_SLOT
	.mlp_create = NULL,
#else
	.mlp_create = fake_mlp_create,
#endif
	.mlp_destroy = fake_mlp_destroy,
	.mlp_forward_backward = fake_mlp_fb,
	.mlp_evaluate = fake_mlp_eval,
	.mlp_gemms = fake_mlp_gemms,
	.gemm_time = fake_gemm_time,
	.mlp_load_data = fake_mlp_load_data,
	.mlp_step_idx = fake_mlp_step_idx,
#else
	PAST_END(mlp_create), PAST_END(mlp_destroy), PAST_END(mlp_forward_backward),
	PAST_END(mlp_evaluate), PAST_END(mlp_gemms), PAST_END(gemm_time), PAST_END(mlp_load_data),
	PAST_END(mlp_step_idx),
#endif
#ifdef FAKE_V3
	.mem_kind = fake_mem_kind,
	.dev_alloc = fake_dev_alloc,
	.dev_free = fake_dev_free,
	.host_alloc = fake_host_alloc,
	.host_free = fake_host_free,
	.copy = fake_copy,
	.nccl_unique_id = fake_nccl_unique_id,
	.nccl_init = fake_nccl_init,
	.nccl_destroy = fake_nccl_destroy,
#ifdef FAKE_V3_NULL_SLOT
	.nccl_coll = NULL,
#else
	.nccl_coll = fake_nccl_coll,
#endif
	.nccl_interrupt = fake_nccl_interrupt,
#else
	PAST_END(mem_kind), PAST_END(dev_alloc), PAST_END(dev_free), PAST_END(host_alloc),
	PAST_END(host_free), PAST_END(copy), PAST_END(nccl_unique_id), PAST_END(nccl_init),
	PAST_END(nccl_destroy), PAST_END(nccl_coll), PAST_END(nccl_interrupt),
#endif
};
