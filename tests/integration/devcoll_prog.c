/* devcoll_prog.c - one worker of test_devcoll.sh (run under `hora run` or
 * `hora launch FILE -- CMD`): the collectives on device buffers against the
 * same collectives on host buffers, with the CPU test double of the GPU
 * library (tests/plugins/fake_gpu.c, FAKE_V3), whose "device memory" is
 * host memory it tracks: a device pointer that reached host code, or a
 * host pointer that reached its copies or its NCCL, is an error there.
 *
 *   devcoll_prog FAKE_GPU_SO check     every dtype x op x count of the
 *       allreduce, allgather and reduce-scatter (out of place and in place),
 *       the broadcast, and f32/f64 neighbour allreduces (a ring) and pair
 *       averages (2k with 2k+1, an even number of ranks) on device buffers: each result bitwise equal to the
 *       host collective's on the same data (an f32/f64 average within its
 *       last bit: NCCL may divide otherwise), and the same bits on every
 *       rank; prints "devcoll: rank R of N:
 *       K results equal to the host's; <how the device calls went>"
 *   devcoll_prog FAKE_GPU_SO mismatch  rank 0 passes device buffers, the
 *       others host buffers: every rank must fail; prints "devcoll: rank R:
 *       failed as it must: <hora's message>" and exits 3
 *   devcoll_prog FAKE_GPU_SO loop STEPS  STEPS checked allreduces on device
 *       buffers, 20 ms apart, re-forming after a failure on an elastic job
 *       (exit 4 after a failure elsewhere); the last line "devcoll: rank R
 *       of N: done: STEPS steps; <how the device calls went>"
 * Exit 0 when all is as it must be, else 1 (what differed on stderr). */
#include "hora.h"

#include "core/comm.h"
#include "gpu/hora_gpu.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t esz[] = {4, 8, 2, 2, 4, 8}; /* enum hora_dtype */
static const char *const dname[] = {"f32", "f64", "f16", "bf16", "i32", "i64"};

/* element i of rank r: a small integer 1..7 (exact in every dtype, and its
 * sums, products of 2-4 ranks too), as the dtype's bits */
static void fill(void *buf, size_t count, enum hora_dtype t, int r, int salt)
{
	static const uint16_t f16[8] = {0, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0x4700};
	for (size_t i = 0; i < count; i++) {
		const int v = (int)((i * 7 + (size_t)r * 3 + (size_t)salt) % 7) + 1;
		const float f = (float)v;
		uint32_t fb;
		memcpy(&fb, &f, 4);
		switch (t) {
		case HORA_F32: ((float *)buf)[i] = f; break;
		case HORA_F64: ((double *)buf)[i] = v; break;
		case HORA_F16: ((uint16_t *)buf)[i] = f16[v]; break;
		case HORA_BF16: ((uint16_t *)buf)[i] = (uint16_t)(fb >> 16); break;
		case HORA_I32: ((int32_t *)buf)[i] = v; break;
		case HORA_I64: ((int64_t *)buf)[i] = v; break;
		}
	}
}

struct bufs {
	void *dsend, *drecv;     /* device */
	uint8_t *hsend, *hrecv;  /* host: the reference */
	uint8_t *back;           /* the device result, copied back */
	size_t bytes;            /* of each */
};

static uint64_t hash(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h >> 1; /* non-negative as int64 */
}

/* NCCL's f32/f64 average over a number of ranks that is no power of two
 * may round otherwise than the host's (a multiplication by 1/n, a
 * pre-scaled sum): within the dtype's last bit of the host's, elementwise
 * (f16 and bf16 averages, and every other result, must be bitwise equal) */
static bool close_to(const struct bufs *b, size_t out, enum hora_dtype t)
{
	const double tol = t == HORA_F32 ? 2.4e-7 : 4.5e-16;
	for (size_t i = 0; i < out / esz[t]; i++) {
		const double x = t == HORA_F32 ? ((const float *)(const void *)b->back)[i]
					       : ((const double *)(const void *)b->back)[i];
		const double y = t == HORA_F32 ? ((const float *)(const void *)b->hrecv)[i]
					       : ((const double *)(const void *)b->hrecv)[i];
		const double d = x > y ? x - y : y - x;
		if (d > tol * (y > 0 ? y : -y))
			return false;
	}
	return true;
}

