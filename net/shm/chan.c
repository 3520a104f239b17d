/* chan.c - whole messages of any length through a channel (send, recv,
 * and xchg, which sends one and receives one at once):
 * a frame streams through the ring in chunks, so a message larger than the
 * ring passes too. Not the zero-copy form (ring.c).
 *
 * Chunks: each side waits for min(what is left of the frame, ring/4) bytes
 * (room to write, or bytes to read), then moves all it can. The two cannot
 * wait on each other: if less than a quarter of the ring is full, more
 * than three quarters are free. A frame's first chunk is at least 64
 * bytes (frames are multiples of 64, rings at least a page), so its head is
 * always published whole.
 */
#include "net/shm/internal.h"
#include "net/util/clock.h"

#include <errno.h>
#include <string.h>

/* how long a message cut short by a refused head may take to finish (ms),
 * as the small-message channel's */
#define FLUSH_MS 1000

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* A payload in two parts, head then body (either may be empty). */
struct parts_in {
	const uint8_t *p[2];
	uint64_t n[2];
};
struct parts_out {
	uint8_t *p[2];
	uint64_t n[2];
};

/* Write bytes [off, off + n) of the frame {h, payload, padding} to dst. */
static void frame_put(uint8_t *dst, const struct shm_frame_head *h, const struct parts_in *pl,
		      uint64_t off, uint64_t n)
{
	const uint64_t end = off + n;
	if (off < HORA_NET_SHM_FRAME_HEAD) {
		uint64_t k = min64(HORA_NET_SHM_FRAME_HEAD, end) - off;
		memcpy(dst, (const uint8_t *)h + off, k);
		dst += k;
		off += k;
	}
	/* payload offsets [a, b) from part 0, then part 1; the padding is left
	 * as it is (the reader skips it) */
	uint64_t a = off - HORA_NET_SHM_FRAME_HEAD, b = end - HORA_NET_SHM_FRAME_HEAD, base = 0;
	for (int i = 0; i < 2 && a < b; base += pl->n[i], i++)
		if (a < base + pl->n[i]) {
			uint64_t k = min64(b, base + pl->n[i]) - a;
			memcpy(dst, pl->p[i] + (a - base), k);
			dst += k;
			a += k;
		}
}

/* Read the payload bytes among frame bytes [off, off + n) from src. */
static void frame_get(const struct parts_out *pl, const uint8_t *src, uint64_t off, uint64_t n)
{
	const uint64_t end = off + n;
	if (off < HORA_NET_SHM_FRAME_HEAD) {
		uint64_t k = min64(HORA_NET_SHM_FRAME_HEAD, end) - off;
		src += k;
		off += k;
	}
	uint64_t a = off - HORA_NET_SHM_FRAME_HEAD, b = end - HORA_NET_SHM_FRAME_HEAD, base = 0;
	for (int i = 0; i < 2 && a < b; base += pl->n[i], i++)
		if (a < base + pl->n[i]) {
			uint64_t k = min64(b, base + pl->n[i]) - a;
			memcpy(pl->p[i] + (a - base), src, k);
			src += k;
			a += k;
		}
}

/* A message on its way out (tx) or in (rx). */
struct tx {
	struct parts_in pl;
	uint64_t len, f, done;
	struct shm_frame_head h;
};
struct rx {
	struct parts_out pl;
	uint64_t len, f, done;
	int head; /* its frame head was read and checked */
};

static int tx_begin(struct hora_net_shm *c, struct tx *t, const struct parts_in *pl, char *err,
		    size_t errlen)
{
	const uint64_t len = pl->n[0] + pl->n[1];
	*t = (struct tx){.pl = *pl, .len = len, .f = shm_frame_bytes(len), .h = shm_head(c->tx_seq, len)};
	if (c->tx_reserved) {
		shm_errf(err, errlen, "shm: send while a reserve is not committed");
		return -EBUSY;
	}
	if (!t->f) {
		shm_errf(err, errlen, "shm: a message of %llu bytes is too long", (unsigned long long)len);
		return -EMSGSIZE;
	}
	return shm_peer_closed(c, err, errlen);
}

