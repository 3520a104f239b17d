/* init.c - hora_init / hora_finalize: a worker of a launched job joins the
 * membership, waits for the view that holds every worker of the cluster
 * file, and forms its communicator over that view.
 *
 * Ports: worker g gossips on UDP port_base + 1 + g and takes the same number
 * for TCP (separate port spaces), on its node's host. Ranks follow the view,
 * which orders members by uid; uids carry g + 1 in their high bits, so rank
 * g is worker g in a full view. The membership keeps running on its own
 * loop for the whole job (hora_finalize leaves gracefully).
 *
 * hora_init reads its inputs from the environment (env.c, the only place
 * that does); hora_init_with takes them in a struct (the `hora worker`
 * command passes its --proc that way).
 */
#include "init.h"
#include "joining.h"

#include "cluster.h"
#include "comm.h"
#include "env.h"
#include "hosts.h"
#include "log.h"

#include "net/membership/membership.h"
#include "net/transport/handshake.h"
#include "net/util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void hora_init_opts_defaults(struct hora_init_opts *o)
{
	memset(o, 0, sizeof(*o));
}

/* a job of one: no sockets at all */
static int init_single(const struct hora_init_opts *o, struct hora_comm **out, char *err, size_t errlen)
{
	static const char *const self[1] = {"127.0.0.1:0"};
	struct hora_net_comm_cfg nc = {.rank = 0, .nranks = 1, .addrs = self, .spin_us = o->spin_us};
	hora_net_opts_default(&nc.opts);
	int rc = hora_comm_create_net(&nc, HORA_ALGO_AUTO, out, err, errlen);
	if (!rc)
		hora_comm_set_fusion_override(*out, &o->fusion);
	return rc;
}

/* the cluster file, this worker's place in it, and the secret */
static int load_job(struct joining *j, char *err, size_t errlen)
{
	const char *file = j->o->cluster_file;
	if (j->o->cluster) {
		j->cc = *j->o->cluster;
		file = j->cc.file;
	} else {
		hora_cluster_defaults(&j->cc);
		j->cc.secret_env = j->o->secret_env;
		j->cc.slurm = &j->o->slurm;
		int rc = hora_cluster_load(&j->cc, file && *file ? file : NULL, err, errlen);
		if (rc)
			return rc;
	}
	int local;
	j->size = hora_cluster_size(&j->cc);
	j->node = hora_cluster_locate(&j->cc, j->o->proc, &local);
	if (j->o->proc < 0 || j->node < 0) {
		snprintf(err, errlen, "worker %d does not exist: %s has %d workers", j->o->proc, j->cc.file, j->size);
		return HORA_ERR_CONFIG;
	}
	char why[256], warn[320];
	const char *sf = j->cc.secret_file[0] ? j->cc.secret_file : NULL;
	int slen = hora_net_secret_load(sf, j->o->secret_env, j->secret, sizeof(j->secret), why,
					sizeof(why), warn, sizeof(warn));
	if (slen < 0) {
		snprintf(err, errlen, "%s", why);
		return HORA_ERR_CONFIG;
	}
	if (warn[0])
		HORA_LOGW("%s", warn);
	j->no = j->cc.transport;
	j->no.secret = j->secret;
	j->no.secret_len = (size_t)slen;
	return 0;
}

