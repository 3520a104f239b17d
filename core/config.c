/* config.c - hora's configuration: defaults, key=value setters, YAML files.
 *
 * One code path validates every value: hora_config_set(key, value). The YAML
 * loader (libyaml document API) walks the file and calls it for each scalar,
 * prefixing errors with "file:line:col:" of the offending node. Command-line
 * flags and `--set key=value` go through the same setter, so a value is
 * accepted or refused the same way wherever it comes from.
 *
 * Sections that later parts of hora read (cluster, transport, membership,
 * train.sync, train.checkpoint) are recognised and skipped here.
 */
#include "hora.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

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
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return HORA_ERR_CONFIG;
}

static int parse_int(const char *v, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi)
		return -1;
	*out = x;
	return 0;
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

static int parse_bool(const char *v, int *out)
{
	static const char *const t[] = {"true", "yes", "on", "1"}, *const f[] = {"false", "no", "off", "0"};
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(v, t[i]))
			return *out = 1, 0;
		if (!strcasecmp(v, f[i]))
			return *out = 0, 0;
	}
	return -1;
}

static int set_string(char *dst, size_t cap, const char *key, const char *v, char *err, size_t errlen)
{
	if (!*v)
		return bad(err, errlen, "%s must not be empty", key);
	if (strlen(v) >= cap)
		return bad(err, errlen, "%s is too long (%zu bytes, at most %zu)", key, strlen(v), cap - 1);
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
			return bad(err, errlen,
				   "train.hidden must be a list of layer widths 1..65536 (got '%s')", v);
		if (n == HORA_MAX_HIDDEN)
			return bad(err, errlen, "train.hidden has more than %d layers (got '%s')",
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
		return bad(err, errlen, "train.hidden must be a list of layer widths (got '%s')", v);
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
		if (parse_int(v, lo, hi, &i))                                                    \
			return bad(err, errlen, "%s must be %s (got '%s')", key, what, v);      \
		field = (int)i;                                                                  \
		return 0;                                                                        \
	}
#define REAL_KEY(k, ok, field, what)                                                             \
	if (!strcmp(key, k)) {                                                                   \
		if (parse_double(v, &d) || !(ok))                                                \
			return bad(err, errlen, "%s must be %s (got '%s')", key, what, v);      \
		field = d;                                                                       \
		return 0;                                                                        \
	}
#define BOOL_KEY(k, field)                                                                       \
	if (!strcmp(key, k)) {                                                                   \
		if (parse_bool(v, &b))                                                           \
			return bad(err, errlen, "%s must be true or false (got '%s')", key, v); \
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
			return bad(err, errlen, "%s must be a non-negative integer (got '%s')", key, v);
		c->seed = s;
		return 0;
	}
	if (!strcmp(key, "train.optimizer.name")) {
		if (!strcasecmp(v, "sgd"))
			o->kind = HORA_OPTIM_SGD;
		else if (!strcasecmp(v, "adam"))
			o->kind = HORA_OPTIM_ADAM;
		else
			return bad(err, errlen, "%s must be sgd or adam (got '%s')", key, v);
		return 0;
	}
	if (!strcmp(key, "train.optimizer.schedule")) {
		if (!strcasecmp(v, "constant"))
			o->schedule = HORA_LR_CONSTANT;
		else if (!strcasecmp(v, "cosine"))
			o->schedule = HORA_LR_COSINE;
		else
			return bad(err, errlen, "%s must be constant or cosine (got '%s')", key, v);
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
#undef INT_KEY
#undef REAL_KEY
#undef BOOL_KEY
	return bad(err, errlen, "unknown key '%s'", key);
}

/* ---- YAML ------------------------------------------------------------------ */

/* Read by later issues (cluster start-up, transport, membership, training
 * modes); their schema lives in deploy/README.md. */
static const char *const reserved[] = {
	"cluster", "transport", "membership", "train.sync", "train.checkpoint", "train.gossip",
};

static int is_reserved(const char *path)
{
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		if (!strcmp(path, reserved[i]))
			return 1;
	return 0;
}

struct walk {
	yaml_document_t *doc;
	const char *file;
	struct hora_train_config *cfg;
	char *err;
	size_t errlen;
	int visits; /* nodes walked: bounds alias expansion ("billion laughs") */
};

#define YAML_MAX_VISITS 10000

static int at(struct walk *w, const yaml_node_t *n, const char *fmt, ...)
{
	int k = snprintf(w->err, w->errlen, "%s:%zu:%zu: ", w->file, n->start_mark.line + 1,
			 n->start_mark.column + 1);
	if (k > 0 && (size_t)k < w->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(w->err + k, w->errlen - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return HORA_ERR_CONFIG;
}

/* Apply key=value; an error points at the value (or at the key when the key
 * itself is unknown): "file:l:c: <setter message>". */
static int set_at(struct walk *w, const yaml_node_t *keyn, const yaml_node_t *val, const char *key,
		  const char *value)
{
	char msg[512];
	if (hora_config_set(w->cfg, key, value, msg, sizeof(msg)))
		return at(w, strncmp(msg, "unknown key", 11) ? val : keyn, "%s", msg);
	return 0;
}

static const char *kind_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "empty";
	}
}

static int walk_mapping(struct walk *w, const yaml_node_t *map, const char *prefix);

static int walk_value(struct walk *w, const yaml_node_t *keyn, const yaml_node_t *val,
		      const char *path)
{
	if (++w->visits > YAML_MAX_VISITS)
		return at(w, val, "more than %d values (alias expansion?); refusing the file",
			  YAML_MAX_VISITS);
	if (is_reserved(path)) {
		if (val->type != YAML_MAPPING_NODE && val->type != YAML_SCALAR_NODE)
			return at(w, val, "%s must be a mapping or a scalar, not %s", path,
				  kind_name(val));
		return 0;
	}
	switch (val->type) {
	case YAML_SCALAR_NODE:
		return set_at(w, keyn, val, path, (const char *)val->data.scalar.value);
	case YAML_MAPPING_NODE:
		return walk_mapping(w, val, path);
	case YAML_SEQUENCE_NODE: {
		if (strcmp(path, "train.hidden")) {
			char msg[512];
			/* Is it a key at all? Ask the setter with a dummy value. */
			if (hora_config_set(w->cfg, path, "\x01", msg, sizeof(msg)) &&
			    strstr(msg, "unknown key"))
				return at(w, keyn, "%s", msg);
			return at(w, val, "%s must be a scalar, not a list", path);
		}
		char buf[512] = "";
		size_t len = 0;
		for (yaml_node_item_t *it = val->data.sequence.items.start;
		     it < val->data.sequence.items.top; it++) {
			yaml_node_t *item = yaml_document_get_node(w->doc, *it);
			if (!item || item->type != YAML_SCALAR_NODE)
				return at(w, item ? item : val, "%s items must be integers", path);
			int k = snprintf(buf + len, sizeof(buf) - len, "%s%s", len ? "," : "",
					 (const char *)item->data.scalar.value);
			if (k < 0 || (size_t)k >= sizeof(buf) - len)
				return at(w, val, "%s is too long", path);
			len += (size_t)k;
		}
		return set_at(w, keyn, val, path, buf);
	}
	default:
		return at(w, val, "%s has no value", path);
	}
}

static int walk_mapping(struct walk *w, const yaml_node_t *map, const char *prefix)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
		yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
		if (!k || !v)
			return at(w, map, "malformed mapping");
		if (k->type != YAML_SCALAR_NODE)
			return at(w, k, "keys must be scalars, not %s", kind_name(k));
		const char *name = (const char *)k->data.scalar.value;
		/* duplicate keys: libyaml keeps both; we refuse */
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *k2 = yaml_document_get_node(w->doc, q->key);
			if (k2 && k2->type == YAML_SCALAR_NODE &&
			    !strcmp((const char *)k2->data.scalar.value, name))
				return at(w, k, "duplicate key '%s%s%s'", prefix, *prefix ? "." : "",
					  name);
		}
		char path[256];
		int n = snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", name);
		if (n < 0 || (size_t)n >= sizeof(path))
			return at(w, k, "key path too long");
		/* top level: only known sections */
		if (!*prefix && strcmp(name, "train") && !is_reserved(name))
			return at(w, k, "unknown section '%s' (expected cluster, transport, "
					"membership or train)", name);
		if (!*prefix && !strcmp(name, "train") && v->type != YAML_MAPPING_NODE)
			return at(w, v, "train must be a mapping, not %s", kind_name(v));
		int rc = walk_value(w, k, v, path);
		if (rc)
			return rc;
	}
	return 0;
}

