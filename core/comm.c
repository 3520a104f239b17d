/* comm.c - the public communicator: net/coll/'s collectives behind
 * hora.h's names, plus the async forms.
 *
 * Async calls go to a FIFO that one background thread per communicator
 * runs in order (started with the first async call). A blocking call runs
 * on the caller's thread when nothing is queued or running (no hand-off for
 * the common case); otherwise it queues behind the others and waits, so the
 * order of calls on a rank is always the order of execution.
 *
 * The monitor thread of communicators that own a membership (the loss
 * watcher, the stall inspector) is comm_watch.c; a call that fails asks it
 * what to return (hora_comm_watch_verdict).
 */
#include "comm.h"
#include "comm_internal.h"
#include "devcoll.h"
#include "env.h"
#include "log.h"

#include "net/membership/membership.h"
#include "net/shm/shm.h"
#include "net/transport/handshake.h"
#include "net/util/clock.h"
#include "net/util/hostport.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)HORA_ALGO_DIRECT_RING == (int)HORA_NET_ALGO_DIRECT_RING && (int)HORA_ALGO_AUTO == 0,
	       "enum hora_algo and enum hora_net_algo have the same values");

struct hora_request {
	struct hora_comm *c;
	enum hora_net_coll_kind kind;
	const void *send;
	void *recv;
	size_t count;
	enum hora_dtype t;
	enum hora_op op;
	int root;               /* broadcast: the root; pair average: the peer */
	/* neighbour allreduce: the lists (the caller's for a blocking call,
	 * copies in owned for an async one) */
	double self_w;
	const int *src, *dst;
	const double *src_w, *dst_w;
	int nsrc, ndst;
	void *owned; /* freed with the request */
	int status;
	atomic_int done;        /* set (release, under mu) after status and times */
	double t_start, t_end; /* execution, CLOCK_MONOTONIC seconds */
	struct hora_request *next;
};

struct chan_cfg {
	struct hora_net_comm_cfg nc; /* addrs and opts.secret point below */
	char (*addr)[80];
	const char **addrs;
	uint8_t key[HORA_NET_SECRET_MAX];
};

_Static_assert((int)HORA_F32 == (int)HORA_NET_F32 && (int)HORA_I64 == (int)HORA_NET_I64 &&
		       (int)HORA_BF16 == (int)HORA_NET_BF16,
	       "public and net dtypes differ");
_Static_assert((int)HORA_SUM == (int)HORA_NET_SUM && (int)HORA_PROD == (int)HORA_NET_PROD,
	       "public and net ops differ");

void hora_comm_config_defaults(struct hora_comm_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->connect_timeout_ms = 30000;
	cfg->io_timeout_ms = 30000;
	cfg->sockets_per_peer = 1;
}

int hora_comm_create(const struct hora_comm_config *cfg, struct hora_comm **out, char *err,
		     size_t errlen)
{
	*out = NULL;
	if (!cfg || cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size || !cfg->addrs) {
		snprintf(err, errlen, "communicator: rank %d of %d, addresses %s: invalid", cfg ? cfg->rank : -1,
			 cfg ? cfg->size : 0, cfg && cfg->addrs ? "given" : "missing");
		return -EINVAL;
	}
	if (cfg->algorithm < HORA_ALGO_AUTO || cfg->algorithm > HORA_ALGO_DIRECT_RING) {
		snprintf(err, errlen, "communicator: unknown algorithm %d", cfg->algorithm);
		return -EINVAL;
	}
	if ((unsigned)cfg->shm > HORA_SHM_OFF || (unsigned)cfg->hierarchical > HORA_HIER_OFF) {
		snprintf(err, errlen, "communicator: unknown shm (%d) or hierarchical (%d) setting", cfg->shm,
			 cfg->hierarchical);
		return -EINVAL;
	}
	uint8_t key[HORA_NET_SECRET_MAX];
	size_t klen;
	if (cfg->secret) {
		klen = cfg->secret_len;
		if (klen < HORA_NET_SECRET_MIN || klen > sizeof(key)) {
			snprintf(err, errlen, "communicator: the secret must be %d..%d bytes (got %zu)",
				 HORA_NET_SECRET_MIN, HORA_NET_SECRET_MAX, klen);
			return -EINVAL;
		}
		memcpy(key, cfg->secret, klen);
	} else {
		char why[256], warn[320];
		int k = hora_net_secret_load(cfg->secret_file, hora_env_secret(), key, sizeof(key), why,
					     sizeof(why), warn, sizeof(warn));
		if (k < 0) {
			snprintf(err, errlen, "communicator: %s", why);
			return k;
		}
		if (warn[0])
			HORA_LOGW("%s", warn);
		klen = (size_t)k;
	}
	struct hora_net_comm_cfg nc = {.rank = cfg->rank, .nranks = cfg->size, .addrs = cfg->addrs,
				       .connect_timeout_ms = cfg->connect_timeout_ms,
				       .small_bytes = cfg->small_bytes, .medium_bytes = cfg->medium_bytes,
				       .segment_bytes = cfg->segment_bytes,
				       .slice_bytes = cfg->slice_bytes, .spin_us = cfg->spin_us,
				       .shm = cfg->shm == HORA_SHM_OFF, .hierarchical = (int)cfg->hierarchical};
	hora_net_opts_default(&nc.opts);
	nc.opts.secret = key;
	nc.opts.secret_len = klen;
	nc.opts.view = cfg->view;
	if (cfg->io_timeout_ms >= 0)
		nc.opts.io_timeout_ms = cfg->io_timeout_ms;
	if (cfg->sockets_per_peer > 0)
		nc.opts.sockets_per_peer = cfg->sockets_per_peer;
	if (cfg->rcvlowat < 0)
		nc.opts.rcvlowat = 0;
	int rc = hora_comm_create_net(&nc, cfg->algorithm, out, err, errlen);
	memset(key, 0, sizeof(key));
	return rc;
}

