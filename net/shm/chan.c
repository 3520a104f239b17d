/* chan.c - whole messages of any length through a channel (send, recv):
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

#include <errno.h>
#include <string.h>

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Write bytes [off, off + n) of the frame {h, buf (len), padding} to dst. */
static void frame_put(uint8_t *dst, const struct shm_frame_head *h, const uint8_t *buf, uint64_t len,
		      uint64_t off, uint64_t n)
{
	const uint64_t end = off + n, pend = HORA_NET_SHM_FRAME_HEAD + len;
	if (off < HORA_NET_SHM_FRAME_HEAD) {
		uint64_t k = min64(HORA_NET_SHM_FRAME_HEAD, end) - off;
		memcpy(dst, (const uint8_t *)h + off, k);
		dst += k;
		off += k;
	}
	if (off < end && off < pend)
		memcpy(dst, buf + (off - HORA_NET_SHM_FRAME_HEAD), min64(end, pend) - off);
	/* the padding is left as it is: the reader skips it */
}

/* Read the payload bytes among frame bytes [off, off + n) from src. */
static void frame_get(uint8_t *buf, uint64_t len, const uint8_t *src, uint64_t off, uint64_t n)
{
	const uint64_t end = off + n, pend = HORA_NET_SHM_FRAME_HEAD + len;
	if (off < HORA_NET_SHM_FRAME_HEAD) {
		uint64_t k = min64(HORA_NET_SHM_FRAME_HEAD, end) - off;
		src += k;
		off += k;
	}
	if (off < end && off < pend)
		memcpy(buf + (off - HORA_NET_SHM_FRAME_HEAD), src, min64(end, pend) - off);
}

int hora_net_shm_send(struct hora_net_shm *c, const void *buf, size_t len, int64_t deadline_ns,
		      char *err, size_t errlen)
{
	const uint64_t f = shm_frame_bytes(len), chunk = c->ring_bytes / 4;
	int rc;
	if (c->tx_reserved) {
		shm_errf(err, errlen, "shm: send while a reserve is not committed");
		return -EBUSY;
	}
	if (!f) {
		shm_errf(err, errlen, "shm: a message of %zu bytes is too long", len);
		return -EMSGSIZE;
	}
	if ((rc = shm_peer_closed(c, err, errlen)))
		return rc;
	const struct shm_frame_head h = shm_head(c->tx_seq, len);
	for (uint64_t done = 0; done < f;) {
		uint64_t want = min64(f - done, chunk), room = c->ring_bytes - (c->tx_head - c->tx_tail_seen);
		if (room < want) {
			if ((rc = shm_wait(c, SHM_SPACE, want, deadline_ns, err, errlen)))
				return rc;
			room = c->ring_bytes - (c->tx_head - c->tx_tail_seen);
		}
		uint64_t n = min64(room, f - done);
		frame_put(c->ring[c->side] + c->tx_head % c->ring_bytes, &h, buf, len, done, n);
		shm_publish(c, n);
		done += n;
	}
	c->tx_seq++;
	shm_beat(c);
	return 0;
}

int hora_net_shm_recv(struct hora_net_shm *c, void *buf, size_t len, int64_t deadline_ns,
		      char *err, size_t errlen)
{
	const uint64_t f = shm_frame_bytes(len), chunk = c->ring_bytes / 4;
	struct shm_frame_head h;
	int rc;
	if (c->rx_peeked) {
		shm_errf(err, errlen, "shm: recv while a peeked message is not released");
		return -EBUSY;
	}
	if (!f) {
		shm_errf(err, errlen, "shm: a message of %zu bytes is too long", len);
		return -EMSGSIZE;
	}
	if ((rc = shm_next_head(c, &h, deadline_ns, err, errlen)))
		return rc;
	if (h.bytes != len) {
		shm_errf(err, errlen, "shm: the next message has %llu bytes, %zu expected",
			 (unsigned long long)h.bytes, len);
		return -EMSGSIZE;
	}
	for (uint64_t done = 0; done < f;) {
		uint64_t want = min64(f - done, chunk), have = c->rx_head_seen - c->rx_tail;
		if (have < want) {
			if ((rc = shm_wait(c, SHM_DATA, want, deadline_ns, err, errlen)))
				return rc;
			have = c->rx_head_seen - c->rx_tail;
		}
		uint64_t n = min64(have, f - done);
		frame_get(buf, len, c->ring[1 - c->side] + c->rx_tail % c->ring_bytes, done, n);
		shm_consume(c, n);
		done += n;
	}
	c->rx_seq++;
	shm_beat(c);
	return 0;
}
