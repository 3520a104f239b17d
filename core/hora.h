/* hora.h - public API of hora, the peer-to-peer distributed trainer.
 *
 * What is here: error codes, logging, configuration (YAML + key=value
 * overrides), optimizers with a learning-rate schedule, the single-worker
 * training loop, and communicators with their collectives (allreduce,
 * broadcast, allgather, reduce-scatter, barrier; blocking and async). The
 * model interface is in hora_model.h.
 *
 * Conventions: functions return 0 or a negative code (-errno, or a HORA_ERR_*
 * below); hora_strerror() names any of them. Objects are opaque and come in
 * _create/_destroy pairs; _destroy(NULL) is a no-op. Unless a comment says
 * otherwise, an object is used by one thread at a time. The library never
 * exits the process, and reads the environment only in hora_init (the
 * variables of core/README.md) and in hora_comm_create (HORA_SECRET, when
 * its config names no secret).
 *
 * Includes only <stddef.h> and <stdint.h>.
 */
#ifndef HORA_H
#define HORA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef HORA_API
#define HORA_API __attribute__((visibility("default")))
#endif

struct hora_comm; /* a communicator (below) */

/* ---- errors ---------------------------------------------------------------- */

/* hora's own codes sit below -4096, clear of every -errno. */
enum hora_err {
	HORA_ERR_CONFIG = -10001, /* a configuration value or file is invalid */
	HORA_ERR_DATA = -10002,   /* a data file is missing or malformed */
	HORA_ERR_MODEL = -10003,  /* a model could not be loaded or built */
	HORA_ERR_DIVERGED = -10004, /* training produced a non-finite loss */
	HORA_ERR_STALL = -10005,    /* the stall inspector stopped the job (stall_abort_s),
				       or an elastic joiner left before it was ready
				       (train.elastic.wait_s; core/comm_keep.c);
				       `hora` exits 3 on it */
	HORA_ERR_LOST = -10006,     /* the failure detector declared a worker of the job dead
				       (a crash, or a frozen or hung process) and elastic
				       training is off: the job stops; `hora` exits 4 on it */
	HORA_ERR_NOJOB = -10008,    /* elastic training: a joiner found no worker holding the
				       job's state (the job had ended, or every worker that
				       trained is gone); `hora worker` exits 5 on it */
	HORA_ERR_VIEW = -10007,     /* elastic training: the communicator's view changed (a
				       worker died, froze or left); hora_train_run_comm
				       re-forms it and goes on, other callers see this code */
};

/* Static text for a code (negative errno or HORA_ERR_*). Never NULL. */
HORA_API const char *hora_strerror(int code);

/* Library version, "MAJOR.MINOR.PATCH". */
HORA_API const char *hora_version(void);

/* ---- logging (the only global state: one sink, stderr) ------------------- */

enum hora_log_level { HORA_LOG_ERROR, HORA_LOG_WARN, HORA_LOG_INFO, HORA_LOG_DEBUG };
/* Default INFO. The library reads no environment: hora_init and the `hora`
 * command apply HORA_LOG=error|warn|info|debug. */
HORA_API void hora_log_set_level(enum hora_log_level level);

/* ---- optimizers -------------------------------------------------------------- */

enum hora_optim_kind { HORA_OPTIM_SGD, HORA_OPTIM_ADAM };
enum hora_lr_schedule { HORA_LR_CONSTANT, HORA_LR_COSINE };

struct hora_optim_config {
	enum hora_optim_kind kind;
	double lr;            /* base learning rate (before scaling by size) */
	double momentum;      /* SGD; 0 = plain SGD */
	int nesterov;         /* SGD; needs momentum > 0 */
	double beta1, beta2, eps; /* Adam */
	double weight_decay;  /* L2 added to the gradient (coupled), 0 = off */
	double warmup_epochs; /* linear warm-up length; 0 = none */
	enum hora_lr_schedule schedule; /* after warm-up */
	int scale_lr_by_size; /* lr *= number of workers (Horovod); 1 worker: no-op */
};

struct hora_optim;

/* An optimizer over nparams floats. Returns 0 and sets *out, or -EINVAL /
 * -ENOMEM. Destroy with hora_optim_destroy. */
HORA_API int hora_optim_create(const struct hora_optim_config *cfg, size_t nparams,
			       struct hora_optim **out);
HORA_API void hora_optim_destroy(struct hora_optim *opt);
/* One update: params -= f(grads) at learning rate lr. grads are not changed. */
HORA_API void hora_optim_step(struct hora_optim *opt, float *params, const float *grads,
			      double lr);
/* Learning rate at global step `step` (0-based) with steps_per_epoch steps an
 * epoch, total_steps in the run, for nworkers workers. */
HORA_API double hora_lr_at(const struct hora_optim_config *cfg, int64_t step,
			   int64_t steps_per_epoch, int64_t total_steps, int nworkers);

/* ---- configuration --------------------------------------------------------- */

/* Tensor fusion: gradients that become ready together (backward runs output
 * to input) are averaged as one buffer once it holds threshold_bytes. With
 * cycle_time_ms > 0 a buffer is also closed when that long passed since its
 * first gradient was ready: rank 0 times the first step and every rank
 * follows its plan (runs are then reproducible only for 2 workers, as the
 * buffer boundaries decide the summation order). Defaults: 1 MiB, 0 (off).
 * With a communicator from hora_init, HORA_FUSION_THRESHOLD (bytes) and
 * HORA_CYCLE_TIME_MS, read there, win over these. */
