/* join.c - joining through the seeds, and what a member with another
 * cluster secret answers.
 *
 * A joiner sends JOIN to its seeds, round-robin every join_retry_ms, until
 * something authenticated arrives. A member whose MAC check a JOIN fails
 * answers it with a REFUSE (net/MEMBERSHIP.md "Another secret"): 60 bytes,
 * unauthenticated (the two share no key), echoing the JOIN's sender uid
 * and sequence number and nothing else; at most one every 50 ms, and
 * smaller than the JOIN it answers, so it amplifies nothing and tells
 * nothing but that a member with another secret listens there. The joiner
 * counts a REFUSE only from a seed's address, echoing its last JOIN to that
 * seed; once every seed has refused REFUSE_PROOF JOINs and nothing
 * authenticated came from anyone, hora_swim_secret_refused says so (the
 * caller stops: a wrong secret is not mended by waiting). Port-unreachable
 * answers to JOINs are counted per seed too, for messages.
 *
 * Not here: the answer to an authenticated JOIN (the table, swim.c).
 */
#include "net/membership/swim_internal.h"
#include "net/transport/endian.h"

#include <stdlib.h>
#include <string.h>

#define REFUSE_PROOF 3       /* REFUSEs from every seed before the secret is called wrong */
#define REFUSE_EVERY_MS 50   /* a member sends at most one REFUSE this often */

void hora_swim_join_seeds(struct hora_swim *s, int64_t now, const struct hora_swim_addr *seeds, int n)
{
	free(s->seeds);
	s->seeds = NULL;
	s->nseeds = 0;
	/* skip ourselves among the seeds */
	if (n > 0 && (s->seeds = calloc((size_t)n, sizeof(*s->seeds))))
		for (int i = 0; i < n; i++)
			if (seeds[i].ip != s->cfg.self.ip || seeds[i].port != s->cfg.self.port)
				s->seeds[s->nseeds++].addr = seeds[i];
	s->joined = s->nseeds == 0;
	s->next_join = now;
	s->join_start = now;
}

void hora_swim_join_tick(struct hora_swim *s, int64_t now)
{
	if (s->joined || !s->nseeds || now < s->next_join)
		return;
	struct seed *sd = &s->seeds[s->seed_next++ % s->nseeds];
	sd->join_seq = hora_swim_send_self(s, T_JOIN, sd->addr);
	s->next_join = now + s->cfg.join_retry_ms;
}

int64_t hora_swim_join_next(const struct hora_swim *s, int64_t next)
{
	return !s->joined && s->nseeds && s->next_join < next ? s->next_join : next;
}

static struct seed *seed_at(struct hora_swim *s, struct hora_swim_addr a)
{
	for (int i = 0; i < s->nseeds; i++)
		if (s->seeds[i].addr.ip == a.ip && s->seeds[i].addr.port == a.port)
			return &s->seeds[i];
	return NULL;
}

bool hora_swim_join_refusal(struct hora_swim *s, const uint8_t *b, size_t len, struct hora_swim_addr from)
{
	if (len != HDR + MAC || hora_get32(b) != MAGIC || b[4] != VERSION || b[5] != T_REFUSE)
		return false;
	s->st.refusals_heard++;
	struct seed *sd = seed_at(s, from);
	if (s->joined || !sd || !sd->join_seq || hora_get64(b + 16) != sd->join_seq ||
	    hora_get64(b + 32) != s->cfg.uid)
		return true; /* not an answer to our last JOIN to a seed */
	sd->join_seq = 0; /* one JOIN, one refusal */
	sd->wrong_secret++;
	bool all = !s->heard_auth;
	for (int i = 0; all && i < s->nseeds; i++)
		all = s->seeds[i].wrong_secret >= REFUSE_PROOF;
	s->secret_refused |= all;
	return true;
}

void hora_swim_join_bad_mac(struct hora_swim *s, int64_t now, struct hora_swim_addr from,
			    const uint8_t *b, size_t len)
{
	/* only a JOIN's shape: its sender's update and nothing else */
	if (s->left || len != HDR + UPD + MAC || b[5] != T_JOIN || hora_get16(b + 6) != 1 ||
	    hora_get32(b + 40) != 0 || (s->refuse_sent && now - s->refuse_sent < REFUSE_EVERY_MS))
		return;
	uint8_t r[HDR + MAC] = {0};
	hora_put32(r, MAGIC);
	r[4] = VERSION;
	r[5] = T_REFUSE;
	memcpy(r + 16, b + 16, 8); /* the JOIN's sequence number */
	memcpy(r + 32, b + 8, 8);  /* and its sender's uid, in aux64 */
	hora_swim_out_push(s, from, r, sizeof(r));
	s->refuse_sent = now;
	s->st.refusals_sent++;
}

void hora_swim_join_unreachable(struct hora_swim *s, struct hora_swim_addr to)
{
	struct seed *sd = seed_at(s, to);
	if (sd && !s->joined)
		sd->unreachable++;
}

int hora_swim_seeds(const struct hora_swim *s, struct hora_swim_seed *out, int cap)
{
	int n = s->nseeds < cap ? s->nseeds : cap;
	for (int i = 0; i < n; i++)
		out[i] = (struct hora_swim_seed){.addr = s->seeds[i].addr,
						 .unreachable = s->seeds[i].unreachable,
						 .wrong_secret = s->seeds[i].wrong_secret};
	return n;
}

bool hora_swim_secret_refused(const struct hora_swim *s)
{
	return s->secret_refused;
}
