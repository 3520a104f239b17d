/* cluster.c - the cluster file: `cluster:`, `transport:` and `membership:`.
 *
 * Read with the same walker as the train section (yamlwalk.c), so errors are
 * "file:line:col: key must be ... (got '...')". After the walk, checks that
 * need the whole file: at least one node, every node has host and workers,
 * no host twice (per network namespace), a readable secret.
 */
#include "cluster.h"
#include "env.h"

#include "hora.h"
#include "net/transport/handshake.h"
#include "yamlwalk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <strings.h>

void hora_cluster_defaults(struct hora_cluster_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "hora");
	snprintf(c->launcher, sizeof(c->launcher), "local");
	snprintf(c->ssh_command, sizeof(c->ssh_command), "ssh -o BatchMode=yes {host} {cmd}");
	c->port_base = 29500;
	hora_net_opts_default(&c->transport);
	hora_swim_cfg_default(&c->membership);
	c->membership.min_members = 0; /* 0: the cluster's worker count */
	c->membership.ping_timeout_ms = 0; /* 0: 0.4 x probe_interval_ms */
	c->join_timeout_ms = 10000;
}

static int int_of(const char *v, long lo, long hi, int *out)
{
	long x;
	if (hora_cfg_int(v, lo, hi, &x))
		return -1;
	*out = (int)x;
	return 0;
}

static int bytes_of(const char *v, size_t *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || x < 0)
		return -1;
	if (!strcasecmp(end, "k") || !strcasecmp(end, "KiB"))
		x *= 1024;
	else if (!strcasecmp(end, "m") || !strcasecmp(end, "MiB"))
		x *= 1 << 20;
	else if (!strcasecmp(end, "g") || !strcasecmp(end, "GiB"))
		x *= 1 << 30;
	else if (*end)
		return -1;
	*out = (size_t)x;
	return 0;
}


