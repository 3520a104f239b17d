/* apair.c - asynchronous pair averaging (apair.h): the engine's state
 * machine, its messages and the averaging.
 *
 * Messages, each a head (HEAD_FIXED bytes + n u64 counters), some followed
 * by a body of the model's bytes: REQ (ask), GO (accepted: send your
 * model), BUSY (refused), AVG + body (the average), and, from the
 * initiator after GO, the body alone. The head echoes the initiator's
 * sequence number, so a stray answer is named, never applied.
 *
 * Threads: the link's progress thread runs the callbacks (a standing head
 * receive from every peer, re-posted after each head; the bodies); the
 * caller's thread runs start, poll and quiesce, and is the only one that
 * touches x. mu guards the state; it is never held across a post (a post
 * may complete, and call back, inside itself). Who posts sends to a peer p:
 * the progress thread (GO, BUSY, our body after GO) and the caller (REQ,
 * AVG + body). Two messages that belong together (AVG + body) never
 * interleave with another message to p, because a rank is in one exchange
 * at a time: while we answer p, p waits for us (it sends nothing that we
 * would answer), and we ask nobody.
 */
#include "net/coll/apair.h"

#include "net/coll/internal.h"
#include "net/transport/endian.h"
#include "net/util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAGIC 0x52504148u /* "HAPR" */
#define HEAD_FIXED 32     /* magic u32, kind u8, pad, seq u64, count u64, pad */

enum kind {
	K_REQ = 1, K_GO, K_BUSY, K_AVG,
	K_ERR,  /* a request refused: the models differ in size */
	K_VIEW, /* the counters alone (a rank that closed tells every peer) */
};
enum role { IDLE, OUT, IN };
enum phase {
	NONE,
	OUT_ASKED, OUT_SENDING, OUT_GOT, OUT_BUSY, OUT_FAILED, /* initiator */
	IN_WAIT, IN_READY, IN_REPLYING,                        /* responder */
};

struct ap_peer {
	struct hora_net_apair *a;
	int rank;
	bool gone;
	uint8_t *head; /* the standing head receive */
};

struct hora_net_apair {
	struct hora_net_comm *chan;
	struct hora_net_link *link;
	int rank, n;
	size_t count, bytes, hbytes;
	enum hora_net_dtype t;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* the one exchange (mu) */
	enum role role;
	enum phase phase;
	int partner;
	uint64_t seq;     /* ours: the last request's; theirs while IN */
	uint64_t next;    /* our next request's number */
	bool body_done;   /* OUT: our body's send finished (or none was sent) */
	double t_start;
	bool closed, stopping;
	int broken;       /* 0, or the code every call returns */
	char err[400];
	uint64_t *view;   /* n counters */
	struct hora_net_apair_stats st;
	struct ap_peer *peer;
	uint8_t *sent, *got, *in, *reply; /* bytes each */
};

/* ---- small helpers ------------------------------------------------------------- */

static void set_err(struct hora_net_apair *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct hora_net_apair *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->err, sizeof(a->err), fmt, ap);
	va_end(ap);
}

/* a head of kind k with number seq and our counters (mu held) */
static uint8_t *head_new(struct hora_net_apair *a, enum kind k, uint64_t seq)
{
	uint8_t *h = calloc(1, a->hbytes);
	if (!h)
		return NULL;
	hora_put32(h, MAGIC);
	h[4] = (uint8_t)k;
	hora_put64(h + 8, seq);
	hora_put64(h + 16, a->count);
	for (int i = 0; i < a->n; i++)
		hora_put64(h + HEAD_FIXED + 8 * (size_t)i, a->view[i]);
	return h;
}

static void freed_when_sent(void *arg, int status, const char *err)
{
	(void)status;
	(void)err;
	free(arg);
}

/* post head h to p (freed once sent); 0 or -errno (h freed) */
static int send_head(struct hora_net_apair *a, int p, uint8_t *h)
{
	if (!h)
		return -ENOMEM;
	int rc = a->link->ops->post_send(a->link, p, h, a->hbytes, freed_when_sent, h, NULL);
	if (rc)
		free(h);
	return rc;
}

/* the peer is gone (mu held): our exchange with it ends, x untouched */
static void peer_gone(struct hora_net_apair *a, int p, const char *why)
{
	if (a->peer[p].gone)
		return;
	a->peer[p].gone = true;
	if (!a->stopping && !a->err[0])
		set_err(a, "asynchronous pairs: rank %d is gone: %s", p, why ? why : "closed");
	if (a->role == OUT && a->partner == p) {
		if (a->phase != OUT_GOT && a->phase != OUT_BUSY)
			a->phase = OUT_FAILED;
		a->body_done = true; /* the link failed what it still had to send */
	} else if (a->role == IN && a->partner == p) {
		a->role = IDLE;
		a->phase = NONE;
	}
	pthread_cond_broadcast(&a->cv);
}

