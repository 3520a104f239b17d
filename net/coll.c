/* coll.c - communicator set-up and allreduce.
 *
 * Ring (large messages): reduce-scatter then allgather, 2(N-1) steps; each
 * step moves one of N chunks to the right neighbour, cut into segments so
 * that sending, receiving and reducing overlap: the send of step t+1 of a
 * segment leaves as soon as step t of it was received and reduced, while
 * `depth` receives stay posted ahead into a pool of segment buffers (extra
 * memory depth x segment, never a copy of the whole buffer). The allgather
 * receives straight into place. The owner of each chunk finishes it (AVG's
 * division) before sending it around, so every rank ends with the same bits.
 *
 * Recursive doubling (small messages): log2 P exchanges of the whole
 * buffer, plus a fold-in/fold-out step for N not a power of two. Each pair
 * reduces (lower rank's data) op (higher rank's data), so both get the same
 * bits. The fingerprint travels in the same message as the data.
 */
#include "coll.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP_BYTES 24

struct hora_net_comm {
	struct hora_net_comm_cfg cfg;
	struct hora_net_loop *loop;
	struct hora_net_peer **peer; /* peer[rank]; NULL for self */
	int rank, n;
	uint64_t seq;
	int algo;
	int broken;
	char err[512];
	uint8_t *pool;   /* depth segments */
	uint8_t *small;  /* 2 x (FP_BYTES + small_bytes) */
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

static int split(const char *hp, char *host, size_t n, uint16_t *port)
{
	const char *colon = strrchr(hp, ':');
	if (!colon || (size_t)(colon - hp) >= n)
		return -EINVAL;
	memcpy(host, hp, (size_t)(colon - hp));
	host[colon - hp] = 0;
	*port = (uint16_t)atoi(colon + 1);
	return 0;
}

int hora_net_comm_create(const struct hora_net_comm_cfg *cfg, struct hora_net_comm **out, char *err,
			 size_t errlen)
{
	*out = NULL;
	if (cfg->nranks < 1 || cfg->rank < 0 || cfg->rank >= cfg->nranks)
		return snprintf(err, errlen, "rank %d of %d: invalid", cfg->rank, cfg->nranks), -EINVAL;
	struct hora_net_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->rank = cfg->rank;
	c->n = cfg->nranks;
	if (!c->cfg.connect_timeout_ms)
		c->cfg.connect_timeout_ms = 30000;
	if (!c->cfg.small_bytes)
		c->cfg.small_bytes = 64 << 10;
	if (!c->cfg.segment_bytes)
		c->cfg.segment_bytes = 1 << 20;
	if (c->cfg.depth < 1)
		c->cfg.depth = 4;
	c->peer = calloc((size_t)c->n, sizeof(*c->peer));
	c->pool = malloc(c->cfg.segment_bytes * (size_t)c->cfg.depth);
	c->small = malloc(2 * (FP_BYTES + c->cfg.small_bytes + 64));
	int rc = -ENOMEM;
	if (!c->peer || !c->pool || !c->small)
		goto fail;
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
	if (split(cfg->addrs[c->rank], host, sizeof(host), &port) ||
	    (rc = hora_net_listen(c->loop, host, port, &port, err, errlen))) {
		if (!rc) {
			snprintf(err, errlen, "rank %d: bad address '%s'", c->rank, cfg->addrs[c->rank]);
			rc = -EINVAL;
		}
		goto fail;
	}
	/* connect to every lower rank, accept every higher one */
	for (int j = 0; j < c->rank; j++) {
		char e2[256];
		if (split(cfg->addrs[j], host, sizeof(host), &port)) {
			rc = -EINVAL;
			snprintf(err, errlen, "rank %d: bad address '%s'", j, cfg->addrs[j]);
			goto fail;
		}
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
		char e2[256];
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
	*out = c;
	return 0;
fail:
	hora_net_comm_destroy(c);
	return rc;
}

void hora_net_comm_destroy(struct hora_net_comm *c)
{
	if (!c)
		return;
	for (int i = 0; c->peer && i < c->n; i++)
		hora_net_peer_close(c->peer[i]);
	hora_net_loop_destroy(c->loop);
	free(c->peer);
	free(c->pool);
	free(c->small);
	free(c);
}

/* ---- errors ---------------------------------------------------------------------- */

static int fail(struct hora_net_comm *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct hora_net_comm *c, int rc, const char *fmt, ...)
{
	if (!c->broken) {
		int k = snprintf(c->err, sizeof(c->err), "rank %d, allreduce #%llu: ", c->rank,
				 (unsigned long long)c->seq);
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->err + k, sizeof(c->err) - (size_t)k, fmt, ap);
		va_end(ap);
		c->broken = rc;
		/* break every connection: ranks waiting on us fail too, now */
		for (int i = 0; i < c->n; i++) {
			hora_net_peer_close(c->peer[i]);
			c->peer[i] = NULL;
		}
	}
	return rc;
}

/* ---- fingerprints -------------------------------------------------------------- */

struct fp {
	uint64_t seq, count;
	uint32_t name;
	uint8_t dtype, op;
	uint16_t nranks;
};

static void fp_put(uint8_t *b, const struct fp *f)
{
	memset(b, 0, FP_BYTES);
	memcpy(b, &f->seq, 8);
	memcpy(b + 8, &f->count, 8);
	memcpy(b + 16, &f->name, 4);
	b[20] = f->dtype;
	b[21] = f->op;
	memcpy(b + 22, &f->nranks, 2);
}

static int fp_check(struct hora_net_comm *c, const uint8_t *b, const struct fp *mine, int from)
{
	struct fp o;
	memcpy(&o.seq, b, 8);
	memcpy(&o.count, b + 8, 8);
	memcpy(&o.name, b + 16, 4);
	o.dtype = b[20];
	o.op = b[21];
	memcpy(&o.nranks, b + 22, 2);
	if (o.seq == mine->seq && o.count == mine->count && o.name == mine->name &&
	    o.dtype == mine->dtype && o.op == mine->op && o.nranks == mine->nranks)
		return 0;
	return fail(c, -EBADE,
		    "mismatched collectives: rank %d called allreduce #%llu (count %llu, %s, %s) but "
		    "rank %d called allreduce #%llu (count %llu, %s, %s)",
		    c->rank, (unsigned long long)mine->seq, (unsigned long long)mine->count,
		    hora_net_dtype_name(mine->dtype), hora_net_op_name(mine->op), from,
		    (unsigned long long)o.seq, (unsigned long long)o.count,
		    o.dtype < HORA_NET_DTYPES ? hora_net_dtype_name(o.dtype) : "?",
		    o.op < HORA_NET_OPS ? hora_net_op_name(o.op) : "?");
}

static int xwait(struct hora_net_comm *c, struct hora_net_req *r, int peer, const char *what)
{
	char e[256];
	int rc = hora_net_wait(r, e, sizeof(e));
	if (rc)
		return fail(c, rc, "%s rank %d: %s", what, peer, e);
	return 0;
}

/* ---- recursive doubling ------------------------------------------------------- */

static int exchange(struct hora_net_comm *c, int peer, const uint8_t *out, size_t n, uint8_t *in,
		    bool send, bool recv)
{
	struct hora_net_req *rs = NULL, *rr = NULL;
	if (recv && hora_net_irecv(c->peer[peer], in, n, NULL, NULL, &rr))
		return fail(c, -EIO, "cannot post a receive from rank %d", peer);
	if (send && hora_net_isend(c->peer[peer], (void *)out, n, NULL, NULL, &rs)) {
		if (rr)
			hora_net_wait(rr, NULL, 0);
		return fail(c, -EIO, "cannot post a send to rank %d", peer);
	}
	char es[256] = "", er[256] = "";
	int s_rc = rs ? hora_net_wait(rs, es, sizeof(es)) : 0;
	int r_rc = rr ? hora_net_wait(rr, er, sizeof(er)) : 0;
	/* the fingerprint rides in the message, so a count or dtype mismatch
	 * shows first as a length mismatch on the peer: name it as such */
	if (s_rc == -EMSGSIZE || r_rc == -EMSGSIZE)
		return fail(c, -EBADE, "mismatched collectives with rank %d (count or dtype differ): %s",
			    peer, r_rc == -EMSGSIZE ? er : es);
	if (s_rc)
		return fail(c, s_rc, "send to rank %d: %s", peer, es);
	if (r_rc)
		return fail(c, r_rc, "receive from rank %d: %s", peer, er);
	return 0;
}

static int rec_doubling(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t,
			enum hora_net_op op, const struct fp *f)
{
	const size_t esz = hora_net_dtype_size(t), bytes = count * esz, msg = FP_BYTES + bytes;
	uint8_t *mine = c->small, *theirs = c->small + FP_BYTES + c->cfg.small_bytes + 64;
	int p2 = 1;
	while (p2 * 2 <= c->n)
		p2 *= 2;
	const int r = c->rank, extra = c->n - p2;
	fp_put(mine, f);
	memcpy(mine + FP_BYTES, buf, bytes);
	int rc;
	if (r >= p2) { /* fold in: give our data to r - p2, get the result back */
		if ((rc = exchange(c, r - p2, mine, msg, NULL, true, false)))
			return rc;
		if ((rc = exchange(c, r - p2, NULL, msg, theirs, false, true)))
			return rc;
		if ((rc = fp_check(c, theirs, f, r - p2)))
			return rc;
		memcpy(buf, theirs + FP_BYTES, bytes);
		return 0;
	}
	if (r < extra) {
		if ((rc = exchange(c, r + p2, NULL, msg, theirs, false, true)) ||
		    (rc = fp_check(c, theirs, f, r + p2)))
			return rc;
		hora_net_reduce(mine + FP_BYTES, mine + FP_BYTES, theirs + FP_BYTES, count, t, op);
	}
	for (int mask = 1; mask < p2; mask <<= 1) {
		int partner = r ^ mask;
		if ((rc = exchange(c, partner, mine, msg, theirs, true, true)) ||
		    (rc = fp_check(c, theirs, f, partner)))
			return rc;
		if (r < partner)
			hora_net_reduce(mine + FP_BYTES, mine + FP_BYTES, theirs + FP_BYTES, count, t, op);
		else
			hora_net_reduce(mine + FP_BYTES, theirs + FP_BYTES, mine + FP_BYTES, count, t, op);
	}
	if (op == HORA_NET_AVG)
		hora_net_scale(mine + FP_BYTES, count, t, c->n);
	if (r < extra && (rc = exchange(c, r + p2, mine, msg, NULL, true, false)))
		return rc;
	memcpy(buf, mine + FP_BYTES, bytes);
	return 0;
}

/* ---- ring ---------------------------------------------------------------------- */

struct ring {
	size_t count, esz, seg; /* seg in elements */
	int n;
};

static void chunk_of(const struct ring *g, int ch, size_t *off, size_t *len)
{
	size_t base = g->count / (size_t)g->n, rem = g->count % (size_t)g->n;
	*off = (size_t)ch * base + ((size_t)ch < rem ? (size_t)ch : rem);
	*len = base + ((size_t)ch < rem ? 1 : 0);
}

static size_t nsegs(const struct ring *g, size_t len)
{
	return (len + g->seg - 1) / g->seg;
}

/* (step, segment) in the order both neighbours walk them */
struct slot {
	int t;
	size_t k;
};

static int ring(struct hora_net_comm *c, uint8_t *buf, size_t count, enum hora_net_dtype t,
		enum hora_net_op op, const struct fp *f)
{
	const int n = c->n, r = c->rank, left = (r - 1 + n) % n, right = (r + 1) % n;
	const int steps = 2 * (n - 1);
	struct ring g = {count, hora_net_dtype_size(t), c->cfg.segment_bytes / hora_net_dtype_size(t), n};
	if (!g.seg)
		g.seg = 1;
	struct hora_net_peer *pl = c->peer[left], *pr = c->peer[right];
	int rc;
	/* fingerprints with both neighbours */
	uint8_t fo[FP_BYTES], fi[FP_BYTES];
	fp_put(fo, f);
	struct hora_net_req *a, *b;
	if (hora_net_irecv(pl, fi, FP_BYTES, NULL, NULL, &a) ||
	    hora_net_isend(pr, fo, FP_BYTES, NULL, NULL, &b))
		return fail(c, -EIO, "cannot post the fingerprint exchange");
	rc = xwait(c, b, right, "send to");
	if (!rc)
		rc = xwait(c, a, left, "receive from");
	else
		hora_net_wait(a, NULL, 0);
	if (rc || (rc = fp_check(c, fi, f, left)))
		return rc;

#define SEND_CHUNK(tt) ((tt) < n - 1 ? (r - (tt) + 2 * n) % n : (r + 1 - ((tt) - (n - 1)) + 2 * n) % n)
#define RECV_CHUNK(tt) ((tt) < n - 1 ? (r - (tt) - 1 + 2 * n) % n : (r - ((tt) - (n - 1)) + 2 * n) % n)
	/* enumerate receive slots in order */
	size_t total = 0;
	for (int tt = 0; tt < steps; tt++) {
		size_t off, len;
		chunk_of(&g, RECV_CHUNK(tt), &off, &len);
		total += nsegs(&g, len);
	}
	struct slot *slots = malloc(sizeof(*slots) * (total ? total : 1));
	struct hora_net_req **rq = calloc(total ? total : 1, sizeof(*rq));
	/* sends in flight: at most one step's segments per chunk + one; keep a list */
	size_t maxs = 0;
	for (int tt = 0; tt < steps; tt++) {
		size_t off, len;
		chunk_of(&g, SEND_CHUNK(tt), &off, &len);
		maxs += nsegs(&g, len);
	}
	struct hora_net_req **sq = calloc(maxs ? maxs : 1, sizeof(*sq));
	if (!slots || !rq || !sq) {
		free(slots);
		free(rq);
		free(sq);
		return fail(c, -ENOMEM, "out of memory for %zu pipeline slots", total);
	}
	size_t ns = 0, s_posted = 0, s_waited = 0;
	for (int tt = 0; tt < steps; tt++) {
		size_t off, len;
		chunk_of(&g, RECV_CHUNK(tt), &off, &len);
		for (size_t k = 0; k < nsegs(&g, len); k++)
			slots[ns++] = (struct slot){tt, k};
	}
	const size_t depth = (size_t)c->cfg.depth;
	size_t posted = 0;
	rc = 0;
	/* post one receive (slot i) */
#define POST_RECV(i)                                                                               \
	do {                                                                                       \
		size_t off_, len_;                                                                 \
		chunk_of(&g, RECV_CHUNK(slots[i].t), &off_, &len_);                                \
		size_t so_ = slots[i].k * g.seg, sl_ = len_ - so_ < g.seg ? len_ - so_ : g.seg;    \
		uint8_t *dst_ = slots[i].t < n - 1 ? c->pool + ((i) % depth) * c->cfg.segment_bytes \
						   : buf + (off_ + so_) * g.esz;                    \
		if (hora_net_irecv(pl, dst_, sl_ * g.esz, NULL, NULL, &rq[i]))                     \
			rc = fail(c, -EIO, "cannot post a receive from rank %d", left);            \
	} while (0)
#define POST_SEND(tt, k)                                                                           \
	do {                                                                                       \
		size_t off_, len_;                                                                 \
		chunk_of(&g, SEND_CHUNK(tt), &off_, &len_);                                        \
		size_t so_ = (k) * g.seg, sl_ = len_ - so_ < g.seg ? len_ - so_ : g.seg;           \
		if (hora_net_isend(pr, buf + (off_ + so_) * g.esz, sl_ * g.esz, NULL, NULL,        \
				   &sq[s_posted]))                                                 \
			rc = fail(c, -EIO, "cannot post a send to rank %d", right);                \
		else                                                                               \
			s_posted++;                                                                \
	} while (0)