enum hora_compression {
	HORA_COMPRESSION_NONE,
	HORA_COMPRESSION_FP16, /* gradients travel and are averaged in 16 bits, half the */
	HORA_COMPRESSION_BF16, /* bytes (Horovod's Compression.fp16) */
};
struct hora_fusion_config {
	size_t threshold_bytes;
	double cycle_time_ms;
	enum hora_compression compression;
	/* 1: the buffers averaged are hora_comm_mem_alloc's memory, so that
	 * ranks of one host average them where they lie (single copy; only a
	 * communicator whose ranks are all on one host with shared memory):
	 * the trainer's gradients (train.fusion.single_copy, default 1);
	 * for hora_dist_optim_create, its 16-bit copies of compression (the
	 * caller's gradients take the path when the caller allocates them with
	 * hora_comm_mem_alloc). 0 (a zeroed struct): ordinary memory, the
	 * copying stage. */
	int single_copy;
};



/* Elastic training (train.elastic; README "When a worker dies"): a worker
 * that dies or freezes is dropped and the others go on from their last
 * in-memory commit; joiners are admitted at commit boundaries. */
enum hora_elastic_batch {
	HORA_ELASTIC_PER_WORKER, /* each worker keeps its batch; lr scales by size (Horovod) */
	HORA_ELASTIC_GLOBAL,     /* the global batch stays; re-divided among the workers */
};
struct hora_elastic_config {
	int on;            /* a train.elastic section (or enabled: true) turns it on */
	int min_workers;   /* below this training pauses (default 1) */
	int max_workers;   /* joiners beyond this are refused (0: the file's worker count) */
	int commit_steps;  /* steps between in-memory commits (default 20) */
	double wait_s;     /* longest pause below min_workers before failing, and longest an
			      admitted joiner may take to be ready (default 600) */
	enum hora_elastic_batch batch;
	int restart;       /* `hora launch` restarts a local worker that died */
	int restart_limit; /* at most this many times per worker (default 3) */
	int enabled_given; /* enabled: was written (it wins over the section's presence) */
};

/* train.sync: gossip (train.gossip.*): decentralized averaging instead of
 * the gradient allreduce (core/gossip.c, core/README.md "Gossip") */
enum hora_gossip_topology {
	HORA_GOSSIP_RING,
	HORA_GOSSIP_EXPONENTIAL, /* the default, as BlueFog's */
	HORA_GOSSIP_ONE_PEER_EXPONENTIAL,
	HORA_GOSSIP_RANDOM,
};
enum hora_gossip_mode { HORA_GOSSIP_SYNC, HORA_GOSSIP_ASYNC };
struct hora_gossip_config {
	int on;                /* train.sync: gossip, or any train.gossip key */
	enum hora_gossip_topology topology;
	enum hora_gossip_mode mode;
	int period;            /* local steps between averaging rounds (default 1) */
	double self_weight;    /* < 0: the topology's (uniform) */
	int consensus_every;   /* steps between consensus measurements (0: each epoch's end) */
	int adaptive;          /* async: peers that answer slowly are asked less often (default 1) */
	int sync_given;        /* train.sync was written: 1 allreduce, 2 gossip */
};

#define HORA_PATH_MAX 1024
#define HORA_MAX_HIDDEN 8

struct hora_train_config {
	char model[HORA_PATH_MAX]; /* built-in name or path to a plugin .so */
	int nhidden;
	int hidden[HORA_MAX_HIDDEN];
	char data[HORA_PATH_MAX];  /* directory with train-* and t10k-* IDX files */
	int epochs;
	int batch_size;
	uint64_t seed;
	struct hora_optim_config optim;
	char metrics[HORA_PATH_MAX]; /* JSON-lines file, "" = none */
	int blas_threads;            /* BLAS threads per worker (default 1) */
	int progress;                /* -1 auto (a bar on a terminal), 0 lines, 1 bar */
	int quiet;                   /* no per-epoch output at all */
	/* distributed jobs (hora_train_run_comm) */
	struct hora_fusion_config fusion;
	char timeline[HORA_PATH_MAX];       /* Chrome trace JSON written by rank 0, "" = none */
	char checkpoint_dir[HORA_PATH_MAX]; /* "" = no checkpoints */
	int checkpoint_every;               /* epochs between checkpoints (0 = none) */
	int resume;                         /* continue from checkpoint_dir/checkpoint.hora */
	double stall_warning_s;             /* log the missing ranks after this long (60) */
	double stall_abort_s;               /* stop the job after this long (0 = never) */
	int communication;                  /* 0: no gradient averaging (scaling bench only) */
	/* 1: the global batch split by the ranks' measured speeds (core/balance.c;
	 * train.balance), so a synchronous step waits less for a slow rank;
	 * runs are then not bit-reproducible (the split follows timing). 0
	 * (default): even shares. */
	int balance;
	struct hora_elastic_config elastic;
	struct hora_gossip_config gossip;
	/* test hook (HORA_TEST_SAMPLE_LOG, read by `hora worker`): each worker
	 * appends "epoch step view sample" for every sample it trains on to
	 * <this>.<worker index> ("" = off) */
	char sample_log[HORA_PATH_MAX];
	/* test hook (HORA_TEST_STEP_LOG): each elastic worker appends
	 * "wallclock_ns step view" (CLOCK_REALTIME) after every step it ends to
	 * <this>.<worker index>, one write per line ("" = off) */
	char step_log[HORA_PATH_MAX];
	/* test hook: train.balance records this many seconds per sample for
	 * this rank instead of the measured ones (0: measure), so a test sees
	 * the same shares however busy its machine is */
	double balance_test_seconds;
	int device; /* train.device: HORA_DEVICE_CPU (default) or HORA_DEVICE_CUDA */
};

