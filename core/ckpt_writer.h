/* ckpt_writer.h - a checkpoint written on a thread of its own, from a copy
 * of the parameters and the optimizer's state taken when it starts, so
 * that the caller may wait for it in short rounds (core/train.c end_epoch:
 * every rank waits in 200 ms broadcasts, never one receive longer than the
 * transport's io timeout) or give up on it (train.stall_abort_s: it ends
 * by itself, from its own copy). */
#ifndef HORA_CKPT_WRITER_H
#define HORA_CKPT_WRITER_H

#include "checkpoint.h"

#include <stdbool.h>
#include <stdint.h>

struct hora_ckpt_writer;

/* Copy params (m->nparams) and o's state and start writing them to dir
 * (hora_ckpt_write_state), after delay_ms (a test hook; 0: none). NULL
 * when the copy or the thread cannot be had: err says why, and the caller
 * writes without a thread. */
struct hora_ckpt_writer *hora_ckpt_writer_start(const char *dir, const struct hora_ckpt_meta *m,
						const float *params, const struct hora_optim *o, int delay_ms,
						char *err, size_t errlen);
/* Wait up to ms for the write: 1 when it ended (*rc its result, err its
 * reason when it failed, [*t0, *t1] its span), 0 while it goes on. */
int hora_ckpt_writer_wait(struct hora_ckpt_writer *w, int ms, int32_t *rc, char *err, size_t errlen,
			  double *t0, double *t1);
/* Seconds since the write started. */
double hora_ckpt_writer_age(const struct hora_ckpt_writer *w);
/* Done with w (NULL: nothing): block, or not. Not blocking, a write that
 * goes on ends by itself (its copy is its own) and frees what it holds. */
void hora_ckpt_writer_end(struct hora_ckpt_writer *w, bool block);

#endif
