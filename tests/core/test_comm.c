/* test_comm.c - the public collectives (core/hora.h): broadcast from every
 * root, allgather, reduce-scatter (in and out of place), barrier, the async
 * forms and their ordering, mismatched calls named, errors sticky. Every
 * rank is a thread with its own communicator (loop, sockets) in this
 * process; inputs are small integers, so results are exact in every dtype
 * and compared bit for bit. Allreduce itself is covered in tests/net. */
#include "hora.h"
#include "comm_helpers.h"
#include "comm.h"
#include "distopt.h"
#include "env.h"
#include "init.h"
#include "net/util/clock.h"
#include "net/coll/coll.h"

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
	int out; /* what fn reports, when it reports a number */
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

/* AVG: every rank gives the same values, so the average is each value
 * itself, exactly (the sum n * v divided once by n): a sum left undivided
 * or divided twice shows (the one-host stage divides after its
 * reduce-scatter, the ring at its last step) */
static void rs_avg_fn(struct rank_ctx *x)
{
	const struct ag_case *k = x->arg;
	const size_t es = dsize(k->t), n = (size_t)x->n, total = n * k->count;
	uint8_t *in = malloc(total * es + 1), *out = malloc(k->count * es + 1), *want = malloc(k->count * es + 1);
	for (size_t i = 0; i < total; i++)
		put(in, i, k->t, contrib(0, i));
	for (size_t i = 0; i < k->count; i++)
		put(want, i, k->t, contrib(0, (size_t)x->rank * k->count + i));
	void *recv = k->in_place ? in + (size_t)x->rank * k->count * es : out;
	int rc = hora_reduce_scatter(x->c, in, recv, k->count, k->t, HORA_AVG);
	x->ok = !rc && !memcmp(recv, want, k->count * es);
	if (!x->ok)
		snprintf(x->err, sizeof(x->err), "avg count %zu %s: %s", k->count,
			 k->in_place ? "in place" : "out of place", rc ? hora_comm_last_error(x->c) : "wrong data");
	free(in);
	free(out);
	free(want);
}

Test(comm, reduce_scatter_avg_divides_once, .timeout = 120)
{
	const size_t counts[] = {1, 1009, 70001};
	const enum hora_dtype types[] = {HORA_F32, HORA_I32, HORA_F64};
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 4; n++)
		for (size_t ci = 0; ci < 3; ci++)
			for (int ip = 0; ip < 2; ip++) {
				struct ag_case k = {counts[ci], types[ci], HORA_AVG, ip};
				run_ranks(n, rs_avg_fn, &k, rk);
				for (int r = 0; r < n; r++)
					cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
			}
}

/* ---- barrier --------------------------------------------------------------------- */

/* when the last rank entered the second barrier (ns of CLOCK_MONOTONIC) */
static _Atomic long long last_arrived_ns;

