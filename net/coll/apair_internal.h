/* apair_internal.h - what apair.c (the messages, on the link's progress
 * thread) and apair_call.c (the caller's calls and the averaging) share:
 * the engine's state. Not an API. */
#ifndef HORA_NET_COLL_APAIR_INTERNAL_H
#define HORA_NET_COLL_APAIR_INTERNAL_H

#include "net/coll/apair.h"
#include "net/coll/internal.h"

#include <pthread.h>
#include <stdbool.h>

#define AP_MAGIC 0x52504148u /* "HAPR" */
#define AP_HEAD_FIXED 32     /* magic u32, kind u8, pad, seq u64, count u64, pad */

enum ap_kind {
	K_REQ = 1, K_GO, K_BUSY, K_AVG,
	K_ERR,  /* a request refused: the models differ in size */
	K_VIEW, /* the counters alone (a rank that closed tells every peer) */
};
enum ap_role { IDLE, OUT, IN };
enum ap_phase {
	NONE,
	/* initiator: the caller copies x (PREP), asks, sends after GO, has the
	 * average (GOT) or an answer (BUSY, FAILED), applies it (APPLYING) */
	OUT_PREP, OUT_ASKED, OUT_SENDING, OUT_GOT, OUT_BUSY, OUT_FAILED, OUT_APPLYING,
	/* responder: the initiator's model comes (WAIT), is in (READY), the
	 * caller averages (SERVING), the average goes back (REPLYING) */
	IN_WAIT, IN_READY, IN_SERVING, IN_REPLYING,
};

struct ap_peer {
	struct hora_net_apair *a;
	int rank;
	bool gone;     /* mu: its stream failed, or this engine stopped reading it */
	uint8_t *head; /* the standing head receive (progress thread) */
};

/* Everything below is guarded by mu, but the buffers: sent, got, in and
 * reply belong to whoever the phase and the *_posted flags say (the link
 * while posted, the caller in PREP / APPLYING / SERVING). The exchange ends
 * (IDLE) only once no buffer of it is posted and the caller is done. */
struct hora_net_apair {
	struct hora_net_comm *chan;
	struct hora_net_link *link;
	int rank, n;
	size_t count, bytes, hbytes;
	enum hora_net_dtype t;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* the exchange moved */
	enum ap_role role;
	enum ap_phase phase;
	int partner;
	bool lost;         /* the partner failed: end once our buffers are back */
	bool in_posted, got_posted, sent_posted, reply_posted;
	uint64_t seq;      /* ours: the last request's; theirs while IN */
	uint64_t next;     /* our next request's number */
	double t_start_s, t_done_s; /* our request: asked, answered */
	bool closed, stopping;
	int broken;        /* 0, or the code every call returns */
	char err[400];     /* the first failure */
	uint64_t *view;    /* n counters */
	struct hora_net_apair_stats st;
	struct ap_peer *peer;
	uint8_t *sent, *got, *in, *reply; /* bytes each */
};

/* apair.c */
uint8_t *hora_ap_head_new(struct hora_net_apair *a, enum ap_kind k, uint64_t seq); /* mu held */
int hora_ap_send_head(struct hora_net_apair *a, int p, uint8_t *h);               /* h freed */
void hora_ap_peer_gone(struct hora_net_apair *a, int p, const char *why); /* mu held */
void hora_ap_post_head_recv(struct ap_peer *pp);
void hora_ap_on_reply_sent(void *arg, int status, const char *err);
void hora_ap_set_err(struct hora_net_apair *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