static int copy(char *dst, size_t cap, const char *key, const char *v, char *err, size_t errlen)
{
	if (!*v || strlen(v) >= cap)
		return hora_cfg_bad(err, errlen, "%s must be a non-empty string of at most %zu bytes (got '%s')",
			   key, cap - 1, v);
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

static int set_node(struct hora_cluster_config *c, const char *key, const char *v, int line, int col,
		    char *err, size_t errlen)
{
	char *end;
	long i = strtol(key + strlen("cluster.nodes["), &end, 10);
	if (i < 0 || i >= HORA_CLUSTER_MAX_NODES || strncmp(end, "].", 2))
		return hora_cfg_bad(err, errlen, "unknown key '%s' (at most %d nodes)", key,
			   HORA_CLUSTER_MAX_NODES);
	struct hora_cluster_node *n = &c->nodes[i];
	const char *field = end + 2;
	if (i >= c->nnodes)
		c->nnodes = (int)i + 1;
	if (!n->line) {
		n->line = line;
		n->col = col;
	}
	if (!strcmp(field, "host")) {
		struct in_addr a;
		if (inet_pton(AF_INET, v, &a) != 1)
			return hora_cfg_bad(err, errlen, "%s must be an IPv4 address (got '%s')", key, v);
		n->host_line = line;
		n->host_col = col;
		return copy(n->host, sizeof(n->host), key, v, err, errlen);
	}
	if (!strcmp(field, "netns"))
		return copy(n->netns, sizeof(n->netns), key, v, err, errlen);
	if (!strcmp(field, "workers")) {
		if (int_of(v, 1, 4096, &n->workers))
			return hora_cfg_bad(err, errlen, "%s must be a positive integer (got '%s')", key, v);
		return 0;
	}
	if (!strcmp(field, "gpus")) {
		n->ngpus = 0;
		const char *p = v;
		while (*p) {
			long g = strtol(p, &end, 10);
			if (end == p || g < 0 || g > 1024 || n->ngpus == HORA_CLUSTER_MAX_GPUS)
				return hora_cfg_bad(err, errlen, "%s must be a list of GPU indices (got '%s')", key, v);
			n->gpus[n->ngpus++] = (int)g;
			p = *end == ',' ? end + 1 : end;
			if (*end && *end != ',')
				return hora_cfg_bad(err, errlen, "%s must be a list of GPU indices (got '%s')", key, v);
		}
		return 0;
	}
	return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
}

static int set_at(struct hora_cluster_config *c, const char *key, const char *v, int line, int col,
		  char *err, size_t errlen)
{
	struct hora_net_opts *t = &c->transport;
	struct hora_swim_cfg *m = &c->membership;
	size_t b;
	int x;
	if (!strncmp(key, "cluster.nodes[", 14))
		return set_node(c, key, v, line, col, err, errlen);
	if (!strcmp(key, "cluster.name"))
		return copy(c->name, sizeof(c->name), key, v, err, errlen);
	if (!strcmp(key, "cluster.secret_file")) {
		c->secret_line = line;
		c->secret_col = col;
		return copy(c->secret_file, sizeof(c->secret_file), key, v, err, errlen);
	}
	if (!strcmp(key, "cluster.launcher"))
		return copy(c->launcher, sizeof(c->launcher), key, v, err, errlen);
	if (!strcmp(key, "cluster.bind")) {
		if (strcmp(v, "none") && strcmp(v, "core"))
			return hora_cfg_bad(err, errlen, "%s must be none or core (got '%s')", key, v);
		c->bind = !strcmp(v, "core");
		return 0;
	}
	if (!strcmp(key, "cluster.ssh_command"))
		return copy(c->ssh_command, sizeof(c->ssh_command), key, v, err, errlen);
	if (!strcmp(key, "cluster.port_base")) {
		if (int_of(v, 1024, 60000, &c->port_base))
			return hora_cfg_bad(err, errlen, "%s must be a port in 1024..60000 (got '%s')", key, v);
		return 0;
	}
	if (!strcmp(key, "cluster.seeds")) {
		c->nseeds = 0;
		char buf[2048];
		snprintf(buf, sizeof(buf), "%s", v);
		for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			while (*tok == ' ')
				tok++;
			struct hora_swim_addr a;
			if (hora_net_swim_addr(tok, &a) || c->nseeds == HORA_CLUSTER_MAX_SEEDS)
				return hora_cfg_bad(err, errlen, "%s must be a list of IPv4:PORT (got '%s')", key, tok);
			snprintf(c->seeds[c->nseeds++], sizeof(c->seeds[0]), "%s", tok);
		}
		return 0;
	}
#define INT(k, lo, hi, dst)                                                                       \
	if (!strcmp(key, k)) {                                                                    \
		if (int_of(v, lo, hi, &x))                                                        \
			return hora_cfg_bad(err, errlen, "%s must be an integer in %d..%d (got '%s')", key, \
				   lo, hi, v);                                                    \
		dst = x;                                                                          \
		return 0;                                                                         \
	}
	INT("transport.sockets_per_peer", 1, 64, t->sockets_per_peer)
	INT("transport.sndbuf_bytes", 0, 1 << 30, t->sndbuf_bytes)
	INT("transport.rcvbuf_bytes", 0, 1 << 30, t->rcvbuf_bytes)
	INT("transport.handshake_timeout_ms", 1, 600000, t->handshake_timeout_ms)
	INT("transport.io_timeout_ms", 0, 3600000, t->io_timeout_ms)
	INT("transport.max_pending_handshakes", 1, 65536, t->max_pending_handshakes)
	INT("membership.probe_interval_ms", 10, 60000, m->probe_interval_ms)
	INT("membership.ping_timeout_ms", 1, 60000, m->ping_timeout_ms)
	INT("membership.suspect_timeout_ms", 10, 600000, m->suspect_timeout_ms)
	INT("membership.indirect_probes", 0, 16, m->indirect_probes)
	INT("membership.retransmit_mult", 1, 16, m->retransmit_mult)
	INT("membership.min_members", 1, 4096, m->min_members)
	INT("membership.join_timeout_ms", 100, 3600000, c->join_timeout_ms)
	INT("collectives.spin_us", -1, 1000000, c->coll.spin_us)
#undef INT
	if (!strcmp(key, "collectives.algorithm")) {
		static const char *const names[] = {"auto", "ring", "latency", "direct"};
		for (int i = 0; i < 4; i++)
			if (!strcmp(v, names[i])) {
				c->coll.algorithm = i;
				return 0;
			}
		return hora_cfg_bad(err, errlen, "%s must be auto, ring, latency or direct (got '%s')", key, v);
	}
	if (!strcmp(key, "collectives.small_bytes") || !strcmp(key, "collectives.medium_bytes") ||
	    !strcmp(key, "collectives.segment_size")) {
		const bool seg = key[12] == 's' && key[13] == 'e';
		if (bytes_of(v, &b) || b > (seg ? (64u << 20) : (1u << 30)) || (seg && b < 4096))
			return hora_cfg_bad(err, errlen, "%s must be a size in %s, e.g. 64KiB (got '%s')", key,
					    seg ? "4KiB..64MiB" : "0..1GiB", v);
		if (seg)
			c->coll.segment_bytes = b;
		else if (key[12] == 's')
			c->coll.small_bytes = b;
		else
			c->coll.medium_bytes = b;
		return 0;
	}
	if (!strcmp(key, "collectives.slice_size")) {
		if (bytes_of(v, &b) || b < (64u << 10) || b > (1u << 30))
			return hora_cfg_bad(err, errlen,
					    "%s must be a size in 64KiB..1GiB, e.g. 1MiB (got '%s')", key, v);
		c->coll.slice_bytes = b;
		return 0;
	}
	if (!strcmp(key, "transport.chunk_size") || !strcmp(key, "transport.max_frame_size")) {
		if (bytes_of(v, &b) || b < 4096 || b > (1u << 30))
			return hora_cfg_bad(err, errlen, "%s must be a size in 4KiB..1GiB, e.g. 1MiB (got '%s')",
				   key, v);
		if (key[10] == 'c')
			t->chunk_bytes = b;
		else
			t->max_frame_bytes = b;
		return 0;
	}
	if (!strcmp(key, "transport.send_zc") || !strcmp(key, "transport.crc") ||
	    !strcmp(key, "transport.rcvlowat")) {
		if (hora_cfg_bool(v, &x))
			return hora_cfg_bad(err, errlen, "%s must be true or false (got '%s')", key, v);
		if (key[10] == 's')
			t->send_zc = x;
		else if (key[10] == 'c')
			t->crc = x;
		else
			t->rcvlowat = x;
		return 0;
	}
	return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
}

