/* ring.c - the pipelined ring on the link's queued path: allreduce =
 * reduce-scatter then allgather, 2(N-1) steps (schedule.h); reduce-scatter
 * and allgather are its two halves.
 *
 * Each step moves one of N chunks to the right neighbour, cut into segments
 * so that sending, receiving and reducing overlap: the send of step t+1 of a
 * segment leaves as soon as step t of it was received and reduced, while
 * `depth` receives stay posted ahead into a pool of depth segment buffers
 * (extra memory O(segment x depth), never a copy of the buffer). The whole
 * pipeline runs in completion callbacks on the link's progress thread (each
 * receive completion reduces and posts the next send and receive inline,
 * with no hand-off to the calling thread, which sleeps until the whole
 * collective is done): one runnable thread per rank instead of two.
 * Partial sums are written where the output goes (work) and leave from
 * there; the allgather receives straight into place, so out-of-place calls
 * need no copy either. The owner of each chunk finishes it (AVG's division)
 * before sending it around, so every rank ends with the same bits.
 */
#include "net/coll/internal.h"
#include "net/coll/schedule.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ring_fp(struct hora_net_comm *c, struct fp *f)
{
	fp_via(f, c, P_RING);
	return coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f);
}

/* (step, segment) of each receive, in the order both neighbours walk them */
struct slot {
	int t;
	size_t k;
};

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
	if (coll_posted(r->c, r->c->link->ops->post_recv(r->c->link, r->left, d, sl * r->g.esz, cb_recv, &r->ctx[i], NULL))) {
		r->outstanding--, r->posted--;
		cb_error(r, r->c->post_err, "receive from", r->left, "cannot post a receive");
	}
}

static void cb_post_send(struct cbring *r, const uint8_t *p, size_t bytes)
{
	r->outstanding++, r->sends_posted++; /* before: the send may complete inline */
	if (coll_posted(r->c, r->c->link->ops->post_send(r->c->link, r->right, p, bytes, cb_send, &r->ctx[r->ns], NULL))) {
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

/* the pipeline's state and buffers: everything but the pool, which the
 * communicator keeps */
static struct cbring *ring_new(struct hora_net_comm *c, enum ring_mode mode, const uint8_t *src, uint8_t *work,
			       uint8_t *dst, size_t count, enum hora_net_dtype t, enum hora_net_op op,
			       const struct fp *f)
{
	const int n = c->n, rk = c->rank;
	struct cbring *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	*r = (struct cbring){.c = c, .mode = mode, .src = src, .work = work, .dst = dst, .t = t, .op = op,
			     .n = n, .left = (rk - 1 + n) % n, .right = (rk + 1) % n,
			     .depth = (size_t)c->cfg.depth, .f = f};
	r->g = (struct ring){count, hora_net_dtype_size(t), c->cfg.segment_bytes / hora_net_dtype_size(t), n,
			     rk, mode != RING_ALLREDUCE};
	if (!r->g.seg)
		r->g.seg = 1;
	r->t0 = mode == RING_ALLGATHER ? n - 1 : 0;
	r->t1 = mode == RING_REDUCE_SCATTER ? n - 1 : 2 * (n - 1);
	for (int tt = r->t0; tt < r->t1; tt++) {
		size_t off, len;
		chunk_of(&r->g, recv_chunk(&r->g, tt), &off, &len);
		r->ns += nsegs(&r->g, len);
	}
	r->slots = malloc(sizeof(*r->slots) * (r->ns ? r->ns : 1));
	r->ctx = malloc(sizeof(*r->ctx) * (r->ns + 1));
	r->arrived = calloc(r->ns + 1, 1);
	if (!r->slots || !r->ctx || !r->arrived)
		return r; /* the caller sees the missing buffers */
	size_t q = 0;
	for (int tt = r->t0; tt < r->t1; tt++) {
		size_t off, len;
		chunk_of(&r->g, recv_chunk(&r->g, tt), &off, &len);
		for (size_t k = 0; k < nsegs(&r->g, len); k++)
			r->slots[q++] = (struct slot){tt, k};
	}
	r->ctx[r->ns] = (struct cbslot){r, (size_t)-1};
	/* recursive: a send posted from a callback can complete inline, and its
	 * callback then runs inside the first one on the comm thread */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&r->mu, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&r->cv, NULL);
	return r;
}

static void ring_free(struct cbring *r, bool synced)
{
	if (synced) {
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv);
	}
	free(r->slots);
	free(r->ctx);
	free(r->arrived);
	free(r);
}

/* Post the fingerprints (the left one's completion starts the pipeline),
 * then sleep until the pipeline is done or failed; returns its error. */
static int ring_drive(struct cbring *r)
{
	struct hora_net_comm *c = r->c;
	const struct hora_net_link_ops *ops = c->link->ops;
	pthread_mutex_lock(&r->mu); /* callbacks wait until both are posted */
	fp_encode(r->fp_out, r->f);
	if (coll_posted(c, ops->post_send(c->link, r->right, r->fp_out, FP_BYTES, cb_fp_sent, r, NULL)))
		cb_error(r, c->post_err, "send to", r->right, "cannot post a send");
	else
		r->outstanding++;
	if (!r->err && coll_posted(c, ops->post_recv(c->link, r->left, r->fp_in, FP_BYTES, cb_start, r, NULL)))
		cb_error(r, c->post_err, "receive from", r->left, "cannot post a receive");
	else if (!r->err)
		r->outstanding++;
	while (!r->done)
		pthread_cond_wait(&r->cv, &r->mu);
	int rc = r->err;
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* A partial sum of chunk c leaves from work before anything can be gathered
 * into c again: that data needs our partial first. */
int ring_run(struct hora_net_comm *c, enum ring_mode mode, const uint8_t *src, uint8_t *work, uint8_t *dst,
	     size_t count, enum hora_net_dtype t, enum hora_net_op op, const struct fp *f)
{
	struct cbring *r = ring_new(c, mode, src, work, dst, count, t, op, f);
	if (!r)
		return coll_fail(c, -ENOMEM, "out of memory for the ring");
	if (!r->slots || !r->ctx || !r->arrived) {
		size_t ns = r->ns;
		ring_free(r, false);
		return coll_fail(c, -ENOMEM, "out of memory for %zu pipeline slots", ns);
	}
	if (mode == RING_ALLGATHER) { /* our own chunk into place first */
		size_t off, len;
		chunk_of(&r->g, c->rank, &off, &len);
		if (dst + off * r->g.esz != src && len)
			memmove(dst + off * r->g.esz, src, len * r->g.esz);
	}
	int rc = ring_drive(r);
	if (rc && !r->err_dir) /* closing the peers finishes every request still out */
		rc = coll_fail(c, rc, "%s", r->errmsg);
	else if (rc)
		rc = coll_fail_peer(c, rc, r->err_peer, "%s rank %d: %s", r->err_dir, r->err_peer, r->errmsg);
	pthread_mutex_lock(&r->mu);
	while (r->outstanding > 0)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	ring_free(r, true);
	return rc;
}
