/* cluster.c - the cluster file: `cluster:`, `transport:`, `membership:` and
 * `collectives:`.
 *
 * Its keys are tables (cluster_keys, node_keys; cfgkey.c parses the values),
 * read with the same walker as the train section (yamlwalk.c), so errors are
 * "file:line:col: key must be ... (got '...')". After the walk, checks that
 * need the whole file: at least one node, every node has host and workers,
 * no host twice (per network namespace), a readable secret.
 */
#include "cluster.h"

#include "cfgkey.h"
#include "hora.h"
#include "hosts.h"
#include "net/transport/handshake.h"
#include "net/util/hostport.h"
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

static int set_host(void *base, const char *key, const char *v, int line, int col, char *err,
		    size_t errlen)
{
	struct hora_cluster_node *n = base;
	if (!hora_host_valid(v))
		return hora_cfg_bad(err, errlen, "%s must be an IPv4 address or a host name (got '%s')", key, v);
	n->host_line = line;
	n->host_col = col;
	return hora_cfg_text(n->host, sizeof(n->host), key, v, 0, err, errlen);
}

static int set_secret_file(void *base, const char *key, const char *v, int line, int col, char *err,
			   size_t errlen)
{
	struct hora_cluster_config *c = base;
	c->secret_line = line;
	c->secret_col = col;
	return hora_cfg_text(c->secret_file, sizeof(c->secret_file), key, v, 0, err, errlen);
}

static int set_seeds(void *base, const char *key, const char *v, int line, int col, char *err,
		     size_t errlen)
{
	(void)line;
	(void)col;
	struct hora_cluster_config *c = base;
	c->nseeds = 0;
	char buf[2048];
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		char host[256];
		uint16_t port;
		if (strlen(tok) >= sizeof(c->seeds[0]))
			return hora_cfg_bad(err, errlen, "%s: '%s' is longer than %zu bytes", key, tok,
					    sizeof(c->seeds[0]) - 1);
		if (hora_hostport_split(tok, host, sizeof(host), &port) || !port || !hora_host_valid(host) ||
		    c->nseeds == HORA_CLUSTER_MAX_SEEDS)
			return hora_cfg_bad(err, errlen, "%s must be a list of HOST:PORT, HOST an IPv4 address or "
							 "a host name (got '%s')", key, tok);
		snprintf(c->seeds[c->nseeds++], sizeof(c->seeds[0]), "%s", tok);
	}
	return 0;
}

static const struct hora_cfg_name shm_modes[] = {{"auto", HORA_SHM_AUTO}, {"off", HORA_SHM_OFF}, {NULL, 0}};
static const struct hora_cfg_name hier_modes[] = {
	{"auto", HORA_HIER_AUTO}, {"on", HORA_HIER_ON}, {"off", HORA_HIER_OFF}, {NULL, 0}};

/* collectives.hierarchical, with its place for the check against
 * transport.shm (which needs the whole file) */
static int set_hier(void *base, const char *key, const char *v, int line, int col, char *err, size_t errlen)
{
	struct hora_cluster_config *c = base;
	for (const struct hora_cfg_name *n = hier_modes; n->name; n++)
		if (!strcmp(v, n->name)) {
			c->coll.hierarchical = n->value;
			c->coll.hier_line = line;
			c->coll.hier_col = col;
			return 0;
		}
	return hora_cfg_bad(err, errlen, "%s must be auto, on or off (got '%s')", key, v);
}

static const struct hora_cfg_name binds[] = {{"none", 0}, {"core", 1}, {NULL, 0}};
static const struct hora_cfg_name algorithms[] = {{"auto", HORA_ALGO_AUTO},
						   {"ring", HORA_ALGO_RING},
						   {"latency", HORA_ALGO_LATENCY},
						   {"direct", HORA_ALGO_DIRECT_RING},
						   {NULL, 0}};

#define F(field) HORA_CFG_FIELD(struct hora_cluster_config, field)
#define TEXT(k, f) {k, HORA_CFG_TEXT, F(f)}
#define INT(k, f, l, h) {k, HORA_CFG_INT, F(f), .lo = l, .hi = h}
#define SIZE(k, f, l, h) {k, HORA_CFG_SIZE, F(f), .lo = l, .hi = h}
#define BOOL(k, f) {k, HORA_CFG_BOOL, F(f)}
#define NAME(k, f, n) {k, HORA_CFG_NAME, F(f), .names = n}
#define FN(k, f) {k, HORA_CFG_FN, .fn = f}
#define KiB 1024.0
#define MiB (1024.0 * 1024)
#define GiB (1024.0 * 1024 * 1024)

/* Every key of the cluster, transport, membership and collectives sections
 * but those of a node (node_keys); the schema is in deploy/README.md. */
