/* swim_sim.h - a simulated network for the SWIM + views state machine
 * (net/membership/swim.c, unmodified): in-memory datagram delivery, a
 * virtual clock in 5 ms steps, drop rules for crashes and partitions, and
 * frozen members whose datagrams wait in their socket until they resume.
 * Included by one test file each (its state is static). */
#ifndef HORA_TESTS_SWIM_SIM_H
#define HORA_TESTS_SWIM_SIM_H

#include "net/membership/swim.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>

#define KEY "swim-test-secret-0123456789"
#define MAXN 16

static struct hora_swim *sw[MAXN];
static int n;
static int64_t now;
static bool down[MAXN];      /* crashed: neither sends nor receives */
static bool closed[MAXN];    /* crashed on a host that is up: its port answers unreachable */
static int side[MAXN];       /* partition side; messages cross only if equal */
static bool severed[MAXN][MAXN]; /* a link down both ways (a partition healed host by host) */
static int late[MAXN];       /* timers run only this late after each 200 ms boundary */
static int refusal_proves = 1; /* cfg.refusal_proves_death of the members mk makes (stop: back to 1) */
static bool frozen[MAXN];    /* SIGSTOP: runs nothing; datagrams to it wait in its socket */
static struct {              /* the socket buffers of frozen members */
	int to, from;
	struct hora_swim_out o;
} held[4096];
static int nheld;

static inline struct hora_swim_addr addr_of(int i)
{
	return (struct hora_swim_addr){.ip = 0x0100007f, .port = (uint16_t)(9000 + i)};
}

static inline struct hora_swim *mk(int i, const char *key, int min_members, int role)
{
	struct hora_swim_cfg c;
	hora_swim_cfg_default(&c);
	c.uid = 1000 + (uint64_t)i;
	c.self = addr_of(i);
	c.role = role;
	c.min_members = min_members;
	c.secret = (const uint8_t *)key;
	c.secret_len = strlen(key);
	c.refusal_proves_death = refusal_proves;
	return hora_swim_create(&c);
}

static inline void deliver(void)
{
	for (int i = 0; i < n; i++) {
		struct hora_swim_out o;
		while (sw[i] && hora_swim_pop(sw[i], &o)) {
			int j = o.to.port - 9000;
			if (j >= 0 && j < n && closed[j] && !down[i] && !closed[i] && side[i] == side[j]) {
				hora_swim_refused(sw[i], now, o.to); /* the kernel's ICMP */
				continue;
			}
			if (j < 0 || j >= n || !sw[j] || down[i] || down[j] || closed[i] || closed[j] ||
			    side[i] != side[j] || severed[i][j] || severed[j][i])
				continue;
			if (frozen[j]) {
				if (nheld < (int)(sizeof(held) / sizeof(held[0])))
					held[nheld].to = j, held[nheld].from = i, held[nheld++].o = o;
				continue;
			}
			hora_swim_input(sw[j], now, addr_of(i), o.buf, o.len);
		}
	}
}

static inline void run_ms(int ms)
{
	for (int t = 0; t < ms; t += 5) {
		now += 5;
		for (int i = 0; i < n; i++)
			if (sw[i] && !down[i] && !closed[i] && !frozen[i] && now % 200 >= late[i])
				hora_swim_tick(sw[i], now);
		deliver();
		deliver();
	}
}

/* SIGCONT of member j: what waited in its socket is read first (then its
 * timers run, at the next 5 ms step) */
static inline void thaw(int j)
{
	frozen[j] = false;
	int k = 0;
	for (int h = 0; h < nheld; h++) {
		if (held[h].to == j)
			hora_swim_input(sw[j], now, addr_of(held[h].from), held[h].o.buf, held[h].o.len);
		else
			held[k++] = held[h];
	}
	nheld = k;
}

/* The same with its timer first: a late tick that runs before the input
 * that waited with it (both ready when the loop wakes) */
static inline void thaw_tick_first(int j)
{
	hora_swim_tick(sw[j], now);
	thaw(j);
}

static inline void view_of(int i, struct hora_swim_view *v, int *rank, bool *paused)
{
	char why[128];
	hora_swim_view_get(sw[i], v, rank, paused, why, sizeof(why));
}

static inline void start(int count, int min_members)
{
	n = count;
	now = 1000;
	memset(down, 0, sizeof(down));
	memset(closed, 0, sizeof(closed));
	memset(side, 0, sizeof(side));
	memset(late, 0, sizeof(late));
	memset(severed, 0, sizeof(severed));
	memset(frozen, 0, sizeof(frozen));
	nheld = 0;
	struct hora_swim_addr seed = addr_of(0);
	for (int i = 0; i < n; i++) {
		sw[i] = mk(i, KEY, min_members, HORA_SWIM_WORKER);
		cr_assert_not_null(sw[i]);
		hora_swim_join(sw[i], now, i ? &seed : NULL, i ? 1 : 0);
	}
}

static inline void stop(void)
{
	for (int i = 0; i < n; i++)
		hora_swim_destroy(sw[i]);
	n = 0;
	refusal_proves = 1;
}

/* every live member has installed the same view with `members` members */
static inline uint64_t agreed(int members)
{
	struct hora_swim_view v0 = {0};
	bool first = true;
	for (int i = 0; i < n; i++) {
		if (down[i] || closed[i] || frozen[i] || !sw[i])
			continue;
		struct hora_swim_view v;
		int rank;
		bool paused;
		view_of(i, &v, &rank, &paused);
		if (v.n != members || paused || rank < 0)
			return 0;
		if (first)
			v0 = v, first = false;
		else if (v.id != v0.id || memcmp(v.uids, v0.uids, sizeof(uint64_t) * (size_t)v.n))
			return 0;
	}
	return v0.id;
}

static inline int64_t until_agreed(int members, int max_ms)
{
	int64_t t0 = now;
	while (now - t0 < max_ms) {
		if (agreed(members))
			return now - t0;
		run_ms(10);
	}
	return -1;
}

#endif
