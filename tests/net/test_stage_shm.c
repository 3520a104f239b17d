/* test_stage_shm.c - the node-local stage over a shared-memory arena
 * (net/coll/stage_shm.h): 1 to 8 real processes (fork; a socketpair per
 * pair made before, for the arena's fd and as lifelines) run allreduce
 * over every dtype x op x count (0, 1, < nlocal, odd, several slots, 3 MiB)
 * on integer-valued data, checked against the closed-form value, and send
 * a hash of their results to the parent, which checks that every rank got
 * the same bits; random data checked bitwise against the reduction in
 * local-rank order 0..n-1; reduce-scatter and allgather alone, shard by
 * shard; a rank killed with SIGKILL mid-call (the others fail
 * -ECONNRESET naming it, not at their far timeout), a rank that left, a
 * rank that never comes (-ETIMEDOUT naming it), interrupt from another
 * thread; nothing in /dev/shm; an attacher refusing a foreign arena or
 * one made for another nlocal. No timing is asserted. */
#include "net/coll/stage_shm.h"
#include "net/coll/stage_shm_internal.h"
#include "net/util/cpus.h"
#include "../helpers.h"
#include "net/shm/shm.h"
#include "net/util/clock.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stage_helpers.h"

static void matrix_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	void *buf = malloc(BIG_BYTES + 64);
	size_t c[8];
	res->hash = 0xcbf29ce484222325ull;
	for (int t = 0; t < HORA_NET_DTYPES; t++)
		for (int op = 0; op < HORA_NET_OPS; op++) {
			size_t nc = counts(n, (enum hora_net_dtype)t, c);
			for (size_t k = 0; k < nc; k++) {
				if (k == nc - 1 && op != HORA_NET_SUM && t != HORA_NET_F32)
					continue;
				fill(buf, c[k], t, r, op);
				int rc = s->ops->allreduce(s, buf, buf, c[k], t, op, res->err, sizeof(res->err));
				if (rc) {
					res->rc = rc;
					goto out;
				}
				for (size_t i = 0; i < c[k]; i++)
					if (hora_net_value_get(buf, i, t) != expected(n, i, op, t)) {
						if (!res->bad)
							snprintf(res->err, sizeof(res->err),
								 "%s %s count %zu: [%zu] = %g, want %g",
								 hora_net_dtype_name(t), hora_net_op_name(op), c[k], i,
								 hora_net_value_get(buf, i, t), expected(n, i, op, t));
						res->bad++;
					}
				res->hash = hash_bytes(res->hash, buf, c[k] * hora_net_dtype_size(t));
			}
		}
out:
	free(buf);
}

static void matrix(int n, size_t slot)
{
	struct result res[MAXN];
	struct opts o = {.slot_bytes = slot, .spin_us = 20, .timeout_ms = 20000};
	run_ranks(n, &o, matrix_rank, NULL, res);
	check_all(n, res);
}

Test(net_stage_shm, allreduce_matrix_1_2_3, .timeout = 120)
{
	for (int n = 1; n <= 3; n++)
		matrix(n, SLOT);
}

Test(net_stage_shm, allreduce_matrix_4_5, .timeout = 120)
{
	matrix(4, SLOT);
	matrix(5, 0); /* the default slot */
}

Test(net_stage_shm, allreduce_matrix_6_7_8, .timeout = 180)
{
	for (int n = 6; n <= 8; n++)
		matrix(n, SLOT);
}

/* ---- order: random values, where the order shows in the bits ------------ */

static void order_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	static const enum hora_net_dtype ts[] = {HORA_NET_F32, HORA_NET_F64, HORA_NET_F16, HORA_NET_BF16};
	static const size_t cs[] = {3, 1000, 200003};
	size_t es = 8, max = 200003;
	uint8_t *buf = malloc(max * es), *ref = malloc(max * es), *other = malloc(max * es);
	for (size_t a = 0; a < 4; a++)
		for (int op = HORA_NET_SUM; op <= HORA_NET_PROD; op += HORA_NET_PROD - HORA_NET_SUM)
			for (size_t k = 0; k < 3; k++) {
				const enum hora_net_dtype t = ts[a];
				/* the reference: rank 0's values, then 1, 2, ... in order */
				random_fill(ref, cs[k], t, 0);
				for (int l = 1; l < n; l++) {
					random_fill(other, cs[k], t, l);
					hora_net_reduce(ref, ref, other, cs[k], t, (enum hora_net_op)op);
				}
				random_fill(buf, cs[k], t, r);
				int rc = s->ops->allreduce(s, buf, buf, cs[k], t, (enum hora_net_op)op, res->err, sizeof(res->err));
				if (rc) {
					res->rc = rc;
					goto out;
				}
				if (memcmp(buf, ref, cs[k] * hora_net_dtype_size(t))) {
					snprintf(res->err, sizeof(res->err), "%s %s count %zu: not the order 0..n-1",
						 hora_net_dtype_name(t), hora_net_op_name((enum hora_net_op)op), cs[k]);
					res->bad++;
				}
				res->hash = hash_bytes(res->hash, buf, cs[k] * hora_net_dtype_size(t));
			}
