/* handshake.h - mutual challenge-response authentication of a connection,
 * as an I/O-free state machine (the loop feeds it bytes; tests and the fuzz
 * target drive it directly). Messages and MACs: net/PROTOCOL.md.
 *
 * HMAC-SHA256 and randomness come from libsodium; comparison of MACs is
 * constant-time. Nothing but these fixed-size messages is parsed before a
 * peer is authenticated.
 */
#ifndef HORA_NET_HANDSHAKE_H
#define HORA_NET_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#define HORA_NET_HELLO_BYTES 64
#define HORA_NET_CHALLENGE_BYTES 80
#define HORA_NET_AUTH_BYTES 40
#define HORA_NET_RESULT_BYTES 8
#define HORA_NET_HS_MAX_OUT 80
#define HORA_NET_SECRET_MIN 16
#define HORA_NET_SECRET_MAX 1024

enum hora_net_hs_role { HORA_NET_HS_CLIENT, HORA_NET_HS_SERVER };

enum hora_net_reject {
	HORA_NET_REJ_AUTH = 1,    /* MAC did not verify */
	HORA_NET_REJ_VERSION = 2, /* protocol version not supported */
	HORA_NET_REJ_BUSY = 3,    /* too many connections in handshake */
	HORA_NET_REJ_MALFORMED = 4,
};

struct hora_net_hs {
	enum hora_net_hs_role role;
	int state;
	uint8_t key[HORA_NET_SECRET_MAX];
	size_t keylen;
	uint8_t hello[HORA_NET_HELLO_BYTES];
	uint8_t challenge[HORA_NET_CHALLENGE_BYTES];
	uint32_t local_node, peer_node;
	uint64_t session;        /* client's connection-group id */
	uint16_t stripe, nstripes;
	int peer_version;        /* version the peer announced (for messages) */
	char why[192];           /* reason of the last failure */
};

/* Client: fill out[0..*outlen) with HELLO. Returns 0 or -EINVAL (bad key). */
int hora_net_hs_client_start(struct hora_net_hs *hs, const uint8_t *key, size_t keylen,
			     uint32_t node, uint64_t session, uint16_t stripe, uint16_t nstripes,
			     uint8_t *out, size_t *outlen);
/* Server: ready to receive HELLO. Returns 0 or -EINVAL. */
int hora_net_hs_server_start(struct hora_net_hs *hs, const uint8_t *key, size_t keylen,
			     uint32_t node);

/* Bytes the state machine expects next from the peer; 0 when finished. */
size_t hora_net_hs_want(const struct hora_net_hs *hs);

/* Feed exactly hora_net_hs_want() bytes. May produce bytes to send in out
 * (*outlen, up to HORA_NET_HS_MAX_OUT; send them even on failure: a REJECT
 * tells the peer why). Returns 0 (continue), 1 (authenticated: done once
 * out is sent), or a negative errno with the reason in hs->why:
 * -EACCES (authentication failed), -EPROTONOSUPPORT (version), -EBADMSG
 * (malformed), -ECONNREFUSED (peer rejected us). */
int hora_net_hs_input(struct hora_net_hs *hs, const uint8_t *in, size_t n, uint8_t *out,
		      size_t *outlen);

/* Load the cluster secret: from `file` when not NULL/empty, else from
 * env_value, the value of the environment variable HORA_SECRET that the
 * caller read (NULL or "": none; the library reads no environment).
 * Trailing newlines are dropped; at least HORA_NET_SECRET_MIN bytes. A file
 * must be a regular file ("is a directory, not a regular file": -EISDIR).
 * Returns the length (> 0) or a negative errno with the reason (file,
 * problem) in why. warn (may be NULL with warnlen 0) gets "" or a warning
 * for the caller to print once: the file's mode lets group or others read
 * it ("secret file F has mode 0644: ..."). Never reads argv. */
int hora_net_secret_load(const char *file, const char *env_value, uint8_t *key, size_t cap,
			 char *why, size_t whylen, char *warn, size_t warnlen);

#endif
