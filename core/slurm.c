/* slurm.c - a cluster file's nodes, seed and ports from an srun job step
 * (slurm.h). */
#include "slurm.h"

#include "cluster.h"
#include "hora.h"
#include "hosts.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct names {
	char (*out)[64];
	int n, max;
	char *err;
	size_t errlen;
};

static int emit(struct names *nm, const char *s)
{
	if (nm->n == nm->max)
		return snprintf(nm->err, nm->errlen, "more than %d hosts", nm->max), -1;
	if (strlen(s) >= sizeof(nm->out[0]))
		return snprintf(nm->err, nm->errlen, "host name '%s' is too long", s), -1;
	snprintf(nm->out[nm->n++], sizeof(nm->out[0]), "%s", s);
	return 0;
}

/* prefix + every expansion of rest (its first bracket group, then the
 * remainder's, recursively) */
static int expand(struct names *nm, const char *prefix, const char *rest)
{
	const char *lb = strchr(rest, '['), *rb = lb ? strchr(lb, ']') : NULL;
	char buf[256];
	if (!lb) {
		snprintf(buf, sizeof(buf), "%s%s", prefix, rest);
		return emit(nm, buf);
	}
	if (!rb)
		return snprintf(nm->err, nm->errlen, "unclosed '[' in '%s'", rest), -1;
	char inner[256];
	snprintf(inner, sizeof(inner), "%.*s", (int)(rb - lb - 1), lb + 1);
	for (char *save, *r = strtok_r(inner, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(r, '-'), *end;
		long a = strtol(r, &end, 10), b = a;
		if (end == r || (dash ? end != dash : *end))
			return snprintf(nm->err, nm->errlen, "bad range '%s'", r), -1;
		if (dash && ((b = strtol(dash + 1, &end, 10)) < a || *end || end == dash + 1))
			return snprintf(nm->err, nm->errlen, "bad range '%s'", r), -1;
		const int width = r[0] == '0' ? (int)((dash ? dash : end) - r) : 0;
		for (long v = a; v <= b; v++) {
			snprintf(buf, sizeof(buf), "%s%.*s%0*ld", prefix, (int)(lb - rest), rest, width, v);
			if (expand(nm, buf, rb + 1))
				return -1;
		}
	}
	return 0;
}

int hora_slurm_hostnames(const char *list, char (*names)[64], int max, char *err, size_t errlen)
{
	struct names nm = {.out = names, .max = max, .err = err, .errlen = errlen};
	char item[1024];
	const char *p = list;
	while (*p) {
		size_t k = 0;
		int depth = 0;
		for (; *p && (depth || *p != ','); p++) {
			depth += *p == '[' ? 1 : *p == ']' ? -1 : 0;
			if (k + 1 < sizeof(item))
				item[k++] = *p;
		}
		item[k] = 0;
		if (*p == ',')
			p++;
		if (!k)
			return snprintf(err, errlen, "an empty host in '%s'", list), -1;
		if (expand(&nm, "", item))
			return -1;
	}
	return nm.n;
}

int hora_slurm_tasks_per_node(const char *spec, int *tasks, int max, char *err, size_t errlen)
{
	int n = 0;
	const char *p = spec;
	while (*p) {
		char *end;
		long t = strtol(p, &end, 10), rep = 1;
		if (end == p || t < 1)
			return snprintf(err, errlen, "bad task count at '%s'", p), -1;
		if (!strncmp(end, "(x", 2)) {
			rep = strtol(end + 2, &end, 10);
			if (rep < 1 || *end != ')')
				return snprintf(err, errlen, "bad repeat at '%s'", p), -1;
			end++;
		}
		for (long i = 0; i < rep; i++) {
			if (n == max)
				return snprintf(err, errlen, "more than %d nodes", max), -1;
			tasks[n++] = (int)t;
		}
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return snprintf(err, errlen, "bad separator at '%s'", end), -1;
	}
	return n;
}

void hora_slurm_node_addr(const char *name, char *addr, size_t len)
{
	snprintf(addr, len, "%s", name);
	struct in_addr ip;
	if (!hora_host_valid(name) || inet_pton(AF_INET, name, &ip) == 1) /* never into a shell; an address is one */
		return;
	char cmd[160], line[4096];
	snprintf(cmd, sizeof(cmd), "timeout 10 scontrol show node -o '%s' 2>/dev/null", name); /* a hung slurmctld */
	FILE *f = popen(cmd, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *a = strstr(line, "NodeAddr=");
		if (!a || (a != line && !isspace((unsigned char)a[-1])))
			continue;
		a += strlen("NodeAddr=");
		size_t k = strcspn(a, " \t\n");
		if (k && k < len) {
			memcpy(addr, a, k);
			addr[k] = 0;
		}
	}
	pclose(f);
}

/* the node list and task counts of s, checked against this task's place */
static int step_layout(const struct hora_slurm *s, char (*names)[64], int *tasks, char *err, size_t errlen)
{
	char why[256];
	int n = hora_slurm_hostnames(s->nodelist, names, HORA_SLURM_MAX_HOSTS, why, sizeof(why));
	if (n < 0)
		return snprintf(err, errlen, "SLURM_STEP_NODELIST '%.200s': %s", s->nodelist, why), -1;
	int nt = hora_slurm_tasks_per_node(s->tasks_per_node, tasks, HORA_SLURM_MAX_HOSTS, why, sizeof(why));
	if (nt < 0)
		return snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE '%.100s': %s", s->tasks_per_node, why), -1;
	if (nt != n)
		return snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE '%.100s' gives %d nodes, "
					     "SLURM_STEP_NODELIST '%.200s' %d", s->tasks_per_node, nt, s->nodelist, n), -1;
	int sum = 0, before = 0;
	for (int i = 0; i < n; i++) {
		before += i < s->nodeid ? tasks[i] : 0;
		sum += tasks[i];
	}
	if (sum != s->ntasks)
		return snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE '%.100s' sums to %d tasks, SLURM_NTASKS is %d",
				s->tasks_per_node, sum, s->ntasks), -1;
	if (s->nodeid < 0 || s->nodeid >= n || before + s->localid != s->procid)
		return snprintf(err, errlen, "task %d is local task %d of node %d: hora needs srun's block "
					     "distribution (srun -m block, the default), where a node's tasks are "
					     "consecutive", s->procid, s->localid, s->nodeid), -1;
	return n;
}

