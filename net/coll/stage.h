/* stage.h - a node-local stage: how the ranks of one host reduce and
 * gather among themselves through something faster than the network
 * (net/coll only).
 *
 * The hierarchical allreduce (hier.c) is: reduce-scatter within the host
 * (this stage), allreduce of each shard across hosts among the ranks with
 * the same local rank (the TCP ring), allgather within the host (this
 * stage). On one host the stage's allreduce is the whole call. Today's
 * stage is shared memory (stage_shm.c); NCCL between the GPUs of a node is
 * another implementation of these ops (the GPU issue), not a special case.
 *
 * Local ranks are 0..nlocal-1. Every local rank calls the same ops in the
 * same order with the same count, dtype and op (the communicator's
 * fingerprints check that before the stage runs). Shard l of a buffer of
 * count elements is hora_net_stage_shard(count, nlocal, l): contiguous,
 * the first count % nlocal shards one element longer.
 *
 * Results are bitwise identical on every local rank: each element is
 * reduced once, by one rank, in local-rank order 0, 1, ..., nlocal-1
 * (hora_net_reduce pairwise). AVG: reduce_scatter sums (the caller
 * divides, once, with hora_net_scale, when the shard is complete: across
 * hosts); allreduce divides by nlocal itself (hora_net_scale on the
 * reduced elements, by the rank that reduced them). Errors: -errno with the cause in err (a dead local peer
 * is -ECONNRESET naming its local rank and pid; no progress for the
 * stage's timeout is -ETIMEDOUT; interrupt makes every wait -ECANCELED).
 * After an error the stage is unusable (the communicator breaks).
 */
#ifndef HORA_NET_COLL_STAGE_H
#define HORA_NET_COLL_STAGE_H

#include "net/coll/reduce.h"

#include <stddef.h>
#include <stdint.h>

/* a window's descriptor (stage ops window, allreduce_windows) */
#define HORA_NET_STAGE_DESC_BYTES 16

struct hora_net_stage;
struct hora_net_shm_regions;

struct hora_net_stage_ops {
	/* in (count elements) of every local rank: on return, shard lrank
	 * of this rank's buf holds the reduction of that shard over the local
	 * ranks; the other shards of buf are left as they were (in == buf: in
	 * place; else in is only read, and may overlap buf nowhere). */
	int (*reduce_scatter)(struct hora_net_stage *s, const void *in, void *buf, size_t count,
			      enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen);
	/* shard lrank of this rank's buf is its contribution: on return,
	 * every shard l of buf holds local rank l's shard l. */
	int (*allgather)(struct hora_net_stage *s, void *buf, size_t count, enum hora_net_dtype t,
			 char *err, size_t errlen);
	/* both: buf of every local rank gets the reduction of in (AVG: the
	 * sum divided by nlocal); in == buf in place, else in is only read (one copy less than
	 * copying it to buf first). */
	int (*allreduce)(struct hora_net_stage *s, const void *in, void *buf, size_t count,
			 enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen);
	/* optional: the latency path's gather: every local rank passes a
	 * message of `bytes` (the same on all, at most small_max); on return
	 * all[l] points at local rank l's (read-only, valid until the next op) */
	int (*gather)(struct hora_net_stage *s, const void *msg, size_t bytes, const void **all, char *err,
		      size_t errlen);
	/* optional, single-copy: fill desc (HORA_NET_STAGE_DESC_BYTES) for an
	 * in-place allreduce of buf (bytes) by allreduce_windows; all zero
	 * when buf lies in no region of regs (net/shm/shm.h) or the stage
	 * takes no more regions: then the ranks run allreduce. May pass the
	 * region's fd to the local peers, once per region and stage. */
	int (*window)(struct hora_net_stage *s, struct hora_net_shm_regions *regs, const void *buf,
		      size_t bytes, uint8_t *desc, char *err, size_t errlen);
	/* optional: the in-place allreduce of every local rank's buf where it
	 * lies, no copy in or out: desc[l] is local rank l's (window), every
	 * one non-zero. It must run right after a gather (the gather op) that
	 * carried the descriptors and that every local rank entered after its
	 * last write to buf: that gather is its entry barrier. AVG as
	 * allreduce; the same bits as allreduce. */
	int (*allreduce_windows)(struct hora_net_stage *s, const uint8_t *const *desc, void *buf,
				 size_t count, enum hora_net_dtype t, enum hora_net_op op, char *err,
				 size_t errlen);
	/* any thread: every wait, now and later, fails promptly (-ECANCELED) */
	void (*interrupt)(struct hora_net_stage *s);
	/* leave and free (local peers blocked on us fail -ECONNRESET) */
	void (*destroy)(struct hora_net_stage *s);
};

struct hora_net_stage {
	const struct hora_net_stage_ops *ops;
	int lrank, nlocal;
	const char *name; /* "shm", "nccl": for bench headers and errors */
	size_t small_max; /* gather's largest message (0: no gather) */
	/* after an op failed: the local rank to blame (it died or left: the
	 * caller may read its notice; or the one waited for at -ETIMEDOUT),
	 * -1 when none (interrupt, a local error). Set by the op's thread. */
	int culprit;
};

/* element offset and count of shard l of count elements split nlocal ways */
static inline void hora_net_stage_shard(size_t count, int nlocal, int l, size_t *off, size_t *len)
{
	const size_t q = count / (size_t)nlocal, r = count % (size_t)nlocal, ul = (size_t)l;
	*off = ul * q + (ul < r ? ul : r);
	*len = q + (ul < r ? 1 : 0);
}

#endif
