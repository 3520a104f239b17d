/* schedule.h - the ring schedule shared by the pipelined ring (ring.c) and
 * the direct ring (direct.c), so that both reduce in the same order and give
 * the same bits (net/coll only).
 *
 * Allreduce = reduce-scatter (steps 0..n-2: rank r ends owning chunk r) then
 * allgather (steps n-1..2n-3); at step t a rank sends chunk send_chunk(t) to
 * its right neighbour and receives chunk recv_chunk(t) from its left one.
 */
#ifndef HORA_NET_COLL_SCHEDULE_H
#define HORA_NET_COLL_SCHEDULE_H

#include <stddef.h>

struct ring {
	size_t count, esz, seg; /* seg in elements; count: whole buffer (split in n) or per rank */
	int n, r, fixed;        /* fixed: every chunk is `count` elements (allgather, reduce-scatter) */
};

static inline void chunk_of(const struct ring *g, int ch, size_t *off, size_t *len)
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

static inline size_t nsegs(const struct ring *g, size_t len)
{
	return (len + g->seg - 1) / g->seg;
}

static inline size_t seg_len(const struct ring *g, size_t len, size_t k)
{
	size_t so = k * g->seg;
	return len - so < g->seg ? len - so : g->seg;
}

static inline int send_chunk(const struct ring *g, int t)
{
	int u = t < g->n - 1 ? t + 1 : t - (g->n - 1);
	return ((g->r - u) % g->n + g->n) % g->n;
}

static inline int recv_chunk(const struct ring *g, int t)
{
	return ((send_chunk(g, t) - 1) % g->n + g->n) % g->n;
}

#endif
