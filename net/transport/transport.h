/* transport.h - hora's transport: authenticated, framed TCP peers driven by
 * one io_uring event loop per worker, and the loop's service (posted calls,
 * timers, datagrams) for the layers above (internal API of libhora; core/,
 * net/membership, net's collectives, bench/ and tests use it). Knows
 * nothing of membership or collectives.
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
#ifndef HORA_NET_TRANSPORT_H
#define HORA_NET_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


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
	int max_pending_handshakes;  /* in handshake at once (server), default 64; a new
					one beyond it drops the oldest idle one */
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
/* Stop listening, from any thread (a formed communicator accepts nobody):
 * connections not accepted yet are reset and later connects refused, which
 * a connecting peer retries (hora_net_connect) until the port listens
 * again, for a later formation; peers already accepted stay. Returns once
 * the comm thread has done so; no-op when not listening. */
int hora_net_unlisten(struct hora_net_loop *loop);
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
/* 0 while the peer works, else the negative errno that broke it (the
 * other end closing included), whether or not a request was posted. Asks
 * the comm thread (hora_net_loop_call): any thread. */
int hora_net_peer_status(struct hora_net_peer *peer);
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

/* ---- service for the layers above (membership) --------------------------------
 * The loop runs, on its comm thread, calls posted by whoever registers,
 * one-shot timers and UDP sockets whose datagrams arrive by callback. The
 * loop knows nothing of what they are for. Functions marked "comm thread"
 * must be called from a posted call or a callback of this loop. */

typedef void (*hora_net_call_fn)(void *arg);
/* Run fn(arg) on the comm thread and return once it returned (at once, on
 * this thread, when called on the comm thread). 0, or -ESHUTDOWN / -ENOMEM
 * when fn did not run. Any thread. */
int hora_net_loop_call(struct hora_net_loop *loop, hora_net_call_fn fn, void *arg);
/* The loop's cluster secret (a copy made at create; valid until destroy),
 * for layers that authenticate their own messages with it. */
const uint8_t *hora_net_loop_secret(const struct hora_net_loop *loop, size_t *len);
/* Log one refusal (a peer that failed authentication...) to stderr,
 * rate-limited to a few lines per second per loop. Comm thread. */
void hora_net_refuse_log(struct hora_net_loop *loop, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

struct hora_net_timer;
typedef void (*hora_net_timer_fn)(void *arg);
/* A one-shot timer: after hora_net_timer_arm(t, ms), fn(arg) runs on the
 * comm thread once ms have passed. Comm thread. 0 or -ENOMEM. */
int hora_net_timer_create(struct hora_net_loop *loop, hora_net_timer_fn fn, void *arg,
			  struct hora_net_timer **out);
/* Arm t to fire in ms (>= 0); an armed timer is re-armed. Comm thread. */
void hora_net_timer_arm(struct hora_net_timer *t, int ms);
/* fn is not called again; the loop frees t once the kernel let go of it.
 * NULL: no-op. Comm thread. */
void hora_net_timer_destroy(struct hora_net_timer *t);

struct sockaddr_in;
struct hora_net_dgram;
/* A datagram arrived: from its sender, buf[0..len) valid during the call.
 * Comm thread. */
typedef void (*hora_net_dgram_fn)(void *arg, const struct sockaddr_in *from, const uint8_t *buf,
				  size_t len);
/* Bind a UDP socket to addr (port 0: any; *bound, when not NULL, gets the
 * bound address) and receive datagrams of up to max_bytes with fn, one
 * receive always armed. Comm thread. 0 or -errno with the reason in err
 * (then fn is never called). */
int hora_net_dgram_open(struct hora_net_loop *loop, const struct sockaddr_in *addr,
			size_t max_bytes, hora_net_dgram_fn fn, void *arg, struct sockaddr_in *bound,
			struct hora_net_dgram **out, char *err, size_t errlen);
/* Send one datagram now, without blocking: a full socket buffer drops it,
 * as the network may. 0 or -errno. Comm thread. */
int hora_net_dgram_send(struct hora_net_dgram *d, const struct sockaddr_in *to, const void *buf,
			size_t len);
/* The host at `to` answered a datagram sent there with ICMP port
 * unreachable: nothing is bound at that port (the process that had it is
 * gone; its kernel is up). Comm thread. */
typedef void (*hora_net_dgram_refused_fn)(void *arg, const struct sockaddr_in *to);
/* Report port-unreachable answers to d's datagrams with fn (same arg as the
 * datagram callback; IP_RECVERR on the socket). A host that does not answer
 * (down, a firewall that drops) reports nothing. 0 or -errno. Comm thread. */
int hora_net_dgram_on_refused(struct hora_net_dgram *d, hora_net_dgram_refused_fn fn);
/* Report the refusals waiting on d's error queue now (a send that met an
 * earlier one consumed the socket's error, so no receive completes for
 * it). Not from inside d's callbacks. Comm thread. */
void hora_net_dgram_read_errors(struct hora_net_dgram *d);
/* Close: fn is not called again; the loop frees d once the kernel let go
 * of it. NULL: no-op. Comm thread. */
void hora_net_dgram_close(struct hora_net_dgram *d);

struct hora_net_stats {
	uint64_t accepted, refused, auth_failures, handshake_timeouts, protocol_errors;
	uint64_t peers_ready, bytes_sent, bytes_received, frames_sent, frames_received;
};
void hora_net_loop_stats(struct hora_net_loop *loop, struct hora_net_stats *st);

#endif
