/* coll.h - communicators and collectives (net/coll; the public names are in
 * core/hora.h). net/coll/README.md describes the files behind it.
 *
 * A communicator is N ranks joined by a link (link.h; today the TCP link:
 * the io_uring transport plus one small-message socket per pair).
 * Collectives are called by every rank in the same order; each call carries
 * a fingerprint (sequence number, kind, count, dtype, op, root, N, the
 * algorithm) that the neighbours compare, so a mismatch is a named error,
 * never a hang or garbage. After an error the communicator is broken: its
 * links are closed, so that the ranks waiting on this one fail too instead
 * of hanging.
 */
#ifndef HORA_NET_COLL_H
#define HORA_NET_COLL_H

#include "net/transport/transport.h"
#include "net/coll/reduce.h"

#include <stdbool.h>

/* The collectives (the one list: core/comm.c and the stall check, core/comm_watch.c, use it). */
enum hora_net_coll_kind {
	HORA_NET_COLL_ALLREDUCE,
	HORA_NET_COLL_BROADCAST,
	HORA_NET_COLL_ALLGATHER,
	HORA_NET_COLL_REDUCE_SCATTER,
	HORA_NET_COLL_BARRIER,
	HORA_NET_COLL_NEIGHBOR_ALLREDUCE,
	HORA_NET_COLL_PAIR_AVERAGE,
	HORA_NET_COLL_KINDS
};

/* Which algorithm a call runs (hora.h's enum hora_algo has the same values). */
enum hora_net_algo {
	HORA_NET_ALGO_AUTO,        /* by size: latency up to small_bytes, direct ring up to
				      medium_bytes (allreduce), pipelined ring above */
	HORA_NET_ALGO_RING,        /* pipelined ring (chain for broadcast) at every size */
	HORA_NET_ALGO_LATENCY,     /* recursive doubling / binomial tree, up to small_cap */
	HORA_NET_ALGO_DIRECT_RING, /* allreduce: the ring on the small-message sockets;
				      the other collectives choose as AUTO */
	HORA_NET_ALGOS
};

/* Defaults from `hora bench allreduce --crossover` (bench/RESULTS.md): on a
 * 1 Gbit/s link the latency algorithm wins up to 8-16 KiB and the direct ring
 * up to 128 KiB-2 MiB; on loopback it ties with the pipelined ring at 1-4 MiB. */
#define HORA_NET_SMALL_DEFAULT (16 << 10)
#define HORA_NET_MEDIUM_DEFAULT (1 << 20)
#define HORA_NET_SLICE_DEFAULT (1 << 20)
#define HORA_NET_SPIN_DEFAULT 200

/* Whether a communicator being formed is still wanted: asked by
 * hora_net_comm_create, on its calling thread, between the short slices
 * (HORA_NET_FORM_CHECK_MS) of its waits for the other ranks (connecting to
 * a lower rank, accepting a higher one). 0 goes on; a negative errno, its
 * reason in err, abandons the formation at once: every connection made so
 * far is closed (a peer waiting on one fails at once) and create returns
 * that code with err as the check wrote it. For a caller that knows more
 * than the sockets do (core: a rank's worker left or died, a newer view). */
typedef int (*hora_net_comm_check_fn)(void *arg, char *err, size_t errlen);
#define HORA_NET_FORM_CHECK_MS 100

