/* stage_small.c - the shared-memory stage's small gather (stage.h's
 * gather): every local rank writes one small message into its slot, and
 * reads everyone's. For the latency path of a one-host communicator (an
 * 8-byte allreduce, its fingerprint beside it, in one cache line).
 *
 * A message starts its slot with a 16-byte stamp: the step it belongs to
 * and a check derived from it, written after the bytes (release). A
 * reader spins on the stamps of the peers' slots, so a message costs one
 * line transfer, not two (the step counter, then the slot). The check
 * makes stale bytes of another op that happen to hold the step number no
 * stamp. After the spin the counter barrier (stage_wait_all) takes over,
 * with its sleep and its checks for dead peers: the step is published
 * there too. Slots alternate by step parity as for the other ops
 * (stage_shm.c's rules): a peer writes this slot again only after we
 * published the next step.
 */
#include "net/coll/stage_shm_internal.h"
#include "net/util/clock.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

#define STAMP_BYTES 16
#define CHECK(step) ((step) * 0x9e3779b97f4a7c15ull ^ 0x5354414745534d4cull)

struct stamp {
	_Atomic uint64_t step;
	uint64_t check;
};
_Static_assert(sizeof(struct stamp) == STAMP_BYTES, "the stamp is 16 bytes");

static int stamped(const uint8_t *slot, uint64_t step)
{
	const struct stamp *s = (const struct stamp *)slot;
	return atomic_load_explicit(&s->step, memory_order_acquire) == step && s->check == CHECK(step);
}

/* every peer's stamp for step, within spin_us (then the barrier decides) */
static int spin_stamps(struct stage_shm *st, unsigned b, uint64_t step)
{
	const int n = st->pub.nlocal;
	const int64_t end = hora_clock_ns() + (int64_t)st->spin_us * 1000;
	int l = 0;
	for (unsigned i = 1;; i++) {
		while (l < n && (l == st->pub.lrank || stamped(stage_slot(st, l, b), step)))
			l++;
		if (l == n)
			return 1;
		STAGE_RELAX();
		if (i % 64 == 0 && hora_clock_ns() >= end)
			return 0; /* no sched_yield: see stage_wait.c's spin */
	}
}

size_t stage_shm_small_max(const struct stage_shm *st)
{
	return st->slot_bytes - STAMP_BYTES;
}

int stage_shm_gather(struct hora_net_stage *s, const void *msg, size_t bytes, const void **all, char *err,
		     size_t errlen)
{
	struct stage_shm *st = stage_of(s);
	if (s->nlocal == 1) { /* no arena: ours is everyone's */
		all[0] = msg;
		return 0;
	}
	int rc = stage_shm_begin(st, err, errlen);
	if (rc)
		return rc;
	if (bytes > stage_shm_small_max(st)) {
		stage_errf(err, errlen, "stage shm: a small gather of %zu bytes, more than a slot's %zu", bytes,
			   stage_shm_small_max(st));
		return -EMSGSIZE;
	}
	const uint64_t step = st->step + 1;
	const unsigned b = (unsigned)step & 1;
	uint8_t *mine = stage_slot(st, s->lrank, b);
	memcpy(mine + STAMP_BYTES, msg, bytes);
	struct stamp *sp = (struct stamp *)mine;
	sp->check = CHECK(step);
	atomic_store_explicit(&sp->step, step, memory_order_release);
	stage_publish(st);
	st->waiting = 1;
	if ((st->spin_us <= 0 || !spin_stamps(st, b, step)) &&
	    (rc = stage_wait_all(st, st->broken_err, sizeof(st->broken_err))))
		return stage_shm_breaks(st, rc, err, errlen);
	if ((rc = stage_broke_peers(st, st->broken_err, sizeof(st->broken_err))))
		return stage_shm_breaks(st, rc, err, errlen);
	st->waiting = 0;
	for (int l = 0; l < s->nlocal; l++)
		all[l] = stage_slot(st, l, b) + STAMP_BYTES;
	return 0;
}
