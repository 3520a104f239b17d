/* link_shm_threads.c - a ThreadSanitizer driver for the shared-memory link
 * (net/coll/link_shm.c; deploy/test.sh builds it with HORA_TSAN=ON). Four
 * ranks as threads of one process, joined pairwise by socketpairs, each
 * creating its link at once: a ring of callbacks that post the next send
 * and receive from the progress thread (messages beyond the ring), every
 * rank sending to every other on the queued path while it exchanges
 * around the ring on the caller-driven one, then an interrupt from another
 * thread of a rank blocked in an exchange and a posted receive, and close.
 * Exit status 0 only when every check holds; TSan makes any data race a
 * failure of its own (exit 66). */
#include "net/coll/link_shm.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define N 4
#define STEPS 12
#define LEN (300u << 10) /* beyond the 256 KiB queued ring */

static int socks[N][N];
static pthread_barrier_t bar;

struct rank {
	int me, left, right, rc;
	struct hora_net_link *l;
	uint8_t *sb[STEPS], *rb[STEPS];
	int t[STEPS];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sends, recvs, bad;
	char err[512];
};
static struct rank ranks[N];

static uint8_t byte_of(int from, int t, size_t i)
{
	return (uint8_t)(from * 31 + t * 7 + i * 13);
}

static void on_send(void *arg, int status, const char *e)
{
	struct rank *r = arg;
	pthread_mutex_lock(&r->mu);
	r->sends++;
	if (status && !r->bad)
		r->bad = 1, snprintf(r->err, sizeof(r->err), "send: %s", e ? e : "");
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void on_recv(void *arg, int status, const char *e)
{
	int *tp = arg;
	const int t = *tp;
	struct rank *r = (struct rank *)((char *)(tp - t) - offsetof(struct rank, t));
	pthread_mutex_lock(&r->mu);
	r->recvs++;
	for (size_t i = 0; !status && !r->bad && i < LEN; i += 4093)
		if (r->rb[t][i] != byte_of(r->left, t, i))
			r->bad = 1, snprintf(r->err, sizeof(r->err), "step %d: wrong byte %zu", t, i);
	if (status && !r->bad)
		r->bad = 1, snprintf(r->err, sizeof(r->err), "receive: %s", e ? e : "");
	if (!r->bad && t + 1 < STEPS)
		r->l->ops->post_send(r->l, r->right, r->sb[t + 1], LEN, on_send, r, NULL);
	if (!r->bad && t + 2 < STEPS)
		r->l->ops->post_recv(r->l, r->left, r->rb[t + 2], LEN, on_recv, &r->t[t + 2], NULL);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static int ring_of_callbacks(struct rank *r)
{
	struct hora_net_link *l = r->l;
	for (int t = 0; t < STEPS; t++) {
		r->t[t] = t;
		r->sb[t] = malloc(LEN);
		r->rb[t] = malloc(LEN);
		for (size_t i = 0; i < LEN; i++)
			r->sb[t][i] = byte_of(r->me, t, i);
	}
	pthread_mutex_lock(&r->mu);
	if (l->ops->post_recv(l, r->left, r->rb[0], LEN, on_recv, &r->t[0], NULL) ||
	    l->ops->post_recv(l, r->left, r->rb[1], LEN, on_recv, &r->t[1], NULL) ||
	    l->ops->post_send(l, r->right, r->sb[0], LEN, on_send, r, NULL))
		r->bad = 1;
	while (!r->bad && (r->sends < STEPS || r->recvs < STEPS))
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	for (int t = 0; t < STEPS; t++)
		free(r->sb[t]), free(r->rb[t]);
	return r->bad;
}

/* every peer on the queued path (requests) while exchanging around the ring */
static int all_at_once(struct rank *r)
{
	struct hora_net_link *l = r->l;
	uint8_t out[N][1000], in[N][1000], xo[5000], xi[5000];
	struct hora_net_link_req *sq[N], *rq[N];
	for (int j = 0; j < N; j++) {
		if (j == r->me)
			continue;
		memset(out[j], r->me * N + j, sizeof(out[j]));
		if (l->ops->post_recv(l, j, in[j], sizeof(in[j]), NULL, NULL, &rq[j]) ||
		    l->ops->post_send(l, j, out[j], sizeof(out[j]), NULL, NULL, &sq[j]))
			return snprintf(r->err, sizeof(r->err), "post"), 1;
	}
	for (int k = 0; k < 20; k++) {
		uint32_t oh = (uint32_t)k, ih = 99;
		memset(xo, r->me + k, sizeof(xo));
		struct hora_net_link_xchg x = {.to = r->right, .out_head = &oh, .out_body = xo, .out_bytes = sizeof(xo),
					       .from = r->left, .in_head = &ih, .in_body = xi, .in_bytes = sizeof(xi),
					       .head_bytes = 4, .err = r->err, .errlen = sizeof(r->err)};
		if (l->ops->exchange(l, &x) || ih != (uint32_t)k || xi[77] != (uint8_t)(r->left + k))
			return 1;
	}
	for (int j = 0; j < N; j++) {
		if (j == r->me)
			continue;
		if (l->ops->wait(rq[j], r->err, sizeof(r->err)) || l->ops->wait(sq[j], r->err, sizeof(r->err)))
			return 1;
		if (in[j][500] != (uint8_t)(j * N + r->me))
			return snprintf(r->err, sizeof(r->err), "from %d: wrong bytes", j), 1;
	}
	return 0;
}

static void *interrupter(void *arg)
{
	struct hora_net_link *l = arg;
	usleep(50 * 1000);
	l->ops->interrupt(l, "interrupted by the driver");
	return NULL;
}

/* rank 0 blocks on rank 1 (silent until rank 0's notice) and is interrupted */
static int interrupt_and_close(struct rank *r)
{
	struct hora_net_link *l = r->l;
	uint8_t b[32] = {0};
	if (r->me == 1)
		return l->ops->peek(l, 0, b, sizeof(b), 20000) != 0;
	if (r->me != 0)
		return 0;
	struct hora_net_link_req *q;
	if (l->ops->post_recv(l, 1, b, sizeof(b), NULL, NULL, &q))
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, interrupter, l);
	struct hora_net_link_xchg x = {.to = -1, .from = 1, .in_head = b, .head_bytes = 32, .err = r->err,
				       .errlen = sizeof(r->err)};
	int rc = l->ops->exchange(l, &x);
	pthread_join(t, NULL);
	if (rc != -ECANCELED || l->ops->wait(q, r->err, sizeof(r->err)) != -ECANCELED)
		return 1;
	if (l->ops->notify(l, 1, b, sizeof(b)))
		return snprintf(r->err, sizeof(r->err), "notify after the interrupt"), 1;
	l->ops->close(l, 1);
	return l->ops->post_send(l, 1, b, sizeof(b), NULL, NULL, &q) != -ENOTCONN;
}

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	int sk[N];
	for (int j = 0; j < N; j++)
		sk[j] = j == r->me ? -1 : socks[r->me][j];
	struct hora_net_link_shm_cfg cfg = {.rank = r->me, .nranks = N, .socks = sk, .queued_ring = 256 << 10,
					    .fast_ring = 64 << 10, .io_timeout_ms = 20000,
					    .connect_timeout_ms = 20000};
	if (hora_net_link_shm_create(&cfg, &r->l, r->err, sizeof(r->err))) {
		r->rc = 1;
		pthread_barrier_wait(&bar);
		pthread_barrier_wait(&bar);
		return NULL;
	}
	r->rc = ring_of_callbacks(r) ? 2 : all_at_once(r) ? 3 : 0;
	pthread_barrier_wait(&bar); /* nobody closes while another still reads */
	if (!r->rc && interrupt_and_close(r))
		r->rc = 4;
	pthread_barrier_wait(&bar);
	r->l->ops->destroy(r->l);
	return NULL;
}

int main(void)
{
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++) {
			int p[2];
			if (socketpair(AF_UNIX, SOCK_STREAM, 0, p))
				return 1;
			socks[i][j] = p[0], socks[j][i] = p[1];
		}
	pthread_barrier_init(&bar, NULL, N);
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		ranks[i] = (struct rank){.me = i, .left = (i + N - 1) % N, .right = (i + 1) % N};
		pthread_mutex_init(&ranks[i].mu, NULL);
		pthread_cond_init(&ranks[i].cv, NULL);
		pthread_create(&t[i], NULL, rank_main, &ranks[i]);
	}
	int bad = 0;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		if (ranks[i].rc) {
			fprintf(stderr, "rank %d: failed at stage %d: %s\n", i, ranks[i].rc, ranks[i].err);
			bad = 1;
		}
	}
	printf("link_shm_threads: %s\n", bad ? "FAILED" : "ok");
	return bad;
}
