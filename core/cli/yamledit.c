/* yamledit.c - --set edits written into a copy of a YAML file (yamledit.h),
 * through libyaml's document API: load, change the nodes, dump. Node
 * pointers move when nodes are added (the node array grows), so the walk
 * keeps node ids and looks the node up again after each addition. */
#include "yamledit.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* One segment of a dotted key: "name" or "name[i]" (idx -1: no index). */
struct seg {
	char name[HORA_SETARG_KEY_MAX];
	long idx;
};

static int next_seg(const char **p, struct seg *s)
{
	size_t k = 0;
	s->idx = -1;
	while (**p && **p != '.' && **p != '[' && k + 1 < sizeof(s->name))
		s->name[k++] = *(*p)++;
	s->name[k] = 0;
	if (!k)
		return -1;
	if (**p == '[') {
		char *end;
		s->idx = strtol(*p + 1, &end, 10);
		if (end == *p + 1 || *end != ']' || s->idx < 0)
			return -1;
		*p = end + 1;
	}
	if (**p == '.')
		(*p)++;
	else if (**p)
		return -1;
	return 0;
}

static int add_scalar(yaml_document_t *d, const char *v)
{
	return yaml_document_add_scalar(d, NULL, (const yaml_char_t *)v, (int)strlen(v), YAML_ANY_SCALAR_STYLE);
}

/* The value id of key name in mapping map (0: none) and the pair's index. */
static int map_find(yaml_document_t *d, int map, const char *name, size_t *at)
{
	yaml_node_t *m = yaml_document_get_node(d, map);
	for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(name) &&
		    !memcmp(k->data.scalar.value, name, k->data.scalar.length)) {
			*at = (size_t)(p - m->data.mapping.pairs.start);
			return p->value;
		}
	}
	return 0;
}

/* In mapping map, the value of name: set to node `set` when set > 0, else
 * found or added as a new node of type `make`. Returns the node id, 0 on
 * failure. */
static int map_child(yaml_document_t *d, int map, const char *name, int set, yaml_node_type_t make)
{
	size_t at;
	int v = map_find(d, map, name, &at);
	if (v && set) {
		yaml_document_get_node(d, map)->data.mapping.pairs.start[at].value = set;
		return set;
	}
	if (v)
		return v;
	v = set ? set
		: make == YAML_SEQUENCE_NODE ? yaml_document_add_sequence(d, NULL, YAML_ANY_SEQUENCE_STYLE)
					     : yaml_document_add_mapping(d, NULL, YAML_ANY_MAPPING_STYLE);
	int k = add_scalar(d, name);
	if (!v || !k || !yaml_document_append_mapping_pair(d, map, k, v))
		return 0;
	return v;
}

/* Item idx of sequence seq: set to node `set` (> 0), else the item, or a
 * new mapping when idx is its length. 0 when idx is past that. */
static int seq_child(yaml_document_t *d, int seq, long idx, int set, long *len)
{
	yaml_node_t *s = yaml_document_get_node(d, seq);
	*len = s->data.sequence.items.top - s->data.sequence.items.start;
	if (idx < *len) {
		if (set)
			s->data.sequence.items.start[idx] = set;
		return s->data.sequence.items.start[idx];
	}
	if (idx > *len)
		return 0;
	int v = set ? set : yaml_document_add_mapping(d, NULL, YAML_ANY_MAPPING_STYLE);
	return v && yaml_document_append_sequence_item(d, seq, v) ? v : 0;
}

/* Set key to value in the document whose root mapping is root. */
static int set_key(yaml_document_t *d, int root, const char *key, const char *value, char *why, size_t cap)
{
	const char *p = key;
	int cur = root;
	struct seg s;
	while (*p) {
		if (next_seg(&p, &s)) {
			snprintf(why, cap, "not a key of the file (a dotted path, e.g. cluster.nodes[0].host)");
			return -1;
		}
		const bool last = !*p;
		if (yaml_document_get_node(d, cur)->type != YAML_MAPPING_NODE) {
			snprintf(why, cap, "the value above '%s' is not a mapping in the file", s.name);
			return -1;
		}
		int val = last && s.idx < 0 ? add_scalar(d, value) : 0;
		cur = map_child(d, cur, s.name, val, s.idx >= 0 ? YAML_SEQUENCE_NODE : YAML_MAPPING_NODE);
		if (cur && s.idx >= 0) {
			long len;
			if (yaml_document_get_node(d, cur)->type != YAML_SEQUENCE_NODE) {
				snprintf(why, cap, "'%s' is not a list in the file", s.name);
				return -1;
			}
			int item = last ? add_scalar(d, value) : 0;
			if (!(cur = seq_child(d, cur, s.idx, item, &len))) {
				snprintf(why, cap, "'%s' has %ld item(s): index %ld is beyond one past its end", s.name,
					 len, s.idx);
				return -1;
			}
		}
		if (!cur) {
			snprintf(why, cap, "out of memory");
			return -1;
		}
	}
	return 0;
}

static int load(yaml_document_t *d, const char *text, size_t len, char *err, size_t errlen)
{
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	int ok = yaml_parser_load(&parser, d);
	if (!ok)
		snprintf(err, errlen, "%zu:%zu: %s", parser.problem_mark.line + 1, parser.problem_mark.column + 1,
			 parser.problem ? parser.problem : "malformed YAML");
	yaml_parser_delete(&parser);
	if (!ok)
		return -1;
	if (!yaml_document_get_root_node(d)) { /* an empty file: a document of one mapping */
		yaml_document_delete(d);
		if (!yaml_document_initialize(d, NULL, NULL, NULL, 1, 1) ||
		    !yaml_document_add_mapping(d, NULL, YAML_BLOCK_MAPPING_STYLE)) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	}
	return 0;
}

static int dump(yaml_document_t *d, FILE *out, char *err, size_t errlen)
{
	yaml_emitter_t em;
	if (!yaml_emitter_initialize(&em)) {
		yaml_document_delete(d);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	yaml_emitter_set_output_file(&em, out);
	yaml_emitter_set_width(&em, -1); /* long values stay on one line */
	yaml_emitter_set_unicode(&em, 1);
	int ok = yaml_emitter_open(&em) && yaml_emitter_dump(&em, d) && yaml_emitter_close(&em) &&
		 yaml_emitter_flush(&em);
	if (!ok)
		snprintf(err, errlen, "cannot write the copy: %s", em.problem ? em.problem : "write failed");
	yaml_emitter_delete(&em);
	yaml_document_delete(d); /* dump deleted it unless it failed early; deleting twice is safe */
	return ok ? 0 : -1;
}

int hora_yaml_edit(const char *text, size_t len, const struct hora_setargs *sets, FILE *out, char *err,
		   size_t errlen)
{
	yaml_document_t d;
	if (load(&d, text, len, err, errlen))
		return -1;
	if (yaml_document_get_root_node(&d)->type != YAML_MAPPING_NODE) {
		yaml_document_delete(&d);
		snprintf(err, errlen, "the file is not a mapping of sections");
		return -1;
	}
	for (int i = 0; i < sets->n; i++) {
		char key[HORA_SETARG_KEY_MAX], why[512];
		const char *value;
		if (hora_setarg_split(sets->arg[i], key, &value, why, sizeof(why)) ||
		    set_key(&d, 1, key, value, why, sizeof(why))) {
			yaml_document_delete(&d);
			snprintf(err, errlen, "--set '%s': %s", sets->arg[i], why);
			return -1;
		}
	}
	return dump(&d, out, err, errlen);
}
