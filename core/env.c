/* env.c - the one place hora reads the environment (see env.h and the table
 * in core/README.md). Values are parsed strictly: a variable that is set but
 * not a valid value is an error naming it, never a silent default. */
#include "env.h"

#include "cfgkey.h"
#include "log.h"
#include "slurm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_get(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

int hora_env_long(const char *name, long lo, long hi, long *out, char *err, size_t errlen)
{
	const char *v = env_get(name);
	if (!v)
		return 0;
	if (hora_cfg_int(v, lo, hi, out))
		return hora_cfg_bad(err, errlen, "%s must be an integer in %ld..%ld (got '%s')", name, lo, hi, v);
	return 1;
}

int hora_env_double(const char *name, double lo, double hi, double *out, char *err, size_t errlen)
{
	const char *v = env_get(name);
	if (!v)
		return 0;
	if (hora_cfg_real(v, out) || *out < lo || *out > hi)
		return hora_cfg_bad(err, errlen, "%s must be a number in %g..%g (got '%s')", name, lo, hi, v);
	return 1;
}

int hora_env_size(const char *name, uint64_t hi, uint64_t *out, char *err, size_t errlen)
{
	const char *v = env_get(name);
	if (!v)
		return 0;
	if (hora_cfg_size(v, out) || *out > hi) {
		char h[32];
		hora_cfg_size_str(hi, h, sizeof(h));
		return hora_cfg_bad(err, errlen, "%s must be a size in 0..%s (bytes, or with KiB, MiB, GiB; got '%s')",
				    name, h, v);
	}
	return 1;
}

int hora_env_proc(int *proc, char *err, size_t errlen)
{
	static const char *const names[] = {"HORA_PROC", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
					    "PMI_RANK", "JOB_COMPLETION_INDEX"};
	*proc = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		long g;
		int rc = hora_env_long(names[i], 0, 1 << 20, &g, err, errlen);
		if (rc < 0)
			return rc;
		if (rc) {
			*proc = (int)g;
			return 0;
		}
	}
	return 0;
}

const char *hora_env_secret(void)
{
	return getenv("HORA_SECRET");
}

const char *hora_env_timeline(void)
{
	return env_get("HORA_TIMELINE");
}

const char *hora_env_test_sample_log(void)
{
	return env_get("HORA_TEST_SAMPLE_LOG");
}

const char *hora_env_test_step_log(void)
{
	return env_get("HORA_TEST_STEP_LOG");
}

int hora_env_test_die_at_start(void)
{
	const char *v = env_get("HORA_TEST_DIE_AT_START");
	char *end;
	const long r = v ? strtol(v, &end, 10) : -1;
	return v && !*end && r >= 0 && r < 1 << 20 ? (int)r : -1;
}

int hora_env_test_ckpt_delay_ms(void)
{
	const char *v = env_get("HORA_TEST_CKPT_DELAY_MS");
	char *end;
	const long ms = v ? strtol(v, &end, 10) : 0;
	return v && !*end && ms > 0 && ms < 3600000 ? (int)ms : 0;
}

int hora_env_test_load_delay_ms(void)
{
	const char *v = env_get("HORA_TEST_LOAD_DELAY_MS");
	char *end;
	const long ms = v ? strtol(v, &end, 10) : 0;
	return v && !*end && ms > 0 && ms < 3600000 ? (int)ms : 0;
}

int hora_env_progress(void)
{
	const char *v = env_get("HORA_PROGRESS");
	return v && !strcmp(v, "bar") ? 1 : v && !strcmp(v, "lines") ? 0 : -1;
}

int hora_env_apply_log(char *err, size_t errlen)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	const char *v = env_get("HORA_LOG");
	if (!v)
		return 0;
	for (int l = HORA_LOG_ERROR; l <= HORA_LOG_DEBUG; l++)
		if (!strcmp(v, names[l])) {
			hora_log_set_level((enum hora_log_level)l);
			return 0;
		}
	snprintf(err, errlen, "HORA_LOG must be error, warn, info or debug (got '%s')", v);
	return HORA_ERR_CONFIG;
}