/* a transport loop and the membership on it, joining through the seeds */
static int join_membership(struct joining *j, char *err, size_t errlen)
{
	int rc = hora_net_loop_create(&j->no, &j->loop, err, errlen);
	if (rc)
		return rc;
	struct hora_swim_cfg sw = j->cc.membership;
	sw.role = HORA_SWIM_WORKER;
	sw.uid = j->uid = hora_cluster_uid(j->o->proc);
	if (!sw.min_members)
		sw.min_members = j->size;
	/* the first view is the file's workers, one member per worker index;
	 * anyone else (a stray process with the secret) comes in later, as a
	 * joiner (net/MEMBERSHIP.md "The first view") */
	sw.first_view_workers = j->size;
	/* elastic: it may start short, as a later death would leave it: at once
	 * with membership.min_members, or with train.elastic.min_workers once
	 * the missing workers are gone for certain or did not come within
	 * membership.join_timeout_ms */
	if (j->o->elastic && j->o->elastic->on) {
		const int mw = j->o->elastic->min_workers > 0 ? j->o->elastic->min_workers : 1;
		sw.first_view_min = mw < sw.min_members ? mw : sw.min_members;
		sw.first_view_window_ms = j->cc.join_timeout_ms > 0 ? j->cc.join_timeout_ms : 10000;
	}
	struct hora_swim_addr seeds[HORA_CLUSTER_MAX_SEEDS];
	int nseeds = 0;
	char ip[HORA_HOST_IP_MAX], hp[300], why[512];
	/* names (hosts.h) may not be published yet: a pod still starting */
	const int wait_ms = j->cc.join_timeout_ms > 0 ? j->cc.join_timeout_ms : 10000;
	for (int i = 0; i < j->cc.nseeds; i++) {
		if ((rc = hora_hostport_resolve(j->cc.seeds[i], hp, sizeof(hp), wait_ms, why, sizeof(why))))
			return snprintf(err, errlen, "cluster.seeds[%d]: %s", i, why), rc;
		if (!hora_net_swim_addr(hp, &seeds[nseeds]))
			nseeds++;
	}
	if ((rc = hora_host_resolve(j->cc.nodes[j->node].host, ip, wait_ms, why, sizeof(why))))
		return snprintf(err, errlen, "cluster.nodes[%d].host (worker %d's): %s", j->node, j->o->proc,
				why), rc;
	const int port = j->cc.port_base + 1 + j->o->proc;
	uint16_t bound;
	return hora_net_membership_create(j->loop, &sw, ip, (uint16_t)port, &bound, seeds, nseeds, &j->mem,
					  err, errlen);
}

/* ---- what the membership knows of the workers missing at the start ---- */

/* Worker g, which has no live process in this member's table: what became
 * of it, as a phrase ("died: its port answered unreachable"). 0: none live
 * and it is gone for certain (died on a live host, or left); 1: it fell
 * silent or never joined (it may still come); -1: a live one claims it. */
static int missing_what(const struct hora_swim_member *mb, int n, int g, const char **what)
{
	bool died = false, left = false, silent = false;
	for (int i = 0; i < n; i++) {
		if (mb[i].role != HORA_SWIM_WORKER || (int)(mb[i].uid >> 40) - 1 != g)
			continue;
		if (mb[i].state == HORA_SWIM_ALIVE || mb[i].state == HORA_SWIM_SUSPECT)
			return -1;
		left |= mb[i].state == HORA_SWIM_LEFT;
		died |= mb[i].state == HORA_SWIM_DEAD && mb[i].refused;
		silent |= mb[i].state == HORA_SWIM_DEAD && !mb[i].refused;
	}
	*what = left ? "left" : died ? "died (its port answered unreachable: no process holds it)"
		    : silent ? "fell silent (the failure detector declared it dead)" : "never joined";
	return left || died ? 0 : 1;
}

/* Every worker of the job with no live process here (only_gone: only those
 * gone for certain), "worker 2 (127.0.0.1:29503) died (...)", joined by
 * "; " into out. Returns how many; *gone: how many of them are gone for
 * certain (NULL: not wanted). */
static int missing_list(const struct joining *j, bool only_gone, char *out, size_t len, int *gone)
{
	struct hora_swim_member *mb = calloc(HORA_SWIM_MAX_MEMBERS, sizeof(*mb));
	const int n = mb ? hora_net_membership_members(j->mem, mb, HORA_SWIM_MAX_MEMBERS) : 0;
	int count = 0, ngone = 0;
	size_t at = 0;
	out[0] = 0;
	for (int g = 0; g < j->size; g++) {
		const char *what;
		char addr[80];
		const int k = g == j->o->proc ? -1 : missing_what(mb, n, g, &what);
		if (k < 0 || (only_gone && k))
			continue;
		count++;
		ngone += k == 0;
		hora_joining_name(&j->cc, hora_cluster_uid(g), addr);
		if (at < len)
			at += (size_t)snprintf(out + at, len - at, "%sworker %d (%s) %s", count > 1 ? "; " : "",
					       g, addr, what);
	}
	free(mb);
	if (gone)
		*gone = ngone;
	return count;
}

/* Not joined yet: what each seed answered, "127.0.0.1:29501: port
 * unreachable (nothing listens there)", joined by "; ". */