/* a copy of nc (addresses and secret too) for hora_comm_open_channel;
 * NULL when out of memory (then there is no channel) */
static struct chan_cfg *chan_keep(const struct hora_net_comm_cfg *nc)
{
	struct chan_cfg *k = calloc(1, sizeof(*k));
	if (!k || nc->opts.secret_len > sizeof(k->key) || !(k->addr = calloc((size_t)nc->nranks, 80)) ||
	    !(k->addrs = calloc((size_t)nc->nranks, sizeof(*k->addrs)))) {
		if (k)
			free(k->addr);
		free(k);
		return NULL;
	}
	k->nc = *nc;
	k->nc.check = NULL; /* the first formation's, borrowed for it alone */
	k->nc.check_arg = NULL;
	for (int i = 0; i < nc->nranks; i++) {
		snprintf(k->addr[i], 80, "%s", nc->addrs[i]);
		k->addrs[i] = k->addr[i];
	}
	k->nc.addrs = k->addrs;
	if (nc->opts.secret_len)
		memcpy(k->key, nc->opts.secret, nc->opts.secret_len);
	k->nc.opts.secret = k->key;
	return k;
}

static void chan_free(struct chan_cfg *k)
{
	if (!k)
		return;
	memset(k->key, 0, sizeof(k->key));
	free(k->addr);
	free(k->addrs);
	free(k);
}

/* local rank and size: the ranks that listen on this rank's host */
static void count_local(struct hora_comm *c, const struct hora_net_comm_cfg *nc)
{
	char me[256], h[256];
	if (hora_hostport_split(nc->addrs[nc->rank], me, sizeof(me), NULL)) {
		c->local_size = 1; /* not host:port (a job of one): alone */
		return;
	}
	for (int i = 0; i < nc->nranks; i++)
		if (!hora_hostport_split(nc->addrs[i], h, sizeof(h), NULL) && !strcmp(h, me)) {
			if (i < nc->rank)
				c->local_rank++;
			c->local_size++;
		}
}

int hora_comm_from_net(struct hora_net_comm *net, enum hora_algo algo, struct hora_comm **out)
{
	*out = NULL;
	struct hora_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->net = net;
	hora_net_comm_set_algo(c->net, (enum hora_net_algo)algo);
	if (hora_net_shm_regions_create(&c->regions))
		c->regions = NULL; /* hora_comm_mem_alloc gives ordinary memory */
	hora_net_comm_set_regions(c->net, c->regions);
	c->algo = algo;
	c->local_size = 1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->net_mu, NULL);
	*out = c;
	return 0;
}

int hora_comm_create_net(const struct hora_net_comm_cfg *nc, enum hora_algo algo,
			 struct hora_comm **out, char *err, size_t errlen)
{
	*out = NULL;
	struct hora_net_comm *net;
	int rc = hora_net_comm_create(nc, &net, err, errlen);
	if (rc)
		return rc;
	if ((rc = hora_comm_from_net(net, algo, out))) {
		hora_net_comm_destroy(net);
		return rc;
	}
	(*out)->local_size = 0;
	count_local(*out, nc);
	(*out)->chan = chan_keep(nc);
	return 0;
}

