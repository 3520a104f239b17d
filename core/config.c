/* config.c - the train section: defaults, its key table, key=value
 * setter, the YAML loader, and the note on keys only distributed jobs read.
 *
 * One code path validates every value: hora_config_set(key, value), which
 * looks the key up in train_keys (cfgkey.c parses and checks the value). The
 * YAML loader (yamlwalk.c) walks the file and calls it for each scalar,
 * prefixing errors with "file:line:col:" of the offending node. Command-line
 * flags and `--set key=value` go through the same setter, so a value is
 * accepted or refused the same way wherever it comes from.
 *
 * Every key in the table acts. Keys of features this build does not have
 * (train.gossip, train.sync other than allreduce) are refused with the
 * reason, never accepted and ignored. The cluster, transport, membership and
 * collectives sections are read by cluster.c.
 */
#include "config.h"

#include "hora.h"
#include "cfgkey.h"
#include "yamlwalk.h"
#include "gpu/hora_gpu.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
	c->fusion = (struct hora_fusion_config){.threshold_bytes = 1 << 20, .cycle_time_ms = 0, .single_copy = 1};
	c->stall_warning_s = 60;
	c->communication = 1;
	c->elastic = (struct hora_elastic_config){.min_workers = 1, .commit_steps = 20, .wait_s = 600,
						  .restart_limit = 3};
	c->gossip = (struct hora_gossip_config){.topology = HORA_GOSSIP_EXPONENTIAL, .period = 1,
						.self_weight = -1, .adaptive = 1};
}

/* "128,64", "[128, 64]", "[]" or "" */
static int set_hidden(void *base, const char *key, const char *v, int line, int col, char *err,
		      size_t errlen)
{
	(void)line;
	(void)col;
	struct hora_train_config *c = base;
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
					    "%s must be a list of layer widths 1..65536 (got '%s')", key, v);
		if (n == HORA_MAX_HIDDEN)
			return hora_cfg_bad(err, errlen, "%s has more than %d layers (got '%s')", key,
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
		return hora_cfg_bad(err, errlen, "%s must be a list of layer widths (got '%s')", key, v);
	c->nhidden = n;
	memcpy(c->hidden, h, sizeof(int) * (size_t)n);
	return 0;
}

static int set_seed(void *base, const char *key, const char *v, int line, int col, char *err,
		    size_t errlen)
{
	(void)line;
	(void)col;
	char *end;
	errno = 0;
	unsigned long long s = strtoull(v, &end, 0);
	if (errno || end == v || *end || *v == '-')
		return hora_cfg_bad(err, errlen, "%s must be a non-negative integer (got '%s')", key, v);
	((struct hora_train_config *)base)->seed = s;
	return 0;
}

/* cpu, or cuda: only where the CUDA MLP can run here (the loader's reason
 * otherwise: not compiled, libhora_gpu.so not loadable, no device) */
static int set_device(void *base, const char *key, const char *v, int line, int col, char *err,
		      size_t errlen)
{
	(void)line;
	(void)col;
	struct hora_train_config *c = base;
	if (!strcasecmp(v, "cpu")) {
		c->device = HORA_DEVICE_CPU;
		return 0;
	}
	if (strcasecmp(v, "cuda"))
		return hora_cfg_bad(err, errlen, "%s must be cpu or cuda (got '%s')", key, v);
	char why[512] = "";
	const struct hora_gpu_ops *ops;
	int rc = hora_gpu_get(&ops, why, sizeof(why));
	if (!rc && !ops->mlp_create) {
		snprintf(why, sizeof(why), "%s is ABI version 1 (no CUDA MLP)", hora_gpu_loaded_path());
		rc = -ENOTSUP;
	}
	if (!rc && (rc = ops->device_count(why, sizeof(why))) > 0)
		rc = 0;
	if (rc)
		return hora_cfg_bad(err, errlen, "%s: cuda is not available here: %s", key,
				    why[0] ? why : "no CUDA device");
	c->device = HORA_DEVICE_CUDA;
	return 0;
}

/* gossip and elastic training do not go together in this build (a re-form
 * would hand every rank one rank's model, not the average) */
static int gossip_elastic(const struct hora_train_config *c, const char *key, char *err, size_t errlen)
{
	if (c->gossip.on && c->elastic.on && !strcmp(key, "train.sync"))
		return hora_cfg_bad(err, errlen, "train.sync: gossip is not available with train.elastic in "
						 "this build (use one of them)");
	if (c->gossip.on && c->elastic.on)
		return hora_cfg_bad(err, errlen, "%s: train.sync: gossip with train.elastic is not available "
						 "in this build (use one of them)", key);
	return 0;
}

