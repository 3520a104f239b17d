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
/* Verify everything (magic, version, sizes, checksum) before touching
 * params, o or m. 0, -errno, or HORA_ERR_DATA with the reason. */
int hora_ckpt_read(const char *path, struct hora_ckpt_meta *m, float *params, size_t nparams,
		   struct hora_optim *o, char *err, size_t errlen);

/* optimizer state (optim.c) */
size_t hora_optim_state_bytes(const struct hora_optim *o);
void hora_optim_state_save(const struct hora_optim *o, uint8_t *out);
int hora_optim_state_load(struct hora_optim *o, const uint8_t *in, size_t len);

#endif
