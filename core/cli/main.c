/* main.c - the `hora` command line.
 *
 *   hora train [--config F.yaml] [flags]    train one worker
 *   hora launch CLUSTER.yaml [--set K=V]... every worker of a cluster file (launch.c)
 *   hora run -np N [-H ...] CMD ARGS...     N copies of a command (run.c, horovodrun's interface)
 *   hora seed | hora worker [flags]         membership, or a worker's job (worker.c)
 *   hora bench train [flags]                training-step vs GEMM bench
 *   hora gpu-info                           CUDA devices (when built with CUDA)
 *   hora version
 *
 * Exit codes: 0 success, 1 runtime failure, 2 bad input (usage, config,
 * model, data). Fail-fast handling belongs here, not in the library.
 */
#include "cli.h"
#include "config.h"
#include "env.h"
#include "hora.h"
#include "hora_config.h"
#include "hora_model.h"
#include "gpu/hora_gpu.h"
#include "setarg.h"
#if HORA_WITH_BENCH
#include "bench/bench.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void usage_train(FILE *f)
{
	fprintf(f,
		"usage: hora train [--config FILE.yaml] [options]\n"
		"  --model NAME|PATH.so   built-in model (mnist_mlp, softmax_regression) or plugin\n"
		"  --hidden 128[,64...]   hidden layer widths (mnist_mlp)\n"
		"  --data DIR             directory with train-*/t10k-* IDX files (raw or .gz)\n"
		"  --epochs N  --batch-size N  --seed N\n"
		"  --optimizer sgd|adam  --lr X  --momentum X  --nesterov  --weight-decay X\n"
		"  --warmup-epochs X  --schedule constant|cosine\n"
		"  --metrics FILE.jsonl   one JSON object per epoch\n"
		"  --blas-threads N       BLAS threads for this worker (default 1)\n"
		"  --progress bar|lines  --quiet\n"
		"  --set KEY=VALUE        any config key, e.g. train.optimizer.beta2=0.99\n"
		"Flags override the config file. Exit status: 0 ok, 1 failure, 2 bad input.\n");
}

/* The config file (pass 1), then every flag over it in order (pass 2).
 * 0, 2 (bad input, said) or -1 (--help, printed). */
static int train_flags(int argc, char **argv, struct hora_train_config *cfg)
{
	enum { O_NESTEROV = 256, O_SET, O_PROGRESS, O_QUIET, O_HELP };
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"model", required_argument, 0, 'm'},
		{"hidden", required_argument, 0, 'H'},
		{"data", required_argument, 0, 'd'},
		{"epochs", required_argument, 0, 'e'},
		{"batch-size", required_argument, 0, 'b'},
		{"seed", required_argument, 0, 's'},
		{"optimizer", required_argument, 0, 'o'},
		{"lr", required_argument, 0, 'l'},
		{"momentum", required_argument, 0, 'M'},
		{"weight-decay", required_argument, 0, 'w'},
		{"warmup-epochs", required_argument, 0, 'W'},
		{"schedule", required_argument, 0, 'S'},
		{"metrics", required_argument, 0, 'j'},
		{"blas-threads", required_argument, 0, 't'},
		{"nesterov", no_argument, 0, O_NESTEROV},
		{"set", required_argument, 0, O_SET},
		{"progress", required_argument, 0, O_PROGRESS},
		{"quiet", no_argument, 0, O_QUIET},
		{"help", no_argument, 0, O_HELP},
		{0, 0, 0, 0},
	};
	static const struct { int opt; const char *key; } keymap[] = {
		{'m', "train.model"}, {'H', "train.hidden"}, {'d', "train.data"},
		{'e', "train.epochs"}, {'b', "train.batch_size"}, {'s', "train.seed"},
		{'o', "train.optimizer.name"}, {'l', "train.optimizer.lr"},
		{'M', "train.optimizer.momentum"}, {'w', "train.optimizer.weight_decay"},
		{'W', "train.optimizer.warmup_epochs"}, {'S', "train.optimizer.schedule"},
		{'j', "train.metrics"}, {'t', "train.blas_threads"},
	};
	char err[1024];
	/* Pass 1: the config file, so that flags (pass 2) override it. */
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
		if (c == 'c' && hora_config_load_yaml(cfg, optarg, err, sizeof(err))) {
			fprintf(stderr, "hora train: %s\n", err);
			return 2;
		}
	opterr = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const char *key = NULL, *val = optarg;
		char kv[HORA_SETARG_KEY_MAX];
		for (size_t i = 0; i < sizeof(keymap) / sizeof(keymap[0]); i++)
			if (keymap[i].opt == c)
				key = keymap[i].key;
		switch (c) {
		case 'c':
			continue;
		case O_NESTEROV:
			key = "train.optimizer.nesterov";
			val = "true";
			break;
		case O_SET:
			if (hora_setarg_split(optarg, kv, &val, err, sizeof(err))) {
				fprintf(stderr, "hora train: %s\n", err);
				return 2;
			}
			key = kv;
			break;
		case O_PROGRESS:
			if (!strcmp(optarg, "bar"))
				cfg->progress = 1;
			else if (!strcmp(optarg, "lines"))
				cfg->progress = 0;
			else {
				fprintf(stderr, "hora train: --progress must be bar or lines\n");
				return 2;
			}
			continue;
		case O_QUIET:
			cfg->quiet = 1;
			continue;
		case O_HELP:
			usage_train(stdout);
			return -1;
		case '?':
			usage_train(stderr);
			return 2;
		}
		if (!key) {
			usage_train(stderr);
			return 2;
		}
		if (hora_config_set(cfg, key, val, err, sizeof(err))) {
			fprintf(stderr, "hora train: %s\n", err);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hora train: unexpected argument '%s'\n", argv[optind]);
		usage_train(stderr);
		return 2;
	}
	return 0;
}

