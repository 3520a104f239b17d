/* notice.c - what happens when a call fails: the error text, the notice
 * that tells every other rank why (ABORT, LOST, REFUSED; internal.h), and
 * reading such a notice where a fingerprint was expected, or peeked after
 * the queued path broke, so that every survivor names the cause ("rank 0
 * stopped: it lost rank 2", "rank 2 refused broadcast #5: root 7 >= size
 * 4"). Also the fingerprint comparison, whose answer may be a notice.
 */
#include "net/coll/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Whom a notice from rank `from` names as the cause, for our own notices:
 * the rank it names, or the sender if it names us (it gave up on us: to the
 * others, the trouble started there). */
static void note_lost(struct hora_net_comm *c, uint32_t who, int from)
{
	int none = -1;
	atomic_compare_exchange_strong(&c->lost_origin, &none, who == (uint32_t)c->rank ? from : (int)who);
}

/* the first refusal seen is the one every later notice names */
static void note_refusal(struct hora_net_comm *c, const struct refusal *r)
{
	pthread_mutex_lock(&c->refusal_mu);
	if (c->refusal.by < 0)
		c->refusal = *r;
	pthread_mutex_unlock(&c->refusal_mu);
}

static struct refusal refusal_seen(struct hora_net_comm *c)
{
	pthread_mutex_lock(&c->refusal_mu);
	struct refusal r = c->refusal;
	pthread_mutex_unlock(&c->refusal_mu);
	return r;
}

/* "rank 2 refused broadcast #5: root 7 >= size 4" */
static void refusal_say(char *out, size_t n, const struct refusal *r, int nranks)
{
	char why[160];
	refusal_text(why, sizeof(why), r, nranks);
	snprintf(out, n, "rank %d refused %s #%llu: %s", r->by, hora_net_coll_name(r->kind),
		 (unsigned long long)r->seq, why);
}

/* A notice f from rank `from`, read in call `cur`: records its origin and
 * says what it means in out. Returns its kind, 0 if f is none. */
static uint32_t take_notice(struct hora_net_comm *c, const struct fp *f, int from, uint64_t cur, char *out,
			    size_t n)
{
	const uint32_t who = f->root;
	if (!fp_is_notice(f) || (who >= (uint32_t)c->n && !c->quiet))
		return 0;
	char in[48] = "";
	if (f->seq != cur) /* it stopped in a call we had finished */
		snprintf(in, sizeof(in), " in call #%llu", (unsigned long long)f->seq);
	if (c->quiet) { /* the cross communicator sends none: this is the whole
			   communicator's, numbered there (hier.c says who is who) */
		snprintf(out, n, "rank %d stopped (its notice names rank %u of the whole communicator)", from, who);
		return f->kind;
	}
	if (f->kind == NOTICE_REFUSED) {
		const struct refusal r = {.by = (int)who, .kind = f->dtype, .seq = f->seq, .reason = f->op,
					  .value = (int64_t)f->count};
		note_refusal(c, &r);
		refusal_say(out, n, &r, c->n);
	} else if (f->kind == NOTICE_ABORT) {
		int none = -1; /* the first ABORT seen names the origin for good */
		atomic_compare_exchange_strong(&c->abort_origin, &none, (int)who);
		snprintf(out, n, "rank %u stopped%s: it saw mismatched collectives (its error names both calls)",
			 who, in);
	} else {
		if (who == (uint32_t)from)
			snprintf(out, n, "rank %d stopped%s on an error of its own (its error says which)", from,
				 in);
		else
			snprintf(out, n, "rank %d stopped%s: it lost rank %u", from, in, who);
		note_lost(c, who, from);
	}
	return f->kind;
}

/* What rank `peer` said on the caller-driven path before it closed, if it
 * did (a notice for this call or the one before), as " (rank P had stopped:
 * ...)"; returns the notice's kind, 0 if none. Waits up to notice_wait_ms
 * (20) for it: it was sent before the close that brought us here, but on
 * another stream (longer after a stage failure: local.c). */
static uint32_t peer_notice(struct hora_net_comm *c, int peer, char *out, size_t n)
{
	out[0] = 0;
	uint8_t b[FP_BYTES];
	if (!c->link || !c->link->ops->peek || peer < 0 || peer >= c->n ||
	    c->link->ops->peek(c->link, peer, b, sizeof(b), c->notice_wait_ms))
		return 0;
	struct fp f;
	fp_decode(b, &f);
	/* of this call or the one before (we may have finished it, it did not) */
	if (f.seq > c->seq || f.seq + 1 < c->seq)
		return 0;
	char what[200];
	uint32_t kind = take_notice(c, &f, peer, c->seq, what, sizeof(what));
	if (kind)
		snprintf(out, n, " (%s)", what);
	return kind;
}

/* Our own notice: a refusal (ours, or one we were told of) names the
 * refusing rank; a mismatch (ours, or one a notice told us of) the rank that
 * saw one first; a loss the rank lost first (the one a notice told us of,
 * else the peer that failed us, else ourselves). */
static void notice_of(struct hora_net_comm *c, int rc, uint32_t told, int peer, struct fp *f)
{
	const struct refusal r = refusal_seen(c);
	*f = (struct fp){.seq = c->seq};
	if (r.by >= 0) {
		f->kind = NOTICE_REFUSED;
		f->root = (uint32_t)r.by;
		f->dtype = (uint8_t)r.kind;
		f->op = r.reason;
		f->count = (uint64_t)r.value;
		f->seq = r.seq;
	} else if (rc == -EBADE || told == NOTICE_ABORT) {
		const int origin = atomic_load(&c->abort_origin);
		f->kind = NOTICE_ABORT;
		f->root = (uint32_t)(origin >= 0 ? origin : c->rank);
	} else {
		const int origin = atomic_load(&c->lost_origin);
		f->kind = NOTICE_LOST;
		f->root = (uint32_t)(origin >= 0 ? origin : peer >= 0 ? peer : c->rank);
	}
}

