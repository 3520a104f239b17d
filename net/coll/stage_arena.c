/* stage_arena.c - the shared-memory stage's arena: local rank 0 creates a
 * sealed memfd (no name in any file system: nothing in /dev/shm, freed by
 * the kernel with its last fd or mapping, kill -9 included), writes its
 * header and passes it over socks[l] to every other local rank
 * (net/shm's fd passing); they check the header and map it. Also the
 * pidfds that tell a dead peer from a slow one, and destroy. Not the
 * barrier (stage_wait.c) nor the ops (stage_shm.c).
 */
#include "net/coll/stage_shm_internal.h"
#include "net/shm/shm.h"
#include "net/util/cpus.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define PAGE 4096u

static size_t ctl_bytes(int nlocal)
{
	size_t b = sizeof(struct stage_ctl) + (size_t)nlocal * sizeof(struct stage_rank);
	return (b + PAGE - 1) / PAGE * PAGE;
}

static int check_cfg(const struct hora_net_stage_shm_cfg *cfg, size_t *slot, char *err, size_t errlen)
{
	if (!cfg || cfg->nlocal < 1 || cfg->nlocal > STAGE_MAX_LOCAL || cfg->lrank < 0 ||
	    cfg->lrank >= cfg->nlocal || (cfg->nlocal > 1 && (!cfg->socks || !cfg->pids))) {
		stage_errf(err, errlen, "stage shm: local rank %d of %d (at most %d), socks and pids needed",
			   cfg ? cfg->lrank : -1, cfg ? cfg->nlocal : 0, STAGE_MAX_LOCAL);
		return -EINVAL;
	}
	size_t s = cfg->slot_bytes ? cfg->slot_bytes : STAGE_SLOT_DEFAULT;
	if (s % STAGE_LINE || s < (size_t)cfg->nlocal * STAGE_LINE || s > STAGE_SLOT_MAX) {
		stage_errf(err, errlen,
			   "stage shm: slot_bytes %zu is not a multiple of 64 between 64 * nlocal (%d) and %llu",
			   s, 64 * cfg->nlocal, (unsigned long long)STAGE_SLOT_MAX);
		return -EINVAL;
	}
	*slot = s;
	return 0;
}

static int map_fd(struct stage_shm *st, int fd, size_t bytes, char *err, size_t errlen)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		stage_errf(err, errlen, "stage shm: mmap of the %zu-byte arena: %s", bytes, strerror(e));
		return -e;
	}
	st->map = p;
	st->map_bytes = bytes;
	st->ctl = p;
#ifdef MADV_POPULATE_WRITE /* best effort: no page faults in the first call */
	(void)madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
	return 0;
}

/* Local rank 0: the memfd, its header, passed to every other local rank. */
static int arena_create(struct stage_shm *st, const struct hora_net_stage_shm_cfg *cfg, char *err,
			size_t errlen)
{
	const int n = cfg->nlocal;
	const size_t ctl = ctl_bytes(n), total = ctl + (size_t)n * 2 * st->slot_bytes;
	int rc, fd = memfd_create("hora-stage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		rc = -errno;
		stage_errf(err, errlen, "stage shm: memfd_create: %s", strerror(-rc));
		return rc;
	}
	if (ftruncate(fd, (off_t)total) || fcntl(fd, F_ADD_SEALS, SEALS)) {
		rc = -errno;
		stage_errf(err, errlen, "stage shm: sizing and sealing the %zu-byte arena: %s", total,
			   strerror(-rc));
		goto out;
	}
	if ((rc = map_fd(st, fd, total, err, errlen)))
		goto out;
	struct stage_hdr *h = &st->ctl->hdr; /* fresh pages are zero: every step starts at 0 */
	h->magic = STAGE_MAGIC;
	h->version = STAGE_VERSION;
	h->nlocal = (uint32_t)n;
	h->slot_bytes = st->slot_bytes;
	h->ctl_bytes = ctl;
	h->total_bytes = total;
	for (int l = 1; l < n; l++)
		if ((rc = hora_net_shm_fd_send(cfg->socks[l], fd, err, errlen)))
			goto out;
out:
	close(fd); /* the fds in flight and the mappings keep the memory */
	return rc;
}

