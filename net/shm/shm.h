/* shm.h - a shared-memory channel between two processes (or threads) of one
 * host (net/ only; issue 15's foundation, not yet a link).
 *
 * One channel joins two endpoints, side 0 (the creator) and side 1 (the
 * attacher). It is one memfd mapping holding a header and, per direction, a
 * single-producer single-consumer byte ring of framed messages: side s sends
 * on direction s and receives on direction 1-s. Messages are whole: the n-th
 * send is the peer's n-th receive (or peek), of exactly its length.
 *
 * - The memfd has no name (nothing in /dev/shm, whatever way the processes
 *   end, kill -9 included): the peer reaches it only through the fd, passed
 *   over a Unix socket with SCM_RIGHTS (hora_net_shm_fd_send/_recv). Its
 *   size is sealed, so neither side can shrink it under the other.
 * - A message of any length streams through the ring; one that fits the ring
 *   whole (frame <= ring_bytes) can also be written in place (reserve,
 *   commit) and read in place (peek, release): the single-copy form for a
 *   reduction that reads the peer's bytes directly. With the ring mapped
 *   twice back to back, every such message is contiguous in memory.
 * - A side that finds nothing to read (or no room to write) polls for
 *   spin_us, then sleeps on a futex in the mapping, waking at least every
 *   HORA_NET_SHM_POLL_MS to check that the peer lives: a peer that detached
 *   (closed flag), whose lifeline socket hung up, or whose process exited
 *   (pidfd) fails the wait with -ECONNRESET (receive) or -EPIPE (send).
 *
 * Threads: one thread may send (send, reserve, commit; xchg's out) while
 * another receives (recv, peek, release, next_bytes; xchg's in) on the
 * same endpoint; two senders or two receivers need a lock of the caller's. hora_net_shm_interrupt and the
 * accessors may be called from any thread. Every call that waits takes an
 * absolute deadline on hora_clock_ns() (HORA_NET_SHM_FOREVER: none).
 * Errors are -errno with err (errlen bytes, may be NULL) naming the cause.
 * README.md beside this file gives the layout and the ordering argument.
 */
#ifndef HORA_NET_SHM_SHM_H
#define HORA_NET_SHM_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HORA_NET_SHM_MAGIC 0x4d48532d41524f48ull /* "HORA-SHM" in memory (little-endian) */
#define HORA_NET_SHM_VERSION 1u
#define HORA_NET_SHM_RING_DEFAULT (1u << 20) /* bytes per direction */
#define HORA_NET_SHM_RING_MAX (1ull << 30)
#define HORA_NET_SHM_SPIN_DEFAULT 200 /* us, as the small-message channel's */
#define HORA_NET_SHM_POLL_MS 100      /* a sleeper checks the peer this often */
#define HORA_NET_SHM_FRAME_HEAD 16    /* bytes before a message's payload */
#define HORA_NET_SHM_FOREVER INT64_MAX

struct hora_net_shm;

struct hora_net_shm_cfg {
	/* bytes of each direction's ring: a power of two, a multiple of the
	 * page size, at most HORA_NET_SHM_RING_MAX (0: HORA_NET_SHM_RING_DEFAULT).
	 * Only the creator's counts; the attacher takes the header's. */
	size_t ring_bytes;
	/* poll this long before sleeping (0: HORA_NET_SHM_SPIN_DEFAULT, < 0:
	 * never poll) */
	int spin_us;
	/* optional (-1: none): a socket whose other end only the peer holds
	 * (the one the memfd came over); its hang-up means the peer's process
	 * is gone. Borrowed: the caller closes it after the detach. */
	int life_fd;
};

/* Create a channel as side 0: a sealed memfd of 4096 + 2 * ring_bytes
 * bytes, mapped. *out is freed by hora_net_shm_detach; its memfd (see
 * hora_net_shm_fd) stays open until then. 0 or -errno (-EINVAL: a bad
 * ring_bytes; mmap's, memfd_create's errno). */
int hora_net_shm_create(const struct hora_net_shm_cfg *cfg, struct hora_net_shm **out, char *err,
			size_t errlen);

/* Attach to the channel in memfd `fd` as side 1. fd is borrowed (the
 * mapping keeps the memory; close it after). Refused: a size other than the
 * header says or a size not sealed (-EINVAL), a wrong magic or version
 * (-EPROTO), a channel someone attached to already (-EBUSY). */
