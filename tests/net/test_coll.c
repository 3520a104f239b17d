/* test_coll.c - allreduce correctness: N = 1..8 ranks (threads, each with
 * its own loop and sockets), every dtype x op, counts 0, 1, N-1, N+1, a
 * prime, one large enough for the ring; results equal a serial reference
 * computed with the same reduction order and are bitwise identical on every
 * rank; mismatched calls give a named error; a rank killed (another process,
 * kill -9) mid-allreduce makes the others fail fast. Inputs are small
 * integers, exact in every dtype, so the float tolerance is zero; one test
 * uses random floats with a stated tolerance. */
#include "net/coll/coll.h"
#include "net/util/clock.h"
#include "net_helpers.h"
#include "../helpers.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#define MAXR 8

static char addr[MAXR][32];
static const char *addrs[MAXR];

static void pick_ports(int n)
{
	th_rank_addrs(addr, addrs, n);
}

struct rank_arg {
	int rank, n;
	struct hora_net_comm *comm;
	int rc;
	char err[512];
};

/* communicator settings of the next make_comms (tests that change them reset them) */
static size_t t_segment = 64 << 10; /* several segments per chunk even in tests */
static size_t t_slice = 24 << 10;   /* and several slices (N x 24 KiB) for 40009 elements */
static int t_sockets = 1;
static int t_shm;           /* cfg.shm: 0 shared memory between ranks of one host, 1 TCP only */
static int t_hier;          /* cfg.hierarchical */
static int t_nsfd[MAXR] = {-1, -1, -1, -1, -1, -1, -1, -1}; /* a network namespace to enter */

static void *create_rank(void *p)
{
	struct rank_arg *a = p;
	struct hora_net_comm_cfg cfg = {.rank = a->rank, .nranks = a->n, .addrs = addrs,
					.connect_timeout_ms = 10000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)TEST_SECRET;
	cfg.opts.secret_len = strlen(TEST_SECRET);
	cfg.opts.io_timeout_ms = 10000;
	cfg.segment_bytes = t_segment;
	cfg.slice_bytes = t_slice;
	cfg.opts.sockets_per_peer = t_sockets;
	cfg.shm = t_shm;
	cfg.hierarchical = t_hier;
	if (t_nsfd[a->rank] >= 0 && setns(t_nsfd[a->rank], CLONE_NEWNET)) {
		a->rc = -errno;
		snprintf(a->err, sizeof(a->err), "setns: %s", strerror(errno));
		return NULL;
	}
	a->rc = hora_net_comm_create(&cfg, &a->comm, a->err, sizeof(a->err));
	return NULL;
}

