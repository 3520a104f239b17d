/* gossip.h - decentralized training in the training loop (train.sync:
 * gossip, D-PSGD): no gradient allreduce; after every train.gossip.period
 * local steps each rank averages its parameters with the round's
 * neighbours of the topology (hora_neighbor_allreduce); at an epoch's end
 * the exact average x̄ (one allreduce) is what is evaluated, checkpointed
 * and, after the last epoch, the final model on every rank, and the
 * consensus distance ||x_i - x̄|| / ||x̄|| (mean and max over the ranks) is
 * measured. core/README.md "Gossip". */
#ifndef HORA_CORE_GOSSIP_H
#define HORA_CORE_GOSSIP_H

#include "hora.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct hora_gossip;

/* For nparams parameters on c (every rank: the same cfg and seed). 0,
 * -ENOMEM or -EINVAL (err says why). */
int hora_gossip_create(struct hora_comm *c, const struct hora_gossip_config *cfg, uint64_t seed,
		       size_t nparams, struct hora_gossip **out, char *err, size_t errlen);
void hora_gossip_destroy(struct hora_gossip *g);
/* Before local step `step` (counted from 1): when it ends a period, start
 * averaging params, x_t, with the round's neighbours in the background (the
 * forward/backward of the step runs meanwhile on x_t, which the caller
 * leaves unchanged until hora_gossip_end). 0 or the comm's code (err). */
int hora_gossip_begin(struct hora_gossip *g, const float *params, int64_t step, char *err, size_t errlen);
/* After the step's forward/backward: wait for the averaging and put W x_t
 * into params (the caller then applies the optimizer with the gradients
 * of x_t: x_{t+1} = W x_t - lr g(x_t), D-PSGD). Nothing started: nothing.
 * 0 or the comm's code (err). */
int hora_gossip_end(struct hora_gossip *g, float *params, char *err, size_t errlen);
/* params become x̄ (x_i kept aside) and *mean / *max the consensus
 * distance before it. 0 or the comm's code (err). */
int hora_gossip_average_begin(struct hora_gossip *g, float *params, double *mean, double *max, char *err,
			      size_t errlen);
/* x_i back into params (after evaluation and the checkpoint). */
void hora_gossip_average_end(struct hora_gossip *g, float *params);
/* The consensus distance of params, left as they are (mid-epoch). */
int hora_gossip_consensus(struct hora_gossip *g, const float *params, double *mean, double *max, char *err,
			  size_t errlen);

/* ---- train.gossip.mode: async (gossip_async.c) ------------------------------------ */

struct run;
struct hora_gasync;
struct hora_model_stats;
/* The async state of r's rank (its engine opens at the first epoch). 0 or
 * -ENOMEM (r->err). */
int hora_gasync_create(struct run *r, struct hora_gasync **out);
void hora_gasync_destroy(struct hora_gasync *g);
/* Epoch r->epoch: local steps and exchanges until the job has trained
 * epoch x the training set's samples, then the exchange in flight finished
 * and the counters made exact (one allreduce). 0 or a code (r->err). */
int hora_gasync_steps(struct run *r, struct hora_gasync *g, struct hora_model_stats *st);
/* One line: steps, samples and their rate over train_s seconds,
 * exchanges, the peers asked and their reply times. */
void hora_gasync_report(const struct hora_gasync *g, double train_s, FILE *f);

#endif
