/* doubling.c - recursive doubling on the link's caller-driven path: the
 * latency allreduce (up to small_bytes) and the barrier (a zero-byte
 * allreduce). log2(N) exchanges, plus a fold-in/fold-out step for N not a
 * power of two; each pair reduces (lower rank's data) op (higher rank's
 * data), so both get the same bits. The fingerprint travels in the same
 * message as the data.
 */
#include "net/coll/internal.h"

int doubling_allreduce(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t,
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
		return (rc = coll_xchg1(c, r - p2, buf, -1, NULL, bytes, f)) ? rc
									 : coll_xchg1(c, -1, NULL, r - p2, buf, bytes, f);
	if (r < extra) {
		if ((rc = coll_xchg1(c, -1, NULL, r + p2, theirs, bytes, f)))
			return rc;
		hora_net_reduce(buf, buf, theirs, count, t, op);
	}
	for (int mask = 1; mask < p2; mask <<= 1) {
		int partner = r ^ mask;
		if ((rc = coll_xchg1(c, partner, buf, partner, theirs, bytes, f)))
			return rc;
		if (r < partner) /* lower rank's data first: both get the same bits */
			hora_net_reduce(buf, buf, theirs, count, t, op);
		else
			hora_net_reduce(buf, theirs, buf, count, t, op);
	}
	if (op == HORA_NET_AVG)
		hora_net_scale(buf, count, t, c->n);
	if (r < extra && (rc = coll_xchg1(c, r + p2, buf, -1, NULL, bytes, f)))
		return rc;
	return 0;
}

int doubling_barrier(struct hora_net_comm *c, const struct fp *f)
{
	int dummy = 0;
	return doubling_allreduce(c, &dummy, 0, HORA_NET_I32, HORA_NET_SUM, f);
}
