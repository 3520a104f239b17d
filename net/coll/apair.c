/* apair.c - asynchronous pair averaging (apair.h): the messages and what
 * the link's progress thread does with them. The caller's side (start,
 * poll, quiesce, the averaging itself) is apair_call.c.
 *
 * Messages, each a head (AP_HEAD_FIXED bytes + n u64 counters), some
 * followed by a body of the model's bytes: REQ (ask), GO (accepted: send
 * your model), BUSY (refused), AVG + body (the average), ERR (refused: the
 * sizes differ), VIEW (counters alone), and, from the initiator after GO,
 * the body alone. The head echoes the initiator's sequence number, so a
 * stray answer is named, never applied.
 *
 * Threads: the progress thread runs the callbacks (a standing head receive
 * from every peer, re-posted after each head; the bodies); mu guards the
 * state and is never held across a post (a post may complete, and call
 * back, inside itself). Who posts to a peer p: the progress thread (GO,
 * BUSY, ERR, our body after GO) and the caller (REQ, AVG + body, VIEW).
 * Two messages that belong together (AVG + body) never interleave with
 * another message to p, because a rank is in one exchange at a time:
 * while we answer p, p waits for us (it sends nothing that we would
 * answer), and we ask nobody; VIEW goes to no peer we are in an exchange
 * with, from the caller's thread (the one that starts and polls): so not
 * between our REQ and anything, nor between AVG and its body, which that
 * thread sends; and a GO the progress thread sends meanwhile is a head
 * alone (the initiator's standing head receive takes the VIEW after it).
 */
#include "net/coll/apair_internal.h"

#include "net/transport/endian.h"
#include "net/util/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hora_ap_set_err(struct hora_net_apair *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->err, sizeof(a->err), fmt, ap);
	va_end(ap);
}

uint8_t *hora_ap_head_new(struct hora_net_apair *a, enum ap_kind k, uint64_t seq)
{
	uint8_t *h = calloc(1, a->hbytes);
	if (!h)
		return NULL;
	hora_put32(h, AP_MAGIC);
	h[4] = (uint8_t)k;
	hora_put64(h + 8, seq);
	hora_put64(h + 16, a->count);
	for (int i = 0; i < a->n; i++)
		hora_put64(h + AP_HEAD_FIXED + 8 * (size_t)i, a->view[i]);
	return h;
}

static void freed_when_sent(void *arg, int status, const char *err)
{
	(void)status;
	(void)err;
	free(arg);
}

int hora_ap_send_head(struct hora_net_apair *a, int p, uint8_t *h)
{
	if (!h)
		return -ENOMEM;
	int rc = a->link->ops->post_send(a->link, p, h, a->hbytes, freed_when_sent, h, NULL);
	if (rc)
		free(h);
	return rc;
}

/* The exchange with a lost partner ends as soon as nothing of it is posted
 * and the caller does not hold its buffers (mu held). */
static void settle(struct hora_net_apair *a)
{
	if (!a->lost)
		return;
	if (a->role == OUT && (a->phase == OUT_ASKED || a->phase == OUT_SENDING))
		a->phase = OUT_FAILED; /* the caller's poll reports it, buffers back */
	if (a->role == IN && a->phase != IN_SERVING && !a->in_posted && !a->reply_posted) {
		a->role = IDLE;
		a->phase = NONE;
	}
	pthread_cond_broadcast(&a->cv);
}

void hora_ap_peer_gone(struct hora_net_apair *a, int p, const char *why)
{
	if (!a->peer[p].gone) {
		a->peer[p].gone = true;
		if (!a->stopping && !a->err[0])
			hora_ap_set_err(a, "asynchronous pairs: rank %d is gone: %s", p, why ? why : "closed");
	}
	if (a->role != IDLE && a->partner == p)
		a->lost = true;
	settle(a);
}

/* a malformed message (mu held): the engine is broken (every call returns
 * -EPROTO, so the caller stops, and p learns from the job's stop), p's
 * stream no longer read */
