/* hora_model.h - the model interface of hora (public API).
 *
 * A model is a `struct hora_model_ops`: a vtable of plain functions over an
 * opaque per-instance state. The runtime owns the parameters and the
 * gradients, one flat float buffer each; a model only describes how that
 * buffer is cut into layers (offsets) and reads/writes it through the spans
 * it is given. That is what lets the distributed optimizer fuse, broadcast,
 * checkpoint and average parameters as plain memory.
 *
 * This header is NOT the data loader, the optimizer or the training loop;
 * those live in core/hora.h. It includes only <stddef.h> and <stdint.h>.
 *
 * Plugins: a shared object exports `const struct hora_model_ops
 * hora_model_plugin_v1` (see HORA_MODEL_PLUGIN_SYMBOL and model/README.md).
 */
#ifndef HORA_MODEL_H
#define HORA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef HORA_API
#define HORA_API __attribute__((visibility("default")))
#endif

#define HORA_MODEL_ABI_VERSION 1
#define HORA_MODEL_PLUGIN_SYMBOL "hora_model_plugin_v1"
#define HORA_MODEL_MAX_HIDDEN 8
#define HORA_MODEL_NAME_MAX 64

/* What a model is built from. Filled by the runtime from flags/YAML. */
struct hora_model_config {
	int input_dim;   /* features per sample (784 for MNIST) */
	int num_classes; /* outputs (10 for MNIST) */
	int nhidden;     /* number of hidden layers, 0..HORA_MODEL_MAX_HIDDEN */
	int hidden[HORA_MODEL_MAX_HIDDEN];
	int max_batch;   /* largest batch forward_backward/evaluate will see */
};

/* One layer's slice of the flat parameter (and gradient) buffer, in floats.
 * Layers are contiguous, ordered input to output, and tile the buffer. */
struct hora_model_layer {
	char name[HORA_MODEL_NAME_MAX];
	size_t offset; /* first float of this layer in params/grads */
	size_t count;  /* floats in this layer (weights then bias) */
};

/* Called by backward as soon as gradients [offset, offset + count) of
 * `layer` are final: the whole layer at once, or the layer in pieces (the
 * reference MLP reports its bias, then row blocks of its weights). Ranges
 * arrive in decreasing offset order, each one right below the previous, and
 * together cover every parameter once per step; the sequence is the same on
 * every step. Called on the thread that runs forward_backward. */
typedef void (*hora_grads_ready_fn)(void *arg, int layer, size_t offset, size_t count);

/* A batch: `n` samples, x is (n, input_dim) row-major floats in [0,1],
 * y holds n class labels in [0, num_classes). */
struct hora_batch {
	const float *x;
	const uint8_t *y;
	int n;
};

/* Sum over a batch; divide by n for means. */
struct hora_model_stats {
	double loss_sum; /* sum of per-sample cross-entropy */
	int64_t correct; /* samples whose argmax equals the label */
	int64_t n;
};

struct hora_model_ops {
	uint32_t abi_version; /* HORA_MODEL_ABI_VERSION; first member, always */
	const char *name;

	/* Build a model instance. Returns 0 and sets *state, or -errno
	 * (-EINVAL for a config this model cannot take) and writes a reason to
	 * err (errlen bytes, NUL-terminated). Allocates scratch for max_batch. */
	int (*create)(const struct hora_model_config *cfg, void **state, char *err, size_t errlen);

	/* Free everything create allocated. destroy(NULL) is a no-op. */
	void (*destroy)(void *state);

	/* Number of layers; with layers != NULL and cap >= that number, also
	 * fills layers[0..n). Returns the number of layers or -errno. The total
	 * parameter count is layers[n-1].offset + layers[n-1].count. */
	int (*layout)(void *state, struct hora_model_layer *layers, int cap);

	/* Initialise params (the whole flat buffer) from seed, deterministically
	 * (same seed, same bits). Returns 0 or -errno. */
	int (*init_params)(void *state, float *params, uint64_t seed);

