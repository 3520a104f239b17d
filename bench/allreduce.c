/* allreduce.c - `hora bench allreduce --ranks N`: nccl-tests-style table.
 *
 * Forks N-1 ranks (this process is rank 0); every rank joins one
 * communicator over 127.0.0.1 (or the addresses of --hosts), then for each
 * size: one verification call (exact integer-valued sums checked on every
 * rank), 3 warm-up calls, then `iters` timed calls with one timestamp pair
 * per call and no barrier between calls. The per-call times are reduced
 * with MAX across ranks (as the anchors do) and the median is reported:
 *   size count type redop time_us algbw_GBps busbw_GBps wrong
 * busbw = algbw * 2(N-1)/N (nccl-tests). Iterations per size: about 200 ms.
 */
#include "net/coll.h"
#include "net/handshake.h"
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t parse_size(const char *s)
{
	char *e;
	double v = strtod(s, &e);
	if (*e == 'k' || *e == 'K')
		v *= 1024;
	else if (*e == 'm' || *e == 'M')
		v *= 1 << 20;
	else if (*e == 'g' || *e == 'G')
		v *= 1 << 30;
	return (size_t)v;
}

static int run_rank(int rank, int n, const char *const *addrs, const uint8_t *secret, size_t slen,
		    size_t lo, size_t hi, int algo, size_t segment, FILE *out, FILE *json)
{
	struct hora_net_comm_cfg cfg = {.rank = rank, .nranks = n, .addrs = addrs,
					.connect_timeout_ms = 30000};
	hora_net_opts_default(&cfg.opts);
	cfg.opts.secret = secret;
	cfg.opts.secret_len = slen;
	cfg.segment_bytes = segment;
	struct hora_net_comm *c;
	char err[512];
	if (hora_net_comm_create(&cfg, &c, err, sizeof(err))) {
		fprintf(stderr, "hora bench allreduce: rank %d: %s\n", rank, err);
		return 1;
	}
	hora_net_comm_set_algo(c, algo);
	float *buf = malloc(hi > 4 ? hi : 4);
	double *t = malloc(sizeof(double) * 1000);
	if (out) {
		fprintf(out, "# hora bench allreduce: %d ranks, 127.0.0.1, f32 sum, in place, %s\n", n,
			algo == 1 ? "ring forced" : algo == 2 ? "doubling forced" : "auto algorithm");
		fprintf(out, "%12s %12s %6s %6s %12s %12s %12s %6s\n", "size", "count", "type", "redop",
			"time_us", "algbw_GBps", "busbw_GBps", "wrong");
	}
	if (json)
		fprintf(json, "[");
	int first = 1, rc = 0;
	for (size_t sz = lo; sz <= hi; sz = sz < 16 ? 16 : sz * 4) {
		size_t count = sz / 4;
		/* verification: value(i, rank) = (i % 7) + rank, sum exact */
		for (size_t i = 0; i < count; i++)
			buf[i] = (float)(i % 7) + (float)rank;
		if (hora_net_allreduce(c, buf, buf, count, HORA_NET_F32, HORA_NET_SUM)) {
			fprintf(stderr, "rank %d: %s\n", rank, hora_net_comm_error(c));
			rc = 1;
			break;
		}
		double wrong = 0;
		for (size_t i = 0; i < count; i++)
			wrong += buf[i] != (float)(n * (int)(i % 7) + n * (n - 1) / 2);
		hora_net_allreduce(c, &wrong, &wrong, 1, HORA_NET_F64, HORA_NET_SUM);
		int iters = (int)(2e8 / (double)(sz > 1024 ? sz : 1024) / 2);
		iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
		for (int w = 0; w < 3; w++)
			hora_net_allreduce(c, buf, buf, count, HORA_NET_F32, HORA_NET_SUM);
		for (int i = 0; i < iters; i++) {
			double t0 = hora_bench_now();
			if (hora_net_allreduce(c, buf, buf, count, HORA_NET_F32, HORA_NET_SUM)) {
				rc = 1;
				break;
			}
			t[i] = hora_bench_now() - t0;
		}
		if (rc)
			break;
		hora_net_allreduce(c, t, t, (size_t)iters, HORA_NET_F64, HORA_NET_MAX);
		double med = hora_bench_median(t, iters) * 1e6;
		double algbw = (double)sz / med / 1e3, busbw = algbw * 2.0 * (n - 1) / n;
		if (out) {
			fprintf(out, "%12zu %12zu %6s %6s %12.2f %12.4f %12.4f %6.0f\n", sz, count, "f32",
				"sum", med, algbw, busbw, wrong);
			fflush(out);
		}
		if (json) {
			fprintf(json, "%s\n {\"size_bytes\":%zu,\"time_us\":%.3f,\"algbw_gbps\":%.5f,"
				      "\"busbw_gbps\":%.5f,\"wrong\":%.0f}",
				first ? "" : ",", sz, med, algbw, busbw, wrong);
			first = 0;
		}
	}
	if (json)
		fprintf(json, "\n]\n");
	free(buf);
	free(t);
	hora_net_comm_destroy(c);
	return rc;
}

