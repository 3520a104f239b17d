/* devcoll.c - the collectives on device buffers (devcoll.h): NCCL among
 * the ranks of one host, else staged through page-locked host memory. */
#include "devcoll.h"
#include "hora.h"
#include "log.h"

#include "gpu/hora_gpu.h"
#include "net/coll/reduce.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An NCCL call not done after the communicator's I/O timeout
 * (transport.io_timeout_ms, as a host call with no progress) is hung: it
 * fails and NCCL is aborted. A peer the failure detector declared dead
 * ends the wait sooner (devcoll_interrupt). */
static int nccl_wait_ms(const struct hora_net_comm *net)
{
	const int ms = hora_net_comm_io_timeout_ms(net);
	return ms > 0 ? ms : 30000; /* an I/O timeout of 0 (never) does not leave NCCL unbounded */
}

/* fingerprint variants: every rank of a call takes the same one */
enum { VIA_NCCL = 1, VIA_STAGED = 2, VIA_SETUP = 3, VIA_HIER = 4 };
enum { NCCL_UNTRIED = 0, NCCL_ON = 1, NCCL_OFF = -1 };

struct hora_devcoll {
	/* nccl against devcoll_interrupt (any thread); the rest is the
	 * executing thread's */
	pthread_mutex_t mu;
	bool interrupted;
	int nccl_state;
	int device; /* NCCL's */
	struct hora_gpu_nccl *nccl;
	void *host[2]; /* page-locked staging: [0] the receive side, [1] the send side */
	size_t host_bytes[2];
	char why[320]; /* why NCCL is off */
	long long staged, by_nccl; /* calls that went each way */
	int setups;                /* NCCL communicators built (a re-form builds another) */
	char desc[400];
};

struct run_ctx {
	struct hora_devcoll *d;
	struct hora_net_comm *net;
	const struct devcoll_call *k;
	int device; /* the buffers' */
};

/* 1 when p is device memory (*device set), 0 host or NULL */
static int on_device(const void *p, int *device)
{
	int dev = -1;
	if (!p || hora_gpu_mem_kind(p, &dev) != 1)
		return 0;
	*device = dev;
	return 1;
}

bool devcoll_wants(const struct devcoll_call *k, int *device)
{
	*device = -1;
	if (k->kind == HORA_NET_COLL_BARRIER)
		return false;
	int dev = -1;
	const int s = k->send ? hora_gpu_mem_kind(k->send, &dev) : 0;
	const int r = k->recv ? hora_gpu_mem_kind(k->recv, &dev) : 0;
	if (s < 0 || r < 0) { /* a CUDA error: neither path may touch the buffers */
		*device = DEVCOLL_UNKNOWN;
		return true;
	}
	*device = dev;
	return s == 1 || r == 1;
}

/* bytes read from send and written to recv (begin refused counts whose
 * sizes would wrap) */
static void sizes(const struct devcoll_call *k, int n, size_t *in, size_t *out)
{
	const size_t e = hora_net_dtype_size(k->t) * k->count;
	*in = k->kind == HORA_NET_COLL_REDUCE_SCATTER ? e * (size_t)n : e;
	*out = k->kind == HORA_NET_COLL_ALLGATHER ? e * (size_t)n : e;
}

static int host_buf(struct hora_devcoll *d, int i, size_t bytes, void **out, char *err, size_t errlen)
{
	if (d->host_bytes[i] < bytes || !d->host[i]) {
		hora_gpu_host_free(d->host[i]);
		d->host[i] = NULL;
		d->host_bytes[i] = 0;
		const size_t b = bytes < 4096 ? 4096 : bytes;
		char e[300] = "";
		int rc = hora_gpu_host_alloc(b, &d->host[i], e, sizeof(e));
		if (rc) {
			snprintf(err, errlen, "page-locked host memory for %zu bytes: %s", b, e);
			return rc;
		}
		d->host_bytes[i] = b;
	}
	*out = d->host[i];
	return 0;
}

static int copy(int device, void *dst, const void *src, size_t bytes, int kind, const char *what, char *err,
		size_t errlen)
{
	if (!bytes)
		return 0;
	char e[300] = "";
	int rc = hora_gpu_copy(device, dst, src, bytes, kind, e, sizeof(e));
	if (rc)
		snprintf(err, errlen, "copying the %s %s (%zu bytes, device %d): %s", what,
			 kind == HORA_GPU_D2H ? "to host memory" : kind == HORA_GPU_H2D ? "to the device" : "on the device",
			 bytes, device, e);
	return rc;
}

