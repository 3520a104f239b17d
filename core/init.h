/* init.h - joining a job from a cluster configuration already read
 * (internal: `hora worker` applies --set and flags to the file first, then
 * joins with exactly what it validated; hora_init reads the file itself). */
#ifndef HORA_CORE_INIT_H
#define HORA_CORE_INIT_H

#include "cluster.h"

#include <stddef.h>

struct hora_comm;

/* hora_init over cc (from hora_cluster_load or hora_cluster_load_edit;
 * borrowed for the call only): join the membership, wait for the view with
 * every worker of cc, form the communicator. Same returns as hora_init. */
int hora_init_cluster(const struct hora_cluster_config *cc, struct hora_comm **out, char *err,
		      size_t errlen);

#endif
