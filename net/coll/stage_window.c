/* stage_window.c - the shared-memory stage's single-copy allreduce
 * (stage.h's window and allreduce_windows): when every local rank's buffer
 * lies in a region (net/shm/region.c: hora_comm_alloc's memory), each rank
 * maps the others' regions and the allreduce reads and writes the buffers
 * where they lie. No copy into the arena's slots, none out of them.
 *
 * - Passing: the first time a rank's in-place allreduce names one of its
 *   regions on a stage, it sends a dup of the region's memfd, with the id
 *   and size, to every local peer over the checked Unix socket (SCM_RIGHTS),
 *   before the call's gather. A peer that finds an id it has not mapped
 *   in the gather's descriptors reads that socket (the message is there:
 *   it was sent before the gather's publish), checks the seals and size
 *   and maps it. At most STAGE_WIN_MAX live regions per rank and stage:
 *   past them a rank offers none (the copying allreduce runs), so a peer
 *   never maps more than that of each. Before passing a new one, a rank
 *   sends a message with no fd (WIN_FORGET) for each region it passed and
 *   freed since; a peer reads them on its way to the new one and unmaps
 *   those, and their slots are free again on both sides.
 * - The allreduce: the call's gather (local.c) is the entry barrier, every
 *   rank's buffer final. Local rank r reduces shard r over every rank's
 *   buffer, in local-rank order 0..n-1, block by block (AVG divided by n
 *   while the block is in L1), and writes the block into every rank's
 *   buffer, its own included. One barrier (publish and wait) ends the call:
 *   past it no rank touches another's buffer. Each element is reduced once,
 *   by one rank, in the copying allreduce's order: the same bits on every
 *   rank and as that path.
 *
 * Two ranks, 407 KB (the MNIST MLP's gradient): 2 barriers and 0.8 MB of
 * reads and writes per rank, against the copying path's 4 barriers and 1.6
 * MB (bench/RESULTS.md, session 16).
 */
#include "net/coll/stage_shm_internal.h"
#include "net/shm/shm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define WIN_MAGIC 0x4e495748u  /* "HWIN" */
#define WIN_FORGET 0x54474648u /* "HFGT": a region freed, with no fd */
#define RECV_MS 1000          /* the fd was sent before the gather: it is there */

/* what goes with a region's fd, and (id, magic, offset) a descriptor */
struct win_msg {
	uint32_t id, magic;
	uint64_t bytes;
};
_Static_assert(sizeof(struct win_msg) == HORA_NET_STAGE_DESC_BYTES, "a descriptor's size");

static void desc_get(const uint8_t *d, uint32_t *id, uint64_t *off)
{
	struct win_msg m;
	memcpy(&m, d, sizeof(m));
	*id = m.magic == WIN_MAGIC ? m.id : 0;
	*off = m.bytes;
}

void stage_windows_free(struct stage_shm *st)
{
	for (int l = 0; st->preg && l < st->pub.nlocal; l++)
		for (int i = 0; i < st->npreg[l]; i++) {
			const struct stage_peer_region *g = &st->preg[l * STAGE_WIN_MAX + i];
			munmap(g->base, g->bytes);
		}
	free(st->preg);
	free(st->npreg);
	st->preg = NULL;
	st->npreg = NULL;
}

/* Pass region ref to every peer: 1 when it can be used now, 0 when not
 * (freed meanwhile, or a send failed: the kernel's limit on fds in flight,
 * ETOOMANYREFS, or a peer gone, which the gather reports). A region whose
 * passing failed is counted and never offered again, so that no peer ever
 * holds more than STAGE_WIN_MAX of ours; its fd may have reached some
 * peers, which map it when they read past it. The call falls back to the
 * copying stage: the same bits, slower. A message cut short (-EIO) would
 * leave that peer's socket misaligned: the stage breaks (< 0). */
/* Tell every peer to unmap the regions we offered that have been freed
 * since (hora_comm_mem_free), and drop them from the offered ones: their
 * slots take new regions. Sent before a new region's fd on the same
 * sockets, so a peer reads them on its way to that one. 0, or < 0 when a
 * message went only in part (the stage breaks, as in pass_region). */
