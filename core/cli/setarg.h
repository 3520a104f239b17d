/* setarg.h - the one `--set KEY=VALUE` parser of the command line, shared by
 * `hora train`, `hora launch` and `hora worker`.
 *
 * A list of --set arguments is applied in command-line order: keys under
 * `train.` to a struct hora_train_config (hora_config_set), every other key
 * to a struct hora_cluster_config (hora_cluster_set), with the validation of
 * the file's keys. The launcher applies the list to validate it and passes
 * the same list to every worker, which applies it after reading the file, so
 * every --set reaches every worker. Not part of libhora.
 */
#ifndef HORA_CLI_SETARG_H
#define HORA_CLI_SETARG_H

#include <stdbool.h>
#include <stddef.h>

struct hora_cluster_config;
struct hora_train_config;

#define HORA_SETARG_MAX 64
#define HORA_SETARG_KEY_MAX 256

struct hora_setargs {
	const char *arg[HORA_SETARG_MAX]; /* "KEY=VALUE", borrowed from argv */
	int n;
};

/* Append one --set argument. 0, or -1 with a message in err (too many). */
int hora_setargs_add(struct hora_setargs *s, const char *arg, char *err, size_t errlen);
/* Split "KEY=VALUE": key gets KEY, *value points into arg after the '='.
 * 0, or -1 with "--set wants KEY=VALUE (got '...')" in err. */
int hora_setarg_split(const char *arg, char key[HORA_SETARG_KEY_MAX], const char **value, char *err,
		      size_t errlen);
/* Whether KEY=VALUE sets a train.* key. */
bool hora_setarg_is_train(const char *arg);
/* Apply every non-train --set to cc, in order (a hora_cluster_edit_fn:
 * arg is the struct hora_setargs). 0, or HORA_ERR_CONFIG with
 * "--set 'KEY=VALUE': problem" in err. */
int hora_setargs_apply_cluster(struct hora_cluster_config *cc, void *setargs, char *err,
			       size_t errlen);
/* Apply every train.* --set to tc, in order; same returns. */
int hora_setargs_apply_train(struct hora_train_config *tc, const struct hora_setargs *s, char *err,
			     size_t errlen);

#endif