int hora_net_shm_attach(int fd, const struct hora_net_shm_cfg *cfg, struct hora_net_shm **out,
			char *err, size_t errlen);

/* Leave the channel and free c (NULL: no-op): the peer's later receives
 * find what was sent before, then -ECONNRESET; its sends fail -EPIPE. Unmaps
 * and closes the endpoint's fds (not life_fd). No other call on c may run. */
void hora_net_shm_detach(struct hora_net_shm *c);

/* The memfd of a created channel, to pass to the peer (owned by c); -1 on
 * side 1. */
int hora_net_shm_fd(const struct hora_net_shm *c);

/* Send fd over the Unix socket sock (SCM_RIGHTS, one byte of data). */
int hora_net_shm_fd_send(int sock, int fd, char *err, size_t errlen);
/* Receive an fd sent by hora_net_shm_fd_send within timeout_ms (< 0:
 * forever), close-on-exec; the caller closes *fd. -EPROTO: a message
 * without an fd; -ECONNRESET: the socket closed; -ETIMEDOUT. */
int hora_net_shm_fd_recv(int sock, int timeout_ms, int *fd, char *err, size_t errlen);
/* The same with len bytes of data (at least 1) beside the fd, received
 * whole into data (len the same on both sides). -EIO: only part of the
 * data went (the peer's stream is then misaligned). */
int hora_net_shm_fd_send_data(int sock, int fd, const void *data, size_t len, char *err, size_t errlen);
int hora_net_shm_fd_recv_data(int sock, int timeout_ms, int *fd, void *data, size_t len, char *err,
			      size_t errlen);
/* hora_net_shm_fd_recv_data where the fd is optional: *fd = -1 when the
 * message came with none (hora_net_shm_fd_send_data with fd < 0 sends
 * none), or when the kernel dropped the one it carried (our fd limit, a
 * security module: MSG_CTRUNC); the data says which was meant. */
int hora_net_shm_fdmsg_recv(int sock, int timeout_ms, int *fd, void *data, size_t len, char *err, size_t errlen);

/* ---- regions (region.c): memory of this process that local peers can map ----
 *
 * A set of regions, each a sealed, nameless memfd mapped here (whole
 * pages, MADV_DONTFORK). The set is thread-safe (one mutex); regions
 * still allocated at destroy are freed. A region's id is > 0 and unique in
 * its set. A peer maps a region from a dup of its fd
 * (hora_net_shm_region_map_peer), passed over an authenticated socket. */
struct hora_net_shm_regions;
struct hora_net_shm_region_ref {
	uint32_t id;  /* > 0 */
	size_t bytes; /* the region's mapped size */
	size_t off;   /* where the buffer asked about starts in it */
};
int hora_net_shm_regions_create(struct hora_net_shm_regions **out);
void hora_net_shm_regions_destroy(struct hora_net_shm_regions *s);
/* A region of at least bytes, zeroed; *out its start (page-aligned). */
int hora_net_shm_region_alloc(struct hora_net_shm_regions *s, size_t bytes, void **out, char *err,
			      size_t errlen);
/* Unmap and close the region starting at p; -ENOENT when none does. Peers'
 * mappings keep its pages until they unmap them. */
int hora_net_shm_region_free(struct hora_net_shm_regions *s, void *p);
/* The same in whichever set of this process holds it (memory freed
 * through another communicator than its own); -ESTALE when p is the start
 * of a region a set's destroy freed while it was still allocated (one of
 * the last 64; told once); -ENOENT when none of these. */
int hora_net_shm_region_free_any(void *p);
/* p is given out again as other memory (not a destroyed set's region). */
void hora_net_shm_region_forget(const void *p);
/* 1 with *ref when [p, p + len) lies in one region, else 0. */
int hora_net_shm_region_find(struct hora_net_shm_regions *s, const void *p, size_t len,
			     struct hora_net_shm_region_ref *ref);
/* 1 when region id is still allocated in s, else 0 (freed). */
int hora_net_shm_region_alive(struct hora_net_shm_regions *s, uint32_t id);
/* A close-on-exec dup of region id's fd (the caller closes it), or -errno
 * (-ENOENT: no such region, it was freed). */
int hora_net_shm_region_dup_fd(struct hora_net_shm_regions *s, uint32_t id);
/* Map a peer's region from its fd (borrowed), read-write: NULL (err says
 * why) unless its size is sealed and is exactly bytes. Unmap with munmap. */
uint8_t *hora_net_shm_region_map_peer(int fd, size_t bytes, char *err, size_t errlen);

