/* stage_helpers.h - what the stage's tests share (test_stage_shm.c,
 * test_stage_window.c): n ranks as real processes over socketpairs, the
 * integer-valued data exact in every dtype and its closed-form result,
 * random data whose reduction order shows in the bits, a hash of results
 * for the parent to compare across ranks. */
#ifndef HORA_TESTS_NET_STAGE_HELPERS_H
#define HORA_TESTS_NET_STAGE_HELPERS_H

#include "net/coll/stage_shm.h"
#include "net/coll/stage_shm_internal.h"
#include "net/util/cpus.h"
#include "../helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 8
#define SLOT (64u << 10)
#define BIG_BYTES ((3u << 20) + 40)

struct result {
	int rc;
	int culprit;    /* the stage's, after a failure */
	long bad;       /* elements that differ from the expected value */
	uint64_t hash;  /* of every result, in order */
	double fail_ms; /* kill test: how long the failing call took */
	int spin_us;    /* the stage's spin after the rank's calls */
	char err[200];
};

struct opts {
	size_t slot_bytes;
	int spin_us, timeout_ms;
	int bind; /* 1: rank r binds itself to the allowed CPU r mod k before create */
};

typedef void (*rank_fn)(struct hora_net_stage *s, int r, int n, void *arg, struct result *res);

static inline uint64_t hash_bytes(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h ^ len;
}

/* the child's own row of sockets, as it passed it to create */
static int *g_socks __attribute__((unused));

/* Fork n ranks, each: create its stage (socks[r], everyone's pids), run
 * fn, send its result, destroy, exit. res[r].rc is -1000 when rank r sent
 * nothing (it died). */
static inline void run_ranks(int n, const struct opts *o, rank_fn fn, void *arg, struct result *res)
{
	int socks[MAXN][MAXN], go[MAXN][2], out[MAXN][2];
	pid_t pids[MAXN];
	for (int i = 0; i < n; i++) {
		socks[i][i] = -1;
		for (int j = i + 1; j < n; j++) {
			int sv[2];
			cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
			socks[i][j] = sv[0];
			socks[j][i] = sv[1];
		}
		cr_assert_eq(pipe(go[i]), 0);
		cr_assert_eq(pipe(out[i]), 0);
	}
	for (int r = 0; r < n; r++) {
		pids[r] = fork();
		cr_assert_geq(pids[r], 0);
		if (pids[r])
			continue;
		/* only our own socket ends: a dead peer's hang-up must show */
		for (int a = 0; a < n; a++)
			for (int b = 0; b < n; b++)
				if (a != r && socks[a][b] >= 0)
					close(socks[a][b]);
		struct result me = {0};
		pid_t all[MAXN];
		if (read(go[r][0], all, sizeof(pid_t) * (size_t)n) != (ssize_t)(sizeof(pid_t) * (size_t)n))
			_exit(2);
		if (o->bind) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(hora_cpus_nth(r), &one);
			if (sched_setaffinity(0, sizeof(one), &one))
				_exit(4);
		}
		struct hora_net_stage_shm_cfg cfg = {.lrank = r, .nlocal = n, .socks = socks[r], .pids = all,
						     .slot_bytes = o->slot_bytes, .spin_us = o->spin_us,
						     .timeout_ms = o->timeout_ms};
		struct hora_net_stage *s = NULL;
		g_socks = socks[r];
		me.rc = hora_net_stage_shm_create(&cfg, &s, me.err, sizeof(me.err));
		if (!me.rc)
			fn(s, r, n, arg, &me);
		me.culprit = s ? s->culprit : -2;
		if (write(out[r][1], &me, sizeof(me)) != (ssize_t)sizeof(me))
			_exit(3);
		if (s)
			s->ops->destroy(s);
		_exit(0);
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			if (socks[i][j] >= 0)
				close(socks[i][j]);
	for (int r = 0; r < n; r++) {
		cr_assert_eq(write(go[r][1], pids, sizeof(pid_t) * (size_t)n), (ssize_t)(sizeof(pid_t) * (size_t)n));
		close(go[r][1]);
		close(go[r][0]);
		close(out[r][1]);
	}
	for (int r = 0; r < n; r++) {
		if (read(out[r][0], &res[r], sizeof(res[r])) != (ssize_t)sizeof(res[r]))
			res[r] = (struct result){.rc = -1000};
		close(out[r][0]);
	}
	for (int r = 0; r < n; r++) {
		int st;
		cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
	}
}

/* ---- integer-valued data: exact in every dtype (|sums| <= 120, products
 * powers of two <= 2^8: bf16 holds them) ---------------------------------- */

static inline double value(int r, size_t i, enum hora_net_op op)
{
	if (op == HORA_NET_PROD) {
		static const double v[4] = {-2, -1, 1, 2};
		return v[(i + 3 * (size_t)r) % 4];
	}
	return (double)((i * 7 + (size_t)r * 13) % 31) - 15;
}

