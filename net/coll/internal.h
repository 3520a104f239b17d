/* internal.h - what the files of net/coll share: the communicator's state,
 * the fingerprint and notice message (wire.c), failure handling
 * (notice.c), the fingerprinted exchanges every algorithm uses
 * (exchange.c) and the algorithms themselves (one file each). Not an API:
 * only the .c files of net/coll include it.
 */
#ifndef HORA_NET_COLL_INTERNAL_H
#define HORA_NET_COLL_INTERNAL_H

#include "net/coll/coll.h"
#include "net/coll/link.h"
#include "net/coll/stage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* ---- the communicator (comm.c) -------------------------------------------------- */

/* Why a rank refused a call (an invalid argument; dispatch.c). */
enum refusal_reason { REFUSE_DTYPE = 1, REFUSE_OP, REFUSE_ROOT, REFUSE_COUNT, REFUSE_OVERLAP,
		      REFUSE_PEER,   /* a neighbour rank out of range, this rank, or twice */
		      REFUSE_DEGREE, /* a neighbour count out of 0..N-1 (or no list) */
		      REFUSE_WEIGHT, /* a weight that is not finite (value: its rank) */
		      REFUSE_REASONS };

struct refusal {
	int by;         /* the refusing rank; -1: none seen */
	uint32_t kind;  /* enum hora_net_coll_kind of the refused call */
	uint64_t seq;   /* its sequence number */
	uint8_t reason; /* enum refusal_reason */
	int64_t value;  /* the refused value (dtype, op, root, count) */
};

/* Threads: one calling thread at a time runs a collective (the caller's
 * contract); the link's progress thread runs the ring's callbacks, which
 * read cfg, pool and the link and record notices (atomics, refusal_mu).
 * Other threads read only the p_* fields. */
struct hora_net_comm {
	struct hora_net_comm_cfg cfg; /* defaults applied */
	struct hora_net_link *link;   /* NULL when nranks == 1 */
	int rank, n, spin_us;
	uint64_t seq;
	enum hora_net_coll_kind kind; /* of the call in progress, for messages */
	enum hora_net_algo algo;
	int broken;                   /* 0, or the code every later call returns */
	char err[512];
	uint8_t *pool;    /* depth segments (the pipelined ring's receives) */
	uint8_t *scratch; /* out-of-place reduce-scatter's partial sums */
	size_t scratch_bytes;
	uint8_t *small;   /* small_cap + 64: the other rank's data in recursive
			     doubling, one chunk of the direct ring */
	/* progress, read by other threads (stall inspection) */
	_Atomic uint64_t p_seq;
	_Atomic uint32_t p_kind;
	_Atomic int p_inside;
	_Atomic int64_t p_since_ms;
	int nest; /* device calls running (hora_net_device_call): the calls their
		     run makes leave p_inside set (the executing thread's) */
	/* what notices told us (notice.c) */
	_Atomic int abort_origin; /* the rank that saw the mismatch first (-1: none seen) */
	_Atomic int lost_origin;  /* the rank whose loss a LOST we read named (-1: none) */
	pthread_mutex_t refusal_mu;
	struct refusal refusal;   /* the first refusal seen (ours or a notice's), refusal_mu */
	int post_err;             /* why the last post was refused */
	int fail_peer;            /* the rank the failure that broke us came from (-1: none) */
	int notice_wait_ms;       /* how long a failure waits for that rank's notice (20) */
	/* neighbour averaging (neighbor.c) */
	bool nbr_nocheck;         /* the pattern check is off */
	uint64_t *pair_seq;       /* n: pair averages done with each rank */
	uint64_t pair_now;        /* the pair average in progress, for messages */
	uint8_t *nbr_buf;         /* chunks in flight: received and scaled copies */
	size_t nbr_bytes;
	_Atomic int interrupted;  /* hora_net_comm_interrupt was called (any thread) */
	/* node-aware paths (topo.c, hier.c): who shares a host, the local
	 * stage, the cross-host communicator of the hierarchical allreduce */
	struct node_map *node;         /* NULL when nranks == 1 */
	struct hora_net_stage *stage;  /* this host's stage; NULL: none (shm off, alone). Set
					  by the caller's thread; read by others under stage_mu */
	pthread_mutex_t stage_mu;
	int *lsocks, nlsocks;          /* the sockets the stage borrows, when no link owns them */
	struct hora_net_comm *cross;   /* one rank per host, ours among them; NULL: no hierarchy */
	int *cross_map;                /* nhosts: the rank here of each cross rank */
	bool quiet;                    /* the cross communicator: its failures send no notices
					  (their ranks are numbered by host; the parent's say it) */
	char flat_why[128];            /* why there is no hierarchy, for describe */
	struct hora_net_shm_regions *regions; /* borrowed (the caller's): buffers the stage can map */
	_Atomic uint64_t single_copy;  /* allreduces that took the stage's single-copy path */
};

