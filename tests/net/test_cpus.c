/* test_cpus.c - the CPUs a rank may be bound to (net/util/cpus.c): the
 * process's affinity mask, in ascending order, round-robin; never a CPU
 * outside it. Criterion runs each test in a process of its own, so the
 * masks set here touch nothing else. */
#include <criterion/criterion.h>
#include <sched.h>
#include <unistd.h>

#include "net/util/cpus.h"

/* the allowed CPUs now, ascending; their count */
static int allowed_list(int *cpus, int cap)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	int n = 0;
	for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
		if (CPU_ISSET(c, &set))
			cpus[n++] = c;
	return n;
}

Test(net_cpus, round_robin_over_the_allowed_cpus)
{
	int cpus[CPU_SETSIZE];
	const int n = allowed_list(cpus, CPU_SETSIZE);
	cr_assert_eq(hora_cpus_allowed(), n);
	for (int i = 0; i < 3 * n + 1; i++)
		cr_assert_eq(hora_cpus_nth(i), cpus[i % n], "rank %d", i);
	cr_assert_eq(hora_cpus_nth(-1), -1);
}

Test(net_cpus, a_narrowed_mask_is_what_counts)
{
	int cpus[CPU_SETSIZE];
	const int n = allowed_list(cpus, CPU_SETSIZE);
	/* the highest allowed CPU alone, as `taskset -c LAST` or a cpuset of one */
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpus[n - 1], &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	cr_assert_eq(hora_cpus_allowed(), 1);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(hora_cpus_nth(i), cpus[n - 1], "rank %d: CPU %d, not the allowed %d", i,
			     hora_cpus_nth(i), cpus[n - 1]);
	if (n < 2)
		return;
	/* the last two: ranks alternate between them, lower first */
	CPU_SET(cpus[n - 2], &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	cr_assert_eq(hora_cpus_allowed(), 2);
	cr_assert_eq(hora_cpus_nth(0), cpus[n - 2]);
	cr_assert_eq(hora_cpus_nth(1), cpus[n - 1]);
	cr_assert_eq(hora_cpus_nth(2), cpus[n - 2]);
}
