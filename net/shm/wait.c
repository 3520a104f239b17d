/* wait.c - waiting on a channel's rings: a bounded spin, then a futex sleep
 * in the mapping that wakes at least every HORA_NET_SHM_POLL_MS to see
 * whether the peer is still there; and the wake-ups that pair with it.
 * Not the rings' bytes (ring.c, chan.c).
 *
 * The sleep/wake handshake (README.md "Memory ordering" has the argument):
 *   sleeper: s = seq; sleeps = 1; fence; check the ring; futex_wait(seq, s)
 *   waker:   publish head/tail; fence; if (sleeps) { seq++; futex_wake }
 * The two seq_cst fences make at least one side see the other's store: the
 * sleeper sees the new bytes, or the waker sees it asleep and bumps seq,
 * which makes a futex_wait that has not begun return at once. Detach and
 * interrupt set their flag, then bump and wake without looking.
 */
#include "net/shm/internal.h"
#include "net/util/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() atomic_signal_fence(memory_order_seq_cst)
#endif

/* polls between clock checks (and sched_yield) while spinning: ~1 us */
#define SPIN_CHECK_EVERY 64
/* c->pidfd: the peer's process could not be found at all (it is gone) */
#define PIDFD_GONE (-3)

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	/* not FUTEX_PRIVATE_FLAG: the word is shared between processes */
	return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* Bytes that can be read (SHM_DATA) or written (SHM_SPACE) now. The acquire
 * load pairs with the other side's release store: the bytes it published
 * (or stopped reading) are ours to read (or overwrite). */
uint64_t shm_avail(struct hora_net_shm *c, enum shm_wait_kind kind)
{
	/* the peer's counter is checked before it is kept: a head more than a
	 * ring ahead of our tail, or a tail past our head, would make the next
	 * step copy past the ring's mapping (a peer's stray write, a bug):
	 * nothing is there then, and the wait fails naming it (stopped) */
	if (kind == SHM_DATA) {
		const uint64_t h = atomic_load_explicit(&c->hdr->dir[1 - c->side].head, memory_order_acquire);
		if (h - c->rx_tail > c->ring_bytes) {
			c->damaged = h + 1;
			return c->rx_head_seen - c->rx_tail;
		}
		c->rx_head_seen = h;
		return c->rx_head_seen - c->rx_tail;
	}
	const uint64_t t = atomic_load_explicit(&c->hdr->dir[c->side].tail, memory_order_acquire);
	if (c->tx_head - t > c->ring_bytes) {
		c->damaged = t + 1;
		return c->ring_bytes - (c->tx_head - c->tx_tail_seen);
	}
	c->tx_tail_seen = t;
	return c->ring_bytes - (c->tx_head - c->tx_tail_seen);
}

/* 1 when the peer's process is known to be gone (pidfd readable, or no
 * such process when first looked up). Threads of one process share their
 * fate: no pidfd then. The pid must be of our pid namespace (README.md). */
static int process_gone(struct hora_net_shm *c, int32_t pid)
{
	int fd = atomic_load(&c->pidfd);
	if (fd == -2 && pid > 0) {
		int nfd = -1;
		if (pid != (int32_t)getpid()) {
#ifdef SYS_pidfd_open
			nfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
			if (nfd < 0 && errno == ESRCH)
				nfd = PIDFD_GONE;
#endif
		}
		int expect = -2;
		if (atomic_compare_exchange_strong(&c->pidfd, &expect, nfd))
			fd = nfd;
		else {
			if (nfd >= 0)
				close(nfd);
			fd = expect;
		}
	}
	if (fd == PIDFD_GONE)
		return 1;
	if (fd < 0)
		return 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

/* 0 while the peer is there, else -ECONNRESET (a receive) or -EPIPE (a
 * send) with err saying how it went. Cheap first (its closed flag), then
 * the lifeline socket and the pidfd (a poll each). */
static int peer_gone(struct hora_net_shm *c, enum shm_wait_kind kind, int cheap, char *err,
		     size_t errlen)
{
	const struct shm_side *ps = &c->hdr->side[1 - c->side];
	const int rc = kind == SHM_DATA ? -ECONNRESET : -EPIPE;
	const char *op = kind == SHM_DATA ? "receive" : "send";
	const int32_t pid = atomic_load_explicit(&ps->pid, memory_order_acquire);
	if (atomic_load_explicit(&ps->closed, memory_order_seq_cst)) {
		shm_errf(err, errlen, "shm: %s: the peer (side %d, pid %d) closed the channel", op,
			 1 - c->side, (int)pid);
		return rc;
	}
	if (cheap)
		return 0;
	if (c->life_fd >= 0) {
		struct pollfd p = {.fd = c->life_fd, .events = POLLRDHUP};
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
			shm_errf(err, errlen,
				 "shm: %s: the peer's socket hung up: its process (pid %d) is gone", op,
				 (int)pid);
			return rc;
		}
	}
	if (process_gone(c, pid)) {
		shm_errf(err, errlen, "shm: %s: the peer's process (pid %d) died", op, (int)pid);
		return rc;
	}
	return 0;
}

