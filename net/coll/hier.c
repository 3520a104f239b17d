/* hier.c - the allreduce paths through the host's local stage (stage.h):
 *
 * - stage_allreduce, every rank on one host: the call's fingerprint round
 *   the ring (a mismatch is named before any data moves), then the stage's
 *   allreduce; AVG divides once at the end.
 * - hier_allreduce, several hosts with the same number of ranks each:
 *   reduce-scatter within the host (the stage: shard l of the buffer to
 *   local rank l), allreduce of shard l across hosts among the ranks with
 *   local rank l (c->cross, one rank per host, over the TCP link: every
 *   shard in parallel, each on its own TCP connections), allgather within
 *   the host. Each host's link carries the buffer's size once each way,
 *   where the flat ring carries 2(N-1)/N of it.
 *
 * Every element is reduced in a fixed order (the stage: local ranks in
 * order; the cross ring: its own fixed schedule), so every rank ends with
 * the same bits. A failure anywhere breaks the whole communicator (the
 * stage left, every link closed), so that no rank waits for one that
 * stopped.
 */
#include "net/coll/internal.h"

#include <errno.h>
#include <stdio.h>

static int stage_failed(struct hora_net_comm *c, int rc, const char *what, const char *err)
{
	if (c->broken)
		return c->broken;
	return coll_fail(c, rc, "%s: %s", what, err);
}

int stage_allreduce(struct hora_net_comm *c, void *recv, size_t count, enum hora_net_dtype t,
		    enum hora_net_op op, const struct fp *f)
{
	int rc = coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f);
	if (rc)
		return rc;
	char err[300] = "";
	if ((rc = c->stage->ops->allreduce(c->stage, recv, count, t, op, err, sizeof(err))))
		return stage_failed(c, rc, "the shared-memory stage", err);
	if (op == HORA_NET_AVG)
		hora_net_scale(recv, count, t, c->n);
	return 0;
}

int hier_allreduce(struct hora_net_comm *c, void *recv, size_t count, enum hora_net_dtype t,
		   enum hora_net_op op, const struct fp *f)
{
	int rc = coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f);
	if (rc)
		return rc;
	struct hora_net_stage *s = c->stage;
	char err[300] = "";
	if ((rc = s->ops->reduce_scatter(s, recv, count, t, op, err, sizeof(err))))
		return stage_failed(c, rc, "reduce-scatter within the host", err);
	size_t off, len;
	hora_net_stage_shard(count, s->nlocal, s->lrank, &off, &len);
	uint8_t *shard = (uint8_t *)recv + off * hora_net_dtype_size(t);
	const enum hora_net_op cross_op = op == HORA_NET_AVG ? HORA_NET_SUM : op;
	if ((rc = hora_net_allreduce(c->cross, shard, shard, len, t, cross_op)))
		return stage_failed(c, rc, "allreduce across hosts", hora_net_comm_error(c->cross));
	if (op == HORA_NET_AVG)
		hora_net_scale(shard, len, t, c->n);
	if ((rc = s->ops->allgather(s, recv, count, t, err, sizeof(err))))
		return stage_failed(c, rc, "allgather within the host", err);
	return 0;
}
