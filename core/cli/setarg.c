/* setarg.c - `--set KEY=VALUE`: splitting and applying (setarg.h). */
#include "setarg.h"

#include "cluster.h"
#include "hora.h"

#include <stdio.h>
#include <string.h>

int hora_setargs_add(struct hora_setargs *s, const char *arg, char *err, size_t errlen)
{
	if (s->n == HORA_SETARG_MAX) {
		snprintf(err, errlen, "at most %d --set arguments (got more, '%s')", HORA_SETARG_MAX, arg);
		return -1;
	}
	s->arg[s->n++] = arg;
	return 0;
}

int hora_setarg_split(const char *arg, char key[HORA_SETARG_KEY_MAX], const char **value, char *err,
		      size_t errlen)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || (size_t)(eq - arg) >= HORA_SETARG_KEY_MAX) {
		snprintf(err, errlen, "--set wants KEY=VALUE with a key of 1..%d bytes (got '%s')",
			 HORA_SETARG_KEY_MAX - 1, arg);
		return -1;
	}
	memcpy(key, arg, (size_t)(eq - arg));
	key[eq - arg] = 0;
	*value = eq + 1;
	return 0;
}

bool hora_setarg_is_train(const char *arg)
{
	return !strncmp(arg, "train.", 6);
}

/* Apply the --set arguments of one kind (train or not) through set. */
static int apply(const struct hora_setargs *s, bool train,
		 int (*set)(void *cfg, const char *key, const char *value, char *err, size_t errlen),
		 void *cfg, char *err, size_t errlen)
{
	for (int i = 0; i < s->n; i++) {
		char key[HORA_SETARG_KEY_MAX], why[1024];
		const char *value;
		if (hora_setarg_split(s->arg[i], key, &value, why, sizeof(why))) {
			snprintf(err, errlen, "%s", why);
			return HORA_ERR_CONFIG;
		}
		if (hora_setarg_is_train(key) != train)
			continue;
		if (set(cfg, key, value, why, sizeof(why))) {
			snprintf(err, errlen, "--set '%s': %s", s->arg[i], why);
			return HORA_ERR_CONFIG;
		}
	}
	return 0;
}

static int set_cluster(void *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	return hora_cluster_set(cfg, key, value, err, errlen);
}

static int set_train(void *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	return hora_config_set(cfg, key, value, err, errlen);
}

int hora_setargs_apply_cluster(struct hora_cluster_config *cc, void *setargs, char *err,
			       size_t errlen)
{
	return apply(setargs, false, set_cluster, cc, err, errlen);
}

int hora_setargs_apply_train(struct hora_train_config *tc, const struct hora_setargs *s, char *err,
			     size_t errlen)
{
	return apply(s, true, set_train, tc, err, errlen);
}
