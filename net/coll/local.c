/* local.c - the allreduce paths of a communicator whose ranks are all on
 * one host, through its shared-memory stage (stage.h):
 *
 * - small_allreduce (up to small_bytes, when the stage has a gather):
 *   every rank writes {its fingerprint, its data} into its slot in one go
 *   and reads everyone's (stage_small.c: one cache line for an 8-byte
 *   call); each rank compares every fingerprint with its own (so every
 *   rank names a mismatch itself) and reduces all the data in local-rank
 *   order: every rank computes the same bits.
 * - stage_allreduce (above): its own gather carries every rank's
 *   fingerprint and window descriptor (stage.h): when every rank's buffer
 *   is in a region, the single-copy allreduce (stage_window.c), else the
 *   stage's allreduce, which reads send and writes recv, AVG divided by the
 *   stage (each block by the rank that reduced it, while it is in L1: no
 *   pass of its own); with more ranks than the gather takes, the
 *   fingerprint goes round the ring first and the copying stage runs.
 *
 * - stage_reduce_scatter, stage_allgather: the same for those two calls
 *   (the stage's ops on the caller's thread; reduce-scatter's AVG divided
 *   here, on the rank's shard).
 *
 * - local_check: every call on one host (every collective but the pair
 *   average) first gathers every rank's fingerprint through the stage, so
 *   every rank compares every rank's call with its own and names a
 *   mismatch at once, whatever path each rank took (the small path's
 *   gather is that check too). The barrier is just this. Up to
 *   MAX_SMALL_LOCAL ranks on the host; above, every path checks its own
 *   fingerprints over the link, as across hosts. A pair average on one
 *   rank against a collective on its peer is not named there: the
 *   collective waits in the gather, the pair average on the link, until
 *   the I/O timeout (the pair average is not a collective: it cannot take
 *   part in the gather).
 *
 * stage_fail, for these and hier.c: a stage error breaks the communicator,
 * naming the rank the stage lost (whose notice may say why).
 */
#include "net/coll/internal.h"
#include "net/coll/node.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MAX_SMALL_LOCAL 64 /* the small path's ranks per host (an array on the stack) */

static int gather_checked(struct hora_net_comm *c, const struct fp *f, size_t bytes, const void **all);

/* the stage names local ranks: say which ranks they are when they differ */
int stage_fail(struct hora_net_comm *c, int rc, const char *what, const char *err)
{
	if (c->broken)
		return c->broken;
	/* the rank the stage lost: its notice may say why (a mismatch it saw);
	 * the stage names local ranks: say which rank that is here */
	const struct node_map *m = c->node;
	const int cul = c->stage ? c->stage->culprit : -1;
	const int peer = m && cul >= 0 && cul < m->nlocal ? m->local[cul] : -1;
	char map[64] = "";
	if (peer >= 0 && m->nhosts > 1)
		snprintf(map, sizeof(map), " (local rank %d is rank %d)", cul, peer);
	/* a rank whose stage op broke sends its notice only once its own
	 * failure is handled (its cross ring's peer waited for, its stage
	 * thread joined): wait longer for it than for a closed link's */
	c->notice_wait_ms = 250;
	return coll_fail_peer(c, rc, peer, "%s: %s%s", what, err, map);
}

/* Whether every local rank's descriptor names a window (gather payloads). */
static bool all_windows(const struct hora_net_stage *s, const void *const *all, const uint8_t **desc)
{
	static const uint8_t none[HORA_NET_STAGE_DESC_BYTES];
	bool every = s->ops->allreduce_windows != NULL;
	for (int l = 0; l < s->nlocal; l++) {
		desc[l] = (const uint8_t *)all[l] + FP_BYTES;
		every = every && memcmp(desc[l], none, sizeof(none)) != 0;
	}
	return every;
}

int stage_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		    enum hora_net_op op, const struct fp *f)
{
	struct hora_net_stage *s = c->stage;
	char err[300] = "";
	int rc = 0;
	if (!local_checks(c)) { /* the fingerprint round the ring */
		if ((rc = coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f)))
			return rc;
	} else {
		/* the call's gather: every fingerprint, and each rank's window
		 * (zero: its buffer is in no region) */
		const size_t bytes = count * hora_net_dtype_size(t);
		const size_t pay = s->small_max >= FP_BYTES + HORA_NET_STAGE_DESC_BYTES ? HORA_NET_STAGE_DESC_BYTES : 0;
		const void *all[MAX_SMALL_LOCAL];
		const uint8_t *desc[MAX_SMALL_LOCAL];
		fp_encode(c->small, f);
		memset(c->small + FP_BYTES, 0, pay);
		if (pay && send == recv && c->regions && s->ops->window &&
		    (rc = s->ops->window(s, c->regions, recv, bytes, c->small + FP_BYTES, err, sizeof(err))))
			return stage_fail(c, rc, "the shared-memory stage", err);
		if ((rc = gather_checked(c, f, pay, all)))
			return rc;
		/* the descriptors stay in the peers' slots until our next step */
		if (pay && all_windows(s, all, desc)) {
			if ((rc = s->ops->allreduce_windows(s, desc, recv, count, t, op, err, sizeof(err))))
				return stage_fail(c, rc, "the shared-memory stage (single copy)", err);
			atomic_fetch_add_explicit(&c->single_copy, 1, memory_order_relaxed);
			return 0;
		}
	}
	if ((rc = s->ops->allreduce(s, send, recv, count, t, op, err, sizeof(err))))
		return stage_fail(c, rc, "the shared-memory stage", err);
	return 0; /* AVG: divided by the stage (nlocal == c->n on one host) */
}

