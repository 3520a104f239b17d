/* node.c - which ranks share a host (node ids over the authenticated TCP
 * link) and the checked Unix sockets between the ranks of one host
 * (node.h says why each step is there).
 */
#include "net/coll/node.h"
#include "net/util/clock.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ID_BYTES 64
static const uint8_t id_magic[4] = {'H', 'N', 'I', 'D'};

struct node_id {
	uint8_t boot[16];
	uint64_t netns, pidns;
	uint32_t pid, uid;
	uint8_t shm, hier;
	uint8_t nonce[NODE_NONCE];
};

/* the boot id's 32 hex digits as 16 bytes; random bytes when unreadable
 * (then this rank is a host of its own) */
static void boot_id(uint8_t out[16])
{
	char s[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f) {
		if (!fgets(s, sizeof(s), f))
			s[0] = 0;
		fclose(f);
	}
	size_t k = 0;
	for (const char *p = s; *p && k < 32; p++) {
		int v = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
		if (v < 0)
			continue;
		out[k / 2] = (uint8_t)(k % 2 ? out[k / 2] | v : v << 4);
		k++;
	}
	if (k < 32)
		randombytes_buf(out, 16);
}

/* a namespace's identity: its inode and device; unreadable: this pid's
 * own (then no other rank shares it) */
static uint64_t ns_id(const char *path)
{
	struct stat st;
	return stat(path, &st) ? (uint64_t)getpid() << 32 : (uint64_t)st.st_ino ^ ((uint64_t)st.st_dev << 40);
}

static void id_self(const struct hora_net_comm_cfg *cfg, const uint8_t *nonce, struct node_id *id)
{
	memset(id, 0, sizeof(*id));
	boot_id(id->boot);
	id->netns = ns_id("/proc/thread-self/ns/net");
	id->pidns = ns_id("/proc/thread-self/ns/pid");
	memcpy(id->nonce, nonce, NODE_NONCE);
	id->pid = (uint32_t)getpid();
	id->uid = (uint32_t)getuid();
	id->shm = (uint8_t)cfg->shm;
	id->hier = (uint8_t)cfg->hierarchical;
}

static void id_encode(uint8_t *b, const struct node_id *id)
{
	memcpy(b, id_magic, 4);
	memcpy(b + 4, id->boot, 16);
	memcpy(b + 20, &id->netns, 8);
	memcpy(b + 28, &id->pid, 4);
	memcpy(b + 32, &id->uid, 4);
	b[36] = id->shm;
	b[37] = id->hier;
	b[38] = b[39] = 0;
	memcpy(b + 40, &id->pidns, 8);
	memcpy(b + 48, id->nonce, NODE_NONCE);
}

static int id_decode(const uint8_t *b, struct node_id *id)
{
	if (memcmp(b, id_magic, 4))
		return -EPROTO;
	memcpy(id->boot, b + 4, 16);
	memcpy(&id->netns, b + 20, 8);
	memcpy(&id->pid, b + 28, 4);
	memcpy(&id->uid, b + 32, 4);
	id->shm = b[36];
	id->hier = b[37];
	memcpy(&id->pidns, b + 40, 8);
	memcpy(id->nonce, b + 48, NODE_NONCE);
	return 0;
}

