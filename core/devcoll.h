/* devcoll.h - the collectives on buffers in device (CUDA) memory, for the
 * public communicator (core/comm.c; core only).
 *
 * A call whose send or receive buffer is device memory (hora_gpu_mem_kind:
 * asked only once this process loaded hora's GPU module, so a CPU-only
 * program never touches CUDA) goes here instead of to net/coll's host
 * paths:
 * - every rank on one host: NCCL among them, the communicator built at the
 *   first such call (the ncclUniqueId of rank 0 sent over hora's own
 *   authenticated transport, a broadcast; every rank's ncclCommInitRank
 *   result agreed by an allreduce, so all use NCCL or none does);
 * - otherwise, or where NCCL is not there (a GPU library of ABI < 3, one
 *   rank's init failed): staged, the device buffers copied to page-locked
 *   host memory, the host collective of net/coll (shared memory, the
 *   hierarchical allreduce, the TCP ring: whatever that size and topology
 *   take), the result copied back.
 * Both go through hora_net_device_call, so the call is numbered and
 * fingerprinted as a device call: a rank that passed host buffers where
 * the others passed device buffers is named as a mismatch, and a CUDA or
 * NCCL failure on one rank fails the call on every rank, naming it.
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

/* Whether call's buffers include device memory (*device: its device). */
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
