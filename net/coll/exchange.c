/* exchange.c - the fingerprinted messages every algorithm is made of, over
 * the communicator's link (link.h): a caller-driven exchange whose
 * fingerprint is checked as soon as it is in, fingerprints alone on either
 * path, and waiting for a queued message. Any failure fails the call
 * (notice.c). No algorithm here.
 */
#include "net/coll/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int coll_posted(struct hora_net_comm *c, int rc)
{
	if (rc)
		c->post_err = rc < 0 ? rc : -EIO;
	return rc;
}

int coll_wait(struct hora_net_comm *c, struct hora_net_link_req *r, int peer, const char *what)
{
	char e[256];
	int rc = c->link->ops->wait(r, e, sizeof(e));
	if (rc)
		return coll_fail_peer(c, rc, peer, "%s rank %d: %s", what, peer, e);
	return 0;
}

struct fp_ctx {
	struct hora_net_comm *c;
	const struct fp *mine;
	int from;
	int rc; /* what check_cb found, reported by the caller */
	char msg[400];
};

/* Runs inside the exchange: only compares. coll_fail() (a notice to every
 * peer, every stream closed) must wait until the exchange has returned,
 * since it may first have to finish a message it is halfway through. */
static int check_cb(void *arg, const void *h)
{
	struct fp_ctx *x = arg;
	return x->rc = fp_compare(x->c, h, x->mine, x->from, x->msg, sizeof(x->msg));
}

int coll_xchg(struct hora_net_comm *c, int to, const void *obody, size_t obytes, int from, void *ibody,
	      size_t ibytes, const struct fp *f)
{
	struct fp_ctx ctx = {.c = c, .mine = f, .from = from};
	uint8_t oh[FP_BYTES], ih[FP_BYTES];
	char e[256];
	fp_encode(oh, f);
	struct hora_net_link_xchg x = {.to = to, .out_head = oh, .out_body = obody, .out_bytes = obytes,
				       .from = from, .in_head = ih, .in_body = ibody, .in_bytes = ibytes,
				       .head_bytes = FP_BYTES, .check = check_cb, .check_arg = &ctx,
				       .spin_us = c->spin_us, .err = e, .errlen = sizeof(e)};
	int rc = c->link->ops->exchange(c->link, &x);
	if (rc && !c->broken) {
		if (ctx.rc)
			return coll_fail_peer(c, rc, ctx.rc == -EBADE ? -1 : from, "%s", ctx.msg);
		return coll_fail_peer(c, rc, x.dir ? from : to, "%s rank %d: %s", x.dir ? "receive from" : "send to",
				      x.dir ? from : to, e);
	}
	return rc;
}

int coll_xchg1(struct hora_net_comm *c, int to, const void *obody, int from, void *ibody, size_t bytes,
	       const struct fp *f)
{
	return coll_xchg(c, to, obody, bytes, from, ibody, bytes, f);
}

int coll_fp_xchg(struct hora_net_comm *c, int to, int from, const struct fp *f)
{
	return coll_xchg(c, to, NULL, 0, from, NULL, 0, f);
}

#define POST_WHY(c) strerror(-(c)->post_err)

int coll_fp_queued(struct hora_net_comm *c, int left, int right, const struct fp *f)
{
	const struct hora_net_link_ops *ops = c->link->ops;
	uint8_t out[FP_BYTES], in[FP_BYTES];
	struct hora_net_link_req *r = NULL, *sreq = NULL;
	fp_encode(out, f);
	int rc = 0;
	if (left >= 0 && coll_posted(c, ops->post_recv(c->link, left, in, FP_BYTES, NULL, NULL, &r)))
		rc = coll_fail_peer(c, c->post_err, left, "cannot post a receive from rank %d: %s", left,
				    POST_WHY(c));
	if (!rc && right >= 0 && coll_posted(c, ops->post_send(c->link, right, out, FP_BYTES, NULL, NULL, &sreq)))
		rc = coll_fail_peer(c, c->post_err, right, "cannot post a send to rank %d: %s", right,
				    POST_WHY(c));
	if (r) { /* after a failure the peers are closed: the wait only frees */
		int r2 = c->broken ? (ops->wait(r, NULL, 0), c->broken) : coll_wait(c, r, left, "receive from");
		if (!r2) {
			char msg[400];
			if ((r2 = fp_compare(c, in, f, left, msg, sizeof(msg))))
				r2 = coll_fail(c, r2, "%s", msg);
		}
		rc = rc ? rc : r2;
	}
	if (sreq) {
		int r2 = c->broken ? (ops->wait(sreq, NULL, 0), c->broken) : coll_wait(c, sreq, right, "send to");
		rc = rc ? rc : r2;
	}
	return rc;
}
