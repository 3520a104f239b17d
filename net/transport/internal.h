/* internal.h - structures shared by loop.c, conn.c, peer.c and service.c
 * (net/transport only: the layers above use transport.h).
 *
 * Threading: everything below is owned by the comm thread, except the fields
 * marked [q] (guarded by loop->qlock) and [r] (guarded by req->lock).
 */
#ifndef HORA_NET_INTERNAL_H
#define HORA_NET_INTERNAL_H

#include "net/transport/frame.h"
#include "net/transport/handshake.h"
#include "net/transport/transport.h"
#include "net/util/clock.h"

#include <liburing.h>
#include <netinet/in.h>
#include <pthread.h>
#include <time.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HORA_NET_RXBUF 65536
#define HORA_NET_DIRECT_MIN 16384 /* payload rest >= this: recv straight into the user buffer */
#define HORA_NET_LOWAT_MAX (4 << 20) /* largest SO_RCVLOWAT set for such a recv (conn.c) */
#define HORA_NET_MAX_IOV 32
#define HORA_NET_NAME 64
#define HORA_NET_INLINE 464 /* payloads up to this go out as one contiguous send */
#define HORA_NET_FRAME_CACHE 256

struct hora_net_loop;
struct conn;

/* What a CQE's user_data points at. */
struct op {
	void (*fn)(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe);
};

enum conn_state { C_CONNECTING, C_HANDSHAKE, C_READY, C_CLOSING };
enum rx_state { RX_HDR, RX_PAYLOAD, RX_PARKED };

struct frame {
	struct frame *next;
	struct hora_net_req *req; /* NULL for CLOSE */
	bool inlined;             /* payload copied right after hdr (small frames) */
	uint8_t hdr[HORA_NET_HDR_BYTES];
	uint8_t inl[HORA_NET_INLINE]; /* must follow hdr: one buffer on the wire */
	const uint8_t *payload;
	size_t len;  /* payload bytes */
	size_t sent; /* of hdr + payload */
};

struct conn {
	struct hora_net_loop *loop;
	struct conn *prev, *next; /* loop->conns */
	int fd;
	enum conn_state state;
	bool server;
	char name[HORA_NET_NAME];
	struct hora_net_peer *peer; /* NULL while handshaking on the server side */
	int stripe;
	int inflight;           /* ops in the kernel that point at this conn */
	int64_t deadline_ns;    /* this attempt's deadline (connect or handshake) */
	int64_t connect_deadline_ns; /* client: the caller's, retries stop there */
	int retry_ms;           /* client: the last handshake retry's delay (0: none yet) */
	struct sockaddr_storage addr;
	socklen_t addrlen;

	/* handshake */
	struct op hs_op;
	struct hora_net_hs hs;
	uint8_t hs_in[HORA_NET_CHALLENGE_BYTES];
	size_t hs_have;
	uint8_t hs_out[HORA_NET_HS_MAX_OUT];
	size_t hs_outlen, hs_sent;
	int hs_rc; /* result of the last hs_input: 1 done, <0 failed */
	int hs_msgs; /* handshake messages received (server: 0 = nothing yet, an idle client?) */
	bool hs_sending;

	/* connect (client) */
	struct op conn_op;
	struct __kernel_timespec retry_ts;

	/* rx */
	struct op rx_op;
	uint8_t *rxbuf;
	size_t rx_have, rx_off;
	enum rx_state rx;
	bool rx_direct; /* the armed recv targets the user buffer */
	bool rx_armed;
	int lowat; /* SO_RCVLOWAT as last set (0: never set; the kernel's default is 1) */
	struct hora_net_hdr cur;
	uint64_t cur_got;
	struct hora_net_req *cur_req;
	uint64_t frames_rx;

	/* tx */
	struct op tx_op;
	struct frame *txq, *txq_tail;
	bool tx_armed, tx_zc_wait;
	struct msghdr msg;
	struct iovec iov[HORA_NET_MAX_IOV];
	uint64_t frames_tx;
};

_Static_assert(offsetof(struct frame, inl) == offsetof(struct frame, hdr) + HORA_NET_HDR_BYTES,
	       "inline payload must follow the header");

enum req_kind { REQ_SEND, REQ_RECV, REQ_SYNC };

struct hora_net_req {
	enum req_kind kind;
	struct hora_net_peer *peer;
	struct hora_net_req *next; /* peer->recvq or peer->sendq */
	uint8_t *buf;
	size_t len;
	uint64_t seq;
	uint64_t done_bytes;
	int frames_left; /* send: frames not yet fully written */
	bool queued_all;
	hora_net_done_fn cb;
	void *arg;
	/* completion [r] */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int status;
	char err[256];
};

struct hora_net_peer {
	struct hora_net_loop *loop;
	struct hora_net_peer *next; /* loop->pending (server) or accepted queue [q] */
	struct conn **conns;
	int nconns, nready;
	char name[HORA_NET_NAME];
	uint32_t node;
	uint64_t session;
	uint64_t send_seq, recv_seq; /* next sequence numbers to assign */
	struct hora_net_req *recvq, *recvq_tail; /* posted receives, by seq */
	struct hora_net_req *sendq, *sendq_tail; /* sends not yet complete */
	int next_stripe;
	int status; /* 0, or the error that broke the peer */
	char err[256];
	bool remote_closed; /* got CLOSE */
	bool closing;       /* user called close */
	struct hora_net_req *close_req;
	struct hora_net_req *connect_req; /* client: completes when all stripes ready */
	uint64_t progress;         /* bumped on every byte moved or op posted (no clock on the data path) */
	uint64_t progress_seen;    /* value at the last tick that saw it change */
	int64_t idle_since_ns;     /* when the tick first saw progress unchanged */
	int64_t created_ns;
};

