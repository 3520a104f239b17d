/* p2p.c - `hora bench p2p`: point-to-point latency and bandwidth of the
 * transport between two processes.
 *
 *   hora bench p2p --mode latency|bandwidth [--sizes 8:64M] [--sockets K]
 *                  [--reps R] [--json F] [--send-zc] [--chunk BYTES]
 *                  [--role server --listen IP:PORT | --role client --connect IP:PORT]
 *
 * Without --role it forks a server and measures over loopback. The client
 * tells the server what comes next with a 24-byte control message.
 * Latency: ping-pong driven from completion callbacks on the comm thread
 * (one io_uring_enter per hop, no thread hand-off); one-way = RTT/2,
 * median and p99 over the iterations. Bandwidth: a window of 4 messages in
 * flight from the client, then a 1-byte ack; GB/s = 1e9 B/s; median of reps.
 * Secret: HORA_SECRET (or a random one shared with the forked server).
 */
#include "bench.h"
#include "core/env.h"
#include "net/transport/handshake.h"
#include "net/transport/transport.h"
#include "net/util/hostport.h"
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

enum { CTL_LAT = 1, CTL_BW = 2, CTL_END = 3 };
struct ctl {
	uint64_t mode, size, iters;
};

static int die(const char *what, const char *err)
{
	fprintf(stderr, "hora bench p2p: %s: %s\n", what, err);
	return 1;
}

static int xfer(struct hora_net_peer *p, void *buf, size_t len, int send, char *err, size_t n)
{
	struct hora_net_req *r;
	int rc = send ? hora_net_isend(p, buf, len, NULL, NULL, &r)
		      : hora_net_irecv(p, buf, len, NULL, NULL, &r);
	if (rc)
		return snprintf(err, n, "%s", strerror(-rc)), rc;
	return hora_net_wait(r, err, n);
}

/* ---- ping-pong on the comm thread ---------------------------------------------- */

struct pong {
	struct hora_net_peer *peer;
	uint8_t *buf[2];
	size_t size;
	int64_t iters, i;
	int client;
	double *t; /* client: RTT per iteration */
	double t0;
	int status;
	char err[256];
	pthread_mutex_t m;
	pthread_cond_t c;
	int done;
};

static void pong_finish(struct pong *p, int st, const char *err)
{
	pthread_mutex_lock(&p->m);
	if (st && !p->status) {
		p->status = st;
		snprintf(p->err, sizeof(p->err), "%s", err);
	}
	p->done = 1;
	pthread_cond_signal(&p->c);
	pthread_mutex_unlock(&p->m);
}

static void pong_sent(void *arg, int st, const char *err)
{
	if (st)
		pong_finish(arg, st, err);
}

static void pong_recv(void *arg, int st, const char *err)
{
	struct pong *p = arg;
	if (st) {
		pong_finish(p, st, err);
		return;
	}
	uint8_t *b = p->buf[p->i & 1];
	if (p->client) {
		double now = hora_bench_now();
		p->t[p->i] = now - p->t0;
		if (++p->i == p->iters) {
			pong_finish(p, 0, "");
			return;
		}
		p->t0 = now;
		hora_net_irecv(p->peer, p->buf[p->i & 1], p->size, pong_recv, p, NULL);
		hora_net_isend(p->peer, b, p->size, pong_sent, p, NULL);
		return;
	}
	/* server: echo, and be ready for the next one */
	if (++p->i < p->iters)
		hora_net_irecv(p->peer, p->buf[p->i & 1], p->size, pong_recv, p, NULL);
	hora_net_isend(p->peer, b, p->size, pong_sent, p, NULL);
	if (p->i == p->iters)
		pong_finish(p, 0, "");
}

