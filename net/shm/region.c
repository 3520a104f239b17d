/* region.c - memory the ranks of one host can map: a set of regions, each
 * one sealed memfd of this process mapped here (hora_comm_alloc's memory).
 * A local peer that is passed a region's fd (net/coll/stage_window.c, over
 * the checked Unix socket) maps the same pages, so a collective can read
 * and write the peer's buffer where it lies instead of copying it through
 * a staging area. Not the passing nor the collectives: the set only
 * allocates, frees and answers "which region holds this buffer".
 *
 * Like the channels' memfds, a region has no name (nothing in /dev/shm,
 * whatever way the process ends) and its size is sealed, so no peer can
 * shrink it under another (a SIGBUS). The mapping is MADV_DONTFORK, as
 * ibverbs' registered memory is: a forked child has no such mapping (a
 * fault on use) instead of silently sharing its parent's pages.
 */
#include "net/shm/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define REGION_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct region {
	uint32_t id;
	int fd;
	uint8_t *base;
	size_t bytes; /* the memfd's (whole pages) */
};

struct hora_net_shm_regions {
	pthread_mutex_t mu; /* guards everything below but next */
	struct region *r;
	int n, cap;
	uint32_t next_id;
	struct hora_net_shm_regions *next; /* every set of the process (g_sets_mu) */
};

/* every set of the process, so that memory freed through another
 * communicator than its own is found (hora_net_shm_region_free_any);
 * lock order: g_sets_mu, then a set's mu */
static pthread_mutex_t g_sets_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hora_net_shm_regions *g_sets;

/* the starts of the last regions a set's destroy freed while still
 * allocated (g_sets_mu), so that a late hora_comm_mem_free of one is told
 * apart from ordinary memory (free() of it would abort the process); a
 * start given out again (a new region, or the fallback's memory) leaves
 * the list */
#define REGION_GONE_MAX 64
static void *g_gone[REGION_GONE_MAX];
static unsigned g_gone_next;

static void gone_forget_locked(const void *p)
{
	for (int i = 0; i < REGION_GONE_MAX; i++)
		if (g_gone[i] == p)
			g_gone[i] = NULL;
}

void hora_net_shm_region_forget(const void *p)
{
	pthread_mutex_lock(&g_sets_mu);
	gone_forget_locked(p);
	pthread_mutex_unlock(&g_sets_mu);
}

int hora_net_shm_regions_create(struct hora_net_shm_regions **out)
{
	*out = NULL;
	struct hora_net_shm_regions *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	s->next_id = 1;
	pthread_mutex_lock(&g_sets_mu);
	s->next = g_sets;
	g_sets = s;
	pthread_mutex_unlock(&g_sets_mu);
	*out = s;
	return 0;
}

