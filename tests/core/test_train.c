/* test_train.c - the training loop: learns, is bitwise deterministic per
 * seed, writes metrics, refuses bad data; and the reference model on the
 * real MNIST digits (data/mnist, made by deploy/get-data.sh). */
#include "hora.h"
#include "../helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <sys/stat.h>

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
	cr_assert_eq(hora_train_run(&cfg, NULL, err, sizeof(err)), 0, "%s", err);
	FILE *f = fopen(m, "r");
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
