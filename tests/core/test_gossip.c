/* test_gossip.c - decentralized averaging (issue 14): the topologies
 * (core/topology.c) alone, then hora_neighbor_allreduce and
 * hora_pair_average between real ranks (threads of this process, each with
 * its own communicator over loopback, as test_comm.c): exact averaging of
 * the one-peer exponential graph in log2 n rounds (and not for n = 6), the
 * convergence rate of ring and exponential against their mixing matrix,
 * every dtype against a serial reference, patterns that disagree, and the
 * pair average. The I/O timeout is 20 s: a rank left waiting would fail
 * with a timeout text, which the checks of the error texts reject. */
#include "comm_helpers.h"
#include "topology.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#define GMAXR 8
/* a line for the log (the measured figures), as cr_log_info would */
#define note(...) (fprintf(stderr, "[info] " __VA_ARGS__), fputc('\n', stderr))

static char g_addr[GMAXR][32];
static const char *g_addrs[GMAXR];

/* ---- the topologies alone ---------------------------------------------------- */

static int has(const int *l, int k, int r)
{
	for (int i = 0; i < k; i++)
		if (l[i] == r)
			return 1;
	return 0;
}

/* W[r][s]: the weight rank r gives rank s's value in round k */
static void mixing(enum hora_topology t, int n, uint64_t round, double self_weight, double *w)
{
	memset(w, 0, sizeof(double) * (size_t)(n * n));
	for (int r = 0; r < n; r++) {
		struct hora_topology_round o;
		cr_assert_eq(hora_topology_neighbors(t, r, n, round, 42, self_weight, &o), 0);
		w[r * n + r] = o.self_weight;
		for (int i = 0; i < o.nsrc; i++)
			w[r * n + o.src[i]] += o.src_weight[i];
	}
}

Test(gossip_topology, every_graph_is_consistent_and_doubly_stochastic)
{
	double w[17 * 17];
	for (int t = 0; t < HORA_TOPOLOGIES; t++)
		for (int n = 1; n <= 17; n++)
			for (uint64_t k = 0; k < 9; k++)
				for (int sw = 0; sw < 2; sw++) {
					const double self = sw ? 0.4 : -1;
					for (int r = 0; r < n; r++) {
						struct hora_topology_round o, p;
						cr_assert_eq(hora_topology_neighbors(t, r, n, k, 42, self, &o), 0);
						for (int j = 0; j < o.ndst; j++) {
							cr_assert_neq(o.dst[j], r);
							cr_assert_eq(hora_topology_neighbors(t, o.dst[j], n, k, 42, self, &p), 0);
							cr_assert(has(p.src, p.nsrc, r), "%s n=%d round %llu: %d sends to %d, which does not receive from it",
								  hora_topology_name(t), n, (unsigned long long)k, r, o.dst[j]);
						}
						for (int i = 0; i < o.nsrc; i++) {
							cr_assert_eq(hora_topology_neighbors(t, o.src[i], n, k, 42, self, &p), 0);
							cr_assert(has(p.dst, p.ndst, r), "%s n=%d: %d receives from %d, which does not send",
								  hora_topology_name(t), n, r, o.src[i]);
						}
						if (o.pair)
							cr_assert(o.nsrc == 1 && o.ndst == 1 && o.src[0] == o.dst[0]);
					}
					mixing(t, n, k, self, w);
					for (int a = 0; a < n; a++) {
						double row = 0, col = 0;
						for (int b = 0; b < n; b++) {
							row += w[a * n + b];
							col += w[b * n + a];
						}
						cr_assert(fabs(row - 1) < 1e-12 && fabs(col - 1) < 1e-12,
							  "%s n=%d round %llu self %g: row %d sums to %g, column to %g",
							  hora_topology_name(t), n, (unsigned long long)k, self, a, row, col);
					}
				}
}

Test(gossip_topology, the_graphs_are_the_documented_ones)
{
	struct hora_topology_round o;
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_EXPONENTIAL, 0, 8, 0, 0, -1, &o), 0);
	cr_assert(o.ndst == 3 && o.dst[0] == 1 && o.dst[1] == 2 && o.dst[2] == 4);
	cr_assert(o.nsrc == 3 && o.src[0] == 7 && o.src[1] == 6 && o.src[2] == 4);
	cr_assert(fabs(o.self_weight - 0.25) < 1e-15 && fabs(o.src_weight[2] - 0.25) < 1e-15);
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_EXPONENTIAL, 5, 6, 0, 0, -1, &o), 0);
	cr_assert(o.ndst == 3 && o.dst[0] == 0 && o.dst[1] == 1 && o.dst[2] == 3);
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RING, 0, 5, 0, 0, -1, &o), 0);
	cr_assert(o.nsrc == 2 && has(o.src, 2, 4) && has(o.src, 2, 1) && fabs(o.self_weight - 1.0 / 3) < 1e-15);
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RING, 1, 2, 0, 0, -1, &o), 0);
	cr_assert(o.pair && o.src[0] == 0 && fabs(o.self_weight - 0.5) < 1e-15);
	/* one-peer: round k goes 2^(k mod 3) ahead for n = 8 */
	for (uint64_t k = 0; k < 6; k++) {
		cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL, 3, 8, k, 0, -1, &o), 0);
		const int step = 1 << (k % 3);
		cr_assert(o.dst[0] == (3 + step) % 8 && o.src[0] == (3 - step + 8) % 8 && o.src_weight[0] == 0.5);
	}
	/* self weight override: the sources share the rest */
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_EXPONENTIAL, 0, 8, 0, 0, 0.7, &o), 0);
	cr_assert(fabs(o.self_weight - 0.7) < 1e-15 && fabs(o.src_weight[0] - 0.1) < 1e-15);
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RING, 0, 4, 0, 0, 1.5, &o), -EINVAL);
	cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RING, 4, 4, 0, 0, -1, &o), -EINVAL);
	enum hora_topology t;
	cr_assert(hora_topology_parse("one_peer_exponential", &t) == 0 && t == HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL);
	cr_assert_eq(hora_topology_parse("star", &t), -EINVAL);
}

