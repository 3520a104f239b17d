/* worker.c - `hora seed` and `hora worker`: a process that joins the cluster
 * through seeds, keeps SWIM membership on its comm thread, and follows the
 * agreed views. A worker started from a cluster file with a train section
 * trains it together with the other workers (hora_init +
 * hora_train_run_comm); otherwise, or with --until-full-view, it runs the
 * membership only and prints every view it installs with its rank.
 * SIGTERM/SIGINT leave gracefully.
 *
 * With --config, every flag and --set acts as its key in the file would
 * (hora_cluster_load_edit: --set in order, then the flags --seed,
 * --secret-file, --probe-interval-ms, --suspect-timeout-ms, --expect);
 * flags that a training job cannot honour (--listen: the others compute
 * this worker's address from the file; --run-ms: a job ends with its
 * epochs) are refused there, as are the training flags on a membership-only
 * run. A worker that has not joined when --run-ms ends exits 1 saying so.
 *
 * Secret: cluster.secret_file (--secret-file) or HORA_SECRET, never argv.
 */
#include "cli.h"
#include "cluster.h"
#include "comm.h"
#include "env.h"
#include "hora.h"
#include "hosts.h"
#include "init.h"
#include "slurm.h"
#include "net/membership/membership.h"
#include "net/transport/handshake.h"
#include "net/transport/transport.h"
#include "net/util/clock.h"
#include "net/util/cpus.h"
#include "net/util/hostport.h"
#include "setarg.h"
#include "cfgkey.h"

#include <errno.h>
#include <pthread.h>
#include <zlib.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEEDS HORA_CLUSTER_MAX_SEEDS
#define MAX_FLAG_KEYS 8

/* Set by the handler; the main loop looks at it at least every 100 ms. (A
 * handler, not sigwait: threads that exist before main runs, such as
 * OpenBLAS's, would otherwise take the signal with its default action.) */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
	g_signal = sig;
}

/* The command line as given, before any file is read. Flags that stand for
 * a key of the cluster file are kept as (flag, key, value) and applied with
 * that key's validation, after the --set arguments. */
struct node_flags {
	const char *config;
	int proc; /* global worker index in the cluster file, -1 = from the environment */
	const char *listen;
	int run_ms; /* 0 = until a signal */
	bool run_ms_given, until_full, resume;
	int train; /* 1 --train, 0 --no-train, -1 = if the file has a train section */
	struct hora_setargs sets;
	const char *metrics, *timeline;
	struct {
		const char *flag, *key, *value;
	} keys[MAX_FLAG_KEYS];
	int nkeys;
	char seeds[MAX_SEEDS * 80]; /* every --seed, comma-joined: cluster.seeds */
	int nseeds;
};

/* What the node runs with: the file, --set and flags applied. */
struct node_opts {
	char host[64];
	uint16_t port;
	struct hora_swim_addr seeds[MAX_SEEDS];
	int nseeds;
	char secret_file[1024]; /* "" = HORA_SECRET */
	struct hora_swim_cfg swim;
	int join_timeout_ms;
	int run_ms;
	int proc;
	int cpu; /* >= 0: pin this process to that CPU (cluster.bind: core) */
	bool until_full; /* trivial job: exit 0 once a view with every worker is installed */
};

static void usage(FILE *f, const char *what)
{
	fprintf(f,
		"usage: hora %s [--config CLUSTER.yaml [--proc G] [--set KEY=VALUE]...] [--listen IP:PORT]\n"
		"       [--seed IP:PORT]... [--secret-file F] [--probe-interval-ms 200]\n"
		"       [--suspect-timeout-ms 1000] %s[--run-ms N]\n"
		"       worker only: [--train | --no-train] [--metrics F] [--timeline F] [--resume]\n"
		"  With --config, worker G (--proc, or HORA_PROC / SLURM_PROCID / OMPI_COMM_WORLD_RANK /\n"
		"  PMI_RANK / JOB_COMPLETION_INDEX) of the file binds its node's host (an IPv4 address\n"
		"  or a name, looked up) at port_base + 1 + G. --set KEY=VALUE\n"
		"  (in order), then --seed, --secret-file, --probe-interval-ms, --suspect-timeout-ms\n"
		"  and --expect act as their keys in the file. The cluster secret comes from the\n"
		"  file's secret_file or HORA_SECRET.\n"
		"  Without --config nor --listen, a worker takes the file from HORA_CONFIG (as\n"
		"  `hora run -np 4 hora worker` sets it). Under srun, a file without cluster.nodes (or\n"
		"  none) takes the nodes, seed and ports from the step (deploy/README.md, Slurm).\n"
		"  A worker with --config whose file has a train section trains it with every other\n"
		"  worker of the file (unless --until-full-view or --no-train); --listen and --run-ms\n"
		"  do not apply to such a job.\n",
		what, strcmp(what, "worker") ? "" : "[--expect N] [--until-full-view] ");
}