/* allreduce (the default) or gossip; a train.gossip key turns gossip on
 * unless train.sync says allreduce, which is then a contradiction, in
 * either order */
static int set_sync(void *base, const char *key, const char *v, int line, int col, char *err,
		    size_t errlen)
{
	(void)line;
	(void)col;
	struct hora_train_config *c = base;
	if (!strcasecmp(v, "allreduce")) {
		if (c->gossip.on)
			return hora_cfg_bad(err, errlen, "%s: allreduce, but a train.gossip key came before it "
							 "(write gossip, or remove the train.gossip section)", key);
		c->gossip.sync_given = 1;
		return 0;
	}
	if (!strcasecmp(v, "gossip")) {
		c->gossip.on = 1;
		c->gossip.sync_given = 2;
		return gossip_elastic(c, key, err, errlen);
	}
	return hora_cfg_bad(err, errlen, "%s must be allreduce or gossip (got '%s')", key, v);
}

static const struct hora_cfg_name gossip_topologies[] = {
	{"ring", HORA_GOSSIP_RING},
	{"exponential", HORA_GOSSIP_EXPONENTIAL},
	{"one_peer_exponential", HORA_GOSSIP_ONE_PEER_EXPONENTIAL},
	{"random", HORA_GOSSIP_RANDOM},
	{NULL, 0}};
static const struct hora_cfg_name gossip_modes[] = {
	{"sync", HORA_GOSSIP_SYNC}, {"async", HORA_GOSSIP_ASYNC}, {NULL, 0}};

static const struct hora_cfg_key gossip_keys[] = {
	{"train.gossip.topology", HORA_CFG_NAME, HORA_CFG_FIELD(struct hora_train_config, gossip.topology),
	 .names = gossip_topologies},
	{"train.gossip.mode", HORA_CFG_NAME, HORA_CFG_FIELD(struct hora_train_config, gossip.mode),
	 .names = gossip_modes},
	{"train.gossip.period", HORA_CFG_INT, HORA_CFG_FIELD(struct hora_train_config, gossip.period),
	 .lo = 1, .hi = 1000000, .what = "an integer in 1..1000000"},
	{"train.gossip.self_weight", HORA_CFG_REAL, HORA_CFG_FIELD(struct hora_train_config, gossip.self_weight),
	 .lo = 0, .hi = 1, .what = "a number in [0, 1]"},
	{"train.gossip.consensus_every", HORA_CFG_INT,
	 HORA_CFG_FIELD(struct hora_train_config, gossip.consensus_every), .lo = 0, .hi = 1000000000,
	 .what = "a non-negative integer (steps; 0 = each epoch's end)"},
	{"train.gossip.adaptive", HORA_CFG_BOOL, HORA_CFG_FIELD(struct hora_train_config, gossip.adaptive)},
};

/* async pairs average 1/2 1/2 and have no barrier to measure consensus
 * mid-epoch at; adaptive peer choice is async's (sync's peers are the
 * graph's). Checked at whichever key comes second. */
static int gossip_mode_keys(const struct hora_train_config *c, const char *key, char *err, size_t errlen)
{
	const struct hora_gossip_config *g = &c->gossip;
	const char *other = g->mode != HORA_GOSSIP_ASYNC ? NULL
			    : g->self_weight >= 0	   ? "train.gossip.self_weight"
			    : g->consensus_every > 0	   ? "train.gossip.consensus_every"
							   : NULL;
	const char *why = other && !strcmp(other, "train.gossip.self_weight")
				  ? "its pairs average 1/2 and 1/2"
				  : "no barrier to measure at: it measures at each epoch's end";
	if (other && !strcmp(key, "train.gossip.mode"))
		return hora_cfg_bad(err, errlen, "%s: async does not take %s (%s)", key, other, why);
	if (other)
		return hora_cfg_bad(err, errlen, "%s does not apply to train.gossip.mode: async (%s)", other, why);
	if (!strcmp(key, "train.gossip.adaptive") && g->mode != HORA_GOSSIP_ASYNC)
		return hora_cfg_bad(err, errlen, "%s applies to train.gossip.mode: async (write the mode before "
						 "it)", key);
	return 0;
}

