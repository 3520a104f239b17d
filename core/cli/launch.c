/* launch.c - `hora launch CLUSTER.yaml [--set key=value]... [-- worker args]`
 *
 * Validates the whole cluster file with every --set applied (cluster,
 * transport, membership, collectives and train sections: exit 2 with
 * file:line:col before anything starts), then starts every worker of every
 * node of it: `hora worker --config FILE --proc G [--set K=V]...` per worker
 * G, with every --set in the same order, which the worker applies to the
 * file as the launcher did (the worker trains the file's train section with
 * all the others, or runs the membership only), run directly (launcher local), under
 * `ip netns exec NS` (launcher netns, NS = the node's netns), or through a
 * command template ({host}, {cmd}; launcher ssh uses cluster.ssh_command).
 * Each worker's output comes back line by line prefixed "[G host]";
 * SIGINT/SIGTERM are forwarded to the workers (by PID); the exit status is 0
 * only if every worker exited 0, and each failed worker is named with its
 * last lines. Once a worker has failed, the others get a grace period
 * (2 x membership.suspect_timeout_ms + 3 s: the failure detector's time to
 * stop them) to exit on their own; the ones still running then (a stopped or
 * hung process) are killed (SIGKILL, by PID: only processes this launcher
 * started), each named.
 */
#include "cli.h"
#include "net/util/clock.h"
#include "cluster.h"
#include "env.h"
#include "hora.h"
#include "setarg.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAIL 8
#define MAX_ARGS 64
#define DEATHS 16 /* deaths of one worker kept for the elastic summary */

/* One death of a worker, for the elastic summary. */
enum death_kind {
	DEATH_CASUALTY, /* died while the others went on (restarted or not) */
	DEATH_LATE,     /* failed after training completed: the job failed */
	DEATH_CULLED,   /* still running a grace period after training completed: killed */
};
struct death {
	enum death_kind kind;
	int status;         /* waitpid's */
	double at_s;        /* since launch */
	double restarted_s; /* since launch; < 0: not restarted */
	int restart_no;     /* which restart that was (1..restart_limit) */
};

struct child {
	pid_t pid;
	int fd;
	int g;
	const char *host;
	char buf[4096];
	size_t have;
	char tail[TAIL][256];
	int ntail;
	int status;
	bool done;
	bool bar; /* a progress bar line (\r updates) is open on the terminal */
	/* elastic supervision (elastic_exits); seen..culled are per process,
	 * restarts and deaths outlive a restart */
	bool seen;   /* its exit has been handled */
	bool at_end; /* it was running when training completed */
	bool culled; /* the launcher killed it as a straggler */
	int restarts;
	int ndeaths; /* may exceed DEATHS: the first DEATHS are kept */
	struct death death[DEATHS];
};

static volatile sig_atomic_t g_fwd;

static void on_signal(int sig)
{
	g_fwd = sig;
}

static void quote(char *out, size_t cap, const char *s)
{
	size_t k = 0;
	if (k + 1 < cap)
		out[k++] = '\'';
	for (; *s && k + 5 < cap; s++) {
		if (*s == '\'') {
			memcpy(out + k, "'\\''", 4);
			k += 4;
		} else {
			out[k++] = *s;
		}
	}
	if (k + 1 < cap)
		out[k++] = '\'';
	out[k] = 0;
}

/* Replace {host} and {cmd} in a template. */
static void fill(char *out, size_t cap, const char *tpl, const char *host, const char *cmd)
{
	size_t k = 0;
	while (*tpl && k + 1 < cap) {
		const char *v = NULL;
		size_t skip = 0;
		if (!strncmp(tpl, "{host}", 6))
			v = host, skip = 6;
		else if (!strncmp(tpl, "{cmd}", 5))
			v = cmd, skip = 5;
		if (v) {
			k += (size_t)snprintf(out + k, cap - k, "%s", v);
			if (k >= cap)
				k = cap - 1;
			tpl += skip;
		} else {
			out[k++] = *tpl++;
		}
	}
	out[k] = 0;
}

static void emit(struct child *c, const char *line)
{
	printf("[%d %s] %s\n", c->g, c->host, line);
	snprintf(c->tail[c->ntail % TAIL], sizeof(c->tail[0]), "%.255s", line);
	c->ntail++;
}

/* Lines go out prefixed; a progress bar (segments ending in \r) is redrawn
 * in place, prefixed too. */
