/* stage_wait.c - the shared-memory stage's barrier: publishing a step and
 * waiting until every local rank has published it (a bounded spin that
 * yields the CPU, then a futex sleep on the arena's shared word that
 * wakes at least every STAGE_POLL_MS to see whether the peers are still
 * there). Not the data movement (stage_shm.c) nor the mapping
 * (stage_arena.c).
 *
 * Sleep and wake (the store-buffering pattern, as net/shm/wait.c):
 *   sleeper: s = seq; sleepers += 1; fence; look at the steps; futex_wait(seq, s)
 *   waker:   store our step (release); fence; if (sleepers) { seq++; futex_wake(all) }
 * By the two seq_cst fences either the sleeper sees the new step or the
 * waker sees the sleeper, and then its bump makes a futex_wait not yet
 * begun return at once. One word for all ranks: a wake wakes every
 * sleeper, each looks at its own condition and sleeps again if unmet.
 */
#include "net/coll/stage_shm_internal.h"
#include "net/util/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CPU_RELAX() STAGE_RELAX()

/* polls between clock checks and sched_yield while spinning (~1 us) */
#define SPIN_CHECK_EVERY 64

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	/* not FUTEX_PRIVATE_FLAG: the word is shared between processes */
	return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

static int behind(struct stage_shm *st, uint64_t *sum);

/* Only the last rank to arrive wakes the sleepers: before, none of them
 * can go on (each waits for everyone), and a wake would only cost them a
 * context switch each (4 ranks on 2 cores). Of ranks publishing at once
 * the one whose fence is last sees every step, so one of them wakes. */
