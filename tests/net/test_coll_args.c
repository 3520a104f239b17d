/* test_coll_args.c - calls that cannot run as called (issue 12 section 5):
 * a broadcast whose root differs between ranks, an invalid argument on one
 * rank (overlapping buffers, a root >= size, a bad op or dtype), ranks
 * created with different sizes. Each must end with a named error on every
 * rank, promptly (the I/O timeout is 20 s here, so a rank left waiting shows
 * as the wrong error text, not as a slow pass), never with a silent success
 * or a bare timeout. Ranks are threads of this process, as in test_coll.c. */
#include "net/coll/coll.h"
#include "net_helpers.h"
#include "../helpers.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#define MAXR 4

static char addr[MAXR][32];
static const char *addrs[MAXR];

struct rank {
	int rank, n, size; /* size: what this rank is created with (0: n) */
	struct hora_net_comm *comm;
	int rc, rc2;       /* the call, then a barrier after it */
	char err[512], err2[512];
	/* the call */
	int (*fn)(struct rank *);
	int root;
	size_t count;
	enum hora_net_op op;
	enum hora_net_dtype t;
	int overlap;
	float *buf;
};

static void *create(void *p)
{
	struct rank *a = p;
	struct hora_net_comm_cfg cfg = {.rank = a->rank, .nranks = a->size ? a->size : a->n, .addrs = addrs,
					.connect_timeout_ms = 5000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)TEST_SECRET;
	cfg.opts.secret_len = strlen(TEST_SECRET);
	cfg.opts.io_timeout_ms = 20000;
	cfg.segment_bytes = 64 << 10;
	a->rc = hora_net_comm_create(&cfg, &a->comm, a->err, sizeof(a->err));
	return NULL;
}

static void run_all(struct rank *ra, int n, void *(*fn)(void *))
{
	pthread_t th[MAXR];
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, &ra[i]);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

static void make(struct rank *ra, int n)
{
	th_rank_addrs(addr, addrs, n);
	for (int i = 0; i < n; i++)
		ra[i] = (struct rank){.rank = i, .n = n};
	run_all(ra, n, create);
	for (int i = 0; i < n; i++)
		cr_assert_eq(ra[i].rc, 0, "rank %d: %s", i, ra[i].err);
}

/* the call, then a barrier (which must fail if the call did not) */
static void *call(void *p)
{
	struct rank *a = p;
	a->rc = a->fn(a);
	snprintf(a->err, sizeof(a->err), "%s", a->rc ? hora_net_comm_error(a->comm) : "");
	a->rc2 = hora_net_barrier(a->comm);
	snprintf(a->err2, sizeof(a->err2), "%s", a->rc2 ? hora_net_comm_error(a->comm) : "");
	return NULL;
}

static int do_bcast(struct rank *a)
{
	return hora_net_broadcast(a->comm, a->buf, a->count, a->t, a->root);
}

static int do_allreduce(struct rank *a)
{
	return hora_net_allreduce(a->comm, a->buf, a->buf + a->overlap, a->count, a->t, a->op);
}

static int do_allgather(struct rank *a)
{
	return hora_net_allgather(a->comm, a->buf + a->overlap, a->buf, a->count, a->t);
}

static void finish(struct rank *ra, int n)
{
	for (int r = 0; r < n; r++) {
		free(ra[r].buf);
		hora_net_comm_destroy(ra[r].comm);
	}
}

/* ---- a root that differs between ranks ---------------------------------------- */

static void roots_differ(int n, size_t count)
{
	struct rank ra[MAXR];
	make(ra, n);
	for (int r = 0; r < n; r++) {
		ra[r].fn = do_bcast;
		ra[r].root = r == n - 1 ? n - 1 : 0; /* the last rank takes itself for the root */
		ra[r].count = count;
		ra[r].t = HORA_NET_F32;
		ra[r].buf = calloc(count + 64, 4);
		ra[r].buf[0] = (float)(r + 1);
	}
	run_all(ra, n, call);
	int named = 0;
	for (int r = 0; r < n; r++) {
		/* no rank goes on as if the call had been fine */
		cr_assert(ra[r].rc < 0 || ra[r].rc2 < 0, "N=%d count %zu: rank %d: broadcast and barrier succeeded",
			  n, count, r);
		char other[16];
		snprintf(other, sizeof(other), "root %d", n - 1);
		if (ra[r].rc < 0 && strstr(ra[r].err, "root 0") && strstr(ra[r].err, other))
			named++;
	}
	cr_assert_geq(named, 1, "N=%d count %zu: no broadcast error names both roots: %s | %s", n, count, ra[0].err,
		      ra[1].err);
	finish(ra, n);
}

