/* hier.c - the hierarchical allreduce, through the host's local stage
 * (stage.h) and the cross-host communicator:
 *
 * (local.c has the one-host paths.)
 * - hier_allreduce, several hosts with the same number of ranks each:
 *   reduce-scatter within the host (the stage: shard l of the buffer to
 *   local rank l), allreduce of shard l across hosts among the ranks with
 *   local rank l (c->cross, one rank per host, over the TCP link: every
 *   shard in parallel, each on its own TCP connections), allgather within
 *   the host. Each host's link carries the buffer's size once each way,
 *   where the flat ring carries 2(N-1)/N of it.
 *   Large buffers go in slices, pipelined: a stage thread runs the
 *   slices' reduce-scatters and allgathers while the caller runs the
 *   cross-host allreduce of the slice before, so that the network is busy
 *   all the time and only the first reduce-scatter and the last allgather
 *   are not hidden behind it.
 *
 * Every element is reduced in a fixed order (the stage: local ranks in
 * order; the cross ring: its own fixed schedule), so every rank ends with
 * the same bits. A failure anywhere breaks the whole communicator (the
 * stage left, every link closed), so that no rank waits for one that
 * stopped.
 */
#include "net/coll/internal.h"
#include "net/coll/node.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The pipeline of one call: the stage thread runs RS(0), then for each
 * slice k: RS(k+1), wait for X(k), AG(k); the caller runs, for each k:
 * wait for RS(k), X(k). Both orders are the same on every local rank. */
struct pipe {
	struct hora_net_comm *c;
	const uint8_t *in; /* send: read by the reduce-scatters only */
	uint8_t *buf;
	size_t count, slice, esz;
	int nslices;
	enum hora_net_dtype t;
	enum hora_net_op op;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int rs_done, x_done; /* slices whose RS / X finished */
	int stage_rc, stop;  /* the stage thread's failure; the caller's stop */
	char err[300];
	const char *what;
};

/* slice k: its input, its output (the same in place), its elements */
static void slice_of(const struct pipe *p, int k, const uint8_t **in, uint8_t **b, size_t *n)
{
	const size_t o = (size_t)k * p->slice;
	*b = p->buf + o * p->esz;
	if (in)
		*in = p->in + o * p->esz;
	*n = p->count - o < p->slice ? p->count - o : p->slice;
}

/* the stage thread waits for X(k) (or the caller's stop) */
static int wait_cross(struct pipe *p, int k)
{
	pthread_mutex_lock(&p->mu);
	while (p->x_done <= k && !p->stop)
		pthread_cond_wait(&p->cv, &p->mu);
	const int go = p->x_done > k;
	pthread_mutex_unlock(&p->mu);
	return go;
}