/* Send len bytes (any length) as one message; waits for room until
 * deadline_ns. A send that fails midway (-ETIMEDOUT, -EPIPE, -ECANCELED)
 * leaves a partial message: the channel must not be used for sending again. */
int hora_net_shm_send(struct hora_net_shm *c, const void *buf, size_t len, int64_t deadline_ns,
		      char *err, size_t errlen);
/* Receive the next message, exactly len bytes, into buf. -EMSGSIZE: it has
 * another length (it stays unread). -ECONNRESET: the peer left or died with
 * nothing more sent. Midway failures as for send. */
int hora_net_shm_recv(struct hora_net_shm *c, void *buf, size_t len, int64_t deadline_ns,
		      char *err, size_t errlen);

/* Send one message and receive one at once, on the calling thread: the
 * message {out_head (head_bytes), out_buf (out_bytes)} on channel `out`,
 * and {in_head (head_bytes), in_buf (in_bytes)} (exactly that long) from
 * channel `in` (either channel may be NULL: one direction only; they may be
 * one endpoint, a pair exchange, or two, a ring's right and left). A
 * message is one frame, head then body; head_bytes may be 0 (heads NULL).
 * Both directions progress together, so two sides exchanging messages
 * larger than their rings cannot deadlock; when neither can move it spins
 * (the first waiting channel's spin_us), then sleeps on both futex words at
 * once (futex_waitv). check (optional) runs once on the received head as
 * soon as it is in, before the body is waited for; a non-zero return stops
 * the exchange with that code (dir 1), after the rest of our own message
 * was sent (up to a second: its reader is in the same call), else torn;
 * the refused message stays partly unread, so `in` is then out of step
 * (its next receive fails -EPROTO): the caller closes it. A received
 * message of another length than in_bytes + head_bytes is -EMSGSIZE, but
 * its head is checked first (a refusal's code wins): a mismatched call is
 * named by the check, as on a stream.
 * Returns 0 or -errno as send and recv, with dir the direction that failed
 * (0 send, 1 receive) and err set. For the link's caller-driven exchange. */
struct hora_net_shm_xchg {
	struct hora_net_shm *out;
	const void *out_head, *out_buf;
	size_t out_bytes;
	struct hora_net_shm *in;
	void *in_head, *in_buf;
	size_t in_bytes;
	size_t head_bytes;
	int (*check)(void *arg, const void *head); /* optional */
	void *check_arg;
	int64_t deadline_ns;
	char *err;
	size_t errlen;
	/* results */
	int dir;  /* the direction that failed: 0 send, 1 receive */
	int torn; /* our message is partly out: nothing more may be sent on out */
};
int hora_net_shm_xchg(struct hora_net_shm_xchg *x);

/* The zero-copy form. reserve: wait for room for a message of up to len
 * bytes (its frame, HORA_NET_SHM_FRAME_HEAD + len rounded up to 64, must
 * fit the ring: else -EMSGSIZE) and point *p at it (16-byte aligned,
 * contiguous); commit then publishes its first `len` bytes (<= the
 * reserved length). Nothing else may be sent in between. */
int hora_net_shm_reserve(struct hora_net_shm *c, size_t len, void **p, int64_t deadline_ns,
			 char *err, size_t errlen);
int hora_net_shm_commit(struct hora_net_shm *c, size_t len, char *err, size_t errlen);
/* peek: wait for the next message, which must be len bytes (else
 * -EMSGSIZE, unread) and fit the ring whole, and point *p at its bytes in
 * the ring (contiguous, read-only, valid until release); release consumes
 * it. Nothing else may be received in between. */
int hora_net_shm_peek(struct hora_net_shm *c, size_t len, const void **p, int64_t deadline_ns,
		      char *err, size_t errlen);
int hora_net_shm_release(struct hora_net_shm *c, char *err, size_t errlen);

/* Wait for the next message and tell its length in *len, consuming
 * nothing (then recv or peek it with that length): for a receiver that
 * does not know what comes, e.g. a notice in place of a fingerprint. */
int hora_net_shm_next_bytes(struct hora_net_shm *c, size_t *len, int64_t deadline_ns, char *err,
			    size_t errlen);

/* Copy the first len bytes of the next message (which must have at least
 * len bytes, and FRAME_HEAD + len must fit the ring: else -EMSGSIZE) into
 * buf, consuming nothing, waiting until deadline_ns for them: a look at a
 * message of unknown length (the link's peek at a notice). */
