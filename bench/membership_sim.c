/* membership_sim.c - `hora bench membership --simulate N`: the membership
 * state machine of N members (net/membership/swim.c, unmodified) on the
 * simulated network of msim.h, in simulated time. In order:
 *   formation   every member started 1 ms apart -> all installed one view of N
 *   load        datagrams and bytes per member per second, a quiet 30 s
 *   crashes     K single crashes (a silent host, or with --kill a killed
 *               process whose host refuses), one after the other: the first
 *               member to hold it DEAD, every member, every member's view
 *               without it; then it starts again (a new process) and the time
 *               until it is back in a view of N
 *   burst       B members crash at once: the views member 0 installs until
 *               the view without all of them, and how long that took
 *   steady      S seconds with nobody crashing (at the given loss): false
 *               suspicions, false deaths (every death a member declares,
 *               from its stats), views installed
 * Figures are simulated seconds, deterministic for the arguments (--seed).
 * memberlist's LAN defaults (probe every 1 s, suspicion 4 log10(N) probe
 * periods) are printed beside them, from its formulas. */
#include "bench.h"
#include "msim.h"
#include "report.h"

#include <getopt.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEP_US 10000 /* checks every 10 ms of simulated time */
#define MAXK 64

struct opts {
	struct msim_cfg mc;
	int crashes, burst, seconds;
	bool kill;
	const char *json;
};

/* member i holds uid DEAD (or no longer knows it) */
static bool holds_gone(struct msim *m, int i, uint64_t uid)
{
	static struct hora_swim_member mb[HORA_SWIM_MAX_MEMBERS];
	const int k = hora_swim_members(msim_swim(m, i), mb, HORA_SWIM_MAX_MEMBERS);
	for (int j = 0; j < k; j++)
		if (mb[j].uid == uid)
			return mb[j].state == HORA_SWIM_DEAD || mb[j].state == HORA_SWIM_LEFT;
	return true;
}

static bool view_has(const struct hora_swim_view *v, uint64_t uid)
{
	for (int k = 0; k < v->n; k++)
		if (v->uids[k] == uid)
			return true;
	return false;
}

/* every up member installed one view holding exactly the up members */
static bool agreed(struct msim *m, int n)
{
	struct hora_swim_view v0 = {0};
	int up = 0;
	for (int i = 0; i < n; i++) {
		if (!msim_up(m, i))
			continue;
		up++;
		struct hora_swim_view v;
		int rank;
		bool paused;
		hora_swim_view_get(msim_swim(m, i), &v, &rank, &paused, NULL, 0);
		if (!v.id || paused || rank < 0 || (v0.id && v.id != v0.id))
			return false;
		v0 = v;
	}
	if (v0.n != up)
		return false;
	for (int i = 0; i < n; i++)
		if (msim_up(m, i) && !view_has(&v0, msim_uid(m, i)))
			return false;
	return true;
}

/* run until agreed, at most limit_s; the time it took, -1 if never */
static double until_agreed(struct msim *m, int n, double limit_s)
{
	const int64_t t0 = msim_now_us(m);
	while (msim_now_us(m) - t0 <= (int64_t)(limit_s * 1e6)) {
		if (agreed(m, n))
			return (double)(msim_now_us(m) - t0) / 1e6;
		msim_run_until(m, msim_now_us(m) + STEP_US);
	}
	return -1;
}

struct crash_fig {
	double first, all, view, back; /* s after the crash / the restart; -1: never */
};

/* one crash of member v: detection by the first and by every member, the
 * view without it; then its restart and the view of n again */
static struct crash_fig one_crash(struct msim *m, int n, int v, bool kill)
{
	struct crash_fig f = {-1, -1, -1, -1};
	const uint64_t uid = msim_uid(m, v);
	const int64_t t0 = msim_now_us(m);
	msim_crash(m, v, kill);
	while (msim_now_us(m) - t0 < 30000000 && (f.view < 0 || f.all < 0)) {
		msim_run_until(m, msim_now_us(m) + STEP_US);
		const double t = (double)(msim_now_us(m) - t0) / 1e6;
		int holding = 0, up = 0;
		for (int i = 0; i < n; i++)
			if (msim_up(m, i)) {
				struct hora_swim_view vi;
				int rank;
				bool paused;
				hora_swim_view_get(msim_swim(m, i), &vi, &rank, &paused, NULL, 0);
				up++;
				holding += holds_gone(m, i, uid) || !view_has(&vi, uid); /* it knows */
			}
		if (f.first < 0 && holding)
			f.first = t;
		if (f.all < 0 && holding == up)
			f.all = t;
		if (f.view < 0 && agreed(m, n))
			f.view = t;
	}
	msim_start(m, v);
	f.back = until_agreed(m, n, 30);
	return f;
}