static void barrier_fn(struct rank_ctx *x)
{
	/* the last rank arrives 300 ms late: nobody may leave before it arrived
	 * (compared with the time it recorded on entering, so a rank that is
	 * descheduled somewhere cannot make the barrier look early or late) */
	hora_barrier(x->c); /* line everyone up first */
	double t0 = hora_clock_s();
	if (x->rank == x->n - 1) {
		usleep(300000);
		atomic_store(&last_arrived_ns, (long long)(hora_clock_s() * 1e9));
	}
	int rc = hora_barrier(x->c);
	double left = hora_clock_s(), arrived = (double)atomic_load(&last_arrived_ns) * 1e-9;
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

/* ---- local rank and size ----------------------------------------------------------- */

/* ranks on two hosts (127.x.y.z and the next z, both loopback): local rank
 * and size count the ranks that listen on the same host */
static void local_fn(struct rank_ctx *x)
{
	int lr = hora_local_rank(x->c), ls = hora_local_size(x->c);
	/* hosts: even ranks on A, odd ranks on B */
	int want_size = (x->n + (x->rank % 2 ? 0 : 1)) / 2, want_rank = x->rank / 2;
	x->ok = lr == want_rank && ls == want_size && hora_rank(x->c) == x->rank &&
		hora_size(x->c) == x->n;
	snprintf(x->err, sizeof(x->err), "local rank %d of %d, want %d of %d", lr, ls, want_rank,
		 want_size);
}

Test(comm, local_rank_and_size_count_the_ranks_of_one_host, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 5; n++) {
		tc_pick_addrs(n);
		for (int i = 1; i < n; i += 2) { /* odd ranks: the next host address */
			unsigned h1, h2, h3, port;
			cr_assert_eq(sscanf(tc_addr[i], "127.%u.%u.%u:%u", &h1, &h2, &h3, &port), 4);
			snprintf(tc_addr[i], sizeof(tc_addr[i]), "127.%u.%u.%u:%u", h1 & 255, h2 & 255,
				 (h3 + 1) % 254 + 1, port & 0xffff);
		}
		for (int i = 0; i < n; i++)
			rk[i] = (struct rank_ctx){.rank = i, .n = n, .fn = local_fn};
		tc_threads(n, create, rk, sizeof(*rk));
		for (int r = 0; r < n; r++) {
			cr_assert_eq(rk[r].rc, 0, "N=%d rank %d (%s): %s", n, r, tc_addrs[r], rk[r].err);
			cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
			hora_comm_destroy(rk[r].c);
		}
	}
	cr_assert_eq(hora_local_rank(NULL), 0);
	cr_assert_eq(hora_local_size(NULL), 1);
}

/* ---- hora_comm_mem_alloc: the single-copy path of one host ---------------------- */

#define MC 100003 /* elements: above the latency path */
/* three in-place allreduces of hora_comm_mem_alloc'd buffers (arg set:
 * rank 1's is malloc'd, so every rank runs the copying stage), each result
 * checked; ok when every call took the path it should */
static void mem_fn(struct rank_ctx *x)
{
	const int n = x->n, me = x->rank, plain = x->arg && me == 1;
	float *b = plain ? malloc(MC * sizeof(float)) : hora_comm_mem_alloc(x->c, MC * sizeof(float));
	if (!b) {
		snprintf(x->err, sizeof(x->err), "no memory");
		return;
	}
	const uint64_t before = hora_net_comm_single_copy_calls(hora_comm_net(x->c));
	x->ok = 1;
	for (int k = 0; k < 3 && x->ok; k++) {
		for (size_t i = 0; i < MC; i++)
			b[i] = (float)(contrib(me, i + (size_t)k) * (k + 1));
		if ((x->rc = hora_allreduce(x->c, b, b, MC, HORA_F32, HORA_SUM))) {
			snprintf(x->err, sizeof(x->err), "%s", hora_comm_last_error(x->c));
			x->ok = 0;
		}
		for (size_t i = 0; i < MC && x->ok; i++) {
			float want = 0;
			for (int r = 0; r < n; r++)
				want += (float)(contrib(r, i + (size_t)k) * (k + 1));
			if (b[i] != want) {
				snprintf(x->err, sizeof(x->err), "call %d: [%zu] = %g, want %g", k, i, (double)b[i],
					 (double)want);
				x->ok = 0;
			}
		}
	}
	const uint64_t took = hora_net_comm_single_copy_calls(hora_comm_net(x->c)) - before;
	if (x->ok && took != (x->arg ? 0u : 3u)) {
		snprintf(x->err, sizeof(x->err), "%llu calls took the single-copy path", (unsigned long long)took);
		x->ok = 0;
	}
	if (plain)
		free(b);
	else
		hora_comm_mem_free(x->c, b);
}