Test(gossip_topology, random_pairs_are_seeded_and_fresh_every_round)
{
	int peer[10][8], changed = 0;
	for (uint64_t k = 0; k < 10; k++)
		for (int r = 0; r < 8; r++) {
			struct hora_topology_round o, again, other;
			cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RANDOM, r, 8, k, 7, -1, &o), 0);
			cr_assert(o.pair && o.nsrc == 1, "n = 8: every rank has a peer");
			peer[k][r] = o.src[0];
			cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RANDOM, r, 8, k, 7, -1, &again), 0);
			cr_assert_eq(again.src[0], o.src[0], "the same seed and round give the same peer");
			cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RANDOM, r, 8, k, 8, -1, &other), 0);
			changed += other.src[0] != o.src[0];
		}
	int rounds_differ = 0;
	for (int k = 1; k < 10; k++)
		rounds_differ += memcmp(peer[k], peer[k - 1], sizeof(peer[k])) != 0;
	cr_assert_geq(rounds_differ, 7, "a fresh pairing nearly every round (%d of 9 differ)", rounds_differ);
	cr_assert_gt(changed, 0, "another seed gives other pairs");
	/* n odd: exactly one rank sits out */
	int alone = 0;
	for (int r = 0; r < 7; r++) {
		struct hora_topology_round o;
		cr_assert_eq(hora_topology_neighbors(HORA_TOPOLOGY_RANDOM, r, 7, 3, 7, -1, &o), 0);
		alone += o.nsrc == 0 && o.self_weight == 1;
	}
	cr_assert_eq(alone, 1);
}

/* ---- ranks as threads ---------------------------------------------------------- */

struct grank {
	int r, n, rc;
	struct hora_comm *c;
	char err[512];
	void (*body)(struct grank *);
	void *arg;
};

static void *g_main(void *p)
{
	struct grank *g = p;
	struct hora_comm_config cfg;
	tc_config(&cfg, g->r, g->n);
	cfg.addrs = g_addrs;
	if ((g->rc = hora_comm_create(&cfg, &g->c, g->err, sizeof(g->err))))
		return NULL;
	g->body(g);
	hora_comm_destroy(g->c);
	return NULL;
}