static int to_dev(void *d, const void *h, size_t n)
{
	char e[256];
	int rc = hora_gpu_copy(0, d, h, n, HORA_GPU_H2D, e, sizeof(e));
	if (rc)
		fprintf(stderr, "devcoll: H2D: %s\n", e);
	return rc;
}

static int to_host(void *h, const void *d, size_t n)
{
	char e[256];
	int rc = hora_gpu_copy(0, h, d, n, HORA_GPU_D2H, e, sizeof(e));
	if (rc)
		fprintf(stderr, "devcoll: D2H: %s\n", e);
	return rc;
}

enum what { AR, AR_INPLACE, BCAST, AGATHER, AG_INPLACE, RSCATTER, RS_INPLACE, NEIGHBOR, PAIR, WHATS };
static const char *const wname[] = {"allreduce", "allreduce in place", "broadcast", "allgather",
				     "allgather in place", "reduce-scatter", "reduce-scatter in place",
				     "neighbour allreduce", "pair average"};

/* one call both ways; 1 when the results are bitwise equal */
static int one(struct hora_comm *c, struct bufs *b, enum what w, size_t count, enum hora_dtype t, enum hora_op op)
{
	const int n = hora_size(c), me = hora_rank(c);
	const bool rs = w == RSCATTER || w == RS_INPLACE, ag = w == AGATHER || w == AG_INPLACE;
	const size_t e = esz[t], in = (rs ? (size_t)n : 1) * count * e, out = (ag ? (size_t)n : 1) * count * e;
	const size_t mine = (size_t)me * count * e; /* this rank's block */
	uint8_t *dsend = b->dsend, *drecv = b->drecv;
	fill(b->hsend, in / e, t, me, (int)w);
	memset(b->hrecv, 0x5a, out);
	if (w == BCAST || w == AR_INPLACE || w == NEIGHBOR || w == PAIR)
		memcpy(b->hrecv, b->hsend, in);
	if (w == AG_INPLACE)
		memcpy(b->hrecv + mine, b->hsend, in);
	if (to_dev(b->dsend, b->hsend, in) || to_dev(b->drecv, b->hrecv, out))
		return -1;
	const int left = (me + n - 1) % n, right = (me + 1) % n, peer = me ^ 1;
	int rd = 0, rh = 0;
	switch (w) {
	case AR:
		rd = hora_allreduce(c, b->dsend, b->drecv, count, t, op);
		rh = hora_allreduce(c, b->hsend, b->hrecv, count, t, op);
		break;
	case AR_INPLACE:
		rd = hora_allreduce(c, b->drecv, b->drecv, count, t, op);
		rh = hora_allreduce(c, b->hrecv, b->hrecv, count, t, op);
		break;
	case BCAST:
		rd = hora_broadcast(c, b->drecv, count, t, n - 1);
		rh = hora_broadcast(c, b->hrecv, count, t, n - 1);
		break;
	case AGATHER:
		rd = hora_allgather(c, b->dsend, b->drecv, count, t);
		rh = hora_allgather(c, b->hsend, b->hrecv, count, t);
		break;
	case AG_INPLACE:
		rd = hora_allgather(c, drecv + mine, drecv, count, t);
		rh = hora_allgather(c, b->hrecv + mine, b->hrecv, count, t);
		break;
	case RSCATTER:
		rd = hora_reduce_scatter(c, b->dsend, b->drecv, count, t, op);
		rh = hora_reduce_scatter(c, b->hsend, b->hrecv, count, t, op);
		break;
	case RS_INPLACE: /* the result in place, in the send buffer's block */
		rd = hora_reduce_scatter(c, dsend, dsend + mine, count, t, op);
		rh = hora_reduce_scatter(c, b->hsend, b->hsend + mine, count, t, op);
		memcpy(b->hrecv, b->hsend + mine, count * e);
		drecv = dsend + mine;
		break;
	case NEIGHBOR: /* a ring: from the left, to the right, 1/2 each */
		rd = hora_neighbor_allreduce(c, drecv, drecv, count, t, 0.5, &left, NULL, 1, &right, NULL, 1);
		rh = hora_neighbor_allreduce(c, b->hrecv, b->hrecv, count, t, 0.5, &left, NULL, 1, &right, NULL, 1);
		break;
	case PAIR: /* ranks 2k and 2k+1 */
		rd = hora_pair_average(c, drecv, count, t, peer);
		rh = hora_pair_average(c, b->hrecv, count, t, peer);
		break;
	case WHATS:
		break;
	}
	if (rd || rh) {
		fprintf(stderr, "devcoll: rank %d: %s %s count %zu: %d/%d: %s\n", me, wname[w], dname[t], count, rd, rh,
			hora_comm_last_error(c));
		return -1;
	}
	const size_t got = rs ? count * e : out;
	if (to_host(b->back, drecv, got))
		return -1;
	/* every rank's result of an allreduce, broadcast, allgather: the same bits */
	if (!rs && w != NEIGHBOR && w != PAIR) {
		int64_t h[2] = {(int64_t)hash(b->back, out), 0};
		h[1] = -h[0];
		if (hora_allreduce(c, h, h, 2, HORA_I64, HORA_MIN))
			return -1;
		if (h[0] != -h[1]) {
			fprintf(stderr, "devcoll: rank %d: %s %s op %d count %zu: the ranks' results differ\n", me,
				wname[w], dname[t], (int)op, count);
			return 0;
		}
	}
	if (memcmp(b->back, b->hrecv, got) && !(op == HORA_AVG && t <= HORA_F64 && close_to(b, got, t))) {
		fprintf(stderr, "devcoll: rank %d: %s %s op %d count %zu: the device result differs from the host's\n",
			me, wname[w], dname[t], (int)op, count);
		return 0;
	}
	return 1;
}

