/* apair_call.c - asynchronous pair averaging (apair.h): the caller's side.
 * start, poll and quiesce run on the caller's thread, which alone touches
 * x; the whole-model loops (the copy at start, the average, applying it)
 * run outside mu, in the phases PREP, SERVING and APPLYING, so the
 * progress thread never waits on them. The messages: apair.c. */
#include "net/coll/apair_internal.h"

#include "net/util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* reply = x = (lower rank's + higher rank's) / 2, in double */
static void serve(struct hora_net_apair *a, void *x, int p)
{
	const bool theirs_first = p < a->rank;
	if (a->t == HORA_NET_F32) {
		float *xf = x, *in = (float *)a->in, *out = (float *)a->reply;
		for (size_t i = 0; i < a->count; i++) {
			const double lo = theirs_first ? in[i] : xf[i], hi = theirs_first ? xf[i] : in[i];
			out[i] = xf[i] = (float)(0.5 * lo + 0.5 * hi);
		}
	} else {
		double *xd = x, *in = (double *)a->in, *out = (double *)a->reply;
		for (size_t i = 0; i < a->count; i++) {
			const double lo = theirs_first ? in[i] : xd[i], hi = theirs_first ? xd[i] : in[i];
			out[i] = xd[i] = 0.5 * lo + 0.5 * hi;
		}
	}
}

/* x += got - sent: the average plus what the caller did since start (x
 * unchanged: exactly the average) */
static void apply(struct hora_net_apair *a, void *x)
{
	if (a->t == HORA_NET_F32) {
		float *xf = x;
		const float *g = (const float *)a->got, *s = (const float *)a->sent;
		for (size_t i = 0; i < a->count; i++)
			xf[i] = xf[i] == s[i] ? g[i] : (float)((double)xf[i] + ((double)g[i] - (double)s[i]));
	} else {
		double *xd = x;
		const double *g = (const double *)a->got, *s = (const double *)a->sent;
		for (size_t i = 0; i < a->count; i++)
			xd[i] = xd[i] == s[i] ? g[i] : xd[i] + (g[i] - s[i]);
	}
}

int hora_net_apair_start(struct hora_net_apair *a, int peer, const void *x)
{
	if (peer < 0 || peer >= a->n || peer == a->rank)
		return -EINVAL;
	pthread_mutex_lock(&a->mu);
	int rc = a->broken ? a->broken : a->peer[peer].gone ? -ENOTCONN
				     : a->role != IDLE || a->closed || a->stopping ? -EBUSY : 0;
	if (rc) {
		pthread_mutex_unlock(&a->mu);
		return rc;
	}
	a->role = OUT; /* requests to us get BUSY from now on */
	a->phase = OUT_PREP;
	a->partner = peer;
	a->lost = false;
	a->seq = a->next++;
	a->t_start_s = hora_clock_s();
	a->t_done_s = 0;
	pthread_mutex_unlock(&a->mu);
	memcpy(a->sent, x, a->bytes);
	pthread_mutex_lock(&a->mu);
	uint8_t *h = a->lost ? NULL : hora_ap_head_new(a, K_REQ, a->seq);
	rc = a->lost ? -ENOTCONN : h ? 0 : -ENOMEM;
	a->phase = OUT_ASKED;
	if (rc) {
		a->role = IDLE;
		a->phase = NONE;
	}
	pthread_mutex_unlock(&a->mu);
	if (!rc && (rc = hora_ap_send_head(a, peer, h))) { /* never asked: nothing to wait for */
		pthread_mutex_lock(&a->mu);
		hora_ap_peer_gone(a, peer, strerror(-rc));
		a->role = IDLE;
		a->phase = NONE;
		pthread_mutex_unlock(&a->mu);
		rc = -ENOTCONN;
	}
	return rc;
}

/* our request, answered and nothing of it posted (mu held): apply the
 * average (outside mu) or report, then idle */
static void finish_out(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev)
{
	*ev = (struct hora_net_apair_event){.peer = a->partner,
					    .reply_s = (a->t_done_s ? a->t_done_s : hora_clock_s()) - a->t_start_s};
	if (a->phase == OUT_GOT) {
		a->phase = OUT_APPLYING;
		pthread_mutex_unlock(&a->mu);
		apply(a, x);
		pthread_mutex_lock(&a->mu);
		ev->what = HORA_NET_APAIR_APPLIED;
		a->st.applied++;
	} else if (a->phase == OUT_BUSY) {
		ev->what = HORA_NET_APAIR_BUSY;
		a->st.busy++;
	} else {
		ev->what = HORA_NET_APAIR_FAILED;
		a->st.failed++;
	}
	a->role = IDLE;
	a->phase = NONE;
	pthread_cond_broadcast(&a->cv);
}

