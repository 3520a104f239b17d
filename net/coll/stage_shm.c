/* stage_shm.c - the node-local stage's ops (stage.h) over the shared arena
 * (stage_arena.c): reduce-scatter, allgather and allreduce as a sequence
 * of steps, each "write into our slot, publish, wait for everyone
 * (stage_wait.c), read the others' slots". Not the mapping nor the wait.
 *
 * Step g uses slot g % 2 of every rank. A slot holds nlocal pieces of P
 * elements; piece position l of rank r's slot is r's contribution to
 * what local rank l reduces ("in" positions, l != r), position r what r
 * reduced ("out", the allreduce's result for the others). The rules that
 * make the double buffering safe (README.md argues them):
 *   - in positions of slot g % 2 are written before publishing g and read
 *     by the others between their wait for g and their publish of g + 1;
 *   - the out position is written after the wait for g and read by the
 *     others after their wait for g + 1 (before their publish of g + 2);
 *   - the allreduce's last step skips one step number, so the next call's
 *     first step uses the other slot (it may write whole slots: small path).
 * Every element is reduced by one rank (or, small path, identically by
 * every rank) in local-rank order 0..n-1: the same bits everywhere.
 */
#include "net/coll/stage_shm_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* an allreduce up to this many bytes (and a slot): one step, every rank
 * reduces the whole buffer (one barrier instead of two) */
#define SMALL_BYTES (16u << 10)

/* out = src[0] op src[1] op ... op src[n-1] (in that order) over m elements,
 * block by block; div > 1: each block then divided by div (AVG, the
 * allreduce's: hora_net_scale, while the block is in L1 instead of one more
 * pass over the whole buffer); then copy (optional) gets out too, from L1. */
void stage_fold(uint8_t *out, uint8_t *copy, const uint8_t *const *src, int n, size_t m, size_t es,
		enum hora_net_dtype t, enum hora_net_op op, int div)
{
	const size_t blk = STAGE_FOLD_BLOCK_BYTES / es;
	for (size_t i = 0; i < m; i += blk) {
		const size_t b = m - i < blk ? m - i : blk, o = i * es;
		hora_net_reduce(out + o, src[0] + o, src[1] + o, b, t, op);
		for (int l = 2; l < n; l++)
			hora_net_reduce(out + o, out + o, src[l] + o, b, t, op);
		if (div > 1)
			hora_net_scale(out + o, b, t, div);
		if (copy)
			memcpy(copy + o, out + o, b * es);
	}
}

/* The elements per piece: a slot split nlocal ways, whole cache lines. */
static size_t piece_elems(const struct stage_shm *st, size_t es)
{
	return st->slot_bytes / (size_t)st->pub.nlocal / STAGE_LINE * STAGE_LINE / es;
}

/* Piece k (P elements) of shard l of count: *off, *len (0 past its end). */
static void shard_piece(size_t count, int n, int l, size_t k, size_t P, size_t *off, size_t *len)
{
	size_t so, sl;
	hora_net_stage_shard(count, n, l, &so, &sl);
	*off = so + (sl > k * P ? k * P : sl);
	*len = sl > k * P ? (sl - k * P < P ? sl - k * P : P) : 0;
}

/* After an error: unusable, and we leave, so that peers waiting for us
 * fail now rather than at their timeout (naming whom we lost, if anyone). */
int stage_shm_breaks(struct stage_shm *st, int rc, char *err, size_t errlen)
{
	st->broken = rc;
	atomic_store_explicit(&st->ctl->rank[st->pub.lrank].broke_at, st->waiting ? st->step : st->step + 1,
			      memory_order_seq_cst);
	atomic_store_explicit(&st->ctl->rank[st->pub.lrank].left, 1, memory_order_seq_cst);
	stage_wake_all(st);
	stage_errf(err, errlen, "%s", st->broken_err);
	return rc;
}

/* Rank l gets a CPU of its mask no rank before it holds, moving those
 * ranks to others of theirs when it must (an augmenting path: Kuhn's
 * matching). owner[c]: the rank holding CPU c, -1 none. */
static bool match_cpu(const struct stage_shm *st, int l, int16_t *owner, uint8_t *seen)
{
	for (int c = 0; c < 64 * STAGE_CPU_WORDS; c++) {
		if (!(st->ctl->rank[l].cpus[c / 64] >> (c % 64) & 1) || seen[c])
			continue;
		seen[c] = 1;
		if (owner[c] < 0 || match_cpu(st, owner[c], owner, seen)) {
			owner[c] = (int16_t)l;
			return true;
		}
	}
	return false;
}

/* Once an op has completed (every rank reached our step, so every rank's
 * mask, written before its first step, is visible): spin only when every
 * rank can have a CPU of its own within its mask (a matching of ranks to
 * CPUs: masks {0}, {0}, {0-3} have 4 CPUs among them but two ranks on CPU
 * 0). Ranks under one taskset or cpuset of fewer CPUs would otherwise spin
 * on the CPU the rank they wait for needs (2 ranks on 1 CPU: an 8-byte
 * call ~820 us instead of ~5). A rank whose mask is unknown keeps the
 * host's count (stage_arena.c). Local: each rank decides its own waiting. */
