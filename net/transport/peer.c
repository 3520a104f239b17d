/* peer.c - peers (K authenticated sockets to one worker) and requests.
 *
 * A peer numbers its messages: the n-th isend is message n, matched by the
 * n-th irecv on the other side. Sends are cut into frames (chunk_bytes) and
 * dealt round-robin to the stripes; receives complete when all their bytes
 * have landed, whatever stripe carried them.
 *
 * Failure: the first error breaks the peer (status + message), its sockets
 * are shut down, and its pending requests finish with that error only once
 * every socket's ops have left the kernel, so no buffer is written after its
 * request returned. Requests on a broken peer fail at once.
 */
#include "net/transport/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


/* ---- requests ------------------------------------------------------------------ */

static struct hora_net_req *req_new(enum req_kind kind, struct hora_net_peer *p, void *buf,
				    size_t len, hora_net_done_fn cb, void *arg)
{
	struct hora_net_req *r = NULL;
	if (cb && p && hora_net_on_loop(p->loop) && p->loop->req_cache) { /* the cache is the comm thread's */
		r = p->loop->req_cache;
		p->loop->req_cache = r->next;
		p->loop->req_cache_n--;
		memset(r, 0, offsetof(struct hora_net_req, lock));
	} else {
		r = calloc(1, sizeof(*r));
	}
	if (!r)
		return NULL;
	r->kind = kind;
	r->peer = p;
	r->buf = buf;
	r->len = len;
	r->cb = cb;
	r->arg = arg;
	if (!cb) {
		pthread_mutex_init(&r->lock, NULL);
		pthread_cond_init(&r->cond, NULL);
	}
	return r;
}

static void req_free(struct hora_net_req *r)
{
	if (!r->cb) {
		pthread_mutex_destroy(&r->lock);
		pthread_cond_destroy(&r->cond);
	} else if (r->peer && hora_net_on_loop(r->peer->loop) && r->peer->loop->req_cache_n < 256) {
		struct hora_net_loop *loop = r->peer->loop;
		r->next = loop->req_cache;
		loop->req_cache = r;
		loop->req_cache_n++;
		return;
	}
	free(r);
}

void hora_net_req_finish(struct hora_net_req *r, int status, const char *err)
{
	if (r->cb) {
		r->cb(r->arg, status, err ? err : "");
		req_free(r);
		return;
	}
	pthread_mutex_lock(&r->lock);
	r->status = status;
	snprintf(r->err, sizeof(r->err), "%s", err ? err : "");
	r->done = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

int hora_net_wait(struct hora_net_req *r, char *err, size_t errlen)
{
	pthread_mutex_lock(&r->lock);
	while (!r->done)
		pthread_cond_wait(&r->cond, &r->lock);
	pthread_mutex_unlock(&r->lock);
	int st = r->status;
	if (err && errlen)
		snprintf(err, errlen, "%s", r->err);
	req_free(r);
	return st;
}

/* A request another thread waits on while the comm thread runs cmd; its
 * buf, when result is given, is what the command produced. */
static int sync_cmd(struct hora_net_loop *loop, struct cmd *c, struct hora_net_req *r, char *err,
		    size_t errlen, void **result)
{
	c->req = r;
	int rc = hora_net_post(loop, c);
	if (rc) {
		req_free(r);
		snprintf(err, errlen, "transport loop is shut down");
		return rc;
	}
	pthread_mutex_lock(&r->lock);
	while (!r->done)
		pthread_cond_wait(&r->cond, &r->lock);
	pthread_mutex_unlock(&r->lock);
	if (result)
		*result = r->buf;
	return hora_net_wait(r, err, errlen);
}

struct hora_net_req *hora_net_sync_req(void)
{
	return req_new(REQ_SYNC, NULL, NULL, 0, NULL, NULL);
}

int hora_net_sync_wait(struct hora_net_loop *loop, struct cmd *c, struct hora_net_req *r, char *err,
		       size_t errlen)
{
	return sync_cmd(loop, c, r, err, errlen, NULL);
}

/* ---- peers ---------------------------------------------------------------------- */

static struct hora_net_peer *peer_new(struct hora_net_loop *loop, int nconns)
{
	struct hora_net_peer *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->conns = calloc((size_t)nconns, sizeof(*p->conns));
	if (!p->conns || (loop->npeers == loop->cap_peers &&
			  !(loop->all_peers = realloc(loop->all_peers,
						      sizeof(*loop->all_peers) *
							      (size_t)(loop->cap_peers = loop->cap_peers * 2 + 8))))) {
		free(p->conns);
		free(p);
		return NULL;
	}
	loop->all_peers[loop->npeers++] = p;
	p->loop = loop;
	p->nconns = nconns;
	p->created_ns = p->idle_since_ns = hora_clock_ns();
	return p;
}

static void peer_free(struct hora_net_peer *p)
{
	struct hora_net_loop *loop = p->loop;
	for (int i = 0; i < loop->npeers; i++)
		if (loop->all_peers[i] == p) {
			loop->all_peers[i] = loop->all_peers[--loop->npeers];
			break;
		}
	free(p->conns);
	free(p);
}

static int alive(const struct hora_net_peer *p)
{
	int n = 0;
	for (int i = 0; i < p->nconns; i++)
		n += p->conns[i] != NULL;
	return n;
}

const char *hora_net_peer_name(const struct hora_net_peer *p)
{
	return p->name;
}

uint32_t hora_net_peer_node(const struct hora_net_peer *p)
{
	return p->node;
}

struct status_call {
	struct hora_net_peer *p;
	int status;
};

static void status_on_loop(void *arg)
{
	struct status_call *s = arg;
	s->status = s->p->status;
}

int hora_net_peer_status(struct hora_net_peer *peer)
{
	struct status_call s = {.p = peer};
	const int rc = hora_net_loop_call(peer->loop, status_on_loop, &s);
	return rc ? rc : s.status;
}

void hora_net_peer_fail(struct hora_net_peer *p, int status, const char *fmt, ...)
{
	if (!p->status) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(p->err, sizeof(p->err), fmt, ap);
		va_end(ap);
		p->status = status ? status : -EIO;
	}
	/* shutting down the last socket may free p: work from a copy */
	struct conn *cs[64];
	int n = p->nconns;
	memcpy(cs, p->conns, sizeof(*cs) * (size_t)n);
	for (int i = 0; i < n; i++)
		if (cs[i])
			hora_net_conn_shutdown(cs[i]);
}