struct hora_net_comm_cfg {
	int rank, nranks;
	const char *const *addrs;  /* nranks "ip:port": where each rank listens (TCP) */
	struct hora_net_opts opts; /* node_id is set to rank */
	int connect_timeout_ms;    /* default 30000 */
	size_t small_bytes;        /* allreduce/broadcast up to this: latency algorithms on the
				      fast channel (default HORA_NET_SMALL_DEFAULT) */
	size_t medium_bytes;       /* allreduce up to this (above small_bytes): ring on the fast
				      channel, no segments (default HORA_NET_MEDIUM_DEFAULT) */
	size_t small_cap;          /* largest small_bytes settable later, and 1/N of the largest
				      direct-ring message (default 1 MiB) */
	size_t segment_bytes;      /* ring pipeline segment (default 1 MiB) */
	size_t slice_bytes;        /* allreduce on the pipelined ring: one slice of N x this
				      round the ring after the other (default
				      HORA_NET_SLICE_DEFAULT) */
	int depth;                 /* ring receives in flight (default 4) */
	int spin_us;               /* small messages: poll this long before sleeping
				      (0: HORA_NET_SPIN_DEFAULT; < 0: never). The library reads
				      no environment: HORA_SPIN_US is read by core/init. */
	int shm;                   /* 0 (auto): shared memory between ranks of one host;
				      1 (off): TCP only (hora.h's enum hora_shm) */
	int hierarchical;          /* 0 auto, 1 on, 2 off (hora.h's enum hora_hier) */
	hora_net_comm_check_fn check; /* optional: asked while forming (above) */
	void *check_arg;              /* check's; borrowed for hora_net_comm_create only */
};

struct hora_net_comm;

int hora_net_comm_create(const struct hora_net_comm_cfg *cfg, struct hora_net_comm **out, char *err,
			 size_t errlen);
void hora_net_comm_destroy(struct hora_net_comm *c);

/* Every call below returns 0 or a negative errno; the reason (rank, view,
 * collective and sequence, peer, cause) is in hora_net_comm_error. Every
 * rank gets bitwise identical results. After an error the communicator is
 * broken and every later call returns the same code.
 *
 * An invalid argument (a bad dtype, op or root, a count whose bytes would
 * wrap, send and recv overlapping other than in place) is refused: the call
 * still counts, the refusing rank tells every rank why and the call fails on
 * every rank with -EINVAL and the same reason ("rank 2 refused broadcast #5:
 * root 7 >= size 4"); the communicator is then broken on every rank, as
 * after a mismatch (the ranks may have moved part of the call's data). */

/* recv = reduce(send of every rank), count elements. send == recv: in place. */
int hora_net_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op);
/* recv (recvcount elements) = block `rank` of reduce(send of every rank),
 * send holding nranks x recvcount. In place: recv == send + rank x recvcount. */
int hora_net_reduce_scatter(struct hora_net_comm *c, const void *send, void *recv, size_t recvcount,
			    enum hora_net_dtype t, enum hora_net_op op);
/* recv (nranks x count) = the send blocks of ranks 0..n-1 in order. In
 * place: send == recv + rank x count. */
int hora_net_allgather(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t);
/* buf of every rank = buf of root. */
int hora_net_broadcast(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int root);
/* Returns once every rank has entered it. */
int hora_net_barrier(struct hora_net_comm *c);

/* ---- decentralized averaging (neighbor.c) ---------------------------------------- */

/* Who this rank averages with in one neighbour allreduce, as BlueFog's
 * neighbor_allreduce: recv = self_weight * send + sum_i src_weights[i] *
 * (what rank src[i] sent us). Every rank sends its send buffer to each of
 * its dst ranks, scaled by dst_weights[j] when given (NULL: 1, the buffer
 * itself), and receives from each of its src ranks. Ranks are 0..N-1, not
 * this rank, each at most once per list; src_weights NULL: 1/(nsrc+1)
 * each. Weights must be finite. The arrays are read during the call only. */
struct hora_net_neighbors {
	double self_weight;
	const int *src;
	const double *src_weights; /* NULL: 1/(nsrc+1) each */
	int nsrc;
	const int *dst;
	const double *dst_weights; /* optional: NULL sends the buffer unscaled */
	int ndst;
};

