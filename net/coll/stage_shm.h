/* stage_shm.h - the node-local stage (stage.h) over one shared-memory
 * arena among the ranks of a host (net/coll only).
 *
 * Local rank 0 creates the arena (a sealed memfd, as net/shm's channels:
 * no name, nothing in /dev/shm) and passes it to every other local rank
 * over socks[l] (SCM_RIGHTS); the others attach. socks are connected Unix
 * sockets to each local peer, already authenticated by the caller
 * (node.c); they stay the caller's (borrowed; the stage may use them as
 * lifelines while it lives, so they must stay open until it is destroyed,
 * though the array itself is copied and may go after create) and must be
 * used by nothing else during create. pids[l]: each local rank's pid (this pid namespace), to tell a
 * dead peer from a slow one.
 */
#ifndef HORA_NET_COLL_STAGE_SHM_H
#define HORA_NET_COLL_STAGE_SHM_H

#include "net/coll/stage.h"

#include <sys/types.h>

#define STAGE_SHM_MAX_LOCAL 256 /* local ranks an arena takes (more: no stage, TCP) */

struct hora_net_stage_shm_cfg {
	int lrank, nlocal;
	const int *socks;   /* nlocal: socks[l] to local rank l (-1 at lrank) */
	const pid_t *pids;  /* nlocal */
	size_t slot_bytes;  /* per rank and buffer (0: a default the bench chose) */
	int spin_us;        /* poll this long before sleeping (0: none) */
	int timeout_ms;     /* no progress for this long: -ETIMEDOUT (0: never) */
	int connect_timeout_ms; /* create: the arena's fd from local rank 0 (0: 30 s) */
};

int hora_net_stage_shm_create(const struct hora_net_stage_shm_cfg *cfg, struct hora_net_stage **out,
			      char *err, size_t errlen);

#endif
