/* membership.c - `hora bench membership --members N`: SWIM + views at scale.
 *
 * N members in this process, each a full transport loop (own comm thread,
 * own io_uring ring, own UDP socket on 127.0.0.1) running the real
 * membership code, joined through member 0. Measures, per repetition:
 *   agree_ms   start of all members -> every member installed the N view
 *   detect_ms  one member's loop destroyed without LEAVE (as kill -9) ->
 *              every other member installed the N-1 view (detection + agreement)
 *   bytes_per_s_per_member  membership traffic in a quiet 3 s window that starts
 *                           5 s after agreement (join-time gossip drained)
 * and prints medians. SWIM's expectations: detection time about constant in
 * N, dissemination O(log N) periods, traffic per member constant.
 */
#include "bench.h"
#include "net/membership/membership.h"
#include "report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static int all_have(struct hora_net_membership **l, int n, int skip, int want)
{
	struct hora_swim_view v0 = {0};
	for (int i = 0; i < n; i++) {
		if (i == skip)
			continue;
		struct hora_swim_view v;
		int rank;
		bool paused;
		hora_net_membership_view(l[i], &v, &rank, &paused, NULL, 0);
		if (v.n != want || paused || rank < 0)
			return 0;
		if (!v0.id)
			v0 = v;
		else if (v.id != v0.id)
			return 0;
	}
	return 1;
}

static double wait_views(struct hora_net_membership **l, int n, int skip, int want, double limit_s)
{
	double t0 = hora_bench_now();
	while (hora_bench_now() - t0 < limit_s) {
		if (all_have(l, n, skip, want))
			return (hora_bench_now() - t0) * 1e3;
		usleep(2000);
	}
	return -1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora bench membership [--members N] [--reps R] [--probe-interval-ms 200]\n"
		   "       [--suspect-timeout-ms 1000] [--json F]\n"
		   "       hora bench membership --simulate N ... (simulated network: --simulate N --help)\n");
}