static void spin_decide(struct stage_shm *st)
{
	st->spin_known = 1;
	const int n = st->pub.nlocal;
	for (int l = 0; l < n; l++) {
		uint64_t any = 0;
		for (int w = 0; w < STAGE_CPU_WORDS; w++)
			any |= st->ctl->rank[l].cpus[w];
		if (!any)
			return;
	}
	int16_t owner[64 * STAGE_CPU_WORDS];
	uint8_t seen[64 * STAGE_CPU_WORDS];
	memset(owner, 0xff, sizeof(owner));
	bool each = true;
	for (int l = 0; l < n && each; l++) {
		memset(seen, 0, sizeof(seen));
		each = match_cpu(st, l, owner, seen);
	}
	st->spin_us = each ? st->spin_cfg : 0;
}

/* Before an op: a broken stage stays broken; an interrupted one breaks. */
int stage_shm_begin(struct stage_shm *st, char *err, size_t errlen)
{
	if (!st->spin_known && st->step > 0 && !st->broken)
		spin_decide(st);
	if (st->broken) {
		stage_errf(err, errlen, "%s", st->broken_err);
		return st->broken;
	}
	if (!atomic_load_explicit(&st->interrupted, memory_order_seq_cst))
		return 0;
	stage_errf(st->broken_err, sizeof(st->broken_err), "stage shm: interrupted");
	return stage_shm_breaks(st, -ECANCELED, err, errlen);
}

int stage_publish_wait(struct stage_shm *st, char *err, size_t errlen)
{
	stage_publish(st);
	st->waiting = 1;
	int rc = stage_wait_all(st, st->broken_err, sizeof(st->broken_err));
	if (!rc)
		rc = stage_broke_peers(st, st->broken_err, sizeof(st->broken_err));
	if (rc)
		return stage_shm_breaks(st, rc, err, errlen);
	st->waiting = 0;
	return 0;
}

static int reduce_scatter(struct hora_net_stage *s, const void *in, void *buf, size_t count,
			  enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen)
{
	struct stage_shm *st = stage_of(s);
	const int n = s->nlocal, r = s->lrank;
	int rc;
	const size_t es = hora_net_dtype_size(t);
	if (n == 1) {
		if (in != buf && count)
			memmove(buf, in, count * es);
		return 0;
	}
	if ((rc = stage_shm_begin(st, err, errlen)))
		return rc;
	const size_t P = piece_elems(st, es);
	size_t off0, len0, off, len;
	hora_net_stage_shard(count, n, 0, &off0, &len0); /* shard 0 is the longest */
	uint8_t *b8 = buf;
	const uint8_t *i8 = in, *src[STAGE_MAX_LOCAL];
	for (size_t k = 0; k * P < len0; k++) {
		const unsigned b = (unsigned)(st->step + 1) & 1;
		uint8_t *mine = stage_slot(st, r, b);
		for (int l = 0; l < n; l++)
			if (l != r) {
				shard_piece(count, n, l, k, P, &off, &len);
				memcpy(mine + (size_t)l * P * es, i8 + off * es, len * es);
			}
		if ((rc = stage_publish_wait(st, err, errlen)))
			return rc;
		shard_piece(count, n, r, k, P, &off, &len);
		for (int l = 0; l < n; l++)
			src[l] = l == r ? i8 + off * es : stage_slot(st, l, b) + (size_t)r * P * es;
		/* accumulate in our out position (unused here), then into buf;
		 * AVG stays a sum: the caller divides once the shard is complete */
		stage_fold(mine + (size_t)r * P * es, b8 + off * es, src, n, len, es, t, op, 0);
	}
	return 0;
}

static int allgather(struct hora_net_stage *s, void *buf, size_t count, enum hora_net_dtype t, char *err,
		     size_t errlen)
{
	struct stage_shm *st = stage_of(s);
	const int n = s->nlocal, r = s->lrank;
	int rc;
	if (n == 1)
		return 0;
	if ((rc = stage_shm_begin(st, err, errlen)))
		return rc;
	const size_t es = hora_net_dtype_size(t), P = piece_elems(st, es);
	size_t off0, len0, off, len;
	hora_net_stage_shard(count, n, 0, &off0, &len0);
	uint8_t *b8 = buf;
	for (size_t k = 0; k * P < len0; k++) {
		const unsigned b = (unsigned)(st->step + 1) & 1;
		/* an in position (r + 1) % n: the out position may still be read */
		shard_piece(count, n, r, k, P, &off, &len);
		memcpy(stage_slot(st, r, b) + (size_t)((r + 1) % n) * P * es, b8 + off * es, len * es);
		if ((rc = stage_publish_wait(st, err, errlen)))
			return rc;
		for (int l = 0; l < n; l++)
			if (l != r) {
				shard_piece(count, n, l, k, P, &off, &len);
				memcpy(b8 + off * es, stage_slot(st, l, b) + (size_t)((l + 1) % n) * P * es,
				       len * es);
			}
	}
	return 0;
}

