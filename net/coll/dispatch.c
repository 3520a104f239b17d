/* dispatch.c - the collectives' entry points (coll.h): check the
 * arguments (a refused call still counts and is refused on every rank,
 * notice.c), number the call and build its fingerprint, choose the
 * algorithm by size (small_bytes, medium_bytes, the forced algorithm), run
 * it, and keep the progress fields for the stall check.
 *
 * Sizes (defaults in coll.h, measured in bench/RESULTS.md): up to
 * small_bytes the latency algorithms (recursive doubling, binomial tree);
 * allreduce up to medium_bytes the direct ring; above, the pipelined ring
 * (chain for broadcast), an allreduce larger than N x slice_bytes one slice
 * after the other. The neighbour allreduce and the pair average run in
 * neighbor.c (the pair average is numbered per pair, not here).
 */
#include "net/coll/internal.h"
#include "net/coll/node.h"
#include "net/util/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Number the call, then check what every rank can check alone; a bad
 * argument is refused on every rank (coll_refuse), after the call counted
 * so that the others meet it. root: only a broadcast has one. */
static int begin(struct hora_net_comm *c, enum hora_net_coll_kind kind, size_t count, enum hora_net_dtype t,
		 enum hora_net_op op, int root, struct fp *f)
{
	if (c->broken)
		return c->broken;
	if (atomic_load(&c->interrupted))
		return coll_fail_peer(c, -ECANCELED, -1, "the communicator was interrupted");
	c->seq++;
	c->kind = kind;
	atomic_store(&c->p_since_ms, hora_clock_ms());
	atomic_store(&c->p_kind, (uint32_t)kind);
	atomic_store(&c->p_seq, c->seq);
	atomic_store(&c->p_inside, 1);
	if ((unsigned)t >= HORA_NET_DTYPES)
		return coll_refuse(c, REFUSE_DTYPE, (int64_t)t);
	if ((unsigned)op >= HORA_NET_OPS)
		return coll_refuse(c, REFUSE_OP, (int64_t)op);
	if (kind == HORA_NET_COLL_BROADCAST && (root < 0 || root >= c->n))
		return coll_refuse(c, REFUSE_ROOT, root);
	const bool gathered = kind == HORA_NET_COLL_REDUCE_SCATTER || kind == HORA_NET_COLL_ALLGATHER;
	const size_t per = hora_net_dtype_size(t) * (gathered ? (size_t)c->n : 1);
	if (count > (SIZE_MAX / 4) / per) /* the byte sizes below must not wrap */
		return coll_refuse(c, REFUSE_COUNT, (int64_t)count);
	*f = (struct fp){.seq = c->seq, .count = count, .kind = kind, .root = (uint32_t)root,
			 .dtype = (uint8_t)t, .op = (uint8_t)op, .nranks = (uint16_t)c->n};
	return 0;
}

/* Buffers that overlap other than in the documented in-place layout would be
 * read after they were written. */
static bool overlap(const void *a, size_t an, const void *b, size_t bn)
{
	const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
	return an && bn && a0 < b0 + bn && b0 < a0 + an;
}

/* whole: N blocks of count; part: one block. Fine when part is this rank's
 * block of whole (in place) or apart from it. (After begin: t is valid.) */
static bool bad_split(const struct hora_net_comm *c, const void *whole, const void *part, size_t count,
		      enum hora_net_dtype t)
{
	const size_t e = hora_net_dtype_size(t);
	return (const uint8_t *)part != (const uint8_t *)whole + (size_t)c->rank * count * e &&
	       overlap(whole, count * e * (size_t)c->n, part, count * e);
}

/* direct_is_auto: the direct ring does not apply (broadcast), so a forced
 * direct ring means the automatic choice here */
static bool use_small(const struct hora_net_comm *c, size_t bytes, size_t count, bool direct_is_auto)
{
	if (bytes > c->cfg.small_cap)
		return false; /* the small buffers hold small_cap */
	const bool automatic =
		c->algo == HORA_NET_ALGO_AUTO || (c->algo == HORA_NET_ALGO_DIRECT_RING && direct_is_auto);
	return c->algo == HORA_NET_ALGO_LATENCY ||
	       (automatic && (bytes <= c->cfg.small_bytes || count < (size_t)c->n));
}

