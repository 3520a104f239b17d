/* comm.c - a communicator's life: its settings (defaults), its buffers, its
 * link (link_tcp.c today), teardown, and the small accessors of coll.h.
 * The collectives are in dispatch.c.
 */
#include "net/coll/internal.h"
#include "net/coll/link_tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the settings with every default filled in */
static void apply_defaults(struct hora_net_comm_cfg *cfg)
{
	if (!cfg->connect_timeout_ms)
		cfg->connect_timeout_ms = 30000;
	if (!cfg->small_cap)
		cfg->small_cap = 1 << 20;
	if (!cfg->small_bytes)
		cfg->small_bytes = HORA_NET_SMALL_DEFAULT;
	if (!cfg->medium_bytes)
		cfg->medium_bytes = HORA_NET_MEDIUM_DEFAULT;
	if (cfg->small_bytes > cfg->small_cap)
		cfg->small_cap = cfg->small_bytes;
	if (!cfg->segment_bytes)
		cfg->segment_bytes = 1 << 20;
	if (!cfg->slice_bytes)
		cfg->slice_bytes = HORA_NET_SLICE_DEFAULT;
	if (cfg->depth < 1)
		cfg->depth = 4;
	cfg->spin_us = cfg->spin_us < 0 ? 0 : cfg->spin_us ? cfg->spin_us : HORA_NET_SPIN_DEFAULT;
}

static struct hora_net_comm *comm_alloc(const struct hora_net_comm_cfg *cfg)
{
	struct hora_net_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	atomic_init(&c->abort_origin, -1);
	atomic_init(&c->lost_origin, -1);
	pthread_mutex_init(&c->refusal_mu, NULL);
	pthread_mutex_init(&c->stage_mu, NULL);
	c->refusal.by = -1;
	c->fail_peer = -1;
	c->notice_wait_ms = 20;
	c->cfg = *cfg;
	apply_defaults(&c->cfg);
	c->rank = cfg->rank;
	c->n = cfg->nranks;
	c->spin_us = c->cfg.spin_us;
	c->pool = malloc(c->cfg.segment_bytes * (size_t)c->cfg.depth);
	c->small = malloc(c->cfg.small_cap + 64);
	c->pair_seq = calloc((size_t)(c->n > 0 ? c->n : 1), sizeof(*c->pair_seq));
	if (!c->pool || !c->small || !c->pair_seq) {
		hora_net_comm_destroy(c);
		return NULL;
	}
	return c;
}

int hora_net_comm_create(const struct hora_net_comm_cfg *cfg, struct hora_net_comm **out, char *err,
			 size_t errlen)
{
	*out = NULL;
	if (cfg->nranks < 1 || cfg->rank < 0 || cfg->rank >= cfg->nranks || cfg->nranks > 65535)
		return snprintf(err, errlen, "rank %d of %d: invalid", cfg->rank, cfg->nranks), -EINVAL;
	struct hora_net_comm *c = comm_alloc(cfg);
	if (!c)
		return -ENOMEM;
	if (c->n > 1) {
		int rc = hora_net_link_tcp_create(&c->cfg, &c->link, err, errlen);
		if (!rc)
			rc = topo_setup(c, err, errlen);
		c->cfg.check = NULL; /* borrowed for the formation only */
		c->cfg.check_arg = NULL;
		if (rc) {
			hora_net_comm_destroy(c);
			return rc;
		}
	}
	*out = c;
	return 0;
}

struct hora_net_comm *comm_sub(const struct hora_net_comm *parent, int rank, int n, struct hora_net_link *link)
{
	struct hora_net_comm_cfg cfg = parent->cfg;
	cfg.rank = rank;
	cfg.nranks = n;
	cfg.addrs = NULL;
	struct hora_net_comm *c = comm_alloc(&cfg);
	if (c) {
		c->link = link;
		c->algo = parent->algo;
		c->quiet = true;
	}
	return c;
}

void hora_net_comm_interrupt(struct hora_net_comm *c, const char *why)
{
	atomic_store(&c->interrupted, 1);
	if (c->cross)
		atomic_store(&c->cross->interrupted, 1);
	pthread_mutex_lock(&c->stage_mu); /* a failing call may be leaving the stage */
	if (c->stage)
		c->stage->ops->interrupt(c->stage);
	pthread_mutex_unlock(&c->stage_mu);
	if (c->link && c->link->ops->interrupt)
		c->link->ops->interrupt(c->link, why);
}

void hora_net_comm_interrupt_lost(struct hora_net_comm *c, int lost_rank, const char *why)
{
	int none = -1; /* a loss a notice named first stays the one we name */
	if (lost_rank >= 0 && lost_rank < c->n && lost_rank != c->rank)
		atomic_compare_exchange_strong(&c->lost_origin, &none, lost_rank);
	hora_net_comm_interrupt(c, why);
}

void hora_net_comm_destroy(struct hora_net_comm *c)
{
	if (!c)
		return;
	topo_free(c); /* the stage before the link: it may watch the link's sockets */
	if (c->link)
		c->link->ops->destroy(c->link);
	pthread_mutex_destroy(&c->refusal_mu);
	pthread_mutex_destroy(&c->stage_mu);
	free(c->pool);
	free(c->small);
	free(c->scratch);
	free(c->nbr_buf);
	free(c->pair_seq);
	free(c);
}

const char *hora_net_comm_error(const struct hora_net_comm *c)
{
	return c->err;
}

int hora_net_comm_rank(const struct hora_net_comm *c)
{
	return c->rank;
}

int hora_net_comm_size(const struct hora_net_comm *c)
{
	return c->n;
}

void hora_net_comm_set_algo(struct hora_net_comm *c, enum hora_net_algo algo)
{
	c->algo = algo;
	if (c->cross) /* the hierarchical allreduce's stage across hosts follows it */
		c->cross->algo = algo;
}

void hora_net_comm_set_neighbor_check(struct hora_net_comm *c, bool on)
{
	c->nbr_nocheck = !on;
}

void hora_net_comm_set_regions(struct hora_net_comm *c, struct hora_net_shm_regions *regs)
{
	c->regions = regs;
}

uint64_t hora_net_comm_single_copy_calls(const struct hora_net_comm *c)
{
	return atomic_load_explicit(&((struct hora_net_comm *)c)->single_copy, memory_order_relaxed);
}

size_t hora_net_comm_small_bytes(const struct hora_net_comm *c)
{
	return c->cfg.small_bytes;
}

int hora_net_comm_set_small_bytes(struct hora_net_comm *c, size_t bytes)
{
	if (bytes > c->cfg.small_cap)
		return -EINVAL;
	c->cfg.small_bytes = bytes;
	return 0;
}

void hora_net_comm_progress(struct hora_net_comm *c, uint64_t *seq, uint32_t *kind, int *inside,
			    int64_t *since_ms)
{
	*seq = atomic_load(&c->p_seq);
	*kind = atomic_load(&c->p_kind);
	*inside = atomic_load(&c->p_inside);
	*since_ms = atomic_load(&c->p_since_ms);
}