int hora_slurm_fill(struct hora_cluster_config *c, const struct hora_slurm *s, char *err, size_t errlen)
{
	char names[HORA_SLURM_MAX_HOSTS][64], why[1024];
	int tasks[HORA_SLURM_MAX_HOSTS];
	const int n = step_layout(s, names, tasks, why, sizeof(why));
	if (n < 0)
		return snprintf(err, errlen, "Slurm step: %.900s", why), HORA_ERR_CONFIG;
	c->nnodes = 0;
	char prev[64] = "";
	for (int i = 0; i < n; i++) {
		char addr[64];
		hora_slurm_node_addr(names[i], addr, sizeof(addr));
		if (c->nnodes && !strcmp(addr, prev)) { /* fake nodes of one machine: one host */
			c->nodes[c->nnodes - 1].workers += tasks[i];
			continue;
		}
		struct hora_cluster_node *nd = &c->nodes[c->nnodes++];
		memset(nd, 0, sizeof(*nd));
		snprintf(nd->host, sizeof(nd->host), "%s", addr);
		nd->workers = tasks[i];
		snprintf(prev, sizeof(prev), "%s", addr);
	}
	if (s->resv_ports[0]) { /* "12000-12015", "12000", "12000-12003,12010": its first range */
		char *end;
		long lo = strtol(s->resv_ports, &end, 10), hi = lo;
		if (*end == '-')
			hi = strtol(end + 1, &end, 10);
		if (lo < 1024 || hi < lo || hi > 65535 || (*end && *end != ','))
			return snprintf(err, errlen, "Slurm step: SLURM_STEP_RESV_PORTS '%.40s' is not PORT[-PORT][,...]",
					s->resv_ports), HORA_ERR_CONFIG;
		if (hi - lo + 1 < s->ntasks)
			return snprintf(err, errlen, "Slurm step: SLURM_STEP_RESV_PORTS %.40s holds %ld ports from %ld, "
						     "the step has %d tasks and hora gives task g port %ld + g on every "
						     "node: reserve them all (srun --resv-ports=%d)", s->resv_ports,
					hi - lo + 1, lo, s->ntasks, lo, s->ntasks), HORA_ERR_CONFIG;
		c->port_base = (int)lo - 1; /* worker g listens on port_base + 1 + g */
	} else {
		if (s->ntasks > 127)
			return snprintf(err, errlen, "Slurm step: %d tasks need SLURM_STEP_RESV_PORTS (srun "
						     "--resv-ports=%d) beyond 127", s->ntasks, s->ntasks), HORA_ERR_CONFIG;
		/* below the ephemeral ports (32768-); steps whose hash agrees share them */
		const unsigned long h = (unsigned long)s->job_id * 31u + (unsigned long)s->step_id;
		c->port_base = 10000 + 128 * (int)(h % 170);
	}
	c->nseeds = 1;
	snprintf(c->seeds[0], sizeof(c->seeds[0]), "%s:%d", c->nodes[0].host, c->port_base + 1);
	return 0;
}