/* AVG: the allreduce's sum divided by n in the dtype (hora_net_scale: the
 * stage's own division, so the quotient's rounding is the same); div 0:
 * the sum (reduce-scatter: the caller divides) */
static inline double expected_div(int n, size_t i, enum hora_net_op op, enum hora_net_dtype t, int div)
{
	double acc = value(0, i, op);
	for (int r = 1; r < n; r++) {
		double v = value(r, i, op);
		acc = op == HORA_NET_MIN ? (v < acc ? v : acc)
		      : op == HORA_NET_MAX ? (v > acc ? v : acc)
		      : op == HORA_NET_PROD ? acc * v : acc + v;
	}
	if (op != HORA_NET_AVG || div <= 1)
		return acc;
	uint64_t one = 0; /* the sum is exact in every dtype (|sums| <= 120) */
	hora_net_value_put(&one, 0, t, acc);
	hora_net_scale(&one, 1, t, div);
	return hora_net_value_get(&one, 0, t);
}

static inline double expected(int n, size_t i, enum hora_net_op op, enum hora_net_dtype t)
{
	return expected_div(n, i, op, t, n);
}

static inline void fill(void *buf, size_t count, enum hora_net_dtype t, int r, enum hora_net_op op)
{
	for (size_t i = 0; i < count; i++)
		hora_net_value_put(buf, i, t, value(r, i, op));
}

/* The counts of the matrix for n ranks; the last (BIG_BYTES) for SUM or f32 only. */
static inline size_t counts(int n, enum hora_net_dtype t, size_t *c)
{
	size_t k = 0;
	c[k++] = 0;
	c[k++] = 1;
	c[k++] = (size_t)(n > 1 ? n - 1 : 2);
	c[k++] = 2 * (size_t)n + 1;
	c[k++] = 1001;
	c[k++] = 5 * SLOT / hora_net_dtype_size(t) + 3; /* several slots and pieces */
	c[k++] = BIG_BYTES / hora_net_dtype_size(t) + 1;
	return k;
}

static inline uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline void random_fill(void *buf, size_t count, enum hora_net_dtype t, int r)
{
	for (size_t i = 0; i < count; i++) /* in [0.5, 1.5): no overflow, no NaN */
		hora_net_value_put(buf, i, t, 0.5 + (double)(mix((uint64_t)r << 40 ^ i) >> 11) * 0x1p-53);
}

static inline void check_all(int n, const struct result *res)
{
	for (int r = 0; r < n; r++) {
		cr_assert_eq(res[r].rc, 0, "n %d rank %d: rc %d: %s", n, r, res[r].rc, res[r].err);
		cr_assert_eq(res[r].bad, 0, "n %d rank %d: %ld wrong, first %s", n, r, res[r].bad, res[r].err);
		cr_assert_eq(res[r].hash, res[0].hash, "n %d: rank %d's results differ from rank 0's bits", n, r);
	}
}

/* n ranks run fn with the usual slot, spin and a far timeout (a death
 * not noticed shows as -ETIMEDOUT, not as slowness) */
static inline void run_default_arg(int n, rank_fn fn, void *arg, struct result *res)
{
	const struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 20000};
	run_ranks(n, &o, fn, arg, res);
}

static inline void run_default(int n, rank_fn fn, struct result *res)
{
	run_default_arg(n, fn, NULL, res);
}

/* the same, and every rank must succeed with the same bits */
static inline void run_checked(int n, rank_fn fn)
{
	struct result res[MAXN];
	run_default(n, fn, res);
	check_all(n, res);
}

/* ---- the kill tests (stage_shm, stage_window) ---- */

/* a thread's start: SIGKILL to our own process after arg ms */
static inline void *stage_suicide(void *arg)
{
	usleep((useconds_t)(intptr_t)arg * 1000);
	kill(getpid(), SIGKILL);
	return NULL;
}

/* rank 1 died (no result); every other rank failed -ECONNRESET naming it,
 * and nothing appeared in /dev/shm since before (th_dev_shm; freed here) */
static inline void check_killed(int n, const struct result *res, char *before)
{
	cr_assert_eq(res[1].rc, -1000, "rank 1 was to die, it said %d: %s", res[1].rc, res[1].err);
	for (int r = 0; r < n; r++) {
		if (r == 1)
			continue;
		cr_assert_eq(res[r].rc, -ECONNRESET, "rank %d: rc %d: %s", r, res[r].rc, res[r].err);
		cr_assert(strstr(res[r].err, "local rank 1 (pid "), "rank %d: %s", r, res[r].err);
		cr_assert_eq(res[r].culprit, 1, "rank %d blames local rank %d", r, res[r].culprit);
		cr_log_info("rank %d failed after %.0f ms: %s", r, res[r].fail_ms, res[r].err);
	}
	/* the arena and the regions are memfds: nothing appeared in /dev/shm */
	char *after = th_dev_shm(), name[256];
	cr_expect(!th_dev_shm_new(before, after, name, sizeof(name)), "/dev/shm/%s appeared", name);
	free(before);
	free(after);
}

#endif
