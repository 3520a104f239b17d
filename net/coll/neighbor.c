/* neighbor.c - decentralized averaging: the neighbour allreduce (each rank
 * sends to its out-neighbours, receives from its in-neighbours and takes a
 * weighted sum, as BlueFog's neighbor_allreduce) and the pair average
 * (one peer, weights 1/2, the lower rank's value first). Arguments were
 * checked by dispatch.c; this file moves the data and combines them. It
 * chooses no neighbours (core/topology.c does).
 *
 * Pattern check (neighbour allreduce, on unless turned off): every rank
 * adds, for each edge a->b it sends on, a count and three 30-bit hashes of
 * (a, b) to "sent" lanes, and for each edge it receives on the same to
 * "received" lanes; one recursive-doubling allreduce of those 8 int64 sums
 * (exact: no sum reaches 2^63) gives every rank the same answer. Equal
 * lanes: the patterns agree (a wrong pattern passes with odds of about
 * 2^-90). Different: every rank takes the same second step, an allreduce
 * of every rank's send and receive bitmaps (each rank fills its own row, so
 * the sum is a gather), and fails with the edges that disagree, before any
 * data moved.
 *
 * The pair average goes on the caller-driven path instead, chunk by chunk
 * (small_cap), each chunk one exchange that sends ours while it receives
 * theirs, its fingerprint checked on both sides before the data: one
 * round trip for a small model, and both sides name a mismatch.
 *
 * Neighbour data: on the queued path, chunk by chunk (segment_bytes x
 * depth), every receive and send of a chunk posted before any is waited
 * for, chunk k+1 posted before chunk k is combined. Any rank posts chunk k+1 once every
 * rank has posted chunk k-1, so there is no wait cycle whatever the graph.
 * Each message follows the call's fingerprint, which its receiver checks.
 */
#include "net/coll/internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256 /* elements combined at a time (double on the stack) */

/* ---- conversions to and from the double accumulator --------------------------- */

static void to_double(double *d, const uint8_t *p, size_t n, enum hora_net_dtype t)
{
	float h[BLOCK];
	switch (t) {
	case HORA_NET_F32:
		for (size_t i = 0; i < n; i++)
			d[i] = ((const float *)p)[i];
		break;
	case HORA_NET_F64:
		memcpy(d, p, n * sizeof(double));
		break;
	case HORA_NET_F16:
	case HORA_NET_BF16:
		hora_net_half_to_f32_n((const uint16_t *)p, h, n, t == HORA_NET_BF16);
		for (size_t i = 0; i < n; i++)
			d[i] = h[i];
		break;
	case HORA_NET_I32:
		for (size_t i = 0; i < n; i++)
			d[i] = ((const int32_t *)p)[i];
		break;
	case HORA_NET_I64:
		for (size_t i = 0; i < n; i++)
			d[i] = (double)((const int64_t *)p)[i];
		break;
	default:
		break;
	}
}

/* integers: to nearest, clamped to the type's range */
static double clampd(double v, double lo, double hi)
{
	v = nearbyint(v);
	return v < lo ? lo : v > hi ? hi : v;
}

static void from_double(uint8_t *p, const double *d, size_t n, enum hora_net_dtype t)
{
	float h[BLOCK];
	switch (t) {
	case HORA_NET_F32:
		for (size_t i = 0; i < n; i++)
			((float *)p)[i] = (float)d[i];
		break;
	case HORA_NET_F64:
		memcpy(p, d, n * sizeof(double));
		break;
	case HORA_NET_F16:
	case HORA_NET_BF16:
		for (size_t i = 0; i < n; i++)
			h[i] = (float)d[i];
		hora_net_f32_to_half_n(h, (uint16_t *)p, n, t == HORA_NET_BF16);
		break;
	case HORA_NET_I32:
		for (size_t i = 0; i < n; i++)
			((int32_t *)p)[i] = (int32_t)clampd(d[i], -2147483648.0, 2147483647.0);
		break;
	case HORA_NET_I64: /* 2^63 - 1024: the largest double below 2^63 */
		for (size_t i = 0; i < n; i++)
			((int64_t *)p)[i] = (int64_t)clampd(d[i], -9223372036854775808.0, 9223372036854774784.0);
		break;
	default:
		break;
	}
}

/* acc = w x (first) or acc += w x */
static void term(double *acc, const uint8_t *x, double w, size_t n, enum hora_net_dtype t, bool first)
{
	double y[BLOCK];
	to_double(first ? acc : y, x, n, t);
	if (first)
		for (size_t i = 0; i < n; i++)
			acc[i] *= w;
	else
		for (size_t i = 0; i < n; i++)
			acc[i] += w * y[i];
}

