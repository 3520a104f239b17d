/* map.c - a channel's mapping: the sealed memfd, its header, the rings
 * mapped twice, and the endpoint's lifecycle (create, attach, detach).
 * Not the rings' protocol (ring.c, chan.c) nor waiting (wait.c).
 *
 * The memfd (memfd_create, MFD_CLOEXEC | MFD_ALLOW_SEALING) has no name in
 * any file system: it lives while an fd or a mapping holds it and is freed
 * by the kernel when the last of them goes, whichever way the processes
 * end. Its size is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before
 * the fd leaves the creator, so a peer cannot shrink the pages under the
 * other (a SIGBUS) or reseal it.
 */
#include "net/shm/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static int resolve_cfg(const struct hora_net_shm_cfg *cfg, size_t *ring, char *err, size_t errlen)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t r = cfg && cfg->ring_bytes ? cfg->ring_bytes : HORA_NET_SHM_RING_DEFAULT;
	if (page <= 0 || page > SHM_CTL_BYTES || r < (size_t)page || r > HORA_NET_SHM_RING_MAX ||
	    (r & (r - 1)) || r % (size_t)page) {
		shm_errf(err, errlen, "shm: ring_bytes %zu is not a power of two between the page size (%ld) and %llu",
				 r, page, (unsigned long long)HORA_NET_SHM_RING_MAX);
		return -EINVAL;
	}
	*ring = r;
	return 0;
}