/* the direct ring needs one chunk of scratch in c->small */
static bool use_direct(const struct hora_net_comm *c, size_t bytes)
{
	if (bytes / (size_t)c->n + 64 > c->cfg.small_cap)
		return false;
	return c->algo == HORA_NET_ALGO_DIRECT_RING ||
	       (c->algo == HORA_NET_ALGO_AUTO && bytes <= c->cfg.medium_bytes);
}

/* The allreduce's path by size and hosts (net/coll/README.md "Choosing a
 * path"): the latency algorithm up to small_bytes (over shared memory when
 * every rank is on one host); above, on one host, the shared-memory stage
 * (unless collectives.algorithm forces a ring), across hosts of several
 * ranks each the hierarchical allreduce (collectives.hierarchical: auto
 * unless an algorithm is forced, on even then), else the direct ring up to
 * medium_bytes and the pipelined ring above. */
/* Every rank on one host with the stage, no algorithm forced, up to
 * STAGE_RS_AG_MAX bytes in all: reduce-scatter and allgather go through the
 * stage (the ring over the link's progress thread cost ~25 us for 8 bytes,
 * two hand-offs per message; 2 ranks, 256 KiB: 5.0-5.3 GB/s against 2.5).
 * Above, the pipelined ring, which overlaps its copies on the progress
 * thread (4 and 16 MiB: reduce-scatter 3.3 / 2.7 GB/s against the stage's
 * 2.6 / 2.0; allgather even at 4 MiB, 3.3 against 3.1 at 16). */
#define STAGE_RS_AG_MAX ((size_t)1 << 20)
static bool one_host_stage(const struct hora_net_comm *c, size_t total_bytes)
{
	return c->stage && c->node && c->node->nhosts == 1 && c->algo == HORA_NET_ALGO_AUTO &&
	       total_bytes <= STAGE_RS_AG_MAX;
}

static enum path allreduce_path(const struct hora_net_comm *c, size_t bytes, size_t count)
{
	if (use_small(c, bytes, count, false))
		return small_fits(c, bytes) ? P_GATHER : P_SMALL;
	const bool one_host = c->node && c->node->nhosts == 1;
	if (c->stage && one_host && c->algo == HORA_NET_ALGO_AUTO)
		return P_STAGE;
	if (c->stage && c->cross && (c->algo == HORA_NET_ALGO_AUTO || c->cfg.hierarchical == 1))
		return P_HIER;
	return use_direct(c, bytes) ? P_DIRECT : P_RING;
}

/* Large buffers go round the ring one slice (N x slice_bytes) after the
 * other, so each step moves slice_bytes: a slice's partial sums are still in
 * cache when they are sent on and gathered, where one pass over the whole
 * buffer streams it through memory twice. Every slice checks the call's
 * fingerprint again (32 bytes a slice). Slices are cut evenly, so none is
 * much shorter than the others (and none has fewer elements than ranks). */
static int sliced_ring(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op, struct fp *f)
{
	int rc;
	if ((rc = ring_fp(c, f)))
		return rc;
	const size_t esz = hora_net_dtype_size(t), slice = (size_t)c->n * (c->cfg.slice_bytes / esz);
	const size_t ns = slice && count > slice ? (count + slice - 1) / slice : 1;
	for (size_t i = 0, o = 0; i < ns; i++) {
		const size_t k = count / ns + (i < count % ns ? 1 : 0);
		uint8_t *out = (uint8_t *)recv + o * esz;
		if ((rc = ring_run(c, RING_ALLREDUCE, (const uint8_t *)send + o * esz, out, out, k, t, op, f)))
			return rc;
		o += k;
	}
	return 0;
}