/* n ranks run body(rank) on their own communicators, then close them */
static void g_run(int n, void (*body)(struct grank *), void *arg)
{
	struct grank g[GMAXR];
	pthread_t th[GMAXR];
	th_rank_addrs(g_addr, g_addrs, n);
	for (int i = 0; i < n; i++) {
		g[i] = (struct grank){.r = i, .n = n, .body = body, .arg = arg};
		pthread_create(&th[i], NULL, g_main, &g[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < n; i++)
		cr_assert_eq(g[i].rc, 0, "rank %d: %s", i, g[i].err);
}

/* ---- averaging over rounds: exactness and rate ------------------------------------ */

#define VEC 4
#define MAXROUNDS 40

struct rounds {
	enum hora_topology t;
	int rounds;
	double x[MAXROUNDS + 1][GMAXR][VEC]; /* every rank's vector after each round */
	int rc[GMAXR];
	char err[GMAXR][512];
};

/* distinct values, no pattern a graph could average by luck */
static double initial(int r, int i)
{
	uint64_t s = (uint64_t)(r * 31 + i * 7 + 1) * 0x9E3779B97F4A7C15ull;
	s ^= s >> 29;
	return (double)(s % 100000) / 1000.0 - 50.0;
}

static void rounds_body(struct grank *g)
{
	struct rounds *R = g->arg;
	double v[VEC];
	for (int i = 0; i < VEC; i++)
		v[i] = R->x[0][g->r][i] = initial(g->r, i);
	for (int k = 0; k < R->rounds; k++) {
		struct hora_topology_round o;
		int rc = hora_topology_neighbors(R->t, g->r, g->n, (uint64_t)k, 1, -1, &o);
		if (!rc)
			rc = hora_neighbor_allreduce(g->c, v, v, VEC, HORA_F64, o.self_weight, o.src, o.src_weight, o.nsrc,
						     o.dst, NULL, o.ndst);
		if (rc) {
			R->rc[g->r] = rc;
			snprintf(R->err[g->r], sizeof(R->err[g->r]), "round %d: %s", k, hora_comm_last_error(g->c));
			return;
		}
		memcpy(R->x[k + 1][g->r], v, sizeof(v));
	}
}

static struct rounds *run_rounds(enum hora_topology t, int n, int rounds)
{
	struct rounds *R = calloc(1, sizeof(*R));
	R->t = t;
	R->rounds = rounds;
	g_run(n, rounds_body, R);
	for (int r = 0; r < n; r++)
		cr_assert_eq(R->rc[r], 0, "%s n=%d rank %d: %s", hora_topology_name(t), n, r, R->err[r]);
	return R;
}

static double mean_of(const struct rounds *R, int n, int i)
{
	double m = 0;
	for (int r = 0; r < n; r++)
		m += R->x[0][r][i];
	return m / n;
}

/* the largest deviation from the mean after round k, relative to the mean's size */
static double max_rel_dev(const struct rounds *R, int n, int k)
{
	double worst = 0;
	for (int i = 0; i < VEC; i++) {
		const double m = mean_of(R, n, i), scale = fabs(m) > 1 ? fabs(m) : 1;
		for (int r = 0; r < n; r++)
			worst = fmax(worst, fabs(R->x[k][r][i] - m) / scale);
	}
	return worst;
}

/* ||x_k - mean|| over every rank and element */
static double err_norm(const struct rounds *R, int n, int k)
{
	double s = 0;
	for (int i = 0; i < VEC; i++) {
		const double m = mean_of(R, n, i);
		for (int r = 0; r < n; r++)
			s += (R->x[k][r][i] - m) * (R->x[k][r][i] - m);
	}
	return sqrt(s);
}

static void one_peer_exact(int n)
{
	const int tau = hora_topology_log2_ceil(n);
	struct rounds *R = run_rounds(HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL, n, 2 * tau);
	double before = max_rel_dev(R, n, tau - 1), at = max_rel_dev(R, n, tau);
	note("one-peer n=%d: deviation %.3g after %d rounds, %.3g after %d", n, before, tau - 1, at, tau);
	cr_assert_gt(before, 1e-3, "n=%d: not yet averaged after %d rounds", n, tau - 1);
	cr_assert_lt(at, 1e-6, "n=%d: the exact average after log2 n = %d rounds (deviation %.3g)", n, tau, at);
	cr_assert_lt(max_rel_dev(R, n, 2 * tau), 1e-6, "and it stays there");
	free(R);
}

Test(gossip_avg, one_peer_exponential_averages_4_exactly_in_2_rounds, .timeout = 60) { one_peer_exact(4); }
Test(gossip_avg, one_peer_exponential_averages_8_exactly_in_3_rounds, .timeout = 60) { one_peer_exact(8); }

Test(gossip_avg, one_peer_exponential_is_not_exact_for_6, .timeout = 60)
{
	struct rounds *R = run_rounds(HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL, 6, 6);
	const double at = max_rel_dev(R, 6, 3), later = max_rel_dev(R, 6, 6);
	note("one-peer n=6: deviation %.3g after 3 rounds, %.3g after 6", at, later);
	cr_assert_gt(at, 1e-3, "n = 6 is not averaged exactly after ceil(log2 6) = 3 rounds");
	cr_assert_gt(later, 1e-6, "nor after 6");
	cr_assert_lt(later, at, "but it gets closer");
	free(R);
}

/* sigma = ||W - J/n||_2 by power iteration on M^T M: the most the error can
 * shrink by in a round; W is normal here (circulant), so it is also the
 * second-largest |eigenvalue| and the asymptotic rate. */
static double second_eigen(const double *w, int n)
{
	double m[GMAXR * GMAXR], v[GMAXR], u[GMAXR], lambda = 0;
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++)
			m[a * n + b] = w[a * n + b] - 1.0 / n;
	for (int a = 0; a < n; a++)
		v[a] = initial(a, 9);
	for (int it = 0; it < 2000; it++) {
		for (int a = 0; a < n; a++) { /* u = M v */
			u[a] = 0;
			for (int b = 0; b < n; b++)
				u[a] += m[a * n + b] * v[b];
		}
		double norm = 0;
		for (int b = 0; b < n; b++) { /* v = M^T u */
			v[b] = 0;
			for (int a = 0; a < n; a++)
				v[b] += m[a * n + b] * u[a];
			norm += v[b] * v[b];
		}
		norm = sqrt(norm);
		if (norm == 0)
			return 0;
		for (int b = 0; b < n; b++)
			v[b] /= norm;
		lambda = norm;
	}
	return sqrt(lambda);
}

static void rate(enum hora_topology t, int n, int rounds)
{
	double w[GMAXR * GMAXR];
	mixing(t, n, 0, -1, w);
	const double sigma = second_eigen(w, n);
	if (t == HORA_TOPOLOGY_RING)
		cr_assert(fabs(sigma - (1 + 2 * cos(2 * M_PI / n)) / 3) < 1e-9, "ring: sigma %.12f", sigma);
	struct rounds *R = run_rounds(t, n, rounds);
	for (int k = 0; k < rounds; k++) {
		const double e0 = err_norm(R, n, k), e1 = err_norm(R, n, k + 1);
		cr_assert_leq(e1, sigma * e0 * (1 + 1e-9) + 1e-13, "%s n=%d round %d: error %.6g -> %.6g, more than sigma %.6f allows",
			      hora_topology_name(t), n, k, e0, e1, sigma);
	}
	const int h = rounds / 2;
	const double measured = pow(err_norm(R, n, rounds) / err_norm(R, n, h), 1.0 / (rounds - h));
	note("%s n=%d: second |eigenvalue| %.4f, measured rate %.4f over rounds %d..%d", hora_topology_name(t),
		    n, sigma, measured, h, rounds);
	cr_assert(measured <= sigma + 1e-6 && measured >= sigma - 0.03,
		  "%s n=%d: measured contraction %.4f a round, the mixing matrix predicts %.4f", hora_topology_name(t), n,
		  measured, sigma);
	free(R);
}

Test(gossip_avg, ring_of_8_converges_at_its_mixing_rate, .timeout = 60) { rate(HORA_TOPOLOGY_RING, 8, 40); }
Test(gossip_avg, ring_of_5_converges_at_its_mixing_rate, .timeout = 60) { rate(HORA_TOPOLOGY_RING, 5, 30); }
Test(gossip_avg, exponential_of_8_converges_at_its_mixing_rate, .timeout = 60) { rate(HORA_TOPOLOGY_EXPONENTIAL, 8, 30); }
Test(gossip_avg, exponential_of_6_converges_at_its_mixing_rate, .timeout = 60) { rate(HORA_TOPOLOGY_EXPONENTIAL, 6, 30); }

/* ---- every dtype against a serial reference ------------------------------------- */

/* One rank's lists in a reference case: a topology round, or a directed
 * pattern with destination weights (r -> r+1 and r+3, weights 0.5 and 2). */
struct lists {
	double self;
	int nsrc, ndst, src[HORA_TOPOLOGY_MAX_DEGREE], dst[HORA_TOPOLOGY_MAX_DEGREE];
	double src_w[HORA_TOPOLOGY_MAX_DEGREE], dst_w[HORA_TOPOLOGY_MAX_DEGREE];
	int with_dst_w;
};

enum { CASE_TOPOLOGIES = 5 }; /* ring, exponential, one-peer (round 1), random (round 3), skewed */

static void lists_of(int which, int r, int n, struct lists *l)
{
	memset(l, 0, sizeof(*l));
	if (which < 4) {
		static const enum hora_topology ts[4] = {HORA_TOPOLOGY_RING, HORA_TOPOLOGY_EXPONENTIAL,
							 HORA_TOPOLOGY_ONE_PEER_EXPONENTIAL, HORA_TOPOLOGY_RANDOM};
		struct hora_topology_round o;
		cr_assert_eq(hora_topology_neighbors(ts[which], r, n, which == 2 ? 1 : 3, 5, which == 1 ? 0.4 : -1, &o), 0);
		l->self = o.self_weight;
		l->nsrc = o.nsrc;
		l->ndst = o.ndst;
		memcpy(l->src, o.src, sizeof(o.src));
		memcpy(l->dst, o.dst, sizeof(o.dst));
		memcpy(l->src_w, o.src_weight, sizeof(o.src_weight));
		return;
	}
	l->self = 0.625; /* n >= 5: r+1 and r+3 are two other ranks */
	l->ndst = l->nsrc = 2;
	l->dst[0] = (r + 1) % n, l->dst[1] = (r + 3) % n;
	l->dst_w[0] = 0.5, l->dst_w[1] = 2;
	l->src[0] = (r - 1 + n) % n, l->src[1] = (r - 3 + n) % n;
	l->src_w[0] = 0.25, l->src_w[1] = 0.125;
	l->with_dst_w = 1;
}

static const size_t esz[] = {4, 8, 2, 2, 4, 8};

/* small integers, exact in every dtype */
static double val(int r, size_t i)
{
	return (double)((r * 7 + (int)(i * 3)) % 23) - 11;
}

/* element i of p as a double, and setting it (net/coll/reduce.h) */
static void put(void *p, size_t i, enum hora_dtype t, double v)
{
	hora_net_value_put(p, i, (enum hora_net_dtype)t, v);
}

static double get(const void *p, size_t i, enum hora_dtype t)
{
	return hora_net_value_get(p, i, (enum hora_net_dtype)t);
}

/* v rounded to dtype t as the library rounds (integers to nearest) */
static double round_to(double v, enum hora_dtype t)
{
	switch (t) {
	case HORA_F32: return (float)v;
	case HORA_F16: return hora_net_f16_to_f32(hora_net_f32_to_f16((float)v));
	case HORA_BF16: return hora_net_bf16_to_f32(hora_net_f32_to_bf16((float)v));
	case HORA_I32:
	case HORA_I64: return nearbyint(v);
	default: return v;
	}
}

struct refcase {
	int which, async;
	enum hora_dtype t;
	size_t count;
	void *out[GMAXR];
	int rc[GMAXR];
	char err[GMAXR][512];
};

static void ref_body(struct grank *g)
{
	struct refcase *C = g->arg;
	struct lists l;
	lists_of(C->which, g->r, g->n, &l);
	void *x = malloc(C->count * esz[C->t] + 1);
	for (size_t i = 0; i < C->count; i++)
		put(x, i, C->t, val(g->r, i));
	C->out[g->r] = malloc(C->count * esz[C->t] + 1);
	int rc;
	if (C->async) { /* the lists may go away once the request is queued */
		struct hora_request *q;
		struct lists *copy = malloc(sizeof(*copy));
		*copy = l;
		rc = hora_neighbor_allreduce_async(g->c, x, C->out[g->r], C->count, C->t, copy->self, copy->src,
						   copy->src_w, copy->nsrc, copy->dst,
						   copy->with_dst_w ? copy->dst_w : NULL, copy->ndst, &q);
		memset(copy, 0xff, sizeof(*copy));
		free(copy);
		if (!rc)
			rc = hora_wait(q);
	} else {
		rc = hora_neighbor_allreduce(g->c, x, C->out[g->r], C->count, C->t, l.self, l.src, l.src_w, l.nsrc,
					     l.dst, l.with_dst_w ? l.dst_w : NULL, l.ndst);
	}
	C->rc[g->r] = rc;
	snprintf(C->err[g->r], sizeof(C->err[g->r]), "%s", rc ? hora_comm_last_error(g->c) : "");
	free(x);
}

/* what rank r must get: self first, then the sources in order, in double;
 * a scaled send is rounded to the dtype first, the sum once at the end
 * (l: every rank's lists) */
static double reference(const struct lists *l, int r, size_t i, enum hora_dtype t)
{
	const struct lists *me = &l[r];
	double acc = me->self * val(r, i);
	for (int s = 0; s < me->nsrc; s++) {
		const struct lists *from = &l[me->src[s]];
		double sent = val(me->src[s], i);
		if (from->with_dst_w) { /* the sender's weight for r */
			const double dw = from->dst[0] == r ? from->dst_w[0] : from->dst_w[1];
			sent = dw == 1.0 ? sent : round_to(dw * sent, t);
		}
		acc += me->src_w[s] * sent;
	}
	return round_to(acc, t);
}

static void check_ref(int n, int which, enum hora_dtype t, size_t count, int async)
{
	struct refcase C = {.which = which, .t = t, .count = count, .async = async};
	g_run(n, ref_body, &C);
	static const double tol[] = {0, 0, 2e-2, 2e-1, 0, 0}; /* f16/bf16: the sum rounds via f32 */
	struct lists l[GMAXR];
	for (int r = 0; r < n; r++)
		lists_of(which, r, n, &l[r]);
	for (int r = 0; r < n; r++) {
		cr_assert_eq(C.rc[r], 0, "n=%d case %d %s: rank %d: %s", n, which, hora_net_dtype_name((enum hora_net_dtype)t), r,
			     C.err[r]);
		double worst = 0;
		for (size_t i = 0; i < count; i++)
			worst = fmax(worst, fabs(get(C.out[r], i, t) - reference(l, r, i, t)));
		cr_assert_leq(worst, tol[t], "n=%d case %d %s count %zu: rank %d is %.3g off the serial reference", n, which,
			      hora_net_dtype_name((enum hora_net_dtype)t), count, r, worst);
		free(C.out[r]);
	}
}

Test(gossip_neighbor, every_dtype_and_graph_matches_the_serial_reference_n5, .timeout = 120)
{
	for (int which = 0; which < CASE_TOPOLOGIES; which++)
		for (int t = HORA_F32; t <= HORA_I64; t++)
			check_ref(5, which, (enum hora_dtype)t, 1000, 0);
}

Test(gossip_neighbor, every_dtype_matches_the_serial_reference_n4, .timeout = 120)
{
	for (int which = 0; which < 4; which++)
		for (int t = HORA_F32; t <= HORA_I64; t++)
			check_ref(4, which, (enum hora_dtype)t, 257, 0);
}

Test(gossip_neighbor, async_form_with_destination_weights, .timeout = 60)
{
	check_ref(6, 4, HORA_F32, 3000, 1);
	check_ref(6, 1, HORA_BF16, 3000, 1);
}

Test(gossip_neighbor, large_buffer_in_several_chunks, .timeout = 120)
{
	/* 4 MiB chunks (segment 1 MiB x depth 4): 12 MB of f32 is three */
	check_ref(5, 4, HORA_F32, 3u << 20, 0);
	check_ref(3, 0, HORA_F64, (1u << 20) + 7, 0);
}

Test(gossip_neighbor, no_neighbours_and_a_communicator_of_one, .timeout = 60)
{
	check_ref(1, 0, HORA_F32, 100, 0);
	check_ref(1, 1, HORA_I64, 100, 0);
}

/* ---- patterns that disagree ------------------------------------------------------- */

struct bad {
	int mode; /* 0: an extra send, 1: a missing send, 2: a count, 3: a count with the check off, 4: self */
	int rc[GMAXR], rc2[GMAXR];
	char err[GMAXR][512], err2[GMAXR][512];
	double took_s[GMAXR];
};

/* a directed ring r -> r+1, with one rank wrong */
static void bad_body(struct grank *g)
{
	struct bad *B = g->arg;
	const int n = g->n, r = g->r;
	int src[3] = {(r - 1 + n) % n}, dst[3] = {(r + 1) % n}, nsrc = 1, ndst = 1;
	size_t count = 4;
	if (B->mode == 0 && r == 0)
		dst[ndst++] = 2; /* rank 2 does not expect it */
	if (B->mode == 1 && r == 3)
		src[nsrc++] = 1; /* rank 1 does not send it */
	if ((B->mode == 2 || B->mode == 3) && r == 1)
		count = 8;
	if (B->mode == 3)
		hora_comm_set_neighbor_check(g->c, 0);
	if (B->mode == 4 && r == 1)
		dst[0] = 1;
	float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	const double t0 = hora_clock_s();
	B->rc[r] = hora_neighbor_allreduce(g->c, x, x, count, HORA_F32, 0.5, src, NULL, nsrc, dst, NULL, ndst);
	B->took_s[r] = hora_clock_s() - t0;
	snprintf(B->err[r], sizeof(B->err[r]), "%s", B->rc[r] ? hora_comm_last_error(g->c) : "");
	B->rc2[r] = hora_barrier(g->c); /* must fail where the call did not */
	snprintf(B->err2[r], sizeof(B->err2[r]), "%s", B->rc2[r] ? hora_comm_last_error(g->c) : "");
}

static void bad_run(struct bad *B, int mode)
{
	memset(B, 0, sizeof(*B));
	B->mode = mode;
	g_run(4, bad_body, B);
	for (int r = 0; r < 4; r++) {
		note("mode %d rank %d (%.3f s): %d %s | %d %s", mode, r, B->took_s[r], B->rc[r], B->err[r], B->rc2[r],
			    B->err2[r]);
		cr_assert(B->rc[r] < 0 || B->rc2[r] < 0, "mode %d: rank %d went on as if nothing was wrong", mode, r);
	}
}

Test(gossip_neighbor, a_send_nobody_expects_is_named_on_every_rank, .timeout = 60)
{
	struct bad B;
	bad_run(&B, 0);
	for (int r = 0; r < 4; r++) {
		cr_assert_eq(B.rc[r], -EBADE, "rank %d: %s", r, B.err[r]);
		cr_assert(strstr(B.err[r], "rank 0 sends to rank 2 but rank 2 does not receive from it"), "rank %d: %s", r,
			  B.err[r]);
	}
}

Test(gossip_neighbor, a_receive_nobody_sends_is_named_on_every_rank, .timeout = 60)
{
	struct bad B;
	bad_run(&B, 1);
	for (int r = 0; r < 4; r++) {
		cr_assert_eq(B.rc[r], -EBADE, "rank %d: %s", r, B.err[r]);
		cr_assert(strstr(B.err[r], "rank 1 does not send to rank 3 but rank 3 receives from it"), "rank %d: %s", r,
			  B.err[r]);
	}
}

static int names_counts(const char *e)
{
	return strstr(e, "neighbor_allreduce") && strstr(e, "count 8") && strstr(e, "count 4");
}

Test(gossip_neighbor, a_count_that_differs_is_a_named_mismatch, .timeout = 60)
{
	struct bad B;
	bad_run(&B, 2);
	int named = 0;
	for (int r = 0; r < 4; r++)
		named += B.rc[r] == -EBADE && names_counts(B.err[r]);
	cr_assert_geq(named, 1, "a rank names both counts: %s | %s", B.err[0], B.err[1]);
}

Test(gossip_neighbor, without_the_check_the_receivers_name_a_count_mismatch, .timeout = 60)
{
	struct bad B;
	bad_run(&B, 3);
	/* rank 1 (count 8) receives rank 0's count 4; rank 2 receives rank 1's 8 */
	for (int r = 1; r <= 2; r++)
		cr_assert(B.rc[r] == -EBADE && names_counts(B.err[r]), "rank %d: %s", r, B.err[r]);
}

Test(gossip_neighbor, a_rank_naming_itself_is_refused_everywhere, .timeout = 60)
{
	struct bad B;
	bad_run(&B, 4);
	for (int r = 0; r < 4; r++) {
		const char *e = B.rc[r] ? B.err[r] : B.err2[r];
		cr_assert(strstr(e, "rank 1 refused neighbor_allreduce #1: neighbour 1 is not another rank"), "rank %d: %s",
			  r, e);
	}
}

/* ---- the pair average ---------------------------------------------------------------- */

#define PAIRN 777

struct pairs {
	enum hora_dtype t;
	size_t count; /* 0: PAIRN */
	void *before[GMAXR], *after[GMAXR];
	int rc[GMAXR], rc_all[GMAXR], rc_bad[GMAXR];
	char err[GMAXR][512];
};

static void pair_body(struct grank *g)
{
	struct pairs *P = g->arg;
	const int r = g->r, peer = r ^ 1;
	const size_t count = P->count ? P->count : PAIRN, bytes = count * esz[P->t];
	P->before[r] = malloc(bytes);
	P->after[r] = malloc(bytes);
	for (size_t i = 0; i < count; i++) /* not exact in binary: the sum rounds */
		put(P->before[r], i, P->t, initial(r, (int)i) * (P->t == HORA_I32 || P->t == HORA_I64 ? 100 : 0.01));
	memcpy(P->after[r], P->before[r], bytes);
	/* ranks 0 and 1 average once, 2 and 3 three times (the first two on a
	 * copy): pairs are numbered per pair, the other ranks do not count */
	int rc = 0;
	if (r >= 2) {
		void *scratch = malloc(bytes);
		memcpy(scratch, P->before[r], bytes);
		for (int k = 0; k < 2 && !rc; k++)
			rc = hora_pair_average(g->c, scratch, count, P->t, peer);
		free(scratch);
	}
	if (!rc)
		rc = hora_pair_average(g->c, P->after[r], count, P->t, peer);
	P->rc[r] = rc;
	snprintf(P->err[r], sizeof(P->err[r]), "%s", rc ? hora_comm_last_error(g->c) : "");
	P->rc_bad[r] = hora_pair_average(g->c, P->after[r], count, P->t, r); /* itself: refused here alone */
	float one = 1;
	P->rc_all[r] = hora_allreduce(g->c, &one, &one, 1, HORA_F32, HORA_SUM); /* collectives still line up */
	if (!P->rc_all[r] && one != 4)
		P->rc_all[r] = -1000;
}

static void pairs_check(enum hora_dtype t, size_t count)
{
	struct pairs P = {.t = t, .count = count};
	g_run(4, pair_body, &P);
	const char *name = hora_net_dtype_name((enum hora_net_dtype)t);
	double worst = 0;
	for (int r = 0; r < 4; r++) {
		cr_assert_eq(P.rc[r], 0, "%s rank %d: %s", name, r, P.err[r]);
		cr_assert_eq(P.rc_bad[r], -EINVAL, "%s rank %d: a pair with itself", name, r);
		cr_assert_eq(P.rc_all[r], 0, "%s rank %d: the allreduce after the pairs", name, r);
	}
	for (int a = 0; a < 4; a += 2) {
		cr_assert(!memcmp(P.after[a], P.after[a + 1], count * esz[t]), "%s: ranks %d and %d differ", name, a, a + 1);
		for (size_t i = 0; i < count; i++) {
			const double x = get(P.before[a], i, t), y = get(P.before[a + 1], i, t);
			const double got = 2 * get(P.after[a], i, t), scale = fabs(x) + fabs(y) + 1e-30;
			worst = fmax(worst, fabs(got - (x + y)) / scale);
			if (t == HORA_I32 || t == HORA_I64)
				cr_assert_leq(fabs(got - (x + y)), 1, "%s: integers lose at most the odd one", name);
		}
	}
	static const double tol[] = {1e-7, 1e-15, 1e-3, 8e-3, 1, 1};
	note("pair %s: sum kept to %.3g relative", name, worst);
	if (t <= HORA_BF16)
		cr_assert_leq(worst, tol[t], "%s: the pair's sum moved by %.3g relative", name, worst);
	for (int r = 0; r < 4; r++) {
		free(P.before[r]);
		free(P.after[r]);
	}
}

Test(gossip_pair, both_sides_end_bitwise_equal_and_the_sum_is_kept, .timeout = 120)
{
	for (int t = HORA_F32; t <= HORA_I64; t++)
		pairs_check((enum hora_dtype)t, PAIRN);
}

Test(gossip_pair, a_large_buffer_goes_in_several_exchanges, .timeout = 120)
{
	pairs_check(HORA_F32, 600000); /* 2.4 MB: three exchanges of at most 1 MiB */
	pairs_check(HORA_F16, (1u << 19) + 3);
}

struct pair_bad {
	int rc[2];
	char err[2][512];
};

static void pair_bad_body(struct grank *g)
{
	struct pair_bad *P = g->arg;
	double x[8] = {0};
	P->rc[g->r] = hora_pair_average(g->c, x, g->r ? 8 : 5, HORA_F64, 1 - g->r);
	snprintf(P->err[g->r], sizeof(P->err[g->r]), "%s", hora_comm_last_error(g->c));
}

Test(gossip_pair, a_count_that_differs_fails_both_sides_naming_both, .timeout = 60)
{
	struct pair_bad P;
	memset(&P, 0, sizeof(P));
	g_run(2, pair_bad_body, &P);
	for (int r = 0; r < 2; r++)
		cr_assert(P.rc[r] == -EBADE && strstr(P.err[r], "pair_average #1") && strstr(P.err[r], "count 5") &&
				  strstr(P.err[r], "count 8"),
			  "rank %d: %d %s", r, P.rc[r], P.err[r]);
}

/* ---- interrupted while a neighbour never comes ------------------------------------ */

/* Rank 2 of 3 never calls: ranks 0 and 1 wait for it in the pattern check
 * (mode 0), in the data with the check off (1), or rank 0 in a pair average
 * with it (2). hora_net_comm_interrupt (the stall abort's and the elastic
 * loss watcher's way in, core/comm.c, which then returns its own code) on
 * rank 0 ends its wait at once, and rank 1 fails too instead of waiting for
 * the I/O timeout: told by rank 0 in the check, which every rank is in,
 * and in the barrier of mode 2. With the check off rank 1 waits only for
 * rank 2's data, which rank 0's failure does not change: there its own
 * interrupt ends its wait (each rank's loss watcher sees rank 2 die). */
struct intr {
	int mode;
	struct hora_net_comm *comm[3];
	int rc[3];
	char err[3][512];
	_Atomic int entered;
};

struct intr_arg {
	struct intr *I;
	int r;
};

static void *intr_create(void *p)
{
	struct intr_arg *a = p;
	struct hora_net_comm_cfg cfg = {.rank = a->r, .nranks = 3, .addrs = g_addrs, .connect_timeout_ms = 10000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = (const uint8_t *)TC_SECRET;
	cfg.opts.secret_len = strlen(TC_SECRET);
	cfg.opts.io_timeout_ms = 20000;
	a->I->rc[a->r] = hora_net_comm_create(&cfg, &a->I->comm[a->r], a->I->err[a->r], sizeof(a->I->err[a->r]));
	return NULL;
}

static void *intr_call(void *p)
{
	struct intr_arg *a = p;
	struct intr *I = a->I;
	const int r = a->r, other = 1 - r;
	float x[64] = {0};
	if (I->mode == 1)
		hora_net_comm_set_neighbor_check(I->comm[r], false);
	atomic_fetch_add(&I->entered, 1);
	if (I->mode == 2 && r == 0) {
		I->rc[r] = hora_net_pair_average(I->comm[r], x, 64, HORA_NET_F32, 2);
	} else if (I->mode == 2) {
		I->rc[r] = hora_net_barrier(I->comm[r]);
	} else {
		const int nb[2] = {other, 2};
		const struct hora_net_neighbors l = {.self_weight = 1.0 / 3, .src = nb, .nsrc = 2, .dst = nb, .ndst = 2};
		I->rc[r] = hora_net_neighbor_allreduce(I->comm[r], x, x, 64, HORA_NET_F32, &l);
	}
	snprintf(I->err[r], sizeof(I->err[r]), "%s", hora_net_comm_error(I->comm[r]));
	return NULL;
}

static void interrupted(int mode)
{
	struct intr I;
	memset(&I, 0, sizeof(I));
	I.mode = mode;
	struct intr_arg a[3] = {{&I, 0}, {&I, 1}, {&I, 2}};
	pthread_t th[3];
	th_rank_addrs(g_addr, g_addrs, 3);
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, intr_create, &a[i]);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(I.rc[i], 0, "rank %d: %s", i, I.err[i]);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, intr_call, &a[i]);
	while (atomic_load(&I.entered) < 2)
		usleep(1000);
	usleep(200000); /* both are waiting for rank 2 now */
	const double t0 = hora_clock_s();
	hora_net_comm_interrupt(I.comm[0], "stopped by the test");
	if (mode == 1)
		hora_net_comm_interrupt(I.comm[1], "stopped by the test");
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	note("interrupt mode %d: returned after %.3f s: %d %s | %d %s", mode, hora_clock_s() - t0, I.rc[0], I.err[0],
	     I.rc[1], I.err[1]);
	for (int r = 0; r < 2; r++) {
		cr_assert_lt(I.rc[r], 0, "mode %d: rank %d fails", mode, r);
		cr_assert(!strstr(I.err[r], "no progress") && !strstr(I.err[r], "timed out"), "mode %d rank %d waited: %s",
			  mode, r, I.err[r]);
	}
	for (int i = 0; i < 3; i++)
		hora_net_comm_destroy(I.comm[i]);
}

Test(gossip_interrupt, a_neighbour_allreduce_waiting_in_the_check_returns, .timeout = 60) { interrupted(0); }
Test(gossip_interrupt, a_neighbour_allreduce_waiting_for_data_returns, .timeout = 60) { interrupted(1); }
Test(gossip_interrupt, a_pair_average_waiting_for_its_peer_returns, .timeout = 60) { interrupted(2); }