static void fail_all(struct hora_net_peer *p)
{
	while (p->recvq) {
		struct hora_net_req *r = p->recvq;
		p->recvq = r->next;
		hora_net_req_finish(r, p->status, p->err);
	}
	p->recvq_tail = NULL;
	while (p->sendq) {
		struct hora_net_req *r = p->sendq;
		p->sendq = r->next;
		hora_net_req_finish(r, p->status, p->err);
	}
	p->sendq_tail = NULL;
}

void hora_net_peer_conn_gone(struct hora_net_peer *p, struct conn *c)
{
	for (int i = 0; i < p->nconns; i++)
		if (p->conns[i] == c)
			p->conns[i] = NULL;
	if (alive(p))
		return;
	/* every socket is closed and out of the kernel: requests may finish now */
	if (!p->status) {
		if (p->closing)
			snprintf(p->err, sizeof(p->err), "connection to %s closed locally", p->name);
		else
			snprintf(p->err, sizeof(p->err), "peer %s closed the connection", p->name);
		p->status = p->closing ? -ECANCELED : -ECONNRESET;
	}
	fail_all(p);
	struct hora_net_loop *loop = p->loop;
	if (p->connect_req) { /* client, never handed out */
		hora_net_req_finish(p->connect_req, p->status, p->err);
		peer_free(p);
		return;
	}
	if (p->nready < p->nconns) { /* server, stripes never all arrived */
		struct hora_net_peer **pp = &loop->pending;
		while (*pp && *pp != p)
			pp = &(*pp)->next;
		if (*pp)
			*pp = p->next;
		peer_free(p);
		return;
	}
	if (p->closing) {
		hora_net_req_finish(p->close_req, 0, NULL);
		peer_free(p);
	}
	/* otherwise the user still holds p: freed by hora_net_peer_close */
}

