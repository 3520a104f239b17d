/* stage_shm_internal.h - the shared-memory stage's arena layout and state
 * (net/coll/stage_*.c only; README.md "The shared-memory stage" draws the
 * layout and argues the orderings).
 *
 * One sealed memfd per host: a control area (the header, one futex line,
 * one 64-byte line per local rank), then per local rank two slots of
 * slot_bytes (double buffering: step g uses slot g % 2). A slot holds
 * nlocal pieces of piece_bytes; in a step, piece l of rank r's slot is
 * r's contribution to the part local rank l reduces, piece r (r's own
 * position) the part r reduced, for the others to copy out.
 */
#ifndef HORA_NET_COLL_STAGE_SHM_INTERNAL_H
#define HORA_NET_COLL_STAGE_SHM_INTERNAL_H

#include "net/coll/stage_shm.h"

#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define STAGE_LINE 64
#define STAGE_MAGIC 0x4547415453524f48ull /* "HORSTAGE" */
#define STAGE_VERSION 4u /* 3: the out pieces hold AVG's quotient; each rank's CPU mask; 4: win_sent */
#define STAGE_MAX_LOCAL STAGE_SHM_MAX_LOCAL
#define STAGE_SLOT_DEFAULT (256u << 10) /* bytes per rank and buffer (README: measured) */
#define STAGE_SLOT_MAX (1ull << 30)
#define STAGE_POLL_MS 100 /* a waiter looks at its peers this often */
#define STAGE_CPU_WORDS 16 /* CPUs 0..1023 of each rank's affinity mask */
#define STAGE_WIN_MAX 16 /* regions a rank offers a stage; a peer maps as many of each (stage_window.c) */

/* The first line: written by local rank 0 before the fd leaves it, then
 * read-only (the attachers check it). */
struct stage_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nlocal;
	uint64_t slot_bytes;
	uint64_t ctl_bytes;   /* the control area: header, futex line, rank lines */
	uint64_t total_bytes; /* ctl_bytes + nlocal * 2 * slot_bytes */
};

/* The futex line: sleepers announce themselves, wakers bump seq. */
struct stage_wake {
	alignas(STAGE_LINE) _Atomic uint32_t seq;
	_Atomic uint32_t sleepers;
};

/* One local rank's lines (written by that rank only): the step, written
 * at every step, alone on its line; the rest, written once in a while, on
 * the next, so that the peers' reads of it (every call: broke_at) hit
 * their own cache instead of fetching the line the step just changed. */
struct stage_rank {
	alignas(STAGE_LINE) _Atomic uint64_t step; /* steps published (monotonic, never reset) */
	alignas(STAGE_LINE) _Atomic uint32_t left; /* 1 after its destroy */
	_Atomic int32_t pid;                       /* for diagnostics */
	_Atomic int32_t lost; /* 1 + the local rank whose death broke this one, 0: none */
	/* single copy: messages sent to every peer's socket so far (stored
	 * before the call's gather), so that a peer reads them after it in
	 * every allreduce through the stage, single-copy or copying (stage_window.c) */
	_Atomic uint64_t win_sent;
	/* the first step it did not finish, once it broke (0: it did not): a
	 * rank that finds everyone at that step must not succeed where this
	 * one failed */
	_Atomic uint64_t broke_at;
	/* the CPUs it may run on (bit c % 64 of word c / 64; all 0: unknown),
	 * written at create, before its first step: whether the host's ranks
	 * share CPUs (stage_shm.c: spin or sleep at once) */
	alignas(STAGE_LINE) uint64_t cpus[STAGE_CPU_WORDS];
};

struct stage_ctl {
	alignas(STAGE_LINE) struct stage_hdr hdr;
	struct stage_wake wake;
	struct stage_rank rank[]; /* nlocal */
};

_Static_assert(sizeof(struct stage_rank) == 4 * STAGE_LINE, "four lines per rank");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
	       "atomics in a shared mapping must be lock-free (address-free)");

/* a peer's region mapped here */
struct stage_peer_region {
	uint32_t id;
	size_t bytes;
	uint8_t *base;
};

