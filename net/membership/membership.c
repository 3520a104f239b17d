/* membership.c - runs the SWIM state machine (swim.c) on a loop's comm
 * thread: one UDP socket with a recvmsg op always armed, one timeout op at
 * the machine's next deadline, datagrams sent with non-blocking sendto(2).
 * After each event the installed view is published, under qlock, for other
 * threads (hora_net_membership_view/wait).
 */
#include "net/transport/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int hora_net_post(struct hora_net_loop *loop, struct cmd *c);

struct hora_net_membership_start {
	struct hora_swim_cfg cfg;
	struct sockaddr_in addr;
	uint16_t *bound;
	struct hora_swim_addr *seeds;
	int nseeds;
};

/* The swim clock (net/swim.h): monotonic, offset once to the wall clock so
 * that members on hosts with synchronised clocks share period boundaries. */
static int64_t clock_offset_ns;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void clock_init(void)
{
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_offset_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - hora_net_now_ns();
}

static int64_t now_ms(void)
{
	pthread_once(&clock_once, clock_init);
	return (hora_net_now_ns() + clock_offset_ns) / 1000000;
}

static void flush(struct hora_net_loop *loop)
{
	struct hora_swim_out o;
	while (hora_swim_pop(loop->swim, &o)) {
		struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(o.to.port),
					 .sin_addr.s_addr = o.to.ip};
		/* UDP: a full socket buffer drops the datagram, as the network may */
		sendto(loop->udp_fd, o.buf, o.len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&to,
		       sizeof(to));
	}
	struct hora_swim_view v;
	int rank;
	bool paused;
	char why[128];
	hora_swim_view_get(loop->swim, &v, &rank, &paused, why, sizeof(why));
	struct hora_swim_member mem[HORA_SWIM_MAX_MEMBERS];
	int nm = hora_swim_members(loop->swim, mem, HORA_SWIM_MAX_MEMBERS), alive = 0;
	for (int i = 0; i < nm; i++)
		alive += mem[i].state == HORA_SWIM_ALIVE || mem[i].state == HORA_SWIM_SUSPECT;
	pthread_mutex_lock(&loop->qlock);
	bool changed = v.id != loop->mview.id || paused != loop->mpaused ||
		       hora_swim_joined(loop->swim) != loop->mjoined || alive != loop->malive;
	loop->malive = alive;
	loop->mview = v;
	loop->mrank = rank;
	loop->mpaused = paused;
	loop->mjoined = hora_swim_joined(loop->swim);
	snprintf(loop->mwhy, sizeof(loop->mwhy), "%s", why);
	hora_swim_stats_get(loop->swim, &loop->mstats);
	loop->nmstatus = v.n;
	for (int i = 0; i < v.n; i++) {
		loop->mstatus[i].uid = v.uids[i];
		if (hora_swim_status_of(loop->swim, v.uids[i], &loop->mstatus[i].st, &loop->mstatus[i].at))
			loop->mstatus[i].at = 0;
	}
	if (changed)
		pthread_cond_broadcast(&loop->qcond);
	pthread_mutex_unlock(&loop->qlock);
}

static void arm_recv(struct hora_net_loop *loop)
{
	struct io_uring_sqe *sqe = hora_net_sqe(loop);
	loop->udp_iov.iov_base = loop->udp_buf;
	loop->udp_iov.iov_len = sizeof(loop->udp_buf);
	memset(&loop->udp_msg, 0, sizeof(loop->udp_msg));
	loop->udp_msg.msg_name = &loop->udp_from;
	loop->udp_msg.msg_namelen = sizeof(loop->udp_from);
	loop->udp_msg.msg_iov = &loop->udp_iov;
	loop->udp_msg.msg_iovlen = 1;
	io_uring_prep_recvmsg(sqe, loop->udp_fd, &loop->udp_msg, 0);
	io_uring_sqe_set_data(sqe, &loop->udp_op);
}

static void arm_timer(struct hora_net_loop *loop)
{
	int ms = hora_swim_next_ms(loop->swim, now_ms());
	struct io_uring_sqe *sqe = hora_net_sqe(loop);
	loop->swim_ts.tv_sec = ms / 1000;
	loop->swim_ts.tv_nsec = (long long)(ms % 1000) * 1000000;
	io_uring_prep_timeout(sqe, &loop->swim_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &loop->swim_op);
}

static void on_udp(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	(void)op;
	if (loop->stopping)
		return;
	if (cqe->res > 0 && loop->udp_from.sin_family == AF_INET) {
		struct hora_swim_addr from = {loop->udp_from.sin_addr.s_addr,
					      ntohs(loop->udp_from.sin_port)};
		uint64_t bad = loop->mstats.bad_mac;
		hora_swim_input(loop->swim, now_ms(), from, loop->udp_buf, (size_t)cqe->res);
		struct hora_swim_stats st;
		hora_swim_stats_get(loop->swim, &st);
		if (st.bad_mac > bad) {
			char ip[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &loop->udp_from.sin_addr, ip, sizeof(ip));
			hora_net_refuse_log(loop, "membership: datagram from %s:%u failed authentication "
					    "(wrong cluster secret?)", ip, ntohs(loop->udp_from.sin_port));
		}
		hora_swim_tick(loop->swim, now_ms());
		flush(loop);
	}
	arm_recv(loop);
}