void stage_publish(struct stage_shm *st)
{
	struct stage_ctl *c = st->ctl;
	st->step++;
	atomic_store_explicit(&c->rank[st->pub.lrank].step, st->step, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	/* sleepers first: in the common case nobody sleeps and we read no
	 * peer's counter line (each such read is a transfer between cores) */
	if (atomic_load_explicit(&c->wake.sleepers, memory_order_seq_cst) && behind(st, NULL) < 0) {
		atomic_fetch_add_explicit(&c->wake.seq, 1, memory_order_seq_cst);
		futex(&c->wake.seq, FUTEX_WAKE, INT_MAX, NULL);
	}
}

void stage_wake_all(struct stage_shm *st)
{
	atomic_fetch_add_explicit(&st->ctl->wake.seq, 1, memory_order_seq_cst);
	futex(&st->ctl->wake.seq, FUTEX_WAKE, INT_MAX, NULL);
}

/* The first local rank that has not published st->step, or -1: all have.
 * The acquire loads pair with their release stores: what they wrote in
 * their slots before is ours to read, what they read is ours to overwrite. */
static int behind(struct stage_shm *st, uint64_t *sum)
{
	int first = -1;
	uint64_t s = 0;
	for (int l = 0; l < st->pub.nlocal; l++) {
		uint64_t v = atomic_load_explicit(&st->ctl->rank[l].step, memory_order_acquire);
		s += v;
		if (v < st->step && first < 0)
			first = l;
	}
	if (sum)
		*sum = s;
	return first;
}

/* The rank to blame for l's going: l, or the one whose death broke l
 * (it recorded it before it left or died), followed to its origin. */
static int culprit(struct stage_shm *st, int l)
{
	for (int hops = 0; hops < st->pub.nlocal; hops++) {
		int32_t m = atomic_load_explicit(&st->ctl->rank[l].lost, memory_order_seq_cst) - 1;
		if (m < 0 || m >= st->pub.nlocal || m == st->pub.lrank || m == l)
			break;
		l = m;
	}
	return l;
}

/* -ECONNRESET naming the rank to blame for peer l's going (how: "died", "left the stage", ...),
 * and recorded in our line for the others. */
static int gone(struct stage_shm *st, int l, const char *how, char *err, size_t errlen)
{
	const int c = culprit(st, l);
	if (c != l)
		stage_errf(err, errlen, "stage shm: local rank %d (pid %d) is gone (local rank %d, pid %d, failed on it)",
			   c, (int)st->pids[c], l, (int)st->pids[l]);
	else
		stage_errf(err, errlen, "stage shm: local rank %d (pid %d) %s", l, (int)st->pids[l], how);
	atomic_store_explicit(&st->ctl->rank[st->pub.lrank].lost, c + 1, memory_order_seq_cst);
	st->pub.culprit = c;
	return -ECONNRESET;
}

/* Cheap: interrupted, or a peer that left (its destroy). */
static int ended(struct stage_shm *st, char *err, size_t errlen)
{
	if (atomic_load_explicit(&st->interrupted, memory_order_seq_cst)) {
		stage_errf(err, errlen, "stage shm: interrupted");
		return -ECANCELED;
	}
	for (int l = 0; l < st->pub.nlocal; l++)
		if (l != st->pub.lrank && atomic_load_explicit(&st->ctl->rank[l].left, memory_order_seq_cst))
			return err ? gone(st, l, "left the stage", err, errlen) : -ECONNRESET;
	return 0;
}

/* A poll each: the peer's pidfd (readable once its process exited) and its
 * lifeline socket (hung up when its last holder, the peer, is gone). */
static int peers_gone(struct stage_shm *st, char *err, size_t errlen)
{
	for (int l = 0; l < st->pub.nlocal; l++) {
		if (l == st->pub.lrank)
			continue;
		if (st->pidfds[l] >= 0) {
			struct pollfd p = {.fd = st->pidfds[l], .events = POLLIN};
			if (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
				return gone(st, l, "died", err, errlen);
		}
		if (st->socks && st->socks[l] >= 0) {
			struct pollfd p = {.fd = st->socks[l], .events = POLLRDHUP};
			if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
				return gone(st, l, "hung up its socket: its process is gone", err, errlen);
		}
	}
	return 0;
}

/* Poll for spin_us, looking at the clock every SPIN_CHECK_EVERY polls. 1
 * when all are there. No sched_yield: the stage spins only with no more
 * local ranks than CPUs (stage_arena.c), and two unbound ranks that yield
 * to each other on one CPU were seen to stay there for a whole run (an
 * 8-byte call 8 us instead of 0.6: the load balancer saw no busy CPU to
 * spread), where plain spinners get moved apart. */
static int spin(struct stage_shm *st)
{
	const int64_t end = hora_clock_ns() + (int64_t)st->spin_us * 1000;
	for (unsigned i = 1;; i++) {
		if (behind(st, NULL) < 0)
			return 1;
		CPU_RELAX();
		if (i % SPIN_CHECK_EVERY == 0 && (hora_clock_ns() >= end || ended(st, NULL, 0)))
			return 0;
	}
}

static void sleep_once(struct stage_shm *st, int64_t left_ns)
{
	struct stage_wake *w = &st->ctl->wake;
	uint32_t s = atomic_load_explicit(&w->seq, memory_order_seq_cst);
	atomic_fetch_add_explicit(&w->sleepers, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	if (behind(st, NULL) >= 0 && !ended(st, NULL, 0)) {
		struct timespec ts = {.tv_sec = left_ns / 1000000000, .tv_nsec = left_ns % 1000000000};
		futex(&w->seq, FUTEX_WAIT, s, &ts); /* woken, bumped (EAGAIN), EINTR, timeout: look again */
	}
	atomic_fetch_sub_explicit(&w->sleepers, 1, memory_order_seq_cst);
}

int stage_wait_all(struct stage_shm *st, char *err, size_t errlen)
{
	int rc;
	if (atomic_load_explicit(&st->interrupted, memory_order_seq_cst)) {
		stage_errf(err, errlen, "stage shm: interrupted");
		return -ECANCELED;
	}
	if (behind(st, NULL) < 0 || (st->spin_us > 0 && spin(st)))
		return 0;
	const int64_t poll_ns = (int64_t)STAGE_POLL_MS * 1000000;
	const int64_t timeout_ns = (int64_t)st->timeout_ms * 1000000;
	int64_t now = hora_clock_ns(), checked = now, progress = now;
	uint64_t seen;
	behind(st, &seen);
	for (;;) {
		uint64_t sum;
		int l = behind(st, &sum);
		if (l < 0)
			return 0;
		if ((rc = ended(st, err, errlen)))
			return rc;
		now = hora_clock_ns();
		if (sum != seen) { /* someone moved: the timeout counts from here */
			seen = sum;
			progress = now;
		}
		if (now - checked >= poll_ns) {
			if ((rc = peers_gone(st, err, errlen)))
				return rc;
			checked = now;
		}
		if (timeout_ns > 0 && now - progress >= timeout_ns) {
			stage_errf(err, errlen,
				   "stage shm: no progress for %d ms waiting for local rank %d (pid %d) at step %llu",
				   st->timeout_ms, l, (int)st->pids[l], (unsigned long long)st->step);
			/* recorded as a death is: a third rank that finds us gone
			 * names l, the one that did not come, not us */
			atomic_store_explicit(&st->ctl->rank[st->pub.lrank].lost, l + 1, memory_order_seq_cst);
			st->pub.culprit = l;
			return -ETIMEDOUT;
		}
		int64_t left = poll_ns - (now - checked);
		if (timeout_ns > 0 && progress + timeout_ns - now < left)
			left = progress + timeout_ns - now;
		sleep_once(st, left > 0 ? left : 1);
	}
}

int stage_broke_peers(struct stage_shm *st, char *err, size_t errlen)
{
	for (int l = 0; l < st->pub.nlocal; l++) {
		const uint64_t b = atomic_load_explicit(&st->ctl->rank[l].broke_at, memory_order_seq_cst);
		if (l != st->pub.lrank && b && b <= st->step)
			return gone(st, l, "failed in this call", err, errlen);
	}
	return 0;
}
