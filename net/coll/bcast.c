/* bcast.c - broadcast: a binomial tree on the link's caller-driven path for
 * small messages, a pipelined chain root -> root+1 -> ... -> root-1 on the
 * queued path for large ones.
 *
 * The root is part of the fingerprint, but in a broadcast a rank that takes
 * itself for the root receives nothing, so a root that differs between
 * ranks would pass unseen. So both algorithms also check fingerprints
 * around the ring on the caller-driven path: every rank sends its
 * fingerprint to its right neighbour at the start and checks its left
 * neighbour's (the chain: before the data, the root after it; the tree: at
 * the end, or before the receive from the parent when that is the left
 * neighbour, which sends it first). If any two ranks disagree, some
 * neighbouring pair does, and that rank fails the call with both calls
 * named; the failure breaks the communicator, so every other rank fails
 * this call or its next one, naming the cause.
 */
#include "net/coll/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tree_bcast(struct hora_net_comm *c, void *buf, size_t bytes, int root, const struct fp *f)
{
	const int n = c->n, p = (c->rank - root + n) % n;
	const int left = (c->rank - 1 + n) % n, right = (c->rank + 1) % n;
	int mask = 1, rc, checked = 0;
	if ((rc = coll_fp_xchg(c, right, -1, f)))
		return rc;
	while (mask < n) {
		if (p & mask) {
			const int parent = (p - mask + root) % n;
			if (parent == left) { /* its ring fingerprint came first */
				checked = 1;
				if ((rc = coll_fp_xchg(c, -1, left, f)))
					return rc;
			}
			if ((rc = coll_xchg1(c, -1, NULL, parent, buf, bytes, f)))
				return rc;
			break;
		}
		mask <<= 1;
	}
	for (mask >>= 1; mask > 0; mask >>= 1)
		if (p + mask < n && (rc = coll_xchg1(c, (p + mask + root) % n, buf, -1, NULL, bytes, f)))
			return rc;
	return checked ? 0 : coll_fp_xchg(c, -1, left, f);
}

#define POST_WHY(c) strerror(-(c)->post_err)

/* post the receive of segment k from `left` into buf */
static int chain_post_recv(struct hora_net_comm *c, int left, uint8_t *buf, size_t bytes, size_t k,
			   struct hora_net_link_req **rq)
{
	const size_t seg = c->cfg.segment_bytes, ns = (bytes + seg - 1) / seg;
	const size_t len = k == ns - 1 ? bytes - k * seg : seg;
	if (coll_posted(c, c->link->ops->post_recv(c->link, left, buf + k * seg, len, NULL, NULL, &rq[k])))
		return coll_fail_peer(c, c->post_err, left, "cannot post a receive from rank %d: %s", left,
				      POST_WHY(c));
	return 0;
}

/* every segment in from the left (depth receives ahead) and on to the right
 * as soon as it is in; sq gets the sends (*sent of them) */
static int chain_move(struct hora_net_comm *c, int left, int right, uint8_t *buf, size_t bytes,
		      struct hora_net_link_req **rq, struct hora_net_link_req **sq, size_t *sent)
{
	const size_t seg = c->cfg.segment_bytes, ns = (bytes + seg - 1) / seg, depth = (size_t)c->cfg.depth;
	size_t posted = 0;
	int rc = 0;
	for (; left >= 0 && posted < ns && posted < depth && !rc; posted++)
		rc = chain_post_recv(c, left, buf, bytes, posted, rq);
	for (size_t k = 0; k < ns && !rc; k++) {
		if (left >= 0) {
			rc = coll_wait(c, rq[k], left, "receive from");
			rq[k] = NULL;
			if (rc)
				break;
			if (posted < ns)
				rc = chain_post_recv(c, left, buf, bytes, posted++, rq);
		}
		if (right >= 0 && !rc) {
			const size_t len = k == ns - 1 ? bytes - k * seg : seg;
			if (coll_posted(c, c->link->ops->post_send(c->link, right, buf + k * seg, len, NULL, NULL,
								     &sq[*sent])))
				rc = coll_fail_peer(c, c->post_err, right, "cannot post a send to rank %d: %s", right,
						    POST_WHY(c));
			else
				(*sent)++;
		}
	}
	return rc;
}

/* Every segment is forwarded as soon as it is in, so the time is about S/B
 * + (N-2) segments. */
int chain_bcast(struct hora_net_comm *c, uint8_t *buf, size_t bytes, int root, const struct fp *f)
{
	const int n = c->n, p = (c->rank - root + n) % n;
	const int left = p == 0 ? -1 : (c->rank - 1 + n) % n, right = p == n - 1 ? -1 : (c->rank + 1) % n;
	int rc = coll_fp_xchg(c, (c->rank + 1) % n, left, f);
	if (!rc)
		rc = coll_fp_queued(c, left, right, f);
	if (rc)
		return rc;
	const size_t seg = c->cfg.segment_bytes, ns = (bytes + seg - 1) / seg;
	struct hora_net_link_req **rq = calloc(ns ? ns : 1, sizeof(*rq)), **sq = calloc(ns ? ns : 1, sizeof(*sq));
	if (!rq || !sq) {
		free(rq);
		free(sq);
		return coll_fail(c, -ENOMEM, "out of memory for %zu segments", ns);
	}
	size_t sent = 0;
	rc = chain_move(c, left, right, buf, bytes, rq, sq, &sent);
	for (size_t k = 0; k < sent; k++) {
		int r2 = c->broken ? (c->link->ops->wait(sq[k], NULL, 0), c->broken)
				   : coll_wait(c, sq[k], right, "send to");
		if (!rc)
			rc = r2;
	}
	for (size_t k = 0; k < ns; k++)
		if (rq[k])
			c->link->ops->wait(rq[k], NULL, 0);
	free(rq);
	free(sq);
	if (!rc && p == 0) /* the root checks root-1's fingerprint last: no delay to the data */
		rc = coll_fp_xchg(c, -1, (c->rank - 1 + n) % n, f);
	return rc;
}
