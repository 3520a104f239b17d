/* cpus.c - the CPUs this process may run on (cpus.h). */
#include "net/util/cpus.h"

#include <sched.h>
#include <unistd.h>

static int allowed(cpu_set_t *set)
{
	CPU_ZERO(set);
	if (sched_getaffinity(0, sizeof(*set), set))
		return -1;
	return CPU_COUNT(set);
}

int hora_cpus_allowed(void)
{
	cpu_set_t set;
	int n = allowed(&set);
	if (n > 0)
		return n;
	long on = sysconf(_SC_NPROCESSORS_ONLN); /* cannot read the mask: the host's */
	return on > 0 ? (int)on : 1;
}

int hora_cpus_nth(int i)
{
	cpu_set_t set;
	const int n = allowed(&set);
	if (n <= 0 || i < 0)
		return -1;
	int k = i % n;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && k-- == 0)
			return c;
	return -1;
}
