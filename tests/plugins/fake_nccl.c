/* fake_nccl.c - the NCCL of the GPU library's CPU test double (fake_gpu.c
 * FAKE_V3): a communicator of several processes of one host, as NCCL's
 * ranks on the GPUs of one node, over a POSIX shared-memory segment named
 * from the unique id. Every rank copies its input into its slot of the
 * segment, all meet at a barrier, each computes its result from the slots
 * (reducing in rank order 0..n-1, so every rank gets the same bits), and
 * all meet again before the slots are reused. The segment's name is
 * removed as soon as every rank mapped it, so a killed rank leaves nothing
 * in /dev/shm; a rank that never comes (or died) is -ETIMEDOUT after the
 * caller's timeout, as a hung NCCL call. Host memory throughout: the
 * fake's "device memory" is host memory. */
#include "fake_nccl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOT_BYTES (8u << 20) /* the largest input or output of a call */
#define MAX_RANKS 8

struct seg {
	_Atomic uint32_t joined, arrive, gen;
	uint32_t nranks;
	uint8_t pad[48];
	uint8_t slot[]; /* nranks x SLOT_BYTES */
};

struct fake_nccl_group {
	struct seg *s;
	size_t len;
	int nranks, rank;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_a_bit(void)
{
	struct timespec ts = {0, 20000};
	nanosleep(&ts, NULL);
}

/* every rank arrives; -ETIMEDOUT at deadline (a rank that never comes),
 * -ECANCELED once *cancel is set (nccl_interrupt) */
static int barrier(struct fake_nccl_group *g, int64_t deadline, const int *cancel)
{
	struct seg *s = g->s;
	const uint32_t gen = atomic_load(&s->gen);
	if (atomic_fetch_add(&s->arrive, 1) + 1 == (uint32_t)g->nranks) {
		atomic_store(&s->arrive, 0);
		atomic_fetch_add(&s->gen, 1);
		return 0;
	}
	while (atomic_load(&s->gen) == gen) {
		if (deadline && now_ms() > deadline)
			return -ETIMEDOUT;
		if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
			return -ECANCELED;
		pause_a_bit();
	}
	return 0;
}

int fake_nccl_group_open(const uint8_t *id, size_t idlen, int nranks, int rank, int timeout_ms,
			 struct fake_nccl_group **out, char *err, size_t errlen)
{
	if (nranks < 2 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || idlen < 32) {
		snprintf(err, errlen, "fake NCCL: %d ranks (rank %d): it takes 2..%d", nranks, rank, MAX_RANKS);
		return -EINVAL;
	}
	char name[64] = "/hora-fake-nccl-";
	for (int i = 0; i < 16; i++)
		snprintf(name + 16 + 2 * i, 3, "%02x", id[16 + i]);
	const size_t len = sizeof(struct seg) + (size_t)nranks * SLOT_BYTES;
	int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)len)) {
		snprintf(err, errlen, "fake NCCL: %s: %s", name, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(err, errlen, "fake NCCL: mmap: %s", strerror(errno));
		return -EIO;
	}
	struct fake_nccl_group *g = calloc(1, sizeof(*g));
	if (!g) {
		munmap(m, len);
		return -ENOMEM;
	}
	*g = (struct fake_nccl_group){.s = m, .len = len, .nranks = nranks, .rank = rank};
	atomic_fetch_add(&g->s->joined, 1);
	const int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
	while ((int)atomic_load(&g->s->joined) < nranks) { /* as ncclCommInitRank: all or none */
		if (deadline && now_ms() > deadline) {
			shm_unlink(name);
			munmap(m, len);
			free(g);
			snprintf(err, errlen, "fake NCCL: not every rank came within %d ms", timeout_ms);
			return -ETIMEDOUT;
		}
		pause_a_bit();
	}
	if (rank == 0)
		shm_unlink(name); /* every rank has it mapped: nothing is left behind */
	*out = g;
	return 0;
}

void fake_nccl_group_close(struct fake_nccl_group *g)
{
	if (!g)
		return;
	munmap(g->s, g->len);
	free(g);
}

/* ---- element arithmetic: hora's dtypes and ops (core/hora.h) ---------------------- */

static float half_to_float(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
	uint32_t b;
	if (e == 0 && m == 0)
		b = sign;
	else if (e == 31)
		b = sign | 0x7f800000u | (m << 13);
	else if (e == 0) { /* subnormal */
		float f = (float)m / 16777216.0f;
		return sign ? -f : f;
	} else
		b = sign | ((e + 112) << 23) | (m << 13);
	float f;
	memcpy(&f, &b, 4);
	return f;
}

