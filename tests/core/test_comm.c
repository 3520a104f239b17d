/* test_comm.c - the public collectives (core/hora.h): broadcast from every
 * root, allgather, reduce-scatter (in and out of place), barrier, the async
 * forms and their ordering, mismatched calls named, errors sticky. Every
 * rank is a thread with its own communicator (loop, sockets) in this
 * process; inputs are small integers, so results are exact in every dtype
 * and compared bit for bit. Allreduce itself is covered in tests/net. */
#include "hora.h"
#include "comm_helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXR TC_MAXR

struct rank_ctx {
	int rank, n;
	struct hora_comm *c;
	int rc;
	char err[512];
	void (*fn)(struct rank_ctx *);
	const void *arg;
	int ok; /* set by fn */
};

static void *create(void *p)
{
	struct rank_ctx *x = p;
	struct hora_comm_config cfg;
	tc_config(&cfg, x->rank, x->n);
	cfg.segment_bytes = 16 << 10; /* several ring segments even for small test buffers */
	x->rc = hora_comm_create(&cfg, &x->c, x->err, sizeof(x->err));
	if (!x->rc && x->fn)
		x->fn(x);
	return NULL;
}

/* n ranks as threads, each runs fn; returns after every rank destroyed its comm */
static void run_ranks(int n, void (*fn)(struct rank_ctx *), const void *arg, struct rank_ctx *out)
{
	tc_pick_addrs(n);
	for (int i = 0; i < n; i++)
		out[i] = (struct rank_ctx){.rank = i, .n = n, .fn = fn, .arg = arg};
	tc_threads(n, create, out, sizeof(*out));
	char all[4096] = "";
	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (out[i].rc) {
			bad = 1;
			size_t l = strlen(all);
			snprintf(all + l, sizeof(all) - l, "\n  rank %d of %d: %s", i, n, out[i].err);
		}
		hora_comm_destroy(out[i].c);
	}
	cr_assert_not(bad, "forming the communicator (%s ...):%s", tc_addrs[0], all);
}

static size_t dsize(enum hora_dtype t)
{
	return t == HORA_F64 || t == HORA_I64 ? 8 : t == HORA_F16 || t == HORA_BF16 ? 2 : 4;
}

/* integer v as dtype t (f16/bf16: exact for |v| < 256) */
static void put(void *p, size_t i, enum hora_dtype t, int v)
{
	switch (t) {
	case HORA_F32: ((float *)p)[i] = (float)v; break;
	case HORA_F64: ((double *)p)[i] = v; break;
	case HORA_I32: ((int32_t *)p)[i] = v; break;
	case HORA_I64: ((int64_t *)p)[i] = v; break;
	case HORA_BF16: { /* exact: small integers have <= 8 significant bits */
		float f = (float)v;
		uint32_t u;
		memcpy(&u, &f, 4);
		((uint16_t *)p)[i] = (uint16_t)(u >> 16);
		break;
	}
	case HORA_F16: { /* small integers: sign, exponent, 10-bit mantissa */
		uint16_t h = 0;
		if (v) {
			int a = v < 0 ? -v : v, e = 0;
			while ((a >> e) > 1)
				e++;
			h = (uint16_t)(((e + 15) << 10) | ((a << (10 - e)) & 0x3ff));
			if (v < 0)
				h |= 0x8000;
		}
		((uint16_t *)p)[i] = h;
		break;
	}
	}
}

/* ---- broadcast ---------------------------------------------------------------- */

struct bc_case {
	size_t count;
	enum hora_dtype t;
};

static void bc_fn(struct rank_ctx *x)
{
	const struct bc_case *k = x->arg;
	const size_t bytes = k->count * dsize(k->t);
	uint8_t *buf = malloc(bytes + 1), *want = malloc(bytes + 1);
	x->ok = 1;
	for (int root = 0; root < x->n; root++) {
		for (size_t i = 0; i < k->count; i++) {
			put(want, i, k->t, (int)((i * 13 + (size_t)root * 7) % 100) - 50);
			put(buf, i, k->t, x->rank == root ? (int)((i * 13 + (size_t)root * 7) % 100) - 50 : 99);
		}
		int rc = hora_broadcast(x->c, buf, k->count, k->t, root);
		if (rc) {
			snprintf(x->err, sizeof(x->err), "root %d: %s", root, hora_comm_last_error(x->c));
			x->ok = 0;
			break;
		}
		if (memcmp(buf, want, bytes)) {
			snprintf(x->err, sizeof(x->err), "root %d, count %zu: wrong data", root, k->count);
			x->ok = 0;
			break;
		}
	}
	free(buf);
	free(want);
}

