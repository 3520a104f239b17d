/* test_stage_window.c - the stage's single-copy allreduce
 * (net/coll/stage_window.c) in 2 to 8 real processes: each rank's buffer
 * lies in a region of its own (net/shm/region.c, at an offset that differs
 * by rank), passed to the peers over the socketpairs at first use; every
 * dtype x op x count checked against the closed-form value and the same
 * bits on every rank; random data giving the same bits as the copying
 * allreduce; several regions per rank, used in turn; a buffer in no region
 * and a rank past the region limit give no descriptor; a forged descriptor
 * (an offset outside the region) fails every rank naming the forger; a rank
 * killed mid-call fails the others naming it, nothing left in /dev/shm. The
 * call is what local.c does: window, a gather of the descriptors (the
 * entry barrier), allreduce_windows. No timing is asserted. */
#include "stage_helpers.h"
#include "net/shm/shm.h"
#include "net/util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DESC HORA_NET_STAGE_DESC_BYTES

/* one call as local.c makes it; -ENOENT when some rank named no window */
static int win_call(struct hora_net_stage *s, struct hora_net_shm_regions *regs, void *buf, size_t count,
		    enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen)
{
	static const uint8_t none[DESC];
	uint8_t d[DESC];
	const void *all[MAXN];
	const uint8_t *dp[MAXN];
	int rc = s->ops->window(s, regs, buf, count * hora_net_dtype_size(t), d, err, errlen);
	if (!rc)
		rc = s->ops->gather(s, d, DESC, all, err, errlen);
	if (rc)
		return rc;
	bool every = true;
	for (int l = 0; l < s->nlocal; l++) {
		dp[l] = all[l];
		every = every && memcmp(dp[l], none, DESC);
	}
	if (!every) {
		snprintf(err, errlen, "a rank named no window");
		return -ENOENT;
	}
	return s->ops->allreduce_windows(s, dp, buf, count, t, op, err, errlen);
}

static void *region(struct hora_net_shm_regions *regs, size_t bytes)
{
	void *p = NULL;
	char e[200];
	return hora_net_shm_region_alloc(regs, bytes, &p, e, sizeof(e)) ? NULL : p;
}

/* every dtype x op x count, the buffer 8 x r + 8 bytes into the region */
static void matrix_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	struct hora_net_shm_regions *regs;
	uint8_t *base;
	if (hora_net_shm_regions_create(&regs) || !(base = region(regs, BIG_BYTES + 128))) {
		res->rc = -ENOMEM;
		return;
	}
	void *buf = base + 8 * (size_t)r + 8;
	size_t c[8];
	res->hash = 0xcbf29ce484222325ull;
	for (int t = 0; t < HORA_NET_DTYPES; t++)
		for (int op = 0; op < HORA_NET_OPS; op++) {
			size_t nc = counts(n, (enum hora_net_dtype)t, c);
			for (size_t k = 0; k < nc; k++) {
				if (k == nc - 1 && op != HORA_NET_SUM && t != HORA_NET_F32)
					continue;
				fill(buf, c[k], t, r, op);
				if ((res->rc = win_call(s, regs, buf, c[k], t, op, res->err, sizeof(res->err))))
					goto out;
				for (size_t i = 0; i < c[k]; i++)
					if (hora_net_value_get(buf, i, t) != expected(n, i, op, t)) {
						if (!res->bad)
							snprintf(res->err, sizeof(res->err), "%s %s count %zu: [%zu] = %g, want %g",
								 hora_net_dtype_name(t), hora_net_op_name(op), c[k], i,
								 hora_net_value_get(buf, i, t), expected(n, i, op, t));
						res->bad++;
					}
				res->hash = hash_bytes(res->hash, buf, c[k] * hora_net_dtype_size(t));
			}
		}
out:
	hora_net_shm_regions_destroy(regs);
}

Test(net_stage_window, allreduce_matrix_2_3_4, .timeout = 120)
{
	for (int n = 2; n <= 4; n++)
		run_checked(n, matrix_rank);
}

Test(net_stage_window, allreduce_matrix_8, .timeout = 180)
{
	run_checked(8, matrix_rank);
}