/* The attacher's checks of the fd and its header, before trusting either. */
static int check_fd(int fd, const struct hora_net_stage_shm_cfg *cfg, struct stage_hdr *h, char *err,
		    size_t errlen)
{
	struct stat sb;
	if (fstat(fd, &sb) || sb.st_size < (off_t)PAGE || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h)) {
		stage_errf(err, errlen, "stage shm: the arena's fd holds no header");
		return -EINVAL;
	}
	if (h->magic != STAGE_MAGIC) {
		stage_errf(err, errlen, "stage shm: bad magic 0x%016llx in the arena (not a hora stage)",
			   (unsigned long long)h->magic);
		return -EPROTO;
	}
	if (h->version != STAGE_VERSION) {
		stage_errf(err, errlen, "stage shm: arena version %u, this build speaks version %u", h->version,
			   STAGE_VERSION);
		return -EPROTO;
	}
	if (h->nlocal != (uint32_t)cfg->nlocal) {
		stage_errf(err, errlen, "stage shm: local rank 0 made an arena for %u local ranks, this rank has %d",
			   h->nlocal, cfg->nlocal);
		return -EINVAL;
	}
	struct hora_net_stage_shm_cfg want = *cfg;
	size_t slot;
	want.slot_bytes = (size_t)h->slot_bytes;
	if (check_cfg(&want, &slot, NULL, 0) || h->ctl_bytes != ctl_bytes(cfg->nlocal) ||
	    h->total_bytes != h->ctl_bytes + (uint64_t)cfg->nlocal * 2 * h->slot_bytes ||
	    (uint64_t)sb.st_size != h->total_bytes) {
		stage_errf(err, errlen, "stage shm: the arena's header says slot %llu, total %llu bytes; the fd holds %lld",
			   (unsigned long long)h->slot_bytes, (unsigned long long)h->total_bytes,
			   (long long)sb.st_size);
		return -EINVAL;
	}
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & SEALS) != SEALS) {
		stage_errf(err, errlen, "stage shm: the arena's fd is not a memfd with its size sealed");
		return -EINVAL;
	}
	return 0;
}

static int arena_attach(struct stage_shm *st, const struct hora_net_stage_shm_cfg *cfg, char *err,
			size_t errlen)
{
	int fd, rc = hora_net_shm_fd_recv(cfg->socks[0], cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 30000, &fd,
					  err, errlen);
	if (rc)
		return rc;
	struct stage_hdr h;
	if (!(rc = check_fd(fd, cfg, &h, err, errlen))) {
		st->slot_bytes = (size_t)h.slot_bytes; /* local rank 0's counts */
		rc = map_fd(st, fd, (size_t)h.total_bytes, err, errlen);
	}
	close(fd);
	return rc;
}

static int open_pidfds(struct stage_shm *st, char *err, size_t errlen)
{
	for (int l = 0; l < st->pub.nlocal; l++) {
		st->pidfds[l] = -1;
		if (l == st->pub.lrank || st->pids[l] <= 0 || st->pids[l] == getpid())
			continue; /* threads of one process share their fate */
#ifdef SYS_pidfd_open
		st->pidfds[l] = (int)syscall(SYS_pidfd_open, st->pids[l], 0);
		if (st->pidfds[l] < 0 && errno == ESRCH) {
			stage_errf(err, errlen, "stage shm: local rank %d (pid %d) is not running", l,
				   (int)st->pids[l]);
			return -ECONNRESET;
		} /* other errors (ENOSYS): the lifeline sockets remain */
#endif
	}
	return 0;
}