Test(net_coll_args, broadcast_roots_differ_tree_n2, .timeout = 60) { roots_differ(2, 4); }
Test(net_coll_args, broadcast_roots_differ_tree_n3, .timeout = 60) { roots_differ(3, 4); }
Test(net_coll_args, broadcast_roots_differ_tree_n4, .timeout = 60) { roots_differ(4, 4); }
Test(net_coll_args, broadcast_roots_differ_chain_n2, .timeout = 60) { roots_differ(2, 1 << 18); }
Test(net_coll_args, broadcast_roots_differ_chain_n3, .timeout = 60) { roots_differ(3, 1 << 18); }
Test(net_coll_args, broadcast_roots_differ_chain_n4, .timeout = 60) { roots_differ(4, 1 << 18); }

/* ---- an invalid argument on one rank ------------------------------------------- */

/* every rank fails the call (or, for a broadcast, where a rank's part did not
 * need the refusing rank, the barrier after it) with `want` in its error */
static void all_name(struct rank *ra, int n, const char *want, int call_fails_everywhere)
{
	for (int r = 0; r < n; r++) {
		if (call_fails_everywhere)
			cr_assert_eq(ra[r].rc, -EINVAL, "rank %d: rc %d: %s", r, ra[r].rc, ra[r].err);
		const char *e = ra[r].rc ? ra[r].err : ra[r].err2;
		cr_assert(ra[r].rc || ra[r].rc2, "rank %d: the call and the barrier after it succeeded", r);
		cr_assert(strstr(e, want), "rank %d: want '%s' in: %s", r, want, e);
	}
	finish(ra, n);
}

static void refused_root(size_t count)
{
	struct rank ra[MAXR];
	make(ra, 4);
	for (int r = 0; r < 4; r++) {
		ra[r].fn = do_bcast;
		ra[r].root = r == 2 ? 7 : 0;
		ra[r].count = count;
		ra[r].t = HORA_NET_F32;
		ra[r].buf = calloc(count, 4);
	}
	run_all(ra, 4, call);
	cr_assert_eq(ra[2].rc, -EINVAL);
	all_name(ra, 4, "rank 2 refused broadcast #1: root 7 >= size 4", 0);
}

Test(net_coll_args, a_root_beyond_the_size_on_one_rank_is_named_on_every_rank_tree, .timeout = 60)
{
	refused_root(4);
}
Test(net_coll_args, a_root_beyond_the_size_on_one_rank_is_named_on_every_rank_chain, .timeout = 60)
{
	refused_root(1 << 18);
}

static void refused_overlap(int (*fn)(struct rank *), size_t count, const char *want)
{
	struct rank ra[MAXR];
	make(ra, 4);
	for (int r = 0; r < 4; r++) {
		ra[r].fn = fn;
		ra[r].count = count;
		ra[r].t = HORA_NET_F32;
		ra[r].op = HORA_NET_SUM;
		/* rank 1: recv = send + 1 (allgather: send = recv + 1); the others in place */
		ra[r].overlap = r == 1 ? 1 : fn == do_allgather ? r * (int)count : 0;
		ra[r].buf = calloc(4 * count + 8, 4);
	}
	run_all(ra, 4, call);
	all_name(ra, 4, want, 1);
}

Test(net_coll_args, overlapping_buffers_on_one_rank_fail_every_rank_small, .timeout = 60)
{
	refused_overlap(do_allreduce, 10, "rank 1 refused allreduce #1: send and recv overlap");
}
Test(net_coll_args, overlapping_buffers_on_one_rank_fail_every_rank_direct_ring, .timeout = 60)
{
	refused_overlap(do_allreduce, 40000, "rank 1 refused allreduce #1: send and recv overlap");
}
Test(net_coll_args, overlapping_buffers_on_one_rank_fail_every_rank_ring, .timeout = 60)
{
	refused_overlap(do_allreduce, 1 << 19, "rank 1 refused allreduce #1: send and recv overlap");
}
Test(net_coll_args, overlapping_allgather_on_one_rank_fails_every_rank, .timeout = 60)
{
	refused_overlap(do_allgather, 1000, "rank 1 refused allgather #1: send and recv overlap");
}

