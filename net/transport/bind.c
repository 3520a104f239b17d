/* bind.c - bind a listening socket, waiting a moment for a port that a
 * process which just died still holds: io_uring releases a dead process's
 * files asynchronously (its ring's pending receives and accepts are
 * cancelled by a kernel worker after the exit), so a worker started again
 * at once (a restart, an elastic rejoin, a replaced pod) can find its own
 * port busy for some milliseconds. A port another process holds fails
 * after the wait (1 s: the whole job then stops within about that, every
 * worker naming the address). */
#include "internal.h"

#include <errno.h>
#include <time.h>

/* how long EADDRINUSE is retried, and how often */
#define BIND_RETRY_MS 1000
#define BIND_STEP_MS 20

int hora_net_bind_retry(int fd, const struct sockaddr *addr, socklen_t len)
{
	for (int waited = 0;; waited += BIND_STEP_MS) {
		if (!bind(fd, addr, len))
			return 0;
		if (errno != EADDRINUSE || waited >= BIND_RETRY_MS)
			return -1;
		const struct timespec ts = {0, BIND_STEP_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
}