/* ---- the pattern check ------------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* lanes v[0..3] += edge a->b: a count and three 30-bit hashes */
static void edge_add(int64_t *v, int a, int b)
{
	const uint64_t e = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	v[0] += 1;
	for (int k = 1; k < 4; k++)
		v[k] += (int64_t)(mix64(e + (uint64_t)k * 0xD1B54A32D192ED03ull) >> 34);
}

static bool bit(const int64_t *row, int i)
{
	return (row[i / 32] >> (i % 32)) & 1;
}

/* "rank 0 sends to rank 2 but rank 2 does not receive from it; ..." from
 * every rank's bitmaps m (row r: W words of its dst, W of its src) */
static void disagreeing_edges(const int64_t *m, int n, int w, char *s, size_t len)
{
	size_t k = 0;
	int shown = 0, more = 0;
	s[0] = 0;
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++) {
			const bool sends = bit(m + (size_t)a * 2 * w, b), recvs = bit(m + (size_t)b * 2 * w + w, a);
			if (sends == recvs)
				continue;
			if (shown == 3 || k + 100 > len) {
				more++;
				continue;
			}
			k += (size_t)snprintf(s + k, len - k,
					      sends ? "%srank %d sends to rank %d but rank %d does not receive from it"
						    : "%srank %d does not send to rank %d but rank %d receives from it",
					      shown ? "; " : "", a, b, b);
			shown++;
		}
	if (more)
		snprintf(s + k, len - k, "; and %d more", more);
}

/* the lanes disagree: find the edges (every rank runs this, so the
 * allreduce below meets the others'), fail the call naming them */
static int pattern_diagnose(struct hora_net_comm *c, const struct nbr_call *x, const struct fp *f)
{
	const int n = c->n, w = (n + 31) / 32;
	const size_t words = (size_t)n * 2 * (size_t)w;
	if (words * sizeof(int64_t) > c->cfg.small_cap)
		return coll_fail(c, -EBADE, "mismatched neighbour patterns: the ranks' sources and destinations "
					    "do not match (too many ranks to name them)");
	int64_t *m = calloc(words, sizeof(int64_t));
	if (!m)
		return coll_fail(c, -ENOMEM, "out of memory for the neighbour pattern of %d ranks", n);
	int64_t *mine = m + (size_t)c->rank * 2 * (size_t)w;
	for (int j = 0; j < x->ndst; j++)
		mine[x->dst[j] / 32] |= (int64_t)1 << (x->dst[j] % 32);
	for (int i = 0; i < x->nsrc; i++)
		mine[w + x->src[i] / 32] |= (int64_t)1 << (x->src[i] % 32);
	int rc = doubling_allreduce(c, m, words, HORA_NET_I64, HORA_NET_SUM, f);
	if (!rc) {
		char s[400];
		disagreeing_edges(m, n, w, s, sizeof(s));
		rc = coll_fail(c, -EBADE, "mismatched neighbour patterns: %s", s);
	}
	free(m);
	return rc;
}

static int pattern_check(struct hora_net_comm *c, const struct nbr_call *x, const struct fp *call)
{
	int64_t v[8] = {0}; /* sent lanes, received lanes */
	for (int j = 0; j < x->ndst; j++)
		edge_add(v, c->rank, x->dst[j]);
	for (int i = 0; i < x->nsrc; i++)
		edge_add(v + 4, x->src[i], c->rank);
	struct fp f = *call;
	fp_via(&f, c, P_SMALL);
	int rc = doubling_allreduce(c, v, 8, HORA_NET_I64, HORA_NET_SUM, &f);
	if (rc || !memcmp(v, v + 4, 4 * sizeof(int64_t)))
		return rc;
	return pattern_diagnose(c, x, &f);
}

/* ---- the exchange ------------------------------------------------------------------ */

struct nbr {
	struct hora_net_comm *c;
	const struct nbr_call *x;
	const struct fp *f;
	uint8_t out_hdr[FP_BYTES];
	uint8_t *in_hdr;                /* 2 sets x nsrc x FP_BYTES */
	struct hora_net_link_req **req; /* 2 sets x per */
	int per;                        /* requests a chunk: 2 nsrc + 2 ndst (header, body) */
	uint8_t *set[2];                /* nsrc received chunks, then the scaled copies */
	size_t ce, esz, nch;            /* elements a chunk, element size, chunks */
};

#define POST_WHY(c) strerror(-(c)->post_err)

static size_t chunk_len(const struct nbr *s, size_t k)
{
	const size_t off = k * s->ce;
	return s->x->count - off < s->ce ? s->x->count - off : s->ce;
}