static void on_swim_timer(struct hora_net_loop *loop, struct op *op, const struct io_uring_cqe *cqe)
{
	(void)op;
	(void)cqe;
	if (loop->stopping)
		return;
	hora_swim_tick(loop->swim, now_ms());
	flush(loop);
	arm_timer(loop);
}

void hora_net_membership_run(struct hora_net_loop *loop, struct cmd *c)
{
	struct hora_net_membership_start *ms = c->arg;
	struct hora_net_req *r = c->req;
	char msg[192];
	if (loop->swim) {
		hora_net_req_finish(r, -EALREADY, "membership already running on this loop");
		return;
	}
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ms->addr, sizeof(ms->addr))) {
		int e = errno;
		snprintf(msg, sizeof(msg), "membership: bind UDP %s:%u: %s", inet_ntoa(ms->addr.sin_addr),
			 ntohs(ms->addr.sin_port), strerror(e));
		if (fd >= 0)
			close(fd);
		hora_net_req_finish(r, -e, msg);
		return;
	}
	struct sockaddr_in b;
	socklen_t bl = sizeof(b);
	getsockname(fd, (struct sockaddr *)&b, &bl);
	*ms->bound = ntohs(b.sin_port);
	ms->cfg.self.ip = b.sin_addr.s_addr;
	ms->cfg.self.port = ntohs(b.sin_port);
	ms->cfg.secret = loop->o.secret;
	ms->cfg.secret_len = loop->o.secret_len;
	char why[256];
	if (hora_swim_cfg_check(&ms->cfg, why, sizeof(why))) {
		close(fd);
		hora_net_req_finish(r, -EINVAL, why);
		return;
	}
	loop->swim = hora_swim_create(&ms->cfg);
	if (!loop->swim) {
		close(fd);
		hora_net_req_finish(r, -ENOMEM, "membership: cannot create the SWIM state");
		return;
	}
	loop->udp_fd = fd;
	loop->udp_op.fn = on_udp;
	loop->swim_op.fn = on_swim_timer;
	hora_swim_join(loop->swim, now_ms(), ms->seeds, ms->nseeds);
	flush(loop);
	arm_recv(loop);
	arm_timer(loop);
	hora_net_req_finish(r, 0, NULL);
}

void hora_net_membership_do_leave(struct hora_net_loop *loop, struct hora_net_req *r)
{
	if (loop->swim) {
		hora_swim_leave(loop->swim, now_ms());
		flush(loop);
	}
	hora_net_req_finish(r, 0, NULL);
}

int hora_net_swim_addr(const char *hp, struct hora_swim_addr *a)
{
	char host[64];
	const char *c = strrchr(hp, ':');
	if (!c || (size_t)(c - hp) >= sizeof(host))
		return -EINVAL;
	memcpy(host, hp, (size_t)(c - hp));
	host[c - hp] = 0;
	char *end;
	long port = strtol(c + 1, &end, 10);
	struct in_addr in;
	if (*end || port < 0 || port > 65535 || inet_pton(AF_INET, host, &in) != 1)
		return -EINVAL;
	a->ip = in.s_addr;
	a->port = (uint16_t)port;
	return 0;
}

/* sync helpers shared with peer.c */
struct hora_net_req *hora_net_sync_req(void);
int hora_net_sync_wait(struct hora_net_loop *loop, struct cmd *c, struct hora_net_req *r, char *err,
		       size_t errlen);

int hora_net_membership_start(struct hora_net_loop *loop, const struct hora_swim_cfg *cfg,
			      const char *host, uint16_t port, uint16_t *bound,
			      const struct hora_swim_addr *seeds, int nseeds, char *err, size_t errlen)
{
	struct hora_net_membership_start ms = {.cfg = *cfg, .bound = bound,
					       .seeds = (struct hora_swim_addr *)seeds, .nseeds = nseeds};
	uint16_t b = 0;
	if (!bound)
		ms.bound = &b;
	ms.addr.sin_family = AF_INET;
	ms.addr.sin_port = htons(port);
	if (inet_pton(AF_INET, host, &ms.addr.sin_addr) != 1) {
		snprintf(err, errlen, "membership: '%s' is not an IPv4 address", host);
		return -EINVAL;
	}
	if (!ms.cfg.uid && getrandom(&ms.cfg.uid, sizeof(ms.cfg.uid), 0) != sizeof(ms.cfg.uid))
		ms.cfg.uid = (uint64_t)hora_net_now_ns() ^ ((uint64_t)getpid() << 40);
	struct cmd *c = calloc(1, sizeof(*c));
	struct hora_net_req *r = hora_net_sync_req();
	if (!c || !r) {
		free(c);
		free(r);
		return -ENOMEM;
	}
	c->kind = CMD_MEMBERSHIP;
	c->arg = &ms;
	return hora_net_sync_wait(loop, c, r, err, errlen);
}