/* A collective: every rank calls it, in the same order as the others
 * (numbered and fingerprinted as they are), each with its own neighbours;
 * count and dtype are the same on every rank. The pattern must be
 * consistent: rank a has b among its dst exactly when b has a among its
 * src. Unless the check is off (hora_net_comm_set_neighbor_check), every
 * call first checks that with one small allreduce (recursive doubling, 64
 * bytes): an inconsistent pattern fails the call on every rank with -EBADE
 * and a text naming the ranks ("mismatched neighbour patterns: rank 0
 * sends to rank 2 but rank 2 does not receive from rank 0"), before any
 * data moves. The data then go on the queued path, every receive and send
 * of a chunk posted before any is waited for (no order between neighbours:
 * deadlock-free for any graph), in chunks of segment_bytes x depth, the
 * next chunk in flight while one is combined. Each message is preceded by
 * the call's fingerprint, so a count or dtype mismatch is named by its
 * receiver. The sum is taken in double, self first then the sources in
 * their order, and rounded once to the dtype (f16/bf16 through f32,
 * integers to nearest). send == recv: in place; other overlaps are
 * refused. */
int hora_net_neighbor_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
				enum hora_net_dtype t, const struct hora_net_neighbors *nb);
/* The average of buf with rank peer's buf: both end with (x_a + x_b) / 2,
 * bitwise the same on both (the lower rank's value first; integers round
 * to nearest, so their sum may move by one). Only the two ranks take part:
 * calls between a pair are numbered per pair (the n-th pair average of a
 * with b meets b's n-th with a), apart from the collectives' numbering, so
 * other ranks may run other pairs meanwhile. Blocks until peer calls it
 * with this rank (up to the I/O timeout of no progress); a count or dtype
 * that differs fails both with -EBADE naming both calls. A peer that is not
 * another rank of the communicator is -EINVAL here alone (the communicator
 * stays usable); a bad dtype or count is refused as for the collectives. */
int hora_net_pair_average(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t, int peer);
/* The neighbour allreduce's pattern check, on by default. Off, a call
 * costs no allreduce, but an inconsistent pattern is the caller's mistake
 * to avoid: a rank that waits for a message nobody sends times out (the
 * I/O timeout), and one sent to a rank that does not expect it is named as
 * a mismatch by the first later call of that rank that reads it. Every
 * rank must set the same (the check is itself an exchange). */
void hora_net_comm_set_neighbor_check(struct hora_net_comm *c, bool on);
/* Buffers in these regions (net/shm/shm.h; borrowed: they must outlive
 * the communicator, or be replaced first) are allreduced in place where
 * they lie on one host when every rank's is in one (the stage's
 * single-copy path); NULL: none. Not thread-safe against a running call. */
struct hora_net_shm_regions;
void hora_net_comm_set_regions(struct hora_net_comm *c, struct hora_net_shm_regions *regs);
/* How many allreduces took the single-copy path so far (any thread). */
uint64_t hora_net_comm_single_copy_calls(const struct hora_net_comm *c);

/* Force the algorithm of later calls (every rank must do the same: the
 * fingerprint names a difference). Not thread-safe against a running call. */
void hora_net_comm_set_algo(struct hora_net_comm *c, enum hora_net_algo algo);
/* The size threshold of the latency algorithms (set from a measured
 * crossover); -EINVAL above small_cap. */
int hora_net_comm_set_small_bytes(struct hora_net_comm *c, size_t bytes);
size_t hora_net_comm_small_bytes(const struct hora_net_comm *c);

/* What the communicator is doing, for other threads: the sequence number
 * and kind (enum hora_net_coll_kind) of the last collective entered, whether
 * it is still inside it, and since when (CLOCK_MONOTONIC ms). */
void hora_net_comm_progress(struct hora_net_comm *c, uint64_t *seq, uint32_t *kind, int *inside,
			    int64_t *since_ms);
/* "allreduce", ...; "?" for a value that is no enum hora_net_coll_kind
 * (the kind travels as uint32_t in stall reports). */
const char *hora_net_coll_name(uint32_t kind);

