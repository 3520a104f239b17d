/* direct.c - the ring allreduce on the link's caller-driven path, for
 * mid-sized messages (small_bytes < size <= medium_bytes): the same schedule
 * and reduction order as the pipelined ring (schedule.h; so the same bits),
 * one exchange per step (send a chunk right while receiving one from the
 * left), no segments, run by the calling thread. On a real link this keeps
 * the ring's 2(N-1)/N bandwidth term without the comm-thread hand-offs that
 * dominate each step below a few MiB. Partial sums go to dst, one chunk of
 * scratch in c->small.
 */
#include "net/coll/internal.h"
#include "net/coll/schedule.h"

int direct_ring_allreduce(struct hora_net_comm *c, const uint8_t *src, uint8_t *dst, size_t count,
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
		if ((rc = coll_xchg(c, right, out, sl * g.esz, left, in, rl * g.esz, f)))
			break;
		if (tt < n - 1) { /* further-travelled data first, ours second */
			hora_net_reduce(dst + ro * g.esz, c->small, src + ro * g.esz, rl, t, op);
			if (tt == n - 2 && op == HORA_NET_AVG)
				hora_net_scale(dst + ro * g.esz, rl, t, n);
		}
	}
	return rc;
}