/* what we send rank dst[j]: the chunk itself, or a copy scaled by dst_w[j] */
static const uint8_t *outgoing(struct nbr *s, size_t k, int j)
{
	const struct nbr_call *x = s->x;
	const uint8_t *in = x->send + k * s->ce * s->esz;
	if (!x->dst_w || x->dst_w[j] == 1.0)
		return in;
	uint8_t *out = s->set[k & 1] + ((size_t)x->nsrc + (size_t)j) * s->ce * s->esz;
	const size_t len = chunk_len(s, k);
	double acc[BLOCK];
	for (size_t b = 0; b < len; b += BLOCK) {
		const size_t m = len - b < BLOCK ? len - b : BLOCK;
		term(acc, in + b * s->esz, x->dst_w[j], m, x->t, true);
		from_double(out + b * s->esz, acc, m, x->t);
	}
	return out;
}

/* post chunk k's receives and sends; a refused post fails the call (what
 * was posted is still waited for by wait_chunk) */
static int post_chunk(struct nbr *s, size_t k)
{
	struct hora_net_comm *c = s->c;
	const struct hora_net_link_ops *ops = c->link->ops;
	const struct nbr_call *x = s->x;
	struct hora_net_link_req **rq = s->req + (size_t)(k & 1) * (size_t)s->per;
	const size_t len = chunk_len(s, k) * s->esz;
	for (int i = 0; i < x->nsrc; i++) {
		uint8_t *hdr = s->in_hdr + ((size_t)(k & 1) * (size_t)x->nsrc + (size_t)i) * FP_BYTES;
		uint8_t *body = s->set[k & 1] + (size_t)i * s->ce * s->esz;
		if (coll_posted(c, ops->post_recv(c->link, x->src[i], hdr, FP_BYTES, NULL, NULL, &rq[2 * i])) ||
		    (len && coll_posted(c, ops->post_recv(c->link, x->src[i], body, len, NULL, NULL, &rq[2 * i + 1]))))
			return coll_fail_peer(c, c->post_err, x->src[i], "cannot post a receive from rank %d: %s",
					      x->src[i], POST_WHY(c));
	}
	for (int j = 0; j < x->ndst; j++) {
		struct hora_net_link_req **q = rq + 2 * x->nsrc + 2 * j;
		if (coll_posted(c, ops->post_send(c->link, x->dst[j], s->out_hdr, FP_BYTES, NULL, NULL, &q[0])) ||
		    (len && coll_posted(c, ops->post_send(c->link, x->dst[j], outgoing(s, k, j), len, NULL, NULL,
							   &q[1]))))
			return coll_fail_peer(c, c->post_err, x->dst[j], "cannot post a send to rank %d: %s",
					      x->dst[j], POST_WHY(c));
	}
	return 0;
}

/* wait for one posted message (NULL: none); after a failure only frees it */
static int finish(struct hora_net_comm *c, struct hora_net_link_req **r, int peer, const char *what)
{
	if (!*r)
		return 0;
	int rc = c->broken ? (c->link->ops->wait(*r, NULL, 0), c->broken) : coll_wait(c, *r, peer, what);
	*r = NULL;
	return rc;
}

/* chunk k's messages: each source's fingerprint is checked before its data
 * are used; every posted message is finished, failure or not */
static int wait_chunk(struct nbr *s, size_t k)
{
	struct hora_net_comm *c = s->c;
	const struct nbr_call *x = s->x;
	struct hora_net_link_req **rq = s->req + (size_t)(k & 1) * (size_t)s->per;
	int rc = 0;
	for (int i = 0; i < x->nsrc; i++) {
		int r2 = finish(c, &rq[2 * i], x->src[i], "receive from");
		if (!r2 && !c->broken) {
			char msg[400];
			const uint8_t *hdr = s->in_hdr + ((size_t)(k & 1) * (size_t)x->nsrc + (size_t)i) * FP_BYTES;
			if ((r2 = fp_compare(c, hdr, s->f, x->src[i], msg, sizeof(msg))))
				r2 = coll_fail_peer(c, r2, r2 == -EBADE ? -1 : x->src[i], "%s", msg);
		}
		const int r3 = finish(c, &rq[2 * i + 1], x->src[i], "receive from");
		rc = rc ? rc : r2 ? r2 : r3;
	}
	for (int j = 0; j < 2 * x->ndst; j++) {
		const int r2 = finish(c, &rq[2 * x->nsrc + j], x->dst[j / 2], "send to");
		rc = rc ? rc : r2;
	}
	return rc;
}

