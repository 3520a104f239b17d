/* test_plugin.c - dlopen model plugins: a good one trains; bad ones give
 * errors that name the file and the problem. Plugin paths come from CMake
 * (PLUGIN_GOOD, PLUGIN_NOSYM, PLUGIN_BADABI, PLUGIN_NULLSLOT). */
#include "hora.h"
#include "hora_model.h"
#include "../helpers.h"

#include <criterion/criterion.h>
#include <errno.h>

Test(model_plugin, good_plugin_loads_and_learns)
{
	struct hora_model_plugin *p;
	char err[512];
	cr_assert_eq(hora_model_plugin_open(PLUGIN_GOOD, &p, err, sizeof(err)), 0, "%s", err);
	const struct hora_model_ops *ops = hora_model_plugin_ops(p);
	cr_assert_str_eq(ops->name, "tiny_linear");

	/* through the whole training loop */
	char *dir = th_tmpdir();
	th_make_dataset(dir, 300, 100, 6, 3, 5, 0);
	struct hora_train_config cfg;
	hora_train_config_defaults(&cfg);
	snprintf(cfg.model, sizeof(cfg.model), "%s", PLUGIN_GOOD);
	snprintf(cfg.data, sizeof(cfg.data), "%s", dir);
	cfg.epochs = 5;
	cfg.batch_size = 16;
	cfg.optim.lr = 0.5;
	cfg.quiet = 1;
	struct hora_train_result res;
	cr_assert_eq(hora_train_run(&cfg, &res, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(res.nparams, 36 * 3 + 3);
	cr_assert_gt(res.last.val_acc, 0.9, "val_acc %.3f", res.last.val_acc);
	hora_train_result_deinit(&res);
	hora_model_plugin_close(p);
	th_rmrf(dir);
	free(dir);
}

Test(model_plugin, resolve_treats_paths_as_plugins)
{
	const struct hora_model_ops *ops;
	struct hora_model_plugin *p;
	char err[512];
	cr_assert_eq(hora_model_resolve(PLUGIN_GOOD, &ops, &p, err, sizeof(err)), 0, "%s", err);
	cr_assert_not_null(p);
	cr_assert_str_eq(ops->name, "tiny_linear");
	hora_model_plugin_close(p);
}

Test(model_plugin, missing_symbol_is_a_clear_error)
{
	struct hora_model_plugin *p = (void *)1;
	char err[512];
	cr_assert_eq(hora_model_plugin_open(PLUGIN_NOSYM, &p, err, sizeof(err)), -ENOEXEC);
	cr_assert_null(p);
	cr_assert(strstr(err, PLUGIN_NOSYM) && strstr(err, "missing entry symbol 'hora_model_plugin_v1'"),
		  "err: %s", err);
}

Test(model_plugin, wrong_abi_version)
{
	struct hora_model_plugin *p;
	char err[512];
	cr_assert_eq(hora_model_plugin_open(PLUGIN_BADABI, &p, err, sizeof(err)), -EPROTO);
	cr_assert(strstr(err, "ABI version 99 not supported (this is 1)"), "err: %s", err);
}

Test(model_plugin, null_mandatory_slot)
{
	struct hora_model_plugin *p;
	char err[512];
	cr_assert_eq(hora_model_plugin_open(PLUGIN_NULLSLOT, &p, err, sizeof(err)), -EPROTO);
	cr_assert(strstr(err, "mandatory slot 'forward_backward' is NULL"), "err: %s", err);
}

Test(model_plugin, missing_file_and_non_elf)
{
	struct hora_model_plugin *p;
	char err[512];
	cr_assert_eq(hora_model_plugin_open("/nonexistent/libx.so", &p, err, sizeof(err)), -ENOENT);
	cr_assert(strstr(err, "/nonexistent/libx.so: No such file"), "err: %s", err);
	char *dir = th_tmpdir();
	char *f = th_path(dir, "libgarbage.so");
	th_write(f, "this is not an ELF file", 23, 0);
	cr_assert_eq(hora_model_plugin_open(f, &p, err, sizeof(err)), -ENOENT);
	cr_assert(strstr(err, "libgarbage.so: cannot load"), "err: %s", err);
	free(f);
	th_rmrf(dir);
	free(dir);
}
