/* msim.h - a deterministic discrete-event simulation of N members running
 * the real, unmodified membership state machine (net/membership/swim.c:
 * SWIM, its views and their agreement) in one process: datagrams with a
 * latency distribution and a loss rate, crashes (a silent host, or a killed
 * process whose host answers port unreachable), restarts and freezes. Time
 * is the simulation's (microseconds); every random draw, swim.c's own
 * included (libsodium's randombytes, replaced for the run), comes from one
 * seeded generator, so a run is a function of its arguments. Used by
 * `hora bench membership --simulate N` (membership_sim.c). */
#ifndef HORA_BENCH_MSIM_H
#define HORA_BENCH_MSIM_H

#include "net/membership/swim.h"

#include <stdbool.h>
#include <stdint.h>

struct msim_cfg {
	int n;              /* members */
	double loss;        /* probability a datagram is lost */
	double latency_ms;  /* mean one-way latency (half fixed, the rest uniform: 0.5-1.5 x) */
	uint64_t seed;
	struct hora_swim_cfg swim; /* timings; uid, self, secret, min_members set per member */
};

struct msim;

/* Make the simulation (members not started). NULL: out of memory or a bad
 * configuration (err says which). Replaces libsodium's random source for
 * the process (call before anything else uses libsodium). */
struct msim *msim_create(const struct msim_cfg *cfg, char *err, size_t errlen);
void msim_destroy(struct msim *m);

/* Member i starts (joining through member 0 unless it is member 0) at the
 * current time: a fresh process, a new uid. */
void msim_start(struct msim *m, int i);
/* Member i crashes now: its datagrams are lost from now on; with refuses,
 * its host answers port unreachable (a killed process), else nothing (a
 * host gone, a partition). */
void msim_crash(struct msim *m, int i, bool refuses);
bool msim_up(const struct msim *m, int i);
uint64_t msim_uid(const struct msim *m, int i);

/* Run until the simulated time reaches t_us. */
void msim_run_until(struct msim *m, int64_t t_us);
int64_t msim_now_us(const struct msim *m);

/* Member i's state machine (NULL when it never started). */
struct hora_swim *msim_swim(struct msim *m, int i);
/* Datagrams and bytes every member sent so far, lost ones included. */
void msim_traffic(const struct msim *m, uint64_t *msgs, uint64_t *bytes);

#endif
