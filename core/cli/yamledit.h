/* yamledit.h - a YAML file with `--set KEY=VALUE` edits written into it, for
 * a command that reads the cluster file itself (`hora launch FILE --set ...
 * -- CMD`, `hora run --set ...`): the copy names each edited key with its new
 * value, so the command sees what `hora worker` sees when it applies the same
 * --set list. Not part of libhora. */
#ifndef HORA_CLI_YAMLEDIT_H
#define HORA_CLI_YAMLEDIT_H

#include "setarg.h"

#include <stddef.h>
#include <stdio.h>

/* Parse text (one YAML document), apply every KEY=VALUE of sets in order
 * and write the result to out. A key is a dotted path ("membership.
 * suspect_timeout_ms", "cluster.nodes[1].host"): its value is replaced by
 * VALUE as a scalar (the file's loaders read a scalar's text, so
 * "a:1,b:2" for a list key reads as that list, as --set does), missing
 * mappings on the way are added, and "name[i]" is item i of the list
 * "name", i at most its length (one past the end adds an item). Comments
 * are not kept. 0, or -1 with "--set 'KEY=VALUE': problem" (or the parse
 * error) in err. */
int hora_yaml_edit(const char *text, size_t len, const struct hora_setargs *sets, FILE *out, char *err,
		   size_t errlen);

#endif
