/* yamlwalk.c - the YAML walker behind every configuration file (see yamlwalk.h). */
#include "yamlwalk.h"

#include "hora.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YAML_MAX_VISITS 10000

static const char *const sections[] = {"cluster", "transport", "membership", "collectives", "train"};

struct walk {
	yaml_document_t *doc;
	const char *file;
	const struct hora_yaml_spec *spec;
	void *cfg;
	char *err;
	size_t errlen;
	int visits; /* nodes walked: bounds alias expansion ("billion laughs") */
	int depth;  /* mappings entered: bounds nesting through aliases */
};

/* path matches pattern, where "[*]" in the pattern matches any "[digits]" */
static bool match(const char *path, const char *pat)
{
	while (*pat) {
		if (!strncmp(pat, "[*]", 3)) {
			if (*path++ != '[')
				return false;
			if (*path < '0' || *path > '9')
				return false;
			while (*path >= '0' && *path <= '9')
				path++;
			if (*path++ != ']')
				return false;
			pat += 3;
		} else if (*pat++ != *path++) {
			return false;
		}
	}
	return !*path;
}

static bool in(const char *path, const char *const *list, int n)
{
	for (int i = 0; i < n; i++)
		if (match(path, list[i]))
			return true;
	return false;
}

static int at(struct walk *w, const yaml_node_t *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
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

static int set_at(struct walk *w, const yaml_node_t *keyn, const yaml_node_t *val, const char *key,
		  const char *value)
{
	char msg[512];
	if (w->spec->set(w->cfg, key, value, (int)val->start_mark.line + 1,
			 (int)val->start_mark.column + 1, msg, sizeof(msg)))
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
	const struct hora_yaml_spec *sp = w->spec;
	if (++w->visits > YAML_MAX_VISITS)
		return at(w, val, "more than %d values (alias expansion?); refusing the file",
			  YAML_MAX_VISITS);
	if (in(path, sp->skip, sp->nskip)) {
		if (val->type != YAML_MAPPING_NODE && val->type != YAML_SCALAR_NODE)
			return at(w, val, "%s must be a mapping or a scalar, not %s", path,
				  kind_name(val));
		return 0;
	}
	if (val->type == YAML_SEQUENCE_NODE && in(path, sp->map_lists, sp->nmap_lists)) {
		int i = 0;
		for (yaml_node_item_t *it = val->data.sequence.items.start;
		     it < val->data.sequence.items.top; it++, i++) {
			yaml_node_t *item = yaml_document_get_node(w->doc, *it);
			char ip[256];
			int len = snprintf(ip, sizeof(ip), "%s[%d]", path, i);
			if (len < 0 || (size_t)len >= sizeof(ip))
				return at(w, val, "key path too long");
			if (!item || item->type != YAML_MAPPING_NODE)
				return at(w, item ? item : val, "%s must be a mapping, not %s", ip,
					  item ? kind_name(item) : "empty");
			int rc = walk_mapping(w, item, ip);
			if (rc)
				return rc;
		}
		return 0;
	}
	switch (val->type) {
	case YAML_SCALAR_NODE:
		return set_at(w, keyn, val, path, (const char *)val->data.scalar.value);
	case YAML_MAPPING_NODE:
		return walk_mapping(w, val, path);
	case YAML_SEQUENCE_NODE: {
		if (!in(path, sp->lists, sp->nlists)) {
			char msg[512];
			/* a key at all? ask the setter with a value no key accepts */
			if (sp->set(w->cfg, path, "\x01", 0, 0, msg, sizeof(msg)) &&
			    strstr(msg, "unknown key"))
				return at(w, keyn, "%s", msg);
			return at(w, val, "%s must be a scalar, not a list", path);
		}
		char buf[2048] = "";
		size_t len = 0;
		for (yaml_node_item_t *it = val->data.sequence.items.start;
		     it < val->data.sequence.items.top; it++) {
			yaml_node_t *item = yaml_document_get_node(w->doc, *it);
			if (!item || item->type != YAML_SCALAR_NODE)
				return at(w, item ? item : val, "%s items must be scalars", path);
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

static int walk_pairs(struct walk *w, const yaml_node_t *map, const char *prefix)
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
		if (!*prefix) {
			if (!in(name, sections, 5))
				return at(w, k, "unknown section '%s' (expected cluster, transport, "
						"membership, collectives or train)", name);
			if (v->type != YAML_MAPPING_NODE)
				return at(w, v, "%s must be a mapping, not %s", name, kind_name(v));
		}
		char msg[512];
		if (w->spec->refused && w->spec->refused(w->cfg, path, msg, sizeof(msg)))
			return at(w, k, "%s", msg);
		int rc = walk_value(w, k, v, path);
		if (rc)
			return rc;
	}
	return 0;
}

/* The file's nesting was checked on its events (check_events); aliases can
 * still nest a mapping deeper, so the walk counts too. */
static int walk_mapping(struct walk *w, const yaml_node_t *map, const char *prefix)
{
	if (w->depth >= HORA_YAML_MAX_DEPTH)
		return at(w, map, "nested more than %d levels deep (through aliases); refusing the file",
			  HORA_YAML_MAX_DEPTH);
	w->depth++;
	int rc = walk_pairs(w, map, prefix);
	w->depth--;
	return rc;
}

/* "file:line:col: invalid YAML: problem context", at the problem if it has
 * a position, else at its context */
static int syntax_error(const char *path, const yaml_parser_t *p, char *err, size_t errlen)
{
	const yaml_mark_t *m = p->context ? &p->context_mark : &p->problem_mark;
	if (p->problem_mark.line || p->problem_mark.column)
		m = &p->problem_mark;
	if (p->error == YAML_MEMORY_ERROR)
		snprintf(err, errlen, "%s: out of memory parsing YAML", path);
	else
		snprintf(err, errlen, "%s:%zu:%zu: invalid YAML: %s%s%s", path, m->line + 1,
			 m->column + 1, p->problem ? p->problem : "syntax error", p->context ? " " : "",
			 p->context ? p->context : "");
	return HORA_ERR_CONFIG;
}

/* The whole file, at most HORA_YAML_MAX_BYTES, in a buffer the caller frees. */
static int read_file(const char *path, unsigned char **out, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return HORA_ERR_CONFIG;
	}
	size_t cap = 4096, n = 0;
	unsigned char *buf = malloc(cap);
	int rc = 0;
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap || cap > HORA_YAML_MAX_BYTES)
			break;
		unsigned char *b2 = realloc(buf, cap * 2);
		if (!b2)
			free(buf);
		buf = b2;
		cap *= 2;
	}
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory reading it", path);
		rc = -ENOMEM;
	} else if (ferror(f)) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		rc = HORA_ERR_CONFIG;
	} else if (n > HORA_YAML_MAX_BYTES) {
		snprintf(err, errlen, "%s: larger than %d KiB; a configuration file is a few KiB", path,
			 HORA_YAML_MAX_BYTES >> 10);
		rc = HORA_ERR_CONFIG;
	}
	fclose(f);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = n;
	return 0;
}