/* train.device: where the model computes (gpu/README.md). */
#define HORA_DEVICE_CPU 0
#define HORA_DEVICE_CUDA 1

/* Defaults: mnist_mlp [128], data/mnist, 20 epochs, batch 32, SGD lr 0.1,
 * seed 42, 1 BLAS thread. */
HORA_API void hora_train_config_defaults(struct hora_train_config *cfg);

/* Apply one "key=value"-style setting, e.g. ("train.optimizer.lr", "0.05").
 * Keys are the YAML paths (deploy/README.md). Returns 0, or HORA_ERR_CONFIG
 * with "<key> must be ... (got '<value>')" in err. */
HORA_API int hora_config_set(struct hora_train_config *cfg, const char *key, const char *value,
			     char *err, size_t errlen);

/* Read a YAML cluster/train file into cfg (values not in the file keep their
 * current value). Returns 0, or HORA_ERR_CONFIG with
 * "<file>:<line>:<col>: <key> <problem>" in err. */
HORA_API int hora_config_load_yaml(struct hora_train_config *cfg, const char *path, char *err,
				   size_t errlen);

/* ---- training (one worker) ------------------------------------------------- */

struct hora_epoch_metrics {
	int epoch; /* 1-based */
	double loss, acc, val_loss, val_acc;
	double samples_per_s; /* training samples / training seconds (all workers) */
	int workers;
	double seconds;       /* wall time of the epoch, evaluation included */
	uint64_t view;        /* the membership view the epoch ended in (0: none) */
	/* train.sync: gossip: ||x_i - x̄|| / ||x̄|| over the ranks before the
	 * epoch's average (NaN otherwise); the metrics are those of x̄ */
	double consensus_mean, consensus_max;
	int has_consensus;
};

struct hora_train_result {
	struct hora_epoch_metrics last;
	int64_t steps;
	size_t nparams;
	float *params; /* final parameters (malloc'd); free with hora_train_result_deinit */
	/* distributed: seconds gradients were being averaged, and how much of
	 * that ran while forward/backward was still computing */
	double allreduce_s, allreduce_hidden_s;
	/* elastic: the in-memory commits made, the seconds they took (the
	 * commit's allreduce of 4 doubles and the copy of the state), and the
	 * seconds the training loop ran (what the commits cost, as a share) */
	int64_t commits;
	double commit_s, train_s;
	int64_t samples; /* the samples this rank trained on (its shares; an elastic
			    rollback's are counted again) */
};

/* Train cfg->model on cfg->data for cfg->epochs, printing progress to stdout
 * unless quiet. Returns 0, HORA_ERR_CONFIG / HORA_ERR_MODEL / HORA_ERR_DATA
 * (reason in err), HORA_ERR_DIVERGED, or -errno. res may be NULL. */
HORA_API int hora_train_run(const struct hora_train_config *cfg, struct hora_train_result *res,
			    char *err, size_t errlen);
/* The same on every rank of c (hora_init): each epoch every rank trains on
 * its shard of one seeded shuffle, gradients are averaged by the
 * distributed optimizer, loss/accuracy and validation are averaged across
 * ranks; rank 0 prints and writes metrics, the timeline and checkpoints.
 * Every rank ends with bitwise identical parameters. Returns what
 * hora_train_run does, the communicator's error (a rank that stopped or
 * mismatched), HORA_ERR_STALL when train.stall_abort_s stopped the job
 * (err holds the inspector's report), or HORA_ERR_LOST when the failure
 * detector declared a worker dead (err names its rank, worker and
 * address). */
HORA_API int hora_train_run_comm(struct hora_comm *c, const struct hora_train_config *cfg,
				 struct hora_train_result *res, char *err, size_t errlen);
HORA_API void hora_train_result_deinit(struct hora_train_result *res);

/* ---- communicators and collectives ------------------------------------------ */

/* Element types of the collectives. HORA_F16 and HORA_BF16 are reduced in
 * f32, but a partial sum travels between ranks in 16 bits: it is rounded
 * (to nearest even) at every hop, up to N-1 times on the ring (log2 N on
 * the latency algorithm). So the error of a sum over N ranks grows like
 * (N-1) * u * sum(|x|), u = 2^-11 for f16 and 2^-8 for bf16 (about 1.5e-3
 * for f16 at N = 4), against one rounding for f32 inputs summed in f32. The
 * result is still bitwise identical on every rank (net/coll/README.md). */
enum hora_dtype { HORA_F32, HORA_F64, HORA_F16, HORA_BF16, HORA_I32, HORA_I64 };
enum hora_op { HORA_SUM, HORA_AVG, HORA_MIN, HORA_MAX, HORA_PROD };
enum hora_algo {
	HORA_ALGO_AUTO,    /* by size: latency algorithm up to small_bytes, ring above */
	HORA_ALGO_RING,    /* pipelined ring (chain for broadcast) at every size */
	HORA_ALGO_LATENCY, /* recursive doubling / binomial tree, up to 1 MiB */
	HORA_ALGO_DIRECT_RING, /* allreduce: ring on the small-message sockets, one exchange a
				  step, up to N MiB (other collectives: as AUTO) */
};

/* Shared memory between the ranks of one host (same boot id and network
 * namespace): AUTO uses it, OFF keeps every pair on TCP. */