/* B members crash at once: the views member 0 installs until the view
 * without them all; the time that took */
static void burst(struct msim *m, int n, int b, bool kill, int *views, double *commit_s)
{
	int victims[HORA_SWIM_MAX_VIEW], nv = 0;
	while (nv < b) { /* distinct, never the seeds 0..2 */
		const int v = 3 + (int)(randombytes_uniform((uint32_t)(n - 3)));
		bool dup = false;
		for (int k = 0; k < nv; k++)
			dup |= victims[k] == v;
		if (!dup)
			victims[nv++] = v;
	}
	struct hora_swim_stats s0, s1;
	hora_swim_stats_get(msim_swim(m, 0), &s0);
	for (int k = 0; k < nv; k++)
		msim_crash(m, victims[k], kill);
	*commit_s = until_agreed(m, n, 60);
	hora_swim_stats_get(msim_swim(m, 0), &s1);
	*views = (int)(s1.views_installed - s0.views_installed);
	for (int k = 0; k < nv; k++)
		msim_start(m, victims[k]);
	until_agreed(m, n, 60);
}

/* S quiet seconds (nobody crashes): false suspicions and false deaths
 * (every death any member declares: exact, from its stats), views */
static void steady(struct msim *m, int n, int seconds, uint64_t *susp, uint64_t *deaths, uint64_t *views)
{
	uint64_t s0 = 0, d0 = 0, v0 = 0, s1 = 0, d1 = 0, v1 = 0;
	struct hora_swim_stats st;
	for (int i = 0; i < n; i++) {
		hora_swim_stats_get(msim_swim(m, i), &st);
		s0 += st.suspicions;
		d0 += st.deaths;
		v0 += st.views_installed;
	}
	msim_run_until(m, msim_now_us(m) + (int64_t)seconds * 1000000);
	for (int i = 0; i < n; i++) {
		hora_swim_stats_get(msim_swim(m, i), &st);
		s1 += st.suspicions;
		d1 += st.deaths;
		v1 += st.views_installed;
	}
	*susp = s1 - s0;
	*deaths = d1 - d0;
	*views = v1 - v0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora bench membership --simulate N [--loss P] [--seconds S] [--seed X]\n"
		   "       [--latency-ms L] [--crashes K] [--burst B] [--kill] [--probe-interval-ms 200]\n"
		   "       [--suspect-timeout-ms 1000] [--json F]\n"
		   "  N members of the real membership state machine on a simulated network, in\n"
		   "  simulated time (deterministic for the arguments): formation, load, K single\n"
		   "  crashes (silent hosts; --kill: killed processes, their hosts refuse), a burst\n"
		   "  of B crashes at once (default N/4), S quiet seconds (default 600) at loss P\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option opts[] = {
		{"simulate", required_argument, 0, 'N'}, {"loss", required_argument, 0, 'l'},
		{"seconds", required_argument, 0, 'S'}, {"seed", required_argument, 0, 'x'},
		{"latency-ms", required_argument, 0, 'L'}, {"crashes", required_argument, 0, 'k'},
		{"burst", required_argument, 0, 'b'}, {"kill", no_argument, 0, 'K'},
		{"probe-interval-ms", required_argument, 0, 'p'}, {"suspect-timeout-ms", required_argument, 0, 's'},
		{"json", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	*o = (struct opts){.mc = {.latency_ms = 0.5, .seed = 1}, .crashes = 10, .burst = -1, .seconds = 600};
	hora_swim_cfg_default(&o->mc.swim);
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'N': o->mc.n = atoi(optarg); break;
		case 'l': o->mc.loss = atof(optarg); break;
		case 'S': o->seconds = atoi(optarg); break;
		case 'x': o->mc.seed = strtoull(optarg, NULL, 10); break;
		case 'L': o->mc.latency_ms = atof(optarg); break;
		case 'k': o->crashes = atoi(optarg); break;
		case 'b': o->burst = atoi(optarg); break;
		case 'K': o->kill = true; break;
		case 'p': o->mc.swim.probe_interval_ms = atoi(optarg); break;
		case 's': o->mc.swim.suspect_timeout_ms = atoi(optarg); break;
		case 'j': o->json = optarg; break;
		case 'h': usage(stdout); return 1;
		default: usage(stderr); return 2;
		}
	}
	const int n = o->mc.n;
	if (o->burst < 0) /* N/4, the others keeping a majority */
		o->burst = n / 4 < (n - 4) / 2 ? n / 4 : (n - 4) / 2;
	o->mc.swim.ping_timeout_ms = o->mc.swim.probe_interval_ms * 2 / 5;
	o->mc.swim.min_members = n;
	static const uint8_t key[] = "hora-bench-membership-simulated-secret";
	o->mc.swim.secret = key;
	o->mc.swim.secret_len = sizeof(key) - 1;
	char why[256];
	if (hora_swim_cfg_check(&o->mc.swim, why, sizeof(why))) {
		fprintf(stderr, "hora bench membership: %s\n", why);
		return 2;
	}
	if (n < 4 || o->crashes < 0 || o->crashes > MAXK || o->seconds < 0 || 2 * o->burst >= n - 3 ||
	    o->burst < 0) {
		fprintf(stderr, "hora bench membership: --simulate N needs N >= 4, --crashes 0..%d, --seconds >= 0, "
				"--burst B with 2B < N - 3 (the others keep a majority; seeds 0-2 never crash)\n",
			MAXK);
		return 2;
	}
	return 0;
}