/* Map the control page and both rings (each twice, back to back) of fd. */
static int map_all(struct hora_net_shm *c, int fd, char *err, size_t errlen)
{
	const size_t r = c->ring_bytes;
	void *p = mmap(NULL, SHM_CTL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		shm_errf(err, errlen, "shm: mmap of the control page: %s", strerror(e));
		return -e;
	}
	c->hdr = p;
	for (int d = 0; d < 2; d++) {
		/* reserve 2r of address space, then lay the ring over both halves */
		uint8_t *base = mmap(NULL, 2 * r, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (base == MAP_FAILED) {
			int e = errno;
			shm_errf(err, errlen, "shm: reserving address space for a ring: %s", strerror(e));
			return -e;
		}
		c->ring[d] = base;
		off_t off = (off_t)(SHM_CTL_BYTES + (size_t)d * r);
		for (int k = 0; k < 2; k++)
			if (mmap(base + (size_t)k * r, r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
				 off) == MAP_FAILED) {
				int e = errno;
				shm_errf(err, errlen, "shm: mmap of a ring: %s", strerror(e));
				return -e;
			}
	}
	return 0;
}

static void unmap_all(struct hora_net_shm *c)
{
	for (int d = 0; d < 2; d++)
		if (c->ring[d])
			munmap(c->ring[d], 2 * c->ring_bytes);
	if (c->hdr)
		munmap(c->hdr, SHM_CTL_BYTES);
}

static struct hora_net_shm *endpoint_new(const struct hora_net_shm_cfg *cfg, int side)
{
	struct hora_net_shm *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->side = side;
	c->memfd = -1;
	c->life_fd = cfg ? cfg->life_fd : -1;
	int spin = cfg ? cfg->spin_us : 0;
	c->spin_us = spin < 0 ? 0 : spin ? spin : HORA_NET_SHM_SPIN_DEFAULT;
	atomic_init(&c->pidfd, -2);
	atomic_init(&c->interrupted, 0);
	return c;
}

static void endpoint_free(struct hora_net_shm *c)
{
	unmap_all(c);
	int pfd = atomic_load(&c->pidfd);
	if (pfd >= 0)
		close(pfd);
	if (c->memfd >= 0)
		close(c->memfd);
	free(c);
}

int hora_net_shm_create(const struct hora_net_shm_cfg *cfg, struct hora_net_shm **out, char *err,
			size_t errlen)
{
	size_t r;
	int rc = resolve_cfg(cfg, &r, err, errlen);
	if (rc)
		return rc;
	struct hora_net_shm *c = endpoint_new(cfg, 0);
	if (!c)
		return -ENOMEM;
	c->ring_bytes = r;
	const uint64_t total = SHM_CTL_BYTES + 2 * (uint64_t)r;
	c->memfd = memfd_create("hora-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->memfd < 0) {
		rc = -errno;
		shm_errf(err, errlen, "shm: memfd_create: %s", strerror(-rc));
		goto fail;
	}
	if (ftruncate(c->memfd, (off_t)total) || fcntl(c->memfd, F_ADD_SEALS, SEALS)) {
		rc = -errno;
		shm_errf(err, errlen, "shm: sizing and sealing the memfd: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = map_all(c, c->memfd, err, errlen)))
		goto fail;
	struct shm_hdr *h = c->hdr; /* fresh pages are zero: every atomic starts at 0 */
	h->magic = HORA_NET_SHM_MAGIC;
	h->version = HORA_NET_SHM_VERSION;
	h->ctl_bytes = SHM_CTL_BYTES;
	h->ring_bytes = r;
	h->total_bytes = total;
	h->ring_off[0] = SHM_CTL_BYTES;
	h->ring_off[1] = SHM_CTL_BYTES + r;
	atomic_store_explicit(&h->side[0].pid, (int32_t)getpid(), memory_order_release);
	*out = c;
	return 0;
fail:
	endpoint_free(c);
	return rc;
}

/* The attacher's checks of fd and of the header, before trusting either. */
static int check_fd(int fd, size_t *ring, char *err, size_t errlen)
{
	struct stat st;
	struct shm_hdr h;
	if (fstat(fd, &st)) {
		int e = errno;
		shm_errf(err, errlen, "shm: fstat of the channel's fd: %s", strerror(e));
		return -e;
	}
	if (st.st_size < SHM_CTL_BYTES || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		shm_errf(err, errlen, "shm: the channel's fd holds %lld bytes, less than its header", (long long)st.st_size);
		return -EINVAL;
	}
	if (h.magic != HORA_NET_SHM_MAGIC) {
		shm_errf(err, errlen, "shm: bad magic 0x%016llx in the channel's header (not a hora channel)",
			 (unsigned long long)h.magic);
		return -EPROTO;
	}
	if (h.version != HORA_NET_SHM_VERSION) {
		shm_errf(err, errlen, "shm: channel version %u, this build speaks version %u", h.version,
			 HORA_NET_SHM_VERSION);
		return -EPROTO;
	}
	struct hora_net_shm_cfg want = {.ring_bytes = (size_t)h.ring_bytes};
	if (h.ctl_bytes != SHM_CTL_BYTES || h.ring_bytes > SIZE_MAX || resolve_cfg(&want, ring, NULL, 0) ||
	    h.total_bytes != SHM_CTL_BYTES + 2 * h.ring_bytes || (uint64_t)st.st_size != h.total_bytes ||
	    h.ring_off[0] != SHM_CTL_BYTES || h.ring_off[1] != SHM_CTL_BYTES + h.ring_bytes) {
		shm_errf(err, errlen, "shm: the channel's header says ring %llu, total %llu bytes; the fd holds %lld",
			 (unsigned long long)h.ring_bytes, (unsigned long long)h.total_bytes,
			 (long long)st.st_size);
		return -EINVAL;
	}
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & SEALS) != SEALS) {
		shm_errf(err, errlen, "shm: the channel's fd is not a memfd with its size sealed (seals %d)", seals);
		return -EINVAL;
	}
	return 0;
}

int hora_net_shm_attach(int fd, const struct hora_net_shm_cfg *cfg, struct hora_net_shm **out,
			char *err, size_t errlen)
{
	size_t r;
	int rc = check_fd(fd, &r, err, errlen);
	if (rc)
		return rc;
	struct hora_net_shm *c = endpoint_new(cfg, 1);
	if (!c)
		return -ENOMEM;
	c->ring_bytes = r;
	if ((rc = map_all(c, fd, err, errlen)))
		goto fail;
	uint32_t zero = 0;
	if (!atomic_compare_exchange_strong(&c->hdr->attached, &zero, 1)) {
		shm_errf(err, errlen, "shm: the channel has a side 1 already (pid %d)",
				 (int)atomic_load(&c->hdr->side[1].pid));
		rc = -EBUSY;
		unmap_all(c); /* not detach: the closed flag is the other attacher's */
		free(c);
		return rc;
	}
	atomic_store_explicit(&c->hdr->side[1].pid, (int32_t)getpid(), memory_order_release);
	*out = c;
	return 0;
fail:
	endpoint_free(c);
	return rc;
}

void hora_net_shm_detach(struct hora_net_shm *c)
{
	if (!c)
		return;
	if (c->hdr) {
		atomic_store_explicit(&c->hdr->side[c->side].closed, 1, memory_order_seq_cst);
		shm_wake_all(c, 0);
	}
	endpoint_free(c);
}

int hora_net_shm_fd(const struct hora_net_shm *c)
{
	return c->memfd;
}

size_t hora_net_shm_ring_bytes(const struct hora_net_shm *c)
{
	return c->ring_bytes;
}

uint64_t hora_net_shm_peer_heartbeat(const struct hora_net_shm *c)
{
	return atomic_load_explicit(&c->hdr->side[1 - c->side].heartbeat, memory_order_relaxed);
}

void hora_net_shm_stats(const struct hora_net_shm *c, struct hora_net_shm_stats *st)
{
	st->sleeps = atomic_load_explicit(&c->sleeps, memory_order_relaxed);
	st->woken = atomic_load_explicit(&c->woken, memory_order_relaxed);
	st->timeouts = atomic_load_explicit(&c->timeouts, memory_order_relaxed);
}

int hora_net_shm_sleeping(const struct hora_net_shm *c, int peer)
{
	const int d = peer ? c->side : 1 - c->side;
	return (int)atomic_load_explicit(&c->hdr->dir[d].reader_sleeps, memory_order_seq_cst);
}