static void drain(struct child *c, bool eof)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->have), *cr = memchr(c->buf, '\r', c->have);
		char *end = nl && cr ? (nl < cr ? nl : cr) : nl ? nl : cr;
		if (!end) {
			if ((eof && c->have) || c->have == sizeof(c->buf)) {
				c->buf[c->have == sizeof(c->buf) ? c->have - 1 : c->have] = 0;
				emit(c, c->buf);
				c->have = 0;
			}
			break;
		}
		const bool is_cr = *end == '\r';
		*end = 0;
		if (is_cr) {
			if (c->buf[0]) {
				printf("\r[%d %s] %s", c->g, c->host, c->buf);
				c->bar = true;
			}
		} else if (c->bar) {
			printf("\r");
			emit(c, c->buf);
			c->bar = false;
		} else {
			emit(c, c->buf);
		}
		size_t used = (size_t)(end - c->buf) + 1;
		memmove(c->buf, end + 1, c->have - used);
		c->have -= used;
	}
	fflush(stdout);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora launch CLUSTER.yaml [--set KEY=VALUE]... [-- WORKER-ARGS...]\n"
		   "  Checks the whole file with every --set applied, then starts\n"
		   "  `hora worker --config CLUSTER.yaml --proc G [--set KEY=VALUE]...` for every worker G.\n"
		   "  e.g. hora launch deploy/clusters/local.yaml -- --until-full-view\n");
}

struct launch {
	const char *file;
	struct hora_setargs sets;
	int extra, argc; /* argv[extra..argc) go to every worker after "--" */
	char **argv;
	struct hora_cluster_config cc;
	bool local, netns;
	const char *tpl; /* command template (ssh or a custom launcher) */
	struct hora_elastic_config ec; /* train.elastic; ec.on only for a training job */
	char self[PATH_MAX], cfgpath[PATH_MAX];
};

/* argv: FILE [--set K=V]... [-- ARGS...]. 0, 2 (bad usage) or -1 (help). */
static int parse_args(struct launch *la, int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : -1;
	}
	la->file = argv[1];
	la->argc = argc;
	la->argv = argv;
	la->extra = argc;
	char err[256];
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			la->extra = i + 1;
			break;
		}
		if (!strcmp(argv[i], "--set") && i + 1 < argc) {
			if (hora_setargs_add(&la->sets, argv[++i], err, sizeof(err))) {
				fprintf(stderr, "hora launch: %s\n", err);
				return 2;
			}
			continue;
		}
		fprintf(stderr, "hora launch: unexpected argument '%s'\n", argv[i]);
		usage(stderr);
		return 2;
	}
	if (argc - la->extra > MAX_ARGS) {
		fprintf(stderr, "hora launch: at most %d worker arguments after '--' (got %d)\n",
			MAX_ARGS, argc - la->extra);
		return 2;
	}
	return 0;
}

/* Whether the workers will train (hora worker's rule: a train section or
 * --train, and neither --until-full-view nor --no-train). */
static bool trains(const struct launch *la, int nkeys)
{
	bool train = nkeys > 0, until_full = false;
	for (int i = la->extra; i < la->argc; i++) {
		if (!strcmp(la->argv[i], "--train") || !strcmp(la->argv[i], "--no-train"))
			train = !strcmp(la->argv[i], "--train"); /* the last one counts */
		until_full |= !strcmp(la->argv[i], "--until-full-view");
	}
	return train && !until_full;
}

/* The whole file with every --set, as each worker will read it: cluster
 * sections (hora_cluster_load_edit), the train section, the launcher and
 * every node's netns. 0 or 2 (message printed). */
