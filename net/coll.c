/* coll.c - communicator set-up and the collectives.
 *
 * Ring (large messages): allreduce = reduce-scatter then allgather, 2(N-1)
 * steps; each step moves one of N chunks to the right neighbour, cut into
 * segments so that sending, receiving and reducing overlap: the send of step
 * t+1 of a segment leaves as soon as step t of it was received and reduced,
 * while `depth` receives stay posted ahead into a pool of depth segment
 * buffers (extra memory O(segment x depth), never a copy of the buffer).
 * The whole pipeline runs in completion callbacks on the comm thread (each
 * receive completion reduces and posts the next send and receive inline);
 * the calling thread sleeps until it is done.
 * Partial sums live in the pool slot they arrived in and leave from there;
 * the final sum of a chunk is written to the output, and the allgather
 * receives straight into place, so out-of-place calls need no copy either.
 * The owner of each chunk finishes it (AVG's division) before sending it
 * around, so every rank ends with the same bits. Reduce-scatter and
 * allgather are the two halves of the same schedule; broadcast is a
 * pipelined chain from the root with the same segments.
 *
 * Small messages go over the communicator's fast channel (fast.h): blocking
 * sends and receives by the calling thread, no comm-thread hand-off.
 * Allreduce uses recursive doubling, plus a fold-in/fold-out step for N not
 * a power of two; each pair reduces (lower rank's data) op (higher rank's
 * data), so both get the same bits. Broadcast uses a binomial tree, the
 * barrier is a zero-byte allreduce. The fingerprint travels in the same
 * message as the data.
 */
#include "coll.h"

#include "fast.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FP_BYTES 32

/* Notices on the fast sockets, sent before a failing rank closes everything
 * (same 32 bytes as a fingerprint; the rank they name sits where root does):
 * K_ABORT "I saw a mismatch and stop", K_LOST "I stop because I lost this
 * rank" (itself: its own error). A rank waiting on the sender reads it
 * instead of a bare end of stream, and its error names the cause. */
enum kind { K_ALLREDUCE, K_BROADCAST, K_ALLGATHER, K_REDUCE_SCATTER, K_BARRIER, K_KINDS,
	    K_LOST = 0xa1, K_ABORT = 0xab };
static const char *const kind_name[K_KINDS] = {"allreduce", "broadcast", "allgather",
					       "reduce_scatter", "barrier"};

struct hora_net_comm {
	struct hora_net_comm_cfg cfg;
	struct hora_net_loop *loop;
	struct hora_net_peer **peer; /* peer[rank]; NULL for self */
	int *fast;                   /* fast[rank]: small-message socket; -1 for self */
	int rank, n, io_timeout_ms, spin_us;
	uint64_t seq;
	enum kind kind; /* of the call in progress, for messages */
	int algo;
	int broken;
	char err[512];
	uint8_t *pool;  /* depth segments */
	uint8_t *scratch; /* out-of-place reduce-scatter's partial sums */
	size_t scratch_bytes;
	/* progress, read by other threads (stall inspection) */
	_Atomic uint64_t p_seq;
	_Atomic uint32_t p_kind;
	_Atomic int p_inside;
	_Atomic int64_t p_since_ms;
	_Atomic int abort_origin; /* the rank that saw the mismatch first (-1: none seen) */
	_Atomic int lost_origin;  /* the rank whose loss a K_LOST we read named (-1: none) */
	int post_err;             /* why the last hora_net_isend/irecv was refused */
	/* hora_net_comm_interrupt (another thread) against closing peer[] and
	 * fast[] (the calling thread): closes take links_mu */
	pthread_mutex_t links_mu;
	_Atomic int interrupted;
	uint8_t *small; /* small_cap: the other rank's data in recursive doubling */
};

const char *hora_net_comm_error(const struct hora_net_comm *c)
{
	return c->err;
}
int hora_net_comm_rank(const struct hora_net_comm *c)
{
	return c->rank;
}
int hora_net_comm_size(const struct hora_net_comm *c)
{
	return c->n;
}
void hora_net_comm_set_algo(struct hora_net_comm *c, int algo)
{
	c->algo = algo;
}
size_t hora_net_comm_small_bytes(const struct hora_net_comm *c)
{
	return c->cfg.small_bytes;
}
int hora_net_comm_set_small_bytes(struct hora_net_comm *c, size_t bytes)
{
	if (bytes > c->cfg.small_cap)
		return -EINVAL;
	c->cfg.small_bytes = bytes;
	return 0;
}
void hora_net_comm_set_medium_bytes(struct hora_net_comm *c, size_t bytes)
{
	c->cfg.medium_bytes = bytes;
}
size_t hora_net_comm_medium_bytes(const struct hora_net_comm *c)
{
	return c->cfg.medium_bytes;
}

/* a refused post keeps its reason for the error text */
static int posted_ok(struct hora_net_comm *c, int rc)
{
	if (rc)
		c->post_err = rc < 0 ? rc : -EIO;
	return rc;
}
#define POST_WHY(c) strerror(-(c)->post_err)

static int split(const char *hp, char *host, size_t n, uint16_t *port)
{
	const char *colon = strrchr(hp, ':');
	if (!colon || (size_t)(colon - hp) >= n)
		return -EINVAL;
	memcpy(host, hp, (size_t)(colon - hp));
	host[colon - hp] = 0;
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 0 || p > 65535)
		return -EINVAL;
	*port = (uint16_t)p;
	return 0;
}

/* One plain authenticated socket per pair for small messages: every rank
 * opens a listener, tells the ranks above it the port over the transport,
 * connects to the ranks below and accepts the ones above. */
static int fast_setup(struct hora_net_comm *c, char *err, size_t errlen)
{
	char host[64], e2[256];
	uint16_t port, fport;
	int lfd = -1, rc;
	const int tmo = c->cfg.connect_timeout_ms;
	split(c->cfg.addrs[c->rank], host, sizeof(host), &port);
	if ((rc = hora_net_fast_listen(host, &lfd, &fport, e2, sizeof(e2)))) {
		snprintf(err, errlen, "rank %d: small-message channel: %s", c->rank, e2);
		return rc;
	}
	uint8_t pb[2] = {(uint8_t)(fport >> 8), (uint8_t)fport};
	struct hora_net_req **sr = calloc((size_t)c->n, sizeof(*sr));
	if (!sr) {
		close(lfd);
		return -ENOMEM;
	}
	for (int k = c->rank + 1; k < c->n && !rc; k++)
		if (posted_ok(c, hora_net_isend(c->peer[k], pb, 2, NULL, NULL, &sr[k])))
			rc = c->post_err, snprintf(err, errlen, "rank %d: cannot send to rank %d: %s", c->rank, k,
						   POST_WHY(c));
	for (int j = 0; j < c->rank && !rc; j++) {
		uint8_t in[2];
		struct hora_net_req *r;
		if (posted_ok(c, hora_net_irecv(c->peer[j], in, 2, NULL, NULL, &r))) {
			rc = c->post_err;
			snprintf(err, errlen, "rank %d: port of rank %d's small-message channel: %s",
				 c->rank, j, POST_WHY(c));
			break;
		}
		if ((rc = hora_net_wait(r, e2, sizeof(e2)))) {
			snprintf(err, errlen, "rank %d: port of rank %d's small-message channel: %s",
				 c->rank, j, e2);
			break;
		}
		split(c->cfg.addrs[j], host, sizeof(host), &port);
		rc = hora_net_fast_connect(host, (uint16_t)(in[0] << 8 | in[1]), c->cfg.opts.secret,
					   c->cfg.opts.secret_len, (uint32_t)c->rank, tmo,
					   c->io_timeout_ms, &c->fast[j], e2, sizeof(e2));
		if (rc)
			snprintf(err, errlen, "rank %d: small-message channel to rank %d: %s", c->rank, j,
				 e2);
	}
	for (int k = c->rank + 1; k < c->n && !rc; k++) {
		int fd;
		uint32_t who;
		rc = hora_net_fast_accept(lfd, c->cfg.opts.secret, c->cfg.opts.secret_len,
					  (uint32_t)c->rank, tmo, c->io_timeout_ms, &fd, &who, e2,
					  sizeof(e2));
		if (rc) {
			snprintf(err, errlen, "rank %d: small-message channel from the ranks above: %s",
				 c->rank, e2);
		} else if (who <= (uint32_t)c->rank || who >= (uint32_t)c->n || c->fast[who] >= 0) {
			close(fd);
			rc = -EPROTO;
			snprintf(err, errlen, "rank %d: small-message channel: unexpected peer claiming rank %u",
				 c->rank, who);
		} else {
			c->fast[who] = fd;
		}
	}
	for (int k = c->rank + 1; k < c->n; k++)
		if (sr[k])
			hora_net_wait(sr[k], NULL, 0);
	free(sr);
	close(lfd);
	return rc;
}

