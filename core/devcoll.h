/* devcoll.h - the collectives on buffers in device (CUDA) memory, for the
 * public communicator (core/comm.c; core only).
 *
 * A call whose send or receive buffer is device memory (hora_gpu_mem_kind:
 * asked only once this process loaded hora's GPU module, so a CPU-only
 * program never touches CUDA) goes here instead of to net/coll's host
 * paths:
 * - every rank on one host: NCCL among them for the allreduce, broadcast,
 *   allgather and reduce-scatter;
 * - several hosts of several ranks each: the allreduce as NCCL's
 *   reduce-scatter within the host, the shard's allreduce across hosts on
 *   the cross-host ring, NCCL's allgather;
 * - NCCL is built at the first call that can use it: each host's local
 *   rank 0's ncclUniqueId to every rank by an allgather over hora's own
 *   authenticated transport, every step's outcome agreed by an allreduce,
 *   so that all use NCCL or none does; again after an elastic re-form;
 * - otherwise (one rank per host, unequal hosts, the other collectives
 *   across hosts, no NCCL on every rank): staged, the device buffers
 *   copied to page-locked host memory, the host collective of net/coll
 *   (whatever that size and topology take), the result copied back; the
 *   pair average too (outside hora_net_device_call: it is no collective
 *   of every rank).
 * The others go through hora_net_device_call, so each call is numbered
 * and fingerprinted as a device call: a rank that passed host buffers
 * where the others passed device buffers is named as a mismatch, and a
 * failure on one rank before the data moved fails the call on every rank,
 * naming it; one after (a copy back) fails that rank's call, and the
 * others' next call. An NCCL wait ends at transport.io_timeout_ms (30 s
 * when that is 0) or when the loss watcher interrupts it; a live peer
 * that failed its own part is seen by NCCL itself (an aborted peer), else
 * at that bound. NCCL's init waits up to 120 s (gpu/nccl.cu) and is not
 * interruptible.
 * The caller's buffers must be ready (the kernels that wrote them done, as
 * for CUDA-aware MPI); the call returns with the result in the buffer. */
#ifndef HORA_CORE_DEVCOLL_H
#define HORA_CORE_DEVCOLL_H

#include "net/coll/coll.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct hora_devcoll;

/* One call, as the public communicator's request holds it. */
struct devcoll_call {
	enum hora_net_coll_kind kind;
	const void *send;
	void *recv; /* broadcast / pair average: the buffer */
	size_t count;
	enum hora_net_dtype t;
	enum hora_net_op op;
	int root; /* broadcast: the root; pair average: the peer */
	/* the host collective of the call with host buffers in place of the
	 * device ones (core/comm.c's execute_net on a copy of the request) */
	int (*host)(void *arg, const void *send, void *recv);
	void *arg;
};

/* Whether call's buffers include device memory (*device: its device), or
 * CUDA could not tell for one of them (*device DEVCOLL_UNKNOWN: then
 * devcoll_run fails the call on every rank rather than guess). */
#define DEVCOLL_UNKNOWN (-2)
bool devcoll_wants(const struct devcoll_call *call, int *device);

/* Run call on net (see above). d is created on first use into *d. 0 or
 * a negative code; the message is net's (hora_net_comm_error). */
int devcoll_run(struct hora_devcoll *_Atomic *d, struct hora_net_comm *net, const struct devcoll_call *call,
		int device);

/* Any thread (the loss watcher, the stall inspector): an NCCL call in
 * progress, and every later one until devcoll_reset, returns at once
 * (-ECANCELED) instead of waiting for a peer that is gone. */
void devcoll_interrupt(struct hora_devcoll *d);

/* The communicator is re-formed or destroyed: the NCCL communicator goes
 * (aborted: its peers may be gone), the next device call builds one over
 * the new ranks. free_all also frees the staging memory and d. */
void devcoll_reset(struct hora_devcoll *d, bool free_all);

/* "device buffers: 3 calls by NCCL, 0 staged through host memory; NCCL
 * on device 0", "...; no NCCL: why", "device buffers: not used yet" (valid
 * until the next call) */
const char *devcoll_describe(struct hora_devcoll *d);

#endif