void hora_net_peer_conn_ready(struct hora_net_loop *loop, struct conn *c)
{
	if (!c->server) {
		struct hora_net_peer *p = c->peer;
		p->node = c->hs.peer_node;
		if (++p->nready == p->nconns) {
			struct hora_net_req *r = p->connect_req;
			p->connect_req = NULL;
			r->buf = (uint8_t *)p;
			loop->stats.peers_ready++;
			hora_net_req_finish(r, 0, NULL);
		}
		return;
	}
	struct hora_net_peer *p = loop->pending;
	while (p && !(p->session == c->hs.session && p->node == c->hs.peer_node))
		p = p->next;
	if (!p) {
		p = peer_new(loop, c->hs.nstripes);
		if (!p) {
			hora_net_conn_shutdown(c);
			return;
		}
		p->session = c->hs.session;
		p->node = c->hs.peer_node;
		snprintf(p->name, sizeof(p->name), "%s", c->name);
		p->next = loop->pending;
		loop->pending = p;
	}
	if (c->hs.nstripes != p->nconns || p->conns[c->hs.stripe]) {
		loop->stats.refused++;
		hora_net_refuse_log(loop, "refused %s: stripe %u of %u does not fit session %llx",
				    c->name, c->hs.stripe, c->hs.nstripes,
				    (unsigned long long)p->session);
		hora_net_conn_shutdown(c);
		return;
	}
	p->conns[c->hs.stripe] = c;
	c->peer = p;
	c->stripe = c->hs.stripe;
	if (++p->nready < p->nconns)
		return;
	struct hora_net_peer **pp = &loop->pending;
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	p->next = NULL;
	loop->stats.peers_ready++;
	pthread_mutex_lock(&loop->qlock);
	if (loop->accepted_tail)
		loop->accepted_tail->next = p;
	else
		loop->accepted = p;
	loop->accepted_tail = p;
	pthread_cond_broadcast(&loop->qcond);
	pthread_mutex_unlock(&loop->qlock);
}

void hora_net_peer_tick(struct hora_net_peer *p, int64_t now)
{
	const struct hora_net_opts *o = &p->loop->o;
	if (p->status || p->closing)
		return;
	if (p->nready < p->nconns && !p->connect_req &&
	    now - p->created_ns > (int64_t)o->handshake_timeout_ms * 1000000) {
		hora_net_refuse_log(p->loop, "dropping %s: only %d of %d stripes arrived", p->name,
				    p->nready, p->nconns);
		hora_net_peer_fail(p, -ETIMEDOUT, "only %d of %d stripes arrived", p->nready,
				   p->nconns);
		return;
	}
	if (p->progress != p->progress_seen || !(p->recvq || p->sendq)) {
		p->progress_seen = p->progress;
		p->idle_since_ns = now;
		return;
	}
	if (o->io_timeout_ms > 0 && now - p->idle_since_ns > (int64_t)o->io_timeout_ms * 1000000)
		hora_net_peer_fail(p, -ETIMEDOUT, "no progress from peer %s for %d ms", p->name,
				   o->io_timeout_ms);
}

/* ---- connect ------------------------------------------------------------------- */