static int check_file(struct launch *la)
{
	char err[2048];
	hora_cluster_defaults(&la->cc);
	la->cc.secret_env = hora_env_secret();
	if (hora_cluster_load_edit(&la->cc, la->file, hora_setargs_apply_cluster, &la->sets, err,
				   sizeof(err))) {
		fprintf(stderr, "hora launch: %s\n", err);
		return 2;
	}
	struct hora_train_config tc;
	hora_train_config_defaults(&tc);
	int nkeys = 0;
	if (hora_config_load_train(&tc, la->file, &nkeys, err, sizeof(err)) ||
	    hora_setargs_apply_train(&tc, &la->sets, err, sizeof(err))) {
		fprintf(stderr, "hora launch: %s\n", err);
		return 2;
	}
	if (tc.elastic.restart && !tc.elastic.on) {
		fprintf(stderr, "hora launch: %s: train.elastic.restart: true needs elastic training, and "
				"train.elastic.enabled is false (a restarted worker can only rejoin "
				"workers that went on without it)\n", la->file);
		return 2;
	}
	if (trains(la, nkeys))
		la->ec = tc.elastic;
	else
		for (int i = 0; i < la->sets.n; i++)
			if (hora_setarg_is_train(la->sets.arg[i])) {
				fprintf(stderr, "hora launch: --set %s: train keys apply to a training job "
						"only, and this job is membership only\n", la->sets.arg[i]);
				return 2;
			}
	const char *mode = la->cc.launcher;
	la->local = !strcmp(mode, "local");
	la->netns = !strcmp(mode, "netns");
	la->tpl = !strcmp(mode, "ssh") ? la->cc.ssh_command : mode;
	if (!la->local && !la->netns && !strstr(la->tpl, "{cmd}")) {
		fprintf(stderr, "hora launch: %s: cluster.launcher '%s' must be local, ssh, netns or a "
				"command template containing {cmd}\n", la->file, mode);
		return 2;
	}
	for (int k = 0; la->netns && k < la->cc.nnodes; k++)
		if (!la->cc.nodes[k].netns[0]) {
			fprintf(stderr, "hora launch: %s: cluster.nodes[%d].netns is missing "
					"(launcher netns)\n", la->file, k);
			return 2;
		}
	return 0;
}

/* argv of worker g (NULL-terminated; strings borrowed from la and gs). */
static int worker_args(const struct launch *la, const struct hora_cluster_node *node,
		       const char *gs, const char **args, int cap)
{
	int na = 0;
	if (la->netns) {
		args[na++] = "ip";
		args[na++] = "netns";
		args[na++] = "exec";
		args[na++] = node->netns;
	}
	args[na++] = la->self;
	args[na++] = "worker";
	args[na++] = "--config";
	args[na++] = la->cfgpath;
	args[na++] = "--proc";
	args[na++] = gs;
	for (int i = 0; i < la->sets.n; i++) {
		args[na++] = "--set";
		args[na++] = la->sets.arg[i];
	}
	for (int i = la->extra; i < la->argc && na < cap - 1; i++)
		args[na++] = la->argv[i];
	args[na] = NULL;
	return na;
}

/* Fork worker g with its output on a pipe into ch. 0, or 1 (pipe failed). */
static int start_worker(const struct launch *la, int g, struct child *ch)
{
	int local_i, k = hora_cluster_locate(&la->cc, g, &local_i);
	const struct hora_cluster_node *node = &la->cc.nodes[k];
	char gs[16];
	snprintf(gs, sizeof(gs), "%d", g);
	const char *args[HORA_SETARG_MAX * 2 + MAX_ARGS + 16];
	int na = worker_args(la, node, gs, args, (int)(sizeof(args) / sizeof(args[0])));
	char cmd[8192] = "", line[16384];
	if (!la->local && !la->netns) { /* a remote shell command line */
		size_t k2 = 0;
		for (int i = 0; i < na && k2 < sizeof(cmd) - 1; i++) {
			char q[1024];
			quote(q, sizeof(q), args[i]);
			k2 += (size_t)snprintf(cmd + k2, sizeof(cmd) - k2, "%s%s", i ? " " : "", q);
		}
		fill(line, sizeof(line), la->tpl, node->host, cmd);
	}
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC)) {
		perror("hora launch: pipe");
		return 1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		if (isatty(STDOUT_FILENO)) /* rank 0 draws its bar through us */
			setenv("HORA_PROGRESS", "bar", 1);
		dup2(pfd[1], STDOUT_FILENO);
		dup2(pfd[1], STDERR_FILENO);
		if (!la->local && !la->netns)
			execl("/bin/sh", "sh", "-c", line, (char *)NULL);
		else
			execvp(args[0], (char *const *)args);
		fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	*ch = (struct child){.pid = pid, .fd = pfd[0], .g = g, .host = node->host};
	if (pid < 0) {
		ch->done = true;
		ch->status = 127 << 8;
	}
	return 0;
}

static void forward_signal(struct child *ch, int n, int running)
{
	int sig = g_fwd;
	g_fwd = 0;
	fprintf(stderr, "hora launch: forwarding signal %d to %d worker(s)\n", sig, running);
	for (int g = 0; g < n; g++)
		if (!ch[g].done && ch[g].pid > 0)
			kill(ch[g].pid, sig);
}