static int check(struct hora_comm *c, struct bufs *b)
{
	static const size_t counts[] = {1, 1000, 70001};
	int good = 0, bad = 0;
	const int n = hora_size(c);
	for (int w = 0; w < WHATS; w++)
		for (int t = 0; t < 6; t++)
			for (int op = 0; op < 5; op++) {
				if ((w == BCAST || w == AGATHER || w == AG_INPLACE || w == NEIGHBOR || w == PAIR) && op)
					continue; /* no op */
				if ((w == NEIGHBOR || w == PAIR) && t > HORA_F64)
					continue; /* averages of floats */
				if (w == PAIR && n % 2)
					continue; /* pairs: an even number of ranks */
				for (int k = 0; k < 3; k++) {
					const int r = one(c, b, (enum what)w, counts[k], (enum hora_dtype)t, (enum hora_op)op);
					if (r < 0)
						return -1;
					r ? good++ : bad++;
				}
			}
	return bad ? -bad : good;
}

/* loop STEPS: STEPS allreduces (sum) of 1024 floats on device buffers,
 * each rank's value step + 1, every element checked against (step + 1) x
 * size; a failed call on an elastic job re-forms (hora_elastic_reform) and
 * does the step again over the new view; elsewhere it is printed, exit 4.
 * Between steps 20 ms, so that a kill lands mid-run. */
