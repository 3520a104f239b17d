/* wire.c - the one 32-byte message of the collectives' protocol: a call's
 * fingerprint, or a failing rank's notice in its place (internal.h). One
 * encoder, one decoder; both ranks of a pair run on the same build, so the
 * fields are in host order, as they always were.
 *
 *   0  seq      8   count (refusal: the refused value)
 *   16 kind     20  dtype (refusal: the call's kind)  21 op (refusal: reason)
 *   22 nranks   24  root (notice: the rank it names)
 *   28 path     29  layout (2)                        31 zero
 */
#include "net/coll/internal.h"

#include <stdio.h>
#include <string.h>

static const char *const kind_name[HORA_NET_COLL_KINDS] = {"allreduce", "broadcast", "allgather",
							    "reduce_scatter", "barrier",
							    "neighbor_allreduce", "pair_average"};

const char *hora_net_coll_name(uint32_t kind)
{
	return kind < HORA_NET_COLL_KINDS ? kind_name[kind] : "?";
}

void fp_encode(uint8_t *b, const struct fp *f)
{
	memset(b, 0, FP_BYTES);
	memcpy(b, &f->seq, 8);
	memcpy(b + 8, &f->count, 8);
	memcpy(b + 16, &f->kind, 4);
	b[20] = f->dtype;
	b[21] = f->op;
	memcpy(b + 22, &f->nranks, 2);
	memcpy(b + 24, &f->root, 4);
	b[28] = f->path;
	memcpy(b + 29, &f->layout, 2);
}

void fp_decode(const uint8_t *b, struct fp *f)
{
	memcpy(&f->seq, b, 8);
	memcpy(&f->count, b + 8, 8);
	memcpy(&f->kind, b + 16, 4);
	f->dtype = b[20];
	f->op = b[21];
	memcpy(&f->nranks, b + 22, 2);
	memcpy(&f->root, b + 24, 4);
	f->path = b[28];
	memcpy(&f->layout, b + 29, 2);
}

int fp_is_notice(const struct fp *f)
{
	if (f->kind != NOTICE_LOST && f->kind != NOTICE_ABORT && f->kind != NOTICE_REFUSED)
		return 0;
	if (f->nranks || f->path || f->layout)
		return 0;
	if (f->kind == NOTICE_REFUSED)
		return f->dtype < HORA_NET_COLL_KINDS && f->op >= REFUSE_DTYPE && f->op < REFUSE_REASONS;
	return !f->count && !f->dtype && !f->op;
}

void fp_via(struct fp *f, const struct hora_net_comm *c, enum path p)
{
	f->path = (uint8_t)p;
	f->layout = 0;
	if (p == P_RING || p == P_CHAIN) {
		uint64_t h = c->cfg.segment_bytes * 0x9E3779B97F4A7C15ull;
		h ^= (c->cfg.slice_bytes + 1) * 0xC2B2AE3D27D4EB4Full + (uint64_t)c->cfg.depth;
		f->layout = (uint16_t)((h >> 48) | 1);
	}
}

const char *fp_path_name(enum path p)
{
	static const char *const name[P_PATHS] = {"?", "a latency algorithm on the small-message sockets",
						  "the direct ring", "the pipelined ring", "the pipelined chain",
						  "the shared-memory stage", "the hierarchical allreduce",
						  "the shared-memory gather (latency)",
						  "device buffers (core's device collectives)"};
	return p < P_PATHS ? name[p] : "?";
}

void fp_describe(char *s, size_t n, const struct fp *f)
{
	int k = snprintf(s, n, "%s #%llu (count %llu, %s", hora_net_coll_name(f->kind),
			 (unsigned long long)f->seq, (unsigned long long)f->count,
			 f->dtype < HORA_NET_DTYPES ? hora_net_dtype_name(f->dtype) : "?");
	if (f->kind == HORA_NET_COLL_ALLREDUCE || f->kind == HORA_NET_COLL_REDUCE_SCATTER)
		k += snprintf(s + k, n - (size_t)k, ", %s", f->op < HORA_NET_OPS ? hora_net_op_name(f->op) : "?");
	if (f->kind == HORA_NET_COLL_BROADCAST)
		k += snprintf(s + k, n - (size_t)k, ", root %u", f->root);
	snprintf(s + k, n - (size_t)k, ", %u ranks)", f->nranks);
}

void refusal_text(char *s, size_t n, const struct refusal *r, int nranks)
{
	const long long v = (long long)r->value;
	switch (r->reason) {
	case REFUSE_DTYPE:
		snprintf(s, n, "invalid dtype %lld", v);
		break;
	case REFUSE_OP:
		snprintf(s, n, "invalid op %lld", v);
		break;
	case REFUSE_ROOT:
		if (v < 0)
			snprintf(s, n, "root %lld < 0", v);
		else
			snprintf(s, n, "root %lld >= size %d", v, nranks);
		break;
	case REFUSE_COUNT:
		snprintf(s, n, "count %llu is too large", (unsigned long long)r->value);
		break;
	case REFUSE_PEER:
		snprintf(s, n, "neighbour %lld is not another rank of 0..%d, or is named twice", v, nranks - 1);
		break;
	case REFUSE_DEGREE:
		snprintf(s, n, "%lld neighbours (0..%d, and the ranks given)", v, nranks - 1);
		break;
	case REFUSE_WEIGHT:
		snprintf(s, n, "the weight for rank %lld is not finite", v);
		break;
	case REFUSE_OVERLAP:
		snprintf(s, n, "send and recv overlap; in place is %s",
			 r->kind == HORA_NET_COLL_REDUCE_SCATTER ? "recv == send + rank x recvcount"
			 : r->kind == HORA_NET_COLL_ALLGATHER    ? "send == recv + rank x count"
								 : "send == recv");
		break;
	default:
		snprintf(s, n, "an invalid argument");
	}
}