/* random data: the single-copy result has the copying allreduce's bits */
static void same_bits_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	(void)arg;
	static const enum hora_net_dtype ts[] = {HORA_NET_F32, HORA_NET_F64, HORA_NET_F16, HORA_NET_BF16};
	static const enum hora_net_op ops[] = {HORA_NET_SUM, HORA_NET_AVG, HORA_NET_PROD};
	const size_t count = 200003;
	struct hora_net_shm_regions *regs;
	uint8_t *buf, *ref = malloc(count * 8);
	if (hora_net_shm_regions_create(&regs) || !(buf = region(regs, count * 8)) || !ref) {
		res->rc = -ENOMEM;
		free(ref);
		return;
	}
	for (size_t a = 0; a < 4 && !res->rc; a++)
		for (size_t o = 0; o < 3 && !res->rc; o++) {
			const size_t bytes = count * hora_net_dtype_size(ts[a]);
			random_fill(ref, count, ts[a], r);
			res->rc = s->ops->allreduce(s, ref, ref, count, ts[a], ops[o], res->err, sizeof(res->err));
			random_fill(buf, count, ts[a], r);
			if (!res->rc)
				res->rc = win_call(s, regs, buf, count, ts[a], ops[o], res->err, sizeof(res->err));
			if (!res->rc && memcmp(buf, ref, bytes)) {
				snprintf(res->err, sizeof(res->err), "%s %s: single copy and copying differ",
					 hora_net_dtype_name(ts[a]), hora_net_op_name(ops[o]));
				res->bad++;
			}
			res->hash = hash_bytes(res->hash, buf, bytes);
		}
	hora_net_shm_regions_destroy(regs);
	free(ref);
}

Test(net_stage_window, the_same_bits_as_the_copying_allreduce, .timeout = 120)
{
	for (int n = 2; n <= 5; n += 3)
		run_checked(n, same_bits_rank);
}

/* regions used in turn, A B A C B: each passed once, mapped once; then a
 * buffer in no region and (past STAGE_WIN_MAX regions) a region too many
 * give no descriptor */
static void regions_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	struct hora_net_shm_regions *regs;
	float *g[STAGE_WIN_MAX + 1];
	const size_t count = 5000;
	if (hora_net_shm_regions_create(&regs)) {
		res->rc = -ENOMEM;
		return;
	}
	for (int i = 0; i <= STAGE_WIN_MAX; i++)
		if (!(g[i] = region(regs, count * sizeof(float)))) {
			res->rc = -ENOMEM;
			goto out;
		}
	static const int order[] = {0, 1, 0, 2, 1};
	for (size_t k = 0; k < 5 && !res->rc; k++) {
		float *b = g[order[k]];
		fill(b, count, HORA_NET_F32, r, HORA_NET_SUM);
		res->rc = win_call(s, regs, b, count, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
		for (size_t i = 0; i < count && !res->rc; i++)
			if (b[i] != (float)expected(n, i, HORA_NET_SUM, HORA_NET_F32) && !res->bad++)
				snprintf(res->err, sizeof(res->err), "call %zu: [%zu] = %g", k, i, (double)b[i]);
	}
	uint8_t d[DESC], zero[DESC] = {0};
	float plain[16];
	if (!res->rc && ((res->rc = s->ops->window(s, regs, plain, sizeof(plain), d, res->err, sizeof(res->err))) ||
			 memcmp(d, zero, DESC)) && !res->bad++)
		snprintf(res->err, sizeof(res->err), "a buffer in no region got a descriptor");
	/* regions 3.. STAGE_WIN_MAX - 1 are passed (each call passes at most one) */
	for (int i = 3; i < STAGE_WIN_MAX && !res->rc; i++)
		if ((res->rc = s->ops->window(s, regs, g[i], 64, d, res->err, sizeof(res->err))) || !memcmp(d, zero, DESC))
			res->bad += !res->rc, snprintf(res->err, sizeof(res->err), "region %d got no descriptor", i);
	if (!res->rc && ((res->rc = s->ops->window(s, regs, g[STAGE_WIN_MAX], 64, d, res->err, sizeof(res->err))) ||
			 memcmp(d, zero, DESC)) && !res->bad++)
		snprintf(res->err, sizeof(res->err), "region %d, past the limit, got a descriptor", STAGE_WIN_MAX);
	/* a plain allreduce after all that still works */
	float one[4] = {1, 1, 1, 1};
	if (!res->rc)
		res->rc = s->ops->allreduce(s, one, one, 4, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
	if (!res->rc && one[3] != (float)n && !res->bad++)
		snprintf(res->err, sizeof(res->err), "the plain allreduce gave %g", (double)one[3]);
out:
	hora_net_shm_regions_destroy(regs);
}

Test(net_stage_window, regions_in_turn_and_the_limits, .timeout = 60)
{
	struct result res[MAXN];
	run_default(3, regions_rank, res);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(res[r].rc, 0, "rank %d: rc %d: %s", r, res[r].rc, res[r].err);
		cr_assert_eq(res[r].bad, 0, "rank %d: %s", r, res[r].err);
	}
}