static void seed_list(const struct joining *j, char *out, size_t len)
{
	struct hora_swim_seed sd[HORA_NET_MEMBERSHIP_SEEDS];
	const int n = hora_net_membership_seeds(j->mem, sd, HORA_NET_MEMBERSHIP_SEEDS);
	size_t at = 0;
	out[0] = 0;
	for (int i = 0; i < n && at < len; i++) {
		char ip[16];
		const uint8_t *b = (const uint8_t *)&sd[i].addr.ip;
		snprintf(ip, sizeof(ip), "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
		at += (size_t)snprintf(out + at, len - at, "%s%s:%u: %s", i ? "; " : "", ip, sd[i].addr.port,
				       sd[i].wrong_secret ? "answered with another cluster secret"
				       : sd[i].unreachable ? "port unreachable (nothing listens there)"
							   : "no answer");
	}
}

/* Checks that end the start at once: every seed answered with another
 * secret (HORA_ERR_CONFIG); without elastic (or with too few workers left
 * for train.elastic.min_workers and no restart to bring them back), a worker
 * of the job gone for certain before the first view (HORA_ERR_LOST). 0:
 * go on waiting. */
static int start_check(const struct joining *j, char *err, size_t errlen)
{
	if (hora_net_membership_secret_refused(j->mem)) {
		char seeds[512];
		seed_list(j, seeds, sizeof(seeds));
		snprintf(err, errlen, "worker %d: every seed answered with another cluster secret (%s): "
				      "check %s", j->o->proc, seeds,
			 j->cc.secret_file[0] ? "cluster.secret_file" : "HORA_SECRET");
		return HORA_ERR_CONFIG;
	}
	const struct hora_elastic_config *el = j->o->elastic && j->o->elastic->on ? j->o->elastic : NULL;
	char list[1024];
	int ngone;
	missing_list(j, true, list, sizeof(list), &ngone);
	if (!ngone)
		return 0;
	if (!el) {
		snprintf(err, errlen, "worker %d: %s while the job started; without train.elastic the job "
				      "needs all %d workers", j->o->proc, list, j->size);
		return HORA_ERR_LOST;
	}
	if (j->size - ngone < el->min_workers && !el->restart) {
		snprintf(err, errlen, "worker %d: %d of %d workers can start the job, below "
				      "train.elastic.min_workers %d: %s", j->o->proc, j->size - ngone, j->size,
			 el->min_workers, list);
		return HORA_ERR_LOST;
	}
	return 0;
}

/* The start's time limit passed: what is missing, as the membership knows
 * it (seeds that did not answer, workers that died, left or never came). */
static void start_timeout(const struct joining *j, double limit_s, const char *wanted, char *err,
			  size_t errlen)
{
	char list[1024];
	if (!hora_net_membership_joined(j->mem)) {
		seed_list(j, list, sizeof(list));
		snprintf(err, errlen, "worker %d: no member of the job answered in %.0f s (seeds: %s)",
			 j->o->proc, limit_s, list);
	} else if (missing_list(j, false, list, sizeof(list), NULL)) {
		snprintf(err, errlen, "worker %d: no %s after %.0f s: %s", j->o->proc, wanted, limit_s, list);
	} else {
		snprintf(err, errlen, "worker %d: no %s after %.0f s, though every worker is alive "
				      "(have %d members alive)", j->o->proc, wanted, limit_s,
			 hora_net_membership_alive(j->mem));
	}
}

/* until this worker is in the job's first view, which the membership forms
 * of every worker of the file and nobody else (first_view_workers), three
 * join timeouts at most. The communicator is formed over that view even
 * when a later one (a joiner admitted) is installed by now. */
static int wait_full_view(struct joining *j, char *err, size_t errlen)
{
	const double limit_s = (j->cc.join_timeout_ms > 0 ? j->cc.join_timeout_ms : 10000) / 1e3 * 3;
	const double deadline = hora_clock_s() + limit_s;
	struct hora_swim_view cur;
	int cur_rank;
	char why[256];
	bool paused = false;
	for (;;) {
		hora_net_membership_view(j->mem, &cur, &cur_rank, &paused, why, sizeof(why));
		hora_net_membership_first_view(j->mem, &j->v, &j->rank);
		if (j->v.id && j->rank >= 0 && j->v.n == j->size && !paused)
			return 0;
		int rc;
		if (!j->v.id && !cur.id && (rc = start_check(j, err, errlen)))
			return rc;
		if (hora_clock_s() > deadline)
			break;
		hora_net_membership_wait(j->mem, cur.id, paused, 100);
	}
	if (j->v.id && j->rank < 0)
		snprintf(err, errlen, "worker %d: not in the job's first view %llu, which holds another "
				      "process as worker %d (two processes claim worker %d?)",
			 j->o->proc, (unsigned long long)j->v.id, j->o->proc, j->o->proc);
	else if (!j->v.id && cur.id)
		snprintf(err, errlen, "worker %d: the job had its first view before this worker joined "
				      "(view %llu is installed; a worker that joins later is a joiner)",
			 j->o->proc, (unsigned long long)cur.id);
	else if (paused)
		snprintf(err, errlen, "worker %d: no view with all %d workers after %.0f s: %s", j->o->proc,
			 j->size, limit_s, why);
	else {
		char wanted[64];
		snprintf(wanted, sizeof(wanted), "view with all %d workers", j->size);
		start_timeout(j, limit_s, wanted, err, errlen);
	}
	return -ETIMEDOUT;
}

/* "host:port" of every member of the view, from the file (addr: v.n x 80) */
static int view_addrs(const struct joining *j, char (*addr)[80], const char **addrs, char *err,
		      size_t errlen)
{
	for (int i = 0; i < j->v.n; i++) {
		if (hora_joining_addr(&j->cc, j->v.uids[i], addr[i])) {
			snprintf(err, errlen, "view %llu holds a member (uid %016llx) that is not a worker of %s",
				 (unsigned long long)j->v.id, (unsigned long long)j->v.uids[i], j->cc.file);
			return -EPROTO;
		}
		addrs[i] = addr[i];
	}
	return 0;
}

int hora_joining_name(const struct hora_cluster_config *cc, uint64_t uid, char addr[80])
{
	int gi = (int)(uid >> 40) - 1, li, ni = hora_cluster_locate(cc, gi, &li);
	if (ni < 0)
		return -1;
	snprintf(addr, 80, "%s:%d", cc->nodes[ni].host, cc->port_base + 1 + gi);
	return 0;
}

int hora_joining_addr(const struct hora_cluster_config *cc, uint64_t uid, char addr[80])
{
	int gi = (int)(uid >> 40) - 1, li, ni = hora_cluster_locate(cc, gi, &li);
	if (ni < 0)
		return -1;
	/* a name is looked up at each use: a worker started again (a
	 * Kubernetes pod replaced) may come back at another address */
	char ip[HORA_HOST_IP_MAX], why[512];
	if (hora_host_resolve(cc->nodes[ni].host, ip, 5000, why, sizeof(why))) {
		HORA_LOGE("worker %d: cluster.nodes[%d].host: %s", gi, ni, why);
		snprintf(addr, 80, "%s:%d", cc->nodes[ni].host, cc->port_base + 1 + gi);
		return 0; /* the name itself: the connect to it fails, naming it */
	}
	snprintf(addr, 80, "%s:%d", ip, cc->port_base + 1 + gi);
	return 0;
}

void hora_joining_net_cfg(const struct joining *j, int rank, int n, const char *const *addrs,
			  uint64_t view, int timeout_ms, struct hora_net_comm_cfg *nc)
{
	*nc = (struct hora_net_comm_cfg){
		.rank = rank, .nranks = n, .addrs = addrs, .connect_timeout_ms = timeout_ms,
		.small_bytes = j->cc.coll.small_bytes, .medium_bytes = j->cc.coll.medium_bytes,
		.segment_bytes = j->cc.coll.segment_bytes, .slice_bytes = j->cc.coll.slice_bytes,
		.spin_us = j->o->spin_us ? j->o->spin_us : j->cc.coll.spin_us,
		.shm = j->cc.shm == HORA_SHM_OFF, .hierarchical = j->cc.coll.hierarchical};
	nc->opts = j->no;
	nc->opts.view = (uint32_t)view;
}

/* The first communicator's check while it forms (hora_net_comm_cfg.check):
 * a worker of the view that left (it failed its start, e.g. a port another
 * process holds, and says why itself) or died will never connect, so the
 * formation stops at once naming it (HORA_ERR_LOST: this worker does not
 * leave in turn, so every worker names the first one), instead of waiting
 * out the connect timeout. */
static int form_watch(void *arg, char *err, size_t errlen)
{
	const struct joining *j = arg;
	/* a worker that left is the cause; the ones that stopped on its leave
	 * (exit without leaving: their ports answer unreachable) come after it */
	for (int k = 0; k < 2 * j->v.n; k++) {
		const int i = k % j->v.n;
		const int st = hora_net_membership_state(j->mem, j->v.uids[i]);
		char addr[80] = "?";
		if (i == j->rank || (st != HORA_SWIM_LEFT && (k < j->v.n || st != HORA_SWIM_DEAD)))
			continue;
		hora_joining_name(&j->cc, j->v.uids[i], addr);
		return snprintf(err, errlen, "worker %d (%s) %s while the job's communicator formed%s: the job "
				"stops", (int)(j->v.uids[i] >> 40) - 1, addr,
				st == HORA_SWIM_LEFT ? "left the job" : "died",
				st == HORA_SWIM_LEFT ? " (its own output says why)" : ""), HORA_ERR_LOST;
	}
	return 0;
}

/* The first formation failed on a broken connection or a timeout: when a
 * worker of the view left or died meanwhile, that is the cause (its proof,
 * a port that answers unreachable, can come a probe period after the
 * broken socket: up to 0.5 s is waited for it). Then HORA_ERR_LOST naming
 * it, so this worker does not leave in turn and every worker names the
 * same one; else rc. */
static int form_failed_by_other(const struct joining *j, int rc, char *err, size_t errlen)
{
	char why[512];
	for (int k = 0; k < 25; k++) {
		if (form_watch((void *)j, why, sizeof(why)) == HORA_ERR_LOST)
			return snprintf(err, errlen, "%s", why), HORA_ERR_LOST;
		usleep(20000);
	}
	return rc;
}

/* the communicator over the view; it owns the membership loop from now on,
 * and its loss watcher follows the view's members */
static int form_comm(struct joining *j, struct hora_comm **out, char *err, size_t errlen)
{
	char (*addr)[80] = calloc((size_t)j->v.n, 80);
	const char **addrs = calloc((size_t)j->v.n, sizeof(*addrs));
	struct hora_comm_member *mb = calloc((size_t)j->v.n, sizeof(*mb));
	int rc = addr && addrs && mb ? view_addrs(j, addr, addrs, err, errlen) : -ENOMEM;
	if (!rc) {
		const int join_ms = j->cc.join_timeout_ms;
		struct hora_net_comm_cfg nc;
		hora_joining_net_cfg(j, j->rank, j->v.n, addrs, j->v.id, join_ms > 0 ? join_ms * 3 : 30000, &nc);
		nc.check = form_watch;
		nc.check_arg = j;
		rc = hora_comm_create_net(&nc, (enum hora_algo)j->cc.coll.algorithm, out, err, errlen);
	}
	for (int i = 0; !rc && i < j->v.n; i++) { /* for the loss watcher's message */
		mb[i].uid = j->v.uids[i];
		mb[i].worker = (int)(j->v.uids[i] >> 40) - 1;
		snprintf(mb[i].addr, sizeof(mb[i].addr), "%s", addr[i]);
	}
	free(addr);
	free(addrs);
	if (rc) {
		free(mb);
		return rc;
	}
	hora_comm_own_loop(*out, j->loop, j->mem, mb, j->v.id);
	free(mb);
	j->loop = NULL;
	j->mem = NULL;
	hora_comm_set_fusion_override(*out, &j->o->fusion);
	HORA_LOGD("worker %d: rank %d of %d in view %llu", j->o->proc, j->rank, j->v.n,
		  (unsigned long long)j->v.id);
	return 0;
}

/* Elastic: a worker that is in the job's first view (every worker of the
 * file, or membership.min_members of them) starts the job; one that came
 * in after it (the membership installed no first view here, or one without
 * it) joins the running job once a member says it trains (core/rejoin.c). */
static int elastic_start(struct joining *j, struct hora_comm **out, char *err, size_t errlen)
{
	const double limit_s = (j->cc.join_timeout_ms > 0 ? j->cc.join_timeout_ms : 10000) / 1e3 * 3;
	const double deadline = hora_clock_s() + limit_s;
	bool paused = false;
	for (;;) {
		struct hora_swim_view first;
		int frank;
		hora_net_membership_first_view(j->mem, &first, &frank);
		if (first.id && frank >= 0) {
			char list[1024];
			if (first.n < j->size && frank == 0 && missing_list(j, false, list, sizeof(list), NULL))
				HORA_LOGW("worker %d: the job starts with %d of %d workers: %s", j->o->proc,
					  first.n, j->size, list);
			return hora_rejoin_join(j, false, out, err, errlen);
		}
		hora_net_membership_view(j->mem, &j->v, &j->rank, &paused, NULL, 0);
		if (j->v.id && j->rank >= 0 && !paused && hora_rejoin_job_running(j->mem))
			return hora_rejoin_join(j, true, out, err, errlen);
		int rc;
		if (!first.id && !j->v.id && (rc = start_check(j, err, errlen)))
			return rc;
		if (hora_clock_s() > deadline) {
			start_timeout(j, limit_s, "first view and no running job to join", err, errlen);
			return -ETIMEDOUT;
		}
		hora_net_membership_wait(j->mem, j->v.id, paused, 100);
	}
}

int hora_init_with(const struct hora_init_opts *o, struct hora_comm **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!o->cluster && (!o->cluster_file || !*o->cluster_file) && !o->slurm.on)
		return init_single(o, out, err, errlen);
	struct joining *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->o = o;
	j->rank = -1;
	int rc = load_job(j, err, errlen);
	if (!rc)
		rc = join_membership(j, err, errlen);
	if (!rc && o->elastic && o->elastic->on) {
		rc = elastic_start(j, out, err, errlen);
	} else {
		if (!rc)
			rc = wait_full_view(j, err, errlen);
		if (!rc && (rc = form_comm(j, out, err, errlen)) && rc != HORA_ERR_LOST && rc != HORA_ERR_CONFIG)
			rc = form_failed_by_other(j, rc, err, errlen);
	}
	/* a worker that failed its start says so to the others at once (they
	 * see it left), rather than leave them to wait for it; not one that
	 * stops because another left or is missing (HORA_ERR_LOST): the others
	 * name the one that left, not the ones that followed it; nor one
	 * refused (HORA_ERR_CONFIG: a worker beyond max_workers is in no
	 * communicator, and its leave would re-form the others' for nothing) */
	if (rc && rc != HORA_ERR_LOST && rc != HORA_ERR_CONFIG && j->mem)
		hora_net_membership_leave(j->mem);
	hora_net_membership_destroy(j->mem);
	hora_net_loop_destroy(j->loop);
	memset(j->secret, 0, sizeof(j->secret));
	free(j);
	return rc;
}