static const struct option node_opts_long[] = {
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

static void flag_key(struct node_flags *f, const char *flag, const char *key, const char *value)
{
	for (int i = 0; i < f->nkeys; i++) /* given twice: the last one counts */
		if (!strcmp(f->keys[i].key, key)) {
			f->keys[i].value = value;
			return;
		}
	f->keys[f->nkeys].flag = flag;
	f->keys[f->nkeys].key = key;
	f->keys[f->nkeys].value = value;
	f->nkeys++;
}

/* A flag that stands for a cluster key; 1 if c is not one. */
static int parse_key_flag(struct node_flags *f, int c, const char *arg, const char *prog)
{
	switch (c) {
	case 's': { /* every --seed, in order, is one cluster.seeds list */
		if (f->nseeds == MAX_SEEDS) {
			fprintf(stderr, "%s: at most %d --seed flags\n", prog, MAX_SEEDS);
			return 2;
		}
		size_t have = strlen(f->seeds);
		snprintf(f->seeds + have, sizeof(f->seeds) - have, "%s%s", have ? "," : "", arg);
		f->nseeds++;
		flag_key(f, "--seed", "cluster.seeds", f->seeds);
		return 0;
	}
	case 'k':
		flag_key(f, "--secret-file", "cluster.secret_file", arg);
		return 0;
	case 'p':
		flag_key(f, "--probe-interval-ms", "membership.probe_interval_ms", arg);
		return 0;
	case 'S':
		flag_key(f, "--suspect-timeout-ms", "membership.suspect_timeout_ms", arg);
		return 0;
	case 'e':
		flag_key(f, "--expect", "membership.min_members", arg);
		return 0;
	}
	return 1;
}

/* Every other flag. 0, 2 (bad input), 1 (not a flag of ours). */
static int parse_flag(struct node_flags *f, int c, const char *arg, const char *prog)
{
	char err[256];
	long x;
	switch (c) {
	case 'c':
		f->config = arg;
		return 0;
	case 'P':
		if (hora_cfg_int(arg, 0, 1 << 20, &x)) {
			fprintf(stderr, "%s: --proc must be a worker index >= 0 (got '%s')\n", prog, arg);
			return 2;
		}
		f->proc = (int)x;
		return 0;
	case 'l':
		f->listen = arg;
		return 0;
	case 't':
		if (hora_cfg_int(arg, 0, 1L << 30, &x)) {
			fprintf(stderr, "%s: --run-ms must be a number of milliseconds >= 0 (got '%s')\n",
				prog, arg);
			return 2;
		}
		f->run_ms = (int)x;
		f->run_ms_given = true;
		return 0;
	case 'u':
		f->until_full = true;
		return 0;
	case 'T':
	case 'N':
		f->train = c == 'T';
		return 0;
	case 'V':
		if (hora_setargs_add(&f->sets, arg, err, sizeof(err))) {
			fprintf(stderr, "%s: %s\n", prog, err);
			return 2;
		}
		return 0;
	case 'M':
		f->metrics = arg;
		return 0;
	case 'L':
		f->timeline = arg;
		return 0;
	case 'R':
		f->resume = true;
		return 0;
	}
	return 1;
}

/* argv into f. 0, 2 (bad input, said), -1 (--help, printed). */
static int parse_flags(int argc, char **argv, enum hora_swim_role role, struct node_flags *f,
		       const char *prog)
{
	const char *what = role == HORA_SWIM_SEED ? "seed" : "worker";
	*f = (struct node_flags){.proc = -1, .train = -1};
	int c, li = -1;
	opterr = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", node_opts_long, &li)) != -1) {
		if (c == 'h') {
			usage(stdout, what);
			return -1;
		}
		if (role == HORA_SWIM_SEED && c > 0 && strchr("euTNMLRP", c)) {
			fprintf(stderr, "%s: --%s is a worker flag\n", prog, node_opts_long[li].name);
			return 2;
		}
		int r = c == '?' ? 1 : parse_key_flag(f, c, optarg, prog);
		if (r == 1)
			r = c == '?' ? 1 : parse_flag(f, c, optarg, prog);
		if (r == 2)
			return 2;
		if (r) {
			usage(stderr, what);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		return 2;
	}
	/* a worker started by hora run / hora launch FILE -- CMD: the job's file
	 * (a bare worker, --listen, keeps its own address) */
	if (role == HORA_SWIM_WORKER && !f->config && !f->listen)
		f->config = hora_env_config();
	return 0;
}

/* The flags that stand for cluster keys, applied to cc in order (after the
 * --set arguments when there is a file: a hora_cluster_edit_fn). */
static int apply_flag_keys(struct hora_cluster_config *cc, const struct node_flags *f, char *err,
			   size_t errlen)
{
	for (int i = 0; i < f->nkeys; i++) {
		char why[1024];
		if (hora_cluster_set(cc, f->keys[i].key, f->keys[i].value, why, sizeof(why))) {
			snprintf(err, errlen, "%s %s: %s", f->keys[i].flag, f->keys[i].value, why);
			return HORA_ERR_CONFIG;
		}
	}
	return 0;
}

static int edit_cluster(struct hora_cluster_config *cc, void *arg, char *err, size_t errlen)
{
	const struct node_flags *f = arg;
	int rc = hora_setargs_apply_cluster(cc, (void *)&f->sets, err, errlen);
	return rc ? rc : apply_flag_keys(cc, f, err, errlen);
}

/* The cluster configuration of this node: the file with --set and the key
 * flags, or (no file) the defaults with the key flags. 0 or 2 (said). */
static int load_cluster(struct hora_cluster_config *cc, const struct node_flags *f,
			const struct hora_slurm *slurm, const char *prog)
{
	char err[2048];
	hora_cluster_defaults(cc);
	cc->secret_env = hora_env_secret();
	cc->slurm = slurm;
	int rc;
	if (f->config || (slurm->on && !f->listen)) { /* an srun step: its nodes (core/slurm.h) */
		rc = hora_cluster_load_edit(cc, f->config, edit_cluster, (void *)f, err, sizeof(err));
	} else if (f->sets.n) {
		snprintf(err, sizeof(err), "--set '%s' needs --config (it sets a key of the cluster file)",
			 f->sets.arg[0]);
		rc = HORA_ERR_CONFIG;
	} else {
		rc = apply_flag_keys(cc, f, err, sizeof(err));
	}
	if (!rc && !f->config && !cc->nnodes) { /* the load's defaults, without a file */
		if (!cc->membership.min_members)
			cc->membership.min_members = 1;
		cc->membership.ping_timeout_ms = cc->membership.probe_interval_ms * 2 / 5;
		if (hora_swim_cfg_check(&cc->membership, err, sizeof(err)))
			rc = HORA_ERR_CONFIG;
	}
	if (rc) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	return 0;
}

/* Node options from the cluster configuration: the secret file, seeds and
 * membership parameters; for a worker of a file, which worker it is, where
 * it listens and its CPU. --listen overrides the address. 0 or 2 (said). */
static int node_from_cluster(struct node_opts *o, const struct hora_cluster_config *cc,
			     const struct node_flags *f, enum hora_swim_role role, const char *prog)
{
	*o = (struct node_opts){.proc = f->proc, .cpu = -1, .run_ms = f->run_ms,
				.until_full = f->until_full, .host = "0.0.0.0"};
	o->swim = cc->membership;
	o->join_timeout_ms = cc->join_timeout_ms;
	snprintf(o->secret_file, sizeof(o->secret_file), "%s", cc->secret_file);
	char hp[300], why[512];
	const int wait_ms = cc->join_timeout_ms > 0 ? cc->join_timeout_ms : 10000; /* hosts.h */
	for (int i = 0; i < cc->nseeds && o->nseeds < MAX_SEEDS; i++) {
		if (hora_hostport_resolve(cc->seeds[i], hp, sizeof(hp), wait_ms, why, sizeof(why))) {
			fprintf(stderr, "%s: cluster.seeds[%d]: %s\n", prog, i, why);
			return 1;
		}
		if (!hora_net_swim_addr(hp, &o->seeds[o->nseeds]))
			o->nseeds++;
	}
	if ((f->config || cc->nnodes) && role == HORA_SWIM_WORKER) { /* a file, or an srun step's nodes */
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
		/* the allowed CPU i mod k (a cpuset or taskset narrows them); i the
		 * index on this machine: with the local and netns launchers every
		 * node is on it (127.0.0.1 and 127.0.0.2, namespaces), so the
		 * worker's index over all nodes, else its index on its node */
		if (cc->bind) {
			const bool one_machine = !strcmp(cc->launcher, "local") || !strcmp(cc->launcher, "netns");
			o->cpu = hora_cpus_nth(one_machine ? o->proc : local);
			if (o->cpu < 0)
				fprintf(stderr, "%s: cluster.bind: core: cannot read the CPUs this process may "
						"run on; not bound\n", prog);
		}
		char ip[HORA_HOST_IP_MAX];
		if (hora_host_resolve(cc->nodes[node].host, ip, wait_ms, why, sizeof(why))) {
			fprintf(stderr, "%s: cluster.nodes[%d].host: %s\n", prog, node, why);
			return 1;
		}
		snprintf(o->host, sizeof(o->host), "%s", ip);
		o->port = (uint16_t)(cc->port_base + 1 + o->proc);
	}
	struct hora_swim_addr a;
	if (f->listen && (hora_net_swim_addr(f->listen, &a) ||
			  hora_hostport_split(f->listen, o->host, sizeof(o->host), &o->port))) {
		fprintf(stderr, "%s: --listen wants IPv4:PORT (got '%s')\n", prog, f->listen);
		return 2;
	}
	return 0;
}

static void print_view(struct hora_net_membership *m, const char *who)
{
	struct hora_swim_view v;
	int rank;
	bool paused;
	char why[128];
	hora_net_membership_view(m, &v, &rank, &paused, why, sizeof(why));
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

/* The loop and the membership of a node (the secret loaded, signals
 * handled); prints the "up" line. 0, 1 or 2 (said). */
static int node_open(struct node_opts *o, enum hora_swim_role role, const char *prog,
		     struct hora_net_loop **loop, struct hora_net_membership **m, char *who,
		     size_t wholen)
{
	uint8_t secret[HORA_NET_SECRET_MAX];
	char err[256], warn[320];
	int slen = hora_net_secret_load(o->secret_file[0] ? o->secret_file : NULL,
					hora_env_secret(), secret, sizeof(secret), err,
					sizeof(err), warn, sizeof(warn));
	if (slen < 0) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	if (warn[0])
		fprintf(stderr, "%s: warning: %s\n", prog, warn);
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
	int rc = hora_net_loop_create(&no, loop, err, sizeof(err));
	memset(secret, 0, sizeof(secret));
	if (rc) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 1;
	}
	o->swim.role = role;
	uint16_t bound;
	if (hora_net_membership_create(*loop, &o->swim, o->host, o->port, &bound, o->seeds,
				       o->nseeds, m, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		hora_net_loop_destroy(*loop);
		*loop = NULL;
		return 2;
	}
	snprintf(who, wholen, "%s %s:%u", role == HORA_SWIM_SEED ? "seed" : "worker", o->host, bound);
	printf("%s: up (membership on UDP port %u)\n", who, bound);
	fflush(stdout);
	return 0;
}

/* Not joined after waited_ms: say so, and why if the membership knows. */
static int not_joined(struct hora_net_membership *m, const struct node_opts *o, const char *who,
		      int waited_ms, const char *limit)
{
	struct hora_swim_stats st;
	hora_net_membership_stats(m, &st);
	char why[160];
	if (st.bad_mac)
		snprintf(why, sizeof(why), "%llu datagram(s) failed authentication: wrong cluster secret?",
			 (unsigned long long)st.bad_mac);
	else
		snprintf(why, sizeof(why), "seed down or wrong cluster secret?");
	fprintf(stderr, "%s: never joined: no authenticated answer from %d seed(s) within %d ms "
			"(%s; %s)\n", who, o->nseeds, waited_ms, limit, why);
	return 1;
}

/* Stay a member until a signal, --run-ms, or (--until-full-view) the full
 * view; print every view (worker) or member count (seed) that changes. */
static int node_follow(struct hora_net_membership *m, const struct node_opts *o,
		       enum hora_swim_role role, const char *who)
{
	const int64_t start = hora_clock_ms();
	bool joined = o->nseeds == 0;
	uint64_t known = 0;
	bool known_paused = false;
	int known_alive = 1;
	for (;;) {
		if (g_signal && o->until_full) { /* its job, the full view, never came */
			struct hora_swim_view v;
			int rank;
			bool paused;
			hora_net_membership_view(m, &v, &rank, &paused, NULL, 0);
			if (rank >= 0 && v.n >= o->swim.min_members) { /* it came with the signal */
				printf("%s: rank %d of %d in view %llu\n", who, rank, v.n, (unsigned long long)v.id);
				return 0;
			}
			fprintf(stderr, "%s: stopped by signal %d before the full view (%s: %d of %d members)\n",
				who, (int)g_signal, v.id ? "the view has" : "no view yet", v.id ? v.n : 0,
				o->swim.min_members);
			hora_net_membership_leave(m);
			return 128 + (int)g_signal;
		}
		if (g_signal) {
			printf("%s: leaving (signal %d)\n", who, (int)g_signal);
			fflush(stdout);
			hora_net_membership_leave(m);
			return 0;
		}
		const int waited = (int)(hora_clock_ms() - start);
		if (!joined && hora_net_membership_joined(m)) {
			joined = true;
			printf("%s: joined\n", who);
			fflush(stdout);
		}
		if (o->run_ms && waited > o->run_ms)
			return joined ? 0 : not_joined(m, o, who, waited, "--run-ms");
		if (!joined && waited > o->join_timeout_ms)
			return not_joined(m, o, who, waited, "membership.join_timeout_ms");
		hora_net_membership_wait(m, known, known_paused, 100);
		struct hora_swim_view v;
		int rank;
		bool paused;
		hora_net_membership_view(m, &v, &rank, &paused, NULL, 0);
		int alive = hora_net_membership_alive(m);
		if (role == HORA_SWIM_SEED && alive != known_alive) {
			known_alive = alive;
			printf("%s: %d members alive\n", who, alive);
			fflush(stdout);
		}
		if (v.id != known || paused != known_paused) {
			known = v.id;
			known_paused = paused;
			if (role == HORA_SWIM_WORKER)
				print_view(m, who);
		}
		if (o->until_full && rank >= 0 && v.n >= o->swim.min_members) {
			printf("%s: rank %d of %d in view %llu\n", who, rank, v.n,
			       (unsigned long long)v.id);
			fflush(stdout);
			/* Linger as a member (answering pings, acking COMMIT resends)
			 * so that slower members install the same view, then go
			 * without LEAVE: a LEAVE would shrink the view of a member that
			 * has not printed yet, and it would never see the full one. */
			const int64_t t_end = hora_clock_ms() + 2000;
			while (hora_clock_ms() < t_end && !g_signal)
				usleep(100000);
			return 0;
		}
	}
}

static int run_node(struct node_opts *o, enum hora_swim_role role, const char *prog)
{
	struct hora_net_loop *loop;
	struct hora_net_membership *m;
	char who[96];
	int rc = node_open(o, role, prog, &loop, &m, who, sizeof(who));
	if (rc)
		return rc;
	rc = node_follow(m, o, role, who);
	hora_net_membership_destroy(m);
	hora_net_loop_destroy(loop);
	return rc;
}

/* Elastic training: SIGTERM/SIGINT make the worker leave gracefully (the
 * others see a LEAVE at once and re-form without waiting for the failure
 * detector), then exit 128 + signal. The handler only writes the signal to
 * a pipe; a thread reads it and leaves (no membership call in a signal
 * handler, whichever thread, BLAS's included, takes the signal). */
static pthread_mutex_t g_leave_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hora_net_membership *g_leave_m; /* g_leave_mu; NULL: none (yet, or finalizing) */
static int g_term_pipe[2] = {-1, -1};

static void on_term(int sig)
{
	const int saved = errno;
	const unsigned char b = (unsigned char)sig;
	ssize_t w = write(g_term_pipe[1], &b, 1);
	(void)w;
	errno = saved;
}

static void set_leave(struct hora_net_membership *m)
{
	pthread_mutex_lock(&g_leave_mu);
	g_leave_m = m;
	pthread_mutex_unlock(&g_leave_mu);
}

static void *term_main(void *arg)
{
	(void)arg;
	unsigned char sig = 0;
	while (read(g_term_pipe[0], &sig, 1) < 0 && errno == EINTR)
		;
	fprintf(stderr, "hora worker: signal %d: leaving the job\n", sig);
	pthread_mutex_lock(&g_leave_mu); /* held to the end: finalize cannot free it meanwhile */
	if (g_leave_m)
		hora_net_membership_leave(g_leave_m);
	_exit(128 + sig);
}

static void leave_on_term(void)
{
	pthread_t t;
	if (pipe(g_term_pipe) || pthread_create(&t, NULL, term_main, NULL))
		return; /* the default action then: the others detect the death */
	pthread_detach(t);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

/* The job of a launched worker: the train section of the cluster file with
 * the train.* --set applied, distributed over every worker of cc
 * (hora_init_with over cc, hora_train_run_comm). */
static int run_training(const struct node_opts *o, const struct hora_cluster_config *cc,
			const struct node_flags *f, struct hora_train_config *tc, const char *prog)
{
	char err[2048];
	if (hora_setargs_apply_train(tc, &f->sets, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	if (f->metrics)
		snprintf(tc->metrics, sizeof(tc->metrics), "%s", f->metrics);
	if (f->timeline)
		snprintf(tc->timeline, sizeof(tc->timeline), "%s", f->timeline);
	else if (hora_env_timeline())
		snprintf(tc->timeline, sizeof(tc->timeline), "%s", hora_env_timeline());
	if (f->resume)
		tc->resume = 1;
	if (hora_env_test_sample_log())
		snprintf(tc->sample_log, sizeof(tc->sample_log), "%s", hora_env_test_sample_log());
	if (hora_env_test_step_log())
		snprintf(tc->step_log, sizeof(tc->step_log), "%s", hora_env_test_step_log());
	const int pg = hora_env_progress(); /* hora launch on a terminal: bar */
	if (pg >= 0)
		tc->progress = pg;
	struct hora_init_opts io;
	hora_init_opts_defaults(&io);
	if (hora_env_init_opts(&io, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	io.cluster = cc;
	io.cluster_file = cc->file;
	io.proc = o->proc;
	io.elastic = &tc->elastic;
	if (tc->elastic.on)
		leave_on_term();
	struct hora_comm *c;
	int irc = hora_init_with(&io, &c, err, sizeof(err));
	if (irc) {
		fprintf(stderr, "%s: worker %d: %s\n", prog, o->proc, err);
		return irc == HORA_ERR_CONFIG ? 2 : 1; /* 2: refused (max_workers), bad input */
	}
	set_leave(hora_comm_membership(c));
	struct hora_train_result res;
	int rc = hora_train_run_comm(c, tc, &res, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "%s: rank %d: %s\n", prog, hora_rank(c), err);
	} else if (hora_rank(c) == 0 && !tc->quiet && hora_size(c) > 1 && res.allreduce_s > 0) {
		printf("gradient averaging: %.2f s on the communication thread, %.0f %% of it hidden "
		       "behind forward/backward\n",
		       res.allreduce_s, 100.0 * res.allreduce_hidden_s / res.allreduce_s);
	}
	if (!rc && tc->elastic.on && hora_rank(c) == 0 && !tc->quiet && res.train_s > 0)
		printf("elastic: %lld commits took %.3f s, %.2f %% of %.2f s of training\n",
		       (long long)res.commits, res.commit_s, 100.0 * res.commit_s / res.train_s, res.train_s);
	if (!rc && (tc->elastic.on || tc->gossip.on)) /* every one's: they must be bitwise identical */
		printf("worker %d: final parameters crc32 %08lx (rank %d of %d, %lld steps)\n", o->proc,
		       crc32(0L, (const Bytef *)res.params, (uInt)(res.nparams * sizeof(float))), hora_rank(c),
		       hora_size(c), (long long)res.steps);
	hora_train_result_deinit(&res);
	set_leave(NULL); /* a signal from now on exits without it: finalize leaves */
	hora_finalize(c);
	if (rc == HORA_ERR_STALL)
		return 3; /* the stall inspector's report, or a joiner that left before it was
			     ready (core/comm_keep.c), is in err, printed above */
	if (rc == HORA_ERR_LOST)
		return 4; /* a worker declared dead, named in err (printed above) */
	if (rc == HORA_ERR_NOJOB)
		return 5; /* a joiner with nothing to join: hora launch counts no death */
	return rc == HORA_ERR_CONFIG || rc == HORA_ERR_DATA || rc == HORA_ERR_MODEL ? 2 : rc ? 1 : 0;
}

/* Whether this worker trains (the file has a train section, or --train),
 * with the section read into tc. 1 train, 0 membership only, 2 bad input. */
static int decide_training(const struct node_flags *f, enum hora_swim_role role,
			   struct hora_train_config *tc, const char *prog)
{
	hora_train_config_defaults(tc);
	if (f->train == 1 && !f->config) {
		fprintf(stderr, "%s: --train needs --config (the job is the file's train section)\n", prog);
		return 2;
	}
	if (role != HORA_SWIM_WORKER || !f->config || f->until_full || f->train == 0)
		return 0;
	char err[2048];
	int nkeys = 0;
	if (hora_config_load_train(tc, f->config, &nkeys, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 2;
	}
	return nkeys || f->train == 1;
}

/* Refuse the flags that the chosen run cannot honour, naming them. */
static int refuse_unused(const struct node_flags *f, bool train, const char *prog)
{
	const char *flag = NULL, *why = NULL;
	if (train && f->listen) {
		flag = "--listen";
		why = "a training job listens where the cluster file says (cluster.nodes[].host, "
		      "cluster.port_base + 1 + G), since the other workers reach it there";
	} else if (train && f->run_ms_given) {
		flag = "--run-ms";
		why = "a training job runs until its epochs are done";
	} else if (!train && (f->metrics || f->timeline || f->resume)) {
		flag = f->metrics ? "--metrics" : f->timeline ? "--timeline" : "--resume";
		why = "it applies to a training job only, and this run is membership only";
	}
	for (int i = 0; !train && !flag && i < f->sets.n; i++)
		if (hora_setarg_is_train(f->sets.arg[i])) {
			flag = f->sets.arg[i];
			why = "train keys apply to a training job only, and this run is membership only";
		}
	if (!flag)
		return 0;
	fprintf(stderr, "%s: %s: %s\n", prog, flag, why);
	return 2;
}

/* every thread of the process: OpenBLAS's, started before main, too */
static void bind_cpu(int cpu, const char *prog)
{
	int rc = hora_cpus_bind_process(cpu);
	if (rc)
		fprintf(stderr, "%s: cannot bind to CPU %d: %s\n", prog, cpu, strerror(-rc));
}

static int cmd_node(int argc, char **argv, enum hora_swim_role role)
{
	char prog[32];
	snprintf(prog, sizeof(prog), "hora %s", role == HORA_SWIM_SEED ? "seed" : "worker");
	struct node_flags *f = calloc(1, sizeof(*f));
	struct hora_cluster_config *cc = calloc(1, sizeof(*cc));
	struct hora_train_config *tc = calloc(1, sizeof(*tc));
	struct node_opts o;
	int rc = 1;
	if (!f || !cc || !tc) {
		fprintf(stderr, "%s: out of memory\n", prog);
		goto out;
	}
	if ((rc = parse_flags(argc, argv, role, f, prog)))
		goto out;
	struct hora_slurm slurm = {0};
	char why[512];
	if (role == HORA_SWIM_WORKER && hora_env_slurm(&slurm, why, sizeof(why))) {
		fprintf(stderr, "%s: %s\n", prog, why);
		rc = 2;
		goto out;
	}
	if ((rc = load_cluster(cc, f, &slurm, prog)) || (rc = node_from_cluster(&o, cc, f, role, prog)))
		goto out;
	const int train = decide_training(f, role, tc, prog);
	if (train == 2 || (rc = refuse_unused(f, train == 1, prog))) {
		rc = 2;
		goto out;
	}
	if (o.cpu >= 0) /* cluster.bind: core, as mpirun --bind-to core */
		bind_cpu(o.cpu, prog);
	rc = train ? run_training(&o, cc, f, tc, prog) : run_node(&o, role, prog);
out:
	free(tc);
	free(cc);
	free(f);
	return rc < 0 ? 0 : rc;
}

int hora_cmd_seed(int argc, char **argv)
{
	return cmd_node(argc, argv, HORA_SWIM_SEED);
}

int hora_cmd_worker(int argc, char **argv)
{
	return cmd_node(argc, argv, HORA_SWIM_WORKER);
}