/* Another net comm over c's ranks, each listening on its port +
 * port_offset, with the I/O timeout off (apair.h). */
int hora_comm_open_channel(struct hora_comm *c, int port_offset, struct hora_net_comm **out, char *err,
			   size_t errlen)
{
	*out = NULL;
	const struct chan_cfg *k = c->chan;
	if (!k)
		return snprintf(err, errlen, "this communicator cannot open a channel (not formed from addresses, "
					     "or out of memory when it was)"),
		       -EINVAL;
	const int n = k->nc.nranks;
	char(*addr)[80] = calloc((size_t)n, sizeof(*addr));
	const char **addrs = calloc((size_t)n, sizeof(*addrs));
	int rc = addr && addrs ? 0 : -ENOMEM;
	for (int i = 0; !rc && i < n; i++) {
		char h[64];
		uint16_t port;
		if (hora_hostport_split(k->addr[i], h, sizeof(h), &port) || port + port_offset > 65535 ||
		    port + port_offset < 1) {
			snprintf(err, errlen, "channel: rank %d's address %s + %d is no host:port", i, k->addr[i],
				 port_offset);
			rc = -EINVAL;
			break;
		}
		snprintf(addr[i], sizeof(addr[i]), "%s:%d", h, port + port_offset);
		addrs[i] = addr[i];
	}
	struct hora_net_comm_cfg nc = k->nc;
	nc.addrs = addrs;
	nc.opts.io_timeout_ms = 0;
	if (rc == -ENOMEM)
		snprintf(err, errlen, "channel: out of memory");
	else if (!rc)
		rc = hora_net_comm_create(&nc, out, err, errlen);
	free(addr);
	free(addrs);
	return rc;
}

/* local rank and size from the members' addresses */
static void count_local_members(struct hora_comm *c)
{
	char me[256], h[256];
	const int n = hora_net_comm_size(c->net), r = hora_net_comm_rank(c->net);
	c->local_rank = 0;
	c->local_size = 0;
	if (hora_hostport_split(c->members[r].addr, me, sizeof(me), NULL)) {
		c->local_size = 1;
		return;
	}
	for (int i = 0; i < n; i++)
		if (!hora_hostport_split(c->members[i].addr, h, sizeof(h), NULL) && !strcmp(h, me)) {
			c->local_rank += i < r;
			c->local_size++;
		}
}

void hora_comm_own_loop(struct hora_comm *c, struct hora_net_loop *loop,
			struct hora_net_membership *m, const struct hora_comm_member *members,
			uint64_t view)
{
	c->owned_loop = loop;
	c->owned_m = m;
	if (!m)
		return;
	const int n = hora_net_comm_size(c->net);
	if (members && (c->members = malloc((size_t)n * sizeof(*c->members)))) {
		memcpy(c->members, members, (size_t)n * sizeof(*c->members));
		c->view_id = view;
	}
	if (c->members && !c->local_rank && c->local_size == 1)
		count_local_members(c); /* hora_comm_from_net: from the members' addresses */
	hora_comm_watch_begin(c);
}

struct hora_net_membership *hora_comm_membership(const struct hora_comm *c)
{
	return c->owned_m;
}

struct hora_net_loop *hora_comm_owned_loop(const struct hora_comm *c)
{
	return c->owned_loop;
}