enum hora_shm { HORA_SHM_AUTO, HORA_SHM_OFF };
/* The hierarchical allreduce (reduce-scatter within each host, allreduce
 * across hosts, allgather within): AUTO above small_bytes when the ranks
 * span several hosts with the same number (>= 2) of ranks each and the
 * algorithm is AUTO; ON the same even with an algorithm forced; OFF never
 * (the flat ring). Unequal hosts (3 + 1) keep the flat ring
 * (hora_comm_describe says why). Needs shm AUTO (the stage within a host). */
enum hora_hier { HORA_HIER_AUTO, HORA_HIER_ON, HORA_HIER_OFF };

struct hora_comm_config {
	int rank, size;            /* this rank, number of ranks */
	const char *const *addrs;  /* size "ip:port": where each rank listens (TCP) */
	const char *secret_file;   /* cluster secret file; NULL/"": HORA_SECRET */
	const void *secret;        /* or the secret's bytes (>= 16), used when not NULL */
	size_t secret_len;
	int connect_timeout_ms;    /* forming the communicator (default 30000) */
	int io_timeout_ms;         /* no progress from a peer this long fails it (default 30000) */
	int sockets_per_peer;      /* TCP streams per peer for bulk data (default 1) */
	size_t small_bytes;        /* latency algorithm up to this size (0: the measured default) */
	size_t medium_bytes;       /* allreduce: direct ring up to this size (0: the default) */
	size_t segment_bytes;      /* ring pipeline segment (0: 1 MiB) */
	size_t slice_bytes;        /* allreduce above medium size: the ring runs slice by slice,
				      N x this each (0: 1 MiB, so a step moves 1 MiB) */
	enum hora_algo algorithm;  /* default AUTO */
	int spin_us;               /* small messages poll this long before sleeping (0: default
				      200; -1: never) */
	int rcvlowat;              /* large frames wake the receiver once, via SO_RCVLOWAT
				      (0: default, on; -1: off, a wake-up per TCP segment) */
	uint32_t view;             /* membership view the ranks agreed on (0 outside one) */
	enum hora_shm shm;         /* default AUTO */
	enum hora_hier hierarchical; /* default AUTO */
};

struct hora_comm;
struct hora_request;

HORA_API void hora_comm_config_defaults(struct hora_comm_config *cfg);
/* Form a communicator: every rank calls this with the same addrs; it
 * returns when rank is connected and authenticated to every other rank, or
 * with an error (reason in err) after connect_timeout_ms. */
HORA_API int hora_comm_create(const struct hora_comm_config *cfg, struct hora_comm **out,
			      char *err, size_t errlen);
/* Waits for the async calls still queued, then closes. NULL: no-op. */
HORA_API void hora_comm_destroy(struct hora_comm *c);
HORA_API int hora_comm_rank(const struct hora_comm *c);
/* How the communicator reaches its peers and the path an allreduce of
 * `bytes` takes ("2 ranks on 1 host, shared memory; allreduce of 16777216
 * bytes: shared-memory stage"), for bench headers and logs. The length
 * snprintf would write. */
HORA_API int hora_comm_describe(struct hora_comm *c, size_t bytes, char *buf, size_t len);
HORA_API int hora_comm_size(const struct hora_comm *c);
/* Memory for buffers that the ranks of one host average where they lie
 * (as MPI_Alloc_mem and ncclMemAlloc): an in-place allreduce (send ==
 * recv) above the latency path, on a communicator whose ranks are all on
 * one host with shared memory, whose buffer is in such memory on every
 * rank, reads and writes the ranks' buffers directly (the single-copy
 * path: no copy into the shared stage and none out of it; the same bits as
 * the copying path). Any other use is ordinary memory. bytes zeroed,
 * page-aligned (64-byte aligned when no memfd could be had: then it is
 * ordinary memory); NULL: out of memory. Not collective; thread-safe. The
 * memory is a nameless memfd per call: a forked child does not inherit it
 * (MADV_DONTFORK). Free it with hora_comm_mem_free on the same
 * communicator, before hora_comm_destroy (which frees what is left). It
 * stays valid across an elastic re-form of the communicator.
 * - Each rank passes a buffer's memfd to its local peers at its first
 *   such allreduce; at most 16 of a rank's live allocations take the path
 *   (more run the copying path); a freed one's pages stay mapped by the
 *   peers until that rank's next allreduce that passes a new one (or the
 *   communicator, or its next re-form, ends).
 * - The peers write into it: after a failed collective a peer may still
 *   be writing (a rank that stalled and was dropped). Free it and allocate
 *   another before using it again (the trainer does at every re-form). */
HORA_API void *hora_comm_mem_alloc(struct hora_comm *c, size_t bytes);
/* Free memory of hora_comm_mem_alloc(c, ...). NULL: no-op. Memory of
 * another communicator (still alive) is freed from it, with a warning.
 * Memory whose communicator was destroyed (which freed it) is left alone,
 * with a warning: pass c = NULL then (c itself is gone). */
HORA_API void hora_comm_mem_free(struct hora_comm *c, void *p);