out:
	free(buf);
	free(ref);
	free(other);
}

Test(net_stage_shm, reduces_in_local_rank_order, .timeout = 120)
{
	for (int n = 3; n <= 5; n += 2)
		run_checked(n, order_rank);
}

/* ---- reduce-scatter and allgather alone ---------------------------------- */

static void halves_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	static const enum hora_net_dtype ts[] = {HORA_NET_F32, HORA_NET_BF16, HORA_NET_I64};
	uint8_t *buf = malloc(BIG_BYTES + 64);
	for (size_t a = 0; a < 3; a++) {
		const enum hora_net_dtype t = ts[a];
		size_t c[8], nc = counts(n, t, c);
		for (size_t k = 0; k < nc; k++)
			for (int op = HORA_NET_SUM; op <= HORA_NET_MAX; op++) {
				size_t off, len, o2, l2;
				hora_net_stage_shard(c[k], n, r, &off, &len);
				fill(buf, c[k], t, r, (enum hora_net_op)op);
				int rc = s->ops->reduce_scatter(s, buf, buf, c[k], t, (enum hora_net_op)op, res->err,
								sizeof(res->err));
				if (rc) {
					res->rc = rc;
					goto out;
				}
				for (size_t i = 0; i < c[k]; i++) { /* ours reduced, the rest untouched */
					double want = i >= off && i < off + len ? expected_div(n, i, (enum hora_net_op)op, t, 0)
										: value(r, i, (enum hora_net_op)op);
					if (hora_net_value_get(buf, i, t) != want && !res->bad++)
						snprintf(res->err, sizeof(res->err), "reduce_scatter %s count %zu: [%zu]",
							 hora_net_dtype_name(t), c[k], i);
				}
				/* allgather: only our shard is ours, the rest is garbage */
				memset(buf, 0x5a, c[k] * hora_net_dtype_size(t));
				for (size_t i = off; i < off + len; i++)
					hora_net_value_put(buf, i, t, value(r, i, (enum hora_net_op)op));
				if ((rc = s->ops->allgather(s, buf, c[k], t, res->err, sizeof(res->err)))) {
					res->rc = rc;
					goto out;
				}
				for (int l = 0; l < n; l++) {
					hora_net_stage_shard(c[k], n, l, &o2, &l2);
					for (size_t i = o2; i < o2 + l2; i++)
						if (hora_net_value_get(buf, i, t) != value(l, i, (enum hora_net_op)op) &&
						    !res->bad++)
							snprintf(res->err, sizeof(res->err), "allgather %s count %zu: [%zu]",
								 hora_net_dtype_name(t), c[k], i);
				}
				res->hash = hash_bytes(res->hash, buf, c[k] * hora_net_dtype_size(t));
			}
	}
out:
	free(buf);
}

Test(net_stage_shm, reduce_scatter_and_allgather_alone, .timeout = 120)
{
	struct result res[MAXN];
	struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 20000};
	static const int ns[] = {2, 3, 5, 8};
	for (int a = 0; a < 4; a++) {
		run_ranks(ns[a], &o, halves_rank, NULL, res);
		check_all(ns[a], res);
	}
}

/* ---- failures ------------------------------------------------------------ */

/* rank 1 dies by SIGKILL in the middle of its calls; the others call until
 * they fail */
static void killed_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	(void)arg;
	const size_t count = (8u << 20) / 4;
	float *buf = calloc(count, 4);
	pthread_t th;
	if (r == 1)
		pthread_create(&th, NULL, stage_suicide, (void *)(intptr_t)30);
	for (int i = 0; i < 100000; i++) {
		int64_t t0 = hora_clock_ns();
		res->rc = s->ops->allreduce(s, buf, buf, count, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
		if (res->rc) {
			res->fail_ms = (double)(hora_clock_ns() - t0) / 1e6;
			break;
		}
	}
	free(buf);
}