static int execute_host(struct hora_comm *c, const struct hora_request *r)
{
	struct hora_net_comm *n = c->net;
	switch (r->kind) {
	case HORA_NET_COLL_ALLREDUCE:
		return hora_net_allreduce(n, r->send, r->recv, r->count, (enum hora_net_dtype)r->t,
					  (enum hora_net_op)r->op);
	case HORA_NET_COLL_BROADCAST:
		return hora_net_broadcast(n, r->recv, r->count, (enum hora_net_dtype)r->t, r->root);
	case HORA_NET_COLL_ALLGATHER:
		return hora_net_allgather(n, r->send, r->recv, r->count, (enum hora_net_dtype)r->t);
	case HORA_NET_COLL_REDUCE_SCATTER:
		return hora_net_reduce_scatter(n, r->send, r->recv, r->count, (enum hora_net_dtype)r->t,
					       (enum hora_net_op)r->op);
	case HORA_NET_COLL_BARRIER:
		return hora_net_barrier(n);
	case HORA_NET_COLL_NEIGHBOR_ALLREDUCE: {
		const struct hora_net_neighbors nb = {.self_weight = r->self_w, .src = r->src,
						      .src_weights = r->src_w, .nsrc = r->nsrc, .dst = r->dst,
						      .dst_weights = r->dst_w, .ndst = r->ndst};
		return hora_net_neighbor_allreduce(n, r->send, r->recv, r->count, (enum hora_net_dtype)r->t, &nb);
	}
	case HORA_NET_COLL_PAIR_AVERAGE:
		return hora_net_pair_average(n, r->recv, r->count, (enum hora_net_dtype)r->t, r->root);
	case HORA_NET_COLL_KINDS:
		break;
	}
	return -EINVAL;
}

struct host_call {
	struct hora_comm *c;
	const struct hora_request *r;
};

/* the request with host buffers in place of its device ones (devcoll.c) */
static int host_instead(void *arg, const void *send, void *recv)
{
	const struct host_call *h = arg;
	struct hora_request r = *h->r;
	r.send = send;
	r.recv = recv;
	return execute_host(h->c, &r);
}

/* device buffers (hora_gpu_mem_kind asks only once the GPU module is
 * loaded) go to devcoll.c, which runs the host call above when it stages */
static int execute_net(struct hora_comm *c, const struct hora_request *r)
{
	const struct host_call h = {.c = c, .r = r};
	const struct devcoll_call k = {.kind = r->kind, .send = r->send, .recv = r->recv, .count = r->count,
				       .t = (enum hora_net_dtype)r->t, .op = (enum hora_net_op)r->op,
				       .root = r->root, .host = host_instead, .arg = (void *)&h};
	int device;
	if (r->kind != HORA_NET_COLL_BARRIER && devcoll_wants(&k, &device))
		return devcoll_run(&c->dev, c->net, &k, device);
	return execute_host(c, r);
}

/* After the monitor stopped the job every call fails with its code, the
 * one it interrupted too; a call that fails before it has decided waits for
 * its verdict (hora_comm_watch_verdict). */
static int execute(struct hora_comm *c, const struct hora_request *r)
{
	const int code = atomic_load_explicit(&c->stopped, memory_order_acquire);
	if (code)
		return code;
	return hora_comm_watch_verdict(c, execute_net(c, r));
}