int shm_peer_closed(struct hora_net_shm *c, char *err, size_t errlen)
{
	return peer_gone(c, SHM_SPACE, 1, err, errlen);
}

static int stopped(struct hora_net_shm *c, char *err, size_t errlen)
{
	if (c->damaged) {
		shm_errf(err, errlen, "shm: the peer (pid %d) stored %llu as a ring counter, impossible against "
				      "ours (head %llu, tail %llu, ring %zu bytes): its mapping is damaged",
			 (int)atomic_load(&c->hdr->side[1 - c->side].pid), (unsigned long long)(c->damaged - 1),
			 (unsigned long long)c->tx_head, (unsigned long long)c->rx_tail, c->ring_bytes);
		return -EPROTO;
	}
	if (!atomic_load_explicit(&c->interrupted, memory_order_seq_cst))
		return 0;
	shm_errf(err, errlen, "shm: interrupted");
	return -ECANCELED;
}

/* The futex word a waiter sleeps on and its "I sleep" flag. */
static void words(const struct shm_waiter *w, _Atomic uint32_t **seq, _Atomic uint32_t **sleeps)
{
	struct hora_net_shm *c = w->c;
	struct shm_dir *d = &c->hdr->dir[w->kind == SHM_DATA ? 1 - c->side : c->side];
	*seq = w->kind == SHM_DATA ? &d->data_seq : &d->space_seq;
	*sleeps = w->kind == SHM_DATA ? &d->reader_sleeps : &d->writer_sleeps;
}

/* 1 when any waiter's need is there, or the bell rang (its seq moved) */
static int ready(struct shm_waiter *w, int n, const struct shm_bellw *b)
{
	if (b && b->bell && atomic_load_explicit(&b->bell->seq, memory_order_seq_cst) != b->seen)
		return 1;
	for (int i = 0; i < n; i++)
		if (shm_avail(w[i].c, w[i].kind) >= w[i].need)
			return 1;
	return 0;
}

/* 1 when a waiter's endpoint was interrupted or its peer closed */
static int ended(const struct shm_waiter *w, int n)
{
	for (int i = 0; i < n; i++)
		if (atomic_load(&w[i].c->interrupted) || atomic_load(&w[i].c->hdr->side[1 - w[i].c->side].closed))
			return 1;
	return 0;
}

/* Poll for up to spin_us (never past the deadline), yielding the CPU every
 * SPIN_CHECK_EVERY polls. 1 when a need is there (or the bell rang). */
static int spin(struct shm_waiter *w, int n, const struct shm_bellw *b, int spin_us, int64_t deadline_ns)
{
	int64_t end = hora_clock_ns() + (int64_t)spin_us * 1000;
	if (end > deadline_ns)
		end = deadline_ns;
	for (unsigned i = 1;; i++) {
		if (ready(w, n, b))
			return 1;
		CPU_RELAX();
		if (i % SPIN_CHECK_EVERY == 0) {
			if (hora_clock_ns() >= end || ended(w, n))
				return 0;
			sched_yield(); /* a co-located rank may need this CPU to make progress */
		}
	}
}

/* futex_waitv takes at most this many words (the kernel's FUTEX_WAITV_MAX) */
#define WAITV_MAX 128