int hora_init(const char *file, struct hora_comm **out, char *err, size_t errlen)
{
	*out = NULL;
	struct hora_init_opts o;
	hora_init_opts_defaults(&o);
	int rc = hora_env_init_opts(&o, err, errlen);
	if (rc)
		return rc;
	if (file && *file)
		o.cluster_file = file;
	if (!o.cluster_file || !*o.cluster_file) /* a job of one, or an srun step's nodes alone */
		return hora_init_with(&o, out, err, errlen);
	/* the train section's elastic keys only (hora.h, "elastic jobs"): the
	 * rest of it is the built-in trainer's, unread here (train.device
	 * would probe the GPU) */
	struct hora_elastic_config el;
	if ((rc = hora_config_load_elastic(&el, o.cluster_file, err, errlen)))
		return rc;
	if (el.on)
		o.elastic = &el;
	return hora_init_with(&o, out, err, errlen);
}

void hora_finalize(struct hora_comm *c)
{
	if (!c)
		return;
	struct hora_net_membership *m = hora_comm_membership(c);
	/* a job stopped by the stall inspector or the loss watcher failed: no
	 * graceful leave, whose new view would renumber the ranks the others'
	 * reports name. Elastic: always (a re-form interrupted the last call;
	 * the others must not wait for the failure detector, nor count this
	 * worker in a majority) */
	if (m && (!hora_comm_stalled(c) || hora_comm_is_elastic(c)))
		hora_net_membership_leave(m);
	hora_comm_destroy(c);
}

int hora_broadcast_parameters(struct hora_comm *c, float *params, size_t n, int root)
{
	return hora_broadcast(c, params, n, HORA_F32, root);
}
