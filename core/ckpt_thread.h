/* ckpt_thread.h - rank 0's checkpoint file work on a thread of its own, so
 * that every rank may wait for it in short rounds (core/train.c: 200 ms
 * broadcasts, never one receive longer than the transport's io timeout) or
 * give up on it (train.stall_abort_s: it ends by itself). A write works
 * from a copy of the parameters and the optimizer's state taken when it
 * starts; a read into buffers of its own, taken when it has ended. */
#ifndef HORA_CKPT_THREAD_H
#define HORA_CKPT_THREAD_H

#include "checkpoint.h"

#include <stdbool.h>
#include <stdint.h>

struct hora_ckpt_thread;

/* Copy params (m->nparams) and o's state and start writing them to dir
 * (hora_ckpt_write_state), after delay_ms (a test hook; 0: none). NULL
 * when the copy or the thread cannot be had: err says why, and the caller
 * writes without a thread. */
struct hora_ckpt_thread *hora_ckpt_thread_write(const char *dir, const struct hora_ckpt_meta *m,
						const float *params, const struct hora_optim *o, int delay_ms,
						char *err, size_t errlen);
/* Start reading dir's checkpoint for job (hora_ckpt_resume_state) into
 * buffers of nparams parameters and ob bytes of optimizer state, after
 * delay_ms. NULL as above: the caller reads without a thread. */
struct hora_ckpt_thread *hora_ckpt_thread_read(const char *dir, const struct hora_ckpt_job *job, size_t nparams,
					       size_t ob, int delay_ms, char *err, size_t errlen);
/* Wait up to ms for it: 1 when it ended (*rc its result, err its reason
 * when it failed, [*t0, *t1] its span), 0 while it goes on. */
int hora_ckpt_thread_wait(struct hora_ckpt_thread *t, int ms, int32_t *rc, char *err, size_t errlen,
			  double *t0, double *t1);
/* A read that ended with 0: what it read, into m, params and o. */
void hora_ckpt_thread_take(const struct hora_ckpt_thread *t, struct hora_ckpt_meta *m, float *params,
			   struct hora_optim *o);
/* Seconds since it started. */
double hora_ckpt_thread_age(const struct hora_ckpt_thread *t);
/* Done with t (NULL: nothing): block, or not. Not blocking, work that goes
 * on ends by itself (its buffers are its own) and frees what it holds. */
void hora_ckpt_thread_end(struct hora_ckpt_thread *t, bool block);

#endif
