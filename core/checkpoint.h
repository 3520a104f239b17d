/* checkpoint.h - training checkpoints (internal; format in checkpoint.c). */
#ifndef HORA_CORE_CHECKPOINT_H
#define HORA_CORE_CHECKPOINT_H

#include "hora.h"

#include <stdint.h>

struct hora_ckpt_meta {
	int32_t epoch;   /* epochs completed */
	int32_t workers; /* job size that wrote it */
	int64_t step;    /* global steps completed */
	uint64_t rng;    /* shuffle RNG state after `epoch` */
	uint64_t seed;
	uint64_t nparams;
	char model[48];
	int32_t batch;     /* per worker (0: a version 1 file, not recorded) */
	char optimizer[12]; /* "sgd", "momentum", "nesterov", "adam" ("" in version 1) */
};

/* <dir>/checkpoint.hora and <dir>/checkpoint.prev.hora */
void hora_ckpt_paths(const char *dir, char *cur, char *prev, size_t n);
/* Atomically replace <dir>/checkpoint.hora (the old one becomes .prev). */
int hora_ckpt_write(const char *dir, const struct hora_ckpt_meta *m, const float *params,
		    const struct hora_optim *o, char *err, size_t errlen);
/* The same from a copy: the optimizer's state as hora_optim_state_save
 * wrote it (ob bytes); touches nothing but its arguments (a thread of its
 * own may write while training goes on). */
int hora_ckpt_write_state(const char *dir, const struct hora_ckpt_meta *m, const float *params,
			  const uint8_t *state, size_t ob, char *err, size_t errlen);
/* Verify everything (magic, checksum, then version and sizes) before
 * touching params, o or m. 0, -errno, HORA_ERR_DATA (damaged: "is corrupt",
 * "is truncated"; or an intact file of a version this hora does not read),
 * or HORA_ERR_CONFIG (intact, for another model or optimizer), with the
 * reason and the file in err. */
int hora_ckpt_read(const char *path, struct hora_ckpt_meta *m, float *params, size_t nparams,
		   struct hora_optim *o, char *err, size_t errlen);
/* The same into the optimizer's state as bytes (ob of them, as
 * hora_optim_state_save writes them): no optimizer touched (a thread of
 * its own may read while the caller waits). */
int hora_ckpt_read_state(const char *path, struct hora_ckpt_meta *m, float *params, size_t nparams,
			 uint8_t *state, size_t ob, char *err, size_t errlen);

/* The job resuming: what its checkpoint must have been written by. */
struct hora_ckpt_job {
	int32_t workers;       /* 0: any (elastic training re-shards an epoch-aligned checkpoint) */
	uint64_t seed;
	const char *model;     /* model name */
	int32_t batch;         /* per worker */
	const char *optimizer; /* as hora_ckpt_meta.optimizer */
};
/* Read <dir>/checkpoint.hora for job: hora_ckpt_read, then the job that
 * wrote it compared with this one (HORA_ERR_CONFIG when it differs). On
 * failure err ends with the hint that fits the cause: the previous
 * checkpoint for a damaged or missing file when it is whole and of this
 * job (else why it is no use), the worker count or settings that wrote it
 * for another job's checkpoint. m is filled as far as known. Returns 0,
 * HORA_ERR_CONFIG (another job's), HORA_ERR_DATA (damaged, missing or
 * unreadable) or -ENOMEM. */
int hora_ckpt_resume(const char *dir, const struct hora_ckpt_job *job, struct hora_ckpt_meta *m,
		     float *params, size_t nparams, struct hora_optim *o, char *err, size_t errlen);
/* The same into state bytes (hora_ckpt_read_state). */
int hora_ckpt_resume_state(const char *dir, const struct hora_ckpt_job *job, struct hora_ckpt_meta *m,
			   float *params, size_t nparams, uint8_t *state, size_t ob, char *err, size_t errlen);

/* optimizer state (optim.c) */
size_t hora_optim_state_bytes(const struct hora_optim *o);
void hora_optim_state_save(const struct hora_optim *o, uint8_t *out);
int hora_optim_state_load(struct hora_optim *o, const uint8_t *in, size_t len);

#endif
