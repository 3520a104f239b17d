/* run.c - `hora run -np N [-H host:slots,... | --hostfile F | CLUSTER.yaml]
 * [--port BASE] [--set KEY=VALUE]... [--] CMD ARGS...`: horovodrun's
 * interface over `hora launch`'s machinery (launch.c: start, relay with
 * "[G host]" prefixes, signal forwarding, the grace period, the exit status).
 *
 * Without a CLUSTER.yaml, it writes the job's cluster file in a private
 * directory (launch_tmp.c, removed at exit): the hosts (this one, or -H /
 * --hostfile filled in order up to -np slots, as horovodrun does), launcher
 * local when every host is a loopback address, else ssh; port_base where
 * ports base+1..base+N are free on this host now (or --port). --set edits
 * that file (or, with a CLUSTER.yaml, a copy of it) as the same key written
 * in it. Without a secret_file and without HORA_SECRET, a fresh random
 * secret goes to the workers' environment only (launch_cmd.c). Each copy of
 * CMD gets HORA_CONFIG, HORA_PROC and the rest of launch_cmd.c's contract.
 */
#include "cli.h"
#include "launch.h"
#include "run.h"

#include "env.h"
#include "hosts.h"
#include "net/membership/swim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

struct run_args {
	int np;            /* 0: not given */
	const char *hosts; /* -H */
	const char *hostfile;
	const char *file; /* CLUSTER.yaml */
	int port;         /* 0: find free ports */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: hora run -np N [-H HOST[:SLOTS],... | --hostfile FILE | CLUSTER.yaml]\n"
		"                [--port BASE] [--set KEY=VALUE]... [--] CMD [ARGS...]\n"
		"  Starts N copies of CMD (a Python script, a program calling hora_init(NULL, ...), ...),\n"
		"  each with HORA_CONFIG (a cluster file naming all of them), HORA_PROC (its index),\n"
		"  HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE and, unless the file names a\n"
		"  secret_file or HORA_SECRET is set, a fresh HORA_SECRET; their lines come back as\n"
		"  \"[G host] ...\". Without hosts: N copies on this host. -H / --hostfile (lines\n"
		"  'HOST slots=N'): the slots are filled in order up to N, over ssh unless every host is\n"
		"  a loopback address. CLUSTER.yaml: that file's workers (N, if given, must equal them).\n"
		"  --port BASE: copy g listens on BASE+1+g (default: free ports found now).\n"
		"  Exit status: 0 when every copy exited 0, 1 when one failed, 2 bad arguments.\n"
		"  e.g. hora run -np 4 /usr/bin/python3 train.py\n"
		"       hora run -np 4 -H 10.0.0.1:2,10.0.0.2:2 build/hora-example-mnist 3\n");
}

static bool is_yaml(const char *s)
{
	size_t n = strlen(s);
	return (n > 5 && !strcmp(s + n - 5, ".yaml")) || (n > 4 && !strcmp(s + n - 4, ".yml"));
}

/* an integer option value in lo..hi, or -1 (said) */
static int int_opt(const char *opt, const char *v, int lo, int hi)
{
	char *end;
	errno = 0;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || end == v || *end || errno || x < lo || x > hi) {
		fprintf(stderr, "hora run: %s must be an integer in %d..%d (got '%s')\n", opt, lo, hi,
			v ? v : "nothing");
		return -1;
	}
	return (int)x;
}

/* Options, then the command (after "--" or from the first word that is
 * not an option nor the CLUSTER.yaml). 0, 2 (said) or -1 (--help). */