/* Sleep on the waiters' words (announced, s their values) and the bell's,
 * until woken, for at most left_ns; counted in the first endpoint's stats
 * (none with no endpoint). More words than futex_waitv takes, or a kernel
 * without it (before 5.16): the first word alone, 1 ms at a time. */
static void sleep_on(struct shm_waiter *w, int n, const uint32_t *s, const struct shm_bellw *b,
		     int64_t left_ns)
{
	struct hora_net_shm *c = n ? w[0].c : NULL;
	_Atomic uint32_t *seq[WAITV_MAX], *sl;
	uint32_t val[WAITV_MAX];
	int k = 0;
	long r;
	if (b && b->bell) {
		seq[k] = &b->bell->seq;
		val[k++] = b->seen;
	}
	for (int i = 0; i < n && k < WAITV_MAX; i++, k++) {
		words(&w[i], &seq[k], &sl);
		val[k] = s[i];
	}
	if (!k) { /* nothing to wait on: just the time */
		struct timespec ts = {.tv_sec = left_ns / 1000000000, .tv_nsec = left_ns % 1000000000};
		nanosleep(&ts, NULL);
		return;
	}
	if (c)
		atomic_fetch_add_explicit(&c->sleeps, 1, memory_order_relaxed);
	if (k == 1 || k < n + (b && b->bell)) {
		int64_t cap = k == 1 ? left_ns : left_ns < 1000000 ? left_ns : 1000000;
		struct timespec ts = {.tv_sec = cap / 1000000000, .tv_nsec = cap % 1000000000};
		r = futex(seq[0], FUTEX_WAIT, val[0], &ts);
	} else {
		struct futex_waitv v[WAITV_MAX];
		memset(v, 0, sizeof(v[0]) * (size_t)k);
		for (int i = 0; i < k; i++)
			v[i] = (struct futex_waitv){.val = val[i], .uaddr = (uintptr_t)seq[i], .flags = FUTEX_32};
		int64_t at = hora_clock_ns() + left_ns;
		struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
		r = syscall(SYS_futex_waitv, v, (unsigned)k, 0u, &ts, CLOCK_MONOTONIC);
		if (r < 0 && errno == ENOSYS) { /* before Linux 5.16: the first word, 1 ms at a time */
			ts = (struct timespec){.tv_sec = 0, .tv_nsec = left_ns < 1000000 ? left_ns : 1000000};
			r = futex(seq[0], FUTEX_WAIT, val[0], &ts);
		}
	}
	if (!c)
		return;
	/* >= 0 (woken), EAGAIN (bumped before we slept), EINTR, ETIMEDOUT: look again */
	if (r >= 0 || errno == EAGAIN)
		atomic_fetch_add_explicit(&c->woken, 1, memory_order_relaxed);
	else if (errno == ETIMEDOUT)
		atomic_fetch_add_explicit(&c->timeouts, 1, memory_order_relaxed);
}

int shm_waitv(struct shm_waiter *w, int n, int64_t deadline_ns, int *which, char *err, size_t errlen)
{
	return shm_waitb(w, n, NULL, w[0].c->spin_us, deadline_ns, which, err, errlen);
}