/* Read what is ready on each child's pipe (poll up to 200 ms); returns how
 * many pipes are still open. */
static int pump_output(struct child *ch, int n, struct pollfd *pf)
{
	int np = 0;
	for (int g = 0; g < n; g++)
		if (ch[g].fd >= 0) {
			pf[np].fd = ch[g].fd;
			pf[np].events = POLLIN;
			np++;
		}
	if (np)
		poll(pf, (nfds_t)np, 200);
	for (int g = 0, j = 0; g < n; g++) {
		if (ch[g].fd < 0 || !pf[j++].revents)
			continue;
		ssize_t r = read(ch[g].fd, ch[g].buf + ch[g].have, sizeof(ch[g].buf) - ch[g].have);
		if (r > 0) {
			ch[g].have += (size_t)r;
			drain(&ch[g], false);
		} else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
			drain(&ch[g], true);
			close(ch[g].fd);
			ch[g].fd = -1;
		}
	}
	return np;
}

/* Reap exited children; returns how many. */
static int reap(struct child *ch, int n)
{
	int st, reaped = 0;
	pid_t p;
	while ((p = waitpid(-1, &st, WNOHANG)) > 0)
		for (int g = 0; g < n; g++)
			if (ch[g].pid == p) {
				ch[g].done = true;
				ch[g].status = st;
				reaped++;
			}
	return reaped;
}

static bool failed(const struct child *c)
{
	return c->done && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0);
}

/* grace_s after the first failure, SIGKILL the workers still running,
 * naming each (once). */
static void end_stragglers(struct child *ch, int n, double grace_s, double *failed_at, bool *killed)
{
	if (*killed)
		return;
	int first = -1;
	for (int g = 0; g < n && first < 0; g++)
		if (failed(&ch[g]))
			first = g;
	if (first < 0)
		return;
	if (*failed_at < 0)
		*failed_at = hora_clock_s();
	if (hora_clock_s() - *failed_at < grace_s)
		return;
	*killed = true;
	for (int g = 0; g < n; g++)
		if (!ch[g].done && ch[g].pid > 0) {
			fprintf(stderr, "hora launch: worker %d on %s is still running %.1f s after worker %d "
					"failed (stopped or hung?): killing it (SIGKILL)\n",
				g, ch[g].host, grace_s, first);
			kill(ch[g].pid, SIGKILL); /* works on a stopped process too */
		}
}

/* ---- elastic supervision (train.elastic.on) ------------------------------
 * A worker that dies is a casualty, not the job's end: the others go on
 * without it, and with restart it is started again. Training has completed
 * when a worker exits 0; the ones running then must exit 0 too, and the ones
 * still running a grace period later (stopped or hung) are killed. */

struct elastic_run {
	const struct hora_elastic_config *ec;
	double grace_s;
	double t0;      /* launch time (hora_clock_s) */
	double done_at; /* when the first worker exited 0; < 0 before */
	double stop_at; /* when a signal was forwarded (no more restarts); < 0 before */
	double frozen_at; /* since when every running worker is stopped; < 0: not so */
	bool culled;    /* the stragglers have been killed */
	const char *cull_why; /* what they outlived by grace_s */
};

static const char *signame(int sig, char *buf, size_t cap)
{
	static const struct {
		int sig;
		const char *name;
	} names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
		     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
		     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"},
		     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].sig == sig)
			return names[i].name;
	snprintf(buf, cap, "signal %d", sig);
	return buf;
}

/* "was killed by SIGKILL" / "exited with status 3" */
static void how(int st, char *out, size_t cap)
{
	char b[32];
	if (WIFSIGNALED(st))
		snprintf(out, cap, "was killed by %s", signame(WTERMSIG(st), b, sizeof(b)));
	else
		snprintf(out, cap, "exited with status %d", WEXITSTATUS(st));
}

static void print_tail(const struct child *c)
{
	int from = c->ntail > TAIL ? c->ntail - TAIL : 0;
	for (int i = from; i < c->ntail; i++)
		fprintf(stderr, "    %s\n", c->tail[i % TAIL]);
}

/* What is left in a dead worker's pipe, without waiting for a process that
 * may still hold it open. */