static int pingpong(struct hora_net_peer *peer, size_t size, int64_t iters, int client, double *t,
		    char *err, size_t errlen)
{
	struct pong p = {.peer = peer, .size = size, .iters = iters, .client = client, .t = t};
	p.buf[0] = calloc(1, size ? size : 1);
	p.buf[1] = calloc(1, size ? size : 1);
	pthread_mutex_init(&p.m, NULL);
	pthread_cond_init(&p.c, NULL);
	int rc = hora_net_irecv(peer, p.buf[0], size, pong_recv, &p, NULL);
	if (!rc && client) {
		p.t0 = hora_bench_now();
		rc = hora_net_isend(peer, p.buf[1], size, pong_sent, &p, NULL);
	}
	if (rc)
		return snprintf(err, errlen, "%s", strerror(-rc)), rc;
	pthread_mutex_lock(&p.m);
	while (!p.done)
		pthread_cond_wait(&p.c, &p.m);
	pthread_mutex_unlock(&p.m);
	if (p.status)
		snprintf(err, errlen, "%s", p.err);
	usleep(1000); /* let the last echo's send completion run before freeing */
	free(p.buf[0]);
	free(p.buf[1]);
	return p.status;
}

/* ---- server ---------------------------------------------------------------------- */

static int serve(struct hora_net_peer *p)
{
	char err[256];
	uint8_t *buf = NULL;
	size_t cap = 0;
	for (;;) {
		struct ctl c;
		if (xfer(p, &c, sizeof(c), 0, err, sizeof(err)))
			return die("control", err);
		if (c.mode == CTL_END)
			return 0;
		if (c.mode == CTL_LAT) {
			if (pingpong(p, c.size, (int64_t)c.iters, 0, NULL, err, sizeof(err)))
				return die("ping-pong", err);
			continue;
		}
		if (c.size > cap) {
			free(buf);
			buf = malloc(c.size);
			cap = c.size;
		}
		struct hora_net_req *r[4] = {0};
		for (uint64_t i = 0; i < c.iters; i++) { /* keep 4 receives posted */
			if (r[i & 3] && hora_net_wait(r[i & 3], err, sizeof(err)))
				return die("recv", err);
			if (hora_net_irecv(p, buf, c.size, NULL, NULL, &r[i & 3]))
				return die("recv", "post failed");
		}
		for (int k = 0; k < 4; k++)
			if (r[k] && hora_net_wait(r[k], err, sizeof(err)))
				return die("recv", err);
		uint8_t ack = 1;
		if (xfer(p, &ack, 1, 1, err, sizeof(err)))
			return die("ack", err);
	}
}

/* ---- client ---------------------------------------------------------------------- */

