/* yamlwalk.h - walk a YAML configuration file into key=value settings (internal).
 *
 * The walker reads the file (at most HORA_YAML_MAX_BYTES), checks its event
 * stream first (nesting deeper than HORA_YAML_MAX_DEPTH and a second document
 * are refused there, in linear time), then loads it (libyaml document API)
 * and turns nested mappings into dotted keys ("train.optimizer.lr"), lists
 * of scalars into comma-joined values, lists of mappings into indexed keys
 * ("cluster.nodes[1].host"), and calls the spec's setter for each scalar
 * with its line and column. Errors come back as "file:line:col: message".
 * Aliases are bounded, duplicate keys refused, top-level sections checked
 * against cluster, transport, membership, collectives, train. The keys
 * themselves and their values are the sections' business (cfgkey.h).
 */
#ifndef HORA_CORE_YAMLWALK_H
#define HORA_CORE_YAMLWALK_H

#include <stddef.h>

#define HORA_YAML_MAX_DEPTH 64        /* nested mappings and lists */
#define HORA_YAML_MAX_BYTES (1 << 20) /* of a file */

struct hora_yaml_spec {
	/* Returns 0, or non-zero with a message (no position) in err; a message
	 * starting "unknown key" is placed at the key, others at the value. */
	int (*set)(void *cfg, const char *key, const char *value, int line, int col, char *err,
		   size_t errlen);
	/* optional: non-zero with a message (no position) in err when path is
	 * refused whatever its value; asked for every key before its value is
	 * walked, and the message placed at the key */
	int (*refused)(void *cfg, const char *path, char *err, size_t errlen);
	const char *const *skip; /* paths recognised but not read by this walk */
	int nskip;
	const char *const *lists; /* paths whose value is a list of scalars; "[*]" = any index */
	int nlists;
	const char *const *map_lists; /* paths whose value is a list of mappings */
	int nmap_lists;
	const char *required_section; /* for the "empty file" message */
};

/* Parse path and walk it. Returns 0, or HORA_ERR_CONFIG with the message. */
int hora_yaml_walk(const char *path, const struct hora_yaml_spec *spec, void *cfg, char *err,
		   size_t errlen);

#endif