/* memberlist's LAN defaults (config.go): probe every 1 s, timeout 0.5 s,
 * suspicion 4 log10(N) probe periods (Lifeguard may shorten it to 1/6 of
 * its max, never below); detection by a first member about the period,
 * its timeout and the suspicion */
static double memberlist_suspicion_s(int n)
{
	return 4.0 * fmax(1.0, log10((double)n)) * 1.0;
}

static void report(const struct opts *o, double formation, const struct crash_fig *cf, int k, int bviews,
		   double bcommit, double bps, double mps, uint64_t susp, uint64_t deaths, uint64_t views)
{
	double first[MAXK], all = 0, view = 0, vmed[MAXK], back = 0, fmax_ = 0;
	int never = 0;
	for (int i = 0; i < k; i++) {
		first[i] = cf[i].first;
		vmed[i] = cf[i].view;
		never += cf[i].first < 0 || cf[i].all < 0 || cf[i].view < 0 || cf[i].back < 0;
		all = fmax(all, cf[i].all);
		view = fmax(view, cf[i].view);
		back = fmax(back, cf[i].back);
		fmax_ = fmax(fmax_, cf[i].first);
	}
	const double fmed = k ? hora_bench_median(first, k) : -1, vm = k ? hora_bench_median(vmed, k) : -1;
	const int n = o->mc.n;
	printf("# hora bench membership --simulate %d: loss %.3g, latency %.2g ms, T=%d ms, suspect=%d ms, "
	       "seed %llu, %d %s crashes, burst %d, %d s steady (simulated time)\n",
	       n, o->mc.loss, o->mc.latency_ms, o->mc.swim.probe_interval_ms, o->mc.swim.suspect_timeout_ms,
	       (unsigned long long)o->mc.seed, k, o->kill ? "killed" : "silent", o->burst, o->seconds);
	printf("%-26s %10s %12s\n", "", "hora", "memberlist");
	printf("%-26s %10.3f %12s\n", "formation_s", formation, "-");
	printf("%-26s %10.3f %12.3f\n", "detect_first_s (median)", fmed, 1.5 + memberlist_suspicion_s(n));
	printf("%-26s %10.3f %12s\n", "detect_first_max_s", fmax_, "-");
	printf("%-26s %10.3f %12s\n", "detect_all_s (max)", all, "-");
	printf("%-26s %10.3f %12s\n", "view_commit_s (median)", vm, "no views");
	printf("%-26s %10.3f %12s\n", "view_commit_s (max)", view, "no views");
	printf("%-26s %10.3f %12s\n", "rejoin_s (max)", back, "-");
	printf("%-26s %10d %12s\n", "burst_views", bviews, "no views");
	printf("%-26s %10.3f %12s\n", "burst_commit_s", bcommit, "-");
	printf("%-26s %10.0f %12s\n", "bytes_per_member_s", bps, "-");
	printf("%-26s %10.1f %12s\n", "msgs_per_member_s", mps, "-");
	printf("%-26s %10llu %12s\n", "false_suspicions", (unsigned long long)susp, "-");
	printf("%-26s %10llu %12s\n", "false_deaths", (unsigned long long)deaths, "-");
	printf("%-26s %10llu %12s\n", "views_in_steady", (unsigned long long)views, "-");
	if (never)
		printf("# %d crash(es) never detected, agreed or rejoined within 30 s\n", never);
	FILE *f = o->json ? hora_bench_json_open(o->json) : NULL;
	if (f) {
		fprintf(f, "{\"members\":%d,\"loss\":%g,\"latency_ms\":%g,\"seed\":%llu,\"probe_interval_ms\":%d,"
			   "\"suspect_timeout_ms\":%d,\"kill\":%s,\"crashes\":%d,\"burst\":%d,\"seconds\":%d,"
			   "\"formation_s\":%.4f,\"detect_first_s\":%.4f,\"detect_first_max_s\":%.4f,"
			   "\"detect_all_s\":%.4f,\"view_commit_median_s\":%.4f,\"view_commit_s\":%.4f,"
			   "\"rejoin_s\":%.4f,\"burst_views\":%d,\"burst_commit_s\":%.4f,\"bytes_per_member_s\":%.1f,"
			   "\"msgs_per_member_s\":%.2f,\"false_suspicions\":%llu,\"false_deaths\":%llu,"
			   "\"views_in_steady\":%llu,\"never\":%d,\"memberlist_detect_first_s\":%.3f,"
			   "\"memberlist_suspicion_s\":%.3f}\n",
			n, o->mc.loss, o->mc.latency_ms, (unsigned long long)o->mc.seed, o->mc.swim.probe_interval_ms,
			o->mc.swim.suspect_timeout_ms, o->kill ? "true" : "false", k, o->burst, o->seconds,
			formation, fmed, fmax_, all, vm, view, back, bviews, bcommit, bps, mps,
			(unsigned long long)susp, (unsigned long long)deaths, (unsigned long long)views, never,
			1.5 + memberlist_suspicion_s(n), memberlist_suspicion_s(n));
		hora_bench_json_close(f);
	}
}