/* one rank: the result is the send buffer (allreduce, allgather, reduce-scatter) */
static int alone(const struct devcoll_call *k, size_t bytes, char *err, size_t errlen)
{
	if (k->kind == HORA_NET_COLL_BROADCAST || k->send == k->recv || !bytes)
		return 0;
	int sd = -1, rd = -1;
	const int s = on_device(k->send, &sd), r = on_device(k->recv, &rd);
	const int kind = s && r ? HORA_GPU_D2D : s ? HORA_GPU_D2H : HORA_GPU_H2D;
	return copy(s ? sd : rd, k->recv, k->send, bytes, kind, "send buffer", err, errlen);
}

/* Staged: device buffers copied to host memory, the host collective, the
 * result copied back. In-place layouts (send inside recv) stay in place. */
static int staged_run(void *arg, char *err, size_t errlen)
{
	const struct run_ctx *x = arg;
	const struct devcoll_call *k = x->k;
	struct hora_devcoll *d = x->d;
	const int n = hora_net_comm_size(x->net), rank = hora_net_comm_rank(x->net);
	size_t in, out;
	sizes(k, n, &in, &out);
	d->staged++;
	if (n == 1 && k->kind != HORA_NET_COLL_PAIR_AVERAGE && k->kind != HORA_NET_COLL_NEIGHBOR_ALLREDUCE)
		return alone(k, in, err, errlen);
	int sd = -1, rd = -1, rc;
	const int s_on = on_device(k->send, &sd), r_on = on_device(k->recv, &rd);
	void *hrecv = k->recv, *hsend = (void *)(uintptr_t)k->send;
	if (r_on && (rc = host_buf(d, 0, out, &hrecv, err, errlen)))
		return rc;
	if (s_on) {
		const uint8_t *s = k->send, *r = k->recv;
		if (r_on && s >= r && s + in <= r + out)
			hsend = (uint8_t *)hrecv + (s - r); /* in place */
		else if ((rc = host_buf(d, 1, in, &hsend, err, errlen)))
			return rc;
		if ((rc = copy(sd, hsend, k->send, in, HORA_GPU_D2H, "send buffer", err, errlen)))
			return rc;
	}
	/* the buffer of a broadcast's root and of a pair average is read */
	const bool reads = k->kind == HORA_NET_COLL_PAIR_AVERAGE ||
			   (k->kind == HORA_NET_COLL_BROADCAST && rank == k->root);
	if (r_on && reads && (rc = copy(rd, hrecv, k->recv, out, HORA_GPU_D2H, "buffer", err, errlen)))
		return rc;
	if ((rc = k->host(k->arg, hsend, hrecv)))
		return rc; /* it broke the communicator, with its own message */
	if (r_on && (rc = copy(rd, k->recv, hrecv, out, HORA_GPU_H2D, "result", err, errlen)))
		return rc;
	return 0;
}

static void nccl_drop(struct hora_devcoll *d)
{
	pthread_mutex_lock(&d->mu);
	struct hora_gpu_nccl *g = d->nccl;
	d->nccl = NULL;
	pthread_mutex_unlock(&d->mu);
	if (g)
		hora_gpu_nccl_destroy(g, 1);
}

static void nccl_off(struct hora_devcoll *d, const char *fmt, const char *why)
{
	nccl_drop(d);
	d->nccl_state = NCCL_OFF;
	snprintf(d->why, sizeof(d->why), fmt, why);
}

static int nccl_run(void *arg, char *err, size_t errlen)
{
	const struct run_ctx *x = arg;
	const struct devcoll_call *k = x->k;
	struct hora_devcoll *d = x->d;
	int gk = HORA_GPU_ALLREDUCE;
	if (k->kind == HORA_NET_COLL_BROADCAST)
		gk = HORA_GPU_BROADCAST;
	else if (k->kind == HORA_NET_COLL_ALLGATHER)
		gk = HORA_GPU_ALLGATHER;
	else if (k->kind == HORA_NET_COLL_REDUCE_SCATTER)
		gk = HORA_GPU_REDUCE_SCATTER;
	const void *send = k->kind == HORA_NET_COLL_BROADCAST ? k->recv : k->send;
	char e[300] = "";
	d->by_nccl++;
	int rc = hora_gpu_nccl_coll(d->nccl, gk, send, k->recv, k->count, (int)k->t, (int)k->op, k->root,
				    nccl_wait_ms(x->net), e, sizeof(e));
	if (rc) {
		snprintf(err, errlen, "NCCL %s on device %d: %s", hora_net_coll_name(k->kind), d->device, e);
		nccl_off(d, "NCCL failed: %s", e); /* the communicator is broken now: a re-form resets it */
	}
	return rc;
}

