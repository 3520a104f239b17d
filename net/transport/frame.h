/* frame.h - hora's wire frame: a fixed 48-byte header, then the payload.
 * Encoding and validation only; no I/O. Layout and rules: net/PROTOCOL.md.
 */
#ifndef HORA_NET_FRAME_H
#define HORA_NET_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HORA_NET_MAGIC 0x484f5241u /* "HORA" */
#define HORA_NET_VERSION 1
#define HORA_NET_HDR_BYTES 48
#define HORA_NET_MAX_FRAME_LIMIT (1ull << 30) /* no configuration may exceed 1 GiB */
#define HORA_NET_MAX_MSG_BYTES (1ull << 40)

enum hora_net_frame_type {
	HORA_NET_T_DATA = 1,
	HORA_NET_T_CLOSE = 2, /* orderly goodbye; length 0 */
};

enum hora_net_frame_flags {
	HORA_NET_F_CRC = 1u << 0, /* crc32c holds CRC32C(payload) */
};

struct hora_net_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t type;
	uint16_t flags;
	uint32_t view;    /* membership view the sender is in */
	uint32_t crc32c;  /* of the payload when HORA_NET_F_CRC */
	uint64_t seq;     /* message (op) sequence number on this peer */
	uint64_t msg_len; /* total bytes of the message */
	uint64_t offset;  /* of this frame's payload within the message */
	uint64_t length;  /* payload bytes following this header */
};

/* Serialise h into 48 bytes, little-endian. */
void hora_net_hdr_encode(const struct hora_net_hdr *h, uint8_t out[HORA_NET_HDR_BYTES]);

/* Parse and check 48 bytes: magic, version, type, flags, offset+length <=
 * msg_len <= HORA_NET_MAX_MSG_BYTES, length <= max_frame. Returns 0, or
 * -EBADMSG (bad magic / malformed), -EPROTONOSUPPORT (version), -EPROTO
 * (unknown type or flags), -EMSGSIZE (length or message too large), with a
 * reason (no peer name: the caller adds it) in why. */
int hora_net_hdr_decode(const uint8_t in[HORA_NET_HDR_BYTES], uint64_t max_frame,
			struct hora_net_hdr *h, char *why, size_t whylen);

/* CRC32C (Castagnoli), hardware instruction when the CPU has SSE4.2. */
uint32_t hora_net_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