int hora_net_comm_create(const struct hora_net_comm_cfg *cfg, struct hora_net_comm **out, char *err,
			 size_t errlen)
{
	*out = NULL;
	if (cfg->nranks < 1 || cfg->rank < 0 || cfg->rank >= cfg->nranks || cfg->nranks > 65535)
		return snprintf(err, errlen, "rank %d of %d: invalid", cfg->rank, cfg->nranks), -EINVAL;
	struct hora_net_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	atomic_init(&c->abort_origin, -1);
	atomic_init(&c->lost_origin, -1);
	pthread_mutex_init(&c->links_mu, NULL);
	c->cfg = *cfg;
	c->rank = cfg->rank;
	c->n = cfg->nranks;
	if (!c->cfg.connect_timeout_ms)
		c->cfg.connect_timeout_ms = 30000;
	if (!c->cfg.small_cap)
		c->cfg.small_cap = 1 << 20;
	if (!c->cfg.small_bytes)
		c->cfg.small_bytes = HORA_NET_SMALL_DEFAULT;
	if (!c->cfg.medium_bytes)
		c->cfg.medium_bytes = HORA_NET_MEDIUM_DEFAULT;
	if (c->cfg.small_bytes > c->cfg.small_cap)
		c->cfg.small_cap = c->cfg.small_bytes;
	if (!c->cfg.segment_bytes)
		c->cfg.segment_bytes = 1 << 20;
	if (!c->cfg.slice_bytes)
		c->cfg.slice_bytes = HORA_NET_SLICE_DEFAULT;
	if (c->cfg.depth < 1)
		c->cfg.depth = 4;
	c->io_timeout_ms = cfg->opts.io_timeout_ms;
	c->spin_us = cfg->spin_us < 0 ? 0 : cfg->spin_us ? cfg->spin_us : HORA_NET_SPIN_DEFAULT;
	c->peer = calloc((size_t)c->n, sizeof(*c->peer));
	c->fast = malloc((size_t)c->n * sizeof(int));
	c->pool = malloc(c->cfg.segment_bytes * (size_t)c->cfg.depth);
	c->small = malloc(c->cfg.small_cap + 64);
	int rc = -ENOMEM;
	if (!c->peer || !c->fast || !c->pool || !c->small)
		goto fail;
	for (int i = 0; i < c->n; i++)
		c->fast[i] = -1;
	if (c->n == 1) {
		*out = c;
		return 0;
	}
	struct hora_net_opts o = cfg->opts;
	o.node_id = (uint32_t)c->rank;
	if (o.chunk_bytes > c->cfg.segment_bytes)
		o.chunk_bytes = c->cfg.segment_bytes;
	rc = hora_net_loop_create(&o, &c->loop, err, errlen);
	if (rc)
		goto fail;
	char host[64];
	uint16_t port;
	for (int j = 0; j < c->n; j++)
		if (split(cfg->addrs[j], host, sizeof(host), &port)) {
			snprintf(err, errlen, "rank %d: bad address '%s' for rank %d (want ip:port)",
				 c->rank, cfg->addrs[j], j);
			rc = -EINVAL;
			goto fail;
		}
	split(cfg->addrs[c->rank], host, sizeof(host), &port);
	if ((rc = hora_net_listen(c->loop, host, port, &port, err, errlen)))
		goto fail;
	/* connect to every lower rank, accept every higher one */
	for (int j = 0; j < c->rank; j++) {
		char e2[256] = "";
		split(cfg->addrs[j], host, sizeof(host), &port);
		rc = hora_net_connect(c->loop, host, port, c->cfg.connect_timeout_ms, &c->peer[j], e2,
				      sizeof(e2));
		if (rc) {
			snprintf(err, errlen, "rank %d: connecting to rank %d at %s: %s", c->rank, j,
				 cfg->addrs[j], e2);
			goto fail;
		}
		if (hora_net_peer_node(c->peer[j]) != (uint32_t)j) {
			snprintf(err, errlen, "rank %d: %s answered as rank %u, expected %d", c->rank,
				 cfg->addrs[j], hora_net_peer_node(c->peer[j]), j);
			rc = -EPROTO;
			goto fail;
		}
	}
	for (int k = c->rank + 1; k < c->n; k++) {
		struct hora_net_peer *p;
		char e2[256] = "";
		rc = hora_net_accept(c->loop, c->cfg.connect_timeout_ms, &p, e2, sizeof(e2));
		if (rc) {
			snprintf(err, errlen, "rank %d: waiting for ranks above: %s", c->rank, e2);
			goto fail;
		}
		uint32_t j = hora_net_peer_node(p);
		if (j <= (uint32_t)c->rank || j >= (uint32_t)c->n || c->peer[j]) {
			snprintf(err, errlen, "rank %d: unexpected peer claiming rank %u", c->rank, j);
			hora_net_peer_close(p);
			rc = -EPROTO;
			goto fail;
		}
		c->peer[j] = p;
	}
	if ((rc = fast_setup(c, err, errlen)))
		goto fail;
	*out = c;
	return 0;
fail:
	hora_net_comm_destroy(c);
	return rc;
}

static void close_all(struct hora_net_comm *c)
{
	pthread_mutex_lock(&c->links_mu);
	for (int i = 0; c->peer && i < c->n; i++) {
		hora_net_peer_close(c->peer[i]);
		c->peer[i] = NULL;
	}
	for (int i = 0; c->fast && i < c->n; i++)
		if (c->fast[i] >= 0) {
			close(c->fast[i]);
			c->fast[i] = -1;
		}
	pthread_mutex_unlock(&c->links_mu);
}

void hora_net_comm_interrupt(struct hora_net_comm *c, const char *why)
{
	pthread_mutex_lock(&c->links_mu);
	atomic_store(&c->interrupted, 1);
	for (int i = 0; c->fast && i < c->n; i++)
		if (c->fast[i] >= 0)
			shutdown(c->fast[i], SHUT_RD); /* a blocked receive returns now; the
							   notice of fail_peer can still leave */
	for (int i = 0; c->peer && i < c->n; i++)
		hora_net_peer_abort(c->peer[i], why);
	pthread_mutex_unlock(&c->links_mu);
}

void hora_net_comm_destroy(struct hora_net_comm *c)
{
	if (!c)
		return;
	close_all(c);
	hora_net_loop_destroy(c->loop);
	pthread_mutex_destroy(&c->links_mu);
	free(c->peer);
	free(c->fast);
	free(c->pool);
	free(c->small);
	free(c->scratch);
	free(c);
}

/* ---- errors ---------------------------------------------------------------------- */