Test(net_coll_args, a_bad_op_on_one_rank_is_named_on_every_rank, .timeout = 60)
{
	struct rank ra[MAXR];
	make(ra, 3);
	for (int r = 0; r < 3; r++) {
		ra[r].fn = do_allreduce;
		ra[r].count = 8;
		ra[r].t = HORA_NET_F32;
		ra[r].op = r == 1 ? (enum hora_net_op)99 : HORA_NET_SUM;
		ra[r].buf = calloc(16, 4);
	}
	run_all(ra, 3, call);
	for (int r = 0; r < 3; r++) /* which argument, and only that one */
		cr_assert(!strstr(ra[r].err, "dtype"), "rank %d: %s", r, ra[r].err);
	all_name(ra, 3, "rank 1 refused allreduce #1: invalid op 99", 1);
}

/* one rank: the error says which argument is wrong; the call counted */
Test(net_coll_args, the_invalid_argument_is_the_one_named, .timeout = 30)
{
	struct rank ra[MAXR];
	make(ra, 1);
	float x = 0;
	cr_assert_eq(hora_net_allreduce(ra[0].comm, &x, &x, 1, (enum hora_net_dtype)42, HORA_NET_SUM), -EINVAL);
	const char *e = hora_net_comm_error(ra[0].comm);
	cr_assert(strstr(e, "invalid dtype 42") && !strstr(e, " op ") && !strstr(e, "root"), "%s", e);
	hora_net_comm_destroy(ra[0].comm);
	make(ra, 1);
	cr_assert_eq(hora_net_broadcast(ra[0].comm, &x, 1, HORA_NET_F32, -3), -EINVAL);
	e = hora_net_comm_error(ra[0].comm);
	cr_assert(strstr(e, "refused broadcast #1: root -3 < 0") && !strstr(e, "dtype"), "%s", e);
	hora_net_comm_destroy(ra[0].comm);
}

/* ---- ranks created with different sizes --------------------------------------- */

Test(net_coll_args, ranks_created_with_different_sizes_say_so, .timeout = 60)
{
	struct rank ra[MAXR];
	th_rank_addrs(addr, addrs, 3);
	ra[0] = (struct rank){.rank = 0, .n = 2, .size = 2};
	ra[1] = (struct rank){.rank = 1, .n = 2, .size = 3}; /* thinks there is a rank 2 */
	run_all(ra, 2, create);
	cr_assert_neq(ra[0].rc, 0);
	cr_assert_neq(ra[1].rc, 0);
	cr_assert(strstr(ra[0].err, "rank 1 was created with size 3, this rank with size 2"), "%s", ra[0].err);
	cr_assert(strstr(ra[1].err, "rank 0 was created with size 2, this rank with size 3"), "%s", ra[1].err);
}

/* the last rank thinks there are 4: it reaches both others before it waits
 * for any, so all three say so */
Test(net_coll_args, a_rank_created_with_a_larger_size_is_named_by_every_rank, .timeout = 60)
{
	struct rank ra[MAXR];
	th_rank_addrs(addr, addrs, 4);
	for (int r = 0; r < 3; r++)
		ra[r] = (struct rank){.rank = r, .n = 3, .size = r == 2 ? 4 : 3};
	run_all(ra, 3, create);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(ra[r].rc, -EINVAL, "rank %d: %s", r, ra[r].err);
		cr_assert(strstr(ra[r].err, r == 2 ? "was created with size 3, this rank with size 4"
						   : "rank 2 was created with size 4, this rank with size 3"),
			  "rank %d: %s", r, ra[r].err);
	}
}

/* ---- an address that is not numeric ----------------------------------------------- */

/* A lower rank's address the transport cannot connect to (a host name: the
 * transport takes numeric addresses) is an error naming it; the size check
 * that follows connecting used to read a peer that was never made and
 * crashed (SIGSEGV in check_hello). */
Test(net_coll_args, a_lower_rank_at_an_unusable_address_is_named, .timeout = 30)
{
	char a2[2][32];
	const char *two[2];
	th_rank_addrs(a2, two, 2);
	two[0] = "localhost:1";
	struct hora_net_comm_cfg cfg = {.rank = 1, .nranks = 2, .addrs = two, .connect_timeout_ms = 2000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)TEST_SECRET;
	cfg.opts.secret_len = strlen(TEST_SECRET);
	struct hora_net_comm *c = NULL;
	char err[512] = "";
	int rc = hora_net_comm_create(&cfg, &c, err, sizeof(err));
	cr_assert_neq(rc, 0);
	cr_assert_null(c);
	cr_assert(strstr(err, "connecting to rank 0 at localhost:1"), "%s", err);
}