/* post every receive and send, then wait for all of them */
static int ids_swap(struct hora_net_comm *c, uint8_t *all, char *err, size_t errlen)
{
	const struct hora_net_link_ops *o = c->link->ops;
	struct hora_net_link_req **rq = calloc((size_t)c->n * 2, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	int rc = 0;
	for (int i = 0; i < c->n && !rc; i++)
		if (i != c->rank &&
		    ((rc = o->post_recv(c->link, i, all + (size_t)i * ID_BYTES, ID_BYTES, NULL, NULL, &rq[2 * i])) ||
		     (rc = o->post_send(c->link, i, all + (size_t)c->rank * ID_BYTES, ID_BYTES, NULL, NULL,
					&rq[2 * i + 1]))))
			snprintf(err, errlen, "rank %d: sending its node id to rank %d: %s", c->rank, i, strerror(-rc));
	if (rc)
		o->close(c->link, -1); /* what was posted completes */
	for (int i = 0; i < 2 * c->n; i++) {
		char e[200];
		if (!rq[i])
			continue;
		int r = o->wait(rq[i], e, sizeof(e));
		if (r && !rc) {
			rc = r;
			snprintf(err, errlen, "rank %d: node id of rank %d: %s", c->rank, i / 2, e);
			o->close(c->link, -1);
		}
	}
	free(rq);
	return rc;
}

/* One host for the shared-memory paths: the same boot, network namespace
 * (the abstract sockets), pid namespace (SO_PEERCRED's pids, the pidfds)
 * and uid (the sockets' credentials). Containers sharing the host's
 * network but not its pids are hosts of their own: TCP between them. */
static bool same_host(const struct node_id *a, const struct node_id *b)
{
	return !memcmp(a->boot, b->boot, 16) && a->netns == b->netns && a->pidns == b->pidns && a->uid == b->uid;
}

/* hosts numbered by their lowest rank */
static int map_build(struct hora_net_comm *c, const struct node_id *ids, struct node_map *m)
{
	m->host_of = calloc((size_t)c->n, sizeof(int));
	m->host_size = calloc((size_t)c->n, sizeof(int));
	m->local = calloc((size_t)c->n, sizeof(int));
	m->lpid = calloc((size_t)c->n, sizeof(pid_t));
	m->lnonce = calloc((size_t)c->n, NODE_NONCE);
	if (!m->host_of || !m->host_size || !m->local || !m->lpid || !m->lnonce)
		return -ENOMEM;
	int *first = m->local; /* scratch: the first rank of each host */
	for (int i = 0; i < c->n; i++) {
		int h = 0;
		while (h < m->nhosts && !same_host(&ids[first[h]], &ids[i]))
			h++;
		if (h == m->nhosts)
			first[m->nhosts++] = i;
		m->host_of[i] = h;
		m->host_size[h]++;
	}
	m->host = m->host_of[c->rank];
	m->nlocal = 0;
	m->uniform = true;
	for (int i = 0; i < c->n; i++)
		if (m->host_of[i] == m->host) {
			if (i == c->rank)
				m->lrank = m->nlocal;
			m->lpid[m->nlocal] = (pid_t)ids[i].pid;
			memcpy(m->lnonce + (size_t)m->nlocal * NODE_NONCE, ids[i].nonce, NODE_NONCE);
			m->local[m->nlocal++] = i;
		}
	for (int h = 0; h < m->nhosts; h++)
		m->uniform = m->uniform && m->host_size[h] == m->nlocal;
	return 0;
}

int node_exchange(struct hora_net_comm *c, const uint8_t *nonce, struct node_map *m, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	uint8_t *all = calloc((size_t)c->n, ID_BYTES);
	struct node_id *ids = calloc((size_t)c->n, sizeof(*ids));
	int rc = all && ids ? 0 : -ENOMEM;
	if (!rc) {
		id_self(&c->cfg, nonce, &ids[c->rank]);
		id_encode(all + (size_t)c->rank * ID_BYTES, &ids[c->rank]);
		rc = ids_swap(c, all, err, errlen);
	}
	for (int i = 0; i < c->n && !rc; i++) {
		if (i == c->rank)
			continue;
		if (id_decode(all + (size_t)i * ID_BYTES, &ids[i]))
			rc = -EPROTO, snprintf(err, errlen, "rank %d: rank %d sent no node id", c->rank, i);
		else if (ids[i].shm != ids[c->rank].shm || ids[i].hier != ids[c->rank].hier)
			rc = -EINVAL,
			snprintf(err, errlen,
				 "rank %d: rank %d has other settings (transport.shm %s, collectives.hierarchical %d) "
				 "than this rank (%s, %d); every rank must have the same",
				 c->rank, i, ids[i].shm ? "off" : "auto", ids[i].hier, ids[c->rank].shm ? "off" : "auto",
				 ids[c->rank].hier);
	}
	if (!rc && (rc = map_build(c, ids, m)) == -ENOMEM)
		snprintf(err, errlen, "rank %d: out of memory for the node map", c->rank);
	free(all);
	free(ids);
	if (rc)
		node_map_free(m);
	return rc;
}

void node_map_free(struct node_map *m)
{
	free(m->host_of);
	free(m->host_size);
	free(m->local);
	free(m->lpid);
	free(m->lnonce);
	memset(m, 0, sizeof(*m));
}

void node_describe(const struct node_map *m, char *buf, size_t len)
{
	if (m->uniform || !m->nhosts) {
		snprintf(buf, len, "%d host%s x %d rank%s", m->nhosts ? m->nhosts : 1, m->nhosts > 1 ? "s" : "",
			 m->nlocal ? m->nlocal : 1, m->nlocal > 1 ? "s" : "");
		return;
	}
	int k = snprintf(buf, len, "%d hosts (", m->nhosts);
	for (int h = 0; h < m->nhosts && k > 0 && (size_t)k < len; h++)
		k += snprintf(buf + k, len - (size_t)k, "%s%d", h ? ", " : "", m->host_size[h]);
	if (k > 0 && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, " ranks)");
}