static void make_comms(struct rank_arg *ra, int n)
{
	if (t_nsfd[0] < 0)
		pick_ports(n);
	pthread_t th[MAXR];
	for (int i = 0; i < n; i++) {
		ra[i] = (struct rank_arg){.rank = i, .n = n};
		pthread_create(&th[i], NULL, create_rank, &ra[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(ra[i].rc, 0, "rank %d: %s", i, ra[i].err);
	}
}

static double value(int rank, size_t i, enum hora_net_op op)
{
	if (op == HORA_NET_PROD)
		return ((i + (size_t)rank) % 3 == 0) ? 2.0 : ((i + (size_t)rank) % 5 == 0 ? -1.0 : 1.0);
	return (double)((long)((i * 7 + (size_t)rank * 3) % 11) - 5);
}

struct job {
	struct rank_arg *ra;
	void *buf;
	void *out; /* out of place into this (NULL: in place) */
	size_t count;
	enum hora_net_dtype t;
	enum hora_net_op op;
	int rc;
	char err[512];
};

static void *run_job(void *p)
{
	struct job *j = p;
	j->rc = hora_net_allreduce(j->ra->comm, j->buf, j->out ? j->out : j->buf, j->count, j->t, j->op);
	if (j->rc)
		snprintf(j->err, sizeof(j->err), "%s", hora_net_comm_error(j->ra->comm));
	return NULL;
}

/* jobs[0..n) at once, one thread each */
static void run_jobs(struct job *jobs, int n)
{
	pthread_t th[MAXR];
	for (int r = 0; r < n; r++)
		pthread_create(&th[r], NULL, run_job, &jobs[r]);
	for (int r = 0; r < n; r++)
		pthread_join(th[r], NULL);
}

/* every job failed; how many errors hold both texts (b may be NULL); frees
 * the jobs' buffers and the communicators */
static int failed_naming(struct job *jobs, struct rank_arg *ra, int n, const char *a, const char *b)
{
	int named = 0;
	for (int r = 0; r < n; r++) {
		cr_assert_lt(jobs[r].rc, 0, "rank %d returned success", r);
		named += strstr(jobs[r].err, a) && (!b || strstr(jobs[r].err, b)) ? 1 : 0;
		free(jobs[r].buf);
		hora_net_comm_destroy(ra[r].comm);
	}
	return named;
}

/* every rank reduces; compare with the serial reference, and with rank 0;
 * out of place (t_oop), the result goes to another buffer and the input
 * stays as it was */
static bool t_oop;

static void check_one(struct rank_arg *ra, int n, size_t count, enum hora_net_dtype t,
		      enum hora_net_op op)
{
	size_t esz = hora_net_dtype_size(t), bytes = count * esz;
	struct job jobs[MAXR];
	uint8_t *ref = malloc(bytes + 8), *in0 = malloc(bytes + 8);
	for (int r = 0; r < n; r++) {
		jobs[r] = (struct job){.ra = &ra[r], .buf = malloc(bytes + 8), .count = count, .t = t, .op = op,
				       .out = t_oop ? malloc(bytes + 8) : NULL};
		for (size_t i = 0; i < count; i++)
			hora_net_value_put(jobs[r].buf, i, t, value(r, i, op));
	}
	/* reference: rank 0 op rank 1 op ... (exact for these inputs), then AVG's scale */
	memcpy(ref, jobs[0].buf, bytes);
	memcpy(in0, jobs[0].buf, bytes);
	for (int r = 1; r < n; r++)
		hora_net_reduce(ref, ref, jobs[r].buf, count, t, op);
	if (op == HORA_NET_AVG && n > 1)
		hora_net_scale(ref, count, t, n);
	run_jobs(jobs, n);
	for (int r = 0; r < n; r++) {
		cr_assert_eq(jobs[r].rc, 0, "N=%d count %zu %s %s rank %d: %s", n, count,
			     hora_net_dtype_name(t), hora_net_op_name(op), r, jobs[r].err);
		if (t_oop) { /* the result is in out; the input is untouched */
			void *res = jobs[r].out;
			jobs[r].out = jobs[r].buf;
			jobs[r].buf = res;
		}
		cr_assert_eq(memcmp(jobs[r].buf, jobs[0].buf, bytes), 0,
			     "N=%d count %zu %s %s: rank %d differs from rank 0", n, count,
			     hora_net_dtype_name(t), hora_net_op_name(op), r);
	}
	cr_assert_eq(memcmp(jobs[0].buf, ref, bytes), 0, "N=%d count %zu %s %s%s: differs from reference",
		     n, count, hora_net_dtype_name(t), hora_net_op_name(op), t_oop ? " out of place" : "");
	if (t_oop)
		cr_assert_eq(memcmp(jobs[0].out, in0, bytes), 0, "N=%d count %zu: the input changed", n, count);
	for (int r = 0; r < n; r++) {
		free(jobs[r].buf);
		free(jobs[r].out);
	}
	free(ref);
	free(in0);
}

static void all_cases(int n)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, n);
	size_t counts[] = {0, 1, (size_t)(n > 1 ? n - 1 : 2), (size_t)n + 1, 1009, 40009};
	/* auto, then each algorithm forced: pipelined ring, recursive doubling,
	 * direct ring (every one must give the serial reference's bits) */
	for (int algo = 0; algo <= 4; algo++) { /* 4: auto again, out of place */
		t_oop = algo == 4;
		for (int r = 0; r < n; r++)
			hora_net_comm_set_algo(ra[r].comm, (enum hora_net_algo)(algo % 4));
		for (int t = 0; t < HORA_NET_DTYPES; t++)
			for (int op = 0; op < HORA_NET_OPS; op++)
				for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
					check_one(ra, n, counts[c], (enum hora_net_dtype)t, (enum hora_net_op)op);
	}
	t_oop = false;
	for (int r = 0; r < n; r++)
		hora_net_comm_destroy(ra[r].comm);
}

/* the same over TCP alone (transport.shm: off), which is what ranks on
 * different hosts use */
static void all_cases_tcp(int n)
{
	t_shm = 1;
	all_cases(n);
	t_shm = 0;
}

/* ---- the hierarchical path: hosts as network namespaces ------------------------- */

/* Hosts as network namespaces of deploy/netns-cluster.sh (root only),
 * sizes[h] ranks on host h (threads that entered its namespace; ranks
 * numbered host by host); then fn. Returns 0 when skipped. */
static char t_tag[32]; /* the hosts made, for hosts_down */

/* .fini of the hierarchical tests: a failed assertion ends the test before
 * with_hosts removes the namespaces; this runs either way */
static void hosts_down(void)
{
	if (!t_tag[0])
		return;
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "bash '%s/deploy/netns-cluster.sh' down --tag %s >/dev/null 2>&1",
		 HORA_SOURCE_DIR, t_tag);
	if (system(cmd))
		fprintf(stderr, "%s failed\n", cmd);
	t_tag[0] = 0;
}