static int rx_begin(struct hora_net_shm *c, struct rx *r, const struct parts_out *pl, char *err,
		    size_t errlen)
{
	const uint64_t len = pl->n[0] + pl->n[1];
	*r = (struct rx){.pl = *pl, .len = len, .f = shm_frame_bytes(len)};
	if (c->rx_peeked) {
		shm_errf(err, errlen, "shm: recv while a peeked message is not released");
		return -EBUSY;
	}
	if (!r->f) {
		shm_errf(err, errlen, "shm: a message of %llu bytes is too long", (unsigned long long)len);
		return -EMSGSIZE;
	}
	return 0;
}

/* What the next step of t waits for: room for its next chunk. */
static uint64_t tx_want(const struct hora_net_shm *c, const struct tx *t)
{
	return min64(t->f - t->done, c->ring_bytes / 4);
}

/* What the next step of r waits for: its head's line, or its next chunk. */
static uint64_t rx_want(const struct hora_net_shm *c, const struct rx *r)
{
	return r->head ? min64(r->f - r->done, c->ring_bytes / 4) : SHM_LINE;
}

/* Move t's next chunk if there is room for it, without waiting. 1 when it
 * moved, 0 when not. */
static int tx_step(struct hora_net_shm *c, struct tx *t)
{
	uint64_t room = c->ring_bytes - (c->tx_head - c->tx_tail_seen);
	if (room < tx_want(c, t) && (room = shm_avail(c, SHM_SPACE)) < tx_want(c, t))
		return 0;
	uint64_t n = min64(room, t->f - t->done);
	frame_put(c->ring[c->side] + c->tx_head % c->ring_bytes, &t->h, &t->pl, t->done, n);
	shm_publish(c, n);
	t->done += n;
	if (t->done == t->f) {
		c->tx_seq++;
		shm_beat(c);
	}
	return 1;
}

/* Take r's head, or its next chunk, if it is there, without waiting. 1
 * when it moved, 0 when not, -errno (a damaged head, another length). */
static int rx_step(struct hora_net_shm *c, struct rx *r, char *err, size_t errlen)
{
	uint64_t have = c->rx_head_seen - c->rx_tail;
	if (have < rx_want(c, r) && (have = shm_avail(c, SHM_DATA)) < rx_want(c, r))
		return 0;
	if (!r->head) {
		struct shm_frame_head h;
		int rc = shm_next_head(c, &h, 0, err, errlen); /* the line is there: no wait */
		if (rc)
			return rc;
		if (h.bytes != r->len) {
			shm_errf(err, errlen, "shm: the next message has %llu bytes, %llu expected",
				 (unsigned long long)h.bytes, (unsigned long long)r->len);
			return -EMSGSIZE;
		}
		r->head = 1;
		return 1;
	}
	uint64_t n = min64(have, r->f - r->done);
	frame_get(&r->pl, c->ring[1 - c->side] + c->rx_tail % c->ring_bytes, r->done, n);
	shm_consume(c, n);
	r->done += n;
	if (r->done == r->f) {
		c->rx_seq++;
		shm_beat(c);
	}
	return 1;
}

int hora_net_shm_send(struct hora_net_shm *c, const void *buf, size_t len, int64_t deadline_ns,
		      char *err, size_t errlen)
{
	struct tx t;
	const struct parts_in pl = {.p = {NULL, buf}, .n = {0, len}};
	int rc = tx_begin(c, &t, &pl, err, errlen);
	while (!rc && t.done < t.f)
		if (!tx_step(c, &t))
			rc = shm_wait(c, SHM_SPACE, tx_want(c, &t), deadline_ns, err, errlen);
	return rc;
}