/* Collectives. Every rank calls the same collectives in the same order
 * (from any threads; the order of the calls on one rank is the order of
 * execution). Each call carries a sequence number and a fingerprint (name,
 * count, dtype, op, root); a mismatch fails the call on the ranks that see
 * it with an error naming both calls, never a hang or garbage. Results are
 * bitwise identical on every rank. Returns 0 or a negative code; the reason
 * (rank, view, collective and sequence, peer, cause) is in
 * hora_comm_last_error. After a failure (mismatch, dead or silent peer) the
 * communicator is broken: every later call returns the same error at once.
 * An invalid argument on one rank (dtype, op, root outside 0..size-1,
 * overlapping buffers other than in place) is a failure of that call on
 * every rank: -EINVAL with "rank 2 refused broadcast #5: root 7 >= size 4"
 * (in a broadcast a rank that did not need the refusing rank may learn it
 * at its next call), and the communicator is broken.
 *
 * send == recv is in place. f16 and bf16 are reduced in f32 (round to
 * nearest even; see enum hora_dtype for the error); AVG divides once, at
 * the end (integers truncate).
 *
 * Device (CUDA) buffers: once the process loaded hora's GPU module
 * (hora_cuda_init, train.device: cuda), the allreduce, broadcast,
 * allgather, reduce-scatter, neighbour allreduce and pair average take
 * device pointers (found by cudaPointerGetAttributes; a program that never
 * loads the module never touches CUDA). Every rank of a call passes the
 * same kind of memory (a rank that passed host buffers where the others
 * passed device ones is named as a mismatch). The buffers must be ready:
 * the work that wrote them finished (cudaStreamSynchronize of its stream),
 * as for CUDA-aware MPI; hora orders its copies and NCCL calls on streams
 * of its own and returns (or completes the request) with the result in
 * the buffer. All ranks on one host: NCCL among them; several hosts of
 * several ranks each: the allreduce as NCCL within each host around the
 * cross-host TCP ring (Horovod's hierarchical allreduce), set up at the
 * first such call (each host's ncclUniqueId sent over hora's
 * authenticated transport); otherwise, or without NCCL on every rank, the
 * device data is staged through page-locked host memory into the host
 * collectives. NCCL reduces in its own order (bitwise identical across
 * ranks; an average's last bit may differ from the host paths'). Details:
 * core/devcoll.h. */

/* Load hora's GPU module (libhora_gpu.so) so that the collectives take
 * device buffers. Returns the number of CUDA devices (>= 1) or a negative
 * code with the reason in why (no library, no driver, no device). */
HORA_API int hora_cuda_init(char *why, size_t whylen);

/* recv[i] = op over ranks of send[i], count elements. */
HORA_API int hora_allreduce(struct hora_comm *c, const void *send, void *recv, size_t count,
			    enum hora_dtype t, enum hora_op op);
/* buf on every rank = buf on root. */
HORA_API int hora_broadcast(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t,
			    int root);
/* recv (size x count) = send (count) of ranks 0, 1, ... in order. In place:
 * send == recv + rank * count elements. */
HORA_API int hora_allgather(struct hora_comm *c, const void *send, void *recv, size_t count,
			    enum hora_dtype t);
/* recv (recvcount) = block `rank` of the reduction of send (size x
 * recvcount). In place: recv == send + rank * recvcount elements (no extra
 * memory; out of place uses one scratch buffer of the input's size). */
HORA_API int hora_reduce_scatter(struct hora_comm *c, const void *send, void *recv,
				 size_t recvcount, enum hora_dtype t, enum hora_op op);
/* Returns once every rank has called it. */
HORA_API int hora_barrier(struct hora_comm *c);

/* Async forms: queue the call and return at once with *req; a background
 * thread of the communicator runs queued calls in order, so the caller
 * computes meanwhile. Buffers stay untouched by the caller until the
 * request finished. Finish every request with hora_wait, before or after
 * hora_comm_destroy (which runs the queued ones first). */
HORA_API int hora_allreduce_async(struct hora_comm *c, const void *send, void *recv, size_t count,
				  enum hora_dtype t, enum hora_op op, struct hora_request **req);
HORA_API int hora_broadcast_async(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t,
				  int root, struct hora_request **req);
HORA_API int hora_allgather_async(struct hora_comm *c, const void *send, void *recv, size_t count,
				  enum hora_dtype t, struct hora_request **req);
HORA_API int hora_reduce_scatter_async(struct hora_comm *c, const void *send, void *recv,
				       size_t recvcount, enum hora_dtype t, enum hora_op op,
				       struct hora_request **req);
HORA_API int hora_barrier_async(struct hora_comm *c, struct hora_request **req);
/* Block until req finished; frees it and returns its result. */
HORA_API int hora_wait(struct hora_request *req);
/* 1 if req finished (hora_wait then returns at once), 0 if not. */
HORA_API int hora_test(struct hora_request *req);
/* Wait at most timeout_ms (>= 0) for req: 1 if it has not finished by then
 * (req stays valid: wait again, or hora_wait), else what hora_wait returns
 * (req freed). For callers that must look up between waits, e.g. a Python
 * binding that lets Ctrl-C through while a collective waits for a peer. */
HORA_API int hora_wait_timeout(struct hora_request *req, int timeout_ms);
/* Wait at most timeout_ms (>= 0) for req to finish without freeing it: 1 when
 * it has (hora_request_status reads its result, hora_wait then frees it), 0
 * when not yet, -EINVAL. For a binding whose own bookkeeping an interrupt may
 * cut short right after a call returns (Python raises KeyboardInterrupt
 * there): it reads the status, forgets the request, then frees it, so that
 * an interrupt at any point leaves no freed request behind to free again. */
HORA_API int hora_wait_ready(struct hora_request *req, int timeout_ms);
/* A finished request's result (what hora_wait will return), without freeing
 * it; -EBUSY while it runs, -EINVAL for NULL. */
