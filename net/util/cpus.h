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

/* how many CPUs the calling thread may run on (>= 1) */
int hora_cpus_allowed(void);

/* the (i mod hora_cpus_allowed())-th of them, in ascending order: the CPU
 * number to bind local rank i to; -1 when the mask cannot be read */
int hora_cpus_nth(int i);

#endif
