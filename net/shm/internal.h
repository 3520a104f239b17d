/* internal.h - the layout of a channel's mapping and the endpoint struct
 * (net/shm/ only; README.md draws the layout and argues the orderings).
 *
 * The memfd holds, at offset 0, one page of control (struct shm_hdr, every
 * part written by one side on its own 64-byte cache line), then the ring of
 * direction 0 (ring_bytes), then the ring of direction 1. Each ring is
 * mapped twice back to back, so [p, p + ring_bytes) is contiguous for any p
 * inside the first copy. Positions (head, tail) count bytes since the start
 * and never wrap (2^64 bytes); a position's place is pos % ring_bytes.
 */
#ifndef HORA_NET_SHM_INTERNAL_H
#define HORA_NET_SHM_INTERNAL_H

#include "net/shm/shm.h"

#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define SHM_LINE 64
#define SHM_CTL_BYTES 4096 /* the control page; the rings start after it */

/* One direction, written by two sides: head by the producer, tail by the
 * consumer; a sleeper announces itself in *_sleeps and waits on *_seq. */
struct shm_dir {
	alignas(SHM_LINE) _Atomic uint64_t head; /* bytes published by the producer */
	alignas(SHM_LINE) _Atomic uint64_t tail; /* bytes consumed by the consumer */
	alignas(SHM_LINE) _Atomic uint32_t data_seq; /* futex: the consumer sleeps here */
	_Atomic uint32_t reader_sleeps;              /* 1 while it does (it writes it) */
	alignas(SHM_LINE) _Atomic uint32_t space_seq; /* futex: the producer sleeps here */
	_Atomic uint32_t writer_sleeps;
};

/* What each side says about itself (written by that side only). */
struct shm_side {
	alignas(SHM_LINE) _Atomic int32_t pid; /* 0 until the side is there */
	_Atomic uint32_t closed;                /* 1 after its detach */
	_Atomic uint64_t heartbeat;
};

/* The control page. magic..ring_off are written by the creator before the
 * fd leaves it and never change (the attacher checks them). */
struct shm_hdr {
	uint64_t magic;       /* HORA_NET_SHM_MAGIC, offset 0 */
	uint32_t version;     /* HORA_NET_SHM_VERSION, offset 8 */
	uint32_t ctl_bytes;   /* SHM_CTL_BYTES */
	uint64_t ring_bytes;  /* per direction */
	uint64_t total_bytes; /* the memfd's size: ctl_bytes + 2 * ring_bytes */
	uint64_t ring_off[2]; /* where each direction's ring starts */
	_Atomic uint32_t attached; /* 0 -> 1 by the attacher (a second is refused) */
	struct shm_side side[2];
	struct shm_dir dir[2];
};

_Static_assert(sizeof(struct shm_hdr) <= SHM_CTL_BYTES, "the control page holds the header");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
	       "atomics in a shared mapping must be lock-free (address-free)");

/* One endpoint. Fields marked (tx) belong to the sending thread, (rx) to
 * the receiving one; the rest is set at create/attach and then read-only,
 * or atomic. */
struct hora_net_shm {
	struct shm_hdr *hdr; /* the control page */
	uint8_t *ring[2];    /* each direction's ring, mapped twice */
	size_t ring_bytes;
	int side;   /* 0 creator, 1 attacher: sends on dir[side] */
	int memfd;  /* side 0: the memfd until detach; side 1: -1 */
	int life_fd;
	int spin_us; /* resolved: 0 never polls */
	_Atomic int pidfd; /* the peer's process: -2 not yet tried, -1 none */
	_Atomic int interrupted;
	_Atomic uint64_t sleeps, woken, timeouts; /* struct hora_net_shm_stats */
	uint64_t tx_head, tx_tail_seen; /* (tx) our head, the last tail read */
	uint32_t tx_seq;                /* (tx) frames sent */
	size_t tx_reserved;             /* (tx) a reserve's frame bytes, 0: none */
	uint64_t rx_tail, rx_head_seen; /* (rx) our tail, the last head read */
	uint64_t damaged;               /* a counter the peer stored is impossible: its value + 1 */
	uint32_t rx_seq;                /* (rx) frames received */
	size_t rx_peeked;               /* (rx) a peek's frame bytes, 0: none */
};

/* A frame: this head, the payload, padding to a multiple of 64 bytes; it
 * starts on a 64-byte boundary of the ring. */