Test(comm, mem_alloc_buffers_are_averaged_where_they_lie_on_one_host, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	static const int mixed = 1;
	for (int n = 2; n <= 3; n++)
		for (int m = 0; m < 2; m++) {
			run_ranks(n, mem_fn, m ? &mixed : NULL, rk);
			for (int r = 0; r < n; r++)
				cr_assert(rk[r].ok, "N=%d %s rank %d: %s", n, m ? "mixed" : "all shared", r, rk[r].err);
		}
}

/* the regions mapped in this process (each rank's own; no allreduce ran,
 * so no peer's) */
static int regions_mapped(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int k = 0;
	while (f && fgets(line, sizeof(line), f))
		k += strstr(line, "memfd:hora-region") != NULL;
	if (f)
		fclose(f);
	return k;
}

/* 40 buffers in turn, each allocated, averaged and freed: every call takes
 * the single-copy path (a rank offers a stage at most STAGE_WIN_MAX = 16
 * live regions; a freed one's slot is reused, and its peers unmap it when
 * the next one comes), every result right */
#define LOOPS 40
static void mem_loop_fn(struct rank_ctx *x)
{
	const int n = x->n, me = x->rank;
	const uint64_t before = hora_net_comm_single_copy_calls(hora_comm_net(x->c));
	x->ok = 1;
	for (int k = 0; k < LOOPS && x->ok; k++) {
		float *b = hora_comm_mem_alloc(x->c, MC * sizeof(float));
		if (!b) {
			snprintf(x->err, sizeof(x->err), "no memory");
			x->ok = 0;
			break;
		}
		for (size_t i = 0; i < MC; i++)
			b[i] = (float)contrib(me, i + (size_t)k);
		if ((x->rc = hora_allreduce(x->c, b, b, MC, HORA_F32, HORA_SUM))) {
			snprintf(x->err, sizeof(x->err), "call %d: %s", k, hora_comm_last_error(x->c));
			x->ok = 0;
		}
		for (size_t i = 0; i < MC && x->ok; i++) {
			float want = 0;
			for (int r = 0; r < n; r++)
				want += (float)contrib(r, i + (size_t)k);
			if (b[i] != want) {
				snprintf(x->err, sizeof(x->err), "call %d: [%zu] = %g, want %g", k, i, (double)b[i],
					 (double)want);
				x->ok = 0;
			}
		}
		hora_comm_mem_free(x->c, b);
	}
	const uint64_t took = hora_net_comm_single_copy_calls(hora_comm_net(x->c)) - before;
	if (x->ok && took != LOOPS) {
		snprintf(x->err, sizeof(x->err), "%llu of %d calls took the single-copy path", (unsigned long long)took,
			 LOOPS);
		x->ok = 0;
	}
	if (x->ok && (x->rc = hora_barrier(x->c)) == 0) /* every rank's loop done: count the mappings */
		x->out = regions_mapped();
}

Test(comm, mem_alloc_in_a_loop_keeps_the_single_copy_path_and_unmaps_freed_regions, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	const int n = 3, before = regions_mapped();
	run_ranks(n, mem_loop_fn, NULL, rk);
	for (int r = 0; r < n; r++)
		cr_assert(rk[r].ok, "rank %d: %s", r, rk[r].err);
	/* at most each rank's last region, still mapped by its peers (they
	 * unmap it when a next one comes), where 16 of each would stay */
	for (int r = 0; r < n; r++)
		cr_assert_leq(rk[r].out - before, n * (n - 1), "rank %d saw %d regions mapped", r, rk[r].out - before);
}

/* each rank frees the next rank's buffer through its own communicator:
 * found in the other's regions and unmapped there (it once went to free()) */
static void *cross_bufs[MAXR];
static void cross_free_fn(struct rank_ctx *x)
{
	x->rc = (cross_bufs[x->rank] = hora_comm_mem_alloc(x->c, 4096)) ? hora_barrier(x->c) : -ENOMEM;
	if (!x->rc) {
		hora_comm_mem_free(x->c, cross_bufs[(x->rank + 1) % x->n]);
		x->rc = hora_barrier(x->c);
	}
	x->ok = !x->rc;
	x->out = regions_mapped(); /* every rank's freed, the communicators still there */
}

