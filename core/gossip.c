/* gossip.c - decentralized training in the training loop (gossip.h).
 *
 * Every rank computes the same round of the same graph from (size, round,
 * seed) alone (topology.h), so the neighbour lists agree without a
 * message, and the neighbour allreduce's own pattern check (one small
 * allreduce per call, a global synchronisation gossip exists to avoid) is
 * turned off; the job agreement at the start (train.c) compares the
 * gossip settings of every rank with rank 0's instead.
 *
 * Not here: the graphs (topology.c), the exchange (net/coll/neighbor.c).
 */
#include "gossip.h"

#include "topology.h"


#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hora_gossip {
	struct hora_comm *c;
	struct hora_gossip_config cfg;
	enum hora_topology topo;
	uint64_t seed, round;
	int rank, size;
	size_t n;
	float *keep; /* x_i while params hold x̄; scratch for a mid-epoch x̄ */
	float *recv; /* this step's averaging: W x_t (a pair average: x_t's copy, averaged in place) */
	struct hora_request *req; /* in flight between begin and end (NULL: none) */
};

static enum hora_topology topology_of(enum hora_gossip_topology t)
{
	switch (t) {
	case HORA_GOSSIP_RING:
		return HORA_TOPOLOGY_RING;
	case HORA_GOSSIP_ONE_PEER_EXPONENTIAL:
		return HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL;
	case HORA_GOSSIP_RANDOM:
		return HORA_TOPOLOGY_RANDOM;
	case HORA_GOSSIP_EXPONENTIAL:
	default:
		return HORA_TOPOLOGY_EXPONENTIAL;
	}
}

int hora_gossip_create(struct hora_comm *c, const struct hora_gossip_config *cfg, uint64_t seed,
		       size_t nparams, struct hora_gossip **out, char *err, size_t errlen)
{
	*out = NULL;
	struct hora_gossip *g = calloc(1, sizeof(*g));
	if (!g || !(g->keep = malloc(nparams * sizeof(float))) || !(g->recv = malloc(nparams * sizeof(float)))) {
		if (g)
			free(g->keep);
		free(g);
		snprintf(err, errlen, "gossip: out of memory");
		return -ENOMEM;
	}
	g->c = c;
	g->cfg = *cfg;
	g->topo = topology_of(cfg->topology);
	g->seed = seed;
	g->rank = hora_rank(c);
	g->size = hora_size(c);
	g->n = nparams;
	int rc = hora_comm_set_neighbor_check(c, 0);
	if (rc) {
		snprintf(err, errlen, "gossip: %s", hora_comm_last_error(c));
		hora_gossip_destroy(g);
		return rc;
	}
	*out = g;
	return 0;
}

void hora_gossip_destroy(struct hora_gossip *g)
{
	if (!g)
		return;
	if (g->req)
		hora_wait(g->req);
	free(g->keep);
	free(g->recv);
	free(g);
}

int hora_gossip_begin(struct hora_gossip *g, const float *params, int64_t step, char *err, size_t errlen)
{
	if (g->size < 2 || step % g->cfg.period)
		return 0;
	g->round = (uint64_t)(step / g->cfg.period) - 1; /* from the step: the same after a resume */
	struct hora_topology_round tr;
	int rc = hora_topology_neighbors(g->topo, g->rank, g->size, g->round, g->seed, g->cfg.self_weight, &tr);
	if (rc) {
		snprintf(err, errlen, "gossip: topology %s over %d ranks: %s", hora_topology_name(g->topo), g->size,
			 strerror(-rc));
		return rc;
	}
	/* the same entry point on every rank of a round: a pair average is
	 * numbered per pair, a neighbour allreduce in the collectives' order.
	 * Pairs: the random graph's rounds (a rank left out with n odd sits
	 * the round out, calling nothing) and a one-peer round whose shift
	 * is n/2 (a pair for every rank alike) */
	const bool pairs = g->cfg.self_weight < 0 && (g->topo == HORA_TOPOLOGY_RANDOM || tr.pair);
	if (pairs && !tr.pair)
		return 0;
	if (pairs) {
		memcpy(g->recv, params, g->n * sizeof(float));
		rc = hora_pair_average_async(g->c, g->recv, g->n, HORA_F32, tr.src[0], &g->req);
	} else {
		/* sent from params: nothing writes them before hora_gossip_end */
		rc = hora_neighbor_allreduce_async(g->c, params, g->recv, g->n, HORA_F32, tr.self_weight, tr.src,
						   tr.src_weight, tr.nsrc, tr.dst, NULL, tr.ndst, &g->req);
	}
	if (rc) { /* not started: the comm's last error is not this one's */
		g->req = NULL;
		snprintf(err, errlen, "gossip round %llu (%s): cannot start the averaging: %s",
			 (unsigned long long)g->round, hora_topology_name(g->topo),
			 rc < 0 ? strerror(-rc) : hora_strerror(rc));
	}
	return rc;
}

int hora_gossip_end(struct hora_gossip *g, float *params, char *err, size_t errlen)
{
	if (!g->req)
		return 0; /* no round this step, or this rank sits it out */
	int rc = hora_wait(g->req);
	g->req = NULL;
	if (rc) {
		snprintf(err, errlen, "gossip round %llu (%s): %s", (unsigned long long)g->round,
			 hora_topology_name(g->topo), hora_comm_last_error(g->c));
		return rc;
	}
	memcpy(params, g->recv, g->n * sizeof(float));
	return 0;
}

/* x̄ into avg (a copy of x, averaged in place), then the distance of x
 * from it, mean and max over the ranks */
static int distance(struct hora_gossip *g, const float *x, float *avg, double *mean, double *max, char *err,
		    size_t errlen)
{
	if (avg != x)
		memcpy(avg, x, g->n * sizeof(float));
	int rc = hora_allreduce(g->c, avg, avg, g->n, HORA_F32, HORA_AVG);
	const float *xi = avg == x ? g->keep : x;
	double d2 = 0, a2 = 0;
	for (size_t i = 0; !rc && i < g->n; i++) {
		const double d = (double)xi[i] - (double)avg[i];
		d2 += d * d;
		a2 += (double)avg[i] * (double)avg[i];
	}
	double v[2] = {a2 > 0 ? sqrt(d2 / a2) : sqrt(d2), 0};
	v[1] = v[0];
	if (!rc)
		rc = hora_allreduce(g->c, &v[0], &v[0], 1, HORA_F64, HORA_SUM);
	if (!rc)
		rc = hora_allreduce(g->c, &v[1], &v[1], 1, HORA_F64, HORA_MAX);
	if (rc) {
		snprintf(err, errlen, "gossip: the consensus distance: %s", hora_comm_last_error(g->c));
		return rc;
	}
	*mean = v[0] / g->size;
	*max = v[1];
	return 0;
}

int hora_gossip_average_begin(struct hora_gossip *g, float *params, double *mean, double *max, char *err,
			      size_t errlen)
{
	memcpy(g->keep, params, g->n * sizeof(float));
	return distance(g, params, params, mean, max, err, errlen);
}

void hora_gossip_average_end(struct hora_gossip *g, float *params)
{
	memcpy(params, g->keep, g->n * sizeof(float));
}

int hora_gossip_consensus(struct hora_gossip *g, const float *params, double *mean, double *max, char *err,
			  size_t errlen)
{
	return distance(g, params, g->keep, mean, max, err, errlen);
}
