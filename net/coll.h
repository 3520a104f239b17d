/* coll.h - communicators and collectives over the transport (net/ only; the
 * public names are in core/hora.h).
 *
 * A communicator is N ranks with one authenticated peer to every other
 * rank. Collectives are called by every rank in the same order; each call
 * carries a fingerprint (sequence number, name, count, dtype, op) that the
 * neighbours compare, so a mismatch is a named error, never a hang or
 * garbage. After an error the communicator is broken: its peers are closed,
 * so that the ranks waiting on this one fail too instead of hanging.
 */
#ifndef HORA_NET_COLL_H
#define HORA_NET_COLL_H

#include "hora_net.h"
#include "reduce.h"

struct hora_net_comm_cfg {
	int rank, nranks;
	const char *const *addrs;  /* nranks "ip:port": where each rank listens (TCP) */
	struct hora_net_opts opts; /* node_id is set to rank */
	int connect_timeout_ms;    /* default 30000 */
	size_t small_bytes;        /* allreduce below this: recursive doubling (default 64 KiB) */
	size_t segment_bytes;      /* ring pipeline segment (default 1 MiB) */
	int depth;                 /* ring receives in flight (default 4) */
};

struct hora_net_comm;

int hora_net_comm_create(const struct hora_net_comm_cfg *cfg, struct hora_net_comm **out, char *err,
			 size_t errlen);
void hora_net_comm_destroy(struct hora_net_comm *c);

/* recv = reduce(send of every rank). send == recv is in place. Returns 0 or
 * a negative errno; the reason (rank, peer, sequence, cause) is in
 * hora_net_comm_error. Every rank gets bitwise identical results. */
int hora_net_allreduce(struct hora_net_comm *c, const void *send, void *recv, size_t count,
		       enum hora_net_dtype t, enum hora_net_op op);

/* Force the algorithm: 0 auto, 1 ring, 2 recursive doubling. */
void hora_net_comm_set_algo(struct hora_net_comm *c, int algo);

const char *hora_net_comm_error(const struct hora_net_comm *c);
int hora_net_comm_rank(const struct hora_net_comm *c);
int hora_net_comm_size(const struct hora_net_comm *c);

#endif