static int with_hosts(const int *sizes, int nh, void (*fn)(int n))
{
	if (getuid() != 0 || system("command -v ip >/dev/null && command -v tc >/dev/null")) {
		cr_log_warn("SKIP: the hierarchical tests need root and iproute2");
		return 0;
	}
	char cmd[600];
	const char *tag = t_tag;
	snprintf(t_tag, sizeof(t_tag), "hh%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "bash '%s/deploy/netns-cluster.sh' up %d --tag %s >/dev/null", HORA_SOURCE_DIR,
		 nh, tag);
	cr_assert_eq(system(cmd), 0, "%s failed", cmd);
	int n = 0, base = 20000 + (int)(getpid() % 20000);
	for (int h = 0; h < nh; h++) {
		char ns[64];
		snprintf(ns, sizeof(ns), "/run/netns/%s-%d", tag, h + 1);
		for (int k = 0; k < sizes[h]; k++, n++) {
			t_nsfd[n] = open(ns, O_RDONLY | O_CLOEXEC);
			snprintf(addr[n], sizeof(addr[n]), "10.213.8.%d:%d", h + 1, base + n);
			addrs[n] = addr[n];
		}
	}
	fn(n);
	for (int i = 0; i < n; i++)
		close(t_nsfd[i]), t_nsfd[i] = -1;
	hosts_down();
	return 1;
}

/* the matrix on hierarchical communicators: the path is the hierarchical
 * one above small_bytes when the hosts are equal (checked), the flat ring
 * when not */
static void hier_matrix(int n)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, n);
	char d[300];
	hora_net_comm_describe(ra[0].comm, 4u << 20, d, sizeof(d));
	cr_log_info("%s", d);
	cr_assert(strstr(d, t_hier == 2 || strstr(d, "unequal") ? "pipelined ring" : "hierarchical (shared"),
		  "%s", d);
	size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n + 1, 1009, 40009};
	for (int algo = 0; algo <= 2; algo++) { /* auto, the ring forced (hierarchical: on keeps
						   it), auto out of place */
		t_oop = algo == 2;
		for (int r = 0; r < n; r++)
			hora_net_comm_set_algo(ra[r].comm, (enum hora_net_algo)(algo % 2));
		for (int t = 0; t < HORA_NET_DTYPES; t++)
			for (int op = 0; op < HORA_NET_OPS; op++)
				for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
					check_one(ra, n, counts[c], (enum hora_net_dtype)t, (enum hora_net_op)op);
	}
	check_one(ra, n, 3u << 20, HORA_NET_F32, HORA_NET_SUM); /* several pipelined slices */
	t_oop = false;
	check_one(ra, n, (9u << 20) + 7, HORA_NET_F32, HORA_NET_SUM);
	for (int r = 0; r < n; r++)
		hora_net_comm_destroy(ra[r].comm);
}

/* Rank 3 of 2 hosts x 2, in its own process like every rank, is killed
 * -9 in the middle of hierarchical allreduces: every survivor fails within
 * seconds naming it: rank 2 (its host) through the stage ("local rank 1
 * ... died (local rank 1 is rank 3)"), rank 1 (its peer across hosts)
 * through the cross ring ("with rank 3"), rank 0 through their notices. */
struct hier_report {
	int rc;
	char err[700];
};