/* ---- the 32-byte fingerprint / notice (wire.c) ---------------------------------- */

#define FP_BYTES 32

/* Notices: a failing rank's last word on the small-message path, in the
 * place of a fingerprint. ABORT "I saw a mismatch and stop", LOST "I stop
 * because I lost this rank" (itself: an error of its own), REFUSED "this
 * rank refused this call" (an invalid argument). */
enum notice_kind { NOTICE_LOST = 0xa1, NOTICE_ABORT = 0xab, NOTICE_REFUSED = 0xae };

/* path: which algorithm this rank runs the call with (settings such as
 * small_bytes may differ between ranks: then the data would not line up),
 * layout: the pipelined ring's and chain's segment, slice and depth */
enum path { P_NONE, P_SMALL, P_DIRECT, P_RING, P_CHAIN, P_STAGE, P_HIER, P_GATHER, P_DEVICE, P_PATHS };

/* A fingerprint, or a notice (kind: enum notice_kind) with the rank it names
 * in root and, for a refusal, the refused call's kind in dtype, the reason
 * in op and the refused value in count; a notice's other fields are 0. */
struct fp {
	uint64_t seq, count;
	uint32_t kind, root;
	uint8_t dtype, op;
	uint16_t nranks;
	uint8_t path;
	uint16_t layout;
};

void fp_encode(uint8_t *b, const struct fp *f);
void fp_decode(const uint8_t *b, struct fp *f);
/* 1 when f is a well-formed notice (one of enum notice_kind, zero where a
 * notice has nothing) */
int fp_is_notice(const struct fp *f);
/* set f's path and, for the pipelined ring and chain, the layout hash */
void fp_via(struct fp *f, const struct hora_net_comm *c, enum path p);
/* "broadcast #5 (count 4, f32, root 1, 4 ranks)" */
void fp_describe(char *s, size_t n, const struct fp *f);
const char *fp_path_name(enum path p);
/* "root 7 >= size 4", "invalid op 99", ... */
void refusal_text(char *s, size_t n, const struct refusal *r, int nranks);

/* ---- failure and notices (notice.c) --------------------------------------------- */

/* The call fails: record why (once, prefixed with rank, view, call), tell
 * every rank why (a notice on the small-message path), break every
 * connection. peer: the rank the failure came from, -1 if none. Returns rc. */
