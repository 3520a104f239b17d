/* worker.c - `hora seed` and `hora worker`: a process that joins the cluster
 * through seeds, keeps SWIM membership on its comm thread, and follows the
 * agreed views. A worker started from a cluster file with a train section
 * trains it together with the other workers (hora_init +
 * hora_train_run_comm); otherwise, or with --until-full-view, it runs the
 * membership only and prints every view it installs with its rank.
 * SIGTERM/SIGINT leave gracefully.
 *
 * Secret: cluster.secret_file (--secret-file) or HORA_SECRET, never argv.
 */
#include "cluster.h"
#include "env.h"
#include "hora.h"
#include "net/handshake.h"
#include "net/hora_net.h"

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEEDS 16

/* Set by the handler; the main loop looks at it at least every 100 ms. (A
 * handler, not sigwait: threads that exist before main runs, such as
 * OpenBLAS's, would otherwise take the signal with its default action.) */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
	g_signal = sig;
}

struct node_opts {
	const char *listen;
	char listen_buf[96];
	const char *config;
	char secret_buf[1024];
	int proc;        /* global worker index in the cluster file, -1 = from the environment */
	bool until_full; /* trivial job: exit 0 once a view with every worker is installed */
	struct hora_swim_addr seeds[MAX_SEEDS];
	int nseeds;
	const char *secret_file;
	struct hora_swim_cfg swim;
	int join_timeout_ms;
	int run_ms; /* 0 = until a signal */
	int train;  /* 1 --train, 0 --no-train, -1 = if the file has a train section */
	const char *sets[64];
	int nsets;
	const char *metrics, *timeline;
	bool resume;
	int cpu; /* >= 0: pin this process to that CPU (cluster.bind: core) */
};