static void *worker(void *arg)
{
	struct hora_comm *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		/* never beside a blocking call running inline, even when stopping:
		 * both would drive the same communicator */
		while (c->inline_busy || (!c->stop && !c->head))
			pthread_cond_wait(&c->cv, &c->mu);
		if (!c->head)
			break; /* stop, and nothing left */
		struct hora_request *r = c->head;
		c->head = r->next;
		if (!c->head)
			c->tail = NULL;
		c->running = true;
		pthread_mutex_unlock(&c->mu);
		double t0 = hora_clock_s();
		int st = execute(c, r);
		double t1 = hora_clock_s();
		pthread_mutex_lock(&c->mu);
		r->t_start = t0;
		r->t_end = t1;
		c->running = false;
		r->status = st;
		atomic_store_explicit(&r->done, 1, memory_order_release);
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* queue r (c->mu held) */
static int enqueue(struct hora_comm *c, struct hora_request *r)
{
	if (!c->started) {
		if (pthread_create(&c->thread, NULL, worker, c))
			return -EAGAIN;
		c->started = true;
	}
	r->next = NULL;
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	pthread_cond_broadcast(&c->cv);
	return 0;
}

static int submit_async(struct hora_request tmpl, struct hora_request **req)
{
	if (!req)
		return -EINVAL;
	*req = NULL;
	struct hora_comm *c = tmpl.c;
	if (!c)
		return -EINVAL;
	hora_comm_keep_claim(c);
	struct hora_request *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = tmpl;
	pthread_mutex_lock(&c->mu);
	int rc = enqueue(c, r);
	pthread_mutex_unlock(&c->mu);
	if (rc) {
		free(r);
		return rc;
	}
	*req = r;
	return 0;
}

static int run_blocking(struct hora_request r)
{
	struct hora_comm *c = r.c;
	if (!c)
		return -EINVAL;
	hora_comm_keep_claim(c);
	pthread_mutex_lock(&c->mu);
	if (!c->head && !c->running && !c->inline_busy) {
		c->inline_busy = true; /* nothing ahead of us: run here, no hand-off */
		pthread_mutex_unlock(&c->mu);
		int st = execute(c, &r);
		pthread_mutex_lock(&c->mu);
		c->inline_busy = false;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	int rc = enqueue(c, &r); /* behind earlier async calls */
	c->waiters++;
	while (!rc && !atomic_load_explicit(&r.done, memory_order_acquire))
		pthread_cond_wait(&c->cv, &c->mu);
	c->waiters--;
	pthread_cond_broadcast(&c->cv); /* destroy may be waiting for the last waiter */
	pthread_mutex_unlock(&c->mu);
	return rc ? rc : r.status;
}

int hora_wait_timed(struct hora_request *r, double *start, double *end)
{
	if (!r)
		return -EINVAL;
	/* A finished request is not read through its communicator: it may be
	 * waited for after hora_comm_destroy, which finishes every queued one. */
	if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
		struct hora_comm *c = r->c;
		pthread_mutex_lock(&c->mu);
		c->waiters++;
		while (!atomic_load_explicit(&r->done, memory_order_acquire))
			pthread_cond_wait(&c->cv, &c->mu);
		c->waiters--;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
	}
	int st = r->status;
	if (start)
		*start = r->t_start;
	if (end)
		*end = r->t_end;
	free(r->owned);
	free(r);
	return st;
}

int hora_wait(struct hora_request *r)
{
	return hora_wait_timed(r, NULL, NULL);
}

int hora_wait_ready(struct hora_request *r, int timeout_ms)
{
	if (!r || timeout_ms < 0)
		return -EINVAL;
	if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
		struct hora_comm *c = r->c;
		struct timespec until; /* c->cv waits on CLOCK_REALTIME (the default attribute) */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += timeout_ms / 1000;
		until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&c->mu);
		c->waiters++;
		int wrc = 0;
		while (!atomic_load_explicit(&r->done, memory_order_acquire) && wrc != ETIMEDOUT)
			wrc = pthread_cond_timedwait(&c->cv, &c->mu, &until);
		c->waiters--;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
	}
	return atomic_load_explicit(&r->done, memory_order_acquire) ? 1 : 0;
}

int hora_request_status(const struct hora_request *r)
{
	if (!r)
		return -EINVAL;
	return atomic_load_explicit(&r->done, memory_order_acquire) ? r->status : -EBUSY;
}

int hora_wait_timeout(struct hora_request *r, int timeout_ms)
{
	int rc = hora_wait_ready(r, timeout_ms);
	if (rc < 0)
		return rc;
	return rc ? hora_wait_timed(r, NULL, NULL) : 1;
}

int hora_test(struct hora_request *r)
{
	if (!r)
		return 0;
	return atomic_load_explicit(&r->done, memory_order_acquire);
}

void hora_comm_destroy(struct hora_comm *c)
{
	if (!c)
		return;
	hora_comm_keep_abandon(c);
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (c->started)
		pthread_join(c->thread, NULL); /* every queued request is done now */
	pthread_mutex_lock(&c->mu);
	/* a blocking call still running on another thread, and threads still
	 * waking up from waiting on a request, use c: let them leave first */
	while (c->inline_busy || c->waiters)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	hora_comm_watch_stop(c);
	hora_net_membership_destroy(c->owned_m); /* no status callback after this */
	devcoll_reset(atomic_load(&c->dev), true);
	hora_net_comm_destroy(c->net);
	hora_net_shm_regions_destroy(c->regions);
	hora_net_loop_destroy(c->owned_loop);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->net_mu);
	if (c->el.free_arg)
		c->el.free_arg(c->el.arg);
	free(c->members);
	chan_free(c->chan);
	free(c);
}

struct hora_net_comm *hora_comm_net(struct hora_comm *c)
{
	return c->net;
}

void *hora_comm_mem_alloc(struct hora_comm *c, size_t bytes)
{
	void *p = NULL;
	char err[200] = "";
	if (c && c->regions && !hora_net_shm_region_alloc(c->regions, bytes, &p, err, sizeof(err)))
		return p;
	if (c && c->regions)
		HORA_LOGD("hora_comm_mem_alloc: %s; ordinary memory instead", err);
	const size_t b = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
	if (b < bytes || !(p = aligned_alloc(64, b)))
		return NULL;
	hora_net_shm_region_forget(p); /* where a destroyed communicator's region was */
	return memset(p, 0, b);
}