int hora_bench_membership(int argc, char **argv)
{
	static const struct option opts[] = {
		{"members", required_argument, 0, 'n'}, {"reps", required_argument, 0, 'r'},
		{"probe-interval-ms", required_argument, 0, 'p'},
		{"suspect-timeout-ms", required_argument, 0, 's'}, {"json", required_argument, 0, 'j'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--simulate") || !strncmp(argv[i], "--simulate=", 11))
			return hora_bench_membership_sim(argc, argv);
	int n = 16, reps = 3, probe = 200, suspect = 1000, c;
	const char *json = NULL;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n': n = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'p': probe = atoi(optarg); break;
		case 's': suspect = atoi(optarg); break;
		case 'j': json = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (n < 2 || n > 128 || reps < 1 || reps > 50 || probe < 10 || suspect < probe) {
		fprintf(stderr, "hora bench membership: need 2 <= members <= 128, reps 1..50, "
				"probe >= 10, suspect >= probe\n");
		return 2;
	}
	uint8_t secret[32];
	if (getrandom(secret, sizeof(secret), 0) != sizeof(secret))
		return 1;
	double agree[50], detect[50], bps[50], false_susp[50];
	for (int r = 0; r < reps; r++) {
		struct hora_net_loop **l = calloc((size_t)n, sizeof(*l));
		struct hora_net_membership **m = calloc((size_t)n, sizeof(*m));
		struct hora_net_opts o;
		hora_net_opts_default(&o);
		o.secret = secret;
		o.secret_len = sizeof(secret);
		char err[256];
		struct hora_swim_cfg sc;
		hora_swim_cfg_default(&sc);
		sc.probe_interval_ms = probe;
		sc.ping_timeout_ms = probe * 2 / 5;
		sc.suspect_timeout_ms = suspect;
		sc.min_members = n;
		struct hora_swim_addr seed = {0};
		double t0 = hora_bench_now();
		for (int i = 0; i < n; i++) {
			uint16_t port;
			if (hora_net_loop_create(&o, &l[i], err, sizeof(err)) ||
			    hora_net_membership_create(l[i], &sc, "127.0.0.1", 0, &port, &seed, i ? 1 : 0,
						       &m[i], err, sizeof(err))) {
				fprintf(stderr, "hora bench membership: member %d: %s\n", i, err);
				return 1;
			}
			if (!i)
				hora_net_swim_addr("127.0.0.1:0", &seed), seed.port = port;
		}
		double a = wait_views(m, n, -1, n, 60);
		agree[r] = a < 0 ? -1 : (hora_bench_now() - t0) * 1e3; /* from the first start */
		/* quiet window: traffic per member, once the join-time gossip (each
		 * update sent lambda*log2(N+1) times) has drained */
		usleep(5000000);
		struct hora_swim_stats s0, s1;
		uint64_t b0 = 0, b1 = 0, f0 = 0, f1 = 0;
		for (int i = 0; i < n; i++) {
			hora_net_membership_stats(m[i], &s0);
			b0 += s0.sent_bytes;
			f0 += s0.suspicions;
		}
		double w0 = hora_bench_now();
		usleep(3000000);
		for (int i = 0; i < n; i++) {
			hora_net_membership_stats(m[i], &s1);
			b1 += s1.sent_bytes;
			f1 += s1.suspicions;
		}
		false_susp[r] = (double)(f1 - f0);
		bps[r] = (double)(b1 - b0) / (hora_bench_now() - w0) / n;
		/* a crash: the last member's loop goes away without a word */
		int victim = n - 1;
		hora_net_membership_destroy(m[victim]);
		hora_net_loop_destroy(l[victim]);
		m[victim] = NULL;
		l[victim] = NULL;
		double t1 = hora_bench_now();
		double d = wait_views(m, n - 1, -1, n - 1, 30);
		detect[r] = d < 0 ? -1 : (hora_bench_now() - t1) * 1e3;
		for (int i = 0; i < n; i++) {
			hora_net_membership_destroy(m[i]);
			hora_net_loop_destroy(l[i]);
		}
		free(m);
		free(l);
		fprintf(stderr, "  rep %d: agree %.0f ms, detect+agree %.0f ms, %.0f B/s per member, "
				"%.0f false suspicions in the quiet 3 s\n",
			r, agree[r], detect[r], bps[r], false_susp[r]);
	}
	double ma = hora_bench_median(agree, reps), md = hora_bench_median(detect, reps),
	       mb = hora_bench_median(bps, reps);
	/* the tail matters for a failure detector: the worst rep, -1 if any
	 * rep saw no view without the victim at all */
	double dmax = 0;
	for (int r = 0; r < reps; r++)
		dmax = detect[r] < 0 || dmax < 0 ? -1 : detect[r] > dmax ? detect[r] : dmax;
	printf("# hora bench membership: %d members (threads, own loop + UDP socket each) on 127.0.0.1, "
	       "T=%d ms, suspect=%d ms, %d reps\n", n, probe, suspect, reps);
	printf("%8s %12s %14s %14s %22s\n", "members", "agree_ms", "detect_ms", "detect_max_ms",
	       "bytes_per_s_per_member");
	printf("%8d %12.0f %14.0f %14.0f %22.0f\n", n, ma, md, dmax, mb);
	if (json) {
		FILE *f = hora_bench_json_open(json);
		if (f) {
			fprintf(f, "{\"members\":%d,\"probe_interval_ms\":%d,\"suspect_timeout_ms\":%d,"
				   "\"reps\":%d,\"agree_ms\":%.1f,\"detect_ms\":%.1f,\"detect_max_ms\":%.1f,"
				   "\"bytes_per_s_per_member\":%.1f}\n",
				n, probe, suspect, reps, ma, md, dmax, mb);
			hora_bench_json_close(f);
		}
	}
	return ma < 0 || md < 0 || dmax < 0 ? 1 : 0;
}
