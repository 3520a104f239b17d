/* elastic_helpers.h - an elastic job as threads of one process (the
 * Criterion test test_elastic.c and the ThreadSanitizer driver
 * tests/tsan/elastic_threads.c run the same scenario): a cluster file of
 * three workers with membership.min_members 2; workers 0 and 1 start the
 * job (hora_init_with, elastic) and train a small generated data set;
 * worker 2 starts once they have trained a while (their first commit after
 * step 4) and joins the running job: the others re-form at their next
 * commit, wait in readiness rounds its keeper thread answers while it
 * sleeps 700 ms before training (core/comm_keep.c), it receives the
 * committed state, and all three finish with bitwise identical
 * parameters. */
#ifndef HORA_TESTS_ELASTIC_HELPERS_H
#define HORA_TESTS_ELASTIC_HELPERS_H

#include "tests/core/comm_helpers.h"

#include "init.h"

#include <stdatomic.h>

#ifndef TE_EPOCHS
#define TE_EPOCHS 400 /* long enough for the joiner to find the job running (100 was not, once in ~10) */
#endif

struct te_rank {
	const char *file;
	const struct hora_train_config *cfg;
	int proc, rc;
	int load_ms; /* a joiner sleeps this long between hora_init and training */
	bool quit;   /* ... and then ends (hora_finalize) without a call of its own */
	bool joined; /* out: hora_init_with made this worker a joiner of a running job */
	struct hora_train_result res;
	char err[1024];
};

static inline void *te_main(void *p)
{
	struct te_rank *x = p;
	struct hora_init_opts o;
	hora_init_opts_defaults(&o);
	o.cluster_file = x->file;
	o.proc = x->proc;
	o.secret_env = TC_SECRET;
	o.elastic = &x->cfg->elastic;
	struct hora_comm *c;
	if ((x->rc = hora_init_with(&o, &c, x->err, sizeof(x->err))))
		return NULL;
	x->joined = hora_elastic_joined(c);
	if (x->load_ms && hora_elastic_joined(c)) /* its keeper answers the others meanwhile */
		usleep((useconds_t)x->load_ms * 1000);
	if (x->quit && hora_elastic_joined(c)) { /* its keeper leaves the job for it */
		hora_finalize(c);
		return NULL;
	}
	x->rc = hora_train_run_comm(c, x->cfg, &x->res, x->err, sizeof(x->err));
	hora_finalize(c);
	return NULL;
}

/* The job: a small generated data set in dir (400 train / 40 test samples
 * of 16x16, 4 classes), an MLP with 32 hidden units, batch 8, quiet. */
static inline void te_config(const char *dir, struct hora_train_config *cfg)
{
	th_make_dataset(dir, 400, 40, 16, 4, 5, 0);
	hora_train_config_defaults(cfg);
	snprintf(cfg->data, sizeof(cfg->data), "%s", dir);
	cfg->hidden[0] = 32;
	cfg->epochs = TE_EPOCHS;
	cfg->batch_size = 8;
	cfg->quiet = 1;
}

/* Returns the cluster file (caller frees); rk[i].res for the caller to free.
 * quit: the joiner ends after its 700 ms without training (its keeper
 * leaves the job: the others re-form as 2 and finish).
 * The joiner starts when worker 0's metrics file (in dir) has its first
 * epoch: the job is running. */
static inline char *te_join_run(const char *dir, int port_base, struct hora_train_config *cfg,
				struct te_rank rk[3], bool quit)
{
	char *file = th_path(dir, "elastic.yaml");
	FILE *f = fopen(file, "w");
	if (!f)
		return file;
	fprintf(f, "cluster:\n  port_base: %d\n  seeds: [\"127.0.0.1:%d\"]\n  nodes:\n"
		   "    - {host: 127.0.0.1, workers: 3}\nmembership:\n  probe_interval_ms: 100\n"
		   "  suspect_timeout_ms: 1000\n  min_members: 2\n",
		port_base, port_base + 1);
	fclose(f);
	char *metrics = th_path(dir, "m.jsonl");
	snprintf(cfg->metrics, sizeof(cfg->metrics), "%s", metrics);
	cfg->elastic.on = 1;
	cfg->elastic.commit_steps = 4;
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		rk[i] = (struct te_rank){.file = file, .cfg = cfg, .proc = i, .load_ms = i == 2 ? 700 : 0,
					 .quit = i == 2 && quit};
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, te_main, &rk[i]);
	for (int t = 0; t < 600; t++) { /* the job trains: an epoch is done */
		FILE *m = fopen(metrics, "r");
		int ch = m ? fgetc(m) : EOF;
		if (m)
			fclose(m);
		if (ch != EOF)
			break;
		usleep(50000);
	}
	pthread_create(&th[2], NULL, te_main, &rk[2]);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	free(metrics);
	return file;
}

#endif