/* The event stream, before anything is loaded: nesting deeper than
 * HORA_YAML_MAX_DEPTH is refused where it happens (libyaml's scanner and
 * loader take time quadratic in the depth: 200,000 levels were minutes of
 * CPU), and so is a second document (it would be ignored). */
static int check_events(const char *path, const unsigned char *buf, size_t len, char *err,
			size_t errlen)
{
	yaml_parser_t p;
	if (!yaml_parser_initialize(&p)) {
		snprintf(err, errlen, "%s: cannot initialise the YAML parser", path);
		return HORA_ERR_CONFIG;
	}
	yaml_parser_set_input_string(&p, buf, len);
	int depth = 0, docs = 0, rc = 0;
	for (;;) {
		yaml_event_t e;
		if (!yaml_parser_parse(&p, &e)) {
			rc = syntax_error(path, &p, err, errlen);
			break;
		}
		const yaml_event_type_t t = e.type;
		const yaml_mark_t m = e.start_mark;
		yaml_event_delete(&e);
		if (t == YAML_STREAM_END_EVENT)
			break;
		if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
			snprintf(err, errlen, "%s:%zu:%zu: a second YAML document: a configuration file "
					      "holds one", path, m.line + 1, m.column + 1);
			rc = HORA_ERR_CONFIG;
			break;
		}
		if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
			if (++depth > HORA_YAML_MAX_DEPTH) {
				snprintf(err, errlen, "%s:%zu:%zu: nested more than %d levels deep; "
						      "refusing the file", path, m.line + 1, m.column + 1,
					 HORA_YAML_MAX_DEPTH);
				rc = HORA_ERR_CONFIG;
				break;
			}
		} else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
			depth--;
		}
	}
	yaml_parser_delete(&p);
	return rc;
}

static int walk_document(const char *path, yaml_document_t *doc, const struct hora_yaml_spec *spec,
			 void *cfg, char *err, size_t errlen)
{
	struct walk w = {doc, path, spec, cfg, err, errlen, 0, 0};
	yaml_node_t *root = yaml_document_get_root_node(doc);
	if (!root) {
		snprintf(err, errlen, "%s: empty file, expected a mapping with a '%s' section", path,
			 spec->required_section);
		return HORA_ERR_CONFIG;
	}
	if (root->type != YAML_MAPPING_NODE)
		return at(&w, root, "top level must be a mapping, not %s", kind_name(root));
	return walk_mapping(&w, root, "");
}

int hora_yaml_walk(const char *path, const struct hora_yaml_spec *spec, void *cfg, char *err,
		   size_t errlen)
{
	unsigned char *buf;
	size_t len;
	int rc = read_file(path, &buf, &len, err, errlen);
	if (rc)
		return rc;
	if ((rc = check_events(path, buf, len, err, errlen))) {
		free(buf);
		return rc;
	}
	yaml_parser_t parser;
	yaml_document_t doc;
	if (!yaml_parser_initialize(&parser)) {
		free(buf);
		snprintf(err, errlen, "%s: cannot initialise the YAML parser", path);
		return HORA_ERR_CONFIG;
	}
	yaml_parser_set_input_string(&parser, buf, len);
	if (!yaml_parser_load(&parser, &doc)) {
		rc = syntax_error(path, &parser, err, errlen);
	} else {
		rc = walk_document(path, &doc, spec, cfg, err, errlen);
		yaml_document_delete(&doc);
	}
	yaml_parser_delete(&parser);
	free(buf);
	return rc;
}