	for (; posted < ns && posted < depth && !rc; posted++)
		POST_RECV(posted);
	{ /* step 0: every segment of our own chunk goes right away */
		size_t off, len;
		chunk_of(&g, SEND_CHUNK(0), &off, &len);
		for (size_t k = 0; k < nsegs(&g, len) && !rc; k++)
			POST_SEND(0, k);
	}
	for (size_t i = 0; i < ns && !rc; i++) {
		rc = xwait(c, rq[i], left, "receive from");
		rq[i] = NULL;
		if (rc)
			break;
		const int tt = slots[i].t;
		const size_t k = slots[i].k;
		size_t off, len;
		chunk_of(&g, RECV_CHUNK(tt), &off, &len);
		size_t so = k * g.seg, sl = len - so < g.seg ? len - so : g.seg;
		uint8_t *dst = buf + (off + so) * g.esz;
		if (tt < n - 1) {
			/* reduce: data that went further round the ring first, ours second */
			hora_net_reduce(dst, c->pool + (i % depth) * c->cfg.segment_bytes, dst, sl, t, op);
			if (tt == n - 2 && op == HORA_NET_AVG)
				hora_net_scale(dst, sl, t, n);
		}
		if (posted < ns) {
			POST_RECV(posted);
			posted++;
		}
		if (tt + 1 < steps && !rc)
			POST_SEND(tt + 1, k);
		/* reap finished sends now and then, so their memory stays bounded */
		while (s_waited < s_posted && hora_net_test(sq[s_waited])) {
			int r2 = xwait(c, sq[s_waited], right, "send to"); /* always: it frees */
			rc = rc ? rc : r2;
			sq[s_waited++] = NULL;
		}
	}
	for (; s_waited < s_posted; s_waited++) {
		int r2 = c->broken ? (hora_net_wait(sq[s_waited], NULL, 0), c->broken)
				   : xwait(c, sq[s_waited], right, "send to");
		if (!rc)
			rc = r2;
	}
	for (size_t i = 0; i < ns; i++) /* receives left after an error: the peer is closed, they finish */
		if (rq[i])
			hora_net_wait(rq[i], NULL, 0);
#undef POST_RECV
#undef POST_SEND
#undef SEND_CHUNK
#undef RECV_CHUNK
	free(slots);
	free(rq);
	free(sq);
	return rc;
}

int hora_net_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op)
{
	if (c->broken)
		return c->broken;
	if (t >= HORA_NET_DTYPES || op >= HORA_NET_OPS) {
		snprintf(c->err, sizeof(c->err), "rank %d: invalid dtype %d or op %d", c->rank, t, op);
		return -EINVAL;
	}
	c->seq++;
	const size_t esz = hora_net_dtype_size(t), bytes = count * esz;
	if (send != recv && bytes)
		memmove(recv, send, bytes);
	if (c->n == 1)
		return 0; /* (count 0 still exchanges fingerprints: calls stay matched) */
	struct fp f = {.seq = c->seq, .count = count, .name = 0x61726564 /* "ared" */,
		       .dtype = (uint8_t)t, .op = (uint8_t)op, .nranks = (uint16_t)c->n};
	bool small = c->algo == 2 || (c->algo == 0 && (bytes <= c->cfg.small_bytes || count < (size_t)c->n));
	if (small && bytes > c->cfg.small_bytes)
		small = false; /* the doubling buffers hold small_bytes */
	return small ? rec_doubling(c, recv, count, t, op, &f) : ring(c, recv, count, t, op, &f);
}