/* a peer's model is in (mu held): average it into x (outside mu), send the
 * average back; p waits for exactly this, so nothing else goes to p */
static void serve_in(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev)
{
	const int p = a->partner;
	a->phase = IN_SERVING;
	pthread_mutex_unlock(&a->mu);
	serve(a, x, p);
	pthread_mutex_lock(&a->mu);
	*ev = (struct hora_net_apair_event){.what = HORA_NET_APAIR_SERVED, .peer = p};
	a->st.served++;
	uint8_t *h = a->lost ? NULL : hora_ap_head_new(a, K_AVG, a->seq);
	if (!h) { /* lost meanwhile (x holds the average all the same), or no memory */
		if (!a->lost)
			hora_ap_peer_gone(a, p, "out of memory for a head");
		a->role = IDLE;
		a->phase = NONE;
		pthread_cond_broadcast(&a->cv);
		return;
	}
	a->phase = IN_REPLYING;
	a->reply_posted = true;
	pthread_mutex_unlock(&a->mu);
	int rc = hora_ap_send_head(a, p, h);
	if (!rc)
		rc = a->link->ops->post_send(a->link, p, a->reply, a->bytes, hora_ap_on_reply_sent, &a->peer[p], NULL);
	pthread_mutex_lock(&a->mu);
	if (rc) {
		a->reply_posted = false;
		hora_ap_peer_gone(a, p, strerror(-rc));
	}
}

/* what poll does (mu held); true when it did something */
static bool step(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev)
{
	if (a->role == OUT && !a->sent_posted && !a->got_posted &&
	    (a->phase == OUT_GOT || a->phase == OUT_BUSY || a->phase == OUT_FAILED))
		return finish_out(a, x, ev), true;
	if (a->role == IN && a->phase == IN_READY)
		return serve_in(a, x, ev), true;
	return false;
}

int hora_net_apair_poll(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev)
{
	*ev = (struct hora_net_apair_event){.what = HORA_NET_APAIR_NONE, .peer = -1};
	pthread_mutex_lock(&a->mu);
	step(a, x, ev);
	const int rc = a->broken;
	pthread_mutex_unlock(&a->mu);
	return rc;
}

/* Our counters to every peer (only: -1 all) but the partner of an
 * exchange in flight. On the caller's thread (apair.c: the one that sends
 * our REQ and our AVG + body), so to the others nothing of ours is in
 * flight but single heads, and this one cannot fall between two messages
 * that belong together; the partner gets them with the exchange, or (from
 * quiesce) once we are idle. Best effort. Returns the peer left out (-1:
 * none). */
static int tell_counters(struct hora_net_apair *a, int only)
{
	int skipped = -1;
	for (int p = only < 0 ? 0 : only; p < (only < 0 ? a->n : only + 1); p++) {
		pthread_mutex_lock(&a->mu);
		const bool busy = a->role != IDLE && a->partner == p;
		uint8_t *h = a->peer[p].gone || busy ? NULL : hora_ap_head_new(a, K_VIEW, 0);
		skipped = busy ? p : skipped;
		pthread_mutex_unlock(&a->mu);
		if (h)
			hora_ap_send_head(a, p, h);
	}
	return skipped;
}