Test(net_stage_shm, a_killed_rank_fails_the_others_naming_it, .timeout = 60)
{
	char *before = th_dev_shm();
	struct result res[MAXN];
	/* a far timeout: a death not noticed shows as -ETIMEDOUT, not as slowness */
	struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 20000};
	const int n = 4;
	run_ranks(n, &o, killed_rank, NULL, res);
	check_killed(n, res, before);
}

/* The caller's array of sockets is its own again once create returns
 * (topo.c frees it when the link takes the sockets over): here every entry
 * is overwritten with a socket that has hung up. Rank 1 comes late, so
 * rank 0 waits past the poll interval and checks its peers: it must check
 * the real lifelines (the stage used to read the caller's array, freed
 * memory in the communicator: ASan's heap-use-after-free in peers_gone). */
static void scribbled_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		res->rc = -errno;
		return;
	}
	close(sv[1]); /* sv[0] now reads as hung up */
	for (int l = 0; l < n; l++)
		if (l != r)
			g_socks[l] = sv[0];
	float buf[16] = {0};
	if (r == 1)
		usleep(300 * 1000); /* three of the stage's 100 ms poll intervals */
	res->rc = s->ops->allreduce(s, buf, buf, 16, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
	close(sv[0]);
}

Test(net_stage_shm, the_callers_array_of_sockets_may_change_after_create, .timeout = 30)
{
	struct result res[MAXN];
	struct opts o = {.slot_bytes = SLOT, .timeout_ms = 20000};
	run_ranks(2, &o, scribbled_rank, NULL, res);
	for (int r = 0; r < 2; r++)
		cr_assert_eq(res[r].rc, 0, "rank %d: rc %d: %s", r, res[r].rc, res[r].err);
}

/* rank 0 calls; rank 1 behaves as arg says: 0 never calls (sleeps), 1
 * leaves at once (destroy, then sleeps so that its exit is not the cause) */
static void lonely_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	float buf[100] = {0};
	if (r == 1) {
		if ((intptr_t)arg == 1)
			s->ops->destroy(s); /* run_ranks destroys again: make that a no-op */
		usleep(1200 * 1000);
		if ((intptr_t)arg == 1)
			_exit(0); /* destroyed already: no result, no second destroy */
		return;
	}
	res->rc = s->ops->allreduce(s, buf, buf, 100, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
}

Test(net_stage_shm, a_rank_that_never_comes_times_out_named, .timeout = 30)
{
	struct result res[2];
	struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 300};
	run_ranks(2, &o, lonely_rank, (void *)0, res);
	cr_assert_eq(res[0].rc, -ETIMEDOUT, "%d: %s", res[0].rc, res[0].err);
	cr_assert(strstr(res[0].err, "waiting for local rank 1 (pid "), "%s", res[0].err);
	cr_assert_eq(res[0].culprit, 1);
}

/* 3 ranks, local rank 2 alive but never calling: whichever of 0 and 1
 * times out first records rank 2 as the one it lost, so the other, which
 * may find it gone before its own timeout, names rank 2 too, not the rank
 * that left (it did: "local rank 1 ... left the stage") */
static void stuck_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	(void)arg;
	float buf[100] = {0};
	if (r == 2) {
		usleep(1500 * 1000);
		return;
	}
	if (r == 1)
		usleep(100 * 1000);
	res->rc = s->ops->allreduce(s, buf, buf, 100, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
}

Test(net_stage_shm, a_rank_stuck_beside_two_is_named_by_both, .timeout = 30)
{
	struct result res[3];
	struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 300};
	run_ranks(3, &o, stuck_rank, NULL, res);
	for (int r = 0; r < 2; r++) {
		cr_assert(res[r].rc == -ETIMEDOUT || res[r].rc == -ECONNRESET, "rank %d: %d: %s", r, res[r].rc,
			  res[r].err);
		cr_assert_eq(res[r].culprit, 2, "rank %d blames local rank %d: %s", r, res[r].culprit, res[r].err);
	}
}

/* three allreduces, then what the stage spins for */
static void spin_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)r;
	(void)n;
	(void)arg;
	float buf[1000] = {0};
	for (int i = 0; i < 3 && !res->rc; i++)
		res->rc = s->ops->allreduce(s, buf, buf, 1000, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
	res->spin_us = stage_of(s)->spin_us;
}

/* Spin only when the ranks have a CPU each among them: under one CPU
 * (a taskset or cpuset of one, the host having more) a spinning rank takes
 * the CPU the other needs (an 8-byte allreduce of 2 ranks took ~820 us
 * instead of ~5 with the host's CPU count deciding) */