/* More local ranks than the host's CPUs: a spinning rank would take the
 * CPU of the rank it waits for (sched_yield does not hand it over
 * reliably), so the stage sleeps at once (README.md: the spin bound). Until
 * the first op has shown every rank's CPU mask (stage_shm.c), the host's
 * CPUs; then the union of the ranks' masks (a taskset or a cpuset of fewer
 * CPUs than ranks; ranks bound one to a CPU each are not oversubscribed). */
static int oversubscribed(int nlocal)
{
	const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	return ncpu > 0 && nlocal > ncpu;
}

static void stage_free(struct stage_shm *st)
{
	stage_windows_free(st);
	if (st->map)
		munmap(st->map, st->map_bytes);
	for (int l = 0; st->pidfds && l < st->pub.nlocal; l++)
		if (st->pidfds[l] >= 0)
			close(st->pidfds[l]);
	free(st->pidfds);
	free(st->pids);
	free(st->socks);
	free(st);
}

int hora_net_stage_shm_create(const struct hora_net_stage_shm_cfg *cfg, struct hora_net_stage **out,
			      char *err, size_t errlen)
{
	size_t slot;
	int rc = check_cfg(cfg, &slot, err, errlen);
	if (rc)
		return rc;
	const int n = cfg->nlocal;
	struct stage_shm *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->pub = (struct hora_net_stage){.ops = &stage_shm_ops, .lrank = cfg->lrank, .nlocal = n, .name = "shm",
				   .culprit = -1};
	st->slot_bytes = slot;
	st->ctl_bytes = ctl_bytes(n); /* the header's, as checked at attach */
	st->pub.small_max = stage_shm_small_max(st);
	st->spin_cfg = cfg->spin_us > 0 ? cfg->spin_us : 0;
	st->spin_us = st->spin_cfg && !oversubscribed(n) ? st->spin_cfg : 0;
	st->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 0;
	atomic_init(&st->interrupted, 0);
	/* the fd numbers copied: the caller's array may go once create
	 * returns (topo.c frees it when the link takes the sockets over) */
	if (cfg->socks && (st->socks = malloc((size_t)n * sizeof(int))))
		memcpy(st->socks, cfg->socks, (size_t)n * sizeof(int));
	st->pidfds = calloc((size_t)n, sizeof(int));
	st->pids = calloc((size_t)n, sizeof(pid_t));
	if (!st->pidfds || !st->pids || (cfg->socks && !st->socks)) {
		free(st->pidfds); /* stage_free would close fds 0 */
		st->pidfds = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	for (int l = 0; l < n; l++)
		st->pidfds[l] = -1;
	if (n == 1) { /* alone: every op is a no-op, no arena */
		*out = &st->pub;
		return 0;
	}
	memcpy(st->pids, cfg->pids, (size_t)n * sizeof(pid_t));
	if ((rc = open_pidfds(st, err, errlen)))
		goto fail;
	rc = cfg->lrank == 0 ? arena_create(st, cfg, err, errlen) : arena_attach(st, cfg, err, errlen);
	if (rc)
		goto fail;
	st->pub.small_max = stage_shm_small_max(st); /* local rank 0's slot size */
	atomic_store_explicit(&st->ctl->rank[cfg->lrank].pid, (int32_t)getpid(), memory_order_relaxed);
	hora_cpus_bits(st->ctl->rank[cfg->lrank].cpus, STAGE_CPU_WORDS); /* before our first step */
	*out = &st->pub;
	return 0;
fail:
	stage_free(st);
	return rc;
}

void stage_shm_destroy(struct hora_net_stage *s)
{
	if (!s)
		return;
	struct stage_shm *st = stage_of(s);
	if (st->ctl) { /* peers waiting for us fail now, not at their timeout */
		atomic_store_explicit(&st->ctl->rank[s->lrank].left, 1, memory_order_seq_cst);
		stage_wake_all(st);
	}
	stage_free(st);
}