void hora_net_shm_regions_destroy(struct hora_net_shm_regions *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&g_sets_mu);
	struct hora_net_shm_regions **pp = &g_sets;
	while (*pp && *pp != s)
		pp = &(*pp)->next;
	if (*pp)
		*pp = s->next;
	for (int i = 0; i < s->n; i++) {
		g_gone[g_gone_next++ % REGION_GONE_MAX] = s->r[i].base;
		munmap(s->r[i].base, s->r[i].bytes);
		close(s->r[i].fd);
	}
	pthread_mutex_unlock(&g_sets_mu);
	free(s->r);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int hora_net_shm_region_alloc(struct hora_net_shm_regions *s, size_t bytes, void **out, char *err,
			      size_t errlen)
{
	*out = NULL;
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (!bytes)
		bytes = 1;
	if (bytes > SIZE_MAX - page) {
		shm_errf(err, errlen, "shm region: %zu bytes is too large", bytes);
		return -EINVAL;
	}
	const size_t total = (bytes + page - 1) / page * page;
	struct region g = {.fd = memfd_create("hora-region", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
	int rc = 0;
	if (g.fd < 0) {
		rc = -errno;
		shm_errf(err, errlen, "shm region: memfd_create: %s", strerror(-rc));
		return rc;
	}
	if (ftruncate(g.fd, (off_t)total) || fcntl(g.fd, F_ADD_SEALS, REGION_SEALS)) {
		rc = -errno;
		shm_errf(err, errlen, "shm region: sizing and sealing %zu bytes: %s", total, strerror(-rc));
		goto fail;
	}
	void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, g.fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		shm_errf(err, errlen, "shm region: mapping %zu bytes: %s", total, strerror(-rc));
		goto fail;
	}
	(void)madvise(p, total, MADV_DONTFORK);
	g.base = p;
	g.bytes = total;
	pthread_mutex_lock(&s->mu);
	if (s->n == s->cap) {
		const int cap = s->cap ? 2 * s->cap : 8;
		struct region *nr = realloc(s->r, (size_t)cap * sizeof(*nr));
		if (!nr) {
			pthread_mutex_unlock(&s->mu);
			munmap(p, total);
			rc = -ENOMEM;
			shm_errf(err, errlen, "shm region: out of memory");
			goto fail;
		}
		s->r = nr;
		s->cap = cap;
	}
	g.id = s->next_id++;
	if (!s->next_id)
		s->next_id = 1; /* 0 means "no region" */
	s->r[s->n++] = g;
	pthread_mutex_unlock(&s->mu);
	hora_net_shm_region_forget(p); /* after s->mu: the lock order */
	*out = p;
	return 0;
fail:
	close(g.fd);
	return rc;
}

int hora_net_shm_region_free(struct hora_net_shm_regions *s, void *p)
{
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n; i++)
		if (s->r[i].base == p) {
			const struct region g = s->r[i];
			s->r[i] = s->r[--s->n];
			pthread_mutex_unlock(&s->mu);
			munmap(g.base, g.bytes);
			close(g.fd);
			return 0;
		}
	pthread_mutex_unlock(&s->mu);
	return -ENOENT;
}

int hora_net_shm_region_free_any(void *p)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&g_sets_mu);
	for (struct hora_net_shm_regions *s = g_sets; s && rc; s = s->next)
		rc = hora_net_shm_region_free(s, p);
	for (int i = 0; rc && p && i < REGION_GONE_MAX; i++)
		if (g_gone[i] == p) {
			g_gone[i] = NULL;
			rc = -ESTALE;
		}
	pthread_mutex_unlock(&g_sets_mu);
	return rc;
}

int hora_net_shm_region_alive(struct hora_net_shm_regions *s, uint32_t id)
{
	int alive = 0;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n && !alive; i++)
		alive = s->r[i].id == id;
	pthread_mutex_unlock(&s->mu);
	return alive;
}

int hora_net_shm_region_find(struct hora_net_shm_regions *s, const void *p, size_t len,
			     struct hora_net_shm_region_ref *ref)
{
	const uintptr_t a = (uintptr_t)p;
	int found = 0;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n && !found; i++) {
		const uintptr_t b = (uintptr_t)s->r[i].base;
		if (a >= b && a - b <= s->r[i].bytes && len <= s->r[i].bytes - (a - b)) {
			*ref = (struct hora_net_shm_region_ref){.id = s->r[i].id, .bytes = s->r[i].bytes,
								 .off = a - b};
			found = 1;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return found;
}

int hora_net_shm_region_dup_fd(struct hora_net_shm_regions *s, uint32_t id)
{
	int fd = -ENOENT;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n; i++)
		if (s->r[i].id == id) {
			fd = fcntl(s->r[i].fd, F_DUPFD_CLOEXEC, 0);
			if (fd < 0)
				fd = -errno;
			break;
		}
	pthread_mutex_unlock(&s->mu);
	return fd;
}

uint8_t *hora_net_shm_region_map_peer(int fd, size_t bytes, char *err, size_t errlen)
{
	struct stat sb;
	const int seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &sb) || seals < 0) {
		shm_errf(err, errlen, "shm region: inspecting a peer's region: %s", strerror(errno));
		return NULL;
	}
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    (uint64_t)sb.st_size != (uint64_t)bytes) {
		shm_errf(err, errlen,
			 "shm region: a peer's region is not what it says (%lld bytes, seals %#x; "
			 "announced %zu bytes, sealed size)",
			 (long long)sb.st_size, (unsigned)seals, bytes);
		return NULL;
	}
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		shm_errf(err, errlen, "shm region: mapping a peer's region of %zu bytes: %s", bytes,
			 strerror(errno));
		return NULL;
	}
	(void)madvise(p, bytes, MADV_DONTFORK);
	return p;
}