Test(comm, mem_free_through_another_communicator_frees_it_there, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	const int before = regions_mapped();
	run_ranks(3, cross_free_fn, NULL, rk);
	for (int r = 0; r < 3; r++) {
		cr_assert(rk[r].ok, "rank %d: rc %d", r, rk[r].rc);
		cr_assert_eq(rk[r].out, before, "rank %d: %d regions still mapped (%d before)", r, rk[r].out, before);
	}
}

/* memory kept past its communicator's destroy (which freed it): a late
 * hora_comm_mem_free of it is a warning, not free() of a mapping (abort) */
static void *late_buf;
static void late_alloc_fn(struct rank_ctx *x)
{
	late_buf = hora_comm_mem_alloc(x->c, 4096);
	x->ok = late_buf && regions_mapped() > 0;
	x->rc = x->ok ? 0 : -ENOMEM;
}

Test(comm, mem_free_after_destroy_leaves_the_freed_region_alone, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	const int before = regions_mapped();
	run_ranks(1, late_alloc_fn, NULL, rk);
	cr_assert(rk[0].ok, "the allocation: rc %d", rk[0].rc);
	cr_assert_eq(regions_mapped(), before, "the destroy left %d regions mapped (%d before)",
		     regions_mapped(), before);
	hora_comm_mem_free(NULL, late_buf); /* aborted here before */
	hora_comm_mem_free(NULL, NULL);
	void *p = malloc(64);
	hora_comm_mem_free(NULL, p); /* ordinary memory still goes to free() */
}

/* ---- the async forms of broadcast, allgather, reduce-scatter, barrier ------------ */

#define AC 1000 /* elements per rank */
static void async_others_fn(struct rank_ctx *x)
{
	const int n = x->n, me = x->rank, root = n - 1;
	int32_t *bc = malloc(AC * sizeof(int32_t)), *ag = malloc((size_t)n * AC * sizeof(int32_t));
	float *rsin = malloc((size_t)n * AC * sizeof(float)), *rs = malloc(AC * sizeof(float));
	int32_t mine[AC];
	for (size_t i = 0; i < AC; i++) {
		bc[i] = me == root ? (int32_t)(i * 3 + 1) : -1;
		mine[i] = contrib(me, i);
	}
	for (size_t i = 0; i < (size_t)n * AC; i++)
		rsin[i] = (float)contrib(me, i);
	struct hora_request *rq[4];
	int rc[4];
	rc[0] = hora_broadcast_async(x->c, bc, AC, HORA_I32, root, &rq[0]);
	rc[1] = hora_allgather_async(x->c, mine, ag, AC, HORA_I32, &rq[1]);
	rc[2] = hora_reduce_scatter_async(x->c, rsin, rs, AC, HORA_F32, HORA_SUM, &rq[2]);
	rc[3] = hora_barrier_async(x->c, &rq[3]);
	x->ok = 1;
	for (int k = 0; k < 4; k++)
		if (rc[k] || (rc[k] = hora_wait(rq[k]))) {
			x->ok = 0;
			snprintf(x->err, sizeof(x->err), "call %d: rc %d: %s", k, rc[k], hora_comm_last_error(x->c));
			break;
		}
	for (size_t i = 0; i < AC && x->ok; i++) {
		float want = 0;
		for (int r = 0; r < n; r++)
			want += (float)contrib(r, (size_t)me * AC + i);
		if (bc[i] != (int32_t)(i * 3 + 1) || rs[i] != want) {
			x->ok = 0;
			snprintf(x->err, sizeof(x->err), "element %zu: broadcast %d (want %d), reduce_scatter %g "
				 "(want %g)", i, bc[i], (int)(i * 3 + 1), rs[i], want);
		}
		for (int r = 0; r < n && x->ok; r++)
			if (ag[(size_t)r * AC + i] != contrib(r, i)) {
				x->ok = 0;
				snprintf(x->err, sizeof(x->err), "allgather block %d element %zu: %d (want %d)", r, i,
					 ag[(size_t)r * AC + i], contrib(r, i));
			}
	}
	free(bc);
	free(ag);
	free(rsin);
	free(rs);
}

