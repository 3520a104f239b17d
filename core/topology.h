/* topology.h - who averages with whom in decentralized (gossip) training:
 * for rank r of n at round k, its in-neighbours (sources, with weights)
 * and out-neighbours (destinations), ready for hora_neighbor_allreduce
 * (core/hora.h). Every rank computes the same graph from (n, round, seed)
 * alone, so the lists agree without any message. core/README.md
 * "Topologies" describes each graph and its mixing matrix.
 */
#ifndef HORA_CORE_TOPOLOGY_H
#define HORA_CORE_TOPOLOGY_H

#include <stdint.h>

enum hora_topology {
	HORA_TOPOLOGY_RING,                 /* r-1 and r+1, weights 1/3 (static) */
	HORA_TOPOLOGY_EXPONENTIAL,          /* BlueFog ExponentialTwoGraph: to r+2^i (static) */
	HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL, /* round k: to r+2^(k mod ceil(log2 n)), 1/2 1/2 */
	HORA_TOPOLOGY_RANDOM,               /* round k: a seeded random pairing, 1/2 1/2 */
	HORA_TOPOLOGIES
};

/* At most this many in- or out-neighbours (the exponential graph has
 * ceil(log2 n) <= 16 for n <= 65535). */
#define HORA_TOPOLOGY_MAX_DEGREE 16

/* One rank's part of one round. src_weight[i] is the weight of src[i]'s
 * value; self_weight + the sum of src_weight is 1 (up to rounding), and so
 * is every column of the mixing matrix: the graphs are doubly stochastic,
 * so the average over the ranks is kept. dst carry no weights (1). pair:
 * src and dst are the same single peer and the peer's lists name this rank
 * (a pairwise average, hora_pair_average, does the same). */
struct hora_topology_round {
	double self_weight;
	int nsrc, ndst;
	int src[HORA_TOPOLOGY_MAX_DEGREE];
	double src_weight[HORA_TOPOLOGY_MAX_DEGREE];
	int dst[HORA_TOPOLOGY_MAX_DEGREE];
	int pair;
};

/* Rank rank's neighbours in round `round` of topology t over n ranks
 * (seed: the random graph's; the others ignore it). self_weight in [0, 1]
 * overrides the default self weight, the sources sharing the rest in
 * proportion to their default weights (a rank without sources keeps 1);
 * self_weight < 0: the topology's default. Returns 0, -EINVAL (t unknown,
 * n < 1 or > 65535, rank outside 0..n-1, self_weight > 1 or NaN) or
 * -ENOMEM (the random graph's permutation). Thread-safe, no state. */
int hora_topology_neighbors(enum hora_topology t, int rank, int n, uint64_t round, uint64_t seed,
			    double self_weight, struct hora_topology_round *out);
/* "ring", "exponential", "one_peer_exponential", "random" ("?" otherwise) */
const char *hora_topology_name(enum hora_topology t);
/* The topology named s (the names above): 0, or -EINVAL. */
int hora_topology_parse(const char *s, enum hora_topology *out);
/* ceil(log2 n) (0 for n <= 1): the one-peer graph's period, after which it
 * has averaged exactly when n is a power of two. */
int hora_topology_log2_ceil(int n);

#endif
