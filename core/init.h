/* init.h - hora_init's internals (core/ only): the job a worker joins, as
 * one struct, so that the `hora worker` command and the public hora_init
 * (which fills it from the environment, core/env.h) run the same steps. */
#ifndef HORA_CORE_INIT_H
#define HORA_CORE_INIT_H

#include "hora.h"
#include "slurm.h"

#include <stdbool.h>
#include <stddef.h>

/* Fusion settings that win over the train section's (HORA_FUSION_THRESHOLD,
 * HORA_CYCLE_TIME_MS in Horovod's style): the communicator keeps them and
 * hora_dist_optim_create applies them. */
struct hora_fusion_override {
	bool has_threshold, has_cycle_time;
	size_t threshold_bytes;
	double cycle_time_ms;
};

struct hora_cluster_config;

struct hora_init_opts {
	const char *cluster_file; /* NULL or "": a job of one (no sockets) */
	/* optional: the cluster file already read, with --set and flags applied
	 * (`hora worker` joins with exactly what it validated); borrowed for the
	 * call; cluster_file is then only its name in messages */
	const struct hora_cluster_config *cluster;
	const char *secret_env;   /* HORA_SECRET's value (NULL: unset): the secret when
				     the file names no secret_file */
	int proc;                 /* this worker's global index in the file (0..workers-1) */
	int spin_us;              /* small-message polling, wins over collectives.spin_us
				     (0: the file's or the default; -1: never poll) */
	struct hora_fusion_override fusion;
	/* elastic training (train.elastic; NULL or off: off): a worker that
	 * finds the job running joins it (core/rejoin.c), and the communicator
	 * re-forms over each new view instead of stopping on a lost worker */
	const struct hora_elastic_config *elastic;
	/* an srun step (hora_env_slurm; .on 0: none): nodes, seed and ports
	 * come from it where the cluster file names no nodes, or there is no
	 * file at all */
	struct hora_slurm slurm;
};

void hora_init_opts_defaults(struct hora_init_opts *o);

/* hora_init with every input given (it reads no environment). Returns 0
 * and *out, or a negative code with the reason in err. */
int hora_init_with(const struct hora_init_opts *o, struct hora_comm **out, char *err, size_t errlen);

#endif