/* membership.ping_timeout_ms left out: 0.4 T, as the defaults are */
static void resolve_ping_timeout(struct hora_swim_cfg *m)
{
	if (!m->ping_timeout_ms)
		m->ping_timeout_ms = m->probe_interval_ms * 2 / 5 > 0 ? m->probe_interval_ms * 2 / 5 : 1;
}

int hora_cluster_set(struct hora_cluster_config *c, const char *key, const char *value, char *err,
		     size_t errlen)
{
	return set_at(c, key, value, 0, 0, err, errlen);
}

static int walk_set(void *cfg, const char *key, const char *value, int line, int col, char *err,
		    size_t errlen)
{
	return set_at(cfg, key, value, line, col, err, errlen);
}

uint64_t hora_cluster_uid(int g)
{
	uint64_t r;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint64_t)time(NULL) ^ (uint64_t)getpid();
	return ((uint64_t)(g + 1) << 40) | (r & ((1ull << 40) - 1));
}

int hora_cluster_size(const struct hora_cluster_config *c)
{
	int n = 0;
	for (int i = 0; i < c->nnodes; i++)
		n += c->nodes[i].workers;
	return n;
}

int hora_cluster_locate(const struct hora_cluster_config *c, int g, int *local)
{
	for (int i = 0; i < c->nnodes; i++) {
		if (g < c->nodes[i].workers) {
			*local = g;
			return i;
		}
		g -= c->nodes[i].workers;
	}
	return -1;
}