enum cmd_kind { CMD_LISTEN, CMD_CONNECT, CMD_SEND, CMD_RECV, CMD_CLOSE, CMD_STOP, CMD_CALL, CMD_ABORT };

struct cmd {
	struct cmd *next;
	enum cmd_kind kind;
	struct hora_net_req *req;
	struct hora_net_peer *peer;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int timeout_ms;
	uint16_t *bound;
	hora_net_call_fn fn; /* CMD_CALL: fn(arg) on the comm thread */
	void *arg;
};

struct hora_net_loop {
	struct hora_net_opts o;
	uint8_t secret[HORA_NET_SECRET_MAX];
	struct io_uring ring;
	bool ring_disabled; /* created R_DISABLED; the comm thread enables it */
	pthread_t thread;
	bool stopping;
	int efd;
	struct op efd_op;
	uint64_t efd_val;
	struct op tick_op;
	struct __kernel_timespec tick_ts;
	int listen_fd;
	struct op accept_op;
	struct conn *conns;
	struct frame *frame_cache; /* freed frames, reused (comm thread only) */
	struct hora_net_req *req_cache; /* freed callback requests (comm thread only) */
	int req_cache_n;
	int frame_cache_n;
	int pending_handshakes;
	struct hora_net_peer *pending; /* server side, stripes still arriving */
	struct hora_net_peer **all_peers;
	int npeers, cap_peers;
	/* rate-limited refusal log */
	int64_t log_window_ns;
	int log_count;
	uint64_t log_suppressed;
	/* [q] */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct cmd *q, *q_tail;
	struct hora_net_peer *accepted, *accepted_tail;
	bool dead;
	struct hora_net_stats stats; /* [q] when read from outside; comm thread writes */

	/* what the loop's service (service.c) keeps for the layers above: live
	 * timers and datagram sockets, freed with the loop (comm thread) */
	struct hora_net_timer *timers;
	struct hora_net_dgram *dgrams;
	/* [q] the last handshake this loop refused or failed, for the error of
	 * an accept or connect that then times out ("" = none) */
	char last_hs_fail[256];
	int64_t last_hs_fail_ns;
};

/* loop.c */
/* ts = now (CLOCK_REALTIME) + timeout_ms, for pthread_cond_timedwait. */
void hora_net_deadline(struct timespec *ts, int timeout_ms);
struct frame *hora_net_frame_get(struct hora_net_loop *loop);
void hora_net_frame_put(struct hora_net_loop *loop, struct frame *f);
struct io_uring_sqe *hora_net_sqe(struct hora_net_loop *loop);
bool hora_net_on_loop(struct hora_net_loop *loop);

/* Queue a command for the comm thread (or run it now when on it); the loop
 * frees c. 0 or -ESHUTDOWN. */
int hora_net_post(struct hora_net_loop *loop, struct cmd *c);
/* "a.b.c.d" or an IPv6 literal + port into a sockaddr. 0 or -EINVAL. */
int hora_net_parse_addr(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);

/* service.c */
/* Free every timer and datagram socket still open (loop destroy, after the
 * comm thread stopped). */
void hora_net_service_free_all(struct hora_net_loop *loop);

/* conn.c */
struct conn *hora_net_conn_new(struct hora_net_loop *loop, int fd, bool server,
			       const struct sockaddr_storage *addr, socklen_t addrlen);
void hora_net_conn_start_connect(struct conn *c);
void hora_net_conn_start_server(struct conn *c);
void hora_net_conn_kick_tx(struct conn *c);
void hora_net_conn_resume_rx(struct conn *c);
void hora_net_conn_shutdown(struct conn *c);
void hora_net_conn_tick(struct conn *c, int64_t now);
/* Server, max_pending_handshakes connections in handshake: drop the one at
 * it longest (logged), making room for a new one. */
void hora_net_conn_evict_handshake(struct hora_net_loop *loop);

/* peer.c */
void hora_net_req_finish(struct hora_net_req *r, int status, const char *err);
void hora_net_peer_fail(struct hora_net_peer *p, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void hora_net_peer_conn_ready(struct hora_net_loop *loop, struct conn *c);
void hora_net_peer_conn_gone(struct hora_net_peer *p, struct conn *c);
void hora_net_peer_do_send(struct hora_net_req *r);
void hora_net_peer_do_recv(struct hora_net_req *r);
void hora_net_peer_do_close(struct hora_net_peer *p, struct hora_net_req *sync);
void hora_net_peer_do_abort(struct hora_net_peer *p, struct cmd *c);
struct hora_net_req *hora_net_peer_find_recv(struct hora_net_peer *p, uint64_t seq);
void hora_net_peer_recv_complete(struct hora_net_peer *p, struct hora_net_req *r);
void hora_net_peer_send_frame_done(struct hora_net_req *r);
void hora_net_peer_tick(struct hora_net_peer *p, int64_t now);
void hora_net_client_connect(struct hora_net_loop *loop, struct cmd *c);
/* bind(2), retrying EADDRINUSE for up to 1 s (a dead process's io_uring may
 * still hold the port: bind.c). 0, or -1 with errno. */
int hora_net_bind_retry(int fd, const struct sockaddr *addr, socklen_t len);
/* A request for a command another thread waits on (peer.c). */
struct hora_net_req *hora_net_sync_req(void);
/* Post c with r attached and wait until the comm thread finished r; frees
 * both. Returns r's status with its reason in err. */
int hora_net_sync_wait(struct hora_net_loop *loop, struct cmd *c, struct hora_net_req *r, char *err,
		       size_t errlen);

#endif