static uint16_t float_to_half(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	const uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
	const int32_t e = (int32_t)((b >> 23) & 255) - 112;
	uint32_t m = b & 0x7fffff;
	if (e >= 31)
		return sign | 0x7c00;
	if (e <= 0)
		return sign; /* (the tests' values are small integers) */
	uint32_t h = ((uint32_t)e << 10) | (m >> 13);
	const uint32_t rest = m & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

static const size_t esz[] = {4, 8, 2, 2, 4, 8};

static double get(const uint8_t *p, size_t i, int t)
{
	switch (t) {
	case 0: return ((const float *)(const void *)p)[i];
	case 1: return ((const double *)(const void *)p)[i];
	case 2: return half_to_float(((const uint16_t *)(const void *)p)[i]);
	case 3: {
		uint32_t b = (uint32_t)((const uint16_t *)(const void *)p)[i] << 16;
		float f;
		memcpy(&f, &b, 4);
		return f;
	}
	case 4: return ((const int32_t *)(const void *)p)[i];
	default: return (double)((const int64_t *)(const void *)p)[i];
	}
}

static void put(uint8_t *p, size_t i, int t, double v)
{
	switch (t) {
	case 0: ((float *)(void *)p)[i] = (float)v; break;
	case 1: ((double *)(void *)p)[i] = v; break;
	case 2: ((uint16_t *)(void *)p)[i] = float_to_half((float)v); break;
	case 3: {
		float f = (float)v;
		uint32_t b;
		memcpy(&b, &f, 4);
		((uint16_t *)(void *)p)[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
		break;
	}
	case 4: ((int32_t *)(void *)p)[i] = (int32_t)v; break;
	default: ((int64_t *)(void *)p)[i] = (int64_t)v; break;
	}
}

/* element i of the reduction over the ranks' slots at byte offset off */
static double reduce_at(const struct fake_nccl_group *g, size_t off, size_t i, int t, int op)
{
	double acc = get(g->s->slot + off, i, t);
	for (int r = 1; r < g->nranks; r++) {
		const double v = get(g->s->slot + (size_t)r * SLOT_BYTES + off, i, t);
		acc = op == 2 ? (v < acc ? v : acc) : op == 3 ? (v > acc ? v : acc) : op == 4 ? acc * v : acc + v;
	}
	if (op == 1) /* AVG: integers truncate */
		acc = t >= 4 ? (double)((int64_t)acc / g->nranks) : acc / g->nranks;
	return acc;
}

int fake_nccl_group_coll(struct fake_nccl_group *g, int kind, const void *send, void *recv, size_t count,
			 int dtype, int op, int root, int timeout_ms, const int *cancel, char *err, size_t errlen)
{
	const size_t e = esz[dtype], n = (size_t)g->nranks;
	const size_t in = (kind == 3 ? n : 1) * count * e, out = (kind == 2 ? n : 1) * count * e;
	if (in > SLOT_BYTES || out > SLOT_BYTES) {
		snprintf(err, errlen, "fake NCCL: a call of %zu bytes (it takes %u)", in > out ? in : out, SLOT_BYTES);
		return -EINVAL;
	}
	const int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
	uint8_t *mine = g->s->slot + (size_t)g->rank * SLOT_BYTES;
	if (kind != 1 || g->rank == root)
		memcpy(mine, send, in);
	int rc = barrier(g, deadline, cancel);
	if (rc)
		goto fail;
	uint8_t *o = recv;
	if (kind == 0 || kind == 3) { /* allreduce, reduce-scatter: block `rank` of the reduction */
		const size_t off = kind == 3 ? (size_t)g->rank * count * e : 0;
		for (size_t i = 0; i < count; i++)
			put(o, i, dtype, reduce_at(g, off, i, dtype, op));
	} else if (kind == 1) {
		memcpy(o, g->s->slot + (size_t)root * SLOT_BYTES, out);
	} else {
		for (size_t r = 0; r < n; r++)
			memcpy(o + r * count * e, g->s->slot + r * SLOT_BYTES, count * e);
	}
	if (!(rc = barrier(g, deadline, cancel)))
		return 0;
fail:
	if (rc == -ECANCELED)
		snprintf(err, errlen, "fake NCCL: interrupted");
	else
		snprintf(err, errlen, "fake NCCL: a rank did not come within %d ms", timeout_ms);
	return rc;
}
