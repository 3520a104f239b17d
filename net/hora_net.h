/* hora_net.h - hora's transport: authenticated, framed TCP peers driven by
 * one io_uring event loop per worker (internal API of libhora; core/, bench/
 * and tests use it).
 *
 * Model (net/README.md): a loop owns one io_uring ring and one comm thread;
 * only that thread touches the ring and the sockets. A *peer* is an
 * authenticated connection to another worker made of K TCP sockets
 * (stripes). Messages are sent and received in order per peer: the n-th
 * hora_net_isend on one side matches the n-th hora_net_irecv on the other;
 * large messages are cut into frames and striped over the K sockets, and
 * frames land directly in the receiver's buffer.
 *
 * Every call is thread-safe. Callbacks run on the comm thread and must not
 * block; they may call isend/irecv (which then run inline).
 */
#ifndef HORA_NET_H
#define HORA_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "swim.h"

struct hora_net_opts {
	uint32_t node_id;            /* this worker's id, sent in the handshake */
	int sockets_per_peer;        /* stripes per peer (1..64), default 1 */
	int sndbuf_bytes;            /* SO_SNDBUF, 0 = kernel autotuning (default) */
	int rcvbuf_bytes;            /* SO_RCVBUF, 0 = kernel autotuning (default) */
	size_t chunk_bytes;          /* frame payload when striping, default 1 MiB */
	size_t max_frame_bytes;      /* largest frame accepted, default 64 MiB */
	int handshake_timeout_ms;    /* default 5000 */
	int io_timeout_ms;           /* no progress on a busy peer for this long
					fails it; 0 = never (default 30000) */
	int send_zc;                 /* IORING_OP_SENDMSG_ZC for large frames (default 0) */
	size_t zc_min_bytes;         /* frames at least this big use ZC, default 64 KiB */
	int crc;                     /* add CRC32C to data frames (default 0) */
	int rcvlowat;                /* SO_RCVLOWAT for large payloads: one wake-up
					per frame, not per segment (default 1) */
	int max_pending_handshakes;  /* connections refused beyond this, default 64 */
	uint32_t view;               /* view id stamped on frames and required of peers */
	const uint8_t *secret;       /* cluster secret (copied), >= 16 bytes */
	size_t secret_len;
};

void hora_net_opts_default(struct hora_net_opts *o);

struct hora_net_loop;
struct hora_net_peer;
struct hora_net_req;

/* Create a loop and start its comm thread. Returns 0 or -errno with the
 * reason in err. */
int hora_net_loop_create(const struct hora_net_opts *o, struct hora_net_loop **out, char *err,
			 size_t errlen);
/* Stop the thread, close every socket, free everything. Peers still open
 * are closed; waiting callers are released with -ESHUTDOWN. NULL: no-op. */
void hora_net_loop_destroy(struct hora_net_loop *loop);

/* Listen on host:port (port 0 = any; *bound gets the port). Accepted
 * connections are authenticated; complete peers queue for hora_net_accept. */
int hora_net_listen(struct hora_net_loop *loop, const char *host, uint16_t port, uint16_t *bound,
		    char *err, size_t errlen);
/* Wait up to timeout_ms (-1 = forever) for an authenticated peer.
 * Returns 0, -ETIMEDOUT, or -ESHUTDOWN. */
int hora_net_accept(struct hora_net_loop *loop, int timeout_ms, struct hora_net_peer **out,
		    char *err, size_t errlen);
/* Connect K sockets to host:port and authenticate them, retrying refused
 * connections until timeout_ms. Returns 0 or -errno with the reason. */
int hora_net_connect(struct hora_net_loop *loop, const char *host, uint16_t port, int timeout_ms,
		     struct hora_net_peer **out, char *err, size_t errlen);
/* Say goodbye (CLOSE frames), close the sockets and free the peer; waits
 * until the comm thread has done so. Pending requests fail with -ECANCELED. */
void hora_net_peer_close(struct hora_net_peer *peer);
/* Fail the peer now, from any thread: its sockets are shut down and its
 * pending and later requests fail with -ECANCELED and `why` (once they
 * left the kernel, as for any failure); p stays valid until
 * hora_net_peer_close. Returns once the comm thread has done so. */