int hora_net_shm_recv(struct hora_net_shm *c, void *buf, size_t len, int64_t deadline_ns,
		      char *err, size_t errlen)
{
	struct rx r;
	const struct parts_out pl = {.p = {NULL, buf}, .n = {0, len}};
	int rc = rx_begin(c, &r, &pl, err, errlen);
	while (!rc && r.done < r.f)
		if (!(rc = rx_step(c, &r, err, errlen)))
			rc = shm_wait(c, SHM_DATA, rx_want(c, &r), deadline_ns, err, errlen);
		else if (rc > 0)
			rc = 0;
	return rc;
}

/* After a refused head, finish our own message (its reader is in the same
 * call and would take what we send next for its bytes), for up to
 * FLUSH_MS. 1 when it is still partly out (torn). */
static int tx_flush(struct hora_net_shm *c, struct tx *t, int64_t deadline_ns)
{
	int64_t until = hora_clock_ns() + (int64_t)FLUSH_MS * 1000000;
	if (until > deadline_ns)
		until = deadline_ns;
	while (t->done < t->f)
		if (!tx_step(c, t) && shm_wait(c, SHM_SPACE, tx_want(c, t), until, NULL, 0))
			break;
	return t->done < t->f;
}

/* The next message on `in` has another length than the one expected (rc
 * -EMSGSIZE): its head is still checked first, as a stream's would be, so
 * that a mismatched call is named by the check, not by a length. The
 * message stays unread either way. */
static int xchg_other_length(struct hora_net_shm_xchg *x, struct tx *t, int rc)
{
	if (x->head_bytes && !hora_net_shm_look(x->in, x->in_head, x->head_bytes, x->deadline_ns, NULL, 0)) {
		const int refused = x->check(x->check_arg, x->in_head);
		if (refused) {
			x->torn = x->out ? tx_flush(x->out, t, x->deadline_ns) : 0;
			return refused;
		}
	}
	x->torn = x->out && t->done > 0 && t->done < t->f;
	return rc;
}

int hora_net_shm_xchg(struct hora_net_shm_xchg *x)
{
	const struct parts_in pin = {.p = {x->out_head, x->out_buf}, .n = {x->head_bytes, x->out_bytes}};
	const struct parts_out pout = {.p = {x->in_head, x->in_buf}, .n = {x->head_bytes, x->in_bytes}};
	struct tx t = {0};
	struct rx r = {0};
	int rc, checked = !x->check || !x->in;
	x->dir = 0;
	x->torn = 0;
	if (x->out && (rc = tx_begin(x->out, &t, &pin, x->err, x->errlen)))
		return rc;
	x->dir = 1;
	if (x->in && (rc = rx_begin(x->in, &r, &pout, x->err, x->errlen)))
		return rc;
	for (;;) {
		int moved = 0, tx_left = x->out && t.done < t.f, rx_left = x->in && r.done < r.f;
		if (tx_left)
			moved |= tx_step(x->out, &t);
		if (rx_left && (rc = rx_step(x->in, &r, x->err, x->errlen)) < 0) {
			if (rc == -EMSGSIZE && !checked)
				return xchg_other_length(x, &t, rc); /* dir 1 */
			x->torn = x->out && t.done > 0 && t.done < t.f;
			return rc; /* dir 1 */
		}
		moved |= rx_left && rc > 0;
		if (!checked && r.head && r.done >= HORA_NET_SHM_FRAME_HEAD + x->head_bytes) {
			checked = 1; /* the head is in: check it before waiting for the body */
			if ((rc = x->check(x->check_arg, x->in_head))) {
				x->torn = x->out ? tx_flush(x->out, &t, x->deadline_ns) : 0;
				return rc;
			}
		}
		tx_left = x->out && t.done < t.f;
		rx_left = x->in && r.done < r.f;
		if (!tx_left && !rx_left)
			return 0;
		if (moved)
			continue;
		struct shm_waiter w[2];
		int n = 0, which;
		if (tx_left)
			w[n++] = (struct shm_waiter){.c = x->out, .kind = SHM_SPACE, .need = tx_want(x->out, &t)};
		if (rx_left)
			w[n++] = (struct shm_waiter){.c = x->in, .kind = SHM_DATA, .need = rx_want(x->in, &r)};
		if ((rc = shm_waitv(w, n, x->deadline_ns, &which, x->err, x->errlen))) {
			x->dir = w[which].kind == SHM_DATA;
			x->torn = x->out && t.done > 0 && t.done < t.f;
			return rc;
		}
	}
}

