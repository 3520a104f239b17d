/* fake_nccl.h - the test double's NCCL among several processes of one host
 * (fake_nccl.c): what fake_gpu.c's nccl_init and nccl_coll use for a
 * communicator of more than one rank. Codes as gpu/hora_gpu_ops.h: kind is
 * enum hora_gpu_coll_kind, dtype and op hora's (core/hora.h); 0 or a
 * negative errno with the reason in err. */
#ifndef HORA_TESTS_FAKE_NCCL_H
#define HORA_TESTS_FAKE_NCCL_H

#include <stddef.h>
#include <stdint.h>

struct fake_nccl_group;

/* Join the group of id (the unique id's bytes, >= 32): waits up to
 * timeout_ms (<= 0: for ever) for all nranks, as ncclCommInitRank. */
int fake_nccl_group_open(const uint8_t *id, size_t idlen, int nranks, int rank, int timeout_ms,
			 struct fake_nccl_group **out, char *err, size_t errlen);
void fake_nccl_group_close(struct fake_nccl_group *g);
/* One collective (count as NCCL's: the allgather's send count, the
 * reduce-scatter's receive count); every rank calls the same ones.
 * -ETIMEDOUT after timeout_ms (a rank that does not come), -ECANCELED
 * once *cancel is set (nccl_interrupt). */
int fake_nccl_group_coll(struct fake_nccl_group *g, int kind, const void *send, void *recv, size_t count,
			 int dtype, int op, int root, int timeout_ms, const int *cancel, char *err, size_t errlen);

#endif