static int parse_args(struct run_args *ra, struct launch *la, int argc, char **argv)
{
	char err[256];
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return -1;
		}
		if (!strcmp(a, "-np") || !strcmp(a, "-n") || !strcmp(a, "--num-proc")) {
			if ((ra->np = int_opt("-np", v, 1, HORA_SWIM_MAX_VIEW)) < 0)
				return 2;
		} else if (!strcmp(a, "-H") || !strcmp(a, "--hosts")) {
			ra->hosts = v;
		} else if (!strcmp(a, "--hostfile") || !strcmp(a, "-hostfile")) {
			ra->hostfile = v;
		} else if (!strcmp(a, "--port")) {
			if ((ra->port = int_opt("--port", v, 1024, 60000)) < 0)
				return 2;
		} else if (!strcmp(a, "--set")) {
			if (!v || hora_setargs_add(&la->sets, v, err, sizeof(err))) {
				fprintf(stderr, "hora run: %s\n", v ? err : "--set wants KEY=VALUE");
				return 2;
			}
		} else if (a[0] == '-') {
			fprintf(stderr, "hora run: unknown option '%s' (hora run --help)\n", a);
			return 2;
		} else if (!ra->file && is_yaml(a)) {
			ra->file = a;
			continue;
		} else {
			break; /* the command */
		}
		if (!v) {
			fprintf(stderr, "hora run: %s wants a value\n", a);
			return 2;
		}
		i++;
	}
	la->cmd = argv + i;
	la->ncmd = argc - i;
	if (!la->ncmd) {
		fprintf(stderr, "hora run: no command to run (hora run -np N CMD [ARGS...])\n");
		return 2;
	}
	if (la->ncmd > LAUNCH_MAX_ARGS) {
		fprintf(stderr, "hora run: at most %d words of the command (got %d)\n", LAUNCH_MAX_ARGS, la->ncmd);
		return 2;
	}
	if (!!ra->hosts + !!ra->hostfile + !!ra->file > 1) {
		fprintf(stderr, "hora run: give one of -H, --hostfile and CLUSTER.yaml\n");
		return 2;
	}
	if (!ra->np && !ra->file) {
		fprintf(stderr, "hora run: -np N is missing (how many copies of the command)\n");
		return 2;
	}
	if (ra->file && ra->port) {
		fprintf(stderr, "hora run: --port is for a generated file: %s has its cluster.port_base "
				"(--set cluster.port_base=%d)\n", ra->file, ra->port);
		return 2;
	}
	return 0;
}

/* Whether TCP and UDP port p are free on this host (any address) now. */
static bool port_free(int p)
{
	static const int types[] = {SOCK_STREAM, SOCK_DGRAM};
	for (int t = 0; t < 2; t++) {
		int fd = socket(AF_INET, types[t] | SOCK_CLOEXEC, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
		bool ok = fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		if (fd >= 0)
			close(fd);
		if (!ok)
			return false;
	}
	return true;
}

/* A port_base whose ports base+1..base+n are free now, from a random start
 * (parallel jobs do not race for the same range). 0 when none found. */
static int free_ports(int n)
{
	uint32_t r = 0;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint32_t)getpid();
	const int lo = 20000, span = 60000 - lo - n;
	for (int tries = 0; tries < 200; tries++) {
		int base = lo + (int)((r + (uint32_t)tries * 7919u) % (uint32_t)span), p = 1;
		while (p <= n && port_free(base + p))
			p++;
		if (p > n)
			return base;
	}
	return 0;
}

/* The cluster file of the job: the hosts, their slots, the launcher; on
 * this host alone, copy i bound to the (i mod k)-th of the k CPUs it may
 * use (cluster.bind: core; --set cluster.bind=none undoes it), as mpirun
 * binds by default, and also with more copies than CPUs, where mpirun
 * would not: hora's waits sleep rather than spin there, and 4 PyTorch
 * copies on 2 CPUs trained 1.7 x faster bound two to a CPU than unbound,
 * the C trainer alike either way (bench/RESULTS.md, session 15). Not
 * when a --set names a launcher of the user's (hora cannot pin what it starts). */
static int gen_text(const struct run_hosts *hs, int port, bool own_launcher, char *out, size_t cap)
{
	const bool local = run_hosts_all_loopback(hs);
	int k = snprintf(out, cap,
			 "# written by hora run for one job (removed when it ends)\n"
			 "cluster:\n  name: hora-run\n  launcher: %s\n  port_base: %d\n%s  nodes:\n",
			 local ? "local" : "ssh", port, local && !own_launcher ? "  bind: core\n" : "");
	for (int i = 0; i < hs->n && k > 0 && (size_t)k < cap; i++) {
		/* a name as written (ssh and each host look it up, ~/.ssh/config
		 * included), else the address */
		const char *h = hora_host_valid(hs->h[i].name) && strlen(hs->h[i].name) < 64 ? hs->h[i].name
											  : hs->h[i].ip;
		k += snprintf(out + k, cap - (size_t)k, "    - {host: %s, workers: %d}\n", h, hs->h[i].slots);
	}
	return k > 0 && (size_t)k < cap ? k : -1;
}

/* 32 random bytes, hex: the job's secret. 0, or 1 (said). */
static int make_secret(char out[65])
{
	uint8_t b[32];
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		fprintf(stderr, "hora run: getrandom: %s\n", strerror(errno));
		return 1;
	}
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
	return 0;
}