int hora_bench_allreduce(int argc, char **argv);
int hora_bench_allreduce(int argc, char **argv)
{
	static const struct option opts[] = {
		{"ranks", required_argument, 0, 'n'}, {"sizes", required_argument, 0, 's'},
		{"json", required_argument, 0, 'j'}, {"algo", required_argument, 0, 'a'},
		{"port", required_argument, 0, 'p'}, {"segment", required_argument, 0, 'g'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	int n = 2, algo = 0, port = 0, c;
	size_t lo = 8, hi = 64 << 20, segment = 0;
	const char *json = NULL;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n': n = atoi(optarg); break;
		case 's': {
			const char *colon = strchr(optarg, ':');
			lo = parse_size(optarg);
			hi = colon ? parse_size(colon + 1) : lo;
			break;
		}
		case 'j': json = optarg; break;
		case 'a': algo = !strcmp(optarg, "ring") ? 1 : !strcmp(optarg, "doubling") ? 2 : 0; break;
		case 'p': port = atoi(optarg); break;
		case 'g': segment = parse_size(optarg); break;
		case 'h':
			printf("usage: hora bench allreduce [--ranks N] [--sizes 8:64M] [--algo auto|ring|doubling]\n"
			       "       [--segment BYTES] [--json F] [--port BASE]\n");
			return 0;
		default: return 2;
		}
	}
	if (n < 1 || n > 64 || lo < 4 || lo > hi) {
		fprintf(stderr, "hora bench allreduce: need 1 <= ranks <= 64 and 4 <= sizes\n");
		return 2;
	}
	uint8_t secret[32];
	if (getrandom(secret, sizeof(secret), 0) != sizeof(secret))
		return 1;
	if (!port)
		port = 10000 + (int)((getpid() * 31 + time(NULL)) % 20000);
	char (*addr)[32] = calloc((size_t)n, 32);
	const char **addrs = calloc((size_t)n, sizeof(*addrs));
	for (int i = 0; i < n; i++) {
		snprintf(addr[i], 32, "127.0.0.1:%d", port + i);
		addrs[i] = addr[i];
	}
	pid_t *pids = calloc((size_t)n, sizeof(pid_t));
	for (int r = 1; r < n; r++) {
		pids[r] = fork();
		if (pids[r] == 0)
			_exit(run_rank(r, n, addrs, secret, sizeof(secret), lo, hi, algo, segment, NULL, NULL));
	}
	FILE *jf = json ? hora_bench_json_open(json) : NULL;
	int rc = run_rank(0, n, addrs, secret, sizeof(secret), lo, hi, algo, segment, stdout, jf);
	hora_bench_json_close(jf);
	for (int r = 1; r < n; r++) {
		int st;
		waitpid(pids[r], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
	}
	free(pids);
	free(addr);
	free(addrs);
	return rc;
}
