/* launch.c - `hora launch CLUSTER.yaml [--set key=value]... [-- worker args | -- CMD ARGS...]`
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
 * SIGINT/SIGTERM/SIGHUP are forwarded to the workers (by PID); the exit status is 0
 * only if every worker exited 0, and each failed worker is named with its
 * last lines. Once a worker has failed, the others get a grace period
 * (2 x membership.suspect_timeout_ms + 3 s: the failure detector's time to
 * stop them) to exit on their own; the ones still running then (a stopped or
 * hung process) are killed (SIGKILL, by PID: only processes this launcher
 * started), each named.
 *
 * With train.elastic on (a training job), a worker that dies is a casualty:
 * no one is ended for it, and with train.elastic.restart it is started again
 * with the same command line (any launcher: the same exec or template), at
 * most restart_limit times, never after exiting 0, once training completed
 * or once a signal came. Training has completed when a worker exits 0; the
 * job exits 0 if then every worker running at that moment exits 0; those
 * still running the grace period later (stopped or hung: dropped by the
 * others) are killed by PID and named, without failing the job. One summary
 * line names every death, how and when (core/cli/README.md has its format).
 * HORA_LAUNCH_WORKER (a test hook, core/env.c) runs another program instead
 * of this executable, for tests with stand-in workers.
 *
 * After "--", a first word that does not start with '-' is a command run
 * in place of `hora worker` for every worker, with the environment of
 * launch_cmd.c (HORA_CONFIG, HORA_PROC, ...); with --set, HORA_CONFIG names
 * an edited copy of the file (yamledit.c) in a private directory removed at
 * exit. `hora run` (run.c) starts its jobs through the same launch_run.
 */
#include "launch.h"

#include "cli.h"
#include "env.h"
#include "net/util/clock.h"

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

static volatile sig_atomic_t g_fwd;
static int g_forwarded; /* the last signal forwarded to the workers (0: none) */

static void on_signal(int sig)
{
	g_fwd = sig;
}

/* The signals the launcher catches and forwards. */
static const int fwd_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/* Worker g's process group (its pid: each worker leads one, with whatever
 * it starts itself, a data loader, a pipeline, ssh's children), or the
 * process alone if it has none yet. Only processes this launcher started,
 * and theirs. */
void launch_kill(pid_t pid, int sig)
{
	if (pid <= 0)
		return;
	if (kill(-pid, sig) && errno == ESRCH)
		kill(pid, sig);
}

void launch_quote(char *out, size_t cap, const char *s)
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

static void emit(struct launch_child *c, const char *line)
{
	printf("[%d %s] %s\n", c->g, c->host, line);
	snprintf(c->tail[c->ntail % LAUNCH_TAIL], sizeof(c->tail[0]), "%.255s", line);
	c->ntail++;
}

/* Lines go out prefixed; a progress bar (segments ending in \r) is redrawn
 * in place, prefixed too. */
