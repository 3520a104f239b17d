/* fast.h - the small-message channel of a communicator (net/ only).
 *
 * Small collectives (a few KiB: barriers, metrics, 8-byte allreduces) are
 * bound by wake-ups, not bytes: going through the comm thread costs two
 * thread hand-offs per message. So every pair of ranks also keeps one plain
 * TCP connection (TCP_NODELAY, authenticated with the same HMAC handshake as
 * the transport) that the thread running the collective drives itself with
 * blocking send/recv, as Gloo's synchronous pairs and Open MPI's TCP BTL do.
 * Bulk data never uses it: the ring runs on the io_uring transport.
 *
 * Every call waits at most the socket timeouts set at connection (the
 * transport's io_timeout); errors name the peer and the cause.
 */
#ifndef HORA_NET_FAST_H
#define HORA_NET_FAST_H

#include <stddef.h>
#include <stdint.h>

/* Whether a connect or accept below should go on waiting, asked at least
 * every HORA_NET_FORM_CHECK_MS (coll.h) while it waits: 0 goes on; a
 * negative errno stops it at once with that code (err: "stopped"; the
 * caller knows why). NULL: never asked. */
typedef int (*hora_net_fast_check_fn)(void *arg);
struct hora_net_fast_check {
	hora_net_fast_check_fn fn;
	void *arg;
};

/* A listening socket on host (port 0 = any); *port gets the bound port. */
int hora_net_fast_listen(const char *host, int *lfd, uint16_t *port, char *err, size_t errlen);

/* Connect to host:port and authenticate as `node` (client side of the
 * handshake), retrying refused connects (every 20 ms) and handshakes cut
 * off or timed out (each attempt 5 s at most; backoff 50 ms doubling to
 * 1 s) until timeout_ms; authentication refusals are final. *fd is
 * blocking, TCP_NODELAY, with io_timeout_ms send/receive timeouts (0 =
 * none). */
int hora_net_fast_connect(const char *host, uint16_t port, const uint8_t *key, size_t keylen,
			  uint32_t node, int timeout_ms, int io_timeout_ms, int *fd, char *err,
			  size_t errlen, const struct hora_net_fast_check *check);

/* Accept n authenticated connections on lfd (non-blocking) within
 * timeout_ms: fds[0..n) and the node each claims, in the order they
 * authenticated. Up to 16 connections are in handshake at once, each with
 * its own 5 s deadline (a new one beyond that drops the oldest), so an idle
 * or garbage connection holds up nobody; strangers that fail the handshake
 * are dropped and waiting goes on. 0, or -errno with err naming the last
 * connection that failed (its address) and none of fds open. */
int hora_net_fast_accept(int lfd, const uint8_t *key, size_t keylen, uint32_t node, int timeout_ms,
			 int io_timeout_ms, int n, int *fds, uint32_t *peer_nodes, char *err,
			 size_t errlen, const struct hora_net_fast_check *check);

/* One exchange on the fast sockets: send the message {out_head (head_bytes),
 * out_body (out_bytes)} on out_fd and receive {in_head (head_bytes),
 * in_body (in_bytes)} from in_fd (either fd may be -1: one direction only;
 * they may be different peers). Both directions progress together, so two
 * ranks exchanging messages larger than the socket buffers cannot deadlock.
 * When check is not NULL it is called once the head is in; a non-zero return
 * stops with that code (a mismatched call is named before waiting for bytes
 * that never come). When check refuses while the message to out_fd is
 * partly out, the rest is sent first (for up to a second: its reader is in
 * the same call), so that the caller can tell that peer why; check must not
 * touch the sockets itself. A receive that finds nothing polls without
 * sleeping for up to spin_us (yielding the CPU to any other runnable thread
 * between polls), then sleeps in recvmsg(2). */
struct hora_net_fast_xchg {
	int out_fd;
	const void *out_head, *out_body;
	size_t out_bytes;
	int in_fd;
	void *in_head, *in_body;
	size_t in_bytes;
	size_t head_bytes;
	int (*check)(void *arg, const void *head); /* optional */
	void *check_arg;
	int timeout_ms, spin_us;
	char *err; /* the cause of a failure (errlen bytes) */
	size_t errlen;
	/* results */
	int dir;  /* the direction that failed: 0 send, 1 receive */
	int torn; /* the message is still partly out after an error: nothing more
		     may be written to out_fd (the reader would take it for the
		     message's bytes) */
};

/* Returns 0 or -errno (-ECONNRESET: the peer closed, -ETIMEDOUT: nothing
 * moved for timeout_ms), with dir, torn and err set as above. */
int hora_net_fast_xchg(struct hora_net_fast_xchg *x);

#endif
