/* test_train.c - the training loop: learns, is bitwise deterministic per
 * seed, writes metrics, refuses bad data; a stall abort is the error a
 * distributed job returns; and the reference model on the real MNIST
 * digits (data/mnist, made by deploy/get-data.sh). */
#include "hora.h"
#include "../helpers.h"
#include "init.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir;
static char err[1024];
static struct hora_train_config cfg;

static void setup(void)
{
	dir = th_tmpdir();
	th_make_dataset(dir, 600, 200, 8, 4, 11, 0);
	hora_train_config_defaults(&cfg);
	snprintf(cfg.data, sizeof(cfg.data), "%s", dir);
	cfg.hidden[0] = 16;
	cfg.epochs = 3;
	cfg.batch_size = 20;
	cfg.quiet = 1;
}
static void teardown(void)
{
	th_rmrf(dir);
	free(dir);
}
TestSuite(core_train, .init = setup, .fini = teardown);

Test(core_train, learns_synthetic_task)
{
	struct hora_train_result r;
	cfg.epochs = 1;
	cr_assert_eq(hora_train_run(&cfg, &r, err, sizeof(err)), 0, "%s", err);
	double first = r.last.loss;
	hora_train_result_deinit(&r);
	cfg.epochs = 6;
	cr_assert_eq(hora_train_run(&cfg, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_lt(r.last.loss, first * 0.5, "loss %.4f after 6 epochs vs %.4f after 1",
		     r.last.loss, first);
	cr_assert_gt(r.last.val_acc, 0.95);
	cr_assert_eq(r.steps, 6 * 30);
	hora_train_result_deinit(&r);
}

Test(core_train, same_seed_bitwise_identical)
{
	struct hora_train_result a, b, c;
	cfg.optim.momentum = 0.9;
	cfg.optim.nesterov = 1;
	cr_assert_eq(hora_train_run(&cfg, &a, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(hora_train_run(&cfg, &b, err, sizeof(err)), 0, "%s", err);
	cfg.seed = 43;
	cr_assert_eq(hora_train_run(&cfg, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(a.nparams, b.nparams);
	cr_assert_eq(memcmp(a.params, b.params, a.nparams * sizeof(float)), 0);
	cr_assert_neq(memcmp(a.params, c.params, a.nparams * sizeof(float)), 0);
	hora_train_result_deinit(&a);
	hora_train_result_deinit(&b);
	hora_train_result_deinit(&c);
}

Test(core_train, adam_and_softmax_regression_learn)
{
	struct hora_train_result r;
	snprintf(cfg.model, sizeof(cfg.model), "softmax_regression");
	cfg.optim.kind = HORA_OPTIM_ADAM;
	cfg.optim.lr = 0.01;
	cfg.optim.warmup_epochs = 0.5;
	cr_assert_eq(hora_train_run(&cfg, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(r.nparams, 64 * 4 + 4);
	cr_assert_gt(r.last.val_acc, 0.95);
	hora_train_result_deinit(&r);
}

Test(core_train, metrics_jsonl_has_every_key_per_epoch)
{
	char *m = th_path(dir, "m.jsonl");
	snprintf(cfg.metrics, sizeof(cfg.metrics), "%s", m);
	FILE *f = fopen(m, "w"); /* an earlier job's lines: a job that does not resume starts afresh */
	cr_assert(f && fputs("{\"epoch\":7,\"loss\":1}\n{\"epoch\":8,\"loss\":1}\n", f) >= 0 && !fclose(f));
	cr_assert_eq(hora_train_run(&cfg, NULL, err, sizeof(err)), 0, "%s", err);
	f = fopen(m, "r");
	cr_assert_not_null(f);
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), f)) {
		n++;
		char want[32];
		snprintf(want, sizeof(want), "{\"epoch\":%d,", n);
		cr_assert(strstr(line, want), "line %d: %s", n, line);
		const char *keys[] = {"\"loss\":", "\"acc\":", "\"val_loss\":", "\"val_acc\":",
				      "\"samples_per_s\":", "\"seconds\":"};
		for (int k = 0; k < 6; k++)
			cr_assert(strstr(line, keys[k]), "line %d lacks %s: %s", n, keys[k], line);
	}
	fclose(f);
	cr_assert_eq(n, 3);
	free(m);
}

/* a metrics "file" that is none (/dev/null here; /dev/stdout, a pipe):
 * written to, nothing to empty */
Test(core_train, metrics_to_dev_null_trains)
{
	snprintf(cfg.metrics, sizeof(cfg.metrics), "/dev/null");
	cr_assert_eq(hora_train_run(&cfg, NULL, err, sizeof(err)), 0, "%s", err);
}

Test(core_train, bad_data_is_a_data_error)
{
	char *p = th_path(dir, "t10k-labels-idx1-ubyte");
	cr_assert_eq(truncate(p, 30), 0);
	free(p);
	cr_assert_eq(hora_train_run(&cfg, NULL, err, sizeof(err)), HORA_ERR_DATA);
	cr_assert(strstr(err, "t10k-labels-idx1-ubyte: truncated"), "err: %s", err);
}

Test(core_train, unknown_model_is_a_model_error)
{
	snprintf(cfg.model, sizeof(cfg.model), "nope");
	cr_assert_eq(hora_train_run(&cfg, NULL, err, sizeof(err)), HORA_ERR_MODEL);
	cr_assert(strstr(err, "unknown model 'nope'"), "err: %s", err);
}

Test(core_train, divergence_is_reported)
{
	cfg.optim.lr = 1e30;
	cfg.optim.schedule = HORA_LR_CONSTANT;
	int rc = hora_train_run(&cfg, NULL, err, sizeof(err));
	cr_assert_eq(rc, HORA_ERR_DIVERGED, "rc %d: %s", rc, err);
	cr_assert(strstr(err, "lower the learning rate"), "err: %s", err);
}

/* The reference model on the real digits: 3 epochs already reach 92 %. */
Test(core_train, mnist_mlp_on_real_mnist, .timeout = 120)
{
	struct stat st;
	const char *data = HORA_SOURCE_DIR "/data/mnist";
	char img[1200];
	snprintf(img, sizeof(img), "%s/train-images-idx3-ubyte", data);
	if (stat(img, &st) != 0)
		cr_skip_test("%s missing: run deploy/get-data.sh (deploy/test.sh does)", img);
	hora_train_config_defaults(&cfg);
	snprintf(cfg.data, sizeof(cfg.data), "%s", data);
	cfg.epochs = 3;
	cfg.quiet = 1;
	struct hora_train_result r;
	cr_assert_eq(hora_train_run(&cfg, &r, err, sizeof(err)), 0, "%s", err);
	cr_log_info("mnist_mlp 3 epochs: val_acc %.4f", r.last.val_acc);
	cr_assert_gt(r.last.val_acc, 0.90, "val_acc %.4f", r.last.val_acc);
	cr_assert_eq(r.nparams, 101770);
	hora_train_result_deinit(&r);
}

/* ---- the stall abort: an error of the training loop, not an exit --------------------- */

struct stall_rank {
	const char *file;
	int proc, rc;
	char err[1024];
};

/* rank 0 waits in the job agreement for rank 1, which sleeps 3 s first;
 * rank 0's inspector (abort after 1 s) stops it */
static void *stall_rank_main(void *p)
{
	struct stall_rank *x = p;
	struct hora_init_opts o;
	hora_init_opts_defaults(&o);
	o.cluster_file = x->file;
	o.proc = x->proc;
	o.secret_env = getenv("HORA_SECRET"); /* hora_init_with reads no environment */
	struct hora_comm *c;
	if ((x->rc = hora_init_with(&o, &c, x->err, sizeof(x->err))))
		return NULL;
	if (x->proc == 0)
		hora_comm_set_stall(c, 30, 1);
	else
		sleep(3);
	struct hora_train_config tc = cfg;
	tc.stall_warning_s = 30;
	tc.stall_abort_s = 1;
	struct hora_train_result res;
	x->rc = hora_train_run_comm(c, &tc, &res, x->err, sizeof(x->err));
	hora_train_result_deinit(&res);
	hora_finalize(c);
	return NULL;
}

/* The stall inspector called _exit(3) from its thread: the process died
 * inside the library. Now the collective fails with HORA_ERR_STALL and the
 * report, and hora_train_run_comm returns it (the CLI exits 3 on it). */
Test(core_train, stall_abort_is_the_error_the_training_loop_returns, .timeout = 60)
{
	setenv("HORA_SECRET", "stall-unit-test-secret-0123456789", 1);
	const int port = th_port_base(4);
	char *file = th_path(dir, "cluster.yaml");
	FILE *f = fopen(file, "w");
	cr_assert(f);
	fprintf(f, "cluster:\n  name: stall\n  port_base: %d\n  seeds: [\"127.0.0.1:%d\"]\n  nodes:\n"
		   "    - {host: 127.0.0.1, workers: 2}\nmembership:\n  probe_interval_ms: 100\n"
		   "  suspect_timeout_ms: 1000\n",
		port, port + 1);
	fclose(f);
	struct stall_rank rk[2] = {{.file = file, .proc = 0}, {.file = file, .proc = 1}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, stall_rank_main, &rk[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(rk[0].rc, HORA_ERR_STALL, "rank 0: rc %d: %s", rk[0].rc, rk[0].err);
	/* the agreement's first call, the readiness-shaped allreduce (train.c
	 * agree: an elastic worker's first call too), is where rank 0 waits */
	cr_assert(strstr(rk[0].err, "agreeing on the job: stall: rank 0 waited ") &&
			  strstr(rk[0].err, " s in allreduce #1 (stall_abort_s 1); ranks that have not reached "
					    "it: rank 1 (no collective yet). Stopping this worker."),
		  "rank 0: %s", rk[0].err);
	/* the late rank fails (it does not hang), on its own terms */
	cr_assert(rk[1].rc != 0 && rk[1].rc != HORA_ERR_STALL, "rank 1: rc %d: %s", rk[1].rc, rk[1].err);
	free(file);
}
