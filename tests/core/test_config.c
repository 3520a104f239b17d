/* test_config.c - YAML config and key=value setters: good files, and bad
 * ones whose errors name file, line, column and key. */
#include "hora.h"
#include "../helpers.h"

#include <criterion/criterion.h>

static char *dir;
static char err[1024];
static struct hora_train_config cfg;

static void setup(void)
{
	dir = th_tmpdir();
	hora_train_config_defaults(&cfg);
	err[0] = 0;
}
static void teardown(void)
{
	th_rmrf(dir);
	free(dir);
}
TestSuite(core_config, .init = setup, .fini = teardown);

static int load(const char *yaml)
{
	char *p = th_path(dir, "c.yaml");
	th_write(p, yaml, strlen(yaml), 0);
	int rc = hora_config_load_yaml(&cfg, p, err, sizeof(err));
	free(p);
	return rc;
}

Test(core_config, full_file)
{
	int rc = load("cluster:\n"
		      "  name: demo\n"
		      "  seeds: [\"127.0.0.1:29500\"]\n"
		      "transport: {chunk_size: 1MiB}\n"
		      "train:\n"
		      "  model: softmax_regression\n"
		      "  hidden: [256, 64]\n"
		      "  data: data/fashion-mnist\n"
		      "  epochs: 3\n"
		      "  batch_size: 128\n"
		      "  seed: 7\n"
		      "  metrics: out.jsonl\n"
		      "  optimizer:\n"
		      "    name: adam\n"
		      "    lr: 0.001\n"
		      "    beta2: 0.99\n"
		      "    warmup_epochs: 0.5\n"
		      "    schedule: constant\n"
		      "    scale_lr_by_size: false\n"
		      "  sync: allreduce\n");
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert_str_eq(cfg.model, "softmax_regression");
	cr_assert_eq(cfg.nhidden, 2);
	cr_assert_eq(cfg.hidden[0], 256);
	cr_assert_eq(cfg.hidden[1], 64);
	cr_assert_str_eq(cfg.data, "data/fashion-mnist");
	cr_assert_eq(cfg.epochs, 3);
	cr_assert_eq(cfg.batch_size, 128);
	cr_assert_eq(cfg.seed, 7);
	cr_assert_str_eq(cfg.metrics, "out.jsonl");
	cr_assert_eq(cfg.optim.kind, HORA_OPTIM_ADAM);
	cr_assert_float_eq(cfg.optim.lr, 0.001, 1e-12);
	cr_assert_float_eq(cfg.optim.beta2, 0.99, 1e-12);
	cr_assert_float_eq(cfg.optim.warmup_epochs, 0.5, 1e-12);
	cr_assert_eq(cfg.optim.schedule, HORA_LR_CONSTANT);
	cr_assert_eq(cfg.optim.scale_lr_by_size, 0);
}

Test(core_config, plugin_model_mapping)
{
	cr_assert_eq(load("train:\n  model: {plugin: ./libfoo.so}\n"), 0, "%s", err);
	cr_assert_str_eq(cfg.model, "./libfoo.so");
}

Test(core_config, values_not_in_file_keep_defaults)
{
	cr_assert_eq(load("train:\n  epochs: 2\n"), 0, "%s", err);
	cr_assert_eq(cfg.batch_size, 32);
	cr_assert_str_eq(cfg.model, "mnist_mlp");
}

Test(core_config, wrong_type_names_line_column_key)
{
	cr_assert_eq(load("train:\n  model: mnist_mlp\n  epochs: many\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:11: train.epochs must be a positive integer (got 'many')"),
		  "err: %s", err);
}

Test(core_config, negative_batch)
{
	cr_assert_eq(load("train:\n    batch_size: -4\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:17: train.batch_size must be an integer in 1..1048576"),
		  "err: %s", err);
}

Test(core_config, unknown_key)
{
	cr_assert_eq(load("train:\n  optimizer:\n    lr: 0.1\n    mommentum: 0.9\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:4:5: unknown key 'train.optimizer.mommentum'"), "err: %s", err);
}