/* One step: every rank copies the whole buffer into its slot and reduces
 * all of them, in order, into its buffer (the same bits everywhere). */
static int allreduce_small(struct stage_shm *st, const uint8_t *in, uint8_t *buf, size_t count, size_t es,
			   enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen)
{
	const int n = st->pub.nlocal;
	const unsigned b = (unsigned)(st->step + 1) & 1;
	const uint8_t *src[STAGE_MAX_LOCAL];
	memcpy(stage_slot(st, st->pub.lrank, b), in, count * es);
	int rc = stage_publish_wait(st, err, errlen);
	if (rc)
		return rc;
	for (int l = 0; l < n; l++)
		src[l] = stage_slot(st, l, b);
	stage_fold(buf, NULL, src, n, count, es, t, op, op == HORA_NET_AVG ? n : 0);
	return 0;
}

/* Sub-piece l of chunk k (C = n * P elements): *off, *len in buf. */
static void chunk_piece(size_t count, int n, size_t k, size_t P, int l, size_t *off, size_t *len)
{
	const size_t base = k * (size_t)n * P, m = count - base < (size_t)n * P ? count - base : (size_t)n * P;
	hora_net_stage_shard(m, n, l, off, len);
	*off += base;
}

/* Copy the others' reduced sub-pieces of chunk k (slot b) into buf. */
static void copy_out(struct stage_shm *st, uint8_t *buf, size_t count, size_t k, size_t P, size_t es,
		     unsigned b)
{
	const int n = st->pub.nlocal, r = st->pub.lrank;
	size_t off, len;
	for (int l = 0; l < n; l++)
		if (l != r) {
			chunk_piece(count, n, k, P, l, &off, &len);
			memcpy(buf + off * es, stage_slot(st, l, b) + (size_t)l * P * es, len * es);
		}
}

/* Chunk by chunk, fused: step k copies chunk k in, then (after the wait)
 * copies chunk k - 1's results out and reduces chunk k's own sub-piece. */
static int allreduce(struct hora_net_stage *s, const void *in, void *buf, size_t count, enum hora_net_dtype t,
		     enum hora_net_op op, char *err, size_t errlen)
{
	struct stage_shm *st = stage_of(s);
	const int n = s->nlocal, r = s->lrank;
	const size_t es = hora_net_dtype_size(t);
	int rc;
	if (n == 1 || count == 0) {
		if (in != buf && count)
			memmove(buf, in, count * es);
		return 0;
	}
	if ((rc = stage_shm_begin(st, err, errlen)) || (rc = stage_windows_drain(st, err, errlen)))
		return rc;
	const size_t P = piece_elems(st, es), C = (size_t)n * P;
	uint8_t *b8 = buf;
	const uint8_t *i8 = in;
	if (count * es <= SMALL_BYTES && count * es <= st->slot_bytes)
		return allreduce_small(st, i8, b8, count, es, t, op, err, errlen);
	const uint8_t *src[STAGE_MAX_LOCAL];
	size_t off, len, k;
	unsigned b = 0;
	for (k = 0; k * C < count; k++) {
		b = (unsigned)(st->step + 1) & 1;
		uint8_t *mine = stage_slot(st, r, b);
		for (int l = 0; l < n; l++)
			if (l != r) {
				chunk_piece(count, n, k, P, l, &off, &len);
				memcpy(mine + (size_t)l * P * es, i8 + off * es, len * es);
			}
		if ((rc = stage_publish_wait(st, err, errlen)))
			return rc;
		if (k > 0)
			copy_out(st, b8, count, k - 1, P, es, b ^ 1);
		chunk_piece(count, n, k, P, r, &off, &len);
		for (int l = 0; l < n; l++)
			src[l] = l == r ? i8 + off * es : stage_slot(st, l, b) + (size_t)r * P * es;
		stage_fold(mine + (size_t)r * P * es, b8 + off * es, src, n, len, es, t, op, op == HORA_NET_AVG ? n : 0);
	}
	st->step++; /* skipped: the next call starts on the other slot */
	if ((rc = stage_publish_wait(st, err, errlen)))
		return rc;
	copy_out(st, b8, count, k - 1, P, es, b);
	return 0;
}

static void interrupt(struct hora_net_stage *s)
{
	struct stage_shm *st = stage_of(s);
	atomic_store_explicit(&st->interrupted, 1, memory_order_seq_cst);
	if (st->ctl)
		stage_wake_all(st);
}

const struct hora_net_stage_ops stage_shm_ops = {
	.reduce_scatter = reduce_scatter,
	.allgather = allgather,
	.allreduce = allreduce,
	.gather = stage_shm_gather,
	.window = stage_shm_window,
	.allreduce_windows = stage_shm_allreduce_windows,
	.interrupt = interrupt,
	.destroy = stage_shm_destroy,
};
