/* run.h - `hora run`'s hosts (run_hosts.c) for run.c: horovodrun's -H
 * host:slots,... and --hostfile lines, resolved to the IPv4 addresses a
 * cluster file's nodes are. Internal to the CLI. */
#ifndef HORA_CLI_RUN_H
#define HORA_CLI_RUN_H

#include "cluster.h"

struct run_host {
	char name[256]; /* as written */
	char ip[64];    /* IPv4 it resolves to */
	int slots;
};

struct run_hosts {
	struct run_host h[HORA_CLUSTER_MAX_NODES];
	int n;
};

/* Parse "host[:slots],..." (slots default 1). 0, or 2 with the bad entry
 * named on stderr. */
int run_hosts_parse_list(struct run_hosts *hs, const char *list);
/* Parse a hostfile: "host [slots=N]" per line, '#' comments, blank lines.
 * 0, or 2 naming file:line on stderr. */
int run_hosts_parse_file(struct run_hosts *hs, const char *path);
/* Keep the first np slots in host order (horovodrun's fill): hosts past
 * them dropped, the last one cut. 0, or 2 when np is more than the slots
 * (said, naming what from). */
int run_hosts_fill(struct run_hosts *hs, int np, const char *from);
/* A loopback host beside others (the others could not reach its workers):
 * 2, said naming both; else 0. */
int run_hosts_check_mix(const struct run_hosts *hs, const char *from);
/* Whether every host is a loopback address (127.0.0.0/8): run locally. */
bool run_hosts_all_loopback(const struct run_hosts *hs);

#endif