static int run_client(struct hora_net_peer *p, int lat, size_t lo, size_t hi, int reps,
		      FILE *json, const char *setup, int sockets)
{
	char err[256];
	uint8_t *buf = NULL;
	printf("# hora bench p2p: mode %s, setup %s, sockets %d, peer %s, %d reps\n",
	       lat ? "latency" : "bandwidth", setup, sockets, hora_net_peer_name(p), reps);
	if (lat)
		printf("%12s %10s %12s %12s\n", "size_bytes", "iters", "time_us", "p99_us");
	else
		printf("%12s %10s %12s %12s\n", "size_bytes", "iters", "time_us", "gbps");
	if (json)
		fprintf(json, "[");
	int first = 1;
	for (size_t sz = lo; sz <= hi; sz = sz < 64 ? sz * 8 : sz * 4) {
		double med_us, p99_us = 0, gbps = 0;
		int64_t iters;
		if (lat) {
			iters = sz <= 65536 ? 5000 : sz <= (1 << 20) ? 500 : 50;
			double *t = malloc(sizeof(double) * (size_t)iters);
			struct ctl c = {CTL_LAT, sz, (uint64_t)(iters + iters / 10)};
			double *w = malloc(sizeof(double) * (size_t)c.iters);
			if (xfer(p, &c, sizeof(c), 1, err, sizeof(err)) ||
			    pingpong(p, sz, (int64_t)c.iters, 1, w, err, sizeof(err)))
				return die("ping-pong", err);
			memcpy(t, w + iters / 10, sizeof(double) * (size_t)iters); /* drop warm-up */
			free(w);
			hora_bench_median(t, (int)iters);
			med_us = t[iters / 2] * 0.5e6;
			p99_us = t[(int64_t)(iters * 0.99)] * 0.5e6;
			free(t);
		} else {
			iters = (int64_t)((256u << 20) / sz);
			if (iters < 8)
				iters = 8;
			if (!buf)
				buf = calloc(1, hi);
			double *v = malloc(sizeof(double) * (size_t)reps);
			for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
				struct ctl c = {CTL_BW, sz, (uint64_t)iters};
				if (xfer(p, &c, sizeof(c), 1, err, sizeof(err)))
					return die("control", err);
				double t0 = hora_bench_now();
				struct hora_net_req *q[4] = {0};
				for (int64_t i = 0; i < iters; i++) {
					if (q[i & 3] && hora_net_wait(q[i & 3], err, sizeof(err)))
						return die("send", err);
					if (hora_net_isend(p, buf, sz, NULL, NULL, &q[i & 3]))
						return die("send", "post failed");
				}
				for (int k = 0; k < 4; k++)
					if (q[k] && hora_net_wait(q[k], err, sizeof(err)))
						return die("send", err);
				uint8_t ack;
				if (xfer(p, &ack, 1, 0, err, sizeof(err)))
					return die("ack", err);
				if (r >= 0)
					v[r] = hora_bench_now() - t0;
			}
			double t = hora_bench_median(v, reps);
			free(v);
			med_us = t / (double)iters * 1e6;
			gbps = (double)sz * (double)iters / t / 1e9;
		}
		if (lat)
			printf("%12zu %10lld %12.2f %12.2f\n", sz, (long long)iters, med_us, p99_us);
		else
			printf("%12zu %10lld %12.2f %12.4f\n", sz, (long long)iters, med_us, gbps);
		fflush(stdout);
		if (json) {
			if (lat)
				fprintf(json, "%s\n {\"size_bytes\":%zu,\"time_us\":%.3f,\"oneway_p50_us\":%.3f,"
					      "\"oneway_p99_us\":%.3f,\"iters\":%lld}",
					first ? "" : ",", sz, med_us, med_us, p99_us, (long long)iters);
			else
				fprintf(json, "%s\n {\"size_bytes\":%zu,\"time_us\":%.3f,\"gbps\":%.5f,"
					      "\"iters\":%lld}",
					first ? "" : ",", sz, med_us, gbps, (long long)iters);
			first = 0;
		}
	}
	if (json)
		fprintf(json, "\n]\n");
	struct ctl end = {CTL_END, 0, 0};
	xfer(p, &end, sizeof(end), 1, err, sizeof(err));
	free(buf);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora bench p2p --mode latency|bandwidth [--sizes 8:64M] [--sockets K]\n"
		   "       [--reps R] [--json F] [--send-zc] [--chunk BYTES]\n"
		   "       [--role server --listen IP:PORT | --role client --connect IP:PORT]\n"
		   "  Without --role: forks a server and runs over loopback.\n"
		   "  Secret: HORA_SECRET (random when forking a local server).\n");
}

/* Listen on host:port, announce the bound port (on notify_fd when >= 0,
 * else on stdout), serve one peer. Returns the exit status. */
static int run_server(const struct hora_net_opts *o, const char *host, uint16_t port, int notify_fd)
{
	char err[256];
	struct hora_net_loop *l;
	struct hora_net_peer *p;
	if (hora_net_loop_create(o, &l, err, sizeof(err)) ||
	    hora_net_listen(l, host, port, &port, err, sizeof(err)))
		return die("listen", err);
	if (notify_fd >= 0) {
		if (write(notify_fd, &port, sizeof(port)) != sizeof(port))
			return 1;
	} else {
		printf("listening on %s:%u\n", host, port);
		fflush(stdout);
	}
	if (hora_net_accept(l, 60000, &p, err, sizeof(err)))
		return die("accept", err);
	int rc = serve(p);
	hora_net_peer_close(p);
	hora_net_loop_destroy(l);
	return rc;
}

