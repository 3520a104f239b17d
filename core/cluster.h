/* cluster.h - the cluster file: cluster, transport, membership and
 * collectives sections (internal; schema in deploy/README.md). */
#ifndef HORA_CORE_CLUSTER_H
#define HORA_CORE_CLUSTER_H

#include "config.h" /* hora_config_load_train, for the files that read both sections */
#include "net/membership/membership.h"
#include "slurm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HORA_CLUSTER_MAX_NODES 64
#define HORA_CLUSTER_MAX_SEEDS 16
#define HORA_CLUSTER_MAX_GPUS 16

struct hora_cluster_node {
	char host[64];  /* IPv4 address the node's workers bind to */
	char netns[64]; /* network namespace (launcher netns) */
	int workers;
	int ngpus;
	int gpus[HORA_CLUSTER_MAX_GPUS];
	int line, col;           /* of the node (first key seen) */
	int host_line, host_col; /* of its host value */
};

struct hora_cluster_config {
	char file[1024];
	char name[64];
	char secret_file[1024];
	int secret_line, secret_col;
	/* HORA_SECRET's value (NULL: unset), set by the caller before loading:
	 * the loader reads no environment, and refuses a file with neither a
	 * secret_file nor this */
	const char *secret_env;
	/* an srun step (slurm.h; NULL: none), set by the caller before loading:
	 * the file may then have no cluster section, or no cluster.nodes, and
	 * path may be NULL; the nodes, seed and port_base come from the step */
	const struct hora_slurm *slurm;
	char seeds[HORA_CLUSTER_MAX_SEEDS][80];
	int nseeds;
	char launcher[512];    /* local | ssh | netns | a command template with {host} and {cmd} */
	char ssh_command[512]; /* template for launcher ssh */
	int port_base;         /* worker i of the cluster listens on UDP port_base + 1 + i */
	int bind;              /* 1: worker with local index l runs on CPU l mod ncpu */
	struct hora_cluster_node nodes[HORA_CLUSTER_MAX_NODES];
	int nnodes;
	struct hora_net_opts transport; /* secret not set here */
	struct hora_swim_cfg membership; /* uid/self/secret not set here */
	struct {                         /* collectives section: 0 = the library default */
		size_t small_bytes, medium_bytes, segment_bytes, slice_bytes;
		int algorithm; /* enum hora_algo */
		int spin_us;
		int hierarchical; /* enum hora_hier */
		int hier_line, hier_col;
	} coll;
	int shm; /* enum hora_shm (transport.shm) */
	int join_timeout_ms;
};

void hora_cluster_defaults(struct hora_cluster_config *c);
/* Read and validate path (its train section is left to the train loader).
 * Returns 0, or HORA_ERR_CONFIG with "file:line:col: key problem" in err. */
int hora_cluster_load(struct hora_cluster_config *c, const char *path, char *err, size_t errlen);
/* hora_cluster_load with edits: edit (unless NULL) changes the values read
 * from path (e.g. `--set` and command-line flags, applied with
 * hora_cluster_set) before the checks and defaults that need the whole file
 * (nodes, secret, default seed and min_members, membership timings), so an
 * edit acts exactly as the same key written in the file. edit returns 0, or
 * non-zero with a message in err, which the load returns. */
typedef int (*hora_cluster_edit_fn)(struct hora_cluster_config *c, void *arg, char *err,
				    size_t errlen);
int hora_cluster_load_edit(struct hora_cluster_config *c, const char *path, hora_cluster_edit_fn edit,
			   void *arg, char *err, size_t errlen);
/* Apply one "key=value" (same keys as the file). */
int hora_cluster_set(struct hora_cluster_config *c, const char *key, const char *value, char *err,
		     size_t errlen);
/* SWIM uid for worker g: g+1 in the high bits (views order members by
 * uid, so rank g is worker g while all are alive), random low bits. */
uint64_t hora_cluster_uid(int g);
/* Total workers over all nodes. */
int hora_cluster_size(const struct hora_cluster_config *c);
/* Node and local index of global worker g; -1 if out of range. */
int hora_cluster_locate(const struct hora_cluster_config *c, int g, int *local);

#endif
