/* test_frame.c - frame header encode/decode limits, CRC32C, and the
 * handshake state machine driven by hand (good, wrong secret, replay,
 * version mismatch, malformed). */
#include "net_helpers.h"
#include "../helpers.h"

#include <errno.h>

static struct hora_net_hdr good(void)
{
	return (struct hora_net_hdr){.magic = HORA_NET_MAGIC, .version = HORA_NET_VERSION,
				     .type = HORA_NET_T_DATA, .view = 3, .seq = 17,
				     .msg_len = 1000, .offset = 200, .length = 300};
}

static int decode(struct hora_net_hdr h, char *why)
{
	uint8_t b[HORA_NET_HDR_BYTES];
	struct hora_net_hdr out;
	hora_net_hdr_encode(&h, b);
	return hora_net_hdr_decode(b, 1 << 20, &out, why, 200);
}

Test(net_frame, roundtrip)
{
	struct hora_net_hdr h = good(), out;
	h.flags = HORA_NET_F_CRC;
	h.crc32c = 0xdeadbeef;
	uint8_t b[HORA_NET_HDR_BYTES];
	char why[200];
	hora_net_hdr_encode(&h, b);
	cr_assert_eq(b[0], 0x41); /* little-endian "HORA" */
	cr_assert_eq(hora_net_hdr_decode(b, 1 << 20, &out, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(memcmp(&h, &out, sizeof(h)), 0);
}

Test(net_frame, rejects_bad_fields)
{
	char why[200];
	struct hora_net_hdr h = good();
	h.magic = 0x12345678;
	cr_assert_eq(decode(h, why), -EBADMSG);
	cr_assert(strstr(why, "bad frame magic 0x12345678"), "%s", why);
	h = good();
	h.version = 3;
	cr_assert_eq(decode(h, why), -EPROTONOSUPPORT);
	cr_assert(strstr(why, "protocol version 3 not supported (this is 1)"), "%s", why);
	h = good();
	h.type = 9;
	cr_assert_eq(decode(h, why), -EPROTO);
	cr_assert(strstr(why, "unknown frame type 9"), "%s", why);
	h = good();
	h.flags = 0x80;
	cr_assert_eq(decode(h, why), -EPROTO);
	h = good();
	h.length = 1ull << 63; /* a length of 2^63 */
	h.msg_len = 1ull << 63;
	h.offset = 0;
	cr_assert_eq(decode(h, why), -EMSGSIZE);
	cr_assert(strstr(why, "frame length 9223372036854775808 exceeds the limit 1048576"), "%s",
		  why);
	h = good();
	h.offset = 900; /* 900 + 300 > 1000 */
	cr_assert_eq(decode(h, why), -EBADMSG);
	cr_assert(strstr(why, "outside its message"), "%s", why);
	h = good();
	h.offset = UINT64_MAX; /* overflow attempt */
	cr_assert_eq(decode(h, why), -EBADMSG);
	h = good();
	h.type = HORA_NET_T_CLOSE;
	cr_assert_eq(decode(h, why), -EBADMSG);
}

Test(net_frame, crc32c_known_answer)
{
	/* RFC 3720 B.4: 32 bytes of zeros -> 0x8a9136aa; "123456789" -> 0xe3069283 */
	uint8_t z[32] = {0};
	cr_assert_eq(hora_net_crc32c(0, z, 32), 0x8a9136aau);
	cr_assert_eq(hora_net_crc32c(0, "123456789", 9), 0xe3069283u);
	/* incremental == whole */
	uint8_t buf[1000];
	tn_fill(buf, sizeof(buf), 5);
	uint32_t whole = hora_net_crc32c(0, buf, 1000);
	cr_assert_eq(hora_net_crc32c(hora_net_crc32c(0, buf, 333), buf + 333, 667), whole);
}

/* Drive client and server state machines against each other in memory. */
static int hs_pair(const char *ks, const char *kc, struct hora_net_hs *s, struct hora_net_hs *c)
{
	uint8_t a[HORA_NET_HS_MAX_OUT], b[HORA_NET_HS_MAX_OUT];
	size_t na, nb;
	cr_assert_eq(hora_net_hs_server_start(s, (const uint8_t *)ks, strlen(ks), 1), 0);
	cr_assert_eq(hora_net_hs_client_start(c, (const uint8_t *)kc, strlen(kc), 2, 77, 0, 1, a, &na), 0);
	int rs = hora_net_hs_input(s, a, na, b, &nb); /* HELLO -> CHALLENGE */
	if (rs < 0)
		return rs;
	int rc = hora_net_hs_input(c, b, nb, a, &na); /* CHALLENGE -> AUTH */
	if (rc < 0)
		return rc;
	rs = hora_net_hs_input(s, a, na, b, &nb); /* AUTH -> OK / REJECT */
	int rc2 = hora_net_hs_input(c, b, nb, a, &na);
	if (rs < 0)
		return rs;
	return rc2;
}

Test(net_handshake, good_secret_both_sides_done)
{
	struct hora_net_hs s, c;
	cr_assert_eq(hs_pair(TEST_SECRET, TEST_SECRET, &s, &c), 1);
	cr_assert_eq(hora_net_hs_want(&s), 0);
	cr_assert_eq(s.peer_node, 2);
	cr_assert_eq(c.peer_node, 1);
	cr_assert_eq(s.session, 77);
}

Test(net_handshake, wrong_secret_fails_on_client_first)
{
	struct hora_net_hs s, c;
	/* the client checks the server's proof first: a server with another
	 * secret is caught before the client reveals anything */
	cr_assert_eq(hs_pair(TEST_SECRET, "another-secret-of-some-length", &s, &c), -EACCES);
	cr_assert(strstr(c.why, "does not know the cluster secret"), "%s", c.why);
}

/* Regression (issue 12 section 5): the client hung up without a word, so the
 * server, whose secret may be the right one, could only report a closed
 * connection; it now reads a REJECT in AUTH's size and says why. */
Test(net_handshake, client_that_cannot_verify_the_server_tells_it_why)
{
	struct hora_net_hs s, c;
	uint8_t a[HORA_NET_HS_MAX_OUT], b[HORA_NET_HS_MAX_OUT];
	size_t na, nb;
	hora_net_hs_server_start(&s, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	hora_net_hs_client_start(&c, (const uint8_t *)"another-secret-of-some-length", 29, 2, 77, 0, 1, a,
				 &na);
	cr_assert_eq(hora_net_hs_input(&s, a, na, b, &nb), 0);
	cr_assert_eq(hora_net_hs_input(&c, b, nb, a, &na), -EACCES);
	cr_assert_eq(na, HORA_NET_AUTH_BYTES, "the client sent no REJECT (%zu bytes)", na);
	cr_assert_eq(hora_net_hs_input(&s, a, na, b, &nb), -EACCES);
	cr_assert(strstr(s.why, "could not verify") && strstr(s.why, "authentication failed"), "%s",
		  s.why);
}

Test(net_handshake, client_with_wrong_secret_is_rejected_by_server)
{
	struct hora_net_hs s, c;
	uint8_t a[HORA_NET_HS_MAX_OUT], b[HORA_NET_HS_MAX_OUT];
	size_t na, nb;
	hora_net_hs_server_start(&s, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	hora_net_hs_client_start(&c, (const uint8_t *)"wrong-secret-wrong-secret", 25, 2, 1, 0, 1, a, &na);
	cr_assert_eq(hora_net_hs_input(&s, a, na, b, &nb), 0);
	/* a forged AUTH (the client cannot verify the server, and just answers) */
	uint8_t auth[HORA_NET_AUTH_BYTES] = {0x41, 0x52, 0x4f, 0x48, 1, 0x12};
	cr_assert_eq(hora_net_hs_input(&s, auth, sizeof(auth), b, &nb), -EACCES);
	cr_assert_eq(nb, HORA_NET_RESULT_BYTES); /* REJECT goes back */
	cr_assert(strstr(s.why, "authentication failed"), "%s", s.why);
}

Test(net_handshake, replayed_auth_is_rejected)
{
	struct hora_net_hs s, c, s2;
	uint8_t a[HORA_NET_HS_MAX_OUT], b[HORA_NET_HS_MAX_OUT], hello[HORA_NET_HELLO_BYTES],
		auth[HORA_NET_AUTH_BYTES];
	size_t na, nb;
	/* a good exchange, recorded */
	hora_net_hs_server_start(&s, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	hora_net_hs_client_start(&c, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 2, 5, 0, 1, a, &na);
	memcpy(hello, a, na);
	hora_net_hs_input(&s, a, na, b, &nb);
	hora_net_hs_input(&c, b, nb, a, &na);
	memcpy(auth, a, na);
	cr_assert_eq(hora_net_hs_input(&s, a, na, b, &nb), 1);
	/* replay HELLO and AUTH to a new server session: its nonce is fresh */
	hora_net_hs_server_start(&s2, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	cr_assert_eq(hora_net_hs_input(&s2, hello, sizeof(hello), b, &nb), 0);
	cr_assert_eq(hora_net_hs_input(&s2, auth, sizeof(auth), b, &nb), -EACCES);
	cr_assert(strstr(s2.why, "replayed"), "%s", s2.why);
}

Test(net_handshake, version_mismatch_named_and_rejected)
{
	struct hora_net_hs s, c;
	uint8_t a[HORA_NET_HS_MAX_OUT], b[HORA_NET_HS_MAX_OUT];
	size_t na, nb;
	hora_net_hs_server_start(&s, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	hora_net_hs_client_start(&c, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 2, 5, 0, 1, a, &na);
	a[4] = 3; /* a version-3 client */
	cr_assert_eq(hora_net_hs_input(&s, a, na, b, &nb), -EPROTONOSUPPORT);
	cr_assert(strstr(s.why, "protocol version 3 not supported (this is 1)"), "%s", s.why);
	/* the client learns why */
	uint8_t pad[HORA_NET_CHALLENGE_BYTES] = {0};
	memcpy(pad, b, nb);
	cr_assert_eq(hora_net_hs_input(&c, pad, sizeof(pad), a, &na), -ECONNREFUSED);
	cr_assert(strstr(c.why, "protocol version not supported"), "%s", c.why);
}

Test(net_handshake, garbage_and_bad_stripes)
{
	struct hora_net_hs s;
	uint8_t g[HORA_NET_HELLO_BYTES], b[HORA_NET_HS_MAX_OUT];
	size_t nb;
	tn_fill(g, sizeof(g), 42);
	hora_net_hs_server_start(&s, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	cr_assert_eq(hora_net_hs_input(&s, g, sizeof(g), b, &nb), -EBADMSG);
	cr_assert(strstr(s.why, "not a hora peer"), "%s", s.why);
	struct hora_net_hs c;
	hora_net_hs_client_start(&c, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 2, 5, 3, 2, g, &nb);
	hora_net_hs_server_start(&s, (const uint8_t *)TEST_SECRET, strlen(TEST_SECRET), 1);
	cr_assert_eq(hora_net_hs_input(&s, g, HORA_NET_HELLO_BYTES, b, &nb), -EBADMSG);
	cr_assert(strstr(s.why, "stripe 3 of 2"), "%s", s.why);
	/* short secrets are refused */
	cr_assert_eq(hora_net_hs_server_start(&s, (const uint8_t *)"short", 5, 1), -EINVAL);
}

Test(net_handshake, secret_from_file_or_env)
{
	uint8_t k[HORA_NET_SECRET_MAX];
	char why[256] = "", warn[320] = "x";
	int fd;
	char *path = th_tmpfile("hora-secret", &fd); /* mode 0600 */
	cr_assert(write(fd, "file-secret-0123456789\n", 23) == 23);
	close(fd);
	cr_assert_eq(hora_net_secret_load(path, "ignored-when-a-file-is-named", k, sizeof(k), why,
					  sizeof(why), warn, sizeof(warn)), 22);
	cr_assert_eq(memcmp(k, "file-secret-0123456789", 22), 0);
	cr_assert_str_empty(warn, "mode 0600 warned: %s", warn);
	unlink(path);
	cr_assert_lt(hora_net_secret_load(path, NULL, k, sizeof(k), why, sizeof(why), NULL, 0), 0);
	cr_assert(strstr(why, "No such file"), "%s", why);
	/* the environment's value comes from the caller: the library reads none */
	setenv("HORA_SECRET", "what-the-library-must-not-read", 1);
	cr_assert_eq(hora_net_secret_load(NULL, "env-secret-abcdefghijk", k, sizeof(k), why, sizeof(why),
					  NULL, 0), 22);
	cr_assert_eq(memcmp(k, "env-secret-abcdefghijk", 22), 0);
	cr_assert_eq(hora_net_secret_load(NULL, "short", k, sizeof(k), why, sizeof(why), NULL, 0), -EINVAL);
	cr_assert(strstr(why, "too short"), "%s", why);
	cr_assert_eq(hora_net_secret_load("", NULL, k, sizeof(k), why, sizeof(why), NULL, 0), -ENOKEY);
	unsetenv("HORA_SECRET");
	free(path);
}

/* Regression (issue 12 section 5): a directory named as the secret file was
 * reported as "too short: 0 bytes". */
Test(net_handshake, a_directory_as_secret_file_is_named_a_directory)
{
	uint8_t k[HORA_NET_SECRET_MAX];
	char why[256] = "";
	char dir[] = "/tmp/hora-secret-dir-XXXXXX";
	cr_assert(mkdtemp(dir));
	int rc = hora_net_secret_load(dir, NULL, k, sizeof(k), why, sizeof(why), NULL, 0);
	rmdir(dir);
	cr_assert_eq(rc, -EISDIR, "rc %d: %s", rc, why);
	cr_assert(strstr(why, dir) && strstr(why, "is a directory"), "%s", why);
	cr_assert(!strstr(why, "too short"), "%s", why);
	/* a FIFO neither hangs the open nor passes for an empty file */
	char fifo[] = "/tmp/hora-secret-fifo-XXXXXX";
	int fd = mkstemp(fifo);
	close(fd);
	unlink(fifo);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	rc = hora_net_secret_load(fifo, NULL, k, sizeof(k), why, sizeof(why), NULL, 0);
	unlink(fifo);
	cr_assert_eq(rc, -EINVAL, "rc %d: %s", rc, why);
	cr_assert(strstr(why, "is a FIFO, not a regular file"), "%s", why);
}

/* Regression (issue 12 section 5): a secret file readable by group or
 * others was used without a word although deploy/README.md asks for 0600;
 * the warning goes back to the caller (the library prints nothing). */
Test(net_handshake, a_secret_file_others_may_read_is_warned_about)
{
	uint8_t k[HORA_NET_SECRET_MAX];
	char why[256] = "", warn[320] = "";
	int fd;
	char *path = th_tmpfile("hora-secret", &fd);
	cr_assert(write(fd, "file-secret-0123456789\n", 23) == 23);
	close(fd);
	cr_assert_eq(chmod(path, 0644), 0);
	cr_assert_eq(hora_net_secret_load(path, NULL, k, sizeof(k), why, sizeof(why), warn, sizeof(warn)),
		     22, "%s", why);
	cr_assert(strstr(warn, path) && strstr(warn, "mode 0644"), "no warning naming the file and mode: '%s'",
		  warn);
	cr_assert_eq(chmod(path, 0640), 0); /* group-readable too */
	cr_assert_eq(hora_net_secret_load(path, NULL, k, sizeof(k), why, sizeof(why), warn, sizeof(warn)),
		     22, "%s", why);
	cr_assert(strstr(warn, "mode 0640"), "'%s'", warn);
	unlink(path);
	free(path);
}
