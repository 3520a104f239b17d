/* ckpt_thread.c - rank 0's checkpoint write or read on a thread of its own
 * (ckpt_thread.h). Not the file format nor the atomic replace
 * (checkpoint.c), nor who waits how (core/train.c end_epoch, resume). */
#include "ckpt_thread.h"

#include "net/util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hora_ckpt_thread {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	bool done, abandoned, reading;
	int32_t rc;
	double t0, t1;
	int delay_ms;
	struct hora_ckpt_meta cm; /* written, or read */
	char dir[HORA_PATH_MAX];
	struct hora_ckpt_job job; /* a read's: its strings our own copies */
	char *model, *optimizer;
	float *params;
	size_t nparams;
	uint8_t *state;
	size_t ob;
	char err[HORA_PATH_MAX + 512];
};

static void thread_free(struct hora_ckpt_thread *t)
{
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	free(t->params);
	free(t->state);
	free(t->model);
	free(t->optimizer);
	free(t);
}

static void *thread_main(void *arg)
{
	struct hora_ckpt_thread *t = arg;
	if (t->delay_ms)
		nanosleep(&(struct timespec){t->delay_ms / 1000, (long)(t->delay_ms % 1000) * 1000000}, NULL);
	char err[sizeof(t->err)] = "";
	struct hora_ckpt_meta cm = t->cm;
	const int rc = t->reading ? hora_ckpt_resume_state(t->dir, &t->job, &cm, t->params, t->nparams, t->state,
							    t->ob, err, sizeof(err))
				  : hora_ckpt_write_state(t->dir, &t->cm, t->params, t->state, t->ob, err, sizeof(err));
	pthread_mutex_lock(&t->mu);
	t->rc = rc;
	t->t1 = hora_clock_s();
	t->cm = cm;
	memcpy(t->err, err, sizeof(err));
	t->done = true;
	const bool abandoned = t->abandoned;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	if (abandoned) /* detached: nobody else holds t */
		thread_free(t);
	return NULL;
}

/* t with room for nparams parameters and ob bytes of state (NULL: err) */
static struct hora_ckpt_thread *thread_new(const char *dir, size_t nparams, size_t ob, int delay_ms,
					   const char *what, char *err, size_t errlen)
{
	struct hora_ckpt_thread *t = calloc(1, sizeof(*t));
	if (!t || !(t->params = malloc(nparams ? nparams * sizeof(float) : 1)) || !(t->state = malloc(ob ? ob : 1))) {
		snprintf(err, errlen, "checkpoint: no memory for %s %zu parameters", what, nparams);
		if (t)
			free(t->params);
		free(t);
		return NULL;
	}
	t->nparams = nparams;
	t->ob = ob;
	t->delay_ms = delay_ms;
	snprintf(t->dir, sizeof(t->dir), "%s", dir);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* a clock step moves no round's end */
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&t->mu, NULL);
	return t;
}

static struct hora_ckpt_thread *thread_start(struct hora_ckpt_thread *t, char *err, size_t errlen)
{
	t->t0 = hora_clock_s();
	const int rc = pthread_create(&t->th, NULL, thread_main, t);
	if (rc) {
		snprintf(err, errlen, "checkpoint: no thread to %s it: %s", t->reading ? "read" : "write",
			 strerror(rc));
		thread_free(t);
		return NULL;
	}
	return t;
}

struct hora_ckpt_thread *hora_ckpt_thread_write(const char *dir, const struct hora_ckpt_meta *m,
						const float *params, const struct hora_optim *o, int delay_ms,
						char *err, size_t errlen)
{
	struct hora_ckpt_thread *t =
		thread_new(dir, m->nparams, hora_optim_state_bytes(o), delay_ms, "a copy of", err, errlen);
	if (!t)
		return NULL;
	memcpy(t->params, params, m->nparams * sizeof(float));
	hora_optim_state_save(o, t->state);
	t->cm = *m;
	return thread_start(t, err, errlen);
}

struct hora_ckpt_thread *hora_ckpt_thread_read(const char *dir, const struct hora_ckpt_job *job, size_t nparams,
					       size_t ob, int delay_ms, char *err, size_t errlen)
{
	struct hora_ckpt_thread *t = thread_new(dir, nparams, ob, delay_ms, "reading", err, errlen);
	if (!t)
		return NULL;
	t->reading = true;
	if (!(t->model = strdup(job->model)) || !(t->optimizer = strdup(job->optimizer))) {
		snprintf(err, errlen, "checkpoint: no memory to read it");
		thread_free(t);
		return NULL;
	}
	t->job = *job; /* its strings are the caller's: ours instead */
	t->job.model = t->model;
	t->job.optimizer = t->optimizer;
	return thread_start(t, err, errlen);
}

int hora_ckpt_thread_wait(struct hora_ckpt_thread *t, int ms, int32_t *rc, char *err, size_t errlen,
			  double *t0, double *t1)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += (long)ms * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&t->mu);
	while (!t->done && pthread_cond_timedwait(&t->cv, &t->mu, &until) != ETIMEDOUT)
		;
	const bool done = t->done;
	if (done) {
		*rc = t->rc;
		*t0 = t->t0;
		*t1 = t->t1;
		if (t->rc)
			snprintf(err, errlen, "%s", t->err);
	}
	pthread_mutex_unlock(&t->mu);
	return done;
}

void hora_ckpt_thread_take(const struct hora_ckpt_thread *t, struct hora_ckpt_meta *m, float *params,
			   struct hora_optim *o)
{
	*m = t->cm;
	memcpy(params, t->params, t->nparams * sizeof(float));
	hora_optim_state_load(o, t->state, t->ob);
}

double hora_ckpt_thread_age(const struct hora_ckpt_thread *t)
{
	return hora_clock_s() - t->t0;
}

void hora_ckpt_thread_end(struct hora_ckpt_thread *t, bool block)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	const bool join = block || t->done;
	const pthread_t th = t->th; /* once abandoned, t is the thread's to free */
	if (!join)
		t->abandoned = true;
	pthread_mutex_unlock(&t->mu);
	if (!join) {
		pthread_detach(th);
		return;
	}
	pthread_join(t->th, NULL);
	thread_free(t);
}