struct stage_shm {
	struct hora_net_stage pub; /* first: the stage's ops see this */
	struct stage_ctl *ctl;
	uint8_t *map;      /* the whole arena (total_bytes) */
	size_t map_bytes;
	size_t slot_bytes;
	size_t ctl_bytes;  /* where the slots start: this rank's own count, never read back from the
			    * arena (a peer's stray write there would move every slot) */
	uint64_t step;     /* steps this rank published (== ctl->rank[lrank].step) */
	int spin_us, timeout_ms;
	int spin_cfg;      /* the spin asked for; spin_us follows the ranks' CPUs once known */
	int spin_known;    /* the ranks' CPU masks were read (after the first op) */
	int *pidfds;       /* nlocal: each peer's process (-1: none) */
	int *socks;        /* a copy of cfg->socks (lifelines; the fds are not ours to close) */
	pid_t *pids;       /* nlocal (copied) */
	_Atomic int interrupted;
	int broken;        /* an op failed: every later one fails with it */
	int waiting;       /* published st->step, not yet past it */
	/* single-copy (stage_window.c), the ops' thread: the regions we passed
	 * to every peer, and the peers' we mapped (nlocal x STAGE_WIN_MAX) */
	uint32_t offered[STAGE_WIN_MAX];
	uint8_t offered_ok[STAGE_WIN_MAX]; /* 0: its passing failed, never used */
	int noffered;
	uint64_t win_sent;  /* messages we sent every peer (== ctl->rank[lrank].win_sent) */
	uint64_t *win_read; /* nlocal: messages read from each peer's socket */
	struct stage_peer_region *preg;
	int *npreg;
	char broken_err[256];
};

static inline struct stage_shm *stage_of(struct hora_net_stage *s)
{
	return (struct stage_shm *)s;
}

/* Slot b (0, 1) of local rank l. */
static inline uint8_t *stage_slot(const struct stage_shm *st, int l, unsigned b)
{
	return st->map + st->ctl_bytes + ((size_t)l * 2 + b) * st->slot_bytes;
}

__attribute__((format(printf, 3, 4))) static inline void stage_errf(char *err, size_t errlen,
								      const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* stage_wait.c: publish step st->step + 1 (release: our slot writes before
 * it are seen by whoever sees the step), waking sleepers. */
void stage_publish(struct stage_shm *st);
/* stage_wait.c: wait until every local rank published at least st->step:
 * bounded spin (yielding), then futex sleeps that look at the peers every
 * STAGE_POLL_MS. 0, or -ECONNRESET (a peer died or left), -ETIMEDOUT (no
 * progress for timeout_ms), -ECANCELED (interrupted), with err naming it. */
int stage_wait_all(struct stage_shm *st, char *err, size_t errlen);
/* stage_wait.c: after the step st->step completed here: -ECONNRESET when a
 * peer broke at or before it (it failed the call we would finish) */
int stage_broke_peers(struct stage_shm *st, char *err, size_t errlen);
/* stage_wait.c: the futex wake of every sleeper (interrupt, destroy) */
void stage_wake_all(struct stage_shm *st);

/* stage_arena.c: leave (peers blocked on us fail) and free */
void stage_shm_destroy(struct hora_net_stage *s);

/* stage_shm.c: after an error the stage is unusable and we leave (peers
 * waiting for us fail now); rc returned, err from broken_err */
int stage_shm_breaks(struct stage_shm *st, int rc, char *err, size_t errlen);
/* stage_shm.c: before an op: a broken stage stays broken, an interrupted one breaks */
int stage_shm_begin(struct stage_shm *st, char *err, size_t errlen);
/* stage_small.c: the small gather (stage.h), and its largest message */
int stage_shm_gather(struct hora_net_stage *s, const void *msg, size_t bytes, const void **all, char *err,
		     size_t errlen);
size_t stage_shm_small_max(const struct stage_shm *st);

#if defined(__x86_64__) || defined(__i386__)
#define STAGE_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define STAGE_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define STAGE_RELAX() atomic_signal_fence(memory_order_seq_cst)
#endif

/* stage_shm.c: publish our next step and wait for everyone's (a failure breaks the stage) */
int stage_publish_wait(struct stage_shm *st, char *err, size_t errlen);
/* stage_shm.c: out = src[0] op ... op src[n-1] over m elements, in blocks
 * that stay in L1; div > 1: divided by div; copy (optional) gets out too */
void stage_fold(uint8_t *out, uint8_t *copy, const uint8_t *const *src, int n, size_t m, size_t es,
		enum hora_net_dtype t, enum hora_net_op op, int div);
#define STAGE_FOLD_BLOCK_BYTES (8u << 10)

/* stage_window.c: the single-copy ops (stage.h window, allreduce_windows),
 * and freeing what they mapped (destroy) */
int stage_shm_window(struct hora_net_stage *s, struct hora_net_shm_regions *regs, const void *buf, size_t bytes,
		     uint8_t *desc, char *err, size_t errlen);
int stage_shm_allreduce_windows(struct hora_net_stage *s, const uint8_t *const *desc, void *buf, size_t count,
				enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen);
void stage_windows_free(struct stage_shm *st);
/* Read every message the peers sent on their sockets so far (their
 * win_sent): regions mapped (or kept as unmappable), freed ones unmapped.
 * Every allreduce through the stage does, single-copy or copying, after
 * the call's gather (only such calls send them), so no peer's messages
 * pile up unread (each carries an fd). 0, or < 0: the stage broke. */
int stage_windows_drain(struct stage_shm *st, char *err, size_t errlen);

/* stage_shm.c: the ops */
extern const struct hora_net_stage_ops stage_shm_ops;

#endif
