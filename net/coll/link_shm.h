/* link_shm.h - the shared-memory link (link.h) of a communicator whose
 * ranks are all on one host: two net/shm channels per pair, one for the
 * queued path and one for the caller-driven path (the two streams of
 * link.h), net/coll only.
 *
 * Setup takes one connected Unix socket per peer, already authenticated by
 * the caller (node.c: abstract socket, SO_PEERCRED checked against the pid
 * the peer announced over the authenticated TCP link). Over it the lower
 * rank of each pair creates the pair's channels and passes their memfds;
 * the higher attaches. The sockets then stay the link's lifelines (the
 * link owns them from create on, success or not, and closes them at
 * destroy).
 */
#ifndef HORA_NET_COLL_LINK_SHM_H
#define HORA_NET_COLL_LINK_SHM_H

#include "net/coll/link.h"

#include <stddef.h>

struct hora_net_link_shm_cfg {
	int rank, nranks;
	int *socks;           /* nranks: socks[r] to rank r (-1 at rank); owned by the link */
	size_t queued_ring;   /* bytes per direction of a queued-path channel (0: 4 MiB) */
	size_t fast_ring;     /* bytes per direction of a caller-driven channel (0: 512 KiB) */
	int spin_us;          /* both paths: poll this long before sleeping (0: 200, < 0: never) */
	int io_timeout_ms;    /* no progress for this long fails the operation (0: never) */
	int connect_timeout_ms; /* setup: the whole exchange of memfds and hellos (0: 30 s, < 0: none) */
};

/* Collective: every rank of the communicator calls it at about the same
 * time (the sockets connected). Blocks until every pair's channels are up
 * and every peer's hello (its rank and size) was checked, or fails: a rank
 * that never calls it -ETIMEDOUT naming it after connect_timeout_ms (at
 * once -ECONNRESET when its end of the socket closed), a rank of another
 * size -EINVAL naming both sizes. Starts the link's progress thread
 * (net/coll/README.md "The shared-memory link"). 0 or -errno with err. */
int hora_net_link_shm_create(const struct hora_net_link_shm_cfg *cfg, struct hora_net_link **out,
			     char *err, size_t errlen);

#endif