static int forget_freed(struct stage_shm *st, struct hora_net_shm_regions *regs, char *err, size_t errlen)
{
	for (int i = st->noffered - 1; i >= 0; i--) {
		if (hora_net_shm_region_alive(regs, st->offered[i]))
			continue;
		const struct win_msg m = {.id = st->offered[i], .magic = WIN_FORGET};
		char e[200] = "";
		int rc = 0;
		for (int l = 0; l < st->pub.nlocal && rc != -EIO; l++)
			if (l != st->pub.lrank)
				rc = hora_net_shm_fd_send_data(st->socks[l], -1, &m, sizeof(m), e, sizeof(e));
		if (rc == -EIO) {
			stage_errf(st->broken_err, sizeof(st->broken_err), "stage shm: forgetting a freed region: %s", e);
			return stage_shm_breaks(st, rc, err, errlen);
		}
		/* another failure: that peer is gone, which the gather reports */
		st->noffered--;
		st->offered[i] = st->offered[st->noffered];
		st->offered_ok[i] = st->offered_ok[st->noffered];
	}
	return 0;
}

static int pass_region(struct stage_shm *st, struct hora_net_shm_regions *regs,
		       const struct hora_net_shm_region_ref *ref, char *err, size_t errlen)
{
	const int fd = hora_net_shm_region_dup_fd(regs, ref->id);
	if (fd < 0)
		return 0; /* freed while we looked: no window this call */
	const struct win_msg m = {.id = ref->id, .magic = WIN_MAGIC, .bytes = ref->bytes};
	char e[200] = "";
	int rc = 0;
	for (int l = 0; l < st->pub.nlocal && !rc; l++)
		if (l != st->pub.lrank)
			rc = hora_net_shm_fd_send_data(st->socks[l], fd, &m, sizeof(m), e, sizeof(e));
	close(fd);
	st->offered_ok[st->noffered] = !rc;
	st->offered[st->noffered++] = ref->id;
	if (rc == -EIO) { /* a message cut short: that peer's next read of the socket would be misaligned */
		stage_errf(st->broken_err, sizeof(st->broken_err), "stage shm: passing a buffer's region: %s", e);
		return stage_shm_breaks(st, rc, err, errlen);
	}
	return !rc;
}

int stage_shm_window(struct hora_net_stage *s, struct hora_net_shm_regions *regs, const void *buf, size_t bytes,
		     uint8_t *desc, char *err, size_t errlen)
{
	struct stage_shm *st = stage_of(s);
	memset(desc, 0, HORA_NET_STAGE_DESC_BYTES);
	struct hora_net_shm_region_ref ref;
	if (s->nlocal == 1 || !regs || !st->socks || !hora_net_shm_region_find(regs, buf, bytes, &ref))
		return 0;
	int rc = stage_shm_begin(st, err, errlen);
	if (rc)
		return rc;
	int i = 0;
	while (i < st->noffered && st->offered[i] != ref.id)
		i++;
	if (i == st->noffered && (rc = forget_freed(st, regs, err, errlen)))
		return rc;
	int usable = i < st->noffered ? st->offered_ok[i]
		     : st->noffered < STAGE_WIN_MAX ? pass_region(st, regs, &ref, err, errlen) : 0;
	if (usable < 0)
		return usable;
	if (!usable)
		return 0; /* the copying stage */
	const struct win_msg d = {.id = ref.id, .magic = WIN_MAGIC, .bytes = ref.off};
	memcpy(desc, &d, sizeof(d));
	return 0;
}

/* Unmap local rank l's region id (it freed it); unknown ids are ignored. */
static void forget_peer_region(struct stage_shm *st, int l, uint32_t id)
{
	struct stage_peer_region *g = st->preg + (size_t)l * STAGE_WIN_MAX;
	for (int i = 0; i < st->npreg[l]; i++)
		if (g[i].id == id) {
			munmap(g[i].base, g[i].bytes);
			g[i] = g[--st->npreg[l]];
			return;
		}
}

/* Receive local rank l's next region and map it (the socket's messages
 * come in the order they were sent), unmapping on the way the ones it
 * says it freed. NULL with why filled. */
static const struct stage_peer_region *recv_region(struct stage_shm *st, int l, char *why, size_t whylen)
{
	struct stage_peer_region *g = st->preg + (size_t)l * STAGE_WIN_MAX;
	struct win_msg m;
	int fd;
	char e[200] = "";
	int rc;
	while (!(rc = hora_net_shm_fdmsg_recv(st->socks[l], RECV_MS, &fd, &m, sizeof(m), e, sizeof(e))) &&
	       fd < 0 && m.magic == WIN_FORGET)
		forget_peer_region(st, l, m.id);
	if (!rc && fd < 0) {
		snprintf(why, whylen, "its message on the socket is neither a region nor a freed one (magic %#x)",
			 m.magic);
		return NULL;
	}
	if (rc) {
		snprintf(why, whylen, "its region's fd: %s", e);
		return NULL;
	}
	if (st->npreg[l] == STAGE_WIN_MAX) {
		close(fd);
		snprintf(why, whylen, "it names more than %d regions", STAGE_WIN_MAX);
		return NULL;
	}
	uint8_t *base = NULL;
	if (m.magic != WIN_MAGIC || !m.id || m.bytes > SIZE_MAX)
		snprintf(why, whylen, "its region's message is not one (magic %#x, id %u)", m.magic, m.id);
	else if (!(base = hora_net_shm_region_map_peer(fd, (size_t)m.bytes, e, sizeof(e))))
		snprintf(why, whylen, "%s", e);
	close(fd);
	if (!base)
		return NULL;
	g[st->npreg[l]] = (struct stage_peer_region){.id = m.id, .bytes = (size_t)m.bytes, .base = base};
	return &g[st->npreg[l]++];
}