static int allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		     enum hora_net_op op)
{
	struct fp f;
	int rc = begin(c, HORA_NET_COLL_ALLREDUCE, count, t, op, 0, &f);
	if (rc)
		return rc;
	const size_t bytes = count * hora_net_dtype_size(t);
	if (send != recv && overlap(send, bytes, recv, bytes))
		return coll_refuse(c, REFUSE_OVERLAP, 0);
	if (c->n == 1) {
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		return 0;
	}
	const enum path p = allreduce_path(c, bytes, count);
	fp_via(&f, c, p);
	if (p == P_GATHER) /* its gather checks every rank's fingerprint */
		return small_allreduce(c, send, recv, count, t, op, &f);
	if (p == P_STAGE) /* reads send, writes recv; its gather checks the fingerprints */
		return stage_allreduce(c, send, recv, count, t, op, &f);
	if (local_checks(c) && (rc = local_check(c, &f)))
		return rc;
	if (p == P_HIER) /* reads send, writes recv */
		return hier_allreduce(c, send, recv, count, t, op, &f);
	if (p == P_SMALL) {
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		fp_via(&f, c, P_SMALL);
		return doubling_allreduce(c, recv, count, t, op, &f);
	}
	if (p == P_DIRECT) {
		fp_via(&f, c, P_DIRECT);
		return direct_ring_allreduce(c, send, recv, count, t, op, &f);
	}
	return sliced_ring(c, send, recv, count, t, op, &f);
}

static int reduce_scatter(struct hora_net_comm *c, const void *send, void *recv, size_t recvcount,
			  enum hora_net_dtype t, enum hora_net_op op)
{
	struct fp f;
	int rc = begin(c, HORA_NET_COLL_REDUCE_SCATTER, recvcount, t, op, 0, &f);
	if (rc)
		return rc;
	if (bad_split(c, send, recv, recvcount, t))
		return coll_refuse(c, REFUSE_OVERLAP, 0);
	const size_t esz = hora_net_dtype_size(t), total = recvcount * esz * (size_t)c->n;
	if (c->n == 1) {
		if (send != recv && total)
			memmove(recv, send, total);
		return 0;
	}
	uint8_t *work = (uint8_t *)send; /* in place: the caller's buffer holds the partials */
	if ((const uint8_t *)recv != (const uint8_t *)send + (size_t)c->rank * recvcount * esz) {
		if (c->scratch_bytes < total) { /* out of place: one scratch buffer, kept */
			free(c->scratch);
			c->scratch_bytes = 0;
			if (!(c->scratch = malloc(total ? total : 1)))
				return coll_fail(c, -ENOMEM, "out of memory for %zu bytes of partial sums", total);
			c->scratch_bytes = total;
		}
		work = c->scratch;
	}
	if (one_host_stage(c, total)) { /* the caller's thread through shared memory */
		fp_via(&f, c, P_STAGE);
		return stage_reduce_scatter(c, send, work, recv, recvcount, t, op, &f);
	}
	fp_via(&f, c, P_RING);
	if ((local_checks(c) && (rc = local_check(c, &f))) || (rc = ring_fp(c, &f)))
		return rc;
	return ring_run(c, RING_REDUCE_SCATTER, send, work, recv, recvcount, t, op, &f);
}

static int allgather(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t)
{
	struct fp f;
	int rc = begin(c, HORA_NET_COLL_ALLGATHER, count, t, HORA_NET_SUM, 0, &f);
	if (rc)
		return rc;
	if (bad_split(c, recv, send, count, t))
		return coll_refuse(c, REFUSE_OVERLAP, 0);
	if (c->n == 1) {
		size_t bytes = count * hora_net_dtype_size(t);
		if (send != recv && bytes)
			memmove(recv, send, bytes);
		return 0;
	}
	if (one_host_stage(c, count * hora_net_dtype_size(t) * (size_t)c->n)) {
		fp_via(&f, c, P_STAGE);
		return stage_allgather(c, send, recv, count, t, &f);
	}
	fp_via(&f, c, P_RING);
	if ((local_checks(c) && (rc = local_check(c, &f))) || (rc = ring_fp(c, &f)))
		return rc;
	return ring_run(c, RING_ALLGATHER, send, recv, recv, count, t, HORA_NET_SUM, &f);
}

static int broadcast(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int root)
{
	struct fp f;
	int rc = begin(c, HORA_NET_COLL_BROADCAST, count, t, HORA_NET_SUM, root, &f);
	if (rc || c->n == 1)
		return rc;
	const size_t bytes = count * hora_net_dtype_size(t);
	const bool small = use_small(c, bytes, count, true);
	fp_via(&f, c, small ? P_SMALL : P_CHAIN);
	if (local_checks(c) && (rc = local_check(c, &f)))
		return rc;
	return small ? tree_bcast(c, buf, bytes, root, &f) : chain_bcast(c, buf, bytes, root, &f);
}

