/* ring.c - the frame level of a channel's rings: publishing and consuming
 * bytes, reading a frame's head, and the zero-copy pair reserve/commit
 * (in place in our ring) and peek/release (in place in the peer's).
 * Not streaming a message larger than the ring (chan.c) nor waiting
 * (wait.c).
 *
 * Only the producer stores head and only the consumer stores tail, each
 * with release after its bytes (written, or read): the other side's
 * acquire load of it then sees those bytes (or may overwrite them).
 */
#include "net/shm/internal.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

void shm_publish(struct hora_net_shm *c, uint64_t n)
{
	c->tx_head += n;
	atomic_store_explicit(&c->hdr->dir[c->side].head, c->tx_head, memory_order_release);
	shm_wake(c, c->side, SHM_DATA);
}

void shm_consume(struct hora_net_shm *c, uint64_t n)
{
	c->rx_tail += n;
	atomic_store_explicit(&c->hdr->dir[1 - c->side].tail, c->rx_tail, memory_order_release);
	shm_wake(c, 1 - c->side, SHM_SPACE);
}

int shm_next_head(struct hora_net_shm *c, struct shm_frame_head *h, int64_t deadline_ns, char *err,
		  size_t errlen)
{
	int rc;
	if (c->rx_head_seen - c->rx_tail < SHM_LINE &&
	    (rc = shm_wait(c, SHM_DATA, SHM_LINE, deadline_ns, err, errlen)))
		return rc;
	memcpy(h, c->ring[1 - c->side] + c->rx_tail % c->ring_bytes, sizeof(*h));
	if (h->seq != c->rx_seq || h->check != (SHM_FRAME_CHECK ^ h->seq)) {
		shm_errf(err, errlen,
			 "shm: frame %u's head is damaged (seq %u, check 0x%08x): the stream is out of step",
			 c->rx_seq, h->seq, h->check);
		return -EPROTO;
	}
	return 0;
}

int hora_net_shm_next_bytes(struct hora_net_shm *c, size_t *len, int64_t deadline_ns, char *err,
			    size_t errlen)
{
	struct shm_frame_head h;
	if (c->rx_peeked) {
		shm_errf(err, errlen, "shm: next_bytes while a peeked message is not released");
		return -EBUSY;
	}
	int rc = shm_next_head(c, &h, deadline_ns, err, errlen);
	if (rc)
		return rc;
	if (h.bytes > SIZE_MAX) {
		shm_errf(err, errlen, "shm: the next message has %llu bytes", (unsigned long long)h.bytes);
		return -EMSGSIZE;
	}
	*len = (size_t)h.bytes;
	return 0;
}

int hora_net_shm_reserve(struct hora_net_shm *c, size_t len, void **p, int64_t deadline_ns,
			 char *err, size_t errlen)
{
	const uint64_t f = shm_frame_bytes(len);
	int rc;
	if (c->tx_reserved) {
		shm_errf(err, errlen, "shm: reserve while a reserve of %zu bytes is not committed",
			 c->tx_reserved);
		return -EBUSY;
	}
	if (!f || f > c->ring_bytes) {
		shm_errf(err, errlen, "shm: a message of %zu bytes does not fit the ring (%zu bytes) whole",
			 len, c->ring_bytes);
		return -EMSGSIZE;
	}
	if ((rc = shm_peer_closed(c, err, errlen)))
		return rc;
	if (c->ring_bytes - (c->tx_head - c->tx_tail_seen) < f &&
	    (rc = shm_wait(c, SHM_SPACE, f, deadline_ns, err, errlen)))
		return rc;
	c->tx_reserved = (size_t)f;
	*p = c->ring[c->side] + c->tx_head % c->ring_bytes + HORA_NET_SHM_FRAME_HEAD;
	return 0;
}

int hora_net_shm_commit(struct hora_net_shm *c, size_t len, char *err, size_t errlen)
{
	const uint64_t f = shm_frame_bytes(len);
	if (!c->tx_reserved || f > c->tx_reserved) {
		shm_errf(err, errlen, "shm: commit of %zu bytes, %zu reserved", len,
			 c->tx_reserved ? c->tx_reserved - HORA_NET_SHM_FRAME_HEAD : 0);
		return -EINVAL;
	}
	struct shm_frame_head h = shm_head(c->tx_seq++, len);
	memcpy(c->ring[c->side] + c->tx_head % c->ring_bytes, &h, sizeof(h));
	c->tx_reserved = 0;
	shm_publish(c, f);
	shm_beat(c);
	return 0;
}

int hora_net_shm_peek(struct hora_net_shm *c, size_t len, const void **p, int64_t deadline_ns,
		      char *err, size_t errlen)
{
	struct shm_frame_head h;
	int rc;
	if (c->rx_peeked) {
		shm_errf(err, errlen, "shm: peek while a peeked message is not released");
		return -EBUSY;
	}
	if ((rc = shm_next_head(c, &h, deadline_ns, err, errlen)))
		return rc;
	const uint64_t f = shm_frame_bytes(len);
	if (h.bytes != len || !f || f > c->ring_bytes) {
		shm_errf(err, errlen,
			 h.bytes != len ? "shm: the next message has %llu bytes, %zu expected"
					: "shm: a message of %llu bytes (%zu expected) cannot be peeked: it "
					  "does not fit the ring whole",
			 (unsigned long long)h.bytes, len);
		return -EMSGSIZE;
	}
	if (c->rx_head_seen - c->rx_tail < f && (rc = shm_wait(c, SHM_DATA, f, deadline_ns, err, errlen)))
		return rc;
	c->rx_peeked = (size_t)f;
	*p = c->ring[1 - c->side] + c->rx_tail % c->ring_bytes + HORA_NET_SHM_FRAME_HEAD;
	return 0;
}

int hora_net_shm_release(struct hora_net_shm *c, char *err, size_t errlen)
{
	if (!c->rx_peeked) {
		shm_errf(err, errlen, "shm: release without a peeked message");
		return -EINVAL;
	}
	c->rx_seq++;
	shm_consume(c, c->rx_peeked);
	c->rx_peeked = 0;
	shm_beat(c);
	return 0;
}

int hora_net_shm_look(struct hora_net_shm *c, void *buf, size_t len, int64_t deadline_ns, char *err,
		      size_t errlen)
{
	struct shm_frame_head h;
	int rc;
	if (c->rx_peeked) {
		shm_errf(err, errlen, "shm: look while a peeked message is not released");
		return -EBUSY;
	}
	if ((rc = shm_next_head(c, &h, deadline_ns, err, errlen)))
		return rc;
	const uint64_t need = HORA_NET_SHM_FRAME_HEAD + (uint64_t)len;
	if (h.bytes < len || need > c->ring_bytes) {
		shm_errf(err, errlen, "shm: the next message has %llu bytes: no look at %zu of them",
			 (unsigned long long)h.bytes, len);
		return -EMSGSIZE;
	}
	if (c->rx_head_seen - c->rx_tail < need && (rc = shm_wait(c, SHM_DATA, need, deadline_ns, err, errlen)))
		return rc;
	memcpy(buf, c->ring[1 - c->side] + c->rx_tail % c->ring_bytes + HORA_NET_SHM_FRAME_HEAD, len);
	return 0;
}