static void deadline_in(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += (long)ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

int hora_net_apair_quiesce(struct hora_net_apair *a, void *x, int (*alive)(void *), void *arg,
			   int timeout_ms, struct hora_net_apair_event *done)
{
	struct hora_net_apair_event ev = {.what = HORA_NET_APAIR_NONE, .peer = -1};
	const double t_end = hora_clock_s() + (timeout_ms > 0 ? timeout_ms / 1000.0 : 1e12);
	int rc = 0;
	pthread_mutex_lock(&a->mu);
	a->closed = true;
	pthread_mutex_unlock(&a->mu);
	const int later = tell_counters(a, -1); /* the others stop the sooner */
	pthread_mutex_lock(&a->mu);
	while (a->role != IDLE && !a->broken) {
		if (step(a, x, &ev))
			continue; /* the one exchange: at most one event */
		const int why = alive ? alive(arg) : 0;
		if (why || hora_clock_s() > t_end) {
			rc = why ? why : -ETIMEDOUT;
			if (!why && !a->err[0])
				hora_ap_set_err(a, "asynchronous pairs: the exchange with rank %d did not finish in %d ms",
						a->partner, timeout_ms);
			break;
		}
		struct timespec ts;
		deadline_in(&ts, 10);
		pthread_cond_timedwait(&a->cv, &a->mu, &ts);
	}
	if (!rc)
		rc = a->broken;
	pthread_mutex_unlock(&a->mu);
	if (done)
		*done = ev;
	if (!rc && later >= 0)
		tell_counters(a, later);
	return rc;
}

void hora_net_apair_tell(struct hora_net_apair *a)
{
	tell_counters(a, -1);
}

void hora_net_apair_reopen(struct hora_net_apair *a)
{
	pthread_mutex_lock(&a->mu);
	a->closed = false;
	pthread_mutex_unlock(&a->mu);
}

/* ---- counters, stats, life ------------------------------------------------------ */

void hora_net_apair_progress(struct hora_net_apair *a, uint64_t mine)
{
	pthread_mutex_lock(&a->mu);
	a->view[a->rank] = mine;
	pthread_mutex_unlock(&a->mu);
}

void hora_net_apair_progress_view(struct hora_net_apair *a, uint64_t *v)
{
	pthread_mutex_lock(&a->mu);
	memcpy(v, a->view, (size_t)a->n * sizeof(*v));
	pthread_mutex_unlock(&a->mu);
}

void hora_net_apair_progress_set(struct hora_net_apair *a, const uint64_t *v)
{
	pthread_mutex_lock(&a->mu);
	memcpy(a->view, v, (size_t)a->n * sizeof(*v));
	pthread_mutex_unlock(&a->mu);
}

void hora_net_apair_stats(struct hora_net_apair *a, struct hora_net_apair_stats *s)
{
	pthread_mutex_lock(&a->mu);
	*s = a->st;
	pthread_mutex_unlock(&a->mu);
}

void hora_net_apair_error(struct hora_net_apair *a, char *buf, size_t len)
{
	pthread_mutex_lock(&a->mu);
	snprintf(buf, len, "%s", a->err);
	pthread_mutex_unlock(&a->mu);
}

static void free_all(struct hora_net_apair *a)
{
	for (int i = 0; a->peer && i < a->n; i++)
		free(a->peer[i].head);
	free(a->peer);
	free(a->view);
	free(a->sent);
	free(a->got);
	free(a->in);
	free(a->reply);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a);
}

int hora_net_apair_create(struct hora_net_comm *chan, size_t count, enum hora_net_dtype t,
			  struct hora_net_apair **out, char *err, size_t errlen)
{
	*out = NULL;
	struct hora_net_apair *a = t == HORA_NET_F32 || t == HORA_NET_F64 ? calloc(1, sizeof(*a)) : NULL;
	if (!a) {
		hora_net_comm_destroy(chan);
		return snprintf(err, errlen, "asynchronous pairs: %s",
				t == HORA_NET_F32 || t == HORA_NET_F64 ? "out of memory" : "f32 or f64 only"),
		       t == HORA_NET_F32 || t == HORA_NET_F64 ? -ENOMEM : -EINVAL;
	}
	*a = (struct hora_net_apair){.chan = chan, .link = chan->link, .rank = chan->rank, .n = chan->n,
				     .count = count, .t = t, .bytes = count * hora_net_dtype_size(t),
				     .hbytes = AP_HEAD_FIXED + 8 * (size_t)chan->n, .partner = -1};
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	const size_t b = a->bytes ? a->bytes : 1;
	a->peer = calloc((size_t)a->n, sizeof(*a->peer));
	a->view = calloc((size_t)a->n, sizeof(*a->view));
	bool ok = a->peer && a->view && (a->sent = malloc(b)) && (a->got = malloc(b)) && (a->in = malloc(b)) &&
		  (a->reply = malloc(b));
	for (int i = 0; ok && i < a->n; i++) {
		a->peer[i] = (struct ap_peer){.a = a, .rank = i, .gone = i == a->rank};
		ok = (a->peer[i].head = malloc(a->hbytes)) != NULL;
	}
	if (!ok) {
		hora_net_comm_destroy(chan);
		free_all(a);
		return snprintf(err, errlen, "asynchronous pairs: out of memory for a model of %zu bytes", b), -ENOMEM;
	}
	for (int i = 0; a->link && i < a->n; i++)
		if (i != a->rank)
			hora_ap_post_head_recv(&a->peer[i]);
	*out = a;
	return 0;
}

void hora_net_apair_destroy(struct hora_net_apair *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->stopping = true;
	pthread_mutex_unlock(&a->mu);
	/* fail what may still wait on a silent peer (a close would wait for
	 * unsent data), then close: the pending receives fail, and are ignored */
	hora_net_comm_interrupt(a->chan, "the asynchronous pairs are closing");
	hora_net_comm_destroy(a->chan);
	free_all(a);
}