void hora_net_client_connect(struct hora_net_loop *loop, struct cmd *cmd)
{
	struct hora_net_req *r = cmd->req;
	int k = loop->o.sockets_per_peer;
	struct hora_net_peer *p = peer_new(loop, k);
	if (!p) {
		hora_net_req_finish(r, -ENOMEM, "out of memory");
		return;
	}
	if (getrandom(&p->session, sizeof(p->session), 0) != sizeof(p->session))
		p->session = (uint64_t)hora_clock_ns() ^ (uint64_t)getpid() << 32;
	p->connect_req = r;
	char tmp[HORA_NET_NAME] = "";
	int64_t deadline = hora_clock_ns() + (int64_t)cmd->timeout_ms * 1000000;
	for (int i = 0; i < k; i++) {
		int fd = socket(cmd->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct conn *c = fd < 0 ? NULL : hora_net_conn_new(loop, fd, false, &cmd->addr,
								     cmd->addrlen);
		if (!c) {
			if (fd >= 0)
				close(fd);
			hora_net_peer_fail(p, -ENOMEM, "cannot create socket %d of %d", i, k);
			if (!alive(p)) { /* nothing in flight: finish here */
				p->conns[0] = NULL;
				hora_net_req_finish(r, -ENOMEM, p->err);
				peer_free(p);
			}
			return;
		}
		c->peer = p;
		c->stripe = i;
		c->deadline_ns = c->connect_deadline_ns = deadline;
		p->conns[i] = c;
		snprintf(tmp, sizeof(tmp), "%s", c->name);
		hora_net_conn_start_connect(c);
	}
	snprintf(p->name, sizeof(p->name), "%s", tmp);
}

/* A command carrying an address, and the request its caller waits on. */
static int addr_cmd(enum cmd_kind kind, const char *host, uint16_t port, struct cmd **cp,
		    struct hora_net_req **rp, char *err, size_t errlen)
{
	struct cmd *c = calloc(1, sizeof(*c));
	struct hora_net_req *r = req_new(REQ_SYNC, NULL, NULL, 0, NULL, NULL);
	if (!c || !r) {
		free(c);
		if (r)
			req_free(r);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (hora_net_parse_addr(host, port, &c->addr, &c->addrlen)) {
		free(c);
		req_free(r);
		snprintf(err, errlen, "'%s' is not an IPv4 or IPv6 address", host);
		return -EINVAL;
	}
	c->kind = kind;
	*cp = c;
	*rp = r;
	return 0;
}

int hora_net_connect(struct hora_net_loop *loop, const char *host, uint16_t port, int timeout_ms,
		     struct hora_net_peer **out, char *err, size_t errlen)
{
	struct cmd *c;
	struct hora_net_req *r;
	*out = NULL;
	int rc = addr_cmd(CMD_CONNECT, host, port, &c, &r, err, errlen);
	if (rc)
		return rc;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
	void *peer = NULL; /* the request's buf carries the peer back */
	rc = sync_cmd(loop, c, r, err, errlen, &peer);
	if (!rc)
		*out = peer;
	return rc;
}

int hora_net_listen(struct hora_net_loop *loop, const char *host, uint16_t port, uint16_t *bound,
		    char *err, size_t errlen)
{
	struct cmd *c;
	struct hora_net_req *r;
	uint16_t b = 0;
	int rc = addr_cmd(CMD_LISTEN, host, port, &c, &r, err, errlen);
	if (rc)
		return rc;
	c->bound = &b;
	rc = sync_cmd(loop, c, r, err, errlen, NULL);
	if (!rc && bound)
		*bound = b;
	return rc;
}

int hora_net_accept(struct hora_net_loop *loop, int timeout_ms, struct hora_net_peer **out,
		    char *err, size_t errlen)
{
	struct timespec ts;
	hora_net_deadline(&ts, timeout_ms);
	int rc = 0;
	*out = NULL;
	pthread_mutex_lock(&loop->qlock);
	while (!loop->accepted && !loop->dead && rc == 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&loop->qcond, &loop->qlock);
		else
			rc = pthread_cond_timedwait(&loop->qcond, &loop->qlock, &ts);
	}
	if (loop->accepted) {
		*out = loop->accepted;
		loop->accepted = (*out)->next;
		if (!loop->accepted)
			loop->accepted_tail = NULL;
		(*out)->next = NULL;
		rc = 0;
	} else if (loop->dead) {
		rc = -ESHUTDOWN;
		snprintf(err, errlen, "transport loop is shut down");
	} else {
		rc = -ETIMEDOUT;
		if (loop->last_hs_fail[0])
			snprintf(err, errlen, "no peer connected within %d ms; the last connection refused "
					      "(%.1f s ago): %s", timeout_ms,
				 1e-9 * (double)(hora_clock_ns() - loop->last_hs_fail_ns),
				 loop->last_hs_fail);
		else
			snprintf(err, errlen, "no peer connected within %d ms", timeout_ms);
	}
	pthread_mutex_unlock(&loop->qlock);
	return rc;
}

/* ---- data ---------------------------------------------------------------------- */

static void enqueue(struct conn *c, struct frame *f)
{
	f->next = NULL;
	if (c->txq_tail)
		c->txq_tail->next = f;
	else
		c->txq = f;
	c->txq_tail = f;
}

/* A broken or closing peer takes no new request: finish it at once. */
static bool refuse_if_unusable(struct hora_net_peer *p, struct hora_net_req *r)
{
	if (!p->status && !p->closing)
		return false;
	hora_net_req_finish(r, p->status ? p->status : -ECANCELED, p->status ? p->err : "peer is closing");
	return true;
}

void hora_net_peer_do_send(struct hora_net_req *r)
{
	struct hora_net_peer *p = r->peer;
	struct hora_net_loop *loop = p->loop;
	if (refuse_if_unusable(p, r))
		return;
	/* The remote sent CLOSE: it reads nothing more, and its stripes go
	 * one by one (one parked on a frame we have not taken yet stays). */
	bool gone = p->remote_closed;
	for (int s = 0; s < p->nconns; s++)
		gone |= !p->conns[s];
	if (gone) {
		char why[160];
		snprintf(why, sizeof(why), "peer %s has closed the connection", p->name);
		hora_net_req_finish(r, -ECONNRESET, why);
		return;
	}
	r->seq = p->send_seq++;
	size_t chunk = loop->o.chunk_bytes;
	size_t nframes = r->len ? (r->len + chunk - 1) / chunk : 1;
	if (nframes > 1 && nframes < (size_t)p->nconns) /* spread even mid-size messages */
		chunk = (r->len + (size_t)p->nconns - 1) / (size_t)p->nconns,
		nframes = (r->len + chunk - 1) / chunk;
	r->frames_left = (int)nframes;
	if (p->sendq_tail)
		p->sendq_tail->next = r;
	else
		p->sendq = r;
	p->sendq_tail = r;
	if (!p->recvq && p->sendq == r)
		p->progress++;
	uint64_t mask = 0;
	for (size_t i = 0; i < nframes; i++) {
		struct frame *f = hora_net_frame_get(loop);
		if (!f) {
			hora_net_peer_fail(p, -ENOMEM, "out of memory queueing message %llu",
					   (unsigned long long)r->seq);
			return;
		}
		size_t off = i * chunk, len = r->len - off < chunk ? r->len - off : chunk;
		struct hora_net_hdr h = {
			.magic = HORA_NET_MAGIC,
			.version = HORA_NET_VERSION,
			.type = HORA_NET_T_DATA,
			.view = loop->o.view,
			.seq = r->seq,
			.msg_len = r->len,
			.offset = off,
			.length = len,
		};
		if (loop->o.crc) {
			h.flags |= HORA_NET_F_CRC;
			h.crc32c = hora_net_crc32c(0, r->buf + off, len);
		}
		hora_net_hdr_encode(&h, f->hdr);
		f->req = r;
		f->payload = r->buf + off;
		f->len = len;
		if (len <= HORA_NET_INLINE) { /* one contiguous buffer: a plain send */
			memcpy(f->inl, f->payload, len);
			f->inlined = true;
		}
		int s = p->next_stripe;
		p->next_stripe = (p->next_stripe + 1) % p->nconns;
		enqueue(p->conns[s], f);
		mask |= 1ull << s;
	}
	r->queued_all = true;
	for (int s = 0; s < p->nconns; s++)
		if (mask & (1ull << s))
			hora_net_conn_kick_tx(p->conns[s]);
}

/* Remove r from a singly linked queue with a tail pointer. */
static void unlink_req(struct hora_net_req **head, struct hora_net_req **tail, struct hora_net_req *r)
{
	struct hora_net_req **pp = head, *prev = NULL;
	while (*pp && *pp != r) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (*pp) {
		*pp = r->next;
		if (*tail == r)
			*tail = prev;
	}
}

void hora_net_peer_send_frame_done(struct hora_net_req *r)
{
	if (--r->frames_left > 0)
		return;
	struct hora_net_peer *p = r->peer;
	unlink_req(&p->sendq, &p->sendq_tail, r);
	p->progress++;
	hora_net_req_finish(r, 0, NULL);
}

void hora_net_peer_do_recv(struct hora_net_req *r)
{
	struct hora_net_peer *p = r->peer;
	if (refuse_if_unusable(p, r))
		return;
	r->seq = p->recv_seq++;
	if (!p->recvq && !p->sendq)
		p->progress++;
	if (p->recvq_tail)
		p->recvq_tail->next = r;
	else
		p->recvq = r;
	p->recvq_tail = r;
	/* resuming may complete r (and its waiter free it): keep its number */
	const uint64_t seq = r->seq;
	for (int i = 0; i < p->nconns && !p->status; i++)
		if (p->conns[i] && p->conns[i]->rx == RX_PARKED && p->conns[i]->cur.seq == seq)
			hora_net_conn_resume_rx(p->conns[i]);
}

struct hora_net_req *hora_net_peer_find_recv(struct hora_net_peer *p, uint64_t seq)
{
	for (struct hora_net_req *r = p->recvq; r; r = r->next)
		if (r->seq == seq)
			return r;
	return NULL;
}

void hora_net_peer_recv_complete(struct hora_net_peer *p, struct hora_net_req *r)
{
	unlink_req(&p->recvq, &p->recvq_tail, r);
	hora_net_req_finish(r, 0, NULL);
}

static int post_data(struct hora_net_peer *p, enum cmd_kind kind, void *buf, size_t len,
		     hora_net_done_fn cb, void *arg, struct hora_net_req **out)
{
	if ((cb == NULL) == (out == NULL))
		return -EINVAL;
	if (len > HORA_NET_MAX_MSG_BYTES)
		return -EMSGSIZE;
	struct hora_net_req *r = req_new(kind == CMD_SEND ? REQ_SEND : REQ_RECV, p, buf, len, cb, arg);
	struct cmd *c = calloc(1, sizeof(*c));
	if (!r || !c) {
		free(c);
		if (r)
			req_free(r);
		return -ENOMEM;
	}
	c->kind = kind;
	c->req = r;
	if (out)
		*out = r;
	if (hora_net_on_loop(p->loop)) { /* from a callback: run inline */
		free(c);
		if (kind == CMD_SEND)
			hora_net_peer_do_send(r);
		else
			hora_net_peer_do_recv(r);
		return 0;
	}
	int rc = hora_net_post(p->loop, c);
	if (rc) {
		if (out)
			*out = NULL;
		req_free(r);
	}
	return rc;
}

int hora_net_isend(struct hora_net_peer *p, const void *buf, size_t len, hora_net_done_fn cb,
		   void *arg, struct hora_net_req **req)
{
	return post_data(p, CMD_SEND, (void *)buf, len, cb, arg, req);
}

int hora_net_irecv(struct hora_net_peer *p, void *buf, size_t len, hora_net_done_fn cb, void *arg,
		   struct hora_net_req **req)
{
	return post_data(p, CMD_RECV, buf, len, cb, arg, req);
}

/* ---- close ----------------------------------------------------------------------- */

void hora_net_peer_do_close(struct hora_net_peer *p, struct hora_net_req *sync)
{
	p->closing = true;
	p->close_req = sync;
	if (!alive(p)) {
		fail_all(p);
		hora_net_req_finish(sync, 0, NULL);
		peer_free(p);
		return;
	}
	/* shutting down the last socket may free p: work from a copy */
	struct conn *cs[64];
	int n = p->nconns, broken = p->status != 0;
	uint32_t view = p->loop->o.view;
	struct hora_net_loop *loop = p->loop;
	memcpy(cs, p->conns, sizeof(*cs) * (size_t)n);
	for (int i = 0; i < n; i++) {
		struct conn *c = cs[i];
		if (!c)
			continue;
		if (broken || c->state != C_READY) {
			hora_net_conn_shutdown(c);
			continue;
		}
		struct frame *f = hora_net_frame_get(loop);
		if (!f) {
			hora_net_conn_shutdown(c);
			continue;
		}
		struct hora_net_hdr h = {.magic = HORA_NET_MAGIC, .version = HORA_NET_VERSION,
					 .type = HORA_NET_T_CLOSE, .view = view};
		hora_net_hdr_encode(&h, f->hdr);
		enqueue(c, f);
		hora_net_conn_kick_tx(c); /* shuts the conn down once the queue drains */
	}
}

void hora_net_peer_do_abort(struct hora_net_peer *p, struct cmd *c)
{
	hora_net_peer_fail(p, -ECANCELED, "%s", (const char *)c->arg);
	hora_net_req_finish(c->req, 0, NULL);
}

/* Run a CLOSE or ABORT command for p on the comm thread and wait for it. */
static void peer_sync_cmd(struct hora_net_peer *p, enum cmd_kind kind, const char *why)
{
	if (!p)
		return;
	struct cmd *c = calloc(1, sizeof(*c));
	struct hora_net_req *r = req_new(REQ_SYNC, NULL, NULL, 0, NULL, NULL);
	if (!c || !r) {
		free(c);
		if (r)
			req_free(r);
		return;
	}
	c->kind = kind;
	c->peer = p;
	c->arg = (void *)why;
	char err[256];
	sync_cmd(p->loop, c, r, err, sizeof(err), NULL);
}

void hora_net_peer_abort(struct hora_net_peer *p, const char *why)
{
	peer_sync_cmd(p, CMD_ABORT, why);
}

void hora_net_peer_close(struct hora_net_peer *p)
{
	peer_sync_cmd(p, CMD_CLOSE, NULL);
}