static void hier_victim_run(int me, int n, int wfd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct rank_arg a = {.rank = me, .n = n};
	create_rank(&a);
	struct hier_report rep = {.rc = a.rc};
	snprintf(rep.err, sizeof(rep.err), "%s", a.err);
	if (!a.rc) {
		const size_t count = 1u << 20;
		float *b = calloc(count, 4);
		if (write(wfd, "r", 1) != 1) /* ready */
			_exit(2);
		for (int k = 0; k < 5000 && !rep.rc; k++)
			rep.rc = hora_net_allreduce(a.comm, b, b, count, HORA_NET_F32, HORA_NET_SUM);
		snprintf(rep.err, sizeof(rep.err), "%s", hora_net_comm_error(a.comm));
	}
	if (write(wfd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
		_exit(2);
	_exit(0);
}

static void hier_killed(int n)
{
	pid_t pid[MAXR];
	int rfd[MAXR];
	for (int r = 0; r < n; r++) {
		int p[2];
		cr_assert_eq(pipe(p), 0);
		if ((pid[r] = fork()) == 0) {
			close(p[0]);
			hier_victim_run(r, n, p[1]);
		}
		close(p[1]);
		rfd[r] = p[0];
	}
	char c;
	for (int r = 0; r < n; r++)
		cr_assert_eq(read(rfd[r], &c, 1), 1, "rank %d did not start", r);
	usleep(300 * 1000);
	kill(pid[3], SIGKILL);
	const double t0 = hora_clock_s();
	for (int r = 0; r < 3; r++) {
		struct hier_report rep;
		cr_assert_eq(read(rfd[r], &rep, sizeof(rep)), (ssize_t)sizeof(rep), "rank %d said nothing", r);
		const double s = hora_clock_s() - t0;
		cr_log_info("rank %d after %.2f s: rc %d: %s", r, s, rep.rc, rep.err);
		cr_assert_lt(rep.rc, 0, "rank %d finished 5000 allreduces without rank 3", r);
		cr_assert(strstr(rep.err, "rank 3"), "rank %d does not name rank 3: %s", r, rep.err);
		cr_assert_lt(s, 10.0, "rank %d took %.1f s to fail", r, s);
	}
	for (int r = 0; r < n; r++) {
		waitpid(pid[r], NULL, 0);
		close(rfd[r]);
	}
}

Test(net_hier, a_killed_rank_fails_every_other_naming_it, .timeout = 120, .fini = hosts_down)
{
	with_hosts((int[]){2, 2}, 2, hier_killed);
}

Test(net_hier, two_hosts_of_two, .timeout = 240, .fini = hosts_down)
{
	t_hier = 1;
	with_hosts((int[]){2, 2}, 2, hier_matrix);
	t_hier = 0;
}
Test(net_hier, two_hosts_of_three, .timeout = 240, .fini = hosts_down) { with_hosts((int[]){3, 3}, 2, hier_matrix); }
Test(net_hier, three_plus_one_falls_back_to_the_flat_ring, .timeout = 240, .fini = hosts_down)
{
	with_hosts((int[]){3, 1}, 2, hier_matrix);
}

Test(net_coll, every_dtype_op_count_tcp_n2, .timeout = 120) { all_cases_tcp(2); }
Test(net_coll, every_dtype_op_count_tcp_n3, .timeout = 120) { all_cases_tcp(3); }
Test(net_coll, every_dtype_op_count_tcp_n5, .timeout = 120) { all_cases_tcp(5); }
Test(net_coll, every_dtype_op_count_n1, .timeout = 120) { all_cases(1); }
Test(net_coll, every_dtype_op_count_n2, .timeout = 120) { all_cases(2); }
Test(net_coll, every_dtype_op_count_n3, .timeout = 120) { all_cases(3); }
Test(net_coll, every_dtype_op_count_n4, .timeout = 120) { all_cases(4); }
Test(net_coll, every_dtype_op_count_n5, .timeout = 120) { all_cases(5); }
Test(net_coll, every_dtype_op_count_n6, .timeout = 120) { all_cases(6); }
Test(net_coll, every_dtype_op_count_n7, .timeout = 120) { all_cases(7); }
Test(net_coll, every_dtype_op_count_n8, .timeout = 120) { all_cases(8); }

Test(net_coll, sixty_four_mib_f32_sum_n4, .timeout = 120)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 4);
	check_one(ra, 4, 16u << 20, HORA_NET_F32, HORA_NET_SUM);
	for (int r = 0; r < 4; r++)
		hora_net_comm_destroy(ra[r].comm);
}

Test(net_coll, random_floats_within_tolerance, .timeout = 60)
{
	/* tolerance: each element is a sum of N values of |x| <= 1 in a
	 * different association than the serial sum: |error| <= N * eps * sum|x| */
	struct rank_arg ra[MAXR];
	const int n = 5;
	const size_t count = 100003;
	make_comms(ra, n);
	struct job jobs[MAXR];
	double *ref = calloc(count, sizeof(double)), *mag = calloc(count, sizeof(double));
	uint64_t s = 12345;
	for (int r = 0; r < n; r++) {
		float *b = malloc(count * sizeof(float));
		for (size_t i = 0; i < count; i++) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			b[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
			ref[i] += b[i];
			mag[i] += fabs(b[i]);
		}
		jobs[r] = (struct job){.ra = &ra[r], .buf = b, .count = count, .t = HORA_NET_F32, .op = HORA_NET_SUM};
	}
	run_jobs(jobs, n);
	double worst = 0;
	for (int r = 0; r < n; r++) {
		cr_assert_eq(jobs[r].rc, 0, "%s", jobs[r].err);
		cr_assert_eq(memcmp(jobs[r].buf, jobs[0].buf, count * 4), 0, "rank %d differs", r);
	}
	for (size_t i = 0; i < count; i++) {
		double e = fabs(((float *)jobs[0].buf)[i] - ref[i]) / (mag[i] * n * 0x1.0p-23 + 1e-30);
		if (e > worst)
			worst = e;
	}
	cr_log_info("f32 sum of 5 ranks: worst error %.3f of the bound", worst);
	cr_assert_leq(worst, 1.0);
	for (int r = 0; r < n; r++) {
		free(jobs[r].buf);
		hora_net_comm_destroy(ra[r].comm);
	}
	free(ref);
	free(mag);
}