int hora_net_shm_look(struct hora_net_shm *c, void *buf, size_t len, int64_t deadline_ns, char *err,
		      size_t errlen);

/* ---- one thread driving many channels (the link's progress thread) ----
 * A message in progress moved by non-blocking steps, so that one thread
 * can move messages on many channels at once and sleep on all of them
 * when none can move. At most one sent and one received message per
 * endpoint at a time, and nothing else sent (received) on that endpoint
 * while one is in progress. The fields are the library's. */
struct hora_net_shm_msg {
	struct hora_net_shm *c;
	const void *out; /* a send's payload */
	void *in;        /* a receive's */
	size_t len;
	uint64_t frame, done;
	int recv, head;
};
/* Begin sending buf (len bytes) on c, or receiving the next message
 * (exactly len bytes) into buf. 0 or -errno (-EPIPE: the peer left;
 * -EBUSY: a reserve or peek is open). Nothing moves yet. */
int hora_net_shm_msg_send(struct hora_net_shm_msg *m, struct hora_net_shm *c, const void *buf,
			  size_t len, char *err, size_t errlen);
int hora_net_shm_msg_recv(struct hora_net_shm_msg *m, struct hora_net_shm *c, void *buf, size_t len,
			  char *err, size_t errlen);
/* Move what can move now, without waiting: 1 when bytes moved, 0 when
 * none could, -errno for a receive whose message has another length
 * (-EMSGSIZE) or a damaged head (-EPROTO). */
int hora_net_shm_msg_step(struct hora_net_shm_msg *m, char *err, size_t errlen);
/* 1 once the whole message moved */
int hora_net_shm_msg_done(const struct hora_net_shm_msg *m);

/* A wake-up word of this process: a waiter in hora_net_shm_msg_wait
 * returns when another thread rings it (e.g. it queued work). Zero it
 * before use. ring: any thread, a syscall only when the waiter sleeps. */
struct hora_net_shm_bell {
	_Atomic uint32_t seq;
	_Atomic uint32_t sleeps;
};
void hora_net_shm_bell_ring(struct hora_net_shm_bell *b);
/* the bell's count now: read it before looking for work, pass it to the wait */
uint32_t hora_net_shm_bell_seq(struct hora_net_shm_bell *b);

/* Wait until one of m[0..n) can move (n >= 0; messages not done), bell
 * (optional) rang since it read `seen`, or deadline_ns: poll for spin_us
 * (< 0: never), then sleep on every word at once (futex_waitv; more than
 * 127 messages: the first 127, waking every millisecond), checking each
 * peer as the other waits do. 0 (look again), -ETIMEDOUT (the deadline),
 * or the error of message *which: -ECONNRESET / -EPIPE (its peer is gone,
 * with nothing more to read), -ECANCELED (its endpoint interrupted). */
int hora_net_shm_msg_wait(struct hora_net_shm_msg *const *m, int n, struct hora_net_shm_bell *bell,
			  uint32_t seen, int spin_us, int64_t deadline_ns, int *which, char *err,
			  size_t errlen);

/* From any thread: make every wait on c, now and later, fail with
 * -ECANCELED at once. Frees nothing. */
void hora_net_shm_interrupt(struct hora_net_shm *c);

/* The ring's size per direction (bytes). */
size_t hora_net_shm_ring_bytes(const struct hora_net_shm *c);
/* The peer's heartbeat: a counter it bumps at every message it sends or
 * consumes and every HORA_NET_SHM_POLL_MS while it waits (for a failure
 * detector that wants to see a stuck peer; death is found without it). */
uint64_t hora_net_shm_peer_heartbeat(const struct hora_net_shm *c);
/* How an endpoint's waits ended, counted since create/attach (for tests,
 * diagnostics and benches): futex sleeps begun, sleeps ended by the peer's
 * wake (or its bump before we slept), sleeps that ran out their
 * HORA_NET_SHM_POLL_MS or the deadline. */
struct hora_net_shm_stats {
	uint64_t sleeps, woken, timeouts;
};
void hora_net_shm_stats(const struct hora_net_shm *c, struct hora_net_shm_stats *st);

/* For tests and diagnostics: 1 when a receiver sleeps in the futex, 0
 * when not: the peer's, waiting for our next message (peer = 1), or ours,
 * waiting for the peer's (peer = 0). */
int hora_net_shm_sleeping(const struct hora_net_shm *c, int peer);

#endif