static int barrier(struct hora_net_comm *c)
{
	struct fp f;
	int rc = begin(c, HORA_NET_COLL_BARRIER, 0, HORA_NET_I32, HORA_NET_SUM, 0, &f);
	if (rc || c->n == 1)
		return rc;
	fp_via(&f, c, P_SMALL);
	if (local_checks(c)) /* everyone's fingerprint gathered: everyone entered */
		return local_check(c, &f);
	return doubling_barrier(c, &f);
}

/* A neighbour list: 0..N-1 ranks, each another rank, once; finite weights. */
static int check_list(struct hora_net_comm *c, const int *ranks, const double *w, int k)
{
	if (k < 0 || k > c->n - 1 || (k && !ranks))
		return coll_refuse(c, REFUSE_DEGREE, k);
	for (int i = 0; i < k; i++) {
		const int r = ranks[i];
		if (r < 0 || r >= c->n || r == c->rank)
			return coll_refuse(c, REFUSE_PEER, r);
		for (int j = 0; j < i; j++)
			if (ranks[j] == r)
				return coll_refuse(c, REFUSE_PEER, r);
		if (w && !isfinite(w[i]))
			return coll_refuse(c, REFUSE_WEIGHT, r);
	}
	return 0;
}

static int neighbor_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
			      enum hora_net_dtype t, const struct hora_net_neighbors *nb)
{
	struct fp f;
	int rc = begin(c, HORA_NET_COLL_NEIGHBOR_ALLREDUCE, count, t, HORA_NET_SUM, 0, &f);
	if (rc)
		return rc;
	if (!nb)
		return coll_refuse(c, REFUSE_DEGREE, -1);
	const size_t bytes = count * hora_net_dtype_size(t);
	if (send != recv && overlap(send, bytes, recv, bytes))
		return coll_refuse(c, REFUSE_OVERLAP, 0);
	if ((rc = check_list(c, nb->src, nb->src_weights, nb->nsrc)) ||
	    (rc = check_list(c, nb->dst, nb->dst_weights, nb->ndst)))
		return rc;
	if (!isfinite(nb->self_weight))
		return coll_refuse(c, REFUSE_WEIGHT, c->rank);
	fp_via(&f, c, P_NONE);
	if (local_checks(c) && (rc = local_check(c, &f)))
		return rc;
	const struct nbr_call x = {.send = send, .recv = recv, .count = count, .t = t,
				   .self_w = nb->self_weight, .src = nb->src, .dst = nb->dst,
				   .src_w = nb->src_weights, .dst_w = nb->dst_weights, .nsrc = nb->nsrc,
				   .ndst = nb->ndst};
	return neighbor_run(c, &x, &f);
}

/* Numbered per pair, not in the collectives' sequence: only peer takes
 * part. A peer that is no other rank involves nobody: -EINVAL here alone. */
static int pair_average(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int peer)
{
	if (c->broken)
		return c->broken;
	if (peer < 0 || peer >= c->n || peer == c->rank) {
		snprintf(c->err, sizeof(c->err), "rank %d (view %u), pair_average: peer %d is not another rank of 0..%d",
			 c->rank, c->cfg.opts.view, peer, c->n - 1);
		return -EINVAL;
	}
	c->kind = HORA_NET_COLL_PAIR_AVERAGE;
	if (atomic_load(&c->interrupted))
		return coll_fail_peer(c, -ECANCELED, -1, "the communicator was interrupted");
	c->pair_now = ++c->pair_seq[peer];
	atomic_store(&c->p_since_ms, hora_clock_ms());
	atomic_store(&c->p_kind, (uint32_t)c->kind);
	atomic_store(&c->p_inside, 1);
	if ((unsigned)t >= HORA_NET_DTYPES)
		return coll_refuse(c, REFUSE_DTYPE, (int64_t)t);
	if (count > (SIZE_MAX / 4) / hora_net_dtype_size(t))
		return coll_refuse(c, REFUSE_COUNT, (int64_t)count);
	struct fp f = {.seq = c->pair_now, .count = count, .kind = c->kind, .dtype = (uint8_t)t,
		       .op = HORA_NET_AVG, .nranks = (uint16_t)c->n};
	static const double half = 0.5;
	const struct nbr_call x = {.send = buf, .recv = buf, .count = count, .t = t, .self_w = 0.5,
				   .src = &peer, .dst = &peer, .src_w = &half, .nsrc = 1, .ndst = 1,
				   .pair = true};
	return neighbor_run(c, &x, &f);
}