Test(net_coll, mismatched_calls_are_named, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 3);
	struct job jobs[3];
	float bufs[3][200] = {{0}};
	for (int r = 0; r < 3; r++)
		jobs[r] = (struct job){.ra = &ra[r], .buf = bufs[r], .count = r == 1 ? 101 : 100,
				       .t = HORA_NET_F32, .op = HORA_NET_SUM};
	run_jobs(jobs, 3);
	int named = 0;
	for (int r = 0; r < 3; r++) {
		cr_assert_lt(jobs[r].rc, 0, "rank %d succeeded", r);
		if (strstr(jobs[r].err, "mismatched collectives") && strstr(jobs[r].err, "rank "))
			named++;
	}
	cr_assert_geq(named, 1, "no rank named the mismatch: %s | %s | %s", jobs[0].err, jobs[1].err,
		      jobs[2].err);
	/* a rank told by an ABORT names a rank whose own error names both calls */
	for (int r = 0; r < 3; r++) {
		const char *p = strstr(jobs[r].err, "stopped: it saw mismatched");
		if (!p)
			continue;
		const char *q = p;
		while (q > jobs[r].err && q[-1] != ' ')
			q--;
		while (q > jobs[r].err && q[-1] == ' ')
			q--;
		while (q > jobs[r].err && q[-1] != ' ')
			q--;
		int x = atoi(q);
		cr_assert(x >= 0 && x < 3 && strstr(jobs[x].err, "mismatched collectives: rank"),
			  "rank %d names rank %d, whose error is: %s", r, x, x >= 0 && x < 3 ? jobs[x].err : "?");
	}
	for (int r = 0; r < 3; r++)
		hora_net_comm_destroy(ra[r].comm);
}

Test(net_coll, mismatched_op_on_the_ring_is_named_in_full, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 2);
	struct job jobs[2];
	size_t count = 1 << 20; /* ring: the fingerprint goes alone, first */
	for (int r = 0; r < 2; r++)
		jobs[r] = (struct job){.ra = &ra[r], .buf = calloc(count, 4), .count = count,
				       .t = HORA_NET_F32, .op = r ? HORA_NET_MAX : HORA_NET_SUM};
	run_jobs(jobs, 2);
	const int named = failed_naming(jobs, ra, 2, "f32, sum", "f32, max");
	cr_assert_geq(named, 1, "%s | %s", jobs[0].err, jobs[1].err);
}

/* A mismatch on the ring of 6: the ranks that hear of it only from a
 * neighbour that stopped (its connection closed, its notice on the fast
 * socket) say it was a mismatch too, never that a rank was lost. */
Test(net_coll, mismatch_on_a_ring_of_six_is_called_a_mismatch_by_everyone, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 6);
	struct job jobs[6];
	size_t count = 1 << 20;
	for (int r = 0; r < 6; r++)
		jobs[r] = (struct job){.ra = &ra[r], .buf = calloc(count, 4), .count = count,
				       .t = HORA_NET_F32, .op = r == 2 ? HORA_NET_MAX : HORA_NET_SUM};
	run_jobs(jobs, 6);
	for (int r = 0; r < 6; r++) {
		cr_log_info("rank %d: %s", r, jobs[r].err);
		cr_assert_lt(jobs[r].rc, 0, "rank %d succeeded", r);
		cr_assert(strstr(jobs[r].err, "mismatched") && !strstr(jobs[r].err, "lost rank"),
			  "rank %d: %s", r, jobs[r].err);
		free(jobs[r].buf);
		hora_net_comm_destroy(ra[r].comm);
	}
}

Test(net_coll, count_mismatch_on_the_sliced_ring_names_both_whole_counts, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 2);
	struct job jobs[2];
	/* 64 slices of 2 x 24 KiB: equal first slices must still be refused */
	for (int r = 0; r < 2; r++)
		jobs[r] = (struct job){.ra = &ra[r], .buf = calloc((1 << 20) + 1, 4), .count = (1u << 20) + (size_t)r,
				       .t = HORA_NET_F32, .op = HORA_NET_SUM};
	run_jobs(jobs, 2);
	const int named = failed_naming(jobs, ra, 2, "count 1048576", "count 1048577");
	cr_assert_geq(named, 1, "%s | %s", jobs[0].err, jobs[1].err);
}

/* With several sockets per peer the ring's receives can finish out of
 * order; every segment must still be reduced and forwarded in schedule
 * order (equal-length segments would otherwise mix silently). */
Test(net_coll, ring_over_several_sockets_per_peer, .timeout = 120)
{
	struct rank_arg ra[MAXR];
	t_segment = 4096;
	t_sockets = 4;
	for (int n = 2; n <= 3; n++) {
		make_comms(ra, n);
		for (int r = 0; r < n; r++)
			hora_net_comm_set_algo(ra[r].comm, HORA_NET_ALGO_RING);
		for (int rep = 0; rep < 5; rep++) {
			check_one(ra, n, 2 * 1024 * 64, HORA_NET_F32, HORA_NET_SUM);
			check_one(ra, n, 100003, HORA_NET_F32, HORA_NET_SUM);
			check_one(ra, n, 40009, HORA_NET_I32, HORA_NET_MAX);
		}
		for (int r = 0; r < n; r++)
			hora_net_comm_destroy(ra[r].comm);
	}
	t_segment = 64 << 10;
	t_sockets = 1;
}