Test(comm, broadcast_from_every_root, .timeout = 120)
{
	/* 0, 1, a few, and sizes past the latency path (chain with several segments) */
	const struct bc_case cases[] = {{0, HORA_F32}, {1, HORA_I64}, {7, HORA_F16},
					{1009, HORA_BF16}, {40009, HORA_F32}, {100003, HORA_I32}};
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 5; n++)
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			run_ranks(n, bc_fn, &cases[c], rk);
			for (int r = 0; r < n; r++)
				cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
		}
}

/* ---- allgather and reduce-scatter ------------------------------------------------ */

struct ag_case {
	size_t count;
	enum hora_dtype t;
	enum hora_op op;
	int in_place;
};

static int contrib(int rank, size_t i)
{
	return (int)((i * 7 + (size_t)rank * 3) % 11) - 5;
}

static void ag_fn(struct rank_ctx *x)
{
	const struct ag_case *k = x->arg;
	const size_t es = dsize(k->t), n = (size_t)x->n;
	uint8_t *all = calloc(n * k->count + 1, es), *mine = malloc(k->count * es + 1),
		*want = malloc(n * k->count * es + 1);
	for (size_t r = 0; r < n; r++)
		for (size_t i = 0; i < k->count; i++)
			put(want, r * k->count + i, k->t, contrib((int)r, i));
	for (size_t i = 0; i < k->count; i++)
		put(k->in_place ? all : mine, (k->in_place ? (size_t)x->rank * k->count : 0) + i, k->t,
		    contrib(x->rank, i));
	const void *send = k->in_place ? all + (size_t)x->rank * k->count * es : mine;
	int rc = hora_allgather(x->c, send, all, k->count, k->t);
	x->ok = !rc && !memcmp(all, want, n * k->count * es);
	if (!x->ok)
		snprintf(x->err, sizeof(x->err), "count %zu %s: %s", k->count,
			 k->in_place ? "in place" : "out of place", rc ? hora_comm_last_error(x->c) : "wrong data");
	free(all);
	free(mine);
	free(want);
}

static void rs_fn(struct rank_ctx *x)
{
	const struct ag_case *k = x->arg;
	const size_t es = dsize(k->t), n = (size_t)x->n, total = n * k->count;
	uint8_t *in = malloc(total * es + 1), *out = malloc(k->count * es + 1), *want = malloc(k->count * es + 1),
		*copy = malloc(total * es + 1);
	for (size_t i = 0; i < total; i++)
		put(in, i, k->t, contrib(x->rank, i));
	memcpy(copy, in, total * es);
	for (size_t i = 0; i < k->count; i++) { /* block `rank` of the reduction */
		size_t g = (size_t)x->rank * k->count + i;
		long acc = contrib(0, g);
		for (int r = 1; r < x->n; r++) {
			long v = contrib(r, g);
			acc = k->op == HORA_SUM ? acc + v : k->op == HORA_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
		}
		put(want, i, k->t, (int)acc);
	}
	void *recv = k->in_place ? in + (size_t)x->rank * k->count * es : out;
	int rc = hora_reduce_scatter(x->c, in, recv, k->count, k->t, k->op);
	x->ok = !rc && !memcmp(recv, want, k->count * es) &&
		(k->in_place || !memcmp(in, copy, total * es)); /* out of place: input untouched */
	if (!x->ok)
		snprintf(x->err, sizeof(x->err), "count %zu %s: %s", k->count,
			 k->in_place ? "in place" : "out of place",
			 rc ? hora_comm_last_error(x->c) : "wrong data or input changed");
	free(in);
	free(out);
	free(want);
	free(copy);
}

Test(comm, allgather_in_and_out_of_place, .timeout = 120)
{
	const size_t counts[] = {0, 1, 1009, 70001};
	const enum hora_dtype types[] = {HORA_F32, HORA_I64, HORA_F16};
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 5; n++)
		for (size_t ci = 0; ci < 4; ci++)
			for (int ip = 0; ip < 2; ip++) {
				struct ag_case k = {counts[ci], types[(ci + (size_t)ip) % 3], HORA_SUM, ip};
				run_ranks(n, ag_fn, &k, rk);
				for (int r = 0; r < n; r++)
					cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
			}
}