static void stage_done(struct pipe *p, int rc, const char *what, int rs)
{
	pthread_mutex_lock(&p->mu);
	if (rc && !p->stage_rc)
		p->stage_rc = rc, p->what = what;
	p->rs_done += rs;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void *stage_thread(void *arg)
{
	struct pipe *p = arg;
	struct hora_net_stage *s = p->c->stage;
	const uint8_t *in;
	uint8_t *b;
	size_t n;
	char e[300] = "";
	int rc = 0;
	slice_of(p, 0, &in, &b, &n);
	rc = s->ops->reduce_scatter(s, in, b, n, p->t, p->op, e, sizeof(e));
	stage_done(p, rc, "reduce-scatter within the host", !rc);
	for (int k = 0; k < p->nslices && !rc; k++) {
		if (k + 1 < p->nslices) {
			slice_of(p, k + 1, &in, &b, &n);
			rc = s->ops->reduce_scatter(s, in, b, n, p->t, p->op, e, sizeof(e));
			stage_done(p, rc, "reduce-scatter within the host", !rc);
		}
		if (rc || !wait_cross(p, k))
			break;
		slice_of(p, k, NULL, &b, &n);
		if ((rc = s->ops->allgather(s, b, n, p->t, e, sizeof(e))))
			stage_done(p, rc, "allgather within the host", 0);
	}
	if (rc) {
		pthread_mutex_lock(&p->mu);
		snprintf(p->err, sizeof(p->err), "%s", e);
		pthread_mutex_unlock(&p->mu);
	}
	return NULL;
}

/* the caller's half: X(k) once RS(k) is in; 0, or the first failure */
static int cross_slices(struct pipe *p)
{
	struct hora_net_comm *c = p->c;
	const enum hora_net_op cross_op = p->op == HORA_NET_AVG ? HORA_NET_SUM : p->op;
	for (int k = 0; k < p->nslices; k++) {
		pthread_mutex_lock(&p->mu);
		while (p->rs_done <= k && !p->stage_rc)
			pthread_cond_wait(&p->cv, &p->mu);
		const int failed = p->stage_rc;
		pthread_mutex_unlock(&p->mu);
		if (failed)
			return failed;
		uint8_t *b;
		size_t n, off, len;
		slice_of(p, k, NULL, &b, &n);
		hora_net_stage_shard(n, c->stage->nlocal, c->stage->lrank, &off, &len);
		uint8_t *shard = b + off * p->esz;
		int rc = hora_net_allreduce(c->cross, shard, shard, len, p->t, cross_op);
		if (rc)
			return rc;
		if (p->op == HORA_NET_AVG)
			hora_net_scale(shard, len, p->t, c->n);
		pthread_mutex_lock(&p->mu);
		p->x_done = k + 1;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	return 0;
}

/* The cross communicator failed: its ranks are numbered by host (and a
 * notice it read names ranks here, one it sent none: quiet), so its error
 * says which ranks those are here; our own notices then tell every rank. */
static int cross_fail(struct hora_net_comm *c, int rc)
{
	const int fp = c->cross->fail_peer, nh = c->node->nhosts;
	const int peer = fp >= 0 && fp < nh ? c->cross_map[fp] : -1;
	char with[48] = "", map[160];
	if (peer >= 0)
		snprintf(with, sizeof(with), ", with rank %d", peer);
	int k = snprintf(map, sizeof(map), "(its ranks 0..%d are ranks", nh - 1);
	for (int h = 0; h < nh && k > 0 && (size_t)k < sizeof(map); h++)
		k += snprintf(map + k, sizeof(map) - (size_t)k, "%s %d", h ? "," : "", c->cross_map[h]);
	if (k > 0 && (size_t)k < sizeof(map))
		snprintf(map + k, sizeof(map) - (size_t)k, " here)");
	if (c->broken)
		return c->broken;
	/* peer: our notices name it, as a failure of our own link would */
	return coll_fail_peer(c, rc, peer, "allreduce across hosts%s: %s %s", with, hora_net_comm_error(c->cross),
			      map);
}

/* slices of HIER_SLICE per local rank (at least slice_bytes): the first
 * reduce-scatter and the last allgather, not hidden, stay small, and the
 * cross ring still runs at the link's rate (bench/hier.sh, 2 x 2 hosts at
 * 1 Gbit/s: 1 MiB slices 0.98-0.99 of iperf3 at 16 and 64 MiB, 4 MiB
 * slices 0.88 and 0.97) */
#define HIER_SLICE (1u << 20)

/* A call of one slice: its three stages in turn, on the caller's thread
 * (the same order and ops as the pipeline's, so the local ranks agree
 * whichever way each runs it) */
static int hier_one_slice(const struct pipe *p)
{
	struct hora_net_comm *c = p->c;
	struct hora_net_stage *s = c->stage;
	char e[300] = "";
	size_t off, len;
	int rc = s->ops->reduce_scatter(s, p->in, p->buf, p->count, p->t, p->op, e, sizeof(e));
	if (rc)
		return stage_fail(c, rc, "reduce-scatter within the host", e);
	hora_net_stage_shard(p->count, s->nlocal, s->lrank, &off, &len);
	uint8_t *shard = p->buf + off * p->esz;
	if ((rc = hora_net_allreduce(c->cross, shard, shard, len, p->t, p->op == HORA_NET_AVG ? HORA_NET_SUM : p->op)))
		return cross_fail(c, rc);
	if (p->op == HORA_NET_AVG)
		hora_net_scale(shard, len, p->t, c->n);
	if ((rc = s->ops->allgather(s, p->buf, p->count, p->t, e, sizeof(e))))
		return stage_fail(c, rc, "allgather within the host", e);
	return 0;
}

int hier_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		   enum hora_net_op op, const struct fp *f)
{
	int rc = coll_fp_xchg(c, (c->rank + 1) % c->n, (c->rank - 1 + c->n) % c->n, f);
	if (rc)
		return rc;
	const size_t esz = hora_net_dtype_size(t);
	const size_t per = c->cfg.slice_bytes > HIER_SLICE ? c->cfg.slice_bytes : HIER_SLICE;
	struct pipe p = {.c = c, .in = send, .buf = recv, .count = count, .esz = esz, .t = t, .op = op,
			 .slice = (size_t)c->stage->nlocal * (per / esz)};
	p.nslices = count ? (int)((count + p.slice - 1) / p.slice) : 1;
	if (p.nslices == 1) /* nothing to overlap: no thread */
		return hier_one_slice(&p);
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	pthread_t th;
	if ((rc = -pthread_create(&th, NULL, stage_thread, &p))) {
		pthread_mutex_destroy(&p.mu);
		pthread_cond_destroy(&p.cv);
		return coll_fail(c, rc, "cannot start the stage thread: %s", strerror(-rc));
	}
	rc = cross_slices(&p);
	pthread_mutex_lock(&p.mu);
	const int cross_failed = rc && !p.stage_rc;
	p.stop = rc != 0; /* the stage thread must not wait for us, nor we for it */
	pthread_cond_broadcast(&p.cv);
	pthread_mutex_unlock(&p.mu);
	if (rc) {
		if (cross_failed)
			c->stage->ops->interrupt(c->stage);
	}
	pthread_join(th, NULL);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv);
	if (!rc && p.stage_rc)
		rc = p.stage_rc;
	if (cross_failed)
		return cross_fail(c, rc);
	return rc ? stage_fail(c, rc, p.what ? p.what : "the shared-memory stage", p.err) : 0;
}