	/* Forward + backward on one batch (b->n <= max_batch): writes the MEAN
	 * gradient over the batch into grads (every float of it; no need to
	 * zero first), adds the batch's loss/correct/n to *stats, and calls
	 * ready(arg, ...) for each layer as its gradients become final (ready may
	 * be NULL). Returns 0 or -errno; on error ready is not called again. */
	int (*forward_backward)(void *state, const float *params, float *grads,
				const struct hora_batch *b, struct hora_model_stats *stats,
				hora_grads_ready_fn ready, void *arg);

	/* Forward only; adds loss/correct/n of the batch to *stats.
	 * Returns 0 or -errno. */
	int (*evaluate)(void *state, const float *params, const struct hora_batch *b,
			struct hora_model_stats *stats);
};

/* ---- registry of built-in models and plugins ---------------------------- */

/* Look up a built-in model by name ("mnist_mlp", "softmax_regression").
 * Returns the ops (static storage) or NULL. Thread-safe. */
HORA_API const struct hora_model_ops *hora_model_find(const char *name);

/* Name of the i-th built-in model, or NULL past the end. */
HORA_API const char *hora_model_builtin_name(int i);

/* A model loaded from a shared object. */
struct hora_model_plugin;

/* dlopen `path` and find HORA_MODEL_PLUGIN_SYMBOL. Checks abi_version and
 * that every mandatory slot is set. Returns 0 and sets *out (free with
 * hora_model_plugin_close), or a negative code with the reason in err:
 * -ENOENT (file missing / not loadable), -ENOEXEC (no entry symbol),
 * -EPROTO (ABI version or a NULL slot). */
HORA_API int hora_model_plugin_open(const char *path, struct hora_model_plugin **out,
				    char *err, size_t errlen);
/* The ops of an open plugin; valid until hora_model_plugin_close. */
HORA_API const struct hora_model_ops *hora_model_plugin_ops(const struct hora_model_plugin *p);
/* dlclose and free; NULL is a no-op. No model of it may be alive. */
HORA_API void hora_model_plugin_close(struct hora_model_plugin *p);

/* Resolve a --model argument: a built-in name, or a path to a .so (anything
 * containing '/' or ending in ".so"). On success *ops is set and, for a
 * plugin, *plugin too (caller closes it); for a built-in *plugin = NULL. */
HORA_API int hora_model_resolve(const char *spec, const struct hora_model_ops **ops,
				struct hora_model_plugin **plugin, char *err, size_t errlen);

/* ---- data: IDX files ------------------------------------------------------ */

/* A labelled image set held as bytes (what IDX stores); converted to floats
 * batch by batch, so memory stays at one byte per pixel. */
struct hora_dataset {
	uint8_t *images; /* (n, rows*cols) */
	uint8_t *labels; /* (n) */
	int64_t n;
	int rows, cols;
	int num_classes; /* max label + 1, checked <= the caller's limit */
};

/* Load one IDX image file and its label file (raw or gzip, detected by
 * content). Validates magic (0x00000803 / 0x00000801), rank, dimensions,
 * exact length (truncated or trailing bytes are errors), equal counts and
 * labels < max_classes. Returns 0, or -ENOENT / -EINVAL / -EIO / -ENOMEM with
 * "<file>: <problem>" in err. On error *ds is left zeroed. */
HORA_API int hora_dataset_load_idx(struct hora_dataset *ds, const char *images_path,
				   const char *labels_path, int max_classes,
				   char *err, size_t errlen);

/* Load "<dir>/train-*" (split "train") or "<dir>/t10k-*" (split "test"),
 * trying the raw name then ".gz". Same errors as hora_dataset_load_idx. */
HORA_API int hora_dataset_load_dir(struct hora_dataset *ds, const char *dir, const char *split,
				   int max_classes, char *err, size_t errlen);

/* Free the arrays; the struct is zeroed. NULL is a no-op. */
HORA_API void hora_dataset_deinit(struct hora_dataset *ds);

/* Gather samples idx[0..n) into a float batch: x (n, rows*cols) = byte/255,
 * y (n). Buffers are the caller's. */
HORA_API void hora_dataset_gather(const struct hora_dataset *ds, const int64_t *idx, int n,
				  float *x, uint8_t *y);

#ifdef __cplusplus
}
#endif
#endif /* HORA_MODEL_H */