/* tell every rank (best effort), then break every connection: ranks
 * waiting on us fail too, now */
static void tell_and_close(struct hora_net_comm *c, const struct fp *f)
{
	if (!c->link)
		return;
	uint8_t b[FP_BYTES];
	fp_encode(b, f);
	for (int i = 0; c->link->ops->notify && !c->quiet && i < c->n; i++)
		if (i != c->rank)
			(void)c->link->ops->notify(c->link, i, b, sizeof(b)); /* best effort */
	c->link->ops->close(c->link, -1);
	stage_leave(c);
}

void stage_leave(struct hora_net_comm *c)
{
	pthread_mutex_lock(&c->stage_mu);
	struct hora_net_stage *s = c->stage;
	c->stage = NULL;
	pthread_mutex_unlock(&c->stage_mu);
	if (s) /* the local ranks waiting for us fail now, naming us */
		s->ops->destroy(s);
}

int coll_fail_peer(struct hora_net_comm *c, int rc, int peer, const char *fmt, ...)
{
	if (c->broken)
		return rc;
	if (atomic_load(&c->interrupted))
		peer = -1; /* our own doing (the stall abort), whatever peer it showed at */
	int k = snprintf(c->err, sizeof(c->err), "rank %d (view %u), %s #%llu: ", c->rank, c->cfg.opts.view,
			 hora_net_coll_name(c->kind),
			 (unsigned long long)(c->kind == HORA_NET_COLL_PAIR_AVERAGE ? c->pair_now : c->seq));
	va_list ap;
	va_start(ap, fmt);
	k += vsnprintf(c->err + k, sizeof(c->err) - (size_t)k, fmt, ap);
	va_end(ap);
	uint32_t told = 0;
	if (rc != -EBADE && rc != -EINVAL && k > 0 && (size_t)k < sizeof(c->err))
		told = peer_notice(c, peer, c->err + k, sizeof(c->err) - (size_t)k);
	if (told == NOTICE_REFUSED)
		rc = -EINVAL;
	c->broken = rc;
	c->fail_peer = peer;
	struct fp f;
	notice_of(c, rc, told, peer, &f);
	tell_and_close(c, &f);
	return rc;
}

int coll_refuse(struct hora_net_comm *c, enum refusal_reason reason, int64_t value)
{
	if (c->broken)
		return c->broken;
	const struct refusal r = {.by = c->rank, .kind = c->kind, .seq = c->seq, .reason = (uint8_t)reason,
				  .value = value};
	note_refusal(c, &r);
	char what[300];
	refusal_say(what, sizeof(what), &r, c->n);
	snprintf(c->err, sizeof(c->err), "%s (view %u)", what, c->cfg.opts.view);
	c->broken = -EINVAL;
	struct fp f;
	notice_of(c, -EINVAL, 0, -1, &f);
	tell_and_close(c, &f);
	return -EINVAL;
}

int fp_compare(struct hora_net_comm *c, const uint8_t *b, const struct fp *mine, int from, char *msg,
	       size_t len)
{
	struct fp o;
	fp_decode(b, &o);
	switch (take_notice(c, &o, from, mine->seq, msg, len)) {
	case NOTICE_ABORT:
		return -EBADE;
	case NOTICE_LOST:
		return -ECONNRESET;
	case NOTICE_REFUSED:
		return -EINVAL;
	}
	const bool same_call = o.seq == mine->seq && o.count == mine->count && o.kind == mine->kind &&
			       o.dtype == mine->dtype && o.op == mine->op && o.nranks == mine->nranks &&
			       o.root == mine->root;
	if (same_call && o.path == mine->path && o.layout == mine->layout)
		return 0;
	char a[160], b2[160];
	fp_describe(a, sizeof(a), mine);
	fp_describe(b2, sizeof(b2), &o);
	if (same_call && (o.path == P_DEVICE) != (mine->path == P_DEVICE)) {
		snprintf(msg, len, "mismatched buffers: rank %d passed %s buffers to %s but rank %d %s buffers; "
				   "every rank of a call passes device (CUDA) buffers or every rank host ones",
			 c->rank, mine->path == P_DEVICE ? "device" : "host", a, from,
			 o.path == P_DEVICE ? "device" : "host");
		return -EBADE;
	}
	if (same_call && o.path != mine->path && o.path < P_PATHS) {
		snprintf(msg, len, "mismatched collective settings: rank %d runs %s by %s but rank %d by %s; "
				   "collectives.algorithm, small_bytes and medium_bytes must be the same on "
				   "every rank", c->rank, a, fp_path_name(mine->path), from, fp_path_name(o.path));
		return -EBADE;
	}
	if (same_call && o.path == P_DEVICE) {
		snprintf(msg, len, "mismatched device collectives: rank %d and rank %d run %s on device buffers "
				   "in different ways (NCCL, or staged through host memory): every rank's buffers "
				   "must be on the same device, and its NCCL set up alike", c->rank, from, a);
		return -EBADE;
	}
	if (same_call && o.path == mine->path) {
		snprintf(msg, len, "mismatched collective settings: rank %d and rank %d run %s by %s with "
				   "different segment_size, slice_size or depth; they must be the same on every rank",
			 c->rank, from, a, fp_path_name(mine->path));
		return -EBADE;
	}
	snprintf(msg, len, "mismatched collectives: rank %d called %s but rank %d called %s", c->rank, a,
		 from, b2);
	return -EBADE;
}