/* From any thread: make the call in progress fail now, and every later one
 * (-ECANCELED; the calling thread then breaks the communicator as for any
 * error). The fast sockets are shut down for reading (a blocked receive
 * returns; a send blocked on a full buffer waits for its io timeout) and
 * every peer is failed with
 * why; nothing is freed here. For the stall abort (core/comm_watch.c). */
void hora_net_comm_interrupt(struct hora_net_comm *c, const char *why);
/* The same, because this rank lost lost_rank (the failure detector
 * declared it dead, core/comm_watch.c): the LOST notices this rank then sends
 * name lost_rank, not this rank, so every rank's error names it ("rank 0
 * stopped: it lost rank 2"). */
void hora_net_comm_interrupt_lost(struct hora_net_comm *c, int lost_rank, const char *why);

const char *hora_net_comm_error(const struct hora_net_comm *c);

/* A collective whose data another module moves (core/devcoll.c: buffers in
 * device memory): numbered and fingerprinted as every call (path "device
 * buffers", so a rank that passed host buffers to the same call is named
 * as a mismatch), then run(arg, err, errlen) moves the data, and may make
 * collectives of its own on c (every rank makes the same ones). A failure
 * of run (negative errno, why in err) breaks the communicator as any
 * failure does: every rank's call fails naming this rank and err. root:
 * the broadcast's; count, t, op as the call's. Arguments run cannot take
 * (a dtype, an op) are refused before run, on every rank. variant (the
 * way the module moves the data, e.g. NCCL or staged through host memory,
 * 0..65535) is in the fingerprint too: ranks that chose different ways
 * fail as a mismatch instead of waiting for each other. */
typedef int (*hora_net_device_fn)(void *arg, char *err, size_t errlen);
struct hora_net_device_args {
	enum hora_net_coll_kind kind;
	const void *send; /* NULL (broadcast): no overlap check */
	const void *recv;
	size_t count;
	enum hora_net_dtype t;
	enum hora_net_op op;
	int root;
	unsigned variant;
};
/* (send and recv only for the overlap checks of the host paths: buffers
 * that overlap other than in the documented in-place layouts are refused
 * on every rank, as there) */
int hora_net_device_call(struct hora_net_comm *c, const struct hora_net_device_args *a, hora_net_device_fn run,
			 void *arg);
/* Break the communicator because of a failure of this rank's own (why:
 * what failed): every rank's next or current call fails naming this rank
 * and why, as after any failure. Returns rc. For calls that are not
 * collectives of every rank (core/devcoll.c's pair average). */
int hora_net_comm_fail(struct hora_net_comm *c, int rc, const char *why);
/* The number of hosts the ranks are on (1 for a communicator of one). */
int hora_net_comm_hosts(const struct hora_net_comm *c);
/* This rank's place on its host: its local rank, the ranks on the host,
 * and the rank of local rank 0 (topo.c; a communicator of one: 0, 1, its
 * rank). */
void hora_net_comm_local(const struct hora_net_comm *c, int *lrank, int *nlocal, int *local0);
/* The hierarchical allreduce's cross-host communicator (the ranks with
 * this rank's local rank, one per host, in host order), or NULL where
 * there is none (one host, hosts of unequal sizes, collectives.
 * hierarchical: off). Owned by c; its failures break only it: a caller
 * that uses it fails c itself (hora_net_device_call's run does). */
struct hora_net_comm *hora_net_comm_cross(struct hora_net_comm *c);
/* No progress from a peer this long fails a call (transport.io_timeout_ms;
 * 0: never). */
int hora_net_comm_io_timeout_ms(const struct hora_net_comm *c);
/* The hosts, the links and the path an allreduce of `bytes` takes
 * (hora_comm_describe). */
int hora_net_comm_describe(const struct hora_net_comm *c, size_t bytes, char *buf, size_t len);
int hora_net_comm_rank(const struct hora_net_comm *c);
int hora_net_comm_size(const struct hora_net_comm *c);

#endif