static int cmd_train(int argc, char **argv)
{
	struct hora_train_config cfg;
	char err[1024];
	hora_train_config_defaults(&cfg);
	int rc = train_flags(argc, argv, &cfg);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (hora_config_single_worker_note(&cfg, err, sizeof(err)) > 0)
		fprintf(stderr, "hora train: note: %s\n", err);
	struct hora_train_result res;
	rc = hora_train_run(&cfg, &res, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "hora train: %s\n", err);
		return rc == HORA_ERR_CONFIG || rc == HORA_ERR_DATA || rc == HORA_ERR_MODEL ? 2 : 1;
	}
	if (!cfg.quiet)
		printf("final: val_acc %.4f val_loss %.4f after %d epochs (%lld steps)\n",
		       res.last.val_acc, res.last.val_loss, cfg.epochs, (long long)res.steps);
	hora_train_result_deinit(&res);
	return 0;
}

static int cmd_gpu_info(void)
{
	char buf[4096];
	int rc = hora_gpu_describe(buf, sizeof(buf));
	if (rc == -ENOTSUP) {
		printf("hora was built without CUDA (HORA_CUDA=OFF or nvcc/NCCL not found)\n");
		return 0;
	}
	printf("%s", buf);
	return rc < 0 ? 1 : 0;
}

/* `hora --version`: version.c. */
static int cmd_version(void)
{
	return hora_cmd_version();
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora <command> [options]\n"
		   "  train      train a model on one worker (hora train --help)\n"
		   "  launch     start every worker of a cluster file (hora launch --help)\n"
		   "  run        start N copies of a command: hora run -np 4 python3 train.py (hora run --help)\n"
		   "  seed       run a bare seed that admits joiners (hora seed --help)\n"
		   "  worker     join a cluster and follow its agreed views (hora worker --help)\n"
		   "  bench      benchmarks: hora bench train --help\n"
		   "  gpu-info   list CUDA devices and the NCCL version\n"
		   "  version    print the version and build features\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	char lerr[128];
	if (hora_env_apply_log(lerr, sizeof(lerr))) { /* the one environment read of every command */
		fprintf(stderr, "hora: %s\n", lerr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "train"))
		return cmd_train(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench")) {
#if HORA_WITH_BENCH
		return hora_bench_main(argc - 1, argv + 1);
#else
		fprintf(stderr, "hora: built without benches (HORA_BUILD_BENCH=OFF)\n");
		return 2;
#endif
	}
	if (!strcmp(cmd, "launch"))
		return hora_cmd_launch(argc - 1, argv + 1);
	if (!strcmp(cmd, "run"))
		return hora_cmd_run(argc - 1, argv + 1);
	if (!strcmp(cmd, "seed"))
		return hora_cmd_seed(argc - 1, argv + 1);
	if (!strcmp(cmd, "worker"))
		return hora_cmd_worker(argc - 1, argv + 1);
	if (!strcmp(cmd, "gpu-info"))
		return cmd_gpu_info();
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
		return cmd_version();
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "hora: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
