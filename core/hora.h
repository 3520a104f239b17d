/* hora.h - public API of hora, the peer-to-peer distributed trainer.
 *
 * What is here today: error codes, logging, configuration (YAML + key=value
 * overrides), optimizers with a learning-rate schedule, and the single-worker
 * training loop. The model interface is in hora_model.h. Communicators and
 * collectives join this header with the transport and collectives issues.
 *
 * Conventions: functions return 0 or a negative code (-errno, or a HORA_ERR_*
 * below); hora_strerror() names any of them. Objects are opaque and come in
 * _create/_destroy pairs; _destroy(NULL) is a no-op. Unless a comment says
 * otherwise, an object is used by one thread at a time.
 *
 * Includes only <stddef.h> and <stdint.h>.
 */
#ifndef HORA_H
#define HORA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef HORA_API
#define HORA_API __attribute__((visibility("default")))
#endif

/* ---- errors ---------------------------------------------------------------- */

/* hora's own codes sit below -4096, clear of every -errno. */
enum hora_err {
	HORA_ERR_CONFIG = -10001, /* a configuration value or file is invalid */
	HORA_ERR_DATA = -10002,   /* a data file is missing or malformed */
	HORA_ERR_MODEL = -10003,  /* a model could not be loaded or built */
	HORA_ERR_DIVERGED = -10004, /* training produced a non-finite loss */
};

/* Static text for a code (negative errno or HORA_ERR_*). Never NULL. */
HORA_API const char *hora_strerror(int code);

/* Library version, "MAJOR.MINOR.PATCH". */
HORA_API const char *hora_version(void);

/* ---- logging (the only global state: one sink, stderr) ------------------- */

enum hora_log_level { HORA_LOG_ERROR, HORA_LOG_WARN, HORA_LOG_INFO, HORA_LOG_DEBUG };
/* Default INFO, or HORA_LOG=error|warn|info|debug from the environment. */
HORA_API void hora_log_set_level(enum hora_log_level level);

/* ---- optimizers -------------------------------------------------------------- */

enum hora_optim_kind { HORA_OPTIM_SGD, HORA_OPTIM_ADAM };
enum hora_lr_schedule { HORA_LR_CONSTANT, HORA_LR_COSINE };

struct hora_optim_config {
	enum hora_optim_kind kind;
	double lr;            /* base learning rate (before scaling by size) */
	double momentum;      /* SGD; 0 = plain SGD */
	int nesterov;         /* SGD; needs momentum > 0 */
	double beta1, beta2, eps; /* Adam */
	double weight_decay;  /* L2 added to the gradient (coupled), 0 = off */
	double warmup_epochs; /* linear warm-up length; 0 = none */
	enum hora_lr_schedule schedule; /* after warm-up */
	int scale_lr_by_size; /* lr *= number of workers (Horovod); 1 worker: no-op */
};

struct hora_optim;

/* An optimizer over nparams floats. Returns 0 and sets *out, or -EINVAL /
 * -ENOMEM. Destroy with hora_optim_destroy. */
HORA_API int hora_optim_create(const struct hora_optim_config *cfg, size_t nparams,
			       struct hora_optim **out);
HORA_API void hora_optim_destroy(struct hora_optim *opt);
/* One update: params -= f(grads) at learning rate lr. grads are not changed. */
HORA_API void hora_optim_step(struct hora_optim *opt, float *params, const float *grads,
			      double lr);
/* Learning rate at global step `step` (0-based) with steps_per_epoch steps an
 * epoch, total_steps in the run, for nworkers workers. */
HORA_API double hora_lr_at(const struct hora_optim_config *cfg, int64_t step,
			   int64_t steps_per_epoch, int64_t total_steps, int nworkers);

/* ---- configuration --------------------------------------------------------- */

#define HORA_PATH_MAX 1024
#define HORA_MAX_HIDDEN 8

struct hora_train_config {
	char model[HORA_PATH_MAX]; /* built-in name or path to a plugin .so */
	int nhidden;
	int hidden[HORA_MAX_HIDDEN];
	char data[HORA_PATH_MAX];  /* directory with train-* and t10k-* IDX files */
	int epochs;
	int batch_size;
	uint64_t seed;
	struct hora_optim_config optim;
	char metrics[HORA_PATH_MAX]; /* JSON-lines file, "" = none */
	int blas_threads;            /* BLAS threads per worker (default 1) */
	int progress;                /* -1 auto (a bar on a terminal), 0 lines, 1 bar */
	int quiet;                   /* no per-epoch output at all */
};

/* Defaults: mnist_mlp [128], data/mnist, 20 epochs, batch 32, SGD lr 0.1,
 * seed 42, 1 BLAS thread. */
HORA_API void hora_train_config_defaults(struct hora_train_config *cfg);

/* Apply one "key=value"-style setting, e.g. ("train.optimizer.lr", "0.05").
 * Keys are the YAML paths (deploy/README.md). Returns 0, or HORA_ERR_CONFIG
 * with "<key> must be ... (got '<value>')" in err. */
HORA_API int hora_config_set(struct hora_train_config *cfg, const char *key, const char *value,
			     char *err, size_t errlen);

/* Read a YAML cluster/train file into cfg (values not in the file keep their
 * current value). Returns 0, or HORA_ERR_CONFIG with
 * "<file>:<line>:<col>: <key> <problem>" in err. */
HORA_API int hora_config_load_yaml(struct hora_train_config *cfg, const char *path, char *err,
				   size_t errlen);

/* ---- training (one worker) ------------------------------------------------- */

struct hora_epoch_metrics {
	int epoch; /* 1-based */
	double loss, acc, val_loss, val_acc;
	double samples_per_s; /* training samples / training seconds */
	double seconds;       /* wall time of the epoch, evaluation included */
};

struct hora_train_result {
	struct hora_epoch_metrics last;
	int64_t steps;
	size_t nparams;
	float *params; /* final parameters (malloc'd); free with hora_train_result_deinit */
};

/* Train cfg->model on cfg->data for cfg->epochs, printing progress to stdout
 * unless quiet. Returns 0, HORA_ERR_CONFIG / HORA_ERR_MODEL / HORA_ERR_DATA
 * (reason in err), HORA_ERR_DIVERGED, or -errno. res may be NULL. */
HORA_API int hora_train_run(const struct hora_train_config *cfg, struct hora_train_result *res,
			    char *err, size_t errlen);
HORA_API void hora_train_result_deinit(struct hora_train_result *res);

#ifdef __cplusplus
}
#endif
#endif /* HORA_H */