/* The same call run by different algorithms (per-rank settings) must be
 * refused, not give wrong sums: here rank 0 takes the latency path (a
 * larger small_bytes) and rank 1 the direct ring (TCP) or the stage (one
 * host). */
Test(net_coll, different_collective_settings_are_named, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 2);
	cr_assert_eq(hora_net_comm_set_small_bytes(ra[0].comm, 256 << 10), 0);
	struct job jobs[2];
	for (int r = 0; r < 2; r++)
		jobs[r] = (struct job){.ra = &ra[r], .buf = calloc(32 << 10, 4), .count = 32 << 10,
				       .t = HORA_NET_F32, .op = HORA_NET_SUM};
	run_jobs(jobs, 2);
	/* over TCP "a latency algorithm on the small-message sockets", on one
	 * host "the shared-memory gather (latency)" */
	const int named = failed_naming(jobs, ra, 2, "mismatched collective settings", "latency");
	cr_assert_geq(named, 1, "%s | %s", jobs[0].err, jobs[1].err);
}

/* One rank's call goes over the small-message sockets (100 floats), the
 * other's over the transport (4 Mi floats): named at once on both, not an
 * I/O timeout on different channels. */
Test(net_coll, a_small_call_against_a_large_one_is_named_at_once, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 2);
	struct job jobs[2];
	for (int r = 0; r < 2; r++)
		jobs[r] = (struct job){.ra = &ra[r], .buf = calloc(4 << 20, 4), .count = r ? 4u << 20 : 100,
				       .t = HORA_NET_F32, .op = HORA_NET_SUM};
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	run_jobs(jobs, 2);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	const int named = failed_naming(jobs, ra, 2, "count 100,", "count 4194304,");
	cr_assert_geq(named, 1, "%s | %s", jobs[0].err, jobs[1].err);
	/* the I/O timeout of these communicators is 10 s */
	cr_assert_lt(s, 5.0, "took %.1f s: %s | %s", s, jobs[0].err, jobs[1].err);
}

/* a refused call counts and breaks the communicator (every rank is told:
 * test_coll_args.c), so each refusal here gets a communicator of its own */
Test(net_coll, counts_whose_bytes_would_wrap_are_refused, .timeout = 30)
{
	struct rank_arg ra[MAXR];
	make_comms(ra, 1);
	float x = 0;
	cr_assert_eq(hora_net_allreduce(ra[0].comm, &x, &x, SIZE_MAX / 4 + 2, HORA_NET_F32, HORA_NET_SUM),
		     -EINVAL);
	cr_assert(strstr(hora_net_comm_error(ra[0].comm), "is too large"), "%s",
		  hora_net_comm_error(ra[0].comm));
	cr_assert_eq(hora_net_allreduce(ra[0].comm, &x, &x, 1, HORA_NET_F32, HORA_NET_SUM), -EINVAL);
	hora_net_comm_destroy(ra[0].comm);
	make_comms(ra, 1);
	cr_assert_eq(hora_net_allgather(ra[0].comm, &x, &x, SIZE_MAX / 8, HORA_NET_F64), -EINVAL);
	hora_net_comm_destroy(ra[0].comm);
}

/* overlaps other than the in-place layouts are refused */
Test(net_coll, overlapping_buffers_are_refused, .timeout = 60)
{
	struct rank_arg ra[MAXR];
	float b[64] = {0};
	for (int k = 0; k < 3; k++) {
		make_comms(ra, 1);
		int rc = k == 0 ? hora_net_allreduce(ra[0].comm, b, b + 1, 10, HORA_NET_F32, HORA_NET_SUM)
			 /* rank 0's block of a 1 x 10 reduce-scatter is b[0..10); b + 5 is not it */
			 : k == 1 ? hora_net_reduce_scatter(ra[0].comm, b, b + 5, 10, HORA_NET_F32, HORA_NET_SUM)
				  : hora_net_allgather(ra[0].comm, b + 3, b, 10, HORA_NET_F32);
		cr_assert_eq(rc, -EINVAL, "layout %d", k);
		cr_assert(strstr(hora_net_comm_error(ra[0].comm), "overlap"), "%s", hora_net_comm_error(ra[0].comm));
		hora_net_comm_destroy(ra[0].comm);
	}
}

/* Allreduces of `count` f32 on ranks ra[0..nj) (threads), the process `pid`
 * killed after delay_us; returns the seconds from the kill until every
 * thread returned. jobs[i] says how each ended. */