Test(comm, async_broadcast_allgather_reduce_scatter_barrier, .timeout = 120)
{
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 4; n++) {
		run_ranks(n, async_others_fn, NULL, rk);
		for (int r = 0; r < n; r++)
			cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
	}
}

/* an async barrier finishes only once every rank entered it: the last rank
 * enters 300 ms late, after the others recorded that their request was
 * still pending */
static _Atomic int barrier_early;
static void async_barrier_fn(struct rank_ctx *x)
{
	struct hora_request *rq;
	hora_barrier(x->c);
	if (x->rank == x->n - 1)
		usleep(300000);
	int rc = hora_barrier_async(x->c, &rq);
	if (!rc && x->rank != x->n - 1 && hora_test(rq))
		atomic_store(&barrier_early, 1);
	if (!rc)
		rc = hora_wait(rq);
	x->ok = !rc;
	snprintf(x->err, sizeof(x->err), "rc %d: %s", rc, rc ? hora_comm_last_error(x->c) : "");
}

Test(comm, async_barrier_waits_for_the_last_rank, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	atomic_store(&barrier_early, 0);
	run_ranks(3, async_barrier_fn, NULL, rk);
	for (int r = 0; r < 3; r++)
		cr_assert(rk[r].ok, "rank %d: %s", r, rk[r].err);
	cr_assert_not(atomic_load(&barrier_early), "an async barrier finished before the last rank entered");
}

/* hora.h's elastic calls outside an elastic job: a job of one (no cluster
 * file) is not elastic, has nothing pending, and a re-form is refused by
 * name. The multi-process behaviour (a lost worker, a joiner) is
 * test_elastic_api.sh's and tests/python/test_elastic.py's. */