/* a malformed message (mu held): the engine is broken */
static void protocol_error(struct hora_net_apair *a, int p, const char *what)
{
	if (!a->broken) {
		a->broken = -EPROTO;
		set_err(a, "asynchronous pairs: rank %d sent %s", p, what);
	}
	a->peer[p].gone = true;
	if (a->partner == p && a->role != IDLE) {
		a->phase = a->role == OUT ? OUT_FAILED : NONE;
		a->role = a->role == OUT ? OUT : IDLE;
		a->body_done = true;
	}
	pthread_cond_broadcast(&a->cv);
}

/* ---- the progress thread -------------------------------------------------------- */

static void on_head(void *arg, int status, const char *err);

static void post_head_recv(struct ap_peer *pp)
{
	struct hora_net_apair *a = pp->a;
	int rc = a->link->ops->post_recv(a->link, pp->rank, pp->head, a->hbytes, on_head, pp, NULL);
	if (rc) {
		pthread_mutex_lock(&a->mu);
		peer_gone(a, pp->rank, strerror(-rc));
		pthread_mutex_unlock(&a->mu);
	}
}

static void on_body_sent(void *arg, int status, const char *err)
{
	struct ap_peer *pp = arg;
	struct hora_net_apair *a = pp->a;
	pthread_mutex_lock(&a->mu);
	if (status)
		peer_gone(a, pp->rank, err);
	else if (a->role == OUT && a->partner == pp->rank)
		a->body_done = true;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

static void on_got(void *arg, int status, const char *err)
{
	struct ap_peer *pp = arg;
	struct hora_net_apair *a = pp->a;
	pthread_mutex_lock(&a->mu);
	if (status)
		peer_gone(a, pp->rank, err);
	else if (a->role == OUT && a->partner == pp->rank && a->phase == OUT_SENDING)
		a->phase = OUT_GOT;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

static void on_in(void *arg, int status, const char *err)
{
	struct ap_peer *pp = arg;
	struct hora_net_apair *a = pp->a;
	pthread_mutex_lock(&a->mu);
	if (status)
		peer_gone(a, pp->rank, err);
	else if (a->role == IN && a->partner == pp->rank && a->phase == IN_WAIT)
		a->phase = IN_READY;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

static void on_reply_sent(void *arg, int status, const char *err)
{
	struct ap_peer *pp = arg;
	struct hora_net_apair *a = pp->a;
	pthread_mutex_lock(&a->mu);
	if (status)
		peer_gone(a, pp->rank, err);
	else if (a->role == IN && a->partner == pp->rank && a->phase == IN_REPLYING) {
		a->role = IDLE;
		a->phase = NONE;
	}
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* What a head from p asks for (mu held): the posts to make after mu is
 * released, in order. 0, or a protocol error. */
struct todo {
	uint8_t *answer;    /* GO or BUSY to send */
	void *recv_into;    /* a body to receive (in or got) */
	hora_net_link_done_fn recv_cb;
	bool send_body;     /* our model, after GO */
};

static int decide(struct hora_net_apair *a, int p, const uint8_t *h, struct todo *td)
{
	if (hora_get32(h) != MAGIC || h[4] < K_REQ || h[4] > K_VIEW)
		return protocol_error(a, p, "a message that is not an asynchronous pair's"), -EPROTO;
	if (hora_get64(h + 16) != a->count || h[4] == K_ERR) {
		char what[160];
		snprintf(what, sizeof(what), "%s of %llu elements; this rank's has %zu",
			 h[4] == K_ERR ? "a refusal: its model is one" : "a model", (unsigned long long)hora_get64(h + 16),
			 a->count);
		if (h[4] == K_REQ) /* so that it learns why, instead of waiting */
			td->answer = head_new(a, K_ERR, hora_get64(h + 8));
		return protocol_error(a, p, what), -EPROTO;
	}
	for (int i = 0; i < a->n; i++) {
		const uint64_t v = hora_get64(h + HEAD_FIXED + 8 * (size_t)i);
		if (i != a->rank && v > a->view[i])
			a->view[i] = v;
	}
	const uint64_t seq = hora_get64(h + 8);
	if (h[4] == K_VIEW)
		return 0; /* merged above */
	if (h[4] == K_REQ) {
		const bool take = a->role == IDLE && !a->closed && !a->stopping && !a->broken;
		if (take) {
			a->role = IN;
			a->phase = IN_WAIT;
			a->partner = p;
			a->seq = seq;
			td->recv_into = a->in;
			td->recv_cb = on_in;
		} else
			a->st.refused++;
		td->answer = head_new(a, take ? K_GO : K_BUSY, seq);
		return 0;
	}
	/* an answer: to our request to p, with its number */
	if (a->role != OUT || a->partner != p || seq != a->seq || a->phase != OUT_ASKED)
		return protocol_error(a, p, "an answer to no request of this rank's"), -EPROTO;
	if (h[4] == K_BUSY) {
		a->phase = OUT_BUSY;
		a->body_done = true;
	} else if (h[4] == K_GO) {
		a->phase = OUT_SENDING; /* the body goes; AVG comes back */
		td->send_body = true;
		return 0;
	}
	pthread_cond_broadcast(&a->cv);
	return 0;
}

/* AVG heads come while OUT_SENDING: their body into got */
static bool avg_head(struct hora_net_apair *a, int p, const uint8_t *h)
{
	return hora_get32(h) == MAGIC && h[4] == K_AVG && a->role == OUT && a->partner == p &&
	       a->phase == OUT_SENDING && hora_get64(h + 8) == a->seq && hora_get64(h + 16) == a->count;
}

static void on_head(void *arg, int status, const char *err)
{
	struct ap_peer *pp = arg;
	struct hora_net_apair *a = pp->a;
	const int p = pp->rank;
	struct todo td = {0};
	pthread_mutex_lock(&a->mu);
	if (status) {
		peer_gone(a, p, err);
		pthread_mutex_unlock(&a->mu);
		return;
	}
	int rc = 0;
	if (avg_head(a, p, pp->head)) {
		td.recv_into = a->got;
		td.recv_cb = on_got;
	} else
		rc = decide(a, p, pp->head, &td);
	pthread_mutex_unlock(&a->mu);
	if (rc) { /* p's stream is no longer read: it is gone for this engine */
		if (td.answer)
			send_head(a, p, td.answer);
		return;
	}
	const struct hora_net_link_ops *ops = a->link->ops;
	int prc = 0;
	if (td.answer)
		prc = send_head(a, p, td.answer);
	if (!prc && td.send_body)
		prc = ops->post_send(a->link, p, a->sent, a->bytes, on_body_sent, pp, NULL);
	if (!prc && td.recv_into)
		prc = ops->post_recv(a->link, p, td.recv_into, a->bytes, td.recv_cb, pp, NULL);
	if (prc) {
		pthread_mutex_lock(&a->mu);
		peer_gone(a, p, strerror(-prc));
		pthread_mutex_unlock(&a->mu);
		return;
	}
	post_head_recv(pp); /* after the body's receive: they are matched in order */
}

/* ---- the averaging (caller's thread) ---------------------------------------------- */

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

/* ---- the calls ---------------------------------------------------------------- */

int hora_net_apair_start(struct hora_net_apair *a, int peer, const void *x)
{
	if (peer < 0 || peer >= a->n || peer == a->rank)
		return -EINVAL;
	pthread_mutex_lock(&a->mu);
	int rc = a->broken ? a->broken : a->peer[peer].gone ? -ENOTCONN
				     : a->role != IDLE || a->closed || a->stopping ? -EBUSY : 0;
	uint8_t *h = NULL;
	if (!rc) {
		memcpy(a->sent, x, a->bytes); /* no reply can touch it before the request leaves */
		a->role = OUT;
		a->phase = OUT_ASKED;
		a->partner = peer;
		a->seq = a->next++;
		a->body_done = false;
		a->t_start = hora_clock_s();
		if (!(h = head_new(a, K_REQ, a->seq)))
			rc = -ENOMEM;
	}
	if (rc == -ENOMEM) {
		a->role = IDLE;
		a->phase = NONE;
	}
	pthread_mutex_unlock(&a->mu);
	if (rc)
		return rc;
	if ((rc = send_head(a, peer, h))) {
		pthread_mutex_lock(&a->mu);
		peer_gone(a, peer, strerror(-rc));
		pthread_mutex_unlock(&a->mu);
		return -ENOTCONN;
	}
	return 0;
}

/* our request, finished (mu held): apply or report, then idle */
static void finish_out(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev)
{
	ev->peer = a->partner;
	ev->seconds = hora_clock_s() - a->t_start;
	if (a->phase == OUT_GOT) {
		apply(a, x);
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
}

int hora_net_apair_poll(struct hora_net_apair *a, void *x, struct hora_net_apair_event *ev)
{
	*ev = (struct hora_net_apair_event){.what = HORA_NET_APAIR_NONE, .peer = -1};
	pthread_mutex_lock(&a->mu);
	const int rc = a->broken;
	if (a->role == OUT && a->body_done &&
	    (a->phase == OUT_GOT || a->phase == OUT_BUSY || a->phase == OUT_FAILED)) {
		finish_out(a, x, ev);
	} else if (a->role == IN && a->phase == IN_READY) {
		const int p = a->partner;
		serve(a, x, p);
		a->phase = IN_REPLYING;
		a->st.served++;
		uint8_t *h = head_new(a, K_AVG, a->seq);
		pthread_mutex_unlock(&a->mu);
		*ev = (struct hora_net_apair_event){.what = HORA_NET_APAIR_SERVED, .peer = p};
		/* p waits for exactly this: nothing else goes to p meanwhile */
		int prc = send_head(a, p, h);
		if (!prc)
			prc = a->link->ops->post_send(a->link, p, a->reply, a->bytes, on_reply_sent, &a->peer[p], NULL);
		if (prc) {
			pthread_mutex_lock(&a->mu);
			peer_gone(a, p, strerror(-prc));
			pthread_mutex_unlock(&a->mu);
		}
		return rc;
	}
	pthread_mutex_unlock(&a->mu);
	return rc;
}

static void deadline_in(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += (long)ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

/* Our counters to every peer, once closed and idle: nothing of ours is
 * then in flight to any peer but single heads, so this one cannot fall
 * between two messages that belong together. Best effort. */
static void tell_counters(struct hora_net_apair *a)
{
	for (int p = 0; p < a->n; p++) {
		pthread_mutex_lock(&a->mu);
		uint8_t *h = a->peer[p].gone || a->role != IDLE ? NULL : head_new(a, K_VIEW, 0);
		pthread_mutex_unlock(&a->mu);
		if (h)
			send_head(a, p, h);
	}
}

int hora_net_apair_quiesce(struct hora_net_apair *a, void *x, int (*alive)(void *), void *arg,
			   int timeout_ms, struct hora_net_apair_event *done)
{
	struct hora_net_apair_event ev = {.what = HORA_NET_APAIR_NONE, .peer = -1};
	const double t_end = hora_clock_s() + (timeout_ms > 0 ? timeout_ms / 1000.0 : 1e12);
	pthread_mutex_lock(&a->mu);
	a->closed = true;
	for (;;) {
		const bool ready = (a->role == OUT && a->body_done && a->phase != OUT_ASKED && a->phase != OUT_SENDING) ||
				   (a->role == IN && a->phase == IN_READY);
		if (a->role == IDLE || a->broken)
			break;
		if (ready) {
			pthread_mutex_unlock(&a->mu);
			hora_net_apair_poll(a, x, &ev); /* the one exchange: at most one event */
			pthread_mutex_lock(&a->mu);
			continue;
		}
		int why = alive ? alive(arg) : 0;
		if (!why && hora_clock_s() > t_end)
			why = -ETIMEDOUT;
		if (why) {
			if (why == -ETIMEDOUT)
				set_err(a, "asynchronous pairs: the exchange with rank %d did not finish in %d ms",
					a->partner, timeout_ms);
			pthread_mutex_unlock(&a->mu);
			if (done)
				*done = ev;
			return why;
		}
		struct timespec ts;
		deadline_in(&ts, 10);
		pthread_cond_timedwait(&a->cv, &a->mu, &ts);
	}
	const int rc = a->broken;
	pthread_mutex_unlock(&a->mu);
	if (done)
		*done = ev;
	if (!rc)
		tell_counters(a);
	return rc;
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
	if (t != HORA_NET_F32 && t != HORA_NET_F64) {
		hora_net_comm_destroy(chan);
		return snprintf(err, errlen, "asynchronous pairs: f32 or f64 only"), -EINVAL;
	}
	struct hora_net_apair *a = calloc(1, sizeof(*a));
	if (!a) {
		hora_net_comm_destroy(chan);
		return snprintf(err, errlen, "asynchronous pairs: out of memory"), -ENOMEM;
	}
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->chan = chan;
	a->link = chan->link;
	a->rank = chan->rank;
	a->n = chan->n;
	a->count = count;
	a->t = t;
	a->bytes = count * hora_net_dtype_size(t);
	a->hbytes = HEAD_FIXED + 8 * (size_t)a->n;
	a->partner = -1;
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
		a->chan = NULL;
		free_all(a);
		return snprintf(err, errlen, "asynchronous pairs: out of memory for a model of %zu bytes", b), -ENOMEM;
	}
	for (int i = 0; a->link && i < a->n; i++)
		if (i != a->rank)
			post_head_recv(&a->peer[i]);
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
	hora_net_comm_destroy(a->chan); /* the pending receives fail, and are ignored */
	free_all(a);
}
