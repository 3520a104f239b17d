/* link_view.c - a link over some ranks of another (link_view.h): every op
 * renumbers its ranks and calls the parent's. */
#include "net/coll/link_view.h"

#include <errno.h>

#include <stdlib.h>
#include <string.h>

struct link_view {
	struct hora_net_link base;
	struct hora_net_link_ops ops; /* view_ops, with the parent's wait */
	struct hora_net_link *parent;
	int map[];
};

static struct link_view *view_of(struct hora_net_link *l)
{
	return (struct link_view *)l;
}

static int to_parent(struct hora_net_link *l, int peer)
{
	return peer >= 0 && peer < l->nranks ? view_of(l)->map[peer] : -1;
}

static int v_post_send(struct hora_net_link *l, int peer, const void *buf, size_t len, hora_net_link_done_fn cb,
		       void *arg, struct hora_net_link_req **req)
{
	struct hora_net_link *p = view_of(l)->parent;
	return p->ops->post_send(p, to_parent(l, peer), buf, len, cb, arg, req);
}

static int v_post_recv(struct hora_net_link *l, int peer, void *buf, size_t len, hora_net_link_done_fn cb,
		       void *arg, struct hora_net_link_req **req)
{
	struct hora_net_link *p = view_of(l)->parent;
	return p->ops->post_recv(p, to_parent(l, peer), buf, len, cb, arg, req);
}

static int v_exchange(struct hora_net_link *l, struct hora_net_link_xchg *x)
{
	struct hora_net_link *p = view_of(l)->parent;
	struct hora_net_link_xchg y = *x;
	y.to = x->to < 0 ? -1 : to_parent(l, x->to);
	y.from = x->from < 0 ? -1 : to_parent(l, x->from);
	int rc = p->ops->exchange(p, &y);
	x->dir = y.dir;
	return rc;
}

static int v_notify(struct hora_net_link *l, int peer, const void *buf, size_t len)
{
	struct hora_net_link *p = view_of(l)->parent;
	return p->ops->notify ? p->ops->notify(p, to_parent(l, peer), buf, len) : -ENOTSUP;
}

static int v_peek(struct hora_net_link *l, int peer, void *buf, size_t len, int wait_ms)
{
	struct hora_net_link *p = view_of(l)->parent;
	return p->ops->peek ? p->ops->peek(p, to_parent(l, peer), buf, len, wait_ms) : -ENOTSUP;
}

static void v_interrupt(struct hora_net_link *l, const char *why)
{
	struct hora_net_link *p = view_of(l)->parent;
	if (p->ops->interrupt)
		p->ops->interrupt(p, why);
}

static void v_close(struct hora_net_link *l, int peer)
{
	struct hora_net_link *p = view_of(l)->parent;
	for (int i = 0; i < l->nranks; i++)
		if (i != l->rank && (peer < 0 || peer == i))
			p->ops->close(p, view_of(l)->map[i]);
}

static void v_destroy(struct hora_net_link *l)
{
	free(l);
}

static const struct hora_net_link_ops view_ops = {
	.post_send = v_post_send, .post_recv = v_post_recv, .exchange = v_exchange,
	.notify = v_notify, .peek = v_peek, .interrupt = v_interrupt, .close = v_close, .destroy = v_destroy,
};

struct hora_net_link *hora_net_link_view(struct hora_net_link *parent, int rank, int n, const int *map)
{
	struct link_view *v = calloc(1, sizeof(*v) + sizeof(int) * (size_t)n);
	if (!v)
		return NULL;
	v->ops = view_ops;
	v->ops.wait = parent->ops->wait; /* a request is the parent's */
	v->base.ops = &v->ops;
	v->base.rank = rank;
	v->base.nranks = n;
	v->parent = parent;
	memcpy(v->map, map, sizeof(int) * (size_t)n);
	return &v->base;
}
