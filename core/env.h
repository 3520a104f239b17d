/* env.h - the one place hora reads the environment (core/ internal).
 *
 * Library code never calls getenv: hora_init (the Horovod-style entry point
 * of a launched worker) and the `hora` command line read these variables
 * here, with checked parses that name the variable on a bad value, and pass
 * the values on in config structs. The table of variables is in
 * core/README.md. */
#ifndef HORA_CORE_ENV_H
#define HORA_CORE_ENV_H

#include "init.h"

#include <stddef.h>
#include <stdint.h>

/* An integer variable in [lo, hi]: 1 and *out when set, 0 when unset or
 * empty, HORA_ERR_CONFIG with "NAME must be an integer in lo..hi (got 'v')"
 * in err when it is not one. */
int hora_env_long(const char *name, long lo, long hi, long *out, char *err, size_t errlen);
/* The same for a number in [lo, hi], and for a size in bytes up to hi (the
 * config's parsers, core/cfgkey.h: "64MiB" means what it means in a file). */
int hora_env_double(const char *name, double lo, double hi, double *out, char *err, size_t errlen);
int hora_env_size(const char *name, uint64_t hi, uint64_t *out, char *err, size_t errlen);

/* This process's global worker index: the first of HORA_PROC, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK, PMI_RANK, JOB_COMPLETION_INDEX that is set (as
 * `hora launch`, Slurm, mpirun or a Kubernetes Indexed Job set them), else 0. 0 or HORA_ERR_CONFIG naming the variable. */
int hora_env_proc(int *proc, char *err, size_t errlen);

/* HORA_SECRET's value, or NULL when unset: the cluster secret when no
 * secret_file is named (hora_comm_create, the cluster file's check, the
 * `hora` commands pass it to hora_net_secret_load). */
const char *hora_env_secret(void);

/* HORA_TIMELINE's value (NULL: unset or empty): where `hora worker` writes
 * the Chrome trace when --timeline is not given. */
const char *hora_env_timeline(void);
/* HORA_PROGRESS (set by `hora launch` on a terminal): 1 "bar", 0 "lines",
 * -1 unset or anything else. */
int hora_env_progress(void);
/* HORA_TEST_SAMPLE_LOG (test hook, NULL: unset): the prefix of the files in
 * which each worker records the samples it trains (train.sample_log). */
const char *hora_env_test_sample_log(void);
/* HORA_TEST_STEP_LOG (test hook, NULL: unset): the prefix of the files in
 * which each elastic worker records every step it ends (train.step_log;
 * bench/elastic.sh times the recovery with it). */
const char *hora_env_test_step_log(void);
/* HORA_TEST_DIE_AT_START=R (test hook, -1: unset or not a number): the
 * starting elastic worker of rank R kills itself (SIGKILL) right before
 * the start's sync, so that the others meet a death there. */
int hora_env_test_die_at_start(void);
/* HORA_TEST_CKPT_DELAY_MS=N (test hook, 0: unset): rank 0 sleeps N ms
 * before it writes each checkpoint and before a resume reads one (a slow
 * file system). */
int hora_env_test_ckpt_delay_ms(void);
/* HORA_TEST_LOAD_DELAY_MS=N (test hook, 0: unset): the trainer sleeps N ms
 * before it loads its data (a slow file system; a joiner slower to be ready
 * than transport.io_timeout_ms). */
int hora_env_test_load_delay_ms(void);

/* HORA_LOG=error|warn|info|debug: sets the log level when given. 0 or
 * HORA_ERR_CONFIG naming the variable and the accepted values. */
int hora_env_apply_log(char *err, size_t errlen);

struct hora_slurm;
/* An srun task's step (slurm.h): SLURM_STEP_NODELIST, SLURM_NTASKS,
 * SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE,
 * SLURM_STEP_RESV_PORTS, SLURM_JOB_ID, SLURM_STEP_ID. s->on when a step of
 * several tasks. 0, or HORA_ERR_CONFIG naming a variable that is set but
 * wrong, or missing beside the others. */
int hora_env_slurm(struct hora_slurm *s, char *err, size_t errlen);

/* Everything hora_init takes from the environment: HORA_CONFIG (the cluster
 * file), HORA_SECRET, the worker index (hora_env_proc), an srun step
 * (hora_env_slurm), HORA_SPIN_US (0: never
 * poll), HORA_FUSION_THRESHOLD,
 * HORA_CYCLE_TIME_MS; applies HORA_LOG. Fills o (after hora_init_opts_defaults)
 * and returns 0, or HORA_ERR_CONFIG naming the variable. o->cluster_file
 * points into the environment: valid while it is not changed. */
int hora_env_init_opts(struct hora_init_opts *o, char *err, size_t errlen);

/* HORA_CONFIG's value (NULL: unset or empty): the cluster file, for
 * hora_init and for `hora worker` without --config (a copy started by
 * `hora run` or `hora launch FILE -- CMD`). */
const char *hora_env_config(void);

/* TMPDIR's value (NULL: unset or empty): where `hora run` and `hora launch
 * ... -- CMD` make their private directory (else /tmp). */
const char *hora_env_tmpdir(void);

/* HORA_LAUNCH_WORKER's value (NULL: unset or empty), a test hook: the
 * program `hora launch` runs for each worker instead of its own executable
 * (with the same arguments, "worker --config F --proc G ..."), so that the
 * launcher's supervision can be tested with stand-in workers
 * (tests/cli/launch_standin.sh). Not for jobs. */
const char *hora_env_launch_worker(void);

#endif
