/* registry.c - built-in models by name, and dlopen-loaded plugin models.
 *
 * Plugin contract (model/README.md): the .so exports a
 * `const struct hora_model_ops hora_model_plugin_v1` whose abi_version is 1.
 * As NCCL does for its net plugins, the loader asks for the newest symbol it
 * knows first; there is only v1 today.
 */
#include "nn.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

extern const struct hora_model_ops hora_model_mlp_ops;
extern const struct hora_model_ops hora_model_softmax_ops;

static const struct hora_model_ops *const builtins[] = {
	&hora_model_mlp_ops,
	&hora_model_softmax_ops,
};
#define NBUILTINS (int)(sizeof(builtins) / sizeof(builtins[0]))

const struct hora_model_ops *hora_model_find(const char *name)
{
	for (int i = 0; i < NBUILTINS; i++)
		if (strcmp(builtins[i]->name, name) == 0)
			return builtins[i];
	return NULL;
}

const char *hora_model_builtin_name(int i)
{
	return i >= 0 && i < NBUILTINS ? builtins[i]->name : NULL;
}

int hora_model_builtin_trace(const struct hora_model_ops *ops, void *state,
			     struct hora_gemm_trace *t)
{
	for (int i = 0; i < NBUILTINS; i++)
		if (builtins[i] == ops) {
			((struct hora_nn_common *)state)->trace = t;
			return 0;
		}
	return -ENOTSUP;
}

struct hora_model_plugin {
	void *handle;
	const struct hora_model_ops *ops;
};

int hora_model_plugin_open(const char *path, struct hora_model_plugin **out, char *err,
			   size_t errlen)
{
	struct stat st;
	*out = NULL;
	if (stat(path, &st) != 0) {
		snprintf(err, errlen, "model plugin %s: %s", path, strerror(errno));
		return -ENOENT;
	}
	/* RTLD_LOCAL: two plugins may define the same internal names. */
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "model plugin %s: cannot load: %s", path, dlerror());
		return -ENOENT;
	}
	dlerror();
	const struct hora_model_ops *ops = dlsym(h, HORA_MODEL_PLUGIN_SYMBOL);
	const char *why = NULL;
	int rc = 0;
	if (!ops) {
		snprintf(err, errlen,
			 "model plugin %s: missing entry symbol '%s' (export a const struct "
			 "hora_model_ops with that name, see model/README.md)",
			 path, HORA_MODEL_PLUGIN_SYMBOL);
		rc = -ENOEXEC;
		goto fail;
	}
	if (ops->abi_version != HORA_MODEL_ABI_VERSION) {
		snprintf(err, errlen, "model plugin %s: ABI version %u not supported (this is %d)",
			 path, ops->abi_version, HORA_MODEL_ABI_VERSION);
		rc = -EPROTO;
		goto fail;
	}
	if (!ops->name || !*ops->name)
		why = "name";
	else if (!ops->create)
		why = "create";
	else if (!ops->destroy)
		why = "destroy";
	else if (!ops->layout)
		why = "layout";
	else if (!ops->init_params)
		why = "init_params";
	else if (!ops->forward_backward)
		why = "forward_backward";
	else if (!ops->evaluate)
		why = "evaluate";
	if (why) {
		snprintf(err, errlen, "model plugin %s: mandatory slot '%s' is NULL", path, why);
		rc = -EPROTO;
		goto fail;
	}
	struct hora_model_plugin *p = malloc(sizeof(*p));
	if (!p) {
		rc = -ENOMEM;
		snprintf(err, errlen, "model plugin %s: out of memory", path);
		goto fail;
	}
	p->handle = h;
	p->ops = ops;
	*out = p;
	return 0;
fail:
	dlclose(h);
	return rc;
}

const struct hora_model_ops *hora_model_plugin_ops(const struct hora_model_plugin *p)
{
	return p->ops;
}

void hora_model_plugin_close(struct hora_model_plugin *p)
{
	if (!p)
		return;
	dlclose(p->handle);
	free(p);
}

int hora_model_resolve(const char *spec, const struct hora_model_ops **ops,
		       struct hora_model_plugin **plugin, char *err, size_t errlen)
{
	size_t len = strlen(spec);
	*plugin = NULL;
	*ops = NULL;
	if (strchr(spec, '/') || (len > 3 && strcmp(spec + len - 3, ".so") == 0)) {
		int rc = hora_model_plugin_open(spec, plugin, err, errlen);
		if (rc)
			return rc;
		*ops = (*plugin)->ops;
		return 0;
	}
	*ops = hora_model_find(spec);
	if (*ops)
		return 0;
	int k = snprintf(err, errlen, "unknown model '%s' (built-in:", spec);
	for (int i = 0; i < NBUILTINS && k > 0 && (size_t)k < errlen; i++)
		k += snprintf(err + k, errlen - (size_t)k, " %s", builtins[i]->name);
	if (k > 0 && (size_t)k < errlen)
		snprintf(err + k, errlen - (size_t)k, "; or a path to a .so plugin)");
	return -ENOENT;
}