void hora_net_membership_leave(struct hora_net_loop *loop)
{
	struct cmd *c = calloc(1, sizeof(*c));
	struct hora_net_req *r = hora_net_sync_req();
	char err[128];
	if (!c || !r) {
		free(c);
		free(r);
		return;
	}
	c->kind = CMD_LEAVE;
	hora_net_sync_wait(loop, c, r, err, sizeof(err));
}

int hora_net_membership_view(struct hora_net_loop *loop, struct hora_swim_view *v, int *rank,
			     bool *paused, char *why, size_t whylen)
{
	pthread_mutex_lock(&loop->qlock);
	int rc = loop->swim ? 0 : -ENOTCONN;
	*v = loop->mview;
	*rank = loop->mrank;
	*paused = loop->mpaused;
	if (why && whylen)
		snprintf(why, whylen, "%s", loop->mwhy);
	pthread_mutex_unlock(&loop->qlock);
	return rc;
}

int hora_net_membership_alive(struct hora_net_loop *loop)
{
	pthread_mutex_lock(&loop->qlock);
	int n = loop->malive;
	pthread_mutex_unlock(&loop->qlock);
	return n;
}

bool hora_net_membership_joined(struct hora_net_loop *loop)
{
	pthread_mutex_lock(&loop->qlock);
	bool j = loop->mjoined;
	pthread_mutex_unlock(&loop->qlock);
	return j;
}

void hora_net_membership_stats(struct hora_net_loop *loop, struct hora_swim_stats *st)
{
	pthread_mutex_lock(&loop->qlock);
	*st = loop->mstats;
	pthread_mutex_unlock(&loop->qlock);
}

int hora_net_membership_wait(struct hora_net_loop *loop, uint64_t known, bool known_paused,
			     int timeout_ms)
{
	struct timespec ts;
	hora_net_deadline(&ts, timeout_ms);
	int rc = 0;
	pthread_mutex_lock(&loop->qlock);
	int alive0 = loop->malive;
	while (loop->mview.id == known && loop->mpaused == known_paused && loop->malive == alive0 &&
	       !loop->dead && !rc) {
		if (timeout_ms < 0)
			pthread_cond_wait(&loop->qcond, &loop->qlock);
		else if (pthread_cond_timedwait(&loop->qcond, &loop->qlock, &ts))
			rc = -ETIMEDOUT;
	}
	if (!rc && loop->dead)
		rc = -ESHUTDOWN;
	pthread_mutex_unlock(&loop->qlock);
	return rc;
}

/* ---- application status (stall inspector) ------------------------------------ */

struct status_cmd {
	int op; /* 0 set the source, 1 query */
	void (*get)(void *arg, struct hora_swim_status *st);
	void *arg;
	int64_t at; /* query: when it was sent */
};

void hora_net_membership_do_status(struct hora_net_loop *loop, struct cmd *c)
{
	struct status_cmd *sc = c->arg;
	if (!loop->swim) {
		hora_net_req_finish(c->req, -ENOTCONN, "membership is not running");
		return;
	}
	if (sc->op == 0) {
		hora_swim_status_source(loop->swim, sc->get, sc->arg);
	} else {
		sc->at = now_ms();
		hora_swim_status_query(loop->swim, sc->at);
		flush(loop);
	}
	hora_net_req_finish(c->req, 0, NULL);
}

static int status_cmd(struct hora_net_loop *loop, struct status_cmd *sc)
{
	struct cmd *c = calloc(1, sizeof(*c));
	struct hora_net_req *r = hora_net_sync_req();
	char err[128];
	if (!c || !r) {
		free(c);
		free(r);
		return -ENOMEM;
	}
	c->kind = CMD_STATUS;
	c->arg = sc;
	return hora_net_sync_wait(loop, c, r, err, sizeof(err));
}

int hora_net_membership_status_source(struct hora_net_loop *loop,
				      void (*get)(void *arg, struct hora_swim_status *st), void *arg)
{
	struct status_cmd sc = {.op = 0, .get = get, .arg = arg};
	return status_cmd(loop, &sc);
}

int hora_net_membership_status_query(struct hora_net_loop *loop, int64_t *sent_ms)
{
	struct status_cmd sc = {.op = 1};
	int rc = status_cmd(loop, &sc);
	*sent_ms = sc.at;
	return rc;
}

int hora_net_membership_status(struct hora_net_loop *loop, int rank, int64_t since_ms,
			       struct hora_swim_status *st)
{
	pthread_mutex_lock(&loop->qlock);
	int rc = -ENOENT;
	if (rank >= 0 && rank < loop->nmstatus && loop->mstatus[rank].at &&
	    loop->mstatus[rank].at >= since_ms) {
		*st = loop->mstatus[rank].st;
		rc = 0;
	}
	pthread_mutex_unlock(&loop->qlock);
	return rc;
}