/* One call whose path is the copying one (local.c's when some rank named
 * no window): window, the gather, the copying allreduce, the result
 * checked. *offered: 1 when this rank's window() gave a descriptor. */
static void copying_call(struct hora_net_stage *s, struct hora_net_shm_regions *regs, float *b, size_t count, int r,
			 int n, int k, int *offered, struct result *res)
{
	static const uint8_t none[DESC];
	uint8_t d[DESC];
	const void *all[MAXN];
	fill(b, count, HORA_NET_F32, r, HORA_NET_SUM);
	res->rc = s->ops->window(s, regs, b, count * sizeof(float), d, res->err, sizeof(res->err));
	*offered = memcmp(d, none, DESC) != 0;
	if (!res->rc)
		res->rc = s->ops->gather(s, d, DESC, all, res->err, sizeof(res->err));
	bool every = !res->rc;
	for (int l = 0; l < n && every; l++)
		every = memcmp(all[l], none, DESC) != 0;
	if (!res->rc && every && !res->bad++)
		snprintf(res->err, sizeof(res->err), "call %d: every rank named a window", k);
	if (!res->rc)
		res->rc = s->ops->allreduce(s, b, b, count, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
	for (size_t i = 0; i < count && !res->rc; i++)
		if (b[i] != (float)expected(n, i, HORA_NET_SUM, HORA_NET_F32) && !res->bad++)
			snprintf(res->err, sizeof(res->err), "call %d: [%zu] = %g", k, i, (double)b[i]);
}

/* Nothing unread on any of this rank's sockets from its peers. */
static void check_drained(struct hora_net_stage *s, int r, int n, struct result *res)
{
	const struct stage_shm *st = stage_of(s);
	for (int l = 0; l < n && !res->rc; l++) {
		int unread = 0;
		if (l != r && (ioctl(st->socks[l], FIONREAD, &unread) || unread) && !res->bad++)
			snprintf(res->err, sizeof(res->err), "%d bytes from local rank %d unread", unread, l);
	}
}

/* ranks 0 and 2 allocate, average and free a fresh region 40 times while
 * rank 1's buffer is ordinary memory: every call takes the copying path,
 * ranks 0 and 2 offer each region (the freed ones' slots are reused), and
 * every rank reads what the others sent in every call (stage_windows_drain),
 * so nothing is left unread on any socket: each unread message holds a
 * region's fd (its pages) and, piled up, would block the sender */
static void mixed_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	struct hora_net_shm_regions *regs;
	const size_t count = 5000;
	float *plain = malloc(count * sizeof(float));
	if (hora_net_shm_regions_create(&regs) || !plain) {
		res->rc = -ENOMEM;
		free(plain);
		return;
	}
	if (arg && r == 1) { /* RLIMIT_NOFILE at our lowest free fd: no fd can come, each is dropped */
		int lowest = 0;
		while (fcntl(lowest, F_GETFD) != -1)
			lowest++;
		const struct rlimit full = {(rlim_t)lowest, (rlim_t)lowest};
		if (setrlimit(RLIMIT_NOFILE, &full)) {
			res->rc = -errno;
			snprintf(res->err, sizeof(res->err), "RLIMIT_NOFILE %d: %s", lowest, strerror(errno));
		}
	}
	int offered = 0, one;
	for (int k = 0; k < 40 && !res->rc; k++) {
		float *b = r == 1 ? plain : region(regs, count * sizeof(float));
		if (!b) {
			res->rc = -ENOMEM;
			break;
		}
		copying_call(s, regs, b, count, r, n, k, &one, res);
		offered += one;
		if (b != plain)
			hora_net_shm_region_free(regs, b);
	}
	if (!res->rc && offered != (r == 1 ? 0 : 40) && !res->bad++)
		snprintf(res->err, sizeof(res->err), "%d of 40 calls offered a region", offered);
	check_drained(s, r, n, res);
	hora_net_shm_regions_destroy(regs);
	free(plain);
}

