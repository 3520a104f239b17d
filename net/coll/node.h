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
 * from the secret, the view, its address and a random nonce of this create
 * (sent in its node id), and which exists only during create. The name is
 * not secret (abstract names are listed in /proc/net/unix), so it protects
 * nothing by itself; what does: both ends check the other process with
 * SO_PEERCRED against the pid the rank announced over the authenticated
 * link and our uid (a connection from anyone else is dropped unread, so a
 * stranger can neither hold the create up nor fail it; a listener that is
 * not the rank's fails it, naming the pid), and the connecting rank sends
 * a tag derived from the secret. The nonce makes a name seen once useless
 * for the next create. Same host also means the same pid namespace and uid
 * (the checks need them): containers sharing only the network are hosts of
 * their own.
 */
#ifndef HORA_NET_COLL_NODE_H
#define HORA_NET_COLL_NODE_H

#include "net/coll/internal.h"

#include <stdbool.h>
#include <sys/types.h>

#define NODE_NONCE 16 /* random bytes per rank and create, in its socket's name */

struct node_map {
	int nhosts, host;  /* hosts, and this rank's */
	int *host_of;      /* n: each rank's host */
	int *host_size;    /* nhosts: ranks on each host */
	int nlocal, lrank; /* ranks on this host, this rank among them */
	int *local;        /* nlocal: their ranks, in order */
	pid_t *lpid;       /* nlocal: their pids */
	uint8_t *lnonce;   /* nlocal x NODE_NONCE: their sockets' nonces */
	bool uniform;      /* every host has nlocal ranks */
};

/* The node ids over c->link (every rank calls it at create). */
int node_exchange(struct hora_net_comm *c, const uint8_t *nonce, struct node_map *m, char *err, size_t errlen);
void node_map_free(struct node_map *m);
/* Listen on this rank's abstract socket (before node_exchange, so that a
 * peer that learns our id finds it). Returns the fd or -errno. */
int node_listen(const struct hora_net_comm_cfg *cfg, const uint8_t *nonce, char *err, size_t errlen);
/* One connected, checked socket to every local peer: socks[l] (nlocal
 * entries, -1 at lrank). Closes lfd. */
int node_connect(const struct hora_net_comm_cfg *cfg, const struct node_map *m, int lfd, int *socks,
		 char *err, size_t errlen);
/* "2 hosts x 2 ranks", "1 host x 4 ranks", "2 hosts (3, 1 ranks)" */
void node_describe(const struct node_map *m, char *buf, size_t len);

#endif
