/* test_comm_api.c - the parts of the public communicator that had no test
 * (issue 12 section 6): the async broadcast, allgather, reduce-scatter and
 * barrier, hora_local_rank/hora_local_size, hora_comm_set_small_bytes.
 * Ranks are threads of this process (comm_helpers.h). */
#include "comm_helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

struct rank {
	int rank, n, rc, ok;
	struct hora_comm *c;
	char err[512];
	size_t small; /* hora_comm_set_small_bytes before the call (0: leave) */
};

static void *create(void *p)
{
	struct rank *x = p;
	struct hora_comm_config cfg;
	tc_config(&cfg, x->rank, x->n);
	x->rc = hora_comm_create(&cfg, &x->c, x->err, sizeof(x->err));
	return NULL;
}

static void make(struct rank *rk, int n)
{
	for (int i = 0; i < n; i++)
		rk[i] = (struct rank){.rank = i, .n = n};
	tc_threads(n, create, rk, sizeof(*rk));
	for (int i = 0; i < n; i++)
		cr_assert_eq(rk[i].rc, 0, "rank %d: %s", i, rk[i].err);
}

/* Broadcast from rank 1, allgather, reduce-scatter and a barrier, all queued
 * before any is waited for; every result is checked. */
static void *async_calls(void *p)
{
	struct rank *x = p;
	const int n = x->n, r = x->rank;
	enum { COUNT = 1000 };
	float *b = malloc(COUNT * sizeof(float)), *g = malloc((size_t)n * COUNT * sizeof(float));
	float *rs_in = malloc((size_t)n * COUNT * sizeof(float)), *rs_out = malloc(COUNT * sizeof(float));
	float mine[COUNT];
	for (int i = 0; i < COUNT; i++) {
		b[i] = r == 1 ? (float)i : -1.0f;
		mine[i] = (float)(r * 10000 + i);
	}
	for (int i = 0; i < n * COUNT; i++)
		rs_in[i] = (float)(r + i % 7);
	struct hora_request *q[4];
	int rc = hora_broadcast_async(x->c, b, COUNT, HORA_F32, 1, &q[0]);
	rc = rc ? rc : hora_allgather_async(x->c, mine, g, COUNT, HORA_F32, &q[1]);
	rc = rc ? rc : hora_reduce_scatter_async(x->c, rs_in, rs_out, COUNT, HORA_F32, HORA_SUM, &q[2]);
	rc = rc ? rc : hora_barrier_async(x->c, &q[3]);
	x->ok = !rc;
	for (int k = 0; k < 4 && !rc; k++)
		if ((x->rc = hora_wait(q[k])))
			x->ok = 0, snprintf(x->err, sizeof(x->err), "request %d: %s", k, hora_comm_last_error(x->c));
	for (int i = 0; i < COUNT && x->ok; i++) {
		float want_rs = 0;
		for (int s = 0; s < n; s++)
			want_rs += (float)(s + (r * COUNT + i) % 7);
		if (b[i] != (float)i || rs_out[i] != want_rs)
			x->ok = 0, snprintf(x->err, sizeof(x->err), "element %d: broadcast %g, reduce-scatter %g (want %g)",
					    i, b[i], rs_out[i], want_rs);
		for (int s = 0; s < n; s++)
			if (g[s * COUNT + i] != (float)(s * 10000 + i))
				x->ok = 0, snprintf(x->err, sizeof(x->err), "allgather block %d element %d: %g", s, i,
						    g[s * COUNT + i]);
	}
	free(b);
	free(g);
	free(rs_in);
	free(rs_out);
	return NULL;
}

Test(comm_api, async_broadcast_allgather_reduce_scatter_and_barrier, .timeout = 60)
{
	struct rank rk[3];
	tc_pick_addrs(3);
	make(rk, 3);
	tc_threads(3, async_calls, rk, sizeof(*rk));
	for (int r = 0; r < 3; r++) {
		cr_assert(rk[r].ok, "rank %d: %s", r, rk[r].err);
		hora_comm_destroy(rk[r].c);
	}
}

/* ranks 0 and 1 listen on one address, rank 2 on another: local rank and
 * size count the ranks of one host */
Test(comm_api, local_rank_and_size_count_the_ranks_of_one_host, .timeout = 60)
{
	struct rank rk[3];
	tc_pick_addrs(3);
	char other[32]; /* tc_pick_addrs' hosts are 127.X.Y.Z with X >= 1 */
	snprintf(other, sizeof(other), "127.0.0.1%s", strchr(tc_addr[2], ':'));
	snprintf(tc_addr[2], sizeof(tc_addr[2]), "%s", other);
	make(rk, 3);
	const int want_rank[3] = {0, 1, 0}, want_size[3] = {2, 2, 1};
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(hora_local_rank(rk[r].c), want_rank[r], "rank %d (%s)", r, tc_addrs[r]);
		cr_assert_eq(hora_local_size(rk[r].c), want_size[r], "rank %d (%s)", r, tc_addrs[r]);
	}
	for (int r = 0; r < 3; r++)
		hora_comm_destroy(rk[r].c);
	cr_assert_eq(hora_local_rank(NULL), 0);
	cr_assert_eq(hora_local_size(NULL), 1);
}

static void *allreduce_1k(void *p)
{
	struct rank *x = p;
	float v[256];
	for (int i = 0; i < 256; i++)
		v[i] = (float)(x->rank + i);
	x->rc = x->small ? hora_comm_set_small_bytes(x->c, x->small) : 0;
	if (!x->rc)
		x->rc = hora_allreduce(x->c, v, v, 256, HORA_F32, HORA_SUM);
	snprintf(x->err, sizeof(x->err), "%s", x->rc ? hora_comm_last_error(x->c) : "");
	x->ok = !x->rc && v[5] == (float)(x->n * 5 + x->n * (x->n - 1) / 2);
	return NULL;
}

/* The setter acts: set alike on every rank the call works; set on one rank
 * only, a 1 KiB allreduce runs by another algorithm there, which the
 * fingerprint names. Above the small-message buffers it is refused. */
Test(comm_api, set_small_bytes_acts_and_is_checked, .timeout = 60)
{
	struct rank rk[2];
	tc_pick_addrs(2);
	make(rk, 2);
	cr_assert_eq(hora_comm_set_small_bytes(rk[0].c, (2u << 20)), -EINVAL);
	for (int r = 0; r < 2; r++)
		rk[r].small = 512;
	tc_threads(2, allreduce_1k, rk, sizeof(*rk));
	for (int r = 0; r < 2; r++) {
		cr_assert(rk[r].ok, "rank %d: %s", r, rk[r].err);
		cr_assert_eq(hora_comm_small_bytes(rk[r].c), 512);
	}
	rk[0].small = 4096; /* 1 KiB: latency algorithm here, direct ring on rank 1 */
	rk[1].small = 0;
	tc_threads(2, allreduce_1k, rk, sizeof(*rk));
	for (int r = 0; r < 2; r++) {
		cr_assert_lt(rk[r].rc, 0, "rank %d succeeded", r);
		hora_comm_destroy(rk[r].c);
	}
	cr_assert(strstr(rk[0].err, "small_bytes") || strstr(rk[1].err, "small_bytes"), "%s | %s", rk[0].err,
		  rk[1].err);
}