/* can this rank build an NCCL communicator (a GPU library of ABI >= 3)? */
static bool nccl_here(char *why, size_t len)
{
	const struct hora_gpu_ops *ops;
	if (hora_gpu_get(&ops, why, len))
		return false;
	if (ops->abi_version < 3 || !ops->nccl_init) {
		snprintf(why, len, "%s has ABI version %d (NCCL needs 3)", hora_gpu_loaded_path(), ops->abi_version);
		return false;
	}
	return true;
}

/* The first NCCL-eligible device call, on every rank: each host's local
 * rank 0 makes an ncclUniqueId, every rank's {ready, id} goes to all by an
 * allgather over hora's transport, each rank joins its host's NCCL
 * communicator with its local rank 0's id; each step's outcome agreed
 * (MIN over all ranks), so that all use NCCL or none does. A failure of
 * these collectives is the call's (returned). */
static int nccl_setup(struct hora_devcoll *d, struct hora_net_comm *net, int device)
{
	const int n = hora_net_comm_size(net);
	int lrank, nlocal, local0;
	hora_net_comm_local(net, &lrank, &nlocal, &local0);
	struct idmsg {
		int32_t ok;
		uint8_t id[HORA_GPU_NCCL_ID_BYTES];
	} mine = {0}, *all = calloc((size_t)n, sizeof(*all));
	_Static_assert(sizeof(struct idmsg) % 4 == 0, "the id message is whole int32s");
	if (!all)
		return -ENOMEM;
	char e[300] = "";
	mine.ok = nccl_here(e, sizeof(e));
	if (mine.ok && lrank == 0 && hora_gpu_nccl_unique_id(mine.id, e, sizeof(e)))
		mine.ok = 0;
	int rc = hora_net_allgather(net, &mine, all, sizeof(mine) / 4, HORA_NET_I32);
	int32_t ok = !rc && mine.ok && all[local0].ok;
	if (!rc)
		rc = hora_net_allreduce(net, &ok, &ok, 1, HORA_NET_I32, HORA_NET_MIN);
	if (rc || !ok) {
		free(all);
		if (!rc)
			nccl_off(d, "NCCL is not there on every rank (here: %s)", e[0] ? e : "it is");
		return rc;
	}
	struct hora_gpu_nccl *g = NULL;
	int32_t good = hora_gpu_nccl_init(all[local0].id, nlocal, lrank, device, &g, e, sizeof(e)) == 0;
	free(all);
	pthread_mutex_lock(&d->mu);
	d->nccl = g;
	if (g && d->interrupted) /* the job is being stopped: no NCCL wait now */
		hora_gpu_nccl_interrupt(g);
	pthread_mutex_unlock(&d->mu);
	int32_t every = good;
	if ((rc = hora_net_allreduce(net, &every, &every, 1, HORA_NET_I32, HORA_NET_MIN))) {
		nccl_off(d, "%s", "the NCCL set-up failed");
		return rc;
	}
	if (!every) {
		nccl_off(d, "%s", good ? "another rank's NCCL init failed" : e);
		return 0;
	}
	d->nccl_state = NCCL_ON;
	d->device = device;
	d->setups++;
	HORA_LOGD("device collectives: NCCL among the %d ranks of this host, device %d", nlocal, device);
	return 0;
}

/* Several hosts of several ranks each: NCCL's reduce-scatter within the
 * host, this rank's shard copied to host memory, its allreduce across
 * hosts among the ranks with the same local rank (the cross-host TCP ring,
 * hora_net_comm_cross), copied back, NCCL's allgather within the host
 * (Horovod's NCCLHierarchicalAllreduce, hora's ring across). The count %
 * nlocal elements past the last whole shard go through the host allreduce
 * of every rank. AVG: sums, divided once on the host shard. */