/* ---- entry points: progress bookkeeping around the calls ------------------------- */

static int left_call(struct hora_net_comm *c, int rc)
{
	if (!c->nest)
		atomic_store(&c->p_inside, 0);
	return rc;
}

int hora_net_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op)
{
	return left_call(c, allreduce(c, send, recv, count, t, op));
}
int hora_net_reduce_scatter(struct hora_net_comm *c, const void *send, void *recv, size_t recvcount,
			    enum hora_net_dtype t, enum hora_net_op op)
{
	return left_call(c, reduce_scatter(c, send, recv, recvcount, t, op));
}
int hora_net_allgather(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t)
{
	return left_call(c, allgather(c, send, recv, count, t));
}
int hora_net_broadcast(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int root)
{
	return left_call(c, broadcast(c, buf, count, t, root));
}
int hora_net_barrier(struct hora_net_comm *c)
{
	return left_call(c, barrier(c));
}
int hora_net_neighbor_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
				enum hora_net_dtype t, const struct hora_net_neighbors *nb)
{
	return left_call(c, neighbor_allreduce(c, send, recv, count, t, nb));
}
int hora_net_pair_average(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int peer)
{
	return left_call(c, pair_average(c, buf, count, t, peer));
}

/* ---- calls whose data another module moves (coll.h) ------------------------------ */

static int device_call(struct hora_net_comm *c, const struct hora_net_device_args *a, hora_net_device_fn run,
		       void *arg)
{
	struct fp f;
	const enum hora_net_coll_kind kind = a->kind;
	int rc = begin(c, kind, a->count, a->t, a->op, a->root, &f);
	if (rc)
		return rc;
	const size_t e = hora_net_dtype_size(a->t), bytes = a->count * e;
	if (a->send && ((kind == HORA_NET_COLL_ALLREDUCE && a->send != a->recv && overlap(a->send, bytes, a->recv, bytes)) ||
			(kind == HORA_NET_COLL_ALLGATHER && bad_split(c, a->recv, a->send, a->count, a->t)) ||
			(kind == HORA_NET_COLL_REDUCE_SCATTER && bad_split(c, a->send, a->recv, a->count, a->t))))
		return coll_refuse(c, REFUSE_OVERLAP, 0);
	fp_via(&f, c, P_DEVICE);
	f.layout = (uint16_t)a->variant;
	if (c->n > 1 && (rc = local_checks(c) ? local_check(c, &f)
					      : coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, &f)))
		return rc;
	char err[400] = "";
	c->nest++;
	rc = run(arg, err, sizeof(err));
	c->nest--;
	if (rc)
		return c->broken ? c->broken : coll_fail(c, rc, "%s", err[0] ? err : strerror(-rc));
	return 0;
}

int hora_net_device_call(struct hora_net_comm *c, const struct hora_net_device_args *a, hora_net_device_fn run,
			 void *arg)
{
	return left_call(c, device_call(c, a, run, arg));
}

int hora_net_comm_fail(struct hora_net_comm *c, int rc, const char *why)
{
	return coll_fail(c, rc, "%s", why);
}

int hora_net_comm_hosts(const struct hora_net_comm *c)
{
	return c->node ? c->node->nhosts : 1;
}

/* ---- the path a call takes, in words (bench headers) ----------------------------- */

int hora_net_comm_describe(const struct hora_net_comm *c, size_t bytes, char *buf, size_t len)
{
	const size_t count = bytes / 4; /* f32 */
	const enum path p = c->n > 1 ? allreduce_path(c, bytes, count) : P_NONE;
	const char *how = p == P_NONE ? "a local copy" : p == P_SMALL ? "recursive doubling (latency)"
			  : p == P_GATHER ? "the shared-memory gather (latency)"
			  : p == P_STAGE ? "the shared-memory stage"
			  : p == P_HIER ? "hierarchical (shared memory within each host, the TCP ring across)"
					: fp_path_name(p);
	int k = topo_describe(c, buf, len);
	if (k < 0 || (size_t)k >= len)
		return k;
	return k + snprintf(buf + k, len - (size_t)k, "; allreduce of %zu bytes: %s", bytes, how);
}