/* The fingerprint before a stage op: local_check's gather, else round the ring. */
static int stage_fp(struct hora_net_comm *c, const struct fp *f)
{
	return local_checks(c) ? local_check(c, f)
			       : coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f);
}

/* Reduce-scatter through the stage: shard r (recvcount elements) of the
 * n * recvcount in send, reduced over the ranks, into recv. work is send
 * (in place: recv is shard r of it) or a scratch of n * recvcount the
 * stage writes shard r of. AVG divided here, once the shard is complete. */
int stage_reduce_scatter(struct hora_net_comm *c, const void *send, void *work, void *recv, size_t recvcount,
			 enum hora_net_dtype t, enum hora_net_op op, const struct fp *f)
{
	char err[300] = "";
	int rc = stage_fp(c, f);
	if (rc)
		return rc;
	const size_t esz = hora_net_dtype_size(t), off = (size_t)c->rank * recvcount * esz;
	if ((rc = c->stage->ops->reduce_scatter(c->stage, send, work, recvcount * (size_t)c->n, t, op, err,
						sizeof(err))))
		return stage_fail(c, rc, "the shared-memory stage", err);
	if ((uint8_t *)work + off != (uint8_t *)recv && recvcount)
		memcpy(recv, (uint8_t *)work + off, recvcount * esz);
	if (op == HORA_NET_AVG)
		hora_net_scale(recv, recvcount, t, c->n);
	return 0;
}

/* Allgather through the stage: send (count elements) into shard r of
 * recv (unless it is there already), then every rank's shard. */
int stage_allgather(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		    const struct fp *f)
{
	char err[300] = "";
	int rc = stage_fp(c, f);
	if (rc)
		return rc;
	const size_t esz = hora_net_dtype_size(t);
	uint8_t *mine = (uint8_t *)recv + (size_t)c->rank * count * esz;
	if ((const uint8_t *)send != mine && count)
		memcpy(mine, send, count * esz);
	if ((rc = c->stage->ops->allgather(c->stage, recv, count * (size_t)c->n, t, err, sizeof(err))))
		return stage_fail(c, rc, "the shared-memory stage", err);
	return 0;
}

/* every rank's message (all), each fingerprint compared with ours */
static int gather_checked(struct hora_net_comm *c, const struct fp *f, size_t bytes, const void **all)
{
	struct hora_net_stage *s = c->stage;
	char err[300] = "";
	int rc = s->ops->gather(s, c->small, FP_BYTES + bytes, all, err, sizeof(err));
	if (rc)
		return stage_fail(c, rc, "the shared-memory stage", err);
	for (int l = 0; l < s->nlocal; l++) {
		const int from = c->node->local[l];
		if (l != s->lrank && (rc = fp_compare(c, all[l], f, from, err, sizeof(err))))
			return coll_fail_peer(c, rc, from, "%s", err);
	}
	return 0;
}

bool local_checks(const struct hora_net_comm *c)
{
	return c->stage && c->stage->ops->gather && c->node && c->node->nhosts == 1 &&
	       c->stage->small_max >= FP_BYTES && c->stage->nlocal <= MAX_SMALL_LOCAL;
}

int local_check(struct hora_net_comm *c, const struct fp *f)
{
	const void *all[MAX_SMALL_LOCAL];
	fp_encode(c->small, f);
	return gather_checked(c, f, 0, all);
}

bool small_fits(const struct hora_net_comm *c, size_t bytes)
{
	return local_checks(c) && c->stage->nlocal <= MAX_SMALL_LOCAL && FP_BYTES + bytes <= c->stage->small_max &&
	       bytes <= c->cfg.small_cap;
}

int small_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		    enum hora_net_op op, const struct fp *f)
{
	struct hora_net_stage *s = c->stage;
	const size_t bytes = count * hora_net_dtype_size(t);
	const void *all[MAX_SMALL_LOCAL];
	fp_encode(c->small, f);
	if (bytes)
		memcpy(c->small + FP_BYTES, send, bytes);
	int rc = gather_checked(c, f, bytes, all);
	if (rc || !count)
		return rc;
	const uint8_t *d0 = (const uint8_t *)all[0] + FP_BYTES, *d1 = (const uint8_t *)all[1] + FP_BYTES;
	hora_net_reduce(recv, d0, d1, count, t, op);
	for (int l = 2; l < s->nlocal; l++)
		hora_net_reduce(recv, recv, (const uint8_t *)all[l] + FP_BYTES, count, t, op);
	if (op == HORA_NET_AVG)
		hora_net_scale(recv, count, t, c->n);
	return 0;
}
