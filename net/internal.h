/* internal.h - structures shared by loop.c, conn.c and peer.c (net/ only).
 *
 * Threading: everything below is owned by the comm thread, except the fields
 * marked [q] (guarded by loop->qlock) and [r] (guarded by req->lock).
 */
#ifndef HORA_NET_INTERNAL_H
#define HORA_NET_INTERNAL_H

#include "frame.h"
#include "handshake.h"
#include "hora_net.h"
#include "swim.h"

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
	int64_t deadline_ns;    /* handshake deadline */
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

enum cmd_kind { CMD_LISTEN, CMD_CONNECT, CMD_SEND, CMD_RECV, CMD_CLOSE, CMD_STOP, CMD_MEMBERSHIP,
		CMD_LEAVE, CMD_STATUS, CMD_ABORT };

struct cmd {
	struct cmd *next;
	enum cmd_kind kind;
	struct hora_net_req *req;
	struct hora_net_peer *peer;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int timeout_ms;
	uint16_t *bound;
	void *arg; /* CMD_MEMBERSHIP: struct hora_net_membership_start */
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

	/* membership (membership.c); swim is owned by the comm thread */
	struct hora_swim *swim;
	int udp_fd;
	struct op udp_op, swim_op;
	struct __kernel_timespec swim_ts;
	struct msghdr udp_msg;
	struct iovec udp_iov;
	struct sockaddr_in udp_from;
	uint8_t udp_buf[HORA_SWIM_MTU + 64];
	bool leaving;
	/* [q] snapshot for other threads */
	struct hora_swim_view mview;
	int mrank;
	bool mpaused, mjoined;
	int malive; /* members this one believes alive, itself included */
	char mwhy[128];
	struct hora_swim_stats mstats;
	struct { /* [q] STATUS answers of the view's members */
		uint64_t uid;
		struct hora_swim_status st;
		int64_t at; /* ms, the membership clock (membership.c now_ms); 0 = none */
	} mstatus[HORA_SWIM_MAX_VIEW];
	int nmstatus;
};

/* loop.c */
int64_t hora_net_now_ns(void);
/* ts = now (CLOCK_REALTIME) + timeout_ms, for pthread_cond_timedwait. */
void hora_net_deadline(struct timespec *ts, int timeout_ms);
struct frame *hora_net_frame_get(struct hora_net_loop *loop);
void hora_net_frame_put(struct hora_net_loop *loop, struct frame *f);
struct io_uring_sqe *hora_net_sqe(struct hora_net_loop *loop);
void hora_net_refuse_log(struct hora_net_loop *loop, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
bool hora_net_on_loop(struct hora_net_loop *loop);

/* membership.c */
void hora_net_membership_run(struct hora_net_loop *loop, struct cmd *c);
void hora_net_membership_do_leave(struct hora_net_loop *loop, struct hora_net_req *r);
void hora_net_membership_do_status(struct hora_net_loop *loop, struct cmd *c);

/* conn.c */
struct conn *hora_net_conn_new(struct hora_net_loop *loop, int fd, bool server,
			       const struct sockaddr_storage *addr, socklen_t addrlen);
void hora_net_conn_start_connect(struct conn *c);
void hora_net_conn_start_server(struct conn *c);
void hora_net_conn_kick_tx(struct conn *c);
void hora_net_conn_resume_rx(struct conn *c);
void hora_net_conn_shutdown(struct conn *c);
void hora_net_conn_tick(struct conn *c, int64_t now);

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

#endif
