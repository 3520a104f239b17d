/* cpus.h - the CPUs this process may run on, for binding ranks to cores
 * (cluster.bind: core, hora run, hora bench): its affinity mask at the
 * time of the call, which a cpuset (Slurm's task/cgroup, a container's
 * --cpuset-cpus, Kubernetes' static CPU manager) or a parent's taskset
 * narrows, not the host's online CPUs. A rank bound to CPU i of the host
 * when the job may only use CPUs 4-7 either fails to bind (EINVAL under a
 * cpuset) or runs where its user said it must not (under taskset);
 * mpirun binds inside the allowed set the same way. Thread-safe. */
#ifndef HORA_NET_UTIL_CPUS_H
#define HORA_NET_UTIL_CPUS_H

#include <stdint.h>

/* how many CPUs the calling thread may run on (>= 1) */
int hora_cpus_allowed(void);

/* the (i mod hora_cpus_allowed())-th of them, in ascending order: the CPU
 * number to bind local rank i to; -1 when the mask cannot be read */
int hora_cpus_nth(int i);

/* Bind every thread of this process (/proc/self/task: a library's threads
 * started before main too, OpenBLAS's) to cpu; threads started later
 * inherit it from theirs. 0, or -errno of the first that failed. */
int hora_cpus_bind_process(int cpu);

/* CPUs 0 .. 64 * nwords - 1 of the mask as bits (bit c % 64 of word c / 64);
 * returns how many CPUs the mask holds in all (>= 1), -1 when it cannot be
 * read (bits then all 0) */
int hora_cpus_bits(uint64_t *bits, int nwords);

#endif
