/* frame.c - wire header encode/decode and CRC32C.
 *
 * Every field of a received header is untrusted: it is checked here, before
 * anything uses a length or an offset. Decoding never allocates.
 */
#include "net/transport/frame.h"
#include "net/transport/endian.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>


void hora_net_hdr_encode(const struct hora_net_hdr *h, uint8_t out[HORA_NET_HDR_BYTES])
{
	hora_put32(out, h->magic);
	out[4] = h->version;
	out[5] = h->type;
	hora_put16(out + 6, h->flags);
	hora_put32(out + 8, h->view);
	hora_put32(out + 12, h->crc32c);
	hora_put64(out + 16, h->seq);
	hora_put64(out + 24, h->msg_len);
	hora_put64(out + 32, h->offset);
	hora_put64(out + 40, h->length);
}

int hora_net_hdr_decode(const uint8_t in[HORA_NET_HDR_BYTES], uint64_t max_frame,
			struct hora_net_hdr *h, char *why, size_t whylen)
{
	h->magic = hora_get32(in);
	h->version = in[4];
	h->type = in[5];
	h->flags = hora_get16(in + 6);
	h->view = hora_get32(in + 8);
	h->crc32c = hora_get32(in + 12);
	h->seq = hora_get64(in + 16);
	h->msg_len = hora_get64(in + 24);
	h->offset = hora_get64(in + 32);
	h->length = hora_get64(in + 40);
	if (h->magic != HORA_NET_MAGIC)
		return snprintf(why, whylen, "bad frame magic 0x%08x (not a hora peer?)", h->magic),
		       -EBADMSG;
	if (h->version != HORA_NET_VERSION)
		return snprintf(why, whylen, "protocol version %u not supported (this is %d)",
				h->version, HORA_NET_VERSION),
		       -EPROTONOSUPPORT;
	if (h->type != HORA_NET_T_DATA && h->type != HORA_NET_T_CLOSE)
		return snprintf(why, whylen, "unknown frame type %u", h->type), -EPROTO;
	if (h->flags & ~(uint16_t)HORA_NET_F_CRC)
		return snprintf(why, whylen, "unknown frame flags 0x%04x", h->flags), -EPROTO;
	if (h->length > max_frame)
		return snprintf(why, whylen, "frame length %llu exceeds the limit %llu",
				(unsigned long long)h->length, (unsigned long long)max_frame),
		       -EMSGSIZE;
	if (h->msg_len > HORA_NET_MAX_MSG_BYTES)
		return snprintf(why, whylen, "message length %llu exceeds the limit %llu",
				(unsigned long long)h->msg_len,
				(unsigned long long)HORA_NET_MAX_MSG_BYTES),
		       -EMSGSIZE;
	if (h->offset > h->msg_len || h->length > h->msg_len - h->offset)
		return snprintf(why, whylen, "frame [%llu, +%llu) outside its message of %llu bytes",
				(unsigned long long)h->offset, (unsigned long long)h->length,
				(unsigned long long)h->msg_len),
		       -EBADMSG;
	if (h->type == HORA_NET_T_CLOSE && (h->length || h->msg_len))
		return snprintf(why, whylen, "CLOSE frame with a payload"), -EBADMSG;
	return 0;
}

/* ---- CRC32C ------------------------------------------------------------------ */

static uint32_t table[8][256];
static int table_ready; /* written once under pthread_once-like race: idempotent */

static void make_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		table[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (int i = 0; i < 256; i++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
	__atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n)
{
	if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE))
		make_table();
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= crc;
		crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
		      table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
		      table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
	uint64_t c = crc;
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		n -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (n--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return c32;
}
#endif

uint32_t hora_net_crc32c(uint32_t crc, const void *buf, size_t len)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc_hw(crc, buf, len);
#endif
	return ~crc_sw(crc, buf, len);
}
