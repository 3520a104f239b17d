/* handshake.c - the authentication state machine (see handshake.h and
 * net/PROTOCOL.md). Transcript MACs:
 *   server proof  mac_s = HMAC(secret, "hora-v1-server" | HELLO | CHALLENGE[0..48))
 *   client proof  mac_c = HMAC(secret, "hora-v1-client" | HELLO | CHALLENGE)
 * Each side's proof covers the other side's fresh nonce, so a recorded
 * exchange cannot be replayed, and the labels stop reflection.
 */
#include "net/transport/handshake.h"
#include "net/transport/endian.h"
#include "net/transport/frame.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HS_T_HELLO = 0x10, HS_T_CHALLENGE = 0x11, HS_T_AUTH = 0x12, HS_T_OK = 0x13, HS_T_REJECT = 0x14 };
enum { S_C_WAIT_CHALLENGE = 1, S_C_WAIT_RESULT, S_S_WAIT_HELLO, S_S_WAIT_AUTH, S_DONE, S_FAILED };


static void head(uint8_t *p, uint8_t type)
{
	hora_put32(p, HORA_NET_MAGIC);
	p[4] = HORA_NET_VERSION;
	p[5] = type;
}

static void mac(const struct hora_net_hs *hs, const char *label, size_t chal_len, uint8_t out[32])
{
	crypto_auth_hmacsha256_state st;
	crypto_auth_hmacsha256_init(&st, hs->key, hs->keylen);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
	crypto_auth_hmacsha256_update(&st, hs->hello, sizeof(hs->hello));
	crypto_auth_hmacsha256_update(&st, hs->challenge, chal_len);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

static int set_key(struct hora_net_hs *hs, const uint8_t *key, size_t keylen)
{
	if (sodium_init() < 0 || keylen < HORA_NET_SECRET_MIN || keylen > HORA_NET_SECRET_MAX)
		return -EINVAL;
	memcpy(hs->key, key, keylen);
	hs->keylen = keylen;
	return 0;
}

int hora_net_hs_client_start(struct hora_net_hs *hs, const uint8_t *key, size_t keylen,
			     uint32_t node, uint64_t session, uint16_t stripe, uint16_t nstripes,
			     uint8_t *out, size_t *outlen)
{
	memset(hs, 0, sizeof(*hs));
	if (set_key(hs, key, keylen))
		return -EINVAL;
	hs->role = HORA_NET_HS_CLIENT;
	hs->local_node = node;
	hs->session = session;
	hs->stripe = stripe;
	hs->nstripes = nstripes;
	uint8_t *h = hs->hello;
	head(h, HS_T_HELLO);
	hora_put16(h + 6, stripe);
	hora_put16(h + 8, nstripes);
	hora_put32(h + 12, node);
	hora_put64(h + 16, session);
	randombytes_buf(h + 24, 32); /* nonce_c; 56..63 reserved, zero */
	memcpy(out, h, HORA_NET_HELLO_BYTES);
	*outlen = HORA_NET_HELLO_BYTES;
	hs->state = S_C_WAIT_CHALLENGE;
	return 0;
}

int hora_net_hs_server_start(struct hora_net_hs *hs, const uint8_t *key, size_t keylen, uint32_t node)
{
	memset(hs, 0, sizeof(*hs));
	if (set_key(hs, key, keylen))
		return -EINVAL;
	hs->role = HORA_NET_HS_SERVER;
	hs->local_node = node;
	hs->state = S_S_WAIT_HELLO;
	return 0;
}

size_t hora_net_hs_want(const struct hora_net_hs *hs)
{
	switch (hs->state) {
	case S_C_WAIT_CHALLENGE:
		return HORA_NET_CHALLENGE_BYTES;
	case S_C_WAIT_RESULT:
		return HORA_NET_RESULT_BYTES;
	case S_S_WAIT_HELLO:
		return HORA_NET_HELLO_BYTES;
	case S_S_WAIT_AUTH:
		return HORA_NET_AUTH_BYTES;
	default:
		return 0;
	}
}

static int fail(struct hora_net_hs *hs, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static int fail(struct hora_net_hs *hs, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(hs->why, sizeof(hs->why), fmt, ap);
	va_end(ap);
	hs->state = S_FAILED;
	return rc;
}

static void reject(uint8_t *out, size_t *outlen, uint8_t reason)
{
	memset(out, 0, HORA_NET_RESULT_BYTES);
	head(out, HS_T_REJECT);
	out[6] = reason;
	out[7] = HORA_NET_VERSION;
	*outlen = HORA_NET_RESULT_BYTES;
}

/* magic, then version, then type: the first 6 bytes are stable across versions */
static int check_head(struct hora_net_hs *hs, const uint8_t *in, uint8_t type, const char *what)
{
	if (hora_get32(in) != HORA_NET_MAGIC)
		return fail(hs, -EBADMSG, "not a hora peer (bad magic 0x%08x in %s)", hora_get32(in), what);
	hs->peer_version = in[4];
	if (in[4] != HORA_NET_VERSION)
		return fail(hs, -EPROTONOSUPPORT, "protocol version %u not supported (this is %d)",
			    in[4], HORA_NET_VERSION);
	if (in[5] != type)
		return fail(hs, -EBADMSG, "malformed handshake: message type 0x%02x, expected %s",
			    in[5], what);
	return 0;
}

static const char *reject_reason(uint8_t r)
{
	switch (r) {
	case HORA_NET_REJ_AUTH:
		return "authentication failed (wrong cluster secret?)";
	case HORA_NET_REJ_VERSION:
		return "protocol version not supported";
	case HORA_NET_REJ_BUSY:
		return "too many pending handshakes";
	case HORA_NET_REJ_MALFORMED:
		return "malformed handshake";
	default:
		return "unknown reason";
	}
}

int hora_net_hs_input(struct hora_net_hs *hs, const uint8_t *in, size_t n, uint8_t *out,
		      size_t *outlen)
{
	uint8_t m[32];
	*outlen = 0;
	if (n != hora_net_hs_want(hs) || n == 0)
		return fail(hs, -EINVAL, "handshake fed %zu bytes, expected %zu", n,
			    hora_net_hs_want(hs));
	switch (hs->state) {
	case S_S_WAIT_HELLO: {
		int rc = check_head(hs, in, HS_T_HELLO, "HELLO");
		if (rc) {
			reject(out, outlen,
			       rc == -EPROTONOSUPPORT ? HORA_NET_REJ_VERSION : HORA_NET_REJ_MALFORMED);
			return rc;
		}
		uint16_t stripe = hora_get16(in + 6), nstripes = hora_get16(in + 8);
		if (nstripes == 0 || nstripes > 64 || stripe >= nstripes || hora_get64(in + 56)) {
			reject(out, outlen, HORA_NET_REJ_MALFORMED);
			return fail(hs, -EBADMSG, "malformed HELLO (stripe %u of %u)", stripe, nstripes);
		}
		memcpy(hs->hello, in, HORA_NET_HELLO_BYTES);
		hs->stripe = stripe;
		hs->nstripes = nstripes;
		hs->peer_node = hora_get32(in + 12);
		hs->session = hora_get64(in + 16);
		uint8_t *c = hs->challenge;
		memset(c, 0, sizeof(hs->challenge));
		head(c, HS_T_CHALLENGE);
		hora_put32(c + 8, hs->local_node);
		randombytes_buf(c + 12, 32); /* nonce_s; 44..47 reserved */
		mac(hs, "hora-v1-server", 48, c + 48);
		memcpy(out, c, HORA_NET_CHALLENGE_BYTES);
		*outlen = HORA_NET_CHALLENGE_BYTES;
		hs->state = S_S_WAIT_AUTH;
		return 0;
	}
	case S_C_WAIT_CHALLENGE: {
		if (hora_get32(in) == HORA_NET_MAGIC && in[5] == HS_T_REJECT)
			return fail(hs, -ECONNREFUSED, "peer refused the connection: %s",
				    reject_reason(in[6]));
		int rc = check_head(hs, in, HS_T_CHALLENGE, "CHALLENGE");
		if (rc)
			return rc;
		memcpy(hs->challenge, in, HORA_NET_CHALLENGE_BYTES);
		mac(hs, "hora-v1-server", 48, m);
		if (sodium_memcmp(m, in + 48, 32) != 0) {
			/* tell the server why we hang up: a REJECT in AUTH's size */
			reject(out, outlen, HORA_NET_REJ_AUTH);
			memset(out + HORA_NET_RESULT_BYTES, 0, HORA_NET_AUTH_BYTES - HORA_NET_RESULT_BYTES);
			*outlen = HORA_NET_AUTH_BYTES;
			return fail(hs, -EACCES, "authentication failed: the peer does not know the "
					       "cluster secret");
		}
		hs->peer_node = hora_get32(in + 8);
		uint8_t *a = out;
		memset(a, 0, HORA_NET_AUTH_BYTES);
		head(a, HS_T_AUTH);
		mac(hs, "hora-v1-client", HORA_NET_CHALLENGE_BYTES, a + 8);
		*outlen = HORA_NET_AUTH_BYTES;
		hs->state = S_C_WAIT_RESULT;
		return 0;
	}
	case S_S_WAIT_AUTH: {
		if (hora_get32(in) == HORA_NET_MAGIC && in[4] == HORA_NET_VERSION && in[5] == HS_T_REJECT)
			return fail(hs, -EACCES, "authentication failed: the peer could not verify this "
						 "side's proof (the two have different cluster secrets)");
		int rc = check_head(hs, in, HS_T_AUTH, "AUTH");
		if (rc) {
			reject(out, outlen, HORA_NET_REJ_MALFORMED);
			return rc;
		}
		mac(hs, "hora-v1-client", HORA_NET_CHALLENGE_BYTES, m);
		if (sodium_memcmp(m, in + 8, 32) != 0) {
			reject(out, outlen, HORA_NET_REJ_AUTH);
			return fail(hs, -EACCES, "authentication failed (wrong secret or replayed "
						 "handshake)");
		}
		memset(out, 0, HORA_NET_RESULT_BYTES);
		head(out, HS_T_OK);
		*outlen = HORA_NET_RESULT_BYTES;
		hs->state = S_DONE;
		return 1;
	}
	case S_C_WAIT_RESULT:
		if (hora_get32(in) == HORA_NET_MAGIC && in[5] == HS_T_REJECT)
			return fail(hs, -ECONNREFUSED, "peer refused the connection: %s",
				    reject_reason(in[6]));
		if (check_head(hs, in, HS_T_OK, "OK"))
			return -EBADMSG;
		hs->state = S_DONE;
		return 1;
	default:
		return fail(hs, -EINVAL, "handshake already finished");
	}
}

/* Read the secret file into key; 0 or -errno with the reason in why. What
 * is not a regular file is named for what it is; a mode that lets group or
 * others read it is a warning (deploy/README.md asks for 0600). */
static int read_secret_file(const char *file, uint8_t *key, size_t cap, size_t *n, char *why,
			    size_t whylen, char *warn, size_t warnlen)
{
	/* O_NONBLOCK: a FIFO named as the secret must not hang the open */
	int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		snprintf(why, whylen, "secret file %s: %s", file, strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		snprintf(why, whylen, "secret file %s: %s", file, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, whylen, "secret file %s is %s, not a regular file", file,
			 S_ISDIR(st.st_mode)    ? "a directory"
			 : S_ISFIFO(st.st_mode) ? "a FIFO"
			 : S_ISSOCK(st.st_mode) ? "a socket"
			 : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
								      : "something else");
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	if ((st.st_mode & 0077) && warn && warnlen)
		snprintf(warn, warnlen, "secret file %s has mode %04o: group or others may read it "
					"(use chmod 600 %s)", file, (unsigned)(st.st_mode & 07777), file);
	ssize_t r;
	while (*n < cap && (r = read(fd, key + *n, cap - *n)) > 0)
		*n += (size_t)r;
	uint8_t extra;
	int more = *n == cap && read(fd, &extra, 1) > 0;
	close(fd);
	if (more) {
		snprintf(why, whylen, "secret file %s is longer than %zu bytes", file, cap);
		return -EFBIG;
	}
	return 0;
}

int hora_net_secret_load(const char *file, const char *env_value, uint8_t *key, size_t cap,
			 char *why, size_t whylen, char *warn, size_t warnlen)
{
	size_t n = 0;
	if (warn && warnlen)
		warn[0] = 0;
	if (file && *file) {
		int rc = read_secret_file(file, key, cap, &n, why, whylen, warn, warnlen);
		if (rc)
			return rc;
	} else {
		if (!env_value || !*env_value)
			return snprintf(why, whylen, "no cluster secret: set cluster.secret_file or "
						     "HORA_SECRET"),
			       -ENOKEY;
		n = strlen(env_value);
		if (n > cap)
			return snprintf(why, whylen, "HORA_SECRET is longer than %zu bytes", cap),
			       -EFBIG;
		memcpy(key, env_value, n);
	}
	while (n && (key[n - 1] == '\n' || key[n - 1] == '\r'))
		n--;
	if (n < HORA_NET_SECRET_MIN)
		return snprintf(why, whylen, "%s%s is too short: %zu bytes, at least %d",
				file && *file ? "secret file " : "HORA_SECRET",
				file && *file ? file : "", n, HORA_NET_SECRET_MIN),
		       -EINVAL;
	return (int)n;
}
