/* init.c - hora_init / hora_finalize: a worker of a launched job joins the
 * membership, waits for the view that holds every worker of the cluster
 * file, and forms its communicator over that view.
 *
 * Ports: worker g gossips on UDP port_base + 1 + g and takes the same number
 * for TCP (separate port spaces), on its node's host. Ranks follow the view,
 * which orders members by uid; uids carry g + 1 in their high bits, so rank
 * g is worker g in a full view. The membership keeps running on its own
 * loop for the whole job (hora_finalize leaves gracefully).
 */
#include "cluster.h"
#include "comm.h"
#include "init.h"
#include "log.h"

#include "net/membership/membership.h"
#include "net/transport/handshake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hora_init(const char *file, struct hora_comm **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!file || !*file)
		file = getenv("HORA_CONFIG");
	if (!file || !*file) { /* a job of one: no sockets at all */
		static const char *const self[1] = {"127.0.0.1:0"};
		struct hora_net_comm_cfg nc = {.rank = 0, .nranks = 1, .addrs = self};
		hora_net_opts_default(&nc.opts);
		return hora_comm_create_net(&nc, HORA_ALGO_AUTO, out, err, errlen);
	}
	struct hora_cluster_config *cc = calloc(1, sizeof(*cc));
	if (!cc)
		return -ENOMEM;
	hora_cluster_defaults(cc);
	int rc = hora_cluster_load(cc, file, err, errlen);
	if (!rc)
		rc = hora_init_cluster(cc, out, err, errlen);
	free(cc);
	return rc;
}

int hora_init_cluster(const struct hora_cluster_config *cc, struct hora_comm **out, char *err,
		      size_t errlen)
{
	*out = NULL;
	const char *file = cc->file;
	uint8_t secret[HORA_NET_SECRET_MAX];
	int rc;
	struct hora_net_loop *loop = NULL;
	struct hora_net_membership *mem = NULL;
	const int g = hora_cluster_proc_from_env(), size = hora_cluster_size(cc);
	int local, node = hora_cluster_locate(cc, g, &local);
	if (node < 0) {
		snprintf(err, errlen, "worker %d does not exist: %s has %d workers", g, file, size);
		rc = HORA_ERR_CONFIG;
		goto out;
	}
	char why[256], warn[320];
	int slen = hora_net_secret_load(cc->secret_file[0] ? cc->secret_file : NULL,
					getenv("HORA_SECRET"), secret, sizeof(secret), why, sizeof(why),
					warn, sizeof(warn));
	if (slen < 0) {
		snprintf(err, errlen, "%s", why);
		rc = HORA_ERR_CONFIG;
		goto out;
	}
	if (warn[0])
		HORA_LOGW("%s", warn);
	struct hora_net_opts no = cc->transport;
	no.secret = secret;
	no.secret_len = (size_t)slen;
	if ((rc = hora_net_loop_create(&no, &loop, err, errlen)))
		goto out;
	struct hora_swim_cfg sw = cc->membership;
	sw.role = HORA_SWIM_WORKER;
	sw.uid = hora_cluster_uid(g);
	if (!sw.min_members)
		sw.min_members = size;
	struct hora_swim_addr seeds[HORA_CLUSTER_MAX_SEEDS];
	int nseeds = 0;
	for (int i = 0; i < cc->nseeds; i++)
		if (!hora_net_swim_addr(cc->seeds[i], &seeds[nseeds]))
			nseeds++;
	const char *host = cc->nodes[node].host;
	const int port = cc->port_base + 1 + g;
	uint16_t bound;
	if ((rc = hora_net_membership_create(loop, &sw, host, (uint16_t)port, &bound, seeds, nseeds,
					     &mem, err, errlen)))
		goto out;
	/* wait for the full view */
	struct hora_swim_view v;
	int rank = -1;
	bool paused = false;
	const double deadline = hora_now() + (cc->join_timeout_ms > 0 ? cc->join_timeout_ms : 10000) / 1e3 * 3;
	uint64_t known = 0;
	for (;;) {
		hora_net_membership_view(mem, &v, &rank, &paused, why, sizeof(why));
		if (v.id && rank >= 0 && v.n >= size && !paused)
			break;
		if (hora_now() > deadline) {
			snprintf(err, errlen, "worker %d: no view with all %d workers after %.0f s (have %d "
					      "alive%s%s; seeds down, workers missing, or a wrong secret?)",
				 g, size, (cc->join_timeout_ms > 0 ? cc->join_timeout_ms : 10000) / 1e3 * 3,
				 hora_net_membership_alive(mem), paused ? ", paused: " : "", paused ? why : "");
			rc = -ETIMEDOUT;
			goto out;
		}
		hora_net_membership_wait(mem, known, paused, 100);
		known = v.id;
	}
	/* the communicator over the view */
	char (*addr)[80] = calloc((size_t)v.n, 80);
	const char **addrs = calloc((size_t)v.n, sizeof(*addrs));
	if (!addr || !addrs) {
		free(addr);
		free(addrs);
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < v.n; i++) {
		int gi = (int)(v.uids[i] >> 40) - 1, li, ni = hora_cluster_locate(cc, gi, &li);
		if (ni < 0) {
			snprintf(err, errlen, "view %llu holds a member (uid %016llx) that is not a worker of %s",
				 (unsigned long long)v.id, (unsigned long long)v.uids[i], file);
			free(addr);
			free(addrs);
			rc = -EPROTO;
			goto out;
		}
		snprintf(addr[i], 80, "%s:%d", cc->nodes[ni].host, cc->port_base + 1 + gi);
		addrs[i] = addr[i];
	}
	struct hora_net_comm_cfg nc = {.rank = rank, .nranks = v.n, .addrs = addrs,
				       .connect_timeout_ms = cc->join_timeout_ms > 0 ? cc->join_timeout_ms * 3 : 30000,
				       .small_bytes = cc->coll.small_bytes, .medium_bytes = cc->coll.medium_bytes,
				       .segment_bytes = cc->coll.segment_bytes,
				       .slice_bytes = cc->coll.slice_bytes, .spin_us = cc->coll.spin_us};
	nc.opts = no;
	nc.opts.view = (uint32_t)v.id;
	rc = hora_comm_create_net(&nc, (enum hora_algo)cc->coll.algorithm, out, err, errlen);
	free(addr);
	free(addrs);
	if (!rc) {
		hora_comm_own_loop(*out, loop, mem);
		loop = NULL;
		mem = NULL;
		HORA_LOGD("worker %d: rank %d of %d in view %llu", g, rank, v.n, (unsigned long long)v.id);
	}
out:
	hora_net_membership_destroy(mem);
	hora_net_loop_destroy(loop);
	memset(secret, 0, sizeof(secret));
	return rc;
}

void hora_finalize(struct hora_comm *c)
{
	if (!c)
		return;
	struct hora_net_membership *m = hora_comm_membership(c);
	if (m)
		hora_net_membership_leave(m);
	hora_comm_destroy(c);
}

int hora_broadcast_parameters(struct hora_comm *c, float *params, size_t n, int root)
{
	return hora_broadcast(c, params, n, HORA_F32, root);
}