int hora_bench_p2p(int argc, char **argv)
{
	static const struct option opts[] = {
		{"mode", required_argument, 0, 'm'}, {"sizes", required_argument, 0, 's'},
		{"sockets", required_argument, 0, 'k'}, {"reps", required_argument, 0, 'r'},
		{"json", required_argument, 0, 'j'}, {"send-zc", no_argument, 0, 'z'},
		{"chunk", required_argument, 0, 'c'}, {"role", required_argument, 0, 'R'},
		{"listen", required_argument, 0, 'l'}, {"connect", required_argument, 0, 'C'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	int lat = -1, sockets = 1, reps = 5, zc = 0, c;
	size_t lo = 0, hi = 0, chunk = 0;
	const char *json = NULL, *role = NULL, *listen_at = NULL, *connect_to = NULL;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': lat = !strcmp(optarg, "latency") ? 1 : !strcmp(optarg, "bandwidth") ? 0 : -2; break;
		case 's': {
			const char *colon = strchr(optarg, ':');
			lo = hora_bench_size(optarg);
			hi = colon ? hora_bench_size(colon + 1) : lo;
			break;
		}
		case 'k': sockets = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'j': json = optarg; break;
		case 'z': zc = 1; break;
		case 'c': chunk = hora_bench_size(optarg); break;
		case 'R': role = optarg; break;
		case 'l': listen_at = optarg; break;
		case 'C': connect_to = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (lat < 0 && (!role || strcmp(role, "server"))) {
		usage(stderr);
		return 2;
	}
	if (!lo) {
		lo = lat == 1 ? 8 : 64 << 10;
		hi = lat == 1 ? 1 << 20 : 64 << 20;
	}
	if (lo > hi || reps < 1 || sockets < 1 || sockets > 64) {
		fprintf(stderr, "hora bench p2p: bad --sizes, --reps or --sockets\n");
		return 2;
	}
	struct hora_net_opts o;
	hora_net_opts_default(&o);
	o.sockets_per_peer = sockets;
	o.send_zc = zc;
	if (chunk)
		o.chunk_bytes = chunk;
	uint8_t secret[HORA_NET_SECRET_MAX];
	char err[256];
	int slen = hora_net_secret_load(NULL, hora_env_secret(), secret, sizeof(secret), err,
					sizeof(err), NULL, 0);
	if (slen < 0 && role)
		return die("secret", err);
	if (slen < 0) { /* local run: a fresh random secret for both processes */
		slen = 32;
		if (getrandom(secret, 32, 0) != 32)
			return die("secret", "getrandom failed");
	}
	o.secret = secret;
	o.secret_len = (size_t)slen;

	char host[128] = "127.0.0.1";
	uint16_t port = 0;
	if (role && !strcmp(role, "server")) {
		if (!listen_at || hora_hostport_split(listen_at, host, sizeof(host), &port))
			return die("server", "--listen IP:PORT is required");
		return run_server(&o, host, port, -1);
	}
	pid_t pid = -1;
	if (!role) {
		int pfd[2];
		if (pipe(pfd))
			return die("pipe", strerror(errno));
		pid = fork();
		if (pid == 0) {
			close(pfd[0]);
			o.node_id = 1;
			_exit(run_server(&o, "127.0.0.1", 0, pfd[1]));
		}
		close(pfd[1]);
		if (pid < 0 || read(pfd[0], &port, sizeof(port)) != sizeof(port))
			return die("server", "did not start");
		close(pfd[0]);
	} else if (!connect_to || hora_hostport_split(connect_to, host, sizeof(host), &port)) {
		return die("client", "--connect IP:PORT is required");
	}
	o.node_id = 2;
	struct hora_net_loop *l;
	struct hora_net_peer *p;
	if (hora_net_loop_create(&o, &l, err, sizeof(err)) ||
	    hora_net_connect(l, host, port, 30000, &p, err, sizeof(err))) {
		if (pid > 0)
			kill(pid, SIGTERM);
		return die("connect", err);
	}
	FILE *jf = json ? hora_bench_json_open(json) : NULL;
	int rc = run_client(p, lat, lo, hi, reps, jf, role ? "hosts" : "lo (forked server)", sockets);
	hora_bench_json_close(jf);
	hora_net_peer_close(p);
	hora_net_loop_destroy(l);
	if (pid > 0) {
		int st;
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
	}
	return rc;
}