static void drain_dead(struct child *c)
{
	if (c->fd < 0)
		return;
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
	ssize_t r;
	while ((r = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have)) > 0) {
		c->have += (size_t)r;
		drain(c, false);
	}
	drain(c, true);
	close(c->fd);
	c->fd = -1;
}

/* Start worker c->g again with the same command line, keeping its history.
 * 1 when it runs again, 0 when it could not be started (named). */
static int restart_worker(const struct launch *la, struct elastic_run *er, struct child *c)
{
	drain_dead(c);
	struct child keep = *c;
	if (start_worker(la, c->g, c)) {
		*c = keep;
		return 0;
	}
	c->restarts = keep.restarts + 1;
	c->ndeaths = keep.ndeaths;
	memcpy(c->death, keep.death, sizeof(c->death));
	if (c->ndeaths <= DEATHS) {
		c->death[c->ndeaths - 1].restarted_s = hora_clock_s() - er->t0;
		c->death[c->ndeaths - 1].restart_no = c->restarts;
	}
	fprintf(stderr, "hora launch: restarted worker %d on %s (%d of %d restarts)\n", c->g, c->host,
		c->restarts, er->ec->restart_limit);
	return !c->done;
}

/* Worker c has just exited: record what it means; with restart, start it
 * again. Returns 1 when it runs again. */
static int elastic_exit(const struct launch *la, struct elastic_run *er, struct child *ch, int n,
			struct child *c)
{
	const double now = hora_clock_s();
	c->seen = true;
	if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
		if (er->done_at < 0) { /* training completed: who is running now must finish */
			er->done_at = now;
			for (int g = 0; g < n; g++)
				ch[g].at_end = !ch[g].done || &ch[g] == c;
		}
		return 0;
	}
	const enum death_kind kind = c->culled ? DEATH_CULLED : c->at_end ? DEATH_LATE : DEATH_CASUALTY;
	if (c->ndeaths < DEATHS)
		c->death[c->ndeaths] = (struct death){.kind = kind, .status = c->status,
						      .at_s = now - er->t0, .restarted_s = -1};
	c->ndeaths++;
	if (kind == DEATH_CULLED)
		return 0;
	char h[64];
	how(c->status, h, sizeof(h));
	if (g_fwd && er->stop_at < 0) /* a signal not forwarded yet (Ctrl-C reaches the workers too) */
		er->stop_at = now;
	const bool again = kind == DEATH_CASUALTY && er->ec->restart && er->stop_at < 0 &&
			   c->restarts < er->ec->restart_limit;
	fprintf(stderr, "hora launch: worker %d on %s %s at %.1f s%s; last lines:\n", c->g, c->host, h,
		now - er->t0, kind == DEATH_LATE ? ", after training completed" :
			      again ? "; restarting it" :
			      er->ec->restart && er->stop_at < 0 ? "; no restarts left, the others go on without it" :
			      "; the others go on without it");
	print_tail(c);
	return again ? restart_worker(la, er, c) : 0;
}

/* Handle every exit reap() found; returns how many workers run again. */
static int elastic_exits(const struct launch *la, struct elastic_run *er, struct child *ch, int n)
{
	int again = 0;
	for (int g = 0; g < n; g++)
		if (ch[g].done && !ch[g].seen)
			again += elastic_exit(la, er, ch, n, &ch[g]);
	return again;
}

/* Whether process pid is stopped (SIGSTOP, a debugger): state T or t in
 * /proc/PID/stat. Under launcher netns, `ip netns exec` runs the worker in
 * its own process; under ssh or a template the child is the shell, never
 * seen stopped. */