Test(init, elastic_calls_on_a_job_that_is_not_elastic)
{
	char err[256] = "";
	struct hora_comm *c = NULL;
	unsetenv("HORA_CONFIG");
	cr_assert_eq(hora_init(NULL, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_size(c), 1);
	cr_expect_eq(hora_elastic_on(c), 0);
	cr_expect_eq(hora_elastic_joined(c), 0);
	cr_expect_eq(hora_elastic_pending(c), 0);
	cr_assert_eq(hora_elastic_reform(c, 0, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "not an elastic communicator"), "%s", err);
	hora_finalize(c);
}

/* hora_wait_timeout: 1 while the last rank has not come (the request stays
 * valid and is waited for again), then the result, the request freed */
static _Atomic int timeouts_seen;
static void wait_timeout_fn(struct rank_ctx *x)
{
	int v = x->rank + 1, sum = 0;
	if (x->rank == x->n - 1)
		usleep(300000);
	struct hora_request *rq;
	int rc = hora_allreduce_async(x->c, &v, &sum, 1, HORA_I32, HORA_SUM, &rq);
	int t = 0;
	if (!rc)
		while ((rc = hora_wait_timeout(rq, 20)) == 1)
			t++;
	if (x->rank == 0)
		atomic_store(&timeouts_seen, t);
	x->ok = !rc && sum == x->n * (x->n + 1) / 2 && hora_wait_timeout(NULL, 1) == -EINVAL;
	snprintf(x->err, sizeof(x->err), "rc %d sum %d: %s", rc, sum, rc ? hora_comm_last_error(x->c) : "");
}

Test(comm, wait_timeout_returns_1_until_the_request_finished, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	atomic_store(&timeouts_seen, 0);
	run_ranks(2, wait_timeout_fn, NULL, rk);
	for (int r = 0; r < 2; r++)
		cr_assert(rk[r].ok, "rank %d: %s", r, rk[r].err);
	cr_assert_geq(atomic_load(&timeouts_seen), 3, "rank 0 waited 300 ms in 20 ms steps but timed out %d times",
		      atomic_load(&timeouts_seen));
}

/* ---- the small-message threshold --------------------------------------------------- */

static void small_fn(struct rank_ctx *x)
{
	enum { COUNT = 3000 }; /* 12 000 bytes: below the default threshold, above 1 KiB */
	float *in = malloc(COUNT * sizeof(float)), *out = malloc(COUNT * sizeof(float));
	for (size_t i = 0; i < COUNT; i++)
		in[i] = (float)contrib(x->rank, i);
	struct hora_request *rq;
	x->ok = 1;
	/* a queued call finishes before the setting changes */
	int rc = hora_allreduce_async(x->c, in, out, COUNT, HORA_F32, HORA_SUM, &rq);
	const size_t before = hora_comm_small_bytes(x->c);
	int set = hora_comm_set_small_bytes(x->c, 1024);
	if (rc || set || !hora_test(rq) || hora_wait(rq) || hora_comm_small_bytes(x->c) != 1024 ||
	    before != (16 << 10)) {
		x->ok = 0;
		snprintf(x->err, sizeof(x->err), "rc %d, set %d, small_bytes %zu then %zu", rc, set, before,
			 hora_comm_small_bytes(x->c));
	}
	/* above the new threshold: the ring, with the same result */
	float *ring = malloc(COUNT * sizeof(float));
	if (x->ok && (rc = hora_allreduce(x->c, in, ring, COUNT, HORA_F32, HORA_SUM))) {
		x->ok = 0;
		snprintf(x->err, sizeof(x->err), "after the change: %s", hora_comm_last_error(x->c));
	}
	for (size_t i = 0; i < COUNT && x->ok; i++) {
		long s = 0;
		for (int r = 0; r < x->n; r++)
			s += contrib(r, i);
		if (out[i] != (float)s || ring[i] != (float)s) {
			x->ok = 0;
			snprintf(x->err, sizeof(x->err), "element %zu: %g and %g, want %ld", i, out[i], ring[i], s);
		}
	}
	/* the small-message buffers hold 1 MiB: more is refused, the setting kept */
	if (x->ok && (hora_comm_set_small_bytes(x->c, (1 << 20) + 1) != -EINVAL ||
		      hora_comm_small_bytes(x->c) != 1024)) {
		x->ok = 0;
		snprintf(x->err, sizeof(x->err), "1 MiB + 1 accepted or the setting changed (%zu)",
			 hora_comm_small_bytes(x->c));
	}
	free(in);
	free(out);
	free(ring);
}

Test(comm, set_small_bytes_waits_for_queued_calls_and_is_bounded, .timeout = 60)
{
	struct rank_ctx rk[MAXR];
	for (int n = 1; n <= 3; n++) {
		run_ranks(n, small_fn, NULL, rk);
		for (int r = 0; r < n; r++)
			cr_assert(rk[r].ok, "N=%d rank %d: %s", n, r, rk[r].err);
	}
}

/* ---- the environment, read by hora_init only (core/env.c) -------------------------- */

static int init_with_env(const char *name, const char *value, char *err, size_t errlen)
{
	setenv(name, value, 1);
	struct hora_comm *c = NULL;
	int rc = hora_init(NULL, &c, err, errlen); /* no cluster file: a job of one */
	hora_finalize(c);
	unsetenv(name);
	return rc;
}

/* HORA_SPIN_US was read with an unchecked atoi inside net/ ("abc" = 0 = the
 * default, silently); every variable hora_init reads is now refused by name */
Test(init, bad_environment_values_are_named)
{
	static const char *const bad[][2] = {
		{"HORA_SPIN_US", "abc"},         {"HORA_SPIN_US", "-2"},
		{"HORA_FUSION_THRESHOLD", "1x"}, {"HORA_FUSION_THRESHOLD", "-1"},
		{"HORA_CYCLE_TIME_MS", "fast"},  {"HORA_PROC", "two"},
		{"SLURM_PROCID", "-3"},          {"HORA_LOG", "loud"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		int rc = init_with_env(bad[i][0], bad[i][1], err, sizeof(err));
		cr_assert_eq(rc, HORA_ERR_CONFIG, "%s=%s: rc %d", bad[i][0], bad[i][1], rc);
		cr_assert(strstr(err, bad[i][0]) && strstr(err, bad[i][1]), "%s=%s: %s", bad[i][0], bad[i][1],
			  err);
	}
	char err[256] = "";
	cr_assert_eq(init_with_env("HORA_SPIN_US", "-1", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(init_with_env("HORA_SPIN_US", "50", err, sizeof(err)), 0, "%s", err);
}

Test(init, worker_index_comes_from_the_first_variable_set)
{
	char err[256];
	int g = -1;
	unsetenv("HORA_PROC");
	unsetenv("SLURM_PROCID");
	unsetenv("OMPI_COMM_WORLD_RANK");
	unsetenv("PMI_RANK");
	unsetenv("JOB_COMPLETION_INDEX");
	cr_assert_eq(hora_env_proc(&g, err, sizeof(err)), 0);
	cr_assert_eq(g, 0);
	setenv("JOB_COMPLETION_INDEX", "7", 1); /* a Kubernetes Indexed Job's pod */
	cr_assert_eq(hora_env_proc(&g, err, sizeof(err)), 0);
	cr_assert_eq(g, 7, "JOB_COMPLETION_INDEX alone (got %d)", g);
	setenv("PMI_RANK", "5", 1);
	cr_assert_eq(hora_env_proc(&g, err, sizeof(err)), 0);
	cr_assert_eq(g, 5, "PMI_RANK before JOB_COMPLETION_INDEX (got %d)", g);
	setenv("SLURM_PROCID", "3", 1);
	cr_assert_eq(hora_env_proc(&g, err, sizeof(err)), 0);
	cr_assert_eq(g, 3, "SLURM_PROCID before PMI_RANK (got %d)", g);
	setenv("HORA_PROC", "2", 1);
	cr_assert_eq(hora_env_proc(&g, err, sizeof(err)), 0);
	cr_assert_eq(g, 2, "HORA_PROC first (got %d)", g);
	unsetenv("JOB_COMPLETION_INDEX");
}

/* HORA_FUSION_THRESHOLD / HORA_CYCLE_TIME_MS reach the distributed optimizer
 * through hora_init's communicator, over the config; hora_comm_create's
 * communicator reads no environment */
Test(init, fusion_variables_reach_the_distributed_optimizer_through_hora_init)
{
	setenv("HORA_FUSION_THRESHOLD", "4KiB", 1); /* the config's size parser: 4096 bytes */
	setenv("HORA_CYCLE_TIME_MS", "2.5", 1);
	char err[256];
	struct hora_comm *c;
	cr_assert_eq(hora_init(NULL, &c, err, sizeof(err)), 0, "%s", err);
	struct hora_optim_config oc = {.kind = HORA_OPTIM_SGD, .lr = 0.1};
	struct hora_optim *o;
	cr_assert_eq(hora_optim_create(&oc, 10, &o), 0);
	struct hora_fusion_config fc = {.threshold_bytes = 1 << 20};
	struct hora_dist_optim *d;
	cr_assert_eq(hora_dist_optim_create(c, o, 10, &fc, &d), 0);
	cr_assert_eq(hora_dist_optim_fusion(d)->threshold_bytes, 4096);
	cr_assert_float_eq(hora_dist_optim_fusion(d)->cycle_time_ms, 2.5, 1e-12);
	hora_dist_optim_destroy(d);
	hora_finalize(c);

	const char *self[1] = {"127.0.0.1:0"};
	struct hora_comm_config cfg;
	hora_comm_config_defaults(&cfg);
	cfg.size = 1;
	cfg.addrs = self;
	cfg.secret = TC_SECRET;
	cfg.secret_len = strlen(TC_SECRET);
	cr_assert_eq(hora_comm_create(&cfg, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_dist_optim_create(c, o, 10, &fc, &d), 0);
	cr_assert_eq(hora_dist_optim_fusion(d)->threshold_bytes, 1 << 20, "the environment was read");
	hora_dist_optim_destroy(d);
	hora_comm_destroy(c);
	hora_optim_destroy(o);
}

/* hora_init_with reads no environment: the secret comes in the opts
 * (secret_env), and the cluster file's check takes it from there too; it
 * used to read HORA_SECRET inside the cluster loader ("no cluster secret"
 * with HORA_SECRET unset and the secret given) */
Test(init, hora_init_with_takes_the_secret_from_its_opts_only)
{
	char *dir = th_tmpdir(), *file = th_path(dir, "one.yaml");
	const int port = th_port_base(4);
	FILE *f = fopen(file, "w");
	cr_assert(f);
	fprintf(f, "cluster:\n  port_base: %d\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n", port);
	fclose(f);
	unsetenv("HORA_SECRET");
	struct hora_init_opts o;
	hora_init_opts_defaults(&o);
	o.cluster_file = file;
	o.proc = 0;
	char err[512] = "";
	struct hora_comm *c = NULL;
	cr_assert_neq(hora_init_with(&o, &c, err, sizeof(err)), 0, "joined with no secret at all");
	cr_assert(strstr(err, "no cluster secret"), "%s", err);
	o.secret_env = TC_SECRET;
	cr_assert_eq(hora_init_with(&o, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_size(c), 1);
	hora_finalize(c);
	th_rmrf(dir);
	free(file);
	free(dir);
}

/* ---- the loss watcher: a frozen rank is declared dead and stops the job ---- */

/* A stopped process answers no ping: the failure detector declares it dead
 * (suspect_timeout 1 s + 2 probe periods) and the ranks waiting for it fail
 * with HORA_ERR_LOST naming it, long before the 30 s I/O timeout (before:
 * they waited for it, then named whichever rank they read from). The stall
 * inspector is off: the watcher runs for every communicator of hora_init. */
Test(init, a_rank_declared_dead_stops_the_job_with_hora_err_lost, .timeout = 90)
{
	char *dir = th_tmpdir();
	const int port = th_port_base(8);
	struct tc_frozen_rank rk[3];
	char *file = tc_frozen_run(dir, port, 0, rk);
	char want[160];
	snprintf(want, sizeof(want), "rank 2 (worker 2, 127.0.0.1:%d) was declared dead by the failure detector (view ",
		 port + 3);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rk[i].rc, 0, "rank %d: %s (rank 1: %d %s; rank 2: %d %s)", i, rk[i].err, rk[1].rc,
			     rk[1].err, rk[2].rc, rk[2].err);
		cr_assert_eq(rk[i].rc2, HORA_ERR_LOST, "rank %d: rc %d after %.1f s: %s", i, rk[i].rc2,
			     rk[i].waited_s, rk[i].err);
		cr_assert(strstr(rk[i].err, want) && strstr(rk[i].err, " without it): the job stops (elastic "
									"training is off)"),
			  "rank %d: %s", i, rk[i].err);
		cr_assert_lt(rk[i].waited_s, 15, "rank %d waited %.1f s (the I/O timeout is 30 s)", i, rk[i].waited_s);
		hora_finalize(rk[i].c);
	}
	cr_assert_eq(rk[2].rc, 0, "rank 2: %s", rk[2].err);
	cr_assert_neq(rk[2].rc2, 0, "the frozen rank's late allreduce must fail, not hang or succeed");
	hora_finalize(rk[2].c);
	th_rmrf(dir);
	free(file);
	free(dir);
}