/* The hosts of -H / --hostfile / this host, filled to np. 0 or 2. */
static int job_hosts(const struct run_args *ra, struct run_hosts *hs)
{
	int rc;
	if (ra->hosts)
		rc = run_hosts_parse_list(hs, ra->hosts);
	else if (ra->hostfile)
		rc = run_hosts_parse_file(hs, ra->hostfile);
	else {
		*hs = (struct run_hosts){.n = 1};
		snprintf(hs->h[0].name, sizeof(hs->h[0].name), "127.0.0.1");
		snprintf(hs->h[0].ip, sizeof(hs->h[0].ip), "127.0.0.1");
		hs->h[0].slots = ra->np;
		rc = 0;
	}
	const char *from = ra->hosts ? "-H" : ra->hostfile ? ra->hostfile : "this host";
	if (!rc)
		rc = run_hosts_fill(hs, ra->np, from);
	return rc ? rc : run_hosts_check_mix(hs, from);
}

/* la->file: the CLUSTER.yaml, or the generated file (unedited, so that a bad
 * --set is named as such when it is checked). 0, 1 or 2 (said). */
static int job_file(const struct run_args *ra, struct launch *la, struct launch_tmp *tmp, char *path,
		    size_t cap)
{
	if (ra->file) {
		la->file = ra->file;
		return 0;
	}
	struct run_hosts hs = {.n = 0};
	int rc = job_hosts(ra, &hs);
	if (rc)
		return rc;
	const int port = ra->port ? ra->port : free_ports(ra->np);
	if (!port) {
		fprintf(stderr, "hora run: no %d free ports in 20001..60000 on this host (--port BASE)\n", ra->np);
		return 1;
	}
	bool own_launcher = false; /* a --set cluster.launcher=... of the user's (not local, netns) */
	for (int i = 0; i < la->sets.n; i++) {
		const char *a = la->sets.arg[i];
		if (!strncmp(a, "cluster.launcher=", 17))
			own_launcher = strcmp(a + 17, "local") && strcmp(a + 17, "netns");
	}
	char text[16384];
	int len = gen_text(&hs, port, own_launcher, text, sizeof(text));
	if (len < 0 || launch_tmp_write(tmp, la->who, text, (size_t)len, NULL, path, cap))
		return 1;
	la->file = path;
	la->shown = "the job's cluster file (written by hora run)";
	return 0;
}

/* The checked job: the file with every --set (named as such when bad),
 * -np against its workers, then the edited copy that the commands read.
 * 0, 1 or 2 (said). */
static int job_check(const struct run_args *ra, struct launch *la, struct launch_tmp *tmp)
{
	int rc = launch_check_file(la);
	if (rc)
		return rc;
	const int n = hora_cluster_size(&la->cc);
	if (ra->np && n != ra->np) {
		if (ra->file)
			fprintf(stderr, "hora run: -np %d, but %s has %d worker(s) (the sum of "
					"cluster.nodes[].workers%s)\n", ra->np, ra->file, n,
				la->sets.n ? ", with every --set" : "");
		else
			fprintf(stderr, "hora run: -np %d, but the --set list makes the job %d worker(s)\n", ra->np, n);
		return 2;
	}
	if (la->cc.secret_file[0]) /* the file's secret: no need of one in the environment */
		la->secret = NULL;
	if (!la->sets.n)
		return 0;
	if (launch_tmp_edited_copy(tmp, la->who, la->file, &la->sets, la->cfgpath, sizeof(la->cfgpath)))
		return 1;
	if (!la->shown)
		la->shown = ra->file;
	la->file = la->cfgpath; /* the copy holds every --set now */
	la->sets = (struct hora_setargs){0};
	return launch_check_file(la);
}

int hora_cmd_run(int argc, char **argv)
{
	struct launch *la = calloc(1, sizeof(*la));
	if (!la) {
		perror("hora run");
		return 1;
	}
	la->who = "hora run";
	struct run_args ra = {0};
	struct launch_tmp tmp = {0};
	char secret[65], gen[PATH_MAX];
	launch_signals_install(); /* from now on a signal is a way out that removes tmp */
	int rc = parse_args(&ra, la, argc, argv);
	if (rc || (rc = job_file(&ra, la, &tmp, gen, sizeof(gen))))
		goto out;
	const char *own = hora_env_secret();
	if (!own || !*own) {
		if ((rc = make_secret(secret)))
			goto out;
		la->secret = secret;
	}
	if ((rc = job_check(&ra, la, &tmp)))
		goto out;
	if (!realpath(la->file, la->cfgpath)) {
		fprintf(stderr, "hora run: %s: %s\n", la->file, strerror(errno));
		rc = 1;
		goto out;
	}
	if (!la->local && !la->netns && (rc = launch_cmd_payload(la)))
		goto out;
	if (launch_signal_pending()) {
		fprintf(stderr, "hora run: interrupted before the workers started\n");
		rc = 1;
		goto out;
	}
	rc = launch_run(la);
out:
	launch_tmp_remove(&tmp);
	free(la->payload);
	free(la);
	return rc < 0 ? 0 : rc;
}