static int set_gossip(void *base, const char *key, const char *v, int line, int col, char *err,
		      size_t errlen)
{
	struct hora_train_config *c = base;
	const size_t n = sizeof(gossip_keys) / sizeof(gossip_keys[0]);
	const struct hora_cfg_key *k = hora_cfg_key_find(gossip_keys, n, key);
	if (!k)
		return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
	if (c->gossip.sync_given == 1)
		return hora_cfg_bad(err, errlen, "%s applies to train.sync: gossip, and train.sync is "
						 "allreduce", key);
	int rc = hora_cfg_key_set(k, base, key, v, line, col, err, errlen);
	if (rc)
		return rc;
	if ((rc = gossip_mode_keys(c, key, err, errlen)))
		return rc;
	c->gossip.on = 1;
	return gossip_elastic(c, key, err, errlen);
}

static const struct hora_cfg_name elastic_batches[] = {
	{"per_worker", HORA_ELASTIC_PER_WORKER}, {"global", HORA_ELASTIC_GLOBAL}, {NULL, 0}};

/* train.elastic.*: the section turns elastic training on (enabled: false
 * turns it off again); each key as its own table entry says */
static const struct hora_cfg_key elastic_keys[] = {
	{"train.elastic.enabled", HORA_CFG_BOOL, HORA_CFG_FIELD(struct hora_train_config, elastic.on)},
	{"train.elastic.min_workers", HORA_CFG_INT, HORA_CFG_FIELD(struct hora_train_config, elastic.min_workers),
	 .lo = 1, .hi = 4096, .what = "an integer in 1..4096"},
	{"train.elastic.max_workers", HORA_CFG_INT, HORA_CFG_FIELD(struct hora_train_config, elastic.max_workers),
	 .lo = 1, .hi = 4096, .what = "an integer in 1..4096"},
	{"train.elastic.commit_steps", HORA_CFG_INT,
	 HORA_CFG_FIELD(struct hora_train_config, elastic.commit_steps), .lo = 1, .hi = 1000000,
	 .what = "an integer in 1..1000000"},
	{"train.elastic.wait_s", HORA_CFG_REAL, HORA_CFG_FIELD(struct hora_train_config, elastic.wait_s),
	 .lo = 0, .hi = HUGE_VAL, .flags = HORA_CFG_LO_OPEN, .what = "a positive number"},
	{"train.elastic.batch", HORA_CFG_NAME, HORA_CFG_FIELD(struct hora_train_config, elastic.batch),
	 .names = elastic_batches},
	{"train.elastic.restart", HORA_CFG_BOOL, HORA_CFG_FIELD(struct hora_train_config, elastic.restart)},
	{"train.elastic.restart_limit", HORA_CFG_INT,
	 HORA_CFG_FIELD(struct hora_train_config, elastic.restart_limit), .lo = 0, .hi = 1000000,
	 .what = "a non-negative integer"},
};

static int set_elastic(void *base, const char *key, const char *v, int line, int col, char *err,
		       size_t errlen)
{
	struct hora_train_config *c = base;
	const size_t n = sizeof(elastic_keys) / sizeof(elastic_keys[0]);
	const struct hora_cfg_key *k = hora_cfg_key_find(elastic_keys, n, key);
	if (!k)
		return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
	int rc = hora_cfg_key_set(k, base, key, v, line, col, err, errlen);
	if (!rc && k == &elastic_keys[0])
		c->elastic.enabled_given = 1;
	else if (!rc && !c->elastic.enabled_given)
		c->elastic.on = 1;
	return rc ? rc : gossip_elastic(c, key, err, errlen);
}

static const struct hora_cfg_name optimizers[] = {
	{"sgd", HORA_OPTIM_SGD}, {"adam", HORA_OPTIM_ADAM}, {NULL, 0}};
static const struct hora_cfg_name schedules[] = {
	{"constant", HORA_LR_CONSTANT}, {"cosine", HORA_LR_COSINE}, {NULL, 0}};
static const struct hora_cfg_name compressions[] = {{"none", 0}, {"fp16", 1}, {"bf16", 2}, {NULL, 0}};

#define F(field) HORA_CFG_FIELD(struct hora_train_config, field)
#define TEXT(k, f, opt, fl) {k, (opt) ? HORA_CFG_TEXT_OR_NONE : HORA_CFG_TEXT, F(f), .flags = fl}
#define INT(k, f, l, h, w) {k, HORA_CFG_INT, F(f), .lo = l, .hi = h, .what = w}
#define REAL(k, f, l, h, fl, w) {k, HORA_CFG_REAL, F(f), .lo = l, .hi = h, .flags = fl, .what = w}
#define BOOL(k, f, fl) {k, HORA_CFG_BOOL, F(f), .flags = fl}
#define NAME(k, f, n, fl) {k, HORA_CFG_NAME, F(f), .names = n, .flags = fl}
#define FN(k, f) {k, HORA_CFG_FN, .fn = f}
#define POS HORA_CFG_LO_OPEN /* > lo */
#define UNIT HORA_CFG_HI_OPEN /* [0, 1) */
#define DIST HORA_CFG_DISTRIBUTED