Test(comm, reduce_scatter_in_and_out_of_place, .timeout = 120)
{
	const size_t counts[] = {0, 1, 1009, 70001};
	const enum hora_dtype types[] = {HORA_F32, HORA_I32, HORA_F64, HORA_BF16};
	const enum hora_op ops[] = {HORA_SUM, HORA_MAX, HORA_MIN};
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 5; n++)
		for (size_t ci = 0; ci < 4; ci++)
			for (int ip = 0; ip < 2; ip++) {
				struct ag_case k = {counts[ci], types[ci], ops[(ci + (size_t)ip) % 3], ip};
				run_ranks(n, rs_fn, &k, rk);
				for (int r = 0; r < n; r++)
					cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
			}
}

/* ---- barrier --------------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* when the last rank entered the second barrier (ns of CLOCK_MONOTONIC) */
static _Atomic long long last_arrived_ns;

static void barrier_fn(struct rank_ctx *x)
{
	/* the last rank arrives 300 ms late: nobody may leave before it arrived
	 * (compared with the time it recorded on entering, so a rank that is
	 * descheduled somewhere cannot make the barrier look early or late) */
	hora_barrier(x->c); /* line everyone up first */
	double t0 = now_s();
	if (x->rank == x->n - 1) {
		usleep(300000);
		atomic_store(&last_arrived_ns, (long long)(now_s() * 1e9));
	}
	int rc = hora_barrier(x->c);
	double left = now_s(), arrived = (double)atomic_load(&last_arrived_ns) * 1e-9;
	x->ok = !rc && arrived > 0 && left >= arrived;
	snprintf(x->err, sizeof(x->err), "rc %d, left %.3f s after the first barrier, the last rank "
		 "arrived after %.3f s: %s", rc, left - t0, arrived - t0,
		 rc ? hora_comm_last_error(x->c) : "");
}

Test(comm, barrier_waits_for_the_last_rank, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	for (int n = 2; n <= 5; n++) {
		atomic_store(&last_arrived_ns, 0);
		run_ranks(n, barrier_fn, NULL, rk);
		for (int r = 0; r < n; r++)
			cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
	}
}

/* ---- async ------------------------------------------------------------------------ */

#define NASYNC 8
static void async_fn(struct rank_ctx *x)
{
	/* a mix of sizes (latency path and ring) queued at once, a blocking call
	 * behind them, then every result checked */
	static const size_t counts[NASYNC] = {1, 300000, 5, 4096, 100000, 2, 65536, 7};
	float *buf[NASYNC];
	struct hora_request *rq[NASYNC];
	x->ok = 1;
	for (int k = 0; k < NASYNC; k++) {
		buf[k] = malloc(counts[k] * sizeof(float));
		for (size_t i = 0; i < counts[k]; i++)
			buf[k][i] = (float)(contrib(x->rank, i + (size_t)k));
		if (hora_allreduce_async(x->c, buf[k], buf[k], counts[k], HORA_F32, HORA_SUM, &rq[k]))
			x->ok = 0;
	}
	int32_t tag = x->rank, tags = 0;
	int rc = hora_allreduce(x->c, &tag, &tags, 1, HORA_I32, HORA_SUM); /* runs after the eight */
	if (rc || tags != x->n * (x->n - 1) / 2) {
		x->ok = 0;
		snprintf(x->err, sizeof(x->err), "blocking call behind async ones: rc %d, %d", rc, tags);
	}
	for (int k = 0; k < NASYNC; k++) {
		if (!hora_test(rq[k])) {
			x->ok = 0; /* the blocking call ran after it: it must be done */
			snprintf(x->err, sizeof(x->err), "request %d not done after a later call", k);
		}
		if (hora_wait(rq[k])) {
			x->ok = 0;
			snprintf(x->err, sizeof(x->err), "request %d: %s", k, hora_comm_last_error(x->c));
		}
		for (size_t i = 0; i < counts[k] && x->ok; i++) {
			long s = 0;
			for (int r = 0; r < x->n; r++)
				s += contrib(r, i + (size_t)k);
			if (buf[k][i] != (float)s) {
				x->ok = 0;
				snprintf(x->err, sizeof(x->err), "request %d element %zu: %g != %ld", k, i,
					 buf[k][i], s);
			}
		}
		free(buf[k]);
	}
}

