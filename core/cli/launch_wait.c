/* launch_wait.c - the launcher's wait for its workers (launch.h): their
 * output relayed as it comes, and each exit seen when it happens.
 *
 * One poll holds every worker's output pipe and, where the kernel has them
 * (pidfd_open, Linux >= 5.3), a pidfd per worker, readable once the process
 * exited: the poll wakes at a death, and the time the launcher gives it
 * (launch_child.died_at: the "at T s" of its lines, the restart, the grace
 * period) is when it happened, not when the next poll timed out. A killed
 * worker's pipe reaches its end before the process is a zombie, so without
 * a pidfd the reap that follows the pipe's end may miss it: then the polls
 * that follow wait 10 ms instead of 200 ms until it is reaped. Not the
 * start of workers nor what their exits mean (launch.c,
 * launch_elastic.c).
 */
#include "launch.h"

#include "net/util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int launch_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
	const long fd = syscall(SYS_pidfd_open, pid, 0); /* close-on-exec: no worker inherits it */
	if (fd < 0)
		return -1;
	/* the output pipes come first: a pidfd takes no descriptor from the
	 * upper half of RLIMIT_NOFILE (a launch of many workers) */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY && (rlim_t)fd >= rl.rlim_cur / 2) {
		close((int)fd);
		return -1;
	}
	return (int)fd;
#else
	(void)pid;
	return -1;
#endif
}

/* Read what is ready on each pipe of the polled set (pf[0..np)). */
static void relay(struct launch_child *ch, int n, const struct pollfd *pf)
{
	for (int g = 0, j = 0; g < n; g++) {
		if (ch[g].fd < 0 || !pf[j++].revents)
			continue;
		ssize_t r = read(ch[g].fd, ch[g].buf + ch[g].have, sizeof(ch[g].buf) - ch[g].have);
		if (r > 0) {
			ch[g].have += (size_t)r;
			launch_drain(&ch[g], false);
		} else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
			launch_drain(&ch[g], true);
			close(ch[g].fd);
			ch[g].fd = -1;
		}
	}
}

/* Reap the children that exited, each with the time seen; how many. */
static int reap(struct launch_child *ch, int n)
{
	int st, reaped = 0;
	pid_t p;
	while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
		const double now = hora_clock_s();
		for (int g = 0; g < n; g++)
			if (ch[g].pid == p && !ch[g].done) {
				ch[g].done = true;
				ch[g].status = st;
				ch[g].died_at = now;
				if (ch[g].pidfd >= 0)
					close(ch[g].pidfd);
				ch[g].pidfd = -1;
				reaped++;
			}
	}
	return reaped;
}

int launch_wait(struct launch_child *ch, int n, struct pollfd *pf)
{
	if (!pf) { /* no memory for the poll set: the exits alone, 50 ms apart */
		usleep(50000);
		return reap(ch, n);
	}
	int np = 0, nfd;
	bool blind = false; /* a worker whose pipe ended, not reaped, without a pidfd */
	for (int g = 0; g < n; g++)
		if (ch[g].fd >= 0)
			pf[np++] = (struct pollfd){.fd = ch[g].fd, .events = POLLIN};
	nfd = np;
	for (int g = 0; g < n; g++) {
		if (ch[g].done || ch[g].pid <= 0)
			continue;
		if (ch[g].pidfd >= 0)
			pf[nfd++] = (struct pollfd){.fd = ch[g].pidfd, .events = POLLIN};
		else
			blind |= ch[g].fd < 0;
	}
	const int wait_ms = blind ? 10 : 200;
	if (nfd)
		poll(pf, (nfds_t)nfd, wait_ms);
	else
		usleep(1000 * wait_ms); /* nothing to poll: the pipes ended, no pidfds */
	if (np)
		relay(ch, n, pf);
	return reap(ch, n);
}

void launch_drain_rest(struct launch_child *ch, int n)
{
	for (int g = 0; g < n; g++)
		if (ch[g].fd >= 0) {
			fcntl(ch[g].fd, F_SETFL, fcntl(ch[g].fd, F_GETFL) | O_NONBLOCK);
			ssize_t r;
			while ((r = read(ch[g].fd, ch[g].buf + ch[g].have, sizeof(ch[g].buf) - ch[g].have)) > 0) {
				ch[g].have += (size_t)r;
				launch_drain(&ch[g], false);
			}
			launch_drain(&ch[g], true);
			close(ch[g].fd);
			ch[g].fd = -1;
		}
}