static int hier_run(void *arg, char *err, size_t errlen)
{
	const struct run_ctx *x = arg;
	const struct devcoll_call *k = x->k;
	struct hora_devcoll *d = x->d;
	int lrank, nlocal, local0, rc;
	hora_net_comm_local(x->net, &lrank, &nlocal, &local0);
	const size_t e = hora_net_dtype_size(k->t), q = k->count / (size_t)nlocal, tail = k->count - q * (size_t)nlocal;
	const enum hora_net_op sum = k->op == HORA_NET_AVG ? HORA_NET_SUM : k->op;
	uint8_t *shard = (uint8_t *)k->recv + (size_t)lrank * q * e;
	void *h;
	char m[300] = "";
	d->by_nccl += q > 0;
	d->staged += q == 0;
	if (q) {
		if ((rc = hora_gpu_nccl_coll(d->nccl, HORA_GPU_REDUCE_SCATTER, k->send, shard, q, (int)k->t, (int)sum,
					     0, nccl_wait_ms(x->net), m, sizeof(m))) ||
		    (rc = host_buf(d, 0, q * e, &h, m, sizeof(m))) ||
		    (rc = copy(x->device, h, shard, q * e, HORA_GPU_D2H, "shard", m, sizeof(m))))
			goto fail;
		if ((rc = hora_net_allreduce(hora_net_comm_cross(x->net), h, h, q, k->t, sum))) {
			snprintf(err, errlen, "allreduce across hosts: %s", hora_net_comm_error(hora_net_comm_cross(x->net)));
			return rc;
		}
		if (k->op == HORA_NET_AVG)
			hora_net_scale(h, q, k->t, hora_net_comm_size(x->net));
		if ((rc = copy(x->device, shard, h, q * e, HORA_GPU_H2D, "shard", m, sizeof(m))) ||
		    (rc = hora_gpu_nccl_coll(d->nccl, HORA_GPU_ALLGATHER, shard, k->recv, q, (int)k->t, 0, 0,
					     nccl_wait_ms(x->net), m, sizeof(m))))
			goto fail;
	}
	if (!tail)
		return 0;
	const size_t at = q * (size_t)nlocal * e;
	if ((rc = host_buf(d, 1, tail * e, &h, m, sizeof(m))) ||
	    (rc = copy(x->device, h, (const uint8_t *)k->send + at, tail * e, HORA_GPU_D2H, "tail", m, sizeof(m))))
		goto fail;
	if ((rc = hora_net_allreduce(x->net, h, h, tail, k->t, k->op)))
		return rc; /* it broke the communicator */
	if (!(rc = copy(x->device, (uint8_t *)k->recv + at, h, tail * e, HORA_GPU_H2D, "tail", m, sizeof(m))))
		return 0;
fail:
	snprintf(err, errlen, "the hierarchical allreduce on device %d: %s", x->device, m);
	nccl_off(d, "a device call failed: %s", m); /* the communicator is broken now: a re-form resets it */
	return rc;
}

/* the first device call of a one-host communicator: the set-up (after the
 * call's fingerprint, so that a rank with host buffers is named), then the
 * call the way the set-up decided, the same on every rank */
static int setup_run(void *arg, char *err, size_t errlen)
{
	const struct run_ctx *x = arg;
	int rc = nccl_setup(x->d, x->net, x->device);
	if (rc)
		return rc; /* a collective of the set-up failed: it broke the communicator */
	if (x->d->nccl_state != NCCL_ON)
		return staged_run(arg, err, errlen);
	return hora_net_comm_hosts(x->net) == 1 ? nccl_run(arg, err, errlen) : hier_run(arg, err, errlen);
}

static bool nccl_kind(enum hora_net_coll_kind k)
{
	return k == HORA_NET_COLL_ALLREDUCE || k == HORA_NET_COLL_BROADCAST || k == HORA_NET_COLL_ALLGATHER ||
	       k == HORA_NET_COLL_REDUCE_SCATTER;
}

static int no_memory(void *arg, char *err, size_t errlen)
{
	(void)arg;
	snprintf(err, errlen, "no memory for the device collectives' state");
	return -ENOMEM;
}

static int cannot_tell(void *arg, char *err, size_t errlen)
{
	(void)arg;
	snprintf(err, errlen, "CUDA cannot tell whether a buffer of this call is device memory "
			      "(cudaPointerGetAttributes failed)");
	return -EIO;
}

/* The pair average is no collective of every rank (net/coll numbers it per
 * pair): staged, outside hora_net_device_call; a copy that fails breaks
 * the communicator, so the peer does not wait for us. */
