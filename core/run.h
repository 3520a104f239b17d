/* run.h - one training job on one rank (internal to core/train.c and
 * core/elastic.c, the commits and re-forms of elastic training). */
#ifndef HORA_CORE_RUN_H
#define HORA_CORE_RUN_H

#include "distopt.h"
#include "hora.h"
#include "trainer.h"

#include <stdbool.h>
#include <stdio.h>

struct hora_timeline;
struct hora_elastic;

struct progress {
	int bar; /* draw a bar (terminal) */
	int epoch, epochs;
	int64_t steps;
	double t0, last_draw;
};

/* One job on one rank: what hora_train_run_comm's steps share. */
struct run {
	struct hora_comm *c;
	const struct hora_train_config *cfg;
	char *err;
	size_t errlen;
	int rank, size;
	bool several; /* a communicator of more than one rank */
	bool talk;    /* rank 0 prints */
	struct hora_dataset train, test;
	int classes;
	struct hora_trainer tr;
	float *grads_plain; /* the trainer's own gradient buffer; tr.grads is it or a
			       region of hora_comm_mem_alloc (train.c: grads_region) */
	struct hora_dist_optim *dopt; /* gradients averaged across ranks (NULL: not) */
	struct hora_balance *bal;     /* train.balance: shares by speed (NULL: even) */
	struct hora_gossip *gossip;   /* train.sync: gossip: parameters averaged with neighbours */
	struct hora_gasync *gasync;   /* and train.gossip.mode: async (gossip_async.c) */
	struct hora_timeline *tl;
	int64_t *order; /* this epoch's shuffle of the training set */
	FILE *mf;       /* rank 0's metrics file */
	int metrics_last; /* the last epoch whose line it holds (a rollback does not write it twice) */
	int metrics_errno; /* rank 0 could not open its metrics file (the job agreement stops
			      every rank with it) */
	bool metrics_fresh; /* a job that does not resume, before its first epoch's end: rank 0
			       empties its metrics file before the first line */
	struct progress pg;
	int first_epoch;
	int64_t step, steps_per_epoch, total, global_bs;
	int64_t samples_trained; /* this rank's shares so far */
	uint64_t rng; /* the shuffle's state: the same on every rank */
	struct hora_epoch_metrics m;
	/* where training is: epoch, samples of it trained (every rank's), the
	 * shuffle's state before its shuffle, and which epoch order[] holds */
	int epoch;
	int64_t pos;
	uint64_t rng_epoch;
	int order_of;
	int bar; /* rank 0's progress-bar choice */
	bool duty_failed; /* rank 0's metrics or checkpoint failed, every rank told: the job
			     stops on every rank (elastic: no re-form, no worker was lost) */
	/* elastic training (elastic.c) */
	bool elastic;
	int n0;                       /* workers at the start (batch: global keeps n0 x batch) */
	struct hora_model_stats sums; /* this epoch's training sums over ranks up to the last commit */
	struct hora_elastic *es;
	FILE *samples;                /* the sample-log test hook (NULL: off) */
	FILE *steps;                  /* the step-log test hook (NULL: off) */
	double t_step;                /* when the last step ended (hora_clock_s) */
	int64_t commits;              /* made, and the seconds they took */
	double commit_s;
};

/* train.c */
/* Compare this rank's job with rank 0's on every rank; *bar becomes rank
 * 0's choice. 0, HORA_ERR_CONFIG (err says what differs) or the comm's code. */
int hora_run_agree_job(struct run *r, int *bar);
/* Once the job is agreed on, on every rank: a job that does not resume
 * starts rank 0's metrics afresh, the file (opened for appending) emptied
 * by whichever rank 0 writes the first line (a worker started wrongly, or
 * a job that dies before its first epoch ends, loses no earlier job's
 * lines). */
void hora_run_fresh_metrics(struct run *r);
/* The global batch, steps per epoch and total steps for the current size
 * (and batch rule). */
void hora_run_schedule(struct run *r);
/* the learning rate of the next step */
double hora_run_lr(const struct run *r);
/* this epoch's sample order from rng_epoch (r->rng: the next epoch's) */
void hora_run_make_order(struct run *r);
/* the next of a seeded sequence (splitmix64; s: its state, advanced) */
uint64_t hora_run_draw(uint64_t *s);
/* a seeded Fisher-Yates shuffle of a[0..n) (s: the RNG state, advanced) */
void hora_run_shuffle(int64_t *a, int64_t n, uint64_t *s);
/* The weight of a rank's gradient (the mean over its n samples) in the
 * average over size ranks, so that the average is the mean over the gn
 * samples of the step: n x size / gn, exactly 1 for even shares. */
double hora_run_grad_weight(int n, int size, int64_t gn);
/* the distributed optimizer over the current communicator (again) */
int hora_run_dist_optim(struct run *r);

/* elastic.c */
int hora_elastic_start(struct run *r);  /* the first commit, or a joiner's state */
/* After a step: every commit_steps steps a commit (st: this rank's training
 * sums since the last one, folded into r->sums); HORA_ERR_VIEW when the
 * ranks agreed to re-form now (a joiner waits, or a rank left). */
int hora_elastic_step_done(struct run *r, struct hora_model_stats *st);
void hora_elastic_epoch_done(struct run *r); /* the commit at an epoch's start */
/* After rc failed a step: re-form over the next view, roll back to the
 * latest commit every rank holds, re-shard, go on (0); or rc / why not. */
int hora_elastic_recover(struct run *r, int rc);
/* After the last epoch: a barrier, so that no rank leaves (and makes the
 * others re-form and train on) before every rank has finished its last
 * collective. A failure of it is recovered like a step's: after the
 * re-form every rank goes on from the earliest commit, at once done when
 * every one holds the end of training. 0 or the barrier's code. */
int hora_elastic_finish(struct run *r);
/* After finish and the end's collectives: the second barrier, which keeps
 * every rank until all are past the first (a rank that left at once could
 * stop the first for a slower rank: a view change). Its failure is none:
 * logged. */
void hora_elastic_release(struct run *r);
void hora_elastic_free(struct run *r);
/* the test hook: the samples this rank trains in this step */
void hora_elastic_log_samples(struct run *r, const int64_t *idx, int n);

#endif
