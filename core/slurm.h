/* slurm.h - a job step started by srun (internal): what Slurm says about
 * the step (read from SLURM_* by env.c: library code reads no environment)
 * and the cluster file's nodes, seed and ports made of it. srun's
 * variables are srun(1)'s: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
 * SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE,
 * SLURM_STEP_RESV_PORTS, SLURM_JOB_ID, SLURM_STEP_ID. */
#ifndef HORA_CORE_SLURM_H
#define HORA_CORE_SLURM_H

#include <stddef.h>

struct hora_cluster_config;

struct hora_slurm {
	int on; /* a step of several tasks: SLURM_STEP_NODELIST and SLURM_NTASKS set */
	int procid, ntasks, localid, nodeid;
	long job_id, step_id;
	char nodelist[4096];      /* "n[1-2],gpu07" */
	char tasks_per_node[512]; /* "2(x2),1" */
	char resv_ports[64];      /* "12000-12015" or "" */
};

#define HORA_SLURM_MAX_HOSTS 64 /* = HORA_CLUSTER_MAX_NODES */

/* Expand a Slurm host list as `scontrol show hostnames` does:
 * "n[1-3,7],gpu[01-02]-ib,login" -> n1 n2 n3 n7 gpu01-ib gpu02-ib login
 * (zero padding kept, several bracket groups per name). Returns the count,
 * or -1 with the reason in err. */
int hora_slurm_hostnames(const char *list, char (*names)[64], int max, char *err, size_t errlen);
/* "2(x3),1" -> 2 2 2 1. Returns the count, or -1 with the reason in err. */
int hora_slurm_tasks_per_node(const char *spec, int *tasks, int max, char *err, size_t errlen);
/* The address of node `name` (Slurm's NodeAddr, from `scontrol show node
 * -o NAME`; the name itself when it is an IPv4 address, or scontrol is
 * missing or says nothing). */
void hora_slurm_node_addr(const char *name, char *addr, size_t len);
/* Fill c's nodes (one per Slurm node, host = its NodeAddr, workers = its
 * tasks; consecutive nodes of one address, as fake nodes of one machine
 * are, merged), seeds (the first node) and port_base: from
 * SLURM_STEP_RESV_PORTS (its first range must hold a port per task: worker
 * g listens on port_base + 1 + g on its node), else 10000 + 128 x ((job id
 * x 31 + step id) mod 170), below the ephemeral ports; two steps whose
 * value agrees get the same ports (steps sharing nodes should reserve
 * theirs: srun --resv-ports=NTASKS). Needs srun's
 * block distribution (worker index = tasks of the nodes before + local id).
 * 0, or HORA_ERR_CONFIG with the reason in err. */
int hora_slurm_fill(struct hora_cluster_config *c, const struct hora_slurm *s, char *err, size_t errlen);

#endif