struct shm_frame_head {
	uint64_t bytes; /* the payload */
	uint32_t seq;   /* the producer's frame count (from 0) */
	uint32_t check; /* SHM_FRAME_CHECK ^ seq: a desynchronized stream shows */
};
#define SHM_FRAME_CHECK 0x5a17c0deu
_Static_assert(sizeof(struct shm_frame_head) == HORA_NET_SHM_FRAME_HEAD, "frame head");

/* The head of frame number seq with len bytes of payload. */
static inline struct shm_frame_head shm_head(uint32_t seq, uint64_t len)
{
	return (struct shm_frame_head){.bytes = len, .seq = seq, .check = SHM_FRAME_CHECK ^ seq};
}

/* The frame bytes of a payload of len (0 when it would overflow). */
static inline uint64_t shm_frame_bytes(uint64_t len)
{
	if (len > UINT64_MAX - 2 * SHM_LINE)
		return 0;
	return (len + HORA_NET_SHM_FRAME_HEAD + SHM_LINE - 1) & ~(uint64_t)(SHM_LINE - 1);
}

/* err (errlen bytes; may be NULL) gets the formatted cause */
__attribute__((format(printf, 3, 4))) static inline void shm_errf(char *err, size_t errlen,
								    const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

enum shm_wait_kind { SHM_DATA, SHM_SPACE };

/* wait.c: wait until `need` bytes can be read (SHM_DATA) or written
 * (SHM_SPACE): spin, then futex sleep with peer checks. 0, or -ETIMEDOUT,
 * -ECONNRESET/-EPIPE (peer gone; SHM_DATA/SHM_SPACE), -ECANCELED
 * (interrupted), with err set. */
int shm_wait(struct hora_net_shm *c, enum shm_wait_kind kind, uint64_t need, int64_t deadline_ns,
	     char *err, size_t errlen);
/* wait.c: one of several waits at once (an exchange's send and receive) */
struct shm_waiter {
	struct hora_net_shm *c;
	enum shm_wait_kind kind;
	uint64_t need;
};
/* wait.c: wait until any of w[0..n) (n >= 1) is ready, as shm_wait; *which
 * is the waiter that failed. Several waiters sleep in futex_waitv. */
int shm_waitv(struct shm_waiter *w, int n, int64_t deadline_ns, int *which, char *err, size_t errlen);
/* A bell and the seq its waiter last saw: the wait ends when seq moves. */
struct shm_bellw {
	struct hora_net_shm_bell *bell; /* NULL: none */
	uint32_t seen;
};
/* wait.c: shm_waitv with n >= 0 waiters (at most 127 waited on at once; past
 * that the sleep lasts at most 1 ms), an optional bell, and its own spin. */
int shm_waitb(struct shm_waiter *w, int n, const struct shm_bellw *b, int spin_us, int64_t deadline_ns,
	      int *which, char *err, size_t errlen);
/* wait.c: the bytes that can be read (SHM_DATA) or written (SHM_SPACE) now
 * (an acquire load of the peer's counter) */
uint64_t shm_avail(struct hora_net_shm *c, enum shm_wait_kind kind);
/* wait.c: after publishing head (kind SHM_DATA) or tail (SHM_SPACE) on
 * direction d, wake the peer if it sleeps on it. */
void shm_wake(struct hora_net_shm *c, int d, enum shm_wait_kind kind);
/* wait.c: wake both of the peer's possible sleeps unconditionally (detach)
 * or both of ours (interrupt, self = 1). */
void shm_wake_all(struct hora_net_shm *c, int self);
/* wait.c: -EPIPE with err when the peer has detached (a send's check
 * before it writes anything), else 0 */
int shm_peer_closed(struct hora_net_shm *c, char *err, size_t errlen);
/* wait.c: our side's heartbeat, +1 */
void shm_beat(struct hora_net_shm *c);

/* ring.c: publish n bytes more of our direction (tx_head += n), and consume
 * n bytes of the peer's (rx_tail += n); both wake a sleeping peer. */
void shm_publish(struct hora_net_shm *c, uint64_t n);
void shm_consume(struct hora_net_shm *c, uint64_t n);
/* ring.c: wait for the next frame's head (its first 64 bytes are always
 * published together) and check it: -EPROTO when its seq or check is not
 * the one expected (a desynchronized or damaged stream). */
int shm_next_head(struct hora_net_shm *c, struct shm_frame_head *h, int64_t deadline_ns, char *err,
		  size_t errlen);

#endif
