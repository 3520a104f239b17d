/* launch.c - `hora launch CLUSTER.yaml [--set key=value]... [-- worker args]`
 *
 * Starts every worker of every node of the cluster file: `hora worker
 * --config FILE --proc G [--set K=V]...` per worker G (the worker trains the
 * file's train section with all the others, or runs the membership only), run directly (launcher local), under
 * `ip netns exec NS` (launcher netns, NS = the node's netns), or through a
 * command template ({host}, {cmd}; launcher ssh uses cluster.ssh_command).
 * Each worker's output comes back line by line prefixed "[G host]";
 * SIGINT/SIGTERM are forwarded to the workers (by PID); the exit status is 0
 * only if every worker exited 0, and each failed worker is named with its
 * last lines.
 */
#include "cluster.h"
#include "hora.h"

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
		   "  Starts `hora worker --config CLUSTER.yaml --proc G` for every worker G.\n"
		   "  e.g. hora launch deploy/clusters/local.yaml -- --until-full-view\n");
}

int hora_cmd_launch(int argc, char **argv);
int hora_cmd_launch(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *file = argv[1];
	char err[1024];
	struct hora_cluster_config cc;
	hora_cluster_defaults(&cc);
	const char *sets[MAX_ARGS];
	int nsets = 0, extra = argc;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			extra = i + 1;
			break;
		}
		if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < MAX_ARGS) {
			sets[nsets++] = argv[++i];
			continue;
		}
		fprintf(stderr, "hora launch: unexpected argument '%s'\n", argv[i]);
		usage(stderr);
		return 2;
	}
	if (hora_cluster_load(&cc, file, err, sizeof(err))) {
		fprintf(stderr, "hora launch: %s\n", err);
		return 2;
	}
	for (int i = 0; i < nsets; i++) {
		char key[256];
		const char *eq = strchr(sets[i], '=');
		if (!eq || (size_t)(eq - sets[i]) >= sizeof(key)) {
			fprintf(stderr, "hora launch: --set wants KEY=VALUE (got '%s')\n", sets[i]);
			return 2;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - sets[i]), sets[i]);
		int bad;
		if (!strncmp(key, "train.", 6)) { /* checked here, applied by every worker */
			struct hora_train_config tc;
			hora_train_config_defaults(&tc);
			bad = hora_config_set(&tc, key, eq + 1, err, sizeof(err));
		} else {
			bad = hora_cluster_set(&cc, key, eq + 1, err, sizeof(err));
		}
		if (bad) {
			fprintf(stderr, "hora launch: --set: %s\n", err);
			return 2;
		}
	}
	if (nsets && hora_swim_cfg_check(&cc.membership, err, sizeof(err))) {
		fprintf(stderr, "hora launch: --set: %s\n", err);
		return 2;
	}
	const char *mode = cc.launcher;
	bool local = !strcmp(mode, "local"), netns = !strcmp(mode, "netns");
	const char *tpl = !strcmp(mode, "ssh") ? cc.ssh_command : mode;
	if (!local && !netns && (!strstr(tpl, "{cmd}"))) {
		fprintf(stderr, "hora launch: %s: cluster.launcher '%s' must be local, ssh, netns or a "
				"command template containing {cmd}\n", file, mode);
		return 2;
	}
	char self[PATH_MAX], cfgpath[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0 || !realpath(file, cfgpath)) {
		fprintf(stderr, "hora launch: cannot resolve paths: %s\n", strerror(errno));
		return 1;
	}
	self[sl] = 0;
	int n = hora_cluster_size(&cc);
	struct child *ch = calloc((size_t)n, sizeof(*ch));
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	printf("hora launch: %s: %d workers on %d node(s), launcher %s\n", cc.name, n, cc.nnodes, mode);
	fflush(stdout);
	for (int g = 0; g < n; g++) {
		int local_i, k = hora_cluster_locate(&cc, g, &local_i);
		struct hora_cluster_node *node = &cc.nodes[k];
		char gs[16];
		snprintf(gs, sizeof(gs), "%d", g);
		const char *args[MAX_ARGS * 4 + 16];
		int na = 0;
		if (netns) {
			if (!node->netns[0]) {
				fprintf(stderr, "hora launch: %s: cluster.nodes[%d].netns is missing "
						"(launcher netns)\n", file, k);
				return 2;
			}
			args[na++] = "ip";
			args[na++] = "netns";
			args[na++] = "exec";
			args[na++] = node->netns;
		}
		args[na++] = self;
		args[na++] = "worker";
		args[na++] = "--config";
		args[na++] = cfgpath;
		args[na++] = "--proc";
		args[na++] = gs;
		for (int i = 0; i < nsets; i++) {
			args[na++] = "--set";
			args[na++] = sets[i];
		}
		for (int i = extra; i < argc && na < MAX_ARGS * 4 + 14; i++)
			args[na++] = argv[i];
		args[na] = NULL;
		char cmd[8192] = "", line[16384];
		if (!local && !netns) { /* a remote shell command line */
			size_t k2 = 0;
			for (int i = 0; i < na && k2 < sizeof(cmd) - 1; i++) {
				char q[1024];
				quote(q, sizeof(q), args[i]);
				k2 += (size_t)snprintf(cmd + k2, sizeof(cmd) - k2, "%s%s", i ? " " : "", q);
			}
			fill(line, sizeof(line), tpl, node->host, cmd);
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
			if (!local && !netns)
				execl("/bin/sh", "sh", "-c", line, (char *)NULL);
			else
				execvp(args[0], (char *const *)args);
			fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
			_exit(127);
		}
		close(pfd[1]);
		ch[g] = (struct child){.pid = pid, .fd = pfd[0], .g = g, .host = node->host};
		if (pid < 0) {
			ch[g].done = true;
			ch[g].status = 127 << 8;
		}
	}
	int running = n;
	struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
	while (running) {
		if (g_fwd) {
			int sig = g_fwd;
			g_fwd = 0;
			fprintf(stderr, "hora launch: forwarding signal %d to %d worker(s)\n", sig, running);
			for (int g = 0; g < n; g++)
				if (!ch[g].done && ch[g].pid > 0)
					kill(ch[g].pid, sig);
		}
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
			if (ch[g].fd < 0)
				continue;
			if (pf[j++].revents) {
				ssize_t r = read(ch[g].fd, ch[g].buf + ch[g].have,
						 sizeof(ch[g].buf) - ch[g].have);
				if (r > 0) {
					ch[g].have += (size_t)r;
					drain(&ch[g], false);
				} else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
					drain(&ch[g], true);
					close(ch[g].fd);
					ch[g].fd = -1;
				}
			}
		}
		int st;
		pid_t p;
		while ((p = waitpid(-1, &st, WNOHANG)) > 0)
			for (int g = 0; g < n; g++)
				if (ch[g].pid == p) {
					ch[g].done = true;
					ch[g].status = st;
					running--;
				}
		if (!np && running)
			usleep(50000);
	}
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
	int failed = 0;
	for (int g = 0; g < n; g++) {
		int st = ch[g].status;
		bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
		if (ok)
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
	free(pf);
	free(ch);
	return failed ? 1 : 0;
}