static const struct hora_cfg_key cluster_keys[] = {
	TEXT("cluster.name", name),
	FN("cluster.secret_file", set_secret_file),
	TEXT("cluster.launcher", launcher),
	NAME("cluster.bind", bind, binds),
	TEXT("cluster.ssh_command", ssh_command),
	{"cluster.port_base", HORA_CFG_INT, F(port_base), .lo = 1024, .hi = 60000,
	 .what = "a port in 1024..60000"},
	FN("cluster.seeds", set_seeds),
	INT("transport.sockets_per_peer", transport.sockets_per_peer, 1, 64),
	SIZE("transport.sndbuf_bytes", transport.sndbuf_bytes, 0, GiB),
	SIZE("transport.rcvbuf_bytes", transport.rcvbuf_bytes, 0, GiB),
	SIZE("transport.chunk_size", transport.chunk_bytes, 4 * KiB, GiB),
	SIZE("transport.max_frame_size", transport.max_frame_bytes, 4 * KiB, GiB),
	BOOL("transport.send_zc", transport.send_zc),
	BOOL("transport.crc", transport.crc),
	BOOL("transport.rcvlowat", transport.rcvlowat),
	INT("transport.handshake_timeout_ms", transport.handshake_timeout_ms, 1, 600000),
	INT("transport.io_timeout_ms", transport.io_timeout_ms, 0, 3600000),
	INT("transport.max_pending_handshakes", transport.max_pending_handshakes, 1, 65536),
	NAME("transport.shm", shm, shm_modes),
	INT("membership.probe_interval_ms", membership.probe_interval_ms, 10, 60000),
	INT("membership.ping_timeout_ms", membership.ping_timeout_ms, 1, 60000),
	INT("membership.suspect_timeout_ms", membership.suspect_timeout_ms, 10, 600000),
	INT("membership.indirect_probes", membership.indirect_probes, 0, 16),
	INT("membership.retransmit_mult", membership.retransmit_mult, 1, 16),
	INT("membership.min_members", membership.min_members, 1, HORA_SWIM_MAX_VIEW),
	INT("membership.join_timeout_ms", join_timeout_ms, 100, 3600000),
	BOOL("membership.refusal_proves_death", membership.refusal_proves_death),
	NAME("collectives.algorithm", coll.algorithm, algorithms),
	SIZE("collectives.small_bytes", coll.small_bytes, 0, GiB),
	SIZE("collectives.medium_bytes", coll.medium_bytes, 0, GiB),
	SIZE("collectives.segment_size", coll.segment_bytes, 4 * KiB, 64 * MiB),
	SIZE("collectives.slice_size", coll.slice_bytes, 64 * KiB, GiB),
	INT("collectives.spin_us", coll.spin_us, -1, 1000000),
	FN("collectives.hierarchical", set_hier),
};
#undef F
#define F(field) HORA_CFG_FIELD(struct hora_cluster_node, field)

/* the keys of cluster.nodes[i], relative to the node */
static const struct hora_cfg_key node_keys[] = {
	FN("host", set_host),
	TEXT("netns", netns),
	{"workers", HORA_CFG_INT, F(workers), .lo = 1, .hi = 4096, .what = "a positive integer"},
	{"gpus", HORA_CFG_REFUSED,
	 .what = "placing workers on GPUs is not available in this build (train.device: cuda "
		 "trains every worker on device 0); remove the key"},
};
#define N(t) (sizeof(t) / sizeof((t)[0]))

/* The table entry for key and the struct it writes into: c itself, or the
 * node of a "cluster.nodes[i]." key. NULL when there is no such key. */
static const struct hora_cfg_key *lookup(struct hora_cluster_config *c, const char *key, void **base,
					 struct hora_cluster_node **node)
{
	static const char nodes[] = "cluster.nodes[";
	*node = NULL;
	if (strncmp(key, nodes, sizeof(nodes) - 1)) {
		*base = c;
		return hora_cfg_key_find(cluster_keys, N(cluster_keys), key);
	}
	const char *p = key + sizeof(nodes) - 1;
	long i = 0;
	if (*p < '0' || *p > '9')
		return NULL;
	for (; *p >= '0' && *p <= '9' && i < HORA_CLUSTER_MAX_NODES; p++)
		i = i * 10 + (*p - '0');
	if (i >= HORA_CLUSTER_MAX_NODES || strncmp(p, "].", 2))
		return NULL;
	*node = &c->nodes[i];
	*base = *node;
	return hora_cfg_key_find(node_keys, N(node_keys), p + 2);
}

