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
 *   freed since, and their slots are free again. Each rank publishes how
 *   many messages it sent (its rank line's win_sent, before the call's
 *   gather) and every allreduce through the stage reads the peers' up to
 *   that count after the gather, single-copy or copying
 *   (stage_windows_drain): regions mapped, freed ones unmapped. So at most one call's messages wait on a
 *   socket, even when a peer's buffers are ordinary memory and every call
 *   copies; each holds a region's fd (its pages), and piled up they would
 *   block the sender.
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
#define WIN_VOID 0x44495648u   /* "HVID": a region whose fd could not be passed to this peer */
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
	for (int l = 0; st->preg && st->npreg && l < st->pub.nlocal; l++)
		for (int i = 0; i < st->npreg[l]; i++) {
			const struct stage_peer_region *g = &st->preg[l * STAGE_WIN_MAX + i];
			if (g->base)
				munmap(g->base, g->bytes);
		}
	free(st->preg);
	free(st->npreg);
	free(st->win_read);
	st->preg = NULL;
	st->npreg = NULL;
	st->win_read = NULL;
}

/* After a message went to every peer: published for their drains (the
 * call's gather, after it, carries it to them). */
static void sent_one(struct stage_shm *st)
{
	atomic_store_explicit(&st->ctl->rank[st->pub.lrank].win_sent, ++st->win_sent, memory_order_release);
}

/* Send m to every peer: with fd (a region), or with none (fd < 0). Every
 * peer must get one message for each counted in win_sent (its drain reads
 * that many), so a region whose fd a peer cannot be passed (the kernel's
 * limit on fds in flight, ETOOMANYREFS) goes to it as WIN_VOID, data
 * alone. 0: every peer got m; 1: some got WIN_VOID (the region is not
 * usable); < 0: some peer's stream may now be misaligned (a message cut
 * short, or one with no fd that did not go): the caller breaks the
 * stage, e says why. A peer gone (EPIPE, ECONNRESET) is skipped: the
 * call's gather names it. */
static int send_all(struct stage_shm *st, int fd, const struct win_msg *m, char *e, size_t elen)
{
	int voided = 0;
	for (int l = 0; l < st->pub.nlocal; l++) {
		if (l == st->pub.lrank)
			continue;
		int rc = hora_net_shm_fd_send_data(st->socks[l], fd, m, sizeof(*m), e, elen);
		if (rc && rc != -EIO && rc != -EPIPE && rc != -ECONNRESET && fd >= 0) {
			const struct win_msg v = {.id = m->id, .magic = WIN_VOID};
			rc = hora_net_shm_fd_send_data(st->socks[l], -1, &v, sizeof(v), e, elen);
			voided = 1;
		}
		if (rc == -EPIPE || rc == -ECONNRESET) {
			voided = 1; /* that peer is gone: the call's gather names it */
			continue;
		}
		if (rc)
			return rc;
	}
	sent_one(st);
	return voided;
}

/* Tell every peer to unmap the regions we offered that have been freed
 * since (hora_comm_mem_free), and drop them from the offered ones: their
 * slots take new regions. Sent before a new region's fd, so a peer reads
 * them first; every peer reads what we sent after the gather of every
 * allreduce through the stage (stage_windows_drain), single-copy or copying, so no
 * more than one call's messages wait on its socket. 0, or < 0: the stage
 * broke (send_all). */
static int forget_freed(struct stage_shm *st, struct hora_net_shm_regions *regs, char *err, size_t errlen)
{
	for (int i = st->noffered - 1; i >= 0; i--) {
		if (hora_net_shm_region_alive(regs, st->offered[i]))
			continue;
		const struct win_msg m = {.id = st->offered[i], .magic = WIN_FORGET};
		char e[200] = "";
		const int rc = send_all(st, -1, &m, e, sizeof(e));
		if (rc < 0) {
			stage_errf(st->broken_err, sizeof(st->broken_err), "stage shm: forgetting a freed region: %s", e);
			return stage_shm_breaks(st, rc, err, errlen);
		}
		st->noffered--;
		st->offered[i] = st->offered[st->noffered];
		st->offered_ok[i] = st->offered_ok[st->noffered];
	}
	return 0;
}

/* Pass region ref to every peer: 1 when it can be used now, 0 when not
 * (freed meanwhile, or some peer could not be passed its fd: see
 * send_all). A region whose passing failed is counted and never offered
 * again; its fd may have reached some peers, which map it in their drain
 * and unmap it when we free it. The call falls back to the copying stage:
 * the same bits, slower. < 0: the stage broke. */
static int pass_region(struct stage_shm *st, struct hora_net_shm_regions *regs,
		       const struct hora_net_shm_region_ref *ref, char *err, size_t errlen)
{
	const int fd = hora_net_shm_region_dup_fd(regs, ref->id);
	if (fd < 0)
		return 0; /* freed while we looked: no window this call */
	const struct win_msg m = {.id = ref->id, .magic = WIN_MAGIC, .bytes = ref->bytes};
	char e[200] = "";
	const int rc = send_all(st, fd, &m, e, sizeof(e));
	close(fd);
	if (rc < 0) {
		stage_errf(st->broken_err, sizeof(st->broken_err), "stage shm: passing a buffer's region: %s", e);
		return stage_shm_breaks(st, rc, err, errlen);
	}
	st->offered_ok[st->noffered] = !rc;
	st->offered[st->noffered++] = ref->id;
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
			if (g[i].base)
				munmap(g[i].base, g[i].bytes);
			g[i] = g[--st->npreg[l]];
			return;
		}
}