/* Every train key (deploy/README.md has the schema). */
static const struct hora_cfg_key train_keys[] = {
	TEXT("train.model", model, 0, 0),
	TEXT("train.model.plugin", model, 0, 0),
	TEXT("train.data", data, 0, 0),
	TEXT("train.metrics", metrics, 1, 0),
	FN("train.hidden", set_hidden),
	INT("train.epochs", epochs, 1, 1000000, "a positive integer"),
	INT("train.batch_size", batch_size, 1, 1 << 20, "an integer in 1..1048576"),
	INT("train.blas_threads", blas_threads, 1, 1024, "an integer in 1..1024"),
	FN("train.seed", set_seed),
	FN("train.device", set_device),
	NAME("train.optimizer.name", optim.kind, optimizers, 0),
	NAME("train.optimizer.schedule", optim.schedule, schedules, 0),
	REAL("train.optimizer.lr", optim.lr, 0, HUGE_VAL, POS, "a positive number"),
	REAL("train.optimizer.momentum", optim.momentum, 0, 1, UNIT, "a number in [0, 1)"),
	REAL("train.optimizer.beta1", optim.beta1, 0, 1, UNIT, "a number in [0, 1)"),
	REAL("train.optimizer.beta2", optim.beta2, 0, 1, UNIT, "a number in [0, 1)"),
	REAL("train.optimizer.eps", optim.eps, 0, HUGE_VAL, POS, "a positive number"),
	REAL("train.optimizer.weight_decay", optim.weight_decay, 0, HUGE_VAL, 0, "a non-negative number"),
	REAL("train.optimizer.warmup_epochs", optim.warmup_epochs, 0, HUGE_VAL, 0,
	     "a non-negative number"),
	BOOL("train.optimizer.nesterov", optim.nesterov, 0),
	BOOL("train.optimizer.scale_lr_by_size", optim.scale_lr_by_size, 0),
	TEXT("train.checkpoint.dir", checkpoint_dir, 1, 0),
	INT("train.checkpoint.every_epochs", checkpoint_every, 0, 1000000, "a non-negative integer"),
	BOOL("train.resume", resume, 0),
	FN("train.sync", set_sync),
	FN("train.elastic.enabled", set_elastic),
	FN("train.elastic.min_workers", set_elastic),
	FN("train.elastic.max_workers", set_elastic),
	FN("train.elastic.commit_steps", set_elastic),
	FN("train.elastic.wait_s", set_elastic),
	FN("train.elastic.batch", set_elastic),
	FN("train.elastic.restart", set_elastic),
	FN("train.elastic.restart_limit", set_elastic),
	FN("train.gossip.topology", set_gossip),
	FN("train.gossip.mode", set_gossip),
	FN("train.gossip.period", set_gossip),
	FN("train.gossip.self_weight", set_gossip),
	FN("train.gossip.consensus_every", set_gossip),
	FN("train.gossip.adaptive", set_gossip),
	/* read by distributed jobs only (hora_config_single_worker_note) */
	{"train.fusion.threshold_bytes", HORA_CFG_SIZE, F(fusion.threshold_bytes), .lo = 0,
	 .hi = 1099511627776.0, .flags = DIST},
	REAL("train.fusion.cycle_time_ms", fusion.cycle_time_ms, 0, HUGE_VAL, DIST,
	     "a non-negative number (0 = off)"),
	NAME("train.fusion.compression", fusion.compression, compressions, DIST),
	TEXT("train.timeline", timeline, 1, DIST),
	REAL("train.stall_warning_s", stall_warning_s, 0, HUGE_VAL, POS | DIST, "a positive number"),
	REAL("train.stall_abort_s", stall_abort_s, 0, HUGE_VAL, DIST, "a non-negative number (0 = off)"),
	BOOL("train.communication", communication, DIST),
	BOOL("train.fusion.single_copy", fusion.single_copy, DIST),
	BOOL("train.balance", balance, DIST),
};
#define NKEYS (sizeof(train_keys) / sizeof(train_keys[0]))

