/* launch_elastic.c - `hora launch` with train.elastic on (launch.h).
 *
 * A worker that dies is a casualty, not the job's end: the others go on
 * without it, and with restart it is started again. Training has completed
 * when a worker exits 0; the ones running then must exit 0 too, and the ones
 * still running a grace period later (stopped or hung) are killed. Not the
 * relay nor the start of workers (launch.c); the summary's format is in
 * core/cli/README.md.
 */
#include "launch.h"

#include "net/util/clock.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void print_tail(const struct launch_child *c)
{
	int from = c->ntail > LAUNCH_TAIL ? c->ntail - LAUNCH_TAIL : 0;
	for (int i = from; i < c->ntail; i++)
		fprintf(stderr, "    %s\n", c->tail[i % LAUNCH_TAIL]);
}

/* What is left in a dead worker's pipe, without waiting for a process that
 * may still hold it open. */
static void drain_dead(struct launch_child *c)
{
	if (c->fd < 0)
		return;
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
	ssize_t r;
	while ((r = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have)) > 0) {
		c->have += (size_t)r;
		launch_drain(c, false);
	}
	launch_drain(c, true);
	close(c->fd);
	c->fd = -1;
}

/* Start worker c->g again with the same command line, keeping its history.
 * 1 when it runs again, 0 when it could not be started (named). */
static int restart_worker(const struct launch *la, struct launch_elastic *er, struct launch_child *c)
{
	drain_dead(c);
	struct launch_child keep = *c;
	if (launch_start_worker(la, c->g, c)) {
		*c = keep;
		return 0;
	}
	c->restarts = keep.restarts + 1;
	c->ndeaths = keep.ndeaths;
	memcpy(c->death, keep.death, sizeof(c->death));
	if (c->ndeaths <= LAUNCH_DEATHS) {
		c->death[c->ndeaths - 1].restarted_s = hora_clock_s() - er->t0;
		c->death[c->ndeaths - 1].restart_no = c->restarts;
	}
	fprintf(stderr, "%s: restarted worker %d on %s (%d of %d restarts)\n", er->who, c->g, c->host,
		c->restarts, er->ec->restart_limit);
	return !c->done;
}

/* Worker c has just exited: record what it means; with restart, start it
 * again. Returns 1 when it runs again. */
static int elastic_exit(const struct launch *la, struct launch_elastic *er, struct launch_child *ch, int n,
			struct launch_child *c, bool signal_pending)
{
	const double now = c->died_at; /* when it happened (launch_wait.c), not now */
	c->seen = true;
	er->last_exit = now;
	if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
		if (er->done_at < 0) { /* training completed: who is running now must finish */
			er->done_at = now;
			for (int g = 0; g < n; g++)
				ch[g].at_end = !ch[g].done || &ch[g] == c;
		}
		return 0;
	}
	if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 5) { /* HORA_ERR_NOJOB */
		fprintf(stderr, "%s: worker %d on %s found no job to join (it had ended)\n", er->who, c->g,
			c->host);
		return 0;
	}
	enum launch_death_kind kind = LAUNCH_DEATH_CASUALTY;
	if (c->culled)
		kind = LAUNCH_DEATH_CULLED;
	else if (c->at_end)
		kind = LAUNCH_DEATH_LATE;
	if (c->ndeaths < LAUNCH_DEATHS)
		c->death[c->ndeaths] = (struct launch_death){.kind = kind, .status = c->status,
						      .at_s = now - er->t0, .restarted_s = -1};
	c->ndeaths++;
	er->late += kind == LAUNCH_DEATH_LATE;
	if (kind == LAUNCH_DEATH_CULLED)
		return 0;
	char h[64];
	how(c->status, h, sizeof(h));
	if (signal_pending && er->stop_at < 0) /* not forwarded yet (a worker may die of a signal of its own meanwhile) */
		er->stop_at = now;
	/* exit 2 is bad input (a refused joiner, another job): running it again
	 * would fail the same way */
	const bool refused = WIFEXITED(c->status) && WEXITSTATUS(c->status) == 2;
	const bool again = kind == LAUNCH_DEATH_CASUALTY && er->ec->restart && er->stop_at < 0 &&
			   c->restarts < er->ec->restart_limit && !refused;
	const char *next = "; the others go on without it";
	if (kind == LAUNCH_DEATH_LATE)
		next = ", after training completed";
	else if (refused && er->ec->restart)
		next = "; not restarted (bad input: exit 2), the others go on without it";
	else if (again)
		next = "; restarting it";
	else if (er->ec->restart && er->stop_at < 0)
		next = "; no restarts left, the others go on without it";
	fprintf(stderr, "%s: worker %d on %s %s at %.2f s%s%s\n", er->who, c->g, c->host, h,
		now - er->t0, next, c->ntail ? "; last lines:" : "");
	print_tail(c);
	return again ? restart_worker(la, er, c) : 0;
}

