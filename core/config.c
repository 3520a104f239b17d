/* config.c - hora's configuration: defaults, key=value setters, YAML files.
 *
 * One code path validates every value: hora_config_set(key, value). The YAML
 * loader (libyaml document API) walks the file and calls it for each scalar,
 * prefixing errors with "file:line:col:" of the offending node. Command-line
 * flags and `--set key=value` go through the same setter, so a value is
 * accepted or refused the same way wherever it comes from.
 *
 * The cluster, transport and membership sections are read by cluster.c;
 * train.sync, train.checkpoint and train.gossip are recognised and skipped
 * (read by the distributed-training issue).
 */
#include "hora.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "cluster.h"
#include "yamlwalk.h"

_Static_assert(HORA_MAX_HIDDEN == 8, "keep HORA_MAX_HIDDEN == HORA_MODEL_MAX_HIDDEN");

void hora_train_config_defaults(struct hora_train_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->model, sizeof(c->model), "mnist_mlp");
	c->nhidden = 1;
	c->hidden[0] = 128;
	snprintf(c->data, sizeof(c->data), "data/mnist");
	c->epochs = 20;
	c->batch_size = 32;
	c->seed = 42;
	c->optim = (struct hora_optim_config){
		.kind = HORA_OPTIM_SGD,
		.lr = 0.1,
		.momentum = 0.0,
		.beta1 = 0.9,
		.beta2 = 0.999,
		.eps = 1e-8,
		.schedule = HORA_LR_COSINE,
		.scale_lr_by_size = 1,
	};
	c->blas_threads = 1;
	c->progress = -1;
	c->fusion = (struct hora_fusion_config){.threshold_bytes = 1 << 20, .cycle_time_ms = 0};
	c->stall_warning_s = 60;
	c->communication = 1;
}

static int parse_double(const char *v, double *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x))
		return -1;
	*out = x;
	return 0;
}