/* a string variable into buf (too long: an error naming it) */
static int env_text(const char *name, char *buf, size_t len, char *err, size_t errlen)
{
	const char *v = env_get(name);
	buf[0] = 0;
	if (!v)
		return 0;
	if (strlen(v) >= len)
		return hora_cfg_bad(err, errlen, "%s is longer than %zu bytes", name, len - 1);
	snprintf(buf, len, "%s", v);
	return 1;
}

int hora_env_slurm(struct hora_slurm *s, char *err, size_t errlen)
{
	*s = (struct hora_slurm){0};
	int rc = env_text("SLURM_STEP_NODELIST", s->nodelist, sizeof(s->nodelist), err, errlen);
	long v;
	if (rc <= 0 || (rc = hora_env_long("SLURM_NTASKS", 1, 1 << 20, &v, err, errlen)) <= 0)
		return rc < 0 ? rc : 0; /* not an srun step */
	s->ntasks = (int)v;
	static const char *const ints[] = {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_ID",
					   "SLURM_STEP_ID"};
	long *out[] = {&v, &v, &v, &s->job_id, &s->step_id};
	int *iout[] = {&s->procid, &s->localid, &s->nodeid, NULL, NULL};
	for (int i = 0; i < 5; i++) {
		if ((rc = hora_env_long(ints[i], 0, 1L << 40, out[i], err, errlen)) < 0)
			return rc;
		if (!rc && i < 3)
			return hora_cfg_bad(err, errlen, "%s is not set beside SLURM_STEP_NODELIST (not an srun "
							 "task?)", ints[i]);
		if (iout[i])
			*iout[i] = (int)v;
	}
	if ((rc = env_text("SLURM_STEP_TASKS_PER_NODE", s->tasks_per_node, sizeof(s->tasks_per_node), err,
			   errlen)) <= 0)
		return rc < 0 ? rc : hora_cfg_bad(err, errlen, "SLURM_STEP_TASKS_PER_NODE is not set beside "
								"SLURM_STEP_NODELIST");
	if ((rc = env_text("SLURM_STEP_RESV_PORTS", s->resv_ports, sizeof(s->resv_ports), err, errlen)) < 0)
		return rc;
	s->on = s->ntasks > 1;
	return 0;
}

int hora_env_init_opts(struct hora_init_opts *o, char *err, size_t errlen)
{
	int rc;
	long spin;
	double x;
	if ((rc = hora_env_apply_log(err, errlen)))
		return rc;
	o->cluster_file = hora_env_config();
	o->secret_env = hora_env_secret();
	if ((rc = hora_env_proc(&o->proc, err, errlen)))
		return rc;
	if ((rc = hora_env_slurm(&o->slurm, err, errlen)))
		return rc;
	if ((rc = hora_env_long("HORA_SPIN_US", -1, 1000000, &spin, err, errlen)) < 0)
		return rc;
	if (rc)
		o->spin_us = spin ? (int)spin : -1; /* 0: never poll, as it always meant */
	/* up to 64 GiB: a fusion buffer is one allocation of this size */
	uint64_t bytes;
	if ((rc = hora_env_size("HORA_FUSION_THRESHOLD", (uint64_t)64 << 30, &bytes, err, errlen)) < 0)
		return rc;
	if (rc) {
		o->fusion.has_threshold = true;
		o->fusion.threshold_bytes = (size_t)bytes;
	}
	if ((rc = hora_env_double("HORA_CYCLE_TIME_MS", 0, 3600e3, &x, err, errlen)) < 0)
		return rc;
	if (rc) {
		o->fusion.has_cycle_time = true;
		o->fusion.cycle_time_ms = x;
	}
	return 0;
}

const char *hora_env_launch_worker(void)
{
	return env_get("HORA_LAUNCH_WORKER");
}

const char *hora_env_tmpdir(void)
{
	return env_get("TMPDIR");
}

const char *hora_env_config(void)
{
	return env_get("HORA_CONFIG");
}