Test(net_stage_window, freed_regions_are_told_and_read_in_every_call_whatever_its_path, .timeout = 60)
{
	run_checked(3, mixed_rank);
}

/* the same with rank 1 at RLIMIT_NOFILE full: every region's fd is dropped
 * on its way to it (MSG_CTRUNC), which it keeps as unmappable; the calls
 * copy, as they would anyway, and nothing breaks */
Test(net_stage_window, a_peer_that_cannot_receive_the_fds_goes_on_copying, .timeout = 60)
{
	struct result res[MAXN];
	static int starve = 1;
	run_default_arg(3, mixed_rank, &starve, res);
	check_all(3, res);
}

/* fd in flight on socket sk, without blocking: 0 or -errno. */
static int stuff_one(int sk, int fd)
{
	char byte = 'x';
	struct iovec v = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	return sendmsg(sk, &m, MSG_DONTWAIT) == 1 ? 0 : -errno;
}

/* Put 100 fds of our own in flight on socketpairs never read (while our
 * limits still allow it), then drop CAP_SYS_RESOURCE and CAP_SYS_ADMIN
 * (either lifts the limit) and lower RLIMIT_NOFILE to 64: the user's fds
 * in flight, ours alone past it whatever other processes of the user
 * hold, make the kernel refuse every fd we pass (ETOOMANYREFS). 0, or
 * -errno (-ENOSPC: the kernel did not refuse one). */
static int no_fd_in_flight(void)
{
	int sv[2], held = 0, rc = 0;
	while (held < 100 && rc == 0) { /* the sockets stay open: their fds stay in flight */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			return -errno;
		while (held < 100 && !(rc = stuff_one(sv[0], sv[1])))
			held++;
		rc = rc == -EAGAIN ? 0 : rc;
	}
	if (rc)
		return rc;
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d))
		return -errno;
	const uint32_t drop = (1u << CAP_SYS_RESOURCE) | (1u << CAP_SYS_ADMIN); /* both < 32 */
	d[0].effective &= ~drop;
	d[0].permitted &= ~drop;
	struct rlimit lim;
	if (syscall(SYS_capset, &h, d) || getrlimit(RLIMIT_NOFILE, &lim))
		return -errno;
	lim.rlim_cur = 64;
	if (setrlimit(RLIMIT_NOFILE, &lim))
		return -errno;
	rc = stuff_one(sv[0], sv[1]);
	return rc == -ETOOMANYREFS ? 0 : rc ? rc : -ENOSPC;
}

/* rank 0 can pass no fd (the kernel's limit on fds in flight): each
 * region it passes is refused (ETOOMANYREFS) and goes as WIN_VOID, data alone.
 * The region is then not offered and every call copies; the peers' drains
 * stay aligned (a count of messages: a missing one would stall a drain and
 * break the stage) and nothing is left unread; a new region after a freed
 * one goes the same way */