/* ---- messages moved by steps (one thread driving many channels) ---- */

int hora_net_shm_msg_send(struct hora_net_shm_msg *m, struct hora_net_shm *c, const void *buf,
			  size_t len, char *err, size_t errlen)
{
	struct tx t;
	const struct parts_in pl = {.p = {NULL, buf}, .n = {0, len}};
	int rc = tx_begin(c, &t, &pl, err, errlen);
	*m = (struct hora_net_shm_msg){.c = c, .out = buf, .len = len, .frame = t.f};
	return rc;
}

int hora_net_shm_msg_recv(struct hora_net_shm_msg *m, struct hora_net_shm *c, void *buf, size_t len,
			  char *err, size_t errlen)
{
	struct rx r;
	const struct parts_out pl = {.p = {NULL, buf}, .n = {0, len}};
	int rc = rx_begin(c, &r, &pl, err, errlen);
	*m = (struct hora_net_shm_msg){.c = c, .in = buf, .len = len, .frame = r.f, .recv = 1};
	return rc;
}

/* m's state as chan.c's own: the frame head of a send is the channel's
 * next (tx_seq moves only when the frame is out) */
static struct tx msg_tx(const struct hora_net_shm_msg *m)
{
	return (struct tx){.pl = {.p = {NULL, m->out}, .n = {0, m->len}}, .len = m->len, .f = m->frame,
			   .done = m->done, .h = shm_head(m->c->tx_seq, m->len)};
}

static struct rx msg_rx(const struct hora_net_shm_msg *m)
{
	return (struct rx){.pl = {.p = {NULL, m->in}, .n = {0, m->len}}, .len = m->len, .f = m->frame,
			   .done = m->done, .head = m->head};
}

int hora_net_shm_msg_step(struct hora_net_shm_msg *m, char *err, size_t errlen)
{
	if (m->done >= m->frame)
		return 0;
	if (!m->recv) {
		struct tx t = msg_tx(m);
		int moved = tx_step(m->c, &t);
		m->done = t.done;
		return moved;
	}
	struct rx r = msg_rx(m);
	int rc = rx_step(m->c, &r, err, errlen);
	m->done = r.done;
	m->head = r.head;
	return rc;
}

int hora_net_shm_msg_done(const struct hora_net_shm_msg *m)
{
	return m->done >= m->frame;
}

int hora_net_shm_msg_wait(struct hora_net_shm_msg *const *m, int n, struct hora_net_shm_bell *bell,
			  uint32_t seen, int spin_us, int64_t deadline_ns, int *which, char *err,
			  size_t errlen)
{
	struct shm_waiter w[128];
	const struct shm_bellw b = {.bell = bell, .seen = seen};
	if (n > 128)
		n = 128; /* shm_waitb waits on 127 at most; the caller steps the rest */
	for (int i = 0; i < n; i++) {
		struct hora_net_shm *c = m[i]->c;
		if (m[i]->recv) {
			const struct rx r = msg_rx(m[i]);
			w[i] = (struct shm_waiter){.c = c, .kind = SHM_DATA, .need = rx_want(c, &r)};
		} else {
			const struct tx t = msg_tx(m[i]);
			w[i] = (struct shm_waiter){.c = c, .kind = SHM_SPACE, .need = tx_want(c, &t)};
		}
	}
	return shm_waitb(w, n, &b, spin_us, deadline_ns, which, err, errlen);
}