Test(net_stage_shm, ranks_sharing_cpus_do_not_spin, .timeout = 30)
{
	struct result res[4];
	const int k = hora_cpus_allowed();
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(hora_cpus_nth(k - 1), &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	struct opts o = {.slot_bytes = SLOT, .spin_us = 200, .timeout_ms = 20000};
	run_ranks(2, &o, spin_rank, NULL, res); /* both on that one CPU */
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(res[r].rc, 0, "rank %d: %s", r, res[r].err);
		cr_assert_eq(res[r].spin_us, 0, "rank %d spins %d us with 2 ranks on 1 CPU", r, res[r].spin_us);
	}
}

Test(net_stage_shm, ranks_with_a_cpu_each_spin, .timeout = 30)
{
	struct result res[4];
	const int k = hora_cpus_allowed();
	if (k < 2)
		cr_skip_test("one CPU allowed: no two ranks can have one each");
	struct opts o = {.slot_bytes = SLOT, .spin_us = 200, .timeout_ms = 20000, .bind = 1};
	run_ranks(2, &o, spin_rank, NULL, res);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(res[r].rc, 0, "rank %d: %s", r, res[r].err);
		cr_assert_eq(res[r].spin_us, 200, "rank %d spins %d us, bound to a CPU of its own", r, res[r].spin_us);
	}
	if (k > 2)
		return; /* 4 ranks bound round-robin on 2 CPUs: oversubscribed */
	run_ranks(4, &o, spin_rank, NULL, res);
	for (int r = 0; r < 4; r++) {
		cr_assert_eq(res[r].rc, 0, "rank %d: %s", r, res[r].err);
		cr_assert_eq(res[r].spin_us, 0, "rank %d spins with 4 ranks on 2 CPUs", r);
	}
}

/* masks written over the real ones before the first step (arg: one mask
 * per rank as bits of CPUs 0-63): the decision is a matching of ranks to
 * CPUs, not the size of their union */
static void fake_mask_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	const uint64_t *m = arg;
	struct stage_shm *st = stage_of(s);
	memset(st->ctl->rank[r].cpus, 0, sizeof(st->ctl->rank[r].cpus));
	st->ctl->rank[r].cpus[0] = m[r];
	spin_rank(s, r, n, NULL, res);
}

Test(net_stage_shm, spin_needs_a_cpu_of_its_own_for_each_rank, .timeout = 30)
{
	struct result res[4];
	struct opts o = {.slot_bytes = SLOT, .spin_us = 200, .timeout_ms = 20000};
	/* {5}, {5}, {5,6,7}: three CPUs among them, but two ranks on CPU 5 */
	static const uint64_t shared[3] = {1u << 5, 1u << 5, 7u << 5};
	run_ranks(3, &o, fake_mask_rank, (void *)shared, res);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(res[r].rc, 0, "rank %d: %s", r, res[r].err);
		cr_assert_eq(res[r].spin_us, 0, "rank %d spins: two ranks have only CPU 5", r);
	}
	/* {5}, {6}, {5,6,7}: rank 2 takes CPU 7 */
	static const uint64_t own[3] = {1u << 5, 1u << 6, 7u << 5};
	run_ranks(3, &o, fake_mask_rank, (void *)own, res);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(res[r].rc, 0, "rank %d: %s", r, res[r].err);
		cr_assert_eq(res[r].spin_us, 200, "rank %d does not spin, each rank having a CPU", r);
	}
}

Test(net_stage_shm, a_rank_that_left_fails_the_others, .timeout = 30)
{
	struct result res[2];
	struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 20000};
	run_ranks(2, &o, lonely_rank, (void *)1, res);
	cr_assert_eq(res[0].rc, -ECONNRESET, "%d: %s", res[0].rc, res[0].err);
	cr_assert(strstr(res[0].err, "local rank 1 (pid ") && strstr(res[0].err, "left"), "%s", res[0].err);
	cr_assert_eq(res[0].culprit, 1);
}

static void *interrupter(void *arg)
{
	usleep(100 * 1000);
	struct hora_net_stage *s = arg;
	s->ops->interrupt(s);
	return NULL;
}

/* rank 0 is interrupted by another thread while it waits for rank 1, which
 * calls only after 300 ms: it finds rank 0 gone from the stage at once,
 * not at its timeout
 * (the stage's timeout, 1 s, is shorter than rank 0 stays alive, 2 s) */
