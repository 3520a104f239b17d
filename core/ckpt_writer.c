/* ckpt_writer.c - a checkpoint written on a thread of its own from a copy
 * taken when it starts (ckpt_writer.h). Not the file format nor the atomic
 * replace (checkpoint.c), nor who waits how (core/train.c end_epoch). */
#include "ckpt_writer.h"

#include "net/util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hora_ckpt_writer {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	bool done, abandoned;
	int32_t rc;
	double t0, t1;
	int delay_ms;
	struct hora_ckpt_meta cm;
	char dir[HORA_PATH_MAX];
	float *params;
	uint8_t *state;
	size_t ob;
	char err[HORA_PATH_MAX + 512];
};

static void writer_free(struct hora_ckpt_writer *w)
{
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w->params);
	free(w->state);
	free(w);
}

static void *writer_main(void *arg)
{
	struct hora_ckpt_writer *w = arg;
	if (w->delay_ms)
		nanosleep(&(struct timespec){w->delay_ms / 1000, (long)(w->delay_ms % 1000) * 1000000}, NULL);
	char err[sizeof(w->err)] = "";
	const int rc = hora_ckpt_write_state(w->dir, &w->cm, w->params, w->state, w->ob, err, sizeof(err));
	pthread_mutex_lock(&w->mu);
	w->rc = rc;
	w->t1 = hora_clock_s();
	memcpy(w->err, err, sizeof(err));
	w->done = true;
	const bool abandoned = w->abandoned;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (abandoned) /* detached: nobody else holds w */
		writer_free(w);
	return NULL;
}

struct hora_ckpt_writer *hora_ckpt_writer_start(const char *dir, const struct hora_ckpt_meta *m,
						const float *params, const struct hora_optim *o, int delay_ms,
						char *err, size_t errlen)
{
	struct hora_ckpt_writer *w = calloc(1, sizeof(*w));
	const size_t ob = hora_optim_state_bytes(o);
	if (!w || !(w->params = malloc(m->nparams ? m->nparams * sizeof(float) : 1)) ||
	    !(w->state = malloc(ob ? ob : 1))) {
		snprintf(err, errlen, "checkpoint: no memory for a copy of %llu parameters",
			 (unsigned long long)m->nparams);
		if (w) {
			free(w->params);
			free(w);
		}
		return NULL;
	}
	memcpy(w->params, params, m->nparams * sizeof(float));
	hora_optim_state_save(o, w->state);
	w->ob = ob;
	w->cm = *m;
	w->delay_ms = delay_ms;
	snprintf(w->dir, sizeof(w->dir), "%s", dir);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* a clock step moves no round's end */
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&w->mu, NULL);
	w->t0 = hora_clock_s();
	const int rc = pthread_create(&w->th, NULL, writer_main, w);
	if (rc) {
		snprintf(err, errlen, "checkpoint: no thread to write it: %s", strerror(rc));
		writer_free(w);
		return NULL;
	}
	return w;
}

int hora_ckpt_writer_wait(struct hora_ckpt_writer *w, int ms, int32_t *rc, char *err, size_t errlen,
			  double *t0, double *t1)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += (long)ms * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&w->mu);
	while (!w->done && pthread_cond_timedwait(&w->cv, &w->mu, &until) != ETIMEDOUT)
		;
	const bool done = w->done;
	if (done) {
		*rc = w->rc;
		*t0 = w->t0;
		*t1 = w->t1;
		if (w->rc)
			snprintf(err, errlen, "%s", w->err);
	}
	pthread_mutex_unlock(&w->mu);
	return done;
}

double hora_ckpt_writer_age(const struct hora_ckpt_writer *w)
{
	return hora_clock_s() - w->t0;
}

void hora_ckpt_writer_end(struct hora_ckpt_writer *w, bool block)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	const bool join = block || w->done;
	const pthread_t th = w->th; /* once abandoned, w is the thread's to free */
	if (!join)
		w->abandoned = true;
	pthread_mutex_unlock(&w->mu);
	if (!join) {
		pthread_detach(th);
		return;
	}
	pthread_join(w->th, NULL);
	writer_free(w);
}