int launch_elastic_exits(const struct launch *la, struct launch_elastic *er, struct launch_child *ch,
			 int n, bool signal_pending)
{
	int again = 0;
	for (int g = 0; g < n; g++)
		if (ch[g].done && !ch[g].seen)
			again += elastic_exit(la, er, ch, n, &ch[g], signal_pending);
	return again;
}

/* Whether process pid is stopped (SIGSTOP, a debugger): state T or t in
 * /proc/PID/stat. Under launcher netns, `ip netns exec` execs the worker in
 * the same process; under ssh or a template the child is the shell, never
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

/* What the stragglers are given grace_s after (NULL: nothing yet): the
 * last exit once training completed (the workers finish within moments of
 * each other, and a slow one gets grace_s from the one before it), a signal
 * was forwarded, or every worker still running is stopped (nobody left to
 * go on with). */
static const char *cull_reason(struct launch_elastic *er, const struct launch_child *ch, int n, double now)
{
	if (er->done_at >= 0 && now - er->last_exit >= er->grace_s) /* the others had time to finish */
		return "the others finished";
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

/* grace_s after the last exit once training completed (or a signal, or all
 * running workers stopped), SIGKILL the workers still running (a stopped worker the others
 * dropped, a hung one), naming each (once). */
void launch_elastic_stragglers(struct launch_elastic *er, struct launch_child *ch, int n)
{
	if (er->culled || !(er->cull_why = cull_reason(er, ch, n, hora_clock_s())))
		return;
	er->culled = true;
	for (int g = 0; g < n; g++)
		if (!ch[g].done && ch[g].pid > 0) {
			fprintf(stderr, "%s: worker %d on %s is still running %.1f s after %s "
					"(stopped or hung?): killing it (SIGKILL)\n", er->who,
				g, ch[g].host, er->grace_s, er->cull_why);
			ch[g].culled = true;
			launch_kill(ch[g].pid, SIGKILL); /* works on a stopped process too */
		}
}

/* One clause of the summary for death d of worker c. */
static void death_clause(const struct launch_elastic *er, const struct launch_child *c,
			 const struct launch_death *d, char *out, size_t cap)
{
	char h[64];
	how(d->status, h, sizeof(h));
	int k = snprintf(out, cap, "worker %d (%s) %s at %.1f s", c->g, c->host, h, d->at_s);
	if (k < 0 || (size_t)k >= cap)
		return;
	out += k, cap -= (size_t)k;
	if (d->kind == LAUNCH_DEATH_LATE)
		snprintf(out, cap, ", after training completed");
	else if (d->kind == LAUNCH_DEATH_CULLED)
		snprintf(out, cap, " (still running %.1f s after %s: stopped or hung?)", er->grace_s,
			 er->cull_why);
	else if (d->restarted_s >= 0)
		snprintf(out, cap, " and restarted at %.1f s (%d of %d restarts)", d->restarted_s,
			 d->restart_no, er->ec->restart_limit);
	else if (er->ec->restart && c->restarts >= er->ec->restart_limit)
		snprintf(out, cap, " (no restarts left: %d of %d used)", c->restarts, er->ec->restart_limit);
}

/* The elastic outcome: 0 when training completed (a worker exited 0 and so
 * did every worker running then, stragglers killed after it aside), else 1.
 * Prints one summary line naming every death. */
int launch_elastic_report(const struct launch_elastic *er, const struct launch_child *ch, int n)
{
	int completed = 0, late = er->late, deaths = 0;
	for (int g = 0; g < n; g++) {
		completed += WIFEXITED(ch[g].status) && WEXITSTATUS(ch[g].status) == 0;
		deaths += ch[g].ndeaths;
	}
	const bool ok = er->done_at >= 0 && !late;
	if (ok)
		printf("%s: training completed by %d worker%s", er->who, completed,
		       completed == 1 ? "" : "s");
	else if (er->done_at < 0)
		printf("%s: training did not complete (no worker exited 0)", er->who);
	else
		printf("%s: training did not complete (%d worker%s failed after it completed)", er->who, late,
		       late == 1 ? "" : "s");
	for (int g = 0; g < n; g++) {
		for (int i = 0; i < ch[g].ndeaths && i < LAUNCH_DEATHS; i++) {
			char clause[512];
			death_clause(er, &ch[g], &ch[g].death[i], clause, sizeof(clause));
			printf("; %s", clause);
		}
		if (ch[g].ndeaths > LAUNCH_DEATHS)
			printf("; worker %d (%s) died %d more times", g, ch[g].host,
			       ch[g].ndeaths - LAUNCH_DEATHS);
	}
	printf(deaths ? "\n" : "; no worker died\n");
	return ok ? 0 : 1;
}