int hora_bench_membership_sim(int argc, char **argv)
{
	struct opts o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : rc;
	char err[256];
	struct msim *m = msim_create(&o.mc, err, sizeof(err));
	if (!m) {
		fprintf(stderr, "hora bench membership: %s\n", err);
		return 2;
	}
	const int n = o.mc.n;
	for (int i = 0; i < n; i++) {
		msim_run_until(m, (int64_t)i * 1000);
		msim_start(m, i);
	}
	const double formation = until_agreed(m, n, 120); /* from the last member's start */
	msim_run_until(m, msim_now_us(m) + 10000000); /* the join-time gossip drains */
	uint64_t m0, b0, m1, b1;
	msim_traffic(m, &m0, &b0);
	msim_run_until(m, msim_now_us(m) + 30000000);
	msim_traffic(m, &m1, &b1);
	const double bps = (double)(b1 - b0) / 30.0 / n, mps = (double)(m1 - m0) / 30.0 / n;
	struct crash_fig cf[MAXK];
	for (int k = 0; k < o.crashes; k++) {
		const int v = 3 + (int)randombytes_uniform((uint32_t)(n - 3));
		cf[k] = one_crash(m, n, v, o.kill);
		fprintf(stderr, "  crash %d of member %d: first %.3f s, all %.3f s, view %.3f s; back in %.3f s\n", k, v,
			cf[k].first, cf[k].all, cf[k].view, cf[k].back);
		msim_run_until(m, msim_now_us(m) + 5000000);
	}
	int bviews = 0;
	double bcommit = 0;
	if (o.burst)
		burst(m, n, o.burst, o.kill, &bviews, &bcommit);
	msim_run_until(m, msim_now_us(m) + 5000000);
	uint64_t susp, deaths, views;
	steady(m, n, o.seconds, &susp, &deaths, &views);
	report(&o, formation, cf, o.crashes, bviews, bcommit, bps, mps, susp, deaths, views);
	msim_destroy(m);
	return formation < 0 ? 1 : 0;
}