static void protocol_error(struct hora_net_apair *a, int p, const char *what)
{
	if (!a->broken) {
		a->broken = -EPROTO;
		hora_ap_set_err(a, "asynchronous pairs: rank %d sent %s", p, what);
	}
	hora_ap_peer_gone(a, p, what);
}

/* ---- completions ------------------------------------------------------------------ */

static void on_head(void *arg, int status, const char *err);

void hora_ap_post_head_recv(struct ap_peer *pp)
{
	struct hora_net_apair *a = pp->a;
	int rc = a->link->ops->post_recv(a->link, pp->rank, pp->head, a->hbytes, on_head, pp, NULL);
	if (rc) {
		pthread_mutex_lock(&a->mu);
		hora_ap_peer_gone(a, pp->rank, strerror(-rc));
		pthread_mutex_unlock(&a->mu);
	}
}

/* what finished: our body, the average we asked for, the initiator's
 * model, our reply; a failure is the peer's */
enum done_what { D_SENT, D_GOT, D_IN, D_REPLY };

static void done(struct ap_peer *pp, enum done_what w, int status, const char *err)
{
	struct hora_net_apair *a = pp->a;
	const int p = pp->rank;
	pthread_mutex_lock(&a->mu);
	const bool ours = a->partner == p;
	if (w == D_SENT && ours)
		a->sent_posted = false;
	else if (w == D_GOT && ours) {
		a->got_posted = false;
		if (!status && a->role == OUT && a->phase == OUT_SENDING && !a->lost) {
			a->phase = OUT_GOT;
			a->t_done_s = hora_clock_s();
		}
	} else if (w == D_IN && ours) {
		a->in_posted = false;
		if (!status && a->role == IN && a->phase == IN_WAIT && !a->lost)
			a->phase = IN_READY;
	} else if (w == D_REPLY && ours) {
		a->reply_posted = false;
		if (!status && a->role == IN && a->phase == IN_REPLYING) {
			a->role = IDLE;
			a->phase = NONE;
		}
	}
	if (status)
		hora_ap_peer_gone(a, p, err);
	settle(a);
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

static void on_body_sent(void *arg, int status, const char *err) { done(arg, D_SENT, status, err); }
static void on_got(void *arg, int status, const char *err) { done(arg, D_GOT, status, err); }
static void on_in(void *arg, int status, const char *err) { done(arg, D_IN, status, err); }
void hora_ap_on_reply_sent(void *arg, int status, const char *err) { done(arg, D_REPLY, status, err); }

/* ---- a head ------------------------------------------------------------------------ */

/* The posts a head asks for, made after mu is released, in this order. */
struct posts {
	uint8_t *answer;   /* GO, BUSY or ERR to send */
	bool send_body;    /* our model, after GO */
	void *recv_into;   /* a body to receive (in or got) */
	hora_net_link_done_fn recv_cb;
};

static void merge_counters(struct hora_net_apair *a, const uint8_t *h)
{
	for (int i = 0; i < a->n; i++) {
		const uint64_t v = hora_get64(h + AP_HEAD_FIXED + 8 * (size_t)i);
		if (i != a->rank && v > a->view[i])
			a->view[i] = v;
	}
}

/* a request from p (mu held): taken (GO, its body into in) or refused */
static void request(struct hora_net_apair *a, int p, uint64_t seq, struct posts *td)
{
	const bool take = a->role == IDLE && !a->closed && !a->stopping && !a->broken && !a->peer[p].gone;
	if (take) {
		a->role = IN;
		a->phase = IN_WAIT;
		a->partner = p;
		a->seq = seq;
		a->lost = false;
		a->in_posted = true;
		td->recv_into = a->in;
		td->recv_cb = on_in;
	} else
		a->st.refused++;
	td->answer = hora_ap_head_new(a, take ? K_GO : K_BUSY, seq);
}

/* 0, or -EPROTO (the engine is broken; td may hold an ERR to send) */
static int decide(struct hora_net_apair *a, int p, const uint8_t *h, struct posts *td)
{
	if (hora_get32(h) != AP_MAGIC || h[4] < K_REQ || h[4] > K_VIEW)
		return protocol_error(a, p, "a message that is not an asynchronous pair's"), -EPROTO;
	if (hora_get64(h + 16) != a->count || h[4] == K_ERR) {
		char what[160];
		snprintf(what, sizeof(what), "%s of %llu elements; this rank's has %zu",
			 h[4] == K_ERR ? "a refusal: its model is one" : "a model",
			 (unsigned long long)hora_get64(h + 16), a->count);
		if (h[4] == K_REQ) /* so that it learns why, instead of waiting */
			td->answer = hora_ap_head_new(a, K_ERR, hora_get64(h + 8));
		return protocol_error(a, p, what), -EPROTO;
	}
	merge_counters(a, h);
	const uint64_t seq = hora_get64(h + 8);
	if (h[4] == K_VIEW)
		return 0;
	if (h[4] == K_REQ)
		return request(a, p, seq, td), 0;
	/* an answer: to our request to p, with its number */
	const bool asked = a->role == OUT && a->partner == p && seq == a->seq && !a->lost;
	if (asked && h[4] == K_AVG && a->phase == OUT_SENDING) {
		a->got_posted = true;
		td->recv_into = a->got;
		td->recv_cb = on_got;
		return 0;
	}
	if (!asked || a->phase != OUT_ASKED || h[4] == K_AVG)
		return protocol_error(a, p, "an answer to no request of this rank's"), -EPROTO;
	if (h[4] == K_BUSY) {
		a->phase = OUT_BUSY;
		a->t_done_s = hora_clock_s();
		pthread_cond_broadcast(&a->cv);
	} else { /* GO: the body goes; AVG comes back */
		a->phase = OUT_SENDING;
		a->sent_posted = true;
		td->send_body = true;
	}
	return 0;
}

/* a post made for a head failed (mu not held): what it would have owned
 * is not posted, and p is gone */
static void post_failed(struct ap_peer *pp, const struct posts *td, int step, int rc)
{
	struct hora_net_apair *a = pp->a;
	pthread_mutex_lock(&a->mu);
	if (td->send_body && step <= 1)
		a->sent_posted = false;
	if (td->recv_into == a->in && step <= 2)
		a->in_posted = false;
	if (td->recv_into == a->got && step <= 2)
		a->got_posted = false;
	hora_ap_peer_gone(a, pp->rank, strerror(-rc));
	pthread_mutex_unlock(&a->mu);
}

static void on_head(void *arg, int status, const char *err)
{
	struct ap_peer *pp = arg;
	struct hora_net_apair *a = pp->a;
	const int p = pp->rank;
	struct posts td = {0}; /* what this head asks us to post */
	pthread_mutex_lock(&a->mu);
	if (status) {
		hora_ap_peer_gone(a, p, err);
		pthread_mutex_unlock(&a->mu);
		return;
	}
	int rc = decide(a, p, pp->head, &td);
	pthread_mutex_unlock(&a->mu);
	if (rc) { /* p's stream is no longer read */
		if (td.answer)
			hora_ap_send_head(a, p, td.answer);
		return;
	}
	const struct hora_net_link_ops *ops = a->link->ops;
	int step = 0, prc = 0;
	if (td.answer)
		prc = hora_ap_send_head(a, p, td.answer);
	if (!prc && td.send_body) {
		step = 1;
		prc = ops->post_send(a->link, p, a->sent, a->bytes, on_body_sent, pp, NULL);
	}
	if (!prc && td.recv_into) {
		step = 2;
		prc = ops->post_recv(a->link, p, td.recv_into, a->bytes, td.recv_cb, pp, NULL);
	}
	if (prc)
		return post_failed(pp, &td, step, prc);
	hora_ap_post_head_recv(pp); /* after the body's receive: they are matched in order */
}