void hora_net_peer_abort(struct hora_net_peer *peer, const char *why);
/* "host:port" of the peer; valid until hora_net_peer_close. */
const char *hora_net_peer_name(const struct hora_net_peer *peer);
uint32_t hora_net_peer_node(const struct hora_net_peer *peer);

/* Called on the comm thread when a request finishes; status 0 or -errno.
 * With a callback the library frees the request after it returns. */
typedef void (*hora_net_done_fn)(void *arg, int status, const char *err);

/* Queue a message. buf must stay valid and unchanged until completion.
 * Exactly one of cb and req: with req, finish it with hora_net_wait.
 * Returns 0 or -errno (then nothing was queued and cb is not called). */
int hora_net_isend(struct hora_net_peer *peer, const void *buf, size_t len, hora_net_done_fn cb,
		   void *arg, struct hora_net_req **req);
/* Post a receive for the next message; its length must be exactly len
 * (otherwise the request fails with -EMSGSIZE naming both lengths). */
int hora_net_irecv(struct hora_net_peer *peer, void *buf, size_t len, hora_net_done_fn cb,
		   void *arg, struct hora_net_req **req);
/* Block until req finishes; frees it. Returns its status, with the reason
 * ("peer 127.0.0.1:29501 closed the connection during frame 17") in err. */
int hora_net_wait(struct hora_net_req *req, char *err, size_t errlen);
/* 1 if req has finished (then hora_net_wait returns at once), else 0. */
int hora_net_test(struct hora_net_req *req);

/* ---- membership (SWIM + agreed views, net/MEMBERSHIP.md) -------------------- */

/* Bind UDP host:port (0 = any; *bound gets it) and run SWIM on this loop's
 * comm thread, joining through the seeds (none: start alone). cfg's uid,
 * self address and secret are filled in here (secret: the loop's). */
int hora_net_membership_start(struct hora_net_loop *loop, const struct hora_swim_cfg *cfg,
			      const char *host, uint16_t port, uint16_t *bound,
			      const struct hora_swim_addr *seeds, int nseeds, char *err, size_t errlen);
/* The installed view, this member's rank (-1 if not in it), paused and why.
 * Returns 0, or -ENOTCONN when membership is not running. Thread-safe. */
int hora_net_membership_view(struct hora_net_loop *loop, struct hora_swim_view *v, int *rank,
			     bool *paused, char *why, size_t whylen);
/* Wait until the installed view id differs from `known`, its paused state
 * changes, or the number of live members changes; timeout_ms -1 = forever.
 * 0, -ETIMEDOUT or -ESHUTDOWN. */
int hora_net_membership_wait(struct hora_net_loop *loop, uint64_t known, bool known_paused,
			     int timeout_ms);
/* Members this one believes alive (itself included). */
int hora_net_membership_alive(struct hora_net_loop *loop);
/* Whether a seed (or any member) has answered. */
bool hora_net_membership_joined(struct hora_net_loop *loop);
/* Announce a graceful leave to every member; returns once sent. */
void hora_net_membership_leave(struct hora_net_loop *loop);
void hora_net_membership_stats(struct hora_net_loop *loop, struct hora_swim_stats *st);
/* Stall inspection: where this member's STATUS answers come from (get runs
 * on the comm thread and must only read atomics); ask every live member for
 * theirs (*sent_ms: when, on the clock of the answers); read the answer of
 * the member with this rank in the installed view if it came at or after
 * since_ms (0, or -ENOENT). */
int hora_net_membership_status_source(struct hora_net_loop *loop,
				      void (*get)(void *arg, struct hora_swim_status *st), void *arg);
int hora_net_membership_status_query(struct hora_net_loop *loop, int64_t *sent_ms);
int hora_net_membership_status(struct hora_net_loop *loop, int rank, int64_t since_ms,
			       struct hora_swim_status *st);
/* Parse "a.b.c.d:port" into a SWIM address. 0 or -EINVAL. */
int hora_net_swim_addr(const char *hostport, struct hora_swim_addr *a);

struct hora_net_stats {
	uint64_t accepted, refused, auth_failures, handshake_timeouts, protocol_errors;
	uint64_t peers_ready, bytes_sent, bytes_received, frames_sent, frames_received;
};
void hora_net_loop_stats(struct hora_net_loop *loop, struct hora_net_stats *st);

#endif