static void void_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	struct hora_net_shm_regions *regs;
	const size_t count = 5000;
	if (hora_net_shm_regions_create(&regs)) {
		res->rc = -ENOMEM;
		return;
	}
	if (r == 0 && (res->rc = no_fd_in_flight())) {
		snprintf(res->err, sizeof(res->err), "filling the fds in flight: %s", strerror(-res->rc));
		hora_net_shm_regions_destroy(regs);
		return;
	}
	int offered = 0, one;
	for (int k = 0; k < 6 && !res->rc; k++) {
		float *b = region(regs, count * sizeof(float)); /* a fresh one every other call */
		if (!b) {
			res->rc = -ENOMEM;
			break;
		}
		for (int twice = 0; twice < 2 && !res->rc; twice++) {
			copying_call(s, regs, b, count, r, n, k, &one, res);
			offered += r == 0 && one;
		}
		hora_net_shm_region_free(regs, b);
	}
	if (!res->rc && offered && !res->bad++)
		snprintf(res->err, sizeof(res->err), "rank 0 offered a region %d times", offered);
	check_drained(s, r, n, res);
	hora_net_shm_regions_destroy(regs);
}

Test(net_stage_window, a_region_whose_fd_cannot_be_passed_goes_void_and_every_call_copies, .timeout = 60)
{
	run_checked(3, void_rank);
}

/* rank 2 forges its descriptor: an offset past its region's end */
static void forged_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	(void)arg;
	struct hora_net_shm_regions *regs;
	float *b;
	if (hora_net_shm_regions_create(&regs) || !(b = region(regs, 4096))) {
		res->rc = -ENOMEM;
		return;
	}
	uint8_t d[DESC];
	const void *all[MAXN];
	const uint8_t *dp[MAXN];
	res->rc = s->ops->window(s, regs, b, 1000 * sizeof(float), d, res->err, sizeof(res->err));
	if (r == 2)
		memset(d + 8, 0x7f, 8); /* the offset */
	if (!res->rc)
		res->rc = s->ops->gather(s, d, DESC, all, res->err, sizeof(res->err));
	for (int l = 0; l < s->nlocal && !res->rc; l++)
		dp[l] = all[l];
	if (!res->rc)
		res->rc = s->ops->allreduce_windows(s, dp, b, 1000, HORA_NET_F32, HORA_NET_SUM, res->err,
						    sizeof(res->err));
	hora_net_shm_regions_destroy(regs);
}

Test(net_stage_window, a_forged_descriptor_fails_every_rank_naming_the_forger, .timeout = 60)
{
	struct result res[MAXN];
	run_default(3, forged_rank, res);
	for (int r = 0; r < 3; r++) {
		cr_assert_neq(res[r].rc, 0, "rank %d succeeded", r);
		cr_log_info("rank %d: %d: %s", r, res[r].rc, res[r].err);
		if (r != 2) { /* the forger maps nothing of its own: it fails when the others break */
			cr_assert_eq(res[r].rc, -EPROTO, "rank %d: rc %d: %s", r, res[r].rc, res[r].err);
			cr_assert(strstr(res[r].err, "local rank 2") && strstr(res[r].err, "outside its region"),
				  "rank %d: %s", r, res[r].err);
		}
	}
}

/* rank 1 dies by SIGKILL in the middle of its calls; the others call until they fail */
static void killed_rank(struct hora_net_stage *s, int r, int n, void *arg, struct result *res)
{
	(void)n;
	(void)arg;
	const size_t count = (8u << 20) / 4;
	struct hora_net_shm_regions *regs;
	float *buf;
	if (hora_net_shm_regions_create(&regs) || !(buf = region(regs, count * 4))) {
		res->rc = -ENOMEM;
		return;
	}
	pthread_t th;
	if (r == 1)
		pthread_create(&th, NULL, stage_suicide, (void *)(intptr_t)30);
	for (int i = 0; i < 100000; i++) {
		int64_t t0 = hora_clock_ns();
		res->rc = win_call(s, regs, buf, count, HORA_NET_F32, HORA_NET_SUM, res->err, sizeof(res->err));
		if (res->rc) {
			res->fail_ms = (double)(hora_clock_ns() - t0) / 1e6;
			break;
		}
	}
	hora_net_shm_regions_destroy(regs);
}

Test(net_stage_window, a_killed_rank_fails_the_others_naming_it, .timeout = 60)
{
	char *before = th_dev_shm();
	struct result res[MAXN];
	const int n = 4;
	run_default(n, killed_rank, res);
	check_killed(n, res, before);
}