/* recv chunk k = self_w x + sum src_w[i] y_i, in that order */
static void combine(const struct nbr *s, size_t k)
{
	const struct nbr_call *x = s->x;
	const size_t off = k * s->ce, len = x->count ? chunk_len(s, k) : 0, e = s->esz;
	const double uniform = 1.0 / (x->nsrc + 1);
	double acc[BLOCK];
	for (size_t b = 0; b < len; b += BLOCK) {
		const size_t m = len - b < BLOCK ? len - b : BLOCK;
		term(acc, x->send + (off + b) * e, x->self_w, m, x->t, true);
		for (int i = 0; i < x->nsrc; i++)
			term(acc, s->set[k & 1] + ((size_t)i * s->ce + b) * e, x->src_w ? x->src_w[i] : uniform, m,
			     x->t, false);
		from_double(x->recv + (off + b) * e, acc, m, x->t);
	}
}

/* ---- the pair -------------------------------------------------------------------- */

/* The pair average in chunks of small_cap on the caller-driven path: each
 * chunk one exchange (ours out while theirs comes in, so there is no order
 * to deadlock on), the fingerprint checked as soon as it is in on both
 * sides (both name a mismatch), then buf = (lower rank's + higher's) / 2 */
static int pair_run(struct hora_net_comm *c, const struct nbr_call *x, const struct fp *f)
{
	const int peer = x->src[0];
	const size_t esz = hora_net_dtype_size(x->t), ce = c->cfg.small_cap / esz ? c->cfg.small_cap / esz : 1;
	const bool lo = peer < c->rank; /* theirs first */
	size_t k = 0;
	do {
		const size_t len = x->count - k < ce ? x->count - k : ce;
		uint8_t *mine = x->recv + k * esz;
		int rc = coll_xchg1(c, peer, mine, peer, c->small, len * esz, f);
		if (rc)
			return rc;
		double acc[BLOCK];
		for (size_t b = 0; b < len; b += BLOCK) {
			const size_t m = len - b < BLOCK ? len - b : BLOCK;
			term(acc, (lo ? c->small : mine) + b * esz, 0.5, m, x->t, true);
			term(acc, (lo ? mine : c->small) + b * esz, 0.5, m, x->t, false);
			from_double(mine + b * esz, acc, m, x->t);
		}
		k += len;
	} while (k < x->count);
	return 0;
}

/* the chunk buffers (kept in c->nbr_buf, grown when a call needs more) and
 * the per-call headers and requests */
static int nbr_setup(struct nbr *s)
{
	struct hora_net_comm *c = s->c;
	const struct nbr_call *x = s->x;
	s->esz = hora_net_dtype_size(x->t);
	const size_t cap = c->cfg.segment_bytes * (size_t)c->cfg.depth / s->esz;
	s->ce = x->count < cap ? x->count : cap;
	if (!s->ce)
		s->ce = 1;
	s->nch = x->count ? (x->count + s->ce - 1) / s->ce : 1;
	const size_t slots = (size_t)x->nsrc + (x->dst_w ? (size_t)x->ndst : 0), each = slots * s->ce * s->esz;
	if (c->nbr_bytes < 2 * each) {
		free(c->nbr_buf);
		c->nbr_bytes = 0;
		if (!(c->nbr_buf = malloc(2 * each)))
			return coll_fail(c, -ENOMEM, "out of memory for %zu bytes of neighbour chunks", 2 * each);
		c->nbr_bytes = 2 * each;
	}
	s->set[0] = c->nbr_buf;
	s->set[1] = c->nbr_buf + each;
	s->per = 2 * x->nsrc + 2 * x->ndst;
	s->req = calloc(2 * (size_t)s->per + 1, sizeof(*s->req));
	s->in_hdr = malloc(2 * (size_t)x->nsrc * FP_BYTES + 1);
	if (!s->req || !s->in_hdr)
		return coll_fail(c, -ENOMEM, "out of memory for %d neighbours", x->nsrc + x->ndst);
	fp_encode(s->out_hdr, s->f);
	return 0;
}

int neighbor_run(struct hora_net_comm *c, const struct nbr_call *x, const struct fp *f)
{
	int rc = 0;
	if (!x->pair && !c->nbr_nocheck && c->n > 1 && (rc = pattern_check(c, x, f)))
		return rc;
	if (x->pair)
		return pair_run(c, x, f);
	struct nbr s = {.c = c, .x = x, .f = f};
	if (!x->nsrc && !x->ndst) { /* nobody this round: recv = self_w x */
		s.esz = hora_net_dtype_size(x->t);
		s.ce = x->count ? x->count : 1;
		combine(&s, 0);
		return 0;
	}
	if ((rc = nbr_setup(&s)))
		goto out;
	for (size_t k = 0; k <= s.nch; k++) {
		if (k < s.nch && !rc)
			rc = post_chunk(&s, k);
		if (k > 0) {
			const int r2 = wait_chunk(&s, k - 1);
			rc = rc ? rc : r2;
			if (!rc)
				combine(&s, k - 1);
		}
	}
out:
	free(s.req);
	free(s.in_hdr);
	return rc;
}