HORA_API int hora_request_status(const struct hora_request *req);

/* ---- decentralized averaging (gossip), as BlueFog's ------------------------- */

/* Neighbour allreduce: recv = self_weight * send + sum over i of
 * src_weights[i] * (what rank src_ranks[i] sent). This rank sends its send
 * buffer to each of dst_ranks, scaled by dst_weights[j] when dst_weights is
 * not NULL (BlueFog's dst_weights), and receives from each of src_ranks.
 * Neighbour ranks are other ranks of c, each at most once per list (0..
 * size-1 of them); src_weights NULL: 1/(nsrc+1) each; weights finite (they
 * need not sum to 1). core/topology.h gives the lists of the usual graphs.
 * It is a collective: every rank calls it in the same order as the other
 * collectives, with the same count and dtype, each with its own lists (no
 * neighbours: recv = self_weight * send). The lists must agree: a in
 * b's src_ranks exactly when b in a's dst_ranks. Each call checks that first
 * (one 64-byte allreduce): a disagreement fails the call on every rank with
 * -EBADE naming the ranks ("mismatched neighbour patterns: rank 0 sends to
 * rank 2 but rank 2 does not receive from it"), before any data moved; a
 * count or dtype that differs is a mismatch as for any collective. Sums
 * are taken in double and rounded once (f16/bf16 through f32, integers to
 * nearest). Deadlock-free for any graph (net/coll/README.md). send ==
 * recv: in place. Errors, the broken communicator, elastic stops and the
 * stall check as for the collectives above. The lists are read during the
 * call (the async form copies them). */
HORA_API int hora_neighbor_allreduce(struct hora_comm *c, const void *send, void *recv, size_t count,
				     enum hora_dtype t, double self_weight, const int *src_ranks,
				     const double *src_weights, int nsrc, const int *dst_ranks,
				     const double *dst_weights, int ndst);
HORA_API int hora_neighbor_allreduce_async(struct hora_comm *c, const void *send, void *recv,
					   size_t count, enum hora_dtype t, double self_weight,
					   const int *src_ranks, const double *src_weights, int nsrc,
					   const int *dst_ranks, const double *dst_weights, int ndst,
					   struct hora_request **req);
/* Pairwise average with rank peer: both end with (x_this + x_peer) / 2,
 * bitwise the same on both (the lower rank's value first; f16/bf16 through
 * f32; integers round to nearest, so their sum may move by one). Only the
 * two ranks take part and the call is numbered per pair, outside the
 * collectives' order: the n-th pair average of a with b meets b's n-th with
 * a, while other ranks run other pairs or nothing. It waits for peer (up to
 * io_timeout_ms of no progress): the caller's schedule must pair the ranks
 * (core/topology.h's random and one-peer graphs do). A count or dtype that
 * differs fails both with -EBADE naming both calls; a peer that is not
 * another rank is -EINVAL for this rank alone (c stays usable). */
HORA_API int hora_pair_average(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t, int peer);
HORA_API int hora_pair_average_async(struct hora_comm *c, void *buf, size_t count, enum hora_dtype t,
				     int peer, struct hora_request **req);
/* The neighbour allreduce's pattern check (default on). Off saves its
 * allreduce; a disagreeing pattern then is not named before the data
 * move: a rank waiting for a message nobody sends fails after the I/O
 * timeout, one sent to a rank that did not expect it at that rank's next
 * call that reads it. Every rank must set the same. Waits for the queued
 * calls, as hora_comm_set_algorithm. */
HORA_API int hora_comm_set_neighbor_check(struct hora_comm *c, int on);

/* Asynchronous pair averaging (AD-PSGD; net/coll/README.md "Asynchronous
 * pairs"): a rank asks one peer at a time to average with it and goes on
 * at once; no rank ever waits for another but at hora_apair_quiesce. The
 * engine opens connections of its own: every rank of c calls
 * hora_apair_create (it returns once all have), each listening on its
 * address's port + port_offset (c must come from hora_comm_create or
 * hora_init). x, the model (count elements of f32 or f64), stays the
 * caller's: the engine reads or writes it only inside start, poll and
 * quiesce, on the calling thread. One exchange at a time per rank:
 * - hora_apair_start(a, peer, x): x copied; peer's engine answers at once,
 *   GO (it takes the exchange) or BUSY (it is in one, or closed).
 *   -EBUSY: this rank is in an exchange (or closed); -ENOTCONN: peer gone.
 * - hora_apair_poll(a, x, &ev), between the caller's steps: applies our
 *   reply (x += avg - the copy: exactly the average when x did not change
 *   meanwhile), or serves a peer's request (x = avg, sent back: both end
 *   with the same bits; lower rank's value first, in double). Never waits.
 * - hora_apair_quiesce(a, x, timeout_ms): later requests get BUSY; waits
 *   for the exchange in flight (its partner answers without waiting for
 *   anyone, so the wait is one exchange long), or until c's job stops
 *   (its code) or timeout_ms (> 0; -ETIMEDOUT); *ev (may be NULL) says
 *   what it finished, as poll would; this rank's counters go to every
 *   peer (to its partner once the exchange is done). hora_apair_reopen undoes
 *   the close. Quiesce every rank before a collective over x, e.g. x̄.
 * Every exchange preserves the pair's sum (to rounding). Each rank also
 * carries n counters (its own set by hora_apair_progress, the others'
 * merged by max from every message it gets): how far the job is, without
 * a collective. */