int hora_cluster_load(struct hora_cluster_config *c, const char *path, char *err, size_t errlen)
{
	return hora_cluster_load_edit(c, path, NULL, NULL, err, errlen);
}

int hora_cluster_load_edit(struct hora_cluster_config *c, const char *path, hora_cluster_edit_fn edit,
			   void *arg, char *err, size_t errlen)
{
	static const char *const skip[] = {"train"};
	static const char *const lists[] = {"cluster.seeds", "cluster.nodes[*].gpus"};
	static const char *const map_lists[] = {"cluster.nodes"};
	const struct hora_yaml_spec spec = {.set = walk_set, .skip = skip, .nskip = 1,
					    .lists = lists, .nlists = 2, .map_lists = map_lists,
					    .nmap_lists = 1, .required_section = "cluster"};
	struct hora_cluster_config tmp = *c;
	snprintf(tmp.file, sizeof(tmp.file), "%s", path);
	int rc = hora_yaml_walk(path, &spec, &tmp, err, errlen);
	if (!rc && edit)
		rc = edit(&tmp, arg, err, errlen);
	if (rc)
		return rc;
	if (tmp.nnodes == 0)
		return hora_cfg_bad(err, errlen, "%s: cluster.nodes is missing: list at least one node "
					"(host, workers)", path);
	for (int i = 0; i < tmp.nnodes; i++) {
		struct hora_cluster_node *n = &tmp.nodes[i];
		if (!n->line)
			return hora_cfg_bad(err, errlen, "%s: cluster.nodes[%d] is empty", path, i);
		if (!n->host[0])
			return hora_cfg_bad(err, errlen, "%s:%d:%d: cluster.nodes[%d].host is missing", path,
				   n->line, n->col, i);
		if (!n->workers)
			return hora_cfg_bad(err, errlen, "%s:%d:%d: cluster.nodes[%d].workers is missing", path,
				   n->line, n->col, i);
		for (int j = 0; j < i; j++)
			if (!strcmp(tmp.nodes[j].host, n->host) && !strcmp(tmp.nodes[j].netns, n->netns))
				return hora_cfg_bad(err, errlen, "%s:%d:%d: cluster.nodes[%d].host %s is already "
							"cluster.nodes[%d].host",
					   path, n->host_line, n->host_col, i, n->host, j);
	}
	uint8_t key[HORA_NET_SECRET_MAX];
	char why[512];
	if (tmp.secret_file[0]) {
		if (hora_net_secret_load(tmp.secret_file, NULL, key, sizeof(key), why, sizeof(why), NULL,
					 0) < 0)
			return hora_cfg_bad(err, errlen, "%s:%d:%d: cluster.secret_file: %s", path, tmp.secret_line,
				   tmp.secret_col, why);
	} else if (hora_net_secret_load(NULL, hora_env_secret(), key, sizeof(key), why, sizeof(why),
					NULL, 0) < 0) {
		return hora_cfg_bad(err, errlen, "%s: %s", path, why);
	}
	if (!tmp.nseeds) /* default: the first worker is the seed */
		snprintf(tmp.seeds[tmp.nseeds++], sizeof(tmp.seeds[0]), "%s:%d", tmp.nodes[0].host,
			 tmp.port_base + 1);
	if (!tmp.membership.min_members)
		tmp.membership.min_members = hora_cluster_size(&tmp);
	resolve_ping_timeout(&tmp.membership);
	if (hora_swim_cfg_check(&tmp.membership, why, sizeof(why)))
		return hora_cfg_bad(err, errlen, "%s: %s", path, why);
	*c = tmp;
	return 0;
}