void hora_comm_mem_free(struct hora_comm *c, void *p)
{
	if (!p || (c && c->regions && !hora_net_shm_region_free(c->regions, p)))
		return;
	const int rc = hora_net_shm_region_free_any(p);
	if (!rc) { /* another communicator's: freed there */
		HORA_LOGW("hora_comm_mem_free: %p was allocated on another communicator than the one "
			  "named; freed from its own", p);
		return;
	}
	if (rc == -ESTALE) { /* free() of it would abort the process */
		HORA_LOGW("hora_comm_mem_free: %p belonged to a communicator already destroyed, which "
			  "freed it", p);
		return;
	}
	free(p); /* ordinary memory: hora_comm_mem_alloc's fallback */
}

int hora_comm_describe(struct hora_comm *c, size_t bytes, char *buf, size_t len)
{
	pthread_mutex_lock(&c->net_mu);
	const int k = c->net ? hora_net_comm_describe(c->net, bytes, buf, len)
			     : snprintf(buf, len, "no communicator (a re-form failed)");
	pthread_mutex_unlock(&c->net_mu);
	return k;
}

const char *hora_comm_device_path(struct hora_comm *c)
{
	return devcoll_describe(atomic_load(&c->dev));
}

/* (a re-form that failed left no net comm: the rank before it, of one) */
int hora_comm_rank(const struct hora_comm *c)
{
	return c->net ? hora_net_comm_rank(c->net) : c->last_rank;
}
int hora_comm_size(const struct hora_comm *c)
{
	return c->net ? hora_net_comm_size(c->net) : 1;
}
int hora_rank(const struct hora_comm *c)
{
	return c ? hora_comm_rank(c) : 0;
}
int hora_size(const struct hora_comm *c)
{
	return c ? hora_comm_size(c) : 1;
}
int hora_local_rank(const struct hora_comm *c)
{
	return c ? c->local_rank : 0;
}
int hora_local_size(const struct hora_comm *c)
{
	return c ? c->local_size : 1;
}
const char *hora_comm_last_error(const struct hora_comm *c)
{
	if (atomic_load_explicit(&c->stopped, memory_order_acquire) || !c->net)
		return c->stop_msg;
	return hora_net_comm_error(c->net);
}
bool hora_comm_stalled(const struct hora_comm *c)
{
	return atomic_load_explicit(&c->stopped, memory_order_acquire) != 0;
}
int hora_comm_stop_code(const struct hora_comm *c)
{
	return atomic_load_explicit(&c->stopped, memory_order_acquire);
}
const char *hora_comm_stop_message(const struct hora_comm *c)
{
	return hora_comm_stop_code(c) ? c->stop_msg : "";
}
void hora_comm_set_fusion_override(struct hora_comm *c, const struct hora_fusion_override *o)
{
	c->fusion = *o;
}
const struct hora_fusion_override *hora_comm_fusion_override(const struct hora_comm *c)
{
	return &c->fusion;
}
size_t hora_comm_small_bytes(const struct hora_comm *c)
{
	if (!c->net)
		return 0;
	return hora_net_comm_small_bytes(c->net);
}
/* The algorithm choice is read by whichever thread runs a collective: a
 * change waits until nothing is queued or running, so that every queued call
 * runs with the setting its caller saw (and the same on every rank). */
static void wait_idle(struct hora_comm *c)
{
	pthread_mutex_lock(&c->mu);
	while (c->head || c->running || c->inline_busy)
		pthread_cond_wait(&c->cv, &c->mu);
}