static int loop(struct hora_comm *c, struct bufs *b, int steps)
{
	char err[1024];
	float *x = (float *)(void *)b->hsend;
	for (int s = 0; s < steps;) {
		for (int i = 0; i < 1024; i++)
			x[i] = (float)(s + 1);
		int rc = to_dev(b->dsend, x, 4096) ? -EIO : hora_allreduce(c, b->dsend, b->dsend, 1024, HORA_F32, HORA_SUM);
		if (rc) {
			printf("devcoll: rank %d: step %d failed: %s\n", hora_rank(c), s, hora_comm_last_error(c));
			fflush(stdout);
			if (!hora_elastic_on(c))
				return 4;
			if ((rc = hora_elastic_reform(c, rc, err, sizeof(err)))) {
				fprintf(stderr, "devcoll: re-form: %s\n", err);
				return 1;
			}
			printf("devcoll: re-formed: rank %d of %d\n", hora_rank(c), hora_size(c));
			continue;
		}
		if (to_host(x, b->dsend, 4096))
			return 1;
		for (int i = 0; i < 1024; i++)
			if (x[i] != (float)((s + 1) * hora_size(c))) {
				fprintf(stderr, "devcoll: rank %d: step %d: %g, not %d\n", hora_rank(c), s, x[i],
					(s + 1) * hora_size(c));
				return 1;
			}
		if (++s == 10) {
			printf("devcoll: rank %d: 10 steps done\n", hora_rank(c));
			fflush(stdout);
		}
		struct timespec ts = {0, 20000000};
		nanosleep(&ts, NULL);
	}
	printf("devcoll: rank %d of %d: done: %d steps; %s\n", hora_rank(c), hora_size(c), steps,
	       hora_comm_device_path(c));
	return 0;
}

static int mismatch(struct hora_comm *c, struct bufs *b)
{
	const int me = hora_rank(c);
	float x[16] = {0};
	int rc = me == 0 ? hora_allreduce(c, b->dsend, b->drecv, 16, HORA_F32, HORA_SUM)
			 : hora_allreduce(c, x, x, 16, HORA_F32, HORA_SUM);
	if (!rc) {
		fprintf(stderr, "devcoll: rank %d: device and host buffers in one allreduce did not fail\n", me);
		return 1;
	}
	printf("devcoll: rank %d: failed as it must: %s\n", me, hora_comm_last_error(c));
	return 3;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[2], "check") && strcmp(argv[2], "mismatch") &&
			 (strcmp(argv[2], "loop") || argc != 4))) {
		fprintf(stderr, "usage: devcoll_prog FAKE_GPU_SO check|mismatch|loop STEPS\n");
		return 2;
	}
	char why[512];
	if (hora_gpu_use_library(argv[1]) || hora_cuda_init(why, sizeof(why)) < 1) {
		fprintf(stderr, "devcoll: the fake GPU library %s: %s\n", argv[1], why);
		return 1;
	}
	struct hora_comm *c;
	if (hora_init(NULL, &c, why, sizeof(why))) {
		fprintf(stderr, "devcoll: hora_init: %s\n", why);
		return 1;
	}
	const int n = hora_size(c), me = hora_rank(c);
	struct bufs b = {.bytes = (size_t)n * 70001 * 8};
	b.hsend = malloc(b.bytes), b.hrecv = malloc(b.bytes), b.back = malloc(b.bytes);
	if (!b.hsend || !b.hrecv || !b.back || hora_gpu_dev_alloc(0, b.bytes, &b.dsend, why, sizeof(why)) ||
	    hora_gpu_dev_alloc(0, b.bytes, &b.drecv, why, sizeof(why))) {
		fprintf(stderr, "devcoll: buffers: %s\n", why);
		return 1;
	}
	int rc;
	if (!strcmp(argv[2], "mismatch")) {
		rc = mismatch(c, &b);
	} else if (!strcmp(argv[2], "loop")) {
		rc = loop(c, &b, atoi(argv[3]));
	} else {
		const int k = check(c, &b);
		if (k > 0)
			printf("devcoll: rank %d of %d: %d results equal to the host's; %s\n", me, n, k,
			       hora_comm_device_path(c));
		else
			fprintf(stderr, "devcoll: rank %d: %d results differ\n", me, -k);
		rc = k > 0 ? 0 : 1;
	}
	hora_gpu_dev_free(b.dsend);
	hora_gpu_dev_free(b.drecv);
	free(b.hsend), free(b.hrecv), free(b.back);
	hora_finalize(c);
	return rc;
}