static int set_at(struct hora_cluster_config *c, const char *key, const char *v, int line, int col,
		  char *err, size_t errlen)
{
	void *base;
	struct hora_cluster_node *n;
	const struct hora_cfg_key *k = lookup(c, key, &base, &n);
	if (!k) {
		if (!strncmp(key, "cluster.nodes[", 14))
			return hora_cfg_bad(err, errlen, "unknown key '%s' (a node has host, workers and "
					    "netns; at most %d nodes)", key, HORA_CLUSTER_MAX_NODES);
		return hora_cfg_bad(err, errlen, "unknown key '%s'", key);
	}
	int rc = hora_cfg_key_set(k, base, key, v, line, col, err, errlen);
	if (!rc && n && n - c->nodes >= c->nnodes)
		c->nnodes = (int)(n - c->nodes) + 1;
	if (!rc && n && !n->line) { /* the node's position: its first key */
		n->line = line;
		n->col = col;
	}
	return rc;
}

static int walk_refused(void *cfg, const char *path, char *err, size_t errlen)
{
	void *base;
	struct hora_cluster_node *n;
	return hora_cfg_key_refused(lookup(cfg, path, &base, &n), path, err, errlen);
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

/* A job's view holds at most HORA_SWIM_MAX_VIEW workers (a view and its
 * agreement travel as one datagram, net/MEMBERSHIP.md): a file with more is
 * refused here, naming the node past the limit, never a first view that
 * does not form. */
static int check_size(const struct hora_cluster_config *c, char *err, size_t errlen)
{
	const int total = hora_cluster_size(c);
	int sum = 0;
	for (int i = 0; i < c->nnodes && total > HORA_SWIM_MAX_VIEW; i++) {
		const struct hora_cluster_node *n = &c->nodes[i];
		if ((sum += n->workers) <= HORA_SWIM_MAX_VIEW)
			continue;
		char at[32] = "";
		if (n->line)
			snprintf(at, sizeof(at), ":%d:%d", n->line, n->col);
		return hora_cfg_bad(err, errlen, "%s%s: cluster.nodes[%d].workers: the cluster has %d workers "
					"(%d up to this node), more than the %d a job holds (its membership "
					"view, agreed as one datagram)", c->file, at, i, total, sum,
				    HORA_SWIM_MAX_VIEW);
	}
	return 0;
}

int hora_cluster_load(struct hora_cluster_config *c, const char *path, char *err, size_t errlen)
{
	return hora_cluster_load_edit(c, path, NULL, NULL, err, errlen);
}

int hora_cluster_load_edit(struct hora_cluster_config *c, const char *path, hora_cluster_edit_fn edit,
			   void *arg, char *err, size_t errlen)
{
	static const char *const skip[] = {"train"};
	static const char *const lists[] = {"cluster.seeds"};
	static const char *const map_lists[] = {"cluster.nodes"};
	const bool slurm = c->slurm && c->slurm->on; /* nodes may come from the step */
	const struct hora_yaml_spec spec = {.set = walk_set, .refused = walk_refused, .skip = skip,
					    .nskip = 1, .lists = lists, .nlists = 1,
					    .map_lists = map_lists, .nmap_lists = 1,
					    .required_section = slurm ? NULL : "cluster"};
	struct hora_cluster_config tmp = *c;
	const bool has_file = path != NULL;
	if (!has_file && !slurm)
		return hora_cfg_bad(err, errlen, "no cluster file");
	snprintf(tmp.file, sizeof(tmp.file), "%s", has_file ? path : "(the Slurm step)");
	path = tmp.file; /* messages name it */
	int rc = has_file ? hora_yaml_walk(path, &spec, &tmp, err, errlen) : 0;
	if (!rc && edit)
		rc = edit(&tmp, arg, err, errlen);
	if (!rc && slurm && tmp.nnodes == 0)
		rc = hora_slurm_fill(&tmp, c->slurm, err, errlen);
	if (rc)
		return rc;
	if (tmp.nnodes == 0)
		return hora_cfg_bad(err, errlen, "%s: cluster.nodes is missing: list at least one node "
					"(host, workers)", path);
	for (int i = 0; i < tmp.nnodes; i++) {
		struct hora_cluster_node *n = &tmp.nodes[i];
		if (!n->line && !n->host[0] && !n->workers) /* a node of --set keys has no line */
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
	if ((rc = check_size(&tmp, err, errlen)))
		return rc;
	if (tmp.coll.hierarchical == HORA_HIER_ON && tmp.shm == HORA_SHM_OFF)
		return hora_cfg_bad(err, errlen, "%s:%d:%d: collectives.hierarchical: on needs transport.shm: "
					"auto (its stage within a host is shared memory)",
			   path, tmp.coll.hier_line, tmp.coll.hier_col);
	uint8_t key[HORA_NET_SECRET_MAX];
	char why[512];
	if (tmp.secret_file[0]) {
		if (hora_net_secret_load(tmp.secret_file, NULL, key, sizeof(key), why, sizeof(why), NULL,
					 0) < 0)
			return hora_cfg_bad(err, errlen, "%s:%d:%d: cluster.secret_file: %s", path, tmp.secret_line,
				   tmp.secret_col, why);
	} else if (hora_net_secret_load(NULL, tmp.secret_env, key, sizeof(key), why, sizeof(why),
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
