/* joining.h - one worker's way into the job (core/init.c), shared with the
 * elastic re-forms of core/rejoin.c (internal). */
#ifndef HORA_CORE_JOINING_H
#define HORA_CORE_JOINING_H

#include "cluster.h"
#include "comm.h"
#include "init.h"

#include "net/coll/coll.h"
#include "net/membership/membership.h"
#include "net/transport/handshake.h"

/* filled step by step by hora_init_with */
struct joining {
	const struct hora_init_opts *o;
	struct hora_cluster_config cc;
	uint8_t secret[HORA_NET_SECRET_MAX];
	struct hora_net_opts no; /* the transport's options, secret set */
	struct hora_net_loop *loop;
	struct hora_net_membership *mem;
	int size, node;
	uint64_t uid; /* this worker's membership uid */
	struct hora_swim_view v;
	int rank;
};

/* "host:port" of the worker whose uid this is (its TCP listener, from the
 * file); -1 when the uid is no worker of it. */
int hora_joining_addr(const struct hora_cluster_config *cc, uint64_t uid, char addr[80]);
/* The same as the file writes it (a host name not looked up): for messages. */
int hora_joining_name(const struct hora_cluster_config *cc, uint64_t uid, char addr[80]);
/* The net comm configuration of rank of n over addrs in view. */
void hora_joining_net_cfg(const struct joining *j, int rank, int n, const char *const *addrs,
			  uint64_t view, int timeout_ms, struct hora_net_comm_cfg *nc);

/* A joiner of a running job: whether a member of the installed view (this
 * one is in it) trains in a communicator over an older view. Blocks about
 * 200 ms (a STATUS query). */
bool hora_rejoin_job_running(struct hora_net_membership *m);
/* An elastic communicator over the participants of the next view (at
 * most max_workers of the file's workers; one beyond is refused by name):
 * the first one of the job, or (joiner) one that joins the running job. It
 * owns j's loop and membership from now on. */
int hora_rejoin_join(struct joining *j, bool joiner, struct hora_comm **out, char *err, size_t errlen);

#endif