int hora_config_set(struct hora_train_config *c, const char *key, const char *v, char *err,
		    size_t errlen)
{
	const struct hora_cfg_key *k = hora_cfg_key_find(train_keys, NKEYS, key);
	if (!k)
		return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
	return hora_cfg_key_set(k, c, key, v, 0, 0, err, errlen);
}

int hora_config_single_worker_note(const struct hora_train_config *c, char *msg, size_t len)
{
	struct hora_train_config d;
	hora_train_config_defaults(&d);
	int n = 0;
	size_t at = 0;
	for (size_t i = 0; i < NKEYS; i++) {
		const struct hora_cfg_key *k = &train_keys[i];
		const char *mine = (const char *)c + k->off, *dflt = (const char *)&d + k->off;
		const bool text = k->kind == HORA_CFG_TEXT || k->kind == HORA_CFG_TEXT_OR_NONE;
		if (!(k->flags & DIST))
			continue;
		if (text ? !strcmp(mine, dflt) : !memcmp(mine, dflt, k->size))
			continue;
		int w = snprintf(msg + at, at < len ? len - at : 0, "%s%s", n ? ", " : "", k->name);
		at += w > 0 ? (size_t)w : 0;
		n++;
	}
	if (c->gossip.on) { /* FN keys: no field to compare */
		int w = snprintf(msg + at, at < len ? len - at : 0, "%strain.sync: gossip (train.gossip)", n ? ", " : "");
		at += w > 0 ? (size_t)w : 0;
		n++;
	}
	if (n)
		snprintf(msg + at, at < len ? len - at : 0,
			 " appl%s only to distributed jobs (hora launch); this single-worker run "
			 "ignores %s", n > 1 ? "y" : "ies", n > 1 ? "them" : "it");
	else if (len)
		msg[0] = 0;
	return n;
}

/* ---- YAML: the train section (core/yamlwalk.c walks the file) -------------------- */

static const char *const train_skip[] = {"cluster", "transport", "membership", "collectives"};
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

/* a refused key is refused at the key, before its value (a whole
 * train.gossip section is one error, not one per key inside it) */
static int train_refused(void *arg, const char *path, char *err, size_t errlen)
{
	(void)arg;
	return hora_cfg_key_refused(hora_cfg_key_find(train_keys, NKEYS, path), path, err, errlen);
}

/* train.elastic and its keys only (hora_config_load_elastic) */
static bool elastic_key(const char *key)
{
	static const char pre[] = "train.elastic";
	return !strncmp(key, pre, sizeof(pre) - 1) && (!key[sizeof(pre) - 1] || key[sizeof(pre) - 1] == '.');
}

static int elastic_set(void *arg, const char *key, const char *value, int line, int col, char *err,
		       size_t errlen)
{
	return elastic_key(key) ? train_set(arg, key, value, line, col, err, errlen) : 0;
}

static int elastic_refused(void *arg, const char *path, char *err, size_t errlen)
{
	return elastic_key(path) ? train_refused(arg, path, err, errlen) : 0;
}

/* Walk path's train section with set/refused on a copy of *cfg (a failing
 * file leaves cfg untouched); *nkeys (optional) = the keys set. */
static int walk_train(struct hora_train_config *cfg, const char *path,
		      int (*set)(void *, const char *, const char *, int, int, char *, size_t),
		      int (*refused)(void *, const char *, char *, size_t), int *nkeys, char *err,
		      size_t errlen)
{
	const struct hora_yaml_spec spec = {
		.set = set,
		.refused = refused,
		.skip = train_skip,
		.nskip = sizeof(train_skip) / sizeof(train_skip[0]),
		.lists = train_lists,
		.nlists = 1,
		.required_section = "train",
	};
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

int hora_config_load_elastic(struct hora_elastic_config *el, const char *path, char *err, size_t errlen)
{
	struct hora_train_config *cfg = malloc(sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	hora_train_config_defaults(cfg);
	int rc = walk_train(cfg, path, elastic_set, elastic_refused, NULL, err, errlen);
	if (!rc)
		*el = cfg->elastic;
	free(cfg);
	return rc;
}

int hora_config_load_yaml(struct hora_train_config *cfg, const char *path, char *err, size_t errlen)
{
	return hora_config_load_train(cfg, path, NULL, err, errlen);
}

int hora_config_load_train(struct hora_train_config *cfg, const char *path, int *nkeys, char *err,
			   size_t errlen)
{
	return walk_train(cfg, path, train_set, train_refused, nkeys, err, errlen);
}
