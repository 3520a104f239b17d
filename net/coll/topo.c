/* topo.c - what the hosts of a communicator allow, built at create (after
 * the TCP link is up, node.h):
 *
 * - every rank alone on its host: nothing (TCP, as before);
 * - several ranks on this host and transport.shm auto: the shared-memory
 *   stage among them (stage_shm.c, one arena per host);
 * - every rank on one host: also the shared-memory link (link_shm.c) in
 *   place of the TCP link, which is closed: every algorithm then runs over
 *   shared memory;
 * - several hosts with the same number (>= 2) of ranks each and
 *   collectives.hierarchical not off: the cross-host communicator, one rank
 *   per host (those with our local rank), over a view of the TCP link.
 *   Unequal hosts (3 + 1) keep the flat ring: flat_why says so.
 */
#include "net/coll/internal.h"
#include "net/coll/link_shm.h"
#include "net/coll/link_view.h"
#include "net/coll/node.h"
#include "net/coll/stage_shm.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int stage_up(struct hora_net_comm *c, const int *socks, char *err, size_t errlen)
{
	const struct node_map *m = c->node;
	const struct hora_net_stage_shm_cfg sc = {.lrank = m->lrank, .nlocal = m->nlocal, .socks = socks,
						  .pids = m->lpid, .spin_us = c->spin_us,
						  .timeout_ms = c->cfg.opts.io_timeout_ms,
						  .connect_timeout_ms = c->cfg.connect_timeout_ms};
	char e[300];
	int rc = hora_net_stage_shm_create(&sc, &c->stage, e, sizeof(e));
	if (rc)
		snprintf(err, errlen, "rank %d: the shared-memory stage of its host: %s", c->rank, e);
	return rc;
}

/* every rank on this host: the shared-memory link takes over from TCP */
static int link_up(struct hora_net_comm *c, int *socks, char *err, size_t errlen)
{
	const struct hora_net_link_shm_cfg lc = {.rank = c->rank, .nranks = c->n, .socks = socks,
						 .spin_us = c->spin_us,
						 .io_timeout_ms = c->cfg.opts.io_timeout_ms,
						 .connect_timeout_ms = c->cfg.connect_timeout_ms};
	struct hora_net_link *shm;
	char e[300];
	int rc = hora_net_link_shm_create(&lc, &shm, e, sizeof(e));
	if (rc)
		return snprintf(err, errlen, "rank %d: the shared-memory link: %s", c->rank, e), rc;
	c->link->ops->destroy(c->link);
	c->link = shm;
	return 0;
}

/* the ranks with our local rank, one per host, in host order */
static int cross_up(struct hora_net_comm *c)
{
	const struct node_map *m = c->node;
	int *map = malloc(sizeof(int) * (size_t)m->nhosts);
	if (!map)
		return -ENOMEM;
	int *seen = calloc((size_t)m->nhosts, sizeof(int));
	for (int r = 0; seen && r < c->n; r++) {
		const int h = m->host_of[r];
		if (seen[h]++ == m->lrank)
			map[h] = r;
	}
	struct hora_net_link *v = seen ? hora_net_link_view(c->link, m->host, m->nhosts, map) : NULL;
	free(seen);
	if (!v || !(c->cross = comm_sub(c, m->host, m->nhosts, v))) {
		if (v)
			v->ops->destroy(v);
		free(map);
		return -ENOMEM;
	}
	c->cross_map = map;
	return 0;
}

static void why_flat(struct hora_net_comm *c)
{
	const struct node_map *m = c->node;
	const char *why = c->cfg.hierarchical == 2 ? "collectives.hierarchical is off"
			  : m->nhosts < 2             ? "one host"
			  : m->nlocal < 2 && m->uniform ? "one rank per host"
			  : !m->uniform                 ? "the hosts have unequal numbers of ranks"
			  : c->cfg.shm                  ? "transport.shm is off"
							: "no shared-memory stage";
	snprintf(c->flat_why, sizeof(c->flat_why), "%s", why);
}

int topo_setup(struct hora_net_comm *c, char *err, size_t errlen)
{
	int lfd = -1, rc;
	uint8_t nonce[NODE_NONCE]; /* this create's: a name seen once cannot be taken for the next */
	randombytes_buf(nonce, sizeof(nonce));
	if (!c->cfg.shm && (lfd = node_listen(&c->cfg, nonce, err, errlen)) < 0)
		return lfd;
	if (!(c->node = calloc(1, sizeof(*c->node))))
		rc = -ENOMEM;
	else
		rc = node_exchange(c, nonce, c->node, err, errlen);
	struct node_map *m = c->node;
	if (rc || lfd < 0 || m->nlocal < 2 || m->nlocal > STAGE_SHM_MAX_LOCAL) {
		if (lfd >= 0)
			close(lfd);
		if (!rc)
			why_flat(c);
		return rc;
	}
	int *socks = malloc(sizeof(int) * (size_t)m->nlocal);
	if (!socks)
		return close(lfd), -ENOMEM;
	if ((rc = node_connect(&c->cfg, m, lfd, socks, err, errlen))) {
		free(socks);
		return rc;
	}
	c->lsocks = socks;
	c->nlsocks = m->nlocal;
	if ((rc = stage_up(c, socks, err, errlen)))
		return rc;
	if (m->nhosts == 1) { /* the link owns the sockets from here on */
		c->lsocks = NULL;
		rc = link_up(c, socks, err, errlen);
		free(socks);
		return rc;
	}
	if (c->cfg.hierarchical != 2 && m->uniform && (rc = cross_up(c)))
		snprintf(err, errlen, "rank %d: out of memory for the cross-host communicator", c->rank);
	if (!c->cross)
		why_flat(c);
	return rc;
}

void topo_free(struct hora_net_comm *c)
{
	if (c->cross)
		hora_net_comm_destroy(c->cross); /* its link is a view: frees only the view */
	c->cross = NULL;
	free(c->cross_map);
	c->cross_map = NULL;
	stage_leave(c); /* under stage_mu: an interrupt may come from another thread */
	for (int i = 0; c->lsocks && i < c->nlsocks; i++)
		if (c->lsocks[i] >= 0)
			close(c->lsocks[i]);
	free(c->lsocks);
	c->lsocks = NULL;
	if (c->node)
		node_map_free(c->node);
	free(c->node);
	c->node = NULL;
}

int topo_describe(const struct hora_net_comm *c, char *buf, size_t len)
{
	char hosts[96] = "1 host x 1 rank";
	if (c->node)
		node_describe(c->node, hosts, sizeof(hosts));
	const char *links = !c->node || !c->stage ? "TCP"
			    : c->node->nhosts == 1 ? "shared memory"
						   : "shared memory within a host, TCP across";
	return snprintf(buf, len, "%d ranks on %s, %s; hierarchical: %s", c->n, hosts, links,
			c->cross ? "yes" : c->flat_why[0] ? c->flat_why : "no");
}

void hora_net_comm_local(const struct hora_net_comm *c, int *lrank, int *nlocal, int *local0)
{
	const struct node_map *m = c->node;
	*lrank = m ? m->lrank : 0;
	*nlocal = m ? m->nlocal : 1;
	*local0 = m ? m->local[0] : c->rank;
}

struct hora_net_comm *hora_net_comm_cross(struct hora_net_comm *c)
{
	return c->cross;
}

int hora_net_comm_io_timeout_ms(const struct hora_net_comm *c)
{
	return c->cfg.opts.io_timeout_ms;
}