void launch_drain(struct launch_child *c, bool eof)
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
	/* the reader of our output went away (hora run ... | head; SIGPIPE is
	 * ignored): stop the job as a SIGTERM would, once, rather than run it
	 * to its end for nobody */
	static bool out_gone;
	if (fflush(stdout) == EOF && errno == EPIPE && !out_gone) {
		out_gone = true;
		if (!g_fwd && !g_forwarded)
			g_fwd = SIGTERM;
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora launch CLUSTER.yaml [--set KEY=VALUE]... [-- WORKER-ARGS... | -- CMD ARGS...]\n"
		   "  Checks the whole file with every --set applied, then starts\n"
		   "  `hora worker --config CLUSTER.yaml --proc G [--set KEY=VALUE]...` for every worker G.\n"
		   "  After --, words starting with '-' are worker flags; otherwise they are a command run\n"
		   "  in place of hora worker, with HORA_CONFIG (the file, or with --set an edited copy),\n"
		   "  HORA_PROC=G, HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE in its environment.\n"
		   "  e.g. hora launch deploy/clusters/local.yaml -- --until-full-view\n"
		   "       hora launch deploy/clusters/local.yaml -- build/hora-example-mnist 3\n");
}

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
	if (la->extra < argc && argv[la->extra][0] != '-') { /* a command, not worker flags */
		la->cmd = argv + la->extra;
		la->ncmd = argc - la->extra;
	}
	if (argc - la->extra > LAUNCH_MAX_ARGS) {
		fprintf(stderr, "hora launch: at most %d %s after '--' (got %d)\n", LAUNCH_MAX_ARGS,
			la->cmd ? "words of the command" : "worker arguments", argc - la->extra);
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

/* A loader's message, la->file named as la->shown. */
static void say(const struct launch *la, const char *err)
{
	const char *at = la->shown ? strstr(err, la->file) : NULL;
	if (at)
		fprintf(stderr, "%s: %.*s%s%s\n", la->who, (int)(at - err), err, la->shown,
			at + strlen(la->file));
	else
		fprintf(stderr, "%s: %s\n", la->who, err);
}

/* The whole file with every --set, as each worker will read it: cluster
 * sections (hora_cluster_load_edit), the train section, the launcher and
 * every node's netns. 0 or 2 (message printed). */
int launch_check_file(struct launch *la)
{
	char err[2048];
	const char *who = la->who, *name = la->shown ? la->shown : la->file;
	hora_cluster_defaults(&la->cc);
	la->cc.secret_env = la->secret ? la->secret : hora_env_secret();
	if (hora_cluster_load_edit(&la->cc, la->file, hora_setargs_apply_cluster, &la->sets, err,
				   sizeof(err))) {
		say(la, err);
		return 2;
	}
	struct hora_train_config tc;
	hora_train_config_defaults(&tc);
	int nkeys = 0;
	if (hora_config_load_train(&tc, la->file, &nkeys, err, sizeof(err)) ||
	    hora_setargs_apply_train(&tc, &la->sets, err, sizeof(err))) {
		say(la, err);
		return 2;
	}
	if (tc.elastic.restart && !tc.elastic.on) {
		fprintf(stderr, "%s: %s: train.elastic.restart: true needs elastic training, and "
				"train.elastic.enabled is false (a restarted worker can only rejoin "
				"workers that went on without it)\n", who, name);
		return 2;
	}
	if (la->cmd || trains(la, nkeys)) /* a command: the file's train.elastic rules */
		la->ec = tc.elastic;
	else
		for (int i = 0; i < la->sets.n; i++)
			if (hora_setarg_is_train(la->sets.arg[i])) {
				fprintf(stderr, "%s: --set %s: train keys apply to a training job "
						"only, and this job is membership only\n", who, la->sets.arg[i]);
				return 2;
			}
	const char *mode = la->cc.launcher;
	la->local = !strcmp(mode, "local");
	la->netns = !strcmp(mode, "netns");
	la->tpl = !strcmp(mode, "ssh") ? la->cc.ssh_command : mode;
	if (!la->local && !la->netns && !strstr(la->tpl, "{cmd}")) {
		fprintf(stderr, "%s: %s: cluster.launcher '%s' must be local, ssh, netns or a "
				"command template containing {cmd}\n", who, name, mode);
		return 2;
	}
	if (la->cmd && la->cc.bind && !la->local && !la->netns) {
		fprintf(stderr, "%s: %s: cluster.bind: core pins the processes it starts on this host; a "
				"command on a remote host (launcher %s) cannot be pinned from here (bind: none, "
				"or pin it in the command)\n", who, name, mode);
		return 2;
	}
	for (int k = 0; la->netns && k < la->cc.nnodes; k++)
		if (!la->cc.nodes[k].netns[0]) {
			fprintf(stderr, "%s: %s: cluster.nodes[%d].netns is missing "
					"(launcher netns)\n", who, name, k);
			return 2;
		}
	return 0;
}

/* argv of worker g (NULL-terminated; strings borrowed from la and gs):
 * `hora worker --config F --proc G [--set K=V]... ARGS`, or the command. */
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
	if (la->cmd) {
		for (int i = 0; i < la->ncmd && na < cap - 1; i++)
			args[na++] = la->cmd[i];
		args[na] = NULL;
		return na;
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

/* The shell command line of worker g under ssh or a template: {cmd} is
 * the worker's argv quoted, or a command's remote script (launch_cmd.c). */
static int remote_line(const struct launch *la, int g, int li, const struct hora_cluster_node *node,
		       const char **args, int na, char *line, size_t cap)
{
	char cmd[8192] = "";
	if (la->cmd) {
		if (launch_cmd_remote(la, g, node, li, cmd, sizeof(cmd))) {
			fprintf(stderr, "%s: the command of worker %d is too long for a remote shell "
					"(at most %zu bytes)\n", la->who, g, sizeof(cmd));
			return 1;
		}
	} else {
		size_t k2 = 0;
		for (int i = 0; i < na && k2 < sizeof(cmd) - 1; i++) {
			char q[1024];
			launch_quote(q, sizeof(q), args[i]);
			k2 += (size_t)snprintf(cmd + k2, sizeof(cmd) - k2, "%s%s", i ? " " : "", q);
		}
	}
	fill(line, cap, la->tpl, node->host, cmd);
	return 0;
}

/* Write the payload on the child's stdin (a pipe) and close it; a child
 * that exits first (ssh could not connect) is no reason to die of SIGPIPE. */
static void send_payload(const struct launch *la, int fd)
{
	struct sigaction ign = {.sa_handler = SIG_IGN}, old;
	sigaction(SIGPIPE, &ign, &old);
	for (size_t off = 0; off < la->npayload;) {
		ssize_t w = write(fd, la->payload + off, la->npayload - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	close(fd);
	sigaction(SIGPIPE, &old, NULL);
}

/* Fork worker g with its output on a pipe into ch. 0, or 1 (pipe failed). */
int launch_start_worker(const struct launch *la, int g, struct launch_child *ch)
{
	int local_i, k = hora_cluster_locate(&la->cc, g, &local_i);
	const struct hora_cluster_node *node = &la->cc.nodes[k];
	char gs[16];
	snprintf(gs, sizeof(gs), "%d", g);
	const char *args[HORA_SETARG_MAX * 2 + LAUNCH_MAX_ARGS + 16];
	int na = worker_args(la, node, gs, args, (int)(sizeof(args) / sizeof(args[0])));
	char line[16384];
	const bool remote = !la->local && !la->netns, feed = remote && la->cmd;
	if (remote && remote_line(la, g, local_i, node, args, na, line, sizeof(line)))
		return 1;
	int pfd[2], in[2] = {-1, -1};
	if (pipe2(pfd, O_CLOEXEC) || (feed && pipe2(in, O_CLOEXEC))) {
		fprintf(stderr, "%s: pipe: %s\n", la->who, strerror(errno));
		return 1;
	}
	/* the forwarded signals held from fork to the child's reset: one sent
	 * meanwhile acts on the child (default action) instead of setting the
	 * copy of g_fwd it inherited */
	sigset_t hold, old;
	sigemptyset(&hold);
	for (size_t i = 0; i < sizeof(fwd_sigs) / sizeof(fwd_sigs[0]); i++)
		sigaddset(&hold, fwd_sigs[i]);
	sigprocmask(SIG_BLOCK, &hold, &old);
	pid_t pid = fork();
	if (pid == 0) {
		/* its own process group (a worker on this machine): a terminal's
		 * Ctrl-C reaches the launcher alone, which forwards it once (not
		 * twice), and a kill reaches what the worker started too. Not an
		 * ssh client: it stays in the foreground group, where a prompt of a
		 * template without BatchMode can read the terminal. */
		if (!remote)
			setpgid(0, 0);
		for (size_t i = 0; i < sizeof(fwd_sigs) / sizeof(fwd_sigs[0]); i++)
			signal(fwd_sigs[i], SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (!remote && isatty(STDIN_FILENO)) { /* a background group reading the terminal stops */
			int dn = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (dn >= 0)
				dup2(dn, STDIN_FILENO);
		}
		if (isatty(STDOUT_FILENO)) /* rank 0 draws its bar through us */
			setenv("HORA_PROGRESS", "bar", 1);
		dup2(pfd[1], STDOUT_FILENO);
		dup2(pfd[1], STDERR_FILENO);
		if (feed)
			dup2(in[0], STDIN_FILENO);
		if (la->cmd && !remote)
			launch_cmd_env(la, g, node, local_i);
		if (remote)
			execl("/bin/sh", "sh", "-c", line, (char *)NULL);
		else
			execvp(args[0], (char *const *)args);
		fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
		_exit(127);
	}
	if (pid > 0 && !remote)
		setpgid(pid, pid); /* as the child does: whichever runs first, no kill finds none */
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(pfd[1]);
	if (feed) {
		close(in[0]);
		if (pid > 0)
			send_payload(la, in[1]);
		else
			close(in[1]);
	}
	*ch = (struct launch_child){.pid = pid, .fd = pfd[0], .pidfd = -1, .g = g, .host = node->host};
	if (pid < 0) {
		ch->done = true;
		ch->status = 127 << 8;
		ch->died_at = hora_clock_s();
	} else {
		ch->pidfd = launch_pidfd_open(pid); /* -1: its exit is seen by the reaps alone */
	}
	return 0;
}

static void forward_signal(const char *who, struct launch_child *ch, int n, int running)
{
	int sig = g_fwd;
	g_fwd = 0;
	g_forwarded = sig;
	fprintf(stderr, "%s: forwarding signal %d to %d worker(s)\n", who, sig, running);
	for (int g = 0; g < n; g++)
		if (!ch[g].done && ch[g].pid > 0)
			launch_kill(ch[g].pid, sig);
}

static bool failed(const struct launch_child *c)
{
	return c->done && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0);
}

/* grace_s after the first failure, or after a signal was forwarded,
 * SIGKILL the workers still running, naming each (once). */
static void end_stragglers(const char *who, struct launch_child *ch, int n, double grace_s, double *failed_at,
			   bool *killed)
{
	if (*killed)
		return;
	int first = -1;
	for (int g = 0; g < n && first < 0; g++)
		if (failed(&ch[g]))
			first = g;
	if (first < 0 && !g_forwarded)
		return;
	if (*failed_at < 0) /* when it died (or now: the signal) */
		*failed_at = first >= 0 ? ch[first].died_at : hora_clock_s();
	if (hora_clock_s() - *failed_at < grace_s)
		return;
	*killed = true;
	char why[64];
	if (first >= 0)
		snprintf(why, sizeof(why), "worker %d failed", first);
	else
		snprintf(why, sizeof(why), "the launcher forwarded signal %d", g_forwarded);
	for (int g = 0; g < n; g++)
		if (!ch[g].done && ch[g].pid > 0) {
			fprintf(stderr, "%s: worker %d on %s is still running %.1f s after %s "
					"(stopped or hung?): killing it (SIGKILL)\n",
				who, g, ch[g].host, grace_s, why);
			launch_kill(ch[g].pid, SIGKILL); /* works on a stopped process too */
		}
}

/* Relay output and signals until every worker has exited; grace_s after
 * a worker failed, end the others (end_stragglers). With er (elastic), a
 * worker's death ends no one: elastic_exits, elastic_stragglers. */
static void supervise(const struct launch *la, struct launch_child *ch, int n, int running, double grace_s,
		      struct launch_elastic *er)
{
	struct pollfd *pf = calloc(2 * (size_t)n, sizeof(*pf)); /* the pipes and the pidfds */
	double failed_at = -1;
	bool killed = false;
	while (running) {
		if (g_fwd) {
			forward_signal(la->who, ch, n, running);
			if (er && er->stop_at < 0)
				er->stop_at = hora_clock_s();
		}
		running -= launch_wait(ch, n, pf);
		if (er)
			running += launch_elastic_exits(la, er, ch, n, g_fwd != 0);
		if (running && er)
			launch_elastic_stragglers(er, ch, n);
		else if (running)
			end_stragglers(la->who, ch, n, grace_s, &failed_at, &killed);
	}
	free(pf);
	launch_drain_rest(ch, n);
}

/* Name each failed worker with its last lines; returns how many failed. */
static int report(const char *who, const struct launch_child *ch, int n)
{
	int failed = 0;
	for (int g = 0; g < n; g++) {
		int st = ch[g].status;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			continue;
		failed++;
		if (WIFSIGNALED(st))
			fprintf(stderr, "%s: worker %d on %s was killed by signal %d; last lines:\n",
				who, g, ch[g].host, WTERMSIG(st));
		else
			fprintf(stderr, "%s: worker %d on %s exited with status %d; last lines:\n",
				who, g, ch[g].host, WEXITSTATUS(st));
		int from = ch[g].ntail > LAUNCH_TAIL ? ch[g].ntail - LAUNCH_TAIL : 0;
		for (int i = from; i < ch[g].ntail; i++)
			fprintf(stderr, "    %s\n", ch[g].tail[i % LAUNCH_TAIL]);
	}
	printf("%s: %d of %d workers succeeded\n", who, n - failed, n);
	return failed;
}

void launch_signals_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	for (size_t i = 0; i < sizeof(fwd_sigs) / sizeof(fwd_sigs[0]); i++)
		sigaction(fwd_sigs[i], &sa, NULL);
	/* output to a reader that went away (hora run ... | head) fails with
	 * EPIPE instead of killing the launcher before it cleans up (its
	 * temporary directory) and ends its workers; each worker gets SIGPIPE's
	 * default back before exec */
	signal(SIGPIPE, SIG_IGN);
}

bool launch_signal_pending(void)
{
	return g_fwd != 0;
}

/* Start worker 0..n-1; when one cannot be started (no pipe), stop the ones
 * already started and mark the rest failed (127). */
static void start_all(const struct launch *la, struct launch_child *ch, int n, struct launch_elastic *er)
{
	int started = 0;
	while (started < n && !launch_start_worker(la, started, &ch[started]))
		started++;
	if (started == n)
		return;
	er->stop_at = hora_clock_s(); /* no restarts of the ones stopped here */
	for (int g = 0; g < started; g++)
		if (ch[g].pid > 0)
			launch_kill(ch[g].pid, SIGTERM);
	for (int g = started; g < n; g++)
		ch[g] = (struct launch_child){.fd = -1, .pidfd = -1, .g = g, .done = true, .status = 127 << 8,
					      .died_at = hora_clock_s(), .host = "-"};
}

int launch_run(struct launch *la)
{
	const int n = hora_cluster_size(&la->cc);
	struct launch_child *ch = calloc((size_t)n, sizeof(*ch));
	if (!ch) {
		fprintf(stderr, "%s: out of memory\n", la->who);
		return 1;
	}
	launch_signals_install();
	printf("%s: %s: %d workers on %d node(s), launcher %s\n", la->who, la->cc.name, n,
	       la->cc.nnodes, la->cc.launcher);
	fflush(stdout);
	const int sus_ms = la->cc.membership.suspect_timeout_ms; /* the file's, with every --set */
	const double grace_s = 2.0 * (sus_ms > 0 ? sus_ms : 1000) / 1e3 + 3.0;
	struct launch_elastic er = {.who = la->who, .ec = &la->ec, .grace_s = grace_s, .t0 = hora_clock_s(),
				    .done_at = -1, .stop_at = -1, .frozen_at = -1};
	start_all(la, ch, n, &er);
	int running = 0, rc;
	for (int g = 0; g < n; g++)
		running += !ch[g].done;
	if (la->ec.on) {
		supervise(la, ch, n, running, grace_s, &er);
		rc = launch_elastic_report(&er, ch, n);
	} else {
		supervise(la, ch, n, running, grace_s, NULL);
		rc = report(la->who, ch, n) ? 1 : 0;
		if (g_forwarded && !rc) { /* stopped, not completed, whatever the workers said */
			printf("%s: stopped by signal %d (forwarded to the workers)\n", la->who, g_forwarded);
			rc = 1;
		}
	}
	free(ch);
	return rc;
}

/* la->self: this executable, or HORA_LAUNCH_WORKER's program. 0 or 1. */
static int find_self(struct launch *la)
{
	ssize_t sl = readlink("/proc/self/exe", la->self, sizeof(la->self) - 1);
	if (sl <= 0) {
		fprintf(stderr, "%s: cannot resolve /proc/self/exe: %s\n", la->who, strerror(errno));
		return 1;
	}
	la->self[sl] = 0;
	const char *hook = hora_env_launch_worker();
	if (hook && !la->cmd) {
		fprintf(stderr, "%s: HORA_LAUNCH_WORKER=%s runs instead of hora worker "
				"(a test hook)\n", la->who, hook);
		snprintf(la->self, sizeof(la->self), "%s", hook);
	}
	return 0;
}

int hora_cmd_launch(int argc, char **argv)
{
	struct launch *la = calloc(1, sizeof(*la));
	if (!la) {
		perror("hora launch");
		return 1;
	}
	la->who = "hora launch";
	struct launch_tmp tmp = {0};
	int rc = parse_args(la, argc, argv);
	if (rc)
		goto out;
	launch_signals_install(); /* before a private copy exists: removed on a signal too */
	if ((rc = launch_check_file(la)) || (rc = find_self(la)))
		goto out;
	if (la->cmd && la->sets.n) { /* the command reads the file itself: an edited copy */
		if ((rc = launch_tmp_edited_copy(&tmp, la->who, la->file, &la->sets, la->cfgpath,
						 sizeof(la->cfgpath))))
			goto out;
		la->shown = la->file; /* checked again: what the commands read (as hora run does) */
		la->file = la->cfgpath;
		la->sets = (struct hora_setargs){0};
		if ((rc = launch_check_file(la)))
			goto out;
	} else if (!realpath(la->file, la->cfgpath)) {
		fprintf(stderr, "hora launch: %s: %s\n", la->file, strerror(errno));
		rc = 1;
		goto out;
	}
	if (la->cmd && !la->local && !la->netns && (rc = launch_cmd_payload(la)))
		goto out;
	rc = launch_signal_pending() ? 1 : launch_run(la);
out:
	launch_tmp_remove(&tmp);
	free(la->payload);
	free(la);
	return rc < 0 ? 0 : rc;
}
