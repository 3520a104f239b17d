/* fuzz_net.c - libFuzzer target for what an unauthenticated or hostile peer
 * controls: the frame header decoder, and the server side of the handshake
 * state machine fed arbitrary bytes (HELLO then AUTH), plus the client side
 * fed an arbitrary CHALLENGE/RESULT. Nothing here may crash, read out of
 * bounds or accept without the secret. */
#include "net/transport/frame.h"
#include "net/transport/handshake.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t key[] = "fuzz-cluster-secret-0123456789";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	uint8_t out[HORA_NET_HS_MAX_OUT];
	size_t n;
	if (size >= HORA_NET_HDR_BYTES) {
		struct hora_net_hdr h;
		if (hora_net_hdr_decode(data, 1u << 20, &h, why, sizeof(why)) == 0 &&
		    (h.offset + h.length > h.msg_len || h.length > (1u << 20)))
			abort(); /* the decoder let an inconsistent header through */
	}
	/* server: HELLO, then AUTH, from the input */
	struct hora_net_hs s;
	hora_net_hs_server_start(&s, key, sizeof(key) - 1, 1);
	const uint8_t *p = data;
	size_t left = size;
	while (hora_net_hs_want(&s) && left >= hora_net_hs_want(&s)) {
		size_t w = hora_net_hs_want(&s);
		int rc = hora_net_hs_input(&s, p, w, out, &n);
		p += w;
		left -= w;
		if (rc == 1)
			abort(); /* authenticated without knowing the secret */
		if (rc < 0)
			break;
	}
	/* client: CHALLENGE and RESULT from the input */
	struct hora_net_hs c;
	hora_net_hs_client_start(&c, key, sizeof(key) - 1, 2, 3, 0, 1, out, &n);
	p = data;
	left = size;
	while (hora_net_hs_want(&c) && left >= hora_net_hs_want(&c)) {
		size_t w = hora_net_hs_want(&c);
		int rc = hora_net_hs_input(&c, p, w, out, &n);
		p += w;
		left -= w;
		if (rc)
			break; /* 1 is impossible: the server proof needs the key */
	}
	return 0;
}
