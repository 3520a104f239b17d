/* apair.c - the public asynchronous pair averaging (hora.h): the engine
 * of net/coll/apair.c on a channel of its own (hora_comm_open_channel),
 * its waits stopped by the job's stop (the membership's lost worker, the
 * stall abort). */
#include "hora.h"

#include "comm.h"

#include "net/coll/apair.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct hora_apair {
	struct hora_comm *c;
	struct hora_net_apair *net;
	char err[512];
};

_Static_assert((int)HORA_APAIR_SERVED == (int)HORA_NET_APAIR_SERVED &&
		       (int)HORA_APAIR_NONE == (int)HORA_NET_APAIR_NONE,
	       "public and net apair events differ");

int hora_apair_create(struct hora_comm *c, int port_offset, size_t count, enum hora_dtype t,
		      struct hora_apair **out, char *err, size_t errlen)
{
	*out = NULL;
	if (t != HORA_F32 && t != HORA_F64)
		return snprintf(err, errlen, "asynchronous pairs: f32 or f64 only"), -EINVAL;
	struct hora_apair *a = calloc(1, sizeof(*a));
	if (!a)
		return snprintf(err, errlen, "asynchronous pairs: out of memory"), -ENOMEM;
	a->c = c;
	struct hora_net_comm *chan;
	int rc = hora_comm_open_channel(c, port_offset, &chan, err, errlen);
	if (!rc)
		rc = hora_net_apair_create(chan, count, (enum hora_net_dtype)t, &a->net, err, errlen);
	if (rc) {
		free(a);
		return rc;
	}
	*out = a;
	return 0;
}

void hora_apair_destroy(struct hora_apair *a)
{
	if (!a)
		return;
	hora_net_apair_destroy(a->net);
	free(a);
}

int hora_apair_start(struct hora_apair *a, int peer, const void *x)
{
	return hora_net_apair_start(a->net, peer, x);
}

static void event_of(struct hora_apair_event *ev, const struct hora_net_apair_event *e)
{
	*ev = (struct hora_apair_event){.what = (enum hora_apair_what)e->what, .peer = e->peer, .reply_s = e->reply_s};
}

int hora_apair_poll(struct hora_apair *a, void *x, struct hora_apair_event *ev)
{
	struct hora_net_apair_event e;
	int rc = hora_net_apair_poll(a->net, x, &e);
	event_of(ev, &e);
	return rc;
}

static int job_alive(void *arg)
{
	return hora_comm_stop_code(arg);
}


int hora_apair_quiesce(struct hora_apair *a, void *x, int timeout_ms, struct hora_apair_event *ev)
{
	struct hora_net_apair_event e;
	int rc = hora_net_apair_quiesce(a->net, x, job_alive, a->c, timeout_ms, &e);
	if (ev)
		event_of(ev, &e);
	return rc;
}

void hora_apair_reopen(struct hora_apair *a)
{
	hora_net_apair_reopen(a->net);
}

void hora_apair_progress(struct hora_apair *a, uint64_t mine)
{
	hora_net_apair_progress(a->net, mine);
}

void hora_apair_progress_view(struct hora_apair *a, uint64_t *v)
{
	hora_net_apair_progress_view(a->net, v);
}

void hora_apair_progress_set(struct hora_apair *a, const uint64_t *v)
{
	hora_net_apair_progress_set(a->net, v);
}

void hora_apair_tell(struct hora_apair *a)
{
	hora_net_apair_tell(a->net);
}

const char *hora_apair_error(struct hora_apair *a)
{
	const int stop = hora_comm_stop_code(a->c);
	if (stop)
		snprintf(a->err, sizeof(a->err), "%s", hora_comm_stop_message(a->c));
	else
		hora_net_apair_error(a->net, a->err, sizeof(a->err));
	return a->err;
}