static int parse_common(int c, const char *arg, struct node_opts *o, const char *prog)
{
	switch (c) {
	case 'l':
		o->listen = arg;
		return 0;
	case 's':
		if (o->nseeds == MAX_SEEDS || hora_net_swim_addr(arg, &o->seeds[o->nseeds])) {
			fprintf(stderr, "%s: --seed wants IPv4:PORT (got '%s')\n", prog, arg);
			return 2;
		}
		o->nseeds++;
		return 0;
	case 'k':
		o->secret_file = arg;
		return 0;
	case 'p':
		o->swim.probe_interval_ms = atoi(arg);
		return 0;
	case 'S':
		o->swim.suspect_timeout_ms = atoi(arg);
		return 0;
	case 't':
		o->run_ms = atoi(arg);
		return 0;
	}
	return 1;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_view(struct hora_net_loop *loop, const char *who)
{
	struct hora_swim_view v;
	int rank;
	bool paused;
	char why[128];
	hora_net_membership_view(loop, &v, &rank, &paused, why, sizeof(why));
	if (!v.id && !paused)
		return;
	printf("%s: view %llu: %d members, rank %d%s%s [", who, (unsigned long long)v.id, v.n, rank,
	       paused ? ", paused: " : "", paused ? why : "");
	for (int i = 0; i < v.n; i++)
		printf("%s%016llx", i ? " " : "", (unsigned long long)v.uids[i]);
	/* Wall-clock install time, so that a test or an operator can time
	 * failure detection against the moment of a kill without counting how
	 * late they read the log. */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	printf("] at_ms=%lld\n", (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
	fflush(stdout);
}

static int run_node(struct node_opts *o, enum hora_swim_role role, const char *prog)
{
	uint8_t secret[HORA_NET_SECRET_MAX];
	char err[256];
	int slen = hora_net_secret_load(o->secret_file, secret, sizeof(secret), err, sizeof(err));
	if (slen < 0) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	char host[64] = "0.0.0.0";
	uint16_t port = 0;
	if (o->listen) {
		struct hora_swim_addr a;
		if (hora_net_swim_addr(o->listen, &a)) {
			fprintf(stderr, "%s: --listen wants IPv4:PORT (got '%s')\n", prog, o->listen);
			return 2;
		}
		snprintf(host, sizeof(host), "%.*s", (int)(strrchr(o->listen, ':') - o->listen), o->listen);
		port = a.port;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct hora_net_opts no;
	hora_net_opts_default(&no);
	no.secret = secret;
	no.secret_len = (size_t)slen;
	struct hora_net_loop *loop;
	if (hora_net_loop_create(&no, &loop, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 1;
	}
	o->swim.role = role;
	uint16_t bound;
	if (hora_net_membership_start(loop, &o->swim, host, port, &bound, o->seeds, o->nseeds, err,
				      sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		hora_net_loop_destroy(loop);
		return 2;
	}
	char who[96];
	snprintf(who, sizeof(who), "%s %s:%u", role == HORA_SWIM_SEED ? "seed" : "worker", host, bound);
	printf("%s: up (membership on UDP port %u)\n", who, bound);
	fflush(stdout);

	int rc = 0;
	int64_t start = mono_ms();
	bool joined_said = o->nseeds == 0;
	uint64_t known = 0;
	bool known_paused = false;
	int known_alive = 1;
	for (;;) {
		int sig = g_signal;
		if (sig) {
			printf("%s: leaving (signal %d)\n", who, sig);
			fflush(stdout);
			hora_net_membership_leave(loop);
			break;
		}
		if (o->run_ms && mono_ms() - start > o->run_ms)
			break;
		if (!joined_said) {
			if (hora_net_membership_joined(loop)) {
				joined_said = true;
				printf("%s: joined\n", who);
				fflush(stdout);
			} else if (mono_ms() - start > o->join_timeout_ms) {
				fprintf(stderr, "%s: no authenticated answer from %d seed(s) within %d ms "
						"(seed down or wrong cluster secret?)\n",
					who, o->nseeds, o->join_timeout_ms);
				rc = 1;
				break;
			}
		}
		hora_net_membership_wait(loop, known, known_paused, 100);
		struct hora_swim_view v;
		int rank;
		bool paused;
		hora_net_membership_view(loop, &v, &rank, &paused, NULL, 0);
		int alive = hora_net_membership_alive(loop);
		if (role == HORA_SWIM_SEED && alive != known_alive) {
			known_alive = alive;
			printf("%s: %d members alive\n", who, alive);
			fflush(stdout);
		}
		if (v.id != known || paused != known_paused) {
			known = v.id;
			known_paused = paused;
			if (role == HORA_SWIM_WORKER)
				print_view(loop, who);
		}
		if (o->until_full && rank >= 0 && v.n >= o->swim.min_members) {
			printf("%s: rank %d of %d in view %llu\n", who, rank, v.n,
			       (unsigned long long)v.id);
			fflush(stdout);
			/* Linger as a member (answering pings, acking COMMIT resends)
			 * so that slower members install the same view, then go
			 * without LEAVE: a LEAVE would shrink the view of a member that
			 * has not printed yet, and it would never see the full one. */
			int64_t t_end = mono_ms() + 2000;
			while (mono_ms() < t_end && !g_signal)
				usleep(100000);
			break;
		}
	}
	hora_net_loop_destroy(loop);
	return rc;
}

/* The job of a launched worker: the train section of the cluster file,
 * distributed over every worker (hora_init, hora_train_run_comm). */
static int run_training(struct node_opts *o, const char *prog)
{
	struct hora_train_config tc;
	hora_train_config_defaults(&tc);
	char err[2048];
	int nkeys = 0;
	if (hora_config_load_train(&tc, o->config, &nkeys, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	if (!nkeys && o->train < 0)
		return run_node(o, HORA_SWIM_WORKER, prog); /* no train section: membership only */
	for (int i = 0; i < o->nsets; i++) {
		char key[256];
		const char *eq = strchr(o->sets[i], '=');
		if (!eq || (size_t)(eq - o->sets[i]) >= sizeof(key)) {
			fprintf(stderr, "%s: --set wants KEY=VALUE (got '%s')\n", prog, o->sets[i]);
			return 2;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
		if (strncmp(key, "train.", 6))
			continue; /* cluster keys: applied by hora launch and hora_init's file */
		if (hora_config_set(&tc, key, eq + 1, err, sizeof(err))) {
			fprintf(stderr, "%s: --set: %s\n", prog, err);
			return 2;
		}
	}
	if (o->metrics)
		snprintf(tc.metrics, sizeof(tc.metrics), "%s", o->metrics);
	if (o->timeline)
		snprintf(tc.timeline, sizeof(tc.timeline), "%s", o->timeline);
	else if (getenv("HORA_TIMELINE") && *getenv("HORA_TIMELINE"))
		snprintf(tc.timeline, sizeof(tc.timeline), "%s", getenv("HORA_TIMELINE"));
	if (o->resume)
		tc.resume = 1;
	const char *pg = getenv("HORA_PROGRESS"); /* hora launch on a terminal: bar */
	if (pg && !strcmp(pg, "bar"))
		tc.progress = 1;
	else if (pg && !strcmp(pg, "lines"))
		tc.progress = 0;
	struct hora_init_opts io;
	hora_init_opts_defaults(&io);
	if (hora_env_init_opts(&io, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	io.cluster_file = o->config;
	io.proc = o->proc;
	struct hora_comm *c;
	if (hora_init_with(&io, &c, err, sizeof(err))) {
		fprintf(stderr, "%s: worker %d: %s\n", prog, o->proc, err);
		return 1;
	}
	struct hora_train_result res;
	int rc = hora_train_run_comm(c, &tc, &res, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "%s: rank %d: %s\n", prog, hora_rank(c), err);
	} else if (hora_rank(c) == 0 && !tc.quiet && hora_size(c) > 1 && res.allreduce_s > 0) {
		printf("gradient averaging: %.2f s on the communication thread, %.0f %% of it hidden "
		       "behind forward/backward\n",
		       res.allreduce_s, 100.0 * res.allreduce_hidden_s / res.allreduce_s);
	}
	hora_train_result_deinit(&res);
	hora_finalize(c);
	if (rc == HORA_ERR_STALL)
		return 3; /* the stall inspector's report is in err, printed above */
	return rc == HORA_ERR_CONFIG || rc == HORA_ERR_DATA || rc == HORA_ERR_MODEL ? 2 : rc ? 1 : 0;
}

static void usage(FILE *f, const char *what)
{
	fprintf(f,
		"usage: hora %s [--config CLUSTER.yaml [--proc G]] [--listen IP:PORT] [--seed IP:PORT]...\n"
		"       [--secret-file F] [--probe-interval-ms 200] [--suspect-timeout-ms 1000]\n"
		"       %s[--run-ms N]\n"
		"       worker only: [--train | --no-train] [--set train.KEY=VALUE]... [--metrics F]\n"
		"       [--timeline F] [--resume]\n"
		"  With --config, worker G (--proc, or SLURM_PROCID / OMPI_COMM_WORLD_RANK / PMI_RANK /\n"
		"  HORA_PROC) of the file binds its node's host at port_base + 1 + G. Flags override\n"
		"  the file. The cluster secret comes from the file's secret_file or HORA_SECRET.\n"
		"  A worker with --config whose file has a train section trains it with every other\n"
		"  worker of the file (unless --until-full-view or --no-train).\n",
		what, strcmp(what, "worker") ? "" : "[--expect N] [--until-full-view] ");
}

static const struct option common_opts[] = {
	{"listen", required_argument, 0, 'l'},
	{"seed", required_argument, 0, 's'},
	{"secret-file", required_argument, 0, 'k'},
	{"probe-interval-ms", required_argument, 0, 'p'},
	{"suspect-timeout-ms", required_argument, 0, 'S'},
	{"run-ms", required_argument, 0, 't'},
	{"expect", required_argument, 0, 'e'},
	{"config", required_argument, 0, 'c'},
	{"proc", required_argument, 0, 'P'},
	{"until-full-view", no_argument, 0, 'u'},
	{"train", no_argument, 0, 'T'},
	{"no-train", no_argument, 0, 'N'},
	{"set", required_argument, 0, 'V'},
	{"metrics", required_argument, 0, 'M'},
	{"timeline", required_argument, 0, 'L'},
	{"resume", no_argument, 0, 'R'},
	{"help", no_argument, 0, 'h'},
	{0, 0, 0, 0},
};

/* Fill node options from a cluster file: which worker this is, where it
 * listens, the seeds, the secret file and the membership parameters. */
static int apply_cluster(struct node_opts *o, const struct hora_cluster_config *cc,
			 enum hora_swim_role role, const char *prog)
{
	o->swim = cc->membership;
	o->join_timeout_ms = cc->join_timeout_ms;
	snprintf(o->secret_buf, sizeof(o->secret_buf), "%s", cc->secret_file);
	o->secret_file = o->secret_buf[0] ? o->secret_buf : NULL;
	o->nseeds = 0;
	for (int i = 0; i < cc->nseeds && o->nseeds < MAX_SEEDS; i++)
		if (!hora_net_swim_addr(cc->seeds[i], &o->seeds[o->nseeds]))
			o->nseeds++;
	if (role != HORA_SWIM_WORKER)
		return 0;
	char why[256];
	if (o->proc < 0 && hora_env_proc(&o->proc, why, sizeof(why))) {
		fprintf(stderr, "%s: %s\n", prog, why);
		return 2;
	}
	int local, node = hora_cluster_locate(cc, o->proc, &local);
	if (node < 0) {
		fprintf(stderr, "%s: worker %d does not exist: %s has %d workers\n", prog, o->proc,
			cc->file, hora_cluster_size(cc));
		return 2;
	}
	o->swim.uid = hora_cluster_uid(o->proc);
	if (cc->bind) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		o->cpu = (int)(local % (ncpu > 0 ? ncpu : 1));
	}
	snprintf(o->listen_buf, sizeof(o->listen_buf), "%s:%d", cc->nodes[node].host,
		 cc->port_base + 1 + o->proc);
	o->listen = o->listen_buf;
	return 0;
}

static int cmd_node(int argc, char **argv, enum hora_swim_role role)
{
	const char *what = role == HORA_SWIM_SEED ? "seed" : "worker";
	char prog[32];
	snprintf(prog, sizeof(prog), "hora %s", what);
	struct node_opts o = {.join_timeout_ms = 10000, .proc = -1, .train = -1, .cpu = -1};
	hora_swim_cfg_default(&o.swim);
	int c;
	/* pass 1: --config and --proc, so that flags (pass 2) override the file */
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", common_opts, NULL)) != -1) {
		if (c == 'c')
			o.config = optarg;
		if (c == 'P')
			o.proc = atoi(optarg);
	}
	opterr = 1;
	if (o.config) {
		struct hora_cluster_config cc;
		char err[1024];
		hora_cluster_defaults(&cc);
		if (hora_cluster_load(&cc, o.config, err, sizeof(err))) {
			fprintf(stderr, "%s: %s\n", prog, err);
			return 2;
		}
		int rc = apply_cluster(&o, &cc, role, prog);
		if (rc)
			return rc;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "", common_opts, NULL)) != -1) {
		if (c == 'c' || c == 'P')
			continue;
		if (c == 'u') {
			o.until_full = true;
			continue;
		}
		if (c == 'T' || c == 'N') {
			o.train = c == 'T';
			continue;
		}
		if (c == 'V' && o.nsets < 64) {
			o.sets[o.nsets++] = optarg;
			continue;
		}
		if (c == 'M' || c == 'L') {
			*(c == 'M' ? &o.metrics : &o.timeline) = optarg;
			continue;
		}
		if (c == 'R') {
			o.resume = true;
			continue;
		}
		if (c == 'h') {
			usage(stdout, what);
			return 0;
		}
		if (c == 'e' && role == HORA_SWIM_WORKER) {
			o.swim.min_members = atoi(optarg);
			if (o.swim.min_members < 1) {
				fprintf(stderr, "%s: --expect must be a positive integer\n", prog);
				return 2;
			}
			continue;
		}
		int r = c == '?' ? 1 : parse_common(c, optarg, &o, prog);
		if (r == 2)
			return 2;
		if (r) {
			usage(stderr, what);
			return 2;
		}
	}
	if (o.swim.probe_interval_ms < 10 || o.swim.suspect_timeout_ms < o.swim.probe_interval_ms) {
		fprintf(stderr, "%s: need probe_interval_ms >= 10 and suspect_timeout_ms >= it\n", prog);
		return 2;
	}
	if (!o.config || o.swim.ping_timeout_ms >= o.swim.probe_interval_ms)
		o.swim.ping_timeout_ms = o.swim.probe_interval_ms * 2 / 5;
	if (o.cpu >= 0) { /* cluster.bind: core, as mpirun --bind-to core */
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(o.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			fprintf(stderr, "%s: cannot bind to CPU %d: %s\n", prog, o.cpu, strerror(errno));
	}
	if (role == HORA_SWIM_WORKER && o.config && !o.until_full && o.train != 0)
		return run_training(&o, prog);
	return run_node(&o, role, prog);
}

int hora_cmd_seed(int argc, char **argv);
int hora_cmd_seed(int argc, char **argv)
{
	return cmd_node(argc, argv, HORA_SWIM_SEED);
}

int hora_cmd_worker(int argc, char **argv);
int hora_cmd_worker(int argc, char **argv)
{
	return cmd_node(argc, argv, HORA_SWIM_WORKER);
}