int shm_waitb(struct shm_waiter *w, int n, const struct shm_bellw *b, int spin_us, int64_t deadline_ns,
	      int *which, char *err, size_t errlen)
{
	uint32_t s[WAITV_MAX];
	_Atomic uint32_t *seq, *sleeps;
	int rc;
	*which = 0;
	if (n > WAITV_MAX)
		n = WAITV_MAX; /* the caller drives the rest: it gets back within 1 ms (sleep_on) */
	for (int i = 0; i < n; i++)
		if (w[i].need > w[i].c->ring_bytes) {
			*which = i;
			shm_errf(err, errlen, "shm: waiting for %llu bytes, more than the ring's %zu",
				 (unsigned long long)w[i].need, w[i].c->ring_bytes);
			return -EMSGSIZE;
		}
	if (ready(w, n, b) || (spin_us > 0 && spin(w, n, b, spin_us, deadline_ns)))
		return 0;
	for (;;) {
		/* what was sent before the peer left is still delivered: avail first */
		for (int i = 0; i < n; i++)
			if ((rc = stopped(w[i].c, err, errlen)) || (rc = peer_gone(w[i].c, w[i].kind, 0, err, errlen))) {
				*which = i;
				return shm_avail(w[i].c, w[i].kind) >= w[i].need && rc != -ECANCELED ? 0 : rc;
			}
		int64_t now = hora_clock_ns();
		if (now >= deadline_ns) {
			*which = n - 1;
			shm_errf(err, errlen, "shm: %s timed out waiting for %llu bytes from the peer (pid %d)",
				 n > 1 ? "exchange" : !n ? "wait" : w[0].kind == SHM_DATA ? "receive" : "send",
				 n ? (unsigned long long)w[n - 1].need : 0ull,
				 n ? (int)atomic_load(&w[n - 1].c->hdr->side[1 - w[n - 1].c->side].pid) : 0);
			return -ETIMEDOUT;
		}
		if (b && b->bell)
			atomic_store_explicit(&b->bell->sleeps, 1, memory_order_seq_cst);
		for (int i = 0; i < n; i++) {
			words(&w[i], &seq, &sleeps);
			s[i] = atomic_load_explicit(seq, memory_order_seq_cst);
			atomic_store_explicit(sleeps, 1, memory_order_seq_cst);
		}
		atomic_thread_fence(memory_order_seq_cst);
		if (!ready(w, n, b) && !ended(w, n)) {
			/* no peer to check: only the bell or the deadline ends it */
			int64_t left = deadline_ns - now,
				cap = n ? (int64_t)HORA_NET_SHM_POLL_MS * 1000000 : (int64_t)3600 * 1000000000;
			sleep_on(w, n, s, b, left < cap ? left : cap);
		}
		if (b && b->bell)
			atomic_store_explicit(&b->bell->sleeps, 0, memory_order_relaxed);
		for (int i = 0; i < n; i++) {
			words(&w[i], &seq, &sleeps);
			atomic_store_explicit(sleeps, 0, memory_order_relaxed);
			shm_beat(w[i].c);
		}
		if (ready(w, n, b))
			return 0;
	}
}

int shm_wait(struct hora_net_shm *c, enum shm_wait_kind kind, uint64_t need, int64_t deadline_ns,
	     char *err, size_t errlen)
{
	struct shm_waiter w = {.c = c, .kind = kind, .need = need};
	int which;
	return shm_waitv(&w, 1, deadline_ns, &which, err, errlen);
}

void shm_wake(struct hora_net_shm *c, int d, enum shm_wait_kind kind)
{
	struct shm_dir *sd = &c->hdr->dir[d];
	_Atomic uint32_t *seq = kind == SHM_DATA ? &sd->data_seq : &sd->space_seq;
	_Atomic uint32_t *sleeps = kind == SHM_DATA ? &sd->reader_sleeps : &sd->writer_sleeps;
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(sleeps, memory_order_seq_cst)) {
		atomic_fetch_add_explicit(seq, 1, memory_order_seq_cst);
		futex(seq, FUTEX_WAKE, 1, NULL);
	}
}

void shm_wake_all(struct hora_net_shm *c, int self)
{
	/* a reader of direction d sleeps on its data_seq, a writer on space_seq */
	_Atomic uint32_t *w[2] = {&c->hdr->dir[self ? 1 - c->side : c->side].data_seq,
				  &c->hdr->dir[self ? c->side : 1 - c->side].space_seq};
	for (int i = 0; i < 2; i++) {
		atomic_fetch_add_explicit(w[i], 1, memory_order_seq_cst);
		futex(w[i], FUTEX_WAKE, INT_MAX, NULL);
	}
}

void shm_beat(struct hora_net_shm *c)
{
	atomic_fetch_add_explicit(&c->hdr->side[c->side].heartbeat, 1, memory_order_relaxed);
}

void hora_net_shm_bell_ring(struct hora_net_shm_bell *b)
{
	atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&b->sleeps, memory_order_seq_cst))
		futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
}

uint32_t hora_net_shm_bell_seq(struct hora_net_shm_bell *b)
{
	return atomic_load_explicit(&b->seq, memory_order_seq_cst);
}

void hora_net_shm_interrupt(struct hora_net_shm *c)
{
	atomic_store_explicit(&c->interrupted, 1, memory_order_seq_cst);
	shm_wake_all(c, 1);
}