static bool is_stopped(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t r = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[r] = 0;
	const char *p = strrchr(buf, ')'); /* the name may hold spaces and ')' */
	return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* What the stragglers are given grace_s after (NULL: nothing yet): training
 * completed, a signal was forwarded, or every worker still running is
 * stopped (nobody left to go on with). */
static const char *cull_reason(struct elastic_run *er, const struct child *ch, int n, double now)
{
	if (er->done_at >= 0 && now - er->done_at >= er->grace_s)
		return "training completed";
	if (er->stop_at >= 0 && now - er->stop_at >= er->grace_s)
		return "the launcher forwarded a signal";
	bool all = true;
	for (int g = 0; g < n && all; g++)
		if (!ch[g].done && ch[g].pid > 0)
			all = is_stopped(ch[g].pid);
	if (!all) {
		er->frozen_at = -1;
		return NULL;
	}
	if (er->frozen_at < 0)
		er->frozen_at = now;
	return now - er->frozen_at >= er->grace_s ? "the workers not stopped exited" : NULL;
}

/* grace_s after training completed (or a signal, or all running workers
 * stopped), SIGKILL the workers still running (a stopped worker the others
 * dropped, a hung one), naming each (once). */
static void elastic_stragglers(struct elastic_run *er, struct child *ch, int n)
{
	if (er->culled || !(er->cull_why = cull_reason(er, ch, n, hora_clock_s())))
		return;
	er->culled = true;
	for (int g = 0; g < n; g++)
		if (!ch[g].done && ch[g].pid > 0) {
			fprintf(stderr, "hora launch: worker %d on %s is still running %.1f s after %s "
					"(stopped or hung?): killing it (SIGKILL)\n",
				g, ch[g].host, er->grace_s, er->cull_why);
			ch[g].culled = true;
			kill(ch[g].pid, SIGKILL); /* works on a stopped process too */
		}
}

/* Relay output and signals until every worker has exited; grace_s after
 * a worker failed, end the others (end_stragglers). With er (elastic), a
 * worker's death ends no one: elastic_exits, elastic_stragglers. */
static void supervise(const struct launch *la, struct child *ch, int n, int running, double grace_s,
		      struct elastic_run *er)
{
	struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
	double failed_at = -1;
	bool killed = false;
	while (running) {
		if (g_fwd) {
			forward_signal(ch, n, running);
			if (er && er->stop_at < 0)
				er->stop_at = hora_clock_s();
		}
		int np = pf ? pump_output(ch, n, pf) : 0;
		running -= reap(ch, n);
		if (er)
			running += elastic_exits(la, er, ch, n);
		if (running && er)
			elastic_stragglers(er, ch, n);
		else if (running)
			end_stragglers(ch, n, grace_s, &failed_at, &killed);
		if (!np && running)
			usleep(50000);
	}
	free(pf);
	for (int g = 0; g < n; g++) /* output still in the pipes */
		if (ch[g].fd >= 0) {
			ssize_t r;
			while ((r = read(ch[g].fd, ch[g].buf + ch[g].have, sizeof(ch[g].buf) - ch[g].have)) > 0) {
				ch[g].have += (size_t)r;
				drain(&ch[g], false);
			}
			drain(&ch[g], true);
			close(ch[g].fd);
		}
}

/* One clause of the summary for death d of worker c. */
static void death_clause(const struct elastic_run *er, const struct child *c, const struct death *d,
			 char *out, size_t cap)
{
	char h[64];
	how(d->status, h, sizeof(h));
	int k = snprintf(out, cap, "worker %d (%s) %s at %.1f s", c->g, c->host, h, d->at_s);
	if (k < 0 || (size_t)k >= cap)
		return;
	out += k, cap -= (size_t)k;
	if (d->kind == DEATH_LATE)
		snprintf(out, cap, ", after training completed");
	else if (d->kind == DEATH_CULLED)
		snprintf(out, cap, " (still running %.1f s after %s: stopped or hung?)", er->grace_s, er->cull_why);
	else if (d->restarted_s >= 0)
		snprintf(out, cap, " and restarted at %.1f s (%d of %d restarts)", d->restarted_s, d->restart_no,
			 er->ec->restart_limit);
	else if (er->ec->restart && c->restarts >= er->ec->restart_limit)
		snprintf(out, cap, " (no restarts left: %d of %d used)", c->restarts, er->ec->restart_limit);
}

/* The elastic outcome: 0 when training completed (a worker exited 0 and so
 * did every worker running then, stragglers killed after it aside), else 1.
 * Prints one summary line naming every death. */
static int elastic_report(const struct elastic_run *er, const struct child *ch, int n)
{
	int completed = 0, late = 0, deaths = 0;
	for (int g = 0; g < n; g++) {
		completed += WIFEXITED(ch[g].status) && WEXITSTATUS(ch[g].status) == 0;
		for (int i = 0; i < ch[g].ndeaths && i < DEATHS; i++)
			late += ch[g].death[i].kind == DEATH_LATE;
		deaths += ch[g].ndeaths;
	}
	const bool ok = er->done_at >= 0 && !late;
	if (ok)
		printf("hora launch: training completed by %d worker%s", completed, completed == 1 ? "" : "s");
	else if (er->done_at < 0)
		printf("hora launch: training did not complete (no worker exited 0)");
	else
		printf("hora launch: training did not complete (%d worker%s failed after it completed)", late,
		       late == 1 ? "" : "s");
	for (int g = 0; g < n; g++) {
		for (int i = 0; i < ch[g].ndeaths && i < DEATHS; i++) {
			char clause[512];
			death_clause(er, &ch[g], &ch[g].death[i], clause, sizeof(clause));
			printf("; %s", clause);
		}
		if (ch[g].ndeaths > DEATHS)
			printf("; worker %d (%s) died %d more times", g, ch[g].host, ch[g].ndeaths - DEATHS);
	}
	printf(deaths ? "\n" : "; no worker died\n");
	return ok ? 0 : 1;
}

/* Name each failed worker with its last lines; returns how many failed. */
static int report(const struct child *ch, int n)
{
	int failed = 0;
	for (int g = 0; g < n; g++) {
		int st = ch[g].status;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			continue;
		failed++;
		if (WIFSIGNALED(st))
			fprintf(stderr, "hora launch: worker %d on %s was killed by signal %d; last lines:\n",
				g, ch[g].host, WTERMSIG(st));
		else
			fprintf(stderr, "hora launch: worker %d on %s exited with status %d; last lines:\n",
				g, ch[g].host, WEXITSTATUS(st));
		int from = ch[g].ntail > TAIL ? ch[g].ntail - TAIL : 0;
		for (int i = from; i < ch[g].ntail; i++)
			fprintf(stderr, "    %s\n", ch[g].tail[i % TAIL]);
	}
	printf("hora launch: %d of %d workers succeeded\n", n - failed, n);
	return failed;
}

int hora_cmd_launch(int argc, char **argv)
{
	struct launch *la = calloc(1, sizeof(*la));
	if (!la) {
		perror("hora launch");
		return 1;
	}
	int rc = parse_args(la, argc, argv);
	if (rc)
		goto out;
	if ((rc = check_file(la)))
		goto out;
	ssize_t sl = readlink("/proc/self/exe", la->self, sizeof(la->self) - 1);
	if (sl <= 0 || !realpath(la->file, la->cfgpath)) {
		fprintf(stderr, "hora launch: cannot resolve paths: %s\n", strerror(errno));
		rc = 1;
		goto out;
	}
	la->self[sl] = 0;
	const char *hook = hora_env_launch_worker();
	if (hook) {
		fprintf(stderr, "hora launch: HORA_LAUNCH_WORKER=%s runs instead of hora worker "
				"(a test hook)\n", hook);
		snprintf(la->self, sizeof(la->self), "%s", hook);
	}
	const int n = hora_cluster_size(&la->cc);
	struct child *ch = calloc((size_t)n, sizeof(*ch));
	if (!ch) {
		perror("hora launch");
		rc = 1;
		goto out;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	printf("hora launch: %s: %d workers on %d node(s), launcher %s\n", la->cc.name, n,
	       la->cc.nnodes, la->cc.launcher);
	fflush(stdout);
	const int sus_ms = la->cc.membership.suspect_timeout_ms; /* the file's, with every --set */
	const double grace_s = 2.0 * (sus_ms > 0 ? sus_ms : 1000) / 1e3 + 3.0;
	struct elastic_run er = {.ec = &la->ec, .grace_s = grace_s, .t0 = hora_clock_s(), .done_at = -1,
				 .stop_at = -1, .frozen_at = -1};
	int started = 0;
	while (started < n && !start_worker(la, started, &ch[started]))
		started++;
	if (started < n) { /* no pipe: stop the ones already started */
		er.stop_at = hora_clock_s(); /* no restarts of the ones stopped here */
		for (int g = 0; g < started; g++)
			if (ch[g].pid > 0)
				kill(ch[g].pid, SIGTERM);
		for (int g = started; g < n; g++)
			ch[g] = (struct child){.fd = -1, .g = g, .done = true, .status = 127 << 8,
					       .host = "-"};
	}
	int running = 0;
	for (int g = 0; g < n; g++)
		running += !ch[g].done;
	if (la->ec.on) {
		supervise(la, ch, n, running, grace_s, &er);
		rc = elastic_report(&er, ch, n);
	} else {
		supervise(la, ch, n, running, grace_s, NULL);
		rc = report(ch, n) ? 1 : 0;
	}
	free(ch);
out:
	free(la);
	return rc < 0 ? 0 : rc;
}
