/* balance.h - train.balance: the global batch split by the ranks' measured
 * speeds (balance.c says how). */
#ifndef HORA_CORE_BALANCE_H
#define HORA_CORE_BALANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hora_comm;
struct hora_balance;

/* about this much training between two agreements on the weights, and
 * at least / at most this many steps */
#define HORA_BALANCE_WINDOW_S 0.05
#define HORA_BALANCE_MIN_STEPS 16
#define HORA_BALANCE_MAX_STEPS 4096
/* The dead band (speed shares all within it of even: even weights) is
 * what an uneven split costs a step, as a fraction of the step: a pass
 * over the gradients (each rank's scaled by its share), reckoned at
 * HORA_BALANCE_PASS_BPS, against the slowest rank's step at even shares
 * (hora_balance_band); never under HORA_BALANCE_MIN_BAND, which noise
 * does not cross. */
#define HORA_BALANCE_PASS_BPS 20e9
#define HORA_BALANCE_MIN_BAND 0.01

/* Even weights over size ranks whose gradients are grad_bytes. -ENOMEM,
 * -EINVAL. */
int hora_balance_create(int size, size_t grad_bytes, struct hora_balance **out);
void hora_balance_destroy(struct hora_balance *b);
/* This rank spent seconds on the forward/backward of samples samples. */
void hora_balance_record(struct hora_balance *b, double seconds, int samples);
/* Whether step (the global step count) is an agreement's (the same on
 * every rank). */
bool hora_balance_due(const struct hora_balance *b, int64_t step);
/* Collective (every rank at the same step): the ranks' seconds per sample
 * since the last agreement allgathered, the weights updated alike on every
 * rank, and the next agreement's step set from them (about
 * HORA_BALANCE_WINDOW_S of the slowest rank's steps of batch samples in
 * all). 0 or the allgather's code. */
int hora_balance_agree(struct hora_balance *b, struct hora_comm *c, int64_t step, int64_t batch);
/* The weights updated from the ranks' seconds per sample t[0..size), for
 * global batches of batch samples (what an agreement does with its
 * allgather; tests call it directly). */
void hora_balance_update(struct hora_balance *b, const double *t, int64_t batch);
/* The dead band for seconds per sample t[0..size) and global batches of
 * batch samples (pure): max(HORA_BALANCE_MIN_BAND, the gradient pass's
 * seconds / the slowest rank's seconds a step at even shares). */
double hora_balance_band(const struct hora_balance *b, const double *t, int64_t batch);
/* Rank r's share of a global batch of total samples: its first sample
 * (from 0) and *n samples; the shares of ranks 0..size-1 tile [0, total). */
int64_t hora_balance_share(const struct hora_balance *b, int64_t total, int r, int *n);
/* The weights' update from seconds per sample t[0..size) (pure, for tests):
 * halfway to the speed shares (to even when every speed share is within
 * band of it, and exactly even once close), each within [0.75, 1.25] /
 * size, sum 1; kept when some t is not a positive finite number. */
void hora_balance_weights(double *w, const double *t, int size, double band);
/* Agreements so far. */
int64_t hora_balance_agreements(const struct hora_balance *b);

#endif
