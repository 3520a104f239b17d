/* fuzz_swim.c - libFuzzer target for the membership datagram parser and
 * state machine: arbitrary datagrams (split by the first byte into several)
 * fed to a member; nothing may crash, and without the secret nothing may
 * change its table or view. A second pass signs each datagram with the
 * secret so the parser behind the MAC check is reached too, by a member
 * with a view and by one under the first-view rule that has none, each then
 * told that the sender's port answered unreachable. A joiner whose seed
 * is the sender reads them unsigned too (a REFUSE is unauthenticated): it
 * may count refusals, never join or learn a member; and whatever a member
 * answers to an unsigned datagram (a REFUSE to a JOIN) is no larger. */
#include "net/membership/swim.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t key[] = "fuzz-membership-secret-0123456789";

static struct hora_swim *mk(uint64_t uid, int first_view_workers)
{
	struct hora_swim_cfg c;
	hora_swim_cfg_default(&c);
	c.uid = uid;
	c.first_view_workers = first_view_workers;
	c.self = (struct hora_swim_addr){0x0100007f, 9000};
	c.secret = key;
	c.secret_len = sizeof(key) - 1;
	return hora_swim_create(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* u: worker 0 of a 2-worker job, alone: no view yet */
	struct hora_swim *s = mk(42, 0), *t = mk(42, 0), *u = mk(1ull << 40 | 42, 2);
	struct hora_swim_addr from = {0x0100007f, 9001};
	hora_swim_join(s, 1000, NULL, 0);
	hora_swim_join(t, 1000, NULL, 0);
	hora_swim_join(u, 1000, NULL, 0);
	/* unsigned: must be ignored */
	hora_swim_input(s, 1001, from, data, size);
	struct hora_swim_member m[4];
	if (hora_swim_members(s, m, 4) != 1)
		abort(); /* a datagram without the MAC changed the table */
	struct hora_swim_out ans;
	while (hora_swim_pop(s, &ans))
		if (ans.len > size)
			abort(); /* an answer larger than what an unauthenticated sender sent */
	struct hora_swim *j = mk(2ull << 40 | 7, 2);
	hora_swim_join(j, 1000, &from, 1);
	for (int i = 0; i < 4; i++)
		hora_swim_input(j, 1001 + i, from, data, size);
	if (hora_swim_joined(j) || hora_swim_members(j, m, 4) != 1)
		abort(); /* an unsigned datagram let a joiner in */
	hora_swim_destroy(j);
	/* signed: the parser behind the MAC */
	if (size >= 16 && size <= 4096) {
		uint8_t buf[4096];
		memcpy(buf, data, size);
		uint8_t mac[32];
		crypto_auth_hmacsha256_state st;
		crypto_auth_hmacsha256_init(&st, key, sizeof(key) - 1);
		crypto_auth_hmacsha256_update(&st, buf, size - 16);
		crypto_auth_hmacsha256_final(&st, mac);
		memcpy(buf + size - 16, mac, 16);
		struct hora_swim *to[2] = {t, u};
		for (int i = 0; i < 2; i++) {
			hora_swim_input(to[i], 1002, from, buf, size);
			hora_swim_refused(to[i], 1003, from); /* whatever it learned is gone */
			hora_swim_tick(to[i], 1500);
			struct hora_swim_out o;
			while (hora_swim_pop(to[i], &o))
				;
		}
	}
	hora_swim_destroy(s);
	hora_swim_destroy(t);
	hora_swim_destroy(u);
	return 0;
}