/* Whom a notice from rank `from` names as the cause, for our own notices:
 * the rank it names, or the sender if it names us (it gave up on us: to the
 * others, the trouble started there). */
static void note_lost(struct hora_net_comm *c, uint32_t who, int from)
{
	int none = -1;
	atomic_compare_exchange_strong(&c->lost_origin, &none, who == (uint32_t)c->rank ? from : (int)who);
}

/* A notice from rank `from` about call `seq`, read in call `cur`: records
 * its origin and says what it means in out. Returns its kind, 0 if it is
 * none. */
static uint32_t take_notice(struct hora_net_comm *c, uint32_t kind, uint32_t who, int from, uint64_t seq,
			    uint64_t cur, char *out, size_t n)
{
	if (who >= (uint32_t)c->n || (kind != K_LOST && kind != K_ABORT))
		return 0;
	char in[48] = "";
	if (seq != cur) /* it stopped in a call we had finished */
		snprintf(in, sizeof(in), " in call #%llu", (unsigned long long)seq);
	if (kind == K_ABORT) {
		int none = -1; /* the first ABORT seen names the origin for good */
		atomic_compare_exchange_strong(&c->abort_origin, &none, (int)who);
		snprintf(out, n, "rank %u stopped%s: it saw mismatched collectives (its error names both calls)",
			 who, in);
	} else {
		if (who == (uint32_t)from)
			snprintf(out, n, "rank %d stopped%s on an error of its own (its error says which)", from,
				 in);
		else
			snprintf(out, n, "rank %d stopped%s: it lost rank %u", from, in, who);
		note_lost(c, who, from);
	}
	return kind;
}

/* What rank `peer` said on its fast socket before it closed, if it did (a
 * K_LOST or K_ABORT for this call or the one before), as " (rank P had
 * stopped: ...)"; returns the notice's kind, 0 if none. Waits up to 20 ms
 * for it: it was sent before the close that brought us here, but on another
 * connection. Sets lost_origin or abort_origin from it. */