static void interrupted_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	(void)arg;
	float buf[100] = {0};
	if (r == 1) {
		usleep(300 * 1000); /* rank 0 published its step, then broke in it: our call fails */
		for (int i = 0; i < 3 && !res->rc; i++)
			res->rc = s->ops->allreduce(s, buf, buf, 100, HORA_NET_F32, HORA_NET_SUM, res->err,
						    sizeof(res->err));
		return;
	}
	pthread_t th;
	pthread_create(&th, NULL, interrupter, s);
	res->rc = s->ops->allreduce(s, buf, buf, 100, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
	pthread_join(th, NULL);
	char err2[200];
	int rc2 = s->ops->allreduce(s, buf, buf, 100, HORA_NET_F32, HORA_NET_SUM, err2, sizeof(err2));
	if (rc2 != -ECANCELED) { /* every later call fails too */
		res->bad = 1;
		snprintf(res->err, sizeof(res->err), "the call after the interrupt returned %d", rc2);
	}
	usleep(2000 * 1000);
}

Test(net_stage_shm, interrupt_from_another_thread, .timeout = 30)
{
	struct result res[2];
	struct opts o = {.slot_bytes = SLOT, .spin_us = 20, .timeout_ms = 1000};
	run_ranks(2, &o, interrupted_rank, NULL, res);
	cr_assert_eq(res[0].rc, -ECANCELED, "%d: %s", res[0].rc, res[0].err);
	cr_assert_eq(res[0].bad, 0, "%s", res[0].err);
	cr_assert(strstr(res[0].err, "interrupted"), "%s", res[0].err);
	cr_assert_eq(res[1].rc, -ECONNRESET, "%d: %s", res[1].rc, res[1].err);
	/* "failed in this call" when rank 1 reaches the step rank 0 broke in
	 * (it must not succeed where rank 0 failed), "left" at a later one */
	cr_assert(strstr(res[1].err, "local rank 0 (pid ") &&
			  (strstr(res[1].err, "left") || strstr(res[1].err, "failed in this call")),
		  "%s", res[1].err);
	cr_assert_eq(res[0].culprit, -1, "an interrupt blames nobody");
	cr_assert_eq(res[1].culprit, 0);
}

Test(net_stage_shm, refuses_bad_configs)
{
	struct hora_net_stage *s;
	char err[200];
	int socks[2] = {-1, -1};
	pid_t pids[2] = {getpid(), getpid()};
	struct hora_net_stage_shm_cfg cfg = {.lrank = 0, .nlocal = 2, .socks = socks, .pids = pids,
					     .slot_bytes = 100};
	cr_assert_eq(hora_net_stage_shm_create(&cfg, &s, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "slot_bytes 100"), "%s", err);
	cfg.slot_bytes = 0;
	cfg.lrank = 2;
	cr_assert_eq(hora_net_stage_shm_create(&cfg, &s, err, sizeof(err)), -EINVAL);
}

/* An attacher checks what came over the socket before it trusts it. */
Test(net_stage_shm, an_attacher_refuses_a_foreign_or_mismatched_arena)
{
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pids[3] = {getpid(), getpid(), getpid()};
	char err[200] = "";
	struct hora_net_stage *s0, *s1;
	/* rank 0 of 2 sends its arena; an attacher that thinks it is one of 3 refuses it */
	int socks0[2] = {-1, sv[0]}, socks1[3] = {sv[1], -1, -1};
	struct hora_net_stage_shm_cfg c0 = {.lrank = 0, .nlocal = 2, .socks = socks0, .pids = pids,
					    .slot_bytes = SLOT, .timeout_ms = 1000};
	struct hora_net_stage_shm_cfg c1 = {.lrank = 1, .nlocal = 3, .socks = socks1, .pids = pids,
					    .timeout_ms = 1000};
	cr_assert_eq(hora_net_stage_shm_create(&c0, &s0, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_net_stage_shm_create(&c1, &s1, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "made an arena for 2 local ranks, this rank has 3"), "%s", err);
	s0->ops->destroy(s0);
	/* a memfd that is not an arena */
	int fd = memfd_create("not-a-stage", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(fd, 1 << 16), 0);
	cr_assert_eq(hora_net_shm_fd_send(sv[0], fd, err, sizeof(err)), 0, "%s", err);
	close(fd);
	c1.nlocal = 2;
	cr_assert_eq(hora_net_stage_shm_create(&c1, &s1, err, sizeof(err)), -EPROTO);
	cr_assert(strstr(err, "bad magic"), "%s", err);
	close(sv[0]);
	close(sv[1]);
}