static int pair_staged(struct hora_devcoll *d, struct hora_net_comm *net, const struct devcoll_call *k)
{
	char err[400] = "";
	const size_t bytes = hora_net_dtype_size(k->t) * k->count;
	int dev = -1, rc;
	void *h = k->recv;
	d->staged++;
	const int on = on_device(k->recv, &dev);
	if (on && ((rc = host_buf(d, 0, bytes, &h, err, sizeof(err))) ||
		   (rc = copy(dev, h, k->recv, bytes, HORA_GPU_D2H, "buffer", err, sizeof(err)))))
		return hora_net_comm_fail(net, rc, err);
	if ((rc = k->host(k->arg, h, h)))
		return rc;
	if (on && (rc = copy(dev, k->recv, h, bytes, HORA_GPU_H2D, "result", err, sizeof(err))))
		return hora_net_comm_fail(net, rc, err);
	return 0;
}

int devcoll_run(struct hora_devcoll *_Atomic *dp, struct hora_net_comm *net, const struct devcoll_call *k,
		int device)
{
	struct hora_net_device_args a = {.kind = k->kind, .send = k->send, .recv = k->recv, .count = k->count,
					 .t = k->t, .op = k->op, .root = k->root, .variant = VIA_STAGED};
	if (device == DEVCOLL_UNKNOWN)
		return hora_net_device_call(net, &a, cannot_tell, NULL);
	struct hora_devcoll *d = atomic_load(dp);
	if (!d) {
		if (!(d = calloc(1, sizeof(*d))))
			return hora_net_device_call(net, &a, no_memory, NULL);
		pthread_mutex_init(&d->mu, NULL);
		atomic_store(dp, d);
	}
	if (k->kind == HORA_NET_COLL_PAIR_AVERAGE)
		return pair_staged(d, net, k);
	struct run_ctx x = {.d = d, .net = net, .k = k};
	int sd = -1, rd = -1;
	const bool all_dev = on_device(k->recv, &rd) &&
			     (k->kind == HORA_NET_COLL_BROADCAST || (on_device(k->send, &sd) && sd == rd));
	x.device = rd;
	int lrank, nlocal, local0;
	hora_net_comm_local(net, &lrank, &nlocal, &local0);
	const bool one_host = hora_net_comm_hosts(net) == 1;
	/* the same on every rank but for the buffers, which the fingerprint checks */
	const bool eligible = hora_net_comm_size(net) > 1 && all_dev &&
			      (one_host ? nccl_kind(k->kind)
					: k->kind == HORA_NET_COLL_ALLREDUCE && nlocal > 1 && hora_net_comm_cross(net));
	hora_net_device_fn run = staged_run;
	if (eligible && d->nccl_state == NCCL_UNTRIED) /* every rank: the same first device call */
		a.variant = VIA_SETUP, run = setup_run;
	else if (eligible && d->nccl_state == NCCL_ON && d->device == rd)
		a.variant = one_host ? VIA_NCCL : VIA_HIER, run = one_host ? nccl_run : hier_run;
	return hora_net_device_call(net, &a, run, &x);
}

void devcoll_reset(struct hora_devcoll *d, bool free_all)
{
	if (!d)
		return;
	nccl_drop(d);
	d->nccl_state = NCCL_UNTRIED;
	pthread_mutex_lock(&d->mu);
	d->interrupted = false;
	pthread_mutex_unlock(&d->mu);
	if (!free_all)
		return;
	for (int i = 0; i < 2; i++)
		hora_gpu_host_free(d->host[i]);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

void devcoll_interrupt(struct hora_devcoll *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->interrupted = true;
	if (d->nccl)
		hora_gpu_nccl_interrupt(d->nccl);
	pthread_mutex_unlock(&d->mu);
}

const char *devcoll_describe(struct hora_devcoll *d)
{
	if (!d || (!d->staged && !d->by_nccl))
		return "device buffers: not used yet";
	int k = snprintf(d->desc, sizeof(d->desc), "device buffers: %lld calls by NCCL, %lld staged through host memory",
			 d->by_nccl, d->staged);
	if (d->nccl_state == NCCL_ON)
		snprintf(d->desc + k, sizeof(d->desc) - (size_t)k, "; NCCL on device %d, set up %d time%s", d->device,
			 d->setups, d->setups == 1 ? "" : "s");
	else if (d->nccl_state == NCCL_OFF)
		snprintf(d->desc + k, sizeof(d->desc) - (size_t)k, "; no NCCL: %s", d->why);
	return d->desc;
}

int hora_cuda_init(char *why, size_t whylen)
{
	return hora_gpu_device_count(why, whylen);
}