struct hora_apair;
enum hora_apair_what {
	HORA_APAIR_NONE,    /* nothing finished */
	HORA_APAIR_APPLIED, /* our request: the average is in x */
	HORA_APAIR_BUSY,    /* our request: the peer was busy; x unchanged */
	HORA_APAIR_FAILED,  /* our request: the peer is gone; x unchanged */
	HORA_APAIR_SERVED,  /* a peer's request: the average is in x */
};
struct hora_apair_event {
	enum hora_apair_what what;
	int peer;       /* -1 for NONE */
	double reply_s; /* our request: from start to the answer's arrival */
};
HORA_API int hora_apair_create(struct hora_comm *c, int port_offset, size_t count, enum hora_dtype t,
			       struct hora_apair **out, char *err, size_t errlen);
HORA_API void hora_apair_destroy(struct hora_apair *a);
HORA_API int hora_apair_start(struct hora_apair *a, int peer, const void *x);
HORA_API int hora_apair_poll(struct hora_apair *a, void *x, struct hora_apair_event *ev);
HORA_API int hora_apair_quiesce(struct hora_apair *a, void *x, int timeout_ms, struct hora_apair_event *ev);
HORA_API void hora_apair_reopen(struct hora_apair *a);
HORA_API void hora_apair_progress(struct hora_apair *a, uint64_t mine);
/* the n counters as this rank knows them (its own exact) */
HORA_API void hora_apair_progress_view(struct hora_apair *a, uint64_t *v);
HORA_API void hora_apair_progress_set(struct hora_apair *a, const uint64_t *v);
/* this rank's counters to every peer now (best effort), but the partner of
 * an exchange in flight: for news that should not wait for the next
 * exchange. Only on the thread that calls start, poll and quiesce. */
HORA_API void hora_apair_tell(struct hora_apair *a);
/* the first failure seen (a peer gone, a malformed message; "" if none);
 * valid until the next call on a */
HORA_API const char *hora_apair_error(struct hora_apair *a);

/* The reason of the communicator's last failure ("" if none). Valid until
 * the next call on c. */
HORA_API const char *hora_comm_last_error(const struct hora_comm *c);
/* The size up to which the latency algorithm is used, and setting it (a
 * measured crossover; -EINVAL above 1 MiB, the small-message buffers). Setting it, or the algorithm
 * below, first waits for the calls already queued to finish. */
HORA_API size_t hora_comm_small_bytes(const struct hora_comm *c);
HORA_API int hora_comm_set_small_bytes(struct hora_comm *c, size_t bytes);
/* Force the algorithm for later calls (every rank must do the same). */
HORA_API int hora_comm_set_algorithm(struct hora_comm *c, enum hora_algo algo);

/* ---- distributed training, as in Horovod ------------------------------------ */

/* Join the job: read the cluster file (NULL: $HORA_CONFIG), find this
 * worker's index (HORA_PROC, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK
 * or JOB_COMPLETION_INDEX, as set by `hora launch`, Slurm, mpirun or a
 * Kubernetes Indexed Job), join the membership
 * through the seeds, wait for the view that holds every worker of the file,
 * and form the communicator over that view (rank = position in the view).
 * Without a cluster file: a communicator of one (rank 0 of 1).
 * This is the one call that reads the environment (core/README.md): also
 * HORA_SPIN_US, HORA_FUSION_THRESHOLD, HORA_CYCLE_TIME_MS (kept by the
 * communicator for hora_dist_optim_create) and HORA_LOG. A variable that is
 * set to an invalid value fails it with HORA_ERR_CONFIG naming it.
 * The membership keeps running for the whole job: when the failure
 * detector declares a worker of the communicator dead (a crash, or a
 * frozen or hung process: no answer for about suspect_timeout_ms + two
 * probe periods), the call in flight and every later call on c fail with
 * HORA_ERR_LOST, hora_comm_last_error naming its rank, worker and address
 * (elastic training is off: the job stops). A member that joins, or leaves
 * gracefully, does not stop it. With train.elastic on in the file's train
 * section, the communicator is elastic instead ("elastic jobs" below). */
HORA_API int hora_init(const char *cluster_file, struct hora_comm **out, char *err, size_t errlen);
/* Leave the job (graceful: the others see a LEAVE, not a failure; after a
 * stall abort or a lost worker they see a failure) and destroy c. */
HORA_API void hora_finalize(struct hora_comm *c);
HORA_API int hora_rank(const struct hora_comm *c);       /* 0..size-1 (NULL: 0) */
HORA_API int hora_size(const struct hora_comm *c);       /* workers in the job (NULL: 1) */
HORA_API int hora_local_rank(const struct hora_comm *c); /* among the workers on this host */
HORA_API int hora_local_size(const struct hora_comm *c);
/* Stall inspection (communicators from hora_init): when this rank has
 * waited in one collective for warn_s (default 60), it asks every worker
 * where it is and logs the ranks that have not reached it and which
 * collective, again every warn_s while it lasts; after abort_s (0 = never)
 * it stops the job: the collective in flight and every later call on c
 * fail with HORA_ERR_STALL and the report (the ranks it names, as above)
 * in hora_comm_last_error; the ranks waiting on this one then fail too.
 * The process is not stopped: the caller returns the error (`hora` exits
 * 3). Safe to call while collectives run on other threads. */
HORA_API void hora_comm_set_stall(struct hora_comm *c, double warn_s, double abort_s);
/* Rank root's parameters to every rank (call once after initialising). */
HORA_API int hora_broadcast_parameters(struct hora_comm *c, float *params, size_t n, int root);

