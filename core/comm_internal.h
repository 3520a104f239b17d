/* comm_internal.h - the communicator's state, shared by comm.c,
 * comm_watch.c (the monitor thread) and comm_keep.c (a joiner's readiness
 * rounds); nothing else includes it. */
#ifndef HORA_CORE_COMM_INTERNAL_H
#define HORA_CORE_COMM_INTERNAL_H

#include "comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct hora_request;
struct chan_cfg;
struct hora_devcoll;
struct hora_net_shm_regions;

struct hora_comm {
	struct hora_net_comm *net;
	pthread_mutex_t mu;
	pthread_cond_t cv;       /* queue changed, a request finished, inline call ended */
	struct hora_request *head, *tail;
	bool running;            /* the background thread is executing a request */
	bool inline_busy;        /* a blocking call is executing on its caller's thread */
	bool stop, started;
	int waiters;             /* threads blocked on cv for a request (destroy waits for them) */
	pthread_t thread;
	int local_rank, local_size; /* ranks on this rank's host (same address) */
	struct hora_net_loop *owned_loop;
	struct hora_net_membership *owned_m;
	/* the monitor thread (needs the membership): loss watcher, stall inspector */
	struct hora_comm_member *members; /* size of them, rank order (NULL: not watched) */
	uint64_t view_id;                 /* the view the communicator was formed over */
	bool stall_on;                    /* hora_comm_set_stall was called (mu) */
	double stall_warn_s, stall_abort_s;
	pthread_t monitor;
	bool monitor_started;
	_Atomic bool monitor_stop;
	/* HORA_ERR_STALL or HORA_ERR_LOST once the monitor stopped the job
	 * (stop_msg is written before, read after: release/acquire); written by
	 * the monitor thread, a failed re-form and a keeper giving up
	 * (comm_keep.c) */
	_Atomic int stopped;
	/* a stop is being decided (the stall report being made, the view
	 * without a dead member awaited): a call that fails meanwhile waits */
	_Atomic bool stop_pending;
	/* the monitor found that the others dropped this worker (a newer view
	 * lacks it or re-admitted it): the re-form's line says so; cleared by
	 * hora_comm_dropped */
	_Atomic bool dropped;
	uint64_t long_pauses; /* the membership's long pauses when the monitor started (monitor) */
	char stop_msg[1280];
	struct hora_fusion_override fusion; /* set by hora_init before any call */
	/* elastic training (hora_comm_set_elastic): a lost rank interrupts with
	 * HORA_ERR_VIEW and hora_comm_reform builds the next net comm */
	struct hora_comm_elastic el;
	bool elastic;
	pthread_mutex_t net_mu; /* c->net against the status callback during a re-form */
	int last_rank;          /* the rank before a re-form that failed (net NULL) */
	enum hora_algo algo;    /* for the next net comm */
	/* what hora_comm_open_channel needs to form another net comm over the
	 * same ranks (hora_comm_create_net; NULL for other communicators) */
	struct chan_cfg *chan;
	/* collectives on device buffers (devcoll.c): NULL until the first;
	 * used by the thread executing a request (one at a time) */
	struct hora_devcoll *_Atomic dev;
	/* hora_comm_mem_alloc's memory (thread-safe itself; NULL: ordinary
	 * memory only); every net comm borrows it */
	struct hora_net_shm_regions *regions;
	/* a joiner's keeper (comm_keep.c): it answers the readiness rounds
	 * the others run after admitting it, until this worker's own first
	 * call claims the communicator. keeper_live: a keeper thread to stop
	 * and join (read without mu on every call); the rest under mu. */
	_Atomic bool keeper_live;
	pthread_t keeper;
	bool keeping;     /* the keeper is in its rounds */
	bool keep_claimed; /* a call of this worker's own has come */
	bool keep_abandon; /* the worker ends first (hora_comm_destroy) */
	bool ready_done;  /* this formation's readiness rounds ended on this rank */
	double keep_wait_s; /* a keeper not claimed this long leaves the job */
};

/* comm_watch.c. Start the monitor thread when c has a membership and more
 * than one rank and none runs (c->mu held). */
void hora_comm_watch_start(struct hora_comm *c);
/* Answer the membership's status queries from c, then start the monitor
 * (hora_comm_own_loop, once c->owned_m and c->members are set). */
void hora_comm_watch_begin(struct hora_comm *c);
/* Stop the monitor thread and join it (it wakes within 100 ms). */
void hora_comm_watch_stop(struct hora_comm *c);
/* What a call that failed with st returns: after the monitor stopped the
 * job, its code (HORA_ERR_LOST, _VIEW, _STALL; the message is then
 * c->stop_msg). A call that fails while a stop is being decided, or while
 * a rank is dead in the membership and the monitor has not looked yet,
 * waits for it (at most 3 s); on a plain (not elastic) communicator, one
 * that fails on a broken link (-ECONNRESET, -EPIPE, -ENOTCONN, ...: a
 * member's socket, shared-memory channel or stage gone) waits too, for the
 * watcher to find the member dead, until a rank left gracefully instead or
 * hora_comm_detect_s. Else st. On the calling thread; takes c->mu. */
int hora_comm_watch_verdict(struct hora_comm *c, int st);

/* comm_keep.c: stop a keeper before a call of this worker's own (the
 * first claims the communicator: the keeper ends its rounds, saying this
 * worker is ready, and is joined). Cheap when there is none. */
void hora_comm_keep_claim(struct hora_comm *c);
/* hora_comm_destroy's: a keeper still in its rounds gives up (the worker
 * leaves; the others re-form without it) and is joined. */
void hora_comm_keep_abandon(struct hora_comm *c);

#endif
