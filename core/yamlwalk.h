/* yamlwalk.h - walk a YAML configuration file into key=value settings (internal).
 *
 * The walker (libyaml document API) turns nested mappings into dotted keys
 * ("train.optimizer.lr"), lists of scalars into comma-joined values, lists of
 * mappings into indexed keys ("cluster.nodes[1].host"), and calls the spec's
 * setter for each scalar with its line and column. Errors come back as
 * "file:line:col: message". Aliases are bounded, duplicate keys refused,
 * top-level sections checked against cluster, transport, membership, train.
 */
#ifndef HORA_CORE_YAMLWALK_H
#define HORA_CORE_YAMLWALK_H

#include <stddef.h>

struct hora_yaml_spec {
	/* Returns 0, or non-zero with a message (no position) in err; a message
	 * starting "unknown key" is placed at the key, others at the value. */
	int (*set)(void *cfg, const char *key, const char *value, int line, int col, char *err,
		   size_t errlen);
	const char *const *skip; /* paths recognised but not read by this walk */
	int nskip;
	const char *const *lists; /* paths whose value is a list of scalars; "[*]" = any index */
	int nlists;
	const char *const *map_lists; /* paths whose value is a list of mappings */
	int nmap_lists;
	const char *required_section; /* for the "empty file" message */
};

/* Value parsers shared by every section's setter. Each returns 0, or -1
 * when v is not entirely a valid value in range. */
int hora_cfg_int(const char *v, long lo, long hi, long *out);
int hora_cfg_bool(const char *v, int *out); /* true/yes/on/1, false/no/off/0 */
/* Format a message into err; returns HORA_ERR_CONFIG. */
int hora_cfg_bad(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Parse path and walk it. Returns 0, or HORA_ERR_CONFIG with the message. */
int hora_yaml_walk(const char *path, const struct hora_yaml_spec *spec, void *cfg, char *err,
		   size_t errlen);

#endif