static uint32_t peer_notice(struct hora_net_comm *c, int peer, char *out, size_t n)
{
	out[0] = 0;
	if (!c->fast || peer < 0 || peer >= c->n || c->fast[peer] < 0)
		return 0;
	uint8_t b[FP_BYTES];
	ssize_t got = recv(c->fast[peer], b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (got != FP_BYTES) {
		struct pollfd pf = {.fd = c->fast[peer], .events = POLLIN};
		if (poll(&pf, 1, 20) != 1)
			return 0;
		got = recv(c->fast[peer], b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	}
	if (got != FP_BYTES)
		return 0;
	static const uint8_t zero[8];
	uint64_t seq;
	uint32_t kind, who;
	memcpy(&seq, b, 8);
	memcpy(&kind, b + 16, 4);
	memcpy(&who, b + 24, 4);
	/* a notice (zero where a fingerprint has count, dtype, op, nranks and
	 * path) of this call or the one before (we may have finished it, it did
	 * not) */
	if (memcmp(b + 8, zero, 8) || memcmp(b + 20, zero, 4) || memcmp(b + 28, zero, 4) ||
	    seq > c->seq || seq + 1 < c->seq)
		return 0;
	char what[200];
	kind = take_notice(c, kind, who, peer, seq, c->seq, what, sizeof(what));
	if (kind)
		snprintf(out, n, " (%s)", what);
	return kind;
}

/* The call fails: record why (once), tell every rank why, break every
 * connection. peer: the rank the failure came from, -1 if none. */
static int fail_peer(struct hora_net_comm *c, int rc, int peer, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail_peer(struct hora_net_comm *c, int rc, int peer, const char *fmt, ...)
{
	if (atomic_load(&c->interrupted))
		peer = -1; /* our own doing, whatever peer it showed at */
	if (!c->broken) {
		int k = snprintf(c->err, sizeof(c->err), "rank %d (view %u), %s #%llu: ", c->rank,
				 c->cfg.opts.view, kind_name[c->kind], (unsigned long long)c->seq);
		va_list ap;
		va_start(ap, fmt);
		k += vsnprintf(c->err + k, sizeof(c->err) - (size_t)k, fmt, ap);
		va_end(ap);
		uint32_t told = 0;
		if (rc != -EBADE && k > 0 && (size_t)k < sizeof(c->err))
			told = peer_notice(c, peer, c->err + k, sizeof(c->err) - (size_t)k);
		c->broken = rc;
		/* tell the ranks waiting on us why before closing: a mismatch (ours,
		 * or one a notice told us of) names the rank that saw one first, a
		 * loss the rank lost first (the one a notice told us of, else the
		 * peer that failed us, else ourselves) */
		uint32_t kind, who;
		if (rc == -EBADE || told == K_ABORT) {
			const int origin = atomic_load(&c->abort_origin);
			kind = K_ABORT;
			who = (uint32_t)(origin >= 0 ? origin : c->rank);
		} else {
			const int origin = atomic_load(&c->lost_origin);
			kind = K_LOST;
			who = (uint32_t)(origin >= 0 ? origin : peer >= 0 ? peer : c->rank);
		}
		for (int i = 0; c->fast && i < c->n; i++)
			if (c->fast[i] >= 0) {
				uint8_t b[FP_BYTES] = {0};
				memcpy(b, &c->seq, 8);
				memcpy(b + 16, &kind, 4);
				memcpy(b + 24, &who, 4);
				ssize_t w = send(c->fast[i], b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL);
				(void)w; /* best effort */
			}
		/* break every connection: ranks waiting on us fail too, now */
		close_all(c);
	}
	return rc;
}

#define fail(c, rc, ...) fail_peer(c, rc, -1, __VA_ARGS__)

/* ---- fingerprints -------------------------------------------------------------- */

/* path: which algorithm this rank runs the call with (settings such as
 * small_bytes may differ between ranks: then the data would not line up),
 * layout: the pipelined ring's and chain's segment, slice and depth */
enum path { P_NONE, P_SMALL, P_DIRECT, P_RING, P_CHAIN, P_PATHS };
static const char *const path_name[P_PATHS] = {"?", "a latency algorithm on the small-message sockets",
					       "the direct ring", "the pipelined ring", "the pipelined chain"};

struct fp {
	uint64_t seq, count;
	uint32_t kind, root;
	uint8_t dtype, op;
	uint16_t nranks;
	uint8_t path;
	uint16_t layout;
};

static void via(struct fp *f, const struct hora_net_comm *c, enum path p)
{
	f->path = (uint8_t)p;
	f->layout = 0;
	if (p == P_RING || p == P_CHAIN) {
		uint64_t h = c->cfg.segment_bytes * 0x9E3779B97F4A7C15ull;
		h ^= (c->cfg.slice_bytes + 1) * 0xC2B2AE3D27D4EB4Full + (uint64_t)c->cfg.depth;
		f->layout = (uint16_t)((h >> 48) | 1);
	}
}

static void fp_put(uint8_t *b, const struct fp *f)
{
	memset(b, 0, FP_BYTES);
	memcpy(b, &f->seq, 8);
	memcpy(b + 8, &f->count, 8);
	memcpy(b + 16, &f->kind, 4);
	b[20] = f->dtype;
	b[21] = f->op;
	memcpy(b + 22, &f->nranks, 2);
	memcpy(b + 24, &f->root, 4);
	b[28] = f->path;
	memcpy(b + 29, &f->layout, 2);
}

static void describe(char *s, size_t n, const struct fp *f)
{
	int k = snprintf(s, n, "%s #%llu (count %llu, %s", f->kind < K_KINDS ? kind_name[f->kind] : "?",
			 (unsigned long long)f->seq, (unsigned long long)f->count,
			 f->dtype < HORA_NET_DTYPES ? hora_net_dtype_name(f->dtype) : "?");
	if (f->kind == K_ALLREDUCE || f->kind == K_REDUCE_SCATTER)
		k += snprintf(s + k, n - (size_t)k, ", %s", f->op < HORA_NET_OPS ? hora_net_op_name(f->op) : "?");
	if (f->kind == K_BROADCAST)
		k += snprintf(s + k, n - (size_t)k, ", root %u", f->root);
	snprintf(s + k, n - (size_t)k, ", %u ranks)", f->nranks);
}

struct fp_ctx {
	struct hora_net_comm *c;
	const struct fp *mine;
	int from;
	int rc;        /* what fp_check_cb found, reported by the caller */
	char msg[400];
};

/* 0; -EBADE for a mismatch or an ABORT notice, -ECONNRESET for a LOST
 * notice, with the reason in msg. Its only side effect is recording a
 * notice's origin (atomics: callbacks on the comm thread use it too). */
static int fp_compare(const struct hora_net_comm *c, const uint8_t *b, const struct fp *mine, int from,
		      char *msg, size_t len)
{
	struct fp o;
	memcpy(&o.seq, b, 8);
	memcpy(&o.count, b + 8, 8);
	memcpy(&o.kind, b + 16, 4);
	o.dtype = b[20];
	o.op = b[21];
	memcpy(&o.nranks, b + 22, 2);
	memcpy(&o.root, b + 24, 4);
	o.path = b[28];
	memcpy(&o.layout, b + 29, 2);
	switch (take_notice((struct hora_net_comm *)c, o.kind, o.root, from, o.seq, mine->seq, msg, len)) {
	case K_ABORT:
		return -EBADE;
	case K_LOST:
		return -ECONNRESET;
	}
	const bool same_call = o.seq == mine->seq && o.count == mine->count && o.kind == mine->kind &&
			       o.dtype == mine->dtype && o.op == mine->op && o.nranks == mine->nranks &&
			       o.root == mine->root;
	if (same_call && o.path == mine->path && o.layout == mine->layout)
		return 0;
	char a[160], b2[160];
	describe(a, sizeof(a), mine);
	describe(b2, sizeof(b2), &o);
	if (same_call && o.path != mine->path && o.path < P_PATHS) {
		snprintf(msg, len, "mismatched collective settings: rank %d runs %s by %s but rank %d by %s; "
				   "collectives.algorithm, small_bytes and medium_bytes must be the same on "
				   "every rank", c->rank, a, path_name[mine->path], from, path_name[o.path]);
		return -EBADE;
	}
	if (same_call && o.path == mine->path) {
		snprintf(msg, len, "mismatched collective settings: rank %d and rank %d run %s by %s with "
				   "different segment_size, slice_size or depth; they must be the same on every rank",
			 c->rank, from, a, path_name[mine->path]);
		return -EBADE;
	}
	snprintf(msg, len, "mismatched collectives: rank %d called %s but rank %d called %s", c->rank, a,
		 from, b2);
	return -EBADE;
}

static int fp_check(struct hora_net_comm *c, const uint8_t *b, const struct fp *mine, int from)
{
	char msg[400];
	int rc = fp_compare(c, b, mine, from, msg, sizeof(msg));
	return rc ? fail(c, rc, "%s", msg) : 0;
}

/* Runs inside the exchange: only compares. fail() (ABORT to every peer,
 * every socket closed) must wait until the exchange has returned, since it
 * may first have to finish a message it is halfway through. */
static int fp_check_cb(void *arg, const void *h)
{
	struct fp_ctx *x = arg;
	return x->rc = fp_compare(x->c, h, x->mine, x->from, x->msg, sizeof(x->msg));
}

static int xwait(struct hora_net_comm *c, struct hora_net_req *r, int peer, const char *what)
{
	char e[256];
	int rc = hora_net_wait(r, e, sizeof(e));
	if (rc)
		return fail_peer(c, rc, peer, "%s rank %d: %s", what, peer, e);
	return 0;
}

/* ---- small messages: the fast channel ----------------------------------------- */

/* send {fingerprint, body} to rank `to` and/or receive {fingerprint, body}
 * from rank `from` (-1: none); bodies are bytes long; the received
 * fingerprint is checked as soon as it is in */
static int fx2(struct hora_net_comm *c, int to, const void *obody, size_t obytes, int from, void *ibody,
	       size_t ibytes, const struct fp *f)
{
	struct fp_ctx x = {.c = c, .mine = f, .from = from};
	uint8_t oh[FP_BYTES], ih[FP_BYTES];
	char e[256];
	int dir = 0, torn = 0;
	fp_put(oh, f);
	int rc = hora_net_fast_xchg(to >= 0 ? c->fast[to] : -1, oh, obody, obytes,
				    from >= 0 ? c->fast[from] : -1, ih, ibody, ibytes, FP_BYTES,
				    fp_check_cb, &x, c->io_timeout_ms, c->spin_us, &dir, &torn, e, sizeof(e));
	if (torn) { /* rank `to` is inside our message: no ABORT after it, just close */
		pthread_mutex_lock(&c->links_mu);
		close(c->fast[to]);
		c->fast[to] = -1;
		pthread_mutex_unlock(&c->links_mu);
	}
	if (rc && !c->broken) {
		if (x.rc)
			return fail_peer(c, rc, x.rc == -EBADE ? -1 : from, "%s", x.msg);
		return fail_peer(c, rc, dir ? from : to, "%s rank %d: %s", dir ? "receive from" : "send to",
				 dir ? from : to, e);
	}
	return rc;
}

static int fx(struct hora_net_comm *c, int to, const void *obody, int from, void *ibody, size_t bytes,
	      const struct fp *f)
{
	return fx2(c, to, obody, bytes, from, ibody, bytes, f);
}

/* buf holds this rank's data and gets the result; tmp holds one message */
static int rec_doubling(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t,
			enum hora_net_op op, const struct fp *f)
{
	const size_t bytes = count * hora_net_dtype_size(t);
	uint8_t *theirs = c->small;
	int p2 = 1;
	while (p2 * 2 <= c->n)
		p2 *= 2;
	const int r = c->rank, extra = c->n - p2;
	int rc;
	if (r >= p2) /* fold in: give our data to r - p2, get the result back */
		return (rc = fx(c, r - p2, buf, -1, NULL, bytes, f)) ? rc : fx(c, -1, NULL, r - p2, buf, bytes, f);
	if (r < extra) {
		if ((rc = fx(c, -1, NULL, r + p2, theirs, bytes, f)))
			return rc;
		hora_net_reduce(buf, buf, theirs, count, t, op);
	}
	for (int mask = 1; mask < p2; mask <<= 1) {
		int partner = r ^ mask;
		if ((rc = fx(c, partner, buf, partner, theirs, bytes, f)))
			return rc;
		if (r < partner) /* lower rank's data first: both get the same bits */
			hora_net_reduce(buf, buf, theirs, count, t, op);
		else
			hora_net_reduce(buf, theirs, buf, count, t, op);
	}
	if (op == HORA_NET_AVG)
		hora_net_scale(buf, count, t, c->n);
	if (r < extra && (rc = fx(c, r + p2, buf, -1, NULL, bytes, f)))
		return rc;
	return 0;
}

/* binomial tree from root over relative ranks */
static int tree_bcast(struct hora_net_comm *c, void *buf, size_t bytes, int root, const struct fp *f)
{
	const int n = c->n, p = (c->rank - root + n) % n;
	int mask = 1, rc;
	while (mask < n) {
		if (p & mask) {
			if ((rc = fx(c, -1, NULL, (p - mask + root) % n, buf, bytes, f)))
				return rc;
			break;
		}
		mask <<= 1;
	}
	for (mask >>= 1; mask > 0; mask >>= 1)
		if (p + mask < n && (rc = fx(c, (p + mask + root) % n, buf, -1, NULL, bytes, f)))
			return rc;
	return 0;
}

/* A call that moves its data over the transport shows its fingerprint on
 * the small-message sockets first, to the ranks it sends to and receives
 * from: a rank that runs a different call by a latency algorithm (which
 * only ever reads those sockets) sees it there, and the mismatch is named at
 * once instead of both sides waiting on different channels until the I/O
 * timeout. One 32-byte exchange a call. */
static int fp_on_fast(struct hora_net_comm *c, int to, int from, const struct fp *f)
{
	return fx2(c, to, NULL, 0, from, NULL, 0, f);
}

/* the pipelined ring's call: its path in the fingerprint, shown to both
 * neighbours on the fast sockets */
static int ring_fp(struct hora_net_comm *c, struct fp *f)
{
	via(f, c, P_RING);
	return fp_on_fast(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f);
}

/* ---- ring ---------------------------------------------------------------------- */

/* Which halves of the ring schedule run, and how chunks are laid out. */
enum ring_mode { RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALLGATHER };

struct ring {
	size_t count, esz, seg; /* seg in elements; count: whole buffer (split in n) or per rank */
	int n, r, fixed;        /* fixed: every chunk is `count` elements (allgather, reduce-scatter) */
};

static void chunk_of(const struct ring *g, int ch, size_t *off, size_t *len)
{
	if (g->fixed) {
		*off = (size_t)ch * g->count;
		*len = g->count;
		return;
	}
	size_t base = g->count / (size_t)g->n, rem = g->count % (size_t)g->n;
	*off = (size_t)ch * base + ((size_t)ch < rem ? (size_t)ch : rem);
	*len = base + ((size_t)ch < rem ? 1 : 0);
}

static size_t nsegs(const struct ring *g, size_t len)
{
	return (len + g->seg - 1) / g->seg;
}

/* Steps 0..n-2 reduce (rank r ends owning chunk r), n-1..2n-3 gather. */
static int send_chunk(const struct ring *g, int t)
{
	int u = t < g->n - 1 ? t + 1 : t - (g->n - 1);
	return ((g->r - u) % g->n + g->n) % g->n;
}
static int recv_chunk(const struct ring *g, int t)
{
	return ((send_chunk(g, t) - 1) % g->n + g->n) % g->n;
}

/* (step, segment) of each receive, in the order both neighbours walk them */
struct slot {
	int t;
	size_t k;
};

static size_t seg_len(const struct ring *g, size_t len, size_t k)
{
	size_t so = k * g->seg;
	return len - so < g->seg ? len - so : g->seg;
}

/* Fingerprints with both neighbours (left/right -1: none), before the
 * chain broadcast's data: a mismatch is named before any data is used. */
static int exchange_fp(struct hora_net_comm *c, int left, int right, const struct fp *f)
{
	uint8_t out[FP_BYTES], in[FP_BYTES];
	struct hora_net_req *r = NULL, *sreq = NULL;
	fp_put(out, f);
	int rc = 0;
	if (left >= 0 && posted_ok(c, hora_net_irecv(c->peer[left], in, FP_BYTES, NULL, NULL, &r)))
		rc = fail_peer(c, c->post_err, left, "cannot post a receive from rank %d: %s", left,
			       POST_WHY(c));
	if (!rc && right >= 0 && posted_ok(c, hora_net_isend(c->peer[right], out, FP_BYTES, NULL, NULL, &sreq)))
		rc = fail_peer(c, c->post_err, right, "cannot post a send to rank %d: %s", right,
			       POST_WHY(c));
	if (r) { /* after a failure the peers are closed: the wait only frees */
		int r2 = c->broken ? (hora_net_wait(r, NULL, 0), c->broken) : xwait(c, r, left, "receive from");
		if (!r2)
			r2 = fp_check(c, in, f, left);
		rc = rc ? rc : r2;
	}
	if (sreq) {
		int r2 = c->broken ? (hora_net_wait(sreq, NULL, 0), c->broken) : xwait(c, sreq, right, "send to");
		rc = rc ? rc : r2;
	}
	return rc;
}

/* ---- the ring driven by completions on the comm thread ------------------------------
 *
 * The same schedule, buffers and reduction order as ring() (so the same
 * bits), but every receive completion runs on the comm thread: it reduces
 * the segment, posts the next receive and the segment's next send inline,
 * with no hand-off to the calling thread, which sleeps until the whole
 * collective is done. One runnable thread per rank instead of two.
 */
struct cbslot {
	struct cbring *r;
	size_t i; /* receive index, or (size_t)-1 for a send */
};

struct cbring {
	struct hora_net_comm *c;
	enum ring_mode mode;
	const uint8_t *src;
	uint8_t *work, *dst;
	struct ring g;
	enum hora_net_dtype t;
	enum hora_net_op op;
	int n, t0, t1, left, right;
	struct slot *slots;
	struct cbslot *ctx; /* one per receive, plus one shared by the sends */
	bool *arrived;
	size_t ns, depth, posted, processed;
	size_t sends_posted, sends_done;
	int outstanding; /* requests whose callback has not run */
	int err, err_peer;
	const char *err_dir;
	char errmsg[400];
	bool done;
	const struct fp *f;
	uint8_t fp_out[FP_BYTES], fp_in[FP_BYTES];
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void cb_recv(void *arg, int status, const char *err);
static void cb_send(void *arg, int status, const char *err);

/* with r->mu held */
static void cb_error(struct cbring *r, int rc, const char *dir, int peer, const char *msg)
{
	if (!r->err) {
		r->err = rc;
		r->err_dir = dir;
		r->err_peer = peer;
		snprintf(r->errmsg, sizeof(r->errmsg), "%s", msg ? msg : strerror(-rc));
		if (rc == -EBADE) /* a fingerprint mismatch: the message says it all */
			r->err_dir = NULL;
	}
	r->done = true;
	pthread_cond_broadcast(&r->cv);
}

static void cb_check_done(struct cbring *r)
{
	if (r->processed == r->ns && r->sends_done == r->sends_posted) {
		r->done = true;
		pthread_cond_broadcast(&r->cv);
	}
}

static void cb_post_recv(struct cbring *r)
{
	const size_t i = r->posted;
	size_t off, len;
	chunk_of(&r->g, recv_chunk(&r->g, r->slots[i].t), &off, &len);
	size_t so = r->slots[i].k * r->g.seg, sl = seg_len(&r->g, len, r->slots[i].k);
	uint8_t *d = r->slots[i].t < r->n - 1 ? r->c->pool + (i % r->depth) * r->c->cfg.segment_bytes
					      : r->dst + (off + so) * r->g.esz;
	r->ctx[i] = (struct cbslot){r, i};
	r->outstanding++, r->posted++; /* before: the receive may complete inline */
	if (posted_ok(r->c, hora_net_irecv(r->c->peer[r->left], d, sl * r->g.esz, cb_recv, &r->ctx[i], NULL))) {
		r->outstanding--, r->posted--;
		cb_error(r, r->c->post_err, "receive from", r->left, "cannot post a receive");
	}
}

static void cb_post_send(struct cbring *r, const uint8_t *p, size_t bytes)
{
	r->outstanding++, r->sends_posted++; /* before: the send may complete inline */
	if (posted_ok(r->c, hora_net_isend(r->c->peer[r->right], p, bytes, cb_send, &r->ctx[r->ns], NULL))) {
		r->outstanding--, r->sends_posted--;
		cb_error(r, r->c->post_err, "send to", r->right, "cannot post a send");
	}
}

static void cb_recv(void *arg, int status, const char *err)
{
	struct cbslot *x = arg;
	struct cbring *r = x->r;
	pthread_mutex_lock(&r->mu);
	r->outstanding--;
	if (status)
		cb_error(r, status, "receive from", r->left, err);
	if (r->err) {
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
		return;
	}
	/* with several sockets per peer, receives can finish out of order:
	 * segments are reduced and sent on strictly in schedule order */
	r->arrived[x->i] = true;
	while (r->processed < r->ns && r->arrived[r->processed] && !r->err) {
		const size_t i = r->processed;
		const int tt = r->slots[i].t, n = r->n;
		const size_t k = r->slots[i].k;
		size_t off, len;
		chunk_of(&r->g, recv_chunk(&r->g, tt), &off, &len);
		const size_t so = k * r->g.seg, sl = seg_len(&r->g, len, k), esz = r->g.esz;
		const uint8_t *next;
		uint8_t *slot = r->c->pool + (i % r->depth) * r->c->cfg.segment_bytes;
		if (tt < n - 2) {
			uint8_t *p = r->work + (off + so) * esz;
			hora_net_reduce(p, slot, r->src + (off + so) * esz, sl, r->t, r->op);
			next = p;
		} else if (tt == n - 2) {
			uint8_t *d = r->mode == RING_REDUCE_SCATTER ? r->dst + so * esz : r->dst + (off + so) * esz;
			hora_net_reduce(d, slot, r->src + (off + so) * esz, sl, r->t, r->op);
			if (r->op == HORA_NET_AVG)
				hora_net_scale(d, sl, r->t, n);
			next = d;
		} else {
			next = r->dst + (off + so) * esz;
		}
		r->processed++;
		/* the send first: posting the receive may complete a parked message
		 * inline, whose callback then sends too, and sends must leave in
		 * schedule order */
		if (tt + 1 < r->t1 && !r->err)
			cb_post_send(r, next, sl * esz);
		if (r->posted < r->ns && !r->err)
			cb_post_recv(r); /* into the slot just freed */
	}
	cb_check_done(r);
	pthread_mutex_unlock(&r->mu);
}

static void cb_send(void *arg, int status, const char *err)
{
	struct cbring *r = ((struct cbslot *)arg)->r;
	pthread_mutex_lock(&r->mu);
	r->outstanding--;
	r->sends_done++;
	if (status)
		cb_error(r, status, "send to", r->right, err);
	else
		cb_check_done(r);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void cb_fp_sent(void *arg, int status, const char *err)
{
	struct cbring *r = arg;
	pthread_mutex_lock(&r->mu);
	r->outstanding--;
	if (status)
		cb_error(r, status, "send to", r->right, err);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* the left neighbour's fingerprint is in: check it, then post everything
 * from here, on the comm thread, so that every send and receive is issued
 * in schedule order */
static void cb_start(void *arg, int status, const char *err)
{
	struct cbring *r = arg;
	pthread_mutex_lock(&r->mu);
	r->outstanding--;
	char msg[400];
	int rc;
	if (status) {
		cb_error(r, status, "receive from", r->left, err);
	} else if ((rc = fp_compare(r->c, r->fp_in, r->f, r->left, msg, sizeof(msg)))) {
		cb_error(r, rc, NULL, r->left, msg);
	} else {
		/* the first step's sends before any receive: a receive can complete
		 * inline (data already parked) and its callback sends the next step */
		size_t off, len;
		chunk_of(&r->g, send_chunk(&r->g, r->t0), &off, &len);
		const uint8_t *base = r->mode == RING_ALLGATHER ? r->dst + off * r->g.esz : r->src + off * r->g.esz;
		for (size_t k = 0; k < nsegs(&r->g, len) && !r->err; k++)
			cb_post_send(r, base + k * r->g.seg * r->g.esz, seg_len(&r->g, len, k) * r->g.esz);
		while (r->posted < r->ns && r->posted < r->depth && !r->err)
			cb_post_recv(r);
		cb_check_done(r);
	}
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* src: this rank's input (whole buffer for allreduce and reduce-scatter,
 * one chunk for allgather); dst: the output (whole buffer, or one chunk for
 * reduce-scatter); work: a whole buffer that holds partial sums until they
 * leave (dst for allreduce). They may be the same memory in the layouts
 * coll.h names. A partial sum of chunk c leaves from work before anything
 * can be gathered into c again: that data needs our partial first. */
static int ring_cb(struct hora_net_comm *c, enum ring_mode mode, const uint8_t *src, uint8_t *work,
		   uint8_t *dst, size_t count, enum hora_net_dtype t, enum hora_net_op op, const struct fp *f)
{
	const int n = c->n, rk = c->rank;
	struct cbring *r = calloc(1, sizeof(*r));
	if (!r)
		return fail(c, -ENOMEM, "out of memory for the ring");
	*r = (struct cbring){.c = c, .mode = mode, .src = src, .work = work, .dst = dst, .t = t, .op = op,
			     .n = n, .left = (rk - 1 + n) % n, .right = (rk + 1) % n,
			     .depth = (size_t)c->cfg.depth};
	r->g = (struct ring){count, hora_net_dtype_size(t), c->cfg.segment_bytes / hora_net_dtype_size(t), n,
			     rk, mode != RING_ALLREDUCE};
	if (!r->g.seg)
		r->g.seg = 1;
	r->t0 = mode == RING_ALLGATHER ? n - 1 : 0;
	r->t1 = mode == RING_REDUCE_SCATTER ? n - 1 : 2 * (n - 1);
	r->f = f;
	int rc;
	for (int tt = r->t0; tt < r->t1; tt++) {
		size_t off, len;
		chunk_of(&r->g, recv_chunk(&r->g, tt), &off, &len);
		r->ns += nsegs(&r->g, len);
	}
	r->slots = malloc(sizeof(*r->slots) * (r->ns ? r->ns : 1));
	r->ctx = malloc(sizeof(*r->ctx) * (r->ns + 1));
	r->arrived = calloc(r->ns + 1, 1);
	if (!r->slots || !r->ctx || !r->arrived) {
		free(r->arrived);
		size_t ns = r->ns;
		free(r->slots);
		free(r->ctx);
		free(r);
		return fail(c, -ENOMEM, "out of memory for %zu pipeline slots", ns);
	}
	size_t q = 0;
	for (int tt = r->t0; tt < r->t1; tt++) {
		size_t off, len;
		chunk_of(&r->g, recv_chunk(&r->g, tt), &off, &len);
		for (size_t k = 0; k < nsegs(&r->g, len); k++)
			r->slots[q++] = (struct slot){tt, k};
	}
	r->ctx[r->ns] = (struct cbslot){r, (size_t)-1};
	if (mode == RING_ALLGATHER) { /* our own chunk into place first */
		size_t off, len;
		chunk_of(&r->g, rk, &off, &len);
		if (dst + off * r->g.esz != src && len)
			memmove(dst + off * r->g.esz, src, len * r->g.esz);
	}
	/* recursive: a send posted from a callback can complete inline, and its
	 * callback then runs inside the first one on the comm thread */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&r->mu, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&r->cv, NULL);
	pthread_mutex_lock(&r->mu); /* callbacks wait until both are posted */
	fp_put(r->fp_out, f);
	if (posted_ok(r->c, hora_net_isend(c->peer[r->right], r->fp_out, FP_BYTES, cb_fp_sent, r, NULL)))
		cb_error(r, r->c->post_err, "send to", r->right, "cannot post a send");
	else
		r->outstanding++;
	if (!r->err && posted_ok(r->c, hora_net_irecv(c->peer[r->left], r->fp_in, FP_BYTES, cb_start, r, NULL)))
		cb_error(r, r->c->post_err, "receive from", r->left, "cannot post a receive");
	else if (!r->err)
		r->outstanding++;
	while (!r->done)
		pthread_cond_wait(&r->cv, &r->mu);
	rc = r->err;
	pthread_mutex_unlock(&r->mu);
	if (rc && !r->err_dir) /* closing the peers finishes every request still out */
		rc = fail(c, rc, "%s", r->errmsg);
	else if (rc)
		rc = fail_peer(c, rc, r->err_peer, "%s rank %d: %s", r->err_dir, r->err_peer, r->errmsg);
	pthread_mutex_lock(&r->mu);
	while (r->outstanding > 0)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r->slots);
	free(r->ctx);
	free(r->arrived);
	free(r);
	return rc;
}

/* Ring allreduce on the fast sockets, driven by the calling thread: the
 * same schedule and reduction order as the pipelined ring (so the same
 * bits), one exchange per step (send a chunk right while receiving one from
 * the left), no segments. For mid-sized messages on a real link this keeps
 * the ring's 2(N-1)/N bandwidth term without the comm-thread hand-offs that
 * dominate each step below a few MiB. Partial sums go to dst, one chunk of
 * scratch in c->small. */
static int direct_ring(struct hora_net_comm *c, const uint8_t *src, uint8_t *dst, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op, const struct fp *f)
{
	const int n = c->n, r = c->rank, left = (r - 1 + n) % n, right = (r + 1) % n;
	struct ring g = {count, hora_net_dtype_size(t), count ? count : 1, n, r, 0};
	int rc = 0;
	for (int tt = 0; tt < 2 * (n - 1) && !rc; tt++) {
		size_t so, sl, ro, rl;
		chunk_of(&g, send_chunk(&g, tt), &so, &sl);
		chunk_of(&g, recv_chunk(&g, tt), &ro, &rl);
		const uint8_t *out = (tt == 0 ? src : dst) + so * g.esz;
		uint8_t *in = tt < n - 1 ? c->small : dst + ro * g.esz;
		if ((rc = fx2(c, right, out, sl * g.esz, left, in, rl * g.esz, f)))
			break;
		if (tt < n - 1) { /* further-travelled data first, ours second */
			hora_net_reduce(dst + ro * g.esz, c->small, src + ro * g.esz, rl, t, op);
			if (tt == n - 2 && op == HORA_NET_AVG)
				hora_net_scale(dst + ro * g.esz, rl, t, n);
		}
	}
	return rc;
}

/* Pipelined chain root -> root+1 -> ... -> root-1: every segment is
 * forwarded as soon as it is in, so the time is about S/B + (N-2) segments. */
static int chain_bcast(struct hora_net_comm *c, uint8_t *buf, size_t bytes, int root, const struct fp *f)
{
	const int n = c->n, p = (c->rank - root + n) % n;
	const int left = p == 0 ? -1 : (c->rank - 1 + n) % n, right = p == n - 1 ? -1 : (c->rank + 1) % n;
	int rc = fp_on_fast(c, right, left, f);
	if (!rc)
		rc = exchange_fp(c, left, right, f);
	if (rc)
		return rc;
	const size_t seg = c->cfg.segment_bytes, ns = (bytes + seg - 1) / seg, depth = (size_t)c->cfg.depth;
	struct hora_net_req **rq = calloc(ns ? ns : 1, sizeof(*rq)), **sq = calloc(ns ? ns : 1, sizeof(*sq));
	if (!rq || !sq) {
		free(rq);
		free(sq);
		return fail(c, -ENOMEM, "out of memory for %zu segments", ns);
	}
	size_t posted = 0, sent = 0;
#define LEN(k) ((k) == ns - 1 ? bytes - (k) * seg : seg)
	for (; left >= 0 && posted < ns && posted < depth && !rc; posted++)
		if (posted_ok(c, hora_net_irecv(c->peer[left], buf + posted * seg, LEN(posted), NULL, NULL,
						&rq[posted])))
			rc = fail_peer(c, c->post_err, left, "cannot post a receive from rank %d: %s", left,
				       POST_WHY(c));
	for (size_t k = 0; k < ns && !rc; k++) {
		if (left >= 0) {
			rc = xwait(c, rq[k], left, "receive from");
			rq[k] = NULL;
			if (rc)
				break;
			if (posted < ns) {
				if (posted_ok(c, hora_net_irecv(c->peer[left], buf + posted * seg, LEN(posted), NULL, NULL,
						   &rq[posted])))
					rc = fail_peer(c, c->post_err, left, "cannot post a receive from rank %d: %s", left,
						       POST_WHY(c));
				posted++;
			}
		}
		if (right >= 0 && !rc) {
			if (posted_ok(c, hora_net_isend(c->peer[right], buf + k * seg, LEN(k), NULL, NULL, &sq[sent])))
				rc = fail_peer(c, c->post_err, right, "cannot post a send to rank %d: %s", right,
					       POST_WHY(c));
			else
				sent++;
		}
	}
#undef LEN
	for (size_t k = 0; k < sent; k++) {
		int r2 = c->broken ? (hora_net_wait(sq[k], NULL, 0), c->broken)
				   : xwait(c, sq[k], right, "send to");
		if (!rc)
			rc = r2;
	}
	for (size_t k = 0; k < ns; k++)
		if (rq[k])
			hora_net_wait(rq[k], NULL, 0);
	free(rq);
	free(sq);
	return rc;
}

/* ---- entry points --------------------------------------------------------------- */

static int begin(struct hora_net_comm *c, enum kind kind, size_t count, enum hora_net_dtype t,
		 enum hora_net_op op, int root, struct fp *f)
{
	if (c->broken)
		return c->broken;
	if (atomic_load(&c->interrupted))
		return fail(c, -ECANCELED, "the communicator was interrupted");
	if (t >= HORA_NET_DTYPES || op >= HORA_NET_OPS || root < 0 || root >= c->n) {
		snprintf(c->err, sizeof(c->err), "rank %d: %s: invalid dtype %d, op %d or root %d", c->rank,
			 kind_name[kind], t, op, root);
		return -EINVAL;
	}
	const bool gathered = kind == K_REDUCE_SCATTER || kind == K_ALLGATHER;
	const size_t per = hora_net_dtype_size(t) * (gathered ? (size_t)c->n : 1);
	if (count > (SIZE_MAX / 4) / per) { /* the byte sizes below must not wrap */
		snprintf(c->err, sizeof(c->err), "rank %d: %s: count %zu is too large", c->rank, kind_name[kind],
			 count);
		return -EINVAL;
	}
	c->seq++;
	c->kind = kind;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	atomic_store(&c->p_since_ms, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	atomic_store(&c->p_kind, (uint32_t)kind);
	atomic_store(&c->p_seq, c->seq);
	atomic_store(&c->p_inside, 1);
	*f = (struct fp){.seq = c->seq, .count = count, .kind = kind, .root = (uint32_t)root,
			 .dtype = (uint8_t)t, .op = (uint8_t)op, .nranks = (uint16_t)c->n};
	return 0;
}

/* direct_is_auto: the direct ring does not apply (broadcast), so a forced
 * direct ring means the automatic choice here */
/* Buffers that overlap other than in the documented in-place layout would be
 * read after they were written: refused before the call counts (so the
 * ranks' sequence numbers stay in step). */
static bool overlap(const void *a, size_t an, const void *b, size_t bn)
{
	const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
	return an && bn && a0 < b0 + bn && b0 < a0 + an;
}

static int bad_layout(struct hora_net_comm *c, enum kind kind, const char *how)
{
	snprintf(c->err, sizeof(c->err), "rank %d: %s: send and recv overlap; %s", c->rank, kind_name[kind],
		 how);
	return -EINVAL;
}

/* whole: N blocks of count; part: one block. Fine when part is this rank's
 * block of whole (in place) or apart from it. */
static bool bad_split(const struct hora_net_comm *c, const void *whole, const void *part, size_t count,
		      enum hora_net_dtype t)
{
	if (t >= HORA_NET_DTYPES || c->broken)
		return false; /* begin() says why */
	const size_t e = hora_net_dtype_size(t);
	return (const uint8_t *)part != (const uint8_t *)whole + (size_t)c->rank * count * e &&
	       overlap(whole, count * e * (size_t)c->n, part, count * e);
}

static bool use_small(const struct hora_net_comm *c, size_t bytes, size_t count, bool direct_is_auto)
{
	if (bytes > c->cfg.small_cap)
		return false; /* the small buffers hold small_cap */
	const bool automatic = c->algo == 0 || (c->algo == 3 && direct_is_auto);
	return c->algo == 2 || (automatic && (bytes <= c->cfg.small_bytes || count < (size_t)c->n));
}

/* the direct ring needs one chunk of scratch in c->small */
static bool use_direct(const struct hora_net_comm *c, size_t bytes)
{
	if (bytes / (size_t)c->n + 64 > c->cfg.small_cap)
		return false;
	return c->algo == 3 || (c->algo == 0 && bytes <= c->cfg.medium_bytes);
}

static int hora_net_allreduce_impl(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op)
{
	if (t < HORA_NET_DTYPES && send != recv &&
	    overlap(send, count * hora_net_dtype_size(t), recv, count * hora_net_dtype_size(t)) && !c->broken)
		return bad_layout(c, K_ALLREDUCE, "in place is send == recv");
	struct fp f;
	int rc = begin(c, K_ALLREDUCE, count, t, op, 0, &f);
	if (rc)
		return rc;
	const size_t bytes = count * hora_net_dtype_size(t);
	if (c->n == 1) {
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		return 0;
	}
	if (use_small(c, bytes, count, false)) {
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		via(&f, c, P_SMALL);
		return rec_doubling(c, recv, count, t, op, &f);
	}
	if (use_direct(c, bytes)) {
		via(&f, c, P_DIRECT);
		return direct_ring(c, send, recv, count, t, op, &f);
	}
	if ((rc = ring_fp(c, &f)))
		return rc;
	/* Large buffers go round the ring one slice (N x slice_bytes) after the
	 * other, so each step moves slice_bytes: a slice's
	 * partial sums are still in cache when they are sent on and gathered,
	 * where one pass over the whole buffer streams it through memory twice.
	 * Every slice checks the call's fingerprint again (32 bytes a slice).
	 * Slices are cut evenly, so none is much shorter than the others (and
	 * none has fewer elements than ranks). */
	const size_t esz = hora_net_dtype_size(t), slice = (size_t)c->n * (c->cfg.slice_bytes / esz);
	const size_t ns = slice && count > slice ? (count + slice - 1) / slice : 1;
	for (size_t i = 0, o = 0; i < ns; i++) {
		const size_t k = count / ns + (i < count % ns ? 1 : 0);
		uint8_t *out = (uint8_t *)recv + o * esz;
		if ((rc = ring_cb(c, RING_ALLREDUCE, (const uint8_t *)send + o * esz, out, out, k, t, op, &f)))
			return rc;
		o += k;
	}
	return 0;
}

static int hora_net_reduce_scatter_impl(struct hora_net_comm *c, const void *send, void *recv, size_t recvcount,
			    enum hora_net_dtype t, enum hora_net_op op)
{
	if (bad_split(c, send, recv, recvcount, t))
		return bad_layout(c, K_REDUCE_SCATTER, "in place is recv == send + rank x recvcount");
	struct fp f;
	int rc = begin(c, K_REDUCE_SCATTER, recvcount, t, op, 0, &f);
	if (rc)
		return rc;
	if (c->n == 1) {
		size_t bytes = recvcount * hora_net_dtype_size(t);
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		return 0;
	}
	const size_t esz = hora_net_dtype_size(t), total = recvcount * esz * (size_t)c->n;
	uint8_t *work = (uint8_t *)send; /* in place: the caller's buffer holds the partials */
	if ((const uint8_t *)recv != (const uint8_t *)send + (size_t)c->rank * recvcount * esz) {
		if (c->scratch_bytes < total) { /* out of place: one scratch buffer, kept */
			free(c->scratch);
			c->scratch_bytes = 0;
			if (!(c->scratch = malloc(total ? total : 1)))
				return fail(c, -ENOMEM, "out of memory for %zu bytes of partial sums", total);
			c->scratch_bytes = total;
		}
		work = c->scratch;
	}
	if ((rc = ring_fp(c, &f)))
		return rc;
	return ring_cb(c, RING_REDUCE_SCATTER, send, work, recv, recvcount, t, op, &f);
}

static int hora_net_allgather_impl(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t)
{
	if (bad_split(c, recv, send, count, t))
		return bad_layout(c, K_ALLGATHER, "in place is send == recv + rank x count");
	struct fp f;
	int rc = begin(c, K_ALLGATHER, count, t, HORA_NET_SUM, 0, &f);
	if (rc)
		return rc;
	if (c->n == 1) {
		size_t bytes = count * hora_net_dtype_size(t);
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		return 0;
	}
	if ((rc = ring_fp(c, &f)))
		return rc;
	return ring_cb(c, RING_ALLGATHER, send, recv, recv, count, t, HORA_NET_SUM, &f);
}

static int hora_net_broadcast_impl(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int root)
{
	struct fp f;
	int rc = begin(c, K_BROADCAST, count, t, HORA_NET_SUM, root, &f);
	if (rc || c->n == 1)
		return rc;
	const size_t bytes = count * hora_net_dtype_size(t);
	if (use_small(c, bytes, count, true)) {
		via(&f, c, P_SMALL);
		return tree_bcast(c, buf, bytes, root, &f);
	}
	via(&f, c, P_CHAIN);
	return chain_bcast(c, buf, bytes, root, &f);
}

static int hora_net_barrier_impl(struct hora_net_comm *c)
{
	struct fp f;
	int rc = begin(c, K_BARRIER, 0, HORA_NET_I32, HORA_NET_SUM, 0, &f);
	if (rc || c->n == 1)
		return rc;
	int dummy = 0;
	via(&f, c, P_SMALL);
	return rec_doubling(c, &dummy, 0, HORA_NET_I32, HORA_NET_SUM, &f);
}

/* ---- entry points: progress bookkeeping around the implementations -------------- */

static int left_call(struct hora_net_comm *c, int rc)
{
	atomic_store(&c->p_inside, 0);
	return rc;
}

int hora_net_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op)
{
	return left_call(c, hora_net_allreduce_impl(c, send, recv, count, t, op));
}
int hora_net_reduce_scatter(struct hora_net_comm *c, const void *send, void *recv, size_t recvcount,
			    enum hora_net_dtype t, enum hora_net_op op)
{
	return left_call(c, hora_net_reduce_scatter_impl(c, send, recv, recvcount, t, op));
}
int hora_net_allgather(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t)
{
	return left_call(c, hora_net_allgather_impl(c, send, recv, count, t));
}
int hora_net_broadcast(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int root)
{
	return left_call(c, hora_net_broadcast_impl(c, buf, count, t, root));
}
int hora_net_barrier(struct hora_net_comm *c)
{
	return left_call(c, hora_net_barrier_impl(c));
}

void hora_net_comm_progress(struct hora_net_comm *c, uint64_t *seq, uint32_t *kind, int *inside,
			    int64_t *since_ms)
{
	*seq = atomic_load(&c->p_seq);
	*kind = atomic_load(&c->p_kind);
	*inside = atomic_load(&c->p_inside);
	*since_ms = atomic_load(&c->p_since_ms);
}

const char *hora_net_coll_name(uint32_t kind)
{
	return kind < K_KINDS ? kind_name[kind] : "?";
}