/* Local rank l's region id, mapped here (received now if it is new). */
static const struct stage_peer_region *peer_region(struct stage_shm *st, int l, uint32_t id, char *why,
						   size_t whylen)
{
	if (!st->preg) {
		st->preg = calloc((size_t)st->pub.nlocal * STAGE_WIN_MAX, sizeof(*st->preg));
		st->npreg = calloc((size_t)st->pub.nlocal, sizeof(int));
		if (!st->preg || !st->npreg) {
			free(st->preg);
			free(st->npreg);
			st->preg = NULL;
			st->npreg = NULL;
			snprintf(why, whylen, "out of memory");
			return NULL;
		}
	}
	const struct stage_peer_region *g = st->preg + (size_t)l * STAGE_WIN_MAX;
	for (int i = 0; i < st->npreg[l]; i++)
		if (g[i].id == id)
			return &g[i];
	const struct stage_peer_region *got;
	while ((got = recv_region(st, l, why, whylen)) && got->id != id)
		; /* an earlier region it passed and has not used yet */
	return got;
}

/* Every local rank's buffer, mapped here; on failure the stage breaks. */
static int map_buffers(struct stage_shm *st, const uint8_t *const *desc, void *buf, size_t bytes, uint8_t **p,
		       char *err, size_t errlen)
{
	for (int l = 0; l < st->pub.nlocal; l++) {
		if (l == st->pub.lrank) {
			p[l] = buf;
			continue;
		}
		char why[300] = "";
		uint32_t id;
		uint64_t off;
		desc_get(desc[l], &id, &off);
		const struct stage_peer_region *g = id ? peer_region(st, l, id, why, sizeof(why)) : NULL;
		if (g && (off > g->bytes || bytes > g->bytes - off)) {
			snprintf(why, sizeof(why), "its buffer (%zu bytes at %llu) lies outside its region of %zu",
				 bytes, (unsigned long long)off, g->bytes);
			g = NULL;
		}
		if (!g) {
			if (!id)
				snprintf(why, sizeof(why), "it names no region");
			stage_errf(st->broken_err, sizeof(st->broken_err),
				   "stage shm: single-copy allreduce: local rank %d (pid %d): %s", l,
				   (int)st->pids[l], why);
			return stage_shm_breaks(st, -EPROTO, err, errlen);
		}
		p[l] = g->base + off;
	}
	return 0;
}

int stage_shm_allreduce_windows(struct hora_net_stage *s, const uint8_t *const *desc, void *buf, size_t count,
				enum hora_net_dtype t, enum hora_net_op op, char *err, size_t errlen)
{
	struct stage_shm *st = stage_of(s);
	const int n = s->nlocal, r = s->lrank;
	const size_t es = hora_net_dtype_size(t);
	uint8_t *p[STAGE_MAX_LOCAL];
	int rc = stage_shm_begin(st, err, errlen);
	if (rc || (rc = map_buffers(st, desc, buf, count * es, p, err, errlen)))
		return rc;
	size_t so, sl;
	hora_net_stage_shard(count, n, r, &so, &sl);
	/* the accumulator: our own buffer when the first reduce alone reads
	 * it (ranks 0 and 1), else a block in L1 */
	alignas(64) uint8_t tmp[STAGE_FOLD_BLOCK_BYTES];
	const size_t blk = STAGE_FOLD_BLOCK_BYTES / es;
	for (size_t i = 0; i < sl; i += blk) {
		const size_t b = sl - i < blk ? sl - i : blk, o = (so + i) * es;
		uint8_t *acc = r < 2 ? p[r] + o : tmp;
		hora_net_reduce(acc, p[0] + o, p[1] + o, b, t, op);
		for (int l = 2; l < n; l++)
			hora_net_reduce(acc, acc, p[l] + o, b, t, op);
		if (op == HORA_NET_AVG)
			hora_net_scale(acc, b, t, n);
		for (int l = 0; l < n; l++)
			if (p[l] + o != acc)
				memcpy(p[l] + o, acc, b * es);
	}
	return stage_publish_wait(st, err, errlen);
}