/* A distributed optimizer wraps any optimizer: gradients are averaged
 * across the ranks on the communicator's background thread while backward
 * goes on (pass hora_dist_optim_ready_fn(opt) with the optimizer as `arg`
 * to the model's forward_backward), then the wrapped optimizer updates the
 * parameters with the average, so every replica stays bitwise identical. */
struct hora_dist_optim;
HORA_API int hora_dist_optim_create(struct hora_comm *c, struct hora_optim *inner, size_t nparams,
				    const struct hora_fusion_config *fusion,
				    struct hora_dist_optim **out);
/* Frees the wrapper, not the inner optimizer or the communicator. With
 * fusion.single_copy its buffers are the communicator's memory: destroy it
 * before hora_comm_destroy. NULL: no-op. */
HORA_API void hora_dist_optim_destroy(struct hora_dist_optim *d);
/* Before each forward_backward: grads is the model's gradient buffer;
 * weight scales this rank's gradients before averaging (this rank's share
 * of the global batch times size; 1 when every rank has the same batch). */
HORA_API void hora_dist_optim_begin(struct hora_dist_optim *d, float *grads, double weight);
/* The grads-ready callback (hora_grads_ready_fn): arg is the optimizer. */
HORA_API void hora_dist_optim_grads_ready(void *arg, int layer, size_t offset, size_t count);
/* What to pass the model as its grads-ready callback: the one above when a
 * buffer can start averaging before backward ends (the fusion threshold is
 * at most the gradients' size, or a cycle time is set), else NULL: one
 * buffer holds them all, so the model may compute each layer's gradients
 * whole (no pieces to report), and hora_dist_optim_step averages them all
 * when no range was reported. (A model's bits may differ between the two:
 * the MLP's whole dW is one GEMM, its pieces several.) */
typedef void (*hora_grads_ready_fn)(void *arg, int layer, size_t offset, size_t count); /* as hora_model.h */
HORA_API hora_grads_ready_fn hora_dist_optim_ready_fn(const struct hora_dist_optim *d);
/* After forward_backward: wait for every average, then step the wrapped
 * optimizer (a step whose model reported no range at all takes the whole
 * gradient as ready then). Returns 0 or the communicator's error. */
HORA_API int hora_dist_optim_step(struct hora_dist_optim *d, float *params, double lr);

/* ---- elastic jobs for programs of their own (Horovod's hvd.elastic) -------
 * hora_init over a cluster file whose train section turns train.elastic on
 * (train: {elastic: {min_workers: 2}}: only its elastic keys act for such a
 * program) makes an elastic communicator: a worker that dies, freezes or
 * leaves makes the call in flight and later ones fail with HORA_ERR_VIEW
 * (not HORA_ERR_LOST), and a worker started after the job began joins it:
 * its hora_init returns once the others re-formed with it, and they wait
 * (in hora_elastic_reform) until its first collective (blocking or async)
 * or hora_comm_set_* on c: load data and build the model before it, for
 * up to train.elastic.wait_s (past it, or when it ends with hora_finalize
 * first, or loses a worker of the job meanwhile, the joiner leaves the job
 * and its calls fail with HORA_ERR_STALL; the others go on). The program
 * keeps its own state: it commits it (a copy) at points every rank reaches
 * alike, and after a re-form every rank agrees on one commit and takes it
 * from one rank that has it (the Python binding's hora.torch.elastic does
 * all of this; core/python/README.md). Ranks and size change across a
 * re-form; hora_rank / hora_size / hora_local_* give the new ones.
 * The end is two barriers before hora_finalize: past the first every rank
 * has done its last step (its failure is one like any other: re-form and go
 * on from the commit); the second keeps every rank until all are past the
 * first, and its failure is none (all are done). With one, a rank that
 * leaves at once (a view change) can stop the first for a slower rank. */
/* 1 when c is elastic. */
HORA_API int hora_elastic_on(const struct hora_comm *c);
/* 1 when this worker joined a running job (it has no state of its own
 * until the others send theirs). */
HORA_API int hora_elastic_joined(const struct hora_comm *c);
/* 1 when c should be re-formed: a worker of it is dead or gone, or joiners
 * wait to be admitted. No communication: ranks may see it at different
 * moments, so agree on it (an allreduce MAX of it at a commit point). */
HORA_API int hora_elastic_pending(struct hora_comm *c);
/* The membership view c is formed over (changes at each re-form). */
HORA_API uint64_t hora_elastic_view(const struct hora_comm *c);
/* Re-form c over the next view, after a call failed with rc (or with rc 0
 * when hora_elastic_pending agreed): waits up to the failure-detection time
 * for the view to change when it has not yet, then forms the communicator
 * of the workers alive (and the joiners), at most train.elastic.max_workers,
 * waiting for min_workers, then waits until every worker of it is ready
 * (a joiner is ready at its first call after hora_init: until then its
 * own thread keeps the others waiting, so no call of theirs times out
 * while it loads; a joiner not ready within train.elastic.wait_s leaves
 * the job). Every request on c must be finished. Returns 0,
 * rc itself when it was no view change (every worker alive: the error
 * stands), the last failed readiness round's code after 21 re-forms, -EAGAIN for rc 0 with nothing to re-form for, or the reason the
 * job cannot go on (HORA_ERR_STALL, HORA_ERR_NOJOB, fewer than min_workers
 * for train.elastic.wait_s, ...), with the reason in err. */
HORA_API int hora_elastic_reform(struct hora_comm *c, int rc, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* HORA_H */