Test(comm, async_calls_run_in_order_and_finish, .timeout = 120)
{
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 4; n++) {
		run_ranks(n, async_fn, NULL, rk);
		for (int r = 0; r < n; r++)
			cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
	}
}

/* hora.h: requests may be waited for after hora_comm_destroy, which runs
 * the queued ones first (the ThreadSanitizer driver tests/tsan/coll_threads.c
 * checks that waiting then no longer touches the destroyed communicator) */
Test(comm, requests_can_be_waited_for_after_destroy, .timeout = 60)
{
	const char *self[1] = {"127.0.0.1:0"};
	struct hora_comm_config cfg;
	hora_comm_config_defaults(&cfg);
	cfg.size = 1;
	cfg.addrs = self;
	cfg.secret = "test-cluster-secret-0123456789";
	cfg.secret_len = strlen(cfg.secret);
	struct hora_comm *c;
	char err[256];
	cr_assert_eq(hora_comm_create(&cfg, &c, err, sizeof(err)), 0, "%s", err);
	enum { K = 6, COUNT = 1 << 18 };
	float *in[K], *out[K];
	struct hora_request *rq[K];
	for (int k = 0; k < K; k++) {
		in[k] = malloc(COUNT * sizeof(float));
		out[k] = calloc(COUNT, sizeof(float));
		for (size_t i = 0; i < COUNT; i++)
			in[k][i] = (float)contrib(k, i);
		cr_assert_eq(hora_allreduce_async(c, in[k], out[k], COUNT, HORA_F32, HORA_SUM, &rq[k]), 0);
	}
	hora_comm_destroy(c);
	for (int k = 0; k < K; k++) {
		cr_assert_eq(hora_wait(rq[k]), 0, "request %d", k);
		cr_assert_eq(memcmp(in[k], out[k], COUNT * sizeof(float)), 0, "request %d's result", k);
		free(in[k]);
		free(out[k]);
	}
}

/* ---- mismatches and sticky errors ------------------------------------------------- */

static void mismatch_fn(struct rank_ctx *x)
{
	float v[4] = {1, 2, 3, 4};
	int rc = x->rank == 0 ? hora_allreduce(x->c, v, v, 4, HORA_F32, HORA_SUM)
			      : hora_broadcast(x->c, v, 4, HORA_F32, 0);
	const char *e = hora_comm_last_error(x->c);
	int rc2 = hora_barrier(x->c); /* broken: same error at once */
	/* rank 1 sees rank 0's allreduce where it expects the broadcast and names
	 * both; rank 0 sees the broadcast's fingerprint (it checks around the
	 * ring) and names both too, or is told by rank 1 that it stopped, and why */
	x->ok = rc == -EBADE && strstr(e, "mismatched") && rc2 == rc &&
		((x->rank == 0 && strstr(e, "rank 1 stopped")) ||
		 (strstr(e, "allreduce #1") && strstr(e, "broadcast #1")));
	snprintf(x->err, sizeof(x->err), "rc %d then %d: %s", rc, rc2, e);
}

Test(comm, mismatched_collectives_are_named_and_sticky, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	run_ranks(2, mismatch_fn, NULL, rk);
	for (int r = 0; r < 2; r++)
		cr_assert(rk[r].ok, "rank %d: %s", r, rk[r].err);
}

Test(comm, bad_arguments_are_refused)
{
	struct hora_comm_config cfg;
	hora_comm_config_defaults(&cfg);
	struct hora_comm *c = NULL;
	char err[256];
	cfg.size = 2;
	cfg.rank = 2;
	cr_assert_eq(hora_comm_create(&cfg, &c, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "rank 2 of 2"), "%s", err);
	const char *a[1] = {"127.0.0.1:1"};
	cfg.rank = 0;
	cfg.size = 1;
	cfg.addrs = a;
	cfg.secret = "short";
	cfg.secret_len = 5;
	cr_assert_eq(hora_comm_create(&cfg, &c, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "secret"), "%s", err);
	cr_assert_null(c);
}