/* The tables of the peers' regions, allocated at first use. */
static int tables(struct stage_shm *st, char *why, size_t whylen)
{
	if (st->preg)
		return 0;
	st->preg = calloc((size_t)st->pub.nlocal * STAGE_WIN_MAX, sizeof(*st->preg));
	st->npreg = calloc((size_t)st->pub.nlocal, sizeof(int));
	st->win_read = calloc((size_t)st->pub.nlocal, sizeof(uint64_t));
	if (st->preg && st->npreg && st->win_read)
		return 0;
	stage_windows_free(st);
	snprintf(why, whylen, "out of memory");
	return -ENOMEM;
}

/* Read local rank l's next message (they come in the order they were
 * sent): a freed region, unmapped here (*got NULL), or a region, mapped
 * (*got). 0, or < 0 with why filled. */
static int read_msg(struct stage_shm *st, int l, const struct stage_peer_region **got, char *why, size_t whylen)
{
	struct stage_peer_region *g = st->preg + (size_t)l * STAGE_WIN_MAX;
	struct win_msg m;
	int fd;
	char e[200] = "";
	*got = NULL;
	int rc = hora_net_shm_fdmsg_recv(st->socks[l], RECV_MS, &fd, &m, sizeof(m), e, sizeof(e));
	if (rc) {
		snprintf(why, whylen, "its region's fd: %s", e);
		return rc;
	}
	st->win_read[l]++;
	if (fd < 0 && m.magic != WIN_MAGIC) {
		if (m.magic == WIN_FORGET)
			forget_peer_region(st, l, m.id);
		else if (m.magic != WIN_VOID) {
			snprintf(why, whylen, "its message on the socket is neither a region nor a freed one "
					      "(magic %#x)", m.magic);
			return -EPROTO;
		}
		return 0;
	}
	if (st->npreg[l] == STAGE_WIN_MAX || m.magic != WIN_MAGIC || !m.id || m.bytes > SIZE_MAX) {
		if (st->npreg[l] == STAGE_WIN_MAX)
			snprintf(why, whylen, "it names more than %d regions", STAGE_WIN_MAX);
		else
			snprintf(why, whylen, "its region's message is not one (magic %#x, id %u)", m.magic, m.id);
		if (fd >= 0)
			close(fd);
		return -EPROTO;
	}
	/* a region that cannot be mapped here (its fd dropped on the way, a
	 * mapping refused) is kept as such: the copying calls go on, and a
	 * single-copy call that names it fails (map_buffers) */
	uint8_t *base = fd < 0 ? NULL : hora_net_shm_region_map_peer(fd, (size_t)m.bytes, e, sizeof(e));
	if (fd >= 0)
		close(fd);
	g[st->npreg[l]] = (struct stage_peer_region){.id = m.id, .bytes = (size_t)m.bytes, .base = base};
	*got = &g[st->npreg[l]++];
	return 0;
}

/* Local rank l's region id, mapped here (its messages read up to it if it
 * is new). NULL with why filled. */
static const struct stage_peer_region *peer_region(struct stage_shm *st, int l, uint32_t id, char *why,
						   size_t whylen)
{
	if (tables(st, why, whylen))
		return NULL;
	const struct stage_peer_region *g = st->preg + (size_t)l * STAGE_WIN_MAX;
	const struct stage_peer_region *got = NULL;
	for (int i = 0; i < st->npreg[l] && !got; i++)
		if (g[i].id == id)
			got = &g[i];
	while (!got && !read_msg(st, l, &got, why, whylen))
		if (got && got->id != id)
			got = NULL; /* a freed one, or an earlier region not used yet */
	if (got && !got->base) {
		snprintf(why, whylen, "its region %u could not be mapped here when it came", id);
		return NULL;
	}
	return got;
}

int stage_windows_drain(struct stage_shm *st, char *err, size_t errlen)
{
	for (int l = 0; l < st->pub.nlocal; l++) {
		if (l == st->pub.lrank)
			continue;
		const uint64_t sent = atomic_load_explicit(&st->ctl->rank[l].win_sent, memory_order_acquire);
		char why[300] = "";
		const struct stage_peer_region *got;
		int rc = 0;
		if (sent && (rc = tables(st, why, sizeof(why))) == 0)
			while (st->win_read[l] < sent && !(rc = read_msg(st, l, &got, why, sizeof(why))))
				;
		if (rc) {
			stage_errf(st->broken_err, sizeof(st->broken_err),
				   "stage shm: single copy: local rank %d (pid %d): %s", l, (int)st->pids[l], why);
			return stage_shm_breaks(st, rc, err, errlen);
		}
	}
	return 0;
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
	if (rc || (rc = stage_windows_drain(st, err, errlen)) || (rc = map_buffers(st, desc, buf, count * es, p, err, errlen)))
		return rc;
	size_t so, sl;
	hora_net_stage_shard(count, n, r, &so, &sl);
	if (t == HORA_NET_F32 && (op == HORA_NET_SUM || op == HORA_NET_AVG)) {
		/* the common case (gradients): one pass (fold.c) */
		float *f[STAGE_MAX_LOCAL];
		for (int l = 0; l < n; l++)
			f[l] = (float *)p[l] + so;
		hora_net_fold_f32(f, n, sl, op == HORA_NET_AVG ? n : 0);
		return stage_publish_wait(st, err, errlen);
	}
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
