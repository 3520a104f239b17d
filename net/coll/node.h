/* node.h - which ranks of a communicator share a host, and the
 * authenticated Unix sockets between them (net/coll only).
 *
 * At create, right after the TCP link is up (every peer authenticated by
 * the cluster secret), every rank sends every other one its node id on the
 * queued path: boot id, network namespace (the inode of /proc/thread-self/ns/net: a thread may have entered another),
 * pid, uid, and its shm and hierarchical settings (which must agree: a rank
 * with other settings is named). Ranks with the same boot id and namespace
 * are one host (ranks in different namespaces are different hosts on
 * purpose: the tests build hosts that way). Hosts are numbered by their
 * lowest rank; a host's ranks are its local ranks 0.. in rank order.
 *
 * The shared-memory paths then need a Unix socket to each local peer, to
 * pass memfds over: every rank listens on an abstract socket (no file; the
 * abstract namespace is the network namespace's) whose name is derived
 * from the secret, the view and its address, so only a rank that knows the
 * secret finds it, and it exists only during create. Each rank connects to
 * its lower local ranks and accepts its higher ones; the acceptor checks
 * the connecting process with SO_PEERCRED (the pid that rank announced
 * over the authenticated link, our uid) and a tag derived from the secret.
 */
#ifndef HORA_NET_COLL_NODE_H
#define HORA_NET_COLL_NODE_H

#include "net/coll/internal.h"

#include <stdbool.h>
#include <sys/types.h>

struct node_map {
	int nhosts, host;  /* hosts, and this rank's */
	int *host_of;      /* n: each rank's host */
	int *host_size;    /* nhosts: ranks on each host */
	int nlocal, lrank; /* ranks on this host, this rank among them */
	int *local;        /* nlocal: their ranks, in order */
	pid_t *lpid;       /* nlocal: their pids */
	bool uniform;      /* every host has nlocal ranks */
};

/* The node ids over c->link (every rank calls it at create). */
int node_exchange(struct hora_net_comm *c, struct node_map *m, char *err, size_t errlen);
void node_map_free(struct node_map *m);
/* Listen on this rank's abstract socket (before node_exchange, so that a
 * peer that learns our id finds it). Returns the fd or -errno. */
int node_listen(const struct hora_net_comm_cfg *cfg, char *err, size_t errlen);
/* One connected, checked socket to every local peer: socks[l] (nlocal
 * entries, -1 at lrank). Closes lfd. */
int node_connect(const struct hora_net_comm_cfg *cfg, const struct node_map *m, int lfd, int *socks,
		 char *err, size_t errlen);
/* "2 hosts x 2 ranks", "1 host x 4 ranks", "2 hosts (3, 1 ranks)" */
void node_describe(const struct node_map *m, char *buf, size_t len);

#endif
