/* topology.c - the gossip graphs (topology.h): ring, BlueFog's
 * exponential-two graph, the one-peer exponential graph (BlueFog
 * GetDynamicOnePeerSendRecvRanks; Ying et al. 2021) and a seeded random
 * pairing, each rank's in- and out-neighbours and weights for a round.
 * Pure functions of (rank, n, round, seed): no messages, no state. Not the
 * averaging itself (net/coll/neighbor.c) nor when to average (the trainer).
 */
#include "topology.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[HORA_TOPOLOGIES] = {"ring", "exponential", "one_peer_exponential", "random"};

const char *hora_topology_name(enum hora_topology t)
{
	return (unsigned)t < HORA_TOPOLOGIES ? names[t] : "?";
}

int hora_topology_parse(const char *s, enum hora_topology *out)
{
	for (int i = 0; s && i < HORA_TOPOLOGIES; i++)
		if (!strcmp(s, names[i])) {
			*out = (enum hora_topology)i;
			return 0;
		}
	return -EINVAL;
}

int hora_topology_log2_ceil(int n)
{
	int k = 0;
	while (k < 31 && (1 << k) < n)
		k++;
	return k;
}

static int mod(long long a, int n)
{
	return (int)(((a % n) + n) % n);
}

/* one source and one destination, 1/2 each (pair: the same peer, both ways) */
static void one_peer(struct hora_topology_round *o, int src, int dst, int pair)
{
	o->nsrc = o->ndst = 1;
	o->src[0] = src;
	o->dst[0] = dst;
	o->src_weight[0] = 0.5;
	o->self_weight = 0.5;
	o->pair = pair;
}

static void ring(struct hora_topology_round *o, int r, int n)
{
	const int left = mod(r - 1, n), right = mod(r + 1, n);
	if (n == 2) {
		one_peer(o, left, left, 1);
		return;
	}
	o->nsrc = o->ndst = 2;
	o->src[0] = o->dst[0] = left;
	o->src[1] = o->dst[1] = right;
	o->src_weight[0] = o->src_weight[1] = o->self_weight = 1.0 / 3;
}

/* out to r + 2^i, in from r - 2^i, for 2^i < n; uniform 1/(in-degree + 1) */
static void exponential(struct hora_topology_round *o, int r, int n)
{
	const int k = hora_topology_log2_ceil(n);
	for (int i = 0; i < k; i++) {
		o->dst[i] = mod((long long)r + (1LL << i), n);
		o->src[i] = mod((long long)r - (1LL << i), n);
		o->src_weight[i] = 1.0 / (k + 1);
	}
	o->nsrc = o->ndst = k;
	o->self_weight = 1.0 / (k + 1);
}

/* round k: to r + 2^(k mod tau), from r - 2^(k mod tau) */
static void one_peer_exponential(struct hora_topology_round *o, int r, int n, uint64_t round)
{
	const int tau = hora_topology_log2_ceil(n);
	const long long step = 1LL << (round % (uint64_t)tau);
	const int dst = mod(r + step, n), src = mod(r - step, n);
	one_peer(o, src, dst, src == dst);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* A seeded Fisher-Yates permutation of the ranks, paired in order (0,1),
 * (2,3), ...; with n odd the last one sits the round out. The same on
 * every rank from (seed, round). */
static int random_pairing(struct hora_topology_round *o, int r, int n, uint64_t round, uint64_t seed)
{
	int *p = malloc((size_t)n * sizeof(int));
	if (!p)
		return -ENOMEM;
	uint64_t s = seed ^ splitmix(&(uint64_t){round * 0xD1B54A32D192ED03ull + 1});
	for (int i = 0; i < n; i++)
		p[i] = i;
	for (int i = n - 1; i > 0; i--) {
		const int j = (int)(splitmix(&s) % (uint64_t)(i + 1));
		const int t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
	for (int i = 0; i + 1 < n; i += 2)
		if (p[i] == r || p[i + 1] == r) {
			const int peer = p[i] == r ? p[i + 1] : p[i];
			one_peer(o, peer, peer, 1);
			break;
		}
	free(p);
	return 0;
}

/* self_weight w: the sources share 1 - w in proportion to their weights */
static void reweigh(struct hora_topology_round *o, double w)
{
	if (!o->nsrc)
		return;
	const double rest = 1.0 - o->self_weight;
	for (int i = 0; i < o->nsrc; i++)
		o->src_weight[i] = rest > 0 ? o->src_weight[i] * (1.0 - w) / rest : (1.0 - w) / o->nsrc;
	o->self_weight = w;
}

int hora_topology_neighbors(enum hora_topology t, int rank, int n, uint64_t round, uint64_t seed,
			    double self_weight, struct hora_topology_round *out)
{
	if ((unsigned)t >= HORA_TOPOLOGIES || n < 1 || n > 65535 || rank < 0 || rank >= n ||
	    isnan(self_weight) || self_weight > 1)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->self_weight = 1;
	if (n == 1)
		return 0;
	switch (t) {
	case HORA_TOPOLOGY_RING:
		ring(out, rank, n);
		break;
	case HORA_TOPOLOGY_EXPONENTIAL:
		exponential(out, rank, n);
		break;
	case HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL:
		one_peer_exponential(out, rank, n, round);
		break;
	case HORA_TOPOLOGY_RANDOM: {
		const int rc = random_pairing(out, rank, n, round, seed);
		if (rc)
			return rc;
		break;
	}
	default:
		return -EINVAL;
	}
	if (self_weight >= 0)
		reweigh(out, self_weight);
	return 0;
}