int hora_comm_set_small_bytes(struct hora_comm *c, size_t bytes)
{
	hora_comm_keep_claim(c); /* the keeper's rounds run with the settings before it */
	if (!c->net)
		return atomic_load(&c->stopped); /* a re-form failed: every call fails so */
	wait_idle(c);
	int rc = hora_net_comm_set_small_bytes(c->net, bytes);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int hora_comm_set_neighbor_check(struct hora_comm *c, int on)
{
	hora_comm_keep_claim(c); /* the keeper's rounds run with the settings before it */
	if (!c->net)
		return atomic_load(&c->stopped);
	wait_idle(c);
	hora_net_comm_set_neighbor_check(c->net, on != 0);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int hora_comm_set_algorithm(struct hora_comm *c, enum hora_algo algo)
{
	if (algo < HORA_ALGO_AUTO || algo > HORA_ALGO_DIRECT_RING)
		return -EINVAL;
	hora_comm_keep_claim(c);
	if (!c->net)
		return atomic_load(&c->stopped);
	wait_idle(c);
	hora_net_comm_set_algo(c->net, (enum hora_net_algo)algo);
	c->algo = algo;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* ---- elastic training: the next view ----------------------------------------- */

void hora_comm_set_elastic(struct hora_comm *c, const struct hora_comm_elastic *el)
{
	c->el = *el;
	c->elastic = true;
}

double hora_comm_detect_s(const struct hora_comm *c)
{
	return c && c->elastic && c->el.detect_s > 0 ? c->el.detect_s : 5.0;
}

bool hora_comm_joined(const struct hora_comm *c)
{
	return c && c->elastic && c->el.joined;
}

bool hora_comm_is_elastic(const struct hora_comm *c)
{
	return c && c->elastic;
}

uint64_t hora_comm_view(const struct hora_comm *c)
{
	return c ? c->view_id : 0;
}

const struct hora_comm_member *hora_comm_members(const struct hora_comm *c)
{
	return c->members;
}

bool hora_comm_dropped(struct hora_comm *c)
{
	return c && atomic_exchange_explicit(&c->dropped, false, memory_order_acq_rel);
}

bool hora_comm_joiners(struct hora_comm *c)
{
	return c && c->elastic && c->el.pending && c->members && c->net &&
	       c->el.pending(c->el.arg, c->members, hora_net_comm_size(c->net));
}

/* Replace the net comm by the next view's (the caller's thread is the only
 * one using c: no request queued or running, which is waited for). The
 * monitor stops first and starts again over the new members. */
int hora_comm_reform(struct hora_comm *c, char *err, size_t errlen)
{
	if (!c->elastic)
		return snprintf(err, errlen, "not an elastic communicator"), -EINVAL;
	hora_comm_keep_claim(c);
	pthread_mutex_lock(&c->mu);
	c->ready_done = false; /* the next formation's rounds are to come */
	while (c->head || c->running || c->inline_busy)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	hora_comm_watch_stop(c);
	struct hora_net_comm *old = c->net;
	pthread_mutex_lock(&c->net_mu);
	c->last_rank = old ? hora_net_comm_rank(old) : c->last_rank;
	c->net = NULL;
	pthread_mutex_unlock(&c->net_mu);
	devcoll_reset(atomic_load(&c->dev), false); /* NCCL over the next view, at its first device call */
	hora_net_comm_destroy(old); /* its port is the next one's */
	struct hora_comm_next nx = {0};
	int rc = c->el.next(c->el.arg, c->view_id, &nx, err, errlen);
	if (rc) {
		snprintf(c->stop_msg, sizeof(c->stop_msg), "%s", err);
		atomic_store_explicit(&c->stopped, rc, memory_order_release);
		return rc;
	}
	pthread_mutex_lock(&c->net_mu);
	c->net = nx.net;
	hora_net_comm_set_regions(c->net, c->regions);
	free(c->members);
	c->members = nx.members;
	c->view_id = nx.view;
	pthread_mutex_unlock(&c->net_mu);
	hora_net_comm_set_algo(c->net, (enum hora_net_algo)c->algo);
	count_local_members(c);
	atomic_store_explicit(&c->stop_pending, false, memory_order_release);
	atomic_store_explicit(&c->stopped, 0, memory_order_release);
	atomic_store(&c->monitor_stop, false);
	pthread_mutex_lock(&c->mu);
	hora_comm_watch_start(c);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

#define REQ(k, ...) ((struct hora_request){.c = c, .kind = (k), __VA_ARGS__})

int hora_allreduce(struct hora_comm *c, const void *send, void *recv, size_t count, enum hora_dtype t,
		   enum hora_op op)
{
	return run_blocking(REQ(HORA_NET_COLL_ALLREDUCE, .send = send, .recv = recv, .count = count, .t = t, .op = op));
}
int hora_broadcast(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t, int root)
{
	return run_blocking(REQ(HORA_NET_COLL_BROADCAST, .recv = buf, .count = count, .t = t, .root = root));
}
int hora_allgather(struct hora_comm *c, const void *send, void *recv, size_t count, enum hora_dtype t)
{
	return run_blocking(REQ(HORA_NET_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .t = t));
}
int hora_reduce_scatter(struct hora_comm *c, const void *send, void *recv, size_t recvcount,
			enum hora_dtype t, enum hora_op op)
{
	return run_blocking(
		REQ(HORA_NET_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = recvcount, .t = t, .op = op));
}
int hora_barrier(struct hora_comm *c)
{
	return run_blocking(REQ(HORA_NET_COLL_BARRIER, .t = HORA_I32));
}

int hora_allreduce_async(struct hora_comm *c, const void *send, void *recv, size_t count,
			 enum hora_dtype t, enum hora_op op, struct hora_request **req)
{
	return submit_async(REQ(HORA_NET_COLL_ALLREDUCE, .send = send, .recv = recv, .count = count, .t = t, .op = op),
			    req);
}
int hora_broadcast_async(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t, int root,
			 struct hora_request **req)
{
	return submit_async(REQ(HORA_NET_COLL_BROADCAST, .recv = buf, .count = count, .t = t, .root = root), req);
}
int hora_allgather_async(struct hora_comm *c, const void *send, void *recv, size_t count,
			 enum hora_dtype t, struct hora_request **req)
{
	return submit_async(REQ(HORA_NET_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .t = t), req);
}
int hora_reduce_scatter_async(struct hora_comm *c, const void *send, void *recv, size_t recvcount,
			      enum hora_dtype t, enum hora_op op, struct hora_request **req)
{
	return submit_async(
		REQ(HORA_NET_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = recvcount, .t = t, .op = op),
		req);
}
int hora_barrier_async(struct hora_comm *c, struct hora_request **req)
{
	return submit_async(REQ(HORA_NET_COLL_BARRIER, .t = HORA_I32), req);
}

/* ---- decentralized averaging ------------------------------------------------ */

#define NBR_REQ(...)                                                                                    \
	REQ(HORA_NET_COLL_NEIGHBOR_ALLREDUCE, .send = send, .recv = recv, .count = count, .t = t,       \
	    .self_w = self_weight, .src = src_ranks, .src_w = src_weights, .nsrc = nsrc, .dst = dst_ranks, \
	    .dst_w = dst_weights, .ndst = ndst, __VA_ARGS__)

int hora_neighbor_allreduce(struct hora_comm *c, const void *send, void *recv, size_t count, enum hora_dtype t,
			    double self_weight, const int *src_ranks, const double *src_weights, int nsrc,
			    const int *dst_ranks, const double *dst_weights, int ndst)
{
	return run_blocking(NBR_REQ());
}

/* copy a list (k of them; NULL stays NULL) to *p, moving *p on */
static void *take_list(uint8_t **p, const void *list, int k, size_t each)
{
	if (!list || k <= 0)
		return (void *)list;
	void *out = *p;
	memcpy(out, list, (size_t)k * each);
	*p += (size_t)k * each;
	return out;
}

int hora_neighbor_allreduce_async(struct hora_comm *c, const void *send, void *recv, size_t count,
				  enum hora_dtype t, double self_weight, const int *src_ranks,
				  const double *src_weights, int nsrc, const int *dst_ranks,
				  const double *dst_weights, int ndst, struct hora_request **req)
{
	if (req)
		*req = NULL;
	/* the lists as the caller gave them (a bad one is refused when it runs) */
	const size_t ns = nsrc > 0 ? (size_t)nsrc : 0, nd = ndst > 0 ? (size_t)ndst : 0;
	uint8_t *mem = malloc((ns + nd) * (sizeof(double) + sizeof(int)) + 1), *p = mem;
	if (!mem)
		return -ENOMEM;
	struct hora_request r = NBR_REQ(.owned = mem);
	r.src_w = take_list(&p, src_weights, nsrc, sizeof(double));
	r.dst_w = take_list(&p, dst_weights, ndst, sizeof(double));
	r.src = take_list(&p, src_ranks, nsrc, sizeof(int));
	r.dst = take_list(&p, dst_ranks, ndst, sizeof(int));
	int rc = submit_async(r, req);
	if (rc)
		free(mem);
	return rc;
}

int hora_pair_average(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t, int peer)
{
	return run_blocking(REQ(HORA_NET_COLL_PAIR_AVERAGE, .recv = buf, .count = count, .t = t, .root = peer));
}

int hora_pair_average_async(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t, int peer,
			    struct hora_request **req)
{
	return submit_async(REQ(HORA_NET_COLL_PAIR_AVERAGE, .recv = buf, .count = count, .t = t, .root = peer),
			    req);
}