static int set_string(char *dst, size_t cap, const char *key, const char *v, char *err, size_t errlen)
{
	if (!*v)
		return hora_cfg_bad(err, errlen, "%s must not be empty", key);
	if (strlen(v) >= cap)
		return hora_cfg_bad(err, errlen, "%s is too long (%zu bytes, at most %zu)", key, strlen(v), cap - 1);
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

/* "128,64", "[128, 64]", "[]" or "" */
static int set_hidden(struct hora_train_config *c, const char *v, char *err, size_t errlen)
{
	int h[HORA_MAX_HIDDEN], n = 0;
	const char *p = v;
	while (*p == ' ' || *p == '[')
		p++;
	while (*p && *p != ']') {
		char *end;
		errno = 0;
		long x = strtol(p, &end, 10);
		if (end == p || errno || x <= 0 || x > 65536)
			return hora_cfg_bad(err, errlen,
				   "train.hidden must be a list of layer widths 1..65536 (got '%s')", v);
		if (n == HORA_MAX_HIDDEN)
			return hora_cfg_bad(err, errlen, "train.hidden has more than %d layers (got '%s')",
				   HORA_MAX_HIDDEN, v);
		h[n++] = (int)x;
		p = end;
		while (*p == ' ' || *p == ',')
			p++;
	}
	if (*p == ']')
		p++;
	while (*p == ' ')
		p++;
	if (*p)
		return hora_cfg_bad(err, errlen, "train.hidden must be a list of layer widths (got '%s')", v);
	c->nhidden = n;
	memcpy(c->hidden, h, sizeof(int) * (size_t)n);
	return 0;
}

int hora_config_set(struct hora_train_config *c, const char *key, const char *v, char *err,
		    size_t errlen)
{
	long i;
	double d;
	int b;
	struct hora_optim_config *o = &c->optim;

#define INT_KEY(k, lo, hi, field, what)                                                          \
	if (!strcmp(key, k)) {                                                                   \
		if (hora_cfg_int(v, lo, hi, &i))                                                    \
			return hora_cfg_bad(err, errlen, "%s must be %s (got '%s')", key, what, v);      \
		field = (int)i;                                                                  \
		return 0;                                                                        \
	}
#define REAL_KEY(k, ok, field, what)                                                             \
	if (!strcmp(key, k)) {                                                                   \
		if (parse_double(v, &d) || !(ok))                                                \
			return hora_cfg_bad(err, errlen, "%s must be %s (got '%s')", key, what, v);      \
		field = d;                                                                       \
		return 0;                                                                        \
	}
#define BOOL_KEY(k, field)                                                                       \
	if (!strcmp(key, k)) {                                                                   \
		if (hora_cfg_bool(v, &b))                                                           \
			return hora_cfg_bad(err, errlen, "%s must be true or false (got '%s')", key, v); \
		field = b;                                                                       \
		return 0;                                                                        \
	}

	if (!strcmp(key, "train.model") || !strcmp(key, "train.model.plugin"))
		return set_string(c->model, sizeof(c->model), key, v, err, errlen);
	if (!strcmp(key, "train.data"))
		return set_string(c->data, sizeof(c->data), key, v, err, errlen);
	if (!strcmp(key, "train.metrics"))
		return *v ? set_string(c->metrics, sizeof(c->metrics), key, v, err, errlen)
			  : (c->metrics[0] = 0, 0);
	if (!strcmp(key, "train.hidden"))
		return set_hidden(c, v, err, errlen);
	INT_KEY("train.epochs", 1, 1000000, c->epochs, "a positive integer")
	INT_KEY("train.batch_size", 1, 1 << 20, c->batch_size, "an integer in 1..1048576")
	INT_KEY("train.blas_threads", 1, 1024, c->blas_threads, "an integer in 1..1024")
	if (!strcmp(key, "train.seed")) {
		char *end;
		errno = 0;
		unsigned long long s = strtoull(v, &end, 0);
		if (errno || end == v || *end || *v == '-')
			return hora_cfg_bad(err, errlen, "%s must be a non-negative integer (got '%s')", key, v);
		c->seed = s;
		return 0;
	}
	if (!strcmp(key, "train.optimizer.name")) {
		if (!strcasecmp(v, "sgd"))
			o->kind = HORA_OPTIM_SGD;
		else if (!strcasecmp(v, "adam"))
			o->kind = HORA_OPTIM_ADAM;
		else
			return hora_cfg_bad(err, errlen, "%s must be sgd or adam (got '%s')", key, v);
		return 0;
	}
	if (!strcmp(key, "train.optimizer.schedule")) {
		if (!strcasecmp(v, "constant"))
			o->schedule = HORA_LR_CONSTANT;
		else if (!strcasecmp(v, "cosine"))
			o->schedule = HORA_LR_COSINE;
		else
			return hora_cfg_bad(err, errlen, "%s must be constant or cosine (got '%s')", key, v);
		return 0;
	}
	REAL_KEY("train.optimizer.lr", d > 0, o->lr, "a positive number")
	REAL_KEY("train.optimizer.momentum", d >= 0 && d < 1, o->momentum, "a number in [0, 1)")
	REAL_KEY("train.optimizer.beta1", d >= 0 && d < 1, o->beta1, "a number in [0, 1)")
	REAL_KEY("train.optimizer.beta2", d >= 0 && d < 1, o->beta2, "a number in [0, 1)")
	REAL_KEY("train.optimizer.eps", d > 0, o->eps, "a positive number")
	REAL_KEY("train.optimizer.weight_decay", d >= 0, o->weight_decay, "a non-negative number")
	REAL_KEY("train.optimizer.warmup_epochs", d >= 0, o->warmup_epochs, "a non-negative number")
	BOOL_KEY("train.optimizer.nesterov", o->nesterov)
	BOOL_KEY("train.optimizer.scale_lr_by_size", o->scale_lr_by_size)
	/* distributed training */
	if (!strcmp(key, "train.fusion.threshold_bytes")) {
		char *end;
		errno = 0;
		double x = strtod(v, &end);
		double mul = !strcmp(end, "KiB") ? 1024.0 : !strcmp(end, "MiB") ? 1048576.0 : !*end ? 1.0 : -1.0;
		if (errno || end == v || mul < 0 || x < 0 || x * mul > 1e12)
			return hora_cfg_bad(err, errlen, "%s must be a size in bytes, e.g. 1MiB (got '%s')", key, v);
		c->fusion.threshold_bytes = (size_t)(x * mul);
		return 0;
	}
	if (!strcmp(key, "train.fusion.compression")) {
		if (!strcmp(v, "none") || !strcmp(v, "fp16") || !strcmp(v, "bf16")) {
			c->fusion.compression = v[0] == 'n' ? 0 : v[0] == 'f' ? 1 : 2;
			return 0;
		}
		return hora_cfg_bad(err, errlen, "%s must be none, fp16 or bf16 (got '%s')", key, v);
	}
	REAL_KEY("train.fusion.cycle_time_ms", d >= 0, c->fusion.cycle_time_ms, "a non-negative number (0 = off)")
	if (!strcmp(key, "train.timeline"))
		return *v ? set_string(c->timeline, sizeof(c->timeline), key, v, err, errlen)
			  : (c->timeline[0] = 0, 0);
	if (!strcmp(key, "train.checkpoint.dir"))
		return *v ? set_string(c->checkpoint_dir, sizeof(c->checkpoint_dir), key, v, err, errlen)
			  : (c->checkpoint_dir[0] = 0, 0);
	INT_KEY("train.checkpoint.every_epochs", 0, 1000000, c->checkpoint_every, "a non-negative integer")
	BOOL_KEY("train.resume", c->resume)
	REAL_KEY("train.stall_warning_s", d > 0, c->stall_warning_s, "a positive number")
	REAL_KEY("train.stall_abort_s", d >= 0, c->stall_abort_s, "a non-negative number (0 = off)")
	BOOL_KEY("train.communication", c->communication)
#undef INT_KEY
#undef REAL_KEY
#undef BOOL_KEY
	return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
}

/* ---- YAML: the train section (core/yamlwalk.c walks the file) -------------------- */

static const char *const train_skip[] = {
	"cluster", "transport", "membership", "collectives", "train.sync", "train.gossip",
};
static const char *const train_lists[] = {"train.hidden"};

struct train_walk {
	struct hora_train_config cfg;
	int nkeys;
};

static int train_set(void *arg, const char *key, const char *value, int line, int col, char *err,
		     size_t errlen)
{
	(void)line;
	(void)col;
	struct train_walk *w = arg;
	w->nkeys++;
	return hora_config_set(&w->cfg, key, value, err, errlen);
}

int hora_config_load_yaml(struct hora_train_config *cfg, const char *path, char *err, size_t errlen)
{
	return hora_config_load_train(cfg, path, NULL, err, errlen);
}

int hora_config_load_train(struct hora_train_config *cfg, const char *path, int *nkeys, char *err,
			   size_t errlen)
{
	const struct hora_yaml_spec spec = {
		.set = train_set,
		.skip = train_skip,
		.nskip = sizeof(train_skip) / sizeof(train_skip[0]),
		.lists = train_lists,
		.nlists = 1,
		.required_section = "train",
	};
	/* Work on a copy so a failing file leaves cfg untouched. */
	struct train_walk *w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cfg = *cfg;
	w->nkeys = 0;
	int rc = hora_yaml_walk(path, &spec, w, err, errlen);
	if (!rc)
		*cfg = w->cfg;
	if (nkeys)
		*nkeys = w->nkeys;
	free(w);
	return rc;
}