static double kill_during(struct rank_arg *ra, struct job *jobs, int nj, size_t count, pid_t pid,
			  int delay_us)
{
	pthread_t th[MAXR];
	for (int i = 0; i < nj; i++) {
		jobs[i] = (struct job){.ra = &ra[i], .buf = calloc(count, 4), .count = count,
				       .t = HORA_NET_F32, .op = HORA_NET_SUM};
		pthread_create(&th[i], NULL, run_job, &jobs[i]);
	}
	usleep((useconds_t)delay_us);
	kill(pid, SIGKILL);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < nj; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waitpid(pid, NULL, 0);
	return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

Test(net_coll, killed_rank_fails_the_others_fast, .timeout = 60)
{
	const int n = 3;
	char *shm_before = th_dev_shm(); /* and no file is left in /dev/shm */
	pick_ports(n);
	pid_t pid = fork();
	if (pid == 0) { /* rank 2, in its own process: joins, starts, is killed */
		struct rank_arg a = {.rank = 2, .n = n};
		create_rank(&a);
		if (a.rc)
			_exit(3);
		size_t count = 16u << 20;
		float *b = calloc(count, 4);
		hora_net_allreduce(a.comm, b, b, count, HORA_NET_F32, HORA_NET_SUM);
		_exit(0);
	}
	struct rank_arg ra[2];
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		ra[i] = (struct rank_arg){.rank = i, .n = n};
		pthread_create(&th[i], NULL, create_rank, &ra[i]);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(ra[i].rc, 0, "%s", ra[i].err);
	}
	struct job jobs[2];
	double s = kill_during(ra, jobs, 2, 16u << 20, pid, 30000);
	int failed = 0;
	for (int r = 0; r < 2; r++) {
		if (jobs[r].rc < 0)
			failed++;
		cr_log_info("rank %d: rc %d: %s", r, jobs[r].rc, jobs[r].err);
	}
	/* It may have finished before the kill on a fast day. If not, a survivor
	 * fails fast and says why; one may still finish when the kill lands in
	 * the last step, after the victim sent everything the other needed. */
	if (failed) {
		cr_assert_lt(s, 5.0, "survivors took %.2f s to fail", s);
		for (int r = 0; r < 2; r++)
			if (jobs[r].rc < 0)
				cr_assert(strstr(jobs[r].err, "allreduce"), "rank %d: %s", r, jobs[r].err);
	}
	for (int r = 0; r < 2; r++) {
		free(jobs[r].buf);
		hora_net_comm_destroy(ra[r].comm);
	}
	char *shm_after = th_dev_shm(), name[256];
	cr_expect(!th_dev_shm_new(shm_before, shm_after, name, sizeof(name)), "/dev/shm/%s was left", name);
	free(shm_before);
	free(shm_after);
}

/* Rank 2 of 4 joins, never calls, and is killed while the others wait in an
 * allreduce of `count` floats. Every survivor fails within seconds, and its
 * error names rank 2, also the survivors that were not waiting on rank 2
 * itself but on a rank that gave up because of it (a K_LOST notice: before
 * it they said only that their neighbour had closed the connection). */
static void killed_rank_is_named(size_t count)
{
	const int n = 4, victim = 2, live[3] = {0, 1, 3};
	pick_ports(n);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct rank_arg a = {.rank = victim, .n = n};
		create_rank(&a);
		if (a.rc)
			_exit(3);
		pause();
		_exit(0);
	}
	struct rank_arg ra[3];
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		ra[i] = (struct rank_arg){.rank = live[i], .n = n};
		pthread_create(&th[i], NULL, create_rank, &ra[i]);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(ra[i].rc, 0, "rank %d: %s", live[i], ra[i].err);
	struct job jobs[3];
	double s = kill_during(ra, jobs, 3, count, pid, 200000);
	cr_assert_lt(s, 5.0, "survivors took %.2f s to fail", s);
	for (int i = 0; i < 3; i++) {
		cr_log_info("rank %d: rc %d: %s", live[i], jobs[i].rc, jobs[i].err);
		cr_assert_lt(jobs[i].rc, 0, "rank %d finished an allreduce without rank 2", live[i]);
		cr_assert(strstr(jobs[i].err, "rank 2"), "rank %d does not name rank 2: %s", live[i],
			  jobs[i].err);
		free(jobs[i].buf);
		hora_net_comm_destroy(ra[i].comm);
	}
}

Test(net_coll, killed_rank_is_named_by_every_survivor_small, .timeout = 60) { killed_rank_is_named(2); }
Test(net_coll, killed_rank_is_named_by_every_survivor_ring, .timeout = 60) { killed_rank_is_named(4u << 20); }

/* The vector f16/bf16 loops (F16C, AVX2, chosen at run time) give the same
 * bits as the scalar conversions for every non-NaN input, including
 * subnormals, infinities, overflow to inf and the odd-length tail; NaN in
 * gives NaN out. */
static uint16_t scalar_half(uint16_t a, uint16_t b, bool bf, enum hora_net_op op)
{
	float x = bf ? hora_net_bf16_to_f32(a) : hora_net_f16_to_f32(a);
	float y = bf ? hora_net_bf16_to_f32(b) : hora_net_f16_to_f32(b);
	float r = op == HORA_NET_PROD ? x * y : op == HORA_NET_MIN ? (x < y ? x : y)
		  : op == HORA_NET_MAX ? (x > y ? x : y) : x + y;
	return bf ? hora_net_f32_to_bf16(r) : hora_net_f32_to_f16(r);
}

