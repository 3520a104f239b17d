/* cpus.c - the CPUs this process may run on (cpus.h). The mask is sized
 * for the kernel's CPU count (CPU_ALLOC, grown while sched_getaffinity says
 * EINVAL), not cpu_set_t's fixed 1024. */
#include "net/util/cpus.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The calling thread's mask (*n CPUs it can hold, *sz bytes), NULL when it
 * cannot be read; the caller frees it with CPU_FREE. */
static cpu_set_t *mask(int *n, size_t *sz)
{
	for (int cap = 1024; cap <= (1 << 20); cap *= 2) {
		cpu_set_t *set = CPU_ALLOC((size_t)cap);
		if (!set)
			return NULL;
		const size_t bytes = CPU_ALLOC_SIZE((size_t)cap);
		CPU_ZERO_S(bytes, set);
		if (!sched_getaffinity(0, bytes, set)) {
			*n = cap;
			*sz = bytes;
			return set;
		}
		CPU_FREE(set);
		if (errno != EINVAL)
			return NULL;
	}
	return NULL;
}

int hora_cpus_allowed(void)
{
	int cap;
	size_t sz;
	cpu_set_t *set = mask(&cap, &sz);
	const int n = set ? CPU_COUNT_S(sz, set) : 0;
	if (set)
		CPU_FREE(set);
	if (n > 0)
		return n;
	long on = sysconf(_SC_NPROCESSORS_ONLN); /* cannot read the mask: the host's */
	return on > 0 ? (int)on : 1;
}

int hora_cpus_nth(int i)
{
	int cap;
	size_t sz;
	cpu_set_t *set = mask(&cap, &sz);
	if (!set)
		return -1;
	const int n = CPU_COUNT_S(sz, set);
	int cpu = -1;
	if (n > 0 && i >= 0) {
		int k = i % n;
		for (int c = 0; c < cap; c++)
			if (CPU_ISSET_S((size_t)c, sz, set) && k-- == 0) {
				cpu = c;
				break;
			}
	}
	CPU_FREE(set);
	return cpu;
}

int hora_cpus_bits(uint64_t *bits, int nwords)
{
	memset(bits, 0, (size_t)nwords * sizeof(*bits));
	int cap;
	size_t sz;
	cpu_set_t *set = mask(&cap, &sz);
	if (!set)
		return -1;
	for (int c = 0; c < cap && c < 64 * nwords; c++)
		if (CPU_ISSET_S((size_t)c, sz, set))
			bits[c / 64] |= 1ull << (c % 64);
	const int n = CPU_COUNT_S(sz, set);
	CPU_FREE(set);
	return n > 0 ? n : -1;
}

int hora_cpus_bind_process(int cpu)
{
	if (cpu < 0)
		return -EINVAL;
	const size_t sz = CPU_ALLOC_SIZE((size_t)cpu + 1);
	cpu_set_t *set = CPU_ALLOC((size_t)cpu + 1);
	if (!set)
		return -ENOMEM;
	CPU_ZERO_S(sz, set);
	CPU_SET_S((size_t)cpu, sz, set);
	int rc = sched_setaffinity(0, sz, set) ? -errno : 0; /* this thread first */
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	while (!rc && d && (e = readdir(d))) {
		char *end;
		long tid = strtol(e->d_name, &end, 10);
		if (e->d_name[0] == '.' || *end || tid <= 0)
			continue;
		/* a thread that ended meanwhile: ESRCH, nothing to bind */
		if (sched_setaffinity((pid_t)tid, sz, set) && errno != ESRCH)
			rc = -errno;
	}
	if (d)
		closedir(d);
	CPU_FREE(set);
	return rc;
}