int coll_fail_peer(struct hora_net_comm *c, int rc, int peer, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
#define coll_fail(c, rc, ...) coll_fail_peer(c, rc, -1, __VA_ARGS__)
/* This rank refuses the call it just entered: record it, tell every rank
 * (REFUSED notices), break every connection. Returns -EINVAL. */
int coll_refuse(struct hora_net_comm *c, enum refusal_reason reason, int64_t value);
/* Leave the local stage (a broken call): local ranks waiting for us fail
 * at once instead of at their timeout. */
void stage_leave(struct hora_net_comm *c);
/* Compare a received fingerprint (or notice) b with ours, from rank `from`:
 * 0; -EBADE for a mismatch or an ABORT notice, -ECONNRESET for a LOST
 * notice, -EINVAL for a REFUSED one, with the reason in msg. Its only side
 * effect is recording a notice's origin (safe on the link's thread). */
int fp_compare(struct hora_net_comm *c, const uint8_t *b, const struct fp *mine, int from, char *msg,
	       size_t len);

/* ---- fingerprinted exchanges (exchange.c) --------------------------------------- */

/* a refused post keeps its reason for the error text */
int coll_posted(struct hora_net_comm *c, int rc);
/* wait for a posted message of rank `peer`; a failure fails the call */
int coll_wait(struct hora_net_comm *c, struct hora_net_link_req *r, int peer, const char *what);
/* Caller-driven: send {fingerprint, obody} to rank `to` and/or receive
 * {fingerprint, ibody} from rank `from` (-1: none); the received fingerprint
 * is checked as soon as it is in. A failure fails the call. */
int coll_xchg(struct hora_net_comm *c, int to, const void *obody, size_t obytes, int from, void *ibody,
	      size_t ibytes, const struct fp *f);
/* the same, bodies of one length */
int coll_xchg1(struct hora_net_comm *c, int to, const void *obody, int from, void *ibody, size_t bytes,
	       const struct fp *f);
/* Just the fingerprint on the caller-driven path: a call that moves its data
 * on the queued path shows it there first, so that a rank running another
 * call by a latency algorithm (which reads only that path) names the
 * mismatch at once. */
int coll_fp_xchg(struct hora_net_comm *c, int to, int from, const struct fp *f);
/* Fingerprints on the queued path with both neighbours (-1: none), before
 * the chain broadcast's data. */
int coll_fp_queued(struct hora_net_comm *c, int left, int right, const struct fp *f);

/* ---- algorithms ------------------------------------------------------------------ */

/* ring.c: which halves of the ring schedule run, and how chunks are laid out */
enum ring_mode { RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALLGATHER };
/* the pipelined ring's call: its path in the fingerprint, shown to both
 * neighbours on the caller-driven path */
int ring_fp(struct hora_net_comm *c, struct fp *f);
/* src: this rank's input (whole buffer for allreduce and reduce-scatter, one
 * chunk for allgather); dst: the output (whole buffer, or one chunk for
 * reduce-scatter); work: a whole buffer that holds partial sums until they
 * leave (dst for allreduce). */
int ring_run(struct hora_net_comm *c, enum ring_mode mode, const uint8_t *src, uint8_t *work, uint8_t *dst,
	     size_t count, enum hora_net_dtype t, enum hora_net_op op, const struct fp *f);
/* doubling.c: buf holds this rank's data and gets the result */
int doubling_allreduce(struct hora_net_comm *c, void *buf, size_t count, enum hora_net_dtype t,
		       enum hora_net_op op, const struct fp *f);
int doubling_barrier(struct hora_net_comm *c, const struct fp *f);
/* direct.c: ring allreduce on the caller-driven path */
int direct_ring_allreduce(struct hora_net_comm *c, const uint8_t *src, uint8_t *dst, size_t count,
			  enum hora_net_dtype t, enum hora_net_op op, const struct fp *f);
/* neighbor.c: one neighbour exchange, arguments checked (dispatch.c).
 * src_w NULL: 1/(nsrc+1) each; pair: the pair average with src[0] (send ==
 * recv, weights 1/2, the lower rank's value first; f numbered per pair,
 * no pattern check). */
struct nbr_call {
	const uint8_t *send;
	uint8_t *recv;
	size_t count;
	enum hora_net_dtype t;
	double self_w;
	const int *src, *dst;
	const double *src_w, *dst_w;
	int nsrc, ndst;
	bool pair;
};
int neighbor_run(struct hora_net_comm *c, const struct nbr_call *x, const struct fp *f);
/* topo.c: after the TCP link is up, find the hosts and build what they
 * allow (the shared-memory link and stage, the cross-host communicator);
 * topo_free undoes it */
int topo_setup(struct hora_net_comm *c, char *err, size_t errlen);
void topo_free(struct hora_net_comm *c);
int topo_describe(const struct hora_net_comm *c, char *buf, size_t len);
/* local.c, hier.c: the allreduce through the local stage alone (one host:
 * the small path up to small_bytes when small_fits, the stage above) and
 * the hierarchical one (stage, cross-host ring, stage); send == recv in
 * place. stage_fail: a stage error breaks the communicator. */
bool small_fits(const struct hora_net_comm *c, size_t bytes);
/* every rank's fingerprint through the stage, when local_checks (one host) */
bool local_checks(const struct hora_net_comm *c);
int local_check(struct hora_net_comm *c, const struct fp *f);
int small_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		    enum hora_net_op op, const struct fp *f);
int stage_fail(struct hora_net_comm *c, int rc, const char *what, const char *err);
int stage_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		    enum hora_net_op op, const struct fp *f);
/* one host: reduce-scatter and allgather through the stage (work: send in
 * place, else a scratch of n * recvcount) */
int stage_reduce_scatter(struct hora_net_comm *c, const void *send, void *work, void *recv, size_t recvcount,
			 enum hora_net_dtype t, enum hora_net_op op, const struct fp *f);
int stage_allgather(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		    const struct fp *f);
int hier_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count, enum hora_net_dtype t,
		   enum hora_net_op op, const struct fp *f);
/* comm.c: a communicator of n ranks over link (taken), settings of parent */
struct hora_net_comm *comm_sub(const struct hora_net_comm *parent, int rank, int n, struct hora_net_link *link);
/* bcast.c */
int tree_bcast(struct hora_net_comm *c, void *buf, size_t bytes, int root, const struct fp *f);
int chain_bcast(struct hora_net_comm *c, uint8_t *buf, size_t bytes, int root, const struct fp *f);

#endif