static bool half_nan(uint16_t h, bool bf)
{
	return bf ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

Test(net_reduce, half_precision_vector_paths_match_the_scalar_reference)
{
	enum { N = 4099 };
	static uint16_t a[N], b[N], d[N];
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (int bf = 0; bf < 2; bf++)
		for (int op = 0; op < HORA_NET_OPS; op++) {
			for (int i = 0; i < N; i++) {
				s = s * 6364136223846793005ull + 1442695040888963407ull;
				a[i] = (uint16_t)(s >> 16);
				b[i] = (uint16_t)(s >> 40);
				if (i % 17 == 0) /* subnormals */
					a[i] &= 0x803f;
				if (i % 29 == 0) /* infinities */
					b[i] = bf ? 0x7f80 : 0x7c00;
			}
			hora_net_reduce(d, a, b, N, bf ? HORA_NET_BF16 : HORA_NET_F16, (enum hora_net_op)op);
			for (int i = 0; i < N; i++) {
				uint16_t want = scalar_half(a[i], b[i], bf, (enum hora_net_op)op);
				if (half_nan(want, bf))
					cr_assert(half_nan(d[i], bf), "%s %s [%d]: %04x, want NaN", bf ? "bf16" : "f16",
						  hora_net_op_name((enum hora_net_op)op), i, d[i]);
				else
					cr_assert_eq(d[i], want, "%s %s [%d]: %04x op %04x = %04x, want %04x",
						     bf ? "bf16" : "f16", hora_net_op_name((enum hora_net_op)op), i,
						     a[i], b[i], d[i], want);
			}
		}
}

/* the single-copy allreduce's one-pass fold: the bits of reduce over the
 * ranks in order, then scale, stored into every buffer */
Test(net_reduce, one_pass_fold_has_the_bits_of_reduce_then_scale)
{
	enum { N = 1029, R = 5 }; /* a tail past the vector width */
	static float in[R][N], want[N], got[R][N];
	uint64_t s = 7;
	for (int l = 0; l < R; l++)
		for (int i = 0; i < N; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			uint32_t u = (uint32_t)(s >> 32);
			memcpy(&in[l][i], &u, 4);
			if (i % 31 == 0) /* subnormals, and sums that round */
				in[l][i] = (float)(l + 1) * 1e-40f;
		}
	for (int n = 2; n <= R; n++)
		for (int div = 0; div <= n; div += n) {
			hora_net_reduce(want, in[0], in[1], N, HORA_NET_F32, HORA_NET_SUM);
			for (int l = 2; l < n; l++)
				hora_net_reduce(want, want, in[l], N, HORA_NET_F32, HORA_NET_SUM);
			if (div)
				hora_net_scale(want, N, HORA_NET_F32, div);
			float *b[R];
			for (int l = 0; l < n; l++)
				b[l] = memcpy(got[l], in[l], sizeof(in[l]));
			hora_net_fold_f32(b, n, N, div);
			for (int l = 0; l < n; l++)
				for (int i = 0; i < N; i++) {
					uint32_t w, g;
					memcpy(&w, &want[i], 4), memcpy(&g, &got[l][i], 4);
					if (isnan(want[i]))
						cr_assert(isnan(got[l][i]), "n %d div %d buffer %d [%d]: NaN expected", n,
							  div, l, i);
					else
						cr_assert_eq(g, w, "n %d div %d buffer %d [%d]: %08x, want %08x", n, div,
							     l, i, g, w);
				}
		}
}

Test(net_reduce, bulk_half_conversions_match_the_scalar_ones)
{
	enum { N = 1027 };
	static float f[N], back[N];
	static uint16_t h[N];
	uint64_t s = 42;
	for (int i = 0; i < N; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t u = (uint32_t)(s >> 32);
		if (i % 7 == 0)
			u &= 0x807fffffu; /* subnormal floats */
		if (i % 11 == 0)
			u = (u & 0x80000000u) | 0x47800000u | (u & 0x7fffff); /* near f16 overflow */
		memcpy(&f[i], &u, 4);
		if (isnan(f[i]))
			f[i] = 1.5f;
	}
	for (int bf = 0; bf < 2; bf++) {
		hora_net_f32_to_half_n(f, h, N, bf);
		for (int i = 0; i < N; i++)
			cr_assert_eq(h[i], bf ? hora_net_f32_to_bf16(f[i]) : hora_net_f32_to_f16(f[i]),
				     "%s [%d] %a", bf ? "bf16" : "f16", i, (double)f[i]);
		hora_net_half_to_f32_n(h, back, N, bf);
		for (int i = 0; i < N; i++) {
			float want = bf ? hora_net_bf16_to_f32(h[i]) : hora_net_f16_to_f32(h[i]);
			cr_assert(memcmp(&back[i], &want, 4) == 0, "%s back [%d]", bf ? "bf16" : "f16", i);
		}
	}
}