Test(core_config, unknown_section)
{
	cr_assert_eq(load("trian:\n  epochs: 1\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:1:1: unknown section 'trian'"), "err: %s", err);
}

Test(core_config, malformed_yaml_has_position)
{
	cr_assert_eq(load("train:\n  epochs: [1, 2\n  batch_size: 3\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:") && strstr(err, "invalid YAML"), "err: %s", err);
	cr_assert(strstr(err, "c.yaml:3:") || strstr(err, "c.yaml:2:"), "err: %s", err);
}

Test(core_config, bad_indentation)
{
	cr_assert_eq(load("train:\n  epochs: 1\n batch_size: 3\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:") && strstr(err, "invalid YAML"), "err: %s", err);
}

Test(core_config, list_where_scalar_expected)
{
	cr_assert_eq(load("train:\n  epochs: [1, 2]\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:11: train.epochs must be a scalar, not a list"), "err: %s", err);
}

Test(core_config, bad_hidden_item)
{
	cr_assert_eq(load("train:\n  hidden: [128, x]\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:11: train.hidden must be a list of layer widths"), "err: %s",
		  err);
}

Test(core_config, duplicate_key)
{
	cr_assert_eq(load("train:\n  epochs: 1\n  epochs: 2\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:3: duplicate key 'train.epochs'"), "err: %s", err);
}

Test(core_config, top_level_must_be_mapping)
{
	cr_assert_eq(load("- a\n- b\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:1:1: top level must be a mapping, not a list"), "err: %s", err);
}

Test(core_config, empty_file)
{
	cr_assert_eq(load(""), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "empty file"), "err: %s", err);
}

Test(core_config, missing_file)
{
	cr_assert_eq(hora_config_load_yaml(&cfg, "/nonexistent/x.yaml", err, sizeof(err)),
		     HORA_ERR_CONFIG);
	cr_assert(strstr(err, "/nonexistent/x.yaml: cannot open"), "err: %s", err);
}

Test(core_config, failing_file_leaves_config_untouched)
{
	cr_assert_eq(load("train:\n  epochs: 5\n  lr: 0.1\n"), HORA_ERR_CONFIG);
	cr_assert_eq(cfg.epochs, 20);
}

Test(core_config, binary_garbage)
{
	const char junk[] = "\x01\x02\xff\xfe: [\x00\x80";
	char *p = th_path(dir, "c.yaml");
	th_write(p, junk, sizeof(junk), 0);
	cr_assert_eq(hora_config_load_yaml(&cfg, p, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:"), "err: %s", err);
	free(p);
}

Test(core_config, setter_validates_like_yaml)
{
	cr_assert_eq(hora_config_set(&cfg, "train.optimizer.lr", "0", err, sizeof(err)),
		     HORA_ERR_CONFIG);
	cr_assert(strstr(err, "train.optimizer.lr must be a positive number (got '0')"), "%s", err);
	cr_assert_eq(hora_config_set(&cfg, "train.optimizer.momentum", "0.9", err, sizeof(err)), 0);
	cr_assert_float_eq(cfg.optim.momentum, 0.9, 1e-12);
	cr_assert_eq(hora_config_set(&cfg, "train.optimizer.nesterov", "yes", err, sizeof(err)), 0);
	cr_assert_eq(cfg.optim.nesterov, 1);
	cr_assert_eq(hora_config_set(&cfg, "train.hidden", "64,32", err, sizeof(err)), 0);
	cr_assert_eq(cfg.nhidden, 2);
	cr_assert_eq(hora_config_set(&cfg, "train.hidden", "[]", err, sizeof(err)), 0);
	cr_assert_eq(cfg.nhidden, 0);
	cr_assert_eq(hora_config_set(&cfg, "train.hidden", "1,2,3,4,5,6,7,8,9", err, sizeof(err)),
		     HORA_ERR_CONFIG);
	cr_assert_eq(hora_config_set(&cfg, "train.seed", "-1", err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert_eq(hora_config_set(&cfg, "nope", "1", err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "unknown key 'nope'"), "%s", err);
}