int hora_config_load_yaml(struct hora_train_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return bad(err, errlen, "%s: cannot open: %s", path, strerror(errno));
	yaml_parser_t parser;
	yaml_document_t doc;
	int rc = 0;
	if (!yaml_parser_initialize(&parser)) {
		fclose(f);
		return bad(err, errlen, "%s: cannot initialise the YAML parser", path);
	}
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		const yaml_mark_t *m = parser.context ? &parser.context_mark : &parser.problem_mark;
		if (parser.problem_mark.line || parser.problem_mark.column)
			m = &parser.problem_mark;
		rc = bad(err, errlen, "%s:%zu:%zu: invalid YAML: %s%s%s", path, m->line + 1,
			 m->column + 1, parser.problem ? parser.problem : "syntax error",
			 parser.context ? " " : "", parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		fclose(f);
		return rc;
	}
	/* Work on a copy so a failing file leaves cfg untouched. */
	struct hora_train_config tmp = *cfg;
	struct walk w = {&doc, path, &tmp, err, errlen, 0};
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (!root)
		rc = bad(err, errlen, "%s: empty file, expected a mapping with a 'train' section", path);
	else if (root->type != YAML_MAPPING_NODE)
		rc = at(&w, root, "top level must be a mapping, not %s", kind_name(root));
	else
		rc = walk_mapping(&w, root, "");
	if (!rc)
		*cfg = tmp;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	fclose(f);
	return rc;
}
