/* link.h - how the collectives reach their peers (net/coll only).
 *
 * The algorithms in net/coll/ (ring.c, doubling.c, direct.c, bcast.c) move
 * bytes between the ranks of a communicator only through a `struct
 * hora_net_link`: ranks are numbered 0..nranks-1 and a link carries
 * messages between any two of them. A link has two paths:
 *
 * - the queued path (post_send, post_recv, wait): messages are posted and
 *   complete later, either by a callback or by waiting on a request. The
 *   n-th post_send to a peer matches the peer's n-th post_recv from us,
 *   exactly (a length mismatch fails the receive). Used for bulk data (the
 *   pipelined ring and chain).
 * - the caller-driven path (exchange, plus the optional notify and peek):
 *   the calling thread sends one message and/or receives one, with no
 *   hand-off to another thread; used for small messages, where a thread
 *   wake-up costs more than the bytes. The two paths are separate streams:
 *   nothing orders a message on one against a message on the other.
 *
 * net/coll/link_tcp.c implements it over the io_uring transport (queued)
 * and one plain TCP socket per pair (caller-driven). A shared-memory or NCCL
 * link is another implementation of these ops; the algorithms do not
 * change. net/coll/README.md says what each op promises.
 */
#ifndef HORA_NET_COLL_LINK_H
#define HORA_NET_COLL_LINK_H

#include <stddef.h>
#include <stdint.h>

struct hora_net_link;
struct hora_net_link_req; /* a posted message, finished with ops->wait */

/* A posted message finished: status 0 or -errno, err the cause (may be
 * NULL). Runs on the link's progress thread (the transport's comm thread for
 * link_tcp), possibly inside the post call itself; must not block. */
typedef void (*hora_net_link_done_fn)(void *arg, int status, const char *err);

/* One caller-driven exchange: send {out_head, out_body} to rank `to` and/or
 * receive {in_head, in_body} from rank `from` (-1: that direction is not
 * used). Heads are head_bytes long on both sides; a message's body length is
 * known to both ranks from the call. check (optional) runs once the
 * received head is in; a non-zero return stops the exchange with that code
 * (the rest of our own message is sent first, so that what we send next is
 * not read as its bytes). */
struct hora_net_link_xchg {
	int to;
	const void *out_head, *out_body;
	size_t out_bytes;
	int from;
	void *in_head, *in_body;
	size_t in_bytes;
	size_t head_bytes;
	int (*check)(void *arg, const void *head); /* optional */
	void *check_arg;
	int spin_us; /* poll this long before sleeping (0: never) */
	char *err;   /* the cause of a failure */
	size_t errlen;
	int dir;     /* result: the direction that failed, 0 send, 1 receive */
};

struct hora_net_link_ops {
	/* Queue buf (len bytes) for rank `peer`. buf belongs to the link until
	 * completion: it must stay valid and unchanged. Exactly one of cb and
	 * req: cb runs once on completion, req is waited for with wait. Returns 0
	 * or -errno; then nothing was queued and cb never runs. */
	int (*post_send)(struct hora_net_link *l, int peer, const void *buf, size_t len,
			 hora_net_link_done_fn cb, void *arg, struct hora_net_link_req **req);
	/* Post a receive of the next message from `peer` into buf (exactly len
	 * bytes; another length fails it with -EMSGSIZE). buf belongs to the link
	 * until completion. As post_send otherwise. */
	int (*post_recv)(struct hora_net_link *l, int peer, void *buf, size_t len,
			 hora_net_link_done_fn cb, void *arg, struct hora_net_link_req **req);
	/* Block until req finishes and free it; its status, the cause in err
	 * (err may be NULL). After close of the peer it returns promptly. */
	int (*wait)(struct hora_net_link_req *req, char *err, size_t errlen);
	/* The caller-driven exchange above, on the calling thread; blocks at most
	 * the link's I/O timeout without progress. 0 or -errno (-ECONNRESET: the
	 * peer closed, -ETIMEDOUT) with x->dir and x->err set. A link that could
	 * not finish our message closes that peer's caller-driven stream itself. */
	int (*exchange)(struct hora_net_link *l, struct hora_net_link_xchg *x);
	/* optional: send len bytes to `peer` on the caller-driven stream without
	 * blocking, best effort (a failing rank's last word, net/coll/notice.c).
	 * 0 if it left whole, else -errno. */
	int (*notify)(struct hora_net_link *l, int peer, const void *buf, size_t len);
	/* optional: copy the next len bytes waiting on the caller-driven stream
	 * from `peer` without consuming them, waiting up to wait_ms for them.
	 * Returns 0 when len bytes were there, else -errno (-ENOTCONN: closed). */
	int (*peek)(struct hora_net_link *l, int peer, void *buf, size_t len, int wait_ms);
	/* optional: from any thread, make what blocks on the link now and every
	 * later operation fail promptly: the caller-driven streams are shut for
	 * reading (a blocked receive returns; our notices can still leave) and
	 * the queued path's peers fail with `why`. Frees nothing; safe against a
	 * close on the calling thread. For the stall abort (core/comm_watch.c). */
	void (*interrupt)(struct hora_net_link *l, const char *why);
	/* Close both paths to `peer` (-1: every peer). Pending posted messages
	 * complete with an error; later posts fail. */
	void (*close)(struct hora_net_link *l, int peer);
	/* Close everything and free the link. */
	void (*destroy)(struct hora_net_link *l);
};

struct hora_net_link {
	const struct hora_net_link_ops *ops;
	int rank, nranks;
};

#endif
